//! The tokio shell around [`Translator`]: one upstream task that owns the core and the SV2
//! connection, one task per SV1 device connection, bounded channels between them.
//!
//! The core is single-owner, so it lives in the upstream task and never behind a lock: device
//! tasks send it their lines over one bounded queue (a flood of lines slows the readers, not
//! the core), and it hands each device its bytes over the device's own bounded queue. A device
//! whose queue is full has stopped reading; it is dropped rather than allowed to hold the core
//! back or grow without bound. Dropping a device's sender is how the core closes it: the device
//! task writes what is queued, then ends the connection.
//!
//! This slice has one upstream and no failover: losing it ends the shell with an error.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use events::{
    ConnectionClosed, ConnectionOpened, EventSink, JobId, Perspective, Reason, ShortStr, Verdict,
};
use primitives::Difficulty;
use sv2::messages::common::{mining_flags, protocol, Common, SetupConnection, PROTOCOL_VERSION};
use sv2::{Limits, Message, NoiseConn, TransportError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use crate::shares::UpstreamVerdict;
use crate::{DeviceId, Event, LineOutcome, Millis, Translator, TranslatorConfig};

/// The shell's settings.
#[derive(Clone, Debug)]
pub struct ShellConfig {
    /// Where SV1 devices connect.
    pub listen: SocketAddr,
    /// The SV2 pool.
    pub upstream: SocketAddr,
    /// The authority key the pool's Noise certificate must be signed with.
    pub authority_key: [u8; 32],
    pub translator: TranslatorConfig,
    /// How long connecting, the Noise handshake, SetupConnection and the channel's opening may
    /// take together.
    pub open_timeout: Duration,
    /// Longest SV1 line read from a device.
    pub max_line: usize,
    pub max_devices: usize,
    /// Lines from all devices waiting for the core.
    pub inbox: usize,
    /// Writes waiting for one device; a device this far behind is dropped.
    pub device_queue: usize,
    /// How often vardiff looks at quiet devices and the channel's hash rate is re-announced.
    pub tick: Duration,
    pub events: EventSink,
}

impl ShellConfig {
    pub fn new(listen: SocketAddr, upstream: SocketAddr, authority_key: [u8; 32]) -> Self {
        ShellConfig {
            listen,
            upstream,
            authority_key,
            translator: TranslatorConfig::default(),
            open_timeout: Duration::from_secs(10),
            max_line: 8 * 1024,
            max_devices: 10_000,
            inbox: 16 * 1024,
            device_queue: 256,
            // UpdateChannel may go out once a second (TranslatorConfig::update_interval_ms).
            tick: Duration::from_secs(1),
            events: EventSink::disabled(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("cannot connect to the upstream {addr}: {source}")]
    Connect { addr: SocketAddr, source: io::Error },
    #[error("upstream: {0}")]
    Transport(#[from] TransportError),
    #[error("upstream refused SetupConnection: {0}")]
    Setup(String),
    #[error("upstream refused the channel: {0}")]
    ChannelRefused(String),
    #[error("upstream took longer than {0:?} to open the channel")]
    OpenTimeout(Duration),
    #[error("upstream lost: {0}")]
    UpstreamLost(String),
}

/// What the shell did, for the closing summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub devices_connected: u64,
    pub devices_dropped_slow: u64,
    pub jobs: u64,
    pub shares_accepted: u64,
    pub shares_rejected: u64,
    pub shares_forwarded: u64,
    pub upstream_accepted: u64,
    pub upstream_rejected: u64,
    pub upstream_unanswered: u64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "translator: {} devices ({} dropped as slow), {} jobs; shares from devices {} accepted, {} rejected; {} forwarded: {} accepted, {} rejected, {} unanswered upstream",
            self.devices_connected,
            self.devices_dropped_slow,
            self.jobs,
            self.shares_accepted,
            self.shares_rejected,
            self.shares_forwarded,
            self.upstream_accepted,
            self.upstream_rejected,
            self.upstream_unanswered
        )
    }
}

/// A running translator: its channel is open and devices are being accepted.
pub struct Running {
    pub sv1_addr: SocketAddr,
    pub channel_id: u32,
    shutdown: watch::Sender<bool>,
    core: tokio::task::JoinHandle<Result<Summary, ShellError>>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Resolves when the core ends by itself (the upstream was lost).
    pub async fn finished(&mut self) -> Result<Summary, ShellError> {
        match (&mut self.core).await {
            Ok(r) => r,
            Err(e) => Err(ShellError::UpstreamLost(format!("core task: {e}"))),
        }
    }

    /// Closes every device and the upstream connection.
    pub async fn stop(self) -> Result<Summary, ShellError> {
        let _ = self.shutdown.send(true);
        let _ = self.acceptor.await;
        match self.core.await {
            Ok(r) => r,
            Err(e) => Err(ShellError::UpstreamLost(format!("core task: {e}"))),
        }
    }
}

/// What device tasks tell the core.
enum DeviceIn {
    Connected {
        conn: u64,
        peer: SocketAddr,
        local: SocketAddr,
        out: mpsc::Sender<Vec<u8>>,
    },
    Line {
        conn: u64,
        line: Vec<u8>,
    },
    LineTooLong {
        conn: u64,
    },
    Closed {
        conn: u64,
        reason: &'static str,
    },
}

/// Binds the SV1 listener, sets up the upstream connection and its channel, then serves.
pub async fn start(config: ShellConfig) -> Result<Running, ShellError> {
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| ShellError::Bind {
            addr: config.listen,
            source,
        })?;
    let sv1_addr = listener.local_addr().map_err(|source| ShellError::Bind {
        addr: config.listen,
        source,
    })?;
    let clock = Instant::now();
    let opened = tokio::time::timeout(config.open_timeout, open_upstream(&config, clock)).await;
    let (conn, translator) = match opened {
        Err(_) => return Err(ShellError::OpenTimeout(config.open_timeout)),
        Ok(r) => r?,
    };
    let channel_id = translator.upstream().channel_id().expect("opened");
    let (shutdown, stop_rx) = watch::channel(false);
    let (inbox_tx, inbox_rx) = mpsc::channel(config.inbox.max(1));
    let config = Arc::new(config);
    let core = Core {
        translator,
        conn,
        clock,
        devices: HashMap::new(),
        conns: HashMap::new(),
        events: config.events.clone(),
        summary: Summary::default(),
        channel_closed: None,
    };
    let core = tokio::spawn(core.run(inbox_rx, stop_rx.clone(), config.tick));
    let acceptor = tokio::spawn(accept(listener, inbox_tx, stop_rx, config.clone()));
    Ok(Running {
        sv1_addr,
        channel_id,
        shutdown,
        core,
        acceptor,
    })
}

fn millis(clock: Instant) -> Millis {
    Millis(clock.elapsed().as_millis() as u64)
}

/// Connects, checks the pool's certificate, sets up a Mining connection and opens the extended
/// channel; returns once the channel is open.
async fn open_upstream(
    config: &ShellConfig,
    clock: Instant,
) -> Result<(NoiseConn, Translator), ShellError> {
    let stream = TcpStream::connect(config.upstream)
        .await
        .map_err(|source| ShellError::Connect {
            addr: config.upstream,
            source,
        })?;
    let local = stream.local_addr().unwrap_or(config.upstream);
    let mut conn =
        NoiseConn::connect_to_authority(stream, config.authority_key, Limits::default()).await?;
    if config.events.is_enabled() {
        config.events.emit(ConnectionOpened {
            conn: 0,
            peer: config.upstream,
            local,
            label: ShortStr::new("upstream"),
        });
    }
    let setup = SetupConnection {
        protocol: protocol::MINING,
        min_version: PROTOCOL_VERSION,
        max_version: PROTOCOL_VERSION,
        // Extended channels, and devices that may roll version bits if the pool lets them.
        flags: 0,
        endpoint_host: config.upstream.ip().to_string(),
        endpoint_port: config.upstream.port(),
        vendor: "stratumlab".into(),
        hardware_version: String::new(),
        firmware: config.translator.version.into(),
        device_id: String::new(),
    };
    conn.send_message(&setup.into()).await?;
    let mut tc = config.translator.clone();
    loop {
        match conn.read_message().await? {
            Some(Message::Common(Common::SetupConnectionSuccess(s))) => {
                if s.flags & mining_flags::REQUIRES_FIXED_VERSION != 0 {
                    // The pool checks the version as sent: devices must not roll it.
                    tc.version_mask = 0;
                }
                break;
            }
            Some(Message::Common(Common::SetupConnectionError(e))) => {
                return Err(ShellError::Setup(e.error_code));
            }
            Some(other) => tracing::debug!(?other, "translator: ignored before setup"),
            None => {}
        }
    }
    let mut translator = Translator::new(tc, millis(clock));
    translator.open_channel(millis(clock));
    while let Some(m) = translator.poll_upstream() {
        conn.send_message(&Message::Mining(m)).await?;
    }
    loop {
        match conn.read_message().await? {
            Some(Message::Mining(m)) => translator.upstream_message(m, millis(clock)),
            Some(other) => tracing::debug!(?other, "translator: ignored while opening"),
            None => {}
        }
        while let Some(ev) = translator.poll_event() {
            match ev {
                Event::ChannelOpened { .. } => return Ok((conn, translator)),
                Event::ChannelOpenFailed(code) => return Err(ShellError::ChannelRefused(code)),
                Event::Layout(e) => return Err(ShellError::ChannelRefused(e.to_string())),
                other => tracing::debug!(?other, "translator: before the channel opened"),
            }
        }
    }
}

/// Accepts devices until shutdown; each gets its own task.
async fn accept(
    listener: TcpListener,
    inbox: mpsc::Sender<DeviceIn>,
    mut shutdown: watch::Receiver<bool>,
    config: Arc<ShellConfig>,
) {
    let live = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    let mut next_conn = 1u64;
    loop {
        tokio::select! {
            _ = stopped(&mut shutdown) => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "translator: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if live.load(Ordering::Relaxed) >= config.max_devices {
                    tracing::debug!(%peer, "translator: device refused, at --max-devices");
                    continue;
                }
                live.fetch_add(1, Ordering::Relaxed);
                let conn = next_conn;
                next_conn += 1;
                let task = device(
                    stream,
                    peer,
                    conn,
                    inbox.clone(),
                    shutdown.clone(),
                    config.max_line,
                    config.device_queue.max(1),
                );
                let live = live.clone();
                tasks.spawn(async move {
                    task.await;
                    live.fetch_sub(1, Ordering::Relaxed);
                });
            }
        }
    }
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(5), drain)
        .await
        .is_err()
    {
        tasks.abort_all();
    }
}

/// One device connection: lines to the core, the core's bytes to the socket.
async fn device(
    stream: TcpStream,
    peer: SocketAddr,
    conn: u64,
    inbox: mpsc::Sender<DeviceIn>,
    mut shutdown: watch::Receiver<bool>,
    max_line: usize,
    queue: usize,
) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(peer);
    let (mut reader, mut writer) = stream.into_split();
    let (tx, mut out) = mpsc::channel::<Vec<u8>>(queue);
    if inbox
        .send(DeviceIn::Connected {
            conn,
            peer,
            local,
            out: tx,
        })
        .await
        .is_err()
    {
        return;
    }
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut reading = true;
    let reason = loop {
        tokio::select! {
            _ = stopped(&mut shutdown) => break "shutdown",
            bytes = out.recv() => match bytes {
                Some(b) => {
                    match tokio::time::timeout(WRITE_TIMEOUT, writer.write_all(&b)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => break "write error",
                        Err(_) => break "write timeout",
                    }
                }
                // The core closed us, after what it queued.
                None => break "closed by translator",
            },
            n = reader.read(&mut chunk), if reading => {
                let n = match n {
                    Ok(0) => break "eof",
                    Ok(n) => n,
                    Err(_) => break "reset",
                };
                buf.extend_from_slice(&chunk[..n]);
                let mut start = 0;
                let mut too_long = false;
                while let Some(i) = buf[start..].iter().position(|&b| b == b'\n') {
                    let line = &buf[start..start + i];
                    start += i + 1;
                    if line.len() > max_line {
                        too_long = true;
                        break;
                    }
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    if inbox.send(DeviceIn::Line { conn, line: line.to_vec() }).await.is_err() {
                        return;
                    }
                }
                buf.drain(..start);
                if too_long || buf.len() > max_line {
                    // Answered and closed by the core; nothing more is read.
                    reading = false;
                    buf = Vec::new();
                    if inbox.send(DeviceIn::LineTooLong { conn }).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let _ = writer.shutdown().await;
    let _ = inbox.send(DeviceIn::Closed { conn, reason }).await;
}

/// A device that takes no bytes for this long is closed (its queue would drop it soon anyway).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Resolves once `shutdown` turns true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// The core's task: the translator, the upstream connection, and where each device's bytes go.
struct Core {
    translator: Translator,
    conn: NoiseConn,
    clock: Instant,
    devices: HashMap<DeviceId, (u64, mpsc::Sender<Vec<u8>>)>,
    conns: HashMap<u64, DeviceId>,
    events: EventSink,
    summary: Summary,
    /// Why the upstream closed our channel, if it did.
    channel_closed: Option<String>,
}

impl Core {
    fn now(&self) -> Millis {
        millis(self.clock)
    }

    async fn run(
        mut self,
        mut inbox: mpsc::Receiver<DeviceIn>,
        mut shutdown: watch::Receiver<bool>,
        tick: Duration,
    ) -> Result<Summary, ShellError> {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Work that came with the channel's opening.
        self.flush_all();
        self.send_upstream().await?;
        let ended = loop {
            tokio::select! {
                biased;
                _ = stopped(&mut shutdown) => break Ok(()),
                m = self.conn.read_message() => match m {
                    Ok(Some(Message::Mining(m))) => {
                        let fans_out = !matches!(
                            m,
                            sv2::messages::Mining::SubmitSharesSuccess(_)
                                | sv2::messages::Mining::SubmitSharesError(_)
                        );
                        let now = self.now();
                        self.translator.upstream_message(m, now);
                        if fans_out {
                            self.flush_all();
                        }
                    }
                    Ok(Some(other)) => {
                        tracing::debug!(?other, "translator: upstream message ignored");
                    }
                    Ok(None) => {}
                    Err(e) => break Err(ShellError::UpstreamLost(e.to_string())),
                },
                Some(m) = inbox.recv() => self.device_message(m),
                _ = ticks.tick() => {
                    let now = self.now();
                    self.translator.on_tick(now);
                    self.flush_all();
                }
            }
            self.drain_events(None);
            if let Some(why) = self.channel_closed.take() {
                break Err(ShellError::UpstreamLost(format!("channel closed: {why}")));
            }
            if let Err(e) = self.send_upstream().await {
                break Err(e);
            }
        };
        self.drain_events(None);
        // Closing the senders closes the devices once their queues are written.
        for (id, _) in std::mem::take(&mut self.devices) {
            self.translator.device_closed(id);
        }
        let reason = match &ended {
            Ok(()) => "shutdown",
            Err(_) => "upstream lost",
        };
        if self.events.is_enabled() {
            self.events.emit(ConnectionClosed {
                conn: 0,
                reason: ShortStr::new(reason),
            });
        }
        if ended.is_ok() {
            self.conn.close(Duration::from_millis(200)).await;
        }
        ended.map(|()| self.summary)
    }

    async fn send_upstream(&mut self) -> Result<(), ShellError> {
        while let Some(m) = self.translator.poll_upstream() {
            self.conn
                .send_message(&Message::Mining(m))
                .await
                .map_err(|e| ShellError::UpstreamLost(e.to_string()))?;
        }
        Ok(())
    }

    fn device_message(&mut self, m: DeviceIn) {
        let now = self.now();
        match m {
            DeviceIn::Connected {
                conn,
                peer,
                local,
                out,
            } => {
                let id = self.translator.device_connected(now);
                self.devices.insert(id, (conn, out));
                self.conns.insert(conn, id);
                self.summary.devices_connected += 1;
                if self.events.is_enabled() {
                    self.events.emit(ConnectionOpened {
                        conn: id.0,
                        peer,
                        local,
                        label: ShortStr::new("sv1"),
                    });
                }
                tracing::debug!(device = id.0, %peer, "translator: device connected");
            }
            DeviceIn::Line { conn, line } => {
                let Some(&id) = self.conns.get(&conn) else {
                    return;
                };
                let outcome = self.translator.device_line(id, &line, now);
                self.drain_events(outcome.as_ref());
                self.flush(id);
            }
            DeviceIn::LineTooLong { conn } => {
                let Some(&id) = self.conns.get(&conn) else {
                    return;
                };
                if let Some(d) = self.translator.device_mut(id) {
                    d.line_too_long();
                }
                self.flush(id);
            }
            DeviceIn::Closed { conn, reason } => {
                let Some(id) = self.conns.remove(&conn) else {
                    return;
                };
                self.devices.remove(&id);
                self.translator.device_closed(id);
                if self.events.is_enabled() {
                    self.events.emit(ConnectionClosed {
                        conn: id.0,
                        reason: ShortStr::new(reason),
                    });
                }
                tracing::debug!(device = id.0, reason, "translator: device disconnected");
            }
        }
    }

    fn flush_all(&mut self) {
        let ids: Vec<DeviceId> = self.devices.keys().copied().collect();
        for id in ids {
            self.flush(id);
        }
    }

    /// Hands the device its pending bytes; closes it if it asked to be closed or cannot keep up.
    fn flush(&mut self, id: DeviceId) {
        let Some(device) = self.translator.device_mut(id) else {
            return;
        };
        let pending: usize = device.pending_output().iter().map(|s| s.len()).sum();
        let close = device.wants_close();
        let mut drop_it = close.is_some();
        if pending > 0 {
            let bytes = device.take_output();
            let Some((_, tx)) = self.devices.get(&id) else {
                return;
            };
            if tx.try_send(bytes).is_err() {
                self.summary.devices_dropped_slow += 1;
                tracing::debug!(device = id.0, "translator: device too slow, dropped");
                drop_it = true;
            }
        }
        if drop_it {
            if let Some(c) = close {
                tracing::debug!(device = id.0, why = ?c, "translator: closing device");
            }
            // Its task sees the queue end, writes what is in it, and reports Closed.
            self.devices.remove(&id);
        }
    }

    /// Counts and logs what the core reports; `outcome` is the line just handled, if any.
    fn drain_events(&mut self, outcome: Option<&LineOutcome>) {
        while let Some(ev) = self.translator.poll_event() {
            match ev {
                Event::JobSent { .. } => self.summary.jobs += 1,
                Event::ShareJudged { result, .. } => match result {
                    Ok(_) => self.summary.shares_accepted += 1,
                    Err(_) => self.summary.shares_rejected += 1,
                },
                Event::ShareForwarded {
                    sequence_number, ..
                } => {
                    self.summary.shares_forwarded += 1;
                    if let (Some(LineOutcome::Accepted(s)), true) =
                        (outcome, self.events.is_enabled())
                    {
                        self.events.emit(events::ShareSent {
                            device: 0,
                            channel: self.translator.upstream().channel_id(),
                            seq: u64::from(sequence_number),
                            job_id: JobId::from(s.job.upstream.job_id),
                            nonce: s.nonce,
                            ntime: s.ntime,
                            version: s.version,
                            difficulty: Difficulty::from_target(s.job.upstream_target).as_f64(),
                            hash: Some(s.hash),
                        });
                    }
                }
                Event::UpstreamResult(r) => {
                    let verdict = match &r.verdict {
                        UpstreamVerdict::Accepted => {
                            self.summary.upstream_accepted += 1;
                            Some(Verdict::Accepted)
                        }
                        UpstreamVerdict::Rejected(code) => {
                            self.summary.upstream_rejected += 1;
                            Some(Verdict::Rejected(Reason::from_sv2_code(code)))
                        }
                        UpstreamVerdict::Unanswered => {
                            self.summary.upstream_unanswered += 1;
                            None
                        }
                    };
                    if let (Some(verdict), true) = (verdict, self.events.is_enabled()) {
                        self.events.emit(events::ShareResult {
                            conn: 0,
                            channel: self.translator.upstream().channel_id(),
                            seq: u64::from(r.sequence_number),
                            job_id: JobId::from(r.upstream_job_id),
                            nonce: r.nonce,
                            difficulty: Difficulty::from_target(
                                self.translator.upstream().target(),
                            )
                            .as_f64(),
                            verdict,
                            perspective: Perspective::Received,
                        });
                    }
                }
                Event::ChannelClosed(why) => {
                    tracing::warn!(why, "translator: upstream closed the channel");
                    self.channel_closed = Some(why);
                }
                Event::ChannelOpenFailed(code) => {
                    tracing::warn!(code, "translator: channel refused");
                }
                Event::ChannelOpened { .. }
                | Event::Layout(_)
                | Event::TargetChanged(_)
                | Event::ProtocolError(_) => {}
            }
        }
    }
}
