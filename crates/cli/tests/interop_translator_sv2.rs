//! Interop: the SV2 reference translator (`translator_sv2`, pinned at
//! `lab::third_party::TRANSLATOR_SV2`), fed by our SV1 devices, mines through our SV2 pool on
//! simnet's Template Provider: configuration C with the reference proxy in the middle. Two
//! translators at once on the same pool: "agg" puts every device on one extended channel (the
//! translator subdivides its extranonce among its devices), "per" opens one extended channel per
//! device on one upstream connection. Passes when
//! - the pool opens one extended channel for agg and one per device for per, sends jobs and
//!   judges shares on them, and every device is ready;
//! - the translators accept the devices' shares and the pool accepts the shares they forward,
//!   none rejected for a reason but stale (by the fleets' counts and the pool's events);
//! - the verdicts the translators received are the pool's (acknowledged shares,
//!   SubmitShares.Error count);
//! - a device finds a block and it goes device -> translator -> pool -> simnet, which takes it
//!   as its new tip;
//! - agg negotiates extension 0x0002 (worker-specific hashrate tracking) with the pool, and the
//!   pool credits its shares to the devices' workers, which add up to what agg was
//!   acknowledged.
//!
//! Ignored by default: it needs translator_sv2 (`bash scripts/install-tools.sh translator_sv2`
//! installs it). CI runs it by name. Everything listens on 127.0.0.1 (the translators' configs
//! are the lab's: no LAN range, no monitoring server); every process is stopped when the test
//! ends.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use lab::third_party::{TranslatorSv2Config, TRANSLATOR_SV2, TRANSLATOR_SV2_READY};
use support::{
    assert_fleet_mined, dump_events, found_blocks, run_fleet, simnet, submitted_tips, sv2_pool_on,
    verdicts_received, PoolVerdicts, Roles, ThirdParty,
};

const DEVICES: u64 = 10;

#[test]
#[ignore = "needs translator_sv2 (scripts/install-tools.sh installs it); CI runs it by name"]
fn the_reference_translator_mines_through_our_pool_aggregated_and_per_channel() {
    let dir = tempfile::tempdir().unwrap();
    let mut roles = Roles::default();
    let (pool_events, simnet_events) = (dir.path().join("pool.ev"), dir.path().join("simnet.ev"));
    // No blocks of the rest of the network, so every new tip is one the devices found (network
    // difficulty 0.001: a block every ~4.3M hashes, seconds of the fleets' 1 MH/s); a template
    // every 2 s, so jobs on the current tip flow too.
    let (pool, _) = sv2_pool_on(
        &mut roles,
        dir.path(),
        simnet()
            .tdp()
            .arg("--network-difficulty", "0.001")
            .arg("--template-interval", "2s")
            .arg("--events", simnet_events.to_str().unwrap()),
        &["--events", pool_events.to_str().unwrap()],
        &[],
    );
    // Aggregating, the translator widens its request by 2 bytes (its per-device index): 2 + 2
    // fits the 4 bytes our pool lets a channel roll, 4 + 2 would be refused.
    let mut translators = Vec::new();
    for (name, aggregate, en2, extensions) in [("agg", true, 2, &[2][..]), ("per", false, 4, &[])] {
        let sub = dir.path().join(name);
        std::fs::create_dir(&sub).unwrap();
        let listen = lab::third_party::free_loopback_port().unwrap();
        let config = TranslatorSv2Config {
            listen,
            upstream: pool.sv2.parse().unwrap(),
            authority_public_key: &pool.key,
            user_identity: &format!("stratumlab-{name}"),
            device_hash_rate: 50_000.0,
            shares_per_minute: 30.0,
            aggregate_channels: aggregate,
            extranonce2_size: en2,
            extensions,
            monitoring: None,
        };
        let mut t = ThirdParty::with_config(&TRANSLATOR_SV2, &sub, &config.toml());
        t.wait_for(
            &format!("{TRANSLATOR_SV2_READY}{listen}"),
            Duration::from_secs(60),
        );
        translators.push((name, t, listen, sub));
    }

    // One SV1 fleet per translator (S19-class: version rolling through mining.configure).
    let fleets: Vec<_> = translators
        .iter()
        .enumerate()
        .map(|(i, (name, _, listen, sub))| {
            let (listen, events, name) = (listen.to_string(), sub.join("fleet.ev"), *name);
            let first = (i * 100).to_string();
            let handle = std::thread::spawn(move || {
                run_fleet(
                    &[
                        "--pool",
                        &listen,
                        "--profile",
                        "asic",
                        "--devices",
                        &DEVICES.to_string(),
                        "--first-device-id",
                        &first,
                        "--hash-budget",
                        "500kH/s",
                        "--duration",
                        "30s",
                        "--drain",
                        "5s",
                        "--json",
                        "--events",
                        events.to_str().unwrap(),
                    ],
                    Duration::from_secs(120),
                )
            });
            (name, handle, sub.join("fleet.ev"))
        })
        .collect();
    let mut blocks = 0;
    let mut found = HashSet::new();
    for (name, handle, events) in fleets {
        let report = handle.join().expect("a fleet's thread");
        assert_fleet_mined(&report, DEVICES, name);
        blocks += report["blocks_found"].as_u64().unwrap();
        found.extend(found_blocks(&events));
    }

    // translator_sv2 answers its devices itself: a share it forwarded last may still have its
    // SubmitShares.Success on the way. The roles get a moment, then stop (the pool writes its
    // events as it stops).
    std::thread::sleep(Duration::from_secs(2));
    let mut acked = 0;
    let mut errors = 0;
    let mut agg_acked = 0;
    for (name, mut t, _, _) in translators {
        t.stop(Duration::from_secs(10));
        let (a, e) = verdicts_received(&t.log(), "");
        eprintln!("translator {name}: {a} acknowledged, {e} errors");
        acked += a;
        errors += e;
        if name == "agg" {
            agg_acked = a;
        }
    }
    // Extension 0x0002: agg's shares are its devices' (translator_sv2 names each by the worker
    // part of its SV1 user, `worker<index>`), kept under agg's account.
    let agg_workers: Vec<(String, u64)> = support::credited_workers(&pool.http)
        .into_iter()
        .filter(|(name, _)| name.starts_with("stratumlab-agg."))
        .collect();
    eprintln!("agg's workers on the pool: {agg_workers:?}");
    let device = |name: &str| {
        name.strip_prefix("stratumlab-agg.worker")
            .and_then(|i| i.parse::<u64>().ok())
            .filter(|i| *i < DEVICES)
    };
    assert!(
        agg_workers.len() >= 2 && agg_workers.iter().all(|(name, _)| device(name).is_some()),
        "agg's shares are credited to its devices: {agg_workers:?}"
    );
    assert_eq!(
        agg_workers.iter().map(|(_, n)| n).sum::<u64>(),
        agg_acked,
        "agg's workers add up to what agg was acknowledged: {agg_workers:?}"
    );
    let pool_log = roles.stop_for_log("pool");
    roles.stop("simnet");
    let opened = |name: &str| {
        let user = format!("user=stratumlab-{name}");
        pool_log
            .lines()
            .filter(|l| l.contains("sv2: extended channel opened") && l.contains(&user))
            .count() as u64
    };
    assert_eq!(opened("agg"), 1, "agg: extended channels opened");
    assert_eq!(opened("per"), DEVICES, "per: extended channels opened");

    let v = PoolVerdicts::of(&dump_events(&pool_events));
    let tips = submitted_tips(&simnet_events);
    let chained = found
        .iter()
        .filter(|h| v.submitted.contains(*h) && tips.contains(*h))
        .count();
    eprintln!(
        "pool: {} jobs sent on channels, {} shares accepted, rejected {:?}; translators: {acked} \
         acknowledged, {errors} errors; {} blocks submitted, {chained} traced from a device's \
         share to simnet's tip",
        v.jobs,
        v.accepted,
        v.rejected,
        v.submitted.len()
    );
    assert!(v.jobs >= 1, "the pool sent no job on an SV2 channel");
    assert!(v.accepted >= 1, "the pool accepted no share");
    assert_eq!(
        v.rejected_but_stale(),
        0,
        "the pool rejected shares for reasons other than stale: {:?}",
        v.rejected
    );
    assert_eq!(acked, v.accepted, "acknowledged by the translators' count");
    assert_eq!(
        errors,
        v.rejected_total(),
        "share errors by the translators' count"
    );
    assert!(blocks >= 1, "no device found a block");
    assert!(!v.submitted.is_empty(), "the pool submitted no block");
    assert!(
        chained >= 1,
        "no block went device -> translator -> pool -> simnet tip"
    );
}

#[test]
fn verdicts_are_read_from_the_translators_log() {
    let log = "Received: SubmitSharesSuccess(channel_id=1, new_submits_accepted_count=3, x)\n\
               Received: SubmitSharesSuccess(new_submits_accepted_count=2)\n\
               Received: SubmitSharesError(stale)\n\
               Sent: SubmitSharesExtended(new_submits_accepted_count=9)";
    assert_eq!(verdicts_received(log, ""), (5, 1));
    let marked =
        "upstream_message_handler: Received: SubmitSharesSuccess(new_submits_accepted_count=4)\n\
                  other: Received: SubmitSharesSuccess(new_submits_accepted_count=7)\n\
                  upstream_message_handler: Received: SubmitSharesError(x)";
    assert_eq!(
        verdicts_received(marked, "upstream_message_handler"),
        (4, 1)
    );
}
