//! The per-segment map of `python -m torch.cuda._memory_viz stats` (its `segsum`), with the same
//! totals: reserved, allocated (bytes requested by live tensors), and free split into external
//! (blocks not allocated) and internal (rounding inside allocated blocks).

use serde::Serialize;

use super::timeline::Timelines;
use crate::model::snapshot::{BlockState, Snapshot};

/// One character of the map stands for this many bytes of a segment (20 MiB, as `_memory_viz`).
pub const PAGE_SIZE: u64 = 20 << 20;

/// A segment's map has at most this many characters: 320 GiB at [`PAGE_SIZE`], more than any
/// device holds. A larger segment (only a damaged or hand-made file has one) is drawn with
/// a coarser page, a whole number of [`PAGE_SIZE`]s, so the output is bounded by the file's
/// segment count, never by a size it states (a 2^62-byte segment is 2^38 pages).
pub const MAX_MAP_CHARS: u64 = 16_384;

/// The per-segment map of `_memory_viz stats`: every segment with its blocks' totals.
#[derive(Debug, Serialize)]
pub struct SegmentMap {
    /// Device indices whose segments are shown.
    pub devices: Vec<u32>,
    /// Bytes one character of `map` stands for ([`PAGE_SIZE`], 20 MiB).
    pub page_size: u64,
    /// Segments by size, then allocated block bytes, then file order (`_memory_viz`'s order).
    pub segments: Vec<SegmentRow>,
    /// Sums over `segments`.
    pub totals: Totals,
    /// The moment shown when it is not the end (`segments --at`); absent at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<SegmentsAt>,
}

/// The moment a map shows (`segments --at`): as asked, and the event it fell on per device.
#[derive(Debug, Serialize)]
pub struct SegmentsAt {
    /// The moment as `--at` took it (`peak`, `event 500`, `NAME:end@2`).
    pub moment: String,
    /// Per device shown, the trace event (0-based, as `trace` numbers them) the state is
    /// right after.
    pub events: Vec<DeviceEvent>,
}

/// A device and one of its trace events.
#[derive(Debug, Serialize)]
pub struct DeviceEvent {
    pub device: u32,
    pub event_index: usize,
}

/// Totals over the segments shown, in bytes.
#[derive(Debug, Default, Serialize)]
pub struct Totals {
    /// Number of segments shown.
    pub segments: usize,
    /// Sum of their sizes.
    pub reserved_bytes: u64,
    /// Requested bytes of `active_allocated` blocks (`_memory_viz`'s total_allocated).
    pub allocated_bytes: u64,
    /// `free_external_bytes + free_internal_bytes`.
    pub free_bytes: u64,
    /// Bytes in blocks that are not `active_allocated` (inactive and pending free).
    pub free_external_bytes: u64,
    /// Block size minus requested size of `active_allocated` blocks.
    pub free_internal_bytes: u64,
    /// Internal share of the free bytes, percent (`None` when nothing is free).
    pub internal_percent: Option<f64>,
    /// The same segments counted as `summary` counts them (the allocator's measures, under
    /// the same names), so the two commands never show two numbers under one name.
    pub allocator: AllocatorTotals,
}

/// `summary`'s counters, summed over the map's devices.
#[derive(Debug, Default, Serialize)]
pub struct AllocatorTotals {
    /// `active_allocated` blocks at their rounded size.
    pub allocated_bytes: u64,
    /// Allocated plus pending-free blocks, at their rounded size.
    pub active_bytes: u64,
    /// `active_pending_free` blocks: freed, awaiting another stream.
    pub pending_free_bytes: u64,
    /// Inactive blocks.
    pub free_bytes: u64,
    /// Requested bytes over active blocks.
    pub requested_bytes: u64,
    /// Active minus requested.
    pub internal_fragmentation_bytes: u64,
}

/// One segment and what its blocks hold.
#[derive(Debug, Serialize)]
pub struct SegmentRow {
    /// Position in the file's `segments` list.
    pub index: usize,
    /// Device index of the segment.
    pub device: u32,
    /// The segment's base address.
    pub address: u64,
    /// The segment's size in bytes.
    pub total_size: u64,
    /// The CUDA stream it was allocated for (`0` is the default stream).
    pub stream: i64,
    /// `segment_pool_id` as PyTorch prints it, `(0, 0)` for the default pool.
    pub pool: String,
    /// `small` or `large`.
    pub size_class: &'static str,
    /// Number of blocks in the segment, free and in use.
    pub blocks: usize,
    /// Requested bytes of its `active_allocated` blocks.
    pub allocated_bytes: u64,
    /// Bytes of its blocks that are not `active_allocated` (inactive and pending free).
    pub free_external_bytes: u64,
    /// Block size minus requested size, over its `active_allocated` blocks.
    pub free_internal_bytes: u64,
    /// Internal share of its free bytes, percent; None when nothing is free.
    pub internal_percent: Option<f64>,
    /// Its largest `inactive` block in bytes (pending-free blocks not counted).
    pub largest_free_block_bytes: u64,
    /// `_memory_viz`'s picture of the segment, one character per 20 MiB page: `a-z` a page
    /// filled by one block, `0-9` partly filled by several (9 = 90%), `*` full with several,
    /// space free.
    pub map: String,
    /// Bytes one character of `map` stands for, where it is more than the map's `page_size`:
    /// a segment over 320 GiB is drawn in at most [`MAX_MAP_CHARS`] characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map_page_size: Option<u64>,
}

fn pct(internal: u64, external: u64) -> Option<f64> {
    let total = internal + external;
    (total != 0).then(|| internal as f64 / total as f64 * 100.0)
}

/// Segments of `devices`, in `_memory_viz`'s order: by size, then by active bytes, then file
/// order.
pub fn segment_map(snap: &Snapshot, devices: &[u32]) -> SegmentMap {
    let mut order: Vec<(u64, u64, usize)> = snap
        .segments
        .iter()
        .enumerate()
        .filter(|(_, s)| devices.contains(&s.device))
        .map(|(i, s)| {
            let active: u64 = s
                .blocks(&snap.blocks)
                .iter()
                .filter(|b| b.state == BlockState::ActiveAllocated)
                .map(|b| b.size)
                .sum();
            (s.total_size, active, i)
        })
        .collect();
    order.sort();
    let mut totals = Totals::default();
    let mut rows = Vec::with_capacity(order.len());
    for (_, _, i) in order {
        let seg = &snap.segments[i];
        let mut ext = 0u64;
        let mut int = 0u64;
        let mut alloc = 0u64;
        let mut largest_free = 0u64;
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let mut offset = 0u64;
        // sums saturate: a hand-made file's sizes (each below 2^63) may add up past 2^64
        for b in seg.blocks(&snap.blocks) {
            if b.state == BlockState::ActiveAllocated {
                let req = b.requested(&snap.history);
                ranges.push((offset, req));
                alloc = alloc.saturating_add(req);
                int = int.saturating_add(b.size.saturating_sub(req));
            } else {
                ext = ext.saturating_add(b.size);
                if b.state == BlockState::Inactive {
                    largest_free = largest_free.max(b.size);
                }
            }
            offset = offset.saturating_add(b.size);
        }
        totals.segments += 1;
        totals.reserved_bytes = totals.reserved_bytes.saturating_add(seg.total_size);
        totals.allocated_bytes = totals.allocated_bytes.saturating_add(alloc);
        totals.free_external_bytes = totals.free_external_bytes.saturating_add(ext);
        totals.free_internal_bytes = totals.free_internal_bytes.saturating_add(int);
        let page = map_page_size(seg.total_size);
        rows.push(SegmentRow {
            index: i,
            device: seg.device,
            address: seg.address,
            total_size: seg.total_size,
            stream: seg.stream,
            pool: seg.pool_name(),
            size_class: seg.size_class.name(),
            blocks: seg.block_len as usize,
            allocated_bytes: alloc,
            free_external_bytes: ext,
            free_internal_bytes: int,
            internal_percent: pct(int, ext),
            largest_free_block_bytes: largest_free,
            map: page_map(seg.total_size, page, &ranges),
            map_page_size: (page != PAGE_SIZE).then_some(page),
        });
    }
    totals.free_bytes = (totals.free_external_bytes).saturating_add(totals.free_internal_bytes);
    totals.internal_percent = pct(totals.free_internal_bytes, totals.free_external_bytes);
    let a = &mut totals.allocator;
    for d in
        super::snapshot_summary::snapshot_summary(snap, devices, &mut Timelines::new(false)).devices
    {
        a.allocated_bytes += d.allocated_bytes;
        a.active_bytes += d.active_bytes;
        a.pending_free_bytes += d.pending_free_bytes;
        a.free_bytes += d.free_bytes;
        a.requested_bytes += d.requested_bytes;
        a.internal_fragmentation_bytes += d.internal_fragmentation_bytes;
    }
    SegmentMap {
        devices: devices.to_vec(),
        page_size: PAGE_SIZE,
        segments: rows,
        totals,
        at: None,
    }
}

/// The page a segment of `total` bytes is drawn with: [`PAGE_SIZE`], or the fewest whole
/// [`PAGE_SIZE`]s that draw it in [`MAX_MAP_CHARS`] characters.
fn map_page_size(total: u64) -> u64 {
    let pages = total.div_ceil(PAGE_SIZE);
    pages.div_ceil(MAX_MAP_CHARS).max(1) * PAGE_SIZE
}

/// `segsum`'s picture, a character per `page` bytes: ranges are (offset, requested bytes) of
/// the allocated blocks, in offset order.
fn page_map(total: u64, page: u64, ranges: &[(u64, u64)]) -> String {
    if total == 0 {
        return String::new();
    }
    let pages = total.div_ceil(page) as usize;
    let mut occupied = vec![b' '; pages];
    let mut frac = vec![0.0f64; pages];
    for (i, &(start, size)) in ranges.iter().enumerate() {
        if size == 0 || start >= total {
            continue;
        }
        let finish = start.saturating_add(size).min(total);
        let first = (start / page) as usize;
        let last = finish.div_ceil(page) as usize;
        let m = b'a' + (i % 26) as u8;
        for j in first..last.min(pages) {
            let s = start.max(j as u64 * page);
            let e = finish.min((j as u64 + 1).saturating_mul(page));
            frac[j] += (e - s) as f64 / page as f64;
            if occupied[j] != b' ' {
                let k = ((frac[j] * 10.0) as usize).min(10);
                occupied[j] = b"0123456789*"[k];
            } else {
                occupied[j] = m;
            }
        }
    }
    String::from_utf8(occupied).expect("ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_map_matches_segsum() {
        let p = PAGE_SIZE;
        // one block filling two pages and a half, then free
        assert_eq!(page_map(4 * p, p, &[(0, 2 * p + p / 2)]), "aaa ");
        // two blocks sharing a page: 0.5 + 0.25 → '7'
        assert_eq!(page_map(p, p, &[(0, p / 2), (p / 2, p / 4)]), "7");
        assert_eq!(page_map(p, p, &[(0, p / 2), (p / 2, p / 2)]), "*");
    }

    #[test]
    fn a_segment_past_320_gib_is_drawn_in_a_bounded_map() {
        let p = PAGE_SIZE;
        assert_eq!(map_page_size(MAX_MAP_CHARS * p), p);
        assert_eq!(map_page_size(MAX_MAP_CHARS * p + 1), 2 * p);
        for total in [1u64 << 52, 1 << 62, (1 << 63) - 1, u64::MAX] {
            let page = map_page_size(total);
            assert_eq!(page % p, 0);
            let map = page_map(total, page, &[(0, 1 << 20), (1 << 20, total)]);
            assert_eq!(map.len() as u64, total.div_ceil(page));
            assert!(map.len() as u64 <= MAX_MAP_CHARS, "{total}: {}", map.len());
            // the two blocks fill the segment: every page full of one or both
            assert!(
                map.bytes().all(|c| c == b'*' || c == b'b'),
                "{total}: {map}"
            );
        }
    }
}
