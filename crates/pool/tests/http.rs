//! The HTTP status endpoints over real sockets: routes, status codes, the OpenMetrics text
//! checked line by line against the format's rules, the JSON answers against figures the test
//! recorded, paging, bad input, limits and shutdown.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use events::Reason;
use pool::http::{serve, HttpOptions, HttpState};
use pool::stats::{
    NodeStatus, NotServing, PoolStats, Serving, StoreReport, WorkerRegistry, HASHES_PER_SHARE,
};
use pool::Timestamp;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct Server {
    addr: SocketAddr,
    stats: Arc<PoolStats>,
    workers: Arc<WorkerRegistry>,
    clock: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start() -> Server {
        Server::start_with(HttpOptions::default()).await
    }

    async fn start_with(options: HttpOptions) -> Server {
        let stats = PoolStats::new(Timestamp::from_millis(1_000));
        let workers = WorkerRegistry::with_retention(&stats, 60_000);
        let clock = Arc::new(AtomicU64::new(1_000));
        let c = clock.clone();
        let state = HttpState {
            options,
            ..HttpState::new(
                stats.clone(),
                workers.clone(),
                Arc::new(move || Timestamp::from_millis(c.load(Ordering::SeqCst))),
            )
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, state, stopped));
        Server {
            addr,
            stats,
            workers,
            clock,
            stop: Some(stop),
            task,
        }
    }

    fn set_now(&self, ms: u64) {
        self.clock.store(ms, Ordering::SeqCst);
    }

    async fn get(&self, path: &str) -> Reply {
        self.send(&format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        ))
        .await
    }

    async fn send(&self, raw: &str) -> Reply {
        let mut s = TcpStream::connect(self.addr).await.expect("connect");
        s.write_all(raw.as_bytes()).await.expect("write");
        let mut buf = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
            .await
            .expect("answered in time")
            .expect("read");
        let reply = Reply::parse(&buf);
        if let (false, Some(len)) = (raw.starts_with("HEAD "), reply.header("content-length")) {
            assert_eq!(len.parse::<usize>().unwrap(), reply.body.len());
        }
        reply
    }

    async fn stop(mut self) {
        let _ = self.stop.take().expect("running").send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("stopped in time")
            .expect("task")
            .expect("serve");
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn parse(raw: &[u8]) -> Reply {
        let text = String::from_utf8(raw.to_vec()).expect("UTF-8 answer");
        let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
        let mut lines = head.split("\r\n");
        let status_line = lines.next().expect("status line");
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status code");
        let headers: Vec<(String, String)> = lines
            .map(|l| {
                let (k, v) = l.split_once(':').expect("header");
                (k.trim().to_ascii_lowercase(), v.trim().to_owned())
            })
            .collect();
        Reply {
            status,
            headers,
            body: body.to_owned(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        assert_eq!(self.header("content-type"), Some("application/json"));
        serde_json::from_str(&self.body).expect("JSON body")
    }
}

// ---------------------------------------------------------------------------------------------
// An OpenMetrics text checker: the format's rules (OpenMetrics 1.0, text format) as a test can
// hold them, returning every sample as "name{label="value",...}" (labels sorted) -> value.

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

fn valid_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parses `{a="x",b="y"}` (escapes \\ \" \n only), returning the labels.
fn parse_labels(s: &str) -> Vec<(String, String)> {
    let inner = s
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .expect("braces");
    let mut out = Vec::new();
    let mut rest = inner;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").expect("name=\"");
        assert!(valid_label_name(name), "label name {name:?}");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars.next().expect("closing quote");
            match c {
                '"' => break i,
                '\\' => match chars.next().expect("escape").1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    other => panic!("bad escape \\{other}"),
                },
                '\n' => panic!("raw newline in a label value"),
                c => value.push(c),
            }
        };
        assert!(
            !out.iter().any(|(n, _)| n == name),
            "label {name} given twice"
        );
        out.push((name.to_owned(), value));
        rest = &after[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
            assert!(!rest.is_empty(), "trailing comma");
        } else {
            assert!(rest.is_empty(), "junk after a label: {rest:?}");
        }
    }
    out
}

fn parse_value(s: &str) -> f64 {
    match s {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => s.parse().unwrap_or_else(|_| panic!("value {s:?}")),
    }
}

fn key(name: &str, labels: &[(String, String)]) -> String {
    let mut l = labels.to_vec();
    l.sort();
    let inner: Vec<String> = l.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", inner.join(","))
}

fn check_openmetrics(text: &str) -> BTreeMap<String, f64> {
    let body = text.strip_suffix("# EOF\n").expect("ends with # EOF");
    assert!(!body.contains("# EOF"), "one EOF, at the end");
    let mut samples = BTreeMap::new();
    let mut families: BTreeMap<String, Kind> = BTreeMap::new();
    let mut current: Option<(String, Kind)> = None;
    let mut seen_help = std::collections::HashSet::new();
    // Histogram series: (family, labels without le) -> [(le, cumulative)], plus count and sum.
    let mut buckets: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();

    for line in body.lines() {
        assert!(!line.is_empty(), "no blank lines");
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let what = parts.next().unwrap();
            let name = parts.next().expect("a name").to_owned();
            let rest = parts.next().expect("text");
            assert!(valid_metric_name(&name), "{name}");
            match what {
                "TYPE" => {
                    let kind = match rest {
                        "counter" => Kind::Counter,
                        "gauge" => Kind::Gauge,
                        "histogram" => Kind::Histogram,
                        other => panic!("type {other} not expected here"),
                    };
                    assert!(
                        families.insert(name.clone(), kind).is_none(),
                        "family {name} declared twice"
                    );
                    current = Some((name, kind));
                }
                "HELP" => {
                    assert!(seen_help.insert(name.clone()), "HELP of {name} twice");
                    assert!(!rest.trim().is_empty());
                    assert!(!families.contains_key(&name), "HELP before TYPE");
                }
                "UNIT" => {
                    let (fam, _) = current.as_ref().expect("UNIT after TYPE");
                    assert_eq!(fam, &name);
                    assert!(name.ends_with(&format!("_{rest}")), "{name} lacks _{rest}");
                }
                other => panic!("unknown descriptor {other}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample: name value");
        let value = parse_value(value);
        let (name, labels) = match series.find('{') {
            Some(i) => (&series[..i], parse_labels(&series[i..])),
            None => (series, Vec::new()),
        };
        let (family, kind) = current.as_ref().expect("a sample after its TYPE");
        let suffix = name
            .strip_prefix(family.as_str())
            .unwrap_or_else(|| panic!("sample {name} outside its family {family}"));
        match kind {
            Kind::Counter => {
                assert_eq!(suffix, "_total", "{name}");
                assert!(value >= 0.0 && value.is_finite(), "{name} = {value}");
            }
            Kind::Gauge => assert_eq!(suffix, "", "{name}"),
            Kind::Histogram => {
                let mut rest = labels.clone();
                let le = rest.iter().position(|(k, _)| k == "le");
                match suffix {
                    "_bucket" => {
                        let le = parse_value(&rest.remove(le.expect("le on a bucket")).1);
                        buckets
                            .entry(key(family, &rest))
                            .or_default()
                            .push((le, value));
                    }
                    "_count" => {
                        assert!(le.is_none());
                        counts.insert(key(family, &rest), value);
                    }
                    "_sum" => {
                        assert!(le.is_none());
                        sums.insert(key(family, &rest), value);
                    }
                    other => panic!("histogram sample suffix {other:?}"),
                }
            }
        }
        assert!(
            samples.insert(key(name, &labels), value).is_none(),
            "sample {name} {labels:?} twice"
        );
    }
    for (series, b) in &buckets {
        for pair in b.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{series}: le ascending");
            assert!(pair[0].1 <= pair[1].1, "{series}: cumulative counts");
        }
        let last = b.last().unwrap();
        assert_eq!(last.0, f64::INFINITY, "{series}: ends with +Inf");
        assert_eq!(
            Some(&last.1),
            counts.get(series),
            "{series}: +Inf bucket = count"
        );
        assert!(sums.contains_key(series), "{series}: has a sum");
    }
    samples
}

#[test]
fn the_checker_rejects_what_it_should() {
    for bad in [
        "# TYPE a counter\na 1\n# EOF\n",                       // counter without _total
        "# TYPE a gauge\na 1\n",                                  // no EOF
        "# TYPE a gauge\nb 1\n# EOF\n",                           // outside its family
        "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n# EOF\n",          // duplicate label
        "# TYPE a gauge\na{x=\"\\q\"} 1\n# EOF\n",                // bad escape
        "# TYPE a gauge\na one\n# EOF\n",                         // not a number
        "# TYPE a histogram\na_bucket{le=\"1\"} 2\na_bucket{le=\"+Inf\"} 1\na_count 1\na_sum 0\n# EOF\n",
        "# TYPE a gauge\na 1\n# TYPE a gauge\n# EOF\n",           // declared twice
    ] {
        assert!(
            std::panic::catch_unwind(|| check_openmetrics(bad)).is_err(),
            "accepted: {bad:?}"
        );
    }
    let good = "# HELP a_seconds h\n# TYPE a_seconds histogram\n# UNIT a_seconds seconds\n\
                a_seconds_sum 1.5\na_seconds_count 2\na_seconds_bucket{le=\"0.1\"} 1\n\
                a_seconds_bucket{le=\"+Inf\"} 2\n# TYPE b counter\nb_total{r=\"x\\\"y\"} 3\n# EOF\n";
    let s = check_openmetrics(good);
    assert_eq!(s["b_total{r=\"x\\\"y\"}"], 3.0);
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn metrics_are_openmetrics_text_with_the_recorded_figures() {
    let srv = Server::start().await;
    let st = &srv.stats;
    let w = srv.workers.attach("alice", Timestamp::from_millis(1_000));
    srv.workers.attach("bob", Timestamp::from_millis(1_000));
    st.connection_opened();
    st.connection_opened();
    for i in 0..3_000 {
        st.share_accepted(&w, 4.0, Timestamp::from_millis(1_000 + 100 * (i + 1)));
    }
    st.share_rejected(Some(&w), Reason::Stale, Timestamp::from_millis(301_000));
    st.share_rejected(Some(&w), Reason::Stale, Timestamp::from_millis(301_000));
    st.share_rejected(None, Reason::Unauthorized, Timestamp::from_millis(301_000));
    st.share_processing(150); // <= 200 ns
    st.share_processing(3_000); // <= 5 us
    st.share_processing(20_000_000); // above 10 ms
    st.vardiff_changed();
    st.job_created(true);
    st.job_created(false);
    st.block_found();
    st.block_result(true);
    st.set_node(NodeStatus::Ok {
        since: Timestamp::from_millis(2_000),
    });
    st.set_serving(Serving::Yes);
    st.store(StoreReport {
        commits: 12,
        records: 3_000,
        queue_len: 4,
        batch_window_ms: 25,
        last_commit_us: 800,
        failures: 2,
        failing_since: None,
    });
    srv.set_now(301_000);

    let r = srv.get("/metrics").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let m = check_openmetrics(&r.body);
    let p = "stratumlab_pool_";
    let get = |k: &str| -> f64 {
        *m.get(&format!("{p}{k}"))
            .unwrap_or_else(|| panic!("no {k} in\n{}", r.body))
    };
    assert_eq!(get("shares_total{result=\"accepted\"}"), 3_000.0);
    assert_eq!(
        get("shares_total{reason=\"stale\",result=\"rejected\"}"),
        2.0
    );
    assert_eq!(
        get("shares_total{reason=\"unauthorized\",result=\"rejected\"}"),
        1.0
    );
    for r in Reason::ALL {
        let k = format!(
            "shares_total{{reason={:?},result=\"rejected\"}}",
            r.as_str()
        );
        get(&k); // every reason is present, zeros included
    }
    assert_eq!(get("accepted_work_total{}"), 12_000.0);
    let want = 10.0 * 4.0 * HASHES_PER_SHARE;
    for window in ["1m", "10m"] {
        let h = get(&format!(
            "hashrate_hashes_per_second{{window=\"{window}\"}}"
        ));
        assert!((h - want).abs() / want < 0.005, "{window}: {h}");
    }
    assert_eq!(get("share_processing_seconds_count{}"), 3.0);
    assert_eq!(get("share_processing_seconds_bucket{le=\"1e-7\"}"), 0.0);
    assert_eq!(get("share_processing_seconds_bucket{le=\"2e-7\"}"), 1.0);
    assert_eq!(get("share_processing_seconds_bucket{le=\"0.000005\"}"), 2.0);
    assert_eq!(get("share_processing_seconds_bucket{le=\"0.01\"}"), 2.0);
    assert_eq!(get("share_processing_seconds_bucket{le=\"+Inf\"}"), 3.0);
    assert!((get("share_processing_seconds_sum{}") - 0.02000315).abs() < 1e-12);
    assert_eq!(get("connections{}"), 2.0);
    assert_eq!(get("connections_opened_total{}"), 2.0);
    assert_eq!(get("workers{}"), 2.0);
    assert_eq!(get("workers_listed{}"), 2.0);
    assert_eq!(get("vardiff_changes_total{}"), 1.0);
    assert_eq!(get("jobs_total{clean=\"true\"}"), 1.0);
    assert_eq!(get("jobs_total{clean=\"false\"}"), 1.0);
    assert_eq!(get("blocks_submitted_total{}"), 1.0);
    assert_eq!(get("blocks_accepted_total{}"), 1.0);
    assert_eq!(get("blocks_rejected_total{}"), 0.0);
    assert_eq!(get("node_state{state=\"ok\"}"), 1.0);
    assert_eq!(get("node_state{state=\"unreachable\"}"), 0.0);
    assert_eq!(get("node_state_duration_seconds{}"), 299.0);
    assert_eq!(get("serving{}"), 1.0);
    assert_eq!(get("not_serving{reason=\"node_unreachable\"}"), 0.0);
    assert_eq!(get("uptime_seconds{}"), 300.0);
    assert_eq!(get("store_commits_total{}"), 12.0);
    assert_eq!(get("store_queue_length{}"), 4.0);
    assert_eq!(get("store_batch_window_seconds{}"), 0.025);
    assert_eq!(get("dependency_up{dependency=\"node\"}"), 1.0);
    assert_eq!(get("dependency_up{dependency=\"store\"}"), 1.0);
    assert_eq!(get("dependency_failures_total{dependency=\"store\"}"), 2.0);
    assert_eq!(get("dependency_failures_total{dependency=\"node\"}"), 0.0);
    assert!(get("shares_per_second{}") > 9.0);

    // HEAD: the same head, no body.
    let head = srv
        .send("HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert!(
        head.header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap()
            > 1000
    );
    srv.stop().await;
}

#[tokio::test]
async fn metrics_are_well_formed_before_anything_happened() {
    let srv = Server::start().await;
    let r = srv.get("/metrics").await;
    let m = check_openmetrics(&r.body);
    assert_eq!(m["stratumlab_pool_shares_total{result=\"accepted\"}"], 0.0);
    assert_eq!(m["stratumlab_pool_node_state{state=\"unknown\"}"], 1.0);
    assert_eq!(
        m["stratumlab_pool_not_serving{reason=\"no_template_yet\"}"],
        1.0
    );
    assert!(
        !r.body.contains("store_"),
        "no store figures before it reports"
    );
    srv.stop().await;
}

#[tokio::test]
async fn status_reports_the_pool() {
    let srv = Server::start().await;
    let st = &srv.stats;
    let w = srv.workers.attach("alice", Timestamp::from_millis(1_000));
    let _w2 = srv.workers.attach("alice", Timestamp::from_millis(1_000));
    st.connection_opened();
    st.connection_opened();
    for i in 0..3_000 {
        st.share_accepted(&w, 4.0, Timestamp::from_millis(1_000 + 100 * (i + 1)));
    }
    st.share_rejected(Some(&w), Reason::Duplicate, Timestamp::from_millis(301_000));
    st.block_found();
    st.set_node(NodeStatus::Unreachable {
        since: Timestamp::from_millis(296_000),
    });
    st.set_serving(Serving::No(NotServing::NodeUnreachable));
    srv.set_now(301_000);

    let s = srv.get("/api/status").await;
    assert_eq!(s.status, 200);
    assert_eq!(s.header("cache-control"), Some("no-store"));
    let j = s.json();
    assert_eq!(j["uptime_s"], 300.0);
    assert_eq!(j["serving"], false);
    assert_eq!(j["not_serving_reason"], "node_unreachable");
    assert_eq!(j["node"]["state"], "unreachable");
    assert_eq!(j["node"]["for_s"], 5.0);
    let want = 10.0 * 4.0 * HASHES_PER_SHARE;
    for k in ["hashrate_1m", "hashrate_10m"] {
        let h = j[k].as_f64().unwrap();
        assert!((h - want).abs() / want < 0.005, "{k}: {h}");
    }
    assert!((j["shares_per_second"].as_f64().unwrap() - 10.0).abs() < 0.1);
    assert_eq!(j["workers"], 1);
    assert_eq!(j["connections"], 2);
    // This test runs on the system allocator, not the binary's jemalloc: no figures, rather
    // than jemalloc's own start-up allocations read as a heap.
    assert_eq!(j["memory"], serde_json::Value::Null, "{j}");
    assert_eq!(j["shares"]["accepted"], 3_000);
    assert_eq!(j["shares"]["rejected"], 1);
    assert_eq!(j["shares"]["rejected_by_reason"]["duplicate"], 1);
    assert_eq!(j["shares"]["rejected_by_reason"]["stale"], 0);
    assert_eq!(
        j["shares"]["rejected_by_reason"].as_object().unwrap().len(),
        7
    );
    assert_eq!(j["work"]["accepted"], 12_000.0);
    assert_eq!(j["blocks"]["submitted"], 1);
    assert_eq!(j["store"], Value::Null);
    srv.stop().await;
}

#[tokio::test]
async fn healthz_says_whether_the_pool_serves_work() {
    let srv = Server::start().await;
    let r = srv.get("/healthz").await;
    assert_eq!(r.status, 503);
    assert!(
        r.body.starts_with("not serving: no_template_yet"),
        "{}",
        r.body
    );

    srv.stats.set_node(NodeStatus::Ok {
        since: Timestamp::from_millis(1_000),
    });
    srv.stats.set_serving(Serving::Yes);
    let r = srv.get("/healthz").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
    // A found block not yet answered for still serves, and says so; its answer clears it.
    srv.stats.block_found();
    let r = srv.get("/healthz").await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "ok\nblocks pending: 1 (found, not yet answered for)\n")
    );
    srv.stats.block_fate(pool::stats::BlockFate::Accepted);
    let r = srv.get("/healthz").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));

    // The node goes quiet: the pool stops handing out work, and says why.
    srv.stats.set_node(NodeStatus::Unreachable {
        since: Timestamp::from_millis(2_000),
    });
    srv.stats
        .set_serving(Serving::No(NotServing::NodeUnreachable));
    srv.set_now(14_500);
    let r = srv.get("/healthz").await;
    assert_eq!(r.status, 503);
    assert_eq!(
        r.body,
        "not serving: node_unreachable (node unreachable for 12.5 s)\n"
    );

    srv.stats.set_node(NodeStatus::Stale {
        since: Timestamp::from_millis(14_000),
    });
    srv.stats
        .set_serving(Serving::No(NotServing::TemplatesStale));
    let r = srv.get("/healthz").await;
    assert_eq!(r.status, 503);
    assert!(r
        .body
        .starts_with("not serving: templates_stale (node stale"));
    srv.stop().await;
}

#[tokio::test]
async fn workers_are_paged_in_name_order() {
    let srv = Server::start().await;
    let mut names: Vec<String> = (0..250)
        .map(|i| format!("rig-{:03}", (i * 37) % 250))
        .collect();
    for n in &names {
        srv.workers.attach(n, Timestamp::from_millis(1_000));
    }
    names.sort();
    let odd = srv
        .workers
        .attach("odd name/\"quoted\"&more", Timestamp::from_millis(1_000));
    srv.stats
        .share_accepted(&odd, 2.0, Timestamp::from_millis(1_500));
    names.insert(0, "odd name/\"quoted\"&more".into());
    srv.set_now(3_000);

    // By offset.
    let mut got = Vec::new();
    let mut offset = 0;
    loop {
        let j = srv
            .get(&format!("/api/workers?offset={offset}&limit=100"))
            .await
            .json();
        assert_eq!(j["total"], 251);
        assert_eq!(j["limit"], 100);
        for w in j["workers"].as_array().unwrap() {
            got.push(w["name"].as_str().unwrap().to_owned());
        }
        match j["next_offset"].as_u64() {
            Some(n) => offset = n,
            None => break,
        }
    }
    assert_eq!(got, names);

    // By cursor, percent-encoded.
    let mut got = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let q = match &after {
            None => "/api/workers?limit=77".to_owned(),
            Some(a) => {
                let enc: String = form_urlencoded::byte_serialize(a.as_bytes()).collect();
                format!("/api/workers?limit=77&after={enc}")
            }
        };
        let j = srv.get(&q).await.json();
        for w in j["workers"].as_array().unwrap() {
            got.push(w["name"].as_str().unwrap().to_owned());
        }
        match j["next_after"].as_str() {
            Some(a) => after = Some(a.to_owned()),
            None => break,
        }
    }
    assert_eq!(got, names);

    // A worker's figures.
    let j = srv.get("/api/workers?limit=1").await.json();
    let w = &j["workers"][0];
    assert_eq!(w["name"], "odd name/\"quoted\"&more");
    assert_eq!(w["accepted"], 1);
    assert_eq!(w["accepted_work"], 2.0);
    assert_eq!(w["connections"], 1);
    assert_eq!(w["last_share_age_s"], 1.5);
    assert_eq!(w["listed_for_s"], 2.0);
    assert!(w["hashrate_1m"].as_f64().unwrap() > 0.0);

    // Defaults and the cap.
    let j = srv.get("/api/workers").await.json();
    assert_eq!(j["workers"].as_array().unwrap().len(), 100);
    assert_eq!(j["offset"], 0);
    let j = srv.get("/api/workers?limit=5000").await.json();
    assert_eq!(j["limit"], 1000);
    assert_eq!(j["workers"].as_array().unwrap().len(), 251);
    assert_eq!(j["next_offset"], Value::Null);

    // Bad parameters.
    for q in [
        "offset=-3",
        "limit=ten",
        "offset=1&after=x",
        "limit=1&limit=2",
        "sort=name",
    ] {
        let r = srv.get(&format!("/api/workers?{q}")).await;
        assert_eq!(r.status, 400, "{q}");
        let msg = r.json()["error"].as_str().unwrap().to_owned();
        assert!(!msg.is_empty(), "{q}");
    }
    srv.stop().await;
}

#[tokio::test]
async fn disconnected_workers_leave_the_list_after_retention() {
    let srv = Server::start().await; // retention 60 s
    let w = srv.workers.attach("gone", Timestamp::from_millis(1_000));
    srv.workers.attach("stays", Timestamp::from_millis(1_000));
    srv.workers.detach(&w, Timestamp::from_millis(2_000));
    srv.set_now(61_999);
    assert_eq!(srv.get("/api/workers").await.json()["total"], 2);
    srv.set_now(62_000);
    let j = srv.get("/api/workers").await.json();
    assert_eq!(j["total"], 1);
    assert_eq!(j["workers"][0]["name"], "stays");
    srv.stop().await;
}

#[tokio::test]
async fn unknown_paths_wrong_methods_and_oversized_heads() {
    let srv = Server::start().await;
    // `/` is the page for a person (drawn from the same figures), nothing else is.
    let page = srv.get("/").await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(page
        .header("content-security-policy")
        .is_some_and(|p| p.contains("default-src 'none'")));
    for path in [
        "/metrics/",
        "/api",
        "/api/worker",
        "/healthz/x",
        "/favicon.ico",
    ] {
        assert_eq!(srv.get(path).await.status, 404, "{path}");
    }
    for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let r = srv
            .send(&format!(
                "{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ))
            .await;
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
    }
    // A head over 8 KiB: 431, and the server stays up.
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(16 * 1024)
    );
    assert_eq!(srv.send(&big).await.status, 431);
    // A long query is just another bad or good query.
    let r = srv
        .get(&format!("/api/workers?after={}", "z".repeat(4000)))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(srv.get("/healthz").await.status, 503);
    srv.stop().await;
}

#[tokio::test]
async fn keep_alive_serves_several_requests_on_one_connection() {
    let srv = Server::start().await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /api/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(buf).unwrap();
    assert_eq!(text.matches("HTTP/1.1 ").count(), 2, "{text}");
    assert!(text.starts_with("HTTP/1.1 503"));
    assert!(text.contains("HTTP/1.1 200"));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_clients_do_not_hold_up_others() {
    let options = HttpOptions {
        serving: status::ServeOptions {
            max_connections: 8,
            request_timeout: Duration::from_millis(300),
            ..status::ServeOptions::default()
        },
        ..HttpOptions::default()
    };
    let srv = Server::start_with(options).await;
    // Eight clients take every slot and never finish their request.
    let mut stalled = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost:")
            .await
            .unwrap();
        stalled.push(s);
    }
    // Others wait in the backlog until the request timeout frees the slots, then get served.
    let started = std::time::Instant::now();
    let clients: Vec<_> = (0..20)
        .map(|_| {
            let addr = srv.addr;
            tokio::spawn(async move {
                let mut s = TcpStream::connect(addr).await.unwrap();
                s.write_all(b"GET /api/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .await
                    .unwrap();
                let mut buf = Vec::new();
                s.read_to_end(&mut buf).await.unwrap();
                Reply::parse(&buf).status
            })
        })
        .collect();
    for c in clients {
        let status = tokio::time::timeout(Duration::from_secs(10), c)
            .await
            .expect("served in time")
            .unwrap();
        assert_eq!(status, 200);
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // The stalled ones were closed.
    for mut s in stalled {
        let mut buf = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
            .await
            .expect("closed by the server");
        let _ = n;
    }
    srv.stop().await;
}

#[tokio::test]
async fn shutdown_stops_accepting_and_returns() {
    let srv = Server::start().await;
    let addr = srv.addr;
    assert_eq!(srv.get("/healthz").await.status, 503);
    srv.stop().await;
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
}

/// The connection edge's counts reach `/metrics` and `/api/status` as the gate kept them.
#[tokio::test]
async fn admission_counts_are_in_metrics_and_status() {
    use std::net::{IpAddr, Ipv4Addr};
    let srv = Server::start().await;
    let gate = edge::Gate::new(edge::Admission {
        max_connections: 3,
        max_connections_per_ip: 2,
        ..edge::Admission::default()
    });
    srv.stats.set_gate(gate.clone());
    let ip = |n: u8| IpAddr::V4(Ipv4Addr::new(127, 0, 0, n));
    let t = Timestamp::from_millis(1_000);
    let a = gate.admit(ip(1), t).unwrap();
    let _b = gate.admit(ip(1), t).unwrap();
    assert!(gate.admit(ip(1), t).is_err(), "per-address cap");
    let _c = gate.admit(ip(2), t).unwrap();
    assert!(gate.admit(ip(3), t).is_err(), "total cap");
    a.close("idle timeout");
    gate.ban(ip(4), t, edge::BanReason::InvalidShares);
    assert!(gate.admit(ip(4), t).is_err(), "banned");
    // The allowance of new names is the per-address cap at once: the third is refused.
    let named = (0..3).filter(|_| gate.new_worker(ip(5), t)).count();
    assert_eq!(named, 2);

    let r = srv.get("/metrics").await;
    let m = check_openmetrics(&r.body);
    let get = |k: &str| -> f64 {
        *m.get(&format!("stratumlab_pool_{k}"))
            .unwrap_or_else(|| panic!("no {k} in\n{}", r.body))
    };
    assert_eq!(
        get("admission_refused_total{reason=\"max_connections_per_ip\"}"),
        1.0
    );
    assert_eq!(
        get("admission_refused_total{reason=\"max_connections\"}"),
        1.0
    );
    assert_eq!(get("admission_refused_total{reason=\"banned\"}"), 1.0);
    assert_eq!(get("admission_refused_total{reason=\"connect_rate\"}"), 0.0);
    assert_eq!(get("admission_closed_total{reason=\"idle timeout\"}"), 1.0);
    assert_eq!(get("admission_bans_total{reason=\"invalid_shares\"}"), 1.0);
    assert_eq!(get("admission_bans_active{}"), 1.0);
    assert_eq!(get("admission_workers_refused_total{}"), 1.0);

    let s = srv.get("/api/status").await;
    let v: Value = serde_json::from_str(&s.body).unwrap();
    let a = &v["admission"];
    assert_eq!(a["connections"], 2, "{a}");
    assert_eq!(a["refused"]["max_connections"], 1);
    assert_eq!(a["closed"]["idle timeout"], 1);
    assert_eq!(a["bans"]["invalid_shares"], 1);
    assert_eq!(a["bans_active"], 1);
    assert_eq!(a["workers_refused"], 1);
}
