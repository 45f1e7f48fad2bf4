//! Computations over the model: no I/O, no formatting.

pub mod address_map;
pub mod allocator;
pub mod annotation_usage;
pub mod caching_allocator;
pub mod consistency;
pub mod cycles;
pub mod decimate;
pub mod diff;
pub mod groups;
pub mod growth;
pub mod leaks;
pub mod memviz;
pub mod modules;
pub mod moment;
pub mod profile_diff;
pub mod profile_summary;
pub mod ranks;
pub mod rewind;
pub mod segments;
pub mod simulate;
pub mod sites;
pub mod snapshot_summary;
pub mod stacked;
pub mod summary;
pub mod timeline;
pub mod trace_listing;
