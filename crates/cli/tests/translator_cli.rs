//! `stratumlab translator` end to end: simnet's Template Provider, our SV2 pool, the translator
//! in front of it, and SV1 devices from `stratumlab fleet` mining through it.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{
    dump_events, fleet_thread, http_get, http_get_json, link_bytes, status_when, status_within,
    stored_share_hashes, sv2_pool_on_simnet, Role, Roles, Sv2Pool,
};

/// Every line of an OpenMetrics text is a comment or `name{labels} value`; returns the samples.
fn parse_metrics(text: &str) -> std::collections::HashMap<String, f64> {
    assert!(text.ends_with("# EOF\n"), "{text}");
    let mut samples = std::collections::HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a sample: {line:?}"));
        let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name: {line:?}"
        );
        assert!(labels.ends_with('}'), "bad labels: {line:?}");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line:?}"));
        samples.insert(series.to_owned(), value);
    }
    samples
}

#[test]
fn sv1_devices_mine_through_the_translator_into_the_sv2_pool() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("translator.ev");
    let pool_events = dir.path().join("pool.ev");
    let mut roles = Roles::default();
    let pool = sv2_pool_on_simnet(&mut roles, dir.path(), Some(&pool_events));
    let Sv2Pool { sv2, http, .. } = &pool;

    let (_, sv1, t_http) =
        pool.fleet_translator(&mut roles, &["--events", events.to_str().unwrap()]);

    // The pool asks the translator for 15 shares a minute: in 25 s about six meet its target,
    // so that none at all (checked below) is a one-in-500 event rather than the one in 40 of a
    // 15 s run.
    let fleet = fleet_thread(&sv1, "5", "200kH/s", "25s", &[], Duration::from_secs(70));
    let report = fleet.join().unwrap();
    let shares = &report["shares"];
    let sent = shares["sent"].as_u64().unwrap();
    let accepted = shares["accepted"].as_u64().unwrap();
    assert_eq!(report["connected"].as_u64(), Some(5), "{report}");
    assert_eq!(report["disconnects"].as_u64(), Some(0), "{report}");
    assert!(report["jobs_received"].as_u64().unwrap() >= 5, "{report}");
    assert!(accepted >= 5, "the devices' shares are accepted: {report}");
    // A block found through the pool makes a few shares in flight stale; nothing else may fail.
    assert!(
        accepted * 10 >= sent * 9,
        "{accepted} of {sent} accepted: {report}"
    );
    for (code, n) in shares["rejected_by_code"].as_object().unwrap() {
        assert!(code == "21" || *n == 0, "rejected as {code}: {report}");
    }

    // The pool saw only the translator's one connection, and took some forwarded shares.
    let status = http_get_json(http, "/api/status");
    let pool_accepted = status["shares"]["accepted"].as_u64().unwrap();
    assert!(pool_accepted > 0, "no forwarded share accepted: {status}");
    assert!(
        pool_accepted < accepted,
        "only shares meeting the pool's target go upstream: {pool_accepted} of {accepted}"
    );
    assert_eq!(status["connections"].as_u64(), Some(1), "{status}");

    // The translator's own account agrees with the fleet's and the pool's, once the devices'
    // last lines and the last verdicts are in.
    let t = status_when(&t_http, "devices gone, no verdict awaited", |s| {
        s["devices"]["connected"] == 0 && s["upstream_shares"]["in_flight"] == 0
    });
    assert_eq!(t["devices"]["total"].as_u64(), Some(5), "{t}");
    assert!(t["jobs_sent"].as_u64().unwrap() >= 1, "{t}");
    let t_accepted = t["shares"]["accepted"].as_u64().unwrap();
    let t_rejected = t["shares"]["rejected"].as_u64().unwrap();
    assert_eq!(
        t_accepted + t_rejected,
        sent,
        "every share judged: {t}\n{report}"
    );
    let unanswered = shares["unanswered"].as_u64().unwrap();
    assert!(
        accepted <= t_accepted && t_accepted <= accepted + unanswered,
        "the devices were told what the translator counted: {t}\n{report}"
    );
    for (reason, n) in shares["rejected_by_reason"].as_object().unwrap() {
        let counted = t["shares"]["rejected_by_reason"][reason].as_u64();
        assert!(counted >= n.as_u64(), "{reason}: {t}\n{report}");
    }
    assert!(t["work"]["accepted"].as_f64().unwrap() > 0.0, "{t}");
    let pool_accepted = http_get_json(http, "/api/status")["shares"]["accepted"]
        .as_u64()
        .unwrap();
    let up = &t["upstream_shares"];
    assert_eq!(up["accepted"].as_u64(), Some(pool_accepted), "{t}");
    assert!(up["forwarded"].as_u64().unwrap() >= pool_accepted, "{t}");
    let u = &t["upstream"];
    assert_eq!(u["state"], "open", "{t}");
    assert_eq!(u["address"].as_str(), Some(sv2.as_str()), "{t}");
    assert_eq!(
        (u["index"].as_u64(), u["upstreams_lost"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(
        u["channel_id"].is_u64() && u["difficulty"].as_f64().unwrap() > 0.0,
        "{t}"
    );
    assert_eq!(http_get(&t_http, "/healthz"), (200, "ok\n".to_owned()));
    let (code, text) = http_get(&t_http, "/metrics");
    assert_eq!(code, 200);
    let metrics = parse_metrics(&text);
    assert_eq!(
        metrics.get("stratumlab_translator_shares_total{result=\"accepted\"}"),
        Some(&(t_accepted as f64)),
        "{text}"
    );
    assert_eq!(
        metrics.get("stratumlab_translator_upstream_shares_total{result=\"accepted\"}"),
        Some(&(pool_accepted as f64)),
        "{text}"
    );
    assert_eq!(http_get(&t_http, "/nowhere").0, 404);

    roles.stop("translator");
    let dump = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args(["events", "dump", events.to_str().unwrap()])
        .output()
        .unwrap();
    let dump = String::from_utf8_lossy(&dump.stdout);
    let count = |kind: &str| {
        dump.lines()
            .filter(|l| l.contains(&format!("\"kind\":\"{kind}\"")))
            .count() as u64
    };
    assert_eq!(count("connection_opened"), 6, "upstream and 5 devices");
    assert!(count("share_sent") >= pool_accepted);
    assert!(count("share_result") >= pool_accepted);

    // The translator counts its own socket bytes (docs/metrics.md roles.<name>.net_*_bytes) with
    // the links' directions: what it sent the pool, the pool read, Noise included.
    roles.stop("pool");
    let up = link_bytes(&events, "upstream", "up");
    let down = link_bytes(&events, "upstream", "down");
    assert!(up > 0 && down > 0, "upstream: {up} up, {down} down");
    assert_eq!(
        up,
        link_bytes(&pool_events, "sv2", "up"),
        "what the pool read"
    );
    assert!(down <= link_bytes(&pool_events, "sv2", "down"));
    let from_devices = link_bytes(&events, "sv1", "up");
    let to_devices = link_bytes(&events, "sv1", "down");
    assert!(
        from_devices > 0 && to_devices > 0,
        "devices: {from_devices} up, {to_devices} down"
    );
    roles.stop("simnet");
}

fn ts(e: &serde_json::Value) -> u64 {
    e["ts_ns"].as_u64().unwrap()
}

/// How the first pool fails.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// SIGKILL: its connections are reset at once.
    Killed,
    /// SIGSTOP: connected but silent; the translator's keepalive must notice.
    Silent,
}

const KEEPALIVE: Duration = Duration::from_secs(2);

/// Failover under fault: two pools, the first killed mid-run. Every device has work from the
/// second within 2 s, none disconnects, and every share the first pool accepted (as the
/// translator was told) is in that pool's store.
#[test]
fn killing_the_first_pool_moves_every_device_to_the_second_within_two_seconds() {
    failover(Fault::Killed);
}

/// The same with a first pool that stops answering: work from the second within the keepalive
/// interval plus 2 s.
#[test]
fn a_silent_first_pool_is_failed_over_within_the_keepalive_plus_two_seconds() {
    failover(Fault::Silent);
}

fn failover(fault: Fault) {
    let dir = tempfile::tempdir().unwrap();
    let t_events = dir.path().join("translator.ev");
    let f_events = dir.path().join("fleet.ev");
    let mut roles = Roles::default();
    // No block in this test: a new tip would make work change for another reason.
    let (simnet, at) = support::simnet()
        .tdp()
        .arg("--network-difficulty", "1000")
        .start();
    roles.add("simnet", simnet);
    let (tdp, tdp_key) = (at.tdp(), at.tdp_key());
    let mut pools = Vec::new();
    for name in ["pool1", "pool2"] {
        let store = dir.path().join(format!("{name}.sqlite"));
        let owned = support::sv2_pool_args("127.0.0.1:0", tdp, tdp_key, &store);
        let mut args = support::strs(&owned);
        args.extend([
            // Acknowledged means stored: the accounting survives the kill.
            "--durability",
            "strict",
            // Enough forwarded shares in a short test.
            "--shares-per-minute",
            "120",
        ]);
        let pool = roles.add(name, Role::start("pool", &args));
        pools.push((
            pool.line("sv2 authority public key"),
            pool.line("sv2 listening on"),
            pool.line("http listening on"),
            store,
        ));
    }
    let upstreams = [
        "--upstream",
        &pools[0].1,
        "--upstream",
        &pools[1].1,
        "--upstream-authority-key",
        &pools[0].0,
        "--upstream-authority-key",
        &pools[1].0,
        "--http-listen",
        "127.0.0.1:0",
    ];
    let keepalive = format!("{}s", KEEPALIVE.as_secs());
    let translator = roles.add(
        "translator",
        support::failover_proxy("translator", &upstreams, &keepalive, &t_events),
    );
    let sv1 = translator.line("sv1 listening on");
    let t_http = translator.line("http listening on");
    let fleet = support::failover_fleet(&sv1, "16s", &["--events", f_events.to_str().unwrap()]);
    // Mining on the first pool until it has taken some forwarded shares.
    status_within(
        &pools[0].2,
        "pool1 took no share",
        Duration::from_secs(10),
        String::new,
        |s| s["shares"]["accepted"].as_u64().unwrap_or(0) >= 2,
    );
    // The devices' hash rate is re-summed once a tick (1 s).
    let t = status_when(&t_http, "five devices and their hash rate", |s| {
        s["devices"]["connected"] == 5 && s["hashrate"].as_f64().unwrap_or(0.0) > 0.0
    });
    assert_eq!(t["upstream"]["index"].as_u64(), Some(0), "{t}");
    assert_eq!(http_get(&t_http, "/healthz").0, 200);
    let kill_ns = events::now_ns();
    match fault {
        Fault::Killed => roles.kill("pool1"),
        Fault::Silent => roles.signal("pool1", libc::SIGSTOP),
    }
    let allowed = match fault {
        Fault::Killed => Duration::from_secs(2),
        Fault::Silent => KEEPALIVE + Duration::from_secs(2),
    };
    let report = fleet.join().unwrap();
    assert_eq!(report["connected"].as_u64(), Some(5), "{report}");
    assert_eq!(report["disconnects"].as_u64(), Some(0), "{report}");
    let status = http_get_json(&pools[1].2, "/api/status");
    assert!(
        status["shares"]["accepted"].as_u64().unwrap() > 0,
        "pool2 took no share: {status}"
    );
    // The translator says it is on the second pool, having lost the first.
    assert_eq!(http_get(&t_http, "/healthz"), (200, "ok\n".to_owned()));
    let t = http_get_json(&t_http, "/api/status");
    let u = &t["upstream"];
    assert_eq!(u["state"], "open", "{t}");
    assert_eq!(u["index"].as_u64(), Some(1), "{t}");
    assert_eq!(u["address"].as_str(), Some(pools[1].1.as_str()), "{t}");
    assert_eq!(u["upstreams_lost"].as_u64(), Some(1), "{t}");
    assert_eq!(u["channels_opened"].as_u64(), Some(2), "{t}");
    assert_eq!(u["last_lost"]["index"].as_u64(), Some(0), "{t}");
    assert!(
        t["upstream_shares"]["accepted"].as_u64().unwrap() >= 2,
        "the first pool's verdicts still count: {t}"
    );
    roles.stop("translator");

    let t = dump_events(&t_events);
    let kind = |e: &serde_json::Value, k: &str| e["kind"] == k;
    let reopened = t
        .iter()
        .find(|e| {
            kind(e, "connection_opened")
                && e["label"] == "upstream"
                && e["conn"] == translator::shell::UPSTREAM_CONN_BASE + 1
        })
        .expect("a second upstream connection");
    let reopened_ns = ts(reopened);
    assert!(reopened_ns > kill_ns);
    // Work after the switch, for every device, within 2 s of the kill.
    let f = dump_events(&f_events);
    let mut devices: Vec<u64> = f
        .iter()
        .filter(|e| kind(e, "job_received"))
        .map(|e| e["device"].as_u64().unwrap())
        .collect();
    devices.sort_unstable();
    devices.dedup();
    assert_eq!(devices.len(), 5);
    for d in devices {
        let first_new = f
            .iter()
            .filter(|e| kind(e, "job_received") && e["device"] == d && ts(e) > reopened_ns)
            .map(ts)
            .min()
            .unwrap_or_else(|| panic!("device {d} got no work after the switch"));
        let after = Duration::from_nanos(first_new - kill_ns);
        eprintln!("{fault:?}: device {d} had work from the second pool {after:?} after the fault");
        assert!(
            after <= allowed,
            "device {d} waited {after:?} for work from the second pool ({fault:?}); the bound is {allowed:?}"
        );
    }
    // No device connection ended before the translator was stopped.
    let upstream_conn = |e: &serde_json::Value| {
        e["conn"].as_u64().unwrap() >= translator::shell::UPSTREAM_CONN_BASE
    };
    let closed: Vec<&serde_json::Value> = t
        .iter()
        .filter(|e| kind(e, "connection_closed") && !upstream_conn(e))
        .collect();
    assert!(
        closed
            .iter()
            .all(|e| e["reason"] == "shutdown" || e["reason"] == "eof"),
        "devices closed: {closed:?}"
    );
    // Every share the first pool acknowledged is in its store.
    let hash_of: std::collections::HashMap<u64, String> = t
        .iter()
        .filter(|e| kind(e, "share_sent") && e["device"] == translator::shell::UPSTREAM_CONN_BASE)
        .map(|e| {
            (
                e["seq"].as_u64().unwrap(),
                e["hash"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let accepted_by_first: Vec<&String> = t
        .iter()
        .filter(|e| {
            kind(e, "share_result")
                && e["conn"] == translator::shell::UPSTREAM_CONN_BASE
                && e["verdict"] == "accepted"
        })
        .map(|e| &hash_of[&e["seq"].as_u64().unwrap()])
        .collect();
    // The pool had accepted two; the last verdict may have been on its way at the fault.
    assert!(!accepted_by_first.is_empty());
    if fault == Fault::Silent {
        // Its store is read once it is gone.
        roles.kill("pool1");
    }
    let stored = stored_share_hashes(&pools[0].3);
    for h in accepted_by_first {
        let h = primitives::Hash256::from_display_hex(h).unwrap();
        assert!(
            stored.contains(&h.0),
            "share {h} accepted by pool1 is not in its store"
        );
    }
    roles.stop("pool2");
    roles.stop("simnet");
}
