use crate::cli::RecordArgs;
use crate::error::Result;
use crate::record::{self, Options};

/// Runs the program, writes the stats, then exits with the program's own exit code.
pub fn run(a: RecordArgs) -> Result<()> {
    if let Some(dir) = &a.recover {
        // a journal `estimate` left has its device modelled as the estimate does
        let model: &'static dyn record::DeviceModel = &crate::estimate::ALLOCATOR_MODEL;
        return record::recover(dir, a.output.as_deref(), Some(model));
    }
    let code = record::run(&Options {
        output: a.output.unwrap_or_else(|| "memtrack.pkl".into()),
        backend: super::backend(a.backend),
        observer: super::observer(a.observer),
        snapshot: a.snapshot,
        max_snapshot_entries: a.max_snapshot_entries,
        cycles: a.cycles,
        device_interval: std::time::Duration::from_millis(a.device_interval),
        command: a.command,
        device_model: None,
    })?;
    std::process::exit(code)
}
