//! Templates built per second from a big mempool: the cost the network pays on every tip
//! change and fee-driven refresh.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use simnet::config::{COINBASE_RESERVED_WEIGHT, MAX_BLOCK_WEIGHT};
use simnet::{MempoolConfig, Network, SimnetConfig, Timestamp};

fn network_with_mempool(txs: usize) -> Network {
    let config = SimnetConfig {
        seed: 1,
        block_interval: Duration::ZERO,
        mempool: MempoolConfig {
            arrival_rate: 0.0,
            initial_txs: txs,
            ..Default::default()
        },
        ..Default::default()
    };
    Network::new(config).expect("valid config")
}

fn templates(c: &mut Criterion) {
    let mut group = c.benchmark_group("templates");
    for (name, txs) in [("build_10k", 10_000), ("build_100k", 100_000)] {
        let net = network_with_mempool(txs);
        assert_eq!(net.mempool().len(), txs);
        group.bench_function(name, |b| {
            b.iter(|| black_box(net.preview_template(black_box(Timestamp::from_secs(1)))))
        });
    }
    // The fee-delta check that runs on arrivals: the same walk without building anything.
    let net = network_with_mempool(100_000);
    let limit = MAX_BLOCK_WEIGHT - COINBASE_RESERVED_WEIGHT;
    group.bench_function("fee_check_100k", |b| {
        b.iter(|| black_box(net.mempool().selection_fees(black_box(limit))))
    });
    group.finish();
}

criterion_group!(benches, templates);
criterion_main!(benches);
