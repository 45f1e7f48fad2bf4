use std::path::{Path, PathBuf};

use crate::analysis::decimate::min_max_envelope;
use crate::analysis::stacked::BandBy;
use crate::cli::{BandByArg, PlotArgs, SeriesArg, XAxisArg};
use crate::error::{Error, Result};
use crate::formats;
use crate::model::{DeviceSeries, Series, TrackerStats};
use crate::render::picture::{self, PictureKind};
use crate::render::plot::{self, Chart, Line, Panel, VLine};
use crate::render::stacked as stacked_svg;

pub fn run(a: PlotArgs) -> Result<()> {
    let out = a.output.clone().unwrap_or_else(|| default_output(&a.file));
    // the output's kind is known before the (possibly long) load
    let kind = if a.stacked {
        picture::kind_of(
            &out,
            &[PictureKind::Svg, PictureKind::Png, PictureKind::Html],
        )?
    } else if out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("html") || e.eq_ignore_ascii_case("htm"))
    {
        return Err(Error::Usage(format!(
            "{}: the HTML page (hover, zoom) is drawn for `plot --stacked` of an allocator snapshot; write .svg or .png here",
            out.display()
        )));
    } else {
        picture::kind_of(&out, &[PictureKind::Svg, PictureKind::Png])?
    };
    let stats = match formats::load(&a.file)? {
        formats::Input::Tracker(_) if a.stacked => {
            return Err(Error::input(
                &a.file,
                "--stacked draws the allocations of an allocator snapshot (torch.cuda.memory._dump_snapshot); a stats file has only totals per op: plot it without --stacked",
            ))
        }
        formats::Input::Tracker(t) => t,
        formats::Input::Snapshot(s) if a.stacked => return stacked(&a, &s, &out, kind),
        formats::Input::Snapshot(s) => return snapshot(&a, &s, &out, kind),
    };
    let driver: &[DeviceSeries] = stats
        .record
        .as_ref()
        .map_or(&[], |r| r.device_memory.as_slice());
    let series: Vec<SeriesArg> = if a.series.is_empty() {
        let mut s = vec![SeriesArg::Allocated, SeriesArg::Active, SeriesArg::Reserved];
        if !driver.is_empty() {
            s.push(SeriesArg::Device);
        }
        s
    } else {
        a.series.clone()
    };
    if series.contains(&SeriesArg::Device) && driver.is_empty() {
        return Err(Error::input(
            &a.file,
            "no driver-level (device) series: `memtrack record` samples it only where the NVIDIA driver's NVML is present (and --device-interval is not 0)",
        ));
    }
    if stats.op_count() == 0 {
        return Err(Error::input(
            &a.file,
            "no ops recorded: nothing to plot (the tracker saw no operator run)",
        ));
    }
    let every_value_zero = [Series::Allocated, Series::Active, Series::Reserved]
        .iter()
        .all(|&s| stats.series(s).iter().all(|&v| v == 0.0 || v.is_nan()));
    if every_value_zero && driver.is_empty() {
        return Err(Error::input(
            &a.file,
            "every sample is 0 bytes: nothing to plot (was anything allocated on the tracked device while recording?)",
        ));
    }
    // series that are one and the same (the CPU backend counts live tensor storage once)
    // are drawn as one line that says so, not three braided into one
    let same = |x: Series, y: Series| {
        let (p, q) = (stats.series(x), stats.series(y));
        p.len() == q.len()
            && p.iter()
                .zip(q)
                .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()))
    };
    let merged = [SeriesArg::Allocated, SeriesArg::Active, SeriesArg::Reserved]
        .iter()
        .all(|s| series.contains(s))
        && same(Series::Allocated, Series::Active)
        && same(Series::Allocated, Series::Reserved);
    let series: Vec<SeriesArg> = if merged {
        series
            .into_iter()
            .filter(|s| !matches!(s, SeriesArg::Active | SeriesArg::Reserved))
            .collect()
    } else {
        series
    };
    let on_cpu = stats.record.as_ref().is_some_and(|r| r.backend == "cpu");
    let last_op = stats.op_count().saturating_sub(1) as f64;
    let lines_of = |s: SeriesArg| -> Vec<Line> {
        match s.tracker_series() {
            Some(Series::Allocated) if merged => {
                let mut l = line(&stats, Series::Allocated);
                l.label = if on_cpu {
                    "allocated = active = reserved on CPU".into()
                } else {
                    "allocated = active = reserved".into()
                };
                vec![l]
            }
            Some(t) => vec![line(&stats, t)],
            None => driver
                .iter()
                .enumerate()
                .map(|(k, d)| device_line(d, k, driver.len() > 1, last_op))
                .collect(),
        }
    };
    let panels = if a.split {
        series
            .iter()
            .map(|&s| Panel {
                lines: lines_of(s),
                ..Panel::default()
            })
            .collect()
    } else {
        vec![Panel {
            lines: series.iter().flat_map(|&s| lines_of(s)).collect(),
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
    let chart = Chart {
        title: a
            .title
            .clone()
            .unwrap_or_else(|| super::display_name(&a.file)),
        x_label: "# Operator Calls".into(),
        x_range: (0.0, stats.op_count().saturating_sub(1) as f64),
        panels,
        markers,
        units: a.units,
        annotate_peak: true,
        x_kind: plot::XKind::Ops,
    };
    let drawing = crate::progress::Stage::new("drawing");
    let svg = plot::svg(&chart).map_err(|e| Error::Usage(format!("cannot draw the plot: {e}")))?;
    drop(drawing);
    super::write_picture(&out, kind, &svg, String::new)
}

/// The stacked Active Memory Timeline of one device.
fn stacked(
    a: &PlotArgs,
    snap: &crate::model::Snapshot,
    out: &Path,
    kind: PictureKind,
) -> Result<()> {
    let with_events: Vec<u32> = super::snapshot_devices(&a.file, snap, a.device)?
        .into_iter()
        .filter(|&d| snap.trace(d).is_some_and(|t| !t.events.is_empty()))
        .collect();
    if with_events
        .iter()
        .all(|&d| snap.trace(d).is_some_and(|t| t.events.len() < 2))
        && !with_events.is_empty()
    {
        return Err(single_event(&a.file, snap, &with_events));
    }
    let device = match with_events.as_slice() {
        [] => {
            return Err(Error::input(
                &a.file,
                "no trace events to plot: the snapshot was taken without memory history; \
                 call torch.cuda.memory._record_memory_history() before the run",
            ))
        }
        [d] => *d,
        several => {
            let list: Vec<String> = several.iter().map(|d| d.to_string()).collect();
            return Err(Error::Usage(format!(
                "{}: --stacked draws one device and this snapshot has trace events on {}: pick one with --device N",
                a.file.display(),
                list.join(", ")
            )));
        }
    };
    let by = match a.by {
        BandByArg::Allocation => BandBy::Allocation,
        BandByArg::Site => BandBy::Site,
    };
    let drawing = crate::progress::Stage::new("drawing");
    let data = crate::analysis::stacked::stacked(
        snap,
        device,
        a.bands,
        by,
        stacked_svg::COLUMNS,
        a.x == XAxisArg::Event,
    );
    let chart = stacked_svg::StackedChart {
        title: a
            .title
            .clone()
            .unwrap_or_else(|| super::display_name(&a.file)),
        data: &data,
        units: a.units,
    };
    let svg = stacked_svg::svg(&chart);
    drop(drawing);
    super::write_picture(out, kind, &svg, || stacked_svg::html(&chart))
}

/// Allocated and reserved over time, one panel per device, OOMs and annotations marked.
fn snapshot(
    a: &PlotArgs,
    snap: &crate::model::Snapshot,
    out: &Path,
    kind: PictureKind,
) -> Result<()> {
    use crate::analysis::decimate::min_max_envelope_xy;
    use crate::analysis::timeline::timeline;
    let devices: Vec<u32> = super::snapshot_devices(&a.file, snap, a.device)?
        .into_iter()
        .filter(|&d| snap.trace(d).is_some_and(|t| !t.events.is_empty()))
        .collect();
    if devices.is_empty() {
        return Err(Error::input(
            &a.file,
            "no trace events to plot: the snapshot was taken without memory history; \
             call torch.cuda.memory._record_memory_history() before the run",
        ));
    }
    let tls: Vec<_> = devices.iter().map(|&d| timeline(snap, d, true)).collect();
    if tls.iter().all(|t| t.events < 2) {
        return Err(single_event(&a.file, snap, &devices));
    }
    let x_is_time = tls.iter().all(|t| t.x_is_time);
    // with time on every device, one shared clock: the earliest first event
    let t0 = tls.iter().filter_map(|t| t.t0_us).min();
    let mut x_max = 0.0f64;
    let mut panels = Vec::new();
    for tl in &tls {
        let shift = match (x_is_time, tl.t0_us, t0) {
            (true, Some(mine), Some(all)) => (mine - all) as f64 / 1e6,
            _ => 0.0,
        };
        let xs: Vec<f64> = if x_is_time {
            tl.x.iter().map(|x| x + shift).collect()
        } else {
            (0..tl.x.len()).map(|i| i as f64).collect()
        };
        let (lo, hi) = (
            xs.first().copied().unwrap_or(0.0),
            xs.last().copied().unwrap_or(0.0),
        );
        x_max = x_max.max(hi);
        let series = |v: &[i64]| -> Vec<f64> { v.iter().map(|&b| b as f64).collect() };
        let alloc = series(&tl.allocated);
        let reserved = series(&tl.reserved);
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
            title: (tls.len() > 1).then(|| format!("cuda:{}", tl.device)),
            lines: vec![
                Line {
                    label: "allocated (requested bytes of live tensors)".into(),
                    color: plot::BLUE_,
                    points: stepped(min_max_envelope_xy(&xs, &alloc, lo, hi, plot::PLOT_COLUMNS)),
                    peak: peak(tl.peak_allocated),
                    width: None,
                },
                Line {
                    label: "reserved (segments)".into(),
                    color: plot::GREEN_,
                    points: stepped(min_max_envelope_xy(
                        &xs,
                        &reserved,
                        lo,
                        hi,
                        plot::PLOT_COLUMNS,
                    )),
                    peak: peak(tl.peak_reserved),
                    width: None,
                },
            ],
            markers,
            spans,
        });
    }
    let chart = Chart {
        title: a
            .title
            .clone()
            .unwrap_or_else(|| super::display_name(&a.file)),
        x_label: if x_is_time {
            "Time since the first trace event".into()
        } else {
            "# Trace event (the file has no time_us)".into()
        },
        x_range: (0.0, x_max),
        panels,
        markers: Vec::new(),
        units: a.units,
        annotate_peak: true,
        x_kind: if x_is_time {
            plot::XKind::Seconds
        } else {
            plot::XKind::Events
        },
    };
    let svg = plot::svg(&chart).map_err(|e| Error::Usage(format!("cannot draw the plot: {e}")))?;
    super::write_picture(out, kind, &svg, String::new)
}

/// A trace of one event has no "over time": say what the event is and where to look instead.
fn single_event(path: &Path, snap: &crate::model::Snapshot, devices: &[u32]) -> Error {
    let what = devices
        .iter()
        .find_map(|&d| snap.trace(d)?.events.first().map(|e| (d, e)))
        .map_or_else(String::new, |(d, e)| {
            format!(
                " (cuda:{d}: {} of {})",
                e.action.name(),
                crate::model::format_bytes(e.size as f64, crate::model::Units::Auto)
            )
        });
    Error::input(
        path,
        format!(
            "the trace has a single event{what}: nothing to draw over time; `memtrack trace` lists it, `memtrack segments` maps the memory"
        ),
    )
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

/// `run.pkl` → `run.svg` in the current directory.
fn default_output(input: &std::path::Path) -> PathBuf {
    let stem = input
        .file_stem()
        .map_or_else(|| "memtrack".into(), |s| s.to_string_lossy().into_owned());
    PathBuf::from(format!("{stem}.svg"))
}
