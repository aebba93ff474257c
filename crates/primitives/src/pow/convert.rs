//! How the units turn into each other, in one place: difficulty and target, target and work,
//! work and hash rate. (Each unit's own file knows only its own representation, so the units
//! do not depend on one another.)

use std::ops::{Div, Not, Shl, Shr};
use std::time::Duration;

use super::difficulty::Difficulty;
use super::target::Target;
use super::u256::U256;
use super::work::{HashRate, Work};

impl Difficulty {
    /// The target of this difficulty: `floor(DIFFICULTY_1 / d)`, computed exactly from the f64's
    /// binary value, so the same difficulty always gives the same target on every platform.
    pub fn to_target(self) -> Target {
        let d = self.0;
        if d.is_infinite() {
            return Target::ZERO;
        }
        // d = m * 2^e with m a 53-bit integer.
        let bits = d.to_bits();
        let raw_exp = ((bits >> 52) & 0x7ff) as i32;
        let frac = bits & ((1u64 << 52) - 1);
        let (mut m, mut e) = if raw_exp == 0 {
            (frac, -1074)
        } else {
            (frac | 1 << 52, raw_exp - 1075)
        };
        let tz = m.trailing_zeros();
        m >>= tz;
        e += tz as i32;
        // DIFFICULTY_1 = 0xffff * 2^208, so the target is floor(0xffff * 2^(208 - e) / m).
        let k = 208 - e;
        if k < 0 {
            // floor(floor(a / 2^j) / m) == floor(a / (2^j * m)) for positive integers.
            return Target::from_u256(U256::from_u64(0xffff).shr((-k) as u32).div_u64(m));
        }
        // The numerator 0xffff * 2^k may exceed 256 bits even though the quotient does not (it is
        // at most DIFFICULTY_1 * 2^32), so divide bit by bit with a remainder below m.
        let mut q = U256::ZERO;
        let mut rem: u128 = 0;
        for i in (0..16 + k as u32).rev() {
            let bit = if i >= k as u32 {
                (0xffffu64 >> (i - k as u32)) & 1
            } else {
                0
            };
            rem = rem << 1 | bit as u128;
            if q.bits() == 256 {
                // Below D1 / MAX (just under 2^-32) the quotient no longer fits: every hash meets it.
                return Target::MAX;
            }
            q = q.shl(1);
            if rem >= m as u128 {
                rem -= m as u128;
                q.0[0] |= 1;
            }
        }
        Target::from_u256(q)
    }

    /// The difficulty of a target (`DIFFICULTY_1 / target`), infinite for the zero target.
    pub fn from_target(t: Target) -> Self {
        Difficulty(Target::DIFFICULTY_1.as_u256().to_f64() / t.as_u256().to_f64())
    }
}

impl Target {
    /// Expected number of hashes to find one that meets this target.
    pub fn to_work(self) -> Work {
        Work::from_target(self)
    }
}

impl Work {
    /// The expected hashes for `t`: `2^256 / (t + 1)`, saturating at `U256::MAX` for the zero
    /// target.
    pub fn from_target(t: Target) -> Self {
        let t = t.as_u256();
        if t == U256::MAX {
            return Work(U256::ONE);
        }
        // 2^256 does not fit, but 2^256 / (t+1) == (2^256 - t - 1) / (t+1) + 1 == !t / (t+1) + 1.
        let t1 = t.checked_add(U256::ONE).expect("t < MAX");
        // Saturates only for the zero target, whose true work 2^256 does not fit.
        Work(t.not().div(t1).saturating_add(U256::ONE))
    }

    /// The expected hashes for a share at difficulty `d` (through its target).
    pub fn from_difficulty(d: Difficulty) -> Self {
        Self::from_target(d.to_target())
    }

    /// The work in difficulty-1 units (about `hashes / 2^32`), the unit pools sum shares in.
    pub fn in_difficulty_units(self) -> f64 {
        self.to_f64() / Work::from_target(Target::DIFFICULTY_1).to_f64()
    }
}

impl HashRate {
    /// Mean time between hashes meeting `target` at this rate (`None` at rate zero).
    pub fn mean_interval(self, target: Target) -> Option<Duration> {
        (self.0 > 0.0).then(|| Duration::from_secs_f64(target.to_work().to_f64() / self.0))
    }

    /// The difficulty at which this rate finds one share per `interval` on average.
    pub fn difficulty_for_interval(self, interval: Duration) -> Difficulty {
        let per_diff1 = Work::from_target(Target::DIFFICULTY_1).to_f64();
        Difficulty::saturating(self.0 * interval.as_secs_f64() / per_diff1)
    }
}
