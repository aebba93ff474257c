//! The generated mempool against the configured distributions: arrival process, virtual sizes
//! and fee rates, by Kolmogorov-Smirnov distance and by quantiles.
//!
//! Bounds are at the 0.1% level (KS: 1.95/sqrt(n); quantiles: 4 standard errors), and the seeds
//! are fixed, so a pass is stable; a generator that ignored the configuration, rounded the wrong
//! way or built transactions off their drawn size would be far outside them.

mod common;

use std::time::Duration;

use common::*;
use simnet::txgen::{self, FeeRateModel, VsizeModel};
use simnet::{dist, MempoolConfig, Network, SimnetConfig};

/// Largest distance from the empirical CDF of `xs` (sorted) to a band `[lo, hi]` that holds
/// the model CDF, checking both sides of every step so discrete values are handled: `at(x)`
/// bounds `P(X <= x)`, `below(x)` bounds `P(X < x)`. For an exact model the band is a line.
fn ks_distance(
    xs: &[f64],
    at: impl Fn(f64) -> (f64, f64),
    below: impl Fn(f64) -> (f64, f64),
) -> f64 {
    let n = xs.len() as f64;
    let dist = |emp: f64, (lo, hi): (f64, f64)| (lo - emp).max(emp - hi).max(0.0);
    let mut d: f64 = 0.0;
    let mut i = 0;
    while i < xs.len() {
        let x = xs[i];
        let mut j = i;
        while j < xs.len() && xs[j] == x {
            j += 1;
        }
        // The empirical CDF just below x is i/n, at x it is j/n.
        d = d.max(dist(i as f64 / n, below(x)));
        d = d.max(dist(j as f64 / n, at(x)));
        i = j;
    }
    d
}

fn exact(p: f64) -> (f64, f64) {
    (p, p)
}

fn quantile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// At an empirical quantile q_p the model must have `P(X < q) <= p <= P(X <= q)` within 4
/// standard errors (plus `slack` for the fee rates' rounding).
fn check_quantiles(
    name: &str,
    sorted: &[f64],
    at: impl Fn(f64) -> f64,
    below: impl Fn(f64) -> f64,
    slack: f64,
) {
    let n = sorted.len() as f64;
    for p in [0.1, 0.25, 0.5, 0.75, 0.9, 0.99] {
        let q = quantile(sorted, p);
        let tol = 4.0 * (p * (1.0 - p) / n).sqrt() + slack;
        let (lo, hi) = (below(q), at(q));
        assert!(
            lo - tol <= p && p <= hi + tol,
            "{name}: p{p} = {q}, model P(X < q) = {lo}, P(X <= q) = {hi}"
        );
    }
}

struct Sample {
    arrivals: Vec<f64>,
    vsizes: Vec<f64>,
    fee_rates: Vec<f64>,
}

fn sample(config: SimnetConfig, duration: u64) -> Sample {
    let mut net = Network::new(config).unwrap();
    run(&mut net, secs(duration));
    let mut entries: Vec<_> = net.mempool().iter_by_fee_rate().cloned().collect();
    entries.sort_by_key(|e| e.time);
    let mut vsizes: Vec<f64> = entries.iter().map(|e| e.vsize as f64).collect();
    let mut fee_rates: Vec<f64> = entries.iter().map(|e| e.fee_rate().sat_per_vb()).collect();
    vsizes.sort_by(f64::total_cmp);
    fee_rates.sort_by(f64::total_cmp);
    Sample {
        arrivals: entries.iter().map(|e| e.time.as_secs_f64()).collect(),
        vsizes,
        fee_rates,
    }
}

fn check(config: SimnetConfig, expect_txs: usize) {
    let m = config.mempool.clone();
    let duration = (expect_txs as f64 / m.arrival_rate).round() as u64;
    let s = sample(config, duration);
    let n = s.arrivals.len();
    let ks_bound = 1.95 / (n as f64).sqrt();

    // Arrivals: a Poisson count, exponential gaps.
    let sd = (expect_txs as f64).sqrt();
    assert!(
        (n as f64 - expect_txs as f64).abs() < 4.0 * sd,
        "{n} arrivals, expected {expect_txs} +- {sd}"
    );
    let mut gaps: Vec<f64> = std::iter::once(s.arrivals[0])
        .chain(s.arrivals.windows(2).map(|w| w[1] - w[0]))
        .collect();
    gaps.sort_by(f64::total_cmp);
    let rate = m.arrival_rate;
    let exp_cdf = |x: f64| 1.0 - (-rate * x).exp();
    // Arrival times are whole nanoseconds: a gap of x is any true gap within 1 ns of it.
    let within_1ns = |x: f64| (exp_cdf(x - 1e-9), exp_cdf(x + 1e-9));
    let d = ks_distance(&gaps, within_1ns, within_1ns);
    assert!(d < ks_bound, "arrival gaps: KS {d} >= {ks_bound}");
    let mean_gap = gaps.iter().sum::<f64>() / gaps.len() as f64;
    assert!(
        (mean_gap * rate - 1.0).abs() < 4.0 / (n as f64).sqrt(),
        "mean gap {mean_gap}"
    );

    // Virtual sizes: whole numbers; P(vsize <= k) = model CDF at k.
    let v = &m.vsize;
    let vcdf = |x: f64| v.cdf(x as u32);
    let d = ks_distance(
        &s.vsizes,
        |x| exact(vcdf(x)),
        |x| exact(v.cdf(x as u32 - 1)),
    );
    assert!(d < ks_bound, "vsize: KS {d} >= {ks_bound}");
    check_quantiles("vsize", &s.vsizes, vcdf, |x| v.cdf(x as u32 - 1), 0.0);
    let median = quantile(&s.vsizes, 0.5);
    assert!(
        (median - v.median).abs() <= 0.05 * v.median,
        "vsize median {median}"
    );
    assert!(s.vsizes[0] >= v.min as f64 && *s.vsizes.last().unwrap() <= v.max as f64);

    // Fee rates: the recorded fee/vsize is the drawn rate rounded up to a whole sat, so it
    // lies within 1/vsize (< 0.01 sat/vB) above the draw: P(recorded <= x) is between the
    // model CDF at x - 1/min_vsize and at x. Draws at the floor are recorded exactly.
    let f = &m.fee_rate;
    let shift = 1.0 / v.min as f64;
    let band = |x: f64| (f.cdf((x - shift).max(f.floor)).min(f.cdf(x)), f.cdf(x));
    let below = |x: f64| if x <= f.floor { (0.0, 0.0) } else { band(x) };
    let d = ks_distance(&s.fee_rates, band, below);
    assert!(d < ks_bound, "fee rate: KS {d} >= {ks_bound}");
    eprintln!("n {n}: KS bound {ks_bound:.4}; fee-rate KS {d:.4}");
    let fee_below = |x: f64| if x <= f.floor { 0.0 } else { f.cdf(x - shift) };
    check_quantiles("fee rate", &s.fee_rates, |x| f.cdf(x), fee_below, 0.0);
    let median = quantile(&s.fee_rates, 0.5);
    assert!(
        (median - f.median).abs() <= 0.06 * f.median,
        "fee rate median {median}"
    );
    // The floor carries the log-normal's mass below it.
    let at_floor = s.fee_rates.iter().filter(|r| **r <= f.floor).count() as f64 / n as f64;
    let p_floor = dist::log_normal_cdf(f.floor, f.median, f.sigma);
    let se = (p_floor * (1.0 - p_floor) / n as f64).sqrt();
    assert!(
        (at_floor - p_floor).abs() < 4.0 * se + 1e-3,
        "{at_floor} at the floor, expected {p_floor}"
    );
}

fn base(seed: u64) -> SimnetConfig {
    SimnetConfig {
        seed,
        block_interval: Duration::ZERO,
        template_interval: Duration::from_secs(600),
        mempool: MempoolConfig {
            initial_txs: 0,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn default_model_matches_its_distributions() {
    let c = base(11);
    // The documented defaults, so the documentation cannot drift from the code.
    assert_eq!(c.mempool.arrival_rate, 5.0);
    assert_eq!(
        c.mempool.vsize,
        VsizeModel {
            min: 110,
            median: 200.0,
            sigma: 1.0,
            max: 100_000
        }
    );
    assert_eq!(
        c.mempool.fee_rate,
        FeeRateModel {
            floor: 1.0,
            median: 3.0,
            sigma: 1.4,
            max: 5_000.0
        }
    );
    check(c, 20_000);
}

#[test]
fn other_parameters_are_followed_too() {
    let mut c = base(12);
    c.mempool.arrival_rate = 7.0;
    c.mempool.vsize = VsizeModel {
        min: 150,
        median: 400.0,
        sigma: 0.7,
        max: 20_000,
    };
    c.mempool.fee_rate = FeeRateModel {
        floor: 2.0,
        median: 20.0,
        sigma: 0.8,
        max: 1_000.0,
    };
    check(c, 14_000);
}

#[test]
fn the_default_model_would_fail_against_a_different_configuration() {
    // The same checks reject data from another distribution: they have teeth.
    let mut c = base(13);
    c.mempool.vsize.median = 230.0;
    let s = sample(c, 2_000);
    let v = VsizeModel::default();
    let d = ks_distance(
        &s.vsizes,
        |x| exact(v.cdf(x as u32)),
        |x| exact(v.cdf(x as u32 - 1)),
    );
    assert!(
        d > 1.95 / (s.vsizes.len() as f64).sqrt(),
        "KS {d} should reject"
    );
}

#[test]
fn every_transaction_has_its_drawn_vsize() {
    let mut rng = dist::stream(14, "drawn");
    let (v, f) = (VsizeModel::default(), FeeRateModel::default());
    let mut max_seen = 0;
    for _ in 0..20_000 {
        let g = txgen::generate(&mut rng, &v, &f);
        assert_eq!(g.tx.vsize(), g.drawn_vsize as usize);
        assert!(g
            .tx
            .input
            .iter()
            .all(|i| i.witness.len() == 2 && i.script_sig.is_empty()));
        max_seen = max_seen.max(g.drawn_vsize);
    }
    assert!(max_seen > 3_000, "the tail should be exercised: {max_seen}");
}
