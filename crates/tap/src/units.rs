//! The units a link is described in: a bandwidth in bits per second and a loss rate in percent.

use std::fmt;
use std::str::FromStr;

/// A link's capacity in bits per second, written as `tc` writes rates: `10Mbit`, `1.5Gbit`,
/// `64kbit` (decimal prefixes), or a plain number of bits per second. `0` means unlimited.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Bandwidth(u64);

impl Bandwidth {
    /// No cap (zero bits per second).
    pub const UNLIMITED: Bandwidth = Bandwidth(0);

    /// A capacity of `bps` bits per second; zero means unlimited.
    pub const fn from_bits_per_sec(bps: u64) -> Self {
        Bandwidth(bps)
    }

    /// Zero for an unlimited link.
    pub const fn bits_per_sec(self) -> u64 {
        self.0
    }

    /// Whether the link has no cap.
    pub const fn is_unlimited(self) -> bool {
        self.0 == 0
    }

    /// Nanoseconds the link needs to carry `bytes` (rounded up); zero when unlimited.
    pub fn transmit_ns(self, bytes: u64) -> u64 {
        if self.0 == 0 {
            return 0;
        }
        let bits = bytes as u128 * 8;
        let ns = (bits * 1_000_000_000).div_ceil(self.0 as u128);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// A bandwidth that does not parse; holds the text given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "bandwidth {0:?}: expected bits per second such as 10Mbit, 1.5Gbit, 64kbit or 0 (unlimited)"
)]
pub struct BandwidthError(String);

impl FromStr for Bandwidth {
    type Err = BandwidthError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BandwidthError(s.to_owned());
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num.parse().map_err(|_| bad())?;
        let unit = unit.trim().to_ascii_lowercase();
        let unit = unit.strip_suffix("/s").unwrap_or(&unit);
        let prefix = unit
            .strip_suffix("bit")
            .or_else(|| unit.strip_suffix("bps"))
            .unwrap_or(unit);
        let scale = match prefix {
            "" => 1.0,
            "k" => 1e3,
            "m" => 1e6,
            "g" => 1e9,
            "t" => 1e12,
            _ => return Err(bad()),
        };
        let bps = value * scale;
        if !bps.is_finite() || bps < 0.0 || bps > u64::MAX as f64 {
            return Err(bad());
        }
        let bps = bps.round() as u64;
        if bps == 0 && value != 0.0 {
            // A rate below one bit per second is a typo, not "unlimited".
            return Err(bad());
        }
        Ok(Bandwidth(bps))
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b == 0 {
            return f.write_str("unlimited");
        }
        for (scale, unit) in [
            (1_000_000_000_000, "Tbit"),
            (1_000_000_000, "Gbit"),
            (1_000_000, "Mbit"),
            (1_000, "kbit"),
        ] {
            if b >= scale {
                return if b.checked_rem(scale) == Some(0) {
                    write!(f, "{}{unit}", b / scale)
                } else {
                    write!(f, "{}{unit}", b as f64 / scale as f64)
                };
            }
        }
        write!(f, "{b}bit")
    }
}

impl serde::Serialize for Bandwidth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 == 0 {
            return s.serialize_u64(0);
        }
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Bandwidth {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match NumOrText::deserialize(d)? {
            NumOrText::Num(v) => format!("{v}").parse(),
            NumOrText::Text(t) => t.parse(),
        }
        .map_err(serde::de::Error::custom)
    }
}

/// The probability that a TCP segment is lost on the link, given in percent (`1`, `0.5%`).
#[derive(Clone, Copy, PartialEq, PartialOrd, Debug, Default)]
pub struct LossRate(f64);

impl LossRate {
    /// No loss.
    pub const NONE: LossRate = LossRate(0.0);

    /// `pct` in 0..=100.
    pub fn from_percent(pct: f64) -> Result<Self, LossRateError> {
        if pct.is_finite() && (0.0..=100.0).contains(&pct) {
            Ok(LossRate(pct / 100.0))
        } else {
            Err(LossRateError(pct.to_string()))
        }
    }

    /// As a probability in 0..=1.
    pub const fn probability(self) -> f64 {
        self.0
    }

    /// As a percentage in 0..=100.
    pub fn percent(self) -> f64 {
        self.0 * 100.0
    }

    /// Whether no segment is ever lost.
    pub fn is_zero(self) -> bool {
        self.0 == 0.0
    }
}

/// A loss rate that is not a number from 0 to 100; holds the text given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("loss {0:?}: expected a percentage from 0 to 100, such as 1 or 0.5%")]
pub struct LossRateError(String);

impl FromStr for LossRate {
    type Err = LossRateError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let num = t.strip_suffix('%').unwrap_or(t).trim();
        let pct: f64 = num.parse().map_err(|_| LossRateError(s.to_owned()))?;
        LossRate::from_percent(pct).map_err(|_| LossRateError(s.to_owned()))
    }
}

impl fmt::Display for LossRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", self.percent())
    }
}

impl serde::Serialize for LossRate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.percent())
    }
}

impl<'de> serde::Deserialize<'de> for LossRate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match NumOrText::deserialize(d)? {
            NumOrText::Num(v) => LossRate::from_percent(v),
            NumOrText::Text(t) => t.parse(),
        }
        .map_err(serde::de::Error::custom)
    }
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum NumOrText {
    Num(f64),
    Text(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidths_parse_as_tc_writes_them() {
        let bps = |s: &str| s.parse::<Bandwidth>().unwrap().bits_per_sec();
        assert_eq!(bps("10Mbit"), 10_000_000);
        assert_eq!(bps("10mbit"), 10_000_000);
        assert_eq!(bps("1.5Gbit"), 1_500_000_000);
        assert_eq!(bps("64kbit"), 64_000);
        assert_eq!(bps("100Mbps"), 100_000_000);
        assert_eq!(bps("2M"), 2_000_000);
        assert_eq!(bps("8000"), 8000);
        assert_eq!(bps("1e6"), 1_000_000);
        assert_eq!(bps(" 5 Mbit/s "), 5_000_000);
        assert_eq!(bps("0"), 0);
        assert!("0".parse::<Bandwidth>().unwrap().is_unlimited());
        for bad in ["", "fast", "10MB", "-1Mbit", "10Xbit", "0.1", "Mbit"] {
            assert!(bad.parse::<Bandwidth>().is_err(), "{bad}");
        }
    }

    #[test]
    fn bandwidths_display_round_trip() {
        for s in [
            "10Mbit",
            "1.5Gbit",
            "64kbit",
            "8kbit",
            "999bit",
            "unlimited",
        ] {
            let b: Bandwidth = if s == "unlimited" {
                Bandwidth::UNLIMITED
            } else {
                s.parse().unwrap()
            };
            assert_eq!(b.to_string(), s);
            if s != "unlimited" {
                assert_eq!(b.to_string().parse::<Bandwidth>().unwrap(), b);
            }
        }
    }

    #[test]
    fn transmit_time_is_bits_over_rate_rounded_up() {
        let b = Bandwidth::from_bits_per_sec(8_000_000); // one byte per microsecond
        assert_eq!(b.transmit_ns(1000), 1_000_000);
        assert_eq!(b.transmit_ns(0), 0);
        let b = Bandwidth::from_bits_per_sec(3);
        assert_eq!(b.transmit_ns(1), 2_666_666_667);
        assert_eq!(Bandwidth::UNLIMITED.transmit_ns(1 << 30), 0);
    }

    #[test]
    fn loss_is_given_in_percent() {
        assert_eq!("1".parse::<LossRate>().unwrap().probability(), 0.01);
        assert_eq!("0.5%".parse::<LossRate>().unwrap().probability(), 0.005);
        assert_eq!("100".parse::<LossRate>().unwrap().probability(), 1.0);
        assert!("0".parse::<LossRate>().unwrap().is_zero());
        for bad in ["101", "-1", "x", "nan", ""] {
            assert!(bad.parse::<LossRate>().is_err(), "{bad}");
        }
        assert_eq!("2.5".parse::<LossRate>().unwrap().to_string(), "2.5%");
    }

    #[test]
    fn config_files_may_write_numbers_or_text() {
        #[derive(serde::Deserialize)]
        struct C {
            bandwidth: Bandwidth,
            loss: LossRate,
        }
        let c: C = serde_json::from_str(r#"{"bandwidth":"10Mbit","loss":1.5}"#).unwrap();
        assert_eq!(c.bandwidth.bits_per_sec(), 10_000_000);
        assert_eq!(c.loss.percent(), 1.5);
        let c: C = serde_json::from_str(r#"{"bandwidth":64000,"loss":"2%"}"#).unwrap();
        assert_eq!(c.bandwidth.bits_per_sec(), 64_000);
        assert_eq!(c.loss.probability(), 0.02);
    }
}
