//! Giving memory back: freeing cached whole segments (`release_block`), before an OOM
//! (`release_available_cached_blocks`, `release_cached_blocks`, which `torch.cuda.empty_cache()`
//! runs too) and above the garbage-collection threshold (`garbage_collect_cached_blocks`).

use super::allocator::{Allocator, SegmentAction, SegmentEvent};
use super::blocks::{BlockId, NONE};

impl Allocator {
    /// Whether garbage collection can act: a threshold is set and there is a limit to be a fraction
    /// of.
    pub(super) fn gc_enabled(&self) -> bool {
        self.limit.is_some() && self.settings.garbage_collection_threshold > 0.0
    }

    /// cudaFree of a whole cached segment.
    fn release_block(&mut self, id: BlockId) {
        let n = self.nodes[id as usize];
        self.remove_free(id);
        self.reserved -= n.size;
        self.segments[n.segment as usize].alive = false;
        self.free_nodes.push(id);
        self.events.push(SegmentEvent {
            action: SegmentAction::SegmentFree,
            size: n.size,
        });
    }

    /// Whether the block is its segment's only block (the whole segment, free to give back).
    pub(super) fn is_whole_segment(&self, id: BlockId) -> bool {
        let n = &self.nodes[id as usize];
        n.prev == NONE && n.next == NONE
    }

    /// Free cached oversize (≥ max_split_size) segments of the pool until `size` bytes are free.
    pub(super) fn release_available_cached_blocks(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
    ) -> bool {
        let Some(max_split) = self.settings.max_split_size else {
            return false;
        };
        let p = usize::from(!small);
        let key = size.max(max_split);
        let first = self.pools[p]
            .blocks
            .range((stream, key, 0, 0)..)
            .next()
            .copied();
        match first {
            Some(b) if b.0 == stream && !self.is_expandable(b.3) => {
                if self.is_whole_segment(b.3) {
                    self.release_block(b.3);
                }
                true
            }
            _ => {
                // no single block is large enough: free oversize ones, largest first
                let candidates: Vec<(u64, u64, u64, BlockId)> = self.pools[p]
                    .blocks
                    .range(..(stream, key, 0, 0))
                    .rev()
                    .take_while(|b| b.0 == stream && b.1 >= max_split)
                    .copied()
                    .collect();
                let mut released = 0;
                for b in candidates {
                    if released >= key {
                        break;
                    }
                    if !self.is_expandable(b.3) && self.is_whole_segment(b.3) {
                        self.release_block(b.3);
                        released += b.1;
                    }
                }
                released >= key
            }
        }
    }

    /// `release_cached_blocks` (also `torch.cuda.empty_cache()`): free every cached whole
    /// segment, unmap the free pages of expandable ones; large pool first.
    pub fn release_cached_blocks(&mut self) {
        for p in [1, 0] {
            let free: Vec<BlockId> = self.pools[p].blocks.iter().map(|b| b.3).collect();
            let mut to_unmap = Vec::new();
            for id in free {
                if self.is_expandable(id) {
                    to_unmap.push(id);
                } else if self.is_whole_segment(id) {
                    self.release_block(id);
                }
            }
            for id in to_unmap {
                self.unmap_block(id);
                // a segment with nothing mapped left is given back whole
                if self.is_whole_segment(id) && !self.nodes[id as usize].mapped {
                    self.remove_unmapped(id);
                    let seg = self.nodes[id as usize].segment;
                    self.segments[seg as usize].alive = false;
                    self.free_nodes.push(id);
                }
            }
        }
    }

    /// `garbage_collect_cached_blocks`: above the threshold, free cached whole large segments
    /// that went unused for longer than the average, until under it.
    pub(super) fn garbage_collect(&mut self) {
        let Some(limit) = self.limit else { return };
        let threshold = (self.settings.garbage_collection_threshold * limit as f64) as u64;
        if self.reserved <= threshold {
            return;
        }
        let target = self.reserved - threshold;
        let calls = self.pools[1].get_free_blocks_calls;
        let age = |me: &Allocator, id: BlockId| calls - me.nodes[id as usize].gc_base;
        let (mut total_age, mut count) = (0u64, 0u64);
        for b in &self.pools[1].blocks {
            if self.is_whole_segment(b.3) {
                total_age += age(self, b.3);
                count += 1;
            }
        }
        let mut reclaimed = 0;
        let mut freed = true;
        while reclaimed < target && freed && count > 0 {
            let threshold_age = total_age as f64 / count as f64;
            freed = false;
            let candidates: Vec<BlockId> = self.pools[1].blocks.iter().map(|b| b.3).collect();
            for id in candidates {
                if self.is_whole_segment(id)
                    && !self.is_expandable(id)
                    && age(self, id) as f64 >= threshold_age
                {
                    freed = true;
                    reclaimed += self.nodes[id as usize].size;
                    total_age -= age(self, id);
                    count -= 1;
                    self.release_block(id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::settings::Settings;
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn max_split_size_keeps_big_blocks_whole_and_frees_them_before_an_oom() {
        let mut s = Settings::default();
        s.apply("max_split_size_mb:100").unwrap();
        let mut a = Allocator::new(s, Some(300 * MIB));
        let big = a.malloc(200 * MIB, 0).unwrap();
        a.free_completed(big);
        // a small request may not use the oversize cached block: a new segment instead
        let small = a.malloc(30 * MIB, 0).unwrap();
        assert_eq!(a.reserved, 230 * MIB);
        // 150 MiB does not fit beside the cached 200 MiB: it is released first
        let _ = a.malloc(150 * MIB, 0).unwrap();
        assert_eq!(a.reserved, 180 * MIB);
        a.free_completed(small);
        let ev: Vec<_> = a.take_segment_events().map(|e| e.action).collect();
        assert_eq!(
            ev,
            [
                SegmentAction::SegmentAlloc,
                SegmentAction::SegmentAlloc,
                SegmentAction::SegmentFree,
                SegmentAction::SegmentAlloc
            ]
        );
    }
}
