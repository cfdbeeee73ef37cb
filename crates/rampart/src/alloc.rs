//! The global allocator: mimalloc, asked the way the system allocator is asked.
//!
//! The `mimalloc` crate's `GlobalAlloc` passes every request to `mi_malloc_aligned`, even when
//! the alignment is one `mi_malloc` already guarantees. In mimalloc v3 that function has a fast
//! path for blocks up to 1 KiB only; above it, a size whose block is not a power of two is
//! over-allocated by the alignment and marked as holding interior pointers
//! (`mi_theap_malloc_zero_aligned_at_overalloc`). rampart's boxed request futures, header maps
//! and read buffers are all that size: a pass paid 6.6 such allocations per request, ~250
//! instructions each (callgrind, `rampart-bench instructions`), and each took a larger block
//! than it needed. Here an alignment that every mimalloc block of the size already has goes to
//! the plain functions, as Rust's own `System` allocator does with `malloc`.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

// The crate builds and links mimalloc itself; its functions are declared below.
use mimalloc as _;

/// Every mimalloc block is aligned to 8 bytes. A block for a multiple of 16 bytes comes from a
/// size class that is itself a multiple of 16, in a page whose first block is 16-aligned
/// (`MI_MAX_ALIGN_SIZE`, C's `max_align_t`): it is aligned to 16. The test below checks this on
/// the mimalloc that is linked.
const MAX_PLAIN_ALIGN: usize = 16;

#[allow(unsafe_code)]
extern "C" {
    fn mi_malloc(size: usize) -> *mut c_void;
    fn mi_zalloc(size: usize) -> *mut c_void;
    fn mi_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn mi_free(p: *mut c_void);
    fn mi_malloc_aligned(size: usize, align: usize) -> *mut c_void;
    fn mi_zalloc_aligned(size: usize, align: usize) -> *mut c_void;
    fn mi_realloc_aligned(p: *mut c_void, size: usize, align: usize) -> *mut c_void;
}

/// Whether a plain mimalloc block of `size` bytes is always aligned to `align`.
#[inline(always)]
fn plain(size: usize, align: usize) -> bool {
    align <= 8 || (align <= MAX_PLAIN_ALIGN && size.is_multiple_of(MAX_PLAIN_ALIGN))
}

/// mimalloc, through its plain functions where they give the alignment asked for.
pub struct Alloc;

// SAFETY: every pointer comes from mimalloc and goes back to it (`mi_free` and `mi_realloc`
// take aligned and plain blocks alike); `plain` only lets through alignments mimalloc's plain
// functions guarantee for that size, and anything else takes the aligned functions.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Alloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.size(), layout.align()) {
            mi_malloc(layout.size()).cast()
        } else {
            mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.size(), layout.align()) {
            mi_zalloc(layout.size()).cast()
        } else {
            mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi_free(ptr.cast());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain(new_size, layout.align()) {
            mi_realloc(ptr.cast(), new_size).cast()
        } else {
            mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;

    /// The rule `plain` relies on, checked on the linked mimalloc for every size class up to
    /// 64 KiB and a few beyond, with many blocks of each so that a block in the middle of a
    /// page is tried too: a block that misses its alignment fails here, not in production.
    #[test]
    fn plain_blocks_have_the_alignment_they_are_trusted_with() {
        let sizes = (8..=65_536)
            .step_by(8)
            .chain([100_000, 1 << 20, (1 << 20) + 16, 5 << 20]);
        for size in sizes {
            for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
                let Ok(layout) = Layout::from_size_align(size, align) else {
                    continue;
                };
                let mut blocks = Vec::new();
                for _ in 0..if size <= 4096 { 24 } else { 3 } {
                    // SAFETY: a non-zero size; each block is freed below.
                    let p = unsafe { Alloc.alloc(layout) };
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    blocks.push(p);
                }
                for (i, p) in blocks.into_iter().enumerate() {
                    let (p, layout) = if i % 2 == 0 {
                        let grown = size + 16 * (i + 1);
                        // SAFETY: from `alloc` with `layout`; a non-zero new size.
                        let q = unsafe { Alloc.realloc(p, layout, grown) };
                        assert_eq!(
                            q as usize % align,
                            0,
                            "realloc {size}→{grown} align {align}"
                        );
                        (q, Layout::from_size_align(grown, align).unwrap_or(layout))
                    } else {
                        (p, layout)
                    };
                    // SAFETY: a live block from this allocator, with the layout it has now.
                    unsafe { Alloc.dealloc(p, layout) };
                }
            }
        }
    }
}
