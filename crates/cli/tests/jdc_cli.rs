//! Job declaration end to end: simnet, our SV2 pool with its JDS, our JDC in front of SV2
//! devices from `stratumlab fleet`. The devices mine the JDC's templates; the JDS checks each
//! declared one against the node's mempool; the pool accounts the shares that meet its target
//! under the declared jobs; a block the devices find reaches the node from the JDC.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::{dump_events, http_get, http_get_json, link_bytes, run_fleet, Role, Roles, PAYOUT};

/// Simnet (one node, RPC and TDP), the pool with its JDS, and the JDC on the same node.
struct Stack {
    roles: Roles,
    rpc: String,
    pool_http: String,
    /// Where the devices connect, and the JDC's authority public key they check.
    jdc: String,
    jdc_key: String,
    jdc_http: String,
    /// The JDS's arguments, to start it again on the same address with the same key.
    jds_args: Vec<String>,
    /// The pool's, likewise (its key is kept beside its store).
    pool_args: Vec<String>,
}

/// `simnet_events` and `pool_events` are written if given; `jdc_args` are added to the JDC's.
/// The JDC's provider address and more flags come from `jdc_farm(roles, tdp, rpc)`, given
/// simnet's provider and RPC addresses (the closure may start a tap in front of the provider,
/// and give the JDC the node's RPC; [`the_farms_provider`] does neither).
fn stack(
    dir: &Path,
    network_difficulty: &str,
    template_interval: &str,
    simnet_events: Option<&Path>,
    pool_events: Option<&Path>,
    jdc_args: &[&str],
    jdc_farm: impl FnOnce(&mut Roles, &str, &str) -> (String, Vec<String>),
) -> Stack {
    let key = dir.join("jd-token.key");
    std::fs::write(&key, "5a".repeat(32)).unwrap();
    let key = key.to_str().unwrap();
    let mut roles = Roles::default();
    let events = |p: Option<&Path>| -> Vec<String> {
        p.map(|p| vec!["--events".into(), p.to_str().unwrap().to_owned()])
            .unwrap_or_default()
    };

    let mut simnet = support::simnet()
        .tdp()
        .rpc()
        .arg("--network-difficulty", network_difficulty)
        // Templates with transactions, so that declarations carry some, but a tenth of the
        // mainnet-like backlog: a debug build's JDC and JDS would take seconds per template.
        .arg("--initial-txs", "300")
        .arg("--tx-rate", "20")
        .arg("--template-interval", template_interval)
        .arg("--duration", "120s");
    if let Some(p) = simnet_events {
        simnet = simnet.arg("--events", p.to_str().unwrap());
    }
    let (simnet, at) = simnet.start();
    roles.add("simnet", simnet);
    let (rpc, tdp, tdp_key) = (at.rpc().to_owned(), at.tdp(), at.tdp_key());

    let store = dir.join("pool.sqlite");
    let pool_events = events(pool_events);
    // On a fixed port, so that a test can start it again where the JDC connects.
    let pool_listen = format!("127.0.0.1:{}", support::free_port());
    let owned = support::sv2_pool_args(&pool_listen, tdp, tdp_key, &store);
    let mut args = support::strs(&owned);
    args.extend([
        "--jd-token-key",
        key,
        // A tenth of the devices' shares meet the pool's target.
        "--start-difficulty",
        "0.0001",
        "--duration",
        "120s",
    ]);
    args.extend(pool_events.iter().map(String::as_str));
    let pool_args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let pool = roles.add("pool", Role::start("pool", &args));
    let pool_key = pool.line("sv2 authority public key");
    let sv2 = pool.line("sv2 listening on");
    let pool_http = pool.line("http listening on");

    let jds_events = dir.join("jds.ev");
    let jds_listen = format!("127.0.0.1:{}", support::free_port());
    let jds_key_file = dir.join("jds-authority.key");
    let mut jds_args = support::jds_args(&rpc, &jds_listen, key);
    jds_args.extend(
        [
            "--authority-key-file",
            jds_key_file.to_str().unwrap(),
            "--events",
            jds_events.to_str().unwrap(),
            "--duration",
            "120s",
        ]
        .map(String::from),
    );
    let jds = roles.add(
        "jds",
        Role::start(
            "jds",
            &jds_args.iter().map(String::as_str).collect::<Vec<_>>(),
        ),
    );
    let jds_key = jds.line("jds authority public key");
    let jds_addr = jds.line("jds listening on");

    let (jdc_tdp, farm_args) = jdc_farm(&mut roles, tdp, &rpc);
    let owned = support::jdc_args(&jdc_tdp, tdp_key, &sv2, &pool_key, &jds_addr, &jds_key);
    let mut args = support::strs(&owned);
    args.extend([
        "--start-difficulty",
        "0.00001",
        "--http-listen",
        "127.0.0.1:0",
        "--duration",
        "120s",
    ]);
    args.extend_from_slice(jdc_args);
    args.extend(farm_args.iter().map(String::as_str));
    let jdc = roles.add("jdc", Role::start("jdc", &args));
    let jdc_key = jdc.line("sv2 authority public key");
    let downstream = jdc.line("sv2 listening on");
    let jdc_http = jdc.line("http listening on");
    Stack {
        roles,
        rpc,
        pool_http,
        jdc: downstream,
        jdc_key,
        jdc_http,
        jds_args,
        pool_args,
    }
}

/// The JDC on the farm's provider itself, and no more flags (a `jdc_farm` of [`stack`]).
fn the_farms_provider(_: &mut Roles, tdp: &str, _: &str) -> (String, Vec<String>) {
    (tdp.to_owned(), Vec::new())
}

/// [`stack`] in a temporary directory on a network where the fleet's 200 kH/s finds a block
/// every two seconds or so, with a template every second, and the fleet mining on the JDC for
/// `duration` meanwhile: the directory, the stack, and the fleet's thread (its report).
fn mining(
    jdc_args: &[&str],
    jdc_farm: impl FnOnce(&mut Roles, &str, &str) -> (String, Vec<String>),
    duration: &'static str,
) -> (
    tempfile::TempDir,
    Stack,
    std::thread::JoinHandle<serde_json::Value>,
) {
    let dir = tempfile::tempdir().unwrap();
    let stack = stack(dir.path(), "0.0001", "1s", None, None, jdc_args, jdc_farm);
    let (jdc, key) = (stack.jdc.clone(), stack.jdc_key.clone());
    let fleet = std::thread::spawn(move || fleet(&jdc, &key, duration));
    (dir, stack, fleet)
}

/// Four SV2 devices on the JDC at 200 kH/s for `duration`.
fn fleet(jdc: &str, key: &str, duration: &str) -> serde_json::Value {
    run_fleet(
        &[
            "--protocol",
            "sv2",
            "--authority-key",
            key,
            "--pool",
            jdc,
            "--devices",
            "4",
            "--hash-budget",
            "200kH/s",
            "--duration",
            duration,
            "--drain",
            "2s",
            "--json",
        ],
        Duration::from_secs(90),
    )
}

/// Stops the JDC and reads its summary line.
fn jdc_summary(roles: &mut Roles) -> serde_json::Value {
    let out = roles.stop("jdc");
    out.iter()
        .find_map(|l| l.strip_prefix("jdc summary "))
        .map(|j| serde_json::from_str(j).unwrap())
        .unwrap_or_else(|| panic!("no summary in {out:?}"))
}

#[test]
fn sv2_devices_mine_declared_jobs_through_the_jdc_into_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let pool_events = dir.path().join("pool.ev");
    let simnet_events = dir.path().join("simnet.ev");
    let jdc_events = dir.path().join("jdc.ev");
    let Stack {
        mut roles,
        pool_http,
        jdc,
        jdc_key,
        jdc_http,
        ..
    } = stack(
        dir.path(),
        "0.0005",
        "2s",
        Some(&simnet_events),
        Some(&pool_events),
        &[
            "--events",
            jdc_events.to_str().unwrap(),
            "--worker-tracking",
        ],
        the_farms_provider,
    );
    let report = fleet(&jdc, &jdc_key, "15s");
    let accepted = report["shares"]["accepted"].as_u64().unwrap();
    assert_eq!(report["ready"].as_u64(), Some(4), "{report}");
    assert!(
        accepted >= 5,
        "the JDC accepts the devices' shares: {report}"
    );
    let jdc_status = http_get_json(&jdc_http, "/api/status");
    assert_eq!(
        jdc_status["shares"]["accepted"].as_u64(),
        Some(accepted),
        "{jdc_status}"
    );
    // The JDC's own state beside its embedded pool's.
    let live = &jdc_status["jdc"];
    assert!(live["declared"].as_u64().unwrap() >= 1, "{jdc_status}");
    assert!(live["jobs_set"].as_u64().unwrap() >= 1, "{jdc_status}");
    assert_eq!(live["fallback"], serde_json::Value::Null, "{jdc_status}");
    assert_eq!(live["solo"], false, "{jdc_status}");

    let summary = jdc_summary(&mut roles);
    assert!(summary["declared"].as_u64().unwrap() >= 1, "{summary}");
    assert!(summary["jobs_set"].as_u64().unwrap() >= 1, "{summary}");
    assert_eq!(
        summary["declarations_refused"].as_u64(),
        Some(0),
        "{summary}"
    );
    assert_eq!(summary["jobs_refused"].as_u64(), Some(0), "{summary}");
    assert_eq!(summary["foreign"].as_u64(), Some(0), "{summary}");
    let submitted = summary["shares_submitted"].as_u64().unwrap();
    assert!(submitted >= 1, "{summary}");
    assert!(
        submitted < accepted,
        "only shares meeting the pool's target go up: {summary}"
    );

    // The pool accounted the JDC's shares under the declared jobs, and nothing else.
    let status = http_get_json(&pool_http, "/api/status");
    let pool_accepted = status["shares"]["accepted"].as_u64().unwrap();
    assert_eq!(
        pool_accepted,
        summary["shares_accepted"].as_u64().unwrap(),
        "{status}\n{summary}"
    );
    assert!(pool_accepted >= 1, "{status}");
    // Extension 0x0002: every share the JDC sent names its device, and the pool accounts each
    // device as a worker under the JDC's account, its shares summing to the JDC's.
    assert_eq!(
        summary["worker_shares"], summary["shares_submitted"],
        "{summary}"
    );
    let workers = http_get_json(&pool_http, "/api/workers");
    let credited: Vec<(&str, u64)> = workers["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["name"].as_str().unwrap(), w["accepted"].as_u64().unwrap()))
        .filter(|(_, accepted)| *accepted > 0)
        .collect();
    assert!(!credited.is_empty(), "{workers}");
    for (name, _) in &credited {
        assert!(name.starts_with("stratumlab-jdc."), "{workers}");
    }
    assert_eq!(
        credited.iter().map(|(_, n)| n).sum::<u64>(),
        pool_accepted,
        "{workers}"
    );
    // A block moves the tip under shares in flight: those may be stale, nothing else fails.
    assert_eq!(
        summary["shares_rejected"], summary["shares_stale"],
        "{summary}"
    );

    // Blocks the devices found went to the node from the JDC's side.
    let blocks = report["blocks_found"].as_u64().unwrap();
    roles.stop("jds");
    roles.stop("pool");
    roles.stop("simnet");
    let accepted_blocks = dump_events(&simnet_events)
        .iter()
        .filter(|e| e["kind"] == "block_result" && e["accepted"] == true)
        .count() as u64;
    assert!(
        accepted_blocks >= blocks.min(1),
        "{blocks} blocks found by the devices, {accepted_blocks} accepted by the node"
    );
    // Those on a template the JDS had acknowledged went to it too.
    assert!(
        summary["solutions_pushed"].as_u64().unwrap() <= blocks,
        "{summary}"
    );
    let pool_share_events = dump_events(&pool_events)
        .iter()
        .filter(|e| e["kind"] == "share_result" && e["verdict"] == "accepted")
        .count() as u64;
    assert_eq!(pool_share_events, pool_accepted);

    // The JDC and the JDS count their own socket bytes (docs/metrics.md roles.<name>.net_*_bytes),
    // Noise included, with the link's directions (up: toward the pool's site).
    let bytes = link_bytes;
    let jds_events = dir.path().join("jds.ev");
    let (jdc_up, jdc_down) = (
        bytes(&jdc_events, "jds", "up"),
        bytes(&jdc_events, "jds", "down"),
    );
    let (jds_up, jds_down) = (
        bytes(&jds_events, "jd", "up"),
        bytes(&jds_events, "jd", "down"),
    );
    // What the JDC wrote, the JDS read (it reads to the end of a closing connection); what
    // the JDS wrote last may be dropped by a JDC that is closing.
    assert!(
        jdc_up > 0 && jdc_down > 0,
        "jdc->jds {jdc_up} up, {jdc_down} down"
    );
    assert_eq!(jds_up, jdc_up, "bytes the JDC wrote and the JDS read");
    assert!(
        jds_down >= jdc_down,
        "the JDS wrote {jds_down}, the JDC read {jdc_down}"
    );
    let pool_up = bytes(&jdc_events, "upstream", "up");
    let pool_down = bytes(&jdc_events, "upstream", "down");
    assert!(
        pool_up > 0 && pool_down > 0,
        "jdc->pool {pool_up} up, {pool_down} down"
    );
    // The embedded pool's own miner-facing link is counted apart.
    assert!(bytes(&jdc_events, "sv2", "up") > 0);
}

/// One JSON-RPC call to simnet: its result.
fn rpc(addr: &str, method: &str, params: serde_json::Value) -> serde_json::Value {
    support::rpc_call(addr, method, params)["result"].clone()
}

/// The script the first output of block `hash`'s coinbase pays.
fn coinbase_payee(rpc_addr: &str, hash: &str) -> primitives::bitcoin::ScriptBuf {
    use primitives::bitcoin::consensus::deserialize;
    let hex = rpc(rpc_addr, "getblock", serde_json::json!([hash, 0]));
    let bytes = primitives::hex::decode(hex.as_str().unwrap()).unwrap();
    let block: primitives::bitcoin::Block = deserialize(&bytes).unwrap();
    block.txdata[0].output[0].script_pubkey.clone()
}

/// The farm's fallback payout address: a P2WSH whose program is 32 bytes of 0x11, on regtest.
const FARM: &str = "bcrt1qzyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zyg3zygs2ns5wu";

/// The JDC's flags to mine solo for the farm when the pool or the JDS is lost.
const FALLBACK: [&str; 2] = ["--fallback-payout-address", FARM];

/// The output script a regtest address pays.
fn script(address: &str) -> primitives::bitcoin::ScriptBuf {
    primitives::coinbase::payout_script(address, primitives::bitcoin::Network::Regtest).unwrap()
}

/// Who the chain's blocks paid, newest first, in runs of (paid the farm, how many); every
/// block paid either the farm or the pool.
fn payee_runs(rpc_addr: &str) -> Vec<(bool, usize)> {
    let (farm, pool_script) = (script(FARM), script(PAYOUT));
    let payees = payees_newest_first(rpc_addr);
    let mut runs: Vec<(bool, usize)> = Vec::new();
    for p in &payees {
        assert!(*p == farm || *p == pool_script, "{payees:?}");
        let is_farm = *p == farm;
        match runs.last_mut() {
            Some((f, n)) if *f == is_farm => *n += 1,
            _ => runs.push((is_farm, 1)),
        }
    }
    runs
}

/// Who the blocks mined in this run pay, newest first (simnet's chain starts above 900,000).
fn payees_newest_first(rpc_addr: &str) -> Vec<primitives::bitcoin::ScriptBuf> {
    let mut hash = rpc(rpc_addr, "getbestblockhash", serde_json::json!([]))
        .as_str()
        .unwrap()
        .to_owned();
    let mut payees = Vec::new();
    for _ in 0..80 {
        let header = rpc(rpc_addr, "getblockheader", serde_json::json!([hash, true]));
        if header["height"].as_u64().unwrap() <= 900_000 {
            break;
        }
        payees.push(coinbase_payee(rpc_addr, &hash));
        hash = header["previousblockhash"].as_str().unwrap().to_owned();
    }
    payees
}

#[test]
fn when_the_pool_dies_the_jdc_falls_back_to_solo_mining_for_the_farm() {
    killed_under_the_jdc("pool");
}

/// The JDS killed with SIGKILL mid-run: the JDC says so on every endpoint and falls back, and
/// the farm's blocks keep reaching the chain through its own node.
#[test]
fn when_the_jds_dies_the_jdc_falls_back_to_solo_mining_for_the_farm() {
    killed_under_the_jdc("jds");
}

/// `role` ("pool" or "jds") is killed with SIGKILL while the farm's devices mine on the JDC,
/// which finds blocks every two seconds or so: the JDC falls back to solo mining, and every
/// block after that pays the farm and reaches the chain through the farm's node.
fn killed_under_the_jdc(role: &'static str) {
    let (_dir, mut stack, fleet) = mining(&FALLBACK, the_farms_provider, "25s");
    let (roles, rpc_addr, jdc_http) = (&mut stack.roles, &stack.rpc, &stack.jdc_http);
    std::thread::sleep(Duration::from_secs(8));
    roles.kill(role);
    let report = fleet.join().unwrap();

    assert_eq!(report["disconnects"].as_u64(), Some(0), "{report}");
    // The status page says so while the JDC runs.
    let live = http_get_json(jdc_http, "/api/status")["jdc"].clone();
    assert_eq!(live["solo"], true, "{live}");
    let lost_prefix = if role == "jds" { "JDS" } else { "pool" };
    assert!(
        live["upstream_lost"]
            .as_str()
            .unwrap_or("")
            .starts_with(lost_prefix),
        "{live}"
    );
    // Which dependency failed, and since when, on every endpoint; the JDC still serves.
    // The one killed and the one the JDC then left both fail; the farm's provider works.
    let deps = http_get_json(jdc_http, "/api/status")["dependencies"].clone();
    for d in ["pool", "jds"] {
        assert_eq!(deps[d]["up"], false, "{deps}");
        assert_eq!(deps[d]["failures"], 1, "{deps}");
        assert!(deps[d]["for_s"].as_f64().unwrap() > 0.0, "{deps}");
    }
    assert!(
        deps[role]["error"]
            .as_str()
            .is_some_and(|e| e.contains("lost")),
        "{deps}"
    );
    assert_eq!(deps["tp"]["up"], true, "{deps}");
    let (code, health) = http_get(jdc_http, "/healthz");
    assert_eq!(code, 200, "{health}");
    assert!(
        health.contains(&format!("\n{role} failing for ")),
        "{health}"
    );
    let (_, metrics) = http_get(jdc_http, "/metrics");
    assert!(
        metrics.contains(&format!(
            "\nstratumlab_jdc_dependency_up{{dependency=\"{role}\"}} 0\n"
        )) && metrics.contains(&format!(
            "\nstratumlab_pool_dependency_up{{dependency=\"{role}\"}} 0\n"
        )),
        "{metrics}"
    );
    let summary = jdc_summary(roles);
    assert_eq!(summary["solo"], true, "{summary}");
    assert!(
        summary["fallback"]
            .as_str()
            .unwrap_or("")
            .contains(lost_prefix),
        "{summary}"
    );

    // The chain, newest first: blocks the farm found after the fallback pay the farm, those
    // before it paid the pool; never the other way round.
    let (farm, pool_script) = (script(FARM), script(PAYOUT));
    let payees = payees_newest_first(rpc_addr);
    assert_eq!(payees.first(), Some(&farm), "the tip pays the farm");
    let switched = payees
        .iter()
        .position(|p| *p != farm)
        .unwrap_or(payees.len());
    assert!(
        payees[switched..].iter().all(|p| *p == pool_script),
        "before the fallback every block paid the pool: {payees:?}"
    );
    if role != "jds" {
        roles.stop("jds");
    }
    roles.stop("simnet");
}

/// The JDS killed with SIGKILL and started again on its address: the JDC, mining solo for the
/// farm meanwhile, sets up the JDS and the pool again by itself. The pool's new channel comes
/// with another extranonce prefix, and the devices move into it without reconnecting: the
/// pool accepts their shares again, and the blocks after the rejoin pay the pool.
#[test]
fn when_the_jds_comes_back_the_jdc_rejoins_it_and_the_pool() {
    jds_killed_and_back(true);
}

/// As above without a fallback address: the devices mine for the pool throughout, and the
/// blocks they found while the JDS was down (which reached the chain through the farm's node)
/// are declared again and pushed to the JDS when it is back.
#[test]
fn blocks_found_while_the_jds_was_down_are_pushed_to_it_when_it_returns() {
    jds_killed_and_back(false);
}

fn jds_killed_and_back(solo: bool) {
    let jdc_args: &[&str] = if solo { &FALLBACK } else { &[] };
    let (dir, mut stack, fleet) = mining(jdc_args, the_farms_provider, "45s");
    let (roles, rpc_addr, jdc_http) = (&mut stack.roles, &stack.rpc, &stack.jdc_http);
    let jds_args = &mut stack.jds_args;
    let status = |http: &str| http_get_json(http, "/api/status");
    let wait_for = |what: &str, ok: &dyn Fn(&serde_json::Value) -> bool| -> serde_json::Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let s = status(jdc_http);
            if ok(&s) {
                return s;
            }
            assert!(std::time::Instant::now() < deadline, "{what}: {s}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let height = || {
        rpc(rpc_addr, "getblockcount", serde_json::json!([]))
            .as_u64()
            .unwrap()
    };
    let before = wait_for("shares accepted before the kill", &|s| {
        s["jdc"]["shares_accepted"].as_u64().unwrap() > 0
    })["jdc"]["shares_accepted"]
        .as_u64()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let killed_at = height();
    roles.kill("jds");
    wait_for("left after the kill", &|s| !s["jdc"]["fallback"].is_null());
    // Down for a while: the JDC's attempts fail meanwhile (and wait longer each time).
    std::thread::sleep(Duration::from_secs(8));
    let down = status(jdc_http);
    assert_eq!(down["jdc"]["solo"], solo, "{down}");
    assert!(
        down["jdc"]["rejoin_failures"].as_u64().unwrap() >= 1,
        "{down}"
    );
    assert_eq!(down["dependencies"]["jds"]["up"], false, "{down}");
    // The JDS again, on its address with its key; its events apart from the first run's.
    let events_again = dir.path().join("jds-again.ev");
    let at = jds_args.iter().position(|a| a == "--events").unwrap();
    jds_args[at + 1] = events_again.to_str().unwrap().to_owned();
    roles.add(
        "jds",
        Role::start(
            "jds",
            &jds_args.iter().map(String::as_str).collect::<Vec<_>>(),
        ),
    );
    let back = wait_for("rejoined", &|s| s["jdc"]["rejoined"] == 1);
    let rejoined_at = height();
    let jdc_now = &back["jdc"];
    assert_eq!(jdc_now["solo"], false, "{back}");
    assert!(jdc_now["fallback"].is_null(), "{back}");
    for d in ["pool", "jds"] {
        assert_eq!(back["dependencies"][d]["up"], true, "{back}");
    }
    let (code, health) = http_get(jdc_http, "/healthz");
    assert_eq!(code, 200, "{health}");
    assert!(!health.contains("failing"), "{health}");
    let (_, metrics) = http_get(jdc_http, "/metrics");
    for line in [
        "stratumlab_jdc_dependency_up{dependency=\"jds\"} 1",
        "stratumlab_jdc_dependency_up{dependency=\"pool\"} 1",
        "stratumlab_jdc_dependency_failures_total{dependency=\"jds\"} 1",
    ] {
        assert!(
            metrics.contains(&format!("\n{line}\n")),
            "{line}: {metrics}"
        );
    }
    let at_rejoin = jdc_now["shares_accepted"].as_u64().unwrap();
    // The pool accepts the devices' shares again, in the new channel's range.
    wait_for("shares accepted after the rejoin", &|s| {
        s["jdc"]["shares_accepted"].as_u64().unwrap() > at_rejoin
    });
    let report = fleet.join().unwrap();
    assert_eq!(report["disconnects"].as_u64(), Some(0), "{report}");
    let summary = jdc_summary(roles);
    assert_eq!(summary["rejoined"], 1, "{summary}");
    assert_eq!(summary["solo"], false, "{summary}");
    assert!(
        summary["declared"].as_u64().unwrap() > 0 && summary["jobs_set"].as_u64().unwrap() > 0,
        "{summary}"
    );

    // The chain, newest first: the pool's blocks after the rejoin, the farm's during the
    // outage (solo), the pool's before it.
    let runs = payee_runs(rpc_addr);
    let kinds: Vec<bool> = runs.iter().map(|(f, _)| *f).collect();
    let want: &[bool] = if solo {
        &[false, true, false]
    } else {
        &[false]
    };
    // The blocks found while the JDS was down, and those the JDS started again got.
    let outage: Vec<String> = (killed_at + 1..=rejoined_at)
        .map(|h| {
            rpc(rpc_addr, "getblockhash", serde_json::json!([h]))
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    roles.stop("jds");
    let again = events::read_file(&events_again).unwrap().events;
    let pushed: Vec<String> = again
        .iter()
        .filter_map(|e| match &e.kind {
            events::EventKind::BlockFound(b) => Some(b.hash.to_string()),
            _ => None,
        })
        .collect();
    // The JDS submitted each block found during the outage to its node, which already had it:
    // accepted, on the chain. (A block pushed as usual just before the JDS stops may still be
    // waiting for its answer, or have lost a race for its height: not asserted here.)
    let accepted: Vec<String> = again
        .iter()
        .filter_map(|e| match &e.kind {
            events::EventKind::BlockResult(r) if r.accepted => Some(r.hash.to_string()),
            _ => None,
        })
        .collect();
    assert!(
        outage
            .iter()
            .filter(|h| pushed.contains(h))
            .all(|h| accepted.contains(h)),
        "pushed {pushed:?}, accepted {accepted:?}"
    );
    let late = outage.iter().filter(|h| pushed.contains(h)).count();
    eprintln!(
        "blocks newest first, (paid the farm, how many): {runs:?}; found while the JDS was down: {}, of them pushed to it when it was back: {late} (JDC: {} pushed late); shares the pool accepted from the JDC: {before} before the kill, {at_rejoin} at the rejoin, {} in all; rejoin attempts that failed: {}",
        outage.len(),
        summary["solutions_pushed_late"],
        summary["shares_accepted"],
        down["jdc"]["rejoin_failures"]
    );
    assert_eq!(kinds, want, "who the blocks paid, newest first: {runs:?}");
    if solo {
        // Blocks that paid the farm are not the pool's to hear of.
        assert_eq!(summary["solutions_pushed_late"], 0, "{summary}");
    } else {
        assert!(!outage.is_empty(), "no block found while the JDS was down");
        assert!(late >= 1, "none of {outage:?} pushed: {pushed:?}");
        // The JDC counts those, and any found while it was pushing them after the rejoin.
        assert!(
            summary["solutions_pushed_late"].as_u64().unwrap() as usize >= late,
            "{summary}"
        );
        // A block on a template whose transactions never came back cannot be declared
        // again; all but one at most reach the JDS.
        assert!(
            late + 1 >= outage.len(),
            "{late} of {outage:?} pushed: {pushed:?}"
        );
    }
    roles.stop("simnet");
}

/// The pool killed with SIGKILL and started again on its address with its store (and so its
/// authority key): the JDC, mining solo for the farm meanwhile, sets up the JDS and the new
/// pool process again by itself. The devices stay connected throughout, the new pool accepts
/// their shares, and the blocks after the rejoin pay the pool again.
#[test]
fn when_the_pool_comes_back_the_jdc_rejoins_it() {
    let (_dir, mut stack, fleet) = mining(&FALLBACK, the_farms_provider, "60s");
    let (roles, rpc_addr, jdc_http) = (&mut stack.roles, &stack.rpc, &stack.jdc_http);
    let pool_args = &stack.pool_args;
    let limit = Duration::from_secs(30);
    let jdc_when = |what: &str, ok: &dyn Fn(&serde_json::Value) -> bool| {
        support::status_within(jdc_http, what, limit, String::new, ok)
    };
    jdc_when("shares accepted before the kill", &|s| {
        s["jdc"]["shares_accepted"].as_u64() > Some(0)
    });
    std::thread::sleep(Duration::from_secs(2));
    roles.kill("pool");
    jdc_when("solo after the kill", &|s| s["jdc"]["solo"] == true);
    // Down for a while: the JDC's attempts to set up the pool again fail meanwhile, and the
    // devices find a block for the farm (waited for: on two busy cores the first can take
    // longer than the outage would otherwise last).
    std::thread::sleep(Duration::from_secs(6));
    let farm = script(FARM);
    let deadline = Instant::now() + Duration::from_secs(30);
    while payees_newest_first(rpc_addr).first() != Some(&farm) {
        assert!(
            Instant::now() < deadline,
            "no block paid the farm within 30 s of the outage"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let down = http_get_json(jdc_http, "/api/status");
    assert!(down["jdc"]["rejoin_failures"].as_u64() >= Some(1), "{down}");
    assert_eq!(down["dependencies"]["pool"]["up"], false, "{down}");
    let (_, metrics) = http_get(jdc_http, "/metrics");
    assert!(
        metrics.contains("\nstratumlab_jdc_dependency_up{dependency=\"pool\"} 0\n"),
        "{metrics}"
    );

    let args: Vec<&str> = pool_args.iter().map(String::as_str).collect();
    let pool = roles.add("pool", Role::start("pool", &args));
    let pool_http = pool.line("http listening on");
    let back = jdc_when("rejoined", &|s| s["jdc"]["rejoined"] == 1);
    assert_eq!(back["jdc"]["solo"], false, "{back}");
    for d in ["pool", "jds"] {
        assert_eq!(back["dependencies"][d]["up"], true, "{back}");
    }
    // The new pool process accounts the devices' shares under its new channel.
    support::status_within(
        &pool_http,
        "the restarted pool accepts shares",
        limit,
        String::new,
        |s| s["shares"]["accepted"].as_u64() > Some(0),
    );
    let report = fleet.join().unwrap();
    assert_eq!(report["disconnects"].as_u64(), Some(0), "{report}");
    let summary = jdc_summary(roles);
    assert_eq!(summary["rejoined"], 1, "{summary}");
    assert_eq!(summary["solo"], false, "{summary}");

    // The chain, newest first: the pool's blocks after the rejoin, the farm's during the
    // outage, the pool's before it.
    let runs = payee_runs(rpc_addr);
    eprintln!(
        "blocks newest first, (paid the farm, how many): {runs:?}; rejoin attempts that failed while the pool was down: {}; shares the JDC had accepted: {}",
        down["jdc"]["rejoin_failures"], summary["shares_accepted"]
    );
    let kinds: Vec<bool> = runs.iter().map(|(f, _)| *f).collect();
    assert_eq!(
        kinds,
        [false, true, false],
        "who the blocks paid, newest first: {runs:?}"
    );
    roles.stop("jds");
    roles.stop("simnet");
}

/// The farm's provider lost under a JDC that has the farm's node beside it (`--node-rpc`): the
/// devices keep getting work, now from the node's `getblocktemplate`, and blocks they find
/// after the cut reach the chain through `submitblock`.
#[test]
fn when_the_farms_provider_is_cut_off_the_jdc_mines_on_from_its_node() {
    let (_dir, mut stack, fleet) = mining(
        &[],
        |roles, tdp, rpc| {
            let tap_addr = support::start_tap(roles, "127.0.0.1:0", tdp);
            (tap_addr, support::node_args(rpc))
        },
        "30s",
    );
    let (roles, rpc_addr, jdc_http) = (&mut stack.roles, &stack.rpc, &stack.jdc_http);
    std::thread::sleep(Duration::from_secs(8));
    let before = http_get_json(jdc_http, "/api/status");
    roles.kill("tap");
    let cut = std::time::Instant::now();
    // The JDC says where its work comes from now.
    let deadline = cut + Duration::from_secs(15);
    let switched = loop {
        let s = http_get_json(jdc_http, "/api/status");
        if s["dependencies"]["tp"]["up"] == false && s["work_source"] == "node" {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the JDC did not switch to its node: {s}\n{}",
            roles.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(switched["serving"], true, "{switched}");
    let report = fleet.join().unwrap();
    assert_eq!(report["disconnects"].as_u64(), Some(0), "{report}");
    // Blocks found after the cut went out through the node and are on the chain; one found
    // in the devices' last moments may still be on its way.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let after = loop {
        let s = http_get_json(jdc_http, "/api/status");
        if s["blocks"]["pending"] == 0 {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "blocks still pending: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let accepted = |s: &serde_json::Value| s["blocks"]["accepted"].as_u64().unwrap_or(0);
    assert!(
        accepted(&after) >= accepted(&switched) + 2,
        "before the cut {}, at the switch {}, at the end {}\n{}",
        before["blocks"],
        switched["blocks"],
        after["blocks"],
        roles.logs()
    );
    let tip = rpc(rpc_addr, "getblockcount", serde_json::json!([]));
    assert!(tip.as_u64().unwrap() >= 900_000 + accepted(&after), "{tip}");
    roles.stop("jdc");
}
