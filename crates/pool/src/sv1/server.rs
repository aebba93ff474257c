//! The tokio shell around [`Session`]: accepts miners (admission control first), reads lines,
//! delivers new work, waits for the store before acknowledging, and says goodbye with
//! `client.reconnect` on shutdown.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use events::{ConnectionClosed, ConnectionOpened};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::sleep_until;

use crate::admission::{BanList, Decision, Rate, RateLimiter};
use crate::engine::Engine;
use crate::sv1::session::{LineKind, Session, Sv1Config};
use crate::Millis;

/// Limits that protect the pool from peers that are not well-behaved miners.
#[derive(Clone, Debug)]
pub struct Admission {
    pub max_connections: usize,
    /// New connections per source IP.
    pub connect_rate: Rate,
    /// Messages per connection.
    pub message_rate: Rate,
    /// Longest line accepted (bytes); a longer one is answered with an error and closed.
    pub max_line: usize,
    /// A connection must subscribe and authorize within this long.
    pub handshake_timeout: Duration,
    /// A connection that sends nothing for this long is closed.
    pub idle_timeout: Duration,
    /// This many rejected shares in a row (stale ones excepted) bans the source IP.
    pub invalid_share_ban_after: u32,
    pub ban_duration: Duration,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            max_connections: 15_000,
            // A farm behind one address reconnects all at once after a pool restart.
            connect_rate: Rate {
                per_second: 500.0,
                burst: 20_000.0,
            },
            // An aggregating proxy speaks for many devices on one connection.
            message_rate: Rate {
                per_second: 1_000.0,
                burst: 5_000.0,
            },
            max_line: 8 * 1024,
            handshake_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
            invalid_share_ban_after: 200,
            ban_duration: Duration::from_secs(600),
        }
    }
}

/// Everything the connection tasks share.
pub struct Sv1Server {
    pub engine: Arc<Engine>,
    pub config: Arc<Sv1Config>,
    pub admission: Admission,
    connect_limiter: RateLimiter<IpAddr>,
    /// Refusals by the connect limiter, per address: an address refused over and over is a
    /// reconnect flood and gets banned.
    refusals: RateLimiter<IpAddr>,
    bans: BanList<IpAddr>,
    connections: AtomicUsize,
    start: Instant,
    /// Where miners are told to reconnect on shutdown (host, port).
    pub reconnect_to: Option<(String, u16)>,
}

impl Sv1Server {
    pub fn new(engine: Arc<Engine>, config: Sv1Config, admission: Admission) -> Arc<Self> {
        Arc::new(Sv1Server {
            engine,
            config: Arc::new(config),
            connect_limiter: RateLimiter::new(admission.connect_rate, 100_000),
            refusals: RateLimiter::new(
                Rate {
                    per_second: 10.0,
                    burst: 1_000.0,
                },
                100_000,
            ),
            admission,
            bans: BanList::default(),
            connections: AtomicUsize::new(0),
            start: Instant::now(),
            reconnect_to: None,
        })
    }

    pub fn now(&self) -> Millis {
        Millis(self.start.elapsed().as_millis() as u64)
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// Accepts miners until `shutdown` turns true; then every connection is sent
    /// `client.reconnect` and closed.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: watch::Receiver<bool>) {
        let mut stop = shutdown.clone();
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stopped(&mut stop) => break,
            };
            let (stream, peer) = match accepted {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "sv1 accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if let Err(why) = self.admit(peer.ip()) {
                tracing::debug!(%peer, why, "connection refused");
                drop(stream);
                continue;
            }
            let _ = stream.set_nodelay(true);
            let server = self.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                server.connection(stream, peer, shutdown).await;
                server.connections.fetch_sub(1, Ordering::Relaxed);
            });
        }
    }

    fn admit(&self, ip: IpAddr) -> Result<(), &'static str> {
        let now = self.now();
        if self.bans.is_banned(&ip, now) {
            return Err("banned");
        }
        if self.connections.load(Ordering::Relaxed) >= self.admission.max_connections {
            return Err("too many connections");
        }
        match self.connect_limiter.check(ip, now) {
            Decision::Allow => {}
            Decision::Limit => {
                // Over the rate: refuse this one; refused again and again, it is a flood.
                if self.refusals.check(ip, now) == Decision::Limit {
                    self.bans
                        .ban(ip, now.plus(self.admission.ban_duration.as_millis() as u64));
                }
                return Err("connect rate");
            }
            Decision::Untracked => return Err("admission table full"),
        }
        self.connections.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn connection(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let engine = &self.engine;
        let now = self.now();
        let mut session = Session::new(engine.clone(), self.config.clone(), now);
        let conn = session.conn();
        if engine.events.is_enabled() {
            engine.events.emit(ConnectionOpened {
                conn,
                peer,
                local: stream.local_addr().unwrap_or(peer),
                label: events::ShortStr::new(""),
            });
        }
        tracing::debug!(conn, %peer, "miner connected");
        let mut work = engine.subscribe();
        work.mark_unchanged();
        let mut conn_state = ConnState {
            partial: Vec::new(),
            tokens: self.admission.message_rate.burst,
            last_refill: now,
            last_activity: now,
            rejected_in_a_row: 0,
        };
        let started = now;
        let tick = Duration::from_secs(5);
        let mut next_tick = tokio::time::Instant::now() + tick;
        let why = loop {
            tokio::select! {
                r = stream.readable() => {
                    if r.is_err() { break "read error"; }
                    match self.read_lines(&stream, &mut session, &mut conn_state) {
                        Ok(true) => {}
                        Ok(false) => break "closed by miner",
                        Err(why) => {
                            let _ = self.flush(&stream, &mut session).await;
                            break why;
                        }
                    }
                }
                changed = work.changed() => {
                    if changed.is_err() { break "engine stopped"; }
                    let g = work.borrow_and_update().clone();
                    session.on_generation(g.as_ref(), self.now());
                }
                _ = sleep_until(next_tick) => {
                    next_tick += tick;
                    let now = self.now();
                    session.on_tick(now);
                    if !session.is_working()
                        && now.since(started) > self.admission.handshake_timeout.as_millis() as u64
                    {
                        break "handshake timeout";
                    }
                    if now.since(conn_state.last_activity) > self.admission.idle_timeout.as_millis() as u64 {
                        break "idle timeout";
                    }
                }
                _ = stopped(&mut shutdown) => {
                    if let Some((host, port)) = &self.reconnect_to {
                        session.reconnect(host, *port, 5);
                    }
                    let _ = self.flush(&stream, &mut session).await;
                    break "pool shutting down";
                }
            }
            if self.flush(&stream, &mut session).await.is_err() {
                break "write error";
            }
        };
        let now = self.now();
        session.closed(now);
        if conn_state.rejected_in_a_row >= self.admission.invalid_share_ban_after {
            self.bans.ban(
                peer.ip(),
                now.plus(self.admission.ban_duration.as_millis() as u64),
            );
        }
        if engine.events.is_enabled() {
            engine.events.emit(ConnectionClosed {
                conn,
                reason: events::ShortStr::new(why),
            });
        }
        if matches!(why, "closed by miner" | "pool shutting down") {
            tracing::debug!(conn, %peer, why, "miner disconnected");
        } else {
            tracing::info!(conn, %peer, why, "miner disconnected");
        }
    }

    /// Reads what is there and handles every complete line. `Ok(false)`: the miner closed.
    fn read_lines(
        &self,
        stream: &TcpStream,
        session: &mut Session,
        st: &mut ConnState,
    ) -> Result<bool, &'static str> {
        let mut buf = [0u8; 4096];
        loop {
            let n = match stream.try_read(&mut buf) {
                Ok(0) => return Ok(false),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
                Err(_) => return Err("read error"),
            };
            let now = self.now();
            st.last_activity = now;
            let mut data = &buf[..n];
            // Complete the line held over from the last read, if any.
            if !st.partial.is_empty() {
                match data.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        let mut line = std::mem::take(&mut st.partial);
                        line.extend_from_slice(&data[..i]);
                        data = &data[i + 1..];
                        self.line(session, st, &line, now)?;
                    }
                    None => {
                        st.partial.extend_from_slice(data);
                        if st.partial.len() > self.admission.max_line {
                            session.line_too_long();
                            return Err("line too long");
                        }
                        continue;
                    }
                }
            }
            while let Some(i) = data.iter().position(|&b| b == b'\n') {
                self.line(session, st, &data[..i], now)?;
                data = &data[i + 1..];
            }
            if !data.is_empty() {
                if data.len() > self.admission.max_line {
                    session.line_too_long();
                    return Err("line too long");
                }
                st.partial.extend_from_slice(data);
            }
            if n < buf.len() {
                return Ok(true);
            }
        }
    }

    fn line(
        &self,
        session: &mut Session,
        st: &mut ConnState,
        line: &[u8],
        now: Millis,
    ) -> Result<(), &'static str> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        if line.len() > self.admission.max_line {
            session.line_too_long();
            return Err("line too long");
        }
        let rate = self.admission.message_rate;
        let elapsed = now.since(st.last_refill) as f64 / 1000.0;
        st.tokens = (st.tokens + elapsed * rate.per_second).min(rate.burst);
        st.last_refill = now;
        if st.tokens < 1.0 {
            return Err("message rate");
        }
        st.tokens -= 1.0;
        let started = Instant::now();
        if let LineKind::Share(verdict) = session.handle_line(line, now) {
            self.engine
                .stats
                .share_processing(started.elapsed().as_nanos() as u64);
            if verdict.is_accepted() {
                st.rejected_in_a_row = 0;
            } else if verdict.reason() != Some(events::Reason::Stale) {
                st.rejected_in_a_row += 1;
                if st.rejected_in_a_row >= self.admission.invalid_share_ban_after {
                    return Err("too many invalid shares");
                }
            }
        }
        if session.wants_close().is_some() {
            return Err("too many malformed messages");
        }
        Ok(())
    }

    /// Writes the session's output once the acknowledgements in it are durable.
    async fn flush(&self, stream: &TcpStream, session: &mut Session) -> std::io::Result<()> {
        if let Some(t) = session.take_pending_ticket() {
            if let Some(store) = &self.engine.store {
                if let Err(e) = store.wait_durable(t).await {
                    // Never acknowledge what the store could not make durable.
                    tracing::error!(error = %e, "store failed: closing the connection unacknowledged");
                    return Err(std::io::Error::other("store failed"));
                }
            }
        }
        let out = session.output();
        if out.is_empty() {
            return Ok(());
        }
        let mut written = 0;
        while written < out.len() {
            match stream.try_write(&out[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    stream.writable().await?;
                }
                Err(e) => return Err(e),
            }
        }
        out.clear();
        // A burst (a long job) may have grown the buffer: give memory back when idle.
        if out.capacity() > 16 * 1024 {
            out.shrink_to(1024);
        }
        Ok(())
    }
}

/// Resolves when `shutdown` turns true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

struct ConnState {
    /// The start of a line whose end has not arrived yet (usually empty: no allocation).
    partial: Vec<u8>,
    tokens: f64,
    last_refill: Millis,
    last_activity: Millis,
    rejected_in_a_row: u32,
}
