//! The store's page cache is set aside when the process's first store opens, resident from the
//! start (docs/operations.md, "Memory"): its own process, so that no other test opened SQLite
//! before it. The pages the writer caches come from that memory, not from the heap.

use std::time::Duration;

use pool::store::*;
use rusqlite::ffi;

/// (in use now, highest so far) of one of SQLite's process-wide memory figures.
fn status(op: std::ffi::c_int) -> (i64, i64) {
    let (mut now, mut high) = (0i64, 0i64);
    // SAFETY: sqlite3_status64 writes the two figures of `op` into the pointers.
    let rc = unsafe { ffi::sqlite3_status64(op, &mut now, &mut high, 0) };
    assert_eq!(rc, ffi::SQLITE_OK);
    (now, high)
}

/// This process's resident memory, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Enough shares for a file larger than the cache, which would fill it.
const SHARES: u64 = 150_000;

#[test]
fn the_page_cache_is_resident_from_the_first_open_and_pages_come_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreConfig::new(dir.path().join("pool.db"))).unwrap();
    let worker = store.worker("lab.w").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let opened = rss_kib();
    // In batches the store's queue holds, each waited for.
    for batch in 0..SHARES / 50_000 {
        let mut last = None;
        for i in batch * 50_000..(batch + 1) * 50_000 {
            let mut hash = [0u8; 32];
            hash[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
            let rec = ShareRecord {
                worker,
                difficulty: 1024.0,
                job_id: i / 100,
                time_ms: 1_760_000_000_000 + i,
                hash,
            };
            last = Some(store.record_share(rec).unwrap());
        }
        runtime
            .block_on(async {
                let durable = store.wait_durable(last.unwrap());
                tokio::time::timeout(Duration::from_secs(30), durable).await
            })
            .expect("durable within 30 s")
            .expect("durable");
    }
    let grew = rss_kib().saturating_sub(opened);
    eprintln!("RSS grew {grew} KiB over {SHARES} shares");
    // Pages cached one at a time on the heap grow it by the cache's 8 MiB and more.
    assert!(grew < 4 * 1024, "RSS grew {grew} KiB over {SHARES} shares");
    let (in_slots, _) = status(ffi::SQLITE_STATUS_PAGECACHE_USED);
    let (on_heap, _) = status(ffi::SQLITE_STATUS_PAGECACHE_OVERFLOW);
    assert!(in_slots > 100, "{in_slots} pages in the reserved slots");
    assert_eq!(on_heap, 0, "pages cached on the heap");
}
