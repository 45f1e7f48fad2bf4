//! Replay a snapshot's trace through the caching-allocator model (`caching_allocator`) under
//! the file's own settings and under others: peak reserved, fragmentation, OOMs per scenario,
//! and a check of the model against the segment events the file recorded.
//!
//! The replay's input is narrow on purpose: the segments and live blocks before the trace's
//! first event (`InitialState`) and the trace events in order. Program actions (`alloc`,
//! `free_requested`, `free_completed`, `oom`) drive the model; the recorded segment events are
//! what the allocator did in answer, and only compared, except a run of `segment_free` /
//! `segment_unmap` that no allocation asked for: that is `torch.cuda.empty_cache()`, and the
//! model empties its cache there too.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::model::snapshot::{Action, SizeClass, Snapshot, StackId, TraceEvent};
use crate::model::trace::TraceEvents;

use super::address_map::AddressMap;
use super::caching_allocator::{
    allocation_size, Allocator, BlockId, SegmentAction, SegmentView, SettingError, Settings,
    SMALL_BUFFER, SMALL_SIZE,
};
use super::sites::Sites;
use super::timeline::{timeline, Timeline};

/// A segment before the trace's first event, with its active blocks.
#[derive(Clone, Debug)]
pub struct InitialSegment {
    /// The segment's base address, as the file gives it.
    pub address: u64,
    /// The segment's size in bytes.
    pub size: u64,
    /// The CUDA stream it was allocated for (`0` is the default stream).
    pub stream: i64,
    /// Whether it belongs to the small pool (2 MiB segments of blocks up to 1 MiB).
    pub small: bool,
    /// (address, size, requested, pending_free) in address order.
    pub blocks: Vec<(u64, u64, u64, bool)>,
}

/// The state before a trace's first event, as the replay starts from.
#[derive(Clone, Debug, Default)]
pub struct InitialState {
    /// Segments live before the first event, in address order.
    pub segments: Vec<InitialSegment>,
    /// Live blocks of the rewound state that lie in no segment (the file disagrees with itself).
    pub unplaced_blocks: usize,
    /// Live blocks before the trace that the final state does not have (freed in the trace but
    /// never allocated in it): their sizes are assumed, the request rounded.
    pub assumed_block_sizes: usize,
}

impl InitialState {
    /// What the replay assumed to start where the trace starts, when it did not start empty.
    pub fn note(&self) -> Option<Note> {
        (!self.segments.is_empty()).then(|| Note::StartState {
            segments: self.segments.len(),
            bytes: self.segments.iter().map(|s| s.size).sum(),
            live_blocks: self.segments.iter().map(|s| s.blocks.len()).sum(),
            assumed_block_sizes: self.assumed_block_sizes,
        })
    }
}

/// A live block while rewinding: size when the final state has it ([`UNKNOWN_SIZE`] when not),
/// requested, pending free. 24 bytes, so that a slot of the live map (32) lies in one cache
/// line: the rewind of millions of live blocks misses on nearly every slot it touches.
type LiveBlock = (u64, u64, bool);

/// The size of a [`LiveBlock`] the final state does not give (no block is 2^64 - 1 bytes).
const UNKNOWN_SIZE: u64 = u64::MAX;

/// The final segments and active blocks with every trace event undone: what
/// [`InitialState`] is placed from, whatever the settings.
pub struct Rewound {
    /// address -> (size, stream, small)
    segs: FxHashMap<u64, (u64, i64, bool)>,
    /// address -> (size if known, requested, pending)
    live: AddressMap<LiveBlock>,
}

/// The final segments and active blocks of `device`, with `events` (its trace) undone from
/// the last.
pub fn rewind(
    snap: &Snapshot,
    device: u32,
    events: &mut dyn TraceEvents,
) -> std::io::Result<Rewound> {
    let mut segs: FxHashMap<u64, (u64, i64, bool)> = FxHashMap::default();
    let mut live: AddressMap<LiveBlock> = AddressMap::new();
    for s in snap.segments_on(device) {
        // a mapped range of an expandable segment is placed as a plain segment (docs/simulate.md)
        segs.insert(
            s.address,
            (s.total_size, s.stream, s.size_class == SizeClass::Small),
        );
        for b in s.blocks(&snap.blocks) {
            if b.state.is_active() {
                live.insert(
                    b.address,
                    (b.size, b.requested(&snap.history), !b.state.is_allocated()),
                );
            }
        }
    }
    // a block event is undone a few events after it is read, its live-map slot fetched meanwhile
    let mut pending: std::collections::VecDeque<TraceEvent> = std::collections::VecDeque::new();
    let undo_block = |live: &mut AddressMap<LiveBlock>, e: &TraceEvent| match e.action {
        Action::Alloc => {
            live.remove(e.addr);
        }
        Action::FreeCompleted => match live.get_mut(e.addr) {
            Some(b) => b.2 = true,
            None => {
                live.insert(e.addr, (UNKNOWN_SIZE, e.size, true));
            }
        },
        Action::FreeRequested => match live.get_mut(e.addr) {
            Some(b) => b.2 = false,
            None => {
                live.insert(e.addr, (UNKNOWN_SIZE, e.size, false));
            }
        },
        _ => {}
    };
    events.visit_back_from(device, 0, &mut |_, e, stream, _| {
        match e.action {
            Action::SegmentAlloc => {
                segs.remove(&e.addr);
            }
            Action::SegmentFree => {
                segs.insert(e.addr, (e.size, stream, e.size == SMALL_BUFFER));
            }
            // pages of an expandable segment: the file lists each mapped range as a segment,
            // so a map undone takes its pages out of whatever range holds them, an unmap
            // undone puts them back, joined to the ranges they touch
            Action::SegmentMap => unmap_range(&mut segs, e.addr, e.size),
            Action::SegmentUnmap => {
                map_range(&mut segs, e.addr, e.size, stream);
            }
            Action::Alloc | Action::FreeCompleted | Action::FreeRequested => {
                live.prefetch(e.addr);
                pending.push_back(*e);
                if pending.len() > 16 {
                    let first = pending.pop_front().expect("not empty");
                    undo_block(&mut live, &first);
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    for e in pending {
        undo_block(&mut live, &e);
    }
    Ok(Rewound { segs, live })
}

/// The state before the first event under `settings`: the final segments and active blocks,
/// with every trace event undone (segments the trace made removed, those it freed put back;
/// allocations the trace made removed, those it freed put back). Free blocks are the gaps, as
/// the allocator merges free neighbours. A block that is not in the final state has its
/// rounded size, grown over a gap too small to have been split off: the rewound segments with their blocks
/// placed (sizes the final state does not give rounded as `settings` round them).
pub fn place(rewound: &Rewound, settings: &Settings) -> InitialState {
    let mut seg_list: Vec<(u64, (u64, i64, bool))> =
        rewound.segs.iter().map(|(&a, &s)| (a, s)).collect();
    seg_list.sort_unstable_by_key(|s| s.0);
    let mut blocks: Vec<(u64, LiveBlock)> = rewound.live.iter().map(|(a, &b)| (a, b)).collect();
    blocks.sort_unstable_by_key(|b| b.0);
    let mut out = InitialState::default();
    let mut bi = 0;
    for (addr, (size, stream, small)) in seg_list {
        let end = addr + size;
        while bi < blocks.len() && blocks[bi].0 < addr {
            out.unplaced_blocks += 1;
            bi += 1;
        }
        let mut mine = Vec::new();
        while bi < blocks.len() && blocks[bi].0 < end {
            mine.push(blocks[bi]);
            bi += 1;
        }
        let mut placed = Vec::with_capacity(mine.len());
        for (k, &(a, (known, req, pending))) in mine.iter().enumerate() {
            let next = mine.get(k + 1).map_or(end, |b| b.0);
            let known = (known != UNKNOWN_SIZE).then_some(known);
            out.assumed_block_sizes += usize::from(known.is_none());
            let size = known.unwrap_or_else(|| {
                let rounded = settings.round_size(req).min(next - a);
                let gap = next - a - rounded;
                let split = if small || settings.expandable_segments {
                    gap >= 512
                } else {
                    rounded < settings.max_split_size.unwrap_or(u64::MAX) && gap > SMALL_SIZE
                };
                if split {
                    rounded
                } else {
                    next - a
                }
            });
            placed.push((a, size, req, pending));
        }
        out.segments.push(InitialSegment {
            address: addr,
            size,
            stream,
            small,
            blocks: placed,
        });
    }
    out.unplaced_blocks += blocks.len() - bi;
    out
}

/// Take `[addr, addr + size)` out of the mapped ranges (address -> (size, stream, small)) that
/// hold it, keeping what is left of them on either side.
fn unmap_range(segs: &mut FxHashMap<u64, (u64, i64, bool)>, addr: u64, size: u64) {
    let end = addr + size;
    let hit: Vec<u64> = segs
        .iter()
        .filter(|(&a, &(s, _, _))| a < end && a + s > addr)
        .map(|(&a, _)| a)
        .collect();
    for a in hit {
        let Some((s, stream, small)) = segs.remove(&a) else {
            continue;
        };
        if a < addr {
            segs.insert(a, (addr - a, stream, small));
        }
        if a + s > end {
            segs.insert(end, (a + s - end, stream, small));
        }
    }
}

/// Put `[addr, addr + size)` back among the mapped ranges, joined to a range that ends where it
/// starts or starts where it ends (one expandable segment's mapped pages are one range).
fn map_range(segs: &mut FxHashMap<u64, (u64, i64, bool)>, addr: u64, size: u64, stream: i64) {
    let mut start = addr;
    let mut len = size;
    // a neighbour's pool is this range's (a 2 MiB map of a large segment is not small)
    let mut small = None;
    if let Some(&(s, st, sm)) = segs.get(&(addr + size)) {
        if st == stream {
            segs.remove(&(addr + size));
            len += s;
            small = Some(sm);
        }
    }
    let before = segs
        .iter()
        .find(|(&a, &(s, st, _))| a + s == addr && st == stream)
        .map(|(&a, &(s, _, sm))| (a, s, sm));
    if let Some((a, s, sm)) = before {
        segs.remove(&a);
        start = a;
        len += s;
        small = Some(sm);
    }
    let small = small.unwrap_or(size == SMALL_BUFFER);
    segs.insert(start, (len, stream, small));
}

/// An allocation the replay could not serve under a scenario's settings.
#[derive(Clone, Debug, Serialize)]
pub struct SimulatedOom {
    /// Index of the trace event whose request fails.
    pub index: usize,
    /// The event's `time_us` in microseconds; None when the file has no times.
    pub time_us: Option<i64>,
    /// Bytes the program asked for.
    pub requested_bytes: u64,
    /// Reserved when it fails.
    pub reserved_bytes: u64,
    /// Where the program asked (the first Python frame), when the file has stacks.
    pub site: Option<String>,
    /// The recorded run failed here too.
    pub recorded: bool,
}

/// One replay's outcome under one setting.
#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    /// `PYTORCH_CUDA_ALLOC_CONF` spelling of the settings ("default" when none differ).
    pub settings: String,
    /// The settings themselves, every field spelled out.
    pub settings_detail: Settings,
    /// Highest bytes held in segments during the replay (the state before the trace included).
    pub peak_reserved_bytes: u64,
    /// Trace index where the peak was first reached.
    pub peak_reserved_index: Option<usize>,
    /// Bytes held in segments after the last event.
    pub end_reserved_bytes: u64,
    /// Requested bytes live at the peak of allocation: the same in every scenario that ran to
    /// the end without an OOM (a check on the replay).
    pub peak_allocated_bytes: u64,
    /// The largest cached free block at the reserved peak, in bytes.
    pub largest_free_block_at_peak_bytes: u64,
    /// Free bytes in mapped segments (what allocations could still use) at the reserved peak.
    pub free_bytes_at_peak: u64,
    /// `1 - largest free block / free bytes` at the peak of reserved.
    pub fragmentation_at_peak: Option<f64>,
    /// cudaMalloc calls plus expandable page mappings.
    pub segments_created: u64,
    /// Times the model freed cached segments and retried a cudaMalloc that failed.
    pub num_alloc_retries: u64,
    /// Allocations the replay could not serve, in trace order.
    pub ooms: Vec<SimulatedOom>,
}

/// A segment event, recorded or simulated, and where in the trace it belongs.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentEventRef {
    /// `segment_alloc`, `segment_free`, `segment_map` or `segment_unmap`.
    pub action: &'static str,
    /// The segment's (or mapped range's) size in bytes.
    pub size: u64,
    /// Index of the program event (alloc, oom, or the event after an `empty_cache()`) it
    /// belongs to.
    pub index: usize,
}

/// How the replay under the file's own settings compares with what the file recorded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Validation {
    /// Segment events in the file's trace.
    pub segment_events_recorded: usize,
    /// Recorded segment events reproduced in order (action, size and position) before the
    /// first difference.
    pub segment_events_matched: usize,
    /// Segment events the replay under the file's settings made.
    pub segment_events_simulated: usize,
    /// Where the recorded and replayed sequences first differ; None when they are equal.
    pub first_mismatch: Option<Mismatch>,
    /// Whether the final segment sizes (as a multiset) are the same in the file and the replay.
    pub final_segments_match: bool,
    /// Segments in the file's final state on this device.
    pub final_segments_recorded: usize,
    /// Segments the replay ended with.
    pub final_segments_simulated: usize,
    /// Recorded peak reserved (the trace's segment events, anchored at the final state).
    pub recorded_peak_reserved_bytes: Option<i64>,
    /// Bytes in the file's final segments on this device.
    pub recorded_end_reserved_bytes: u64,
}

/// The first segment event where recording and replay differ (`None` on a side that has no more).
#[derive(Clone, Debug, Serialize)]
pub struct Mismatch {
    /// The recorded event at the first difference.
    pub recorded: Option<SegmentEventRef>,
    /// The replayed event at the first difference.
    pub simulated: Option<SegmentEventRef>,
}

/// One device's replays: every scenario and the check of the first.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceSimulation {
    /// Device index replayed.
    pub device: u32,
    /// Events in the device's trace (0 without one).
    pub trace_events: usize,
    /// The first trace event's `time_us`: times are shown relative to it, as `summary` does.
    pub first_time_us: Option<i64>,
    /// The memory limit the replay enforced, in bytes (`None`: unlimited).
    pub memory_limit_bytes: Option<u64>,
    /// Where `memory_limit_bytes` came from.
    pub memory_limit_source: LimitSource,
    /// What the reader of the replay should know (how the limit was inferred, what the model
    /// left out).
    pub notes: Vec<Note>,
    /// One per setting, the file's own first.
    pub scenarios: Vec<Scenario>,
    /// The replay under the file's own settings (the first scenario) checked against the file.
    pub validation: Validation,
}

/// Where the replay's memory limit came from. Worded (text and JSON alike) by
/// `render::simulate`, which names the argument that sets a limit; `Display` says it without.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitSource {
    /// The caller gave it.
    Given,
    /// A recorded OOM that left less device memory free than it asked for: reserved then plus
    /// device free is the device's size.
    RecordedOom,
    /// The recorded failures bound a per-process cap; the replay takes the smallest they allow.
    SmallestAllowed,
    /// No recorded allocation failed, so nothing says what the limit was: the replay has none.
    NoFailure,
}

impl std::fmt::Display for LimitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitSource::Given => "given",
            LimitSource::RecordedOom => "the recorded OOM: reserved + device free",
            LimitSource::SmallestAllowed => "the smallest the recorded failures allow",
            LimitSource::NoFailure => "none (no allocation failed)",
        })
    }
}

/// Something the reader of a device's replay should know. Worded (text and JSON alike) by
/// `render::simulate`, which adds how to set a memory limit where that helps; `Display` says
/// what is so without it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// The recorded failures imply a per-process cap between `lower` and `upper` bytes; the
    /// replay uses `lower`.
    LimitRange {
        /// The most the recorded run reserved, in bytes.
        lower: u64,
        /// Below every recorded failure's need, in bytes.
        upper: i64,
        /// An OOM left device memory free: the cap was `set_per_process_memory_fraction`'s.
        capped: bool,
    },
    /// The recorded failures contradict each other: the run reserved `lower` bytes, yet a
    /// failure says the limit was below `upper` (< `lower`); the replay uses `lower`.
    LimitContradiction {
        /// The most the recorded run reserved, in bytes.
        lower: u64,
        /// Below this, by a recorded failure, in bytes.
        upper: i64,
    },
    /// The trace starts with segments (and live blocks) made before it: the state it starts
    /// from, rebuilt from the final state with every trace event undone.
    StartState {
        /// Segments before the first event.
        segments: usize,
        /// Their bytes.
        bytes: u64,
        /// Live blocks in them.
        live_blocks: usize,
        /// Of those, blocks whose size is assumed (freed in the trace, never allocated in it).
        assumed_block_sizes: usize,
    },
    /// Live blocks of the state before the trace that lie in no segment (left out).
    UnplacedBlocks(usize),
    /// A scenario sets `garbage_collection_threshold`, which does nothing without a limit.
    GcWithoutLimit,
    /// Segments of private pools (CUDA graphs, MemPool), replayed as the default pool.
    PrivatePools,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::LimitRange {
                lower,
                upper,
                capped,
            } => write!(
                f,
                "the recorded failures imply a limit from {lower} to {upper} bytes{}; the \
                 replay uses the smallest",
                if *capped {
                    " (the OOM left device memory free: a per-process cap, \
                     set_per_process_memory_fraction, which snapshots do not record)"
                } else {
                    ""
                }
            ),
            Note::LimitContradiction { lower, upper } => write!(
                f,
                "no fixed limit explains the recording: the run reserved {lower} bytes, yet a \
                 failed allocation says the limit was at most {upper}; the replay uses {lower}"
            ),
            Note::StartState {
                segments,
                bytes,
                live_blocks,
                assumed_block_sizes,
            } => write!(
                f,
                "the trace starts with {segments} segment(s) of {bytes} bytes and {live_blocks} \
                 live block(s) made before it, rebuilt from the final state with the trace \
                 undone; assumed: free space in them merged as the allocator merges it{}",
                if *assumed_block_sizes > 0 {
                    format!(
                        ", and the size of {assumed_block_sizes} block(s) freed but never \
                         allocated in the trace (their request, rounded)"
                    )
                } else {
                    String::new()
                }
            ),
            Note::UnplacedBlocks(n) => {
                write!(
                    f,
                    "{n} live block(s) before the trace lie in no segment; left out"
                )
            }
            Note::GcWithoutLimit => f.write_str(
                "garbage_collection_threshold acts only under a memory cap \
                 (set_per_process_memory_fraction)",
            ),
            Note::PrivatePools => f.write_str(
                "segments of private pools (CUDA graphs, MemPool) are replayed as the default pool",
            ),
        }
    }
}

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
struct ReleaseRuns<'s> {
    snap: &'s Snapshot,
    reserved: i64,
    most: i64,
    runs: Vec<(usize, usize, ReleaseCause)>,
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
    fn new(snap: &'s Snapshot, initial_reserved: i64) -> ReleaseRuns<'s> {
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

    fn event(&mut self, i: usize, e: &TraceEvent) {
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
    fn finish(mut self, events: usize) -> Vec<(usize, usize, ReleaseCause)> {
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
fn memory_limit(
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

/// `f(0)`, …, `f(n - 1)`, computed on as many cores as there are (up to `n`), in order.
fn each_on_all_cores<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if k >= n {
                return done;
            }
            done.push((k, f(k)));
        }
    };
    let mut all: Vec<(usize, T)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..cores.min(n)).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for h in helpers {
            // a panic in a replay is a bug: let it surface as on one thread
            all.extend(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        all
    });
    all.sort_by_key(|&(k, _)| k);
    all.into_iter().map(|(_, t)| t).collect()
}

/// What one walk of a trace tells every replay, found before them.
struct TracePlan {
    events: usize,
    first_time_us: Option<i64>,
    /// The release runs (see [`ReleaseRuns`]).
    runs: Vec<(usize, usize, ReleaseCause)>,
    /// Whether `free_requested` also completes the free: traces without `free_completed`.
    free_completes: bool,
    /// Indices of the program events that an `empty_cache()` release came just before.
    empty_cache_before: Vec<usize>,
    /// Recorded `segment_alloc`s as (program event index, size, address), in order.
    hints: Vec<(usize, u64, u64)>,
    /// The recorded segment events, each with the program event it belongs to (the first
    /// after it).
    recorded: Vec<(SegmentAction, u64, usize)>,
}

impl TracePlan {
    fn new(
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

/// Replay a device's trace under each of `scenarios` (the file's own settings first is the
/// caller's choice; validation compares against the first).
pub fn simulate(
    snap: &Snapshot,
    device: u32,
    scenarios: &[Settings],
    memory: Option<u64>,
) -> DeviceSimulation {
    let recorded = timeline(snap, device, false);
    let mut events = snap;
    simulate_events(snap, device, &recorded, &mut events, scenarios, memory)
        .expect("a kept trace reads without error")
}

/// Events replayed at a time, by every scenario (one a core) before the next are read.
const CHUNK: usize = 1 << 16;

/// [`simulate`] of a trace given by `events` (as often as asked: from a kept snapshot or from
/// where a reading put them aside), `recorded` its timeline; memory does not grow with the
/// trace beyond its segment events and OOMs.
pub fn simulate_events(
    snap: &Snapshot,
    device: u32,
    recorded: &Timeline,
    events: &mut dyn TraceEvents,
    scenarios: &[Settings],
    memory: Option<u64>,
) -> std::io::Result<DeviceSimulation> {
    let initial_reserved = recorded.initial_reserved_bytes;
    let forward = |events: &mut dyn TraceEvents| -> std::io::Result<_> {
        let plan = TracePlan::new(snap, device, events, initial_reserved)?;
        let limit = memory_limit(snap, device, events, initial_reserved, &plan.runs, memory)?;
        Ok((plan, limit))
    };
    // the walk back to the state before the trace needs nothing of the walks forward: where
    // the events can be walked twice at once, it goes on another core meanwhile
    let at_once = events.two_readers()?.map(|[mut ahead, mut back]| {
        std::thread::scope(|scope| {
            let rewinding = scope.spawn(move || rewind(snap, device, &mut *back));
            let planned = forward(&mut *ahead);
            // a panic in the walk back is a bug: let it surface as on one thread
            let rewound = (rewinding.join()).unwrap_or_else(|p| std::panic::resume_unwind(p));
            (planned, rewound)
        })
    });
    let (planned, rewound) = match at_once {
        Some(walked) => walked,
        None => (forward(events), rewind(snap, device, events)),
    };
    let (plan, (limit, source, mut notes)) = planned?;
    let rewound = rewound?;
    let inits: Vec<InitialState> =
        each_on_all_cores(scenarios.len(), |k| place(&rewound, &scenarios[k]));
    drop(rewound);
    let replays: Vec<std::sync::Mutex<Replay>> = inits
        .iter()
        .enumerate()
        .map(|(k, init)| {
            std::sync::Mutex::new(Replay::new(
                scenarios[k].clone(),
                limit,
                init,
                &plan,
                k == 0,
            ))
        })
        .collect();
    // the scenarios are independent replays of one trace: one a core, a chunk of events at a
    // time
    let replay_chunk = |first: usize, chunk: &[(TraceEvent, i64)]| {
        each_on_all_cores(replays.len(), |k| {
            let mut run = replays[k].lock().unwrap_or_else(|p| p.into_inner());
            for (j, (e, stream)) in chunk.iter().enumerate() {
                run.prefetch(chunk.get(j + 16), chunk.get(j + 8), chunk.get(j + 4));
                run.event(first + j, e, *stream);
            }
        });
    };
    // the trace is read (on this thread) while the chunk before is replayed (on another)
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<(usize, Vec<(TraceEvent, i64)>)>(1);
    let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Vec<(TraceEvent, i64)>>();
    std::thread::scope(|scope| {
        let replay_chunk = &replay_chunk;
        let replayer = scope.spawn(move || {
            for (first, chunk) in full_rx {
                replay_chunk(first, &chunk);
                // (its room used again for a later chunk; none wants it after the last)
                let _ = empty_tx.send(chunk);
            }
        });
        let mut chunk: Vec<(TraceEvent, i64)> = Vec::with_capacity(CHUNK.min(plan.events));
        let read = events.visit(device, &mut |i, e, stream, _| {
            chunk.push((*e, stream));
            if chunk.len() == CHUNK {
                let room = empty_rx
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(CHUNK));
                let full = std::mem::replace(&mut chunk, room);
                // (the replayer stops only by a panic, which its join passes on)
                let _ = full_tx.send((i + 1 - CHUNK, full));
                chunk.clear();
            }
            Ok(())
        });
        if read.is_ok() {
            let _ = full_tx.send((plan.events - chunk.len(), chunk));
        }
        drop(full_tx);
        // a panic in a replay is a bug: let it surface as on one thread
        replayer
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        read
    })?;
    let mut out_scenarios = Vec::with_capacity(scenarios.len());
    let mut validation = Validation::default();
    for (k, (run, init)) in replays.into_iter().zip(&inits).enumerate() {
        let run = run.into_inner().unwrap_or_else(|p| p.into_inner());
        let (scenario, log) = run.finish(plan.events);
        if k == 0 {
            validation = validate(snap, device, recorded, &plan.recorded, &log);
            notes.extend(init.note().filter(|_| plan.events > 0));
            if init.unplaced_blocks > 0 {
                notes.push(Note::UnplacedBlocks(init.unplaced_blocks));
            }
        }
        out_scenarios.push(scenario);
    }
    if limit.is_none()
        && scenarios
            .iter()
            .any(|s| s.garbage_collection_threshold > 0.0)
    {
        notes.push(Note::GcWithoutLimit);
    }
    if snap
        .segments_on(device)
        .any(|s| s.pool_id.is_some_and(|p| p != (0, 0)))
    {
        notes.push(Note::PrivatePools);
    }
    Ok(DeviceSimulation {
        device,
        trace_events: plan.events,
        first_time_us: plan.first_time_us,
        memory_limit_bytes: limit,
        memory_limit_source: source,
        notes,
        scenarios: out_scenarios,
        validation,
    })
}

/// Name where each simulated OOM's request came from, from a snapshot read with its stacks
/// and its trace given by `events` (the replay itself needs no stacks, so a command reads them
/// only when there is an OOM to name).
pub fn label_oom_sites(
    sim: &mut Simulation,
    snap: &Snapshot,
    events: &mut dyn TraceEvents,
) -> std::io::Result<()> {
    let mut sites = Sites::new(snap);
    for d in &mut sim.devices {
        let mut wanted: Vec<usize> = d
            .scenarios
            .iter()
            .flat_map(|sc| sc.ooms.iter().map(|o| o.index))
            .collect();
        if wanted.is_empty() {
            continue;
        }
        wanted.sort_unstable();
        wanted.dedup();
        let mut stacks: FxHashMap<usize, StackId> = FxHashMap::default();
        events.visit(d.device, &mut |i, e, _, _| {
            if wanted.binary_search(&i).is_ok() {
                stacks.insert(i, e.stack);
            }
            Ok(())
        })?;
        for sc in &mut d.scenarios {
            for o in &mut sc.ooms {
                let stack = stacks.get(&o.index).copied().unwrap_or(StackId::MISSING);
                if !stack.is_missing() {
                    let k = sites.site(stack);
                    o.site = Some(sites.label(k, false));
                }
            }
        }
    }
    Ok(())
}

impl Simulation {
    /// Whether any scenario of any device had an OOM.
    pub fn has_ooms(&self) -> bool {
        self.devices
            .iter()
            .any(|d| d.scenarios.iter().any(|s| !s.ooms.is_empty()))
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
    fn new(
        settings: Settings,
        limit: Option<u64>,
        init: &InitialState,
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
    fn prefetch(
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
fn validate(
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

/// The whole `simulate` report.
#[derive(Clone, Debug, Serialize)]
pub struct Simulation {
    /// JSON tag, always `"allocator_simulation"`.
    pub kind: &'static str,
    /// "file" when the snapshot records `allocator_settings`, else "defaults".
    pub own_settings_from: &'static str,
    /// One replay report per device asked for, in that order.
    pub devices: Vec<DeviceSimulation>,
}

/// The scenarios: the file's own settings, then each `--set` (a comma-separated list of
/// `KEY:VALUE` applied to the file's settings).
pub fn scenarios(snap: &Snapshot, sets: &[String]) -> Result<Vec<Settings>, SettingError> {
    let own = snap
        .allocator_settings
        .as_deref()
        .map(Settings::from_recorded)
        .unwrap_or_default();
    let mut out = vec![own.clone()];
    for set in sets {
        let mut s = own.clone();
        s.apply_all(set)?;
        out.push(s);
    }
    Ok(out)
}

/// Replay the traces of `devices` (given by `events`; `timelines` the recorded timeline of
/// each, in the same order) under each of `scenarios`, with the memory limit `memory` (bytes)
/// or one inferred from the file.
pub fn simulation(
    snap: &Snapshot,
    devices: &[u32],
    timelines: &[Timeline],
    events: &mut dyn TraceEvents,
    scenarios: &[Settings],
    memory: Option<u64>,
) -> std::io::Result<Simulation> {
    Ok(Simulation {
        kind: "allocator_simulation",
        own_settings_from: if snap.allocator_settings.is_some() {
            "file"
        } else {
            "defaults"
        },
        devices: devices
            .iter()
            .zip(timelines)
            .map(|(&d, tl)| simulate_events(snap, d, tl, events, scenarios, memory))
            .collect::<std::io::Result<_>>()?,
    })
}

/// Settings `summary` tries when a snapshot had an OOM or a fragmented cache.
pub const CANDIDATES: [&str; 4] = [
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
];

/// The scenario (after the first) that helps most: fewest OOMs, then the lowest peak reserved;
/// `None` when none has fewer OOMs or a peak at least 5% lower than the file's own settings.
pub fn best_alternative(sim: &DeviceSimulation) -> Option<&Scenario> {
    let own = sim.scenarios.first()?;
    let best = sim.scenarios[1..]
        .iter()
        .min_by_key(|s| (s.ooms.len(), s.peak_reserved_bytes))?;
    let fewer_ooms = best.ooms.len() < own.ooms.len();
    let lower_peak = best.ooms.len() == own.ooms.len()
        && (best.peak_reserved_bytes as f64) <= 0.95 * own.peak_reserved_bytes as f64;
    (fewer_ooms || lower_peak).then_some(best)
}

/// What `summary` suggests trying, from a replay it ran (never a guess).
#[derive(Clone, Debug, Serialize)]
pub struct Suggestion {
    /// Device index the suggestion is for.
    pub device: u32,
    /// The `--set` value to pass to `memtrack simulate`.
    pub settings: String,
    /// Peak reserved in bytes replayed under the file's own settings.
    pub own_peak_reserved_bytes: u64,
    /// Peak reserved in bytes replayed under the suggested settings.
    pub peak_reserved_bytes: u64,
    /// OOMs replayed under the file's own settings.
    pub own_ooms: usize,
    /// OOMs replayed under the suggested settings.
    pub ooms: usize,
}

/// For a device with OOMs or a fragmented cache: replay the `CANDIDATES` and suggest the one
/// that helps most, when one does.
pub fn suggest(snap: &Snapshot, device: u32) -> Option<Suggestion> {
    if snap.trace(device).is_none_or(|t| t.events.is_empty()) {
        return None;
    }
    let candidates: Vec<String> = CANDIDATES.iter().map(|c| c.to_string()).collect();
    let settings = scenarios(snap, &candidates).ok()?;
    let sim = simulate(snap, device, &settings, None);
    let own = sim.scenarios.first()?;
    let best = best_alternative(&sim)?;
    // a candidate equal to the file's own settings is no suggestion
    if best.settings_detail == own.settings_detail {
        return None;
    }
    let k = sim.scenarios.iter().position(|s| std::ptr::eq(s, best))?;
    Some(Suggestion {
        device,
        settings: candidates[k - 1].clone(),
        own_peak_reserved_bytes: own.peak_reserved_bytes,
        peak_reserved_bytes: best.peak_reserved_bytes,
        own_ooms: own.ooms.len(),
        ooms: best.ooms.len(),
    })
}
