//! The Grafana dashboards in deploy/grafana against a real Prometheus scraping a real lab run:
//! every panel's query and every template variable's query must parse and return data. A metric
//! renamed in a role, a label the dashboards expect and the scrape configuration does not give,
//! or a role the lab's discovery does not list all show up here as a query with no data, named
//! by dashboard and panel.
//!
//! Prometheus runs with deploy/prometheus.yml itself, its lab address pointed at this run, so
//! that the job names and labels the dashboards rely on are the ones that ship. Debian's
//! `prometheus` package provides it; without it the test skips itself.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lab::process::RoleProcess;

use serde_json::Value;

const PROMETHEUS: &str = "/usr/bin/prometheus";
const PROMTOOL: &str = "/usr/bin/promtool";

/// The dashboards; each must be in deploy/grafana.
const DASHBOARDS: [&str; 4] = [
    "pool.json",
    "farm-proxies.json",
    "jdc-jds.json",
    "lab-run.json",
];

/// The addresses deploy/prometheus.yml scrapes: the lab's (its metrics and its discovery) and a
/// pool run on its own.
const SHIPPED_LAB: &str = "127.0.0.1:9464";
const SHIPPED_POOL: &str = "127.0.0.1:9465";

/// What Grafana's interval variables become here: long enough for two scrapes at 1 s, short
/// enough that the rates see the run rather than its start.
const INTERVAL: &str = "30s";

/// Into the measured run this far before the queries: every rate window holds samples, and
/// the roles have answered shares and sent jobs.
const MEASURED_BEFORE_QUERIES: f64 = 20.0;

/// Every role kind the dashboards show, as the lab's discovery labels it.
const ROLES: [&str; 5] = ["pool", "translator", "proxy", "jdc", "jds"];

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// One query to check, and where it comes from.
struct Query {
    dashboard: &'static str,
    /// The panel's title and the target's refId, or the template variable's name.
    place: String,
    /// As written in the dashboard.
    written: String,
    /// What Prometheus evaluates: variables substituted.
    promql: String,
    /// A template variable's `label_values(..., LABEL)`: the label every series must carry.
    label: Option<String>,
}

#[test]
fn every_dashboard_query_returns_data_from_a_real_lab_run() {
    if !Path::new(PROMETHEUS).exists() || !Path::new(PROMTOOL).exists() {
        eprintln!(
            "SKIPPED: no Prometheus ({PROMETHEUS} and {PROMTOOL}); `apt-get install prometheus` to run this test"
        );
        return;
    }
    let started = Instant::now();
    promtool_check(&deploy().join("prometheus.yml"));
    // A dashboard added to the folder is checked too, or the test says it is not.
    let mut shipped: Vec<String> = std::fs::read_dir(deploy().join("grafana"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    shipped.sort();
    let mut checked: Vec<&str> = DASHBOARDS.to_vec();
    checked.sort();
    assert_eq!(
        shipped, checked,
        "deploy/grafana's dashboards and the ones checked here"
    );
    // Before anything starts: a dashboard that does not load needs no lab run to show it.
    let queries: Vec<Query> = DASHBOARDS.iter().copied().flat_map(queries_of).collect();
    provisioned_datasource_is_the_dashboards();

    let dir = tempfile::tempdir().unwrap();
    let lab = start_lab(dir.path());
    // `metrics listening on ADDR`, possibly followed by more words.
    let lab_addr = lab
        .line("metrics listening on ", Duration::from_secs(60))
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();

    let config = std::fs::read_to_string(deploy().join("prometheus.yml"))
        .unwrap()
        .replace(SHIPPED_LAB, &lab_addr)
        // Nothing listens there: the job stays, down, as it is during a lab run.
        .replace(SHIPPED_POOL, &format!("127.0.0.1:{}", free_port()));
    let config_path = dir.path().join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    promtool_check(&config_path);
    let prom_addr = format!("127.0.0.1:{}", free_port());
    let prometheus = Process::start(
        "prometheus",
        Path::new(PROMETHEUS),
        &[
            format!("--config.file={}", config_path.display()).into(),
            format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()).into(),
            format!("--web.listen-address={prom_addr}").into(),
        ],
        &dir.path().join("prometheus.log"),
    );
    let logs = || format!("{}\n{}", lab.log_tail(), prometheus.log_tail());
    let prom = Prometheus(prom_addr);

    let deadline = Instant::now() + Duration::from_secs(120);
    wait("Prometheus to answer", deadline, &logs, || {
        matches!(http_get(&prom.0, "/-/ready"), Ok((200, _)))
    });
    wait(
        &format!("Prometheus to have scraped {MEASURED_BEFORE_QUERIES} s of the run"),
        deadline,
        &logs,
        || {
            prom.vector("max(stratumlab_run_elapsed_seconds)")
                .ok()
                .and_then(|v| v.first().map(value))
                .is_some_and(|elapsed| elapsed >= MEASURED_BEFORE_QUERIES)
        },
    );
    let discovery = discovered_roles(&lab_addr);
    if let Ok(targets) = &discovery {
        wait(
            "Prometheus to scrape every role the lab lists",
            deadline,
            &logs,
            || {
                prom.vector(r#"up{job="stratumlab-run-roles"} == 1"#)
                    .is_ok_and(|up| up.len() >= targets.len())
            },
        );
        // Two scrapes of the last role found, so that its rates have a value.
        std::thread::sleep(Duration::from_secs(3));
    }

    let mut failures = Vec::new();
    if let Err(why) = &discovery {
        failures.push(format!(
            "the lab's discovery: {why} (the role dashboards read the roles it lists)"
        ));
    }
    for q in &queries {
        match prom.vector(&q.promql) {
            Err(why) => failures.push(format!("{}: {why}", q.describe())),
            Ok(series) if series.is_empty() => {
                failures.push(format!("{}: no data", q.describe()));
            }
            Ok(series) => {
                if let Some(label) = &q.label {
                    if series.iter().any(|s| s["metric"][label].as_str().is_none()) {
                        failures.push(format!("{}: a value without `{label}`", q.describe()));
                    }
                }
                let nan = series.iter().filter(|s| value(s).is_nan()).count();
                eprintln!(
                    "ok: {} series{}: {} {}",
                    series.len(),
                    if nan > 0 {
                        format!(" ({nan} NaN: no observation in the window)")
                    } else {
                        String::new()
                    },
                    q.dashboard,
                    q.place
                );
            }
        }
    }
    drop(lab);
    drop(prometheus);
    eprintln!("{} queries in {:.0?}", queries.len(), started.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {} dashboard queries failed:\n{}",
        failures.len(),
        queries.len(),
        failures.join("\n")
    );
}

impl Query {
    fn describe(&self) -> String {
        format!("{} / {}: {}", self.dashboard, self.place, self.written)
    }
}

/// A short lab run whose configurations start every role the dashboards show: sv1-proxied (an
/// SV1 pool behind `stratumlab proxy`) and A (an SV2 pool, its JDS, and per device chunk a
/// translator in front of a JDC). Its duration leaves the run going while the queries are
/// evaluated; the test stops it then.
fn start_lab(dir: &Path) -> Process {
    let scenario = dir.join("dashboards.toml");
    // A share per second per device, as the lab's other tests ask: every share family moves
    // within the rate window.
    std::fs::write(
        &scenario,
        "name = \"dashboards\"\nconfigs = [\"sv1-proxied\", \"A\"]\nshares_per_minute = 60\n",
    )
    .unwrap();
    let args: Vec<OsString> = ["run", "--scenario"]
        .into_iter()
        .map(OsString::from)
        .chain([scenario.into_os_string()])
        .chain(
            [
                "--duration",
                "45s",
                "--devices",
                "8",
                "--hash-budget",
                "200kH/s",
                "--blocks-per-config",
                "1",
                "--block-interval",
                "10s",
                "--metrics-listen",
                "127.0.0.1:0",
                "--out",
            ]
            .map(OsString::from),
        )
        .chain([dir.join("results").into_os_string()])
        .collect();
    Process::start(
        "stratumlab run",
        Path::new(env!("CARGO_BIN_EXE_stratumlab")),
        &args,
        &dir.join("lab.log"),
    )
}

/// The roles the lab's `GET /sd` lists (Prometheus HTTP service discovery), after checking that
/// it lists every kind the dashboards show, each with its configuration.
fn discovered_roles(lab: &str) -> Result<Vec<Value>, String> {
    let (code, body) = http_get(lab, "/sd").map_err(|e| format!("GET /sd: {e}"))?;
    if code != 200 {
        return Err(format!("GET /sd answered {code}"));
    }
    let groups: Vec<Value> =
        serde_json::from_str(&body).map_err(|e| format!("GET /sd: {e}: {body}"))?;
    let mut targets = Vec::new();
    for g in &groups {
        let role = g["labels"]["role"].as_str().unwrap_or_default();
        if !ROLES.contains(&role) || g["labels"]["config"].as_str().is_none() {
            return Err(format!("a group without a known role and a config: {g}"));
        }
        targets.extend(g["targets"].as_array().into_iter().flatten().cloned());
    }
    let missing: Vec<&str> = ROLES
        .iter()
        .filter(|r| !groups.iter().any(|g| g["labels"]["role"] == **r))
        .copied()
        .collect();
    if !missing.is_empty() {
        return Err(format!("no {} listed: {body}", missing.join(", ")));
    }
    Ok(targets)
}

/// Every panel target's expression and every template variable's query of one dashboard,
/// after checking that it names the provisioned data source and no other.
fn queries_of(dashboard: &'static str) -> Vec<Query> {
    let path = deploy().join("grafana").join(dashboard);
    let text = std::fs::read_to_string(&path).unwrap();
    let board: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // An exported dashboard's `${DS_PROMETHEUS}` input would make Grafana ask for a data
    // source at import instead of loading from provisioning.
    assert!(
        !text.contains("DS_PROMETHEUS") && board.get("__inputs").is_none(),
        "{dashboard}: data source inputs instead of the provisioned uid"
    );
    assert!(board["uid"].as_str().is_some(), "{dashboard}: no uid");

    // What Grafana puts in place of each variable when "All" is chosen.
    let mut vars: BTreeMap<String, String> = ["__rate_interval", "__interval", "__range"]
        .map(|v| (v.to_owned(), INTERVAL.to_owned()))
        .into();
    let templating = board["templating"]["list"].as_array().cloned();
    for v in templating.iter().flatten() {
        let all = v["allValue"].as_str().unwrap_or(".*");
        vars.insert(v["name"].as_str().unwrap().to_owned(), all.to_owned());
    }

    let mut out = Vec::new();
    for v in templating.iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        check_datasource(
            dashboard,
            &format!("variable {}", v["name"]),
            &v["datasource"],
        );
        let written = v["query"]["query"]
            .as_str()
            .or(v["query"].as_str())
            .unwrap_or_else(|| panic!("{dashboard}: variable {} has no query", v["name"]))
            .to_owned();
        let (expr, label) = label_values(&written).unwrap_or_else(|| {
            panic!(
                "{dashboard}: variable {}: only label_values(EXPR, LABEL) is checked: {written}",
                v["name"]
            )
        });
        out.push(Query {
            dashboard,
            place: format!("variable ${}", v["name"].as_str().unwrap()),
            promql: format!(
                "count by ({label}) ({})",
                substitute(dashboard, expr, &vars)
            ),
            label: Some(label.to_owned()),
            written,
        });
    }
    let mut panels = Vec::new();
    collect_panels(&board["panels"], &mut panels);
    assert!(!panels.is_empty(), "{dashboard}: no panels");
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        if panel["type"] != "row" {
            assert!(
                !targets.is_empty(),
                "{dashboard}: panel {title:?} has no query"
            );
            check_datasource(dashboard, title, &panel["datasource"]);
        }
        for t in targets {
            check_datasource(dashboard, title, &t["datasource"]);
            let written = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{dashboard}: panel {title:?}: a target without expr"))
                .to_owned();
            out.push(Query {
                dashboard,
                place: format!(
                    "panel {} {title:?} target {}",
                    panel["id"],
                    t["refId"].as_str().unwrap_or("?")
                ),
                promql: substitute(dashboard, &written, &vars),
                label: None,
                written,
            });
        }
    }
    out
}

/// Panels, rows' panels included, depth first.
fn collect_panels(panels: &Value, out: &mut Vec<Value>) {
    for p in panels.as_array().into_iter().flatten() {
        out.push(p.clone());
        collect_panels(&p["panels"], out);
    }
}

fn check_datasource(dashboard: &str, place: &str, ds: &Value) {
    assert!(
        ds["uid"] == "prometheus" && ds["type"] == "prometheus",
        "{dashboard}: {place}: data source {ds}, not the provisioned Prometheus (uid prometheus)"
    );
}

/// The provisioned data source has the uid the dashboards name.
fn provisioned_datasource_is_the_dashboards() {
    let path = deploy().join("grafana/provisioning/datasources/prometheus.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.lines().any(|l| l.trim() == "uid: prometheus"),
        "{}: no `uid: prometheus`",
        path.display()
    );
}

/// `label_values(EXPR, LABEL)` as `(EXPR, LABEL)`.
fn label_values(query: &str) -> Option<(&str, &str)> {
    let inner = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    let (expr, label) = inner.rsplit_once(',')?;
    Some((expr.trim(), label.trim()))
}

/// Grafana's variables (`$name`, `${name}`, `${name:format}`) replaced by what they stand for;
/// a variable the dashboard does not define is an error in the dashboard.
fn substitute(dashboard: &str, expr: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, len) = match after.strip_prefix('{') {
            Some(braced) => {
                let end = braced
                    .find('}')
                    .unwrap_or_else(|| panic!("{dashboard}: unclosed ${{ in {expr}"));
                let name = braced[..end].split(':').next().unwrap();
                (name, end + 2)
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        let value = vars
            .get(name)
            .unwrap_or_else(|| panic!("{dashboard}: undefined variable ${name} in {expr}"));
        out.push_str(value);
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// The HTTP API of the Prometheus under test.
struct Prometheus(String);

impl Prometheus {
    /// An instant query's series (a scalar counts as one), or why it failed.
    fn vector(&self, promql: &str) -> Result<Vec<Value>, String> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let (code, body) = http_get(&self.0, &path).map_err(|e| e.to_string())?;
        let answer: Value =
            serde_json::from_str(&body).map_err(|e| format!("HTTP {code}: {e}: {body}"))?;
        if answer["status"] != "success" {
            return Err(format!(
                "{}: {}",
                answer["errorType"].as_str().unwrap_or("error"),
                answer["error"].as_str().unwrap_or(&body)
            ));
        }
        let data = &answer["data"];
        match data["resultType"].as_str() {
            Some("vector") => Ok(data["result"].as_array().cloned().unwrap_or_default()),
            Some("scalar") => Ok(vec![
                serde_json::json!({ "metric": {}, "value": data["result"] }),
            ]),
            other => Err(format!("result type {other:?}")),
        }
    }
}

/// A series' value (`"NaN"` and `"+Inf"` included).
fn value(series: &Value) -> f64 {
    series["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One GET over HTTP/1.0, so that the answer is never chunked: its status code and body.
fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text}")))?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((code, body.to_owned()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait(what: &str, deadline: Instant, logs: &dyn Fn() -> String, mut done: impl FnMut() -> bool) {
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn promtool_check(config: &Path) {
    let out = Command::new(PROMTOOL)
        .args(["check", "config"])
        .arg(config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool check config {}:\n{}{}",
        config.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A child process run by the lab's process harness, stopped when dropped, a failing
/// assertion included: SIGTERM (the lab stops its roles on it), then SIGKILL if it is still
/// there after a while.
struct Process {
    name: &'static str,
    process: RoleProcess,
}

impl Process {
    /// Starts `program args` with its stderr in `log` and its stdout read line by line.
    fn start(name: &'static str, program: &Path, args: &[OsString], log: &Path) -> Process {
        let process = RoleProcess::spawn(name, program, args, log)
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Process { name, process }
    }

    /// The rest of the first stdout line starting with `prefix`.
    fn line(&self, prefix: &str, limit: Duration) -> String {
        self.process
            .line(prefix, limit)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The end of its log.
    fn log_tail(&self) -> String {
        format!(
            "--- {} ({})\n{}",
            self.name,
            self.process.log_path().display(),
            self.process.log_tail(30)
        )
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_tail());
        }
        self.process.stop(Duration::from_secs(20));
    }
}
