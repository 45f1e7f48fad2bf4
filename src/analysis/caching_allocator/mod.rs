//! A model of PyTorch's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`, settings
//! from `c10/core/AllocatorConfig.*`), for replaying a snapshot's trace under other settings.
//!
//! What is modelled, with the allocator's own names: small (≤ 1 MiB) and large pools per stream;
//! `round_size` with `roundup_power2_divisions`; segment sizes (`get_allocation_size`);
//! best-fit search ordered by (stream, size, address) (`get_free_block`, with its
//! `max_split_size` / `max_non_split_rounding_size` rejections and its expandable-size walk);
//! `should_split`; merging freed neighbours (`free_block`, `try_merge_blocks`);
//! `release_available_cached_blocks` and `release_cached_blocks` before an OOM; the garbage
//! collection threshold; expandable segments (2 MiB / 20 MiB pages, `find_expandable_block`,
//! `map_block`, `unmap_block`). A freed block returns to the pool at `free_completed`, which
//! the trace says. Not modelled: CUDA graphs' private pools, events between streams (the trace's
//! `free_completed` stands for them), IPC, `release_lock_on_cudamalloc`.
//!
//! Addresses are the model's own: a new segment gets the next free range of a private address
//! space, so only sizes and positions compare with a real run, never addresses.
//!
//! Files, each importing only those before it: `sizes` (size classes and rounding), `settings`
//! (what can be set), `conf` (their spellings and `SettingError`), `blocks` (the records),
//! `allocator` (`Allocator`: search, split, merge, free), then `expandable` and `release`, which
//! add the expandable-segment and give-back methods to `Allocator`.

mod allocator;
mod blocks;
mod conf;
mod expandable;
mod release;
mod settings;
mod sizes;

pub use allocator::{Allocator, SegmentAction, SegmentEvent, SegmentView};
pub use blocks::BlockId;
pub use conf::{DivisionsError, SettingError};
pub use settings::Settings;
pub use sizes::{
    allocation_size, round_size, LARGE_BUFFER, MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, ROUNDUP_INTERVALS,
    ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE,
};
