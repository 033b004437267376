//! Pinned host memory for staging host-to-device copies, cached in power-of-two buckets.
//!
//! This is the logic of PyTorch's `CachingHostAllocator`
//! (`aten/src/ATen/core/CachingHostAllocator.h`): every request is rounded up to the next power
//! of two and served from the free list of exactly that bucket; a cached block is never split
//! and a larger one is never used for a smaller request, so a 4.88 GiB request occupies an
//! 8 GiB block. Freed blocks stay cached until [`PinnedAllocator::empty_cache`], the only path
//! back to the backend. (PyTorch's cross-stream event bookkeeping is left out: tensorplay
//! synchronises every copy before a staging buffer is freed.)
//!
//! The allocator is generic over a [`HostBackend`]: [`Pageable`] is ordinary heap memory, the
//! fallback when no CUDA driver is present; `CudaPinned` in [`super::cuda`] is page-locked
//! memory from the driver.

use serde::Serialize;
use std::fmt;

/// Number of power-of-two buckets: one per bit of a `u64` size.
const BUCKETS: usize = 64;

/// Host bytes owned by something other than the heap (page-locked driver memory).
///
/// Implementors hand out the same `len` bytes for as long as they live.
pub trait HostBytes: Send {
    /// The bytes.
    fn as_bytes(&self) -> &[u8];
    /// The bytes, writable.
    fn as_bytes_mut(&mut self) -> &mut [u8];
    /// Whether the bytes are page-locked (pinned).
    fn is_pinned(&self) -> bool;
}

/// One block of host memory from a [`HostBackend`]: heap bytes or foreign (pinned) bytes.
pub struct HostBlock {
    memory: HostMemory,
}

enum HostMemory {
    Heap(Box<[u8]>),
    Foreign(Box<dyn HostBytes>),
}

impl HostBlock {
    /// A block backed by heap bytes.
    pub fn heap(bytes: Box<[u8]>) -> Self {
        HostBlock {
            memory: HostMemory::Heap(bytes),
        }
    }

    /// A block backed by foreign bytes (a CUDA pinned slice).
    pub fn foreign(bytes: Box<dyn HostBytes>) -> Self {
        HostBlock {
            memory: HostMemory::Foreign(bytes),
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.memory {
            HostMemory::Heap(b) => b,
            HostMemory::Foreign(b) => b.as_bytes(),
        }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.memory {
            HostMemory::Heap(b) => b,
            HostMemory::Foreign(b) => b.as_bytes_mut(),
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }

    /// Whether the block holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Whether the bytes are page-locked.
    pub fn is_pinned(&self) -> bool {
        match &self.memory {
            HostMemory::Heap(_) => false,
            HostMemory::Foreign(b) => b.is_pinned(),
        }
    }
}

impl From<Vec<u8>> for HostBlock {
    fn from(bytes: Vec<u8>) -> Self {
        HostBlock::heap(bytes.into_boxed_slice())
    }
}

impl fmt::Debug for HostBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBlock")
            .field("len", &self.len())
            .field("pinned", &self.is_pinned())
            .finish()
    }
}

/// Where host blocks come from.
pub trait HostBackend {
    /// What can go wrong when allocating.
    type Error: fmt::Display;
    /// A block of exactly `size` bytes (contents unspecified).
    fn alloc_host(&mut self, size: u64) -> Result<HostBlock, Self::Error>;
    /// Returns a block allocated earlier.
    fn free_host(&mut self, block: HostBlock);
}

/// Ordinary heap memory: the fallback when page-locked memory is unavailable.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pageable;

/// The heap refused an allocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot allocate {size} bytes of host memory")]
pub struct PageableError {
    /// Bytes asked for.
    pub size: u64,
}

impl HostBackend for Pageable {
    type Error = PageableError;

    /// Zero-filled heap bytes; an allocation failure is an error, not an abort.
    fn alloc_host(&mut self, size: u64) -> Result<HostBlock, PageableError> {
        let n = usize::try_from(size).map_err(|_| PageableError { size })?;
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(n)
            .map_err(|_| PageableError { size })?;
        bytes.resize(n, 0);
        Ok(HostBlock::heap(bytes.into_boxed_slice()))
    }

    fn free_host(&mut self, block: HostBlock) {
        drop(block);
    }
}

/// The smallest power of two ≥ `n` (PyTorch's `PowerOf2Ceil`), with 0 → 1; `None` above 2⁶³.
pub fn round_up_power_of_two(n: u64) -> Option<u64> {
    n.checked_next_power_of_two()
}

/// The bucket holding blocks of `size` bytes, a power of two: log₂ of it.
fn bucket_of(size: u64) -> usize {
    size.trailing_zeros() as usize
}

/// Current and peak value of a gauge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Gauge {
    /// Now.
    pub current: u64,
    /// Highest value seen.
    pub peak: u64,
}

impl Gauge {
    fn add(&mut self, n: u64) {
        self.current = self.current.saturating_add(n);
        self.peak = self.peak.max(self.current);
    }

    fn sub(&mut self, n: u64) {
        self.current = self.current.saturating_sub(n);
    }
}

/// What the host allocator has done (PyTorch's `host_memory_stats()`, simplified).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PinnedStats {
    /// Blocks held from the backend (in use or cached).
    pub allocations: Gauge,
    /// Bytes held from the backend (in use or cached); always powers of two.
    pub allocated_bytes: Gauge,
    /// Bytes of blocks handed out and not yet freed.
    pub in_use_bytes: Gauge,
    /// Bytes of blocks cached on the free lists.
    pub cached_bytes: u64,
    /// Requests served from a free list.
    pub hits: u64,
    /// Requests that needed a new block from the backend.
    pub misses: u64,
    /// Blocks returned to the backend by [`PinnedAllocator::empty_cache`].
    pub backend_frees: u64,
}

/// What can go wrong allocating a staging buffer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinnedError<E> {
    /// The request has no power of two at or above it in a `u64`.
    #[error("a host buffer of {requested} bytes cannot be rounded up to a power of two")]
    TooLarge {
        /// Bytes asked for.
        requested: u64,
    },
    /// The backend returned a block of another size than asked.
    #[error("the host backend returned {got} bytes for a {size}-byte block")]
    WrongSize {
        /// Bytes asked of the backend.
        size: u64,
        /// Bytes it returned.
        got: u64,
    },
    /// The backend failed.
    #[error("{0}")]
    Backend(E),
}

/// A buffer handed out by a [`PinnedAllocator`]; give it back with [`PinnedAllocator::free`].
#[derive(Debug)]
pub struct PinnedBuffer {
    block: Option<HostBlock>,
    requested: u64,
}

impl PinnedBuffer {
    /// The `requested` bytes at the start of the block (contents left by earlier users).
    pub fn as_slice(&self) -> &[u8] {
        match &self.block {
            // `requested <= block.len()`, which fits usize.
            Some(b) => &b.as_slice()[..self.requested as usize],
            None => &[],
        }
    }

    /// The `requested` bytes at the start of the block, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let n = self.requested as usize;
        match &mut self.block {
            Some(b) => &mut b.as_mut_slice()[..n],
            None => &mut [],
        }
    }

    /// Bytes asked for.
    pub fn requested(&self) -> u64 {
        self.requested
    }

    /// Bytes of the underlying block: the request rounded up to a power of two (0 for an
    /// empty request, which holds no block).
    pub fn capacity(&self) -> u64 {
        self.block.as_ref().map_or(0, HostBlock::len)
    }

    /// Whether the bytes are page-locked.
    pub fn is_pinned(&self) -> bool {
        self.block.as_ref().is_some_and(HostBlock::is_pinned)
    }
}

/// PyTorch's caching host allocator over a [`HostBackend`].
pub struct PinnedAllocator<H: HostBackend> {
    backend: H,
    free_lists: Vec<Vec<HostBlock>>,
    stats: PinnedStats,
}

impl<H: HostBackend> fmt::Debug for PinnedAllocator<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedAllocator")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<H: HostBackend> PinnedAllocator<H> {
    /// An allocator with empty caches.
    pub fn new(backend: H) -> Self {
        PinnedAllocator {
            backend,
            free_lists: (0..BUCKETS).map(|_| Vec::new()).collect(),
            stats: PinnedStats::default(),
        }
    }

    /// A buffer of at least `n` bytes: the last cached block of the bucket of
    /// `round_up_power_of_two(n)` if there is one (a hit), else a new block of that size from
    /// the backend (a miss). `n == 0` gives an empty buffer holding no block, counted nowhere.
    pub fn allocate(&mut self, n: u64) -> Result<PinnedBuffer, PinnedError<H::Error>> {
        if n == 0 {
            return Ok(PinnedBuffer {
                block: None,
                requested: 0,
            });
        }
        let size = round_up_power_of_two(n).ok_or(PinnedError::TooLarge { requested: n })?;
        let bucket = bucket_of(size);
        let block = match self.free_lists[bucket].pop() {
            Some(block) => {
                self.stats.hits += 1;
                self.stats.cached_bytes = self.stats.cached_bytes.saturating_sub(size);
                block
            }
            None => {
                let block = self
                    .backend
                    .alloc_host(size)
                    .map_err(PinnedError::Backend)?;
                if block.len() != size {
                    let got = block.len();
                    self.backend.free_host(block);
                    return Err(PinnedError::WrongSize { size, got });
                }
                self.stats.misses += 1;
                self.stats.allocations.add(1);
                self.stats.allocated_bytes.add(size);
                block
            }
        };
        self.stats.in_use_bytes.add(size);
        Ok(PinnedBuffer {
            block: Some(block),
            requested: n,
        })
    }

    /// Returns a buffer to the free list of its bucket; nothing goes back to the backend.
    pub fn free(&mut self, buffer: PinnedBuffer) {
        let Some(block) = buffer.block else {
            return;
        };
        let size = block.len();
        self.stats.in_use_bytes.sub(size);
        if !size.is_power_of_two() {
            // Not from this allocator's buckets: hand it straight back.
            self.release(block);
            return;
        }
        self.stats.cached_bytes = self.stats.cached_bytes.saturating_add(size);
        self.free_lists[bucket_of(size)].push(block);
    }

    /// Returns every cached block to the backend.
    pub fn empty_cache(&mut self) {
        let blocks: Vec<HostBlock> = self
            .free_lists
            .iter_mut()
            .flat_map(std::mem::take)
            .collect();
        for block in blocks {
            self.stats.cached_bytes = self.stats.cached_bytes.saturating_sub(block.len());
            self.release(block);
        }
    }

    fn release(&mut self, block: HostBlock) {
        self.stats.allocations.sub(1);
        self.stats.allocated_bytes.sub(block.len());
        self.stats.backend_frees += 1;
        self.backend.free_host(block);
    }

    /// What it has done so far.
    pub fn stats(&self) -> &PinnedStats {
        &self.stats
    }

    /// The backend.
    pub fn backend(&self) -> &H {
        &self.backend
    }
}

impl<H: HostBackend> Drop for PinnedAllocator<H> {
    fn drop(&mut self) {
        self.empty_cache();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Heap memory that records what it was asked for.
    #[derive(Default)]
    struct Counting {
        allocs: Vec<u64>,
        frees: Vec<u64>,
    }

    impl HostBackend for Counting {
        type Error = PageableError;
        fn alloc_host(&mut self, size: u64) -> Result<HostBlock, PageableError> {
            self.allocs.push(size);
            Pageable.alloc_host(size)
        }
        fn free_host(&mut self, block: HostBlock) {
            self.frees.push(block.len());
        }
    }

    #[test]
    fn rounds_to_powers_of_two() {
        assert_eq!(round_up_power_of_two(1), Some(1));
        assert_eq!(round_up_power_of_two(3), Some(4));
        assert_eq!(round_up_power_of_two(4), Some(4));
        assert_eq!(round_up_power_of_two(3000), Some(4096));
        // The header's example: a 4.88 GiB bank occupies 8 GiB.
        let bank = (4.88 * (1u64 << 30) as f64) as u64;
        assert_eq!(round_up_power_of_two(bank), Some(8 << 30));
        assert_eq!(round_up_power_of_two(1 << 63), Some(1 << 63));
        assert_eq!(round_up_power_of_two((1 << 63) + 1), None);
    }

    #[test]
    fn reuses_the_bucket_and_counts_hits() {
        let mut a = PinnedAllocator::new(Counting::default());
        let b = a.allocate(3000).unwrap();
        assert_eq!(b.capacity(), 4096);
        assert_eq!(b.as_slice().len(), 3000);
        a.free(b);
        assert_eq!(a.stats().cached_bytes, 4096);
        let b = a.allocate(4000).unwrap();
        assert_eq!(b.capacity(), 4096);
        assert_eq!(a.backend().allocs, vec![4096]);
        let s = a.stats();
        assert_eq!((s.hits, s.misses), (1, 1));
        assert_eq!(s.allocations.current, 1);
        assert_eq!(s.allocated_bytes.current, 4096);
        assert_eq!(s.in_use_bytes.current, 4096);
        assert_eq!(s.cached_bytes, 0);
        a.free(b);
    }

    #[test]
    fn never_splits_or_uses_a_larger_bucket() {
        let mut a = PinnedAllocator::new(Counting::default());
        let big = a.allocate(1 << 20).unwrap();
        a.free(big);
        // A small request does not take (or split) the cached 1 MiB block.
        let small = a.allocate(100).unwrap();
        assert_eq!(small.capacity(), 128);
        assert_eq!(a.backend().allocs, vec![1 << 20, 128]);
        assert_eq!(a.stats().misses, 2);
        assert_eq!(a.stats().hits, 0);
        assert_eq!(a.stats().cached_bytes, 1 << 20);
        assert_eq!(a.stats().allocated_bytes.current, (1 << 20) + 128);
        assert_eq!(a.stats().allocated_bytes.peak, (1 << 20) + 128);
        a.free(small);
    }

    #[test]
    fn empty_cache_frees_everything_cached() {
        let mut a = PinnedAllocator::new(Counting::default());
        let x = a.allocate(10).unwrap();
        let y = a.allocate(1000).unwrap();
        let z = a.allocate(1000).unwrap();
        a.free(x);
        a.free(y);
        a.empty_cache();
        let mut frees = a.backend().frees.clone();
        frees.sort_unstable();
        assert_eq!(frees, vec![16, 1024]);
        assert_eq!(a.stats().cached_bytes, 0);
        assert_eq!(a.stats().allocations.current, 1);
        assert_eq!(a.stats().allocated_bytes.current, 1024);
        assert_eq!(a.stats().allocated_bytes.peak, 16 + 2048);
        // The buffer still in use survives and returns to the cache afterwards.
        a.free(z);
        assert_eq!(a.stats().cached_bytes, 1024);
        a.empty_cache();
        assert_eq!(a.stats().allocated_bytes.current, 0);
        assert_eq!(a.stats().backend_frees, 3);
    }

    /// A backend that breaks its contract.
    struct Short;

    impl HostBackend for Short {
        type Error = PageableError;
        fn alloc_host(&mut self, size: u64) -> Result<HostBlock, PageableError> {
            Ok(vec![0; size as usize / 2].into())
        }
        fn free_host(&mut self, _block: HostBlock) {}
    }

    #[test]
    fn a_short_block_is_an_error_not_a_panic() {
        let mut a = PinnedAllocator::new(Short);
        let e = a.allocate(100).unwrap_err();
        assert_eq!(e, PinnedError::WrongSize { size: 128, got: 64 });
        assert_eq!(*a.stats(), PinnedStats::default());
    }

    #[test]
    fn zero_bytes_hold_nothing() {
        let mut a = PinnedAllocator::new(Pageable);
        let mut b = a.allocate(0).unwrap();
        assert_eq!(b.capacity(), 0);
        assert!(b.as_mut_slice().is_empty());
        a.free(b);
        assert_eq!(*a.stats(), PinnedStats::default());
    }

    #[test]
    fn too_large_is_an_error() {
        let mut a = PinnedAllocator::new(Pageable);
        let e = a.allocate(u64::MAX).unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
        let e = Pageable.alloc_host(u64::MAX).unwrap_err();
        assert!(e.to_string().contains("host memory"), "{e}");
    }

    #[test]
    fn pageable_is_zeroed_and_writable() {
        let mut a = PinnedAllocator::new(Pageable);
        let mut b = a.allocate(5).unwrap();
        assert_eq!(b.as_slice(), &[0; 5]);
        assert!(!b.is_pinned());
        b.as_mut_slice().copy_from_slice(b"hello");
        assert_eq!(b.as_slice(), b"hello");
        a.free(b);
    }
}
