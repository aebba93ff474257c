//! What a link is: its one-way delays, jitter, loss and capacity.

use std::time::Duration;

use events::Direction;

use crate::units::{Bandwidth, LossRate};

/// The emulated link between the tap's clients ("up" is from them toward the upstream) and its
/// upstream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// One-way delay from the clients toward the upstream.
    pub delay_up: Duration,
    /// One-way delay from the upstream toward the clients.
    pub delay_down: Duration,
    /// Each chunk's delay varies uniformly within ± this (netem's default distribution), but a
    /// chunk never leaves before the one that arrived ahead of it in the same stream.
    pub jitter: Duration,
    /// Probability that a TCP segment is lost; paid as the retransmission delay TCP would add
    /// (see [`crate::loss`]).
    pub loss: LossRate,
    /// Capacity of each direction, shared by all connections (see [`crate::pipe`]).
    pub bandwidth: Bandwidth,
    /// Hold a new connection's bytes as a TCP handshake across the link would: the client's
    /// first bytes cannot leave before one round trip after it connected, the upstream's not
    /// before it could have accepted (a round trip and a one-way delay).
    pub handshake: bool,
}

impl Default for LinkConfig {
    /// A perfect link: no delay, no loss, no cap.
    fn default() -> Self {
        LinkConfig {
            delay_up: Duration::ZERO,
            delay_down: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: LossRate::NONE,
            bandwidth: Bandwidth::UNLIMITED,
            handshake: false,
        }
    }
}

impl LinkConfig {
    /// The same delay both ways.
    pub fn symmetric(delay: Duration) -> Self {
        LinkConfig {
            delay_up: delay,
            delay_down: delay,
            ..LinkConfig::default()
        }
    }

    /// The one-way delay in direction `dir`.
    pub fn delay(&self, dir: Direction) -> Duration {
        match dir {
            Direction::Up => self.delay_up,
            Direction::Down => self.delay_down,
        }
    }

    /// The configured round-trip time: up plus down, jitter excluded.
    pub fn rtt(&self) -> Duration {
        self.delay_up + self.delay_down
    }

    /// How long after a client connected each direction's first bytes may leave (zero without
    /// handshake emulation).
    pub fn handshake_hold(&self, dir: Direction) -> Duration {
        if !self.handshake {
            return Duration::ZERO;
        }
        match dir {
            // SYN out, SYN-ACK back: the client's connect() returns after one round trip.
            Direction::Up => self.rtt(),
            // The final ACK still has to reach the upstream before its accept() returns.
            Direction::Down => self.rtt() + self.delay_up,
        }
    }
}

/// Nanoseconds of a duration, saturating (a delay of centuries is not a configuration).
pub(crate) fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_and_round_trip() {
        let l = LinkConfig {
            delay_up: Duration::from_millis(10),
            delay_down: Duration::from_millis(30),
            ..LinkConfig::default()
        };
        assert_eq!(l.delay(Direction::Up), Duration::from_millis(10));
        assert_eq!(l.delay(Direction::Down), Duration::from_millis(30));
        assert_eq!(l.rtt(), Duration::from_millis(40));
        assert_eq!(l.handshake_hold(Direction::Up), Duration::ZERO);
        let l = LinkConfig {
            handshake: true,
            ..l
        };
        assert_eq!(l.handshake_hold(Direction::Up), Duration::from_millis(40));
        assert_eq!(l.handshake_hold(Direction::Down), Duration::from_millis(50));
    }
}
