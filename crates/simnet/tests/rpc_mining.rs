//! Mining through RPC as a pool does it: a block built from `getblocktemplate` (coinbase with
//! the BIP34 height, the payout and `default_witness_commitment`; the template's transactions)
//! goes in through `submitblock` and moves the tip; each way a block can be wrong comes back
//! as Core's exact result string; long polls return as soon as there is a new template.

mod rpc_support;

use std::time::{Duration, Instant};

use primitives::{sha256d, Hash256};
use rpc_support::*;
use serde_json::{json, Value};
use simnet::rpc::{RpcAuth, RpcOptions};

fn gbt(s: &Server) -> Value {
    s.call("getblocktemplate", gbt_request()).unwrap()
}

fn submit(s: &Server, block: &primitives::bitcoin::Block) -> Value {
    s.call("submitblock", json!([block_hex(block)])).unwrap()
}

#[test]
fn a_block_from_the_template_becomes_the_tip() {
    let s = Server::start(config(21));
    let t = gbt(&s);
    assert_eq!(t["height"], 900_001);
    assert!(
        t["transactions"].as_array().unwrap().len() > 100,
        "the template carries transactions"
    );
    assert_eq!(t["rules"], json!(["csv", "!segwit", "taproot"]));
    assert_eq!(t["coinbaseaux"], json!({}));
    let tip = s.call("getbestblockhash", json!([])).unwrap();
    assert_eq!(t["previousblockhash"], tip);

    let block = Draft::from_gbt(&t).mine();
    // Named parameters, as public-pool's client sends them; `null` means accepted.
    let r = s
        .call("submitblock", json!({"hexdata": block_hex(&block)}))
        .unwrap();
    assert_eq!(r, Value::Null);
    let new_tip = s.call("getbestblockhash", json!([])).unwrap();
    assert_eq!(new_tip, block.block_hash().to_string());
    assert_eq!(s.call("getblockcount", json!([])).unwrap(), 900_001);
    // The next template builds on it, without the transactions just mined.
    let next = gbt(&s);
    assert_eq!(next["previousblockhash"], new_tip);
    assert_eq!(next["height"], 900_002);
    // The optional second parameter is accepted and ignored.
    assert_eq!(
        s.call("submitblock", json!([block_hex(&block), "workid"]))
            .unwrap(),
        "duplicate"
    );
}

#[test]
fn each_rejection_comes_back_with_cores_reason() {
    let s = Server::start(config(22));
    let t = gbt(&s);
    let draft = Draft::from_gbt(&t);
    let check = |block: &primitives::bitcoin::Block, want: &str| {
        let tip = s.call("getbestblockhash", json!([])).unwrap();
        assert_eq!(submit(&s, block), want);
        assert_eq!(
            s.call("getbestblockhash", json!([])).unwrap(),
            tip,
            "{want} moved the tip"
        );
    };

    check(&draft.grind(false), "high-hash");

    let mut d = draft.clone();
    d.merkle_override = Some(Hash256([5; 32]));
    check(&d.mine(), "bad-txnmrklroot");

    let mut d = draft.clone();
    d.height += 1;
    check(&d.mine(), "bad-cb-height");

    let mut d = draft.clone();
    d.coinbase_value += 1;
    check(&d.mine(), "bad-cb-amount");

    let mut d = draft.clone();
    d.commitment.0[0] ^= 1;
    check(&d.mine(), "bad-witness-merkle-match");

    let mut d = draft.clone();
    d.prev_hash = sha256d(b"nobody has this block");
    check(&d.mine(), "prev-blk-not-found");

    // Two valid blocks on the same parent: the first becomes the tip, the second is stored
    // but not connected (a chain no longer than ours), and repeats are duplicates.
    let first = draft.mine();
    assert_eq!(submit(&s, &first), Value::Null);
    let mut d = draft.clone();
    d.extranonce = [1; 8];
    let second = d.mine();
    assert_ne!(second.block_hash(), first.block_hash());
    check(&second, "inconclusive");
    check(&first, "duplicate");
    check(&second, "duplicate");

    // Bytes that are no block are an RPC error, as in Core.
    let e = s.call("submitblock", json!(["00ff"])).unwrap_err();
    assert_eq!(e, json!({"code": -22, "message": "Block decode failed"}));
    let e = s.call("submitblock", json!(["not hex"])).unwrap_err();
    assert_eq!(e["code"], -22);
}

#[test]
fn getblocktemplate_requires_the_segwit_rule_and_a_known_mode() {
    let s = Server::start(config(23));
    let segwit_msg = "getblocktemplate must be called with the segwit rule set (call with {\"rules\": [\"segwit\"]})";
    for params in [json!([]), json!([{}]), json!([{"rules": ["csv"]}])] {
        let e = s.call("getblocktemplate", params).unwrap_err();
        assert_eq!(e, json!({"code": -8, "message": segwit_msg}));
    }
    let e = s
        .call(
            "getblocktemplate",
            json!([{"rules": ["segwit"], "mode": "bogus"}]),
        )
        .unwrap_err();
    assert_eq!(e, json!({"code": -8, "message": "Invalid mode"}));
    // Named, as public-pool's client sends it, with its capabilities.
    let t = s
        .call(
            "getblocktemplate",
            json!({"template_request": {"rules": ["segwit"], "mode": "template", "capabilities": ["serverlist", "proposal"]}}),
        )
        .unwrap();
    assert_eq!(t["height"], 900_001);
    // A proposal of a block we already have: "duplicate".
    let block = Draft::from_gbt(&t).mine();
    assert_eq!(submit(&s, &block), Value::Null);
    let r = s
        .call(
            "getblocktemplate",
            json!([{"mode": "proposal", "data": block_hex(&block)}]),
        )
        .unwrap();
    assert_eq!(r, "duplicate");
}

#[test]
fn longpoll_returns_within_50_ms_of_a_new_tip() {
    let s = Server::start(config(24));
    let t = gbt(&s);
    let id = t["longpollid"].as_str().unwrap().to_owned();
    assert!(id.starts_with(t["previousblockhash"].as_str().unwrap()));

    let (addr, waiter_id) = (s.addr, id.clone());
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "getblocktemplate",
                          "params": [{"rules": ["segwit"], "longpollid": waiter_id}]});
        let r = post(addr, Some((USER, PASSWORD)), body.to_string().as_bytes());
        (started, Instant::now(), r.json())
    });
    // Let the long poll settle into its wait, then find a block from another connection.
    std::thread::sleep(Duration::from_millis(300));
    let mined = s.call("generatetoaddress", json!([1, ADDRESS])).unwrap();
    let tip_in_effect = Instant::now();
    let (started, returned, answer) = waiter.join().unwrap();

    assert!(
        returned.duration_since(started) >= Duration::from_millis(250),
        "it waited"
    );
    let late = returned.saturating_duration_since(tip_in_effect);
    assert!(
        late < Duration::from_millis(50),
        "returned {late:?} after the new tip"
    );
    let next = &answer["result"];
    assert_eq!(next["previousblockhash"], mined[0]);
    assert_ne!(next["longpollid"].as_str().unwrap(), id);
}

#[test]
fn a_stale_longpollid_returns_at_once_and_a_current_one_times_out() {
    let options = RpcOptions {
        longpoll_timeout: Duration::from_millis(400),
        ..Default::default()
    };
    let mut cfg = config(25);
    cfg.mempool.arrival_rate = 0.0; // no fee-driven template while we wait
    let s = Server::start_with(cfg, RpcAuth::user_password(USER, PASSWORD), options);
    let old = gbt(&s);
    s.call("generatetoaddress", json!([1, ADDRESS])).unwrap();
    let current = gbt(&s);

    let poll = |id: &Value| {
        let started = Instant::now();
        let r = s
            .call(
                "getblocktemplate",
                json!([{"rules": ["segwit"], "longpollid": id}]),
            )
            .unwrap();
        (started.elapsed(), r)
    };
    let (took, r) = poll(&old["longpollid"]);
    assert!(
        took < Duration::from_millis(200),
        "stale long poll took {took:?}"
    );
    assert_eq!(r["longpollid"], current["longpollid"]);
    // A template id the network is past on the same tip is stale too.
    let same_tip_old_id = format!("{}0", current["previousblockhash"].as_str().unwrap());
    assert!(poll(&Value::from(same_tip_old_id)).0 < Duration::from_millis(200));

    let (took, r) = poll(&current["longpollid"]);
    assert!(
        took >= Duration::from_millis(380),
        "returned after {took:?}, before the timeout"
    );
    assert!(took < Duration::from_secs(3));
    assert_eq!(r["longpollid"], current["longpollid"]);

    // A malformed longpollid is Core's parameter error.
    let e = s
        .call(
            "getblocktemplate",
            json!([{"rules": ["segwit"], "longpollid": "xyz"}]),
        )
        .unwrap_err();
    assert_eq!(e["code"], -8);
    assert_eq!(
        e["message"],
        "longpollid must be of length 64 (not 3, for 'xyz')"
    );
}

#[test]
fn shutdown_ends_long_polls() {
    let s = Server::start(config(26));
    let t = gbt(&s);
    let (addr, id) = (s.addr, t["longpollid"].clone());
    let waiter = std::thread::spawn(move || {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "getblocktemplate",
                          "params": [{"rules": ["segwit"], "longpollid": id}]});
        let started = Instant::now();
        let r = post(addr, Some((USER, PASSWORD)), body.to_string().as_bytes());
        (started.elapsed(), r.json())
    });
    std::thread::sleep(Duration::from_millis(200));
    let stopping = Instant::now();
    s.stop().unwrap();
    assert!(
        stopping.elapsed() < Duration::from_secs(2),
        "a long poll held up shutdown"
    );
    let (took, answer) = waiter.join().unwrap();
    assert!(took < Duration::from_secs(5));
    assert_eq!(answer["error"]["code"], -9);
}
