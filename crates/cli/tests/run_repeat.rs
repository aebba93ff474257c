//! `stratumlab run --repeat 2` end to end: each trial runs in its own directory with its own
//! seed, results.json lists the trials in the top level's shape, and the top level aggregates
//! them (counts add). And two runs compared with `stratumlab report --compare`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const SEED: u64 = 41;

fn run_twice(out: &Path) -> Value {
    run_with(out, 2, SEED)
}

/// A short run of sv1 with `repeat` trials from `seed`; its results.json.
fn run_with(out: &Path, repeat: u32, seed: u64) -> Value {
    let scenario = out.with_extension("toml");
    std::fs::write(
        &scenario,
        "name = \"repeat\"\nconfigs = [\"sv1\"]\nshares_per_minute = 60\ndrain = \"2s\"\n",
    )
    .unwrap();
    let (seed, repeat) = (seed.to_string(), repeat.to_string());
    let done = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .arg("run")
        .arg("--scenario")
        .arg(&scenario)
        .args(["--repeat", &repeat, "--seed", &seed, "--duration", "8s"])
        .args(["--devices", "4", "--block-interval", "10s"])
        .args(["--hash-budget", "200kH/s", "--blocks-per-config", "2"])
        .arg("--out")
        .arg(out)
        .output()
        .expect("running stratumlab run");
    let text =
        String::from_utf8_lossy(&done.stderr).into_owned() + &String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{text}");
    serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap()
}

/// The keys of an object, sorted.
fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect();
    k.sort();
    k
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The first template of a trial's network: its fees and transaction count. The initial
/// mempool comes from the seed alone, so trials with the same seed would have the same.
fn first_template(trial_dir: &Path) -> (u64, u32) {
    let log = events::read_file(trial_dir.join("events").join("simnet.events")).unwrap();
    log.events
        .iter()
        .find_map(|e| match &e.kind {
            events::EventKind::TemplateCreated(t) => Some((t.fees_sats, t.tx_count)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no template in {}", trial_dir.display()))
}

#[test]
fn two_trials_are_listed_and_aggregated() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let r = run_twice(&out);

    assert_eq!(r["context"]["repeat"], 2, "{}", r["context"]);
    let trials = r["trials"].as_array().expect("a trials list");
    assert_eq!(trials.len(), 2);
    let top = &r["configs"]["sv1"];
    for (k, t) in trials.iter().enumerate() {
        assert_eq!(u(&t["trial"]), k as u64 + 1);
        assert_eq!(keys(&t["configs"]), keys(&r["configs"]));
        let c = &t["configs"]["sv1"];
        // The same figures as the top level, down to the shares' and roles' fields.
        assert_eq!(keys(c), keys(top), "trial {}", k + 1);
        assert_eq!(keys(&c["shares"]), keys(&top["shares"]));
        assert_eq!(keys(&c["roles"]), keys(&top["roles"]));
        assert!(u(&c["shares"]["submitted"]) > 0, "trial {}: {c}", k + 1);
    }

    // Counts add up across trials.
    let sum = |f: &dyn Fn(&Value) -> &Value| -> u64 {
        trials.iter().map(|t| u(f(&t["configs"]["sv1"]))).sum()
    };
    for field in ["submitted", "accepted", "stale", "rejected", "unanswered"] {
        assert_eq!(
            u(&top["shares"][field]),
            sum(&|c| &c["shares"][field]),
            "shares.{field}"
        );
    }
    assert_eq!(
        u(&top["templates"]["created"]),
        sum(&|c| &c["templates"]["created"])
    );
    assert_eq!(u(&top["blocks"]["found"]), sum(&|c| &c["blocks"]["found"]));
    assert_eq!(
        u(&top["share_latency_ms"]["n"]),
        sum(&|c| &c["share_latency_ms"]["n"]),
        "samples pool"
    );
    for dir in ["tx_bytes", "rx_bytes"] {
        assert_eq!(
            u(&top["bandwidth"]["farm"][dir]),
            sum(&|c| &c["bandwidth"]["farm"][dir]),
            "bandwidth.farm.{dir}"
        );
    }
    assert_eq!(
        u(&top["roles"]["sv1.pool"]["net_tx_bytes"]),
        sum(&|c| &c["roles"]["sv1.pool"]["net_tx_bytes"])
    );

    // Each trial ran in its own directory, on its own seed (the run's, then the next).
    let firsts: Vec<(u64, u32)> = (1..=2)
        .map(|k| first_template(&out.join(format!("trial-{k}"))))
        .collect();
    assert_ne!(firsts[0], firsts[1], "both trials drew the same mempool");
    assert!(out.join("report.html").is_file());
}

/// Two real runs on different seeds, compared: every key figure of sv1 in both, a difference
/// and a verdict for each, the seed listed as what else differs; and a run measured at another
/// round trip is refused with the reason.
#[test]
fn two_runs_are_compared_figure_by_figure() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    run_with(&a, 1, SEED);
    run_with(&b, 1, SEED + 1);
    let compare = |a: &Path, b: &Path| {
        Command::new(env!("CARGO_BIN_EXE_stratumlab"))
            .args(["report", "--compare"])
            .arg(a)
            .arg(b)
            .output()
            .expect("running stratumlab report --compare")
    };
    let done = compare(&a, &b);
    let text =
        String::from_utf8_lossy(&done.stdout).into_owned() + &String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{text}");
    assert!(text.contains("comparison.html"), "{text}");
    let c: Value =
        serde_json::from_str(&std::fs::read_to_string(b.join("comparison.json")).unwrap()).unwrap();
    assert_eq!(c["differs"]["seed"]["a"], SEED, "{}", c["differs"]);
    let sv1 = &c["configs"]["sv1"];
    for figure in ["time_to_job_ms", "bandwidth_farm", "pool_cpu"] {
        let f = &sv1[figure];
        let (fa, fb) = (f["a"]["value"].as_f64(), f["b"]["value"].as_f64());
        assert!(fa.is_some() && fb.is_some(), "{figure}: {f}");
        assert!((f["diff"].as_f64().unwrap() - (fb.unwrap() - fa.unwrap())).abs() < 1e-6);
        assert!(
            ["better", "worse", "no difference"].contains(&f["verdict"].as_str().unwrap()),
            "{figure}: {f}"
        );
    }
    // Time to job has intervals in both runs, so its difference has one too.
    assert!(
        sv1["time_to_job_ms"]["diff_ci95"].is_array(),
        "{}",
        sv1["time_to_job_ms"]
    );
    let html = std::fs::read_to_string(b.join("comparison.html")).unwrap();
    assert!(html.contains("data-figure=\"time_to_job_ms\""));

    // Another round trip: refused, nothing written.
    let mut r: Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("results.json")).unwrap()).unwrap();
    r["context"]["rtt_ms"] = serde_json::json!(20.0);
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("results.json"), r.to_string()).unwrap();
    let done = compare(&a, &other);
    let text = String::from_utf8_lossy(&done.stderr);
    assert!(!done.status.success());
    assert!(
        text.contains("different conditions") && text.contains("rtt_ms"),
        "{text}"
    );
    assert!(!other.join("comparison.html").exists());
}

/// `--sweep rtt=20ms,120ms` for real: a point directory per value, each a whole run at its
/// round trip; one results.json with the sweep and no top-level configs; a CSV per key figure;
/// and a report whose findings are curves. sv1's shares cross the WAN, so its share latency
/// grows with the round trip (its time to new job is too noisy in an 8 s run to tell).
#[test]
fn a_sweep_runs_every_value_and_reports_curves() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let scenario = out.with_extension("toml");
    std::fs::write(
        &scenario,
        "name = \"sweep\"\nconfigs = [\"sv1\"]\nshares_per_minute = 60\ndrain = \"2s\"\n",
    )
    .unwrap();
    let done = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .arg("run")
        .arg("--scenario")
        .arg(&scenario)
        .args([
            "--sweep",
            "rtt=20ms,120ms",
            "--seed",
            "7",
            "--duration",
            "8s",
        ])
        .args(["--devices", "4", "--block-interval", "10s"])
        .args(["--hash-budget", "200kH/s", "--blocks-per-config", "2"])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("running stratumlab run --sweep");
    let text =
        String::from_utf8_lossy(&done.stderr).into_owned() + &String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{text}");
    assert!(
        text.contains("mean time to new job (ms) against rtt"),
        "{text}"
    );

    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert!(
        r.get("configs").is_none(),
        "a sweep has no top-level configs"
    );
    assert_eq!(r["sweep"]["parameter"], "rtt");
    assert_eq!(r["sweep"]["values"], serde_json::json!(["20ms", "120ms"]));
    let points = r["sweep"]["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    let mut latency = Vec::new();
    for (p, rtt) in points.iter().zip([20.0, 120.0]) {
        let point_dir = out.join(p["dir"].as_str().unwrap());
        let own: Value =
            serde_json::from_str(&std::fs::read_to_string(point_dir.join("results.json")).unwrap())
                .unwrap();
        assert_eq!(own["context"]["rtt_ms"], rtt, "{}", own["context"]);
        assert_eq!(own["context"]["seed"], 7);
        assert!(point_dir.join("report.html").is_file());
        // The sweep holds each point's figures as the point wrote them.
        assert_eq!(p["configs"]["sv1"], own["configs"]["sv1"]);
        latency.push(
            p["configs"]["sv1"]["share_latency_ms"]["mean"]
                .as_f64()
                .unwrap(),
        );
    }
    assert!(
        latency[1] > latency[0] + 50.0,
        "share latency at 120 ms ({:.1} ms) not 50 ms above 20 ms's ({:.1} ms)",
        latency[1],
        latency[0]
    );
    let csv = std::fs::read_to_string(out.join("sweep_time_to_job_ms.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], "value,sv1,sv1_lo,sv1_hi");
    assert_eq!(rows.len(), 3, "{csv}");
    assert!(rows[2].starts_with("120ms,"), "{csv}");

    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("data-chart=\"sweep-time_to_job_ms\""));
    assert!(html.contains("href=\"rtt-120ms/report.html\""));
    // `stratumlab report DIR` renders a sweep directory again.
    let again = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args(["report", "--no-pdf"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}
