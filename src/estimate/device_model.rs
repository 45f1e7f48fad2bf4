//! An estimated run's device memory: its storages' allocations and frees, in the order the
//! program made them, replayed through the caching-allocator model
//! (`analysis::caching_allocator`, the one `simulate` validates on real traces) to give what
//! CUDA would have reserved after every op, and where a device of a given size runs out.

use std::collections::HashMap;

use crate::analysis::caching_allocator::{Allocator, BlockId, Settings};
pub use crate::record::DeviceEvent;

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

/// The allocator model fed one storage event at a time: what the replay after the run and
/// the live model beside it (`live`) both run.
pub struct ModelledDevice {
    allocator: Allocator,
    live: HashMap<i64, BlockId>,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// The peaks since the last `reset_peaks` (`torch.cuda.reset_peak_memory_stats()`).
    pub peak_allocated_since_reset: u64,
    pub peak_reserved_since_reset: u64,
    /// Requests the device could not serve even after giving back its cache.
    pub ooms: u64,
}

impl ModelledDevice {
    pub fn new(settings: Settings, limit: Option<u64>) -> ModelledDevice {
        ModelledDevice {
            allocator: Allocator::new(settings, limit),
            live: HashMap::new(),
            peak_allocated: 0,
            peak_reserved: 0,
            peak_allocated_since_reset: 0,
            peak_reserved_since_reset: 0,
            ooms: 0,
        }
    }

    pub fn allocated(&self) -> u64 {
        self.allocator.allocated
    }

    pub fn reserved(&self) -> u64 {
        self.allocator.reserved
    }

    pub fn retries(&self) -> u64 {
        self.allocator.num_alloc_retries
    }

    /// What the allocator may use shrinks by `bytes` (NCCL's buffers of a process group that
    /// began to communicate); a device already past its limit stays unlimited.
    pub fn take_from_limit(&mut self, bytes: u64) {
        if let Some(l) = self.allocator.limit.as_mut() {
            *l = l.saturating_sub(bytes);
        }
    }

    /// What the allocator may use now (None: unlimited, past running out).
    pub fn limit(&self) -> Option<u64> {
        self.allocator.limit
    }

    pub fn reset_peaks(&mut self) {
        self.peak_allocated_since_reset = self.allocator.allocated;
        self.peak_reserved_since_reset = self.allocator.reserved;
    }

    /// Storage `key` appears with `bytes` (> 0) or dies (0). Where the device cannot serve
    /// the request (its first time), what was asked and what was allocated and reserved
    /// just before; the model then goes on as on a device without a limit.
    pub fn event(&mut self, key: i64, bytes: u64) -> Option<(u64, u64, u64)> {
        let a = &mut self.allocator;
        if let Some(id) = self.live.remove(&key) {
            a.free_completed(id);
        }
        if bytes == 0 {
            return None;
        }
        let (allocated, reserved) = (a.allocated, a.reserved);
        let mut ran_out = None;
        let id = match a.malloc(bytes, 0) {
            Some(id) => id,
            None => {
                self.ooms += 1;
                ran_out = Some((bytes, allocated, reserved));
                a.limit = None;
                a.malloc(bytes, 0)
                    .expect("an unlimited allocator serves every request")
            }
        };
        self.live.insert(key, id);
        self.peak_allocated = self.peak_allocated.max(a.allocated);
        self.peak_reserved = self.peak_reserved.max(a.reserved);
        self.peak_allocated_since_reset = self.peak_allocated_since_reset.max(a.allocated);
        self.peak_reserved_since_reset = self.peak_reserved_since_reset.max(a.reserved);
        ran_out
    }
}

/// Replay `events` (in order) for a run of `ops` ops under `settings`, on a device whose
/// segments may hold at most `limit` bytes (`None`: unlimited).
pub fn replay(
    events: &[DeviceEvent],
    ops: usize,
    settings: Settings,
    limit: Option<u64>,
) -> DeviceMemory {
    let mut d = ModelledDevice::new(settings, limit);
    let mut out = DeviceMemory {
        allocated: Vec::with_capacity(ops),
        reserved: Vec::with_capacity(ops),
        ..DeviceMemory::default()
    };
    let mut next = events.iter().peekable();
    for op in 0..ops {
        while let Some(e) = next.next_if(|e| (e.op as usize) <= op) {
            if let Some((requested_bytes, allocated_bytes, reserved_bytes)) =
                d.event(e.key, e.bytes)
            {
                out.oom.get_or_insert(OutOfMemory {
                    op,
                    requested_bytes,
                    allocated_bytes,
                    reserved_bytes,
                });
            }
        }
        out.allocated.push(d.allocated() as f64);
        out.reserved.push(d.reserved() as f64);
    }
    out.peak_allocated = d.peak_allocated;
    out.peak_reserved = d.peak_reserved;
    out.num_alloc_retries = d.retries();
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
