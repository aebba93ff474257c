//! The key figures of a run (docs/metrics.md, "The report"): which numbers of results.json
//! say what a configuration changed, which way is better, and how two of them compare with
//! their intervals. The findings compare configurations within a run with them, and the
//! comparison of two runs compares each configuration across the runs.
//!
//! The interval of a difference of two means is taken from the two means' own intervals as if
//! they were independent and normal (half-widths added in quadrature): configurations run on
//! separate fleets, pools and links, and two runs share nothing.

use serde_json::Value;

use super::results_json::{at, number_at};
pub(crate) use super::summary::Better;
use super::units::Unit;

/// How a key figure is read from one configuration's results.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source {
    /// A distribution's mean and its `ci95`.
    Mean(&'static str),
    /// A plain number at a path.
    Number(&'static [&'static str]),
    /// The number at the first of these paths that holds one: the same figure where roles
    /// give it in different forms.
    FirstNumber(&'static [&'static [&'static str]]),
    /// `tx_Bps + rx_Bps` of a `bandwidth` entry.
    Bandwidth(&'static str),
    /// The sum over the configuration's roles at `site` (`farm` or `pool`) that are part of
    /// the protocol stack (kind `proxy` or `pool`; not the lab's fleets, taps or simnet).
    Roles {
        site: &'static str,
        field: &'static str,
    },
}

/// A key figure of the findings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Key {
    pub(crate) id: &'static str,
    pub(crate) title: &'static str,
    /// The figure in words, after a configuration's name ("A: ... 12 ms").
    pub(crate) what: &'static str,
    pub(crate) unit: Unit,
    pub(crate) better: Better,
    pub(crate) source: Source,
    /// Whether a change relative to the baseline means something (not for a figure that is
    /// itself a difference and can be negative).
    pub(crate) relative: bool,
}

/// The key figures, in the order the findings give them.
pub(crate) const KEYS: [Key; 18] = [
    Key {
        id: "time_to_job_ms",
        title: "Time to new job",
        what: "mean time from a template to the devices' job",
        unit: Unit::Millis,
        better: Better::Lower,
        source: Source::Mean("time_to_job_ms"),
        relative: true,
    },
    Key {
        id: "time_to_job_prevhash_ms",
        title: "Time to new job after a new tip",
        what: "mean time from a new block to the devices' job on it",
        unit: Unit::Millis,
        better: Better::Lower,
        source: Source::Mean("time_to_job_prevhash_ms"),
        relative: true,
    },
    Key {
        id: "stale_pct_mainnet_equiv",
        title: "Stale work at mainnet scale",
        what: "share of work stale, rescaled to 600 s blocks",
        unit: Unit::Percent,
        better: Better::Lower,
        source: Source::Number(&["stale_pct_mainnet_equiv"]),
        relative: true,
    },
    Key {
        id: "block_propagation_ms",
        title: "Block propagation",
        what: "mean time from a found block to the network",
        unit: Unit::Millis,
        better: Better::Lower,
        source: Source::Mean("block_propagation_ms"),
        relative: true,
    },
    Key {
        id: "template_value_delta_sats",
        title: "Template value",
        what: "mean value of the mined templates against the network's best",
        unit: Unit::Sats,
        better: Better::Higher,
        source: Source::Number(&["template_value_delta_sats"]),
        relative: false,
    },
    Key {
        id: "bandwidth_farm",
        title: "Farm bandwidth",
        what: "the farm's WAN traffic, both directions",
        unit: Unit::BytesPerSec,
        better: Better::Lower,
        source: Source::Bandwidth("farm"),
        relative: true,
    },
    Key {
        id: "bandwidth_pool",
        title: "Pool bandwidth",
        what: "the pool's traffic for this farm, both directions",
        unit: Unit::BytesPerSec,
        better: Better::Lower,
        source: Source::Bandwidth("pool"),
        relative: true,
    },
    Key {
        id: "farm_cpu",
        title: "Farm CPU",
        what: "mean CPU of the farm's roles (proxies, JDC)",
        unit: Unit::CpuPct,
        better: Better::Lower,
        source: Source::Roles {
            site: "farm",
            field: "cpu_pct_mean",
        },
        relative: true,
    },
    Key {
        id: "pool_cpu",
        title: "Pool CPU",
        what: "mean CPU of the pool's roles (pool, JDS)",
        unit: Unit::CpuPct,
        better: Better::Lower,
        source: Source::Roles {
            site: "pool",
            field: "cpu_pct_mean",
        },
        relative: true,
    },
    Key {
        id: "farm_pool_memory",
        title: "Farm and pool memory",
        what: "peak memory of the farm's and the pool's roles together",
        unit: Unit::Bytes,
        better: Better::Lower,
        source: Source::Roles {
            site: "*",
            field: "rss_bytes_max",
        },
        relative: true,
    },
    Key {
        id: "wan_bytes_per_share",
        title: "WAN bytes per accepted share",
        what: "the farm's WAN traffic up, per share the pool accepted",
        unit: Unit::Bytes,
        better: Better::Lower,
        source: Source::Number(&["protocol", "wan_bytes_per_accepted_share", "up"]),
        relative: true,
    },
    Key {
        id: "pool_workers",
        title: "Workers the pool sees",
        what: "distinct workers the pool credited with accepted shares",
        unit: Unit::Count,
        better: Better::Higher,
        source: Source::Number(&["pool_workers"]),
        relative: false,
    },
    Key {
        id: "hashrate_error_1m",
        title: "Hash-rate estimate error",
        what: "median error of the pool's one-minute per-worker hash rate against the truth",
        unit: Unit::Percent,
        better: Better::Lower,
        source: Source::Number(&["estimation", "hashrate_error_pct", "1m", "p50"]),
        relative: false,
    },
    Key {
        id: "hashrate_error_shown",
        title: "Hash-rate error the operator sees",
        what: "median error of the per-worker hash rate the pool shows against the truth (its \
               one-minute figure; a pool that keeps no window: its current one)",
        unit: Unit::Percent,
        better: Better::Lower,
        source: Source::FirstNumber(&[
            &["estimation", "hashrate_error_pct", "1m", "p50"],
            &["estimation", "hashrate_error_pct", "current", "p50"],
        ]),
        relative: false,
    },
    Key {
        id: "proxy_hashrate_error",
        title: "Farm proxy's hash-rate error",
        what: "median error of the hash rate the farm proxy reports for its devices against \
               the truth",
        unit: Unit::Percent,
        better: Better::Lower,
        source: Source::Number(&[
            "estimation",
            "roles",
            "translator",
            "hashrate_error_pct",
            "current",
            "p50",
        ]),
        relative: false,
    },
    Key {
        id: "vardiff_converge_after_step_s",
        title: "Vardiff after a hash-rate step",
        what: "median time from a step in the devices' hash rate until their difficulty gives \
               the target share rate within 20%, of the devices that got there",
        unit: Unit::Seconds,
        better: Better::Lower,
        source: Source::Number(&["estimation", "vardiff_converge_after_step_s", "p50"]),
        relative: true,
    },
    Key {
        id: "vardiff_not_converged_after_step",
        title: "Devices left off target after a step",
        what: "hash-rate steps after which a device's share rate never came within 20% of the \
               target before the run ended",
        unit: Unit::Count,
        better: Better::Lower,
        source: Source::Number(&["estimation", "vardiff_not_converged_after_step"]),
        relative: false,
    },
    Key {
        id: "share_rate_deviation",
        title: "Share rate off target",
        what: "90th percentile of the distance of the devices' share rate from the target, \
               once converged (the median device sits on it: the lab starts every device there)",
        unit: Unit::Percent,
        better: Better::Lower,
        source: Source::Number(&["estimation", "share_rate_deviation_pct", "p90"]),
        relative: false,
    },
];

/// One configuration's value of a key figure, with its 95% interval where the results give one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Value95 {
    pub(crate) value: f64,
    pub(crate) ci: Option<(f64, f64)>,
}

impl Value95 {
    fn half_width(&self) -> Option<f64> {
        self.ci.map(|(lo, hi)| (hi - lo) / 2.0)
    }
}

pub(crate) fn read(key: &Key, config: &Value) -> Option<Value95> {
    match key.source {
        Source::Mean(metric) => {
            let d = at(config, &[metric])?;
            let value = number_at(d, &["mean"])?;
            let ci = at(d, &["ci95"])
                .and_then(Value::as_array)
                .and_then(|a| Some((a.first()?.as_f64()?, a.get(1)?.as_f64()?)));
            Some(Value95 { value, ci })
        }
        Source::Number(path) => Some(Value95 {
            value: number_at(config, path)?,
            ci: None,
        }),
        Source::FirstNumber(paths) => Some(Value95 {
            value: paths.iter().find_map(|p| number_at(config, p))?,
            ci: None,
        }),
        Source::Bandwidth(side) => Some(Value95 {
            value: number_at(config, &["bandwidth", side, "tx_Bps"])?
                + number_at(config, &["bandwidth", side, "rx_Bps"])?,
            ci: None,
        }),
        Source::Roles { site, field } => {
            let roles = at(config, &["roles"])?.as_object()?;
            // Results that never measured the field say nothing; a configuration without a
            // role at the site (sv1 has no farm role) measured zero.
            if !roles.values().any(|r| number_at(r, &[field]).is_some()) {
                return None;
            }
            let value = roles
                .values()
                .filter(|r| {
                    let kind = r.get("kind").and_then(Value::as_str);
                    let at_site = r.get("site").and_then(Value::as_str);
                    matches!(kind, Some("proxy" | "pool")) && (site == "*" || at_site == Some(site))
                })
                .filter_map(|r| number_at(r, &[field]))
                .sum();
            Some(Value95 { value, ci: None })
        }
    }
}

/// A configuration against the baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Comparison {
    pub(crate) diff: f64,
    /// The difference's 95% interval, when both sides have one.
    pub(crate) ci: Option<(f64, f64)>,
}

pub(crate) fn compare(base: Value95, other: Value95) -> Comparison {
    let diff = other.value - base.value;
    let ci = match (base.half_width(), other.half_width()) {
        (Some(b), Some(o)) => {
            let h = (b * b + o * o).sqrt();
            Some((diff - h, diff + h))
        }
        _ => None,
    };
    Comparison { diff, ci }
}

impl Comparison {
    /// The interval holds zero: no difference was measured.
    pub(crate) fn inconclusive(&self) -> bool {
        self.ci.is_some_and(|(lo, hi)| lo <= 0.0 && hi >= 0.0)
    }
}

/// A value with its unit (byte figures carry theirs already).
pub(crate) fn show(unit: Unit, v: f64) -> String {
    with_label(unit, unit.prose(v))
}

/// A signed difference with its unit.
pub(crate) fn show_delta(unit: Unit, d: f64) -> String {
    with_label(unit, unit.prose_delta(d))
}

fn with_label(unit: Unit, number: String) -> String {
    match unit.label() {
        "" => number,
        "%" => format!("{number}%"),
        label => format!("{number} {label}"),
    }
}
