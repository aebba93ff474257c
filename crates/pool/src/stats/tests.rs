use super::*;

const D: f64 = 4.0;
/// 10 shares/s of difficulty 4.
const EXPECTED_HS: f64 = 10.0 * D * HASHES_PER_SHARE;

fn rel_err(got: f64, want: f64) -> f64 {
    (got - want).abs() / want
}

/// A small seeded generator (splitmix64) for Poisson arrivals.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

fn pool() -> (Arc<PoolStats>, Arc<WorkerRegistry>) {
    let stats = PoolStats::new(Timestamp::from_millis(1_000));
    let workers = WorkerRegistry::new(&stats);
    (stats, workers)
}

/// Shares every 100 ms, exactly, for five simulated minutes.
///
/// Tolerance 0.5%: the estimator's deterministic errors are all far below it. Crediting each
/// share at the start of its 64 ms tick makes it look up to 64 ms older: −0.05% on average on
/// the one-minute figure. Between two shares the sum saw-tooths by one share's worth, d out of
/// d·λ·τ = 1/(λτ) = 1/600 for one minute (±0.08%), 1/6000 for ten. The start-up correction
/// (dividing by 1 − e^(−age/τ)) is exact for a steady rate, so the ten-minute figure needs no
/// more slack at five minutes than the one-minute one.
#[test]
fn hashrate_matches_a_steady_share_rate() {
    let (stats, workers) = pool();
    let start = stats.start();
    let w = workers.attach("alice.rig1", start);
    let mut now = start;
    for _ in 0..3_000 {
        now = now.plus_millis(100);
        stats.share_accepted(&w, D, now);
    }
    let s = stats.snapshot(now);
    assert_eq!(s.uptime_ms, 300_000);
    assert!(
        rel_err(s.hashrate_1m, EXPECTED_HS) < 0.005,
        "{}",
        s.hashrate_1m
    );
    assert!(
        rel_err(s.hashrate_10m, EXPECTED_HS) < 0.005,
        "{}",
        s.hashrate_10m
    );
    assert!(
        rel_err(s.shares_per_second, 10.0) < 0.005,
        "{}",
        s.shares_per_second
    );
    assert_eq!(s.accepted, 3_000);
    assert_eq!(s.accepted_work, 12_000.0);
    // One worker doing all the work has the pool's rate.
    assert!(rel_err(w.hashrate_1m(now), EXPECTED_HS) < 0.005);
    assert!(rel_err(w.hashrate_10m(now), EXPECTED_HS) < 0.005);
    // Reading between shares changes nothing beyond the saw-tooth.
    let mid = stats.snapshot(now.plus_millis(50));
    assert!(rel_err(mid.hashrate_1m, EXPECTED_HS) < 0.005);
}

/// Poisson arrivals at the same mean rate, for five simulated minutes.
///
/// The estimate is then a random variable. For Poisson arrivals of rate λ the decayed sum
/// W = Σ d·e^(−(t−tᵢ)/τ) has mean λdτ(1 − e^(−age/τ)) and variance λd²(τ/2)(1 − e^(−2age/τ)),
/// so its relative standard deviation is 1/√(2λτ) = 2.9% for τ = 1 min at λ = 10/s, and
/// √(λ·300·(1−e^(−1)))/(λ·600·(1−e^(−0.5))) = 1.8% for τ = 10 min at age 5 min. The bounds are
/// four standard deviations (12% and 8%): whatever the seed, a correct estimator fails them
/// less than once in ten thousand runs, and an estimator off by a constant factor (a wrong τ,
/// a missing 2³², a start-up bias) fails them every time.
#[test]
fn hashrate_matches_a_poisson_share_rate() {
    for seed in [1u64, 2, 3] {
        let (stats, workers) = pool();
        let w = workers.attach("bob", stats.start());
        let mut rng = Rng(seed);
        let mut t = 0.0f64; // seconds
        let mut n = 0u64;
        loop {
            t += -rng.unit().ln() / 10.0;
            if t >= 300.0 {
                break;
            }
            stats.share_accepted(&w, D, stats.start().plus_millis((t * 1000.0) as u64));
            n += 1;
        }
        let s = stats.snapshot(stats.start().plus_millis(300_000));
        assert!((2_700..3_300).contains(&n), "{n} arrivals");
        assert!(
            rel_err(s.hashrate_1m, EXPECTED_HS) < 0.12,
            "seed {seed}: {}",
            s.hashrate_1m
        );
        assert!(
            rel_err(s.hashrate_10m, EXPECTED_HS) < 0.08,
            "seed {seed}: {}",
            s.hashrate_10m
        );
    }
}

/// A busy pool: 4,000 shares/s of difficulty 1,000 for five minutes, so that each share is
/// 1/(λτ) = 1/2,400,000 of the ten-minute sum. The sum must still resolve every share: an
/// `f32` sum rounds each addition the same way and reads 1.04% high here (checked by
/// simulating its rounding), five times the tolerance.
#[test]
fn hashrate_holds_at_high_share_rates() {
    let (stats, workers) = pool();
    let w = workers.attach("proxy", stats.start());
    let mut now = stats.start();
    for ms in 1..=300_000u64 {
        now = stats.start().plus_millis(ms);
        for _ in 0..4 {
            stats.share_accepted(&w, 1_000.0, now);
        }
    }
    let want = 4_000.0 * 1_000.0 * HASHES_PER_SHARE;
    let s = stats.snapshot(now);
    assert!(
        rel_err(s.hashrate_1m, want) < 0.002,
        "{}",
        s.hashrate_1m / want
    );
    assert!(
        rel_err(s.hashrate_10m, want) < 0.002,
        "{}",
        s.hashrate_10m / want
    );
    assert!(rel_err(w.hashrate_10m(now), want) < 0.002);
    assert_eq!(s.accepted_work, 1.2e9);
}

#[test]
fn hashrate_decays_when_shares_stop() {
    let (stats, workers) = pool();
    let w = workers.attach("carol", stats.start());
    let mut now = stats.start();
    for _ in 0..3_000 {
        now = now.plus_millis(100);
        stats.share_accepted(&w, D, now);
    }
    // One time constant of silence: e^-1 of the rate.
    let s = stats.snapshot(now.plus_millis(60_000));
    assert!(rel_err(s.hashrate_1m, EXPECTED_HS * (-1f64).exp()) < 0.01);
    // Ten minutes of silence: the one-minute figure is gone, the ten-minute one at e^-1.
    let later = now.plus_millis(600_000);
    let s = stats.snapshot(later);
    assert!(s.hashrate_1m < EXPECTED_HS * 1e-4);
    assert!(w.hashrate_1m(later) < EXPECTED_HS * 1e-4);
    // The ten-minute sum had reached 1 − e^-0.5 of its level; a silent τ takes e^-1 of that,
    // and the age correction (1 − e^-1.5) is applied to the whole.
    let want = EXPECTED_HS * (1.0 - (-0.5f64).exp()) * (-1f64).exp() / (1.0 - (-1.5f64).exp());
    assert!(
        rel_err(s.hashrate_10m, want) < 0.01,
        "{} vs {want}",
        s.hashrate_10m
    );
}

#[test]
fn rejected_shares_count_by_reason_and_toward_shares_per_second() {
    let (stats, workers) = pool();
    let w = workers.attach("dave", stats.start());
    let now = stats.start().plus_millis(1_000);
    stats.share_rejected(Some(&w), Reason::Stale, now);
    stats.share_rejected(Some(&w), Reason::Stale, now);
    stats.share_rejected(Some(&w), Reason::Duplicate, now);
    stats.share_rejected(None, Reason::Unauthorized, now);
    stats.share_accepted(&w, 2.0, now);
    let s = stats.snapshot(now);
    assert_eq!(s.rejected.get(Reason::Stale), 2);
    assert_eq!(s.rejected.get(Reason::Duplicate), 1);
    assert_eq!(s.rejected.get(Reason::Unauthorized), 1);
    assert_eq!(s.rejected.get(Reason::LowDifficulty), 0);
    assert_eq!(s.rejected.total(), 4);
    assert_eq!(s.rejected.iter().count(), 7);
    assert_eq!(s.accepted, 1);
    assert_eq!(w.rejected(), 3);
    assert_eq!(w.accepted(), 1);
    assert_eq!(w.last_share(), Some(now));
    // Five shares in the first second: read at τ/10 (the floor of the age correction).
    assert!(s.shares_per_second > 0.0);
}

#[test]
fn nonsense_difficulties_do_not_poison_the_sums() {
    let (stats, workers) = pool();
    let w = workers.attach("eve", stats.start());
    let now = stats.start().plus_millis(10);
    for d in [f64::NAN, f64::INFINITY, -1.0, 0.0] {
        stats.share_accepted(&w, d, now);
    }
    stats.share_accepted(&w, 8.0, now);
    let s = stats.snapshot(now);
    assert_eq!(s.accepted, 5);
    assert_eq!(s.accepted_work, 8.0);
    assert!(s.hashrate_1m.is_finite() && s.hashrate_10m.is_finite());
    assert_eq!(w.accepted_work(), 8.0);
}

#[test]
fn counters_and_gauges() {
    let (stats, _) = pool();
    stats.connection_opened();
    stats.connection_opened();
    stats.connection_closed();
    stats.connection_closed();
    stats.connection_closed(); // a stray close leaves the gauge at 0
    stats.vardiff_changed();
    stats.job_created(true);
    stats.job_created(false);
    stats.job_created(false);
    stats.block_found();
    stats.block_found();
    stats.block_found();
    stats.block_found();
    stats.block_result(true);
    stats.block_result(false);
    stats.block_fate(BlockFate::Orphaned);
    stats.share_processing(1_500);
    stats.share_processing(50);
    let s = stats.snapshot(stats.start());
    assert_eq!(s.connections, 0);
    assert_eq!(s.connections_opened, 2);
    assert_eq!(s.vardiff_changes, 1);
    assert_eq!(
        s.jobs,
        JobCounts {
            created: 3,
            clean: 1
        }
    );
    assert_eq!(
        s.blocks,
        BlockCounts {
            submitted: 4,
            accepted: 1,
            rejected: 1,
            orphaned: 1,
            declared: 0,
        }
    );
    assert_eq!(s.blocks.pending(), 1);
    let h = stats.processing();
    assert_eq!(h.count(), 2);
    assert_eq!(h.sum_ns, 1_550);
    assert_eq!(s.store, None);
    let report = StoreReport {
        commits: 3,
        records: 300,
        queue_len: 7,
        batch_window_ms: 20,
        last_commit_us: 450,
        failures: 0,
        failing_since: None,
    };
    stats.store(report);
    assert_eq!(stats.snapshot(stats.start()).store, Some(report));
    assert!(stats.serving() != Serving::No(NotServing::Store));
    // A failing store: its figures say since when, and the pool says it does not serve
    // (unless it is shutting down, which says more).
    let failing = StoreReport {
        failures: 1,
        failing_since: Some(Timestamp::from_millis(40)),
        ..report
    };
    stats.set_serving(Serving::Yes);
    stats.store(failing);
    assert_eq!(stats.snapshot(stats.start()).store, Some(failing));
    assert_eq!(stats.serving(), Serving::No(NotServing::Store));
    stats.set_serving(Serving::No(NotServing::ShuttingDown));
    assert_eq!(stats.serving(), Serving::No(NotServing::ShuttingDown));
    stats.set_serving(Serving::Yes);
    stats.store(report);
    assert_eq!(stats.serving(), Serving::Yes);
}

#[test]
fn serving_and_node_state_round_trip() {
    let (stats, _) = pool();
    let s = stats.snapshot(stats.start());
    assert_eq!(s.serving, Serving::No(NotServing::NoTemplateYet));
    assert_eq!(s.node, NodeStatus::Unknown);
    for reason in NotServing::ALL {
        stats.set_serving(Serving::No(reason));
        assert_eq!(stats.serving(), Serving::No(reason));
    }
    stats.set_serving(Serving::Yes);
    assert!(stats.serving().is_serving());
    for node in [
        NodeStatus::Ok {
            since: Timestamp::from_millis(5),
        },
        NodeStatus::Unreachable {
            since: Timestamp::from_millis(1 << 40),
        },
        NodeStatus::Stale {
            since: Timestamp::from_millis(0),
        },
        NodeStatus::Unknown,
    ] {
        stats.set_node(node);
        assert_eq!(stats.node(), node);
        assert!(NodeStatus::STATES.contains(&node.state()));
    }
}

#[test]
fn concurrent_recording_loses_nothing() {
    let (stats, workers) = pool();
    let w = workers.attach("shared", stats.start());
    std::thread::scope(|s| {
        for thread in 0..4u64 {
            let (stats, w) = (&stats, &w);
            s.spawn(move || {
                for i in 0..20_000u64 {
                    let now = stats.start().plus_millis(i / 10 + thread);
                    stats.share_accepted(w, 2.0, now);
                    stats.share_processing(i);
                    if i.is_multiple_of(10) {
                        stats.share_rejected(Some(w), Reason::LowDifficulty, now);
                    }
                }
            });
        }
    });
    let s = stats.snapshot(stats.start().plus_millis(2_000));
    assert_eq!(s.accepted, 80_000);
    assert_eq!(s.accepted_work, 160_000.0);
    assert_eq!(s.rejected.get(Reason::LowDifficulty), 8_000);
    assert_eq!(w.accepted(), 80_000);
    assert_eq!(w.rejected(), 8_000);
    assert_eq!(stats.processing().count(), 80_000);
}

// The worker list.

#[test]
fn workers_share_a_name_and_count_connections() {
    let (stats, workers) = pool();
    let t = stats.start();
    let a1 = workers.attach("alice", t);
    let a2 = workers.attach("alice", t);
    let b = workers.attach("bob", t);
    assert!(Arc::ptr_eq(&a1, &a2));
    assert_eq!(a1.connections(), 2);
    assert_eq!(workers.len(), 2);
    let s = stats.snapshot(t);
    assert_eq!((s.workers, s.workers_listed), (2, 2));

    workers.detach(&a1, t.plus_millis(1));
    assert_eq!(a2.connections(), 1);
    assert_eq!(stats.snapshot(t).workers, 2);
    workers.detach(&a2, t.plus_millis(2));
    workers.detach(&a2, t.plus_millis(3)); // unmatched: ignored
    assert_eq!(a1.connections(), 0);
    let s = stats.snapshot(t);
    assert_eq!((s.workers, s.workers_listed), (1, 2), "alice retained");
    drop(b);
}

#[test]
fn disconnected_workers_leave_after_the_retention_period() {
    let stats = PoolStats::new(Timestamp::from_millis(0));
    let workers = WorkerRegistry::with_retention(&stats, 1_000);
    let a = workers.attach("alice", Timestamp::from_millis(0));
    stats.share_accepted(&a, 1.0, Timestamp::from_millis(10));
    workers.detach(&a, Timestamp::from_millis(100));
    workers.expire(Timestamp::from_millis(1_099));
    assert_eq!(workers.len(), 1);
    // Back within the period: the same figures.
    let again = workers.attach("alice", Timestamp::from_millis(500));
    assert!(Arc::ptr_eq(&a, &again));
    assert_eq!(again.accepted(), 1);
    workers.detach(&again, Timestamp::from_millis(600));
    // The first departure (due at 1,100) is void: alice left again at 600, due at 1,600.
    workers.expire(Timestamp::from_millis(1_100));
    assert_eq!(workers.len(), 1);
    workers.expire(Timestamp::from_millis(1_600));
    assert_eq!(workers.len(), 0);
    assert!(workers.get("alice").is_none());
    assert_eq!(
        stats.snapshot(Timestamp::from_millis(1_600)).workers_listed,
        0
    );
    // A newcomer of the same name starts afresh.
    let fresh = workers.attach("alice", Timestamp::from_millis(2_000));
    assert_eq!(fresh.accepted(), 0);
    assert_eq!(fresh.first_seen(), Timestamp::from_millis(2_000));
}

#[test]
fn retention_zero_drops_a_worker_with_its_last_connection() {
    let stats = PoolStats::new(Timestamp::from_millis(0));
    let workers = WorkerRegistry::with_retention(&stats, 0);
    let a = workers.attach("alice", Timestamp::from_millis(0));
    let a2 = workers.attach("alice", Timestamp::from_millis(0));
    workers.detach(&a, Timestamp::from_millis(1));
    assert_eq!(workers.len(), 1);
    workers.detach(&a2, Timestamp::from_millis(2));
    assert_eq!(workers.len(), 0);
    let s = stats.snapshot(Timestamp::from_millis(2));
    assert_eq!((s.workers, s.workers_listed), (0, 0));
}

#[test]
fn pages_walk_the_list_in_name_order() {
    let (stats, workers) = pool();
    let now = stats.start();
    // Inserted out of order.
    let mut names: Vec<String> = (0..250).map(|i| format!("w{:03}", (i * 7) % 250)).collect();
    for n in &names {
        workers.attach(n, now);
    }
    names.sort();
    assert_eq!(workers.len(), 250);

    let mut by_offset = Vec::new();
    let mut offset = 0;
    loop {
        let page = workers.page(PageStart::Offset(offset), 100, now);
        assert_eq!(page.total, 250);
        assert_eq!(page.offset, Some(offset));
        by_offset.extend(page.workers.iter().map(|w| w.name.to_string()));
        match page.next_offset() {
            Some(next) => offset = next,
            None => break,
        }
    }
    assert_eq!(by_offset, names);

    let mut by_cursor = Vec::new();
    let mut after = String::new();
    loop {
        let page = workers.page(PageStart::After(&after), 64, now);
        assert_eq!(page.offset, None);
        by_cursor.extend(page.workers.iter().map(|w| w.name.to_string()));
        match page.next_after() {
            Some(next) => after = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(by_cursor, names);

    let past = workers.page(PageStart::Offset(1_000), 10, now);
    assert!(past.workers.is_empty() && !past.more);
    let empty = workers.page(PageStart::Offset(0), 0, now);
    assert!(empty.workers.is_empty() && empty.more);
    let last = workers.page(PageStart::After("w248"), 10, now);
    assert_eq!(last.workers.len(), 1);
    assert!(!last.more);
}

#[test]
fn worker_views_carry_the_figures() {
    let (stats, workers) = pool();
    let t = stats.start();
    let w = workers.attach("alice", t);
    stats.share_accepted(&w, 3.0, t.plus_millis(5));
    stats.share_rejected(Some(&w), Reason::Stale, t.plus_millis(7));
    let page = workers.page(PageStart::Offset(0), 10, t.plus_millis(10));
    let v = &page.workers[0];
    assert_eq!(&*v.name, "alice");
    assert_eq!(
        (v.connections, v.accepted, v.rejected, v.accepted_work),
        (1, 1, 1, 3.0)
    );
    assert_eq!(v.last_share, Some(t.plus_millis(7)));
    assert_eq!(v.first_seen, t);
    assert!(v.hashrate_1m > 0.0 && v.hashrate_10m > 0.0);
}

/// A worker first seen through one of its shares (SV2 worker tracking takes a worker on at its
/// first accepted share): 2,000 workers, each sending Poisson shares at 15 a minute, read 20 s
/// after their first share. A hash-rate clock started at that share credits it over no time and
/// reads a fifth high on average (6 expected shares over 20 s instead of 24); started one mean
/// interval earlier (4 s), the mean reading is the true rate. The mean of 2,000 readings has a
/// relative standard error of about 1%: the bounds are five of them.
#[test]
fn a_worker_first_seen_through_a_share_is_not_overestimated() {
    let rate = 0.25; // shares per second
    let interval_ms = (1_000.0 / rate) as u64;
    let truth = rate * D * HASHES_PER_SHARE;
    let mean_reading = |backdate: bool| {
        let (stats, workers) = pool();
        let mut rng = Rng(7);
        let mut sum = 0.0;
        let n = 2_000;
        for i in 0..n {
            let first = stats
                .start()
                .plus_millis(10_000 + (rng.unit() * 60_000.0) as u64);
            let since = if backdate {
                Timestamp::from_millis(first.as_millis() - interval_ms)
            } else {
                first
            };
            let w = workers.attach_since(&format!("w{i}"), first, since);
            stats.share_accepted(&w, D, first);
            let read = first.plus_millis(20_000);
            let mut t = 0.0;
            loop {
                t += -rng.unit().ln() / rate;
                if t >= 20.0 {
                    break;
                }
                stats.share_accepted(&w, D, first.plus_millis((t * 1000.0) as u64));
            }
            sum += w.hashrate_1m(read);
        }
        sum / n as f64 / truth
    };
    let at_share = mean_reading(false);
    assert!(
        at_share > 1.12,
        "the clock at the share reads {at_share:.3} of the truth"
    );
    let backdated = mean_reading(true);
    assert!(
        (backdated - 1.0).abs() < 0.05,
        "one interval earlier reads {backdated:.3} of the truth"
    );
}
