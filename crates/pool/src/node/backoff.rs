//! Capped exponential backoff, for everything that retries: a failed `getblocktemplate`, a lost
//! long poll, the ZMQ connection, a block submission.

use std::time::Duration;

/// Waits `initial`, then twice as long after each further failure, never more than `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first wait.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for Backoff {
    /// 100 ms doubling up to 5 s: a node that restarts is found again within seconds, and a
    /// node that is gone costs a request every 5 s.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// A fresh sequence of delays.
    pub fn start(&self) -> Delays {
        Delays {
            policy: *self,
            next: None,
        }
    }
}

/// The delays of one run of failures; [`Delays::reset`] after a success.
#[derive(Clone, Debug)]
pub struct Delays {
    policy: Backoff,
    next: Option<Duration>,
}

/// Never spin, whatever the policy says.
const FLOOR: Duration = Duration::from_millis(1);

impl Delays {
    /// The wait before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        let max = self.policy.max.max(FLOOR);
        let d = self.next.unwrap_or(self.policy.initial).clamp(FLOOR, max);
        self.next = Some((d * 2).min(max));
        d
    }

    pub fn reset(&mut self) {
        self.next = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut d = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(350),
        }
        .start();
        let ms = |d: Duration| d.as_millis();
        assert_eq!(ms(d.next_delay()), 100);
        assert_eq!(ms(d.next_delay()), 200);
        assert_eq!(ms(d.next_delay()), 350);
        assert_eq!(ms(d.next_delay()), 350);
        d.reset();
        assert_eq!(ms(d.next_delay()), 100);
    }

    #[test]
    fn a_zero_policy_still_waits() {
        let mut d = Backoff {
            initial: Duration::ZERO,
            max: Duration::ZERO,
        }
        .start();
        assert!(d.next_delay() >= FLOOR);
        assert!(d.next_delay() >= FLOOR);
    }
}
