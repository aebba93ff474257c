//! `stratumlab bench`: one role at a fixed offered load against other software on the same load
//! (docs/performance.md).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};

use lab::bench::{sv2_pool, translator};

use crate::cmd::fleet::Budget;
use crate::config::{self, Dur};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Our SV2 pool against the SV2 reference pool (pool_sv2, pinned) under the same SV2 device
    /// fleet at the same offered load: CPU per accepted share, latency, and where the CPU went,
    /// each pool pinned to one core with the load on another. Writes rows.jsonl and every
    /// role's files to --out and prints the table and the ratios.
    Sv2Pool(Box<Sv2PoolArgs>),
    /// Our translator against the SV2 reference translator (translator_sv2, pinned) with the
    /// same SV1 device fleet at the same offered load, on the same upstream (our SV2 pool on
    /// simnet): share latency as the devices see it and on the wire at the translator's port
    /// (needs CAP_NET_RAW), against a floor pool; CPU per share, memory per device, job
    /// fan-out. The translator on one core, everything else on another. Writes rows.jsonl and
    /// every role's files to --out and prints the tables and the ratios.
    Translator(Box<TranslatorBenchArgs>),
}

#[derive(Args, Serialize, Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct TranslatorBenchArgs {
    /// TOML file with settings; its keys are the flags' names in snake_case.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// 100 devices, 100 shares/s, 8 s warm-up, 15 s window (unless given), and no
    /// translator_sv2-warn row.
    #[arg(long)]
    pub quick: bool,
    /// SV1 devices [default: 1000, 100 with --quick].
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<u32>,
    /// Total offered shares per second [default: 300, 100 with --quick].
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares_per_s: Option<f64>,
    /// The fleet's hashes per second: sets the share difficulty, not the share rate.
    #[arg(long, default_value = "1MH/s")]
    pub hash_budget: Budget,
    /// Shares per minute the pool asks of the translator (of its one channel, or shared among
    /// the per-device channels).
    #[arg(long, default_value_t = 600.0)]
    pub upstream_spm: f64,
    /// aggregated (one extended channel for every device), or per-device (a channel per device
    /// on the one connection), in both translators.
    #[arg(long, default_value = "aggregated", value_parser = ["aggregated", "per-device"])]
    pub channels: String,
    /// Before the window [default: 20s, 8s with --quick].
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<Dur>,
    /// The measured window [default: 60s, 15s with --quick].
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Dur>,
    /// The rows, of floor, ours, translator_sv2 and translator_sv2-warn [default: all;
    /// --quick: no translator_sv2-warn].
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub rows: Vec<String>,
    /// Repetitions of every row, alternating which translator goes first; ratios within each,
    /// then their median.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// No capture on the wire (and so no floor row).
    #[arg(long)]
    pub no_wire: bool,
    /// The cores for the translator and for everything else (`1,0`).
    #[arg(long, value_delimiter = ',', num_args = 1, default_value = "1,0")]
    pub cpus: Vec<usize>,
    /// Where rows.jsonl and every role's files go [default: results/bench-translator-<timestamp>].
    #[arg(long, value_name = "DIR")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<PathBuf>,
}

impl config::RoleSettings for TranslatorBenchArgs {
    fn config_mut(&mut self) -> &mut Option<PathBuf> {
        &mut self.config
    }
}

#[derive(Args, Serialize, Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct Sv2PoolArgs {
    /// TOML file with settings; its keys are the flags' names in snake_case.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// 10 s warm-up and a 20 s window (unless given), and only ours and pool_sv2 as shipped:
    /// no idle baselines and no like-for-like rows.
    #[arg(long)]
    pub quick: bool,
    /// Devices in the fleet.
    #[arg(long, default_value_t = 500)]
    pub devices: u32,
    /// Total offered shares per second.
    #[arg(long, default_value_t = 300.0)]
    pub shares_per_s: f64,
    /// The fleet's hashes per second: sets the share difficulty, not the share rate.
    #[arg(long, default_value = "2MH/s")]
    pub hash_budget: Budget,
    /// Before the window [default: 20s, 10s with --quick].
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<Dur>,
    /// The measured window [default: 60s, 20s with --quick].
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Dur>,
    /// More total offered shares/s, each a step run after the main load (`1500,4000`); a step
    /// whose generator reached 90% of its core is reported generator-bound.
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub sweep: Vec<f64>,
    /// The pools to run at each load, in order (`ours,pool_sv2,base`): ours, pool_sv2,
    /// ours-dur-off, pool_sv2-warn, base, base-dur-off, floor, floor-epoll [default: ours and
    /// pool_sv2; the full run adds idle baselines, and at the main load ours-dur-off,
    /// pool_sv2-warn and floor].
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub rows: Vec<String>,
    /// The cores for the pool and for its load (`0,1`).
    #[arg(long, value_delimiter = ',', num_args = 1, default_value = "0,1")]
    pub cpus: Vec<usize>,
    /// One more row of our pool with `perf record` over its window; prints its profile.
    #[arg(long)]
    pub perf: bool,
    /// `perf trace -s` on every pool over its window: system calls per accepted share by thread
    /// (the tracing costs CPU: CPU per share in these rows is not comparable with untraced ones).
    #[arg(long)]
    pub trace: bool,
    /// Another stratumlab binary (a build from before a change) whose pool the base rows run.
    #[arg(long, value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<PathBuf>,
    /// Where rows.jsonl and every role's files go [default: results/bench-sv2-pool-<timestamp>].
    #[arg(long, value_name = "DIR")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<PathBuf>,
}

impl config::RoleSettings for Sv2PoolArgs {
    fn config_mut(&mut self) -> &mut Option<PathBuf> {
        &mut self.config
    }
}

pub fn run(cmd: BenchCommand, matches: &clap::ArgMatches) -> Result<()> {
    let (_, flags) = matches.subcommand().expect("clap requires a subcommand");
    match cmd {
        BenchCommand::Sv2Pool(_) => sv2_pool(config::resolve(flags)?),
        BenchCommand::Translator(_) => translator(config::resolve(flags)?),
    }
}

/// This stratumlab, and cargo's examples folder beside it (the floor pools).
fn programs() -> Result<(PathBuf, PathBuf)> {
    let stratumlab = std::env::current_exe().context("locating this stratumlab")?;
    let examples = stratumlab
        .parent()
        .map(|d| d.join("examples"))
        .unwrap_or_default();
    Ok((stratumlab, examples))
}

/// `--out`, or results/NAME-<unix seconds>.
fn out_dir(out: Option<PathBuf>, name: &str) -> PathBuf {
    out.unwrap_or_else(|| {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from(format!("results/{name}-{stamp}"))
    })
}

/// The two cores of `--cpus`.
fn two_cores(cpus: &[usize], what: &str) -> Result<(usize, usize)> {
    match cpus {
        [a, b] => Ok((*a, *b)),
        _ => anyhow::bail!("--cpus takes two cores, {what}"),
    }
}

/// `--rows` parsed.
fn rows<T: std::str::FromStr<Err = String>>(rows: &[String]) -> Result<Vec<T>> {
    rows.iter()
        .map(|r| r.parse::<T>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)
        .context("--rows")
}

fn translator(a: TranslatorBenchArgs) -> Result<()> {
    let (translator_core, load_core) =
        two_cores(&a.cpus, "the translator's and everything else's (`1,0`)")?;
    let mut chosen: Vec<translator::RowKind> = rows(&a.rows)?;
    if chosen.is_empty() {
        chosen = ["floor", "ours", "translator_sv2", "translator_sv2-warn"]
            .iter()
            .take(if a.quick { 3 } else { 4 })
            .map(|r| r.parse().expect("known rows"))
            .collect();
    }
    let (stratumlab, examples) = programs()?;
    let q = a.quick;
    let secs = std::time::Duration::from_secs;
    let opts = translator::Options {
        devices: a.devices.unwrap_or(if q { 100 } else { 1000 }),
        shares_per_s: a.shares_per_s.unwrap_or(if q { 100.0 } else { 300.0 }),
        hash_budget: a.hash_budget.0.hashes_per_sec(),
        upstream_spm: a.upstream_spm,
        per_device: a.channels == "per-device",
        warmup: a.warmup.map_or(secs(if q { 8 } else { 20 }), |d| d.0),
        window: a.window.map_or(secs(if q { 15 } else { 60 }), |d| d.0),
        rows: chosen,
        repeat: a.repeat,
        wire: !a.no_wire,
        translator_core,
        load_core,
        stratumlab,
        examples,
        out: out_dir(a.out, "bench-translator"),
    };
    translator::run(&opts, &mut std::io::stdout().lock())?;
    Ok(())
}

fn sv2_pool(a: Sv2PoolArgs) -> Result<()> {
    let (pool_core, load_core) = two_cores(&a.cpus, "the pool's and the load's (`0,1`)")?;
    let rows = rows(&a.rows)?;
    let (stratumlab, examples) = programs()?;
    let (warmup, window) = if a.quick { (10, 20) } else { (20, 60) };
    let secs = std::time::Duration::from_secs;
    let out = out_dir(a.out, "bench-sv2-pool");
    let opts = sv2_pool::Options {
        devices: a.devices,
        shares_per_s: a.shares_per_s,
        hash_budget: a.hash_budget.0.hashes_per_sec(),
        warmup: a.warmup.map_or(secs(warmup), |d| d.0),
        window: a.window.map_or(secs(window), |d| d.0),
        sweep: a.sweep,
        rows,
        quick: a.quick,
        pool_core,
        load_core,
        perf: a.perf,
        trace: a.trace,
        baseline: a.baseline,
        stratumlab,
        examples,
        out,
    };
    sv2_pool::run(&opts, &mut std::io::stdout().lock())?;
    Ok(())
}
