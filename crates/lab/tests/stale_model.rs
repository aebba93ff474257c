//! The stale model (issue: "with network block interval B and WAN RTT r the stale fraction is
//! about (r + processing) / B"), checked by the pool's and the devices' sans-IO cores in
//! virtual time: the fraction the pool's verdicts give must hold the model's value within its
//! 95% interval, tips as samples. Every run is deterministic by its seed.

use std::time::Duration;

use lab::virtual_time::{stale_model, Hashing, ParamsError, SimError, StaleModelParams};
use lab::virtual_time::{StaleModelResult, TipShares};
use primitives::{Difficulty, HashRate};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn secs(v: u64) -> Duration {
    Duration::from_secs(v)
}

/// Four devices with half a share a second each: about 2 shares per second of tip interval.
fn params(rtt: Duration, block_interval: Duration, tips: u32) -> StaleModelParams {
    StaleModelParams {
        rtt,
        block_interval,
        tips,
        devices: 4,
        share_difficulty: Difficulty::new(2f64.powi(-30)).unwrap(),
        hashing: Hashing::Poisson {
            shares_per_second: 0.5,
        },
        seed: 1,
        ..StaleModelParams::default()
    }
}

fn run(p: StaleModelParams) -> StaleModelResult {
    let r = stale_model(p).expect("the run completes");
    eprintln!("{}", serde_json::to_string(&r.summary()).unwrap());
    r
}

/// What every run must show whatever the parameters: every share judged, the pool's verdicts
/// and what the devices heard agree, only latency rejects shares, jobs arrive when the links
/// say, and the work is real.
#[track_caller]
fn assert_sound(r: &StaleModelResult) {
    let p = &r.params;
    assert_eq!(r.stale.clusters, p.tips);
    assert_eq!(r.per_tip.len(), p.tips as usize);
    assert_eq!(r.shares.other, 0, "only staleness rejects shares: {r:?}");
    assert_eq!(r.devices.other, 0);
    assert_eq!(r.devices.unanswered, 0);
    assert_eq!(r.devices.dropped, 0);
    assert_eq!(
        r.devices.sent,
        r.shares.judged(),
        "every share sent was judged once"
    );
    assert_eq!(r.devices.accepted, r.shares.accepted);
    assert_eq!(r.devices.stale, r.shares.stale);
    let total = r.per_tip.iter().map(TipShares::judged).sum::<u64>();
    assert_eq!(total, r.shares.judged());
    assert!(
        r.warmup.judged() > 0,
        "tip 0's shares are counted apart: {r:?}"
    );
    let d = p.job_delay();
    assert_eq!(
        r.job_delay,
        (d, d),
        "every job reaches every device P + r/2 after its tip"
    );
    assert!(
        r.hashes >= r.shares.judged(),
        "a share is at least one hash"
    );
    // About the share rate asked for: Poisson, so within 5 standard deviations.
    let expected = p.hashing.shares_per_second(p.share_difficulty)
        * p.devices as f64
        * r.virtual_time.as_secs_f64();
    let got = (r.shares.judged() + r.warmup.judged()) as f64;
    assert!(
        (got - expected).abs() < 5.0 * expected.sqrt() + 0.01 * expected,
        "{got} shares, {expected} expected"
    );
}

/// A sound run whose stale share agrees with the model.
#[track_caller]
fn run_agreeing(p: StaleModelParams) -> StaleModelResult {
    let r = run(p);
    assert_sound(&r);
    assert!(
        r.agrees_with_theory(),
        "model {} outside {:?}",
        r.expected,
        r.stale.ci95
    );
    r
}

#[test]
fn stale_fraction_is_rtt_over_block_interval_at_145ms_and_10s() {
    let r = run_agreeing(params(ms(145), secs(10), 2000));
    assert!(r.shares.stale > 300, "{r:?}");
    // The interval is narrow enough to tell the model from its halves and doubles: the
    // notify's trip alone (r/2) or a round trip counted twice.
    assert!(!r.stale.contains(0.0725 / 10.0) && !r.stale.contains(0.29 / 10.0));
}

#[test]
fn stale_fraction_at_500ms_and_5s() {
    let r = run_agreeing(params(ms(500), secs(5), 2000));
    assert!(!r.stale.contains(0.05) && !r.stale.contains(0.2));
}

#[test]
fn without_latency_no_share_is_stale_and_processing_alone_makes_them_stale() {
    let none = run(params(Duration::ZERO, secs(10), 600));
    assert_sound(&none);
    assert!(none.shares.accepted > 6_000);
    assert_eq!(none.shares.stale, 0, "{none:?}");
    assert_eq!(none.stale.value, 0.0);

    let processing = run(StaleModelParams {
        processing: ms(50),
        ..params(Duration::ZERO, secs(10), 600)
    });
    assert_sound(&processing);
    assert!(processing.agrees_with_theory(), "{processing:?}");
    assert!(processing.stale.ci95[0] > 0.0, "{:?}", processing.stale);
}

#[test]
fn processing_and_round_trip_add_up() {
    let r = run(StaleModelParams {
        processing: ms(105),
        ..params(ms(145), secs(10), 1500)
    });
    assert_sound(&r);
    assert_eq!(r.params.stale_window(), ms(250));
    assert!(r.agrees_with_theory(), "{r:?}");
    // Either alone is too little.
    assert!(r.stale.ci95[0] > 0.0145, "{:?}", r.stale);
}

/// The Poisson share times substitute for hashing at a rate; hashing at a rate in coarse
/// slices, as the fleet's runner does, must give the same fraction (on the same tips). Were a
/// share held to its slice's end, the window would grow by half a slice: 0.117 here.
#[test]
fn hashing_in_slices_gives_the_fraction_of_poisson_shares() {
    let base = StaleModelParams {
        devices: 2,
        ..params(ms(500), secs(5), 600)
    };
    let sliced = run(StaleModelParams {
        share_difficulty: Difficulty::new(2f64.powi(-26)).unwrap(),
        // Two shares a second per device, at 64 hashes a share, in 250 ms slices.
        hashing: Hashing::Sliced {
            hash_rate: HashRate::from_hashes_per_sec(128.0),
            slice: ms(250),
        },
        ..base.clone()
    });
    let poisson = run(StaleModelParams {
        hashing: Hashing::Poisson {
            shares_per_second: 2.0,
        },
        ..base
    });
    for r in [&sliced, &poisson] {
        assert_sound(r);
        assert!(r.agrees_with_theory(), "{r:?}");
        assert!(!r.stale.contains(0.117), "{:?}", r.stale);
    }
    assert!(sliced.stale.overlaps(&poisson.stale));
    // Sliced devices hash their rate: 128 H/s each over the run, less the handshake.
    let rate = sliced.hashes as f64 / (2.0 * sliced.virtual_time.as_secs_f64());
    assert!((120.0..=128.0).contains(&rate), "{rate} H/s");
}

#[test]
fn a_run_is_a_function_of_its_seed() {
    let p = params(ms(145), secs(2), 100);
    let a = stale_model(p.clone()).unwrap();
    let b = stale_model(p.clone()).unwrap();
    assert_eq!(a.per_tip, b.per_tip);
    assert_eq!((a.hashes, a.events), (b.hashes, b.events));
    let c = stale_model(StaleModelParams { seed: 2, ..p }).unwrap();
    assert_ne!(a.per_tip, c.per_tip);
}

/// The interval's width is right: over independent seeds, the estimates spread as their
/// standard errors say, and the intervals hold the model about 95% of the time.
#[test]
fn the_interval_has_its_stated_coverage() {
    let runs: Vec<StaleModelResult> = (0..30u64)
        .map(|seed| {
            stale_model(StaleModelParams {
                devices: 1,
                hashing: Hashing::Poisson {
                    shares_per_second: 2.0,
                },
                seed: 100 + seed,
                ..params(ms(500), secs(5), 100)
            })
            .unwrap()
        })
        .collect();
    let expected = runs[0].expected;
    let covered = runs.iter().filter(|r| r.agrees_with_theory()).count();
    // P(at most 23 of 30 | 95%) = 0.06%.
    assert!(covered >= 24, "{covered} of 30 intervals hold {expected}");
    let values: Vec<f64> = runs.iter().map(|r| r.stale.value).collect();
    let mean = values.iter().sum::<f64>() / 30.0;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 29.0).sqrt();
    // The standard error each run reports (half-width over t(0.975, 149) = 1.976).
    let se = runs
        .iter()
        .map(|r| r.stale.half_width() / 1.976)
        .sum::<f64>()
        / 30.0;
    // The sample sd of 30 values is within ±40% of the truth with odds of about 1 in 1000.
    let ratio = sd / se;
    eprintln!("{covered}/30 intervals hold {expected}; spread {sd:.5} vs standard error {se:.5}");
    assert!(
        (0.6..=1.4).contains(&ratio),
        "spread {sd}, standard error {se}"
    );
    // All 3000 tips together: the mean of the runs is within 4 of its standard errors.
    assert!(
        (mean - expected).abs() < 4.0 * se / 30f64.sqrt(),
        "{mean} vs {expected}"
    );
}

#[test]
fn bad_parameters_are_refused() {
    let ok = params(ms(145), secs(10), 10);
    let err = |p: StaleModelParams| match stale_model(p) {
        Err(SimError::Params(e)) => e,
        other => panic!("expected a parameter error, got {other:?}"),
    };
    assert_eq!(
        err(StaleModelParams {
            tips: 1,
            ..ok.clone()
        }),
        ParamsError::Tips(1)
    );
    assert_eq!(
        err(StaleModelParams {
            devices: 0,
            ..ok.clone()
        }),
        ParamsError::Devices
    );
    assert_eq!(
        err(StaleModelParams {
            block_interval: Duration::ZERO,
            ..ok.clone()
        }),
        ParamsError::BlockInterval
    );
    assert!(matches!(
        err(StaleModelParams {
            hashing: Hashing::Poisson {
                shares_per_second: f64::NAN
            },
            ..ok.clone()
        }),
        ParamsError::ShareRate(r) if r.is_nan()
    ));
    assert_eq!(
        err(StaleModelParams {
            hashing: Hashing::Sliced {
                hash_rate: HashRate::from_hashes_per_sec(100.0),
                slice: Duration::ZERO
            },
            ..ok.clone()
        }),
        ParamsError::Slice
    );
    // A job whose shares could overflow the pool's duplicate table would turn shares stale
    // for a reason other than latency.
    assert!(matches!(
        err(StaleModelParams {
            hashing: Hashing::Poisson {
                shares_per_second: 10_000.0
            },
            ..ok
        }),
        ParamsError::TooManySharesPerJob(..)
    ));
}
