//! A snapshot's figures for comparing the ranks of a job: what `summary` of several snapshots
//! tabulates, one row per file. Each file's `summary --format json` carries them (`figures`),
//! so the table can be rebuilt from those small outputs alone, written where the captures lie
//! (docs/snapshots.md, "Many ranks").

use serde::{Deserialize, Serialize};

/// One snapshot's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankFigures {
    /// The snapshot's path as given to the `summary` that read it.
    pub file: String,
    /// One entry per device summarized, in device order.
    pub devices: Vec<DeviceFigures>,
}

/// One device of a snapshot: its peaks from the trace, the state at capture, its OOMs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceFigures {
    /// Device index.
    pub device: u32,
    /// Events in the device's trace (0 without one: then the peaks are unknown).
    pub trace_entries: usize,
    /// The highest requested bytes allocated over the trace; None without a trace.
    pub peak_allocated_bytes: Option<i64>,
    /// The highest bytes held in segments over the trace; None without a trace.
    pub peak_reserved_bytes: Option<i64>,
    /// Bytes held in segments when allocated peaked; None without a trace.
    pub reserved_at_peak_allocated_bytes: Option<i64>,
    /// `1 - allocated / reserved` when allocated peaked: the share of the reserved bytes held
    /// in cached free blocks and rounding when the program needed the most; None without a
    /// trace or when nothing was reserved.
    pub fragmentation_at_peak: Option<f64>,
    /// Blocks in use by tensors at capture (rounded sizes).
    pub allocated_bytes: u64,
    /// Bytes held in segments at capture.
    pub reserved_bytes: u64,
    /// `1 - largest free block / free` at capture (the summary's external fragmentation).
    pub external_fragmentation: Option<f64>,
    /// `oom` events in the trace.
    pub ooms: usize,
    /// Bytes the first failed allocation asked for.
    pub first_oom_requested_bytes: Option<u64>,
}

impl DeviceFigures {
    /// The peak reserved when the trace gives one, else the reserved bytes at capture
    /// (`false`: not a peak, a lower bound of it).
    pub fn reserved_or_capture(&self) -> (i64, bool) {
        match self.peak_reserved_bytes {
            Some(p) => (p, true),
            None => (self.reserved_bytes as i64, false),
        }
    }

    /// The peak allocated when the trace gives one, else the allocated bytes at capture.
    pub fn allocated_or_capture(&self) -> (i64, bool) {
        match self.peak_allocated_bytes {
            Some(p) => (p, true),
            None => (self.allocated_bytes as i64, false),
        }
    }
}
