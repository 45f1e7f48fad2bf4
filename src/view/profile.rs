//! A torch.profiler trace in the viewer: one device's `[memory]` events paired by address into
//! allocations ([`index::Pairing`]), drawn on the same Active Memory Timeline as a snapshot's,
//! the top edge the profiler's own `Total Allocated` after each event. An allocation's origin
//! is the op that was running on its thread when it was made (`analysis::profile_summary`'s
//! attribution, as `summary` and `top` of a trace count it): a trace has no Python stack per
//! allocation, so the details name the op, the annotations and the Python functions
//! (`with_stack=True`) open then, and the op that freed it.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::analysis::categories::Place;
use crate::analysis::profile_summary::Indexed;
use crate::analysis::timeline::{OomMark, Point};
use crate::model::profile::{ProfileDevice, DEVICE_TYPE_CUDA};

use super::event_series::EventSeries;
use super::index::{Alloc, AllocIndex, AllocSpan, Marks, Pairing};

/// The origin of an allocation made outside any op.
pub const NO_OP: u32 = u32::MAX - 1;
/// How an allocation outside any op is named.
pub const NO_OP_LABEL: &str = "(no op)";

/// A trace, one device's allocations indexed, and where each event of the index came from.
pub struct ProfileView<'a> {
    /// The trace's events in time order and its ranges.
    pub ix: Indexed<'a>,
    /// Every allocation of the device shown (origins: op name ids, or [`NO_OP`]).
    pub index: AllocIndex,
    /// Per event of the index, its place in `ix.memory`.
    events: Vec<u32>,
    /// Devices with memory events (`cpu`, `cuda:0`, …); the one shown is `index.device_label`.
    pub devices: Vec<String>,
}

/// Why a trace cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum ProfileViewError {
    /// No `[memory]` event at all.
    #[error("no [memory] events to show")]
    NoMemory,
    /// `--device N` names a device without memory events.
    #[error("no [memory] events on cuda:{asked}; the trace has them on {have}")]
    NoSuchDevice {
        /// The CUDA index asked for.
        asked: u32,
        /// The devices it has.
        have: String,
    },
    /// The temporary file of the timeline ([`EventSeries`]) could not be written.
    #[error("{0}")]
    Temporary(#[from] std::io::Error),
}

/// The devices with memory events, in `ProfileDevice` order, and the one to show: `cuda:N`
/// when asked, else the first CUDA device, else the first.
fn pick_device(ix: &Indexed, cuda: Option<u32>) -> Result<(u16, Vec<String>), ProfileViewError> {
    let trace = ix.trace;
    let mut with_events: Vec<u16> = ix.memory.iter().map(|m| m.device).collect();
    with_events.sort_unstable_by_key(|&d| trace.devices[d as usize]);
    with_events.dedup();
    let labels: Vec<String> = (with_events.iter())
        .map(|&d| trace.devices[d as usize].label())
        .collect();
    let is = |d: u16, want: Option<u32>| {
        let dev: ProfileDevice = trace.devices[d as usize];
        dev.device_type == DEVICE_TYPE_CUDA && want.is_none_or(|n| dev.index == n as i64)
    };
    let chosen = match cuda {
        Some(n) => with_events
            .iter()
            .copied()
            .find(|&d| is(d, Some(n)))
            .ok_or(ProfileViewError::NoSuchDevice {
                asked: n,
                have: labels.join(", "),
            })?,
        None => (with_events.iter().copied().find(|&d| is(d, None)))
            .or(with_events.first().copied())
            .ok_or(ProfileViewError::NoMemory)?,
    };
    Ok((chosen, labels))
}

/// Index the device (`--device N`: `cuda:N`) of `ix`'s trace.
pub fn build(ix: Indexed<'_>, cuda: Option<u32>) -> Result<ProfileView<'_>, ProfileViewError> {
    let (device, devices) = pick_device(&ix, cuda)?;
    let trace = ix.trace;
    let ops = ix.innermost_ops();
    let seconds = |ts_ns: i64| (ts_ns - ix.t0_ns) as f64 / 1e9;
    let mut events: Vec<u32> = Vec::new();
    let mut points: Vec<(f64, i64)> = Vec::new();
    let mut pairing = Pairing::default();
    let mut peak: Option<Point> = None;
    for (k, m) in ix.memory.iter().enumerate() {
        if m.device != device {
            continue;
        }
        let i = events.len();
        let origin = ops[k].unwrap_or(NO_OP);
        match m.bytes {
            b if b > 0 => pairing.alloc(i, m.addr, b as u64, origin, Place::UNKNOWN),
            b if b < 0 => pairing.free(i, m.addr, b.unsigned_abs(), origin, Place::UNKNOWN),
            _ => {}
        }
        events.push(k as u32);
        points.push((seconds(m.ts_ns), m.total_allocated));
        if peak.as_ref().is_none_or(|p| m.total_allocated > p.bytes) {
            peak = Some(Point {
                index: i,
                x: seconds(m.ts_ns),
                time_us: Some(m.ts_ns / 1000),
                bytes: m.total_allocated,
            });
        }
    }
    let (allocs, sites) = pairing.finish(|origin| match origin {
        NO_OP => NO_OP_LABEL.to_string(),
        op => trace.name(op).to_string(),
    });
    let mut ooms: Vec<OomMark> = (trace.ooms.iter())
        .filter(|o| o.device == device)
        .map(|o| {
            // the event before it: the state the failed request met
            let after = events.partition_point(|&k| ix.memory[k as usize].ts_ns <= o.ts_ns);
            OomMark {
                index: after.saturating_sub(1),
                x: seconds(o.ts_ns),
                time_us: Some(o.ts_ns / 1000),
                requested_bytes: o.bytes.max(0) as u64,
                device_free_bytes: None,
                allocated_bytes: o.total_allocated,
                reserved_bytes: o.total_reserved,
            }
        })
        .collect();
    ooms.sort_by(|a, b| a.x.total_cmp(&b.x));
    let index = AllocIndex {
        device: 0,
        device_label: trace.devices[device as usize].label(),
        allocs,
        sites,
        series: EventSeries::write(points)?,
        marks: Marks {
            x_is_time: true,
            peak_allocated: peak,
            ooms,
            annotations: Vec::new(),
        },
    };
    Ok(ProfileView {
        ix,
        index,
        events,
        devices,
    })
}

/// One allocation of a trace, all the page shows when it is clicked.
#[derive(Debug, Serialize)]
pub struct ProfileAllocDetail {
    /// Id, size, site (the op it was made in), when it was made and freed; x is seconds since
    /// the trace's first event.
    #[serde(flatten)]
    pub span: AllocSpan,
    /// The innermost op (`cpu_op`) open on the allocating thread; None: outside any op (or
    /// allocated before the trace).
    pub op: Option<String>,
    /// The annotations open then (`ProfilerStep#N`, `record_function` ranges), outermost first.
    pub annotations: Vec<String>,
    /// The Python functions open then (`with_stack=True`), innermost first.
    pub python: Vec<String>,
    /// The innermost op open on the freeing thread when it was freed.
    pub freed_in: Option<String>,
    /// The allocating (else freeing) thread, `pid/tid` as the file writes it.
    pub thread: String,
    /// The profiler's `Total Allocated` and `Total Reserved` right after the allocation.
    pub total_allocated: Option<i64>,
    /// Reserved bytes then.
    pub total_reserved: Option<i64>,
}

impl ProfileView<'_> {
    /// The allocation `id`; None past the last.
    pub fn alloc(&self, id: usize) -> Option<ProfileAllocDetail> {
        let a = self.index.allocs.get(id)?;
        let event = |i: usize| &self.ix.memory[self.events[i] as usize];
        let made = a.start().map(&event);
        let moment = made.map(|m| self.ix.moment(m.bytes, m.ts_ns, m.thread));
        let freed_in = a.end().and_then(|i| {
            let m = event(i);
            self.ix.moment(m.bytes, m.ts_ns, m.thread).op
        });
        let thread = made.or_else(|| a.end().map(&event)).map(|m| m.thread);
        let (op, annotations, python) = match moment {
            Some(m) => (m.op, m.annotations, m.python.into_iter().rev().collect()),
            None => (None, Vec::new(), Vec::new()),
        };
        Some(ProfileAllocDetail {
            span: self.index.span(id)?,
            op,
            annotations,
            python,
            freed_in,
            thread: thread.map_or_else(String::new, |t| self.ix.trace.threads[t as usize].clone()),
            total_allocated: made.map(|m| m.total_allocated),
            total_reserved: made.map(|m| m.total_reserved),
        })
    }

    /// What was live right after event `event`, by op: the shape of `top --at`'s report
    /// (`at_bytes` is the trace's `Total Allocated` then; what no allocation of the trace
    /// accounts for is the row `allocated before the trace`).
    pub fn live_at(&self, event: usize, rows: usize) -> LiveByOp {
        let mut by_site: FxHashMap<u32, (i64, u64, i64)> = FxHashMap::default();
        let (mut tracked, mut count) = (0i64, 0u64);
        for a in &self.index.allocs {
            let live_then =
                a.start().is_none_or(|s| s <= event) && a.end().is_none_or(|e| e > event);
            let live_at_end = a.end().is_none();
            if !live_then && !live_at_end {
                continue;
            }
            let row = by_site.entry(a.site).or_default();
            if live_then {
                row.0 += a.size as i64;
                row.1 += 1;
                tracked += a.size as i64;
                count += 1;
            }
            if live_at_end {
                row.2 += a.size as i64;
            }
        }
        let at_bytes = self.index.series.allocated(event);
        let mut all: Vec<LiveRow> = (by_site.into_iter())
            .filter(|(_, r)| r.1 > 0)
            .map(|(site, (bytes, n, end))| LiveRow {
                group: self.index.sites[site as usize].clone(),
                at_bytes: bytes,
                at_count: n,
                end_bytes: end,
            })
            .collect();
        if at_bytes > tracked {
            all.push(LiveRow {
                group: "allocated before the trace (never freed in it)".into(),
                at_bytes: at_bytes - tracked,
                at_count: 0,
                end_bytes: 0,
            });
        }
        all.sort_by(|a, b| {
            b.at_bytes
                .cmp(&a.at_bytes)
                .then_with(|| a.group.cmp(&b.group))
        });
        let groups = all.len();
        all.truncate(rows);
        LiveByOp {
            event,
            at_bytes,
            at_count: count,
            groups,
            rows: all,
        }
    }

    /// The ops whose name holds `query` (case-insensitive), and the allocations made in them.
    pub fn search(&self, query: &str) -> super::details::SearchHits {
        let q = query.to_lowercase();
        let names = &self.ix.trace.names;
        let mut hit: FxHashMap<u32, bool> = FxHashMap::default();
        let mut hits = super::details::SearchHits {
            stacks: Vec::new(),
            allocations: 0,
            bytes: 0,
        };
        for a in &self.index.allocs {
            if a.origin == Alloc::NONE {
                continue;
            }
            let matched = *hit.entry(a.origin).or_insert_with(|| match a.origin {
                NO_OP => NO_OP_LABEL.contains(&q),
                op => names[op as usize].to_lowercase().contains(&q),
            });
            if matched {
                hits.allocations += 1;
                hits.bytes += a.size;
            }
        }
        hits.stacks = (hit.into_iter()).filter(|h| h.1).map(|h| h.0).collect();
        hits.stacks.sort_unstable();
        hits
    }
}

/// Bytes live after an event, by op.
#[derive(Debug, Serialize)]
pub struct LiveByOp {
    /// The event.
    pub event: usize,
    /// The trace's allocated bytes right after it.
    pub at_bytes: i64,
    /// Allocations of the trace live then.
    pub at_count: u64,
    /// Rows in all (the answer has the first few).
    pub groups: usize,
    /// By bytes live then, largest first.
    pub rows: Vec<LiveRow>,
}

/// One op's allocations live at a moment.
#[derive(Debug, Serialize)]
pub struct LiveRow {
    /// The op (the site label).
    pub group: String,
    /// Bytes live then.
    pub at_bytes: i64,
    /// Allocations live then.
    pub at_count: u64,
    /// Bytes of its allocations still live at the end of the trace.
    pub end_bytes: i64,
}
