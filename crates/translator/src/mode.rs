//! What the shell drives, whichever way devices map onto upstream channels: aggregated mode
//! ([`Translator`], every device on one channel) or per-device mode ([`crate::PerDevice`], a
//! channel each). The shell's core task is written once over [`Mode`]; the two differ in how
//! far an upstream message reaches and in whether a channel's trouble is the connection's.

use std::time::Duration;

use primitives::Timestamp;
use primitives::{Difficulty, Target};

use crate::config::ChannelMode;
use crate::downstream::{Device, LineOutcome};
use crate::translator::{Event, Translator};
use crate::uplink::Uplink;
use crate::DeviceId;

/// Whose channel an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The one channel every device shares: its loss is the upstream's (failover follows).
    Connection,
    /// One device's own channel: its loss ends that device only.
    Device(DeviceId),
}

/// An event with the channel it happened on, as it stood then.
#[derive(Clone, Debug, PartialEq)]
pub struct Tagged {
    /// What happened.
    pub event: Event,
    /// The channel's id, where there is one (events name it).
    pub channel: Option<u32>,
    /// The channel's share target (what forwarded shares were sent against).
    pub target: Target,
    /// Whether the event concerns the whole connection or one device's channel.
    pub scope: Scope,
}

/// Which devices may have something to write after an upstream message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// No device.
    Nobody,
    /// This device only.
    Device(DeviceId),
    /// Every device (new work, a new target).
    Everyone,
}

/// Devices are ticked in this many rounds, one round a call, so each is ticked every few
/// seconds: often enough for what a tick does (vardiff steps a quiet device down over tens of
/// seconds; a channel's rate is re-announced on a change). A tick that walked every device at
/// once would hold every device's shares behind it, longer the larger the farm: 8–10 ms each
/// second at 10,000 aggregated devices while vardiff settles them (each retarget re-sends a
/// job); per device, with 1000 channels, about 2 ms each second and once 16 ms.
pub const TICK_ROUNDS: u64 = 4;

/// Which round of the devices the next tick walks ([`TICK_ROUNDS`]).
#[derive(Debug, Default)]
pub(crate) struct TickRounds(u64);

impl TickRounds {
    /// Moves on to the next round; whether a device is in it.
    pub(crate) fn next_round(&mut self) -> impl Fn(DeviceId) -> bool {
        let round = self.0 % TICK_ROUNDS;
        self.0 = self.0.wrapping_add(1);
        move |id| id.0 % TICK_ROUNDS == round
    }
}

/// The upstream channels at one moment, for the status page: counts now, counts since start,
/// and the spread of the channels' share targets.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChannelCensus {
    /// Channels open now.
    pub open: usize,
    /// Asked for on the connection in use, not answered yet.
    pub opening: usize,
    /// Closed on their devices' departure, awaiting verdicts on shares already sent.
    pub draining: usize,
    /// Requests the pool left unanswered past the open timeout while answering other traffic,
    /// given up (their devices closed), since start.
    pub timed_out: u64,
    /// Requests the pool refused, since start.
    pub refused: u64,
    /// Open channels the pool closed, since start.
    pub closed_by_pool: u64,
    /// The easiest and the hardest share target over the open channels, as difficulties.
    pub difficulty: Option<(f64, f64)>,
}

impl ChannelCensus {
    /// Widens the difficulty range to take in `target`'s.
    pub fn take_in(&mut self, target: Target) {
        let d = Difficulty::from_target(target).as_f64();
        self.difficulty = Some(match self.difficulty {
            Some((lo, hi)) => (lo.min(d), hi.max(d)),
            None => (d, d),
        });
    }
}

/// The sans-IO surface the shell drives.
pub trait Mode {
    /// A message to the upstream.
    type Out;
    /// A message from the upstream.
    type In;

    /// Aggregated or per-device.
    fn channel_mode(&self) -> ChannelMode;

    /// The extensions a fresh upstream connection agreed to, told before
    /// [`Mode::upstream_connected`]; per-device channels use none.
    fn upstream_extensions(&mut self, _extensions: &[u16]) {}

    /// A fresh upstream connection is ready (past SetupConnection): ask for the channel(s).
    fn upstream_connected(&mut self, now: Timestamp);

    /// The upstream connection is gone: what was in flight will not be answered and every
    /// job so far is stale; devices stay, for the next connection.
    fn upstream_lost(&mut self, now: Timestamp);

    /// Work can flow: the channel is open (aggregated), or the connection is (per-device,
    /// where channels come and go with devices).
    fn is_ready(&self) -> bool;

    /// Takes one message from the upstream; which devices may have something to write.
    fn upstream_message(&mut self, m: Self::In, now: Timestamp) -> Reach;

    /// A device connected; the id it is known by from now on.
    fn device_connected(&mut self, now: Timestamp) -> DeviceId;

    /// Device `id`'s connection is gone.
    fn device_closed(&mut self, id: DeviceId);

    /// Device `id`, while connected.
    fn device_mut(&mut self, id: DeviceId) -> Option<&mut Device>;

    /// Takes one line from device `id`; `None` if no such device.
    fn device_line(&mut self, id: DeviceId, line: &[u8], now: Timestamp) -> Option<LineOutcome>;

    /// One clock tick, walking one round of the devices ([`TICK_ROUNDS`]); the devices it may
    /// have given something to write.
    fn handle_tick(&mut self, now: Timestamp) -> Vec<DeviceId>;

    /// The next message to send upstream, if any.
    fn poll_transmit(&mut self) -> Option<Self::Out>;

    /// The next event to report, if any.
    fn poll_event(&mut self) -> Option<Tagged>;

    /// Forwarded shares awaiting a verdict.
    fn in_flight(&self) -> usize;

    /// When the longest-waiting forwarded share went upstream (the shell's keepalive).
    fn oldest_in_flight(&self) -> Option<Timestamp>;

    /// Hashes per second behind every channel.
    fn nominal_hash_rate(&self) -> f32;

    /// Upstream channels open now.
    fn channels_open(&self) -> usize;

    /// The channels in detail; a walk over every device in per-device mode, so once a tick.
    fn channels(&self) -> ChannelCensus;

    /// How long a channel request may wait for its answer (per-device mode times each device's
    /// own; the aggregated channel's opening is the shell's to time).
    fn set_open_timeout(&mut self, _timeout: Duration) {}
}

impl<U: Uplink + Default> Mode for Translator<U> {
    type Out = U::Out;
    type In = U::In;

    fn channel_mode(&self) -> ChannelMode {
        ChannelMode::Aggregated
    }

    fn upstream_extensions(&mut self, extensions: &[u16]) {
        Translator::upstream_extensions(self, extensions);
    }

    fn upstream_connected(&mut self, now: Timestamp) {
        self.open_channel(now);
    }

    fn upstream_lost(&mut self, now: Timestamp) {
        self.replace_uplink(U::default(), now);
    }

    fn is_ready(&self) -> bool {
        self.upstream().is_open() && self.layout().is_some()
    }

    fn upstream_message(&mut self, m: U::In, now: Timestamp) -> Reach {
        Translator::upstream_message(self, m, now);
        Reach::Everyone
    }

    fn device_connected(&mut self, now: Timestamp) -> DeviceId {
        Translator::device_connected(self, now)
    }

    fn device_closed(&mut self, id: DeviceId) {
        Translator::device_closed(self, id);
    }

    fn device_mut(&mut self, id: DeviceId) -> Option<&mut Device> {
        Translator::device_mut(self, id)
    }

    fn device_line(&mut self, id: DeviceId, line: &[u8], now: Timestamp) -> Option<LineOutcome> {
        Translator::device_line(self, id, line, now)
    }

    fn handle_tick(&mut self, now: Timestamp) -> Vec<DeviceId> {
        Translator::handle_tick_round(self, now)
    }

    fn poll_transmit(&mut self) -> Option<U::Out> {
        Translator::poll_transmit(self)
    }

    fn poll_event(&mut self) -> Option<Tagged> {
        let event = Translator::poll_event(self)?;
        Some(Tagged {
            event,
            channel: self.upstream().channel_id(),
            target: self.upstream().target(),
            scope: Scope::Connection,
        })
    }

    fn in_flight(&self) -> usize {
        Translator::in_flight(self)
    }

    fn oldest_in_flight(&self) -> Option<Timestamp> {
        Translator::oldest_in_flight(self)
    }

    fn nominal_hash_rate(&self) -> f32 {
        Translator::nominal_hash_rate(self)
    }

    fn channels_open(&self) -> usize {
        usize::from(self.upstream().is_open())
    }

    fn channels(&self) -> ChannelCensus {
        let mut census = ChannelCensus {
            open: self.channels_open(),
            ..ChannelCensus::default()
        };
        if census.open > 0 {
            census.take_in(self.upstream().target());
        }
        census
    }
}
