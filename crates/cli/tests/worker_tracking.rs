//! Worker-specific hashrate tracking (SV2 extension 0x0002) end to end: SV1 devices mine
//! through `stratumlab translator --worker-tracking` on one aggregated channel into our SV2
//! pool, which accounts every forwarded share to the device that found it.
//!
//! Passes when the translator negotiated the extension, and the pool's `/api/workers` credits
//! each device's worker with exactly the shares of that device the pool accepted: traced share
//! by share, from the fleet's events (device, hash) through the translator's (hash, sequence
//! number, the pool's verdict).

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use support::{
    credited_workers, dump_events, fleet_thread, status_when, sv2_pool_on_simnet, Roles,
};

const DEVICES: u64 = 4;

#[test]
fn each_devices_shares_are_credited_to_its_worker_through_one_aggregated_channel() {
    let dir = tempfile::tempdir().unwrap();
    let (t_events, f_events) = (
        dir.path().join("translator.ev"),
        dir.path().join("fleet.ev"),
    );
    let mut roles = Roles::default();
    let pool = sv2_pool_on_simnet(&mut roles, dir.path(), None);
    let (translator, sv1, t_http) = pool.fleet_translator(
        &mut roles,
        &[
            "--worker-tracking",
            // The devices' own names are under this account: the pool keeps them as they are.
            "--user-identity",
            "stratumlab",
            "--events",
            t_events.to_str().unwrap(),
        ],
    );
    assert!(
        translator.log().contains("upstream extensions negotiated"),
        "{}",
        translator.log()
    );
    let (devices, events) = (
        DEVICES.to_string(),
        ["--events", f_events.to_str().unwrap()],
    );
    let fleet = fleet_thread(
        &sv1,
        &devices,
        "200kH/s",
        "20s",
        &events,
        Duration::from_secs(70),
    );
    let report = fleet.join().unwrap();
    assert_eq!(report["connected"].as_u64(), Some(DEVICES), "{report}");
    let t = status_when(&t_http, "no verdict awaited", |s| {
        s["devices"]["connected"] == 0 && s["upstream_shares"]["in_flight"] == 0
    });
    assert_eq!(t["upstream"]["extensions"], serde_json::json!([2]), "{t}");
    let got = credited_workers(&pool.http);
    roles.stop("translator");

    // Which device found each hash, and which hashes the pool accepted from the translator.
    let mut finder: HashMap<String, u64> = HashMap::new();
    for e in dump_events(&f_events) {
        if e["kind"] == "share_sent" {
            if let Some(h) = e["hash"].as_str() {
                finder.insert(h.to_owned(), e["device"].as_u64().unwrap());
            }
        }
    }
    let t = dump_events(&t_events);
    let sent: HashMap<u64, String> = t
        .iter()
        .filter(|e| e["kind"] == "share_sent")
        .map(|e| {
            (
                e["seq"].as_u64().unwrap(),
                e["hash"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for e in &t {
        if e["kind"] == "share_result"
            && e["perspective"] == "received"
            && e["verdict"] == "accepted"
        {
            let hash = &sent[&e["seq"].as_u64().unwrap()];
            let device = finder
                .get(hash)
                .unwrap_or_else(|| panic!("no device sent {hash}"));
            *want
                .entry(format!("stratumlab.worker{device}"))
                .or_default() += 1;
        }
    }
    eprintln!("per worker, pool {got:?}; traced {want:?}");
    assert!(
        want.len() >= 2,
        "shares from at least two devices reached the pool: {want:?}"
    );
    assert_eq!(got, want);
    roles.stop("pool");
    roles.stop("simnet");
}
