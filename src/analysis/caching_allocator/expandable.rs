//! Expandable segments (`expandable_segments:True`): one large reservation of address space per
//! stream and pool, mapped and unmapped in pages of 2 MiB (small pool) or 20 MiB (large pool):
//! `find_expandable_block`, `map_block`, `unmap_block`.

use super::allocator::{Allocator, SegmentAction, SegmentEvent};
use super::blocks::{BlockId, Node, NONE};
use super::sizes::{LARGE_BUFFER, SMALL_BUFFER};

/// Address space of one expandable segment: far more than any device holds, as the
/// allocator reserves 1.125 times the device's memory.
const EXPANDABLE_RESERVATION: u64 = 1 << 42;

impl Allocator {
    fn allocatable(&self, id: BlockId) -> bool {
        id != NONE && {
            let n = &self.nodes[id as usize];
            !n.allocated && !n.pending
        }
    }

    fn find_expandable_block(&mut self, small: bool, stream: u64, size: u64) -> BlockId {
        let p = usize::from(!small);
        let has_room = |me: &Allocator, mut b: BlockId| {
            let mut bytes = 0;
            while bytes < size && me.allocatable(b) {
                bytes += me.nodes[b as usize].size;
                b = me.nodes[b as usize].next;
            }
            bytes >= size
        };
        for &(s, _, id) in self.pools[p].unmapped.range((stream, 0, 0)..) {
            if s != stream {
                break;
            }
            let prev = self.nodes[id as usize].prev;
            let c = if self.allocatable(prev) { prev } else { id };
            if has_room(self, c) {
                return c;
            }
        }
        let page = if small { SMALL_BUFFER } else { LARGE_BUFFER };
        let addr = self.reserve_address(EXPANDABLE_RESERVATION);
        let id = self.new_segment(addr, EXPANDABLE_RESERVATION, stream, small, page);
        self.insert_unmapped(id);
        id
    }

    /// A block of `size` bytes from an expandable segment of the pool, mapping pages as needed;
    /// `None` when mapping them would pass the limit.
    pub(super) fn try_allocate_expandable_block(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
    ) -> Option<BlockId> {
        let mut c = self.find_expandable_block(small, stream, size);
        if !self.nodes[c as usize].mapped {
            let s = self.nodes[c as usize].size.min(size);
            if !self.map_block(c, s) {
                return None;
            }
        }
        while self.nodes[c as usize].size < size {
            let remaining = size - self.nodes[c as usize].size;
            let next = self.nodes[c as usize].next;
            let s = remaining.min(self.nodes[next as usize].size);
            if !self.map_block(next, s) {
                return None;
            }
            c = next;
        }
        self.remove_free(c);
        Some(c)
    }

    fn map_block(&mut self, id: BlockId, size: u64) -> bool {
        let n = self.nodes[id as usize];
        let seg = self.segments[n.segment as usize];
        let first = (n.addr - seg.base) / seg.page;
        let last = (n.addr + size - seg.base).div_ceil(seg.page);
        let mapped = ((last - first) * seg.page).min(n.size);
        if self.over_limit(mapped) {
            return false;
        }
        self.remove_unmapped(id);
        if mapped < n.size {
            let rest = self.new_node(Node {
                addr: n.addr + mapped,
                size: n.size - mapped,
                prev: id,
                next: n.next,
                mapped: false,
                ..n
            });
            if n.next != NONE {
                self.nodes[n.next as usize].prev = rest;
            }
            self.nodes[id as usize].next = rest;
            self.insert_unmapped(rest);
        }
        let m = &mut self.nodes[id as usize];
        m.mapped = true;
        m.size = mapped;
        self.try_merge(id, self.nodes[id as usize].prev);
        self.try_merge(id, self.nodes[id as usize].next);
        self.insert_free(id);
        self.reserved += mapped;
        self.segments_created += 1;
        self.events.push(SegmentEvent {
            action: SegmentAction::SegmentMap,
            size: mapped,
        });
        true
    }

    /// Unmap the whole pages inside a free block of an expandable segment.
    pub(super) fn unmap_block(&mut self, id: BlockId) {
        let n = self.nodes[id as usize];
        let seg = self.segments[n.segment as usize];
        let begin = seg.base + (n.addr - seg.base).div_ceil(seg.page) * seg.page;
        let end = seg.base + (n.addr + n.size - seg.base) / seg.page * seg.page;
        if begin >= end {
            return;
        }
        self.remove_free(id);
        let mut prev = n.prev;
        if begin > n.addr {
            let before = self.new_node(Node {
                addr: n.addr,
                size: begin - n.addr,
                prev: n.prev,
                next: id,
                ..n
            });
            if n.prev != NONE {
                self.nodes[n.prev as usize].next = before;
            }
            self.insert_free(before);
            prev = before;
        }
        let mut next = n.next;
        let block_end = n.addr + n.size;
        if end < block_end {
            let after = self.new_node(Node {
                addr: end,
                size: block_end - end,
                prev: id,
                next: n.next,
                ..n
            });
            if n.next != NONE {
                self.nodes[n.next as usize].prev = after;
            }
            self.insert_free(after);
            next = after;
        }
        let b = &mut self.nodes[id as usize];
        b.addr = begin;
        b.size = end - begin;
        b.prev = prev;
        b.next = next;
        b.mapped = false;
        self.try_merge(id, prev);
        self.try_merge(id, next);
        self.insert_unmapped(id);
        self.reserved -= end - begin;
        self.events.push(SegmentEvent {
            action: SegmentAction::SegmentUnmap,
            size: end - begin,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::settings::Settings;
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn expandable_segments_grow_by_pages() {
        let mut s = Settings::default();
        s.apply("expandable_segments:True").unwrap();
        let mut a = Allocator::new(s, None);
        let x = a.malloc(30 * MIB, 0).unwrap();
        assert_eq!(a.reserved, 40 * MIB, "two 20 MiB pages");
        let y = a.malloc(15 * MIB, 0).unwrap();
        assert_eq!(
            a.reserved,
            60 * MIB,
            "10 MiB left in the mapped page + one more page"
        );
        assert_eq!(a.segments().len(), 1);
        a.free_completed(x);
        a.free_completed(y);
        a.release_cached_blocks();
        assert_eq!(a.reserved, 0);
        assert!(a.segments().is_empty());
    }
}
