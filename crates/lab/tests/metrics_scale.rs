//! The metric engine at the lab's scale: 10,000 devices for 120 s, read from event files.
//!
//! A measurement, not a check of speed: run it with
//! `cargo test --release -p lab --test metrics_scale -- --ignored --nocapture`; it prints the
//! events, the time to write them and the time to compute the metrics (also as events per
//! second), and checks only the counts.

mod metrics_support;

use std::time::{Duration, Instant};

use events::{Direction, EventSink, JobId, JobSent, Verdict};
use lab::metrics::{measure, ConfigRun, LinkSetup, LogSource, RoleKind, RoleLog, Site, Window};
use metrics_support::*;
use primitives::Target;

const DEVICES: u64 = 10_000;
const FLEETS: u64 = 2;
const SECONDS: u64 = 120;
const TEMPLATE_EVERY_S: u64 = 2;
const SHARE_EVERY_S: u64 = 5;

#[test]
#[ignore = "a measurement: run it with --release -- --ignored --nocapture"]
fn ten_thousand_devices_for_two_minutes() {
    let dir = tempfile::tempdir().unwrap();
    let window = Window::new(
        START,
        Duration::from_secs(SECONDS),
        0.1,
        Duration::from_secs(5),
    );
    let path = |n: &str| dir.path().join(format!("{n}.events"));
    let written = Instant::now();
    let simnet = EventSink::create(path("simnet"), "simnet", "").unwrap();
    let pool = EventSink::create(path("pool"), "pool", "sv1").unwrap();
    let tap = EventSink::create(path("tap"), "tap", "sv1").unwrap();
    let fleets: Vec<EventSink> = (0..FLEETS)
        .map(|i| EventSink::create(path(&format!("fleet{i}")), "fleet", "sv1").unwrap())
        .collect();
    let fleet_of = |d: u64| &fleets[(d % FLEETS) as usize];
    let mut events = 0u64;

    // Connections during the first second.
    for d in 0..DEVICES {
        fleet_of(d).emit_at(START + d * 100_000, opened(d));
        events += 1;
    }
    let mut seq = vec![0u64; DEVICES as usize];
    let mut prev = h(0);
    for t_s in 0..SECONDS {
        let t = START + t_s * S;
        if t_s % 10 == 0 {
            let hash = h(1_000 + t_s);
            simnet.emit_at(t, tip("network", hash, 900_000 + t_s as u32, prev));
            prev = hash;
            events += 1;
        }
        if t_s % TEMPLATE_EVERY_S == 0 {
            let fp = 10_000 + t_s;
            simnet.emit_at(t, template("pool", t_s, prev, 312_500_000 + t_s, fp));
            events += 1;
            for d in 0..DEVICES {
                let sent_at = t + 3 * MS + d * 1_000;
                pool.emit_at(
                    sent_at,
                    JobSent {
                        conn: d,
                        channel: None,
                        job_id: JobId::text(&format!("{fp:x}")),
                        template_id: Some(t_s),
                        fingerprint: Some(events::Fingerprint(fp)),
                        prev_hash: Some(prev),
                        target: Target::DIFFICULTY_1,
                        clean: t_s % 10 == 0,
                        future: false,
                    },
                );
                fleet_of(d).emit_at(sent_at + 73 * MS, job(d, fp, prev));
                events += 2;
            }
        }
        for d in 0..DEVICES {
            if (d + t_s) % SHARE_EVERY_S == 0 {
                let s = seq[d as usize];
                seq[d as usize] += 1;
                let at = t + d * 50_000;
                fleet_of(d).emit_at(at, sent(d, s, 1.0, Some(h(1 << 40 | d << 16 | s))));
                fleet_of(d).emit_at(at + 146 * MS, received(d, s, Verdict::Accepted));
                events += 2;
            }
            tap.emit_at(t + d * 1_000, bytes("wan", Direction::Up, 300));
            tap.emit_at(t + d * 1_000 + 1, bytes("wan", Direction::Down, 900));
            events += 2;
        }
        for f in &fleets {
            f.emit_at(t + S, hashes(1_000_000));
            events += 1;
        }
    }
    simnet.finish().unwrap();
    pool.finish().unwrap();
    tap.finish().unwrap();
    for f in fleets {
        f.finish().unwrap();
    }
    let written = written.elapsed();

    let role = |name: &str, kind, site| RoleLog {
        name: format!("sv1.{name}"),
        kind,
        site,
        source: LogSource::File(path(name)),
    };
    let mut logs = vec![
        role("pool", RoleKind::Pool, Site::Pool),
        role("tap", RoleKind::Tap, Site::Farm),
    ];
    for i in 0..FLEETS {
        logs.push(role(&format!("fleet{i}"), RoleKind::Fleet, Site::Farm));
    }
    let run = ConfigRun {
        name: "sv1".into(),
        logs,
        simnet: LogSource::File(path("simnet")),
        job_source_node: "pool".into(),
        pool_workers: None,
        pool_accepted: Vec::new(),
        window,
        links: LinkSetup {
            wan: "wan".into(),
            rtt: Duration::from_millis(145),
            lan_rtt: Duration::from_micros(500),
            farm_node_peer_link: None,
            node_endpoints: vec!["rpc".into(), "zmq".into()],
        },
        pool_shares: lab::metrics::PoolShares::None,
        block_interval: Duration::from_secs(10),
        template_interval: Duration::from_secs(TEMPLATE_EVERY_S),
        hash_budget_hps: 2e6,
        usage: Default::default(),
        unlogged: Default::default(),
        estimation: Default::default(),
    };
    let started = Instant::now();
    let m = measure(&run).unwrap();
    let r = m.results();
    let elapsed = started.elapsed();
    println!(
        "{events} events ({DEVICES} devices, {SECONDS} s): written in {:.2} s, measured in {:.2} s \
         ({:.2} M events/s)",
        written.as_secs_f64(),
        elapsed.as_secs_f64(),
        events as f64 / elapsed.as_secs_f64() / 1e6
    );
    println!(
        "time_to_job p50 {:?} ms, n {}; share_latency p50 {:?} ms, n {}; unmatched {}",
        r.time_to_job_ms.p50,
        r.time_to_job_ms.n,
        r.share_latency_ms.p50,
        r.share_latency_ms.n,
        r.unmatched_events
    );
    // Templates made in [12 s, 120 s): 54, each reaching every device.
    assert_eq!(r.time_to_job_ms.n, 54 * DEVICES);
    assert_eq!(r.unmatched_events, 0);
    assert_eq!(r.shares.accepted, r.shares.submitted);
    assert!(r.valid, "{:?}", r.invalid_reasons);
}
