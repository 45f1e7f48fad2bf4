//! The iterations and phases of a stats file's ops (docs/record.md, "Iterations and phases"):
//! what `summary` finds, and what growth and the iteration kinds measure from it.

use serde::Serialize;

/// A stretch of ops of an iteration (docs/record.md, "Iterations and phases"): `setup`
/// (before the first iteration, iteration 0; `earlier iterations` where the file keeps only the
/// last iteration's markers and backward ran before them), `forward` (from a fw_start to its
/// fw_bw_boundary; marked calls with no backward or step between them are one forward), then
/// until the next forward: `backward` when a backward op ran
/// there, `after forward` when none did (inference), and where the recording names optimizer
/// ops (`memtrack record`) `optimizer step` and `after step` (zero_grad, the next batch).
#[derive(Debug, Serialize)]
pub struct Phase {
    /// 1-based iteration number; 0 for `setup`.
    pub iteration: usize,
    /// `setup`, `earlier iterations`, `forward`, `backward`, `after forward`,
    /// `optimizer step` or `after step`.
    pub phase: &'static str,
    /// The micro-batch (1-based) the phase belongs to, where the iteration has several
    /// forward-and-backward pairs before its step (gradient accumulation); None otherwise.
    pub micro_batch: Option<usize>,
    /// How many micro-batches the iteration has (1 without gradient accumulation).
    pub micro_batches: usize,
    /// Marked top-level calls (fw_start to fw_bw_boundary) in a `forward` phase (a cell
    /// unrolled over time: many); 0 in other phases.
    pub calls: usize,
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

/// One iteration: a training step (ending with its optimizer step where there is one), or
/// one forward-only call.
#[derive(Debug, Serialize)]
pub struct Iteration {
    /// 1-based number.
    pub iteration: usize,
    /// 0-based index of its first op.
    pub first_op: usize,
    /// One past its last op.
    pub end_op: usize,
    /// The highest allocated sample within it, in bytes (NaN if every sample is NaN).
    pub peak_allocated_bytes: f64,
    /// Allocated after its last op minus allocated before its first.
    pub allocated_change_bytes: f64,
    /// The first iteration of the run of consecutive iterations with the same phases (names,
    /// micro-batches, calls and op counts) that this one belongs to: itself if it starts one.
    pub same_as: usize,
    /// Whether reports show its phases: every iteration of a run of at most three; of a
    /// longer run, its first, the one with the highest peak and its last (`--all-iterations`
    /// shows all).
    pub shown: bool,
    /// `training step` (a backward or an optimizer step ran in it) or `inference` (forward
    /// only: evaluation, generation).
    pub kind: &'static str,
}

/// Index and value of the first maximum in `v[from..to]`, skipping NaN.
pub fn argmax(v: &[f64], from: usize, to: usize) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &x) in v.iter().enumerate().take(to).skip(from) {
        if !x.is_nan() && best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    best
}
