//! The screen of an allocator snapshot or a torch.profiler trace (`view --tui`): the Active
//! Memory Timeline by category (a trace: its allocated bytes), the peak and every OOM
//! marked, and what is live at a moment by site with a stack (a trace: by op). It asks
//! `view`'s index and details what the web page asks: the same tiles, the same `top --at`.
//!
//! The moment starts at the first OOM (what held the memory when it ran out), else at the
//! peak. Keys: ←/→ a column, `,`/`.` an event, `p` the peak, `x` the next OOM, `+`/`-` zoom
//! around the moment, `0` the whole trace, ↑/↓ a row, `/` search, `q` quit
//! (`snapshot_keys.rs`); drawn by `snapshot_draw.rs`.

use crate::analysis::categories::is_user_file;
use crate::model::snapshot::{FrameId, Snapshot, StackId};
use crate::model::trace::TraceEvents;
use crate::view::index::{AllocIndex, Axis, BandBy, Tile};
use crate::view::server::Content;

/// One row of what is live at the moment.
pub struct LiveRow {
    /// The site (`file:line:function`), or the op of a trace.
    pub group: String,
    /// Bytes live then.
    pub bytes: u64,
    /// Allocations live then.
    pub count: u64,
    /// The frames of the stack holding most of it, innermost first (a trace has none).
    pub stack: Vec<String>,
}

/// What is live at the moment.
pub struct Live {
    /// The event.
    pub event: usize,
    /// Bytes live then, in all.
    pub bytes: u64,
    /// Allocations live then.
    pub count: u64,
    /// Sites (ops) in all.
    pub groups: usize,
    /// The largest.
    pub rows: Vec<LiveRow>,
}

/// What the user chose to look at.
pub struct View {
    /// The window, on the event index.
    pub x0: f64,
    /// Its end.
    pub x1: f64,
    /// The moment (an event).
    pub event: usize,
    /// The row selected in the live table.
    pub row: usize,
    /// What rows must contain; empty: all.
    pub search: String,
    /// The search is being typed.
    pub typing: bool,
}

/// The screen.
pub struct SnapshotScreen<'c, 'a> {
    pub(super) content: &'c mut Content<'a>,
    /// `snap.pickle`.
    pub title: String,
    /// What the user looks at.
    pub view: View,
    /// The tile of the window, for the chart's width when it was cut.
    pub tile: Option<(usize, Tile)>,
    /// What is live at the moment (worked out once the moment rests).
    pub live: Option<Live>,
    /// Where each OOM was: its event's Python frames, or the last event's before it that
    /// has some (that event, its frames).
    pub oom_where: Vec<Option<OomWhere>>,
    /// The search's allocations and bytes over the trace.
    pub found: Option<(usize, u64)>,
    /// The moment moved: `live` is worked out again at the next refresh.
    pub(super) stale: bool,
}

impl<'c, 'a> SnapshotScreen<'c, 'a> {
    /// A snapshot or trace `view` loaded and indexed; None for a stats file.
    pub fn new(title: String, content: &'c mut Content<'a>) -> Option<SnapshotScreen<'c, 'a>> {
        let oom_where = match &mut *content {
            Content::Snapshot {
                snap,
                index,
                events,
                ..
            } => (index.marks.ooms.iter())
                .map(|o| event_frames(snap, events.as_mut(), index.device, o.index))
                .collect(),
            Content::Profile(p) => vec![None; p.index.marks.ooms.len()],
            Content::Stats { .. } | Content::Journal(_) => return None,
        };
        let index = index_of(content);
        let n = index.events();
        let start = (index.marks.ooms.first().map(|o| o.index))
            .or(index.marks.peak_allocated.as_ref().map(|p| p.index))
            .unwrap_or(0);
        let view = View {
            x0: 0.0,
            x1: n.saturating_sub(1) as f64,
            event: start.min(n.saturating_sub(1)),
            row: 0,
            search: String::new(),
            typing: false,
        };
        Some(SnapshotScreen {
            content,
            title,
            view,
            tile: None,
            live: None,
            oom_where,
            found: None,
            stale: true,
        })
    }

    /// The allocation index shown.
    pub fn index(&self) -> &AllocIndex {
        index_of(self.content)
    }

    /// Whether allocations have categories (a snapshot's do, a trace's do not).
    pub fn by_category(&self) -> bool {
        matches!(self.content, Content::Snapshot { .. })
    }

    /// The tile for `width` columns and `height` rows (cut again when either changed).
    pub fn tile_for(&mut self, width: usize, height: usize) -> Option<&Tile> {
        let fresh = self
            .tile
            .as_ref()
            .is_some_and(|(w, t)| *w == width && t.x0 == self.view.x0 && t.x1 == self.view.x1);
        if !fresh && width > 0 {
            let by = if self.by_category() {
                BandBy::Category
            } else {
                BandBy::Site
            };
            let (x0, x1) = (self.view.x0, self.view.x1);
            let index = self.index();
            let t = index.tile_on(x0, x1, width, height.max(1) * 8, Axis::Event, by);
            index.series.release_all();
            self.tile = Some((width, t));
        }
        self.tile.as_ref().map(|(_, t)| t)
    }

    pub(super) fn events(&self) -> usize {
        self.index().events()
    }

    pub(super) fn move_to(&mut self, event: usize) {
        let n = self.events();
        self.view.event = event.min(n.saturating_sub(1));
        // keep the moment in the window
        let (x0, x1) = (self.view.x0, self.view.x1);
        let e = self.view.event as f64;
        if e < x0 || e > x1 {
            let half = (x1 - x0) / 2.0;
            self.set_window(e - half, e + half);
        }
        self.view.row = 0;
        self.stale = true;
    }

    pub(super) fn set_window(&mut self, x0: f64, x1: f64) {
        let last = self.events().saturating_sub(1) as f64;
        let width = (x1 - x0).clamp(8.0_f64.min(last.max(1.0)), last.max(1.0));
        let x0 = x0.clamp(0.0, (last - width).max(0.0));
        self.view.x0 = x0.floor();
        self.view.x1 = (x0 + width).ceil().min(last);
    }

    /// Events one column of the chart spans.
    pub(super) fn column_events(&self) -> usize {
        let width = self.tile.as_ref().map_or(80, |(w, _)| *w).max(1);
        (((self.view.x1 - self.view.x0) / width as f64).ceil() as usize).max(1)
    }

    pub(super) fn zoom(&mut self, by: f64) {
        let e = self.view.event as f64;
        let (x0, x1) = (self.view.x0, self.view.x1);
        self.set_window(e - (e - x0) * by, e + (x1 - e) * by);
    }
}

fn index_of<'x>(content: &'x Content<'_>) -> &'x AllocIndex {
    match content {
        Content::Snapshot { index, .. } => index,
        Content::Profile(p) => &p.index,
        Content::Stats { .. } | Content::Journal(_) => {
            unreachable!("a stats file has its own screen")
        }
    }
}

/// Where an OOM happened in the program.
#[derive(Clone, Debug)]
pub struct OomWhere {
    /// The event whose stack it is: the OOM's own, or the last before it that has Python
    /// frames (captures often record none for the failed request).
    pub event: usize,
    /// Its Python frames, innermost first (`file:line:function`).
    pub frames: Vec<String>,
    /// The innermost of them in the program's own code (not torch, nor another package).
    pub program: Option<String>,
}

/// [`OomWhere`] of the OOM at `event`; None when no event up to it has Python frames.
fn event_frames(
    snap: &Snapshot,
    events: &mut dyn TraceEvents,
    device: u32,
    event: usize,
) -> Option<OomWhere> {
    let mut found = None;
    // walked from the end back: stopped (by an error of its own) at the first with frames
    let _ = events.visit_back_from(device, 0, &mut |i, e, _, _| {
        if i > event || e.stack == StackId::MISSING {
            return Ok(());
        }
        let file = |f: FrameId| snap.stacks.str(snap.stacks.frame(f).filename);
        let python: Vec<FrameId> = (snap.stacks.stack(e.stack).iter().copied())
            .filter(|&f| file(f).ends_with(".py"))
            .collect();
        if python.is_empty() {
            return Ok(());
        }
        found = Some(OomWhere {
            event: i,
            frames: python.iter().map(|&f| snap.frame_label(f, false)).collect(),
            program: (python.iter().find(|&&f| is_user_file(file(f))))
                .map(|&f| snap.frame_label(f, false)),
        });
        Err(std::io::Error::other("found"))
    });
    found
}
