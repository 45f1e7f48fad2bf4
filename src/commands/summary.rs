use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::analysis::annotation_usage::UsageAtTimes;
use crate::analysis::cross_rank::cross_rank;
use crate::analysis::leaks::{has_steps, AllocTimes};
use crate::analysis::ranks::{figures, rank_table};
use crate::analysis::snapshot_summary::{
    add_leak_suspects, add_simulate_suggestions, snapshot_summary,
};
use crate::analysis::summary::tracker_summary;
use crate::analysis::timeline::Timelines;
use crate::cli::SummaryArgs;
use crate::error::{Error, Result};
use crate::formats::event_spool::SpillingTraces;
use crate::formats::{self, summary_json, Input};
use crate::model::ranks::RankFigures;
use crate::model::TrackerStats;
use crate::{output, render};

const MIXED: &str = "`summary` of several files compares files of one kind: the stats files of \
    a job's ranks (`memtrack record` or save_stats), or its allocator snapshots (or their \
    `summary --format json` outputs)";

/// Events `summary` keeps in memory for its setting suggestion (64 MB), which replays the trace,
/// and its leak suspects, which go over it again; only the end of the reading tells whether
/// either is wanted (an OOM, a fragmented cache; step annotations, which come after the trace):
/// real captures hold up to a few million (`max_entries`); a longer trace goes to a temporary
/// file instead, so the file is read once whatever its size.
const SUGGESTION_EVENTS: usize = 2 << 20;

pub fn run(a: SummaryArgs) -> Result<()> {
    if super::profile::all_traces(&a.files) {
        return super::profile::summary(a);
    }
    let (format, units) = (a.common.format, a.common.units);
    let text = if let [file] = a.files.as_slice() {
        let title = super::display_name(file);
        // a snapshot's summary takes the events as they are read, for peaks and OOMs, and
        // keeps them only for the setting suggestion's replays
        let mut sink = (
            Timelines::new(false),
            SpillingTraces::keeping(SUGGESTION_EVENTS),
        );
        let input =
            formats::load_streaming(file, formats::SnapshotParts::EventsWithoutStacks, &mut sink)?;
        super::warn_inconsistent_input(file, &input, format == crate::render::Format::Json);
        match input {
            Input::Tracker(stats) => {
                if a.device.is_some() {
                    return Err(Error::Usage(
                        "--device applies to allocator snapshots; this is a stats file".into(),
                    ));
                }
                let mut summary = tracker_summary(&stats, a.top);
                if a.all_iterations {
                    summary.show_all_iterations();
                }
                render::summary::tracker(&summary, &title, format, units)
            }
            Input::Snapshot(mut snap) => {
                let devices = super::snapshot_devices(file, &snap, a.device)?;
                let (mut timelines, mut kept) = sink;
                let mut s = snapshot_summary(&snap, &devices, &mut timelines);
                // what needs the annotations, which come after the trace in the file, replays
                // the events kept, once for both: when each live allocation was made (leak
                // suspects, where there are steps) and allocated at each annotation
                let mut wanted = (
                    has_steps(&snap, &devices).then(AllocTimes::default),
                    s.annotation_times().map(UsageAtTimes::new),
                );
                if wanted.0.is_some() || wanted.1.is_some() {
                    (kept.feed(&mut wanted, snap.traces.len()))
                        .map_err(super::spool_error("summary"))?;
                }
                let (alloc_times, usage) = wanted;
                if let Some(times) = &alloc_times {
                    add_leak_suspects(&mut s, &snap, times);
                }
                if let Some(usage) = usage {
                    s.set_annotation_usage(usage.finish());
                }
                if s.wants_suggestions() {
                    // the replays need the events: those kept, in memory or on disk
                    let traces = (kept.into_traces(snap.traces.len()))
                        .map_err(super::spool_error("summary"))?;
                    // (the same reading's lists, so the same devices and streams)
                    for (slot, t) in snap.traces.iter_mut().zip(traces) {
                        *slot = t;
                    }
                    add_simulate_suggestions(&mut s, &snap);
                }
                s.figures = Some(figures(&s, &file.display().to_string()));
                // what `simulate` is told to replay: the file's name; a pipe is read once
                let piped = crate::inputs::open(file).is_ok_and(|i| i.piped);
                let replay = (!piped).then_some(title.as_str());
                render::snapshot_summary::summary(&s, &title, replay, format, units)
            }
        }
    } else {
        several(&a)?
    };
    output::emit(&a.common.output, text.as_bytes())
}

/// What `summary` of several files keeps of each: a stats file whole (each one's summary
/// follows the table), a snapshot only its figures, so that memory does not grow with the
/// captures' sizes.
enum Kept {
    Stats(Box<TrackerStats>),
    Figures(Vec<RankFigures>),
}

/// `summary` of several files: stats files side by side, or allocator snapshots (and the
/// JSON summaries of snapshots) as one table of ranks.
fn several(a: &SummaryArgs) -> Result<String> {
    let (format, units) = (a.common.format, a.common.units);
    let kept = read_all(&a.files, a.device, format == crate::render::Format::Json)?;
    if kept.iter().all(|k| matches!(k, Kept::Stats(_))) {
        let loaded: Vec<(String, TrackerStats)> = (a.files.iter().zip(kept))
            .filter_map(|(f, k)| match k {
                Kept::Stats(s) => Some((super::display_name(f), *s)),
                Kept::Figures(_) => None,
            })
            .collect();
        let refs: Vec<(String, &_)> = loaded.iter().map(|(n, s)| (n.clone(), s)).collect();
        let c = cross_rank(&refs);
        let each: Vec<_> = loaded
            .iter()
            .map(|(n, s)| {
                let mut summary = tracker_summary(s, a.top);
                if a.all_iterations {
                    summary.show_all_iterations();
                }
                (n.clone(), summary)
            })
            .collect();
        return Ok(render::summary::cross_rank(&c, &each, format, units));
    }
    let mut all = Vec::new();
    for (f, k) in a.files.iter().zip(kept) {
        match k {
            Kept::Figures(v) => all.extend(v),
            Kept::Stats(_) => return Err(Error::input(f, format!("is a stats file; {MIXED}"))),
        }
    }
    Ok(render::ranks::rank_table(&rank_table(all), format, units))
}

/// Every file read on the local cores, each by one thread at a time; the first error in the
/// files' order is the one given (reading stops at the first).
fn read_all(files: &[PathBuf], device: Option<u32>, json: bool) -> Result<Vec<Kept>> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, files.len().max(1));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let mut read: Vec<(usize, Result<Kept>)> = std::thread::scope(|scope| {
        let work = || {
            let mut mine = Vec::new();
            while !failed.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(f) = files.get(i) else { break };
                let r = read_one(f, device, json);
                failed.fetch_or(r.is_err(), Ordering::Relaxed);
                mine.push((i, r));
            }
            mine
        };
        // the main thread's stack size: the readers were written for it
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                std::thread::Builder::new()
                    .stack_size(8 << 20)
                    .spawn_scoped(scope, work)
                    .expect("a thread to read files on")
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    read.sort_by_key(|(i, _)| *i);
    read.into_iter().map(|(_, r)| r).collect()
}

/// One file of several: a stats file, a snapshot's figures, or the figures in a JSON summary.
fn read_one(path: &Path, device: Option<u32>, json: bool) -> Result<Kept> {
    if summary_json::is_json(path) {
        return summary_json::read_figures(path).map(Kept::Figures);
    }
    let mut timelines = Timelines::new(false);
    let input = formats::load_streaming(
        path,
        formats::SnapshotParts::EventsWithoutStacks,
        &mut timelines,
    )?;
    super::warn_inconsistent_input(path, &input, json);
    match input {
        Input::Tracker(stats) => Ok(Kept::Stats(stats)),
        Input::Snapshot(snap) => {
            let devices = super::snapshot_devices(path, &snap, device)?;
            let s = snapshot_summary(&snap, &devices, &mut timelines);
            Ok(Kept::Figures(vec![figures(
                &s,
                &path.display().to_string(),
            )]))
        }
    }
}
