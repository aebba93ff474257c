//! Job declaration (A, B): the devices' job source is the JDC at the farm site, fed by the
//! farm-side node; the pool's shares are its own verdicts; the farm node's peer traffic is
//! farm-site traffic. Against synthetic logs whose truth the test sets.

mod metrics_support;

use events::{Direction, Fingerprint, JobId, JobReceived, JobSent, Perspective, Reason, Verdict};
use metrics_support::*;
use primitives::Target;

fn channel_job(channel: u32, job: u64, fp: u64) -> JobSent {
    JobSent {
        conn: 1,
        channel: Some(channel),
        job_id: JobId::Num(job),
        template_id: None,
        fingerprint: Some(Fingerprint(fp)),
        prev_hash: Some(h(1)),
        target: Target::DIFFICULTY_1,
        clean: false,
        future: false,
    }
}

fn standard_job(device: u64, channel: u32, job: u64) -> JobReceived {
    JobReceived {
        device,
        channel: Some(channel),
        job_id: JobId::Num(job),
        fingerprint: None,
        prev_hash: Some(h(1)),
        target: Target::DIFFICULTY_1,
        clean: false,
        future: false,
    }
}

/// Both nodes make templates every 10 s; the pool sends jobs of the pool node's templates on
/// its channel to the JDC, and the JDC jobs of the farm node's templates to the devices, with
/// the same channel and job numbers (each numbers its own).
fn declared() -> Lab {
    let mut lab = Lab::new();
    lab.name = "B".into();
    lab.node = "farm".into();
    lab.jdc = Some(Vec::new());
    lab.simnet
        .push(ev(at(0.0), tip("network", h(1), 900_000, h(0))));
    for k in 0..8u64 {
        let t = at(12.0 + 10.0 * k as f64);
        let (pool_fp, farm_fp) = (1000 + k, 2000 + k);
        lab.simnet
            .push(ev(t, template("pool", k, h(1), 5000, pool_fp)));
        // The farm node hears of the transactions a little later: its own template.
        lab.simnet
            .push(ev(t + 20 * MS, template("farm", k, h(1), 4000, farm_fp)));
        lab.pool.push(ev(t + MS, channel_job(1, k + 1, pool_fp)));
        let jdc = lab.jdc.as_mut().unwrap();
        jdc.push(ev(t + 22 * MS, channel_job(1, k + 1, farm_fp)));
        for d in 0..3 {
            lab.fleet().push(ev(t + 24 * MS, standard_job(d, 1, k + 1)));
        }
    }
    lab
}

#[test]
fn standard_jobs_are_tied_to_the_farm_node_through_the_jdc() {
    let r = declared().results();
    assert_eq!(r.unmatched_events, 0, "{:?}", r.unmatched_by_kind);
    let d = &r.time_to_job_ms;
    // From the farm node's template (20 ms after the pool node's) to the devices: 4 ms.
    assert_eq!(d.n, 8 * 3, "{d:?}");
    assert!(near(d.p50.unwrap(), 4.0, 0.001), "{d:?}");
    assert!(near(d.max.unwrap(), 4.0, 0.001), "{d:?}");
    // Of which the JDC's: farm template to its job, 2 ms (the pool's jobs are of the pool
    // node's templates, not this configuration's).
    let s = &r.time_to_job_at_source_ms;
    assert_eq!(s.n, 8, "{s:?}");
    assert!(near(s.p50.unwrap(), 2.0, 0.001), "{s:?}");
    // The devices work on the farm's templates: their value, not the pool node's.
    assert!(near(r.template_value_sats.unwrap(), 4000.0, 1e-9), "{r:?}");
}

#[test]
fn pool_shares_are_the_pools_verdicts() {
    let mut lab = declared();
    let given = |seq, v| verdict(7, seq, v, Perspective::Given);
    lab.pool.push(ev(at(5.0), given(1, Verdict::Accepted))); // warm-up
    for seq in 2..8 {
        lab.pool
            .push(ev(at(20.0 + seq as f64), given(seq, Verdict::Accepted)));
    }
    lab.pool
        .push(ev(at(40.0), given(8, Verdict::Rejected(Reason::Stale))));
    // The JDC judges the devices' shares: the farm edge's business, not the pool's.
    let jdc = lab.jdc.as_mut().unwrap();
    for seq in 1..30 {
        jdc.push(ev(at(30.0), given(seq, Verdict::Accepted)));
    }
    let r = lab.results();
    let p = r.pool_shares.expect("pool_shares with job declaration");
    assert_eq!(verdict_counts(&p), (7, 6, 1, 0), "{p:?}");
    let w = r.pool_work.unwrap();
    assert!(near(w.accepted, 6.0, 1e-12), "{w:?}");
}

#[test]
fn the_farm_nodes_peer_traffic_is_farm_traffic() {
    let mut lab = declared();
    lab.farm_peer = Some("farm/peer".into());
    lab.tap.extend(both_ways(50.0, "wan", 300, 500));
    // The farm node sent 40 and received 9000 bytes of relay; the pool node's relay is not
    // the farm's.
    lab.simnet.extend(both_ways(60.0, "farm/peer", 40, 9000));
    lab.simnet
        .push(ev(at(60.0), bytes("pool/peer", Direction::Down, 7777)));
    let r = lab.results();
    let (farm, pool) = (&r.bandwidth.farm, &r.bandwidth.pool);
    assert_eq!((farm.tx_bytes, farm.rx_bytes), (340, 9500), "{farm:?}");
    assert_eq!((pool.tx_bytes, pool.rx_bytes), (500, 300), "{pool:?}");
    assert_eq!(r.links["farm/peer"].down_bytes, 9000);
}
