//! Domain types, independent of any file format.

pub mod cycles;
pub mod estimate;
pub mod frames;
pub mod gpu;
pub mod modules;
pub mod profile;
pub mod ranks;
pub mod snapshot;
pub mod trace;
pub mod tracker;
pub mod units;

pub use cycles::{Cycle, CycleEdge, CycleNode, CycleTensor};
pub use estimate::EstimateFacts;
pub use frames::{is_agent_file, is_hooks_inner_frame, path_ends_with, AGENT_PACKAGE};
pub use modules::{
    DeviceBytes, IterationModules, ModState, ModuleSnapshot, ModuleStats, CATEGORIES,
};
pub use snapshot::Snapshot;
pub use tracker::{
    op_module, Attached, CompileInfo, CompiledRegion, DeviceSample, DeviceSeries, ExitInfo, Marker,
    OpNames, RecordInfo, Retained, RetainedOp, Series, ThreadInfo, TrackerStats, Unmeasured,
};
pub use units::{format_bytes, thousands, Units};
