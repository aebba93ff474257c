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
use crate::counter::ByteCounter;
use crate::link::ns;
use crate::net;
use crate::pipe::Pipe;
use crate::stats::TapStats;
use crate::stream::{stream_seed, Stream};
use crate::sv1_watch::Sv1Watch;
use crate::timer::{Sleep, TimerHandle};

/// Bytes asked for per read: a Stratum message is far smaller, a bulk transfer reads again.
const READ_SIZE: usize = 4096;
/// An emptied buffer larger than this is given back, so that a burst does not pin memory on
/// an idle connection.
const KEEP_CAPACITY: usize = 64 * 1024;

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
    let mut c = Connection::new(Arc::clone(&shared), conn, accepted_ns);
    let reason = match c.run(&client, &upstream, &mut cancel).await {
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

fn close_reason(e: &io::Error) -> &'static str {
    use io::ErrorKind::*;
    match e.kind() {
        ConnectionReset | BrokenPipe | ConnectionAborted | NotConnected => "reset",
        TimedOut => "timeout",
        _ => "error",
    }
}

struct Connection {
    shared: Arc<Shared>,
    conn: u64,
    up: Leg,
    down: Leg,
    watch: Sv1Watch,
    /// Events the SV1 reader produced, emitted after each pass (reused: no allocation).
    events: Vec<EventKind>,
}

impl Connection {
    fn new(shared: Arc<Shared>, conn: u64, accepted_ns: u64) -> Self {
        let cfg = &shared.config;
        let watch = Sv1Watch::new(cfg.protocol, cfg.max_line);
        let up = Leg::new(&shared, conn, Direction::Up, accepted_ns);
        let down = Leg::new(&shared, conn, Direction::Down, accepted_ns);
        Connection {
            shared,
            conn,
            up,
            down,
            watch,
            events: Vec::new(),
        }
    }

    async fn run(
        &mut self,
        client: &TcpStream,
        upstream: &TcpStream,
        cancel: &mut watch::Receiver<bool>,
    ) -> io::Result<&'static str> {
        let cap = self.shared.config.buffer_bytes.max(1);
        let every = self
            .shared
            .config
            .report_interval
            .max(std::time::Duration::from_millis(1));
        let mut report = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.up.read(client, &self.shared, cap)?;
            self.down.read(upstream, &self.shared, cap)?;
            let now = now_ns();
            self.up.release(
                self.conn,
                now,
                &mut self.watch,
                &mut self.events,
                &self.shared.stats,
            );
            self.down.release(
                self.conn,
                now,
                &mut self.watch,
                &mut self.events,
                &self.shared.stats,
            );
            for e in self.events.drain(..) {
                self.shared.config.events.emit(e);
            }
            let up_blocked = self.up.write(upstream)?;
            let down_blocked = self.down.write(client)?;
            if self.up.fin_sent && self.down.fin_sent {
                return Ok("eof");
            }
            let up_read = self.up.wants_read(cap);
            let down_read = self.down.wants_read(cap);
            let up_timed = self.up.arm();
            let down_timed = self.down.arm();
            tokio::select! {
                r = client.readable(), if up_read => r?,
                r = upstream.readable(), if down_read => r?,
                r = upstream.writable(), if up_blocked => r?,
                r = client.writable(), if down_blocked => r?,
                _ = &mut self.up.sleep, if up_timed => {}
                _ = &mut self.down.sleep, if down_timed => {}
                _ = report.tick() => self.report(),
                _ = cancel.changed() => return Ok("shutdown"),
            }
        }
    }

    /// Byte deltas, and the round trip the tap applied most recently, to the events.
    fn report(&mut self) {
        self.up.report(self.conn, &self.shared);
        self.down.report(self.conn, &self.shared);
        if self.up.fresh && self.down.fresh {
            let rtt_ns = self.up.last_applied_ns + self.down.last_applied_ns;
            self.shared.config.events.emit(LinkRtt {
                link: self.shared.link_name,
                conn: self.conn,
                rtt_ns,
            });
            self.shared.stats.record_rtt(rtt_ns);
            self.up.fresh = false;
            self.down.fresh = false;
        }
    }

    fn finish(mut self, reason: &str) {
        self.report();
        let stats = &self.shared.stats;
        if self.watch.is_reading() || self.watch.overflowed() {
            stats.sv1_connections.fetch_add(1, Relaxed);
            stats.add_sv1(Direction::Up, self.watch.counts(Direction::Up));
            stats.add_sv1(Direction::Down, self.watch.counts(Direction::Down));
        }
        if self.watch.overflowed() {
            stats.sv1_overflows.fetch_add(1, Relaxed);
        }
        self.shared.config.events.emit(ConnectionClosed {
            conn: self.conn,
            reason: ShortStr::new(reason),
        });
        tracing::debug!(
            conn = self.conn,
            reason,
            up = self.up.bytes.total(),
            down = self.down.bytes.total(),
            "connection closed"
        );
    }
}

/// One direction of a connection: bytes from the source socket held until their release, then
/// written to the destination socket.
struct Leg {
    dir: Direction,
    lane: usize,
    stream: Stream,
    /// `buf[start..]` is what has been read and not yet written; of it, the first `due` bytes
    /// are released (ready to write).
    buf: Vec<u8>,
    start: usize,
    due: usize,
    eof_read: bool,
    fin_due: bool,
    fin_sent: bool,
    bytes: ByteCounter,
    sleep: Sleep,
    last_applied_ns: u64,
    /// A chunk was released since the last `LinkRtt`.
    fresh: bool,
    lost_reported: u64,
}

impl Leg {
    fn new(shared: &Shared, conn: u64, dir: Direction, accepted_ns: u64) -> Self {
        let link = &shared.config.link;
        let mut stream = Stream::new(link, dir, stream_seed(shared.config.seed, conn, dir));
        stream.hold_until(accepted_ns.saturating_add(ns(link.handshake_hold(dir))));
        Leg {
            dir,
            lane: matches!(dir, Direction::Down) as usize,
            stream,
            buf: Vec::new(),
            start: 0,
            due: 0,
            eof_read: false,
            fin_due: false,
            fin_sent: false,
            bytes: ByteCounter::default(),
            sleep: shared.timer.sleep(),
            last_applied_ns: 0,
            fresh: false,
            lost_reported: 0,
        }
    }

    fn wants_read(&self, cap: usize) -> bool {
        !self.eof_read && self.buf.len() - self.start < cap
    }

    /// Reads everything available (up to the buffer cap), each read a chunk of its own that
    /// arrived when the kernel received its last byte (when the socket stamps them: a tap
    /// that gets to a read late does not add its lateness to the delay).
    fn read(&mut self, src: &TcpStream, shared: &Shared, cap: usize) -> io::Result<()> {
        while self.wants_read(cap) {
            self.buf.reserve(READ_SIZE);
            match net::recv_stamped(src, &mut self.buf) {
                Ok((0, _)) => {
                    self.eof_read = true;
                    self.stream.push_fin(now_ns());
                }
                Ok((n, stamp)) => {
                    let now = net::rx_monotonic_ns(stamp);
                    match &shared.pipes {
                        Some(pipes) => {
                            let mut pipe =
                                pipes[self.lane].lock().unwrap_or_else(|e| e.into_inner());
                            self.stream.push(now, n, Some(&mut pipe));
                        }
                        None => {
                            self.stream.push(now, n, None);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Marks the chunks due by `now` as ready to write, reading a copy of each.
    fn release(
        &mut self,
        conn: u64,
        now: u64,
        watch: &mut Sv1Watch,
        events: &mut Vec<EventKind>,
        stats: &TapStats,
    ) {
        while let Some(r) = self.stream.pop_due(now) {
            if r.fin {
                self.fin_due = true;
                continue;
            }
            let from = self.start + self.due;
            watch.observe(conn, self.dir, &self.buf[from..from + r.len], events);
            self.due += r.len;
            // From when the link could carry it: the handshake's hold is not link delay.
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
                    self.bytes.add(n);
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
            // Copies at most as many bytes as were consumed: amortized constant per byte.
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    /// Points the sleep at the next release; `false` when nothing waits for one.
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

    fn report(&mut self, conn: u64, shared: &Shared) {
        let delta = self.bytes.take_delta();
        if delta > 0 {
            shared.config.events.emit(LinkBytes {
                link: shared.link_name,
                conn,
                direction: self.dir,
                bytes: delta,
            });
            shared.stats.add_bytes(self.dir, delta);
        }
        let lost = self.stream.stats().lost;
        if lost > self.lost_reported {
            shared.stats.add_lost(self.dir, lost - self.lost_reported);
            self.lost_reported = lost;
        }
    }
}
