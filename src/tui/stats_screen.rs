//! The screen of a per-op recording: a stats file, or a journal followed while its job runs
//! (one process at a time: `r` goes to the next). What it shows is [`StatsModel`]'s; how, is
//! [`super::stats_draw`]'s. Keys: `m`/`o`/`g`/`p` panels, ←/→ iterations, ↑/↓ scroll, `z`
//! the chart on the iteration or the whole run, `/` search, `q` quit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::Frame;

use crate::model::TrackerStats;
use crate::record::finalize::command_line;
use crate::record::replay::live::Hello;

use super::app::{Screen, Step};
use super::output::Output;
use super::stats_draw::{self, Heading, Tab, Ui};
use super::stats_model::StatsModel;
use crate::record::follow::Follower;

/// How long one refresh may read a journal that is far ahead before the screen is drawn.
const CATCH_UP_STEP: Duration = Duration::from_millis(300);

enum Source {
    File {
        title: String,
        kind: &'static str,
        model: Box<StatsModel>,
    },
    Journal {
        follower: Follower,
        models: Vec<StatsModel>,
        started: Instant,
        /// The job said it ended, or its journal is gone (`record` finished).
        ended: Option<String>,
    },
}

/// The screen.
pub struct StatsScreen {
    source: Source,
    ui: Ui,
    output: Option<Arc<Output>>,
}

impl StatsScreen {
    /// A stats file (`kind` says which: `record file`, `MemoryTracker stats`).
    pub fn file(title: String, kind: &'static str, stats: TrackerStats) -> StatsScreen {
        StatsScreen::with(Source::File {
            title,
            kind,
            model: Box::new(StatsModel::from_stats(stats)),
        })
    }

    /// A journal being written.
    pub fn journal(follower: Follower) -> StatsScreen {
        StatsScreen::with(Source::Journal {
            follower,
            models: Vec::new(),
            started: Instant::now(),
            ended: None,
        })
    }

    fn with(source: Source) -> StatsScreen {
        StatsScreen {
            source,
            ui: Ui {
                tab: Tab::Modules,
                selected: None,
                scroll: 0,
                search: String::new(),
                typing: false,
                process: 0,
                zoom: false,
            },
            output: None,
        }
    }

    /// Show the program's output in the `p` panel (its tail under the chart too).
    pub fn with_output(mut self, output: Arc<Output>) -> StatsScreen {
        self.output = Some(output);
        self
    }

    /// Whether every recorded process said how it ended, or the journal was removed.
    pub fn ended(&self) -> bool {
        matches!(&self.source, Source::Journal { ended: Some(_), .. })
    }

    fn heading(&self) -> Heading {
        match &self.source {
            Source::File { title, kind, model } => {
                // a record file says what it recorded
                let hello = model.record().map(|r| Hello {
                    pid: r.pid,
                    rank: r.rank,
                    backend: r.backend.clone(),
                    argv: r.argv.clone(),
                    device: r.device_name.clone(),
                });
                let program = (hello.as_ref()).filter(|h| !h.argv.is_empty());
                Heading {
                    title: program.map_or_else(
                        || title.clone(),
                        |h| format!("{title}: {}", command_line(&h.argv)),
                    ),
                    state: kind.to_string(),
                    now: None,
                    hello,
                    process: (0, 1),
                }
            }
            Source::Journal {
                follower,
                started,
                ended,
                ..
            } => {
                let p = follower.processes.get(self.ui.process);
                let hello = p.map(|p| p.replay.hello());
                let title = hello.as_ref().filter(|h| !h.argv.is_empty()).map_or_else(
                    || follower.journal().path().display().to_string(),
                    |h| command_line(&h.argv),
                );
                let t = started.elapsed().as_secs();
                let state = match ended {
                    Some(how) => how.clone(),
                    None if p.is_none() => "waiting for the program to import torch".into(),
                    None => format!("recording {}:{:02}", t / 60, t % 60),
                };
                Heading {
                    title,
                    state,
                    now: p.map(|p| p.replay.now()),
                    hello,
                    process: (self.ui.process, follower.processes.len().max(1)),
                }
            }
        }
    }

    /// The iteration the panels show.
    fn shown(&self) -> Option<usize> {
        let m = match &self.source {
            Source::File { model, .. } => model,
            Source::Journal { models, .. } => models.get(self.ui.process)?,
        };
        // the ops panel follows the latest iteration whose details were worked out
        let detailed = (self.ui.tab == Tab::Ops)
            .then(|| m.last_detailed())
            .flatten();
        self.ui
            .selected
            .or(detailed)
            .or_else(|| m.last_ended())
            .or_else(|| m.rows.back().map(|r| r.number))
    }

    fn step_iteration(&mut self, by: isize) {
        let shown = self.shown();
        let m = match &self.source {
            Source::File { model, .. } => model,
            Source::Journal { models, .. } => match models.get(self.ui.process) {
                Some(m) => m,
                None => return,
            },
        };
        let (Some(first), Some(last)) = (m.rows.front(), m.rows.back()) else {
            return;
        };
        let (first, last) = (first.number, last.number);
        let at = shown.unwrap_or(last) as isize + by;
        let at = at.clamp(first as isize, last as isize) as usize;
        self.ui.selected = Some(at);
        self.ui.scroll = 0;
    }
}

impl Screen for StatsScreen {
    fn refresh(&mut self) -> bool {
        let Source::Journal {
            follower,
            models,
            ended,
            ..
        } = &mut self.source
        else {
            return false;
        };
        // a journal far ahead (watch started late) is caught up with in looks of bounded
        // size, each absorbed before the next, for at most a moment before the screen is drawn
        let began = Instant::now();
        let mut read = 0;
        loop {
            let more = follower.poll();
            for (k, p) in follower.processes.iter_mut().enumerate() {
                if models.len() <= k {
                    models.push(StatsModel::live());
                }
                models[k].absorb(&mut p.replay);
            }
            read += more;
            if more == 0 || began.elapsed() >= CATCH_UP_STEP {
                break;
            }
        }
        if ended.is_none() {
            let all_said = !follower.processes.is_empty()
                && (follower.processes.iter()).all(|p| p.replay.now().ended.is_some());
            if follower.journal().moved() {
                *ended = Some("ended: the recording was written".into());
            } else if all_said {
                let how = follower.processes[0].replay.now().ended.unwrap_or_default();
                *ended = Some(format!("ended ({how})"));
            }
        }
        read > 0 || self.output.as_ref().is_some_and(|o| o.changed())
    }

    fn draw(&mut self, f: &mut Frame) {
        let heading = self.heading();
        let shown = self.shown();
        let model = match &mut self.source {
            Source::File { model, .. } => Some(&mut **model),
            Source::Journal { models, .. } => models.get_mut(self.ui.process),
        };
        let output = self.output.as_deref();
        match model {
            Some(model) => stats_draw::draw(f, model, &self.ui, &heading, shown, output),
            None => stats_draw::waiting(f, &heading, output),
        }
    }

    fn key(&mut self, key: KeyEvent) -> Step {
        if self.ui.typing {
            match key.code {
                KeyCode::Enter => self.ui.typing = false,
                KeyCode::Esc => {
                    self.ui.typing = false;
                    self.ui.search.clear();
                }
                KeyCode::Backspace => {
                    self.ui.search.pop();
                }
                KeyCode::Char(c) => self.ui.search.push(c),
                _ => {}
            }
            self.ui.scroll = 0;
            return Step::Stay;
        }
        match key.code {
            KeyCode::Char('q') => return Step::Quit,
            KeyCode::Char('m') => self.ui.tab = Tab::Modules,
            KeyCode::Char('o') => self.ui.tab = Tab::Ops,
            KeyCode::Char('g') => self.ui.tab = Tab::Growth,
            KeyCode::Char('p') if self.output.is_some() => self.ui.tab = Tab::Program,
            KeyCode::Char('z') => self.ui.zoom = !self.ui.zoom,
            KeyCode::Char('/') => {
                self.ui.typing = true;
                self.ui.search.clear();
            }
            KeyCode::Esc => self.ui.search.clear(),
            KeyCode::Left => self.step_iteration(-1),
            KeyCode::Right => self.step_iteration(1),
            KeyCode::Home => self.step_iteration(isize::MIN / 2),
            KeyCode::End => self.ui.selected = None,
            KeyCode::Up => self.ui.scroll = self.ui.scroll.saturating_sub(1),
            KeyCode::Down => self.ui.scroll += 1,
            KeyCode::PageUp => self.ui.scroll = self.ui.scroll.saturating_sub(10),
            KeyCode::PageDown => self.ui.scroll += 10,
            KeyCode::Char('r') => {
                if let Source::Journal { models, .. } = &self.source {
                    self.ui.process = (self.ui.process + 1) % models.len().max(1);
                    self.ui.selected = None;
                }
            }
            _ => return Step::Stay,
        }
        Step::Stay
    }
}
