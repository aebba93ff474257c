//! A device's connection lifecycle, the same whatever protocol it speaks: connected, or waiting
//! to reconnect at a time the backoff chose; stopped for good; the close it asked for; the
//! shares found and sent on the connection.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::device::{CloseReason, ConnectionPolicy, Observer, Rng, Timestamp};

/// Shares found but not yet handed to the transport, at most.
pub(crate) const MAX_PENDING: usize = 64;

/// A share sent and awaiting its verdict; `S` is the protocol's sequence number, `J` its job id.
pub(crate) struct InFlight<S, J> {
    pub(crate) seq: S,
    pub(crate) sent_at: Timestamp,
    pub(crate) job_id: J,
    pub(crate) nonce: u32,
    pub(crate) difficulty: f64,
}

/// Each share of `shares` counts as unanswered at `now`.
pub(crate) fn unanswered<S: Into<u64>, J, O: Observer>(
    device: u64,
    now: Timestamp,
    shares: impl Iterator<Item = InFlight<S, J>>,
    obs: &mut O,
) {
    for f in shares {
        obs.share_unanswered(device, now, f.seq.into());
    }
}

/// Records `share` as in flight; with `max` (at least one) already in flight, the oldest counts
/// as unanswered.
pub(crate) fn track<S: Into<u64>, J, O: Observer>(
    in_flight: &mut Vec<InFlight<S, J>>,
    max: usize,
    device: u64,
    share: InFlight<S, J>,
    obs: &mut O,
) {
    if in_flight.len() >= max.max(1) {
        unanswered(device, share.sent_at, in_flight.drain(..1), obs);
    }
    in_flight.push(share);
}

/// The inherent methods both devices answer alike, from the fields they both have (`id`,
/// `index`, `life`, `rng`, `last_rx`, `pending`, `in_flight` of [`InFlight`]s, `shared.config`
/// with the backoff and timeouts) and their `is_ready` (false while the handshake runs).
macro_rules! common_methods {
    () => {
        /// The device's id in events.
        pub fn id(&self) -> u64 {
            self.id
        }

        /// The device's position in the fleet, from 0.
        pub fn index(&self) -> u32 {
            self.index
        }

        /// Whether a TCP connection is open.
        pub fn is_connected(&self) -> bool {
            self.life.is_connected()
        }

        /// Shares sent and awaiting a verdict.
        pub fn in_flight(&self) -> usize {
            self.in_flight.len()
        }

        /// Shares found and not yet handed to [`Self::poll_transmit`].
        pub fn pending_shares(&self) -> usize {
            self.pending.len()
        }

        /// The device wants its connection closed.
        pub fn close_requested(&self) -> Option<CloseReason> {
            self.life.close_requested()
        }

        /// Disconnected, not stopped, and its reconnect time has come.
        pub fn wants_connect(&self, now: Timestamp) -> bool {
            self.life.wants_connect(now)
        }

        /// Stops for good: no more connection attempts; a connected device asks to be closed.
        pub fn stop(&mut self) {
            self.life.stop();
        }

        /// The connection attempt failed: back off.
        pub fn handle_connect_failed(&mut self, now: Timestamp) {
            self.life
                .connect_failed(now, &self.shared.config.connection.backoff, &mut self.rng);
        }

        /// The earliest time [`Self::handle_timeout`] (or a connection attempt) has work to do.
        pub fn poll_timeout(&self) -> Option<Timestamp> {
            self.life.poll_timeout(
                &self.timeouts(),
                !self.is_ready(),
                self.in_flight.first().map(|f| f.sent_at),
                self.last_rx,
            )
        }

        /// Handles the deadlines that have passed.
        pub fn handle_timeout<O: Observer>(&mut self, now: Timestamp, obs: &mut O) {
            if !self.is_connected() {
                return;
            }
            let t = self.timeouts();
            let expired = Lifecycle::overdue(&t, self.in_flight.iter().map(|f| f.sent_at), now);
            $crate::lifecycle::unanswered(self.id, now, self.in_flight.drain(..expired), obs);
            let handshaking = !self.is_ready();
            self.life.check_timeouts(&t, handshaking, self.last_rx, now);
        }

        fn timeouts(&self) -> $crate::device::ConnectionPolicy {
            self.shared.config.connection
        }

        fn request_close(&mut self, reason: CloseReason) {
            self.life.request_close(reason);
        }

        /// The connection is gone: the shares in flight go unanswered, those found are dropped.
        fn abandon_shares<O: Observer>(&mut self, now: Timestamp, obs: &mut O) {
            $crate::lifecycle::unanswered(self.id, now, self.in_flight.drain(..), obs);
            for _ in self.pending.drain(..) {
                obs.share_dropped(self.id, now);
            }
        }

        /// A share found at `now`: queued for the transport unless
        /// [`MAX_PENDING`]($crate::lifecycle::MAX_PENDING) are waiting already.
        fn queue_share<O: Observer>(&mut self, share: Found, now: Timestamp, obs: &mut O) {
            obs.share_found(self.id, now);
            if self.pending.len() >= $crate::lifecycle::MAX_PENDING {
                obs.share_dropped(self.id, now);
            } else {
                self.pending.push(share);
            }
        }
    };
}

pub(crate) use common_methods;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Disconnected { reconnect_at: Timestamp },
    Connected,
}

/// Where a device's connection stands, and when it tries again.
#[derive(Debug)]
pub(crate) struct Lifecycle {
    phase: Phase,
    stopped: bool,
    close: Option<CloseReason>,
    /// Failed connection attempts in a row (sets the backoff ceiling).
    failures: u32,
    connected_at: Timestamp,
}

impl Lifecycle {
    /// Not connected; the first attempt at `first_connect_at`.
    pub(crate) fn new(first_connect_at: Timestamp) -> Self {
        Lifecycle {
            phase: Phase::Disconnected {
                reconnect_at: first_connect_at,
            },
            stopped: false,
            close: None,
            failures: 0,
            connected_at: Timestamp::ZERO,
        }
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.phase == Phase::Connected
    }

    /// Why the device wants its connection closed, if it does.
    pub(crate) fn close_requested(&self) -> Option<CloseReason> {
        self.close
    }

    /// When the device next has a deadline: its reconnection while disconnected; connected, the
    /// end of its handshake (while `handshaking`), the verdict of its oldest share in flight
    /// (sent at `oldest`), the pool's silence since `last_rx`.
    pub(crate) fn poll_timeout(
        &self,
        t: &ConnectionPolicy,
        handshaking: bool,
        oldest: Option<Timestamp>,
        last_rx: Timestamp,
    ) -> Option<Timestamp> {
        if !self.is_connected() {
            return self.reconnect_at();
        }
        [
            handshaking.then(|| self.connected_at + t.handshake_timeout),
            oldest.map(|sent| sent + t.reply_timeout),
            (!t.silence_timeout.is_zero()).then(|| last_rx + t.silence_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// How many of the shares sent at `sent` (oldest first) are past their verdict's deadline
    /// at `now`.
    pub(crate) fn overdue(
        t: &ConnectionPolicy,
        sent: impl Iterator<Item = Timestamp>,
        now: Timestamp,
    ) -> usize {
        sent.take_while(|at| *at + t.reply_timeout <= now).count()
    }

    /// Asks for a close ([`CloseReason::Timeout`]) when, at `now`, the handshake (while
    /// `handshaking`) or the pool's silence since `last_rx` has run past its limit.
    pub(crate) fn check_timeouts(
        &mut self,
        t: &ConnectionPolicy,
        handshaking: bool,
        last_rx: Timestamp,
        now: Timestamp,
    ) {
        if handshaking && self.connected_at + t.handshake_timeout <= now {
            self.request_close(CloseReason::Timeout);
        }
        if !t.silence_timeout.is_zero() && last_rx + t.silence_timeout <= now {
            self.request_close(CloseReason::Timeout);
        }
    }

    /// Asks for the connection to be closed (the first reason stands).
    pub(crate) fn request_close(&mut self, reason: CloseReason) {
        if self.close.is_none() {
            self.close = Some(reason);
        }
    }

    /// Disconnected, not stopped, and the reconnect time has come.
    pub(crate) fn wants_connect(&self, now: Timestamp) -> bool {
        match self.phase {
            Phase::Disconnected { reconnect_at } => !self.stopped && now >= reconnect_at,
            Phase::Connected => false,
        }
    }

    /// When the next attempt is due; `None` while connected or once stopped.
    pub(crate) fn reconnect_at(&self) -> Option<Timestamp> {
        match self.phase {
            Phase::Disconnected { reconnect_at } => (!self.stopped).then_some(reconnect_at),
            Phase::Connected => None,
        }
    }

    /// Stops for good: no more attempts; a connected device asks to be closed.
    pub(crate) fn stop(&mut self) {
        self.stopped = true;
        if self.is_connected() {
            self.request_close(CloseReason::Stop);
        }
    }

    /// The TCP connection is up.
    pub(crate) fn connected(&mut self, now: Timestamp) {
        self.phase = Phase::Connected;
        self.close = None;
        self.connected_at = now;
    }

    /// The connection attempt failed: back off.
    pub(crate) fn connect_failed(&mut self, now: Timestamp, backoff: &Backoff, rng: &mut Rng) {
        let delay = backoff.delay(self.failures, rng);
        self.failures = self.failures.saturating_add(1);
        self.phase = Phase::Disconnected {
            reconnect_at: now + delay,
        };
    }

    /// The connection closed for `reason`. After a session that got ready (`was_ready`) the
    /// backoff starts over; a pool that asked the device to come back is obeyed after its
    /// `wait`, spread by the first backoff step; a stop is for good.
    pub(crate) fn closed(
        &mut self,
        now: Timestamp,
        reason: CloseReason,
        was_ready: bool,
        wait: Duration,
        backoff: &Backoff,
        rng: &mut Rng,
    ) {
        if was_ready {
            self.failures = 0;
        }
        let reconnect_at = if self.stopped || reason == CloseReason::Stop {
            self.stopped = true;
            Timestamp::MAX
        } else if reason == CloseReason::Reconnect {
            now + wait + backoff.delay(0, rng)
        } else {
            let delay = backoff.delay(self.failures, rng);
            self.failures = self.failures.saturating_add(1);
            now + delay
        };
        self.phase = Phase::Disconnected { reconnect_at };
        self.close = None;
    }
}
