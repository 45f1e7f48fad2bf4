//! Running one line of Python inside another process at a safe point: the main thread is
//! stopped with ptrace for a moment, made to call `mmap` (a fresh page for the line) and
//! `Py_AddPendingCall(PyRun_SimpleString, line)`, and let go. Python runs the line later
//! itself, on its main thread with the GIL held, between two bytecodes (where it runs signal
//! handlers' Python code too), never in a signal handler and never inside an allocator: the
//! two calls made under ptrace take no allocator lock (`mmap` is a system call,
//! `Py_AddPendingCall` takes only its queue's lock).
//!
//! This is what `memray attach` does through gdb; it is done here directly because gdb's
//! inferior calls save and restore the registers through the x86 XSTATE regset, which gdb 13
//! sizes wrongly on CPUs with AMX (the kernel refuses it, `Couldn't write extended state
//! status`), and a call that fails half-way leaves the interrupted system call to fail in the
//! program (`OSError: [Errno 514]`). Here every register, the full XSTATE included, is saved
//! before and put back after, and an interrupted system call is restarted as the kernel would.

use std::fs;
use std::io::{Error as IoError, ErrorKind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The functions called in the target, where its memory maps place them.
#[derive(Debug, Clone, Copy)]
pub struct Symbols {
    pub mmap: u64,
    pub add_pending_call: u64,
    pub run_simple_string: u64,
}

/// Why the line could not be placed.
#[derive(Debug)]
pub enum InjectError {
    /// ptrace refused (EPERM): not ours, Yama's ptrace_scope, no CAP_SYS_PTRACE.
    Permission(IoError),
    /// The process is gone.
    Gone,
    /// Anything else, said in words.
    Other(String),
}

/// Where `name` is in the process: the first mapped file among `files` (paths as the maps
/// give them) whose dynamic symbol table has it.
pub fn find_symbol(pid: u32, files: &[PathBuf], name: &str) -> Option<u64> {
    for f in files {
        let Ok(base) = load_base(pid, f) else {
            continue;
        };
        if let Some(v) = elf_dynamic_symbol(&proc_path(pid, f), name) {
            return Some(base + v);
        }
    }
    None
}

/// The file as this process can open it: through /proc/PID/root, so a target in another
/// mount namespace (a container) is read from its own tree.
fn proc_path(pid: u32, f: &Path) -> PathBuf {
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    match f.strip_prefix("/") {
        Ok(rel) if root.join(rel).exists() => root.join(rel),
        _ => f.to_path_buf(),
    }
}

/// Every file mapped into the process, in the order the maps list them.
pub fn mapped_files(pid: u32) -> std::io::Result<Vec<PathBuf>> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let mut out: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        if let Some(p) = line
            .split_whitespace()
            .nth(5)
            .filter(|p| p.starts_with('/'))
        {
            let p = PathBuf::from(p);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// Where the file's offset 0 is mapped, less its first loadable segment's address (0 for
/// shared objects and position-independent programs).
fn load_base(pid: u32, file: &Path) -> std::io::Result<u64> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let want = file.to_string_lossy();
    for line in maps.lines() {
        let mut parts = line.split_whitespace();
        let (Some(range), _, Some(offset), _, _, Some(path)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            continue;
        };
        if path != want || u64::from_str_radix(offset, 16).ok() != Some(0) {
            continue;
        }
        let start = range
            .split('-')
            .next()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| IoError::new(ErrorKind::InvalidData, "maps line"))?;
        let first_vaddr = elf_first_load_vaddr(&proc_path(pid, file)).unwrap_or(0);
        return Ok(start.wrapping_sub(first_vaddr & !0xfff));
    }
    Err(IoError::new(ErrorKind::NotFound, "not mapped"))
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// The bytes of an ELF64 little-endian file, mapped (libraries are tens of MiB).
fn elf(path: &Path) -> Option<memmap2::Mmap> {
    let f = fs::File::open(path).ok()?;
    // SAFETY: read-only mapping of a library file; a file truncated under us is the only
    // hazard, and loaded libraries are not rewritten in place
    let m = unsafe { memmap2::Mmap::map(&f) }.ok()?;
    (m.len() > 64 && m[..4] == *b"\x7fELF" && m[4] == 2 && m[5] == 1).then_some(m)
}

fn elf_first_load_vaddr(path: &Path) -> Option<u64> {
    let b = elf(path)?;
    let phoff = u64_at(&b, 0x20)? as usize;
    let phentsize = u16_at(&b, 0x36)? as usize;
    let phnum = u16_at(&b, 0x38)? as usize;
    (0..phnum).find_map(|i| {
        let p = phoff + i * phentsize;
        (u32_at(&b, p)? == 1)
            .then(|| u64_at(&b, p + 0x10))
            .flatten()
    })
}

/// `name`'s value in the file's dynamic symbol table (SHT_DYNSYM), if defined there.
fn elf_dynamic_symbol(path: &Path, name: &str) -> Option<u64> {
    let b = elf(path)?;
    let shoff = u64_at(&b, 0x28)? as usize;
    let shentsize = u16_at(&b, 0x3a)? as usize;
    let shnum = u16_at(&b, 0x3c)? as usize;
    let section = |i: usize| -> Option<(u32, usize, usize, u32, usize)> {
        let s = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            u32_at(&b, s + 4)?,             // type
            u64_at(&b, s + 0x18)? as usize, // offset
            u64_at(&b, s + 0x20)? as usize, // size
            u32_at(&b, s + 0x28)?,          // link
            u64_at(&b, s + 0x38)? as usize, // entry size
        ))
    };
    for i in 0..shnum {
        let (kind, off, size, link, entsize) = section(i)?;
        if kind != 11 || entsize < 24 {
            continue; // SHT_DYNSYM
        }
        let (_, str_off, str_size, _, _) = section(link as usize)?;
        let strtab = b.get(str_off..str_off.checked_add(str_size)?)?;
        for k in 0..size / entsize {
            let s = off + k * entsize;
            let name_at = u32_at(&b, s)? as usize;
            let value = u64_at(&b, s + 8)?;
            let shndx = u16_at(&b, s + 6)?;
            if value == 0 || shndx == 0 {
                continue; // undefined here
            }
            let rest = strtab.get(name_at..)?;
            let end = rest.iter().position(|&c| c == 0)?;
            if &rest[..end] == name.as_bytes() {
                return Some(value);
            }
        }
    }
    None
}

#[cfg(target_arch = "x86_64")]
mod ptrace {
    use super::*;

    const NT_X86_XSTATE: libc::c_int = 0x202;
    /// How long one call in the target may take before it is given up.
    const CALL_TIMEOUT: Duration = Duration::from_secs(5);

    fn last_error() -> IoError {
        IoError::last_os_error()
    }

    fn check(r: libc::c_long) -> std::io::Result<libc::c_long> {
        if r == -1 {
            Err(last_error())
        } else {
            Ok(r)
        }
    }

    /// Wait for the thread's next stop, at most `limit`; (status) or a timeout error.
    fn wait_stop(tid: i32, limit: Duration) -> std::io::Result<i32> {
        let start = Instant::now();
        loop {
            let mut status = 0;
            // SAFETY: plain waitpid on a thread we trace
            let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
            if r == tid {
                return Ok(status);
            }
            if r == -1 {
                let e = last_error();
                if e.kind() != ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            if start.elapsed() > limit {
                return Err(IoError::new(ErrorKind::TimedOut, "no stop"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    struct Saved {
        regs: libc::user_regs_struct,
        xstate: Option<Vec<u8>>,
        fpregs: libc::user_fpregs_struct,
    }

    fn save(tid: i32) -> std::io::Result<Saved> {
        // SAFETY: buffers of the sizes the requests write
        unsafe {
            let mut regs: libc::user_regs_struct = std::mem::zeroed();
            check(libc::ptrace(
                libc::PTRACE_GETREGS,
                tid,
                0,
                &mut regs as *mut _,
            ))?;
            let mut fpregs: libc::user_fpregs_struct = std::mem::zeroed();
            check(libc::ptrace(
                libc::PTRACE_GETFPREGS,
                tid,
                0,
                &mut fpregs as *mut _,
            ))?;
            // the whole extended state (AVX, AVX-512, AMX): the kernel says its size, and
            // takes it back only at that size
            let mut buf = vec![0u8; 1 << 16];
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            let xstate = (libc::ptrace(
                libc::PTRACE_GETREGSET,
                tid,
                NT_X86_XSTATE,
                &mut iov as *mut _,
            ) != -1)
                .then(|| {
                    buf.truncate(iov.iov_len);
                    buf
                });
            Ok(Saved {
                regs,
                xstate,
                fpregs,
            })
        }
    }

    fn restore(tid: i32, s: &mut Saved) -> std::io::Result<()> {
        // SAFETY: the buffers `save` filled
        unsafe {
            let xstate_back = match &mut s.xstate {
                Some(buf) => {
                    let mut iov = libc::iovec {
                        iov_base: buf.as_mut_ptr().cast(),
                        iov_len: buf.len(),
                    };
                    libc::ptrace(
                        libc::PTRACE_SETREGSET,
                        tid,
                        NT_X86_XSTATE,
                        &mut iov as *mut _,
                    ) != -1
                }
                None => false,
            };
            if !xstate_back {
                check(libc::ptrace(
                    libc::PTRACE_SETFPREGS,
                    tid,
                    0,
                    &s.fpregs as *const _,
                ))?;
            }
            check(libc::ptrace(
                libc::PTRACE_SETREGS,
                tid,
                0,
                &s.regs as *const _,
            ))?;
        }
        Ok(())
    }

    fn poke(tid: i32, addr: u64, bytes: &[u8]) -> std::io::Result<()> {
        for (k, chunk) in bytes.chunks(8).enumerate() {
            let at = addr + 8 * k as u64;
            let mut word = [0u8; 8];
            if chunk.len() < 8 {
                // keep the bytes after the end as they are
                // SAFETY: PEEKDATA returns the word; errno tells an error from -1
                unsafe {
                    *libc::__errno_location() = 0;
                    let w = libc::ptrace(libc::PTRACE_PEEKDATA, tid, at, 0);
                    if w == -1 && *libc::__errno_location() != 0 {
                        return Err(last_error());
                    }
                    word = w.to_le_bytes();
                }
            }
            word[..chunk.len()].copy_from_slice(chunk);
            // SAFETY: writes one word of the stopped thread's memory
            check(unsafe {
                libc::ptrace(libc::PTRACE_POKEDATA, tid, at, i64::from_le_bytes(word))
            })?;
        }
        Ok(())
    }

    /// Call `func(args)` on the stopped thread, returning at address 0 (a SIGSEGV there is
    /// the end of the call); its return value. Signals that arrive meanwhile are kept in
    /// `pending` for later delivery.
    fn call(
        tid: i32,
        base: &libc::user_regs_struct,
        func: u64,
        args: &[u64],
        pending: &mut Vec<i32>,
    ) -> Result<u64, InjectError> {
        let mut r = *base;
        // below the red zone, 16-byte aligned, then the return address 0
        let sp = ((base.rsp - 128 - 1024) & !0xf) - 8;
        poke(tid, sp, &0u64.to_le_bytes()).map_err(other)?;
        r.rsp = sp;
        r.rip = func;
        r.rax = 0;
        // no system call restart while our call runs; the saved registers bring it back
        r.orig_rax = u64::MAX;
        let regs = [
            &mut r.rdi, &mut r.rsi, &mut r.rdx, &mut r.rcx, &mut r.r8, &mut r.r9,
        ];
        for (slot, v) in regs.into_iter().zip(args) {
            *slot = *v;
        }
        // SAFETY: registers of the stopped thread; continue it
        unsafe {
            check(libc::ptrace(libc::PTRACE_SETREGS, tid, 0, &r as *const _)).map_err(other)?;
            check(libc::ptrace(libc::PTRACE_CONT, tid, 0, 0)).map_err(other)?;
        }
        loop {
            let status = match wait_stop(tid, CALL_TIMEOUT) {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::TimedOut => {
                    return Err(InjectError::Other(
                        "the call into the process did not return within 5 s".into(),
                    ))
                }
                Err(_) => return Err(InjectError::Gone),
            };
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                return Err(InjectError::Gone);
            }
            let sig = libc::WSTOPSIG(status);
            // SAFETY: as above
            unsafe {
                let mut now: libc::user_regs_struct = std::mem::zeroed();
                check(libc::ptrace(
                    libc::PTRACE_GETREGS,
                    tid,
                    0,
                    &mut now as *mut _,
                ))
                .map_err(other)?;
                if sig == libc::SIGSEGV && now.rip == 0 {
                    return Ok(now.rax);
                }
                if sig == libc::SIGSEGV || sig == libc::SIGBUS || sig == libc::SIGILL {
                    return Err(InjectError::Other(format!(
                        "the call into the process faulted (signal {sig} at {:#x})",
                        now.rip
                    )));
                }
                if sig != libc::SIGTRAP && sig != libc::SIGSTOP {
                    pending.push(sig);
                }
                check(libc::ptrace(libc::PTRACE_CONT, tid, 0, 0)).map_err(other)?;
            }
        }
    }

    fn other(e: IoError) -> InjectError {
        if e.raw_os_error() == Some(libc::ESRCH) {
            InjectError::Gone
        } else {
            InjectError::Other(e.to_string())
        }
    }

    /// Stop the main thread, place `line` in a fresh page and queue it as a pending call,
    /// put every register back, let the thread go. The page's address is given to `line`
    /// (`make_line(address)`), so that what runs can unmap it.
    pub fn inject(
        pid: u32,
        sym: &Symbols,
        make_line: impl Fn(u64) -> String,
    ) -> Result<(), InjectError> {
        let tid = pid as i32;
        // SAFETY: PTRACE_SEIZE attaches without stopping; INTERRUPT stops the main thread only
        unsafe {
            if libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) == -1 {
                let e = last_error();
                return Err(match e.raw_os_error() {
                    Some(libc::EPERM) => InjectError::Permission(e),
                    Some(libc::ESRCH) => InjectError::Gone,
                    _ => InjectError::Other(format!("ptrace: {e}")),
                });
            }
        }
        // signals that stopped the thread meanwhile, each handed back at the end
        let mut pending: Vec<i32> = Vec::new();
        let result = (|| {
            // SAFETY: as above
            unsafe {
                check(libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0)).map_err(other)?;
            }
            loop {
                let status = wait_stop(tid, CALL_TIMEOUT).map_err(|_| InjectError::Gone)?;
                if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                    return Err(InjectError::Gone);
                }
                // the interrupt's stop is an event stop; a signal may come first
                if status >> 16 == libc::PTRACE_EVENT_STOP {
                    break;
                }
                pending.push(libc::WSTOPSIG(status));
                // SAFETY: let the signal wait, run on to the interrupt
                unsafe {
                    check(libc::ptrace(libc::PTRACE_CONT, tid, 0, 0)).map_err(other)?;
                }
            }
            let mut saved = save(tid).map_err(other)?;
            let outcome = (|| {
                let page = call(
                    tid,
                    &saved.regs,
                    sym.mmap,
                    &[
                        0,
                        4096,
                        (libc::PROT_READ | libc::PROT_WRITE) as u64,
                        (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64,
                        u64::MAX,
                        0,
                    ],
                    &mut pending,
                )?;
                if page as i64 <= 0 && (page as i64) > -4096 {
                    return Err(InjectError::Other(format!(
                        "mmap in the process failed (errno {})",
                        -(page as i64)
                    )));
                }
                let mut line = make_line(page).into_bytes();
                line.push(0);
                if line.len() > 4096 {
                    return Err(InjectError::Other("the line to run is over a page".into()));
                }
                poke(tid, page, &line).map_err(other)?;
                let rc = call(
                    tid,
                    &saved.regs,
                    sym.add_pending_call,
                    &[sym.run_simple_string, page],
                    &mut pending,
                )?;
                if rc as i32 != 0 {
                    return Err(InjectError::Other(
                        "Python's queue of pending calls is full (Py_AddPendingCall returned -1); try again".into(),
                    ));
                }
                Ok(())
            })();
            let back = restore(tid, &mut saved);
            outcome?;
            back.map_err(other)
        })();
        // SAFETY: detach (the thread runs on), giving back the first signal that arrived
        // meanwhile with its details, and sending it the others again: none is lost, whether
        // the injection worked or not
        unsafe {
            let first = pending.first().copied().unwrap_or(0);
            libc::ptrace(libc::PTRACE_DETACH, tid, 0, first as libc::c_long);
            for &sig in pending.iter().skip(1) {
                libc::syscall(libc::SYS_tgkill, tid, tid, sig);
            }
        }
        result
    }
}

#[cfg(target_arch = "x86_64")]
pub use ptrace::inject;

#[cfg(not(target_arch = "x86_64"))]
pub fn inject(
    _pid: u32,
    _sym: &Symbols,
    _make_line: impl Fn(u64) -> String,
) -> Result<(), InjectError> {
    Err(InjectError::Other(
        "attach places its code with x86-64 registers; this machine is not x86-64".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_libc_functions_in_this_process() {
        let pid = std::process::id();
        let files = mapped_files(pid).unwrap();
        let mmap = find_symbol(pid, &files, "mmap").expect("mmap in libc");
        assert_eq!(mmap, libc::mmap as *const () as usize as u64);
        assert!(find_symbol(pid, &files, "no_such_symbol_anywhere").is_none());
    }
}
