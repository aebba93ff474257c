//! The Template Provider end to end over TCP, with a client built from the SV2 reference
//! crates: handshake, setup, templates, transaction data, a solved block, new tips.

mod tdp_support;

use std::time::Duration;

use simnet::tdp::TdpConfig;
use simnet::{MempoolConfig, SimnetConfig};
use tdp_support::*;

#[tokio::test]
async fn a_pool_gets_templates_solves_one_and_the_tip_moves() {
    let (server, mut c) = Server::with_client(11).await;

    let ok = c.setup().await;
    assert_eq!((ok.used_version, ok.flags), (2, 0));
    c.constraints(60, 4).await;
    let (t, p) = c.future_pair().await;

    // The template is the node's current one, told in the spec's fields.
    let node_template = server.node.templates().borrow().clone();
    assert_eq!(t.template_id, node_template.id);
    assert_eq!(t.version, node_template.version);
    assert_eq!(t.coinbase_tx_version, 2);
    assert_eq!(
        t.coinbase_prefix.as_bytes(),
        primitives::coinbase::bip34_height_push(node_template.height)
    );
    assert_eq!(t.coinbase_tx_input_sequence, u32::MAX);
    assert_eq!(t.coinbase_tx_value_remaining, node_template.coinbase_value);
    assert_eq!(t.coinbase_tx_outputs_count, 1);
    assert_eq!(t.coinbase_tx_locktime, 0);
    assert!(node_template.tx_count() > 0);
    assert_eq!(t.merkle_path.len(), node_template.merkle_branch.len());
    assert_eq!(
        p.prev_hash.as_bytes(),
        &server.node.read(|n| n.tip().hash.0)
    );
    assert_eq!(p.n_bits, node_template.bits.to_consensus());
    assert_eq!(p.header_timestamp, node_template.curtime);
    assert_eq!(p.target.to_array(), node_template.target.to_le_bytes());

    // Transaction data matches the template's merkle path and witness commitment.
    let (txs, excess) = c.transaction_data(t.template_id).await.unwrap();
    assert_eq!(txs.len(), node_template.tx_count());
    check_transaction_data(&t, &txs, &excess);
    assert_eq!(
        c.transaction_data(t.template_id + 1_000).await.unwrap_err(),
        "template-id-not-found"
    );

    // Solve it as a pool would and submit.
    let height = server.node.read(|n| n.height());
    let solved = solve(&t, &p, &[7; 8]);
    c.submit(&solved).await;

    // The tip moves to our block, and the new tip comes as a future template + prev hash.
    let (t2, p2) = c.future_pair().await;
    assert_eq!(p2.prev_hash.to_array(), solved.hash().0);
    assert!(t2.template_id > t.template_id);
    assert_eq!(server.node.read(|n| n.tip().hash), solved.hash());
    assert_eq!(server.node.read(|n| n.height()), height + 1);
    assert_eq!(server.node.stats().submitted_blocks, 1);
    assert_eq!(server.node.stats().rejected_blocks, 0);

    // The old template is stale now.
    assert_eq!(
        c.transaction_data(t.template_id).await.unwrap_err(),
        "stale-template-id"
    );
    server.stop().await;
}

/// A second solution that arrives while the first is being validated must not hide the tip the
/// first one made: the client still gets the new tip's template and prev hash. The server's
/// loop sees the second message and the new template at once, in either order, so each round
/// would catch a lost tip half the time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_solution_racing_the_new_tip_does_not_hide_it() {
    let (server, mut c) = Server::with_client(16).await;
    let (mut t, mut p) = c.start(60).await;
    for round in 0..8u8 {
        let first = solve(&t, &p, &[round, 1, 0, 0, 0, 0, 0, 0]);
        let second = solve(&t, &p, &[round, 2, 0, 0, 0, 0, 0, 0]);
        c.submit(&first).await;
        c.submit(&second).await;
        let (t2, p2) = tokio::time::timeout(Duration::from_secs(5), c.future_pair())
            .await
            .unwrap_or_else(|_| panic!("round {round}: no template for the new tip"));
        assert_eq!(p2.prev_hash.to_array(), first.hash().0, "round {round}");
        (t, p) = (t2, p2);
    }
    // Each round's first solution made a tip; the second lost the race to it.
    assert_eq!(server.node.stats().submitted_blocks, 8);
    server.stop().await;
}

#[tokio::test]
async fn a_network_block_brings_a_future_template_and_prev_hash() {
    let (server, mut c) = Server::with_client(12).await;
    let (t, _) = c.start(60).await;
    let hashes = server.node.mine(1, &[0x51]);
    let (t2, p2) = c.future_pair().await;
    assert_eq!(p2.prev_hash.to_array(), hashes[0].0);
    assert!(t2.template_id > t.template_id);
    // The network block took the template's transactions: a fresh, near-empty template.
    let (txs, excess) = c.transaction_data(t2.template_id).await.unwrap();
    check_transaction_data(&t2, &txs, &excess);

    // Two blocks in a row: each tip gets its pair, in order.
    let hashes = server.node.mine(2, &[0x51]);
    let (_, pa) = c.future_pair().await;
    if pa.prev_hash.to_array() != hashes[1].0 {
        // The watch may coalesce the intermediate tip; if not, the next pair is the last tip.
        assert_eq!(pa.prev_hash.to_array(), hashes[0].0);
        let (_, pb) = c.future_pair().await;
        assert_eq!(pb.prev_hash.to_array(), hashes[1].0);
    }
    server.stop().await;
}

#[tokio::test]
async fn fee_driven_templates_on_the_same_tip_are_for_immediate_work() {
    let net = SimnetConfig {
        template_interval: Duration::from_millis(100),
        fee_delta: 1,
        mempool: MempoolConfig {
            initial_txs: 50,
            arrival_rate: 200.0,
            ..Default::default()
        },
        ..quiet_config(13)
    };
    let server = Server::start(net, TdpConfig::default()).await;
    let mut c = Client::connect_reference(server.addr).await;
    let (t, p) = c.start(60).await;
    let t2 = c.new_template().await;
    assert!(!t2.future_template, "same tip: work on it at once");
    assert!(t2.template_id > t.template_id);
    assert!(t2.coinbase_tx_value_remaining > t.coinbase_tx_value_remaining);
    // A solution on the non-future template uses the prev hash already given.
    let (txs, excess) = c.transaction_data(t2.template_id).await.unwrap();
    check_transaction_data(&t2, &txs, &excess);
    let solved = solve(&t2, &p, &[9; 8]);
    c.submit(&solved).await;
    // Fee templates may still arrive before the new tip's pair: skip them.
    let p2 = loop {
        let nt = c.new_template().await;
        if nt.future_template {
            let p2 = c.set_new_prev_hash().await;
            assert_eq!(p2.template_id, nt.template_id);
            break p2;
        }
    };
    assert_eq!(p2.prev_hash.to_array(), solved.hash().0);
    server.stop().await;
}

#[tokio::test]
async fn large_coinbase_constraints_get_a_smaller_block_that_still_validates() {
    let server = Server::start(quiet_config(14), TdpConfig::default()).await;
    let node_template = server.node.templates().borrow().clone();
    let mut c = Client::connect_reference(server.addr).await;
    // Ask for room that leaves only part of the node's transactions.
    let size = ((4_000_000 - node_template.tx_weight / 3) / 4) as u32;
    let (t, p) = c.start(size).await;
    let (txs, excess) = c.transaction_data(t.template_id).await.unwrap();
    assert!(txs.len() < node_template.tx_count());
    assert!(t.coinbase_tx_value_remaining < node_template.coinbase_value);
    check_transaction_data(&t, &txs, &excess);
    let solved = solve(&t, &p, &[1; 8]);
    c.submit(&solved).await;
    let (_, p2) = c.future_pair().await;
    assert_eq!(p2.prev_hash.to_array(), solved.hash().0);
    assert_eq!(server.node.stats().rejected_blocks, 0);
    server.stop().await;
}

#[tokio::test]
async fn many_clients_each_get_their_own_sequence() {
    let server = Server::start(quiet_config(15), TdpConfig::default()).await;
    let mut clients = Vec::new();
    for _ in 0..5 {
        let mut c = Client::connect_reference(server.addr).await;
        c.start(60).await;
        clients.push(c);
    }
    let hashes = server.node.mine(1, &[0x51]);
    for c in &mut clients {
        let (_, p) = c.future_pair().await;
        assert_eq!(p.prev_hash.to_array(), hashes[0].0);
    }
    server.stop().await;
}
