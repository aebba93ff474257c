//! Packet loss, paid as the delay TCP's recovery would add.
//!
//! TCP never loses bytes: a lost segment arrives late, and everything behind it in the stream
//! waits for it (head-of-line blocking). So a lost chunk is released late rather than dropped,
//! and the stream's ordering ([`crate::stream`]) holds later chunks behind it. Each TCP segment
//! of a chunk ([`MSS`] bytes) is lost independently with the configured probability, and what
//! the loss costs depends on whether data follows it, as it does in Linux:
//!
//! - A segment other than the chunk's last is lost: the later segments reach the receiver,
//!   whose SACKs let the sender's RACK detector mark the hole lost once a reordering window
//!   (a quarter of the RTT) has passed since it was sent one RTT earlier. The retransmission
//!   arrives `RTT × 5/4` after the original would have: [`LossModel::recovery_ns`].
//! - The last segment is lost (a *tail* loss, which is the usual case for Stratum's messages,
//!   each a single segment): nothing behind it reveals the hole, so the sender waits for its
//!   retransmission timer, `RTO = SRTT + max(4·RTTVAR, 200 ms)`, which on a steady path is
//!   `RTT + 200 ms` (Linux's tail loss probe is capped by that same time when one segment is
//!   in flight): [`LossModel::rto_ns`]. If the stream sends more data before then, that data's
//!   SACK reveals the hole as above, one RTT after it arrives: [`LossModel::resolve`].
//! - A retransmission is lost with the same probability; each further loss waits for the
//!   timer again, doubling it each time (exponential backoff), up to [`MAX_BACKOFFS`] times.
//!
//! The RTT in these formulas is the configured one (up plus down delay); jitter's effect on the
//! RTT estimate and the bandwidth retransmissions use are left out.

use rand_chacha::rand_core::RngCore;

/// Payload bytes per TCP segment on a 1500-byte MTU path with TCP timestamps.
pub const MSS: usize = 1448;

/// Linux's floor on the retransmission timeout (TCP_RTO_MIN).
pub const RTO_MIN_NS: u64 = 200_000_000;

/// Further losses of the same segment that are charged; by then the penalty exceeds
/// `2^7 × RTO`, which no measurement here distinguishes from a dead connection.
pub const MAX_BACKOFFS: u32 = 6;

/// The loss of one chunk (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No segment of the chunk was lost.
    Delivered,
    /// A segment before the chunk's last was lost and recovered by the segments after it.
    Recovered {
        /// Nanoseconds added to the chunk's release: one RTT plus RACK's reordering window,
        /// plus the timer's backoff if the retransmission was lost too.
        penalty_ns: u64,
    },
    /// The chunk's last segment was lost. `penalty_ns` assumes nothing follows (the
    /// retransmission timer); `backoff_ns` is what repeated losses of the retransmission add
    /// on top, already included in `penalty_ns`.
    Tail {
        /// Nanoseconds added to the chunk's release if nothing follows it: the RTO plus
        /// `backoff_ns`.
        penalty_ns: u64,
        /// The share of `penalty_ns` due to retransmissions lost again (doubling RTOs); zero if
        /// the first one arrived.
        backoff_ns: u64,
    },
}

impl Outcome {
    /// Nanoseconds the loss adds to the chunk's release; zero when delivered.
    pub fn penalty_ns(&self) -> u64 {
        match *self {
            Outcome::Delivered => 0,
            Outcome::Recovered { penalty_ns } | Outcome::Tail { penalty_ns, .. } => penalty_ns,
        }
    }
}

/// Draws the loss of each chunk for a link of given segment-loss probability and RTT.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossModel {
    p: f64,
    rtt_ns: u64,
}

impl LossModel {
    /// `probability` of losing a segment; `rtt_ns` the link's round trip.
    pub fn new(probability: f64, rtt_ns: u64) -> Self {
        LossModel {
            p: probability.clamp(0.0, 1.0),
            rtt_ns,
        }
    }

    /// The retransmission timeout on a steady path: RTT + 200 ms.
    pub fn rto_ns(&self) -> u64 {
        self.rtt_ns.saturating_add(RTO_MIN_NS)
    }

    /// Delay of a loss that later segments reveal: one RTT plus RACK's reordering window.
    pub fn recovery_ns(&self) -> u64 {
        self.rtt_ns + self.rtt_ns / 4
    }

    /// Decides the fate of a chunk of `segments` segments.
    pub fn draw(&self, segments: usize, rng: &mut impl RngCore) -> Outcome {
        if self.p == 0.0 {
            return Outcome::Delivered;
        }
        let segments = segments.max(1);
        let tail_lost = unit(rng) < self.p;
        // One draw for "any of the other segments": 1 - (1-p)^(n-1).
        let others_lost = segments > 1 && {
            let exponent = i32::try_from(segments - 1).unwrap_or(i32::MAX);
            unit(rng) < 1.0 - (1.0 - self.p).powi(exponent)
        };
        if tail_lost {
            let backoff_ns = self.backoff(1, rng);
            Outcome::Tail {
                penalty_ns: self.rto_ns().saturating_add(backoff_ns),
                backoff_ns,
            }
        } else if others_lost {
            // A lost fast retransmission falls back to the timer, from its first doubling.
            let backoff_ns = self.backoff(0, rng);
            Outcome::Recovered {
                penalty_ns: self.recovery_ns().saturating_add(backoff_ns),
            }
        } else {
            Outcome::Delivered
        }
    }

    /// When a tail-lost chunk is released once a later chunk, which reaches the receiver at
    /// `later_base_ns`, reveals it: not before its SACK is back and RACK's window has passed
    /// (`max(later + RTT, base + RTT·5/4)`), and never after its timer would have resent it.
    /// `base_ns` is when the lost chunk would have arrived had it not been lost.
    pub fn resolve(&self, base_ns: u64, backoff_ns: u64, later_base_ns: u64) -> u64 {
        let by_sack = later_base_ns
            .saturating_add(self.rtt_ns)
            .max(base_ns.saturating_add(self.recovery_ns()));
        let by_timer = base_ns.saturating_add(self.rto_ns());
        by_sack.min(by_timer).saturating_add(backoff_ns)
    }

    /// Extra delay from the retransmission being lost again: the timer doubles per loss.
    /// `first_shift` 1 for a retransmission sent by the timer (the next wait is 2·RTO), 0 for
    /// one sent by fast recovery (the next wait is RTO).
    fn backoff(&self, first_shift: u32, rng: &mut impl RngCore) -> u64 {
        let mut extra = 0u64;
        for k in 0..MAX_BACKOFFS {
            if unit(rng) >= self.p {
                break;
            }
            extra = extra.saturating_add(self.rto_ns() << (first_shift + k));
        }
        extra
    }
}

/// A uniform draw in [0, 1) from 53 random bits.
pub(crate) fn unit(rng: &mut impl RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const MS: u64 = 1_000_000;

    #[test]
    fn lossless_never_draws() {
        let m = LossModel::new(0.0, 145 * MS);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let before = rng.clone().next_u64();
        for _ in 0..100 {
            assert_eq!(m.draw(3, &mut rng), Outcome::Delivered);
        }
        assert_eq!(rng.next_u64(), before, "no randomness consumed");
    }

    #[test]
    fn penalties_follow_linux_timers() {
        let m = LossModel::new(1.0, 145 * MS);
        assert_eq!(m.rto_ns(), 345 * MS);
        assert_eq!(m.recovery_ns(), 145 * MS + 36_250_000);
        let lan = LossModel::new(1.0, 0);
        assert_eq!(lan.rto_ns(), RTO_MIN_NS, "the floor applies on a LAN");
        assert_eq!(lan.recovery_ns(), 0);
    }

    #[test]
    fn certain_loss_of_a_single_segment_is_a_tail_with_full_backoff() {
        let m = LossModel::new(1.0, 100 * MS);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let rto = 300 * MS;
        // Every retransmission is lost too: 2+4+...+64 RTOs of backoff.
        let backoff = (1..=MAX_BACKOFFS).map(|k| rto << k).sum::<u64>();
        assert_eq!(
            m.draw(1, &mut rng),
            Outcome::Tail {
                penalty_ns: rto + backoff,
                backoff_ns: backoff
            }
        );
    }

    #[test]
    fn resolution_by_later_data() {
        let m = LossModel::new(0.5, 100 * MS);
        let base = 1_000 * MS;
        // Later data arriving right behind: the hole is seen after RTT and RACK's window.
        assert_eq!(m.resolve(base, 0, base + MS), base + 125 * MS);
        // Later data 50 ms behind: its SACK comes back one RTT after it arrived.
        assert_eq!(m.resolve(base, 0, base + 50 * MS), base + 150 * MS);
        // Later data after the timer would have fired changes nothing.
        assert_eq!(m.resolve(base, 0, base + 250 * MS), base + 300 * MS);
        // Backoff from a lost retransmission comes on top.
        assert_eq!(m.resolve(base, 7, base + MS), base + 125 * MS + 7);
    }

    /// With a seed, the share of lost single-segment chunks and their mean penalty match the
    /// model's expectation: P(tail) = p, E[penalty | tail] = RTO (1 + 2p + 4p^2 ...).
    #[test]
    fn loss_statistics_with_a_seed() {
        let p = 0.05;
        let m = LossModel::new(p, 100 * MS);
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        let n = 200_000;
        let (mut tails, mut penalty_sum) = (0u64, 0u128);
        for _ in 0..n {
            // A single segment is either delivered or a tail.
            match m.draw(1, &mut rng) {
                Outcome::Tail { penalty_ns, .. } => {
                    tails += 1;
                    penalty_sum += penalty_ns as u128;
                }
                Outcome::Delivered => {}
                other => panic!("{other:?}"),
            }
        }
        let rate = tails as f64 / n as f64;
        // Binomial standard deviation is about 0.00049: allow 5 of them.
        assert!((rate - p).abs() < 0.0025, "{rate}");
        let mean = penalty_sum as f64 / tails as f64;
        let rto = m.rto_ns() as f64;
        let expected: f64 = rto
            * (1.0
                + (1..=MAX_BACKOFFS)
                    .map(|k| (2.0 * p).powi(k as i32))
                    .sum::<f64>());
        assert!((mean / expected - 1.0).abs() < 0.01, "{mean} vs {expected}");

        // The same seed gives the same sequence.
        let mut a = ChaCha8Rng::seed_from_u64(7);
        let mut b = ChaCha8Rng::seed_from_u64(7);
        let xs: Vec<_> = (0..1000).map(|_| m.draw(2, &mut a)).collect();
        let ys: Vec<_> = (0..1000).map(|_| m.draw(2, &mut b)).collect();
        assert_eq!(xs, ys);
    }

    #[test]
    fn multi_segment_chunks_lose_more_often_and_mostly_recover_fast() {
        let p = 0.02;
        let m = LossModel::new(p, 100 * MS);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let n = 100_000;
        let segments = 10;
        let (mut recovered, mut tails) = (0u64, 0u64);
        for _ in 0..n {
            match m.draw(segments, &mut rng) {
                Outcome::Recovered { penalty_ns } => {
                    recovered += 1;
                    assert!(penalty_ns >= m.recovery_ns());
                }
                Outcome::Tail { .. } => tails += 1,
                Outcome::Delivered => {}
            }
        }
        let p_tail = p;
        let p_recovered = (1.0 - p) * (1.0 - (1.0 - p).powi(segments as i32 - 1));
        let r = recovered as f64 / n as f64;
        let t = tails as f64 / n as f64;
        assert!((r - p_recovered).abs() < 0.004, "{r} vs {p_recovered}");
        assert!((t - p_tail).abs() < 0.003, "{t} vs {p_tail}");
    }
}
