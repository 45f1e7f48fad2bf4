//! The recorded program's terminal under `record --watch`. The UI needs the terminal, and so
//! does a program whose output goes to it: each of the program's standard streams that is a
//! terminal is given a pseudo-terminal instead (so the program still sees a terminal, of the
//! same size and settings: line buffering, colours and progress bars as without memtrack),
//! and what the program writes there is kept — in a file, as bytes — and shown in the UI's
//! pane. When the UI closes (`q`, or the program's end) those bytes are written to the
//! terminal unchanged, in order, and from then on the program's output passes straight
//! through and the keyboard goes to the program, as `script(1)` does: the scrollback holds
//! exactly what the program wrote. Streams that are not a terminal (a file, a pipe) are left
//! as they are.

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::output::Output;

/// A pseudo-terminal standing in for the user's terminal, and the thread reading it.
pub struct Pty {
    master: Arc<File>,
    shared: Arc<Shared>,
    /// The stream the program's output goes to once passed through: our stdout or stderr.
    target: RawFd,
    /// The program's side, held until the program has it ([`Pty::spawned`]).
    slave: Option<OwnedFd>,
    pump: Option<JoinHandle<()>>,
    keys: Option<JoinHandle<()>>,
    /// The terminal's settings before it was made raw for passing keys through.
    saved: Option<libc::termios>,
}

struct Shared {
    /// Once true, output goes straight to `target` (else to `kept` and the pane).
    through: Mutex<Option<File>>,
    /// What the program wrote while the UI was up.
    kept: Mutex<File>,
    output: Arc<Output>,
    /// The program's side of the terminal is closed (it and its children ended).
    eof: AtomicBool,
    /// Stop passing keys on.
    stop_keys: AtomicBool,
}

/// Whether descriptor `fd` is a terminal.
fn is_tty(fd: RawFd) -> bool {
    // SAFETY: isatty on any descriptor number is safe
    unsafe { libc::isatty(fd) == 1 }
}

impl Pty {
    /// A pseudo-terminal for `cmd`'s streams that are terminals now, set as the user's terminal
    /// is (settings, size); None when none of stdin, stdout and stderr is a terminal.
    pub fn attach(cmd: &mut Command, output: Arc<Output>) -> io::Result<Option<Pty>> {
        let ttys: Vec<RawFd> = (0..3).filter(|&fd| is_tty(fd)).collect();
        if ttys.is_empty() {
            return Ok(None);
        }
        let (master, slave) = open_pair()?;
        for &fd in &ttys {
            let s = Stdio::from(slave.try_clone()?);
            match fd {
                0 => cmd.stdin(s),
                1 => cmd.stdout(s),
                _ => cmd.stderr(s),
            };
        }
        let slave_fd = slave.as_raw_fd();
        // SAFETY: between fork and exec only async-signal-safe calls: setsid, ioctl
        unsafe {
            cmd.pre_exec(move || {
                // its own session, with the pseudo-terminal as its terminal: Ctrl-C typed to
                // it reaches the program's process group, as in a terminal of its own
                if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let kept = tempfile::tempfile()?;
        let shared = Arc::new(Shared {
            through: Mutex::new(None),
            kept: Mutex::new(kept),
            output,
            eof: AtomicBool::new(false),
            stop_keys: AtomicBool::new(false),
        });
        let target = if is_tty(1) { 1 } else { 2 };
        let master = Arc::new(master);
        let pump = {
            let (master, shared) = (master.clone(), shared.clone());
            std::thread::Builder::new()
                .name("memtrack-pty".into())
                .spawn(move || pump(&master, &shared))?
        };
        Ok(Some(Pty {
            master,
            shared,
            target,
            slave: Some(slave),
            pump: Some(pump),
            keys: None,
            saved: None,
        }))
    }

    /// The program started: close our copy of its side, so the end of its output is seen
    /// (its `Command`, which holds copies too, must be dropped as well).
    pub fn spawned(&mut self) {
        self.slave = None;
    }

    /// Send the program Ctrl-C, as its terminal would.
    pub fn interrupt(&self) {
        let _ = (&*self.master).write_all(&[0x03]);
    }

    /// The UI closed: write what the program wrote meanwhile to the terminal, then pass its
    /// output and the keyboard straight through.
    pub fn pass_through(&mut self) {
        let mut through = self.shared.through.lock().unwrap();
        if through.is_some() {
            return;
        }
        // SAFETY: dup of our own stdout/stderr, owned by the new File
        let out = unsafe { File::from_raw_fd(libc::dup(self.target)) };
        let mut kept = self.shared.kept.lock().unwrap();
        if kept.rewind().is_ok() {
            let _ = io::copy(&mut *kept, &mut &out);
        }
        *through = Some(out);
        drop((kept, through));
        if is_tty(0) {
            self.saved = make_raw(0);
            let (master, shared) = (self.master.clone(), self.shared.clone());
            self.keys = std::thread::Builder::new()
                .name("memtrack-keys".into())
                .spawn(move || pass_keys(&master, &shared))
                .ok();
        }
        resize(&self.master);
    }

    /// The program ended: wait a moment for the last of its output, then give the terminal
    /// back as it was.
    pub fn finish(&mut self) {
        self.pass_through();
        let until = Instant::now() + Duration::from_secs(2);
        while !self.shared.eof.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        if self.shared.eof.load(Ordering::SeqCst) {
            if let Some(p) = self.pump.take() {
                let _ = p.join();
            }
        }
        self.shared.stop_keys.store(true, Ordering::SeqCst);
        if let Some(k) = self.keys.take() {
            let _ = k.join();
        }
        if let Some(t) = self.saved.take() {
            // SAFETY: tcsetattr on stdin with settings read from it
            unsafe { libc::tcsetattr(0, libc::TCSANOW, &t) };
        }
    }
}

/// Read the program's output until its side closes: kept and shown, or passed through.
fn pump(master: &File, shared: &Shared) {
    let mut buf = [0u8; 16 << 10];
    loop {
        let n = match (&*master).read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break, // EIO: every descriptor of the program's side is closed
        };
        let bytes = &buf[..n];
        let through = shared.through.lock().unwrap();
        match &*through {
            Some(out) => {
                let _ = (&*out).write_all(bytes);
            }
            None => {
                // a full disk loses what the pane would show later, never the program's time
                let _ = shared.kept.lock().unwrap().write_all(bytes);
                shared.output.push(bytes);
            }
        }
    }
    shared.eof.store(true, Ordering::SeqCst);
}

/// Pass the keyboard (our raw stdin) on to the program until told to stop.
fn pass_keys(master: &File, shared: &Shared) {
    let mut buf = [0u8; 1024];
    while !shared.stop_keys.load(Ordering::SeqCst) && !shared.eof.load(Ordering::SeqCst) {
        let mut p = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd
        let ready = unsafe { libc::poll(&mut p, 1, 100) };
        if ready <= 0 || p.revents & libc::POLLIN == 0 {
            if p.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                return;
            }
            continue;
        }
        // SAFETY: read into our buffer from stdin
        let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            return;
        }
        if (&*master).write_all(&buf[..n as usize]).is_err() {
            return;
        }
        resize(master);
    }
}

/// Give the pseudo-terminal the user's terminal's size.
fn resize(master: &File) {
    // SAFETY: TIOCGWINSZ into a zeroed winsize; TIOCSWINSZ from it
    unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        let tty = File::open("/dev/tty");
        let fd = tty.as_ref().map_or(1, |t| t.as_raw_fd());
        if libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) == 0 {
            libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws);
        }
    }
}

/// Stdin made raw, as `cfmakeraw` does; the settings before.
fn make_raw(fd: RawFd) -> Option<libc::termios> {
    // SAFETY: tcgetattr/tcsetattr on a terminal descriptor with a zeroed termios
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(fd, &mut t) != 0 {
            return None;
        }
        let saved = t;
        libc::cfmakeraw(&mut t);
        libc::tcsetattr(fd, libc::TCSANOW, &t);
        Some(saved)
    }
}

/// A pseudo-terminal pair, the program's side set as the user's terminal is.
fn open_pair() -> io::Result<(File, OwnedFd)> {
    // SAFETY: the calls of posix_openpt(3)'s example; each result is checked, and each
    // descriptor owned by exactly one File/OwnedFd
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if m < 0 {
            return Err(io::Error::last_os_error());
        }
        let master = File::from_raw_fd(m);
        if libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut name = [0 as libc::c_char; 128];
        if libc::ptsname_r(m, name.as_mut_ptr(), name.len()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let path = CStr::from_ptr(name.as_ptr());
        let s = libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if s < 0 {
            return Err(io::Error::last_os_error());
        }
        let slave = OwnedFd::from_raw_fd(s);
        if let Ok(tty) = File::open("/dev/tty") {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(tty.as_raw_fd(), &mut t) == 0 {
                libc::tcsetattr(s, libc::TCSANOW, &t);
            }
        }
        resize(&master);
        Ok((master, slave))
    }
}
