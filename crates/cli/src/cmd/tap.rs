//! `stratumlab tap`: a TCP relay between two roles that emulates the link between them (delay,
//! jitter, loss, bandwidth), counts the bytes each way and reads the Stratum V1 it carries.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use events::EventSink;
use tap::{Bandwidth, LinkConfig, LossRate, Protocol, Sv2Terminate, Tap, TapConfig};

use crate::cmd::keys::AuthorityArgs;
use crate::config::{self, Dur};

/// Relay TCP connections to an upstream through an emulated link (delay, jitter, loss,
/// bandwidth), counting bytes and reading the Stratum V1 jobs, shares and results that cross.
#[derive(Args, Serialize, Deserialize, Debug)]
pub struct TapArgs {
    /// TOML file with settings; its keys are the flags' names in snake_case.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Accept clients on this address (port 0: any free port; the bound address is printed).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Relay each client to this address.
    #[arg(long, value_name = "ADDR")]
    pub upstream: Option<SocketAddr>,
    /// Connect upstream from this local address (e.g. 127.0.0.2), so that several taps spread
    /// over loopback source addresses.
    #[arg(long, value_name = "IP")]
    pub source_addr: Option<IpAddr>,
    /// One-way delay in each direction (`72.5ms`); a round trip is twice this.
    #[arg(long, default_value = "0")]
    pub delay: Dur,
    /// One-way delay from clients toward the upstream [default: --delay].
    #[arg(long)]
    pub delay_up: Option<Dur>,
    /// One-way delay from the upstream toward clients [default: --delay].
    #[arg(long)]
    pub delay_down: Option<Dur>,
    /// Each chunk's delay varies uniformly within ± this, never reordering a stream's bytes.
    #[arg(long, default_value = "0")]
    pub jitter: Dur,
    /// Percentage of TCP segments lost, paid as the retransmission delay TCP would add
    /// (`0.5`, `1%`).
    #[arg(long, value_name = "PCT", default_value = "0")]
    pub loss: LossRate,
    /// Capacity of each direction, shared by all connections (`10Mbit`, `1.5Gbit`); 0:
    /// unlimited.
    #[arg(long, value_name = "RATE", default_value = "0")]
    pub bandwidth: Bandwidth,
    /// Hold each new connection's first bytes for the TCP handshake across the link (one round
    /// trip): true or false.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub handshake: bool,
    /// Seed of jitter and loss.
    #[arg(long, default_value_t = tap_defaults().seed)]
    pub seed: u64,
    /// Name of the link in events.
    #[arg(long, value_name = "NAME", default_value_t = tap_defaults().link_name)]
    pub link: String,
    /// What to read of the relayed bytes: auto (Stratum V1 when the first bytes are JSON), sv1,
    /// or raw (count bytes only).
    #[arg(long, default_value_t = tap_defaults().protocol)]
    pub protocol: Protocol,
    /// Write events (connections, bytes per link and direction, round trips, SV1 jobs, shares
    /// and results) to this file.
    #[arg(long, value_name = "PATH")]
    pub events: Option<PathBuf>,
    /// How often each connection reports its byte counts.
    #[arg(long, default_value_t = Dur(tap_defaults().report_interval))]
    pub report_interval: Dur,
    /// Most connections at once [default: as many as the open-file limit allows, two
    /// descriptors each].
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Bytes held per connection and direction before the tap stops reading from the sender.
    #[arg(long, value_name = "BYTES", default_value_t = tap_defaults().buffer_bytes)]
    pub buffer_bytes: usize,
    /// Longest Stratum V1 line read; a longer one stops reading (not relaying) its connection.
    #[arg(long, value_name = "BYTES", default_value_t = tap_defaults().max_line)]
    pub max_line: usize,
    /// Run the tap's threads at real-time priority (SCHED_FIFO) when the system allows, so
    /// that releases stay punctual while other processes keep the CPU busy, as a kernel link
    /// emulator's would: true or false.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub realtime: bool,
    /// Worker threads of the tap's runtime [default: one per core].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Stop after this long; 0 runs until interrupted.
    #[arg(long, default_value = "0")]
    pub duration: Dur,
    /// Terminate Stratum V2's Noise on both legs with the tap's own keys (clients must trust
    /// its authority public key, printed at start), re-encrypt every frame unchanged, and
    /// report the messages.
    #[arg(long)]
    pub sv2_terminate: bool,
    /// With --sv2-terminate: the tap's SV2 authority key pair (cmd/keys.rs).
    #[command(flatten)]
    #[serde(flatten)]
    pub authority: AuthorityArgs,
    /// With --sv2-terminate: the upstream's authority public key (base58) its certificate must
    /// be signed with. Required unless --insecure-skip-verify.
    #[arg(long, value_name = "BASE58")]
    pub upstream_authority_key: Option<String>,
    /// With --sv2-terminate: accept any certificate from the upstream.
    #[arg(long)]
    pub insecure_skip_verify: bool,
}

config::role_settings!(TapArgs);

/// The library's defaults, which the flags' defaults are.
fn tap_defaults() -> TapConfig {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    TapConfig::new(any, any)
}

impl TapArgs {
    pub fn link_config(&self) -> LinkConfig {
        LinkConfig {
            delay_up: self.delay_up.unwrap_or(self.delay).0,
            delay_down: self.delay_down.unwrap_or(self.delay).0,
            jitter: self.jitter.0,
            loss: self.loss,
            bandwidth: self.bandwidth,
            handshake: self.handshake,
        }
    }

    /// The tap's configuration (events are attached by the caller).
    pub fn tap_config(&self) -> Result<TapConfig> {
        let listen = self
            .listen
            .context("--listen is required: where clients connect, e.g. 127.0.0.1:3334")?;
        let upstream = self.upstream.context(
            "--upstream is required: where connections are relayed, e.g. 127.0.0.1:3333",
        )?;
        anyhow::ensure!(self.buffer_bytes > 0, "--buffer-bytes must be positive");
        anyhow::ensure!(self.max_line > 0, "--max-line must be positive");
        anyhow::ensure!(
            !self.report_interval.is_zero(),
            "--report-interval must be positive"
        );
        let mut c = TapConfig::new(listen, upstream);
        c.source_addr = self.source_addr;
        c.link = self.link_config();
        c.link_name = self.link.clone();
        c.seed = self.seed;
        c.protocol = self.protocol;
        c.report_interval = self.report_interval.0;
        c.max_connections = self.max_connections;
        c.buffer_bytes = self.buffer_bytes;
        c.max_line = self.max_line;
        c.realtime = self.realtime;
        c.sv2 = self.sv2_terminate()?;
        Ok(c)
    }
}

impl TapArgs {
    fn sv2_terminate(&self) -> Result<Option<Sv2Terminate>> {
        let keys_given = self.authority.any()
            || self.upstream_authority_key.is_some()
            || self.insecure_skip_verify;
        if !self.sv2_terminate {
            anyhow::ensure!(
                !keys_given,
                "--authority-key-file, --authority-public-key, --authority-secret-key, --upstream-authority-key and --insecure-skip-verify go with --sv2-terminate"
            );
            return Ok(None);
        }
        let keys = self.authority.keys("tap")?;
        let upstream = crate::cmd::keys::server_key(
            self.upstream_authority_key.as_deref(),
            self.insecure_skip_verify,
            "--upstream-authority-key",
        )?;
        Ok(Some(Sv2Terminate::new(keys, upstream)))
    }
}

pub fn run(settings: TapArgs) -> Result<()> {
    let mut tc = settings.tap_config()?;
    // First, so that every thread made after inherits the policy: the runtime's, the release
    // timer (which goes one higher), and the events writer, which must keep up with them.
    let realtime = settings.realtime
        && match tap::sched::realtime_current_thread(tap::sched::WORKER_PRIORITY) {
            Ok(()) => true,
            Err(e) => {
                eprintln!(
                    "tap: no real-time priority ({e}): releases may be late while other processes keep the CPU busy"
                );
                false
            }
        };
    let sink = match &settings.events {
        Some(p) => EventSink::create(p, "tap", "")?,
        None => EventSink::disabled(),
    };
    tc.events = sink.clone();
    let link = tc.link;
    if let Some(sv2) = &tc.sv2 {
        eprintln!(
            "tap: terminating SV2 noise: clients must trust authority key {}; upstream certificate {}",
            sv2.public_key(),
            if sv2.upstream_authority.is_some() {
                "checked against --upstream-authority-key"
            } else {
                "accepted from any authority"
            }
        );
    }
    let rt = super::runtime(settings.threads)?;
    let summary = rt.block_on(async {
        let tap = Tap::bind(tc).await?;
        println!("tap listening on {}", tap.local_addr());
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        eprintln!(
            "tap: -> {}, delay up {:?} down {:?}, jitter {:?}, loss {}, bandwidth {}, handshake {}, real-time {realtime}, up to {} connections",
            settings.upstream.map_or_else(String::new, |a| a.to_string()),
            link.delay_up,
            link.delay_down,
            link.jitter,
            link.loss,
            link.bandwidth,
            link.handshake,
            tap.max_connections()
        );
        anyhow::Ok(tap.run(super::shutdown_signal(settings.duration.0)).await)
    })?;
    // Connections are closed; nothing more is emitted.
    rt.shutdown_timeout(Duration::from_secs(1));
    let written = sink.finish().context("writing events")?;
    println!("{summary}");
    if settings.events.is_some() {
        println!("  events        {} written", written.events_written);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_file_and_delays_resolve_per_direction() {
        let s: TapArgs = config::parse_file(
            "listen = \"127.0.0.1:3334\"\nupstream = \"127.0.0.1:3333\"\ndelay = \"72.5ms\"\njitter = \"2ms\"\nloss = 0.5\nbandwidth = \"10Mbit\"\nprotocol = \"raw\"\n",
            &["--delay-down", "10ms", "--loss", "1%", "--link", "farm"],
        )
        .unwrap();
        let c = s.tap_config().unwrap();
        assert_eq!(c.link.delay_up, Duration::from_micros(72_500));
        assert_eq!(c.link.delay_down, Duration::from_millis(10), "flag wins");
        assert_eq!(c.link.jitter, Duration::from_millis(2));
        assert_eq!(c.link.loss.probability(), 0.01);
        assert_eq!(c.link.bandwidth.bits_per_sec(), 10_000_000);
        assert!(c.link.handshake);
        assert_eq!(c.protocol, Protocol::Raw);
        assert_eq!(c.link_name, "farm");
        assert_eq!(c.upstream, "127.0.0.1:3333".parse().unwrap());
        assert_eq!(c.report_interval, Duration::from_secs(1));
        // Without any delay flag both directions are undelayed.
        let s: TapArgs = config::parse_file(
            "listen = \"127.0.0.1:0\"\nupstream = \"127.0.0.1:1\"\nhandshake = false\n",
            &[],
        )
        .unwrap();
        let l = s.link_config();
        assert_eq!((l.delay_up, l.delay_down), (Duration::ZERO, Duration::ZERO));
        assert!(!l.handshake);
    }

    #[test]
    fn sv2_termination_takes_a_key_file_or_both_halves_and_an_upstream_key_or_insecure() {
        // The SV2 reference test pair's public half.
        const REFERENCE: &str = "9auqWEzQDVyd2oe1JVGFLMLHZtCo2FFqZwtKA5gd9xbuEu7PH72";
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("tap.key");
        let settings =
            |sv2_terminate, public: Option<&str>, upstream_key: Option<&str>, insecure| {
                let args = TapArgs {
                    listen: Some("127.0.0.1:0".parse().unwrap()),
                    upstream: Some("127.0.0.1:1".parse().unwrap()),
                    sv2_terminate,
                    authority: AuthorityArgs {
                        authority_key_file: (sv2_terminate && public.is_none())
                            .then(|| key_file.clone()),
                        authority_public_key: public.map(Into::into),
                        authority_secret_key: None,
                    },
                    upstream_authority_key: upstream_key.map(Into::into),
                    insecure_skip_verify: insecure,
                    ..TapArgs::default()
                };
                args.tap_config()
            };
        assert!(settings(false, None, None, false).unwrap().sv2.is_none());
        // No upstream key and no --insecure-skip-verify: refused, saying what to give.
        let e = settings(true, None, None, false).unwrap_err();
        assert!(
            format!("{e:#}").contains("--upstream-authority-key"),
            "{e:#}"
        );
        let sv2 = settings(true, None, None, true)
            .unwrap()
            .sv2
            .expect("terminating");
        assert!(
            sv2.upstream_authority.is_none(),
            "any upstream accepted, as asked"
        );
        // The tap's own pair came from its key file, fresh: not the reference pair.
        assert_ne!(sv2.public_key(), REFERENCE);
        let again = settings(true, None, Some(REFERENCE), false)
            .unwrap()
            .sv2
            .unwrap();
        assert_eq!(
            again.public_key(),
            sv2.public_key(),
            "the key file's pair, kept"
        );
        assert!(again.upstream_authority.is_some());
        assert!(
            settings(true, Some(REFERENCE), Some(REFERENCE), false).is_err(),
            "half a pair"
        );
        assert!(settings(true, None, Some("nonsense"), false).is_err());
        let e = settings(false, None, Some(REFERENCE), false).unwrap_err();
        assert!(format!("{e:#}").contains("--sv2-terminate"), "{e:#}");
    }

    #[test]
    fn addresses_are_required_and_bad_values_are_refused() {
        let s = TapArgs::default();
        let e = s.tap_config().unwrap_err();
        assert!(format!("{e:#}").contains("--listen"), "{e:#}");
        let s: TapArgs = config::parse(&["--listen", "127.0.0.1:0"]).unwrap();
        let e = s.tap_config().unwrap_err();
        assert!(format!("{e:#}").contains("--upstream"), "{e:#}");
        for bad in [
            "delay = \"72\"\n",
            "loss = 150\n",
            "bandwidth = \"fast\"\n",
            "protocol = \"sv3\"\n",
            "dealy = \"1ms\"\n",
        ] {
            assert!(config::parse_file::<TapArgs>(bad, &[]).is_err(), "{bad}");
        }
    }
}
