//! The settings that change what the allocator does (`PYTORCH_CUDA_ALLOC_CONF`'s keys), with
//! their defaults, and how they round a request. Their spellings (the configuration string, a
//! snapshot's record) are `conf.rs`'s.

use serde::Serialize;

use super::sizes::{round_size, LARGE_BUFFER, ROUNDUP_INTERVALS};

/// The settings that change what the allocator does (`PYTORCH_CUDA_ALLOC_CONF`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    /// `max_split_size_mb` in bytes; `None` is unlimited (the default).
    pub max_split_size: Option<u64>,
    /// `max_non_split_rounding_mb` in bytes (default 20 MiB).
    pub max_non_split_rounding_size: u64,
    /// Divisions per power-of-two interval, 1 MiB ... ≥ 32 GiB; 0 and 1 mean no rounding.
    pub roundup_power2_divisions: [u32; ROUNDUP_INTERVALS],
    /// `expandable_segments`: grow segments by mapping pages instead of new cudaMallocs.
    pub expandable_segments: bool,
    /// Fraction of the memory limit above which cached blocks are freed; 0 is off.
    pub garbage_collection_threshold: f64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            max_split_size: None,
            max_non_split_rounding_size: LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            expandable_segments: false,
            garbage_collection_threshold: 0.0,
        }
    }
}

impl Settings {
    /// `max_split_size` in bytes, `u64::MAX` when unlimited.
    pub(super) fn max_split(&self) -> u64 {
        self.max_split_size.unwrap_or(u64::MAX)
    }

    /// The block size a request of `size` bytes gets (`round_size`).
    pub fn round_size(&self, size: u64) -> u64 {
        round_size(size, &self.roundup_power2_divisions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn round_size_follows_the_allocator() {
        let s = Settings::default();
        assert_eq!(s.round_size(1), 512);
        assert_eq!(s.round_size(513), 1024);
        assert_eq!(s.round_size(3 * MIB + 1), 3 * MIB + 512);
        let mut s4 = Settings::default();
        s4.apply("roundup_power2_divisions:4").unwrap();
        // 1.1 MiB lies in [1, 2) MiB, divided in four: rounds up to 1.25 MiB
        assert_eq!(s4.round_size(MIB + MIB / 10), MIB + MIB / 4);
        assert_eq!(s4.round_size(2 * MIB), 2 * MIB);
        // small sizes (at most 512 * divisions) are not power-rounded
        assert_eq!(s4.round_size(1500), 1536);
        assert_eq!(s4.round_size(600 * 1024), 640 * 1024);
    }
}
