//! What a torch.profiler trace says about memory: per device the peaks of allocated and
//! reserved bytes and what was running at each (the innermost op, the annotations and the
//! Python stack open on the allocating thread), the OOMs, the steps, and the bytes allocated
//! within each op, Python function and annotation.
//!
//! Attribution follows torch's `key_averages()`: an event belongs to the ranges whose interval
//! holds its time, ends included; memtrack also asks that they ran on the event's thread (the
//! autograd engine allocates on threads of its own). "Self" counts go to the innermost range of
//! a kind, "incl." ones to every range open.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::model::profile::{is_step, MemoryEvent, ProfileTrace, Range, RangeKind};

/// A moment of the trace: a byte count, when, and what was open.
#[derive(Debug, Clone, Serialize)]
pub struct Moment {
    pub bytes: i64,
    /// Milliseconds since the trace's first event.
    pub at_ms: f64,
    /// The profiler's own time stamp (microseconds, as the trace writes it).
    pub ts_us: f64,
    /// The innermost op (`cpu_op`) open on the allocating thread.
    pub op: Option<String>,
    /// The annotations open (`ProfilerStep#N`, `record_function` ranges), outermost first.
    pub annotations: Vec<String>,
    /// The Python functions open (`with_stack=True`), outermost first.
    pub python: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Oom {
    pub device: String,
    /// The allocation that failed.
    pub bytes: i64,
    pub total_allocated: i64,
    pub total_reserved: i64,
    pub at: Moment,
}

#[derive(Debug, Serialize)]
pub struct DeviceMemory {
    /// `cpu`, `cuda:0`, …
    pub device: String,
    pub memory_events: u64,
    pub allocations: u64,
    pub frees: u64,
    /// Bytes of all allocations.
    pub bytes_allocated: i64,
    /// Allocated bytes before the first event (the trace started with them live).
    pub allocated_at_start: i64,
    pub allocated_at_end: i64,
    pub peak_allocated: Moment,
    pub peak_reserved: Moment,
}

/// Bytes within ranges of one name on one device.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Within {
    pub name: String,
    pub device: String,
    /// How many ranges of this name ran (on any device).
    pub calls: u64,
    /// Allocations while it was the innermost range of its kind.
    pub self_allocated: i64,
    /// Allocations while it was open.
    pub allocated: i64,
    /// Allocations less frees while it was innermost: torch's `self_*_memory_usage`.
    pub self_net: i64,
    /// Allocations less frees while it was open: torch's `*_memory_usage`.
    pub net: i64,
}

#[derive(Debug, Serialize)]
pub struct Step {
    pub name: String,
    pub start_ms: f64,
    pub duration_ms: f64,
    /// Per device, the largest allocated total its events reached within the step.
    pub peak_allocated: Vec<(String, i64)>,
}

#[derive(Debug, Serialize)]
pub struct ProfileSummary {
    /// JSON tag, always `"profiler_trace_summary"`.
    pub kind: &'static str,
    pub trace_events: u64,
    pub duration_ms: f64,
    pub devices: Vec<DeviceMemory>,
    /// Every `[OutOfMemory]` event.
    pub oom_count: u64,
    /// The first `OOMS_LISTED`, in time order.
    pub ooms: Vec<Oom>,
    pub steps: Vec<Step>,
    /// Ops by bytes allocated within them (self), largest first.
    pub top_ops: Vec<Within>,
    /// Allocations outside any op, per device (name `(no op)`), when there are any.
    pub outside_ops: Vec<Within>,
    pub python_stacks: bool,
}

/// Everything attributed, for `top` and `diff`: every name of each kind.
pub struct Attribution {
    pub ops: Vec<Within>,
    pub functions: Vec<Within>,
    pub annotations: Vec<Within>,
    pub outside_ops: Vec<Within>,
}

/// The trace's events in time order, per thread, and its ranges indexed for lookups.
pub struct Indexed<'a> {
    pub trace: &'a ProfileTrace,
    /// Memory events sorted by time (stable: file order among equals).
    pub memory: Vec<MemoryEvent>,
    /// Per thread, per kind, ranges sorted by start (longer first among equals).
    by_thread: FxHashMap<(u32, RangeKind), Vec<Range>>,
    pub t0_ns: i64,
    pub t1_ns: i64,
}

impl<'a> Indexed<'a> {
    pub fn new(trace: &'a ProfileTrace) -> Indexed<'a> {
        let mut memory = trace.memory.clone();
        memory.sort_by_key(|m| m.ts_ns);
        let mut by_thread: FxHashMap<(u32, RangeKind), Vec<Range>> = FxHashMap::default();
        for r in &trace.ranges {
            by_thread.entry((r.thread, r.kind)).or_default().push(*r);
        }
        for v in by_thread.values_mut() {
            v.sort_by_key(|r| (r.start_ns, std::cmp::Reverse(r.dur_ns)));
        }
        let (t0_ns, t1_ns) = trace.time_span().unwrap_or((0, 0));
        Indexed {
            trace,
            memory,
            by_thread,
            t0_ns,
            t1_ns,
        }
    }

    pub fn ms(&self, ts_ns: i64) -> f64 {
        (ts_ns - self.t0_ns) as f64 / 1e6
    }

    /// The ranges of `kind` on `thread` open at `t`, outermost first.
    fn open(&self, thread: u32, kind: RangeKind, t: i64) -> Vec<String> {
        let Some(ranges) = self.by_thread.get(&(thread, kind)) else {
            return Vec::new();
        };
        // ranges are sorted by start: only those starting by `t` can hold it
        let upto = ranges.partition_point(|r| r.start_ns <= t);
        ranges[..upto]
            .iter()
            .filter(|r| r.contains(t))
            .map(|r| self.trace.name(r.name).to_string())
            .collect()
    }

    pub fn moment(&self, bytes: i64, ts_ns: i64, thread: u32) -> Moment {
        let mut annotations = self.open(thread, RangeKind::Annotation, ts_ns);
        // a step annotation is often on another thread than the allocation (autograd's)
        if !annotations.iter().any(|a| is_step(a)) {
            let steps: Vec<String> = self
                .by_thread
                .iter()
                .filter(|((th, k), _)| *th != thread && *k == RangeKind::Annotation)
                .flat_map(|((th, _), _)| self.open(*th, RangeKind::Annotation, ts_ns))
                .filter(|n| is_step(n))
                .collect();
            annotations.splice(0..0, steps);
        }
        Moment {
            bytes,
            at_ms: self.ms(ts_ns),
            ts_us: ts_ns as f64 / 1e3,
            op: self.open(thread, RangeKind::Op, ts_ns).pop(),
            annotations,
            python: self.open(thread, RangeKind::Python, ts_ns),
        }
    }

    /// Per memory event (in [`Indexed::memory`]'s order), the name of the innermost op open on
    /// its thread: [`Indexed::moment`]'s `op` for every event in one sweep per thread (the ops
    /// of a thread nest), where a lookup each would walk the ranges again.
    pub fn innermost_ops(&self) -> Vec<Option<u32>> {
        let mut out = vec![None; self.memory.len()];
        let mut per_thread: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
        for (i, m) in self.memory.iter().enumerate() {
            per_thread.entry(m.thread).or_default().push(i);
        }
        for (th, events) in per_thread {
            let Some(ranges) = self.by_thread.get(&(th, RangeKind::Op)) else {
                continue;
            };
            let mut stack: Vec<&Range> = Vec::new();
            let mut r = 0;
            for i in events {
                let t = self.memory[i].ts_ns;
                // every op starting by `t` (ends included, as `Range::contains`), each
                // pushed over the ranges still open when it starts
                while r < ranges.len() && ranges[r].start_ns <= t {
                    let rg = &ranges[r];
                    r += 1;
                    while stack.last().is_some_and(|top| top.end_ns() < rg.start_ns) {
                        stack.pop();
                    }
                    stack.push(rg);
                }
                while stack.last().is_some_and(|top| top.end_ns() < t) {
                    stack.pop();
                }
                out[i] = stack.last().map(|r| r.name);
            }
        }
        out
    }

    /// The step annotations, in time order.
    pub fn steps(&self) -> Vec<&Range> {
        let mut steps: Vec<&Range> = self
            .trace
            .ranges
            .iter()
            .filter(|r| r.kind == RangeKind::Annotation && is_step(self.trace.name(r.name)))
            .collect();
        steps.sort_by_key(|r| r.start_ns);
        steps
    }

    /// Bytes within the ranges of `kind`, by name and device (every name with any).
    pub fn attribute(&self, kind: RangeKind) -> (Vec<Within>, Vec<Within>) {
        let devices = self.trace.devices.len();
        // (name, device) -> [self_alloc, alloc, self_net, net]
        let mut sums: FxHashMap<(u32, u16), [i64; 4]> = FxHashMap::default();
        let mut calls: FxHashMap<u32, u64> = FxHashMap::default();
        let mut outside: Vec<[i64; 2]> = vec![[0, 0]; devices];
        let mut per_thread: FxHashMap<u32, Vec<&MemoryEvent>> = FxHashMap::default();
        for m in &self.memory {
            per_thread.entry(m.thread).or_default().push(m);
        }
        let empty = Vec::new();
        let no_ranges: Vec<Range> = Vec::new();
        let mut threads: Vec<u32> = per_thread.keys().copied().collect();
        for ((th, k), ranges) in &self.by_thread {
            if *k == kind {
                threads.push(*th);
                for r in ranges {
                    *calls.entry(r.name).or_default() += 1;
                }
            }
        }
        threads.sort_unstable();
        threads.dedup();
        // running totals per device on this thread: [allocated, net]
        let mut cum = vec![[0i64; 2]; devices];
        // open ranges and the running totals when each opened (`devices` pairs each)
        let mut stack: Vec<&Range> = Vec::new();
        let mut at_open: Vec<[i64; 2]> = Vec::new();
        for th in threads {
            let events = per_thread.get(&th).unwrap_or(&empty);
            let ranges = self.by_thread.get(&(th, kind)).unwrap_or(&no_ranges);
            cum.iter_mut().for_each(|c| *c = [0, 0]);
            stack.clear();
            at_open.clear();
            let close = |stack: &mut Vec<&Range>,
                         at_open: &mut Vec<[i64; 2]>,
                         cum: &[[i64; 2]],
                         sums: &mut FxHashMap<(u32, u16), [i64; 4]>| {
                let r = stack.pop().expect("an open range");
                let base = at_open.len() - devices;
                for (d, c) in cum.iter().enumerate() {
                    let was = at_open[base + d];
                    let (alloc, net) = (c[0] - was[0], c[1] - was[1]);
                    if alloc != 0 || net != 0 {
                        let s = sums.entry((r.name, d as u16)).or_default();
                        s[1] += alloc;
                        s[3] += net;
                    }
                }
                at_open.truncate(base);
            };
            let (mut e, mut r) = (0, 0);
            while e < events.len() || r < ranges.len() {
                // a range opening at an event's time opens first: the event is in it
                let take_range = r < ranges.len()
                    && (e >= events.len() || ranges[r].start_ns <= events[e].ts_ns);
                if take_range {
                    let rg = &ranges[r];
                    r += 1;
                    while stack.last().is_some_and(|top| {
                        top.end_ns() < rg.start_ns
                            || (top.end_ns() == rg.start_ns && top.start_ns < rg.start_ns)
                    }) {
                        close(&mut stack, &mut at_open, &cum, &mut sums);
                    }
                    stack.push(rg);
                    at_open.extend_from_slice(&cum);
                } else {
                    let m = events[e];
                    e += 1;
                    while stack.last().is_some_and(|top| top.end_ns() < m.ts_ns) {
                        close(&mut stack, &mut at_open, &cum, &mut sums);
                    }
                    let alloc = m.bytes.max(0);
                    let c = &mut cum[m.device as usize];
                    c[0] += alloc;
                    c[1] += m.bytes;
                    match stack.last() {
                        Some(top) => {
                            let s = sums.entry((top.name, m.device)).or_default();
                            s[0] += alloc;
                            s[2] += m.bytes;
                        }
                        None => {
                            let o = &mut outside[m.device as usize];
                            o[0] += alloc;
                            o[1] += m.bytes;
                        }
                    }
                }
            }
            while !stack.is_empty() {
                close(&mut stack, &mut at_open, &cum, &mut sums);
            }
        }
        let label = |d: u16| self.trace.devices[d as usize].label();
        let mut rows: Vec<Within> = sums
            .into_iter()
            .map(|((name, d), s)| Within {
                name: self.trace.name(name).to_string(),
                device: label(d),
                calls: calls.get(&name).copied().unwrap_or(0),
                self_allocated: s[0],
                allocated: s[1],
                self_net: s[2],
                net: s[3],
            })
            .collect();
        rows.sort_by(|a, b| {
            (b.self_allocated, b.allocated)
                .cmp(&(a.self_allocated, a.allocated))
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.device.cmp(&b.device))
        });
        let outside = outside
            .iter()
            .enumerate()
            .filter(|(_, o)| o[0] != 0 || o[1] != 0)
            .map(|(d, o)| Within {
                name: format!("(no {})", kind.category()),
                device: label(d as u16),
                calls: 0,
                self_allocated: o[0],
                allocated: o[0],
                self_net: o[1],
                net: o[1],
            })
            .collect();
        (rows, outside)
    }

    pub fn attribution(&self) -> Attribution {
        let (ops, outside_ops) = self.attribute(RangeKind::Op);
        let (functions, _) = self.attribute(RangeKind::Python);
        let (annotations, _) = self.attribute(RangeKind::Annotation);
        Attribution {
            ops,
            functions,
            annotations,
            outside_ops,
        }
    }
}

/// Per device: its memory and its peaks.
pub fn device_memory(ix: &Indexed) -> Vec<DeviceMemory> {
    let trace = ix.trace;
    let mut out = Vec::new();
    let mut order: Vec<usize> = (0..trace.devices.len()).collect();
    order.sort_by_key(|&d| trace.devices[d]);
    for d in order {
        let events: Vec<&MemoryEvent> = ix
            .memory
            .iter()
            .filter(|m| m.device as usize == d)
            .collect();
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            continue;
        };
        // the first event in time order reaching the maximum
        let peak_of = |key: fn(&MemoryEvent) -> i64| {
            let mut best = events[0];
            for m in &events {
                if key(m) > key(best) {
                    best = m;
                }
            }
            ix.moment(key(best), best.ts_ns, best.thread)
        };
        out.push(DeviceMemory {
            device: trace.devices[d].label(),
            memory_events: events.len() as u64,
            allocations: events.iter().filter(|m| m.bytes > 0).count() as u64,
            frees: events.iter().filter(|m| m.bytes < 0).count() as u64,
            bytes_allocated: events.iter().map(|m| m.bytes.max(0)).sum(),
            allocated_at_start: first.total_allocated - first.bytes,
            allocated_at_end: last.total_allocated,
            peak_allocated: peak_of(|m| m.total_allocated),
            peak_reserved: peak_of(|m| m.total_reserved),
        });
    }
    out
}

/// OOMs listed with what was open (the count has them all): each lookup walks the ranges.
pub const OOMS_LISTED: usize = 50;

pub fn ooms(ix: &Indexed) -> Vec<Oom> {
    let mut ooms: Vec<_> = ix.trace.ooms.iter().collect();
    ooms.sort_by_key(|o| o.ts_ns);
    ooms.into_iter()
        .take(OOMS_LISTED)
        .map(|o| Oom {
            device: ix.trace.devices[o.device as usize].label(),
            bytes: o.bytes,
            total_allocated: o.total_allocated,
            total_reserved: o.total_reserved,
            at: ix.moment(o.bytes, o.ts_ns, o.thread),
        })
        .collect()
}

pub fn steps(ix: &Indexed) -> Vec<Step> {
    let trace = ix.trace;
    ix.steps()
        .into_iter()
        .map(|r| {
            let lo = ix.memory.partition_point(|m| m.ts_ns < r.start_ns);
            let hi = ix.memory.partition_point(|m| m.ts_ns <= r.end_ns());
            let mut peaks: Vec<(u16, i64)> = Vec::new();
            for m in &ix.memory[lo..hi] {
                match peaks.iter_mut().find(|(d, _)| *d == m.device) {
                    Some(p) => p.1 = p.1.max(m.total_allocated),
                    None => peaks.push((m.device, m.total_allocated)),
                }
            }
            peaks.sort_by_key(|(d, _)| trace.devices[*d as usize]);
            Step {
                name: trace.name(r.name).to_string(),
                start_ms: ix.ms(r.start_ns),
                duration_ms: r.dur_ns as f64 / 1e6,
                peak_allocated: peaks
                    .into_iter()
                    .map(|(d, b)| (trace.devices[d as usize].label(), b))
                    .collect(),
            }
        })
        .collect()
}

/// `summary` of a trace: `top` ops by bytes allocated within them.
pub fn profile_summary(trace: &ProfileTrace, top: usize) -> ProfileSummary {
    let ix = Indexed::new(trace);
    let (mut top_ops, outside_ops) = ix.attribute(RangeKind::Op);
    top_ops.retain(|w| w.self_allocated > 0 || w.allocated > 0);
    top_ops.truncate(top);
    ProfileSummary {
        kind: "profiler_trace_summary",
        trace_events: trace.events,
        duration_ms: (ix.t1_ns - ix.t0_ns) as f64 / 1e6,
        devices: device_memory(&ix),
        oom_count: trace.ooms.len() as u64,
        ooms: ooms(&ix),
        steps: steps(&ix),
        top_ops,
        outside_ops,
        python_stacks: trace.ranges.iter().any(|r| r.kind == RangeKind::Python),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn innermost_ops_are_each_moments_op() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/profiler/export_chrome_trace.json");
        let trace = crate::formats::profiler_trace::load(&path).unwrap();
        let ix = Indexed::new(&trace);
        let ops = ix.innermost_ops();
        assert_eq!(ops.len(), ix.memory.len());
        assert!(ops.iter().any(|o| o.is_some()));
        for (m, op) in ix.memory.iter().zip(&ops) {
            let moment = ix.moment(m.bytes, m.ts_ns, m.thread);
            assert_eq!(moment.op.as_deref(), op.map(|o| trace.name(o)));
        }
    }
}
