//! The records the allocator keeps: blocks (a node of a segment's address-ordered list),
//! segments and the free pools of one size class. Plain data; `Allocator` keeps them
//! consistent.

use std::collections::BTreeSet;

/// A block handle.
pub type BlockId = u32;
/// "No block": the end of a segment's list.
pub(super) const NONE: BlockId = u32::MAX;

/// A block: a range of a segment, free, allocated, awaiting its free, or (expandable) unmapped;
/// linked to its neighbours in address order. One cache line each (56 bytes of fields): a
/// replay of millions of live blocks misses on nearly every record it touches, and a record
/// across two lines would miss twice.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
pub(super) struct Node {
    pub(super) addr: u64,
    pub(super) size: u64,
    pub(super) requested: u64,
    pub(super) stream: u64,
    pub(super) prev: BlockId,
    pub(super) next: BlockId,
    /// Index into `segments`.
    pub(super) segment: u32,
    pub(super) small: bool,
    pub(super) allocated: bool,
    /// Freed by the program, not yet returned to the pool (`free_completed` to come).
    pub(super) pending: bool,
    pub(super) mapped: bool,
    /// `get_free_blocks_call_count` of its pool when the block last entered the pool.
    pub(super) gc_base: u64,
}

/// A segment: a cudaMalloc'd range, or the reservation of an expandable segment.
#[derive(Clone, Copy, Debug)]
pub(super) struct SegmentInfo {
    pub(super) base: u64,
    /// Page size for expandable segments, 0 for cudaMalloc'd ones.
    pub(super) page: u64,
    pub(super) alive: bool,
}

/// The free blocks of one size class (small or large), ordered as the allocator searches them.
#[derive(Default)]
pub(super) struct Pool {
    /// Free mapped blocks: (stream, size, address, id), the allocator's `BlockComparatorSize`.
    pub(super) blocks: BTreeSet<(u64, u64, u64, BlockId)>,
    /// Unmapped ranges of expandable segments: (stream, address, id).
    pub(super) unmapped: BTreeSet<(u64, u64, BlockId)>,
    /// Bytes of `blocks`, kept as they come and go (asked at every new peak of reserved).
    pub(super) free_bytes: u64,
    pub(super) get_free_blocks_calls: u64,
}
