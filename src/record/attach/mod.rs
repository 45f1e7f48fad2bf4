//! `memtrack attach PID`: record a running Python process that has imported torch, for a
//! while, then take the recording off again (docs/record.md, "attach").
//!
//! - [`target`]: the checks made before the process is touched.
//! - [`inject`]: placing one line of Python as a pending call, through ptrace.
//!
//! The line loads the agent that `record` uses (written into a private folder, with a
//! 0600 `attach.json` saying where the journal and the command's socket are: nothing of it
//! is on a command line) and starts the in-process recording (`attach.py` in the agent). The
//! records go to a journal beside the output as under `record`; this command holds a socket
//! the agent connects to, says stop on it at the end of the window (or closes it, when it
//! dies), and then writes the stats file from the journal as `record --recover` does.

pub mod connection;
mod dump;
pub mod inject;
mod leftovers;
pub mod target;

use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::journal::Journal;
use super::{agent, finalize, signals, Backend, Observer};
use crate::error::{Error, Result};
use connection::{Connection, Poll};
use target::alive;

pub struct Options {
    pub pid: u32,
    pub output: PathBuf,
    /// How long to record; None: until Ctrl-C (or the process ends).
    pub duration: Option<Duration>,
    pub backend: Backend,
    pub observer: Observer,
    /// How long the process's main thread has to run the pending call.
    pub start_timeout: Duration,
    /// CUDA: the allocator's history for the window, and a snapshot at its end.
    pub snapshot: bool,
    pub max_snapshot_entries: usize,
    /// CUDA: a snapshot and the allocator's counters now, without recording.
    pub dump: bool,
}

/// The code that runs in the process first (python/memtrack/_bootstrap/attach.py).
const BOOT: &str = include_str!("../../../python/memtrack/_bootstrap/attach.py");
/// How long the agent may take to take everything off once told to.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// How the window ended.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    Duration,
    Interrupted,
    /// Every process ended during the window (its exit handler said so, or it vanished).
    TargetsExited,
}

/// A process that started recording.
struct Attached {
    pid: u32,
    conn: Connection,
    /// Seconds into the window when it ended, where it did.
    ended: Option<f64>,
}

/// A path beside the output that the process is given in its settings (JSON, whose strings
/// are UTF-8).
fn utf8<'a>(path: &'a Path, output: &Path) -> Result<&'a str> {
    path.to_str().ok_or_else(|| {
        Error::Usage(format!(
            "attach: -o {}: the process is told the paths beside the output as UTF-8 text, \
             and this one's folder name is not UTF-8: write the output into a folder named in \
             UTF-8",
            crate::quote::path(output)
        ))
    })
}

/// Attach, record, detach, write the file; the exit code. A torchrun launcher's PID attaches
/// to each of its ranks (one file per rank, as `record` names them).
pub fn run(o: &Options) -> Result<i32> {
    if o.output.as_os_str() == "-" {
        return Err(Error::Usage(
            "attach: -o - is not possible: attach writes a stats file; give a file name".into(),
        ));
    }
    let refused = |why: String| Error::Unavailable(format!("attach: {why}"));
    let pids = target::processes_to_attach(o.pid).map_err(refused)?;
    if pids != [o.pid] {
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        eprintln!(
            "memtrack: process {} is a torchrun launcher: attaching to its ranks' processes {}",
            o.pid,
            list.join(", ")
        );
    }
    let targets = (pids.iter().map(|&p| target::inspect(p)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(refused)?;
    signals::install();
    leftovers::sweep(&std::env::temp_dir());
    let prefix = super::snapshot_prefix(&o.output);
    let prefix = utf8(&prefix, &o.output)?;
    let mut settings = serde_json::json!({
        "backend": o.backend.name(),
        "observer": o.observer.name(),
        "any_torch": std::env::var("MEMTRACK_ANY_TORCH").ok(),
        // how long a call that lands inside `import torch` waits for its end
        "start_timeout": o.start_timeout.as_secs_f64(),
        "snapshot": o.snapshot.then(|| serde_json::json!({
            "prefix": prefix,
            "entries": o.max_snapshot_entries,
        })),
    });
    if o.dump {
        settings["dump"] = serde_json::json!(prefix);
        let (_tmp, conns) = connect(o, &pids, &targets, settings).map_err(refused)?;
        return Ok(dump::report(&pids, conns));
    }
    let journal = super::new_journal(&o.output)?;
    let spool = std::path::absolute(journal.path()).unwrap_or_else(|_| journal.path().into());
    match utf8(&spool, &o.output) {
        Ok(spool) => settings["spool"] = serde_json::json!(spool),
        Err(e) => {
            journal.remove();
            return Err(e);
        }
    }
    let fail = |why: String| {
        journal.remove();
        Err(Error::Unavailable(format!("attach: {why}")))
    };
    // (the private folder holds the agent's files: it lives until the detach)
    let (_tmp, conns) = match connect(o, &pids, &targets, settings) {
        Ok(c) => c,
        Err(why) => return fail(why),
    };
    let mut attached: Vec<Attached> = Vec::new();
    let mut refusals: Vec<String> = Vec::new();
    for mut conn in conns {
        let pid = conn.process(&pids);
        // taking stock of parameters and optimizer state walks the heap: allow it time
        match conn.first_answer(pid, Duration::from_secs(120)) {
            Some(m) if m.get("started").is_some() => {
                let started = &m["started"];
                let exe = targets.iter().find(|t| t.pid == pid).map(|t| &t.exe);
                let window = match o.duration {
                    Some(d) => format!("for {} s", d.as_secs_f64()),
                    None => "until Ctrl-C".into(),
                };
                eprintln!(
                    "memtrack: recording process {pid} ({}, torch {}, {} backend) {window}; iterations under way at the attach are partial",
                    exe.map_or_else(|| "?".into(), |e| crate::quote::path(e).into_owned()),
                    started["torch"].as_str().unwrap_or("?"),
                    started["backend"].as_str().unwrap_or("?"),
                );
                if o.snapshot && started["backend"] != "cuda" {
                    eprintln!(
                        "memtrack: --snapshot: process {pid} records on the {} backend: no allocator snapshot",
                        started["backend"].as_str().unwrap_or("?")
                    );
                }
                attached.push(Attached {
                    pid,
                    conn,
                    ended: None,
                });
            }
            Some(m) if m.get("error").is_some() => refusals.push(format!(
                "process {pid} cannot be recorded: {}; nothing was installed, it runs on as it was",
                m["error"].as_str().unwrap_or("?")
            )),
            _ => refusals.push(format!(
                "process {pid} did not say whether it started recording; if it did, it takes \
                 the recording off by itself now that this connection is closed"
            )),
        }
    }
    if attached.is_empty() {
        return fail(refusals.join("; "));
    }
    for why in &refusals {
        eprintln!("memtrack: {why}");
    }
    let began = Instant::now();
    let ending = wait_window(&mut attached, o, &journal, began);
    if ending == Ending::Interrupted {
        eprintln!(
            "memtrack: interrupted after {:.1} s: detaching (again to stop waiting)",
            began.elapsed().as_secs_f64()
        );
    }
    let mut notes: Vec<String> = Vec::new();
    for a in attached.iter_mut().filter(|a| a.ended.is_none()) {
        a.conn.say_stop();
    }
    for a in &mut attached {
        if let Some(at) = a.ended {
            notes.push(format!(
                "process {} ended {at:.1} s into the window; the file holds what was recorded until then",
                a.pid
            ));
            continue;
        }
        let pid = a.pid;
        let bye = a.conn.next_message(STOP_TIMEOUT, || {
            signals::take().interrupts() > 0 || !alive(pid)
        });
        match bye {
            Some(m) if m["stopped"] == "detached" => {
                eprintln!("memtrack: detached from process {pid}: it runs on unrecorded")
            }
            Some(m) if m["stopped"] == "exit" => {
                notes.push(format!("process {pid} ended while detaching"))
            }
            _ if !alive(pid) => notes.push(format!("process {pid} ended while detaching")),
            _ => eprintln!(
                "memtrack: process {pid} has not run Python code since it was told to detach; \
                 it detaches at its next bytecode (this connection is closed); the file holds \
                 what was recorded until now"
            ),
        }
    }
    drop(attached);
    journal.adopt();
    let report = finalize::finalize(&journal, &o.output, o.pid, None, None, None)?;
    let mut code = if refusals.is_empty() { 0 } else { 2 };
    for note in &notes {
        eprintln!("memtrack: {note}");
        code = 2;
    }
    if report.recorded == 0 || report.written.is_empty() {
        eprintln!("memtrack: nothing recorded from process {}", o.pid);
        code = 2;
    }
    if report.complete {
        journal.remove();
    } else {
        eprintln!(
            "memtrack: the recording is kept in {}; `memtrack record --recover {}` writes the stats file from it",
            crate::quote::path(journal.path()),
            crate::quote::path(journal.path())
        );
        code = 2;
    }
    if report.stopped_early {
        code = 2;
    }
    Ok(code)
}

/// Place the pending call in each process and wait for each to connect back: the private
/// folder (the agent's files, kept until the detach) and the connections; or why not, every
/// process left as it was.
fn connect(
    o: &Options,
    pids: &[u32],
    targets: &[target::Target],
    mut settings: serde_json::Value,
) -> std::result::Result<(tempfile::TempDir, Vec<Connection>), String> {
    let io = |path: &Path, e: std::io::Error| format!("{}: {e}", crate::quote::path(path));
    let tmp = leftovers::private_dir().map_err(|e| io(&std::env::temp_dir(), e))?;
    let agent_dir = tmp.path().join("agent");
    agent::write_to(&agent_dir).map_err(|e| io(&agent_dir, e))?;
    let boot = tmp.path().join("boot.py");
    write_private(&boot, BOOT.as_bytes()).map_err(|e| io(&boot, e))?;
    let socket = tmp.path().join("ctl");
    let listener = UnixListener::bind(&socket).map_err(|e| io(&socket, e))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| io(&socket, e))?;
    listener.set_nonblocking(true).map_err(|e| io(&socket, e))?;
    let config = tmp.path().join("attach.json");
    settings["socket"] = socket.display().to_string().into();
    write_private(&config, settings.to_string().as_bytes()).map_err(|e| io(&config, e))?;
    let line = |page: u64| {
        format!(
            "(lambda p,a: __import__(\"os\").path.isfile(p) and exec(compile(open(p,\"rb\").read(),p,\"exec\"),{{\"__name__\":\"_memtrack_attach_boot\",\"_file\":p,\"_page\":a}}))({},{page})",
            py_str(&boot)
        )
    };
    // (a process given the line before another failed finds no boot file when it runs it:
    // the private folder goes with this function)
    for t in targets {
        if let Err(e) = inject::inject(t.pid, &t.symbols, line) {
            return Err(match e {
                inject::InjectError::Permission(e) => target::ptrace_denied(t.pid, &e),
                inject::InjectError::Gone => {
                    format!("process {} ended before attach could start", t.pid)
                }
                inject::InjectError::Other(why) => {
                    format!("process {}: {why}; the process is as it was", t.pid)
                }
            });
        }
    }
    // each pending call runs when its main thread next runs Python code
    let mut conns: Vec<Connection> = Vec::new();
    let waiting = Instant::now();
    while conns.len() < targets.len() {
        let left = o.start_timeout.saturating_sub(waiting.elapsed());
        match accept_within(&listener, left) {
            Ok(stream) => conns.push(Connection::new(stream)),
            Err(waited) => {
                // what runs later finds no config and no socket: it does nothing; one that
                // connected takes the recording off when its connection closes
                drop(conns);
                drop(listener);
                let _ = std::fs::remove_file(&config);
                let _ = std::fs::remove_file(&socket);
                let _ = std::fs::remove_file(&boot);
                return Err(not_started(o, pids, waited));
            }
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(&socket);
    Ok((tmp, conns))
}

/// Why the processes' pending calls did not all connect within the start timeout.
fn not_started(o: &Options, pids: &[u32], waited: Waited) -> String {
    let list = |pids: &mut dyn Iterator<Item = &u32>| {
        pids.map(u32::to_string).collect::<Vec<_>>().join(", ")
    };
    let gone = list(&mut pids.iter().filter(|&&p| !alive(p)));
    let (which, whose) = match pids {
        [only] => (
            format!("process {only} is"),
            format!("process {only}'s main thread"),
        ),
        _ => {
            let all = list(&mut pids.iter());
            (
                format!("processes {all} are"),
                format!("a main thread of processes {all}"),
            )
        }
    };
    let stopped: Vec<&u32> = pids.iter().filter(|&&p| target::stopped(p)).collect();
    if !gone.is_empty() {
        format!("process {gone} ended before recording began")
    } else if let [&pid, ..] = stopped[..] {
        // stopped after it was looked at
        target::stopped_refusal(pid, &target::comm(pid))
    } else if waited == Waited::Interrupted {
        format!("interrupted before recording began; {which} as it was")
    } else {
        format!(
            "{whose} ran no Python code within {} s (busy in one long call, or waiting); the \
             queued call does nothing when it runs: {which} as it was. Try again, or wait \
             longer with --start-timeout",
            o.start_timeout.as_secs()
        )
    }
}

/// Wait out the window: its duration, Ctrl-C, or the end of every process.
fn wait_window(
    attached: &mut [Attached],
    o: &Options,
    journal: &Journal,
    began: Instant,
) -> Ending {
    loop {
        if o.duration.is_some_and(|d| began.elapsed() >= d) {
            return Ending::Duration;
        }
        if signals::take().interrupts() > 0 {
            return Ending::Interrupted;
        }
        let live = attached.iter().filter(|a| a.ended.is_none()).count().max(1);
        let wait = Duration::from_millis(50) / live as u32;
        for a in attached.iter_mut().filter(|a| a.ended.is_none()) {
            let ended = match a.conn.poll(wait) {
                Poll::Closed => true,
                Poll::Message(m) => m.get("stopped").is_some(),
                Poll::Nothing => false,
            };
            if ended || !alive(a.pid) {
                a.ended = Some(began.elapsed().as_secs_f64());
            }
        }
        if attached.iter().all(|a| a.ended.is_some()) {
            return Ending::TargetsExited;
        }
        // hold each new spool file open: what the process wrote is read even if it is removed
        journal.adopt();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waited {
    TimedOut,
    Interrupted,
}

fn accept_within(
    listener: &UnixListener,
    limit: Duration,
) -> std::result::Result<UnixStream, Waited> {
    let start = Instant::now();
    while start.elapsed() < limit {
        match listener.accept() {
            Ok((s, _)) => return Ok(s),
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Err(Waited::TimedOut),
        }
        // Ctrl-C while waiting: nothing started yet; the caller says so
        if signals::take().interrupts() > 0 {
            return Err(Waited::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(Waited::TimedOut)
}

/// Written fresh and exclusively, 0600, never through a link.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)
}

/// A Python string literal of a path (any bytes, as escapes).
fn py_str(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut s = String::from("__import__(\"os\").fsdecode(b\"");
    for &b in p.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/._-".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s.push_str("\")");
    s
}
