//! The tokio shell around [`Translator`]: one core task that owns the core and the SV2
//! connection, one task per SV1 device connection ([`edge`]), bounded channels between them.
//!
//! The core is single-owner, so it lives in one task and never behind a lock: device tasks
//! send it their lines over one bounded queue (a flood of lines slows the readers, not the
//! core), and it hands each device its bytes over the device's own bounded queue. A device
//! whose queue is full has stopped reading; it is dropped rather than allowed to hold the core
//! back or grow without bound. Dropping a device's sender is how the core closes it: the device
//! task writes what is queued, then ends the connection.
//!
//! Upstreams are a list. Losing the one in use (closed, reset, refused channel, or silent for
//! the keepalive interval with a share awaiting its verdict) starts a task that tries the next
//! ones in order at once, then all of them again after a capped, jittered exponential backoff.
//! Devices stay connected meanwhile; when a channel opens they are given its extranonce
//! (`mining.set_extranonce`) and its work ([`Translator::upstream_lost`]).
//!
//! The core counts what happens into [`Stats`] (atomics, and a small mutex for the upstream's
//! state), which the HTTP status endpoints ([`http`], `--http-listen`) read without a word to
//! the core.

mod backoff;
mod connect;
mod core;
pub mod edge;
pub mod http;
mod net;
pub mod stats;
pub mod sv1_conn;
pub mod transport;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use events::{ConnectionOpened, EventSink, ShortStr};
use primitives::{Difficulty, Target};
use sv2::TransportError;
use tokio::sync::{mpsc, watch};

pub use self::backoff::Backoff;
pub use self::connect::UpstreamSpec;
use self::core::Core;
use self::edge::{stopped, EdgeLimits};
use self::net::Net;
pub use self::stats::Stats;
use self::transport::{Link, Sv2Transport, Transport};
use crate::{ChannelMode, Event, Mode, PerDevice, Timestamp, Translator, TranslatorConfig, Uplink};

/// The `conn` of the first upstream connection in events (and the `device` / `conn` of the
/// shares sent on it); each later one counts on from it. Device connections count from 1, so
/// the two never meet.
pub const UPSTREAM_CONN_BASE: u64 = 1 << 48;

/// The shell's settings.
#[derive(Clone, Debug)]
pub struct ShellConfig {
    /// Where SV1 devices connect.
    pub listen: SocketAddr,
    /// The SV2 pools, in order of preference: the first that opens a channel is used, the
    /// others are failovers.
    pub upstreams: Vec<UpstreamSpec>,
    /// The core's settings (channel mode, extranonce split, vardiff, limits).
    pub translator: TranslatorConfig,
    /// How long connecting, the Noise handshake, SetupConnection and the channel's opening may
    /// take together, per upstream attempt.
    pub open_timeout: Duration,
    /// An upstream that has answered nothing for this long while a share awaits its verdict
    /// is taken as gone.
    pub keepalive: Duration,
    /// The first wait between rounds of failed attempts, and the most it grows to.
    pub backoff_min: Duration,
    /// The most the wait between rounds grows to.
    pub backoff_max: Duration,
    /// The device side's limits (`--max-devices` is `max_connections`); its gate is made at
    /// start and shown in `/api/status` and `/metrics`.
    pub admission: ::edge::Admission,
    /// Lines from all devices waiting for the core.
    pub inbox: usize,
    /// Writes waiting for one device; a device this far behind is dropped.
    pub device_queue: usize,
    /// How often vardiff looks at quiet devices and the channel's hash rate is re-announced.
    pub tick: Duration,
    /// Where the translator's events go; disabled by default.
    pub events: EventSink,
    /// Where the HTTP status endpoints listen, if anywhere.
    pub http_listen: Option<SocketAddr>,
    /// What the role is called in its figures (`stratumlab_<role>_` metrics): `translator`,
    /// or `proxy` for the SV1 farm proxy.
    pub role: &'static str,
}

impl ShellConfig {
    /// Defaults around `listen` and `upstreams`: 10,000 devices, a 1 s tick, backoff from
    /// 250 ms to 30 s, a 30 s keepalive, no HTTP endpoints.
    pub fn new(listen: SocketAddr, upstreams: Vec<UpstreamSpec>) -> Self {
        ShellConfig {
            listen,
            upstreams,
            translator: TranslatorConfig::default(),
            open_timeout: crate::per_device::DEFAULT_OPEN_TIMEOUT,
            keepalive: Duration::from_secs(30),
            backoff_min: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
            admission: ::edge::Admission {
                max_connections: 10_000,
                ..::edge::Admission::default()
            },
            inbox: 16 * 1024,
            device_queue: 256,
            // UpdateChannel may go out once a second (TranslatorConfig::update_interval_ms).
            tick: Duration::from_secs(1),
            events: EventSink::disabled(),
            http_listen: None,
            role: "translator",
        }
    }

    /// What the translator says of itself to an upstream: its version, the extensions it asks
    /// for (0x0002 with [`TranslatorConfig::worker_tracking`], aggregated only), and how long
    /// it waits for their answer: [`sv2::negotiation::ANSWER_TIMEOUT_MS`], or half the open
    /// timeout if that is less, so that an upstream that ignores the request is still used.
    pub fn hello(&self) -> transport::Hello<'static> {
        const TRACKING: &[u16] = &[sv2::messages::extensions::extension::WORKER_HASHRATE_TRACKING];
        let t = &self.translator;
        transport::Hello {
            firmware: t.version,
            extensions: if t.worker_tracking && t.channels == crate::ChannelMode::Aggregated {
                TRACKING
            } else {
                &[]
            },
            answer_wait: Duration::from_millis(sv2::negotiation::ANSWER_TIMEOUT_MS)
                .min(self.open_timeout / 2),
        }
    }

    fn edge_limits(&self, clock: Instant) -> EdgeLimits {
        EdgeLimits {
            gate: ::edge::Gate::new(self.admission.clone()),
            start: clock,
            device_queue: self.device_queue.max(1),
        }
    }
}

/// Why the shell could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    /// The device listener could not bind `addr`.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why it could not.
        source: io::Error,
    },
    /// The upstream at `addr` could not be reached.
    #[error("cannot connect to the upstream {addr}: {source}")]
    Connect {
        /// The upstream's address.
        addr: SocketAddr,
        /// Why it could not be reached.
        source: io::Error,
    },
    /// The upstream connection failed (Noise, framing, I/O).
    #[error("upstream: {0}")]
    Transport(#[from] TransportError),
    /// The upstream refused `SetupConnection`, with its error code.
    #[error("upstream refused SetupConnection: {0}")]
    Setup(String),
    /// The upstream refused the channel, with its error code.
    #[error("upstream refused the channel: {0}")]
    ChannelRefused(String),
    /// The upstream took longer than this to open the channel.
    #[error("upstream took longer than {0:?} to open the channel")]
    OpenTimeout(Duration),
    /// The upstream connection was lost, with why.
    #[error("upstream lost: {0}")]
    UpstreamLost(String),
    /// The configuration names no upstream.
    #[error("no upstream configured")]
    NoUpstream,
    /// Every upstream failed to open a channel: each one's failure, joined by `; `.
    #[error("no upstream opened a channel: {0}")]
    AllUpstreamsFailed(String),
    /// An SV2 upstream at this address has no authority key to check its certificate against.
    #[error("no authority key for the SV2 upstream {0}")]
    NoAuthorityKey(SocketAddr),
    /// Per-device mode was asked for with an SV1 upstream.
    #[error("per-device channels need an SV2 upstream (an SV1 pool gives one subscription per connection)")]
    PerDeviceNeedsSv2,
}

/// What the shell did, for the closing summary ([`Stats::summary`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Device connections accepted.
    pub devices_connected: u64,
    /// Devices dropped for not reading their writes.
    pub devices_dropped_slow: u64,
    /// Jobs sent to devices (each counted once, whatever the devices).
    pub jobs: u64,
    /// Device shares accepted locally.
    pub shares_accepted: u64,
    /// Device shares rejected locally.
    pub shares_rejected: u64,
    /// Shares forwarded upstream.
    pub shares_forwarded: u64,
    /// Forwarded shares the upstream accepted.
    pub upstream_accepted: u64,
    /// Forwarded shares the upstream rejected.
    pub upstream_rejected: u64,
    /// Forwarded shares that got no verdict.
    pub upstream_unanswered: u64,
    /// Upstream connections that got as far as an open channel.
    pub channels_opened: u64,
    /// Upstream connections lost (each followed by failover).
    pub upstreams_lost: u64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} devices ({} dropped as slow), {} jobs; shares from devices {} accepted, {} rejected; {} forwarded: {} accepted, {} rejected, {} unanswered upstream; {} channels opened, {} upstreams lost",
            self.devices_connected,
            self.devices_dropped_slow,
            self.jobs,
            self.shares_accepted,
            self.shares_rejected,
            self.shares_forwarded,
            self.upstream_accepted,
            self.upstream_rejected,
            self.upstream_unanswered,
            self.channels_opened,
            self.upstreams_lost,
        )
    }
}

/// A running translator: its first channel is open and devices are being accepted.
pub struct Running {
    /// Where SV1 devices connect (the bound address).
    pub sv1_addr: SocketAddr,
    /// The first channel's id (aggregated mode; 0 in per-device mode, where channels open
    /// with devices).
    pub channel_id: u32,
    /// Aggregated or per-device.
    pub channels: ChannelMode,
    /// The upstream the first channel opened on.
    pub upstream: SocketAddr,
    /// Where the HTTP status endpoints listen, when asked for.
    pub http_addr: Option<SocketAddr>,
    stats: Arc<Stats>,
    shutdown: watch::Sender<bool>,
    core: tokio::task::JoinHandle<Result<Summary, ShellError>>,
    acceptor: tokio::task::JoinHandle<()>,
    http: Option<tokio::task::JoinHandle<()>>,
    net: Arc<Net>,
    events: EventSink,
}

impl Running {
    /// The figures the core keeps, as the HTTP endpoints read them.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Resolves when the core ends by itself (it does not, short of a bug: upstream trouble
    /// is failed over).
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
        if let Some(http) = self.http {
            let _ = http.await;
        }
        let summary = match self.core.await {
            Ok(r) => r,
            Err(e) => Err(ShellError::UpstreamLost(format!("core task: {e}"))),
        };
        // The device tasks have written their last bytes by now.
        self.net.report(&self.events);
        summary
    }
}

/// Binds the SV1 listener, opens a channel on the first upstream that gives one (each tried
/// once, in order), then serves. Fails only if none does: a translator that starts without
/// any pool would accept devices it cannot give work. In per-device mode
/// ([`ChannelMode::PerDevice`]) the first upstream that completes SetupConnection is used,
/// and channels open as devices subscribe.
pub async fn start(config: ShellConfig) -> Result<Running, ShellError> {
    match config.translator.channels {
        ChannelMode::Aggregated => start_in::<Sv2Transport, Translator>(config, aggregated).await,
        ChannelMode::PerDevice => {
            start_in::<Sv2Transport, PerDevice>(config, |c, _| PerDevice::new(c)).await
        }
    }
}

/// [`start`] over another transport (the SV1 proxy's), in aggregated mode: an SV1 upstream
/// has one subscription per connection, so per-device channels are refused.
pub async fn start_with<T: Transport>(config: ShellConfig) -> Result<Running, ShellError>
where
    T::Uplink: Default,
{
    if config.translator.channels != ChannelMode::Aggregated {
        return Err(ShellError::PerDeviceNeedsSv2);
    }
    start_in::<T, Translator<T::Uplink>>(config, aggregated).await
}

fn aggregated<U: Uplink + Default>(c: TranslatorConfig, now: Timestamp) -> Translator<U> {
    Translator::with_uplink(c, U::default(), now)
}

/// The shell over transport `T` driving mode `M`, made by `make`.
async fn start_in<T, M>(
    config: ShellConfig,
    make: fn(TranslatorConfig, Timestamp) -> M,
) -> Result<Running, ShellError>
where
    T: Transport,
    M: Mode<In = T::In, Out = T::Out> + Send + 'static,
{
    if config.upstreams.is_empty() {
        return Err(ShellError::NoUpstream);
    }
    let listener = ::edge::listen(config.listen).map_err(|source| ShellError::Bind {
        addr: config.listen,
        source,
    })?;
    let sv1_addr = listener.local_addr().map_err(|source| ShellError::Bind {
        addr: config.listen,
        source,
    })?;
    // Bound before the upstreams are tried, so that a bad address fails at once; served once
    // there is a core to report on (clients wait in the backlog meanwhile).
    let (http_listener, http_addr) = match config.http_listen {
        Some(addr) => {
            let bind_error = |source| ShellError::Bind { addr, source };
            let l = ::edge::listen(addr).map_err(bind_error)?;
            let local = l.local_addr().map_err(bind_error)?;
            (Some(l), Some(local))
        }
        None => (None, None),
    };
    let clock = Instant::now();
    let net = Net::new();
    let mut failures = Vec::new();
    let mut opened = None;
    for (index, spec) in config.upstreams.iter().enumerate() {
        let attempt = open_first::<T, M>(spec, &config, clock, make, &net.upstream);
        match tokio::time::timeout(config.open_timeout, attempt).await {
            Ok(Ok(x)) => {
                opened = Some((index, x));
                break;
            }
            Ok(Err(e)) => failures.push(format!("{}: {e}", spec.addr)),
            Err(_) => failures.push(format!(
                "{}: {}",
                spec.addr,
                ShellError::OpenTimeout(config.open_timeout)
            )),
        }
    }
    let Some((index, (link, mode, channel))) = opened else {
        return Err(ShellError::AllUpstreamsFailed(failures.join("; ")));
    };
    let channels = mode.channel_mode();
    let upstream = config.upstreams[index].addr;
    let stats = Arc::new(
        Stats::new(
            clock,
            index,
            upstream,
            channel.map(|(id, _)| id),
            channel.map_or(0.0, |(_, t)| Difficulty::from_target(t).as_f64()),
        )
        .with_mode(channels),
    );
    stats.upstream_extensions(&link.extensions);
    let (shutdown, stop_rx) = watch::channel(false);
    let (inbox_tx, inbox_rx) = mpsc::channel(config.inbox.max(1));
    let limits = config.edge_limits(clock);
    stats.set_gate(limits.gate.clone());
    let role = config.role;
    let config = Arc::new(config);
    let events = config.events.clone();
    let core = Core::<T, M>::new(
        mode,
        index,
        link,
        clock,
        config.clone(),
        stats.clone(),
        net.clone(),
    );
    let core = tokio::spawn(core.run(inbox_rx, stop_rx.clone()));
    let http = http_listener.map(|listener| {
        let mut stop = stop_rx.clone();
        let stopped = async move { stopped(&mut stop).await };
        let stats = stats.clone();
        tokio::spawn(async move {
            if let Err(e) = http::serve(listener, stats, role, stopped).await {
                tracing::error!(error = %e, "HTTP status endpoints failed");
            }
        })
    });
    let acceptor = tokio::spawn(edge::accept(
        listener,
        inbox_tx,
        stop_rx,
        limits,
        net.devices.clone(),
    ));
    Ok(Running {
        sv1_addr,
        channel_id: channel.map_or(0, |(id, _)| id),
        channels,
        upstream,
        http_addr,
        stats,
        shutdown,
        core,
        acceptor,
        http,
        net,
        events,
    })
}

fn millis(clock: Instant) -> Timestamp {
    Timestamp::from_millis(clock.elapsed().as_millis() as u64)
}

/// The first upstream connection, ready for work before any device is accepted (in aggregated
/// mode: its channel open); with the channel's id and target where there is one.
#[allow(clippy::type_complexity)]
async fn open_first<T, M>(
    spec: &UpstreamSpec,
    config: &ShellConfig,
    clock: Instant,
    make: fn(TranslatorConfig, Timestamp) -> M,
    net: &Arc<events::LinkCounter>,
) -> Result<(Link<T>, M, Option<(u32, Target)>), ShellError>
where
    T: Transport,
    M: Mode<In = T::In, Out = T::Out>,
{
    let mut c = T::connect(spec, config.hello(), net).await?;
    let mut tc = config.translator.clone();
    if c.fixed_version {
        tc.version_mask = 0;
    }
    let mut mode = make(tc, millis(clock));
    mode.upstream_extensions(&c.extensions);
    mode.upstream_connected(millis(clock));
    while let Some(m) = mode.poll_transmit() {
        c.conn.send(m).await?;
    }
    let mut channel = None;
    while !mode.is_ready() {
        let m = c.conn.read().await?;
        mode.upstream_message(m, millis(clock));
        // Replies the opening asked for (SV1: subscribe, authorize) go out at once.
        while let Some(m) = mode.poll_transmit() {
            c.conn.send(m).await?;
        }
        while let Some(t) = mode.poll_event() {
            match t.event {
                Event::ChannelOpened { channel_id, .. } => channel = Some((channel_id, t.target)),
                Event::ChannelOpenFailed(code) => return Err(ShellError::ChannelRefused(code)),
                Event::Layout(e) => return Err(ShellError::ChannelRefused(e.to_string())),
                other => tracing::debug!(?other, "before the channel opened"),
            }
        }
    }
    Ok((c, mode, channel))
}

/// The connection-opened event for upstream connection `serial` (see [`UPSTREAM_CONN_BASE`]).
fn upstream_opened(events: &EventSink, serial: u64, spec: &UpstreamSpec, local: SocketAddr) {
    if events.is_enabled() {
        events.emit(ConnectionOpened {
            conn: serial,
            peer: spec.addr,
            local,
            label: ShortStr::new("upstream"),
        });
    }
}
