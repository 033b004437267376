//! PyTorch's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`).
//!
//! A faithful model of the native allocator's block placement for one device and one stream:
//! no cross-stream events, no CUDA graphs, no expandable segments, no garbage collection and
//! no memory fraction. Everything else follows the reference in
//! `docs/cuda-allocator.md` sections 1–4:
//!
//! - sizes round up to 512 bytes, or to a power-of-two division when
//!   `roundup_power2_divisions` is set ([`round_size`]);
//! - requests of at most 1 MiB use the small pool and 2 MiB segments, larger ones the large
//!   pool and 20 MiB segments (or the request rounded up to 2 MiB from 10 MiB on)
//!   ([`allocation_size`]);
//! - a request takes the best-fitting cached block (smallest size, then lowest address),
//!   subject to the `max_split_size` rules, and splits it when the remainder is worth keeping;
//! - a freed block merges with free neighbours of its segment and stays cached; segments go
//!   back to the backend only on the out-of-memory path or through
//!   [`CachingAllocator::empty_cache`];
//! - statistics are PyTorch's `memory_stats()` counters, aggregated and per pool.
//!
//! One concept per file, each with its tests: `config.rs` (the settings and their parser),
//! `sizes.rs` (rounding, pools and segment sizes), `stats.rs` (the counters), `free_blocks.rs`
//! (a pool's cached blocks) and `allocator.rs` (the allocator and the values it hands out).

mod allocator;
mod config;
mod free_blocks;
mod sizes;
mod stats;

pub use allocator::{AllocError, Block, BlockId, BlockInfo, CachingAllocator, SegmentInfo};
pub use config::AllocatorConfig;
pub use sizes::{
    allocation_size, pool_for, round_size, roundup_power2_next_division, Pool, K_LARGE_BUFFER,
    K_MIN_BLOCK_SIZE, K_MIN_LARGE_ALLOC, K_ROUND_LARGE, K_SMALL_BUFFER, K_SMALL_SIZE,
};
pub use stats::{PoolStats, Stat, Stats};

/// Helpers the tests of more than one file use.
#[cfg(test)]
mod test_support {
    use super::{AllocatorConfig, CachingAllocator};
    use crate::alloc::Simulated;

    pub(super) fn allocator(capacity: u64) -> CachingAllocator<Simulated> {
        CachingAllocator::new(Simulated::new(capacity), AllocatorConfig::default())
    }

    pub(super) fn divisions(text: &str) -> AllocatorConfig {
        AllocatorConfig::parse(text).unwrap()
    }
}
