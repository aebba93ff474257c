//! The pool's HTTP status endpoints (`--http-listen ADDR`; loopback by default is the caller's
//! choice of listener):
//!
//! | path | answer |
//! |---|---|
//! | `/metrics` | Prometheus metrics, OpenMetrics text format ([`render_metrics`]) |
//! | `/api/status` | JSON: hash rate, workers, shares/s, shares, blocks, node, serving |
//! | `/api/workers?offset=0&limit=100` | JSON: a page of the worker list in name order; `after=NAME` pages by cursor instead of offset; `limit` is capped ([`HttpOptions::max_page`]) |
//! | `/healthz` | `200 ok` while the pool hands out work, `503` with the reason otherwise |
//! | `/` | a page for a person: the same figures, workers, shares over time, blocks, dependencies ([`status::RolePage`]) |
//!
//! GET and HEAD only (405 otherwise), 404 for any other path, 400 with a JSON message for a bad
//! query. Every figure comes from [`PoolStats::snapshot`] and the worker list's pages, so a
//! request costs O(1) (O(page) for `/api/workers`) however many miners are connected.
//!
//! Served by the serving loop every role shares ([`status::serve_with`]: a cap on connections
//! served at once, bounded request heads, timeouts, a graceful stop) over the pool's routes.

pub mod api;
mod metrics;

use std::future::Future;
use std::io;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use status::{json, not_found, refuse_method, reply, serve_with, text, ServeOptions};
use tokio::net::TcpListener;

use crate::stats::{PoolStats, WorkerRegistry};
use crate::Timestamp;

pub use metrics::{render_metrics, METRICS_PREFIX};
pub use status::OPENMETRICS_CONTENT_TYPE;

/// The caller's monotonic clock, on the same scale as the times given to the statistics.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// A part of `/api/status` a role built around the pool adds (a JDC's declarations, say),
/// computed on each request: it must answer at once.
pub type StatusSection = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// Sections added to `/api/status`, each under its name.
pub type StatusSections = Arc<std::sync::Mutex<Vec<(&'static str, StatusSection)>>>;

/// What the endpoints serve from.
#[derive(Clone)]
pub struct HttpState {
    /// Pool-wide counters.
    pub stats: Arc<PoolStats>,
    /// The worker list (`/api/workers`).
    pub workers: Arc<WorkerRegistry>,
    /// The clock the statistics are read at.
    pub clock: Clock,
    /// Serving bounds and page sizes.
    pub options: HttpOptions,
    /// Sections other roles add to `/api/status`.
    pub sections: StatusSections,
    /// The role built around the pool, whose own prefix `/metrics` also names the dependencies
    /// under (see [`render_metrics`]).
    pub role: Arc<std::sync::OnceLock<&'static str>>,
}

impl HttpState {
    /// A state with default options and no added sections.
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

/// The serving loop's bounds and `/api/workers`' page sizes.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// The serving loop's bounds (connections, timeouts).
    pub serving: ServeOptions,
    /// `limit` above this is lowered to it.
    pub max_page: usize,
    /// `limit` when the query has none.
    pub default_page: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            serving: ServeOptions::default(),
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
    let options = state.options.serving.clone();
    serve_with(
        listener,
        &options,
        move |req| respond(&state, req),
        shutdown,
    )
    .await
}

#[derive(Clone, Copy)]
enum Route {
    Page,
    Metrics,
    Status,
    Workers,
    Health,
}

/// Routes one request; every answer is computed at once from the statistics.
fn respond(state: &HttpState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let route = match req.uri().path() {
        "/" => Route::Page,
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
        Route::Page => {
            let q =
                api::WorkersQuery::parse(None, &state.options).expect("no query is a valid query");
            status::RolePage {
                role: state.role.get().copied().unwrap_or("pool"),
                status: status_json(state, now),
                health: health(state, now),
                workers: Some(workers_json(state, &q, now)),
            }
            .response()
        }
        Route::Status => json(StatusCode::OK, &status_json(state, now)),
        Route::Workers => match api::WorkersQuery::parse(req.uri().query(), &state.options) {
            Ok(q) => json(StatusCode::OK, &workers_json(state, &q, now)),
            Err(message) => json(StatusCode::BAD_REQUEST, &api::error(&message)),
        },
        Route::Health => match health(state, now) {
            Ok(body) => text(StatusCode::OK, body),
            Err(body) => text(StatusCode::SERVICE_UNAVAILABLE, body),
        },
    }
}

/// `/api/status`: the pool's figures, the edge's, and the sections a role around it adds.
fn status_json(state: &HttpState, now: Timestamp) -> serde_json::Value {
    let store_error = state.stats.store_error();
    let mut body = api::status(
        &state.stats.snapshot(now),
        store_error.as_deref(),
        &state.stats.attached(),
    );
    if let (Some(map), Some(a)) = (body.as_object_mut(), state.stats.admission(now)) {
        map.insert("admission".to_owned(), status::admission_json(&a));
    }
    let sections = state.sections.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(map) = body.as_object_mut() {
        for (name, section) in sections.iter() {
            map.insert((*name).to_owned(), section());
        }
    }
    body
}

fn workers_json(state: &HttpState, q: &api::WorkersQuery, now: Timestamp) -> serde_json::Value {
    state.workers.expire(now);
    let page = state.workers.page(q.start(), q.limit, now);
    api::workers(&page, q.limit, now)
}

/// `/healthz`: whether the pool serves, and either way a line for each listener whose accept
/// queue is filling.
fn health(state: &HttpState, now: Timestamp) -> Result<String, String> {
    let queues = state
        .stats
        .gate()
        .map(|g| status::accept_queue_lines(&g.listeners().queues()))
        .unwrap_or_default();
    api::health(
        &state.stats.snapshot(now),
        state.stats.store_error().as_deref(),
        &state.stats.attached(),
    )
    .map(|b| b + &queues)
    .map_err(|b| b + &queues)
}
