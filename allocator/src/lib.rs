//! The memory allocator of the `turna` binary, and of the benches that measure what ships.
//!
//! Translation and proxying allocate many small, short-lived objects: mimalloc is 2-3x faster
//! at that than the system allocator (translator/benches/translate.rs). Two things are set
//! differently from the `mimalloc` crate's defaults; see [`Mimalloc`] and
//! [`reset_instead_of_decommit`].

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment of every mimalloc block: blocks are sized in machine words.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc as the global allocator. Allocations aligned to a machine word or less (nearly
/// all) go to mimalloc's plain entry points: its aligned ones, which the `mimalloc` crate uses
/// for everything, over-allocate and re-align any block above 1 KiB whose size class is not a
/// power of two in mimalloc 3, even when the alignment asked for is 8. That was a twentieth
/// of the instructions of a proxied request.
pub struct Mimalloc;

// SAFETY: mimalloc returns blocks of at least the size asked, aligned to at least a word, or
// null; the aligned entry points honour any power-of-two alignment. Every block, however
// allocated, is freed and resized by `mi_free` and `mi_realloc*`.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if layout.align() <= WORD {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if layout.align() <= WORD {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`.
        unsafe {
            if layout.align() <= WORD {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

/// mimalloc's `mi_option_purge_decommits`: its position in `mi_option_e` (mimalloc.h).
const PURGE_DECOMMITS: mi::mi_option_t = 5;

/// Makes mimalloc reset freed memory instead of decommitting it. Decommitted memory faults in
/// again on the next translation (a sixth of its time at 10,000 routes); reset memory is left
/// for the kernel to reclaim under memory pressure. Call once, first thing in `main`.
pub fn reset_instead_of_decommit() {
    // SAFETY: sets an option's value; mimalloc reads its options from any thread at any time.
    unsafe { mi::mi_option_set(PURGE_DECOMMITS, 0) };
}

/// The environment variable, with its value, that keeps mimalloc off huge pages from its
/// first allocation, before `main` (see [`without_huge_pages`]): set on proxy pods.
pub const WITHOUT_HUGE_PAGES_ENV: (&str, &str) = ("MIMALLOC_ALLOW_THP", "0");

/// mimalloc's `mi_option_allow_thp`: its position in `mi_option_e`.
const ALLOW_THP: mi::mi_option_t = 43;

/// Keeps the process on small pages: no transparent huge pages. mimalloc advises them on its
/// arenas, and the kernel then backs each 2 MiB of heap touched at all with a whole huge page:
/// an idle proxy held 8 MiB of them for under 2 MiB of data, and at 5,000 routes the controller
/// and standalone mode held a quarter more than on small pages (standalone 112 -> 79 MiB
/// settled, peak 140 -> 103). Huge pages do save TLB misses: a change at 5,000 routes
/// translates a tenth faster on them, at 10,000 a sixth (README, Performance). Call first thing
/// in `main`; what was allocated before (a few huge pages) stays unless
/// [`WITHOUT_HUGE_PAGES_ENV`] is set too.
pub fn without_huge_pages() {
    // SAFETY: sets an option's value, read by mimalloc when it next asks the OS for memory.
    unsafe { mi::mi_option_set(ALLOW_THP, 0) };
    // The arena mimalloc reserved before `main` is advised already; the process flag keeps
    // huge pages out of it too. Best effort: a kernel without it keeps them.
    // SAFETY: PR_SET_THP_DISABLE takes an integer flag and touches no memory of ours.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

/// Whether `value` of [`WITHOUT_HUGE_PAGES_ENV`]'s variable (mimalloc's own switch) allows huge
/// pages, as mimalloc reads it: `1`, `true`, `on`, `yes` or a number other than 0.
pub fn allows_huge_pages(value: &str) -> bool {
    let value = value.trim().to_ascii_lowercase();
    match value.as_str() {
        "1" | "true" | "on" | "yes" => true,
        "" | "0" | "false" | "off" | "no" => false,
        other => other.parse::<i64>().is_ok_and(|n| n != 0),
    }
}

/// [`without_huge_pages`], unless the environment asks for huge pages
/// (`MIMALLOC_ALLOW_THP=1`: a controller translating tens of thousands of routes may trade the
/// memory for the time).
pub fn small_pages_unless_asked() {
    let asked = std::env::var(WITHOUT_HUGE_PAGES_ENV.0).is_ok_and(|v| allows_huge_pages(&v));
    if !asked {
        without_huge_pages();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Option numbers are positions in mimalloc's `mi_option_e`: 5 must still be
    /// `purge_decommits` (default 1) in the vendored mimalloc, next to `purge_delay` (15, 1000 ms).
    #[test]
    fn option_5_is_purge_decommits() {
        // SAFETY: reads option values.
        let (decommits, delay) = unsafe { (mi::mi_option_get(PURGE_DECOMMITS), mi::mi_option_get(15)) };
        assert_eq!((decommits, delay), (1, 1000));
    }

    /// 43 must still be `allow_thp` (default 1), between `page_cross_thread_max_reclaim` (42,
    /// default 32) and `minimal_purge_size` (44, default 0).
    #[test]
    fn option_43_is_allow_thp() {
        // SAFETY: reads option values.
        let options = unsafe { [42, ALLOW_THP, 44].map(|o| mi::mi_option_get(o)) };
        assert_eq!(options, [32, 1, 0]);
    }

    #[test]
    fn huge_pages_are_allowed_as_mimalloc_reads_its_switch() {
        for allowed in ["1", "true", "ON", "yes", " 2 "] {
            assert!(allows_huge_pages(allowed), "{allowed:?}");
        }
        for refused in ["0", "false", "off", "NO", "", "maybe"] {
            assert!(!allows_huge_pages(refused), "{refused:?}");
        }
    }

    /// Every size up to 20 KiB, at every alignment from 1 to 4 KiB, comes back aligned, usable
    /// to its last byte, zeroed when asked, and keeps its bytes when grown.
    #[test]
    fn blocks_are_aligned_sized_and_zeroed_as_asked() {
        let allocator = Mimalloc;
        let sizes = (1..=4096).chain((4097..=20 * 1024).step_by(97));
        for size in sizes {
            for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero sizes; every block is freed with the layout it has.
                unsafe {
                    let plain = allocator.alloc(layout);
                    let zeroed = allocator.alloc_zeroed(layout);
                    assert!(!plain.is_null() && !zeroed.is_null());
                    assert_eq!(plain as usize % align, 0, "size {size} align {align}");
                    assert_eq!(zeroed as usize % align, 0, "size {size} align {align} (zeroed)");
                    assert!(std::slice::from_raw_parts(zeroed, size).iter().all(|&b| b == 0));
                    plain.write_bytes(0xa5, size);
                    let grown = allocator.realloc(plain, layout, size * 2 + 1);
                    assert_eq!(grown as usize % align, 0, "size {size} align {align} (grown)");
                    assert!(std::slice::from_raw_parts(grown, size).iter().all(|&b| b == 0xa5));
                    allocator.dealloc(grown, Layout::from_size_align(size * 2 + 1, align).unwrap());
                    allocator.dealloc(zeroed, layout);
                }
            }
        }
    }
}
