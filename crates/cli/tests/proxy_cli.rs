//! `stratumlab proxy` end to end: simnet's RPC node, our SV1 pool, the aggregating SV1 proxy in
//! front of it, and SV1 devices from `stratumlab fleet` mining through it; then the pool killed
//! with a second one to fail over to.

mod support;

use std::time::Duration;

use support::{dump_events, failover_fleet, failover_proxy, http_get_json, status_within, Role};

fn sv1_pool(rpc: &str, store: &std::path::Path) -> Role {
    let owned = support::sv1_pool_args(store);
    let mut args = support::strs(&owned);
    args.extend([
        "--durability",
        "strict",
        // The proxy's one connection carries every device: a share every half second.
        "--start-difficulty",
        "0.00001",
        "--min-difficulty",
        "0.0000001",
        "--shares-per-minute",
        "120",
    ]);
    Role::start_on_node("pool", rpc, &args)
}

/// Devices behind the proxy mine on the SV1 pool through one connection; the pool is then
/// killed and the proxy fails over to a second one, devices staying connected.
#[test]
fn sv1_devices_mine_through_the_proxy_and_survive_a_pool_kill() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("proxy.ev");
    let (simnet, at) = support::simnet()
        .rpc()
        .arg("--network-difficulty", "1000")
        .start();
    let rpc = at.rpc().to_owned();
    let mut pools: Vec<Option<(Role, String, String)>> = (0..2)
        .map(|i| {
            let p = sv1_pool(&rpc, &dir.path().join(format!("pool{i}.sqlite")));
            let sv1 = p.line("sv1 listening on");
            let http = p.line("http listening on");
            Some((p, sv1, http))
        })
        .collect();
    let (sv1_a, http_a) = {
        let p = pools[0].as_ref().unwrap();
        (p.1.clone(), p.2.clone())
    };
    let (sv1_b, http_b) = {
        let p = pools[1].as_ref().unwrap();
        (p.1.clone(), p.2.clone())
    };
    let args = [
        "--upstream",
        &sv1_a,
        "--upstream",
        &sv1_b,
        "--user-identity",
        "farm",
    ];
    let proxy = failover_proxy("proxy", &args, "2s", &events);
    let sv1 = proxy.line("sv1 listening on");
    let fleet = failover_fleet(&sv1, "14s", &[]);

    // The first pool sees one connection and takes the shares that meet its difficulty.
    let status = status_within(
        &http_a,
        "pool 1 took no share",
        Duration::from_secs(10),
        String::new,
        |s| s["shares"]["accepted"].as_u64().unwrap_or(0) >= 2,
    );
    assert_eq!(status["connections"].as_u64(), Some(1), "{status}");
    assert_eq!(
        status["shares"]["rejected"].as_u64(),
        Some(0),
        "the proxy only forwards what the pool takes: {status}"
    );
    let kill_ns = events::now_ns();
    pools[0].take().unwrap().0.kill9();

    let report = fleet.join().unwrap();
    assert_eq!(report["connected"].as_u64(), Some(5), "{report}");
    assert_eq!(report["disconnects"].as_u64(), Some(0), "{report}");
    let shares = &report["shares"];
    let sent = shares["sent"].as_u64().unwrap();
    let accepted = shares["accepted"].as_u64().unwrap();
    // Shares in flight across the switch are stale (21); nothing else is refused.
    for (code, n) in shares["rejected_by_code"].as_object().unwrap() {
        assert!(code == "21" || *n == 0, "rejected as {code}: {report}");
    }
    assert!(accepted * 10 >= sent * 8, "{accepted} of {sent}: {report}");
    let status = http_get_json(&http_b, "/api/status");
    assert!(
        status["shares"]["accepted"].as_u64().unwrap() > 0,
        "pool 2 took no share: {status}"
    );
    assert_eq!(status["connections"].as_u64(), Some(1), "{status}");

    proxy.stop();
    let ev = dump_events(&events);
    let base = translator::shell::UPSTREAM_CONN_BASE;
    let reopened = ev
        .iter()
        .find(|e| e["kind"] == "connection_opened" && e["conn"] == base + 1)
        .expect("a second upstream connection");
    let took = Duration::from_nanos(reopened["ts_ns"].as_u64().unwrap() - kill_ns);
    eprintln!("proxy: second upstream connected {took:?} after the kill");
    assert!(
        took < Duration::from_secs(2),
        "the second upstream connected {took:?} after the kill; the bound is 2s"
    );
    let forwarded_ok = ev
        .iter()
        .filter(|e| e["kind"] == "share_result" && e["verdict"] == "accepted")
        .count();
    assert!(
        forwarded_ok >= 3,
        "{forwarded_ok} forwarded shares accepted"
    );
    if let Some((p, _, _)) = pools[1].take() {
        p.stop();
    }
    simnet.stop();
}
