//! The UI beside a recording: `record --watch` and `watch --attach` run it on a thread of its
//! own while the collector does its usual work, following the journal the collector writes.
//! `q` closes the UI and nothing else: the program runs on, its output passes through
//! unchanged ([`Pty`]) and the recording goes on to its file. When the program ends (or the
//! attach window does) the UI closes by itself before the files are written.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::record::journal::Journal;
use crate::record::Companion;

use super::app::{self, Closed};
use super::output::Output;
use super::pty::Pty;
use super::stats_screen::StatsScreen;
use super::terminal::Tty;
use crate::record::follow::Follower;

/// What Ctrl-C in the UI does.
#[derive(Clone, Copy)]
enum Interrupt {
    /// Sent to the program: through its pseudo-terminal, or as SIGINT to its pid.
    Program,
    /// Ends the attach window (as Ctrl-C does to `attach`).
    Window,
}

/// The UI beside a recording.
pub struct Watch {
    interrupt: Interrupt,
    output: Option<Arc<Output>>,
    pty: Arc<Mutex<Option<Pty>>>,
    stop: Arc<AtomicBool>,
    ui: Option<JoinHandle<()>>,
}

impl Watch {
    /// For `record --watch`: the program's terminal streams go through a pseudo-terminal.
    pub fn record() -> Watch {
        Watch::new(Interrupt::Program)
    }

    /// For `watch --attach`: the process keeps its own streams.
    pub fn attach() -> Watch {
        Watch::new(Interrupt::Window)
    }

    fn new(interrupt: Interrupt) -> Watch {
        Watch {
            interrupt,
            output: None,
            pty: Arc::new(Mutex::new(None)),
            stop: Arc::new(AtomicBool::new(false)),
            ui: None,
        }
    }
}

impl Companion for Watch {
    fn prepare(&mut self, cmd: &mut std::process::Command) -> std::io::Result<()> {
        let output = Arc::new(Output::default());
        if let Some(pty) = Pty::attach(cmd, output.clone())? {
            *self.pty.lock().unwrap() = Some(pty);
            self.output = Some(output);
        }
        Ok(())
    }

    fn started(&mut self, journal: &Arc<Journal>, pid: u32) {
        if let Some(p) = self.pty.lock().unwrap().as_mut() {
            p.spawned();
        }
        let mut screen = StatsScreen::journal(Follower::new(journal.clone()));
        if let Some(o) = &self.output {
            screen = screen.with_output(o.clone());
        }
        let (stop, pty, how) = (self.stop.clone(), self.pty.clone(), self.interrupt);
        let ui = std::thread::Builder::new()
            .name("memtrack-watch".into())
            .spawn(move || {
                let mut interrupt = || {
                    match (how, pty.lock().unwrap().as_ref()) {
                        (Interrupt::Program, Some(p)) => p.interrupt(),
                        (Interrupt::Program, None) => {
                            crate::record::signals::send(pid, libc::SIGINT)
                        }
                        // SAFETY: raise(3) of SIGINT, which `attach` handles
                        (Interrupt::Window, _) => unsafe {
                            libc::raise(libc::SIGINT);
                        },
                    }
                    false // the UI stays: the program (or window) ends, and it with it
                };
                match Tty::open() {
                    Ok(mut tty) => {
                        let closed = app::run(&mut tty, &mut screen, &stop, &mut interrupt);
                        tty.close();
                        match closed {
                            Err(e) => eprintln!(
                                "memtrack: watch: the terminal failed ({e}); the recording goes on"
                            ),
                            Ok(Closed::Quit) => eprintln!(
                                "memtrack: watch closed; the recording goes on to its file"
                            ),
                            Ok(Closed::Gone) => eprintln!(
                                "memtrack: watch: the terminal went away; the recording goes on to its file"
                            ),
                            Ok(_) => {}
                        }
                    }
                    Err(e) => eprintln!(
                        "memtrack: watch: cannot use the terminal ({e}); the recording goes on"
                    ),
                }
                if let Some(p) = pty.lock().unwrap().as_mut() {
                    p.pass_through();
                }
            });
        match ui {
            Ok(h) => self.ui = Some(h),
            Err(e) => eprintln!("memtrack: watch: {e}; the recording goes on"),
        }
    }

    fn ended(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.ui.take() {
            let _ = h.join();
        }
        if let Some(p) = self.pty.lock().unwrap().as_mut() {
            p.finish();
        }
    }
}
