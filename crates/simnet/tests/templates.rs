//! Template contents (selection, value, merkle branch, witness commitment) and when templates
//! are made (fee delta, template interval, tip changes).

mod common;

use std::time::Duration;

use common::*;
use primitives::bitcoin::consensus::serialize;
use primitives::coinbase::{witness_commitment, witness_commitment_script, WITNESS_RESERVED_VALUE};
use primitives::{merkle_root, Hash256};
use simnet::config::{COINBASE_RESERVED_WEIGHT, MAX_BLOCK_WEIGHT};
use simnet::{MempoolConfig, Network, Output, SimnetConfig};

fn config(seed: u64, initial_txs: usize) -> SimnetConfig {
    SimnetConfig {
        seed,
        block_interval: Duration::ZERO,
        mempool: MempoolConfig {
            initial_txs,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn selection_is_greedy_by_fee_rate_within_the_weight_limit() {
    // About 5 MvB waiting: far more than a block holds.
    let net = Network::new(config(1, 20_000)).unwrap();
    let t = net.template().clone();
    let limit = MAX_BLOCK_WEIGHT - COINBASE_RESERVED_WEIGHT;
    assert!(t.tx_weight <= limit);
    // Greedy filling with small transactions leaves less than the smallest one free.
    assert!(t.tx_weight > limit - 4 * 110, "{}", t.tx_weight);
    assert_eq!(
        t.tx_weight,
        t.transactions.iter().map(|e| e.weight).sum::<u64>()
    );

    // Fee rates never increase along the block.
    for w in t.transactions.windows(2) {
        assert!(w[0].fee_rate() >= w[1].fee_rate());
    }
    // Every transaction the walk passed over before its last pick did not fit at its turn:
    // the chosen ones ranked above it plus itself exceed the limit.
    let order: Vec<_> = net.mempool().iter_by_fee_rate().cloned().collect();
    let chosen: std::collections::HashSet<Hash256> = t.txids.iter().copied().collect();
    let last_pick = order
        .iter()
        .rposition(|e| chosen.contains(&e.txid))
        .unwrap();
    let mut weight_above = 0;
    for e in &order[..=last_pick] {
        if chosen.contains(&e.txid) {
            weight_above += e.weight;
        } else {
            assert!(weight_above + e.weight > limit, "{} would have fit", e.txid);
        }
    }
    // Nothing left out pays a better rate than the worst chosen, unless it was too big.
    let worst = t.transactions.last().unwrap().fee_rate();
    assert!(order[..=last_pick]
        .iter()
        .filter(|e| !chosen.contains(&e.txid))
        .all(|e| e.fee_rate() >= worst));
}

#[test]
fn a_small_mempool_goes_into_the_template_whole() {
    let net = Network::new(config(2, 1_000)).unwrap();
    let t = net.template();
    assert_eq!(t.tx_count(), 1_000);
    assert_eq!(t.total_fees, net.mempool().total_fees());
}

#[test]
fn value_is_subsidy_plus_fees() {
    let net = Network::new(config(3, 5_000)).unwrap();
    let t = net.template();
    assert_eq!(t.height, 900_001);
    assert_eq!(t.subsidy, 312_500_000);
    let fees: u64 = t.transactions.iter().map(|e| e.fee).sum();
    assert!(fees > 0);
    assert_eq!(t.total_fees, fees);
    assert_eq!(t.coinbase_value, 312_500_000 + fees);
}

#[test]
fn merkle_branch_and_witness_commitment_match_the_full_block() {
    for txs in [0, 1, 2, 3, 7, 300, 4_000] {
        let net = Network::new(config(4, txs)).unwrap();
        let t = net.template();
        let draft = Draft::from_template(t);
        let cb = draft.coinbase();
        let cb_txid: Hash256 = cb.compute_txid().into();
        let mut all = vec![cb_txid];
        all.extend(&t.txids);
        assert_eq!(t.merkle_root(cb_txid), merkle_root(&all), "{txs} txs");
        // And the block built on it says the same.
        let block = draft.block(0);
        assert_eq!(
            Hash256::from(block.compute_merkle_root().unwrap()),
            merkle_root(&all)
        );

        let wtxids: Vec<Hash256> = t.transactions.iter().map(|e| e.wtxid).collect();
        assert_eq!(t.wtxids, wtxids);
        let expect = witness_commitment(&wtxids, &WITNESS_RESERVED_VALUE);
        assert_eq!(t.witness_commitment, expect);
        assert_eq!(
            t.default_witness_commitment,
            witness_commitment_script(expect)
        );
        // The bitcoin crate agrees on the witness root too.
        let root = block.witness_root().unwrap();
        let mut buf = [0u8; 64];
        buf[..32].copy_from_slice(&Hash256::from(root).0);
        assert_eq!(primitives::sha256d(&buf), expect);
        // Cached ids are the transactions' own.
        for e in &t.transactions {
            assert_eq!(Hash256::from(e.tx.compute_txid()), e.txid);
            assert_eq!(&e.raw[..], &serialize(&e.tx)[..]);
        }
    }
}

/// Templates made while the network runs for `secs` with 5 tx/s arriving.
fn templates_over(
    seed: u64,
    secs_: u64,
    interval: u64,
    fee_delta: u64,
) -> Vec<std::sync::Arc<simnet::Template>> {
    let mut c = config(seed, 500);
    c.template_interval = Duration::from_secs(interval);
    c.fee_delta = fee_delta;
    let mut net = Network::new(c).unwrap();
    templates(&run(&mut net, secs(secs_)))
}

#[test]
fn never_more_often_than_the_interval() {
    // fee_delta 0: every check finds new fees, so templates come exactly at the interval.
    let ts = templates_over(5, 600, 30, 0);
    assert_eq!(ts.len(), 21, "one at the start, then one every 30 s");
    for w in ts.windows(2) {
        assert_eq!(w[1].created_at - w[0].created_at, Duration::from_secs(30));
        assert_eq!(w[1].id, w[0].id + 1);
        assert!(w[1].total_fees > w[0].total_fees);
    }
    let ts = templates_over(5, 600, 7, 0);
    assert!(ts
        .windows(2)
        .all(|w| w[1].created_at - w[0].created_at >= Duration::from_secs(7)));
    assert_eq!(ts.len(), 1 + 600 / 7);
}

#[test]
fn only_when_fees_grow_by_more_than_fee_delta() {
    // No arrival pays a billion sats: one template, ever.
    assert_eq!(templates_over(6, 600, 30, 1_000_000_000).len(), 1);
    // Arrivals bring about 10,000 sats a second: with a delta of 0.01 BTC each new template
    // gained more than that, and they come less often than the interval allows.
    let delta = 1_000_000;
    let ts = templates_over(6, 1_800, 30, delta);
    assert!(ts.len() > 3, "{}", ts.len());
    for w in ts.windows(2) {
        assert!(w[1].total_fees - w[0].total_fees > delta);
        assert!(w[1].created_at - w[0].created_at >= Duration::from_secs(30));
    }
    // Fewer templates than with no delta at all.
    assert!(ts.len() < templates_over(6, 1_800, 30, 0).len());
}

#[test]
fn a_new_tip_always_makes_a_template_at_once() {
    let mut c = config(7, 500);
    c.network_difficulty = easy_difficulty();
    c.template_interval = Duration::from_secs(3_600);
    let mut net = Network::new(c).unwrap();
    run(&mut net, secs(10));
    let before = net.template().clone();
    // Well inside the interval.
    let block = Draft::from_template(&before).mine();
    let at = secs(11);
    net.submit_block(at, &serialize(&block)).unwrap();
    let outs = common::first_node(&mut net, at);
    let ts = templates(&outs);
    assert_eq!(ts.len(), 1);
    assert_eq!(ts[0].created_at, at);
    assert_eq!(ts[0].prev_hash, Hash256::from(block.block_hash()));

    // Network blocks too: each tip change comes with a template at the same instant.
    let mut c = config(8, 500);
    c.block_interval = Duration::from_secs(60);
    c.template_interval = Duration::from_secs(3_600);
    let mut net = Network::new(c).unwrap();
    let outs = run(&mut net, secs(3_000));
    let tips: Vec<_> = outs
        .iter()
        .filter_map(|o| match o {
            Output::TipChanged { at, hash, .. } => Some((*at, *hash)),
            _ => None,
        })
        .collect();
    assert!(tips.len() > 20);
    let ts = templates(&outs);
    assert_eq!(
        ts.len(),
        tips.len() + 1,
        "the first template, then one per tip"
    );
    for (tip, t) in tips.iter().zip(&ts[1..]) {
        assert_eq!((t.created_at, t.prev_hash), *tip);
    }
}

#[test]
fn poll_timeout_covers_a_pending_template_check() {
    let mut c = config(9, 0);
    c.mempool.arrival_rate = 0.0;
    c.fee_delta = 0;
    let mut net = Network::new(c).unwrap();
    // Nothing can happen without arrivals or blocks.
    assert_eq!(net.poll_timeout(), None);
    assert_eq!(
        run(&mut net, secs(100_000)).len(),
        1,
        "just the first template"
    );
}
