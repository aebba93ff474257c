//! A scenario: what one `stratumlab run` compares, on what network, over what link, for how
//! long. The command line and the scenario files fill it; everything the run derives from it
//! (network difficulty, share difficulty, process counts) is computed here, once, so that the
//! report can state it.

use std::collections::BTreeMap;
use std::time::Duration;

use primitives::{Difficulty, HashRate};
use serde::Serialize;

use crate::external::{self, External, ExternalError};

/// Mainnet's mean block interval: the yardstick of time compression.
pub const MAINNET_BLOCK_INTERVAL: Duration = Duration::from_secs(600);

/// Devices one fleet process and one tap process serve: a relay holds two descriptors per
/// connection and a process may hold 20,000 here, so a tap serves at most ~9,900; the rest is
/// headroom for listeners, event files and the runtime.
pub const DEVICES_PER_PROCESS: u32 = 9_000;

/// The lab configurations this build can run (docs/architecture.md, "Configurations").
pub const KNOWN_CONFIGS: &[&str] = &[
    "sv1",
    "sv1-proxied",
    "A",
    "B",
    "D",
    "D-ref",
    "C",
    "C-ref",
    "C-per-device",
    "C-workers",
];

/// What a configuration's devices speak to the first role they meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceProtocol {
    /// Stratum V1.
    Sv1,
    /// Stratum V2.
    Sv2,
}

/// Who runs a configuration's pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolImpl {
    /// `stratumlab pool`, SV1 front end, templates by getblocktemplate.
    OursSv1,
    /// `stratumlab pool`, SV2 front end, templates from simnet's Template Provider.
    OursSv2,
    /// The SV2 reference pool (`pool_sv2`), templates from simnet's Template Provider: the
    /// same protocol as `OursSv2` by another implementation, so that protocol effects can be
    /// told apart from implementation effects.
    ReferenceSv2,
    /// Someone else's pool, speaking this protocol to its miners ([`crate::external`]): the
    /// scenario's `[external.NAME]`, or a built-in one such as `sv1-para`.
    External(DeviceProtocol),
}

/// Who runs the farm proxy the devices connect to, where a configuration has one: it sits at
/// the farm edge, and the WAN link runs from it to the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyImpl {
    /// `stratumlab translator`: SV1 devices aggregated onto one SV2 extended channel.
    OursTranslator,
    /// `stratumlab translator --channels per-device`: an SV2 extended channel per SV1 device,
    /// all on one connection, so that the pool sees (and judges) each device as SV1 does.
    OursTranslatorPerDevice,
    /// `stratumlab translator --worker-tracking`: aggregated as `OursTranslator`, each
    /// forwarded share naming its device's worker (SV2 extension 0x0002), so that the pool
    /// accounts every device as SV1 does; what that costs on the WAN and in CPU shows against C.
    OursTranslatorWorkers,
    /// The SV2 reference translator (`translator_sv2`), aggregating likewise.
    ReferenceTranslator,
    /// `stratumlab proxy`: SV1 devices aggregated onto one SV1 connection (the translator's
    /// device side with an SV1 uplink), so that what aggregation alone gains is told apart
    /// from what SV2 gains.
    OursSv1Proxy,
    /// Someone else's farm proxy ([`crate::external`]), in front of our pool.
    External,
}

/// The shape of one configuration: which roles it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigSpec<'a> {
    /// The configuration's name.
    pub name: &'a str,
    /// What the devices speak.
    pub devices: DeviceProtocol,
    /// Which pool runs.
    pub pool: PoolImpl,
    /// The farm proxy in front of the devices, one per device chunk; `None`: devices reach the
    /// pool (or the JDC) themselves.
    pub proxy: Option<ProxyImpl>,
    /// Job declaration (A, B): per device chunk a JDC at the farm site builds jobs from the
    /// farm-side node's templates and declares them to a JDS beside the pool; the WAN runs
    /// from the JDC to the pool and to the JDS, and the devices (or the proxy) reach the JDC
    /// over the intra-farm link.
    pub job_declaration: bool,
}

const SPECS: [ConfigSpec<'static>; 10] = [
    ConfigSpec {
        name: "sv1",
        devices: DeviceProtocol::Sv1,
        pool: PoolImpl::OursSv1,
        proxy: None,
        job_declaration: false,
    },
    ConfigSpec {
        name: "sv1-proxied",
        devices: DeviceProtocol::Sv1,
        pool: PoolImpl::OursSv1,
        proxy: Some(ProxyImpl::OursSv1Proxy),
        job_declaration: false,
    },
    ConfigSpec {
        name: "A",
        devices: DeviceProtocol::Sv1,
        pool: PoolImpl::OursSv2,
        proxy: Some(ProxyImpl::OursTranslator),
        job_declaration: true,
    },
    ConfigSpec {
        name: "B",
        devices: DeviceProtocol::Sv2,
        pool: PoolImpl::OursSv2,
        proxy: None,
        job_declaration: true,
    },
    ConfigSpec {
        name: "D",
        devices: DeviceProtocol::Sv2,
        pool: PoolImpl::OursSv2,
        proxy: None,
        job_declaration: false,
    },
    ConfigSpec {
        name: "D-ref",
        devices: DeviceProtocol::Sv2,
        pool: PoolImpl::ReferenceSv2,
        proxy: None,
        job_declaration: false,
    },
    ConfigSpec {
        name: "C",
        devices: DeviceProtocol::Sv1,
        pool: PoolImpl::OursSv2,
        proxy: Some(ProxyImpl::OursTranslator),
        job_declaration: false,
    },
    ConfigSpec {
        name: "C-ref",
        devices: DeviceProtocol::Sv1,
        pool: PoolImpl::ReferenceSv2,
        proxy: Some(ProxyImpl::ReferenceTranslator),
        job_declaration: false,
    },
    ConfigSpec {
        name: "C-per-device",
        devices: DeviceProtocol::Sv1,
        pool: PoolImpl::OursSv2,
        proxy: Some(ProxyImpl::OursTranslatorPerDevice),
        job_declaration: false,
    },
    ConfigSpec {
        name: "C-workers",
        devices: DeviceProtocol::Sv1,
        pool: PoolImpl::OursSv2,
        proxy: Some(ProxyImpl::OursTranslatorWorkers),
        job_declaration: false,
    },
];

/// A hop of the way a new job travels from the node that made its template to the devices,
/// in order: what the report explains a time-to-job difference with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hop {
    /// The pool-side node's template (sv1, sv1-proxied, C, D).
    PoolNode,
    /// The farm-side node's template (A, B).
    FarmNode,
    /// The pool builds the job.
    Pool,
    /// The JDC builds the job from the farm's template.
    Jdc,
    /// The WAN link (one-way delay of half the RTT).
    Wan,
    /// The intra-farm link (one-way delay of half the LAN RTT).
    Lan,
    /// A farm proxy (translator, aggregating SV1 proxy) rewrites the job for the devices.
    Proxy,
    /// The devices themselves.
    Devices,
}

impl Hop {
    /// As results.json's `context.job_path` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Hop::PoolNode => "pool node",
            Hop::FarmNode => "farm node",
            Hop::Pool => "pool",
            Hop::Jdc => "jdc",
            Hop::Wan => "wan",
            Hop::Lan => "lan",
            Hop::Proxy => "proxy",
            Hop::Devices => "devices",
        }
    }
}

impl<'a> ConfigSpec<'a> {
    /// The native configuration called `name`, if this build runs it.
    pub fn named(name: &str) -> Option<ConfigSpec<'static>> {
        SPECS.iter().find(|s| s.name == name).copied()
    }

    /// The shape of an external configuration called `name`: a pool the devices reach over
    /// the WAN, or a farm proxy in front of our pool or of `upstream`, an external pool.
    pub fn external(name: &'a str, e: &External, upstream: Option<&External>) -> ConfigSpec<'a> {
        let (pool, proxy) = match (e.role, upstream) {
            (external::Role::Pool, _) => (PoolImpl::External(e.protocol.devices()), None),
            (external::Role::Proxy, Some(up)) => (
                PoolImpl::External(up.protocol.devices()),
                Some(ProxyImpl::External),
            ),
            (external::Role::Proxy, None) => {
                let pool = if e.upstream.as_deref() == Some("sv1") {
                    PoolImpl::OursSv1
                } else {
                    PoolImpl::OursSv2
                };
                (pool, Some(ProxyImpl::External))
            }
        };
        ConfigSpec {
            name,
            devices: e.protocol.devices(),
            pool,
            proxy,
            job_declaration: false,
        }
    }

    /// Whether the pool takes templates from an SV2 Template Provider (an external SV2 pool
    /// is offered one).
    pub fn needs_template_provider(self) -> bool {
        matches!(
            self.pool,
            PoolImpl::OursSv2 | PoolImpl::ReferenceSv2 | PoolImpl::External(DeviceProtocol::Sv2)
        )
    }

    /// Whether the farm proxy opens an upstream channel per device: the pool must allow one
    /// connection that many channels.
    pub fn channel_per_device(self) -> bool {
        self.proxy == Some(ProxyImpl::OursTranslatorPerDevice)
    }

    /// Whether the farm runs its own node (the JDC's templates).
    pub fn needs_farm_node(self) -> bool {
        self.job_declaration
    }

    /// The way a new job travels, node to devices.
    pub fn job_path(self) -> Vec<Hop> {
        let mut path = if self.job_declaration {
            vec![Hop::FarmNode, Hop::Jdc, Hop::Lan]
        } else {
            vec![Hop::PoolNode, Hop::Pool, Hop::Wan]
        };
        if self.proxy.is_some() {
            path.push(Hop::Proxy);
        }
        path.push(Hop::Devices);
        path
    }
}

/// simnet's node when it presents one.
pub const SINGLE_NODE: &str = "node";
/// The pool-side node when simnet presents two.
pub const POOL_NODE: &str = "pool";
/// The farm-side node (A, B's JDC).
pub const FARM_NODE: &str = "farm";

/// Device firmware profile, as `stratumlab fleet --profile` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// An ASIC miner's firmware.
    Asic,
    /// A Bitaxe's firmware.
    Bitaxe,
    /// A CPU miner.
    Cpu,
}

impl Profile {
    /// The name `--profile` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Asic => "asic",
            Profile::Bitaxe => "bitaxe",
            Profile::Cpu => "cpu",
        }
    }
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "asic" => Ok(Profile::Asic),
            "bitaxe" => Ok(Profile::Bitaxe),
            "cpu" => Ok(Profile::Cpu),
            _ => Err(format!("unknown profile {s:?} (asic, bitaxe, cpu)")),
        }
    }
}

/// Everything a run is told.
#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    /// The scenario's name.
    pub name: String,
    /// Configurations compared side by side on one network (the first is the baseline).
    pub configs: Vec<String>,
    /// The run before the drain: warm-up plus measured window.
    #[serde(serialize_with = "secs")]
    pub duration: Duration,
    /// Devices per configuration.
    pub devices: u32,
    /// The devices' firmware profile.
    pub profile: Profile,
    /// WAN round trip: half of it is applied in each direction.
    #[serde(serialize_with = "millis")]
    pub rtt: Duration,
    /// Round trip of the links inside a site.
    #[serde(serialize_with = "millis")]
    pub lan_rtt: Duration,
    /// Delay jitter on the WAN link.
    #[serde(serialize_with = "millis")]
    pub jitter: Duration,
    /// Percent of segments lost on the WAN link (paid as retransmission delay).
    pub loss_pct: f64,
    /// WAN bandwidth cap in bits per second; 0: none.
    pub bandwidth_bps: u64,
    /// Mean interval of the rest of the network's blocks.
    #[serde(serialize_with = "secs")]
    pub block_interval: Duration,
    /// Template refresh: the SV1 pool's and the Template Provider's alike.
    #[serde(serialize_with = "secs")]
    pub template_interval: Duration,
    /// The run's random seed.
    pub seed: u64,
    /// Trials to run.
    pub repeat: u32,
    /// Real hashes per second each configuration's fleet may spend.
    pub hash_budget: HashRate,
    /// Blocks each configuration should find per run on average (sets the network difficulty).
    pub blocks_per_config: f64,
    /// Fraction of the duration whose events are not counted (devices connect, vardiff settles).
    pub warmup_fraction: f64,
    /// How long, after the duration, verdicts of shares in flight are awaited.
    #[serde(serialize_with = "secs")]
    pub drain: Duration,
    /// Shares per minute per device the pools' vardiff aims for.
    pub shares_per_minute: f64,
    /// Changes of every device's hash rate during a trial, from the fleet's start (what the
    /// pools' vardiff and hash-rate estimates must follow).
    pub hash_rate_steps: Vec<fleet::HashRateStep>,
    /// How much later than the pool-side node the farm-side node (A, B) learns the network's
    /// transactions and blocks, and its own blocks reach the network: it is one relay hop
    /// further from the rest of the network than a pool's well-connected node.
    #[serde(serialize_with = "millis")]
    pub farm_relay_delay: Duration,
    /// External configurations the scenario defines (`[external.NAME]`), by name; a name in
    /// `configs` is looked up among the native ones, then here, then among the built-in
    /// externals ([`external::built_in`]).
    pub external: BTreeMap<String, External>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            name: "sv1".into(),
            configs: vec!["sv1".into()],
            duration: Duration::from_secs(120),
            devices: 100,
            profile: Profile::Asic,
            rtt: Duration::from_millis(145),
            lan_rtt: Duration::from_micros(500),
            jitter: Duration::ZERO,
            loss_pct: 0.0,
            bandwidth_bps: 0,
            block_interval: Duration::from_secs(10),
            template_interval: Duration::from_secs(1),
            seed: 1,
            repeat: 1,
            hash_budget: HashRate::from_hashes_per_sec(1e6),
            blocks_per_config: 3.0,
            warmup_fraction: 0.1,
            drain: Duration::from_secs(5),
            shares_per_minute: 15.0,
            hash_rate_steps: Vec::new(),
            farm_relay_delay: DEFAULT_FARM_RELAY_DELAY,
            external: BTreeMap::new(),
        }
    }
}

/// One compact-block relay hop on a regional link: the farm-side node hears of a block (and a
/// transaction) that much after the pool-side node, a modest handicap for A and B.
pub const DEFAULT_FARM_RELAY_DELAY: Duration = Duration::from_millis(20);

/// A scenario that cannot run, with the setting to blame.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScenarioError {
    /// A configuration this build does not know.
    #[error(
        "unknown configuration {0:?}: this build runs {KNOWN_CONFIGS:?} and {built_in:?}, and a \
         scenario may define more as [external.NAME] tables",
        built_in = external::BUILT_IN
    )]
    UnknownConfig(String),
    /// An external configuration is malformed.
    #[error(transparent)]
    External(#[from] ExternalError),
    /// No configuration was given.
    #[error("no configuration to run")]
    NoConfig,
    /// A configuration is listed twice.
    #[error("configuration {0:?} is listed twice")]
    DuplicateConfig(String),
    /// A setting (named) that must be positive is not.
    #[error("{0} must be positive")]
    NotPositive(&'static str),
    /// `--loss` outside 0..100.
    #[error("--loss must be within 0..100 percent, not {0}")]
    Loss(f64),
    /// The warm-up fraction outside 0..0.9.
    #[error("the warm-up fraction must be within 0..0.9, not {0}")]
    Warmup(f64),
}

impl Scenario {
    /// The configurations' shapes, in order (validated names only).
    pub fn specs(&self) -> impl Iterator<Item = ConfigSpec<'_>> + '_ {
        self.configs.iter().filter_map(|c| self.spec(c))
    }

    /// The shape of the configuration called `name`: a native one, else an external one.
    pub fn spec<'s>(&'s self, name: &'s str) -> Option<ConfigSpec<'s>> {
        if let Some(spec) = ConfigSpec::named(name) {
            return Some(spec);
        }
        let e = self.external_of(name)?;
        let upstream = self.external_pool_of(name).map(|(_, up)| up);
        Some(ConfigSpec::external(name, &e, upstream.as_ref()))
    }

    /// Every external definition a configuration runs, by name: its own, and the external
    /// pool its proxy names.
    pub fn external_definitions(&self, config: &str) -> Vec<(String, External)> {
        let own = self.external_of(config).map(|e| (config.to_owned(), e));
        let pool = self
            .external_pool_of(config)
            .filter(|(name, _)| name != config);
        own.into_iter().chain(pool).collect()
    }

    /// The external pool a configuration runs, by its definition's name: an external pool
    /// configuration's own, or the pool an external proxy names as its `upstream`.
    pub fn external_pool_of(&self, config: &str) -> Option<(String, External)> {
        let e = self.external_of(config)?;
        match e.role {
            external::Role::Pool => Some((config.to_owned(), e)),
            external::Role::Proxy => {
                let up = e.upstream.as_deref()?;
                if up == "sv1" || up == "sv2" {
                    return None;
                }
                let pool = self.external_of(up)?;
                (pool.role == external::Role::Pool).then(|| (up.to_owned(), pool))
            }
        }
    }

    /// The definition of an external configuration, the scenario's or a built-in one.
    pub fn external_of(&self, name: &str) -> Option<External> {
        self.external
            .get(name)
            .cloned()
            .or_else(|| external::built_in(name))
    }

    /// Whether simnet presents two nodes ("pool" and "farm"): some configuration runs the
    /// farm-side node. Otherwise it presents one, "node", as a single-node simnet does.
    pub fn two_nodes(&self) -> bool {
        self.specs().any(ConfigSpec::needs_farm_node)
    }

    /// The simnet node whose templates a configuration's job source takes and whose block
    /// verdicts end its block propagation, as simnet names it in events.
    pub fn job_source_node(&self, spec: ConfigSpec<'_>) -> &'static str {
        if !self.two_nodes() {
            SINGLE_NODE
        } else if spec.needs_farm_node() {
            FARM_NODE
        } else {
            POOL_NODE
        }
    }

    /// Checks the scenario's settings.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.configs.is_empty() {
            return Err(ScenarioError::NoConfig);
        }
        for (name, e) in &self.external {
            if ConfigSpec::named(name).is_some() || external::BUILT_IN.contains(&name.as_str()) {
                return Err(ExternalError::Shadows {
                    config: name.clone(),
                }
                .into());
            }
            e.validate(name)?;
            if let (external::Role::Proxy, Some(up)) = (e.role, e.upstream.as_deref()) {
                let known = up == "sv1" || up == "sv2" || self.external_pool_of(name).is_some();
                if !known {
                    return Err(ExternalError::Upstream {
                        config: name.clone(),
                        got: format!("not {up:?}, which is no external pool's table"),
                    }
                    .into());
                }
            }
        }
        for (i, c) in self.configs.iter().enumerate() {
            if self.spec(c).is_none() {
                return Err(ScenarioError::UnknownConfig(c.clone()));
            }
            if self.configs[..i].contains(c) {
                return Err(ScenarioError::DuplicateConfig(c.clone()));
            }
        }
        let positive = [
            ("--duration", self.duration.is_zero()),
            ("--devices", self.devices == 0),
            ("--repeat", self.repeat == 0),
            ("the hash budget", self.hash_budget.hashes_per_sec() <= 0.0),
            ("blocks per configuration", self.blocks_per_config <= 0.0),
            ("shares per minute", self.shares_per_minute <= 0.0),
        ];
        if let Some((what, _)) = positive.iter().find(|(_, bad)| *bad) {
            return Err(ScenarioError::NotPositive(what));
        }
        if !(0.0..100.0).contains(&self.loss_pct) {
            return Err(ScenarioError::Loss(self.loss_pct));
        }
        if !(0.0..0.9).contains(&self.warmup_fraction) {
            return Err(ScenarioError::Warmup(self.warmup_fraction));
        }
        Ok(())
    }

    /// 600 s over the block interval: how much faster than mainnet tips arrive.
    pub fn time_compression(&self) -> f64 {
        if self.block_interval.is_zero() {
            return 1.0;
        }
        MAINNET_BLOCK_INTERVAL.as_secs_f64() / self.block_interval.as_secs_f64()
    }

    /// The network difficulty at which one configuration's fleet, hashing at its budget, finds
    /// `blocks_per_config` blocks in the run on average: block propagation is then measured on
    /// real found blocks.
    pub fn network_difficulty(&self) -> Difficulty {
        let per_block = self.duration.div_f64(self.blocks_per_config);
        self.hash_budget.difficulty_for_interval(per_block)
    }

    /// The share difficulty at which a device hashing its part of the budget sends
    /// `shares_per_minute`: where the pools start, so that vardiff has nothing to settle.
    pub fn start_difficulty(&self) -> Difficulty {
        let per_device = HashRate::from_hashes_per_sec(
            self.hash_budget.hashes_per_sec() / f64::from(self.devices),
        );
        per_device.difficulty_for_interval(Duration::from_secs_f64(60.0 / self.shares_per_minute))
    }

    /// The warm-up at the start of the measured duration.
    pub fn warmup(&self) -> Duration {
        self.duration.mul_f64(self.warmup_fraction)
    }

    /// How a configuration's devices are split over fleet (and tap) processes.
    pub fn device_chunks(&self) -> Vec<u32> {
        let n = self.devices.div_ceil(DEVICES_PER_PROCESS);
        let base = self.devices / n;
        let extra = self.devices % n;
        (0..n).map(|i| base + u32::from(i < extra)).collect()
    }
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_compress_time_sixty_fold() {
        let s = Scenario::default();
        s.validate().unwrap();
        assert_eq!(s.time_compression(), 60.0);
    }

    #[test]
    fn network_difficulty_yields_the_chosen_block_count() {
        let s = Scenario {
            duration: Duration::from_secs(120),
            blocks_per_config: 4.0,
            hash_budget: HashRate::from_hashes_per_sec(2e6),
            ..Scenario::default()
        };
        // Expected blocks = rate x duration / (difficulty x 2^32).
        let d = s.network_difficulty().as_f64();
        let blocks = 2e6 * 120.0 / (d * 4_294_967_296.0);
        assert!((blocks - 4.0).abs() < 1e-3, "{blocks}");
    }

    #[test]
    fn start_difficulty_gives_each_device_its_share_rate() {
        let s = Scenario {
            devices: 100,
            hash_budget: HashRate::from_hashes_per_sec(1e6),
            shares_per_minute: 15.0,
            ..Scenario::default()
        };
        // 10 kH/s per device, one share per 4 s: 40,000 hashes per share.
        let d = s.start_difficulty().as_f64();
        assert!((d * 4_294_967_296.0 - 40_000.0).abs() < 1.0, "{d}");
    }

    #[test]
    fn devices_spread_evenly_over_processes() {
        let chunks = |devices| {
            Scenario {
                devices,
                ..Scenario::default()
            }
            .device_chunks()
        };
        assert_eq!(chunks(100), vec![100]);
        assert_eq!(chunks(9_000), vec![9_000]);
        assert_eq!(chunks(9_001), vec![4_501, 4_500]);
        assert_eq!(chunks(20_000), vec![6_667, 6_667, 6_666]);
        assert!(chunks(20_000).iter().all(|&c| c <= DEVICES_PER_PROCESS));
    }

    #[test]
    fn every_known_configuration_has_a_shape() {
        for name in KNOWN_CONFIGS {
            assert_eq!(ConfigSpec::named(name).map(|s| s.name), Some(*name));
        }
        assert_eq!(SPECS.len(), KNOWN_CONFIGS.len());
        // C puts a translator in front of SV1 devices, on the same SV2 pool as D.
        let (c, d) = (
            ConfigSpec::named("C").unwrap(),
            ConfigSpec::named("D").unwrap(),
        );
        assert_eq!(c.devices, DeviceProtocol::Sv1);
        assert_eq!(c.pool, d.pool);
        assert!(c.proxy.is_some() && d.proxy.is_none());
        assert!(c.needs_template_provider());
        // A and B declare jobs from the farm's node: A with the translator in front, B without.
        let (a, b) = (
            ConfigSpec::named("A").unwrap(),
            ConfigSpec::named("B").unwrap(),
        );
        assert!(a.job_declaration && b.job_declaration && !c.job_declaration);
        assert_eq!(
            (a.devices, b.devices),
            (DeviceProtocol::Sv1, DeviceProtocol::Sv2)
        );
        assert_eq!(a.proxy, c.proxy);
        assert_eq!(b.pool, d.pool);
    }

    #[test]
    fn c_per_device_is_c_with_a_channel_per_device() {
        let c = ConfigSpec::named("C").unwrap();
        let per_device = ConfigSpec::named("C-per-device").unwrap();
        assert_eq!(
            ConfigSpec {
                name: "C",
                proxy: c.proxy,
                ..per_device
            },
            c,
            "the same roles but for the translator's channel mode"
        );
        assert!(per_device.channel_per_device() && !c.channel_per_device());
        assert_eq!(per_device.job_path(), c.job_path());
    }

    #[test]
    fn jobs_of_a_and_b_never_cross_the_wan() {
        let path = |n| ConfigSpec::named(n).unwrap().job_path();
        assert_eq!(
            path("A"),
            vec![Hop::FarmNode, Hop::Jdc, Hop::Lan, Hop::Proxy, Hop::Devices]
        );
        assert_eq!(
            path("B"),
            vec![Hop::FarmNode, Hop::Jdc, Hop::Lan, Hop::Devices]
        );
        assert_eq!(
            path("sv1"),
            vec![Hop::PoolNode, Hop::Pool, Hop::Wan, Hop::Devices]
        );
        assert!(path("C").contains(&Hop::Wan) && path("C").contains(&Hop::Proxy));
    }

    #[test]
    fn the_farm_node_runs_only_for_job_declaration() {
        let with = |configs: &[&str]| Scenario {
            configs: configs.iter().map(|c| (*c).to_owned()).collect(),
            ..Scenario::default()
        };
        let s = with(&["sv1", "D"]);
        assert!(!s.two_nodes());
        assert_eq!(s.job_source_node(ConfigSpec::named("D").unwrap()), "node");
        let s = with(&["sv1", "A", "B"]);
        assert!(s.two_nodes());
        let node = |n| s.job_source_node(ConfigSpec::named(n).unwrap());
        assert_eq!(
            (node("sv1"), node("A"), node("B")),
            ("pool", "farm", "farm")
        );
    }

    #[test]
    fn an_external_proxy_runs_in_front_of_our_pool_or_an_external_one() {
        let def = |text: &str| toml::from_str::<External>(text).unwrap();
        let mut s = Scenario {
            configs: vec!["pool-x".into(), "proxy-x".into(), "proxy-ours".into()],
            ..Scenario::default()
        };
        s.external.insert(
            "pool-x".into(),
            def("protocol = \"sv2\"\ncommand = [\"p\"]"),
        );
        s.external.insert(
            "proxy-x".into(),
            def("protocol = \"sv1\"\nrole = \"proxy\"\nupstream = \"pool-x\"\ncommand = [\"t\"]"),
        );
        s.external.insert(
            "proxy-ours".into(),
            def("protocol = \"sv1\"\nrole = \"proxy\"\nupstream = \"sv1\"\ncommand = [\"t\"]"),
        );
        s.validate().unwrap();
        let spec = |n| s.spec(n).unwrap();
        assert_eq!(spec("pool-x").pool, PoolImpl::External(DeviceProtocol::Sv2));
        assert!(spec("pool-x").needs_template_provider());
        let proxy = spec("proxy-x");
        assert_eq!(
            (proxy.devices, proxy.pool, proxy.proxy),
            (
                DeviceProtocol::Sv1,
                PoolImpl::External(DeviceProtocol::Sv2),
                Some(ProxyImpl::External)
            )
        );
        assert_eq!(s.external_pool_of("proxy-x").unwrap().0, "pool-x");
        assert_eq!(spec("proxy-ours").pool, PoolImpl::OursSv1);
        assert!(s.external_pool_of("proxy-ours").is_none());
        // The built-in one is there without a table.
        s.configs.push("sv1-para".into());
        s.validate().unwrap();
        assert_eq!(
            s.spec("sv1-para").unwrap().pool,
            PoolImpl::External(DeviceProtocol::Sv1)
        );
        // A proxy in front of nothing known, and a table shadowing a native name, are refused.
        s.external.get_mut("proxy-x").unwrap().upstream = Some("nope".into());
        assert!(matches!(
            s.validate(),
            Err(ScenarioError::External(ExternalError::Upstream { .. }))
        ));
        s.external.get_mut("proxy-x").unwrap().upstream = Some("sv2".into());
        for shadow in ["sv1", "sv1-para"] {
            let mut s = s.clone();
            s.external
                .insert(shadow.into(), def("protocol = \"sv1\"\ncommand = [\"p\"]"));
            assert!(matches!(
                s.validate(),
                Err(ScenarioError::External(ExternalError::Shadows { .. }))
            ));
        }
        assert_eq!(s.external_definitions("proxy-x").len(), 1);
        assert_eq!(
            s.external_definitions("sv1-para")
                .into_iter()
                .map(|(n, _)| n)
                .collect::<Vec<_>>(),
            ["sv1-para"]
        );
    }

    #[test]
    fn bad_scenarios_name_the_setting() {
        let bad = |f: fn(&mut Scenario)| {
            let mut s = Scenario::default();
            f(&mut s);
            s.validate().unwrap_err()
        };
        assert_eq!(
            bad(|s| s.configs = vec!["Z".into()]),
            ScenarioError::UnknownConfig("Z".into())
        );
        assert_eq!(
            bad(|s| s.configs = vec!["sv1".into(), "sv1".into()]),
            ScenarioError::DuplicateConfig("sv1".into())
        );
        assert_eq!(
            bad(|s| s.devices = 0),
            ScenarioError::NotPositive("--devices")
        );
        assert_eq!(bad(|s| s.loss_pct = 100.0), ScenarioError::Loss(100.0));
    }
}
