//! The running pool: the node feed turned into jobs, the health watch that stops work when the
//! node fails, the block task, the store, the HTTP endpoints and the SV1 server, started
//! together and stopped together. The `stratumlab pool` command and in-process tests use it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use events::{BlockFound, BlockResult, BlockSubmitted, EventSink, ShortStr, TemplateCreated};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::engine::{unix_ms, Engine, EngineConfig, FoundBlock};
use crate::http::{self, HttpState};
use crate::jobs::JobBook;
use crate::node::{
    submit_until_answered, NodeClient, NodeConfig, NodeError, NodeHealth, NodeState, TemplateFeed,
};
use crate::stats::{
    BlockFate, NodeStatus, NotServing, PoolStats, Serving, StoreReport, WorkerRegistry,
};
use crate::store::{BlockRecord, Store, StoreConfig, StoreError, WorkerKey};
use crate::sv1::{Sv1Config, Sv1Server};
use crate::sv2::{Sv2Config, Sv2Server};
use crate::template::{TdpTemplate, Template};
use crate::tp::{KeptTransactions, TpConfig, TpFeed, TpWork};
use crate::Timestamp;
use edge::{Admission, Gate};
use sv2::keys::AuthorityKeys;

/// Everything a pool is started with (see [`RunningPool`]).
#[derive(Clone, Debug)]
pub struct PoolSettings {
    /// The share-accounting engine's settings.
    pub engine: EngineConfig,
    /// The node's RPC: templates (unless `tp`) and block submission.
    pub node: NodeConfig,
    /// Templates from this SV2 Template Provider instead of the node's `getblocktemplate`.
    pub tp: Option<TpConfig>,
    /// With `tp`: the node's RPC (`node`) too, as a second way out for found blocks (a block
    /// the provider cannot take, or does not answer for, goes out through `submitblock`) and a
    /// second source of work while the provider is unreachable.
    pub node_beside_tp: bool,
    /// Serve Stratum V1 miners on this address; `None`: no SV1.
    pub sv1_listen: Option<SocketAddr>,
    /// Serve `/metrics`, `/api/*` and `/healthz` on this address; `None`: no HTTP.
    pub http_listen: Option<SocketAddr>,
    /// The share store; `None` keeps no shares.
    pub store: Option<StoreConfig>,
    /// Write the event log to this file; `None`: no event log.
    pub events: Option<PathBuf>,
    /// The configuration name written in the event log's header.
    pub events_config: String,
    /// The SV1 front end's settings.
    pub sv1: Sv1Config,
    /// Admission control for miners (rates, bans, connection caps).
    pub admission: Admission,
    /// Serve Stratum V2 miners on this address.
    pub sv2_listen: Option<SocketAddr>,
    /// The SV2 front end's settings.
    pub sv2: Sv2Settings,
}

/// The SV2 front end's settings: the Mining Protocol's and the Noise responder's.
#[derive(Clone, Debug)]
pub struct Sv2Settings {
    /// The Mining Protocol side.
    pub config: Sv2Config,
    /// Signs each connection's Noise certificate; miners are configured with its public half.
    pub keys: AuthorityKeys,
    /// How long each Noise certificate is valid from the handshake.
    pub cert_validity: Duration,
}

impl Default for Sv2Settings {
    fn default() -> Self {
        Sv2Settings {
            config: Sv2Config::default(),
            keys: AuthorityKeys::reference(),
            // The reference roles' default.
            cert_validity: Duration::from_secs(3600),
        }
    }
}

/// Why a pool could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The node client could not be set up.
    #[error("node client: {0}")]
    Node(#[from] NodeError),
    /// The share store could not be opened.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A listener could not bind.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Listen {
        /// Which listener: `sv1`, `sv2` or `http`.
        what: &'static str,
        /// The address it was to bind.
        addr: SocketAddr,
        /// The OS's error.
        source: std::io::Error,
    },
    /// The event log could not be opened.
    #[error("event log {path}: {source}")]
    Events {
        /// The event log file.
        path: PathBuf,
        /// The OS's error.
        source: std::io::Error,
    },
}

/// A started pool. [`RunningPool::shutdown`] stops it.
pub struct RunningPool {
    /// The share-accounting engine.
    pub engine: Arc<Engine>,
    /// Where SV1 miners connect (the bound address); `None` without SV1.
    pub sv1_addr: Option<SocketAddr>,
    /// Where SV2 miners connect; `None` without SV2.
    pub sv2_addr: Option<SocketAddr>,
    /// Where the HTTP endpoints are served; `None` without HTTP.
    pub http_addr: Option<SocketAddr>,
    /// The template source's health.
    pub health: Arc<NodeHealth>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
    feed: Option<Feed>,
    /// The node's feed beside a provider's ([`PoolSettings::node_beside_tp`]).
    backup_feed: Option<TemplateFeed>,
    status_sections: http::StatusSections,
    metrics_role: Arc<std::sync::OnceLock<&'static str>>,
    clock: Clock,
}

/// The pool's clock: milliseconds since it started, as its statistics and sessions count them.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Where templates come from.
enum Feed {
    Node(TemplateFeed),
    Tp(TpFeed),
}

/// Where found blocks go: `submitblock` to the node, or `SubmitSolution` to the provider whose
/// template the block is built on (and `submitblock` beside it, when the pool has the node's
/// RPC too).
enum BlockSink {
    Node(NodeClient),
    Tp {
        solutions: mpsc::UnboundedSender<sv2::messages::template_distribution::SubmitSolution>,
        recent: RecentTdp,
        /// The provider's tips: the first one after a submission says whether the block won.
        works: watch::Receiver<Option<TpWork>>,
        /// Whether the provider is connected now.
        health: Arc<NodeHealth>,
        /// The node's RPC beside the provider, and the provider templates' transactions that
        /// let the pool build a whole block for it.
        node: Option<(NodeClient, Arc<KeptTransactions>)>,
        /// Where to ask the provider for a template's transactions.
        tx_data: mpsc::UnboundedSender<crate::tp::TxDataRequest>,
    },
}

/// The provider templates of the latest generations, by generation id: what a found block's
/// `SubmitSolution` names.
type RecentTdp = Arc<Mutex<VecDeque<(u64, Arc<TdpTemplate>)>>>;
const RECENT_TDP: usize = 64;

/// Templates as the jobs task reads them, from either source.
enum TemplateRx {
    Node(watch::Receiver<Option<Arc<Template>>>),
    /// A provider's, and the node's beside it when the pool has both: work comes from the
    /// provider while it serves, from the node while it does not.
    Tp(
        watch::Receiver<Option<TpWork>>,
        RecentTdp,
        Option<(NodeTemplates, Arc<NodeHealth>)>,
    ),
}

/// The node feed's templates.
type NodeTemplates = watch::Receiver<Option<Arc<Template>>>;

impl TemplateRx {
    /// The next template; `None` when the source is gone.
    async fn changed(&mut self) -> Option<()> {
        match self {
            TemplateRx::Node(rx) => rx.changed().await.ok(),
            TemplateRx::Tp(rx, _, _) => rx.changed().await.ok(),
        }
    }
}

/// The next template of the node beside a provider; never, without one.
async fn backup_changed(backup: &mut Option<NodeTemplates>) -> Option<()> {
    match backup {
        Some(rx) => rx.changed().await.ok(),
        None => std::future::pending().await,
    }
}

/// Where the jobs come from now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The node's `getblocktemplate` (alone, or beside an unreachable provider).
    Node,
    Tp,
}

impl RunningPool {
    /// Starts every part on the current tokio runtime.
    pub async fn start(settings: PoolSettings) -> Result<RunningPool, ServiceError> {
        let clock_start = Instant::now();
        let clock: Clock =
            Arc::new(move || Timestamp::from_millis(clock_start.elapsed().as_millis() as u64));
        let stats = PoolStats::new(clock());
        stats.set_serving(Serving::No(NotServing::NoTemplateYet));
        let workers = WorkerRegistry::new(&stats);
        let store = match &settings.store {
            Some(c) => Some(Store::open(c.clone())?),
            None => None,
        };
        // Workers that connect again go on from the totals earlier runs stored.
        if let Some(s) = &store {
            workers.carry_over(s.take_worker_totals().into_iter().map(
                |(name, accepted, accepted_work)| crate::stats::CarriedOver {
                    name,
                    accepted,
                    accepted_work,
                },
            ));
        }
        let events = match &settings.events {
            Some(path) => {
                EventSink::create(path, "pool", &settings.events_config).map_err(|source| {
                    ServiceError::Events {
                        path: path.clone(),
                        source,
                    }
                })?
            }
            None => EventSink::disabled(),
        };
        let (engine, found) = Engine::new(
            settings.engine.clone(),
            stats.clone(),
            workers.clone(),
            store.clone(),
            events,
        );
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();

        let mut stop = shutdown_rx.clone();
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        let (feed, templates, sink, backup_feed) = match &settings.tp {
            Some(tp) => {
                let mut tp = tp.clone();
                // With a node beside, every template handed out must be one the pool can build a
                // whole block from: the feed fetches each template's transactions.
                tp.session.fetch_transactions |= settings.node_beside_tp;
                let feed = TpFeed::spawn(tp, engine.events.clone(), stopped);
                let recent = RecentTdp::default();
                let backup = match feed.kept_transactions() {
                    Some(kept) if settings.node_beside_tp => {
                        let client = NodeClient::new(settings.node.clone())?;
                        let mut stop = shutdown_rx.clone();
                        let node_feed = TemplateFeed::spawn(client.clone(), async move {
                            let _ = stop.wait_for(|s| *s).await;
                        });
                        stats.show_kept_transactions(kept.clone());
                        Some((client, kept, node_feed))
                    }
                    _ => None,
                };
                let sink = BlockSink::Tp {
                    solutions: feed.solutions(),
                    recent: recent.clone(),
                    works: feed.works(),
                    health: feed.health(),
                    node: backup
                        .as_ref()
                        .map(|(client, txs, _)| (client.clone(), txs.clone())),
                    tx_data: feed.tx_data(),
                };
                let backup_rx = backup.as_ref().map(|(_, _, f)| (f.templates(), f.health()));
                let rx = TemplateRx::Tp(feed.works(), recent, backup_rx);
                (Feed::Tp(feed), rx, sink, backup.map(|(_, _, f)| f))
            }
            None => {
                let client = NodeClient::new(settings.node.clone())?;
                let feed = TemplateFeed::spawn(client.clone(), stopped);
                let rx = TemplateRx::Node(feed.templates());
                (Feed::Node(feed), rx, BlockSink::Node(client), None)
            }
        };
        let health = match &feed {
            Feed::Node(f) => f.health(),
            Feed::Tp(f) => f.health(),
        };
        tasks.spawn(jobs_task(
            engine.clone(),
            templates,
            health.clone(),
            settings.node.zmq.is_some(),
            clock.clone(),
            settings.engine.jobs.clone(),
            shutdown_rx.clone(),
        ));
        // The counts run from the store's beginning, and are right before anything serves
        // them: blocks an earlier run found and never heard back about are pending from the
        // first status request on (the task below sends them out again).
        if let Some(s) = &store {
            engine
                .stats
                .restore_blocks(s.blocks_awaiting_answer().len(), s.blocks_answered());
        }
        tasks.spawn(blocks_task(
            engine.clone(),
            sink,
            found,
            store.clone(),
            shutdown_rx.clone(),
        ));
        stats.set_uses_tp(settings.tp.is_some());
        if let Some(store) = store.clone() {
            let stats = stats.clone();
            let clock = clock.clone();
            let mut stop = shutdown_rx.clone();
            // Often enough that a fault shows on /healthz within a second.
            tasks.spawn(async move {
                loop {
                    let s = store.stats();
                    let now = clock();
                    let failing_since = s.failing.as_ref().map(|(_, since)| {
                        let for_ms = since.elapsed().unwrap_or_default().as_millis() as u64;
                        Timestamp::from_millis(now.as_millis().saturating_sub(for_ms))
                    });
                    stats.store(StoreReport {
                        commits: s.commits,
                        records: s.records_written,
                        queue_len: s.queue_len as u64,
                        batch_window_ms: s.batch_window.as_millis() as u64,
                        last_commit_us: s.last_commit.as_micros() as u64,
                        failures: s.failures,
                        failing_since,
                    });
                    stats.set_store_error(s.failing.map(|(error, _)| error));
                    tokio::select! {
                        _ = tokio::time::sleep(STORE_WATCH) => {}
                        _ = stop.wait_for(|s| *s) => break,
                    }
                }
            });
        }

        let status_sections = http::StatusSections::default();
        let metrics_role: Arc<std::sync::OnceLock<&'static str>> = Arc::default();
        let http_addr = match settings.http_listen {
            Some(addr) => {
                let listener = bind(addr, "http").await?;
                let local = listener.local_addr().ok();
                let mut state = HttpState::new(stats.clone(), workers.clone(), clock.clone());
                state.sections = status_sections.clone();
                state.role = metrics_role.clone();
                let mut stop = shutdown_rx.clone();
                tasks.spawn(async move {
                    let stopped = async move {
                        let _ = stop.wait_for(|s| *s).await;
                    };
                    if let Err(e) = http::serve(listener, state, stopped).await {
                        tracing::error!(error = %e, "HTTP server failed");
                    }
                });
                local
            }
            None => None,
        };

        // One gate for both front ends: the caps and bans are the pool's, whichever protocol
        // a miner speaks.
        let gate = Gate::new(settings.admission.clone());
        stats.set_gate(gate.clone());
        let sv1_addr = match settings.sv1_listen {
            Some(addr) => {
                let listener = bind(addr, "sv1").await?;
                let local = listener.local_addr().ok();
                let mut server = Sv1Server::new(engine.clone(), settings.sv1.clone(), gate.clone());
                if let Some(server) = Arc::get_mut(&mut server) {
                    // One timeline for bans and the status pages.
                    server.front.start = clock_start;
                    if let Some(local) = local {
                        server.reconnect_to = Some((local.ip().to_string(), local.port()));
                    }
                }
                tasks.spawn(server.serve(listener, shutdown_rx.clone()));
                local
            }
            None => None,
        };

        let sv2_addr = match settings.sv2_listen {
            Some(addr) => {
                let listener = bind(addr, "sv2").await?;
                let local = listener.local_addr().ok();
                let mut server = Sv2Server::new(
                    engine.clone(),
                    settings.sv2.config.clone(),
                    gate.clone(),
                    settings.sv2.keys,
                    settings.sv2.cert_validity,
                );
                if let Some(server) = Arc::get_mut(&mut server) {
                    server.front.start = clock_start;
                }
                tasks.spawn(server.serve(listener, shutdown_rx.clone()));
                local
            }
            None => None,
        };

        Ok(RunningPool {
            engine,
            sv1_addr,
            sv2_addr,
            http_addr,
            health,
            shutdown,
            tasks,
            feed: Some(feed),
            backup_feed,
            status_sections,
            metrics_role,
            clock,
        })
    }

    /// The pool's clock, for a role built around it that reports into its statistics.
    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    /// Names the role built around this pool (`"jdc"`): `/metrics` also gives the dependencies
    /// under `stratumlab_<role>_`, as every other role names its own. Set once.
    pub fn set_metrics_role(&self, role: &'static str) {
        let _ = self.metrics_role.set(role);
    }

    /// Adds `section()` to `/api/status` under `name`, from now on.
    pub fn add_status_section(&self, name: &'static str, section: http::StatusSection) {
        self.status_sections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name, section));
    }

    /// Where to ask the Template Provider for a template's transactions (`None` when the
    /// templates come from a node's `getblocktemplate`, which carries them already).
    pub fn tx_data(&self) -> Option<mpsc::UnboundedSender<crate::tp::feed::TxDataRequest>> {
        match &self.feed {
            Some(Feed::Tp(f)) => Some(f.tx_data()),
            _ => None,
        }
    }

    /// Stops accepting, tells miners to reconnect, stops the feed, drains the store.
    pub async fn shutdown(mut self) -> Result<(), ServiceError> {
        self.engine
            .stats
            .set_serving(Serving::No(NotServing::ShuttingDown));
        let _ = self.shutdown.send(true);
        let deadline = tokio::time::sleep(Duration::from_secs(10));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                r = self.tasks.join_next() => if r.is_none() { break },
                _ = &mut deadline => {
                    tracing::warn!("pool tasks did not stop within 10 s; aborting them");
                    self.tasks.abort_all();
                    break;
                }
            }
        }
        match self.feed.take() {
            Some(Feed::Node(f)) => f.stopped().await,
            Some(Feed::Tp(f)) => f.stopped().await,
            None => {}
        }
        if let Some(f) = self.backup_feed.take() {
            f.stopped().await;
        }
        // Let connection tasks still finishing drop their handles before the store closes.
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Some(store) = self.engine.store.clone() {
            store.close()?;
        }
        let _ = self.engine.events.flush();
        Ok(())
    }
}

async fn bind(addr: SocketAddr, what: &'static str) -> Result<TcpListener, ServiceError> {
    edge::listen(addr).map_err(|source| ServiceError::Listen { what, addr, source })
}

/// Templates to jobs, and work stopped while no source is healthy. With a provider and the
/// node beside it, jobs come from the provider while it serves and from the node while it
/// does not; each switch starts a generation from the other source's latest template.
async fn jobs_task(
    engine: Arc<Engine>,
    mut templates: TemplateRx,
    health: Arc<NodeHealth>,
    zmq: bool,
    clock: Clock,
    config: crate::jobs::JobConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut book = JobBook::new(config);
    let mut check = tokio::time::interval(Duration::from_millis(250));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_state = "";
    let mut last_backup_state = "";
    let (mut backup, backup_health) = match &mut templates {
        TemplateRx::Tp(_, _, b) => match b.take() {
            Some((rx, h)) => (Some(rx), Some(h)),
            None => (None, None),
        },
        TemplateRx::Node(_) => (None, None),
    };
    let primary = match &templates {
        TemplateRx::Node(_) => Source::Node,
        TemplateRx::Tp(..) => Source::Tp,
    };
    let mut active = primary;
    loop {
        // Which source a template that arrived is from, if one did.
        let arrived = tokio::select! {
            r = templates.changed() => {
                if r.is_none() { break; }
                Some(primary)
            }
            r = backup_changed(&mut backup) => {
                if r.is_none() { break; }
                Some(Source::Node)
            }
            _ = check.tick() => None,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let now_i = Instant::now();
        let primary_state = health.state(now_i);
        let backup_state = backup_health.as_ref().map(|h| h.state(now_i));
        // The node's feed (the primary one, or the one beside the provider) runs the ZMQ
        // subscription, when there is one.
        let node_health = match primary {
            Source::Node => Some(&health),
            Source::Tp => backup_health.as_ref(),
        };
        engine
            .stats
            .set_zmq(node_health.filter(|_| zmq).map(|h| h.zmq_connected()));
        let wanted = match &backup_state {
            Some(b) if !primary_state.serves_work() && b.serves_work() => Source::Node,
            _ => primary,
        };
        let switched = wanted != active;
        if switched {
            tracing::warn!(
                from = ?active,
                to = ?wanted,
                provider = primary_state.name(),
                "template source switched"
            );
            active = wanted;
            engine
                .stats
                .set_working_from_backup(primary == Source::Tp && active == Source::Node);
        }
        if arrived == Some(active) || switched {
            if let Some(g) =
                next_generation(&mut book, &mut templates, backup.as_mut(), active, clock())
            {
                if engine.events.is_enabled() {
                    engine.events.emit(TemplateCreated {
                        node: ShortStr::new("pool"),
                        template_id: g.id,
                        height: g.template.height,
                        prev_hash: g.template.prev_hash,
                        value_sats: g.template.coinbase_value.to_sat(),
                        fees_sats: g.template.fees().to_sat(),
                        tx_count: g.template.transactions.len() as u32,
                        fingerprint: g.fingerprint,
                        future: false,
                    });
                }
                let state = if active == primary {
                    &primary_state
                } else {
                    backup_state.as_ref().unwrap_or(&primary_state)
                };
                if state.serves_work() {
                    tracing::debug!(generation = g.id, height = g.template.height, clean = g.clean, source = ?active, "new work");
                    engine.publish(g);
                    engine.stats.set_serving(Serving::Yes);
                }
            }
        }
        let now = clock();
        if primary_state.name() != last_state {
            last_state = primary_state.name();
            tracing::info!(node = primary_state.name(), "node state");
            engine.stats.set_node(node_status(&primary_state, now));
        }
        if let Some(b) = &backup_state {
            if b.name() != last_backup_state {
                last_backup_state = b.name();
                tracing::info!(node = b.name(), "state of the node beside the provider");
                engine.stats.set_backup_node(node_status(b, now));
            }
        }
        let state = if active == primary {
            primary_state
        } else {
            backup_state.unwrap_or(primary_state)
        };
        match state {
            NodeState::Ok => {
                if !engine.is_serving() {
                    if let Some(g) = book.current() {
                        engine.publish(g.clone());
                        engine.stats.set_serving(Serving::Yes);
                    }
                }
            }
            other => {
                let why = match other {
                    NodeState::Starting => NotServing::NoTemplateYet,
                    NodeState::Unreachable { .. } => NotServing::NodeUnreachable,
                    _ => NotServing::TemplatesStale,
                };
                if engine.is_serving() {
                    tracing::warn!(node = other.name(), "no longer handing out work");
                }
                engine.stop_work();
                engine.stats.set_serving(Serving::No(why));
            }
        }
    }
}

fn node_status(state: &NodeState, now: Timestamp) -> NodeStatus {
    match state {
        NodeState::Ok => NodeStatus::Ok { since: now },
        NodeState::Unreachable { .. } => NodeStatus::Unreachable { since: now },
        NodeState::Stale { .. } | NodeState::Failing { .. } => NodeStatus::Stale { since: now },
        NodeState::Starting => NodeStatus::Unknown,
    }
}

/// A generation from `source`'s latest template (`None` before its first). A provider's
/// template is remembered in the recent list, which is how a block found on it is submitted.
fn next_generation(
    book: &mut JobBook,
    templates: &mut TemplateRx,
    backup: Option<&mut NodeTemplates>,
    source: Source,
    now: Timestamp,
) -> Option<Arc<crate::jobs::Generation>> {
    let node = match (templates, source, backup) {
        (TemplateRx::Node(rx), _, _) => Some(rx),
        (TemplateRx::Tp(..), Source::Node, Some(rx)) => Some(rx),
        (TemplateRx::Tp(rx, recent, _), _, _) => {
            let w = rx.borrow_and_update().clone()?;
            let g = book.handle_tdp_template(w.template, w.tdp.clone(), now);
            let mut recent = recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() >= RECENT_TDP {
                recent.pop_front();
            }
            recent.push_back((g.id, w.tdp));
            return Some(g);
        }
    }?;
    let t = node.borrow_and_update().clone()?;
    Some(book.handle_template(t, now))
}

/// The transactions of the provider's template `id`; `None` if the provider has none for it
/// or does not answer within `limit`.
async fn fetch_tx_data(
    requests: &mpsc::UnboundedSender<crate::tp::TxDataRequest>,
    id: u64,
    limit: Duration,
) -> Option<Arc<[Vec<u8>]>> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    requests
        .send(crate::tp::TxDataRequest {
            template_id: id,
            reply,
        })
        .ok()?;
    match tokio::time::timeout(limit, answer).await {
        Ok(Ok(Ok(d))) => Some(d.transaction_list.into()),
        _ => None,
    }
}

/// How long a found block waits for its template's transactions when they were not fetched
/// before it.
const TX_DATA_ON_DEMAND: Duration = Duration::from_secs(1);

/// A whole block from what the engine built on a provider template (header, a count of one,
/// the coinbase) and the template's transactions.
fn whole_block(header_and_coinbase: &[u8], txs: &[Vec<u8>]) -> Option<Vec<u8>> {
    if header_and_coinbase.get(80) != Some(&1) {
        return None;
    }
    let coinbase = &header_and_coinbase[81..];
    let mut block =
        Vec::with_capacity(header_and_coinbase.len() + 9 + txs.iter().map(Vec::len).sum::<usize>());
    block.extend_from_slice(&header_and_coinbase[..80]);
    primitives::compact_size::write(&mut block, txs.len() as u64 + 1);
    block.extend_from_slice(coinbase);
    for t in txs {
        block.extend_from_slice(t);
    }
    // Transactions of another template (a restarted provider reusing its ids) would make a
    // block no node takes: keep the provider's shape then.
    is_whole(&block).then_some(block)
}

/// Whether `block` is a whole block: it decodes and its header commits to its transactions.
/// (What the pool stores of a block found on a provider template whose transactions it did
/// not get is the header and the coinbase alone, which fails this unless the template had no
/// other transaction.)
fn is_whole(block: &[u8]) -> bool {
    primitives::bitcoin::consensus::deserialize::<primitives::bitcoin::Block>(block)
        .is_ok_and(|b| b.check_merkle_root())
}

/// Found blocks: persisted, then submitted (to the node until it answers, or to the provider
/// as `SubmitSolution`, with the node beside it as the way out when the provider cannot take
/// it); the answer recorded.
async fn blocks_task(
    engine: Arc<Engine>,
    sink: BlockSink,
    mut found: mpsc::UnboundedReceiver<FoundBlock>,
    store: Option<Store>,
    shutdown: watch::Receiver<bool>,
) {
    let sink = Arc::new(sink);
    // Blocks an earlier run persisted but never heard back about go out again, each on a task of
    // its own: a node that is down must not hold up the blocks found from now on. (Their counts
    // were restored before this task started.)
    if let Some(s) = &store {
        for b in s.blocks_awaiting_answer().to_vec() {
            let client = match &*sink {
                BlockSink::Node(client)
                | BlockSink::Tp {
                    node: Some((client, _)),
                    ..
                } => client.clone(),
                // A provider's template ids live as long as its connection: only a node can
                // take the block now. It stays pending, in the store and in the counts, until
                // the provider's tips settle it.
                BlockSink::Tp {
                    node: None, works, ..
                } => {
                    tracing::error!(hash = %primitives::Hash256(b.hash), height = b.height,
                        "a block an earlier run found is pending with no way out: restart with --node-rpc to submit it");
                    let (s, engine, works) = (s.clone(), engine.clone(), works.clone());
                    tokio::spawn(settle_by_tips(engine, s, b, works));
                    continue;
                }
            };
            let (s, engine) = (s.clone(), engine.clone());
            tokio::spawn(async move {
                let (fate, result) = if !is_whole(&b.block) {
                    // Stored before its template's transactions were known: no node would
                    // take it.
                    (
                        BlockFate::Rejected,
                        "incomplete-block-not-resubmitted".to_owned(),
                    )
                } else {
                    tracing::info!(
                        height = b.height,
                        "resubmitting a block an earlier run found"
                    );
                    let outcome =
                        submit_until_answered(&client, &b.block, client.config().retry).await;
                    // `duplicate` on the best chain: the earlier run's submission got there
                    // before the answer was recorded.
                    let fate = outcome.fate();
                    let result = match fate {
                        BlockFate::Accepted => crate::stats::ACCEPTED.to_owned(),
                        _ => outcome.answer.reason().unwrap_or("").to_owned(),
                    };
                    (fate, result)
                };
                engine.stats.block_fate(fate);
                if let Err(e) = s.record_block_result(b.hash, &result, unix_ms()) {
                    tracing::error!(hash = %primitives::Hash256(b.hash), error = %e, "block result not recorded");
                }
            });
        }
    }
    let mut shutdown_rx = shutdown.clone();
    loop {
        let mut b = tokio::select! {
            b = found.recv() => match b { Some(b) => b, None => break },
            _ = shutdown_rx.wait_for(|s| *s) => break,
        };
        // On a provider's template with the node beside it: the whole block, which the store
        // keeps (a restart can submit it) and `submitblock` takes.
        let tdp = match &*sink {
            BlockSink::Tp { recent, .. } => recent
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .find(|(g, _)| *g == b.template_id)
                .map(|(_, t)| t.clone()),
            BlockSink::Node(_) => None,
        };
        let mut header_and_coinbase = None;
        if let (
            Some(tdp),
            BlockSink::Tp {
                node: Some((_, txs)),
                tx_data,
                ..
            },
        ) = (&tdp, &*sink)
        {
            // Whichever connection's template of that number the header commits to (a provider
            // that restarted numbers its templates from 1 again); `whole_block` checks.
            let mut whole = txs
                .numbered(tdp.template_id)
                .iter()
                .find_map(|d| whole_block(&b.block, &d.transaction_list));
            if whole.is_none() {
                // Found before the template's transactions arrived (the first round trip after
                // a tip change): ask for them now, briefly (a provider on the same machine
                // answers within milliseconds).
                whole = fetch_tx_data(tx_data, tdp.template_id, TX_DATA_ON_DEMAND)
                    .await
                    .and_then(|d| whole_block(&b.block, &d));
            }
            match whole {
                Some(whole) => header_and_coinbase = Some(std::mem::replace(&mut b.block, whole)),
                None => {
                    tracing::warn!(hash = %b.hash, template_id = tdp.template_id, "found block's template transactions not known: only the provider can take it")
                }
            }
        }
        let mut stored = false;
        if let Some(s) = &store {
            let rec = BlockRecord {
                hash: b.hash.0,
                height: b.height,
                worker: b.worker.unwrap_or(WorkerKey(0)),
                job_id: b.job_id,
                time_ms: unix_ms(),
                block: b.block.clone(),
            };
            match s.record_block(rec) {
                Ok(t) => {
                    // A failing store keeps the record and writes it when it can: the block
                    // goes out now rather than after the fault.
                    match s.wait_durable_unless_failing(t).await {
                        Ok(()) => stored = true,
                        Err(e) => {
                            tracing::error!(hash = %b.hash, error = %e, "block not persisted yet; submitting anyway")
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(hash = %b.hash, error = %e, "block not persisted; submitting anyway")
                }
            }
        }
        engine.events.emit(BlockFound {
            node: ShortStr::new("pool"),
            hash: b.hash,
            height: b.height,
            // A declared job's template is the farm's, not one of ours.
            template_id: (!b.declared).then_some(b.template_id),
            job_id: Some(b.job_id),
            conn: Some(b.conn),
            stored,
        });
        if b.declared {
            // Found on a farm's declared job: the pool lacks its transactions, the farm's JDC
            // and the JDS propagate it. Its event says which template it was on: none of ours.
            // The answer recorded now keeps a restarted pool from submitting the record.
            engine.events.emit(BlockSubmitted {
                hash: b.hash,
                height: b.height,
                template_id: None,
                conn: Some(b.conn),
            });
            engine.stats.block_handed_off();
            if let Some(s) = &store {
                if let Err(e) = s.record_block_result(b.hash.0, DECLARED_NOT_SUBMITTED, unix_ms()) {
                    tracing::error!(hash = %b.hash, error = %e, "block result not recorded");
                }
            }
            tracing::info!(hash = %b.hash, height = b.height, "declared job's block not submitted by the pool");
            continue;
        }
        engine.events.emit(BlockSubmitted {
            hash: b.hash,
            height: b.height,
            template_id: Some(b.template_id),
            conn: Some(b.conn),
        });
        // Each block is followed on its own task: a provider's verdict, or the node's answer
        // after retries, must not hold up the next block.
        let engine = engine.clone();
        let store = store.clone();
        let sink = sink.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            submit(
                &engine,
                &sink,
                store.as_ref(),
                &b,
                tdp,
                header_and_coinbase,
                shutdown,
            )
            .await
        });
    }
}

/// Sends one found block out and records its fate.
///
/// On a node's template: `submitblock` until the node answers. On a provider's: its
/// `SubmitSolution`, whose verdict is the provider's next tip (ours: accepted; another:
/// orphaned), and with the node beside it, `submitblock` as well when the provider is not
/// connected, does not answer within [`TP_ANSWER_BEFORE_RPC`], or adopts another tip (the
/// node's answer then says why).
async fn submit(
    engine: &Engine,
    sink: &BlockSink,
    store: Option<&Store>,
    b: &FoundBlock,
    tdp: Option<Arc<TdpTemplate>>,
    header_and_coinbase: Option<Vec<u8>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (solutions, works, health, node) = match sink {
        BlockSink::Node(client) => return submit_rpc(engine, client, store, b).await,
        BlockSink::Tp {
            solutions,
            works,
            health,
            node,
            ..
        } => (solutions, works, health, node),
    };
    let rpc = node.as_ref().map(|(client, _)| client);
    let Some(tdp) = tdp else {
        // A generation of the node's templates (the provider was unreachable), or one the
        // recent list no longer holds.
        return match rpc {
            Some(client) => submit_rpc(engine, client, store, b).await,
            None => {
                tracing::error!(hash = %b.hash, generation = b.template_id, "found block's provider template is no longer known");
                block_answer(engine, store, b, BlockFate::Rejected, "template-gone");
            }
        };
    };
    // What the provider takes: the header and coinbase (the block itself when the pool did not
    // build it whole).
    let shape = header_and_coinbase.as_deref().unwrap_or(&b.block);
    let Some(solution) = crate::tp::solution_from_block(&tdp, shape) else {
        tracing::error!(hash = %b.hash, "found block does not split into header and coinbase");
        return block_answer(engine, store, b, BlockFate::Rejected, "malformed-block");
    };
    // `submitblock` can take it only when the pool built it whole.
    let rpc = rpc.filter(|_| header_and_coinbase.is_some());
    let mut works = works.clone();
    let mut waiting = false;
    let tip_before = loop {
        works.mark_unchanged();
        // Read before sending: the provider may move its tip to the block within a millisecond.
        let tip_before = works.borrow().as_ref().map(|w| w.template.prev_hash);
        let connected = health.state(Instant::now()).serves_work();
        if connected && solutions.send(solution.clone()).is_ok() {
            if waiting {
                tracing::info!(hash = %b.hash, template_id = tdp.template_id, "the provider is back: the pending block goes to it");
            }
            break tip_before;
        }
        if let Some(client) = rpc {
            tracing::warn!(hash = %b.hash, "block found while the provider is not connected: submitting it to the node");
            return submit_rpc(engine, client, store, b).await;
        }
        // No way out now: pending (in the store and the counts) until the provider is back;
        // one that still knows the template can take it.
        if !waiting {
            tracing::error!(hash = %b.hash, "block found while the provider is not connected and no node is beside it: pending until the provider is back");
            waiting = true;
        }
        tokio::select! {
            _ = tokio::time::sleep(PROVIDER_RETRY) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    };
    // The verdict is the provider's next tip: templates that only refresh the current one's
    // transactions say nothing about the block, and neither does a provider that went away
    // (no tip while it is gone; the first after it is back counts).
    // The tip as it is now (it may have moved already), then at each change.
    let next_tip = async {
        loop {
            let tip = works
                .borrow_and_update()
                .as_ref()
                .map(|w| w.template.prev_hash);
            if let Some(tip) = tip.filter(|t| Some(*t) != tip_before) {
                return Some(tip == b.hash);
            }
            works.changed().await.ok()?;
        }
    };
    let verdict = match rpc {
        Some(_) => tokio::select! {
            r = tokio::time::timeout(TP_ANSWER_BEFORE_RPC, next_tip) => r.ok().flatten(),
            _ = shutdown.wait_for(|s| *s) => return,
        },
        // Without a node the provider's next tip is the only verdict there is: wait for it,
        // however long the network takes to find the next block.
        None => tokio::select! {
            r = next_tip => r,
            _ = shutdown.wait_for(|s| *s) => return,
        },
    };
    match (verdict, rpc) {
        (Some(true), _) => block_answer(engine, store, b, BlockFate::Accepted, ""),
        // The node says why the provider moved on without it, or takes it if the provider
        // never got it.
        (Some(false) | None, Some(client)) => submit_rpc(engine, client, store, b).await,
        (Some(false), None) => block_answer(
            engine,
            store,
            b,
            BlockFate::Orphaned,
            crate::stats::NOT_ADOPTED,
        ),
        // The provider's feed ended (the pool is stopping): pending, for a restart.
        (None, None) => {
            tracing::warn!(hash = %b.hash, "no tip from the provider after SubmitSolution: the block stays pending")
        }
    }
}

/// A block an earlier run found and a provider-only pool cannot submit, settled by the
/// provider's tips: a tip on it is its acceptance (the earlier run's `SubmitSolution` got
/// there); a tip one above its height on another block means the network holds its height
/// with another, and it is lost (recorded `not-adopted`, an orphan). A first tip further on says
/// neither (only a node can tell which block holds the height): it stays pending, for a restart
/// with `--node-rpc`.
async fn settle_by_tips(
    engine: Arc<Engine>,
    store: Store,
    b: BlockRecord,
    mut works: watch::Receiver<Option<TpWork>>,
) {
    loop {
        let tip = works
            .borrow_and_update()
            .as_ref()
            .map(|w| (w.template.height, w.template.prev_hash));
        if let Some((next, prev)) = tip {
            let (fate, result) = if prev.0 == b.hash {
                (BlockFate::Accepted, crate::stats::ACCEPTED)
            } else if u64::from(next) == u64::from(b.height) + 1 {
                (BlockFate::Orphaned, crate::stats::NOT_ADOPTED)
            } else if u64::from(next) > u64::from(b.height) + 1 {
                tracing::warn!(hash = %primitives::Hash256(b.hash), height = b.height, provider_height = next,
                    "the provider's chain is past a pending block's height; only a node can tell whether it holds it: pending until a restart with --node-rpc");
                return;
            } else {
                if works.changed().await.is_err() {
                    return;
                }
                continue;
            };
            tracing::info!(hash = %primitives::Hash256(b.hash), height = b.height, result, "a block an earlier run found, settled by the provider's tip");
            engine.stats.block_fate(fate);
            if let Err(e) = store.record_block_result(b.hash, result, unix_ms()) {
                tracing::error!(hash = %primitives::Hash256(b.hash), error = %e, "block result not recorded");
            }
            return;
        }
        if works.changed().await.is_err() {
            return;
        }
    }
}

/// `submitblock` until the node answers, and the block's fate from it (the provider may have
/// given the node the block already: `duplicate` is then settled by the node's chain).
async fn submit_rpc(engine: &Engine, client: &NodeClient, store: Option<&Store>, b: &FoundBlock) {
    let outcome = submit_until_answered(client, &b.block, client.config().retry).await;
    let reason = outcome.answer.reason().unwrap_or("");
    block_answer(engine, store, b, outcome.fate(), reason);
}

pub use crate::stats::DECLARED_NOT_SUBMITTED;

/// How often the store's figures and fault are read into the statistics.
const STORE_WATCH: Duration = Duration::from_millis(250);

/// How often a block with no way out looks for the provider again.
const PROVIDER_RETRY: Duration = Duration::from_millis(500);

/// With the node beside the provider: how long the provider's verdict is awaited before the
/// block goes to the node as well. A provider that took the block sends its new tip within
/// milliseconds.
const TP_ANSWER_BEFORE_RPC: Duration = Duration::from_secs(5);

/// Records a block's fate: statistics, event, store.
fn block_answer(
    engine: &Engine,
    store: Option<&Store>,
    b: &FoundBlock,
    fate: BlockFate,
    reason: &str,
) {
    let accepted = fate == BlockFate::Accepted;
    engine.stats.block_fate(fate);
    engine.events.emit(BlockResult {
        node: ShortStr::new("pool"),
        hash: b.hash,
        height: b.height,
        accepted,
        reason: ShortStr::new(reason),
    });
    if let Some(s) = store {
        let result = if accepted {
            crate::stats::ACCEPTED
        } else {
            reason
        };
        if let Err(e) = s.record_block_result(b.hash.0, result, unix_ms()) {
            tracing::error!(hash = %b.hash, error = %e, "block result not recorded");
        }
    }
}
