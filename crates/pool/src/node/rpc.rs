//! JSON-RPC to the node over HTTP/1.1: hyper's client with a pool of kept-alive connections (a
//! long poll holds one while other calls use others), Basic authentication, a timeout on every
//! call, bounded reply bodies.
//!
//! Replies are read in both dialects whatever was sent: legacy (`result`, `error` and `id`
//! always present; errors with HTTP 500 or 404) and 2.0 (errors with HTTP 200). Decoding a big
//! reply (a full template is about 8 MB) runs on tokio's blocking pool, so the pool's
//! connections are not held up while it is parsed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Bytes;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use primitives::Hash256;
use serde_json::{json, Value};

use super::error::{rpc_code_is_verdict, NodeError};
use super::gbt::parse_block_template;
use super::submit::SubmitAnswer;
use super::{JsonRpcVersion, NodeAuth, NodeConfig};
use crate::template::Template;

/// Replies bigger than this are decoded off the async workers.
const BIG_REPLY: usize = 256 << 10;
/// How much of a non-JSON error body goes into an error message.
const BODY_SNIPPET: usize = 200;
/// Idle kept-alive connections are closed after this long: below Core's `-rpcservertimeout`
/// (30 s), so the client closes them before the node does and never sends on a closing one.
const POOL_IDLE: Duration = Duration::from_secs(15);

/// A handle to the node's JSON-RPC endpoint. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct NodeClient {
    inner: Arc<Inner>,
}

struct Inner {
    config: NodeConfig,
    http: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    /// The URL as shown in errors and logs: no credentials.
    url: String,
    auth: Auth,
    next_id: AtomicU64,
}

enum Auth {
    /// A fixed `Authorization` header, or none.
    Fixed(Option<HeaderValue>),
    /// Read from the cookie file when first needed, and again after a 401.
    Cookie {
        path: PathBuf,
        current: Mutex<Option<HeaderValue>>,
    },
}

impl std::fmt::Debug for NodeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClient")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

impl NodeClient {
    /// A client for `config.rpc_url`. Nothing is sent yet; a cookie file is read at the first
    /// call (the node may not have written it yet).
    pub fn new(config: NodeConfig) -> Result<NodeClient, NodeError> {
        let (uri, url, url_credentials) = parse_url(&config.rpc_url)?;
        if let Some(endpoint) = &config.zmq {
            super::zmq::endpoint(endpoint).map_err(NodeError::ZmqEndpoint)?;
        }
        let auth = match (&config.auth, url_credentials) {
            (NodeAuth::UserPass { user, password }, _) => {
                Auth::Fixed(Some(basic_header(&format!("{user}:{password}"))))
            }
            (NodeAuth::Cookie(path), _) => Auth::Cookie {
                path: path.clone(),
                current: Mutex::new(None),
            },
            (NodeAuth::None, Some(userinfo)) => Auth::Fixed(Some(basic_header(&userinfo))),
            (NodeAuth::None, None) => Auth::Fixed(None),
        };
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.timeout));
        // Long polls sit idle for minutes: let TCP notice a peer that vanished.
        connector.set_keepalive(Some(Duration::from_secs(30)));
        let http = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_max_idle_per_host(8)
            .build(connector);
        Ok(NodeClient {
            inner: Arc::new(Inner {
                config,
                http,
                uri,
                url,
                auth,
                next_id: AtomicU64::new(1),
            }),
        })
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &NodeConfig {
        &self.inner.config
    }

    /// The node's URL without credentials.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// `getblocktemplate` with the configured rules. With `longpoll_id` (a template's
    /// `longpollid`), the node answers once it has a template newer than that one, and the call
    /// may take up to `longpoll_timeout`.
    pub async fn get_block_template(
        &self,
        longpoll_id: Option<&str>,
    ) -> Result<Template, NodeError> {
        let mut request = json!({ "rules": self.inner.config.rules });
        if let Some(id) = longpoll_id {
            request["longpollid"] = Value::from(id);
        }
        let timeout = match longpoll_id {
            Some(_) => self.inner.config.longpoll_timeout,
            None => self.inner.config.timeout,
        };
        let params = json!([request]).to_string();
        let url = self.inner.url.clone();
        self.call_with("getblocktemplate", params, timeout, move |result| {
            parse_block_template(&result).map_err(|source| NodeError::Template { url, source })
        })
        .await
    }

    /// `submitblock` with the serialized block. The node's verdict is an answer
    /// ([`SubmitAnswer`]), whether it took the block or not; an error means it gave none (or
    /// was not ready to: Core's warm-up).
    pub async fn submit_block(&self, block: &[u8]) -> Result<SubmitAnswer, NodeError> {
        let mut params = Vec::with_capacity(block.len() * 2 + 4);
        params.extend_from_slice(b"[\"");
        primitives::hex::encode_into(block, &mut params);
        params.extend_from_slice(b"\"]");
        let params = String::from_utf8(params).expect("hex is ASCII");
        let url = self.inner.url.clone();
        let answer = self
            .call_with(
                "submitblock",
                params,
                self.inner.config.timeout,
                move |r| match r {
                    Value::Null => Ok(SubmitAnswer::Accepted),
                    Value::String(reason) => Ok(SubmitAnswer::Rejected(reason)),
                    other => Err(NodeError::BadReply {
                        method: "submitblock",
                        url,
                        reason: format!("expected null or a string, got {other}"),
                    }),
                },
            )
            .await;
        match answer {
            // Core's "Block decode failed" and "Block does not start with a coinbase" are RPC
            // errors, but they are its verdict on the block all the same.
            Err(NodeError::Rpc { code, message, .. }) if rpc_code_is_verdict(code) => {
                tracing::debug!(code, %message, "submitblock: rejected with an RPC error");
                Ok(SubmitAnswer::Rejected(message))
            }
            other => other,
        }
    }

    /// `getbestblockhash`.
    pub async fn best_block_hash(&self) -> Result<Hash256, NodeError> {
        let url = self.inner.url.clone();
        self.call_with(
            "getbestblockhash",
            "[]".to_owned(),
            self.inner.config.timeout,
            move |r| {
                r.as_str()
                    .and_then(|s| Hash256::from_display_hex(s).ok())
                    .ok_or_else(|| NodeError::BadReply {
                        method: "getbestblockhash",
                        url,
                        reason: format!("expected a block hash, got {r}"),
                    })
            },
        )
        .await
    }

    /// Whether block `hash` is on the node's best chain: `getblockheader`'s `confirmations` is
    /// at least 1 there and -1 on a stale branch.
    pub async fn block_on_best_chain(&self, hash: Hash256) -> Result<bool, NodeError> {
        let url = self.inner.url.clone();
        self.call_with(
            "getblockheader",
            format!("[\"{hash}\"]"),
            self.inner.config.timeout,
            move |r| {
                r.get("confirmations")
                    .and_then(Value::as_i64)
                    .map(|c| c >= 1)
                    .ok_or_else(|| NodeError::BadReply {
                        method: "getblockheader",
                        url,
                        reason: format!("expected a header with confirmations, got {r}"),
                    })
            },
        )
        .await
    }

    /// Any method, with `params` (an array or an object); the `result`.
    pub async fn call(&self, method: &'static str, params: Value) -> Result<Value, NodeError> {
        self.call_with(method, params.to_string(), self.inner.config.timeout, Ok)
            .await
    }

    /// One call: the HTTP exchange within `timeout`, then the reply decoded and handed to
    /// `convert` (both off the async workers when the reply is big).
    async fn call_with<T, F>(
        &self,
        method: &'static str,
        params: String,
        timeout: Duration,
        convert: F,
    ) -> Result<T, NodeError>
    where
        T: Send + 'static,
        F: FnOnce(Value) -> Result<T, NodeError> + Send + 'static,
    {
        let inner = &self.inner;
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let version = match inner.config.jsonrpc {
            JsonRpcVersion::V1 => "1.0",
            JsonRpcVersion::V2 => "2.0",
        };
        // The method name goes through the JSON writer, whatever a caller passes.
        let body = Bytes::from(format!(
            "{{\"jsonrpc\":\"{version}\",\"id\":{id},\"method\":{},\"params\":{params}}}",
            Value::from(method)
        ));
        drop(params);
        let started = Instant::now();
        let exchange = tokio::time::timeout(timeout, self.exchange(method, body)).await;
        let (status, reply) = match exchange {
            Ok(r) => r?,
            Err(_) => {
                return Err(NodeError::Timeout {
                    method,
                    url: inner.url.clone(),
                    timeout,
                })
            }
        };
        tracing::debug!(method, url = %inner.url, id, status = status.as_u16(), bytes = reply.len(),
            elapsed_ms = started.elapsed().as_millis() as u64, "rpc reply");
        let url = inner.url.clone();
        let big = reply.len() > BIG_REPLY;
        let decode = move || decode_reply(method, &url, id, status, &reply).and_then(convert);
        if big {
            tokio::task::spawn_blocking(decode)
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
        } else {
            decode()
        }
    }

    /// POSTs `body` and reads the whole reply; on a 401 with cookie credentials, rereads the
    /// cookie and tries once more if it changed.
    async fn exchange(
        &self,
        method: &'static str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), NodeError> {
        let inner = &self.inner;
        let mut reread = true;
        loop {
            let credentials = self.credentials(method, false)?;
            let mut request = Request::builder()
                .method(Method::POST)
                .uri(inner.uri.clone())
                .header(CONTENT_TYPE, "application/json");
            if let Some(c) = &credentials {
                request = request.header(AUTHORIZATION, c.clone());
            }
            let request = request
                .body(Full::new(body.clone()))
                .map_err(|e| self.transport(method, &e))?;
            let response = inner.http.request(request).await.map_err(|e| {
                if e.is_connect() {
                    NodeError::Connect {
                        method,
                        url: inner.url.clone(),
                        reason: error_chain(&e),
                    }
                } else {
                    self.transport(method, &e)
                }
            })?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                if reread {
                    if let Auth::Cookie { .. } = inner.auth {
                        reread = false;
                        let fresh = self.credentials(method, true)?;
                        if fresh != credentials {
                            tracing::info!(url = %inner.url, "rpc: the node refused the cookie; using the cookie file's new contents");
                            continue;
                        }
                    }
                }
                return Err(NodeError::Auth {
                    method,
                    url: inner.url.clone(),
                    status: status.as_u16(),
                    hint: self.auth_hint(),
                });
            }
            let limit = inner.config.max_reply_bytes;
            let reply = Limited::new(response.into_body(), limit)
                .collect()
                .await
                .map_err(|e| {
                    if e.downcast_ref::<LengthLimitError>().is_some() {
                        NodeError::BadReply {
                            method,
                            url: inner.url.clone(),
                            reason: format!("reply larger than {limit} bytes"),
                        }
                    } else {
                        self.transport(method, &*e)
                    }
                })?
                .to_bytes();
            return Ok((status, reply));
        }
    }

    fn transport(&self, method: &'static str, e: &dyn std::error::Error) -> NodeError {
        NodeError::Transport {
            method,
            url: self.inner.url.clone(),
            reason: error_chain(e),
        }
    }

    /// The `Authorization` header: fixed, or from the cookie file (read now if `reread` or
    /// never read yet).
    fn credentials(
        &self,
        method: &'static str,
        reread: bool,
    ) -> Result<Option<HeaderValue>, NodeError> {
        match &self.inner.auth {
            Auth::Fixed(h) => Ok(h.clone()),
            Auth::Cookie { path, current } => {
                let mut current = current.lock().unwrap_or_else(|p| p.into_inner());
                if reread || current.is_none() {
                    let header = read_cookie(path).map_err(|source| NodeError::Cookie {
                        method,
                        url: self.inner.url.clone(),
                        path: path.clone(),
                        source,
                    })?;
                    *current = Some(header);
                }
                Ok(current.clone())
            }
        }
    }

    fn auth_hint(&self) -> String {
        match (&self.inner.auth, &self.inner.config.auth) {
            (Auth::Cookie { path, .. }, _) => format!(
                "check --rpc-cookie {} (the cookie of the node at this URL, reread after a 401)",
                path.display()
            ),
            (_, NodeAuth::UserPass { user, .. }) => {
                format!("check --rpc-user ({user:?}) and --rpc-password")
            }
            _ => "the node needs credentials: --rpc-user and --rpc-password, or --rpc-cookie"
                .to_owned(),
        }
    }
}

/// `Basic base64(user:password)`.
fn basic_header(userpass: &str) -> HeaderValue {
    let encoded = base64::engine::general_purpose::STANDARD.encode(userpass);
    let mut h =
        HeaderValue::from_str(&format!("Basic {encoded}")).expect("base64 is a valid header value");
    h.set_sensitive(true);
    h
}

/// Core's cookie file: one line `__cookie__:<hex>`.
fn read_cookie(path: &Path) -> std::io::Result<HeaderValue> {
    let text = std::fs::read_to_string(path)?;
    let line = text.trim();
    if !line.contains(':') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a cookie: expected user:password",
        ));
    }
    Ok(basic_header(line))
}

/// `http://[user:password@]host[:port][/path]`, or the same without `http://`. Returns the URI
/// to send to, the URL to show, and the credentials if the URL had some.
fn parse_url(raw: &str) -> Result<(Uri, String, Option<String>), NodeError> {
    let bad = |reason: &str| NodeError::Url {
        url: redact(raw),
        reason: reason.to_owned(),
    };
    let trimmed = raw.trim();
    let rest = match trimmed.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) => {
            return Err(bad(&format!(
                "scheme {scheme:?} is not supported (only http)"
            )))
        }
        None => trimmed,
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u.to_owned()), h),
        None => (None, authority),
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    let url = format!("http://{host}{path}");
    let uri: Uri = url
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
    Ok((uri, url, userinfo))
}

/// A URL with any credentials in it replaced, for error messages.
fn redact(raw: &str) -> String {
    match raw.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => raw.to_owned(),
        },
        None => match raw.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => raw.to_owned(),
        },
    }
}

/// An error and its causes, `: `-separated (hyper's own messages say little without them).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !s.ends_with(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cause = c.source();
    }
    s
}

/// A JSON-RPC reply: the `result`, or the error it carries.
fn decode_reply(
    method: &'static str,
    url: &str,
    id: u64,
    status: StatusCode,
    body: &[u8],
) -> Result<Value, NodeError> {
    let bad = |reason: String| NodeError::BadReply {
        method,
        url: url.to_owned(),
        reason,
    };
    let http_error = || NodeError::Http {
        method,
        url: url.to_owned(),
        status: status.as_u16(),
        body: snippet(body),
    };
    let mut v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) if !status.is_success() => return Err(http_error()),
        Err(e) => return Err(bad(format!("{e} (body starts {:?})", snippet(body)))),
    };
    let Some(obj) = v.as_object_mut() else {
        return Err(if status.is_success() {
            bad("not a JSON object".to_owned())
        } else {
            http_error()
        });
    };
    match obj.get("id") {
        None | Some(Value::Null) => {}
        Some(got) if got.as_u64() == Some(id) => {}
        Some(got) => return Err(bad(format!("answer to id {got}, expected {id}"))),
    }
    match obj.get("error") {
        None | Some(Value::Null) => {}
        Some(Value::Object(e)) => {
            return Err(NodeError::Rpc {
                method,
                url: url.to_owned(),
                code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: match e.get("message") {
                    Some(Value::String(m)) => m.clone(),
                    Some(other) => other.to_string(),
                    None => Value::Object(e.clone()).to_string(),
                },
            })
        }
        Some(other) => {
            return Err(NodeError::Rpc {
                method,
                url: url.to_owned(),
                code: 0,
                message: other.to_string(),
            })
        }
    }
    if !status.is_success() {
        return Err(http_error());
    }
    Ok(obj.remove("result").unwrap_or(Value::Null))
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(BODY_SNIPPET)]);
    let mut s = text.trim().to_owned();
    if body.len() > BODY_SNIPPET {
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_credentials() {
        let (uri, url, creds) = parse_url("http://lab:hunter2@127.0.0.1:18443").unwrap();
        assert_eq!(url, "http://127.0.0.1:18443/");
        assert_eq!(uri.to_string(), "http://127.0.0.1:18443/");
        assert_eq!(creds.as_deref(), Some("lab:hunter2"));
        let (_, url, creds) = parse_url("127.0.0.1:8332/wallet/x").unwrap();
        assert_eq!(url, "http://127.0.0.1:8332/wallet/x");
        assert_eq!(creds, None);
        let e = parse_url("https://u:p@node:8332").unwrap_err().to_string();
        assert!(e.contains("only http"), "{e}");
        assert!(!e.contains(":p@"), "{e}");
        assert!(parse_url("http://").is_err());
        assert!(parse_url("http://a b:1").is_err());
    }

    #[test]
    fn replies_in_both_dialects() {
        let ok = StatusCode::OK;
        let r = decode_reply("m", "u", 7, ok, br#"{"jsonrpc":"2.0","result":5,"id":7}"#);
        assert_eq!(r.unwrap(), 5);
        let r = decode_reply("m", "u", 7, ok, br#"{"result":null,"error":null,"id":7}"#);
        assert_eq!(r.unwrap(), Value::Null);
        // Legacy errors travel with HTTP 500.
        let r = decode_reply(
            "getblocktemplate",
            "http://n/",
            7,
            StatusCode::INTERNAL_SERVER_ERROR,
            br#"{"result":null,"error":{"code":-8,"message":"Invalid mode"},"id":7}"#,
        );
        let e = r.unwrap_err();
        assert!(matches!(e, NodeError::Rpc { code: -8, .. }));
        assert_eq!(
            e.to_string(),
            "getblocktemplate at http://n/: RPC error -8: Invalid mode"
        );
        let r = decode_reply(
            "m",
            "u",
            7,
            StatusCode::SERVICE_UNAVAILABLE,
            b"Work queue depth exceeded",
        );
        assert!(matches!(r, Err(NodeError::Http { status: 503, .. })));
        let r = decode_reply("m", "u", 7, ok, br#"{"result":1,"id":8}"#);
        assert!(matches!(r, Err(NodeError::BadReply { .. })));
        let r = decode_reply("m", "u", 7, ok, b"<html>");
        assert!(matches!(r, Err(NodeError::BadReply { .. })));
        let r = decode_reply("m", "u", 7, ok, b"[]");
        assert!(matches!(r, Err(NodeError::BadReply { .. })));
    }
}
