//! The allocator of one device: its blocks and pools, the search for a free block
//! (`get_free_block`), splitting and merging, new segments, and the program's frees. Expandable
//! segments (`expandable.rs`) and giving memory back (`release.rs`) add to `Allocator` from
//! their own files.

use serde::Serialize;

use super::blocks::{BlockId, Node, Pool, SegmentInfo, NONE};
use super::settings::Settings;
use super::sizes::{allocation_size, LARGE_BUFFER, MIN_BLOCK_SIZE, SMALL_SIZE};

/// A segment event the model performs (what the allocator writes to its trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentAction {
    /// A cudaMalloc of a new segment.
    SegmentAlloc,
    /// A cudaFree of a whole segment, given back.
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages of an expandable segment unmapped, given back.
    SegmentUnmap,
}

impl SegmentAction {
    /// The trace's spelling (`segment_alloc`, …).
    pub fn name(self) -> &'static str {
        match self {
            SegmentAction::SegmentAlloc => "segment_alloc",
            SegmentAction::SegmentFree => "segment_free",
            SegmentAction::SegmentMap => "segment_map",
            SegmentAction::SegmentUnmap => "segment_unmap",
        }
    }
}

/// A segment event the model performed: what and how many bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentEvent {
    /// What the model did.
    pub action: SegmentAction,
    /// Bytes of the segment, or of the pages mapped or unmapped.
    pub size: u64,
}

/// A segment as `torch.cuda.memory_snapshot()` would list it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentView {
    /// Whether it belongs to the small pool (blocks of at most 1 MiB).
    pub small: bool,
    /// Whether it is a mapped range of an expandable segment.
    pub expandable: bool,
    /// Bytes of the segment (of the contiguous mapped range, for an expandable one).
    pub size: u64,
}

/// The allocator of one device.
pub struct Allocator {
    /// The `PYTORCH_CUDA_ALLOC_CONF` settings being modelled.
    pub settings: Settings,
    /// The most bytes segments may hold (`set_per_process_memory_fraction`'s
    /// `allowed_memory_maximum`, or the device's memory); `None` is unlimited.
    pub limit: Option<u64>,
    /// Every block record, indexed by [`BlockId`]; freed slots are listed in `free_nodes`.
    pub(super) nodes: Vec<Node>,
    /// Slots of `nodes` no longer in use, reused by the next new block.
    pub(super) free_nodes: Vec<BlockId>,
    /// Every segment ever made, indexed by a block's `segment` (dead ones kept, `alive` false).
    pub(super) segments: Vec<SegmentInfo>,
    /// Whether any segment made so far is expandable (else no block is, and the search for a
    /// free block need not read the segment of the block it found).
    pub(super) any_expandable: bool,
    /// The free blocks of the small (0) and large (1) pool.
    pub(super) pools: [Pool; 2],
    /// Start of the next new segment in the model's own address space (from 2^56 up).
    pub(super) next_address: u64,
    /// Segment bytes (cudaMalloc'd plus mapped pages).
    pub reserved: u64,
    /// Bytes of allocated blocks (rounded sizes).
    pub allocated: u64,
    /// Bytes requested by live allocations.
    pub requested: u64,
    /// Blocks freed by the program and not yet returned to the pool.
    pub pending_bytes: u64,
    /// cudaMalloc calls plus expandable page mappings.
    pub segments_created: u64,
    /// Allocations that failed once, freed cached blocks and tried again.
    pub num_alloc_retries: u64,
    /// Segment events since the last `take_segment_events`.
    pub(super) events: Vec<SegmentEvent>,
    /// Where the next cudaMalloc of this size lands (a replay passes the recorded address, so
    /// that best-fit ties between equal blocks break as they did on the device).
    pub address_hint: Option<(u64, u64)>,
}

impl Allocator {
    /// An empty allocator under `settings`; `limit` is the most bytes segments may hold (`None`:
    /// unlimited).
    pub fn new(settings: Settings, limit: Option<u64>) -> Allocator {
        Allocator {
            settings,
            limit,
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            segments: Vec::new(),
            any_expandable: false,
            pools: [Pool::default(), Pool::default()],
            // above any real device address, so segments placed from a file never collide
            next_address: 1 << 56,
            reserved: 0,
            allocated: 0,
            requested: 0,
            pending_bytes: 0,
            segments_created: 0,
            num_alloc_retries: 0,
            events: Vec::new(),
            address_hint: None,
        }
    }

    /// The segment events performed since the last call, in order.
    pub fn take_segment_events(&mut self) -> std::vec::Drain<'_, SegmentEvent> {
        self.events.drain(..)
    }

    /// Whether segment events were performed since the last `take_segment_events`.
    pub fn has_segment_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// A block record, reusing a freed slot when there is one.
    pub(super) fn new_node(&mut self, n: Node) -> BlockId {
        match self.free_nodes.pop() {
            Some(id) => {
                self.nodes[id as usize] = n;
                id
            }
            None => {
                if self.nodes.len() == self.nodes.capacity() {
                    grow_on_huge_pages(&mut self.nodes);
                }
                self.nodes.push(n);
                (self.nodes.len() - 1) as BlockId
            }
        }
    }

    /// Index into `pools` of the block's pool: 0 small, 1 large.
    pub(super) fn pool_of(&self, id: BlockId) -> usize {
        usize::from(!self.nodes[id as usize].small)
    }

    /// Put a free mapped block in its pool (and start its garbage-collection age).
    pub(super) fn insert_free(&mut self, id: BlockId) {
        let p = self.pool_of(id);
        let calls = self.pools[p].get_free_blocks_calls;
        let n = &mut self.nodes[id as usize];
        n.gc_base = calls;
        let key = (n.stream, n.size, n.addr, id);
        if self.pools[p].blocks.insert(key) {
            self.pools[p].free_bytes += key.1;
        }
    }

    /// Take a block out of its pool's free blocks; false when it was not there.
    pub(super) fn remove_free(&mut self, id: BlockId) -> bool {
        let n = self.nodes[id as usize];
        let p = self.pool_of(id);
        let removed = self.pools[p].blocks.remove(&(n.stream, n.size, n.addr, id));
        if removed {
            self.pools[p].free_bytes -= n.size;
        }
        removed
    }

    /// Put an unmapped range of an expandable segment in its pool.
    pub(super) fn insert_unmapped(&mut self, id: BlockId) {
        let n = self.nodes[id as usize];
        let p = self.pool_of(id);
        self.pools[p].unmapped.insert((n.stream, n.addr, id));
    }

    /// Take an unmapped range out of its pool; false when it was not there.
    pub(super) fn remove_unmapped(&mut self, id: BlockId) -> bool {
        let n = self.nodes[id as usize];
        let p = self.pool_of(id);
        self.pools[p].unmapped.remove(&(n.stream, n.addr, id))
    }

    /// Whether the block lies in an expandable segment.
    pub(super) fn is_expandable(&self, id: BlockId) -> bool {
        self.any_expandable && self.segments[self.nodes[id as usize].segment as usize].page != 0
    }

    /// The next free range of the model's address space for `size` bytes (kept 20 MiB-aligned).
    pub(super) fn reserve_address(&mut self, size: u64) -> u64 {
        let a = self.next_address;
        self.next_address += size.div_ceil(LARGE_BUFFER) * LARGE_BUFFER;
        a
    }

    /// Put an existing segment in place (the state before a trace's first event): `blocks` are
    /// (address, size, requested, pending) of its active blocks; the gaps between are free.
    pub fn place_segment(
        &mut self,
        address: u64,
        size: u64,
        stream: u64,
        small: bool,
        blocks: &[(u64, u64, u64, bool)],
    ) -> Vec<(u64, BlockId)> {
        let segment = self.segments.len() as u32;
        self.segments.push(SegmentInfo {
            base: address,
            page: 0,
            alive: true,
        });
        self.reserved += size;
        let mut placed = Vec::new();
        let mut at = address;
        let end = address + size;
        let mut prev = NONE;
        let mut push = |me: &mut Allocator, addr: u64, size: u64, active: Option<(u64, bool)>| {
            let id = me.new_node(Node {
                addr,
                size,
                requested: active.map_or(0, |a| a.0),
                stream,
                prev,
                next: NONE,
                segment,
                small,
                allocated: active.is_some_and(|a| !a.1),
                pending: active.is_some_and(|a| a.1),
                mapped: true,
                gc_base: 0,
            });
            if prev != NONE {
                me.nodes[prev as usize].next = id;
            }
            prev = id;
            match active {
                None => me.insert_free(id),
                Some((req, pending)) => {
                    if pending {
                        me.pending_bytes += size;
                    } else {
                        me.allocated += size;
                        me.requested += req;
                    }
                }
            }
            id
        };
        for &(a, s, req, pending) in blocks {
            if a < at || a + s > end {
                continue; // overlapping or outside: the file's blocks disagree; leave it out
            }
            if a > at {
                push(self, at, a - at, None);
            }
            let id = push(self, a, s, Some((req, pending)));
            placed.push((a, id));
            at = a + s;
        }
        if at < end {
            push(self, at, end - at, None);
        }
        placed
    }

    /// `malloc`: a block for `size` bytes on `stream`, or `None` where the allocator raises
    /// an out-of-memory error.
    pub fn malloc(&mut self, size: u64, stream: u64) -> Option<BlockId> {
        let orig = size;
        let size = self.settings.round_size(size);
        let small = size <= SMALL_SIZE;
        let alloc_size = allocation_size(size);
        let mut block = self.get_free_block(small, stream, size);
        if block.is_none() {
            if self.gc_enabled() {
                self.garbage_collect();
            }
            block = self.alloc_block(small, stream, size, alloc_size, false);
            if block.is_none() && self.release_available_cached_blocks(small, stream, size) {
                block = self.alloc_block(small, stream, size, alloc_size, false);
            }
            if block.is_none() {
                self.release_cached_blocks();
                block = self.alloc_block(small, stream, size, alloc_size, true);
            }
        }
        let id = block?;
        let split = self.should_split(id, size);
        Some(self.alloc_found_block(id, size, orig, split))
    }

    fn should_split(&self, id: BlockId, size: u64) -> bool {
        let n = &self.nodes[id as usize];
        let remaining = n.size - size;
        if n.small || self.settings.expandable_segments {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.settings.max_split() && remaining > SMALL_SIZE
        }
    }

    fn alloc_found_block(&mut self, id: BlockId, size: u64, orig: u64, split: bool) -> BlockId {
        let id = if split {
            let rest = self.nodes[id as usize];
            let new = self.new_node(Node {
                size,
                next: id,
                ..rest
            });
            if rest.prev != NONE {
                self.nodes[rest.prev as usize].next = new;
            }
            let r = &mut self.nodes[id as usize];
            r.prev = new;
            r.addr += size;
            r.size -= size;
            self.insert_free(id);
            new
        } else {
            id
        };
        let n = &mut self.nodes[id as usize];
        n.allocated = true;
        n.pending = false;
        n.requested = orig;
        self.allocated += n.size;
        self.requested += orig;
        id
    }

    fn get_free_block(&mut self, small: bool, stream: u64, size: u64) -> Option<BlockId> {
        let p = usize::from(!small);
        if self.gc_enabled() {
            self.pools[p].get_free_blocks_calls += 1;
        }
        let pool = &self.pools[p];
        let mut it = pool.blocks.range((stream, size, 0, 0)..);
        let mut cur = *it.next()?;
        if cur.0 != stream {
            return None;
        }
        if self.is_expandable(cur.3) {
            if self.settings.expandable_segments {
                // best fit by the size a block can grow to, not the size it has
                let expandable_size = |b: BlockId| {
                    let n = &self.nodes[b as usize];
                    let next = n.next;
                    n.size
                        + if next != NONE && !self.nodes[next as usize].mapped {
                            self.nodes[next as usize].size
                        } else {
                            0
                        }
                };
                for next in it {
                    if !self.is_expandable(cur.3)
                        || next.0 != stream
                        || expandable_size(next.3) >= expandable_size(cur.3)
                    {
                        break;
                    }
                    cur = *next;
                }
            } else {
                // expandable segments turned off after some were made: skip them
                cur = *it.find(|b| b.0 != stream || !self.is_expandable(b.3))?;
                if cur.0 != stream {
                    return None;
                }
            }
        }
        let max_split = self.settings.max_split();
        if size < max_split && cur.1 >= max_split {
            return None; // an oversized block for a small request
        }
        if size >= max_split
            && cur.1 >= size.saturating_add(self.settings.max_non_split_rounding_size)
        {
            return None; // an oversized block for a large request
        }
        // the caller reads the block's record next: start loading it while the tree is walked
        self.prefetch(cur.3);
        self.pools[p].blocks.remove(&cur);
        self.pools[p].free_bytes -= cur.1;
        Some(cur.3)
    }

    /// Whether reserving `bytes` more would pass the memory limit.
    pub(super) fn over_limit(&self, bytes: u64) -> bool {
        self.limit.is_some_and(|l| self.reserved + bytes > l)
    }

    fn alloc_block(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
        alloc_size: u64,
        is_retry: bool,
    ) -> Option<BlockId> {
        if is_retry {
            self.num_alloc_retries += 1;
        }
        if self.over_limit(alloc_size) {
            return None;
        }
        if self.settings.expandable_segments {
            return self.try_allocate_expandable_block(small, stream, size);
        }
        let addr = match self.address_hint.take() {
            Some((size, addr)) if size == alloc_size => addr,
            _ => self.reserve_address(alloc_size),
        };
        self.reserved += alloc_size;
        self.segments_created += 1;
        self.events.push(SegmentEvent {
            action: SegmentAction::SegmentAlloc,
            size: alloc_size,
        });
        Some(self.new_segment(addr, alloc_size, stream, small, 0))
    }

    /// A new segment (`page` 0: cudaMalloc'd, mapped; else an expandable one, all unmapped)
    /// as one block covering it.
    pub(super) fn new_segment(
        &mut self,
        addr: u64,
        size: u64,
        stream: u64,
        small: bool,
        page: u64,
    ) -> BlockId {
        let segment = self.segments.len() as u32;
        self.segments.push(SegmentInfo {
            base: addr,
            page,
            alive: true,
        });
        self.any_expandable |= page != 0;
        self.new_node(Node {
            addr,
            size,
            requested: 0,
            stream,
            prev: NONE,
            next: NONE,
            segment,
            small,
            allocated: false,
            pending: false,
            mapped: page == 0,
            gc_base: 0,
        })
    }

    /// Start loading the block's record, for a use a little later (a replay that knows which
    /// block an event ahead frees). A hint only: any id is harmless.
    #[inline]
    pub fn prefetch(&self, id: BlockId) {
        if let Some(n) = self.nodes.get(id as usize) {
            crate::memory::prefetch(n);
        }
    }

    /// Start loading the records of the block's neighbours (what freeing it merges with); its
    /// own record should be loaded already ([`Allocator::prefetch`] a little earlier).
    #[inline]
    pub fn prefetch_neighbours(&self, id: BlockId) {
        if let Some(n) = self.nodes.get(id as usize) {
            for b in [n.prev, n.next] {
                if let Some(m) = self.nodes.get(b as usize) {
                    crate::memory::prefetch(m);
                }
            }
        }
    }

    /// Merge free neighbour `src` into `dst` (both free, same mapped state).
    pub(super) fn try_merge(&mut self, dst: BlockId, src: BlockId) {
        if src == NONE {
            return;
        }
        let s = self.nodes[src as usize];
        if s.allocated || s.pending || s.mapped != self.nodes[dst as usize].mapped {
            return;
        }
        if s.mapped {
            self.remove_free(src);
        } else {
            self.remove_unmapped(src);
        }
        let d = &mut self.nodes[dst as usize];
        if d.prev == src {
            d.addr = s.addr;
            d.prev = s.prev;
            if s.prev != NONE {
                self.nodes[s.prev as usize].next = dst;
            }
        } else {
            d.next = s.next;
            if s.next != NONE {
                self.nodes[s.next as usize].prev = dst;
            }
        }
        self.nodes[dst as usize].size += s.size;
        self.free_nodes.push(src);
    }

    /// The program freed the block (`free_requested`): it stops counting as allocated.
    pub fn free_requested(&mut self, id: BlockId) {
        let n = &mut self.nodes[id as usize];
        if !n.allocated {
            return;
        }
        n.allocated = false;
        n.pending = true;
        self.allocated -= n.size;
        self.requested -= n.requested;
        self.pending_bytes += n.size;
    }

    /// The block returns to the pool (`free_completed`): merged with free neighbours.
    pub fn free_completed(&mut self, id: BlockId) {
        if self.nodes[id as usize].allocated {
            self.free_requested(id);
        }
        let n = &mut self.nodes[id as usize];
        if !n.pending {
            return;
        }
        n.pending = false;
        self.pending_bytes -= n.size;
        self.try_merge(id, self.nodes[id as usize].prev);
        self.try_merge(id, self.nodes[id as usize].next);
        self.insert_free(id);
    }

    /// Mapped free bytes and the largest free block (what an allocation could still use).
    pub fn free_stats(&self) -> (u64, u64) {
        let mut total = 0;
        let mut largest = 0;
        for p in &self.pools {
            total += p.free_bytes;
            // the largest of each stream is the last of its run (ordered by stream, size)
            let mut last = p.blocks.last();
            while let Some(b) = last {
                largest = largest.max(b.1);
                last = p.blocks.range(..(b.0, 0, 0, 0)).next_back();
            }
        }
        (total, largest)
    }

    /// The segments as `torch.cuda.memory_snapshot()` would list them (an expandable segment
    /// is one entry per contiguous mapped range), in address order.
    pub fn segments(&self) -> Vec<SegmentView> {
        let mut heads: Vec<BlockId> = Vec::new();
        let mut live = vec![false; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            live[i] = self.segments[n.segment as usize].alive;
        }
        for id in &self.free_nodes {
            live[*id as usize] = false;
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if live[i] && n.mapped && (n.prev == NONE || !self.nodes[n.prev as usize].mapped) {
                heads.push(i as BlockId);
            }
        }
        heads.sort_by_key(|&h| self.nodes[h as usize].addr);
        heads
            .into_iter()
            .map(|h| {
                let mut size = 0;
                let mut b = h;
                while b != NONE && self.nodes[b as usize].mapped {
                    size += self.nodes[b as usize].size;
                    b = self.nodes[b as usize].next;
                }
                let n = &self.nodes[h as usize];
                SegmentView {
                    small: n.small,
                    expandable: self.segments[n.segment as usize].page != 0,
                    size,
                }
            })
            .collect()
    }

    /// The block's size in bytes (rounded, and grown over any remainder not split off).
    pub fn block_size(&self, id: BlockId) -> u64 {
        self.nodes[id as usize].size
    }
}

/// Double `v`'s room, a large one on huge pages where the kernel gives them: the block records
/// are read at random, and with 4 KiB pages nearly every read is a TLB miss too.
fn grow_on_huge_pages<T>(v: &mut Vec<T>) {
    let want = (v.capacity() * 2).max(64);
    let mut grown: Vec<T> = Vec::with_capacity(want);
    crate::memory::advise_huge_pages(&grown);
    grown.append(v);
    *v = grown;
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn splits_and_merges_back() {
        let mut a = Allocator::new(Settings::default(), None);
        let x = a.malloc(3 * MIB, 0).unwrap();
        let y = a.malloc(3 * MIB, 0).unwrap();
        assert_eq!(a.reserved, LARGE_BUFFER);
        assert_eq!(a.segments_created, 1);
        a.free_completed(x);
        a.free_completed(y);
        assert_eq!(a.free_stats(), (LARGE_BUFFER, LARGE_BUFFER));
        // 1 MiB left over is not split off a large block: the request gets all 20 MiB
        let z = a.malloc(19 * MIB, 0).unwrap();
        assert_eq!(a.block_size(z), 20 * MIB);
        // 17 MiB gets an 18 MiB segment (2 MiB rounding), whole; 5 MiB one of 20 MiB, split
        let w = a.malloc(17 * MIB, 0).unwrap();
        assert_eq!(a.block_size(w), 18 * MIB);
        let v = a.malloc(5 * MIB, 0).unwrap();
        assert_eq!(a.block_size(v), 5 * MIB);
        assert_eq!(a.segments_created, 3);
        assert_eq!(a.reserved, 58 * MIB);
    }
}
