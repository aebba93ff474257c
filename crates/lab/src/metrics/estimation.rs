//! How well each configuration's roles estimate hash rate and set difficulty, scored against
//! the fleet's ground truth (docs/metrics.md, "Estimation").
//!
//! The truth: what the fleet really hashed, shared equally by its devices. Between two
//! hash-rate steps the fleet marked (`hash_rate_step`), and from the window's start to the first
//! and from the last to the drain, it is the fleet's measured rate over that phase (its
//! per-second hash counts): a fleet short of CPU after a step hashes less than the step asks
//! for, and that shortfall is not the pool's error. Where a phase has no counts, the truth is
//! each device's share of the budget times the last step's factor times the fleet's
//! achieved/expected ratio over the whole window.
//!
//! - Hash-rate estimates are what the lab sampled from the roles' HTTP status while the run
//!   went on ([`EstimateSample`]). A pool's per-worker figure is compared with the truth of
//!   the devices behind the worker: the fleet is homogeneous, so a worker carries `devices /
//!   pool_workers` of them (one for sv1, A and C-workers, all of them behind C's aggregated
//!   channel). The error is `estimate / truth - 1`, in percent; `bias` is its mean, `p50` and
//!   `p90` are of its magnitude. Only samples in the measured window count.
//! - Vardiff is read from the devices' own events: the difficulty in force (each job's target,
//!   and `TargetChanged`) against the device's true hash rate gives the share rate the device
//!   is set up for, `60 · H / (D · 2^32)` per minute, without the Poisson noise of counting
//!   shares. Convergence is the time from a device's connect (or from a step) until that rate
//!   is within 20% of the scenario's target; deviation is the same rate's distance from the
//!   target, one sample per device per second of the measured window, outside the spans
//!   still converging.

use std::collections::{BTreeMap, HashMap};

use events::EventKind;
use primitives::Difficulty;

use super::input::Window;
use crate::results::{Distribution, ErrorPct, Estimation, RoleEstimation};
use crate::stats::{summarize, Samples};

/// Hashes per share at difficulty 1.
const HASHES_PER_DIFF1: f64 = 4_294_967_296.0;

/// Within this fraction of the target share rate, a device has converged.
pub const CONVERGED_WITHIN: f64 = 0.20;

/// The fleet's measured rate in each phase of the window that the steps cut it into (phase
/// `k` from the `k`-th step, phase 0 from the warm-up's end), `None` for a phase with fewer
/// than two seconds of counts. A count in row `s` is the hashes of the second before it
/// (the fleet reports what it did since its last report), so only rows whose previous second
/// and own second both lie inside the phase count; a report the fleet was late with lands in
/// the next row, which is why the rate is a sum over rows, not a row's value.
fn phase_rates(w: &Window, steps: &[(u64, f64)], hashes_per_s: &[u64]) -> Vec<Option<f64>> {
    const SEC: u64 = 1_000_000_000;
    let mut bounds = vec![w.warmup_end_ns];
    bounds.extend(
        steps
            .iter()
            .map(|s| s.0.clamp(w.warmup_end_ns, w.drain_start_ns)),
    );
    bounds.push(w.drain_start_ns);
    bounds
        .windows(2)
        .map(|b| {
            let (from, to) = (b[0], b[1]);
            let rows: Vec<u64> = hashes_per_s
                .iter()
                .enumerate()
                .filter(|&(s, _)| {
                    let row_start = w.start_ns + s as u64 * SEC;
                    row_start >= from + SEC && row_start + SEC <= to
                })
                .map(|(_, &n)| n)
                .collect();
            let sum: u64 = rows.iter().sum();
            (rows.len() >= 2 && sum > 0).then(|| sum as f64 / rows.len() as f64)
        })
        .collect()
}

/// Whose estimate a sample is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Estimator {
    /// The pool's figure for one worker (`/api/workers`).
    PoolWorker,
    /// The pool's figure for all its miners (`/api/status`).
    PoolTotal,
    /// A farm translator's figure for its devices together (`/api/status` `hashrate`): what it
    /// claims upstream.
    Translator,
}

/// One hash-rate figure a role reported at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct EstimateSample {
    /// When it was read.
    pub at_ns: u64,
    /// Whose it is.
    pub estimator: Estimator,
    /// The role's averaging window as it names it (`1m`, `10m`), or `current`.
    pub window: &'static str,
    /// Hashes per second.
    pub hashes_per_s: f64,
}

/// What the metric needs besides the events: the fleet's setup and the sampled estimates.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EstimationInput {
    /// Devices of the configuration (0: nothing is scored).
    pub devices: u32,
    /// The share rate per device the roles' vardiff aims at.
    pub shares_per_minute: f64,
    /// The hash-rate steps' factors, in the order they take effect.
    pub step_factors: Vec<f64>,
    /// The roles' estimates over the run.
    pub samples: Vec<EstimateSample>,
}

/// Raw figures, mergeable across trials.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EstimationTally {
    /// Per (estimator, window): signed errors in percent.
    pub errors: BTreeMap<(Estimator, &'static str), Vec<f64>>,
    /// Convergence times (ns), one per (device, connect or step) that converged.
    pub converge: Samples,
    /// Connects and steps after which the device never converged before the drain.
    pub not_converged: u64,
    /// Of `converge`, the convergences after a hash-rate step.
    pub converge_after_step: Samples,
    /// Of `not_converged`, the steps.
    pub not_converged_after_step: u64,
    /// Signed share-rate deviations from the target, in percent.
    pub deviation: Vec<f64>,
    /// Whether anything was scored.
    pub scored: bool,
}

impl EstimationTally {
    /// Adds another trial's.
    pub fn merge(&mut self, o: &EstimationTally) {
        for (k, v) in &o.errors {
            self.errors.entry(*k).or_default().extend_from_slice(v);
        }
        self.converge.merge(&o.converge);
        self.not_converged += o.not_converged;
        self.converge_after_step.merge(&o.converge_after_step);
        self.not_converged_after_step += o.not_converged_after_step;
        self.deviation.extend_from_slice(&o.deviation);
        self.scored |= o.scored;
    }

    /// results.json's `estimation`; `None` when nothing was scored.
    pub fn results(&self) -> Option<Estimation> {
        if !self.scored {
            return None;
        }
        let of = |e: Estimator| -> BTreeMap<String, ErrorPct> {
            self.errors
                .iter()
                .filter(|((who, _), v)| *who == e && !v.is_empty())
                .map(|((_, w), v)| ((*w).to_owned(), error_pct(v)))
                .collect()
        };
        let mut roles = BTreeMap::new();
        let translator = of(Estimator::Translator);
        if !translator.is_empty() {
            roles.insert(
                "translator".to_owned(),
                RoleEstimation {
                    hashrate_error_pct: translator,
                },
            );
        }
        Some(Estimation {
            hashrate_error_pct: of(Estimator::PoolWorker),
            total_hashrate_error_pct: of(Estimator::PoolTotal),
            vardiff_converge_s: seconds(&summarize(
                &self.converge,
                if self.not_converged > 0 {
                    "no device converged before the drain (see vardiff_not_converged)"
                } else {
                    "no device connected or met a hash-rate step in the run"
                },
            )),
            vardiff_not_converged: self.not_converged,
            vardiff_converge_after_step_s: seconds(&summarize(
                &self.converge_after_step,
                if self.not_converged_after_step > 0 {
                    "no device converged after a step before the drain \
                     (see vardiff_not_converged_after_step)"
                } else {
                    "no hash-rate step in the run (--hash-rate-step)"
                },
            )),
            vardiff_not_converged_after_step: (self.not_converged_after_step > 0
                || !self.converge_after_step.is_empty())
            .then_some(self.not_converged_after_step),
            share_rate_deviation_pct: (!self.deviation.is_empty())
                .then(|| error_pct(&self.deviation)),
            roles,
        })
    }
}

/// `p50`, `p90` of the magnitudes and the mean of the signed values.
fn error_pct(signed: &[f64]) -> ErrorPct {
    let mut abs: Vec<f64> = signed.iter().map(|v| v.abs()).collect();
    abs.sort_by(f64::total_cmp);
    let q = |p: f64| abs[((abs.len() - 1) as f64 * p).round() as usize];
    ErrorPct {
        n: signed.len() as u64,
        p50: q(0.5),
        p90: q(0.9),
        bias: signed.iter().sum::<f64>() / signed.len() as f64,
    }
}

/// A distribution in milliseconds, restated in seconds.
fn seconds(d: &Distribution) -> Distribution {
    let s = |v: Option<f64>| v.map(|ms| ms / 1e3);
    Distribution {
        mean: s(d.mean),
        p50: s(d.p50),
        p95: s(d.p95),
        p99: s(d.p99),
        max: s(d.max),
        ci95: d.ci95.map(|[a, b]| [a / 1e3, b / 1e3]),
        ..d.clone()
    }
}

/// One device's connects and the difficulties it was given, in time order.
#[derive(Default)]
struct DeviceDiff {
    connects: Vec<u64>,
    closes: Vec<u64>,
    /// (when, difficulty), repeats within a connection dropped.
    difficulty: Vec<(u64, f64)>,
}

impl DeviceDiff {
    /// The latest connect at or before `t`, if the device was still connected at `t`.
    fn connected_since(&self, t: u64) -> Option<u64> {
        let since = self
            .connects
            .iter()
            .take_while(|&&c| c <= t)
            .last()
            .copied()?;
        let closed = self.closes.iter().any(|&c| c >= since && c <= t);
        (!closed).then_some(since)
    }

    /// The difficulty in force at `t`: the latest given since the connection in force began.
    fn in_force(&self, t: u64) -> Option<f64> {
        let since = self.connected_since(t)?;
        self.difficulty
            .iter()
            .take_while(|d| d.0 <= t)
            .last()
            .filter(|d| d.0 >= since)
            .map(|d| d.1)
    }
}

/// Reads the fleet logs' events; [`Vardiff::finish`] scores them.
#[derive(Default)]
pub(crate) struct Vardiff {
    devices: HashMap<u64, DeviceDiff>,
    /// Per fleet log, the step marks' times.
    steps: BTreeMap<u32, Vec<u64>>,
}

impl Vardiff {
    pub(crate) fn on_fleet_event(&mut self, log: u32, ts: u64, kind: &EventKind) {
        let (device, target) = match kind {
            EventKind::ConnectionOpened(c) => {
                self.devices.entry(c.conn).or_default().connects.push(ts);
                return;
            }
            EventKind::ConnectionClosed(c) => {
                self.devices.entry(c.conn).or_default().closes.push(ts);
                return;
            }
            EventKind::Mark(m) if m.name.as_str() == fleet::hash_rate::STEP_MARK => {
                self.steps.entry(log).or_default().push(ts);
                return;
            }
            EventKind::JobReceived(j) => (j.device, j.target),
            EventKind::TargetChanged(t) => (t.conn, t.target),
            _ => return,
        };
        let d = Difficulty::from_target(target).as_f64();
        let dev = self.devices.entry(device).or_default();
        // A repeat is dropped within a connection only: a reconnect's first difficulty starts
        // the new connection's record even when it is the same.
        let since = dev.connects.last().copied().unwrap_or(0);
        let repeat = dev
            .difficulty
            .last()
            .is_some_and(|l| l.1 == d && l.0 >= since);
        if !repeat {
            dev.difficulty.push((ts, d));
        }
    }

    /// Scores the run: `achieved_hps` is the fleet's measured rate over the window,
    /// `hashes_per_s` its hashes counted in each second of the window (row 0 from
    /// `w.start_ns`; empty when the fleet counted none).
    pub(crate) fn finish(
        mut self,
        w: &Window,
        input: &EstimationInput,
        hash_budget_hps: f64,
        achieved_hps: Option<f64>,
        hashes_per_s: &[u64],
        pool_workers: Option<u64>,
    ) -> EstimationTally {
        let mut tally = EstimationTally::default();
        if input.devices == 0 || hash_budget_hps <= 0.0 || input.shares_per_minute <= 0.0 {
            return tally;
        }
        tally.scored = true;
        // The steps as the fleet processes marked them (they start within milliseconds of each
        // other): the k-th step at the earliest of the logs' k-th marks.
        let longest = self.steps.values().map(Vec::len).max().unwrap_or(0);
        let marks: Vec<u64> = (0..longest)
            .filter_map(|k| self.steps.values().filter_map(|m| m.get(k)).min().copied())
            .collect();
        let steps: Vec<(u64, f64)> = marks
            .into_iter()
            .zip(input.step_factors.iter().copied())
            .collect();
        let factor_at = |t: u64| {
            steps
                .iter()
                .take_while(|s| s.0 <= t)
                .last()
                .map_or(1.0, |s| s.1)
        };
        let base = hash_budget_hps / f64::from(input.devices);
        // The fleet's achieved/expected over the measured window.
        let ratio = achieved_hps.map_or(1.0, |a| {
            let (from, to) = (w.warmup_end_ns, w.drain_start_ns);
            let secs = (to.saturating_sub(from) / 1_000_000_000).max(1);
            let mean_factor = (0..secs)
                .map(|s| factor_at(from + s * 1_000_000_000))
                .sum::<f64>()
                / secs as f64;
            let expected = hash_budget_hps * mean_factor;
            if expected > 0.0 && a > 0.0 {
                a / expected
            } else {
                1.0
            }
        });
        let measured = phase_rates(w, &steps, hashes_per_s);
        let phase = |t: u64| steps.iter().take_while(|s| s.0 <= t).count();
        let device_truth = |t: u64| match measured[phase(t)] {
            Some(hps) => hps / f64::from(input.devices),
            None => base * factor_at(t) * ratio,
        };

        // Hash-rate estimates.
        let per_worker_devices = pool_workers
            .filter(|&n| n > 0)
            .map(|n| f64::from(input.devices) / n as f64);
        for s in &input.samples {
            if !w.measured(s.at_ns) {
                continue;
            }
            let devices = match s.estimator {
                Estimator::PoolWorker => match per_worker_devices {
                    Some(n) => n,
                    None => continue,
                },
                Estimator::PoolTotal | Estimator::Translator => f64::from(input.devices),
            };
            let truth = device_truth(s.at_ns) * devices;
            if truth > 0.0 {
                tally
                    .errors
                    .entry((s.estimator, s.window))
                    .or_default()
                    .push((s.hashes_per_s / truth - 1.0) * 100.0);
            }
        }

        // Vardiff.
        let target = input.shares_per_minute;
        let rate = |t: u64, d: f64| 60.0 * device_truth(t) / (d * HASHES_PER_DIFF1);
        let within = |t: u64, d: f64| (rate(t, d) / target - 1.0).abs() <= CONVERGED_WITHIN;
        let mut ids: Vec<u64> = self.devices.keys().copied().collect();
        ids.sort_unstable();
        for (cluster, id) in ids.into_iter().enumerate() {
            let dev = self.devices.remove(&id).expect("listed");
            let in_force = |t: u64| dev.in_force(t);
            // Its connects, and the steps it was connected for.
            let starts = dev
                .connects
                .iter()
                .map(|&t| (t, false))
                .chain(
                    steps
                        .iter()
                        .filter(|s| dev.connected_since(s.0).is_some())
                        .map(|s| (s.0, true)),
                )
                .filter(|&(t, _)| t >= w.start_ns && t < w.drain_start_ns);
            // The spans a device was still converging, to leave out of the deviation.
            let mut unsettled: Vec<(u64, u64)> = Vec::new();
            for (t0, step) in starts {
                // Moments the rate can change from t0 on: difficulty changes and steps.
                let mut moments: Vec<u64> = std::iter::once(t0)
                    .chain(dev.difficulty.iter().map(|d| d.0))
                    .chain(steps.iter().map(|s| s.0))
                    .filter(|&t| t >= t0 && t < w.drain_start_ns)
                    .collect();
                moments.sort_unstable();
                moments.dedup();
                let done = moments
                    .into_iter()
                    .find(|&t| in_force(t).is_some_and(|d| within(t, d)));
                match done {
                    Some(t) => {
                        tally.converge.push(cluster as u32, t - t0);
                        if step {
                            tally.converge_after_step.push(cluster as u32, t - t0);
                        }
                        unsettled.push((t0, t));
                    }
                    None => {
                        tally.not_converged += 1;
                        tally.not_converged_after_step += u64::from(step);
                        unsettled.push((t0, w.drain_start_ns));
                    }
                }
            }
            let mut t = w.warmup_end_ns;
            while t < w.drain_start_ns {
                let settled = !unsettled.iter().any(|&(a, b)| t >= a && t < b);
                if let (true, Some(d)) = (settled, in_force(t)) {
                    tally.deviation.push((rate(t, d) / target - 1.0) * 100.0);
                }
                t += 1_000_000_000;
            }
        }
        tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use events::{ConnectionOpened, JobId, JobReceived, Mark, ShortStr, TargetChanged};

    const S: u64 = 1_000_000_000;

    fn window() -> Window {
        Window {
            start_ns: 0,
            warmup_end_ns: 10 * S,
            drain_start_ns: 200 * S,
            end_ns: 205 * S,
        }
    }

    /// The difficulty at which a device of `hps` sends `spm` shares a minute.
    fn diff_for(hps: f64, spm: f64) -> Difficulty {
        Difficulty::new(60.0 * hps / (spm * HASHES_PER_DIFF1)).unwrap()
    }

    fn job(device: u64, d: Difficulty) -> EventKind {
        EventKind::JobReceived(JobReceived {
            device,
            channel: None,
            job_id: JobId::Num(1),
            fingerprint: None,
            prev_hash: None,
            target: d.to_target(),
            clean: true,
            future: false,
        })
    }

    /// The fleet's mark of a hash-rate step.
    fn step() -> EventKind {
        EventKind::Mark(Mark {
            name: ShortStr::new(fleet::hash_rate::STEP_MARK),
        })
    }

    /// `devices` aimed at 15 shares a minute through the hash-rate steps `step_factors`, no
    /// estimates sampled.
    fn vardiff_input(devices: u32, step_factors: Vec<f64>) -> EstimationInput {
        EstimationInput {
            devices,
            shares_per_minute: 15.0,
            step_factors,
            samples: vec![],
        }
    }

    fn connect(device: u64) -> EventKind {
        EventKind::ConnectionOpened(ConnectionOpened {
            conn: device,
            peer: "127.0.0.1:1".parse().unwrap(),
            local: "127.0.0.1:2".parse().unwrap(),
            label: ShortStr::new("d"),
        })
    }

    /// Two devices connect at 1 s and get a difficulty for `hps` each at 15 shares a minute; the
    /// fleet marks a step at 100 s, and at 130 s the pool sets a difficulty for `then` each.
    fn stepped(hps: f64, then: f64) -> Vardiff {
        let mut v = Vardiff::default();
        for dev in 0..2u64 {
            v.on_fleet_event(0, S, &connect(dev));
            v.on_fleet_event(0, S + 250_000_000, &job(dev, diff_for(hps, 15.0)));
        }
        v.on_fleet_event(0, 100 * S, &step());
        for dev in 0..2u64 {
            v.on_fleet_event(
                0,
                130 * S,
                &EventKind::TargetChanged(TargetChanged {
                    conn: dev,
                    channel: None,
                    target: diff_for(then, 15.0).to_target(),
                }),
            );
        }
        v
    }

    /// Two devices of 1 MH/s aimed at 15 shares a minute; from 100 s they hash twice as fast,
    /// and the pool doubles their difficulty 30 s later.
    #[test]
    fn vardiff_convergence_and_deviation_are_what_was_injected() {
        let w = window();
        let hps = 1e6;
        let v = stepped(hps, 2.0 * hps);
        let input = vardiff_input(2, vec![2.0]);
        let t = v.finish(&w, &input, 2.0 * hps, None, &[], Some(2));
        let r = t.results().unwrap();
        // Connects: 0.25 s to the first job; the step: 30 s.
        let c = &r.vardiff_converge_s;
        assert_eq!(c.n, 4);
        assert!((c.p50.unwrap() - 0.25).abs() < 0.01, "{c:?}");
        assert!((c.max.unwrap() - 30.0).abs() < 0.05, "{c:?}");
        assert_eq!(r.vardiff_not_converged, 0);
        let after = &r.vardiff_converge_after_step_s;
        assert_eq!(after.n, 2);
        assert!((after.p50.unwrap() - 30.0).abs() < 0.05, "{after:?}");
        // Outside the 30 s after the step every sample sits on the target.
        let dev = r.share_rate_deviation_pct.unwrap();
        assert_eq!(dev.n, 2 * (190 - 30));
        assert!(dev.p90 < 1e-6 && dev.bias.abs() < 1e-6, "{dev:?}");
    }

    /// A fleet short of CPU: the step asks for twice the rate, the devices manage one and a
    /// half times it (their per-second counts say so, one report late and merged into the next
    /// second's), and the pool sets the difficulty for what they really hash 30 s after the
    /// step. That is convergence, and no deviation outside it; scored against the budget's
    /// doubling, the devices would never have converged.
    #[test]
    fn the_truth_after_a_step_is_what_the_fleet_really_hashed() {
        let w = window();
        let hps = 1e6;
        let v = stepped(hps, 1.5 * hps);
        let mut counts: Vec<u64> = (0..205u64)
            .map(|s| if s <= 100 { 2_000_000 } else { 3_000_000 })
            .collect();
        counts[150] = 0;
        counts[151] = 6_000_000;
        let input = vardiff_input(2, vec![2.0]);
        let r = v
            .finish(&w, &input, 2.0 * hps, None, &counts, Some(2))
            .results()
            .unwrap();
        assert_eq!(r.vardiff_not_converged, 0, "{r:?}");
        let after = &r.vardiff_converge_after_step_s;
        assert_eq!(after.n, 2);
        assert!((after.p50.unwrap() - 30.0).abs() < 0.05, "{after:?}");
        let dev = r.share_rate_deviation_pct.unwrap();
        assert!(dev.p90 < 1e-6 && dev.bias.abs() < 1e-6, "{dev:?}");
        // Without the counts the truth is the budget's doubling, which the pool never meets.
        let r = stepped(hps, 1.5 * hps)
            .finish(&w, &input, 2.0 * hps, None, &[], Some(2))
            .results()
            .unwrap();
        assert_eq!(r.vardiff_not_converged_after_step, Some(2), "{r:?}");
    }

    /// A pool that never follows the step: the devices never converge, and until the step
    /// they sit on the target.
    #[test]
    fn a_device_that_never_converges_is_counted_and_left_out_of_the_deviation() {
        let w = window();
        let mut v = Vardiff::default();
        v.on_fleet_event(0, S, &connect(7));
        v.on_fleet_event(0, 2 * S, &job(7, diff_for(1e6, 15.0)));
        v.on_fleet_event(0, 50 * S, &step());
        let input = vardiff_input(1, vec![3.0]);
        let r = v
            .finish(&w, &input, 1e6, None, &[], Some(1))
            .results()
            .unwrap();
        assert_eq!(r.vardiff_converge_s.n, 1);
        assert_eq!(r.vardiff_not_converged, 1);
        assert_eq!(r.vardiff_not_converged_after_step, Some(1));
        assert_eq!(r.vardiff_converge_after_step_s.n, 0);
        // Absent because nothing converged, not because there was no step.
        let why = r.vardiff_converge_after_step_s.absent_reason.as_deref();
        assert!(
            why.is_some_and(|w| w.starts_with("no device converged after a step")),
            "{why:?}"
        );
        assert_eq!(r.share_rate_deviation_pct.unwrap().n, 40);
    }

    /// A device that reconnects and gets the same difficulty again converges at once; while it
    /// is away it gives no deviation samples; a device that connects after the step is not
    /// scored for it.
    #[test]
    fn reconnects_and_late_devices_are_scored_for_what_they_saw() {
        let w = window();
        let d = diff_for(1e6, 15.0);
        let mut v = Vardiff::default();
        v.on_fleet_event(0, S, &connect(1));
        v.on_fleet_event(0, 2 * S, &job(1, d));
        v.on_fleet_event(
            0,
            50 * S,
            &EventKind::ConnectionClosed(events::ConnectionClosed {
                conn: 1,
                reason: ShortStr::new("reset"),
            }),
        );
        v.on_fleet_event(0, 60 * S, &connect(1));
        v.on_fleet_event(0, 61 * S, &job(1, d));
        // A late device, after a step that changes nothing (factor 1).
        v.on_fleet_event(0, 100 * S, &step());
        v.on_fleet_event(0, 120 * S, &connect(2));
        v.on_fleet_event(0, 121 * S, &job(2, d));
        let input = vardiff_input(1, vec![1.0]);
        let r = v
            .finish(&w, &input, 1e6, None, &[], Some(1))
            .results()
            .unwrap();
        // Device 1: two connects and the step; device 2: its connect only.
        assert_eq!(r.vardiff_converge_s.n, 4, "{r:?}");
        assert_eq!(r.vardiff_not_converged, 0);
        assert_eq!(r.vardiff_converge_after_step_s.n, 1);
        // Device 1 away from 50 s to 61 s; device 2 from 121 s on.
        let n = r.share_rate_deviation_pct.unwrap().n;
        assert_eq!(n, (190 - 11) + (200 - 121), "{n}");
    }

    /// Estimates 10% over the truth three times in four, 20% under it otherwise: the figures
    /// say so, worker by worker
    /// (one device per worker) and for the whole pool.
    #[test]
    fn estimate_errors_are_what_was_injected() {
        let w = window();
        let per_device = 5e5;
        let mut samples = Vec::new();
        for i in 0..20u64 {
            let at = 20 * S + i * 5 * S;
            for _ in 0..4 {
                samples.push(EstimateSample {
                    at_ns: at,
                    estimator: Estimator::PoolWorker,
                    window: "1m",
                    hashes_per_s: per_device * if i % 4 == 0 { 0.8 } else { 1.1 },
                });
            }
            samples.push(EstimateSample {
                at_ns: at,
                estimator: Estimator::PoolTotal,
                window: "10m",
                hashes_per_s: 4.0 * per_device * 1.05,
            });
        }
        // Outside the measured window: ignored.
        samples.push(EstimateSample {
            at_ns: 5 * S,
            estimator: Estimator::PoolWorker,
            window: "1m",
            hashes_per_s: 0.0,
        });
        let input = EstimationInput {
            devices: 4,
            shares_per_minute: 15.0,
            step_factors: vec![],
            samples,
        };
        let r = Vardiff::default()
            .finish(
                &w,
                &input,
                4.0 * per_device,
                Some(4.0 * per_device),
                &[],
                Some(4),
            )
            .results()
            .unwrap();
        let e = &r.hashrate_error_pct["1m"];
        assert_eq!(e.n, 80);
        assert!((e.bias - 2.5).abs() < 1e-9, "{e:?}");
        assert!(
            (e.p90 - 20.0).abs() < 1e-9 && (e.p50 - 10.0).abs() < 1e-9,
            "{e:?}"
        );
        let t = &r.total_hashrate_error_pct["10m"];
        assert!((t.bias - 5.0).abs() < 1e-9, "{t:?}");
        // A fleet that hashed only 90% of its budget: the truth is what it really hashed.
        let r = Vardiff::default()
            .finish(
                &w,
                &input,
                4.0 * per_device,
                Some(3.6 * per_device),
                &[],
                Some(4),
            )
            .results()
            .unwrap();
        assert!((r.total_hashrate_error_pct["10m"].bias - (1.05 / 0.9 - 1.0) * 100.0).abs() < 1e-9);
    }
}
