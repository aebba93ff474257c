//! What can go wrong talking to the node, each error naming the method and the URL (never the
//! credentials).

use std::path::PathBuf;
use std::time::Duration;

use super::gbt::GbtError;

/// A failed call to the node (JSON-RPC over HTTP, or its ZMQ endpoint).
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node RPC URL does not parse, or is not `http://`.
    #[error("invalid node RPC URL {url:?}: {reason}")]
    Url {
        /// The URL as given, credentials removed.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The `--zmq` endpoint does not parse.
    #[error("{0}")]
    ZmqEndpoint(String),

    /// The TCP connection to the node failed.
    #[error("{method} at {url}: cannot connect: {reason}")]
    Connect {
        /// The JSON-RPC method called.
        method: &'static str,
        /// The node's RPC URL, without credentials.
        url: String,
        /// The error and its causes, `: `-separated.
        reason: String,
    },

    /// The node did not answer within the call's timeout.
    #[error("{method} at {url}: no answer within {timeout:?}")]
    Timeout {
        /// The JSON-RPC method called.
        method: &'static str,
        /// The node's RPC URL, without credentials.
        url: String,
        /// How long the call waited.
        timeout: Duration,
    },

    /// The connection broke, or the HTTP exchange failed, before an answer arrived.
    #[error("{method} at {url}: {reason}")]
    Transport {
        /// The JSON-RPC method called.
        method: &'static str,
        /// The node's RPC URL, without credentials.
        url: String,
        /// The error and its causes, `: `-separated.
        reason: String,
    },

    /// The node answered 401 or 403: wrong or missing credentials.
    #[error("{method} at {url}: the node refused the credentials (HTTP {status}); {hint}")]
    Auth {
        /// The JSON-RPC method called.
        method: &'static str,
        /// The node's RPC URL, without credentials.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// Which credentials, and what to check.
        hint: String,
    },

    /// The RPC cookie file could not be read.
    #[error("{method} at {url}: cannot read the RPC cookie {}: {source}", path.display())]
    Cookie {
        /// The JSON-RPC method called.
        method: &'static str,
        /// The node's RPC URL, without credentials.
        url: String,
        /// The cookie file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },

    /// An HTTP status without a JSON-RPC reply (a proxy's error page, Core's 503 when its work
    /// queue is full).
    #[error("{method} at {url}: HTTP {status}: {body}")]
    Http {
        /// The JSON-RPC method called.
        method: &'static str,
        /// The node's RPC URL, without credentials.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the body, for the log.
        body: String,
    },

    /// The reply is not valid JSON-RPC.
    #[error("{method} at {url}: malformed JSON-RPC reply: {reason}")]
    BadReply {
        /// The JSON-RPC method called.
        method: &'static str,
        /// The node's RPC URL, without credentials.
        url: String,
        /// What is wrong with the reply.
        reason: String,
    },

    /// The node answered with a JSON-RPC error object.
    #[error("{method} at {url}: RPC error {code}: {message}")]
    Rpc {
        /// The JSON-RPC method called.
        method: &'static str,
        /// The node's RPC URL, without credentials.
        url: String,
        /// The JSON-RPC error code (Core's `RPC_*`).
        code: i64,
        /// The error message, as the node sent it.
        message: String,
    },

    /// `getblocktemplate` answered, but not with a usable template.
    #[error("getblocktemplate at {url}: {source}")]
    Template {
        /// The node's RPC URL, without credentials.
        url: String,
        /// What is wrong with the template.
        #[source]
        source: GbtError,
    },
}

/// Core's `RPC_IN_WARMUP`: the node is starting and will answer properly soon.
pub(crate) const RPC_IN_WARMUP: i64 = -28;
/// Core's `RPC_CLIENT_NOT_CONNECTED` ("Bitcoin Core is not connected!"; simnet also sends it to
/// long polls when it shuts down).
pub(crate) const RPC_CLIENT_NOT_CONNECTED: i64 = -9;
/// Core's `RPC_CLIENT_IN_INITIAL_DOWNLOAD`.
pub(crate) const RPC_CLIENT_IN_INITIAL_DOWNLOAD: i64 = -10;

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
