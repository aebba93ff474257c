//! The methods third-party pool software asks a node for besides the mining ones
//! (`decoderawtransaction`, `preciousblock`, `getpeerinfo`, `estimatesmartfee`,
//! `getzmqnotifications`, `getrawmempool` with the mempool sequence) and the synthetic history
//! below the start height, over a real server: every answer deserializes into Core 28's types
//! from `corepc-types` (built with `serde-deny-unknown-fields`, so an extra member fails as
//! surely as a missing one), and the errors carry Core's codes and messages.

mod rpc_support;

use std::time::Duration;

use corepc_types::v28;
use primitives::bitcoin::consensus::{deserialize, serialize};
use primitives::bitcoin::{Block, Transaction};
use rpc_support::*;
use serde_json::{json, Value};
use simnet::zmq::{Publisher, Topic, ZmqConfig};

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v:#}"))
}

fn err(r: Result<Value, Value>) -> (i64, String) {
    let e = r.expect_err("an error");
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn decoderawtransaction_answers_cores_shape_and_error() {
    let mut cfg = config(21);
    cfg.mempool.arrival_rate = 0.0;
    let server = Server::start(cfg);

    // A mempool transaction (segwit) decodes as getrawtransaction describes it, without hex.
    let txid = server.call("getrawmempool", json!([])).unwrap()[0].clone();
    let hex = server.call("getrawtransaction", json!([txid])).unwrap();
    let decoded = server
        .call("decoderawtransaction", json!([hex.clone()]))
        .unwrap();
    assert!(decoded.get("hex").is_none() && decoded.get("fee").is_none());
    let verbose = server.call("getrawtransaction", json!([txid, 1])).unwrap();
    let mut without_hex = verbose.as_object().unwrap().clone();
    without_hex.remove("hex");
    assert_eq!(Value::Object(without_hex), decoded);
    let d: v28::DecodeRawTransaction = typed(decoded);
    let tx = d.0.to_transaction().unwrap();
    assert_eq!(tx.compute_txid().to_string(), txid.as_str().unwrap());
    assert_eq!(
        server
            .call("decoderawtransaction", json!([hex.clone(), true]))
            .unwrap()["txid"],
        txid
    );

    // A coinbase as ckpool builds one from a template: the coinbase input shape.
    let gbt = server.call("getblocktemplate", gbt_request()).unwrap();
    let coinbase = Draft::from_gbt(&gbt).coinbase();
    let cb_hex = primitives::hex::encode(&serialize(&coinbase));
    let decoded = server
        .call("decoderawtransaction", json!([cb_hex]))
        .unwrap();
    assert!(decoded["vin"][0]["coinbase"].is_string());
    assert_eq!(decoded["vout"][0]["scriptPubKey"]["address"], ADDRESS);
    let d: v28::DecodeRawTransaction = typed(decoded);
    assert_eq!(d.0.to_transaction().unwrap(), coinbase);

    // Core's error for anything that is not one whole transaction.
    for bad in [
        json!(["zz"]),
        json!(["00"]),
        json!([format!("{cb_hex}00")]),
        json!([&cb_hex[..cb_hex.len() - 2]]),
        // Asked for the legacy serialization of a transaction with witnesses.
        json!([hex, false]),
    ] {
        assert_eq!(
            err(server.call("decoderawtransaction", bad.clone())),
            (-22, "TX decode failed".to_owned()),
            "{bad}"
        );
    }
    assert_eq!(err(server.call("decoderawtransaction", json!([1]))).0, -3);
    assert_eq!(err(server.call("decoderawtransaction", json!([]))).0, -1);
}

#[test]
fn preciousblock_peers_fees_and_mempool_sequence() {
    let mut cfg = config(22);
    cfg.mempool.arrival_rate = 0.0;
    let server = Server::start(cfg);

    // preciousblock: null for a known block (history included), -5 for an unknown one.
    let tip = server.call("getbestblockhash", json!([])).unwrap();
    assert_eq!(server.call("preciousblock", json!([tip])), Ok(Value::Null));
    let height = server.call("getblockcount", json!([])).unwrap();
    let old = server
        .call("getblockhash", json!([height.as_u64().unwrap() - 10]))
        .unwrap();
    assert_eq!(server.call("preciousblock", json!([old])), Ok(Value::Null));
    assert_eq!(
        err(server.call("preciousblock", json!(["11".repeat(32)]))),
        (-5, "Block not found".to_owned())
    );
    assert_eq!(
        err(server.call("preciousblock", json!(["11"]))),
        (
            -8,
            "blockhash must be of length 64 (not 2, for '11')".to_owned()
        )
    );

    // getpeerinfo: as many peers as getconnectioncount says, synced to the tip.
    let peers = server.call("getpeerinfo", json!([])).unwrap();
    let connections = server.call("getconnectioncount", json!([])).unwrap();
    assert_eq!(
        peers.as_array().unwrap().len() as u64,
        connections.as_u64().unwrap()
    );
    let p: v28::GetPeerInfo = typed(peers);
    for peer in &p.0 {
        assert_eq!(peer.synced_blocks, Some(height.as_i64().unwrap()));
        assert!(!peer.inbound && peer.subversion.starts_with("/Satoshi:"));
        assert!(peer.address.parse::<std::net::SocketAddr>().is_ok());
    }

    // estimatesmartfee: BTC/kvB, never below the relay fee, lower (or equal) for later blocks.
    let fast: v28::EstimateSmartFee = typed(server.call("estimatesmartfee", json!([1])).unwrap());
    assert_eq!(fast.blocks, 2, "Core answers for two blocks at least");
    let slow: v28::EstimateSmartFee = typed(
        server
            .call("estimatesmartfee", json!([144, "conservative"]))
            .unwrap(),
    );
    assert_eq!(slow.blocks, 144);
    let (fast, slow) = (fast.fee_rate.unwrap(), slow.fee_rate.unwrap());
    assert!(fast >= slow && slow >= 0.00001, "{fast} {slow}");
    let named = server
        .call(
            "estimatesmartfee",
            json!({"conf_target": 6, "estimate_mode": "ECONOMICAL"}),
        )
        .unwrap();
    assert_eq!(named["blocks"], 6);
    assert_eq!(
        err(server.call("estimatesmartfee", json!([0]))),
        (
            -8,
            "Invalid conf_target, must be between 1 and 1008".to_owned()
        )
    );
    assert_eq!(err(server.call("estimatesmartfee", json!([1009]))).0, -8);
    assert_eq!(
        err(server.call("estimatesmartfee", json!([2, "fast"]))),
        (
            -8,
            r#"Invalid estimate_mode parameter, must be one of: "unset", "economical", "conservative""#
                .to_owned()
        )
    );

    // getrawmempool with the mempool sequence: every entry took one (Core starts at 1).
    let seq: v28::GetRawMempoolSequence =
        typed(server.call("getrawmempool", json!([false, true])).unwrap());
    assert!(!seq.txids.is_empty());
    assert_eq!(seq.mempool_sequence, seq.txids.len() as u64 + 1);
    assert_eq!(err(server.call("getrawmempool", json!([true, true]))).0, -8);
    // A block takes transactions out: each removal moves the sequence on.
    server
        .call("generatetoaddress", json!([1, ADDRESS]))
        .unwrap();
    let after: v28::GetRawMempoolSequence =
        typed(server.call("getrawmempool", json!([false, true])).unwrap());
    assert_eq!(
        after.mempool_sequence,
        seq.mempool_sequence + (seq.txids.len() - after.txids.len()) as u64
    );
}

#[test]
fn getzmqnotifications_lists_what_the_publishers_serve() {
    let server = Server::start(config(23));
    assert_eq!(server.call("getzmqnotifications", json!([])), Ok(json!([])));

    // Two publishers for this node, as `-zmqpub<topic>=ADDR` with two addresses.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut addrs = Vec::new();
    for topics in [Topic::ALL.to_vec(), vec![Topic::HashBlock]] {
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        addrs.push(format!("tcp://{}", listener.local_addr().unwrap()));
        let config = ZmqConfig {
            topics,
            high_water_mark: 500,
            ..ZmqConfig::default()
        };
        let publisher = Publisher::new(server.node.clone(), config);
        let mut stop = stop_rx.clone();
        rt.spawn(publisher.serve(listener, async move {
            let _ = stop.wait_for(|s| *s).await;
        }));
    }
    let listed = wait_for(|| {
        let v = server.call("getzmqnotifications", json!([])).unwrap();
        (v.as_array().unwrap().len() == 6).then_some(v)
    });
    let typed_list: Vec<v28::GetZmqNotifications> = typed(listed.clone());
    let got: Vec<(String, String, u64)> = typed_list
        .into_iter()
        .map(|n| (n.type_, n.address, n.hwm))
        .collect();
    let want = vec![
        ("pubhashblock", &addrs[0]),
        ("pubhashblock", &addrs[1]),
        ("pubhashtx", &addrs[0]),
        ("pubrawblock", &addrs[0]),
        ("pubrawtx", &addrs[0]),
        ("pubsequence", &addrs[0]),
    ];
    let want: Vec<(String, String, u64)> = want
        .into_iter()
        .map(|(t, a)| (t.to_owned(), a.clone(), 500))
        .collect();
    // The two publishers register in either order: compare as sets within a topic.
    let mut got_sorted = got.clone();
    got_sorted.sort();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(got_sorted, want_sorted);
    let kinds: Vec<&str> = got.iter().map(|(k, _, _)| k.as_str()).collect();
    assert!(
        kinds.windows(2).all(|w| w[0] <= w[1]),
        "grouped by topic: {kinds:?}"
    );

    // A publisher that stops is no longer listed.
    stop_tx.send(true).unwrap();
    wait_for(|| {
        let v = server.call("getzmqnotifications", json!([])).unwrap();
        (v == json!([])).then_some(())
    });
}

fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn history_below_the_start_height_links_by_hash() {
    let server = Server::start(config(24));
    let info = server.call("getblockchaininfo", json!([])).unwrap();
    let (tip_height, tip) = (
        info["blocks"].as_u64().unwrap(),
        info["bestblockhash"].as_str().unwrap().to_owned(),
    );
    // A synced node: goPool refuses work otherwise.
    assert_eq!(info["headers"], info["blocks"]);
    assert_eq!(info["initialblockdownload"], false);
    assert_eq!(info["verificationprogress"], 1.0);
    let bits = info["bits"].as_str().unwrap().to_owned();

    // Walk back from the tip by previousblockhash for 500 blocks, well below the start.
    let mut hash = tip;
    let mut child: Option<v28::GetBlockHeaderVerbose> = None;
    for depth in 0..500u64 {
        let h: v28::GetBlockHeaderVerbose =
            typed(server.call("getblockheader", json!([hash, true])).unwrap());
        assert_eq!(h.hash, hash);
        assert_eq!(h.height as u64, tip_height - depth);
        assert_eq!(h.confirmations as u64, depth + 1);
        assert_eq!(h.bits, bits);
        assert!(h.median_time <= h.time);
        // getblockhash agrees with the header's height.
        let by_height = server.call("getblockhash", json!([h.height])).unwrap();
        assert_eq!(by_height.as_str().unwrap(), hash);
        // The raw header hashes to its hash and names its parent.
        let raw = server.call("getblockheader", json!([hash, false])).unwrap();
        let header: primitives::bitcoin::block::Header =
            deserialize(&primitives::hex::decode(raw.as_str().unwrap()).unwrap()).unwrap();
        assert_eq!(header.block_hash().to_string(), hash);
        if let Some(c) = &child {
            assert_eq!(c.previous_block_hash.as_deref(), Some(hash.as_str()));
            assert_eq!(h.next_block_hash.as_deref(), Some(c.hash.as_str()));
            assert!(
                c.time > h.time,
                "times increase: {} then {}",
                h.time,
                c.time
            );
            assert!(c.time - h.time < 1200, "about ten minutes apart");
            assert!(c.chain_work > h.chain_work, "chainwork grows");
        }
        hash = h.previous_block_hash.clone().expect("a parent");
        child = Some(h);
    }

    // A block below the start height, at both verbosities; its coinbase is findable.
    let height = tip_height - 300;
    let hash = server.call("getblockhash", json!([height])).unwrap();
    let hex = server.call("getblock", json!([hash, 0])).unwrap();
    let block: Block =
        deserialize(&primitives::hex::decode(hex.as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(block.block_hash().to_string(), hash.as_str().unwrap());
    assert!(block.check_merkle_root());
    assert_eq!(block.bip34_block_height().unwrap(), height);
    let one: v28::GetBlockVerboseOne = typed(server.call("getblock", json!([hash, 1])).unwrap());
    assert_eq!(one.tx.len(), 1);
    let cb: Transaction = block.txdata[0].clone();
    let found = server
        .call(
            "getrawtransaction",
            json!([cb.compute_txid().to_string(), 0, hash]),
        )
        .unwrap();
    assert_eq!(
        found.as_str().unwrap(),
        primitives::hex::encode(&serialize(&cb))
    );
    // getnetworkhashps looks back over history too: 120 blocks about ten minutes apart.
    let hps = server.call("getnetworkhashps", json!([120])).unwrap();
    assert!(hps.as_f64().unwrap() > 0.0);

    // Far below the history: out of range, as below genesis.
    assert_eq!(
        err(server.call("getblockhash", json!([1]))),
        (-8, "Block height out of range".to_owned())
    );
}
