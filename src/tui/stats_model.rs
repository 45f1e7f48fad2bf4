//! What the terminal UI shows of a per-op recording: a `record` file or MemoryTracker file
//! read whole, or a journal being written (one process of it), fed as it grows.
//!
//! Both keep the same figures: the run's allocated and reserved in an [`Envelope`], one row per
//! iteration (where it starts, its peak and the op there), the peak, the markers, and growth
//! across iterations (`analysis::growth::trend` of the iterations' starts, as `summary` judges
//! it). An iteration's phases and top ops are `analysis::summary`'s over that iteration's ops;
//! its module table is MemTracker's, as the file holds it.
//!
//! A file keeps its stats and works an iteration's details out when asked. A running job keeps
//! only the ops of its last two iterations (at most [`MOST_WINDOW_OPS`]), works out each
//! iteration's details when it ends and keeps those of the last [`KEPT_DETAILS`]: memory does
//! not grow with the run but by a row per iteration, at most [`MOST_ROWS`].

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::analysis::growth::{trend, Trend, WARMUP_ITERATIONS};
use crate::analysis::iterations::argmax;
use crate::analysis::summary::{top_ops, tracker_summary, Phase, TopOp};
use crate::model::{IterationModules, Marker, OpNames, RecordInfo, TrackerStats};
use crate::record::replay::live::{LiveOp, LiveReplay};

use super::envelope::Envelope;

/// Top ops listed per iteration.
pub const TOP_OPS: usize = 12;
/// Iterations whose details (phases, top ops, module table) a running job keeps.
pub const KEPT_DETAILS: usize = 64;
/// Iteration rows kept; the oldest go past it.
pub const MOST_ROWS: usize = 100_000;
/// Ops of a running job's last iterations kept for their details.
pub const MOST_WINDOW_OPS: usize = 2_000_000;
/// Markers kept (the latest).
const MOST_MARKERS: usize = 8192;
/// Details of ending iterations are worked out at most this often (a job of very short
/// iterations keeps its watcher's cost down: those in between have rows, not details).
pub const DETAIL_EVERY: Duration = Duration::from_millis(200);

/// One iteration.
#[derive(Clone, Debug)]
pub struct IterationRow {
    /// 1-based.
    pub number: usize,
    /// Its first op.
    pub first_op: usize,
    /// The op after its last; None while under way.
    pub end_op: Option<usize>,
    /// Allocated before its first op.
    pub start_allocated: f64,
    /// Its highest allocated, and the op after which it was reached.
    pub peak: f64,
    /// That op.
    pub peak_op: usize,
    /// Its name.
    pub peak_name: String,
}

/// An iteration's phases and the ops that allocated most in it.
#[derive(Default)]
pub struct Detail {
    /// `summary`'s phases of the iteration, op indices of the whole run.
    pub phases: Vec<Phase>,
    /// Its top ops (allocated after the op minus before it), op indices of the whole run.
    pub top_ops: Vec<TopOp>,
}

/// The run's highest allocated and where.
#[derive(Clone, Debug)]
pub struct PeakOp {
    /// Bytes.
    pub bytes: f64,
    /// After this op.
    pub op: usize,
    /// Its name.
    pub name: String,
}

/// Growth across iterations, as `summary` says it.
#[derive(Clone, Debug)]
pub struct GrowthLine {
    /// The trend of allocated at the iterations' starts after warm-up.
    pub trend: Trend,
    /// Iterations measured.
    pub measured: usize,
}

/// Everything the stats screens show.
pub struct StatsModel {
    /// Allocated and reserved over the run.
    pub envelope: Envelope,
    /// The iterations, oldest first (the first `rows_dropped` are gone).
    pub rows: VecDeque<IterationRow>,
    /// Rows dropped at the start (past [`MOST_ROWS`]).
    pub rows_dropped: usize,
    /// The run's peak.
    pub peak: Option<PeakOp>,
    /// `fw_start` (false) and `fw_bw_boundary` (true) op indices, the latest.
    pub markers: VecDeque<(usize, bool)>,
    source: Source,
}

enum Source {
    File {
        stats: Box<TrackerStats>,
        growth: Option<GrowthLine>,
        details: HashMap<usize, Detail>,
    },
    Live(Box<Live>),
}

/// A running job's recent ops and kept details.
#[derive(Default)]
struct Live {
    /// Its recent ops: names, allocated, active, reserved, from op `window_first`.
    names: OpNames,
    bytes: Vec<[f64; 3]>,
    window_first: usize,
    /// Iteration starts not reached yet by an op.
    pending: VecDeque<usize>,
    /// Allocated after the last op.
    last_allocated: f64,
    details: VecDeque<(usize, Detail)>,
    modules: VecDeque<IterationModules>,
    last_detail: Option<Instant>,
}

impl StatsModel {
    /// A stats file read whole.
    pub fn from_stats(stats: TrackerStats) -> StatsModel {
        let summary = tracker_summary(&stats, 0);
        let mut envelope = Envelope::default();
        for i in 0..stats.op_count() {
            envelope.push(stats.allocated[i], stats.reserved[i]);
        }
        let before = |op: usize| {
            if op == 0 {
                0.0
            } else {
                stats.allocated[op - 1]
            }
        };
        let rows = (summary.iterations.iter())
            .map(|it| {
                let (peak_op, peak) =
                    argmax(&stats.allocated, it.first_op, it.end_op).unwrap_or((it.first_op, 0.0));
                IterationRow {
                    number: it.iteration,
                    first_op: it.first_op,
                    end_op: Some(it.end_op),
                    start_allocated: before(it.first_op),
                    peak,
                    peak_op,
                    peak_name: name_at(&stats.names, peak_op),
                }
            })
            .collect();
        let peak = argmax(&stats.allocated, 0, stats.op_count()).map(|(op, bytes)| PeakOp {
            bytes,
            op,
            name: stats.names.get(op).to_string(),
        });
        let markers = (stats.marker_events().iter())
            .filter_map(marker_at)
            .collect();
        let g = &summary.growth;
        let growth = Some(GrowthLine {
            trend: Trend {
                bytes_per_iteration: g.bytes_per_iteration,
                rising_steps: g.rising_steps,
                steps: g.steps,
                verdict: g.verdict,
            },
            measured: g.measured_iterations.len(),
        });
        StatsModel {
            envelope,
            rows,
            rows_dropped: 0,
            peak,
            markers,
            source: Source::File {
                stats: Box::new(stats),
                growth,
                details: HashMap::new(),
            },
        }
    }

    /// A running job's model, empty until [`StatsModel::absorb`] feeds it.
    pub fn live() -> StatsModel {
        StatsModel {
            envelope: Envelope::default(),
            rows: VecDeque::new(),
            rows_dropped: 0,
            peak: None,
            markers: VecDeque::new(),
            source: Source::Live(Box::default()),
        }
    }

    /// Ops so far.
    pub fn ops(&self) -> usize {
        self.envelope.ops() as usize
    }

    /// The file's record extension, for a file `record` wrote.
    pub fn record(&self) -> Option<&RecordInfo> {
        match &self.source {
            Source::File { stats, .. } => stats.record.as_ref(),
            Source::Live(_) => None,
        }
    }

    /// Take what the replay recorded since the last call.
    pub fn absorb(&mut self, replay: &mut LiveReplay) {
        let Source::Live(live) = &mut self.source else {
            return;
        };
        live.pending
            .extend((replay.take_iteration_starts().into_iter()).map(|s| s.max(0) as usize));
        for m in replay.take_markers() {
            if let Some(m) = marker_at(&m) {
                self.markers.push_back(m);
            }
        }
        while self.markers.len() > MOST_MARKERS {
            self.markers.pop_front();
        }
        let closed = replay.take_iterations();
        let mut ops = Ops {
            envelope: &mut self.envelope,
            rows: &mut self.rows,
            rows_dropped: &mut self.rows_dropped,
            peak: &mut self.peak,
            markers: &self.markers,
            live,
        };
        replay.take_ops(|op| ops.op(op));
        for it in closed {
            // its number: the iterations begun by its first op (the first may start before
            // the first iteration's own start, at op 0)
            let number = (self.rows.iter().rev())
                .find(|r| r.first_op <= it.first_op)
                .map_or(1, |r| r.number);
            let mut it = it;
            it.iteration = number;
            live.modules.push_back(it);
            if live.modules.len() > KEPT_DETAILS {
                live.modules.pop_front();
            }
        }
    }

    /// Growth so far.
    pub fn growth(&self) -> Option<GrowthLine> {
        match &self.source {
            Source::File { growth, .. } => growth.clone(),
            Source::Live(_) => {
                let measured: Vec<&IterationRow> = (self.rows.iter())
                    .skip(WARMUP_ITERATIONS.saturating_sub(self.rows_dropped))
                    .collect();
                let starts: Vec<f64> = measured.iter().map(|r| r.start_allocated).collect();
                let peak = measured.iter().map(|r| r.peak).fold(0.0, f64::max);
                Some(GrowthLine {
                    trend: trend(&[starts], peak),
                    measured: measured.len(),
                })
            }
        }
    }

    /// The row of iteration `number`, if kept.
    pub fn row(&self, number: usize) -> Option<&IterationRow> {
        let k = number.checked_sub(self.rows.front()?.number)?;
        self.rows.get(k)
    }

    /// Iteration `number`'s phases and top ops, where they are known.
    pub fn detail(&mut self, number: usize) -> Option<&Detail> {
        let row = self.row(number)?.clone();
        match &mut self.source {
            Source::File { stats, details, .. } => Some(
                details
                    .entry(number)
                    .or_insert_with(|| file_detail(stats, &row)),
            ),
            Source::Live(live) => (live.details.iter())
                .find(|(n, _)| *n == number)
                .map(|(_, d)| d),
        }
    }

    /// Iteration `number`'s module table (MemTracker's), where it is kept.
    pub fn modules(&self, number: usize) -> Option<&IterationModules> {
        match &self.source {
            Source::File { stats, .. } => {
                let row = self.row(number)?;
                let r = stats.record.as_ref()?;
                // a table's first op is its iteration's start (the first one's may be 0)
                (r.modules.iter().rev()).find(|m| m.first_op <= row.first_op)
            }
            Source::Live(live) => live.modules.iter().find(|m| m.iteration == number),
        }
    }

    /// `n` columns over ops `from..to`: each one's highest allocated and highest reserved
    /// (None where no op falls), per op where the ops are kept and a column holds fewer ops
    /// than a bucket of the envelope, else from the envelope.
    pub fn columns(&self, from: usize, to: usize, n: usize) -> Vec<Option<(f64, f64)>> {
        let mut cols: Vec<Option<(f64, f64)>> = vec![None; n];
        let to = to.min(self.ops());
        if from >= to || n == 0 {
            return cols;
        }
        let mut put = |op: usize, high: f64, reserved: f64| {
            if let Some(k) = super::chart::column_of(from as u64, to as u64, n, op as u64) {
                let c = cols[k].get_or_insert((high, reserved));
                *c = (c.0.max(high), c.1.max(reserved));
            }
        };
        let coarse = self.envelope.width() as usize * n <= to - from;
        match &self.source {
            Source::File { stats, .. } if !coarse => {
                for i in from..to {
                    put(i, stats.allocated[i], stats.reserved[i]);
                }
            }
            Source::Live(live) if !coarse && from >= live.window_first => {
                let a = from - live.window_first;
                for (k, b) in live.bytes[a.min(live.bytes.len())..].iter().enumerate() {
                    put(from + k, b[0], b[2]);
                }
            }
            _ => {
                for b in self.envelope.between(from as u64, to as u64) {
                    // a bucket wider than a column fills every column it covers
                    let w = self.envelope.width();
                    let mut op = b.first.max(from as u64);
                    let step = ((to - from) / n).max(1) as u64;
                    while op < (b.first + w).min(to as u64) {
                        put(op as usize, b.high, b.reserved);
                        op += step;
                    }
                }
            }
        }
        cols
    }

    /// The latest iteration that ended (the one the screens show first).
    pub fn last_ended(&self) -> Option<usize> {
        let r = self.rows.iter().rev().find(|r| r.end_op.is_some())?;
        Some(r.number)
    }

    /// The latest iteration that ended with its phases and top ops worked out (a running job
    /// works them out at most every [`DETAIL_EVERY`]: the ops panel shows this one).
    pub fn last_detailed(&self) -> Option<usize> {
        match &self.source {
            Source::File { .. } => self.last_ended(),
            Source::Live(live) => live.details.back().map(|(n, _)| *n),
        }
    }
}

/// The op a marker is at, and whether it is a boundary (else a forward's start).
fn marker_at(m: &Marker) -> Option<(usize, bool)> {
    let op = usize::try_from(m.op_index).ok()?;
    match m.name.as_str() {
        "fw_start" => Some((op, false)),
        "fw_bw_boundary" => Some((op, true)),
        _ => None,
    }
}

fn name_at(names: &OpNames, op: usize) -> String {
    if op < names.len() {
        names.get(op).to_string()
    } else {
        String::new()
    }
}

/// The model's parts one op changes.
struct Ops<'m> {
    envelope: &'m mut Envelope,
    rows: &'m mut VecDeque<IterationRow>,
    rows_dropped: &'m mut usize,
    peak: &'m mut Option<PeakOp>,
    markers: &'m VecDeque<(usize, bool)>,
    live: &'m mut Live,
}

impl Ops<'_> {
    fn op(&mut self, op: LiveOp<'_>) {
        while self.live.pending.front().is_some_and(|&s| s <= op.index) {
            let s = self.live.pending.pop_front().unwrap_or(op.index);
            self.begin_iteration(s.min(op.index));
        }
        let [allocated, _, reserved] = op.bytes;
        self.envelope.push(allocated, reserved);
        if self.peak.as_ref().is_none_or(|p| allocated > p.bytes) {
            *self.peak = Some(PeakOp {
                bytes: allocated,
                op: op.index,
                name: op.name.to_string(),
            });
        }
        if let Some(row) = self.rows.back_mut().filter(|r| r.end_op.is_none()) {
            if allocated > row.peak || row.peak_name.is_empty() {
                row.peak = allocated;
                row.peak_op = op.index;
                row.peak_name.clear();
                row.peak_name.push_str(op.name);
            }
        }
        let live = &mut *self.live;
        if live.bytes.len() >= MOST_WINDOW_OPS {
            // an iteration longer than the window: keep its later half
            let from = live.window_first + live.bytes.len() / 2;
            live.cut_window(from);
        }
        live.names.push(op.name);
        live.bytes.push(op.bytes);
        live.last_allocated = allocated;
    }

    /// Iteration `rows.len() + 1` begins at op `first`: the one under way ends.
    fn begin_iteration(&mut self, first: usize) {
        let number = self.rows.back().map_or(1, |r| r.number + 1);
        let live = &mut *self.live;
        if let Some(prev) = self.rows.back_mut().filter(|r| r.end_op.is_none()) {
            prev.end_op = Some(first);
            let due = live.last_detail.is_none_or(|t| t.elapsed() >= DETAIL_EVERY);
            if due && prev.first_op >= live.window_first {
                let detail = live.detail(prev.first_op, first, self.markers);
                live.details.push_back((prev.number, detail));
                if live.details.len() > KEPT_DETAILS {
                    live.details.pop_front();
                }
                live.last_detail = Some(Instant::now());
            }
            // the window keeps the iteration that just ended and the new one
            live.cut_window(prev.first_op);
        }
        self.rows.push_back(IterationRow {
            number,
            first_op: first,
            end_op: None,
            start_allocated: live.last_allocated,
            peak: live.last_allocated,
            peak_op: first,
            peak_name: String::new(),
        });
        if self.rows.len() > MOST_ROWS {
            self.rows.pop_front();
            *self.rows_dropped += 1;
        }
    }
}

impl Live {
    /// Forget the window's ops before `from`.
    fn cut_window(&mut self, from: usize) {
        let drop = from.saturating_sub(self.window_first).min(self.bytes.len());
        if drop == 0 {
            return;
        }
        let mut names = OpNames::with_capacity(self.bytes.len() - drop, 0);
        for i in drop..self.bytes.len() {
            names.push(self.names.get(i));
        }
        self.names = names;
        self.bytes.drain(..drop);
        self.window_first += drop;
    }

    /// The details of ops `first..end` (in the window).
    fn detail(&self, first: usize, end: usize, markers: &VecDeque<(usize, bool)>) -> Detail {
        let (a, z) = (first - self.window_first, end - self.window_first);
        let z = z.min(self.bytes.len());
        let mut stats = TrackerStats::default();
        for i in a..z {
            stats.names.push(self.names.get(i));
        }
        let series = |k: usize| self.bytes[a..z].iter().map(|b| b[k]).collect();
        (stats.allocated, stats.active, stats.reserved) = (series(0), series(1), series(2));
        let markers: Vec<Marker> = (markers.iter())
            .filter(|(op, _)| (first..end).contains(op))
            .map(|&(op, boundary)| Marker {
                name: if boundary {
                    "fw_bw_boundary"
                } else {
                    "fw_start"
                }
                .into(),
                op_index: op as i64,
            })
            .collect();
        detail_of(stats, first, &markers)
    }
}

/// Iteration `row`'s details from the whole file's stats.
fn file_detail(stats: &TrackerStats, row: &IterationRow) -> Detail {
    let end = row.end_op.unwrap_or(stats.op_count()).min(stats.op_count());
    let (a, z) = (row.first_op.min(end), end);
    let mut part = TrackerStats::default();
    for i in a..z {
        part.names.push(stats.names.get(i));
    }
    part.allocated = stats.allocated[a..z].to_vec();
    part.active = stats.active[a..z].to_vec();
    part.reserved = stats.reserved[a..z].to_vec();
    detail_of(part, a, &stats.marker_events())
}

/// `summary`'s phases and top ops of one iteration's ops (`part`, which starts at op `first`
/// of the run; `markers` the run's, those in the iteration used).
fn detail_of(mut part: TrackerStats, first: usize, markers: &[Marker]) -> Detail {
    let n = part.op_count();
    let inside: Vec<Marker> = (markers.iter())
        .filter(|m| (first as i64..(first + n) as i64).contains(&m.op_index))
        .map(|m| Marker {
            name: m.name.clone(),
            op_index: m.op_index - first as i64,
        })
        .collect();
    part.op_index = Some(n as i64);
    part.record = Some(RecordInfo {
        marker_events: inside,
        iteration_starts: vec![0],
        ..RecordInfo::default()
    });
    let summary = tracker_summary(&part, 0);
    let mut phases = summary.phases;
    for p in &mut phases {
        p.first_op += first;
        p.end_op += first;
        p.peak_op_index += first;
    }
    let mut top = top_ops(&part, TOP_OPS);
    for t in &mut top {
        t.op_index += first;
    }
    Detail {
        phases,
        top_ops: top,
    }
}
