//! The metric engine: every docs/metrics.md figure of a configuration, from its events.
//!
//! # Use
//!
//! For each configuration of each trial the lab builds a [`ConfigRun`] (its role logs with the
//! role's kind and site, the shared simnet log, the job source node, the [`Window`], the links,
//! the hash budget, the /proc usage per role) and calls [`measure`], which returns a
//! [`Measured`]: raw tallies and samples, mergeable across trials. [`assemble`] turns the
//! trials into [`Results`](crate::results::Results) (with `trials` when there are several, the
//! top level aggregating them exactly: counts and integrals add, samples pool) and
//! [`write_outputs`] writes results.json and the CSV files into the output directory:
//!
//! ```no_run
//! # fn run(configs: Vec<lab::metrics::ConfigRun>, host_cpu: Vec<(u64, f64)>)
//! #     -> Result<(), lab::metrics::MetricsError> {
//! use lab::metrics::{assemble, host_busy_fraction, measure, write_outputs, TrialMeasurement};
//! let (from, to) = (configs[0].window.start_ns, configs[0].window.end_ns);
//! let trial = TrialMeasurement {
//!     configs: configs.iter().map(measure).collect::<Result<_, _>>()?,
//!     host_busy_fraction: host_busy_fraction(&host_cpu, from, to),
//! };
//! let out = assemble(Default::default(), Default::default(), vec![trial]);
//! write_outputs(std::path::Path::new("out"), &out)?;
//! # Ok(()) }
//! ```
//!
//! # What is counted where
//!
//! Logs are read in three passes, the big ones (fleet) once: the simnet log (tips, the job
//! source node's templates, block verdicts, node peer bytes), then the other roles (their own
//! templates and jobs sent, blocks submitted, link bytes and round trips, a proxy's upstream
//! shares), then the fleet logs (jobs, shares, verdicts, connections, hashes), joined against
//! what the first two passes indexed. Each role's events are taken by its kind
//! ([`RoleKind`]): a tap's relayed protocol events are ignored, a pool's verdicts (`Given`) are
//! not the devices' (`Received`).
//!
//! - Shares ([`shares`]): at the farm edge, from the fleet's `ShareSent` and received
//!   `ShareResult`, matched by (device, sequence); counted when *sent* in the measured window
//!   `[warmup_end, drain_start)`; no verdict by the end of the drain = unanswered. `rejected`
//!   excludes stale; `rejected_by_reason` lists every rejection, stale included, by the lab's
//!   reason: a share the pool called an unknown job (or rejected without a customary code)
//!   whose job had been superseded when its verdict came is stale (see [`shares::lab_reason`]);
//!   `pool_reason` keeps the pool's own reasons for the same rejections. Work is the
//!   sum of the difficulties the shares were sent against. `pool_shares`/`pool_work`: the same
//!   upstream of the farm's roles, from where [`PoolShares`] says: a proxy's upstream side, or
//!   the pool's own verdicts (A, B); `null` where devices meet the pool.
//! - `stale_pct_mainnet_equiv` = `work.stale_pct x (1/600 s) / tips_per_s`, with the tips
//!   counted in the measured window (any new network tip, whoever found it), or the configured
//!   block interval when none came; `stale_rescale` shows the figures.
//! - Blocks, orphans and propagation: see [`blocks`].
//! - `time_to_job_at_source_ms`: per node template made in the measured window, from it to
//!   the first `JobSent` (or `JobActivated`) carrying its fingerprint by any pool or proxy
//!   role, no earlier than the template: the job source's share of time to job (a pool's
//!   template pickup and job building, or a JDC's); the rest is links, proxies and devices.
//! - Templates: a job's template is found by fingerprint (which covers the prev hash) in the job
//!   source node's `TemplateCreated` (simnet log), else in a role's own `TemplateCreated` (its
//!   value counts; time to job does not start from a role's template); SV2 standard jobs go
//!   through the job source's `JobSent` on (channel, job id), the job source being the farm
//!   site's roles where one sends channel jobs (A, B's JDC), else the pool site's (the pool's
//!   own channel to a JDC numbers its jobs independently). Value: see [`value`]; delays: see
//!   [`devices`].
//! - Bandwidth, links, RTT and role bytes: see [`traffic`].
//! - `unmatched_events`: jobs whose template is unknown, verdicts without a share, activations
//!   without a future job, jobs stamped before their template or tip; `matchable_events` is
//!   what needed matching (workable jobs, activations, received verdicts).
//! - Validity: see [`validity`].
//! - Hash-rate estimation and vardiff accuracy against the fleet's truth: see [`estimation`].
//! - Messages by type per link, their overhead and the Noise handshakes: see [`protocol`].
//!
//! Distributions are summarized by [`crate::stats`]; their clusters: the template
//! (`time_to_job_ms`, `time_to_job_first_ms`), the tip (`time_to_job_prevhash*`), the
//! connection (`time_to_first_job_ms`), the share (`share_latency_ms`), the block
//! (`block_propagation_ms`).

pub mod blocks;
pub mod devices;
pub mod estimation;
pub mod index;
pub mod input;
pub mod measured;
mod merge;
pub mod output;
pub mod protocol;
pub mod series;
pub mod shares;
pub mod traffic;
pub mod unmatched;
pub mod validity;
pub mod value;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use events::{EventKind, Hash256, Perspective, ReadError};

pub use estimation::{EstimateSample, EstimationInput, Estimator};
pub use input::{
    ConfigRun, LinkSetup, LogSource, PoolShares, ProcessUsage, RoleKind, RoleLog, Site, Window,
};
pub use measured::{Delays, Measured, RoleTally};
pub use output::{assemble, dist_files, series_files, write_outputs, Assembled, TrialMeasurement};
pub use validity::host_busy_fraction;

/// simnet's role name in `roles` (the lab samples it under that name).
pub const SIMNET_ROLE: &str = "simnet";

use devices::FleetPass;
use estimation::Vardiff;
use index::Index;
use series::Series;
use shares::{Matched, ShareBook};
use traffic::Traffic;
use unmatched::Unmatched;

/// Why a trial's events could not be measured or results.json written.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// A role's events could not be read.
    #[error("reading the events of {role}: {source}")]
    Read {
        /// The role's name.
        role: String,
        /// The error.
        #[source]
        source: ReadError,
    },
    /// A file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Computes every figure of one configuration in one trial.
pub fn measure(run: &ConfigRun) -> Result<Measured, MetricsError> {
    let started = Instant::now();
    let w = run.window;
    let node = run.job_source_node.as_str();
    let read_err = |role: &str| {
        let role = role.to_owned();
        move |source| MetricsError::Read { role, source }
    };
    let mut index = Index::default();
    let mut series = Series::new(&w);
    let mut traffic = Traffic::new(w, &run.links, run.logs.len());
    let mut protocol = protocol::ProtocolTally::default();
    let mut events = 0u64;

    run.simnet
        .for_each(|e| {
            events += 1;
            index.on_simnet(e.ts_ns, &e.kind, node);
            traffic.on_simnet(e.ts_ns, &e.kind, &mut series);
        })
        .map_err(read_err("simnet"))?;

    let mut submitted: HashSet<Hash256> = HashSet::new();
    // Per node template, the first job any job source sent from it (or activated).
    let mut at_source: HashMap<u32, u64> = HashMap::new();
    let mut upstream = ShareBook::new(w);
    // Shares upstream are told apart by role, connection and channel: SV2 sequence numbers
    // count per channel, and a per-device translator has a channel per device on one
    // connection.
    let mut upstream_ids: HashMap<(usize, u64, Option<u32>), u32> = HashMap::new();
    let mut upstream_unmatched = Unmatched::default();
    let from_proxy = run.pool_shares == PoolShares::ProxyUpstream;
    let from_pool = run.pool_shares == PoolShares::PoolVerdicts;
    for (i, log) in run.logs.iter().enumerate() {
        if log.kind == RoleKind::Fleet {
            continue;
        }
        let header = log
            .source
            .for_each(|e| {
                events += 1;
                traffic.on_role(i, log.kind, e.ts_ns, &e.kind, &mut series);
                protocol.on_event(&w, &log.name, log.kind, e.ts_ns, &e.kind);
                if !matches!(log.kind, RoleKind::Pool | RoleKind::Proxy) {
                    return;
                }
                index.on_role(i, log.site, e.ts_ns, &e.kind);
                let fingerprint = match &e.kind {
                    EventKind::JobSent(j) => j.fingerprint,
                    EventKind::JobActivated(a) => a.fingerprint,
                    _ => None,
                };
                if let Some(t) = fingerprint.and_then(|f| index.templates.by_fingerprint(f)) {
                    let tpl = index.templates.get(t);
                    if tpl.from_node && e.ts_ns >= tpl.first_ns {
                        let first = at_source.entry(t).or_insert(e.ts_ns);
                        *first = (*first).min(e.ts_ns);
                    }
                }
                match &e.kind {
                    EventKind::BlockSubmitted(b)
                        if e.ts_ns >= w.warmup_end_ns && e.ts_ns <= w.end_ns =>
                    {
                        submitted.insert(b.hash);
                    }
                    EventKind::ShareSent(s) if from_proxy && log.kind == RoleKind::Proxy => {
                        let next = upstream_ids.len() as u32;
                        let id = *upstream_ids.entry((i, s.device, s.channel)).or_insert(next);
                        upstream.sent(id, s.seq, e.ts_ns, s.difficulty, None, None);
                    }
                    EventKind::ShareResult(r)
                        if from_proxy
                            && log.kind == RoleKind::Proxy
                            && r.perspective == Perspective::Received =>
                    {
                        upstream_unmatched.matchable += 1;
                        let next = upstream_ids.len() as u32;
                        let id = *upstream_ids.entry((i, r.conn, r.channel)).or_insert(next);
                        if let Matched::Unmatched =
                            upstream.verdict(id, r.seq, e.ts_ns, r.verdict, |_, _| false, None)
                        {
                            upstream_unmatched.add("upstream_verdict_without_share");
                        }
                    }
                    EventKind::ShareResult(r)
                        if from_pool
                            && log.kind == RoleKind::Pool
                            && log.site == Site::Pool
                            && r.perspective == Perspective::Given =>
                    {
                        // Sent and judged at once, as the pool saw it.
                        let next = upstream_ids.len() as u32;
                        let id = *upstream_ids.entry((i, r.conn, r.channel)).or_insert(next);
                        upstream.sent(id, r.seq, e.ts_ns, r.difficulty, None, None);
                        upstream.verdict(id, r.seq, e.ts_ns, r.verdict, |_, _| false, None);
                    }
                    _ => {}
                }
            })
            .map_err(read_err(&log.name))?;
        check_header(run, log, &header);
    }
    index.templates.seal();

    // Our job sources write events; a third-party pool (D-ref) does not.
    let job_source_logged = run
        .logs
        .iter()
        .any(|l| matches!(l.kind, RoleKind::Pool | RoleKind::Proxy));
    let mut fleet = FleetPass::new(&index, w, series, job_source_logged);
    let mut vardiff = Vardiff::default();
    for (i, log) in run.logs.iter().enumerate() {
        if log.kind != RoleKind::Fleet {
            continue;
        }
        let header = log
            .source
            .for_each(|e| {
                events += 1;
                fleet.on_event(i as u32, e.ts_ns, &e.kind);
                vardiff.on_fleet_event(i as u32, e.ts_ns, &e.kind);
                match e.kind {
                    EventKind::LinkBytes(_) | EventKind::LinkRtt(_) => {
                        traffic.on_role(i, log.kind, e.ts_ns, &e.kind, &mut fleet.series)
                    }
                    // The devices' own count of their link: the only one where a third-party
                    // role serves them.
                    EventKind::LinkMessages(_) => {
                        protocol.on_event(&w, &log.name, log.kind, e.ts_ns, &e.kind)
                    }
                    _ => {}
                }
            })
            .map_err(read_err(&log.name))?;
        check_header(run, log, &header);
    }
    let outcome = fleet.finish();
    traffic.finish();
    upstream.finish();
    if !job_source_logged {
        // A third-party or external pool records nothing: the blocks it submitted are those a
        // node judged (accepted or not) whose header is a share of these devices.
        submitted = fleet
            .block_shares
            .iter()
            .chain(&fleet.refused_block_shares)
            .filter(|(_, &sent)| sent >= w.warmup_end_ns)
            .map(|(h, _)| *h)
            .collect();
    }
    let (blocks, propagation) = blocks::settle(&index.chain, &fleet.block_shares, &submitted, &w);
    let mut unmatched = std::mem::take(&mut fleet.unmatched);
    unmatched.merge(&upstream_unmatched);

    let mut roles = BTreeMap::new();
    for (i, log) in run.logs.iter().enumerate() {
        roles.insert(
            log.name.clone(),
            RoleTally {
                kind: log.kind,
                site: Some(log.site),
                usage: run.usage.get(&log.name).copied().into_iter().collect(),
                bytes: traffic.roles[i],
            },
        );
    }
    if traffic.simnet.reported || run.usage.contains_key(SIMNET_ROLE) {
        roles.insert(
            SIMNET_ROLE.to_owned(),
            RoleTally {
                kind: RoleKind::Other,
                site: Some(Site::Pool),
                usage: run.usage.get(SIMNET_ROLE).copied().into_iter().collect(),
                bytes: traffic.simnet,
            },
        );
    }
    for (name, u) in &run.usage {
        let (kind, site) = match run.unlogged.get(name) {
            Some(&(kind, site)) => (kind, Some(site)),
            None => (RoleKind::Other, None),
        };
        roles.entry(name.clone()).or_insert_with(|| RoleTally {
            kind,
            site,
            usage: vec![*u],
            bytes: Default::default(),
        });
    }

    let tips = index
        .chain
        .tips()
        .filter(|t| w.measured(t.first_ns))
        .count() as u64;
    let m = Measured {
        name: run.name.clone(),
        trials: 1,
        pool_workers: run.pool_workers,
        pool_accepted_counted: w.counter_rise(&run.pool_accepted),
        shares: fleet.shares.tally.clone(),
        pool_shares: match run.pool_shares {
            PoolShares::None => None,
            PoolShares::PoolVerdicts => Some(upstream.tally.clone()),
            // A proxy that writes no events (a third-party one) leaves them unseen: null, not
            // an empty tally.
            PoolShares::ProxyUpstream => run
                .logs
                .iter()
                .any(|l| l.kind == RoleKind::Proxy)
                .then(|| upstream.tally.clone()),
        },
        devices_meet_pool: run.pool_shares == PoolShares::None,
        tips,
        measured_ns: w.measured_ns(),
        block_interval: run.block_interval,
        blocks,
        value: fleet.value.clone(),
        templates_created: outcome.templates_created,
        templates_reached: outcome.templates_reached,
        untied_standard_jobs: fleet.untied_standard_jobs,
        job_source_logged,
        delays: Delays {
            time_to_job: std::mem::take(&mut fleet.time_to_job),
            time_to_job_first: outcome.time_to_job_first,
            time_to_job_at_source: {
                let mut s = crate::stats::Samples::new();
                let mut firsts: Vec<(u32, u64)> = at_source.into_iter().collect();
                firsts.sort_unstable();
                for (t, sent) in firsts {
                    let created = index.templates.get(t).first_ns;
                    if w.measured(created) {
                        s.push(t, sent - created);
                    }
                }
                s
            },
            time_to_job_prevhash: std::mem::take(&mut fleet.time_to_prevhash),
            time_to_job_prevhash_first: outcome.time_to_prevhash_first,
            time_to_first_job: std::mem::take(&mut fleet.time_to_first_job),
            share_latency: std::mem::take(&mut fleet.shares.latency),
            block_propagation: propagation,
        },
        traffic: traffic.tally.clone(),
        rtt_configured: run.links.rtt,
        roles,
        hash_budget_hps: run.hash_budget_hps,
        achieved_hps: vec![outcome.achieved_hps],
        unmatched,
        estimation: vardiff.finish(
            &w,
            &run.estimation,
            run.hash_budget_hps,
            outcome.achieved_hps,
            &(0..fleet.series.len())
                .map(|s| fleet.series.get(Series::HASHES, s))
                .collect::<Vec<_>>(),
            run.pool_workers,
        ),
        series: std::mem::take(&mut fleet.series),
        protocol,
    };
    tracing::info!(config = %run.name, events, elapsed_ms = started.elapsed().as_millis() as u64,
        shares = m.shares.submitted, unmatched = m.unmatched.total(), "metrics computed");
    Ok(m)
}

/// A log written for another configuration or by another kind of role is a wiring mistake in
/// the lab: worth a warning, not a failure (the lab's word on the role is what counts).
fn check_header(run: &ConfigRun, log: &RoleLog, header: &events::Header) {
    let config = header.config.as_str();
    if !config.is_empty() && config != run.name {
        tracing::warn!(role = %log.name, file_config = config, config = %run.name,
            "events file was written for another configuration");
    }
}
