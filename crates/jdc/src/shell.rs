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

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use events::LinkCounter;
use pool::engine::{PayoutMode, TappedShare};
use pool::jobs::Generation;
use pool::service::{PoolSettings, RunningPool};
use pool::stats::Dependency;
use pool::tp::{TxDataReply, TxDataRequest};
use primitives::bitcoin::ScriptBuf;
use primitives::Timestamp;
use sv2::{Limits, Message, NoiseConn, TransportError};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

pub use crate::core::JdcStats;
use crate::core::{CoreConfig, CoreEvent, JdcCore, Link, Setup};
use crate::declarer::{Declarer, DeclarerConfig, DeclarerError, DeclarerEvent};
use crate::fallback::FallbackConfig;
use crate::pool_channel::{
    OpenedChannel, PoolChannel, PoolChannelConfig, PoolChannelError, PoolEvent,
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

impl Upstreams {
    /// The connections, and what the core takes of the setup.
    fn split(self) -> (NoiseConn, NoiseConn, Setup) {
        let setup = Setup {
            declarer: self.declarer,
            early: self.early,
            payout: self.payout,
            channel: self.channel,
            opened: self.opened,
        };
        (self.jds, self.up, setup)
    }
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
        for e in declarer.handle_message(m)? {
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
        // A pool that does not know extensions negotiation ignores the request: the channel
        // opens without them after a bounded wait.
        let events = if channel.awaiting_extensions() {
            let wait = Duration::from_millis(sv2::negotiation::ANSWER_TIMEOUT_MS);
            match tokio::time::timeout(wait, read("pool", &mut up)).await {
                Ok(m) => channel.handle_message(m?)?,
                Err(_) => {
                    tracing::info!(?wait, "jdc: the pool did not answer RequestExtensions: mining without worker tracking");
                    channel.extensions_unanswered()
                }
            }
        } else {
            channel.handle_message(read("pool", &mut up).await?)?
        };
        let mut opened = None;
        for e in events {
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
        worker_tracking = channel.worker_tracking(),
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
    let (jds, up, setup) = join(&join_settings, &net).await?.split();
    let payout = setup.payout.clone();
    let opened = setup.opened.clone();

    let mut ps = settings.pool.clone();
    ps.engine.payout = PayoutMode::Pool(payout.clone());
    ps.engine.jobs.extranonce_len = opened.extranonce_prefix.len() + opened.extranonce_size;
    ps.sv2.config.extranonce_base = opened.extranonce_prefix.clone();
    ps.sv2.config.extended_extranonce_size = (opened.extranonce_size - 4).min(8);
    let core_config = CoreConfig {
        tag: ps.engine.jobs.coinbase_tag.clone(),
        extranonce_len: ps.engine.jobs.extranonce_len,
        fallback: settings.fallback.clone(),
        fallback_payout: settings.fallback_payout.clone(),
    };
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
        core: JdcCore::new(core_config, setup, Timestamp::ZERO),
        jds: Some(jds),
        up: Some(up),
        stats: stats.clone(),
        engine: running.engine.clone(),
        clock: tokio::time::Instant::now(),
        net,
        pool_clock: clock,
        join_settings: Arc::new(join_settings),
        joins: joins_tx,
        rejoin_task: None,
        tx_data,
        data_tx,
    };
    let task = tokio::spawn(joined.run(generations, tap_rx, joins_rx, data_rx, stop_rx));
    Ok(RunningJdc {
        pool: running,
        payout,
        extranonce_prefix: opened.extranonce_prefix,
        stats,
        stop,
        task,
    })
}

/// How long one rejoin attempt (both setups, the first token included) may take.
const JOIN_WITHIN: Duration = Duration::from_secs(30);

/// The task that drives the core: its connections, the embedded pool, and the channels to
/// and from the tasks it starts.
struct Joined {
    core: JdcCore,
    jds: Option<NoiseConn>,
    up: Option<NoiseConn>,
    stats: Arc<Mutex<JdcStats>>,
    engine: Arc<pool::engine::Engine>,
    clock: tokio::time::Instant,
    /// Wire bytes to and from the JDS and the pool.
    net: [Arc<LinkCounter>; 2],
    /// The embedded pool's clock, for the dependencies reported into its statistics.
    pool_clock: pool::service::Clock,
    join_settings: Arc<JoinSettings>,
    /// Where a rejoin attempt's outcome comes back, and its task (ended with the JDC).
    joins: mpsc::UnboundedSender<Result<Upstreams, JdcError>>,
    rejoin_task: Option<JoinHandle<()>>,
    /// Where the farm's provider is asked for a template's transactions, and where the
    /// answers come back to this task.
    tx_data: mpsc::UnboundedSender<TxDataRequest>,
    data_tx: mpsc::UnboundedSender<(u64, TxDataReply)>,
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
        mut generations: watch::Receiver<Option<Arc<Generation>>>,
        mut taps: mpsc::UnboundedReceiver<TappedShare>,
        mut joins: mpsc::UnboundedReceiver<Result<Upstreams, JdcError>>,
        mut data_rx: mpsc::UnboundedReceiver<(u64, TxDataReply)>,
        mut stop: watch::Receiver<bool>,
    ) {
        self.drive().await;
        let mut tick = tokio::time::interval(events::LINK_REPORT_EVERY);
        loop {
            let deadline = self.core.poll_timeout();
            let wake = async {
                match deadline {
                    Some(at) => {
                        let after = Duration::from_nanos(at.as_nanos());
                        tokio::time::sleep_until(self.clock + after).await
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => self.report_net_bytes(),
                _ = wake => {
                    let now = self.now();
                    self.core.handle_timeout(now);
                }
                Some(joined) = joins.recv() => self.on_join(joined).await,
                changed = generations.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let g = generations.borrow_and_update().clone();
                    if let Some(g) = g {
                        let now = self.now();
                        self.core.handle_generation(g, now);
                    }
                }
                Some((generation, reply)) = data_rx.recv() => {
                    let now = self.now();
                    self.core.handle_tx_data(generation, reply, now);
                }
                Some(share) = taps.recv() => {
                    let now = self.now();
                    self.core.handle_share(share, now);
                }
                m = next_message(&mut self.jds) => {
                    let now = self.now();
                    match m {
                        Ok(Some(m)) => self.core.handle_jds_message(m, now),
                        Ok(None) => {}
                        Err(e) => self.core.handle_link_lost(Link::Jds, e.to_string(), now),
                    }
                }
                m = next_message(&mut self.up) => {
                    let now = self.now();
                    match m {
                        Ok(Some(m)) => self.core.handle_pool_message(m, now),
                        Ok(None) => {}
                        Err(e) => self.core.handle_link_lost(Link::Pool, e.to_string(), now),
                    }
                }
            }
            self.drive().await;
        }
        if let Some(t) = self.rejoin_task.take() {
            t.abort();
        }
        for conn in [self.jds.take(), self.up.take()].into_iter().flatten() {
            conn.close(Duration::from_millis(200)).await;
        }
        self.report_net_bytes();
    }

    /// The core's time: nanoseconds since the shell started.
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.clock.elapsed().as_nanos() as u64)
    }

    fn report_net_bytes(&self) {
        for c in &self.net {
            c.report(&self.engine.events);
        }
    }

    /// Does what the core asks: its messages sent in order (a failed send goes back to it),
    /// its events carried out, until it asks nothing more; then its counters shown.
    async fn drive(&mut self) {
        loop {
            let mut idle = true;
            while let Some(t) = self.core.poll_transmit() {
                idle = false;
                let conn = match t.to {
                    Link::Jds => &mut self.jds,
                    Link::Pool => &mut self.up,
                };
                let sent = match conn {
                    Some(c) => c.send_message(&t.message).await.map_err(|e| e.to_string()),
                    None => Err("not connected".to_owned()),
                };
                if let Err(why) = sent {
                    let now = self.now();
                    self.core.handle_send_failed(t, why, now);
                }
            }
            while let Some(e) = self.core.poll_event() {
                idle = false;
                self.carry_out(e).await;
            }
            if idle {
                break;
            }
        }
        *self.stats.lock().unwrap_or_else(|e| e.into_inner()) = self.core.stats().clone();
    }

    async fn carry_out(&mut self, e: CoreEvent) {
        match e {
            CoreEvent::FetchTxData {
                generation,
                template_id,
            } => {
                let (reply, answer) = oneshot::channel();
                if self
                    .tx_data
                    .send(TxDataRequest { template_id, reply })
                    .is_err()
                {
                    let now = self.now();
                    let stopped = Err("the template feed stopped".into());
                    self.core.handle_tx_data(generation, stopped, now);
                    return;
                }
                let data_tx = self.data_tx.clone();
                tokio::spawn(async move {
                    let r = answer
                        .await
                        .unwrap_or_else(|_| Err("the template feed stopped".into()));
                    let _ = data_tx.send((generation, r));
                });
            }
            CoreEvent::Rejoin => self.try_rejoin(),
            CoreEvent::Close(link) => {
                let conn = match link {
                    Link::Jds => self.jds.take(),
                    Link::Pool => self.up.take(),
                };
                // Off this task: the devices' work must not wait for a peer that may be
                // gone (a lost link's connection is broken already).
                if let Some(c) = conn {
                    tokio::spawn(c.close(Duration::from_millis(200)));
                }
            }
            CoreEvent::PayoutOverride(script) => self.engine.set_payout_override(script),
            CoreEvent::ExtranonceBase(prefix) => self.engine.move_extranonce_base(prefix),
            CoreEvent::Dependency {
                which,
                attached,
                why,
            } => {
                self.engine
                    .stats
                    .set_attached(which, attached, (self.pool_clock)(), why);
            }
        }
    }

    /// Sets up the JDS and the pool again, off this task (connecting may take seconds, and
    /// the devices' blocks must not wait): the outcome comes back to [`Joined::on_join`].
    fn try_rejoin(&mut self) {
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

    /// A rejoin attempt ended: the core takes both upstreams, or refuses them (then they are
    /// closed) and waits longer.
    async fn on_join(&mut self, joined: Result<Upstreams, JdcError>) {
        let now = self.now();
        match joined {
            Ok(u) => {
                let (jds, up, setup) = u.split();
                if self.core.handle_joined(setup, now) {
                    self.jds = Some(jds);
                    self.up = Some(up);
                } else {
                    // Off this task, as every close the core asks for.
                    tokio::spawn(jds.close(Duration::from_millis(200)));
                    tokio::spawn(up.close(Duration::from_millis(200)));
                }
            }
            Err(e) => self.core.handle_join_failed(e.to_string(), now),
        }
    }
}
