//! What a network is made of: every knob, its default, and why the default is what it is (the
//! crate documentation gathers the reasons and sources).

use std::time::Duration;

use primitives::Difficulty;

use crate::txgen::{FeeRateModel, VsizeModel, MAX_VSIZE, MIN_VSIZE};

/// The chain name the network reports (`getblockchaininfo.chain`): its rules are regtest's in
/// spirit (any difficulty, no retargeting), while its heights, subsidy and fees look like mainnet.
pub const CHAIN_NAME: &str = "regtest";

/// Consensus block weight limit (BIP141).
pub const MAX_BLOCK_WEIGHT: u64 = 4_000_000;

/// Weight Bitcoin Core's block assembler keeps free for the coinbase.
pub const COINBASE_RESERVED_WEIGHT: u64 = 4_000;

#[derive(Clone, Debug, PartialEq)]
/// Everything that shapes a simulated network; defaults describe mainnet (see the crate docs
/// for where each comes from). Check with [`SimnetConfig::validate`].
pub struct SimnetConfig {
    /// Seeds every random stream: the same seed and the same call timing give the same network.
    pub seed: u64,
    /// Height of the tip when the network starts (the first template is for the next height).
    pub start_height: u32,
    /// Unix time (seconds) at `Timestamp::ZERO`; header times are this plus simulated time.
    pub start_unix_time: u64,
    /// Network difficulty; `nBits` is the compact form of its target.
    pub network_difficulty: Difficulty,
    /// Mean gap between the rest of the network's blocks (Poisson). Zero: it finds none.
    pub block_interval: Duration,
    /// Least time between two templates made for fee reasons (a new tip always makes one).
    pub template_interval: Duration,
    /// A template for the same tip is made only when it would gain more than this many sats of
    /// fees over the last one.
    pub fee_delta: u64,
    /// Block weight limit the templates and the network's blocks fill up to, coinbase included.
    pub block_max_weight: u64,
    /// Weight left free for the coinbase when choosing transactions.
    pub coinbase_reserved_weight: u64,
    /// Network blocks carry real proof of work when finding it is expected to take at most this
    /// many hashes; above that their nonce is left as is (nothing downstream re-checks them).
    pub network_pow_budget: u64,
    /// The rest of the network announces new transactions to each node at multiples of this
    /// (a fixed grid standing for Bitcoin Core's 2 s average trickle to outbound peers); zero
    /// announces each one as it appears. See [`crate::relay`].
    pub tx_announce_interval: Duration,
    /// Transaction arrivals and the mempool's size.
    pub mempool: MempoolConfig,
}

impl Default for SimnetConfig {
    fn default() -> Self {
        SimnetConfig {
            seed: 0,
            start_height: 900_000,
            // 2025-06-15, near when mainnet passed height 900,000.
            start_unix_time: 1_750_000_000,
            network_difficulty: Difficulty::ONE,
            block_interval: Duration::from_secs(600),
            template_interval: Duration::from_secs(30),
            fee_delta: 1_000,
            block_max_weight: MAX_BLOCK_WEIGHT,
            coinbase_reserved_weight: COINBASE_RESERVED_WEIGHT,
            network_pow_budget: 1 << 16,
            tx_announce_interval: Duration::ZERO,
            mempool: MempoolConfig::default(),
        }
    }
}

/// The name of the node a network has when it is given none.
pub const DEFAULT_NODE: &str = "node";

/// One node the network presents: a name (in events and logs) and how far it is from the rest
/// of the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// The node's name, unique in the network; it labels its events and logs.
    pub name: String,
    /// How long the network's transactions and blocks take to reach it, and its blocks to reach
    /// the network.
    pub relay_delay: Duration,
}

impl Default for NodeSpec {
    fn default() -> Self {
        NodeSpec::new(DEFAULT_NODE, Duration::ZERO)
    }
}

impl NodeSpec {
    /// A node called `name`, `relay_delay` from the rest of the network.
    pub fn new(name: &str, relay_delay: Duration) -> NodeSpec {
        NodeSpec {
            name: name.to_owned(),
            relay_delay,
        }
    }

    /// At least one node, each named, no name twice, none called "network" (the name events
    /// give the rest of the network).
    pub fn validate_all(nodes: &[NodeSpec]) -> Result<(), ConfigError> {
        if nodes.is_empty() {
            return Err(ConfigError::NoNodes);
        }
        for (i, n) in nodes.iter().enumerate() {
            if n.name.is_empty() || n.name == NETWORK_NAME {
                return Err(ConfigError::NodeName(n.name.clone()));
            }
            if nodes[..i].iter().any(|m| m.name == n.name) {
                return Err(ConfigError::DuplicateNode(n.name.clone()));
            }
        }
        Ok(())
    }
}

/// What events call the rest of the network (its tip changes, with several nodes).
pub const NETWORK_NAME: &str = "network";

/// The transaction arrival model and the mempool's limits.
#[derive(Clone, Debug, PartialEq)]
pub struct MempoolConfig {
    /// Mean arrivals per second (Poisson). Zero: no arrivals.
    pub arrival_rate: f64,
    /// Transactions already waiting when the network starts (drawn from the same model).
    pub initial_txs: usize,
    /// How arrivals' virtual sizes are drawn.
    pub vsize: VsizeModel,
    /// How arrivals' fee rates are drawn.
    pub fee_rate: FeeRateModel,
    /// Total virtual size the mempool holds; past it the lowest fee rates are evicted.
    pub max_vsize: u64,
}

impl Default for MempoolConfig {
    fn default() -> Self {
        MempoolConfig {
            arrival_rate: 5.0,
            initial_txs: 3_000,
            vsize: VsizeModel::default(),
            fee_rate: FeeRateModel::default(),
            max_vsize: 100_000_000,
        }
    }
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
/// Why a [`SimnetConfig`] was refused.
pub enum ConfigError {
    #[error("{0} must be a finite number >= 0, got {1}")]
    /// The named number is negative or not finite.
    NotNonNegative(&'static str, f64),
    #[error("{0} must be a finite number > 0, got {1}")]
    /// The named number is zero, negative or not finite.
    NotPositive(&'static str, f64),
    #[error("vsize model: need {MIN_VSIZE} <= min < median and min <= max <= {MAX_VSIZE} (min {min}, median {median}, max {max})")]
    /// The virtual size model's bounds are out of order or out of range.
    Vsize {
        /// Smallest size drawn (vB).
        min: u32,
        /// Median of the drawn sizes (vB).
        median: f64,
        /// Cap on the drawn sizes (vB).
        max: u32,
    },
    #[error("fee rate model: need 0 < floor <= max (floor {floor}, max {max})")]
    /// The fee rate model's clamp is empty or not positive.
    FeeRate {
        /// Lowest fee rate drawn (sat/vB).
        floor: f64,
        /// Highest fee rate drawn (sat/vB).
        max: f64,
    },
    #[error("block_max_weight {max} must be at most {MAX_BLOCK_WEIGHT} and above the coinbase reserve {reserved}")]
    /// The block weight limit is over BIP141's or leaves nothing after the coinbase reserve.
    BlockWeight {
        /// The configured `block_max_weight` (WU).
        max: u64,
        /// The configured `coinbase_reserved_weight` (WU).
        reserved: u64,
    },
    #[error("start_height {0} leaves no room for further blocks")]
    /// The start height is so high that the next block's height would overflow.
    StartHeight(u32),
    #[error("start_unix_time {0} does not fit a header's 32-bit time")]
    /// The start time does not fit a header's 32-bit `nTime`.
    StartTime(u64),
    #[error("a network needs at least one node")]
    /// No node is configured.
    NoNodes,
    #[error("node name {0:?} is empty or reserved")]
    /// A node name is empty or one that is reserved.
    NodeName(String),
    #[error("node {0:?} is given twice")]
    /// Two nodes have the same name.
    DuplicateNode(String),
}

impl SimnetConfig {
    /// Checks that the numbers make sense together, before a [`crate::Network`] is built from them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let m = &self.mempool;
        if !(m.arrival_rate.is_finite() && m.arrival_rate >= 0.0) {
            return Err(ConfigError::NotNonNegative("arrival_rate", m.arrival_rate));
        }
        let v = &m.vsize;
        if !(v.median.is_finite()
            && v.min >= MIN_VSIZE
            && (v.min as f64) < v.median
            && v.min <= v.max
            && v.max <= MAX_VSIZE)
        {
            return Err(ConfigError::Vsize {
                min: v.min,
                median: v.median,
                max: v.max,
            });
        }
        let f = &m.fee_rate;
        if !(f.floor.is_finite() && f.max.is_finite() && f.floor > 0.0 && f.floor <= f.max) {
            return Err(ConfigError::FeeRate {
                floor: f.floor,
                max: f.max,
            });
        }
        for (name, x) in [
            ("vsize.sigma", v.sigma),
            ("fee_rate.sigma", f.sigma),
            ("fee_rate.median", f.median),
        ] {
            if !(x.is_finite() && x > 0.0) {
                return Err(ConfigError::NotPositive(name, x));
            }
        }
        if self.block_max_weight > MAX_BLOCK_WEIGHT
            || self.block_max_weight <= self.coinbase_reserved_weight
        {
            return Err(ConfigError::BlockWeight {
                max: self.block_max_weight,
                reserved: self.coinbase_reserved_weight,
            });
        }
        if self.start_height >= u32::MAX - 1 {
            return Err(ConfigError::StartHeight(self.start_height));
        }
        // Leave ten years of simulated time before header times would wrap.
        if self.start_unix_time > u32::MAX as u64 - 10 * 365 * 86_400 {
            return Err(ConfigError::StartTime(self.start_unix_time));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        SimnetConfig::default().validate().unwrap();
        let mut c = SimnetConfig::default();
        c.mempool.arrival_rate = f64::NAN;
        assert!(matches!(c.validate(), Err(ConfigError::NotNonNegative(..))));
        let mut c = SimnetConfig::default();
        c.mempool.vsize.median = 100.0;
        assert!(matches!(c.validate(), Err(ConfigError::Vsize { .. })));
        let mut c = SimnetConfig::default();
        c.mempool.fee_rate.floor = 0.0;
        assert!(matches!(c.validate(), Err(ConfigError::FeeRate { .. })));
        let mut c = SimnetConfig::default();
        c.mempool.fee_rate.sigma = -1.0;
        assert!(matches!(c.validate(), Err(ConfigError::NotPositive(..))));
        let mut c = SimnetConfig::default();
        c.coinbase_reserved_weight = c.block_max_weight;
        assert!(matches!(c.validate(), Err(ConfigError::BlockWeight { .. })));
        let c = SimnetConfig {
            start_unix_time: u32::MAX as u64,
            ..Default::default()
        };
        assert!(matches!(c.validate(), Err(ConfigError::StartTime(_))));
    }
}
