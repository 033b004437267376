//! A pool of fixed-size storages acquired and released for reuse.
//!
//! Every storage of a pool has the same size. [`StoragePool::acquire`] hands out a released
//! storage when one is cached (a hit) and creates a new one otherwise (a miss). `capacity` is
//! the number of storages the pool expects to have out at once: acquiring beyond it still
//! succeeds but counts an overflow, and at most `capacity` released storages are kept for
//! reuse (the rest are dropped).
//!
//! A storage's bytes are zeroed when it is created and **not** re-zeroed on reuse: a storage
//! from a hit holds whatever its previous user left in it.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Tags each pool so a storage can only go back to the pool it came from.
static NEXT_POOL: AtomicU64 = AtomicU64::new(0);

/// One storage's host bytes, owned while acquired.
#[derive(Debug)]
pub struct PooledStorage {
    pool: u64,
    bytes: Vec<u8>,
}

impl PooledStorage {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// Size in bytes (the pool's storage size).
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// What a pool has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StoragePoolStats {
    /// Acquisitions served by a released storage.
    pub hits: u64,
    /// Acquisitions that created a storage.
    pub misses: u64,
    /// Acquisitions made while `capacity` storages were already out.
    pub overflows: u64,
    /// Storages acquired and not yet released.
    pub outstanding: u64,
    /// Highest `outstanding` seen.
    pub peak_outstanding: u64,
    /// Released storages waiting for reuse.
    pub cached: u64,
    /// Released storages dropped because `capacity` were already cached.
    pub discarded: u64,
}

/// A storage was released to a pool it does not belong to; it is handed back.
#[derive(Debug, thiserror::Error)]
#[error("this storage belongs to another pool")]
pub struct ForeignStorage(pub PooledStorage);

/// Fixed-size storages kept for reuse.
#[derive(Debug)]
pub struct StoragePool {
    id: u64,
    storage_bytes: u64,
    capacity: usize,
    free: Vec<PooledStorage>,
    stats: StoragePoolStats,
}

impl StoragePool {
    /// A pool of storages of `storage_bytes` bytes each, expecting at most `capacity` out at
    /// once. Nothing is allocated until the first acquisition.
    pub fn new(storage_bytes: u64, capacity: usize) -> Self {
        StoragePool {
            id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
            storage_bytes,
            capacity,
            free: Vec::new(),
            stats: StoragePoolStats::default(),
        }
    }

    /// Size of every storage.
    pub fn storage_bytes(&self) -> u64 {
        self.storage_bytes
    }

    /// Storages expected out at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// A storage: the most recently released one (its old contents intact), else a new zeroed
    /// one. Like any `Vec`, creating one aborts the process if the system has no memory for
    /// it; on 32-bit targets a size above `usize::MAX` is clamped (and then fails the same way).
    pub fn acquire(&mut self) -> PooledStorage {
        if self.stats.outstanding >= self.capacity as u64 {
            self.stats.overflows += 1;
        }
        let storage = match self.free.pop() {
            Some(storage) => {
                self.stats.hits += 1;
                self.stats.cached -= 1;
                storage
            }
            None => {
                self.stats.misses += 1;
                let n = usize::try_from(self.storage_bytes).unwrap_or(usize::MAX);
                PooledStorage {
                    pool: self.id,
                    bytes: vec![0; n],
                }
            }
        };
        self.stats.outstanding += 1;
        self.stats.peak_outstanding = self.stats.peak_outstanding.max(self.stats.outstanding);
        storage
    }

    /// Gives a storage back for reuse; one from another pool is refused and handed back.
    pub fn release(&mut self, storage: PooledStorage) -> Result<(), ForeignStorage> {
        if storage.pool != self.id {
            return Err(ForeignStorage(storage));
        }
        self.stats.outstanding = self.stats.outstanding.saturating_sub(1);
        if self.free.len() < self.capacity {
            self.free.push(storage);
            self.stats.cached += 1;
        } else {
            self.stats.discarded += 1;
        }
        Ok(())
    }

    /// Drops every cached storage.
    pub fn clear(&mut self) {
        self.free.clear();
        self.stats.cached = 0;
    }

    /// What it has done so far.
    pub fn stats(&self) -> &StoragePoolStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_acquire_misses_then_reuse_hits() {
        let mut pool = StoragePool::new(64, 2);
        let a = pool.acquire();
        assert_eq!(a.len(), 64);
        assert_eq!(a.bytes(), &[0; 64]);
        assert_eq!((pool.stats().hits, pool.stats().misses), (0, 1));
        pool.release(a).unwrap();
        assert_eq!(pool.stats().cached, 1);
        let b = pool.acquire();
        assert_eq!((pool.stats().hits, pool.stats().misses), (1, 1));
        assert_eq!(pool.stats().outstanding, 1);
        assert_eq!(pool.stats().cached, 0);
        pool.release(b).unwrap();
    }

    #[test]
    fn reuse_does_not_rezero() {
        let mut pool = StoragePool::new(4, 1);
        let mut a = pool.acquire();
        a.bytes_mut().copy_from_slice(b"used");
        pool.release(a).unwrap();
        assert_eq!(pool.acquire().bytes(), b"used");
    }

    #[test]
    fn overflow_beyond_capacity_still_creates() {
        let mut pool = StoragePool::new(8, 2);
        let held: Vec<_> = (0..3).map(|_| pool.acquire()).collect();
        let s = *pool.stats();
        assert_eq!((s.misses, s.hits, s.overflows), (3, 0, 1));
        assert_eq!((s.outstanding, s.peak_outstanding), (3, 3));
        for storage in held {
            pool.release(storage).unwrap();
        }
        let s = *pool.stats();
        assert_eq!((s.outstanding, s.peak_outstanding), (0, 3));
        // Only `capacity` are kept; the third is dropped.
        assert_eq!((s.cached, s.discarded), (2, 1));
        let _a = pool.acquire();
        let _b = pool.acquire();
        let _c = pool.acquire();
        let s = *pool.stats();
        assert_eq!((s.hits, s.misses, s.overflows), (2, 4, 2));
    }

    #[test]
    fn foreign_storage_is_refused() {
        let mut one = StoragePool::new(8, 1);
        let mut two = StoragePool::new(8, 1);
        let s = one.acquire();
        let ForeignStorage(s) = two.release(s).unwrap_err();
        assert_eq!(two.stats().outstanding, 0);
        one.release(s).unwrap();
        assert_eq!(one.stats().outstanding, 0);
        one.clear();
        assert_eq!(one.stats().cached, 0);
    }
}
