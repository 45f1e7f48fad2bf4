//! The terminal UI of `memtrack watch`, `record --watch` and `view --tui`: a job's memory by
//! module, phase and op as it runs (a journal followed as it is written), or a finished file,
//! drawn with ratatui on the terminal (`/dev/tty`), over SSH as well as locally.
//!
//! Data flows one way, as for `view`: [`follow`] reads a journal's spools into the record
//! module's live replay; [`stats_model`] keeps what the screens show of a per-op recording
//! (bounded for a running job: [`envelope`] for the run's series).

pub mod app;
pub mod chart;
pub mod envelope;
pub mod keys;
pub mod output;
pub mod pty;
pub mod snapshot_draw;
pub mod snapshot_keys;
pub mod snapshot_screen;
pub mod stats_draw;
pub mod stats_model;
pub mod stats_screen;
pub mod terminal;
pub mod watch;

use std::sync::atomic::AtomicBool;

/// Run `screen` on the terminal until `q` or Ctrl-C.
pub fn show(screen: &mut dyn app::Screen) -> std::io::Result<()> {
    let mut tty = terminal::Tty::open()?;
    let never = AtomicBool::new(false);
    let closed = app::run(&mut tty, screen, &never, &mut || true);
    tty.close();
    closed.map(|_| ())
}

/// `view --tui`: a finished file `view` loaded, in the terminal until `q`.
pub fn view(title: String, content: crate::view::server::Content<'_>) -> std::io::Result<()> {
    use crate::view::server::Content;
    match content {
        Content::Stats { stats, .. } => {
            let kind = if stats.record.is_some() {
                "record file"
            } else {
                "MemoryTracker stats"
            };
            show(&mut stats_screen::StatsScreen::file(title, kind, *stats))
        }
        mut other => match snapshot_screen::SnapshotScreen::new(title, &mut other) {
            Some(mut screen) => show(&mut screen),
            None => Ok(()),
        },
    }
}
