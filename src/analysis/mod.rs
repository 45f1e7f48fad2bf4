//! Computations over the model: no I/O, no formatting.

pub mod decimate;
pub mod modules;
pub mod summary;
