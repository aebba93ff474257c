//! Pool difficulty: how many times harder than the difficulty-1 target a share target is.

use std::fmt;
use std::str::FromStr;

/// A share or network difficulty, relative to [`Target::DIFFICULTY_1`].
///
/// Fractional values are normal: the lab runs at scaled-down targets and small devices need
/// difficulties below 1. The smallest is 2^-32, the last whose target still fits 256 bits.
#[derive(Clone, Copy, PartialEq, PartialOrd, Debug, serde::Serialize)]
#[serde(transparent)]
pub struct Difficulty(pub(super) f64);

#[derive(Clone, Copy, PartialEq, Debug, thiserror::Error)]
/// Why a number is not a usable [`Difficulty`].
pub enum DifficultyError {
    /// Zero, negative, infinite or NaN.
    #[error("difficulty {0} is not a finite positive number")]
    NotPositive(f64),
    /// Below [`Difficulty::MIN`].
    #[error("difficulty {0} is below the minimum 2^-32 (its target would not fit 256 bits)")]
    BelowMinimum(f64),
}

impl Difficulty {
    /// 2^-32: `DIFFICULTY_1 * 2^32` is the largest multiple of the difficulty-1 target by a power
    /// of two that fits 256 bits.
    pub const MIN: Difficulty = Difficulty(1.0 / 4_294_967_296.0);
    /// Difficulty 1: the [`Target::DIFFICULTY_1`](crate::Target::DIFFICULTY_1) target itself.
    pub const ONE: Difficulty = Difficulty(1.0);

    /// Checks `d` is finite and at least [`Difficulty::MIN`].
    pub fn new(d: f64) -> Result<Self, DifficultyError> {
        if !d.is_finite() || d <= 0.0 {
            return Err(DifficultyError::NotPositive(d));
        }
        if d < Self::MIN.0 {
            return Err(DifficultyError::BelowMinimum(d));
        }
        Ok(Difficulty(d))
    }

    /// Clamps into the valid range instead of failing (for computed values such as vardiff's).
    pub fn saturating(d: f64) -> Self {
        if d.is_nan() || d < Self::MIN.0 {
            Self::MIN
        } else {
            Difficulty(d)
        }
    }

    /// The difficulty as a number.
    pub const fn as_f64(self) -> f64 {
        self.0
    }
}

impl fmt::Display for Difficulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for Difficulty {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let d: f64 = s
            .trim()
            .parse()
            .map_err(|e| format!("difficulty {s:?}: {e}"))?;
        Difficulty::new(d).map_err(|e| e.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for Difficulty {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        Difficulty::new(v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pow::{Target, U256};
    use std::ops::{Shl, Shr};

    #[test]
    fn one_is_the_difficulty_1_target() {
        assert_eq!(Difficulty::ONE.to_target(), Target::DIFFICULTY_1);
        assert_eq!(
            Difficulty::from_target(Target::DIFFICULTY_1),
            Difficulty::ONE
        );
    }

    #[test]
    fn powers_of_two_are_exact_shifts() {
        let d1 = Target::DIFFICULTY_1.as_u256();
        for s in 0..32u32 {
            let up = Difficulty::new(2f64.powi(s as i32)).unwrap();
            assert_eq!(up.to_target().as_u256(), d1.shr(s), "2^{s}");
            let down = Difficulty::new(2f64.powi(-(s as i32))).unwrap();
            assert_eq!(down.to_target().as_u256(), d1.shl(s), "2^-{s}");
        }
    }

    #[test]
    fn minimum_difficulty_target_fits_exactly() {
        let t = Difficulty::MIN.to_target();
        assert_eq!(t.as_u256(), Target::DIFFICULTY_1.as_u256().shl(32));
        assert_eq!(
            t.to_string(),
            "ffff000000000000000000000000000000000000000000000000000000000000"
        );
        assert_eq!(Difficulty::from_target(t), Difficulty::MIN);
        assert!(matches!(
            Difficulty::new(2f64.powi(-33)),
            Err(DifficultyError::BelowMinimum(_))
        ));
    }

    #[test]
    fn invalid_values_are_refused() {
        for d in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(Difficulty::new(d).is_err(), "{d}");
        }
        assert!("abc".parse::<Difficulty>().is_err());
        assert!("0".parse::<Difficulty>().is_err());
        assert_eq!("0.001".parse::<Difficulty>().unwrap().as_f64(), 0.001);
        assert_eq!(Difficulty::saturating(f64::NAN), Difficulty::MIN);
        assert_eq!(Difficulty::saturating(0.0), Difficulty::MIN);
    }

    #[test]
    fn non_power_of_two_is_floor_of_exact_quotient() {
        // Check floor(D1 / d) by its defining inequalities: t * d <= D1 < (t + 1) * d, in integers,
        // for d = 3 (integer) and d = 1.5 = 3 / 2.
        let floor_of_thirds = |t: U256, n: U256| {
            assert!(t.checked_mul_u64(3).unwrap() <= n);
            let next = t.checked_add(U256::ONE).unwrap();
            assert!(next.checked_mul_u64(3).unwrap() > n);
        };
        let d1 = Target::DIFFICULTY_1.as_u256();
        floor_of_thirds(Difficulty::new(3.0).unwrap().to_target().as_u256(), d1);
        floor_of_thirds(
            Difficulty::new(1.5).unwrap().to_target().as_u256(),
            d1.shl(1),
        );
    }

    #[test]
    fn round_trip_is_close_over_the_whole_range() {
        for d in [
            Difficulty::MIN.as_f64(),
            1e-9,
            0.000123,
            0.5,
            0.7,
            1.0,
            3.0,
            1024.5,
            65536.0,
            1e6,
            1e12,
            1.2e14,
        ] {
            let back = Difficulty::from_target(Difficulty::new(d).unwrap().to_target()).as_f64();
            assert!(((back - d) / d).abs() < 1e-12, "{d} -> {back}");
        }
    }

    #[test]
    fn easiest_possible_target_saturates() {
        let d = Difficulty::from_target(Target::MAX);
        assert!(d < Difficulty::MIN);
        assert_eq!(d.to_target(), Target::MAX);
    }

    #[test]
    fn huge_difficulty_gives_tiny_target() {
        // Above DIFFICULTY_1 itself the target is zero.
        let t = Difficulty::new(2f64.powi(230)).unwrap().to_target();
        assert!(t.is_zero());
        assert!(Difficulty::from_target(Target::ZERO).as_f64().is_infinite());
    }

    #[test]
    fn mainnet_network_difficulty_from_bits() {
        // Block 100000: nBits 0x1b04864c, difficulty 14484.162361225399 (as Core reports it).
        let t = Target::from_compact(crate::CompactTarget::from_consensus(0x1b04864c)).unwrap();
        let d = Difficulty::from_target(t).as_f64();
        assert!((d - 14484.162361225399).abs() < 1e-9, "{d}");
    }
}
