//! `memtrack watch JOURNAL` and `watch --attach PID`: the terminal UI on a job being recorded
//! (`tui`); `record --watch` and `view --tui` ask here whether there is a terminal.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::WatchArgs;
use crate::error::{Error, Result};
use crate::record::attach::{self, Options};
use crate::record::follow::Follower;
use crate::record::journal::{self, Journal};
use crate::record::{Backend, Observer};
use crate::tui::stats_screen::StatsScreen;
use crate::tui::watch::Watch;

pub fn run(a: WatchArgs) -> Result<()> {
    need_terminal("watch")?;
    if let Some(pid) = a.attach {
        let options = Options {
            pid,
            output: a.output,
            duration: a.duration,
            backend: Backend::Auto,
            observer: Observer::Python,
            start_timeout: Duration::from_secs(10),
            snapshot: false,
            max_snapshot_entries: 100_000,
            dump: false,
        };
        let code = attach::run_with(&options, Some(&mut Watch::attach()))?;
        std::process::exit(code)
    }
    let Some(dir) = a.journal else {
        return Err(Error::Usage(
            "watch: name a journal, or --attach PID".into(),
        ));
    };
    if !is_journal(&dir) {
        return Err(Error::input(
            &dir,
            "not a journal: `watch` follows the folder NAME.journal-XXXXXXXX that `record` writes beside its output while the program runs; a finished file is shown by `memtrack view --tui FILE`",
        ));
    }
    watch_journal(&dir)
}

/// Whether `path` names a `record` journal (`NAME.journal-XXXXXXXX`, a folder).
pub(super) fn is_journal(path: &Path) -> bool {
    path.is_dir() && journal::output_of(path).is_some()
}

/// A journal followed from its start: refused unless it is the user's alone.
pub(super) fn follow(dir: &Path) -> Result<Follower> {
    let journal = Journal::open(dir).map_err(|why| Error::input(dir, why))?;
    Ok(Follower::new(Arc::new(journal)))
}

/// The terminal UI on a journal until `q`.
pub(super) fn watch_journal(dir: &Path) -> Result<()> {
    let mut screen = StatsScreen::journal(follow(dir)?);
    crate::tui::show(&mut screen).map_err(|e| Error::Unavailable(format!("watch: {e}")))?;
    if !screen.ended() {
        eprintln!("memtrack: watch closed; the recording goes on to its file");
    }
    Ok(())
}

/// A refusal naming what is missing when there is no terminal to draw on.
pub(super) fn need_terminal(command: &str) -> Result<()> {
    match crate::tui::terminal::missing() {
        None => Ok(()),
        Some(why) => Err(Error::Usage(format!(
            "{command}: no terminal to draw on ({why}): the terminal UI needs one (a terminal window, `ssh -t`, tmux). Without one, `memtrack summary FILE` prints a recording's figures as text (for a running job, once its file is written), and `memtrack view FILE` serves them to a browser"
        ))),
    }
}
