//! `stratumlab simnet`: run one simulated Bitcoin network in real time.
//!
//! The network itself is the sans-IO `simnet::Network`; this shell maps the monotonic clock onto
//! simulated time, wakes when the network's next deadline comes due, turns its outputs into
//! events and logs, and prints a summary when stopped (Ctrl-C, SIGTERM or `--duration`).
//!
//! One network can present several named nodes (`--node pool --node farm`, or `[[node]]`
//! tables in the file), each at its relay delay from the rest of the network and with its own
//! endpoints. Then every "X listening on ADDR" line (and the other per-node lines) starts with
//! `node NAME: `, node by node in the order given, and each node's RPC cookie goes to
//! `--datadir`/NAME. Without `--node` there is one node, "node", and nothing printed changes.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use events::EventSink;
use primitives::Difficulty;
use simnet::rpc::RpcAuth;
use simnet::tdp::{TdpConfig, TdpKeys};
use simnet::{Network, Node, NodeSpec, NodeStats, PeerBytes, SimnetConfig, DEFAULT_NODE};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cmd::keys::AuthorityArgs;
use crate::config::{self, Dur};

/// Run a simulated Bitcoin network: chain, mempool with a mainnet-like fee market, templates,
/// and blocks found by the rest of the network.
#[derive(Args, Serialize, Deserialize, Debug)]
pub struct SimnetArgs {
    /// TOML file with settings; its keys are the flags' names in snake_case.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Seed of every random stream: the same seed and timing give the same network.
    #[arg(long, default_value_t = SimnetConfig::default().seed)]
    pub seed: u64,
    /// Height of the tip at start.
    #[arg(long, default_value_t = SimnetConfig::default().start_height)]
    pub start_height: u32,
    /// Unix time of the network's start, which header times count from [default: now]. Give
    /// it to make block hashes reproducible too; the mempool and block arrivals depend only on
    /// the seed and timing.
    #[arg(long, value_name = "UNIX_SECONDS")]
    pub start_time: Option<u64>,
    /// Network difficulty, fractional down to 2^-32.
    #[arg(long, default_value_t = SimnetConfig::default().network_difficulty)]
    pub network_difficulty: Difficulty,
    /// Mean time between blocks found by the rest of the network; 0 disables.
    #[arg(long, default_value_t = Dur(SimnetConfig::default().block_interval))]
    pub block_interval: Dur,
    /// Least time between two fee-driven templates (a new tip always makes one).
    #[arg(long, default_value_t = Dur(SimnetConfig::default().template_interval))]
    pub template_interval: Dur,
    /// Fees (sats) a template must gain over the last one to replace it.
    #[arg(long, default_value_t = SimnetConfig::default().fee_delta)]
    pub fee_delta: u64,
    /// Mean transaction arrivals per second.
    #[arg(long, default_value_t = SimnetConfig::default().mempool.arrival_rate)]
    pub tx_rate: f64,
    /// Transactions already waiting when the network starts.
    #[arg(long, default_value_t = SimnetConfig::default().mempool.initial_txs)]
    pub initial_txs: usize,
    /// Present a node of this name (repeat for several on the same network) [default: one,
    /// "node"].
    #[arg(long, value_name = "NAME")]
    pub node: Vec<NodeEntry>,
    /// How far a node is from the rest of the network: its transactions and blocks arrive this
    /// much later, and its blocks reach the network this much later (repeatable) [default: 0].
    #[arg(long, value_name = "NAME=DURATION")]
    #[serde(deserialize_with = "config::one_or_many")]
    pub relay_delay: Vec<NodeDelay>,
    /// The network announces transactions to its nodes at multiples of this (Bitcoin Core
    /// trickles every 2s on average); 0 announces each at once.
    #[arg(long, default_value_t = Dur(SimnetConfig::default().tx_announce_interval))]
    pub tx_announce_interval: Dur,
    /// Write events (templates, tips, block verdicts) to this file.
    #[arg(long)]
    pub events: Option<PathBuf>,
    /// Stop after this long; 0 runs until interrupted.
    #[arg(long, default_value = "0")]
    pub duration: Dur,
    /// Serve bitcoind-compatible JSON-RPC on this address (port 0: any free port) (NAME=ADDR for node NAME,
    /// repeatable; a bare ADDR is the first node's).
    #[arg(long, value_name = "[NAME=]ADDR")]
    #[serde(deserialize_with = "config::one_or_many")]
    pub rpc_listen: Vec<NodeAddr>,
    /// RPC user (with --rpc-password); without them the RPC uses a cookie in --datadir.
    #[arg(long)]
    pub rpc_user: Option<String>,
    #[arg(long, env = "STRATUMLAB_RPC_PASSWORD", hide_env_values = true)]
    pub rpc_password: Option<String>,
    /// Directory for the RPC cookie file (`.cookie` and `regtest/.cookie`, as bitcoind writes).
    #[arg(long)]
    pub datadir: Option<PathBuf>,
    /// Publish ZMQ `hashblock`, `rawblock`, `hashtx`, `rawtx` and `sequence` on this address, as bitcoind's -zmqpub* do (NAME=ADDR for node NAME,
    /// repeatable; a bare ADDR is the first node's).
    #[arg(long, value_name = "[NAME=]ADDR")]
    #[serde(deserialize_with = "config::one_or_many")]
    pub zmq_listen: Vec<NodeAddr>,
    /// Serve the SV2 Template Distribution Protocol (a Template Provider) on this address (NAME=ADDR for node NAME,
    /// repeatable; a bare ADDR is the first node's).
    #[arg(long, value_name = "[NAME=]ADDR")]
    #[serde(deserialize_with = "config::one_or_many")]
    pub tdp_listen: Vec<NodeAddr>,
    /// The role's SV2 authority key pair (cmd/keys.rs).
    #[command(flatten)]
    #[serde(flatten)]
    pub authority: AuthorityArgs,
    /// How long the Template Provider's Noise certificates are valid.
    #[arg(long, default_value = "1h")]
    pub cert_validity: Dur,
}

config::role_settings!(SimnetArgs);

impl SimnetArgs {
    pub fn network_config(&self) -> SimnetConfig {
        let mut c = SimnetConfig {
            seed: self.seed,
            start_height: self.start_height,
            // Real pool software compares header times with its own clock: default to now.
            start_unix_time: self.start_time.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
            }),
            network_difficulty: self.network_difficulty,
            block_interval: self.block_interval.0,
            template_interval: self.template_interval.0,
            fee_delta: self.fee_delta,
            tx_announce_interval: self.tx_announce_interval.0,
            ..SimnetConfig::default()
        };
        c.mempool.arrival_rate = self.tx_rate;
        c.mempool.initial_txs = self.initial_txs;
        c
    }

    /// The Template Provider's authority keys: both halves given, or the key file's.
    fn tdp_keys(&self) -> Result<TdpKeys> {
        self.authority.keys("simnet")
    }

    /// The nodes to present, with their delays and endpoints, in order.
    pub fn nodes(&self) -> Result<Vec<NodePlan>> {
        let mut plans: Vec<NodePlan> = self
            .node
            .iter()
            .map(|e| match e {
                NodeEntry::Name(name) => NodePlan::named(name),
                NodeEntry::Table(t) => NodePlan {
                    name: t.name.clone(),
                    relay_delay: t.relay_delay.0,
                    rpc_listen: t.rpc_listen,
                    zmq_listen: t.zmq_listen,
                    tdp_listen: t.tdp_listen,
                },
            })
            .collect();
        if plans.is_empty() {
            plans.push(NodePlan::named(DEFAULT_NODE));
        }
        let specs: Vec<NodeSpec> = plans
            .iter()
            .map(|p| NodeSpec::new(&p.name, p.relay_delay))
            .collect();
        NodeSpec::validate_all(&specs).context("nodes")?;
        let find = |plans: &[NodePlan], name: Option<&str>, what: &str| -> Result<usize> {
            match name {
                None => Ok(0),
                Some(n) => plans.iter().position(|p| p.name == n).with_context(|| {
                    format!("{what} names node {n:?}, which is not one of --node")
                }),
            }
        };
        for d in &self.relay_delay {
            let i = find(&plans, Some(&d.node), "--relay-delay")?;
            plans[i].relay_delay = d.delay.0;
        }
        for (list, what) in [
            (&self.rpc_listen, "--rpc-listen"),
            (&self.zmq_listen, "--zmq-listen"),
            (&self.tdp_listen, "--tdp-listen"),
        ] {
            for a in list {
                let i = find(&plans, a.node.as_deref(), what)?;
                let slot = match what {
                    "--rpc-listen" => &mut plans[i].rpc_listen,
                    "--zmq-listen" => &mut plans[i].zmq_listen,
                    _ => &mut plans[i].tdp_listen,
                };
                *slot = Some(a.addr);
            }
        }
        Ok(plans)
    }

    /// The RPC's credentials: a user and password, a cookie in `datadir`, or both.
    fn rpc_auth(&self, datadir: Option<&Path>) -> Result<RpcAuth> {
        let pair = match (&self.rpc_user, &self.rpc_password) {
            (Some(u), Some(p)) => Some((u.clone(), p.clone())),
            (None, None) => None,
            _ => bail!("--rpc-user and --rpc-password go together"),
        };
        Ok(match (datadir, pair) {
            (Some(dir), pair) => {
                let auth = RpcAuth::cookie(dir)
                    .with_context(|| format!("writing the RPC cookie in {}", dir.display()))?;
                match pair {
                    Some((u, p)) => auth.and_user_password(u, p),
                    None => auth,
                }
            }
            (None, Some((u, p))) => RpcAuth::user_password(u, p),
            (None, None) => bail!(
                "--rpc-listen needs credentials: --rpc-user and --rpc-password, or --datadir for a cookie file"
            ),
        })
    }
}

/// `ADDR` or `NAME=ADDR`: an endpoint address for the first node or for node NAME.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddr {
    pub node: Option<String>,
    pub addr: SocketAddr,
}

impl FromStr for NodeAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (node, addr) = match s.split_once('=') {
            Some((n, a)) => (Some(n.trim().to_owned()), a),
            None => (None, s),
        };
        let addr = addr
            .trim()
            .parse()
            .map_err(|e| format!("address {addr:?}: {e} (write ADDR or NAME=ADDR)"))?;
        Ok(NodeAddr { node, addr })
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.node {
            Some(n) => write!(f, "{n}={}", self.addr),
            None => write!(f, "{}", self.addr),
        }
    }
}

/// `NAME=DURATION`: a node's relay delay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDelay {
    pub node: String,
    pub delay: Dur,
}

impl FromStr for NodeDelay {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (node, delay) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: write NAME=DURATION, e.g. farm=50ms"))?;
        Ok(NodeDelay {
            node: node.trim().to_owned(),
            delay: delay.parse()?,
        })
    }
}

impl fmt::Display for NodeDelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.node, self.delay)
    }
}

/// Both are written as their strings, in flags and files alike.
macro_rules! string_serde {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d)?
                    .parse()
                    .map_err(serde::de::Error::custom)
            }
        }
    };
}
string_serde!(NodeAddr);
string_serde!(NodeDelay);

/// A node in the settings: a name (`--node NAME`) or a `[[node]]` table of the file.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(untagged)]
pub enum NodeEntry {
    Name(String),
    Table(NodeTable),
}

impl FromStr for NodeEntry {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(NodeEntry::Name(s.to_owned()))
    }
}

/// `[[node]]`: `name`, `relay_delay`, and its endpoints' addresses.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct NodeTable {
    pub name: String,
    #[serde(default)]
    pub relay_delay: Dur,
    pub rpc_listen: Option<SocketAddr>,
    pub zmq_listen: Option<SocketAddr>,
    pub tdp_listen: Option<SocketAddr>,
}

/// One node as it will run.
#[derive(Clone, Debug, PartialEq)]
pub struct NodePlan {
    pub name: String,
    pub relay_delay: Duration,
    pub rpc_listen: Option<SocketAddr>,
    pub zmq_listen: Option<SocketAddr>,
    pub tdp_listen: Option<SocketAddr>,
}

impl NodePlan {
    fn named(name: &str) -> NodePlan {
        NodePlan {
            name: name.to_owned(),
            relay_delay: Duration::ZERO,
            rpc_listen: None,
            zmq_listen: None,
            tdp_listen: None,
        }
    }
}

pub fn run(settings: SimnetArgs) -> Result<()> {
    let plans = settings.nodes()?;
    let specs = plans
        .iter()
        .map(|p| NodeSpec::new(&p.name, p.relay_delay))
        .collect();
    let net = Network::with_nodes(settings.network_config(), specs)
        .context("invalid network settings")?;
    let sink = match &settings.events {
        Some(p) => EventSink::create(p, "simnet", "")?,
        None => EventSink::disabled(),
    };
    let rt = super::runtime(Some(2))?;
    let summary = rt.block_on(serve(net, &settings, &plans, sink.clone()))?;
    let stats = sink.finish().context("writing events")?;
    println!("{summary}");
    if settings.events.is_some() {
        println!("  events         {} written", stats.events_written);
    }
    Ok(())
}

struct Summary {
    ran_for: Duration,
    start_height: u32,
    nodes: Vec<NodeSummary>,
}

struct NodeSummary {
    name: String,
    height: u32,
    stats: NodeStats,
    mempool_txs: usize,
    mempool_vsize: u64,
    peer: PeerBytes,
}

impl NodeSummary {
    /// The counters, one a line, each line starting with `indent`.
    fn write(&self, f: &mut fmt::Formatter<'_>, start_height: u32, indent: &str) -> fmt::Result {
        let s = &self.stats;
        writeln!(
            f,
            "{indent}height         {} -> {}",
            start_height, self.height
        )?;
        writeln!(
            f,
            "{indent}blocks         {} from the network, {} submitted and accepted, {} rejected",
            s.network_blocks, s.submitted_blocks, s.rejected_blocks
        )?;
        writeln!(f, "{indent}templates      {}", s.templates)?;
        write!(
            f,
            "{indent}mempool        {} transactions, {} vB",
            self.mempool_txs, self.mempool_vsize
        )
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ran = Duration::from_millis(self.ran_for.as_millis() as u64);
        write!(f, "simnet ran for {}", humantime::format_duration(ran))?;
        if let [only] = &self.nodes[..] {
            writeln!(f)?;
            return only.write(f, self.start_height, "  ");
        }
        for n in &self.nodes {
            writeln!(f)?;
            writeln!(f, "  node {}", n.name)?;
            n.write(f, self.start_height, "    ")?;
            writeln!(f)?;
            write!(
                f,
                "    peer traffic   {} B sent, {} B received",
                n.peer.up, n.peer.down
            )?;
        }
        Ok(())
    }
}

async fn serve(
    net: Network,
    s: &SimnetArgs,
    plans: &[NodePlan],
    sink: EventSink,
) -> Result<Summary> {
    let started = Instant::now();
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
    let start_height = net.height();
    let several = plans.len() > 1;
    let nodes = Node::all(net, sink.clone());
    // One stop signal for the clock and every endpoint.
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let mut endpoints = tokio::task::JoinSet::new();
    for (node, plan) in nodes.iter().zip(plans) {
        // Among several nodes every line says whose it is, and cookies do not collide.
        let prefix = if several {
            format!("node {}: ", plan.name)
        } else {
            String::new()
        };
        let datadir = s.datadir.as_ref().map(|d| {
            if several {
                d.join(&plan.name)
            } else {
                d.clone()
            }
        });
        if let Some(addr) = plan.rpc_listen {
            let auth = s.rpc_auth(datadir.as_deref())?;
            let listener = bind(addr, &prefix, "rpc").await?;
            for f in auth.cookie_files() {
                println!("{prefix}rpc cookie {}", f.display());
            }
            let (node, stop) = (node.clone(), stopped());
            endpoints.spawn(async move {
                simnet::rpc::serve(node, listener, auth, stop)
                    .await
                    .context("rpc endpoint")
            });
        }
        if let Some(addr) = plan.zmq_listen {
            let listener = bind(addr, &prefix, "zmq").await?;
            let (node, stop) = (node.clone(), stopped());
            endpoints.spawn(async move {
                simnet::zmq::serve(node, listener, stop).await;
                Ok(())
            });
        }
        if let Some(addr) = plan.tdp_listen {
            let mut config = TdpConfig::new(s.tdp_keys()?);
            config.cert_validity = s.cert_validity.0;
            config.events = sink.clone();
            let listener = bind(addr, &prefix, "tdp").await?;
            println!(
                "{prefix}tdp authority public key {}",
                config.keys.public_key()
            );
            let (node, stop) = (node.clone(), stopped());
            endpoints.spawn(async move {
                simnet::tdp::serve(node, listener, config, stop)
                    .await
                    .context("tdp endpoint")
            });
        }
    }

    let duration = s.duration;
    let stop = async move {
        tokio::select! {
            _ = super::signal() => {}
            _ = async {
                if duration.is_zero() {
                    std::future::pending::<()>().await
                } else {
                    tokio::time::sleep(duration.0).await
                }
            } => {}
        }
    };
    // One clock for the whole network; it runs until the stop signal, or until an endpoint
    // fails.
    let failed = tokio::select! {
        _ = nodes[0].run_clock(stop) => None,
        Some(Ok(Err(e))) = endpoints.join_next() => Some(e),
    };
    let _ = stop_tx.send(true);
    while let Some(r) = endpoints.join_next().await {
        r.context("endpoint task")??;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let nodes = nodes
        .iter()
        .map(|node| {
            let (height, mempool_txs, mempool_vsize, peer) = node.read(|n| {
                (
                    n.height(),
                    n.mempool().len(),
                    n.mempool().total_vsize(),
                    n.peer_bytes(),
                )
            });
            NodeSummary {
                name: node.name().to_owned(),
                height,
                stats: node.stats(),
                mempool_txs,
                mempool_vsize,
                peer,
            }
        })
        .collect();
    Ok(Summary {
        ran_for: started.elapsed(),
        start_height,
        nodes,
    })
}

/// Binds and prints the address actually bound (the line tests and scripts parse), after
/// `prefix` (empty for a single node, `node NAME: ` among several).
async fn bind(addr: SocketAddr, prefix: &str, what: &str) -> Result<TcpListener> {
    let listener = edge::listen(addr)
        .with_context(|| format!("binding the {prefix}{what} endpoint to {addr}"))?;
    println!("{prefix}{what} listening on {}", listener.local_addr()?);
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_file_and_defaults_fill_the_rest() {
        let s: SimnetArgs = config::parse_file(
            "seed = 7\nblock_interval = \"10s\"\nnetwork_difficulty = 0.5\n",
            &["--seed", "9"],
        )
        .unwrap();
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
        let e = config::parse_file::<SimnetArgs>("network_difficulty = 0.0\n", &[]).unwrap_err();
        assert!(format!("{e:#}").contains("difficulty"), "{e:#}");
    }

    #[test]
    fn a_short_run_writes_templates_and_tips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("simnet.ev");
        let args = SimnetArgs {
            seed: 3,
            block_interval: Dur::from_millis(100),
            template_interval: Dur::from_millis(50),
            duration: Dur::from_millis(700),
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
