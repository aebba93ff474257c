//! Simulated time: nanoseconds since the network started.
//!
//! The network never reads a clock. The shell maps its monotonic clock onto `SimTime` (real
//! runs), or a test steps it by hand (hours of network in milliseconds). Unix timestamps for
//! block headers come from adding `SimTime` to the configured start time.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// An instant of simulated time: nanoseconds since the network's start.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(u64);

impl SimTime {
    /// The network's start.
    pub const ZERO: SimTime = SimTime(0);
    /// Never: used for events that are switched off.
    pub const NEVER: SimTime = SimTime(u64::MAX);

    /// `ns` nanoseconds after the start.
    pub const fn from_nanos(ns: u64) -> Self {
        SimTime(ns)
    }

    /// `s` seconds after the start (saturating).
    pub const fn from_secs(s: u64) -> Self {
        SimTime(s.saturating_mul(1_000_000_000))
    }

    /// Saturates at [`SimTime::NEVER`] (584 years).
    pub fn from_duration(d: Duration) -> Self {
        SimTime(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Nanoseconds since the start.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Whole seconds since the start.
    pub const fn as_secs(self) -> u64 {
        self.0 / 1_000_000_000
    }

    /// Seconds since the start, with fractions.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Time since the start.
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// Time since `earlier`, zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: SimTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `d` later, saturating at [`SimTime::NEVER`].
    pub fn saturating_add(self, d: Duration) -> SimTime {
        SimTime(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

impl Add<Duration> for SimTime {
    type Output = SimTime;
    /// Saturating: adding to [`SimTime::NEVER`] stays never.
    fn add(self, d: Duration) -> SimTime {
        self.saturating_add(d)
    }
}

impl Sub for SimTime {
    type Output = Duration;
    /// Saturating at zero, like [`SimTime::saturating_since`].
    fn sub(self, earlier: SimTime) -> Duration {
        self.saturating_since(earlier)
    }
}

impl From<Duration> for SimTime {
    fn from(d: Duration) -> Self {
        SimTime::from_duration(d)
    }
}

impl fmt::Debug for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == SimTime::NEVER {
            return write!(f, "SimTime(never)");
        }
        write!(f, "SimTime({:.9}s)", self.as_secs_f64())
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = SimTime::from_secs(2);
        assert_eq!(t.as_nanos(), 2_000_000_000);
        assert_eq!(
            t + Duration::from_millis(500),
            SimTime::from_nanos(2_500_000_000)
        );
        assert_eq!(SimTime::NEVER + Duration::from_secs(1), SimTime::NEVER);
        assert_eq!(SimTime::ZERO - t, Duration::ZERO);
        assert_eq!(t - SimTime::from_secs(1), Duration::from_secs(1));
        assert_eq!(SimTime::from_duration(Duration::MAX), SimTime::NEVER);
    }
}
