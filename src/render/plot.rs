//! Line charts as SVG (plotters), for memory traces: one or more panels sharing an x axis,
//! vertical markers, a legend, and the peak of the first series annotated.

use std::fmt::Write as _;

use plotters::prelude::*;
use plotters::style::FontStyle;

use super::error::DrawError;
use crate::model::Units;

use super::ticks::time_unit;

/// DejaVu Sans, embedded so text is measured the same everywhere (no system fonts needed).
static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

pub const WIDTH: u32 = 1200;
const PANEL_HEIGHT: u32 = 560;
const SPLIT_PANEL_HEIGHT: u32 = 330;
/// Pixel columns of the plotting area (width less the label areas): the decimation target.
pub const PLOT_COLUMNS: usize = 1080;

pub struct Line {
    pub label: String,
    pub color: RGBColor,
    /// (x, bytes), already decimated.
    pub points: Vec<(f64, f64)>,
    /// The series' true peak (x, bytes), annotated when `annotate_peak`.
    pub peak: Option<(f64, f64)>,
    /// A line width of its own; None: nested widths (the first series thinnest, on top).
    pub width: Option<u32>,
}

#[derive(Default)]
pub struct Panel {
    pub lines: Vec<Line>,
    /// Drawn above the panel (e.g. `cuda:0`).
    pub title: Option<String>,
    /// Markers of this panel only, drawn with the chart's.
    pub markers: Vec<VLine>,
    /// Shaded ranges (e.g. START/END annotations), drawn under the data.
    pub spans: Vec<Span>,
}

pub struct Span {
    pub x0: f64,
    pub x1: f64,
    pub label: String,
    pub color: RGBColor,
}

/// What the x axis counts, for its tick labels and the peak's annotation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XKind {
    #[default]
    Ops,
    Events,
    Seconds,
}

pub struct VLine {
    pub x: f64,
    pub label: String,
    pub color: RGBColor,
}

pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub x_range: (f64, f64),
    pub panels: Vec<Panel>,
    pub markers: Vec<VLine>,
    pub units: Units,
    pub annotate_peak: bool,
    pub x_kind: XKind,
}

pub const BLUE_: RGBColor = RGBColor(31, 119, 180);
pub const ORANGE_: RGBColor = RGBColor(255, 127, 14);
pub const GREEN_: RGBColor = RGBColor(44, 160, 44);
pub const PURPLE_: RGBColor = RGBColor(148, 103, 189);
pub const MARKER_BLACK: RGBColor = RGBColor(0, 0, 0);
pub const MARKER_RED: RGBColor = RGBColor(214, 39, 40);

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            let _ = plotters::style::register_font("sans-serif", style, FONT);
        }
    });
}

/// The chart as an SVG document.
pub fn svg(chart: &Chart) -> Result<String, DrawError> {
    register_font();
    let per_panel = if chart.panels.len() > 1 {
        SPLIT_PANEL_HEIGHT
    } else {
        PANEL_HEIGHT
    };
    let height = per_panel * chart.panels.len().max(1) as u32 + 40;
    let mut out = String::new();
    let mut overlay = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| DrawError::Plot(e.to_string()))?;
        let root = root
            .titled(
                &chart.title,
                ("sans-serif", 22).into_font().style(FontStyle::Bold),
            )
            .map_err(|e| DrawError::Plot(e.to_string()))?;
        let areas = root.split_evenly((chart.panels.len().max(1), 1));
        for (k, (panel, area)) in chart.panels.iter().zip(areas.iter()).enumerate() {
            let last = k + 1 == chart.panels.len();
            draw_panel(chart, panel, area, last, &mut overlay)
                .map_err(|e| DrawError::Plot(e.to_string()))?;
        }
        root.present().map_err(|e| DrawError::Plot(e.to_string()))?;
    }
    // what plotters cannot write (a tooltip per label) goes on top, before the end
    if let Some(end) = out.rfind("</svg>") {
        out.insert_str(end, &overlay);
    }
    Ok(out)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw_panel(
    chart: &Chart,
    panel: &Panel,
    area: &Area,
    show_x_label: bool,
    overlay: &mut String,
) -> Result<(), Box<dyn std::error::Error + 'static>> {
    let (ymin, ymax) = y_range(panel);
    let unit = chart.units.resolve(ymax.abs().max(ymin.abs()));
    let scale = |b: f64| unit.scale(b); // `unit` is resolved: one divisor for the whole axis
    let (x0, x1) = chart.x_range;
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    let (y0, y1) = (scale(ymin), scale(ymax));
    let pad = ((y1 - y0) * 0.04).max(if y1.abs() > 0.0 {
        y1.abs() * 0.001
    } else {
        1.0
    });
    // headroom above the data: two rows of labels (markers, then the peak) never touch a line
    let headroom = ((y1 - y0) * 0.16).max(pad * 2.0);
    let (y0, y1) = (y0 - pad, y1 + headroom);

    let mut builder = ChartBuilder::on(area);
    if let Some(t) = &panel.title {
        builder.caption(t, ("sans-serif", 15).into_font().style(FontStyle::Bold));
    }
    let mut c = builder
        .margin(12)
        .margin_right(28)
        .x_label_area_size(if show_x_label { 48 } else { 28 })
        .y_label_area_size(86)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    let time_scale = time_unit(x1 - x0);
    let x_label = match chart.x_kind {
        XKind::Seconds => format!("{} ({})", chart.x_label, time_scale.1),
        _ => chart.x_label.clone(),
    };
    let x_decimals = {
        let ticks = super::ticks::nice_ticks(x0 * time_scale.0, x1 * time_scale.0, 10);
        let labels = super::ticks::tick_labels(&ticks);
        labels[0].split('.').nth(1).map_or(0, str::len)
    };
    let x_fmt = |x: &f64| match chart.x_kind {
        XKind::Seconds => format!("{:.x_decimals$}", *x * time_scale.0),
        _ => super::thousands(x.max(0.0).round() as usize),
    };
    // as many decimals as the tick step needs, the same on every tick ("0.00" beside "0.50")
    let y_decimals = {
        let ticks = super::ticks::nice_ticks(y0, y1, 10);
        let labels = super::ticks::tick_labels(&ticks);
        labels[0].split('.').nth(1).map_or(0, str::len)
    };
    let y_fmt = |y: &f64| {
        let s = format!("{y:.y_decimals$}");
        if s.trim_start_matches('-')
            .chars()
            .all(|c| c == '0' || c == '.')
        {
            s.trim_start_matches('-').to_string()
        } else {
            s
        }
    };
    let mut mesh = c.configure_mesh();
    mesh.light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(225, 225, 225))
        .y_desc(format!("Memory ({})", unit.name()))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .x_label_formatter(&x_fmt)
        .x_labels(10)
        .y_labels(10)
        .y_label_formatter(&y_fmt);
    if show_x_label {
        mesh.x_desc(x_label.as_str());
    }
    mesh.draw()?;

    // spans and markers first, so the data is drawn over them
    let few_spans = panel.spans.len() <= 12;
    let mut span_labelled = false;
    for sp in &panel.spans {
        let x0 = sp.x0.max(x0);
        let x1 = sp.x1.min(x1).max(x0);
        let series = c.draw_series(std::iter::once(Rectangle::new(
            [(x0, y0), (x1, y1)],
            sp.color.mix(0.18).filled(),
        )))?;
        if !span_labelled {
            span_labelled = true;
            let color = sp.color;
            series
                .label(if few_spans {
                    "annotation (START..END)".to_string()
                } else {
                    format!("{} annotations (START..END)", panel.spans.len())
                })
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 22, y + 6)], color.mix(0.3).filled())
                });
        }
    }
    // a marker outside the axis is drawn nowhere: a file's marker at op 2^62 of three ops would
    // map far past any pixel (plotters' coordinates are i32)
    let all_markers: Vec<&VLine> = (chart.markers.iter().chain(panel.markers.iter()))
        .filter(|m| (x0..=x1).contains(&m.x))
        .collect();
    let mut labelled: Vec<String> = Vec::new();
    for m in all_markers.iter().copied() {
        let style = ShapeStyle {
            color: m.color.mix(0.85),
            filled: false,
            stroke_width: 2,
        };
        let first_of_kind = !labelled.contains(&m.label);
        let series = c.draw_series(std::iter::once(PathElement::new(
            vec![(m.x, y0), (m.x, y1)],
            style,
        )))?;
        if first_of_kind {
            labelled.push(m.label.clone());
            let color = m.color;
            series.label(m.label.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y - 6), (x, y + 6)], color.stroke_width(2))
            });
        }
    }
    // name each marker kind once at the top, beside its first occurrence, unless the legend
    // (which names it too) sits there
    let legend = legend_corner(panel, (x0, x1), (y0, y1), &scale);
    let under_legend = |x: f64| match legend {
        SeriesLabelPosition::UpperLeft => x < x0 + (x1 - x0) * 0.25,
        SeriesLabelPosition::UpperRight => x > x1 - (x1 - x0) * 0.3,
        _ => false,
    };
    // name every marker that has room in the top row, beside its line (not on it)
    let px = (x1 - x0) / PLOT_COLUMNS as f64; // data units per pixel
    let mut taken: Vec<(f64, f64)> = Vec::new();
    for m in all_markers.iter().copied() {
        let left = m.label == "fw_start";
        let w = (m.label.chars().count() as f64 * 7.0 + 6.0) * px;
        let (a, b) = if left { (m.x - w, m.x) } else { (m.x, m.x + w) };
        if a < x0 || b > x1 || under_legend(m.x) || taken.iter().any(|&(p, q)| a < q && p < b) {
            continue;
        }
        taken.push((a, b));
        // a forward start is named left of its line, what follows it right of its own, so the
        // two labels of a short forward pass do not overlap
        let (x, h) = if left {
            (m.x - 4.0 * px, plotters::style::text_anchor::HPos::Right)
        } else {
            (m.x + 4.0 * px, plotters::style::text_anchor::HPos::Left)
        };
        c.draw_series(std::iter::once(Text::new(
            m.label.clone(),
            (x, y1 - (y1 - y0) * 0.01),
            ("sans-serif", 12).into_font().color(&m.color).pos(
                plotters::style::text_anchor::Pos::new(h, plotters::style::text_anchor::VPos::Top),
            ),
        )))?;
    }

    // the spans' names, in the rows of the headroom the marker labels leave free
    let to_px = |x: f64, y: f64| {
        let (px, py) = c.backend_coord(&(x, y));
        (f64::from(px), f64::from(py))
    };
    let (left_px, top_px) = to_px(x0, y1);
    let right_px = to_px(x1, y1).0;
    let taken_row0: Vec<(f64, f64)> = taken
        .iter()
        .map(|&(a, b)| (to_px(a, y1).0, to_px(b, y1).0))
        .collect();
    // the peak's label hangs from 6% of the height under the top
    let peak_label_top = to_px(x0, y1 - (y1 - y0) * 0.06).1;
    let spans: Vec<(f64, f64, &str, RGBColor)> = (panel.spans.iter())
        .filter(|sp| !sp.label.is_empty())
        .map(|sp| {
            let (a, b) = (sp.x0.max(x0), sp.x1.min(x1).max(sp.x0.max(x0)));
            (to_px(a, y1).0, to_px(b, y1).0, sp.label.as_str(), sp.color)
        })
        .collect();
    for l in span_labels(&spans, (left_px, right_px), taken_row0) {
        // row 0 beside the markers' labels (which hang 1% under the top), row 1 under it
        let baseline = top_px + 12.0 + 12.0 * l.row as f64;
        if baseline + 3.0 > peak_label_top && l.row > 0 {
            continue; // a short panel has one row above the peak's label
        }
        let (r, g, b) = (l.color.0, l.color.1, l.color.2);
        let _ = writeln!(
            overlay,
            r##"<g class="span-label"><title>{title}</title><text x="{x:.1}" y="{baseline:.1}" font-family="sans-serif" font-size="{LABEL_PX}" fill="#{r:02x}{g:02x}{b:02x}">{text}</text></g>"##,
            title = super::xml_escape(l.full),
            x = l.x,
            text = super::xml_escape(&l.text),
        );
    }

    // the first line last, on top, thinnest: series that coincide (allocated = active =
    // reserved on the CPU backend) show as nested lines instead of one hiding the others
    let count = panel.lines.len() as u32;
    for (k, line) in panel.lines.iter().enumerate().rev() {
        let color = line.color;
        let width = line
            .width
            .unwrap_or(2 + 2 * (k as u32).min(count.saturating_sub(1)));
        c.draw_series(LineSeries::new(
            line.points.iter().map(|&(x, y)| (x, scale(y))),
            color.stroke_width(width),
        ))?
        .label(line.label.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], color.stroke_width(3)));
    }
    if chart.annotate_peak {
        if let Some((px, py)) = panel.lines.first().and_then(|l| l.peak) {
            let at = match chart.x_kind {
                XKind::Ops => format!("op {}", super::thousands(px.max(0.0) as usize)),
                XKind::Events => format!("event {}", super::thousands(px.max(0.0) as usize)),
                XKind::Seconds => format!("{} {}", trim_number(px * time_scale.0), time_scale.1),
            };
            let label = format!(
                "peak {} at {at}",
                crate::model::format_bytes(py, chart.units),
            );
            let right_half = px > x0 + (x1 - x0) * 0.6;
            let anchor = plotters::style::text_anchor::Pos::new(
                if right_half {
                    plotters::style::text_anchor::HPos::Right
                } else {
                    plotters::style::text_anchor::HPos::Left
                },
                plotters::style::text_anchor::VPos::Top,
            );
            let color = panel.lines[0].color;
            // the second row of the headroom: markers and annotations are named in the first
            let label_y = y1 - (y1 - y0) * 0.06;
            c.draw_series([
                PathElement::new(
                    vec![(px, scale(py)), (px, label_y)],
                    ShapeStyle {
                        color: BLACK.mix(0.5),
                        filled: false,
                        stroke_width: 1,
                    },
                )
                .into_dyn(),
                Circle::new((px, scale(py)), 4, color.filled()).into_dyn(),
                Text::new(
                    label,
                    (px, label_y),
                    ("sans-serif", 13).into_font().color(&BLACK).pos(anchor),
                )
                .into_dyn(),
            ])?;
        }
    }
    c.configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(180, 180, 180))
        .label_font(("sans-serif", 13))
        .draw()?;
    Ok(())
}

/// A span's name placed in the headroom.
struct SpanLabel<'a> {
    x: f64,
    row: usize,
    text: String,
    full: &'a str,
    color: RGBColor,
}

/// Rows of span labels under the top of the plot.
const SPAN_ROWS: usize = 2;

/// Font size of span labels: what plotters writes for its size 12 (it scales by 0.806), as
/// the markers' labels beside them.
const LABEL_PX: f64 = 9.7;

/// Width in pixels of `chars` characters of the labels' sans-serif (DejaVu Sans: about
/// 0.62 em; a little over, so labels placed apart stay apart whatever sans-serif the viewer
/// has).
fn label_width(chars: usize) -> f64 {
    chars as f64 * LABEL_PX * 0.66 + 4.0
}

/// Names of spans `(x0, x1, name, colour)` in pixels, laid out so that no two overlap: each at
/// its span's start, in the first row with room (row 0 shares `taken` with the marker labels),
/// cut short with `…` to the room there is when the whole name has none, dropped when not
/// even a few letters fit. Repeated names (one per iteration) are common: the first ones
/// placed keep the whole name.
fn span_labels<'a>(
    spans: &[(f64, f64, &'a str, RGBColor)],
    (left, right): (f64, f64),
    taken_row0: Vec<(f64, f64)>,
) -> Vec<SpanLabel<'a>> {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by(|&a, &b| spans[a].0.total_cmp(&spans[b].0));
    let mut taken = vec![taken_row0];
    taken.resize(SPAN_ROWS, Vec::new());
    let mut out = Vec::new();
    for k in order {
        let (x0, _, name, color) = spans[k];
        let x = x0.max(left) + 3.0;
        let chars = name.chars().count();
        // the room from x to the first label (or the edge) to its right in each row, if x is
        // itself free
        let room = |row: &[(f64, f64)]| -> Option<f64> {
            if row.iter().any(|&(a, b)| a <= x && x < b) {
                return None;
            }
            let next = (row.iter())
                .filter(|&&(a, _)| a >= x)
                .map(|&(a, _)| a)
                .fold(right, f64::min);
            Some(next - x - 4.0)
        };
        let rooms: Vec<Option<f64>> = taken.iter().map(|r| room(r)).collect();
        let whole = rooms
            .iter()
            .position(|r| r.is_some_and(|w| w >= label_width(chars)));
        let (row, text) = match whole {
            Some(row) => (row, name.to_string()),
            None => {
                // the widest room, cut to it: at least three letters and the ellipsis
                let Some((row, w)) = (rooms.iter().enumerate())
                    .filter_map(|(r, w)| w.map(|w| (r, w)))
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                else {
                    continue;
                };
                let fit = ((w - 4.0) / (LABEL_PX * 0.66)).floor() as usize;
                if fit < 4 {
                    continue;
                }
                let cut: String = name.chars().take(fit - 1).collect();
                (row, format!("{cut}…"))
            }
        };
        let w = label_width(text.chars().count());
        taken[row].push((x, x + w));
        out.push(SpanLabel {
            x,
            row,
            text,
            full: name,
            color,
        });
    }
    out
}

/// The corner whose legend-sized box covers the fewest data points.
fn legend_corner(
    panel: &Panel,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
    scale: &dyn Fn(f64) -> f64,
) -> SeriesLabelPosition {
    let (w, h) = ((x1 - x0) * 0.25, (y1 - y0) * 0.32);
    let corners = [
        (SeriesLabelPosition::UpperLeft, x0, y1 - h),
        (SeriesLabelPosition::UpperRight, x1 - w, y1 - h),
        (SeriesLabelPosition::LowerRight, x1 - w, y0),
        (SeriesLabelPosition::LowerLeft, x0, y0),
        (SeriesLabelPosition::MiddleLeft, x0, (y0 + y1 - h) / 2.0),
        (
            SeriesLabelPosition::MiddleRight,
            x1 - w,
            (y0 + y1 - h) / 2.0,
        ),
    ];
    // how much of each line runs through the box: its points there, and where it crosses
    // the box between points (a line of few points, like a sampled series, still counts)
    let covered = |bx: f64, by: f64| {
        let inside = |x: f64, y: f64| (bx..=bx + w).contains(&x) && (by..=by + h).contains(&y);
        panel
            .lines
            .iter()
            .map(|l| {
                let points = l
                    .points
                    .iter()
                    .filter(|&&(x, y)| inside(x, scale(y)))
                    .count();
                let crossings = (0..=16)
                    .filter(|k| {
                        let x = bx + w * *k as f64 / 16.0;
                        let i = l.points.partition_point(|p| p.0 < x);
                        let y = match (i.checked_sub(1).map(|j| l.points[j]), l.points.get(i)) {
                            (Some((xa, ya)), Some(&(xb, yb))) if xb > xa => {
                                ya + (yb - ya) * (x - xa) / (xb - xa)
                            }
                            (_, Some(&(_, y))) | (Some((_, y)), None) => y,
                            _ => return false,
                        };
                        inside(x, scale(y))
                    })
                    .count();
                points + crossings * 8
            })
            .sum::<usize>()
    };
    corners
        .into_iter()
        .min_by_key(|&(_, bx, by)| covered(bx, by))
        .map_or(SeriesLabelPosition::UpperLeft, |c| c.0)
}

fn y_range(panel: &Panel) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for l in &panel.lines {
        for &(_, y) in &l.points {
            lo = lo.min(y);
            hi = hi.max(y);
        }
    }
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    // memory plots read best from zero unless every value is far above it
    let lo = if lo >= 0.0 && lo < (hi - lo) * 2.0 {
        0.0
    } else {
        lo
    };
    if hi <= lo {
        (lo, lo + 1.0)
    } else {
        (lo, hi)
    }
}

fn trim_number(y: f64) -> String {
    let a = y.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{y:.0}")
    } else if a >= 10.0 {
        format!("{y:.1}")
    } else {
        format!("{y:.2}")
    }
}
