//! The terminal the UI draws on: the controlling terminal (`/dev/tty`), whatever stdin,
//! stdout and stderr are, so a program's output redirected to a file stays there. It is put
//! in raw mode on the alternate screen while the UI runs, and back as it was when the UI
//! closes, on a panic too.

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::Terminal;

use super::keys::Keys;

/// The UI's terminal, in use.
pub struct Tty {
    /// Drawn on.
    pub terminal: Terminal<CrosstermBackend<File>>,
    /// Read from.
    pub keys: Keys,
}

/// Whether the terminal is the UI's now (raw, alternate screen): a panic puts it back.
static IN_USE: AtomicBool = AtomicBool::new(false);

/// Why no terminal can be drawn on, for the user: what was tried.
pub fn missing() -> Option<String> {
    match File::options().read(true).write(true).open("/dev/tty") {
        Ok(f) if is_terminal(&f) => None,
        Ok(_) => Some("/dev/tty is not a terminal".into()),
        Err(e) => Some(format!("/dev/tty cannot be opened ({e})")),
    }
}

fn is_terminal(f: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: isatty on a descriptor we hold
    unsafe { libc::isatty(f.as_raw_fd()) == 1 }
}

impl Tty {
    /// Take the terminal: raw mode, the alternate screen, the cursor hidden.
    pub fn open() -> io::Result<Tty> {
        let mut tty = File::options().read(true).write(true).open("/dev/tty")?;
        terminal::enable_raw_mode()?;
        IN_USE.store(true, Ordering::SeqCst);
        install_panic_hook();
        execute!(tty, terminal::EnterAlternateScreen, cursor::Hide)?;
        let keys = Keys::new(tty.try_clone()?);
        let terminal = Terminal::new(CrosstermBackend::new(tty))?;
        Ok(Tty { terminal, keys })
    }

    /// Give the terminal back as it was; one its keys found gone is let go of instead:
    /// nothing to give back, nothing to write there (every write would fail, and ratatui
    /// would say so on stderr).
    pub fn close(self) {
        if self.keys.gone() {
            IN_USE.store(false, Ordering::SeqCst);
            std::mem::forget(self);
        } else {
            drop(self);
        }
    }
}

impl Drop for Tty {
    fn drop(&mut self) {
        let _ = self.terminal.flush();
        restore(self.terminal.backend_mut());
    }
}

/// Leave the alternate screen, show the cursor, leave raw mode (once).
fn restore(out: &mut impl Write) {
    if IN_USE.swap(false, Ordering::SeqCst) {
        let _ = execute!(out, terminal::LeaveAlternateScreen, cursor::Show);
        let _ = terminal::disable_raw_mode();
    }
}

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut tty) = File::options().write(true).open("/dev/tty") {
                restore(&mut tty);
            }
            previous(info);
        }));
    });
}
