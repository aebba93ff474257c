//! A run as a whole: validity rules, trials aggregated exactly, the CSV files, and logs read
//! from files as the roles write them.

mod metrics_support;

use events::{EventSink, Reason, Verdict};
use lab::metrics::{
    assemble, dist_files, host_busy_fraction, measure, series_files, write_outputs, LogSource,
    Measured, TrialMeasurement,
};
use lab::results::{Context, Host, Results};
use lab::stats::summarize;
use metrics_support::*;

/// `rate` hashes per second, recorded every second; shares every 2 s answered after `latency`.
fn fleet_run(rate: u64, latency_ms: u64) -> Lab {
    let mut lab = Lab::new();
    lab.hash_budget_hps = 1e6;
    for k in 1..=105u64 {
        lab.fleet().push(ev(at(k as f64), hashes(rate)));
    }
    for k in 0..50u64 {
        let t = at(2.0 * k as f64 + 0.5);
        lab.fleet().push(ev(t, sent(1, k, 1.0, None)));
        let v = if k % 10 == 3 {
            Verdict::Rejected(Reason::Stale)
        } else {
            Verdict::Accepted
        };
        lab.fleet()
            .push(ev(t + (latency_ms + k) * MS, received(1, k, v)));
    }
    lab
}

#[test]
fn achieved_hash_rate_is_checked_against_the_budget() {
    let ok = fleet_run(1_000_000, 10).results();
    assert!(ok.valid, "{:?}", ok.invalid_reasons);
    assert!(near(ok.hashrate.achieved_hps.unwrap(), 1e6, 1e-12));
    let slow = fleet_run(900_000, 10).results();
    assert!(!slow.valid);
    assert!(
        slow.invalid_reasons[0].contains("10.0% below"),
        "{:?}",
        slow.invalid_reasons
    );
    // 4% short is within the rule.
    assert!(fleet_run(960_000, 10).results().valid);
}

#[test]
fn more_than_one_percent_unmatched_invalidates() {
    let mut lab = fleet_run(1_000_000, 10);
    // 50 verdicts and 50 more that match nothing.
    for k in 0..50u64 {
        lab.fleet()
            .push(ev(at(30.0), received(2, 1000 + k, Verdict::Accepted)));
    }
    let r = lab.results();
    assert_eq!(r.unmatched_events, 50);
    assert_eq!(r.matchable_events, 100);
    assert!(!r.valid);
    assert!(r
        .invalid_reasons
        .iter()
        .any(|x| x.contains("could not be matched")));
}

#[test]
fn a_busy_host_invalidates_the_run() {
    // CPU samples once a second: 20 of 105 above 85%.
    let samples: Vec<(u64, f64)> = (0..105u64)
        .map(|k| (at(k as f64), if k % 5 == 0 { 95.0 } else { 40.0 }))
        .collect();
    let busy = host_busy_fraction(&samples, at(0.0), at(104.5));
    assert!(near(busy.unwrap(), 21.0 / 105.0, 1e-12), "{busy:?}");
    let trial = TrialMeasurement {
        configs: vec![fleet_run(1_000_000, 10).measure()],
        host_busy_fraction: busy,
    };
    let out = assemble(Context::default(), Host::default(), vec![trial]);
    assert!(!out.results.valid);
    assert!(out.results.invalid_reasons[0].contains("host CPU"));
    assert!(out.results.configs["sv1"].valid);
    assert_eq!(out.results.trials, None);
    let calm = host_busy_fraction(&samples[1..5], at(0.0), at(105.0));
    assert_eq!(calm, Some(0.0));
}

#[test]
fn trials_aggregate_exactly() {
    let a = fleet_run(1_000_000, 10).measure();
    let b = fleet_run(990_000, 50).measure();
    let trials = vec![
        TrialMeasurement {
            configs: vec![a.clone()],
            host_busy_fraction: Some(0.0),
        },
        TrialMeasurement {
            configs: vec![b.clone()],
            host_busy_fraction: Some(0.0),
        },
    ];
    let out = assemble(Context::default(), Host::default(), trials);
    let r = &out.results;
    let listed = r.trials.as_ref().expect("two trials are listed");
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].configs["sv1"], a.results());
    assert_eq!(listed[1].configs["sv1"], b.results());

    let top = &r.configs["sv1"];
    let (ra, rb) = (a.results(), b.results());
    assert_eq!(
        top.shares.submitted,
        ra.shares.submitted + rb.shares.submitted
    );
    assert_eq!(top.shares.stale, ra.shares.stale + rb.shares.stale);
    assert_eq!(top.work.stale_pct, ra.work.stale_pct);
    // Distributions pool the raw samples of both trials.
    let mut pooled = a.delays.share_latency.clone();
    pooled.merge(&b.delays.share_latency);
    assert_eq!(top.share_latency_ms, summarize(&pooled, ""));
    assert_eq!(top.share_latency_ms.n, ra.share_latency_ms.n * 2);
    let mean = (ra.share_latency_ms.mean.unwrap() + rb.share_latency_ms.mean.unwrap()) / 2.0;
    assert!(near(top.share_latency_ms.mean.unwrap(), mean, 1e-12));
    assert!(near(top.hashrate.achieved_hps.unwrap(), 995_000.0, 1e-12));
    // Measured windows add: the rates stay rates.
    assert_eq!(top.stale_rescale.measured_s, 180.0);
    assert!(r.valid, "{:?}", r.invalid_reasons);
}

#[test]
fn csv_files_have_the_names_and_columns_the_report_reads() {
    let sv1 = fleet_run(1_000_000, 10).measure();
    let mut d = fleet_run(2_000_000, 10).measure();
    d.name = "D".into();
    let merged = vec![sv1, d];
    let files = series_files(&merged);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "shares_accepted_per_s.csv",
        "shares_stale_per_s.csv",
        "shares_rejected_per_s.csv",
        "acceptance_pct.csv",
        "hashrate_hps.csv",
        "bandwidth_farm_tx_Bps.csv",
        "bandwidth_farm_rx_Bps.csv",
        "bandwidth_pool_tx_Bps.csv",
        "bandwidth_pool_rx_Bps.csv",
    ] {
        assert!(names.contains(&want), "{want}");
    }
    let text = |name: &str| &files.iter().find(|(n, _)| n == name).unwrap().1;
    let hashrate: Vec<&str> = text("hashrate_hps.csv").lines().collect();
    assert_eq!(hashrate[0], "t_s,sv1,D");
    assert_eq!(hashrate.len(), 1 + 105);
    // HashesDone at k s lands in second k.
    assert_eq!(hashrate[1 + 7], "7,1000000,2000000");
    let accepted: Vec<&str> = text("shares_accepted_per_s.csv").lines().collect();
    assert_eq!(accepted[1], "0,1,1"); // share 0 sent at 0.5 s
    assert_eq!(accepted[2], "1,0,0");
    let pct: Vec<&str> = text("acceptance_pct.csv").lines().collect();
    assert_eq!(pct[1 + 6], "6,0,0"); // share 3, sent at 6.5 s, was stale
    assert_eq!(pct[2], "1,,"); // nothing sent in second 1

    let dists = dist_files(&merged);
    let (name, latency) = dists
        .iter()
        .find(|(n, _)| n == "dist_share_latency_ms.csv")
        .unwrap();
    assert_eq!(name, "dist_share_latency_ms.csv");
    let rows: Vec<&str> = latency.lines().collect();
    assert_eq!(rows[0], "config,value_ms");
    // Shares sent in the window: from 10.5 s to 98.5 s, 45 per configuration.
    assert_eq!(rows.len(), 1 + 2 * 45);
    assert_eq!(rows[1], "sv1,15");
    assert!(dists.iter().any(|(n, _)| n == "dist_time_to_job_ms.csv"));
}

#[test]
fn outputs_are_written_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let trial = TrialMeasurement {
        configs: vec![fleet_run(1_000_000, 10).measure()],
        host_busy_fraction: None,
    };
    let context = Context {
        scenario: "sv1".into(),
        configurations: vec!["sv1".into()],
        ..Context::default()
    };
    let out = assemble(context, Host::default(), vec![trial]);
    write_outputs(dir.path(), &out).unwrap();
    let text = std::fs::read_to_string(dir.path().join("results.json")).unwrap();
    let back: Results = serde_json::from_str(&text).unwrap();
    assert_eq!(back, out.results);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["schema"], 1);
    assert_eq!(v["configs"]["sv1"]["shares"]["submitted"], 45);
    assert!(dir.path().join("bandwidth_pool_rx_Bps.csv").exists());
    assert!(dir.path().join("dist_block_propagation_ms.csv").exists());
}

#[test]
fn logs_read_from_files_measure_like_logs_in_memory() {
    let lab = fleet_run(1_000_000, 10);
    let dir = tempfile::tempdir().unwrap();
    let mut run = lab.run();
    for (i, role) in run.logs.iter_mut().enumerate() {
        let LogSource::Memory(log) = &role.source else {
            unreachable!()
        };
        let path = dir.path().join(format!("{i}.events"));
        let sink = EventSink::create(&path, log.header.role.as_str(), "sv1").unwrap();
        for e in &log.events {
            sink.emit_at(e.ts_ns, e.kind);
        }
        sink.finish().unwrap();
        role.source = LogSource::File(path);
    }
    let from_files: Measured = measure(&run).unwrap();
    assert_eq!(from_files, lab.measure());
    let missing = lab::metrics::ConfigRun {
        simnet: LogSource::File(dir.path().join("nope")),
        ..run
    };
    let e = measure(&missing).unwrap_err().to_string();
    assert!(e.contains("simnet"), "{e}");
}
