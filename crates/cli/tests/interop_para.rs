//! Interop: a real third-party SV1 miner, `para miner` (crates.io, pinned at
//! `lab::third_party::PARA`), mines against `stratumlab pool` on simnet, once with
//! version rolling (its default) and once without. Passes when both get accepted shares, the
//! rolled submits really roll version bits, no share is rejected for any reason but stale (a
//! share on the job a block just superseded is a genuine race), para's blocks reach simnet's
//! chain (network difficulty 0.002: a block every ~8.6M hashes, seconds for one CPU core),
//! /healthz says ok and, after a clean stop, the store holds every accepted share.
//!
//! Ignored by default: it needs `para` ($STRATUMLAB_PARA, the CI tools cache, or PATH;
//! `bash scripts/install-tools.sh` installs it). CI runs it by name once the tools are in.
//! Everything listens on 127.0.0.1; every process is stopped when the test ends.

mod support;

use std::time::Duration;

use support::{http_get, http_get_json, rolled_submits, rpc_call, run_para, simnet, within, Role};

/// How long each para run mines before it is interrupted.
const MINING: Duration = Duration::from_secs(20);

#[test]
#[ignore = "needs para (scripts/install-tools.sh installs it); CI runs it by name"]
fn para_mines_shares_and_blocks_on_our_pool_with_and_without_version_rolling() {
    // No network blocks: every new tip is one para found.
    let (_simnet, node) = simnet()
        .rpc()
        .zmq()
        .arg("--network-difficulty", "0.002")
        .arg("--template-interval", "2s")
        .start();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pool.sqlite");
    let mut pool = Role::start_on_node(
        "pool",
        node.rpc(),
        &[
            "--sv1-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--zmq",
            node.zmq(),
            "--solo",
            "--start-difficulty",
            "0.0002",
            "--shares-per-minute",
            "30",
            "--template-interval",
            "5s",
            "--store",
            store.to_str().unwrap(),
        ],
    );
    let addrs = pool.lines_starting(&["sv1 listening on", "http listening on"]);
    let (sv1, http) = (&addrs["sv1 listening on"], &addrs["http listening on"]);
    within(
        "/healthz never said ok",
        Duration::from_secs(30),
        String::new,
        || match http_get(http, "/healthz") {
            (200, body) if body.trim() == "ok" => Ok(()),
            (code, body) => Err(format!("{code} {body}")),
        },
    );

    let rolling = run_para(dir.path(), sv1, "rolling", &[], MINING);
    let after_rolling = http_get_json(http, "/api/status")["shares"]["accepted"]
        .as_u64()
        .unwrap();
    let plain = run_para(
        dir.path(),
        sv1,
        "plain",
        &["--disable-version-rolling"],
        MINING,
    );
    let s = http_get_json(http, "/api/status");
    let accepted = s["shares"]["accepted"].as_u64().unwrap();
    let rejected = s["shares"]["rejected"].as_u64().unwrap()
        - s["shares"]["rejected_by_reason"]["stale"]
            .as_u64()
            .unwrap_or(0);
    let blocks = s["blocks"]["accepted"].as_u64().unwrap();
    let rolled = rolled_submits(&rolling);
    eprintln!(
        "accepted {accepted} (with rolling {after_rolling}, rolled submits {rolled}), rejected \
         other than stale {rejected}, blocks {blocks}"
    );
    let tail = |log: &str| log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
    assert!(
        after_rolling > 0,
        "no share accepted from para with version rolling:\n{}",
        tail(&rolling)
    );
    assert!(
        rolled > 0,
        "para never rolled version bits:\n{}",
        tail(&rolling)
    );
    assert!(
        accepted > after_rolling,
        "no share accepted from para without version rolling:\n{}",
        tail(&plain)
    );
    assert_eq!(
        rejected, 0,
        "shares rejected: {}",
        s["shares"]["rejected_by_reason"]
    );
    assert!(blocks > 0, "no block accepted by simnet");
    let height = rpc_call(node.rpc(), "getblockcount", serde_json::json!([]))["result"]
        .as_u64()
        .unwrap();
    assert!(
        height > 900_000,
        "simnet's tip did not move (height {height})"
    );

    // Stopped cleanly, the store holds every accepted share.
    pool.signal(libc::SIGTERM);
    assert!(
        pool.wait_done(Duration::from_secs(20)).is_some(),
        "the pool did not stop on SIGTERM"
    );
    let stored = pool::store::StoreReader::open(&store)
        .unwrap()
        .share_count()
        .unwrap();
    assert_eq!(stored, accepted, "the store against the pool's acceptances");
    eprintln!("PASS: para mined {accepted} accepted shares and {blocks} blocks; tip {height}");
}

#[test]
fn rolled_submits_are_read_from_paras_log() {
    let log = r#"submit {"version_bits": "00000000"} then {"version_bits": "1fffe000"}"#;
    assert_eq!(rolled_submits(log), 1);
    assert_eq!(rolled_submits("nothing"), 0);
}
