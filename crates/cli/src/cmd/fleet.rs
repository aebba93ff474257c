//! `stratumlab fleet`: many simulated mining devices against one pool, speaking Stratum V1 or
//! Stratum V2 (`--protocol`).
//!
//! The devices are `fleet::Sv1Device`s or `fleet::Sv2Device`s (a standard channel each,
//! checking the pool's Noise certificate against `--authority-key`), each hashing for real at
//! the target its pool gives it, within a hash budget shared by the whole fleet. Used as a load command it reports validated
//! shares per second, submit-to-reply latency and, given `--pool-pid`, the pool's CPU use;
//! with `--hash-budget 0` the devices only hold their connections and read jobs (for notify
//! fan-out measurements).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use events::EventSink;
use fleet::stats::LiveStats;
use fleet::sv2_device::parse_authority_key;
use fleet::{
    Backoff, ConnectionPolicy, Fleet, FleetConfig, HashRateStep, Profile, Protocol, Sv1Config,
    Sv2Config,
};
use primitives::HashRate;

use crate::config::{self, Dur};

/// Run simulated SV1 or SV2 mining devices against a pool: real proof of work at the pool's
/// targets, shares, verdicts and their latency.
#[derive(Args, Serialize, Deserialize, Debug)]
pub struct FleetArgs {
    /// TOML file with settings; its keys are the flags' names in snake_case.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// The pool's address (Stratum V1, or V2 with `--protocol sv2`).
    #[arg(long, value_name = "ADDR")]
    pub pool: Option<SocketAddr>,
    /// The devices' protocol: sv1, or sv2 (a standard channel each, header-only mining).
    #[arg(long, default_value = "sv1")]
    pub protocol: Protocol,
    /// SV2: the pool's authority public key (base58check, as the pool prints it and pool_sv2
    /// configs write it); the devices refuse a pool whose Noise certificate it did not sign.
    /// Required with --protocol sv2.
    #[arg(long, value_name = "BASE58")]
    pub authority_key: Option<String>,
    /// SV2: the hash rate each device claims when opening its channel (`100TH/s`), from which
    /// a pool may set its target [default: its share of --hash-budget, or with no budget the
    /// profile's: asic 110TH/s, bitaxe 1.2TH/s, cpu 10MH/s].
    #[arg(long, value_name = "RATE")]
    pub nominal_hash_rate: Option<Budget>,
    /// Number of devices.
    #[arg(long, default_value = "1")]
    pub devices: u32,
    /// Hashes per second for the whole fleet, split evenly among devices (`2MH/s`, `500kH/s`,
    /// `1e6`); 0: devices only hold connections and read jobs.
    #[arg(long, value_name = "RATE", default_value = "1MH/s")]
    pub hash_budget: Budget,
    /// Spread connections over this many loopback source addresses (127.0.0.1, .2, ...),
    /// about 28,000 connections each.
    #[arg(long, value_name = "N", default_value = "1")]
    pub source_addrs: u32,
    /// Connection attempts per second across the fleet (`500/s`), reconnects included; 0: no
    /// pacing.
    #[arg(long, value_name = "N/s", default_value = "1000/s")]
    pub connect_rate: Rate,
    /// Stop after this long; 0 runs until interrupted.
    #[arg(long, default_value = "0")]
    pub duration: Dur,
    /// From AT after the start, every device hashes at FACTOR times its share of the budget
    /// (`60s=2` doubles from a minute in; `90s=0.5` halves); repeatable.
    #[arg(long, value_name = "AT=FACTOR")]
    #[serde(default)]
    pub hash_rate_step: Vec<HashRateStep>,
    /// At the end, how long to wait for the verdicts of shares in flight.
    #[arg(long, default_value = "2s")]
    pub drain: Dur,
    /// Device firmware: asic (S19-like: cgminer-class over SV1; requires version rolling over
    /// SV2), bitaxe (ESP-Miner) or cpu (cpuminer; no version rolling).
    #[arg(long, default_value_t = Sv1Config::default().profile)]
    pub profile: Profile,
    /// Worker name prefix: device N authorizes (SV2: opens its channel) as PREFIX followed by
    /// N (`bc1q...xyz.rig` gives `bc1q...xyz.rig0`, `bc1q...xyz.rig1`, ...) [default:
    /// stratumlab.worker; over SV2 the profile's, such as stratumlab.s19-].
    #[arg(long, value_name = "PREFIX")]
    pub worker: Option<String>,
    /// SV1: password sent with mining.authorize.
    #[arg(long, default_value_t = Sv1Config::default().password)]
    pub password: String,
    /// SV1: send mining.suggest_difficulty with this difficulty after authorizing.
    #[arg(long, value_name = "D")]
    pub suggest_difficulty: Option<f64>,
    /// SV1: opt into extranonce changes (`mining.extranonce.subscribe` right after
    /// subscribing, as NiceHash-aware firmware does), so that a pool or proxy may send
    /// `mining.set_extranonce` instead of dropping the device.
    #[arg(long)]
    pub extranonce_subscribe: bool,
    /// The pool's process id: its CPU use over the run is reported.
    #[arg(long, value_name = "PID")]
    pub pool_pid: Option<u32>,
    /// Print the report as JSON (instead of the readable summary).
    #[arg(long)]
    pub json: bool,
    /// Write events (jobs received, targets, shares sent, verdicts, connections) to this file;
    /// a share sent without a verdict in the file went unanswered.
    #[arg(long)]
    pub events: Option<PathBuf>,
    /// Worker threads of the fleet's runtime.
    #[arg(long, default_value = "1")]
    pub threads: usize,
    /// Seed of the devices' reconnect jitter and nonce starts.
    #[arg(long, default_value = "1")]
    pub seed: u64,
    /// Id of the first device in events, so that several fleet processes use distinct ids.
    #[arg(long, default_value = "0")]
    pub first_device_id: u64,
    /// First reconnect delay ceiling; doubles per failure, with jitter.
    #[arg(long, default_value_t = Dur(ConnectionPolicy::default().backoff.base))]
    pub reconnect_base: Dur,
    /// Longest reconnect delay.
    #[arg(long, default_value_t = Dur(ConnectionPolicy::default().backoff.max))]
    pub reconnect_max: Dur,
    /// A share without a verdict after this long counts as unanswered.
    #[arg(long, default_value_t = Dur(ConnectionPolicy::default().reply_timeout))]
    pub reply_timeout: Dur,
}

config::role_settings!(FleetArgs);

impl FleetArgs {
    /// The fleet's configuration (events are attached by the caller).
    pub fn fleet_config(&self) -> Result<FleetConfig> {
        let pool = self
            .pool
            .context("--pool is required: the pool's address, e.g. 127.0.0.1:3333")?;
        let mut c = FleetConfig::new(pool);
        c.protocol = self.protocol;
        c.devices = self.devices;
        c.hash_budget = self.hash_budget.0.hashes_per_sec();
        c.source_addrs = self.source_addrs.max(1);
        c.connect_rate = self.connect_rate.0;
        c.duration = self.duration.0;
        c.hash_rate_steps = self.hash_rate_step.clone();
        c.drain = self.drain.0;
        c.seed = self.seed;
        c.first_device_id = self.first_device_id;
        c.pool_pid = self.pool_pid;
        let connection = ConnectionPolicy {
            backoff: Backoff {
                base: self.reconnect_base.0.max(Duration::from_millis(1)),
                max: self.reconnect_max.0.max(self.reconnect_base.0),
            },
            reply_timeout: self.reply_timeout.0,
            ..ConnectionPolicy::default()
        };
        c.device = Sv1Config {
            profile: self.profile,
            worker_prefix: self
                .worker
                .clone()
                .unwrap_or_else(|| Sv1Config::default().worker_prefix),
            password: self.password.clone(),
            suggest_difficulty: self.suggest_difficulty,
            extranonce_subscribe: self.extranonce_subscribe,
            connection,
            ..Sv1Config::default()
        };
        if self.protocol == Protocol::Sv2 {
            c.sv2 = Sv2Config {
                profile: self.profile,
                worker_prefix: self.worker.clone(),
                authority_key: parse_authority_key(self.authority_key.as_deref().context(
                    "--authority-key BASE58 (the pool's authority public key, which it prints at \
                     start) is required with --protocol sv2",
                )?)
                .context("--authority-key")?,
                nominal_hash_rate: self.nominal_hash_rate.map(|r| r.0.hashes_per_sec()),
                connection,
                ..Sv2Config::default()
            };
        }
        Ok(c)
    }
}

/// A hash rate written with units (`2MH/s`) or as a plain number of hashes per second.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Budget(pub HashRate);

impl FromStr for Budget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Budget)
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for Budget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0.hashes_per_sec())
    }
}

impl<'de> Deserialize<'de> for Budget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        NumOrText::deserialize(d)?.parse()
    }
}

/// Events per second, written `500/s` or `500`.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Rate(pub f64);

impl FromStr for Rate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let num = t.strip_suffix("/s").unwrap_or(t).trim();
        match num.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Rate(v)),
            _ => Err(format!(
                "rate {s:?}: expected a non-negative number per second, e.g. 500/s"
            )),
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s", self.0)
    }
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        NumOrText::deserialize(d)?.parse()
    }
}

/// A config file's value for a flag that takes a number with or without units.
#[derive(Deserialize)]
#[serde(untagged)]
enum NumOrText {
    Num(f64),
    Text(String),
}

impl NumOrText {
    /// Parsed as the flag's text would be.
    fn parse<T: FromStr<Err = String>, E: serde::de::Error>(self) -> Result<T, E> {
        match self {
            NumOrText::Num(v) => format!("{v}").parse(),
            NumOrText::Text(t) => t.parse(),
        }
        .map_err(E::custom)
    }
}

pub fn run(settings: FleetArgs) -> Result<()> {
    let mut fc = settings.fleet_config()?;
    let sink = match &settings.events {
        Some(p) => EventSink::create(p, "fleet", "")?,
        None => EventSink::disabled(),
    };
    fc.events = sink.clone();
    if fc.source_addrs > 1 && fleet::net::source_addr(fc.pool, 1, fc.source_addrs).is_none() {
        eprintln!(
            "fleet: --source-addrs applies to a pool on 127.x only; connecting from the default address"
        );
    }
    match fleet::net::raise_nofile_limit() {
        Ok((_, limit)) if (fc.devices as u64) + 64 > limit => eprintln!(
            "fleet: {} devices need about as many file descriptors; this process may open {limit}",
            fc.devices
        ),
        Ok(_) => {}
        Err(e) => eprintln!("fleet: could not raise the open-file limit: {e}"),
    }
    if settings.protocol == Protocol::Sv2
        && (settings.suggest_difficulty.is_some() || settings.password != "x")
    {
        eprintln!("fleet: --suggest-difficulty and --password are SV1's; SV2 devices ignore them");
    }
    eprintln!(
        "fleet: {} {} {} devices -> {}, hash budget {}, {} source address(es), connect rate {}/s",
        fc.devices,
        settings.protocol,
        settings.profile,
        fc.pool,
        settings.hash_budget.0,
        fc.source_addrs,
        fc.connect_rate
    );
    let duration = fc.duration;
    let fleet = Fleet::new(fc).context("invalid device settings")?;
    if let (Protocol::Sv2, Some(rate)) = (settings.protocol, fleet.config().sv2.nominal_hash_rate) {
        eprintln!(
            "fleet: each SV2 device claims {} as its nominal hash rate",
            HashRate::from_hashes_per_sec(rate)
        );
    }
    let stats = fleet.stats();
    let rt = super::runtime(Some(settings.threads))?;
    let report = rt.block_on(async {
        let progress = Progress::start(Arc::clone(&stats), duration, settings.devices);
        let report = fleet.run(super::signal()).await;
        progress.finish();
        report
    });
    drop(rt);
    let written = sink.finish().context("writing events")?;
    if settings.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
        if settings.events.is_some() {
            println!("  events         {} written", written.events_written);
        }
    }
    Ok(())
}

/// A progress line on stderr, drawn only when stderr is a terminal.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn start(stats: Arc<LiveStats>, duration: Duration, devices: u32) -> Self {
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return Progress {
                bar: None,
                task: None,
            };
        }
        let bar = if duration.is_zero() {
            indicatif::ProgressBar::new_spinner()
        } else {
            indicatif::ProgressBar::new(duration.as_millis() as u64)
        };
        let template = if duration.is_zero() {
            "{spinner} {elapsed_precise} {msg}"
        } else {
            "{bar:20} {elapsed_precise}/{duration_precise} {msg}"
        };
        if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        let b = bar.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut last = (started, 0u64);
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let accepted = stats.accepted.load(Relaxed);
                let now = Instant::now();
                let dt = now.duration_since(last.0).as_secs_f64();
                let rate = if dt > 0.0 {
                    (accepted - last.1) as f64 / dt
                } else {
                    0.0
                };
                if dt >= 1.0 {
                    last = (now, accepted);
                }
                b.set_position(started.elapsed().as_millis() as u64);
                b.set_message(format!(
                    "ready {}/{devices}, shares {} sent {accepted} accepted {} rejected, {rate:.0}/s accepted",
                    stats.ready.load(Relaxed),
                    stats.shares_sent.load(Relaxed),
                    stats.rejected.load(Relaxed),
                ));
                b.tick();
            }
        });
        Progress {
            bar: Some(bar),
            task: Some(task),
        }
    }

    fn finish(self) {
        if let Some(t) = self.task {
            t.abort();
        }
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_file_and_defaults_fill_the_rest() {
        let s: FleetArgs = config::parse_file(
            "pool = \"127.0.0.1:3333\"\ndevices = 500\nhash_budget = \"2MH/s\"\nconnect_rate = \"250/s\"\nprofile = \"bitaxe\"\n",
            &["--devices", "10000", "--duration", "60s"],
        )
        .unwrap();
        assert_eq!(s.devices, 10_000, "flag wins");
        assert_eq!(s.hash_budget.0.hashes_per_sec(), 2e6);
        assert_eq!(s.connect_rate, Rate(250.0));
        assert_eq!(s.profile, Profile::Bitaxe);
        assert_eq!(s.duration, Dur::from_secs(60));
        assert_eq!(s.drain, Dur::from_secs(2));
        assert_eq!(s.worker, None);
        assert_eq!(s.protocol, Protocol::Sv1);
        let c = s.fleet_config().unwrap();
        assert_eq!(c.device.worker_prefix, "stratumlab.worker");
        assert_eq!(c.pool, "127.0.0.1:3333".parse().unwrap());
        assert_eq!(c.hash_budget, 2e6);
        assert_eq!(c.device.profile, Profile::Bitaxe);
        // A budget given as a number of hashes per second, and a flag given as text.
        let text = "pool = \"127.0.0.1:1\"\nhash_budget = 1500\n";
        let args = ["--hash-budget", "500kH/s", "--connect-rate", "0"];
        let s: FleetArgs = config::parse_file(text, &args).unwrap();
        assert_eq!(s.hash_budget.0.hashes_per_sec(), 5e5);
        assert_eq!(s.connect_rate, Rate(0.0));
        let s: FleetArgs = config::parse_file(text, &[]).unwrap();
        assert_eq!(s.hash_budget.0.hashes_per_sec(), 1500.0);
    }

    #[test]
    fn a_pool_address_is_required_and_bad_values_are_refused() {
        let s = FleetArgs::default();
        let Err(e) = s.fleet_config() else {
            panic!("no pool address, yet a configuration");
        };
        assert!(format!("{e:#}").contains("--pool"), "{e:#}");
        assert!("fast".parse::<Rate>().is_err());
        assert!("-1/s".parse::<Rate>().is_err());
        assert!("1 XH/s".parse::<Budget>().is_err());
        assert!(config::parse_file::<FleetArgs>("profile = \"gpu\"\n", &[]).is_err());
        let e = config::parse_file::<FleetArgs>("devices = 3\nbogus = 1\n", &[]).unwrap_err();
        assert!(format!("{e:#}").contains("bogus"), "{e:#}");
    }

    #[test]
    fn sv2_devices_take_the_authority_key_and_their_own_settings() {
        let text = "pool = \"127.0.0.1:34254\"\nprotocol = \"sv2\"\nprofile = \"bitaxe\"\n";
        // SV2 devices without the pool's key: refused, saying what to give.
        let s: FleetArgs = config::parse_file(text, &[]).unwrap();
        let e = s.fleet_config().err().expect("no key, yet a configuration");
        assert!(format!("{e:#}").contains("--authority-key"), "{e:#}");
        let keyed = [
            "--authority-key",
            fleet::sv2_device::REFERENCE_AUTHORITY_PUBLIC_KEY,
        ];
        let s: FleetArgs = config::parse_file(text, &keyed).unwrap();
        assert_eq!(s.protocol, Protocol::Sv2);
        let c = s.fleet_config().unwrap();
        assert_eq!(c.protocol, Protocol::Sv2);
        assert_eq!(c.sv2.profile, Profile::Bitaxe);
        assert_eq!(c.sv2.worker_prefix, None, "the profile's identity");
        assert_eq!(
            c.sv2.nominal_hash_rate, None,
            "the budget's share, set by the fleet"
        );
        assert_eq!(
            c.sv2.authority_key,
            parse_authority_key(fleet::sv2_device::REFERENCE_AUTHORITY_PUBLIC_KEY).unwrap()
        );
        let s: FleetArgs = config::parse_file(text, &["--authority-key", "not-a-key"]).unwrap();
        let Err(e) = s.fleet_config() else {
            panic!("a bad authority key, yet a configuration");
        };
        assert!(format!("{e:#}").contains("--authority-key"), "{e:#}");
        let args = [
            &keyed[..],
            &["--worker", "acct.rig", "--nominal-hash-rate", "100TH/s"],
        ]
        .concat();
        let c = config::parse_file::<FleetArgs>(text, &args)
            .unwrap()
            .fleet_config()
            .unwrap();
        assert_eq!(c.sv2.worker_prefix.as_deref(), Some("acct.rig"));
        assert_eq!(c.sv2.nominal_hash_rate, Some(1e14));
        assert!("sv3".parse::<Protocol>().is_err());
    }

    /// Runs the fleet of `args` for 1.5 s at 200 kH/s, reporting as JSON, and returns the
    /// events it wrote.
    fn short_run(args: FleetArgs) -> events::EventLog {
        let dir = tempfile::tempdir().unwrap();
        let events = dir.path().join("fleet.ev");
        run(FleetArgs {
            hash_budget: "200kH/s".parse().unwrap(),
            duration: Dur::from_millis(1500),
            json: true,
            events: Some(events.clone()),
            ..args
        })
        .unwrap();
        events::read_file(&events).unwrap()
    }

    #[test]
    fn a_short_sv2_run_against_the_sv2_test_pool() {
        use fleet::sv2_testpool::{Sv2TestPool, Sv2TestPoolConfig};
        let rt = tokio::runtime::Runtime::new().unwrap();
        let pool = rt
            .block_on(Sv2TestPool::start(Sv2TestPoolConfig {
                target: primitives::Difficulty::saturating(2f64.powi(-18)).to_target(),
                ..Default::default()
            }))
            .unwrap();
        let log = short_run(FleetArgs {
            pool: Some(pool.addr()),
            protocol: Protocol::Sv2,
            authority_key: Some(pool.authority_public_key()),
            devices: 4,
            ..FleetArgs::default()
        });
        let has = |f: &dyn Fn(&events::EventKind) -> bool| log.events.iter().any(|e| f(&e.kind));
        assert!(has(&|k| matches!(k, events::EventKind::JobActivated(_))));
        assert!(has(
            &|k| matches!(k, events::EventKind::ShareResult(r) if r.channel.is_some())
        ));
        assert!(pool.stats().valid.load(Relaxed) > 0);
        assert_eq!(pool.stats().channels.load(Relaxed), 4);
        drop(pool);
    }

    #[test]
    fn a_short_run_against_a_test_pool_reports_as_json() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let pool = rt
            .block_on(fleet::testpool::TestPool::start(
                fleet::testpool::TestPoolConfig {
                    difficulty: 2f64.powi(-18),
                    ..Default::default()
                },
            ))
            .unwrap();
        let log = short_run(FleetArgs {
            pool: Some(pool.addr()),
            devices: 8,
            source_addrs: 2,
            pool_pid: Some(std::process::id()),
            ..FleetArgs::default()
        });
        assert_eq!(log.header.role.as_str(), "fleet");
        assert!(log
            .events
            .iter()
            .any(|e| matches!(e.kind, events::EventKind::ShareResult(_))));
        assert!(pool.stats().valid.load(Relaxed) > 0);
        drop(pool);
    }
}
