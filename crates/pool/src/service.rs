//! The running pool: the node feed turned into jobs, the health watch that stops work when the
//! node fails, the block task, the store, the HTTP endpoints and the SV1 server, started
//! together and stopped together. The `stratumlab pool` command and in-process tests use it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
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
use crate::Millis;

#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub engine: EngineConfig,
    pub node: NodeConfig,
    pub sv1_listen: Option<SocketAddr>,
    pub http_listen: Option<SocketAddr>,
    pub store: Option<StoreConfig>,
    pub events: Option<PathBuf>,
    /// The configuration name written in the event log's header.
    pub events_config: String,
    pub sv1: Sv1Config,
    pub admission: Admission,
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
    pub http_addr: Option<SocketAddr>,
    pub health: Arc<NodeHealth>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
    feed: Option<TemplateFeed>,
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

        let client = NodeClient::new(settings.node.clone())?;
        let mut stop = shutdown_rx.clone();
        let feed = TemplateFeed::spawn(client.clone(), async move {
            let _ = stop.wait_for(|s| *s).await;
        });
        let health = feed.health();

        tasks.spawn(jobs_task(
            engine.clone(),
            feed.templates(),
            health.clone(),
            clock.clone(),
            settings.engine.jobs.clone(),
            shutdown_rx.clone(),
        ));
        tasks.spawn(blocks_task(
            engine.clone(),
            client,
            found,
            store.clone(),
            shutdown_rx.clone(),
        ));
        if let Some(store) = store.clone() {
            let stats = stats.clone();
            let mut stop = shutdown_rx.clone();
            tasks.spawn(async move {
                loop {
                    let s = store.stats();
                    stats.store(StoreReport {
                        commits: s.commits,
                        records: s.records_written,
                        queue_len: s.queue_len as u64,
                        batch_window_ms: s.batch_window.as_millis() as u64,
                        last_commit_us: s.last_commit.as_micros() as u64,
                    });
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = stop.wait_for(|s| *s) => break,
                    }
                }
            });
        }

        let http_addr = match settings.http_listen {
            Some(addr) => {
                let listener = bind(addr, "http").await?;
                let local = listener.local_addr().ok();
                let state = HttpState::new(stats.clone(), workers.clone(), clock.clone());
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

        Ok(RunningPool {
            engine,
            sv1_addr,
            http_addr,
            health,
            shutdown,
            tasks,
            feed: Some(feed),
        })
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
        if let Some(feed) = self.feed.take() {
            feed.stopped().await;
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
    mut templates: watch::Receiver<Option<Arc<crate::template::Template>>>,
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
                if r.is_err() { break; }
                let t = templates.borrow_and_update().clone();
                let Some(t) = t else { continue };
                let now = clock();
                let g = book.on_template(t, now);
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

/// Found blocks: persisted, then submitted until the node answers; the answer recorded.
async fn blocks_task(
    engine: Arc<Engine>,
    client: NodeClient,
    mut found: mpsc::UnboundedReceiver<FoundBlock>,
    store: Option<Store>,
    mut shutdown: watch::Receiver<bool>,
) {
    // Blocks an earlier run persisted but never heard back about go out first.
    if let Some(s) = &store {
        for b in s.blocks_awaiting_answer().to_vec() {
            let answer = submit_until_answered(&client, &b.block, client.config().retry).await;
            let result = answer.answer.reason().unwrap_or("accepted").to_owned();
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
                    if let Err(e) = s.wait_durable(t).await {
                        tracing::error!(hash = %b.hash, error = %e, "block not persisted; submitting anyway");
                    }
                }
                Err(e) => {
                    tracing::error!(hash = %b.hash, error = %e, "block not persisted; submitting anyway")
                }
            }
        }
        engine.events.emit(BlockSubmitted {
            hash: b.hash,
            height: b.height,
            template_id: Some(b.template_id),
            conn: Some(b.conn),
        });
        let outcome = submit_until_answered(&client, &b.block, client.config().retry).await;
        let accepted = outcome.node_has_block();
        let reason = outcome.answer.reason().unwrap_or("").to_owned();
        engine.stats.block_result(accepted);
        engine.events.emit(BlockResult {
            node: ShortStr::new("pool"),
            hash: b.hash,
            height: b.height,
            accepted,
            reason: ShortStr::new(&reason),
        });
        if let Some(s) = &store {
            let result = if accepted {
                "accepted"
            } else {
                reason.as_str()
            };
            if let Err(e) = s.record_block_result(b.hash.0, result, unix_ms()) {
                tracing::error!(hash = %b.hash, error = %e, "block result not recorded");
            }
        }
    }
}
