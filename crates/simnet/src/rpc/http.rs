//! The HTTP side, as Core's `httprpc.cpp` / `httpserver.cpp` behave: POST only (405 otherwise),
//! Basic authentication (401 with `WWW-Authenticate: Basic realm="jsonrpc"`, after a 250 ms
//! pause for wrong credentials), a 32 MiB body limit (413), any path (Core serves `/` and
//! `/wallet/...` alike), and a timeout on clients that stop sending halfway (Core's
//! `-rpcservertimeout`, 30 s). Every connection is its own task, so a slow, stalled or hostile
//! client only ever holds up itself.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    HeaderValue, AUTHORIZATION, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, WWW_AUTHENTICATE,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::cookie::RpcAuth;
use super::methods::{self, Ctx};
use super::{jsonrpc, RpcOptions};
use crate::link_bytes::{self, Counted, LinkCounter};
use crate::node::Node;

/// Core's answer to anything but POST.
const ONLY_POST: &str = "JSONRPC server handles only POST requests";
const WWW_AUTH: &str = "Basic realm=\"jsonrpc\"";
/// Core's pause before answering wrong credentials, to slow down guessing.
const WRONG_PASSWORD_DELAY: Duration = Duration::from_millis(250);
/// Core's limit on the request line and headers (`MAX_HEADERS_SIZE`).
const MAX_HEADERS_SIZE: usize = 8192;
/// How long in-flight requests get to finish once the server stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

struct State {
    ctx: Arc<Ctx>,
    auth: RpcAuth,
    options: RpcOptions,
}

/// Why a connection was dropped rather than answered.
#[derive(Debug, thiserror::Error)]
enum DropConnection {
    #[error("request body not complete within {0:?}")]
    BodyTimeout(Duration),
    #[error("reading the request body: {0}")]
    Body(Box<dyn std::error::Error + Send + Sync>),
}

pub(super) async fn serve(
    node: Node,
    listener: TcpListener,
    auth: &RpcAuth,
    options: RpcOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let sink = node.events().clone();
    let counter = LinkCounter::new(&node.link_name("rpc"));
    let mut report = link_bytes::report_interval();
    let state = Arc::new(State {
        ctx: Arc::new(Ctx::new(node, options.longpoll_timeout, stop_rx)),
        auth: auth.credentials_only(),
        options,
    });
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(state.options.request_timeout)
        .max_header_size(MAX_HEADERS_SIZE)
        .keep_alive(true);
    let local = listener.local_addr()?;
    tracing::info!(%local, "JSON-RPC server listening");

    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, a connection reset before accept: keep serving
                    // the connections we have and try again shortly.
                    tracing::warn!(error = %e, "JSON-RPC accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = report.tick() => {
                counter.report(&sink);
                continue;
            }
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let st = state.clone();
        let svc = service_fn(move |req| handle(req, st.clone(), peer));
        let io = TokioIo::new(Counted::new(stream, counter.clone()));
        let conn = graceful.watch(builder.serve_connection(io, svc));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "JSON-RPC connection closed");
            }
        });
    }

    drop(listener);
    // Long polls answer now; in-flight calls get a moment to finish.
    let _ = stop_tx.send(true);
    // Reports go on while connections finish, so that their last bytes are counted in time.
    let drained = async {
        let mut finished = std::pin::pin!(graceful.shutdown());
        loop {
            tokio::select! {
                _ = &mut finished => return,
                _ = report.tick() => counter.report(&sink),
            }
        }
    };
    if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
        tracing::warn!("JSON-RPC connections still open at shutdown were dropped");
    }
    counter.report(&sink);
    let (rx, tx) = counter.totals();
    tracing::info!(rx_bytes = rx, tx_bytes = tx, "JSON-RPC traffic");
    tracing::info!(%local, "JSON-RPC server stopped");
    Ok(())
}

async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
    peer: SocketAddr,
) -> Result<Response<Full<Bytes>>, DropConnection> {
    if req.method() != Method::POST {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, ONLY_POST.into()));
    }
    let limit = state.options.max_body_size;
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Ok(too_large());
    }
    let Some(credentials) = req.headers().get(AUTHORIZATION) else {
        return Ok(unauthorized());
    };
    if !authorized(credentials.as_bytes(), &state.auth) {
        tracing::warn!(%peer, "JSON-RPC incorrect password attempt");
        tokio::time::sleep(WRONG_PASSWORD_DELAY).await;
        return Ok(unauthorized());
    }

    let timeout = state.options.request_timeout;
    let body =
        match tokio::time::timeout(timeout, Limited::new(req.into_body(), limit).collect()).await {
            Err(_) => return Err(DropConnection::BodyTimeout(timeout)),
            Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => return Ok(too_large()),
            Ok(Err(e)) => return Err(DropConnection::Body(e)),
            Ok(Ok(collected)) => collected.to_bytes(),
        };

    let ctx = state.ctx.clone();
    let answer = jsonrpc::respond(&body, |call| {
        let ctx = ctx.clone();
        async move { methods::execute(&ctx, call).await }
    })
    .await;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    Ok(match answer.body {
        None => reply(status, Bytes::new()),
        Some(json) => {
            let mut r = reply(status, Bytes::from(json));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
    })
}

/// Core's check: `Basic ` (case as written), base64 of `user:password`, the password being
/// everything after the first colon.
fn authorized(header: &[u8], auth: &RpcAuth) -> bool {
    let Some(encoded) = header.strip_prefix(b"Basic ") else {
        return false;
    };
    let encoded = encoded.trim_ascii();
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
        return false;
    };
    let Some(colon) = decoded.iter().position(|&b| b == b':') else {
        return false;
    };
    auth.check(&decoded[..colon], &decoded[colon + 1..])
}

fn reply(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r
}

fn unauthorized() -> Response<Full<Bytes>> {
    let mut r = reply(StatusCode::UNAUTHORIZED, Bytes::new());
    r.headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static(WWW_AUTH));
    r
}

/// The rest of an oversized body is never read, so the connection cannot carry another
/// request: say so, and hyper closes it after the answer.
fn too_large() -> Response<Full<Bytes>> {
    let mut r = reply(StatusCode::PAYLOAD_TOO_LARGE, Bytes::new());
    r.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_is_parsed_like_core() {
        let auth = RpcAuth::user_password("u", "p:with:colons");
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert!(authorized(
            format!("Basic {}", b64("u:p:with:colons")).as_bytes(),
            &auth
        ));
        assert!(authorized(
            format!("Basic   {}  ", b64("u:p:with:colons")).as_bytes(),
            &auth
        ));
        assert!(!authorized(
            format!("basic {}", b64("u:p:with:colons")).as_bytes(),
            &auth
        ));
        assert!(!authorized(
            format!("Basic {}", b64("u:p")).as_bytes(),
            &auth
        ));
        assert!(!authorized(
            format!("Basic {}", b64("up:with:colons")).as_bytes(),
            &auth
        ));
        assert!(!authorized(b"Basic !!!notbase64", &auth));
        assert!(!authorized(b"Bearer x", &auth));
        assert!(!authorized(b"", &auth));
    }
}
