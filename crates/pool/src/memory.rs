//! The process's heap, as the allocator holds it (docs/operations.md, "Memory").
//!
//! The stratumlab binary's Rust allocations go to jemalloc (its `main.rs` sets it as the global
//! allocator). A pool frees as much as it allocates (connections come and go, attackers' buffers
//! are dropped); glibc's allocator left the holes between live blocks resident, so RSS crept up
//! while the live heap stayed flat (docs/performance.md, "the soak's memory on jemalloc").
//! jemalloc keeps blocks of one size class together, and a background thread returns freed
//! pages to the kernel as they age (over about ten seconds); [`heap`] shows what it holds, live
//! and free, on `/api/status`.

use std::time::Duration;

use tikv_jemalloc_ctl::{epoch, stats, thread};

/// What the allocator holds: bytes in live blocks, and bytes free but kept resident.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heap {
    /// Bytes handed out and not freed (the live heap).
    pub in_use: u64,
    /// Bytes resident in the allocator's pages but in no live block (the allocator's own
    /// metadata not counted): free slots of partly used slabs and the padding page of each
    /// large block, held while their neighbours live, and freed pages that the background
    /// thread has not returned yet.
    pub free: u64,
}

/// How long [`heap_recent`]'s figures are reused: refreshing them merges every thread's
/// counters under the allocator's locks, which threads serving miners may be waiting on.
pub const HEAP_FIGURES_KEPT: Duration = Duration::from_secs(5);

/// [`heap`], read at most once per [`HEAP_FIGURES_KEPT`]: for status pages polled often.
pub fn heap_recent() -> Option<Heap> {
    static LAST: std::sync::Mutex<Option<(std::time::Instant, Option<Heap>)>> =
        std::sync::Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    match *last {
        Some((at, figures)) if at.elapsed() < HEAP_FIGURES_KEPT => figures,
        _ => {
            let figures = heap();
            *last = Some((std::time::Instant::now(), figures));
            figures
        }
    }
}

/// jemalloc's figures now, where it is the process's global allocator (the stratumlab binary,
/// this crate's unit tests); `None` where another allocator serves the process (a program
/// embedding this library with its own) or the statistics cannot be read.
pub fn heap() -> Option<Heap> {
    if !jemalloc_is_global() {
        return None;
    }
    epoch::advance().ok()?;
    let allocated = stats::allocated::read().ok()? as u64;
    let resident = stats::resident::read().ok()? as u64;
    let metadata = stats::metadata::read().ok()? as u64;
    Some(Heap {
        in_use: allocated,
        free: resident.saturating_sub(metadata).saturating_sub(allocated),
    })
}

/// Whether Rust's allocations go to jemalloc: a block allocated here must show in this thread's
/// jemalloc counter. (Reading jemalloc's statistics in a process that does not use it starts
/// jemalloc, whose own start-up allocations would read as a small live heap.)
fn jemalloc_is_global() -> bool {
    static GLOBAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *GLOBAL.get_or_init(|| {
        let Ok(counter) = thread::allocatedp::read() else {
            return false;
        };
        let before = counter.get();
        let block = std::hint::black_box(Box::new([1u8; 4096]));
        let after = counter.get();
        drop(block);
        after >= before + 4096
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_heap_follows_allocations_and_freed_blocks_show_as_free() {
        // 16 KiB blocks (jemalloc's smallest large class: each its own extent, with a padding
        // page), every other one freed: 62.5 MiB of free pages that stay resident until they
        // age, twice the bound below, so that other tests allocating meanwhile in this process
        // cannot hide them.
        let before = heap().unwrap();
        let mut blocks: Vec<Vec<u8>> = (0..8000).map(|i| vec![i as u8; 16 * 1024]).collect();
        let full = heap().unwrap();
        assert!(
            full.in_use > before.in_use + 100 * 1024 * 1024,
            "{before:?} then {full:?}"
        );
        let mut i = 0;
        blocks.retain(|_| {
            i += 1;
            i % 2 == 0
        });
        let holes = heap().unwrap();
        assert!(
            holes.in_use + 30 * 1024 * 1024 < full.in_use,
            "{full:?} then {holes:?}"
        );
        assert!(
            holes.free > full.free + 30 * 1024 * 1024,
            "{full:?} then {holes:?}"
        );
        drop(blocks);
    }
}
