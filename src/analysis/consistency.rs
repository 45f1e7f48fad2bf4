//! A snapshot checked against itself, once, as it is read: each segment's blocks must tile it
//! (in address order, each where the one before ends, their sizes adding up to the segment's
//! size), and the segment's own counters (`allocated_size`, `active_size`) must be what its
//! blocks add up to. `_memory_viz` stops at the first segment whose blocks do not add up
//! ("Segment size mismatch"); memtrack goes on, with the figures the file gives, and says what
//! disagrees.

use serde::Serialize;

use crate::model::snapshot::{BlockState, Snapshot};

/// One segment whose figures disagree with each other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SegmentDisagreement {
    /// The CUDA device index.
    pub device: u32,
    /// The segment's base address.
    pub address: u64,
    /// `total_size`, in bytes.
    pub total_size: u64,
    /// What its blocks add up to, in bytes.
    pub block_bytes: u64,
    /// Blocks that do not start where the one before ends (a gap or an overlap).
    pub misplaced_blocks: usize,
    /// `allocated_size` as the file gives it and as its allocated blocks add up, when they differ.
    pub allocated_size: Option<(u64, u64)>,
    /// `active_size` as the file gives it and as its active blocks add up, when they differ.
    pub active_size: Option<(u64, u64)>,
}

impl SegmentDisagreement {
    /// What disagrees, in words (byte figures as the file gives them).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.block_bytes != self.total_size {
            parts.push(format!(
                "its blocks add up to {} bytes, its size is {}",
                self.block_bytes, self.total_size
            ));
        }
        if self.misplaced_blocks > 0 {
            parts.push(format!(
                "{} block(s) do not start where the one before ends",
                self.misplaced_blocks
            ));
        }
        if let Some((file, blocks)) = self.allocated_size {
            parts.push(format!(
                "allocated_size says {file}, its allocated blocks add up to {blocks}"
            ));
        }
        if let Some((file, blocks)) = self.active_size {
            parts.push(format!(
                "active_size says {file}, its active blocks add up to {blocks}"
            ));
        }
        format!(
            "device {} segment 0x{:x}: {}",
            self.device,
            self.address,
            parts.join("; ")
        )
    }
}

/// Every segment of `snap` whose figures disagree, in file order. Segments listed without
/// blocks (nothing to add up) are not checked. Linear in segments and blocks.
pub fn check(snap: &Snapshot) -> Vec<SegmentDisagreement> {
    let mut out = Vec::new();
    for s in &snap.segments {
        let blocks = s.blocks(&snap.blocks);
        if blocks.is_empty() {
            continue;
        }
        let mut block_bytes = 0u64;
        let mut allocated = 0u64;
        let mut active = 0u64;
        let mut misplaced = 0;
        // a state memtrack does not know may be counted either way: no counter check
        let known = blocks.iter().all(|b| b.state != BlockState::Unknown);
        let mut expected = s.address;
        for b in blocks {
            block_bytes = block_bytes.saturating_add(b.size);
            if b.address != expected {
                misplaced += 1;
            }
            expected = b.address.saturating_add(b.size);
            if b.state == BlockState::ActiveAllocated {
                allocated += b.size;
            }
            if b.state.is_active() {
                active += b.size;
            }
        }
        let differs =
            |file: Option<u64>, blocks: u64| file.filter(|&f| f != blocks).map(|f| (f, blocks));
        let d = SegmentDisagreement {
            device: s.device,
            address: s.address,
            total_size: s.total_size,
            block_bytes,
            misplaced_blocks: misplaced,
            allocated_size: differs(s.allocated_size.filter(|_| known), allocated),
            active_size: differs(s.active_size.filter(|_| known), active),
        };
        if d.block_bytes != d.total_size
            || d.misplaced_blocks > 0
            || d.allocated_size.is_some()
            || d.active_size.is_some()
        {
            out.push(d);
        }
    }
    out
}
