//! What can go wrong talking to the node, each error naming the method and the URL (never the
//! credentials).

use std::path::PathBuf;
use std::time::Duration;

use super::gbt::GbtError;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("invalid node RPC URL {url:?}: {reason}")]
    Url { url: String, reason: String },

    /// The `--zmq` endpoint does not parse.
    #[error("{0}")]
    ZmqEndpoint(String),

    #[error("{method} at {url}: cannot connect: {reason}")]
    Connect {
        method: &'static str,
        url: String,
        /// The error and its causes, `: `-separated.
        reason: String,
    },

    #[error("{method} at {url}: no answer within {timeout:?}")]
    Timeout {
        method: &'static str,
        url: String,
        timeout: Duration,
    },

    /// The connection broke, or the HTTP exchange failed, before an answer arrived.
    #[error("{method} at {url}: {reason}")]
    Transport {
        method: &'static str,
        url: String,
        /// The error and its causes, `: `-separated.
        reason: String,
    },

    #[error("{method} at {url}: the node refused the credentials (HTTP {status}); {hint}")]
    Auth {
        method: &'static str,
        url: String,
        status: u16,
        /// Which credentials, and what to check.
        hint: String,
    },

    #[error("{method} at {url}: cannot read the RPC cookie {}: {source}", path.display())]
    Cookie {
        method: &'static str,
        url: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// An HTTP status without a JSON-RPC reply (a proxy's error page, Core's 503 when its work
    /// queue is full).
    #[error("{method} at {url}: HTTP {status}: {body}")]
    Http {
        method: &'static str,
        url: String,
        status: u16,
        /// The start of the body, for the log.
        body: String,
    },

    #[error("{method} at {url}: malformed JSON-RPC reply: {reason}")]
    BadReply {
        method: &'static str,
        url: String,
        reason: String,
    },

    /// The node answered with a JSON-RPC error object.
    #[error("{method} at {url}: RPC error {code}: {message}")]
    Rpc {
        method: &'static str,
        url: String,
        code: i64,
        message: String,
    },

    /// `getblocktemplate` answered, but not with a usable template.
    #[error("getblocktemplate at {url}: {source}")]
    Template {
        url: String,
        #[source]
        source: GbtError,
    },
}

/// Core's `RPC_IN_WARMUP`: the node is starting and will answer properly soon.
pub const RPC_IN_WARMUP: i64 = -28;
/// Core's `RPC_CLIENT_NOT_CONNECTED` ("Bitcoin Core is not connected!"; simnet also sends it to
/// long polls when it shuts down).
pub const RPC_CLIENT_NOT_CONNECTED: i64 = -9;
/// Core's `RPC_CLIENT_IN_INITIAL_DOWNLOAD`.
pub const RPC_CLIENT_IN_INITIAL_DOWNLOAD: i64 = -10;

/// Whether an RPC error with this code is the node's answer rather than "not ready yet".
pub(crate) fn rpc_code_is_verdict(code: i64) -> bool {
    !matches!(
        code,
        RPC_IN_WARMUP | RPC_CLIENT_NOT_CONNECTED | RPC_CLIENT_IN_INITIAL_DOWNLOAD
    )
}

impl NodeError {
    /// No HTTP answer came back at all: the node (or the network to it) is down or stuck.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            NodeError::Connect { .. } | NodeError::Timeout { .. } | NodeError::Transport { .. }
        )
    }

    /// Whether the node said something definite about the request: an RPC error other than
    /// "not ready yet". Everything else (no answer, a proxy's error page, a reply we cannot
    /// read, credentials refused or unreadable) may go away by itself, so asking again makes
    /// sense.
    pub fn is_node_verdict(&self) -> bool {
        match self {
            NodeError::Rpc { code, .. } => rpc_code_is_verdict(*code),
            _ => false,
        }
    }

    /// The RPC method the error is about.
    pub fn method(&self) -> &'static str {
        match self {
            NodeError::Url { .. } | NodeError::ZmqEndpoint(_) => "",
            NodeError::Template { .. } => "getblocktemplate",
            NodeError::Connect { method, .. }
            | NodeError::Timeout { method, .. }
            | NodeError::Transport { method, .. }
            | NodeError::Auth { method, .. }
            | NodeError::Cookie { method, .. }
            | NodeError::Http { method, .. }
            | NodeError::BadReply { method, .. }
            | NodeError::Rpc { method, .. } => method,
        }
    }
}
