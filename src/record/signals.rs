//! SIGINT, SIGTERM and SIGHUP while the child runs: counted here, acted on by the wait loop.
//!
//! Ctrl-C in a terminal reaches every process in the foreground group, the child included, so
//! a SIGINT the kernel generated (`si_code > 0`) is not forwarded again; one sent to memtrack
//! alone (`kill -INT`) is.

use std::sync::atomic::{AtomicUsize, Ordering};

static INT_FROM_TTY: AtomicUsize = AtomicUsize::new(0);
static INT_SENT: AtomicUsize = AtomicUsize::new(0);
static TERM: AtomicUsize = AtomicUsize::new(0);
static HUP: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t with SA_SIGINFO
    let code = if info.is_null() {
        0
    } else {
        unsafe { (*info).si_code }
    };
    let counter = match sig {
        libc::SIGINT if code > 0 => &INT_FROM_TTY,
        libc::SIGINT => &INT_SENT,
        libc::SIGTERM => &TERM,
        _ => &HUP,
    };
    counter.fetch_add(1, Ordering::SeqCst);
}

pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a plain sigaction with an async-signal-safe handler (atomics only)
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Signals that arrived since the last call.
#[derive(Default, Debug, Clone, Copy)]
pub struct Pending {
    pub int_from_tty: usize,
    pub int_sent: usize,
    pub term: usize,
    pub hup: usize,
}

impl Pending {
    pub fn interrupts(&self) -> usize {
        self.int_from_tty + self.int_sent
    }
}

pub fn take() -> Pending {
    Pending {
        int_from_tty: INT_FROM_TTY.swap(0, Ordering::SeqCst),
        int_sent: INT_SENT.swap(0, Ordering::SeqCst),
        term: TERM.swap(0, Ordering::SeqCst),
        hup: HUP.swap(0, Ordering::SeqCst),
    }
}

pub fn send(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}
