//! `stratumlab translator --channels per-device` end to end: simnet's Template Provider, our SV2
//! pool, the translator giving each SV1 device of `stratumlab fleet` an extended channel of its
//! own on its one connection to the pool.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::{
    dump_events, fleet_thread, http_get, http_get_json, status_when, sv2_pool_on_simnet, Roles,
};
const DEVICES: u64 = 4;

#[test]
fn each_sv1_device_mines_on_its_own_channel_into_the_sv2_pool() {
    let dir = tempfile::tempdir().unwrap();
    let pool_events = dir.path().join("pool.ev");
    let t_events = dir.path().join("translator.ev");
    let mut roles = Roles::default();
    let pool = sv2_pool_on_simnet(&mut roles, dir.path(), Some(&pool_events));
    let p_http = &pool.http;
    let (_, sv1, t_http) = pool.fleet_translator(
        &mut roles,
        &[
            "--channels",
            "per-device",
            "--user-identity",
            "farm",
            "--events",
            t_events.to_str().unwrap(),
        ],
    );
    let t = http_get_json(&t_http, "/api/status");
    assert_eq!(t["mode"], "per-device", "{t}");
    assert_eq!(t["upstream"]["channels_open"], 0, "no device yet: {t}");
    assert_eq!(t["healthy"], true, "the connection is enough: {t}");
    let c = &t["upstream"]["channels"];
    assert_eq!(
        (&c["opening"], &c["draining"]),
        (&0.into(), &0.into()),
        "{t}"
    );
    assert_eq!(c["difficulty_max"], 0.0, "no channel, no range: {t}");

    let devices = DEVICES.to_string();
    let fleet = fleet_thread(
        &sv1,
        &devices,
        "160kH/s",
        "12s",
        &[],
        Duration::from_secs(60),
    );
    // While they mine: a channel each, none waiting, and their targets' range (the census is
    // taken on the translator's tick).
    let t = status_when(&t_http, "a channel per device, described", |s| {
        let c = &s["upstream"]["channels"];
        s["upstream"]["channels_open"] == DEVICES
            && s["devices"]["connected"] == DEVICES
            && c["opening"] == 0
            && c["difficulty_min"].as_f64() > Some(0.0)
    });
    assert_eq!(t["upstream"]["channels_opened"], DEVICES, "{t}");
    let u = &t["upstream"];
    let c = &u["channels"];
    let (lo, hi) = (
        c["difficulty_min"].as_f64().unwrap(),
        c["difficulty_max"].as_f64().unwrap(),
    );
    assert!(lo <= hi, "{t}");
    // The keys of the one channel of aggregated mode: there is none.
    assert!(u["channel_id"].is_null(), "{t}");
    assert_eq!(u["difficulty"], 0.0, "{t}");
    for key in ["timed_out", "refused", "closed_by_pool"] {
        assert_eq!(c[key], 0, "{key}: {t}");
    }
    // /metrics says the same.
    let (code, metrics) = http_get(&t_http, "/metrics");
    assert_eq!(code, 200);
    let sample = |name: &str| -> f64 {
        let prefix = format!("stratumlab_translator_{name} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
            .parse()
            .unwrap()
    };
    assert!(sample("upstream_channels_open") >= 1.0, "{metrics}");
    assert_eq!(sample("upstream_channels_opening"), 0.0, "{metrics}");
    assert_eq!(sample("upstream_channel_requests_timed_out_total"), 0.0);
    let (m_lo, m_hi) = (
        sample("upstream_channel_difficulty_min"),
        sample("upstream_channel_difficulty_max"),
    );
    assert!(m_lo > 0.0 && m_lo <= m_hi, "{metrics}");
    let report = fleet.join().unwrap();
    let shares = &report["shares"];
    let sent = shares["sent"].as_u64().unwrap();
    let accepted = shares["accepted"].as_u64().unwrap();
    assert_eq!(report["connected"].as_u64(), Some(DEVICES), "{report}");
    assert_eq!(report["disconnects"].as_u64(), Some(0), "{report}");
    assert!(accepted >= DEVICES, "{report}");
    assert!(
        accepted * 10 >= sent * 9,
        "{accepted} of {sent} accepted: {report}"
    );
    for (code, n) in shares["rejected_by_code"].as_object().unwrap() {
        assert!(code == "21" || *n == 0, "rejected as {code}: {report}");
    }

    // The devices gone, their channels are closed and every verdict is in.
    let t = status_when(&t_http, "channels closed, no verdict awaited", |s| {
        let c = &s["upstream"]["channels"];
        s["devices"]["connected"] == 0
            && s["upstream"]["channels_open"] == 0
            && s["upstream_shares"]["in_flight"] == 0
            && c["draining"] == 0
            && c["difficulty_max"] == 0.0
    });
    let up = &t["upstream_shares"];
    let up_accepted = up["accepted"].as_u64().unwrap();
    assert!(up_accepted > 0, "{t}");
    assert_eq!(up["rejected"], 0, "{t}");

    // The pool saw one connection carrying one channel per device, each a worker of its own
    // under the farm's account, and took shares on them.
    let p = http_get_json(p_http, "/api/status");
    assert_eq!(p["shares"]["accepted"].as_u64(), Some(up_accepted), "{p}");
    let workers = http_get_json(p_http, "/api/workers?limit=100");
    let names: BTreeSet<&str> = workers["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    let expected: BTreeSet<String> = (1..=DEVICES).map(|n| format!("farm.miner{n}")).collect();
    let expected: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
    assert_eq!(names, expected, "{workers}");

    roles.stop("translator");
    roles.stop("pool");
    let pool_ev = dump_events(&pool_events);
    let kind = |e: &serde_json::Value, k: &str| e["kind"] == k;
    let conns: BTreeSet<u64> = pool_ev
        .iter()
        .filter(|e| kind(e, "connection_opened"))
        .map(|e| e["conn"].as_u64().unwrap())
        .collect();
    assert_eq!(conns.len(), 1, "one connection from the translator");
    let job_channels: BTreeSet<u64> = pool_ev
        .iter()
        .filter(|e| kind(e, "job_sent"))
        .filter_map(|e| e["channel"].as_u64())
        .collect();
    assert_eq!(job_channels.len() as u64, DEVICES, "{job_channels:?}");
    let accepted_channels: BTreeSet<u64> = pool_ev
        .iter()
        .filter(|e| kind(e, "share_result") && e["verdict"] == "accepted")
        .filter_map(|e| e["channel"].as_u64())
        .collect();
    assert!(
        accepted_channels.is_subset(&job_channels) && accepted_channels.len() >= 2,
        "shares accepted on several devices' channels: {accepted_channels:?}"
    );
    // The translator's share events name the devices' channels, the ones the pool used.
    let sent_channels: BTreeSet<u64> = dump_events(&t_events)
        .iter()
        .filter(|e| kind(e, "share_sent"))
        .filter_map(|e| e["channel"].as_u64())
        .collect();
    assert!(
        sent_channels.is_subset(&job_channels) && sent_channels.len() >= 2,
        "{sent_channels:?} of {job_channels:?}"
    );
    roles.stop("simnet");
}
