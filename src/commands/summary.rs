use crate::analysis::snapshot_summary::{add_simulate_suggestions, snapshot_summary};
use crate::analysis::summary::{cross_rank, tracker_summary};
use crate::analysis::timeline::Timelines;
use crate::cli::SummaryArgs;
use crate::error::{Error, Result};
use crate::formats::event_spool::SpillingTraces;
use crate::formats::{self, Input};
use crate::{output, render};

const SEVERAL_SNAPSHOTS: &str = "is an allocator snapshot: `summary` of several files compares \
    the stats files of a job's ranks (`memtrack record` or save_stats). Summarize snapshots one \
    at a time (`memtrack summary a.pickle`), or compare two with `memtrack diff a.pickle b.pickle`";

/// Events `summary` keeps in memory for its setting suggestion (64 MB), which replays the trace
/// and which only the end of the reading tells whether it wants (an OOM, a fragmented cache):
/// real captures hold up to a few million (`max_entries`); a longer trace goes to a temporary
/// file instead, so the file is read once whatever its size.
const SUGGESTION_EVENTS: usize = 2 << 20;

pub fn run(a: SummaryArgs) -> Result<()> {
    if super::profile::any_trace(&a.files) {
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
        match formats::load_streaming(file, formats::SnapshotParts::EventsWithoutStacks, &mut sink)?
        {
            Input::Tracker(stats) => {
                if a.device.is_some() {
                    return Err(Error::Usage(
                        "--device applies to allocator snapshots; this is a stats file".into(),
                    ));
                }
                let summary = tracker_summary(&stats, a.top);
                render::summary::tracker(&summary, &title, format, units)
            }
            Input::Snapshot(mut snap) => {
                let devices = super::snapshot_devices(file, &snap, a.device)?;
                let (mut timelines, kept) = sink;
                let mut s = snapshot_summary(&snap, &devices, &mut timelines);
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
                render::snapshot_summary::summary(&s, &title, format, units)
            }
        }
    } else {
        let mut loaded = Vec::with_capacity(a.files.len());
        for f in &a.files {
            match formats::load_with(f, formats::SnapshotParts::SegmentsOnly)? {
                Input::Tracker(stats) => loaded.push((super::display_name(f), *stats)),
                Input::Snapshot(_) => return Err(Error::input(f, SEVERAL_SNAPSHOTS)),
            }
        }
        let refs: Vec<(String, &_)> = loaded.iter().map(|(n, s)| (n.clone(), s)).collect();
        let c = cross_rank(&refs);
        let each: Vec<_> = loaded
            .iter()
            .map(|(n, s)| (n.clone(), tracker_summary(s, a.top)))
            .collect();
        render::summary::cross_rank(&c, &each, format, units)
    };
    output::emit(&a.common.output, text.as_bytes())
}
