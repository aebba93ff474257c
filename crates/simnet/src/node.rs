//! A running network in real time: the shared handle the node endpoints (RPC, ZMQ, Template
//! Provider) serve from.
//!
//! One [`Network`] sits behind a mutex. The clock task ([`Node::run_clock`]) maps the monotonic
//! clock onto [`SimTime`] and advances the network at its deadlines; endpoints read it through
//! [`Node::read`] and submit blocks through [`Node::submit_block`]. Whatever the network outputs,
//! whoever caused it, is published at once in one place ([`Node::publish`]): written to the
//! event log, sent to [`Node::subscribe`]rs, and, for templates, stored in a watch channel so a
//! long-poll can wait for the next one. Critical sections only run the sans-IO core, never I/O.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use events::{EventSink, ShortStr};
use primitives::Hash256;
use tokio::sync::{broadcast, watch};

use crate::chain::BlockSource;
use crate::checks::SubmitError;
use crate::network::{Network, Output, SubmitResult};
use crate::template::Template;
use crate::time::SimTime;

/// What endpoints are told about, in the order it happened.
#[derive(Clone, Debug)]
pub enum Update {
    Template(Arc<Template>),
    Tip {
        hash: Hash256,
        height: u32,
        prev_hash: Hash256,
        source: BlockSource,
    },
    BlockVerdict {
        hash: Option<Hash256>,
        height: Option<u32>,
        result: Result<(), SubmitError>,
    },
}

/// Counters for the summary a node prints when it stops.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeStats {
    pub templates: u64,
    pub network_blocks: u64,
    pub submitted_blocks: u64,
    pub rejected_blocks: u64,
}

struct Shared {
    net: Mutex<Network>,
    /// The instant simulated time zero maps to.
    start: Instant,
    name: ShortStr,
    sink: EventSink,
    updates: broadcast::Sender<Update>,
    template: watch::Sender<Arc<Template>>,
    /// Wakes the clock task when a submission moved the network's next deadline.
    kick: tokio::sync::Notify,
    stats: Mutex<NodeStats>,
}

/// A cloneable handle to one running network.
#[derive(Clone)]
pub struct Node {
    shared: Arc<Shared>,
}

/// How many updates a slow subscriber may fall behind before it starts missing them.
const UPDATE_BACKLOG: usize = 1024;

impl Node {
    /// Starts the network's clock now. `name` names the node in events ("pool", "farm", ...).
    pub fn new(mut net: Network, name: &str, sink: EventSink) -> Node {
        let start = Instant::now();
        let first = net.advance(SimTime::ZERO);
        let (template, _) = watch::channel(net.template().clone());
        let (updates, _) = broadcast::channel(UPDATE_BACKLOG);
        let node = Node {
            shared: Arc::new(Shared {
                net: Mutex::new(net),
                start,
                name: ShortStr::new(name),
                sink,
                updates,
                template,
                kick: tokio::sync::Notify::new(),
                stats: Mutex::new(NodeStats::default()),
            }),
        };
        node.publish(first);
        node
    }

    /// Simulated time now.
    pub fn now(&self) -> SimTime {
        SimTime::from_duration(self.shared.start.elapsed())
    }

    /// The instant simulated time `t` maps to.
    pub fn instant(&self, t: SimTime) -> Instant {
        self.shared.start + Duration::from_nanos(t.as_nanos())
    }

    /// Read access to the network, brought up to date first so that readers never see a
    /// deadline that has already passed (a template the clock task is about to publish).
    pub fn read<R>(&self, f: impl FnOnce(&Network) -> R) -> R {
        let (r, outputs) = {
            let mut net = self.lock();
            let outputs = net.advance(self.now());
            (f(&net), outputs)
        };
        self.publish(outputs);
        r
    }

    /// Judges a serialized block (`submitblock`, `SubmitSolution`) at the current instant.
    pub fn submit_block(&self, raw: &[u8]) -> SubmitResult {
        let (result, outputs) = {
            let mut net = self.lock();
            let now = self.now();
            let result = net.submit_block(now, raw);
            (result, net.advance(now))
        };
        self.publish(outputs);
        self.shared.kick.notify_one();
        result
    }

    /// The rest of the network finds `count` blocks now, paying `payout_script`
    /// (`generatetoaddress`). Returns once every block is the tip and has been published.
    pub fn mine(&self, count: u32, payout_script: &[u8]) -> Vec<Hash256> {
        let (hashes, outputs) = {
            let mut net = self.lock();
            let now = self.now();
            let hashes: Vec<Hash256> = (0..count)
                .map(|_| net.mine_now(now, payout_script.to_vec()))
                .collect();
            (hashes, net.advance(now))
        };
        self.publish(outputs);
        self.shared.kick.notify_one();
        hashes
    }

    /// Every update from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Update> {
        self.shared.updates.subscribe()
    }

    /// The current template, and a way to wait for the next.
    pub fn templates(&self) -> watch::Receiver<Arc<Template>> {
        self.shared.template.subscribe()
    }

    pub fn stats(&self) -> NodeStats {
        *self.shared.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn name(&self) -> &str {
        self.shared.name.as_str()
    }

    /// The node's event log, which its endpoints also write to (`LinkBytes`).
    pub fn events(&self) -> &EventSink {
        &self.shared.sink
    }

    /// Advances the network at its deadlines until `stop` resolves.
    pub async fn run_clock(&self, stop: impl std::future::Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        loop {
            let (outputs, next) = {
                let mut net = self.lock();
                let outputs = net.advance(self.now());
                (outputs, net.next_deadline())
            };
            self.publish(outputs);
            // Nothing scheduled: sleep until a submission kicks us (or a long while passes).
            let wake = next.map_or_else(
                || Instant::now() + Duration::from_secs(3600),
                |t| self.instant(t),
            );
            tokio::select! {
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = self.shared.kick.notified() => {}
                _ = &mut stop => return,
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Network> {
        // A panic inside the sans-IO core would be a bug; the state it left is still the best
        // we have, so keep serving rather than poisoning every endpoint.
        self.shared.net.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one place outputs leave the network: events, logs, subscribers, the template watch.
    fn publish(&self, outputs: Vec<Output>) {
        if outputs.is_empty() {
            return;
        }
        let s = &self.shared;
        let mut stats = s.stats.lock().unwrap_or_else(|p| p.into_inner());
        for out in outputs {
            let update = match out {
                Output::TemplateCreated(t) => {
                    stats.templates += 1;
                    let fingerprint = events::fingerprint(&t.prev_hash, &t.merkle_branch);
                    tracing::info!(node = %s.name.as_str(), id = t.id, height = t.height, txs = t.tx_count(),
                        value_sats = t.coinbase_value, fees_sats = t.total_fees, %fingerprint, "template");
                    s.sink.emit(events::TemplateCreated {
                        node: s.name,
                        template_id: t.id,
                        height: t.height,
                        prev_hash: t.prev_hash,
                        value_sats: t.coinbase_value,
                        fees_sats: t.total_fees,
                        tx_count: t.tx_count() as u32,
                        fingerprint,
                        future: false,
                    });
                    s.template.send_replace(t.clone());
                    Update::Template(t)
                }
                Output::TipChanged {
                    hash,
                    height,
                    prev_hash,
                    source,
                    ..
                } => {
                    let tip_source = match source {
                        BlockSource::Submitted => {
                            stats.submitted_blocks += 1;
                            events::TipSource::Submitted
                        }
                        BlockSource::Network | BlockSource::Start => {
                            stats.network_blocks += 1;
                            events::TipSource::Network
                        }
                    };
                    tracing::info!(node = %s.name.as_str(), %hash, height, source = ?tip_source, "new tip");
                    s.sink.emit(events::TipChanged {
                        node: s.name,
                        hash,
                        height,
                        prev_hash,
                        source: tip_source,
                    });
                    Update::Tip {
                        hash,
                        height,
                        prev_hash,
                        source,
                    }
                }
                Output::BlockVerdict {
                    hash,
                    height,
                    result,
                    ..
                } => {
                    let reason = match &result {
                        Ok(()) => ShortStr::EMPTY,
                        Err(e) => {
                            stats.rejected_blocks += 1;
                            ShortStr::new(&e.to_string())
                        }
                    };
                    tracing::info!(node = %s.name.as_str(), ?hash, ?height,
                        verdict = if result.is_ok() { "accepted" } else { reason.as_str() }, "block submitted");
                    s.sink.emit(events::BlockResult {
                        node: s.name,
                        hash: hash.unwrap_or_default(),
                        height: height.unwrap_or(0),
                        accepted: result.is_ok(),
                        reason,
                    });
                    Update::BlockVerdict {
                        hash,
                        height,
                        result,
                    }
                }
            };
            // No subscribers is fine: nobody is listening yet.
            let _ = s.updates.send(update);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimnetConfig;

    fn node(block_interval: Duration) -> Node {
        let config = SimnetConfig {
            seed: 5,
            block_interval,
            template_interval: Duration::from_millis(20),
            ..SimnetConfig::default()
        };
        Node::new(Network::new(config).unwrap(), "pool", EventSink::disabled())
    }

    #[tokio::test]
    async fn clock_publishes_network_blocks_to_subscribers_and_the_template_watch() {
        let node = node(Duration::from_millis(30));
        let mut updates = node.subscribe();
        let mut templates = node.templates();
        let start_height = node.read(|n| n.height());
        let clock = tokio::spawn({
            let node = node.clone();
            async move { node.run_clock(std::future::pending()).await }
        });
        let tip = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Update::Tip { height, .. } = updates.recv().await.unwrap() {
                    return height;
                }
            }
        })
        .await
        .expect("a network block within 5 s at a 30 ms mean");
        assert_eq!(tip, start_height + 1);
        tokio::time::timeout(
            Duration::from_secs(5),
            templates.wait_for(|t| t.height > tip),
        )
        .await
        .expect("a template on the new tip")
        .unwrap();
        assert!(node.stats().network_blocks >= 1);
        clock.abort();
    }

    #[tokio::test]
    async fn mine_moves_the_tip_before_returning() {
        let node = node(Duration::ZERO);
        let mut updates = node.subscribe();
        let h0 = node.read(|n| n.height());
        let hashes = node.mine(3, &[0x51]);
        assert_eq!(hashes.len(), 3);
        assert_eq!(node.read(|n| n.height()), h0 + 3);
        assert_eq!(node.read(|n| n.tip().hash), hashes[2]);
        assert_eq!(node.templates().borrow().height, h0 + 4);
        let mut tips = 0;
        while let Ok(u) = updates.try_recv() {
            tips += matches!(u, Update::Tip { .. }) as u32;
        }
        assert_eq!(tips, 3);
    }

    #[tokio::test]
    async fn garbage_submission_gets_cores_decode_error() {
        let node = node(Duration::ZERO);
        let r = node.submit_block(b"not a block");
        assert_eq!(r.unwrap_err().to_string(), "Block decode failed");
        assert_eq!(node.stats().rejected_blocks, 1);
    }
}
