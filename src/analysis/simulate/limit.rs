//! The memory limit a replay enforces, from the caller or from what the recorded failures
//! imply, and why the allocator gave segments back (`empty_cache()` or its retry path).

use crate::model::snapshot::{Action, Snapshot, StackId, TraceEvent};
use crate::model::trace::TraceEvents;

use super::super::caching_allocator::{allocation_size, Settings};
use super::report::{LimitSource, Note};

/// Why the allocator gave a run of segments back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseCause {
    /// `torch.cuda.empty_cache()`: no allocation asked for it.
    EmptyCache,
    /// The allocator's free-and-retry path after a `cudaMalloc` failed (or the garbage
    /// collector), inside an allocation.
    Allocation,
}

/// Each run of `segment_free` / `segment_unmap` events of a trace, as (first index, index
/// after the last, cause), found as the events go by. The run's stack says the cause when the
/// file has one: `emptyCache` (C++) or `empty_cache` (Python) for `torch.cuda.empty_cache()`,
/// the allocator's `malloc` for its own release. Without a telling stack, a run followed
/// directly by a new segment or an OOM is taken for the free-and-retry path, any other for
/// `empty_cache()`, unless no limit allows it: a retry says the limit was below what was
/// reserved before the release plus the segment made after it (for an expandable segment's
/// map, the allocation it maps for when that is larger: the limit check counts the request,
/// the map may be smaller), and the limit is at least the most the trace ever reserved.
pub(super) struct ReleaseRuns<'s> {
    snap: &'s Snapshot,
    reserved: i64,
    most: i64,
    pub(super) runs: Vec<(usize, usize, ReleaseCause)>,
    /// The run going on: (first index, reserved before it, the cause a stack said).
    open: Option<(usize, i64, Option<ReleaseCause>)>,
    /// Runs followed by a new segment: (run, reserved before it plus what the retry asked),
    /// a retry if that is over the most reserved (known at the end).
    against_most: Vec<(usize, i64)>,
    /// Runs followed by a map, waiting for the allocation it maps for: (run, reserved before
    /// it, the map's size).
    awaiting_alloc: Vec<(usize, i64, u64)>,
}

impl<'s> ReleaseRuns<'s> {
    /// `initial_reserved`: the bytes held before the first event.
    pub(super) fn new(snap: &'s Snapshot, initial_reserved: i64) -> ReleaseRuns<'s> {
        ReleaseRuns {
            snap,
            reserved: initial_reserved,
            most: initial_reserved,
            runs: Vec::new(),
            open: None,
            against_most: Vec::new(),
            awaiting_alloc: Vec::new(),
        }
    }

    pub(super) fn event(&mut self, i: usize, e: &TraceEvent) {
        if matches!(e.action, Action::SegmentFree | Action::SegmentUnmap) {
            let run = self.open.get_or_insert((i, self.reserved, None));
            if run.2.is_none() {
                run.2 = stack_release_cause(self.snap, e.stack);
            }
        } else if let Some((start, before, said)) = self.open.take() {
            let k = self.runs.len();
            let cause = said.unwrap_or_else(|| match e.action {
                Action::Oom => ReleaseCause::Allocation,
                Action::SegmentAlloc => {
                    self.against_most.push((k, before + e.size as i64));
                    ReleaseCause::EmptyCache
                }
                Action::SegmentMap => {
                    self.awaiting_alloc.push((k, before, e.size));
                    ReleaseCause::EmptyCache
                }
                _ => ReleaseCause::EmptyCache,
            });
            self.runs.push((start, i, cause));
        }
        if e.action == Action::Alloc {
            for (k, before, map) in self.awaiting_alloc.drain(..) {
                self.against_most.push((k, before + map.max(e.size) as i64));
            }
        }
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => self.reserved += e.size as i64,
            Action::SegmentFree | Action::SegmentUnmap => self.reserved -= e.size as i64,
            _ => {}
        }
        self.most = self.most.max(self.reserved);
    }

    /// The runs of a trace of `events` events.
    pub(super) fn finish(mut self, events: usize) -> Vec<(usize, usize, ReleaseCause)> {
        if let Some((start, _, said)) = self.open.take() {
            self.runs
                .push((start, events, said.unwrap_or(ReleaseCause::EmptyCache)));
        }
        // a map with no allocation after it asked for the map
        for (k, before, map) in self.awaiting_alloc.drain(..) {
            self.against_most.push((k, before + map as i64));
        }
        for &(k, need) in &self.against_most {
            if need > self.most {
                self.runs[k].2 = ReleaseCause::Allocation;
            }
        }
        self.runs
    }
}

/// What a release's stack says caused it, innermost telling frame first; None when it says
/// nothing (no stack, or Python frames of the program only).
fn stack_release_cause(snap: &Snapshot, stack: StackId) -> Option<ReleaseCause> {
    snap.stacks.stack(stack).iter().find_map(|&f| {
        let name = snap.stacks.str(snap.stacks.frame(f).name);
        if name.contains("emptyCache") || name == "empty_cache" {
            Some(ReleaseCause::EmptyCache)
        } else if name.contains("CachingAllocator") && name.contains("malloc") {
            Some(ReleaseCause::Allocation)
        } else {
            None
        }
    })
}

/// Where the memory limit comes from, in order: the caller's `given`; what the recorded
/// failures imply; none.
///
/// Every time the allocator gave cached segments back before creating one (or before an OOM),
/// its first attempt had failed: reserved then plus the segment it wanted was over the limit.
/// An OOM whose `device_free` is below what it wanted says the device's size (reserved plus
/// free); one with enough free memory was a per-process cap (`set_per_process_memory_fraction`),
/// which snapshots do not record. A cap is known only within a range: at least the most the
/// recorded run reserved, below every failure's need. The replay takes the smallest, so a
/// scenario said to avoid the OOM avoids it whatever the cap was.
pub(super) fn memory_limit(
    snap: &Snapshot,
    device: u32,
    events: &mut dyn TraceEvents,
    initial_reserved: i64,
    runs: &[(usize, usize, ReleaseCause)],
    given: Option<u64>,
) -> std::io::Result<(Option<u64>, LimitSource, Vec<Note>)> {
    if let Some(m) = given {
        return Ok((Some(m), LimitSource::Given, Vec::new()));
    }
    let settings = snap
        .allocator_settings
        .as_deref()
        .map(Settings::from_recorded)
        .unwrap_or_default();
    let mut reserved = initial_reserved;
    let mut most = reserved;
    // reserved before the maps of the current allocation (expandable segments check the
    // whole segment size the request would need, not what they map)
    let mut maps_from: Option<i64> = None;
    let mut release_from: Option<i64> = None;
    let mut bound: Option<i64> = None;
    let mut device_size: Option<i64> = None;
    let mut capped = false;
    let tighten = |b: &mut Option<i64>, v: i64| *b = Some(b.map_or(v, |x| x.min(v)));
    // the runs in order: the one event `i` is in or before
    let mut run = runs.iter().peekable();
    events.visit(device, &mut |i, e, _, aux| {
        match e.action {
            Action::SegmentFree | Action::SegmentUnmap => {
                while run.next_if(|r| r.1 <= i).is_some() {}
                let forced = run
                    .peek()
                    .is_some_and(|r| r.0 <= i && r.2 == ReleaseCause::Allocation);
                // an empty_cache() release says nothing about the limit
                if forced {
                    release_from.get_or_insert(reserved);
                }
                reserved -= e.size as i64;
            }
            Action::SegmentAlloc | Action::SegmentMap => {
                if e.action == Action::SegmentMap {
                    maps_from.get_or_insert(reserved);
                }
                if let Some(r0) = release_from.take() {
                    tighten(&mut bound, r0 + e.size as i64 - 1);
                }
                reserved += e.size as i64;
                most = most.max(reserved);
            }
            Action::Oom => {
                let need = allocation_size(settings.round_size(e.size)) as i64;
                tighten(&mut bound, reserved + need - 1);
                if let Some(r0) = release_from.take() {
                    tighten(&mut bound, r0 + need - 1);
                }
                match aux.and_then(|x| x.device_free) {
                    Some(free) if (free as i64) < need => {
                        tighten(&mut device_size, reserved + free as i64)
                    }
                    Some(_) => capped = true,
                    None => {}
                }
            }
            Action::Alloc | Action::FreeRequested | Action::FreeCompleted => {
                release_from = None;
                if let (Some(r0), Action::Alloc) = (maps_from.take(), e.action) {
                    let need = allocation_size(settings.round_size(e.size)) as i64;
                    most = most.max(r0 + need);
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    let mut notes = Vec::new();
    if let Some(d) = device_size {
        return Ok((Some(d.max(0) as u64), LimitSource::RecordedOom, notes));
    }
    let Some(upper) = bound else {
        return Ok((None, LimitSource::NoFailure, notes));
    };
    let lower = most.max(0) as u64;
    if upper < lower as i64 {
        // no fixed limit explains both: the run held more than a failure says it could
        notes.push(Note::LimitContradiction { lower, upper });
        return Ok((Some(lower), LimitSource::SmallestAllowed, notes));
    }
    notes.push(Note::LimitRange {
        lower,
        upper,
        capped,
    });
    Ok((Some(lower), LimitSource::SmallestAllowed, notes))
}
