//! The share store's costs, beside `floor/compress256` measured in the same run:
//!
//! - `store/record_share/off` and `store/record_share/batched`: one `record_share` call, the
//!   pool's hot path (a short lock, a copy onto the queue). Only the calls are timed: before each
//!   timed run the bench waits for the queue to have room, so no call meets a full queue.
//! - `store/durable/batched`: the writer's sustained rate, per share from `record_share` to
//!   "durable" (a synced group commit of the default 10 ms window) with the queue kept full.

use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use pool::store::{Durability, ShareRecord, Store, StoreConfig, StoreError, Ticket, WorkerKey};
use testkit::floor::Floor;

fn share(worker: WorkerKey, i: u64) -> ShareRecord {
    let mut hash = [0u8; 32];
    hash[..8].copy_from_slice(&i.to_le_bytes());
    ShareRecord {
        worker,
        difficulty: 1024.0,
        job_id: i / 1000,
        time_ms: 1_760_000_000_000 + i,
        hash,
    }
}

fn open(dir: &tempfile::TempDir, durability: Durability) -> (Store, WorkerKey) {
    let store = Store::open(StoreConfig {
        durability,
        ..StoreConfig::new(dir.path().join(format!("{durability}.db")))
    })
    .expect("open the store");
    let worker = store.worker("bench.rig").expect("intern a worker");
    (store, worker)
}

/// Waits until the queue is at most a quarter full.
fn wait_for_room(store: &Store) {
    let stats = store.stats();
    while store.stats().queue_len > stats.queue_capacity / 4 {
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn floor(c: &mut Criterion) {
    let mut g = c.benchmark_group("floor");
    let mut floor = Floor::new();
    g.bench_function("compress256", |b| b.iter(|| floor.once()));
    g.finish();
}

fn record_share(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut g = c.benchmark_group("store/record_share");
    for durability in [Durability::Off, Durability::Batched] {
        let (store, worker) = open(&dir, durability);
        let run = (store.stats().queue_capacity / 2) as u64;
        let mut i = 0u64;
        g.bench_function(durability.as_str(), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                let mut done = 0;
                while done < iters {
                    wait_for_room(&store);
                    let n = (iters - done).min(run);
                    let started = Instant::now();
                    for _ in 0..n {
                        let t = store.record_share(black_box(share(worker, i)));
                        black_box(t.expect("room on the queue"));
                        i += 1;
                    }
                    timed += started.elapsed();
                    done += n;
                }
                timed
            })
        });
        store.close().expect("close");
    }
    g.finish();
}

fn durable(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut g = c.benchmark_group("store/durable");
    g.sample_size(10);
    let (store, worker) = open(&dir, Durability::Batched);
    let mut i = 0u64;
    g.bench_function("batched", |b| {
        b.iter_custom(|iters| {
            let started = Instant::now();
            let mut last = Ticket(0);
            let mut done = 0;
            while done < iters {
                match store.record_share(share(worker, i)) {
                    Ok(t) => {
                        last = t;
                        done += 1;
                        i += 1;
                    }
                    Err(StoreError::QueueFull) => std::thread::sleep(Duration::from_micros(100)),
                    Err(e) => panic!("{e}"),
                }
            }
            while !store.is_durable(last) {
                std::thread::sleep(Duration::from_micros(100));
            }
            started.elapsed()
        })
    });
    g.finish();
    let stats = store.close().expect("close");
    eprintln!(
        "store/durable/batched: {} shares in {} commits, average commit {:?}, longest {:?}",
        stats.shares_written, stats.commits, stats.avg_commit, stats.max_commit
    );
}

criterion_group!(benches, floor, record_share, durable);
criterion_main!(benches);
