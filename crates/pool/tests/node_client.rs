//! The pool's node client against simnet's bitcoind-compatible endpoints, in-process on
//! 127.0.0.1: templates as the node serves them, new tips by ZMQ and by long poll within
//! 100 ms, the periodic refresh, block submission and Core's verdicts, credentials (user and
//! password, the cookie file), and the node's health through outages and silences.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use events::EventSink;
use pool::node::{
    submit_until_answered, Backoff, NodeAuth, NodeClient, NodeConfig, NodeError, NodeState,
    SubmitAnswer, TemplateFeed,
};
use pool::stats::BlockFate;
use pool::template::Template;
use primitives::bitcoin::consensus::serialize;
use primitives::bitcoin::ScriptBuf;
use primitives::coinbase::{CoinbaseSpec, Payout};
use primitives::{compact_size, merkle_root, Difficulty, Hash256, Header, Target};
use serde_json::json;
use simnet::rpc::{serve_with, RpcAuth, RpcOptions};
use simnet::zmq::{Publisher, ZmqConfig, ZmqStats};
use simnet::{MempoolConfig, Network, Node, SimnetConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

const USER: &str = "lab";
const PASSWORD: &str = "hunter2";
/// Longest wait for anything that should happen soon; tests fail rather than hang.
const WAIT: Duration = Duration::from_secs(10);
/// The bound: a new tip reaches the pool within this long of the node having it.
const TIP_LATENCY: Duration = Duration::from_millis(100);

// ---- simnet in-process --------------------------------------------------------------------

/// Difficulty 2^-20 (about 4,096 hashes a block), no network blocks and no transaction arrivals: the tip and the template change only when a test says so.
fn sim_config(seed: u64) -> SimnetConfig {
    SimnetConfig {
        seed,
        network_difficulty: Difficulty::new(1.0 / (1u64 << 20) as f64).unwrap(),
        block_interval: Duration::ZERO,
        mempool: MempoolConfig {
            initial_txs: 300,
            arrival_rate: 0.0,
            ..MempoolConfig::default()
        },
        ..SimnetConfig::default()
    }
}

fn payout_script() -> Vec<u8> {
    let mut s = vec![0x00, 0x14];
    s.extend_from_slice(&[0x42; 20]);
    s
}

/// A task serving until told to stop.
struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Running {
    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(WAIT, &mut self.task)
            .await
            .expect("endpoint stops")
            .unwrap();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A simnet node with its JSON-RPC and ZMQ endpoints, each of which can be stopped and started
/// again on the same port.
struct Sim {
    node: Node,
    rpc_addr: SocketAddr,
    zmq_addr: SocketAddr,
    rpc: Option<Running>,
    zmq: Option<Running>,
    zmq_stats: Option<ZmqStats>,
    clock: JoinHandle<()>,
}

impl Sim {
    async fn start(seed: u64, auth: RpcAuth) -> Sim {
        let node = Node::new(
            Network::new(sim_config(seed)).unwrap(),
            "node-client-test",
            EventSink::disabled(),
        );
        let clock = tokio::spawn({
            let node = node.clone();
            async move { node.run_clock(std::future::pending()).await }
        });
        let rpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let zmq = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut sim = Sim {
            node,
            rpc_addr: rpc.local_addr().unwrap(),
            zmq_addr: zmq.local_addr().unwrap(),
            rpc: None,
            zmq: None,
            zmq_stats: None,
            clock,
        };
        sim.serve_rpc(rpc, auth);
        sim.serve_zmq(zmq);
        sim
    }

    fn serve_rpc(&mut self, listener: TcpListener, auth: RpcAuth) {
        let (stop, stopped) = oneshot::channel::<()>();
        let node = self.node.clone();
        let task = tokio::spawn(async move {
            serve_with(node, listener, auth, RpcOptions::default(), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        self.rpc = Some(Running {
            stop: Some(stop),
            task,
        });
    }

    fn serve_zmq(&mut self, listener: TcpListener) {
        let publisher = Publisher::new(self.node.clone(), ZmqConfig::default());
        self.zmq_stats = Some(publisher.stats());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(publisher.serve(listener, async {
            let _ = stopped.await;
        }));
        self.zmq = Some(Running {
            stop: Some(stop),
            task,
        });
    }

    async fn stop_rpc(&mut self) {
        self.rpc.take().expect("rpc running").stop().await;
    }

    async fn restart_rpc(&mut self, auth: RpcAuth) {
        let listener = TcpListener::bind(self.rpc_addr).await.unwrap();
        self.serve_rpc(listener, auth);
    }

    async fn stop_zmq(&mut self) {
        self.zmq.take().expect("zmq running").stop().await;
        self.zmq_stats = None;
    }

    async fn restart_zmq(&mut self) {
        let listener = TcpListener::bind(self.zmq_addr).await.unwrap();
        self.serve_zmq(listener);
    }

    fn url(&self) -> String {
        format!("http://{}", self.rpc_addr)
    }

    fn zmq_endpoint(&self) -> String {
        format!("tcp://{}", self.zmq_addr)
    }

    /// Waits until one ZMQ subscriber to `hashblock` has registered (ZMQ has no
    /// acknowledgement: a tip published before then would not reach it).
    async fn wait_zmq_subscriber(&self) {
        let stats = self.zmq_stats.clone().expect("zmq running");
        wait_until("a hashblock subscriber", || {
            stats.subscribers(b"hashblock") == 1
        })
        .await;
    }

    fn tip(&self) -> Hash256 {
        self.node.read(|n| n.tip().hash)
    }

    /// The network finds a block now.
    fn mine(&self) -> Hash256 {
        self.node.mine(1, &payout_script())[0]
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.clock.abort();
    }
}

fn user_pass() -> RpcAuth {
    RpcAuth::user_password(USER, PASSWORD)
}

fn config(sim: &Sim) -> NodeConfig {
    let mut c = NodeConfig::new(
        sim.url(),
        NodeAuth::UserPass {
            user: USER.into(),
            password: PASSWORD.into(),
        },
    );
    c.timeout = Duration::from_secs(5);
    c.retry = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(300),
    };
    c
}

// ---- helpers --------------------------------------------------------------------------------

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits for a published template satisfying `pred`.
async fn wait_template(
    rx: &mut watch::Receiver<Option<Arc<Template>>>,
    what: &str,
    pred: impl FnMut(&Template) -> bool,
) -> Arc<Template> {
    let mut pred = pred;
    let got = tokio::time::timeout(WAIT, rx.wait_for(|t| t.as_deref().is_some_and(&mut pred)))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .expect("feed running");
    got.clone().unwrap()
}

/// Mines a block and measures how long the feed takes to publish a template on it.
async fn tip_latency(sim: &Sim, rx: &mut watch::Receiver<Option<Arc<Template>>>) -> Duration {
    let hash = sim.mine();
    let mined = Instant::now();
    wait_template(rx, "a template on the new tip", |t| t.prev_hash == hash).await;
    mined.elapsed()
}

/// A block on `t`: coinbase paying the template's value with its witness commitment, the
/// template's transactions, a nonce that meets the target (or, with `meet` false, fails it).
fn build_block(t: &Template, extranonce: u8, meet: bool) -> (Hash256, Vec<u8>) {
    let mut spec = CoinbaseSpec::new(t.height, 8);
    spec.tag = b"/node-client-test/".to_vec();
    spec.payouts.push(Payout {
        script_pubkey: ScriptBuf::from_bytes(payout_script()),
        value: t.coinbase_value,
    });
    spec.witness_commitment = t.witness_commitment;
    let coinbase = spec.build().unwrap().transaction(&[extranonce; 8]).unwrap();
    let mut txids = vec![Hash256::from(coinbase.compute_txid())];
    txids.extend(t.txids());
    let mut header = Header {
        version: t.version,
        prev_hash: t.prev_hash,
        merkle_root: merkle_root(&txids),
        time: t.curtime,
        bits: t.bits,
        nonce: 0,
    };
    let target = Target::from_compact(t.bits).unwrap();
    while target.is_met_by(header.block_hash().as_bytes()) != meet {
        header.nonce += 1;
    }
    let mut raw = header.to_bytes().to_vec();
    compact_size::write(&mut raw, 1 + t.transactions.len() as u64);
    raw.extend(serialize(&coinbase));
    for tx in t.transactions.iter() {
        raw.extend_from_slice(&tx.data);
    }
    (header.block_hash(), raw)
}

// ---- templates --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_template_is_the_one_simnet_serves() {
    let sim = Sim::start(1, user_pass()).await;
    let client = NodeClient::new(config(&sim)).unwrap();
    let t = client.get_block_template(None).await.unwrap();
    let served = sim.node.templates().borrow().clone();

    assert_eq!(t.height, served.height);
    assert_eq!(t.height, 900_001);
    assert_eq!(t.prev_hash, served.prev_hash);
    assert_eq!(t.prev_hash, sim.tip());
    assert_eq!(t.version, served.version);
    assert_eq!(t.bits, served.bits);
    assert_eq!(t.mintime, served.mintime);
    assert!(t.curtime >= served.curtime);
    assert_eq!(t.coinbase_value.to_sat(), served.coinbase_value);
    assert_eq!(t.witness_commitment, Some(served.witness_commitment));
    assert_eq!(t.transactions.len(), served.transactions.len());
    assert!(
        t.transactions.len() > 100,
        "the template carries the mempool"
    );
    for (ours, theirs) in t.transactions.iter().zip(&served.transactions) {
        assert_eq!(ours.txid, theirs.txid);
        assert_eq!(ours.data[..], theirs.raw[..]);
        assert_eq!(ours.fee.to_sat(), theirs.fee);
        assert_eq!(ours.weight as u64, theirs.weight);
    }
    assert_eq!(t.fees().to_sat(), served.total_fees);
    let id = t.longpoll_id.as_deref().unwrap();
    assert!(id.starts_with(&t.prev_hash.to_string()), "{id}");

    assert_eq!(client.best_block_hash().await.unwrap(), sim.tip());
    let count = client.call("getblockcount", json!([])).await.unwrap();
    assert_eq!(count, 900_000);
    // An RPC error comes back with the method, the URL and Core's code and message.
    let e = client.call("nosuchmethod", json!([])).await.unwrap_err();
    assert!(matches!(e, NodeError::Rpc { code: -32601, .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "nosuchmethod at {}/: RPC error -32601: Method not found",
            sim.url()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_json_rpc_works_too() {
    let sim = Sim::start(2, user_pass()).await;
    let mut c = config(&sim);
    c.jsonrpc = pool::node::JsonRpcVersion::V1;
    let client = NodeClient::new(c).unwrap();
    let t = client.get_block_template(None).await.unwrap();
    assert_eq!(t.prev_hash, sim.tip());
    // Legacy errors travel with HTTP 500 and still read as the node's error.
    let e = client.call("getblockhash", json!([-5])).await.unwrap_err();
    assert!(matches!(e, NodeError::Rpc { code: -8, .. }), "{e}");
}

// ---- new tips within 100 ms -----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_tip_arrives_by_zmq_within_100_ms() {
    let sim = Sim::start(3, user_pass()).await;
    // No periodic refresh to help, and no long poll while ZMQ is up.
    let c = config(&sim)
        .with_template_interval(Duration::from_secs(60))
        .with_zmq(sim.zmq_endpoint());
    let feed = TemplateFeed::spawn(NodeClient::new(c).unwrap(), std::future::pending());
    let mut rx = feed.templates();
    let health = feed.health();
    wait_template(&mut rx, "the first template", |_| true).await;
    sim.wait_zmq_subscriber().await;
    wait_until("the feed to see ZMQ connected", || health.zmq_connected()).await;

    for _ in 0..3 {
        let took = tip_latency(&sim, &mut rx).await;
        assert!(took < TIP_LATENCY, "new tip after {took:?}");
    }
    assert!(
        health.hashblocks() >= 3,
        "{} hashblocks",
        health.hashblocks()
    );
    assert_eq!(health.state(Instant::now()), NodeState::Ok);
    assert_eq!(health.height(), 900_004);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_tip_arrives_by_long_poll_within_100_ms() {
    let sim = Sim::start(4, user_pass()).await;
    let c = config(&sim).with_template_interval(Duration::from_secs(60));
    let feed = TemplateFeed::spawn(NodeClient::new(c).unwrap(), std::future::pending());
    let mut rx = feed.templates();
    wait_template(&mut rx, "the first template", |_| true).await;
    // Let the long poll settle into its wait.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..3 {
        let took = tip_latency(&sim, &mut rx).await;
        assert!(took < TIP_LATENCY, "new tip after {took:?}");
    }
    assert_eq!(feed.health().hashblocks(), 0);
    assert!(!feed.health().zmq_connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_zmq_publisher_the_feed_long_polls() {
    let sim = Sim::start(5, user_pass()).await;
    // A port nobody listens on.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let c = config(&sim)
        .with_template_interval(Duration::from_secs(60))
        .with_zmq(dead_addr.to_string());
    let feed = TemplateFeed::spawn(NodeClient::new(c).unwrap(), std::future::pending());
    let mut rx = feed.templates();
    wait_template(&mut rx, "the first template", |_| true).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let took = tip_latency(&sim, &mut rx).await;
    assert!(took < TIP_LATENCY, "new tip after {took:?}");
    assert!(!feed.health().zmq_connected());
    assert_eq!(feed.health().state(Instant::now()), NodeState::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_refresh_publishes_at_the_interval() {
    let sim = Sim::start(6, user_pass()).await;
    let interval = Duration::from_millis(200);
    // Long-poll mode on a quiet node: the long poll stays open, only the refresh publishes.
    let c = config(&sim).with_template_interval(interval);
    let feed = TemplateFeed::spawn(NodeClient::new(c).unwrap(), std::future::pending());
    let mut rx = feed.templates();
    let first = wait_template(&mut rx, "the first template", |_| true).await;
    // Past the start (the long poll's own first answer, a refresh due soon after the first
    // template), count what arrives.
    tokio::time::sleep(interval * 2).await;
    rx.borrow_and_update();

    let mut arrivals = Vec::new();
    let start = Instant::now();
    while arrivals.len() < 5 {
        tokio::time::timeout(WAIT, rx.changed())
            .await
            .expect("a refresh")
            .unwrap();
        arrivals.push(start.elapsed());
        let t = rx.borrow_and_update().clone().unwrap();
        assert_eq!(t.prev_hash, first.prev_hash, "same tip, sent again");
        assert_eq!(t.transactions.len(), first.transactions.len());
    }
    // Each refresh takes a request's time after its tick, and a missed tick fires late rather
    // than never (`MissedTickBehavior::Delay`): a machine that stalls the feed for a while
    // delays one refresh by as much, which no bound on a single gap can allow for. What the
    // feed itself decides is held: no refresh comes twice within an interval (less the
    // variation of one request's time), and the typical gap is one interval (a refresh skipped
    // on every tick would make it two).
    let gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
    for g in &gaps {
        assert!(
            *g > interval / 2,
            "a gap of {g:?} between refreshes (bound: more than {:?}); refreshes at {arrivals:?}",
            interval / 2
        );
    }
    let mut sorted = gaps.clone();
    sorted.sort_unstable();
    let median = (sorted[1] + sorted[2]) / 2;
    assert!(
        median < interval * 3 / 2,
        "the median gap between refreshes is {median:?} (bound: less than {:?}); refreshes at {arrivals:?}",
        interval * 3 / 2
    );
}

// ---- submitblock ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_from_the_template_is_accepted_and_becomes_the_tip() {
    let sim = Sim::start(7, user_pass()).await;
    let client = NodeClient::new(config(&sim)).unwrap();
    let t = client.get_block_template(None).await.unwrap();
    let (hash, block) = build_block(&t, 0, true);

    let outcome = submit_until_answered(&client, &block, Backoff::default()).await;
    assert_eq!(outcome.answer, SubmitAnswer::Accepted);
    assert_eq!(outcome.attempts, 1);
    assert_eq!(outcome.fate(), BlockFate::Accepted);
    assert_eq!(sim.tip(), hash);
    assert_eq!(client.best_block_hash().await.unwrap(), hash);
    let next = client.get_block_template(None).await.unwrap();
    assert_eq!((next.prev_hash, next.height), (hash, t.height + 1));

    // Again: the node has it, on its best chain, so it counts.
    let again = submit_until_answered(&client, &block, Backoff::default()).await;
    assert_eq!(again.answer, SubmitAnswer::Rejected("duplicate".into()));
    assert_eq!(again.on_best_chain, Some(true));
    assert_eq!(again.fate(), BlockFate::Accepted);
    // Another valid block on the same parent: stored, not the tip.
    let (_, sibling) = build_block(&t, 1, true);
    let lost = submit_until_answered(&client, &sibling, Backoff::default()).await;
    assert_eq!(lost.answer, SubmitAnswer::Rejected("inconclusive".into()));
    assert_eq!(lost.fate(), BlockFate::Orphaned);
    // Sent again (a provider got it there first, say): `duplicate`, yet beside the best chain,
    // so it is orphaned, not accepted.
    let again = submit_until_answered(&client, &sibling, Backoff::default()).await;
    assert_eq!(again.answer, SubmitAnswer::Rejected("duplicate".into()));
    assert_eq!(again.on_best_chain, Some(false));
    assert_eq!(again.fate(), BlockFate::Orphaned);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_blocks_get_cores_reasons() {
    let sim = Sim::start(8, user_pass()).await;
    let client = NodeClient::new(config(&sim)).unwrap();
    let t = client.get_block_template(None).await.unwrap();
    let tip = sim.tip();

    let (_, weak) = build_block(&t, 0, false);
    assert_eq!(
        client.submit_block(&weak).await.unwrap(),
        SubmitAnswer::Rejected("high-hash".into())
    );

    let mut greedy = t.clone();
    greedy.coinbase_value += primitives::bitcoin::Amount::from_sat(1);
    let (_, greedy) = build_block(&greedy, 0, true);
    assert_eq!(
        client.submit_block(&greedy).await.unwrap(),
        SubmitAnswer::Rejected("bad-cb-amount".into())
    );

    let mut orphan = t.clone();
    orphan.prev_hash = primitives::sha256d(b"nobody has this block");
    let (_, orphan) = build_block(&orphan, 0, true);
    assert_eq!(
        client.submit_block(&orphan).await.unwrap(),
        SubmitAnswer::Rejected("prev-blk-not-found".into())
    );

    // Bytes that are no block: Core's RPC error, read as its verdict.
    let outcome = submit_until_answered(&client, b"not a block", Backoff::default()).await;
    assert_eq!(
        outcome.answer,
        SubmitAnswer::Rejected("Block decode failed".into())
    );
    assert_eq!(outcome.attempts, 1);
    assert_eq!(sim.tip(), tip, "no rejected block moved the tip");
}

// ---- credentials ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_clear_error_and_the_feed_says_so() {
    let sim = Sim::start(9, user_pass()).await;
    let mut c = config(&sim);
    c.auth = NodeAuth::UserPass {
        user: USER.into(),
        password: "wrong".into(),
    };
    let client = NodeClient::new(c).unwrap();
    let e = client.get_block_template(None).await.unwrap_err();
    assert!(matches!(e, NodeError::Auth { status: 401, .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("getblocktemplate at {}/", sim.url())),
        "{text}"
    );
    assert!(
        text.contains("HTTP 401") && text.contains("--rpc-password"),
        "{text}"
    );
    assert!(!text.contains("wrong"), "the password is not shown: {text}");
    assert!(!e.is_unreachable());

    let feed = TemplateFeed::spawn(client, std::future::pending());
    let health = feed.health();
    wait_until("the feed to fail", || health.consecutive_failures() > 0).await;
    let state = health.state(Instant::now());
    assert!(matches!(state, NodeState::Failing { .. }), "{state:?}");
    assert!(!state.serves_work());
    assert!(health.reachable());
    assert!(health.describe(Instant::now()).contains("HTTP 401"));
    assert!(feed.templates().borrow().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_auth_works_and_the_cookie_is_reread_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut sim = Sim::start(10, RpcAuth::cookie(dir.path()).unwrap()).await;
    let cookie: PathBuf = dir.path().join("regtest/.cookie");
    let mut c = config(&sim);
    c.auth = NodeAuth::Cookie(cookie.clone());
    let client = NodeClient::new(c).unwrap();
    let t = client.get_block_template(None).await.unwrap();
    assert_eq!(t.prev_hash, sim.tip());

    // The node restarts with a new cookie: the client's is refused once, then reread.
    let old = std::fs::read_to_string(&cookie).unwrap();
    sim.stop_rpc().await;
    assert!(!cookie.exists(), "the cookie goes with the server");
    let e = client.best_block_hash().await.unwrap_err();
    assert!(e.is_unreachable(), "{e}");
    sim.restart_rpc(RpcAuth::cookie(dir.path()).unwrap()).await;
    assert_ne!(std::fs::read_to_string(&cookie).unwrap(), old);
    assert_eq!(client.best_block_hash().await.unwrap(), sim.tip());

    // No cookie file at all: the error names it.
    let mut c = config(&sim);
    c.auth = NodeAuth::Cookie(dir.path().join("nowhere/.cookie"));
    let e = NodeClient::new(c)
        .unwrap()
        .best_block_hash()
        .await
        .unwrap_err();
    assert!(matches!(e, NodeError::Cookie { .. }), "{e}");
    assert!(e.to_string().contains("nowhere/.cookie"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_url_are_used_and_not_shown() {
    let sim = Sim::start(11, user_pass()).await;
    let mut c = config(&sim);
    c.rpc_url = format!("{USER}:{PASSWORD}@{}", sim.rpc_addr);
    c.auth = NodeAuth::None;
    let client = NodeClient::new(c).unwrap();
    assert_eq!(client.url(), format!("{}/", sim.url()));
    assert_eq!(client.best_block_hash().await.unwrap(), sim.tip());
}

// ---- outages ------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_node_stops_work_and_the_feed_recovers_when_it_returns() {
    let mut sim = Sim::start(12, user_pass()).await;
    let c = config(&sim)
        .with_template_interval(Duration::from_millis(200))
        .with_zmq(sim.zmq_endpoint());
    let client = NodeClient::new(c).unwrap();
    let feed = TemplateFeed::spawn(client.clone(), std::future::pending());
    let mut rx = feed.templates();
    let health = feed.health();
    let first = wait_template(&mut rx, "the first template", |_| true).await;
    sim.wait_zmq_subscriber().await;
    wait_until("ZMQ connected", || health.zmq_connected()).await;

    sim.stop_rpc().await;
    sim.stop_zmq().await;
    wait_until("the feed to find the node gone", || {
        matches!(health.state(Instant::now()), NodeState::Unreachable { .. })
    })
    .await;
    assert!(!health.state(Instant::now()).serves_work());
    assert!(!health.reachable());
    let said = health.describe(Instant::now());
    assert!(
        said.contains("unreachable") && said.contains("cannot connect"),
        "{said}"
    );
    wait_until("ZMQ disconnected", || !health.zmq_connected()).await;

    // A block found meanwhile is submitted until the node answers.
    let (hash, block) = build_block(&first, 0, true);
    let submitting = tokio::spawn({
        let client = client.clone();
        async move {
            let retry = Backoff {
                initial: Duration::from_millis(50),
                max: Duration::from_millis(200),
            };
            submit_until_answered(&client, &block, retry).await
        }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!submitting.is_finished());

    sim.restart_rpc(user_pass()).await;
    sim.restart_zmq().await;
    let outcome = tokio::time::timeout(WAIT, submitting)
        .await
        .expect("answered once the node is back")
        .unwrap();
    assert_eq!(outcome.answer, SubmitAnswer::Accepted);
    assert!(outcome.attempts > 1, "{outcome:?}");
    assert_eq!(sim.tip(), hash);

    let t = wait_template(&mut rx, "a template on the submitted block", |t| {
        t.prev_hash == hash
    })
    .await;
    assert_eq!(t.height, first.height + 1);
    wait_until("health ok again", || {
        health.state(Instant::now()) == NodeState::Ok
    })
    .await;

    // ZMQ is back too: tips are fast again.
    sim.wait_zmq_subscriber().await;
    wait_until("ZMQ reconnected", || health.zmq_connected()).await;
    let before = health.hashblocks();
    let took = tip_latency(&sim, &mut rx).await;
    assert!(took < TIP_LATENCY, "new tip after {took:?}");
    wait_until("the hashblock counted", || health.hashblocks() > before).await;
}

/// A TCP relay that can stop forwarding: the node looks alive (connections open) but answers
/// nothing.
struct Freezer {
    addr: SocketAddr,
    frozen: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Freezer {
    async fn start(upstream: SocketAddr) -> Freezer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (frozen, gate) = watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let gate = gate.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(relay(cr, sw, gate.clone()), relay(sr, cw, gate));
                });
            }
        });
        Freezer { addr, frozen, task }
    }

    fn freeze(&self, frozen: bool) {
        self.frozen.send_replace(frozen);
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut gate: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        if gate.wait_for(|frozen| !*frozen).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_answering_goes_stale_then_unreachable() {
    let sim = Sim::start(13, user_pass()).await;
    let freezer = Freezer::start(sim.rpc_addr).await;
    let mut c = config(&sim).with_template_interval(Duration::from_millis(100));
    c.rpc_url = format!("http://{}", freezer.addr);
    c.stale_after = Duration::from_millis(400);
    c.timeout = Duration::from_millis(1_500);
    let feed = TemplateFeed::spawn(NodeClient::new(c).unwrap(), std::future::pending());
    let mut rx = feed.templates();
    let health = feed.health();
    wait_template(&mut rx, "the first template", |_| true).await;
    wait_until("health ok", || {
        health.state(Instant::now()) == NodeState::Ok
    })
    .await;

    freezer.freeze(true);
    let frozen_at = Instant::now();
    wait_until("stale templates", || {
        matches!(health.state(Instant::now()), NodeState::Stale { .. })
    })
    .await;
    let stale_after = frozen_at.elapsed();
    assert!(
        stale_after < Duration::from_millis(1_000),
        "stale only after {stale_after:?}"
    );
    assert!(!health.state(Instant::now()).serves_work());
    assert!(health.describe(Instant::now()).contains("stale"));
    // Then the requests time out: no answer at all.
    wait_until("the timeout", || {
        matches!(health.state(Instant::now()), NodeState::Unreachable { .. })
    })
    .await;
    assert!(
        health.last_error().unwrap().contains("no answer within"),
        "{:?}",
        health.last_error()
    );

    freezer.freeze(false);
    wait_until("health ok again", || {
        health.state(Instant::now()) == NodeState::Ok
    })
    .await;
    let hash = sim.mine();
    wait_template(&mut rx, "a template on a new tip", |t| t.prev_hash == hash).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_stops_on_shutdown() {
    let sim = Sim::start(14, user_pass()).await;
    let c = config(&sim).with_zmq(sim.zmq_endpoint());
    let (stop, stopped) = oneshot::channel::<()>();
    let feed = TemplateFeed::spawn(NodeClient::new(c).unwrap(), async {
        let _ = stopped.await;
    });
    let mut rx = feed.templates();
    wait_template(&mut rx, "the first template", |_| true).await;
    stop.send(()).unwrap();
    tokio::time::timeout(WAIT, feed.stopped())
        .await
        .expect("the feed stops");
    // The channel closes with the feed.
    tokio::time::timeout(WAIT, async { while rx.changed().await.is_ok() {} })
        .await
        .expect("the channel closes");
}

#[test]
fn configuration_mistakes_fail_at_start() {
    let c = NodeConfig::new("https://node:8332", NodeAuth::None);
    let e = NodeClient::new(c).unwrap_err();
    assert!(e.to_string().contains("only http"), "{e}");
    let c = NodeConfig::new("127.0.0.1:8332", NodeAuth::None).with_zmq("127.0.0.1");
    let e = NodeClient::new(c).unwrap_err();
    assert!(e.to_string().contains("invalid ZMQ endpoint"), "{e}");
    // Defaults: stale after three missed refreshes, at least 10 s; off without refreshes.
    let c = NodeConfig::new("127.0.0.1:8332", NodeAuth::None);
    assert_eq!(c.template_interval, Duration::from_secs(30));
    assert_eq!(c.stale_after, Duration::from_secs(90));
    let c = c.with_template_interval(Duration::from_secs(1));
    assert_eq!(c.stale_after, Duration::from_secs(10));
    let c = c.with_template_interval(Duration::ZERO);
    assert_eq!(c.stale_after, Duration::ZERO);
}
