//! A whole run: its trials as processes ([`crate::orchestrate`]), their events measured
//! ([`crate::metrics`]), results.json, the CSV series and report.html written, and the summary
//! a person reads at the end.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::metrics::{
    assemble, host_busy_fraction, measure, write_outputs, ConfigRun, EstimationInput, LinkSetup,
    LogSource, MetricsError, PoolShares, ProcessUsage, RoleLog, TrialMeasurement,
};
use crate::orchestrate::{
    simnet_link, AuthorityFile, Progress, RunError, Trial, TrialRecord, POOL_DURABILITY,
};
use crate::report::{write_report, ReportError, ReportFiles};
use crate::results::{Context, Distribution, Results};
use crate::scenario::{
    ConfigSpec, PoolImpl, ProxyImpl, Scenario, FARM_NODE, POOL_NODE, SINGLE_NODE,
};
use crate::third_party::{find, locate_external, ThirdPartyError, Tool, POOL_SV2, TRANSLATOR_SV2};
use crate::usage::read_host;

/// Why a run produced no results.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A third-party program is missing or unusable.
    #[error(transparent)]
    ThirdParty(#[from] ThirdPartyError),
    /// A trial failed.
    #[error("trial {trial}: {source}")]
    Trial {
        /// The trial (1-based).
        trial: u32,
        /// What went wrong.
        source: RunError,
    },
    /// A trial's events could not be measured.
    #[error("measuring trial {trial}: {source}")]
    Metrics {
        /// The trial (1-based).
        trial: u32,
        /// What went wrong.
        source: MetricsError,
    },
    /// results.json could not be written.
    #[error("writing results: {0}")]
    Write(#[from] MetricsError),
    /// The report could not be written.
    #[error("writing the report: {0}")]
    Report(#[from] ReportError),
    /// A file could not be written.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// What a finished run wrote.
pub struct RunOutput {
    /// The figures, as results.json holds them.
    pub results: Results,
    /// The report files written.
    pub report: ReportFiles,
}

/// Versions the run records about itself.
#[derive(Clone, Debug, Default)]
pub struct Build {
    /// The lab's version.
    pub version: String,
    /// The source commit the lab was built from.
    pub commit: String,
}

/// Runs every trial of `scenario` with roles started from `exe`, writing into `out`.
pub fn run(
    scenario: &Scenario,
    exe: &Path,
    out: &Path,
    build: &Build,
    progress: &dyn Progress,
) -> Result<RunOutput, LabError> {
    // Third-party roles are located before anything starts, so a missing one fails at once.
    let pool_sv2 = match scenario.specs().find(|c| c.pool == PoolImpl::ReferenceSv2) {
        Some(c) => Some(find(&POOL_SV2, c.name)?),
        None => None,
    };
    let translator_sv2 = match scenario
        .specs()
        .find(|c| c.proxy == Some(ProxyImpl::ReferenceTranslator))
    {
        Some(c) => Some(find(&TRANSLATOR_SV2, c.name)?),
        None => None,
    };
    // External definitions by name: each configuration's own, and the pool a proxy names.
    let mut externals = BTreeMap::new();
    for c in &scenario.configs {
        for (def, e) in scenario.external_definitions(c) {
            if let Some(tool) = locate_external(&def, &e.command[0])? {
                externals.insert(def, tool);
            }
        }
    }
    let mut trials = Vec::new();
    let mut host_cpu = Vec::new();
    for i in 0..scenario.repeat {
        let dir = if scenario.repeat == 1 {
            out.to_owned()
        } else {
            out.join(format!("trial-{}", i + 1))
        };
        let authority = AuthorityFile::create(&dir).map_err(|source| LabError::Trial {
            trial: i + 1,
            source,
        })?;
        let trial = Trial {
            scenario,
            authority: &authority,
            index: i,
            seed: scenario.seed.wrapping_add(u64::from(i)),
            exe,
            dir: &dir,
            progress,
            pool_sv2: pool_sv2.as_ref(),
            translator_sv2: translator_sv2.as_ref(),
            externals: &externals,
        };
        let record = trial.run().map_err(|source| LabError::Trial {
            trial: i + 1,
            source,
        })?;
        progress.stage(&format!("measuring trial {}", i + 1));
        let measured = measure_trial(scenario, &record).map_err(|source| LabError::Metrics {
            trial: i + 1,
            source,
        })?;
        host_cpu.extend(record.host_cpu.iter().copied());
        // Per-role usage series go next to the metric series (the last trial's, when repeated).
        let (cpu, rss) = &record.usage_csv;
        for (name, text) in [("role_cpu_pct.csv", cpu), ("role_rss_bytes.csv", rss)] {
            let path = out.join(name);
            std::fs::write(&path, text).map_err(|source| LabError::Io { path, source })?;
        }
        trials.push(measured);
    }
    let host = read_host(&host_cpu, out);
    let mut third_party = vec![
        ("pool_sv2".to_owned(), pool_sv2),
        ("translator_sv2".to_owned(), translator_sv2),
    ];
    // An external definition's program under `external:NAME`, apart from the pinned tools.
    third_party.extend(
        externals
            .into_iter()
            .map(|(c, t)| (format!("external:{c}"), Some(t))),
    );
    let assembled = assemble(context(scenario, build, &third_party), host, trials);
    write_outputs(out, &assembled)?;
    progress.stage("writing the report");
    let report = write_report(out)?;
    Ok(RunOutput {
        results: assembled.results,
        report,
    })
}

fn measure_trial(s: &Scenario, r: &TrialRecord) -> Result<TrialMeasurement, MetricsError> {
    let simnet = r
        .roles
        .iter()
        .find(|f| f.kind.is_none())
        .and_then(|f| f.events.clone())
        .map(LogSource::File)
        .expect("every trial starts simnet");
    let mut configs = Vec::new();
    for spec in s.specs() {
        let config = &spec.name.to_owned();
        let files: Vec<_> = r
            .roles
            .iter()
            .filter(|f| f.config.as_deref() == Some(config.as_str()))
            .collect();
        // simnet serves every configuration: its CPU and memory are in each one's roles.
        let usage: BTreeMap<String, ProcessUsage> = files
            .iter()
            .copied()
            .chain(r.roles.iter().filter(|f| f.kind.is_none()))
            .filter_map(|f| {
                let u = r.usage.get(&f.name)?;
                Some((
                    f.name.clone(),
                    ProcessUsage {
                        cpu_pct_mean: Some(u.cpu_pct_mean),
                        cpu_pct_max: Some(u.cpu_pct_max),
                        rss_bytes_max: Some(u.rss_bytes_max),
                    },
                ))
            })
            .collect();
        let run = ConfigRun {
            name: config.clone(),
            logs: files
                .iter()
                .filter_map(|f| {
                    Some(RoleLog {
                        name: f.name.clone(),
                        kind: f.kind?,
                        site: f.site,
                        source: LogSource::File(f.events.clone()?),
                    })
                })
                .collect(),
            simnet: simnet.clone(),
            job_source_node: r.job_source_node.get(config).cloned().unwrap_or_default(),
            pool_workers: r.pool_workers.get(config).copied(),
            pool_accepted: r.pool_accepted.get(config).cloned().unwrap_or_default(),
            window: r.window,
            links: LinkSetup {
                wan: r.wan_link.clone(),
                rtt: s.rtt,
                lan_rtt: s.lan_rtt,
                farm_node_peer_link: spec
                    .needs_farm_node()
                    .then(|| simnet_link(true, FARM_NODE, "peer")),
                node_endpoints: node_endpoints(s, spec),
            },
            pool_shares: pool_shares_of(spec),
            block_interval: s.block_interval,
            template_interval: s.template_interval,
            hash_budget_hps: s.hash_budget.hashes_per_sec(),
            usage,
            unlogged: files
                .iter()
                .filter(|f| f.events.is_none())
                .filter_map(|f| Some((f.name.clone(), (f.kind?, f.site))))
                .collect(),
            estimation: EstimationInput {
                devices: s.devices,
                shares_per_minute: s.shares_per_minute,
                step_factors: {
                    let mut steps = s.hash_rate_steps.clone();
                    steps.sort_by_key(|st| st.at());
                    steps.iter().map(|st| st.factor()).collect()
                },
                samples: r.estimates.get(config).cloned().unwrap_or_default(),
            },
        };
        configs.push(measure(&run)?);
    }
    Ok(TrialMeasurement {
        configs,
        host_busy_fraction: host_busy_fraction(&r.host_cpu, r.window.start_ns, r.window.end_ns),
    })
}

/// simnet's endpoints a configuration's roles use, as simnet names them in `LinkBytes`: the
/// pool's (RPC and ZMQ for an SV1 pool, the Template Provider for an SV2 one); with job
/// declaration also the JDS's RPC and the JDCs' Template Provider on the farm node.
fn node_endpoints(s: &Scenario, spec: ConfigSpec) -> Vec<String> {
    let two = s.two_nodes();
    let pool_node = if two { POOL_NODE } else { SINGLE_NODE };
    let mut names: Vec<String> = if spec.needs_template_provider() {
        vec![simnet_link(two, pool_node, "tdp")]
    } else {
        vec![
            simnet_link(two, pool_node, "rpc"),
            simnet_link(two, pool_node, "zmq"),
        ]
    };
    if spec.job_declaration {
        names.push(simnet_link(two, POOL_NODE, "rpc"));
        names.push(simnet_link(two, FARM_NODE, "tdp"));
    }
    names
}

/// Where `pool_shares` come from: a farm proxy facing the pool records them; a JDC does not
/// (and A's translator faces the JDC), so A and B take the pool's own verdicts.
fn pool_shares_of(spec: ConfigSpec) -> PoolShares {
    if spec.job_declaration {
        PoolShares::PoolVerdicts
    } else if spec.proxy.is_some() {
        PoolShares::ProxyUpstream
    } else {
        PoolShares::None
    }
}

fn context(s: &Scenario, build: &Build, third_party: &[(String, Option<Tool>)]) -> Context {
    let per_config = |v: serde_json::Value| -> BTreeMap<String, serde_json::Value> {
        s.configs.iter().map(|c| (c.clone(), v.clone())).collect()
    };
    let mut extra = BTreeMap::new();
    extra.insert(
        "network_difficulty".to_owned(),
        s.network_difficulty().as_f64().into(),
    );
    extra.insert(
        "start_share_difficulty".to_owned(),
        s.start_difficulty().as_f64().into(),
    );
    extra.insert("blocks_per_config".to_owned(), s.blocks_per_config.into());
    extra.insert("shares_per_minute".to_owned(), s.shares_per_minute.into());
    extra.insert("pool_durability".to_owned(), POOL_DURABILITY.into());
    // pool_shares is `null` both without a proxy and behind a proxy that writes no events.
    let blind: serde_json::Map<String, serde_json::Value> = s
        .specs()
        .filter_map(|c| {
            let why = match c.proxy? {
                ProxyImpl::ReferenceTranslator => {
                    "translator_sv2 (third-party) writes no events, and its upstream shares \
                     cross the WAN tap Noise-encrypted: shares upstream of it are not seen"
                }
                ProxyImpl::External => {
                    "an external proxy writes no events: shares upstream of it are not told \
                     apart from its own"
                }
                _ => return None,
            };
            Some((c.name.to_owned(), why.into()))
        })
        .collect();
    if !blind.is_empty() {
        extra.insert("pool_shares_absent_reason".to_owned(), blind.into());
    }
    // Each external definition a configuration ran, as the scenario gave it (placeholders
    // unfilled): its own, and the pool an external proxy names.
    let externals: serde_json::Map<String, serde_json::Value> = s
        .configs
        .iter()
        .flat_map(|c| s.external_definitions(c))
        .filter_map(|(name, e)| Some((name, serde_json::to_value(&e).ok()?)))
        .collect();
    if !externals.is_empty() {
        extra.insert("external".to_owned(), externals.into());
    }
    // The way each configuration's new jobs travel, and the node they start from: what the
    // report explains time-to-job differences with.
    let paths: serde_json::Map<String, serde_json::Value> = s
        .specs()
        .map(|c| {
            let hops: Vec<serde_json::Value> =
                c.job_path().iter().map(|h| h.as_str().into()).collect();
            (c.name.to_owned(), hops.into())
        })
        .collect();
    extra.insert("job_path".to_owned(), paths.into());
    let nodes: serde_json::Map<String, serde_json::Value> = s
        .specs()
        .map(|c| (c.name.to_owned(), s.job_source_node(c).into()))
        .collect();
    extra.insert("job_source_node".to_owned(), nodes.into());
    if s.two_nodes() {
        extra.insert(
            "farm_relay_delay_ms".to_owned(),
            (s.farm_relay_delay.as_secs_f64() * 1e3).into(),
        );
    }
    Context {
        scenario: s.name.clone(),
        configurations: s.configs.clone(),
        duration_s: s.duration.as_secs_f64(),
        warmup_s: s.warmup().as_secs_f64(),
        drain_s: s.drain.as_secs_f64(),
        repeat: s.repeat,
        seed: s.seed,
        rtt_ms: s.rtt.as_secs_f64() * 1e3,
        jitter_ms: s.jitter.as_secs_f64() * 1e3,
        loss_pct: s.loss_pct,
        bandwidth_cap_bps: (s.bandwidth_bps > 0).then(|| s.bandwidth_bps as f64 / 8.0),
        lan_rtt_ms: s.lan_rtt.as_secs_f64() * 1e3,
        block_interval_s: s.block_interval.as_secs_f64(),
        template_interval_s: s.template_interval.as_secs_f64(),
        time_compression: s.time_compression(),
        devices: s
            .configs
            .iter()
            .map(|c| (c.clone(), u64::from(s.devices)))
            .collect(),
        profiles: s
            .configs
            .iter()
            .map(|c| (c.clone(), s.profile.as_str().to_owned()))
            .collect(),
        hash_budget_hps: per_config(s.hash_budget.hashes_per_sec().into())
            .into_iter()
            .map(|(k, v)| (k, v.as_f64().unwrap_or(0.0)))
            .collect(),
        version: build.version.clone(),
        commit: build.commit.clone(),
        third_party: third_party
            .iter()
            .filter_map(|(name, t)| Some((name.clone(), t.as_ref()?.version.clone())))
            .collect(),
        extra,
    }
}

/// The table printed at the end of a run: one column per configuration.
pub fn summary(results: &Results) -> String {
    let configs: Vec<(&str, &crate::results::ConfigResults)> = results.configs.iter().collect();
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("—".to_owned(), |v| format!("{v:.digits$}"));
    let dist = |d: &Distribution| match (d.p50, d.p99) {
        (Some(p50), Some(p99)) => format!("{p50:.1} / {p99:.1}"),
        _ => "—".to_owned(),
    };
    type Row<'a> = (
        &'a str,
        Box<dyn Fn(&crate::results::ConfigResults) -> String>,
    );
    let rows: Vec<Row> = vec![
        (
            "shares submitted",
            Box::new(|c| c.shares.submitted.to_string()),
        ),
        ("accepted", Box::new(|c| c.shares.accepted.to_string())),
        ("stale", Box::new(|c| c.shares.stale.to_string())),
        (
            "rejected (other)",
            Box::new(|c| c.shares.rejected.to_string()),
        ),
        ("unanswered", Box::new(|c| c.shares.unanswered.to_string())),
        (
            "acceptance %",
            Box::new(move |c| opt(c.shares.acceptance_pct, 2)),
        ),
        (
            "stale % of work (mainnet equiv.)",
            Box::new(move |c| {
                format!(
                    "{} ({})",
                    opt(c.work.stale_pct, 3),
                    opt(c.stale_pct_mainnet_equiv, 4)
                )
            }),
        ),
        (
            "time to job ms p50 / p99",
            Box::new(move |c| dist(&c.time_to_job_ms)),
        ),
        (
            "  after a new tip",
            Box::new(move |c| dist(&c.time_to_job_prevhash_ms)),
        ),
        (
            "share latency ms p50 / p99",
            Box::new(move |c| dist(&c.share_latency_ms)),
        ),
        (
            "blocks found / submitted",
            Box::new(|c| format!("{} / {}", c.blocks.found, c.blocks.submitted)),
        ),
        (
            "block propagation ms p50",
            Box::new(|c| {
                c.block_propagation_ms
                    .p50
                    .map_or("—".to_owned(), |v| format!("{v:.1}"))
            }),
        ),
        (
            "farm bandwidth B/s tx / rx",
            Box::new(|c| {
                format!(
                    "{:.0} / {:.0}",
                    c.bandwidth.farm.tx_bps, c.bandwidth.farm.rx_bps
                )
            }),
        ),
        (
            "template value delta sats",
            Box::new(move |c| opt(c.template_value_delta_sats, 0)),
        ),
    ];
    let label_w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(_, f)| configs.iter().map(|(_, c)| f(c)).collect())
        .collect();
    let col_w: Vec<usize> = (0..configs.len())
        .map(|i| {
            cells
                .iter()
                .map(|r| r[i].len())
                .chain(std::iter::once(configs[i].0.len()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let _ = write!(out, "{:label_w$}", "");
    for (i, (name, _)) in configs.iter().enumerate() {
        let _ = write!(out, "  {:>w$}", name, w = col_w[i]);
    }
    out.push('\n');
    for ((label, _), row) in rows.iter().zip(&cells) {
        let _ = write!(out, "{label:label_w$}");
        for (i, cell) in row.iter().enumerate() {
            let _ = write!(out, "  {:>w$}", cell, w = col_w[i]);
        }
        out.push('\n');
    }
    if !results.valid {
        out.push_str("\nThe run is NOT valid:\n");
        for r in &results.invalid_reasons {
            let _ = writeln!(out, "  - {r}");
        }
    }
    out
}
