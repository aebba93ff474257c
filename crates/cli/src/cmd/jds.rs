//! `stratumlab jds`: the Job Declarator Server beside the pool.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use events::EventSink;
use jds::shell::{JdsSettings, RunningJds, StatsSnapshot};
use jds::JdsConfig;
use pool::jd_token::TokenKey;
use pool::node::NodeConfig;
use primitives::bitcoin::Network;

use crate::cmd::edge::EdgeArgs;
use crate::cmd::keys::AuthorityArgs;
use crate::cmd::node::NodeArgs;
use crate::config::{self, Dur};

/// Run a Job Declarator Server: tokens for JD clients, their declared jobs checked against the
/// pool-side node's mempool (missing transactions requested), their found blocks submitted.
#[derive(Args, Serialize, Deserialize, Debug)]
pub struct JdsArgs {
    /// TOML file with settings; its keys are the flags' names in snake_case.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Accept JD clients (Noise NX) on this address (port 0: any free port; the bound address
    /// is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The node's RPC endpoint and credentials (cmd/node.rs).
    #[command(flatten)]
    #[serde(flatten)]
    pub node: NodeArgs,
    /// File holding the job token key (64 hex digits), the same file the pool's
    /// --jd-token-key reads.
    #[arg(long, value_name = "PATH")]
    pub jd_token_key: Option<PathBuf>,
    /// The pool's payout address: the output every declared coinbase must pay.
    #[arg(long, value_name = "ADDR")]
    pub payout_address: Option<String>,
    /// The network the payout address belongs to.
    #[arg(long, default_value = "regtest")]
    pub network: String,
    /// The role's SV2 authority key pair (cmd/keys.rs).
    #[command(flatten)]
    #[serde(flatten)]
    pub authority: AuthorityArgs,
    /// How long each connection's Noise certificate is valid.
    #[arg(long, default_value = "1h")]
    pub cert_validity: Dur,
    /// How long allocated and declared tokens are valid.
    #[arg(long, default_value_t = Dur(jds_defaults().token_lifetime))]
    pub token_lifetime: Dur,
    /// Token allocations per second one connection may ask for after a burst of 50; faster
    /// closes it.
    #[arg(long, default_value_t = jds_defaults().allocations_per_second)]
    pub allocation_rate: f64,
    /// How long a declaration waits for the transactions it was asked for.
    #[arg(long, default_value_t = Dur(jds_defaults().missing_txs_timeout))]
    pub missing_txs_timeout: Dur,
    /// Refresh the view of the node's mempool this often; 0: only at start and when a
    /// declaration names transactions the view lacks.
    #[arg(long, default_value = "2s")]
    pub mempool_refresh: Dur,
    /// Write events (connections, blocks submitted and the node's verdicts) to this file.
    #[arg(long, value_name = "PATH")]
    pub events: Option<PathBuf>,
    /// Keep each pushed block in this SQLite file before submitting it, and the node's answer
    /// after; blocks the node had not answered for are submitted again at the next start.
    #[arg(long, value_name = "PATH")]
    pub store: Option<PathBuf>,
    /// Serve /healthz, /api/status and /metrics on this address.
    #[arg(long, value_name = "ADDR")]
    pub http_listen: Option<SocketAddr>,
    /// Log progress this often; 0 never.
    #[arg(long, default_value = "30s")]
    pub progress_interval: Dur,
    /// Stop after this long; 0 runs until interrupted.
    #[arg(long, default_value = "0")]
    pub duration: Dur,
    /// The connection edge's limits, the same on every role (cmd/edge.rs).
    #[command(flatten)]
    #[serde(flatten)]
    pub edge: EdgeArgs,
}

config::role_settings!(JdsArgs);

/// The library's defaults, which the flags' defaults are.
fn jds_defaults() -> JdsConfig {
    JdsConfig::new(Default::default())
}

impl JdsArgs {
    fn jds_settings(&self) -> Result<JdsSettings> {
        let network: Network = self
            .network
            .parse()
            .with_context(|| format!("--network {}", self.network))?;
        let Some(address) = &self.payout_address else {
            bail!("--payout-address ADDR (the pool's payout) is required");
        };
        let payout = primitives::coinbase::payout_script(address, network)
            .with_context(|| format!("--payout-address {address}"))?;
        let Some(key_path) = &self.jd_token_key else {
            bail!("--jd-token-key PATH (the key file the pool shares) is required");
        };
        let token_key = TokenKey::read(key_path).context("--jd-token-key")?;
        let Some(url) = self.node.node_rpc.clone() else {
            bail!("--node-rpc URL (the pool-side node) is required");
        };
        let auth = self.node.auth()?;
        let keys = self.authority.keys("jds")?;
        if self.cert_validity.is_zero() {
            bail!("--cert-validity must be positive");
        }
        if self.token_lifetime.is_zero() {
            bail!("--token-lifetime must be positive");
        }
        if !(self.allocation_rate > 0.0 && self.allocation_rate.is_finite()) {
            bail!("--allocation-rate must be a positive number");
        }
        let mut config = JdsConfig::new(payout);
        config.token_lifetime = self.token_lifetime.0;
        config.allocations_per_second = self.allocation_rate;
        config.missing_txs_timeout = self.missing_txs_timeout.0;
        let events = match &self.events {
            Some(p) => EventSink::create(p, "jds", "")
                .with_context(|| format!("--events {}", p.display()))?,
            None => EventSink::disabled(),
        };
        Ok(JdsSettings {
            listen: self.listen,
            config,
            token_key,
            keys,
            cert_validity: self.cert_validity.0,
            node: NodeConfig::new(url, auth),
            mempool_refresh: self.mempool_refresh.0,
            node_name: "pool".into(),
            admission: self.edge.admission(edge::Admission {
                // A JDC finishes its Noise handshake at once: a slow one is not a JDC.
                handshake_timeout: Duration::from_secs(10),
                ..edge::Admission::default()
            })?,
            events,
            // Blocks are few: each is committed and synced at once whatever the mode.
            store: self.store.as_ref().map(pool::store::StoreConfig::new),
            http_listen: self.http_listen,
        })
    }
}

fn summary(s: &StatsSnapshot) -> String {
    format!(
        "{} connections ({} open), {} tokens allocated, {} jobs declared, {} refused, {} transactions requested, {} solutions pushed, {} blocks submitted ({} accepted), {} pending",
        s.connections,
        s.open,
        s.tokens_allocated,
        s.jobs_declared,
        s.jobs_refused,
        s.txs_requested,
        s.solutions,
        s.blocks_submitted,
        s.blocks_accepted,
        s.blocks_pending()
    )
}

pub fn run(settings: JdsArgs) -> Result<()> {
    let jds_settings = settings.jds_settings()?;
    let rt = super::runtime(None)?;
    rt.block_on(async move {
        println!(
            "jds authority public key {}",
            jds_settings.keys.public_key()
        );
        let jds = RunningJds::start(jds_settings).await?;
        println!("jds listening on {}", jds.addr);
        if let Some(a) = jds.http_addr {
            println!("http listening on {a}");
        }
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let stats = jds.stats.clone();
        let every = settings.progress_interval.0;
        let progress = async move {
            if every.is_zero() {
                return std::future::pending().await;
            }
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tick.tick().await;
                tracing::info!("jds: {}", summary(&stats.snapshot()));
            }
        };
        tokio::select! {
            _ = crate::cmd::shutdown_signal(settings.duration.0) => {}
            _ = progress => {}
        }
        let snap = jds.shutdown().await;
        eprintln!("jds stopped: {}", summary(&snap));
        Ok(())
    })
}
