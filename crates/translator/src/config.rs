//! The translator's settings.

use mining::vardiff::VardiffConfig;
use primitives::{Difficulty, Target};
use sv1::VERSION_ROLLING_MASK;

/// How devices map onto upstream channels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ChannelMode {
    /// Every device on one extended channel, each given its own range of its extranonce.
    #[default]
    Aggregated,
    /// Each device on an extended channel of its own (SV2 only), taking all of its extranonce.
    PerDevice,
}

impl ChannelMode {
    /// The mode's name in configuration and on the command line (`aggregated`, `per-device`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ChannelMode::Aggregated => "aggregated",
            ChannelMode::PerDevice => "per-device",
        }
    }
}

impl std::fmt::Display for ChannelMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A channel mode name that is neither `aggregated` nor `per-device` (the name given).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown channel mode {0:?} (expected aggregated or per-device)")]
pub struct UnknownChannelMode(pub String);

impl std::str::FromStr for ChannelMode {
    type Err = UnknownChannelMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "aggregated" => Ok(ChannelMode::Aggregated),
            "per-device" => Ok(ChannelMode::PerDevice),
            other => Err(UnknownChannelMode(other.to_owned())),
        }
    }
}

/// The translator's settings: the upstream channel, devices' extranonce and difficulty, and limits.
#[derive(Clone, Debug)]
pub struct TranslatorConfig {
    /// One channel for every device, or one per device.
    pub channels: ChannelMode,
    /// `OpenExtendedMiningChannel.user_identity`: the farm's account at the pool (per-device
    /// mode appends `.miner<N>`, the device's number).
    pub user_identity: String,
    /// The largest target the devices accept (`max_target` of the channel).
    pub max_target: Target,
    /// Hashes per second counted for a device until vardiff has measured it (the channel's
    /// nominal hash rate is the sum over devices).
    pub device_hash_rate: f64,
    /// Bytes of the channel's extranonce that tell devices apart (fewer if the channel is too
    /// small to leave the devices `min_extranonce2_size`).
    pub device_extranonce_bytes: usize,
    /// The least extranonce2 a device is given.
    pub min_extranonce2_size: usize,
    /// The version-rolling mask devices get (their mask AND this); 0 refuses rolling.
    pub version_mask: u32,
    /// Names one device connection may authorize.
    pub max_workers: usize,
    /// The difficulty a device starts at, before vardiff has measured it.
    pub start_difficulty: Difficulty,
    /// How each device's difficulty follows its share rate.
    pub vardiff: VardiffConfig,
    /// After a device's difficulty changes, shares meeting the old one are taken this long.
    pub grace_ms: u64,
    /// Jobs a device remembers; a share on an older one is stale.
    pub max_jobs: usize,
    /// How far past a job's time (plus its age) a share's ntime may be, in seconds.
    pub max_ntime_ahead: u32,
    /// Shares sent upstream awaiting a verdict, at most.
    pub max_in_flight: usize,
    /// Least time between two `UpdateChannel`s (the spec allows debouncing to once a second).
    pub update_interval_ms: u64,
    /// A change of the nominal hash rate smaller than this fraction is not announced.
    pub update_threshold: f64,
    /// Returned by `client.get_version`.
    pub version: &'static str,
    /// Aggregated mode: ask the pool for extension 0x0002 (worker-specific hashrate tracking)
    /// and, where it agrees, name each device's worker on its forwarded shares.
    pub worker_tracking: bool,
}

impl Default for TranslatorConfig {
    fn default() -> Self {
        TranslatorConfig {
            channels: ChannelMode::Aggregated,
            user_identity: "stratumlab-translator".into(),
            max_target: Target::MAX,
            device_hash_rate: 1e12,
            device_extranonce_bytes: 2,
            min_extranonce2_size: 2,
            version_mask: VERSION_ROLLING_MASK,
            max_workers: 16,
            start_difficulty: Difficulty::ONE,
            vardiff: VardiffConfig::default(),
            grace_ms: 5_000,
            max_jobs: 8,
            max_ntime_ahead: 7_000,
            max_in_flight: 4_096,
            update_interval_ms: 1_000,
            update_threshold: 0.1,
            version: concat!("stratumlab-translator/", env!("CARGO_PKG_VERSION")),
            worker_tracking: false,
        }
    }
}

impl TranslatorConfig {
    /// The extranonce the channel must roll for this split.
    pub fn min_extranonce_size(&self) -> u16 {
        (self.device_extranonce_bytes.min(4) + self.min_extranonce2_size) as u16
    }
}
