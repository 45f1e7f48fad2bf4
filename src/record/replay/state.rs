//! `Replay`, one process's stream as it is decoded, and `Note`, what a process may say
//! instead of recording. The files of `replay/` each work on part of `Replay` (`impl Replay`
//! blocks); the types of its fields are `fields.rs`'s, so that this file and theirs import
//! one way.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value as Json;

use crate::model::{Cycle, IterationModules, Marker};

use super::estimated::Estimated;
use super::fields::{Iter, Op, Pushed, Retaining, Snap, Storage, Threads};

/// Something a process said that is not a recording: why it did not record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// The interpreter has no torch to import.
    NoTorch { python: String },
    /// torch is installed but the program never imported it.
    TorchNotImported { argv: Vec<String> },
    /// `--backend cuda` where torch sees no CUDA: the agent stopped the program (exit 2).
    CudaUnavailable,
    /// A torch outside the versions the agent supports: the agent stopped the program
    /// (exit 2). `supported` is the agent's range, as it says it.
    TorchUnsupported { torch: String, supported: String },
}

#[derive(Default)]
pub(super) struct Replay {
    pub(super) hello: Option<Json>,
    pub(super) cuda: bool,
    pub(super) op_names: Vec<Option<String>>,
    pub(super) names: Vec<Option<String>>,
    pub(super) ops: Vec<Op>,
    pub(super) allocated: Vec<f64>,
    pub(super) active: Vec<f64>,
    pub(super) reserved: Vec<f64>,
    pub(super) storages: HashMap<i64, Storage>,
    pub(super) curr: Snap,
    /// A total grew since the last op: peaks may need updating.
    pub(super) dirty: bool,
    /// ModTracker's `parents` (without "Global"): name id, and which hook pushed it.
    pub(super) parents: Vec<(u32, Pushed)>,
    pub(super) optimizer: Option<u32>,
    pub(super) iter: Option<Iter>,
    pub(super) iterations: Vec<IterationModules>,
    pub(super) peak: Snap,
    pub(super) markers: Vec<Marker>,
    /// The op index where each iteration began: the first fw_start, then each ITER.
    pub(super) iteration_starts: Vec<i64>,
    pub(super) device_name: Option<String>,
    pub(super) device_total: Option<u64>,
    pub(super) exception: Option<String>,
    pub(super) exception_at: Option<(String, i64)>,
    pub(super) oom: bool,
    pub(super) oom_op_index: Option<i64>,
    pub(super) ended: Option<String>,
    pub(super) said_bye: bool,
    pub(super) memory_stats: BTreeMap<String, i64>,
    pub(super) snapshot_paths: Vec<String>,
    pub(super) agent_errors: Vec<String>,
    pub(super) note: Option<Note>,
    pub(super) device_index: Option<i64>,
    pub(super) device_uuid: Option<String>,
    pub(super) memory_stats_oom: BTreeMap<String, i64>,
    /// Collections that found cycles, by the agent's id: (ops when reported, the graph).
    pub(super) cycles: Vec<(i64, usize, Cycle)>,
    pub(super) time_marks: Vec<(u64, usize)>,
    /// The `compile` part of `bye`: dynamo's counters.
    pub(super) compile: Option<Json>,
    /// Tensors noted (NOTE): (why, category) -> how many, each in its latest category.
    pub(super) unmeasured: BTreeMap<(usize, usize), i64>,
    /// Where the records stopped making sense (a damaged spool): what was found, at which
    /// slot; everything before it is kept.
    pub(super) damage: Option<String>,
    /// The spool slot the current batch of records starts at (to say where damage was found).
    pub(super) slot_base: usize,
    /// What stays alive across iterations (`retained`).
    pub(super) retained: Retaining,
    /// `memtrack estimate`'s run (backend `estimate`): its device log and facts.
    pub(super) estimated: Option<Estimated>,
    /// The threads: whose records come now, the others' module stacks, each one's counts.
    pub(super) threads: Threads,
}
