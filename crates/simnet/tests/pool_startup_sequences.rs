//! The node calls third-party pool software makes at start and on each new block, replayed
//! against simnet as raw JSON-RPC over HTTP with the request bodies, order and parameters the
//! sources use: no call may get an error.
//!
//! Sources the sequences were read from:
//! - ckpool: src/generator.c (`server_alive`: a test template, then `validate_address`;
//!   `gen_loop`: "getbase", "getbest", "getlast", "submitblock:") and src/bitcoin.c (the
//!   request strings: JSON-RPC 1.0 without an id, newline-terminated; `validate_txn`'s
//!   `decoderawtransaction` of a coinbase; `precious_block` after a block is submitted).
//! - goPool (M45-goPool): rpc.go (`{"jsonrpc":"1.0","id":N,...}`, nil params sent as null),
//!   job_manager.go (`Start`: `fetchInitialBlockInfo`, the first template,
//!   `refreshNodeSyncInfo`; `refreshBlockHistoryFromRPC` on each new height) and
//!   job_refresh.go (the template request).
//! - para 0.6.0: src/settings.rs (`bitcoin_rpc_client`: `getblockchaininfo`'s chain),
//!   src/generator.rs (`verify_zmq_hashblock`, `get_block_template`), src/stratifier.rs
//!   (`submitblock`), src/http_server.rs (`getmininginfo`); requests by bitcoind-async-client.
//! - public-pool: src/services/bitcoin-rpc.service.ts (rpc-bitcoin's client: named
//!   parameters).
//! - DATUM Gateway: src/datum_blocktemplates.c (the template request, the fallback notifier's
//!   `getbestblockhash`) and src/datum_submitblock.c (`submitblock`, then `preciousblock`).

mod rpc_support;

use primitives::bitcoin::consensus::serialize;
use rpc_support::*;
use serde_json::{json, Value};
use simnet::zmq::{Publisher, ZmqConfig};

/// POSTs `body` as the pool sends it; the result, after checking there is no error.
fn call(server: &Server, body: &str) -> Value {
    let r = post(server.addr, Some((USER, PASSWORD)), body.as_bytes());
    assert_eq!(r.status, 200, "{body}: {}", r.text());
    let v = r.json();
    assert!(v["error"].is_null(), "{body} -> {v}");
    assert!(v.get("result").is_some(), "{body} -> {v}");
    v["result"].clone()
}

/// A block on the template `gbt`, as a pool assembles it, in hex.
fn solved_block(gbt: &Value) -> (String, String) {
    let block = Draft::from_gbt(gbt).mine();
    (block_hex(&block), block.block_hash().to_string())
}

/// The network finds a block (what makes pools fetch new work).
fn network_block(server: &Server) {
    server
        .call("generatetoaddress", json!([1, ADDRESS]))
        .unwrap();
}

#[test]
fn ckpool() {
    let server = Server::start(config(51));
    // server_alive: a test template, then the payout address.
    let gbt_req = "{\"method\": \"getblocktemplate\", \"params\": [{\"capabilities\": [\"coinbasetxn\", \"workid\", \"coinbase/append\"], \"rules\" : [\"segwit\"]}]}\n";
    let gbt = call(&server, gbt_req);
    // ckpool requires these to be present and non-zero.
    for k in [
        "previousblockhash",
        "target",
        "version",
        "curtime",
        "bits",
        "coinbaseaux",
    ] {
        assert!(!gbt[k].is_null(), "{k}");
    }
    let valid = call(
        &server,
        &format!("{{\"method\": \"validateaddress\", \"params\": [\"{ADDRESS}\"]}}\n"),
    );
    assert_eq!(valid["isvalid"], true);
    assert!(valid["isscript"].is_boolean() && valid["iswitness"].is_boolean());
    // validate_txn: the coinbase it generates, decoded by the node.
    let coinbase = primitives::hex::encode(&serialize(&Draft::from_gbt(&gbt).coinbase()));
    let decoded = call(
        &server,
        &format!("{{\"method\": \"decoderawtransaction\", \"params\": [\"{coinbase}\"]}}"),
    );
    assert!(decoded["txid"].is_string());

    for _ in 0..2 {
        // getbest, getlast, getbase.
        let best = call(&server, "{\"method\": \"getbestblockhash\"}\n");
        let height = call(&server, "{\"method\": \"getblockcount\"}\n");
        let hash = call(
            &server,
            &format!("{{\"method\": \"getblockhash\", \"params\": [{height}]}}\n"),
        );
        assert_eq!(best, hash);
        call(&server, gbt_req);
        network_block(&server);
    }

    // A block found: submitblock ("duplicate" also counts as accepted), then preciousblock.
    let gbt = call(&server, gbt_req);
    let (hex, hash) = solved_block(&gbt);
    let r = call(
        &server,
        &format!("{{\"method\": \"submitblock\", \"params\": [\"{hex}\"]}}\n"),
    );
    assert!(r.is_null(), "accepted: {r}");
    call(
        &server,
        &format!("{{\"method\": \"preciousblock\", \"params\": [\"{hash}\"]}}\n"),
    );
    assert_eq!(
        call(&server, "{\"method\": \"getbestblockhash\"}\n"),
        json!(hash)
    );
}

/// goPool's request framing: JSON-RPC 1.0 with an increasing integer id, params as given (a
/// nil params value is sent as null).
struct GoPool<'a> {
    server: &'a Server,
    id: u32,
}

impl GoPool<'_> {
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let body = json!({"jsonrpc": "1.0", "id": self.id, "method": method, "params": params});
        call(self.server, &body.to_string())
    }

    /// fetchInitialBlockInfo / refreshBlockHistoryFromRPC: the tip's header and three
    /// ancestors' by previousblockhash.
    fn block_history(&mut self) {
        let hash = self.call("getbestblockhash", Value::Null);
        let mut header = self.call("getblockheader", json!([hash, true]));
        for _ in 0..3 {
            let prev = header["previousblockhash"].clone();
            assert!(prev.is_string(), "a parent: {header}");
            let parent = self.call("getblockheader", json!([prev, true]));
            assert_eq!(parent["height"], header["height"].as_u64().unwrap() - 1);
            assert!(parent["time"].as_u64() < header["time"].as_u64());
            header = parent;
        }
    }

    fn template(&mut self, longpollid: Option<&Value>) -> Value {
        let mut params = json!({
            "capabilities": ["coinbasetxn", "workid", "coinbase/append"],
            "rules": ["segwit"],
        });
        if let Some(id) = longpollid {
            params["longpollid"] = id.clone();
        }
        self.call("getblocktemplate", json!([params]))
    }
}

#[test]
fn gopool() {
    let server = Server::start(config(52));
    let mut g = GoPool {
        server: &server,
        id: 0,
    };
    // Start: block history, the first template, the node's sync state.
    g.block_history();
    let gbt = g.template(None);
    g.block_history();
    let sync = g.call("getblockchaininfo", Value::Null);
    assert_eq!(
        sync["initialblockdownload"], false,
        "goPool gates stratum on it"
    );
    assert_eq!(sync["blocks"], sync["headers"]);

    // longpollLoop: waits on the current template's longpollid; a network block answers it.
    let longpollid = gbt["longpollid"].clone();
    let addr = server.addr;
    let waiter = std::thread::spawn(move || {
        let body = json!({"jsonrpc": "1.0", "id": 100, "method": "getblocktemplate", "params": [{
            "capabilities": ["coinbasetxn", "workid", "coinbase/append"],
            "longpollid": longpollid,
            "rules": ["segwit"],
        }]});
        let r = post(addr, Some((USER, PASSWORD)), body.to_string().as_bytes());
        assert_eq!(r.status, 200);
        let v = r.json();
        assert!(v["error"].is_null(), "{v}");
        v["result"]["height"].as_u64().unwrap()
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    network_block(&server);
    assert_eq!(waiter.join().unwrap(), gbt["height"].as_u64().unwrap() + 1);

    // The new height: a fresh template and the history again; heartbeat; a found block.
    let gbt = g.template(None);
    g.block_history();
    g.call("getblockchaininfo", Value::Null);
    let (hex, hash) = solved_block(&gbt);
    assert!(g.call("submitblock", json!([hex])).is_null());
    assert_eq!(g.call("getbestblockhash", Value::Null), json!(hash));
    g.block_history();
}

#[test]
fn para() {
    let server = Server::start(config(53));
    // para checks its --zmq-block-notifications endpoint against getzmqnotifications.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let zmq = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let endpoint = format!("tcp://{}", zmq.local_addr().unwrap());
    let publisher = Publisher::new(server.node.clone(), ZmqConfig::default());
    rt.spawn(publisher.serve(zmq, std::future::pending()));

    let mut id = 0;
    let mut c = |method: &str, params: Value| {
        id += 1;
        let body = json!({"jsonrpc": "1.0", "id": id, "method": method, "params": params});
        call(&server, &body.to_string())
    };
    let info = c("getblockchaininfo", json!([]));
    assert_eq!(info["chain"], "regtest", "para --chain regtest");
    let t0 = std::time::Instant::now();
    loop {
        let list = c("getzmqnotifications", json!([]));
        let found = list.as_array().unwrap().iter().any(|n| {
            n["type"] == "pubhashblock" && n["address"].as_str() == Some(endpoint.as_str())
        });
        if found {
            break;
        }
        assert!(
            t0.elapsed().as_secs() < 10,
            "no pubhashblock on {endpoint}: {list}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let gbt_params = json!([{
        "capabilities": ["coinbasetxn", "workid", "coinbase/append"],
        "rules": ["segwit"],
    }]);
    c("getblocktemplate", gbt_params.clone());
    // A hashblock (or the update ticker): a new template.
    network_block(&server);
    let gbt = c("getblocktemplate", gbt_params);
    let (hex, _) = solved_block(&gbt);
    assert!(c("submitblock", json!([hex])).is_null());
    // Its HTTP API's status page.
    c("getmininginfo", json!([]));
}

#[test]
fn public_pool() {
    let server = Server::start(config(54));
    // rpc-bitcoin sends named parameters.
    let mut id = 0;
    let mut c = |method: &str, params: Value| {
        id += 1;
        let body = json!({"jsonrpc": "1.0", "id": id, "method": method, "params": params});
        call(&server, &body.to_string())
    };
    c("getrpcinfo", json!({}));
    let info = c("getmininginfo", json!({}));
    assert!(info["blocks"].is_u64());
    let request = json!({"template_request": {
        "rules": ["segwit"],
        "mode": "template",
        "capabilities": ["serverlist", "proposal"],
    }});
    c("getblocktemplate", request.clone());
    network_block(&server);
    c("getmininginfo", json!({}));
    let gbt = c("getblocktemplate", request);
    let (hex, _) = solved_block(&gbt);
    assert!(c("submitblock", json!({"hexdata": hex})).is_null());
}

#[test]
fn datum_gateway() {
    let server = Server::start(config(55));
    let gbt_req = |i: u64| {
        format!(r#"{{"method":"getblocktemplate","params":[{{"rules":["segwit"]}}],"id":{i}}}"#)
    };
    let best = |ms: u64| {
        format!(r#"{{"jsonrpc":"1.0","id":"{ms}","method":"getbestblockhash","params":[]}}"#)
    };
    let gbt = call(&server, &gbt_req(1));
    // The fields datum_gbt_parser requires.
    for k in [
        "height",
        "coinbasevalue",
        "mintime",
        "sigoplimit",
        "curtime",
        "sizelimit",
        "weightlimit",
        "version",
        "bits",
        "previousblockhash",
        "target",
        "default_witness_commitment",
        "transactions",
    ] {
        assert!(!gbt[k].is_null(), "{k}");
    }
    call(&server, &best(1_700_000_000_000));
    network_block(&server);
    call(&server, &best(1_700_000_001_000));
    let gbt = call(&server, &gbt_req(2));
    let (hex, hash) = solved_block(&gbt);
    let submitted = call(
        &server,
        &format!(r#"{{"jsonrpc":"1.0","id":"1","method":"submitblock","params":["{hex}"]}}"#),
    );
    assert!(submitted.is_null());
    call(
        &server,
        &format!(r#"{{"method":"preciousblock","params":["{hash}"],"id":1}}"#),
    );
}
