//! The allocator's size classes and rounding: the constants of `CUDACachingAllocator.cpp`,
//! `round_size` (with `roundup_power2_divisions`) and the segment a request creates. Pure
//! arithmetic, in bytes; which divisions apply is the settings' business.

/// Every block size is a multiple of this (bytes).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest request served by the small pool.
pub const SMALL_SIZE: u64 = 1 << 20;
/// Small segments, and the page size of small expandable segments.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Segments for requests between 1 and 10 MiB, and the page of large expandable segments.
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Requests of this or more get a segment of their own size (rounded to `ROUND_LARGE`).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Large segments are rounded up to a multiple of this (2 MiB).
pub const ROUND_LARGE: u64 = 2 << 20;
/// `roundup_power2_divisions` has one entry per power of two from 1 MiB to 32 GiB.
pub const ROUNDUP_INTERVALS: usize = 16;

/// The block size a request of `size` bytes gets (`round_size`), where `divisions` are the
/// divisions of each power-of-two interval from 1 MiB (`Settings::roundup_power2_divisions`).
pub fn round_size(size: u64, divisions: &[u32; ROUNDUP_INTERVALS]) -> u64 {
    if size < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    let log = 63 - size.leading_zeros() as usize;
    let divisions = divisions[log.saturating_sub(20).min(ROUNDUP_INTERVALS - 1)] as u64;
    if divisions > 1 && size > MIN_BLOCK_SIZE * divisions {
        roundup_power2_next_division(size, divisions)
    } else {
        size.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
    }
}

fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let rounded = size & !(step - 1);
    if rounded == size {
        size
    } else {
        rounded + step
    }
}

/// `get_allocation_size`: the segment a request that found no cached block creates.
pub fn allocation_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn allocation_sizes() {
        assert_eq!(allocation_size(MIB), SMALL_BUFFER);
        assert_eq!(allocation_size(MIB + 512), LARGE_BUFFER);
        assert_eq!(allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(allocation_size(11 * MIB + 1), 12 * MIB);
    }
}
