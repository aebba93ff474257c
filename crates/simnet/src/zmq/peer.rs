//! One subscriber connection: its subscriptions, its bounded outgoing queue, and the task that
//! runs the ZMTP handshake, reads subscriptions and writes queued messages.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::zmtp::{self, Decoder, Event, ZmtpError};
use super::{ZmqConfig, TOPICS};
use crate::link_bytes::{Counted, LinkCounter};

/// Why a connection ended other than by the peer closing it.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error(transparent)]
    /// Reading or writing the socket failed.
    Io(#[from] io::Error),
    #[error(transparent)]
    /// The peer broke ZMTP.
    Protocol(#[from] ZmtpError),
    #[error("no ZMTP handshake within {0:?}")]
    /// The peer did not finish the handshake in time.
    HandshakeTimeout(std::time::Duration),
}

/// Prefix subscriptions with reference counts: as in libzmq, subscribing twice takes two
/// cancels. Only prefixes of a topic we publish are kept, since no other can ever match; so
/// the table stays tiny whatever a peer sends.
#[derive(Debug, Default)]
pub(super) struct Subscriptions {
    counts: Vec<(Vec<u8>, u32)>,
}

impl Subscriptions {
    pub(super) fn subscribe(&mut self, prefix: Vec<u8>) {
        if !TOPICS.iter().any(|t| t.starts_with(&prefix)) {
            return;
        }
        match self.counts.iter_mut().find(|(p, _)| *p == prefix) {
            Some((_, n)) => *n = n.saturating_add(1),
            None => self.counts.push((prefix, 1)),
        }
    }

    pub(super) fn cancel(&mut self, prefix: &[u8]) {
        if let Some(i) = self.counts.iter().position(|(p, _)| p == prefix) {
            self.counts[i].1 -= 1;
            if self.counts[i].1 == 0 {
                self.counts.swap_remove(i);
            }
        }
    }

    pub(super) fn matches(&self, topic: &[u8]) -> bool {
        self.counts.iter().any(|(p, _)| topic.starts_with(p))
    }
}

/// Encoded messages waiting for the socket. Bounded like a ZMQ pipe at its high-water mark:
/// a message that does not fit is dropped for this subscriber alone, whole.
#[derive(Default)]
struct Outbox {
    queue: VecDeque<Arc<[u8]>>,
    bytes: usize,
    /// Dropping since the queue was last drained: the first drop of a run is logged.
    dropping: bool,
}

pub(super) struct Peer {
    pub(super) id: u64,
    pub(super) addr: SocketAddr,
    subs: Mutex<Subscriptions>,
    outbox: Mutex<Outbox>,
    wake: Notify,
    dropped: AtomicU64,
}

/// What became of a published message for one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Offer {
    NotSubscribed,
    Queued,
    Dropped,
}

impl Peer {
    pub(super) fn new(id: u64, addr: SocketAddr) -> Peer {
        Peer {
            id,
            addr,
            subs: Mutex::new(Subscriptions::default()),
            outbox: Mutex::new(Outbox::default()),
            wake: Notify::new(),
            dropped: AtomicU64::new(0),
        }
    }

    pub(super) fn subscriptions(&self) -> MutexGuard<'_, Subscriptions> {
        self.subs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Queues `msg` if the peer subscribes to a prefix of `topic` and its queue has room.
    pub(super) fn offer(&self, topic: &[u8], msg: &Arc<[u8]>, config: &ZmqConfig) -> Offer {
        if !self.subscriptions().matches(topic) {
            return Offer::NotSubscribed;
        }
        if self.push(msg.clone(), config) {
            Offer::Queued
        } else {
            Offer::Dropped
        }
    }

    /// Queues `msg` within the limits (zero: none); returns whether it was queued.
    fn push(&self, msg: Arc<[u8]>, config: &ZmqConfig) -> bool {
        let mut out = self.outbox();
        let full_count = config.high_water_mark != 0 && out.queue.len() >= config.high_water_mark;
        // A message larger than the byte limit still goes out when nothing else is waiting,
        // or a big block could never be delivered at all.
        let full_bytes = config.max_queued_bytes != 0
            && !out.queue.is_empty()
            && out.bytes + msg.len() > config.max_queued_bytes;
        if full_count || full_bytes {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            if !out.dropping {
                out.dropping = true;
                tracing::warn!(peer = %self.addr, queued = out.queue.len(), bytes = out.bytes,
                    "zmq subscriber not keeping up: dropping messages for it until its queue drains");
            }
            return false;
        }
        out.bytes += msg.len();
        out.queue.push_back(msg);
        drop(out);
        self.wake.notify_one();
        true
    }

    /// Queues handshake bytes, which no limit applies to (they come once, before any message).
    fn push_control(&self, msg: &[u8]) {
        let mut out = self.outbox();
        out.bytes += msg.len();
        out.queue.push_back(Arc::from(msg));
        drop(out);
        self.wake.notify_one();
    }

    fn pop(&self) -> Option<Arc<[u8]>> {
        let mut out = self.outbox();
        let msg = out.queue.pop_front()?;
        out.bytes -= msg.len();
        if out.queue.is_empty() {
            out.dropping = false;
        }
        Some(msg)
    }
}

/// The peers that completed the handshake, which published messages go to.
#[derive(Default)]
pub(super) struct Peers {
    map: Mutex<HashMap<u64, Arc<Peer>>>,
    next_id: AtomicU64,
}

impl Peers {
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<Peer>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// Removes the peer from the published-to set however its task ends (aborted included).
struct Registration<'a> {
    peers: &'a Peers,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.peers.lock().remove(&self.id);
    }
}

/// Serves one accepted connection until the peer leaves, misbehaves, or the task is aborted.
pub(super) async fn run(
    stream: TcpStream,
    addr: SocketAddr,
    peers: Arc<Peers>,
    config: Arc<ZmqConfig>,
    bytes: Arc<LinkCounter>,
) {
    let peer = Arc::new(Peer::new(peers.next_id(), addr));
    let _registration = Registration {
        peers: &peers,
        id: peer.id,
    };
    // Latency over batching, as libzmq sets TCP_NODELAY; keepalive, as bitcoind enables
    // ZMQ_TCP_KEEPALIVE, so a subscriber whose host vanished is eventually noticed.
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(&stream).set_keepalive(true);
    let (reader, writer) = stream.into_split();
    let (reader, writer) = (
        Counted::new(reader, bytes.clone()),
        Counted::new(writer, bytes),
    );
    peer.push_control(&zmtp::encode_greeting());
    let result = tokio::select! {
        r = read_loop(reader, &peer, &peers, &config) => r,
        r = write_loop(writer, &peer) => r,
    };
    match result {
        Ok(()) => {
            tracing::debug!(peer = %addr, dropped = peer.dropped(), "zmq subscriber disconnected")
        }
        Err(e) => {
            tracing::debug!(peer = %addr, error = %e, dropped = peer.dropped(), "zmq connection closed")
        }
    }
}

async fn read_loop(
    mut reader: Counted<OwnedReadHalf>,
    peer: &Arc<Peer>,
    peers: &Peers,
    config: &ZmqConfig,
) -> Result<(), PeerError> {
    let deadline = Instant::now() + config.handshake_timeout;
    let mut decoder = Decoder::new();
    let mut buf = vec![0u8; 8 * 1024];
    let mut events = Vec::new();
    loop {
        let n = if decoder.is_ready() {
            reader.read(&mut buf).await?
        } else {
            // A peer that connects and says nothing is not kept forever (libzmq's
            // ZMQ_HANDSHAKE_IVL).
            tokio::time::timeout_at(deadline, reader.read(&mut buf))
                .await
                .map_err(|_| PeerError::HandshakeTimeout(config.handshake_timeout))??
        };
        if n == 0 {
            return Ok(());
        }
        // Events before an error are still acted on; the error then closes the connection.
        let result = decoder.feed(&buf[..n], &mut events);
        for event in events.drain(..) {
            match event {
                Event::Greeting => peer.push_control(&zmtp::encode_ready()),
                Event::Ready => {
                    tracing::debug!(peer = %peer.addr, "zmq subscriber connected");
                    peers.lock().insert(peer.id, peer.clone());
                }
                Event::Subscribe(prefix) => peer.subscriptions().subscribe(prefix),
                Event::Cancel(prefix) => peer.subscriptions().cancel(&prefix),
                Event::Ping(context) => {
                    // Under the same limits as messages: a peer that pings without reading
                    // cannot grow its queue.
                    peer.push(Arc::from(zmtp::encode_pong(&context)), config);
                }
            }
        }
        result?;
    }
}

async fn write_loop(mut writer: Counted<OwnedWriteHalf>, peer: &Peer) -> Result<(), PeerError> {
    loop {
        match peer.pop() {
            Some(msg) => writer.write_all(&msg).await?,
            // A notification between the failed pop and this await is kept as a permit.
            None => peer.wake.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_count_and_keep_only_our_prefixes() {
        let mut s = Subscriptions::default();
        s.subscribe(b"hash".to_vec());
        s.subscribe(b"hash".to_vec());
        s.subscribe(b"hashfoo".to_vec()); // never published: not kept
        assert!(s.matches(b"hashblock") && s.matches(b"hashtx") && !s.matches(b"rawblock"));
        assert_eq!(s.counts.len(), 1);
        s.cancel(b"hash");
        assert!(s.matches(b"hashblock"));
        s.cancel(b"hash");
        assert!(!s.matches(b"hashblock"));
        s.cancel(b"hash"); // one cancel too many is harmless
        s.subscribe(Vec::new());
        assert!(s.matches(b"rawblock") && s.matches(b"hashblock"));
        assert_eq!(s.counts.len(), 1);
    }

    #[test]
    fn outbox_drops_whole_messages_past_its_limits() {
        let peer = Peer::new(0, "127.0.0.1:1".parse().unwrap());
        peer.subscriptions().subscribe(Vec::new());
        let config = ZmqConfig {
            high_water_mark: 2,
            max_queued_bytes: 100,
            ..ZmqConfig::default()
        };
        let big: Arc<[u8]> = Arc::from(vec![0u8; 500]);
        let small: Arc<[u8]> = Arc::from(vec![0u8; 10]);
        // An oversized message goes out when the queue is empty...
        assert_eq!(peer.offer(b"rawblock", &big, &config), Offer::Queued);
        // ...but nothing joins it past the byte limit.
        assert_eq!(peer.offer(b"hashblock", &small, &config), Offer::Dropped);
        assert_eq!(peer.pop().map(|m| m.len()), Some(500));
        assert_eq!(peer.offer(b"hashblock", &small, &config), Offer::Queued);
        assert_eq!(peer.offer(b"hashblock", &small, &config), Offer::Queued);
        // Message count limit.
        assert_eq!(peer.offer(b"hashblock", &small, &config), Offer::Dropped);
        assert_eq!(peer.dropped(), 2);
        peer.subscriptions().cancel(b"");
        assert_eq!(
            peer.offer(b"hashblock", &small, &config),
            Offer::NotSubscribed
        );
    }
}
