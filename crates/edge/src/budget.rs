//! A connection's message budget: a token bucket of `--message-rate` per second holding at most
//! `--message-burst`, owned by the connection's task (no lock, no table).

use primitives::Timestamp;

use crate::limit::Rate;

/// Eight bytes: every connection's task holds one.
#[derive(Clone, Copy, Debug)]
pub struct MessageBudget {
    tokens: f32,
    /// The low 32 bits of the last refill's time: a gap of 49 days refills at most the burst
    /// either way, and a wrap is read as the short gap it is.
    last: u32,
}

impl MessageBudget {
    /// A full bucket at `now`.
    pub fn new(rate: Rate, now: Timestamp) -> Self {
        MessageBudget {
            tokens: rate.burst as f32,
            last: now.as_millis() as u32,
        }
    }

    /// Takes one message's token at `now`; `false` when the connection is over its rate.
    pub fn take(&mut self, rate: Rate, now: Timestamp) -> bool {
        let per_ms = (rate.per_second / 1000.0) as f32;
        let now = now.as_millis() as u32;
        // A clock read out of order (older than the last) is no time at all.
        let elapsed = now.wrapping_sub(self.last);
        let elapsed = if elapsed > u32::MAX / 2 { 0 } else { elapsed };
        self.tokens = (self.tokens + elapsed as f32 * per_ms).min(rate.burst as f32);
        if elapsed > 0 {
            self.last = now;
        }
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_wrapping_past_32_bits_is_a_short_gap() {
        let rate = Rate {
            per_second: 1000.0,
            burst: 10.0,
        };
        let t = Timestamp::from_millis(u64::from(u32::MAX) - 5);
        let mut b = MessageBudget::new(rate, t);
        assert_eq!((0..20).filter(|_| b.take(rate, t)).count(), 10);
        // 10 ms later, across the wrap: ten more.
        assert_eq!(
            (0..20).filter(|_| b.take(rate, t.plus_millis(10))).count(),
            10
        );
        // An earlier time than the last refills nothing.
        assert!(!b.take(rate, t));
        assert_eq!(std::mem::size_of::<MessageBudget>(), 8);
    }

    #[test]
    fn burst_then_rate() {
        let rate = Rate {
            per_second: 100.0,
            burst: 10.0,
        };
        let mut b = MessageBudget::new(rate, Timestamp::from_millis(0));
        assert_eq!(
            (0..20)
                .filter(|_| b.take(rate, Timestamp::from_millis(0)))
                .count(),
            10
        );
        // 100 per second: one every 10 ms; a second later, 100 more (capped at the burst).
        let sent = (1..=1_000u64)
            .filter(|ms| b.take(rate, Timestamp::from_millis(*ms)))
            .count();
        assert_eq!(sent, 100);
        assert_eq!(
            (0..50)
                .filter(|_| b.take(rate, Timestamp::from_millis(10_000)))
                .count(),
            10
        );
    }
}
