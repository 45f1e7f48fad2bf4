//! Computations over the model: no I/O, no formatting.

pub mod allocator;
pub mod cycles;
pub mod decimate;
pub mod modules;
pub mod summary;
