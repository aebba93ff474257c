//! Each device's hash rate over a run: its share of the fleet's budget, changed by steps.
//!
//! A step (`AT=FACTOR`) multiplies every device's rate by `FACTOR` from `AT` after the fleet
//! starts, as when a farm's machines are underclocked, a rack goes down, or firmware
//! autotuning settles. The pools' vardiff and hash-rate estimates must follow it; the lab
//! scores how fast and how well (docs/metrics.md, "Estimation").

use std::str::FromStr;
use std::time::Duration;

use crate::device::Timestamp;

/// The name of the `Mark` the fleet emits at the moment a step takes effect.
pub const STEP_MARK: &str = "hash_rate_step";

/// From `at` after the fleet starts, every device hashes at `factor` times its budget share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HashRateStep {
    at: Duration,
    factor: f64,
}

/// Why a step cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StepError {
    /// Not of the form `AT=FACTOR`.
    #[error("hash-rate step {0:?}: expected AT=FACTOR, e.g. 60s=2 (double from a minute in)")]
    Form(String),
    /// `AT` is not a duration.
    #[error("hash-rate step {0:?}: AT must be a duration with a unit, e.g. 60s or 1m30s")]
    At(String),
    /// `FACTOR` is not a positive finite number.
    #[error("hash-rate step {0:?}: FACTOR must be a number above 0 and at most 1000")]
    Factor(String),
}

impl HashRateStep {
    /// A step at `at` by `factor` (above 0, at most 1000).
    pub fn new(at: Duration, factor: f64) -> Result<Self, StepError> {
        if !(factor > 0.0 && factor <= 1000.0) {
            return Err(StepError::Factor(format!("{}={factor}", at.as_secs_f64())));
        }
        Ok(HashRateStep { at, factor })
    }

    /// When the step takes effect, after the fleet starts.
    pub fn at(&self) -> Duration {
        self.at
    }

    /// What the budget share is multiplied by from then on.
    pub fn factor(&self) -> f64 {
        self.factor
    }
}

impl FromStr for HashRateStep {
    type Err = StepError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (at, factor) = s
            .trim()
            .split_once('=')
            .ok_or_else(|| StepError::Form(s.to_owned()))?;
        let at = humantime::parse_duration(at.trim()).map_err(|_| StepError::At(s.to_owned()))?;
        let factor: f64 = factor
            .trim()
            .parse()
            .map_err(|_| StepError::Factor(s.to_owned()))?;
        HashRateStep::new(at, factor).map_err(|_| StepError::Factor(s.to_owned()))
    }
}

impl std::fmt::Display for HashRateStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", humantime::format_duration(self.at), self.factor)
    }
}

// Written as configs and results write it: the flag's own `AT=FACTOR`.
impl serde::Serialize for HashRateStep {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for HashRateStep {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A device's hash rate at any moment of the run: the base rate times the factor of the last
/// step taken.
#[derive(Clone, Debug)]
pub(crate) struct RateSchedule {
    base: f64,
    /// (moment, factor), in time order.
    steps: Vec<(Timestamp, f64)>,
}

impl RateSchedule {
    pub(crate) fn new(base: f64, start: Timestamp, steps: &[HashRateStep]) -> Self {
        let mut steps: Vec<(Timestamp, f64)> =
            steps.iter().map(|s| (start + s.at, s.factor)).collect();
        steps.sort_by_key(|s| s.0);
        RateSchedule { base, steps }
    }

    /// Hashes per second at `now`.
    pub(crate) fn at(&self, now: Timestamp) -> f64 {
        let factor = self
            .steps
            .iter()
            .take_while(|(t, _)| *t <= now)
            .last()
            .map_or(1.0, |s| s.1);
        self.base * factor
    }

    /// The highest rate the schedule reaches (what a device's credit must be able to hold).
    pub(crate) fn peak(&self) -> f64 {
        self.steps
            .iter()
            .map(|s| s.1)
            .fold(1.0f64, f64::max)
            .max(1.0)
            * self.base
    }

    /// The base rate (the budget share).
    pub(crate) fn base(&self) -> f64 {
        self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_parse_and_refuse_what_is_not_a_step() {
        let s: HashRateStep = "60s=2".parse().unwrap();
        assert_eq!((s.at(), s.factor()), (Duration::from_secs(60), 2.0));
        assert_eq!(s.to_string(), "1m=2");
        let s: HashRateStep = " 1m30s = 0.5 ".parse().unwrap();
        assert_eq!((s.at(), s.factor()), (Duration::from_secs(90), 0.5));
        assert!(matches!(
            "60s".parse::<HashRateStep>(),
            Err(StepError::Form(_))
        ));
        assert!(matches!(
            "soon=2".parse::<HashRateStep>(),
            Err(StepError::At(_))
        ));
        for bad in ["60s=0", "60s=-1", "60s=x", "60s=inf", "60s=NaN", "60s=1001"] {
            assert!(
                matches!(bad.parse::<HashRateStep>(), Err(StepError::Factor(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_rate_follows_the_last_step_taken() {
        let t0 = Timestamp::from_nanos(1_000_000_000);
        let steps = ["30s=2".parse().unwrap(), "10s=0.5".parse().unwrap()];
        let r = RateSchedule::new(100.0, t0, &steps);
        assert_eq!(r.at(t0), 100.0);
        assert_eq!(r.at(t0 + Duration::from_secs(10)), 50.0);
        assert_eq!(r.at(t0 + Duration::from_secs(29)), 50.0);
        assert_eq!(r.at(t0 + Duration::from_secs(31)), 200.0);
        assert_eq!(r.peak(), 200.0);
        assert_eq!(RateSchedule::new(100.0, t0, &steps[1..]).peak(), 100.0);
    }
}
