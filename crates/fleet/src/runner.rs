//! The tokio shell around the sans-IO devices: N devices over TCP to one pool, all speaking
//! Stratum V1 ([`Sv1Device`]) or all Stratum V2 ([`Sv2Device`]); the shell drives either through
//! the [`Device`] trait.
//!
//! Each device lives in its own small task that owns the device, its socket and one timer.
//! Tokio's scheduler is the multiplexer: an idle device costs a parked task, and a task wakes
//! only for its socket, its next deadline or its next hash slice. The task keeps no read or
//! write buffer of its own: reads go through a per-thread scratch buffer, and only a line cut
//! in half by a read is copied aside until its end arrives (an SV2 device's Noise state keeps a
//! partial frame itself); writes are serialized into a per-thread buffer and copied only if the
//! socket cannot take them at once.
//!
//! The hash budget (hashes per second for the whole fleet) is split evenly: each device gets a
//! token bucket and hashes in slices of about [`FleetConfig::slice_hashes`], at most once per
//! few milliseconds and at least once a second, so thousands of devices share a core without
//! any of them hashing in long bursts. Connection attempts, first connects and reconnects
//! alike, pass through one pacer ([`FleetConfig::connect_rate`]), and a device that lost its
//! pool backs off with jitter, so a restarted pool is not met by every device at once.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use events::{now_ns, EventSink, ShortStr, Side};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Sleep;

use crate::device::{CloseReason, Device, Rng, Timestamp};
use crate::hash_rate::{HashRateStep, RateSchedule, STEP_MARK};
use crate::report::{CpuUse, FleetReport, LatencyMs, ShareCounts};
use crate::stats::{reject_slot_name, LiveStats, Tally, REJECT_SLOTS};
use crate::sv1_device::{Sv1Config, Sv1Device, Sv1Shared};
use crate::sv2_device::{Sv2Config, Sv2Device, Sv2Shared};
use crate::{net, proc_stat, sv1_device, sv2_device};

/// The protocol a fleet's devices speak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    #[default]
    /// Stratum V1 ([`crate::Sv1Device`]).
    Sv1,
    /// Stratum V2 on standard channels ([`crate::Sv2Device`]).
    Sv2,
}

impl Protocol {
    /// The name configs and `--protocol` use.
    pub const fn as_str(self) -> &'static str {
        match self {
            Protocol::Sv1 => "sv1",
            Protocol::Sv2 => "sv2",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sv1" | "v1" => Ok(Protocol::Sv1),
            "sv2" | "v2" => Ok(Protocol::Sv2),
            _ => Err(format!("unknown protocol {s:?} (expected sv1 or sv2)")),
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Device settings a fleet cannot run with.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    /// The SV1 device settings are invalid.
    Sv1(#[from] sv1_device::ConfigError),
    #[error(transparent)]
    /// The SV2 device settings are invalid.
    Sv2(#[from] sv2_device::ConfigError),
}

/// What a fleet run does.
#[derive(Clone)]
pub struct FleetConfig {
    /// The pool's address (Stratum V1 or V2, as `protocol` says).
    pub pool: SocketAddr,
    /// What every device speaks.
    pub protocol: Protocol,
    /// Devices to run.
    pub devices: u32,
    /// Hashes per second for all devices together, split evenly; 0: devices only hold their
    /// connections and read jobs.
    pub hash_budget: f64,
    /// Loopback source addresses to spread connections over (127.0.0.1, .2, ...).
    pub source_addrs: u32,
    /// Connection attempts per second across the fleet; 0: no pacing.
    pub connect_rate: f64,
    /// How long to run before draining; ZERO: until the stop future completes.
    pub duration: Duration,
    /// After the run, how long to wait for the verdicts of shares in flight.
    pub drain: Duration,
    /// Settings of SV1 devices.
    pub device: Sv1Config,
    /// Settings of SV2 devices. Without a nominal hash rate of their own they claim their share
    /// of `hash_budget` (or, with no budget, their profile's); without an endpoint, `pool`.
    pub sv2: Sv2Config,
    /// Seed of every device's jitter and nonce starts.
    pub seed: u64,
    /// The id of device 0 in events (so that several fleet processes use distinct ids).
    pub first_device_id: u64,
    /// The pool's process, whose CPU use over the run is reported.
    pub pool_pid: Option<u32>,
    /// Where device events go (disabled: none are built).
    pub events: EventSink,
    /// Longest SV1 line accepted from the pool (an SV2 frame's bound is `sv2.max_frame_bytes`).
    pub max_line: usize,
    /// Hashes a device computes per slice (the scheduling quantum).
    pub slice_hashes: u64,
    /// How long one TCP connect may take before it counts as failed.
    pub connect_timeout: Duration,
    /// Changes of every device's hash rate during the run (each a factor on its budget share).
    pub hash_rate_steps: Vec<HashRateStep>,
}

impl FleetConfig {
    /// One SV1 device against `pool`, no hashing, until stopped; set the rest as needed.
    pub fn new(pool: SocketAddr) -> Self {
        FleetConfig {
            pool,
            protocol: Protocol::Sv1,
            devices: 1,
            hash_budget: 0.0,
            source_addrs: 1,
            connect_rate: 1000.0,
            duration: Duration::ZERO,
            drain: Duration::from_secs(2),
            device: Sv1Config::default(),
            sv2: Sv2Config::default(),
            seed: 1,
            first_device_id: 0,
            pool_pid: None,
            events: EventSink::disabled(),
            max_line: 64 * 1024,
            slice_hashes: 2000,
            connect_timeout: Duration::from_secs(10),
            hash_rate_steps: Vec::new(),
        }
    }
}

/// Where a run is: running, waiting for the last verdicts, or closing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RunPhase {
    Run,
    Drain,
    Stop,
}

/// The devices' shared part, by protocol.
enum Kind {
    Sv1(Arc<Sv1Shared>),
    Sv2(Arc<Sv2Shared>),
}

/// A fleet ready to run; [`Fleet::stats`] can be read while it runs (for progress).
pub struct Fleet {
    config: FleetConfig,
    kind: Kind,
    stats: Arc<LiveStats>,
}

impl Fleet {
    /// Checks the device settings and builds what the devices share.
    pub fn new(mut config: FleetConfig) -> Result<Self, SetupError> {
        let kind = match config.protocol {
            Protocol::Sv1 => Kind::Sv1(Sv1Shared::new(config.device.clone())?),
            Protocol::Sv2 => {
                let c = &mut config.sv2;
                if c.nominal_hash_rate.is_none() && config.hash_budget > 0.0 && config.devices > 0 {
                    c.nominal_hash_rate = Some(config.hash_budget / config.devices as f64);
                }
                c.endpoint = c.endpoint.or(Some(config.pool));
                Kind::Sv2(Sv2Shared::new(c.clone())?)
            }
        };
        Ok(Fleet {
            config,
            kind,
            stats: Arc::new(LiveStats::default()),
        })
    }

    /// The settings the devices run with (an SV2 fleet's nominal hash rate filled in).
    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    /// The live counters.
    pub fn stats(&self) -> Arc<LiveStats> {
        Arc::clone(&self.stats)
    }

    /// Runs until the duration elapses or `stop` completes, drains, closes every connection
    /// and reports.
    pub async fn run(self, stop: impl Future<Output = ()>) -> FleetReport {
        let c = &self.config;
        if let Err(e) = net::raise_nofile_limit() {
            tracing::warn!("could not raise the open-file limit: {e}");
        }
        let rss_before = proc_stat::rss_bytes(None).unwrap_or(0);
        let cpu_before = proc_stat::self_cpu().unwrap_or_default();
        let pool_before = c.pool_pid.and_then(|p| proc_stat::process_cpu(p).ok());
        let started = Instant::now();
        let start_ns = now_ns();
        c.events.emit(events::Mark {
            name: ShortStr::new("fleet_start"),
        });

        let ctx = Arc::new(Ctx {
            pool: c.pool,
            source_addrs: c.source_addrs,
            stats: Arc::clone(&self.stats),
            events: c.events.clone(),
            rate: RateSchedule::new(
                if c.devices > 0 {
                    c.hash_budget.max(0.0) / c.devices as f64
                } else {
                    0.0
                },
                Timestamp::from_nanos(start_ns),
                &c.hash_rate_steps,
            ),
            slice_hashes: c.slice_hashes.max(1),
            max_line: c.max_line,
            connect_timeout: c.connect_timeout,
            pacer: Pacer::new(c.connect_rate),
            clock: Clock::now(),
        });
        let (phase_tx, phase_rx) = watch::channel(RunPhase::Run);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..c.devices {
            let (id, ctx, phase) = (
                c.first_device_id + i as u64,
                Arc::clone(&ctx),
                phase_rx.clone(),
            );
            match &self.kind {
                Kind::Sv1(shared) => {
                    let dev = Sv1Device::new(
                        Arc::clone(shared),
                        id,
                        i,
                        c.seed,
                        Timestamp::from_nanos(start_ns),
                    );
                    tasks.spawn(device_task(dev, ctx, phase));
                }
                Kind::Sv2(shared) => {
                    let dev = Sv2Device::new(
                        Arc::clone(shared),
                        id,
                        i,
                        c.seed,
                        Timestamp::from_nanos(start_ns),
                    );
                    tasks.spawn(device_task(dev, ctx, phase));
                }
            }
        }
        drop(phase_rx);

        // Run: report hashes once a second until the duration is up or we are told to stop.
        let mut hashes_reported = 0u64;
        let mut report_hashes = |events: &EventSink| {
            let h = self.stats.hashes.load(Relaxed);
            if h > hashes_reported && events.is_enabled() {
                events.emit(events::HashesDone {
                    device: None,
                    hashes: h - hashes_reported,
                });
            }
            hashes_reported = h;
            // The devices' own socket bytes and messages, as deltas over the whole fleet.
            self.stats.net.report(events);
        };
        // Each step is marked at the moment it takes effect, on the events' time line.
        let mut steps_due: Vec<u64> = c
            .hash_rate_steps
            .iter()
            .map(|s| start_ns + s.at().as_nanos() as u64)
            .collect();
        steps_due.sort_unstable();
        steps_due.reverse();
        let mut mark_steps = |events: &EventSink| {
            let now = now_ns();
            while steps_due.last().is_some_and(|&t| t <= now) {
                let t = steps_due.pop().expect("checked");
                events.emit_at(
                    t,
                    events::Mark {
                        name: ShortStr::new(STEP_MARK),
                    },
                );
            }
        };
        {
            tokio::pin!(stop);
            let until = (!c.duration.is_zero()).then(|| tokio::time::Instant::now() + c.duration);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stop => break,
                    _ = async {
                        match until {
                            Some(t) => tokio::time::sleep_until(t).await,
                            None => std::future::pending().await,
                        }
                    } => break,
                    _ = tick.tick() => {
                        report_hashes(&c.events);
                        mark_steps(&c.events);
                    }
                }
            }
        }

        // Drain: no new shares; wait for the verdicts of those in flight.
        let _ = phase_tx.send(RunPhase::Drain);
        c.events.emit(events::Mark {
            name: ShortStr::new("drain_start"),
        });
        // A device task on a worker thread may be in a hash slice as the phase changes: give it
        // one tick to count what it found before reading the count.
        let drain_until = Instant::now() + c.drain;
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            if self.stats.in_flight.load(Relaxed) <= 0 || Instant::now() >= drain_until {
                break;
            }
        }
        let elapsed = started.elapsed();
        let cpu = proc_stat::self_cpu()
            .unwrap_or_default()
            .saturating_sub(cpu_before);
        let pool_cpu = match (c.pool_pid, pool_before) {
            (Some(pid), Some(before)) => proc_stat::process_cpu(pid).ok().map(|after| {
                let s = after.saturating_sub(before).as_secs_f64();
                CpuUse {
                    pid,
                    cpu_s: s,
                    cpu_pct: 100.0 * s / elapsed.as_secs_f64().max(1e-9),
                    rss_bytes: proc_stat::rss_bytes(Some(pid)).ok(),
                }
            }),
            _ => None,
        };
        let rss = proc_stat::rss_bytes(None).unwrap_or(0);
        let s = &self.stats;
        let connected = s.connected.load(Relaxed).max(0) as u64;
        let ready = s.ready.load(Relaxed).max(0) as u64;
        let connects = s.connects.load(Relaxed);
        let connect_failures = s.connect_failures.load(Relaxed);
        let disconnects = s.disconnects.load(Relaxed);
        let accepted = s.accepted.load(Relaxed);
        report_hashes(&c.events);

        // Stop: close every connection.
        let _ = phase_tx.send(RunPhase::Stop);
        let closing = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(10), closing)
            .await
            .is_err()
        {
            tasks.abort_all();
        }
        c.events.emit(events::Mark {
            name: ShortStr::new("fleet_stop"),
        });

        let mut by_code = s.rejected_by_error_code();
        for slot in 0..REJECT_SLOTS {
            let n = s.rejected_by_code[slot].load(Relaxed);
            if n > 0 {
                by_code.insert(reject_slot_name(slot).to_owned(), n);
            }
        }
        let by_reason = s.rejected_by_reason();
        let secs = elapsed.as_secs_f64().max(1e-9);
        let hashes = s.hashes.load(Relaxed);
        FleetReport {
            pool: c.pool.to_string(),
            protocol: c.protocol.to_string(),
            profile: match c.protocol {
                Protocol::Sv1 => c.device.profile,
                Protocol::Sv2 => c.sv2.profile,
            }
            .to_string(),
            duration_s: secs,
            devices: c.devices as u64,
            connected,
            ready,
            connects,
            connect_failures,
            disconnects,
            jobs_received: s.jobs.load(Relaxed),
            shares: ShareCounts {
                sent: s.shares_sent.load(Relaxed),
                accepted: s.accepted.load(Relaxed),
                rejected: s.rejected.load(Relaxed),
                rejected_by_code: by_code,
                rejected_by_reason: by_reason,
                unanswered: s.unanswered.load(Relaxed),
                dropped: s.dropped.load(Relaxed),
            },
            accepted_per_s: accepted as f64 / secs,
            share_latency_ms: LatencyMs::from_histogram_us(&s.latency_snapshot()),
            blocks_found: s.blocks.load(Relaxed),
            hashes,
            hash_rate: hashes as f64 / secs,
            hash_budget: c.hash_budget,
            fleet_cpu_s: cpu.as_secs_f64(),
            fleet_cpu_pct: 100.0 * cpu.as_secs_f64() / secs,
            fleet_rss_bytes: rss,
            rss_per_device_bytes: if c.devices > 0 {
                rss.saturating_sub(rss_before) as f64 / c.devices as f64
            } else {
                0.0
            },
            pool_process: pool_cpu,
            protocol_errors: s.protocol_errors.load(Relaxed),
        }
    }
}

/// What every device task shares.
struct Ctx {
    pool: SocketAddr,
    source_addrs: u32,
    stats: Arc<LiveStats>,
    events: EventSink,
    /// Each device's hash rate over the run.
    rate: RateSchedule,
    slice_hashes: u64,
    max_line: usize,
    connect_timeout: Duration,
    pacer: Pacer,
    clock: Clock,
}

impl Ctx {
    fn tally(&self) -> Tally<'_> {
        Tally {
            stats: &self.stats,
            events: &self.events,
        }
    }
}

/// Maps CLOCK_MONOTONIC nanoseconds (the devices' clock) onto tokio instants.
struct Clock {
    base_ns: Timestamp,
    base: tokio::time::Instant,
}

impl Clock {
    fn now() -> Self {
        Clock {
            base: tokio::time::Instant::now(),
            base_ns: device_now(),
        }
    }

    fn instant(&self, at: Timestamp) -> tokio::time::Instant {
        // A day ahead stands for "never" (Timestamp::MAX would overflow the instant).
        let ahead = at.since(self.base_ns).min(Duration::from_secs(86_400));
        self.base + ahead
    }
}

/// The devices' time now.
fn device_now() -> Timestamp {
    Timestamp::from_nanos(now_ns())
}

/// Spaces connection attempts `1 / rate` apart across the fleet.
struct Pacer {
    interval_ns: u64,
    next: AtomicU64,
}

impl Pacer {
    fn new(rate: f64) -> Self {
        let interval_ns = if rate > 0.0 && rate.is_finite() {
            (1e9 / rate) as u64
        } else {
            0
        };
        Pacer {
            interval_ns,
            next: AtomicU64::new(0),
        }
    }

    /// The time this attempt may start.
    fn reserve(&self, now: Timestamp) -> Timestamp {
        if self.interval_ns == 0 {
            return now;
        }
        let mut cur = self.next.load(Relaxed);
        loop {
            let slot = cur.max(now.as_nanos());
            match self
                .next
                .compare_exchange_weak(cur, slot + self.interval_ns, Relaxed, Relaxed)
            {
                Ok(_) => return Timestamp::from_nanos(slot),
                Err(v) => cur = v,
            }
        }
    }
}

/// A device's share of the hash budget: a token bucket drawn down in slices.
struct HashClock {
    /// Whether the device hashes at all (a budget to share).
    enabled: bool,
    period: Duration,
    last: Timestamp,
    credit: f64,
    cap: f64,
    next_at: Timestamp,
}

impl HashClock {
    fn new(schedule: &RateSchedule, slice_hashes: u64, now: Timestamp, rng: &mut Rng) -> Self {
        let rate = schedule.base();
        let period_s = if rate > 0.0 {
            (slice_hashes as f64 / rate).clamp(0.005, 1.0)
        } else {
            1.0
        };
        let period = Duration::from_secs_f64(period_s);
        HashClock {
            enabled: rate > 0.0,
            period,
            last: now,
            credit: 0.0,
            // Room for a slice at the fastest rate a step sets.
            cap: 2.0 * schedule.peak() * period_s,
            // Devices start their slices at spread-out phases.
            next_at: now + period.mul_f64(rng.next_f64()),
        }
    }

    fn enabled(&self) -> bool {
        self.enabled
    }

    /// Not hashing (no job yet, or draining): bank nothing.
    fn idle(&mut self, now: Timestamp) {
        self.last = now;
        self.credit = 0.0;
        self.next_at = self.next_at.max(now);
    }

    /// Hashes this slice may compute, hashing at `rate` (per second) since the last slice.
    fn allowance(&mut self, rate: f64, now: Timestamp) -> u64 {
        let dt = now.since(self.last).as_secs_f64();
        self.credit = (self.credit + rate * dt).min(self.cap);
        self.last = now;
        self.credit.max(0.0) as u64
    }

    fn used(&mut self, hashes: u64, now: Timestamp) {
        self.credit -= hashes as f64;
        self.next_at = (self.next_at + self.period).max(now + self.period / 4);
    }
}

thread_local! {
    /// Reads land here; only a partial line is copied out of it.
    static READ_SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(64 * 1024));
    /// Writes are serialized here; only what the socket does not take at once is copied.
    static WRITE_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A device's whole life: connect (paced), run the connection, back off, again.
///
/// Written as a function returning an `async move` block rather than as an `async fn`: an
/// `async fn` keeps its arguments and the locals they move into as two copies in its state,
/// which would hold the device twice in every task.
#[allow(clippy::manual_async_fn)]
fn device_task<D: Device>(
    mut dev: D,
    ctx: Arc<Ctx>,
    mut phase: watch::Receiver<RunPhase>,
) -> impl Future<Output = ()> + Send {
    async move {
        let sleep = tokio::time::sleep_until(ctx.clock.instant(device_now()));
        tokio::pin!(sleep);
        loop {
            if *phase.borrow() != RunPhase::Run {
                return;
            }
            let now = device_now();
            if !dev.wants_connect(now) {
                let Some(at) = dev.poll_timeout() else {
                    return;
                };
                sleep.as_mut().reset(ctx.clock.instant(at));
                tokio::select! {
                    _ = &mut sleep => {}
                    r = phase.changed() => if r.is_err() { return },
                }
                continue;
            }
            let slot = ctx.pacer.reserve(now);
            if slot > now {
                sleep.as_mut().reset(ctx.clock.instant(slot));
                tokio::select! {
                    _ = &mut sleep => {}
                    r = phase.changed() => {
                        if r.is_err() {
                            return;
                        }
                        continue;
                    }
                }
            }
            let source = net::source_addr(ctx.pool, dev.index(), ctx.source_addrs);
            // Boxed: the connect future is large and lives only while connecting, so it is not
            // part of every idle task's size.
            let attempt = Box::pin(tokio::time::timeout(
                ctx.connect_timeout,
                net::connect(ctx.pool, source),
            ));
            let result = tokio::select! {
                r = attempt => r,
                r = phase.changed() => {
                    if r.is_err() {
                        return;
                    }
                    continue;
                }
            };
            match result {
                Ok(Ok(stream)) => {
                    let reason =
                        connection(&mut dev, stream, &ctx, &mut phase, sleep.as_mut()).await;
                    if reason == CloseReason::Stop {
                        return;
                    }
                }
                Ok(Err(e)) => {
                    tracing::debug!(device = dev.id(), "connect failed: {e}");
                    ctx.stats.connect_failures.fetch_add(1, Relaxed);
                    dev.handle_connect_failed(device_now());
                }
                Err(_) => {
                    tracing::debug!(device = dev.id(), "connect timed out");
                    ctx.stats.connect_failures.fetch_add(1, Relaxed);
                    dev.handle_connect_failed(device_now());
                }
            }
        }
    }
}

/// One connection's life; returns why it ended (the device has been told).
async fn connection<D: Device>(
    dev: &mut D,
    mut stream: TcpStream,
    ctx: &Ctx,
    phase: &mut watch::Receiver<RunPhase>,
    mut sleep: Pin<&mut Sleep>,
) -> CloseReason {
    let now = device_now();
    let stats = &*ctx.stats;
    stats.connects.fetch_add(1, Relaxed);
    stats.connected.fetch_add(1, Relaxed);
    if ctx.events.is_enabled() {
        if let (Ok(peer), Ok(local)) = (stream.peer_addr(), stream.local_addr()) {
            ctx.events.emit_at(
                now.as_nanos(),
                events::ConnectionOpened {
                    conn: dev.id(),
                    peer,
                    local,
                    label: ShortStr::new(&dev.worker_name()),
                },
            );
        }
    }
    dev.handle_connected(now);
    let mut tally = ctx.tally();
    let mut rx = D::Receive::default();
    let mut rng = Rng::new(dev.id() ^ 0x5eed);
    let mut clock = HashClock::new(&ctx.rate, ctx.slice_hashes, now, &mut rng);
    let reason = loop {
        let ph = *phase.borrow();
        if ph == RunPhase::Stop {
            break CloseReason::Stop;
        }
        if transmit(dev, &mut stream, &mut tally).await.is_err() {
            break CloseReason::Reset;
        }
        if let Some(r) = dev.close_requested() {
            break r;
        }
        let hashing = ph == RunPhase::Run && clock.enabled() && dev.can_hash();
        if !hashing {
            clock.idle(device_now());
        }
        let wake = match (dev.poll_timeout(), hashing.then_some(clock.next_at)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(w) = wake {
            sleep.as_mut().reset(ctx.clock.instant(w));
        }
        tokio::select! {
            biased;
            r = phase.changed() => {
                if r.is_err() {
                    break CloseReason::Stop;
                }
            }
            r = stream.readable() => {
                if r.is_err() {
                    break CloseReason::Reset;
                }
                if let Err(reason) = read_socket(dev, &stream, &mut rx, ctx.max_line, &mut tally) {
                    break reason;
                }
            }
            _ = &mut sleep, if wake.is_some() => {
                let now = device_now();
                dev.handle_timeout(now, &mut tally);
                if hashing && now >= clock.next_at {
                    let n = clock.allowance(ctx.rate.at(now), now);
                    let out = dev.hash(now, n, &mut tally);
                    clock.used(out.hashes, now);
                    stats.hashes.fetch_add(out.hashes, Relaxed);
                }
            }
        }
    };
    stats.connected.fetch_sub(1, Relaxed);
    stats.disconnects.fetch_add(1, Relaxed);
    if dev.is_ready() {
        stats.ready.fetch_sub(1, Relaxed);
    }
    let now = device_now();
    ctx.events.emit_at(
        now.as_nanos(),
        events::ConnectionClosed {
            conn: dev.id(),
            reason: ShortStr::new(reason.as_str()),
        },
    );
    dev.handle_closed(now, reason, &mut tally);
    reason
}

/// Sends what the device has to send: straight from the per-thread buffer when the socket
/// takes it all (the usual case), through an owned copy of the rest when it does not.
async fn transmit<D: Device>(
    dev: &mut D,
    stream: &mut TcpStream,
    tally: &mut Tally<'_>,
) -> io::Result<()> {
    let rest = WRITE_SCRATCH.with_borrow_mut(|out| -> io::Result<Option<Vec<u8>>> {
        out.clear();
        if dev.poll_transmit(out, device_now(), tally) == 0 {
            return Ok(None);
        }
        let mut off = 0;
        while off < out.len() {
            match stream.try_write(&out[off..]) {
                Ok(n) => {
                    off += n;
                    tally.stats.net.add_written(Side::Client, n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(Some(out[off..].to_vec()))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    })?;
    if let Some(rest) = rest {
        stream.write_all(&rest).await?;
        tally.stats.net.add_written(Side::Client, rest.len());
    }
    Ok(())
}

/// Reads what the socket has and hands it to the device, stamped with its arrival.
fn read_socket<D: Device>(
    dev: &mut D,
    stream: &TcpStream,
    rx: &mut D::Receive,
    max_line: usize,
    tally: &mut Tally<'_>,
) -> Result<(), CloseReason> {
    READ_SCRATCH.with_borrow_mut(|buf| {
        // Bounded, so one chatty connection cannot hold the thread.
        for _ in 0..16 {
            buf.clear();
            match tap::net::recv_stamped(stream, buf) {
                Ok((0, _)) => return Err(CloseReason::Eof),
                Ok((n, stamp)) => {
                    tally.stats.net.add_read(Side::Client, n);
                    // The bytes' arrival at the socket, as a real device would see them.
                    let at = Timestamp::from_nanos(tap::net::rx_monotonic_ns(stamp));
                    dev.receive(rx, &buf[..n], max_line, at, tally)?;
                    if dev.close_requested().is_some() {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(CloseReason::Reset),
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    #[test]
    fn pacer_spaces_attempts() {
        let p = Pacer::new(1000.0);
        let t0 = 1_000_000_000;
        let slots: Vec<u64> = (0..5).map(|_| p.reserve(at(t0)).as_nanos()).collect();
        assert_eq!(
            slots,
            [
                t0,
                t0 + 1_000_000,
                t0 + 2_000_000,
                t0 + 3_000_000,
                t0 + 4_000_000
            ]
        );
        // Later on, an attempt after a quiet spell goes at once.
        assert_eq!(p.reserve(at(t0 + 10_000_000_000)), at(t0 + 10_000_000_000));
        let unpaced = Pacer::new(0.0);
        assert_eq!(unpaced.reserve(at(t0)), at(t0));
        assert_eq!(unpaced.reserve(at(t0)), at(t0));
    }

    #[test]
    fn hash_clock_meets_its_rate_without_bursts() {
        let mut rng = Rng::new(3);
        let rate = 200.0; // a small device among thousands
        let schedule = RateSchedule::new(rate, at(0), &[]);
        let mut c = HashClock::new(&schedule, 2000, at(0), &mut rng);
        assert_eq!(c.period, Duration::from_secs(1), "capped at a second");
        let mut now = c.next_at;
        let mut total = 0;
        for _ in 0..100 {
            let n = c.allowance(schedule.at(now), now);
            assert!(n as f64 <= c.cap, "{n}");
            total += n;
            c.used(n, now);
            now = c.next_at;
        }
        let secs = now.as_nanos() as f64 / 1e9;
        let achieved = total as f64 / secs;
        assert!((achieved - rate).abs() / rate < 0.05, "{achieved}");
        // A big device slices often, in bounded pieces.
        let big = RateSchedule::new(5e6, at(0), &[]);
        let mut c = HashClock::new(&big, 2000, at(0), &mut rng);
        assert_eq!(c.period, Duration::from_millis(5));
        let n = c.allowance(5e6, at(10_000_000_000));
        assert!(n as f64 <= 2.0 * 5e6 * 0.005 + 1.0, "{n}");
        c.idle(at(20_000_000_000));
        assert_eq!(
            c.allowance(5e6, at(20_000_000_000)),
            0,
            "nothing banked while idle"
        );
    }

    #[test]
    fn hash_clock_follows_a_step_in_the_rate() {
        let mut rng = Rng::new(5);
        let steps = ["50s=3".parse().unwrap()];
        let schedule = RateSchedule::new(200.0, at(0), &steps);
        let mut c = HashClock::new(&schedule, 2000, at(0), &mut rng);
        let (mut before, mut after) = (0u64, 0u64);
        let mut now = c.next_at;
        while now < at(100_000_000_000) {
            let n = c.allowance(schedule.at(now), now);
            if now < at(50_000_000_000) {
                before += n;
            } else {
                after += n;
            }
            c.used(n, now);
            now = c.next_at;
        }
        // Tripled: the credit cap leaves room for the faster rate.
        let ratio = after as f64 / before as f64;
        assert!((ratio - 3.0).abs() < 0.2, "{ratio}");
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    fn ctx() -> Arc<Ctx> {
        Arc::new(Ctx {
            pool: "127.0.0.1:1".parse().unwrap(),
            source_addrs: 1,
            stats: Arc::new(LiveStats::default()),
            events: EventSink::disabled(),
            rate: RateSchedule::new(0.0, Timestamp::from_nanos(0), &[]),
            slice_hashes: 1,
            max_line: 1,
            connect_timeout: Duration::from_secs(1),
            pacer: Pacer::new(0.0),
            clock: Clock::now(),
        })
    }

    /// The task's future holds the device once, the connection's state and one timer: no second
    /// copy of the device.
    fn task_size<D: Device>(make: impl Fn() -> D) -> usize {
        let ctx = ctx();
        let (_tx, rx) = watch::channel(RunPhase::Run);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let stream = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let mut d = make();
            let sl = tokio::time::sleep(Duration::ZERO);
            tokio::pin!(sl);
            let mut rx2 = rx.clone();
            println!(
                "connection: {} bytes",
                std::mem::size_of_val(&connection(&mut d, stream, &ctx, &mut rx2, sl.as_mut()))
            );
        });
        let size = std::mem::size_of_val(&device_task(make(), ctx, rx));
        println!(
            "{}: {} bytes, its task future {size} bytes",
            std::any::type_name::<D>(),
            std::mem::size_of::<D>()
        );
        assert!(size < std::mem::size_of::<D>() + 1024, "{size}");
        size
    }

    #[test]
    fn a_device_task_is_small() {
        let shared = Sv1Shared::new(Sv1Config::default()).unwrap();
        task_size(|| Sv1Device::new(Arc::clone(&shared), 0, 0, 0, Timestamp::ZERO));
        let shared = Sv2Shared::new(Sv2Config::default()).unwrap();
        task_size(|| Sv2Device::new(Arc::clone(&shared), 0, 0, 0, Timestamp::ZERO));
    }
}
