//! The memory-over-time charts `plot` draws: built here from the model (a stats file's
//! series and markers, a snapshot's timelines), drawn by `plot::svg`.

use crate::analysis::decimate::{min_max_envelope, EnvelopeXy};
use crate::analysis::timeline::Timeline;
use crate::model::{DeviceSeries, Series, TrackerStats, Units};

use super::plot::{self, Chart, Line, Panel, VLine};

/// A stats file's chart: `picks` are the series to draw in order, None for the driver-level
/// (NVML) series; `split` draws one panel each.
pub fn tracker(
    stats: &TrackerStats,
    picks: &[Option<Series>],
    split: bool,
    units: Units,
    title: String,
) -> Chart {
    let driver: &[DeviceSeries] = stats
        .record
        .as_ref()
        .map_or(&[], |r| r.device_memory.as_slice());
    // series that are one and the same (the CPU backend counts live tensor storage once)
    // are drawn as one line that says so, not three braided into one
    let same = |x: Series, y: Series| {
        let (p, q) = (stats.series(x), stats.series(y));
        p.len() == q.len()
            && p.iter()
                .zip(q)
                .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()))
    };
    let merged = [
        Some(Series::Allocated),
        Some(Series::Active),
        Some(Series::Reserved),
    ]
    .iter()
    .all(|s| picks.contains(s))
        && same(Series::Allocated, Series::Active)
        && same(Series::Allocated, Series::Reserved);
    let picks: Vec<Option<Series>> = if merged {
        picks
            .iter()
            .copied()
            .filter(|s| !matches!(s, Some(Series::Active | Series::Reserved)))
            .collect()
    } else {
        picks.to_vec()
    };
    let on_cpu = stats.record.as_ref().is_some_and(|r| r.backend == "cpu");
    let last_op = stats.op_count().saturating_sub(1) as f64;
    let lines_of = |s: Option<Series>| -> Vec<Line> {
        match s {
            Some(Series::Allocated) if merged => {
                let mut l = line(stats, Series::Allocated);
                l.label = if on_cpu {
                    "allocated = active = reserved on CPU".into()
                } else {
                    "allocated = active = reserved".into()
                };
                vec![l]
            }
            Some(t) => vec![line(stats, t)],
            None => driver
                .iter()
                .enumerate()
                .map(|(k, d)| device_line(d, k, driver.len() > 1, last_op))
                .collect(),
        }
    };
    let panels = if split {
        picks
            .iter()
            .map(|&s| Panel {
                lines: lines_of(s),
                ..Panel::default()
            })
            .collect()
    } else {
        vec![Panel {
            lines: picks.iter().flat_map(|&s| lines_of(s)).collect(),
            ..Panel::default()
        }]
    };
    let markers = stats
        .marker_events()
        .into_iter()
        .map(|m| VLine {
            x: m.op_index as f64,
            color: if m.name == "fw_bw_boundary" {
                plot::MARKER_RED
            } else {
                plot::MARKER_BLACK
            },
            label: m.name,
        })
        .collect();
    Chart {
        title,
        x_label: "# Operator Calls".into(),
        x_range: (0.0, stats.op_count().saturating_sub(1) as f64),
        panels,
        markers,
        units,
        annotate_peak: true,
        x_kind: plot::XKind::Ops,
    }
}

/// A snapshot's chart: allocated and reserved over time, one panel per device (`tls`), OOMs
/// and annotations marked.
/// Takes the timelines: each series becomes the chart's in place (a long trace's series are
/// most of what `plot` holds).
pub fn snapshot(tls: Vec<Timeline>, units: Units, title: String) -> Chart {
    let x_is_time = tls.iter().all(|t| t.x_is_time);
    // with time on every device, one shared clock: the earliest first event
    let t0 = tls.iter().filter_map(|t| t.t0_us).min();
    let mut x_max = 0.0f64;
    let mut panels = Vec::new();
    let devices = tls.len();
    for mut tl in tls {
        let shift = match (x_is_time, tl.t0_us, t0) {
            (true, Some(mine), Some(all)) => (mine - all) as f64 / 1e6,
            _ => 0.0,
        };
        // x of each event: on the shared clock, or the event index
        let x_at = |i: usize, x: f64| if x_is_time { x + shift } else { i as f64 };
        let n = tl.series.len();
        let (lo, hi) = {
            let mut points = tl.points();
            let first = points.next().map_or(0.0, |p| x_at(0, p.x));
            let last = if n > 1 {
                points.last().map_or(first, |p| x_at(n - 1, p.x))
            } else {
                first
            };
            (first, last)
        };
        x_max = x_max.max(hi);
        // both lines in one pass over the series, never whole in memory
        let mut alloc = EnvelopeXy::new(n, lo, hi, plot::PLOT_COLUMNS);
        let mut reserved = EnvelopeXy::new(n, lo, hi, plot::PLOT_COLUMNS);
        for (i, p) in tl.points().enumerate() {
            let x = x_at(i, p.x);
            alloc.push(x, p.allocated as f64);
            reserved.push(x, p.reserved as f64);
        }
        tl.series = Default::default();
        let (alloc, reserved) = (alloc.finish(), reserved.finish());
        let peak = |p: Option<crate::analysis::timeline::Point>| {
            p.map(|p| {
                (
                    if x_is_time {
                        p.x + shift
                    } else {
                        p.index as f64
                    },
                    p.bytes as f64,
                )
            })
        };
        let x_of = |index: usize, x: f64| if x_is_time { x + shift } else { index as f64 };
        let markers = tl
            .ooms
            .iter()
            .map(|o| VLine {
                x: x_of(o.index, o.x),
                label: "OOM".into(),
                color: plot::MARKER_RED,
            })
            .collect();
        // START/END pairs by name, in order; an unmatched START runs to the end
        let mut spans = Vec::new();
        let mut open: Vec<(String, f64)> = Vec::new();
        for an in &tl.annotations {
            let x = an.x + shift;
            if an.stage.eq_ignore_ascii_case("START") {
                open.push((an.name.clone(), x));
            } else if let Some(k) = open.iter().rposition(|(n, _)| *n == an.name) {
                let (name, x0) = open.remove(k);
                spans.push(plot::Span {
                    x0,
                    x1: x,
                    label: name,
                    color: plot::PURPLE_,
                });
            }
        }
        for (name, x0) in open {
            spans.push(plot::Span {
                x0,
                x1: hi,
                label: name,
                color: plot::PURPLE_,
            });
        }
        panels.push(Panel {
            title: (devices > 1).then(|| format!("cuda:{}", tl.device)),
            lines: vec![
                Line {
                    label: "allocated (requested bytes of live tensors)".into(),
                    color: plot::BLUE_,
                    points: stepped(alloc),
                    peak: peak(tl.peak_allocated),
                    width: None,
                },
                Line {
                    label: "reserved (segments)".into(),
                    color: plot::GREEN_,
                    points: stepped(reserved),
                    peak: peak(tl.peak_reserved),
                    width: None,
                },
            ],
            markers,
            spans,
        });
    }
    Chart {
        title,
        x_label: if x_is_time {
            "Time since the first trace event".into()
        } else {
            "# Trace event (the file has no time_us)".into()
        },
        x_range: (0.0, x_max),
        panels,
        markers: Vec::new(),
        units,
        annotate_peak: true,
        x_kind: if x_is_time {
            plot::XKind::Seconds
        } else {
            plot::XKind::Events
        },
    }
}

/// Memory holds its value until the next event: draw steps, not slopes.
fn stepped(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, &(x, y)) in points.iter().enumerate() {
        if i > 0 {
            out.push((x, points[i - 1].1));
        }
        out.push((x, y));
    }
    out
}

fn line(stats: &TrackerStats, s: Series) -> Line {
    let values = stats.series(s);
    let points = min_max_envelope(values, 0, values.len(), plot::PLOT_COLUMNS);
    let peak = values.iter().enumerate().filter(|(_, v)| !v.is_nan()).fold(
        None,
        |best: Option<(usize, f64)>, (i, &v)| {
            if best.is_none_or(|(_, b)| v > b) {
                Some((i, v))
            } else {
                best
            }
        },
    );
    Line {
        label: format!("{}_memory", s.name()),
        color: match s {
            Series::Allocated => plot::BLUE_,
            Series::Active => plot::ORANGE_,
            Series::Reserved => plot::GREEN_,
        },
        points: points.into_iter().map(|(i, v)| (i as f64, v)).collect(),
        peak: peak.map(|(i, v)| (i as f64, v)),
        width: None,
    }
}

/// The process's GPU memory as the driver counted it, at the op positions of its samples.
fn device_line(d: &DeviceSeries, k: usize, several: bool, last_op: f64) -> Line {
    let values: Vec<f64> = d.samples.iter().map(|s| s.bytes as f64).collect();
    let points = min_max_envelope(&values, 0, values.len(), plot::PLOT_COLUMNS);
    const COLORS: [plotters::style::RGBColor; 4] = [
        plot::PURPLE_,
        plotters::style::RGBColor(140, 86, 75),
        plotters::style::RGBColor(227, 119, 194),
        plotters::style::RGBColor(127, 127, 127),
    ];
    Line {
        label: if several {
            format!("device_memory (driver, GPU {})", d.nvml_index)
        } else {
            "device_memory (driver)".into()
        },
        color: COLORS[k % COLORS.len()],
        // a sample holds until the next one: steps, not slopes
        points: points
            .into_iter()
            .map(|(i, v)| ((d.samples[i].op_index as f64).min(last_op), v))
            .fold(Vec::new(), |mut acc: Vec<(f64, f64)>, (x, y)| {
                if let Some(&(_, prev)) = acc.last() {
                    if prev != y {
                        acc.push((x, prev));
                    }
                }
                acc.push((x, y));
                acc
            }),
        peak: None,
        width: Some(3),
    }
}
