//! A third-party client that models Bitcoin Core's answers (`corepc-regtest-client`, with Core 28 types from `corepc-types`,
//! built with `serde-deny-unknown-fields` so that an extra member fails as surely as a missing
//! or mistyped one) calls every method against simnet: each answer must deserialize, and
//! convert into the client's model types, which parse hashes, amounts and scripts.

mod rpc_support;

use corepc_regtest_client::v28::{Client, TemplateRequest, TemplateRules};
use corepc_regtest_client::Auth;
use corepc_types::{v28, v29};
use primitives::bitcoin::{Address, BlockHash, Network, Txid};
use rpc_support::*;
use serde_json::json;
use simnet::rpc::{RpcAuth, RpcOptions};

fn client(s: &Server) -> Client {
    Client::new_with_auth(&s.url(), Auth::UserPass(USER.into(), PASSWORD.into())).unwrap()
}

fn address() -> Address {
    ADDRESS
        .parse::<Address<_>>()
        .unwrap()
        .require_network(Network::Regtest)
        .unwrap()
}

#[test]
fn every_method_deserializes_into_cores_types() {
    // No arrivals, so that successive mempool reads agree.
    let mut cfg = config(11);
    cfg.mempool.arrival_rate = 0.0;
    let server = Server::start(cfg);
    let c = client(&server);

    // Network and control.
    let net = c.get_network_info().unwrap();
    assert_eq!(
        (net.version, net.subversion.as_str(), net.protocol_version),
        (280_000, "/Satoshi:28.0.0/", 70_016)
    );
    net.clone().into_model().unwrap();
    c.check_expected_server_version().unwrap();
    c.ping().unwrap();
    assert!(c.uptime().unwrap() < 60);
    assert_eq!(c.get_connection_count().unwrap().0, net.connections as u64);
    let rpc = c.get_rpc_info().unwrap();
    assert_eq!(rpc.active_commands[0].method, "getrpcinfo");
    assert!(c.help().unwrap().contains("getblocktemplate"));

    // Mining info before any block: the template exists already.
    let mi: v28::GetMiningInfo = c.get_mining_info().unwrap();
    assert_eq!((mi.blocks, mi.chain.as_str()), (900_000, "regtest"));
    assert!(mi.pooled_tx >= 300 && mi.current_block_tx.unwrap() > 0);
    assert!(mi.warnings.is_empty());

    // The mempool (before blocks take its transactions), its entries, raw transactions.
    let pool = c.get_raw_mempool().unwrap().into_model().unwrap().0;
    assert!(!pool.is_empty());
    let verbose = c.get_raw_mempool_verbose().unwrap();
    assert_eq!(verbose.0.len(), pool.len());
    verbose.into_model().unwrap();
    let entry = c.get_mempool_entry(pool[0]).unwrap();
    assert!(entry.0.bip125_replaceable);
    entry.into_model().unwrap();
    let mp = c.get_mempool_info().unwrap();
    assert_eq!(mp.size as usize, pool.len());
    mp.into_model().unwrap();
    let raw = c
        .get_raw_transaction(pool[0])
        .unwrap()
        .into_model()
        .unwrap()
        .0;
    assert_eq!(raw.compute_txid(), pool[0]);
    let rv = c.get_raw_transaction_verbose(pool[0]).unwrap();
    assert_eq!((rv.block_hash.as_deref(), rv.confirmations), (None, None));
    rv.into_model().unwrap();

    // Generate a few blocks so that there is history to read.
    let hashes = c
        .generate_to_address(3, &address())
        .unwrap()
        .into_model()
        .unwrap()
        .0;
    assert_eq!(hashes.len(), 3);
    let tip = c.get_best_block_hash().unwrap().into_model().unwrap().0;
    assert_eq!(tip, hashes[2]);
    assert_eq!(c.get_block_count().unwrap().0, 900_003);
    assert_eq!(
        c.get_block_hash(900_002).unwrap().into_model().unwrap().0,
        hashes[1]
    );

    // Chain state: Core 29's shape (Core 28's plus `bits` and `target`).
    let info: v29::GetBlockchainInfo = c.call("getblockchaininfo", &[]).unwrap();
    assert_eq!(
        (info.chain.as_str(), info.blocks, info.headers),
        ("regtest", 900_003, 900_003)
    );
    assert_eq!(info.best_block_hash, tip.to_string());
    assert_eq!(info.chain_work.len(), 64);
    assert!(!info.initial_block_download && info.verification_progress == 1.0 && !info.pruned);
    // The check is strict: Core 28's type, without those two members, refuses the answer.
    let strict: Result<v28::GetBlockchainInfo, _> = c.call("getblockchaininfo", &[]);
    assert!(strict.is_err(), "serde-deny-unknown-fields is in force");
    let model = info.clone().into_model().unwrap();
    assert_eq!(model.best_block_hash, tip);
    assert!((c.get_difficulty().unwrap().0 - easy().as_f64()).abs() < 1e-12);

    // Blocks and headers, in every form.
    let block = c.get_block(tip).unwrap();
    assert_eq!(block.block_hash(), tip);
    assert_eq!(
        c.get_block_verbose_zero(tip)
            .unwrap()
            .into_model()
            .unwrap()
            .0,
        block
    );
    let one = c.get_block_verbose_one(tip).unwrap();
    assert_eq!(
        (one.height, one.confirmations, one.n_tx as usize),
        (900_003, 1, block.txdata.len())
    );
    assert_eq!(
        one.previous_block_hash.as_deref(),
        Some(hashes[1].to_string().as_str())
    );
    assert_eq!(one.next_block_hash, None);
    one.into_model().unwrap();
    // Verbosity 2: transactions as objects, each with its fee but the coinbase; without the
    // fee each is what `getrawtransaction` describes.
    let two: serde_json::Value = c
        .call("getblock", &[json!(tip.to_string()), json!(2)])
        .unwrap();
    let txs = two["tx"].as_array().unwrap();
    assert_eq!(txs.len(), block.txdata.len());
    assert!(txs[0]["vin"][0]["coinbase"].is_string() && txs[0].get("fee").is_none());
    for (i, tx) in txs.iter().enumerate() {
        let mut tx = tx.clone();
        let fee = tx.as_object_mut().unwrap().remove("fee");
        assert_eq!(fee.is_some(), i > 0);
        let typed: v28::GetRawTransactionVerbose = serde_json::from_value(tx).unwrap();
        assert_eq!(typed.into_model().unwrap().transaction, block.txdata[i]);
    }
    let header = c
        .get_block_header(&hashes[1])
        .unwrap()
        .into_model()
        .unwrap()
        .0;
    assert_eq!(header.block_hash(), hashes[1]);
    let hv = c.get_block_header_verbose(&hashes[1]).unwrap();
    assert_eq!(
        (hv.confirmations, hv.next_block_hash.as_deref()),
        (2, Some(tip.to_string().as_str()))
    );
    hv.into_model().unwrap();

    // The template, as the client asks for it and as a model.
    let gbt = c
        .get_block_template(&TemplateRequest {
            rules: vec![TemplateRules::Segwit],
        })
        .unwrap();
    assert_eq!(gbt.height, 900_004);
    assert_eq!(gbt.previous_block_hash, tip.to_string());
    assert!(gbt.default_witness_commitment.is_some());
    let tx_count = gbt.transactions.len();
    let gbt_model = gbt.into_model().unwrap();
    assert_eq!(gbt_model.transactions.len(), tx_count);

    // The coinbase and a transaction of a generated block, with their block.
    for tx in [&block.txdata[0], block.txdata.last().unwrap()] {
        let rv = c.get_raw_transaction_verbose(tx.compute_txid()).unwrap();
        assert_eq!(rv.block_hash.as_deref(), Some(tip.to_string().as_str()));
        assert_eq!(rv.confirmations, Some(1));
        assert_eq!(rv.clone().into_model().unwrap().transaction, *tx);
    }

    // Utilities.
    let va = c.validate_address(&address()).unwrap();
    assert!(va.is_valid && va.is_witness && !va.is_script);
    assert_eq!(va.witness_version, Some(0));
    va.into_model().unwrap();
    let hps = c.get_network_hash_ps().unwrap();
    assert!(hps >= 0.0);

    // A block from the template, submitted through the client.
    let gbt_json = server.call("getblocktemplate", gbt_request()).unwrap();
    let b = Draft::from_gbt(&gbt_json).mine();
    c.submit_block(&b).unwrap();
    assert_eq!(
        c.get_best_block_hash().unwrap().into_model().unwrap().0,
        b.block_hash()
    );
    // A second submission is refused with Core's word for it.
    match c.submit_block(&b) {
        Err(corepc_regtest_client::Error::Returned(r)) => assert_eq!(r, "\"duplicate\""),
        other => panic!("{other:?}"),
    }
}

#[test]
fn errors_come_back_with_cores_codes() {
    let server = Server::start(config(12));
    let c = client(&server);
    let code = |e: corepc_regtest_client::Error| match e {
        corepc_regtest_client::Error::JsonRpc(jsonrpc::error::Error::Rpc(r)) => (r.code, r.message),
        e => panic!("{e:?}"),
    };
    let (c1, m1) = code(c.get_block_hash(5_000_000).unwrap_err());
    assert_eq!((c1, m1.as_str()), (-8, "Block height out of range"));
    let (c2, m2) = code(
        c.get_block(BlockHash::from_byte_array_helper([7; 32]))
            .unwrap_err(),
    );
    assert_eq!((c2, m2.as_str()), (-5, "Block not found"));
    let (c3, m3) = code(
        c.get_mempool_entry(Txid::from_byte_array_helper([9; 32]))
            .unwrap_err(),
    );
    assert_eq!((c3, m3.as_str()), (-5, "Transaction not in mempool"));
    let (c4, m4) = code(
        c.get_raw_transaction(Txid::from_byte_array_helper([9; 32]))
            .unwrap_err(),
    );
    assert_eq!(c4, -5);
    assert!(
        m4.starts_with("No such mempool or blockchain transaction"),
        "{m4}"
    );
    let e: Result<serde_json::Value, _> =
        c.call("generatetoaddress", &[json!(1), json!("not an address")]);
    assert_eq!(
        code(e.unwrap_err()),
        (-5, "Error: Invalid address".to_owned())
    );
    // A mainnet address is not a regtest address.
    let e: Result<serde_json::Value, _> = c.call(
        "generatetoaddress",
        &[
            json!(1),
            json!("bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"),
        ],
    );
    assert_eq!(code(e.unwrap_err()).0, -5);
    // An address that is not regtest's is answered, not refused.
    let v: serde_json::Value = c
        .call(
            "validateaddress",
            &[json!("bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4")],
        )
        .unwrap();
    assert_eq!(v["isvalid"], false);
    assert_eq!(v["error_locations"], json!([]));
    assert!(v["error"].is_string());
    let e: Result<serde_json::Value, _> = c.call("nosuchmethod", &[]);
    assert_eq!(
        code(e.unwrap_err()),
        (-32601, "Method not found".to_owned())
    );
}

#[test]
fn cookie_authentication_works_through_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let auth = RpcAuth::cookie(dir.path()).unwrap();
    let cookie = dir.path().join("regtest/.cookie");
    let text = std::fs::read_to_string(&cookie).unwrap();
    assert!(text.starts_with("__cookie__:") && text.len() == "__cookie__:".len() + 64);
    let server = Server::start_with(config(13), auth, RpcOptions::default());
    let c = Client::new_with_auth(&server.url(), Auth::CookieFile(cookie.clone())).unwrap();
    assert_eq!(c.get_block_count().unwrap().0, 900_000);
    // The cookie at the data directory's top works too; wrong credentials do not.
    let c2 =
        Client::new_with_auth(&server.url(), Auth::CookieFile(dir.path().join(".cookie"))).unwrap();
    assert_eq!(c2.get_block_count().unwrap().0, 900_000);
    let bad = Client::new_with_auth(
        &server.url(),
        Auth::UserPass("__cookie__".into(), "0".repeat(64)),
    )
    .unwrap();
    assert!(bad.get_block_count().is_err());
    // Core deletes the cookie when it stops.
    server.stop().unwrap();
    assert!(!cookie.exists() && !dir.path().join(".cookie").exists());
}

/// `from_byte_array` without importing the hashes trait at every call.
trait FromBytes {
    fn from_byte_array_helper(b: [u8; 32]) -> Self;
}

impl FromBytes for BlockHash {
    fn from_byte_array_helper(b: [u8; 32]) -> Self {
        use primitives::bitcoin::hashes::Hash;
        BlockHash::from_byte_array(b)
    }
}

impl FromBytes for Txid {
    fn from_byte_array_helper(b: [u8; 32]) -> Self {
        use primitives::bitcoin::hashes::Hash;
        Txid::from_byte_array(b)
    }
}
