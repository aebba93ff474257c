//! SV2 devices over real loopback sockets against the in-crate SV2 test pool, which recomputes
//! every share, acknowledges them in batches, and can hold its replies back by a known delay.

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use events::{EventKind, JobId, Reason, Verdict};
use fleet::sv2_testpool::{Sv2TestPool, Sv2TestPoolConfig};
use fleet::{Backoff, Fleet, FleetConfig, Profile, Protocol};
use primitives::{Difficulty, Target};
use sv2::AuthorityKeys;

fn fleet_config(pool: std::net::SocketAddr, devices: u32, profile: Profile) -> FleetConfig {
    let mut c = FleetConfig::new(pool);
    c.protocol = Protocol::Sv2;
    c.devices = devices;
    c.connect_rate = 0.0;
    c.sv2.profile = profile;
    c.sv2.worker_prefix = Some("bc1qtest.rig".into());
    c
}

fn target(log2_difficulty: i32) -> Target {
    Difficulty::new(2f64.powi(log2_difficulty))
        .unwrap()
        .to_target()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_mine_through_new_jobs_and_tips_and_every_verdict_is_counted() {
    let pool = Sv2TestPool::start(Sv2TestPoolConfig {
        // 2^-20: one share per 4096 hashes.
        target: target(-20),
        reply_delay: Duration::from_millis(20),
        batch_size: 3,
        ..Sv2TestPoolConfig::default()
    })
    .await
    .unwrap();
    let devices = 40;
    let (_dir, events_path, sink, _) = common::event_file();
    let mut c = fleet_config(pool.addr(), devices, Profile::Asic);
    c.source_addrs = 2;
    c.hash_budget = 400_000.0;
    c.drain = Duration::from_millis(500);
    c.events = sink.clone();
    let fleet = Fleet::new(c).unwrap();
    let stats = fleet.stats();
    let script = async {
        common::until(|| stats.ready.load(Relaxed) >= devices as i64).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        pool.new_job();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        pool.new_tip();
        tokio::time::sleep(Duration::from_millis(1000)).await;
    };
    let report = tokio::time::timeout(Duration::from_secs(30), fleet.run(script))
        .await
        .expect("the run ends");
    sink.finish().unwrap();
    println!("{report}");
    let p = pool.stats();

    // Every device set up, opened its channel with its identity and its share of the budget.
    assert_eq!(report.protocol, "sv2");
    assert_eq!((report.connected, report.ready), (40, 40));
    assert_eq!(report.connect_failures, 0);
    assert_eq!(report.protocol_errors, 0);
    let users = p.users.lock().unwrap().clone();
    assert_eq!(users.len(), 40);
    assert!(users.contains("bc1qtest.rig0") && users.contains("bc1qtest.rig39"));
    let rates = p.nominal_hash_rates.lock().unwrap().clone();
    assert!(rates.iter().all(|&r| r == 10_000.0), "{rates:?}");
    // Jobs: the channel's first (future) job, one on the same tip, one for the new tip.
    assert_eq!(report.jobs_received, 3 * 40);

    // Real shares, every one valid at the pool; verdicts counted from batched acknowledgements.
    common::assert_sent_as_expected(&report, 4096.0);
    let s = &report.shares;
    assert!(s.sent > 100, "{}", s.sent);
    let valid = p.valid.load(Relaxed);
    let stale = p.stale.load(Relaxed);
    assert_eq!(p.low_difficulty.load(Relaxed), 0);
    assert_eq!(p.invalid.load(Relaxed) + p.invalid_job.load(Relaxed), 0);
    assert_eq!(p.duplicate.load(Relaxed), 0);
    assert!(p.rolled.load(Relaxed) > 0, "version bits rolled");
    assert_eq!(valid + stale, s.sent, "the pool judged every share sent");
    // Only a share in flight as the tip changed can be stale.
    assert_eq!(s.rejected, stale);
    assert_eq!(
        s.rejected_by_reason.get("stale").copied().unwrap_or(0),
        stale
    );
    // Accepted shares left in an unfinished batch get no verdict: fewer than a batch each.
    assert!(
        s.accepted <= valid && valid - s.accepted < 3 * 40,
        "{valid} {s:?}"
    );
    assert_eq!(s.accepted + s.rejected + s.unanswered + s.dropped, s.sent);
    assert_eq!(s.unanswered, valid - s.accepted);

    // Latency: the pool's 20 ms hold plus, for a share early in a batch, the wait for the
    // batch's last share: at least the hold, always.
    let l = &report.share_latency_ms;
    assert_eq!(l.n, s.accepted + s.rejected);
    assert!(l.p50.unwrap() >= 20.0, "{l:?}");

    // Events: a future job then its activation for every device, and the same jobs, shares
    // and verdicts the counters saw, on channel 1 with numeric job ids.
    let log = events::read_file(&events_path).unwrap();
    let count = |f: &dyn Fn(&EventKind) -> bool| common::count_events(&log, f);
    assert_eq!(count(&|k| matches!(k, EventKind::ConnectionOpened(_))), 40);
    assert_eq!(
        count(&|k| matches!(k, EventKind::JobReceived(j) if j.future && j.prev_hash.is_none())),
        80,
        "the first job and the new tip's, future"
    );
    assert_eq!(
        count(&|k| matches!(k, EventKind::JobReceived(j) if !j.future && j.prev_hash.is_some())),
        40
    );
    assert_eq!(
        count(&|k| matches!(k, EventKind::JobActivated(a) if a.channel == Some(1))),
        80
    );
    assert!(log.events.iter().all(|e| match &e.kind {
        EventKind::JobReceived(j) => j.channel == Some(1) && matches!(j.job_id, JobId::Num(_)),
        _ => true,
    }));
    assert_eq!(
        count(&|k| matches!(k, EventKind::ShareSent(s) if s.channel == Some(1) && s.hash.is_some()))
            as u64,
        s.sent
    );
    common::assert_accepted_as_received(&log, s.accepted);
    assert_eq!(
        count(&|k| matches!(k, EventKind::ShareResult(r)
            if r.verdict == Verdict::Rejected(Reason::Stale))) as u64,
        stale
    );
    assert_eq!(
        count(&|k| matches!(k, EventKind::TargetChanged(t)
            if t.channel == Some(1) && t.target == target(-20))),
        40
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_follow_reconnect_and_come_back_after_being_dropped() {
    let pool = Sv2TestPool::start(Sv2TestPoolConfig::default())
        .await
        .unwrap();
    // Each connection is a Noise handshake: a millisecond or more of CPU per side even
    // optimized, several in a test build.
    let devices = 100;
    let mut c = fleet_config(pool.addr(), devices, Profile::Bitaxe);
    c.sv2.connection.backoff = Backoff {
        base: Duration::from_millis(500),
        max: Duration::from_secs(1),
    };
    c.hash_budget = 20_000.0;
    let fleet = Fleet::new(c).unwrap();
    let stats = fleet.stats();
    let n = devices as u64;
    let script = async {
        let stats = &stats;
        let all_back = |connects: u64| async move {
            common::until(|| {
                stats.connects.load(Relaxed) >= connects
                    && stats.ready.load(Relaxed) >= devices as i64
            })
            .await;
        };
        all_back(n).await;
        pool.reconnect_all();
        all_back(2 * n).await;
        pool.kick_all();
        all_back(3 * n).await;
    };
    let report = tokio::time::timeout(Duration::from_secs(30), fleet.run(script))
        .await
        .expect("every device came back twice");
    println!("{report}");
    assert_eq!((report.connected, report.ready), (n, n));
    assert_eq!(report.connects, 3 * n);
    assert_eq!(report.disconnects, 2 * n);
    assert_eq!(pool.stats().connections.load(Relaxed), 3 * n);
    assert_eq!(pool.stats().channels.load(Relaxed), 3 * n);
    assert_eq!(report.protocol_errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_certified_by_another_authority_is_never_mined_for() {
    let other =
        AuthorityKeys::from_secret("SeLqn3UAUoRymWmwW7axrzJK7JfNaBR2cHCryA6cFsgFkHEF").unwrap();
    let pool = Sv2TestPool::start(Sv2TestPoolConfig {
        keys: other,
        ..Sv2TestPoolConfig::default()
    })
    .await
    .unwrap();
    let (_dir, events_path, sink, _) = common::event_file();
    let mut c = fleet_config(pool.addr(), 5, Profile::Cpu);
    c.hash_budget = 10_000.0;
    c.duration = Duration::from_millis(800);
    c.events = sink.clone();
    let report = Fleet::new(c).unwrap().run(std::future::pending()).await;
    sink.finish().unwrap();
    assert_eq!(report.ready, 0);
    assert_eq!(report.hashes, 0);
    assert!(
        report.disconnects >= 5 && report.protocol_errors >= 5,
        "{report:?}"
    );
    assert_eq!(pool.stats().channels.load(Relaxed), 0);
    let log = events::read_file(&events_path).unwrap();
    assert!(log.events.iter().any(
        |e| matches!(&e.kind, EventKind::ConnectionClosed(c) if c.reason.as_str() == "certificate")
    ));

    // Trusting that authority, the same devices mine.
    let mut c = fleet_config(pool.addr(), 5, Profile::Cpu);
    c.sv2.authority_key = other.public_bytes();
    c.hash_budget = 10_000.0;
    c.duration = Duration::from_millis(800);
    let report = Fleet::new(c).unwrap().run(std::future::pending()).await;
    assert_eq!(report.ready, 5);
    assert!(report.hashes > 0);
}
