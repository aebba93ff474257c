//! Interop: `stratumlab translator` between our SV1 devices and the SV2 reference pool
//! (`pool_sv2`, pinned) on simnet's Template Provider, once with every device on one extended
//! channel (aggregated) and once with a standard channel per device (per-device). For each
//! mode, passes when
//! - the translator opens its upstream on pool_sv2 (Noise with the pool's certificate, checked
//!   against the authority key; SetupConnection; the channel) and serves SV1;
//! - every device is ready, with no protocol error and no disconnect, and gets accepted shares,
//!   none rejected for any reason but stale;
//! - the translator forwards shares, pool_sv2 accepts them (on one channel per device in
//!   per-device mode) and rejects none for a reason but stale, and none goes unanswered;
//! - a device finds a block and it becomes simnet's tip: device -> translator -> pool_sv2 ->
//!   SubmitSolution -> simnet;
//! - aggregated, with `--worker-tracking`, the translator and pool_sv2 negotiate extension 0x0002
//!   and pool_sv2 takes the shares that carry each device's worker (a TLV it parses).
//!
//! Ignored by default: it needs pool_sv2 (`bash scripts/install-tools.sh pool_sv2` installs
//! it). CI runs it by name. Everything listens on 127.0.0.1; every process is stopped when the
//! test ends.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde_json::Value;
use support::{
    assert_fleet_mined, dump_events, fleet_thread, submitted_tips, RefPool, Role,
    INTEROP_TRANSLATOR,
};

const DEVICES: u64 = 10;

/// Mines through a translator in `mode` for `duration`; returns the fleet's report. The
/// translator's events go to `events`.
fn mine_through(pool: &RefPool, mode: &str, duration: &str, events: &std::path::Path) -> Value {
    let upstream = pool.listen.to_string();
    let tracking: &[&str] = if mode == "aggregated" {
        &["--worker-tracking"]
    } else {
        &[]
    };
    let mut translator = Role::start(
        "translator",
        &[
            tracking,
            &[
                "--listen",
                "127.0.0.1:0",
                "--channels",
                mode,
                "--upstream",
                &upstream,
                "--upstream-authority-key",
                &pool.key,
                "--events",
                events.to_str().unwrap(),
            ],
            &INTEROP_TRANSLATOR,
        ]
        .concat(),
    );
    // Printed once the upstream is ready on pool_sv2.
    let sv1 = translator.line("sv1 listening on");
    if mode == "aggregated" {
        let log = translator.log();
        assert!(
            log.contains("upstream extensions negotiated") && log.contains("using=[2]"),
            "aggregated: extension 0x0002 not negotiated with pool_sv2:\n{log}"
        );
    }
    let fleet_events = events.with_extension("fleet.ev");
    let report = fleet_thread(
        &sv1,
        &DEVICES.to_string(),
        "500kH/s",
        duration,
        &[
            "--events",
            fleet_events.to_str().unwrap(),
            "--profile",
            "asic",
            "--drain",
            "5s",
        ],
        Duration::from_secs(120),
    )
    .join()
    .unwrap();
    assert_fleet_mined(&report, DEVICES, mode);
    assert_eq!(
        report["disconnects"].as_u64(),
        Some(0),
        "{mode}: devices disconnected: {report}"
    );
    translator.signal(libc::SIGTERM);
    assert!(
        translator.wait_done(Duration::from_secs(20)).is_some(),
        "the translator ({mode}) did not stop on SIGTERM"
    );
    report
}

/// What the translator's events say of its upstream: shares forwarded, the pool's verdicts.
struct Upstream {
    forwarded: HashSet<(u64, u64)>,
    hashes: HashSet<String>,
    answered: HashSet<(u64, u64)>,
    accepted: u64,
    rejected: BTreeMap<String, u64>,
    accepted_channels: HashSet<u64>,
}

fn upstream(events: &[Value]) -> Upstream {
    let mut u = Upstream {
        forwarded: HashSet::new(),
        hashes: HashSet::new(),
        answered: HashSet::new(),
        accepted: 0,
        rejected: BTreeMap::new(),
        accepted_channels: HashSet::new(),
    };
    let key = |e: &Value| {
        (
            e["channel"].as_u64().unwrap_or(0),
            e["seq"].as_u64().unwrap_or(0),
        )
    };
    for e in events {
        match e["kind"].as_str() {
            Some("share_sent") => {
                u.forwarded.insert(key(e));
                if let Some(h) = e["hash"].as_str() {
                    u.hashes.insert(h.to_owned());
                }
            }
            Some("share_result") if e["perspective"] == "received" => {
                u.answered.insert(key(e));
                match &e["verdict"] {
                    v if v == "accepted" => {
                        u.accepted += 1;
                        u.accepted_channels.insert(key(e).0);
                    }
                    Value::Object(o) => {
                        let why = o["rejected"].as_str().unwrap_or("?").to_owned();
                        *u.rejected.entry(why).or_default() += 1;
                    }
                    v => *u.rejected.entry(v.to_string()).or_default() += 1,
                }
            }
            _ => {}
        }
    }
    u
}

#[test]
#[ignore = "needs pool_sv2 (scripts/install-tools.sh installs it); CI runs it by name"]
fn our_translator_mines_through_the_reference_pool_aggregated_and_per_device() {
    let dir = tempfile::tempdir().unwrap();
    let (simnet_role, pool, simnet_events) = RefPool::on_simnet(dir.path(), "0.0003");
    let modes = [("aggregated", "30s"), ("per-device", "20s")];
    let mut runs = Vec::new();
    for (mode, duration) in modes {
        let events = dir.path().join(format!("translator-{mode}.ev"));
        let report = mine_through(&pool, mode, duration, &events);
        runs.push((mode, events, report["blocks_found"].as_u64().unwrap()));
    }
    assert!(
        pool.count("Propagating solution to the Template Provider") >= 1,
        "pool_sv2 sent no SubmitSolution to simnet"
    );
    assert_eq!(
        pool.count("Extension negotiation success"),
        1,
        "pool_sv2 agreed to extension 0x0002 with the aggregated translator only"
    );
    drop(pool);
    simnet_role.stop();
    let tips = submitted_tips(&simnet_events);
    for (mode, events, blocks) in runs {
        let u = upstream(&dump_events(&events));
        let unanswered = u.forwarded.difference(&u.answered).count();
        let chained = u.hashes.intersection(&tips).count();
        eprintln!(
            "translator ({mode}): {} forwarded, {} accepted on {} channel(s), rejected {:?}, \
             {unanswered} unanswered; {chained} of its blocks new tips",
            u.forwarded.len(),
            u.accepted,
            u.accepted_channels.len(),
            u.rejected
        );
        assert!(
            !u.forwarded.is_empty(),
            "{mode}: nothing forwarded to pool_sv2"
        );
        assert!(u.accepted >= 1, "{mode}: pool_sv2 accepted no share");
        let bad: u64 = u
            .rejected
            .iter()
            .filter(|(r, _)| *r != "stale")
            .map(|(_, n)| n)
            .sum();
        assert_eq!(
            bad, 0,
            "{mode}: rejected for reasons other than stale: {:?}",
            u.rejected
        );
        assert_eq!(unanswered, 0, "{mode}: forwarded shares without a verdict");
        assert!(blocks >= 1, "{mode}: no device found a block");
        assert!(
            chained >= 1,
            "{mode}: no block went device -> translator -> pool_sv2 -> tip"
        );
        if mode == "per-device" {
            assert!(
                u.accepted_channels.len() >= 2,
                "per-device: accepted on {} channel(s), not one per device",
                u.accepted_channels.len()
            );
        }
    }
}
