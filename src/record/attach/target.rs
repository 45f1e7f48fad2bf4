//! What `attach` learns of a process before touching it: that it exists, is this user's, is
//! not traced already, runs Python with torch imported; and the words for why not.

use std::fs;
use std::path::{Path, PathBuf};

use super::inject::{self, Symbols};

/// A process that can be attached to.
pub struct Target {
    pub pid: u32,
    /// Its program (`/proc/PID/exe`).
    pub exe: PathBuf,
    /// Where Py_AddPendingCall, PyRun_SimpleString and mmap are in it.
    pub symbols: Symbols,
}

/// Why a process cannot be attached to: the message, said as is (exit 2).
pub type Refusal = String;

fn status_field(status: &str, key: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_string())
}

fn user_name(uid: u32) -> String {
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
        })
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// A process's command name (`/proc/PID/comm`), `?` when it cannot be read.
pub fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The processes an attach to `pid` records: `pid` itself, or where it is a torchrun
/// launcher (`torchrun`, `python -m torch.distributed.run` or `.launch`), which runs no model
/// of its own, its worker processes (its children), one per local rank.
pub fn processes_to_attach(pid: u32) -> Result<Vec<u32>, Refusal> {
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return Ok(vec![pid]); // inspect says why
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let launcher = args.iter().take(4).any(|a| {
        let base = a.rsplit(|&b| b == b'/').next().unwrap_or(a);
        *a == b"torch.distributed.run" || *a == b"torch.distributed.launch" || base == b"torchrun"
    });
    if !launcher {
        return Ok(vec![pid]);
    }
    let workers = children(pid);
    if workers.is_empty() {
        return Err(format!(
            "process {pid} is a torchrun launcher with no worker processes (yet, or any more): \
             attach when its ranks run"
        ));
    }
    Ok(workers)
}

/// The live processes whose parent is `pid`, in pid order.
fn children(pid: u32) -> Vec<u32> {
    let mut out: Vec<u32> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else {
                return false;
            };
            // "PID (comm) STATE PPID …": comm may hold spaces and parentheses
            let mut rest = stat
                .rsplit_once(')')
                .map_or("", |(_, r)| r)
                .split_whitespace();
            let state = rest.next().unwrap_or("Z");
            rest.next().and_then(|pp| pp.parse::<u32>().ok()) == Some(pid) && state != "Z"
        })
        .collect();
    out.sort_unstable();
    out
}

/// Look at `pid` without stopping it.
pub fn inspect(pid: u32) -> Result<Target, Refusal> {
    if pid == std::process::id() {
        return Err(format!("process {pid} is this memtrack"));
    }
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|_| format!("no process {pid} (nothing in /proc/{pid})"))?;
    let name = comm(pid);
    // (`t`, stopped by a tracer, is said below with the tracer)
    match state(pid) {
        Some('Z' | 'X') => return Err(format!("process {pid} ({name}) has exited (a zombie)")),
        Some('T') => return Err(stopped_refusal(pid, &name)),
        _ => {}
    }
    let uid: u32 = status_field(&status, "Uid:")
        .and_then(|u| u.split_whitespace().next()?.parse().ok())
        .unwrap_or(u32::MAX);
    // SAFETY: geteuid cannot fail
    let me = unsafe { libc::geteuid() };
    if uid != me {
        return Err(format!(
            "process {pid} ({name}) belongs to {}, memtrack runs as {}: the files attach \
             gives the process must be its user's alone, so attach as that user \
             (sudo -u {} memtrack attach {pid})",
            user_name(uid),
            user_name(me),
            user_name(uid)
        ));
    }
    let tracer: u32 = status_field(&status, "TracerPid:")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    if tracer != 0 {
        return Err(format!(
            "process {pid} ({name}) is being traced by process {tracer} ({}): a debugger, or \
             another `memtrack attach` placing its code; a process has one tracer at a time",
            comm(tracer)
        ));
    }
    // a process that made itself undumpable shows its program and maps only to a tracer
    // allowed to trace it: ptrace's rules, ptrace's words
    let unreadable = |what: &str, e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            denied(&format!("cannot read {what} of process {pid} ({name})"), &e)
        } else {
            format!("process {pid} ({name}): {what} cannot be read: {e}")
        }
    };
    let exe =
        fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| unreadable("the program", e))?;
    let files = inject::mapped_files(pid).map_err(|e| unreadable("the memory maps", e))?;
    let base = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let python_files: Vec<PathBuf> = files
        .iter()
        .filter(|f| *f == &exe || base(f).starts_with("libpython"))
        .cloned()
        .collect();
    let add = inject::find_symbol(pid, &python_files, "Py_AddPendingCall");
    let run = inject::find_symbol(pid, &python_files, "PyRun_SimpleString");
    let (Some(add_pending_call), Some(run_simple_string)) = (add, run) else {
        return Err(format!(
            "process {pid} ({}) is not a Python process: neither its program nor a libpython \
             it loaded has Py_AddPendingCall and PyRun_SimpleString",
            crate::quote::path(&exe)
        ));
    };
    let has_torch = files.iter().any(|f| {
        let b = base(f);
        b.starts_with("libtorch_python") || b.starts_with("libtorch_cpu")
    });
    if !has_torch {
        return Err(format!(
            "process {pid} ({}) is Python without torch: it has not imported torch (no \
             libtorch in its memory maps); attach records a program that uses torch",
            crate::quote::path(&exe)
        ));
    }
    let libc_files: Vec<PathBuf> = files
        .iter()
        .filter(|f| base(f).starts_with("libc.so") || base(f).starts_with("libc-"))
        .cloned()
        .collect();
    let mmap = inject::find_symbol(pid, &libc_files, "mmap")
        .ok_or_else(|| format!("process {pid} ({name}): no mmap in its C library (not glibc?)"))?;
    Ok(Target {
        pid,
        exe,
        symbols: Symbols {
            mmap,
            add_pending_call,
            run_simple_string,
        },
    })
}

/// Why ptrace said no, and how to allow it.
pub fn ptrace_denied(pid: u32, e: &std::io::Error) -> String {
    denied(&format!("cannot trace process {pid}"), e)
}

/// `what` (something ptrace's rules forbid) failed with `e`: why, and how to allow it.
fn denied(what: &str, e: &std::io::Error) -> String {
    let mut why = format!("{what} ({e}): ");
    match fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    {
        Some(0) => why.push_str(
            "kernel.yama.ptrace_scope is 0 (a process of the same user may be traced), so \
             something else forbids it: ",
        ),
        Some(1) => why.push_str(
            "kernel.yama.ptrace_scope is 1 (only a process's own parents may trace it): allow \
             it for now with `sudo sysctl kernel.yama.ptrace_scope=0`, or run memtrack with \
             CAP_SYS_PTRACE (`sudo setpriv --inh-caps +sys_ptrace …`, or as root). Also: ",
        ),
        Some(2) => why.push_str(
            "kernel.yama.ptrace_scope is 2 (only with CAP_SYS_PTRACE): run memtrack as root \
             or with that capability. Also: ",
        ),
        Some(n) => why.push_str(&format!(
            "kernel.yama.ptrace_scope is {n} (no process may be traced until a reboot). Also: "
        )),
        None => why.push_str("this kernel has no Yama ptrace_scope; "),
    }
    let caps = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| status_field(&s, "CapEff:"))
        .and_then(|c| u64::from_str_radix(&c, 16).ok())
        .unwrap_or(0);
    const CAP_SYS_PTRACE: u64 = 1 << 19;
    if caps & CAP_SYS_PTRACE == 0 {
        why.push_str(
            "memtrack lacks CAP_SYS_PTRACE, which a process that made itself undumpable (or \
             one of another user) needs; in a container, grant it with `docker run \
             --cap-add=SYS_PTRACE` (Kubernetes: securityContext.capabilities.add: \
             [SYS_PTRACE])",
        );
    } else {
        why.push_str("memtrack has CAP_SYS_PTRACE; a security module (SELinux, AppArmor, seccomp) may forbid ptrace here");
    }
    why
}

/// A process's state (`R` running, `S` sleeping, `T` stopped, `t` stopped by its tracer,
/// `Z` a zombie, …); None when there is no such process.
fn state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (comm) STATE …": comm may hold spaces and parentheses
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Whether process `pid` runs on: not ended, not a zombie.
pub fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

/// Whether process `pid` is stopped (SIGSTOP, Ctrl-Z), so runs no code until continued.
pub fn stopped(pid: u32) -> bool {
    state(pid) == Some('T')
}

/// What attach says of a stopped process.
pub fn stopped_refusal(pid: u32, name: &str) -> String {
    format!(
        "process {pid} ({name}) is stopped (SIGSTOP, or Ctrl-Z in its shell): it runs no \
         Python code to start the recording; continue it first (`kill -CONT {pid}`, or `fg` \
         in its shell)"
    )
}
