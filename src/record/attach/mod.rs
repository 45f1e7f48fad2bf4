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

pub mod inject;
pub mod target;

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::journal::Journal;
use super::{agent, finalize, signals, Backend, Observer};
use crate::error::{Error, Result};

pub struct Options {
    pub pid: u32,
    pub output: PathBuf,
    /// How long to record; None: until Ctrl-C (or the process ends).
    pub duration: Option<Duration>,
    pub backend: Backend,
    pub observer: Observer,
    /// How long the process's main thread has to run the pending call.
    pub start_timeout: Duration,
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
    /// The process ended during the window (its exit handler said so, or it vanished).
    TargetExited,
}

/// Attach, record, detach, write the file; the exit code.
pub fn run(o: &Options) -> Result<i32> {
    if o.output.as_os_str() == "-" {
        return Err(Error::Usage(
            "attach: -o - is not possible: attach writes a stats file; give a file name".into(),
        ));
    }
    let t = target::inspect(o.pid).map_err(|why| Error::Unavailable(format!("attach: {why}")))?;
    let tmp = agent::private_dir().map_err(|e| Error::output(&std::env::temp_dir(), e))?;
    let agent_dir = tmp.path().join("agent");
    agent::write_to(&agent_dir).map_err(|e| Error::output(&agent_dir, e))?;
    let boot = tmp.path().join("boot.py");
    write_private(&boot, BOOT.as_bytes()).map_err(|e| Error::output(&boot, e))?;
    let journal = super::new_journal(&o.output)?;
    let spool = std::path::absolute(journal.path()).unwrap_or_else(|_| journal.path().into());
    let socket = tmp.path().join("ctl");
    let listener = UnixListener::bind(&socket).map_err(|e| Error::output(&socket, e))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::output(&socket, e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::output(&socket, e))?;
    let config = tmp.path().join("attach.json");
    let settings = serde_json::json!({
        "socket": socket,
        "spool": spool,
        "backend": o.backend.name(),
        "observer": o.observer.name(),
        "any_torch": std::env::var("MEMTRACK_ANY_TORCH").ok(),
    });
    write_private(&config, settings.to_string().as_bytes())
        .map_err(|e| Error::output(&config, e))?;
    signals::install();

    let fail = |why: String| {
        journal.remove();
        Err(Error::Unavailable(format!("attach: {why}")))
    };
    let line = |page: u64| {
        format!(
            "(lambda p,a: __import__(\"os\").path.isfile(p) and exec(compile(open(p,\"rb\").read(),p,\"exec\"),{{\"__name__\":\"_memtrack_attach_boot\",\"_file\":p,\"_page\":a}}))({},{page})",
            py_str(&boot)
        )
    };
    if let Err(e) = inject::inject(o.pid, &t.symbols, line) {
        return fail(match e {
            inject::InjectError::Permission(e) => target::ptrace_denied(o.pid, &e),
            inject::InjectError::Gone => {
                format!("process {} ended before attach could start", o.pid)
            }
            inject::InjectError::Other(why) => {
                format!("process {}: {why}; the process is as it was", o.pid)
            }
        });
    }
    // the pending call runs when the main thread next runs Python code
    let accepted = accept_within(&listener, o.start_timeout);
    let Ok(stream) = accepted else {
        // what runs later finds no config and no socket: it does nothing
        drop(listener);
        let _ = std::fs::remove_file(&config);
        let _ = std::fs::remove_file(&socket);
        let _ = std::fs::remove_file(&boot);
        let why = if !alive(o.pid) {
            format!("process {} ended before recording began", o.pid)
        } else if accepted.is_err_and(|w| w == Waited::Interrupted) {
            format!(
                "interrupted before recording began; process {} is as it was",
                o.pid
            )
        } else {
            format!(
                "process {}'s main thread ran no Python code within {} s (busy in one long \
                 call, or waiting); the queued call does nothing when it runs: the process \
                 is as it was. Try again, or wait longer with --start-timeout",
                o.pid,
                o.start_timeout.as_secs()
            )
        };
        return fail(why);
    };
    drop(listener);
    let _ = std::fs::remove_file(&socket);
    let mut conn = Connection::new(stream);
    // taking stock of parameters and optimizer state walks the heap: allow it time
    let first = conn.next_message(Duration::from_secs(120), || !alive(o.pid));
    let started = match first {
        Some(m) if m.get("started").is_some() => m["started"].clone(),
        Some(m) if m.get("error").is_some() => {
            return fail(format!(
                "process {} cannot be recorded: {}; nothing was installed, it runs on as it was",
                o.pid,
                m["error"].as_str().unwrap_or("?")
            ))
        }
        _ => {
            return fail(format!(
                "process {} did not say whether it started recording; if it did, it takes the \
                 recording off by itself now that this connection is closed",
                o.pid
            ))
        }
    };
    let window = match o.duration {
        Some(d) => format!("for {} s", d.as_secs_f64()),
        None => "until Ctrl-C".into(),
    };
    eprintln!(
        "memtrack: recording process {} ({}, torch {}, {} backend) {window}; iterations under way at the attach are partial",
        o.pid,
        t.exe.display(),
        started["torch"].as_str().unwrap_or("?"),
        started["backend"].as_str().unwrap_or("?"),
    );
    let began = Instant::now();
    let ending = wait_window(&mut conn, o, &journal);
    let mut exited_note = None;
    match ending {
        Ending::TargetExited => {
            exited_note = Some(format!(
                "process {} ended {:.1} s into the window; the file holds what was recorded until then",
                o.pid,
                began.elapsed().as_secs_f64()
            ));
        }
        Ending::Duration | Ending::Interrupted => {
            if ending == Ending::Interrupted {
                eprintln!(
                    "memtrack: interrupted after {:.1} s: detaching (again to stop waiting)",
                    began.elapsed().as_secs_f64()
                );
            }
            conn.say_stop();
            let bye = conn.next_message(STOP_TIMEOUT, || {
                signals::take().interrupts() > 0 || !alive(o.pid)
            });
            match bye {
                Some(m) if m["stopped"] == "detached" => {
                    eprintln!(
                        "memtrack: detached from process {}: it runs on unrecorded",
                        o.pid
                    )
                }
                Some(m) if m["stopped"] == "exit" => {
                    exited_note = Some(format!("process {} ended while detaching", o.pid))
                }
                _ if !alive(o.pid) => {
                    exited_note = Some(format!("process {} ended while detaching", o.pid))
                }
                _ => eprintln!(
                    "memtrack: process {} has not run Python code since it was told to detach; \
                     it detaches at its next bytecode (this connection is closed); the file \
                     holds what was recorded until now",
                    o.pid
                ),
            }
        }
    }
    drop(conn);
    journal.adopt();
    let report = finalize::finalize(&journal, &o.output, o.pid, None, None)?;
    let mut code = 0;
    if let Some(note) = &exited_note {
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
            journal.path().display(),
            journal.path().display()
        );
        code = 2;
    }
    if report.stopped_early {
        code = 2;
    }
    Ok(code)
}

/// Wait out the window: its duration, Ctrl-C, or the process's end.
fn wait_window(conn: &mut Connection, o: &Options, journal: &Journal) -> Ending {
    let start = Instant::now();
    loop {
        if o.duration.is_some_and(|d| start.elapsed() >= d) {
            return Ending::Duration;
        }
        if signals::take().interrupts() > 0 {
            return Ending::Interrupted;
        }
        match conn.poll(Duration::from_millis(50)) {
            Poll::Closed => return Ending::TargetExited,
            Poll::Message(m) if m.get("stopped").is_some() => return Ending::TargetExited,
            _ => {}
        }
        if !alive(o.pid) {
            return Ending::TargetExited;
        }
        // hold each new spool file open: what the process wrote is read even if it is removed
        journal.adopt();
    }
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "PID (comm) STATE …": a zombie has ended
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
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

enum Poll {
    Nothing,
    Message(serde_json::Value),
    Closed,
}

/// The agent's socket: one JSON object a line, each at most 64 KiB.
struct Connection {
    stream: UnixStream,
    buf: Vec<u8>,
    closed: bool,
}

impl Connection {
    fn new(stream: UnixStream) -> Connection {
        let _ = stream.set_nonblocking(false);
        Connection {
            stream,
            buf: Vec::new(),
            closed: false,
        }
    }

    fn poll(&mut self, wait: Duration) -> Poll {
        if let Some(m) = self.take_line() {
            return m;
        }
        if self.closed {
            return Poll::Closed;
        }
        let _ = self.stream.set_read_timeout(Some(wait));
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) => self.closed = true,
            Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => self.closed = true,
        }
        if self.buf.len() > 1 << 16 {
            self.closed = true; // not what the agent sends
        }
        self.take_line().unwrap_or(if self.closed {
            Poll::Closed
        } else {
            Poll::Nothing
        })
    }

    fn take_line(&mut self) -> Option<Poll> {
        let end = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=end).collect();
        Some(match serde_json::from_slice(&line) {
            Ok(v) => Poll::Message(v),
            Err(_) => Poll::Nothing,
        })
    }

    /// The next message within `limit`, None at the end or when `give_up()` says so.
    fn next_message(
        &mut self,
        limit: Duration,
        give_up: impl Fn() -> bool,
    ) -> Option<serde_json::Value> {
        let start = Instant::now();
        while start.elapsed() < limit {
            match self.poll(Duration::from_millis(50)) {
                Poll::Message(m) => return Some(m),
                Poll::Closed => return None,
                Poll::Nothing => {}
            }
            if give_up() {
                return None;
            }
        }
        None
    }

    fn say_stop(&mut self) {
        let _ = self.stream.write_all(b"stop\n");
    }
}
