//! Watching a run live (`stratumlab run --metrics-listen ADDR`): a page at `/` for a person,
//! Prometheus metrics at `/metrics`, the same figures as JSON at `/api/live`, and the trial's
//! roles for Prometheus to discover at `/sd`.
//!
//! The figures: where the run is, shares so far per configuration (as each pool counts them),
//! time to job and share latency as they happen (histograms, and percentiles over the last
//! minute), stale shares as the devices see them, blocks, and CPU and memory per role. Time to
//! job and share latency come from the roles' event files, followed while the roles write them
//! ([`tail`], [`tracker`]). The figures that count are in results.json; these are for watching
//! (docs/metrics.md, "Watching a run"). `deploy/prometheus.yml` scrapes them and discovers the
//! roles; `deploy/grafana/lab-run.json` draws them.

pub mod tail;
pub mod tracker;
pub mod window;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use serde_json::{json, Value};

use crate::orchestrate::{Progress, RoleFile, ShareCounts, StatusEndpoint};
use crate::report::palette;
use tail::Tail;
use tracker::{LogRole, Observation, Outcome, Tracker};
use window::Rolling;

/// The live page's script (drawn with the role pages' shared helpers).
const PAGE_SCRIPT: &str = include_str!("page.js");

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfigLabel {
    config: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabel {
    role: String,
}

type Histograms = Family<ConfigLabel, Histogram, fn() -> Histogram>;

/// 1 ms to about 16 s, doubling: time to job spans a LAN hop to a slow WAN's seconds.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Observes `seconds` in `config`'s histogram of `histograms`, and gives `config`'s live view
/// for its last minute.
fn latency<'s>(
    histograms: &Histograms,
    st: &'s mut State,
    config: String,
    seconds: f64,
) -> &'s mut ConfigLive {
    histograms
        .get_or_create(&ConfigLabel {
            config: config.clone(),
        })
        .observe(seconds);
    st.live.entry(config).or_default()
}

/// One configuration's live view.
#[derive(Default)]
struct ConfigLive {
    time_to_job_ms: Rolling,
    share_latency_ms: Rolling,
    /// 1 for a stale verdict, 0 for any other: the mean is the stale share.
    stale: Rolling,
    accepted: u64,
    stale_total: u64,
    rejected: u64,
}

#[derive(Default)]
struct State {
    stage: String,
    elapsed: Duration,
    total: Duration,
    shares: BTreeMap<String, ShareCounts>,
    roles: BTreeMap<String, (f64, u64)>,
    /// Configurations in the run's order.
    configs: Vec<String>,
    endpoints: Vec<StatusEndpoint>,
    tracker: Tracker,
    tail: Tail,
    live: BTreeMap<String, ConfigLive>,
}

/// The run's live figures.
pub struct LiveMetrics {
    registry: Mutex<Registry>,
    elapsed: Gauge<f64, AtomicU64>,
    duration: Gauge<f64, AtomicU64>,
    accepted: Family<ConfigLabel, Gauge>,
    rejected: Family<ConfigLabel, Gauge>,
    stale: Family<ConfigLabel, Gauge>,
    blocks: Family<ConfigLabel, Gauge>,
    time_to_job: Histograms,
    share_latency: Histograms,
    cpu: Family<RoleLabel, Gauge<f64, AtomicU64>>,
    rss: Family<RoleLabel, Gauge>,
    state: Mutex<State>,
}

impl Default for LiveMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveMetrics {
    /// The run's gauges and histograms, registered and empty.
    pub fn new() -> LiveMetrics {
        let mut r = Registry::with_prefix("stratumlab_run");
        let m = LiveMetrics {
            registry: Mutex::new(Registry::default()),
            elapsed: Gauge::default(),
            duration: Gauge::default(),
            accepted: Family::default(),
            rejected: Family::default(),
            stale: Family::default(),
            blocks: Family::default(),
            time_to_job: Family::new_with_constructor(latency_histogram),
            share_latency: Family::new_with_constructor(latency_histogram),
            cpu: Family::default(),
            rss: Family::default(),
            state: Mutex::new(State::default()),
        };
        for (name, help, gauge) in [
            (
                "elapsed_seconds",
                "Time since the measured run started",
                &m.elapsed,
            ),
            (
                "duration_seconds",
                "Measured duration of the trial",
                &m.duration,
            ),
        ] {
            r.register(name, help, gauge.clone());
        }
        for (name, help, family) in [
            (
                "shares_accepted",
                "Shares the configuration's pool accepted so far",
                &m.accepted,
            ),
            (
                "shares_rejected",
                "Shares the configuration's pool rejected so far (stale included)",
                &m.rejected,
            ),
            (
                "shares_stale",
                "Shares the configuration's devices had answered stale so far",
                &m.stale,
            ),
            (
                "blocks_accepted",
                "Blocks the node accepted from the configuration's pool so far",
                &m.blocks,
            ),
        ] {
            r.register(name, help, family.clone());
        }
        for (name, help, histograms) in [
            ("time_to_job", "From a node template to a device able to hash on it, per device and template, as it happens", &m.time_to_job),
            ("share_latency", "From a device sending a share to its verdict reaching the device, as it happens", &m.share_latency),
        ] {
            r.register_with_unit(name, help, Unit::Seconds, histograms.clone());
        }
        r.register(
            "role_cpu_percent",
            "CPU use of a role process in the last second (100 = one core)",
            m.cpu.clone(),
        );
        r.register(
            "role_rss_bytes",
            "Resident memory of a role process",
            m.rss.clone(),
        );
        *m.registry.lock().expect("not poisoned") = r;
        m
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the roles' latest CPU and memory.
    pub fn set_roles(&self, roles: &BTreeMap<String, (f64, u64)>) {
        for (role, (cpu, rss)) in roles {
            let l = RoleLabel { role: role.clone() };
            self.cpu.get_or_create(&l).set(*cpu);
            self.rss
                .get_or_create(&l)
                .set(i64::try_from(*rss).unwrap_or(i64::MAX));
        }
        self.state().roles.clone_from(roles);
    }

    /// Follows these event files from now on (a new trial's replace the last one's; the
    /// histograms and the last minute's samples carry on).
    pub fn follow(&self, roles: &[RoleFile], endpoints: &[StatusEndpoint]) {
        let mut st = self.state();
        for r in roles {
            if let Some(c) = &r.config {
                if !st.configs.contains(c) {
                    st.configs.push(c.clone());
                }
            }
        }
        st.endpoints = endpoints.to_vec();
        st.tracker = Tracker::default();
        st.tail = Tail::new(roles.iter().filter_map(|r| {
            let path = r.events.clone()?;
            let role = LogRole {
                config: r.config.clone(),
                kind: r.kind,
                site: r.site,
            };
            Some((role, path))
        }));
    }

    /// Reads what the followed files gained and records what it shows, at `now_ns` (the events'
    /// clock).
    pub fn poll_events(&self, now_ns: u64) {
        let mut observations = Vec::new();
        let mut st = self.state();
        let State { tail, tracker, .. } = &mut *st;
        tail.poll(tracker, &mut observations);
        for o in observations {
            self.observe(&mut st, now_ns, o);
        }
        for c in st.live.values_mut() {
            c.time_to_job_ms.expire(now_ns);
            c.share_latency_ms.expire(now_ns);
            c.stale.expire(now_ns);
        }
    }

    fn observe(&self, st: &mut State, now_ns: u64, o: Observation) {
        match o {
            Observation::TimeToJob { config, seconds } => {
                latency(&self.time_to_job, st, config, seconds)
                    .time_to_job_ms
                    .push(now_ns, seconds * 1e3);
            }
            Observation::ShareLatency { config, seconds } => {
                latency(&self.share_latency, st, config, seconds)
                    .share_latency_ms
                    .push(now_ns, seconds * 1e3);
            }
            Observation::Verdict { config, outcome } => {
                let label = ConfigLabel {
                    config: config.clone(),
                };
                let c = st.live.entry(config).or_default();
                c.stale
                    .push(now_ns, f64::from(u8::from(outcome == Outcome::Stale)));
                match outcome {
                    Outcome::Accepted => c.accepted += 1,
                    Outcome::Stale => c.stale_total += 1,
                    Outcome::Rejected => c.rejected += 1,
                }
                self.stale
                    .get_or_create(&label)
                    .set(i64::try_from(c.stale_total).unwrap_or(i64::MAX));
            }
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let r = self.registry.lock().expect("not poisoned");
        prometheus_client::encoding::text::encode(&mut out, &r)
            .expect("writing to a String cannot fail");
        out
    }

    /// `/api/live`: the figures of the moment (percentiles over the last minute, at `now_ns`).
    pub fn snapshot(&self, now_ns: u64) -> Value {
        let mut st = self.state();
        let st = &mut *st;
        let mut names = st.configs.clone();
        for c in st.shares.keys().chain(st.live.keys()) {
            if !names.contains(c) {
                names.push(c.clone());
            }
        }
        let configs: Vec<Value> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let pool = st.shares.get(name).copied().unwrap_or_default();
                let c = st.live.entry(name.clone()).or_default();
                let stale_pct = {
                    c.stale.expire(now_ns);
                    c.stale.mean().map(|m| m * 100.0)
                };
                json!({
                    "name": name,
                    "color": palette::nth(i).to_string(),
                    "pool": pool,
                    "devices": {
                        "accepted": c.accepted,
                        "stale": c.stale_total,
                        "rejected": c.rejected,
                    },
                    "stale_pct_1m": stale_pct,
                    "time_to_job_ms": c.time_to_job_ms.percentiles(now_ns),
                    "share_latency_ms": c.share_latency_ms.percentiles(now_ns),
                })
            })
            .collect();
        let roles: Vec<Value> = st
            .roles
            .iter()
            .map(|(name, (cpu, rss))| json!({"name": name, "cpu_pct": cpu, "rss_bytes": rss}))
            .collect();
        json!({
            "stage": st.stage,
            "elapsed_s": st.elapsed.as_secs_f64(),
            "duration_s": st.total.as_secs_f64(),
            "window_s": window::WINDOW_NS / 1_000_000_000,
            "configs": configs,
            "roles": roles,
            "endpoints": st.endpoints,
        })
    }

    /// `/sd`: the trial's status endpoints as Prometheus HTTP service discovery target groups,
    /// one per role, labelled with its configuration, kind and name.
    pub fn targets(&self) -> Value {
        let st = self.state();
        Value::Array(
            st.endpoints
                .iter()
                .map(|e| {
                    json!({
                        "targets": [e.addr.to_string()],
                        "labels": {"config": e.config, "role": e.role, "name": e.name},
                    })
                })
                .collect(),
        )
    }

    /// Serves the page and endpoints on `addr` from a thread of its own until the process
    /// ends; returns the bound address.
    pub fn serve(self: &Arc<Self>, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        // Registered with the runtime that serves it, as every role's listener is opened.
        let listener = {
            let _in = runtime.enter();
            edge::listen(addr)?
        };
        let bound = listener.local_addr()?;
        let me = self.clone();
        std::thread::Builder::new()
            .name("lab-live".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let router = move |req: &Request<Incoming>| me.respond(req);
                    let options = status::ServeOptions::default();
                    if let Err(e) =
                        status::serve_with(listener, &options, router, std::future::pending::<()>())
                            .await
                    {
                        tracing::error!(error = %e, "live metrics: serving stopped");
                    }
                });
            })?;
        Ok(bound)
    }

    fn respond(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path();
        if !matches!(path, "/" | "/metrics" | "/api/live" | "/sd") {
            return status::not_found();
        }
        if let Some(r) = status::refuse_method(req) {
            return r;
        }
        let now = events::now_ns();
        match path {
            "/" => status::html_page("stratumlab run", &self.snapshot(now), PAGE_SCRIPT),
            "/metrics" => status::reply(
                StatusCode::OK,
                status::OPENMETRICS_CONTENT_TYPE,
                self.render().into(),
            ),
            "/api/live" => status::json(StatusCode::OK, &self.snapshot(now)),
            _ => status::json(StatusCode::OK, &self.targets()),
        }
    }
}

impl Progress for LiveMetrics {
    fn stage(&self, what: &str) {
        what.clone_into(&mut self.state().stage);
    }

    fn roles(&self, latest: &BTreeMap<String, (f64, u64)>) {
        self.set_roles(latest);
    }

    fn started(&self, roles: &[RoleFile], endpoints: &[StatusEndpoint]) {
        self.follow(roles, endpoints);
    }

    fn tick(&self, elapsed: Duration, total: Duration, shares: &BTreeMap<String, ShareCounts>) {
        self.elapsed.set(elapsed.as_secs_f64());
        self.duration.set(total.as_secs_f64());
        for (config, s) in shares {
            let l = ConfigLabel {
                config: config.clone(),
            };
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            self.accepted.get_or_create(&l).set(n(s.accepted));
            self.rejected.get_or_create(&l).set(n(s.rejected));
            self.blocks.get_or_create(&l).set(n(s.blocks));
        }
        {
            let mut st = self.state();
            // Ticks come while the fleets run: the last stage named was their start.
            st.stage = if elapsed <= total {
                "measuring"
            } else {
                "draining"
            }
            .to_owned();
            st.elapsed = elapsed;
            st.total = total;
            st.shares.clone_from(shares);
        }
        self.poll_events(events::now_ns());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{RoleKind, Site};
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    }

    fn body(text: &str) -> &str {
        text.split_once("\r\n\r\n").unwrap().1
    }

    /// A trial's files written by real event sinks while the live view follows them: the
    /// node's template, a fleet's job 25 ms later and a share answered in 40 ms.
    #[test]
    fn the_page_metrics_and_discovery_follow_the_trial() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, kind, config: Option<&str>| RoleFile {
            name: name.into(),
            kind,
            config: config.map(str::to_owned),
            site: Site::Farm,
            events: Some(dir.path().join(format!("{name}.events"))),
            log: dir.path().join(format!("{name}.log")),
        };
        let roles = [
            file("simnet", None, None),
            file("sv1.pool", Some(RoleKind::Pool), Some("sv1")),
            file("sv1.fleet0", Some(RoleKind::Fleet), Some("sv1")),
        ];
        let endpoint = StatusEndpoint {
            config: "sv1".into(),
            role: "pool",
            name: "sv1.pool".into(),
            addr: "127.0.0.1:4321".parse().unwrap(),
        };
        let live = Arc::new(LiveMetrics::new());
        let addr = live.serve("127.0.0.1:0".parse().unwrap()).unwrap();
        // Followed before the files exist, as the run's roles create them after they start.
        live.started(&roles, std::slice::from_ref(&endpoint));
        live.poll_events(events::now_ns());

        let node =
            events::EventSink::create(roles[0].events.as_ref().unwrap(), "simnet", "").unwrap();
        let fleet =
            events::EventSink::create(roles[2].events.as_ref().unwrap(), "fleet", "sv1").unwrap();
        let t0 = events::now_ns();
        let ms = 1_000_000;
        node.emit_at(
            t0,
            events::TemplateCreated {
                node: events::ShortStr::new("node"),
                template_id: 1,
                height: 1,
                prev_hash: events::Hash256::default(),
                value_sats: 1,
                fees_sats: 0,
                tx_count: 0,
                fingerprint: events::Fingerprint(11),
                future: false,
            },
        );
        fleet.emit_at(
            t0 + 25 * ms,
            events::JobReceived {
                device: 1,
                channel: None,
                job_id: events::JobId::text("1"),
                fingerprint: Some(events::Fingerprint(11)),
                prev_hash: None,
                target: events::Target::DIFFICULTY_1,
                clean: true,
                future: false,
            },
        );
        fleet.emit_at(
            t0 + 30 * ms,
            events::ShareSent {
                device: 1,
                channel: None,
                seq: 1,
                job_id: events::JobId::text("1"),
                nonce: 0,
                ntime: 0,
                version: 0,
                difficulty: 1.0,
                hash: None,
            },
        );
        fleet.emit_at(
            t0 + 70 * ms,
            events::ShareResult {
                conn: 1,
                channel: None,
                seq: 1,
                job_id: events::JobId::text("1"),
                nonce: 0,
                difficulty: 1.0,
                verdict: events::Verdict::Rejected(events::Reason::Stale),
                perspective: events::Perspective::Received,
            },
        );
        node.flush().unwrap();
        fleet.flush().unwrap();

        let shares = BTreeMap::from([(
            "sv1".to_owned(),
            ShareCounts {
                accepted: 42,
                rejected: 3,
                blocks: 1,
            },
        )]);
        live.tick(Duration::from_secs(12), Duration::from_secs(120), &shares);
        live.set_roles(&BTreeMap::from([("sv1.pool".to_owned(), (12.5, 4096))]));

        let text = get(addr, "/metrics");
        assert!(text.starts_with("HTTP/1.0 200"), "{text}");
        for line in [
            "stratumlab_run_shares_accepted{config=\"sv1\"} 42",
            "stratumlab_run_shares_stale{config=\"sv1\"} 1",
            "stratumlab_run_elapsed_seconds 12.0",
            "stratumlab_run_role_cpu_percent{role=\"sv1.pool\"} 12.5",
            // 25 ms falls in the 32 ms bucket, not the 16 ms one; 40 ms in the 64 ms one.
            "stratumlab_run_time_to_job_seconds_bucket{le=\"0.016\",config=\"sv1\"} 0",
            "stratumlab_run_time_to_job_seconds_bucket{le=\"0.032\",config=\"sv1\"} 1",
            "stratumlab_run_share_latency_seconds_bucket{le=\"0.032\",config=\"sv1\"} 0",
            "stratumlab_run_share_latency_seconds_bucket{le=\"0.064\",config=\"sv1\"} 1",
            "stratumlab_run_share_latency_seconds_count{config=\"sv1\"} 1",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        assert!(text.trim_end().ends_with("# EOF"), "{text}");

        let v: Value = serde_json::from_str(body(&get(addr, "/api/live"))).unwrap();
        let c = &v["configs"][0];
        assert_eq!(c["name"], "sv1");
        assert_eq!(c["pool"]["accepted"], 42);
        assert_eq!(c["devices"]["stale"], 1);
        assert_eq!(c["stale_pct_1m"], 100.0);
        assert_eq!(c["time_to_job_ms"]["n"], 1);
        assert!(
            (c["time_to_job_ms"]["p50"].as_f64().unwrap() - 25.0).abs() < 1e-6,
            "{v}"
        );
        assert!(
            (c["share_latency_ms"]["p99"].as_f64().unwrap() - 40.0).abs() < 1e-6,
            "{v}"
        );
        assert_eq!(v["elapsed_s"], 12.0);

        let sd: Value = serde_json::from_str(body(&get(addr, "/sd"))).unwrap();
        assert_eq!(
            sd,
            json!([{"targets": ["127.0.0.1:4321"], "labels": {"config": "sv1", "role": "pool", "name": "sv1.pool"}}])
        );

        let page = get(addr, "/");
        assert!(page.contains("content-security-policy"), "{page}");
        assert!(body(&page).starts_with("<!doctype html>"));
        assert!(
            body(&page).contains("\"share_latency_ms\""),
            "the figures are embedded"
        );
        assert!(get(addr, "/nothing").starts_with("HTTP/1.0 404"));
    }
}
