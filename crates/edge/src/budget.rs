//! A connection's message budget: a token bucket of `--message-rate` per second holding at most
//! `--message-burst`, owned by the connection's task (no lock, no table).

use primitives::Millis;

use crate::limit::Rate;

#[derive(Clone, Copy, Debug)]
pub struct MessageBudget {
    tokens: f32,
    last: Millis,
}

impl MessageBudget {
    /// A full bucket at `now`.
    pub fn new(rate: Rate, now: Millis) -> Self {
        MessageBudget {
            tokens: rate.burst as f32,
            last: now,
        }
    }

    /// Takes one message's token at `now`; `false` when the connection is over its rate.
    pub fn take(&mut self, rate: Rate, now: Millis) -> bool {
        let per_ms = (rate.per_second / 1000.0) as f32;
        self.tokens = (self.tokens + now.since(self.last) as f32 * per_ms).min(rate.burst as f32);
        self.last = self.last.max(now);
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
    fn burst_then_rate() {
        let rate = Rate {
            per_second: 100.0,
            burst: 10.0,
        };
        let mut b = MessageBudget::new(rate, Millis(0));
        assert_eq!((0..20).filter(|_| b.take(rate, Millis(0))).count(), 10);
        // 100 per second: one every 10 ms; a second later, 100 more (capped at the burst).
        let sent = (1..=1_000u64)
            .filter(|ms| b.take(rate, Millis(*ms)))
            .count();
        assert_eq!(sent, 100);
        assert_eq!((0..50).filter(|_| b.take(rate, Millis(10_000))).count(), 10);
    }
}
