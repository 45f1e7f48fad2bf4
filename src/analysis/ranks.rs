//! `summary` of several snapshots, one per rank: each file's figures side by side, and the
//! file that stands out.

use serde::Serialize;

use crate::model::ranks::{DeviceFigures, RankFigures};

use super::snapshot_summary::SnapshotSummary;

/// How far from the median peak reserved a file must be to be named the outlier.
pub const OUTLIER_SHARE: f64 = 0.10;

/// A snapshot summary's figures, for the table of ranks (`file`: the path as given).
pub fn figures(s: &SnapshotSummary, file: &str) -> RankFigures {
    let devices = s
        .devices
        .iter()
        .map(|d| {
            let peak_allocated = d.peak_allocated.map(|p| p.bytes);
            let at_peak = d.reserved_at_peak_allocated_bytes;
            DeviceFigures {
                device: d.device,
                trace_entries: d.trace_entries,
                peak_allocated_bytes: peak_allocated,
                peak_reserved_bytes: d.peak_reserved.map(|p| p.bytes),
                reserved_at_peak_allocated_bytes: at_peak,
                fragmentation_at_peak: match (peak_allocated, at_peak) {
                    (Some(a), Some(r)) if r > 0 => Some(1.0 - a as f64 / r as f64),
                    _ => None,
                },
                allocated_bytes: d.allocated_bytes,
                reserved_bytes: d.reserved_bytes,
                external_fragmentation: d.external_fragmentation,
                ooms: d.ooms.len(),
                first_oom_requested_bytes: d.ooms.first().map(|o| o.requested_bytes),
            }
        })
        .collect();
    RankFigures {
        file: file.to_string(),
        devices,
    }
}

/// Several snapshots' figures, and which one stands out.
#[derive(Debug, Serialize)]
pub struct RankTable {
    /// JSON tag, always `"snapshot_ranks"`.
    pub kind: &'static str,
    /// Every file's figures, in the order given.
    pub files: Vec<RankFigures>,
    /// The median over every file's devices of the peak reserved (reserved at capture where a
    /// device has no trace); None when no file has a device.
    pub median_peak_reserved_bytes: Option<f64>,
    /// The device furthest from that median, when it is at least [`OUTLIER_SHARE`] away.
    pub outlier: Option<Outlier>,
}

/// The file whose peak reserved is furthest from the median.
#[derive(Debug, Serialize)]
pub struct Outlier {
    /// The file, as in `files`.
    pub file: String,
    /// Its device.
    pub device: u32,
    /// Its peak reserved (reserved at capture without a trace).
    pub peak_reserved_bytes: i64,
    /// Whether that is the trace's peak (false: the bytes at capture, the file has no trace).
    pub from_trace: bool,
    /// `peak / median - 1`: 0.25 is 25% above the median, -0.5 half of it.
    pub from_median: f64,
}

/// The table of `files`, in their order.
pub fn rank_table(files: Vec<RankFigures>) -> RankTable {
    let reserved: Vec<(&RankFigures, &DeviceFigures, i64)> = files
        .iter()
        .flat_map(|f| {
            f.devices
                .iter()
                .map(move |d| (f, d, d.reserved_or_capture().0))
        })
        .collect();
    let median = median(reserved.iter().map(|r| r.2).collect());
    let outlier = median.filter(|&m| m > 0.0).and_then(|m| {
        let away = |v: i64| v as f64 / m - 1.0;
        // the first of equals, so the answer does not depend on the order threads finish in
        let (f, d, v) = reserved
            .iter()
            .fold(None, |best: Option<&(_, _, i64)>, r| match best {
                Some(b) if away(b.2).abs() >= away(r.2).abs() => Some(b),
                _ => Some(r),
            })?;
        (away(*v).abs() >= OUTLIER_SHARE && reserved.len() > 1).then(|| Outlier {
            file: f.file.clone(),
            device: d.device,
            peak_reserved_bytes: *v,
            from_trace: d.peak_reserved_bytes.is_some(),
            from_median: away(*v),
        })
    });
    RankTable {
        kind: "snapshot_ranks",
        median_peak_reserved_bytes: median,
        outlier,
        files,
    }
}

/// The median (the mean of the middle two for an even count).
fn median(mut v: Vec<i64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] as f64 + v[n / 2] as f64) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, reserved: i64) -> RankFigures {
        RankFigures {
            file: name.into(),
            devices: vec![DeviceFigures {
                device: 0,
                trace_entries: 1,
                peak_allocated_bytes: Some(reserved / 2),
                peak_reserved_bytes: Some(reserved),
                reserved_at_peak_allocated_bytes: Some(reserved),
                fragmentation_at_peak: Some(0.5),
                allocated_bytes: 0,
                reserved_bytes: 0,
                external_fragmentation: None,
                ooms: 0,
                first_oom_requested_bytes: None,
            }],
        }
    }

    #[test]
    fn the_outlier_is_the_furthest_from_the_median() {
        let t = rank_table(vec![
            file("a", 100),
            file("b", 104),
            file("c", 60),
            file("d", 102),
        ]);
        assert_eq!(t.median_peak_reserved_bytes, Some(101.0));
        let o = t.outlier.expect("c is 40% below");
        assert_eq!(o.file, "c");
        assert!((o.from_median - (60.0 / 101.0 - 1.0)).abs() < 1e-12);
    }

    #[test]
    fn files_within_the_share_have_no_outlier() {
        let t = rank_table(vec![file("a", 100), file("b", 105), file("c", 96)]);
        assert!(t.outlier.is_none());
        assert!(rank_table(vec![file("a", 100)]).outlier.is_none());
    }
}
