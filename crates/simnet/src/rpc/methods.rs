//! The methods over a [`Node`], and the dispatch that runs one call: method lookup, Core's
//! argument handling (`args`), the method.
//!
//! Reads take the network's lock only to copy out what they need (mostly `Arc`s); JSON is built
//! after it is released. Work that may take a while (a 4 MB block to check, a template's 4 MB of
//! transactions to hex, blocks to mine) runs on tokio's blocking pool, so a slow call never
//! holds up the server's other connections.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use primitives::bitcoin::consensus::Decodable;
use primitives::bitcoin::{Address, Network as BtcNetwork, Transaction};
use primitives::{CompactTarget, Difficulty, Hash256, Target, Work};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use super::args::{help_all, help_text, parse_hash, prepare, spec, wrong_type, Args, SPECS};
use super::json_types::*;
use super::jsonrpc::*;
use crate::chain::StoredBlock;
use crate::mempool::TxEntry;
use crate::node::Node;
use crate::template::Template;
use crate::view::NodeView;

/// What the methods run against.
pub(crate) struct Ctx {
    pub node: Node,
    pub longpoll_timeout: Duration,
    /// Turns true when the server stops: long polls return at once.
    pub shutdown: watch::Receiver<bool>,
    /// The `transactions` array of the latest template asked for, by template id: pools poll
    /// `getblocktemplate`, and the array (hex of up to 4 MB of transactions) only changes with
    /// the template.
    gbt_txs: Mutex<Option<(u64, Arc<RawValue>)>>,
}

impl Ctx {
    pub(crate) fn new(
        node: Node,
        longpoll_timeout: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Ctx {
            node,
            longpoll_timeout,
            shutdown,
            gbt_txs: Mutex::new(None),
        }
    }
}

// ---- Dispatch ---------------------------------------------------------------------------

type RpcResult = Result<Box<RawValue>, RpcError>;

fn to_raw<T: Serialize + ?Sized>(v: &T) -> RpcResult {
    serde_json::value::to_raw_value(v).map_err(|e| RpcError::new(RPC_INTERNAL_ERROR, e.to_string()))
}

/// Runs one call: method lookup, argument handling, the method.
pub(crate) async fn execute(ctx: &Arc<Ctx>, call: Call) -> RpcResult {
    let s = spec(&call.method).ok_or_else(RpcError::method_not_found)?;
    let args = prepare(s, call.params)?;
    match s.name {
        "getblocktemplate" => getblocktemplate(ctx, args).await,
        "generatetoaddress" => generatetoaddress(ctx, args).await,
        name => {
            let ctx = ctx.clone();
            blocking(move || sync_method(&ctx, name, &args)).await
        }
    }
}

async fn blocking<F>(f: F) -> RpcResult
where
    F: FnOnce() -> RpcResult + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        // A panic in a method is a bug; the client gets an error and the server goes on.
        tracing::error!(error = %e, "RPC method panicked");
        Err(RpcError::new(RPC_INTERNAL_ERROR, "Internal error"))
    })
}

fn sync_method(ctx: &Ctx, name: &str, args: &Args) -> RpcResult {
    let node = &ctx.node;
    match name {
        "getbestblockhash" => to_raw(&node.read(|n| n.tip().hash).to_string()),
        "getblockcount" => to_raw(&node.read(|n| n.height())),
        "getblockhash" => getblockhash(node, args),
        "getblock" => getblock(node, args),
        "getblockheader" => getblockheader(node, args),
        "getblockchaininfo" => getblockchaininfo(node),
        "getdifficulty" => to_raw(&node.read(|n| n.difficulty().as_f64())),
        "getmempoolentry" => getmempoolentry(node, args),
        "getmempoolinfo" => getmempoolinfo(node),
        "getrawmempool" => getrawmempool(node, args),
        "getrpcinfo" => to_raw(
            &json!({"active_commands": [{"method": "getrpcinfo", "duration": 0}], "logpath": ""}),
        ),
        "help" => help(args),
        "uptime" => to_raw(&node.now().as_secs()),
        "getmininginfo" => getmininginfo(node),
        "getnetworkhashps" => getnetworkhashps(node, args),
        "submitblock" => submitblock(node, args),
        "getconnectioncount" => to_raw(&CONNECTIONS_OUT),
        "getnetworkinfo" => getnetworkinfo(),
        "ping" => to_raw(&()),
        "getrawtransaction" => getrawtransaction(node, args),
        "sendrawtransaction" => sendrawtransaction(node, args),
        "validateaddress" => validateaddress(args),
        "decoderawtransaction" => decoderawtransaction(args),
        "preciousblock" => preciousblock(node, args),
        "getpeerinfo" => getpeerinfo(node),
        "estimatesmartfee" => estimatesmartfee(node, args),
        "getzmqnotifications" => getzmqnotifications(node),
        _ => Err(RpcError::method_not_found()),
    }
}

// ---- Blockchain ---------------------------------------------------------------------------

/// Total work of a chain whose blocks all have `target`, up to and including `height`, as if
/// it had started at genesis with this target: simnet holds no older blocks, and the number
/// only needs to grow by one block's work per block, as Core's does.
fn chainwork(target: Target, height: u32) -> String {
    let per_block = Work::from_target(target).as_u256();
    let total = per_block
        .checked_mul_u64(height as u64 + 1)
        .unwrap_or(primitives::U256::MAX);
    hex::encode(total.to_be_bytes())
}

fn difficulty_of(bits: CompactTarget) -> f64 {
    Target::from_compact(bits).map_or(0.0, |t| Difficulty::from_target(t).as_f64())
}

/// What `blockheaderToJSON` needs from the chain, read under the lock.
struct HeaderCtx {
    confirmations: i64,
    mediantime: u32,
    next: Option<Hash256>,
}

/// The synthetic blocks below the start height count as main-chain blocks like any other.
fn header_ctx(net: &NodeView<'_>, b: &StoredBlock) -> HeaderCtx {
    let chain = net.chain();
    let main = chain.any_is_main(&b.hash);
    HeaderCtx {
        confirmations: if main {
            (chain.tip_height() - b.height) as i64 + 1
        } else {
            -1
        },
        mediantime: chain.any_median_time_past(&b.hash).unwrap_or(b.time()),
        next: if main {
            chain.any_hash_at(b.height + 1)
        } else {
            None
        },
    }
}

fn header_json(b: &StoredBlock, c: &HeaderCtx) -> HeaderJson {
    let h = &b.header;
    HeaderJson {
        hash: b.hash.to_string(),
        confirmations: c.confirmations,
        height: b.height,
        version: h.version as i32,
        versionHex: format!("{:08x}", h.version),
        merkleroot: h.merkle_root.to_string(),
        time: h.time,
        mediantime: c.mediantime,
        nonce: h.nonce,
        bits: h.bits.to_string(),
        difficulty: difficulty_of(h.bits),
        chainwork: chainwork(
            Target::from_compact(h.bits).unwrap_or(Target::MAX),
            b.height,
        ),
        nTx: b.tx_count(),
        // Like Core's genesis block, a block at height 0 has no previous block.
        previousblockhash: (b.height > 0).then(|| h.prev_hash.to_string()),
        nextblockhash: c.next.map(|h| h.to_string()),
    }
}

fn block_not_found() -> RpcError {
    RpcError::new(RPC_INVALID_ADDRESS_OR_KEY, "Block not found")
}

/// A block simnet holds or one of the synthetic history below its start height.
fn lookup_block(node: &Node, hash: &Hash256) -> Result<(Arc<StoredBlock>, HeaderCtx), RpcError> {
    node.read(|n| {
        n.chain()
            .any_block(hash)
            .map(|b| (b.clone(), header_ctx(n, b)))
    })
    .ok_or_else(block_not_found)
}

fn getblockhash(node: &Node, args: &Args) -> RpcResult {
    let height = args.int::<i32>(0)?.unwrap_or(-1);
    let hash = u32::try_from(height)
        .ok()
        .and_then(|h| node.read(|n| n.chain().any_hash_at(h)));
    // Heights below the synthetic history are out of range too.
    let hash =
        hash.ok_or_else(|| RpcError::new(RPC_INVALID_PARAMETER, "Block height out of range"))?;
    to_raw(&hash.to_string())
}

fn getblockheader(node: &Node, args: &Args) -> RpcResult {
    let hash = parse_hash(args.req_str(0)?, "hash")?;
    let verbose = args.bool(1)?.unwrap_or(true);
    let (b, c) = lookup_block(node, &hash)?;
    if verbose {
        to_raw(&header_json(&b, &c))
    } else {
        to_raw(&hex::encode(b.header.to_bytes()))
    }
}

fn getblock(node: &Node, args: &Args) -> RpcResult {
    let hash = parse_hash(args.req_str(0)?, "blockhash")?;
    let verbosity = args.verbosity(1, 1)?;
    let (b, c) = lookup_block(node, &hash)?;
    if verbosity <= 0 {
        return to_raw(&hex::encode(b.serialize()));
    }
    let header = header_json(&b, &c);
    // Stripped size: weight = 3 * stripped + total.
    let strippedsize = (b.weight as usize).saturating_sub(b.size) / 3;
    if verbosity == 1 {
        to_raw(&BlockJson {
            header,
            strippedsize,
            size: b.size,
            weight: b.weight,
            tx: b.txids().iter().map(|t| t.to_string()).collect(),
        })
    } else {
        let mut tx = Vec::with_capacity(b.tx_count());
        tx.push(TxJson::new(&b.coinbase, None));
        tx.extend(b.txs.iter().map(|e| TxJson::new(&e.tx, Some(e.fee))));
        to_raw(&BlockJson {
            header,
            strippedsize,
            size: b.size,
            weight: b.weight,
            tx,
        })
    }
}

fn getblockchaininfo(node: &Node) -> RpcResult {
    #[derive(Serialize)]
    struct Info {
        chain: &'static str,
        blocks: u32,
        headers: u32,
        bestblockhash: String,
        bits: String,
        target: String,
        difficulty: f64,
        time: u32,
        mediantime: u32,
        verificationprogress: f64,
        initialblockdownload: bool,
        chainwork: String,
        size_on_disk: u64,
        pruned: bool,
        warnings: [&'static str; 0],
    }
    let info = node.read(|n| {
        let tip = n.tip();
        let chain = n.chain();
        let size_on_disk = (chain.base_height()..=chain.tip_height())
            .filter_map(|h| chain.hash_at(h).and_then(|x| chain.block(&x)))
            .map(|b| b.size as u64)
            .sum();
        Info {
            chain: n.chain_name(),
            blocks: tip.height,
            headers: tip.height,
            bestblockhash: tip.hash.to_string(),
            bits: n.bits().to_string(),
            target: n.target().to_string(),
            difficulty: n.difficulty().as_f64(),
            time: tip.time(),
            mediantime: n.median_time_past(),
            verificationprogress: 1.0,
            initialblockdownload: false,
            chainwork: chainwork(n.target(), tip.height),
            size_on_disk,
            pruned: false,
            warnings: [],
        }
    });
    to_raw(&info)
}

/// Core would make the block the tip if it has as much work as the tip; simnet keeps the
/// first-seen block among equals (what Core does without the call), so only the lookup is
/// Core's.
fn preciousblock(node: &Node, args: &Args) -> RpcResult {
    let hash = parse_hash(args.req_str(0)?, "blockhash")?;
    lookup_block(node, &hash)?;
    to_raw(&())
}

fn mempool_entry_json(e: &TxEntry, unix_time: u64, height: u32) -> MempoolEntryJson {
    MempoolEntryJson {
        vsize: e.vsize,
        weight: e.weight,
        time: unix_time,
        height,
        // No simulated transaction has a relative in the mempool: each is its own package.
        descendantcount: 1,
        descendantsize: e.vsize,
        ancestorcount: 1,
        ancestorsize: e.vsize,
        wtxid: e.wtxid.to_string(),
        fees: MempoolFeesJson {
            base: Btc(e.fee),
            modified: Btc(e.fee),
            ancestor: Btc(e.fee),
            descendant: Btc(e.fee),
        },
        depends: Vec::new(),
        spentby: Vec::new(),
        bip125_replaceable: e.tx.input.iter().any(|i| i.sequence.0 < 0xffff_fffe),
        unbroadcast: false,
    }
}

/// The mempool's entries with their arrival time in Unix seconds, and the tip height (simnet
/// does not record the height a transaction arrived at; the tip's is the closest it knows).
fn mempool_snapshot(node: &Node, only: Option<&Hash256>) -> (Vec<(Arc<TxEntry>, u64)>, u32) {
    node.read(|n| {
        let with_time = |e: &Arc<TxEntry>| (e.clone(), n.unix_time(e.time));
        let entries = match only {
            Some(txid) => n.mempool_entry(txid).map(with_time).into_iter().collect(),
            None => n.mempool().iter_by_fee_rate().map(with_time).collect(),
        };
        (entries, n.height())
    })
}

fn getmempoolentry(node: &Node, args: &Args) -> RpcResult {
    let txid = parse_hash(args.req_str(0)?, "parameter 1")?;
    let (entries, height) = mempool_snapshot(node, Some(&txid));
    let (e, t) = entries
        .first()
        .ok_or_else(|| RpcError::new(RPC_INVALID_ADDRESS_OR_KEY, "Transaction not in mempool"))?;
    to_raw(&mempool_entry_json(e, *t, height))
}

fn getrawmempool(node: &Node, args: &Args) -> RpcResult {
    let verbose = args.bool(0)?.unwrap_or(false);
    let sequence = args.bool(1)?.unwrap_or(false);
    if verbose && sequence {
        return Err(RpcError::new(
            RPC_INVALID_PARAMETER,
            "Verbose results cannot contain mempool sequence values.",
        ));
    }
    if sequence {
        #[derive(Serialize)]
        struct WithSequence {
            txids: Vec<String>,
            mempool_sequence: u64,
        }
        let (txids, mempool_sequence) =
            node.read(|n| (n.mempool().txids(), n.mempool().sequence()));
        return to_raw(&WithSequence {
            txids: txids.iter().map(|t| t.to_string()).collect(),
            mempool_sequence,
        });
    }
    if !verbose {
        return to_raw(
            &node
                .read(|n| n.mempool().txids())
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>(),
        );
    }
    let (entries, height) = mempool_snapshot(node, None);
    // Serialized as a map in fee-rate order (JSON object member order carries no meaning).
    let mut out = String::with_capacity(entries.len() * 400 + 2);
    out.push('{');
    for (i, (e, t)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let entry = serde_json::to_string(&mempool_entry_json(e, *t, height))
            .map_err(|e| RpcError::new(RPC_INTERNAL_ERROR, e.to_string()))?;
        write!(out, "\"{}\":{}", e.txid, entry).unwrap();
    }
    out.push('}');
    RawValue::from_string(out).map_err(|e| RpcError::new(RPC_INTERNAL_ERROR, e.to_string()))
}

/// Core's defaults: `-minrelaytxfee` and `-incrementalrelayfee` 1,000 sat/kvB.
const MIN_RELAY_FEE_SAT_PER_KVB: u64 = 1_000;

fn getmempoolinfo(node: &Node) -> RpcResult {
    #[derive(Serialize)]
    struct Info {
        loaded: bool,
        size: usize,
        bytes: u64,
        usage: u64,
        total_fee: Btc,
        maxmempool: u64,
        mempoolminfee: Btc,
        minrelaytxfee: Btc,
        incrementalrelayfee: Btc,
        unbroadcastcount: u32,
        fullrbf: bool,
    }
    let info = node.read(|n| {
        let m = n.mempool();
        Info {
            loaded: true,
            size: m.len(),
            bytes: m.total_vsize(),
            // Memory use runs at about three bytes per virtual byte in Core.
            usage: m.total_vsize() * 3,
            total_fee: Btc(m.total_fees()),
            maxmempool: n.config().mempool.max_vsize * 3,
            mempoolminfee: Btc(MIN_RELAY_FEE_SAT_PER_KVB),
            minrelaytxfee: Btc(MIN_RELAY_FEE_SAT_PER_KVB),
            incrementalrelayfee: Btc(MIN_RELAY_FEE_SAT_PER_KVB),
            unbroadcastcount: 0,
            fullrbf: true,
        }
    });
    to_raw(&info)
}

fn help(args: &Args) -> RpcResult {
    match args.str(0)? {
        None => to_raw(&help_all()),
        Some(cmd) => match spec(cmd) {
            Some(s) => to_raw(&help_text(s)),
            None => to_raw(&format!("help: unknown command: {cmd}")),
        },
    }
}

// ---- Mining ---------------------------------------------------------------------------

fn getmininginfo(node: &Node) -> RpcResult {
    #[derive(Serialize)]
    struct Info {
        blocks: u32,
        currentblockweight: u64,
        currentblocktx: usize,
        difficulty: f64,
        networkhashps: f64,
        pooledtx: usize,
        chain: &'static str,
        warnings: [&'static str; 0],
    }
    let info = node.read(|n| {
        let t = n.template();
        Info {
            blocks: n.height(),
            // Core counts the weight its assembler reserved for the coinbase in.
            currentblockweight: t.tx_weight + n.config().coinbase_reserved_weight,
            currentblocktx: t.tx_count(),
            difficulty: n.difficulty().as_f64(),
            networkhashps: network_hash_ps(n, 120, None).unwrap_or(0.0),
            pooledtx: n.mempool().len(),
            chain: n.chain_name(),
            warnings: [],
        }
    });
    to_raw(&info)
}

/// Core's `GetNetworkHashPS`: the work of the last `lookup` blocks over the span of their times.
fn network_hash_ps(n: &NodeView<'_>, lookup: i64, height: Option<u32>) -> Result<f64, RpcError> {
    let chain = n.chain();
    let height = height.unwrap_or(chain.tip_height());
    let Some(tip) = chain.any_hash_at(height).and_then(|h| chain.any_block(&h)) else {
        return Err(RpcError::new(
            RPC_INVALID_PARAMETER,
            "Invalid height. Must be -1 or a non-negative number within current chain height.",
        ));
    };
    // Only blocks simnet has, synthetic history included, can be looked back over.
    let held = (tip.height - chain.first_height()) as i64;
    let lookup = if lookup == -1 {
        (tip.height % 2016) as i64 + 1
    } else {
        lookup
    }
    .min(held);
    let (mut min, mut max) = (tip.time(), tip.time());
    for h in (tip.height - lookup as u32..tip.height).rev() {
        if let Some(b) = chain.any_hash_at(h).and_then(|x| chain.any_block(&x)) {
            min = min.min(b.time());
            max = max.max(b.time());
        }
    }
    if min == max {
        return Ok(0.0);
    }
    let work = Work::from_target(n.target()).to_f64() * lookup as f64;
    Ok(work / (max - min) as f64)
}

fn getnetworkhashps(node: &Node, args: &Args) -> RpcResult {
    let lookup = args.int::<i32>(0)?.unwrap_or(120) as i64;
    let height = args.int::<i32>(1)?.unwrap_or(-1);
    if lookup < -1 || lookup == 0 {
        return Err(RpcError::new(
            RPC_INVALID_PARAMETER,
            "Invalid nblocks. Must be a positive number or -1.",
        ));
    }
    let height =
        match height {
            -1 => None,
            h if h < -1 => return Err(RpcError::new(
                RPC_INVALID_PARAMETER,
                "Invalid height. Must be -1 or a non-negative number within current chain height.",
            )),
            h => Some(h as u32),
        };
    to_raw(&node.read(|n| network_hash_ps(n, lookup, height))?)
}

/// Core's `DecodeHexBlk` + `submitblock`: a decode failure and a block without a coinbase are
/// RPC errors (-22); every other verdict is the result string, `null` for a new tip.
fn submitblock(node: &Node, args: &Args) -> RpcResult {
    let hexdata = args.req_str(0)?;
    let raw = hex::decode(hexdata)
        .map_err(|_| RpcError::new(RPC_DESERIALIZATION_ERROR, "Block decode failed"))?;
    match node.submit_block(&raw) {
        Ok(_) => to_raw(&()),
        Err(e) if e.is_rpc_error() => Err(RpcError::new(RPC_DESERIALIZATION_ERROR, e.to_string())),
        Err(e) => to_raw(&e.to_string()),
    }
}

/// The `transactions` array of a template's `getblocktemplate` answer.
fn gbt_transactions(t: &Template) -> Vec<GbtTxJson> {
    t.transactions
        .iter()
        .map(|e| GbtTxJson {
            data: hex::encode(&e.raw),
            txid: e.txid.to_string(),
            hash: e.wtxid.to_string(),
            depends: [],
            fee: e.fee,
            sigops: sigop_cost(&e.tx),
            weight: e.weight,
        })
        .collect()
}

/// Core's `GetTransactionSigOpCost` as far as simnet can know it: legacy sigops count four
/// times; a spend with a two-item witness is taken as P2WPKH (one sigop), which is what
/// simulated transactions spend.
fn sigop_cost(tx: &Transaction) -> u64 {
    let legacy: usize = tx
        .input
        .iter()
        .map(|i| i.script_sig.count_sigops_legacy())
        .sum::<usize>()
        + tx.output
            .iter()
            .map(|o| o.script_pubkey.count_sigops_legacy())
            .sum::<usize>();
    let witness = tx.input.iter().filter(|i| i.witness.len() == 2).count();
    (legacy * 4 + witness) as u64
}

async fn getblocktemplate(ctx: &Arc<Ctx>, args: Args) -> RpcResult {
    let empty = Map::new();
    let request = match args.get(0) {
        Some(Value::Object(o)) => o,
        _ => &empty,
    };
    let mode = match request.get("mode") {
        None | Some(Value::Null) => "template",
        Some(Value::String(m)) => m.as_str(),
        Some(_) => return Err(RpcError::new(RPC_INVALID_PARAMETER, "Invalid mode")),
    };
    if mode == "proposal" {
        return proposal(ctx, request).await;
    }
    let mut rules = Vec::new();
    if let Some(Value::Array(a)) = request.get("rules") {
        for r in a {
            match r {
                Value::String(s) => rules.push(s.as_str()),
                v => return Err(wrong_type(v, "string")),
            }
        }
    }
    if mode != "template" {
        return Err(RpcError::new(RPC_INVALID_PARAMETER, "Invalid mode"));
    }
    match request.get("longpollid") {
        None | Some(Value::Null) => {}
        Some(lp) => longpoll(ctx, lp).await?,
    }
    if !rules.contains(&"segwit") {
        return Err(RpcError::new(
            RPC_INVALID_PARAMETER,
            "getblocktemplate must be called with the segwit rule set (call with {\"rules\": [\"segwit\"]})",
        ));
    }
    // Hex for up to 4 MB of transactions: off the async workers.
    let ctx = ctx.clone();
    blocking(move || template_answer(&ctx)).await
}

/// The current template as `getblocktemplate` answers it.
fn template_answer(ctx: &Ctx) -> RpcResult {
    let (t, now) = ctx
        .node
        .read(|n| (n.template().clone(), n.unix_time(n.now())));
    let transactions = {
        let mut cache = ctx.gbt_txs.lock().unwrap_or_else(|p| p.into_inner());
        match &*cache {
            Some((id, txs)) if *id == t.id => txs.clone(),
            _ => {
                let txs: Arc<RawValue> = Arc::from(to_raw(&gbt_transactions(&t))?);
                *cache = Some((t.id, txs.clone()));
                txs
            }
        }
    };
    // Like Core, the time is brought up to now on every call (never below mintime).
    let curtime = (now.min(u32::MAX as u64) as u32)
        .max(t.mintime)
        .max(t.curtime);
    to_raw(&GbtJson {
        capabilities: ["proposal"],
        version: t.version as i32,
        rules: ["csv", "!segwit", "taproot"],
        vbavailable: Empty {},
        vbrequired: 0,
        previousblockhash: t.prev_hash.to_string(),
        transactions: &transactions,
        coinbaseaux: Empty {},
        coinbasevalue: t.coinbase_value,
        longpollid: longpoll_id(&t),
        target: t.target.to_string(),
        mintime: t.mintime,
        mutable: ["time", "transactions", "prevblock"],
        noncerange: "00000000ffffffff",
        sigoplimit: 80_000,
        sizelimit: 4_000_000,
        weightlimit: 4_000_000,
        curtime,
        bits: t.bits.to_string(),
        height: t.height,
        default_witness_commitment: hex::encode(&t.default_witness_commitment),
    })
}

/// The previous block hash and the template id: a long poll with this id waits for the next
/// template (a new tip, or more fees on the same tip).
pub(crate) fn longpoll_id(t: &Template) -> String {
    format!("{}{}", t.prev_hash, t.id)
}

/// Waits, as a long poll with `lp` asks, until there is a template newer than the one it names.
/// A longpollid naming anything but the current template returns at once; a non-string one
/// waits for the next template (as Core watches its current tip then). The wait ends after
/// `longpoll_timeout` at the latest (Core has no limit, but with a busy mempool it answers
/// after a minute; a bounded wait also frees connections of clients that went away).
async fn longpoll(ctx: &Arc<Ctx>, lp: &Value) -> Result<(), RpcError> {
    let mut templates = ctx.node.templates();
    let current = ctx.node.read(|n| n.template().clone());
    let watched = match lp {
        Value::String(s) => {
            let hash_part = s.get(..64.min(s.len())).unwrap_or(s);
            let prev = parse_hash(hash_part, "longpollid")?;
            // Core reads the rest with atoi: digits up to the first non-digit, else 0.
            let digits: String = s
                .get(64..)
                .unwrap_or("")
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            (prev, digits.parse::<u64>().unwrap_or(0))
        }
        _ => (current.prev_hash, current.id),
    };
    if watched != (current.prev_hash, current.id) {
        return Ok(());
    }
    let mut shutdown = ctx.shutdown.clone();
    let newer = templates.wait_for(|t| (t.prev_hash, t.id) != watched);
    tokio::select! {
        _ = newer => Ok(()),
        _ = tokio::time::sleep(ctx.longpoll_timeout) => Ok(()),
        _ = shutdown.wait_for(|stop| *stop) => Err(RpcError::new(RPC_CLIENT_NOT_CONNECTED, "Shutting down")),
    }
}

/// BIP23 proposals: the answers that need no validation are Core's; checking a proposal
/// needs the block checks without proof of work, which simnet's checks do not offer yet.
async fn proposal(ctx: &Arc<Ctx>, request: &Map<String, Value>) -> RpcResult {
    let Some(Value::String(data)) = request.get("data") else {
        return Err(RpcError::new(
            RPC_TYPE_ERROR,
            "Missing data String key for proposal",
        ));
    };
    let block = hex::decode(data)
        .ok()
        .and_then(|raw| primitives::bitcoin::Block::consensus_decode(&mut raw.as_slice()).ok())
        .ok_or_else(|| RpcError::new(RPC_DESERIALIZATION_ERROR, "Block decode failed"))?;
    let hash: Hash256 = block.block_hash().into();
    let prev: Hash256 = block.header.prev_blockhash.into();
    let (known, tip) = ctx.node.read(|n| (n.block(&hash).is_some(), n.tip().hash));
    if known {
        return to_raw("duplicate");
    }
    if prev != tip {
        return to_raw("inconclusive-not-best-prevblk");
    }
    Err(RpcError::new(
        RPC_MISC_ERROR,
        "simnet cannot check block proposals (no proof-of-work-free block check)",
    ))
}

async fn generatetoaddress(ctx: &Arc<Ctx>, args: Args) -> RpcResult {
    let nblocks = args.int::<i32>(0)?.unwrap_or(0);
    let address = args.req_str(1)?;
    let _maxtries = args.int::<u64>(2)?;
    let script = primitives::coinbase::payout_script(address, BtcNetwork::Regtest)
        .map_err(|_| RpcError::new(RPC_INVALID_ADDRESS_OR_KEY, "Error: Invalid address"))?;
    let mut hashes = Vec::with_capacity(nblocks.max(0) as usize);
    let mut left = nblocks.max(0) as u32;
    // In batches, so that a request for many blocks lets other calls take the lock in between.
    while left > 0 {
        let n = left.min(16);
        let (node, script) = (ctx.node.clone(), script.clone());
        let batch = tokio::task::spawn_blocking(move || node.mine(n, script.as_bytes()))
            .await
            .map_err(|_| RpcError::new(RPC_INTERNAL_ERROR, "Internal error"))?;
        hashes.extend(batch.iter().map(|h| h.to_string()));
        left -= n;
    }
    to_raw(&hashes)
}

// ---- Network ----------------------------------------------------------------------------

/// The simulated rest of the network is shown as Core's eight outbound full-relay peers.
const CONNECTIONS_OUT: u32 = 8;

fn getnetworkinfo() -> RpcResult {
    #[derive(Serialize)]
    struct Net {
        name: &'static str,
        limited: bool,
        reachable: bool,
        proxy: &'static str,
        proxy_randomize_credentials: bool,
    }
    #[derive(Serialize)]
    struct Info {
        version: u32,
        subversion: &'static str,
        protocolversion: u32,
        localservices: &'static str,
        localservicesnames: [&'static str; 4],
        localrelay: bool,
        timeoffset: i64,
        networkactive: bool,
        connections: u32,
        connections_in: u32,
        connections_out: u32,
        networks: Vec<Net>,
        relayfee: Btc,
        incrementalfee: Btc,
        localaddresses: [u8; 0],
        warnings: [&'static str; 0],
    }
    let net = |name, reachable: bool| Net {
        name,
        limited: !reachable,
        reachable,
        proxy: "",
        proxy_randomize_credentials: false,
    };
    to_raw(&Info {
        version: 280_000,
        subversion: "/Satoshi:28.0.0/",
        protocolversion: 70_016,
        // NETWORK | WITNESS | NETWORK_LIMITED | P2P_V2, Core 28's default services.
        localservices: "0000000000000c09",
        localservicesnames: ["NETWORK", "WITNESS", "NETWORK_LIMITED", "P2P_V2"],
        localrelay: true,
        timeoffset: 0,
        networkactive: true,
        connections: CONNECTIONS_OUT,
        connections_in: 0,
        connections_out: CONNECTIONS_OUT,
        networks: vec![
            net("ipv4", true),
            net("ipv6", true),
            net("onion", false),
            net("i2p", false),
            net("cjdns", false),
        ],
        relayfee: Btc(MIN_RELAY_FEE_SAT_PER_KVB),
        incrementalfee: Btc(MIN_RELAY_FEE_SAT_PER_KVB),
        localaddresses: [],
        warnings: [],
    })
}

/// Core 28's `getpeerinfo` entry, members in its order.
#[derive(Serialize)]
struct PeerJson {
    id: u32,
    addr: String,
    addrbind: String,
    network: &'static str,
    services: &'static str,
    servicesnames: [&'static str; 4],
    relaytxes: bool,
    lastsend: u64,
    lastrecv: u64,
    last_transaction: u64,
    last_block: u64,
    bytessent: u64,
    bytesrecv: u64,
    conntime: u64,
    timeoffset: i64,
    pingtime: f64,
    minping: f64,
    version: u32,
    subver: &'static str,
    inbound: bool,
    bip152_hb_to: bool,
    bip152_hb_from: bool,
    startingheight: u32,
    presynced_headers: i32,
    synced_headers: u32,
    synced_blocks: u32,
    inflight: [u32; 0],
    addr_relay_enabled: bool,
    addr_processed: u64,
    addr_rate_limited: u64,
    permissions: [&'static str; 0],
    minfeefilter: Btc,
    bytessent_per_msg: Map<String, Value>,
    bytesrecv_per_msg: Map<String, Value>,
    connection_type: &'static str,
    transport_protocol_type: &'static str,
    session_id: String,
}

/// The rest of the network as the node's eight outbound full-relay peers (`getconnectioncount`
/// says eight): addresses from the documentation range (RFC 5737), the node's modelled peer
/// traffic shared among them, its relay delay as their ping, all synced to its tip. Everything
/// is a function of the seed and the node's state, so two calls agree.
fn getpeerinfo(node: &Node) -> RpcResult {
    let peers = node.read(|n| {
        let cfg = n.config();
        let now = n.unix_time(n.now());
        let tip = n.tip();
        let bytes = n.peer_bytes();
        let last_tx = n
            .mempool()
            .iter_by_fee_rate()
            .map(|e| e.time)
            .max()
            .map_or(cfg.start_unix_time, |t| n.unix_time(t));
        let ping = (2.0 * n.relay_delay().as_secs_f64()).max(0.001);
        let count = CONNECTIONS_OUT as u64;
        (0..CONNECTIONS_OUT)
            .map(|i| {
                let share = |total: u64| total / count + u64::from((i as u64) < total % count);
                let (sent, recv) = (share(bytes.up), share(bytes.down));
                let per_msg = |b: u64| {
                    let mut m = Map::new();
                    if b > 0 {
                        // Nearly all of a relaying peer's traffic is announcements and
                        // transactions; simnet does not model the split.
                        m.insert("tx".into(), json!(b));
                    }
                    m
                };
                let seed = primitives::sha256d(
                    &[&cfg.seed.to_le_bytes()[..], b"peer", &[i as u8]].concat(),
                );
                PeerJson {
                    id: i,
                    addr: format!("203.0.113.{}:8333", 10 + seed.0[0] % 200),
                    addrbind: format!(
                        "192.0.2.1:{}",
                        40_000 + u16::from_le_bytes([seed.0[1], seed.0[2]]) % 20_000
                    ),
                    network: "ipv4",
                    services: "0000000000000c09",
                    servicesnames: ["NETWORK", "WITNESS", "NETWORK_LIMITED", "P2P_V2"],
                    relaytxes: true,
                    lastsend: now,
                    lastrecv: now,
                    last_transaction: last_tx,
                    last_block: tip.time() as u64,
                    bytessent: sent,
                    bytesrecv: recv,
                    // Connected an hour apart before the network started.
                    conntime: cfg
                        .start_unix_time
                        .saturating_sub(3600 * (u64::from(i) + 1)),
                    timeoffset: 0,
                    pingtime: ping,
                    minping: ping,
                    version: 70_016,
                    subver: "/Satoshi:28.0.0/",
                    inbound: false,
                    // Core asks up to three peers for high-bandwidth compact blocks.
                    bip152_hb_to: i < 3,
                    bip152_hb_from: false,
                    startingheight: cfg.start_height,
                    presynced_headers: -1,
                    synced_headers: tip.height,
                    synced_blocks: tip.height,
                    inflight: [],
                    addr_relay_enabled: true,
                    addr_processed: 0,
                    addr_rate_limited: 0,
                    permissions: [],
                    minfeefilter: Btc(MIN_RELAY_FEE_SAT_PER_KVB),
                    bytessent_per_msg: per_msg(sent),
                    bytesrecv_per_msg: per_msg(recv),
                    connection_type: "outbound-full-relay",
                    transport_protocol_type: "v2",
                    session_id: hex::encode(seed.0),
                }
            })
            .collect::<Vec<_>>()
    });
    to_raw(&peers)
}

/// Core's longest fee estimation horizon.
const MAX_CONF_TARGET: i64 = 1008;

/// Core's `estimatesmartfee` arguments and answer shape over simnet's fee market: the fee rate
/// a transaction needs to be among the best `blocks` blocks' worth of the mempool (what the
/// block assembler would take, block after block, with no new arrivals), never below the
/// minimum relay fee. Core answers for at least two blocks (a target of one is read as two).
fn estimatesmartfee(node: &Node, args: &Args) -> RpcResult {
    #[derive(Serialize)]
    struct Estimate {
        feerate: Btc,
        blocks: u32,
    }
    let target = args.int::<i64>(0)?.unwrap_or(0);
    if !(1..=MAX_CONF_TARGET).contains(&target) {
        return Err(RpcError::new(
            RPC_INVALID_PARAMETER,
            format!("Invalid conf_target, must be between 1 and {MAX_CONF_TARGET}"),
        ));
    }
    if let Some(mode) = args.str(1)? {
        if !["unset", "economical", "conservative"].contains(&mode.to_ascii_lowercase().as_str()) {
            return Err(RpcError::new(
                RPC_INVALID_PARAMETER,
                "Invalid estimate_mode parameter, must be one of: \"unset\", \"economical\", \"conservative\"",
            ));
        }
    }
    let blocks = target.max(2) as u32;
    let sat_per_kvb = node.read(|n| {
        let cfg = n.config();
        let per_block = (cfg.block_max_weight - cfg.coinbase_reserved_weight) / 4;
        let depth = per_block.saturating_mul(u64::from(blocks));
        let mut filled = 0u64;
        n.mempool()
            .iter_by_fee_rate()
            .find(|e| {
                filled += e.vsize;
                filled >= depth
            })
            // Fee per 1000 virtual bytes, rounded down as Core's `CFeeRate::GetFeePerK`.
            .map_or(0, |e| e.fee.saturating_mul(1000) / e.vsize.max(1))
    });
    to_raw(&Estimate {
        feerate: Btc(sat_per_kvb.max(MIN_RELAY_FEE_SAT_PER_KVB)),
        blocks,
    })
}

// ---- Zmq --------------------------------------------------------------------------------

fn getzmqnotifications(node: &Node) -> RpcResult {
    #[derive(Serialize)]
    struct Notification {
        #[serde(rename = "type")]
        kind: String,
        address: String,
        hwm: u64,
    }
    let list: Vec<Notification> = node
        .zmq_notifications()
        .into_iter()
        .map(|z| Notification {
            kind: z.kind,
            address: z.address,
            hwm: z.hwm,
        })
        .collect();
    to_raw(&list)
}

// ---- Raw transactions ---------------------------------------------------------------------

/// Where a transaction was found.
struct Found {
    tx: Transaction,
    fee: Option<u64>,
    /// (hash, height, time, in the main chain) of the block holding it.
    block: Option<(Hash256, u32, u32, bool)>,
    tip_height: u32,
}

fn find_in_block(b: &StoredBlock, txid: &Hash256) -> Option<(Transaction, Option<u64>)> {
    if Hash256::from(b.coinbase.compute_txid()) == *txid {
        return Some((b.coinbase.clone(), None));
    }
    b.txs
        .iter()
        .find(|e| e.txid == *txid)
        .map(|e| (e.tx.clone(), Some(e.fee)))
}

/// The mempool first, then the main chain from the tip down (simnet answers as a node with
/// `-txindex` would), or only the given block.
fn find_tx(
    node: &Node,
    txid: &Hash256,
    in_block: Option<&Hash256>,
) -> Result<Option<Found>, RpcError> {
    node.read(|n| {
        let chain = n.chain();
        let tip_height = chain.tip_height();
        if let Some(bh) = in_block {
            let b = chain
                .any_block(bh)
                .ok_or_else(|| RpcError::new(RPC_INVALID_ADDRESS_OR_KEY, "Block hash not found"))?;
            return Ok(find_in_block(b, txid).map(|(tx, fee)| Found {
                tx,
                fee,
                block: Some((b.hash, b.height, b.time(), chain.any_is_main(&b.hash))),
                tip_height,
            }));
        }
        if let Some(e) = n.mempool_entry(txid) {
            return Ok(Some(Found {
                tx: e.tx.clone(),
                fee: Some(e.fee),
                block: None,
                tip_height,
            }));
        }
        for h in (chain.base_height()..=tip_height).rev() {
            let Some(b) = chain.hash_at(h).and_then(|x| chain.block(&x)) else {
                continue;
            };
            if let Some((tx, fee)) = find_in_block(b, txid) {
                return Ok(Some(Found {
                    tx,
                    fee,
                    block: Some((b.hash, b.height, b.time(), true)),
                    tip_height,
                }));
            }
        }
        Ok(None)
    })
}

fn getrawtransaction(node: &Node, args: &Args) -> RpcResult {
    let txid = parse_hash(args.req_str(0)?, "parameter 1")?;
    let verbosity = args.verbosity(1, 0)?;
    let in_block = match args.str(2)? {
        Some(s) => Some(parse_hash(s, "parameter 3")?),
        None => None,
    };
    let Some(found) = find_tx(node, &txid, in_block.as_ref())? else {
        let msg = if in_block.is_some() {
            "No such transaction found in the provided block. Use gettransaction for wallet transactions."
        } else {
            "No such mempool or blockchain transaction. Use gettransaction for wallet transactions."
        };
        return Err(RpcError::new(RPC_INVALID_ADDRESS_OR_KEY, msg));
    };
    if verbosity <= 0 {
        return to_raw(&primitives::bitcoin::consensus::encode::serialize_hex(
            &found.tx,
        ));
    }
    let fee = if verbosity >= 2 { found.fee } else { None };
    let mut out = RawTxJson {
        in_active_chain: None,
        tx: TxJson::new(&found.tx, fee.filter(|_| found.block.is_some())),
        blockhash: None,
        confirmations: None,
        time: None,
        blocktime: None,
    };
    if let Some((hash, height, time, main)) = found.block {
        if in_block.is_some() {
            out.in_active_chain = Some(main);
        }
        out.blockhash = Some(hash.to_string());
        out.confirmations = Some(if main {
            (found.tip_height - height) as i64 + 1
        } else {
            0
        });
        out.time = Some(time);
        out.blocktime = Some(time);
    }
    to_raw(&out)
}

fn sendrawtransaction(node: &Node, args: &Args) -> RpcResult {
    let tx = hex::decode(args.req_str(0)?)
        .ok()
        .and_then(|raw| Transaction::consensus_decode(&mut raw.as_slice()).ok())
        .filter(|tx| !tx.input.is_empty())
        .ok_or_else(|| {
            RpcError::new(
                RPC_DESERIALIZATION_ERROR,
                "TX decode failed. Make sure the tx has at least one input.",
            )
        })?;
    let txid: Hash256 = tx.compute_txid().into();
    if node.read(|n| n.mempool_entry(&txid).is_some()) {
        return to_raw(&txid.to_string());
    }
    if find_tx(node, &txid, None)?.is_some() {
        return Err(RpcError::new(
            RPC_VERIFY_ALREADY_IN_CHAIN,
            "Transaction outputs already in utxo set",
        ));
    }
    // Nothing outside the simulation has outputs to spend.
    Err(RpcError::new(RPC_VERIFY_ERROR, "Missing inputs"))
}

/// Core's `DecodeHexTx`: valid hex, one whole transaction and nothing after it. Asked for the
/// legacy serialization (`iswitness` false), a transaction with witnesses does not decode.
fn decode_hex_tx(hex_str: &str, iswitness: Option<bool>) -> Option<Transaction> {
    let raw = hex::decode(hex_str).ok()?;
    let tx: Transaction = primitives::bitcoin::consensus::deserialize(&raw).ok()?;
    let has_witness = tx.input.iter().any(|i| !i.witness.is_empty());
    if iswitness == Some(false) && has_witness {
        return None;
    }
    Some(tx)
}

fn decoderawtransaction(args: &Args) -> RpcResult {
    let hex_str = args.req_str(0)?;
    let iswitness = args.bool(1)?;
    let tx = decode_hex_tx(hex_str, iswitness)
        .ok_or_else(|| RpcError::new(RPC_DESERIALIZATION_ERROR, "TX decode failed"))?;
    to_raw(&TxJson::decoded(&tx))
}

// ---- Util -------------------------------------------------------------------------------

fn validateaddress(args: &Args) -> RpcResult {
    #[derive(Serialize)]
    struct Valid {
        isvalid: bool,
        address: String,
        #[serde(rename = "scriptPubKey")]
        script_pubkey: String,
        isscript: bool,
        iswitness: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        witness_version: Option<u8>,
        #[serde(skip_serializing_if = "Option::is_none")]
        witness_program: Option<String>,
    }
    #[derive(Serialize)]
    struct Invalid {
        isvalid: bool,
        error_locations: [u32; 0],
        error: &'static str,
    }
    let text = args.req_str(0)?;
    // Pools only read `isvalid`; every failure gets Core's general message (Core is more
    // specific about some bech32 errors).
    let parsed = text
        .parse::<Address<primitives::bitcoin::address::NetworkUnchecked>>()
        .ok()
        .and_then(|a| a.require_network(BtcNetwork::Regtest).ok());
    match parsed {
        Some(addr) => {
            let spk = addr.script_pubkey();
            let (version, program) = match (spk.witness_version(), spk.as_bytes()) {
                (Some(v), b) if b.len() >= 4 => (Some(v.to_num()), Some(hex::encode(&b[2..]))),
                _ => (None, None),
            };
            to_raw(&Valid {
                isvalid: true,
                address: addr.to_string(),
                script_pubkey: hex::encode(spk.as_bytes()),
                isscript: spk.is_p2sh() || spk.is_p2wsh() || spk.is_p2tr(),
                iswitness: version.is_some(),
                witness_version: version,
                witness_program: program,
            })
        }
        None => to_raw(&Invalid {
            isvalid: false,
            error_locations: [],
            error: "Invalid or unsupported Segwit (Bech32) or Base58 encoding.",
        }),
    }
}

/// Every method name this endpoint answers (for docs and tests).
pub fn method_names() -> Vec<&'static str> {
    SPECS.iter().map(|s| s.name).collect()
}
