//! A running network in real time: the shared handles the node endpoints (RPC, ZMQ, Template
//! Provider) serve from.
//!
//! One [`Network`] sits behind a mutex, shared by a [`Node`] handle per node it presents. The
//! clock task ([`Node::run_clock`], one per network) maps the monotonic clock onto [`Timestamp`]
//! and advances the network at its deadlines; endpoints read their node's view through
//! [`Node::read`] and submit blocks through [`Node::submit_block`]. Whatever the network
//! outputs, whoever caused it, is published at once in one place ([`Node::publish`]): written to
//! the event log under the node's name, sent to that node's [`Node::subscribe`]rs, and, for
//! templates, stored in its watch channel so a long-poll can wait for the next one. Critical
//! sections only run the sans-IO core, never I/O.
//!
//! With several nodes, the rest of the network's tip changes are recorded too, as node
//! "network", and each node's links are named after it ("farm/tdp", "farm/peer"); a single
//! node keeps the bare link names ("tdp", "peer").

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use events::{EventSink, LinkCounter, ShortStr};
use primitives::Hash256;
use tokio::sync::{broadcast, watch};

use crate::chain::BlockSource;
use crate::checks::SubmitError;
use crate::config::NETWORK_NAME;
use crate::link_bytes;
use crate::mempool::MempoolEvent;
use crate::network::{Network, NodeId, NodeOutput, Output, SubmitResult};
use crate::relay::PeerBytes;
use crate::template::Template;
use crate::view::NodeView;
use primitives::Timestamp;

/// What endpoints are told about, in the order it happened.
#[derive(Clone, Debug)]
pub enum Update {
    /// A new template.
    Template(Arc<Template>),
    /// The node's tip moved.
    Tip {
        /// Hash of the new tip.
        hash: Hash256,
        /// Height of the new tip.
        height: u32,
        /// Hash of its parent.
        prev_hash: Hash256,
        /// Where the block came from.
        source: BlockSource,
    },
    /// The verdict on a submitted block (`Ok` is bitcoind's `null`).
    BlockVerdict {
        /// None when the bytes did not decode.
        hash: Option<Hash256>,
        /// None when the parent is unknown or the bytes did not decode.
        height: Option<u32>,
        /// `Ok` when accepted, else Core's reject reason.
        result: Result<(), SubmitError>,
    },
}

/// One active ZMQ notification, as `getzmqnotifications` lists it: what a publisher serving
/// this node told it when it started (see [`Node::register_zmq`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZmqNotification {
    /// The topic, as bitcoind names the option without its `-zmq` prefix: "pubhashblock".
    pub kind: String,
    /// "tcp://HOST:PORT", as the listener is bound.
    pub address: String,
    /// The subscriber queue limit (`-zmqpub<topic>hwm`).
    pub hwm: u64,
}

/// Keeps a publisher's notifications listed until dropped.
pub struct ZmqRegistration {
    shared: Arc<Shared>,
    node: NodeId,
    id: u64,
}

impl Drop for ZmqRegistration {
    fn drop(&mut self) {
        let outlet = &self.shared.outlets[self.node.index()];
        let mut zmq = outlet.zmq.lock().unwrap_or_else(|p| p.into_inner());
        zmq.retain(|(id, _)| *id != self.id);
    }
}

/// What a publisher of transactions (ZMQ `hashtx`, `rawtx`, `sequence`) is told: the node's
/// mempool changes and tip changes, in the order they happened.
#[derive(Clone, Debug)]
pub enum TxUpdate {
    /// A mempool entry or eviction.
    Mempool(MempoolEvent),
    /// The node's tip moved: the transactions in the block left the mempool.
    Tip {
        /// Hash of the new tip.
        hash: Hash256,
        /// Hash of its parent.
        prev_hash: Hash256,
    },
}

/// Counters for the summary a node prints when it stops.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeStats {
    /// Templates made.
    pub templates: u64,
    /// Tip changes to blocks found by the rest of the network.
    pub network_blocks: u64,
    /// Tip changes to submitted blocks.
    pub submitted_blocks: u64,
    /// Submitted blocks rejected.
    pub rejected_blocks: u64,
}

/// One node's outlets.
struct Outlet {
    name: ShortStr,
    updates: broadcast::Sender<Update>,
    /// Apart from `updates`, so that one message per transaction never crowds out tips for
    /// the endpoints that only want those; sent to only while someone listens.
    txs: broadcast::Sender<TxUpdate>,
    template: watch::Sender<Arc<Template>>,
    stats: Mutex<NodeStats>,
    /// Its modelled peer traffic, reported as `LinkBytes` (up = what the node sent).
    peer: Arc<LinkCounter>,
    peer_counted: Mutex<PeerBytes>,
    /// The ZMQ notifications publishers serve for this node, by registration.
    zmq: Mutex<Vec<(u64, Vec<ZmqNotification>)>>,
}

struct Shared {
    net: Mutex<Network>,
    /// The instant simulated time zero maps to.
    start: Instant,
    sink: EventSink,
    outlets: Vec<Outlet>,
    /// Several nodes: links carry the node's name, and the network's own tips are recorded.
    several: bool,
    /// Wakes the clock task when a submission moved the network's next deadline.
    kick: tokio::sync::Notify,
    next_registration: std::sync::atomic::AtomicU64,
}

/// A cloneable handle to one node of a running network.
#[derive(Clone)]
pub struct Node {
    shared: Arc<Shared>,
    id: NodeId,
}

/// How many updates a slow subscriber may fall behind before it starts missing them.
const UPDATE_BACKLOG: usize = 1024;
/// The same for [`TxUpdate`]s: a reorganisation can put thousands of transactions back at once.
const TX_BACKLOG: usize = 16 * 1024;

impl Node {
    /// Starts the network's clock now and returns a handle to its first node, called `name`
    /// in events ("pool", "farm", ...) whatever the network calls it.
    pub fn new(net: Network, name: &str, sink: EventSink) -> Node {
        let names = net
            .node_ids()
            .map(|id| {
                if id == NodeId::FIRST {
                    name.to_owned()
                } else {
                    net.node(id).name().to_owned()
                }
            })
            .collect();
        Node::start(net, names, sink)
            .into_iter()
            .next()
            .expect("a network has a node")
    }

    /// Starts the network's clock now and returns a handle to each of its nodes, in order,
    /// named as the network names them.
    pub fn all(net: Network, sink: EventSink) -> Vec<Node> {
        let names = net
            .node_ids()
            .map(|id| net.node(id).name().to_owned())
            .collect();
        Node::start(net, names, sink)
    }

    fn start(mut net: Network, names: Vec<String>, sink: EventSink) -> Vec<Node> {
        let start = Instant::now();
        let first = due(&mut net, Timestamp::ZERO);
        let several = names.len() > 1;
        let outlets = net
            .node_ids()
            .zip(&names)
            .map(|(id, name)| {
                let (template, _) = watch::channel(net.node(id).template().clone());
                let (updates, _) = broadcast::channel(UPDATE_BACKLOG);
                let (txs, _) = broadcast::channel(TX_BACKLOG);
                Outlet {
                    name: ShortStr::new(name),
                    updates,
                    txs,
                    template,
                    stats: Mutex::new(NodeStats::default()),
                    peer: LinkCounter::new(&link_name(several, name, "peer")),
                    peer_counted: Mutex::new(PeerBytes::default()),
                    zmq: Mutex::new(Vec::new()),
                }
            })
            .collect();
        let ids: Vec<NodeId> = net.node_ids().collect();
        let shared = Arc::new(Shared {
            net: Mutex::new(net),
            start,
            sink,
            outlets,
            several,
            kick: tokio::sync::Notify::new(),
            next_registration: std::sync::atomic::AtomicU64::new(0),
        });
        let nodes: Vec<Node> = ids
            .into_iter()
            .map(|id| Node {
                shared: shared.clone(),
                id,
            })
            .collect();
        nodes[0].publish(first);
        nodes
    }

    /// Simulated time now.
    pub fn now(&self) -> Timestamp {
        Timestamp::ZERO + self.shared.start.elapsed()
    }

    /// The instant simulated time `t` maps to.
    pub fn instant(&self, t: Timestamp) -> Instant {
        self.shared.start + Duration::from_nanos(t.as_nanos())
    }

    /// Read access to this node's view, brought up to date first so that readers never see a
    /// deadline that has already passed (a template the clock task is about to publish).
    pub fn read<R>(&self, f: impl FnOnce(&NodeView<'_>) -> R) -> R {
        let (r, outputs) = {
            let mut net = self.lock();
            let outputs = due(&mut net, self.now());
            (f(&net.node(self.id)), outputs)
        };
        self.publish(outputs);
        r
    }

    /// Judges a serialized block (`submitblock`, `SubmitSolution`) at this node, now.
    pub fn submit_block(&self, raw: &[u8]) -> SubmitResult {
        let (result, outputs) = {
            let mut net = self.lock();
            let now = self.now();
            let result = net.submit_block_at(self.id, now, raw);
            (result, due(&mut net, now))
        };
        self.publish(outputs);
        self.shared.kick.notify_one();
        result
    }

    /// This node finds `count` blocks now, paying `payout_script` (`generatetoaddress`).
    /// Returns once every block is its tip and has been published.
    pub fn mine(&self, count: u32, payout_script: &[u8]) -> Vec<Hash256> {
        let (hashes, outputs) = {
            let mut net = self.lock();
            let now = self.now();
            let hashes: Vec<Hash256> = (0..count)
                .map(|_| net.mine_now_at(self.id, now, payout_script.to_vec()))
                .collect();
            (hashes, due(&mut net, now))
        };
        self.publish(outputs);
        self.shared.kick.notify_one();
        hashes
    }

    /// Lists `notifications` in this node's `getzmqnotifications` until the registration is
    /// dropped: a publisher registers what it serves when it starts serving, so the RPC
    /// endpoint needs no wiring to know the ZMQ one.
    pub fn register_zmq(&self, notifications: Vec<ZmqNotification>) -> ZmqRegistration {
        let id = self
            .shared
            .next_registration
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut zmq = self.outlet().zmq.lock().unwrap_or_else(|p| p.into_inner());
        zmq.push((id, notifications));
        ZmqRegistration {
            shared: self.shared.clone(),
            node: self.id,
            id,
        }
    }

    /// The ZMQ notifications served for this node, grouped by topic in bitcoind's order
    /// (its notifiers are made from a map sorted by option name), in registration order within
    /// a topic.
    pub fn zmq_notifications(&self) -> Vec<ZmqNotification> {
        let zmq = self.outlet().zmq.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<ZmqNotification> =
            zmq.iter().flat_map(|(_, n)| n.iter().cloned()).collect();
        all.sort_by(|a, b| a.kind.cmp(&b.kind));
        all
    }

    /// Every update of this node from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Update> {
        self.outlet().updates.subscribe()
    }

    /// Every mempool change and tip change of this node from now on. The first call turns
    /// the node's mempool events on; they stay on.
    pub fn subscribe_txs(&self) -> broadcast::Receiver<TxUpdate> {
        // Subscribed first, so that no event recorded from here on is missed.
        let rx = self.outlet().txs.subscribe();
        self.lock().record_mempool_events(self.id, true);
        rx
    }

    /// This node's current template, and a way to wait for the next.
    pub fn templates(&self) -> watch::Receiver<Arc<Template>> {
        self.outlet().template.subscribe()
    }

    /// The counters so far.
    pub fn stats(&self) -> NodeStats {
        *self
            .outlet()
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Its place in the network's node list.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Its configured name.
    pub fn name(&self) -> &str {
        self.outlet().name.as_str()
    }

    /// What this node's link `link` ("rpc", "zmq", "tdp", "peer") is called in `LinkBytes`
    /// and connection labels: the bare name for a single node, "NAME/link" among several.
    pub fn link_name(&self, link: &str) -> String {
        link_name(self.shared.several, self.name(), link)
    }

    /// The event log, which the endpoints also write to (`LinkBytes`).
    pub fn events(&self) -> &EventSink {
        &self.shared.sink
    }

    /// Advances the network at its deadlines until `stop` resolves, and reports every node's
    /// peer traffic each [`link_bytes::REPORT_EVERY`]. One clock per network: run it from any
    /// one of its nodes.
    pub async fn run_clock(&self, stop: impl std::future::Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let mut report = link_bytes::report_interval();
        loop {
            let (outputs, next) = {
                let mut net = self.lock();
                let outputs = due(&mut net, self.now());
                (outputs, net.poll_timeout())
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
                _ = report.tick() => self.report_peer_bytes(),
                _ = &mut stop => break,
            }
        }
        self.report_peer_bytes();
    }

    /// Emits what every node's peer link carried since the last report.
    fn report_peer_bytes(&self) {
        let (outputs, totals) = {
            let mut net = self.lock();
            let outputs = due(&mut net, self.now());
            let totals: Vec<PeerBytes> =
                net.node_ids().map(|id| net.node(id).peer_bytes()).collect();
            (outputs, totals)
        };
        self.publish(outputs);
        for (o, now) in self.shared.outlets.iter().zip(totals) {
            let mut counted = o.peer_counted.lock().unwrap_or_else(|p| p.into_inner());
            // The counter's read side is reported up: what the node sent toward the network.
            o.peer.add_rx((now.up - counted.up) as usize);
            o.peer.add_tx((now.down - counted.down) as usize);
            *counted = now;
            o.peer.report(&self.shared.sink);
        }
    }

    fn outlet(&self) -> &Outlet {
        &self.shared.outlets[self.id.index()]
    }

    fn lock(&self) -> MutexGuard<'_, Network> {
        // A panic inside the sans-IO core would be a bug; the state it left is still the best
        // we have, so keep serving rather than poisoning every endpoint.
        self.shared.net.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one place outputs leave the network: events, logs, subscribers, the template watch.
    fn publish(&self, outputs: Vec<NodeOutput>) {
        let s = &self.shared;
        for NodeOutput { node, output } in outputs {
            match node {
                Some(id) => s.outlets[id.index()].publish(&s.sink, output),
                // The network's own tip: worth an event only when nodes can lag behind it.
                None if s.several => {
                    if let Output::TipChanged {
                        hash,
                        height,
                        prev_hash,
                        source,
                        ..
                    } = output
                    {
                        tracing::info!(node = NETWORK_NAME, %hash, height, "new tip");
                        s.sink.emit(events::TipChanged {
                            node: ShortStr::new(NETWORK_NAME),
                            hash,
                            height,
                            prev_hash,
                            source: tip_source(source),
                        });
                    }
                }
                None => {}
            }
        }
    }
}

fn link_name(several: bool, node: &str, link: &str) -> String {
    if several {
        format!("{node}/{link}")
    } else {
        link.to_owned()
    }
}

fn tip_source(source: BlockSource) -> events::TipSource {
    match source {
        BlockSource::Submitted => events::TipSource::Submitted,
        BlockSource::Network | BlockSource::Start => events::TipSource::Network,
    }
}

impl Outlet {
    fn publish(&self, sink: &EventSink, out: Output) {
        let name = self.name;
        if let Output::Mempool(e) = out {
            if self.txs.receiver_count() > 0 {
                let _ = self.txs.send(TxUpdate::Mempool(e));
            }
            return;
        }
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        let update = match out {
            Output::Mempool(_) => unreachable!("handled above"),
            Output::TemplateCreated(t) => {
                stats.templates += 1;
                let fingerprint = events::fingerprint(&t.prev_hash, &t.merkle_branch);
                tracing::info!(node = %name.as_str(), id = t.id, height = t.height, txs = t.tx_count(),
                    value_sats = t.coinbase_value, fees_sats = t.total_fees, %fingerprint, "template");
                sink.emit(events::TemplateCreated {
                    node: name,
                    template_id: t.id,
                    height: t.height,
                    prev_hash: t.prev_hash,
                    value_sats: t.coinbase_value,
                    fees_sats: t.total_fees,
                    tx_count: t.tx_count() as u32,
                    fingerprint,
                    future: false,
                });
                self.template.send_replace(t.clone());
                Update::Template(t)
            }
            Output::TipChanged {
                hash,
                height,
                prev_hash,
                source,
                ..
            } => {
                match source {
                    BlockSource::Submitted => stats.submitted_blocks += 1,
                    BlockSource::Network | BlockSource::Start => stats.network_blocks += 1,
                }
                let tip_source = tip_source(source);
                tracing::info!(node = %name.as_str(), %hash, height, source = ?tip_source, "new tip");
                sink.emit(events::TipChanged {
                    node: name,
                    hash,
                    height,
                    prev_hash,
                    source: tip_source,
                });
                if self.txs.receiver_count() > 0 {
                    let _ = self.txs.send(TxUpdate::Tip { hash, prev_hash });
                }
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
                tracing::info!(node = %name.as_str(), ?hash, ?height,
                    verdict = if result.is_ok() { "accepted" } else { reason.as_str() }, "block submitted");
                sink.emit(events::BlockResult {
                    node: name,
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
        let _ = self.updates.send(update);
    }
}

/// Runs what is due on `net` up to `now` and takes everything that happened, in order.
fn due(net: &mut Network, now: Timestamp) -> Vec<NodeOutput> {
    net.handle_timeout(now);
    std::iter::from_fn(|| net.poll_event()).collect()
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
        // At a 30 ms mean, a busy machine can let two blocks land in one clock step: the first
        // tip published is then the second block's.
        assert!(tip > start_height, "tip {tip} after {start_height}");
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
