//! How long to wait before the next round of upstream attempts: exponential, capped, with
//! jitter so that a farm's proxies (or one proxy's restarts) do not hammer a recovering pool
//! in step.

use std::time::Duration;

/// The wait before each round of upstream attempts: from `min`, doubling each round up to
/// `max`, each wait jittered down to as little as half.
#[derive(Clone, Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    rounds: u32,
    rng: u64,
}

impl Backoff {
    /// `seed` only varies the jitter (any value works; 0 is replaced).
    pub fn new(min: Duration, max: Duration, seed: u64) -> Self {
        Backoff {
            min,
            max: max.max(min),
            rounds: 0,
            rng: seed | 1,
        }
    }

    /// The wait after one more round that found no upstream: `min * 2^rounds`, capped at
    /// `max`, then drawn uniformly from its upper half.
    pub fn next_delay(&mut self) -> Duration {
        let base = self
            .min
            .saturating_mul(1u32 << self.rounds.min(20))
            .min(self.max);
        self.rounds = self.rounds.saturating_add(1);
        // xorshift64: jitter needs no more than this.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let unit = (self.rng >> 11) as f64 / (1u64 << 53) as f64;
        base.mul_f64(0.5 + 0.5 * unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_with_jitter_in_the_upper_half() {
        let min = Duration::from_millis(100);
        let max = Duration::from_secs(3);
        let mut b = Backoff::new(min, max, 42);
        let mut bases = Vec::new();
        for round in 0..10u32 {
            let d = b.next_delay();
            let base = min.saturating_mul(1 << round).min(max);
            assert!(
                d >= base / 2 && d <= base,
                "round {round}: {d:?} vs {base:?}"
            );
            bases.push(base);
        }
        assert_eq!(bases.last(), Some(&max));
    }

    #[test]
    fn different_seeds_spread_the_waits() {
        let min = Duration::from_secs(1);
        let a: Vec<_> = {
            let mut b = Backoff::new(min, min * 8, 1);
            (0..4).map(|_| b.next_delay()).collect()
        };
        let c: Vec<_> = {
            let mut b = Backoff::new(min, min * 8, 2);
            (0..4).map(|_| b.next_delay()).collect()
        };
        assert_ne!(a, c);
    }
}
