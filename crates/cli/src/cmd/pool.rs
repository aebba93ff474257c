//! `stratumlab pool`: the Stratum V1 pool on the shared accounting engine, fed by a
//! bitcoind-compatible node (simnet or a real bitcoind).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use edge::Admission;
use mining::vardiff::VardiffConfig;
use pool::channel::ChannelConfig;
use pool::engine::{EngineConfig, PayoutMode};
use pool::jd_token::TokenKey;
use pool::jobs::JobConfig;
use pool::node::NodeConfig;
use pool::service::{PoolSettings, RunningPool, Sv2Settings};
use pool::store::{Durability, StoreConfig};
use pool::sv1::Sv1Config;
use pool::tp::TpConfig;
use primitives::bitcoin::Network;
use primitives::Difficulty;
use simnet::tdp::TdpKeys;

use crate::cmd::edge::EdgeArgs;
use crate::cmd::keys::AuthorityArgs;
use crate::cmd::node::NodeArgs;
use crate::config::{self, Dur};

/// Run a Stratum V1 pool: jobs from a node's getblocktemplate, shares validated and stored,
/// blocks submitted, status over HTTP.
#[derive(Args, Serialize, Deserialize, Debug)]
pub struct PoolArgs {
    /// TOML file with settings; its keys are the flags' names in snake_case.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Serve Stratum V1 miners on this address (port 0: any free port).
    #[arg(long, value_name = "ADDR")]
    pub sv1_listen: Option<SocketAddr>,
    /// The node's RPC endpoint and credentials (cmd/node.rs).
    #[command(flatten)]
    #[serde(flatten)]
    pub node: NodeArgs,
    /// The node's ZMQ hashblock endpoint; without it the pool follows the node by long poll.
    #[arg(long, value_name = "ADDR")]
    pub zmq: Option<String>,
    /// Pool mode: the address every coinbase pays.
    #[arg(long, value_name = "ADDR")]
    pub payout_address: Option<String>,
    /// Solo mode: each miner's coinbase pays the address it authorized with.
    #[arg(long)]
    pub solo: bool,
    /// The network payout addresses belong to: bitcoin, testnet, signet, regtest (simnet's).
    #[arg(long, default_value = "regtest")]
    pub network: String,
    /// Share difficulty of a new miner.
    #[arg(long, default_value = "1")]
    pub start_difficulty: Difficulty,
    /// Lowest share difficulty vardiff may set; may be far below 1 (the default is 2^-32).
    #[arg(long, default_value_t = Difficulty::MIN)]
    pub min_difficulty: Difficulty,
    /// Shares per minute vardiff aims for per connection.
    #[arg(long, default_value_t = 15.0)]
    pub shares_per_minute: f64,
    /// Ask the node for a template this often, whatever else happens.
    #[arg(long, default_value = "30s")]
    pub template_interval: Dur,
    /// Serve /metrics, /api/status, /api/workers and /healthz on this address.
    #[arg(long, value_name = "ADDR")]
    pub http_listen: Option<SocketAddr>,
    /// The SQLite file of accepted shares and found blocks [default: pool.sqlite].
    #[arg(long, value_name = "PATH")]
    pub store: Option<PathBuf>,
    /// strict (each share fsynced before its ack), batched (acks wait for a group commit) or
    /// off (acks at once, written in the background).
    #[arg(long, default_value = "batched")]
    pub durability: Durability,
    /// Group-commit window of --durability batched.
    #[arg(long, default_value = "10ms")]
    pub batch_window: Dur,
    /// Write events (jobs sent, share verdicts, blocks) to this file.
    #[arg(long, value_name = "PATH")]
    pub events: Option<PathBuf>,
    /// Text in every coinbase after the height.
    #[arg(long, default_value_t = default_coinbase_tag())]
    pub coinbase_tag: String,
    /// Stop after this long; 0 runs until interrupted.
    #[arg(long, default_value = "0")]
    pub duration: Dur,
    /// Serve Stratum V2 miners (Noise NX, Mining Protocol) on this address.
    #[arg(long, value_name = "ADDR")]
    pub sv2_listen: Option<SocketAddr>,
    /// Take templates from this SV2 Template Provider (Template Distribution Protocol); found
    /// blocks go back to it as SubmitSolution. With --node-rpc as well, the node is a second
    /// way out (a block the provider cannot take, or does not answer for within 5 s, goes out
    /// through submitblock) and a second source of work while the provider is unreachable.
    #[arg(long, value_name = "ADDR")]
    pub tp: Option<SocketAddr>,
    /// The Template Provider's authority public key (base58; simnet prints it as `tdp
    /// authority public key`): its certificate must be signed with it. Required with --tp
    /// unless --insecure-skip-verify.
    #[arg(long, value_name = "BASE58")]
    pub tp_authority_key: Option<String>,
    /// Accept any certificate from the servers this role connects to (here, the Template
    /// Provider) instead of checking it against their authority key.
    #[arg(long)]
    pub insecure_skip_verify: bool,
    /// The role's SV2 authority key pair (cmd/keys.rs).
    #[command(flatten)]
    #[serde(flatten)]
    pub authority: AuthorityArgs,
    /// How long each SV2 connection's Noise certificate is valid.
    #[arg(long, default_value = "1h")]
    pub cert_validity: Dur,
    /// The job token key shared with the Job Declarator Server (a file of 64 hex digits): SV2
    /// clients that set REQUIRES_WORK_SELECTION may then declare their own jobs
    /// (SetCustomMiningJob). Without it the pool refuses work selection.
    #[arg(long, value_name = "PATH")]
    pub jd_token_key: Option<PathBuf>,
    /// Channels one SV2 connection may open. A farm proxy with a channel per
    /// device (`stratumlab translator --channels per-device`) needs one per device it serves.
    #[arg(long, value_name = "N", default_value_t = pool::sv2::Sv2Config::default().max_channels)]
    pub sv2_max_channels: usize,
    /// SV2 connections must negotiate extension 0x0002 (worker-specific hashrate tracking:
    /// every extended share names its worker) before they open a channel; a connection that
    /// opens one without it is closed. Without this flag the pool offers the extension and
    /// takes connections either way.
    #[arg(long)]
    pub require_worker_tracking: bool,
    /// The connection edge's limits, the same on every role (cmd/edge.rs).
    #[command(flatten)]
    #[serde(flatten)]
    pub edge: EdgeArgs,
}

config::role_settings!(PoolArgs);

/// What every coinbase says after the height unless `--coinbase-tag` says otherwise.
fn default_coinbase_tag() -> String {
    String::from_utf8(JobConfig::default().coinbase_tag).expect("utf-8")
}

impl PoolArgs {
    /// The SV2 front end's authority keys: both halves given, or the reference pair.
    /// Coinbase extranonce bytes miners roll after the pool's 4-byte prefix. SV1 miners roll
    /// their extranonce2 (4 bytes); an SV2-only pool gives extended channels 8, so that an
    /// aggregating proxy can split them among its devices and still leave each 4 or more (the
    /// reference translator asks for 6). A pool serving both rolls what SV1 miners expect.
    fn rolled_extranonce(&self, sv1: &Sv1Config) -> usize {
        if self.sv2_listen.is_some() && self.sv1_listen.is_none() {
            8
        } else {
            sv1.extranonce2_size
        }
    }

    /// Room past the default for extended channels that ask for more (the reference JDC asks
    /// for 10 bytes: its own 2 and 8 for its devices); only where no SV1 extranonce2 size
    /// fixes the coinbase's layout.
    fn extra_rollable(&self) -> usize {
        if self.sv2_listen.is_some() && self.sv1_listen.is_none() {
            4
        } else {
            0
        }
    }

    fn sv2_settings(&self) -> Result<Sv2Settings> {
        // An SV1-only pool signs nothing: it neither needs nor writes a key file.
        let keys = if self.sv2_listen.is_some() {
            self.authority.keys("pool")?
        } else {
            TdpKeys::reference()
        };
        if self.cert_validity.0.is_zero() {
            bail!("--cert-validity must be positive");
        }
        if self.sv2_max_channels == 0 {
            bail!("--sv2-max-channels must be positive");
        }
        let mut s = Sv2Settings {
            keys,
            cert_validity: self.cert_validity.0,
            ..Sv2Settings::default()
        };
        s.config.extended_extranonce_size = self.rolled_extranonce(&Sv1Config::default());
        s.config.max_channels = self.sv2_max_channels;
        if self.require_worker_tracking {
            s.config.required_extensions =
                vec![sv2::messages::extensions::extension::WORKER_HASHRATE_TRACKING];
        }
        if let Some(path) = &self.jd_token_key {
            let key = TokenKey::read(path).context("--jd-token-key")?;
            s.config.jd_token_key = Some(std::sync::Arc::new(key));
        }
        Ok(s)
    }

    fn tp_config(&self) -> Result<Option<TpConfig>> {
        let Some(addr) = self.tp else {
            if self.tp_authority_key.is_some() {
                bail!("--tp-authority-key goes with --tp");
            }
            return Ok(None);
        };
        let mut c = TpConfig::new(addr);
        c.authority = crate::cmd::keys::server_key(
            self.tp_authority_key.as_deref(),
            self.insecure_skip_verify,
            "--tp-authority-key",
        )?;
        Ok(Some(c))
    }

    pub(crate) fn pool_settings(&self) -> Result<PoolSettings> {
        let network: Network = self
            .network
            .parse()
            .with_context(|| format!("--network {}", self.network))?;
        let payout = match (&self.payout_address, self.solo) {
            (Some(_), true) => bail!("--payout-address and --solo exclude each other"),
            (None, false) => bail!("give --payout-address ADDR (pool mode) or --solo"),
            (None, true) => PayoutMode::Solo,
            (Some(a), false) => PayoutMode::Pool(
                primitives::coinbase::payout_script(a, network)
                    .with_context(|| format!("--payout-address {a}"))?,
            ),
        };
        let tp = self.tp_config()?;
        let url = match (self.node.node_rpc.clone(), &tp) {
            // Alone, or beside the provider as a second way out for blocks and a second
            // source of work.
            (Some(url), _) => url,
            // Templates come from the provider; the node settings are unused.
            (None, Some(_)) => String::new(),
            (None, None) => bail!("--node-rpc URL (or --tp ADDR) is required"),
        };
        let node_beside_tp = tp.is_some() && self.node.node_rpc.is_some();
        let auth = self.node.auth()?;
        let mut node = NodeConfig::new(url, auth).with_template_interval(self.template_interval.0);
        if let Some(z) = &self.zmq {
            node = node.with_zmq(z.clone());
        }
        let vardiff = VardiffConfig {
            shares_per_minute: self.shares_per_minute,
            min: self.min_difficulty,
            ..VardiffConfig::default()
        };
        if self.shares_per_minute.is_nan() || self.shares_per_minute <= 0.0 {
            bail!("--shares-per-minute must be positive");
        }
        let sv1 = Sv1Config::default();
        let jobs = JobConfig {
            coinbase_tag: self.coinbase_tag.as_bytes().to_vec(),
            extranonce_len: 4 + self.rolled_extranonce(&sv1) + self.extra_rollable(),
        };
        let admission = self.admission()?;
        Ok(PoolSettings {
            engine: EngineConfig {
                jobs,
                channel: ChannelConfig {
                    vardiff,
                    ..ChannelConfig::default()
                },
                payout,
                network,
                start_difficulty: self.start_difficulty,
            },
            node,
            tp,
            node_beside_tp,
            sv1_listen: self.sv1_listen,
            http_listen: self.http_listen,
            store: Some(StoreConfig {
                durability: self.durability,
                batch_window: self.batch_window.0,
                ..StoreConfig::new(
                    self.store
                        .as_deref()
                        .unwrap_or(std::path::Path::new("pool.sqlite")),
                )
            }),
            events: self.events.clone(),
            // Which lab configuration the pool serves is the lab's knowledge (it names the
            // events file), not the pool's: a protocol is not a configuration (sv1, D, D-ref...).
            events_config: String::new(),
            sv1,
            admission,
            sv2_listen: self.sv2_listen,
            sv2: self.sv2_settings()?,
        })
    }
}

impl PoolArgs {
    fn admission(&self) -> Result<Admission> {
        self.edge.admission(Admission::default())
    }
}

pub fn run(settings: PoolArgs) -> Result<()> {
    let pool_settings = settings.pool_settings()?;
    // A write past a file size limit (`ulimit -f`) then fails with EFBIG, which the store
    // reports and retries like a full disk, instead of the signal killing the pool with
    // found blocks and acknowledgements in memory.
    // SAFETY: setting a signal's disposition to ignore, before the runtime's threads start (the
    // allocator's background thread, already running, blocks every signal).
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let rt = super::runtime(None)?;
    rt.block_on(async move {
        if settings.sv2_listen.is_some() {
            println!(
                "sv2 authority public key {}",
                pool_settings.sv2.keys.public_key()
            );
        }
        let pool = RunningPool::start(pool_settings).await?;
        if let Some(a) = pool.sv1_addr {
            println!("sv1 listening on {a}");
        }
        if let Some(a) = pool.sv2_addr {
            println!("sv2 listening on {a}");
        }
        if let Some(a) = pool.http_addr {
            println!("http listening on {a}");
        }
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let stop = crate::cmd::shutdown_signal(settings.duration.0);
        stop.await;
        let snap = pool.engine.stats.snapshot(pool::Timestamp::from_millis(0));
        pool.shutdown().await?;
        eprintln!(
            "pool stopped: {} shares accepted, {} rejected, {} blocks found",
            snap.accepted,
            snap.rejected.total(),
            snap.blocks.submitted
        );
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn admission_limits_come_from_file_and_flags() {
        let s: PoolArgs = config::parse_file(
            "connect_rate = 50.0\nidle_timeout = \"2m\"\nmax_line = 4096\n",
            &[
                "--connect-rate",
                "80",
                "--message-burst",
                "10",
                "--invalid-share-ban-after",
                "0",
                "--handshake-timeout",
                "0",
            ],
        )
        .unwrap();
        let a = s.admission().unwrap();
        assert_eq!(
            a.connect_rate.per_second, 80.0,
            "the flag wins over the file"
        );
        assert_eq!(
            a.connect_rate.burst,
            Admission::default().connect_rate.burst
        );
        assert_eq!(a.message_rate.burst, 10.0);
        assert_eq!(a.max_line, 4096);
        assert_eq!(a.idle_timeout, Duration::from_secs(120));
        // 0 disables: never ban, wait forever for the handshake.
        assert_eq!(a.invalid_share_ban_after, u32::MAX);
        assert!(a.handshake_timeout > Duration::from_secs(86_400 * 365));
    }

    #[test]
    fn defaults_are_the_servers() {
        let s = PoolArgs::default();
        let a = s.admission().unwrap();
        let d = Admission::default();
        assert_eq!(a.max_connections, d.max_connections);
        assert_eq!(a.connect_rate, d.connect_rate);
        assert_eq!(a.message_rate, d.message_rate);
        assert_eq!(a.max_line, d.max_line);
        assert_eq!(a.handshake_timeout, d.handshake_timeout);
        assert_eq!(a.idle_timeout, d.idle_timeout);
        assert_eq!(a.invalid_share_ban_after, d.invalid_share_ban_after);
        assert_eq!(a.ban_duration, d.ban_duration);
    }

    #[test]
    fn an_sv2_only_pool_leaves_extended_channels_eight_bytes_to_roll() {
        let listen = Some("127.0.0.1:0".parse().unwrap());
        let sv2_only = PoolArgs {
            sv2_listen: listen,
            ..PoolArgs::default()
        };
        let both = PoolArgs {
            sv1_listen: listen,
            sv2_listen: listen,
            ..PoolArgs::default()
        };
        let sv1 = Sv1Config::default();
        for (s, rolled) in [(sv2_only, 8), (both, sv1.extranonce2_size)] {
            assert_eq!(s.rolled_extranonce(&sv1), rolled);
            let sv2 = s.sv2_settings().unwrap();
            assert_eq!(sv2.config.extended_extranonce_size, rolled);
        }
    }

    #[test]
    fn worker_tracking_is_offered_and_required_on_demand() {
        let s = PoolArgs::default();
        assert!(s
            .sv2_settings()
            .unwrap()
            .config
            .required_extensions
            .is_empty());
        let s: PoolArgs = config::parse(&["--require-worker-tracking"]).unwrap();
        assert_eq!(
            s.sv2_settings().unwrap().config.required_extensions,
            vec![2]
        );
        let s: PoolArgs = config::parse_file("require_worker_tracking = true\n", &[]).unwrap();
        assert_eq!(
            s.sv2_settings().unwrap().config.required_extensions,
            vec![2]
        );
    }

    #[test]
    fn the_job_token_key_turns_work_selection_on() {
        let s = PoolArgs::default();
        assert!(s.sv2_settings().unwrap().config.jd_token_key.is_none());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jd.key");
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
        let s: PoolArgs = config::parse(&["--jd-token-key", path.to_str().unwrap()]).unwrap();
        let key = s.sv2_settings().unwrap().config.jd_token_key.unwrap();
        assert_eq!(key.to_hex(), "ab".repeat(32));
        // From the config file too; a key that is not 64 hex digits is refused, flag named.
        std::fs::write(&path, "abcd").unwrap();
        let s: PoolArgs = config::parse_file(&format!("jd_token_key = {path:?}\n"), &[]).unwrap();
        let e = format!("{:#}", s.sv2_settings().unwrap_err());
        assert!(e.starts_with("--jd-token-key"), "{e}");
    }

    #[test]
    fn channels_per_sv2_connection_come_from_the_flag_or_the_file() {
        let s = PoolArgs::default();
        let default = pool::sv2::Sv2Config::default().max_channels;
        assert_eq!(s.sv2_settings().unwrap().config.max_channels, default);
        let s: PoolArgs = config::parse(&["--sv2-max-channels", "5000"]).unwrap();
        assert_eq!(s.sv2_settings().unwrap().config.max_channels, 5000);
        let s: PoolArgs = config::parse_file("sv2_max_channels = 0\n", &[]).unwrap();
        let e = format!("{:#}", s.sv2_settings().unwrap_err());
        assert!(e.contains("--sv2-max-channels"), "{e}");
    }

    #[test]
    fn node_and_authority_keys_are_top_level_keys_like_the_rest() {
        let s: PoolArgs = config::parse_file(
            "node_rpc = \"http://127.0.0.1:18443\"\nrpc_user = \"u\"\nrpc_password = \"p\"\nauthority_key_file = \"pool.key\"\n",
            &["--rpc-user", "v"],
        )
        .unwrap();
        assert_eq!(s.node.node_rpc.as_deref(), Some("http://127.0.0.1:18443"));
        let pool::node::NodeAuth::UserPass { user, password } = s.node.auth().unwrap() else {
            panic!("no user and password");
        };
        assert_eq!(
            (user.as_str(), password.as_str()),
            ("v", "p"),
            "the flag wins"
        );
        let key = s.authority.authority_key_file.as_deref();
        assert_eq!(key, Some(std::path::Path::new("pool.key")));
        let s: PoolArgs =
            config::parse_file("rpc_cookie = \"/c\"\nrpc_user = \"u\"\n", &[]).unwrap();
        let e = s.node.auth().unwrap_err().to_string();
        assert!(e.contains("--rpc-cookie"), "{e}");
    }

    #[test]
    fn nonsense_limits_are_refused_with_the_flag_named() {
        let s: PoolArgs = config::parse_file("max_connections_per_ip = 0\n", &[]).unwrap();
        let e = s.admission().unwrap_err().to_string();
        assert!(e.starts_with("--max-connections-per-ip"), "{e}");
        // A misspelt edge key in the file is an error, like any other.
        assert!(config::parse_file::<PoolArgs>("max_connection_per_ip = 5\n", &[]).is_err());
    }
}
