//! A stats file (MemoryTracker's, or `memtrack record`'s) in the viewer: allocated, active and
//! reserved bytes per op, cut for a window and pixel width by `analysis::decimate` (each
//! column's first, lowest, highest and last op, so every spike shows), with the markers and
//! the op names on demand.

use serde::Serialize;

use crate::analysis::decimate::min_max_envelope;
use crate::model::{Series, TrackerStats};

use super::index::MAX_WIDTH;

/// One series' points: op indices and bytes.
#[derive(Debug, Serialize)]
pub struct Line {
    /// `allocated`, `active` or `reserved`.
    pub name: &'static str,
    /// Op index of each point.
    pub op: Vec<usize>,
    /// Bytes after that op.
    pub bytes: Vec<f64>,
}

/// What a view of ops `[x0, x1]` at `width` pixels shows.
#[derive(Debug, Serialize)]
pub struct SeriesTile {
    /// The window (op indices).
    pub x0: f64,
    /// Its end.
    pub x1: f64,
    /// Ops in the window.
    pub ops: usize,
    /// The series that have values.
    pub lines: Vec<Line>,
}

/// The stats file's first facts.
#[derive(Debug, Serialize)]
pub struct SeriesOverview {
    /// Ops recorded.
    pub ops: usize,
    /// Every marker occurrence (`fw_start`, `fw_bw_boundary`, …) as (name, op index).
    pub markers: Vec<(String, i64)>,
    /// The highest allocated bytes and its op.
    pub peak: Option<(usize, f64)>,
    /// Series equal at every op, by name (`["allocated", "active"]`): drawn as one line.
    pub coinciding: Vec<Vec<&'static str>>,
}

/// The window `[x0, x1]` (op indices) at `width` columns.
pub fn tile(stats: &TrackerStats, x0: f64, x1: f64, width: usize) -> SeriesTile {
    let n = stats.op_count();
    let from = (x0.max(0.0).floor() as usize).min(n);
    let to = ((x1.max(0.0).ceil() as usize) + 1).min(n).max(from);
    let width = width.clamp(1, MAX_WIDTH);
    let lines = [Series::Allocated, Series::Active, Series::Reserved]
        .into_iter()
        .filter(|&s| stats.series(s).iter().any(|v| !v.is_nan()))
        .map(|s| {
            let pts = min_max_envelope(stats.series(s), from, to, width);
            Line {
                name: s.name(),
                op: pts.iter().map(|p| p.0).collect(),
                bytes: pts.iter().map(|p| p.1).collect(),
            }
        })
        .collect();
    SeriesTile {
        x0,
        x1,
        ops: to - from,
        lines,
    }
}

/// Ops a search names at most (the count and bytes cover them all).
pub const MAX_OP_HITS: usize = 20_000;

/// The ops whose name (`{module}.{forward|backward}.{op}_{n}`) holds the query.
#[derive(Debug, Serialize)]
pub struct OpHits {
    /// Ops that match, in all.
    pub ops: usize,
    /// The first [`MAX_OP_HITS`] of them, in op order.
    pub first: Vec<usize>,
    /// Distinct modules those ops ran in (`op_module`), at most 20 named.
    pub modules: Vec<String>,
}

/// Search the op names, case-insensitive (`Adam`, `attn`, `addmm`).
pub fn search(stats: &TrackerStats, query: &str) -> OpHits {
    let q = query.to_lowercase();
    let mut hits = OpHits {
        ops: 0,
        first: Vec::new(),
        modules: Vec::new(),
    };
    for (i, name) in stats.names.iter().enumerate() {
        if !name.to_lowercase().contains(&q) {
            continue;
        }
        hits.ops += 1;
        if hits.first.len() < MAX_OP_HITS {
            hits.first.push(i);
        }
        if let Some(m) = crate::model::tracker::op_module(name) {
            if hits.modules.len() < 20 && !hits.modules.iter().any(|k| k == m) {
                hits.modules.push(m.to_string());
            }
        }
    }
    hits
}

/// Groups of series with equal values at every op (the page says they coincide: one line
/// drawn over the other), by name; only groups of two or more.
fn coinciding(stats: &TrackerStats) -> Vec<Vec<&'static str>> {
    let with_values: Vec<Series> = [Series::Allocated, Series::Active, Series::Reserved]
        .into_iter()
        .filter(|&s| stats.series(s).iter().any(|v| !v.is_nan()))
        .collect();
    let same = |a: Series, b: Series| {
        (stats.series(a).iter().zip(stats.series(b)))
            .all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
    };
    let mut groups: Vec<Vec<Series>> = Vec::new();
    for s in with_values {
        match groups.iter_mut().find(|g| same(g[0], s)) {
            Some(g) => g.push(s),
            None => groups.push(vec![s]),
        }
    }
    (groups.into_iter())
        .filter(|g| g.len() > 1)
        .map(|g| g.into_iter().map(|s| s.name()).collect())
        .collect()
}

/// Ops, markers and the peak.
pub fn overview(stats: &TrackerStats) -> SeriesOverview {
    let peak = (stats.allocated.iter().enumerate())
        .filter(|(_, v)| !v.is_nan())
        .fold(None, |best: Option<(usize, f64)>, (i, &v)| match best {
            Some((_, b)) if b >= v => best,
            _ => Some((i, v)),
        });
    SeriesOverview {
        ops: stats.op_count(),
        markers: (stats.marker_events().into_iter())
            .map(|m| (m.name, m.op_index))
            .collect(),
        peak,
        coinciding: coinciding(stats),
    }
}

/// What a `record` (or `estimate`) file says of its run, for the page's header: None for a
/// MemoryTracker file.
#[derive(Debug, Serialize)]
pub struct RecordFacts {
    /// `cuda`, `cpu` or `estimate`.
    pub backend: String,
    /// The device's name and size, when the file has them.
    pub device_name: Option<String>,
    pub device_total_bytes: Option<u64>,
    /// Iterations with a module breakdown.
    pub iterations: usize,
    /// Memory by category at the run's highest total, by device (MemTracker's peak).
    pub peak: Option<crate::model::ModuleSnapshot>,
}

/// The run's facts of a `record` file.
pub fn record_facts(stats: &TrackerStats) -> Option<RecordFacts> {
    let r = stats.record.as_ref()?;
    Some(RecordFacts {
        backend: r.backend.clone(),
        device_name: r.device_name.clone(),
        device_total_bytes: r.device_total_bytes,
        iterations: r.modules.len(),
        peak: r.peak.clone(),
    })
}

/// One iteration's module × category breakdown (what `memtrack modules` prints, every depth
/// and state): iteration `iteration` (1-based), else the last; None without a breakdown.
pub fn modules(
    stats: &TrackerStats,
    iteration: Option<usize>,
) -> Option<crate::analysis::modules::ModulesView> {
    use crate::analysis::modules::{select, IterationSel, Query};
    let r = stats.record.as_ref().filter(|r| !r.modules.is_empty())?;
    let query = Query {
        depth: usize::MAX,
        states: Vec::new(),
        iteration: iteration.map_or(IterationSel::Last, IterationSel::One),
    };
    select(r, &query).ok()
}
