//! `stratumlab jds` end to end: simnet as the pool-side node, the JDS over TCP and Noise, and a
//! JD client written here with crates/sv2 that declares a job on simnet's own mempool
//! transactions and pushes a block found on it; the block must become simnet's tip.

mod support;

use std::time::{Duration, Instant};

use jds::fuzz_support::{declare_mining_job, jdc_coinbase, split_coinbase};
use pool::jd_token::{OutputsDigest, TokenKey, TokenKind};
use pool::node::{NodeAuth, NodeClient, NodeConfig};
use primitives::bitcoin::block::{Header, Version as BlockVersion};
use primitives::bitcoin::consensus;
use primitives::bitcoin::hashes::Hash;
use primitives::bitcoin::{
    Block, BlockHash, CompactTarget, Network, Transaction, TxMerkleNode, TxOut,
};
use primitives::coinbase::payout_script;
use primitives::Hash256;
use serde_json::json;
use support::{jds_args, strs, Role, PAYOUT};
use sv2::messages::common::{self, job_declaration_flags, SetupConnection};
use sv2::messages::job_declaration::*;
use sv2::messages::{Common, JobDeclaration};
use sv2::{Limits, Message, NoiseConn};

const KEY_HEX: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
const EXTRANONCE: usize = 8;

/// simnet as the pool-side node: its RPC address, blocks easy to find, a mempool that fills at
/// 50 transactions a second.
fn simnet() -> (Role, String) {
    let (s, at) = support::simnet()
        .rpc()
        .arg("--network-difficulty", "0.00001")
        .arg("--tx-rate", "50")
        .start();
    (s, at.rpc().to_owned())
}

async fn read(conn: &mut NoiseConn) -> Message {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), conn.read_message())
            .await
            .expect("the JDS answers within 10 s")
            .expect("the connection stays up");
        if let Some(m) = next {
            return m;
        }
    }
}

#[test]
fn a_declared_job_on_simnets_mempool_is_accepted_and_its_pushed_block_becomes_the_tip() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("jd.key");
    std::fs::write(&key_file, format!("{KEY_HEX}\n")).unwrap();
    let events = dir.path().join("jds.ev");

    let (simnet, rpc) = simnet();
    let mut args = jds_args(&rpc, "127.0.0.1:0", key_file.to_str().unwrap());
    args.extend(
        [
            "--mempool-refresh",
            "300ms",
            "--events",
            events.to_str().unwrap(),
        ]
        .map(String::from),
    );
    let jds = Role::start("jds", &strs(&args));
    let key = jds.line("jds authority public key");
    let addr = jds.line("jds listening on");
    let result = std::panic::catch_unwind(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let hash = client(&rpc, &addr, &key, || {}).await;
                tip_becomes(&rpc, hash).await;
                hash
            })
    });
    let jds_log = jds.log_tail();
    let jds_out = jds.stop();
    simnet.kill9();
    let block_hash = match result {
        Ok(h) => h,
        Err(e) => {
            eprintln!("jds log:\n{jds_log}");
            std::panic::resume_unwind(e)
        }
    };
    assert!(jds_out.is_empty(), "{jds_out:?}");

    // The events: the connection, the block submitted and simnet's verdict.
    let log = events::read_file(&events).unwrap();
    assert_eq!(log.header.role, "jds");
    let kinds: Vec<_> = log.events.iter().map(|e| e.kind).collect();
    assert!(kinds
        .iter()
        .any(|k| matches!(k, events::EventKind::ConnectionOpened(_))));
    // Found (first, and without a store not stored), then submitted.
    let found = kinds
        .iter()
        .position(|k| matches!(k, events::EventKind::BlockFound(b) if b.hash == block_hash && !b.stored && b.node.as_str() == "jds"))
        .unwrap_or_else(|| panic!("no block_found: {kinds:?}"));
    let submitted = kinds
        .iter()
        .position(|k| matches!(k, events::EventKind::BlockSubmitted(b) if b.hash == block_hash))
        .unwrap_or_else(|| panic!("no block_submitted: {kinds:?}"));
    assert!(found < submitted, "{kinds:?}");
    assert!(
        kinds.iter().any(
            |k| matches!(k, events::EventKind::BlockResult(r) if r.hash == block_hash && r.accepted)
        ),
        "{kinds:?}"
    );
}

fn node(rpc: &str) -> NodeClient {
    NodeClient::new(NodeConfig::new(
        format!("http://{rpc}"),
        NodeAuth::UserPass {
            user: support::RPC_USER.into(),
            password: support::RPC_PASSWORD.into(),
        },
    ))
    .unwrap()
}

/// Waits (up to 10 s) until simnet's tip is `hash`.
async fn tip_becomes(rpc: &str, hash: Hash256) {
    let node = node(rpc);
    let started = Instant::now();
    loop {
        let best = node.best_block_hash().await.unwrap();
        if best == hash {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "simnet's tip is still {best}, not the pushed {hash}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The JD client: declares a job on simnet's mempool, finds a block on it, calls `before_push`
/// and pushes the block; returns its hash.
async fn client(rpc: &str, jds: &str, key: &str, before_push: impl FnOnce()) -> Hash256 {
    let node = node(rpc);
    // Wait for a template with a few transactions.
    let started = Instant::now();
    let template = loop {
        let t = node
            .call("getblocktemplate", json!([{"rules": ["segwit"]}]))
            .await
            .unwrap();
        if t["transactions"].as_array().unwrap().len() >= 3 {
            break t;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "no mempool");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let txs: Vec<Transaction> = template["transactions"].as_array().unwrap()[..3]
        .iter()
        .map(|t| {
            consensus::deserialize(&primitives::hex::decode(t["data"].as_str().unwrap()).unwrap())
                .unwrap()
        })
        .collect();
    let fees: u64 = template["transactions"].as_array().unwrap()[..3]
        .iter()
        .map(|t| t["fee"].as_u64().unwrap())
        .sum();
    let all_fees: u64 = template["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["fee"].as_u64().unwrap())
        .sum();
    let value = template["coinbasevalue"].as_u64().unwrap() - all_fees + fees;
    let height = template["height"].as_u64().unwrap() as u32;
    let prev = BlockHash::from_byte_array(
        Hash256::from_display_hex(template["previousblockhash"].as_str().unwrap())
            .unwrap()
            .0,
    );
    let bits = u32::from_str_radix(template["bits"].as_str().unwrap(), 16).unwrap();
    let time = template["curtime"].as_u64().unwrap() as u32;

    let stream = tokio::net::TcpStream::connect(jds).await.unwrap();
    let mut conn = NoiseConn::connect_to_authority(
        stream,
        sv2::keys::parse_public_key(key).unwrap(),
        Limits::default(),
    )
    .await
    .unwrap();
    let setup: Message = SetupConnection {
        flags: job_declaration_flags::DECLARE_TX_DATA,
        endpoint_host: "127.0.0.1".into(),
        vendor: "jds_cli test".into(),
        ..SetupConnection::new(common::protocol::JOB_DECLARATION)
    }
    .into();
    conn.send_message(&setup).await.unwrap();
    assert!(matches!(
        read(&mut conn).await,
        Message::Common(Common::SetupConnectionSuccess(_))
    ));
    conn.send_message(
        &AllocateMiningJobToken {
            user_identifier: "farm".into(),
            request_id: 1,
        }
        .into(),
    )
    .await
    .unwrap();
    let Message::JobDeclaration(JobDeclaration::AllocateMiningJobTokenSuccess(alloc)) =
        read(&mut conn).await
    else {
        panic!("no token")
    };
    let pool_outputs: Vec<TxOut> = consensus::deserialize(&alloc.coinbase_outputs).unwrap();
    let payout = payout_script(PAYOUT, Network::Regtest).unwrap();
    assert_eq!(pool_outputs[0].script_pubkey, payout);

    // The coinbase: height, extranonce at the end of the scriptSig, the pool payout with the
    // whole value, the witness commitment.
    let extranonce = [0x5a; EXTRANONCE];
    let wtxids: Vec<Hash256> = txs
        .iter()
        .map(|t| Hash256(t.compute_wtxid().to_byte_array()))
        .collect();
    let coinbase = jdc_coinbase(height, &extranonce, payout, value, &wtxids);
    conn.send_message(
        &declare_mining_job(
            2,
            alloc.mining_job_token,
            split_coinbase(&coinbase, EXTRANONCE),
            &wtxids,
        )
        .into(),
    )
    .await
    .unwrap();
    let m = read(&mut conn).await;
    let Message::JobDeclaration(JobDeclaration::DeclareMiningJobSuccess(ok)) = m else {
        panic!("declaration refused: {m:?}")
    };
    let key = TokenKey::from_hex(KEY_HEX).unwrap();
    let claims = key
        .verify_kind(
            &ok.new_mining_job_token,
            TokenKind::Declared,
            jds::UnixMillis::now().0,
        )
        .unwrap();
    assert_eq!(claims.outputs, OutputsDigest::of(&coinbase.output));

    // Find the block independently and push it.
    let mut txdata = vec![coinbase];
    txdata.extend(txs);
    let mut block = Block {
        header: Header {
            version: BlockVersion::from_consensus(0x2000_0000),
            prev_blockhash: prev,
            merkle_root: TxMerkleNode::all_zeros(),
            time,
            bits: CompactTarget::from_consensus(bits),
            nonce: 0,
        },
        txdata,
    };
    block.header.merkle_root = block.compute_merkle_root().unwrap();
    while block.header.validate_pow(block.header.target()).is_err() {
        block.header.nonce += 1;
    }
    before_push();
    conn.send_message(
        &PushSolution {
            extranonce: extranonce.to_vec(),
            prev_hash: prev.to_byte_array(),
            nonce: block.header.nonce,
            ntime: time,
            nbits: bits,
            version: 0x2000_0000,
        }
        .into(),
    )
    .await
    .unwrap();
    let hash = Hash256(block.block_hash().to_byte_array());
    // The connection stays open until the JDS has taken the push.
    tokio::time::sleep(Duration::from_millis(300)).await;
    hash
}

/// The pool-side node stops answering just as a block is pushed: the JDS stores the block
/// and keeps trying; killed with SIGKILL meanwhile and restarted on the same store once the
/// node is back, it submits the block again and the block becomes the tip. The status
/// endpoints count it pending, then accepted.
#[test]
fn a_pushed_block_the_node_cannot_take_yet_survives_a_kill_9_and_reaches_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("jd.key");
    std::fs::write(&key_file, format!("{KEY_HEX}\n")).unwrap();
    let store = dir.path().join("jds.sqlite");
    let jds_key_file = dir.path().join("jds.key");
    let (simnet, rpc) = simnet();
    let simnet_pid = simnet.pid() as i32;
    let start_jds = || {
        let mut args = jds_args(&rpc, "127.0.0.1:0", key_file.to_str().unwrap());
        args.extend(
            [
                "--mempool-refresh",
                "300ms",
                "--store",
                store.to_str().unwrap(),
                "--http-listen",
                "127.0.0.1:0",
                "--authority-key-file",
                jds_key_file.to_str().unwrap(),
            ]
            .map(String::from),
        );
        let jds = Role::start("jds", &strs(&args));
        let key = jds.line("jds authority public key");
        let addr = jds.line("jds listening on");
        let http = jds.line("http listening on");
        (jds, addr, http, key)
    };
    let (jds, addr, http, key) = start_jds();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // SAFETY: signalling our own child.
    let pause = |sig| unsafe { libc::kill(simnet_pid, sig) };
    let hash = rt.block_on(client(&rpc, &addr, &key, || {
        pause(libc::SIGSTOP);
    }));
    // Stored before it is sent; the node does not answer.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let blocks = pool::store::StoreReader::open(&store)
            .and_then(|r| r.blocks())
            .unwrap_or_default();
        if blocks.iter().any(|b| b.hash == hash.0) {
            assert!(
                blocks.iter().all(|b| b.result.is_none()),
                "answered by a stopped node?"
            );
            break;
        }
        if Instant::now() > deadline {
            pause(libc::SIGCONT);
            panic!("the pushed block was not stored\n{}", jds.log_tail());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = support::http_get_json(&http, "/api/status");
    assert_eq!(status["blocks"]["found"], 1, "{status}");
    assert_eq!(status["blocks"]["pending"], 1, "{status}");
    jds.kill9();
    pause(libc::SIGCONT);

    let (jds, _, http, key_again) = start_jds();
    assert_eq!(key_again, key, "the restarted JDS's authority key");
    rt.block_on(tip_becomes(&rpc, hash));
    let status = support::status_within(
        &http,
        "the block accepted, the node up",
        Duration::from_secs(20),
        || jds.log_tail(),
        |s| s["blocks"]["accepted"] == 1 && s["dependencies"]["node"]["up"] == true,
    );
    assert_eq!(status["blocks"]["pending"], 0, "{status}");
    assert_eq!(status["dependencies"]["node"]["up"], true, "{status}");
    assert_eq!(status["dependencies"]["store"]["up"], true, "{status}");
    let (code, body) = support::http_get(&http, "/healthz");
    assert_eq!(code, 200, "{body}");
    let metrics = support::http_get(&http, "/metrics").1;
    assert!(
        metrics.contains("stratumlab_jds_blocks_accepted_total 1"),
        "{metrics}"
    );
    assert!(metrics.contains("stratumlab_jds_dependency_up{dependency=\"store\"} 1"));
    jds.stop();
    let blocks = pool::store::StoreReader::open(&store)
        .unwrap()
        .blocks()
        .unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].result.as_deref(), Some("accepted"));
    simnet.kill9();
}
