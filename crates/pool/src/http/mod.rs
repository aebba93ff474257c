//! The pool's HTTP status endpoints (`--http-listen ADDR`; loopback by default is the caller's
//! choice of listener):
//!
//! | path | answer |
//! |---|---|
//! | `/metrics` | Prometheus metrics, OpenMetrics text format ([`render_metrics`]) |
//! | `/api/status` | JSON: hash rate, workers, shares/s, shares, blocks, node, serving |
//! | `/api/workers?offset=0&limit=100` | JSON: a page of the worker list in name order; `after=NAME` pages by cursor instead of offset; `limit` is capped ([`HttpOptions::max_page`]) |
//! | `/healthz` | `200 ok` while the pool hands out work, `503` with the reason otherwise |
//!
//! GET and HEAD only (405 otherwise), 404 for any other path, 400 with a JSON message for a bad
//! query. Every figure comes from [`PoolStats::snapshot`] and the worker list's pages, so a
//! request costs O(1) (O(page) for `/api/workers`) however many miners are connected.
//!
//! Each connection is its own task; at most [`HttpOptions::max_connections`] are served at
//! once (further clients wait in the listen backlog). Request heads are bounded
//! ([`MAX_HEADER_BYTES`]) and must arrive within [`HttpOptions::request_timeout`], which also
//! closes idle kept-alive connections; request bodies are never read.
//!
//! [`serve_with`] is that serving loop over any router, for the other roles' status endpoints
//! (the translator's); [`serve`] is it over the pool's routes.

pub mod api;
mod metrics;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::stats::{PoolStats, WorkerRegistry};
use crate::Millis;

pub use metrics::{
    admission_families, counter, family, gauge, render_metrics, METRICS_PREFIX,
    OPENMETRICS_CONTENT_TYPE,
};

/// The most bytes a request line and its headers may take (431 beyond).
pub const MAX_HEADER_BYTES: usize = 8192;
/// How long open connections get to finish once the server stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The caller's monotonic clock, on the same scale as the times given to the statistics.
pub type Clock = Arc<dyn Fn() -> Millis + Send + Sync>;

/// A part of `/api/status` a role built around the pool adds (a JDC's declarations, say),
/// computed on each request: it must answer at once.
pub type StatusSection = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// Sections added to `/api/status`, each under its name.
pub type StatusSections = Arc<std::sync::Mutex<Vec<(&'static str, StatusSection)>>>;

/// What the endpoints serve from.
#[derive(Clone)]
pub struct HttpState {
    pub stats: Arc<PoolStats>,
    pub workers: Arc<WorkerRegistry>,
    pub clock: Clock,
    pub options: HttpOptions,
    pub sections: StatusSections,
    /// The role built around the pool, whose own prefix `/metrics` also names the dependencies
    /// under (see [`render_metrics`]).
    pub role: Arc<std::sync::OnceLock<&'static str>>,
}

impl HttpState {
    pub fn new(stats: Arc<PoolStats>, workers: Arc<WorkerRegistry>, clock: Clock) -> HttpState {
        HttpState {
            stats,
            workers,
            clock,
            options: HttpOptions::default(),
            sections: StatusSections::default(),
            role: Arc::default(),
        }
    }
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time allowed for a request's head to arrive, and for an idle kept-alive connection.
    pub request_timeout: Duration,
    /// A connection is closed after this long, whatever it is doing (a client that stops
    /// reading a large page holds its slot no longer).
    pub max_connection_age: Duration,
    /// `limit` above this is lowered to it.
    pub max_page: usize,
    /// `limit` when the query has none.
    pub default_page: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_connections: 64,
            request_timeout: Duration::from_secs(10),
            max_connection_age: Duration::from_secs(300),
            max_page: 1000,
            default_page: 100,
        }
    }
}

/// Serves the endpoints on `listener` until `shutdown` completes, then lets open requests
/// finish (for a few seconds at most) and returns.
pub async fn serve(
    listener: TcpListener,
    state: HttpState,
    shutdown: impl Future,
) -> io::Result<()> {
    let options = state.options.clone();
    serve_with(
        listener,
        &options,
        move |req| respond(&state, req),
        shutdown,
    )
    .await
}

/// The serving loop of [`serve`] (connection cap, bounded request heads, timeouts, graceful
/// stop) with `router` answering every request. The router is called on the connection's task
/// and must answer at once: it computes the response, it does not wait for anything.
pub async fn serve_with<R>(
    listener: TcpListener,
    options: &HttpOptions,
    router: R,
    shutdown: impl Future,
) -> io::Result<()>
where
    R: Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync + 'static,
{
    let router = Arc::new(router);
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(options.request_timeout)
        .max_header_size(MAX_HEADER_BYTES)
        .keep_alive(true);
    let local = listener.local_addr()?;
    tracing::info!(%local, "HTTP status endpoints listening");

    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, or a connection reset before accept: keep serving
                    // the connections we have and try again shortly.
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let route = router.clone();
        let svc = service_fn(move |req| {
            let response = route(&req);
            async move { Ok::<_, Infallible>(response) }
        });
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), svc));
        let age = options.max_connection_age;
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(age, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTP connection closed"),
                Err(_) => tracing::debug!(%peer, "HTTP connection closed at its age limit"),
            }
        });
    }

    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("HTTP connections still open at shutdown were dropped");
    }
    tracing::info!(%local, "HTTP status endpoints stopped");
    Ok(())
}

#[derive(Clone, Copy)]
enum Route {
    Metrics,
    Status,
    Workers,
    Health,
}

/// Routes one request; every answer is computed at once from the statistics.
fn respond(state: &HttpState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let route = match req.uri().path() {
        "/metrics" => Route::Metrics,
        "/api/status" => Route::Status,
        "/api/workers" => Route::Workers,
        "/healthz" => Route::Health,
        _ => return not_found(),
    };
    if let Some(r) = refuse_method(req) {
        return r;
    }
    let now = (state.clock)();
    match route {
        Route::Metrics => {
            let body = render_metrics(
                &state.stats.snapshot(now),
                &state.stats.processing(),
                &state.stats.attached(),
                state.stats.admission(now).as_ref(),
                state.role.get().copied(),
            );
            reply(StatusCode::OK, OPENMETRICS_CONTENT_TYPE, body.into())
        }
        Route::Status => {
            let store_error = state.stats.store_error();
            let mut body = api::status(
                &state.stats.snapshot(now),
                store_error.as_deref(),
                &state.stats.attached(),
            );
            if let (Some(map), Some(a)) = (body.as_object_mut(), state.stats.admission(now)) {
                map.insert("admission".to_owned(), api::admission(&a));
            }
            let sections = state.sections.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(map) = body.as_object_mut() {
                for (name, section) in sections.iter() {
                    map.insert((*name).to_owned(), section());
                }
            }
            json(StatusCode::OK, &body)
        }
        Route::Workers => match api::WorkersQuery::parse(req.uri().query(), &state.options) {
            Ok(q) => {
                state.workers.expire(now);
                let page = state.workers.page(q.start(), q.limit, now);
                json(StatusCode::OK, &api::workers(&page, q.limit, now))
            }
            Err(message) => json(StatusCode::BAD_REQUEST, &api::error(&message)),
        },
        Route::Health => match api::health(
            &state.stats.snapshot(now),
            state.stats.store_error().as_deref(),
            &state.stats.attached(),
        ) {
            Ok(body) => text(StatusCode::OK, body),
            Err(body) => text(StatusCode::SERVICE_UNAVAILABLE, body),
        },
    }
}

/// `404 not found`, for a path no route serves.
pub fn not_found() -> Response<Full<Bytes>> {
    text(StatusCode::NOT_FOUND, "not found\n".into())
}

/// The `405` answer (with `Allow`) for a request that is neither a GET nor a HEAD: the
/// endpoints only read.
pub fn refuse_method<B>(req: &Request<B>) -> Option<Response<Full<Bytes>>> {
    if req.method() == Method::GET || req.method() == Method::HEAD {
        return None;
    }
    let mut r = text(
        StatusCode::METHOD_NOT_ALLOWED,
        "only GET and HEAD are served\n".into(),
    );
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    Some(r)
}

/// A response that is never cached (every answer is the state of the moment).
pub fn reply(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

pub fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    reply(status, "text/plain; charset=utf-8", body.into())
}

pub fn json(status: StatusCode, value: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut body = serde_json::to_vec(value).expect("a JSON value always serializes");
    body.push(b'\n');
    reply(status, "application/json", body.into())
}
