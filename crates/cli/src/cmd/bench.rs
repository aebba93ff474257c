//! `stratumlab bench`: one role at a fixed offered load against other software on the same load
//! (docs/performance.md).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};

use lab::bench::sv2_pool::{self, RowKind};

use crate::cmd::fleet::Budget;
use crate::config::{self, Dur};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Our SV2 pool against the SV2 reference pool (pool_sv2, pinned) under the same SV2 device
    /// fleet at the same offered load: CPU per accepted share, latency, and where the CPU went,
    /// each pool pinned to one core with the load on another. Writes rows.jsonl and every
    /// role's files to --out and prints the table and the ratios.
    Sv2Pool(Box<Sv2PoolArgs>),
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
    }
}

fn sv2_pool(a: Sv2PoolArgs) -> Result<()> {
    let [pool_core, load_core] = a.cpus[..] else {
        anyhow::bail!("--cpus takes two cores, the pool's and the load's (`0,1`)");
    };
    let rows = a
        .rows
        .iter()
        .map(|r| r.parse::<RowKind>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)
        .context("--rows")?;
    let stratumlab = std::env::current_exe().context("locating this stratumlab")?;
    let examples = stratumlab
        .parent()
        .map(|d| d.join("examples"))
        .unwrap_or_default();
    let (warmup, window) = if a.quick { (10, 20) } else { (20, 60) };
    let secs = std::time::Duration::from_secs;
    let out = a.out.unwrap_or_else(|| {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from(format!("results/bench-sv2-pool-{stamp}"))
    });
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
