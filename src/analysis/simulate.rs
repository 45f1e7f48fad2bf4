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

use crate::model::snapshot::{Action, DeviceTrace, SizeClass, Snapshot, StackId, TraceEvent};

use super::caching_allocator::{
    allocation_size, Allocator, BlockId, SegmentAction, SegmentView, SettingError, Settings,
    SMALL_BUFFER, SMALL_SIZE,
};
use super::sites::Sites;
use super::timeline::timeline;

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

/// A live block while rewinding: size when the final state has it, requested, pending free.
type LiveBlock = (Option<u64>, u64, bool);

/// The state before the first event: the final segments and active blocks, with every trace
/// event undone (segments the trace made removed, those it freed put back; allocations the
/// trace made removed, those it freed put back). Free blocks are the gaps, as the allocator
/// merges free neighbours. A block that is not in the final state has its rounded size, grown
/// over a gap too small to have been split off.
pub fn initial_state(snap: &Snapshot, device: u32, settings: &Settings) -> InitialState {
    let empty = DeviceTrace::default();
    let trace = snap.trace(device).unwrap_or(&empty);
    let events = &trace.events;
    // address -> (size, stream, small)
    let mut segs: FxHashMap<u64, (u64, i64, bool)> = FxHashMap::default();
    // address -> (size if known, requested, pending)
    let mut live: FxHashMap<u64, LiveBlock> = FxHashMap::default();
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
                    (
                        Some(b.size),
                        b.requested(&snap.history),
                        !b.state.is_allocated(),
                    ),
                );
            }
        }
    }
    for e in events.iter().rev() {
        match e.action {
            Action::SegmentAlloc => {
                segs.remove(&e.addr);
            }
            Action::SegmentFree => {
                segs.insert(e.addr, (e.size, trace.stream(e), e.size == SMALL_BUFFER));
            }
            // pages of an expandable segment: the file lists each mapped range as a segment,
            // so a map undone takes its pages out of whatever range holds them, an unmap
            // undone puts them back, joined to the ranges they touch
            Action::SegmentMap => unmap_range(&mut segs, e.addr, e.size),
            Action::SegmentUnmap => {
                map_range(&mut segs, e.addr, e.size, trace.stream(e));
            }
            Action::Alloc => {
                live.remove(&e.addr);
            }
            Action::FreeCompleted => {
                live.entry(e.addr).or_insert((None, e.size, true)).2 = true;
            }
            Action::FreeRequested => {
                live.entry(e.addr).or_insert((None, e.size, false)).2 = false;
            }
            _ => {}
        }
    }
    let mut seg_list: Vec<(u64, (u64, i64, bool))> = segs.into_iter().collect();
    seg_list.sort_unstable_by_key(|s| s.0);
    let mut blocks: Vec<(u64, LiveBlock)> = live.into_iter().collect();
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

/// Each run of `segment_free` / `segment_unmap` events in `events`, as (first index, index
/// after the last, cause). The run's stack says the cause when the file has one: `emptyCache`
/// (C++) or `empty_cache` (Python) for `torch.cuda.empty_cache()`, the allocator's `malloc` for
/// its own release. Without a telling stack, a run followed directly by a new segment or an OOM
/// is taken for the free-and-retry path, any other for `empty_cache()`, unless no limit allows
/// it: a retry says the limit was below what was reserved before the release plus the segment
/// made after it, and the limit is at least the most the run ever reserved (`initial_reserved`
/// is the bytes held before the first event).
pub fn release_runs(
    snap: &Snapshot,
    events: &[TraceEvent],
    initial_reserved: i64,
) -> Vec<(usize, usize, ReleaseCause)> {
    let releases = |e: &TraceEvent| matches!(e.action, Action::SegmentFree | Action::SegmentUnmap);
    // reserved before each event, and the most ever reserved
    let mut reserved_before = Vec::with_capacity(events.len());
    let mut reserved = initial_reserved;
    let mut most = reserved;
    for e in events {
        reserved_before.push(reserved);
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => reserved += e.size as i64,
            Action::SegmentFree | Action::SegmentUnmap => reserved -= e.size as i64,
            _ => {}
        }
        most = most.max(reserved);
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < events.len() {
        if !releases(&events[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < events.len() && releases(&events[i]) {
            i += 1;
        }
        let said = events[start..i]
            .iter()
            .find_map(|e| stack_release_cause(snap, e.stack));
        let cause = said.unwrap_or_else(|| match events.get(i) {
            Some(e) if e.action == Action::Oom => ReleaseCause::Allocation,
            Some(e)
                if matches!(e.action, Action::SegmentAlloc | Action::SegmentMap)
                    && reserved_before[start] + retry_need(&events[i..]) > most =>
            {
                ReleaseCause::Allocation
            }
            _ => ReleaseCause::EmptyCache,
        });
        out.push((start, i, cause));
    }
    out
}

/// What a retry after a release starting `events[0]` (a new segment) asked for: the segment, or
/// for an expandable segment's map, the allocation it maps for when that is larger (the limit
/// check counts the request, the map may be smaller).
fn retry_need(events: &[TraceEvent]) -> i64 {
    let first = events[0].size;
    let request = match events[0].action {
        Action::SegmentMap => events
            .iter()
            .find(|e| e.action == Action::Alloc)
            .map_or(0, |e| e.size),
        _ => 0,
    };
    first.max(request) as i64
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
    events: &[TraceEvent],
    runs: &[(usize, usize, ReleaseCause)],
    given: Option<u64>,
) -> (Option<u64>, LimitSource, Vec<Note>) {
    if let Some(m) = given {
        return (Some(m), LimitSource::Given, Vec::new());
    }
    let settings = snap
        .allocator_settings
        .as_deref()
        .map(Settings::from_recorded)
        .unwrap_or_default();
    let trace = snap.trace(device);
    let mut reserved = timeline(snap, device, false).initial_reserved_bytes;
    let mut most = reserved;
    // reserved before the maps of the current allocation (expandable segments check the
    // whole segment size the request would need, not what they map)
    let mut maps_from: Option<i64> = None;
    let mut release_from: Option<i64> = None;
    let mut bound: Option<i64> = None;
    let mut device_size: Option<i64> = None;
    let mut capped = false;
    let tighten = |b: &mut Option<i64>, v: i64| *b = Some(b.map_or(v, |x| x.min(v)));
    let mut forced = vec![false; events.len()];
    for &(start, end, cause) in runs {
        forced[start..end].fill(cause == ReleaseCause::Allocation);
    }
    for (i, e) in events.iter().enumerate() {
        match e.action {
            Action::SegmentFree | Action::SegmentUnmap => {
                // an empty_cache() release says nothing about the limit
                if forced[i] {
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
                match trace.and_then(|t| t.aux(i)).and_then(|x| x.device_free) {
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
    }
    let mut notes = Vec::new();
    if let Some(d) = device_size {
        return (Some(d.max(0) as u64), LimitSource::RecordedOom, notes);
    }
    let Some(upper) = bound else {
        return (None, LimitSource::NoFailure, notes);
    };
    let lower = most.max(0) as u64;
    if upper < lower as i64 {
        // no fixed limit explains both: the run held more than a failure says it could
        notes.push(Note::LimitContradiction { lower, upper });
        return (Some(lower), LimitSource::SmallestAllowed, notes);
    }
    notes.push(Note::LimitRange {
        lower,
        upper,
        capped,
    });
    (Some(lower), LimitSource::SmallestAllowed, notes)
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

/// Replay a device's trace under each of `scenarios` (the file's own settings first is the
/// caller's choice; validation compares against the first).
pub fn simulate(
    snap: &Snapshot,
    device: u32,
    scenarios: &[Settings],
    memory: Option<u64>,
) -> DeviceSimulation {
    let empty = DeviceTrace::default();
    let trace = snap.trace(device).unwrap_or(&empty);
    let initial_reserved = timeline(snap, device, false).initial_reserved_bytes;
    let runs = release_runs(snap, &trace.events, initial_reserved);
    let (limit, source, mut notes) = memory_limit(snap, device, &trace.events, &runs, memory);
    // the scenarios are independent replays of one trace: one a core
    let replays = each_on_all_cores(scenarios.len(), |k| {
        let settings = &scenarios[k];
        let init = initial_state(snap, device, settings);
        let mut run = Replay::new(settings.clone(), limit, &init, &trace.events, &runs, k == 0);
        for (i, e) in trace.events.iter().enumerate() {
            run.event(i, e, trace.stream(e));
        }
        let (scenario, log) = run.finish(trace.events.len());
        let validation = (k == 0).then(|| validate(snap, device, &trace.events, &log));
        (scenario, validation, init.note(), init.unplaced_blocks)
    });
    let mut out_scenarios = Vec::with_capacity(scenarios.len());
    let mut validation = Validation::default();
    for (scenario, checked, start, unplaced_blocks) in replays {
        if let Some(checked) = checked {
            validation = checked;
            notes.extend(start.filter(|_| !trace.events.is_empty()));
            if unplaced_blocks > 0 {
                notes.push(Note::UnplacedBlocks(unplaced_blocks));
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
    DeviceSimulation {
        device,
        trace_events: trace.events.len(),
        first_time_us: trace.events.iter().find_map(|e| e.time()),
        memory_limit_bytes: limit,
        memory_limit_source: source,
        notes,
        scenarios: out_scenarios,
        validation,
    }
}

/// Name where each simulated OOM's request came from, from a snapshot read with its stacks
/// (the replay itself needs none, so a command reads them only when there is an OOM to name).
pub fn label_oom_sites(sim: &mut Simulation, snap: &Snapshot) {
    let mut sites = Sites::new(snap);
    for d in &mut sim.devices {
        let Some(trace) = snap.trace(d.device) else {
            continue;
        };
        for sc in &mut d.scenarios {
            for o in &mut sc.ooms {
                let stack: StackId = trace
                    .events
                    .get(o.index)
                    .map_or(StackId::MISSING, |e| e.stack);
                if !stack.is_missing() {
                    let k = sites.site(stack);
                    o.site = Some(sites.label(k, false));
                }
            }
        }
    }
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
    blocks: FxHashMap<u64, BlockId>,
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
    pub fn new(
        settings: Settings,
        limit: Option<u64>,
        init: &InitialState,
        events: &[TraceEvent],
        runs: &[(usize, usize, ReleaseCause)],
        recorded_addresses: bool,
    ) -> Replay {
        let mut alloc = Allocator::new(settings.clone(), limit);
        let mut blocks = FxHashMap::default();
        for s in &init.segments {
            for (a, id) in
                alloc.place_segment(s.address, s.size, s.stream as u64, s.small, &s.blocks)
            {
                blocks.insert(a, id);
            }
        }
        let free_completes = !events.iter().any(|e| e.action == Action::FreeCompleted);
        // the model empties its cache at the program event after the release (segment events
        // between are the recording's answers, not the program's), where validation counts it
        let empty_cache_before = runs
            .iter()
            .filter(|r| r.2 == ReleaseCause::EmptyCache)
            .map(|r| {
                (r.1..events.len())
                    .find(|&i| recorded_action(events[i].action).is_none())
                    .unwrap_or(events.len())
            })
            .collect();
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
            free_completes,
            empty_cache_before,
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
            let mut pending = Vec::new();
            for (i, e) in events.iter().enumerate() {
                match e.action {
                    Action::SegmentAlloc => pending.push((e.size, e.addr)),
                    Action::Alloc | Action::Oom => {
                        r.hints.extend(pending.drain(..).map(|(s, a)| (i, s, a)))
                    }
                    _ => {}
                }
            }
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
                    if let Some(id) = self.blocks.remove(&e.addr) {
                        self.alloc.free_completed(id);
                    }
                } else if let Some(&id) = self.blocks.get(&e.addr) {
                    self.alloc.free_requested(id);
                }
            }
            Action::FreeCompleted => {
                if let Some(id) = self.blocks.remove(&e.addr) {
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
fn validate(snap: &Snapshot, device: u32, events: &[TraceEvent], log: &SegmentLog) -> Validation {
    // a recorded segment event belongs to the first program event after it
    let mut recorded: Vec<(SegmentAction, u64, usize)> = Vec::new();
    let mut open = 0;
    for (i, e) in events.iter().enumerate() {
        match recorded_action(e.action) {
            Some(a) => recorded.push((a, e.size, usize::MAX)),
            None => {
                for r in &mut recorded[open..] {
                    r.2 = i;
                }
                open = recorded.len();
            }
        }
    }
    for r in &mut recorded[open..] {
        r.2 = events.len();
    }
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
    let tl = timeline(snap, device, false);
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

/// Replay the traces of `devices` under each of `scenarios`, with the memory limit `memory` (bytes)
/// or one inferred from the file.
pub fn simulation(
    snap: &Snapshot,
    devices: &[u32],
    scenarios: &[Settings],
    memory: Option<u64>,
) -> Simulation {
    Simulation {
        kind: "allocator_simulation",
        own_settings_from: if snap.allocator_settings.is_some() {
            "file"
        } else {
            "defaults"
        },
        devices: devices
            .iter()
            .map(|&d| simulate(snap, d, scenarios, memory))
            .collect(),
    }
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
