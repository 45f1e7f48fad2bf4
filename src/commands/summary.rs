use crate::analysis::snapshot_summary::{add_simulate_suggestions, snapshot_summary};
use crate::analysis::summary::{cross_rank, tracker_summary};
use crate::analysis::timeline::Timelines;
use crate::cli::SummaryArgs;
use crate::error::{Error, Result};
use crate::formats::event_spool::EventSpool;
use crate::formats::{self, Input};
use crate::model::snapshot::{
    DeviceTrace, EventAux, KeptTraces, TraceEvent, TraceEvents, TraceSink,
};
use crate::{output, render};

const SEVERAL_SNAPSHOTS: &str = "is an allocator snapshot: `summary` of several files compares \
    the stats files of a job's ranks (`memtrack record` or save_stats). Summarize snapshots one \
    at a time (`memtrack summary a.pickle`), or compare two with `memtrack diff a.pickle b.pickle`";

/// Events `summary` keeps in memory for its setting suggestion (64 MB): real captures hold up
/// to a few million (`max_entries`); a longer trace goes to a temporary file instead.
const SUGGESTION_EVENTS: usize = 2 << 20;

/// The events for the setting suggestion's replays, which only the end of the reading tells
/// whether it wants (an OOM, a fragmented cache): kept up to `SUGGESTION_EVENTS`, and past
/// that all put aside on disk (32 bytes an event), so the file is read once whatever its size.
struct SuggestionEvents {
    kept: KeptTraces,
    limit: usize,
    /// Past the limit: every event so far, in order (or why there is no file for them).
    spool: Option<std::io::Result<EventSpool>>,
}

impl SuggestionEvents {
    /// Up to `limit` events in memory.
    fn keeping(limit: usize) -> SuggestionEvents {
        SuggestionEvents {
            kept: KeptTraces::up_to(limit),
            limit,
            spool: None,
        }
    }

    /// The traces, by device index (`devices` of them when read back from disk).
    fn into_traces(self, devices: usize) -> std::io::Result<Vec<DeviceTrace>> {
        let Some(spool) = self.spool else {
            return Ok(self.kept.into_traces().unwrap_or_default());
        };
        let mut spool = spool?;
        spool.finish()?;
        let mut traces = Vec::with_capacity(devices);
        for d in 0..devices as u32 {
            let mut t = DeviceTrace::default();
            t.events.reserve_exact(spool.count(d));
            spool.visit(d, &mut |_, e, stream, aux| {
                let aux = aux.cloned().unwrap_or_default();
                t.push(*e, stream, aux).map_err(std::io::Error::other)
            })?;
            traces.push(t);
        }
        Ok(traces)
    }
}

impl TraceSink for SuggestionEvents {
    fn event(&mut self, device: u32, e: &TraceEvent, stream: i64, aux: Option<&EventAux>) {
        match &mut self.spool {
            Some(Ok(spool)) => spool.event(device, e, stream, aux),
            Some(Err(_)) => {}
            None if self.kept.is_full() => {
                // the kept ones first, then this one and all that follow
                let kept = std::mem::replace(&mut self.kept, KeptTraces::up_to(0));
                self.spool = Some(EventSpool::new().map(|mut spool| {
                    for (d, t) in kept.into_traces().unwrap_or_default().iter().enumerate() {
                        for (i, k) in t.events.iter().enumerate() {
                            spool.event(d as u32, k, t.stream(k), t.aux(i));
                        }
                    }
                    spool.event(device, e, stream, aux);
                    spool
                }));
            }
            None => self.kept.event(device, e, stream, aux),
        }
    }

    fn restart(&mut self) {
        *self = SuggestionEvents::keeping(self.limit);
    }
}

pub fn run(a: SummaryArgs) -> Result<()> {
    let (format, units) = (a.common.format, a.common.units);
    let text = if let [file] = a.files.as_slice() {
        let title = super::display_name(file);
        // a snapshot's summary takes the events as they are read, for peaks and OOMs, and
        // keeps them only for the setting suggestion's replays
        let mut sink = (
            Timelines::new(false),
            SuggestionEvents::keeping(SUGGESTION_EVENTS),
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
                render::snapshot::summary(&s, &title, format, units)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Snapshot;

    fn fed(snap: &Snapshot, limit: usize) -> String {
        let mut events = SuggestionEvents::keeping(limit);
        snap.feed(&mut events);
        let spilled = events.spool.is_some();
        let traces = events.into_traces(snap.traces.len()).unwrap();
        assert_eq!(
            spilled,
            limit < snap.traces.iter().map(|t| t.events.len()).sum()
        );
        format!("{traces:?}")
    }

    /// Past its limit the suggestion's events go to disk, and come back as they went in:
    /// every field, stream and aux (an OOM's free bytes, unknown actions), on every device.
    #[test]
    fn suggestion_events_past_the_limit_come_back_from_disk_as_they_went_in() {
        for name in ["h100/oom_default.pickle", "synthetic_flat_events.pickle"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/snapshots")
                .join(name);
            let snap = crate::formats::load_snapshot_parts(
                &path,
                crate::formats::SnapshotParts::EventsWithoutStacks,
            )
            .unwrap();
            let kept = format!("{:?}", snap.traces);
            for limit in [0, 1, 7, usize::MAX] {
                assert_eq!(fed(&snap, limit), kept, "{name}, limit {limit}");
            }
        }
    }
}
