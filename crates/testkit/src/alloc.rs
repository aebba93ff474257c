//! Counting allocations: the system allocator, with a count of allocation calls (`alloc`,
//! `alloc_zeroed`, `realloc`) per thread and for the whole process. A test or bench binary
//! installs it with
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: testkit::alloc::Counting = testkit::alloc::Counting;
//! ```
//!
//! and reads the counts before and after the work it measures; the difference is that work's
//! allocations, on this thread ([`thread_allocs`]) or anywhere ([`process_allocs`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting its allocation calls.
#[derive(Debug, Default)]
pub struct Counting;

thread_local! {
    static THREAD_ALLOCS: Cell<u64> = const { Cell::new(0) };
}
static PROCESS_ALLOCS: AtomicU64 = AtomicU64::new(0);

#[inline]
fn count() {
    PROCESS_ALLOCS.fetch_add(1, Ordering::Relaxed);
    // `try_with`: a thread's last deallocations run after its locals are gone.
    let _ = THREAD_ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `alloc`'s contract, which we pass through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocation calls this thread made so far (while [`Counting`] is the global allocator).
pub fn thread_allocs() -> u64 {
    THREAD_ALLOCS.with(Cell::get)
}

/// Allocation calls the whole process made so far (while [`Counting`] is the global allocator).
pub fn process_allocs() -> u64 {
    PROCESS_ALLOCS.load(Ordering::Relaxed)
}
