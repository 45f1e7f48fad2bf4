//! `summary` of tracker stats: MemoryTracker.summary's top ops, and what a user asks next.

use serde::Serialize;

use crate::analysis::modules::natural_cmp;
use crate::model::{
    Marker, ModState, ModuleStats, RecordInfo, Series, TrackerStats, Unmeasured, CATEGORIES,
};

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
    /// The `--top` ops that generate the most memory, largest first.
    pub top_ops: Vec<TopOp>,
    /// The file's markers (the last occurrence of each name).
    pub markers: Vec<Marker>,
    /// memtrack's own extension of the file; None for a plain MemoryTracker file.
    pub record: Option<RecordInfo>,
    /// Per-module peaks of the last iteration (files from `memtrack record`).
    pub module_peaks: Option<ModulePeaks>,
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
    /// What grows from one iteration to the next (`analysis::growth`).
    pub growth: super::growth::Growth,
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

/// MemTracker's Peak-Forward / Peak-Backward totals per module: the most memory in use while
/// the module's forward (backward) ran.
#[derive(Debug, Serialize)]
pub struct ModulePeaks {
    /// The 1-based number of the iteration shown (the last one recorded).
    pub iteration: usize,
    /// How many iterations the record's module breakdown holds.
    pub iterations: usize,
    /// Modules deeper than this are left out ([`MODULE_PEAK_DEPTH`]).
    pub max_depth: usize,
    /// Modules down to `max_depth`, in natural order of their names.
    pub modules: Vec<ModulePeak>,
}

/// A module's memory at its peaks, from a record's module breakdown.
#[derive(Debug, Serialize)]
pub struct ModulePeak {
    /// The module's fully qualified name (`MLP.blocks.0`).
    pub module: String,
    /// Bytes of the module's own parameters.
    pub parameter_bytes: i64,
    /// Highest Peak-Forward total over its calls, in bytes; None if its forward never ran.
    pub peak_forward_bytes: Option<i64>,
    /// Highest Peak-Backward total over its calls, in bytes; None if its backward never ran.
    pub peak_backward_bytes: Option<i64>,
    /// The largest category in the higher of the two peaks, and its bytes.
    pub top_category: Option<(&'static str, i64)>,
}

/// Modules down to this depth appear in the summary (`modules` shows any depth).
pub const MODULE_PEAK_DEPTH: usize = 2;

fn module_peaks(record: &RecordInfo) -> Option<ModulePeaks> {
    let last = record.modules.last()?;
    let mut modules: Vec<&ModuleStats> = last
        .modules
        .iter()
        .filter(|m| m.depth() <= MODULE_PEAK_DEPTH)
        .collect();
    modules.sort_by(|a, b| natural_cmp(&a.fqn, &b.fqn));
    let modules = modules
        .into_iter()
        .map(|m| {
            let best = [ModState::PeakForward, ModState::PeakBackward]
                .iter()
                .filter_map(|&s| m.state(s))
                .flat_map(|s| s.calls.iter())
                .max_by_key(|snap| snap.total());
            let top_category = best.and_then(|snap| {
                let mut by = [0i64; 7];
                for d in &snap.0 {
                    for (slot, b) in by.iter_mut().zip(d.by_category) {
                        *slot += b;
                    }
                }
                by.iter()
                    .enumerate()
                    .max_by_key(|(_, b)| **b)
                    .map(|(i, b)| (CATEGORIES[i], *b))
            });
            ModulePeak {
                module: m.fqn.clone(),
                parameter_bytes: m.parameter_bytes,
                peak_forward_bytes: m.max_total(ModState::PeakForward),
                peak_backward_bytes: m.max_total(ModState::PeakBackward),
                top_category,
            }
        })
        .collect();
    Some(ModulePeaks {
        iteration: last.iteration,
        iterations: record.modules.len(),
        max_depth: MODULE_PEAK_DEPTH,
        modules,
    })
}

/// Several files of one job (`run.rank*.pkl`) side by side.
#[derive(Debug, Serialize)]
pub struct CrossRank {
    /// One row per file, in the order given.
    pub ranks: Vec<RankRow>,
    /// Highest peak allocated over lowest, minus one (0.25 = the top rank uses 25% more).
    pub peak_allocated_spread: Option<f64>,
}

/// One rank's file in a cross-rank summary.
#[derive(Debug, Serialize)]
pub struct RankRow {
    /// The file's name as given on the command line.
    pub file: String,
    /// `RANK` of the torchrun job; None for a process without one (a DataLoader worker).
    pub rank: Option<i64>,
    /// Number of ops in the file.
    pub ops: usize,
    /// Iterations in the record's module breakdown (0 without one).
    pub iterations: usize,
    /// The highest allocated sample; None when the file has no ops.
    pub peak_allocated: Option<Peak>,
    /// The highest reserved sample; None when the file has no ops.
    pub peak_reserved: Option<Peak>,
    /// How the program ended (`exit`, `exception`, `signal`, `disconnected`); None if unknown.
    pub ended: Option<String>,
    /// The signal that killed the process, when memtrack started it and one did.
    pub exit_signal: Option<i64>,
}

/// Compare the files of a torchrun job's ranks, given as (name, stats).
pub fn cross_rank(files: &[(String, &TrackerStats)]) -> CrossRank {
    let peak = |t: &TrackerStats, s: Series| {
        argmax(t.series(s), 0, t.op_count()).map(|(i, bytes)| Peak {
            series: s,
            bytes,
            op_index: i,
            op: t.names.get(i).to_string(),
        })
    };
    let ranks: Vec<RankRow> = files
        .iter()
        .map(|(file, t)| {
            let r = t.record.as_ref();
            RankRow {
                file: file.clone(),
                rank: r.and_then(|r| r.rank),
                ops: t.op_count(),
                iterations: r.map_or(0, |r| r.modules.len()),
                peak_allocated: peak(t, Series::Allocated),
                peak_reserved: peak(t, Series::Reserved),
                ended: r
                    .and_then(|r| r.exit.as_ref())
                    .and_then(|e| e.ended.clone()),
                exit_signal: r.and_then(|r| r.exit.as_ref()).and_then(|e| e.signal),
            }
        })
        .collect();
    // ranks are compared with ranks: a process without one (a spawned DataLoader worker,
    // `NAME.worker-PID.pkl`) is listed but not part of the spread when ranks are present
    let ranked = ranks.iter().any(|r| r.rank.is_some());
    let peaks: Vec<f64> = ranks
        .iter()
        .filter(|r| !ranked || r.rank.is_some())
        .filter_map(|r| r.peak_allocated.as_ref().map(|p| p.bytes))
        .collect();
    let max = peaks.iter().copied().fold(f64::NAN, f64::max);
    let min = peaks.iter().copied().fold(f64::NAN, f64::min);
    CrossRank {
        ranks,
        peak_allocated_spread: (peaks.len() > 1 && min > 0.0).then(|| max / min - 1.0),
    }
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

/// A stretch of ops between markers, per iteration: `setup` (before the first fw_start,
/// iteration 0), `forward` (fw_start to fw_bw_boundary), `backward` (from fw_bw_boundary),
/// and where the recording names optimizer ops (`memtrack record`), `optimizer step` and
/// `after step` (until the next fw_start: zero_grad, the next batch).
#[derive(Debug, Serialize)]
pub struct Phase {
    /// 1-based iteration number; 0 for `setup`.
    pub iteration: usize,
    /// `setup`, `forward`, `backward`, `optimizer step` or `after step`.
    pub phase: &'static str,
    /// 0-based index of the phase's first op.
    pub first_op: usize,
    /// One past the last op.
    pub end_op: usize,
    /// The highest allocated sample within the phase, in bytes (NaN if every sample is NaN).
    pub peak_allocated_bytes: f64,
    /// Index of the op with that peak (the first op when there is none).
    pub peak_op_index: usize,
    /// Allocated after the phase's last op minus allocated before its first.
    pub allocated_change_bytes: f64,
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
    TrackerSummary {
        ops: n,
        op_index: stats.op_index,
        num_alloc_retries: stats.num_alloc_retries,
        growth: super::growth::growth(stats, &phases),
        phases,
        top_ops: top_ops(stats, top),
        markers: stats.markers.clone(),
        record: stats.record.clone(),
        module_peaks: stats.record.as_ref().and_then(module_peaks),
        device_peaks: device_peaks(stats),
        peaks_inside_ops: peaks_inside_ops(stats, &peaks),
        unmeasured: stats
            .record
            .as_ref()
            .map_or_else(Vec::new, |r| unmeasured_lines(&r.unmeasured)),
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

/// Index and value of the first maximum in `v[from..to]`, skipping NaN.
fn argmax(v: &[f64], from: usize, to: usize) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &x) in v.iter().enumerate().take(to).skip(from) {
        if !x.is_nan() && best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    best
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

fn phases(stats: &TrackerStats) -> Vec<Phase> {
    let n = stats.op_count();
    let mut events: Vec<Marker> = stats
        .marker_events()
        .into_iter()
        .filter(|m| m.name == "fw_start" || m.name == "fw_bw_boundary")
        .collect();
    events.sort_by_key(|m| m.op_index);
    let at = |m: &Marker| (m.op_index.max(0) as usize).min(n);
    // (iteration, phase, start, end) before measuring
    let mut spans: Vec<(usize, &'static str, usize, usize)> = Vec::new();
    // model construction, data loading: before the first forward, no iteration of its own
    if let Some(first) = events.iter().find(|m| m.name == "fw_start") {
        if at(first) > 0 {
            spans.push((0, "setup", 0, at(first)));
        }
    }
    let mut iteration = 0;
    for (k, m) in events.iter().enumerate() {
        let start = at(m);
        let end = events.get(k + 1).map_or(n, at);
        if m.name == "fw_start" {
            iteration += 1;
            spans.push((iteration, "forward", start, end));
            continue;
        }
        // after the boundary: backward, then the optimizer's step, then whatever runs until
        // the next forward (zero_grad, the next batch)
        let iteration = iteration.max(1);
        let opt_first = (start..end).find(|&i| is_optimizer_op(stats.names.get(i)));
        match opt_first {
            None => spans.push((iteration, "backward", start, end)),
            Some(first) => {
                let last = (first..end)
                    .rev()
                    .find(|&i| is_optimizer_op(stats.names.get(i)))
                    .unwrap_or(first);
                spans.push((iteration, "backward", start, first));
                spans.push((iteration, "optimizer step", first, last + 1));
                spans.push((iteration, "after step", last + 1, end));
            }
        }
    }
    spans
        .into_iter()
        .filter(|&(_, _, start, end)| end > start)
        .map(|(iteration, phase, start, end)| {
            let (peak_op_index, peak_allocated_bytes) =
                argmax(&stats.allocated, start, end).unwrap_or((start, f64::NAN));
            let before = if start == 0 {
                0.0
            } else {
                stats.allocated[start - 1]
            };
            Phase {
                iteration,
                phase,
                first_op: start,
                end_op: end,
                peak_allocated_bytes,
                peak_op_index,
                allocated_change_bytes: stats.allocated[end - 1] - before,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Marker, OpNames, RecordInfo};

    fn stats(names: &[&str], alloc: &[f64]) -> TrackerStats {
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
    fn the_spread_compares_ranks_only() {
        let ranked = |rank: i64, peak: f64| {
            let mut s = stats(&["x"], &[peak]);
            s.record = Some(crate::model::RecordInfo {
                rank: Some(rank),
                ..Default::default()
            });
            s
        };
        let (r0, r1, worker) = (ranked(0, 100.0), ranked(1, 125.0), stats(&["x"], &[1.0]));
        let files = [
            ("run.rank0.pkl".to_string(), &r0),
            ("run.rank1.pkl".to_string(), &r1),
            ("run.worker-9.pkl".to_string(), &worker),
        ];
        let c = cross_rank(&files);
        assert_eq!(c.ranks.len(), 3, "the worker is listed");
        assert_eq!(c.peak_allocated_spread, Some(0.25));
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
