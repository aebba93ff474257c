//! The translator in aggregated mode, sans-IO: every SV1 device on one upstream extended
//! channel.
//!
//! The shell feeds device lines ([`Translator::device_line`]), upstream Mining messages (after
//! SetupConnection, which the shell does) ([`Translator::upstream_message`]) and clock ticks
//! ([`Translator::handle_tick`]); it writes each device's [`Device::poll_transmit`] and sends
//! [`Translator::poll_transmit`]'s messages. [`Translator::poll_event`] reports what happened,
//! for accounting and the event log.
//!
//! Per-device channels ([`crate::per_device`]) keep the same [`Device`]s and differ only in
//! what sits above them: one [`UpstreamChannel`] per device instead of one shared by all, with
//! the device taking the whole channel extranonce space.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use mining::Reject;
use primitives::Target;
use primitives::Timestamp;

use crate::config::TranslatorConfig;
use crate::downstream::{Device, LineOutcome, Link};
use crate::extranonce::{ExtranonceAllocator, Layout, LayoutError};
use crate::jobs::JobBook;
use crate::mode::TickRounds;
use crate::shares::{InFlight, ShareResult};
use crate::uplink::Uplink;
use crate::upstream::{ChannelRequest, UpstreamChannel, UpstreamError, UpstreamEvent, Work};
use crate::DeviceId;

/// What happened, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The channel opened and its extranonce was split among devices.
    ChannelOpened {
        /// The channel's id.
        channel_id: u32,
        /// The upstream's fixed extranonce bytes.
        extranonce_prefix: Vec<u8>,
        /// How the rest is split between device bytes and extranonce2.
        layout: Layout,
        /// The channel's share target.
        target: Target,
    },
    /// The upstream refused the channel: its error code (SV1: which request was refused).
    ChannelOpenFailed(String),
    /// The channel's extranonce cannot be split for devices.
    Layout(LayoutError),
    /// The upstream closed the channel: its reason code (SV1: why the connection ends).
    ChannelClosed(String),
    /// A job went to `devices` devices (its notify line serialized once).
    JobSent {
        /// The SV1 job id.
        wire_id: u64,
        /// The upstream job it stands for.
        upstream_job_id: u32,
        /// Whether devices were told to drop earlier jobs.
        clean: bool,
        /// Devices it went to.
        devices: usize,
    },
    /// The channel's share target changed.
    TargetChanged(Target),
    /// A device's share judged locally.
    ShareJudged {
        /// The device that sent it.
        device: DeviceId,
        /// The SV1 job id it named, if it could be read.
        wire_id: Option<u64>,
        /// The difficulty credited, or why the share was refused.
        result: Result<f64, Reject>,
    },
    /// It also met the upstream target and went upstream under this sequence number.
    ShareForwarded {
        /// The device that found it.
        device: DeviceId,
        /// The share's sequence number on the channel.
        sequence_number: u32,
    },
    /// The upstream's verdict on a forwarded share.
    UpstreamResult(ShareResult),
    /// The upstream broke the protocol; the message was ignored.
    ProtocolError(UpstreamError),
}

/// The farm proxy's core over an uplink `U`: the SV1-to-SV2 translator by default, the SV1
/// proxy with [`crate::sv1_upstream::Sv1Upstream`].
pub struct Translator<U: Uplink = UpstreamChannel> {
    config: Arc<TranslatorConfig>,
    upstream: U,
    allocator: Option<ExtranonceAllocator>,
    book: JobBook,
    devices: HashMap<DeviceId, Device>,
    next_device: u64,
    in_flight: InFlight,
    to_upstream: VecDeque<U::Out>,
    /// Reused for what `Uplink::open` writes.
    opening: Vec<U::Out>,
    events: VecDeque<Event>,
    results: Vec<ShareResult>,
    announced_rate: f32,
    last_update: Timestamp,
    /// The extranonce prefix of the last channel that opened (devices' `extranonce1` starts
    /// with it).
    prefix: Option<Arc<[u8]>>,
    /// Which round of the devices the next [`Translator::handle_tick_round`] walks.
    tick_rounds: TickRounds,
    /// The version bits the upstream let devices roll when last looked at.
    version_mask: u32,
    /// The upstream agreed to extension 0x0002: forwarded shares name their device's worker.
    tracking: bool,
}

/// The view of the translator a device works through (a free function so that the borrows of
/// the fields stay apart from the device map's).
fn link<'a, U: Uplink>(
    config: &'a TranslatorConfig,
    book: &'a mut JobBook,
    upstream: &'a U,
    allocator: &'a mut Option<ExtranonceAllocator>,
) -> Link<'a> {
    let layout = allocator.as_ref().map(|a| a.layout());
    let upstream_mask = upstream.version_mask();
    let extranonce = match allocator {
        Some(a) if upstream.is_open() => Some((&upstream.extranonce_prefix()[..], a)),
        _ => None,
    };
    Link {
        config,
        book,
        extranonce,
        layout,
        upstream_mask,
    }
}

impl Translator<UpstreamChannel> {
    /// A translator on an SV2 extended channel, not yet open.
    pub fn new(config: TranslatorConfig, now: Timestamp) -> Self {
        Translator::with_uplink(config, UpstreamChannel::new(), now)
    }

    /// The upstream connection is gone (failover follows): what was in flight will not be
    /// answered, and every job so far is stale (no other upstream takes its shares). Devices
    /// stay connected and keep their extranonce values; shares they send meanwhile are judged
    /// and answered stale. The next channel opens with [`Translator::open_channel`].
    pub fn upstream_lost(&mut self, now: Timestamp) {
        self.replace_uplink(UpstreamChannel::new(), now);
    }
}

impl<U: Uplink> Translator<U> {
    /// A core over `uplink`, not yet open.
    pub fn with_uplink(config: TranslatorConfig, uplink: U, now: Timestamp) -> Self {
        let max_in_flight = config.max_in_flight;
        let version_mask = uplink.version_mask();
        Translator {
            config: Arc::new(config),
            upstream: uplink,
            allocator: None,
            book: JobBook::new(),
            devices: HashMap::new(),
            next_device: 1,
            in_flight: InFlight::new(max_in_flight),
            to_upstream: VecDeque::new(),
            opening: Vec::new(),
            events: VecDeque::new(),
            results: Vec::new(),
            announced_rate: 0.0,
            last_update: now,
            prefix: None,
            tick_rounds: TickRounds::default(),
            version_mask,
            tracking: false,
        }
    }

    /// The extensions the upstream connection agreed to (the shell negotiates them before the
    /// channel opens): with 0x0002 and [`TranslatorConfig::worker_tracking`], forwarded shares
    /// name their device's worker.
    pub fn upstream_extensions(&mut self, extensions: &[u16]) {
        self.tracking = self.config.worker_tracking
            && extensions.contains(&sv2::messages::extensions::extension::WORKER_HASHRATE_TRACKING);
    }

    /// Whether forwarded shares name their device's worker (see
    /// [`Translator::upstream_extensions`]).
    pub fn tracks_workers(&self) -> bool {
        self.tracking
    }

    /// The settings it runs under.
    pub fn config(&self) -> &TranslatorConfig {
        &self.config
    }

    /// The uplink.
    pub fn upstream(&self) -> &U {
        &self.upstream
    }

    pub(crate) fn upstream_mut(&mut self) -> &mut U {
        &mut self.upstream
    }

    /// The SV1 jobs sent to devices.
    pub fn jobs(&self) -> &JobBook {
        &self.book
    }

    /// How the channel's extranonce is split among devices, once open.
    pub fn layout(&self) -> Option<Layout> {
        self.allocator.as_ref().map(|a| a.layout())
    }

    /// Forwarded shares awaiting a verdict.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// When the longest-waiting forwarded share went upstream (the shell's keepalive).
    pub fn oldest_in_flight(&self) -> Option<Timestamp> {
        self.in_flight.oldest_sent_at()
    }

    /// Opens the upstream channel (once the shell's SetupConnection succeeded).
    pub fn open_channel(&mut self, now: Timestamp) {
        let rate = self.nominal_hash_rate();
        self.upstream.open(
            &ChannelRequest {
                user_identity: self.config.user_identity.clone(),
                nominal_hash_rate: rate,
                max_target: self.config.max_target,
                min_extranonce_size: self.config.min_extranonce_size(),
            },
            &mut self.opening,
        );
        self.announced_rate = rate;
        self.last_update = now;
        self.to_upstream.extend(self.opening.drain(..));
    }

    /// The next message for the upstream.
    pub fn poll_transmit(&mut self) -> Option<U::Out> {
        self.to_upstream.pop_front()
    }

    /// The next event to report, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The channel's nominal hash rate: each device's measured rate, or the configured one
    /// until it is measured (spec 5.3.2: 0 with no devices).
    pub fn nominal_hash_rate(&self) -> f32 {
        let sum: f64 = self
            .devices
            .values()
            .map(|d| {
                d.measured_hash_rate()
                    .unwrap_or(self.config.device_hash_rate)
            })
            .sum();
        // An empty sum is -0.0, which pools read as negative (pool_sv2 refuses the channel).
        if sum > 0.0 {
            sum as f32
        } else {
            0.0
        }
    }

    /// A device connected; the id it is known by from now on.
    pub fn device_connected(&mut self, now: Timestamp) -> DeviceId {
        let id = DeviceId(self.next_device);
        self.device_connected_as(id, now);
        id
    }

    /// A device numbered by the caller (per-device mode numbers devices across its channels).
    pub fn device_connected_as(&mut self, id: DeviceId, now: Timestamp) {
        self.next_device = self.next_device.max(id.0 + 1);
        self.devices.insert(id, Device::new(id, &self.config, now));
    }

    /// Device `id`, while connected.
    pub fn device(&self, id: DeviceId) -> Option<&Device> {
        self.devices.get(&id)
    }

    /// Device `id`, while connected.
    pub fn device_mut(&mut self, id: DeviceId) -> Option<&mut Device> {
        self.devices.get_mut(&id)
    }

    /// Every connected device.
    pub fn devices(&self) -> impl Iterator<Item = &Device> {
        self.devices.values()
    }

    /// Device `id`'s connection is gone: its extranonce value is freed.
    pub fn device_closed(&mut self, id: DeviceId) {
        if let Some(mut d) = self.devices.remove(&id) {
            d.closed(self.allocator.as_mut());
        }
    }

    /// One line from a device. A share it accepts that also meets the upstream target is
    /// queued upstream.
    pub fn device_line(
        &mut self,
        id: DeviceId,
        line: &[u8],
        now: Timestamp,
    ) -> Option<LineOutcome> {
        let device = self.devices.get_mut(&id)?;
        let mut link = link(
            &self.config,
            &mut self.book,
            &self.upstream,
            &mut self.allocator,
        );
        let outcome = device.handle_line(line, now, &mut link);
        match &outcome {
            LineOutcome::Accepted(share) => {
                self.events.push_back(Event::ShareJudged {
                    device: id,
                    wire_id: Some(share.wire_id),
                    result: Ok(share.difficulty.as_f64()),
                });
                if self.upstream.is_open() && share.meets_upstream(self.upstream.target()) {
                    let seq = self.in_flight.forward(id, share, now, &mut self.results);
                    self.events.push_back(Event::ShareForwarded {
                        device: id,
                        sequence_number: seq,
                    });
                    // The name the device authorized, cut to what the extension allows.
                    let worker = device
                        .worker()
                        .filter(|_| self.tracking)
                        .map(sv2::tlv::user_identity_of);
                    let m = self.upstream.submit(seq, share, worker);
                    self.to_upstream.push_back(m);
                    self.flush_results();
                }
            }
            LineOutcome::Rejected(r) => self.events.push_back(Event::ShareJudged {
                device: id,
                wire_id: None,
                result: Err(*r),
            }),
            LineOutcome::Refused(_) | LineOutcome::Other => {}
        }
        Some(outcome)
    }

    /// Takes one message from the upstream; a protocol breach is reported as
    /// [`Event::ProtocolError`] and the message ignored.
    pub fn upstream_message(&mut self, m: U::In, now: Timestamp) {
        let ev = match self.upstream.handle_message(m) {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(error = %e, "translator: upstream protocol error");
                self.events.push_back(Event::ProtocolError(e));
                return;
            }
        };
        self.narrow_version_masks();
        match ev {
            UpstreamEvent::Opened => self.channel_opened(now),
            UpstreamEvent::OpenFailed(code) => {
                tracing::warn!(code = %code, "translator: channel refused");
                self.events.push_back(Event::ChannelOpenFailed(code));
            }
            UpstreamEvent::FutureJob(_) | UpstreamEvent::Ignored(_) => {}
            UpstreamEvent::Work(work) => self.handle_work(&work, now),
            UpstreamEvent::TargetChanged(t) => self.events.push_back(Event::TargetChanged(t)),
            UpstreamEvent::ExtranoncePrefixChanged => {
                let prefix = self.upstream.extranonce_prefix().clone();
                if let Some(l) = self.layout() {
                    for d in self.devices.values_mut() {
                        d.handle_extranonce_prefix(&prefix, l.extranonce2_size);
                    }
                }
            }
            UpstreamEvent::SharesAccepted {
                last_sequence_number,
                count,
                ..
            } => {
                self.in_flight
                    .accepted(last_sequence_number, count, now, &mut self.results);
                self.flush_results();
            }
            UpstreamEvent::ShareRejected {
                sequence_number,
                error_code,
            } => {
                if let Some(r) = self.in_flight.rejected(sequence_number, &error_code, now) {
                    self.events.push_back(Event::UpstreamResult(r));
                }
            }
            UpstreamEvent::Closed(reason) => {
                self.in_flight.abandon(now, &mut self.results);
                self.flush_results();
                self.events.push_back(Event::ChannelClosed(reason));
            }
        }
    }

    /// Failover onto a fresh uplink (see [`Translator::upstream_lost`]).
    pub fn replace_uplink(&mut self, uplink: U, now: Timestamp) {
        self.in_flight.abandon(now, &mut self.results);
        self.flush_results();
        self.book.invalidate();
        self.upstream = uplink;
        self.to_upstream.clear();
        self.narrow_version_masks();
    }

    /// Devices granted more version bits than the upstream now lets them roll are narrowed to
    /// them and told: else their rolled shares are refused, or (through an SV1 pool, which is
    /// sent only the bits it granted) submitted with another version than they hashed.
    fn narrow_version_masks(&mut self) {
        let mask = self.upstream.version_mask();
        if mask & self.version_mask != self.version_mask {
            for d in self.devices.values_mut() {
                d.narrow_version_mask(mask);
            }
        }
        self.version_mask = mask;
    }

    fn channel_opened(&mut self, now: Timestamp) {
        let layout = match Layout::new(
            self.upstream.extranonce_size(),
            self.config.device_extranonce_bytes,
            self.config.min_extranonce2_size,
        ) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "translator: channel extranonce too small");
                self.events.push_back(Event::Layout(e));
                return;
            }
        };
        let prefix = self.upstream.extranonce_prefix().clone();
        match self.allocator.as_mut() {
            None => self.allocator = Some(ExtranonceAllocator::new(layout)),
            // A later channel (failover): devices already hold values, and keep them if the
            // split is the same; only their `extranonce1` changes with the prefix.
            Some(a) if a.layout() == layout => {
                if self.prefix.as_ref() != Some(&prefix) {
                    for d in self.devices.values_mut() {
                        d.handle_extranonce_prefix(&prefix, layout.extranonce2_size);
                    }
                }
            }
            Some(_) => {
                let mut a = ExtranonceAllocator::new(layout);
                for d in self.devices.values_mut() {
                    d.handle_new_layout(&prefix, &mut a);
                }
                self.allocator = Some(a);
            }
        }
        self.prefix = Some(prefix);
        let channel_id = self.upstream.channel_id().unwrap_or_default();
        tracing::info!(
            channel = channel_id,
            device_bytes = layout.device_bytes,
            extranonce2_size = layout.extranonce2_size,
            "translator: upstream channel open"
        );
        self.events.push_back(Event::ChannelOpened {
            channel_id,
            extranonce_prefix: self.upstream.extranonce_prefix().to_vec(),
            layout,
            target: self.upstream.target(),
        });
        self.each_device(|_| true, |_, d, link| d.handle_channel_open(now, link));
        if let Some(work) = self.upstream.take_held_work() {
            self.handle_work(&work, now);
        }
    }

    /// New work: translated once, sent to every working device.
    fn handle_work(&mut self, work: &Work, now: Timestamp) {
        let job = self.book.translate(work);
        let mut sent = 0;
        self.each_device(
            |_| true,
            |_, d, link| {
                let before = d.latest_job().map(|(w, _)| w);
                d.handle_job(&job, now, link);
                sent += usize::from(d.latest_job().map(|(w, _)| w) != before);
            },
        );
        self.events.push_back(Event::JobSent {
            wire_id: job.id,
            upstream_job_id: job.upstream.job_id,
            clean: job.clean,
            devices: sent,
        });
    }

    /// Vardiff for quiet devices, and the channel's nominal hash rate kept current
    /// (`UpdateChannel`, spec 5.3.7: a proxy MUST send it when its devices change).
    pub fn handle_tick(&mut self, now: Timestamp) {
        self.each_device(|_| true, |_, d, link| d.handle_tick(now, link));
        self.tick_channel(now);
    }

    /// The clock, for one round of the devices ([`crate::mode::TICK_ROUNDS`]: the next round
    /// each call) and the channel; the devices of the round.
    pub fn handle_tick_round(&mut self, now: Timestamp) -> Vec<DeviceId> {
        let in_round = self.tick_rounds.next_round();
        let mut ids = Vec::new();
        self.each_device(in_round, |id, d, link| {
            d.handle_tick(now, link);
            ids.push(id);
        });
        self.tick_channel(now);
        ids
    }

    /// Runs `f` on each device `pick` picks, with the view of the translator it works through.
    fn each_device(
        &mut self,
        pick: impl Fn(DeviceId) -> bool,
        mut f: impl FnMut(DeviceId, &mut Device, &mut Link<'_>),
    ) {
        let mut link = link(
            &self.config,
            &mut self.book,
            &self.upstream,
            &mut self.allocator,
        );
        for (&id, d) in self.devices.iter_mut().filter(|(&id, _)| pick(id)) {
            f(id, d, &mut link);
        }
    }

    /// Re-announces the devices' summed hash rate when it changed enough.
    fn tick_channel(&mut self, now: Timestamp) {
        if !self.upstream.is_open() {
            return;
        }
        if now.millis_since(self.last_update) < self.config.update_interval_ms {
            return;
        }
        let rate = self.nominal_hash_rate();
        let old = self.announced_rate as f64;
        let changed = (rate as f64 - old).abs() > old * self.config.update_threshold
            || (old == 0.0) != (rate == 0.0);
        if changed {
            if let Some(m) = self.upstream.announce_rate(rate, self.config.max_target) {
                self.to_upstream.push_back(m);
            }
            self.announced_rate = rate;
            self.last_update = now;
        }
    }

    fn flush_results(&mut self) {
        for r in self.results.drain(..) {
            self.events.push_back(Event::UpstreamResult(r));
        }
    }
}
