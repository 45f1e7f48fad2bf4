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
    let (x0, mut x1) = d.x_range;
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let plot_w = WIDTH - LEFT - RIGHT;
    let px_of = |x: f64| LEFT + (x - x0) / (x1 - x0) * plot_w;
    let (marks, keys) = marks(d, px_of);
    let keyed = marks.iter().any(|m| !m.full_fits);
    let legend_rows = d.bands.len() + 1 + usize::from(keyed);
    let height = TOP + PLOT_H + AXIS_H + 10.0 + LEGEND_LINE * legend_rows as f64 + 10.0;
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
        plot_w,
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
    // labels in the strip above the plot: every OOM and annotation line has one (see `marks`)
    s.push_str("<g id=\"marks\">\n");
    for m in &marks {
        let (row, text) = (MARK_ROWS[m.row], m.text());
        let tx = if m.left { m.px - 2.0 } else { m.px + 2.0 };
        let anchor = if m.left { "end" } else { "start" };
        let _ = writeln!(
            s,
            r##"<g class="mark" data-x="{xv}"><title>{title}</title><line x1="{x:.1}" x2="{x:.1}" y1="{y1}" y2="{y2}" stroke="{color}" stroke-dasharray="2 2"/><text class="mark-label" x="{tx:.1}" y="{row}" text-anchor="{anchor}" fill="{color}" font-size="{size}"{weight}>{text}</text></g>"##,
            xv = m.x,
            x = m.px,
            title = esc(&m.title),
            y1 = row - m.size,
            y2 = if m.through { TOP + PLOT_H } else { TOP },
            color = m.color,
            size = m.size,
            weight = if m.bold { r#" font-weight="bold""# } else { "" },
            text = esc(text),
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
            r##"<g class="mark" id="moment" data-x="{xv}" data-index="{index}"><title>{label} (event {index})</title><line x1="{x:.1}" x2="{x:.1}" y1="{y1}" y2="{y2}" stroke="#1f77b4" stroke-width="1.5" vector-effect="non-scaling-stroke"/><text x="{tx:.1}" y="{ty}" text-anchor="{anchor}" fill="#1f77b4" font-weight="bold">{label}</text></g>"##,
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
            r##"<g class="mark" data-x="{xv}"><title>{text} at {at}</title><line x1="{x:.1}" x2="{x:.1}" y1="{ly}" y2="{y:.1}" stroke="#222222" stroke-dasharray="1 2"/><circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="#222222"/><text x="{x:.1}" y="{ty}" text-anchor="{anchor}" font-weight="bold">{text}</text></g>"##,
            xv = p.x,
            at = if d.x_is_time {
                format!("{:.6} s", p.x)
            } else {
                format!("event {}", super::thousands(p.index))
            },
            ly = TOP - 34.0,
            ty = TOP - 38.0,
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
    let names = band_names(d);
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
        legend_row(&mut s, y, color(k), &what, &names[k], d.by);
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
    if keyed {
        // where a full name had no room its line is labelled with the name's letter
        let list: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(k, name)| format!("{} {name}", key(k)))
            .collect();
        let _ = writeln!(
            s,
            r##"<text id="annotation-keys" x="{LEFT}" y="{y}" fill="#9467bd">annotations (▸ start, ◂ end): {}</text>"##,
            esc(&list.join(", ")),
            y = y + LEGEND_LINE,
        );
    }
    s.push_str("</svg>\n");
    s
}

/// What the legend calls each band: its site, or where several bands (allocations) share a
/// site, the site and when the allocation was made, so no two rows read the same.
fn band_names(d: &Stacked) -> Vec<String> {
    let shared = |site: &str| d.bands.iter().filter(|b| b.site == site).count() > 1;
    let mut names: Vec<String> = (d.bands.iter())
        .map(|b| match (shared(&b.site), b.alloc_x) {
            (false, _) => b.site.clone(),
            (true, Some(x)) if d.x_is_time => format!("{}, allocated at {x:.6} s", b.site),
            (true, Some(x)) => format!(
                "{}, allocated at event {}",
                b.site,
                super::thousands(x.max(0.0) as usize)
            ),
            (true, None) => format!("{}, allocated before the trace", b.site),
        })
        .collect();
    // several allocated before the trace at one site: number them
    for k in 0..names.len() {
        let same: Vec<usize> = (k..names.len()).filter(|&j| names[j] == names[k]).collect();
        if same.len() > 1 {
            for (n, &j) in same.iter().enumerate() {
                names[j] = format!("{} ({} of {})", names[j], n + 1, same.len());
            }
        }
    }
    names
}

fn legend_row(s: &mut String, y: f64, color: &str, what: &str, site: &str, by: BandBy) {
    // the middle goes: a long site's end (line, function, when) tells bands apart
    let n = site.chars().count();
    let site = if n > 110 {
        let head: String = site.chars().take(50).collect();
        let tail: String = site.chars().skip(n - 59).collect();
        format!("{head}…{tail}")
    } else {
        site.to_string()
    };
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{ry}" width="12" height="12" fill="{color}" stroke="#666666" stroke-width="0.5"/><text x="{tx}" y="{y}">{what}</text><text class="legend-site" x="{sx}" y="{y}" fill="#444444">{site}</text>"##,
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

/// Baselines of the label rows in the strip above the plot, nearest the plot first (the peak's
/// label sits above them).
const MARK_ROWS: [f64; 3] = [TOP - 4.0, TOP - 15.0, TOP - 26.0];

/// The label of one marker line (an OOM or an annotation) in the strip above the plot.
struct MarkLabel {
    /// x in data units (the page's zoom moves it) and in pixels.
    x: f64,
    px: f64,
    /// The whole label, and the short one used where the whole has no room.
    full: String,
    short: String,
    /// What a tooltip says: the whole label and where the line is.
    title: String,
    full_fits: bool,
    row: usize,
    /// Written left of its line (near the right edge).
    left: bool,
    color: &'static str,
    size: f64,
    bold: bool,
    /// The line runs through the plot (annotations); an OOM's own line is drawn in the data.
    through: bool,
}

impl MarkLabel {
    fn text(&self) -> &str {
        if self.full_fits {
            &self.full
        } else {
            &self.short
        }
    }
}

/// Width of `text` in pixels at `size`, DejaVu Sans: about 0.62 em a character (0.7 bold),
/// a little over, so labels placed apart are apart.
fn text_width(text: &str, size: f64, bold: bool) -> f64 {
    text.chars().count() as f64 * size * if bold { 0.7 } else { 0.62 } + 2.0
}

/// `A`, `B`, … `Z`, `AA`, …: the letter an annotation name goes by where its name has no room.
fn key(k: usize) -> String {
    let mut s = String::new();
    let mut k = k + 1;
    while k > 0 {
        k -= 1;
        s.insert(0, (b'A' + (k % 26) as u8) as char);
        k /= 26;
    }
    s
}

/// Every OOM and annotation line's label, each in a row of the strip where it touches no other:
/// whole labels where every one has room, else short ones (`A▸`: the name's letter, explained
/// in the legend, and the whole label in the line's tooltip). Where even a short one has no
/// room (hundreds of lines) it goes in the row it overlaps least; zooming the page spreads
/// them. Also the annotation names in letter order.
fn marks(d: &Stacked, px_of: impl Fn(f64) -> f64) -> (Vec<MarkLabel>, Vec<String>) {
    let mut keys: Vec<String> = Vec::new();
    let mut out = Vec::new();
    let where_ = |index: Option<usize>, x: f64| match index {
        Some(i) => format!("event {}", super::thousands(i)),
        None if d.x_is_time => format!("{x:.6} s"),
        None => format!("event {}", super::thousands(x.max(0.0) as usize)),
    };
    for (i, o) in d.ooms.iter().enumerate() {
        let n = if d.ooms.len() > 1 {
            format!(" {}", i + 1)
        } else {
            String::new()
        };
        out.push(MarkLabel {
            x: o.x,
            px: px_of(o.x),
            full: format!("OOM{n}"),
            short: format!("OOM{n}"),
            title: format!(
                "OOM{n} at {}: {} requested",
                where_(Some(o.index), o.x),
                format_size(o.requested_bytes as i64)
            ),
            full_fits: true,
            row: 0,
            left: false,
            color: "#d62728",
            size: 12.0,
            bold: true,
            through: false,
        });
    }
    for a in &d.annotations {
        let k = match keys.iter().position(|n| *n == a.name) {
            Some(k) => k,
            None => {
                keys.push(a.name.clone());
                keys.len() - 1
            }
        };
        let start = a.stage.eq_ignore_ascii_case("START");
        let stage = a.stage.to_ascii_lowercase();
        out.push(MarkLabel {
            x: a.x,
            px: px_of(a.x),
            full: format!("{} {stage}", a.name),
            short: format!("{}{}", key(k), if start { "▸" } else { "◂" }),
            title: format!("{} {stage} at {}", a.name, where_(None, a.x)),
            full_fits: true,
            row: 0,
            left: false,
            color: "#9467bd",
            size: 10.0,
            bold: false,
            through: true,
        });
    }
    // OOMs first (they come first in `out`), then annotations left to right
    let ooms = d.ooms.len();
    out[ooms..].sort_by(|a, b| a.px.total_cmp(&b.px));
    let span = |m: &MarkLabel, text: &str, left: bool| {
        let w = text_width(text, m.size, m.bold);
        if left {
            (m.px - 2.0 - w, m.px - 2.0)
        } else {
            (m.px + 2.0, m.px + 2.0 + w)
        }
    };
    let overlap = |row: &[(f64, f64)], (a, b): (f64, f64)| -> f64 {
        row.iter()
            .map(|&(p, q)| (b.min(q) - a.max(p)).max(0.0))
            .sum()
    };
    // every label whole if all have room, else every one short: one picture, one kind of label
    for full in [true, false] {
        let mut taken: Vec<Vec<(f64, f64)>> = vec![Vec::new(); MARK_ROWS.len()];
        let mut all_fit = true;
        for m in &mut out {
            let text = if full { &m.full } else { &m.short };
            // right of its line, or left of it where the right runs off the picture
            let left = span(m, text, false).1 > WIDTH - 2.0;
            let ab = span(m, text, left);
            let free = (0..taken.len()).find(|&r| overlap(&taken[r], ab) == 0.0);
            let r = free.unwrap_or_else(|| {
                all_fit = false;
                (0..taken.len())
                    .min_by(|&p, &q| overlap(&taken[p], ab).total_cmp(&overlap(&taken[q], ab)))
                    .unwrap_or(0)
            });
            taken[r].push(ab);
            (m.row, m.full_fits, m.left) = (r, full, left);
        }
        if all_fit {
            break;
        }
    }
    (out, keys)
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

/// Whether a kept frame (`file:line:function`) is Python's: its file is a `.py`. (A C++ frame's
/// function has colons of its own, but its file never ends in `.py`.)
fn is_python(frame: &str) -> bool {
    frame_file(frame).is_some_and(|f| f.ends_with(".py"))
}

fn frame_file(frame: &str) -> Option<&str> {
    frame.rsplitn(3, ':').nth(2)
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
        /// The stack's Python frames, innermost first; its other (C++) frames only counted:
        /// the hover box shows a few of the first and the count.
        python: Vec<&'a str>,
        native: usize,
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
                python: b
                    .stack
                    .iter()
                    .filter(|f| is_python(f))
                    .map(String::as_str)
                    .collect(),
                native: b.stack.iter().filter(|f| !is_python(f)).count(),
                alloc: match d.by {
                    BandBy::Allocation => when(b.alloc_x, "before the trace"),
                    BandBy::Site => String::new(),
                },
                free: match d.by {
                    BandBy::Allocation => when(b.free_x, "the end (never freed)"),
                    BandBy::Site => String::new(),
                },
            })
            .collect(),
        other: match d.by {
            BandBy::Allocation => {
                "smaller allocations, and memory allocated before the trace began"
            }
            BandBy::Site => {
                "allocations at other sites, and memory allocated before the trace began"
            }
        }
        .into(),
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
svg {{ user-select: none; -webkit-user-select: none; cursor: default; }}
#tip {{ position: fixed; display: none; max-width: calc(100vw - 16px); overflow: hidden; pointer-events: none; background: #fffff0; border: 1px solid #999; padding: 6px 8px; font: 11px 'DejaVu Sans Mono', Menlo, Consolas, monospace; white-space: pre; box-shadow: 2px 2px 6px rgba(0,0,0,.2); }}
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
// the box goes right of and below the pointer, or left of / above it where it would leave
// the window, so size and site (its first line) are always in view
function show(ev, text) {
  tip.textContent = text;
  tip.style.display = 'block';
  const w = tip.offsetWidth, h = tip.offsetHeight, gap = 14, m = 4;
  let x = ev.clientX + gap, y = ev.clientY + gap;
  if (x + w > window.innerWidth - m) x = ev.clientX - gap - w;
  if (y + h > window.innerHeight - m) y = ev.clientY - gap - h;
  tip.style.left = Math.max(m, x) + 'px';
  tip.style.top = Math.max(m, y) + 'px';
}
// a frame as `dir/file.py:line:function`: the last folder is enough to tell files apart
function short(frame) {
  const m = frame.match(/^(.*):(\d+):([^:]*)$/);
  let s = m ? m[1].split(/[\\/]/).slice(-2).join('/') + ':' + m[2] + ':' + m[3] : frame;
  return s.length > 100 ? s.slice(0, 99) + '\u2026' : s;
}
// size and site first, then lifetime, a few Python frames (innermost three and the outermost)
// and how many C++ frames are left out
function describe(k) {
  if (k === 'other') return 'other: ' + D.other;
  const b = D.bands[+k];
  const lines = [b.size + '  ' + short(b.site)];
  if (b.allocations > 1) lines.push(b.allocations + ' allocations at this site');
  if (b.alloc) lines.push('live ' + b.alloc + ' \u2192 ' + b.free);
  const py = b.python;
  const shown = py.length > 5 ? py.slice(0, 3) : py;
  for (const f of shown) lines.push('  ' + short(f));
  if (py.length > 5) {
    lines.push('  \u2026 ' + (py.length - 4) + ' more Python frames');
    lines.push('  ' + short(py[py.length - 1]));
  }
  if (!py.length) lines.push('  (no Python frames recorded)');
  if (b.native) lines.push('  + ' + b.native + ' C++ frame' + (b.native === 1 ? '' : 's') + ' not shown');
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
svg.addEventListener('mousedown', ev => { ev.preventDefault(); drag = [svgX(ev), a, b]; });
window.addEventListener('mouseup', () => { drag = null; });
window.addEventListener('mousemove', ev => {
  if (!drag) return;
  const shift = (drag[0] - svgX(ev)) * (drag[2] - drag[1]) / D.plot_w;
  const w = drag[2] - drag[1];
  a = Math.min(Math.max(drag[1] + shift, full[0]), full[1] - w); b = a + w; redraw();
});
svg.addEventListener('dblclick', () => { a = full[0]; b = full[1]; redraw(); });
// `#selftest`: hover the tallest band through the browser's own hit testing, report in the DOM
if (location.hash === '#selftest') {
  const out = document.createElement('pre');
  out.id = 'selftest';
  const height = p => p.getBoundingClientRect().height;
  const band = [...document.querySelectorAll('path.band:not([data-band="other"])')]
    .reduce((best, p) => (best && height(best) >= height(p) ? best : p), null)
    || document.querySelector('path.band');
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
