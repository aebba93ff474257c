//! Device profiles: which firmware a simulated device behaves like, in either protocol.
//!
//! Over Stratum V1 a profile is mostly a handshake: the order of `mining.configure`,
//! `mining.subscribe` and `mining.authorize`, and the version-rolling mask asked for. SV2 firmware
//! has none of those quirks (every device does SetupConnection then OpenStandardMiningChannel), so
//! over SV2 the profiles differ in what they tell the pool: the hash rate they claim, how their
//! user identity reads, and whether they roll version bits (and require to).

use serde::{Deserialize, Serialize};

/// How a device's firmware talks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// An S19-class ASIC. SV1: cgminer/bmminer, `mining.configure` (mask `1fffe000`), then
    /// `mining.subscribe`, then `mining.authorize`, each after the previous reply. SV2: claims
    /// an S19 Pro's hash rate and requires version rolling (ASICBoost needs it).
    #[default]
    Asic,
    /// A Bitaxe (ESP-Miner). SV1: `mining.configure` with mask `ffffffff` first, subscribe and
    /// authorize sent at once; `mining.suggest_difficulty` after the authorize result. SV2:
    /// claims a Bitaxe's hash rate, rolls version bits when the pool allows it.
    Bitaxe,
    /// A CPU miner (cpuminer). SV1: subscribe, then authorize; no version rolling. SV2: claims
    /// a CPU's hash rate; never rolls version bits.
    Cpu,
}

/// BIP320's general-purpose version bits (13 to 28): what SV2 devices roll, when allowed.
pub const BIP320_MASK: u32 = 0x1fff_e000;

impl Profile {
    /// The profile's name as configs and `--profile` spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Profile::Asic => "asic",
            Profile::Bitaxe => "bitaxe",
            Profile::Cpu => "cpu",
        }
    }

    /// The version-rolling mask the firmware asks for over SV1 (0: it does not ask).
    pub const fn requested_mask(self) -> u32 {
        match self {
            Profile::Asic => 0x1fff_e000,
            Profile::Bitaxe => 0xffff_ffff,
            Profile::Cpu => 0,
        }
    }

    /// Whether each SV1 handshake request waits for the previous reply.
    pub(crate) const fn sequential(self) -> bool {
        !matches!(self, Profile::Bitaxe)
    }

    /// What the real device hashes, in hashes per second: an S19 Pro (110 TH/s), a Bitaxe
    /// Gamma (1.2 TH/s), one desktop core running cpuminer (10 MH/s). An SV2 device claims it
    /// in `OpenStandardMiningChannel.nominal_hash_rate` unless told to claim what it really
    /// hashes here (see `Sv2Config::nominal_hash_rate`).
    pub const fn nominal_hash_rate(self) -> f64 {
        match self {
            Profile::Asic => 110e12,
            Profile::Bitaxe => 1.2e12,
            Profile::Cpu => 10e6,
        }
    }

    /// Whether the SV2 firmware rolls version bits when the pool does not fix the version.
    pub const fn sv2_rolls_version(self) -> bool {
        !matches!(self, Profile::Cpu)
    }

    /// Whether the SV2 firmware sets `REQUIRES_VERSION_ROLLING`: an ASIC's ASICBoost is built
    /// on it, a Bitaxe merely uses it.
    pub const fn sv2_requires_version_rolling(self) -> bool {
        matches!(self, Profile::Asic)
    }

    /// The user identity an SV2 device of this profile opens its channel with when none is
    /// configured: a farm's account and rig naming for an ASIC, a hobbyist's device name for a
    /// Bitaxe or a CPU miner; the device's index follows.
    pub const fn sv2_user_prefix(self) -> &'static str {
        match self {
            Profile::Asic => "stratumlab.s19-",
            Profile::Bitaxe => "stratumlab.bitaxe-",
            Profile::Cpu => "stratumlab.cpu-",
        }
    }

    /// `SetupConnection.hardware_version` of an SV2 device of this profile.
    pub const fn sv2_hardware(self) -> &'static str {
        match self {
            Profile::Asic => "S19-class ASIC (simulated)",
            Profile::Bitaxe => "Bitaxe-class (simulated)",
            Profile::Cpu => "CPU miner (simulated)",
        }
    }
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "asic" | "s19" => Ok(Profile::Asic),
            "bitaxe" => Ok(Profile::Bitaxe),
            "cpu" | "cpuminer" => Ok(Profile::Cpu),
            _ => Err(format!(
                "unknown device profile {s:?} (expected asic, bitaxe or cpu)"
            )),
        }
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse_and_differ_over_sv2() {
        for p in [Profile::Asic, Profile::Bitaxe, Profile::Cpu] {
            assert_eq!(p.as_str().parse::<Profile>(), Ok(p));
        }
        assert_eq!("S19".parse::<Profile>(), Ok(Profile::Asic));
        assert!("gpu".parse::<Profile>().is_err());
        assert!(Profile::Asic.nominal_hash_rate() > Profile::Bitaxe.nominal_hash_rate());
        assert!(Profile::Bitaxe.nominal_hash_rate() > Profile::Cpu.nominal_hash_rate());
        assert!(Profile::Asic.sv2_requires_version_rolling() && Profile::Asic.sv2_rolls_version());
        assert!(!Profile::Bitaxe.sv2_requires_version_rolling());
        assert!(Profile::Bitaxe.sv2_rolls_version());
        assert!(!Profile::Cpu.sv2_rolls_version());
        let prefixes = [Profile::Asic, Profile::Bitaxe, Profile::Cpu].map(Profile::sv2_user_prefix);
        assert!(prefixes[0] != prefixes[1] && prefixes[1] != prefixes[2]);
    }
}
