//! Peaks: each running module's peak states and the iteration's and the process's peak
//! snapshots, raised after each op that grew a total (MemTracker's `_update_peak_stats`).

use crate::model::ModState;

use super::fields::{set_dev, Snap, TOTAL};
use super::state::Replay;

impl Replay {
    /// MemTracker's `_update_peak_stats`, run after each op (only when a total grew: otherwise
    /// no peak can be exceeded).
    pub(super) fn update_peaks(&mut self, bw: bool) {
        let state = if bw {
            ModState::PeakBackward
        } else {
            ModState::PeakForward
        };
        if let Some(it) = self.iter.as_mut() {
            // a module running in any thread (the others' stacks are kept aside)
            let running = self.parents.iter().chain(self.threads.other_stacks());
            for &(name, _) in running {
                let Some(idxs) = it.by_name.get(&name) else {
                    continue;
                };
                for &mi in idxs {
                    let m = &mut it.modules[mi];
                    let Some(k) = m.states.iter().position(|(s, _)| *s == state) else {
                        continue;
                    };
                    for &(dev, row) in &self.curr {
                        let lp = m.local_peak.iter_mut().find(|(d, _)| *d == dev);
                        let higher = match lp {
                            Some((_, p)) if *p < row[TOTAL] => {
                                *p = row[TOTAL];
                                true
                            }
                            Some(_) => false,
                            None if row[TOTAL] > 0 => {
                                m.local_peak.push((dev, row[TOTAL]));
                                true
                            }
                            None => false,
                        };
                        if higher {
                            if let Some(last) = m.states[k].1.last_mut() {
                                set_dev(last, dev, row);
                            }
                        }
                    }
                }
            }
            raise_peak(&mut it.peak, &self.curr);
        }
        raise_peak(&mut self.peak, &self.curr);
    }
}

/// MemTracker's global peak: per device, the snapshot at its highest total.
pub(super) fn raise_peak(peak: &mut Snap, curr: &Snap) {
    for &(dev, row) in curr {
        let higher = match peak.iter().find(|(d, _)| *d == dev) {
            Some((_, p)) => p[TOTAL] < row[TOTAL],
            None => row[TOTAL] > 0,
        };
        if higher {
            set_dev(peak, dev, row);
        }
    }
}
