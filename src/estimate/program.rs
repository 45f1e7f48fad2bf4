//! Running the program for an estimate: `record`'s collector with the agent's `estimate`
//! backend, the device passed in the environment, the allocator model live beside it
//! (`live`) and after it (`ALLOCATOR_MODEL`); a distributed job once per rank estimated,
//! with torchrun's environment for that rank (`launch`).

use std::path::{Path, PathBuf};

use super::gpus::{self, Gpu};
use super::launch::Job;
use super::live::LiveModel;
use crate::error::{Error, Result};
use crate::record::{self, Backend, Observer, Options};

/// How the run is done: the device, the job, and how often one unknown read deciding a
/// branch may repeat before the program is stopped.
pub struct Settings<'a> {
    pub gpu: &'a Gpu,
    /// A device of the table (its CUDA context is not the allocator's), not a bare size.
    pub named: bool,
    pub max_repeats: u64,
    pub job: &'a Job,
    /// The ranks to run (`[0]` for a program of one process).
    pub ranks: &'a [u32],
    /// For a distributed job: what NCCL's buffers are allowed on the device, for each
    /// process group that communicates.
    pub nccl_allowance: u64,
    /// What `torch.cuda.device_count()` answers in a program of one process (None: 1).
    pub devices: Option<u32>,
}

/// One rank's run: the program's exit code (128 + a signal that killed it) and the files
/// written, the program's own first (none where the program did not start, or never
/// imported torch).
pub struct RankRun {
    pub rank: Option<u32>,
    pub code: i32,
    pub files: Vec<PathBuf>,
}

/// Run the job as if on the settings' GPU, each rank once, writing the stats files after
/// `output` (`NAME.rankR.pkl` for a distributed job).
pub fn run(s: &Settings, output: &Path) -> Result<Vec<RankRun>> {
    let gpu = s.gpu;
    let usable = gpus::usable_bytes(gpu, s.named);
    // the child inherits these; nothing else of memtrack reads them
    std::env::set_var(
        "MEMTRACK_ESTIMATE_GPU",
        format!(
            "{};{};{}.{};{usable}",
            gpu.name, gpu.total_bytes, gpu.capability.0, gpu.capability.1
        ),
    );
    std::env::set_var("MEMTRACK_ESTIMATE_MAX_REPEATS", s.max_repeats.to_string());
    // a group of more than one rank takes it, also one a program starts itself (mp.spawn)
    std::env::set_var(
        "MEMTRACK_ESTIMATE_NCCL_ALLOWANCE",
        s.nccl_allowance.to_string(),
    );
    match s.devices {
        Some(n) => std::env::set_var("MEMTRACK_ESTIMATE_DEVICES", n.to_string()),
        None => std::env::remove_var("MEMTRACK_ESTIMATE_DEVICES"),
    }
    if s.job.distributed() {
        // the agent's fake process group, not whatever RANK a scheduler's environment has
        std::env::set_var("MEMTRACK_ESTIMATE_WORLD", s.job.world_size.to_string());
    } else {
        std::env::remove_var("MEMTRACK_ESTIMATE_WORLD");
    }
    let mut runs = Vec::with_capacity(s.ranks.len());
    for &rank in s.ranks {
        // each rank's questions about memory get a model of its own
        let model =
            LiveModel::start(usable).map_err(|e| Error::output(&std::env::temp_dir(), e))?;
        std::env::set_var("MEMTRACK_ESTIMATE_MODEL", model.socket());
        if s.job.distributed() {
            for (k, v) in s.job.env(rank) {
                std::env::set_var(k, v);
            }
        }
        let out = record::run_for_files(&Options {
            output: output.to_path_buf(),
            backend: Backend::Estimate,
            observer: Observer::Python,
            snapshot: false,
            max_snapshot_entries: 0,
            cycles: false,
            device_interval: std::time::Duration::ZERO,
            command: s.job.command.clone(),
            device_model: Some(&super::ALLOCATOR_MODEL),
        })?;
        // the program's own file first (the process started), then the files of processes it
        // started itself (mp.spawn's workers; DataLoader's workers write none)
        let mut files = out.written;
        files.sort_by_key(|p| Some(p) != out.program.as_ref());
        runs.push(RankRun {
            rank: s.job.distributed().then_some(rank),
            code: out.code,
            files,
        });
    }
    Ok(runs)
}
