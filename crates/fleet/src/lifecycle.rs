//! A device's connection lifecycle, the same whatever protocol it speaks: connected, or waiting
//! to reconnect at a time the backoff chose; stopped for good; the close it asked for.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::device::{CloseReason, Rng, Timestamp};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Disconnected { reconnect_at: Timestamp },
    Connected,
}

/// The limits on a connected device's waits, whatever protocol it speaks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// Set up (subscribed and authorized, or a channel open) within this long of connecting.
    pub(crate) handshake: Duration,
    /// A share's verdict within this long of sending it.
    pub(crate) reply: Duration,
    /// Something from the pool within this long (ZERO: no limit).
    pub(crate) silence: Duration,
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
        t: Timeouts,
        handshaking: bool,
        oldest: Option<Timestamp>,
        last_rx: Timestamp,
    ) -> Option<Timestamp> {
        if !self.is_connected() {
            return self.reconnect_at();
        }
        [
            handshaking.then(|| self.connected_at + t.handshake),
            oldest.map(|sent| sent + t.reply),
            (!t.silence.is_zero()).then(|| last_rx + t.silence),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// How many of the shares sent at `sent` (oldest first) are past their verdict's deadline
    /// at `now`.
    pub(crate) fn overdue(
        t: Timeouts,
        sent: impl Iterator<Item = Timestamp>,
        now: Timestamp,
    ) -> usize {
        sent.take_while(|at| *at + t.reply <= now).count()
    }

    /// Asks for a close ([`CloseReason::Timeout`]) when, at `now`, the handshake (while
    /// `handshaking`) or the pool's silence since `last_rx` has run past its limit.
    pub(crate) fn check_timeouts(
        &mut self,
        t: Timeouts,
        handshaking: bool,
        last_rx: Timestamp,
        now: Timestamp,
    ) {
        if handshaking && self.connected_at + t.handshake <= now {
            self.request_close(CloseReason::Timeout);
        }
        if !t.silence.is_zero() && last_rx + t.silence <= now {
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
