//! The tokio shell of the Template Distribution client: one connection at a time to the
//! provider, reconnected with capped backoff. Its health is kept as the node feed's
//! ([`NodeHealth`]), so the pool stops handing out work when the provider is gone exactly as
//! when bitcoind is.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::HashMap;

use events::{EventSink, LinkCounter};
use noise_sv2::Initiator;
use primitives::Timestamp;
use sv2::messages::template_distribution::{RequestTransactionDataSuccess, SubmitSolution};
use sv2::{Limits, Message, NoiseConn, TransportError};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};

use super::session::{TpEvent, TpSession, TpSessionConfig, TpSessionError, TpWork};
use super::transactions::KeptTransactions;
use crate::node::{Backoff, NodeHealth};
use crate::task::OwnedTask;

/// Where the Template Provider is and how the client talks to it.
#[derive(Clone, Debug)]
pub struct TpConfig {
    /// The provider's address.
    pub addr: SocketAddr,
    /// The provider's authority public key its certificate must be signed with; `None`
    /// accepts any (as the reference roles do without `tp_authority_public_key`).
    pub authority: Option<[u8; 32]>,
    /// What the session tells the provider.
    pub session: TpSessionConfig,
    /// How long to wait between reconnection attempts.
    pub retry: Backoff,
    /// How long the TCP connect may take.
    pub connect_timeout: Duration,
    /// No template for this long (while connected) makes the provider stale; zero: never.
    /// A provider sends templates only when they change, so this is off by default.
    pub stale_after: Duration,
    /// Handshake and write timeouts, and the largest frame accepted from the provider.
    pub limits: Limits,
}

impl TpConfig {
    /// The defaults for the provider at `addr`.
    pub fn new(addr: SocketAddr) -> TpConfig {
        TpConfig {
            addr,
            authority: None,
            session: TpSessionConfig::default(),
            retry: Backoff::default(),
            connect_timeout: Duration::from_secs(5),
            stale_after: Duration::ZERO,
            limits: Limits::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("connect timed out")]
    ConnectTimeout,
    #[error("{0}")]
    Transport(#[from] TransportError),
    #[error("{0}")]
    Session(#[from] TpSessionError),
    #[error("invalid authority key")]
    AuthorityKey,
}

/// The transactions of one of the provider's templates, or why there are none (the
/// provider's error code, or the connection the template belonged to is gone).
pub type TxDataReply = Result<RequestTransactionDataSuccess, String>;

/// A request for a template's transactions (`RequestTransactionData`), answered on `reply`.
#[derive(Debug)]
pub struct TxDataRequest {
    /// The provider's template id.
    pub template_id: u64,
    /// Where the answer goes.
    pub reply: oneshot::Sender<TxDataReply>,
}

/// A running client. Dropping it stops the task.
pub struct TpFeed {
    /// First, so that dropping the feed aborts the task before its channels drop (the task
    /// ends at its next await point).
    task: OwnedTask,
    works: watch::Receiver<Option<TpWork>>,
    health: Arc<NodeHealth>,
    solutions: mpsc::UnboundedSender<SubmitSolution>,
    tx_data: mpsc::UnboundedSender<TxDataRequest>,
    kept: Option<Arc<KeptTransactions>>,
}

impl TpFeed {
    /// Starts the client task; it runs until `shutdown` completes or the feed is dropped. The
    /// link's bytes and messages are reported into `events` as link `tp` (docs/metrics.md,
    /// "Protocol cost").
    pub fn spawn(
        config: TpConfig,
        events: EventSink,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> TpFeed {
        let health = Arc::new(NodeHealth::new(config.stale_after));
        let (tx, works) = watch::channel(None);
        let (solutions, solutions_rx) = mpsc::unbounded_channel();
        let (tx_data, tx_data_rx) = mpsc::unbounded_channel();
        let kept = config
            .session
            .fetch_transactions
            .then(|| Arc::new(KeptTransactions::default()));
        let task = OwnedTask::spawn(run(
            config,
            Net {
                counter: LinkCounter::new("tp"),
                events,
            },
            health.clone(),
            tx,
            Requests {
                solutions: solutions_rx,
                tx_data: tx_data_rx,
                kept: kept.clone(),
            },
            shutdown,
        ));
        TpFeed {
            task,
            works,
            health,
            solutions,
            tx_data,
            kept,
        }
    }

    /// The transactions of the latest templates, when the session fetches them
    /// ([`TpSessionConfig::fetch_transactions`]).
    pub fn kept_transactions(&self) -> Option<Arc<KeptTransactions>> {
        self.kept.clone()
    }

    /// The latest minable template (kept when the provider goes away; whether to serve it is
    /// the health's to say).
    pub fn works(&self) -> watch::Receiver<Option<TpWork>> {
        self.works.clone()
    }

    /// The provider's health: reachable, and templates fresh.
    pub fn health(&self) -> Arc<NodeHealth> {
        self.health.clone()
    }

    /// Where found blocks go: sent on the current connection (the provider's template ids are
    /// per connection, so a solution is never carried over to the next one).
    pub fn solutions(&self) -> mpsc::UnboundedSender<SubmitSolution> {
        self.solutions.clone()
    }

    /// Where requests for a template's transactions go; like solutions, they are sent on the
    /// current connection, whose template ids they must name.
    pub fn tx_data(&self) -> mpsc::UnboundedSender<TxDataRequest> {
        self.tx_data.clone()
    }

    /// Waits for the task to end (after `shutdown` resolved).
    pub async fn stopped(self) {
        self.task.stopped().await
    }
}

/// What the pool asks of the provider, and where the transactions fetched go.
struct Requests {
    solutions: mpsc::UnboundedReceiver<SubmitSolution>,
    tx_data: mpsc::UnboundedReceiver<TxDataRequest>,
    kept: Option<Arc<KeptTransactions>>,
}

/// The provider link's counts and where they are reported.
struct Net {
    counter: Arc<LinkCounter>,
    events: EventSink,
}

async fn run(
    config: TpConfig,
    net: Net,
    health: Arc<NodeHealth>,
    tx: watch::Sender<Option<TpWork>>,
    mut requests: Requests,
    shutdown: impl Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut delays = config.retry.start();
    let mut connections = 0u64;
    loop {
        let mut served = false;
        connections += 1;
        let ended = tokio::select! {
            _ = &mut shutdown => {
                net.counter.report(&net.events);
                return;
            }
            r = connection(&config, &net, &health, &tx, &mut requests, connections, &mut served) => r,
        };
        net.counter.report(&net.events);
        if served {
            delays.reset();
        }
        let error = match ended {
            Ok(()) => return,
            Err(e) => e,
        };
        // Whatever happened, the templates of that connection are no longer minable through it.
        health.record_failure(Instant::now(), true, &error.to_string());
        let wait = delays.next_delay();
        tracing::warn!(tp = %config.addr, error = %error, retry_in = ?wait, "template provider connection lost");
        // Solutions queued meanwhile name templates of a connection that is gone.
        while let Ok(s) = requests.solutions.try_recv() {
            tracing::error!(
                template_id = s.template_id,
                "tp: block found but no connection to submit it on"
            );
        }
        while let Ok(r) = requests.tx_data.try_recv() {
            let _ = r
                .reply
                .send(Err("template provider connection lost".into()));
        }
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// One connection (the `number`th), until it fails. `Ok` only when the solution channel closed
/// (the pool is stopping).
async fn connection(
    config: &TpConfig,
    net: &Net,
    health: &NodeHealth,
    tx: &watch::Sender<Option<TpWork>>,
    requests: &mut Requests,
    number: u64,
    served: &mut bool,
) -> Result<(), ConnError> {
    let stream = tokio::time::timeout(config.connect_timeout, TcpStream::connect(config.addr))
        .await
        .map_err(|_| ConnError::ConnectTimeout)?
        .map_err(ConnError::Connect)?;
    let initiator = match config.authority {
        Some(k) => Initiator::from_raw_k(k).map_err(|_| ConnError::AuthorityKey)?,
        None => Initiator::without_pk().map_err(|_| ConnError::AuthorityKey)?,
    };
    let mut conn = NoiseConn::connect(stream, initiator, config.limits).await?;
    // Directions are the link's, up toward the pool: the provider's templates come toward the
    // pool (or the JDC), so this end counts as the pool's end although it dialled.
    conn.count_into(net.counter.clone(), sv2::Side::Server);
    let mut report = tokio::time::interval(events::LINK_REPORT_EVERY);
    let mut session = TpSession::new(config.session.clone());
    conn.send_message(&session.setup_connection()).await?;
    let started = tokio::time::Instant::now();
    let now = || Timestamp::from_millis(started.elapsed().as_millis() as u64);
    let mut last_prev = tx.borrow().as_ref().map(|w| w.template.prev_hash);
    // Requests for transaction data in flight on this connection, by template id. Dropped
    // with the connection, which tells their askers.
    let mut waiting: HashMap<u64, Vec<oneshot::Sender<TxDataReply>>> = HashMap::new();
    loop {
        let due = session
            .poll_timeout()
            .map(|at| started + Duration::from_nanos(at.as_nanos()));
        tokio::select! {
            m = conn.read_message() => {
                let Some(m) = m? else { continue };
                session.handle_message(m, now())?;
            }
            _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                session.handle_timeout(now());
            }
            _ = report.tick() => {
                net.counter.report(&net.events);
                continue;
            }
            s = requests.solutions.recv() => {
                let Some(s) = s else { return Ok(()) };
                tracing::info!(template_id = s.template_id, "tp: SubmitSolution");
                conn.send_message(&Message::from(s)).await?;
                continue;
            }
            Some(r) = requests.tx_data.recv() => {
                let kept = requests.kept.as_ref().and_then(|k| k.handle_connection(number, r.template_id));
                if let Some(d) = kept {
                    let _ = r.reply.send(Ok((*d).clone()));
                    continue;
                }
                waiting.entry(r.template_id).or_default().push(r.reply);
                session.request_transaction_data(r.template_id);
            }
        };
        while let Some(m) = session.poll_transmit() {
            conn.send_message(&m).await?;
        }
        while let Some(event) = session.poll_event() {
            match event {
                TpEvent::Work(w) => {
                    let new_tip = last_prev != Some(w.template.prev_hash);
                    last_prev = Some(w.template.prev_hash);
                    health.record_template(Instant::now(), w.template.height, new_tip);
                    *served = true;
                    tracing::debug!(
                        template_id = w.tdp.template_id,
                        height = w.template.height,
                        new_tip,
                        "tp: template"
                    );
                    tx.send_replace(Some(w));
                }
                TpEvent::TxData(answer) => {
                    let id = match &answer {
                        Ok(d) => d.template_id,
                        Err(e) => e.template_id,
                    };
                    let waiters = waiting.remove(&id).unwrap_or_default();
                    // Kept as it came (a template's transactions may be megabytes): copied only
                    // for whoever asked.
                    let reply: TxDataReply = match (answer, &requests.kept) {
                        (Ok(d), Some(k)) => {
                            let kept = k.keep(number, d);
                            if waiters.is_empty() {
                                continue;
                            }
                            Ok((*kept).clone())
                        }
                        (Ok(d), None) => Ok(d),
                        (Err(e), _) => Err(e.error_code),
                    };
                    for r in waiters {
                        let _ = r.send(reply.clone());
                    }
                }
            }
        }
    }
}
