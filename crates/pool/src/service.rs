//! The running pool: the node feed turned into jobs, the health watch that stops work when the
//! node fails, the block task, the store, the HTTP endpoints and the SV1 server, started
//! together and stopped together. The `stratumlab pool` command and in-process tests use it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use events::{BlockResult, BlockSubmitted, EventSink, ShortStr, TemplateCreated};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::engine::{unix_ms, Engine, EngineConfig, FoundBlock};
use crate::http::{self, HttpState};
use crate::jobs::JobBook;
use crate::node::{
    submit_until_answered, NodeClient, NodeConfig, NodeError, NodeHealth, NodeState, TemplateFeed,
};
use crate::stats::{NodeStatus, NotServing, PoolStats, Serving, StoreReport, WorkerRegistry};
use crate::store::{BlockRecord, Store, StoreConfig, StoreError, WorkerKey};
use crate::sv1::{Admission, Sv1Config, Sv1Server};
use crate::sv2::{Sv2Config, Sv2Server};
use crate::template::{TdpTemplate, Template};
use crate::tp::{TpConfig, TpFeed, TpWork};
use crate::Millis;
use sv2::keys::AuthorityKeys;

#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub engine: EngineConfig,
    pub node: NodeConfig,
    /// Templates from this SV2 Template Provider instead of the node's `getblocktemplate`.
    pub tp: Option<TpConfig>,
    pub sv1_listen: Option<SocketAddr>,
    pub http_listen: Option<SocketAddr>,
    pub store: Option<StoreConfig>,
    pub events: Option<PathBuf>,
    /// The configuration name written in the event log's header.
    pub events_config: String,
    pub sv1: Sv1Config,
    pub admission: Admission,
    /// Serve Stratum V2 miners on this address.
    pub sv2_listen: Option<SocketAddr>,
    pub sv2: Sv2Settings,
}

/// The SV2 front end's settings: the Mining Protocol's and the Noise responder's.
#[derive(Clone, Debug)]
pub struct Sv2Settings {
    pub config: Sv2Config,
    /// Signs each connection's Noise certificate; miners are configured with its public half.
    pub keys: AuthorityKeys,
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

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("node client: {0}")]
    Node(#[from] NodeError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr} ({what}): {source}")]
    Listen {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("event log {path}: {source}")]
    Events {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A started pool. [`RunningPool::shutdown`] stops it.
pub struct RunningPool {
    pub engine: Arc<Engine>,
    pub sv1_addr: Option<SocketAddr>,
    pub sv2_addr: Option<SocketAddr>,
    pub http_addr: Option<SocketAddr>,
    pub health: Arc<NodeHealth>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
    feed: Option<Feed>,
    status_sections: http::StatusSections,
}

/// Where templates come from.
enum Feed {
    Node(TemplateFeed),
    Tp(TpFeed),
}

/// Where found blocks go: `submitblock` to the node, or `SubmitSolution` to the provider whose
/// template the block is built on.
enum BlockSink {
    Node(NodeClient),
    Tp {
        solutions: mpsc::UnboundedSender<sv2::messages::template_distribution::SubmitSolution>,
        recent: RecentTdp,
        /// The provider's tips: the first one after a submission says whether the block won.
        works: watch::Receiver<Option<TpWork>>,
    },
}

/// The provider templates of the latest generations, by generation id: what a found block's
/// `SubmitSolution` names.
type RecentTdp = Arc<Mutex<VecDeque<(u64, Arc<TdpTemplate>)>>>;
const RECENT_TDP: usize = 64;

/// Templates as the jobs task reads them, from either source.
enum TemplateRx {
    Node(watch::Receiver<Option<Arc<Template>>>),
    Tp(watch::Receiver<Option<TpWork>>, RecentTdp),
}

impl TemplateRx {
    /// The next template; `None` when the source is gone.
    async fn changed(&mut self) -> Option<()> {
        match self {
            TemplateRx::Node(rx) => rx.changed().await.ok(),
            TemplateRx::Tp(rx, _) => rx.changed().await.ok(),
        }
    }
}

impl RunningPool {
    /// Starts every part on the current tokio runtime.
    pub async fn start(settings: PoolSettings) -> Result<RunningPool, ServiceError> {
        let clock_start = Instant::now();
        let clock: Arc<dyn Fn() -> Millis + Send + Sync> =
            Arc::new(move || Millis(clock_start.elapsed().as_millis() as u64));
        let stats = PoolStats::new(clock());
        stats.set_serving(Serving::No(NotServing::NoTemplateYet));
        let workers = WorkerRegistry::new(&stats);
        let store = match &settings.store {
            Some(c) => Some(Store::open(c.clone())?),
            None => None,
        };
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
        let (feed, templates, sink) = match &settings.tp {
            Some(tp) => {
                let feed = TpFeed::spawn(tp.clone(), stopped);
                let recent = RecentTdp::default();
                let sink = BlockSink::Tp {
                    solutions: feed.solutions(),
                    recent: recent.clone(),
                    works: feed.works(),
                };
                let rx = TemplateRx::Tp(feed.works(), recent);
                (Feed::Tp(feed), rx, sink)
            }
            None => {
                let client = NodeClient::new(settings.node.clone())?;
                let feed = TemplateFeed::spawn(client.clone(), stopped);
                let rx = TemplateRx::Node(feed.templates());
                (Feed::Node(feed), rx, BlockSink::Node(client))
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
            clock.clone(),
            settings.engine.jobs.clone(),
            shutdown_rx.clone(),
        ));
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
                        Millis(now.0.saturating_sub(for_ms))
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
        let http_addr = match settings.http_listen {
            Some(addr) => {
                let listener = bind(addr, "http").await?;
                let local = listener.local_addr().ok();
                let mut state = HttpState::new(stats.clone(), workers.clone(), clock.clone());
                state.sections = status_sections.clone();
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

        let sv1_addr = match settings.sv1_listen {
            Some(addr) => {
                let listener = bind(addr, "sv1").await?;
                let local = listener.local_addr().ok();
                let mut server = Sv1Server::new(
                    engine.clone(),
                    settings.sv1.clone(),
                    settings.admission.clone(),
                );
                if let (Some(server), Some(local)) = (Arc::get_mut(&mut server), local) {
                    server.reconnect_to = Some((local.ip().to_string(), local.port()));
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
                let server = Sv2Server::new(
                    engine.clone(),
                    settings.sv2.config.clone(),
                    settings.admission.clone(),
                    settings.sv2.keys,
                    settings.sv2.cert_validity,
                );
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
            status_sections,
        })
    }

    /// Where to ask the Template Provider for a template's transactions (`None` when the
    /// templates come from a node's `getblocktemplate`, which carries them already).
    /// Adds `section()` to `/api/status` under `name`, from now on.
    pub fn add_status_section(&self, name: &'static str, section: http::StatusSection) {
        self.status_sections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name, section));
    }

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
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServiceError::Listen { what, addr, source })
}

/// Templates to jobs, and work stopped while the node is not healthy.
async fn jobs_task(
    engine: Arc<Engine>,
    mut templates: TemplateRx,
    health: Arc<NodeHealth>,
    clock: Arc<dyn Fn() -> Millis + Send + Sync>,
    config: crate::jobs::JobConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut book = JobBook::new(config);
    let mut check = tokio::time::interval(Duration::from_millis(250));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_state = "";
    loop {
        tokio::select! {
            r = templates.changed() => {
                if r.is_none() { break; }
                let now = clock();
                let g = match &mut templates {
                    TemplateRx::Node(rx) => {
                        let t = rx.borrow_and_update().clone();
                        let Some(t) = t else { continue };
                        book.on_template(t, now)
                    }
                    TemplateRx::Tp(rx, recent) => {
                        let w = rx.borrow_and_update().clone();
                        let Some(w) = w else { continue };
                        let g = book.on_tdp_template(w.template, w.tdp.clone(), now);
                        let mut recent = recent.lock().unwrap_or_else(|e| e.into_inner());
                        if recent.len() >= RECENT_TDP {
                            recent.pop_front();
                        }
                        recent.push_back((g.id, w.tdp));
                        g
                    }
                };
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
                if health.state(Instant::now()).serves_work() {
                    tracing::debug!(generation = g.id, height = g.template.height, clean = g.clean, "new work");
                    engine.publish(g);
                    engine.stats.set_serving(Serving::Yes);
                }
            }
            _ = check.tick() => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
        let state = health.state(Instant::now());
        let now = clock();
        if state.name() != last_state {
            last_state = state.name();
            tracing::info!(node = state.name(), "node state");
            engine.stats.set_node(match state {
                NodeState::Ok => NodeStatus::Ok { since: now },
                NodeState::Unreachable { .. } => NodeStatus::Unreachable { since: now },
                NodeState::Stale { .. } | NodeState::Failing { .. } => {
                    NodeStatus::Stale { since: now }
                }
                NodeState::Starting => NodeStatus::Unknown,
            });
        }
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

/// Found blocks: persisted, then submitted (to the node until it answers, or to the provider
/// as `SubmitSolution`); the answer recorded.
async fn blocks_task(
    engine: Arc<Engine>,
    sink: BlockSink,
    mut found: mpsc::UnboundedReceiver<FoundBlock>,
    store: Option<Store>,
    mut shutdown: watch::Receiver<bool>,
) {
    // Blocks an earlier run persisted but never heard back about go out first.
    if let Some(s) = &store {
        for b in s.blocks_awaiting_answer().to_vec() {
            let result = match &sink {
                BlockSink::Node(client) => {
                    let answer =
                        submit_until_answered(client, &b.block, client.config().retry).await;
                    answer.answer.reason().unwrap_or("accepted").to_owned()
                }
                // A provider's template ids live as long as its connection: nothing to name.
                BlockSink::Tp { .. } => "unsubmitted-template-gone".to_owned(),
            };
            let _ = s.record_block_result(b.hash, &result, unix_ms());
        }
    }
    loop {
        let b = tokio::select! {
            b = found.recv() => match b { Some(b) => b, None => break },
            _ = shutdown.wait_for(|s| *s) => break,
        };
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
                    if let Err(e) = s.wait_durable_unless_failing(t).await {
                        tracing::error!(hash = %b.hash, error = %e, "block not persisted yet; submitting anyway");
                    }
                }
                Err(e) => {
                    tracing::error!(hash = %b.hash, error = %e, "block not persisted; submitting anyway")
                }
            }
        }
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
        match &sink {
            BlockSink::Node(client) => {
                let outcome = submit_until_answered(client, &b.block, client.config().retry).await;
                let accepted = outcome.node_has_block();
                let reason = outcome.answer.reason().unwrap_or("").to_owned();
                block_answer(&engine, store.as_ref(), &b, accepted, &reason);
            }
            BlockSink::Tp {
                solutions,
                recent,
                works,
            } => {
                let tdp = recent
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .find(|(g, _)| *g == b.template_id)
                    .map(|(_, t)| t.clone());
                let Some(tdp) = tdp else {
                    tracing::error!(hash = %b.hash, generation = b.template_id, "found block's provider template is no longer known");
                    block_answer(&engine, store.as_ref(), &b, false, "template-gone");
                    continue;
                };
                let Some(solution) = crate::tp::solution_from_block(&tdp, &b.block) else {
                    tracing::error!(hash = %b.hash, "found block does not split into header and coinbase");
                    block_answer(&engine, store.as_ref(), &b, false, "malformed-block");
                    continue;
                };
                if solutions.send(solution).is_err() {
                    block_answer(&engine, store.as_ref(), &b, false, "provider-gone");
                    continue;
                }
                // The provider does not answer SubmitSolution; its next tip does: ours if the
                // block was accepted, another one if it lost or was refused.
                let mut works = works.clone();
                works.mark_unchanged();
                let engine = engine.clone();
                let store = store.clone();
                let mut stop = shutdown.clone();
                tokio::spawn(async move {
                    let verdict = tokio::select! {
                        r = tokio::time::timeout(TP_VERDICT_WAIT, works.changed()) => match r {
                            Ok(Ok(())) => {
                                let tip = works.borrow().as_ref().map(|w| w.template.prev_hash);
                                Some(tip == Some(b.hash))
                            }
                            _ => None,
                        },
                        _ = stop.wait_for(|s| *s) => None,
                    };
                    match verdict {
                        Some(true) => block_answer(&engine, store.as_ref(), &b, true, ""),
                        Some(false) => {
                            block_answer(&engine, store.as_ref(), &b, false, "not-adopted")
                        }
                        None => {
                            tracing::warn!(hash = %b.hash, "no tip from the provider after SubmitSolution")
                        }
                    }
                });
            }
        }
    }
}

/// The store's answer for a block found on a declared job, which the pool does not submit.
pub const DECLARED_NOT_SUBMITTED: &str = "declared-job-not-submitted";

/// How often the store's figures and fault are read into the statistics.
const STORE_WATCH: Duration = Duration::from_millis(250);

/// How long the provider's next tip is awaited as the verdict on a submitted block.
const TP_VERDICT_WAIT: Duration = Duration::from_secs(60);

/// Records a block's fate: statistics, event, store.
fn block_answer(
    engine: &Engine,
    store: Option<&Store>,
    b: &FoundBlock,
    accepted: bool,
    reason: &str,
) {
    engine.stats.block_result(accepted);
    engine.events.emit(BlockResult {
        node: ShortStr::new("pool"),
        hash: b.hash,
        height: b.height,
        accepted,
        reason: ShortStr::new(reason),
    });
    if let Some(s) = store {
        let result = if accepted { "accepted" } else { reason };
        if let Err(e) = s.record_block_result(b.hash.0, result, unix_ms()) {
            tracing::error!(hash = %b.hash, error = %e, "block result not recorded");
        }
    }
}
