//! `summary` of several stats files of one job (`run.rank*.pkl`): a row per file, and how far
//! the ranks' peaks spread.

use serde::Serialize;

use super::iterations::argmax;
use super::summary::Peak;
use crate::model::{Series, TrackerStats};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::summary::tests::stats;

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
}
