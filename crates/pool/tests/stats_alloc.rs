//! The statistics' hot calls allocate nothing: a counting global allocator sees every
//! allocation in the process while shares, gauges and snapshots are recorded after a warm-up.
//!
//! Runs without the test harness (`harness = false`) so that no other test thread allocates
//! while it counts.

use events::Reason;
use pool::stats::{NodeStatus, NotServing, PoolStats, Serving, StoreReport, WorkerRegistry};
use pool::Timestamp;

#[global_allocator]
static GLOBAL: testkit::alloc::Counting = testkit::alloc::Counting;

fn main() {
    let stats = PoolStats::new(Timestamp::from_millis(0));
    let workers = WorkerRegistry::new(&stats);
    let w = workers.attach("alice.rig1", Timestamp::from_millis(0));

    // The counter sees allocations at all.
    let before = testkit::alloc::process_allocs();
    drop(std::hint::black_box(Box::new(7u64)));
    assert_eq!(testkit::alloc::process_allocs() - before, 1);

    let before = testkit::alloc::process_allocs();
    let mut checksum = 0.0;
    for i in 0..100_000u64 {
        let now = Timestamp::from_millis(i / 3);
        stats.share_accepted(&w, 1024.0, now);
        stats.share_processing(i % 20_000);
        if i.is_multiple_of(50) {
            stats.share_rejected(Some(&w), Reason::ALL[(i / 50) as usize % 7], now);
            stats.share_rejected(None, Reason::Unauthorized, now);
        }
        if i.is_multiple_of(1000) {
            stats.connection_opened();
            stats.connection_closed();
            stats.vardiff_changed();
            stats.job_created(i.is_multiple_of(2000));
            stats.block_found();
            stats.block_result(true);
            stats.set_node(NodeStatus::Ok { since: now });
            stats.set_serving(Serving::Yes);
            stats.set_serving(Serving::No(NotServing::TemplatesStale));
            stats.store(StoreReport {
                commits: i,
                ..StoreReport::default()
            });
            let s = stats.snapshot(now);
            checksum += s.hashrate_1m + w.hashrate_10m(now);
            checksum += stats.processing().count() as f64;
        }
    }
    let n = testkit::alloc::process_allocs() - before;
    assert!(checksum > 0.0);
    assert_eq!(
        stats.snapshot(Timestamp::from_millis(40_000)).accepted,
        100_000
    );
    if n != 0 {
        eprintln!("stats hot path: {n} allocations in 100k shares");
        std::process::exit(1);
    }
    println!("stats hot path: 0 allocations in 100k shares, 100 snapshots");
    println!("1 passed, 0 failed");
}
