//! The bitcoind-compatible node a role asks over JSON-RPC (the pool for templates and blocks,
//! the JDS for its mempool and blocks): the same flags on each, flattened into its own.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use pool::node::NodeAuth;
use serde::{Deserialize, Serialize};

/// Where the node is and how to log in.
#[derive(Args, Serialize, Deserialize, Default, Clone, Debug)]
pub struct NodeArgs {
    /// The node's JSON-RPC URL, e.g. http://127.0.0.1:18443 (the pool with --tp: a second way
    /// out for blocks and a second source of work beside the provider).
    #[arg(long, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_rpc: Option<String>,
    /// The node's RPC user, with --rpc-password.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_user: Option<String>,
    /// The node's RPC password; from the environment (STRATUMLAB_RPC_PASSWORD) or a --config
    /// file, it does not show on a command line that `ps` lists.
    #[arg(long, env = "STRATUMLAB_RPC_PASSWORD", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_password: Option<String>,
    /// The node's auth cookie file (instead of --rpc-user/--rpc-password).
    #[arg(long, value_name = "PATH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_cookie: Option<PathBuf>,
}

impl NodeArgs {
    /// The credentials given: a user and password, a cookie file, or none.
    pub fn auth(&self) -> Result<NodeAuth> {
        Ok(
            match (&self.rpc_user, &self.rpc_password, &self.rpc_cookie) {
                (Some(u), Some(p), None) => NodeAuth::UserPass {
                    user: u.clone(),
                    password: p.clone(),
                },
                (None, None, Some(c)) => NodeAuth::Cookie(c.clone()),
                (None, None, None) => NodeAuth::None,
                _ => bail!("give --rpc-user with --rpc-password, or --rpc-cookie"),
            },
        )
    }
}
