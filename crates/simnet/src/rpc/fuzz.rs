//! The JSON-RPC endpoint's request parsing and argument conversion under arbitrary bodies,
//! shared by the cargo-fuzz target `rpc_request` (crates/simnet/fuzz) and the stable test that
//! replays its corpus (tests/fuzz_corpus.rs).
//!
//! Each input is one HTTP request body, answered by [`respond`] with the endpoint's own
//! dispatch ([`methods::execute`]: method lookup, Core's argument handling, the method) over a
//! small node built afresh (the fuzzing network of `checks::fuzz`: two blocks on the base, 30
//! transactions in the mempool, no arrivals and no network blocks, so nothing changes unless a
//! request changes it). The first byte picks how the body is made:
//!
//! - below `0x80`: the rest of the input is the body, as is (a dictionary of method and member
//!   names helps the fuzzer write JSON);
//! - from `0x80`: the rest is read as choices that build a body (see [`Gen`]): single requests
//!   or batches, in either dialect, with or without ids, positional or named (or both, through
//!   `args`) parameters, for every method, each argument a value that fits (the chain's block
//!   hashes and heights, mempool and coinbase txids, a regtest address, template requests,
//!   blocks and transactions the node knows) or one that does not (every JSON type, out of
//!   range numbers, bad hex), and broken request objects.
//!
//! `generatetoaddress` is the one request that takes as long as it asks: the harness lowers its
//! `nblocks` so that one input mines at most [`MAX_BLOCKS`] blocks (Core has no limit either).
//!
//! Checked for every body, against an independent reading of the JSON-RPC rules that
//! [`super::jsonrpc`] documents:
//!
//! - no panic, and no method panics (the dispatch turns one into an internal error, -32603,
//!   which no reply may carry; nor may any other internal error);
//! - the HTTP status: a body that is not JSON, or not an object or array, is -32700 with HTTP
//!   500; a single request object that cannot be read is -32600 with HTTP 400 (in either
//!   dialect); a 2.0 notification gets 204 and no body; other 2.0 replies 200; legacy replies
//!   200, or for an error 404 (-32601) or 500; a batch 200, or 204 if made only of
//!   notifications;
//! - the reply's shape: JSON ending in a newline; legacy replies carry `result`, `error` and
//!   (when the request had one) `id`, 2.0 replies `"jsonrpc": "2.0"`, `result` or `error`, and
//!   the id; errors are `{"code", "message"}` with a non-empty message; a batch answers its
//!   elements in order, notifications left out, an element that is not an object with -32600
//!   under the id and dialect of the element before it;
//! - the error codes: an unknown method is -32601 and a known one never is; a known method
//!   fails only with Core's argument codes (-1 count and integers, -3 types, -8 parameters) or
//!   the codes of what it does (-5 not found, -22 decode, -25 and -27 for transactions);
//! - valid requests succeed: a call built only from fitting values, in a body that changes
//!   nothing (no `submitblock`, no `generatetoaddress`), gets a result;
//! - requests round-trip: each call of a method that only reads is answered the same as a
//!   legacy request, as a 2.0 request, inside a batch of one, and with its positional
//!   parameters passed by name, through `args`, or half and half; and, when nothing in the body
//!   changed the node, the same as in the body.

use primitives::fuzz_input::FuzzInput as Input;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use primitives::Hash256;
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use super::args::spec;
use super::jsonrpc::*;
use super::methods::{self, Ctx};
use crate::node::Node;

/// Blocks one input may have `generatetoaddress` mine, in all.
pub const MAX_BLOCKS: u64 = 6;
/// Calls of a body whose round trips are checked (each costs five more requests).
const MAX_ROUND_TRIPS: usize = 4;
/// Requests in a built batch, at most.
const MAX_BATCH: usize = 6;
/// A regtest address (P2WPKH).
const ADDRESS: &str = "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080";

/// Methods that only read the node and whose answer does not depend on the time.
const READ_ONLY: &[&str] = &[
    "getbestblockhash",
    "getblock",
    "getblockchaininfo",
    "getblockcount",
    "getblockhash",
    "getblockheader",
    "getdifficulty",
    "getmempoolentry",
    "getmempoolinfo",
    "getrawmempool",
    "getrpcinfo",
    "help",
    "getmininginfo",
    "getnetworkhashps",
    "getconnectioncount",
    "getnetworkinfo",
    "ping",
    "getrawtransaction",
    "sendrawtransaction",
    "validateaddress",
    "decoderawtransaction",
    "preciousblock",
    "estimatesmartfee",
    "getzmqnotifications",
];

/// Methods that may change the node.
const CHANGING: &[&str] = &["submitblock", "generatetoaddress"];

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .max_blocking_threads(2)
            .build()
            .expect("a runtime")
    })
}

/// The node every input is answered by, built afresh on the fuzz harnesses' network
/// ([`crate::checks::fuzz::fresh_network`]).
pub fn node() -> Node {
    let net = crate::checks::fuzz::fresh_network();
    Node::new(net, "fuzz", events::EventSink::disabled())
}

/// What the node holds, for building requests that fit.
struct Known {
    base_height: u32,
    tip_height: u32,
    /// Block hashes by height, base first.
    hashes: Vec<Hash256>,
    mempool_txid: Option<Hash256>,
    mempool_tx_hex: Option<String>,
    /// The tip's coinbase.
    coinbase_txid: Hash256,
    tip_hex: String,
    longpollid: String,
}

impl Known {
    fn of(node: &Node) -> Known {
        node.read(|n| {
            let chain = n.chain();
            let (base_height, tip_height) = (chain.base_height(), chain.tip_height());
            let hashes = (base_height..=tip_height)
                .map(|h| chain.hash_at(h).expect("a main-chain block"))
                .collect();
            let tip = n.tip();
            let mempool_txid = n.mempool().txids().first().copied();
            let mempool_tx_hex = mempool_txid
                .and_then(|t| n.raw_transaction(&t))
                .map(hex::encode);
            Known {
                base_height,
                tip_height,
                hashes,
                mempool_txid,
                mempool_tx_hex,
                coinbase_txid: tip.coinbase.compute_txid().into(),
                tip_hex: hex::encode(tip.serialize()),
                longpollid: methods::longpoll_id(n.template()),
            }
        })
    }
}

/// The endpoint's dispatch over one node, as `http` runs it.
struct Server {
    ctx: Arc<Ctx>,
    /// Kept so that long polls never see the server stop.
    _shutdown: watch::Sender<bool>,
    blocks_left: u64,
}

impl Server {
    fn new(node: Node) -> Server {
        let (tx, rx) = watch::channel(false);
        Server {
            ctx: Arc::new(Ctx::new(node, Duration::ZERO, rx)),
            _shutdown: tx,
            blocks_left: MAX_BLOCKS,
        }
    }

    fn answer(&mut self, body: &[u8]) -> HttpReply {
        let ctx = self.ctx.clone();
        let blocks_left = &mut self.blocks_left;
        runtime().block_on(respond(body, |mut call: Call| {
            cap_blocks(&mut call, blocks_left);
            let ctx = ctx.clone();
            async move { methods::execute(&ctx, call).await }
        }))
    }
}

/// Lowers a `generatetoaddress` request's block count to what is left of [`MAX_BLOCKS`].
fn cap_blocks(call: &mut Call, left: &mut u64) {
    if call.method != "generatetoaddress" {
        return;
    }
    let nblocks = match &mut call.params {
        Params::Positional(p) => p.get_mut(0),
        Params::Named(m) => {
            if m.contains_key("nblocks") {
                m.get_mut("nblocks")
            } else {
                m.get_mut("args")
                    .and_then(Value::as_array_mut)
                    .and_then(|a| a.get_mut(0))
            }
        }
    };
    if let Some(v) = nblocks {
        if let Some(n) = v.as_i64().filter(|&n| n > 0) {
            let n = (n as u64).min(*left);
            *left -= n;
            *v = json!(n);
        }
    }
}

// ---- An independent reading of the rules -------------------------------------------------

/// One request object as the rules read it.
#[derive(Clone, Debug)]
enum Elem {
    Call {
        id: Option<Value>,
        v2: bool,
        method: String,
        /// `null` or absent as `[]`.
        params: Value,
    },
    /// Could not be read: -32600 under what had been read.
    Bad { id: Option<Value>, v2: bool },
    /// Not an object at all.
    NotObject,
}

fn read_elem(v: &Value) -> Elem {
    let Value::Object(o) = v else {
        return Elem::NotObject;
    };
    let id = o.get("id").cloned();
    let v2 = match o.get("jsonrpc") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "1.0" => false,
        Some(Value::String(s)) if s == "2.0" => true,
        Some(_) => return Elem::Bad { id, v2: false },
    };
    let method = match o.get("method") {
        Some(Value::String(m)) => m.clone(),
        _ => return Elem::Bad { id, v2 },
    };
    let params = match o.get("params") {
        None | Some(Value::Null) => Value::Array(Vec::new()),
        Some(p @ (Value::Array(_) | Value::Object(_))) => p.clone(),
        Some(_) => return Elem::Bad { id, v2 },
    };
    Elem::Call {
        id,
        v2,
        method,
        params,
    }
}

/// A call's answer as the reply carried it.
type Answer = Result<Value, (i64, String)>;

/// JSON values equal but for the last digit of a float: an id that is not an integer, or one
/// past 64 bits, goes through an `f64`, and serde_json's float parsing (without its
/// `float_roundtrip` feature) may read the echo back one unit in the last place off.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x == y || (x - y).abs() <= x.abs().max(y.abs()) * 1e-15
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// Checks one reply object's shape for a request with `id` in its dialect; its answer.
fn reply_object(r: &Value, id: &Option<Value>, v2: bool) -> Answer {
    let Value::Object(o) = r else {
        panic!("a reply that is not an object: {r}");
    };
    let echoed = match (o.get("id"), id) {
        (Some(a), Some(b)) => same_json(a, b),
        (a, b) => a.is_none() && b.is_none(),
    };
    assert!(echoed, "reply id in {r}, asked with {id:?}");
    let error = o.get("error").filter(|e| !e.is_null());
    if v2 {
        assert_eq!(o.get("jsonrpc"), Some(&json!("2.0")), "2.0 reply {r}");
        let members = 1 + usize::from(id.is_some()) + 1;
        assert_eq!(o.len(), members, "2.0 reply {r}");
        assert!(
            o.contains_key("result") != o.contains_key("error"),
            "2.0 reply with result and error: {r}"
        );
    } else {
        assert!(!o.contains_key("jsonrpc"), "legacy reply {r}");
        assert!(o.contains_key("result") && o.contains_key("error"), "{r}");
        assert_eq!(o.len(), 2 + usize::from(id.is_some()), "legacy reply {r}");
        if error.is_some() {
            assert_eq!(o["result"], Value::Null, "legacy error with a result: {r}");
        }
    }
    match error {
        None => Ok(o.get("result").cloned().unwrap_or(Value::Null)),
        Some(Value::Object(e)) => {
            assert_eq!(e.len(), 2, "error object {r}");
            let code = e
                .get("code")
                .and_then(Value::as_i64)
                .expect("an integer code");
            let message = e.get("message").and_then(Value::as_str).expect("a message");
            assert!(!message.is_empty(), "an empty error message: {r}");
            assert_ne!(
                code,
                i64::from(RPC_INTERNAL_ERROR),
                "an internal error (a method failed or panicked): {r}"
            );
            Err((code, message.to_owned()))
        }
        Some(other) => panic!("error member {other} in {r}"),
    }
}

/// The codes a known method may fail with besides Core's argument codes.
fn method_codes(method: &str) -> &'static [i32] {
    match method {
        "getblock" | "getblockheader" | "getmempoolentry" | "generatetoaddress" => {
            &[RPC_INVALID_ADDRESS_OR_KEY]
        }
        "getrawtransaction" | "preciousblock" => &[RPC_INVALID_ADDRESS_OR_KEY],
        "getblocktemplate" | "submitblock" | "decoderawtransaction" => &[RPC_DESERIALIZATION_ERROR],
        "sendrawtransaction" => &[
            RPC_DESERIALIZATION_ERROR,
            RPC_VERIFY_ERROR,
            RPC_VERIFY_ALREADY_IN_CHAIN,
        ],
        _ => &[],
    }
}

fn check_codes(method: &str, answer: &Answer) {
    let Err((code, message)) = answer else {
        return;
    };
    let code = *code as i32;
    if spec(method).is_none() {
        assert_eq!(
            (code, message.as_str()),
            (RPC_METHOD_NOT_FOUND, "Method not found"),
            "unknown method {method:?}"
        );
        return;
    }
    let allowed = [RPC_MISC_ERROR, RPC_TYPE_ERROR, RPC_INVALID_PARAMETER];
    assert!(
        allowed.contains(&code) || method_codes(method).contains(&code),
        "{method} failed with code {code}: {message}"
    );
}

/// A reply element due: the request's id and dialect (2.0 or not), and the call it answers
/// (`None`: a -32600 for a request that could not be read).
type Expect = (Option<Value>, bool, Option<Elem>);

/// What the rules say a body gets: the status, and for each reply element the request it
/// answers (`None`: a -32600 for a request that could not be read).
struct Expected {
    status: u16,
    /// `None`: no body.
    elements: Option<Vec<Expect>>,
    /// A -32700 error (not JSON, or not an object or array) rather than elements.
    parse_error: Option<&'static str>,
    batch: bool,
}

fn expect(body: &[u8]) -> Expected {
    let parse_error = |m| Expected {
        status: 500,
        elements: None,
        parse_error: Some(m),
        batch: false,
    };
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return parse_error("Parse error");
    };
    match &v {
        Value::Array(items) => {
            let mut elements = Vec::new();
            let (mut last_id, mut last_v2) = (Some(Value::Null), false);
            for item in items {
                let e = read_elem(item);
                let (id, v2) = match &e {
                    Elem::Call { id, v2, .. } | Elem::Bad { id, v2 } => (id.clone(), *v2),
                    Elem::NotObject => (last_id.clone(), last_v2),
                };
                if !(id.is_none() && v2) {
                    let call = matches!(e, Elem::Call { .. }).then_some(e);
                    elements.push((id.clone(), v2, call));
                }
                (last_id, last_v2) = (id, v2);
            }
            let none = elements.is_empty() && !items.is_empty();
            Expected {
                status: if none { 204 } else { 200 },
                elements: (!none).then_some(elements),
                parse_error: None,
                batch: true,
            }
        }
        Value::Object(_) => {
            let e = read_elem(&v);
            match &e {
                Elem::Call { id, v2, .. } => {
                    if id.is_none() && *v2 {
                        return Expected {
                            status: 204,
                            elements: None,
                            parse_error: None,
                            batch: false,
                        };
                    }
                    // The status depends on the answer: settled by the caller.
                    Expected {
                        status: 0,
                        elements: Some(vec![(id.clone(), *v2, Some(e.clone()))]),
                        parse_error: None,
                        batch: false,
                    }
                }
                Elem::Bad { id, v2 } => Expected {
                    status: 400,
                    elements: Some(vec![(id.clone(), *v2, None)]),
                    parse_error: None,
                    batch: false,
                },
                Elem::NotObject => unreachable!("an object"),
            }
        }
        _ => parse_error("Top-level object parse error"),
    }
}

/// Checks a reply against the rules; each call's answer, in reply order, with its request.
fn check_reply(body: &[u8], reply: &HttpReply) -> Vec<(Elem, Answer)> {
    let e = expect(body);
    let Some(text) = &reply.body else {
        assert_eq!(reply.status, 204, "no body with status {}", reply.status);
        assert!(e.elements.is_none() && e.parse_error.is_none(), "no reply");
        assert_eq!(e.status, 204);
        return Vec::new();
    };
    assert!(text.ends_with('\n'), "a reply without its newline");
    let r: Value = serde_json::from_str(text).expect("the reply is JSON");
    if let Some(message) = e.parse_error {
        assert_eq!(reply.status, 500);
        assert_eq!(
            r,
            json!({"result": null, "error": {"code": RPC_PARSE_ERROR, "message": message}, "id": null})
        );
        return Vec::new();
    }
    let elements = e.elements.expect("a reply was due");
    let replies: Vec<&Value> = if e.batch {
        assert_eq!(reply.status, 200);
        r.as_array()
            .expect("a batch reply is an array")
            .iter()
            .collect()
    } else {
        vec![&r]
    };
    assert_eq!(replies.len(), elements.len(), "one reply per request: {r}");
    let mut calls = Vec::new();
    for ((id, v2, call), r) in elements.into_iter().zip(replies) {
        let answer = reply_object(r, &id, v2);
        match call {
            None => {
                let (code, _) = answer.as_ref().expect_err("a request that cannot be read");
                assert_eq!(*code, i64::from(RPC_INVALID_REQUEST), "{r}");
                if !e.batch {
                    assert_eq!(reply.status, 400);
                }
            }
            Some(call) => {
                let Elem::Call { method, .. } = &call else {
                    unreachable!("calls only")
                };
                check_codes(method, &answer);
                if !e.batch {
                    let status = match (&answer, v2) {
                        (Ok(_), _) | (Err(_), true) => 200,
                        (Err((code, _)), false) => legacy_error_status(*code as i32),
                    };
                    assert_eq!(reply.status, status, "{r}");
                }
                calls.push((call, answer));
            }
        }
    }
    calls
}

/// `params` by name: all of them, through `args`, or the first `split` through `args` and
/// the rest by name. `None` where positional parameters cannot be named (too many).
fn named(method: &str, params: &[Value], how: u8) -> Option<Value> {
    let names: Vec<&str> = spec(method)?.arg_names().collect();
    if how % 3 == 1 || params.len() > names.len() {
        return Some(json!({ "args": params }));
    }
    let split = if how.is_multiple_of(3) {
        0
    } else {
        usize::from(how) % (params.len() + 1)
    };
    let mut m = Map::new();
    if split > 0 {
        m.insert("args".into(), Value::Array(params[..split].to_vec()));
    }
    for (name, v) in names.iter().zip(params).skip(split) {
        m.insert((*name).to_owned(), v.clone());
    }
    Some(Value::Object(m))
}

/// The single answer of a body made of one call.
fn single(server: &mut Server, request: &Value) -> Answer {
    let body = serde_json::to_vec(request).expect("JSON");
    let reply = server.answer(&body);
    let mut calls = check_reply(&body, &reply);
    assert_eq!(calls.len(), 1, "one answer for {request}");
    calls.pop().expect("one").1
}

/// The same call in every form answers the same.
fn round_trip(server: &mut Server, method: &str, params: &Value, how: u8) -> Answer {
    let v2 = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let first = single(server, &v2);
    let legacy = json!({"id": "x", "method": method, "params": params});
    assert_eq!(single(server, &legacy), first, "{method} as legacy");
    let body = serde_json::to_vec(&json!([v2])).expect("JSON");
    let reply = server.answer(&body);
    let calls = check_reply(&body, &reply);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1, first, "{method} in a batch");
    if let Value::Array(p) = params {
        for how in [how, how.wrapping_add(1), how.wrapping_add(2)] {
            if let Some(n) = named(method, p, how) {
                let r = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": n});
                assert_eq!(single(server, &r), first, "{method} with {n} for {params}");
            }
        }
    }
    first
}

// ---- Building bodies -----------------------------------------------------------------------

/// What an argument is.
#[derive(Clone, Copy)]
enum Kind {
    BlockHash,
    MempoolTxid,
    AnyTxid,
    Verbosity,
    Height,
    Bool,
    MethodName,
    Address,
    Blocks,
    TemplateRequest,
    Lookup,
    BlockHex,
    TxHex,
    Amount,
    Str,
    ConfTarget,
    EstimateMode,
}

/// Each method's arguments, as the harness builds them (an independent list: a method whose
/// arguments differ from Core's shows up as valid calls that fail).
fn arguments(method: &str) -> &'static [Kind] {
    use Kind::*;
    match method {
        "getblock" => &[BlockHash, Verbosity],
        "getblockhash" => &[Height],
        "getblockheader" => &[BlockHash, Bool],
        "getmempoolentry" => &[MempoolTxid],
        "getrawmempool" => &[Bool, Bool],
        "help" => &[MethodName],
        "generatetoaddress" => &[Blocks, Address, Blocks],
        "getblocktemplate" => &[TemplateRequest],
        "getnetworkhashps" => &[Lookup, Height],
        "submitblock" => &[BlockHex, Str],
        "getrawtransaction" => &[AnyTxid, Verbosity, BlockHash],
        "sendrawtransaction" => &[TxHex, Amount, Amount],
        "validateaddress" => &[Address],
        "decoderawtransaction" => &[TxHex, Bool],
        "preciousblock" => &[BlockHash],
        "estimatesmartfee" => &[ConfTarget, EstimateMode],
        _ => &[],
    }
}

/// Builds bodies from the input's choices.
struct Gen<'a, 'k> {
    input: Input<'a>,
    known: &'k Known,
    /// A call of the body may change the node.
    changing: bool,
}

impl Gen<'_, '_> {
    /// A value of any JSON type, mostly not what any argument wants.
    fn junk(&mut self) -> Value {
        match self.input.u8() % 12 {
            0 => Value::Null,
            1 => json!(true),
            2 => json!(-1),
            3 => json!(1.5),
            4 => json!(u64::MAX),
            5 => json!(i64::MIN),
            6 => json!(""),
            7 => json!("zz"),
            8 => json!([]),
            9 => json!({}),
            10 => json!(self.input.u32()),
            _ => json!("0".repeat(64)),
        }
    }

    /// A value for `kind`: one that fits, or (`ok` false) one that may not.
    fn value(&mut self, kind: Kind) -> (Value, bool) {
        let b = self.input.u8();
        if b >= 0xc0 {
            return (self.junk(), false);
        }
        let k = self.known;
        let pick = usize::from(self.input.u8());
        let fits = match kind {
            Kind::BlockHash => json!(k.hashes[pick % k.hashes.len()].to_string()),
            Kind::MempoolTxid => match k.mempool_txid {
                Some(t) => json!(t.to_string()),
                None => return (json!("00"), false),
            },
            Kind::AnyTxid => match (pick % 2, k.mempool_txid) {
                (0, Some(t)) => json!(t.to_string()),
                _ => json!(k.coinbase_txid.to_string()),
            },
            Kind::Verbosity => match pick % 6 {
                4 => json!(true),
                5 => json!(false),
                v => json!(v),
            },
            Kind::Height => {
                let span = k.tip_height - k.base_height + 1;
                json!(k.base_height + pick as u32 % span)
            }
            Kind::Bool => json!(pick % 2 == 0),
            Kind::MethodName => {
                let names = super::method_names();
                json!(names[pick % names.len()])
            }
            Kind::Address => json!(ADDRESS),
            Kind::Blocks => {
                self.changing = true;
                json!(pick % 3)
            }
            Kind::TemplateRequest => match pick % 4 {
                0 => json!({"rules": ["segwit"]}),
                1 => json!({"rules": ["csv", "segwit"], "longpollid": k.longpollid}),
                2 => json!({"mode": "template", "rules": ["segwit"], "capabilities": ["proposal"]}),
                // A proposal of a block the node holds: "duplicate".
                _ => json!({"mode": "proposal", "data": k.tip_hex}),
            },
            Kind::Lookup => match pick % 3 {
                0 => json!(-1),
                1 => json!(120),
                _ => json!(1 + pick % 4),
            },
            Kind::BlockHex => {
                self.changing = true;
                json!(k.tip_hex)
            }
            Kind::TxHex => match &k.mempool_tx_hex {
                Some(t) => json!(t),
                None => return (json!("00"), false),
            },
            Kind::Amount => match pick % 3 {
                0 => json!(0.1),
                1 => json!("0.10"),
                _ => json!(0),
            },
            Kind::Str => json!("x"),
            Kind::ConfTarget => json!(1 + pick * 4),
            Kind::EstimateMode => match pick % 4 {
                0 => json!("unset"),
                1 => json!("ECONOMICAL"),
                2 => json!("conservative"),
                _ => json!("economical"),
            },
        };
        match b % 8 {
            // Mostly what fits.
            0..=5 => (fits, true),
            // Its text altered: a short, long or non-hex string.
            6 => match fits {
                Value::String(s) => {
                    let cut = pick % (s.len() + 1);
                    (json!(format!("{}g{}", &s[..cut], &s[cut..])), false)
                }
                other => (json!(other.to_string()), false),
            },
            // Or the right kind of value that names nothing held.
            _ => match fits {
                Value::String(s) if s.len() == 64 => (json!(Hash256([b; 32]).to_string()), false),
                Value::Number(_) => (json!(i64::from(self.input.u32() as i32)), false),
                other => (other, true),
            },
        }
    }

    /// The parameters of one call of `method`, and whether they all fit.
    fn params(&mut self, method: &str) -> (Vec<Value>, bool) {
        let kinds = arguments(method);
        let shape = self.input.u8();
        let mut params = Vec::new();
        let mut ok = true;
        for &kind in kinds {
            let (v, fits) = self.value(kind);
            ok &= fits;
            params.push(v);
        }
        match shape % 8 {
            // Only the required ones (optional ones dropped from the end).
            0 => {
                let required = match method {
                    "getblock" | "getblockheader" | "submitblock" | "getrawtransaction"
                    | "sendrawtransaction" => 1,
                    "generatetoaddress" => 2,
                    "getblockhash" | "getmempoolentry" | "validateaddress" => 1,
                    "decoderawtransaction" | "preciousblock" | "estimatesmartfee" => 1,
                    _ => 0,
                };
                params.truncate(required);
            }
            // One too few, or one too many.
            1 if !params.is_empty() => {
                params.pop();
                ok = false;
            }
            2 => {
                params.push(self.junk());
                ok = false;
            }
            // Optional ones as null.
            3 => {
                if let Some(last) = params.last_mut() {
                    if kinds.len() > 1 {
                        *last = Value::Null;
                    }
                }
            }
            // Every one replaced by anything.
            4 => {
                for p in &mut params {
                    *p = self.junk();
                }
                ok = params.is_empty();
            }
            _ => {}
        }
        // The harness's own oddities: getrawtransaction's block must hold the transaction.
        if method == "getrawtransaction" && params.len() > 2 && !params[2].is_null() {
            ok = false;
        }
        // A template must be asked for with the segwit rule (Core's rule too).
        if method == "getblocktemplate" && params.first().is_none_or(Value::is_null) {
            ok = false;
        }
        // Simulated transactions have witnesses: their legacy serialization does not decode.
        if method == "decoderawtransaction" && params.get(1) == Some(&json!(false)) {
            ok = false;
        }
        // Verbose answers cannot carry the mempool sequence (Core's rule).
        if method == "getrawmempool"
            && params.first() == Some(&json!(true))
            && params.get(1) == Some(&json!(true))
        {
            ok = false;
        }
        (params, ok)
    }

    /// One request object; whether it is a valid call that must succeed.
    fn request(&mut self) -> (Value, bool) {
        let wrapper = self.input.u8();
        let names = super::method_names();
        let m = usize::from(self.input.u8()) % (names.len() + 2);
        let method = match m.checked_sub(names.len()) {
            None => names[m],
            Some(0) => "getblocks",
            Some(_) => "",
        };
        let (params, mut ok) = self.params(method);
        ok &= spec(method).is_some();
        if CHANGING.contains(&method) {
            self.changing = true;
        }
        let params = match (wrapper >> 3) % 4 {
            0 => Value::Array(params),
            1 | 2 => named(method, &params, wrapper >> 5).unwrap_or(Value::Array(params)),
            _ if params.is_empty() => Value::Null,
            _ => Value::Array(params),
        };
        let mut o = Map::new();
        match wrapper % 8 {
            0 => {
                o.insert("id".into(), json!(self.input.u8()));
            }
            1 => {
                o.insert("jsonrpc".into(), json!("2.0"));
                o.insert("id".into(), json!(format!("r{}", self.input.u8())));
            }
            // A notification: executed, not answered.
            2 => {
                o.insert("jsonrpc".into(), json!("2.0"));
                ok = false;
            }
            3 => {}
            4 => {
                o.insert("jsonrpc".into(), json!("1.0"));
                o.insert("id".into(), Value::Null);
            }
            5 => {
                let version = self.junk();
                o.insert("jsonrpc".into(), version);
                o.insert("id".into(), json!(1));
                ok = false;
            }
            6 => {
                o.insert("id".into(), json!([1]));
                o.insert("method".into(), self.junk());
                o.insert("params".into(), params);
                return (Value::Object(o), false);
            }
            _ => {
                o.insert("id".into(), json!(7));
                o.insert("method".into(), json!(method));
                o.insert("params".into(), self.junk());
                return (Value::Object(o), false);
            }
        }
        o.insert("method".into(), json!(method));
        if !params.is_null() || self.input.u8().is_multiple_of(2) {
            o.insert("params".into(), params);
        }
        (Value::Object(o), ok)
    }

    /// A body, and for each request in it whether it must succeed.
    fn body(&mut self) -> (Value, Vec<bool>) {
        match self.input.u8() % 8 {
            0..=4 => {
                let (r, ok) = self.request();
                (r, vec![ok])
            }
            5 | 6 => {
                let n = usize::from(self.input.u8()) % MAX_BATCH;
                let mut items = Vec::new();
                let mut oks = Vec::new();
                for _ in 0..n {
                    if self.input.u8().is_multiple_of(8) {
                        items.push(self.junk());
                        oks.push(false);
                    } else {
                        let (r, ok) = self.request();
                        items.push(r);
                        oks.push(ok);
                    }
                }
                (Value::Array(items), oks)
            }
            _ => (self.junk(), vec![false]),
        }
    }
}

/// One input: see the module documentation. Never panics unless an invariant breaks.
pub fn request(data: &[u8]) {
    let node = node();
    let known = Known::of(&node);
    let mut server = Server::new(node);
    let (&mode, rest) = data.split_first().unwrap_or((&0, &[]));
    let (body, valid, changing) = if mode < 0x80 {
        (rest.to_vec(), Vec::new(), true)
    } else {
        let mut g = Gen {
            input: Input::new(rest),
            known: &known,
            changing: false,
        };
        let (v, valid) = g.body();
        let changing = g.changing;
        (serde_json::to_vec(&v).expect("JSON"), valid, changing)
    };
    let reply = server.answer(&body);
    let calls = check_reply(&body, &reply);

    // Calls built from values that fit succeed. (Requests map to answers in order, but for
    // notifications, which get none: matched by re-reading the body.)
    if !changing && !valid.is_empty() {
        let requests: Vec<Value> = match serde_json::from_slice(&body).expect("built JSON") {
            Value::Array(a) => a,
            v => vec![v],
        };
        let mut answers = calls.iter();
        for (r, ok) in requests.iter().zip(&valid) {
            let e = read_elem(r);
            let answered = match &e {
                Elem::Call { id, v2, .. } | Elem::Bad { id, v2 } => !(id.is_none() && *v2),
                Elem::NotObject => true,
            };
            if !matches!(e, Elem::Call { .. }) || !answered {
                continue;
            }
            let (_, answer) = answers.next().expect("an answer per call");
            assert!(
                !*ok || answer.is_ok(),
                "a valid call failed: {r} -> {answer:?}"
            );
        }
    }

    // Round trips of the calls that only read.
    let mut budget = MAX_ROUND_TRIPS;
    for (i, (call, answer)) in calls.iter().enumerate() {
        let Elem::Call { method, params, .. } = call else {
            continue;
        };
        if budget == 0 || !READ_ONLY.contains(&method.as_str()) {
            continue;
        }
        budget -= 1;
        let again = round_trip(&mut server, method, params, i as u8);
        if !changing {
            assert_eq!(&again, answer, "{method} {params} answered otherwise alone");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(body: &str) -> Vec<u8> {
        let mut d = vec![0];
        d.extend_from_slice(body.as_bytes());
        d
    }

    #[test]
    fn bodies_of_every_kind_hold_the_invariants() {
        for body in [
            "",
            "not json",
            "42",
            "[]",
            "[1, 2]",
            r#"{"method":"getblockcount"}"#,
            r#"{"jsonrpc":"2.0","method":"getblockcount"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"getblockhash","params":[900001]}"#,
            r#"{"id":1,"method":"getblockhash","params":{"height":900001}}"#,
            r#"{"id":1,"method":"getblock","params":{"args":["00"],"verbosity":0}}"#,
            r#"[{"jsonrpc":"2.0","method":"ping"},17,{"id":2,"method":"nope"}]"#,
            r#"{"id":1,"method":"generatetoaddress","params":[2147483647,"bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080"]}"#,
            r#"{"id":1,"method":"getblocktemplate","params":[{"rules":["segwit"],"longpollid":"00"}]}"#,
            r#"{"id":1,"method":"submitblock","params":["00"]}"#,
            r#"{"jsonrpc":3,"id":1,"method":"ping"}"#,
        ] {
            request(&raw(body));
        }
    }

    #[test]
    fn built_bodies_hold_the_invariants() {
        for seed in 0u8..=255 {
            let data: Vec<u8> = std::iter::once(0x80)
                .chain(
                    (0..64u8).map(|i| seed.wrapping_mul(31).wrapping_add(i.wrapping_mul(seed | 1))),
                )
                .collect();
            request(&data);
        }
    }
}
