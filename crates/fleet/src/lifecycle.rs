//! A device's connection lifecycle, the same whatever protocol it speaks: connected, or waiting
//! to reconnect at a time the backoff chose; stopped for good; the close it asked for.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::device::{CloseReason, Nanos, Rng};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Disconnected { reconnect_at: Nanos },
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
    connected_at: Nanos,
}

impl Lifecycle {
    /// Not connected; the first attempt at `first_connect_at`.
    pub(crate) fn new(first_connect_at: Nanos) -> Self {
        Lifecycle {
            phase: Phase::Disconnected {
                reconnect_at: first_connect_at,
            },
            stopped: false,
            close: None,
            failures: 0,
            connected_at: 0,
        }
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.phase == Phase::Connected
    }

    /// When the connection came up.
    pub(crate) fn connected_at(&self) -> Nanos {
        self.connected_at
    }

    /// Why the device wants its connection closed, if it does.
    pub(crate) fn close_requested(&self) -> Option<CloseReason> {
        self.close
    }

    /// Asks for the connection to be closed (the first reason stands).
    pub(crate) fn request_close(&mut self, reason: CloseReason) {
        if self.close.is_none() {
            self.close = Some(reason);
        }
    }

    /// Disconnected, not stopped, and the reconnect time has come.
    pub(crate) fn wants_connect(&self, now: Nanos) -> bool {
        match self.phase {
            Phase::Disconnected { reconnect_at } => !self.stopped && now >= reconnect_at,
            Phase::Connected => false,
        }
    }

    /// When the next attempt is due; `None` while connected or once stopped.
    pub(crate) fn reconnect_at(&self) -> Option<Nanos> {
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
    pub(crate) fn connected(&mut self, now: Nanos) {
        self.phase = Phase::Connected;
        self.close = None;
        self.connected_at = now;
    }

    /// The connection attempt failed: back off.
    pub(crate) fn connect_failed(&mut self, now: Nanos, backoff: &Backoff, rng: &mut Rng) {
        let delay = backoff.delay(self.failures, rng);
        self.failures = self.failures.saturating_add(1);
        self.phase = Phase::Disconnected {
            reconnect_at: at(now, delay),
        };
    }

    /// The connection closed for `reason`. After a session that got ready (`was_ready`) the
    /// backoff starts over; a pool that asked the device to come back is obeyed after its
    /// `wait`, spread by the first backoff step; a stop is for good.
    pub(crate) fn closed(
        &mut self,
        now: Nanos,
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
            Nanos::MAX
        } else if reason == CloseReason::Reconnect {
            at(now, wait + backoff.delay(0, rng))
        } else {
            let delay = backoff.delay(self.failures, rng);
            self.failures = self.failures.saturating_add(1);
            at(now, delay)
        };
        self.phase = Phase::Disconnected { reconnect_at };
        self.close = None;
    }
}

fn at(now: Nanos, delay: Duration) -> Nanos {
    now.saturating_add(delay.as_nanos() as u64)
}
