use crate::cli::AttachArgs;
use crate::error::Result;
use crate::record::attach::{self, Options};

/// Records the process for the window, detaches, writes the stats file; exits 0, or 2 when
/// the process ended during the window or nothing could be written.
pub fn run(a: AttachArgs) -> Result<()> {
    let code = attach::run(&Options {
        pid: a.pid,
        output: a.output,
        duration: a.duration,
        backend: super::backend(a.backend),
        observer: super::observer(a.observer),
        start_timeout: a.start_timeout,
        snapshot: a.snapshot,
        max_snapshot_entries: a.max_snapshot_entries,
        dump: a.dump,
    })?;
    std::process::exit(code)
}
