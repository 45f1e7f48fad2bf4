//! Domain types, independent of any file format.

pub mod cycles;
pub mod gpu;
pub mod modules;
pub mod snapshot;
pub mod trace;
pub mod tracker;
pub mod units;

pub use cycles::{Cycle, CycleEdge, CycleNode, CycleTensor};
pub use modules::{
    DeviceBytes, IterationModules, ModState, ModuleSnapshot, ModuleStats, CATEGORIES,
};
pub use snapshot::Snapshot;
pub use tracker::{
    op_module, CompileInfo, CompiledRegion, DeviceSample, DeviceSeries, ExitInfo, Marker, OpNames,
    RecordInfo, Series, TrackerStats,
};
pub use units::{format_bytes, Units};

/// The file name of `memtrack record`'s Python agent: written so by `record`, seen so in the
/// stacks of snapshots taken under it.
pub const AGENT_FILE: &str = "_memtrack_agent.py";
