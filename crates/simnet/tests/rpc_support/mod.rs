//! Shared by the `rpc_*` tests: a real server on 127.0.0.1 port 0 over a running node, a plain
//! HTTP client that can send anything (good, malformed, half), and blocks built from
//! `getblocktemplate` answers the way a pool builds them.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use base64::Engine as _;
use primitives::bitcoin::consensus::{deserialize, serialize};
use primitives::bitcoin::{Block, Transaction};
use primitives::coinbase::{payout_script, CoinbaseSpec, Payout};
use primitives::{CompactTarget, Difficulty, Hash256};
use serde_json::{json, Value};
use simnet::rpc::{serve_with, RpcAuth, RpcOptions};
use simnet::{Network, Node, SimnetConfig};

pub const USER: &str = "lab";
pub const PASSWORD: &str = "hunter2";
/// A valid regtest address (BIP173's test vector program with the regtest prefix).
pub const ADDRESS: &str = "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080";

#[path = "../common/mod.rs"]
mod common;

/// Difficulty 2^-20: about 4,096 hashes a block.
pub fn easy() -> Difficulty {
    common::easy_difficulty()
}

/// An easy network that finds no blocks by itself, with a few hundred transactions waiting.
pub fn config(seed: u64) -> SimnetConfig {
    common::submit_config(seed)
}

/// A node and its JSON-RPC server, running on their own runtime thread.
pub struct Server {
    pub addr: SocketAddr,
    pub node: Node,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Server {
    pub fn start(config: SimnetConfig) -> Server {
        Server::start_with(
            config,
            RpcAuth::user_password(USER, PASSWORD),
            RpcOptions::default(),
        )
    }

    pub fn start_with(config: SimnetConfig, auth: RpcAuth, options: RpcOptions) -> Server {
        let node = Node::new(
            Network::new(config).unwrap(),
            "rpc-test",
            events::EventSink::disabled(),
        );
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let served = node.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                addr_tx.send(listener.local_addr()?).unwrap();
                let clock = tokio::spawn({
                    let node = served.clone();
                    async move { node.run_clock(std::future::pending()).await }
                });
                let r = serve_with(served, listener, auth, options, async {
                    let _ = stop_rx.await;
                })
                .await;
                clock.abort();
                r
            })
        });
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("server started");
        Server {
            addr,
            node,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server and waits for it.
    pub fn stop(mut self) -> std::io::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> std::io::Result<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take() {
            Some(t) => t.join().expect("server thread"),
            None => Ok(()),
        }
    }

    /// A JSON-RPC 2.0 call with the test credentials; the result, or the error object.
    pub fn call(&self, method: &str, params: Value) -> Result<Value, Value> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let r = post(
            self.addr,
            Some((USER, PASSWORD)),
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "{method}: {}", r.text());
        let v = r.json();
        match v.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(v["result"].clone()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// An HTTP response as read off the wire.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.text()))
    }
}

pub fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// POSTs `body` on a fresh connection and reads the whole answer.
pub fn post(addr: SocketAddr, auth: Option<(&str, &str)>, body: &[u8]) -> HttpResponse {
    let mut head = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some((u, p)) = auth {
        head.push_str(&format!("Authorization: {}\r\n", basic(u, p)));
    }
    head.push_str("\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body);
    exchange(addr, &raw).expect("a complete HTTP response")
}

/// Sends raw bytes and reads until the server closes; `None` if it closed without an answer.
pub fn exchange(addr: SocketAddr, raw: &[u8]) -> Option<HttpResponse> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server may answer (413) and close before it has read everything we send.
    let _ = s.write_all(raw);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse_response(&buf)
}

pub fn parse_response(buf: &[u8]) -> Option<HttpResponse> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = buf[end + 4..].to_vec();
    if let Some(len) = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        body.truncate(len);
    }
    Some(HttpResponse {
        status,
        headers,
        body,
    })
}

// ---- Blocks from getblocktemplate ----------------------------------------------------------

/// A block under construction from a `getblocktemplate` answer, every part open to tampering.
#[derive(Clone)]
pub struct Draft {
    pub height: u32,
    pub coinbase_value: u64,
    pub extranonce: [u8; 8],
    /// The commitment from `default_witness_commitment` (bytes 6..38 of its script).
    pub commitment: Hash256,
    pub txs: Vec<Transaction>,
    pub prev_hash: Hash256,
    pub version: u32,
    pub time: u32,
    pub bits: CompactTarget,
    pub merkle_override: Option<Hash256>,
}

impl Draft {
    pub fn from_gbt(gbt: &Value) -> Draft {
        let dwc = hex::decode(gbt["default_witness_commitment"].as_str().unwrap()).unwrap();
        assert_eq!(dwc.len(), 38);
        assert_eq!(&dwc[..6], &[0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed]);
        Draft {
            height: gbt["height"].as_u64().unwrap() as u32,
            coinbase_value: gbt["coinbasevalue"].as_u64().unwrap(),
            extranonce: [0; 8],
            commitment: Hash256(dwc[6..38].try_into().unwrap()),
            txs: gbt["transactions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| deserialize(&hex::decode(t["data"].as_str().unwrap()).unwrap()).unwrap())
                .collect(),
            prev_hash: gbt["previousblockhash"].as_str().unwrap().parse().unwrap(),
            version: gbt["version"].as_u64().unwrap() as u32,
            time: gbt["curtime"].as_u64().unwrap() as u32,
            bits: CompactTarget::from_consensus(
                u32::from_str_radix(gbt["bits"].as_str().unwrap(), 16).unwrap(),
            ),
            merkle_override: None,
        }
    }

    pub fn coinbase(&self) -> Transaction {
        self.shared().coinbase()
    }

    /// The block with the first nonce whose hash meets the target (`meets`), or fails to.
    pub fn grind(&self, meets: bool) -> Block {
        let shared = self.shared();
        if meets {
            shared.mine()
        } else {
            shared.mine_failing()
        }
    }

    /// The same block as the drafts built from templates, which assemble and grind it alike:
    /// the coinbase pays the answer's value to [`ADDRESS`] and carries its witness commitment.
    fn shared(&self) -> common::Draft {
        let mut spec = CoinbaseSpec::new(self.height, 8);
        spec.tag = b"/rpc-test/".to_vec();
        spec.payouts.push(Payout {
            script_pubkey: payout_script(ADDRESS, primitives::bitcoin::Network::Regtest).unwrap(),
            value: primitives::bitcoin::Amount::from_sat(self.coinbase_value),
        });
        common::Draft {
            spec,
            extranonce: self.extranonce.to_vec(),
            txs: self.txs.clone(),
            prev_hash: self.prev_hash,
            time: self.time,
            bits: self.bits,
            version: self.version,
            commitment_override: Some(self.commitment),
            merkle_override: self.merkle_override,
            strip_coinbase_witness: false,
        }
    }

    pub fn mine(&self) -> Block {
        self.grind(true)
    }
}

pub fn block_hex(b: &Block) -> String {
    hex::encode(serialize(b))
}

pub fn gbt_request() -> Value {
    json!([{"rules": ["segwit"]}])
}
