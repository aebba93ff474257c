//! The tokio shell around [`Session`]: accepts miners (admission control first), reads lines,
//! delivers new work, waits for the store before acknowledging, and says goodbye with
//! `client.reconnect` on shutdown.
//!
//! New work reaches every connection the same way (the notify fan-out): one herald task
//! turns the engine's new generation, the periodic tick and shutdown into counters and wakes
//! every connection task in one pass (`Wakers`); each task compares the counters with what it
//! saw, lets its session issue the job and writes the job's shared `mining.notify` line with
//! one vectored write, next to its own bytes, without copying it. A connection task holds no
//! timer or channel waiter of its own, so an idle connection costs little more than its
//! session.

use std::future::{poll_fn, Future};
use std::io::IoSlice;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use events::{ConnectionClosed, ConnectionOpened, LinkCounter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{MissedTickBehavior, Sleep};

use crate::engine::Engine;
use crate::front::{stopped, Front};
use crate::store::ACK_WAIT_LIMIT;
use crate::sv1::session::{LineKind, Session, Sv1Config};
use crate::sv1::wakers::{Slot as WakerSlot, Wakers};
use crate::Timestamp;
use edge::{BanReason, Gate, MessageBudget, Slot};
use sv1::LineBuffer;

/// How often every connection checks its idle timeout, flushes held share records and lets
/// vardiff step a quiet miner down. The handshake timeout has a timer of its own.
const TICK: Duration = Duration::from_secs(5);

/// Everything the connection tasks share.
pub struct Sv1Server {
    /// The share-accounting engine.
    pub engine: Arc<Engine>,
    /// The SV1 front end's settings.
    pub config: Arc<Sv1Config>,
    /// Admission, the sessions' clock and the bytes from and to miners' sockets (link "sv1").
    pub(crate) front: Front,
    /// Where miners are told to reconnect on shutdown (host, port).
    pub reconnect_to: Option<(String, u16)>,
    /// The connection tasks the herald wakes.
    wakers: Wakers,
    /// Bumped by the herald for each new generation (or work stopped), each tick; compared
    /// for equality only, so wrapping is harmless.
    work_seq: AtomicU32,
    tick_seq: AtomicU32,
    shutting_down: AtomicBool,
}

/// What a connection task woke up for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wake {
    Shutdown,
    Work,
    Readable,
    ReadError,
    Tick,
    HandshakeTimeout,
}

/// The herald's counters as a connection last saw them.
struct Seen {
    work: u32,
    tick: u32,
}

/// Why a connection ended, in the words of its `ConnectionClosed` event and the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closed {
    ByMiner,
    ReadError,
    WriteError,
    WriteTimeout,
    LineTooLong,
    MessageRate,
    InvalidShares,
    MalformedMessages,
    HandshakeTimeout,
    IdleTimeout,
    StoreFailed,
    Shutdown,
}

impl Closed {
    fn as_str(self) -> &'static str {
        match self {
            Closed::ByMiner => "closed by miner",
            Closed::ReadError => "read error",
            Closed::WriteError => "write error",
            Closed::WriteTimeout => "write timeout",
            Closed::LineTooLong => "line too long",
            Closed::MessageRate => "message rate",
            Closed::InvalidShares => "too many invalid shares",
            Closed::MalformedMessages => "too many malformed messages",
            Closed::HandshakeTimeout => "handshake timeout",
            Closed::StoreFailed => "store failed",
            Closed::IdleTimeout => "idle timeout",
            Closed::Shutdown => "pool shutting down",
        }
    }
}

impl Sv1Server {
    /// A server with no connections yet; its clock starts now.
    pub fn new(engine: Arc<Engine>, config: Sv1Config, gate: Arc<Gate>) -> Arc<Self> {
        Arc::new(Sv1Server {
            engine,
            config: Arc::new(config),
            front: Front::new(gate, "sv1"),
            reconnect_to: None,
            wakers: Wakers::default(),
            work_seq: AtomicU32::new(0),
            tick_seq: AtomicU32::new(0),
            shutting_down: AtomicBool::new(false),
        })
    }

    /// Milliseconds since the server was made (the sessions' clock).
    pub fn now(&self) -> Timestamp {
        self.front.now()
    }

    /// Bytes read from and written to miners so far.
    pub fn net_bytes(&self) -> (u64, u64) {
        self.front.net.totals()
    }

    /// Accepts miners until `shutdown` turns true; then every connection is sent
    /// `client.reconnect` and closed.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: watch::Receiver<bool>) {
        let listener = self.front.gate.listeners().watch("sv1", listener);
        tokio::join!(
            self.clone().herald(shutdown.clone()),
            self.accept(listener, shutdown)
        );
    }

    /// Wakes every connection for a new generation (or work stopped), each tick, and once for
    /// shutdown, after which it ends.
    async fn herald(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut work = self.engine.subscribe();
        work.mark_unchanged();
        let mut work_open = true;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + TICK, TICK);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = stopped(&mut shutdown) => {
                    self.shutting_down.store(true, Ordering::Release);
                    self.wakers.wake_all();
                    // The goodbyes are being written now: let them count.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    self.front.net.report(&self.engine.events);
                    return;
                }
                changed = work.changed(), if work_open => {
                    // The engine is gone only when the pool is: nothing more to announce.
                    if changed.is_err() {
                        work_open = false;
                        continue;
                    }
                    self.work_seq.fetch_add(1, Ordering::AcqRel);
                    let woken = self.wakers.wake_all();
                    tracing::trace!(woken, "new work announced");
                }
                _ = tick.tick() => {
                    self.tick_seq.fetch_add(1, Ordering::AcqRel);
                    self.wakers.wake_all();
                    self.front.net.report(&self.engine.events);
                }
            }
        }
    }

    async fn accept(self: Arc<Self>, listener: Arc<TcpListener>, shutdown: watch::Receiver<bool>) {
        let mut stop = shutdown;
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stopped(&mut stop) => break,
            };
            let Some((stream, peer, slot)) = self.front.admit(accepted).await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(self.clone().connection(stream, peer, slot));
        }
    }

    /// Opens an admitted miner's session and returns the task serving it until it closes.
    /// The opening is done here, outside the task, whose state is per connection and so kept
    /// small (see the test on its size): the task holds its slot (which knows the peer's IP),
    /// not the peer's address.
    fn connection(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        slot: Slot,
    ) -> impl Future<Output = ()> + Send + 'static {
        let now = self.now();
        let mut session = Session::new(self.engine.clone(), self.config.clone(), now);
        session.set_origin(peer.ip());
        let conn = session.conn();
        if self.engine.events.is_enabled() {
            self.engine.events.emit(ConnectionOpened {
                conn,
                peer,
                local: stream.local_addr().unwrap_or(peer),
                label: events::ShortStr::new(""),
            });
        }
        tracing::debug!(conn, %peer, "miner connected");
        let started = now;
        // A block capturing in place rather than an async fn, which would keep its arguments
        // twice; the connection id is read from the session rather than kept.
        async move {
            let mut waker = self.wakers.slot();
            let mut seen = Seen {
                work: self.work_seq.load(Ordering::Acquire),
                tick: self.tick_seq.load(Ordering::Acquire),
            };
            let mut conn_state = ConnState {
                lines: LineBuffer::new(self.front.admission().max_line),
                budget: MessageBudget::new(self.front.admission().message_rate, started),
                last_activity: started,
                rejected_in_a_row: 0,
                handshake: Some(Box::pin(tokio::time::sleep(
                    self.front.admission().handshake_timeout,
                ))),
            };
            let why = loop {
                let wake = poll_fn(|cx| {
                    self.poll_wake(
                        cx,
                        &stream,
                        &mut waker,
                        &mut seen,
                        &mut conn_state.handshake,
                    )
                })
                .await;
                // Set when the connection ends once what the session wrote (a goodbye, an error
                // reply) is out.
                let mut ending = None;
                match wake {
                    Wake::Shutdown => {
                        if let Some((host, port)) = &self.reconnect_to {
                            session.reconnect(host, *port, 5);
                        }
                        ending = Some(Closed::Shutdown);
                    }
                    Wake::Work => {
                        session.handle_generation(self.engine.current().as_ref(), self.now())
                    }
                    Wake::Readable => match self.read_lines(&stream, &mut session, &mut conn_state)
                    {
                        Ok(true) => {}
                        Ok(false) => break Closed::ByMiner,
                        Err(why) => ending = Some(why),
                    },
                    Wake::ReadError => break Closed::ReadError,
                    Wake::HandshakeTimeout => break Closed::HandshakeTimeout,
                    Wake::Tick => {
                        let now = self.now();
                        session.handle_tick(now);
                        if now.millis_since(conn_state.last_activity)
                            > self.front.admission().idle_timeout.as_millis() as u64
                        {
                            break Closed::IdleTimeout;
                        }
                    }
                }
                // Acknowledgements wait until the store has the shares (awaited here: a helper
                // future would only make every connection's task bigger).
                if let Some(t) = session.take_pending_ticket() {
                    if let Some(store) = &self.engine.store {
                        if let Err(e) = store.wait_durable_within(t, ACK_WAIT_LIMIT).await {
                            // Never acknowledge what the store could not make durable: the
                            // miner is told so, and mines on.
                            tracing::error!(
                                conn = session.conn(),
                                error = %e,
                                "store failed: shares in flight answered unconfirmed"
                            );
                            if !session.refuse_unconfirmed() {
                                // Fail closed: an acknowledgement that could not be turned
                                // into an error must not go out.
                                break Closed::StoreFailed;
                            }
                        }
                    }
                }
                if let Err(why) = self.write(&stream, &mut session).await {
                    break ending.unwrap_or(why);
                }
                if let Some(why) = ending {
                    break why;
                }
                if conn_state.handshake.is_some() && session.is_working() {
                    // Mining: the timer's memory goes back now rather than with the connection.
                    conn_state.handshake = None;
                }
            };
            drop(waker);
            self.closed(&mut session, &conn_state, slot, why);
        }
    }

    /// The bookkeeping of a connection that ended.
    fn closed(&self, session: &mut Session, st: &ConnState, slot: Slot, why: Closed) {
        let conn = session.conn();
        let (now, ip) = (self.now(), slot.ip());
        // A miner that subscribed and authorized but got no work (the pool had none to give)
        // finished its part of the handshake: no strike for the pool's own state.
        let authorized = session.is_authorized();
        session.closed(now);
        if st.rejected_in_a_row >= self.front.admission().invalid_share_ban_after {
            self.front.gate.ban(ip, now, BanReason::InvalidShares);
        }
        match why {
            Closed::MalformedMessages | Closed::LineTooLong => {
                self.front
                    .gate
                    .strike(ip, now, BanReason::MalformedMessages);
            }
            Closed::HandshakeTimeout if !authorized => {
                self.front
                    .gate
                    .strike(ip, now, BanReason::HandshakeFailures);
            }
            _ => {}
        }
        if self.engine.events.is_enabled() {
            self.engine.events.emit(ConnectionClosed {
                conn,
                reason: events::ShortStr::new(why.as_str()),
            });
        }
        let reason = why.as_str();
        if matches!(why, Closed::ByMiner | Closed::Shutdown) {
            tracing::debug!(conn, %ip, why = reason, "miner disconnected");
        } else {
            tracing::info!(conn, %ip, why = reason, "miner disconnected");
        }
        slot.close(reason);
    }

    /// Writes the session's output. A socket that takes it at once (the usual case) costs no
    /// timer; one that does not gets `--write-timeout` to drain, after which the miner, which
    /// has stopped reading, is closed and its buffers freed.
    async fn write(&self, stream: &TcpStream, session: &mut Session) -> Result<(), Closed> {
        // The batch is fixed while it is written (the session is ours until then): its lines
        // are counted by kind once, as they go out.
        for part in session.poll_transmit() {
            self.front
                .net
                .add_lines(events::Side::Server, false, part, sv1::line_kind);
        }
        let mut write = std::pin::pin!(poll_fn(|cx| poll_write(
            cx,
            stream,
            session,
            &self.front.net
        )));
        let first = poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
        let done = match first {
            Poll::Ready(r) => r,
            // Boxed: the timer is paid for only by a connection that is behind, and not in
            // every connection's task (see the test on its size).
            Poll::Pending => {
                match Box::pin(tokio::time::timeout(
                    self.front.admission().write_timeout,
                    write,
                ))
                .await
                {
                    Ok(r) => r,
                    Err(_) => return Err(Closed::WriteTimeout),
                }
            }
        };
        done.map_err(|_| Closed::WriteError)
    }

    /// What the connection should do next: shutdown first, then new work (it must not wait
    /// behind a busy miner's lines), then the miner's lines, then the handshake's deadline,
    /// then the tick.
    fn poll_wake(
        &self,
        cx: &mut Context<'_>,
        stream: &TcpStream,
        waker: &mut WakerSlot<'_>,
        seen: &mut Seen,
        handshake: &mut Option<Pin<Box<Sleep>>>,
    ) -> Poll<Wake> {
        // Registered before the counters are read, so a bump after the read wakes us again.
        waker.set(cx.waker());
        if self.shutting_down.load(Ordering::Acquire) {
            return Poll::Ready(Wake::Shutdown);
        }
        let work = self.work_seq.load(Ordering::Acquire);
        if work != seen.work {
            seen.work = work;
            return Poll::Ready(Wake::Work);
        }
        match stream.poll_read_ready(cx) {
            Poll::Ready(Ok(())) => return Poll::Ready(Wake::Readable),
            Poll::Ready(Err(_)) => return Poll::Ready(Wake::ReadError),
            Poll::Pending => {}
        }
        if let Some(deadline) = handshake {
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Wake::HandshakeTimeout);
            }
        }
        let tick = self.tick_seq.load(Ordering::Acquire);
        if tick != seen.tick {
            seen.tick = tick;
            return Poll::Ready(Wake::Tick);
        }
        Poll::Pending
    }

    /// Reads what is there and handles every complete line. `Ok(false)`: the miner closed.
    fn read_lines(
        &self,
        stream: &TcpStream,
        session: &mut Session,
        st: &mut ConnState,
    ) -> Result<bool, Closed> {
        let mut buf = [0u8; 4096];
        loop {
            let n = match stream.try_read(&mut buf) {
                Ok(0) => return Ok(false),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
                Err(_) => return Err(Closed::ReadError),
            };
            self.front.net.add_rx(n);
            let now = self.now();
            st.last_activity = now;
            let ConnState {
                lines,
                budget,
                rejected_in_a_row,
                ..
            } = st;
            let framed = lines.split(&buf[..n], |line| {
                // The bytes are counted above; this is the message by kind.
                self.front
                    .net
                    .add_line(events::Side::Server, true, line, sv1::line_kind);
                match self.line(session, budget, rejected_in_a_row, line, now) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(why) => ControlFlow::Break(why),
                }
            });
            match framed {
                Ok(None) => {}
                Ok(Some(why)) => return Err(why),
                Err(_) => {
                    session.line_too_long();
                    return Err(Closed::LineTooLong);
                }
            }
            if n < buf.len() {
                return Ok(true);
            }
        }
    }

    /// One line (framed: no newline, not blank, within `max_line`).
    fn line(
        &self,
        session: &mut Session,
        budget: &mut MessageBudget,
        rejected_in_a_row: &mut u32,
        line: &[u8],
        now: Timestamp,
    ) -> Result<(), Closed> {
        if !budget.take(self.front.admission().message_rate, now) {
            return Err(Closed::MessageRate);
        }
        let started = Instant::now();
        if let LineKind::Share(verdict) = session.handle_line(line, now) {
            self.engine
                .stats
                .share_processing(started.elapsed().as_nanos() as u64);
            if verdict.is_accepted() {
                *rejected_in_a_row = 0;
            } else if verdict.reason() != Some(events::Reason::Stale) {
                *rejected_in_a_row += 1;
                if *rejected_in_a_row >= self.front.admission().invalid_share_ban_after {
                    return Err(Closed::InvalidShares);
                }
            }
        }
        if session.wants_close().is_some() {
            return Err(Closed::MalformedMessages);
        }
        Ok(())
    }
}

/// Writes the session's output: its own bytes and the shared notify line in one vectored
/// write, more writes if the socket takes only part; then `JobSent` for the jobs in it. Waits
/// on the socket's own readiness slot, so the task keeps no waiter for it.
fn poll_write(
    cx: &mut Context<'_>,
    stream: &TcpStream,
    session: &mut Session,
    written_total: &LinkCounter,
) -> Poll<std::io::Result<()>> {
    loop {
        let written = {
            let [head, line, tail] = session.poll_transmit();
            if head.is_empty() && line.is_empty() && tail.is_empty() {
                session.output_written();
                return Poll::Ready(Ok(()));
            }
            stream.try_write_vectored(&[IoSlice::new(head), IoSlice::new(line), IoSlice::new(tail)])
        };
        match written {
            Ok(0) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
            Ok(n) => {
                written_total.add_tx(n);
                session.transmitted(n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                ready!(stream.poll_write_ready(cx))?;
            }
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

struct ConnState {
    /// The miner's lines; holds the start of a line whose end has not arrived yet, and no
    /// allocation when there is none (as usual).
    lines: LineBuffer,
    budget: MessageBudget,
    last_activity: Timestamp,
    rejected_in_a_row: u32,
    /// Until the miner is working (subscribed, authorized and given a job): the handshake
    /// timeout, its own timer so that it fires on time (the herald's tick, which the idle
    /// timeout uses, is 5 s apart). Boxed, and dropped once the miner works: a working
    /// connection pays 8 bytes for it.
    handshake: Option<Pin<Box<Sleep>>>,
}

#[cfg(test)]
mod tests {
    //! The shell with real sockets on 127.0.0.1: new work reaches every miner, a miner that
    //! stops reading holds up nobody and still gets its bytes in order, shutdown says goodbye.

    use super::*;
    use std::path::PathBuf;

    use edge::Admission;
    use events::EventKind;
    use primitives::bitcoin::{Amount, Network, ScriptBuf};
    use primitives::{CompactTarget, Difficulty, Hash256};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::net::tcp::OwnedWriteHalf;

    use crate::engine::{EngineConfig, PayoutMode};
    use crate::jobs::{JobBook, JobConfig};
    use crate::stats::{PoolStats, WorkerRegistry};
    use crate::template::Template;

    const WAIT: Duration = Duration::from_secs(20);

    struct Rig {
        engine: Arc<Engine>,
        book: JobBook,
        addr: SocketAddr,
        shutdown: watch::Sender<bool>,
        served: tokio::task::JoinHandle<()>,
        events: Option<PathBuf>,
        _dir: tempfile::TempDir,
    }

    impl Rig {
        /// `send_buffer`: the pool side's socket send buffer (accepted sockets inherit it).
        async fn start(with_events: bool, send_buffer: Option<u32>) -> Rig {
            let dir = tempfile::tempdir().unwrap();
            let events = with_events.then(|| dir.path().join("pool.ev"));
            let sink = match &events {
                Some(p) => events::EventSink::create(p, "pool", "test").unwrap(),
                None => events::EventSink::disabled(),
            };
            let stats = PoolStats::new(Timestamp::from_millis(0));
            let (engine, _found) = Engine::new(
                EngineConfig {
                    jobs: JobConfig::default(),
                    channel: Default::default(),
                    payout: PayoutMode::Pool(ScriptBuf::from_bytes(vec![0x51])),
                    network: Network::Regtest,
                    start_difficulty: Difficulty::new(1.0).unwrap(),
                },
                stats.clone(),
                WorkerRegistry::new(&stats),
                None,
                sink,
            );
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            if let Some(b) = send_buffer {
                socket.set_send_buffer_size(b).unwrap();
            }
            socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let listener = socket.listen(1024).unwrap();
            let addr = listener.local_addr().unwrap();
            let mut server = Sv1Server::new(
                engine.clone(),
                Sv1Config::default(),
                Gate::new(Admission::default()),
            );
            Arc::get_mut(&mut server).unwrap().reconnect_to =
                Some(("127.0.0.1".into(), addr.port()));
            let (shutdown, rx) = watch::channel(false);
            let served = tokio::spawn(server.serve(listener, rx));
            let mut rig = Rig {
                engine,
                book: JobBook::new(JobConfig::default()),
                addr,
                shutdown,
                served,
                events,
                _dir: dir,
            };
            rig.publish(1);
            rig
        }

        /// A new tip `n`: a clean job for everyone. Returns the generation id.
        fn publish(&mut self, n: u32) -> u64 {
            let mut prev = [0x11; 32];
            prev[..4].copy_from_slice(&n.to_le_bytes());
            let t = Template {
                height: 1000 + n,
                prev_hash: Hash256(prev),
                version: 0x2000_0000,
                bits: CompactTarget::from_consensus(0x1d00_ffff),
                curtime: 1_750_000_000,
                mintime: 1_749_999_000,
                median_time_past: None,
                coinbase_value: Amount::from_sat(312_500_000),
                witness_commitment: None,
                transactions: Vec::new().into(),
                longpoll_id: None,
            };
            let g = self
                .book
                .handle_template(Arc::new(t), Timestamp::from_millis(u64::from(n)));
            let id = g.id;
            self.engine.publish(g);
            id
        }

        async fn stop(self) -> Option<Vec<events::Event>> {
            let _ = self.shutdown.send(true);
            tokio::time::timeout(WAIT, self.served)
                .await
                .unwrap()
                .unwrap();
            // Connection tasks finish their goodbyes on their own.
            tokio::time::sleep(Duration::from_millis(200)).await;
            self.engine.events.flush().unwrap();
            let path = self.events?;
            Some(events::read_file(path).unwrap().events)
        }
    }

    /// A miner seen from the outside: it subscribes, authorizes and reads lines.
    struct Miner {
        lines: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
        _write: OwnedWriteHalf,
    }

    impl Miner {
        async fn connect(addr: SocketAddr, recv_buffer: Option<u32>) -> Miner {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            if let Some(b) = recv_buffer {
                socket.set_recv_buffer_size(b).unwrap();
            }
            let stream = socket.connect(addr).await.unwrap();
            let (r, mut w) = stream.into_split();
            w.write_all(
                b"{\"id\":1,\"method\":\"mining.subscribe\",\"params\":[\"t/1\"]}\n\
                  {\"id\":2,\"method\":\"mining.authorize\",\"params\":[\"w\",\"x\"]}\n",
            )
            .await
            .unwrap();
            Miner {
                lines: BufReader::new(r).lines(),
                _write: w,
            }
        }

        async fn line(&mut self) -> Option<String> {
            tokio::time::timeout(WAIT, self.lines.next_line())
                .await
                .expect("a line in time")
                .unwrap()
        }

        /// The next notify: (line, job id, clean).
        async fn notify(&mut self) -> (String, String, bool) {
            loop {
                let l = self.line().await.expect("a notify before the end");
                let v: serde_json::Value = serde_json::from_str(&l).unwrap();
                if v["method"] == "mining.notify" {
                    let p = &v["params"];
                    return (l.clone(), p[0].as_str().unwrap().to_owned(), p[8] == true);
                }
            }
        }
    }

    fn jobs_sent(evs: &[events::Event], template: u64) -> Vec<(u64, events::JobSent)> {
        evs.iter()
            .filter_map(|e| match e.kind {
                EventKind::JobSent(j) if j.template_id == Some(template) => Some((e.ts_ns, j)),
                _ => None,
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pool_counts_its_own_socket_bytes_exactly() {
        use tokio::io::AsyncReadExt;
        let rig = Rig::start(true, None).await;
        let hello: &[u8] = b"{\"id\":1,\"method\":\"mining.subscribe\",\"params\":[\"t/1\"]}\n\
            {\"id\":2,\"method\":\"mining.authorize\",\"params\":[\"w\",\"x\"]}\n\
            {\"id\":3,\"method\":\"mining.ping\",\"params\":[]}\n";
        let mut readers = Vec::new();
        for _ in 0..3 {
            let mut s = tokio::net::TcpStream::connect(rig.addr).await.unwrap();
            s.write_all(hello).await.unwrap();
            readers.push(tokio::spawn(async move {
                // Everything the pool sends until it closes (after client.reconnect).
                let mut all = Vec::new();
                tokio::time::timeout(WAIT, s.read_to_end(&mut all))
                    .await
                    .unwrap()
                    .unwrap();
                all.len() as u64
            }));
        }
        // Every miner has its work before the pool stops.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let evs = rig.stop().await.unwrap();
        let mut received = 0;
        for r in readers {
            received += r.await.unwrap();
        }
        let sum = |d: events::Direction| -> u64 {
            evs.iter()
                .filter_map(|e| match e.kind {
                    EventKind::LinkBytes(b) if b.direction == d && b.link == "sv1" => Some(b.bytes),
                    _ => None,
                })
                .sum()
        };
        assert_eq!(sum(events::Direction::Up), 3 * hello.len() as u64);
        assert!(received > 0);
        assert_eq!(sum(events::Direction::Down), received);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_miner_gets_the_new_job_and_job_sent_follows_its_write() {
        let mut rig = Rig::start(true, None).await;
        let mut miners = Vec::new();
        for _ in 0..64 {
            miners.push(Miner::connect(rig.addr, None).await);
        }
        for m in &mut miners {
            m.notify().await;
        }
        let published_at = events::now_ns();
        let g = rig.publish(2);
        let mut lines = Vec::new();
        for m in &mut miners {
            let (line, _, clean) = m.notify().await;
            assert!(clean, "a new tip's job is clean");
            lines.push(line);
        }
        assert!(
            lines.iter().all(|l| l == &lines[0]),
            "pool mode: one job, one shared line"
        );
        let evs = rig.stop().await.unwrap();
        let sent = jobs_sent(&evs, g);
        assert_eq!(sent.len(), 64, "one JobSent per connection");
        let conns: std::collections::HashSet<u64> = sent.iter().map(|(_, j)| j.conn).collect();
        assert_eq!(conns.len(), 64);
        assert!(sent.iter().all(|(ts, j)| *ts > published_at && j.clean));
        assert_eq!(
            jobs_sent(&evs, g - 1).len(),
            64,
            "and one for the first job each"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_miner_that_stops_reading_holds_up_nobody_and_gets_its_bytes_in_order() {
        let mut rig = Rig::start(false, Some(4096)).await;
        let mut stalled = Miner::connect(rig.addr, Some(4096)).await;
        let mut reader = Miner::connect(rig.addr, None).await;
        reader.notify().await;
        // Far more notify bytes than the two small socket buffers hold: the pool's writes to
        // the stalled miner hit a full buffer and must resume where they stopped.
        let mut last = 0;
        for n in 2..=600 {
            last = rig.publish(n);
            if n % 20 == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let job = rig
            .engine
            .current()
            .unwrap()
            .job(&ScriptBuf::from_bytes(vec![0x51]))
            .unwrap();
        let last_id = format!("{:x}", job.id);
        assert_eq!(job.generation, last);
        loop {
            let (_, id, _) = reader.notify().await;
            if id == last_id {
                break;
            }
        }
        // Now the stalled miner reads: whole lines, jobs in the order issued, the last one last.
        let mut ids = Vec::new();
        loop {
            let (_, id, _) = stalled.notify().await;
            let id = u64::from_str_radix(&id, 16).unwrap();
            assert!(
                ids.last().is_none_or(|&l| l < id),
                "in order: {id} after {ids:?}"
            );
            ids.push(id);
            if id == job.id {
                break;
            }
        }
        assert!(ids.len() > 1);
        rig.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_tells_every_miner_where_to_reconnect() {
        let rig = Rig::start(false, None).await;
        let mut miners = Vec::new();
        for _ in 0..8 {
            let mut m = Miner::connect(rig.addr, None).await;
            m.notify().await;
            miners.push(m);
        }
        let port = rig.addr.port();
        rig.stop().await;
        for m in &mut miners {
            let mut said = None;
            while let Some(l) = m.line().await {
                said = Some(l);
            }
            let v: serde_json::Value = serde_json::from_str(&said.expect("a goodbye")).unwrap();
            assert_eq!(v["method"], "client.reconnect");
            assert_eq!(v["params"][0], "127.0.0.1");
            assert_eq!(v["params"][1], port);
        }
    }

    #[tokio::test]
    async fn a_connection_task_stays_small() {
        let rig = Rig::start(false, None).await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let server = Sv1Server::new(
            rig.engine.clone(),
            Sv1Config::default(),
            Gate::new(Admission::default()),
        );
        let slot = server
            .front
            .gate
            .admit(peer.ip(), Timestamp::from_millis(0))
            .unwrap();
        let task = server.connection(stream, peer, slot);
        // Every byte is paid once per miner. With tokio's task header (about 100 bytes, the
        // whole rounded up to 128), this keeps a connection's task within 1 KiB.
        assert!(
            std::mem::size_of_val(&task) <= 920,
            "{} bytes",
            std::mem::size_of_val(&task)
        );
    }
}
