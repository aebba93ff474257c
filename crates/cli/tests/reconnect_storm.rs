//! A reconnect storm: every miner back within a second of a pool's restart. Every listening
//! socket of every role (the pool's SV1, SV2 and HTTP ports, the translator's, the JDS's, the
//! tap's and simnet's) must hold such a burst in its accept queue while the role is busy,
//! rather than drop handshakes that the clients then wait seconds to resend
//! (docs/operations.md, "The connection edge").

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::{jds_args, simnet, strs, sv2_pool_on, Role, Roles};
use testkit::net::fill_accept_queue;

/// More than the 128 that tokio's and std's own `bind` ask for, and within the kernel's
/// default cap (`net.core.somaxconn`, 4096).
const STORM: u32 = 600;

/// Stops `role` (SIGSTOP: it accepts nothing), connects [`STORM`] clients to each of `addrs`,
/// checks that each listener's queue holds them all, then lets the role go on and closes them.
fn storm(roles: &mut Roles, name: &str, addrs: &[(&str, String)]) {
    let cap = edge::listen::kernel_cap().expect("/proc/sys/net/core/somaxconn");
    roles.signal(name, libc::SIGSTOP);
    let mut held = Vec::new();
    for (what, addr) in addrs {
        let addr: SocketAddr = addr
            .parse()
            .unwrap_or_else(|_| panic!("{name} {what}: {addr}"));
        held.push(fill_accept_queue(addr, STORM.min(cap)));
    }
    roles.signal(name, libc::SIGCONT);
    drop(held);
}

#[test]
fn every_roles_listeners_hold_a_reconnect_storm_in_their_accept_queue() {
    let dir = tempfile::tempdir().unwrap();
    let mut roles = Roles(Vec::new());
    let sv1_port = support::free_port().to_string();
    let sv1_listen = format!("127.0.0.1:{sv1_port}");
    let (pool, at) = sv2_pool_on(
        &mut roles,
        dir.path(),
        simnet().rpc().tdp().zmq(),
        &["--sv1-listen", &sv1_listen],
        &[],
    );
    storm(
        &mut roles,
        "simnet",
        &[
            ("rpc", at.rpc().to_owned()),
            ("tdp", at.tdp().to_owned()),
            ("zmq", at.zmq().to_owned()),
        ],
    );
    storm(
        &mut roles,
        "pool",
        &[
            ("sv1", sv1_listen.clone()),
            ("sv2", pool.sv2.clone()),
            ("http", pool.http.clone()),
        ],
    );

    let translator = roles.add("translator", pool.translator(&[]));
    let translator_at = translator.lines_starting(&["sv1 listening on", "http listening on"]);
    storm(
        &mut roles,
        "translator",
        &[
            ("sv1", translator_at["sv1 listening on"].clone()),
            ("http", translator_at["http listening on"].clone()),
        ],
    );

    let tap = support::start_tap(&mut roles, "127.0.0.1:0", &pool.sv2);
    storm(&mut roles, "tap", &[("listen", tap)]);

    let key_file = dir.path().join("jd.key");
    std::fs::write(&key_file, format!("{}\n", "5a".repeat(32))).unwrap();
    let mut args = jds_args(at.rpc(), "127.0.0.1:0", key_file.to_str().unwrap());
    args.extend(["--http-listen", "127.0.0.1:0"].map(String::from));
    let jds = roles.add("jds", Role::start("jds", &strs(&args)));
    let jds_at = jds.lines_starting(&["jds listening on", "http listening on"]);
    storm(
        &mut roles,
        "jds",
        &[
            ("listen", jds_at["jds listening on"].clone()),
            ("http", jds_at["http listening on"].clone()),
        ],
    );

    // Each role serves on after its storm, and shows the queue each of its miner-facing
    // listeners got: what the role asked for, capped by the kernel, not the 128 of a plain bind.
    let cap = edge::listen::kernel_cap().expect("/proc/sys/net/core/somaxconn");
    let limit = cap.min(edge::listen::ACCEPT_BACKLOG);
    for (name, http, listeners) in [
        ("pool", &pool.http, &["sv1", "sv2"][..]),
        ("translator", &translator_at["http listening on"], &["sv1"]),
        ("jds", &jds_at["http listening on"], &["jd"]),
    ] {
        // The JDS reports its node once its mempool view first fills.
        support::healthy_within(http, Duration::from_secs(15), || {
            format!("{name}\n{}", roles.logs())
        });
        let status = support::http_get_json(http, "/api/status");
        let queues = &status["admission"]["accept_queues"];
        let listed: Vec<&str> = queues
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no accept_queues in {status}"))
            .iter()
            .map(|q| {
                assert_eq!(q["limit"], limit, "{name}: {q}");
                assert!(
                    q["waiting"].as_u64().unwrap() <= u64::from(limit),
                    "{name}: {q}"
                );
                q["listener"].as_str().unwrap()
            })
            .collect();
        assert_eq!(listed, listeners, "{name}");
        let (_, metrics) = support::http_get(http, "/metrics");
        for l in listeners {
            let line = format!("_admission_accept_queue_limit{{listener=\"{l}\"}} {limit}\n");
            assert!(
                metrics.contains(&line),
                "{name}: {line:?} missing from\n{metrics}"
            );
        }
        assert!(
            metrics.contains("_admission_netns_listen_overflows_total "),
            "{name}: {metrics}"
        );
    }
    for (name, role) in &mut roles.0 {
        assert!(role.wait_done(Duration::ZERO).is_none(), "{name} ended");
    }
}
