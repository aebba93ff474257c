//! `stratumlab translator`: SV1 devices onto an SV2 pool, aggregated on one extended channel or
//! each on its own (`--channels per-device`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use events::EventSink;
use mining::vardiff::VardiffConfig;
use primitives::Difficulty;
use translator::shell::sv1_conn::Sv1Transport;
use translator::shell::{self, ShellConfig, UpstreamSpec};
use translator::{ChannelMode, TranslatorConfig};

use super::fleet::Budget;
use crate::cmd::edge::EdgeArgs;
use crate::config::{self, Dur};

/// Translate Stratum V1 devices to Stratum V2: every device on one extended channel of an SV2
/// pool (aggregated mode) or each on its own (`--channels per-device`), shares judged locally
/// and forwarded when they meet the pool's target.
#[derive(Args, Serialize, Deserialize, Debug)]
pub struct TranslatorArgs {
    /// TOML file with settings; its keys are the flags' names in snake_case.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Accept SV1 devices on this address (port 0: any free port; the bound address is
    /// printed once the upstream channel is open).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The SV2 pool; repeat for failover pools, in order of preference (the next is tried at
    /// once when one is lost, then all again after a capped, jittered backoff).
    #[arg(long, value_name = "ADDR")]
    #[serde(deserialize_with = "config::one_or_many")]
    pub upstream: Vec<SocketAddr>,
    /// The pool's SV2 authority public key (base58; the pool prints it at start) its
    /// certificate must be signed with; one for every upstream, or one per `--upstream` in the
    /// same order. Required unless --insecure-skip-verify.
    #[arg(long, value_name = "BASE58")]
    #[serde(deserialize_with = "config::one_or_many")]
    pub upstream_authority_key: Vec<String>,
    /// Accept any certificate from the upstream pools instead of checking it against their
    /// authority key.
    #[arg(long)]
    pub insecure_skip_verify: bool,
    /// An upstream that answers nothing for this long while a share awaits its verdict is
    /// failed over.
    #[arg(long, default_value = "30s")]
    pub upstream_keepalive: Dur,
    /// How long an upstream may take to connect, finish the handshake and open the channel
    /// before the next is tried; with per-device channels, also how long one device's channel
    /// request may go unanswered before that device is refused.
    #[arg(long, default_value_t = Dur(translator::per_device::DEFAULT_OPEN_TIMEOUT))]
    pub upstream_open_timeout: Dur,
    /// How devices map onto SV2 channels: `aggregated` (all on one extended channel, each
    /// given a range of its extranonce) or `per-device` (an extended channel each, on the one
    /// connection; the translator only).
    #[arg(long, value_name = "MODE", value_parser = ["aggregated", "per-device"], default_value_t = TranslatorConfig::default().channels.to_string())]
    pub channels: String,
    /// The farm's account at the pool (`OpenExtendedMiningChannel.user_identity`; per-device
    /// channels append `.miner<N>`, the device's number).
    #[arg(long, default_value_t = TranslatorConfig::default().user_identity)]
    pub user_identity: String,
    /// Share difficulty of a new device.
    #[arg(long, default_value_t = TranslatorConfig::default().start_difficulty)]
    pub start_difficulty: Difficulty,
    /// Lowest share difficulty vardiff may set a device to.
    #[arg(long, default_value_t = VardiffConfig::default().min)]
    pub min_difficulty: Difficulty,
    /// Shares per minute vardiff aims for per device.
    #[arg(long, default_value_t = VardiffConfig::default().shares_per_minute)]
    pub shares_per_minute: f64,
    /// Hash rate counted for a device until vardiff has measured it (`40kH/s`, `100TH/s`); the
    /// channel's nominal hash rate is their sum.
    #[arg(long, value_name = "RATE", default_value = "1TH/s")]
    pub device_hash_rate: Budget,
    /// Ask the pool for extension 0x0002 (worker-specific hashrate tracking) and, where it
    /// agrees, name each device on its forwarded shares by the worker it authorized (cut to 32
    /// bytes), so that the pool accounts each device; aggregated channels only.
    #[arg(long)]
    pub worker_tracking: bool,
    /// Most devices at once: another name for --max-connections [default: 10000].
    #[arg(long)]
    pub max_devices: Option<usize>,
    /// Serve /api/status, /metrics and /healthz on this address (port 0: any free port; the
    /// bound address is printed).
    #[arg(long, value_name = "ADDR")]
    pub http_listen: Option<SocketAddr>,
    /// Write events (connections, forwarded shares and the pool's verdicts) to this file.
    #[arg(long, value_name = "PATH")]
    pub events: Option<PathBuf>,
    /// Stop after this long; 0 runs until interrupted.
    #[arg(long, default_value = "0")]
    pub duration: Dur,
    /// The connection edge's limits, the same on every role (cmd/edge.rs).
    #[command(flatten)]
    #[serde(flatten)]
    pub edge: EdgeArgs,
}

config::role_settings!(TranslatorArgs);

impl TranslatorArgs {
    /// The shell's configuration (events are attached by the caller).
    pub fn shell_config(&self) -> Result<ShellConfig> {
        anyhow::ensure!(
            !self.upstream.is_empty(),
            "--upstream is required: the SV2 pool, e.g. 127.0.0.1:34254"
        );
        let keys = &self.upstream_authority_key;
        anyhow::ensure!(
            keys.len() <= 1 || keys.len() == self.upstream.len(),
            "--upstream-authority-key: give one key for every upstream, or one per --upstream ({} keys for {} upstreams)",
            keys.len(),
            self.upstream.len()
        );
        let mut upstreams = Vec::new();
        for (i, &addr) in self.upstream.iter().enumerate() {
            // Without a key, any certificate: allowed only with --insecure-skip-verify, which
            // `serve` checks for the SV2 translator (the SV1 proxy's upstream has none).
            let authority_key = keys
                .get(i)
                .or(keys.first())
                .map(|key| sv2::keys::parse_public_key(key))
                .transpose()
                .map_err(|e| anyhow::anyhow!("--upstream-authority-key for {addr}: {e}"))?;
            anyhow::ensure!(
                authority_key.is_none() || !self.insecure_skip_verify,
                "--upstream-authority-key and --insecure-skip-verify exclude each other"
            );
            upstreams.push(UpstreamSpec {
                addr,
                authority_key,
            });
        }
        anyhow::ensure!(
            !self.upstream_keepalive.is_zero(),
            "--upstream-keepalive must be positive"
        );
        anyhow::ensure!(
            !self.upstream_open_timeout.is_zero(),
            "--upstream-open-timeout must be positive"
        );
        anyhow::ensure!(
            self.shares_per_minute > 0.0 && self.shares_per_minute.is_finite(),
            "--shares-per-minute must be positive"
        );
        let mut admission = self.edge.admission(edge::Admission {
            max_connections: 10_000,
            ..edge::Admission::default()
        })?;
        if let Some(devices) = self.max_devices {
            anyhow::ensure!(devices > 0, "--max-devices must be at least 1");
            anyhow::ensure!(
                self.edge.max_connections.is_none_or(|c| c == devices),
                "--max-devices is another name for --max-connections: give one of them"
            );
            admission.max_connections = devices;
        }
        let channels: ChannelMode = self
            .channels
            .parse()
            .map_err(|e| anyhow::anyhow!("--channels: {e}"))?;
        // Room for `.miner<N>` within SV2's 255-byte user_identity.
        anyhow::ensure!(
            channels == ChannelMode::Aggregated || self.user_identity.len() <= 230,
            "--user-identity: at most 230 bytes with per-device channels"
        );
        anyhow::ensure!(
            !self.worker_tracking || channels == ChannelMode::Aggregated,
            "--worker-tracking: per-device channels already carry one device each"
        );
        let rate = self.device_hash_rate.0.hashes_per_sec();
        anyhow::ensure!(
            rate > 0.0 && rate.is_finite(),
            "--device-hash-rate must be positive"
        );
        let mut c = ShellConfig::new(self.listen, upstreams);
        c.keepalive = self.upstream_keepalive.0;
        c.open_timeout = self.upstream_open_timeout.0;
        c.admission = admission;
        c.http_listen = self.http_listen;
        c.translator = TranslatorConfig {
            channels,
            user_identity: self.user_identity.clone(),
            start_difficulty: if self.start_difficulty < self.min_difficulty {
                self.min_difficulty
            } else {
                self.start_difficulty
            },
            device_hash_rate: rate,
            worker_tracking: self.worker_tracking,
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

/// `stratumlab translator`: SV1 devices onto an SV2 pool.
pub fn run(args: TranslatorArgs) -> Result<()> {
    serve(args, "translator", shell::start)
}

/// `stratumlab proxy`: SV1 devices onto one SV1 connection to an SV1 pool.
pub fn run_proxy(args: TranslatorArgs) -> Result<()> {
    serve(args, "proxy", shell::start_with::<Sv1Transport>)
}

fn serve<F, Fut>(settings: TranslatorArgs, role: &'static str, start: F) -> Result<()>
where
    F: FnOnce(ShellConfig) -> Fut,
    Fut: std::future::Future<Output = Result<shell::Running, shell::ShellError>>,
{
    let mut sc = settings.shell_config()?;
    if role == "translator" {
        if sc.upstreams.iter().any(|u| u.authority_key.is_none()) {
            anyhow::ensure!(
                settings.insecure_skip_verify,
                "--upstream-authority-key BASE58 is required: the pool's authority public key (it \
                 prints it at start), or --insecure-skip-verify to accept any pool"
            );
            tracing::warn!("--insecure-skip-verify: accepting any pool certificate");
        }
    } else {
        anyhow::ensure!(
            settings.upstream_authority_key.is_empty() && !settings.insecure_skip_verify,
            "--upstream-authority-key and --insecure-skip-verify are for the SV2 translator"
        );
    }
    anyhow::ensure!(
        role == "translator" || sc.translator.channels == ChannelMode::Aggregated,
        "--channels per-device is for `stratumlab translator` only: an SV1 pool gives one subscription per connection, so the {role} aggregates"
    );
    sc.role = role;
    let sink = match &settings.events {
        Some(p) => EventSink::create(p, role, "")?,
        None => EventSink::disabled(),
    };
    sc.events = sink.clone();
    let upstreams: Vec<String> = sc.upstreams.iter().map(|u| u.addr.to_string()).collect();
    let upstreams = upstreams.join(", ");
    let rt = super::runtime(None)?;
    let summary = rt.block_on(async {
        let mut running = start(sc)
            .await
            .with_context(|| format!("opening an upstream channel (upstreams: {upstreams})"))?;
        println!("sv1 listening on {}", running.sv1_addr);
        if let Some(a) = running.http_addr {
            println!("http listening on {a}");
        }
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        match running.channels {
            ChannelMode::Aggregated => eprintln!(
                "{role}: channel {} open at {}",
                running.channel_id, running.upstream
            ),
            ChannelMode::PerDevice => eprintln!(
                "{role}: connected to {}; a channel per device as devices subscribe",
                running.upstream
            ),
        }
        tokio::select! {
            _ = super::shutdown_signal(settings.duration.0) => {
                running.stop().await.context(role.to_owned())
            }
            ended = running.finished() => {
                ended.context(role.to_owned())
            }
        }
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    let written = sink.finish().context("writing events")?;
    eprintln!("{role}: {summary}");
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
        let s = TranslatorArgs::default();
        let e = s.shell_config().unwrap_err();
        assert!(format!("{e:#}").contains("--upstream"), "{e:#}");
        let s: TranslatorArgs = config::parse(&[
            "--upstream",
            "127.0.0.1:1",
            "--upstream-authority-key",
            "nonsense",
        ])
        .unwrap();
        assert!(s.shell_config().is_err());
        // Two keys for three upstreams: which goes with which is unclear.
        let key = sv2::keys::REFERENCE_AUTHORITY_PUBLIC_KEY;
        let s: TranslatorArgs = config::parse(&[
            "--upstream",
            "127.0.0.1:1",
            "--upstream",
            "127.0.0.1:2",
            "--upstream",
            "127.0.0.1:3",
            "--upstream-authority-key",
            key,
            "--upstream-authority-key",
            key,
        ])
        .unwrap();
        let e = s.shell_config().unwrap_err();
        assert!(format!("{e:#}").contains("2 keys for 3 upstreams"), "{e:#}");
    }

    #[test]
    fn upstreams_come_from_flags_or_a_file_as_one_or_a_list() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.toml");
        let with_file = ["--config", file.to_str().unwrap()];
        std::fs::write(&file, "upstream = \"127.0.0.1:7\"\n").unwrap();
        let s: TranslatorArgs = config::parse(&with_file).unwrap();
        let c = s.shell_config().unwrap();
        assert_eq!(c.upstreams.len(), 1);
        assert_eq!(c.upstreams[0].addr.port(), 7);
        std::fs::write(
            &file,
            "upstream = [\"127.0.0.1:7\", \"127.0.0.1:8\"]\nupstream_keepalive = \"5s\"\n",
        )
        .unwrap();
        let s: TranslatorArgs = config::parse(&with_file).unwrap();
        let c = s.shell_config().unwrap();
        let ports: Vec<u16> = c.upstreams.iter().map(|u| u.addr.port()).collect();
        assert_eq!(ports, [7, 8]);
        assert_eq!(c.keepalive, Duration::from_secs(5));
        assert_eq!(c.open_timeout, Duration::from_secs(10), "the default");
        std::fs::write(
            &file,
            "upstream = \"127.0.0.1:7\"\nupstream_open_timeout = \"2s\"\n",
        )
        .unwrap();
        let s: TranslatorArgs = config::parse(&with_file).unwrap();
        assert_eq!(
            s.shell_config().unwrap().open_timeout,
            Duration::from_secs(2)
        );
        // Flags win over the file.
        let s: TranslatorArgs =
            config::parse(&[with_file[0], with_file[1], "--upstream", "127.0.0.1:9"]).unwrap();
        let c = s.shell_config().unwrap();
        assert_eq!(c.upstreams[0].addr.port(), 9);
        assert_eq!(c.upstreams.len(), 1);
    }

    #[test]
    fn channel_mode_comes_from_the_flag_or_the_file() {
        let s: TranslatorArgs = config::parse(&["--upstream", "127.0.0.1:1"]).unwrap();
        assert_eq!(
            s.shell_config().unwrap().translator.channels,
            ChannelMode::Aggregated
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.toml");
        let args = [
            "--upstream",
            "127.0.0.1:1",
            "--config",
            file.to_str().unwrap(),
        ];
        std::fs::write(&file, "channels = \"per-device\"\n").unwrap();
        let s: TranslatorArgs = config::parse(&args).unwrap();
        assert_eq!(
            s.shell_config().unwrap().translator.channels,
            ChannelMode::PerDevice
        );
        std::fs::write(&file, "channels = \"both\"\n").unwrap();
        let s: TranslatorArgs = config::parse(&args).unwrap();
        let e = s.shell_config().unwrap_err();
        assert!(format!("{e:#}").contains("--channels"), "{e:#}");
    }

    #[test]
    fn the_sv1_proxy_refuses_per_device_channels() {
        let args =
            config::parse(&["--upstream", "127.0.0.1:1", "--channels", "per-device"]).unwrap();
        let e = run_proxy(args).unwrap_err();
        assert!(format!("{e:#}").contains("SV1 pool"), "{e:#}");
    }

    #[test]
    fn worker_tracking_asks_for_0x0002_and_waits_at_most_half_the_open_timeout() {
        let c = |extra: &[&str]| {
            let s: TranslatorArgs =
                config::parse(&[&["--upstream", "127.0.0.1:1"], extra].concat()).unwrap();
            s.shell_config()
        };
        let plain = c(&[]).unwrap().hello();
        assert!(plain.extensions.is_empty());
        let h = c(&["--worker-tracking"]).unwrap().hello();
        assert_eq!(
            (h.extensions, h.answer_wait),
            (&[2][..], Duration::from_secs(2))
        );
        let quick = c(&["--worker-tracking", "--upstream-open-timeout", "1s"]).unwrap();
        assert_eq!(quick.hello().answer_wait, Duration::from_millis(500));
        let e = c(&["--worker-tracking", "--channels", "per-device"]).unwrap_err();
        assert!(format!("{e:#}").contains("--worker-tracking"), "{e:#}");
    }

    #[test]
    fn flags_reach_the_core() {
        let s: TranslatorArgs = config::parse(&[
            "--upstream",
            "127.0.0.1:1",
            "--start-difficulty",
            "0.5",
            "--device-hash-rate",
            "40kH/s",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .unwrap();
        let c = s.shell_config().unwrap();
        assert_eq!(c.listen.ip().to_string(), "127.0.0.1");
        assert_eq!(c.http_listen, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(c.translator.start_difficulty.as_f64(), 0.5);
        assert_eq!(c.translator.device_hash_rate, 40_000.0);
        // No key given: none (the translator then requires --insecure-skip-verify).
        assert_eq!(c.upstreams[0].authority_key, None);
    }
}
