//! `memtrack record`: run a program with the Python agent injected, journal what every
//! process of it sends, and write one stats file per recorded process (docs/record.md).
//!
//! - [`agent`]: the embedded Python, written to a private folder first on `PYTHONPATH`.
//! - [`journal`]: the private folder beside the output that holds what processes send.
//! - [`server`]: the Unix socket (each connection's bytes to the journal as they arrive).
//! - [`signals`]: Ctrl-C and friends while the child runs.
//! - [`replay`]: the agent's stream → op samples, module breakdown, peaks.
//! - [`finalize`]: journal → stats files, named per rank.

pub mod agent;
pub mod attach;
pub mod finalize;
pub mod journal;
pub mod protocol;
pub mod replay;
pub mod sampler;
pub mod server;
pub mod signals;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::time::Duration;

use journal::Journal;

use crate::error::{Error, Result};

/// Which memory the per-op samples count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// CUDA when `torch.cuda.is_available()`, else CPU.
    Auto,
    /// The CUDA caching allocator's counters.
    Cuda,
    /// Live tensor storages, counted as MemTracker does.
    Cpu,
    /// CUDA as `memtrack estimate` models it: meta tensors for the GPU's (docs/estimate.md).
    Estimate,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Cuda => "cuda",
            Backend::Cpu => "cpu",
            Backend::Estimate => "estimate",
        }
    }
}

/// What sees each operator in the recorded processes (docs/record.md, "Observers").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observer {
    /// The compiled observer without CUDA on torch 2.9 on, else the dispatch mode.
    Auto,
    /// The agent's TorchDispatchMode.
    Python,
    /// The agent's RecordFunction callback, built once per torch.
    Compiled,
}

impl Observer {
    /// As MEMTRACK_OBSERVER names it for the agent.
    pub fn name(self) -> &'static str {
        match self {
            Observer::Auto => "auto",
            Observer::Python => "python",
            Observer::Compiled => "compiled",
        }
    }
}

pub use replay::{DeviceEvent, DeviceLog, DeviceModel};

pub struct Options {
    pub output: PathBuf,
    pub backend: Backend,
    pub observer: Observer,
    pub snapshot: bool,
    pub max_snapshot_entries: usize,
    /// Watch the garbage collector for cycles holding tensors.
    pub cycles: bool,
    /// Between driver-level samples (NVML); zero: none.
    pub device_interval: Duration,
    pub command: Vec<OsString>,
    /// For backend `estimate`: the model of the device the program runs as if on.
    pub device_model: Option<&'static dyn DeviceModel>,
}

/// How long the collector waits for silent connections after the program ended.
const QUIET: Duration = Duration::from_secs(2);

/// A fresh journal beside `output` (`Journal::create`); the error names the folder.
fn new_journal(output: &Path) -> Result<Arc<Journal>> {
    let journal = Journal::create(output).map_err(|e| {
        let folder = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Error::output(folder, e)
    })?;
    Ok(Arc::new(journal))
}

/// What a run did: the exit code `record` should end with, and the files written.
pub struct Outcome {
    pub code: i32,
    pub written: Vec<PathBuf>,
    /// Which of them is the file of the process started (the others: processes it started).
    pub program: Option<PathBuf>,
}

/// Run the program, record it, write the stats; the exit code `record` should end with.
pub fn run(o: &Options) -> Result<i32> {
    run_for_files(o).map(|out| out.code)
}

/// `run`, saying which files were written too.
pub fn run_for_files(o: &Options) -> Result<Outcome> {
    let Some(program) = o.command.first() else {
        return Err(Error::Usage(
            "record: no command given; usage: memtrack record [-o run.pkl] -- python train.py"
                .into(),
        ));
    };
    if o.output.as_os_str() == "-" {
        return Err(Error::Usage(
            "record: -o - is not possible: record writes one file per process (NAME.rank0.pkl, …); give a file name".into(),
        ));
    }
    // the agent and the socket: whoever may change them runs code in the program
    let tmp =
        agent::private_dir("memtrack-").map_err(|e| Error::output(&std::env::temp_dir(), e))?;
    let agent_dir = tmp.path().join("agent");
    agent::write_to(&agent_dir).map_err(|e| Error::output(&agent_dir, e))?;
    let socket = tmp.path().join("sock");
    let journal = new_journal(&o.output)?;
    let mut server =
        server::Server::start(&socket, journal.clone()).map_err(|e| Error::output(&socket, e))?;
    signals::install();

    let mut cmd = Command::new(program);
    cmd.args(&o.command[1..]);
    let mut pythonpath = OsString::from(&agent_dir);
    if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        pythonpath.push(":");
        pythonpath.push(old);
    }
    let spool = std::path::absolute(journal.path()).unwrap_or_else(|_| journal.path().into());
    cmd.env("PYTHONPATH", pythonpath)
        .env("MEMTRACK_SOCKET", &socket)
        .env("MEMTRACK_SPOOL", &spool)
        .env("MEMTRACK_BACKEND", o.backend.name())
        .env("MEMTRACK_OBSERVER", o.observer.name());
    if o.cycles {
        cmd.env("MEMTRACK_CYCLES", "1");
    }
    if o.snapshot {
        cmd.env("MEMTRACK_SNAPSHOT", snapshot_prefix(&o.output))
            .env(
                "MEMTRACK_MAX_SNAPSHOT_ENTRIES",
                o.max_snapshot_entries.to_string(),
            );
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            journal.remove();
            eprintln!(
                "memtrack: cannot run {}: {e}",
                crate::quote::path(Path::new(program))
            );
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Ok(Outcome {
                code,
                written: Vec::new(),
                program: None,
            });
        }
    };
    let pid = child.id();
    let sampler = sampler::Sampler::start(pid, o.device_interval);

    let mut interrupts = 0;
    let mut terms = 0;
    let status: Option<ExitStatus> = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(e) => {
                eprintln!("memtrack: cannot wait for the program: {e}");
                break None;
            }
        }
        let p = signals::take();
        if p.int_sent > 0 {
            signals::send(pid, libc::SIGINT);
        }
        if p.term > 0 {
            signals::send(pid, libc::SIGTERM);
        }
        if p.hup > 0 {
            signals::send(pid, libc::SIGHUP);
        }
        let before = interrupts + terms;
        interrupts += p.interrupts();
        terms += p.term;
        if interrupts >= 2 || terms >= 2 {
            eprintln!("memtrack: interrupted again: writing what was received and exiting");
            break None;
        }
        if before == 0 && interrupts + terms > 0 {
            eprintln!(
                "memtrack: interrupted: waiting for the program to stop (again to stop waiting)"
            );
        }
        // hold each new spool file open: a journal removed under us is still read
        journal.adopt();
        std::thread::sleep(Duration::from_millis(20));
    };

    server.drain(QUIET, || signals::take().interrupts() > 0);
    for e in server.errors() {
        eprintln!("memtrack: {e}");
    }
    let code = match status {
        Some(st) => exit_code(st),
        None => 130,
    };
    let samples = sampler.map(sampler::Sampler::finish);
    let report = finalize::finalize(
        &journal,
        &o.output,
        pid,
        status,
        samples.as_ref(),
        o.device_model,
    )?;
    let mut code = code;
    if report.complete {
        journal.remove();
    } else {
        if journal.path().is_dir() {
            eprintln!(
                "memtrack: the recording is kept in {}; `memtrack record --recover {} [-o ELSEWHERE]` writes the stats files from it",
                crate::quote::path(journal.path()),
                crate::quote::path(journal.path())
            );
        }
        if report.written.len() < report.recorded && code == 0 {
            code = 2; // the program succeeded, the recording's output did not
        }
    }
    if report.stopped_early && code == 0 {
        code = 2; // the program succeeded, its recording did not go to the end
    }
    if o.snapshot && !report.backends.is_empty() && report.backends.iter().all(|b| b != "cuda") {
        eprintln!("memtrack: --snapshot: the program ran on the CPU backend; allocator snapshots need CUDA");
    }
    if report.recorded == 0 {
        eprintln!("memtrack: {}", report.nothing_recorded_reason(program));
        if code == 0 {
            code = 2; // the program succeeded, but there is no file: a script must not take it for one
        }
    }
    Ok(Outcome {
        code,
        written: report.written,
        program: report.program,
    })
}

/// `record --recover DIR [-o OUT]`: the stats files from a journal a `record` left behind
/// (the agents' spools are complete up to their last op), named as that run would have, or
/// after `output`; an estimate's through `device_model`.
pub fn recover(
    dir: &Path,
    output: Option<&Path>,
    device_model: Option<&'static dyn DeviceModel>,
) -> Result<()> {
    let Some(output) = output
        .map(Path::to_path_buf)
        .or_else(|| journal::output_of(dir))
    else {
        return Err(Error::input(
            dir,
            "not a memtrack journal: expected a folder named NAME.journal-XXXXXXXX, as `record` leaves next to its output",
        ));
    };
    let journal = Journal::open(dir).map_err(|why| Error::input(dir, why))?;
    let report = finalize::finalize(&journal, &output, 0, None, None, device_model)?;
    if report.recorded == 0 {
        return Err(Error::input(
            dir,
            "no recording in this journal (no process of the program recorded anything)",
        ));
    }
    if report.written.is_empty() {
        return Err(Error::input(
            dir,
            "the recording is there but no stats file could be written (said above): the journal is kept; free some space, or write elsewhere with -o",
        ));
    }
    if !report.complete {
        // what could be read is written; the journal stays for another look
        return Err(Error::input(
            dir,
            "not all of the journal could be read or written (said above): the stats files hold what was saved, and the journal is kept",
        ));
    }
    journal.remove();
    Ok(())
}

/// The child's exit code, or 128 + the signal that killed it, as shells report it.
pub fn exit_code(st: ExitStatus) -> i32 {
    match (st.code(), st.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}

/// `run.pkl` → `/abs/dir/run`: the agent appends `.rank0.exit.pickle` and the like.
fn snapshot_prefix(output: &Path) -> PathBuf {
    let abs = std::path::absolute(output).unwrap_or_else(|_| output.to_path_buf());
    let stem = abs
        .file_stem()
        .map_or_else(|| "memtrack".into(), |s| s.to_string_lossy().into_owned());
    abs.with_file_name(stem)
}
