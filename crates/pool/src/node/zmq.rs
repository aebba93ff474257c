//! A SUB socket on the node's `-zmqpubhashblock` endpoint: each message names a new tip.
//!
//! bitcoind's message has three frames: `hashblock`, the 32-byte block hash in display order
//! (reversed from internal order), and a 4-byte little-endian sequence number that counts
//! every message of the topic, so a gap shows messages missed.
//!
//! The `zeromq` crate reconnects a lost connection by itself, but its backoff grows to 30 s
//! and cannot be set; so this task watches the socket's monitor and, when the connection
//! drops, starts over with a fresh socket on our own capped backoff. ZMQ has no
//! acknowledgement of a subscription: a tip published while the connection is being set up is
//! missed, so the feed fetches a template whenever the connection (re)opens.

use std::str::FromStr;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use primitives::Hash256;
use tokio::sync::mpsc;
use zeromq::{Endpoint, Socket, SocketEvent, SocketRecv, SubSocket, ZmqMessage};

use super::backoff::Backoff;

const TOPIC: &str = "hashblock";

/// A connection that lasted this long, or delivered a message, resets the backoff.
const HEALTHY_CONNECTION: Duration = Duration::from_secs(5);

/// What the subscriber tells the feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ZmqEvent {
    Connected,
    Disconnected,
    /// A new tip, in internal byte order.
    HashBlock(Hash256),
}

/// `tcp://host:port`, or `host:port` taken as TCP; checked so a typo fails at start.
pub(crate) fn endpoint(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    let full = if raw.contains("://") {
        raw.to_owned()
    } else {
        format!("tcp://{raw}")
    };
    Endpoint::from_str(&full).map_err(|e| format!("invalid ZMQ endpoint {raw:?}: {e}"))?;
    Ok(full)
}

/// The block hash of a `hashblock` message and its sequence number, or `None` for anything
/// else (another topic, a malformed message).
fn parse_hashblock(m: &ZmqMessage) -> Option<(Hash256, Option<u32>)> {
    if m.get(0)?.as_ref() != TOPIC.as_bytes() {
        return None;
    }
    let body: [u8; 32] = m.get(1)?.as_ref().try_into().ok()?;
    let mut internal = body;
    internal.reverse();
    let seq = m
        .get(2)
        .and_then(|f| <[u8; 4]>::try_from(f.as_ref()).ok())
        .map(u32::from_le_bytes);
    Some((Hash256(internal), seq))
}

/// Subscribes to `endpoint` for as long as `events` has a receiver, reconnecting with capped
/// backoff.
pub(crate) async fn run(
    endpoint: String,
    connect_timeout: Duration,
    retry: Backoff,
    events: mpsc::Sender<ZmqEvent>,
) {
    let mut delays = retry.start();
    let mut last_seq: Option<u32> = None;
    loop {
        let mut socket = SubSocket::new();
        let mut monitor = socket.monitor();
        // Remembered by the socket and sent as part of connecting.
        if let Err(e) = socket.subscribe(TOPIC).await {
            tracing::warn!(%endpoint, error = %e, "zmq: subscribing failed");
        }
        let connected = tokio::time::timeout(connect_timeout, socket.connect(&endpoint)).await;
        match connected {
            Ok(Ok(())) => {}
            failed => {
                let wait = delays.next_delay();
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no connection within {connect_timeout:?}"),
                };
                tracing::warn!(%endpoint, %error, retry_in_ms = wait.as_millis() as u64, "zmq: cannot connect");
                drop(socket);
                tokio::time::sleep(wait).await;
                continue;
            }
        }
        tracing::info!(%endpoint, "zmq: subscribed to hashblock");
        if events.send(ZmqEvent::Connected).await.is_err() {
            return;
        }
        let since = Instant::now();
        loop {
            tokio::select! {
                msg = socket.recv() => match msg {
                    Ok(m) => match parse_hashblock(&m) {
                        Some((hash, seq)) => {
                            delays.reset();
                            if let (Some(prev), Some(seq)) = (last_seq, seq) {
                                let missed = seq.wrapping_sub(prev).wrapping_sub(1);
                                if missed != 0 && missed < u32::MAX / 2 {
                                    tracing::warn!(%endpoint, missed, "zmq: hashblock messages missed");
                                }
                            }
                            last_seq = seq.or(last_seq);
                            tracing::debug!(%endpoint, %hash, ?seq, "zmq: hashblock");
                            if events.send(ZmqEvent::HashBlock(hash)).await.is_err() {
                                return;
                            }
                        }
                        None => tracing::debug!(%endpoint, frames = m.len(), "zmq: ignored a message that is not hashblock"),
                    },
                    Err(e) => {
                        tracing::warn!(%endpoint, error = %e, "zmq: receive failed");
                        break;
                    }
                },
                event = monitor.next() => match event {
                    Some(SocketEvent::Disconnected(_)) | None => break,
                    Some(_) => {}
                },
            }
        }
        if since.elapsed() >= HEALTHY_CONNECTION {
            delays.reset();
        }
        // Dropping the socket stops the crate's own reconnection.
        drop(socket);
        let wait = delays.next_delay();
        tracing::warn!(%endpoint, retry_in_ms = wait.as_millis() as u64, "zmq: connection lost");
        if events.send(ZmqEvent::Disconnected).await.is_err() {
            return;
        }
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_default_to_tcp() {
        assert_eq!(
            endpoint("127.0.0.1:28332").unwrap(),
            "tcp://127.0.0.1:28332"
        );
        assert_eq!(
            endpoint("tcp://127.0.0.1:28332").unwrap(),
            "tcp://127.0.0.1:28332"
        );
        assert!(endpoint("127.0.0.1").is_err());
        assert!(endpoint("carrier-pigeon://x").is_err());
    }

    #[test]
    fn hashblock_frames() {
        let mut display = [0u8; 32];
        display[0] = 0xaa; // the display order's first byte is the internal order's last
        let mut m = ZmqMessage::from(TOPIC.as_bytes().to_vec());
        m.push_back(display.to_vec().into());
        m.push_back(7u32.to_le_bytes().to_vec().into());
        let (hash, seq) = parse_hashblock(&m).unwrap();
        assert_eq!(hash.0[31], 0xaa);
        assert_eq!(seq, Some(7));

        let mut raw = ZmqMessage::from(b"rawblock".to_vec());
        raw.push_back(vec![0u8; 80].into());
        assert_eq!(parse_hashblock(&raw), None);
        let mut short = ZmqMessage::from(TOPIC.as_bytes().to_vec());
        short.push_back(vec![0u8; 31].into());
        assert_eq!(parse_hashblock(&short), None);
    }
}
