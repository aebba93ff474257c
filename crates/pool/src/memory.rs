//! The process's heap, as the allocator holds it (docs/operations.md, "Memory").
//!
//! The stratumlab binary runs on jemalloc (its `main.rs` sets it as the global allocator). A
//! pool frees as much as it allocates (connections come and go, attackers' buffers are dropped);
//! glibc's allocator left the holes between live blocks resident, so RSS crept up for as long as
//! the pool ran while the live heap stayed flat (the soaks in docs/performance.md). jemalloc
//! keeps blocks of one size class together and a background thread returns unused pages to the
//! kernel after a few seconds; [`heap`] shows what it holds, live and free, on `/api/status`.

use std::time::Duration;

use tikv_jemalloc_ctl::{epoch, stats};

/// What the allocator holds: bytes in live blocks, and bytes free but kept resident.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heap {
    /// Bytes handed out and not freed (the live heap).
    pub in_use: u64,
    /// Bytes resident in the allocator's pages but in no live block: freed and kept for reuse,
    /// until the background thread returns their pages (the allocator's own metadata is not
    /// counted).
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

/// jemalloc's figures now. They describe the process's heap where jemalloc is its global
/// allocator (the stratumlab binary, this crate's tests); `None` where jemalloc has handed out
/// nothing (another allocator serves the process) or its statistics cannot be read.
pub fn heap() -> Option<Heap> {
    epoch::advance().ok()?;
    let allocated = stats::allocated::read().ok()? as u64;
    let resident = stats::resident::read().ok()? as u64;
    let metadata = stats::metadata::read().ok()? as u64;
    (allocated > 0).then(|| Heap {
        in_use: allocated,
        free: resident.saturating_sub(metadata).saturating_sub(allocated),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_heap_follows_allocations_and_freed_blocks_show_as_free() {
        // 16 KiB blocks (jemalloc's smallest large class: each its own extent), every other one
        // freed: 62.5 MiB of free pages that stay resident until they age, twice the bound
        // below, so that other tests allocating meanwhile in this process cannot hide them.
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
        assert!(holes.free > 30 * 1024 * 1024, "{holes:?}");
        drop(blocks);
    }
}
