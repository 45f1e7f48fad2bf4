//! Leak suspects in an allocator snapshot: sites whose allocations still alive at the end were
//! made in every step after the first, so that their live bytes rose at every step boundary.
//! Steps end where the optimizer's step does: the `Optimizer.step#…` annotations PyTorch
//! records (their END). The first step is warm-up (weights, optimizer state); what the last,
//! unfinished one made is left out. An allocation made before the trace began has no time and
//! is left out too.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::model::snapshot::{Action, EventAux, Snapshot, TraceEvent, NO_TIME};
use crate::model::trace::TraceSink;

use super::sites::Sites;

/// The name PyTorch gives an optimizer's step (`Optimizer.step#AdamW.step`).
const STEP_ANNOTATION: &str = "Optimizer.step";

/// When each allocation live so far was made, per device (its `time_us`), as the trace goes
/// by: memory is that of the live allocations, not of the trace.
#[derive(Default)]
pub struct AllocTimes {
    devices: Vec<FxHashMap<u64, i64>>,
}

impl TraceSink for AllocTimes {
    fn event(&mut self, device: u32, e: &TraceEvent, _stream: i64, _aux: Option<&EventAux>) {
        let d = device as usize;
        match e.action {
            Action::Alloc if e.time_us != NO_TIME => {
                if self.devices.len() <= d {
                    self.devices.resize_with(d + 1, Default::default);
                }
                self.devices[d].insert(e.addr, e.time_us);
            }
            // (an allocation made without a time was never inserted: any entry at its address
            // is an older block's, gone)
            Action::Alloc | Action::FreeRequested => {
                if let Some(m) = self.devices.get_mut(d) {
                    m.remove(&e.addr);
                }
            }
            _ => {}
        }
    }

    fn restart(&mut self) {
        self.devices.clear();
    }
}

/// The `time_us` of each step's end on `device`, in order.
fn step_ends(snap: &Snapshot, device: u32) -> Vec<i64> {
    let mut ends: Vec<i64> = (snap.annotations.iter())
        .filter(|a| a.device.is_none_or(|d| d == device))
        .filter(|a| a.stage == "END" && a.name.starts_with(STEP_ANNOTATION))
        .filter_map(|a| a.time_us)
        .collect();
    ends.sort_unstable();
    ends
}

/// Whether any of `devices` has steps to compare (three step ends): only then are the trace's
/// events wanted again, so a capture without them costs nothing.
pub fn has_steps(snap: &Snapshot, devices: &[u32]) -> bool {
    devices.iter().any(|&d| step_ends(snap, d).len() >= 3)
}

/// A device's leak suspects.
#[derive(Debug, Serialize)]
pub struct Leaks {
    /// Steps checked: those between the first and the last step's end (at least two).
    pub steps: usize,
    /// What delimits the steps (`Optimizer.step annotations`).
    pub steps_from: &'static str,
    /// Sites whose allocations alive at the end were made in every step checked, most bytes
    /// first.
    pub suspects: Vec<LeakSuspect>,
}

/// A site that kept allocations from every step.
#[derive(Debug, Serialize)]
pub struct LeakSuspect {
    /// The site, `file:line:function` as `top` names it.
    pub site: String,
    /// Requested bytes of those allocations, over the steps checked, per step.
    pub bytes_per_step: f64,
    /// Allocations alive at the end that it made in the steps checked.
    pub allocations: usize,
}

/// The leak suspects of `device`, or None when the snapshot has fewer than three step ends
/// for it (or no trace times).
pub fn leak_suspects(snap: &Snapshot, device: u32, times: &AllocTimes) -> Option<Leaks> {
    let ends = step_ends(snap, device);
    if ends.len() < 3 {
        return None;
    }
    let made = times.devices.get(device as usize)?;
    let steps = ends.len() - 1;
    let mut sites = Sites::new(snap);
    // per site: which steps it kept allocations from, their bytes and count
    let mut by_site: FxHashMap<_, (Vec<bool>, u64, usize)> = FxHashMap::default();
    for s in snap.segments_on(device) {
        for b in s
            .blocks(&snap.blocks)
            .iter()
            .filter(|b| b.state.is_allocated())
        {
            let Some(&t) = made.get(&b.address) else {
                continue;
            };
            // step j (0-based) ran from ends[j] (excluded) to ends[j + 1] (included)
            if t <= ends[0] || t > ends[steps] {
                continue;
            }
            let j = ends.partition_point(|&e| e < t) - 1;
            let key = sites.site(b.alloc_stack(&snap.history));
            let entry = by_site
                .entry(key)
                .or_insert_with(|| (vec![false; steps], 0, 0));
            entry.0[j] = true;
            entry.1 += b.requested(&snap.history);
            entry.2 += 1;
        }
    }
    let mut suspects: Vec<LeakSuspect> = by_site
        .into_iter()
        .filter(|(_, (hit, _, _))| hit.iter().all(|&h| h))
        .map(|(key, (_, bytes, n))| LeakSuspect {
            site: sites.label(key, false),
            bytes_per_step: bytes as f64 / steps as f64,
            allocations: n,
        })
        .collect();
    suspects.sort_by(|a, b| {
        b.bytes_per_step
            .total_cmp(&a.bytes_per_step)
            .then_with(|| a.site.cmp(&b.site))
    });
    Some(Leaks {
        steps,
        steps_from: "Optimizer.step annotations",
        suspects,
    })
}
