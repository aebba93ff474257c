//! ZMQ notifications as bitcoind publishes them (`-zmqpubhashblock`, `-zmqpubrawblock`), for
//! pool software that listens for new blocks instead of polling.
//!
//! One PUB socket on a TCP port carries both topics, as when bitcoind is given the same address
//! for both. On every tip change (a block found by the network, mined on request, or
//! submitted) two messages go out, in bitcoind's order:
//!
//! | frame 1 | frame 2 | frame 3 |
//! |---|---|---|
//! | `hashblock` | the 32-byte block hash in display order (reversed from internal order, as bitcoind's `CZMQPublishHashBlockNotifier` writes it) | sequence number, 4 bytes little-endian |
//! | `rawblock` | the serialized block, with witnesses | sequence number, 4 bytes little-endian |
//!
//! Each topic counts its own sequence from 0 when the publisher starts, and counts every
//! message published whether or not anyone receives it, so a subscriber can tell that it
//! missed some. Like bitcoind (`UpdatedBlockTip` notifies `pindexNew` only; doc/zmq.md: "a
//! reorganisation may occur and just the tip will be notified"), a reorganisation publishes
//! only its new tip, not every block of the new branch.
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

use primitives::Hash256;
use tokio::net::TcpListener;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::task::JoinSet;

use crate::link_bytes::{self, LinkCounter};
use crate::node::{Node, Update};
use peer::{Offer, Peers};

pub use peer::PeerError;
pub use zmtp::ZmtpError;

/// bitcoind's topic for block hashes.
pub const TOPIC_HASHBLOCK: &[u8] = b"hashblock";
/// bitcoind's topic for serialized blocks.
pub const TOPIC_RAWBLOCK: &[u8] = b"rawblock";
/// Every topic published, in the order a tip change publishes them (bitcoind runs its
/// notifiers in the order of their option names).
pub const TOPICS: [&[u8]; 2] = [TOPIC_HASHBLOCK, TOPIC_RAWBLOCK];

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
}

impl Default for ZmqConfig {
    fn default() -> Self {
        ZmqConfig {
            high_water_mark: 1000,
            max_queued_bytes: 256 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(30),
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

/// A ZMQ publisher for one node.
pub struct Publisher {
    node: Node,
    config: Arc<ZmqConfig>,
    updates: broadcast::Receiver<Update>,
    stats: ZmqStats,
    sequence: [u32; TOPICS.len()],
    last_tip: Option<Hash256>,
}

impl Publisher {
    /// Subscribes to the node's updates now: every tip change from here on is published once
    /// [`Publisher::serve`] runs, even one that happens before it is first polled.
    pub fn new(node: Node, config: ZmqConfig) -> Publisher {
        let link = node.link_name("zmq");
        Publisher {
            updates: node.subscribe(),
            node,
            config: Arc::new(config),
            stats: ZmqStats {
                peers: Arc::default(),
                counters: Arc::default(),
                bytes: LinkCounter::new(&link),
            },
            sequence: [0; TOPICS.len()],
            last_tip: None,
        }
    }

    pub fn stats(&self) -> ZmqStats {
        self.stats.clone()
    }

    /// Accepts subscribers on `listener` and publishes tip changes until `shutdown` resolves;
    /// then every connection is closed. Nothing stops it earlier: errors end one connection,
    /// never the publisher.
    pub async fn serve(mut self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        // Dropping the set aborts every connection task.
        let mut connections = JoinSet::new();
        let sink = self.node.events().clone();
        let mut report = link_bytes::report_interval();
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                _ = report.tick() => self.stats.bytes.report(&sink),
                update = self.updates.recv() => match update {
                    Ok(Update::Tip { hash, .. }) => self.publish_tip(hash),
                    Ok(_) => {}
                    Err(RecvError::Lagged(missed)) => {
                        // Only if this task was starved for a thousand updates; publish the
                        // tip as it is now rather than nothing.
                        tracing::warn!(missed, "zmq publisher fell behind the node's updates");
                        let tip = self.node.read(|net| net.tip().hash);
                        if self.last_tip != Some(tip) {
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

    fn publish_tip(&mut self, hash: Hash256) {
        self.last_tip = Some(hash);
        let mut display = hash.to_byte_array();
        display.reverse();
        self.publish(0, &display);
        // Serializing a block is not free: only when someone will receive it. The sequence
        // number counts the message all the same, as bitcoind's does with nobody listening.
        if self.stats.subscribers(TOPIC_RAWBLOCK) == 0 {
            self.next_sequence(1);
            self.stats
                .counters
                .published
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Blocks are never forgotten, so the lookup only fails on a bug; publish nothing then.
        match self.node.read(|net| net.block(&hash).cloned()) {
            Some(block) => self.publish(1, &block.serialize()),
            None => tracing::error!(%hash, "zmq: tip block not found"),
        }
    }

    fn next_sequence(&mut self, topic: usize) -> u32 {
        let seq = self.sequence[topic];
        self.sequence[topic] = seq.wrapping_add(1);
        seq
    }

    fn publish(&mut self, topic: usize, body: &[u8]) {
        let seq = self.next_sequence(topic);
        let name = TOPICS[topic];
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
        tracing::debug!(topic = %String::from_utf8_lossy(name), seq, receivers, "zmq publish");
    }
}

/// Publishes `node`'s tip changes on `listener` with the default limits until `shutdown`.
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
