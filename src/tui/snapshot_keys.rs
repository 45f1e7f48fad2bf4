//! The snapshot screen as the app runs it: what is live at the moment worked out when the
//! moment rests, the keys, and the drawing ([`super::snapshot_draw`]) of a
//! [`SnapshotScreen`].

use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::Frame;

use crate::view::details::{self, MOMENT_ROWS};
use crate::view::server::Content;

use super::app::{Screen, Step};
use super::snapshot_draw;
use super::snapshot_screen::{Live, LiveRow, SnapshotScreen};

impl Screen for SnapshotScreen<'_, '_> {
    fn refresh(&mut self) -> bool {
        if !self.stale {
            return false;
        }
        self.stale = false;
        let event = self.view.event;
        self.live = match &mut *self.content {
            Content::Snapshot {
                snap,
                index,
                events,
                ..
            } => details::live_at(snap, index.device, events.as_mut(), event)
                .ok()
                .map(|r| Live {
                    event,
                    bytes: r.at_bytes.unwrap_or(0),
                    count: r.at_count.unwrap_or(0),
                    groups: r.groups,
                    rows: (r.rows.into_iter())
                        .map(|g| LiveRow {
                            bytes: g.at_bytes.unwrap_or(0),
                            count: g.at_count.unwrap_or(0),
                            group: g.group,
                            stack: g.example_stack,
                        })
                        .collect(),
                }),
            Content::Profile(p) => {
                let r = p.live_at(event, MOMENT_ROWS);
                Some(Live {
                    event,
                    bytes: r.at_bytes.max(0) as u64,
                    count: r.at_count,
                    groups: r.groups,
                    rows: (r.rows.into_iter())
                        .map(|g| LiveRow {
                            group: g.group,
                            bytes: g.at_bytes.max(0) as u64,
                            count: g.at_count,
                            stack: Vec::new(),
                        })
                        .collect(),
                })
            }
            Content::Stats { .. } | Content::Journal(_) => None,
        };
        true
    }

    fn draw(&mut self, f: &mut Frame) {
        snapshot_draw::draw(f, self);
    }

    fn key(&mut self, key: KeyEvent) -> Step {
        if self.view.typing {
            match key.code {
                KeyCode::Enter => {
                    self.view.typing = false;
                    self.found = search(self.content, &self.view.search);
                }
                KeyCode::Esc => {
                    self.view.typing = false;
                    self.view.search.clear();
                    self.found = None;
                }
                KeyCode::Backspace => {
                    self.view.search.pop();
                }
                KeyCode::Char(c) => self.view.search.push(c),
                _ => {}
            }
            self.view.row = 0;
            return Step::Stay;
        }
        let n = self.events();
        let e = self.view.event;
        match key.code {
            KeyCode::Char('q') => return Step::Quit,
            KeyCode::Left => self.move_to(e.saturating_sub(self.column_events())),
            KeyCode::Right => self.move_to(e + self.column_events()),
            KeyCode::Char(',') => self.move_to(e.saturating_sub(1)),
            KeyCode::Char('.') => self.move_to(e + 1),
            KeyCode::Home => self.move_to(0),
            KeyCode::End => self.move_to(n),
            KeyCode::Char('p') => {
                if let Some(p) = self.index().marks.peak_allocated.as_ref().map(|p| p.index) {
                    self.move_to(p);
                }
            }
            KeyCode::Char('x') => {
                let ooms: Vec<usize> = self.index().marks.ooms.iter().map(|o| o.index).collect();
                if let Some(&o) = ooms.iter().find(|&&o| o > e).or(ooms.first()) {
                    self.move_to(o);
                }
            }
            KeyCode::Char('+') | KeyCode::Char('=') => self.zoom(0.5),
            KeyCode::Char('-') => self.zoom(2.0),
            KeyCode::Char('0') => {
                self.view.x0 = 0.0;
                self.view.x1 = n.saturating_sub(1) as f64;
            }
            KeyCode::Up => self.view.row = self.view.row.saturating_sub(1),
            KeyCode::Down => self.view.row += 1,
            KeyCode::Char('/') => {
                self.view.typing = true;
                self.view.search.clear();
            }
            KeyCode::Esc => {
                self.view.search.clear();
                self.found = None;
            }
            _ => {}
        }
        Step::Stay
    }
}

/// Allocations and bytes of the trace made at stacks (ops) matching `q`.
fn search(content: &Content<'_>, q: &str) -> Option<(usize, u64)> {
    if q.is_empty() {
        return None;
    }
    let hits = match content {
        Content::Snapshot { snap, index, .. } => details::search(snap, index, q),
        Content::Profile(p) => p.search(q),
        Content::Stats { .. } | Content::Journal(_) => return None,
    };
    Some((hits.allocations, hits.bytes))
}
