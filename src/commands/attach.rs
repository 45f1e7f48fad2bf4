use crate::cli::{AttachArgs, BackendArg, ObserverArg};
use crate::error::Result;
use crate::record::attach::{self, Options};
use crate::record::{Backend, Observer};

/// Records the process for the window, detaches, writes the stats file; exits 0, or 2 when
/// the process ended during the window or nothing could be written.
pub fn run(a: AttachArgs) -> Result<()> {
    let code = attach::run(&Options {
        pid: a.pid,
        output: a.output,
        duration: a.duration,
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
        start_timeout: a.start_timeout,
    })?;
    std::process::exit(code)
}
