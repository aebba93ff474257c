//! One relayed SV2 connection whose Noise the tap terminates on both legs (`--sv2-terminate`).
//!
//! Toward the client the tap is a Noise responder certified by its own authority key (the
//! client must trust it); toward the upstream it is a Noise initiator, checking the upstream's
//! certificate when given the upstream's authority key. Every frame decrypted on one leg is
//! re-encrypted unchanged (same header, same payload) for the other, and the re-encrypted bytes
//! go through the same link emulation as the plain relay's ([`crate::stream::Stream`], the
//! shared [`crate::pipe::Pipe`]s): a chunk is what one socket read completed, its arrival the
//! kernel's stamp of that read. The frames of a chunk are read ([`Sv2Watch`]) when the chunk
//! leaves the tap, so the events are timed as the SV1 reader's are.
//!
//! The handshakes cross the link as one: the tap sends its own ephemeral key upstream only when
//! the client's has arrived, and answers the client only once the upstream has answered, so a
//! client's handshake takes one emulated round trip to the real upstream, as it would without
//! the tap, and a client is never accepted by a tap whose upstream refuses it. Both handshake
//! messages have the same size on both legs and so do the re-encrypted frames: each leg carries
//! the same bytes count. `LinkBytes` report the client's leg (what a device sees: bytes read
//! from it, bytes written to it); the summary also counts the upstream's.
//!
//! A leg that fails (a handshake that does not complete in time, a certificate refused, a frame
//! that does not decrypt) ends the connection with a reset on both sockets; the tap serves its
//! other connections as before.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use events::{ConnectionClosed, Direction, EventKind, ShortStr};
use sv2::{AuthorityKeys, Frame, NoiseError, NoiseInitiator, NoiseResponder};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::counter::ByteCounter;
use crate::net;
use crate::relay::leg::{self, KEEP_CAPACITY};
use crate::relay::{close_reason, link_bytes, Connection, Leg, Legs, Relaying, Shared};
use crate::stats::TapStats;
use crate::sv2_watch::Sv2Watch;

/// Bytes asked for per read: frames re-encrypted from one read leave as one chunk.
const READ_SIZE: usize = 8192;

/// How the tap terminates SV2's Noise.
#[derive(Clone, Debug)]
pub struct Sv2Terminate {
    /// The tap's own authority pair: its certificates toward clients are signed with it.
    pub keys: AuthorityKeys,
    /// The upstream's authority public key (x-only); `None` accepts any certificate.
    pub upstream_authority: Option<[u8; 32]>,
    /// Validity of the certificates the tap gives its clients.
    pub cert_validity: Duration,
    /// Largest frame accepted on either leg, as encrypted bytes on the wire.
    pub max_frame_bytes: usize,
    /// Both handshakes must be over within this after the client connected.
    pub handshake_timeout: Duration,
}

impl Sv2Terminate {
    /// Terminating with `keys`, checking the upstream against `upstream_authority` if given.
    pub fn new(keys: AuthorityKeys, upstream_authority: Option<[u8; 32]>) -> Self {
        let limits = sv2::Limits::default();
        Sv2Terminate {
            keys,
            upstream_authority,
            cert_validity: Duration::from_secs(3600),
            max_frame_bytes: limits.max_frame_bytes,
            handshake_timeout: limits.handshake_timeout,
        }
    }

    /// The public key clients must trust, base58check.
    pub fn public_key(&self) -> String {
        self.keys.public_key()
    }

    fn initiator(&self) -> Result<NoiseInitiator, NoiseError> {
        match self.upstream_authority {
            Some(k) => NoiseInitiator::new(k, self.max_frame_bytes),
            None => {
                let role = noise_sv2::Initiator::without_pk()
                    .map_err(|e| NoiseError::Handshake(format!("{e:?}")))?;
                NoiseInitiator::from_role(role, self.max_frame_bytes)
            }
        }
    }
}

/// Relays `client` to `upstream`, both legs under Noise, until both sides close, a failure,
/// or `cancel`. Emits `ConnectionClosed`.
pub(crate) async fn relay(
    shared: &Shared,
    sv2: &Sv2Terminate,
    conn: u64,
    client: &TcpStream,
    upstream: &TcpStream,
    accepted_ns: u64,
    cancel: &mut watch::Receiver<bool>,
) {
    let noise = NoiseResponder::new(&sv2.keys, sv2.cert_validity, sv2.max_frame_bytes)
        .and_then(|r| Ok((r, sv2.initiator()?)));
    let (responder, initiator) = match noise {
        Ok(pair) => pair,
        Err(e) => {
            tracing::error!(conn, error = %e, "cannot set up noise");
            net::set_reset_on_close(client);
            net::set_reset_on_close(upstream);
            shared.config.events.emit(ConnectionClosed {
                conn,
                reason: ShortStr::new("handshake"),
            });
            return;
        }
    };
    shared.stats.sv2_connections.fetch_add(1, Relaxed);
    let relaying = Terminated::new(responder, initiator);
    let mut c = Connection::new(shared, conn, accepted_ns, relaying);
    let deadline = tokio::time::Instant::now() + sv2.handshake_timeout;
    let reason = match c.run(client, upstream, cancel, Some(deadline)).await {
        Ok(reason) => reason,
        Err(end) => {
            net::set_reset_on_close(client);
            net::set_reset_on_close(upstream);
            end.log(conn, &shared.stats);
            end.reason()
        }
    };
    c.finish(reason);
}

/// Which leg failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Client,
    Upstream,
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::Client => Side::Upstream,
            Side::Upstream => Side::Client,
        }
    }
}

/// Why a connection ended early.
#[derive(Debug)]
enum End {
    Io(io::Error),
    /// A leg's Noise failed, or its peer broke the protocol.
    Noise {
        side: Side,
        error: NoiseError,
    },
    /// A peer closed, or spoke out of turn, before the handshakes were over.
    Handshake {
        side: Side,
        what: &'static str,
    },
    Timeout,
}

impl From<io::Error> for End {
    fn from(e: io::Error) -> Self {
        End::Io(e)
    }
}

impl End {
    fn reason(&self) -> &'static str {
        match self {
            End::Io(e) => close_reason(e),
            End::Noise {
                error: NoiseError::Certificate(_),
                ..
            } => "certificate",
            End::Noise {
                error: NoiseError::Handshake(_),
                ..
            }
            | End::Handshake { .. } => "handshake",
            End::Noise { .. } => "protocol",
            End::Timeout => "timeout",
        }
    }

    fn log(&self, conn: u64, stats: &TapStats) {
        match self {
            End::Io(e) => tracing::debug!(conn, error = %e, "connection failed"),
            End::Noise {
                side: Side::Upstream,
                error: e @ NoiseError::Certificate(_),
            } => {
                // Every client would hit it: 1st, 2nd, 4th, ...
                let n = stats.sv2_failures.fetch_add(1, Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(conn, error = %e, times = n, "the upstream's certificate is refused");
                }
            }
            End::Noise { side, error } => {
                stats.sv2_failures.fetch_add(1, Relaxed);
                tracing::debug!(conn, ?side, error = %error, "noise failed");
            }
            End::Handshake { side, what } => {
                stats.sv2_failures.fetch_add(1, Relaxed);
                tracing::debug!(conn, ?side, what, "handshake did not complete");
            }
            End::Timeout => {
                stats.sv2_failures.fetch_add(1, Relaxed);
                tracing::debug!(conn, "handshake timed out");
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the client's ephemeral key.
    ClientKey,
    /// Our key went upstream; the client's answer waits for the upstream's.
    UpstreamReply,
    Established,
}

/// The SV2 relaying: both legs' Noise, the handshakes' progress and the frames in flight.
struct Terminated {
    phase: Phase,
    client_noise: NoiseResponder,
    upstream_noise: NoiseInitiator,
    watch: Sv2Watch,
    read_buf: Vec<u8>,
    /// Re-encrypted bytes and their frames, on their way into a leg (reused).
    out: Vec<u8>,
    frames: Vec<Frame>,
    /// The frames of each chunk queued in the legs (up, down), in order (the end of stream
    /// has none).
    chunks: [VecDeque<Vec<Frame>>; 2],
    /// Wire bytes read from each peer, handshakes included.
    client_read: ByteCounter,
    upstream_read: ByteCounter,
}

impl Terminated {
    fn new(client_noise: NoiseResponder, upstream_noise: NoiseInitiator) -> Self {
        Terminated {
            phase: Phase::ClientKey,
            client_noise,
            upstream_noise,
            watch: Sv2Watch::new(),
            read_buf: Vec::new(),
            out: Vec::new(),
            frames: Vec::new(),
            chunks: [VecDeque::new(), VecDeque::new()],
            client_read: ByteCounter::default(),
            upstream_read: ByteCounter::default(),
        }
    }

    /// Queues the re-encrypted bytes, if any, as one chunk of `leg` that arrived at
    /// `arrival_ns`, with their frames to be read when it leaves.
    fn send(&mut self, leg: &mut Leg, arrival_ns: u64, shared: &Shared) {
        if self.out.is_empty() {
            return;
        }
        self.chunks[lane(leg.dir())].push_back(std::mem::take(&mut self.frames));
        leg.push(arrival_ns, &self.out, shared);
        self.out.clear();
    }

    /// One read from `side`'s socket `src`, counted, with the arrival time of its bytes; `leg`
    /// carries them on. `None` when nothing is waiting or `side` closed (its FIN goes to `leg`;
    /// a close before the handshakes completed ends the connection).
    fn read_side(
        &mut self,
        side: Side,
        src: &TcpStream,
        leg: &mut Leg,
    ) -> Result<Option<(usize, u64)>, End> {
        let Some((n, arrival)) = recv(src, &mut self.read_buf)? else {
            return Ok(None);
        };
        if n == 0 {
            leg.push_fin(arrival);
            if self.phase != Phase::Established {
                return Err(End::Handshake {
                    side,
                    what: "closed before the handshake completed",
                });
            }
            return Ok(None);
        }
        match side {
            Side::Client => self.client_read.add(n),
            Side::Upstream => self.upstream_read.add(n),
        }
        Ok(Some((n, arrival)))
    }

    fn read_client(
        &mut self,
        shared: &Shared,
        legs: &mut Legs,
        client: &TcpStream,
    ) -> Result<(), End> {
        while legs.up.wants_read() && self.reads_client() {
            let Some((n, arrival)) = self.read_side(Side::Client, client, &mut legs.up)? else {
                break;
            };
            self.client_noise
                .feed(&self.read_buf[..n])
                .map_err(|error| End::Noise {
                    side: Side::Client,
                    error,
                })?;
            match self.phase {
                Phase::ClientKey => {
                    if self.client_noise.handshake_done() {
                        // Our own key goes upstream when the client's has come: the handshake
                        // crosses the link as the client's would.
                        self.upstream_noise.take_handshake_bytes(&mut self.out);
                        self.phase = Phase::UpstreamReply;
                    }
                }
                Phase::Established => self.client_frames()?,
                Phase::UpstreamReply => unreachable!("not read in this phase"),
            }
            self.send(&mut legs.up, arrival, shared);
        }
        Ok(())
    }

    fn read_upstream(
        &mut self,
        shared: &Shared,
        legs: &mut Legs,
        upstream: &TcpStream,
    ) -> Result<(), End> {
        while legs.down.wants_read() {
            let Some((n, arrival)) = self.read_side(Side::Upstream, upstream, &mut legs.down)?
            else {
                break;
            };
            let upstream_error = |error| End::Noise {
                side: Side::Upstream,
                error,
            };
            match self.phase {
                Phase::ClientKey => {
                    return Err(End::Handshake {
                        side: Side::Upstream,
                        what: "spoke before the client",
                    })
                }
                Phase::UpstreamReply => {
                    // Checks the upstream's certificate.
                    self.upstream_noise
                        .feed(&self.read_buf[..n])
                        .map_err(upstream_error)?;
                    if self.upstream_noise.handshake_done() {
                        self.client_noise.take_handshake_bytes(&mut self.out);
                        self.phase = Phase::Established;
                        self.upstream_frames()?;
                        self.send(&mut legs.down, arrival, shared);
                        // Whatever the client sent right behind its key.
                        self.client_frames()?;
                        self.send(&mut legs.up, arrival, shared);
                        continue;
                    }
                }
                Phase::Established => {
                    self.upstream_noise
                        .feed(&self.read_buf[..n])
                        .map_err(upstream_error)?;
                    self.upstream_frames()?;
                }
            }
            self.send(&mut legs.down, arrival, shared);
        }
        Ok(())
    }

    /// Re-encrypts every whole frame from the client for the upstream.
    fn client_frames(&mut self) -> Result<(), End> {
        reencrypt(
            Side::Client,
            || self.client_noise.next_frame(),
            |frame, out| {
                let ext = frame.header.ext_type();
                self.upstream_noise
                    .encrypt(frame.msg_type(), ext, &frame.payload, out)
            },
            &mut self.out,
            &mut self.frames,
        )
    }

    /// Re-encrypts every whole frame from the upstream for the client.
    fn upstream_frames(&mut self) -> Result<(), End> {
        reencrypt(
            Side::Upstream,
            || self.upstream_noise.next_frame(),
            |frame, out| {
                let ext = frame.header.ext_type();
                self.client_noise
                    .encrypt(frame.msg_type(), ext, &frame.payload, out)
            },
            &mut self.out,
            &mut self.frames,
        )
    }
}

impl Relaying for Terminated {
    type Error = End;

    fn read(
        &mut self,
        shared: &Shared,
        legs: &mut Legs,
        sources: [&TcpStream; 2],
    ) -> Result<(), End> {
        self.read_client(shared, legs, sources[0])?;
        self.read_upstream(shared, legs, sources[1])
    }

    /// The client is not read while its answer waits for the upstream's: it has nothing to
    /// say before it, and what a misbehaving one says would pile up.
    fn reads_client(&self) -> bool {
        self.phase != Phase::UpstreamReply
    }

    fn handshaking(&self) -> bool {
        self.phase != Phase::Established
    }

    fn handshake_expired(&self) -> End {
        End::Timeout
    }

    fn observe(&mut self, conn: u64, dir: Direction, _: &[u8], events: &mut Vec<EventKind>) {
        for mut frame in self.chunks[lane(dir)].pop_front().unwrap_or_default() {
            self.watch.observe(conn, dir, &mut frame, events);
        }
    }

    /// `LinkBytes` count the client's leg; the upstream's goes to the summary only.
    fn report_bytes(&mut self, shared: &Shared, conn: u64, legs: &mut Legs) {
        link_bytes(shared, conn, Direction::Up, self.client_read.take_delta());
        link_bytes(
            shared,
            conn,
            Direction::Down,
            legs.down.written.take_delta(),
        );
        let upstream_up = legs.up.written.take_delta();
        let upstream_down = self.upstream_read.take_delta();
        shared.stats.add_upstream_bytes(Direction::Up, upstream_up);
        shared
            .stats
            .add_upstream_bytes(Direction::Down, upstream_down);
    }

    fn count(&self, stats: &TapStats) {
        stats.add_sv2(Direction::Up, self.watch.counts(Direction::Up));
        stats.add_sv2(Direction::Down, self.watch.counts(Direction::Down));
        stats.add_sv2_workers(self.watch.workers());
    }

    fn log_closed(&self, conn: u64, reason: &str, legs: &Legs) {
        tracing::debug!(
            conn,
            reason,
            client_read = self.client_read.total(),
            client_written = legs.down.written.total(),
            upstream_read = self.upstream_read.total(),
            upstream_written = legs.up.written.total(),
            "sv2 connection closed"
        );
    }
}

/// Index of a direction's frame queue.
fn lane(dir: Direction) -> usize {
    matches!(dir, Direction::Down) as usize
}

/// Decrypts every whole frame `from` has (`next`) and re-encrypts it for the other leg
/// (`encrypt`) into `out`, keeping the frames in `frames`.
fn reencrypt(
    from: Side,
    mut next: impl FnMut() -> Option<Result<Frame, NoiseError>>,
    mut encrypt: impl FnMut(&Frame, &mut Vec<u8>) -> Result<(), NoiseError>,
    out: &mut Vec<u8>,
    frames: &mut Vec<Frame>,
) -> Result<(), End> {
    while let Some(frame) = next() {
        let frame = frame.map_err(|error| End::Noise { side: from, error })?;
        encrypt(&frame, out).map_err(|error| End::Noise {
            side: from.other(),
            error,
        })?;
        frames.push(frame);
    }
    Ok(())
}

/// One read into `buf` (cleared first): `None` when nothing is waiting, a length of zero at
/// the end of the stream, with the arrival time of the bytes.
fn recv(src: &TcpStream, buf: &mut Vec<u8>) -> io::Result<Option<(usize, u64)>> {
    buf.clear();
    if buf.capacity() > KEEP_CAPACITY {
        buf.shrink_to(READ_SIZE);
    }
    buf.reserve(READ_SIZE);
    leg::recv(src, buf)
}
