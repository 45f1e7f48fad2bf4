use crate::cli::{BackendArg, ObserverArg, RecordArgs};
use crate::error::Result;
use crate::record::{self, Backend, Observer, Options};

/// Runs the program, writes the stats, then exits with the program's own exit code.
pub fn run(a: RecordArgs) -> Result<()> {
    if let Some(dir) = &a.recover {
        return record::recover(dir, a.output.as_deref());
    }
    let code = record::run(&Options {
        output: a.output.unwrap_or_else(|| "memtrack.pkl".into()),
        backend: match a.backend {
            BackendArg::Auto => Backend::Auto,
            BackendArg::Cuda => Backend::Cuda,
            BackendArg::Cpu => Backend::Cpu,
        },
        observer: match a.observer {
            ObserverArg::Auto => Observer::Auto,
            ObserverArg::Python => Observer::Python,
            ObserverArg::Compiled => Observer::Compiled,
        },
        snapshot: a.snapshot,
        max_snapshot_entries: a.max_snapshot_entries,
        cycles: a.cycles,
        device_interval: std::time::Duration::from_millis(a.device_interval),
        command: a.command,
    })?;
    std::process::exit(code)
}
