//! Time as the sans-IO cores see it: passed in by their shells, never read from a clock.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

const NANOS_PER_MILLI: u64 = 1_000_000;

/// An instant on the host's monotonic clock, in nanoseconds: what `events::clock::now_ns()`
/// reads, or any counter a test steps. Every sans-IO core takes its time as a `Timestamp` and
/// never reads a clock itself, so tests run hours of traffic in microseconds and every decision
/// is reproducible.
///
/// Spans between two instants are [`Duration`]s ([`Timestamp::since`]); the millisecond
/// helpers exist for settings and records that are kept in whole milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The clock's origin.
    pub const ZERO: Timestamp = Timestamp(0);

    /// The end of time: a deadline that never comes.
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// The instant `ns` nanoseconds after the clock's origin.
    pub const fn from_nanos(ns: u64) -> Timestamp {
        Timestamp(ns)
    }

    /// The instant `s` seconds after the clock's origin (saturating).
    pub const fn from_secs(s: u64) -> Timestamp {
        Timestamp(s.saturating_mul(1_000_000_000))
    }

    /// The instant `ms` milliseconds after the clock's origin (saturating).
    pub const fn from_millis(ms: u64) -> Timestamp {
        Timestamp(ms.saturating_mul(NANOS_PER_MILLI))
    }

    /// Nanoseconds since the clock's origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Whole milliseconds since the clock's origin.
    pub const fn as_millis(self) -> u64 {
        self.0 / NANOS_PER_MILLI
    }

    /// Whole seconds since the clock's origin.
    pub const fn as_secs(self) -> u64 {
        self.0 / 1_000_000_000
    }

    /// Seconds since the clock's origin, with fractions.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// The time from `earlier` to `self`; zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Nanoseconds from `earlier` to `self`; 0 if `earlier` is later.
    pub const fn nanos_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Whole milliseconds from `earlier` to `self`; 0 if `earlier` is later.
    pub const fn millis_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0) / NANOS_PER_MILLI
    }

    /// `ms` milliseconds later, saturating at the end of time.
    pub const fn plus_millis(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms.saturating_mul(NANOS_PER_MILLI)))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;

    /// `d` later, saturating at the end of time.
    fn add(self, d: Duration) -> Timestamp {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(ns))
    }
}

impl fmt::Display for Timestamp {
    /// Seconds since the clock's origin, to the millisecond.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}s", self.as_secs_f64())
    }
}

impl Sub for Timestamp {
    type Output = Duration;

    /// The time from `earlier` to `self`, as [`Timestamp::since`]: zero if `earlier` is later.
    fn sub(self, earlier: Timestamp) -> Duration {
        self.since(earlier)
    }
}

impl AddAssign<Duration> for Timestamp {
    /// `d` later, saturating at the end of time.
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_and_nanoseconds_are_one_clock() {
        let t = Timestamp::from_millis(1_500);
        assert_eq!(t.as_nanos(), 1_500_000_000);
        assert_eq!(t.as_millis(), 1_500);
        assert_eq!(Timestamp::from_nanos(1_999_999).as_millis(), 1);
        assert_eq!(t.plus_millis(20), t + Duration::from_millis(20));
    }

    #[test]
    fn spans_never_go_negative_and_sums_saturate() {
        let (a, b) = (
            Timestamp::from_millis(10),
            Timestamp::from_nanos(10_500_000),
        );
        assert_eq!(b.since(a), Duration::from_micros(500));
        assert_eq!(a.since(b), Duration::ZERO);
        assert_eq!(b.millis_since(a), 0);
        assert_eq!(Timestamp::from_millis(12).millis_since(a), 2);
        assert_eq!(
            Timestamp::from_nanos(u64::MAX - 1) + Duration::from_secs(1),
            Timestamp::from_nanos(u64::MAX)
        );
        assert_eq!(Timestamp::from_millis(u64::MAX).as_nanos(), u64::MAX);
        assert_eq!(Timestamp::MAX + Duration::from_secs(1), Timestamp::MAX);
        assert_eq!(Timestamp::from_secs(3) - a, Duration::from_millis(2_990));
        assert_eq!(a - Timestamp::from_secs(3), Duration::ZERO);
    }
}
