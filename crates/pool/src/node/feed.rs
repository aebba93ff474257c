//! The template feed: a task that keeps the node's latest template in a watch channel and the
//! node's health up to date (see the module docs of [`crate::node`] for the rules it follows).
//!
//! One loop owns the channel and the health; requests run as tasks of their own so that a slow
//! `getblocktemplate` never holds up the one a `hashblock` message asks for. The long poll runs
//! in its own task too, and the ZMQ subscriber in another.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use primitives::Hash256;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use super::error::NodeError;
use super::health::NodeHealth;
use super::rpc::NodeClient;
use super::zmq::{self, ZmqEvent};
use super::Backoff;
use crate::task::OwnedTask;
use crate::template::Template;

/// At most this many `getblocktemplate` requests at once (besides the long poll): new tips
/// announced while requests hang do not pile up more.
const MAX_IN_FLIGHT: usize = 4;
/// Log every failure of a run at warn level up to this many, then at powers of two.
const LOUD_FAILURES: u32 = 5;
/// A long poll answered within this long with the very template it named came back without
/// waiting.
const QUICK_ANSWER: Duration = Duration::from_secs(1);
/// After the second such answer in a row, wait this long before polling again, doubling with
/// each further one up to [`QUICK_ANSWER`]: a node that does not long-poll is asked about once
/// a second, while a one-off early answer (simnet gives one to a poll that arrives between
/// making a new template and publishing it) costs no delay.
const QUICK_REPEAT_WAIT: Duration = Duration::from_millis(10);

/// The latest template, `None` until the first arrives.
pub type TemplateRx = watch::Receiver<Option<Arc<Template>>>;

/// A running feed. Dropping it stops the task.
///
/// The channel keeps the last template when the node goes away; whether work may be made from
/// it is [`NodeHealth::state`]'s to say.
pub struct TemplateFeed {
    /// First, so that dropping the feed aborts the task before its other fields drop (the
    /// task ends at its next await point).
    task: OwnedTask,
    templates: TemplateRx,
    health: Arc<NodeHealth>,
}

impl TemplateFeed {
    /// Starts following the node on the current tokio runtime, until `shutdown` resolves (or
    /// the feed is dropped).
    pub fn spawn(
        client: NodeClient,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> TemplateFeed {
        let health = Arc::new(NodeHealth::new(client.config().stale_after));
        let (tx, templates) = watch::channel(None);
        let feed = Feed {
            health: health.clone(),
            tx,
            published: None,
            retry_at: None,
            delays: client.config().retry.start(),
            failures_logged: 0,
            client,
        };
        TemplateFeed {
            task: OwnedTask::spawn(feed.run(shutdown)),
            templates,
            health,
        }
    }

    /// The latest template, and a way to wait for the next ([`watch::Receiver::changed`]):
    /// every successful `getblocktemplate` is sent, periodic refreshes included.
    pub fn templates(&self) -> TemplateRx {
        self.templates.clone()
    }

    /// The node's health: reachable, and templates fresh.
    pub fn health(&self) -> Arc<NodeHealth> {
        self.health.clone()
    }

    /// Waits for the task to end (after `shutdown` resolved).
    pub async fn stopped(self) {
        self.task.stopped().await
    }
}

/// What asked for a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trigger {
    Start,
    Periodic,
    HashBlock,
    ZmqConnected,
    Retry,
    LongPoll,
}

/// A `getblocktemplate` answer and when the node's state it shows was read at the earliest.
struct Fetched {
    trigger: Trigger,
    /// When the request was sent; for a long poll, when its answer came (the node answers
    /// with the template it has then).
    observed: Instant,
    result: Result<Template, NodeError>,
}

/// The published template's place in time.
struct Published {
    prev_hash: Hash256,
    height: u32,
    observed: Instant,
    received: Instant,
}

struct Feed {
    client: NodeClient,
    health: Arc<NodeHealth>,
    tx: watch::Sender<Option<Arc<Template>>>,
    published: Option<Published>,
    retry_at: Option<tokio::time::Instant>,
    delays: super::backoff::Delays,
    failures_logged: u32,
}

impl Feed {
    async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let config = self.client.config().clone();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut fetches: JoinSet<Fetched> = JoinSet::new();
        // Long-lived helpers: aborted when the set is dropped.
        let mut helpers: JoinSet<()> = JoinSet::new();
        let (polled_tx, mut polled) = mpsc::channel::<Fetched>(8);

        let zmq_endpoint = config.zmq.as_deref().map(zmq::endpoint);
        let (zmq_tx, mut zmq_rx) = mpsc::channel::<ZmqEvent>(64);
        let (zmq_up_tx, zmq_up) = watch::channel(false);
        let zmq_mode = match zmq_endpoint {
            Some(Ok(endpoint)) => {
                helpers.spawn(zmq::run(
                    endpoint,
                    config.zmq_connect_timeout,
                    config.retry,
                    zmq_tx,
                ));
                true
            }
            Some(Err(e)) => {
                // NodeClient::new checks the endpoint; only a hand-made config gets here.
                tracing::error!(error = %e, "zmq: not subscribing; following the node by long polling");
                false
            }
            None => false,
        };
        helpers.spawn(long_poll(
            self.client.clone(),
            polled_tx,
            zmq_mode.then_some(zmq_up),
            config.retry,
        ));

        tracing::info!(url = %self.client.url(), zmq = ?config.zmq, interval_ms = config.template_interval.as_millis() as u64,
            "node: following the node's templates");
        self.fetch(&mut fetches, Trigger::Start);
        let periodic = !config.template_interval.is_zero();
        let mut ticks = tokio::time::interval_at(
            tokio::time::Instant::now() + config.template_interval,
            config.template_interval.max(Duration::from_millis(1)),
        );
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);

        loop {
            let retry_at = self.retry_at;
            tokio::select! {
                _ = &mut shutdown => break,
                Some(done) = fetches.join_next(), if !fetches.is_empty() => match done {
                    Ok(fetched) => self.handle(fetched),
                    Err(e) if e.is_panic() => tracing::error!(error = %e, "node: a getblocktemplate task panicked"),
                    Err(_) => {}
                },
                Some(fetched) = polled.recv() => self.handle(fetched),
                Some(event) = zmq_rx.recv(), if zmq_mode => match event {
                    ZmqEvent::HashBlock(hash) => {
                        self.health.record_hashblock();
                        let known = self.published.as_ref().is_some_and(|p| p.prev_hash == hash);
                        if !known && fetches.len() < MAX_IN_FLIGHT {
                            self.fetch(&mut fetches, Trigger::HashBlock);
                        }
                    }
                    ZmqEvent::Connected => {
                        self.health.set_zmq_connected(true);
                        zmq_up_tx.send_replace(true);
                        // A tip published while the subscription was being set up is lost.
                        if fetches.len() < MAX_IN_FLIGHT {
                            self.fetch(&mut fetches, Trigger::ZmqConnected);
                        }
                    }
                    ZmqEvent::Disconnected => {
                        self.health.set_zmq_connected(false);
                        zmq_up_tx.send_replace(false);
                    }
                },
                _ = ticks.tick(), if periodic => {
                    if fetches.is_empty() {
                        self.fetch(&mut fetches, Trigger::Periodic);
                    }
                }
                _ = sleep_until(retry_at), if retry_at.is_some() => {
                    self.retry_at = None;
                    if fetches.is_empty() {
                        self.fetch(&mut fetches, Trigger::Retry);
                    }
                }
                Some(ended) = helpers.join_next(), if !helpers.is_empty() => {
                    if let Err(e) = ended {
                        if e.is_panic() {
                            tracing::error!(error = %e, "node: a feed helper task panicked");
                        }
                    }
                }
            }
        }
        tracing::info!(url = %self.client.url(), "node: template feed stopped");
    }

    fn fetch(&self, fetches: &mut JoinSet<Fetched>, trigger: Trigger) {
        let client = self.client.clone();
        fetches.spawn(async move {
            let observed = Instant::now();
            let result = client.get_block_template(None).await;
            Fetched {
                trigger,
                observed,
                result,
            }
        });
    }

    fn handle(&mut self, fetched: Fetched) {
        let now = Instant::now();
        match fetched.result {
            Ok(template) => {
                self.delays.reset();
                self.retry_at = None;
                if self.failures_logged > 0 {
                    tracing::info!(url = %self.client.url(), "node: templates again");
                    self.failures_logged = 0;
                }
                self.publish(template, fetched.observed, fetched.trigger, now);
            }
            Err(e) => {
                self.health
                    .record_failure(now, e.is_unreachable(), &e.to_string());
                let failures = self.health.consecutive_failures();
                if failures <= LOUD_FAILURES || failures.is_power_of_two() {
                    tracing::warn!(trigger = ?fetched.trigger, failures, error = %e, "node: no template");
                } else {
                    tracing::debug!(trigger = ?fetched.trigger, failures, error = %e, "node: no template");
                }
                self.failures_logged = failures;
                if self.retry_at.is_none() {
                    let wait = self.delays.next_delay();
                    self.retry_at = Some(tokio::time::Instant::now() + wait);
                }
            }
        }
    }

    /// Sends `template` on, unless it is surely older than the published one: it builds on
    /// another block, and it was observed before the published one arrived and builds lower
    /// (or, at the same height, was observed before the published one was).
    fn publish(&mut self, template: Template, observed: Instant, trigger: Trigger, now: Instant) {
        let new_tip = match &self.published {
            None => true,
            Some(p) if p.prev_hash == template.prev_hash => false,
            Some(p) => {
                let older = match template.height.cmp(&p.height) {
                    std::cmp::Ordering::Greater => false,
                    std::cmp::Ordering::Less => observed < p.received,
                    std::cmp::Ordering::Equal => observed < p.observed,
                };
                if older {
                    tracing::debug!(?trigger, height = template.height, prev_hash = %template.prev_hash,
                        "node: dropped a template older than the one published");
                    return;
                }
                true
            }
        };
        let height = template.height;
        let prev_hash = template.prev_hash;
        if new_tip {
            tracing::info!(?trigger, height, %prev_hash, txs = template.transactions.len(),
                value_sats = template.coinbase_value.to_sat(), "node: template on a new tip");
        } else {
            tracing::debug!(
                ?trigger,
                height,
                txs = template.transactions.len(),
                value_sats = template.coinbase_value.to_sat(),
                "node: template"
            );
        }
        self.health.record_template(now, height, new_tip);
        self.published = Some(Published {
            prev_hash,
            height,
            observed,
            received: now,
        });
        self.tx.send_replace(Some(Arc::new(template)));
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Long polls, one after the other, for as long as `results` has a receiver. In ZMQ mode
/// (`zmq_up` given) only while the ZMQ connection is down.
async fn long_poll(
    client: NodeClient,
    results: mpsc::Sender<Fetched>,
    mut zmq_up: Option<watch::Receiver<bool>>,
    retry: Backoff,
) {
    let mut delays = retry.start();
    let mut longpoll_id: Option<String> = None;
    let mut quick_answers = 0u32;
    loop {
        if let Some(up) = zmq_up.as_mut() {
            if up.wait_for(|connected| !*connected).await.is_err() {
                return;
            }
            tracing::debug!(url = %client.url(), "node: ZMQ is down; long polling meanwhile");
        }
        let sent = longpoll_id.clone();
        let started = Instant::now();
        let call = client.get_block_template(sent.as_deref());
        let result = match zmq_up.as_mut() {
            Some(up) => tokio::select! {
                r = call => r,
                _ = up.wait_for(|connected| *connected) => {
                    longpoll_id = None;
                    continue;
                }
            },
            None => call.await,
        };
        match result {
            Ok(template) => {
                delays.reset();
                let id = template.longpoll_id.clone();
                let unchanged = sent.is_some() && id == sent;
                if unchanged && started.elapsed() < QUICK_ANSWER {
                    // Nothing new to publish; the periodic refresh keeps the health current.
                    quick_answers += 1;
                    if quick_answers >= 2 {
                        let wait = (QUICK_REPEAT_WAIT * (1 << (quick_answers - 2).min(10)))
                            .min(QUICK_ANSWER);
                        tracing::debug!(url = %client.url(), quick_answers, wait_ms = wait.as_millis() as u64,
                            "node: long polls return at once with the same template");
                        tokio::time::sleep(wait).await;
                    }
                    continue;
                }
                quick_answers = 0;
                let fetched = Fetched {
                    trigger: Trigger::LongPoll,
                    observed: Instant::now(),
                    result: Ok(template),
                };
                if results.send(fetched).await.is_err() {
                    return;
                }
                if id.is_none() {
                    tracing::warn!(url = %client.url(), "node: templates have no longpollid; following the node by periodic refresh only");
                    return;
                }
                longpoll_id = id;
            }
            // The node kept the poll open longer than we wait: ask again.
            Err(NodeError::Timeout { .. }) if sent.is_some() => {}
            Err(e) => {
                longpoll_id = None;
                let fetched = Fetched {
                    trigger: Trigger::LongPoll,
                    observed: started,
                    result: Err(e),
                };
                if results.send(fetched).await.is_err() {
                    return;
                }
                tokio::time::sleep(delays.next_delay()).await;
            }
        }
    }
}
