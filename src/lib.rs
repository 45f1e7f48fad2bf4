//! memtrack: a profiler for PyTorch GPU memory.
//!
//! Data flows one way: bytes → [`pickle`] values → [`formats`] → [`model`] → [`analysis`] →
//! [`render`]; [`view`] serves analyses to a browser; [`commands`] wire them, one file per subcommand.

pub mod analysis;
pub mod cli;
pub mod commands;
pub mod device;
mod direct_write;
pub mod error;
pub mod estimate;
pub mod format_thread;
pub mod formats;
pub mod inputs;
pub mod memory;
pub mod model;
pub mod output;
pub mod pickle;
pub mod progress;
pub mod quote;
pub mod record;
pub mod render;
pub mod view;
