//! One relayed connection: the tokio shell around a [`Stream`] per direction.
//!
//! One task per connection owns both sockets. Each pass of its loop reads what has arrived
//! (stamping each read with its arrival time), releases what is due, writes it, and then waits
//! for the next of: bytes to read, room to write, a release time ([`crate::timer`]), the report
//! tick or the tap's shutdown. Reading stops while a direction holds `buffer_bytes`
//! unreleased or unwritten, so a sender that is too far ahead is held back by TCP's own flow
//! control rather than by the tap's memory.
//!
//! A FIN from one side travels like data and is forwarded as a half-close once everything ahead
//! of it has been written; the connection ends when both directions have closed this way. A
//! read or write error on either socket ends both, with a reset, so the peers see a failure
//! rather than a clean end.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use events::{now_ns, ConnectionClosed, Direction, EventKind, LinkBytes, LinkRtt, ShortStr};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::config::TapConfig;
use crate::net;
use crate::pipe::Pipe;
use crate::stats::TapStats;
use crate::sv1_watch::Sv1Watch;
use crate::timer::TimerHandle;

pub(crate) mod leg;

pub(crate) use leg::Leg;

/// What a tap's connections share.
pub(crate) struct Shared {
    pub config: TapConfig,
    pub link_name: ShortStr,
    /// The bandwidth cap's pipes (up, down); `None` on an unlimited link.
    pub pipes: Option<[Mutex<Pipe>; 2]>,
    pub timer: TimerHandle,
    pub stats: Arc<TapStats>,
}

/// Relays `client` to the upstream until both sides close, an error, or `cancel`.
pub(crate) async fn relay(
    shared: Arc<Shared>,
    conn: u64,
    client: TcpStream,
    accepted_ns: u64,
    mut cancel: watch::Receiver<bool>,
) {
    let cfg = &shared.config;
    let connect = net::connect(cfg.upstream, cfg.source_addr, cfg.connect_timeout);
    let upstream = tokio::select! {
        r = connect => r,
        _ = cancel.changed() => Err(io::Error::new(io::ErrorKind::Interrupted, "tap shutting down")),
    };
    let upstream = match upstream {
        Ok(s) => s,
        Err(e) => {
            let counter = if net::is_out_of_descriptors(&e) {
                &shared.stats.refused
            } else {
                &shared.stats.upstream_failed
            };
            // Clients reconnecting to a dead upstream would flood the log: 1st, 2nd, 4th, ...
            let n = counter.fetch_add(1, Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(conn, upstream = %cfg.upstream, error = %e, times = n, "cannot reach the upstream: closing the client");
            }
            net::set_reset_on_close(&client);
            cfg.events.emit(ConnectionClosed {
                conn,
                reason: ShortStr::new("upstream"),
            });
            shared.stats.open.fetch_sub(1, Relaxed);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    // The client inherited stamping from the listener. Without stamps (an unusual kernel)
    // arrival is when the tap reads: a little later.
    net::enable_rx_timestamps(&upstream);
    if let Some(sv2) = &cfg.sv2 {
        crate::sv2_relay::relay(
            &shared,
            sv2,
            conn,
            &client,
            &upstream,
            accepted_ns,
            &mut cancel,
        )
        .await;
        shared.stats.open.fetch_sub(1, Relaxed);
        return;
    }
    let watch = Sv1Watch::new(cfg.protocol, cfg.max_line);
    let mut c = Connection::new(&shared, conn, accepted_ns, Plain { watch });
    let reason = match c.run(&client, &upstream, &mut cancel, None).await {
        Ok(reason) => reason,
        Err(e) => {
            net::set_reset_on_close(&client);
            net::set_reset_on_close(&upstream);
            let reason = close_reason(&e);
            tracing::debug!(conn, error = %e, reason, "connection failed");
            reason
        }
    };
    c.finish(reason);
    shared.stats.open.fetch_sub(1, Relaxed);
}

pub(crate) fn close_reason(e: &io::Error) -> &'static str {
    use io::ErrorKind::*;
    match e.kind() {
        ConnectionReset | BrokenPipe | ConnectionAborted | NotConnected => "reset",
        TimedOut => "timeout",
        _ => "error",
    }
}

/// What a relay makes of its peers' bytes: the plain relay queues them as they came and reads
/// SV1 lines in them, the SV2 relay re-encrypts them and reads its frames. The link emulation
/// around them ([`Connection`], [`Leg`]) is the same.
pub(crate) trait Relaying {
    type Error: From<io::Error>;

    /// Reads what has arrived from both peers (`sources`: the client, then the upstream), while
    /// their legs want it, and queues it; as it came, unless the relaying makes something of it.
    fn read(
        &mut self,
        shared: &Shared,
        legs: &mut Legs,
        sources: [&TcpStream; 2],
    ) -> Result<(), Self::Error> {
        legs.up.read(sources[0], shared)?;
        legs.down.read(sources[1], shared)?;
        Ok(())
    }

    /// Whether the client is read now, buffer cap aside.
    fn reads_client(&self) -> bool {
        true
    }

    /// Whether the handshake deadline given to [`Connection::run`] still applies.
    fn handshaking(&self) -> bool {
        false
    }

    /// What ends the connection when the handshake deadline passes.
    fn handshake_expired(&self) -> Self::Error;

    /// Reads a chunk as it leaves the tap in direction `dir`.
    fn observe(&mut self, conn: u64, dir: Direction, chunk: &[u8], events: &mut Vec<EventKind>);

    /// Reports the byte counts since the last report.
    fn report_bytes(&mut self, shared: &Shared, conn: u64, legs: &mut Legs);

    /// Adds what the connection carried to the tap's totals, when it ends.
    fn count(&self, stats: &TapStats);

    fn log_closed(&self, conn: u64, reason: &str, legs: &Legs);
}

/// A connection's two directions: `up` is written to the upstream, `down` to the client.
pub(crate) struct Legs {
    pub up: Leg,
    pub down: Leg,
}

/// The link-emulation pump of one connection, whatever it relays.
pub(crate) struct Connection<'a, R> {
    shared: &'a Shared,
    conn: u64,
    legs: Legs,
    relaying: R,
    /// Events produced while releasing, emitted after each pass (reused: no allocation).
    events: Vec<EventKind>,
}

impl<'a, R: Relaying> Connection<'a, R> {
    pub(crate) fn new(shared: &'a Shared, conn: u64, accepted_ns: u64, relaying: R) -> Self {
        Connection {
            shared,
            conn,
            legs: Legs {
                up: Leg::new(shared, conn, Direction::Up, accepted_ns),
                down: Leg::new(shared, conn, Direction::Down, accepted_ns),
            },
            relaying,
            events: Vec::new(),
        }
    }

    /// Relays until both directions have closed (`"eof"`) or `cancel` (`"shutdown"`); with a
    /// `handshake_deadline`, fails if the relaying is still handshaking by then.
    pub(crate) async fn run(
        &mut self,
        client: &TcpStream,
        upstream: &TcpStream,
        cancel: &mut watch::Receiver<bool>,
        handshake_deadline: Option<tokio::time::Instant>,
    ) -> Result<&'static str, R::Error> {
        let every = self
            .shared
            .config
            .report_interval
            .max(std::time::Duration::from_millis(1));
        let mut report = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let handshake =
            tokio::time::sleep_until(handshake_deadline.unwrap_or_else(tokio::time::Instant::now));
        tokio::pin!(handshake);
        loop {
            self.relaying
                .read(self.shared, &mut self.legs, [client, upstream])?;
            let now = now_ns();
            let stats = &self.shared.stats;
            for leg in [&mut self.legs.up, &mut self.legs.down] {
                let dir = leg.dir();
                leg.release(now, stats, |chunk| {
                    self.relaying
                        .observe(self.conn, dir, chunk, &mut self.events)
                });
            }
            for e in self.events.drain(..) {
                self.shared.config.events.emit(e);
            }
            let up_blocked = self.legs.up.write(upstream)?;
            let down_blocked = self.legs.down.write(client)?;
            if self.legs.up.fin_sent && self.legs.down.fin_sent {
                return Ok("eof");
            }
            let client_read = self.legs.up.wants_read() && self.relaying.reads_client();
            let upstream_read = self.legs.down.wants_read();
            let up_timed = self.legs.up.arm();
            let down_timed = self.legs.down.arm();
            let handshaking = handshake_deadline.is_some() && self.relaying.handshaking();
            tokio::select! {
                r = client.readable(), if client_read => r?,
                r = upstream.readable(), if upstream_read => r?,
                r = upstream.writable(), if up_blocked => r?,
                r = client.writable(), if down_blocked => r?,
                _ = &mut self.legs.up.sleep, if up_timed => {}
                _ = &mut self.legs.down.sleep, if down_timed => {}
                _ = &mut handshake, if handshaking => return Err(self.relaying.handshake_expired()),
                _ = report.tick() => self.report(),
                _ = cancel.changed() => return Ok("shutdown"),
            }
        }
    }

    /// Byte deltas, losses, and the round trip the tap applied most recently, to the events.
    fn report(&mut self) {
        let shared = self.shared;
        self.relaying
            .report_bytes(shared, self.conn, &mut self.legs);
        let Legs { up, down } = &mut self.legs;
        up.report_lost(&shared.stats);
        down.report_lost(&shared.stats);
        if up.fresh && down.fresh {
            let rtt_ns = up.last_applied_ns + down.last_applied_ns;
            shared.config.events.emit(LinkRtt {
                link: shared.link_name,
                conn: self.conn,
                rtt_ns,
            });
            shared.stats.record_rtt(rtt_ns);
            up.fresh = false;
            down.fresh = false;
        }
    }

    pub(crate) fn finish(mut self, reason: &str) {
        self.report();
        self.relaying.count(&self.shared.stats);
        self.shared.config.events.emit(ConnectionClosed {
            conn: self.conn,
            reason: ShortStr::new(reason),
        });
        self.relaying.log_closed(self.conn, reason, &self.legs);
    }
}

/// Emits `LinkBytes` for `bytes` crossing in `direction` and adds them to the totals.
pub(crate) fn link_bytes(shared: &Shared, conn: u64, direction: Direction, bytes: u64) {
    if bytes > 0 {
        shared.config.events.emit(LinkBytes {
            link: shared.link_name,
            conn,
            direction,
            bytes,
        });
        shared.stats.add_bytes(direction, bytes);
    }
}

/// The plain relay: bytes pass as they came, and SV1 lines are read as they leave.
struct Plain {
    watch: Sv1Watch,
}

impl Relaying for Plain {
    type Error = io::Error;

    fn handshake_expired(&self) -> io::Error {
        io::ErrorKind::TimedOut.into()
    }

    fn observe(&mut self, conn: u64, dir: Direction, chunk: &[u8], events: &mut Vec<EventKind>) {
        self.watch.observe(conn, dir, chunk, events);
    }

    fn report_bytes(&mut self, shared: &Shared, conn: u64, legs: &mut Legs) {
        for leg in [&mut legs.up, &mut legs.down] {
            link_bytes(shared, conn, leg.dir(), leg.written.take_delta());
        }
    }

    fn count(&self, stats: &TapStats) {
        if self.watch.is_reading() || self.watch.overflowed() {
            stats.sv1_connections.fetch_add(1, Relaxed);
            stats.add_sv1(Direction::Up, self.watch.counts(Direction::Up));
            stats.add_sv1(Direction::Down, self.watch.counts(Direction::Down));
        }
        if self.watch.overflowed() {
            stats.sv1_overflows.fetch_add(1, Relaxed);
        }
    }

    fn log_closed(&self, conn: u64, reason: &str, legs: &Legs) {
        tracing::debug!(
            conn,
            reason,
            up = legs.up.written.total(),
            down = legs.down.written.total(),
            "connection closed"
        );
    }
}
