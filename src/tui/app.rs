//! The UI's loop: keys and resizes from the terminal, the screen's data refreshed twice a
//! second and drawn when it changed (at least once a second), until `q`, or until the caller's
//! `stop` says the watched job is over.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Frame;

use super::keys::Input;
use super::terminal::Tty;

/// What a screen does with a key.
pub enum Step {
    /// Nothing more: draw again.
    Stay,
    /// Close the UI.
    Quit,
}

/// One kind of screen: a per-op recording, a snapshot or trace.
pub trait Screen {
    /// Take what is new; whether anything changed.
    fn refresh(&mut self) -> bool;
    /// Draw everything.
    fn draw(&mut self, f: &mut Frame);
    /// A key other than Ctrl-C.
    fn key(&mut self, key: KeyEvent) -> Step;
}

/// How the UI closed.
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// `q`.
    Quit,
    /// `stop` was raised (the job ended).
    Stopped,
    /// Ctrl-C, which the caller's `interrupt` said ends the UI.
    Interrupted,
    /// The terminal went away (an SSH session dropped, the window closed).
    Gone,
}

const REFRESH: Duration = Duration::from_millis(500);
const REDRAW: Duration = Duration::from_secs(1);

/// Run `screen` on the terminal until `q`, `stop`, or a Ctrl-C that `interrupt` says ends it
/// (`interrupt` returns false to stay: a recorded program is sent the interrupt instead).
pub fn run(
    tty: &mut Tty,
    screen: &mut dyn Screen,
    stop: &AtomicBool,
    interrupt: &mut dyn FnMut() -> bool,
) -> io::Result<Closed> {
    // drawn at once, then with what the first refresh brings (a moment's details, a
    // journal's records so far)
    tty.terminal.draw(|f| screen.draw(f))?;
    screen.refresh();
    tty.terminal.draw(|f| screen.draw(f))?;
    let (mut refreshed, mut drawn) = (Instant::now(), Instant::now());
    let mut size = tty.terminal.size()?;
    loop {
        if stop.load(Ordering::SeqCst) {
            // what came last is drawn before the UI closes
            screen.refresh();
            tty.terminal.draw(|f| screen.draw(f))?;
            return Ok(Closed::Stopped);
        }
        let mut dirty = false;
        match tty.keys.next(Duration::from_millis(100))? {
            Input::Key(k) => {
                let ctrl_c =
                    k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                if ctrl_c {
                    if interrupt() {
                        return Ok(Closed::Interrupted);
                    }
                } else if let Step::Quit = screen.key(k) {
                    return Ok(Closed::Quit);
                }
                dirty = true;
            }
            Input::Gone => return Ok(Closed::Gone),
            Input::Nothing => {}
        }
        // a resize: drawn at once (draw fits the new size)
        let now = tty.terminal.size()?;
        if now != size {
            size = now;
            dirty = true;
        }
        if refreshed.elapsed() >= REFRESH {
            dirty |= screen.refresh();
            refreshed = Instant::now();
        }
        if dirty || drawn.elapsed() >= REDRAW {
            tty.terminal.draw(|f| screen.draw(f))?;
            drawn = Instant::now();
        }
    }
}
