//! The stale model, checked in virtual time: the pool's and the devices' sans-IO cores run
//! over simulated links and a simulated network on a virtual clock, so thousands of tips take
//! seconds, and the stale fraction they produce is compared with what the model predicts.
//!
//! - [`clock`]: virtual time and the event queue.
//! - [`network`]: tips as a Poisson process (seeded) and a template per tip.
//! - [`sim`]: the pool engine, one `pool::sv1::Session` per connection, `fleet::Sv1Device`s,
//!   links of `r/2` each way, the pool's processing delay.
//! - [`ledger`]: every share's verdict booked to the tip of its job.
//! - [`theory`]: the expected stale fraction; [`estimate`]: the measured one with its interval.
//!
//! # The model
//!
//! Tips come at `T_0 < T_1 < ...`, the gaps `X_k = T_{k+1} − T_k` exponential with mean `B`.
//! The pool adopts tip `k` at `T_k`: from then on a share on an older job is stale (SV1 error
//! 21). After its processing delay `P` the notify leaves, and reaches every device `r/2` later,
//! at `a_k = T_k + P + r/2`. So a device hashes job `k` from `a_k` to `a_{k+1}`: exactly `X_k`.
//! A share found on job `k` at `t` reaches the pool at `t + r/2` and is stale iff that is
//! after `T_{k+1}`, i.e. iff `t ≥ a_{k+1} − W` with the stale window `W = r + P`: the device
//! keeps hashing the old job for `P + r/2` after the switch (notify in flight), and shares
//! found in the `r/2` before the switch arrive after it. The stale part of job `k`'s stint is
//! its last `min(X_k, W)`.
//!
//! Shares come at a constant rate during a stint, so by the renewal-reward theorem the stale
//! fraction is `E[min(X, W)] / E[X]`, and for exponential `X`, `E[min(X, W)] = B(1 −
//! e^(−W/B))`:
//!
//! `f = 1 − e^(−W/B) ≈ (r + P)/B` for `r + P ≪ B` (second order: `x − x²/2`, `x = W/B`).
//!
//! Devices that hash in slices of `δ` (the fleet's runner) hash a slice's allowance at its end,
//! on the job they hold then, and send at once. Job `k` is hashed at the slice ends in
//! `[a_k, a_{k+1})`, its stale shares at those in `[a_{k+1} − W, a_{k+1})`: intervals of
//! length `X_k` and `min(X_k, W)` on a grid of random phase hold on average `X_k/δ` and
//! `min(X_k, W)/δ` slice ends, so `f` is unchanged (only its spread grows).
//!
//! The model counts stale by the pool's verdict. Time the pool's node takes to hand it the new
//! tip (before `T_k` here) does not make shares stale: the pool accepts them, and the loss is
//! work on an old tip, which is another figure.
//!
//! # The measurement and its interval
//!
//! Each measured tip is one sample `(s_k, n_k)`: stale and judged shares on its job. Samples are
//! independent and identically distributed (each depends on `X_k` and the shares during job
//! `k`'s stint only), but the shares within one are not (one short gap makes many stale). The
//! fraction `Σs/Σn` gets the cluster-robust interval of [`estimate`]. Tip 0 (the job the
//! devices start on after their handshake) and the tip that ends the last measured job are not
//! counted.
//!
//! # Hashing
//!
//! Devices hash for real: every share is a SHA-256d header hash the device found on the job it
//! held at that moment, checked by the pool. What drives *when* shares are found is
//! [`Hashing`]: `Sliced` hashes at a hash rate in slices of virtual time, as the fleet's runner
//! does; `Poisson` draws share times from a Poisson process and lets the device hash until it
//! finds one. Hashing at a constant rate with a tiny chance per hash is a Poisson process, so
//! the two give the same share process, but at a rate fine enough to resolve `r/2`, real
//! hashing costs a microsecond per hash in a debug build and thousands of tips take minutes;
//! the Poisson substitute costs a few hashes per share. `tests/stale_model.rs` checks that the
//! two agree.

pub mod clock;
pub mod estimate;
pub mod ledger;
pub mod network;
pub mod params;
pub mod sim;
pub mod theory;

use std::time::Duration;

use serde::Serialize;

pub use estimate::Estimate;
pub use ledger::{DeviceShares, TipShares};
pub use params::{Hashing, ParamsError, StaleModelParams};
pub use sim::SimError;

/// What a stale-model run found, beside what the model predicts.
#[derive(Clone, Debug)]
pub struct StaleModelResult {
    /// The parameters the run was given.
    pub params: StaleModelParams,
    /// Stale shares over judged shares on the measured tips' jobs, by the pool's verdicts,
    /// with the 95% interval of tips as samples.
    pub stale: Estimate,
    /// The model's stale fraction for these parameters, `1 − e^(−(r + processing)/B)`.
    pub expected: f64,
    /// Its first-order form, `(r + processing)/B`.
    pub linear: f64,
    /// Pool verdicts on the measured tips' jobs.
    pub shares: TipShares,
    /// The same shares as the devices heard back.
    pub devices: DeviceShares,
    /// Pool verdicts per measured tip, in order.
    pub per_tip: Vec<TipShares>,
    /// Pool verdicts on the unmeasured tip 0's job (the devices' start).
    pub warmup: TipShares,
    /// Header hashes the devices computed.
    pub hashes: u64,
    /// Shortest and longest time from a tip to its job reaching a device.
    pub job_delay: (Duration, Duration),
    /// Virtual time to the end of the last measured job.
    pub virtual_time: Duration,
    /// Events the simulator processed.
    pub events: u64,
}

impl StaleModelResult {
    /// The model's prediction lies within the run's 95% interval.
    pub fn agrees_with_theory(&self) -> bool {
        self.stale.contains(self.expected)
    }

    /// A short summary with the figures the lead compares against a real-time run.
    pub fn summary(&self) -> Summary {
        Summary {
            rtt_ms: self.params.rtt.as_secs_f64() * 1e3,
            processing_ms: self.params.processing.as_secs_f64() * 1e3,
            block_interval_s: self.params.block_interval.as_secs_f64(),
            tips: self.stale.clusters,
            shares: self.shares.judged(),
            stale: self.shares.stale,
            stale_fraction: self.stale.value,
            ci95: self.stale.ci95,
            expected: self.expected,
            linear: self.linear,
        }
    }
}

/// [`StaleModelResult`] in a few numbers (serializable, for logs and reports).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// The round trip between devices and pool, in ms.
    pub rtt_ms: f64,
    /// The pool's processing delay, in ms.
    pub processing_ms: f64,
    /// The mean block interval, in seconds.
    pub block_interval_s: f64,
    /// Measured tips.
    pub tips: u32,
    /// Shares the pool judged on the measured tips' jobs.
    pub shares: u64,
    /// Of those, stale.
    pub stale: u64,
    /// `stale / shares`.
    pub stale_fraction: f64,
    /// 95% confidence interval of `stale_fraction`.
    pub ci95: [f64; 2],
    /// The model's stale fraction, `1 − e^(−(r + processing)/B)`.
    pub expected: f64,
    /// Its first-order form, `(r + processing)/B`.
    pub linear: f64,
}

/// Runs the stale model in virtual time (see the module docs) and compares it with theory.
pub fn stale_model(params: StaleModelParams) -> Result<StaleModelResult, SimError> {
    let out = sim::Sim::new(params.clone())?.run()?;
    let per_tip = out.ledger.measured().to_vec();
    let stale = Estimate::ratio(per_tip.iter().map(|t| (t.stale, t.judged())))
        .ok_or_else(|| SimError::Protocol("no share was judged on a measured tip".into()))?;
    let shares = per_tip.iter().fold(TipShares::default(), |a, t| TipShares {
        accepted: a.accepted + t.accepted,
        stale: a.stale + t.stale,
        other: a.other + t.other,
    });
    let window = params.stale_window();
    Ok(StaleModelResult {
        expected: theory::expected_stale_fraction(window, params.block_interval),
        linear: theory::linear_stale_fraction(window, params.block_interval),
        stale,
        shares,
        devices: out.ledger.devices,
        warmup: out.ledger.unmeasured,
        job_delay: out.ledger.job_delay.unwrap_or_default(),
        per_tip,
        hashes: out.hashes,
        virtual_time: out.end.since(primitives::Timestamp::ZERO),
        events: out.events,
        params,
    })
}
