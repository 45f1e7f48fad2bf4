//! `diff` of two torch.profiler traces: each device's peak of allocated bytes, and the ops
//! whose allocations (bytes allocated within them, self) changed most.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::diff::{gate, Gate, Threshold};
use super::profile_summary::{DeviceMemory, Within};

#[derive(Debug, Serialize)]
pub struct PeakChange {
    pub device: String,
    pub before: i64,
    pub after: i64,
}

#[derive(Debug, Serialize)]
pub struct OpChange {
    pub name: String,
    pub device: String,
    pub before: i64,
    pub after: i64,
}

#[derive(Debug, Serialize)]
pub struct ProfileDiff {
    /// JSON tag, always `"profiler_trace_diff"`.
    pub kind: &'static str,
    /// Devices of either trace (one a trace lacks counts as 0 there).
    pub devices: Vec<PeakChange>,
    /// The `top` largest changes, by how much they changed.
    pub ops: Vec<OpChange>,
    /// The gate over the peaks summed over devices, when a threshold was given.
    pub gate: Option<Gate>,
}

pub fn profile_diff(
    before: (&[DeviceMemory], &[Within]),
    after: (&[DeviceMemory], &[Within]),
    top: usize,
    threshold: Option<Threshold>,
) -> ProfileDiff {
    let mut devices: Vec<PeakChange> = Vec::new();
    for (side, list) in [(0, before.0), (1, after.0)] {
        for d in list {
            let k = match devices.iter().position(|p| p.device == d.device) {
                Some(k) => k,
                None => {
                    devices.push(PeakChange {
                        device: d.device.clone(),
                        before: 0,
                        after: 0,
                    });
                    devices.len() - 1
                }
            };
            if side == 0 {
                devices[k].before = d.peak_allocated.bytes;
            } else {
                devices[k].after = d.peak_allocated.bytes;
            }
        }
    }
    devices.sort_by(|a, b| a.device.cmp(&b.device));
    let mut ops: FxHashMap<(String, String), (i64, i64)> = FxHashMap::default();
    for w in before.1 {
        ops.entry((w.name.clone(), w.device.clone())).or_default().0 += w.self_allocated;
    }
    for w in after.1 {
        ops.entry((w.name.clone(), w.device.clone())).or_default().1 += w.self_allocated;
    }
    let mut ops: Vec<OpChange> = ops
        .into_iter()
        .filter(|(_, (b, a))| a != b)
        .map(|((name, device), (b, a))| OpChange {
            name,
            device,
            before: b,
            after: a,
        })
        .collect();
    ops.sort_by(|x, y| {
        (y.after - y.before)
            .abs()
            .cmp(&(x.after - x.before).abs())
            .then_with(|| x.name.cmp(&y.name))
            .then_with(|| x.device.cmp(&y.device))
    });
    ops.truncate(top);
    let gate = threshold.map(|t| {
        let sum = |f: fn(&PeakChange) -> i64| devices.iter().map(f).sum::<i64>() as f64;
        gate(t, sum(|p| p.before), sum(|p| p.after))
    });
    ProfileDiff {
        kind: "profiler_trace_diff",
        devices,
        ops,
        gate,
    }
}
