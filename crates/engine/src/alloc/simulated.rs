//! A segment backend that only counts.
//!
//! [`Simulated`] stands in for `cudaMalloc`/`cudaFree`: it hands out distinct, non-overlapping,
//! 512-aligned addresses from a fixed base and refuses a segment once the reserved bytes would
//! exceed its capacity. Freed address space is not reused; only the byte count comes back.

use super::SegmentBackend;
use std::collections::BTreeMap;
use std::convert::Infallible;

/// Where the first segment starts: a typical CUDA device address.
const BASE_ADDRESS: u64 = 0x7f00_0000_0000;
/// Segment addresses are aligned to this many bytes.
const ALIGNMENT: u64 = 512;

/// A device of `capacity` bytes that holds no data.
#[derive(Debug, Clone)]
pub struct Simulated {
    capacity: u64,
    used: u64,
    next_address: u64,
    /// Live segments: address to size.
    live: BTreeMap<u64, u64>,
}

impl Simulated {
    /// A device with `capacity` bytes free (`u64::MAX` for an unbounded one).
    pub fn new(capacity: u64) -> Self {
        Simulated {
            capacity,
            used: 0,
            next_address: BASE_ADDRESS,
            live: BTreeMap::new(),
        }
    }

    /// The device's size in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes in live segments.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Number of live segments.
    pub fn segment_count(&self) -> usize {
        self.live.len()
    }
}

impl SegmentBackend for Simulated {
    type Error = Infallible;

    /// A new segment at the next free aligned address; `None` when `used + size` would exceed
    /// the capacity (or the address space runs out).
    fn alloc_segment(&mut self, size: u64) -> Result<Option<u64>, Infallible> {
        let fits = self
            .used
            .checked_add(size)
            .is_some_and(|total| total <= self.capacity);
        let address = self.next_address;
        let end = address
            .checked_add(size.max(1))
            .and_then(|end| end.checked_next_multiple_of(ALIGNMENT));
        let (true, Some(end)) = (fits, end) else {
            return Ok(None);
        };
        self.used += size;
        self.next_address = end;
        self.live.insert(address, size);
        Ok(Some(address))
    }

    /// Gives the segment's bytes back.
    ///
    /// # Panics
    ///
    /// When `address` and `size` do not name a live segment: a bug in the caller.
    fn free_segment(&mut self, address: u64, size: u64) -> Result<(), Infallible> {
        match self.live.remove(&address) {
            Some(live) if live == size => {
                self.used -= size;
                Ok(())
            }
            Some(live) => {
                panic!("free_segment({address:#x}, {size}): the segment there has {live} bytes")
            }
            None => panic!("free_segment({address:#x}, {size}): no such segment"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_distinct_aligned_addresses() {
        let mut s = Simulated::new(10_000);
        assert_eq!(s.capacity(), 10_000);
        assert_eq!(s.alloc_segment(10), Ok(Some(BASE_ADDRESS)));
        assert_eq!(s.alloc_segment(10), Ok(Some(BASE_ADDRESS + 512)));
        assert_eq!(s.used(), 20);
        assert_eq!(s.segment_count(), 2);
        s.free_segment(BASE_ADDRESS, 10).unwrap();
        assert_eq!(s.used(), 10);
        // Freed address space is not reused.
        assert_eq!(s.alloc_segment(600), Ok(Some(BASE_ADDRESS + 1024)));
        assert_eq!(s.alloc_segment(512), Ok(Some(BASE_ADDRESS + 2048)));
    }

    #[test]
    fn refuses_beyond_capacity() {
        let mut s = Simulated::new(30 << 20);
        assert!(s.alloc_segment(20 << 20).unwrap().is_some());
        assert_eq!(s.alloc_segment(20 << 20), Ok(None));
        assert_eq!(s.used(), 20 << 20);
        assert!(s.alloc_segment(10 << 20).unwrap().is_some());
        assert_eq!(s.alloc_segment(1), Ok(None));
        let mut unbounded = Simulated::new(u64::MAX);
        assert!(unbounded.alloc_segment(1 << 40).unwrap().is_some());
        assert_eq!(unbounded.alloc_segment(u64::MAX), Ok(None));
        assert_eq!(unbounded.used(), 1 << 40);
    }

    #[test]
    #[should_panic(expected = "no such segment")]
    fn freeing_an_unknown_segment_is_a_bug() {
        let mut s = Simulated::new(100);
        let _ = s.free_segment(BASE_ADDRESS, 10);
    }
}
