//! The pool's view of its Bitcoin node: work from `getblocktemplate`, new tips as soon as the
//! node has them, and found blocks handed back through `submitblock`.
//!
//! Works against any bitcoind-compatible JSON-RPC endpoint: Bitcoin Core, or simnet.
//!
//! # Parts
//!
//! - [`NodeClient`] (`rpc`): JSON-RPC over HTTP/1.1 (hyper's client, kept-alive connections),
//!   Basic authentication from a user and password or Core's cookie file (reread when the node
//!   answers 401, since the cookie changes whenever the node restarts).
//! - `gbt`: a `getblocktemplate` answer turned into the engine's [`Template`](crate::template::Template),
//!   every field checked ([`GbtError`] names the one that is wrong).
//! - `submit`: [`SubmitAnswer`] and [`submit_until_answered`], which resubmits a found block
//!   through transport failures until the node gives a verdict.
//! - `zmq`: a SUB socket on the node's `-zmqpubhashblock` endpoint.
//! - [`TemplateFeed`] (`feed`): the task that keeps the latest template in a watch channel.
//! - [`NodeHealth`] (`health`): what the feed knows about the node, readable in O(1) for the
//!   pool's decision to hand out work and for `/healthz`.
//!
//! # How the feed follows the node
//!
//! - One `getblocktemplate` at start, retried with capped backoff until it succeeds.
//! - With a ZMQ endpoint: every `hashblock` message triggers a `getblocktemplate` at once.
//!   While the ZMQ connection is down (the publisher is not there yet, or went away), the feed
//!   long-polls instead, so a wrong ZMQ port costs a warning, not speed.
//! - Without one: a long-poll loop on `longpollid`; the node answers when its tip or its
//!   template changes.
//! - In both modes, a `getblocktemplate` every `template_interval`: pools resend work
//!   periodically so that miners do not take them for dead, and the engine decides what is new.
//!
//! Every successful answer is published at once; an answer that is known to be older than the
//! one already published (a request that started before the published one arrived and that
//! builds on a lower block) is dropped, so the published tip never goes backwards.
//!
//! The last template stays in the channel when the node goes away: before handing out work,
//! the pool asks [`NodeHealth::state`], which turns `Unreachable`, `Failing` or `Stale` then
//! (and says why, for `/healthz`).

mod backoff;
mod error;
mod feed;
mod gbt;
mod health;
mod rpc;
mod submit;
mod zmq;

use std::path::PathBuf;
use std::time::Duration;

pub use backoff::Backoff;
pub use error::NodeError;
pub use feed::{TemplateFeed, TemplateRx};
pub use gbt::{parse_block_template, GbtError};
pub use health::{NodeHealth, NodeState};
pub use rpc::NodeClient;
pub use submit::{submit_until_answered, SubmitAnswer, SubmitOutcome};

/// How the client proves who it is to the node's RPC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeAuth {
    /// `--rpc-user` / `--rpc-password` (bitcoind's `-rpcuser`/`-rpcpassword` or `-rpcauth`).
    UserPass {
        /// The RPC user name.
        user: String,
        /// Its password.
        password: String,
    },
    /// `--rpc-cookie PATH`: the node's `.cookie` file (`__cookie__:<hex>`), read at the first
    /// call and reread whenever the node answers 401.
    Cookie(PathBuf),
    /// No `Authorization` header (a proxy in front of the node adds one, or credentials were
    /// given in the URL as `http://user:password@host:port`).
    None,
}

/// The request dialect. Bitcoin Core 28 and later answer both; older versions read every request
/// as legacy, which the reply parser also understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum JsonRpcVersion {
    /// `"jsonrpc": "1.0"`: errors travel with HTTP 500 (404 for an unknown method).
    V1,
    /// `"jsonrpc": "2.0"`: errors travel with HTTP 200.
    #[default]
    V2,
}

/// Where the node is and how the feed follows it.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// `--node-rpc`: `http://host:port` (a missing scheme means `http://`; `https` is not
    /// supported). Credentials in the URL are used when `auth` is [`NodeAuth::None`] and never
    /// shown in errors or logs.
    pub rpc_url: String,
    /// `--rpc-user`/`--rpc-password` or `--rpc-cookie`: how the client authenticates.
    pub auth: NodeAuth,
    /// `--zmq`: the node's `-zmqpubhashblock` endpoint, `tcp://127.0.0.1:28332` or
    /// `127.0.0.1:28332`. `None`: follow the node by long polling.
    pub zmq: Option<String>,
    /// `--template-interval`: a `getblocktemplate` this often whatever else happens. Zero turns
    /// the periodic refresh off.
    pub template_interval: Duration,
    /// Templates older than this (no successful `getblocktemplate` for this long) are stale: the
    /// pool should stop handing out work. Zero turns staleness off.
    pub stale_after: Duration,
    /// Longest wait for one RPC answer (and for a TCP connection); `submitblock` included.
    pub timeout: Duration,
    /// Longest wait for a long poll. Core waits as long as it takes (a minute or so on a busy
    /// mempool); a poll that runs out is simply issued again.
    pub longpoll_timeout: Duration,
    /// The `rules` sent with `getblocktemplate`. Core requires `segwit`.
    pub rules: Vec<String>,
    /// The JSON-RPC dialect requests are sent in.
    pub jsonrpc: JsonRpcVersion,
    /// Retries of a failed `getblocktemplate`, of a lost long poll and of the ZMQ connection.
    pub retry: Backoff,
    /// How long one ZMQ connection attempt (TCP and ZMTP handshake) may take.
    pub zmq_connect_timeout: Duration,
    /// Largest reply body accepted (a full template is about 8 MB of hex plus JSON).
    pub max_reply_bytes: usize,
}

impl NodeConfig {
    /// The defaults for a node at `rpc_url`: periodic refresh every 30 s (ckpool's default
    /// update interval), stale after [`NodeConfig::default_stale_after`], 10 s timeout,
    /// long polls of up to 5 minutes, rules `["segwit"]`, JSON-RPC 2.0.
    pub fn new(rpc_url: impl Into<String>, auth: NodeAuth) -> NodeConfig {
        let template_interval = Duration::from_secs(30);
        NodeConfig {
            rpc_url: rpc_url.into(),
            auth,
            zmq: None,
            template_interval,
            stale_after: Self::default_stale_after(template_interval),
            timeout: Duration::from_secs(10),
            longpoll_timeout: Duration::from_secs(300),
            rules: vec!["segwit".to_owned()],
            jsonrpc: JsonRpcVersion::V2,
            retry: Backoff::default(),
            zmq_connect_timeout: Duration::from_secs(1),
            max_reply_bytes: 64 << 20,
        }
    }

    /// Three periodic refreshes missed in a row, and never less than 10 s (a slow
    /// `getblocktemplate` on a big mempool is not a dead node); zero (off) without a periodic
    /// refresh, since then nothing would come to tell a quiet node from a dead one.
    pub fn default_stale_after(template_interval: Duration) -> Duration {
        if template_interval.is_zero() {
            Duration::ZERO
        } else {
            (template_interval * 3).max(Duration::from_secs(10))
        }
    }

    /// Sets `template_interval` and the `stale_after` that goes with it.
    pub fn with_template_interval(mut self, interval: Duration) -> NodeConfig {
        self.template_interval = interval;
        self.stale_after = Self::default_stale_after(interval);
        self
    }

    /// Follows the node's blocks over ZMQ at `endpoint` (its `-zmqpubhashblock`).
    pub fn with_zmq(mut self, endpoint: impl Into<String>) -> NodeConfig {
        self.zmq = Some(endpoint.into());
        self
    }
}
