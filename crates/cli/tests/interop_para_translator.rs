//! Interop: a real third-party SV1 miner, `para miner` (pinned at `lab::third_party::PARA`),
//! and our SV1 devices mine through our translator into our SV2 pool on simnet's Template
//! Provider. Passes when
//! - para completes its handshake with the translator (subscribe, authorize, configure with
//!   version rolling), submits rolled version bits, and the translator accepts its shares,
//!   refusing none but stale ones (21: a block superseded the job under a share in flight);
//! - every fleet device is ready and has shares accepted, none rejected but stale;
//! - the pool accepts shares the translator forwards, on the translator's one extended channel,
//!   and rejects none but stale; the translator's events agree: every share it forwarded got
//!   the pool's verdict, and it saw as many accepted as the pool accepted.
//!
//! Also said: how many of para's shares met the pool's target and were accepted by it (matched
//! by nonce).
//!
//! Ignored by default: it needs para (`bash scripts/install-tools.sh para` installs it). CI runs
//! it by name. Everything listens on 127.0.0.1; every process is stopped when the test ends.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::{
    assert_fleet_mined, dump_events, fleet_thread, rolled_submits, run_para, simnet, sv2_pool_on,
    PoolVerdicts, Roles, INTEROP_TRANSLATOR,
};

const DEVICES: u64 = 5;
const MINING: Duration = Duration::from_secs(20);

/// The nonces of the shares para found, from the JSON array it prints as it stops. Its log
/// lines may follow the array and may begin with "[" too: the array is the last line-initial
/// "[" that decodes to a list.
fn para_found(log: &str) -> Vec<u32> {
    let mut end = log.len();
    while let Some(start) = log[..end].rfind("\n[") {
        let mut stream =
            serde_json::Deserializer::from_str(&log[start + 1..]).into_iter::<serde_json::Value>();
        if let Some(Ok(serde_json::Value::Array(shares))) = stream.next() {
            return shares
                .iter()
                .filter_map(|s| u32::from_str_radix(s["nonce"].as_str()?, 16).ok())
                .collect();
        }
        end = start;
    }
    Vec::new()
}

#[test]
#[ignore = "needs para (scripts/install-tools.sh installs it); CI runs it by name"]
fn para_and_our_devices_mine_through_our_translator_into_our_pool() {
    let dir = tempfile::tempdir().unwrap();
    let mut roles = Roles::default();
    let pool_events = dir.path().join("pool.ev");
    let translator_events = dir.path().join("translator.ev");
    // No blocks of the rest of the network; a template every 2 s, so jobs flow; network
    // difficulty 0.002 (a block every ~8.6M hashes). Two forwarded shares a second on the
    // translator's channel, so that para's share of them is not left to luck.
    let (pool, _) = sv2_pool_on(
        &mut roles,
        dir.path(),
        simnet()
            .tdp()
            .arg("--network-difficulty", "0.002")
            .arg("--template-interval", "2s"),
        &[
            "--shares-per-minute",
            "120",
            "--events",
            pool_events.to_str().unwrap(),
        ],
        &[],
    );
    // A share every ~2 s for a 50 kH/s device (50e3 * 2 / 2^32). para hashes as fast as one
    // core lets it (about 1 MH/s), and vardiff raises its difficulty from the same start.
    let events = ["--events", translator_events.to_str().unwrap()];
    let translator = roles.add(
        "translator",
        pool.translator(&[&INTEROP_TRANSLATOR[..], &events[..]].concat()),
    );
    // Printed once the upstream channel is open.
    let sv1 = translator.line("sv1 listening on");

    let para = {
        let (dir, sv1) = (dir.path().to_owned(), sv1.clone());
        std::thread::spawn(move || run_para(&dir, &sv1, "para", &[], MINING))
    };
    let report = fleet_thread(
        &sv1,
        &DEVICES.to_string(),
        "250kH/s",
        &format!("{}s", MINING.as_secs()),
        &[
            "--profile",
            "asic",
            "--first-device-id",
            "100",
            "--drain",
            "5s",
        ],
        Duration::from_secs(120),
    )
    .join()
    .unwrap();
    let para_log = para.join().expect("para's thread");

    // para's view.
    let ok = para_log.matches("submitted successfully").count();
    let failed: Vec<&str> = para_log
        .lines()
        .filter(|l| l.contains("Failed to submit share"))
        .collect();
    let stale = failed.iter().filter(|l| l.contains(": 21: ")).count();
    let rolled = rolled_submits(&para_log);
    eprintln!(
        "para: {ok} shares accepted by the translator, {} refused ({stale} stale), {rolled} with \
         rolled version bits",
        failed.len()
    );
    assert!(ok > 0, "the translator accepted no share from para");
    assert_eq!(
        failed.len(),
        stale,
        "the translator refused para's shares: {:?}",
        &failed[..failed.len().min(3)]
    );
    assert!(
        rolled > 0,
        "para never submitted rolled version bits through the translator"
    );
    assert_fleet_mined(&report, DEVICES, "fleet");

    // The pool and the translator write their events as they stop.
    roles.stop("translator");
    roles.stop("pool");
    let v = PoolVerdicts::of(&dump_events(&pool_events));
    let mut sent = HashSet::new();
    let mut answered = HashSet::new();
    let mut acked = 0;
    for e in dump_events(&translator_events) {
        match e["kind"].as_str() {
            Some("share_sent") => {
                sent.insert(e["seq"].as_u64().expect("a share_sent without seq"));
            }
            Some("share_result") if e["perspective"] == "received" => {
                answered.insert(e["seq"].as_u64().expect("a share_result without seq"));
                acked += u64::from(e["verdict"] == "accepted");
            }
            _ => {}
        }
    }
    let found = para_found(&para_log);
    let upstream = found
        .iter()
        .filter(|n| v.accepted_nonces.contains(&u64::from(**n)))
        .count();
    let unanswered = sent.difference(&answered).count();
    eprintln!(
        "pool: {} shares accepted on {} channel(s), rejected {:?}; translator: {} forwarded, \
         {acked} acknowledged, {unanswered} unanswered; para: {} shares found, {upstream} of them \
         accepted by the pool",
        v.accepted,
        v.channels.len(),
        v.rejected,
        sent.len(),
        found.len()
    );
    assert_eq!(v.channels.len(), 1, "channels shares were judged on");
    assert!(v.accepted >= 1, "the pool accepted no forwarded share");
    assert_eq!(
        v.rejected_but_stale(),
        0,
        "the pool rejected forwarded shares for reasons other than stale: {:?}",
        v.rejected
    );
    assert_eq!(acked, v.accepted, "accepted by the translator's count");
    assert_eq!(unanswered, 0, "forwarded shares without the pool's verdict");
    assert!(
        found.len() >= ok,
        "para printed {} shares but logged {ok} accepted",
        found.len()
    );
}

#[test]
fn paras_shares_are_read_from_the_array_it_prints() {
    let log = "INFO start\n[not json\n[{\"nonce\": \"0000002a\"}, {\"nonce\": \"ff\"}]\n\
               INFO stopped [x]\n[3, oops";
    assert_eq!(para_found(log), vec![42, 255]);
    assert!(para_found("nothing").is_empty());
}
