//! The async shell: accepts TCP connections, runs the Noise handshake, and drives one
//! [`Session`] per connection from the client's frames and the node's template watch.
//!
//! Each connection is its own task; whatever one client does (garbage, a failed handshake, an
//! oversized frame, silence, not reading) ends that task only. The accept loop keeps going
//! through transient accept errors (such as running out of file descriptors), backing off
//! briefly instead of spinning.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use events::{ConnectionClosed, ConnectionOpened, EventSink, ShortStr};
use sv2::{Limits, NoiseConn, TransportError};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::block::SolutionBlock;
use super::codec::{self, ServerMessage};
use super::session::{Session, SessionConfig, TdpEvent};
use super::TdpKeys;
use crate::link_bytes::{self, LinkCounter};
use crate::node::Node;

/// How the endpoint runs. [`TdpConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct TdpConfig {
    /// Signs the Noise certificates; clients are configured with its public half.
    pub keys: TdpKeys,
    /// How long each connection's certificate is valid from the handshake (the reference
    /// roles' `cert_validity_sec`, default one hour). Clients check it only at the handshake.
    pub cert_validity: Duration,
    /// The Noise handshake must complete within this.
    pub handshake_timeout: Duration,
    /// From accepting the connection to `CoinbaseOutputConstraints`: a client that connects
    /// and never sets up is dropped after this.
    pub setup_timeout: Duration,
    /// A client that does not take our bytes within this is dropped.
    pub write_timeout: Duration,
    /// Largest frame a client may send, in bytes on the wire. The largest legitimate client
    /// message is a `SubmitSolution` with a coinbase of at most 64 KiB.
    pub max_frame_bytes: usize,
    /// Templates of this many most recent tips stay answerable per connection.
    pub retained_tips: usize,
    /// And at most this many templates in all per connection.
    pub max_templates: usize,
    /// Connection events (`ConnectionOpened` labelled with the node's "tdp" link name,
    /// `ConnectionClosed`).
    pub events: EventSink,
}

impl TdpConfig {
    /// A configuration with these keys and the defaults for the rest.
    pub fn new(keys: TdpKeys) -> TdpConfig {
        TdpConfig {
            keys,
            cert_validity: Duration::from_secs(3600),
            handshake_timeout: Duration::from_secs(10),
            setup_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            max_frame_bytes: 128 * 1024,
            retained_tips: 3,
            max_templates: 64,
            events: EventSink::disabled(),
        }
    }
}

impl Default for TdpConfig {
    fn default() -> Self {
        TdpConfig::new(TdpKeys::reference())
    }
}

/// Connection ids for events, unique within the process.
static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// Serves the Template Distribution Protocol on `listener` until `shutdown` resolves, then
/// closes every connection. Errors only if the listener's address cannot be read.
pub async fn serve(
    node: Node,
    listener: TcpListener,
    config: TdpConfig,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let local = listener.local_addr()?;
    let mut session = node.read(|n| SessionConfig::from_network(n.config()));
    session.retained_tips = config.retained_tips;
    session.max_templates = config.max_templates;
    let sink = node.events().clone();
    let link = node.link_name("tdp");
    let endpoint = Arc::new(Endpoint {
        node,
        config,
        session,
        local,
        label: ShortStr::new(&link),
        bytes: LinkCounter::new(&link),
    });
    let mut report = link_bytes::report_interval();
    // Tells connections to close on shutdown, so that each records why it ended.
    let (stop, stopped) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            _ = report.tick() => endpoint.bytes.report(&sink),
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = done {
                    if e.is_panic() {
                        tracing::error!(error = %e, "tdp connection task panicked");
                    }
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let conn = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
                    tasks.spawn(connection(endpoint.clone(), stream, peer, conn, stopped.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "tdp accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    let _ = stop.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        tasks.shutdown().await;
    }
    endpoint.bytes.report(&sink);
    Ok(())
}

/// How long a connection we close waits for the peer to close its side (see
/// [`NoiseConn::close`]).
const CLOSE_LINGER: Duration = Duration::from_millis(500);

/// How long connections get to close on shutdown before their tasks are aborted.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// What the connections of one endpoint share.
struct Endpoint {
    node: Node,
    config: TdpConfig,
    session: SessionConfig,
    local: SocketAddr,
    /// The node's "tdp" link name, which connection events carry.
    label: ShortStr,
    /// Frame bytes and messages read and written, handshakes included (a failed handshake is
    /// not counted).
    bytes: Arc<LinkCounter>,
}

async fn connection(
    endpoint: Arc<Endpoint>,
    stream: TcpStream,
    peer: SocketAddr,
    conn: u64,
    mut stopped: watch::Receiver<bool>,
) {
    let events = &endpoint.config.events;
    events.emit(ConnectionOpened {
        conn,
        peer,
        local: endpoint.local,
        label: endpoint.label,
    });
    tracing::debug!(conn, %peer, "tdp connection accepted");
    let result = tokio::select! {
        r = run(&endpoint, stream, conn) => r,
        _ = stopped.wait_for(|s| *s) => Err(TransportError::Shutdown),
    };
    let (reason, closing) = match result {
        Ok(Closing { reason, noise }) => {
            tracing::info!(conn, %peer, reason, "tdp connection closed");
            (reason, Some(noise))
        }
        Err(e) => {
            tracing::info!(conn, %peer, reason = e.reason(), error = %e, "tdp connection closed");
            (e.reason(), None)
        }
    };
    events.emit(ConnectionClosed {
        conn,
        reason: ShortStr::new(reason),
    });
    if let Some(noise) = closing {
        tokio::select! {
            _ = noise.close(CLOSE_LINGER) => {}
            _ = stopped.wait_for(|s| *s) => {}
        }
    }
}

/// A connection we decided to close, and why.
struct Closing {
    reason: &'static str,
    noise: NoiseConn,
}

/// One connection from handshake until we decide to close it (or the peer or the socket ends
/// it: the error).
async fn run(endpoint: &Endpoint, stream: TcpStream, conn: u64) -> Result<Closing, TransportError> {
    let Endpoint {
        node,
        config,
        session,
        bytes,
        ..
    } = endpoint;
    let setup_deadline = tokio::time::Instant::now() + config.setup_timeout;
    let responder = config
        .keys
        .responder(config.cert_validity)
        .map_err(|e| TransportError::Handshake(e.to_string()))?;
    let limits = Limits {
        handshake_timeout: config.handshake_timeout,
        max_frame_bytes: config.max_frame_bytes,
        write_timeout: config.write_timeout,
    };
    let mut noise = NoiseConn::accept(stream, responder, limits).await?;
    // The transport counts the handshake, every frame and its message type from here on.
    noise.count_into(bytes.clone(), sv2::Side::Server);
    let mut payload = Vec::new();
    let mut templates = node.templates();
    let mut session = Session::new(*session);
    let mut was_serving = false;
    loop {
        tokio::select! {
            frame = noise.read_frame() => {
                let mut frame = frame?;
                match codec::decode_client(frame.extension(), frame.msg_type(), &mut frame.payload) {
                    Ok(Some(msg)) => {
                        // Read, not marked seen: a template that arrived with this message is
                        // still announced by the branch below (the session skips one it sent).
                        let current = templates.borrow().clone();
                        session.handle_message(msg, &current);
                    }
                    Ok(None) => {
                        tracing::debug!(conn, extension = frame.extension(), msg_type = frame.msg_type(),
                            "tdp: ignoring a message of an unknown extension");
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(conn, error = %e, "tdp: closing on a bad message");
                        return Ok(Closing { reason: "protocol", noise });
                    }
                }
            }
            changed = templates.changed(), if session.is_serving() => {
                if changed.is_err() {
                    return Ok(Closing { reason: "shutdown", noise });
                }
                let t = templates.borrow_and_update().clone();
                session.handle_template(&t);
            }
            _ = tokio::time::sleep_until(setup_deadline), if !session.is_serving() => {
                tracing::warn!(conn, "tdp: no SetupConnection and CoinbaseOutputConstraints in time");
                return Ok(Closing { reason: "timeout", noise });
            }
        };
        if !was_serving && session.is_serving() {
            was_serving = true;
            tracing::info!(
                conn,
                tx_weight_limit = session.tx_limit(),
                "tdp: client set up, templates flowing"
            );
        }
        // A found block goes to the node before anything is written.
        while let Some(event) = session.poll_event() {
            match event {
                TdpEvent::Submit(block) => submit(node, conn, block).await,
                TdpEvent::DropSolution {
                    template_id,
                    reason,
                } => {
                    tracing::warn!(conn, template_id, %reason, "tdp: SubmitSolution dropped");
                }
            }
        }
        while let Some(m) = session.poll_transmit() {
            log_send(conn, &m);
            m.send(&mut noise, &mut payload).await?;
        }
        if let Some(c) = session.wants_close() {
            tracing::info!(conn, reason = c.reason, detail = %c.detail, "tdp: closing");
            return Ok(Closing {
                reason: c.reason,
                noise,
            });
        }
    }
}

fn log_send(conn: u64, m: &ServerMessage) {
    match m {
        ServerMessage::NewTemplate(t) => tracing::debug!(
            conn,
            template_id = t.template_id,
            future = t.future_template,
            value_sats = t.coinbase_tx_value_remaining,
            "tdp: NewTemplate"
        ),
        ServerMessage::SetNewPrevHash(p) => tracing::info!(
            conn,
            template_id = p.template_id,
            prev_hash = %primitives::Hash256(p.prev_hash),
            "tdp: SetNewPrevHash"
        ),
        other => tracing::debug!(conn, msg = other.name(), "tdp: sent"),
    }
}

/// Hands a solution's block to the node. Validation runs off the async threads: a full block
/// is a few megabytes of hashing.
async fn submit(node: &Node, conn: u64, block: SolutionBlock) {
    let SolutionBlock {
        raw,
        hash,
        height,
        template_id,
    } = block;
    let n = node.clone();
    match tokio::task::spawn_blocking(move || n.submit_block(&raw)).await {
        Ok(Ok(_)) => {
            tracing::info!(conn, template_id, %hash, height, "tdp: SubmitSolution accepted")
        }
        Ok(Err(e)) => {
            tracing::warn!(conn, template_id, %hash, height, reason = %e, "tdp: SubmitSolution rejected")
        }
        Err(e) => tracing::error!(conn, template_id, error = %e, "tdp: block submission failed"),
    }
}
