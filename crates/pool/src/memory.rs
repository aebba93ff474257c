//! The process's heap, as the allocator holds it (docs/operations.md, "Memory").
//!
//! glibc's allocator keeps memory a thread freed in that thread's arena, and gives pages back to
//! the kernel only from the top of a heap. A pool frees as much as it allocates (connections
//! come and go, attackers' buffers are dropped), but the holes left between live blocks stay
//! resident: RSS creeps up over hours while the live heap is flat. [`tune`] keeps the holes
//! fewer (fewer arenas, large blocks mapped on their own), [`release_loop`] hands their whole
//! pages back every few seconds, and [`heap`] shows the two apart on `/api/status`.

use std::time::Duration;

use tokio::sync::watch;

/// How often free pages go back to the kernel: often enough that RSS follows the live heap
/// within seconds (a minute let it swing by ±10 MiB under churn), seldom enough that the
/// allocator's locks (held while it walks an arena, about a millisecond on the soak's 200 MiB
/// heap) cost nothing measurable.
pub const RELEASE_EVERY: Duration = Duration::from_secs(10);

/// Blocks from this size up are mapped on their own and unmapped when freed. glibc's default
/// threshold starts at 128 KiB but rises to the largest block freed so far (up to 32 MiB): after
/// one large table is resized, blocks of its size come from the heap and leave holes there that
/// only a trim gives back in part. A fixed threshold keeps that from happening.
pub const MMAP_FROM: usize = 256 * 1024;

/// Sets the allocator up for a long-running server, before its threads start: at most one
/// arena per core (glibc's default is eight per core; each arena keeps its own free blocks,
/// which another arena's threads cannot reuse, so under connection churn the held memory grows
/// with the number of arenas), and large blocks mapped on their own ([`MMAP_FROM`]).
/// Does nothing where the allocator is not glibc's.
pub fn tune(cores: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let arenas = libc::c_int::try_from(cores.max(2)).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets the allocator's parameters; both values are in range.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_FROM as libc::c_int);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = cores;
}

/// What the allocator holds: bytes in live blocks, and bytes free but kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heap {
    /// Bytes handed out and not freed (the live heap).
    pub in_use: u64,
    /// Bytes freed and held by the allocator for reuse (whole pages of them are no longer
    /// resident once given back: the figure does not drop then).
    pub free: u64,
}

/// How long [`heap_recent`]'s figures are reused: reading them walks the allocator's free
/// blocks with its locks held, which threads serving miners may be waiting on.
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

/// The allocator's figures now; `None` where the allocator is not glibc's, or is older than
/// glibc 2.33 (no `mallinfo2`: it is looked up when the process runs, not linked, so that the
/// binary still starts on an older system).
pub fn heap() -> Option<Heap> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        type MallInfo2 = unsafe extern "C" fn() -> libc::mallinfo2;
        static MALLINFO2: std::sync::OnceLock<Option<MallInfo2>> = std::sync::OnceLock::new();
        let f = (*MALLINFO2.get_or_init(|| {
            // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks a symbol up.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallinfo2".as_ptr()) };
            // SAFETY: glibc's mallinfo2 has exactly this signature.
            (!p.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut libc::c_void, MallInfo2>(p) })
        }))?;
        // SAFETY: mallinfo2 takes no arguments and returns a plain struct by value.
        let m = unsafe { f() };
        Some(Heap {
            in_use: (m.uordblks + m.hblkhd) as u64,
            free: m.fordblks as u64,
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// Gives the whole free pages of every arena back to the kernel; returns whether any went.
pub fn release_free_pages() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes the padding to keep at the top of the main heap (none) and
        // is safe to call from any thread at any time.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Every [`RELEASE_EVERY`] until shutdown, [`release_free_pages`] on a blocking thread (it
/// walks every arena, milliseconds on a large heap: not on a worker that serves miners).
pub async fn release_loop(mut shutdown: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(RELEASE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        let stop = async {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        tokio::select! {
            _ = every.tick() => {
                let _ = tokio::task::spawn_blocking(release_free_pages).await;
            }
            _ = stop => break,
        }
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    #[test]
    fn freed_blocks_show_as_free_until_given_back() {
        // Many mid-sized blocks (below the mmap threshold, so they live in the heap), every
        // other one freed: 62.5 MiB of holes that stay with the allocator, twice the bound
        // below, so that other tests allocating meanwhile in this process cannot hide them.
        let mut blocks: Vec<Vec<u8>> = (0..8000).map(|i| vec![i as u8; 16 * 1024]).collect();
        let full = heap().unwrap();
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
        assert!(release_free_pages(), "the holes' pages go back");
        drop(blocks);
    }

    #[test]
    fn after_tune_a_freed_large_block_is_not_kept() {
        // Untuned, freeing a mapped 16 MiB block raises glibc's threshold past it, so the next
        // block of that size comes from an arena and stays there, free, when dropped.
        tune(2);
        const SIZE: usize = 16 << 20;
        for _ in 0..3 {
            let before = heap().unwrap();
            let block = std::hint::black_box(vec![1u8; SIZE]);
            drop(block);
            let after = heap().unwrap();
            assert!(
                after.free < before.free + SIZE as u64 / 2,
                "{before:?} then {after:?}"
            );
        }
    }
}
