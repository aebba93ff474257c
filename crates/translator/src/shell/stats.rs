//! What the translator has done and where its upstream stands, counted by the core task and
//! read by the HTTP task ([`super::http`]) without stopping the core.
//!
//! The counters are atomics that only the core writes: a share costs a few relaxed increments,
//! whatever reads them. The upstream's state (which one, its channel, since when, why the last
//! was lost) changes a handful of times per connection, and its fields only make sense
//! together (an index from the new upstream with the channel id of the old one would be a lie),
//! so it sits behind a small mutex instead, held by either side only to copy a few words.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use events::Reason;

use super::Summary;
use crate::config::ChannelMode;
use crate::mode::ChannelCensus;
use crate::shares::UpstreamVerdict;

/// Where the upstream connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamState {
    /// Its channel is open: devices have work and shares go upstream.
    Open,
    /// Connected, the channel asked for.
    Opening,
    /// The upstream in use was lost; the others are being tried.
    FailingOver,
}

impl UpstreamState {
    /// The state's name in `/api/status` and the metrics (`open`, `opening`, `failing_over`).
    pub const fn as_str(self) -> &'static str {
        match self {
            UpstreamState::Open => "open",
            UpstreamState::Opening => "opening",
            UpstreamState::FailingOver => "failing_over",
        }
    }
}

/// The last upstream lost, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Loss {
    /// Its place in the configured list of upstreams.
    pub index: usize,
    /// Its address.
    pub address: SocketAddr,
    /// Why it was lost.
    pub reason: String,
    /// How long ago.
    pub ago: Duration,
}

/// The upstream at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamSnapshot {
    /// Open, opening or failing over.
    pub state: UpstreamState,
    /// The upstream in use (while failing over: the one lost), as an index into the list.
    pub index: usize,
    /// Its address.
    pub address: SocketAddr,
    /// The open channel's id, where the protocol has one.
    pub channel_id: Option<u32>,
    /// The channel's share target as a difficulty (0 while no channel is open).
    pub difficulty: f64,
    /// How long it has been in `state`.
    pub for_: Duration,
    /// When it entered `state`, as wall-clock milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
    /// Channels opened since start, over every upstream.
    pub channels_opened: u64,
    /// Channels open now: 1 or 0 in aggregated mode, one per device with a channel in
    /// per-device mode.
    pub channels_open: u64,
    /// The channels in detail, as of the core's last tick.
    pub channels: ChannelsSnapshot,
    /// Upstream connections lost since start.
    pub upstreams_lost: u64,
    /// The last upstream lost, if any.
    pub last_lost: Option<Loss>,
    /// The SV2 extensions the upstream in use agreed to (0x0002: shares name their worker).
    pub extensions: Vec<u16>,
}

/// The upstream channels beyond the count open: what per-device mode needs described (in
/// aggregated mode the one channel, opening counted by the upstream's state instead).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChannelsSnapshot {
    /// Asked for, not answered yet.
    pub opening: u64,
    /// Closed on their devices' departure, awaiting verdicts on shares already sent.
    pub draining: u64,
    /// Requests given up unanswered (their devices closed to ask again), since start.
    pub timed_out: u64,
    /// Requests refused by the pool, since start.
    pub refused: u64,
    /// Open channels closed by the pool, since start.
    pub closed_by_pool: u64,
    /// The easiest and hardest share target over the open channels, as difficulties (0 and 0
    /// while none is open).
    pub difficulty_min: f64,
    /// The hardest share target over the open channels, as a difficulty (0 while none is open).
    pub difficulty_max: f64,
}

/// Every figure at one moment, for the endpoints to render.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsSnapshot {
    /// Aggregated or per-device.
    pub mode: ChannelMode,
    /// Time since the shell started.
    pub uptime: Duration,
    /// Devices connected now.
    pub devices_connected: u64,
    /// Device connections accepted since start.
    pub devices_opened: u64,
    /// Devices dropped for not reading their writes, since start.
    pub devices_dropped_slow: u64,
    /// Jobs sent to devices (each counted once, whatever the devices).
    pub jobs_sent: u64,
    /// Device shares accepted locally.
    pub accepted: u64,
    /// Device shares rejected locally, by reason.
    pub rejected: events::ReasonCounts,
    /// Sum of accepted shares' difficulties, in difficulty-1 units.
    pub accepted_work: f64,
    /// Shares forwarded upstream.
    pub forwarded: u64,
    /// Forwarded shares the upstream accepted.
    pub upstream_accepted: u64,
    /// Forwarded shares the upstream rejected, by reason (its error code read as one).
    pub upstream_rejected: events::ReasonCounts,
    /// Forwarded shares that got no verdict.
    pub upstream_unanswered: u64,
    /// Forwarded shares awaiting a verdict now.
    pub in_flight: u64,
    /// The devices' hash rate: vardiff's measurement of each, or the configured rate until it
    /// has one ([`crate::Translator::nominal_hash_rate`]), in hashes per second.
    pub hash_rate: f64,
    /// Where the upstream stands.
    pub upstream: UpstreamSnapshot,
    /// The device side's edge: refused, closed and banned, by reason.
    pub admission: Option<edge::AdmissionSnapshot>,
}

/// The mutex-held part: see the module's comment.
#[derive(Debug)]
struct Upstream {
    state: UpstreamState,
    index: usize,
    address: SocketAddr,
    channel_id: Option<u32>,
    difficulty: f64,
    since: Instant,
    since_wall: SystemTime,
    last_lost: Option<(usize, SocketAddr, String, Instant)>,
    extensions: Vec<u16>,
}

/// The shared figures: written by the core task only, read by anyone.
#[derive(Debug)]
pub struct Stats {
    mode: ChannelMode,
    started: Instant,
    devices_connected: AtomicU64,
    devices_opened: AtomicU64,
    devices_dropped_slow: AtomicU64,
    jobs_sent: AtomicU64,
    accepted: AtomicU64,
    rejected: [AtomicU64; 7],
    /// An f64's bits. One writer, so a load and a store make a correct add.
    accepted_work: AtomicU64,
    forwarded: AtomicU64,
    upstream_accepted: AtomicU64,
    upstream_rejected: [AtomicU64; 7],
    upstream_unanswered: AtomicU64,
    in_flight: AtomicU64,
    /// An f64's bits.
    hash_rate: AtomicU64,
    channels_opened: AtomicU64,
    channels_open: AtomicU64,
    channels_opening: AtomicU64,
    channels_draining: AtomicU64,
    channel_requests_timed_out: AtomicU64,
    channels_refused: AtomicU64,
    channels_closed_by_pool: AtomicU64,
    /// f64 bits, both.
    channel_difficulty_min: AtomicU64,
    channel_difficulty_max: AtomicU64,
    upstreams_lost: AtomicU64,
    upstream: Mutex<Upstream>,
    /// The device side's gate, once it listens.
    gate: std::sync::OnceLock<Arc<edge::Gate>>,
}

impl Stats {
    /// Figures for a translator whose first channel is open on upstream `index` at `address`.
    pub fn new(
        started: Instant,
        index: usize,
        address: SocketAddr,
        channel_id: Option<u32>,
        difficulty: f64,
    ) -> Stats {
        Stats {
            mode: ChannelMode::Aggregated,
            started,
            devices_connected: AtomicU64::new(0),
            devices_opened: AtomicU64::new(0),
            devices_dropped_slow: AtomicU64::new(0),
            jobs_sent: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            rejected: Default::default(),
            accepted_work: AtomicU64::new(0f64.to_bits()),
            forwarded: AtomicU64::new(0),
            upstream_accepted: AtomicU64::new(0),
            upstream_rejected: Default::default(),
            upstream_unanswered: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            hash_rate: AtomicU64::new(0f64.to_bits()),
            channels_opened: AtomicU64::new(1),
            channels_open: AtomicU64::new(1),
            channels_opening: AtomicU64::new(0),
            channels_draining: AtomicU64::new(0),
            channel_requests_timed_out: AtomicU64::new(0),
            channels_refused: AtomicU64::new(0),
            channels_closed_by_pool: AtomicU64::new(0),
            channel_difficulty_min: AtomicU64::new(difficulty.to_bits()),
            channel_difficulty_max: AtomicU64::new(difficulty.to_bits()),
            upstreams_lost: AtomicU64::new(0),
            upstream: Mutex::new(Upstream {
                state: UpstreamState::Open,
                index,
                address,
                channel_id,
                difficulty,
                since: Instant::now(),
                since_wall: SystemTime::now(),
                last_lost: None,
                extensions: Vec::new(),
            }),
            gate: std::sync::OnceLock::new(),
        }
    }

    /// The device side's gate, for the `admission` figures (on the same clock as these).
    pub fn set_gate(&self, gate: Arc<edge::Gate>) {
        let _ = self.gate.set(gate);
    }

    /// The device side's gate: the core bans and strikes the addresses of devices it closes
    /// for what they sent (malformed lines, invalid shares).
    pub fn gate(&self) -> Option<&Arc<edge::Gate>> {
        self.gate.get()
    }

    /// The same figures for a translator in `mode`: in per-device mode the upstream is open
    /// once connected, and channels come with devices (none yet).
    pub fn with_mode(mut self, mode: ChannelMode) -> Stats {
        self.mode = mode;
        if mode == ChannelMode::PerDevice {
            self.channels_opened = AtomicU64::new(0);
            self.channels_open = AtomicU64::new(0);
        }
        self
    }

    fn upstream(&self) -> MutexGuard<'_, Upstream> {
        // Nothing panics while holding it; if something did, its few words are still whole.
        self.upstream.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A device connected; `connected_now` are connected with it.
    pub fn device_opened(&self, connected_now: usize) {
        self.devices_opened.fetch_add(1, Relaxed);
        self.devices_connected.store(connected_now as u64, Relaxed);
    }

    /// A device left; `connected_now` remain.
    pub fn device_closed(&self, connected_now: usize) {
        self.devices_connected.store(connected_now as u64, Relaxed);
    }

    /// A device was dropped for not reading its writes.
    pub fn device_dropped_slow(&self) {
        self.devices_dropped_slow.fetch_add(1, Relaxed);
    }

    /// A job went to the devices.
    pub fn job_sent(&self) {
        self.jobs_sent.fetch_add(1, Relaxed);
    }

    /// A device's share accepted at `difficulty`.
    pub fn share_accepted(&self, difficulty: f64) {
        self.accepted.fetch_add(1, Relaxed);
        // A NaN or negative difficulty would poison the sum for good.
        if difficulty.is_finite() && difficulty > 0.0 {
            let sum = f64::from_bits(self.accepted_work.load(Relaxed)) + difficulty;
            self.accepted_work.store(sum.to_bits(), Relaxed);
        }
    }

    /// A device's share rejected locally, for `reason`.
    pub fn share_rejected(&self, reason: Reason) {
        self.rejected[reason.index()].fetch_add(1, Relaxed);
    }

    /// A share went upstream.
    pub fn share_forwarded(&self) {
        self.forwarded.fetch_add(1, Relaxed);
    }

    /// The upstream's verdict on a forwarded share (or its absence).
    pub fn upstream_verdict(&self, verdict: &UpstreamVerdict) {
        match verdict {
            UpstreamVerdict::Accepted => self.upstream_accepted.fetch_add(1, Relaxed),
            UpstreamVerdict::Rejected(code) => {
                self.upstream_rejected[Reason::from_sv2_code(code).index()].fetch_add(1, Relaxed)
            }
            UpstreamVerdict::Unanswered => self.upstream_unanswered.fetch_add(1, Relaxed),
        };
    }

    /// Forwarded shares awaiting a verdict now.
    pub fn set_in_flight(&self, n: usize) {
        self.in_flight.store(n as u64, Relaxed);
    }

    /// The devices' hash rate, in hashes per second.
    pub fn set_hash_rate(&self, hashes_per_second: f64) {
        self.hash_rate.store(hashes_per_second.to_bits(), Relaxed);
    }

    /// The upstream in use was lost; failover starts.
    pub fn upstream_lost(&self, reason: &str) {
        self.upstreams_lost.fetch_add(1, Relaxed);
        let now = Instant::now();
        let mut u = self.upstream();
        u.last_lost = Some((u.index, u.address, reason.to_owned(), now));
        u.state = UpstreamState::FailingOver;
        u.channel_id = None;
        u.difficulty = 0.0;
        u.since = now;
        u.since_wall = SystemTime::now();
    }

    /// The extensions the upstream connected now agreed to.
    pub fn upstream_extensions(&self, extensions: &[u16]) {
        self.upstream().extensions = extensions.to_vec();
    }

    /// Upstream `index` at `address` is connected; its channel is asked for.
    pub fn upstream_opening(&self, index: usize, address: SocketAddr) {
        let mut u = self.upstream();
        u.state = UpstreamState::Opening;
        u.index = index;
        u.address = address;
        u.since = Instant::now();
        u.since_wall = SystemTime::now();
    }

    /// Per-device mode: the connection asked for is up (SetupConnection done); devices'
    /// channels open on it as they come.
    pub fn upstream_ready(&self) {
        let mut u = self.upstream();
        u.state = UpstreamState::Open;
        u.since = Instant::now();
        u.since_wall = SystemTime::now();
    }

    /// Per-device mode: one device's channel opened.
    pub fn device_channel_opened(&self) {
        self.channels_opened.fetch_add(1, Relaxed);
    }

    /// Channels open now.
    pub fn set_channels_open(&self, n: usize) {
        self.channels_open.store(n as u64, Relaxed);
    }

    /// The channels as the core counted them on its tick (the count open is kept by
    /// [`Stats::set_channels_open`], message by message).
    pub fn set_channels(&self, c: &ChannelCensus) {
        self.channels_opening.store(c.opening as u64, Relaxed);
        self.channels_draining.store(c.draining as u64, Relaxed);
        self.channel_requests_timed_out.store(c.timed_out, Relaxed);
        self.channels_refused.store(c.refused, Relaxed);
        self.channels_closed_by_pool
            .store(c.closed_by_pool, Relaxed);
        let (lo, hi) = c.difficulty.unwrap_or((0.0, 0.0));
        self.channel_difficulty_min.store(lo.to_bits(), Relaxed);
        self.channel_difficulty_max.store(hi.to_bits(), Relaxed);
    }

    /// The channel asked for is open.
    pub fn channel_opened(&self, channel_id: Option<u32>, difficulty: f64) {
        self.channels_opened.fetch_add(1, Relaxed);
        let mut u = self.upstream();
        u.state = UpstreamState::Open;
        u.channel_id = channel_id;
        u.difficulty = difficulty;
        u.since = Instant::now();
        u.since_wall = SystemTime::now();
    }

    /// The channel's share target changed, as a difficulty.
    pub fn target_changed(&self, difficulty: f64) {
        self.upstream().difficulty = difficulty;
    }

    /// Whether the upstream's channel is open (per-device mode: its connection is ready).
    pub fn is_open(&self) -> bool {
        self.upstream().state == UpstreamState::Open
    }

    /// Every figure now, copied.
    pub fn snapshot(&self) -> StatsSnapshot {
        let now = Instant::now();
        let load = |a: &AtomicU64| a.load(Relaxed);
        let by_reason =
            |a: &[AtomicU64; 7]| events::ReasonCounts(std::array::from_fn(|i| load(&a[i])));
        let upstream = {
            let u = self.upstream();
            UpstreamSnapshot {
                state: u.state,
                index: u.index,
                address: u.address,
                channel_id: u.channel_id,
                difficulty: u.difficulty,
                for_: now.saturating_duration_since(u.since),
                since_unix_ms: u
                    .since_wall
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                channels_opened: load(&self.channels_opened),
                channels_open: load(&self.channels_open),
                channels: ChannelsSnapshot {
                    opening: load(&self.channels_opening),
                    draining: load(&self.channels_draining),
                    timed_out: load(&self.channel_requests_timed_out),
                    refused: load(&self.channels_refused),
                    closed_by_pool: load(&self.channels_closed_by_pool),
                    difficulty_min: f64::from_bits(load(&self.channel_difficulty_min)),
                    difficulty_max: f64::from_bits(load(&self.channel_difficulty_max)),
                },
                upstreams_lost: load(&self.upstreams_lost),
                last_lost: u
                    .last_lost
                    .as_ref()
                    .map(|(index, address, reason, at)| Loss {
                        index: *index,
                        address: *address,
                        reason: reason.clone(),
                        ago: now.saturating_duration_since(*at),
                    }),
                extensions: u.extensions.clone(),
            }
        };
        StatsSnapshot {
            mode: self.mode,
            uptime: now.saturating_duration_since(self.started),
            devices_connected: load(&self.devices_connected),
            devices_opened: load(&self.devices_opened),
            devices_dropped_slow: load(&self.devices_dropped_slow),
            jobs_sent: load(&self.jobs_sent),
            accepted: load(&self.accepted),
            rejected: by_reason(&self.rejected),
            accepted_work: f64::from_bits(load(&self.accepted_work)),
            forwarded: load(&self.forwarded),
            upstream_accepted: load(&self.upstream_accepted),
            upstream_rejected: by_reason(&self.upstream_rejected),
            upstream_unanswered: load(&self.upstream_unanswered),
            in_flight: load(&self.in_flight),
            hash_rate: f64::from_bits(load(&self.hash_rate)),
            upstream,
            admission: self.gate.get().map(|g| {
                g.snapshot(edge::Timestamp::from_millis(
                    now.saturating_duration_since(self.started).as_millis() as u64,
                ))
            }),
        }
    }

    /// The closing summary.
    pub fn summary(&self) -> Summary {
        let s = self.snapshot();
        Summary {
            devices_connected: s.devices_opened,
            devices_dropped_slow: s.devices_dropped_slow,
            jobs: s.jobs_sent,
            shares_accepted: s.accepted,
            shares_rejected: s.rejected.total(),
            shares_forwarded: s.forwarded,
            upstream_accepted: s.upstream_accepted,
            upstream_rejected: s.upstream_rejected.total(),
            upstream_unanswered: s.upstream_unanswered,
            channels_opened: s.upstream.channels_opened,
            upstreams_lost: s.upstream.upstreams_lost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> Stats {
        Stats::new(
            Instant::now(),
            0,
            "127.0.0.1:3333".parse().unwrap(),
            Some(7),
            512.0,
        )
    }

    #[test]
    fn counts_reach_the_snapshot_and_the_summary() {
        let s = stats();
        s.device_opened(1);
        s.device_opened(2);
        s.device_closed(1);
        s.job_sent();
        s.share_accepted(0.5);
        s.share_accepted(2.0);
        s.share_accepted(f64::NAN);
        s.share_rejected(Reason::Stale);
        s.share_rejected(Reason::Duplicate);
        s.share_rejected(Reason::Stale);
        s.share_forwarded();
        s.share_forwarded();
        s.upstream_verdict(&UpstreamVerdict::Accepted);
        s.upstream_verdict(&UpstreamVerdict::Rejected("stale-share".into()));
        s.upstream_verdict(&UpstreamVerdict::Rejected("made-up".into()));
        s.upstream_verdict(&UpstreamVerdict::Unanswered);
        s.set_in_flight(3);
        s.set_hash_rate(80e3);
        let snap = s.snapshot();
        assert_eq!((snap.devices_connected, snap.devices_opened), (1, 2));
        assert_eq!(snap.accepted, 3);
        assert_eq!(snap.accepted_work, 2.5, "the NaN counts as nothing");
        assert_eq!(snap.rejected.get(Reason::Stale), 2);
        assert_eq!(snap.rejected.get(Reason::Duplicate), 1);
        assert_eq!(snap.rejected.total(), 3);
        assert_eq!(snap.upstream_rejected.get(Reason::Stale), 1);
        assert_eq!(snap.upstream_rejected.get(Reason::Other), 1);
        assert_eq!((snap.upstream_accepted, snap.upstream_unanswered), (1, 1));
        assert_eq!((snap.in_flight, snap.hash_rate), (3, 80e3));
        let sum = s.summary();
        assert_eq!(sum.devices_connected, 2, "every device that connected");
        assert_eq!((sum.shares_accepted, sum.shares_rejected), (3, 3));
        assert_eq!((sum.shares_forwarded, sum.upstream_rejected), (2, 2));
        assert_eq!(sum.channels_opened, 1);
    }

    #[test]
    fn the_channel_census_reaches_the_snapshot() {
        let s = stats();
        let c = s.snapshot().upstream.channels;
        assert_eq!(
            (c.difficulty_min, c.difficulty_max),
            (512.0, 512.0),
            "the first channel's"
        );
        s.set_channels(&ChannelCensus {
            open: 2,
            opening: 1,
            draining: 3,
            timed_out: 7,
            refused: 1,
            closed_by_pool: 2,
            difficulty: Some((1.5, 64.0)),
        });
        let c = s.snapshot().upstream.channels;
        assert_eq!(
            (
                c.opening,
                c.draining,
                c.timed_out,
                c.refused,
                c.closed_by_pool
            ),
            (1, 3, 7, 1, 2)
        );
        assert_eq!((c.difficulty_min, c.difficulty_max), (1.5, 64.0));
        assert_eq!(
            s.snapshot().upstream.channels_open,
            1,
            "the count open is set message by message, not by the census"
        );
    }

    #[test]
    fn the_upstream_moves_through_failover() {
        let s = stats();
        assert!(s.is_open());
        let u = s.snapshot().upstream;
        assert_eq!(
            (u.state, u.index, u.channel_id),
            (UpstreamState::Open, 0, Some(7))
        );
        assert_eq!(u.difficulty, 512.0);

        s.upstream_lost("connection reset");
        assert!(!s.is_open());
        let u = s.snapshot().upstream;
        assert_eq!((u.state, u.channel_id), (UpstreamState::FailingOver, None));
        let lost = u.last_lost.unwrap();
        assert_eq!((lost.index, lost.reason.as_str()), (0, "connection reset"));

        let second: SocketAddr = "127.0.0.1:4444".parse().unwrap();
        s.upstream_opening(1, second);
        assert_eq!(s.snapshot().upstream.state, UpstreamState::Opening);
        assert!(!s.is_open());
        s.channel_opened(Some(9), 64.0);
        s.target_changed(128.0);
        let u = s.snapshot().upstream;
        assert_eq!(
            (u.state, u.index, u.address, u.channel_id),
            (UpstreamState::Open, 1, second, Some(9))
        );
        assert_eq!(u.difficulty, 128.0);
        assert_eq!((u.channels_opened, u.upstreams_lost), (2, 1));
        assert!(u.last_lost.is_some(), "the last loss stays listed");
    }
}
