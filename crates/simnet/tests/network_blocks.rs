//! The rest of the network: Poisson block arrivals, the transactions they take, and what
//! they look like to the checks a submitted block goes through.

mod common;

use std::time::Duration;

use common::*;
use primitives::Hash256;
use simnet::{BlockSource, MempoolConfig, Network, Output, SimnetConfig};

fn tips(outputs: &[Output]) -> Vec<(simnet::Timestamp, Hash256, u32, BlockSource)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::TipChanged {
                at,
                hash,
                height,
                source,
                ..
            } => Some((*at, *hash, *height, *source)),
            _ => None,
        })
        .collect()
}

/// The default network with transactions arriving at `arrival_rate` a second onto
/// `initial_txs`.
fn with_mempool(arrival_rate: f64, initial_txs: usize) -> SimnetConfig {
    SimnetConfig {
        mempool: MempoolConfig {
            arrival_rate,
            initial_txs,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn block_gaps_are_exponential_with_the_configured_mean() {
    let c = SimnetConfig {
        seed: 21,
        ..with_mempool(0.0, 0)
    };
    let mut net = Network::new(c).unwrap();
    let n = 3_000u32;
    let outs = run(&mut net, secs(600 * n as u64));
    let found = tips(&outs);
    // The count of a Poisson process over n means: n +- 4 sqrt(n).
    let count = found.len() as f64;
    assert!(
        (count - n as f64).abs() < 4.0 * (n as f64).sqrt(),
        "{count} blocks"
    );
    assert!(found.iter().all(|t| t.3 == BlockSource::Network));
    // Heights go up one at a time from the start height.
    for (i, t) in found.iter().enumerate() {
        assert_eq!(t.2, 900_001 + i as u32);
    }
    assert_eq!(net.height(), 900_000 + found.len() as u32);

    let mut gaps: Vec<f64> = std::iter::once(found[0].0.as_secs_f64())
        .chain(found.windows(2).map(|w| (w[1].0 - w[0].0).as_secs_f64()))
        .collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let se = 600.0 / (gaps.len() as f64).sqrt();
    assert!((mean - 600.0).abs() < 4.0 * se, "mean gap {mean}");
    // Kolmogorov-Smirnov against Exp(mean 600 s), 0.1% level.
    gaps.sort_by(f64::total_cmp);
    let m = gaps.len() as f64;
    let d = gaps
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let f = 1.0 - (-g / 600.0).exp();
            (f - i as f64 / m).abs().max((f - (i + 1) as f64 / m).abs())
        })
        .fold(0.0, f64::max);
    assert!(d < 1.95 / m.sqrt(), "KS {d}");
    // Memorylessness shows as a coefficient of variation of 1 (a regular clock gives 0).
    let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / m).sqrt();
    assert!((sd / mean - 1.0).abs() < 0.1, "cv {}", sd / mean);
}

#[test]
fn zero_interval_means_no_network_blocks() {
    let c = SimnetConfig {
        block_interval: Duration::ZERO,
        ..with_mempool(0.01, 100)
    };
    let mut net = Network::new(c).unwrap();
    let outs = run(&mut net, secs(3 * 3600)); // 18 blocks expected were it on
    assert!(tips(&outs).is_empty());
    assert_eq!(net.height(), 900_000);
    assert!(net.mempool().len() > 100, "arrivals still come");
}

#[test]
fn network_blocks_take_the_best_transactions() {
    let c = SimnetConfig {
        seed: 22,
        block_interval: Duration::from_secs(600),
        ..with_mempool(0.0, 20_000) // more than a block holds
    };
    let mut net = Network::new(c).unwrap();
    let before = net.mempool().len();
    let expected = net.preview_template(simnet::Timestamp::ZERO);
    let outs = run(&mut net, secs(5_000));
    let found = tips(&outs);
    assert!(!found.is_empty());
    let first = net.block(&found[0].1).unwrap();
    // No arrivals: the first block is exactly what a template at the start would hold.
    assert_eq!(
        first.txs.iter().map(|e| e.txid).collect::<Vec<_>>(),
        expected.txids
    );
    assert_eq!(first.fees, expected.total_fees);
    let value: u64 = first.coinbase.output.iter().map(|o| o.value.to_sat()).sum();
    assert_eq!(value, 312_500_000 + first.fees);
    assert!(
        first.weight <= 4_000_000 && first.weight > 3_990_000,
        "{}",
        first.weight
    );
    // They left the mempool, block after block.
    let mined: usize = found
        .iter()
        .map(|t| net.block(&t.1).unwrap().txs.len())
        .sum();
    assert_eq!(net.mempool().len(), before - mined);
    // Fee rates fall from block to block as the best go first.
    let b1 = net.block(&found[1].1).unwrap();
    assert!(first.txs.last().unwrap().fee_rate() >= b1.txs[0].fee_rate());
}

#[test]
fn network_blocks_pass_the_submission_checks() {
    // Two networks on one seed: A finds blocks, B does not. The arrival stream is the same, so
    // A's first block, submitted to B at the instant A found it, must be valid there (easy
    // target: network blocks then carry real proof of work).
    let mut a_cfg = submit_config(23);
    a_cfg.block_interval = Duration::from_secs(120);
    let mut b_cfg = a_cfg.clone();
    b_cfg.block_interval = Duration::ZERO;
    let mut a = Network::new(a_cfg).unwrap();
    let mut b = Network::new(b_cfg).unwrap();
    let outs = run(&mut a, secs(2_000));
    let found = tips(&outs);
    assert!(found.len() >= 2);
    let (at, hash, height, _) = found[0];
    let block = a.block(&hash).unwrap();
    assert!(block.txs.len() > 100);
    assert!(block.header.bits == a.bits() && a.target().is_met_by(hash.as_bytes()));
    let accepted = b.submit_block(at, &block.serialize()).unwrap();
    assert_eq!((accepted.hash, accepted.height), (hash, height));
    // And the second one on top of it.
    let (at2, hash2, _, _) = found[1];
    let second = a.block(&hash2).unwrap().serialize();
    b.submit_block(at2, &second).unwrap();
    assert_eq!(b.chain().tip_hash(), hash2);
}

#[test]
fn a_submitted_block_does_not_shift_the_network_block_times() {
    let mut c = submit_config(24);
    c.block_interval = Duration::from_secs(300);
    c.mempool.arrival_rate = 0.5;
    let mut a = Network::new(c.clone()).unwrap();
    let mut b = Network::new(c).unwrap();
    let a_out = run(&mut a, secs(8_000));
    // B: a pool finds a block at 100 s.
    let mut b_out = run(&mut b, secs(100));
    let block = Draft::from_template(b.template()).mine();
    b.submit_block(secs(100), &raw(&block)).unwrap();
    b_out.extend(run(&mut b, secs(8_000)));

    let times = |o: &[Output]| -> Vec<_> {
        tips(o)
            .into_iter()
            .filter(|t| t.3 == BlockSource::Network)
            .map(|t| t.0)
            .collect()
    };
    assert!(times(&a_out).len() > 15);
    assert_eq!(times(&a_out), times(&b_out));
    assert_eq!(b.height(), a.height() + 1);
}
