//! The JDS's HTTP status endpoints (`--http-listen ADDR`), served by every role's serving loop
//! ([`status::serve_with`]):
//!
//! | path | answer |
//! |---|---|
//! | `/api/status` | JSON: connections, tokens, declared jobs, blocks (found, pending, accepted, orphaned, rejected), and each dependency (the pool-side node, the store): up, since when, failures, its error |
//! | `/metrics` | the same figures, OpenMetrics text, prefixed `stratumlab_jds_` |
//! | `/` | a page for a person: the same figures, blocks and dependencies ([`status::RolePage`]) |
//! | `/healthz` | `200 ok` while the node answers and the store writes, `503` with the failing dependency otherwise |
//!
//! The node counts as up once a mempool refresh succeeded and until one fails.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use pool::store::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::{Registry, Unit};
use serde_json::{json, Value};
use status::{
    admission_families, admission_json, counter, dependency_families, gauge, json, not_found,
    refuse_method, reply, serve_with, text, DependencyFigure, ServeOptions,
    OPENMETRICS_CONTENT_TYPE,
};
use tokio::net::TcpListener;

use super::server::{JdsStats, StatsSnapshot};

/// What the endpoints read.
pub(crate) struct View {
    pub stats: Arc<JdsStats>,
    pub node: Arc<NodeWatch>,
    pub store: Option<Store>,
    pub started: Instant,
    /// The JDC side's gate (its clock is `started`).
    pub gate: Arc<edge::Gate>,
}

/// The pool-side node's state as the mempool refreshes find it.
#[derive(Debug)]
pub(crate) struct NodeWatch {
    epoch: Instant,
    /// 0: not heard from yet; 1: the last refresh succeeded; 2: it failed.
    state: AtomicU8,
    /// Milliseconds since `epoch` at the last change of state.
    since_ms: AtomicU64,
    failures: AtomicU64,
    error: Mutex<Option<String>>,
}

impl Default for NodeWatch {
    fn default() -> Self {
        NodeWatch {
            epoch: Instant::now(),
            state: AtomicU8::new(0),
            since_ms: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            error: Mutex::new(None),
        }
    }
}

impl NodeWatch {
    /// A refresh's outcome.
    pub(crate) fn record(&self, outcome: Result<(), String>) {
        let state = if outcome.is_ok() { 1 } else { 2 };
        let was = self.state.swap(state, Relaxed);
        if was != state {
            self.since_ms
                .store(self.epoch.elapsed().as_millis() as u64, Relaxed);
            if state == 2 {
                self.failures.fetch_add(1, Relaxed);
            }
        }
        *self.error.lock().unwrap_or_else(|e| e.into_inner()) = outcome.err();
    }

    fn snapshot(&self) -> NodeSnapshot {
        let state = self.state.load(Relaxed);
        NodeSnapshot {
            state: match state {
                1 => "ok",
                2 => "unreachable",
                _ => "unknown",
            },
            for_s: (state != 0).then(|| {
                (self.epoch.elapsed().as_millis() as u64)
                    .saturating_sub(self.since_ms.load(Relaxed)) as f64
                    / 1000.0
            }),
            failures: self.failures.load(Relaxed),
            error: self.error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

struct NodeSnapshot {
    state: &'static str,
    for_s: Option<f64>,
    failures: u64,
    error: Option<String>,
}

/// The store's part of a snapshot.
struct StoreSnapshot {
    failing_for_s: Option<f64>,
    failures: u64,
    error: Option<String>,
}

struct Snapshot {
    s: StatsSnapshot,
    admission: edge::AdmissionSnapshot,
    node: NodeSnapshot,
    store: Option<StoreSnapshot>,
    uptime_s: f64,
}

impl View {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            s: self.stats.snapshot(),
            admission: self.gate.snapshot(edge::Timestamp::from_millis(
                self.started.elapsed().as_millis() as u64,
            )),
            node: self.node.snapshot(),
            store: self.store.as_ref().map(|st| {
                let stats = st.stats();
                StoreSnapshot {
                    failing_for_s: stats
                        .failing
                        .as_ref()
                        .map(|(_, since)| since.elapsed().unwrap_or_default().as_secs_f64()),
                    failures: stats.failures,
                    error: stats.failing.map(|(e, _)| e.to_string()),
                }
            }),
            uptime_s: self.started.elapsed().as_secs_f64(),
        }
    }
}

impl Snapshot {
    /// `None` while serving; otherwise the failing dependency and the reason.
    fn not_serving(&self) -> Option<(&'static str, String)> {
        if let Some(st) = &self.store {
            if let Some(e) = &st.error {
                return Some(("store", e.clone()));
            }
        }
        match self.node.state {
            "ok" => None,
            "unknown" => Some(("node", "not heard from yet".into())),
            _ => Some((
                "node",
                self.node
                    .error
                    .clone()
                    .unwrap_or_else(|| "unreachable".into()),
            )),
        }
    }
}

/// Serves the endpoints on `listener` until `shutdown` completes.
pub(crate) async fn serve(
    listener: TcpListener,
    view: View,
    shutdown: impl Future,
) -> io::Result<()> {
    let router = move |req: &Request<Incoming>| respond(&view, req);
    serve_with(listener, &ServeOptions::default(), router, shutdown).await
}

fn respond(view: &View, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/" | "/api/status" | "/metrics" | "/healthz") {
        return not_found();
    }
    if let Some(r) = refuse_method(req) {
        return r;
    }
    let snap = view.snapshot();
    let health = || {
        let queues = status::accept_queue_lines(&snap.admission.accept_queues);
        match snap.not_serving() {
            None => Ok(format!("ok\n{queues}")),
            Some((dep, why)) => Err(format!("not serving: {dep} ({why})\n{queues}")),
        }
    };
    match path {
        "/" => status::RolePage {
            role: "jds",
            status: status(&snap),
            health: health(),
            workers: None,
        }
        .response(),
        "/api/status" => json(StatusCode::OK, &status(&snap)),
        "/metrics" => reply(
            StatusCode::OK,
            OPENMETRICS_CONTENT_TYPE,
            render_metrics(&snap).into(),
        ),
        _ => match health() {
            Ok(body) => text(StatusCode::OK, body),
            Err(body) => text(StatusCode::SERVICE_UNAVAILABLE, body),
        },
    }
}

fn status(snap: &Snapshot) -> Value {
    let s = &snap.s;
    let not_serving = snap.not_serving();
    let mut deps = serde_json::Map::new();
    deps.insert(
        "node".into(),
        json!({
            "up": snap.node.state == "ok",
            "state": snap.node.state,
            "for_s": snap.node.for_s,
            "failures": snap.node.failures,
            "error": snap.node.error,
        }),
    );
    if let Some(st) = &snap.store {
        deps.insert(
            "store".into(),
            json!({
                "up": st.error.is_none(),
                "state": if st.error.is_some() { "failing" } else { "ok" },
                "for_s": st.failing_for_s,
                "failures": st.failures,
                "error": st.error,
            }),
        );
    }
    json!({
        "uptime_s": snap.uptime_s,
        "serving": not_serving.is_none(),
        "not_serving_reason": not_serving.as_ref().map(|(d, _)| *d),
        "connections": s.open,
        "connections_opened": s.connections,
        "tokens_allocated": s.tokens_allocated,
        "jobs": { "declared": s.jobs_declared, "refused": s.jobs_refused },
        "transactions_requested": s.txs_requested,
        "solutions": s.solutions,
        "blocks": {
            "found": s.blocks_submitted,
            "pending": s.blocks_pending(),
            "accepted": s.blocks_accepted,
            "orphaned": s.blocks_orphaned,
            "rejected": s.blocks_rejected,
        },
        "dependencies": Value::Object(deps),
        "admission": admission_json(&snap.admission),
    })
}

/// The figures as one OpenMetrics exposition, prefixed `stratumlab_jds_`.
fn render_metrics(snap: &Snapshot) -> String {
    let mut registry = Registry::with_prefix("stratumlab_jds");
    registry.register_collector(Box::new(Metrics {
        s: snap.s,
        node_up: snap.node.state == "ok",
        node_failures: snap.node.failures,
        store: snap
            .store
            .as_ref()
            .map(|st| (st.error.is_none(), st.failures)),
        uptime_s: snap.uptime_s,
        admission: snap.admission.clone(),
    }));
    let mut out = String::with_capacity(4 * 1024);
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

#[derive(Debug)]
struct Metrics {
    s: StatsSnapshot,
    node_up: bool,
    node_failures: u64,
    /// Writing, and failures.
    store: Option<(bool, u64)>,
    uptime_s: f64,
    admission: edge::AdmissionSnapshot,
}

impl Collector for Metrics {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let e = &mut e;
        let s = &self.s;
        gauge(e, "connections", "JD clients connected now.", None, s.open)?;
        counter(
            e,
            "connections_opened",
            "JD client connections accepted.",
            s.connections,
        )?;
        counter(
            e,
            "tokens_allocated",
            "Mining job tokens handed out.",
            s.tokens_allocated,
        )?;
        counter(
            e,
            "jobs_declared",
            "Declared jobs accepted.",
            s.jobs_declared,
        )?;
        counter(e, "jobs_refused", "Declared jobs refused.", s.jobs_refused)?;
        counter(
            e,
            "blocks_found",
            "Blocks pushed by JD clients and submitted to the node.",
            s.blocks_submitted,
        )?;
        counter(
            e,
            "blocks_accepted",
            "Blocks the node accepted.",
            s.blocks_accepted,
        )?;
        counter(
            e,
            "blocks_orphaned",
            "Valid blocks another block at their height beat.",
            s.blocks_orphaned,
        )?;
        counter(
            e,
            "blocks_rejected",
            "Blocks the node refused.",
            s.blocks_rejected,
        )?;
        gauge(
            e,
            "blocks_pending",
            "Blocks the node has not answered for yet.",
            None,
            s.blocks_pending(),
        )?;
        let mut deps = vec![DependencyFigure {
            name: "node",
            up: self.node_up,
            failures: self.node_failures,
        }];
        if let Some((up, failures)) = self.store {
            deps.push(DependencyFigure {
                name: "store",
                up,
                failures,
            });
        }
        dependency_families(e, &deps)?;
        gauge(
            e,
            "uptime",
            "Time since the JDS started.",
            Some(&Unit::Seconds),
            self.uptime_s,
        )?;
        admission_families(e, &self.admission)?;
        Ok(())
    }
}
