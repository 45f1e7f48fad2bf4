//! What the page asks about one thing: an allocation (its whole stack, lifetime, category and
//! the annotation ranges open when it was made), a moment (what was live then, the `top --at`
//! table; the segments and blocks then, `segments --at`), and a search over frames.
//!
//! The moment's answers replay the events from where the reading put them aside (the
//! `analysis::sites` gathering and `analysis::rewind`), so they are exactly the commands'.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::analysis::groups::{group_report, GroupBy, GroupReport, Grouper};
use crate::analysis::moment::Moment;
use crate::analysis::rewind::device_state_at;
use crate::analysis::sites::{gather, Capture, Extra, LiveConfig, Sites};
use crate::model::snapshot::{Snapshot, StackId};
use crate::model::trace::TraceEvents;

use super::index::{AllocIndex, AllocSpan};

/// Rows of the live table at a moment.
pub const MOMENT_ROWS: usize = 40;
/// Blocks sent with the segments at a moment (a request's bound; the rest counted).
pub const MAX_BLOCKS: usize = 200_000;
/// Stacks a search names at most.
pub const MAX_MATCHES: usize = 200_000;

/// One allocation, all the page shows when it is clicked.
#[derive(Debug, Serialize)]
pub struct AllocDetail {
    /// Id, size, site, when it was made and freed.
    #[serde(flatten)]
    pub span: AllocSpan,
    /// Python frames of the allocating stack, innermost first (`file:line:function`).
    pub python: Vec<String>,
    /// The other (C++) frames, innermost first.
    pub native: Vec<String>,
    /// Python frames of the stack that freed it.
    pub freed_by: Vec<String>,
    /// `parameter`, `gradient`, `activation`, … (`top --group-by category`'s rules).
    pub category: &'static str,
    /// The annotation ranges open when it was allocated, outermost first.
    pub annotations: Vec<String>,
}

/// Python frames first (`*.py`), the rest apart, both innermost first.
fn split_frames(snap: &Snapshot, stack: StackId) -> (Vec<String>, Vec<String>) {
    let mut python = Vec::new();
    let mut native = Vec::new();
    for &f in snap.stacks.stack(stack) {
        let file = snap.stacks.str(snap.stacks.frame(f).filename);
        let label = snap.frame_label(f, true);
        if file.ends_with(".py") {
            python.push(label);
        } else {
            native.push(label);
        }
    }
    (python, native)
}

/// The allocation `id` of `index`; None past the last.
pub fn alloc(snap: &Snapshot, index: &AllocIndex, id: usize) -> Option<AllocDetail> {
    let a = index.allocs.get(id)?;
    let tl = &index.marks;
    let stack = StackId(a.origin);
    let (python, native) = split_frames(snap, stack);
    let freed_by = match a.end() {
        Some(_) => split_frames(snap, StackId(a.free_origin)).0,
        None => Vec::new(),
    };
    let mut grouper = Grouper::new(snap, index.device, GroupBy::Category, Vec::new());
    let category = grouper.category(stack, a.end().map(|_| StackId(a.free_origin)));
    let span = index.span(id)?;
    let start_x = span.start_x;
    Some(AllocDetail {
        span,
        python,
        native,
        freed_by,
        category,
        annotations: start_x
            .filter(|_| tl.x_is_time)
            .map_or_else(Vec::new, |x| open_annotations(index, x)),
    })
}

/// The annotation ranges open at `x` (seconds), outermost first.
fn open_annotations(index: &AllocIndex, x: f64) -> Vec<String> {
    let mut open: Vec<&str> = Vec::new();
    for m in index.marks.annotations.iter().take_while(|m| m.x <= x) {
        if m.stage.eq_ignore_ascii_case("START") {
            open.push(&m.name);
        } else if let Some(k) = open.iter().rposition(|&n| n == m.name) {
            open.remove(k);
        }
    }
    open.into_iter().map(String::from).collect()
}

/// What was live right after event `event`, by site: `top --at EVENT`'s report.
pub fn live_at(
    snap: &Snapshot,
    device: u32,
    events: &mut dyn TraceEvents,
    event: usize,
) -> std::io::Result<GroupReport> {
    let config = LiveConfig {
        capture: Capture::Event(event),
        extra: Extra::Nothing,
        freed_by: false,
    };
    let gathered = gather(events, snap, device, config)?;
    Ok(group_report(
        snap,
        device,
        MOMENT_ROWS,
        GroupBy::Site,
        &Moment::Event(event),
        gathered,
    ))
}

/// A block at a moment.
#[derive(Debug, Serialize)]
pub struct BlockAt {
    /// Offset in its segment.
    pub offset: u64,
    /// Bytes of the block.
    pub size: u64,
    /// `active_allocated`, `active_pending_free` or `inactive`.
    pub state: &'static str,
    /// Bytes requested, for blocks in use.
    pub requested: Option<u64>,
    /// Site of a block in use.
    pub site: Option<String>,
}

/// A segment at a moment.
#[derive(Debug, Serialize)]
pub struct SegmentAt {
    /// Base address.
    pub address: u64,
    /// Bytes.
    pub total_size: u64,
    /// The stream it was allocated for.
    pub stream: i64,
    /// `small` or `large`.
    pub pool: &'static str,
    /// Its blocks in address order (none past [`MAX_BLOCKS`] in the answer).
    pub blocks: Vec<BlockAt>,
}

/// The allocator's state right after an event: `segments --at EVENT`.
#[derive(Debug, Serialize)]
pub struct StateAt {
    /// The event.
    pub event: usize,
    /// Segments by address.
    pub segments: Vec<SegmentAt>,
    /// Bytes held in segments.
    pub reserved: u64,
    /// Bytes of blocks in use.
    pub allocated: u64,
    /// Blocks left out of the answer (past [`MAX_BLOCKS`]).
    pub blocks_left_out: usize,
}

/// The segments and blocks of the device right after event `event`: the final state with
/// the later events undone.
pub fn state_at(
    snap: &Snapshot,
    device: u32,
    events: &mut dyn TraceEvents,
    event: usize,
) -> std::io::Result<StateAt> {
    // the later events, read back from the end where the reading put them aside (the
    // snapshot itself is not copied: a 10 GB capture's blocks and history are tens of MiB)
    let (segments, blocks) = device_state_at(snap, device, event, events)?;
    let state = Snapshot {
        segments,
        blocks,
        ..Snapshot::default()
    };
    let mut sites = Sites::new(snap);
    let mut site_label: FxHashMap<StackId, String> = FxHashMap::default();
    let mut out = StateAt {
        event,
        segments: Vec::new(),
        reserved: 0,
        allocated: 0,
        blocks_left_out: 0,
    };
    let mut sent = 0;
    let mut order: Vec<usize> = (0..state.segments.len()).collect();
    order.sort_by_key(|&i| state.segments[i].address);
    for i in order {
        let s = &state.segments[i];
        out.reserved += s.total_size;
        let mut blocks = Vec::new();
        for b in s.blocks(&state.blocks) {
            if b.state.is_allocated() {
                out.allocated += b.size;
            }
            if sent >= MAX_BLOCKS {
                out.blocks_left_out += 1;
                continue;
            }
            sent += 1;
            let used = b.state.is_active();
            let stack = b.alloc_stack(&state.history);
            blocks.push(BlockAt {
                offset: b.address - s.address,
                size: b.size,
                state: b.state.name(),
                requested: used.then(|| b.requested(&state.history)),
                site: used.then(|| {
                    (site_label.entry(stack))
                        .or_insert_with(|| {
                            let k = sites.site(stack);
                            sites.label(k, false)
                        })
                        .clone()
                }),
            });
        }
        out.segments.push(SegmentAt {
            address: s.address,
            total_size: s.total_size,
            stream: s.stream,
            pool: s.size_class.name(),
            blocks,
        });
    }
    Ok(out)
}

/// The stacks with a frame whose file, function or `file:line:function` holds `query`
/// (case-insensitive), and how many allocations they made.
#[derive(Debug, Serialize)]
pub struct SearchHits {
    /// Stack ids (at most [`MAX_MATCHES`]).
    pub stacks: Vec<u32>,
    /// Allocations of the trace made at those stacks.
    pub allocations: usize,
    /// Requested bytes of those allocations.
    pub bytes: u64,
}

/// Search the frames of every stack.
pub fn search(snap: &Snapshot, index: &AllocIndex, query: &str) -> SearchHits {
    let q = query.to_lowercase();
    let stacks = &snap.stacks;
    let frame_hits: Vec<bool> = (0..stacks.frame_count())
        .map(|f| {
            let label = snap.frame_label(crate::model::snapshot::FrameId(f as u32), true);
            label.to_lowercase().contains(&q)
        })
        .collect();
    let stack_hits: Vec<bool> = (0..stacks.stack_count())
        .map(|s| (stacks.stack(StackId(s as u32)).iter()).any(|f| frame_hits[f.0 as usize]))
        .collect();
    let mut hits = SearchHits {
        stacks: Vec::new(),
        allocations: 0,
        bytes: 0,
    };
    for a in &index.allocs {
        if a.origin != super::index::Alloc::NONE && stack_hits[a.origin as usize] {
            hits.allocations += 1;
            hits.bytes += a.size;
        }
    }
    hits.stacks = (stack_hits.iter().enumerate())
        .filter(|(_, &h)| h)
        .map(|(s, _)| s as u32)
        .take(MAX_MATCHES)
        .collect();
    hits
}
