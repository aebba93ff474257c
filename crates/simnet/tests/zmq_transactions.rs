//! The ZMQ transaction topics (`hashtx`, `rawtx`, `sequence`) as bitcoind publishes them,
//! seen by a `zeromq` SUB socket over 127.0.0.1: a transaction entering the mempool, then a
//! block connect, each with the right bodies, order and per-topic sequence numbers.

#[path = "common/mod.rs"]
mod common;

mod zmq_support;

use std::time::Duration;
use zmq_support::{display, recv, seq, WAIT};

use events::EventSink;
use primitives::bitcoin::consensus::deserialize;
use primitives::bitcoin::Transaction;
use primitives::Hash256;
use simnet::zmq::{Publisher, ZmqConfig};
use simnet::{MempoolConfig, Network, Node, SimnetConfig};
use tokio::net::TcpListener;
use zeromq::{Socket, SubSocket};

/// Checks that each topic's sequence numbers go up by one from the first one seen.
#[derive(Default)]
struct Sequences(std::collections::HashMap<Vec<u8>, u32>);

impl Sequences {
    fn check(&mut self, m: &[Vec<u8>]) {
        let s = seq(&m[2]);
        if let Some(last) = self.0.insert(m[0].clone(), s) {
            assert_eq!(
                s,
                last + 1,
                "{} numbers follow on",
                String::from_utf8_lossy(&m[0])
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mempool_entries_and_block_connects_on_the_transaction_topics() {
    let config = SimnetConfig {
        seed: 31,
        network_difficulty: common::easy_difficulty(),
        // Tips change only when the test mines; transactions arrive about every 50 ms.
        block_interval: Duration::ZERO,
        mempool: MempoolConfig {
            initial_txs: 20,
            arrival_rate: 20.0,
            ..MempoolConfig::default()
        },
        ..SimnetConfig::default()
    };
    let node = Node::new(
        Network::new(config).unwrap(),
        "zmq-tx",
        EventSink::disabled(),
    );
    let clock = tokio::spawn({
        let node = node.clone();
        async move { node.run_clock(std::future::pending()).await }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let publisher = Publisher::new(node.clone(), ZmqConfig::default());
    let stats = publisher.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(publisher.serve(listener, async {
        let _ = stopped.await;
    }));

    let mut s = SubSocket::new();
    s.connect(&format!("tcp://{addr}")).await.unwrap();
    for t in ["hashtx", "rawtx", "sequence"] {
        s.subscribe(t).await.unwrap();
    }
    let t0 = std::time::Instant::now();
    while ["hashtx", "rawtx", "sequence"]
        .iter()
        .any(|t| stats.subscribers(t.as_bytes()) == 0)
    {
        assert!(t0.elapsed() < WAIT, "subscriptions never registered");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }

    // A transaction enters the mempool: hashtx, rawtx, then sequence A, in that order. The
    // first message may be any of the three (a transaction may have been half published when
    // the subscriptions registered): skip to the next hashtx.
    let mut seqs = Sequences::default();
    let mut m = recv(&mut s).await;
    while m[0] != b"hashtx" {
        m = recv(&mut s).await;
    }
    let mut mempool_seqs = Vec::new();
    for _ in 0..3 {
        assert_eq!(m[0], b"hashtx");
        seqs.check(&m);
        let txid = m[1].clone();
        assert_eq!(txid.len(), 32);
        let raw = recv(&mut s).await;
        assert_eq!(raw[0], b"rawtx");
        seqs.check(&raw);
        let tx: Transaction = deserialize(&raw[1]).expect("rawtx is a serialized transaction");
        assert_eq!(
            display(tx.compute_txid().into()),
            txid,
            "display byte order"
        );
        let sq = recv(&mut s).await;
        assert_eq!(sq[0], b"sequence");
        seqs.check(&sq);
        assert_eq!(sq[1].len(), 32 + 1 + 8);
        assert_eq!(&sq[1][..32], &txid[..]);
        assert_eq!(sq[1][32], b'A');
        let mempool_seq = u64::from_le_bytes(sq[1][33..].try_into().unwrap());
        mempool_seqs.push(mempool_seq);
        // The transaction is in the node's mempool.
        let mut internal = txid.clone();
        internal.reverse();
        let id = Hash256(internal.try_into().unwrap());
        assert!(node.read(|n| n.mempool_entry(&id).is_some()));
        m = recv(&mut s).await;
    }
    assert!(
        mempool_seqs.windows(2).all(|w| w[1] > w[0]),
        "mempool sequence grows: {mempool_seqs:?}"
    );

    // A block connects: its transactions (coinbase first) on hashtx and rawtx, then C. New
    // arrivals may interleave before the block's messages: skip them.
    let hash = node.mine(1, &[0x51])[0];
    let (coinbase, txids) = node.read(|n| {
        let b = n.block(&hash).unwrap();
        (b.coinbase.clone(), b.txids())
    });
    assert!(txids.len() > 1, "the block took mempool transactions");
    let first_txid = display(txids[0]);
    loop {
        seqs.check(&m);
        if m[0] == b"hashtx" && m[1] == first_txid {
            break;
        }
        m = recv(&mut s).await;
    }
    for (i, txid) in txids.iter().enumerate() {
        if i > 0 {
            m = recv(&mut s).await;
            seqs.check(&m);
        }
        assert_eq!(
            (&m[0][..], &m[1]),
            (&b"hashtx"[..], &display(*txid)),
            "tx {i}"
        );
        let raw = recv(&mut s).await;
        seqs.check(&raw);
        assert_eq!(raw[0], b"rawtx");
        let tx: Transaction = deserialize(&raw[1]).unwrap();
        assert_eq!(Hash256::from(tx.compute_txid()), *txid);
        if i == 0 {
            assert_eq!(tx, coinbase);
        }
    }
    let c = recv(&mut s).await;
    seqs.check(&c);
    assert_eq!(c[0], b"sequence");
    let mut want = display(hash);
    want.push(b'C');
    assert_eq!(c[1], want, "<blockhash>C, no mempool sequence");

    let _ = stop.send(());
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
    clock.abort();
}
