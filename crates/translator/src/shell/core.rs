//! The core task: the translator, the upstream connection in use (or the task looking for
//! one), and where each device's bytes go.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use events::{
    ConnectionClosed, ConnectionOpened, EventSink, JobId, Perspective, Reason, ShortStr, Verdict,
};
use primitives::Difficulty;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::backoff::Backoff;
use super::connect::connect_any;
use super::edge::{stopped, DeviceIn, DeviceShared};
use super::net::Net;
use super::stats::Stats;
use super::transport::{Link, Transport};
use super::{millis, upstream_opened, ShellConfig, ShellError, Summary, UPSTREAM_CONN_BASE};
use crate::downstream::Close;
use crate::shares::UpstreamVerdict;
use crate::{DeviceId, Event, LineOutcome, Mode, Reach, Scope, Tagged, Timestamp};

/// The upstream connection in use.
struct Live<T> {
    conn: T,
    /// Which configured upstream.
    index: usize,
    /// When anything last arrived on it.
    last_rx: Timestamp,
    /// When its channel was asked for, until it opens.
    opening_since: Option<Timestamp>,
}

pub(super) struct Core<T: Transport, M> {
    /// Aggregated or per-device mode.
    translator: M,
    config: Arc<ShellConfig>,
    live: Option<Live<T>>,
    /// Looking for an upstream, while there is none.
    connecting: Option<JoinHandle<(usize, Link<T>)>>,
    /// The upstream connection's id in events ([`UPSTREAM_CONN_BASE`] and up).
    serial: u64,
    /// The upstream last used (failover starts with the one after it).
    last_index: usize,
    clock: Instant,
    devices: HashMap<DeviceId, DeviceLink>,
    conns: HashMap<u64, DeviceId>,
    events: EventSink,
    /// What the HTTP endpoints and the closing summary report.
    stats: Arc<Stats>,
    /// Why the upstream must be given up, once something said so.
    lost: Option<String>,
    /// The proxy's own socket bytes, reported each tick.
    net: Arc<Net>,
}

impl<T: Transport, M: Mode<In = T::In, Out = T::Out>> Core<T, M> {
    pub(super) fn new(
        translator: M,
        index: usize,
        link: Link<T>,
        clock: Instant,
        config: Arc<ShellConfig>,
        stats: Arc<Stats>,
        net: Arc<Net>,
    ) -> Self {
        let mut translator = translator;
        translator.set_open_timeout(config.open_timeout);
        let events = config.events.clone();
        let spec = &config.upstreams[index];
        upstream_opened(&events, UPSTREAM_CONN_BASE, spec, link.local);
        tracing::info!(upstream = %spec.addr, index, "upstream channel open");
        let now = millis(clock);
        Core {
            translator,
            live: Some(Live {
                conn: link.conn,
                index,
                last_rx: now,
                opening_since: None,
            }),
            connecting: None,
            serial: UPSTREAM_CONN_BASE,
            last_index: index,
            clock,
            devices: HashMap::new(),
            conns: HashMap::new(),
            events,
            stats,
            lost: None,
            config,
            net,
        }
    }

    fn now(&self) -> Timestamp {
        millis(self.clock)
    }

    pub(super) async fn run(
        mut self,
        mut inbox: mpsc::Receiver<DeviceIn>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<Summary, ShellError> {
        // Often enough that a silent upstream is noticed within a quarter keepalive of it.
        let tick = self
            .config
            .tick
            .min(self.config.keepalive / 4)
            .max(Duration::from_millis(10));
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Work that came with the channel's opening.
        self.flush_all();
        self.send_upstream().await;
        loop {
            tokio::select! {
                biased;
                _ = stopped(&mut shutdown) => break,
                m = read_upstream(&mut self.live) => self.upstream_read(m),
                (index, link) = found(&mut self.connecting) => self.connected(index, link),
                Some(m) = inbox.recv() => self.device_message(m),
                _ = ticks.tick() => self.handle_tick(),
            }
            self.drain_events(None);
            self.send_upstream().await;
            if let Some(why) = self.lost.take() {
                self.fail_over(&why);
            }
        }
        if let Some(c) = self.connecting.take() {
            c.abort();
        }
        self.drain_events(None);
        // Closing the senders closes the devices once their queues are written.
        for (id, _) in std::mem::take(&mut self.devices) {
            self.translator.device_closed(id);
        }
        if let Some(live) = self.live.take() {
            self.emit_closed("shutdown");
            live.conn.close(Duration::from_millis(200)).await;
        }
        Ok(self.stats.summary())
    }

    fn upstream_read(&mut self, m: Result<T::In, ShellError>) {
        let now = self.now();
        if let Some(live) = self.live.as_mut() {
            live.last_rx = now;
        }
        match m {
            Ok(m) => {
                let fans_out = T::fans_out(&m);
                let reach = self.translator.upstream_message(m, now);
                if fans_out {
                    match reach {
                        Reach::Everyone => self.flush_all(),
                        Reach::Device(id) => self.flush(id),
                        Reach::Nobody => {}
                    }
                }
            }
            Err(e) => self.lost = Some(e.to_string()),
        }
    }

    /// A connection past SetupConnection: ask it for a channel.
    fn connected(&mut self, index: usize, c: Link<T>) {
        self.connecting = None;
        self.serial += 1;
        let spec = &self.config.upstreams[index];
        upstream_opened(&self.events, self.serial, spec, c.local);
        if c.fixed_version {
            tracing::warn!(upstream = %spec.addr, "this upstream wants the version as sent; devices that roll it will see shares rejected");
        }
        tracing::info!(upstream = %spec.addr, index, "upstream connected; opening the channel");
        let now = self.now();
        self.translator.upstream_extensions(&c.extensions);
        self.stats.upstream_extensions(&c.extensions);
        self.translator.upstream_connected(now);
        self.last_index = index;
        self.stats.upstream_opening(index, spec.addr);
        // Per-device mode needs no channel to be ready: devices' channels are timed apiece.
        let ready = self.translator.is_ready();
        if ready {
            self.stats.upstream_ready();
        }
        self.live = Some(Live {
            conn: c.conn,
            index,
            last_rx: now,
            opening_since: (!ready).then_some(now),
        });
    }

    fn handle_tick(&mut self) {
        let now = self.now();
        for id in self.translator.handle_tick(now) {
            self.flush(id);
        }
        self.net.report(&self.events);
        // Once a tick: it is a sum over every device.
        self.stats
            .set_hash_rate(f64::from(self.translator.nominal_hash_rate()));
        self.stats.set_channels(&self.translator.channels());
        let Some(live) = &self.live else { return };
        let limit = self.config.keepalive.as_millis() as u64;
        let open_limit = self.config.open_timeout.as_millis() as u64;
        if let Some(since) = live.opening_since {
            if now.millis_since(since) > open_limit {
                self.lost = Some("channel not opened in time".into());
            }
            return;
        }
        if let Some(sent) = self.translator.oldest_in_flight() {
            if upstream_silent(now, live.last_rx, sent, limit) {
                self.lost = Some(format!(
                    "silent for {:?} with a share awaiting its verdict",
                    self.config.keepalive
                ));
            }
        }
    }

    /// Gives up the upstream in use and starts looking for the next.
    fn fail_over(&mut self, why: &str) {
        let Some(live) = self.live.take() else { return };
        let addr = self.config.upstreams[live.index].addr;
        tracing::warn!(upstream = %addr, index = live.index, why, "upstream lost; failing over");
        self.stats.upstream_lost(why);
        self.emit_closed("upstream lost");
        drop(live);
        let now = self.now();
        self.translator.upstream_lost(now);
        self.drain_events(None);
        self.flush_all();
        let config = self.config.clone();
        let first = (self.last_index + 1) % config.upstreams.len();
        let seed = u64::from(std::process::id()) ^ self.serial.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let net = self.net.upstream.clone();
        self.connecting = Some(tokio::spawn(async move {
            let backoff = Backoff::new(config.backoff_min, config.backoff_max, seed);
            connect_any::<T>(
                &config.upstreams,
                first,
                config.open_timeout,
                backoff,
                config.hello(),
                &net,
            )
            .await
        }));
    }

    fn emit_closed(&self, reason: &str) {
        if self.events.is_enabled() {
            self.events.emit(ConnectionClosed {
                conn: self.serial,
                reason: ShortStr::new(reason),
            });
        }
    }

    /// Sends what the translator queued; a failed send loses the upstream.
    async fn send_upstream(&mut self) {
        let Some(live) = self.live.as_mut() else {
            // Nothing can go out: what was queued belonged to the lost channel.
            while self.translator.poll_transmit().is_some() {}
            return;
        };
        while let Some(m) = self.translator.poll_transmit() {
            if let Err(e) = live.conn.send(m).await {
                self.lost = Some(e.to_string());
                return;
            }
        }
    }

    fn device_message(&mut self, m: DeviceIn) {
        let now = self.now();
        match m {
            DeviceIn::Connected {
                conn,
                peer,
                local,
                out,
                shared,
            } => {
                let id = self.translator.device_connected(now);
                self.devices.insert(
                    id,
                    DeviceLink {
                        out,
                        shared,
                        ip: peer.ip(),
                        rejected_in_a_row: 0,
                        closing: None,
                    },
                );
                self.conns.insert(conn, id);
                self.stats.device_opened(self.conns.len());
                if self.events.is_enabled() {
                    self.events.emit(ConnectionOpened {
                        conn: id.0,
                        peer,
                        local,
                        label: ShortStr::new("sv1"),
                    });
                }
                tracing::debug!(device = id.0, %peer, "device connected");
            }
            DeviceIn::Line { conn, line } => {
                let Some(&id) = self.conns.get(&conn) else {
                    return;
                };
                let outcome = self.translator.device_line(id, &line, now);
                self.drain_events(outcome.as_ref());
                self.count_verdict(id, outcome.as_ref(), now);
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
                self.stats.device_closed(self.conns.len());
                if self.events.is_enabled() {
                    self.events.emit(ConnectionClosed {
                        conn: id.0,
                        reason: ShortStr::new(reason),
                    });
                }
                tracing::debug!(device = id.0, reason, "device disconnected");
            }
        }
    }

    /// Rejected shares in a row (stale ones excepted) ban the device's address at
    /// `--invalid-share-ban-after`, as on the pool; the device is closed.
    fn count_verdict(&mut self, id: DeviceId, outcome: Option<&LineOutcome>, now: Timestamp) {
        let Some(link) = self.devices.get_mut(&id) else {
            return;
        };
        match outcome {
            Some(LineOutcome::Accepted(_)) => link.rejected_in_a_row = 0,
            Some(LineOutcome::Rejected(r)) if r.reason() == Reason::Stale => {}
            Some(LineOutcome::Rejected(_)) | Some(LineOutcome::Refused(_)) => {
                link.rejected_in_a_row += 1;
                if link.rejected_in_a_row >= self.config.admission.invalid_share_ban_after {
                    if let Some(gate) = self.stats.gate() {
                        gate.ban(link.ip, now, ::edge::BanReason::InvalidShares);
                    }
                    tracing::info!(device = id.0, ip = %link.ip, "too many invalid shares: closing and banning");
                    // Closed by the flush that follows, once the verdict on this share is out.
                    link.closing = Some(CLOSED_INVALID_SHARES);
                }
            }
            _ => {}
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
        let pending: usize = device.poll_transmit().iter().map(|s| s.len()).sum();
        let close = device.wants_close();
        let authorized = device.worker().is_some();
        let Some(link) = self.devices.get(&id) else {
            return;
        };
        // Written once: a store at every flush would bounce the line between the core and
        // the device's task.
        if authorized && !link.shared.authorized.load(Ordering::Relaxed) {
            link.shared.authorized.store(true, Ordering::Relaxed);
        }
        let mut why = close.map(close_reason).or(link.closing);
        if pending > 0 {
            let bytes = device.take_output();
            if link.out.try_send(bytes).is_err() {
                self.stats.device_dropped_slow();
                tracing::debug!(device = id.0, "device too slow, dropped");
                why = Some(CLOSED_TOO_SLOW);
            }
        }
        if let Some(why) = why {
            if let Some(c) = close {
                tracing::debug!(device = id.0, why = ?c, "closing device");
                if matches!(c, Close::TooManyBadLines | Close::LineTooLong) {
                    if let Some(gate) = self.stats.gate() {
                        gate.strike(link.ip, self.now(), ::edge::BanReason::MalformedMessages);
                    }
                }
            }
            // Its task sees the queue end, writes what is in it, and reports Closed with this
            // reason.
            let _ = link.shared.why.set(why);
            self.devices.remove(&id);
        }
    }

    /// Counts and logs what the core reports; `outcome` is the line just handled, if any.
    fn drain_events(&mut self, outcome: Option<&LineOutcome>) {
        while let Some(Tagged {
            event,
            channel,
            target,
            scope,
        }) = self.translator.poll_event()
        {
            // A device's own channel failing ends that device (the core saw to it); the
            // shared channel failing is the upstream's.
            let shared = scope == Scope::Connection;
            match event {
                Event::JobSent { .. } => self.stats.job_sent(),
                Event::ShareJudged { result, .. } => match result {
                    Ok(difficulty) => self.stats.share_accepted(difficulty),
                    Err(reject) => self.stats.share_rejected(reject.reason()),
                },
                Event::ShareForwarded {
                    sequence_number, ..
                } => {
                    self.stats.share_forwarded();
                    if let (Some(LineOutcome::Accepted(s)), true) =
                        (outcome, self.events.is_enabled())
                    {
                        self.events.emit(events::ShareSent {
                            device: self.serial,
                            channel,
                            seq: u64::from(sequence_number),
                            job_id: JobId::from(s.job.upstream.job_id),
                            nonce: s.nonce,
                            ntime: s.ntime,
                            version: s.version,
                            // Sent against the channel's current target (`meets_upstream`).
                            difficulty: Difficulty::from_target(target).as_f64(),
                            hash: Some(s.hash),
                        });
                    }
                }
                Event::UpstreamResult(r) => {
                    self.stats.upstream_verdict(&r.verdict);
                    let verdict = match &r.verdict {
                        UpstreamVerdict::Accepted => Some(Verdict::Accepted),
                        UpstreamVerdict::Rejected(code) => {
                            Some(Verdict::Rejected(Reason::from_sv2_code(code)))
                        }
                        UpstreamVerdict::Unanswered => None,
                    };
                    if let (Some(verdict), true) = (verdict, self.events.is_enabled()) {
                        self.events.emit(events::ShareResult {
                            conn: self.serial,
                            channel,
                            seq: u64::from(r.sequence_number),
                            job_id: JobId::from(r.upstream_job_id),
                            nonce: r.nonce,
                            difficulty: Difficulty::from_target(target).as_f64(),
                            verdict,
                            perspective: Perspective::Received,
                        });
                    }
                }
                Event::ChannelClosed(why) if shared => {
                    self.lost = Some(format!("channel closed: {why}"));
                }
                Event::ChannelOpenFailed(code) if shared => {
                    self.lost = Some(format!("channel refused: {code}"));
                }
                Event::Layout(e) if shared => {
                    self.lost = Some(format!("channel unusable: {e}"));
                }
                Event::ChannelClosed(_) | Event::ChannelOpenFailed(_) | Event::Layout(_) => {
                    if let Scope::Device(id) = scope {
                        self.flush(id);
                    }
                }
                Event::ChannelOpened { .. } if !shared => self.stats.device_channel_opened(),
                Event::ChannelOpened { channel_id, .. } => {
                    if let Some(live) = self.live.as_mut() {
                        if live.opening_since.take().is_some() {
                            self.stats
                                .channel_opened(channel, Difficulty::from_target(target).as_f64());
                            tracing::info!(
                                upstream = %self.config.upstreams[live.index].addr,
                                index = live.index,
                                channel = channel_id,
                                "upstream channel open"
                            );
                        }
                    }
                }
                Event::TargetChanged(t) if shared => {
                    self.stats
                        .target_changed(Difficulty::from_target(t).as_f64());
                }
                Event::TargetChanged(_) | Event::ProtocolError(_) => {}
            }
        }
        self.stats.set_in_flight(self.translator.in_flight());
        self.stats
            .set_channels_open(self.translator.channels_open());
    }
}

/// The next message from the upstream in use; never resolves while there is none.
async fn read_upstream<T: Transport>(live: &mut Option<Live<T>>) -> Result<T::In, ShellError> {
    match live {
        Some(l) => l.conn.read().await,
        None => std::future::pending().await,
    }
}

/// The connection the failover task found; never resolves while none is sought.
async fn found<T: Transport>(
    connecting: &mut Option<JoinHandle<(usize, Link<T>)>>,
) -> (usize, Link<T>) {
    match connecting {
        Some(task) => match task.await {
            Ok(c) => c,
            // The task only ends with a connection or by abort (which happens at shutdown,
            // after the loop).
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// Whether an upstream with a share awaiting its verdict (sent at `sent`) is silent: nothing
/// heard from it for the keepalive, and nothing since the share went up, which has itself waited
/// a quarter keepalive. Silence is counted from the last word heard, not from the share: SV2
/// has no ping, so the first share after a pool stops answering is the probe, and counting from
/// it would add the wait for that share (seconds, at a few shares a minute) to the failover. The
/// quarter keepalive keeps a pool that is merely quiet between jobs from being judged on one
/// share's round trip.
fn upstream_silent(now: Timestamp, last_rx: Timestamp, sent: Timestamp, keepalive_ms: u64) -> bool {
    last_rx < sent
        && now.millis_since(last_rx) > keepalive_ms
        && now.millis_since(sent) > keepalive_ms / 4
}

/// The core's side of a device's connection.
struct DeviceLink {
    /// Bytes for the device's task to write; dropped to close the device.
    out: mpsc::Sender<Vec<u8>>,
    /// Why the core closed the device (set before `out` is dropped: the task's close
    /// reason), and whether it has authorized (its task's handshake timeout ends).
    shared: Arc<DeviceShared>,
    ip: std::net::IpAddr,
    rejected_in_a_row: u32,
    /// Set to close the device at the next flush, after what it is owed is on its way.
    closing: Option<&'static str>,
}

/// The close reasons the core gives (the `admission.closed` vocabulary of the device side,
/// beside the device task's own: docs/operations.md).
const CLOSED_INVALID_SHARES: &str = "too many invalid shares";
const CLOSED_TOO_SLOW: &str = "device too slow";

fn close_reason(c: Close) -> &'static str {
    match c {
        Close::TooManyBadLines => "too many malformed messages",
        Close::LineTooLong => "line too long",
        Close::Full => "channel full",
        Close::ExtranonceChanged => "extranonce changed",
        Close::ChannelLost => "channel lost",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEEPALIVE: u64 = 2_000;

    #[test]
    fn a_pool_silent_since_the_fault_is_lost_a_keepalive_after_its_last_word() {
        // Last heard at 10 s; the first share after the fault went up at 11.9 s.
        let (heard, sent) = (
            Timestamp::from_millis(10_000),
            Timestamp::from_millis(11_900),
        );
        assert!(!upstream_silent(
            Timestamp::from_millis(12_000),
            heard,
            sent,
            KEEPALIVE
        ));
        // A keepalive after the last word, but the share has waited only 0.3 s.
        assert!(!upstream_silent(
            Timestamp::from_millis(12_200),
            heard,
            sent,
            KEEPALIVE
        ));
        // And once it has waited a quarter keepalive.
        assert!(upstream_silent(
            Timestamp::from_millis(12_401),
            heard,
            sent,
            KEEPALIVE
        ));
    }

    #[test]
    fn a_quiet_pool_is_judged_by_how_long_the_share_waits() {
        // Nothing heard for a minute (no new job), then a share: a quarter keepalive to answer.
        let (heard, sent) = (Timestamp::from_millis(0), Timestamp::from_millis(60_000));
        assert!(!upstream_silent(
            Timestamp::from_millis(60_400),
            heard,
            sent,
            KEEPALIVE
        ));
        assert!(upstream_silent(
            Timestamp::from_millis(60_501),
            heard,
            sent,
            KEEPALIVE
        ));
    }

    #[test]
    fn a_word_after_the_share_went_up_means_the_pool_is_alive() {
        let (sent, heard) = (Timestamp::from_millis(1_000), Timestamp::from_millis(1_001));
        assert!(!upstream_silent(
            Timestamp::from_millis(9_000),
            heard,
            sent,
            KEEPALIVE
        ));
    }
}
