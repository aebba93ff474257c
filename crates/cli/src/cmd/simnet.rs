//! `stratumlab simnet`: run one simulated Bitcoin network in real time.
//!
//! The network itself is the sans-IO `simnet::Network`; this shell maps the monotonic clock onto
//! simulated time, wakes when the network's next deadline comes due, turns its outputs into
//! events and logs, and prints a summary when stopped (Ctrl-C, SIGTERM or `--duration`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use events::{EventSink, ShortStr};
use primitives::Difficulty;
use simnet::{BlockSource, Network, Output, SimTime, SimnetConfig};

use crate::config::{self, Dur};

/// Run a simulated Bitcoin network: chain, mempool with a mainnet-like fee market, templates,
/// and blocks found by the rest of the network.
#[derive(Args, Serialize, Default)]
pub struct SimnetArgs {
    /// TOML file with settings; its keys are the flags' names in snake_case.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Seed of every random stream: the same seed and timing give the same network.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Height of the tip at start [default: 900000, subsidy 3.125 BTC].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_height: Option<u32>,
    /// Network difficulty, fractional down to 2^-32 [default: 1].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_difficulty: Option<Difficulty>,
    /// Mean time between blocks found by the rest of the network; 0 disables [default: 10m].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_interval: Option<Dur>,
    /// Least time between two fee-driven templates (a new tip always makes one) [default: 30s].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template_interval: Option<Dur>,
    /// Fees (sats) a template must gain over the last one to replace it [default: 1000].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fee_delta: Option<u64>,
    /// Mean transaction arrivals per second [default: 5].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_rate: Option<f64>,
    /// Write events (templates, tips, block verdicts) to this file.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<PathBuf>,
    /// Stop after this long; 0 runs until interrupted [default: 0].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<Dur>,
}

/// The settings after the file and the flags are combined.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub seed: u64,
    pub start_height: u32,
    pub network_difficulty: Difficulty,
    pub block_interval: Dur,
    pub template_interval: Dur,
    pub fee_delta: u64,
    pub tx_rate: f64,
    pub events: Option<PathBuf>,
    pub duration: Dur,
}

impl Default for Settings {
    fn default() -> Self {
        let c = SimnetConfig::default();
        Settings {
            seed: c.seed,
            start_height: c.start_height,
            network_difficulty: c.network_difficulty,
            block_interval: Dur(c.block_interval),
            template_interval: Dur(c.template_interval),
            fee_delta: c.fee_delta,
            tx_rate: c.mempool.arrival_rate,
            events: None,
            duration: Dur::ZERO,
        }
    }
}

impl Settings {
    pub fn network_config(&self) -> SimnetConfig {
        let mut c = SimnetConfig {
            seed: self.seed,
            start_height: self.start_height,
            network_difficulty: self.network_difficulty,
            block_interval: self.block_interval.0,
            template_interval: self.template_interval.0,
            fee_delta: self.fee_delta,
            ..SimnetConfig::default()
        };
        c.mempool.arrival_rate = self.tx_rate;
        c
    }
}

pub fn run(args: SimnetArgs) -> Result<()> {
    let settings: Settings = config::load(args.config.as_deref(), &args)?;
    let net = Network::new(settings.network_config()).context("invalid network settings")?;
    let sink = match &settings.events {
        Some(p) => EventSink::create(p, "simnet", "")?,
        None => EventSink::disabled(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let summary = rt.block_on(serve(net, &settings, &sink))?;
    let stats = sink.finish().context("writing events")?;
    println!("{summary}");
    if settings.events.is_some() {
        println!("events written: {}", stats.events_written);
    }
    Ok(())
}

#[derive(Default)]
struct Summary {
    ran_for: Duration,
    templates: u64,
    network_blocks: u64,
    submitted_blocks: u64,
    start_height: u32,
    height: u32,
    mempool_txs: usize,
    mempool_vsize: u64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "simnet ran for {}",
            humantime::format_duration(Duration::from_millis(self.ran_for.as_millis() as u64))
        )?;
        writeln!(
            f,
            "  height         {} -> {}",
            self.start_height, self.height
        )?;
        writeln!(
            f,
            "  blocks         {} from the network, {} submitted",
            self.network_blocks, self.submitted_blocks
        )?;
        writeln!(f, "  templates      {}", self.templates)?;
        write!(
            f,
            "  mempool        {} transactions, {} vB",
            self.mempool_txs, self.mempool_vsize
        )
    }
}

async fn serve(mut net: Network, s: &Settings, sink: &EventSink) -> Result<Summary> {
    let start = Instant::now();
    let stop_at = (!s.duration.is_zero()).then(|| start + s.duration.0);
    let mut summary = Summary {
        start_height: net.height(),
        ..Summary::default()
    };
    println!(
        "simnet: chain {}, tip height {}, difficulty {}, bits {}, seed {}, block interval {}, template interval {}",
        net.chain_name(),
        net.height(),
        s.network_difficulty,
        net.bits(),
        s.seed,
        s.block_interval,
        s.template_interval
    );
    let mut shutdown = std::pin::pin!(shutdown_signal());
    loop {
        let now = SimTime::from_duration(start.elapsed());
        for out in net.advance(now) {
            record(&out, sink, &mut summary);
        }
        let next = net
            .next_deadline()
            .map(|t| start + Duration::from_nanos(t.as_nanos()));
        let wake = [next, stop_at].into_iter().flatten().min();
        // Nothing due and no stop time: wait for a signal only.
        let sleep = tokio::time::sleep_until(
            wake.unwrap_or(start + Duration::from_secs(86_400 * 365))
                .into(),
        );
        tokio::select! {
            _ = sleep => {}
            _ = &mut shutdown => break,
        }
        if stop_at.is_some_and(|t| Instant::now() >= t) {
            break;
        }
    }
    summary.ran_for = start.elapsed();
    summary.height = net.height();
    summary.mempool_txs = net.mempool().len();
    summary.mempool_vsize = net.mempool().total_vsize();
    Ok(summary)
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

const NODE: &str = "simnet";

fn record(out: &Output, sink: &EventSink, summary: &mut Summary) {
    match out {
        Output::TemplateCreated(t) => {
            summary.templates += 1;
            let fingerprint = events::fingerprint(&t.prev_hash, &t.merkle_branch);
            tracing::info!(id = t.id, height = t.height, txs = t.tx_count(), value_sats = t.coinbase_value, fees_sats = t.total_fees, %fingerprint, "template");
            sink.emit(events::TemplateCreated {
                node: ShortStr::new(NODE),
                template_id: t.id,
                height: t.height,
                prev_hash: t.prev_hash,
                value_sats: t.coinbase_value,
                fees_sats: t.total_fees,
                tx_count: t.tx_count() as u32,
                fingerprint,
                future: false,
            });
        }
        Output::TipChanged {
            hash,
            height,
            prev_hash,
            source,
            ..
        } => {
            let source = match source {
                BlockSource::Submitted => {
                    summary.submitted_blocks += 1;
                    events::TipSource::Submitted
                }
                BlockSource::Network | BlockSource::Start => {
                    summary.network_blocks += 1;
                    events::TipSource::Network
                }
            };
            tracing::info!(%hash, height, ?source, "new tip");
            sink.emit(events::TipChanged {
                node: ShortStr::new(NODE),
                hash: *hash,
                height: *height,
                prev_hash: *prev_hash,
                source,
            });
        }
        Output::BlockVerdict {
            hash,
            height,
            result,
            ..
        } => {
            let reason = match result {
                Ok(()) => String::new(),
                Err(e) => e.to_string(),
            };
            tracing::info!(hash = ?hash, ?height, verdict = if reason.is_empty() { "accepted" } else { reason.as_str() }, "block submitted");
            sink.emit(events::BlockResult {
                node: ShortStr::new(NODE),
                hash: hash.unwrap_or_default(),
                height: height.unwrap_or(0),
                accepted: result.is_ok(),
                reason: ShortStr::new(&reason),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_file_and_defaults_fill_the_rest() {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            f.path(),
            "seed = 7\nblock_interval = \"10s\"\nnetwork_difficulty = 0.5\n",
        )
        .unwrap();
        let args = SimnetArgs {
            seed: Some(9),
            ..SimnetArgs::default()
        };
        let s: Settings = config::load(Some(f.path()), &args).unwrap();
        assert_eq!(s.seed, 9);
        assert_eq!(s.block_interval, Dur::from_secs(10));
        assert_eq!(s.network_difficulty.as_f64(), 0.5);
        assert_eq!(s.start_height, 900_000);
        let c = s.network_config();
        assert_eq!(c.block_interval, Duration::from_secs(10));
        assert!(Network::new(c).is_ok());
    }

    #[test]
    fn invalid_difficulty_in_file_is_refused() {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), "network_difficulty = 0.0\n").unwrap();
        let e = config::load::<Settings>(Some(f.path()), &SimnetArgs::default()).unwrap_err();
        assert!(format!("{e:#}").contains("difficulty"), "{e:#}");
    }

    #[test]
    fn a_short_run_writes_templates_and_tips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("simnet.ev");
        let args = SimnetArgs {
            seed: Some(3),
            block_interval: Some(Dur::from_millis(100)),
            template_interval: Some(Dur::from_millis(50)),
            duration: Some(Dur::from_millis(700)),
            events: Some(path.clone()),
            ..SimnetArgs::default()
        };
        run(args).unwrap();
        let log = events::read_file(&path).unwrap();
        assert_eq!(log.header.role.as_str(), "simnet");
        let templates = log
            .events
            .iter()
            .filter(|e| matches!(e.kind, events::EventKind::TemplateCreated(_)))
            .count();
        let tips = log
            .events
            .iter()
            .filter(|e| matches!(e.kind, events::EventKind::TipChanged(_)))
            .count();
        // ~7 blocks expected at a 100 ms mean over 700 ms; P(0 blocks) = e^-7.
        assert!(tips >= 1, "no network block in 700 ms");
        assert!(
            templates > tips,
            "every tip makes a template, plus the first: {templates} vs {tips}"
        );
    }
}
