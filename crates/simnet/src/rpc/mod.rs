//! A bitcoind-compatible JSON-RPC endpoint over a running [`Node`], for pool software and RPC
//! libraries written against Bitcoin Core 28.
//!
//! ```no_run
//! # async fn run(node: simnet::Node, datadir: &std::path::Path) -> std::io::Result<()> {
//! use simnet::rpc::{serve, RpcAuth};
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:18443").await?;
//! let auth = RpcAuth::cookie(datadir)?; // <datadir>/regtest/.cookie and <datadir>/.cookie
//! serve(node, listener, auth, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```
//!
//! # Parts
//!
//! - [`jsonrpc`]: request forms (legacy and 2.0, batches, notifications), Core's error codes and
//!   the HTTP status each reply travels with. Pure functions, no I/O.
//! - `http`: the hyper server: POST only, Basic authentication, body limit, timeouts.
//! - `args`: the method table and the argument handling Core does before a method runs (named
//!   arguments, count, types, numbers and hashes with Core's messages). Pure.
//! - `methods`: dispatch, and the methods over a [`Node`].
//! - `json_types`, `script`: answers' JSON shapes and script descriptions as Core writes them.
//! - [`RpcAuth`]: user/password and Core's cookie file.
//!
//! # Methods
//!
//! Blockchain: `getbestblockhash`, `getblock`, `getblockchaininfo`, `getblockcount`,
//! `getblockhash`, `getblockheader`, `getdifficulty`, `getmempoolentry`, `getmempoolinfo`,
//! `getrawmempool`, `preciousblock`. Control: `getrpcinfo`, `help`, `uptime`. Generating:
//! `generatetoaddress`. Mining: `getblocktemplate` (with long polling), `getmininginfo`,
//! `getnetworkhashps`, `submitblock`. Network: `getconnectioncount`, `getnetworkinfo`,
//! `getpeerinfo`, `ping`. Raw transactions: `decoderawtransaction`, `getrawtransaction`,
//! `sendrawtransaction`. Util: `estimatesmartfee`, `validateaddress`. Zmq:
//! `getzmqnotifications` (what the ZMQ publishers of the same node serve, see
//! [`crate::zmq`]). docs/node-interface.md says which pool software needs which.
//!
//! Blocks below the start height are the synthetic history of [`crate::chain::History`]: they
//! answer `getblockhash`, `getblockheader` and `getblock` like any other.
//!
//! # Long polling
//!
//! `getblocktemplate`'s `longpollid` is the previous block hash followed by the template id in
//! decimal. A call naming the current template returns as soon as the network has a newer one
//! (a new tip, or a fee-driven update), or after [`RpcOptions::longpoll_timeout`] (60 s by
//! default: Core has no limit, but with a busy mempool it answers after a minute); a call naming
//! any other template returns at once.

mod args;
pub mod cookie;
/// Request parsing and argument conversion under arbitrary bodies, for the fuzz target
/// `rpc_request` and its corpus replay test.
#[doc(hidden)]
pub mod fuzz;
mod http;
mod json_types;
pub mod jsonrpc;
mod methods;
mod script;

use std::future::Future;
use std::time::Duration;

use tokio::net::TcpListener;

pub use cookie::RpcAuth;
pub use methods::method_names;

use crate::node::Node;

/// Limits and timeouts; the defaults are Core's where Core has one.
#[derive(Clone, Debug)]
pub struct RpcOptions {
    /// Largest request body (Core: 32 MiB, `MAX_SIZE`); larger ones get HTTP 413.
    pub max_body_size: usize,
    /// How long a client may take to send a request's headers (an idle kept-alive connection
    /// included), and then its body, before its connection is closed (Core's
    /// `-rpcservertimeout`, 30 s).
    pub request_timeout: Duration,
    /// How long a `getblocktemplate` long poll waits at most.
    pub longpoll_timeout: Duration,
}

impl Default for RpcOptions {
    fn default() -> Self {
        RpcOptions {
            max_body_size: 32 << 20,
            request_timeout: Duration::from_secs(30),
            longpoll_timeout: Duration::from_secs(60),
        }
    }
}

/// Serves JSON-RPC on `listener` until `shutdown` resolves, with the default [`RpcOptions`].
/// Binding (loopback) is the caller's job. The cookie files of `auth`, if any, are deleted when
/// this returns.
pub async fn serve(
    node: Node,
    listener: TcpListener,
    auth: RpcAuth,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_with(node, listener, auth, RpcOptions::default(), shutdown).await
}

/// [`serve`] with other limits and timeouts.
pub async fn serve_with(
    node: Node,
    listener: TcpListener,
    auth: RpcAuth,
    options: RpcOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let result = http::serve(node, listener, &auth, options, shutdown).await;
    drop(auth); // deletes the cookie, as Core does when it stops
    result
}
