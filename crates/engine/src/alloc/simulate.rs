//! What loading a checkpoint does to GPU memory, without a GPU: every storage allocated
//! through the simulated caching allocator, in file order, none freed (a loaded model holds
//! all its weights).

use super::{AllocatorConfig, Block, CachingAllocator, SegmentInfo, Simulated, Stats};
use crate::data_ptr::Owner;
use crate::Checkpoint;

/// The outcome of a simulated load.
#[derive(Debug, Clone)]
pub struct LoadSimulation {
    /// Allocator statistics at the end (or at the failure).
    pub stats: Stats,
    /// The segment map at the end (empty unless asked for).
    pub segments: Vec<SegmentInfo>,
    /// The storage whose allocation ran out of memory, with the allocator's message.
    pub oom: Option<(usize, String)>,
    /// Where each storage landed: storage id and its block (empty unless asked for).
    pub placements: Vec<(usize, Block)>,
}

impl LoadSimulation {
    /// Reserved bytes per requested byte (1.0 when nothing was requested).
    pub fn overhead(&self) -> f64 {
        let requested = self.stats.requested_bytes.current;
        if requested == 0 {
            1.0
        } else {
            self.stats.reserved_bytes.current as f64 / requested as f64
        }
    }

    /// Share of reserved memory not allocated to any tensor (0 when nothing is reserved).
    pub fn fragmentation(&self) -> f64 {
        let reserved = self.stats.reserved_bytes.current;
        if reserved == 0 {
            0.0
        } else {
            1.0 - self.stats.allocated_bytes.current as f64 / reserved as f64
        }
    }
}

/// Allocates every storage that holds bytes, in storage order, on a simulated device of
/// `capacity` bytes; stops at the first out-of-memory. `with_map` keeps the segment map
/// and placements, which only a display needs.
pub fn simulate_load(
    ckpt: &Checkpoint,
    config: &AllocatorConfig,
    capacity: u64,
    with_map: bool,
) -> LoadSimulation {
    let backend = Simulated::new(capacity);
    // Without a map, nothing needs the allocated blocks: no state per storage.
    let mut allocator = if with_map {
        CachingAllocator::new(backend, config.clone())
    } else {
        CachingAllocator::load_only(backend, config.clone())
    };
    let mut oom = None;
    let mut placements = Vec::new();
    for storage in &ckpt.storages {
        // Bytes left compressed (`--metadata-only`) are still loaded by torch: only a storage
        // without bytes (meta) takes no memory.
        if matches!(storage.data_ptr().owner(), Owner::None(_)) || storage.nbytes() == 0 {
            continue;
        }
        // The simulated backend cannot fail otherwise: an error is out-of-memory.
        match allocator.malloc(storage.nbytes()) {
            Ok(block) if with_map => placements.push((storage.id().index(), block)),
            Ok(_) => {}
            Err(e) => {
                oom = Some((storage.id().index(), e.to_string()));
                break;
            }
        }
    }
    LoadSimulation {
        stats: allocator.stats().clone(),
        segments: if with_map {
            allocator.segments()
        } else {
            Vec::new()
        },
        oom,
        placements,
    }
}
