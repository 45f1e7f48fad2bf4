//! `plot` of a torch.profiler trace: allocated and reserved bytes over time, one panel per
//! device, the steps (`ProfilerStep#N`) and OOMs marked; drawn by `plot::svg`.

use crate::analysis::decimate::min_max_envelope_xy;
use crate::analysis::profile_summary::Indexed;
use crate::model::profile::is_step;
use crate::model::Units;

use super::plot::{self, Chart, Line, Panel, VLine, XKind};

/// Markers drawn at most: a trace of thousands of steps gets every n-th one labelled.
const MAX_STEP_MARKERS: usize = 40;

pub fn chart(ix: &Indexed, units: Units, title: String) -> Chart {
    let trace = ix.trace;
    let secs = |t: i64| ix.ms(t) / 1e3;
    let (lo, hi) = (0.0, secs(ix.t1_ns));
    let mut order: Vec<usize> = (0..trace.devices.len()).collect();
    order.sort_by_key(|&d| trace.devices[d]);
    let several = order.len() > 1;
    let mut panels = Vec::new();
    for d in order {
        let events: Vec<_> = ix
            .memory
            .iter()
            .filter(|m| m.device as usize == d)
            .collect();
        if events.is_empty() {
            continue;
        }
        let xs: Vec<f64> = events.iter().map(|m| secs(m.ts_ns)).collect();
        let line_of = |label: &str, color, ys: Vec<f64>| {
            let peak = ys
                .iter()
                .enumerate()
                .fold(None, |best: Option<(usize, f64)>, (i, &y)| match best {
                    Some((_, b)) if b >= y => best,
                    _ => Some((i, y)),
                })
                .map(|(i, y)| (xs[i], y));
            Line {
                label: label.into(),
                color,
                points: stepped(min_max_envelope_xy(&xs, &ys, lo, hi, plot::PLOT_COLUMNS)),
                peak,
                width: None,
            }
        };
        let alloc: Vec<f64> = events.iter().map(|m| m.total_allocated as f64).collect();
        let reserved: Vec<f64> = events.iter().map(|m| m.total_reserved as f64).collect();
        let mut lines = vec![line_of("allocated", plot::BLUE_, alloc)];
        // the CPU allocator reserves nothing: no flat line at 0
        if reserved.iter().any(|&r| r > 0.0) {
            lines.push(line_of("reserved", plot::ORANGE_, reserved));
        }
        let markers = trace
            .ooms
            .iter()
            .filter(|o| o.device as usize == d)
            .map(|o| VLine {
                x: secs(o.ts_ns),
                label: "OOM".into(),
                color: plot::MARKER_RED,
            })
            .collect();
        panels.push(Panel {
            lines,
            title: several.then(|| trace.devices[d].label()),
            markers,
            spans: Vec::new(),
        });
    }
    let steps = ix.steps();
    let every = steps.len().div_ceil(MAX_STEP_MARKERS).max(1);
    let markers = steps
        .iter()
        .enumerate()
        .filter(|(i, _)| i % every == 0)
        .map(|(_, r)| {
            let name = trace.name(r.name);
            VLine {
                x: secs(r.start_ns),
                label: name
                    .strip_prefix("ProfilerStep")
                    .map_or_else(|| name.to_string(), |n| format!("step {n}")),
                color: plot::MARKER_BLACK,
            }
        })
        .chain(
            // other top-level annotations (a record_function around a phase) where there are
            // no steps to mark
            trace
                .ranges
                .iter()
                .filter(|r| {
                    steps.is_empty()
                        && r.kind == crate::model::profile::RangeKind::Annotation
                        && !is_step(trace.name(r.name))
                })
                .take(MAX_STEP_MARKERS)
                .map(|r| VLine {
                    x: secs(r.start_ns),
                    label: trace.name(r.name).into(),
                    color: plot::PURPLE_,
                }),
        )
        .collect();
    Chart {
        title,
        x_label: "time since the trace's first event".into(),
        x_range: (lo, hi.max(1e-9)),
        panels,
        markers,
        units,
        annotate_peak: true,
        x_kind: XKind::Seconds,
    }
}

/// Points joined as steps: the total holds until the next event.
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
