//! The JDC's tokio shell: two upstream connections (the JDS and the pool), the embedded pool
//! serving the farm's devices from the farm's node, and one task joining them.
//!
//! Start-up order follows what each part needs from the one before: the JDS's first token
//! brings the pool's payout output (the coinbase the devices mine must pay it); the pool's
//! channel brings the extranonce prefix (every downstream channel's range lies inside it); only
//! then can the embedded pool build a job. From there, each template the farm's node sends:
//!
//! 1. reaches the devices at once, as a job of the embedded pool (optimistic mining);
//! 2. has its transactions fetched from the node (`RequestTransactionData`) and is declared to
//!    the JDS (`DeclareMiningJob`, missing transactions on request);
//! 3. once declared, is set on the pool's channel (`SetCustomMiningJob`);
//!
//! and each share the devices find that meets the pool's target goes up under the template's
//! custom job (held until the pool names it). A share that is a block goes to the farm's node
//! by the embedded pool (`SubmitSolution`) and to the JDS (`PushSolution`) at once.
//!
//! When the JDS or the pool fails (a connection lost, a declaration or a job refused), the
//! devices keep mining the farm's templates: the embedded pool does not depend on either. The
//! counters say what the pool did not get. The JDC then sets up both again, with growing
//! waits, and moves the devices into the new pool channel's extranonce range when it has
//! another prefix (docs/operations.md, "Recovering").

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use events::LinkCounter;
use pool::engine::{PayoutMode, TappedShare};
use pool::jobs::Generation;
use pool::service::{PoolSettings, RunningPool};
use pool::stats::Dependency;
use pool::tp::{TxDataReply, TxDataRequest};
use primitives::bitcoin::consensus::deserialize;
use primitives::bitcoin::hashes::Hash;
use primitives::bitcoin::{ScriptBuf, Transaction};
use sv2::messages::job_declaration::PushSolution;
use sv2::{Limits, Message, NoiseConn, TransportError};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::coinbase;
use crate::declarer::{
    Declaration, Declarer, DeclarerConfig, DeclarerError, DeclarerEvent, TxData,
};
use crate::fallback::{Fallback, FallbackConfig, FallbackReason};
use crate::pool_channel::{
    CustomJob, OpenedChannel, PoolChannel, PoolChannelConfig, PoolChannelError, PoolChannelStats,
    PoolEvent,
};

/// Where the JDC's upstreams are.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// The server's address.
    pub addr: SocketAddr,
    /// The authority key the server's certificate must be signed with; `None` accepts any.
    pub authority: Option<[u8; 32]>,
}

/// Everything a JDC needs to start.
#[derive(Clone, Debug)]
pub struct JdcSettings {
    /// The embedded pool: its template provider (`tp`) must be the farm's node, its SV2 listen
    /// address is where the devices (or the translator) connect. Its payout and extranonce
    /// layout are set by the JDC from what the JDS and the pool say.
    pub pool: PoolSettings,
    /// The pool's Job Declarator Server.
    pub jds: Upstream,
    /// The pool's SV2 mining endpoint, where the JDC opens its channel.
    pub upstream: Upstream,
    /// How declarations are made.
    pub declarer: DeclarerConfig,
    /// The channel to the pool.
    pub channel: PoolChannelConfig,
    /// How long each connection (TCP and Noise handshake) may take.
    pub connect_timeout: Duration,
    /// When the JDC leaves its pool.
    pub fallback: FallbackConfig,
    /// Where the coinbase pays once the JDC has left its pool (solo mining on the farm's own
    /// templates); without it the devices keep mining jobs that pay the pool, which nobody
    /// accounts for any more.
    pub fallback_payout: Option<ScriptBuf>,
}

/// Why the JDC could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum JdcError {
    /// The TCP connection to an upstream failed.
    #[error("{what} {addr}: {source}")]
    Connect {
        /// Which upstream ("JDS" or "pool").
        what: &'static str,
        /// Its address.
        addr: SocketAddr,
        /// The socket's error.
        source: std::io::Error,
    },
    /// The connection to an upstream took longer than [`JdcSettings::connect_timeout`].
    #[error("{what} {addr}: connect timed out")]
    ConnectTimeout {
        /// Which upstream.
        what: &'static str,
        /// Its address.
        addr: SocketAddr,
    },
    /// The Noise handshake or framing with an upstream failed.
    #[error("{what}: {source}")]
    Transport {
        /// Which upstream.
        what: &'static str,
        /// The transport's error.
        source: TransportError,
    },
    /// The JDS broke the protocol or refused the setup.
    #[error("JDS: {0}")]
    Declarer(#[from] DeclarerError),
    /// The pool broke the protocol, or refused the setup or the channel.
    #[error("pool: {0}")]
    Channel(#[from] PoolChannelError),
    /// [`JdcSettings::pool`] names no template provider.
    #[error("the embedded pool needs a Template Provider (the farm's node)")]
    NoTemplateProvider,
    #[error("the pool's extranonce prefix ({prefix} bytes) leaves {size} bytes; the JDC needs at least 5 for its own channels")]
    /// The pool's channel leaves too little extranonce for the JDC's own channels.
    Extranonce {
        /// The pool's prefix, bytes.
        prefix: usize,
        /// The bytes after it, the JDC's to fill.
        size: usize,
    },
    /// The embedded pool failed to start or stop.
    #[error("embedded pool: {0}")]
    Pool(#[from] pool::service::ServiceError),
    /// Start-up did not finish in time (the limit given).
    #[error("the JDS and the pool were not both set up within {0:?}")]
    JoinTimeout(Duration),
}

/// What the JDC has done, for its status line and summary.
#[derive(Clone, Debug, Default)]
pub struct JdcStats {
    /// The pool channels' counts, summed over rejoins.
    pub channel: PoolChannelStats,
    /// Templates the JDS accepted as declared.
    pub declared: u64,
    /// Declarations the JDS refused.
    pub declarations_refused: u64,
    /// Templates never declared because the node's transaction data did not come or did not
    /// decode.
    pub tx_data_failed: u64,
    /// Blocks sent to the JDS as `PushSolution`.
    pub solutions_pushed: u64,
    /// Of those, blocks found while the JDS was away and pushed when it returned.
    pub solutions_pushed_late: u64,
    /// Why the JDC stopped talking to an upstream, if it did.
    pub upstream_lost: Option<String>,
    /// Why the JDC left its pool, if it did (spec 6.2).
    pub fallback: Option<String>,
    /// The devices mine for the farm's own address since the fallback.
    pub solo: bool,
    /// Times the JDC set up its JDS and pool again after leaving them.
    pub rejoined: u64,
    /// Rejoin attempts that failed, and why the latest did.
    pub rejoin_failures: u64,
    /// Why the latest rejoin attempt failed; `None` if none did.
    pub rejoin_error: Option<String>,
}

impl JdcStats {
    /// As `/api/status`'s `jdc` section and the closing summary line give it.
    pub fn to_json(&self) -> serde_json::Value {
        let c = &self.channel;
        serde_json::json!({
            "declared": self.declared,
            "declarations_refused": self.declarations_refused,
            "tx_data_failed": self.tx_data_failed,
            "jobs_set": c.jobs_set,
            "jobs_refused": c.jobs_refused,
            "shares_submitted": c.shares_submitted,
            "shares_accepted": c.shares_accepted,
            "shares_rejected": c.shares_rejected,
            "shares_stale": c.shares_stale,
            "below_target": c.below_target,
            "dropped": c.dropped,
            "foreign": c.foreign,
            "solutions_pushed": self.solutions_pushed,
            "solutions_pushed_late": self.solutions_pushed_late,
            "upstream_lost": self.upstream_lost,
            "fallback": self.fallback,
            "solo": self.solo,
            "rejoined": self.rejoined,
            "rejoin_failures": self.rejoin_failures,
            "rejoin_error": self.rejoin_error,
        })
    }
}

/// A started JDC. [`RunningJdc::shutdown`] stops it.
pub struct RunningJdc {
    /// The embedded pool the devices connect to.
    pub pool: RunningPool,
    /// The pool payout script the devices' coinbases paid at start, and the pool channel's
    /// extranonce prefix then (a rejoin may bring others: `/api/status` says).
    pub payout: ScriptBuf,
    /// The pool channel's extranonce prefix at start.
    pub extranonce_prefix: Vec<u8>,
    stats: Arc<Mutex<JdcStats>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RunningJdc {
    /// What the JDC has done so far.
    pub fn stats(&self) -> JdcStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops the JDC's task, then the embedded pool.
    pub async fn shutdown(self) -> Result<(), JdcError> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        self.pool.shutdown().await?;
        Ok(())
    }
}

async fn connect(
    what: &'static str,
    up: &Upstream,
    timeout: Duration,
) -> Result<NoiseConn, JdcError> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(up.addr))
        .await
        .map_err(|_| JdcError::ConnectTimeout {
            what,
            addr: up.addr,
        })?
        .map_err(|source| JdcError::Connect {
            what,
            addr: up.addr,
            source,
        })?;
    let initiator =
        noise_initiator(up.authority).map_err(|source| JdcError::Transport { what, source })?;
    NoiseConn::connect(stream, initiator, Limits::default())
        .await
        .map_err(|source| JdcError::Transport { what, source })
}

fn noise_initiator(key: Option<[u8; 32]>) -> Result<Box<noise_sv2::Initiator>, TransportError> {
    let r = match key {
        Some(k) => noise_sv2::Initiator::from_raw_k(k),
        None => noise_sv2::Initiator::without_pk(),
    };
    r.map_err(|_| TransportError::from(sv2::NoiseError::InvalidAuthorityKey))
}

async fn read(what: &'static str, conn: &mut NoiseConn) -> Result<Message, JdcError> {
    loop {
        match conn.read_message().await {
            Ok(Some(m)) => return Ok(m),
            Ok(None) => continue,
            Err(source) => return Err(JdcError::Transport { what, source }),
        }
    }
}

async fn send(what: &'static str, conn: &mut NoiseConn, m: &Message) -> Result<(), JdcError> {
    conn.send_message(m)
        .await
        .map_err(|source| JdcError::Transport { what, source })
}

/// How the JDC reaches its JDS and its pool: what a first join and every rejoin need.
#[derive(Clone, Debug)]
struct JoinSettings {
    jds: Upstream,
    upstream: Upstream,
    declarer: DeclarerConfig,
    channel: PoolChannelConfig,
    connect_timeout: Duration,
}

/// The JDS and the pool, set up: what each said.
struct Upstreams {
    jds: NoiseConn,
    declarer: Declarer,
    /// Declarer events that came with the setup (tokens beyond the first, say).
    early: Vec<DeclarerEvent>,
    /// The pool's payout output, from the JDS's first token.
    payout: ScriptBuf,
    up: NoiseConn,
    channel: PoolChannel,
    opened: OpenedChannel,
}

/// Sets up the JDS, then the pool: the JDS first, since its token names the payout.
async fn join(s: &JoinSettings, net: &[Arc<LinkCounter>; 2]) -> Result<Upstreams, JdcError> {
    let mut jds = connect("JDS", &s.jds, s.connect_timeout).await?;
    jds.count_into(net[0].clone(), sv2::Side::Client);
    let mut declarer = Declarer::new(s.declarer.clone());
    send("JDS", &mut jds, &declarer.setup_connection()).await?;
    let mut early = Vec::new();
    while !declarer.is_ready() {
        let m = read("JDS", &mut jds).await?;
        for e in declarer.on_message(m)? {
            match e {
                DeclarerEvent::Send(m) => send("JDS", &mut jds, &m).await?,
                other => early.push(other),
            }
        }
    }
    let payout = declarer.pool_payout().expect("ready").clone();

    let mut up = connect("pool", &s.upstream, s.connect_timeout).await?;
    up.count_into(net[1].clone(), sv2::Side::Client);
    let mut channel = PoolChannel::new(s.channel.clone());
    send("pool", &mut up, &channel.setup_connection()).await?;
    let opened = loop {
        let m = read("pool", &mut up).await?;
        let mut opened = None;
        for e in channel.on_message(m)? {
            match e {
                PoolEvent::Send(m) => send("pool", &mut up, &m).await?,
                PoolEvent::Opened(o) => opened = Some(o),
                _ => {}
            }
        }
        if let Some(o) = opened {
            break o;
        }
    };
    // The downstream channels: prefix = pool prefix + 4 bytes of our own, the rest rolled.
    if opened.extranonce_size < 5 {
        return Err(JdcError::Extranonce {
            prefix: opened.extranonce_prefix.len(),
            size: opened.extranonce_size,
        });
    }
    tracing::info!(
        channel = opened.channel_id,
        prefix = opened.extranonce_prefix.len(),
        size = opened.extranonce_size,
        "jdc: pool channel open"
    );
    Ok(Upstreams {
        jds,
        declarer,
        early,
        payout,
        up,
        channel,
        opened,
    })
}

/// Connects to the JDS and the pool, then starts the embedded pool and the task joining them.
pub async fn start(settings: JdcSettings) -> Result<RunningJdc, JdcError> {
    if settings.pool.tp.is_none() {
        return Err(JdcError::NoTemplateProvider);
    }
    let join_settings = JoinSettings {
        jds: settings.jds.clone(),
        upstream: settings.upstream.clone(),
        declarer: settings.declarer.clone(),
        channel: settings.channel.clone(),
        connect_timeout: settings.connect_timeout,
    };
    // The JDC's own socket bytes upstream (the embedded pool counts its devices' side):
    // docs/metrics.md `roles.jdc.net_*_bytes`.
    let net = [LinkCounter::new("jds"), LinkCounter::new("upstream")];
    let Upstreams {
        jds,
        declarer,
        early,
        payout,
        up,
        channel,
        opened,
    } = join(&join_settings, &net).await?;

    let mut ps = settings.pool.clone();
    ps.engine.payout = PayoutMode::Pool(payout.clone());
    ps.engine.jobs.extranonce_len = opened.extranonce_prefix.len() + opened.extranonce_size;
    ps.sv2.config.extranonce_base = opened.extranonce_prefix.clone();
    ps.sv2.config.extended_extranonce_size = (opened.extranonce_size - 4).min(8);
    let tag = ps.engine.jobs.coinbase_tag.clone();
    let extranonce_len = ps.engine.jobs.extranonce_len;
    let running = RunningPool::start(ps).await?;
    let (tap_tx, tap_rx) = mpsc::unbounded_channel();
    running.engine.set_share_tap(tap_tx);
    let generations = running.engine.subscribe();
    let tx_data = running.tx_data().ok_or(JdcError::NoTemplateProvider)?;

    // The JDS and the pool are the JDC's own dependencies: shown beside the embedded pool's.
    let clock = running.clock();
    running.set_metrics_role("jdc");
    for d in [Dependency::Jds, Dependency::Pool] {
        running.engine.stats.set_attached(d, true, clock(), None);
    }
    let stats = Arc::new(Mutex::new(JdcStats::default()));
    let shown = stats.clone();
    running.add_status_section(
        "jdc",
        Arc::new(move || shown.lock().unwrap_or_else(|e| e.into_inner()).to_json()),
    );
    let (stop, stop_rx) = watch::channel(false);
    let (joins_tx, joins_rx) = mpsc::unbounded_channel();
    let (data_tx, data_rx) = mpsc::unbounded_channel();
    let joined = Joined {
        jds: Some(jds),
        up: Some(up),
        declarer,
        channel,
        earlier_channels: PoolChannelStats::default(),
        payout: payout.clone(),
        first_payout: payout.clone(),
        base: opened.extranonce_prefix.clone(),
        extranonce_size: opened.extranonce_size,
        tag,
        extranonce_len,
        recent: VecDeque::new(),
        stats: stats.clone(),
        fetching: None,
        next_fetch: None,
        last_declared: None,
        fallback: Fallback::new(settings.fallback.clone()),
        fallback_config: settings.fallback.clone(),
        fallback_payout: settings.fallback_payout.clone(),
        engine: running.engine.clone(),
        clock: std::time::Instant::now(),
        accepted_seen: 0,
        net,
        pool_clock: clock,
        join_settings: Arc::new(join_settings),
        rejoin: Rejoin::default(),
        joins: joins_tx,
        rejoin_task: None,
        tx_data,
        data_tx,
        unpushed: VecDeque::new(),
        pushing: None,
        push_step_due: false,
    };
    let task = tokio::spawn(joined.run(early, generations, tap_rx, joins_rx, data_rx, stop_rx));
    Ok(RunningJdc {
        pool: running,
        payout,
        extranonce_prefix: opened.extranonce_prefix,
        stats,
        stop,
        task,
    })
}

/// When the JDC tries its JDS and pool again after it left them: one attempt at a time, the
/// first a second after leaving, each failure doubling the wait up to a minute; the wait
/// starts over once the pool accepts a share after a rejoin (a pool that refuses the JDC
/// again at once is tried less and less often).
#[derive(Debug)]
struct Rejoin {
    at: Option<u64>,
    wait_ms: u64,
    in_flight: bool,
    /// Rejoined, and the pool has not accepted a share since.
    unproven: bool,
}

const REJOIN_FIRST_MS: u64 = 1_000;
const REJOIN_MAX_MS: u64 = 60_000;

impl Default for Rejoin {
    fn default() -> Self {
        Rejoin {
            at: None,
            wait_ms: REJOIN_FIRST_MS,
            in_flight: false,
            unproven: false,
        }
    }
}

impl Rejoin {
    /// Left the upstreams at `now`: the next attempt after the current wait, which doubles.
    fn schedule(&mut self, now: u64) {
        if self.at.is_none() && !self.in_flight {
            self.at = Some(now + self.wait_ms);
            self.wait_ms = (self.wait_ms * 2).min(REJOIN_MAX_MS);
        }
    }

    /// Whether an attempt starts now.
    fn due(&mut self, now: u64) -> bool {
        match self.at {
            Some(t) if now >= t && !self.in_flight => {
                self.at = None;
                self.in_flight = true;
                true
            }
            _ => false,
        }
    }

    fn share_accepted(&mut self) {
        if self.unproven {
            self.unproven = false;
            self.wait_ms = REJOIN_FIRST_MS;
        }
    }
}

/// Generations remembered for declaration and `PushSolution`.
const RECENT_GENERATIONS: usize = 16;

/// Of those, how many newest keep their declaration (transactions included) while the JDS is
/// away, for a block found on one of them to be declared again and pushed when it returns.
const DECLARATIONS_KEPT: usize = 4;

/// Blocks found while the JDS was away, kept to push when it returns. Each holds its template's
/// declaration, transactions included (shared with the others on the same template): on
/// mainnet a farm finds far fewer in any outage; the lab's easy networks find one a second.
const UNPUSHED_KEPT: usize = 32;

/// How long the JDS has to accept a block's template declared again before the block is given
/// up on (declarations for the pool wait meanwhile).
const PUSH_ANSWER_MS: u64 = 10_000;

/// How long one rejoin attempt (both setups, the first token included) may take.
const JOIN_WITHIN: Duration = Duration::from_secs(30);

/// A generation of the embedded pool, with what the JDC made of it.
struct Recent {
    g: Arc<Generation>,
    /// Its custom job, once declared (the token names it to the pool).
    job: Option<CustomJob>,
    /// Its declaration, kept only while the JDS is away or blocks are being pushed.
    declaration: Option<Declaration>,
}

/// A block found while the JDS was away: declared again, then pushed, when it returns.
struct Unpushed {
    share: TappedShare,
    g: Arc<Generation>,
    /// The template's declaration (`None` while its transactions are still being fetched).
    declaration: Option<Declaration>,
    /// Fetches of its transactions asked for since (a provider that no longer answers for the
    /// template is asked twice).
    fetches: u8,
}

struct Joined {
    jds: Option<NoiseConn>,
    up: Option<NoiseConn>,
    declarer: Declarer,
    channel: PoolChannel,
    /// The counts of the pool channels before this one (each rejoin opens another).
    earlier_channels: PoolChannelStats,
    /// What the coinbase pays: the pool's output from the JDS's latest setup.
    payout: ScriptBuf,
    /// The embedded pool's configured payout (from the first setup): a rejoin that brings
    /// another one overrides it.
    first_payout: ScriptBuf,
    /// Where the devices' extranonce ranges lie: the pool channel's prefix, and the bytes
    /// after it that are the JDC's (a new channel must have the same layout).
    base: Vec<u8>,
    extranonce_size: usize,
    tag: Vec<u8>,
    extranonce_len: usize,
    recent: VecDeque<Recent>,
    stats: Arc<Mutex<JdcStats>>,
    /// A transaction-data request is in flight: at most one at a time, since a template's
    /// transactions are megabytes and a provider answers them in order with everything else
    /// it sends (a queue of them would delay the next tip).
    fetching: Option<u64>,
    /// The newest generation whose transactions wait for the request in flight to end; older
    /// ones waiting are skipped (a newer template replaces them anyway).
    next_fetch: Option<Arc<Generation>>,
    /// The generation of the JDS's latest `DeclareMiningJob.Success`.
    last_declared: Option<u64>,
    fallback: Fallback,
    fallback_config: FallbackConfig,
    fallback_payout: Option<ScriptBuf>,
    engine: Arc<pool::engine::Engine>,
    clock: std::time::Instant,
    /// The pool channel's accepted count last looked at: a rise resets the rejection run.
    accepted_seen: u64,
    /// Wire bytes to and from the JDS and the pool.
    net: [Arc<LinkCounter>; 2],
    /// The embedded pool's clock, for the dependencies reported into its statistics.
    pool_clock: pool::service::Clock,
    join_settings: Arc<JoinSettings>,
    rejoin: Rejoin,
    /// Where a rejoin attempt's outcome comes back, and its task (ended with the JDC).
    joins: mpsc::UnboundedSender<Result<Upstreams, JdcError>>,
    rejoin_task: Option<JoinHandle<()>>,
    /// Where the farm's provider is asked for a template's transactions, and where the
    /// answers come back to this task.
    tx_data: mpsc::UnboundedSender<TxDataRequest>,
    data_tx: mpsc::UnboundedSender<(u64, TxDataReply)>,
    /// Blocks found while the JDS was away, oldest first.
    unpushed: VecDeque<Unpushed>,
    /// The generation declared again to push a block on it, and when (the JDC's clock), while
    /// the JDS has not answered.
    pushing: Option<(u64, u64)>,
    /// [`Joined::push_step`] is to run after the current event.
    push_step_due: bool,
}

/// Reads from an upstream that may be gone (then never ready).
async fn next_message(conn: &mut Option<NoiseConn>) -> Result<Option<Message>, TransportError> {
    match conn {
        Some(c) => c.read_message().await,
        None => std::future::pending().await,
    }
}

impl Joined {
    async fn run(
        mut self,
        early: Vec<DeclarerEvent>,
        mut generations: watch::Receiver<Option<Arc<Generation>>>,
        mut taps: mpsc::UnboundedReceiver<TappedShare>,
        mut joins: mpsc::UnboundedReceiver<Result<Upstreams, JdcError>>,
        mut data_rx: mpsc::UnboundedReceiver<(u64, TxDataReply)>,
        mut stop: watch::Receiver<bool>,
    ) {
        self.on_declarer(early).await;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => {
                    self.report_net_bytes();
                    let now = self.now_ms();
                    if let Some(r) = self.fallback.on_tick(now) {
                        self.fall_back(r).await;
                    }
                    if self.rejoin.due(now) {
                        self.try_rejoin();
                    }
                    if let Some((generation, since)) = self.pushing {
                        if now.saturating_sub(since) >= PUSH_ANSWER_MS {
                            self.pushed_declaration_answered(generation, None).await;
                        }
                    }
                }
                Some(joined) = joins.recv() => {
                    self.on_join(joined).await;
                }
                changed = generations.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let g = generations.borrow_and_update().clone();
                    if let Some(g) = g {
                        self.on_generation(g);
                    }
                }
                Some((generation, reply)) = data_rx.recv() => {
                    self.fetching = None;
                    self.on_tx_data(generation, reply).await;
                    if let Some(g) = self.next_fetch.take() {
                        self.fetch(g);
                    }
                    // A block waiting to be pushed may have its template now, or its turn to
                    // be fetched.
                    self.push_step_due |= !self.unpushed.is_empty();
                }
                Some(share) = taps.recv() => self.on_share(share).await,
                m = next_message(&mut self.jds) => match m {
                    Ok(Some(m)) => match self.declarer.on_message(m) {
                        Ok(events) => self.on_declarer(events).await,
                        Err(e) => self.lose_jds(e.to_string()),
                    },
                    Ok(None) => {}
                    Err(e) => self.lose_jds(e.to_string()),
                },
                m = next_message(&mut self.up) => match m {
                    Ok(Some(m)) => match self.channel.on_message(m) {
                        Ok(events) => self.on_pool(events).await,
                        Err(e) => self.lose_pool(e.to_string()),
                    },
                    Ok(None) => {}
                    Err(e) => self.lose_pool(e.to_string()),
                },
            }
            if self.push_step_due {
                self.push_step().await;
            }
            let stats = self.channel.stats;
            if stats.shares_accepted > self.accepted_seen {
                self.accepted_seen = stats.shares_accepted;
                self.fallback.share_accepted();
                self.rejoin.share_accepted();
            }
            if self.declarer.allocating() == 0 {
                self.fallback.tokens_answered();
            }
            self.stats.lock().unwrap_or_else(|e| e.into_inner()).channel =
                self.earlier_channels + stats;
        }
        if let Some(t) = self.rejoin_task.take() {
            t.abort();
        }
        if let Some(c) = self.jds.take() {
            c.close(Duration::from_millis(200)).await;
        }
        if let Some(c) = self.up.take() {
            c.close(Duration::from_millis(200)).await;
        }
        self.report_net_bytes();
    }

    fn report_net_bytes(&self) {
        for c in &self.net {
            c.report(&self.engine.events);
        }
    }

    fn stat(&self, f: impl FnOnce(&mut JdcStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// Says `d` failed, in the embedded pool's statistics.
    fn dependency_lost(&self, d: Dependency, why: &str) {
        self.engine
            .stats
            .set_attached(d, false, (self.pool_clock)(), Some(why.to_owned()));
    }

    fn lose_jds(&mut self, why: String) {
        tracing::error!(error = %why, "jdc: JDS lost; devices keep mining the farm's templates");
        self.jds = None;
        self.dependency_lost(Dependency::Jds, &why);
        self.stat(|s| s.upstream_lost = Some(format!("JDS: {why}")));
        if let Some(r) = self.fallback.jds_lost(&why) {
            self.leave_pool(r);
        }
    }

    fn lose_pool(&mut self, why: String) {
        tracing::error!(error = %why, "jdc: pool lost; devices keep mining the farm's templates");
        self.up = None;
        self.dependency_lost(Dependency::Pool, &why);
        self.stat(|s| s.upstream_lost = Some(format!("pool: {why}")));
        if let Some(r) = self.fallback.pool_lost(&why) {
            self.leave_pool(r);
        }
    }

    async fn fall_back(&mut self, r: FallbackReason) {
        if let Some(c) = self.jds.take() {
            c.close(Duration::from_millis(200)).await;
        }
        if let Some(c) = self.up.take() {
            c.close(Duration::from_millis(200)).await;
        }
        self.leave_pool(r);
    }

    /// Stops declaring and submitting; the devices mine for the farm from the next template.
    fn leave_pool(&mut self, r: FallbackReason) {
        // Connections closed on purpose are failed dependencies all the same: nothing declared
        // or submitted goes through them any more.
        let why = format!("left: {r}");
        self.jds = None;
        self.up = None;
        self.dependency_lost(Dependency::Jds, &why);
        self.dependency_lost(Dependency::Pool, &why);
        let solo = self.fallback_payout.clone();
        match &solo {
            Some(script) => {
                tracing::error!(reason = %r, payout = %script, "jdc: falling back to solo mining on the farm's templates");
                // Jobs from the next template on pay the farm (the farm's node sends one at
                // least every template interval, and at once on a new tip).
                self.engine.set_payout_override(Some(script.clone()));
            }
            None => {
                tracing::error!(reason = %r, "jdc: left the pool; no fallback payout address, so the devices keep mining jobs that pay it")
            }
        }
        self.stat(|s| {
            s.fallback = Some(r.to_string());
            s.solo = solo.is_some();
        });
        let now = self.now_ms();
        self.rejoin.schedule(now);
        if solo.is_none() {
            // The newest template was declared while the JDS was there, so its declaration
            // was not kept: fetched again, for a block found on it meanwhile.
            let newest = self.recent.back();
            if let Some(g) = newest
                .filter(|r| r.declaration.is_none())
                .map(|r| r.g.clone())
            {
                self.fetch_soon(g);
            }
        }
    }

    /// Sets up the JDS and the pool again, off this task (connecting may take seconds, and
    /// the devices' blocks must not wait): the outcome comes back to [`Joined::on_join`].
    fn try_rejoin(&mut self) {
        tracing::info!("jdc: trying the JDS and the pool again");
        let settings = self.join_settings.clone();
        let net = self.net.clone();
        let joins = self.joins.clone();
        self.rejoin_task = Some(tokio::spawn(async move {
            let joined = match tokio::time::timeout(JOIN_WITHIN, join(&settings, &net)).await {
                Ok(r) => r,
                Err(_) => Err(JdcError::JoinTimeout(JOIN_WITHIN)),
            };
            let _ = joins.send(joined);
        }));
    }

    /// A rejoin attempt ended: with both upstreams set up, the JDC declares and submits again
    /// (the devices move into the new channel's extranonce range if it has another prefix,
    /// and mine for the pool again from their next job); otherwise it waits longer.
    async fn on_join(&mut self, joined: Result<Upstreams, JdcError>) {
        self.rejoin.in_flight = false;
        let u = match joined {
            Ok(u)
                if u.opened.extranonce_prefix.len() == self.base.len()
                    && u.opened.extranonce_size == self.extranonce_size =>
            {
                u
            }
            Ok(u) => {
                let why = format!(
                    "the pool's new channel has another extranonce layout ({} + {} bytes, the devices' ranges need {} + {})",
                    u.opened.extranonce_prefix.len(),
                    u.opened.extranonce_size,
                    self.base.len(),
                    self.extranonce_size
                );
                u.jds.close(Duration::from_millis(200)).await;
                u.up.close(Duration::from_millis(200)).await;
                self.rejoin_failed(why);
                return;
            }
            Err(e) => {
                self.rejoin_failed(e.to_string());
                return;
            }
        };
        // The payout first, then the devices' work: every job they get from the move on pays
        // the pool again, in the new channel's range; work sent before (paying the farm, or in
        // the old range) is stale from then on, so no share of it reaches the new channel.
        self.engine
            .set_payout_override((u.payout != self.first_payout).then(|| u.payout.clone()));
        self.base = u.opened.extranonce_prefix.clone();
        self.engine.move_extranonce_base(u.opened.extranonce_prefix);
        self.jds = Some(u.jds);
        self.up = Some(u.up);
        self.declarer = u.declarer;
        self.earlier_channels = self.earlier_channels + self.channel.stats;
        self.channel = u.channel;
        self.accepted_seen = 0;
        self.fallback = Fallback::new(self.fallback_config.clone());
        if u.payout != self.payout {
            // Coinbases built for the old payout: templates are declared afresh.
            for r in self.recent.iter_mut() {
                r.job = None;
                r.declaration = None;
            }
        }
        self.payout = u.payout;
        // The JDS acknowledged nothing on this connection yet (each declaration gets the new
        // connection's token when the JDS accepts it).
        self.last_declared = None;
        let at = (self.pool_clock)();
        for d in [Dependency::Jds, Dependency::Pool] {
            self.engine.stats.set_attached(d, true, at, None);
        }
        self.rejoin.unproven = true;
        self.stat(|s| {
            s.rejoined += 1;
            s.fallback = None;
            s.solo = false;
        });
        tracing::info!(payout = %self.payout, "jdc: rejoined the JDS and the pool");
        self.pushing = None;
        self.on_declarer(u.early).await;
        // The blocks found meanwhile go to the JDS first, then the newest template is
        // declared at once, not at the next one.
        self.push_step().await;
    }

    fn rejoin_failed(&mut self, why: String) {
        tracing::warn!(error = %why, "jdc: could not rejoin the JDS and the pool; trying later");
        self.stat(|s| {
            s.rejoin_failures += 1;
            s.rejoin_error = Some(why);
        });
        let now = self.now_ms();
        self.rejoin.schedule(now);
    }

    fn on_generation(&mut self, g: Arc<Generation>) {
        if g.tdp.is_none() || self.recent.iter().any(|r| r.g.id == g.id) {
            return;
        }
        if self.recent.len() >= RECENT_GENERATIONS {
            self.recent.pop_front();
        }
        self.recent.push_back(Recent {
            g: g.clone(),
            job: None,
            declaration: None,
        });
        self.fetch_soon(g);
    }

    /// Fetches `g`'s transactions now, or once the request in flight ends (replacing any
    /// other template waiting: a newer one replaces it anyway); nothing if it is the one in
    /// flight.
    fn fetch_soon(&mut self, g: Arc<Generation>) {
        match self.fetching {
            None => self.fetch(g),
            Some(id) if id == g.id => {}
            Some(_) => self.next_fetch = Some(g),
        }
    }

    fn fetch(&mut self, g: Arc<Generation>) {
        let Some(tdp) = g.tdp.clone() else {
            return;
        };
        let (reply, answer) = oneshot::channel();
        if self
            .tx_data
            .send(TxDataRequest {
                template_id: tdp.template_id,
                reply,
            })
            .is_err()
        {
            return;
        }
        self.fetching = Some(g.id);
        tracing::debug!(
            generation = g.id,
            template_id = tdp.template_id,
            "jdc: transaction data requested"
        );
        let data_tx = self.data_tx.clone();
        let generation = g.id;
        tokio::spawn(async move {
            let r = answer
                .await
                .unwrap_or_else(|_| Err("the template feed stopped".into()));
            let _ = data_tx.send((generation, r));
        });
    }

    async fn on_tx_data(&mut self, generation: u64, reply: TxDataReply) {
        let Some(g) = self
            .recent
            .iter()
            .find(|r| r.g.id == generation)
            .map(|r| r.g.clone())
        else {
            return;
        };
        let data = match reply {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(generation, error = %e, "jdc: no transaction data; template not declared");
                self.stat(|s| s.tx_data_failed += 1);
                return;
            }
        };
        let tdp = g
            .tdp
            .as_ref()
            .expect("generations kept have a provider template");
        let (custom, declared) = match coinbase::build(
            tdp,
            &self.tag,
            self.extranonce_len,
            &self.payout,
        ) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(generation, error = %e, "jdc: cannot build the coinbase to declare");
                return;
            }
        };
        tracing::debug!(
            generation,
            txs = data.transaction_list.len(),
            "jdc: transaction data received"
        );
        let mut txs = Vec::with_capacity(data.transaction_list.len());
        for raw in data.transaction_list {
            let Ok(tx) = deserialize::<Transaction>(&raw) else {
                tracing::error!(
                    generation,
                    "jdc: the node sent a transaction that does not decode"
                );
                self.stat(|s| s.tx_data_failed += 1);
                return;
            };
            txs.push(TxData {
                wtxid: tx.compute_wtxid().to_byte_array(),
                data: raw,
            });
        }
        let job = match g.job(&self.payout) {
            Ok(j) => j,
            Err(e) => {
                tracing::error!(generation, error = %e, "jdc: no job for the generation");
                return;
            }
        };
        let custom_job = CustomJob {
            generation,
            token: Vec::new(),
            version: job.version,
            prev_hash: job.prev_hash,
            min_ntime: job.ntime,
            nbits: job.bits.to_consensus(),
            coinbase: custom,
            merkle_path: g.merkle_branch.iter().map(|h| h.0).collect(),
        };
        if let Some(slot) = self.recent.iter_mut().find(|r| r.g.id == generation) {
            slot.job = Some(custom_job);
        }
        let declaration = Declaration {
            generation,
            version: job.version,
            coinbase_prefix: declared.prefix,
            coinbase_suffix: declared.suffix,
            txs: Arc::from(txs),
        };
        for u in self.unpushed.iter_mut() {
            if u.g.id == generation && u.declaration.is_none() {
                u.declaration = Some(declaration.clone());
            }
        }
        if self.jds.is_none() || self.pushing.is_some() {
            // Kept (the newest few) for a block found on it meanwhile; declared, if still the
            // newest, once the JDS is back and the blocks found without it are pushed.
            if let Some(slot) = self.recent.iter_mut().find(|r| r.g.id == generation) {
                slot.declaration = Some(declaration);
            }
            let n = self.recent.len();
            for r in self
                .recent
                .iter_mut()
                .take(n.saturating_sub(DECLARATIONS_KEPT))
            {
                r.declaration = None;
            }
            return;
        }
        tracing::debug!(generation, txs = declaration.txs.len(), "jdc: declaring");
        let events = self.declarer.declare(declaration);
        self.on_declarer(events).await;
    }

    /// One step of pushing the blocks found while the JDS was away, on a JDS that is back:
    /// the oldest is declared again (the JDS rebuilds a pushed block from the job it
    /// acknowledged last), and pushed once the JDS accepts the declaration; when none is left,
    /// the newest template is declared for the pool.
    async fn push_step(&mut self) {
        self.push_step_due = false;
        if self.jds.is_none() || self.pushing.is_some() {
            return;
        }
        while let Some(u) = self.unpushed.front_mut() {
            let Some(d) = u.declaration.clone() else {
                // Its template's transactions are being fetched (they fill it in and run this
                // again), or are fetched now; a template the provider no longer answers for
                // cannot be declared.
                if self.fetching == Some(u.g.id) {
                    return;
                }
                if u.fetches < 2 {
                    u.fetches += 1;
                    let g = u.g.clone();
                    self.fetch_soon(g);
                    return;
                }
                tracing::warn!(hash = %u.share.hash, generation = u.g.id, "jdc: a block found while the JDS was away cannot be pushed: its template's transactions never came");
                self.unpushed.pop_front();
                continue;
            };
            tracing::info!(hash = %u.share.hash, generation = d.generation, "jdc: declaring a block's template again, to push the block the JDS missed");
            self.pushing = Some((d.generation, self.now_ms()));
            let events = self.declarer.declare(d);
            self.on_declarer(events).await;
            return;
        }
        // Done: the newest template, declared for the pool (its declaration if kept, else
        // fetched again).
        let newest = self
            .recent
            .back_mut()
            .map(|r| (r.g.clone(), r.declaration.take()));
        for r in self.recent.iter_mut() {
            r.declaration = None;
        }
        match newest {
            Some((_, Some(d))) => {
                let events = self.declarer.declare(d);
                self.on_declarer(events).await;
            }
            Some((g, None)) => {
                self.fetch_soon(g);
            }
            None => {}
        }
    }

    /// The JDS answered the declaration of a block's template: push the block if it took it.
    /// `declared`: `None` when the JDS did not answer in time.
    async fn pushed_declaration_answered(&mut self, generation: u64, declared: Option<bool>) {
        self.pushing = None;
        self.push_step_due = true;
        let head = self.unpushed.front();
        if head
            .and_then(|u| u.declaration.as_ref())
            .map(|d| d.generation)
            != Some(generation)
        {
            return;
        }
        let u = self.unpushed.pop_front().expect("looked at");
        match declared {
            Some(true) => {}
            Some(false) => {
                tracing::warn!(hash = %u.share.hash, generation, "jdc: the JDS refused a block's template declared again; the block reached the network through the farm's node alone");
                return;
            }
            None => {
                tracing::warn!(hash = %u.share.hash, generation, "jdc: the JDS did not answer a block's template declared again in time; the block reached the network through the farm's node alone");
                return;
            }
        }
        if self.send_push(&u.g, &u.share).await {
            tracing::info!(hash = %u.share.hash, generation, "jdc: block found while the JDS was away, pushed to it now");
            self.stat(|s| s.solutions_pushed_late += 1);
        } else {
            // The JDS went again: the block waits for the next rejoin.
            self.unpushed.push_front(u);
        }
    }

    async fn on_declarer(&mut self, events: Vec<DeclarerEvent>) {
        for e in events {
            match e {
                DeclarerEvent::Send(m) => {
                    if matches!(
                        m,
                        Message::JobDeclaration(
                            sv2::messages::JobDeclaration::AllocateMiningJobToken(_)
                        )
                    ) {
                        let now = self.now_ms();
                        self.fallback.token_asked(now);
                    }
                    if let Some(c) = &mut self.jds {
                        if let Err(e) = c.send_message(&m).await {
                            self.lose_jds(e.to_string());
                        }
                    }
                }
                DeclarerEvent::PoolOutputs(_) => {}
                DeclarerEvent::Declared { generation, .. }
                    if self.pushing.map(|p| p.0) == Some(generation) =>
                {
                    // Declared again only to push a block on it: not a job for the pool.
                    self.last_declared = Some(generation);
                    self.pushed_declaration_answered(generation, Some(true))
                        .await;
                }
                DeclarerEvent::Refused { generation, .. }
                    if self.pushing.map(|p| p.0) == Some(generation) =>
                {
                    self.pushed_declaration_answered(generation, Some(false))
                        .await;
                }
                DeclarerEvent::Declared { generation, token } => {
                    self.stat(|s| s.declared += 1);
                    self.last_declared = Some(generation);
                    let Some(mut job) = self
                        .recent
                        .iter()
                        .find(|r| r.g.id == generation)
                        .and_then(|r| r.job.clone())
                    else {
                        continue;
                    };
                    job.token = token.clone();
                    if let Some(slot) = self.recent.iter_mut().find(|r| r.g.id == generation) {
                        slot.job = Some(job.clone());
                    }
                    let events = self.channel.set_custom_job(&job);
                    self.send_pool(events).await;
                }
                DeclarerEvent::Refused {
                    generation,
                    code,
                    details,
                } => {
                    tracing::warn!(
                        generation,
                        code,
                        details,
                        "jdc: JDS refused the declaration"
                    );
                    self.stat(|s| s.declarations_refused += 1);
                    self.channel.forget_generation(generation);
                    if let Some(r) = self.fallback.declaration_refused(&code) {
                        self.fall_back(r).await;
                    }
                }
            }
        }
    }

    async fn send_pool(&mut self, events: Vec<PoolEvent>) {
        for e in events {
            if let PoolEvent::Send(m) = e {
                if let Some(c) = &mut self.up {
                    if let Err(e) = c.send_message(&m).await {
                        self.lose_pool(e.to_string());
                    }
                }
            }
        }
    }

    async fn on_pool(&mut self, events: Vec<PoolEvent>) {
        let mut sends = Vec::new();
        for e in events {
            match e {
                PoolEvent::Send(_) => sends.push(e),
                PoolEvent::JobSet { generation, job_id } => {
                    tracing::debug!(generation, job_id, "jdc: custom job set");
                }
                PoolEvent::JobRefused { generation, code } => {
                    tracing::warn!(generation, code, "jdc: pool refused the custom job");
                    if let Some(r) = self.fallback.job_refused(&code) {
                        self.fall_back(r).await;
                    }
                }
                PoolEvent::ShareRejected { generation, code } => {
                    tracing::warn!(generation, code, "jdc: pool rejected a share");
                    let stale = code == sv2::messages::mining::error_code::STALE_SHARE;
                    if let Some(r) = self.fallback.share_rejected(&code, stale) {
                        self.fall_back(r).await;
                    }
                }
                PoolEvent::TargetChanged(_) | PoolEvent::Opened(_) => {}
                PoolEvent::PrefixChanged(p) if p.len() == self.base.len() => {
                    // The devices' ranges move with it (shares mined before they are told
                    // are counted foreign).
                    tracing::info!(
                        prefix_len = p.len(),
                        "jdc: the pool moved the channel's extranonce prefix; the devices follow"
                    );
                    self.base = p.clone();
                    self.engine.move_extranonce_base(p);
                }
                PoolEvent::PrefixChanged(p) => {
                    // Another length would change the coinbase's layout under the devices'
                    // jobs: their shares are counted as foreign until the JDC rejoins.
                    tracing::warn!(
                        prefix_len = p.len(),
                        "jdc: the pool moved the channel's extranonce prefix to another length; the devices cannot follow"
                    );
                }
            }
        }
        self.send_pool(sends).await;
    }

    async fn on_share(&mut self, share: TappedShare) {
        if share.block {
            // While the JDS is away, or blocks found then are still being pushed, a block
            // waits its turn behind them.
            if self.jds.is_some() && self.pushing.is_none() && self.unpushed.is_empty() {
                self.push_solution(&share).await;
            } else {
                self.keep_unpushed(&share);
                self.push_step_due = self.jds.is_some();
            }
        }
        let events = self.channel.share(&share);
        self.send_pool(events).await;
    }

    /// A block found while the JDS is away: the farm's node has it already; the JDS gets it
    /// when it returns, unless the devices mine for the farm (then the block is not the
    /// pool's, and its coinbase is not the one a declaration would pay).
    fn keep_unpushed(&mut self, share: &TappedShare) {
        if self.stats.lock().unwrap_or_else(|e| e.into_inner()).solo {
            return;
        }
        let Some(r) = self.recent.iter().find(|r| r.g.id == share.generation) else {
            tracing::warn!(generation = share.generation, hash = %share.hash, "jdc: block found on a template no longer remembered; the farm's node propagates it alone");
            return;
        };
        if self.unpushed.len() >= UNPUSHED_KEPT {
            let old = self.unpushed.pop_front().expect("full");
            tracing::warn!(hash = %old.share.hash, "jdc: too many blocks found while the JDS is away; the oldest will not be pushed to it");
        }
        tracing::info!(generation = share.generation, hash = %share.hash, "jdc: block found while the JDS is away; pushed to it when it returns");
        self.unpushed.push_back(Unpushed {
            share: share.clone(),
            g: r.g.clone(),
            declaration: r.declaration.clone(),
            fetches: 0,
        });
    }

    async fn push_solution(&mut self, share: &TappedShare) {
        // The JDS rebuilds a pushed block from the job it acknowledged last (spec 6.4.9): a
        // block on any other template reaches the network through the farm's node alone.
        let Some(g) = self
            .recent
            .iter()
            .find(|r| r.g.id == share.generation && self.last_declared == Some(r.g.id))
            .map(|r| r.g.clone())
        else {
            tracing::info!(generation = share.generation, last_declared = ?self.last_declared, hash = %share.hash, "jdc: block found on a template other than the last declared; the farm's node propagates it alone");
            return;
        };
        tracing::info!(generation = share.generation, hash = %share.hash, "jdc: block found; pushed to the JDS too");
        if !self.send_push(&g, share).await {
            self.keep_unpushed(share);
        }
    }

    /// Sends `PushSolution`; whether it went.
    async fn send_push(&mut self, g: &Generation, share: &TappedShare) -> bool {
        let m: Message = PushSolution {
            extranonce: share.extranonce.clone(),
            prev_hash: g.template.prev_hash.0,
            nonce: share.nonce,
            ntime: share.ntime,
            nbits: g.template.bits.to_consensus(),
            version: share.version,
        }
        .into();
        let Some(c) = &mut self.jds else {
            return false;
        };
        if let Err(e) = c.send_message(&m).await {
            self.lose_jds(e.to_string());
            return false;
        }
        self.stat(|s| s.solutions_pushed += 1);
        true
    }
}
