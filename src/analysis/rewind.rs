//! The segments and blocks of one device as they stood right after a trace event: the
//! snapshot's final state, with the events after that one undone (`segments --at`).
//!
//! Running back from the end, rather than forward from the first event, needs nothing the
//! file does not hold: a trace that starts mid-run (the ring buffer wrapped) does not say what
//! was there before it, but the end state is always there. Undoing an event:
//! - `alloc` at `addr`: that block was free before it, so it goes;
//! - `free_completed`: the block was still active (awaiting its free), so it comes back;
//! - `free_requested`: it was still allocated;
//! - `segment_alloc`: the segment was not there; `segment_free`: it was (empty of live
//!   blocks, as the allocator frees only empty segments);
//! - `segment_map` / `segment_unmap` (expandable segments): those pages were unmapped /
//!   mapped; mapped ranges that touch on one stream form one segment, as at the end.
//!
//! What lies between live blocks is one free block, as the allocator merges free neighbours.
//! The allocator's own counters of a segment (`allocated_size`, …) are the end's, so they are
//! dropped. A block brought back is as large as its trace size (what was asked) rounded as the
//! allocator rounds by default (to 512 bytes); one the allocator did not split (the rest too
//! small to cache) was larger, by less than that rest.

use std::collections::BTreeMap;

use crate::model::snapshot::{
    Action, Block, BlockState, Segment, SizeClass, Snapshot, StackId, TraceEvent,
};

use super::caching_allocator::{round_size, ROUNDUP_INTERVALS};
use super::sites::{Capture, MomentFinder};
use crate::model::trace::TraceEvents;

/// The index of device `device`'s event among `events` (wherever they are) that is
/// `capture`'s moment, the peak being at event `peak` (the timeline's); None when no event is
/// (the end, an OOM the trace does not have).
pub fn find_moment(
    events: &mut dyn TraceEvents,
    device: u32,
    capture: Capture,
    peak: Option<usize>,
) -> std::io::Result<Option<usize>> {
    // a moment the peak or the count says is found without a walk (it would read every
    // event back from disk)
    let count = events.count(device);
    match capture {
        Capture::Peak => return Ok(peak.filter(|&p| p < count)),
        Capture::Event(i) => return Ok((i < count).then_some(i)),
        Capture::Last => return Ok(count.checked_sub(1)),
        _ => {}
    }
    let mut finder = MomentFinder::new(capture);
    let mut found = None;
    events.visit(device, &mut |i, e, _, _| {
        if finder.at(i, e, peak) {
            found = Some(i);
        }
        Ok(())
    })?;
    Ok(found)
}

/// A live block of the rewound state.
#[derive(Clone, Copy)]
struct Live {
    size: u64,
    requested: Option<u64>,
    state: BlockState,
    stack: StackId,
}

/// A segment of the rewound state: where it is, what it is, and its live blocks by address.
struct Seg {
    size: u64,
    template: Segment,
    live: BTreeMap<u64, Live>,
}

/// Replace device `device`'s segments and blocks in `snap` by those right after its trace's
/// event `index` (0-based, as `trace` numbers them). Other devices are left as they are.
pub fn rewind_to(snap: &mut Snapshot, device: u32, index: usize) {
    if snap.trace(device).is_none() {
        return;
    }
    // (the traces are lent out while the state they undo changes)
    let kept = Snapshot {
        traces: std::mem::take(&mut snap.traces),
        ..Snapshot::default()
    };
    // (a kept trace cannot fail to be read)
    let _ = rewind_with(snap, device, index, &mut &kept);
    snap.traces = kept.traces;
}

/// [`rewind_to`] undoing the events of `events` (wherever they are: kept, or put aside on
/// disk as they were read, and then read back from the end without being held).
pub fn rewind_with(
    snap: &mut Snapshot,
    device: u32,
    index: usize,
    events: &mut dyn TraceEvents,
) -> std::io::Result<()> {
    let mut segs: BTreeMap<u64, Seg> = BTreeMap::new();
    for s in snap.segments.iter().filter(|s| s.device == device) {
        let live = s
            .blocks(&snap.blocks)
            .iter()
            .filter(|b| b.state != BlockState::Inactive)
            .map(|b| {
                let live = Live {
                    size: b.size,
                    requested: Some(b.requested(&snap.history)),
                    state: b.state,
                    stack: b.stack,
                };
                (b.address, live)
            })
            .collect();
        let mut template = s.clone();
        (template.allocated_size, template.active_size) = (None, None);
        template.requested_size = None;
        let seg = Seg {
            size: s.total_size,
            template,
            live,
        };
        segs.insert(s.address, seg);
    }
    events.visit_back(device, index, &mut |_, e, stream, _| {
        undo(&mut segs, stream, e, device);
        Ok(())
    })?;
    // the device's segments and blocks replaced, in address order
    let mut segments: Vec<Segment> = Vec::new();
    let mut blocks: Vec<Block> = Vec::new();
    for s in snap.segments.iter().filter(|s| s.device != device) {
        let mut s = s.clone();
        let start = blocks.len() as u32;
        blocks.extend_from_slice(s.blocks(&snap.blocks));
        s.block_start = start;
        segments.push(s);
    }
    for (addr, s) in segs {
        let start = blocks.len() as u32;
        let mut at = addr;
        let free = |at: u64, size: u64| Block {
            address: at,
            size,
            requested_size: None,
            state: BlockState::Inactive,
            stack: StackId::MISSING,
            history_start: 0,
            history_len: 0,
            has_frames_key: false,
        };
        for (&b, l) in &s.live {
            if b > at {
                blocks.push(free(at, b - at));
            }
            blocks.push(Block {
                address: b,
                size: l.size,
                requested_size: l.requested,
                state: l.state,
                stack: l.stack,
                history_start: 0,
                history_len: 0,
                has_frames_key: true,
            });
            at = at.max(b + l.size);
        }
        if at < addr + s.size {
            blocks.push(free(at, addr + s.size - at));
        }
        let mut seg = s.template;
        seg.address = addr;
        seg.total_size = s.size;
        seg.block_start = start;
        seg.block_len = blocks.len() as u32 - start;
        segments.push(seg);
    }
    // legacy `history` ranges index the old block list: blocks brought here keep none
    snap.segments = segments;
    snap.blocks = blocks;
    Ok(())
}

/// Undo one event of device `device`'s trace on the state.
fn undo(segs: &mut BTreeMap<u64, Seg>, stream: i64, e: &TraceEvent, device: u32) {
    let containing = |segs: &mut BTreeMap<u64, Seg>, addr: u64| -> Option<u64> {
        let (&base, s) = segs.range(..=addr).next_back()?;
        (addr < base + s.size).then_some(base)
    };
    match e.action {
        Action::Alloc => {
            if let Some(base) = containing(segs, e.addr) {
                segs.get_mut(&base).unwrap().live.remove(&e.addr);
            }
        }
        Action::FreeCompleted | Action::FreeRequested => {
            let state = if e.action == Action::FreeCompleted {
                BlockState::ActivePendingFree
            } else {
                BlockState::ActiveAllocated
            };
            if let Some(base) = containing(segs, e.addr) {
                let live = &mut segs.get_mut(&base).unwrap().live;
                // a trace gives the size asked for; the block is that rounded as the
                // allocator rounds by default
                let b = live.entry(e.addr).or_insert(Live {
                    size: round_size(e.size, &[1; ROUNDUP_INTERVALS]),
                    requested: Some(e.size),
                    state,
                    stack: e.stack,
                });
                b.state = state;
            }
        }
        Action::SegmentAlloc => {
            segs.remove(&e.addr);
        }
        Action::SegmentFree => {
            segs.entry(e.addr)
                .or_insert_with(|| new_segment(stream, e, device, false));
        }
        Action::SegmentMap => unmap(segs, e.addr, e.size),
        Action::SegmentUnmap => {
            segs.entry(e.addr)
                .or_insert_with(|| new_segment(stream, e, device, true));
            merge_touching(segs);
        }
        _ => {}
    }
}

/// A segment that the trace freed (or unmapped) and that stood before: what the event says.
fn new_segment(stream: i64, e: &TraceEvent, device: u32, expandable: bool) -> Seg {
    Seg {
        size: e.size,
        template: Segment {
            device,
            address: e.addr,
            total_size: e.size,
            stream,
            size_class: if e.size <= 2 << 20 && !expandable {
                SizeClass::Small
            } else {
                SizeClass::Large
            },
            size_class_derived: true,
            pool_id: None,
            is_expandable: expandable.then_some(true),
            allocated_size: None,
            active_size: None,
            requested_size: None,
            stack: e.stack,
            block_start: 0,
            block_len: 0,
        },
        live: BTreeMap::new(),
    }
}

/// Take `[addr, addr + size)` out of the segments (mapped pages undone): a segment it covers
/// goes, one it cuts shrinks or splits in two.
fn unmap(segs: &mut BTreeMap<u64, Seg>, addr: u64, size: u64) {
    let end = addr + size;
    let hit: Vec<u64> = segs
        .range(..end)
        .filter(|(&b, s)| b + s.size > addr)
        .map(|(&b, _)| b)
        .collect();
    for base in hit {
        let s = segs.remove(&base).unwrap();
        let s_end = base + s.size;
        if base < addr {
            let mut left = Seg {
                size: addr - base,
                template: s.template.clone(),
                live: s.live.range(..addr).map(|(&a, &l)| (a, l)).collect(),
            };
            left.template.total_size = left.size;
            segs.insert(base, left);
        }
        if end < s_end {
            let mut right = Seg {
                size: s_end - end,
                template: s.template.clone(),
                live: s.live.range(end..).map(|(&a, &l)| (a, l)).collect(),
            };
            right.template.address = end;
            segs.insert(end, right);
        }
    }
}

/// Expandable segments whose mapped ranges touch, on one stream, are one segment.
fn merge_touching(segs: &mut BTreeMap<u64, Seg>) {
    let bases: Vec<u64> = segs.keys().copied().collect();
    let mut i = 0;
    while i + 1 < bases.len() {
        let (a, b) = (bases[i], bases[i + 1]);
        let joins = match (segs.get(&a), segs.get(&b)) {
            (Some(x), Some(y)) => {
                a + x.size == b
                    && x.template.is_expandable == Some(true)
                    && y.template.is_expandable == Some(true)
                    && x.template.stream == y.template.stream
            }
            _ => false,
        };
        if joins {
            let y = segs.remove(&b).unwrap();
            let x = segs.get_mut(&a).unwrap();
            x.size += y.size;
            x.live.extend(y.live);
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(action: Action, addr: u64, size: u64) -> TraceEvent {
        TraceEvent {
            action,
            addr,
            size,
            ..TraceEvent::default()
        }
    }

    /// One 2 MiB segment at the end holding a block at its start; the trace made the segment,
    /// allocated A and B, freed A.
    fn snap() -> Snapshot {
        let mut s = Snapshot::default();
        s.segments.push(Segment {
            device: 0,
            address: 0x1000,
            total_size: 2 << 20,
            stream: 0,
            size_class: SizeClass::Small,
            size_class_derived: false,
            pool_id: None,
            is_expandable: None,
            allocated_size: Some(512),
            active_size: Some(512),
            requested_size: Some(512),
            stack: StackId::MISSING,
            block_start: 0,
            block_len: 2,
        });
        let block = |address, size, state| Block {
            address,
            size,
            requested_size: Some(size),
            state,
            stack: StackId::MISSING,
            history_start: 0,
            history_len: 0,
            has_frames_key: true,
        };
        s.blocks.push(block(0x1000, 512, BlockState::Inactive));
        s.blocks
            .push(block(0x1200, (2 << 20) - 512, BlockState::ActiveAllocated));
        let mut t = crate::model::snapshot::DeviceTrace::default();
        for e in [
            event(Action::SegmentAlloc, 0x1000, 2 << 20),
            event(Action::Alloc, 0x1000, 512),
            event(Action::Alloc, 0x1200, (2 << 20) - 512),
            event(Action::FreeRequested, 0x1000, 512),
            event(Action::FreeCompleted, 0x1000, 512),
        ] {
            t.stream_index(0).unwrap();
            t.events.push(e);
        }
        s.traces.push(t);
        s
    }

    fn states(s: &Snapshot) -> Vec<(u64, u64, BlockState)> {
        s.blocks
            .iter()
            .map(|b| (b.address, b.size, b.state))
            .collect()
    }

    #[test]
    fn undoing_events_brings_back_what_stood_then() {
        // after the first alloc: A live, the rest free
        let mut s = snap();
        rewind_to(&mut s, 0, 1);
        assert_eq!(
            states(&s),
            [
                (0x1000, 512, BlockState::ActiveAllocated),
                (0x1200, (2 << 20) - 512, BlockState::Inactive)
            ]
        );
        assert_eq!(s.segments[0].allocated_size, None);
        // after the free was requested: A still active, awaiting its free
        let mut s = snap();
        rewind_to(&mut s, 0, 3);
        assert_eq!(s.blocks[0].state, BlockState::ActivePendingFree);
        // before the segment existed (after event 0 it did; there is no "before 0", so the
        // last event kept is the segment's alloc): one free block
        let mut s = snap();
        rewind_to(&mut s, 0, 0);
        assert_eq!(states(&s), [(0x1000, 2 << 20, BlockState::Inactive)]);
        // at the last event: the end state
        let mut s = snap();
        rewind_to(&mut s, 0, 4);
        assert_eq!(states(&s), states(&snap()));
    }
}
