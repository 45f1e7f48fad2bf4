//! Training steps and inference calls in one recording: which iterations ran a backward or an
//! optimizer step, which were forward-only calls (evaluation, `generate`, an EMA copy's
//! forward), and what each kind is measured by. Growth is compared across training steps, the
//! module peaks are those of the training step with the highest peak, and inference calls are
//! reported as their own part.

use serde::Serialize;

use crate::analysis::modules::natural_cmp;
use crate::model::{ModState, ModuleStats, RecordInfo, TrackerStats, CATEGORIES};

use super::iterations::{argmax, Iteration, Phase};

/// An iteration with a backward or an optimizer step.
pub const TRAINING_STEP: &str = "training step";
/// An iteration with neither: forward-only calls.
pub const INFERENCE: &str = "inference";

/// Whether a phase makes its iteration a training step: a backward or an optimizer step.
pub(super) fn trains(phase: &Phase) -> bool {
    matches!(phase.phase, "backward" | "optimizer step")
}

/// The iterations growth compares: the training steps where the file has both kinds (an
/// evaluation's start is another point of the program than a step's), else all of them.
pub(super) fn growth_scope(iterations: &[Iteration]) -> Vec<&Iteration> {
    let mixed = iterations.iter().any(|it| it.kind == TRAINING_STEP)
        && iterations.iter().any(|it| it.kind == INFERENCE);
    (iterations.iter())
        .filter(|it| !mixed || it.kind == TRAINING_STEP)
        .collect()
}

/// The forward-only calls of a recording that also trains.
#[derive(Debug, Serialize)]
pub struct InferenceCalls {
    /// How many iterations were inference calls.
    pub calls: usize,
    /// Their 1-based iteration numbers.
    pub iterations: Vec<usize>,
    /// The highest allocated sample within them, in bytes.
    pub peak_allocated_bytes: f64,
    /// The inference call that reached it.
    pub peak_iteration: usize,
    /// 0-based index of the op with that peak.
    pub peak_op_index: usize,
    /// Name of that op.
    pub peak_op: String,
}

/// The inference calls where the file has training steps too; None otherwise (a file of
/// only one kind is all training, or all inference, and its iterations say so).
pub(super) fn inference_calls(
    stats: &TrackerStats,
    iterations: &[Iteration],
) -> Option<InferenceCalls> {
    if !iterations.iter().any(|it| it.kind == TRAINING_STEP) {
        return None;
    }
    let calls: Vec<&Iteration> = (iterations.iter())
        .filter(|it| it.kind == INFERENCE)
        .collect();
    let mut best: Option<(usize, usize, f64)> = None; // (iteration, op, bytes)
    for it in &calls {
        if let Some((op, bytes)) = argmax(&stats.allocated, it.first_op, it.end_op) {
            if best.is_none_or(|(_, _, b)| bytes > b) {
                best = Some((it.iteration, op, bytes));
            }
        }
    }
    let (peak_iteration, peak_op_index, peak_allocated_bytes) = best?;
    Some(InferenceCalls {
        calls: calls.len(),
        iterations: calls.iter().map(|it| it.iteration).collect(),
        peak_allocated_bytes,
        peak_iteration,
        peak_op_index,
        peak_op: stats.names.get(peak_op_index).to_string(),
    })
}

/// MemTracker's Peak-Forward / Peak-Backward totals per module: the most memory in use while
/// the module's forward (backward) ran.
#[derive(Debug, Serialize)]
pub struct ModulePeaks {
    /// The 1-based number of the iteration shown: the training step with the highest peak
    /// where there are training steps, else the last iteration recorded.
    pub iteration: usize,
    /// Why that one: `the training step with the highest peak` or `the last iteration`.
    pub chosen: &'static str,
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

/// The module peaks of the training step with the highest allocated peak (the last of equal
/// ones: a steady loop's steps are alike, and its last is the one the loop settled in), or of
/// the last iteration where no training step is in the module breakdown.
pub(super) fn module_peaks(record: &RecordInfo, iterations: &[Iteration]) -> Option<ModulePeaks> {
    let peak_step = (iterations.iter())
        .filter(|it| it.kind == TRAINING_STEP && !it.peak_allocated_bytes.is_nan())
        .filter(|it| record.modules.iter().any(|m| m.iteration == it.iteration))
        .fold(None, |best: Option<&Iteration>, it| match best {
            Some(b) if b.peak_allocated_bytes > it.peak_allocated_bytes => Some(b),
            _ => Some(it),
        });
    let (last, chosen) = match peak_step {
        Some(step) => (
            record
                .modules
                .iter()
                .find(|m| m.iteration == step.iteration)?,
            "the training step with the highest peak",
        ),
        None => (record.modules.last()?, "the last iteration"),
    };
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
        chosen,
        iterations: record.modules.len(),
        max_depth: MODULE_PEAK_DEPTH,
        modules,
    })
}
