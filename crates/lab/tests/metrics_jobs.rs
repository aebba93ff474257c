//! Time to job, time to a new prev hash, time to first job and template value, against
//! injected delays and values.

mod metrics_support;

use events::{JobActivated, JobId, JobReceived, JobSent};
use metrics_support::*;
use primitives::Target;

const DEVICES: u64 = 50;

/// Templates of the job source node every 8 s from 10 s on; every device gets each one's job
/// `delay(k, device)` later.
fn templated(delay: impl Fn(u64, u64) -> u64, devices: u64) -> Lab {
    let mut lab = Lab::new();
    let prev = h(1);
    lab.simnet
        .push(ev(at(0.0), tip("network", prev, 900_000, h(0))));
    // One in the warm-up and one in the drain: neither counts.
    lab.simnet
        .push(ev(at(5.0), template("pool", 1, prev, 100, 99)));
    lab.simnet
        .push(ev(at(100.5), template("pool", 2, prev, 100, 98)));
    for d in 0..devices {
        lab.fleet().push(ev(at(5.0) + 3 * MS, job(d, 99, prev)));
        lab.fleet().push(ev(at(100.5) + 3 * MS, job(d, 98, prev)));
    }
    for k in 0..11u64 {
        let t = at(10.0 + 8.0 * k as f64);
        lab.simnet
            .push(ev(t, template("pool", 10 + k, prev, 1000 + k, 100 + k)));
        for d in 0..devices {
            lab.fleet().push(ev(t + delay(k, d), job(d, 100 + k, prev)));
        }
    }
    lab
}

#[test]
fn time_to_job_is_the_injected_delay() {
    let mut lab = templated(|_, _| 7 * MS, DEVICES);
    // The pool resends the same work a second later: not a new sample.
    lab.fleet().push(ev(at(11.0), job(0, 100, h(1))));
    // The pool's own record of the template (same fingerprint) must not move the start.
    lab.pool
        .push(ev(at(10.0) + 2 * MS, template("pool", 77, h(1), 1000, 100)));
    let r = lab.results();

    let d = &r.time_to_job_ms;
    assert_eq!(d.n, 11 * DEVICES);
    assert_eq!(d.clusters, 11);
    assert!(near(d.mean.unwrap(), 7.0, 1e-9), "{d:?}");
    assert!(near(d.p50.unwrap(), 7.0, 0.001), "{d:?}");
    assert!(near(d.p99.unwrap(), 7.0, 0.001), "{d:?}");
    assert_eq!(d.max, Some(7.0));
    let f = &r.time_to_job_first_ms;
    assert_eq!(f.n, 11);
    assert!(near(f.mean.unwrap(), 7.0, 1e-9));
    assert_eq!(r.templates.created, 11);
    assert_eq!(r.templates.reached_devices, 11);
    assert_eq!(r.unmatched_events, 0, "{:?}", r.unmatched_by_kind);
}

#[test]
fn first_device_per_template_is_the_minimum() {
    // Device d gets template k after (k + d + 1) ms: the first device after k + 1 ms.
    let r = templated(|k, d| (k + d + 1) * MS, 5).results();
    let f = &r.time_to_job_first_ms;
    assert_eq!(f.n, 11);
    assert!(near(f.mean.unwrap(), 6.0, 1e-9), "{f:?}"); // mean of 1..=11
    assert_eq!(f.max, Some(11.0));
    let all = &r.time_to_job_ms;
    assert_eq!(all.n, 55);
    assert!(near(all.mean.unwrap(), 8.0, 1e-9), "{all:?}"); // 6 + mean of 0..5
}

#[test]
fn templates_are_the_confidence_clusters() {
    // Each template has its own delay; devices on one template all see it.
    let delay = |k: u64, _| (3 + (k * 7) % 5) * MS;
    let one = templated(delay, 1).results().time_to_job_ms;
    let many = templated(delay, 200).results().time_to_job_ms;
    assert_eq!(one.n, 11);
    assert_eq!(many.n, 2200);
    assert_eq!(many.clusters, 11);
    let (a, b) = (one.ci95.unwrap(), many.ci95.unwrap());
    assert!(
        near(a[0], b[0], 1e-9) && near(a[1], b[1], 1e-9),
        "{a:?} {b:?}"
    );
    // 200 devices treated as independent would have shrunk it about 14-fold.
    assert!(b[1] - b[0] > 1.0, "{b:?}");
}

#[test]
fn jobs_without_a_known_template_are_unmatched_not_guessed() {
    let mut lab = templated(|_, _| 7 * MS, 2);
    lab.fleet().push(ev(at(50.0), job(0, 0xdead, h(1))));
    // Right fingerprint, wrong prev hash: not the template.
    lab.fleet().push(ev(at(51.0), job(1, 100, h(9))));
    let r = lab.results();
    assert_eq!(r.unmatched_events, 2);
    assert_eq!(r.unmatched_by_kind["job_without_template"], 2);
    assert_eq!(r.time_to_job_ms.n, 22);
    assert_eq!(r.matchable_events, 2 + 2 * 13);
}

#[test]
fn time_to_new_prevhash_counts_from_the_network_tip() {
    let mut lab = Lab::new();
    for k in 0..6u64 {
        let t = at(20.0 + 10.0 * k as f64);
        let (hash, prev) = (h(10 + k), h(9 + k));
        lab.simnet
            .push(ev(t, tip("network", hash, 900_001 + k as u32, prev)));
        // The pool-side node learns it 3 ms later and makes a template 2 ms after that.
        lab.simnet
            .push(ev(t + 3 * MS, tip("pool", hash, 900_001 + k as u32, prev)));
        lab.simnet
            .push(ev(t + 5 * MS, template("pool", k, hash, 1000, 200 + k)));
        for d in 0..DEVICES {
            // Device d hears of it 23 ms + d µs after the tip existed.
            lab.fleet()
                .push(ev(t + 23 * MS + d * 1000, job(d, 200 + k, hash)));
            // A second job on the same tip is not a new sample.
            lab.fleet().push(ev(t + 2 * S, job(d, 200 + k, hash)));
        }
    }
    let r = lab.results();
    let p = &r.time_to_job_prevhash_ms;
    assert_eq!(p.n, 6 * DEVICES);
    assert_eq!(p.clusters, 6);
    assert!(near(p.p50.unwrap(), 23.024, 0.001), "{p:?}");
    assert!(near(p.mean.unwrap(), 23.0245, 1e-9), "{p:?}");
    let first = &r.time_to_job_prevhash_first_ms;
    assert_eq!(first.n, 6);
    assert!(near(first.max.unwrap(), 23.0, 1e-9), "{first:?}");
    // The same jobs counted from the node's template: 18 ms later.
    assert!(near(r.time_to_job_ms.mean.unwrap(), 18.0245, 1e-9));
}

#[test]
fn time_to_first_job_runs_from_the_connection() {
    let mut lab = Lab::new();
    let prev = h(1);
    lab.simnet
        .push(ev(at(0.5), template("pool", 1, prev, 1000, 1)));
    for d in 0..100u64 {
        // Devices connect during the warm-up, as they do; 30 ms + d µs to the first job.
        let t = at(1.0) + d * 10 * MS;
        lab.fleet().push(ev(t, opened(d)));
        lab.fleet()
            .push(ev(t + 30 * MS + d * 1000, job(d, 1, prev)));
        lab.fleet().push(ev(t + 5 * S, job(d, 1, prev)));
    }
    // A reconnect gives a second sample.
    lab.fleet().push(ev(at(50.0), opened(7)));
    lab.fleet().push(ev(at(50.0) + 40 * MS, job(7, 1, prev)));
    let r = lab.results();
    let f = &r.time_to_first_job_ms;
    assert_eq!(f.n, 101);
    assert_eq!(f.max, Some(40.0));
    let want = (30.0 * 100.0 + (0..100).map(|d| d as f64 / 1000.0).sum::<f64>() + 40.0) / 101.0;
    assert!(near(f.mean.unwrap(), want, 1e-9), "{f:?}");
}

/// On one tip, template 1 worth 100 sats from 0 s and template 2 worth `value` from `from` s;
/// from 1 s, device 0 works on template 1 and device 1 on template `device1`.
fn two_templates(from: f64, value: u64, device1: u64) -> Lab {
    let mut lab = Lab::new();
    let prev = h(1);
    lab.simnet
        .push(ev(at(0.0), template("pool", 1, prev, 100, 1)));
    lab.simnet
        .push(ev(at(from), template("pool", 2, prev, value, 2)));
    lab.fleet().push(ev(at(1.0), job(0, 1, prev)));
    lab.fleet().push(ev(at(1.0), job(1, device1, prev)));
    lab
}

#[test]
fn template_value_is_time_weighted_against_the_network() {
    let mut lab = two_templates(40.0, 300, 1);
    // Device 0 moves to the better template 15 s after it exists; device 1 never does.
    lab.fleet().push(ev(at(55.0), job(0, 2, h(1))));
    let r = lab.results();
    // Device-seconds in [10, 100): 45 x 100 + 45 x 300 + 90 x 100 over 180.
    assert!(near(r.template_value_sats.unwrap(), 150.0, 1e-12), "{r:?}");
    // The node offered 100 for 30 s and 300 for 60 s of each device's 90.
    let network = (30.0 * 100.0 + 60.0 * 300.0) / 90.0;
    assert!(near(r.network_template_value_sats.unwrap(), network, 1e-12));
    assert!(near(
        r.template_value_delta_sats.unwrap(),
        150.0 - network,
        1e-12
    ));
}

#[test]
fn a_disconnected_device_stops_counting() {
    let mut lab = two_templates(0.0, 400, 2);
    lab.fleet().push(ev(
        at(55.0),
        events::ConnectionClosed {
            conn: 1,
            reason: events::ShortStr::new("eof"),
        },
    ));
    let r = lab.results();
    // 90 s at 100 and 45 s at 400.
    let want = (90.0 * 100.0 + 45.0 * 400.0) / 135.0;
    assert!(near(r.template_value_sats.unwrap(), want, 1e-12), "{r:?}");
}

/// The network's tip `h(1)` from 0 s, the node's template 5 (fingerprint 555) on it at 20 s, and
/// the new tip `h(2)` at 30 s. Device 0 on SV2 standard channel 7: job 3 workable 20.012 s, and
/// future job 4 (received at 29 s) workable once its prev hash `h(2)` arrives 9 ms after the
/// tip; the activation carries `fingerprint` when the device's side knows it.
fn sv2_standard_jobs(fingerprint: Option<events::Fingerprint>) -> Lab {
    let mut lab = Lab::new();
    let (prev, new_tip) = (h(1), h(2));
    lab.simnet
        .push(ev(at(0.0), tip("network", prev, 900_000, h(0))));
    lab.simnet
        .push(ev(at(20.0), template("pool", 5, prev, 1000, 555)));
    lab.simnet
        .push(ev(at(30.0), tip("network", new_tip, 900_001, prev)));
    let sv2_job = |job: u64, future: bool| JobReceived {
        device: 0,
        channel: Some(7),
        job_id: JobId::Num(job),
        fingerprint: None,
        prev_hash: None,
        target: Target::DIFFICULTY_1,
        clean: false,
        future,
    };
    lab.fleet().push(ev(at(20.0) + 12 * MS, sv2_job(3, false)));
    lab.fleet().push(ev(at(29.0), sv2_job(4, true)));
    lab.fleet().push(ev(
        at(30.0) + 9 * MS,
        JobActivated {
            conn: 0,
            channel: Some(7),
            job_id: JobId::Num(4),
            prev_hash: new_tip,
            fingerprint,
        },
    ));
    lab
}

#[test]
fn sv2_standard_and_future_jobs_are_tied_through_the_job_source() {
    let mut lab = sv2_standard_jobs(Some(events::Fingerprint(556)));
    lab.simnet
        .push(ev(at(30.0), template("pool", 6, h(2), 1000, 556)));
    // The pool built job 3 on channel 7 from its template 42 (the node's 555).
    lab.pool
        .push(ev(at(20.0) + MS, template("pool", 42, h(1), 1000, 555)));
    lab.pool.push(ev(
        at(20.0) + 2 * MS,
        JobSent {
            conn: 1,
            channel: Some(7),
            job_id: JobId::Num(3),
            template_id: Some(42),
            fingerprint: None,
            prev_hash: None,
            target: Target::DIFFICULTY_1,
            clean: false,
            future: false,
        },
    ));
    let r = lab.results();
    assert_eq!(r.unmatched_events, 0, "{:?}", r.unmatched_by_kind);
    let t = &r.time_to_job_ms;
    assert_eq!(t.n, 2);
    assert_eq!(t.max, Some(12.0));
    assert!(near(t.mean.unwrap(), 10.5, 1e-9), "{t:?}");
    let p = &r.time_to_job_prevhash_ms;
    assert_eq!(p.n, 1);
    assert_eq!(p.max, Some(9.0));
}

#[test]
fn sv2_standard_jobs_of_a_pool_without_events_are_untied_not_unmatched() {
    let mut lab = sv2_standard_jobs(None);
    lab.pool_logged = false;
    let r = lab.results();
    // Nothing could be tied, and nothing is guessed: no unmatched event either.
    assert_eq!(r.unmatched_events, 0, "{:?}", r.unmatched_by_kind);
    let t = &r.time_to_job_ms;
    assert_eq!(t.n, 0);
    let why = t.absent_reason.as_deref().unwrap();
    assert!(why.contains("third-party"), "{why}");
    // The new tip still reached the device through its prev hash.
    let p = &r.time_to_job_prevhash_ms;
    assert_eq!(p.n, 1);
    assert_eq!(p.max, Some(9.0));
}
