//! What the page asks about one thing: an allocation (its whole stack, lifetime, category and
//! the annotation ranges open when it was made), a moment (what was live then, the `top --at`
//! table; the segments and blocks then, `segments --at`), and a search over frames.
//!
//! The moment's answers replay the events from where the reading put them aside (the
//! `analysis::sites` gathering and `analysis::rewind`), so they are exactly the commands'.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::analysis::categories::Judgement;
use crate::analysis::groups::{group_report, GroupBy, GroupReport};
use crate::analysis::moment::Moment;
use crate::analysis::rewind::device_state_at;
use crate::analysis::sites::{gather, Capture, Extra, LiveConfig, Sites};
use crate::model::snapshot::{Block, HistoryEntry, Segment, Snapshot, StackId};
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
    /// The rule that decided it: the evidence (where it was made and freed) and its meaning.
    pub rule: String,
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
    let judged = Judgement::from_bytes(a.judged);
    let span = index.span(id)?;
    let start_x = span.start_x;
    Some(AllocDetail {
        span,
        python,
        native,
        freed_by,
        category: judged.category().name(),
        rule: judged.rule(),
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
        phases: None,
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

/// The allocator's state right after an event (`segments --at EVENT`), or at the dump.
#[derive(Debug, Serialize)]
pub struct StateAt {
    /// The event; None: the snapshot's own state, at the dump.
    pub event: Option<usize>,
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
    let segments: Vec<&Segment> = state.segments.iter().collect();
    Ok(describe(snap, segments, &state.blocks, &[], Some(event)))
}

/// The segments and blocks of the device when the snapshot was taken (a capture without a
/// trace has only these).
pub fn state_at_end(snap: &Snapshot, device: u32) -> StateAt {
    let segments = snap.segments_on(device).collect();
    describe(snap, segments, &snap.blocks, &snap.history, None)
}

/// `segments` (their blocks in `blocks`; `history`: legacy blocks' stacks) of `snap` as the
/// page draws them, after `event`.
fn describe(
    snap: &Snapshot,
    mut segments: Vec<&Segment>,
    blocks: &[Block],
    history: &[HistoryEntry],
    event: Option<usize>,
) -> StateAt {
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
    segments.sort_by_key(|s| s.address);
    for s in segments {
        out.reserved += s.total_size;
        let mut kept = Vec::new();
        for b in s.blocks(blocks) {
            if b.state.is_allocated() {
                out.allocated += b.size;
            }
            if sent >= MAX_BLOCKS {
                out.blocks_left_out += 1;
                continue;
            }
            sent += 1;
            let used = b.state.is_active();
            let stack = b.alloc_stack(history);
            kept.push(BlockAt {
                offset: b.address - s.address,
                size: b.size,
                state: b.state.name(),
                requested: used.then(|| b.requested(history)),
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
            blocks: kept,
        });
    }
    out
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

/// Rows an event list sends at most.
pub const MAX_EVENT_ROWS: usize = 500;

/// One allocating or freeing event, as the event list shows it (PyTorch's memory viewer lists
/// them so: each `alloc` and `free` in order, with its stack on click).
#[derive(Debug, Serialize)]
pub struct EventRow {
    /// The event's index.
    pub event: usize,
    /// `alloc` or `free`.
    pub action: &'static str,
    /// The allocation it made or freed (`/api/alloc?id=`).
    pub id: u32,
    /// Bytes requested.
    pub size: u64,
    /// The allocation's site (for a trace: its op).
    pub site: String,
    /// Its category, for an input that has them.
    pub category: Option<&'static str>,
}

/// The allocating and freeing events among events `from..to` of the trace.
#[derive(Debug, Serialize)]
pub struct EventList {
    /// The first event asked for.
    pub from: usize,
    /// Past the last event asked for.
    pub to: usize,
    /// Events in the trace.
    pub events: usize,
    /// The allocs and frees among them, in order (segment events and the others are left
    /// out), at most [`MAX_EVENT_ROWS`].
    pub rows: Vec<EventRow>,
}

/// The allocs and frees among events `from..from + count` (one pass over the allocations).
pub fn events(index: &AllocIndex, from: usize, count: usize) -> EventList {
    let n = index.events();
    let from = from.min(n);
    let to = from.saturating_add(count.min(MAX_EVENT_ROWS)).min(n);
    let mut rows: Vec<EventRow> = Vec::new();
    let row = |event: usize, action, id: usize, a: &super::index::Alloc| EventRow {
        event,
        action,
        id: id as u32,
        size: a.size,
        site: index.sites[a.site as usize].clone(),
        category: (a.category != super::index::NO_CATEGORY)
            .then(|| super::index::CATEGORIES[a.category as usize]),
    };
    for (id, a) in index.allocs.iter().enumerate() {
        if let Some(e) = a.start().filter(|e| (from..to).contains(e)) {
            rows.push(row(e, "alloc", id, a));
        }
        if let Some(e) = a.end().filter(|e| (from..to).contains(e)) {
            rows.push(row(e, "free", id, a));
        }
    }
    rows.sort_by_key(|r| (r.event, r.action == "alloc"));
    EventList {
        from,
        to,
        events: n,
        rows,
    }
}
