//! `summary` of an allocator snapshot: per device, what the allocator holds and how well.
//!
//! Counters follow the allocator's own (`memory_stats()` and the segments' `allocated_size`,
//! `active_size`, `requested_size`); where a file lacks them they are derived from the blocks,
//! which is what the allocator computes them from.

use serde::Serialize;

use crate::model::snapshot::{Action, Layout, SizeClass, Snapshot};

use super::annotation_usage::{AnnotationUsage, DeviceTimes};
use super::leaks::{leak_suspects, AllocTimes, Leaks};
use super::timeline::{OomMark, Point, Timelines};

/// `summary` of an allocator snapshot.
#[derive(Debug, Serialize)]
pub struct SnapshotSummary {
    /// JSON tag, always `"allocator_snapshot"`.
    pub kind: &'static str,
    /// Which schema-era features the file has.
    pub layout: Layout,
    /// One entry per device asked for, in that order.
    pub devices: Vec<DeviceSummary>,
    /// `allocator_settings`, as in the file (absent in older files).
    pub allocator_settings: Option<serde_json::Map<String, serde_json::Value>>,
    /// For devices with OOMs or external fragmentation over 20%: the setting a replay found to
    /// help most (`memtrack simulate`), when one did.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub simulate_suggestions: Vec<super::simulate::Suggestion>,
    /// What `summary` of several snapshots tabulates for this file (`analysis::ranks`): set
    /// by the command, which knows the file's name, so that the table of a job's ranks can
    /// be built from these outputs alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub figures: Option<crate::model::ranks::RankFigures>,
    /// Whether the blocks in use at the end carry stacks (false: recorded without them, and
    /// the text says how to record them); None when no block is in use.
    pub allocations_have_stacks: Option<bool>,
}

/// One device's segments, blocks, totals and trace.
#[derive(Debug, Default, Serialize)]
pub struct DeviceSummary {
    /// Device index.
    pub device: u32,
    /// Number of segments on the device.
    pub segments: usize,
    /// Number of blocks, free and in use, over those segments.
    pub blocks: usize,
    /// Sum of segment sizes (cudaMalloc'd).
    pub reserved_bytes: u64,
    /// Blocks in use by tensors (`active_allocated`), at their rounded size.
    pub allocated_bytes: u64,
    /// Allocated plus freed blocks still waiting on a stream (`active_pending_free`).
    pub active_bytes: u64,
    /// What the program asked for, over active blocks.
    pub requested_bytes: u64,
    /// Reserved but not active: `inactive` blocks, reusable.
    pub free_bytes: u64,
    /// Bytes of `active_pending_free` blocks: freed, awaiting another stream.
    pub pending_free_bytes: u64,
    /// Active bytes beyond the request: rounding inside blocks.
    pub internal_fragmentation_bytes: u64,
    /// Of the free bytes, those not in the largest free block: `1 - largest/free`.
    pub external_fragmentation: Option<f64>,
    /// The largest `inactive` block (or block-less segment), in bytes.
    pub largest_free_block_bytes: u64,
    /// "file" when every segment carries the allocator's counters, "derived" when none does,
    /// "mixed" otherwise.
    pub counters: &'static str,
    /// Segments whose counters disagree with their blocks.
    pub counter_mismatches: usize,
    /// Segments by pool and size class, sorted by pool then class.
    pub pools: Vec<PoolRow>,
    /// Events in the device's trace (0 without one).
    pub trace_entries: usize,
    /// `time_us` of the first trace entry, when entries carry it.
    pub trace_start_time_us: Option<i64>,
    /// Trace events per action, in `Action::ALL` order, actions that never occur left out.
    pub actions: Vec<ActionCount>,
    /// What the trace implies before its first event, anchored at the final state (see
    /// docs/snapshots.md, "The timeline"); None without a trace, or when the trace does not
    /// add up to the final segments (`trace_shortfall`).
    pub initial_allocated_bytes: Option<u64>,
    /// Segment bytes before the first event; None as for `initial_allocated_bytes`.
    pub initial_reserved_bytes: Option<u64>,
    /// When the trace frees more than it allocated and the final segments hold: by how many
    /// bytes (allocated, reserved) it falls short, run back from the segments. A byte count
    /// never goes negative; an inconsistent file says so here.
    pub trace_shortfall: Option<TraceShortfall>,
    /// Where allocated (requested bytes) peaked in the trace; None without a trace.
    pub peak_allocated: Option<Point>,
    /// Where reserved peaked in the trace; None without a trace.
    pub peak_reserved: Option<Point>,
    /// Bytes held in segments when allocated peaked; None without a trace.
    pub reserved_at_peak_allocated_bytes: Option<i64>,
    /// The trace's `oom` events, in order.
    pub ooms: Vec<OomMark>,
    /// Sites that kept allocations from every step (`analysis::leaks`); None when the trace
    /// has no steps to compare (fewer than three `Optimizer.step` annotations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leak_suspects: Option<Leaks>,
    /// Allocated bytes at each `external_annotations` start and end within the trace, in
    /// time order (`analysis::annotation_usage`); empty without annotations.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub annotation_usage: Vec<AnnotationUsage>,
    /// Bytes allocated before the trace's first event, where the trace adds up (the start of
    /// the annotations' running total).
    #[serde(skip)]
    initial_allocated: Option<i64>,
}

/// By how many bytes a trace that frees more than it allocated falls short of the final
/// segments, run back from them.
#[derive(Debug, Default, Serialize)]
pub struct TraceShortfall {
    /// Requested bytes the trace frees beyond what it and the final state account for.
    pub allocated_bytes: u64,
    /// Segment bytes the trace frees beyond what it and the final state account for.
    pub reserved_bytes: u64,
}

/// How many trace events have one action.
#[derive(Debug, Serialize)]
pub struct ActionCount {
    /// The action's file spelling (`alloc`, `segment_free`, …).
    pub action: &'static str,
    /// How many trace events have it.
    pub count: usize,
}

/// The segments of one pool and size class.
#[derive(Debug, Serialize)]
pub struct PoolRow {
    /// `segment_pool_id` as PyTorch prints it, `(0, 0)` for the default pool.
    pub pool: String,
    /// Small or large pool.
    pub size_class: SizeClass,
    /// Whether the size class came from the file's `segment_type` or from the segment size.
    pub size_class_derived: bool,
    /// Number of segments in this pool and class.
    pub segments: usize,
    /// Sum of their sizes in bytes.
    pub reserved_bytes: u64,
    /// Bytes of `active_allocated` blocks (the allocator's counter when the file has it).
    pub allocated_bytes: u64,
    /// Bytes of active blocks: allocated plus pending free.
    pub active_bytes: u64,
    /// Bytes of `inactive` blocks (a segment without blocks counts whole).
    pub free_bytes: u64,
    /// The largest free block in this pool and class, in bytes.
    pub largest_free_block_bytes: u64,
}

/// The summary of `devices` of `snap`, their traces as `timelines` (without series) took them
/// (the reader streams them there: `formats::load_streaming`).
pub fn snapshot_summary(
    snap: &Snapshot,
    devices: &[u32],
    timelines: &mut Timelines,
) -> SnapshotSummary {
    let allocations_have_stacks = snap.allocations_have_stacks(devices);
    let devices = devices
        .iter()
        .map(|&d| device_summary(snap, d, timelines))
        .collect();
    SnapshotSummary {
        kind: "allocator_snapshot",
        layout: snap.layout.clone(),
        devices,
        allocator_settings: snap
            .allocator_settings
            .as_ref()
            .map(|s| s.iter().cloned().collect()),
        simulate_suggestions: Vec::new(),
        figures: None,
        allocations_have_stacks,
    }
}

impl DeviceSummary {
    /// An OOM or a fragmented cache: a replay may find a setting that helps.
    fn wants_suggestion(&self) -> bool {
        let fragmented = self.external_fragmentation.is_some_and(|f| f > 0.2);
        !self.ooms.is_empty() || fragmented
    }
}

impl SnapshotSummary {
    /// Whether `add_simulate_suggestions` has devices to replay (and so needs the events).
    pub fn wants_suggestions(&self) -> bool {
        self.devices.iter().any(|d| d.wants_suggestion())
    }
}

impl SnapshotSummary {
    /// What `UsageAtTimes` must measure: per device index, its annotations' times and the
    /// bytes allocated before its first event; None when it has no annotations, or no known
    /// start (a trace that does not add up). None overall when no device has any.
    pub fn annotation_times(&self) -> Option<Vec<Option<DeviceTimes>>> {
        let len = self.devices.iter().map(|d| d.device as usize + 1).max()?;
        let mut out = vec![None; len];
        for d in &self.devices {
            if let (false, Some(initial)) = (d.annotation_usage.is_empty(), d.initial_allocated) {
                let times = d.annotation_usage.iter().map(|u| u.time_us).collect();
                out[d.device as usize] = Some(DeviceTimes { times, initial });
            }
        }
        out.iter().any(Option::is_some).then_some(out)
    }

    /// Take what `UsageAtTimes::finish` measured (in `annotation_times`' order).
    pub fn set_annotation_usage(&mut self, measured: Vec<Vec<i64>>) {
        for d in &mut self.devices {
            if let Some(bytes) = measured.get(d.device as usize) {
                for (u, &b) in d.annotation_usage.iter_mut().zip(bytes) {
                    u.allocated_bytes = Some(b);
                }
            }
        }
    }
}

/// Fill each device's `leak_suspects`, from when its live allocations were made (`times`, as
/// the trace streamed by).
pub fn add_leak_suspects(summary: &mut SnapshotSummary, snap: &Snapshot, times: &AllocTimes) {
    for d in &mut summary.devices {
        d.leak_suspects = leak_suspects(snap, d.device, times);
    }
}

/// Fill `simulate_suggestions`: replay the devices that had an OOM or a fragmented cache
/// (`snap` with its events).
pub fn add_simulate_suggestions(summary: &mut SnapshotSummary, snap: &Snapshot) {
    for d in &summary.devices {
        if !d.wants_suggestion() {
            continue;
        }
        if let Some(s) = super::simulate::suggest(snap, d.device) {
            summary.simulate_suggestions.push(s);
        }
    }
}

fn device_summary(snap: &Snapshot, device: u32, timelines: &mut Timelines) -> DeviceSummary {
    let mut d = DeviceSummary {
        device,
        ..Default::default()
    };
    let (mut with, mut without) = (0usize, 0usize);
    for s in snap.segments_on(device) {
        let (mut alloc, mut active, mut req, mut free, mut pending, mut largest) =
            (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        let blocks = s.blocks(&snap.blocks);
        for b in blocks {
            if b.state.is_allocated() {
                alloc += b.size;
            }
            if b.state.is_active() {
                active += b.size;
                req += b.requested(&snap.history);
                if !b.state.is_allocated() {
                    pending += b.size;
                }
            } else {
                free += b.size;
                largest = largest.max(b.size);
            }
        }
        // a segment without blocks (a hand-made file): all of it is free
        if blocks.is_empty() {
            free += s.total_size;
            largest = largest.max(s.total_size);
        }
        match (s.allocated_size, s.active_size, s.requested_size) {
            (Some(a), Some(ac), Some(r)) => {
                with += 1;
                if !blocks.is_empty() && (a, ac, r) != (alloc, active, req) {
                    d.counter_mismatches += 1;
                }
                alloc = a;
                active = ac;
                req = r;
            }
            _ => without += 1,
        }
        d.segments += 1;
        d.blocks += blocks.len();
        d.reserved_bytes += s.total_size;
        d.allocated_bytes += alloc;
        d.active_bytes += active;
        d.requested_bytes += req;
        d.free_bytes += free;
        d.pending_free_bytes += pending;
        d.largest_free_block_bytes = d.largest_free_block_bytes.max(largest);
        let key = (s.pool_name(), s.size_class);
        let row = match d
            .pools
            .iter_mut()
            .position(|p| (p.pool.clone(), p.size_class) == key)
        {
            Some(i) => &mut d.pools[i],
            None => {
                d.pools.push(PoolRow {
                    pool: key.0,
                    size_class: key.1,
                    size_class_derived: s.size_class_derived,
                    segments: 0,
                    reserved_bytes: 0,
                    allocated_bytes: 0,
                    active_bytes: 0,
                    free_bytes: 0,
                    largest_free_block_bytes: 0,
                });
                d.pools.last_mut().expect("just pushed")
            }
        };
        row.segments += 1;
        row.reserved_bytes += s.total_size;
        row.allocated_bytes += alloc;
        row.active_bytes += active;
        row.free_bytes += free;
        row.largest_free_block_bytes = row.largest_free_block_bytes.max(largest);
    }
    d.pools
        .sort_by(|a, b| (&a.pool, a.size_class.name()).cmp(&(&b.pool, b.size_class.name())));
    d.counters = match (with, without) {
        (_, 0) if with > 0 => "file",
        (0, _) => "derived",
        _ => "mixed",
    };
    d.internal_fragmentation_bytes = d.active_bytes.saturating_sub(d.requested_bytes);
    d.external_fragmentation =
        (d.free_bytes > 0).then(|| 1.0 - d.largest_free_block_bytes as f64 / d.free_bytes as f64);
    let trace = timelines.take(device);
    if trace.events() > 0 {
        d.trace_entries = trace.events();
        d.actions = Action::ALL
            .iter()
            .zip(trace.action_counts())
            .filter(|(_, c)| *c > 0)
            .map(|(a, c)| ActionCount {
                action: a.name(),
                count: c,
            })
            .collect();
        let tl = trace.finish(snap, device);
        d.trace_start_time_us = tl.t0_us;
        let (a, r) = (tl.initial_allocated_bytes, tl.initial_reserved_bytes);
        if a < 0 || r < 0 {
            d.trace_shortfall = Some(TraceShortfall {
                allocated_bytes: a.min(0).unsigned_abs(),
                reserved_bytes: r.min(0).unsigned_abs(),
            });
        } else {
            d.initial_allocated_bytes = Some(a as u64);
            d.initial_reserved_bytes = Some(r as u64);
        }
        d.peak_allocated = tl.peak_allocated;
        d.peak_reserved = tl.peak_reserved;
        d.reserved_at_peak_allocated_bytes = tl.reserved_at_peak_allocated_bytes;
        d.ooms = tl.ooms;
        d.initial_allocated = (a >= 0 && r >= 0).then_some(a);
        d.annotation_usage = (tl.annotations.into_iter())
            .map(|m| AnnotationUsage {
                name: m.name,
                stage: m.stage,
                time_us: m.time_us,
                seconds: m.x,
                allocated_bytes: None,
            })
            .collect();
    }
    d
}
