//! A remote object's bytes as one read-only map of its full length, in which only the fetched
//! ranges hold data; the rest is never-touched anonymous memory, so the map costs what was
//! fetched, not what the object weighs.
//!
//! Readers index plain byte slices. Reading a byte that was not fetched reads a zero, and the
//! kernel maps a page for it: `mincore` then reports that page resident. [`SparseMap::touched`]
//! lists the pages read that were not fetched, so a reading that used them is discarded and
//! repeated once they are — no reader result ever rests on a byte the store did not send.

use super::ranges::Ranges;
use memmap2::{Advice, Mmap, MmapOptions};
use std::ops::Range;

/// The map of one object's length with its fetched bytes in place.
#[derive(Debug)]
pub(crate) struct SparseMap {
    map: Mmap,
    /// Page-aligned ranges (the last may end at the object's length) that hold fetched bytes.
    filled: Ranges,
}

impl SparseMap {
    /// A map of `len` bytes holding `chunks` (each at its offset, inside `len`).
    pub(crate) fn new<'a>(
        len: u64,
        chunks: impl Iterator<Item = (u64, &'a [u8])>,
        filled: Ranges,
    ) -> std::io::Result<Self> {
        let len = usize::try_from(len).map_err(|_| std::io::ErrorKind::OutOfMemory)?;
        // Address space, not memory: pages exist only once written (a chunk) or read.
        let mut map = MmapOptions::new().len(len).no_reserve_swap().map_anon()?;
        // A transparent huge page would make one touched byte look like 2 MiB read.
        #[cfg(target_os = "linux")]
        let _ = map.advise(Advice::NoHugePage);
        for (start, bytes) in chunks {
            let start = usize::try_from(start).map_err(|_| std::io::ErrorKind::InvalidInput)?;
            if let Some(dest) = start
                .checked_add(bytes.len())
                .and_then(|end| map.get_mut(start..end))
            {
                dest.copy_from_slice(bytes);
            }
        }
        Ok(SparseMap {
            map: map.make_read_only()?,
            filled,
        })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The pages read that hold no fetched bytes, as byte ranges clipped to the length.
    pub(crate) fn touched(&self) -> Ranges {
        let page = page_size();
        let len = self.map.len();
        let mut touched = Ranges::default();
        // mincore takes a byte per page: a window at a time keeps that vector small however
        // large the object.
        const WINDOW_PAGES: usize = 1 << 16;
        let mut residency = vec![0u8; WINDOW_PAGES];
        let mut start = 0usize;
        while start < len {
            let window = (len - start).min(WINDOW_PAGES * page);
            // SAFETY: the range lies inside this live mapping (page-aligned at its start, as
            // every offset here is a multiple of the page size from the map's aligned base),
            // and `residency` has a byte for each of its pages.
            let rc = unsafe {
                libc::mincore(
                    self.map.as_ptr().add(start) as *mut libc::c_void,
                    window,
                    residency.as_mut_ptr(),
                )
            };
            if rc != 0 {
                // Unknown residency counts as read: fetch rather than trust.
                touched.insert(start as u64..(start + window) as u64);
            } else {
                for (i, resident) in residency.iter().take(window.div_ceil(page)).enumerate() {
                    if resident & 1 == 1 {
                        let at = start + i * page;
                        touched.insert(at as u64..(at + page).min(len) as u64);
                    }
                }
            }
            start += window;
        }
        touched.subtract(&self.filled)
    }
}

/// The page size, which ranges are fetched and checked in multiples of.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| *s > 0)
        .unwrap_or(4096)
}

/// `range` widened to whole pages, clipped to `len`.
pub(crate) fn page_aligned(range: Range<u64>, len: u64, page: u64) -> Range<u64> {
    let start = range.start - range.start % page;
    let end = range.end.div_ceil(page).saturating_mul(page).min(len);
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_an_unfetched_byte_is_seen_and_fetched_bytes_are_not() {
        let page = page_size() as u64;
        let len = 64 * page + 100;
        let head = vec![7u8; page as usize];
        let mut filled = Ranges::default();
        filled.insert(0..page);
        let map = SparseMap::new(len, [(0, &head[..])].into_iter(), filled).unwrap();
        assert_eq!(map.bytes()[10], 7);
        assert!(map.touched().is_empty());
        // One byte of page 5 and the last byte of the object.
        assert_eq!(map.bytes()[(5 * page + 3) as usize], 0);
        assert_eq!(map.bytes()[(len - 1) as usize], 0);
        let touched: Vec<_> = map.touched().iter().collect();
        assert_eq!(touched, vec![5 * page..6 * page, 64 * page..len]);
    }

    #[test]
    fn a_map_far_larger_than_memory_costs_only_what_it_holds() {
        // 1 TiB of address space: built, read at both ends, dropped, without 1 TiB of memory.
        let len = 1u64 << 40;
        let map = SparseMap::new(len, std::iter::empty(), Ranges::default()).unwrap();
        assert_eq!(map.bytes().len() as u64, len);
        assert_eq!(map.bytes()[(len - 1) as usize], 0);
        assert_eq!(map.touched().iter().count(), 1);
    }

    #[test]
    fn page_alignment_widens_and_clips() {
        assert_eq!(page_aligned(5..10, 100_000, 4096), 0..4096);
        assert_eq!(page_aligned(4096..8193, 10_000, 4096), 4096..10_000);
    }
}
