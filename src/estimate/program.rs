//! Running the program for an estimate: `record`'s collector with the agent's `estimate`
//! backend, the device passed in the environment, and the values the program read.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::gpus::{self, Gpu};
use crate::error::{Error, Result};
use crate::record::{self, Backend, Observer, Options};

/// A place where the program read a value a tensor does not have here (`.item()`, `bool()`,
/// `print(loss)`, `.cpu()`): it got zeros instead, and what depends on it is not estimated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueRead {
    pub file: String,
    pub line: u32,
    pub what: String,
    pub count: u64,
}

/// What running the program gave: its exit code, and the reads it made.
pub struct Run {
    pub code: i32,
    pub reads: Vec<ValueRead>,
}

/// Run `command` as if on `gpu` (`named`: a device of the table, whose CUDA context the
/// allocator cannot use), writing the stats file to `output`.
pub fn run(command: &[std::ffi::OsString], gpu: &Gpu, named: bool, output: &Path) -> Result<Run> {
    let usable = gpus::usable_bytes(gpu, named);
    let reads_file = tempfile::Builder::new()
        .prefix("memtrack-estimate-reads")
        .suffix(".json")
        .tempfile()
        .map_err(|e| Error::output(&std::env::temp_dir(), e))?;
    let reads_path: PathBuf = reads_file.path().to_path_buf();
    // the child inherits these; nothing else of memtrack reads them
    std::env::set_var(
        "MEMTRACK_ESTIMATE_GPU",
        format!(
            "{};{};{}.{};{usable}",
            gpu.name, gpu.total_bytes, gpu.capability.0, gpu.capability.1
        ),
    );
    std::env::set_var("MEMTRACK_ESTIMATE_READS", &reads_path);
    let code = record::run(&Options {
        output: output.to_path_buf(),
        backend: Backend::Estimate,
        observer: Observer::Python,
        snapshot: false,
        max_snapshot_entries: 0,
        cycles: false,
        device_interval: std::time::Duration::ZERO,
        command: command.to_vec(),
    })?;
    let reads = std::fs::read(&reads_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    Ok(Run { code, reads })
}
