//! ZMQ drops and returns: the pool follows simnet's node with `--zmq` through a `stratumlab
//! tap`; simnet's network finds a block every second or so. The tap is killed: the pool says
//! its ZMQ subscription is down, goes on serving, and still gets each new tip (by long
//! polling). The tap comes back on the same address: the subscription reconnects by itself and
//! new tips keep coming.

mod support;

use std::time::Duration;

use support::{free_port, http_get, start_tap, status_within, Role, Roles, PAYOUT};

/// Polls `/api/status` until `done` holds, within `limit`, showing the roles' logs if not.
fn wait_status(
    roles: &Roles,
    http: &str,
    what: &str,
    limit: Duration,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    status_within(http, what, limit, || roles.logs(), done)
}

fn clean_jobs(s: &serde_json::Value) -> u64 {
    s["jobs"]["clean"].as_u64().unwrap_or(0)
}

#[test]
fn zmq_dropping_and_returning_leaves_the_pool_following_the_node() {
    let mut roles = Roles::default();
    let (simnet, at) = support::simnet()
        .rpc()
        .zmq()
        .block_interval("1s")
        .arg("--duration", "600s")
        .start();
    roles.add("simnet", simnet);
    let (rpc, zmq) = (at.rpc(), at.zmq());
    // On a fixed port, so that it can come back where the pool subscribes.
    let tap_addr = format!("127.0.0.1:{}", free_port());
    start_tap(&mut roles, &tap_addr, zmq);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pool.sqlite");
    let pool = roles.add(
        "pool",
        Role::start_on_node(
            "pool",
            rpc,
            &[
                "--sv1-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--zmq",
                &tap_addr,
                "--payout-address",
                PAYOUT,
                "--store",
                store.to_str().unwrap(),
            ],
        ),
    );
    let http = pool.line("http listening on");

    let s = wait_status(
        &roles,
        &http,
        "the subscription connects",
        Duration::from_secs(20),
        |s| s["dependencies"]["node"]["zmq"] == "connected" && s["serving"] == true,
    );
    let (_, metrics) = http_get(&http, "/metrics");
    assert!(metrics.contains("stratumlab_pool_zmq_up 1\n"), "{metrics}");
    // New tips arrive.
    let before = clean_jobs(&s);
    wait_status(&roles, &http, "tips by ZMQ", Duration::from_secs(20), |s| {
        clean_jobs(s) >= before + 2
    });

    roles.kill("tap");
    let down = wait_status(
        &roles,
        &http,
        "the subscription is seen down",
        Duration::from_secs(10),
        |s| s["dependencies"]["node"]["zmq"] == "down",
    );
    let (_, metrics) = http_get(&http, "/metrics");
    assert!(metrics.contains("stratumlab_pool_zmq_up 0\n"), "{metrics}");
    // Still serving, still following the chain: by long polling.
    let lost_at = clean_jobs(&down);
    let s = wait_status(
        &roles,
        &http,
        "tips by long polling while ZMQ is down",
        Duration::from_secs(20),
        |s| clean_jobs(s) >= lost_at + 3,
    );
    assert_eq!(s["serving"], true, "{s}");
    assert_eq!(s["dependencies"]["node"]["up"], true, "{s}");
    assert_eq!(s["dependencies"]["node"]["zmq"], "down", "{s}");

    start_tap(&mut roles, &tap_addr, zmq);
    // The backoff between attempts is capped at 5 s.
    let back = wait_status(
        &roles,
        &http,
        "the subscription reconnects",
        Duration::from_secs(20),
        |s| s["dependencies"]["node"]["zmq"] == "connected",
    );
    let returned_at = clean_jobs(&back);
    wait_status(
        &roles,
        &http,
        "tips once ZMQ is back",
        Duration::from_secs(20),
        |s| clean_jobs(s) >= returned_at + 2,
    );
    roles.stop("pool");
}
