//! Progress on stderr for long loads and renders (indicatif): shown only when stderr is a
//! terminal and the work has already taken a second, cleared when done, never coloured.

use std::io::IsTerminal;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Work shorter than this shows nothing.
pub const DELAY: Duration = Duration::from_secs(1);

fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// A byte-count bar for reading a file; a [`crate::pickle::Progress`] sink.
pub struct Bar {
    bar: ProgressBar,
    started: Instant,
    shown: bool,
    terminal: bool,
    /// Bytes read by the main reading, and by a second reader further on.
    consumed: usize,
    elsewhere: usize,
}

impl Bar {
    pub fn bytes(total: u64, message: String) -> Bar {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({eta} left)",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_message(message);
        Bar {
            bar,
            started: Instant::now(),
            shown: false,
            terminal: stderr_is_terminal(),
            consumed: 0,
            elsewhere: 0,
        }
    }
}

impl crate::pickle::Progress for Bar {
    fn read_elsewhere(&mut self, bytes: usize) {
        // shown with the next `advanced`: a second reader's reading taken over ends its count
        // just before the main reading jumps past what it read, and the bar never steps back
        self.elsewhere = bytes;
    }

    fn advanced(&mut self, consumed: usize) {
        self.consumed = consumed;
        self.bar.set_position((consumed + self.elsewhere) as u64);
        if !self.shown && self.terminal && self.started.elapsed() >= DELAY {
            self.shown = true;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// A spinner for a stage without a measure of its own (drawing, writing): appears after
/// [`DELAY`] on a terminal, goes when dropped.
pub struct Stage {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Stage {
    pub fn new(message: impl Into<String>) -> Stage {
        if !stderr_is_terminal() {
            return Stage {
                stop: None,
                thread: None,
            };
        }
        let message = message.into();
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("memtrack-progress".into())
            .spawn(move || {
                if rx.recv_timeout(DELAY) != Err(mpsc::RecvTimeoutError::Timeout) {
                    return; // done (or dropped) within the delay
                }
                let s = ProgressBar::new_spinner();
                s.set_draw_target(ProgressDrawTarget::stderr());
                s.set_message(message);
                s.enable_steady_tick(Duration::from_millis(120));
                let _ = rx.recv();
                s.finish_and_clear();
            })
            .ok();
        Stage {
            stop: Some(tx),
            thread,
        }
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
