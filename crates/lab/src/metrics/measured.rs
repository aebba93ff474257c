//! Everything measured of one configuration, kept raw so that trials merge exactly, and turned
//! into results.json's figures at the end ([`Measured::results`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::blocks::BlockTally;
use super::estimation::EstimationTally;
use super::input::{ProcessUsage, RoleKind, Site};
use super::merge::tally;
use super::protocol::ProtocolTally;
use super::series::Series;
use super::shares::ShareTally;
use super::traffic::{RoleBytes, TrafficTally};
use super::unmatched::Unmatched;
use super::validity;
use super::value::ValueTally;
use crate::results::{
    Bandwidth, Blocks, ConfigResults, Hashrate, ProtocolCost, RoleFigures, Rtt, StaleRescale,
    Templates, UpDown,
};
use crate::stats::{summarize, Samples};

/// Mainnet's block interval: the yardstick of `stale_pct_mainnet_equiv`.
const MAINNET_BLOCK_INTERVAL_S: f64 = 600.0;

/// One role over one or more trials.
#[derive(Clone, Debug, PartialEq)]
pub struct RoleTally {
    /// What the role is.
    pub kind: RoleKind,
    /// `None` for a role the lab sampled but that wrote no log here (simnet, shared).
    pub site: Option<Site>,
    /// Per trial that sampled it.
    pub usage: Vec<ProcessUsage>,
    /// Its own socket bytes.
    pub bytes: RoleBytes,
}

tally! {
    /// The delay distributions, raw.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Delays {
        /// Samples of `time_to_job_ms`, in ns.
        pub time_to_job: Samples,
        /// Samples of `time_to_job_first_ms`, in ns.
        pub time_to_job_first: Samples,
        /// From the node's template to the job source's first job built from it.
        pub time_to_job_at_source: Samples,
        /// Samples of `time_to_job_prevhash_ms`, in ns.
        pub time_to_job_prevhash: Samples,
        /// Samples of `time_to_job_prevhash_first_ms`, in ns.
        pub time_to_job_prevhash_first: Samples,
        /// Samples of `time_to_first_job_ms`, in ns.
        pub time_to_first_job: Samples,
        /// Samples of `share_latency_ms`, in ns.
        pub share_latency: Samples,
        /// Samples of `block_propagation_ms`, in ns.
        pub block_propagation: Samples,
    }
}

impl Delays {
    /// (metric name as in results.json, samples): the `dist_<metric>.csv` files.
    pub fn named(&self) -> [(&'static str, &Samples); 8] {
        [
            ("time_to_job_ms", &self.time_to_job),
            ("time_to_job_first_ms", &self.time_to_job_first),
            ("time_to_job_at_source_ms", &self.time_to_job_at_source),
            ("time_to_job_prevhash_ms", &self.time_to_job_prevhash),
            (
                "time_to_job_prevhash_first_ms",
                &self.time_to_job_prevhash_first,
            ),
            ("time_to_first_job_ms", &self.time_to_first_job),
            ("share_latency_ms", &self.share_latency),
            ("block_propagation_ms", &self.block_propagation),
        ]
    }
}

/// One configuration's raw measurements (one trial, or several merged).
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The configuration's name.
    pub name: String,
    /// Trials merged.
    pub trials: u32,
    /// Shares at the farm edge.
    pub shares: ShareTally,
    /// Upstream of a proxy, when the configuration has one.
    pub pool_shares: Option<ShareTally>,
    /// The devices meet the pool themselves: their shares are the pool's.
    pub devices_meet_pool: bool,
    /// The workers the pool credited with an accepted share (the most of any trial).
    pub pool_workers: Option<u64>,
    /// Shares a third-party pool accepted in the measured window, by its own count (summed
    /// over trials; `None` if any trial lacks it): what the WAN's bytes are divided by where
    /// the lab sees no verdicts.
    pub pool_accepted_counted: Option<f64>,
    /// New network tips in the measured window, and the window's length.
    pub tips: u64,
    /// The measured window's length, summed over trials, in ns.
    pub measured_ns: u64,
    /// The configured block interval.
    pub block_interval: Duration,
    /// Blocks found, submitted and orphaned.
    pub blocks: BlockTally,
    /// Template value, against the network's best.
    pub value: ValueTally,
    /// Templates the node made in the measured window.
    pub templates_created: u64,
    /// Of those, templates that reached a device.
    pub templates_reached: u64,
    /// SV2 standard jobs that could not be tied to a template because the job source writes
    /// no events (a third-party pool).
    pub untied_standard_jobs: u64,
    /// Whether the job source (pool, JDC, or proxy) writes events: a third-party or external
    /// one does not, and what only its events tell is then not measured.
    pub job_source_logged: bool,
    /// The delay distributions.
    pub delays: Delays,
    /// Bytes per site and link, and WAN round trips.
    pub traffic: TrafficTally,
    /// The WAN round trip the link was told to emulate.
    pub rtt_configured: Duration,
    /// Per role name.
    pub roles: BTreeMap<String, RoleTally>,
    /// The fleet's hash budget, in hashes per second.
    pub hash_budget_hps: f64,
    /// Achieved hash rate per trial (None where a trial had no `HashesDone`).
    pub achieved_hps: Vec<Option<f64>>,
    /// Events that could not be tied to their counterpart.
    pub unmatched: Unmatched,
    /// Counts per second.
    pub series: Series,
    /// Hash-rate estimation and vardiff accuracy.
    pub estimation: EstimationTally,
    /// Messages by type per link, and handshakes.
    pub protocol: ProtocolTally,
}

impl Measured {
    /// Adds another trial of the same configuration.
    pub fn merge(&mut self, o: &Measured) {
        self.trials += o.trials;
        self.shares.merge(&o.shares);
        match (&mut self.pool_shares, &o.pool_shares) {
            (Some(a), Some(b)) => a.merge(b),
            (None, Some(b)) => self.pool_shares = Some(b.clone()),
            _ => {}
        }
        self.pool_workers = self.pool_workers.max(o.pool_workers);
        // The WAN's bytes add up over every trial: a trial without the count leaves none.
        self.pool_accepted_counted = self
            .pool_accepted_counted
            .zip(o.pool_accepted_counted)
            .map(|(a, b)| a + b);
        self.tips += o.tips;
        self.measured_ns += o.measured_ns;
        self.blocks.merge(&o.blocks);
        self.value.merge(&o.value);
        self.templates_created += o.templates_created;
        self.templates_reached += o.templates_reached;
        self.untied_standard_jobs += o.untied_standard_jobs;
        self.job_source_logged &= o.job_source_logged;
        self.delays.merge(&o.delays);
        self.traffic.merge(&o.traffic);
        for (name, r) in &o.roles {
            match self.roles.get_mut(name) {
                Some(mine) => {
                    mine.usage.extend_from_slice(&r.usage);
                    mine.bytes.up += r.bytes.up;
                    mine.bytes.down += r.bytes.down;
                    mine.bytes.reported |= r.bytes.reported;
                }
                None => {
                    self.roles.insert(name.clone(), r.clone());
                }
            }
        }
        self.achieved_hps.extend_from_slice(&o.achieved_hps);
        self.unmatched.merge(&o.unmatched);
        self.series.merge(&o.series);
        self.estimation.merge(&o.estimation);
        self.protocol.merge(&o.protocol);
    }

    /// Mean achieved hash rate over the trials that recorded one.
    pub fn achieved_hps(&self) -> Option<f64> {
        let v: Vec<f64> = self.achieved_hps.iter().flatten().copied().collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// The scaling of the stale rate to 600 s blocks: stale shares come from tip changes, so
    /// the rate scales with tips per second. Measured tips when there were any, else the
    /// configured block interval.
    pub fn stale_rescale(&self) -> StaleRescale {
        let measured_s = self.measured_ns as f64 / 1e9;
        let tips_per_s = if self.tips > 0 && measured_s > 0.0 {
            Some(self.tips as f64 / measured_s)
        } else if !self.block_interval.is_zero() {
            Some(1.0 / self.block_interval.as_secs_f64())
        } else {
            None
        };
        StaleRescale {
            tips: self.tips,
            measured_s,
            tips_per_s,
            factor: tips_per_s.map(|r| (1.0 / MAINNET_BLOCK_INTERVAL_S) / r),
        }
    }

    /// The WAN's bytes per share the pool accepted: upstream of a proxy where there is one,
    /// else at the farm edge (the devices meet the pool).
    fn protocol_cost(&self) -> ProtocolCost {
        // Behind a third-party proxy the verdicts are unseen: a third-party pool's own count
        // where it gives one, else no figure rather than the farm edge's, which counts every
        // device share.
        let accepted = match (&self.pool_shares, self.devices_meet_pool) {
            (Some(p), _) => p.shares().accepted as f64,
            (None, true) => self.shares.shares().accepted as f64,
            (None, false) => self.pool_accepted_counted.unwrap_or(0.0),
        };
        ProtocolCost {
            messages: self.protocol.messages(),
            overhead_pct: self.protocol.overhead_pct(),
            handshake_bytes: self.protocol.handshake_bytes(),
            handshake_ms: self.protocol.handshake_ms(),
            wan_bytes_per_accepted_share: self.traffic.wan_bytes().filter(|_| accepted > 0.0).map(
                |(up, down)| UpDown {
                    up: up as f64 / accepted,
                    down: down as f64 / accepted,
                },
            ),
        }
    }

    fn no_template_reason(&self) -> &'static str {
        if self.untied_standard_jobs > 0 {
            "SV2 standard jobs carry only a merkle root, and this pool (third-party) writes no \
             events to tie a job to its template; time_to_job_prevhash_ms still holds"
        } else {
            "no device received a job from a template the node made in the measured window"
        }
    }

    /// results.json's figures for this configuration.
    pub fn results(&self) -> ConfigResults {
        let rescale = self.stale_rescale();
        let d = &self.delays;
        let value = self.value.device_mean();
        let network = self.value.network_mean();
        let reasons = validity::config_reasons(self);
        ConfigResults {
            valid: reasons.is_empty(),
            invalid_reasons: reasons,
            shares: self.shares.shares(),
            pool_shares: self.pool_shares.as_ref().map(|s| s.shares()),
            pool_workers: self.pool_workers,
            estimation: self.estimation.results(),
            protocol: self.protocol_cost(),
            work: self.shares.work(),
            pool_work: self.pool_shares.as_ref().map(|s| s.work()),
            stale_pct_mainnet_equiv: self
                .shares
                .work_stale_pct()
                .zip(rescale.factor)
                .map(|(p, f)| p * f),
            stale_rescale: rescale,
            blocks: Blocks {
                found: self.blocks.found,
                submitted: self.blocks.submitted,
                orphaned: self.blocks.orphaned,
                orphan_undetermined: self.blocks.undetermined,
            },
            template_value_sats: value,
            network_template_value_sats: network,
            template_value_delta_sats: value.zip(network).map(|(v, n)| v - n),
            templates: Templates {
                created: self.templates_created,
                reached_devices: self.templates_reached,
            },
            time_to_job_ms: summarize(&d.time_to_job, self.no_template_reason()),
            time_to_job_first_ms: summarize(&d.time_to_job_first, self.no_template_reason()),
            time_to_job_at_source_ms: summarize(
                &d.time_to_job_at_source,
                if self.job_source_logged {
                    "no job source recorded a job of a node template of the measured window"
                } else {
                    "not measured: the job source is a third-party or external role, which \
                     writes no events"
                },
            ),
            time_to_job_prevhash_ms: summarize(
                &d.time_to_job_prevhash,
                "no new tip in the measured window reached a device",
            ),
            time_to_job_prevhash_first_ms: summarize(
                &d.time_to_job_prevhash_first,
                "no new tip in the measured window reached a device",
            ),
            time_to_first_job_ms: summarize(
                &d.time_to_first_job,
                "no device connection (ConnectionOpened) followed by a job",
            ),
            share_latency_ms: summarize(
                &d.share_latency,
                "no share sent in the measured window got a verdict",
            ),
            block_propagation_ms: summarize(
                &d.block_propagation,
                "no block found in the measured window was accepted by the job source node",
            ),
            bandwidth: Bandwidth {
                farm: self.traffic.site(Site::Farm),
                pool: self.traffic.site(Site::Pool),
            },
            links: self.traffic.links(),
            rtt_ms: Rtt {
                configured: Some(self.rtt_configured.as_secs_f64() * 1e3),
                measured: self.traffic.rtt_measured_ms(),
                measured_n: self.traffic.rtt_n,
            },
            roles: self
                .roles
                .iter()
                .map(|(name, r)| (name.clone(), role_figures(r)))
                .collect(),
            hashrate: Hashrate {
                budget_hps: (self.hash_budget_hps > 0.0).then_some(self.hash_budget_hps),
                achieved_hps: self.achieved_hps(),
            },
            unmatched_events: self.unmatched.total(),
            unmatched_by_kind: self
                .unmatched
                .by_kind
                .iter()
                .map(|(k, n)| ((*k).to_owned(), *n))
                .collect(),
            matchable_events: self.unmatched.matchable,
        }
    }
}

/// Pass-through usage (the mean of trials' means, the max of their maxima) and own bytes.
fn role_figures(r: &RoleTally) -> RoleFigures {
    let means: Vec<f64> = r.usage.iter().filter_map(|u| u.cpu_pct_mean).collect();
    let (tx, rx) = r.bytes.tx_rx(r.kind, r.site.unwrap_or(Site::Pool));
    RoleFigures {
        kind: r.kind.as_str().to_owned(),
        site: r.site.map_or("", Site::as_str).to_owned(),
        cpu_pct_mean: (!means.is_empty()).then(|| means.iter().sum::<f64>() / means.len() as f64),
        cpu_pct_max: r
            .usage
            .iter()
            .filter_map(|u| u.cpu_pct_max)
            .reduce(f64::max),
        rss_bytes_max: r.usage.iter().filter_map(|u| u.rss_bytes_max).max(),
        net_tx_bytes: tx,
        net_rx_bytes: rx,
        net_bytes_reported: r.bytes.reported,
    }
}
