//! Shares, work, share latency, the stale rate rescaled to mainnet, unmatched verdicts and the
//! proxy's upstream shares, against a known history of shares.

mod metrics_support;

use std::time::Duration;

use events::{JobId, Perspective, Reason, ShareSent, Verdict};
use metrics_support::*;

const ACCEPTED: Verdict = Verdict::Accepted;

fn rejected(r: Reason) -> Verdict {
    Verdict::Rejected(r)
}

/// One device's history; the window is [10 s, 100 s), the run ends at 105 s.
fn history() -> Lab {
    let mut lab = Lab::new();
    let f = lab.fleet();
    let mut share = |seq: u64, sent_s: f64, difficulty: f64, answer: Option<(u64, Verdict)>| {
        f.push(ev(at(sent_s), sent(1, seq, difficulty, None)));
        if let Some((after_ms, v)) = answer {
            f.push(ev(at(sent_s) + after_ms * MS, received(1, seq, v)));
        }
    };
    share(1, 5.0, 2.0, Some((50, ACCEPTED))); // warm-up: not counted
    for k in 0..10u64 {
        share(2 + k, 20.0 + k as f64, 2.0, Some((10 + k, ACCEPTED)));
    }
    share(12, 40.0, 4.0, Some((30, rejected(Reason::Stale))));
    share(13, 41.0, 1.0, Some((20, rejected(Reason::Duplicate))));
    share(14, 42.0, 1.0, Some((25, rejected(Reason::LowDifficulty))));
    share(15, 43.0, 1.0, None); // never answered
    share(16, 99.9, 1.0, Some((300, ACCEPTED))); // answered during the drain
    share(17, 100.5, 1.0, Some((10, ACCEPTED))); // sent during the drain: not counted
    share(18, 99.95, 1.0, Some((6_100, ACCEPTED))); // answered after the end
                                                    // A verdict for a share nobody sent.
    f.push(ev(at(50.0), received(1, 99, ACCEPTED)));
    // The pool's and the tap's view of the same shares are not the farm edge's.
    lab.pool
        .push(ev(at(20.0), verdict(4, 2, ACCEPTED, Perspective::Given)));
    lab.tap.push(ev(at(20.0), sent(1, 2, 2.0, None)));
    lab.tap.push(ev(at(20.1), received(1, 2, ACCEPTED)));
    lab
}

#[test]
fn shares_are_counted_by_verdict_in_the_window() {
    let r = history().results();
    let s = &r.shares;
    assert_eq!(s.submitted, 16);
    assert_eq!(s.accepted, 11);
    assert_eq!(s.stale, 1);
    assert_eq!(s.rejected, 2);
    assert_eq!(s.unanswered, 2);
    assert_eq!(
        s.submitted,
        s.accepted + s.stale + s.rejected + s.unanswered
    );
    assert_eq!(s.acceptance_pct, Some(68.75));
    assert_eq!(s.rejected_by_reason.len(), 3);
    assert_eq!(s.rejected_by_reason["stale"], 1);
    assert_eq!(s.rejected_by_reason["duplicate"], 1);
    assert_eq!(s.rejected_by_reason["low_difficulty"], 1);
    // The pool's own reasons: nothing to reclassify (its stale share was called stale).
    assert_eq!(s.pool_reason, s.rejected_by_reason);
    assert_eq!(r.pool_shares, None);
}

/// A pool that dropped a job on a new tip may answer a share for it "invalid job" (the
/// reference pool_sv2 does): for the farm that is the same lost work as a stale share, so the
/// lab counts it stale and keeps the pool's own reason under `pool_reason`. A rejection about
/// the share itself, or an unknown job on a prev hash still current, stays what the pool said.
#[test]
fn a_rejection_of_a_superseded_job_counts_as_stale_and_the_pool_reason_is_kept() {
    let mut lab = Lab::new();
    lab.pool_logged = false;
    let (p0, p1, elsewhere) = (h(1), h(2), h(9));
    lab.simnet.push(ev(at(30.0), tip("network", p1, 101, p0)));
    let f = lab.fleet();
    // A share on job `fp`, sent and answered at the given seconds.
    let share = |f: &mut Vec<_>, seq: u64, fp: u64, sent_s: f64, answered_s: f64, v| {
        let on = ShareSent {
            job_id: JobId::text(&format!("{fp:x}")),
            ..sent(1, seq, 1.0, None)
        };
        f.push(ev(at(sent_s), on));
        f.push(ev(at(answered_s), received(1, seq, v)));
    };
    let invalid_job = rejected(Reason::InvalidJob);
    f.push(ev(at(15.0), job(1, 0xa, p0)));
    share(f, 1, 0xa, 20.0, 20.1, ACCEPTED);
    // An unknown job while p0 is still everyone's tip: a fault, kept as the pool said.
    share(f, 2, 0xa, 25.0, 25.1, invalid_job);
    // Sent on p0 just before the network's p1, answered after it: stale.
    share(f, 3, 0xa, 29.95, 30.1, invalid_job);
    // The same, answered without the customary code: stale too.
    share(f, 4, 0xa, 29.96, 30.12, rejected(Reason::Other));
    // A duplicate is about the share, not its job: kept.
    share(f, 5, 0xa, 29.97, 30.15, rejected(Reason::Duplicate));
    f.push(ev(at(30.2), job(1, 0xb, p1)));
    // The pool told this device of another prev hash before it answered (simnet never
    // recorded that tip): superseded at the pool, so stale.
    f.push(ev(at(50.0), job(1, 0xc, elsewhere)));
    share(f, 6, 0xb, 49.9, 50.1, invalid_job);
    let r = lab.results();
    let s = &r.shares;
    assert_eq!(s.submitted, 6);
    assert_eq!((s.accepted, s.stale, s.rejected), (1, 3, 2), "{s:?}");
    let counts = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter().map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>()
    };
    assert_eq!(
        counts(&s.rejected_by_reason),
        [
            ("duplicate".to_owned(), 1),
            ("invalid_job".to_owned(), 1),
            ("stale".to_owned(), 3)
        ],
    );
    assert_eq!(
        counts(&s.pool_reason),
        [
            ("duplicate".to_owned(), 1),
            ("invalid_job".to_owned(), 3),
            ("other".to_owned(), 1)
        ],
    );
    assert_eq!(r.work.stale, 3.0);
}

#[test]
fn work_sums_difficulties() {
    let r = history().results();
    assert_eq!(r.work.submitted, 29.0);
    assert_eq!(r.work.accepted, 21.0);
    assert_eq!(r.work.stale, 4.0);
    assert!(near(r.work.stale_pct.unwrap(), 400.0 / 29.0, 1e-12));
}

#[test]
fn share_latency_is_send_to_verdict() {
    let r = history().results();
    let l = &r.share_latency_ms;
    assert_eq!(l.n, 14);
    assert_eq!(l.max, Some(300.0));
    assert!(near(l.mean.unwrap(), 520.0 / 14.0, 1e-9), "{l:?}");
    assert!(near(l.p50.unwrap(), 16.0, 0.001), "{l:?}");
    assert_eq!(l.clusters, 14);
}

#[test]
fn verdicts_without_a_share_are_unmatched() {
    let r = history().results();
    assert_eq!(r.unmatched_events, 1);
    assert_eq!(r.unmatched_by_kind["verdict_without_share"], 1);
}

#[test]
fn no_shares_give_null_percentages_and_a_reason() {
    let r = Lab::new().results();
    assert_eq!(r.shares.submitted, 0);
    assert_eq!(r.shares.acceptance_pct, None);
    assert_eq!(r.work.stale_pct, None);
    assert_eq!(r.stale_pct_mainnet_equiv, None);
    assert_eq!(r.share_latency_ms.n, 0);
    assert!(r.share_latency_ms.absent_reason.is_some());
}

/// 100 shares of difficulty 1 in the window, 4 of them stale, and `tips` network tips in it.
fn stale_run(tips: u64) -> Lab {
    let mut lab = Lab::new();
    for k in 0..100u64 {
        let t = at(10.0 + 0.8 * k as f64);
        lab.fleet().push(ev(t, sent(1, k, 1.0, None)));
        let v = if k % 25 == 0 {
            rejected(Reason::Stale)
        } else {
            ACCEPTED
        };
        lab.fleet().push(ev(t + 5 * MS, received(1, k, v)));
    }
    for k in 0..tips {
        let t = at(12.0 + 85.0 * k as f64 / tips as f64);
        lab.simnet
            .push(ev(t, tip("network", h(100 + k), 900_001, h(99 + k))));
        lab.simnet
            .push(ev(t + 2 * MS, tip("pool", h(100 + k), 900_001, h(99 + k))));
    }
    lab
}

#[test]
fn stale_rate_rescales_with_tips_per_second() {
    // 9 tips in 90 s: 0.1 tips/s, one every 10 s; mainnet has one every 600 s.
    let r = stale_run(9).results();
    assert_eq!(r.work.stale_pct, Some(4.0));
    assert_eq!(r.stale_rescale.tips, 9);
    assert!(near(r.stale_rescale.tips_per_s.unwrap(), 0.1, 1e-12));
    assert!(near(r.stale_pct_mainnet_equiv.unwrap(), 4.0 / 60.0, 1e-12));
    // Twice the tips for the same stale rate: half the mainnet figure.
    let r2 = stale_run(18).results();
    assert!(near(
        r2.stale_pct_mainnet_equiv.unwrap(),
        4.0 / 120.0,
        1e-12
    ));
}

#[test]
fn without_tips_the_configured_interval_scales() {
    let mut lab = stale_run(0);
    lab.block_interval = Duration::from_secs(30);
    let r = lab.results();
    assert!(near(r.stale_rescale.factor.unwrap(), 30.0 / 600.0, 1e-12));
    assert!(near(r.stale_pct_mainnet_equiv.unwrap(), 0.2, 1e-12));
}

#[test]
fn a_proxy_gives_pool_shares_from_its_upstream_side() {
    let mut lab = history();
    // The proxy forwards two aggregated shares upstream on its connection 1; its verdicts to
    // the devices below it are given, not received.
    let p = vec![
        ev(at(30.0), sent(1, 1, 16.0, None)),
        ev(at(30.0) + 70 * MS, received(1, 1, ACCEPTED)),
        ev(at(31.0), sent(1, 2, 16.0, None)),
        ev(at(31.0) + 70 * MS, received(1, 2, rejected(Reason::Stale))),
        ev(at(30.0), verdict(5, 9, ACCEPTED, Perspective::Given)),
    ];
    lab.proxy = Some(p);
    let r = lab.results();
    let ps = r.pool_shares.expect("a proxy is present");
    assert_eq!((ps.submitted, ps.accepted, ps.stale), (2, 1, 1));
    let pw = r.pool_work.unwrap();
    assert_eq!(pw.submitted, 32.0);
    assert_eq!(pw.stale_pct, Some(50.0));
    // The farm edge is unchanged.
    assert_eq!(r.shares.submitted, 16);
}

#[test]
fn per_device_channels_on_one_connection_are_told_apart_by_channel() {
    let mut lab = history();
    // A per-device translator: two devices' channels on its connection 1, each numbering its
    // shares from 1; one verdict each, in the opposite order.
    let on = |channel: u32, mut s: events::ShareSent| {
        s.channel = Some(channel);
        s.nonce = channel;
        s
    };
    let back = |channel: u32, mut r: events::ShareResult| {
        r.channel = Some(channel);
        r.nonce = channel;
        r
    };
    let p = vec![
        ev(at(30.0), on(7, sent(1, 1, 16.0, None))),
        ev(at(30.0) + MS, on(8, sent(1, 1, 4.0, None))),
        ev(
            at(30.0) + 70 * MS,
            back(8, received(1, 1, rejected(Reason::Stale))),
        ),
        ev(at(30.0) + 71 * MS, back(7, received(1, 1, ACCEPTED))),
    ];
    lab.proxy = Some(p);
    let r = lab.results();
    let ps = r.pool_shares.expect("a proxy is present");
    assert_eq!(
        verdict_counts(&ps),
        (2, 1, 1, 0),
        "each verdict matched to its own channel's share"
    );
    let pw = r.pool_work.unwrap();
    assert_eq!((pw.submitted, pw.accepted), (20.0, 16.0));
    assert_eq!(
        r.unmatched_events, 1,
        "the history's own stray verdict only"
    );
}
