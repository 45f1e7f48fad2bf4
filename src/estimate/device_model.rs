//! An estimated run's device memory: its storages' allocations and frees, in the order the
//! program made them, replayed through the caching-allocator model
//! (`analysis::caching_allocator`, the one `simulate` validates on real traces) to give what
//! CUDA would have reserved after every op, and where a device of a given size runs out.

use std::collections::HashMap;

use crate::analysis::caching_allocator::{Allocator, BlockId, Settings};

/// One storage of the estimated device appearing (`bytes` > 0, already rounded to 512 as
/// the allocator's blocks are) or dying (`bytes` 0), before the sample of op `op`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceEvent {
    pub op: u32,
    pub key: i64,
    pub bytes: u64,
}

/// The first request the device could not serve, even after giving back every cached block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The op whose output it was (its sample follows the request).
    pub op: usize,
    pub requested_bytes: u64,
    /// What was allocated and reserved just before the request.
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
}

/// The allocator model's view of the run, per op and at its end.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceMemory {
    /// Bytes of live blocks after each op (the allocator's `allocated_bytes.all.current`).
    pub allocated: Vec<f64>,
    /// Bytes of segments after each op (`reserved_bytes.all.current`).
    pub reserved: Vec<f64>,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// Allocations that had to give back the cache and try again, under `limit`.
    pub num_alloc_retries: u64,
    /// Where a device of `limit` bytes would have run out; the replay goes on as if the
    /// device were larger, so the series show what the whole run needs.
    pub oom: Option<OutOfMemory>,
}

/// Replay `events` (in order) for a run of `ops` ops under `settings`, on a device whose
/// segments may hold at most `limit` bytes (`None`: unlimited).
pub fn replay(
    events: &[DeviceEvent],
    ops: usize,
    settings: Settings,
    limit: Option<u64>,
) -> DeviceMemory {
    let mut a = Allocator::new(settings, limit);
    let mut live: HashMap<i64, BlockId> = HashMap::new();
    let mut out = DeviceMemory {
        allocated: Vec::with_capacity(ops),
        reserved: Vec::with_capacity(ops),
        ..DeviceMemory::default()
    };
    let mut next = events.iter().peekable();
    for op in 0..ops {
        while let Some(e) = next.next_if(|e| (e.op as usize) <= op) {
            if let Some(id) = live.remove(&e.key) {
                a.free_completed(id);
            }
            if e.bytes == 0 {
                continue;
            }
            let (allocated, reserved) = (a.allocated, a.reserved);
            let id = match a.malloc(e.bytes, 0) {
                Some(id) => id,
                None => {
                    out.oom.get_or_insert(OutOfMemory {
                        op,
                        requested_bytes: e.bytes,
                        allocated_bytes: allocated,
                        reserved_bytes: reserved,
                    });
                    // the rest of the run as on a device without a limit
                    a.limit = None;
                    a.malloc(e.bytes, 0)
                        .expect("an unlimited allocator serves every request")
                }
            };
            live.insert(e.key, id);
            out.peak_allocated = out.peak_allocated.max(a.allocated);
            out.peak_reserved = out.peak_reserved.max(a.reserved);
        }
        out.allocated.push(a.allocated as f64);
        out.reserved.push(a.reserved as f64);
    }
    out.num_alloc_retries = a.num_alloc_retries;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(op: u32, key: i64, bytes: u64) -> DeviceEvent {
        DeviceEvent { op, key, bytes }
    }

    #[test]
    fn small_and_large_requests_reserve_the_allocators_segments() {
        // 4 KiB: a 2 MiB small-pool segment; 3 MiB: a 20 MiB segment; 30 MiB: its own size
        let events = [
            ev(0, 1, 4096),
            ev(1, 2, 3 << 20),
            ev(2, 3, 30 << 20),
            ev(3, 3, 0),
        ];
        let m = replay(&events, 4, Settings::default(), None);
        assert_eq!(
            m.reserved,
            vec![
                2.0 * 1048576.0,
                22.0 * 1048576.0,
                52.0 * 1048576.0,
                52.0 * 1048576.0
            ]
        );
        assert_eq!(m.allocated[3], (4096 + (3 << 20)) as f64);
        assert_eq!(m.peak_allocated, 4096 + (3 << 20) + (30 << 20));
        assert!(m.oom.is_none());
    }

    #[test]
    fn a_freed_block_is_reused_and_a_limit_says_where_the_device_runs_out() {
        let events = [
            ev(0, 1, 30 << 20),
            ev(1, 1, 0),
            ev(1, 2, 30 << 20),
            ev(2, 3, 40 << 20),
        ];
        let m = replay(&events, 3, Settings::default(), None);
        assert_eq!(m.peak_reserved, 70 << 20);
        let m = replay(&events, 3, Settings::default(), Some(64 << 20));
        let oom = m.oom.expect("70 MiB do not fit in 64 MiB");
        assert_eq!(
            (oom.op, oom.requested_bytes, oom.reserved_bytes),
            (2, 40 << 20, 30 << 20)
        );
        // the series goes on past it
        assert_eq!(m.reserved[2], (70u64 << 20) as f64);
    }
}
