//! What grows from one iteration to the next in a stats file: the bytes still allocated at
//! the same point of every iteration, after warm-up, and (for `memtrack record` files) the
//! memory categories that hold them.
//!
//! Iterations are the summary's (their first ops, as `analysis::summary` delimits them):
//! growth follows however they are delimited. Each iteration is measured where it starts (allocated before its first op):
//! that is the same point of the loop every time, where an iteration's end may be cut short by
//! the program's. The first iteration is warm-up (the optimizer's state and the gradients are
//! made in it), so the comparison starts at the second.
//!
//! Where a recording has training steps and inference calls (an evaluation after training, an
//! EMA copy's forward), only the training steps are compared: an evaluation starts at another
//! point of the program, with other memory live, and its start says nothing about a step's.

use serde::Serialize;

use crate::model::{ModState, Retained, TrackerStats, CATEGORIES};

use super::iteration_kinds::growth_scope;
use super::iterations::Iteration;

/// Iterations left out at the start before growth is measured.
pub const WARMUP_ITERATIONS: usize = 1;

/// A change smaller than this share of the peak allocated over all the iterations measured
/// is flat.
pub const FLAT_SHARE: f64 = 0.001;

/// Growth across iterations.
#[derive(Debug, Serialize)]
pub struct Growth {
    /// Iterations in the file.
    pub iterations: usize,
    /// What is compared: `training steps` where the file also has inference calls (they are
    /// left out), else `iterations` (all of them).
    pub compared: &'static str,
    /// Inference calls left out of the comparison.
    pub inference_calls_left_out: usize,
    /// Iterations compared that are left out as warm-up ([`WARMUP_ITERATIONS`]).
    pub warmup_iterations: usize,
    /// The 1-based numbers of the iterations measured (after warm-up), in order.
    pub measured_iterations: Vec<usize>,
    /// Allocated bytes when each iteration measured started (before its first op), in order.
    pub allocated_at_start_bytes: Vec<f64>,
    /// Mean bytes retained per iteration after warm-up: the change between the first and the
    /// last start measured, over the iterations between them; None when fewer than two
    /// iterations follow the warm-up.
    pub bytes_per_iteration: Option<f64>,
    /// Of the steps between consecutive starts, those where allocated rose.
    pub rising_steps: usize,
    /// Steps between consecutive starts measured.
    pub steps: usize,
    /// `grows` (it rose at every step), `flat` (it moved by less than [`FLAT_SHARE`] of the
    /// peak), `shrinks` (fell at every step), `varies` (up and down), or `unknown` (fewer than
    /// two iterations after warm-up).
    pub verdict: &'static str,
    /// Memory categories whose bytes at the start of the forward changed from one iteration to
    /// the next (record files: the module breakdown), mean change per iteration, largest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<CategoryGrowth>,
    /// Iterations whose storages were checked two iterations later (record files: the
    /// collector's `retained`); None for files without that check.
    pub retained_iterations_checked: Option<i64>,
    /// The ops whose storages were still alive two iterations after the one that made them,
    /// most bytes first (at most [`RETAINED_ROWS`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<RetainedRow>,
    /// The same by module, most bytes first (at most [`RETAINED_ROWS`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<RetainedRow>,
}

/// Rows of retained ops and modules kept.
pub const RETAINED_ROWS: usize = 10;

/// An op (or a module) whose allocations stayed alive across iterations.
#[derive(Debug, Serialize)]
pub struct RetainedRow {
    /// The op's name without its `_N` count (`Net.forward.clone.default`), or the module's.
    pub name: String,
    /// The module the op ran in (`Global` outside any); for a module row, itself.
    pub module: String,
    /// Bytes retained per iteration checked, on average.
    pub bytes_per_iteration: f64,
    /// Storages retained per iteration checked, on average.
    pub tensors_per_iteration: f64,
    /// In how many of the iterations checked it retained any (the most of its ops, for a module).
    pub iterations: i64,
    /// The MemTracker category of its storages (the first op's, for a module).
    pub category: String,
}

/// A memory category's mean change per iteration.
#[derive(Debug, Serialize)]
pub struct CategoryGrowth {
    /// MemTracker's category (`Activation`, `Optstate`, …).
    pub category: &'static str,
    /// Mean change per iteration after warm-up, in bytes.
    pub bytes_per_iteration: f64,
}

/// Growth of `stats` across its iterations (the summary's, iteration 1 first): across its
/// training steps where it has inference calls too.
pub fn growth(stats: &TrackerStats, all: &[Iteration]) -> Growth {
    let retained = stats.record.as_ref().and_then(|r| r.retained.as_ref());
    let iterations = all.len();
    let compared = growth_scope(all);
    let first_ops: Vec<usize> = compared.iter().map(|it| it.first_op).collect();
    let measured_iterations: Vec<usize> = (compared.iter().skip(WARMUP_ITERATIONS))
        .map(|it| it.iteration)
        .collect();
    let at = |op: usize| {
        if op == 0 {
            0.0
        } else {
            stats.allocated[op - 1]
        }
    };
    let starts: Vec<f64> = (first_ops.iter().skip(WARMUP_ITERATIONS))
        .map(|&op| at(op))
        .collect();
    let steps = starts.len().saturating_sub(1);
    let rising_steps = starts.windows(2).filter(|w| w[1] > w[0]).count();
    let falling_steps = starts.windows(2).filter(|w| w[1] < w[0]).count();
    let bytes_per_iteration = (steps > 0).then(|| (starts[steps] - starts[0]) / steps as f64);
    let verdict = match bytes_per_iteration {
        None => "unknown",
        Some(per) => {
            // the highest allocated over the iterations measured: the scale of "small"
            let peak = (compared.iter().skip(WARMUP_ITERATIONS))
                .map(|it| it.peak_allocated_bytes)
                .filter(|x| !x.is_nan())
                .fold(0.0, f64::max);
            if (per * steps as f64).abs() <= FLAT_SHARE * peak {
                "flat"
            } else if rising_steps == steps {
                "grows"
            } else if falling_steps == steps {
                "shrinks"
            } else {
                "varies"
            }
        }
    };
    Growth {
        iterations,
        compared: if compared.len() < iterations {
            "training steps"
        } else {
            "iterations"
        },
        inference_calls_left_out: iterations - compared.len(),
        warmup_iterations: WARMUP_ITERATIONS.min(compared.len()),
        allocated_at_start_bytes: starts,
        bytes_per_iteration,
        rising_steps,
        steps,
        verdict,
        categories: category_growth(stats, &measured_iterations),
        measured_iterations,
        retained_iterations_checked: retained.map(|r| r.iterations),
        ops: retained.map_or_else(Vec::new, retained_ops),
        modules: retained.map_or_else(Vec::new, retained_modules),
    }
}

fn per_iteration(x: i64, r: &Retained) -> f64 {
    x as f64 / r.iterations.max(1) as f64
}

fn retained_ops(r: &Retained) -> Vec<RetainedRow> {
    (r.ops.iter().take(RETAINED_ROWS))
        .map(|o| RetainedRow {
            name: o.op.clone(),
            module: o.module.clone(),
            bytes_per_iteration: per_iteration(o.bytes, r),
            tensors_per_iteration: per_iteration(o.tensors, r),
            iterations: o.iterations,
            category: o.category.clone(),
        })
        .collect()
}

fn retained_modules(r: &Retained) -> Vec<RetainedRow> {
    let mut rows: Vec<RetainedRow> = Vec::new();
    for o in &r.ops {
        match rows.iter_mut().find(|m| m.module == o.module) {
            Some(m) => {
                m.bytes_per_iteration += per_iteration(o.bytes, r);
                m.tensors_per_iteration += per_iteration(o.tensors, r);
                m.iterations = m.iterations.max(o.iterations);
            }
            None => rows.push(RetainedRow {
                name: o.module.clone(),
                module: o.module.clone(),
                bytes_per_iteration: per_iteration(o.bytes, r),
                tensors_per_iteration: per_iteration(o.tensors, r),
                iterations: o.iterations,
                category: o.category.clone(),
            }),
        }
    }
    rows.sort_by(|a, b| b.bytes_per_iteration.total_cmp(&a.bytes_per_iteration));
    rows.truncate(RETAINED_ROWS);
    rows
}

/// Per category, the mean change per iteration measured (`measured`: their numbers) of the
/// bytes at the first module's first Pre-Forward (the start of the forward), from a record
/// file's module breakdown.
fn category_growth(stats: &TrackerStats, measured: &[usize]) -> Vec<CategoryGrowth> {
    let Some(r) = &stats.record else {
        return Vec::new();
    };
    let at_forward: Vec<[i64; 7]> = (r.modules.iter())
        .filter(|it| measured.binary_search(&it.iteration).is_ok())
        .filter_map(|it| {
            let first = it.modules.first()?;
            let snap = first.state(ModState::PreForward)?.calls.first()?;
            let mut by = [0i64; 7];
            for d in &snap.0 {
                for (slot, b) in by.iter_mut().zip(d.by_category) {
                    *slot += b;
                }
            }
            Some(by)
        })
        .collect();
    let (Some(first), Some(last)) = (at_forward.first(), at_forward.last()) else {
        return Vec::new();
    };
    let steps = (at_forward.len() - 1) as f64;
    if steps == 0.0 {
        return Vec::new();
    }
    let mut out: Vec<CategoryGrowth> = (0..CATEGORIES.len())
        .filter(|&c| last[c] != first[c])
        .map(|c| CategoryGrowth {
            category: CATEGORIES[c],
            bytes_per_iteration: (last[c] - first[c]) as f64 / steps,
        })
        .collect();
    out.sort_by(|a, b| b.bytes_per_iteration.total_cmp(&a.bytes_per_iteration));
    out
}
