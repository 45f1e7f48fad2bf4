//! `summary` of tracker stats: MemoryTracker.summary's top ops, and what a user asks next.

use serde::Serialize;

use crate::model::{Marker, RecordInfo, Series, TrackerStats, Unmeasured};

use super::iteration_kinds::{self, InferenceCalls};
pub use super::iteration_kinds::{ModulePeak, ModulePeaks};
use super::iterations::argmax;
pub use super::iterations::{Iteration, Phase};

/// `summary` of a tracker stats file: peaks, the forward/backward split, the top ops.
#[derive(Debug, Serialize)]
pub struct TrackerSummary {
    /// Number of ops (samples) in the file.
    pub ops: usize,
    /// `op_index` from the file, when it has one.
    pub op_index: Option<i64>,
    /// The allocator's `num_alloc_retries` at stop (cudaMalloc retried after freeing the cache).
    pub num_alloc_retries: i64,
    /// Highest sample of allocated, active, reserved, in order (series with no number left out).
    pub peaks: Vec<Peak>,
    /// Setup, forward, backward and optimizer stretches of each iteration, in op order.
    pub phases: Vec<Phase>,
    /// Each iteration's span and peak, and whether a report shows it by default.
    pub iterations: Vec<Iteration>,
    /// The `--top` ops that generate the most memory, largest first.
    pub top_ops: Vec<TopOp>,
    /// The file's markers (the last occurrence of each name).
    pub markers: Vec<Marker>,
    /// memtrack's own extension of the file; None for a plain MemoryTracker file.
    pub record: Option<RecordInfo>,
    /// Per-module peaks of the training step with the highest peak, or of the last
    /// iteration where none trains (files from `memtrack record`).
    pub module_peaks: Option<ModulePeaks>,
    /// The forward-only calls (evaluation, generation) of a file that also has training
    /// steps: their count and peak; None where the iterations are of one kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inference_calls: Option<InferenceCalls>,
    /// The driver-level (NVML) series' peaks, where `record` sampled them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_peaks: Vec<DevicePeak>,
    /// Series whose allocator peak counter (CUDA `memory_stats()` at exit) is above every
    /// per-op sample: memory held only inside an op, which sampling after each op cannot see.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peaks_inside_ops: Vec<PeakInsideOp>,
    /// Tensors not measured as one dense storage, one sentence per reason
    /// (`3 gradients of sparse layout: sized by their indices and values`); the counts are
    /// `record.unmeasured`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unmeasured: Vec<String>,
    /// The threads beside the main one that ran ops, and those that could not be recorded
    /// (`analysis::threads`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<String>,
    /// What grows from one iteration to the next (`analysis::growth`).
    pub growth: super::growth::Growth,
    /// The exception the program raised, and where (files from `memtrack record`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raised: Option<super::ending::Raised>,
}

/// A series' peak inside an op, which the per-op samples miss: the allocator's peak counter against
/// the highest sample.
#[derive(Debug, Serialize)]
pub struct PeakInsideOp {
    /// The series (allocated, active or reserved) whose peak the samples missed.
    pub series: Series,
    /// `{series}_bytes.all.peak` from the allocator's counters when the program stopped.
    pub counter_peak_bytes: i64,
    /// The highest per-op sample of the series.
    pub sampled_peak_bytes: f64,
}

fn peaks_inside_ops(stats: &TrackerStats, peaks: &[Peak]) -> Vec<PeakInsideOp> {
    let Some(r) = &stats.record else {
        return Vec::new();
    };
    peaks
        .iter()
        .filter_map(|p| {
            let key = format!("{}_bytes.all.peak", p.series.name());
            let counter = *r.memory_stats.get(&key)?;
            (counter as f64 > p.bytes).then_some(PeakInsideOp {
                series: p.series,
                counter_peak_bytes: counter,
                sampled_peak_bytes: p.bytes,
            })
        })
        .collect()
}

/// The highest GPU memory the driver counted for the process on one GPU, and how much of it
/// the caching allocator did not know about.
#[derive(Debug, Serialize)]
pub struct DevicePeak {
    /// NVML's index of the GPU (nvidia-smi's numbering).
    pub nvml_index: i64,
    /// `GPU {nvml_index} ({name})`, or `GPU {nvml_index}` when the name is unknown.
    pub device: String,
    /// The highest sample: bytes the driver counted for the process on this GPU.
    pub bytes: i64,
    /// The op it was sampled after (the last op before the sample), as the other peaks
    /// give the op after which they were reached; None before the first op.
    pub op_index: Option<usize>,
    /// Name of the op at `op_index`; None before the first op.
    pub op: Option<String>,
    /// When the sample was taken, in seconds since the first sample.
    pub time_s: f64,
    /// Reserved after that op, when this GPU is the allocator's.
    pub reserved_bytes: Option<f64>,
    /// bytes − reserved: CUDA context, NCCL buffers, cuBLAS workspaces, other libraries.
    pub outside_allocator_bytes: Option<f64>,
}

fn device_peaks(stats: &TrackerStats) -> Vec<DevicePeak> {
    let Some(r) = &stats.record else {
        return Vec::new();
    };
    let mine = r.allocator_device_series();
    let n = stats.op_count();
    r.device_memory
        .iter()
        .filter_map(|d| {
            let best = d.samples.iter().fold(
                None,
                |b: Option<&crate::model::DeviceSample>, s| match b {
                    Some(b) if b.bytes >= s.bytes => Some(b),
                    _ => Some(s),
                },
            )?;
            // the sample came after `op_index` ops: the op before it set the counters
            let op = (best.op_index > 0 && n > 0).then(|| (best.op_index as usize).min(n) - 1);
            let reserved = match (mine, op) {
                (Some(m), Some(i)) if std::ptr::eq(m, d) => Some(stats.reserved[i]),
                _ => None,
            };
            Some(DevicePeak {
                nvml_index: d.nvml_index,
                device: d.title(),
                bytes: best.bytes,
                op_index: op,
                op: op.map(|i| stats.names.get(i).to_string()),
                time_s: best.time_s,
                reserved_bytes: reserved,
                outside_allocator_bytes: reserved.map(|x| best.bytes as f64 - x),
            })
        })
        .collect()
}

/// The peak of one series: its bytes and the op where it was reached.
#[derive(Debug, Serialize)]
pub struct Peak {
    /// Which series this is the peak of.
    pub series: Series,
    /// The series' highest sample, in bytes.
    pub bytes: f64,
    /// 0-based index of the op after which it was sampled (the first such op on a tie).
    pub op_index: usize,
    /// Name of that op.
    pub op: String,
}

impl TrackerSummary {
    /// Show every iteration's phases (`summary --all-iterations`).
    pub fn show_all_iterations(&mut self) {
        self.iterations.iter_mut().for_each(|it| it.shown = true);
    }
}

/// One of the ops that generate the most memory.
#[derive(Debug, Serialize)]
pub struct TopOp {
    /// 1-based position in the list.
    pub rank: usize,
    /// 0-based index of the op (the last occurrence, for a repeated name).
    pub op_index: usize,
    /// The op's name.
    pub op: String,
    /// Allocated after the op minus allocated after the op before it (MemoryTracker.summary).
    pub generated_bytes: f64,
}

/// Summarize `stats`, listing the `top` ops that generate the most memory.
pub fn tracker_summary(stats: &TrackerStats, top: usize) -> TrackerSummary {
    let n = stats.op_count();
    let peaks = Series::ALL
        .iter()
        .filter_map(|&s| {
            argmax(stats.series(s), 0, n).map(|(i, bytes)| Peak {
                series: s,
                bytes,
                op_index: i,
                op: stats.names.get(i).to_string(),
            })
        })
        .collect::<Vec<Peak>>();
    let phases = phases(stats);
    let iterations = iterations(stats, &phases);
    TrackerSummary {
        ops: n,
        op_index: stats.op_index,
        num_alloc_retries: stats.num_alloc_retries,
        growth: super::growth::growth(stats, &iterations),
        raised: super::ending::raised(stats),
        module_peaks: (stats.record.as_ref())
            .and_then(|r| iteration_kinds::module_peaks(r, &iterations)),
        inference_calls: iteration_kinds::inference_calls(stats, &iterations),
        iterations,
        phases,
        top_ops: top_ops(stats, top),
        markers: stats.markers.clone(),
        record: stats.record.clone(),
        device_peaks: device_peaks(stats),
        peaks_inside_ops: peaks_inside_ops(stats, &peaks),
        unmeasured: stats
            .record
            .as_ref()
            .map_or_else(Vec::new, |r| unmeasured_lines(&r.unmeasured)),
        threads: stats
            .record
            .as_ref()
            .map_or_else(Vec::new, |r| super::threads::thread_lines(r, n)),
        peaks,
    }
}

/// One sentence per reason: the tensors of each category, then how they were measured
/// (`3 gradients, 1 temporary of sparse layout: sized by their indices and values`).
pub fn unmeasured_lines(u: &[Unmeasured]) -> Vec<String> {
    let mut out = Vec::new();
    for (reason, _) in Unmeasured::REASONS.iter() {
        let of: Vec<&Unmeasured> = u.iter().filter(|x| x.reason == *reason).collect();
        if let Some(first) = of.first() {
            out.push(counted(&of, first.how()));
        }
    }
    // reasons this memtrack does not know (a newer file's)
    for x in u {
        if !Unmeasured::REASONS.iter().any(|(r, _)| *r == x.reason) {
            out.push(counted(&[x], &x.reason));
        }
    }
    out
}

fn counted(of: &[&Unmeasured], how: &str) -> String {
    let parts: Vec<String> = of
        .iter()
        .map(|x| {
            let (one, many) = match x.category.as_str() {
                "Parameter" => ("parameter", "parameters"),
                "Buffer" => ("buffer", "buffers"),
                "Gradient" => ("gradient", "gradients"),
                "Activation" => ("activation", "activations"),
                "Temp" => ("temporary", "temporaries"),
                "Optstate" => ("optimizer state", "optimizer states"),
                _ => ("other tensor", "other tensors"),
            };
            format!("{} {}", x.tensors, if x.tensors == 1 { one } else { many })
        })
        .collect();
    format!("{} {how}", parts.join(", "))
}

/// MemoryTracker.summary exactly: for ops 1..op_index, generated = allocated[i] -
/// allocated[i-1], keyed by op name (a repeated name keeps its last value and its first
/// position), sorted descending with ties in first-seen order, first `top`. Files without
/// `op_index` use the number of ops, as PyTorch's `load()` does.
pub fn top_ops(stats: &TrackerStats, top: usize) -> Vec<TopOp> {
    let n = stats.op_count();
    let end = stats.op_index.map_or(n, |k| (k.max(0) as usize).min(n));
    let alloc = &stats.allocated;
    let mut entries = distinct_names(stats, end);
    let generated = |i: usize| alloc[i] - alloc[i - 1];
    // descending by value, ties in first-seen order: a total order, so selecting the first
    // `top` and sorting only those gives exactly Python's stable sort
    let order = |a: &(usize, usize), b: &(usize, usize)| {
        generated(b.1)
            .total_cmp(&generated(a.1))
            .then(a.0.cmp(&b.0))
    };
    if top < entries.len() {
        // one pass keeping the best `top` in order: almost every entry is compared with the
        // worst kept and dropped (a selection over all of them touches each several times)
        let mut kept: Vec<(usize, usize)> = Vec::with_capacity(top + 1);
        for e in entries {
            if kept.len() == top {
                match kept.last() {
                    Some(worst) if order(&e, worst).is_lt() => {
                        kept.pop();
                    }
                    _ => continue,
                }
            }
            let at = kept.partition_point(|k| order(k, &e).is_lt());
            kept.insert(at, e);
        }
        entries = kept;
    } else {
        entries.sort_by(order);
    }
    entries
        .into_iter()
        .take(top)
        .enumerate()
        .map(|(rank, (_, i))| TopOp {
            rank: rank + 1,
            op_index: i,
            op: stats.names.get(i).to_string(),
            generated_bytes: generated(i),
        })
        .collect()
}

/// (first seen, last seen) op index of each distinct name among ops `1..end`, in first-seen
/// order. Op names are almost always unique (MemoryTracker numbers them), so a bitmap of name
/// hashes finds the few that might repeat, and only those go through a map: a million map
/// inserts would be a million cache misses.
fn distinct_names(stats: &TrackerStats, end: usize) -> Vec<(usize, usize)> {
    use std::hash::BuildHasher;
    let hasher = rustc_hash::FxBuildHasher;
    let ops = end.saturating_sub(1);
    let bits = (ops * 32).next_power_of_two().max(1024);
    let mask = (bits - 1) as u64;
    let mut seen = vec![0u64; bits / 64];
    let mut collided = vec![0u64; bits / 64];
    let slots: Vec<u64> = (1..end)
        .map(|i| hasher.hash_one(stats.names.get(i)) & mask)
        .collect();
    for &b in &slots {
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        if seen[w] & bit != 0 {
            collided[w] |= bit;
        }
        seen[w] |= bit;
    }
    let mut entries: Vec<(usize, usize)> = Vec::with_capacity(ops);
    let mut maybe_repeated: rustc_hash::FxHashMap<&str, usize> = Default::default();
    for (k, &b) in slots.iter().enumerate() {
        let i = k + 1;
        if collided[(b / 64) as usize] & (1u64 << (b % 64)) == 0 {
            entries.push((i, i));
            continue;
        }
        match maybe_repeated.get(stats.names.get(i)) {
            Some(&e) => entries[e].1 = i,
            None => {
                maybe_repeated.insert(stats.names.get(i), entries.len());
                entries.push((i, i));
            }
        }
    }
    entries
}

/// Whether an op ran inside an optimizer's step: `memtrack record` names those ops
/// `{Optimizer}.step.{op}` (MemoryTracker files have no such names).
fn is_optimizer_op(name: &str) -> bool {
    name.split('.').nth(1) == Some("step")
}

/// Whether an op ran in a backward: its name's phase part (`{module}.backward.{op}_{n}`).
fn is_backward_op(name: &str) -> bool {
    name.contains(".backward.")
}

/// (fw_start, fw_bw_boundary) of every top-level forward, in op order: a forward whose
/// boundary is missing (the program stopped in it) ends at the next fw_start or the end.
fn forwards(stats: &TrackerStats) -> Vec<(usize, usize)> {
    let n = stats.op_count();
    let mut events: Vec<Marker> = stats
        .marker_events()
        .into_iter()
        .filter(|m| m.name == "fw_start" || m.name == "fw_bw_boundary")
        .collect();
    events.sort_by_key(|m| m.op_index);
    let at = |m: &Marker| (m.op_index.max(0) as usize).min(n);
    let mut out = Vec::new();
    for (k, m) in events.iter().enumerate() {
        if m.name != "fw_start" {
            continue;
        }
        let end = events.get(k + 1).map_or(n, at);
        out.push((at(m), end));
    }
    out
}

/// Where each iteration starts: as recorded (`memtrack.iteration_starts`), or in files
/// without them at each fw_start (MemoryTracker's own files, older recordings).
fn iteration_starts(stats: &TrackerStats, forwards: &[(usize, usize)]) -> Vec<usize> {
    let n = stats.op_count();
    match &stats.record {
        Some(r) if !r.iteration_starts.is_empty() => r
            .iteration_starts
            .iter()
            .map(|&i| (i.max(0) as usize).min(n))
            .collect(),
        _ => forwards.iter().map(|f| f.0).collect(),
    }
}

fn phases(stats: &TrackerStats) -> Vec<Phase> {
    let n = stats.op_count();
    let name = |i: usize| stats.names.get(i);
    let fws = forwards(stats);
    let starts = iteration_starts(stats, &fws);
    // (iteration, phase, micro-batch, calls, start, end) before measuring
    let mut spans: Vec<(usize, &'static str, usize, usize, usize, usize)> = Vec::new();
    // `memtrack record` names an op by whether it ran in a backward; MemoryTracker names it
    // after the module whose hook ran last, so its backward ops can be `….forward.…`
    let names_say_backward = stats.record.is_some();
    if let Some(&first) = starts.first() {
        // model construction, data loading: before the first forward, no iteration of its
        // own; a MemoryTracker file marks only its last iteration, after others ran (a
        // backward, or the root module's forward, before it)
        let root_forward = (first < n)
            .then(|| name(first).find(".forward.").map(|k| &name(first)[..k + 9]))
            .flatten();
        let earlier = (0..first).any(|i| {
            let x = name(i);
            (names_say_backward && is_backward_op(x))
                || root_forward.is_some_and(|r| x.starts_with(r))
        });
        let attached = stats.record.as_ref().is_some_and(|r| r.attached.is_some());
        let label = if attached {
            "partial (under way at the attach)"
        } else if earlier {
            "earlier iterations"
        } else {
            "setup"
        };
        spans.push((0, label, 0, 0, 0, first));
    }
    // what follows a forward until `next`: backward (or not), the optimizer's step, after it
    let rest = |spans: &mut Vec<_>, it: usize, mb: usize, from: usize, next: usize| {
        let opt_first = (from..next).find(|&i| is_optimizer_op(name(i)));
        let pre_end = opt_first.unwrap_or(next);
        let label = if !names_say_backward || (from..pre_end).any(|i| is_backward_op(name(i))) {
            "backward"
        } else {
            "after forward"
        };
        spans.push((it, label, mb, 0, from, pre_end));
        if let Some(first) = opt_first {
            let last = (first..next)
                .rev()
                .find(|&i| is_optimizer_op(name(i)))
                .unwrap_or(first);
            spans.push((it, "optimizer step", mb, 0, first, last + 1));
            spans.push((it, "after step", mb, 0, last + 1, next));
        }
    };
    let mut k = 0; // the next forward
    for (j, &s) in starts.iter().enumerate() {
        let it = j + 1;
        let e = starts.get(j + 1).copied().unwrap_or(n).max(s);
        while k < fws.len() && fws[k].0 < s {
            k += 1;
        }
        let mut cursor = s;
        let mut mb = 0;
        while k < fws.len() && fws[k].0 < e {
            let (a, mut b) = fws[k];
            if a > cursor {
                rest(&mut spans, it, mb, cursor, a);
            }
            // top-level calls with no backward or step between them are one forward
            let mut calls = 1;
            while k + 1 < fws.len()
                && fws[k + 1].0 < e
                && !(b..fws[k + 1].0).any(|i| {
                    let x = name(i);
                    is_backward_op(x) || is_optimizer_op(x)
                })
            {
                k += 1;
                calls += 1;
                b = fws[k].1;
            }
            mb += 1;
            let b = b.min(e);
            spans.push((it, "forward", mb, calls, a, b));
            k += 1;
            let next = fws.get(k).map_or(e, |f| f.0.min(e));
            rest(&mut spans, it, mb, b, next);
            cursor = next;
        }
        if cursor < e {
            rest(&mut spans, it, mb, cursor, e);
        }
    }
    // micro-batches per iteration
    let mut per_iteration = vec![0usize; starts.len() + 1];
    for &(it, _, mb, ..) in &spans {
        per_iteration[it] = per_iteration[it].max(mb);
    }
    spans
        .into_iter()
        .filter(|&(.., start, end)| end > start)
        .map(|(iteration, phase, mb, calls, start, end)| {
            let (peak_op_index, peak_allocated_bytes) =
                argmax(&stats.allocated, start, end).unwrap_or((start, f64::NAN));
            let micro_batches = per_iteration[iteration].max(1);
            Phase {
                iteration,
                phase,
                // the step and what follows it belong to the whole iteration
                micro_batch: (micro_batches > 1
                    && mb > 0
                    && !matches!(phase, "optimizer step" | "after step"))
                .then_some(mb),
                micro_batches,
                calls,
                first_op: start,
                end_op: end,
                peak_allocated_bytes,
                peak_op_index,
                allocated_change_bytes: stats.allocated[end - 1] - allocated_before(stats, start),
            }
        })
        .collect()
}

fn allocated_before(stats: &TrackerStats, op: usize) -> f64 {
    if op == 0 {
        0.0
    } else {
        stats.allocated[op - 1]
    }
}

/// Iterations longer than this many in a row with the same phases are folded.
const FOLD_RUN: usize = 3;

/// Each iteration from its phases, and which a report shows: runs of consecutive iterations
/// with the same phases (a training loop's steps, a generation loop's calls) show their
/// first, their peak and their last.
fn iterations(stats: &TrackerStats, phases: &[Phase]) -> Vec<Iteration> {
    // the phases' shape: what must be equal for two iterations to be the same
    type Shape = Vec<(&'static str, Option<usize>, usize, usize)>;
    let mut out: Vec<Iteration> = Vec::new();
    let mut shapes: Vec<Shape> = Vec::new();
    for p in phases.iter().filter(|p| p.iteration > 0) {
        if out.last().is_none_or(|it| it.iteration != p.iteration) {
            out.push(Iteration {
                iteration: p.iteration,
                first_op: p.first_op,
                end_op: p.end_op,
                peak_allocated_bytes: f64::NAN,
                allocated_change_bytes: 0.0,
                same_as: p.iteration,
                shown: true,
                kind: iteration_kinds::INFERENCE,
            });
            shapes.push(Vec::new());
        }
        let it = out.last_mut().unwrap();
        it.end_op = p.end_op;
        if iteration_kinds::trains(p) {
            it.kind = iteration_kinds::TRAINING_STEP;
        }
        if it.peak_allocated_bytes.is_nan() || p.peak_allocated_bytes > it.peak_allocated_bytes {
            it.peak_allocated_bytes = p.peak_allocated_bytes;
        }
        shapes
            .last_mut()
            .unwrap()
            .push((p.phase, p.micro_batch, p.calls, p.end_op - p.first_op));
    }
    for it in &mut out {
        it.allocated_change_bytes =
            stats.allocated[it.end_op - 1] - allocated_before(stats, it.first_op);
    }
    let mut k = 0;
    while k < out.len() {
        let run_end = (k..out.len())
            .find(|&j| shapes[j] != shapes[k])
            .unwrap_or(out.len());
        let first = out[k].iteration;
        let peak = (k..run_end)
            .max_by(|&a, &b| {
                let (pa, pb) = (out[a].peak_allocated_bytes, out[b].peak_allocated_bytes);
                // the first of equal peaks
                pa.total_cmp(&pb).then(b.cmp(&a))
            })
            .unwrap_or(k);
        for (j, it) in out.iter_mut().enumerate().take(run_end).skip(k) {
            it.same_as = first;
            it.shown = run_end - k <= FOLD_RUN || j == k || j == peak || j + 1 == run_end;
        }
        k = run_end;
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{Marker, OpNames, RecordInfo};

    /// A stats file of these op names, allocated (and active, reserved) after each.
    pub(crate) fn stats(names: &[&str], alloc: &[f64]) -> TrackerStats {
        let mut n = OpNames::default();
        names.iter().for_each(|s| n.push(s));
        TrackerStats {
            names: n,
            allocated: alloc.to_vec(),
            active: alloc.to_vec(),
            reserved: alloc.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn phases_separate_setup_and_the_optimizer_step() {
        let names = [
            "Global.forward.empty_0",  // 0 setup
            "Net.forward.mm_0",        // 1 forward
            "Net.backward.mm_1",       // 2 backward
            "AdamW.step.zeros_like_0", // 3 optimizer
            "AdamW.step.add_0",        // 4 optimizer
            "Global.forward.zero_0",   // 5 after step
            "Net.forward.mm_2",        // 6 forward
            "Net.backward.mm_3",       // 7 backward
        ];
        let mut s = stats(&names, &[1.0, 2.0, 5.0, 7.0, 8.0, 6.0, 9.0, 4.0]);
        // a forward (fw_start) and its boundary one op later, at each of these ops
        let pairs = |at: &[i64]| -> Vec<Marker> {
            at.iter()
                .flat_map(|&i| {
                    [("fw_start", i), ("fw_bw_boundary", i + 1)].map(|(name, op_index)| Marker {
                        name: name.into(),
                        op_index,
                    })
                })
                .collect()
        };
        s.markers = pairs(&[6]);
        s.record = Some(RecordInfo {
            marker_events: pairs(&[1, 6]),
            ..Default::default()
        });
        let got: Vec<(usize, &str, usize, usize)> = phases(&s)
            .iter()
            .map(|p| (p.iteration, p.phase, p.first_op, p.end_op))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "setup", 0, 1),
                (1, "forward", 1, 2),
                (1, "backward", 2, 3),
                (1, "optimizer step", 3, 5),
                (1, "after step", 5, 6),
                (2, "forward", 6, 7),
                (2, "backward", 7, 8),
            ]
        );
        let step = &phases(&s)[3];
        assert_eq!((step.peak_op_index, step.peak_allocated_bytes), (4, 8.0));
        assert_eq!(step.allocated_change_bytes, 8.0 - 5.0);
    }

    /// A record whose iterations start at `starts`, with a top-level forward of one op at
    /// each of `forwards`.
    fn recorded(names: &[&str], alloc: &[f64], forwards: &[i64], starts: &[i64]) -> TrackerStats {
        let mut s = stats(names, alloc);
        let marker_events = forwards
            .iter()
            .flat_map(|&i| {
                [("fw_start", i), ("fw_bw_boundary", i + 1)].map(|(name, op_index)| Marker {
                    name: name.into(),
                    op_index,
                })
            })
            .collect();
        s.record = Some(RecordInfo {
            marker_events,
            iteration_starts: starts.to_vec(),
            ..Default::default()
        });
        s
    }

    #[test]
    fn inference_calls_have_no_backward_and_identical_ones_fold() {
        // five calls: forward, then sampling with no backward op; the fourth peaks
        let mut names = Vec::new();
        let mut alloc = Vec::new();
        for k in 0..5 {
            names.push("Net.forward.mm_0");
            names.push("Global.forward.argmax_0");
            let peak = if k == 3 { 9.0 } else { 5.0 };
            alloc.extend([peak, 1.0]);
        }
        let s = recorded(&names, &alloc, &[0, 2, 4, 6, 8], &[0, 2, 4, 6, 8]);
        let sum = tracker_summary(&s, 5);
        assert!(sum.phases.iter().all(|p| p.phase != "backward"));
        assert_eq!(
            sum.phases
                .iter()
                .filter(|p| p.phase == "after forward")
                .count(),
            5
        );
        let shown: Vec<usize> = sum
            .iterations
            .iter()
            .filter(|it| it.shown)
            .map(|it| it.iteration)
            .collect();
        assert_eq!(shown, vec![1, 4, 5], "first, peak, last");
        assert!(sum.iterations.iter().all(|it| it.same_as == 1));
    }

    #[test]
    fn growth_compares_training_steps_and_inference_calls_are_their_own_part() {
        // three training steps, each back at 10 when the next starts, then two evaluation
        // calls that start higher (their inputs, a larger batch)
        let mut names = Vec::new();
        for _ in 0..3 {
            names.extend(["Net.forward.mm_0", "Net.backward.mm_0", "SGD.step.add_0"]);
        }
        for _ in 0..2 {
            names.extend(["Net.forward.mm_0", "Global.forward.argmax_0"]);
        }
        let alloc = [
            5.0, 3.0, 10.0, 15.0, 12.0, 10.0, 15.0, 12.0, 10.0, 30.0, 20.0, 40.0, 5.0,
        ];
        let s = recorded(&names, &alloc, &[0, 3, 6, 9, 11], &[0, 3, 6, 9, 11]);
        let sum = tracker_summary(&s, 5);
        let kinds: Vec<&str> = sum.iterations.iter().map(|it| it.kind).collect();
        assert_eq!(
            kinds,
            [
                "training step",
                "training step",
                "training step",
                "inference",
                "inference"
            ]
        );
        let g = &sum.growth;
        assert_eq!(
            (g.compared, g.inference_calls_left_out),
            ("training steps", 2)
        );
        assert_eq!(g.measured_iterations, [2, 3]);
        assert_eq!(g.allocated_at_start_bytes, [10.0, 10.0]);
        assert_eq!(
            g.verdict, "flat",
            "the evaluations' higher starts are not growth"
        );
        let calls = sum.inference_calls.as_ref().expect("inference calls");
        assert_eq!((calls.calls, calls.iterations.as_slice()), (2, &[4, 5][..]));
        assert_eq!(
            (
                calls.peak_iteration,
                calls.peak_op_index,
                calls.peak_allocated_bytes
            ),
            (5, 11, 40.0)
        );
        // the same file without its training steps: all inference, compared as iterations
        let s = recorded(&names[9..], &alloc[9..], &[0, 2], &[0, 2]);
        let sum = tracker_summary(&s, 5);
        assert!(sum.inference_calls.is_none());
        assert_eq!(sum.growth.compared, "iterations");
    }

    #[test]
    fn micro_batches_and_merged_calls_stay_in_their_step() {
        let names = [
            "Net.forward.mm_0",     // 0 forward, micro-batch 1
            "Net.backward.mm_1",    // 1 backward
            "Net.forward.mm_2",     // 2 forward, micro-batch 2
            "Global.forward.add_0", // 3 between two calls: the same forward
            "Net.forward.mm_3",     // 4 forward, second call
            "Net.backward.mm_4",    // 5 backward
            "SGD.step.add_0",       // 6 optimizer step
            "Net.forward.mm_5",     // 7 the next iteration
        ];
        let s = recorded(&names, &[1.0; 8], &[0, 2, 4, 7], &[0, 7]);
        type Row = (usize, &'static str, Option<usize>, usize, usize, usize);
        let got: Vec<Row> = phases(&s)
            .iter()
            .map(|p| {
                (
                    p.iteration,
                    p.phase,
                    p.micro_batch,
                    p.calls,
                    p.first_op,
                    p.end_op,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "forward", Some(1), 1, 0, 1),
                (1, "backward", Some(1), 0, 1, 2),
                (1, "forward", Some(2), 2, 2, 5),
                (1, "backward", Some(2), 0, 5, 6),
                (1, "optimizer step", None, 0, 6, 7),
                (2, "forward", None, 1, 7, 8),
            ]
        );
    }

    #[test]
    fn repeated_names_keep_last_value_and_first_position() {
        // a: +1 then (as a repeat) -5 → last value -5 wins, as in MemoryTracker's dict
        let s = stats(&["x", "a", "b", "a", "c"], &[0.0, 1.0, 3.0, -2.0, -2.0]);
        let top = top_ops(&s, 10);
        let got: Vec<(&str, f64)> = top
            .iter()
            .map(|t| (t.op.as_str(), t.generated_bytes))
            .collect();
        assert_eq!(got, vec![("b", 2.0), ("c", 0.0), ("a", -5.0)]);
    }

    #[test]
    fn op_index_bounds_the_ops_summarised() {
        let mut s = stats(&["x", "a", "b"], &[0.0, 1.0, 9.0]);
        s.op_index = Some(2);
        let top = top_ops(&s, 10);
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].op, "a");
    }
}
