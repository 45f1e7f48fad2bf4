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
    }
}
