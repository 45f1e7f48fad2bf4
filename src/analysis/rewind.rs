//! The state of one device's allocator right after a trace event, or before the first:
//! the snapshot's final segments and live blocks with the events after it undone. `segments
//! --at` and `view`'s moments show it; `simulate` starts its replay from the state before the
//! trace (each scenario's settings placing what the file does not give).
//!
//! Running back from the end, rather than forward from the first event, needs nothing the
//! file does not hold: a trace that starts mid-run (the ring buffer wrapped) does not say what
//! was there before it, but the end state is always there. Undoing an event:
//! - `alloc` at `addr`: that block was free before it, so it goes;
//! - `free_completed`: the block was still active (awaiting its free), so it comes back;
//! - `free_requested`: it was still allocated;
//! - `segment_alloc`: the segment was not there; `segment_free`: it was (empty of live
//!   blocks, as the allocator frees only empty segments);
//! - `segment_map` / `segment_unmap` (expandable segments): the file lists each mapped range
//!   as a segment, so a map undone takes its pages out of whatever range holds them, an unmap
//!   undone puts them back, joined to the ranges on its stream that it touches.
//!
//! What lies between live blocks is one free block, as the allocator merges free neighbours.
//! The allocator's own counters of a segment (`allocated_size`, …) are the end's, so they are
//! dropped. A block brought back that the final state does not have is as large as its trace
//! size (what was asked) rounded as the settings round, grown over a rest too small for the
//! allocator to have split off ([`place`]).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::model::snapshot::{
    Action, Block, BlockState, Segment, SizeClass, Snapshot, StackId, TraceEvent,
};
use crate::model::trace::TraceEvents;

use super::address_map::AddressMap;
use super::caching_allocator::{Settings, SMALL_BUFFER, SMALL_SIZE};
use super::sites::{Capture, MomentFinder};

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

/// Where a rewound segment comes from: the final state's segment (its index in
/// `Snapshot::segments`), or a trace event that freed or unmapped it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SegmentOrigin {
    Final(u32),
    Trace { stack: StackId, expandable: bool },
}

#[derive(Clone, Copy, Debug)]
struct Seg {
    size: u64,
    stream: i64,
    small: bool,
    origin: SegmentOrigin,
}

/// A live block while rewinding: its size where the final state gives it ([`UNKNOWN_SIZE`]
/// where not), the size asked for with [`PENDING`] set when its free was requested, its stack.
/// 24 bytes, so that a slot of the live map (32) lies in one cache line: the rewind of millions
/// of live blocks misses on nearly every slot it touches.
#[derive(Clone, Copy)]
struct LiveBlock {
    size: u64,
    requested: u64,
    stack: StackId,
}

impl Default for LiveBlock {
    fn default() -> Self {
        LiveBlock {
            size: 0,
            requested: 0,
            stack: StackId::MISSING,
        }
    }
}

/// The size of a [`LiveBlock`] the final state does not give (no block is 2^64 - 1 bytes).
const UNKNOWN_SIZE: u64 = u64::MAX;
/// In [`LiveBlock::requested`]: freed, waiting for other streams (`active_pending_free`).
const PENDING: u64 = 1 << 63;

/// The final segments and live blocks of a device with some of its trace undone: what
/// [`place`] lays out, under whatever settings.
pub struct Rewound {
    segs: FxHashMap<u64, Seg>,
    live: AddressMap<LiveBlock>,
}

/// The final segments and live blocks of `device`, with the events of `events` (its trace)
/// from event `first` on undone, the last first (`first` 0: the state before the trace).
pub fn rewind(
    snap: &Snapshot,
    device: u32,
    events: &mut dyn TraceEvents,
    first: usize,
) -> std::io::Result<Rewound> {
    let mut segs: FxHashMap<u64, Seg> = FxHashMap::default();
    let mut live: AddressMap<LiveBlock> = AddressMap::new();
    for (i, s) in snap.segments.iter().enumerate() {
        if s.device != device {
            continue;
        }
        // a mapped range of an expandable segment is placed as a plain segment (docs/simulate.md)
        let seg = Seg {
            size: s.total_size,
            stream: s.stream,
            small: s.size_class == SizeClass::Small,
            origin: SegmentOrigin::Final(i as u32),
        };
        segs.insert(s.address, seg);
        for b in s.blocks(&snap.blocks) {
            if b.state.is_active() {
                let pending = if b.state.is_allocated() { 0 } else { PENDING };
                let requested = b.requested(&snap.history) | pending;
                let block = LiveBlock {
                    size: b.size,
                    requested,
                    stack: b.stack,
                };
                live.insert(b.address, block);
            }
        }
    }
    // a block event is undone a few events after it is read, its live-map slot fetched meanwhile
    let mut pending: VecDeque<TraceEvent> = VecDeque::new();
    let undo_block = |live: &mut AddressMap<LiveBlock>, e: &TraceEvent| {
        let flag = match e.action {
            Action::Alloc => {
                live.remove(e.addr);
                return;
            }
            Action::FreeCompleted => PENDING,
            Action::FreeRequested => 0,
            _ => return,
        };
        match live.get_mut(e.addr) {
            Some(b) => b.requested = (b.requested & !PENDING) | flag,
            None => {
                let block = LiveBlock {
                    size: UNKNOWN_SIZE,
                    requested: e.size | flag,
                    stack: e.stack,
                };
                live.insert(e.addr, block);
            }
        }
    };
    events.visit_back_from(device, first, &mut |_, e, stream, _| {
        match e.action {
            Action::SegmentAlloc => {
                segs.remove(&e.addr);
            }
            Action::SegmentFree => {
                let seg = Seg {
                    size: e.size,
                    stream,
                    small: e.size == SMALL_BUFFER,
                    origin: SegmentOrigin::Trace {
                        stack: e.stack,
                        expandable: false,
                    },
                };
                segs.insert(e.addr, seg);
            }
            Action::SegmentMap => unmap_range(&mut segs, e.addr, e.size),
            Action::SegmentUnmap => map_range(&mut segs, e, stream),
            Action::Alloc | Action::FreeCompleted | Action::FreeRequested => {
                live.prefetch(e.addr);
                pending.push_back(*e);
                if pending.len() > 16 {
                    let first = pending.pop_front().expect("not empty");
                    undo_block(&mut live, &first);
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    for e in pending {
        undo_block(&mut live, &e);
    }
    Ok(Rewound { segs, live })
}

/// A segment of a placed state, with its live blocks.
#[derive(Clone, Debug)]
pub struct PlacedSegment {
    /// The segment's base address, as the file gives it.
    pub address: u64,
    /// The segment's size in bytes.
    pub size: u64,
    /// The CUDA stream it was allocated for (`0` is the default stream).
    pub stream: i64,
    /// Whether it belongs to the small pool (2 MiB segments of blocks up to 1 MiB).
    pub small: bool,
    pub origin: SegmentOrigin,
    /// (address, size, requested, pending_free) in address order.
    pub blocks: Vec<(u64, u64, u64, bool)>,
    /// The stack of each of `blocks`.
    pub stacks: Vec<StackId>,
}

/// A rewound state laid out: segments in address order with their live blocks.
#[derive(Clone, Debug, Default)]
pub struct Placed {
    /// Segments in address order.
    pub segments: Vec<PlacedSegment>,
    /// Live blocks of the rewound state that lie in no segment (the file disagrees with itself).
    pub unplaced_blocks: usize,
    /// Live blocks the final state does not have (freed in the undone events but allocated
    /// before them): their sizes are assumed, the request rounded.
    pub assumed_block_sizes: usize,
}

/// The rewound segments with their live blocks placed: sizes the final state does not give
/// are the request rounded as `settings` round it, grown over a gap too small to have been
/// split off.
pub fn place(rewound: &Rewound, settings: &Settings) -> Placed {
    let mut seg_list: Vec<(u64, Seg)> = rewound.segs.iter().map(|(&a, &s)| (a, s)).collect();
    seg_list.sort_unstable_by_key(|s| s.0);
    let mut blocks: Vec<(u64, LiveBlock)> = rewound.live.iter().map(|(a, &b)| (a, b)).collect();
    blocks.sort_unstable_by_key(|b| b.0);
    let mut out = Placed::default();
    let mut bi = 0;
    for (addr, seg) in seg_list {
        let end = addr + seg.size;
        while bi < blocks.len() && blocks[bi].0 < addr {
            out.unplaced_blocks += 1;
            bi += 1;
        }
        let mine_start = bi;
        while bi < blocks.len() && blocks[bi].0 < end {
            bi += 1;
        }
        let mine = &blocks[mine_start..bi];
        let mut placed = Vec::with_capacity(mine.len());
        for (k, &(a, b)) in mine.iter().enumerate() {
            let next = mine.get(k + 1).map_or(end, |b| b.0);
            let req = b.requested & !PENDING;
            let known = (b.size != UNKNOWN_SIZE).then_some(b.size);
            out.assumed_block_sizes += usize::from(known.is_none());
            let size = known.unwrap_or_else(|| {
                let rounded = settings.round_size(req).min(next - a);
                let gap = next - a - rounded;
                let split = if seg.small || settings.expandable_segments {
                    gap >= 512
                } else {
                    rounded < settings.max_split_size.unwrap_or(u64::MAX) && gap > SMALL_SIZE
                };
                if split {
                    rounded
                } else {
                    next - a
                }
            });
            placed.push((a, size, req, b.requested & PENDING != 0));
        }
        out.segments.push(PlacedSegment {
            address: addr,
            size: seg.size,
            stream: seg.stream,
            small: seg.small,
            origin: seg.origin,
            blocks: placed,
            stacks: mine.iter().map(|(_, b)| b.stack).collect(),
        });
    }
    out.unplaced_blocks += blocks.len() - bi;
    out
}

/// Take `[addr, addr + size)` out of the mapped ranges that hold it, keeping what is left of
/// them on either side.
fn unmap_range(segs: &mut FxHashMap<u64, Seg>, addr: u64, size: u64) {
    let end = addr + size;
    let hit: Vec<u64> = segs
        .iter()
        .filter(|(&a, s)| a < end && a + s.size > addr)
        .map(|(&a, _)| a)
        .collect();
    for a in hit {
        let Some(s) = segs.remove(&a) else {
            continue;
        };
        if a < addr {
            segs.insert(
                a,
                Seg {
                    size: addr - a,
                    ..s
                },
            );
        }
        if a + s.size > end {
            segs.insert(
                end,
                Seg {
                    size: a + s.size - end,
                    ..s
                },
            );
        }
    }
}

/// Put the pages an unmap event `e` took back among the mapped ranges, joined to a range on
/// its stream that ends where they start or starts where they end (one expandable segment's
/// mapped pages are one range).
fn map_range(segs: &mut FxHashMap<u64, Seg>, e: &TraceEvent, stream: i64) {
    let (addr, size) = (e.addr, e.size);
    let mut start = addr;
    let mut len = size;
    // a neighbour's pool and origin are this range's (a 2 MiB map of a large segment is not
    // small)
    let mut like = None;
    if let Some(&s) = segs.get(&(addr + size)) {
        if s.stream == stream {
            segs.remove(&(addr + size));
            len += s.size;
            like = Some(s);
        }
    }
    let before = (segs.iter())
        .find(|(&a, s)| a + s.size == addr && s.stream == stream)
        .map(|(&a, &s)| (a, s));
    if let Some((a, s)) = before {
        segs.remove(&a);
        start = a;
        len += s.size;
        like = Some(s);
    }
    let seg = like.unwrap_or(Seg {
        size,
        stream,
        small: size == SMALL_BUFFER,
        origin: SegmentOrigin::Trace {
            stack: e.stack,
            expandable: true,
        },
    });
    segs.insert(start, Seg { size: len, ..seg });
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
/// disk as they were read, and then read back from the end without being held); sizes the
/// final state does not give placed as the allocator's default settings would.
pub fn rewind_with(
    snap: &mut Snapshot,
    device: u32,
    index: usize,
    events: &mut dyn TraceEvents,
) -> std::io::Result<()> {
    let (rewound_segments, rewound_blocks) = device_state_at(snap, device, index, events)?;
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
    let shift = blocks.len() as u32;
    blocks.extend(rewound_blocks);
    segments.extend(rewound_segments.into_iter().map(|mut s| {
        s.block_start += shift;
        s
    }));
    // legacy `history` ranges index the old block list: blocks brought here keep none
    snap.segments = segments;
    snap.blocks = blocks;
    Ok(())
}

/// Device `device`'s segments and blocks right after its event `index`, as [`rewind_with`]
/// puts them in place, read from `snap` without changing it: the segments in address order,
/// each one's `block_start` indexing the blocks returned (which name no `history` entry).
pub fn device_state_at(
    snap: &Snapshot,
    device: u32,
    index: usize,
    events: &mut dyn TraceEvents,
) -> std::io::Result<(Vec<Segment>, Vec<Block>)> {
    let rewound = rewind(snap, device, events, index + 1)?;
    let placed = place(&rewound, &Settings::default());
    drop(rewound);
    let mut segments: Vec<Segment> = Vec::new();
    let mut blocks: Vec<Block> = Vec::new();
    let free = |address: u64, size: u64| Block {
        address,
        size,
        requested_size: None,
        state: BlockState::Inactive,
        stack: StackId::MISSING,
        history_start: 0,
        history_len: 0,
        has_frames_key: false,
    };
    for s in placed.segments {
        let start = blocks.len() as u32;
        let mut at = s.address;
        for (&(b, size, requested, pending), &stack) in s.blocks.iter().zip(&s.stacks) {
            if b > at {
                blocks.push(free(at, b - at));
            }
            blocks.push(Block {
                address: b,
                size,
                requested_size: Some(requested),
                state: if pending {
                    BlockState::ActivePendingFree
                } else {
                    BlockState::ActiveAllocated
                },
                stack,
                history_start: 0,
                history_len: 0,
                has_frames_key: true,
            });
            at = at.max(b + size);
        }
        if at < s.address + s.size {
            blocks.push(free(at, s.address + s.size - at));
        }
        let mut seg = match s.origin {
            SegmentOrigin::Final(i) => snap.segments[i as usize].clone(),
            SegmentOrigin::Trace { stack, expandable } => Segment {
                device,
                address: s.address,
                total_size: s.size,
                stream: s.stream,
                size_class: if s.small {
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
                stack,
                block_start: 0,
                block_len: 0,
            },
        };
        (seg.allocated_size, seg.active_size) = (None, None);
        seg.requested_size = None;
        seg.address = s.address;
        seg.total_size = s.size;
        seg.block_start = start;
        seg.block_len = blocks.len() as u32 - start;
        segments.push(seg);
    }
    Ok((segments, blocks))
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
    fn a_live_block_and_its_key_fill_half_a_cache_line() {
        assert_eq!(std::mem::size_of::<LiveBlock>(), 24);
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
