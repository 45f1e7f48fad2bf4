//! Running the program for an estimate: `record`'s collector with the agent's `estimate`
//! backend, the device passed in the environment, the allocator model live beside it
//! (`live`) and after it (`ALLOCATOR_MODEL`).

use std::path::Path;

use super::gpus::{self, Gpu};
use super::live::LiveModel;
use crate::error::{Error, Result};
use crate::record::{self, Backend, Observer, Options};

/// How the run is done: the device, and how often one unknown read deciding a branch may
/// repeat before the program is stopped.
pub struct Settings<'a> {
    pub gpu: &'a Gpu,
    /// A device of the table (its CUDA context is not the allocator's), not a bare size.
    pub named: bool,
    pub max_repeats: u64,
}

/// Run `command` as if on the settings' GPU, writing the stats file to `output`; the
/// program's exit code (128 + a signal that killed it).
pub fn run(command: &[std::ffi::OsString], s: &Settings, output: &Path) -> Result<i32> {
    let gpu = s.gpu;
    let usable = gpus::usable_bytes(gpu, s.named);
    let model = LiveModel::start(usable).map_err(|e| Error::output(&std::env::temp_dir(), e))?;
    // the child inherits these; nothing else of memtrack reads them
    std::env::set_var(
        "MEMTRACK_ESTIMATE_GPU",
        format!(
            "{};{};{}.{};{usable}",
            gpu.name, gpu.total_bytes, gpu.capability.0, gpu.capability.1
        ),
    );
    std::env::set_var("MEMTRACK_ESTIMATE_MODEL", model.socket());
    std::env::set_var("MEMTRACK_ESTIMATE_MAX_REPEATS", s.max_repeats.to_string());
    record::run(&Options {
        output: output.to_path_buf(),
        backend: Backend::Estimate,
        observer: Observer::Python,
        snapshot: false,
        max_snapshot_entries: 0,
        cycles: false,
        device_interval: std::time::Duration::ZERO,
        command: command.to_vec(),
        device_model: Some(&super::ALLOCATOR_MODEL),
    })
}
