//! Per-module memory, as PyTorch's `MemTracker` breaks it down: bytes by category on each
//! device, snapshotted at each module state, kept for every iteration.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

/// MemTracker's `_MemRefType`, in its order.
pub const CATEGORIES: [&str; 7] = [
    "Parameter",
    "Buffer",
    "Gradient",
    "Activation",
    "Temp",
    "Optstate",
    "Other",
];

/// MemTracker's `_ModState`. The discriminants are the agent's state codes (docs/record.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModState {
    /// Just before the module's forward runs.
    PreForward = 0,
    /// Just after its forward returns.
    PostForward = 1,
    /// The highest memory while its forward ran.
    PeakForward = 2,
    /// Just before its backward runs.
    PreBackward = 3,
    /// Just after its backward finishes.
    PostBackward = 4,
    /// The highest memory while its backward ran.
    PeakBackward = 5,
    /// Before its forward is re-run by activation checkpointing (in the backward).
    PreForwardAc = 6,
    /// After that activation-checkpointing re-run.
    PostForwardAc = 7,
}

impl ModState {
    /// Display order: a module's life, forward then backward, recomputation last.
    pub const ALL: [ModState; 8] = [
        ModState::PreForward,
        ModState::PostForward,
        ModState::PeakForward,
        ModState::PreBackward,
        ModState::PostBackward,
        ModState::PeakBackward,
        ModState::PreForwardAc,
        ModState::PostForwardAc,
    ];

    /// MemTracker's name for the state (`_ModState.value`).
    pub fn name(self) -> &'static str {
        match self {
            ModState::PreForward => "Pre-Forward",
            ModState::PostForward => "Post-Forward",
            ModState::PeakForward => "Peak-Forward",
            ModState::PreBackward => "Pre-Backward",
            ModState::PostBackward => "Post-Backward",
            ModState::PeakBackward => "Peak-Backward",
            ModState::PreForwardAc => "Pre-Forward-AC",
            ModState::PostForwardAc => "Post-Forward-AC",
        }
    }

    /// The state MemTracker's enum value `code` stands for (`None` when it is none of them).
    pub fn from_code(code: i64) -> Option<ModState> {
        ModState::ALL.into_iter().find(|s| *s as i64 == code)
    }

    /// From MemTracker's name, case-insensitively (`peak-forward`, `Peak-Forward`).
    pub fn from_name(name: &str) -> Option<ModState> {
        ModState::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
    }
}

impl Serialize for ModState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Bytes by category on one device, and their total: one entry of a MemTracker snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceBytes {
    /// `cpu`, `cuda:0`, …
    pub device: String,
    /// In [`CATEGORIES`] order.
    pub by_category: [i64; 7],
    /// The sum of `by_category`, in bytes.
    pub total: i64,
}

impl Serialize for DeviceBytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(CATEGORIES.len() + 1))?;
        for (c, b) in CATEGORIES.iter().zip(self.by_category) {
            m.serialize_entry(c, &b)?;
        }
        m.serialize_entry("Total", &self.total)?;
        m.end()
    }
}

/// Memory by device at one moment (MemTracker's `Dict[torch.device, Dict[str, int]]`); only
/// devices with tracked memory appear.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleSnapshot(pub Vec<DeviceBytes>);

impl ModuleSnapshot {
    /// The bytes of every device together.
    pub fn total(&self) -> i64 {
        self.0.iter().map(|d| d.total).sum()
    }
}

impl Serialize for ModuleSnapshot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for d in &self.0 {
            m.serialize_entry(&d.device, d)?;
        }
        m.end()
    }
}

/// The snapshots of one state, one per call of the module (`# 1`, `# 2`, … in MemTracker).
#[derive(Clone, Debug, Serialize)]
pub struct StateSnapshots {
    /// The state these snapshots were taken in.
    pub state: ModState,
    /// One snapshot per call of the module, in call order.
    pub calls: Vec<ModuleSnapshot>,
}

/// One module in one iteration: MemTracker's `_ModMemStats`.
#[derive(Clone, Debug, Serialize)]
pub struct ModuleStats {
    /// ModTracker's name: the root module's class name, then attribute names (`MLP.blocks.0`).
    pub fqn: String,
    /// Bytes of the module's own parameters (MemTracker's `parameter_mem`).
    pub parameter_bytes: i64,
    /// Bytes of its buffers.
    pub buffer_bytes: i64,
    /// Bytes of the tensors passed to its forward.
    pub input_bytes: i64,
    /// Bytes of the tensors its forward returned.
    pub output_bytes: i64,
    /// In the order the states first occurred.
    pub states: Vec<StateSnapshots>,
}

impl ModuleStats {
    /// Depth as MemTracker counts it: `MLP` is 1, `MLP.blocks` 2.
    pub fn depth(&self) -> usize {
        self.fqn.matches('.').count() + 1
    }

    /// The snapshots of state `s`, if the module reached it.
    pub fn state(&self, s: ModState) -> Option<&StateSnapshots> {
        self.states.iter().find(|x| x.state == s)
    }

    /// The highest total among a state's calls (peak states have one call per module call).
    pub fn max_total(&self, s: ModState) -> Option<i64> {
        self.state(s)
            .and_then(|x| x.calls.iter().map(ModuleSnapshot::total).max())
    }
}

/// The modules of one training iteration: from a top-level module's forward to the next one's.
#[derive(Clone, Debug, Serialize)]
pub struct IterationModules {
    /// 1-based.
    pub iteration: usize,
    /// The op index the iteration starts at.
    pub first_op: usize,
    /// Modules in the order they were first called.
    pub modules: Vec<ModuleStats>,
    /// Memory by category at the iteration's highest total.
    pub peak: ModuleSnapshot,
}
