//! A run under `memtrack estimate` (backend `estimate`): the device storages' allocations and
//! frees in order, which the estimate's device model turns into allocated and reserved
//! (`record::DeviceModel`), and the facts the agent said of values it did not have
//! (`model::EstimateFacts`).

use std::collections::HashMap;

use serde_json::Value as Json;

use crate::model::estimate::{
    EstimateFacts, ProcessGroup, Stopped, Unwritten, UpperBound, ValueRead,
};
use crate::record::protocol::{
    MSG_ESTIMATE_BOUND, MSG_ESTIMATE_GROUP, MSG_ESTIMATE_READ, MSG_ESTIMATE_STOPPED,
    MSG_ESTIMATE_UNWRITTEN,
};

/// One storage of the estimated device appearing (`bytes` > 0, already rounded to 512 as
/// the allocator's blocks are) or dying (`bytes` 0), before the sample of op `op`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceEvent {
    pub op: u32,
    pub key: i64,
    pub bytes: u64,
}

/// What an estimated run's device model needs: the events in order, and the device message.
#[derive(Clone, Debug, Default)]
pub struct DeviceLog {
    pub events: Vec<DeviceEvent>,
    /// The program's `PYTORCH_CUDA_ALLOC_CONF`.
    pub alloc_conf: String,
    /// What the allocator may use of the device (None: all of it), NCCL's buffers aside.
    pub usable_bytes: Option<u64>,
    /// What NCCL's buffers take of it: the allowance for each process group that
    /// communicated.
    pub nccl_bytes: u64,
}

/// What turns an estimated run's device log into its allocated and reserved series (the
/// estimate's allocator model, `estimate::AllocatorModel`): record itself models no device.
/// Defined here, beside the log, so that `finalize.rs` and `record/mod.rs` both take it from
/// below them.
pub trait DeviceModel: Sync {
    fn fill(&self, stats: &mut crate::model::TrackerStats, log: &DeviceLog);
}

/// Distinct places kept of each kind: a program reading at more places than this is still
/// said to have read, at the places first met.
const MAX_PLACES: usize = 10_000;

/// One more of `key` in `list` (indexed by `index`): its count up, or a new entry `made`
/// while fewer than MAX_PLACES are kept.
fn count<K: std::hash::Hash + Eq, T>(
    index: &mut HashMap<K, usize>,
    list: &mut Vec<T>,
    key: K,
    counter: impl Fn(&mut T) -> &mut u64,
    made: impl FnOnce() -> T,
) {
    match index.get(&key) {
        Some(&i) => *counter(&mut list[i]) += 1,
        None if list.len() < MAX_PLACES => {
            index.insert(key, list.len());
            list.push(made());
        }
        None => {}
    }
}

/// The estimate's facts as the messages come: each place once, with its count.
#[derive(Default)]
pub(super) struct Estimated {
    pub log: DeviceLog,
    facts: EstimateFacts,
    reads: HashMap<(String, u32, String, bool), usize>,
    bounds: HashMap<(String, u32, String), usize>,
    unwritten: HashMap<(String, u32, String, String), usize>,
}

fn place(m: &Json) -> (String, u32, String) {
    (
        m["file"].as_str().unwrap_or("?").to_string(),
        m["line"].as_u64().unwrap_or(0).min(u32::MAX as u64) as u32,
        m["what"].as_str().unwrap_or("?").to_string(),
    )
}

impl Estimated {
    /// Take one of the estimate's messages; false if `m` is not one.
    pub fn message(&mut self, kind: &str, m: &Json) -> bool {
        let (file, line, what) = place(m);
        let f = &mut self.facts;
        match kind {
            MSG_ESTIMATE_READ => {
                let branch = m["branch"].as_bool().unwrap_or(false);
                let key = (file.clone(), line, what.clone(), branch);
                count(
                    &mut self.reads,
                    &mut f.reads,
                    key,
                    |r| &mut r.count,
                    || ValueRead {
                        file,
                        line,
                        what,
                        count: 1,
                        branch,
                    },
                );
            }
            MSG_ESTIMATE_BOUND => {
                let key = (file.clone(), line, what.clone());
                count(
                    &mut self.bounds,
                    &mut f.upper_bounds,
                    key,
                    |u| &mut u.count,
                    || UpperBound {
                        file,
                        line,
                        op: what,
                        count: 1,
                    },
                );
            }
            MSG_ESTIMATE_UNWRITTEN => {
                let path = m["path"].as_str().unwrap_or("?").to_string();
                let key = (file.clone(), line, what.clone(), path.clone());
                count(
                    &mut self.unwritten,
                    &mut f.unwritten,
                    key,
                    |u| &mut u.count,
                    || Unwritten {
                        file,
                        line,
                        what,
                        path,
                        count: 1,
                    },
                );
            }
            MSG_ESTIMATE_GROUP => {
                if f.process_groups.len() < MAX_PLACES {
                    f.process_groups.push(ProcessGroup {
                        name: m["name"].as_str().unwrap_or("?").to_string(),
                        size: m["size"].as_u64().unwrap_or(0),
                    });
                }
            }
            MSG_ESTIMATE_STOPPED => {
                f.stopped = Some(Stopped {
                    file,
                    line,
                    what,
                    count: m["count"].as_u64().unwrap_or(0),
                    limit: m["limit"].as_u64().unwrap_or(0),
                });
            }
            _ => return false,
        }
        true
    }

    /// The device's message: what the model needs of it.
    pub fn device(&mut self, m: &Json) {
        self.log.alloc_conf = m["alloc_conf"].as_str().unwrap_or("").to_string();
        self.log.usable_bytes = m["usable_bytes"].as_u64();
        self.facts.nccl_allowance_bytes = m["nccl_allowance"].as_u64().unwrap_or(0);
    }

    /// A device storage appeared (`bytes` > 0) or died (0) before the sample of op `op`.
    pub fn event(&mut self, op: usize, key: i64, bytes: i64) {
        self.log.events.push(DeviceEvent {
            op: op as u32,
            key,
            bytes: bytes.max(0) as u64,
        });
    }

    pub fn finish(mut self) -> (DeviceLog, EstimateFacts) {
        self.log.nccl_bytes = self.facts.nccl_bytes();
        (self.log, self.facts)
    }
}
