//! Interop: the SV2 reference pool (`pool_sv2`, pinned at `lab::third_party::POOL_SV2`)
//! takes its templates from simnet's Template Provider, and `stratumlab fleet`'s SV2 devices
//! mine through it: two fleets at once, 12 `asic` devices (version rolling) and 8 `cpu` devices
//! (none), for 30 s. Passes when
//! - the pool completes the Noise handshake with simnet (checking simnet's authority key) and
//!   SetupConnection, receives a future NewTemplate and the SetNewPrevHash naming it, and says
//!   it is ready for miners;
//! - every device completes the Noise handshake with the pool's certificate, SetupConnection
//!   and OpenStandardMiningChannel, with no protocol error;
//! - every fleet gets accepted shares, and the pool's log validates at least as many shares as
//!   the fleets counted accepted, and no more than those plus the ones left unanswered;
//! - a device finds a block, the pool sends it to simnet as SubmitSolution, simnet rebuilds and
//!   accepts it, and the new tip reaches the pool as another future NewTemplate and
//!   SetNewPrevHash;
//! - simnet's events show the TDP connection, the templates and the accepted block; the fleets'
//!   events show future jobs activated by a prev hash, one `share_result` per answered share,
//!   and the lab's count of the shares finds no reject but stale ones (a share the pool refused
//!   for another reason must be one the lab finds superseded, or unanswered).
//!
//! Ignored by default: it needs pool_sv2 ($STRATUMLAB_POOL_SV2, the CI tools cache, or PATH;
//! `bash scripts/install-tools.sh pool_sv2` installs it). CI runs it by name. Everything
//! listens on 127.0.0.1; every process is stopped when the test ends.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{dump_events, rejected_but_stale, run_fleet, RefPool};

#[test]
#[ignore = "needs pool_sv2 (scripts/install-tools.sh installs it); CI runs it by name"]
fn sv2_devices_mine_shares_and_blocks_through_the_reference_pool() {
    let dir = tempfile::tempdir().unwrap();
    let (simnet_role, pool, simnet_events) = RefPool::on_simnet(dir.path(), "0.0005");
    let ready = pool.log();
    for step in [
        "Received `SetupConnectionSuccess` from TP",
        "future_template: true",
        "Received: SetNewPrevHash",
    ] {
        assert!(
            ready.contains(step),
            "pool_sv2 before it was ready: no {step:?}\n{ready}"
        );
    }
    let public = pool.key.clone();

    // Two fleets at once: 12 asic devices and 8 cpu devices.
    let pool_addr = pool.listen.to_string();
    let fleet = |name: &'static str, profile: &str, devices: &str, first: &str, budget: &str| {
        let events = dir.path().join(format!("{name}.ev"));
        let args: Vec<String> = [
            "--protocol",
            "sv2",
            "--pool",
            &pool_addr,
            "--authority-key",
            &public,
            "--profile",
            profile,
            "--devices",
            devices,
            "--first-device-id",
            first,
            "--hash-budget",
            budget,
            "--duration",
            "30s",
            "--drain",
            "5s",
            "--json",
            "--events",
            events.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec();
        std::thread::spawn(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            (name, events, run_fleet(&args, Duration::from_secs(90)))
        })
    };
    let asic = fleet("asic", "asic", "12", "0", "600kH/s");
    let cpu = fleet("cpu", "cpu", "8", "100", "400kH/s");
    let fleets = [asic.join().unwrap(), cpu.join().unwrap()];

    let (mut accepted, mut unanswered, mut answered, mut blocks) = (0, 0, 0, 0);
    for (name, _, report) in &fleets {
        let n = |path: &[&str]| {
            path.iter()
                .fold(report, |v, k| &v[*k])
                .as_u64()
                .unwrap_or_else(|| panic!("{name}: no {path:?} in {report}"))
        };
        assert_eq!(
            n(&["ready"]),
            n(&["devices"]),
            "{name}: not every device was ready: {report}"
        );
        assert_eq!(
            n(&["protocol_errors"]),
            0,
            "{name}: protocol errors: {report}"
        );
        assert!(
            n(&["shares", "accepted"]) > 0,
            "{name}: no share accepted: {report}"
        );
        eprintln!(
            "{name}: {} blocks {}",
            report["shares"], report["blocks_found"]
        );
        accepted += n(&["shares", "accepted"]);
        unanswered += n(&["shares", "unanswered"]);
        answered += n(&["shares", "accepted"]) + n(&["shares", "rejected"]);
        blocks += n(&["blocks_found"]);
    }

    let pool_log = pool.log();
    let valid = (pool.count("SubmitSharesStandard: valid share")
        + pool.count("SubmitSharesStandard: SubmitSharesSuccess")
        + pool.count("Block Found")) as u64;
    let refused_not_stale = pool_log
        .lines()
        .filter(|l| l.contains("SubmitSharesError") && !l.contains("error_code: stale-share"))
        .count() as u64;
    eprintln!("pool_sv2: {valid} valid shares, {refused_not_stale} refused for a reason but stale");
    assert!(
        valid >= accepted,
        "the fleets counted {accepted} accepted, the pool validated only {valid}"
    );
    assert!(
        valid <= accepted + unanswered,
        "the pool validated {valid}, the fleets account for {accepted} accepted + {unanswered} \
         unanswered"
    );
    assert!(blocks >= 1, "no device found a block");
    assert!(
        pool.count("Propagating solution to the Template Provider") >= 1,
        "pool_sv2 sent no SubmitSolution"
    );
    // The new tip came back: a future template and its prev hash again.
    assert!(
        pool.count("future_template: true") >= 2,
        "no NewTemplate for a new tip"
    );
    assert!(
        pool.count("Received: SetNewPrevHash") >= 2,
        "no SetNewPrevHash for a new tip"
    );

    // Stop the pool, then simnet (which writes the rest of its events as it stops).
    drop(pool);
    simnet_role.stop();
    let mut results = 0;
    for (name, events, _) in &fleets {
        let events = dump_events(events);
        let kind = |k: &'static str| events.iter().filter(move |e| e["kind"] == k);
        assert!(
            kind("job_received").any(|e| e["future"] == true),
            "{name}: no future job_received event"
        );
        assert!(
            kind("job_activated").count() >= 1,
            "{name}: no job_activated event"
        );
        results += kind("share_result").count() as u64;
    }
    assert_eq!(
        results, answered,
        "share_result events against answered shares"
    );
    let chain = dump_events(&simnet_events);
    let has = |f: &dyn Fn(&Value) -> bool| chain.iter().filter(|e| f(e)).count();
    assert!(
        has(&|e| e["kind"] == "connection_opened" && e["label"] == "tdp") >= 1,
        "no tdp connection_opened event"
    );
    assert!(
        has(&|e| e["kind"] == "template_created") >= 2,
        "fewer than 2 templates"
    );
    assert!(
        has(&|e| e["kind"] == "block_result" && e["accepted"] == true) >= 1,
        "no accepted block_result event"
    );
    assert!(
        has(&|e| e["kind"] == "tip_changed" && e["source"] == "submitted") >= 1,
        "no block reached simnet's chain through the pool's SubmitSolution"
    );

    // The lab's count of the fleets' shares, with simnet's tips to tell stale ones.
    let out = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .arg("events")
        .arg("shares")
        .args([&fleets[0].1, &fleets[1].1, &simnet_events])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the lab could not count the fleets' shares"
    );
    let lab: Value = serde_json::from_slice(&out.stdout).unwrap();
    let shares = &lab["shares"];
    eprintln!("the lab's count: {shares}");
    assert_eq!(
        rejected_but_stale(shares),
        0,
        "shares rejected for reasons other than stale: {shares}"
    );
    let stale = |v: &Value| v["stale"].as_u64().unwrap_or(0);
    let reclassified = stale(&shares["rejected_by_reason"]) - stale(&shares["pool_reason"]);
    assert!(
        refused_not_stale <= reclassified + unanswered,
        "pool_sv2 refused {refused_not_stale} shares for reasons other than stale; the lab found \
         {reclassified} of them superseded and {unanswered} unanswered"
    );
    eprintln!(
        "PASS: 20 SV2 devices through pool_sv2: {accepted} shares accepted (pool validated \
         {valid}), {blocks} blocks found"
    );
}
