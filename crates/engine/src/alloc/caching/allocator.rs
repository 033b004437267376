//! The allocator: blocks keyed by address inside segments from a [`SegmentBackend`], best fit,
//! split and merge, segments released on the out-of-memory path; and the values it hands out.

use super::config::AllocatorConfig;
use super::free_blocks::FreeBlocks;
use super::sizes::{
    allocation_size, format_size, pool_for, round_size, Pool, K_LARGE_BUFFER, K_MIN_BLOCK_SIZE,
    K_SMALL_SIZE,
};
use super::stats::{Kind, Stats};
use crate::alloc::SegmentBackend;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::BuildHasherDefault;

/// A segment larger than this (8 EiB) is refused without asking the backend, so that the
/// statistics' `u64` sums cannot overflow. No device comes near it.
const MAX_SEGMENT: u64 = 1 << 63;

/// Hashes the allocator's own sequential ids by one multiplication (Fibonacci hashing):
/// they come from a counter, not from a file, so SipHash's resistance to chosen keys buys
/// nothing, and it was 8 % of a million-storage load's time.
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Identifies one allocation; never reused within an allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockId(u64);

impl BlockId {
    /// The id of every zero-byte (null) allocation; freeing it does nothing.
    pub const NULL: BlockId = BlockId(0);

    /// The raw number behind the id.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// A live allocation, as returned by [`CachingAllocator::malloc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Handle for [`CachingAllocator::free`].
    pub id: BlockId,
    /// Device address of the first byte.
    pub address: u64,
    /// Bytes the block occupies: the rounded request, or more when the block it came from was
    /// not worth splitting.
    pub size: u64,
    /// Bytes asked for.
    pub requested: u64,
    /// The pool the block belongs to.
    pub pool: Pool,
}

/// One segment of the allocator's state, like an entry of `memory_snapshot()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Address of the segment's first byte.
    pub address: u64,
    /// Bytes reserved from the backend.
    pub size: u64,
    /// The pool the segment serves.
    pub pool: Pool,
    /// The segment's blocks in address order; they tile the segment exactly.
    pub blocks: Vec<BlockInfo>,
}

/// One block inside a [`SegmentInfo`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    /// Address of the block's first byte.
    pub address: u64,
    /// Bytes the block covers.
    pub size: u64,
    /// Bytes the allocation asked for; 0 when the block is free.
    pub requested: u64,
    /// Whether the block is allocated (`active_allocated`) rather than cached (`inactive`).
    pub allocated: bool,
}

/// What can go wrong in the allocator.
#[derive(Debug)]
pub enum AllocError<E> {
    /// Nothing cached fits, and the backend refused a new segment even after every cached
    /// segment that could be released was released.
    OutOfMemory {
        /// Bytes asked for.
        requested: u64,
        /// The request after [`round_size`].
        rounded: u64,
        /// Reserved bytes after the releases (`reserved_bytes.all.current`).
        reserved: u64,
        /// Allocated bytes (`allocated_bytes.all.current`).
        allocated: u64,
    },
    /// The backend failed otherwise.
    Backend(E),
    /// The block is not live: never allocated here, or already freed.
    UnknownBlock(BlockId),
}

impl<E: fmt::Display> fmt::Display for AllocError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::OutOfMemory {
                requested,
                rounded,
                reserved,
                allocated,
            } => write!(
                f,
                "CUDA out of memory. Tried to allocate {} (a request of {} bytes, rounded to {}). \
                 Of the allocated memory {} is allocated by PyTorch, and {} is reserved by \
                 PyTorch but unallocated.",
                format_size(allocation_size(*rounded)),
                requested,
                format_size(*rounded),
                format_size(*allocated),
                format_size(reserved.saturating_sub(*allocated)),
            ),
            AllocError::Backend(e) => write!(f, "device allocation failed: {e}"),
            AllocError::UnknownBlock(id) => {
                write!(f, "block {} is not allocated by this allocator", id.0)
            }
        }
    }
}

impl<E: fmt::Display + fmt::Debug> std::error::Error for AllocError<E> {}

/// One block of a segment (`Block` in CCA.cpp); blocks are keyed by address.
#[derive(Debug, Clone)]
struct Node {
    size: u64,
    /// The request of an allocated block; 0 when free.
    requested: u64,
    allocated: bool,
    pool: Pool,
    /// Address of the neighbouring block of the same segment.
    prev: Option<u64>,
    next: Option<u64>,
    /// The allocation's id while allocated.
    id: BlockId,
}

impl Node {
    fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }
}

/// PyTorch's native CUDA caching allocator for one device and one stream, over a
/// [`SegmentBackend`].
#[derive(Debug)]
pub struct CachingAllocator<B: SegmentBackend> {
    backend: B,
    config: AllocatorConfig,
    stats: Stats,
    /// Every block of every segment, by address. Hashed, not ordered: every use is a lookup
    /// but the segment map's listing, which sorts; a load's million allocations each made
    /// two ordered searches of it.
    blocks: HashMap<u64, Node, foldhash::fast::RandomState>,
    /// Cached (free) blocks, ordered by (size, address): `small_blocks` and `large_blocks`.
    small_free: FreeBlocks,
    large_free: FreeBlocks,
    /// Segments by address: size and pool.
    segments: BTreeMap<u64, (u64, Pool)>,
    /// Live allocations: id to block address.
    live: HashMap<BlockId, u64, BuildHasherDefault<IdHasher>>,
    next_id: u64,
    /// Whether allocated blocks are kept (see [`CachingAllocator::load_only`]).
    keeps_allocated: bool,
}

impl<B: SegmentBackend> CachingAllocator<B> {
    /// An empty allocator: nothing reserved yet.
    pub fn new(backend: B, config: AllocatorConfig) -> Self {
        CachingAllocator {
            backend,
            config,
            stats: Stats::default(),
            blocks: HashMap::default(),
            small_free: FreeBlocks::default(),
            large_free: FreeBlocks::default(),
            segments: BTreeMap::new(),
            live: HashMap::default(),
            next_id: 1,
            keeps_allocated: true,
        }
    }

    /// An allocator for allocations that are never freed (a checkpoint's load): it keeps no
    /// state for an allocated block, only for segments and cached blocks, so a million
    /// allocations cost no more memory than their segments. Every allocation and statistic
    /// is the same as [`CachingAllocator::new`]'s; but nothing can be freed (`free` answers
    /// [`AllocError::UnknownBlock`]), [`CachingAllocator::block`] finds nothing and
    /// [`CachingAllocator::segments`] lists cached blocks only.
    pub fn load_only(backend: B, config: AllocatorConfig) -> Self {
        CachingAllocator {
            keeps_allocated: false,
            ..CachingAllocator::new(backend, config)
        }
    }

    /// Allocates `size` bytes (`malloc`): the best-fitting cached block, else a new segment,
    /// else the same after releasing cached segments; out of memory when all of that fails.
    ///
    /// A request of 0 bytes is PyTorch's null allocation: it returns a block with id
    /// [`BlockId::NULL`], address 0 and size 0 in the small pool, and changes no state and no
    /// statistic; freeing it does nothing.
    pub fn malloc(&mut self, size: u64) -> Result<Block, AllocError<B::Error>> {
        if size == 0 {
            return Ok(Block {
                id: BlockId::NULL,
                address: 0,
                size: 0,
                requested: 0,
                pool: Pool::Small,
            });
        }
        let rounded = round_size(size, &self.config);
        let pool = pool_for(rounded);
        let alloc_size = allocation_size(rounded);

        let mut found = self.get_free_block(rounded, pool);
        if found.is_none() {
            found = self.alloc_block(alloc_size, pool, false)?;
        }
        if found.is_none() && self.release_available_cached_blocks(rounded, pool)? {
            found = self.alloc_block(alloc_size, pool, false)?;
        }
        if found.is_none() {
            self.release_cached_blocks()?;
            found = self.alloc_block(alloc_size, pool, true)?;
        }
        let Some(address) = found else {
            self.stats.num_ooms += 1;
            return Err(AllocError::OutOfMemory {
                requested: size,
                rounded,
                reserved: self.stats.reserved_bytes.current,
                allocated: self.stats.allocated_bytes.current,
            });
        };
        Ok(self.alloc_found_block(address, rounded, size))
    }

    /// Frees an allocation (`free` + `free_block`): the block merges with free neighbours of
    /// its segment and stays cached.
    pub fn free(&mut self, id: BlockId) -> Result<(), AllocError<B::Error>> {
        if id == BlockId::NULL {
            return Ok(());
        }
        let address = self.live.remove(&id).ok_or(AllocError::UnknownBlock(id))?;
        let node = self.blocks.get_mut(&address).expect("live block exists");
        node.allocated = false;
        let (size, pool) = (node.size, node.pool);
        self.stats.decrease(pool, Kind::Allocation, 1);
        self.stats.decrease(pool, Kind::AllocatedBytes, size);
        if size >= self.config.max_split_size {
            self.stats.oversize_allocations.decrease(1);
        }
        self.free_block(address);
        Ok(())
    }

    /// Returns every cached segment with no allocated block to the backend
    /// (`empty_cache()`, i.e. `release_cached_blocks`).
    pub fn empty_cache(&mut self) -> Result<(), AllocError<B::Error>> {
        self.release_cached_blocks()
    }

    /// The statistics (`memory_stats()`).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Sets every statistic's peak to its current value (`reset_peak_memory_stats`).
    pub fn reset_peak_stats(&mut self) {
        let Stats {
            small_pool,
            large_pool,
            ..
        } = &mut self.stats;
        for pool in [small_pool, large_pool] {
            for stat in pool.all_stats_mut() {
                stat.peak = stat.current;
            }
        }
        for stat in self.stats.all_stats_mut() {
            stat.peak = stat.current;
        }
    }

    /// The segment map, sorted by address (`memory_snapshot()`).
    pub fn segments(&self) -> Vec<SegmentInfo> {
        let mut blocks: Vec<BlockInfo> = self
            .blocks
            .iter()
            .map(|(&address, node)| BlockInfo {
                address,
                size: node.size,
                requested: node.requested,
                allocated: node.allocated,
            })
            .collect();
        blocks.sort_unstable_by_key(|b| b.address);
        self.segments
            .iter()
            .map(|(&address, &(size, pool))| {
                // Segments do not overlap: each block lies in one.
                let from = blocks.partition_point(|b| b.address < address);
                let to = blocks.partition_point(|b| b.address < address + size);
                SegmentInfo {
                    address,
                    size,
                    pool,
                    blocks: blocks.get(from..to).unwrap_or_default().to_vec(),
                }
            })
            .collect()
    }

    /// The largest cached free block in either pool, 0 when none (`cacheInfo`, without its
    /// initial guess from the device's free memory).
    pub fn largest_free_block(&self) -> u64 {
        let small = self.small_free.largest().map_or(0, |(size, _)| size);
        let large = self.large_free.largest().map_or(0, |(size, _)| size);
        small.max(large)
    }

    /// The live allocation `id`, if any.
    pub fn block(&self, id: BlockId) -> Option<Block> {
        let &address = self.live.get(&id)?;
        let node = &self.blocks[&address];
        Some(Block {
            id,
            address,
            size: node.size,
            requested: node.requested,
            pool: node.pool,
        })
    }

    /// The settings in force.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// The segment backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The segment backend, mutably.
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    fn free_set(&mut self, pool: Pool) -> &mut FreeBlocks {
        match pool {
            Pool::Small => &mut self.small_free,
            Pool::Large => &mut self.large_free,
        }
    }

    /// Best fit (`get_free_block`): the smallest cached block of at least `size` bytes, lowest
    /// address first, unless the `max_split_size` rules forbid it. Takes it out of the pool.
    fn get_free_block(&mut self, size: u64, pool: Pool) -> Option<u64> {
        let max_split = self.config.max_split_size;
        let set = self.free_set(pool);
        let (block_size, address) = set.best_fit(size)?;
        // Do not return an oversized block for a normal request.
        if size < max_split && block_size >= max_split {
            return None;
        }
        // Allow an oversized block to be rounded up, but only within kLargeBuffer.
        if size >= max_split && block_size >= size.saturating_add(K_LARGE_BUFFER) {
            return None;
        }
        set.remove(&(block_size, address));
        Some(address)
    }

    /// A new segment from the backend (`alloc_block`); `None` when the backend is out of
    /// memory.
    fn alloc_block(
        &mut self,
        size: u64,
        pool: Pool,
        is_retry: bool,
    ) -> Result<Option<u64>, AllocError<B::Error>> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        if size > MAX_SEGMENT {
            return Ok(None);
        }
        let Some(address) = self
            .backend
            .alloc_segment(size)
            .map_err(AllocError::Backend)?
        else {
            return Ok(None);
        };
        debug_assert!(
            self.segments
                .range(..address.saturating_add(size))
                .next_back()
                .is_none_or(|(&start, &(len, _))| start + len <= address),
            "the backend returned an overlapping segment"
        );
        self.blocks.insert(
            address,
            Node {
                size,
                requested: 0,
                allocated: false,
                pool,
                prev: None,
                next: None,
                id: BlockId::NULL,
            },
        );
        self.segments.insert(address, (size, pool));
        self.stats.increase(pool, Kind::Segment, 1);
        self.stats.increase(pool, Kind::ReservedBytes, size);
        if size >= self.config.max_split_size {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        Ok(Some(address))
    }

    /// `should_split`: small-pool blocks split when at least 512 bytes remain, large-pool
    /// blocks when the request is below `max_split_size` and more than 1 MiB remains.
    fn should_split(&self, node: &Node, size: u64) -> bool {
        let remaining = node.size - size;
        match node.pool {
            Pool::Small => remaining >= K_MIN_BLOCK_SIZE,
            Pool::Large => size < self.config.max_split_size && remaining > K_SMALL_SIZE,
        }
    }

    /// `alloc_found_block`: the block at `address` (out of the free set) becomes the
    /// allocation; when [`Self::should_split`] says so, its first `size` bytes do and the
    /// rest returns to the pool.
    fn alloc_found_block(&mut self, address: u64, size: u64, requested: u64) -> Block {
        let id = BlockId(self.next_id);
        self.next_id += 1;
        // Taken out and put back only if kept: one search of the map each way, where looking
        // it up for each change took five.
        let mut node = self.blocks.remove(&address).expect("found block exists");
        let pool = node.pool;
        let already_split = node.is_split();
        if self.should_split(&node, size) {
            let remaining_address = address + size;
            let remaining_size = node.size - size;
            let old_next = node.next;
            self.blocks.insert(
                remaining_address,
                Node {
                    size: remaining_size,
                    requested: 0,
                    allocated: false,
                    pool,
                    prev: Some(address),
                    next: old_next,
                    id: BlockId::NULL,
                },
            );
            if let Some(next) = old_next {
                // Absent only when allocated and forgotten (load-only): nothing to relink.
                match self.blocks.get_mut(&next) {
                    Some(node) => node.prev = Some(remaining_address),
                    None => debug_assert!(!self.keeps_allocated, "next block exists"),
                }
            }
            node.size = size;
            node.next = Some(remaining_address);
            self.free_set(pool)
                .insert((remaining_size, remaining_address));
            if already_split {
                // An already-split inactive block shrinks by `size` bytes.
                self.stats.decrease(pool, Kind::InactiveSplitBytes, size);
            } else {
                // A new inactive split block appears in a previously unsplit segment.
                self.stats
                    .increase(pool, Kind::InactiveSplitBytes, remaining_size);
                self.stats.increase(pool, Kind::InactiveSplit, 1);
            }
        } else if already_split {
            // An inactive split block becomes active whole.
            let whole = node.size;
            self.stats.decrease(pool, Kind::InactiveSplitBytes, whole);
            self.stats.decrease(pool, Kind::InactiveSplit, 1);
        }
        node.allocated = true;
        node.requested = requested;
        node.id = id;
        let block_size = node.size;
        if self.keeps_allocated {
            self.live.insert(id, address);
            self.blocks.insert(address, node);
        }
        // Load-only: its neighbours keep its address (they stay split); nothing else refers
        // to it.
        self.stats.increase(pool, Kind::Allocation, 1);
        self.stats.increase(pool, Kind::AllocatedBytes, block_size);
        self.stats.increase(pool, Kind::Active, 1);
        self.stats.increase(pool, Kind::ActiveBytes, block_size);
        self.stats.increase(pool, Kind::RequestedBytes, requested);
        if block_size >= self.config.max_split_size {
            self.stats.oversize_allocations.increase(1);
        }
        Block {
            id,
            address,
            size: block_size,
            requested,
            pool,
        }
    }

    /// `free_block`: merge with the previous, then the next block when free, cache the
    /// result and move the inactive-split and active statistics.
    fn free_block(&mut self, address: u64) {
        let node = &self.blocks[&address];
        let (original_size, requested, pool) = (node.size, node.requested, node.pool);
        let (prev, next) = (node.prev, node.next);
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;
        let mut address = address;
        if let Some(prev) = prev {
            if let Some(subsumed) = self.try_merge_prev(address, prev) {
                address = prev;
                net_blocks -= 1;
                net_bytes -= subsumed as i64;
            }
        }
        if let Some(next) = next {
            if let Some(subsumed) = self.try_merge_next(address, next) {
                net_blocks -= 1;
                net_bytes -= subsumed as i64;
            }
        }
        let node = self.blocks.get_mut(&address).expect("freed block exists");
        node.requested = 0;
        node.id = BlockId::NULL;
        let (size, is_split) = (node.size, node.is_split());
        self.free_set(pool).insert((size, address));
        if is_split {
            net_blocks += 1;
            net_bytes += size as i64;
        }
        match net_blocks.cmp(&0) {
            std::cmp::Ordering::Greater => {
                self.stats
                    .increase(pool, Kind::InactiveSplit, net_blocks as u64)
            }
            std::cmp::Ordering::Less => {
                self.stats
                    .decrease(pool, Kind::InactiveSplit, net_blocks.unsigned_abs())
            }
            std::cmp::Ordering::Equal => {}
        }
        match net_bytes.cmp(&0) {
            std::cmp::Ordering::Greater => {
                self.stats
                    .increase(pool, Kind::InactiveSplitBytes, net_bytes as u64)
            }
            std::cmp::Ordering::Less => {
                self.stats
                    .decrease(pool, Kind::InactiveSplitBytes, net_bytes.unsigned_abs())
            }
            std::cmp::Ordering::Equal => {}
        }
        self.stats.decrease(pool, Kind::Active, 1);
        self.stats.decrease(pool, Kind::ActiveBytes, original_size);
        self.stats.decrease(pool, Kind::RequestedBytes, requested);
    }

    /// `try_merge_blocks` with `src` before `dst`: the merged block starts at `src`. Returns
    /// the bytes subsumed (`src`'s size) when `src` is free.
    fn try_merge_prev(&mut self, dst: u64, src: u64) -> Option<u64> {
        let src_node = &self.blocks[&src];
        if src_node.allocated {
            return None;
        }
        let (src_size, pool) = (src_node.size, src_node.pool);
        self.free_set(pool).remove(&(src_size, src));
        let dst_node = self.blocks.remove(&dst).expect("merged block exists");
        let merged = self.blocks.get_mut(&src).expect("merged block exists");
        merged.size += dst_node.size;
        merged.next = dst_node.next;
        if let Some(next) = dst_node.next {
            self.blocks.get_mut(&next).expect("next block exists").prev = Some(src);
        }
        Some(src_size)
    }

    /// `try_merge_blocks` with `src` after `dst`. Returns the bytes subsumed when `src` is
    /// free.
    fn try_merge_next(&mut self, dst: u64, src: u64) -> Option<u64> {
        let src_node = &self.blocks[&src];
        if src_node.allocated {
            return None;
        }
        let (src_size, pool, src_next) = (src_node.size, src_node.pool, src_node.next);
        self.free_set(pool).remove(&(src_size, src));
        self.blocks.remove(&src);
        let dst_node = self.blocks.get_mut(&dst).expect("merged block exists");
        dst_node.size += src_size;
        dst_node.next = src_next;
        if let Some(next) = src_next {
            self.blocks.get_mut(&next).expect("next block exists").prev = Some(dst);
        }
        Some(src_size)
    }

    /// `release_available_cached_blocks` (only with a `max_split_size`): free one cached
    /// oversize block of at least `max(size, max_split_size)` bytes, else oversize blocks from
    /// the largest down until that many bytes are freed. True when enough was freed.
    fn release_available_cached_blocks(
        &mut self,
        size: u64,
        pool: Pool,
    ) -> Result<bool, AllocError<B::Error>> {
        let max_split = self.config.max_split_size;
        if max_split == u64::MAX {
            return Ok(false);
        }
        let key = size.max(max_split);
        let set = match pool {
            Pool::Small => self.small_free.ordered(),
            Pool::Large => self.large_free.ordered(),
        };
        // Oversize free blocks are whole segments for every `max_split_size` PyTorch accepts
        // (a multiple of 1 MiB, at least 20 MiB); the whole-segment checks only keep a
        // hand-made configuration from releasing part of a segment.
        let whole = |&(_, address): &(u64, u64)| !self.blocks[&address].is_split();
        if let Some(&(_, address)) = set.range((key, 0)..).next().filter(|entry| whole(entry)) {
            self.release_block(address)?;
            return Ok(true);
        }
        let mut victims = Vec::new();
        let mut total: u64 = 0;
        for entry in set.iter().rev() {
            if total >= key || entry.0 < max_split {
                break;
            }
            if whole(entry) {
                victims.push(entry.1);
                total = total.saturating_add(entry.0);
            }
        }
        for address in victims {
            self.release_block(address)?;
        }
        Ok(total >= key)
    }

    /// `release_cached_blocks`: return every cached block that is a whole segment, large pool
    /// first.
    fn release_cached_blocks(&mut self) -> Result<(), AllocError<B::Error>> {
        for pool in [Pool::Large, Pool::Small] {
            let set = match pool {
                Pool::Small => self.small_free.ordered(),
                Pool::Large => self.large_free.ordered(),
            };
            let whole: Vec<u64> = set
                .iter()
                .map(|&(_, address)| address)
                .filter(|address| !self.blocks[address].is_split())
                .collect();
            for address in whole {
                self.release_block(address)?;
            }
        }
        Ok(())
    }

    /// `release_block`: a cached whole segment goes back to the backend.
    fn release_block(&mut self, address: u64) -> Result<(), AllocError<B::Error>> {
        let node = &self.blocks[&address];
        debug_assert!(!node.allocated && !node.is_split());
        let (size, pool) = (node.size, node.pool);
        self.backend
            .free_segment(address, size)
            .map_err(AllocError::Backend)?;
        self.blocks.remove(&address);
        self.free_set(pool).remove(&(size, address));
        self.segments.remove(&address);
        self.stats.num_device_free += 1;
        self.stats.decrease(pool, Kind::Segment, 1);
        self.stats.decrease(pool, Kind::ReservedBytes, size);
        if size >= self.config.max_split_size {
            self.stats.oversize_segments.decrease(1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::caching::sizes::{K_SMALL_BUFFER, MIB};
    use crate::alloc::caching::stats::{PoolStats, Stat};
    use crate::alloc::caching::test_support::allocator;
    use crate::alloc::Simulated;

    const BASE: u64 = 0x7f00_0000_0000;

    fn with_split(capacity: u64, max_split_mb: u64) -> CachingAllocator<Simulated> {
        let config = AllocatorConfig {
            max_split_size: max_split_mb * MIB,
            ..Default::default()
        };
        CachingAllocator::new(Simulated::new(capacity), config)
    }

    /// (address, size, requested, allocated) of every block, segment by segment.
    fn layout(a: &CachingAllocator<Simulated>) -> Vec<Vec<(u64, u64, u64, bool)>> {
        a.segments()
            .iter()
            .map(|s| {
                s.blocks
                    .iter()
                    .map(|b| (b.address, b.size, b.requested, b.allocated))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn two_small_allocations_share_a_segment_and_merge_back() {
        let mut a = allocator(u64::MAX);
        let x = a.malloc(MIB - 1).unwrap();
        assert_eq!((x.address, x.size, x.pool), (BASE, MIB, Pool::Small));
        // The 2 MiB segment was split: its free half is an inactive split block.
        assert_eq!(a.stats().inactive_split.current, 1);
        assert_eq!(a.stats().inactive_split_bytes.current, MIB);
        let y = a.malloc(MIB - 1).unwrap();
        assert_eq!((y.address, y.size), (BASE + MIB, MIB));
        assert_eq!(a.stats().segment.current, 1);
        assert_eq!(a.stats().reserved_bytes.current, 2 * MIB);
        assert_eq!(a.stats().inactive_split.current, 0);
        assert_eq!(a.stats().inactive_split_bytes.current, 0);
        assert_eq!(a.stats().allocated_bytes.current, 2 * MIB);
        assert_eq!(a.stats().requested_bytes.current, 2 * MIB - 2);
        assert_eq!(a.largest_free_block(), 0);

        a.free(x.id).unwrap();
        assert_eq!(a.stats().inactive_split.current, 1);
        assert_eq!(a.stats().inactive_split_bytes.current, MIB);
        assert_eq!(
            layout(&a),
            vec![vec![
                (BASE, MIB, 0, false),
                (BASE + MIB, MIB, MIB - 1, true)
            ]]
        );
        a.free(y.id).unwrap();
        assert_eq!(layout(&a), vec![vec![(BASE, 2 * MIB, 0, false)]]);
        assert_eq!(a.stats().inactive_split.current, 0);
        assert_eq!(a.stats().inactive_split_bytes.current, 0);
        assert_eq!(a.stats().allocated_bytes.current, 0);
        assert_eq!(a.stats().requested_bytes.current, 0);
        assert_eq!(a.stats().active.current, 0);
        assert_eq!(a.stats().reserved_bytes.current, 2 * MIB);
        assert_eq!(a.largest_free_block(), 2 * MIB);
        assert_eq!(a.stats().small_pool.reserved_bytes.current, 2 * MIB);
        assert_eq!(a.stats().large_pool, PoolStats::default());
        // Freed twice: unknown.
        assert!(matches!(a.free(y.id), Err(AllocError::UnknownBlock(id)) if id == y.id));
    }

    #[test]
    fn middle_free_merges_both_ways() {
        let mut a = allocator(u64::MAX);
        let blocks: Vec<Block> = (0..4).map(|_| a.malloc(512 * 1024).unwrap()).collect();
        assert_eq!(a.stats().segment.current, 1);
        assert_eq!(a.stats().inactive_split.current, 0);
        a.free(blocks[0].id).unwrap();
        a.free(blocks[2].id).unwrap();
        assert_eq!(a.stats().inactive_split.current, 2);
        assert_eq!(a.stats().inactive_split_bytes.current, MIB);
        // Freeing block 1 joins 0, 1 and 2 into one free block.
        a.free(blocks[1].id).unwrap();
        assert_eq!(a.stats().inactive_split.current, 1);
        assert_eq!(a.stats().inactive_split_bytes.current, 1536 * 1024);
        assert_eq!(
            layout(&a),
            vec![vec![
                (BASE, 1536 * 1024, 0, false),
                (BASE + 1536 * 1024, 512 * 1024, 512 * 1024, true)
            ]]
        );
        // Best fit takes the lowest address among equals and splits the free block.
        let c = a.malloc(1000).unwrap();
        assert_eq!((c.address, c.size), (BASE, 1024));
        assert_eq!(a.stats().inactive_split.current, 1);
        assert_eq!(a.stats().inactive_split_bytes.current, 1536 * 1024 - 1024);
    }

    #[test]
    fn large_request_splits_a_fresh_20_mib_segment() {
        let mut a = allocator(u64::MAX);
        let b = a.malloc(5 * MIB).unwrap();
        assert_eq!((b.address, b.size, b.pool), (BASE, 5 * MIB, Pool::Large));
        assert_eq!(a.stats().reserved_bytes.current, 20 * MIB);
        assert_eq!(a.stats().inactive_split.current, 1);
        assert_eq!(a.stats().inactive_split_bytes.current, 15 * MIB);
        assert_eq!(a.largest_free_block(), 15 * MIB);
        assert_eq!(
            layout(&a),
            vec![vec![
                (BASE, 5 * MIB, 5 * MIB, true),
                (BASE + 5 * MIB, 15 * MIB, 0, false)
            ]]
        );
        // A second request carves the remainder; one that leaves <= 1 MiB takes it whole.
        let c = a.malloc(14 * MIB + 1).unwrap();
        assert_eq!(
            (c.address, c.size, c.requested),
            (BASE + 5 * MIB, 15 * MIB, 14 * MIB + 1)
        );
        assert_eq!(a.stats().segment.current, 1);
        assert_eq!(a.stats().inactive_split.current, 0);
        assert_eq!(a.stats().allocated_bytes.current, 20 * MIB);
        assert_eq!(a.stats().requested_bytes.current, 19 * MIB + 1);
    }

    #[test]
    fn large_remainder_of_exactly_1_mib_is_not_split() {
        let mut a = allocator(u64::MAX);
        let b = a.malloc(19 * MIB).unwrap(); // 20 MiB segment, 1 MiB left: not > kSmallSize
        assert_eq!(b.size, 19 * MIB + MIB);
        assert_eq!(a.stats().inactive_split.current, 0);
        assert_eq!(a.segments()[0].blocks.len(), 1);
        // 11 MiB rounds its segment to 12 MiB: 1 MiB left, no split either.
        let c = a.malloc(11 * MIB).unwrap();
        assert_eq!(c.size, 12 * MIB);
        // Small pool: any remainder of at least 512 bytes splits.
        let d = a.malloc(2 * MIB - 512).unwrap();
        assert_eq!(d.pool, Pool::Large); // over 1 MiB
        let e = a.malloc(MIB - 512).unwrap();
        assert_eq!(e.size, MIB - 512);
        assert_eq!(a.stats().small_pool.inactive_split_bytes.current, MIB + 512);
    }

    #[test]
    fn best_fit_reuses_the_smallest_cached_block() {
        let mut a = allocator(u64::MAX);
        let x = a.malloc(12 * MIB).unwrap();
        let y = a.malloc(16 * MIB).unwrap();
        let z = a.malloc(14 * MIB).unwrap();
        for id in [x.id, y.id, z.id] {
            a.free(id).unwrap();
        }
        assert_eq!(a.stats().segment.current, 3);
        assert_eq!(a.stats().num_device_alloc, 3);
        // 13 MiB: candidates 14 and 16 MiB; 14 wins and leaves 1 MiB, so it is not split.
        let b = a.malloc(13 * MIB).unwrap();
        assert_eq!(
            (b.address, b.size, b.requested),
            (z.address, 14 * MIB, 13 * MIB)
        );
        assert_eq!(a.stats().allocated_bytes.current, 14 * MIB);
        assert_eq!(a.stats().num_device_alloc, 3);
        // 3 MiB: the 12 MiB block is the best fit and is split (9 MiB left).
        let c = a.malloc(3 * MIB).unwrap();
        assert_eq!((c.address, c.size), (x.address, 3 * MIB));
        assert_eq!(a.stats().inactive_split_bytes.current, 9 * MIB);
        assert_eq!(a.largest_free_block(), 16 * MIB);
        // 17 MiB fits nothing cached: a new 18 MiB segment.
        let d = a.malloc(17 * MIB).unwrap();
        assert_eq!(d.size, 18 * MIB);
        assert_eq!(a.stats().num_device_alloc, 4);
        assert_eq!(a.stats().reserved_bytes.current, (12 + 16 + 14 + 18) * MIB);
        // Requests never cross pools: a small request does not touch the large free blocks.
        let e = a.malloc(1000).unwrap();
        assert_eq!(e.pool, Pool::Small);
        assert_eq!(a.stats().num_device_alloc, 5);
    }

    #[test]
    fn max_split_size_keeps_oversize_blocks_whole() {
        let mut a = with_split(u64::MAX, 20);
        let big = a.malloc(25 * MIB).unwrap();
        // 25 MiB >= max_split: its 26 MiB segment is not split, the block takes all of it.
        assert_eq!((big.size, big.requested), (26 * MIB, 25 * MIB));
        assert_eq!(a.stats().oversize_allocations.current, 1);
        assert_eq!(a.stats().oversize_segments.current, 1);
        a.free(big.id).unwrap();
        assert_eq!(a.stats().oversize_allocations.current, 0);
        // A 5 MiB request may not take the cached 26 MiB block: a fresh 20 MiB segment, split.
        let small = a.malloc(5 * MIB).unwrap();
        assert_ne!(small.address, big.address);
        assert_eq!(small.size, 5 * MIB);
        assert_eq!(a.stats().reserved_bytes.current, 46 * MIB);
        assert_eq!(a.stats().oversize_segments.current, 2); // 20 MiB >= 20 MiB
        assert_eq!(a.stats().inactive_split_bytes.current, 15 * MIB);
        // 24 MiB may take the 26 MiB block (26 < 24 + 20), whole.
        let again = a.malloc(24 * MIB).unwrap();
        assert_eq!((again.address, again.size), (big.address, 26 * MIB));
        a.free(again.id).unwrap();
        // 5 MiB now fits the cached 15 MiB remainder (below max_split) and splits it.
        let other = a.malloc(5 * MIB).unwrap();
        assert_eq!(other.address, small.address + 5 * MIB);
        assert_eq!(a.stats().segment.current, 2);
    }

    #[test]
    fn max_split_size_limits_rounding_up_of_oversize_requests() {
        let mut a = with_split(u64::MAX, 20);
        let huge = a.malloc(46 * MIB).unwrap();
        a.free(huge.id).unwrap();
        // 46 >= 24 + 20: too wasteful, a new segment.
        let b = a.malloc(24 * MIB).unwrap();
        assert_ne!(b.address, huge.address);
        assert_eq!(b.size, 24 * MIB);
        // 46 < 27 + 20: reused whole.
        let c = a.malloc(27 * MIB).unwrap();
        assert_eq!((c.address, c.size), (huge.address, 46 * MIB));
        assert_eq!(a.stats().allocated_bytes.current, 70 * MIB);
        assert_eq!(a.stats().requested_bytes.current, 51 * MIB);
        // Without max_split_size the same 46 MiB block would be split for 24 MiB.
        let mut d = allocator(u64::MAX);
        let huge = d.malloc(46 * MIB).unwrap();
        d.free(huge.id).unwrap();
        let e = d.malloc(24 * MIB).unwrap();
        assert_eq!((e.address, e.size), (huge.address, 24 * MIB));
        assert_eq!(d.largest_free_block(), 22 * MIB);
    }

    #[test]
    fn out_of_memory_releases_cached_segments_and_retries() {
        let mut a = allocator(30 * MIB);
        let x = a.malloc(25 * MIB).unwrap();
        a.free(x.id).unwrap();
        assert_eq!(a.backend().used(), 26 * MIB);
        // 28 MiB fits no cached block and not beside the cached 26 MiB segment: the cache is
        // released and the retry succeeds.
        let y = a.malloc(28 * MIB).unwrap();
        assert_eq!(y.size, 28 * MIB);
        let stats = a.stats();
        assert_eq!(stats.num_alloc_retries, 1);
        assert_eq!(stats.num_ooms, 0);
        assert_eq!(stats.num_device_alloc, 2);
        assert_eq!(stats.num_device_free, 1);
        assert_eq!(stats.segment.current, 1);
        assert_eq!(stats.reserved_bytes.current, 28 * MIB);
        assert_eq!(stats.reserved_bytes.peak, 28 * MIB);
        assert_eq!(stats.reserved_bytes.freed, 26 * MIB);
        assert_eq!(a.backend().used(), 28 * MIB);
    }

    #[test]
    fn true_out_of_memory_reports_pytorch_numbers() {
        let mut a = allocator(30 * MIB);
        let x = a.malloc(25 * MIB).unwrap();
        let small = a.malloc(1000).unwrap();
        a.free(small.id).unwrap(); // a cached, releasable 2 MiB segment
        assert_eq!(a.backend().used(), 28 * MIB);
        let err = a.malloc(5 * MIB).unwrap_err();
        match err {
            AllocError::OutOfMemory {
                requested,
                rounded,
                reserved,
                allocated,
            } => {
                assert_eq!(requested, 5 * MIB);
                assert_eq!(rounded, 5 * MIB);
                assert_eq!(reserved, 26 * MIB); // the small segment was released on the way
                assert_eq!(allocated, 26 * MIB);
            }
            other => panic!("expected OOM, got {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            "CUDA out of memory. Tried to allocate 20.00 MiB (a request of 5242880 bytes, \
             rounded to 5.00 MiB). Of the allocated memory 26.00 MiB is allocated by PyTorch, \
             and 0 bytes is reserved by PyTorch but unallocated."
        );
        let stats = a.stats();
        assert_eq!(stats.num_ooms, 1);
        assert_eq!(stats.num_alloc_retries, 1);
        assert_eq!(stats.num_device_free, 1);
        assert_eq!(stats.allocation.current, 1);
        assert_eq!(a.backend().used(), 26 * MIB);
        // The allocator is still usable.
        a.free(x.id).unwrap();
        assert!(a.malloc(5 * MIB).is_ok());
        assert_eq!(a.stats().num_ooms, 1);
        assert_eq!(a.stats().num_alloc_retries, 1);
    }

    #[test]
    fn out_of_memory_with_split_cache_is_not_released() {
        // The cached 15 MiB remainder belongs to a segment still in use: not releasable.
        let mut a = allocator(30 * MIB);
        let _x = a.malloc(5 * MIB).unwrap();
        let err = a.malloc(16 * MIB).unwrap_err();
        assert!(matches!(
            err,
            AllocError::OutOfMemory { reserved, allocated, .. }
                if reserved == 20 * MIB && allocated == 5 * MIB
        ));
        assert!(err
            .to_string()
            .contains("15.00 MiB is reserved by PyTorch but unallocated"));
        assert_eq!(a.stats().inactive_split_bytes.current, 15 * MIB);
        assert_eq!(a.stats().num_ooms, 1);
    }

    #[test]
    fn release_available_frees_one_oversize_block_before_the_full_release() {
        let mut a = with_split(40 * MIB, 20);
        let big = a.malloc(25 * MIB).unwrap();
        a.free(big.id).unwrap();
        // 5 MiB may not use the 26 MiB block and 26 + 20 > 40: release_available_cached_blocks
        // frees that one block (>= max(5, 20) MiB) and the plain retry succeeds.
        let b = a.malloc(5 * MIB).unwrap();
        assert_eq!(b.size, 5 * MIB);
        assert_eq!(a.stats().num_alloc_retries, 0);
        assert_eq!(a.stats().num_device_free, 1);
        assert_eq!(a.stats().oversize_segments.current, 1);
        assert_eq!(a.backend().used(), 20 * MIB);
    }

    #[test]
    fn release_available_frees_several_oversize_blocks_largest_first() {
        let mut a = with_split(60 * MIB, 20);
        let x = a.malloc(21 * MIB).unwrap(); // 22 MiB segment
        let y = a.malloc(23 * MIB).unwrap(); // 24 MiB segment
        let s = a.malloc(1000).unwrap(); // 2 MiB small segment, cached below
        for id in [x.id, y.id, s.id] {
            a.free(id).unwrap();
        }
        assert_eq!(a.backend().used(), 48 * MIB);
        // 40 MiB: no cached block >= 40 MiB; 24 then 22 MiB are freed (46 >= 40), and the
        // small segment stays.
        let b = a.malloc(40 * MIB).unwrap();
        assert_eq!(b.size, 40 * MIB);
        assert_eq!(a.stats().num_alloc_retries, 0);
        assert_eq!(a.stats().num_device_free, 2);
        assert_eq!(a.stats().segment.current, 2);
        assert_eq!(a.backend().used(), 42 * MIB);
    }

    #[test]
    fn release_available_short_of_the_key_falls_through_to_the_full_release() {
        let mut a = with_split(50 * MIB, 20);
        let x = a.malloc(21 * MIB).unwrap(); // 22 MiB oversize
        let y = a.malloc(5 * MIB).unwrap(); // 20 MiB segment, split
        a.free(x.id).unwrap();
        a.free(y.id).unwrap(); // whole again: 20 MiB, oversize too (>= 20 MiB)
        assert_eq!(a.backend().used(), 42 * MIB);
        // 50 MiB: oversize blocks total 42 < 50, all released, returns false; the full
        // release finds nothing more, the retry fits (0 + 50 <= 50).
        let b = a.malloc(50 * MIB).unwrap();
        assert_eq!(b.size, 50 * MIB);
        assert_eq!(a.stats().num_device_free, 2);
        assert_eq!(a.stats().num_alloc_retries, 1);
        assert_eq!(a.stats().num_ooms, 0);
    }

    #[test]
    fn empty_cache_releases_only_unsplit_cached_segments() {
        let mut a = allocator(u64::MAX);
        let x = a.malloc(5 * MIB).unwrap();
        let y = a.malloc(30 * MIB).unwrap();
        let z = a.malloc(100).unwrap();
        a.free(y.id).unwrap();
        a.free(z.id).unwrap();
        assert_eq!(a.stats().segment.current, 3);
        a.empty_cache().unwrap();
        assert_eq!(a.stats().segment.current, 1);
        assert_eq!(a.stats().reserved_bytes.current, 20 * MIB);
        assert_eq!(a.backend().used(), 20 * MIB);
        assert_eq!(a.stats().num_device_free, 2);
        assert_eq!(a.stats().num_alloc_retries, 0);
        a.free(x.id).unwrap();
        a.empty_cache().unwrap();
        assert_eq!(a.stats().reserved_bytes.current, 0);
        assert!(a.segments().is_empty());
        assert_eq!(a.largest_free_block(), 0);
    }

    #[test]
    fn zero_byte_requests_are_null_allocations() {
        let mut a = allocator(u64::MAX);
        let b = a.malloc(0).unwrap();
        assert_eq!(
            b,
            Block {
                id: BlockId::NULL,
                address: 0,
                size: 0,
                requested: 0,
                pool: Pool::Small
            }
        );
        assert_eq!(a.stats(), &Stats::default());
        a.free(b.id).unwrap();
        assert_eq!(a.stats(), &Stats::default());
        assert!(a.segments().is_empty());
    }

    #[test]
    fn block_lookup_and_ids() {
        let mut a = allocator(u64::MAX);
        let x = a.malloc(100).unwrap();
        let y = a.malloc(100).unwrap();
        assert_ne!(x.id, y.id);
        assert_ne!(x.id, BlockId::NULL);
        assert_eq!(a.block(x.id), Some(x));
        a.free(x.id).unwrap();
        assert_eq!(a.block(x.id), None);
        let z = a.malloc(100).unwrap();
        assert_eq!(z.address, x.address);
        assert_ne!(z.id, x.id); // ids are never reused
        assert!(matches!(a.free(x.id), Err(AllocError::UnknownBlock(_))));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            Malloc(u64),
            Free(usize),
            EmptyCache,
        }

        fn size() -> impl Strategy<Value = u64> {
            prop_oneof![
                3 => 1u64..=MIB + 4096,
                3 => MIB..=12 * MIB,
                2 => 10 * MIB..=48 * MIB,
                1 => prop::sample::select(vec![
                    511, 512, 513, MIB, MIB + 1, 10 * MIB - 1, 10 * MIB, 19 * MIB, 20 * MIB,
                    21 * MIB, 25 * MIB,
                ]),
            ]
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                6 => size().prop_map(Op::Malloc),
                5 => any::<prop::sample::Index>().prop_map(|i| Op::Free(i.index(usize::MAX))),
                1 => Just(Op::EmptyCache),
            ]
        }

        fn config() -> impl Strategy<Value = AllocatorConfig> {
            prop::sample::select(vec![
                "",
                "max_split_size_mb:20",
                "max_split_size_mb:21",
                "max_split_size_mb:40",
                "roundup_power2_divisions:4",
                "roundup_power2_divisions:[1:2,4:8,>:4],max_split_size_mb:32",
            ])
            .prop_map(|text| AllocatorConfig::parse(text).unwrap())
        }

        fn sum_stat(s: &Stats, f: impl Fn(&PoolStats) -> Stat) -> Stat {
            let (a, b) = (f(&s.small_pool), f(&s.large_pool));
            Stat {
                current: a.current + b.current,
                peak: 0,
                allocated: a.allocated + b.allocated,
                freed: a.freed + b.freed,
            }
        }

        fn check(a: &CachingAllocator<Simulated>, live: &[Block]) {
            let segments = a.segments();
            let stats = a.stats();
            let max_split = a.config().max_split_size;
            let mut reserved = 0;
            let mut allocated_bytes = 0;
            let mut requested_bytes = 0;
            let mut free_bytes = 0;
            let mut allocated_count = 0;
            let mut inactive_split = 0;
            let mut inactive_split_bytes = 0;
            let mut largest_free = 0;
            let mut oversize_segments = 0;
            let mut oversize_allocations = 0;
            let mut previous_end = 0;
            for seg in &segments {
                assert!(
                    seg.address >= previous_end,
                    "segments overlap or are unsorted"
                );
                assert_eq!(seg.address % 512, 0);
                previous_end = seg.address + seg.size;
                reserved += seg.size;
                if seg.pool == Pool::Small {
                    assert_eq!(seg.size, K_SMALL_BUFFER);
                }
                oversize_segments += u64::from(seg.size >= max_split);
                // Blocks tile the segment exactly; no two free neighbours (they merge).
                let mut at = seg.address;
                let mut previous_free = false;
                for b in &seg.blocks {
                    assert_eq!(b.address, at, "blocks do not tile {seg:?}");
                    assert!(b.size > 0 && b.size % 512 == 0);
                    at += b.size;
                    if b.allocated {
                        assert!(b.requested > 0 && b.requested <= b.size);
                        allocated_count += 1;
                        allocated_bytes += b.size;
                        requested_bytes += b.requested;
                        oversize_allocations += u64::from(b.size >= max_split);
                        previous_free = false;
                    } else {
                        assert_eq!(b.requested, 0);
                        assert!(!previous_free, "adjacent free blocks in {seg:?}");
                        previous_free = true;
                        free_bytes += b.size;
                        largest_free = largest_free.max(b.size);
                        if seg.blocks.len() > 1 {
                            inactive_split += 1;
                            inactive_split_bytes += b.size;
                        }
                        // An oversize free block is always a whole, releasable segment.
                        if b.size >= max_split {
                            assert_eq!(seg.blocks.len(), 1);
                        }
                    }
                }
                assert_eq!(at, seg.address + seg.size);
            }

            // Live blocks: each is allocated in exactly one segment, none overlap.
            let mut sorted: Vec<Block> = live.to_vec();
            sorted.sort_by_key(|b| b.address);
            for pair in sorted.windows(2) {
                assert!(
                    pair[0].address + pair[0].size <= pair[1].address,
                    "overlap {pair:?}"
                );
            }
            for b in live {
                let holders: Vec<&SegmentInfo> = segments
                    .iter()
                    .filter(|s| s.address <= b.address && b.address + b.size <= s.address + s.size)
                    .collect();
                assert_eq!(holders.len(), 1, "{b:?} not inside exactly one segment");
                assert_eq!(holders[0].pool, b.pool);
                assert!(holders[0].blocks.contains(&BlockInfo {
                    address: b.address,
                    size: b.size,
                    requested: b.requested,
                    allocated: true,
                }));
                assert_eq!(a.block(b.id), Some(*b));
            }
            assert_eq!(allocated_count, live.len());

            // Statistics add up.
            assert_eq!(stats.reserved_bytes.current, reserved);
            assert_eq!(stats.reserved_bytes.current, a.backend().used());
            assert_eq!(stats.segment.current, segments.len() as u64);
            assert_eq!(stats.segment.current, a.backend().segment_count() as u64);
            assert_eq!(stats.allocated_bytes.current, allocated_bytes);
            assert_eq!(
                stats.allocated_bytes.current + free_bytes,
                stats.reserved_bytes.current
            );
            assert_eq!(stats.active_bytes.current, stats.allocated_bytes.current);
            assert_eq!(stats.active.current, stats.allocation.current);
            assert_eq!(stats.allocation.current, live.len() as u64);
            assert_eq!(stats.requested_bytes.current, requested_bytes);
            assert!(stats.requested_bytes.current <= stats.allocated_bytes.current);
            assert_eq!(stats.inactive_split.current, inactive_split);
            assert_eq!(stats.inactive_split_bytes.current, inactive_split_bytes);
            assert_eq!(stats.oversize_segments.current, oversize_segments);
            assert_eq!(stats.oversize_allocations.current, oversize_allocations);
            assert_eq!(a.largest_free_block(), largest_free);
            assert_eq!(
                stats.num_device_alloc - stats.num_device_free,
                stats.segment.current
            );
            let all = [
                (stats.allocation, sum_stat(stats, |p| p.allocation)),
                (
                    stats.allocated_bytes,
                    sum_stat(stats, |p| p.allocated_bytes),
                ),
                (
                    stats.requested_bytes,
                    sum_stat(stats, |p| p.requested_bytes),
                ),
                (stats.reserved_bytes, sum_stat(stats, |p| p.reserved_bytes)),
                (stats.segment, sum_stat(stats, |p| p.segment)),
                (stats.active, sum_stat(stats, |p| p.active)),
                (stats.active_bytes, sum_stat(stats, |p| p.active_bytes)),
                (stats.inactive_split, sum_stat(stats, |p| p.inactive_split)),
                (
                    stats.inactive_split_bytes,
                    sum_stat(stats, |p| p.inactive_split_bytes),
                ),
            ];
            for (total, per_pool) in all {
                assert_eq!(total.current, per_pool.current);
                assert_eq!(total.allocated, per_pool.allocated);
                assert_eq!(total.freed, per_pool.freed);
                assert!(total.peak >= total.current);
                assert_eq!(total.allocated - total.freed, total.current);
            }
            for pool in [Pool::Small, Pool::Large] {
                let p = stats.pool(pool);
                let seg_bytes: u64 = segments
                    .iter()
                    .filter(|s| s.pool == pool)
                    .map(|s| s.size)
                    .sum();
                assert_eq!(p.reserved_bytes.current, seg_bytes);
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

            #[test]
            fn random_malloc_free_sequences_keep_the_books(
                capacity_mb in prop::sample::select(vec![30u64, 64, 100, 256]),
                config in config(),
                ops in prop::collection::vec(op(), 1..120),
            ) {
                let capacity = capacity_mb * MIB;
                let mut a = CachingAllocator::new(Simulated::new(capacity), config);
                let mut live: Vec<Block> = Vec::new();
                let mut ooms = 0;
                for op in ops {
                    match op {
                        Op::Malloc(size) => match a.malloc(size) {
                            Ok(block) => {
                                prop_assert_eq!(block.requested, size);
                                prop_assert_eq!(block.pool, pool_for(round_size(size, a.config())));
                                prop_assert!(block.size >= round_size(size, a.config()));
                                live.push(block);
                            }
                            Err(AllocError::OutOfMemory { requested, rounded, reserved, allocated }) => {
                                ooms += 1;
                                prop_assert_eq!(requested, size);
                                prop_assert_eq!(rounded, round_size(size, a.config()));
                                prop_assert_eq!(reserved, a.stats().reserved_bytes.current);
                                prop_assert_eq!(allocated, a.stats().allocated_bytes.current);
                                // Everything releasable was released, and still no room.
                                prop_assert!(capacity - a.backend().used() < allocation_size(rounded));
                                for seg in a.segments() {
                                    prop_assert!(seg.blocks.iter().any(|b| b.allocated));
                                }
                            }
                            Err(other) => prop_assert!(false, "unexpected error {other}"),
                        },
                        Op::Free(index) => {
                            if !live.is_empty() {
                                let block = live.swap_remove(index % live.len());
                                a.free(block.id).unwrap();
                            }
                        }
                        Op::EmptyCache => {
                            a.empty_cache().unwrap();
                            for seg in a.segments() {
                                prop_assert!(seg.blocks.iter().any(|b| b.allocated));
                            }
                        }
                    }
                    check(&a, &live);
                }
                prop_assert_eq!(a.stats().num_ooms, ooms);
                // Freeing everything and emptying the cache returns every byte.
                for block in live.drain(..) {
                    a.free(block.id).unwrap();
                }
                check(&a, &live);
                prop_assert_eq!(a.stats().inactive_split.current, 0);
                a.empty_cache().unwrap();
                prop_assert_eq!(a.backend().used(), 0);
                prop_assert_eq!(a.stats().reserved_bytes.current, 0);
            }

            #[test]
            fn load_only_allocates_and_counts_as_the_full_allocator(
                capacity_mb in prop::sample::select(vec![30u64, 64, 100, 256, 4096]),
                config in config(),
                sizes in prop::collection::vec(size(), 1..200),
            ) {
                let capacity = capacity_mb * MIB;
                let mut full = CachingAllocator::new(Simulated::new(capacity), config.clone());
                let mut load = CachingAllocator::load_only(Simulated::new(capacity), config);
                for size in sizes {
                    let (a, b) = (full.malloc(size), load.malloc(size));
                    prop_assert_eq!(a.as_ref().ok(), b.as_ref().ok());
                    // The same refusal, to the byte counts of an out-of-memory error.
                    prop_assert_eq!(format!("{:?}", a.as_ref().err()), format!("{:?}", b.as_ref().err()));
                    prop_assert_eq!(full.stats(), load.stats());
                    prop_assert_eq!(full.largest_free_block(), load.largest_free_block());
                    if let Ok(block) = b {
                        prop_assert_eq!(load.block(block.id), None);
                        let unknown = matches!(load.free(block.id), Err(AllocError::UnknownBlock(_)));
                        prop_assert!(unknown || block.id == BlockId::NULL);
                    }
                }
                // It holds the cached blocks only; the full allocator one per allocation too.
                let cached = |a: &CachingAllocator<Simulated>| -> Vec<BlockInfo> {
                    a.segments().into_iter().flat_map(|s| s.blocks).filter(|b| !b.allocated).collect()
                };
                prop_assert_eq!(cached(&full), cached(&load));
                prop_assert!(load.segments().iter().flat_map(|s| &s.blocks).all(|b| !b.allocated));
            }
        }
    }
}
