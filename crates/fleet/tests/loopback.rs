//! The fleet over real loopback sockets against the in-crate test pool, which recomputes every
//! share and can hold its replies back by a known delay.

mod common;

use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use events::EventKind;
use fleet::testpool::{TestPool, TestPoolConfig};
use fleet::{Backoff, Fleet, FleetConfig, Profile};

fn fleet_config(pool: std::net::SocketAddr, devices: u32) -> FleetConfig {
    let mut c = FleetConfig::new(pool);
    c.devices = devices;
    c.connect_rate = 0.0;
    c.device.profile = Profile::Asic;
    c.device.worker_prefix = "bc1qtest.rig".into();
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_spread_over_source_addresses_and_latency_includes_the_reply_delay() {
    let pool = TestPool::start(TestPoolConfig {
        // 2^-20: one share per 4096 hashes.
        difficulty: 2f64.powi(-20),
        reply_delay: Duration::from_millis(20),
        ..TestPoolConfig::default()
    })
    .await
    .unwrap();
    let (_dir, events_path, sink, _) = common::event_file();
    let mut c = fleet_config(pool.addr(), 60);
    c.source_addrs = 3;
    c.hash_budget = 300_000.0;
    c.duration = Duration::from_secs(3);
    c.events = sink.clone();
    let report = Fleet::new(c).unwrap().run(std::future::pending()).await;
    sink.finish().unwrap();
    println!("{report}");

    // Every device connected and got ready, spread evenly over three source addresses.
    assert_eq!(report.connected, 60);
    assert_eq!(report.ready, 60);
    assert_eq!(report.connect_failures, 0);
    let peers = pool.stats().peers.lock().unwrap().clone();
    let want: Vec<IpAddr> = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(peers.keys().copied().collect::<Vec<_>>(), want);
    assert!(peers.values().all(|&n| n == 20), "{peers:?}");
    let users = pool.stats().users.lock().unwrap().clone();
    assert_eq!(users.len(), 60);
    assert!(users.contains("bc1qtest.rig0") && users.contains("bc1qtest.rig59"));

    // Real shares at the rate the budget buys, every one valid, every verdict counted.
    common::assert_sent_as_expected(&report, 4096.0);
    let s = &report.shares;
    assert!(s.sent > 50, "{}", s.sent);
    assert_eq!(s.accepted, s.sent, "{report:?}");
    assert_eq!(s.rejected + s.unanswered + s.dropped, 0);
    assert_eq!(pool.stats().valid.load(Relaxed), s.sent);
    assert_eq!(pool.stats().low_difficulty.load(Relaxed), 0);
    assert!(pool.stats().rolled.load(Relaxed) > 0, "version bits rolled");
    // Over the whole run, connects and first slices included (each device starts its slices
    // at a random phase), so somewhat below the budget; never above it.
    let achieved = report.hash_rate / report.hash_budget;
    assert!(
        (0.7..=1.02).contains(&achieved),
        "hash rate {:.0} for a budget of {:.0}",
        report.hash_rate,
        report.hash_budget
    );
    assert!((report.accepted_per_s - s.accepted as f64 / report.duration_s).abs() < 1e-9);

    // Latency: the pool's 20 ms hold, plus little.
    let l = &report.share_latency_ms;
    assert_eq!(l.n, s.accepted);
    let (p50, p99) = (l.p50.unwrap(), l.p99.unwrap());
    assert!((20.0..40.0).contains(&p50), "p50 {p50} ms");
    assert!((20.0..150.0).contains(&p99), "p99 {p99} ms");
    assert!(l.max.unwrap() >= p99 && l.mean.unwrap() >= 20.0);
    assert!(report.fleet_cpu_s > 0.0);

    // Events: connections, jobs with their fingerprints, shares and verdicts as received.
    let log = events::read_file(&events_path).unwrap();
    let count = |f: &dyn Fn(&EventKind) -> bool| common::count_events(&log, f);
    assert_eq!(count(&|k| matches!(k, EventKind::ConnectionOpened(_))), 60);
    assert!(
        count(&|k| matches!(k, EventKind::JobReceived(j)
        if j.fingerprint.is_some() && j.prev_hash.is_some() && !j.future))
            >= 60
    );
    assert_eq!(
        count(&|k| matches!(k, EventKind::ShareSent(_))) as u64,
        s.sent
    );
    common::assert_accepted_as_received(&log, s.accepted);
    let hashes: u64 = log
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::HashesDone(h) => Some(h.hashes),
            _ => None,
        })
        .sum();
    assert_eq!(hashes, report.hashes);
}

/// A pool that closes every connection at once (as a restart does) sees its devices come back
/// spread over the first backoff window, not in one burst, with connection pacing off so that
/// the spread is the devices' own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_come_back_after_the_pool_drops_them() {
    let devices = 1000;
    let pool = TestPool::start(TestPoolConfig::default()).await.unwrap();
    let (_dir, events_path, sink, _) = common::event_file();
    let mut c = fleet_config(pool.addr(), devices);
    c.device.connection.backoff = Backoff {
        base: Duration::from_secs(1),
        max: Duration::from_secs(2),
    };
    c.hash_budget = 50_000.0;
    c.source_addrs = 2;
    c.events = sink.clone();
    let fleet = Fleet::new(c).unwrap();
    let stats = fleet.stats();
    let kicked_at = std::sync::atomic::AtomicU64::new(0);
    let kick_and_wait = async {
        // Once all are ready, drop every connection; stop when all are back.
        common::until(|| stats.ready.load(Relaxed) >= devices as i64).await;
        kicked_at.store(events::now_ns(), Relaxed);
        pool.kick_all();
        common::until(|| {
            stats.connects.load(Relaxed) >= 2 * devices as u64
                && stats.ready.load(Relaxed) >= devices as i64
        })
        .await;
    };
    let report = tokio::time::timeout(Duration::from_secs(60), fleet.run(kick_and_wait))
        .await
        .expect("every device came back");
    sink.finish().unwrap();
    println!("{report}");
    let n = devices as u64;
    assert_eq!(report.connected, n, "{report:?}");
    assert_eq!(report.ready, n);
    assert_eq!(report.connects, 2 * n);
    assert_eq!(report.disconnects, n);
    assert_eq!(pool.stats().connections.load(Relaxed), 2 * n);
    assert_eq!(report.shares.rejected, 0);

    // When the devices came back, from the fleet's events.
    let kicked_at = kicked_at.load(Relaxed);
    let mut back: Vec<u64> = events::read_file(&events_path)
        .unwrap()
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ConnectionOpened(_)) && e.ts_ns > kicked_at)
        .map(|e| e.ts_ns)
        .collect();
    assert_eq!(back.len(), devices as usize);
    back.sort_unstable();
    let first = back[0] - kicked_at;
    let last = back[back.len() - 1] - kicked_at;
    assert!(first >= 500_000_000, "first back after {first} ns");
    let busiest = common::busiest_window(&mut back, 10_000_000);
    println!(
        "back between {:.0} and {:.0} ms after the kick; busiest 10 ms: {busiest} of {devices}",
        first as f64 / 1e6,
        last as f64 / 1e6
    );
    // Uniform over [0.5 s, 1 s] is 2% per 10 ms; a busy host bunches some wake-ups together.
    assert!(
        busiest <= devices as usize / 10,
        "{busiest} reconnects in 10 ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_devices_hold_their_connections_and_read_every_job() {
    let pool = TestPool::start(TestPoolConfig {
        branch_len: 12,
        ..TestPoolConfig::default()
    })
    .await
    .unwrap();
    let devices = 500;
    let mut c = fleet_config(pool.addr(), devices);
    c.device.profile = Profile::Bitaxe;
    c.source_addrs = 2;
    let fleet = Fleet::new(c).unwrap();
    let stats = fleet.stats();
    let notify_then_stop = async {
        common::until(|| stats.ready.load(Relaxed) >= devices as i64).await;
        for clean in [true, false, true] {
            pool.new_job(clean);
        }
        common::until(|| stats.jobs.load(Relaxed) >= 4 * devices as u64).await;
    };
    let report = tokio::time::timeout(Duration::from_secs(30), fleet.run(notify_then_stop))
        .await
        .expect("every device read every job");
    println!("{report}");
    assert_eq!(report.connected, devices as u64);
    assert_eq!(report.hashes, 0);
    assert_eq!(report.shares.sent, 0);
    assert_eq!(
        report.jobs_received,
        4 * devices as u64,
        "the first job and three more"
    );
    assert_eq!(report.protocol_errors, 0);
    let masks = pool.stats().requested_masks.lock().unwrap().clone();
    assert!(masks.iter().all(|&m| m == 0xffff_ffff));
    let firsts = pool.stats().first_methods.lock().unwrap().clone();
    assert!(firsts.iter().all(|m| m == "mining.configure"));
}
