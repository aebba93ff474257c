//! Interop: the SV2 reference Job Declarator Client (`jd_client_sv2`, pinned at
//! `lab::third_party::JD_CLIENT_SV2`) declares jobs to our JDS and mines them on our SV2 pool,
//! with simnet's Template Provider as its template source and simnet's JSON-RPC as the JDS's
//! node: configuration B with the reference JDC in the middle, our SV2 devices (standard
//! channels) below it. Passes when
//! - the JDC completes the Noise handshakes and SetupConnection with the pool, the JDS and
//!   simnet's TDP, and serves every device a channel;
//! - the JDS allocates tokens and accepts declared jobs (DeclareMiningJob.Success by its count
//!   and the JDC's log; none refused), and the pool accepts the JDC's SetCustomMiningJob (none
//!   refused); the JDC never falls back;
//! - the devices' shares are accepted by the JDC, and the pool accepts the shares the JDC
//!   forwards, none rejected but stale; the acknowledgements the JDC received agree with the
//!   pool's verdicts;
//! - a block a device found becomes simnet's tip, and every block the JDS rebuilt from a
//!   PushSolution, or the pool from a share on a declared job, is a block a device found (the
//!   same hash: a different coinbase or transaction set would hash differently).
//!
//! Ignored by default: it needs jd_client_sv2 (`bash scripts/install-tools.sh jd_client_sv2`
//! installs it). CI runs it by name. Everything listens on 127.0.0.1 (the JDC's config: no LAN
//! range, no monitoring server, no miner telemetry); every process is stopped when the test
//! ends.

mod support;

use std::collections::HashSet;
use std::io::Read;
use std::time::Duration;

use lab::third_party::{JdClientSv2Config, JD_CLIENT_SV2};
use support::{
    assert_fleet_mined, authority_pair, dump_events, found_blocks, jds_args, run_fleet, simnet,
    submitted_tips, sv2_pool_on, verdicts_received, PoolVerdicts, Role, Roles, ThirdParty, PAYOUT,
};

const DEVICES: u64 = 8;

/// What the JDS's summary line says: tokens allocated, jobs declared, refused, transactions
/// requested, solutions pushed, blocks submitted, accepted.
fn jds_summary(printed: &str) -> Option<[u64; 7]> {
    let line = printed.lines().find(|l| l.starts_with("jds stopped: "))?;
    let count = |what: &str| -> Option<u64> {
        let before = &line[..line.find(what)?];
        before
            .split_whitespace()
            .last()?
            .trim_start_matches('(')
            .parse()
            .ok()
    };
    Some([
        count(" tokens allocated")?,
        count(" jobs declared")?,
        count(" refused")?,
        count(" transactions requested")?,
        count(" solutions pushed")?,
        count(" blocks submitted")?,
        count(" accepted)")?,
    ])
}

#[test]
#[ignore = "needs jd_client_sv2 (scripts/install-tools.sh installs it); CI runs it by name"]
fn the_reference_jdc_declares_to_our_jds_and_mines_on_our_pool() {
    let dir = tempfile::tempdir().unwrap();
    let mut roles = Roles::default();
    let at = |name: &str| dir.path().join(name);
    let token_key = at("jd-token.key");
    let mut secret = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut secret))
        .unwrap();
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&token_key, hex).unwrap();
    let authority = at("authority.key");
    let (token_key, authority) = (token_key.to_str().unwrap(), authority.to_str().unwrap());
    let events = |name: &str| at(&format!("{name}.ev"));
    let (pool_events, jds_events, simnet_events, fleet_events) = (
        events("pool"),
        events("jds"),
        events("simnet"),
        events("fleet"),
    );

    // simnet: the TDP (for the JDC and the pool) and JSON-RPC (the JDS's node). No blocks of
    // the rest of the network (network difficulty 0.001: a block every ~4.3M hashes, seconds of
    // the fleet's 1 MH/s); a fee-driven template every 2 s, with transactions from its mempool,
    // so that declared jobs name transactions the JDS must know or ask for. The pool and the
    // JDS sign with one fresh pair (the JDC takes one key for both upstreams), which the JDC
    // signs its own certificates with too; their logs at debug for the declared-job lines.
    let (pool, node) = sv2_pool_on(
        &mut roles,
        dir.path(),
        simnet()
            .tdp()
            .rpc()
            .arg("--network-difficulty", "0.001")
            .arg("--template-interval", "2s")
            .arg("--events", simnet_events.to_str().unwrap()),
        &[
            "--jd-token-key",
            token_key,
            "--authority-key-file",
            authority,
            "--events",
            pool_events.to_str().unwrap(),
        ],
        &[("RUST_LOG", "info,pool::sv2::session=debug")],
    );
    let mut jds_args = jds_args(node.rpc(), "127.0.0.1:0", token_key);
    jds_args.extend(
        [
            "--events",
            jds_events.to_str().unwrap(),
            "--authority-key-file",
            authority,
        ]
        .map(String::from),
    );
    let jds_args: Vec<&str> = jds_args.iter().map(String::as_str).collect();
    let jds = roles.add(
        "jds",
        Role::start_with_env("jds", &jds_args, &[("RUST_LOG", "info,jds=debug")]),
    );
    let mut printed = jds.lines_starting(&["jds listening on", "jds authority public key"]);
    let jds_listen = printed.remove("jds listening on").unwrap();
    let jds_key = printed.remove("jds authority public key").unwrap();
    assert_eq!(pool.key, jds_key, "the pool's and the JDS's authority keys");
    let (public, secret) = authority_pair(std::path::Path::new(authority));

    let listen = lab::third_party::free_loopback_port().unwrap();
    let config = JdClientSv2Config {
        listen,
        authority_public_key: &public,
        authority_secret_key: &secret,
        pool: pool.sv2.parse().unwrap(),
        jds: jds_listen.parse().unwrap(),
        upstream_key: &pool.key,
        user_identity: "stratumlab-jdc",
        template_provider: node.tdp().parse().unwrap(),
        template_provider_key: node.tdp_key(),
        payout_address: PAYOUT,
        shares_per_minute: 30.0,
    };
    let jdc_dir = at("jdc");
    std::fs::create_dir(&jdc_dir).unwrap();
    let mut jdc = ThirdParty::with_config(&JD_CLIENT_SV2, &jdc_dir, &config.toml());
    // It opens its channel on the pool when the first device opens one on it.
    jdc.wait_port(listen, Duration::from_secs(90));

    let report = run_fleet(
        &[
            "--protocol",
            "sv2",
            "--pool",
            &listen.to_string(),
            "--authority-key",
            &public,
            "--profile",
            "asic",
            "--devices",
            &DEVICES.to_string(),
            "--hash-budget",
            "1MH/s",
            "--duration",
            "40s",
            "--drain",
            "5s",
            "--json",
            "--events",
            fleet_events.to_str().unwrap(),
        ],
        Duration::from_secs(150),
    );
    assert_fleet_mined(&report, DEVICES, "fleet");
    let blocks_found = report["blocks_found"].as_u64().unwrap();

    // The JDC stops first: if the pool went at the same time, the JDC could see its upstream
    // close before its own signal and fall back, which counts as a failure below.
    jdc.stop(Duration::from_secs(10));
    let jdc_log = jdc.log();
    eprintln!("jd_client_sv2 logged {} lines", jdc_log.lines().count());
    let jds_log = roles.stop_for_log("jds");
    let pool_log = roles.stop_for_log("pool");
    roles.stop("simnet");

    let summary = jds_summary(&jds_log).unwrap_or_else(|| {
        let tail: Vec<&str> = jds_log.lines().rev().take(5).collect();
        panic!("the JDS logged no summary line: {tail:?}")
    });
    let [tokens, declared, refused, txs_requested, pushed, _, _] = summary;
    let count = |log: &str, what: &str| log.matches(what).count();
    let jdc_declared = count(&jdc_log, "Received: DeclareMiningJobSuccess");
    let jdc_declare_errors = count(&jdc_log, "Received: DeclareMiningJobError");
    let jdc_custom = count(&jdc_log, "Received: SetCustomMiningJobSuccess");
    let jdc_custom_errors = count(&jdc_log, "Received: SetCustomMiningJobError");
    let fallback: usize = [
        "preparing fallback",
        "fallback triggered",
        "requested fallback",
        "Starting fallback",
    ]
    .iter()
    .map(|w| count(&jdc_log, w))
    .sum();
    let (jdc_acked, jdc_share_errors) = verdicts_received(&jdc_log, "upstream_message_handler");
    let pool_custom = count(&pool_log, "sv2: declared job accepted");
    let pool_custom_refused = count(&pool_log, "sv2: declared job refused");

    let v = PoolVerdicts::of(&dump_events(&pool_events));
    let jds_submitted: HashSet<String> = dump_events(&jds_events)
        .iter()
        .filter(|e| e["kind"] == "block_submitted")
        .filter_map(|e| e["hash"].as_str().map(str::to_owned))
        .collect();
    let tips = submitted_tips(&simnet_events);
    let found = found_blocks(&fleet_events);
    let device_tips = found.intersection(&tips).count();
    let pool_device_tips = found
        .iter()
        .filter(|h| v.submitted.contains(*h) && tips.contains(*h))
        .count();
    // A block the pool or the JDS rebuilt from a declared job must be the very block a device
    // found: a new tip, or one that lost a race at its height to another device's block (the
    // node then answers the copy "duplicate" and keeps the other tip).
    let not_found = |blocks: &HashSet<String>| {
        blocks
            .iter()
            .filter(|h| !found.contains(*h) && !tips.contains(*h))
            .count()
    };
    eprintln!(
        "jds: {tokens} tokens, {declared} jobs declared, {refused} refused, {txs_requested} \
         transactions requested, {pushed} solutions pushed; jdc: {jdc_declared} declared, \
         {jdc_custom} custom jobs set, {jdc_acked} acknowledged, {jdc_share_errors} share errors, \
         {fallback} fallbacks; pool: {pool_custom} declared jobs accepted, {} shares accepted, \
         rejected {:?}, {} blocks submitted; devices: {blocks_found} blocks, {device_tips} new \
         tips ({pool_device_tips} submitted by the pool)",
        v.accepted,
        v.rejected,
        v.submitted.len()
    );
    assert_eq!(
        (jdc_declare_errors, refused),
        (0, 0),
        "the JDS refused declared jobs"
    );
    assert!(
        declared >= 1 && jdc_declared >= 1,
        "no job declared (DeclareMiningJob.Success)"
    );
    assert_eq!(
        (jdc_custom_errors, pool_custom_refused),
        (0, 0),
        "the pool refused custom jobs"
    );
    assert!(
        jdc_custom >= 1 && pool_custom >= 1,
        "no custom job set on the pool (SetCustomMiningJob.Success)"
    );
    assert_eq!(fallback, 0, "jd_client_sv2 fell back");
    assert!(v.accepted >= 1, "the pool accepted no share from the JDC");
    assert_eq!(
        v.rejected_but_stale(),
        0,
        "the pool rejected the JDC's shares: {:?}",
        v.rejected
    );
    assert!(
        jdc_acked >= 1 && jdc_acked <= v.accepted,
        "the JDC saw {jdc_acked} shares acknowledged, the pool accepted {}",
        v.accepted
    );
    assert_eq!(
        jdc_share_errors,
        v.rejected_total(),
        "share errors by the JDC's count"
    );
    assert!(blocks_found >= 1, "no device found a block");
    assert_eq!(
        not_found(&v.submitted),
        0,
        "blocks the pool recorded from declared jobs that no device found"
    );
    assert_eq!(
        not_found(&jds_submitted),
        0,
        "blocks the JDS rebuilt from PushSolution that no device found"
    );
    assert!(
        device_tips >= 1,
        "no block a device found became simnet's tip"
    );
}

#[test]
fn the_jds_summary_line_is_read() {
    let line = "jds stopped: 3 connections (0 open), 4 tokens allocated, 12 jobs declared, 1 \
                refused, 7 transactions requested, 2 solutions pushed, 2 blocks submitted (1 \
                accepted), 1 pending";
    assert_eq!(
        jds_summary(&format!("other\n{line}\n")),
        Some([4, 12, 1, 7, 2, 2, 1])
    );
    assert_eq!(jds_summary("jds stopped: nothing"), None);
}
