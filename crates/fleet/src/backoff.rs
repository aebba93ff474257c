//! Reconnect delays: capped exponential backoff with jitter.
//!
//! After the n-th failure in a row a device waits a delay drawn uniformly from
//! `[cap_n / 2, cap_n]` where `cap_n = min(max, base * 2^n)` ("equal jitter"): the delay
//! still grows with failures, never drops to zero, and a crowd of devices that lost the same
//! pool at the same instant spreads over half the window instead of returning in one burst.

use std::time::Duration;

use crate::device::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// How long a device waits before reconnecting: capped exponential backoff with equal jitter.
pub struct Backoff {
    /// The ceiling of the first delay.
    pub base: Duration,
    /// No delay exceeds this.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The ceiling after `failures` failures in a row.
    pub fn ceiling(&self, failures: u32) -> Duration {
        let factor = 1u32.checked_shl(failures.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// A jittered delay in `[ceiling / 2, ceiling]`.
    pub fn delay(&self, failures: u32, rng: &mut Rng) -> Duration {
        let cap = self.ceiling(failures).as_nanos() as f64;
        Duration::from_nanos((cap * (0.5 + 0.5 * rng.next_f64())) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_then_cap_and_stay_within_their_window() {
        let b = Backoff {
            base: Duration::from_millis(500),
            max: Duration::from_secs(30),
        };
        let mut rng = Rng::new(1);
        let mut seen_low = false;
        let mut seen_high = false;
        for failures in 0..40 {
            let cap = b.ceiling(failures);
            let expect = Duration::from_millis(500)
                .saturating_mul(1u32 << failures.min(20))
                .min(Duration::from_secs(30));
            assert_eq!(cap, expect, "failures {failures}");
            for _ in 0..200 {
                let d = b.delay(failures, &mut rng);
                assert!(
                    d >= cap / 2 && d <= cap,
                    "{d:?} outside [{:?}, {cap:?}]",
                    cap / 2
                );
                seen_low |= d < cap * 6 / 10;
                seen_high |= d > cap * 9 / 10;
            }
        }
        assert!(seen_low && seen_high, "the jitter covers its window");
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(30));
    }
}
