//! Per-device mode, sans-IO: each SV1 device on an extended channel of its own, all of them on
//! one upstream connection.
//!
//! Each device is a single-device [`Translator`] (its [`crate::Device`], its
//! [`UpstreamChannel`], its job book and its shares in flight), configured to take the whole of
//! its channel's rolled extranonce (no split). This type multiplexes them over the connection:
//! channel requests get request ids unique on the connection, answers to them are routed by
//! request id, everything else by channel id (or group id, to every channel in the group).
//!
//! A device's channel is asked for when the device sends `mining.subscribe`: its answer needs
//! the channel's extranonce prefix, and firmware that authorizes only after the subscribe
//! result (cgminer and its descendants) would otherwise wait forever. The channel's identity
//! is the farm's account followed by `.miner<N>`, N the device's number, as the reference
//! translator names its per-device channels: stable whatever order the device's messages come
//! in, and read by pools in solo mode as `ADDRESS.worker`.
//!
//! A channel refused or closed by the pool ends its device's connection only (the firmware
//! reconnects and asks again); the other devices are untouched. A device that leaves has its
//! channel closed (`CloseChannel`); shares it had in flight are still followed to their
//! verdicts. Losing the connection loses every channel; the next connection asks again for
//! every device that had one, and devices keep their connections as in aggregated mode.
//!
//! A channel request the pool leaves unanswered past the open timeout is given up if the pool
//! has been heard from since it was sent (it answers others, so it skipped this one): that
//! device is closed, as if refused, so that its firmware reconnects and asks again, and the
//! answer, should it come after all, closes the channel it opened. If the pool has said
//! nothing since the request, the connection is at fault, not the request: the whole upstream
//! is given up (a connection-wide [`Event::ChannelOpenFailed`]) and failover follows.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use primitives::Target;
use primitives::Timestamp;
use sv2::messages::mining::CloseChannel;
use sv2::messages::Mining;

use crate::config::{ChannelMode, TranslatorConfig};
use crate::downstream::{Device, LineOutcome};
use crate::mode::{ChannelCensus, Mode, Reach, Scope, Tagged, TickRounds};
use crate::translator::{Event, Translator};
use crate::upstream::{UpstreamChannel, UpstreamError};
use crate::DeviceId;

/// `CloseChannel.reason_code` when a device leaves.
pub const REASON_DEVICE_LEFT: &str = "downstream disconnected";
/// `CloseChannel.reason_code` for a channel whose extranonce is too small for a device.
pub const REASON_UNUSABLE: &str = "extranonce too small";
/// Why a device's channel request was given up (its event's code, and what a subscribe still
/// waiting is told); also `CloseChannel.reason_code` should the pool open it after all.
pub const REASON_UNANSWERED: &str = "channel request unanswered";
/// Why the connection is given up when it answered no channel request in time.
pub const REASON_SILENT: &str = "no word from the pool since the channel requests";
/// How long a channel request waits unless told otherwise ([`Mode::set_open_timeout`]): the
/// shell's default open timeout.
pub const DEFAULT_OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// One device and its channel.
struct Slot {
    core: Translator,
    /// Its channel was asked for on the current connection.
    requested: bool,
    /// When, until the pool answered.
    asked_at: Option<Timestamp>,
    /// Under which request id.
    request_id: u32,
}

/// Where an upstream message goes.
enum Route {
    Request(u32),
    Channel(u32),
    /// Nothing to route (SetGroupChannel: each channel learns its group when it opens).
    Ignored,
    Unexpected(&'static str),
}

fn route(m: &Mining) -> Route {
    match m {
        Mining::OpenExtendedMiningChannelSuccess(s) => Route::Request(s.request_id),
        Mining::OpenMiningChannelError(e) => Route::Request(e.request_id),
        Mining::NewExtendedMiningJob(j) => Route::Channel(j.channel_id),
        Mining::SetNewPrevHash(p) => Route::Channel(p.channel_id),
        Mining::SetTarget(t) => Route::Channel(t.channel_id),
        Mining::SetExtranoncePrefix(p) => Route::Channel(p.channel_id),
        Mining::SubmitSharesSuccess(s) => Route::Channel(s.channel_id),
        Mining::SubmitSharesError(e) => Route::Channel(e.channel_id),
        Mining::CloseChannel(c) => Route::Channel(c.channel_id),
        Mining::UpdateChannelError(e) => Route::Channel(e.channel_id),
        Mining::SetGroupChannel(_) => Route::Ignored,
        other => Route::Unexpected(other.name()),
    }
}

/// The translator in per-device mode.
pub struct PerDevice {
    /// The farm's settings; each device's copy differs in identity and extranonce split.
    config: TranslatorConfig,
    slots: HashMap<DeviceId, Slot>,
    next_device: u64,
    next_request: u32,
    /// Channel requests awaiting the pool's answer (their devices may have left since).
    opening: HashMap<u32, DeviceId>,
    /// Open channels and their devices.
    channels: HashMap<u32, DeviceId>,
    /// Channels of departed devices, closed, until their shares in flight have verdicts.
    draining: HashMap<u32, (DeviceId, Translator)>,
    /// A connection is ready for channel requests.
    connected: bool,
    /// When the connection in use last sent anything.
    last_heard: Option<Timestamp>,
    /// Requests given up on this connection (their devices gone, or the wait too long), whose
    /// answers may still come: a channel opened for one is closed with the reason.
    abandoned: HashMap<u32, &'static str>,
    /// The connection's silence was reported (once per connection).
    silence_reported: bool,
    open_timeout_ms: u64,
    /// Which round of devices is ticked next.
    tick_rounds: TickRounds,
    timed_out: u64,
    refused: u64,
    closed_by_pool: u64,
    /// Forwarded shares without a verdict (kept as a count: summing over every device per
    /// message would cost the shell O(devices)).
    in_flight: usize,
    to_upstream: VecDeque<Mining>,
    events: VecDeque<Tagged>,
}

impl PerDevice {
    /// Per-device mode with no devices and no upstream connection yet.
    pub fn new(config: TranslatorConfig) -> Self {
        PerDevice {
            config,
            slots: HashMap::new(),
            next_device: 1,
            next_request: 1,
            opening: HashMap::new(),
            channels: HashMap::new(),
            draining: HashMap::new(),
            connected: false,
            last_heard: None,
            abandoned: HashMap::new(),
            silence_reported: false,
            open_timeout_ms: DEFAULT_OPEN_TIMEOUT.as_millis() as u64,
            tick_rounds: TickRounds::default(),
            timed_out: 0,
            refused: 0,
            closed_by_pool: 0,
            in_flight: 0,
            to_upstream: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// The settings it runs under.
    pub fn config(&self) -> &TranslatorConfig {
        &self.config
    }

    /// The `user_identity` of device `id`'s channel.
    pub fn identity(&self, id: DeviceId) -> String {
        format!("{}.miner{}", self.config.user_identity, id.0)
    }

    /// Device `id`'s channel, once open.
    pub fn channel_of(&self, id: DeviceId) -> Option<&UpstreamChannel> {
        self.slots
            .get(&id)
            .map(|s| s.core.upstream())
            .filter(|u| u.is_open())
    }

    /// Device `id`, while connected.
    pub fn device(&self, id: DeviceId) -> Option<&Device> {
        self.slots.get(&id)?.core.device(id)
    }

    /// Every connected device.
    pub fn devices(&self) -> impl Iterator<Item = &Device> {
        self.slots.values().flat_map(|s| s.core.devices())
    }

    /// Channels asked for and not answered yet.
    pub fn channels_opening(&self) -> usize {
        self.opening.len()
    }

    /// Closed channels still awaiting verdicts for their departed devices' shares.
    pub fn channels_draining(&self) -> usize {
        self.draining.len()
    }

    fn device_config(&self, id: DeviceId) -> TranslatorConfig {
        TranslatorConfig {
            channels: ChannelMode::PerDevice,
            user_identity: self.identity(id),
            // The device takes the channel's whole extranonce.
            device_extranonce_bytes: 0,
            ..self.config.clone()
        }
    }

    /// Asks for device `id`'s channel if it needs one and none was asked for on this
    /// connection.
    fn request(&mut self, id: DeviceId, now: Timestamp) {
        if !self.connected {
            return;
        }
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let wants = slot.core.device(id).is_some_and(|d| d.wants_extranonce());
        if slot.requested || !wants {
            return;
        }
        let request_id = self.next_request;
        self.next_request = self.next_request.wrapping_add(1).max(1);
        slot.core.upstream_mut().set_next_request_id(request_id);
        slot.core.open_channel(now);
        slot.requested = true;
        slot.asked_at = Some(now);
        slot.request_id = request_id;
        self.opening.insert(request_id, id);
        tracing::debug!(
            device = id.0,
            request = request_id,
            "per-device: channel asked for"
        );
    }

    /// Takes what device `id`'s core queued (messages, events) and acts on what concerns the
    /// mux: channels opened, refused, closed.
    fn collect(&mut self, id: DeviceId, channel_before: Option<u32>) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        while let Some(m) = slot.core.poll_transmit() {
            self.to_upstream.push_back(m);
        }
        while let Some(event) = slot.core.poll_event() {
            let channel = slot.core.upstream().channel_id().or(channel_before);
            match &event {
                Event::ChannelOpened { channel_id, .. } => {
                    slot.asked_at = None;
                    end_reused(
                        &mut self.draining,
                        *channel_id,
                        &mut self.events,
                        &mut self.in_flight,
                    );
                    self.channels.insert(*channel_id, id);
                    tracing::debug!(
                        device = id.0,
                        channel = channel_id,
                        "per-device: channel open"
                    );
                }
                Event::ChannelOpenFailed(code) => {
                    slot.asked_at = None;
                    self.refused += 1;
                    tracing::warn!(device = id.0, code = %code, "per-device: channel refused");
                    if let Some(d) = slot.core.device_mut(id) {
                        d.channel_lost(code);
                    }
                }
                Event::ChannelClosed(why) => {
                    if let Some(c) = channel {
                        self.channels.remove(&c);
                    }
                    self.closed_by_pool += 1;
                    tracing::warn!(device = id.0, why = %why, "per-device: channel closed by the pool");
                    if let Some(d) = slot.core.device_mut(id) {
                        d.channel_lost(why);
                    }
                }
                Event::Layout(e) => {
                    slot.asked_at = None;
                    // The pool opened the channel (no `ChannelOpened` follows, so it never
                    // went into `channels`), but the device cannot use it: closed here, or
                    // the pool would keep it open for as long as the connection lasts.
                    if let Some(c) = channel {
                        end_reused(&mut self.draining, c, &mut self.events, &mut self.in_flight);
                        self.channels.remove(&c);
                        self.to_upstream
                            .push_back(close_channel(c, REASON_UNUSABLE));
                    }
                    if let Some(d) = slot.core.device_mut(id) {
                        d.channel_lost(&e.to_string());
                    }
                }
                Event::ShareForwarded { .. } => self.in_flight += 1,
                Event::UpstreamResult(_) => self.in_flight = self.in_flight.saturating_sub(1),
                _ => {}
            }
            self.events.push_back(Tagged {
                event,
                channel,
                target: slot.core.upstream().target(),
                scope: Scope::Device(id),
            });
        }
    }

    /// One message to device `id`'s channel.
    fn deliver(&mut self, id: DeviceId, m: Mining, now: Timestamp) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let before = slot.core.upstream().channel_id();
        slot.core.upstream_message(m, now);
        self.collect(id, before);
    }

    /// One message to a departed device's closed channel (verdicts, mostly).
    fn deliver_draining(&mut self, channel: u32, m: Mining, now: Timestamp) {
        let Some((id, t)) = self.draining.get_mut(&channel) else {
            return;
        };
        let id = *id;
        t.upstream_message(m, now);
        let settled = drain_results(t, id, Some(channel), &mut self.events);
        let done = t.in_flight() == 0;
        self.in_flight = self.in_flight.saturating_sub(settled);
        if done {
            self.draining.remove(&channel);
        }
    }

    /// Requests past the open timeout: given up one by one while the pool is heard from,
    /// the connection's fault (reported once) while it is not.
    fn time_out_requests(&mut self, now: Timestamp, touched: &mut Vec<DeviceId>) {
        if self.opening.is_empty() {
            // The usual case: no walk over every device.
            return;
        }
        let limit = self.open_timeout_ms;
        let overdue: Vec<(DeviceId, Timestamp)> = self
            .slots
            .iter()
            .filter_map(|(&id, s)| s.asked_at.map(|at| (id, at)))
            .filter(|&(_, at)| now.millis_since(at) > limit)
            .collect();
        for (id, asked) in overdue {
            if self.last_heard.is_some_and(|heard| heard >= asked) {
                self.give_up(id, now.millis_since(asked));
                touched.push(id);
            } else if !self.silence_reported {
                self.silence_reported = true;
                tracing::warn!(
                    device = id.0,
                    waited_ms = now.millis_since(asked),
                    "per-device: the pool has said nothing since a channel request; giving the connection up"
                );
                self.events.push_back(Tagged {
                    event: Event::ChannelOpenFailed(REASON_SILENT.to_owned()),
                    channel: None,
                    target: Target::ZERO,
                    scope: Scope::Connection,
                });
            }
        }
    }

    /// Device `id`'s request, left unanswered though the pool answers others: the device is
    /// closed (its firmware reconnects and asks again), and a late answer is closed on arrival.
    fn give_up(&mut self, id: DeviceId, waited_ms: u64) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        slot.asked_at = None;
        self.opening.remove(&slot.request_id);
        self.abandoned.insert(slot.request_id, REASON_UNANSWERED);
        self.timed_out += 1;
        tracing::warn!(
            device = id.0,
            request = slot.request_id,
            waited_ms,
            "per-device: the pool never answered this device's channel request; closing the device so that it asks again"
        );
        if let Some(d) = slot.core.device_mut(id) {
            d.channel_lost(REASON_UNANSWERED);
        }
        self.events.push_back(Tagged {
            event: Event::ChannelOpenFailed(REASON_UNANSWERED.to_owned()),
            channel: None,
            target: Target::ZERO,
            scope: Scope::Device(id),
        });
    }

    /// An answer to a request given up: the channel it opened is closed at once.
    fn late_answer(&mut self, m: &Mining, reason: &str) {
        if let Mining::OpenExtendedMiningChannelSuccess(s) = m {
            tracing::debug!(
                channel = s.channel_id,
                request = s.request_id,
                reason,
                "per-device: a channel given up opened after all; closing it"
            );
            self.to_upstream
                .push_back(close_channel(s.channel_id, reason));
        }
    }

    fn protocol_error(&mut self, e: UpstreamError, channel: Option<u32>) {
        tracing::debug!(error = %e, "per-device: upstream message for no channel of ours");
        self.events.push_back(Tagged {
            event: Event::ProtocolError(e),
            channel,
            target: Target::ZERO,
            scope: Scope::Connection,
        });
    }
}

fn close_channel(channel_id: u32, reason: &str) -> Mining {
    CloseChannel {
        channel_id,
        reason_code: reason.to_owned(),
    }
    .into()
}

/// A channel the pool just opened under the id of one closed on a departure and still
/// draining: the old one's verdicts can no longer be told apart, so its shares are settled
/// unanswered.
fn end_reused(
    draining: &mut HashMap<u32, (DeviceId, Translator)>,
    channel_id: u32,
    events: &mut VecDeque<Tagged>,
    in_flight: &mut usize,
) {
    if let Some((old, mut t)) = draining.remove(&channel_id) {
        t.replace_uplink(UpstreamChannel::new(), Timestamp::from_millis(0));
        let n = drain_results(&mut t, old, Some(channel_id), events);
        *in_flight = in_flight.saturating_sub(n);
    }
}

/// Moves a core's share verdicts into `events`, tagged as its device's; returns how many.
fn drain_results(
    t: &mut Translator,
    id: DeviceId,
    channel: Option<u32>,
    events: &mut VecDeque<Tagged>,
) -> usize {
    let target = t.upstream().target();
    let mut n = 0;
    while let Some(event) = t.poll_event() {
        if matches!(event, Event::UpstreamResult(_)) {
            n += 1;
            events.push_back(Tagged {
                event,
                channel,
                target,
                scope: Scope::Device(id),
            });
        }
    }
    while t.poll_transmit().is_some() {}
    n
}

impl Mode for PerDevice {
    type Out = Mining;
    type In = Mining;

    fn channel_mode(&self) -> ChannelMode {
        ChannelMode::PerDevice
    }

    fn upstream_connected(&mut self, now: Timestamp) {
        self.connected = true;
        self.last_heard = None;
        self.silence_reported = false;
        self.abandoned.clear();
        let mut ids: Vec<DeviceId> = self.slots.keys().copied().collect();
        // Oldest devices first: the order channels were first asked for.
        ids.sort_unstable();
        for id in ids {
            self.request(id, now);
            self.collect(id, None);
        }
    }

    fn upstream_lost(&mut self, now: Timestamp) {
        self.connected = false;
        self.last_heard = None;
        self.abandoned.clear();
        self.opening.clear();
        self.channels.clear();
        for (channel, (id, mut t)) in std::mem::take(&mut self.draining) {
            t.replace_uplink(UpstreamChannel::new(), now);
            drain_results(&mut t, id, Some(channel), &mut self.events);
        }
        let ids: Vec<DeviceId> = self.slots.keys().copied().collect();
        for id in ids {
            let Some(slot) = self.slots.get_mut(&id) else {
                continue;
            };
            let before = slot.core.upstream().channel_id();
            slot.core.replace_uplink(UpstreamChannel::new(), now);
            slot.requested = false;
            slot.asked_at = None;
            self.collect(id, before);
        }
        self.in_flight = 0;
        self.to_upstream.clear();
    }

    fn is_ready(&self) -> bool {
        self.connected
    }

    fn upstream_message(&mut self, m: Mining, now: Timestamp) -> Reach {
        self.last_heard = Some(now);
        match route(&m) {
            Route::Request(request_id) => {
                if let Some(reason) = self.abandoned.remove(&request_id) {
                    self.late_answer(&m, reason);
                    return Reach::Nobody;
                }
                let Some(id) = self.opening.remove(&request_id) else {
                    self.protocol_error(UpstreamError::Unrequested(m.name()), None);
                    return Reach::Nobody;
                };
                self.deliver(id, m, now);
                Reach::Device(id)
            }
            Route::Channel(c) => {
                if let Some(&id) = self.channels.get(&c) {
                    self.deliver(id, m, now);
                    return Reach::Device(id);
                }
                if self.draining.contains_key(&c) {
                    self.deliver_draining(c, m, now);
                    return Reach::Nobody;
                }
                // Jobs and prev hashes may come once for a group of channels.
                let members: Vec<DeviceId> = self
                    .slots
                    .iter()
                    .filter(|(_, s)| c != 0 && s.core.upstream().group_id() == Some(c))
                    .map(|(&id, _)| id)
                    .collect();
                if members.is_empty() {
                    // Also what a channel just closed on a departure may still be sent.
                    let e = UpstreamError::OtherChannel {
                        what: m.name(),
                        got: c,
                        ours: 0,
                    };
                    self.protocol_error(e, Some(c));
                    return Reach::Nobody;
                }
                for id in members {
                    self.deliver(id, m.clone(), now);
                }
                Reach::Everyone
            }
            Route::Ignored => Reach::Nobody,
            Route::Unexpected(name) => {
                self.protocol_error(UpstreamError::Unexpected(name), None);
                Reach::Nobody
            }
        }
    }

    fn device_connected(&mut self, now: Timestamp) -> DeviceId {
        let id = DeviceId(self.next_device);
        self.next_device += 1;
        let mut core = Translator::new(self.device_config(id), now);
        core.device_connected_as(id, now);
        self.slots.insert(
            id,
            Slot {
                core,
                requested: false,
                asked_at: None,
                request_id: 0,
            },
        );
        id
    }

    fn device_closed(&mut self, id: DeviceId) {
        let Some(mut slot) = self.slots.remove(&id) else {
            return;
        };
        slot.core.device_closed(id);
        if slot.asked_at.is_some() && self.opening.remove(&slot.request_id).is_some() {
            // Left while its channel was being opened: one opened anyway is closed on arrival.
            self.abandoned.insert(slot.request_id, REASON_DEVICE_LEFT);
            return;
        }
        let Some(c) = slot.core.upstream().channel_id() else {
            // Not open: nothing to close (an answer still to come is closed on arrival).
            return;
        };
        if self.channels.remove(&c).is_none() {
            // The pool closed it already, or it was found unusable and closed.
            return;
        }
        self.to_upstream
            .push_back(close_channel(c, REASON_DEVICE_LEFT));
        if slot.core.in_flight() > 0 {
            self.draining.insert(c, (id, slot.core));
        }
    }

    fn device_mut(&mut self, id: DeviceId) -> Option<&mut Device> {
        self.slots.get_mut(&id)?.core.device_mut(id)
    }

    fn device_line(&mut self, id: DeviceId, line: &[u8], now: Timestamp) -> Option<LineOutcome> {
        let slot = self.slots.get_mut(&id)?;
        let before = slot.core.upstream().channel_id();
        let outcome = slot.core.device_line(id, line, now);
        self.request(id, now);
        self.collect(id, before);
        outcome
    }

    fn handle_tick(&mut self, now: Timestamp) -> Vec<DeviceId> {
        let in_round = self.tick_rounds.next_round();
        let mut ids: Vec<DeviceId> = self
            .slots
            .keys()
            .copied()
            .filter(|&id| in_round(id))
            .collect();
        for &id in &ids {
            if let Some(slot) = self.slots.get_mut(&id) {
                let before = slot.core.upstream().channel_id();
                slot.core.handle_tick(now);
                self.collect(id, before);
            }
        }
        self.time_out_requests(now, &mut ids);
        ids
    }

    fn poll_transmit(&mut self) -> Option<Mining> {
        self.to_upstream.pop_front()
    }

    fn poll_event(&mut self) -> Option<Tagged> {
        self.events.pop_front()
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn oldest_in_flight(&self) -> Option<Timestamp> {
        if self.in_flight == 0 {
            // The usual case: no walk over every device.
            return None;
        }
        let live = self
            .slots
            .values()
            .filter_map(|s| s.core.oldest_in_flight());
        let draining = self
            .draining
            .values()
            .filter_map(|(_, t)| t.oldest_in_flight());
        live.chain(draining).min()
    }

    fn nominal_hash_rate(&self) -> f32 {
        let sum: f32 = self
            .slots
            .values()
            .map(|s| s.core.nominal_hash_rate())
            .sum();
        // With no devices the sum is -0.0, which `max(0.0)` may keep: pools and the status
        // page read it as negative.
        if sum > 0.0 {
            sum
        } else {
            0.0
        }
    }

    fn channels_open(&self) -> usize {
        self.channels.len()
    }

    fn channels(&self) -> ChannelCensus {
        let mut census = ChannelCensus {
            open: self.channels.len(),
            opening: self.opening.len(),
            draining: self.draining.len(),
            timed_out: self.timed_out,
            refused: self.refused,
            closed_by_pool: self.closed_by_pool,
            difficulty: None,
        };
        for id in self.channels.values() {
            if let Some(slot) = self.slots.get(id) {
                census.take_in(slot.core.upstream().target());
            }
        }
        census
    }

    fn set_open_timeout(&mut self, timeout: Duration) {
        self.open_timeout_ms = timeout.as_millis() as u64;
    }
}
