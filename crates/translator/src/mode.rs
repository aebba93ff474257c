//! What the shell drives, whichever way devices map onto upstream channels: aggregated mode
//! ([`Translator`], every device on one channel) or per-device mode ([`crate::PerDevice`], a
//! channel each). The shell's core task is written once over [`Mode`]; the two differ in how
//! far an upstream message reaches and in whether a channel's trouble is the connection's.

use pool::Millis;
use primitives::Target;

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
    pub event: Event,
    /// The channel's id, where there is one (events name it).
    pub channel: Option<u32>,
    /// The channel's share target (what forwarded shares were sent against).
    pub target: Target,
    pub scope: Scope,
}

/// Which devices may have something to write after an upstream message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    Nobody,
    Device(DeviceId),
    Everyone,
}

/// The sans-IO surface the shell drives.
pub trait Mode {
    /// A message to the upstream.
    type Out;
    /// A message from the upstream.
    type In;

    fn channel_mode(&self) -> ChannelMode;

    /// A fresh upstream connection is ready (past SetupConnection): ask for the channel(s).
    fn upstream_connected(&mut self, now: Millis);

    /// The upstream connection is gone: what was in flight will not be answered and every
    /// job so far is stale; devices stay, for the next connection.
    fn upstream_lost(&mut self, now: Millis);

    /// Work can flow: the channel is open (aggregated), or the connection is (per-device,
    /// where channels come and go with devices).
    fn is_ready(&self) -> bool;

    fn upstream_message(&mut self, m: Self::In, now: Millis) -> Reach;

    fn device_connected(&mut self, now: Millis) -> DeviceId;

    fn device_closed(&mut self, id: DeviceId);

    fn device_mut(&mut self, id: DeviceId) -> Option<&mut Device>;

    fn device_line(&mut self, id: DeviceId, line: &[u8], now: Millis) -> Option<LineOutcome>;

    fn on_tick(&mut self, now: Millis);

    fn poll_upstream(&mut self) -> Option<Self::Out>;

    fn poll_event(&mut self) -> Option<Tagged>;

    /// Forwarded shares awaiting a verdict.
    fn in_flight(&self) -> usize;

    /// When the longest-waiting forwarded share went upstream (the shell's keepalive).
    fn oldest_in_flight(&self) -> Option<Millis>;

    /// When the longest-waiting channel request of a ready connection went out; the
    /// aggregated channel's own opening is the shell's to time.
    fn oldest_opening(&self) -> Option<Millis>;

    /// Hashes per second behind every channel.
    fn nominal_hash_rate(&self) -> f32;

    /// Upstream channels open now.
    fn channels_open(&self) -> usize;
}

impl<U: Uplink + Default> Mode for Translator<U> {
    type Out = U::Out;
    type In = U::In;

    fn channel_mode(&self) -> ChannelMode {
        ChannelMode::Aggregated
    }

    fn upstream_connected(&mut self, now: Millis) {
        self.open_channel(now);
    }

    fn upstream_lost(&mut self, now: Millis) {
        self.replace_uplink(U::default(), now);
    }

    fn is_ready(&self) -> bool {
        self.upstream().is_open() && self.layout().is_some()
    }

    fn upstream_message(&mut self, m: U::In, now: Millis) -> Reach {
        Translator::upstream_message(self, m, now);
        Reach::Everyone
    }

    fn device_connected(&mut self, now: Millis) -> DeviceId {
        Translator::device_connected(self, now)
    }

    fn device_closed(&mut self, id: DeviceId) {
        Translator::device_closed(self, id);
    }

    fn device_mut(&mut self, id: DeviceId) -> Option<&mut Device> {
        Translator::device_mut(self, id)
    }

    fn device_line(&mut self, id: DeviceId, line: &[u8], now: Millis) -> Option<LineOutcome> {
        Translator::device_line(self, id, line, now)
    }

    fn on_tick(&mut self, now: Millis) {
        Translator::on_tick(self, now);
    }

    fn poll_upstream(&mut self) -> Option<U::Out> {
        Translator::poll_upstream(self)
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

    fn oldest_in_flight(&self) -> Option<Millis> {
        Translator::oldest_in_flight(self)
    }

    fn oldest_opening(&self) -> Option<Millis> {
        None
    }

    fn nominal_hash_rate(&self) -> f32 {
        Translator::nominal_hash_rate(self)
    }

    fn channels_open(&self) -> usize {
        usize::from(self.upstream().is_open())
    }
}
