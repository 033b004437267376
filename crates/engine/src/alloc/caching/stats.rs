//! PyTorch's `memory_stats()` counters, aggregated and per pool, and the moves the allocator
//! makes on them.

use super::sizes::Pool;

/// One of PyTorch's metric counters (`c10::CachingDeviceAllocator::Stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    /// The value now.
    pub current: u64,
    /// The highest `current` since creation or the last
    /// [`CachingAllocator::reset_peak_stats`](super::CachingAllocator::reset_peak_stats).
    pub peak: u64,
    /// Sum of all increases.
    pub allocated: u64,
    /// Sum of all decreases.
    pub freed: u64,
}

impl Stat {
    pub(super) fn increase(&mut self, amount: u64) {
        self.current += amount;
        self.peak = self.peak.max(self.current);
        self.allocated += amount;
    }

    pub(super) fn decrease(&mut self, amount: u64) {
        debug_assert!(self.current >= amount, "stat would go negative");
        self.current = self.current.saturating_sub(amount);
        self.freed += amount;
    }
}

/// The per-pool part of [`Stats`] (`<stat>.small_pool.*`, `<stat>.large_pool.*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Number of allocated blocks.
    pub allocation: Stat,
    /// Bytes in allocated blocks.
    pub allocated_bytes: Stat,
    /// Bytes asked for by the allocated blocks' requests (before rounding).
    pub requested_bytes: Stat,
    /// Bytes in segments obtained from the backend.
    pub reserved_bytes: Stat,
    /// Number of segments.
    pub segment: Stat,
    /// Number of active blocks (allocated; no stream events are modelled).
    pub active: Stat,
    /// Bytes in active blocks.
    pub active_bytes: Stat,
    /// Free blocks inside segments that are partly in use (not releasable).
    pub inactive_split: Stat,
    /// Bytes in those blocks ("Non-releasable memory").
    pub inactive_split_bytes: Stat,
}

/// PyTorch's `memory_stats()`: the plain fields are the `all` totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Number of allocated blocks.
    pub allocation: Stat,
    /// Bytes in allocated blocks (`memory_allocated()`).
    pub allocated_bytes: Stat,
    /// Bytes asked for by the allocated blocks' requests (before rounding).
    pub requested_bytes: Stat,
    /// Bytes in segments obtained from the backend (`memory_reserved()`).
    pub reserved_bytes: Stat,
    /// Number of segments.
    pub segment: Stat,
    /// Number of active blocks (allocated; no stream events are modelled).
    pub active: Stat,
    /// Bytes in active blocks.
    pub active_bytes: Stat,
    /// Free blocks inside segments that are partly in use (not releasable).
    pub inactive_split: Stat,
    /// Bytes in those blocks ("Non-releasable memory").
    pub inactive_split_bytes: Stat,
    /// Times malloc freed every cached segment and tried the backend again.
    pub num_alloc_retries: u64,
    /// Times malloc ran out of memory.
    pub num_ooms: u64,
    /// Segments obtained from the backend.
    pub num_device_alloc: u64,
    /// Segments returned to the backend.
    pub num_device_free: u64,
    /// Allocated blocks of at least `max_split_size` bytes.
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size` bytes.
    pub oversize_segments: Stat,
    /// The small-pool breakdown.
    pub small_pool: PoolStats,
    /// The large-pool breakdown.
    pub large_pool: PoolStats,
}

impl Stats {
    /// The breakdown for one pool.
    pub fn pool(&self, pool: Pool) -> &PoolStats {
        match pool {
            Pool::Small => &self.small_pool,
            Pool::Large => &self.large_pool,
        }
    }

    pub(super) fn all_stats_mut(&mut self) -> [&mut Stat; 11] {
        [
            &mut self.allocation,
            &mut self.allocated_bytes,
            &mut self.requested_bytes,
            &mut self.reserved_bytes,
            &mut self.segment,
            &mut self.active,
            &mut self.active_bytes,
            &mut self.inactive_split,
            &mut self.inactive_split_bytes,
            &mut self.oversize_allocations,
            &mut self.oversize_segments,
        ]
    }

    fn select(&mut self, pool: Pool, kind: Kind) -> [&mut Stat; 2] {
        let Stats {
            allocation,
            allocated_bytes,
            requested_bytes,
            reserved_bytes,
            segment,
            active,
            active_bytes,
            inactive_split,
            inactive_split_bytes,
            small_pool,
            large_pool,
            ..
        } = self;
        let per_pool = match pool {
            Pool::Small => small_pool,
            Pool::Large => large_pool,
        };
        match kind {
            Kind::Allocation => [allocation, &mut per_pool.allocation],
            Kind::AllocatedBytes => [allocated_bytes, &mut per_pool.allocated_bytes],
            Kind::RequestedBytes => [requested_bytes, &mut per_pool.requested_bytes],
            Kind::ReservedBytes => [reserved_bytes, &mut per_pool.reserved_bytes],
            Kind::Segment => [segment, &mut per_pool.segment],
            Kind::Active => [active, &mut per_pool.active],
            Kind::ActiveBytes => [active_bytes, &mut per_pool.active_bytes],
            Kind::InactiveSplit => [inactive_split, &mut per_pool.inactive_split],
            Kind::InactiveSplitBytes => [inactive_split_bytes, &mut per_pool.inactive_split_bytes],
        }
    }

    /// `for_each_selected_stat_type(...).increase(amount)`: the aggregate and the pool.
    pub(super) fn increase(&mut self, pool: Pool, kind: Kind, amount: u64) {
        for stat in self.select(pool, kind) {
            stat.increase(amount);
        }
    }

    pub(super) fn decrease(&mut self, pool: Pool, kind: Kind, amount: u64) {
        for stat in self.select(pool, kind) {
            stat.decrease(amount);
        }
    }
}

impl PoolStats {
    pub(super) fn all_stats_mut(&mut self) -> [&mut Stat; 9] {
        [
            &mut self.allocation,
            &mut self.allocated_bytes,
            &mut self.requested_bytes,
            &mut self.reserved_bytes,
            &mut self.segment,
            &mut self.active,
            &mut self.active_bytes,
            &mut self.inactive_split,
            &mut self.inactive_split_bytes,
        ]
    }
}

/// Which per-pool stat to move.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Allocation,
    AllocatedBytes,
    RequestedBytes,
    ReservedBytes,
    Segment,
    Active,
    ActiveBytes,
    InactiveSplit,
    InactiveSplitBytes,
}

#[cfg(test)]
mod tests {
    use crate::alloc::caching::sizes::MIB;
    use crate::alloc::caching::test_support::allocator;

    #[test]
    fn peak_and_cumulative_stats() {
        let mut a = allocator(u64::MAX);
        let x = a.malloc(5 * MIB).unwrap();
        let y = a.malloc(6 * MIB).unwrap();
        a.free(x.id).unwrap();
        let z = a.malloc(MIB).unwrap();
        let s = a.stats();
        assert_eq!(s.allocated_bytes.current, 7 * MIB);
        assert_eq!(s.allocated_bytes.peak, 11 * MIB);
        assert_eq!(s.allocated_bytes.allocated, 12 * MIB);
        assert_eq!(s.allocated_bytes.freed, 5 * MIB);
        assert_eq!(s.allocation.peak, 2);
        assert_eq!(s.allocation.allocated, 3);
        assert_eq!(s.reserved_bytes.peak, 22 * MIB);
        assert_eq!(s.segment.peak, 2);
        assert_eq!(s.large_pool.allocated_bytes.peak, 11 * MIB);
        assert_eq!(s.small_pool.allocated_bytes.peak, MIB);
        a.free(y.id).unwrap();
        a.free(z.id).unwrap();
        a.reset_peak_stats();
        let s = a.stats();
        assert_eq!(s.allocated_bytes.peak, 0);
        assert_eq!(s.reserved_bytes.peak, 22 * MIB);
        assert_eq!(s.large_pool.allocated_bytes.peak, 0);
        assert_eq!(s.allocated_bytes.allocated, 12 * MIB);
    }
}
