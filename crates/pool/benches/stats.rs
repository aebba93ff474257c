//! `stats/share`: what the statistics add to each accepted share (`share_accepted`, pool and
//! worker, plus `share_processing`); `stats/snapshot`: one O(1) read of every pool-wide
//! figure; `stats/render_metrics`: one `/metrics` body (allocates; per scrape, not per share).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use pool::stats::{PoolStats, WorkerRegistry};
use pool::Timestamp;

fn stats(c: &mut Criterion) {
    let stats = PoolStats::new(Timestamp::from_millis(0));
    let workers = WorkerRegistry::new(&stats);
    let names: Vec<String> = (0..1024).map(|i| format!("worker{i}")).collect();
    let ws: Vec<_> = names
        .iter()
        .map(|n| workers.attach(n, Timestamp::from_millis(0)))
        .collect();
    let mut i = 0usize;
    let mut ns = 0u64;
    c.bench_function("stats/share", |b| {
        b.iter(|| {
            // Time moves 1 ms every 8 shares (8,000 shares/s); shares rotate over 1,024
            // workers, so each worker's sums decay by a real interval on every share.
            i = i.wrapping_add(1);
            let now = Timestamp::from_millis((i / 8) as u64);
            stats.share_accepted(&ws[i & 1023], black_box(1024.0), now);
            ns = (ns + 137) % 20_000;
            stats.share_processing(black_box(ns));
        })
    });
    let now = Timestamp::from_millis((i / 8) as u64);
    c.bench_function("stats/snapshot", |b| {
        b.iter(|| stats.snapshot(black_box(now)))
    });
    c.bench_function("stats/render_metrics", |b| {
        b.iter(|| {
            pool::http::render_metrics(
                &stats.snapshot(black_box(now)),
                &stats.processing(),
                &[],
                None,
                None,
            )
        })
    });
}

criterion_group!(benches, stats);
criterion_main!(benches);
