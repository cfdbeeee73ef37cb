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
//!
//! Blocks of [`DIRECT`] bytes and more (cached bodies of megabytes, the buffers they are
//! filled in) are mapped from the system for themselves and unmapped when freed, as glibc's
//! `malloc` does above its threshold: their memory goes back at once, whatever mimalloc's purge
//! delay. That lets mimalloc keep its own default delay (1 s) for the small pages a request
//! allocates and frees, which a short delay gave back and faulted in again on every pass.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

// The crate builds and links mimalloc itself; its functions are declared below.
use mimalloc as _;

/// Every mimalloc block is aligned to 8 bytes. A block for a multiple of 16 bytes comes from a
/// size class that is itself a multiple of 16, in a page whose first block is 16-aligned
/// (`MI_MAX_ALIGN_SIZE`, C's `max_align_t`): it is aligned to 16. The test below checks this on
/// the mimalloc that is linked.
const MAX_PLAIN_ALIGN: usize = 16;

/// Blocks of this size and more are mapped for themselves ([`direct`]).
pub const DIRECT: usize = 256 << 10;

/// The alignment every mapping has (the page size is at least this).
const PAGE: usize = 4096;

#[allow(unsafe_code)]
extern "C" {
    fn mi_malloc(size: usize) -> *mut c_void;
    fn mi_zalloc(size: usize) -> *mut c_void;
    fn mi_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn mi_free(p: *mut c_void);
    fn mi_malloc_aligned(size: usize, align: usize) -> *mut c_void;
    fn mi_zalloc_aligned(size: usize, align: usize) -> *mut c_void;
    fn mi_realloc_aligned(p: *mut c_void, size: usize, align: usize) -> *mut c_void;
    fn mi_collect(force: bool);
}

/// Gives back to the system the pages this thread's heap freed longer ago than the purge delay
/// (mimalloc only looks at them when it allocates or frees a page: an idle worker never would).
#[allow(unsafe_code)]
pub fn collect() {
    // SAFETY: mimalloc's collection of the calling thread's heap, not forced: it frees nothing
    // in use and purges only what is past its delay.
    unsafe { mi_collect(false) }
}

/// Whether a plain mimalloc block of `size` bytes is always aligned to `align`.
#[inline(always)]
fn plain(size: usize, align: usize) -> bool {
    align <= 8 || (align <= MAX_PLAIN_ALIGN && size.is_multiple_of(MAX_PLAIN_ALIGN))
}

/// Whether a block of `size` bytes aligned to `align` is a mapping of its own.
#[inline(always)]
fn direct(size: usize, align: usize) -> bool {
    size >= DIRECT && align <= PAGE
}

/// A new private anonymous mapping of `size` bytes (zeroed), or null.
#[allow(unsafe_code)]
fn map(size: usize) -> *mut u8 {
    // SAFETY: a new anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

/// mimalloc, through its plain functions where they give the alignment asked for; large
/// blocks mapped for themselves.
pub struct Alloc;

// SAFETY: a block of `DIRECT` bytes or more (with an alignment a page has) is a mapping of
// its own and goes back with `munmap` (or moves with `mremap`); Rust frees and reallocates a
// block with the layout it last had, so its size tells the two kinds apart, and a realloc
// across the threshold copies into a block of the other kind. Every other pointer comes from
// mimalloc and goes back to it (`mi_free` and `mi_realloc` take aligned and plain blocks
// alike); `plain` only lets through alignments mimalloc's plain functions guarantee for that
// size, and anything else takes the aligned functions.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Alloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if direct(layout.size(), layout.align()) {
            return map(layout.size());
        }
        if plain(layout.size(), layout.align()) {
            mi_malloc(layout.size()).cast()
        } else {
            mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if direct(layout.size(), layout.align()) {
            // A new anonymous mapping reads as zeroes.
            return map(layout.size());
        }
        if plain(layout.size(), layout.align()) {
            mi_zalloc(layout.size()).cast()
        } else {
            mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Rust frees a block with the layout it was allocated (or last reallocated) with, so
        // the size says where it came from.
        if direct(layout.size(), layout.align()) {
            libc::munmap(ptr.cast(), layout.size());
        } else {
            mi_free(ptr.cast());
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (old, align) = (layout.size(), layout.align());
        match (direct(old, align), direct(new_size, align)) {
            (true, true) => {
                // The kernel moves the pages, it copies nothing.
                let p = libc::mremap(ptr.cast(), old, new_size, libc::MREMAP_MAYMOVE);
                return if p == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    p.cast()
                };
            }
            (false, false) => {}
            // Across the threshold: a new block of the other kind, the bytes copied, the old
            // block freed (the old one stays valid when the new one cannot be had).
            _ => {
                // SAFETY (of the layout): `new_size` is non-zero and, rounded up to `align`,
                // does not overflow (`GlobalAlloc::realloc`'s contract).
                let new = Layout::from_size_align_unchecked(new_size, align);
                let p = self.alloc(new);
                if !p.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, p, old.min(new_size));
                    self.dealloc(ptr, layout);
                }
                return p;
            }
        }
        if plain(new_size, layout.align()) {
            mi_realloc(ptr.cast(), new_size).cast()
        } else {
            mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code, clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The tests map and unmap megabytes; one at a time, so that an address one of them
    /// unmapped is not mapped again by the other before it looks.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The rule `plain` relies on, checked on the linked mimalloc for every size class up to
    /// 64 KiB and a few beyond, with many blocks of each so that a block in the middle of a
    /// page is tried too: a block that misses its alignment fails here, not in production.
    #[test]
    fn plain_blocks_have_the_alignment_they_are_trusted_with() {
        let _one = ONE_AT_A_TIME.lock();
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

    /// Large blocks are mappings of their own: their bytes survive every realloc, within the
    /// mapped sizes and across the threshold both ways, and a freed one is unmapped.
    #[test]
    fn direct_blocks_keep_their_bytes_and_go_back_when_freed() {
        let _one = ONE_AT_A_TIME.lock();
        let fill = |p: *mut u8, n: usize| {
            for i in (0..n).step_by(997) {
                // SAFETY: `i < n`, within the block.
                unsafe { *p.add(i) = (i % 251) as u8 };
            }
        };
        let check = |p: *mut u8, n: usize| {
            for i in (0..n).step_by(997) {
                // SAFETY: `i < n`, within the block.
                assert_eq!(unsafe { *p.add(i) }, (i % 251) as u8, "byte {i}");
            }
        };
        let steps = [
            DIRECT - 16,
            DIRECT,
            3 * DIRECT + 5,
            DIRECT + 1,
            1000,
            5 << 20,
            DIRECT,
        ];
        let mut layout = Layout::from_size_align(steps[0], 8).unwrap();
        // SAFETY: a non-zero size.
        let mut p = unsafe { Alloc.alloc(layout) };
        assert!(!p.is_null());
        fill(p, layout.size());
        for &n in &steps[1..] {
            // SAFETY: `p` is live with `layout`; `n` is non-zero.
            let q = unsafe { Alloc.realloc(p, layout, n) };
            assert!(!q.is_null(), "realloc to {n}");
            check(q, layout.size().min(n));
            fill(q, n);
            p = q;
            layout = Layout::from_size_align(n, 8).unwrap();
        }
        let addr = p as usize;
        assert_eq!(addr % PAGE, 0, "a direct block starts a mapping");
        // SAFETY: live, with its layout.
        unsafe { Alloc.dealloc(p, layout) };
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let mapped = maps.lines().any(|l| {
            let range = l.split(' ').next().unwrap_or("");
            let (a, b) = range.split_once('-').unwrap_or(("0", "0"));
            let (a, b) = (
                usize::from_str_radix(a, 16).unwrap_or(0),
                usize::from_str_radix(b, 16).unwrap_or(0),
            );
            (a..b).contains(&addr)
        });
        // Another thread's allocation could reuse the address range at once; in this test
        // binary nothing else maps megabytes while it runs.
        assert!(!mapped, "the freed block is still mapped");
        // Zeroed and large: a fresh mapping.
        let big = Layout::from_size_align(DIRECT * 2, 64).unwrap();
        // SAFETY: a non-zero size; freed below.
        let z = unsafe { Alloc.alloc_zeroed(big) };
        // SAFETY: within the block.
        assert!((0..big.size())
            .step_by(4096)
            .all(|i| unsafe { *z.add(i) } == 0));
        // SAFETY: live, with its layout.
        unsafe { Alloc.dealloc(z, big) };
    }
}
