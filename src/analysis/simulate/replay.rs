//! One scenario's replay of a trace through the allocator model, what one walk of the trace
//! tells every replay before they start, and the check of a replay against the recording.

use crate::model::snapshot::{Action, Snapshot, TraceEvent};
use crate::model::trace::TraceEvents;

use super::super::address_map::AddressMap;
use super::super::caching_allocator::{Allocator, BlockId, SegmentAction, SegmentView, Settings};
use super::super::rewind::Placed;
use super::super::timeline::Timeline;
use super::limit::{ReleaseCause, ReleaseRuns};
use super::report::{Mismatch, Scenario, SegmentEventRef, SimulatedOom, Validation};

/// What one walk of a trace tells every replay, found before them.
pub(super) struct TracePlan {
    pub(super) events: usize,
    pub(super) first_time_us: Option<i64>,
    /// The release runs (see [`ReleaseRuns`]).
    pub(super) runs: Vec<(usize, usize, ReleaseCause)>,
    /// Whether `free_requested` also completes the free: traces without `free_completed`.
    pub(super) free_completes: bool,
    /// Indices of the program events that an `empty_cache()` release came just before.
    pub(super) empty_cache_before: Vec<usize>,
    /// Recorded `segment_alloc`s as (program event index, size, address), in order.
    pub(super) hints: Vec<(usize, u64, u64)>,
    /// The recorded segment events, each with the program event it belongs to (the first
    /// after it).
    pub(super) recorded: Vec<(SegmentAction, u64, usize)>,
}

impl TracePlan {
    pub(super) fn new(
        snap: &Snapshot,
        device: u32,
        events: &mut dyn TraceEvents,
        initial_reserved: i64,
    ) -> std::io::Result<TracePlan> {
        let mut runs = ReleaseRuns::new(snap, initial_reserved);
        // the program event at or after the end of each run so far
        let mut program_after_run: Vec<usize> = Vec::new();
        let mut first_time_us = None;
        let mut free_completes = true;
        let mut hints = Vec::new();
        let mut pending_segments = Vec::new();
        let mut recorded: Vec<(SegmentAction, u64, usize)> = Vec::new();
        let mut open = 0;
        let mut count = 0;
        events.visit(device, &mut |i, e, _, _| {
            count = i + 1;
            runs.event(i, e);
            if first_time_us.is_none() {
                first_time_us = e.time();
            }
            free_completes &= e.action != Action::FreeCompleted;
            match e.action {
                Action::SegmentAlloc => pending_segments.push((e.size, e.addr)),
                Action::Alloc | Action::Oom => {
                    hints.extend(pending_segments.drain(..).map(|(s, a)| (i, s, a)))
                }
                _ => {}
            }
            match recorded_action(e.action) {
                Some(a) => recorded.push((a, e.size, usize::MAX)),
                None => {
                    // a recorded segment event belongs to the first program event after it
                    for r in &mut recorded[open..] {
                        r.2 = i;
                    }
                    open = recorded.len();
                    program_after_run.resize(runs.runs.len(), i);
                }
            }
            Ok(())
        })?;
        for r in &mut recorded[open..] {
            r.2 = count;
        }
        let runs = runs.finish(count);
        program_after_run.resize(runs.len(), count);
        // the model empties its cache at the program event after the release (segment events
        // between are the recording's answers, not the program's), where validation counts it
        let empty_cache_before = runs
            .iter()
            .zip(&program_after_run)
            .filter(|(r, _)| r.2 == ReleaseCause::EmptyCache)
            .map(|(_, &at)| at)
            .collect();
        Ok(TracePlan {
            events: count,
            first_time_us,
            runs,
            free_completes,
            empty_cache_before,
            hints,
            recorded,
        })
    }
}

/// The model's segment events, each with the trace index it belongs to.
pub struct SegmentLog {
    /// (action, size in bytes, index of the program event it belongs to), in order.
    pub simulated: Vec<(SegmentAction, u64, usize)>,
    /// The model's segments after the last event.
    pub final_segments: Vec<SegmentView>,
}

/// One scenario's replay, event by event.
pub struct Replay {
    alloc: Allocator,
    blocks: AddressMap<BlockId>,
    /// Whether `free_requested` also completes the free: traces without `free_completed`.
    free_completes: bool,
    /// Indices of the program events that an `empty_cache()` release came just before.
    empty_cache_before: Vec<usize>,
    next_empty_cache: usize,
    /// The scenario's figures so far.
    report: Scenario,
    peak_requested: u64,
    log: Vec<(SegmentAction, u64, usize)>,
    /// Recorded `segment_alloc`s as (program event index, size, address), in order.
    hints: Vec<(usize, u64, u64)>,
    next_hint: usize,
}

impl Replay {
    /// `recorded_addresses`: place new segments where the recorded run's landed (the replay
    /// under the file's own settings), so that ties between equal free blocks, which the
    /// allocator breaks by address, break the same way.
    pub(super) fn new(
        settings: Settings,
        limit: Option<u64>,
        init: &Placed,
        plan: &TracePlan,
        recorded_addresses: bool,
    ) -> Replay {
        let mut alloc = Allocator::new(settings.clone(), limit);
        let mut blocks = AddressMap::new();
        for s in &init.segments {
            for (a, id) in
                alloc.place_segment(s.address, s.size, s.stream as u64, s.small, &s.blocks)
            {
                blocks.insert(a, id);
            }
        }
        let report = Scenario {
            settings: settings.describe(),
            settings_detail: settings,
            peak_reserved_bytes: alloc.reserved,
            peak_reserved_index: None,
            end_reserved_bytes: 0,
            peak_allocated_bytes: alloc.requested,
            largest_free_block_at_peak_bytes: 0,
            free_bytes_at_peak: 0,
            fragmentation_at_peak: None,
            segments_created: 0,
            num_alloc_retries: 0,
            ooms: Vec::new(),
        };
        let mut r = Replay {
            alloc,
            blocks,
            free_completes: plan.free_completes,
            empty_cache_before: plan.empty_cache_before.clone(),
            next_empty_cache: 0,
            peak_requested: 0,
            report,
            log: Vec::new(),
            hints: Vec::new(),
            next_hint: 0,
        };
        r.note_peak(None);
        r.peak_requested = r.alloc.requested;
        if recorded_addresses {
            r.hints = plan.hints.clone();
        }
        r
    }

    fn note_peak(&mut self, index: Option<usize>) {
        let (free, largest) = self.alloc.free_stats();
        let p = &mut self.report;
        p.peak_reserved_bytes = self.alloc.reserved;
        p.peak_reserved_index = index;
        p.free_bytes_at_peak = free;
        p.largest_free_block_at_peak_bytes = largest;
        p.fragmentation_at_peak = (free > 0).then(|| 1.0 - largest as f64 / free as f64);
    }

    /// Start loading what events a little ahead will touch, in steps, each loaded by the time
    /// the next needs it: the block map's slot of `far`'s address; the record of the block
    /// `near` frees (found in that slot); the records of the neighbours `next` frees into.
    /// With millions of live blocks each is a cache miss the replay would otherwise wait on.
    #[inline]
    pub(super) fn prefetch(
        &self,
        far: Option<&(TraceEvent, i64)>,
        near: Option<&(TraceEvent, i64)>,
        next: Option<&(TraceEvent, i64)>,
    ) {
        if let Some((e, _)) = far {
            self.blocks.prefetch(e.addr);
        }
        let frees =
            |e: &TraceEvent| matches!(e.action, Action::FreeRequested | Action::FreeCompleted);
        if let Some((e, _)) = near.filter(|(e, _)| frees(e)) {
            if let Some(&id) = self.blocks.get(e.addr) {
                self.alloc.prefetch(id);
            }
        }
        // a free that returns the block to its pool merges it with its free neighbours
        let merges = |e: &TraceEvent| {
            e.action == Action::FreeCompleted
                || (self.free_completes && e.action == Action::FreeRequested)
        };
        if let Some((e, _)) = next.filter(|(e, _)| merges(e)) {
            if let Some(&id) = self.blocks.get(e.addr) {
                self.alloc.prefetch_neighbours(id);
            }
        }
    }

    /// Replay event `i`, `e`, made on `stream`.
    pub fn event(&mut self, i: usize, e: &TraceEvent, stream: i64) {
        let mut emptied = false;
        while self
            .empty_cache_before
            .get(self.next_empty_cache)
            .is_some_and(|&at| at <= i)
        {
            self.next_empty_cache += 1;
            emptied = true;
        }
        if emptied {
            // segments given back with no allocation asking: torch.cuda.empty_cache()
            self.alloc.release_cached_blocks();
        }
        while self.hints.get(self.next_hint).is_some_and(|h| h.0 < i) {
            self.next_hint += 1;
        }
        self.alloc.address_hint = self
            .hints
            .get(self.next_hint)
            .filter(|h| h.0 == i)
            .map(|h| (h.1, h.2));
        match e.action {
            Action::Alloc => match self.alloc.malloc(e.size, stream as u64) {
                Some(id) => {
                    self.blocks.insert(e.addr, id);
                }
                None => self.oom(i, e, false),
            },
            // would these settings have served the request that failed?
            Action::Oom if self.alloc.malloc(e.size, stream as u64).is_none() => {
                self.oom(i, e, true)
            }
            Action::FreeRequested => {
                if self.free_completes {
                    if let Some(id) = self.blocks.remove(e.addr) {
                        self.alloc.free_completed(id);
                    }
                } else if let Some(&id) = self.blocks.get(e.addr) {
                    self.alloc.free_requested(id);
                }
            }
            Action::FreeCompleted => {
                if let Some(id) = self.blocks.remove(e.addr) {
                    self.alloc.free_completed(id);
                }
            }
            _ => {}
        }
        if self.alloc.has_segment_events() {
            self.log.extend(
                self.alloc
                    .take_segment_events()
                    .map(|s| (s.action, s.size, i)),
            );
        }
        if self.alloc.reserved > self.report.peak_reserved_bytes {
            self.note_peak(Some(i));
        }
        self.peak_requested = self.peak_requested.max(self.alloc.requested);
    }

    fn oom(&mut self, i: usize, e: &TraceEvent, recorded: bool) {
        self.report.ooms.push(SimulatedOom {
            index: i,
            time_us: e.time(),
            requested_bytes: e.size,
            reserved_bytes: self.alloc.reserved,
            site: None,
            recorded,
        });
    }

    /// The scenario's report, and the segment log validation compares with the recording.
    pub fn finish(mut self, events: usize) -> (Scenario, SegmentLog) {
        if self.next_empty_cache < self.empty_cache_before.len() {
            // an empty_cache() after the last program event
            self.alloc.release_cached_blocks();
            let released = self.alloc.take_segment_events();
            self.log
                .extend(released.map(|s| (s.action, s.size, events)));
        }
        self.report.end_reserved_bytes = self.alloc.reserved;
        self.report.peak_allocated_bytes = self.peak_requested;
        self.report.segments_created = self.alloc.segments_created;
        self.report.num_alloc_retries = self.alloc.num_alloc_retries;
        let log = SegmentLog {
            simulated: self.log,
            final_segments: self.alloc.segments(),
        };
        (self.report, log)
    }
}

fn recorded_action(a: Action) -> Option<SegmentAction> {
    match a {
        Action::SegmentAlloc => Some(SegmentAction::SegmentAlloc),
        Action::SegmentFree => Some(SegmentAction::SegmentFree),
        Action::SegmentMap => Some(SegmentAction::SegmentMap),
        Action::SegmentUnmap => Some(SegmentAction::SegmentUnmap),
        _ => None,
    }
}

/// The replay under the file's own settings against what the file recorded.
/// `recorded`: the file's segment events, each with the program event it belongs to; `tl`:
/// the recorded timeline.
pub(super) fn validate(
    snap: &Snapshot,
    device: u32,
    tl: &Timeline,
    recorded: &[(SegmentAction, u64, usize)],
    log: &SegmentLog,
) -> Validation {
    let matched = recorded
        .iter()
        .zip(&log.simulated)
        .take_while(|(r, s)| r == s)
        .count();
    let as_ref = |x: &(SegmentAction, u64, usize)| SegmentEventRef {
        action: x.0.name(),
        size: x.1,
        index: x.2,
    };
    let first_mismatch = (matched < recorded.len().max(log.simulated.len())).then(|| Mismatch {
        recorded: recorded.get(matched).map(as_ref),
        simulated: log.simulated.get(matched).map(as_ref),
    });
    let mut file_sizes: Vec<u64> = snap.segments_on(device).map(|s| s.total_size).collect();
    let mut sim_sizes: Vec<u64> = log.final_segments.iter().map(|s| s.size).collect();
    file_sizes.sort_unstable();
    sim_sizes.sort_unstable();
    Validation {
        segment_events_recorded: recorded.len(),
        segment_events_matched: matched,
        segment_events_simulated: log.simulated.len(),
        first_mismatch,
        final_segments_match: file_sizes == sim_sizes,
        final_segments_recorded: file_sizes.len(),
        final_segments_simulated: sim_sizes.len(),
        recorded_peak_reserved_bytes: tl.peak_reserved.map(|p| p.bytes),
        recorded_end_reserved_bytes: tl.final_reserved_bytes.max(0) as u64,
    }
}
