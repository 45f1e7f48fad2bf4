//! The types of `Replay`'s fields (`state.rs`): byte rows by category and the
//! storages behind them, ops and the hooks that made modules active, the module tables of an
//! iteration, what is retained across iterations, the threads. They sit below both
//! `state.rs`, which holds them in `Replay`, and the files whose `impl Replay` works on them
//! (`bytes.rs`, `ops.rs`, `modules.rs`, `retained.rs`, `threads.rs`), so that no two of those
//! import each other.

use std::collections::{BTreeMap, HashMap};

use crate::model::{DeviceBytes, ModState, ModuleSnapshot, ThreadInfo};
use crate::record::protocol::{PUSH_BACKWARD, PUSH_FORWARD, PUSH_PASS_THROUGH, PUSH_RECOMPUTE};

// ---- bytes by category (`bytes.rs`) ----

/// Bytes by category (7) and total, on one device; devices are -1 (CPU) or a CUDA index.
pub(super) type Row = [i64; 8];
pub(super) const TOTAL: usize = 7;
/// MemTracker's `Dict[device, Dict[str, int]]`, devices in order.
pub(super) type Snap = Vec<(i32, Row)>;

pub(super) struct Storage {
    pub(super) cat: usize,
    pub(super) dev: i32,
    pub(super) bytes: i64,
    /// The op that made it: the ops recorded before its ADD (the op's sample follows it).
    pub(super) op: u32,
}

pub(super) fn set_dev(s: &mut Snap, dev: i32, row: Row) {
    match s.binary_search_by_key(&dev, |(d, _)| *d) {
        Ok(k) => s[k].1 = row,
        Err(k) => s.insert(k, (dev, row)),
    }
}

pub fn device_name(dev: i32) -> String {
    if dev < 0 {
        "cpu".to_string()
    } else {
        format!("cuda:{dev}")
    }
}

pub(super) fn snapshot(s: &Snap) -> ModuleSnapshot {
    ModuleSnapshot(
        s.iter()
            .map(|(dev, row)| {
                let mut by_category = [0i64; 7];
                by_category.copy_from_slice(&row[..7]);
                DeviceBytes {
                    device: device_name(*dev),
                    by_category,
                    total: row[TOTAL],
                }
            })
            .collect(),
    )
}

// ---- ops (`ops.rs`) ----

pub(super) const NO_NAME: u32 = u32::MAX;

#[derive(Clone, Copy)]
pub(super) struct Op {
    pub(super) fid: u32,
    pub(super) ctx: u32,
    pub(super) phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Forward,
    Backward,
    /// A forward run again in backward (activation checkpointing).
    Recompute,
    Step,
}

/// Which hook made a module active (PUSH's `how`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Pushed {
    Forward,
    Backward,
    /// In backward, by a module whose outputs are its inputs: it runs no autograd node, so
    /// no op is named after it (it stays active for MemTracker's peaks).
    PassThrough,
    /// Its forward, run in backward to recompute what activation checkpointing did not keep.
    Recompute,
}

impl Pushed {
    pub(super) fn from_code(code: i64) -> Pushed {
        match code {
            PUSH_BACKWARD => Pushed::Backward,
            PUSH_PASS_THROUGH => Pushed::PassThrough,
            PUSH_RECOMPUTE => Pushed::Recompute,
            _ => Pushed::Forward,
        }
    }
}

impl Phase {
    pub(super) fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Recompute => "recompute",
            Phase::Step => "step",
        }
    }
}

// ---- module tables (`modules.rs`) ----

pub(super) struct ModB {
    pub(super) fqn: u32,
    pub(super) parameter_bytes: i64,
    pub(super) buffer_bytes: i64,
    pub(super) input_bytes: i64,
    pub(super) output_bytes: i64,
    pub(super) states: Vec<(ModState, Vec<Snap>)>,
    pub(super) local_peak: Vec<(i32, i64)>,
}

impl ModB {
    pub(super) fn push(&mut self, state: ModState, snap: Snap) {
        match self.states.iter_mut().find(|(s, _)| *s == state) {
            Some((_, calls)) => calls.push(snap),
            None => self.states.push((state, vec![snap])),
        }
    }
}

pub(super) struct Iter {
    pub(super) first_op: usize,
    pub(super) modules: Vec<ModB>,
    pub(super) by_mk: HashMap<i64, usize>,
    pub(super) by_name: HashMap<u32, Vec<usize>>,
    pub(super) peak: Snap,
}

impl Iter {
    pub(super) fn new(first_op: usize, curr: &Snap) -> Iter {
        Iter {
            first_op,
            modules: Vec::new(),
            by_mk: HashMap::new(),
            by_name: HashMap::new(),
            peak: curr.clone(),
        }
    }
}

// ---- what stays alive across iterations (`retained.rs`) ----

#[derive(Default)]
pub(super) struct Retaining {
    /// The op index where iteration 1, 2, … started.
    pub(super) starts: Vec<usize>,
    /// Iterations checked.
    pub(super) checked: i64,
    /// (iteration, op index, category, bytes) of each storage found alive.
    pub(super) found: Vec<(u32, u32, usize, i64)>,
}

// ---- threads (`threads.rs`) ----

#[derive(Default)]
pub(super) struct Threads {
    /// The thread whose records come now (0: the main thread).
    pub(super) current: i64,
    /// The module stacks of the threads not current.
    pub(super) stacks: BTreeMap<i64, Vec<(u32, Pushed)>>,
    /// Per thread: name (from its `thread` message), ops, top-level forward calls.
    pub(super) counts: BTreeMap<i64, (Option<String>, i64, i64)>,
    /// (first op, thread) where the thread running ops changed.
    pub(super) runs: Vec<(i64, i64)>,
    /// Names of the threads running before recording began (`threads_before`).
    pub(super) before: Vec<String>,
}

impl Threads {
    /// An op (the `index`th) of the current thread.
    pub(super) fn op(&mut self, index: usize) {
        let t = self.current;
        if self.runs.last().map(|r| r.1) != Some(t) {
            self.runs.push((index as i64, t));
        }
        self.counts.entry(t).or_default().1 += 1;
    }

    /// A PUSH of the current thread (`how`), onto an `empty` stack or not.
    pub(super) fn pushed(&mut self, empty: bool, how: i64) {
        if empty && how == PUSH_FORWARD {
            self.counts.entry(self.current).or_default().2 += 1;
        }
    }

    pub(super) fn named(&mut self, id: i64, name: String) {
        self.counts.entry(id).or_default().0 = Some(name);
    }

    /// The modules running in the threads not current.
    pub(super) fn other_stacks(&self) -> impl Iterator<Item = &(u32, Pushed)> {
        self.stacks.values().flatten()
    }

    /// The file's `threads` and `thread_runs`: empty when the main thread ran every op.
    pub(super) fn finish(&mut self) -> (Vec<ThreadInfo>, Vec<(i64, i64)>) {
        if self.counts.keys().all(|&t| t == 0) {
            return (Vec::new(), Vec::new());
        }
        let threads = std::mem::take(&mut self.counts)
            .into_iter()
            .map(|(id, (name, ops, forward_calls))| ThreadInfo {
                id,
                name: name.unwrap_or_else(|| if id == 0 { "MainThread" } else { "?" }.to_string()),
                ops,
                forward_calls,
            })
            .collect();
        (threads, std::mem::take(&mut self.runs))
    }
}
