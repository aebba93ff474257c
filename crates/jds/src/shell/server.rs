//! The JDS server: accepts JDCs, one task per connection, and stops on request.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use edge::{BanReason, Gate, MessageBudget, Slot, Timestamp};

use events::{
    BlockFound, BlockResult, BlockSubmitted, ConnectionClosed, ConnectionOpened, EventSink,
    LinkCounter, ShortStr,
};
use pool::jd_token::TokenKey;
use pool::node::{submit_until_answered, NodeClient, NodeConfig, NodeError};
use pool::stats::BlockFate;
use pool::store::{BlockRecord, Store, StoreConfig, StoreError};
use sv2::keys::AuthorityKeys;
use sv2::messages::JobDeclaration;
use sv2::{Limits, Message, NoiseConn, TransportError};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use super::node_mempool::NodeMempool;
use crate::block::FoundBlock;
use crate::session::{Event, Session, SessionStats};
use crate::{JdsConfig, TokenIssuer, UnixMillis};

/// How often each connection checks its pending declarations' deadlines.
const TICK: Duration = Duration::from_millis(500);
/// Largest frame a JDC may send: `ProvideMissingTransactions.Success` carries whole
/// transactions, up to a block's worth. A block is at most 4,000,000 bytes serialized (its
/// weight is at most 4,000,000 and at least its size), and each transaction adds a 3-byte length
/// (at most about 66,000 of them in a block): 4 MiB and 256 KiB hold any block's transactions,
/// where the transport's 16 MiB would let each connection make the JDS buffer four times that.
const MAX_FRAME_BYTES: usize = (4 << 20) + (256 << 10);
/// How often the JDCs' socket bytes go to the event log (`LinkBytes` on the `jd` link).
const NET_REPORT: Duration = Duration::from_secs(1);

/// Everything the server needs.
pub struct JdsSettings {
    /// Where JDCs connect.
    pub listen: SocketAddr,
    /// Payout script, token lifetime and the per-connection limits.
    pub config: JdsConfig,
    /// The key shared with the pool, which tokens are issued under.
    pub token_key: TokenKey,
    /// The authority keys the Noise NX responder's certificate is signed with.
    pub keys: AuthorityKeys,
    /// How long each certificate issued in the handshake is valid.
    pub cert_validity: Duration,
    /// The pool-side node (its mempool, and `submitblock`).
    pub node: NodeConfig,
    /// How often the mempool view is refreshed.
    pub mempool_refresh: Duration,
    /// The name `BlockResult` events give the node.
    pub node_name: String,
    /// The JDC side's connection limits (the edge every listening role shares).
    pub admission: edge::Admission,
    /// Where `ConnectionOpened`, `BlockFound`, `BlockSubmitted` and the other events go.
    pub events: EventSink,
    /// Where each pushed block is kept before it is submitted, and its answer after: a block
    /// the node has not answered for is submitted again at the next start.
    pub store: Option<StoreConfig>,
    /// Serve `/healthz`, `/api/status` and `/metrics` here.
    pub http_listen: Option<SocketAddr>,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The JDC listener could not be bound or read back.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The configured `listen` address.
        addr: SocketAddr,
        /// The socket error.
        source: std::io::Error,
    },
    /// The node client could not be set up.
    #[error("node client: {0}")]
    Node(#[from] NodeError),
    /// The block store could not be opened.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The HTTP status listener could not be bound.
    #[error("listening on {addr} (http): {source}")]
    Http {
        /// The configured `http_listen` address.
        addr: SocketAddr,
        /// The socket error.
        source: std::io::Error,
    },
}

/// Counters over every connection.
#[derive(Debug, Default)]
pub struct JdsStats {
    /// JDC connections accepted since start.
    pub connections: AtomicU64,
    /// JDC connections open now.
    pub open: AtomicU64,
    /// `AllocateMiningJobToken.Success`es sent.
    pub tokens_allocated: AtomicU64,
    /// Declarations vouched for (`DeclareMiningJob.Success`).
    pub jobs_declared: AtomicU64,
    /// Declarations refused (`DeclareMiningJob.Error`).
    pub jobs_refused: AtomicU64,
    /// Transactions asked for in `ProvideMissingTransactions`.
    pub txs_requested: AtomicU64,
    /// `PushSolution`s received.
    pub solutions: AtomicU64,
    /// Blocks sent to the node with `submitblock`, stored ones resubmitted at start included.
    pub blocks_submitted: AtomicU64,
    /// Blocks the node accepted.
    pub blocks_accepted: AtomicU64,
    /// Refused by the node (its reason in the store and the events).
    pub blocks_rejected: AtomicU64,
    /// Valid, but another block at their height came first.
    pub blocks_orphaned: AtomicU64,
}

/// [`JdsStats`] read at one moment; the fields mean the same.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// JDC connections accepted since start.
    pub connections: u64,
    /// JDC connections open now.
    pub open: u64,
    /// `AllocateMiningJobToken.Success`es sent.
    pub tokens_allocated: u64,
    /// Declarations vouched for.
    pub jobs_declared: u64,
    /// Declarations refused.
    pub jobs_refused: u64,
    /// Transactions asked for in `ProvideMissingTransactions`.
    pub txs_requested: u64,
    /// `PushSolution`s received.
    pub solutions: u64,
    /// Blocks sent with `submitblock`.
    pub blocks_submitted: u64,
    /// Blocks the node accepted.
    pub blocks_accepted: u64,
    /// Blocks the node refused.
    pub blocks_rejected: u64,
    /// Valid blocks another block at their height beat.
    pub blocks_orphaned: u64,
}

impl StatsSnapshot {
    /// Blocks submitted that the node has not answered for yet.
    pub fn blocks_pending(&self) -> u64 {
        self.blocks_submitted
            .saturating_sub(self.blocks_accepted + self.blocks_rejected + self.blocks_orphaned)
    }
}

impl JdsStats {
    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            connections: self.connections.load(Relaxed),
            open: self.open.load(Relaxed),
            tokens_allocated: self.tokens_allocated.load(Relaxed),
            jobs_declared: self.jobs_declared.load(Relaxed),
            jobs_refused: self.jobs_refused.load(Relaxed),
            txs_requested: self.txs_requested.load(Relaxed),
            solutions: self.solutions.load(Relaxed),
            blocks_submitted: self.blocks_submitted.load(Relaxed),
            blocks_accepted: self.blocks_accepted.load(Relaxed),
            blocks_rejected: self.blocks_rejected.load(Relaxed),
            blocks_orphaned: self.blocks_orphaned.load(Relaxed),
        }
    }

    /// Adds what a session did since `before`.
    fn add(&self, now: SessionStats, before: SessionStats) {
        self.tokens_allocated
            .fetch_add(now.tokens_allocated - before.tokens_allocated, Relaxed);
        self.jobs_declared
            .fetch_add(now.jobs_declared - before.jobs_declared, Relaxed);
        self.jobs_refused
            .fetch_add(now.jobs_refused - before.jobs_refused, Relaxed);
        self.txs_requested
            .fetch_add(now.txs_requested - before.txs_requested, Relaxed);
        self.solutions
            .fetch_add(now.solutions - before.solutions, Relaxed);
    }
}

impl Shared {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.epoch.elapsed().as_millis() as u64)
    }
}

struct Shared {
    config: Arc<JdsConfig>,
    tokens: Arc<TokenIssuer>,
    keys: AuthorityKeys,
    cert_validity: Duration,
    gate: Arc<Gate>,
    /// The clock the gate's decisions and the status pages share.
    epoch: Instant,
    mempool: Arc<NodeMempool>,
    node_name: ShortStr,
    events: EventSink,
    stats: Arc<JdsStats>,
    next_conn: AtomicU64,
    /// Every JDC connection's wire bytes, Noise included.
    net: Arc<LinkCounter>,
    store: Option<Store>,
}

/// A started server.
pub struct RunningJds {
    /// The JDC listener's bound address.
    pub addr: SocketAddr,
    /// The HTTP status listener's bound address, when one was asked for.
    pub http_addr: Option<SocketAddr>,
    /// The block store, when one was configured.
    pub store: Option<Store>,
    /// Live counters.
    pub stats: Arc<JdsStats>,
    /// The pool-side node's mempool view.
    pub mempool: Arc<NodeMempool>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
    events: EventSink,
    net: Arc<LinkCounter>,
}

impl RunningJds {
    /// Binds and starts serving; the mempool view fills in the background (a big mempool takes
    /// a few refreshes, and the node may come up later).
    pub async fn start(s: JdsSettings) -> Result<RunningJds, StartError> {
        let listener = edge::listen(s.listen).map_err(|source| StartError::Listen {
            addr: s.listen,
            source,
        })?;
        let addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: s.listen,
            source,
        })?;
        let node = NodeClient::new(s.node)?;
        let store = match &s.store {
            Some(c) => Some(Store::open(c.clone())?),
            None => None,
        };
        let mempool = Arc::new(NodeMempool::new(node));
        let stats = Arc::new(JdsStats::default());
        let node_watch = Arc::new(super::http::NodeWatch::default());
        let net = LinkCounter::new("jd");
        let shared = Arc::new(Shared {
            tokens: Arc::new(TokenIssuer::new(
                s.token_key,
                s.config.token_lifetime,
                UnixMillis::now(),
            )),
            config: Arc::new(s.config),
            keys: s.keys,
            cert_validity: s.cert_validity,
            gate: Gate::new(s.admission.clone()),
            epoch: Instant::now(),
            mempool: mempool.clone(),
            node_name: ShortStr::new(&s.node_name),
            events: s.events.clone(),
            stats: stats.clone(),
            next_conn: AtomicU64::new(1),
            net: net.clone(),
            store: store.clone(),
        });
        let (shutdown, rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        // Blocks an earlier run stored but never heard back about go out again.
        if let Some(st) = &store {
            for b in st.blocks_awaiting_answer().to_vec() {
                tracing::info!(
                    height = b.height,
                    "jds: resubmitting a block an earlier run stored"
                );
                shared.stats.blocks_submitted.fetch_add(1, Relaxed);
                tokio::spawn(submit_until_answer(
                    shared.clone(),
                    0,
                    b.hash,
                    b.height,
                    b.block,
                ));
            }
        }
        let http_addr = match s.http_listen {
            Some(addr) => {
                let listener =
                    edge::listen(addr).map_err(|source| StartError::Http { addr, source })?;
                let local = listener.local_addr().ok();
                let view = super::http::View {
                    stats: stats.clone(),
                    node: node_watch.clone(),
                    store: store.clone(),
                    started: shared.epoch,
                    gate: shared.gate.clone(),
                };
                let mut stop = rx.clone();
                tasks.spawn(async move {
                    let stopped = async move { stopped(&mut stop).await };
                    if let Err(e) = super::http::serve(listener, view, stopped).await {
                        tracing::error!(error = %e, "jds: HTTP server failed");
                    }
                });
                local
            }
            None => None,
        };
        tasks.spawn(refresh_loop(
            mempool.clone(),
            node_watch.clone(),
            s.mempool_refresh,
            rx.clone(),
        ));
        tasks.spawn(report_loop(net.clone(), s.events.clone(), rx.clone()));
        tasks.spawn(serve(shared, listener, rx));
        Ok(RunningJds {
            addr,
            http_addr,
            store,
            stats,
            mempool,
            shutdown,
            tasks,
            events: s.events,
            net,
        })
    }

    /// Wire bytes read from and written to JDCs so far: (read, written).
    pub fn net_bytes(&self) -> (u64, u64) {
        self.net.totals()
    }

    /// Closes every connection and waits for the tasks (bounded), then flushes events.
    pub async fn shutdown(mut self) -> StatsSnapshot {
        let _ = self.shutdown.send(true);
        let drain = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(5), drain)
            .await
            .is_err()
        {
            self.tasks.abort_all();
        }
        self.net.report(&self.events);
        if let Err(e) = self.events.flush() {
            tracing::warn!(error = %e, "jds: events file");
        }
        if let Some(store) = self.store.take() {
            if let Err(e) = store.close() {
                tracing::error!(error = %e, "jds: store closed with an error");
            }
        }
        self.stats.snapshot()
    }
}

async fn report_loop(net: Arc<LinkCounter>, events: EventSink, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(NET_REPORT);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => return,
            _ = tick.tick() => net.report(&events),
        }
    }
}

async fn refresh_loop(
    mempool: Arc<NodeMempool>,
    node: Arc<super::http::NodeWatch>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    // Zero: one look at start, then only the refreshes declarations ask for.
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => return,
            _ = tick.tick() => {
                let outcome = mempool.refresh().await;
                if let Err(e) = &outcome {
                    tracing::warn!(error = %e, "jds: mempool refresh failed");
                }
                node.record(outcome.map_err(|e| e.to_string()));
                if every.is_zero() {
                    return;
                }
            }
        }
    }
}

async fn serve(shared: Arc<Shared>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    let listener = shared.gate.listeners().watch("jd", listener);
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match shared.gate.admit(peer.ip(), shared.now()) {
                    Ok(slot) => {
                        tasks.spawn(connection(shared.clone(), stream, peer, slot, stop.clone()));
                    }
                    Err(why) => tracing::debug!(%peer, why = why.as_str(), "jds: connection refused"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "jds: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    // Connections see the same shutdown and end on their own.
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(4), drain)
        .await
        .is_err()
    {
        tasks.abort_all();
    }
}

async fn connection(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    slot: Slot,
    mut stop: watch::Receiver<bool>,
) {
    let local = stream.local_addr().unwrap_or(peer);
    let admission = shared.gate.admission();
    let limits = Limits {
        handshake_timeout: admission.handshake_timeout,
        max_frame_bytes: MAX_FRAME_BYTES,
        write_timeout: admission.write_timeout,
    };
    let mut conn = tokio::select! {
        _ = stopped(&mut stop) => return slot.close("shutdown"),
        c = NoiseConn::accept_with_keys(stream, &shared.keys, shared.cert_validity, limits) => match c {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "jds: handshake failed");
                shared.gate.strike(peer.ip(), shared.now(), BanReason::HandshakeFailures);
                return slot.close("handshake failed");
            }
        },
    };
    conn.count_into(shared.net.clone(), sv2::Side::Server);
    let id = shared.next_conn.fetch_add(1, Relaxed);
    shared.stats.connections.fetch_add(1, Relaxed);
    shared.stats.open.fetch_add(1, Relaxed);
    shared.events.emit(ConnectionOpened {
        conn: id,
        peer,
        local,
        label: ShortStr::new(""),
    });
    tracing::info!(conn = id, %peer, "jds: client connected");
    let mut session = Session::new(id, shared.config.clone(), shared.tokens.clone());
    let why = drive(&shared, &mut session, conn, &mut stop).await;
    shared.stats.open.fetch_sub(1, Relaxed);
    shared.events.emit(ConnectionClosed {
        conn: id,
        reason: ShortStr::new(why),
    });
    tracing::info!(conn = id, why, "jds: client disconnected");
    if why == "protocol" {
        shared
            .gate
            .strike(peer.ip(), shared.now(), BanReason::MalformedMessages);
    }
    slot.close(why);
}

/// Runs the session until the connection ends; returns why.
async fn drive(
    shared: &Arc<Shared>,
    session: &mut Session,
    mut conn: NoiseConn,
    stop: &mut watch::Receiver<bool>,
) -> &'static str {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut reported = SessionStats::default();
    let admission = shared.gate.admission();
    let mut last_frame = shared.now();
    let mut budget = MessageBudget::new(admission.message_rate, last_frame);
    let why = loop {
        tokio::select! {
            biased;
            _ = stopped(stop) => break "shutdown",
            frame = conn.read_frame() => match frame {
                Ok(mut frame) => {
                    last_frame = shared.now();
                    if !budget.take(admission.message_rate, last_frame) {
                        break "rate";
                    }
                    // Frames of extensions this JDS does not speak are skipped, as the spec says.
                    if frame.extension() != 0 {
                        continue;
                    }
                    let m = match Message::decode(frame.msg_type(), &mut frame.payload) {
                        Ok(m) => m,
                        Err(e) => {
                            tracing::debug!(conn = session.conn(), error = %e, "jds: undecodable message");
                            break "protocol";
                        }
                    };
                    if let Message::JobDeclaration(JobDeclaration::DeclareMiningJob(d)) = &m {
                        let wanted: Vec<_> = d.wtxid_list.iter().map(|w| primitives::Hash256(*w)).collect();
                        if let Err(e) = shared.mempool.ensure(&wanted).await {
                            tracing::warn!(conn = session.conn(), error = %e, "jds: mempool refresh before a declaration failed");
                        }
                    }
                    session.handle_message(m, UnixMillis::now(), &shared.mempool.read());
                }
                Err(e) => break e.reason(),
            },
            _ = tick.tick() => {
                session.handle_tick(UnixMillis::now());
                if shared.now().since(last_frame) > admission.idle_timeout {
                    break "idle";
                }
            }
        }
        if let Err(e) = flush(shared, session, &mut conn).await {
            break e.reason();
        }
        shared.stats.add(session.stats(), reported);
        reported = session.stats();
        if let Some(c) = session.wants_close() {
            let why = c.reason();
            conn.close(Duration::from_millis(200)).await;
            return why;
        }
    };
    shared.stats.add(session.stats(), reported);
    why
}

async fn flush(
    shared: &Arc<Shared>,
    session: &mut Session,
    conn: &mut NoiseConn,
) -> Result<(), TransportError> {
    // A pushed block first: it is stored before anything is written.
    while let Some(event) = session.poll_event() {
        match event {
            Event::SubmitBlock(b) => submit(shared, session.conn(), b).await,
        }
    }
    while let Some(m) = session.poll_transmit() {
        conn.send_message(&m).await?;
    }
    Ok(())
}

/// A pushed block: stored (when the JDS keeps a store) before anything else happens to it,
/// then submitted to the pool-side node on a task of its own until the node answers, so that
/// neither a slow node nor a retry holds up the connection.
async fn submit(shared: &Arc<Shared>, conn: u64, b: FoundBlock) {
    let height = b.height.unwrap_or(0);
    let mut stored = false;
    if let Some(store) = &shared.store {
        let recorded = store.worker(STORE_WORKER).and_then(|worker| {
            store.record_block(BlockRecord {
                hash: b.hash.0,
                height,
                worker,
                job_id: 0,
                time_ms: UnixMillis::now().0,
                block: b.bytes.clone(),
            })
        });
        match recorded {
            Ok(t) => match store.wait_durable_unless_failing(t).await {
                Ok(()) => stored = true,
                Err(e) => {
                    tracing::error!(conn, hash = %b.hash, error = %e, "jds: block not stored yet; submitting anyway")
                }
            },
            Err(e) => {
                tracing::error!(conn, hash = %b.hash, error = %e, "jds: block not stored; submitting anyway")
            }
        }
    }
    shared.events.emit(BlockFound {
        node: ShortStr::new("jds"),
        hash: b.hash,
        height,
        template_id: None,
        job_id: None,
        conn: Some(conn),
        stored,
    });
    shared.stats.blocks_submitted.fetch_add(1, Relaxed);
    shared.events.emit(BlockSubmitted {
        hash: b.hash,
        height,
        template_id: None,
        conn: Some(conn),
    });
    tokio::spawn(submit_until_answer(
        shared.clone(),
        conn,
        b.hash.0,
        height,
        b.bytes,
    ));
}

/// The store's worker name for the blocks the JDS keeps.
const STORE_WORKER: &str = "jds";

/// `submitblock` until the pool-side node answers (retrying with backoff while it cannot be
/// reached), then the block's fate: statistics, event, store.
async fn submit_until_answer(
    shared: Arc<Shared>,
    conn: u64,
    hash: [u8; 32],
    height: u32,
    block: Vec<u8>,
) {
    let node = shared.mempool.node();
    let outcome = submit_until_answered(node, &block, node.config().retry).await;
    let reason = outcome.answer.reason().unwrap_or("").to_owned();
    // `duplicate`: the node has the block already (from the farm's node over the network, or
    // from a submission whose answer a restart lost); its chain says whether it counts.
    let fate = outcome.fate();
    let accepted = fate == BlockFate::Accepted;
    match fate {
        BlockFate::Accepted => &shared.stats.blocks_accepted,
        BlockFate::Orphaned => &shared.stats.blocks_orphaned,
        BlockFate::Rejected => &shared.stats.blocks_rejected,
    }
    .fetch_add(1, Relaxed);
    let hash = primitives::Hash256(hash);
    tracing::info!(conn, %hash, height, accepted, reason, attempts = outcome.attempts, "jds: block submitted to the node");
    shared.events.emit(BlockResult {
        node: shared.node_name,
        hash,
        height,
        accepted,
        reason: ShortStr::new(&reason),
    });
    if let Some(store) = &shared.store {
        let result = if accepted {
            "accepted"
        } else {
            reason.as_str()
        };
        if let Err(e) = store.record_block_result(hash.0, result, UnixMillis::now().0) {
            tracing::error!(%hash, error = %e, "jds: block result not recorded");
        }
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
