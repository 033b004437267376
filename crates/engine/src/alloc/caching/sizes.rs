//! Size arithmetic: PyTorch's block and segment constants, how a request is rounded, which
//! pool serves it and how large a segment it gets.

use super::config::AllocatorConfig;

/// Every block size is a multiple of this (`kMinBlockSize`).
pub const K_MIN_BLOCK_SIZE: u64 = 512;
/// Requests of at most this many bytes use the small pool (`kSmallSize`).
pub const K_SMALL_SIZE: u64 = 1 << 20;
/// Segment size for small-pool requests (`kSmallBuffer`).
pub const K_SMALL_BUFFER: u64 = 2 << 20;
/// Large requests below this get a [`K_LARGE_BUFFER`] segment (`kMinLargeAlloc`).
pub const K_MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Segment size for large requests below [`K_MIN_LARGE_ALLOC`] (`kLargeBuffer`).
pub const K_LARGE_BUFFER: u64 = 20 << 20;
/// Larger requests round their segment up to a multiple of this (`kRoundLarge`).
pub const K_ROUND_LARGE: u64 = 2 << 20;

pub(super) const MIB: u64 = 1 << 20;

/// The two block pools of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// Requests of at most 1 MiB, carved from 2 MiB segments.
    Small,
    /// Larger requests.
    Large,
}

/// The block size a request of `size` bytes gets (`round_size`): at least 512 bytes, a
/// multiple of 512, or the next power-of-two division when the size's bucket has more than
/// one division and `size > 512 * divisions`. Sizes whose rounding would not fit a `u64`
/// saturate to `u64::MAX`.
pub fn round_size(size: u64, config: &AllocatorConfig) -> u64 {
    if size < K_MIN_BLOCK_SIZE {
        return K_MIN_BLOCK_SIZE;
    }
    let divisions = config.divisions(size);
    if divisions > 1 && size > K_MIN_BLOCK_SIZE.saturating_mul(divisions) {
        roundup_power2_next_division(size, divisions)
    } else {
        round_up(size, K_MIN_BLOCK_SIZE)
    }
}

/// Rounds `size` up to the next of `divisions` equal steps between the powers of two around
/// it (`roundup_power2_next_division`): 1200 with 4 divisions gives 1280. Powers of two stay.
/// Saturates to `u64::MAX` when the result would not fit.
pub fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() || size == 0 {
        return size;
    }
    let floor = 1u64 << size.ilog2();
    let step = floor >> divisions.max(1).ilog2();
    if step == 0 {
        return floor.saturating_mul(2);
    }
    let round_floor = size & !(step - 1);
    if round_floor == size {
        size
    } else {
        round_floor.saturating_add(step)
    }
}

/// The segment size reserved for a rounded request (`get_allocation_size`): 2 MiB for the
/// small pool, 20 MiB for large requests below 10 MiB, otherwise the size rounded up to
/// 2 MiB. Saturates to `u64::MAX` when the result would not fit.
pub fn allocation_size(rounded: u64) -> u64 {
    if rounded <= K_SMALL_SIZE {
        K_SMALL_BUFFER
    } else if rounded < K_MIN_LARGE_ALLOC {
        K_LARGE_BUFFER
    } else {
        round_up(rounded, K_ROUND_LARGE)
    }
}

/// The pool a rounded request is served from (`get_pool`).
pub fn pool_for(rounded: u64) -> Pool {
    if rounded <= K_SMALL_SIZE {
        Pool::Small
    } else {
        Pool::Large
    }
}

fn round_up(size: u64, multiple: u64) -> u64 {
    size.div_ceil(multiple).saturating_mul(multiple)
}

/// PyTorch's `format_size`: bytes up to 1 KiB, then KiB, MiB, GiB with two decimals.
pub(super) fn format_size(size: u64) -> String {
    if size <= 1024 {
        format!("{size} bytes")
    } else if size <= 1 << 20 {
        format!("{:.2} KiB", size as f64 / 1024.0)
    } else if size <= 1 << 30 {
        format!("{:.2} MiB", size as f64 / 1048576.0)
    } else {
        format!("{:.2} GiB", size as f64 / 1073741824.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::caching::test_support::{allocator, divisions};
    use crate::alloc::caching::{AllocError, CachingAllocator};
    use crate::alloc::Simulated;

    #[test]
    fn constants_match_pytorch() {
        assert_eq!(K_MIN_BLOCK_SIZE, 512);
        assert_eq!(K_SMALL_SIZE, 1_048_576);
        assert_eq!(K_SMALL_BUFFER, 2_097_152);
        assert_eq!(K_MIN_LARGE_ALLOC, 10_485_760);
        assert_eq!(K_LARGE_BUFFER, 20_971_520);
        assert_eq!(K_ROUND_LARGE, 2_097_152);
        let config = AllocatorConfig::default();
        assert_eq!(config.max_split_size, u64::MAX);
        assert_eq!(config.roundup_power2_divisions, [0; 16]);
    }

    #[test]
    fn rounding_pool_and_segment_size_for_known_sizes() {
        let config = AllocatorConfig::default();
        // (request, round_size, pool, get_allocation_size)
        // (request, round_size, pool, get_allocation_size, block size after one malloc: the
        // rounded size, or the whole segment when the remainder is not worth splitting)
        let cases = [
            (1, 512, Pool::Small, 2 * MIB, 512),
            (511, 512, Pool::Small, 2 * MIB, 512),
            (512, 512, Pool::Small, 2 * MIB, 512),
            (513, 1024, Pool::Small, 2 * MIB, 1024),
            (MIB, MIB, Pool::Small, 2 * MIB, MIB),
            (MIB + 1, MIB + 512, Pool::Large, 20 * MIB, MIB + 512),
            // Just below 10 MiB after rounding: still the 20 MiB buffer.
            (
                10 * MIB - 513,
                10 * MIB - 512,
                Pool::Large,
                20 * MIB,
                10 * MIB - 512,
            ),
            // 10 MiB - 1 rounds to exactly 10 MiB, which is no longer below kMinLargeAlloc.
            (10 * MIB - 1, 10 * MIB, Pool::Large, 10 * MIB, 10 * MIB),
            (10 * MIB, 10 * MIB, Pool::Large, 10 * MIB, 10 * MIB),
            // 1 MiB left over is not more than kSmallSize: the block takes the whole segment.
            (25 * MIB, 25 * MIB, Pool::Large, 26 * MIB, 26 * MIB),
            (
                25 * MIB + 1,
                25 * MIB + 512,
                Pool::Large,
                26 * MIB,
                26 * MIB,
            ),
            (
                26 * MIB + 1,
                26 * MIB + 512,
                Pool::Large,
                28 * MIB,
                26 * MIB + 512,
            ),
        ];
        for (size, rounded, pool, segment, block_size) in cases {
            assert_eq!(round_size(size, &config), rounded, "round_size({size})");
            assert_eq!(pool_for(rounded), pool, "pool of {size}");
            assert_eq!(
                allocation_size(rounded),
                segment,
                "allocation_size of {size}"
            );
            let mut a = allocator(u64::MAX);
            let block = a.malloc(size).unwrap();
            assert_eq!(
                (block.size, block.requested, block.pool),
                (block_size, size, pool),
                "{size}"
            );
            assert_eq!(
                a.stats().reserved_bytes.current,
                segment,
                "reserved after malloc({size})"
            );
            assert_eq!(a.stats().segment.current, 1);
            assert_eq!(a.stats().allocated_bytes.current, block_size);
            assert_eq!(a.stats().requested_bytes.current, size);
            assert_eq!(a.backend().used(), segment);
        }
    }

    #[test]
    fn rounding_saturates_instead_of_overflowing() {
        let config = AllocatorConfig::default();
        assert_eq!(round_size(u64::MAX, &config), u64::MAX);
        assert_eq!(allocation_size(u64::MAX - 1), u64::MAX);
        let mut a = allocator(u64::MAX);
        assert!(matches!(
            a.malloc(u64::MAX),
            Err(AllocError::OutOfMemory { .. })
        ));
        assert_eq!(a.backend().used(), 0);
        assert_eq!(a.stats().num_ooms, 1);
    }

    #[test]
    fn power2_division_rounding() {
        // The doc's example, on the helper itself.
        assert_eq!(roundup_power2_next_division(1200, 4), 1280);
        assert_eq!(roundup_power2_next_division(1024, 4), 1024);
        assert_eq!(roundup_power2_next_division(1280, 4), 1280);
        assert_eq!(roundup_power2_next_division(1281, 4), 1536);
        assert_eq!(roundup_power2_next_division(3, 4), 4); // step 0: next power of two
        let four = divisions("roundup_power2_divisions:4");
        // round_size only divides when size > 512 * divisions, so 1200 stays on 512 steps.
        assert_eq!(round_size(1200, &four), 1536);
        assert_eq!(round_size(1200 * MIB, &four), 1280 * MIB);
        assert_eq!(round_size(5 * MIB + 1, &four), 6 * MIB);
        assert_eq!(round_size(5 * MIB, &four), 5 * MIB);
        assert_eq!(round_size(64 * MIB, &four), 64 * MIB);
        assert_eq!(round_size(65 * MIB, &four), 80 * MIB);
        let two = divisions("roundup_power2_divisions:2");
        assert_eq!(round_size(2100, &two), 3072);
        assert_eq!(round_size(1000, &two), 1024);
        let eight = divisions("roundup_power2_divisions:8");
        assert_eq!(round_size(5 * MIB + 1, &eight), 5 * MIB + 512 * 1024);
        // Divisions of 1 (or 0) mean plain 512-byte rounding.
        let one = divisions("roundup_power2_divisions:1");
        assert_eq!(round_size(65 * MIB + 1, &one), 65 * MIB + 512);
        // Per bucket: only sizes in [64, 128) MiB get 8 divisions here.
        let mut config = AllocatorConfig::default();
        config.roundup_power2_divisions[6] = 8;
        assert_eq!(round_size(65 * MIB, &config), 72 * MIB);
        assert_eq!(round_size(33 * MIB, &config), 33 * MIB);
        assert_eq!(round_size(129 * MIB, &config), 129 * MIB);
        // The rounded size drives the segment too.
        let mut a = CachingAllocator::new(Simulated::new(u64::MAX), four);
        let block = a.malloc(1200 * MIB).unwrap();
        assert_eq!((block.size, block.requested), (1280 * MIB, 1200 * MIB));
        assert_eq!(a.stats().reserved_bytes.current, 1280 * MIB);
    }

    #[test]
    fn format_size_matches_pytorch() {
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(MIB), "1024.00 KiB");
        assert_eq!(format_size(20 * MIB), "20.00 MiB");
        assert_eq!(format_size(1 << 30), "1024.00 MiB");
        assert_eq!(format_size(3 << 30), "3.00 GiB");
    }
}
