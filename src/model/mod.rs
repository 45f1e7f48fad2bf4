//! Domain types, independent of any file format.

pub mod modules;
pub mod snapshot;
pub mod tracker;
pub mod units;

pub use modules::{
    DeviceBytes, IterationModules, ModState, ModuleSnapshot, ModuleStats, CATEGORIES,
};
pub use snapshot::Snapshot;
pub use tracker::{ExitInfo, Marker, OpNames, RecordInfo, Series, TrackerStats};
pub use units::{format_bytes, Units};
