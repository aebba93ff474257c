//! The same seed and the same timing give the same network, however the shell polls it.

mod common;

use std::time::Duration;

use common::*;
use primitives::Hash256;
use simnet::{Network, Output, SimnetConfig, Timestamp};

fn config(seed: u64) -> SimnetConfig {
    let mut c = submit_config(seed);
    c.block_interval = Duration::from_secs(120);
    c.mempool.arrival_rate = 3.0;
    c
}

/// Everything observable about a run, in order.
#[derive(Debug, PartialEq)]
struct Trace {
    outputs: Vec<String>,
    mempool: Vec<(Hash256, u64, Timestamp)>,
    chain: Vec<Hash256>,
}

fn trace(net: &Network, outputs: &[Output]) -> Trace {
    Trace {
        outputs: outputs
            .iter()
            .map(|o| match o {
                // Templates by their content, not their allocation.
                Output::TemplateCreated(t) => format!(
                    "template {} {} {} {:?} {} {:?}",
                    t.id, t.created_at, t.prev_hash, t.txids, t.total_fees, t.merkle_branch
                ),
                other => format!("{other:?}"),
            })
            .collect(),
        mempool: net
            .mempool()
            .iter_by_fee_rate()
            .map(|e| (e.txid, e.fee, e.time))
            .collect(),
        chain: (net.chain().base_height()..=net.height())
            .map(|h| net.block_hash(h).unwrap())
            .collect(),
    }
}

/// Runs to `end`, stepping by deadlines or by a fixed step, submitting a block found on the
/// template current at `submit_at`.
fn drive(seed: u64, step: Option<Duration>, submit_at: Timestamp, end: Timestamp) -> Trace {
    let mut net = Network::new(config(seed)).unwrap();
    let mut outputs = Vec::new();
    let mut submitted = false;
    let mut now = Timestamp::ZERO;
    while now < end {
        let next = next_stop(&net, now, step, end);
        if !submitted && next >= submit_at {
            outputs.extend(common::first_node(&mut net, submit_at));
            let block = Draft::from_template(net.template()).mine();
            net.submit_block(submit_at, &raw(&block)).unwrap();
            submitted = true;
        }
        outputs.extend(common::first_node(&mut net, next));
        now = next;
    }
    trace(&net, &outputs)
}

#[test]
fn same_seed_same_network_whatever_the_polling() {
    let submit_at = secs(333);
    let end = secs(1_500);
    let by_deadline = drive(31, None, submit_at, end);
    let by_second = drive(31, Some(Duration::from_secs(1)), submit_at, end);
    let by_odd_step = drive(31, Some(Duration::from_millis(7_777)), submit_at, end);
    assert!(by_deadline.chain.len() > 5, "blocks should happen");
    assert!(by_deadline.mempool.len() > 100);
    assert_eq!(by_deadline, by_second);
    assert_eq!(by_deadline, by_odd_step);
}

#[test]
fn another_seed_another_network() {
    let a = drive(31, None, secs(333), secs(600));
    let b = drive(32, None, secs(333), secs(600));
    assert_ne!(a.mempool, b.mempool);
    assert_ne!(a.chain, b.chain);
}

#[test]
fn submitting_shifts_no_arrival() {
    // With and without a submitted block, the same transactions arrive at the same times:
    // everything ever seen (mempool plus every block's transactions) is the same.
    let seen = |submit: bool| {
        let mut net = Network::new(config(33)).unwrap();
        run(&mut net, secs(200));
        if submit {
            let block = Draft::from_template(net.template()).mine();
            net.submit_block(secs(200), &raw(&block)).unwrap();
        }
        run(&mut net, secs(1_000));
        let mut all: Vec<(Hash256, Timestamp)> = net
            .mempool()
            .iter_by_fee_rate()
            .map(|e| (e.txid, e.time))
            .collect();
        for h in net.chain().base_height()..=net.height() {
            let b = net.block(&net.block_hash(h).unwrap()).unwrap();
            all.extend(b.txs.iter().map(|e| (e.txid, e.time)));
        }
        all.sort();
        all
    };
    let without = seen(false);
    assert!(without.len() > 3_000);
    assert_eq!(without, seen(true));
}
