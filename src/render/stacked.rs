//! The stacked Active Memory Timeline as SVG, written by hand (every band a path with an index
//! the HTML page looks up), and as one self-contained HTML page: the same SVG inline, the bands'
//! details as JSON, and a little script for hover and x zoom. No network, no libraries.

use std::fmt::Write as _;

use crate::analysis::memviz::format_size;
use crate::analysis::stacked::{BandBy, Stacked};
use crate::model::Units;

use super::xml_escape as esc;

use super::ticks::{nice_ticks, tick_labels, time_unit};

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 30.0;
/// Title, then a strip for the peak, OOM and annotation labels, clear of the data.
const TOP: f64 = 96.0;
const PLOT_H: f64 = 460.0;
const AXIS_H: f64 = 52.0;
const LEGEND_LINE: f64 = 17.0;
/// Pixel columns of the plotting area: the analysis aggregates to this.
pub const COLUMNS: usize = (WIDTH - LEFT - RIGHT) as usize;

/// tab20, as matplotlib and `_memory_viz` colour allocations.
const PALETTE: [&str; 20] = [
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
    "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7",
    "#bcbd22", "#dbdb8d", "#17becf", "#9edae5",
];
const OTHER: &str = "#d0d0d0";

pub struct StackedChart<'a> {
    pub title: String,
    pub data: &'a Stacked,
    pub units: Units,
}

fn color(k: usize) -> &'static str {
    // even entries first: the strong colours before their pale partners
    PALETTE[(k * 2 + (k / 10) % 2) % PALETTE.len()]
}

struct Frame {
    x0: f64,
    x1: f64,
    y_max: f64,
    plot_w: f64,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        LEFT + (x - self.x0) / (self.x1 - self.x0) * self.plot_w
    }
    fn py(&self, bytes: f64) -> f64 {
        TOP + PLOT_H - bytes / self.y_max * PLOT_H
    }
}

/// The chart as an SVG document.
pub fn svg(chart: &StackedChart) -> String {
    let d = chart.data;
    let legend_rows = d.bands.len() + 1;
    let height = TOP + PLOT_H + AXIS_H + 10.0 + LEGEND_LINE * legend_rows as f64 + 10.0;
    let (x0, mut x1) = d.x_range;
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let peak = d.samples.iter().map(|s| s.total).max().unwrap_or(0).max(1) as f64;
    let units = chart.units.resolve(peak);
    let y_ticks = nice_ticks(0.0, units.scale(peak), 6);
    let y_top = y_ticks
        .last()
        .map_or(peak, |&t| t * (peak / units.scale(peak)))
        .max(peak);
    let f = Frame {
        x0,
        x1,
        y_max: y_top,
        plot_w: WIDTH - LEFT - RIGHT,
    };
    let mut s = String::with_capacity(64 * 1024);
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">
<rect width="100%" height="100%" fill="#ffffff"/>
<defs><clipPath id="plotclip"><rect x="{LEFT}" y="{TOP}" width="{pw}" height="{PLOT_H}"/></clipPath></defs>
<text x="{cx}" y="24" text-anchor="middle" font-size="17" font-weight="bold">{title}</text>
<text x="{cx}" y="42" text-anchor="middle" fill="#555555">{subtitle}</text>
"##,
        pw = f.plot_w,
        cx = WIDTH / 2.0,
        title = esc(&chart.title),
        subtitle = esc(&subtitle(d)),
    );
    // y grid and ticks
    let labels = tick_labels(&y_ticks);
    for (t, label) in y_ticks.iter().zip(&labels) {
        let y = f.py(t * (peak / units.scale(peak)));
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{x2}" y1="{y:.1}" y2="{y:.1}" stroke="#e6e6e6"/><text x="{tx}" y="{ty:.1}" text-anchor="end">{label}</text>"##,
            x2 = LEFT + f.plot_w,
            tx = LEFT - 6.0,
            ty = y + 4.0,
        );
    }
    let _ = writeln!(
        s,
        r##"<text transform="translate(22 {y}) rotate(-90)" text-anchor="middle">allocated ({u})</text>"##,
        y = TOP + PLOT_H / 2.0,
        u = units.name(),
    );
    // the bands, clipped to the plotting area; the page's zoom transforms #data
    s.push_str(r#"<g clip-path="url(#plotclip)"><g id="data">"#);
    s.push('\n');
    for k in 0..d.bands.len() {
        let path = band_path(d, &f, k);
        if !path.is_empty() {
            let _ = writeln!(
                s,
                r#"<path class="band" data-band="{k}" fill="{}" d="{path}"/>"#,
                color(k)
            );
        }
    }
    let _ = writeln!(
        s,
        r#"<path class="band" data-band="other" fill="{OTHER}" d="{}"/>"#,
        other_path(d, &f)
    );
    let _ = writeln!(
        s,
        r##"<path fill="none" stroke="#333333" stroke-width="1" vector-effect="non-scaling-stroke" d="{}"/>"##,
        top_edge(d, &f)
    );
    // OOMs and annotations: lines in the data, labels in the strip above
    for o in &d.ooms {
        let x = f.px(o.x);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{y2}" stroke="#d62728" stroke-width="1.5" stroke-dasharray="5 3" vector-effect="non-scaling-stroke"/>"##,
            y2 = TOP + PLOT_H,
        );
    }
    s.push_str("</g></g>\n");
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{PLOT_H}" fill="none" stroke="#888888"/>"##,
        pw = f.plot_w
    );
    // labels in the strip above the plot (TOP-26 .. TOP-4): OOMs, annotations, the peak
    s.push_str("<g id=\"marks\">\n");
    for (i, o) in d.ooms.iter().enumerate() {
        let x = f.px(o.x);
        let _ = writeln!(
            s,
            r##"<text class="mark" data-x="{xv}" x="{x:.1}" y="{y}" text-anchor="middle" fill="#d62728" font-weight="bold">OOM{n}</text>"##,
            xv = o.x,
            y = TOP - 18.0 + (i % 2) as f64 * 11.0,
            n = if d.ooms.len() > 1 {
                format!(" {}", i + 1)
            } else {
                String::new()
            },
        );
    }
    // annotations come in START/END pairs and in every iteration: label one where there is room
    let mut last_label = f64::NEG_INFINITY;
    for a in &d.annotations {
        let x = f.px(a.x);
        let label = format!("{} {}", a.name, a.stage.to_ascii_lowercase());
        let room = x - last_label > 7.0 * label.chars().count() as f64
            && x + 6.0 * label.chars().count() as f64 <= WIDTH;
        let label = if room {
            last_label = x;
            label
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            r##"<g class="mark" data-x="{xv}"><line x1="{x:.1}" x2="{x:.1}" y1="{y1}" y2="{y2}" stroke="#9467bd" stroke-dasharray="2 2"/><text x="{tx:.1}" y="{ty}" fill="#9467bd" font-size="10">{label}</text></g>"##,
            xv = a.x,
            y1 = TOP - 12.0,
            y2 = TOP + PLOT_H,
            tx = x + 2.0,
            ty = TOP - 4.0,
            label = esc(&label),
        );
    }
    // the moment `--at` asked for: a line through the data, labelled with its allocated bytes
    if let Some(m) = d.moment.as_ref() {
        let x = f.px(m.x);
        let label = format!("{} {}", m.label, format_size(m.bytes));
        let anchor = if x > LEFT + f.plot_w * 0.8 {
            "end"
        } else {
            "start"
        };
        let _ = writeln!(
            s,
            r##"<g class="mark" id="moment" data-x="{xv}" data-index="{index}"><line x1="{x:.1}" x2="{x:.1}" y1="{y1}" y2="{y2}" stroke="#1f77b4" stroke-width="1.5" vector-effect="non-scaling-stroke"/><text x="{tx:.1}" y="{ty}" text-anchor="{anchor}" fill="#1f77b4" font-weight="bold">{label}</text></g>"##,
            xv = m.x,
            index = m.index,
            y1 = TOP - 12.0,
            y2 = TOP + PLOT_H,
            tx = if anchor == "end" { x - 3.0 } else { x + 3.0 },
            ty = TOP + 12.0,
            label = esc(&label),
        );
    }
    if let Some(p) = d.peak.as_ref() {
        let x = f.px(p.x);
        let y = f.py(p.bytes as f64);
        let text = format!("peak {}", format_size(p.bytes));
        let anchor = if x > LEFT + f.plot_w * 0.8 {
            "end"
        } else if x < LEFT + f.plot_w * 0.2 {
            "start"
        } else {
            "middle"
        };
        let _ = writeln!(
            s,
            r##"<g class="mark" data-x="{xv}"><line x1="{x:.1}" x2="{x:.1}" y1="{ly}" y2="{y:.1}" stroke="#222222" stroke-dasharray="1 2"/><circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="#222222"/><text x="{x:.1}" y="{ty}" text-anchor="{anchor}" font-weight="bold">{text}</text></g>"##,
            xv = p.x,
            ly = TOP - 30.0,
            ty = TOP - 34.0,
        );
    }
    s.push_str("</g>\n");
    // x axis
    let (scale, unit) = if d.x_is_time {
        time_unit(x1 - x0)
    } else {
        (1.0, "")
    };
    let x_ticks = nice_ticks(x0 * scale, x1 * scale, 10);
    let x_labels: Vec<String> = if d.x_is_time {
        tick_labels(&x_ticks)
    } else {
        // event numbers: whole, with thousands separators
        x_ticks
            .iter()
            .map(|t| super::thousands(t.max(0.0).round() as usize))
            .collect()
    };
    s.push_str("<g id=\"xticks\">\n");
    for (t, label) in x_ticks.iter().zip(&x_labels) {
        let x = f.px(t / scale);
        if x < LEFT - 0.5 || x > LEFT + f.plot_w + 0.5 {
            continue;
        }
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{y1}" y2="{y2}" stroke="#888888"/><text x="{x:.1}" y="{ty}" text-anchor="middle">{label}</text>"##,
            y1 = TOP + PLOT_H,
            y2 = TOP + PLOT_H + 5.0,
            ty = TOP + PLOT_H + 19.0,
        );
    }
    s.push_str("</g>\n");
    let x_title = if d.x_is_time {
        format!("time since the first trace event ({unit})")
    } else if d.has_time {
        "trace event".to_string()
    } else {
        "trace event (the file has no time_us)".to_string()
    };
    let _ = writeln!(
        s,
        r#"<text id="xtitle" x="{cx}" y="{y}" text-anchor="middle" data-scale="{scale}">{x_title}</text>"#,
        cx = LEFT + f.plot_w / 2.0,
        y = TOP + PLOT_H + 40.0,
    );
    // legend
    let mut y = TOP + PLOT_H + AXIS_H + 14.0;
    for (k, b) in d.bands.iter().enumerate() {
        let what = match d.by {
            BandBy::Allocation => format_size(b.bytes as i64),
            BandBy::Site => format!(
                "{} max, {} allocation{}",
                format_size(b.bytes as i64),
                b.allocations,
                if b.allocations == 1 { "" } else { "s" }
            ),
        };
        legend_row(&mut s, y, color(k), &what, &b.site, d.by);
        y += LEGEND_LINE;
    }
    let rest = d.other_allocations;
    let what = match (rest, d.by) {
        (0, _) => "memory allocated before the trace began and never freed in it".to_string(),
        (_, BandBy::Allocation) => format!(
            "{rest} smaller allocation{}, and memory allocated before the trace began",
            if rest == 1 { "" } else { "s" }
        ),
        (_, BandBy::Site) => format!(
            "{rest} allocation{} at other sites, and memory allocated before the trace began",
            if rest == 1 { "" } else { "s" }
        ),
    };
    legend_row(&mut s, y, OTHER, "other", &what, d.by);
    s.push_str("</svg>\n");
    s
}

fn legend_row(s: &mut String, y: f64, color: &str, what: &str, site: &str, by: BandBy) {
    let site = if site.chars().count() > 110 {
        let cut: String = site.chars().take(109).collect();
        format!("{cut}…")
    } else {
        site.to_string()
    };
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{ry}" width="12" height="12" fill="{color}" stroke="#666666" stroke-width="0.5"/><text x="{tx}" y="{y}">{what}</text><text x="{sx}" y="{y}" fill="#444444">{site}</text>"##,
        ry = y - 10.0,
        tx = LEFT + 18.0,
        sx = LEFT
            + match by {
                BandBy::Allocation => 110.0,
                BandBy::Site => 290.0,
            },
        what = esc(what),
        site = esc(&site),
    );
}

fn subtitle(d: &Stacked) -> String {
    let mut s = format!(
        "cuda:{}, {} trace events, {} allocations; ",
        d.device,
        super::thousands(d.events),
        super::thousands(d.allocations)
    );
    match d.by {
        BandBy::Allocation => {
            let _ = write!(
                s,
                "the {} largest allocations (bytes × time live) as bands",
                d.bands.len()
            );
        }
        BandBy::Site => {
            let _ = write!(s, "the {} largest sites as bands", d.bands.len());
        }
    }
    s.push_str(", the rest grey; the top edge is allocated memory");
    s
}

/// x where sample `i`'s value ends: the next sample, or the end of the range.
fn x_end(d: &Stacked, f: &Frame, i: usize) -> f64 {
    d.samples.get(i + 1).map_or(f.x1, |n| n.x)
}

/// Stepped outline between `lo(i)` and `hi(i)` over the samples where they differ, one
/// subpath per run.
fn area(d: &Stacked, f: &Frame, lo: impl Fn(usize) -> f64, hi: impl Fn(usize) -> f64) -> String {
    let mut out = String::new();
    let n = d.samples.len();
    let mut i = 0;
    while i < n {
        if hi(i) <= lo(i) {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && hi(i) > lo(i) {
            i += 1;
        }
        let run = start..i;
        // upper edge left to right, lower edge right to left
        let _ = write!(
            out,
            "M{:.1} {:.1}",
            f.px(d.samples[start].x),
            f.py(hi(start))
        );
        let mut last_y = f.py(hi(start));
        for j in run.clone() {
            let y = f.py(hi(j));
            if (y - last_y).abs() >= 0.05 {
                let _ = write!(out, "H{:.1}V{y:.1}", f.px(d.samples[j].x));
                last_y = y;
            }
        }
        let _ = write!(out, "H{:.1}", f.px(x_end(d, f, i - 1)));
        let mut last_y = f64::NAN;
        for j in run.rev() {
            let y = f.py(lo(j));
            if last_y.is_nan() || (y - last_y).abs() >= 0.05 {
                if last_y.is_nan() {
                    let _ = write!(out, "V{y:.1}");
                } else {
                    let _ = write!(out, "H{:.1}V{y:.1}", f.px(x_end(d, f, j)));
                }
                last_y = y;
            }
        }
        let _ = write!(out, "H{:.1}Z", f.px(d.samples[start].x));
    }
    out
}

fn below(d: &Stacked, i: usize, k: usize) -> f64 {
    d.samples[i].bands[..k].iter().sum::<i64>() as f64
}

fn band_path(d: &Stacked, f: &Frame, k: usize) -> String {
    area(
        d,
        f,
        |i| below(d, i, k),
        |i| below(d, i, k) + d.samples[i].bands[k] as f64,
    )
}

fn other_path(d: &Stacked, f: &Frame) -> String {
    let n = d.bands.len();
    area(
        d,
        f,
        |i| below(d, i, n),
        |i| (d.samples[i].total as f64).max(below(d, i, n)),
    )
}

fn top_edge(d: &Stacked, f: &Frame) -> String {
    let mut out = String::new();
    for (i, sm) in d.samples.iter().enumerate() {
        let y = f.py(sm.total as f64);
        if i == 0 {
            let _ = write!(out, "M{:.1} {y:.1}", f.px(sm.x));
        } else {
            let _ = write!(out, "V{y:.1}");
        }
        let _ = write!(out, "H{:.1}", f.px(x_end(d, f, i)));
    }
    out
}

/// The page: the SVG inline, the bands as JSON, hover and zoom.
pub fn html(chart: &StackedChart) -> String {
    #[derive(serde::Serialize)]
    struct Details<'a> {
        title: &'a str,
        x_is_time: bool,
        x_range: (f64, f64),
        left: f64,
        plot_w: f64,
        bands: Vec<BandJson<'a>>,
        other: String,
    }
    #[derive(serde::Serialize)]
    struct BandJson<'a> {
        size: String,
        site: &'a str,
        allocations: u64,
        stack: &'a [String],
        alloc: String,
        free: String,
    }
    let d = chart.data;
    let when = |x: Option<f64>, none: &str| match x {
        Some(x) if d.x_is_time => format!("{:.6} s", x),
        Some(x) => format!("event {}", x as u64),
        None => none.to_string(),
    };
    let details = Details {
        title: &chart.title,
        x_is_time: d.x_is_time,
        x_range: d.x_range,
        left: LEFT,
        plot_w: WIDTH - LEFT - RIGHT,
        bands: d
            .bands
            .iter()
            .map(|b| BandJson {
                size: match d.by {
                    BandBy::Allocation => format_size(b.bytes as i64),
                    BandBy::Site => format!("{} at most", format_size(b.bytes as i64)),
                },
                site: &b.site,
                allocations: b.allocations,
                stack: &b.stack,
                alloc: match d.by {
                    BandBy::Allocation => when(b.alloc_x, "before the trace began"),
                    BandBy::Site => String::new(),
                },
                free: match d.by {
                    BandBy::Allocation => when(b.free_x, "still allocated at the end"),
                    BandBy::Site => String::new(),
                },
            })
            .collect(),
        other: "smaller allocations, and memory allocated before the trace began".into(),
    };
    // `</` cannot end the script early: JSON escapes it
    let json = serde_json::to_string(&details)
        .expect("plain data")
        .replace("</", "<\\/");
    format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ margin: 0; font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; }}
#help {{ margin: 6px 12px; color: #555; font-size: 12px; }}
#tip {{ position: fixed; display: none; max-width: 90ch; pointer-events: none; background: #fffff0; border: 1px solid #999; padding: 6px 8px; font: 11px 'DejaVu Sans Mono', Menlo, Consolas, monospace; white-space: pre; box-shadow: 2px 2px 6px rgba(0,0,0,.2); }}
path.band:hover {{ stroke: #000; stroke-width: 1px; vector-effect: non-scaling-stroke; }}
</style></head>
<body>
<div id="help">Hover a band for its size, site, stack and lifetime. Wheel over the plot to zoom in time, drag to pan, double-click to reset.</div>
{svg}<div id="tip"></div>
<script id="details" type="application/json">{json}</script>
<script>
{script}
</script>
</body></html>
"#,
        title = esc(&chart.title),
        svg = svg(chart),
        script = SCRIPT,
    )
}

const SCRIPT: &str = r##"'use strict';
const D = JSON.parse(document.getElementById('details').textContent);
const svg = document.querySelector('svg');
const data = document.getElementById('data');
const tip = document.getElementById('tip');
function show(ev, text) {
  tip.textContent = text;
  tip.style.display = 'block';
  const w = tip.offsetWidth, h = tip.offsetHeight;
  tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - w - 4) + 'px';
  tip.style.top = Math.min(ev.clientY + 14, window.innerHeight - h - 4) + 'px';
}
function describe(k) {
  if (k === 'other') return 'other: ' + D.other;
  const b = D.bands[+k];
  const lines = [b.size + '  ' + b.site];
  if (b.allocations > 1) lines.push(b.allocations + ' allocations at this site');
  if (b.alloc) lines.push('allocated: ' + b.alloc + '    freed: ' + b.free);
  lines.push('');
  for (const f of b.stack) lines.push('  ' + f);
  if (!b.stack.length) lines.push('  (no Python stack recorded)');
  return lines.join('\n');
}
svg.addEventListener('mousemove', ev => {
  const k = ev.target.dataset && ev.target.dataset.band;
  if (k === undefined) { tip.style.display = 'none'; return; }
  show(ev, describe(k));
});
svg.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
// x zoom: #data is drawn in page pixels for the full range; view [a, b] of those pixels
let a = D.left, b = D.left + D.plot_w;
const full = [a, b];
const xt = document.getElementById('xtitle');
const scale = +xt.dataset.scale;
function ticks(lo, hi, n) {
  const raw = (hi - lo) / n, p = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * p).find(s => s >= raw) || raw;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(t);
  const dec = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  return out.map(t => [t, t.toFixed(dec)]);
}
function redraw() {
  const k = D.plot_w / (b - a);
  data.setAttribute('transform', `translate(${D.left - a * k} 0) scale(${k} 1)`);
  const toX = px => D.x_range[0] + (px - D.left) / D.plot_w * (D.x_range[1] - D.x_range[0] || 1);
  const lo = toX(a) * scale, hi = toX(b) * scale;
  const g = document.getElementById('xticks');
  const y = +g.querySelector('line')?.getAttribute('y1') || 0;
  let html = '';
  for (const [t, text] of ticks(lo, hi, 10)) {
    const label = D.x_is_time ? text : Math.round(t).toLocaleString('en-US');
    const x = D.left + (t - lo) / (hi - lo) * D.plot_w;
    html += `<line x1="${x}" x2="${x}" y1="${y}" y2="${y + 5}" stroke="#888888"/><text x="${x}" y="${y + 19}" text-anchor="middle">${label}</text>`;
  }
  if (y) g.innerHTML = html;
  for (const m of document.querySelectorAll('.mark')) {
    const px = D.left + (+m.dataset.x - D.x_range[0]) / (D.x_range[1] - D.x_range[0] || 1) * D.plot_w;
    const inside = px >= a && px <= b;
    m.style.display = inside ? '' : 'none';
    m.setAttribute('transform', `translate(${D.left + (px - a) * k - px} 0)`);
  }
}
function svgX(ev) {
  const r = svg.getBoundingClientRect();
  return (ev.clientX - r.left) * (svg.viewBox.baseVal.width / r.width);
}
svg.addEventListener('wheel', ev => {
  const px = svgX(ev);
  if (px < full[0] || px > full[1]) return;
  ev.preventDefault();
  const at = a + (px - D.left) / D.plot_w * (b - a);
  const f = ev.deltaY < 0 ? 0.8 : 1.25;
  let na = at - (at - a) * f, nb = at + (b - at) * f;
  if (nb - na >= full[1] - full[0]) { na = full[0]; nb = full[1]; }
  if (na < full[0]) { nb += full[0] - na; na = full[0]; }
  if (nb > full[1]) { na -= nb - full[1]; nb = full[1]; }
  a = na; b = nb; redraw();
}, { passive: false });
let drag = null;
svg.addEventListener('mousedown', ev => { drag = [svgX(ev), a, b]; });
window.addEventListener('mouseup', () => { drag = null; });
window.addEventListener('mousemove', ev => {
  if (!drag) return;
  const shift = (drag[0] - svgX(ev)) * (drag[2] - drag[1]) / D.plot_w;
  const w = drag[2] - drag[1];
  a = Math.min(Math.max(drag[1] + shift, full[0]), full[1] - w); b = a + w; redraw();
});
svg.addEventListener('dblclick', () => { a = full[0]; b = full[1]; redraw(); });
// `#selftest`: hover the first band through the browser's own hit testing, report in the DOM
if (location.hash === '#selftest') {
  const out = document.createElement('pre');
  out.id = 'selftest';
  const band = document.querySelector('path.band[data-band="0"]') || document.querySelector('path.band');
  const r = band.getBoundingClientRect();
  let hit = null;
  for (let i = 1; i < 40 && !hit; i++) for (let j = 1; j < 40 && !hit; j++) {
    const x = r.left + r.width * i / 40, y = r.top + r.height * j / 40;
    if (document.elementFromPoint(x, y) === band) hit = [x, y];
  }
  if (hit) {
    document.elementFromPoint(hit[0], hit[1]).dispatchEvent(new MouseEvent('mousemove', { clientX: hit[0], clientY: hit[1], bubbles: true }));
    out.textContent = 'hovered band ' + band.dataset.band + ', tip ' + tip.style.display + ':\n' + tip.textContent;
  } else {
    out.textContent = 'no point of band ' + band.dataset.band + ' was hit';
  }
  document.body.appendChild(out);
}
"##;
