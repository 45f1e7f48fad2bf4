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
//! Where a second model (or a fresh optimizer) is trained after the first, each is compared
//! with itself, its first iteration its warm-up: a new model's parameters and state are made
//! once, which is not growth. Nothing is said from fewer than [`MIN_STEPS`] steps, and an op is
//! listed as retaining only where it did so in [`MIN_STEPS`] of the iterations checked: what is
//! made once and kept (a new optimizer's state, the gradients of a model no longer trained) is
//! meant to persist.

use serde::Serialize;

use crate::model::{ModState, Retained, RetainedOp, TrackerStats, CATEGORIES};

use super::iteration_kinds::growth_scope;
use super::iterations::Iteration;

/// Iterations left out at the start before growth is measured.
pub const WARMUP_ITERATIONS: usize = 1;

/// Steps between consecutive starts needed before anything is said of growth: one step is
/// one pair of starts, which a last batch larger than the one before can make rise.
pub const MIN_STEPS: usize = 2;

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
    /// Iterations compared that are left out as warm-up ([`WARMUP_ITERATIONS`] in each part).
    pub warmup_iterations: usize,
    /// The 1-based numbers of the iterations that start a new part: the first to train a model
    /// or use an optimizer that no iteration before did. Growth is compared within parts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub new_models_at: Vec<usize>,
    /// The 1-based numbers of the iterations measured (after warm-up), in order.
    pub measured_iterations: Vec<usize>,
    /// Allocated bytes when each iteration measured started (before its first op), in order.
    pub allocated_at_start_bytes: Vec<f64>,
    /// Mean bytes retained per iteration after warm-up: the change between the first and the
    /// last start measured in each part, over the steps between them; None when there are
    /// fewer than [`MIN_STEPS`] steps.
    pub bytes_per_iteration: Option<f64>,
    /// Of the steps between consecutive starts, those where allocated rose.
    pub rising_steps: usize,
    /// Steps between consecutive starts measured.
    pub steps: usize,
    /// `grows` (it rose at every step), `flat` (it moved by less than [`FLAT_SHARE`] of the
    /// peak), `shrinks` (fell at every step), `varies` (up and down), or `unknown` (fewer than
    /// [`MIN_STEPS`] steps).
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
/// training steps where it has inference calls too, within each part that trains the same
/// models ([`parts`]).
pub fn growth(stats: &TrackerStats, all: &[Iteration]) -> Growth {
    let retained = stats.record.as_ref().and_then(|r| r.retained.as_ref());
    let iterations = all.len();
    let compared = growth_scope(all);
    let parts = parts(stats, &compared);
    let at = |op: usize| {
        if op == 0 {
            0.0
        } else {
            stats.allocated[op - 1]
        }
    };
    // each part's iterations after its warm-up, and the allocated bytes at their starts
    let measured: Vec<&[&Iteration]> = (parts.iter())
        .map(|p| &p[WARMUP_ITERATIONS.min(p.len())..])
        .collect();
    let part_starts: Vec<Vec<f64>> = (measured.iter())
        .map(|p| p.iter().map(|it| at(it.first_op)).collect())
        .collect();
    // the highest allocated over the iterations measured: the scale of "small"
    let peak = (measured.iter().flat_map(|p| p.iter()))
        .map(|it| it.peak_allocated_bytes)
        .filter(|x| !x.is_nan())
        .fold(0.0, f64::max);
    let Trend {
        bytes_per_iteration,
        rising_steps,
        steps,
        verdict,
    } = trend(&part_starts, peak);
    let measured_parts: Vec<Vec<usize>> = (measured.iter())
        .map(|p| p.iter().map(|it| it.iteration).collect())
        .collect();
    Growth {
        iterations,
        compared: if compared.len() < iterations {
            "training steps"
        } else {
            "iterations"
        },
        inference_calls_left_out: iterations - compared.len(),
        warmup_iterations: parts.iter().map(|p| WARMUP_ITERATIONS.min(p.len())).sum(),
        new_models_at: parts.iter().skip(1).map(|p| p[0].iteration).collect(),
        allocated_at_start_bytes: part_starts.concat(),
        bytes_per_iteration,
        rising_steps,
        steps,
        verdict,
        categories: category_growth(stats, &measured_parts, steps),
        measured_iterations: measured_parts.concat(),
        retained_iterations_checked: retained.map(|r| r.iterations),
        ops: retained.map_or_else(Vec::new, retained_ops),
        modules: retained.map_or_else(Vec::new, retained_modules),
    }
}

/// How allocated at the iterations' starts moved: [`Growth`]'s figures of the same names.
#[derive(Clone, Debug)]
pub struct Trend {
    /// Mean change per iteration from each part's first start to its last; None with fewer
    /// than [`MIN_STEPS`] steps.
    pub bytes_per_iteration: Option<f64>,
    /// Steps between consecutive starts where allocated rose.
    pub rising_steps: usize,
    /// Steps between consecutive starts.
    pub steps: usize,
    /// `grows`, `flat`, `shrinks`, `varies` or `unknown`, as [`Growth::verdict`].
    pub verdict: &'static str,
}

/// The trend of `parts` (each, allocated when its iterations measured began, in order; a
/// part's first start is not compared with the part before), `peak` the highest allocated
/// over them (the scale of a change too small to count). Nothing from fewer than
/// [`MIN_STEPS`] steps.
pub fn trend(parts: &[Vec<f64>], peak: f64) -> Trend {
    let steps: usize = parts.iter().map(|s| s.len().saturating_sub(1)).sum();
    let windows = || parts.iter().flat_map(|s| s.windows(2));
    let rising_steps = windows().filter(|w| w[1] > w[0]).count();
    let falling_steps = windows().filter(|w| w[1] < w[0]).count();
    let change: f64 = (parts.iter())
        .filter(|s| s.len() > 1)
        .map(|s| s[s.len() - 1] - s[0])
        .sum();
    let bytes_per_iteration = (steps >= MIN_STEPS).then(|| change / steps as f64);
    let verdict = match bytes_per_iteration {
        None => "unknown",
        Some(per) if (per * steps as f64).abs() <= FLAT_SHARE * peak => "flat",
        Some(_) if rising_steps == steps => "grows",
        Some(_) if falling_steps == steps => "shrinks",
        Some(_) => "varies",
    };
    Trend {
        bytes_per_iteration,
        rising_steps,
        steps,
        verdict,
    }
}

/// The iterations compared, cut where something new is trained: an iteration that runs a
/// top-level module or an optimizer (an op name's first part, `Global` aside) that no
/// iteration before it ran starts a part of its own. A second model trained after the first,
/// or a fresh optimizer, is not growth: its parameters and state are made once, in the part's
/// first iteration, which is the part's warm-up.
fn parts<'a>(stats: &TrackerStats, compared: &[&'a Iteration]) -> Vec<Vec<&'a Iteration>> {
    let mut seen: std::collections::HashSet<&str> = Default::default();
    let mut parts: Vec<Vec<&Iteration>> = Vec::new();
    for &it in compared {
        let mut new = false;
        let mut last = "";
        for op in it.first_op..it.end_op.min(stats.names.len()) {
            let name = stats.names.get(op);
            let top = name.split_once('.').map_or(name, |(top, _)| top);
            // consecutive ops mostly share their first part: look it up when it changes
            if top != last {
                last = top;
                if top != "Global" && seen.insert(top) {
                    new = true;
                }
            }
        }
        match parts.last_mut() {
            Some(part) if !new => part.push(it),
            _ => parts.push(vec![it]),
        }
    }
    parts
}

fn per_iteration(x: i64, r: &Retained) -> f64 {
    x as f64 / r.iterations.max(1) as f64
}

/// The ops that retained in at least [`MIN_STEPS`] of the iterations checked.
fn recurring(r: &Retained) -> impl Iterator<Item = &RetainedOp> {
    r.ops.iter().filter(|o| o.iterations >= MIN_STEPS as i64)
}

fn retained_ops(r: &Retained) -> Vec<RetainedRow> {
    (recurring(r).take(RETAINED_ROWS))
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
    for o in recurring(r) {
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

/// Per category, the mean change per step measured (`parts`: the numbers of each part's
/// iterations measured; `steps` in all) of the bytes at the first module's first Pre-Forward
/// (the start of the forward), from a record file's module breakdown.
fn category_growth(
    stats: &TrackerStats,
    parts: &[Vec<usize>],
    steps: usize,
) -> Vec<CategoryGrowth> {
    let Some(r) = &stats.record else {
        return Vec::new();
    };
    if steps == 0 {
        return Vec::new();
    }
    let mut change = [0i64; 7];
    for part in parts {
        let at_forward: Vec<[i64; 7]> = (r.modules.iter())
            .filter(|it| part.binary_search(&it.iteration).is_ok())
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
        if let (Some(first), Some(last)) = (at_forward.first(), at_forward.last()) {
            for (c, slot) in change.iter_mut().enumerate() {
                *slot += last[c] - first[c];
            }
        }
    }
    let mut out: Vec<CategoryGrowth> = (0..CATEGORIES.len())
        .filter(|&c| change[c] != 0)
        .map(|c| CategoryGrowth {
            category: CATEGORIES[c],
            bytes_per_iteration: change[c] as f64 / steps as f64,
        })
        .collect();
    out.sort_by(|a, b| b.bytes_per_iteration.total_cmp(&a.bytes_per_iteration));
    out
}
