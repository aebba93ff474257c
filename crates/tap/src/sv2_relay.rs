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
use std::sync::Mutex;
use std::time::Duration;

use events::{now_ns, ConnectionClosed, Direction, EventKind, LinkBytes, LinkRtt, ShortStr};
use sv2::{AuthorityKeys, Frame, KeyError, NoiseError, NoiseInitiator, NoiseResponder};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::counter::ByteCounter;
use crate::link::ns;
use crate::net;
use crate::pipe::Pipe;
use crate::relay::Shared;
use crate::stats::TapStats;
use crate::stream::{stream_seed, Stream};
use crate::sv2_watch::Sv2Watch;
use crate::timer::Sleep;

/// Bytes asked for per read.
const READ_SIZE: usize = 8192;
/// An emptied buffer larger than this is given back.
const KEEP_CAPACITY: usize = 64 * 1024;

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

#[derive(Debug, thiserror::Error)]
pub enum Sv2ConfigError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("the authority public and secret keys go together")]
    HalfPair,
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

    /// From base58check keys: both halves of the tap's pair or neither (the SV2 reference test
    /// pair), and the upstream's public key or none.
    pub fn from_strings(
        public: Option<&str>,
        secret: Option<&str>,
        upstream_authority: Option<&str>,
    ) -> Result<Self, Sv2ConfigError> {
        let keys = match (public, secret) {
            (Some(p), Some(s)) => AuthorityKeys::from_strings(p, s)?,
            (None, None) => AuthorityKeys::reference(),
            _ => return Err(Sv2ConfigError::HalfPair),
        };
        let upstream = upstream_authority.map(sv2::parse_public_key).transpose()?;
        Ok(Sv2Terminate::new(keys, upstream))
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
    let mut c = Connection::new(shared, conn, accepted_ns, responder, initiator);
    let deadline = tokio::time::Instant::now() + sv2.handshake_timeout;
    let reason = match c.run(client, upstream, cancel, deadline).await {
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
            End::Io(e) => match e.kind() {
                io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::NotConnected => "reset",
                io::ErrorKind::TimedOut => "timeout",
                _ => "error",
            },
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

struct Connection<'a> {
    shared: &'a Shared,
    conn: u64,
    phase: Phase,
    client_noise: NoiseResponder,
    upstream_noise: NoiseInitiator,
    /// Toward the upstream.
    up: Outbox,
    /// Toward the client.
    down: Outbox,
    watch: Sv2Watch,
    read_buf: Vec<u8>,
    /// Re-encrypted bytes and their frames, on their way into an outbox (reused).
    out: Vec<u8>,
    frames: Vec<Frame>,
    events: Vec<EventKind>,
    /// Wire bytes read from each peer, handshakes included.
    client_read: ByteCounter,
    upstream_read: ByteCounter,
}

impl<'a> Connection<'a> {
    fn new(
        shared: &'a Shared,
        conn: u64,
        accepted_ns: u64,
        client_noise: NoiseResponder,
        upstream_noise: NoiseInitiator,
    ) -> Self {
        Connection {
            shared,
            conn,
            phase: Phase::ClientKey,
            client_noise,
            upstream_noise,
            up: Outbox::new(shared, conn, Direction::Up, accepted_ns),
            down: Outbox::new(shared, conn, Direction::Down, accepted_ns),
            watch: Sv2Watch::new(),
            read_buf: Vec::new(),
            out: Vec::new(),
            frames: Vec::new(),
            events: Vec::new(),
            client_read: ByteCounter::default(),
            upstream_read: ByteCounter::default(),
        }
    }

    async fn run(
        &mut self,
        client: &TcpStream,
        upstream: &TcpStream,
        cancel: &mut watch::Receiver<bool>,
        handshake_deadline: tokio::time::Instant,
    ) -> Result<&'static str, End> {
        let cap = self.shared.config.buffer_bytes.max(1);
        let every = self
            .shared
            .config
            .report_interval
            .max(Duration::from_millis(1));
        let mut report = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let handshake = tokio::time::sleep_until(handshake_deadline);
        tokio::pin!(handshake);
        loop {
            self.read_client(client, cap)?;
            self.read_upstream(upstream, cap)?;
            let now = now_ns();
            let stats = &self.shared.stats;
            self.up
                .release(self.conn, now, &mut self.watch, &mut self.events, stats);
            self.down
                .release(self.conn, now, &mut self.watch, &mut self.events, stats);
            for e in self.events.drain(..) {
                self.shared.config.events.emit(e);
            }
            let up_blocked = self.up.write(upstream)?;
            let down_blocked = self.down.write(client)?;
            if self.up.fin_sent && self.down.fin_sent {
                return Ok("eof");
            }
            let client_read = self.reads_client(cap);
            let upstream_read = self.down.wants_read(cap);
            let up_timed = self.up.arm();
            let down_timed = self.down.arm();
            let handshaking = self.phase != Phase::Established;
            tokio::select! {
                r = client.readable(), if client_read => r?,
                r = upstream.readable(), if upstream_read => r?,
                r = upstream.writable(), if up_blocked => r?,
                r = client.writable(), if down_blocked => r?,
                _ = &mut self.up.sleep, if up_timed => {}
                _ = &mut self.down.sleep, if down_timed => {}
                _ = &mut handshake, if handshaking => return Err(End::Timeout),
                _ = report.tick() => self.report(),
                _ = cancel.changed() => return Ok("shutdown"),
            }
        }
    }

    /// The client is not read while its answer waits for the upstream's: it has nothing to
    /// say before it, and what a misbehaving one says would pile up.
    fn reads_client(&self, cap: usize) -> bool {
        self.up.wants_read(cap) && self.phase != Phase::UpstreamReply
    }

    fn read_client(&mut self, client: &TcpStream, cap: usize) -> Result<(), End> {
        while self.reads_client(cap) {
            let Some((n, arrival)) = recv(client, &mut self.read_buf)? else {
                break;
            };
            if n == 0 {
                self.up.eof_read = true;
                self.up.stream.push_fin(arrival);
                if self.phase != Phase::Established {
                    return Err(End::Handshake {
                        side: Side::Client,
                        what: "closed before the handshake completed",
                    });
                }
                break;
            }
            self.client_read.add(n);
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
            self.up
                .push(arrival, &mut self.out, &mut self.frames, self.shared);
        }
        Ok(())
    }

    fn read_upstream(&mut self, upstream: &TcpStream, cap: usize) -> Result<(), End> {
        while self.down.wants_read(cap) {
            let Some((n, arrival)) = recv(upstream, &mut self.read_buf)? else {
                break;
            };
            if n == 0 {
                self.down.eof_read = true;
                self.down.stream.push_fin(arrival);
                if self.phase != Phase::Established {
                    return Err(End::Handshake {
                        side: Side::Upstream,
                        what: "closed before the handshake completed",
                    });
                }
                break;
            }
            self.upstream_read.add(n);
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
                        self.down
                            .push(arrival, &mut self.out, &mut self.frames, self.shared);
                        // Whatever the client sent right behind its key.
                        self.client_frames()?;
                        self.up
                            .push(arrival, &mut self.out, &mut self.frames, self.shared);
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
            self.down
                .push(arrival, &mut self.out, &mut self.frames, self.shared);
        }
        Ok(())
    }

    /// Re-encrypts every whole frame from the client for the upstream.
    fn client_frames(&mut self) -> Result<(), End> {
        while let Some(frame) = self.client_noise.next_frame() {
            let frame = frame.map_err(|error| End::Noise {
                side: Side::Client,
                error,
            })?;
            self.upstream_noise
                .encrypt(
                    frame.msg_type(),
                    frame.header.ext_type(),
                    &frame.payload,
                    &mut self.out,
                )
                .map_err(|error| End::Noise {
                    side: Side::Upstream,
                    error,
                })?;
            self.frames.push(frame);
        }
        Ok(())
    }

    /// Re-encrypts every whole frame from the upstream for the client.
    fn upstream_frames(&mut self) -> Result<(), End> {
        while let Some(frame) = self.upstream_noise.next_frame() {
            let frame = frame.map_err(|error| End::Noise {
                side: Side::Upstream,
                error,
            })?;
            self.client_noise
                .encrypt(
                    frame.msg_type(),
                    frame.header.ext_type(),
                    &frame.payload,
                    &mut self.out,
                )
                .map_err(|error| End::Noise {
                    side: Side::Client,
                    error,
                })?;
            self.frames.push(frame);
        }
        Ok(())
    }

    /// Byte deltas of the client's leg, and the round trip the tap applied most recently.
    fn report(&mut self) {
        let shared = self.shared;
        let up = self.client_read.take_delta();
        let down = self.down.written.take_delta();
        for (direction, bytes) in [(Direction::Up, up), (Direction::Down, down)] {
            if bytes > 0 {
                shared.config.events.emit(LinkBytes {
                    link: shared.link_name,
                    conn: self.conn,
                    direction,
                    bytes,
                });
                shared.stats.add_bytes(direction, bytes);
            }
        }
        let upstream_up = self.up.written.take_delta();
        let upstream_down = self.upstream_read.take_delta();
        shared.stats.add_upstream_bytes(Direction::Up, upstream_up);
        shared
            .stats
            .add_upstream_bytes(Direction::Down, upstream_down);
        self.up.report_lost(&shared.stats);
        self.down.report_lost(&shared.stats);
        if self.up.fresh && self.down.fresh {
            let rtt_ns = self.up.last_applied_ns + self.down.last_applied_ns;
            shared.config.events.emit(LinkRtt {
                link: shared.link_name,
                conn: self.conn,
                rtt_ns,
            });
            shared.stats.record_rtt(rtt_ns);
            self.up.fresh = false;
            self.down.fresh = false;
        }
    }

    fn finish(mut self, reason: &str) {
        self.report();
        let stats = &self.shared.stats;
        stats.add_sv2(Direction::Up, self.watch.counts(Direction::Up));
        stats.add_sv2(Direction::Down, self.watch.counts(Direction::Down));
        self.shared.config.events.emit(ConnectionClosed {
            conn: self.conn,
            reason: ShortStr::new(reason),
        });
        tracing::debug!(
            conn = self.conn,
            reason,
            client_read = self.client_read.total(),
            client_written = self.down.written.total(),
            upstream_read = self.upstream_read.total(),
            upstream_written = self.up.written.total(),
            "sv2 connection closed"
        );
    }
}

/// One read into `buf` (cleared first): `None` when nothing is waiting, a length of zero at
/// the end of the stream, with the arrival time of the bytes.
fn recv(src: &TcpStream, buf: &mut Vec<u8>) -> io::Result<Option<(usize, u64)>> {
    buf.clear();
    if buf.capacity() > KEEP_CAPACITY {
        buf.shrink_to(READ_SIZE);
    }
    buf.reserve(READ_SIZE);
    loop {
        match net::recv_stamped(src, buf) {
            Ok((0, _)) => return Ok(Some((0, now_ns()))),
            Ok((n, stamp)) => return Ok(Some((n, net::rx_monotonic_ns(stamp)))),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// One direction's re-encrypted bytes, held until their release and then written.
struct Outbox {
    dir: Direction,
    lane: usize,
    stream: Stream,
    /// `buf[start..]` is queued and not yet written; of it, the first `due` bytes are
    /// released.
    buf: Vec<u8>,
    start: usize,
    due: usize,
    /// The frames of each chunk in `stream`, in order (the end of stream has none).
    chunks: VecDeque<Vec<Frame>>,
    eof_read: bool,
    fin_due: bool,
    fin_sent: bool,
    written: ByteCounter,
    sleep: Sleep,
    last_applied_ns: u64,
    fresh: bool,
    lost_reported: u64,
}

impl Outbox {
    fn new(shared: &Shared, conn: u64, dir: Direction, accepted_ns: u64) -> Self {
        let link = &shared.config.link;
        let mut stream = Stream::new(link, dir, stream_seed(shared.config.seed, conn, dir));
        stream.hold_until(accepted_ns.saturating_add(ns(link.handshake_hold(dir))));
        Outbox {
            dir,
            lane: matches!(dir, Direction::Down) as usize,
            stream,
            buf: Vec::new(),
            start: 0,
            due: 0,
            chunks: VecDeque::new(),
            eof_read: false,
            fin_due: false,
            fin_sent: false,
            written: ByteCounter::default(),
            sleep: shared.timer.sleep(),
            last_applied_ns: 0,
            fresh: false,
            lost_reported: 0,
        }
    }

    fn wants_read(&self, cap: usize) -> bool {
        !self.eof_read && self.buf.len() - self.start < cap
    }

    /// Queues `bytes` (emptied) as one chunk that arrived at `arrival_ns`, carrying `frames`
    /// (emptied) to be read when it leaves.
    fn push(
        &mut self,
        arrival_ns: u64,
        bytes: &mut Vec<u8>,
        frames: &mut Vec<Frame>,
        shared: &Shared,
    ) {
        if bytes.is_empty() {
            return;
        }
        self.buf.extend_from_slice(bytes);
        let len = bytes.len();
        bytes.clear();
        self.chunks.push_back(std::mem::take(frames));
        let pipe: Option<&Mutex<Pipe>> = shared.pipes.as_ref().map(|p| &p[self.lane]);
        match pipe {
            Some(p) => {
                let mut pipe = p.lock().unwrap_or_else(|e| e.into_inner());
                self.stream.push(arrival_ns, len, Some(&mut pipe));
            }
            None => {
                self.stream.push(arrival_ns, len, None);
            }
        }
    }

    /// Marks the chunks due by `now` as ready to write, reading their frames.
    fn release(
        &mut self,
        conn: u64,
        now: u64,
        watch: &mut Sv2Watch,
        events: &mut Vec<EventKind>,
        stats: &TapStats,
    ) {
        while let Some(r) = self.stream.pop_due(now) {
            if r.fin {
                self.fin_due = true;
                continue;
            }
            for mut frame in self.chunks.pop_front().unwrap_or_default() {
                watch.observe(conn, self.dir, &mut frame, events);
            }
            self.due += r.len;
            let applied = now.saturating_sub(r.ready_ns);
            stats.record_release(self.dir, applied, now.saturating_sub(r.release_ns));
            self.last_applied_ns = applied;
            self.fresh = true;
        }
    }

    /// Writes what is released; forwards the FIN once everything ahead of it is written.
    /// Returns whether the destination is full.
    fn write(&mut self, dst: &TcpStream) -> io::Result<bool> {
        while self.due > 0 {
            match dst.try_write(&self.buf[self.start..self.start + self.due]) {
                Ok(n) => {
                    self.start += n;
                    self.due -= n;
                    self.written.add(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.compact();
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.fin_due && !self.fin_sent {
            net::shutdown_write(dst)?;
            self.fin_sent = true;
        }
        self.compact();
        Ok(false)
    }

    fn compact(&mut self) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            if self.buf.capacity() > KEEP_CAPACITY {
                self.buf.shrink_to(READ_SIZE);
            }
        } else if self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    fn arm(&mut self) -> bool {
        match self.stream.next_release_ns() {
            Some(t) => {
                self.sleep.reset(t);
                true
            }
            None => {
                self.sleep.clear();
                false
            }
        }
    }

    fn report_lost(&mut self, stats: &TapStats) {
        let lost = self.stream.stats().lost;
        if lost > self.lost_reported {
            stats.add_lost(self.dir, lost - self.lost_reported);
            self.lost_reported = lost;
        }
    }
}
