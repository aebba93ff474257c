//! `stratumlab translator`: SV1 devices aggregated onto one SV2 extended channel of an SV2 pool.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use events::EventSink;
use pool::vardiff::VardiffConfig;
use primitives::Difficulty;
use translator::shell::{self, ShellConfig};
use translator::TranslatorConfig;

use super::fleet::Budget;
use crate::config::{self, Dur};

/// Translate Stratum V1 devices to Stratum V2: every device on one extended channel of an SV2
/// pool (aggregated mode), shares judged locally and forwarded when they meet the pool's target.
#[derive(Args, Serialize, Default)]
pub struct TranslatorArgs {
    /// TOML file with settings; its keys are the flags' names in snake_case.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Accept SV1 devices on this address (port 0: any free port; the bound address is
    /// printed once the upstream channel is open) [default: 127.0.0.1:0].
    #[arg(long, value_name = "ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// The SV2 pool.
    #[arg(long, value_name = "ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<SocketAddr>,
    /// The pool's SV2 authority public key (base58) its certificate must be signed with
    /// [default: the SV2 reference test key].
    #[arg(long, value_name = "BASE58")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_authority_key: Option<String>,
    /// The farm's account at the pool (`OpenExtendedMiningChannel.user_identity`)
    /// [default: stratumlab-translator].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_identity: Option<String>,
    /// Share difficulty of a new device [default: 1].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_difficulty: Option<Difficulty>,
    /// Lowest share difficulty vardiff may set a device to [default: 2^-32].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_difficulty: Option<Difficulty>,
    /// Shares per minute vardiff aims for per device [default: 15].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shares_per_minute: Option<f64>,
    /// Hash rate counted for a device until vardiff has measured it (`40kH/s`, `100TH/s`); the
    /// channel's nominal hash rate is their sum [default: 1TH/s].
    #[arg(long, value_name = "RATE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_hash_rate: Option<Budget>,
    /// Most devices at once [default: 10000].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_devices: Option<usize>,
    /// Write events (connections, forwarded shares and the pool's verdicts) to this file.
    #[arg(long, value_name = "PATH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<PathBuf>,
    /// Stop after this long; 0 runs until interrupted [default: 0].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<Dur>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub listen: SocketAddr,
    pub upstream: Option<SocketAddr>,
    pub upstream_authority_key: Option<String>,
    pub user_identity: String,
    pub start_difficulty: Difficulty,
    pub min_difficulty: Difficulty,
    pub shares_per_minute: f64,
    pub device_hash_rate: Budget,
    pub max_devices: usize,
    pub events: Option<PathBuf>,
    pub duration: Dur,
}

impl Default for Settings {
    fn default() -> Self {
        let t = TranslatorConfig::default();
        let v = VardiffConfig::default();
        Settings {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            upstream: None,
            upstream_authority_key: None,
            user_identity: t.user_identity,
            start_difficulty: t.start_difficulty,
            min_difficulty: v.min,
            shares_per_minute: v.shares_per_minute,
            device_hash_rate: "1TH/s".parse().expect("valid"),
            max_devices: 10_000,
            events: None,
            duration: Dur::ZERO,
        }
    }
}

impl Settings {
    /// The shell's configuration (events are attached by the caller).
    pub fn shell_config(&self) -> Result<ShellConfig> {
        let upstream = self
            .upstream
            .context("--upstream is required: the SV2 pool, e.g. 127.0.0.1:34254")?;
        let key = self
            .upstream_authority_key
            .as_deref()
            .unwrap_or(sv2::keys::REFERENCE_AUTHORITY_PUBLIC_KEY);
        let key = sv2::keys::parse_public_key(key)
            .map_err(|e| anyhow::anyhow!("--upstream-authority-key: {e}"))?;
        anyhow::ensure!(
            self.shares_per_minute > 0.0 && self.shares_per_minute.is_finite(),
            "--shares-per-minute must be positive"
        );
        anyhow::ensure!(self.max_devices > 0, "--max-devices must be at least 1");
        let rate = self.device_hash_rate.0.hashes_per_sec();
        anyhow::ensure!(
            rate > 0.0 && rate.is_finite(),
            "--device-hash-rate must be positive"
        );
        let mut c = ShellConfig::new(self.listen, upstream, key);
        c.max_devices = self.max_devices;
        c.translator = TranslatorConfig {
            user_identity: self.user_identity.clone(),
            start_difficulty: if self.start_difficulty < self.min_difficulty {
                self.min_difficulty
            } else {
                self.start_difficulty
            },
            device_hash_rate: rate,
            vardiff: VardiffConfig {
                min: self.min_difficulty,
                shares_per_minute: self.shares_per_minute,
                ..VardiffConfig::default()
            },
            ..TranslatorConfig::default()
        };
        Ok(c)
    }
}

pub fn run(args: TranslatorArgs) -> Result<()> {
    let settings: Settings = config::load(args.config.as_deref(), &args)?;
    let mut sc = settings.shell_config()?;
    let sink = match &settings.events {
        Some(p) => EventSink::create(p, "translator", "")?,
        None => EventSink::disabled(),
    };
    sc.events = sink.clone();
    let upstream = sc.upstream;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let summary = rt.block_on(async {
        let mut running = shell::start(sc)
            .await
            .with_context(|| format!("opening the upstream channel at {upstream}"))?;
        println!("sv1 listening on {}", running.sv1_addr);
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        eprintln!(
            "translator: channel {} open at {upstream}",
            running.channel_id
        );
        tokio::select! {
            _ = super::shutdown_signal(settings.duration.0) => {
                running.stop().await.context("translator")
            }
            ended = running.finished() => {
                ended.context("translator")
            }
        }
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    let written = sink.finish().context("writing events")?;
    eprintln!("{summary}");
    if settings.events.is_some() {
        eprintln!("  events        {} written", written.events_written);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_is_required_and_keys_are_checked() {
        let s: Settings = config::load(None, &TranslatorArgs::default()).unwrap();
        let e = s.shell_config().unwrap_err();
        assert!(format!("{e:#}").contains("--upstream"), "{e:#}");
        let args = TranslatorArgs {
            upstream: Some("127.0.0.1:1".parse().unwrap()),
            upstream_authority_key: Some("nonsense".into()),
            ..TranslatorArgs::default()
        };
        let s: Settings = config::load(None, &args).unwrap();
        assert!(s.shell_config().is_err());
    }

    #[test]
    fn flags_reach_the_core() {
        let args = TranslatorArgs {
            upstream: Some("127.0.0.1:1".parse().unwrap()),
            start_difficulty: Some(Difficulty::new(0.5).unwrap()),
            device_hash_rate: Some("40kH/s".parse().unwrap()),
            ..TranslatorArgs::default()
        };
        let s: Settings = config::load(None, &args).unwrap();
        let c = s.shell_config().unwrap();
        assert_eq!(c.listen.ip().to_string(), "127.0.0.1");
        assert_eq!(c.translator.start_difficulty.as_f64(), 0.5);
        assert_eq!(c.translator.device_hash_rate, 40_000.0);
        assert_eq!(
            c.authority_key,
            sv2::keys::parse_public_key(sv2::keys::REFERENCE_AUTHORITY_PUBLIC_KEY).unwrap()
        );
    }
}
