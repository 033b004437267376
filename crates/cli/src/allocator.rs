//! The process's allocator: mimalloc, asked for plain blocks wherever they are aligned enough.
//!
//! A checkpoint of a million tensors is millions of small allocations made and freed on
//! several threads: mimalloc's per-thread free lists take them in about half the time of
//! glibc's arenas (CHANGELOG.md, "parallel reading, 128-byte layers, mimalloc").
//!
//! The `mimalloc` crate sends every request through `mi_malloc_aligned`. In mimalloc v3 that
//! takes the plain path only while the size's current page has a free block; once the page
//! is full it over-allocates by the alignment, from the next size class, and keeps doing so
//! for that size until something else refills the page. A million-tensor audit made a
//! million such allocations (callgrind: `mi_theap_malloc_zero_aligned_at_overalloc`), each
//! slower and up to a size class larger. Every mimalloc block is aligned to a machine word
//! at least (its free list links are stored in the blocks), so requests aligned to no more
//! than that, nearly all of Rust's, go to `mi_malloc` and the rest to the aligned calls.

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc,
    mi_zalloc_aligned,
};
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// What every mimalloc block is aligned to.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc, with word-aligned requests on its plain calls.
pub struct MiMalloc;

// SAFETY: each method forwards to mimalloc's matching call; the plain calls return blocks
// aligned to a word, so they serve only layouts asking for no more; `mi_free` frees blocks
// of either kind.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD {
            unsafe { mi_malloc(layout.size()).cast() }
        } else {
            unsafe { mi_malloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD {
            unsafe { mi_zalloc(layout.size()).cast() }
        } else {
            unsafe { mi_zalloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        unsafe { mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= WORD {
            unsafe { mi_realloc(ptr.cast(), new_size).cast() }
        } else {
            unsafe { mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast() }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size up to a few pages, at every alignment up to a page, through each call:
    /// the block is aligned as asked, holds its bytes, and keeps them when it grows.
    #[test]
    fn blocks_are_aligned_as_asked_and_keep_their_bytes() {
        let mut held = Vec::new();
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in (1..=300).chain([1000, 4095, 4096, 70_000]) {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: a non-zero size; each block is freed below with its layout.
                unsafe {
                    let zeroed = MiMalloc.alloc_zeroed(layout);
                    assert!(!zeroed.is_null());
                    assert_eq!(zeroed as usize % align, 0, "zeroed {size} at {align}");
                    assert!(std::slice::from_raw_parts(zeroed, size)
                        .iter()
                        .all(|&b| b == 0));
                    let block = MiMalloc.alloc(layout);
                    assert!(!block.is_null());
                    assert_eq!(block as usize % align, 0, "{size} at {align}");
                    block.write_bytes(0xa5, size);
                    let grown = MiMalloc.realloc(block, layout, size * 3);
                    assert_eq!(grown as usize % align, 0, "grown {size} at {align}");
                    assert!(std::slice::from_raw_parts(grown, size)
                        .iter()
                        .all(|&b| b == 0xa5));
                    MiMalloc.dealloc(zeroed, layout);
                    held.push((grown, Layout::from_size_align(size * 3, align).unwrap()));
                }
            }
        }
        for (block, layout) in held {
            // SAFETY: allocated above with this layout, freed once.
            unsafe { MiMalloc.dealloc(block, layout) }
        }
    }
}
