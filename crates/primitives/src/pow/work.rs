//! Work (expected hashes) and hash rate.

use std::fmt;
use std::ops::Add;
use std::str::FromStr;
use std::time::Duration;

use super::u256::U256;

/// The expected number of hashes to find a hash meeting a target, `2^256 / (target + 1)`, as
/// Bitcoin Core computes chain work.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Work(pub(super) U256);

impl Work {
    /// No work: the start of a sum.
    pub const ZERO: Work = Work(U256::ZERO);

    /// The expected hashes as an exact integer.
    pub const fn as_u256(&self) -> U256 {
        self.0
    }

    /// The expected hashes, rounded to the nearest f64.
    pub fn to_f64(self) -> f64 {
        self.0.to_f64()
    }
}

impl Add for Work {
    type Output = Work;
    fn add(self, o: Work) -> Work {
        Work(self.0.saturating_add(o.0))
    }
}

/// Hashes per second.
#[derive(
    Clone, Copy, PartialEq, PartialOrd, Default, Debug, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct HashRate(pub(super) f64);

const UNITS: [(&str, f64); 7] = [
    ("EH/s", 1e18),
    ("PH/s", 1e15),
    ("TH/s", 1e12),
    ("GH/s", 1e9),
    ("MH/s", 1e6),
    ("kH/s", 1e3),
    ("H/s", 1.0),
];

impl HashRate {
    /// No hashing.
    pub const ZERO: HashRate = HashRate(0.0);

    /// From hashes per second; negative values become zero.
    pub fn from_hashes_per_sec(h: f64) -> Self {
        HashRate(h.max(0.0))
    }

    /// The rate in hashes per second.
    pub const fn hashes_per_sec(self) -> f64 {
        self.0
    }

    /// The rate that performs `work` in `elapsed`.
    pub fn from_work(work: Work, elapsed: Duration) -> Self {
        let s = elapsed.as_secs_f64();
        if s == 0.0 {
            return HashRate::ZERO;
        }
        HashRate(work.to_f64() / s)
    }
}

impl fmt::Display for HashRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, scale) = UNITS
            .iter()
            .find(|(_, s)| self.0 >= *s)
            .unwrap_or(&UNITS[UNITS.len() - 1]);
        write!(f, "{:.3} {name}", self.0 / scale)
    }
}

/// Accepts `1.2TH/s`, `500 GH/s`, `750kH/s`, `1e9` (plain hashes per second).
impl FromStr for HashRate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let split = t
            .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
            .unwrap_or(t.len());
        let (num, unit) = (t[..split].trim(), t[split..].trim());
        let v: f64 = num
            .parse()
            .map_err(|_| format!("hash rate {s:?}: bad number"))?;
        let scale = if unit.is_empty() {
            1.0
        } else {
            UNITS
                .iter()
                .find(|(n, _)| {
                    n.eq_ignore_ascii_case(unit) || n[..n.len() - 2].eq_ignore_ascii_case(unit)
                })
                .map(|(_, s)| *s)
                .ok_or_else(|| format!("hash rate {s:?}: unknown unit {unit:?}"))?
        };
        if !v.is_finite() || v < 0.0 {
            return Err(format!(
                "hash rate {s:?} must be a finite non-negative number"
            ));
        }
        Ok(HashRate(v * scale))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pow::{Difficulty, Target, U256};

    #[test]
    fn work_of_difficulty_1() {
        // 2^256 / (0xffff * 2^208 + 1) = 4295032833 (Core's work for the genesis block's bits).
        assert_eq!(
            Work::from_target(Target::DIFFICULTY_1).as_u256(),
            U256::from_u64(4_295_032_833)
        );
        assert_eq!(Work::from_target(Target::MAX).as_u256(), U256::ONE);
        assert_eq!(Work::from_target(Target::ZERO).as_u256(), U256::MAX);
        let regtest = Work::from_target(Target::REGTEST_LIMIT);
        assert_eq!(regtest.as_u256(), U256::from_u64(2)); // Core's regtest block proof
    }

    #[test]
    fn work_adds_and_scales_with_difficulty() {
        let w1 = Work::from_difficulty(Difficulty::ONE);
        let w2 = Work::from_difficulty(Difficulty::new(2.0).unwrap());
        assert!((w2.to_f64() / w1.to_f64() - 2.0).abs() < 1e-9);
        assert!(((w1 + w1).in_difficulty_units() - 2.0).abs() < 1e-12);
        assert_eq!(Work(U256::MAX) + w1, Work(U256::MAX));
    }

    #[test]
    fn hash_rate_parsing_and_display() {
        assert_eq!(
            "1.5TH/s".parse::<HashRate>().unwrap().hashes_per_sec(),
            1.5e12
        );
        assert_eq!(
            "500 GH/s".parse::<HashRate>().unwrap().hashes_per_sec(),
            5e11
        );
        assert_eq!("750kh".parse::<HashRate>().unwrap().hashes_per_sec(), 7.5e5);
        assert_eq!("1e9".parse::<HashRate>().unwrap().hashes_per_sec(), 1e9);
        assert!("1 XH/s".parse::<HashRate>().is_err());
        assert!("-1".parse::<HashRate>().is_err());
        assert_eq!(
            HashRate::from_hashes_per_sec(1.2e12).to_string(),
            "1.200 TH/s"
        );
        assert_eq!(HashRate::ZERO.to_string(), "0.000 H/s");
    }

    #[test]
    fn share_interval_and_difficulty_agree() {
        let rate = HashRate::from_hashes_per_sec(1e12);
        let d = rate.difficulty_for_interval(Duration::from_secs(4));
        let back = rate.mean_interval(d.to_target()).unwrap();
        assert!((back.as_secs_f64() - 4.0).abs() < 1e-6, "{back:?}");
        assert!(HashRate::ZERO.mean_interval(Target::MAX).is_none());
        let hr = HashRate::from_work(
            Work::from_difficulty(Difficulty::ONE),
            Duration::from_secs(1),
        );
        assert_eq!(hr.hashes_per_sec(), 4_295_032_833.0);
    }
}
