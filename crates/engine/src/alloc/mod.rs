//! Memory engine: PyTorch's CUDA caching allocator (simulated, or on a real device through
//! cudarc with the `cuda` feature) and the pinned host staging allocator.
//!
//! The caching allocator is generic over a [`SegmentBackend`]: the simulated one hands out
//! addresses inside a capacity at no cost, so a CI runner without a GPU can answer "what
//! does loading this checkpoint do to GPU memory"; the CUDA one asks the driver.

pub mod caching;
pub mod cuda;
pub mod device_load;
pub mod pinned;
pub mod simulate;
pub mod simulated;

pub use caching::{
    AllocError, AllocatorConfig, Block, BlockId, CachingAllocator, Pool, SegmentInfo, Stat, Stats,
};
pub use simulated::Simulated;

/// Where whole segments come from: the allocator's only contact with real memory.
pub trait SegmentBackend {
    /// What can go wrong besides running out of memory.
    type Error: std::fmt::Display;
    /// Reserves a segment of `size` bytes; `Ok(None)` when the device is out of memory.
    fn alloc_segment(&mut self, size: u64) -> Result<Option<u64>, Self::Error>;
    /// Returns a segment reserved earlier.
    fn free_segment(&mut self, address: u64, size: u64) -> Result<(), Self::Error>;
}
