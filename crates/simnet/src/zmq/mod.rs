//! ZMQ notifications as bitcoind publishes them (`-zmqpubhashblock`, `-zmqpubhashtx`,
//! `-zmqpubrawblock`, `-zmqpubrawtx`, `-zmqpubsequence`), for pool software that listens for
//! new blocks and transactions instead of polling.
//!
//! One PUB socket on a TCP port carries every topic the publisher is told to serve
//! ([`ZmqConfig::topics`], all five by default), as when bitcoind is given the same address for
//! each. Every message has three frames: the topic, the body, and a sequence number (4 bytes,
//! little-endian) that each topic counts on its own from 0 when the publisher starts:
//!
//! | topic | body |
//! |---|---|
//! | `hashblock` | the 32-byte block hash in display order (reversed from internal order, as bitcoind's notifiers write hashes) |
//! | `rawblock` | the serialized block, with witnesses |
//! | `hashtx` | the 32-byte txid in display order |
//! | `rawtx` | the serialized transaction, with witnesses |
//! | `sequence` | a 32-byte hash in display order, a label, and for `A` and `R` the 8-byte little-endian mempool sequence: `<txid>A<seq>` a transaction entered the mempool, `<txid>R<seq>` it left other than in a block (evicted), `<blockhash>C` a block was connected, `<blockhash>D` disconnected |
//!
//! In bitcoind's order: a transaction entering the mempool publishes `hashtx`, `rawtx`, then
//! `sequence` `A`. A tip change publishes, for each block it disconnects (newest first), the
//! block's transactions on `hashtx` and `rawtx` and then `sequence` `D`; for each block it
//! connects (oldest first), the block's transactions (coinbase first) on `hashtx` and `rawtx`
//! and then `sequence` `C`; and last `hashblock` and `rawblock` for the new tip only (bitcoind's
//! `UpdatedBlockTip` notifies `pindexNew` only; doc/zmq.md: "a reorganisation may occur and
//! just the tip will be notified"). Transactions a block takes out of the mempool get no `R`:
//! bitcoind reports the block instead, though each removal still moves the mempool sequence
//! on.
//!
//! A message is encoded only when some subscriber's subscriptions match its topic, and the
//! transaction topics' feed ([`Node::subscribe_txs`]) is only asked for when the publisher
//! serves one of them: simnet makes several transactions a second and blocks of thousands. A
//! message nobody receives still counts in its topic's sequence, as bitcoind's does with
//! nobody listening, so a subscriber can tell that it missed some.
//!
//! While it serves, the publisher lists what it publishes in its node's
//! `getzmqnotifications` ([`Node::register_zmq`]), with the address it is bound to.
//!
//! The socket speaks ZMTP 3.1 with the NULL mechanism, so any ZeroMQ SUB socket (libzmq, pyzmq,
//! zmq.rs, ...) can subscribe; the protocol is implemented here ([`zmtp`]) rather than taken
//! from a crate because the PUB side must never wait for a subscriber. As in ZMQ, each
//! subscriber has its own bounded queue (the high-water mark, bitcoind's default 1000 messages,
//! plus a byte bound since `rawblock` messages are megabytes): a subscriber that does not read
//! loses messages once its queue is full, and nobody else notices. A peer that sends garbage
//! or fails the handshake is disconnected alone.

mod peer;
pub mod zmtp;

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use primitives::bitcoin::consensus::serialize;
use primitives::Hash256;
use tokio::net::TcpListener;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::task::JoinSet;

use crate::chain::{Chain, StoredBlock};
use crate::link_bytes::{self, LinkCounter};
use crate::mempool::MempoolEvent;
use crate::node::{Node, TxUpdate, Update, ZmqNotification};
use peer::{Offer, Peers};

pub use peer::PeerError;
pub use zmtp::ZmtpError;

/// bitcoind's topic for block hashes.
pub const TOPIC_HASHBLOCK: &[u8] = b"hashblock";
/// bitcoind's topic for transaction ids.
pub const TOPIC_HASHTX: &[u8] = b"hashtx";
/// bitcoind's topic for serialized blocks.
pub const TOPIC_RAWBLOCK: &[u8] = b"rawblock";
/// bitcoind's topic for serialized transactions.
pub const TOPIC_RAWTX: &[u8] = b"rawtx";
/// bitcoind's topic for block connects and disconnects and mempool entries and removals.
pub const TOPIC_SEQUENCE: &[u8] = b"sequence";
/// Every topic simnet can publish, in bitcoind's notifier order (its notifiers are made from a
/// map sorted by option name).
pub const TOPICS: [&[u8]; 5] = [
    TOPIC_HASHBLOCK,
    TOPIC_HASHTX,
    TOPIC_RAWBLOCK,
    TOPIC_RAWTX,
    TOPIC_SEQUENCE,
];

/// One of bitcoind's ZMQ topics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Topic {
    /// `hashblock`: the tip's hash on every tip change.
    HashBlock,
    /// `hashtx`: the txid of every transaction entering the mempool, and of those in every block
    /// connected or disconnected.
    HashTx,
    /// `rawblock`: the serialized tip block on every tip change.
    RawBlock,
    /// `rawtx`: the serialized transaction, whenever `hashtx` sends its txid.
    RawTx,
    /// `sequence`: block connections and disconnections, mempool entries and removals, with
    /// mempool sequence numbers.
    Sequence,
}

impl Topic {
    /// All of them, in [`TOPICS`] order.
    pub const ALL: [Topic; 5] = [
        Topic::HashBlock,
        Topic::HashTx,
        Topic::RawBlock,
        Topic::RawTx,
        Topic::Sequence,
    ];

    /// The topic frame.
    pub fn name(self) -> &'static [u8] {
        TOPICS[self as usize]
    }

    /// bitcoind's option name without `-zmq`: what `getzmqnotifications` calls it.
    pub fn notification(self) -> &'static str {
        match self {
            Topic::HashBlock => "pubhashblock",
            Topic::HashTx => "pubhashtx",
            Topic::RawBlock => "pubrawblock",
            Topic::RawTx => "pubrawtx",
            Topic::Sequence => "pubsequence",
        }
    }

    /// The topic whose notification is `name` ("pubhashtx"), or whose frame is ("hashtx").
    pub fn parse(name: &str) -> Option<Topic> {
        let bare = name.strip_prefix("pub").unwrap_or(name);
        Topic::ALL.into_iter().find(|t| t.name() == bare.as_bytes())
    }

    /// Whether it follows the mempool (and so needs the node's transaction feed).
    pub fn follows_transactions(self) -> bool {
        matches!(self, Topic::HashTx | Topic::RawTx | Topic::Sequence)
    }
}

/// Limits of the publisher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZmqConfig {
    /// Messages queued for one subscriber before further ones are dropped for it: ZMQ's
    /// `ZMQ_SNDHWM`, which bitcoind sets from `-zmqpub<topic>hwm`, default 1000. Zero: no limit.
    pub high_water_mark: usize,
    /// Bytes queued for one subscriber before further messages are dropped for it (one message
    /// is always let through to an empty queue). Not a ZMQ option: 1000 `rawblock` messages
    /// can be gigabytes, so this keeps a stalled subscriber from holding that much. Zero: no
    /// limit.
    pub max_queued_bytes: usize,
    /// How long a connection may take to complete the ZMTP handshake: libzmq's
    /// `ZMQ_HANDSHAKE_IVL`, default 30 s.
    pub handshake_timeout: Duration,
    /// The topics published (each `-zmqpub<topic>` given this address): all of them by
    /// default.
    pub topics: Vec<Topic>,
}

impl Default for ZmqConfig {
    fn default() -> Self {
        ZmqConfig {
            high_water_mark: 1000,
            max_queued_bytes: 256 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(30),
            topics: Topic::ALL.to_vec(),
        }
    }
}

/// What a running publisher has done, readable while it runs.
#[derive(Clone)]
pub struct ZmqStats {
    peers: Arc<Peers>,
    counters: Arc<Counters>,
    bytes: Arc<LinkCounter>,
}

#[derive(Default)]
struct Counters {
    published: AtomicU64,
    dropped: AtomicU64,
}

impl ZmqStats {
    /// Connected subscribers that completed the handshake.
    pub fn connections(&self) -> usize {
        self.peers.lock().len()
    }

    /// Connected subscribers whose subscriptions match `topic`.
    pub fn subscribers(&self, topic: &[u8]) -> usize {
        self.peers
            .lock()
            .values()
            .filter(|p| p.subscriptions().matches(topic))
            .count()
    }

    /// Messages published (each counted once, however many subscribers got it).
    pub fn published(&self) -> u64 {
        self.counters.published.load(Ordering::Relaxed)
    }

    /// Bytes (read from, written to) subscribers' sockets, handshakes included.
    pub fn net_bytes(&self) -> (u64, u64) {
        self.bytes.totals()
    }

    /// Messages dropped for subscribers whose queues were full (counted per subscriber).
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }
}

/// Where the publisher hears about the node: tips only, or tips in order with the mempool's
/// changes when it serves a transaction topic.
enum Feed {
    Blocks(broadcast::Receiver<Update>),
    Txs(broadcast::Receiver<TxUpdate>),
}

/// What the feed said.
enum Heard {
    Tip(Hash256),
    Mempool(MempoolEvent),
    Nothing,
}

impl Feed {
    async fn recv(&mut self) -> Result<Heard, RecvError> {
        match self {
            Feed::Blocks(rx) => rx.recv().await.map(|u| match u {
                Update::Tip { hash, .. } => Heard::Tip(hash),
                _ => Heard::Nothing,
            }),
            Feed::Txs(rx) => rx.recv().await.map(|u| match u {
                TxUpdate::Tip { hash, .. } => Heard::Tip(hash),
                TxUpdate::Mempool(e) => Heard::Mempool(e),
            }),
        }
    }
}

/// Most blocks a tip change is followed back through to report its disconnects and connects;
/// past that (a reorganisation no simulation makes) only the new tip is reported.
const MAX_PATH: usize = 1000;

/// A ZMQ publisher for one node.
pub struct Publisher {
    node: Node,
    config: Arc<ZmqConfig>,
    /// Which of [`Topic::ALL`] are published.
    enabled: [bool; TOPICS.len()],
    feed: Feed,
    stats: ZmqStats,
    sequence: [u32; TOPICS.len()],
    /// The tip last reported, which the next tip change is followed back to.
    last_tip: Hash256,
}

impl Publisher {
    /// Subscribes to the node's updates now: every change from here on is published once
    /// [`Publisher::serve`] runs, even one that happens before it is first polled.
    pub fn new(node: Node, config: ZmqConfig) -> Publisher {
        let link = node.link_name("zmq");
        let enabled = Topic::ALL.map(|t| config.topics.contains(&t));
        let feed = if config.topics.iter().any(|t| t.follows_transactions()) {
            Feed::Txs(node.subscribe_txs())
        } else {
            Feed::Blocks(node.subscribe())
        };
        let last_tip = node.read(|n| n.tip().hash);
        Publisher {
            feed,
            node,
            config: Arc::new(config),
            enabled,
            stats: ZmqStats {
                peers: Arc::default(),
                counters: Arc::default(),
                bytes: LinkCounter::new(&link),
            },
            sequence: [0; TOPICS.len()],
            last_tip,
        }
    }

    /// What it has sent so far.
    pub fn stats(&self) -> ZmqStats {
        self.stats.clone()
    }

    /// The notifications this publisher serves on `address`, as `getzmqnotifications` lists
    /// them.
    fn notifications(&self, address: std::net::SocketAddr) -> Vec<ZmqNotification> {
        Topic::ALL
            .into_iter()
            .filter(|t| self.enabled[*t as usize])
            .map(|t| ZmqNotification {
                kind: t.notification().to_owned(),
                address: format!("tcp://{address}"),
                hwm: self.config.high_water_mark as u64,
            })
            .collect()
    }

    /// Accepts subscribers on `listener` and publishes the node's changes until `shutdown`
    /// resolves; then every connection is closed. Nothing stops it earlier: errors end one
    /// connection, never the publisher.
    pub async fn serve(mut self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        // Listed in getzmqnotifications while this runs.
        let _registration = listener
            .local_addr()
            .ok()
            .map(|a| self.node.register_zmq(self.notifications(a)));
        // Dropping the set aborts every connection task.
        let mut connections = JoinSet::new();
        let sink = self.node.events().clone();
        let mut report = link_bytes::report_interval();
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                _ = report.tick() => self.stats.bytes.report(&sink),
                heard = self.feed.recv() => match heard {
                    Ok(Heard::Tip(hash)) => self.publish_tip(hash),
                    Ok(Heard::Mempool(e)) => self.publish_mempool(&e),
                    Ok(Heard::Nothing) => {}
                    Err(RecvError::Lagged(missed)) => {
                        // Only if this task was starved for a long while; publish the tip as
                        // it is now rather than nothing (the missed mempool changes are gone:
                        // subscribers see the gap in the sequence numbers).
                        tracing::warn!(missed, "zmq publisher fell behind the node's updates");
                        let tip = self.node.read(|net| net.tip().hash);
                        if self.last_tip != tip {
                            self.publish_tip(tip);
                        }
                    }
                    // The node is gone (we hold a handle, so this cannot happen): nothing
                    // more will be published.
                    Err(RecvError::Closed) => break,
                },
                accepted = listener.accept() => match accepted {
                    Ok((stream, addr)) => {
                        connections.spawn(peer::run(
                            stream,
                            addr,
                            self.stats.peers.clone(),
                            self.config.clone(),
                            self.stats.bytes.clone(),
                        ));
                    }
                    Err(e) => accept_error(e).await,
                },
                // Reap finished connections so the set does not grow.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        connections.shutdown().await;
        self.stats.bytes.report(&sink);
    }

    /// Which topics are published and have a subscriber now (one look at the peer table for
    /// a whole batch of messages).
    fn live(&self) -> [bool; TOPICS.len()] {
        let peers = self.stats.peers.lock();
        Topic::ALL.map(|t| {
            self.enabled[t as usize] && peers.values().any(|p| p.subscriptions().matches(t.name()))
        })
    }

    fn publish_mempool(&mut self, e: &MempoolEvent) {
        let live = self.live();
        match e {
            MempoolEvent::Added { entry, sequence } => {
                let txid = display(entry.txid);
                self.publish_if(&live, Topic::HashTx, || txid.to_vec());
                self.publish_if(&live, Topic::RawTx, || entry.raw.to_vec());
                self.publish_if(&live, Topic::Sequence, || {
                    sequence_body(&txid, b'A', Some(*sequence))
                });
            }
            MempoolEvent::Removed { entry, sequence } => {
                let txid = display(entry.txid);
                self.publish_if(&live, Topic::Sequence, || {
                    sequence_body(&txid, b'R', Some(*sequence))
                });
            }
        }
    }

    /// The tip moved to `hash`: the blocks it disconnected and connected since the last tip
    /// (transaction topics), then the new tip (block topics).
    fn publish_tip(&mut self, hash: Hash256) {
        let old = std::mem::replace(&mut self.last_tip, hash);
        let live = self.live();
        let follow = Topic::ALL
            .iter()
            .any(|t| t.follows_transactions() && self.enabled[*t as usize]);
        let (gone, came, tip) = self.node.read(|n| {
            let chain = n.chain();
            let (gone, came) = if follow {
                path(chain, &old, &hash).unwrap_or_else(|| {
                    (
                        Vec::new(),
                        chain.block(&hash).cloned().into_iter().collect(),
                    )
                })
            } else {
                Default::default()
            };
            (gone, came, chain.block(&hash).cloned())
        });
        for (blocks, label) in [(gone, b'D'), (came, b'C')] {
            for b in blocks {
                self.publish_block_txs(&live, &b);
                let h = display(b.hash);
                self.publish_if(&live, Topic::Sequence, || sequence_body(&h, label, None));
            }
        }
        let h = display(hash);
        self.publish_if(&live, Topic::HashBlock, || h.to_vec());
        // Blocks are never forgotten, so the lookup only fails on a bug; publish no block then.
        match tip {
            Some(block) => self.publish_if(&live, Topic::RawBlock, || block.serialize()),
            None => tracing::error!(%hash, "zmq: tip block not found"),
        }
    }

    /// A block's transactions on `hashtx` and `rawtx`, coinbase first, as bitcoind's
    /// `BlockConnected` and `BlockDisconnected` notify them.
    fn publish_block_txs(&mut self, live: &[bool; TOPICS.len()], b: &StoredBlock) {
        if !(self.enabled[Topic::HashTx as usize] || self.enabled[Topic::RawTx as usize]) {
            return;
        }
        if !(live[Topic::HashTx as usize] || live[Topic::RawTx as usize]) {
            // Counted, not built.
            for _ in 0..b.tx_count() {
                self.publish_if(live, Topic::HashTx, Vec::new);
                self.publish_if(live, Topic::RawTx, Vec::new);
            }
            return;
        }
        let coinbase_txid: Hash256 = b.coinbase.compute_txid().into();
        self.publish_if(live, Topic::HashTx, || display(coinbase_txid).to_vec());
        self.publish_if(live, Topic::RawTx, || serialize(&b.coinbase));
        for e in &b.txs {
            self.publish_if(live, Topic::HashTx, || display(e.txid).to_vec());
            self.publish_if(live, Topic::RawTx, || e.raw.to_vec());
        }
    }

    fn next_sequence(&mut self, topic: Topic) -> u32 {
        let seq = self.sequence[topic as usize];
        self.sequence[topic as usize] = seq.wrapping_add(1);
        seq
    }

    /// Publishes `topic` if this publisher serves it; builds the body only if someone will
    /// receive it (`live`), and counts the message in its sequence either way.
    fn publish_if(
        &mut self,
        live: &[bool; TOPICS.len()],
        topic: Topic,
        body: impl FnOnce() -> Vec<u8>,
    ) {
        if !self.enabled[topic as usize] {
            return;
        }
        if live[topic as usize] {
            self.publish(topic, &body());
        } else {
            self.next_sequence(topic);
            self.stats
                .counters
                .published
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    fn publish(&mut self, topic: Topic, body: &[u8]) {
        let seq = self.next_sequence(topic);
        let name = topic.name();
        // Encoded once and shared by every subscriber's queue.
        let msg: Arc<[u8]> = Arc::from(zmtp::encode_message(&[name, body, &seq.to_le_bytes()]));
        let peers: Vec<_> = self.stats.peers.lock().values().cloned().collect();
        let mut receivers = 0;
        for p in peers {
            match p.offer(name, &msg, &self.config) {
                Offer::Queued => receivers += 1,
                Offer::Dropped => {
                    self.stats.counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Offer::NotSubscribed => {}
            }
        }
        self.stats
            .counters
            .published
            .fetch_add(1, Ordering::Relaxed);
        tracing::trace!(topic = %String::from_utf8_lossy(name), seq, receivers, "zmq publish");
    }
}

/// A hash as bitcoind's notifiers write it: reversed from internal order.
fn display(hash: Hash256) -> [u8; 32] {
    let mut b = hash.to_byte_array();
    b.reverse();
    b
}

/// A `sequence` message body: hash, label, and for mempool events the mempool sequence.
fn sequence_body(hash: &[u8; 32], label: u8, mempool_sequence: Option<u64>) -> Vec<u8> {
    let mut body = Vec::with_capacity(41);
    body.extend_from_slice(hash);
    body.push(label);
    if let Some(s) = mempool_sequence {
        body.extend_from_slice(&s.to_le_bytes());
    }
    body
}

/// The blocks a tip change from `old` to `new` disconnected (newest first) and connected
/// (oldest first); `None` when either is unknown or the fork is further back than
/// [`MAX_PATH`] blocks.
#[allow(clippy::type_complexity)]
fn path(
    chain: &Chain,
    old: &Hash256,
    new: &Hash256,
) -> Option<(Vec<Arc<StoredBlock>>, Vec<Arc<StoredBlock>>)> {
    let mut a = chain.block(old)?;
    let mut b = chain.block(new)?;
    let (mut gone, mut came) = (Vec::new(), Vec::new());
    while a.hash != b.hash {
        if gone.len() + came.len() > MAX_PATH {
            return None;
        }
        if a.height >= b.height {
            gone.push(a.clone());
            a = chain.block(&a.header.prev_hash)?;
        } else {
            came.push(b.clone());
            b = chain.block(&b.header.prev_hash)?;
        }
    }
    came.reverse();
    Some((gone, came))
}

/// Publishes `node`'s changes on every topic on `listener`, with the default limits, until
/// `shutdown`.
pub async fn serve(node: Node, listener: TcpListener, shutdown: impl Future<Output = ()>) {
    Publisher::new(node, ZmqConfig::default())
        .serve(listener, shutdown)
        .await
}

/// Waits out an accept error. Errors about one connection (it was reset before we took it) are
/// skipped; anything else (out of file descriptors or memory) passes as connections close, so
/// accepting resumes after a pause rather than the publisher giving up. A listener that was
/// bound cannot fail for good in any other way.
async fn accept_error(e: io::Error) {
    use io::ErrorKind::*;
    if !matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
    ) {
        tracing::warn!(error = %e, "zmq: cannot accept connections for now");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
