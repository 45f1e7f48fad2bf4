//! The state a replay starts from: the final segments and live blocks with every trace event
//! undone, placed under a scenario's settings.

use rustc_hash::FxHashMap;

use crate::model::snapshot::{Action, SizeClass, Snapshot, TraceEvent};
use crate::model::trace::TraceEvents;

use super::super::address_map::AddressMap;
use super::super::caching_allocator::{Settings, SMALL_BUFFER, SMALL_SIZE};
use super::report::Note;

/// A segment before the trace's first event, with its active blocks.
#[derive(Clone, Debug)]
pub struct InitialSegment {
    /// The segment's base address, as the file gives it.
    pub address: u64,
    /// The segment's size in bytes.
    pub size: u64,
    /// The CUDA stream it was allocated for (`0` is the default stream).
    pub stream: i64,
    /// Whether it belongs to the small pool (2 MiB segments of blocks up to 1 MiB).
    pub small: bool,
    /// (address, size, requested, pending_free) in address order.
    pub blocks: Vec<(u64, u64, u64, bool)>,
}

/// The state before a trace's first event, as the replay starts from.
#[derive(Clone, Debug, Default)]
pub struct InitialState {
    /// Segments live before the first event, in address order.
    pub segments: Vec<InitialSegment>,
    /// Live blocks of the rewound state that lie in no segment (the file disagrees with itself).
    pub unplaced_blocks: usize,
    /// Live blocks before the trace that the final state does not have (freed in the trace but
    /// never allocated in it): their sizes are assumed, the request rounded.
    pub assumed_block_sizes: usize,
}

impl InitialState {
    /// What the replay assumed to start where the trace starts, when it did not start empty.
    pub fn note(&self) -> Option<Note> {
        (!self.segments.is_empty()).then(|| Note::StartState {
            segments: self.segments.len(),
            bytes: self.segments.iter().map(|s| s.size).sum(),
            live_blocks: self.segments.iter().map(|s| s.blocks.len()).sum(),
            assumed_block_sizes: self.assumed_block_sizes,
        })
    }
}

/// A live block while rewinding: size when the final state has it ([`UNKNOWN_SIZE`] when not),
/// requested, pending free. 24 bytes, so that a slot of the live map (32) lies in one cache
/// line: the rewind of millions of live blocks misses on nearly every slot it touches.
type LiveBlock = (u64, u64, bool);

/// The size of a [`LiveBlock`] the final state does not give (no block is 2^64 - 1 bytes).
const UNKNOWN_SIZE: u64 = u64::MAX;

/// The final segments and active blocks with every trace event undone: what
/// [`InitialState`] is placed from, whatever the settings.
pub struct Rewound {
    /// address -> (size, stream, small)
    segs: FxHashMap<u64, (u64, i64, bool)>,
    /// address -> (size if known, requested, pending)
    live: AddressMap<LiveBlock>,
}

/// The final segments and active blocks of `device`, with `events` (its trace) undone from
/// the last.
pub fn rewind(
    snap: &Snapshot,
    device: u32,
    events: &mut dyn TraceEvents,
) -> std::io::Result<Rewound> {
    let mut segs: FxHashMap<u64, (u64, i64, bool)> = FxHashMap::default();
    let mut live: AddressMap<LiveBlock> = AddressMap::new();
    for s in snap.segments_on(device) {
        // a mapped range of an expandable segment is placed as a plain segment (docs/simulate.md)
        segs.insert(
            s.address,
            (s.total_size, s.stream, s.size_class == SizeClass::Small),
        );
        for b in s.blocks(&snap.blocks) {
            if b.state.is_active() {
                live.insert(
                    b.address,
                    (b.size, b.requested(&snap.history), !b.state.is_allocated()),
                );
            }
        }
    }
    // a block event is undone a few events after it is read, its live-map slot fetched meanwhile
    let mut pending: std::collections::VecDeque<TraceEvent> = std::collections::VecDeque::new();
    let undo_block = |live: &mut AddressMap<LiveBlock>, e: &TraceEvent| match e.action {
        Action::Alloc => {
            live.remove(e.addr);
        }
        Action::FreeCompleted => match live.get_mut(e.addr) {
            Some(b) => b.2 = true,
            None => {
                live.insert(e.addr, (UNKNOWN_SIZE, e.size, true));
            }
        },
        Action::FreeRequested => match live.get_mut(e.addr) {
            Some(b) => b.2 = false,
            None => {
                live.insert(e.addr, (UNKNOWN_SIZE, e.size, false));
            }
        },
        _ => {}
    };
    events.visit_back_from(device, 0, &mut |_, e, stream, _| {
        match e.action {
            Action::SegmentAlloc => {
                segs.remove(&e.addr);
            }
            Action::SegmentFree => {
                segs.insert(e.addr, (e.size, stream, e.size == SMALL_BUFFER));
            }
            // pages of an expandable segment: the file lists each mapped range as a segment,
            // so a map undone takes its pages out of whatever range holds them, an unmap
            // undone puts them back, joined to the ranges they touch
            Action::SegmentMap => unmap_range(&mut segs, e.addr, e.size),
            Action::SegmentUnmap => {
                map_range(&mut segs, e.addr, e.size, stream);
            }
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

/// The state before the first event under `settings`: the final segments and active blocks,
/// with every trace event undone (segments the trace made removed, those it freed put back;
/// allocations the trace made removed, those it freed put back). Free blocks are the gaps, as
/// the allocator merges free neighbours. A block that is not in the final state has its
/// rounded size, grown over a gap too small to have been split off: the rewound segments with their blocks
/// placed (sizes the final state does not give rounded as `settings` round them).
pub fn place(rewound: &Rewound, settings: &Settings) -> InitialState {
    let mut seg_list: Vec<(u64, (u64, i64, bool))> =
        rewound.segs.iter().map(|(&a, &s)| (a, s)).collect();
    seg_list.sort_unstable_by_key(|s| s.0);
    let mut blocks: Vec<(u64, LiveBlock)> = rewound.live.iter().map(|(a, &b)| (a, b)).collect();
    blocks.sort_unstable_by_key(|b| b.0);
    let mut out = InitialState::default();
    let mut bi = 0;
    for (addr, (size, stream, small)) in seg_list {
        let end = addr + size;
        while bi < blocks.len() && blocks[bi].0 < addr {
            out.unplaced_blocks += 1;
            bi += 1;
        }
        let mut mine = Vec::new();
        while bi < blocks.len() && blocks[bi].0 < end {
            mine.push(blocks[bi]);
            bi += 1;
        }
        let mut placed = Vec::with_capacity(mine.len());
        for (k, &(a, (known, req, pending))) in mine.iter().enumerate() {
            let next = mine.get(k + 1).map_or(end, |b| b.0);
            let known = (known != UNKNOWN_SIZE).then_some(known);
            out.assumed_block_sizes += usize::from(known.is_none());
            let size = known.unwrap_or_else(|| {
                let rounded = settings.round_size(req).min(next - a);
                let gap = next - a - rounded;
                let split = if small || settings.expandable_segments {
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
            placed.push((a, size, req, pending));
        }
        out.segments.push(InitialSegment {
            address: addr,
            size,
            stream,
            small,
            blocks: placed,
        });
    }
    out.unplaced_blocks += blocks.len() - bi;
    out
}

/// Take `[addr, addr + size)` out of the mapped ranges (address -> (size, stream, small)) that
/// hold it, keeping what is left of them on either side.
fn unmap_range(segs: &mut FxHashMap<u64, (u64, i64, bool)>, addr: u64, size: u64) {
    let end = addr + size;
    let hit: Vec<u64> = segs
        .iter()
        .filter(|(&a, &(s, _, _))| a < end && a + s > addr)
        .map(|(&a, _)| a)
        .collect();
    for a in hit {
        let Some((s, stream, small)) = segs.remove(&a) else {
            continue;
        };
        if a < addr {
            segs.insert(a, (addr - a, stream, small));
        }
        if a + s > end {
            segs.insert(end, (a + s - end, stream, small));
        }
    }
}

/// Put `[addr, addr + size)` back among the mapped ranges, joined to a range that ends where it
/// starts or starts where it ends (one expandable segment's mapped pages are one range).
fn map_range(segs: &mut FxHashMap<u64, (u64, i64, bool)>, addr: u64, size: u64, stream: i64) {
    let mut start = addr;
    let mut len = size;
    // a neighbour's pool is this range's (a 2 MiB map of a large segment is not small)
    let mut small = None;
    if let Some(&(s, st, sm)) = segs.get(&(addr + size)) {
        if st == stream {
            segs.remove(&(addr + size));
            len += s;
            small = Some(sm);
        }
    }
    let before = segs
        .iter()
        .find(|(&a, &(s, st, _))| a + s == addr && st == stream)
        .map(|(&a, &(s, _, sm))| (a, s, sm));
    if let Some((a, s, sm)) = before {
        segs.remove(&a);
        start = a;
        len += s;
        small = Some(sm);
    }
    let small = small.unwrap_or(size == SMALL_BUFFER);
    segs.insert(start, (len, stream, small));
}
