use std::path::{Path, PathBuf};

use crate::analysis::stacked::BandBy;
use crate::analysis::timeline::Timelines;
use crate::cli::{BandByArg, PlotArgs, SeriesArg, XAxisArg};
use crate::error::{Error, Result};
use crate::formats::{self, event_spool::EventSpool};
use crate::model::snapshot::TraceEvent;
use crate::model::{DeviceSeries, Series};
use crate::render::picture::{self, PictureKind};
use crate::render::stacked as stacked_svg;
use crate::render::{memory_chart, plot};

pub fn run(a: PlotArgs) -> Result<()> {
    let out = a.output.clone().unwrap_or_else(|| default_output(&a.file));
    if super::profile::any_trace(std::slice::from_ref(&a.file)) {
        return super::profile::plot(a, out);
    }
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
            crate::quote::path(&out)
        )));
    } else {
        picture::kind_of(&out, &[PictureKind::Svg, PictureKind::Png])?
    };
    // a timeline takes the events as they are read and keeps only its series; the stacked
    // chart also reads the events (with their stacks) once more, from where they were put
    // aside on disk as they were read
    if a.stacked {
        let spool = EventSpool::new().map_err(super::spool_error("plot"))?;
        // (the stacked chart takes x and allocated from the events, not the series)
        let mut sink = (Timelines::new(false), spool);
        let input = formats::load_streaming(&a.file, formats::SnapshotParts::All, &mut sink)?;
        super::warn_inconsistent_input(&a.file, &input, false);
        return match input {
            formats::Input::Tracker(_) => Err(Error::input(
                &a.file,
                "--stacked draws the allocations of an allocator snapshot (torch.cuda.memory._dump_snapshot); a stats file has only totals per op: plot it without --stacked",
            )),
            formats::Input::Snapshot(s) => {
                let (timelines, mut spool) = sink;
                spool.finish().map_err(super::spool_error("plot"))?;
                stacked(&a, &s, timelines, &mut spool, &out, kind)
            }
        };
    }
    let mut timelines = Timelines::new(true);
    let input = formats::load_streaming(
        &a.file,
        formats::SnapshotParts::EventsWithoutStacks,
        &mut timelines,
    )?;
    super::warn_inconsistent_input(&a.file, &input, false);
    let stats = match input {
        formats::Input::Tracker(t) => t,
        formats::Input::Snapshot(s) => return snapshot(&a, &s, timelines, &out, kind),
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
            "every sample is 0 bytes: nothing to plot. MemoryTracker reads the CUDA allocator, so a run without a GPU records zeros; `memtrack record` counts tensors on the CPU too",
        ));
    }
    let picks: Vec<Option<Series>> = series.iter().map(|s| s.tracker_series()).collect();
    let title = a
        .title
        .clone()
        .unwrap_or_else(|| super::display_name(&a.file));
    let chart = memory_chart::tracker(&stats, &picks, a.split, a.units, title);
    let drawing = crate::progress::Stage::new("drawing");
    let svg = plot::svg(&chart)?;
    drop(drawing);
    super::write_picture(&out, kind, &svg, String::new)
}

/// The stacked Active Memory Timeline of one device.
fn stacked(
    a: &PlotArgs,
    snap: &crate::model::Snapshot,
    mut timelines: Timelines,
    events: &mut EventSpool,
    out: &Path,
    kind: PictureKind,
) -> Result<()> {
    let with_events = super::devices_with_trace_events(&a.file, snap, a.device)?;
    let builders: Vec<_> = with_events.iter().map(|&d| timelines.take(d)).collect();
    if !builders.is_empty() && builders.iter().all(|b| b.events() < 2) {
        let first =
            (with_events.iter().zip(&builders)).find_map(|(&d, b)| b.first().map(|e| (d, e)));
        return Err(single_event(&a.file, first));
    }
    let device = match with_events.as_slice() {
        [] => return Err(super::no_trace_events(&a.file, "no trace events to plot")),
        [d] => *d,
        several => {
            let list: Vec<String> = several.iter().map(|d| d.to_string()).collect();
            return Err(Error::Usage(format!(
                "{}: --stacked draws one device and this snapshot has trace events on {}: pick one with --device N",
                crate::quote::path(&a.file),
                list.join(", ")
            )));
        }
    };
    // a grouping asked for makes the bands groups
    let grouped = a.group_by.is_some() || a.rules.is_some();
    let by = match a.by {
        BandByArg::Allocation if !grouped => BandBy::Allocation,
        _ => BandBy::Site,
    };
    let group = super::group_by(
        a.group_by.unwrap_or(crate::cli::GroupByArg::Site),
        a.rules.as_deref(),
    )?;
    let moment = match &a.at {
        Some(m) => {
            // the end, on a timeline, is its last event
            let capture = match m {
                crate::analysis::moment::Moment::End => crate::analysis::sites::Capture::Last,
                m => (m.capture(&snap.annotations, device))
                    .map_err(|why| Error::input(&a.file, why))?,
            };
            Some((m.to_string(), capture))
        }
        None => None,
    };
    let grouping = crate::analysis::stacked::Grouping {
        extra: group.extra(&snap.annotations, device),
        by: group,
        moment,
    };
    let drawing = crate::progress::Stage::new("drawing");
    let tl = (builders.into_iter().next())
        .expect("the one device's builder")
        .finish(snap, device);
    let data = crate::analysis::stacked::stacked(
        snap,
        a.bands,
        by,
        grouping,
        stacked_svg::COLUMNS,
        a.x == XAxisArg::Event,
        tl,
        events,
    )
    .map_err(super::spool_error("plot"))?;
    if let (Some(m), None) = (&a.at, &data.moment) {
        return Err(Error::input(
            &a.file,
            m.not_found(device, data.events, data.ooms.len()),
        ));
    }
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
    mut timelines: Timelines,
    out: &Path,
    kind: PictureKind,
) -> Result<()> {
    let devices = super::devices_with_trace_events(&a.file, snap, a.device)?;
    if devices.is_empty() {
        return Err(super::no_trace_events(&a.file, "no trace events to plot"));
    }
    let builders: Vec<_> = devices.iter().map(|&d| timelines.take(d)).collect();
    if builders.iter().all(|b| b.events() < 2) {
        let first = (devices.iter().zip(&builders)).find_map(|(&d, b)| b.first().map(|e| (d, e)));
        return Err(single_event(&a.file, first));
    }
    let tls: Vec<_> = (builders.into_iter().zip(&devices))
        .map(|(b, &d)| b.finish(snap, d))
        .collect();
    let title = a
        .title
        .clone()
        .unwrap_or_else(|| super::display_name(&a.file));
    let chart = memory_chart::snapshot(tls, a.units, title);
    let svg = plot::svg(&chart)?;
    super::write_picture(out, kind, &svg, String::new)
}

/// A trace of one event has no "over time": say what the event (`first`, on its device) is
/// and where to look instead.
fn single_event(path: &Path, first: Option<(u32, &TraceEvent)>) -> Error {
    let what = first.map_or_else(String::new, |(d, e)| {
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

/// `run.pkl` → `run.svg` in the current directory.
fn default_output(input: &std::path::Path) -> PathBuf {
    let stem = input
        .file_stem()
        .map_or_else(|| "memtrack".into(), |s| s.to_string_lossy().into_owned());
    PathBuf::from(format!("{stem}.svg"))
}
