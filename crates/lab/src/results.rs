//! The results.json shape (docs/metrics.md, "results.json"), as types.
//!
//! Every key docs/metrics.md names is here under that name; keys it does not name are additions
//! (allowed: "add to them, never rename"). Figures that cannot be computed (a percentage of
//! nothing, a mean of no samples) are `null`, never `0` and never NaN. Configurations keep the
//! order the run gave them ([`OrderedMap`]), so that the first one is the report's baseline.
//!
//! ```
//! let r = lab::results::Results::default();
//! let text = serde_json::to_string(&r).unwrap();
//! let back: lab::results::Results = serde_json::from_str(&text).unwrap();
//! assert_eq!(back, r);
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The `schema` this crate writes.
pub const SCHEMA: u32 = 1;

/// results.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// The results.json format version ([`SCHEMA`]).
    pub schema: u32,
    /// False when any configuration or the host broke the run's own conditions (docs/metrics.md,
    /// "Run context").
    pub valid: bool,
    /// Why the run is invalid, one line each; empty when `valid`.
    pub invalid_reasons: Vec<String>,
    /// The run's conditions.
    pub context: Context,
    /// One entry per configuration, in the run's order. With `--repeat`, aggregated over trials.
    pub configs: OrderedMap<ConfigResults>,
    /// The machine the run was on.
    pub host: Host,
    /// With `--repeat N`: each trial on its own, same shape as the top level's `configs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials: Option<Vec<Trial>>,
}

impl Default for Results {
    fn default() -> Self {
        Results {
            schema: SCHEMA,
            valid: true,
            invalid_reasons: Vec::new(),
            context: Context::default(),
            configs: OrderedMap::default(),
            host: Host::default(),
            trials: None,
        }
    }
}

/// One trial of a `--repeat` run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// 1-based.
    pub trial: u32,
    /// False when this trial broke the run's conditions.
    pub valid: bool,
    /// Why this trial is invalid; empty when `valid`.
    pub invalid_reasons: Vec<String>,
    /// This trial's figures per configuration, in the run's order.
    pub configs: OrderedMap<ConfigResults>,
}

/// The run's conditions (docs/metrics.md, "Run context, always recorded"). The orchestrator fills
/// it; keys it adds beyond these land in `extra` and are written back as they came.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Context {
    /// The scenario's name.
    pub scenario: String,
    /// The configurations run, in order (the first is the baseline).
    pub configurations: Vec<String>,
    /// The run before the drain (warm-up plus measured window), in seconds.
    pub duration_s: f64,
    /// The warm-up, whose events are not counted, in seconds.
    pub warmup_s: f64,
    /// The drain at the end (no new shares; replies awaited), in seconds.
    pub drain_s: f64,
    /// Trials run (`--repeat`).
    pub repeat: u32,
    /// The run's random seed.
    pub seed: u64,
    /// The WAN link's configured round trip (`--rtt`), in ms: half each way.
    pub rtt_ms: f64,
    /// Delay jitter on the WAN link, in ms.
    pub jitter_ms: f64,
    /// Percent of segments lost on the WAN link.
    pub loss_pct: f64,
    /// Bytes per second each way; `null` without a cap.
    #[serde(rename = "bandwidth_cap_Bps")]
    pub bandwidth_cap_bps: Option<f64>,
    /// Round trip of the links inside a site (`--lan-rtt`), in ms.
    pub lan_rtt_ms: f64,
    /// Mean time between network blocks in simnet, in seconds.
    pub block_interval_s: f64,
    /// Template refresh interval (the SV1 pool's and the Template Provider's), in seconds.
    pub template_interval_s: f64,
    /// 600 s divided by the block interval.
    pub time_compression: f64,
    /// Devices per configuration.
    pub devices: BTreeMap<String, u64>,
    /// Device profile per configuration.
    pub profiles: BTreeMap<String, String>,
    /// The fleet's hash budget per configuration (hashes per second).
    pub hash_budget_hps: BTreeMap<String, f64>,
    /// The lab's version.
    pub version: String,
    /// The source commit the lab was built from.
    pub commit: String,
    /// Third-party roles and their versions.
    pub third_party: BTreeMap<String, String>,
    /// Keys beyond these, kept as they came.
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// The machine (docs/metrics.md "host").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Host {
    /// CPU cores.
    pub cores: u64,
    /// The CPU's model name.
    pub cpu_model: String,
    /// Total memory, in bytes.
    pub memory_bytes: u64,
    /// Percent of all cores (100 = every core busy), over the run.
    pub cpu_pct_mean: Option<f64>,
    /// The highest CPU sample, in percent of all cores.
    pub cpu_pct_max: Option<f64>,
    /// Fraction (0..=1) of the run's CPU samples above 85%: above 0.1 the run is invalid.
    pub cpu_busy_fraction: Option<f64>,
    /// The host's uptime, in seconds.
    pub uptime_s: f64,
    /// Percent of the filesystem in use; `null` when unknown.
    pub fs_used_pct: Option<f64>,
    /// The kernel release.
    pub kernel: String,
    /// Keys beyond these, kept as they came.
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// Everything measured of one configuration (docs/metrics.md, "Metrics, per configuration").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigResults {
    /// This configuration's share of the run's validity (the top level gathers them).
    pub valid: bool,
    /// Why this configuration is invalid; empty when `valid`.
    pub invalid_reasons: Vec<String>,
    /// Share counts at the farm edge.
    pub shares: Shares,
    /// Upstream of an aggregating proxy or translator; `null` when there is none.
    pub pool_shares: Option<Shares>,
    /// The distinct workers the pool credited with an accepted share: 1 behind an aggregated
    /// channel, every device for sv1 and C-workers; `null` for a pool without a worker list.
    #[serde(default)]
    pub pool_workers: Option<u64>,
    /// How well the roles estimated the devices' hash rate and set their difficulty, against
    /// the fleet's ground truth; `null` when not scored.
    #[serde(default)]
    pub estimation: Option<Estimation>,
    /// What the protocols themselves cost on the links.
    #[serde(default)]
    pub protocol: ProtocolCost,
    /// Share work at the farm edge.
    pub work: Work,
    /// `work` upstream of the proxy, alongside `pool_shares`.
    #[serde(default)]
    pub pool_work: Option<Work>,
    /// `work.stale_pct` rescaled to 600 s blocks.
    pub stale_pct_mainnet_equiv: Option<f64>,
    /// How `stale_pct_mainnet_equiv` was scaled.
    #[serde(default)]
    pub stale_rescale: StaleRescale,
    /// Blocks found, submitted and orphaned.
    pub blocks: Blocks,
    /// Time-weighted mean value (subsidy + fees) of the templates the devices worked on, in sats.
    pub template_value_sats: Option<f64>,
    /// The same for the best template the node could offer at the same instants, in sats.
    pub network_template_value_sats: Option<f64>,
    /// `template_value_sats - network_template_value_sats`: negative when devices worked on
    /// templates worth less than the best the node offered.
    pub template_value_delta_sats: Option<f64>,
    /// How many of the node's templates reached a device.
    #[serde(default)]
    pub templates: Templates,
    /// From the node making a template available until a device can hash on a job built from
    /// it; one sample per (template, device) (docs/metrics.md, "Time to new job").
    pub time_to_job_ms: Distribution,
    /// As `time_to_job_ms`, first device per template only.
    pub time_to_job_first_ms: Distribution,
    /// From the node's template to the job source (pool, JDC) sending its first job built
    /// from it: the part of time to job spent before any link.
    #[serde(default)]
    pub time_to_job_at_source_ms: Distribution,
    /// From the network's new tip existing in simnet until a device can hash on a job with
    /// the new prevhash.
    pub time_to_job_prevhash_ms: Distribution,
    /// As `time_to_job_prevhash_ms`, first device per tip only.
    pub time_to_job_prevhash_first_ms: Distribution,
    /// From a device's TCP connect to its first job (handshakes included).
    pub time_to_first_job_ms: Distribution,
    /// From a device sending a share to it receiving the verdict.
    pub share_latency_ms: Distribution,
    /// From the device sending the block-solving share until the node accepts the block.
    pub block_propagation_ms: Distribution,
    /// Application bytes per site.
    pub bandwidth: Bandwidth,
    /// Per link name, over the measured window.
    pub links: BTreeMap<String, LinkFigures>,
    /// The WAN link's round trip, configured and measured, in ms.
    pub rtt_ms: Rtt,
    /// Per role process: CPU, memory and socket bytes.
    pub roles: BTreeMap<String, RoleFigures>,
    /// The fleet's achieved hash rate against its budget.
    #[serde(default)]
    pub hashrate: Hashrate,
    /// Events that could not be tied to their counterpart (never guessed).
    pub unmatched_events: u64,
    /// `unmatched_events` by what was missing.
    #[serde(default)]
    pub unmatched_by_kind: BTreeMap<String, u64>,
    /// Events that needed a counterpart: the denominator of the 1% validity rule.
    #[serde(default)]
    pub matchable_events: u64,
}

/// Hash-rate estimation and vardiff accuracy (docs/metrics.md, "Estimation").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Estimation {
    /// The pool's per-worker estimates against the truth of the devices behind each worker,
    /// by the pool's averaging window (`1m`, `10m`).
    pub hashrate_error_pct: BTreeMap<String, ErrorPct>,
    /// The pool's estimate of all its miners against the whole fleet, by window.
    #[serde(default)]
    pub total_hashrate_error_pct: BTreeMap<String, ErrorPct>,
    /// From a device's connect, or a hash-rate step, until its difficulty gives a share rate
    /// within 20% of the target, in seconds.
    pub vardiff_converge_s: Distribution,
    /// Connects and steps after which the device had not converged when the run ended.
    #[serde(default)]
    pub vardiff_not_converged: u64,
    /// `vardiff_converge_s` after hash-rate steps only (connects start at the right difficulty
    /// in the lab, so this is where vardiff shows how fast it follows).
    #[serde(default)]
    pub vardiff_converge_after_step_s: Distribution,
    /// Of `vardiff_not_converged`, the steps; `null` in a run without steps.
    #[serde(default)]
    pub vardiff_not_converged_after_step: Option<u64>,
    /// The share rate the devices' difficulty gives, against the target, outside the spans
    /// still converging; `null` with no sample.
    pub share_rate_deviation_pct: Option<ErrorPct>,
    /// Other roles' estimates, by role (`translator`).
    #[serde(default)]
    pub roles: BTreeMap<String, RoleEstimation>,
}

/// What the protocols cost on the links (docs/metrics.md, "Protocol cost").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProtocolCost {
    /// By the counting role and its link name (`pool.sv2`, `translator.upstream`), then
    /// direction (`up`, `down`), then message type: what the roles that framed them counted in
    /// the measured window.
    #[serde(default)]
    pub messages: BTreeMap<String, BTreeMap<String, BTreeMap<String, MessageFigures>>>,
    /// By role and link, as `messages`: the share of its messages' wire bytes that is not their
    /// payload (framing, Noise's MACs, SV1's line ends), in percent.
    #[serde(default)]
    pub overhead_pct: BTreeMap<String, f64>,
    /// By role and link, as `messages`: the mean bytes of one Noise handshake each way, over
    /// the whole run.
    #[serde(default)]
    pub handshake_bytes: BTreeMap<String, UpDown>,
    /// From a pool-site role of ours accepting a connection until its Noise handshake is done,
    /// over the whole run.
    #[serde(default)]
    pub handshake_ms: Distribution,
    /// The WAN link's bytes over the measured window per share the pool accepted in it (the
    /// figure a farm pays for); `null` with no accepted share or no WAN link.
    pub wan_bytes_per_accepted_share: Option<UpDown>,
}

/// Messages of one type on one link in one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageFigures {
    /// Messages.
    pub count: u64,
    /// Their wire bytes (framing and encryption included).
    pub bytes: u64,
    /// `bytes / count`.
    pub mean_bytes: f64,
    /// Of `bytes`, the messages' own payload.
    pub payload_bytes: u64,
}

/// A figure in each direction of a link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpDown {
    /// Towards the pool.
    pub up: f64,
    /// Towards the devices.
    pub down: f64,
}

/// A role's own hash-rate estimates besides the pool's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleEstimation {
    /// By the role's window (`current` for a translator's figure of its devices).
    pub hashrate_error_pct: BTreeMap<String, ErrorPct>,
}

/// Signed errors in percent, summarized.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorPct {
    /// Samples.
    pub n: u64,
    /// Median of the error's magnitude.
    pub p50: f64,
    /// 90th percentile of the error's magnitude.
    pub p90: f64,
    /// Mean signed error: above 0, an overestimate.
    pub bias: f64,
}

/// Share counts at one edge. `submitted = accepted + stale + rejected + unanswered`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Shares {
    /// Shares the devices sent.
    pub submitted: u64,
    /// Shares the pool accepted.
    pub accepted: u64,
    /// Rejected because the job was superseded (docs/metrics.md's only meaning of stale).
    pub stale: u64,
    /// Rejected for any other reason.
    pub rejected: u64,
    /// No verdict by the end of the run (drain included).
    pub unanswered: u64,
    /// `accepted / submitted x 100`; `null` with nothing submitted.
    pub acceptance_pct: Option<f64>,
    /// `stale / submitted x 100`, by count.
    #[serde(default)]
    pub stale_pct: Option<f64>,
    /// Every rejection by reason, `stale` included: the values sum to `stale + rejected`. The
    /// reason is the lab's: a share the pool called an unknown job, whose job a new tip had
    /// superseded by the time the verdict came, is stale here (`lab::metrics::shares`).
    pub rejected_by_reason: BTreeMap<String, u64>,
    /// The same rejections by the reason the pool itself gave; it differs from
    /// `rejected_by_reason` only where the lab reclassified a rejection as stale.
    #[serde(default)]
    pub pool_reason: BTreeMap<String, u64>,
}

/// Work in difficulty-1 units, so that per-device SV1 shares and aggregated SV2 shares compare.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Work {
    /// Sum of the submitted shares' difficulties.
    pub submitted: f64,
    /// Sum of the accepted shares' difficulties.
    pub accepted: f64,
    /// Sum of the stale shares' difficulties.
    #[serde(default)]
    pub stale: f64,
    /// `stale / submitted x 100`, by work; `null` with nothing submitted.
    pub stale_pct: Option<f64>,
}

/// The tip rate `stale_pct_mainnet_equiv` was rescaled from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StaleRescale {
    /// New network tips whose existence fell in the measured window.
    pub tips: u64,
    /// The measured window, in seconds.
    pub measured_s: f64,
    /// Tips per second the factor is based on: measured when `tips > 0`, else the configured
    /// block interval's.
    pub tips_per_s: Option<f64>,
    /// `(1/600) / tips_per_s`: what the raw stale percentage is multiplied by.
    pub factor: Option<f64>,
}

/// Blocks of one configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Blocks {
    /// Solutions of this configuration's devices that a node accepted as a new tip.
    pub found: u64,
    /// Distinct blocks the job source submitted (pool `BlockSubmitted`, proxies included).
    pub submitted: u64,
    /// Found, but not on the network's final best chain.
    pub orphaned: u64,
    /// Found blocks below the part of the best chain the events show (should stay 0).
    #[serde(default)]
    pub orphan_undetermined: u64,
}

/// How many of the job source node's templates reached a device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Templates {
    /// Templates the node made in the measured window.
    pub created: u64,
    /// Of those, templates at least one device received a job from.
    pub reached_devices: u64,
}

/// A distribution in milliseconds (docs/metrics.md, "Statistics").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Samples.
    pub n: u64,
    /// Mean, in ms; `null` with no samples.
    pub mean: Option<f64>,
    /// Median, in ms.
    pub p50: Option<f64>,
    /// 95th percentile, in ms.
    pub p95: Option<f64>,
    /// 99th percentile, in ms.
    pub p99: Option<f64>,
    /// Largest sample, in ms.
    pub max: Option<f64>,
    /// 95% confidence interval of the mean, treating each cluster as one sample; `null` with
    /// fewer than two clusters.
    pub ci95: Option<[f64; 2]>,
    /// Independent units behind the samples (templates, tips, shares, ...).
    #[serde(default)]
    pub clusters: u64,
    /// With no samples, why; omitted otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absent_reason: Option<String>,
}

/// Bytes per second and in total at each site (docs/metrics.md, "Bandwidth").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    /// The farm site: the WAN link plus the farm-side node's peer traffic.
    pub farm: SiteBandwidth,
    /// The pool site's WAN-facing roles (not the pool's traffic with its own node).
    pub pool: SiteBandwidth,
}

/// Application bytes leaving (tx) and entering (rx) a site, over the measured window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteBandwidth {
    /// Bytes per second leaving the site (`tx_Bps`).
    #[serde(rename = "tx_Bps")]
    pub tx_bps: f64,
    /// Bytes per second entering the site (`rx_Bps`).
    #[serde(rename = "rx_Bps")]
    pub rx_bps: f64,
    /// Bytes leaving the site.
    pub tx_bytes: u64,
    /// Bytes entering the site.
    pub rx_bytes: u64,
}

/// One link's bytes over the measured window: up is the way shares travel, down the way jobs do.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkFigures {
    /// Bytes sent up (towards the pool).
    pub up_bytes: u64,
    /// Bytes sent down (towards the devices).
    pub down_bytes: u64,
    /// Bytes per second up (`up_Bps`).
    #[serde(rename = "up_Bps")]
    pub up_bps: f64,
    /// Bytes per second down (`down_Bps`).
    #[serde(rename = "down_Bps")]
    pub down_bps: f64,
}

/// The WAN link's round trip, in ms.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rtt {
    /// The configured round trip, in ms; `null` when there is none.
    pub configured: Option<f64>,
    /// Mean of the WAN link's measured round trips.
    pub measured: Option<f64>,
    /// Round trips behind `measured`.
    #[serde(default)]
    pub measured_n: u64,
}

/// One role process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleFigures {
    /// `pool`, `fleet`, `tap`, `proxy`, ...
    #[serde(default)]
    pub kind: String,
    /// `farm` or `pool`.
    #[serde(default)]
    pub site: String,
    /// Mean CPU, in percent (100 = one core busy).
    pub cpu_pct_mean: Option<f64>,
    /// Highest CPU sample, in percent (100 = one core busy).
    pub cpu_pct_max: Option<f64>,
    /// Peak resident memory, in bytes.
    pub rss_bytes_max: Option<u64>,
    /// Socket bytes the role sent, by its own count.
    pub net_tx_bytes: u64,
    /// Socket bytes the role received, by its own count.
    pub net_rx_bytes: u64,
    /// False when the role emitted no `LinkBytes`: its net bytes are 0 for want of a count,
    /// not measured as 0.
    #[serde(default)]
    pub net_bytes_reported: bool,
}

/// The fleet's hash rate against its budget (the 5% validity rule).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hashrate {
    /// The fleet's configured hash budget, in hashes per second.
    pub budget_hps: Option<f64>,
    /// Over the measured window, from `HashesDone`.
    pub achieved_hps: Option<f64>,
}

/// A map that keeps insertion order in JSON, in both directions.
#[derive(Clone, Debug, PartialEq)]
pub struct OrderedMap<V>(pub Vec<(String, V)>);

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        OrderedMap(Vec::new())
    }
}

impl<V> OrderedMap<V> {
    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Replaces the value under `key`, or appends it.
    pub fn insert(&mut self, key: impl Into<String>, value: V) {
        let key = key.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }

    /// The entries, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<V> std::ops::Index<&str> for OrderedMap<V> {
    type Output = V;
    fn index(&self, key: &str) -> &V {
        self.get(key)
            .unwrap_or_else(|| panic!("no entry {key:?} in the map"))
    }
}

impl<V: Serialize> Serialize for OrderedMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Ordered<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Ordered<V> {
            type Value = OrderedMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(a.size_hint().unwrap_or(0));
                while let Some((k, v)) = a.next_entry::<String, V>()? {
                    out.push((k, v));
                }
                Ok(OrderedMap(out))
            }
        }
        d.deserialize_map(Ordered(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_keep_their_order_through_json() {
        let mut r = Results::default();
        r.configs.insert("sv1", ConfigResults::default());
        r.configs.insert("D", ConfigResults::default());
        r.configs.insert("A", ConfigResults::default());
        let text = serde_json::to_string(&r).unwrap();
        let back: Results = serde_json::from_str(&text).unwrap();
        assert_eq!(back.configs.keys().collect::<Vec<_>>(), ["sv1", "D", "A"]);
        assert_eq!(back, r);
    }

    #[test]
    fn metrics_md_keys_are_spelled_as_there() {
        let mut c = ConfigResults::default();
        c.links.insert("wan".into(), LinkFigures::default());
        let v = serde_json::to_value(&c).unwrap();
        for key in [
            "shares",
            "pool_shares",
            "pool_workers",
            "estimation",
            "protocol",
            "work",
            "stale_pct_mainnet_equiv",
            "blocks",
            "template_value_sats",
            "network_template_value_sats",
            "template_value_delta_sats",
            "time_to_job_ms",
            "time_to_job_first_ms",
            "time_to_job_prevhash_ms",
            "time_to_job_prevhash_first_ms",
            "time_to_first_job_ms",
            "share_latency_ms",
            "block_propagation_ms",
            "bandwidth",
            "links",
            "rtt_ms",
            "roles",
            "unmatched_events",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert!(v["bandwidth"]["farm"].get("tx_Bps").is_some());
        assert!(v["bandwidth"]["pool"].get("rx_bytes").is_some());
        assert!(v["shares"].get("rejected_by_reason").is_some());
        assert!(v["time_to_job_ms"].get("ci95").is_some());
        assert!(v["links"]["wan"].get("up_Bps").is_some());
    }

    #[test]
    fn unknown_context_keys_survive_a_round_trip() {
        let text = r#"{"scenario":"sv1","duration_s":120,"tap_processes":2}"#;
        let c: Context = serde_json::from_str(text).unwrap();
        assert_eq!(c.scenario, "sv1");
        assert_eq!(c.extra["tap_processes"], 2);
        let again = serde_json::to_value(&c).unwrap();
        assert_eq!(again["tap_processes"], 2);
    }
}
