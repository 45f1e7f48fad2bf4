//! Domain types, independent of any file format.

pub mod snapshot;
pub mod tracker;
pub mod units;

pub use snapshot::Snapshot;
pub use tracker::{Marker, OpNames, RecordInfo, Series, TrackerStats};
pub use units::{format_bytes, Units};
