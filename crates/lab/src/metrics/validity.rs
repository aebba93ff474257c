//! The run's own conditions (docs/metrics.md, "Run context"): a run that did not meet them is marked
//! `valid: false` with the reasons, never silently reported.

use super::measured::Measured;

/// The fleet may fall this far short of its hash budget.
pub const MAX_HASHRATE_SHORTFALL: f64 = 0.05;
/// Host CPU above this percentage counts as busy...
pub const HOST_BUSY_CPU_PCT: f64 = 85.0;
/// ... and busy for more than this fraction of the run's samples invalidates it.
pub const MAX_HOST_BUSY_FRACTION: f64 = 0.10;
/// At most this fraction of the events that need a counterpart may lack one.
pub const MAX_UNMATCHED_FRACTION: f64 = 0.01;

/// Why one configuration's measurements cannot be trusted (empty when they can).
pub fn config_reasons(m: &Measured) -> Vec<String> {
    let mut reasons = Vec::new();
    if m.hash_budget_hps > 0.0 {
        match m.achieved_hps() {
            Some(achieved) if achieved < m.hash_budget_hps * (1.0 - MAX_HASHRATE_SHORTFALL) => {
                reasons.push(format!(
                    "fleet hash rate {:.0} H/s is {:.1}% below its budget of {:.0} H/s",
                    achieved,
                    (1.0 - achieved / m.hash_budget_hps) * 100.0,
                    m.hash_budget_hps
                ))
            }
            Some(_) => {}
            None => reasons.push(
                "the fleet recorded no HashesDone in the measured window: its hash rate is unknown"
                    .to_owned(),
            ),
        }
    }
    if let Some(f) = m.unmatched.fraction() {
        if f > MAX_UNMATCHED_FRACTION {
            reasons.push(format!(
                "{} of {} events ({:.2}%) could not be matched (more than {}%)",
                m.unmatched.total(),
                m.unmatched.matchable,
                f * 100.0,
                MAX_UNMATCHED_FRACTION * 100.0
            ));
        }
    }
    reasons
}

/// The fraction of host CPU samples `(CLOCK_MONOTONIC ns, percent of all cores)` within
/// `[from_ns, to_ns]` above [`HOST_BUSY_CPU_PCT`]; `None` without samples.
pub fn host_busy_fraction(samples: &[(u64, f64)], from_ns: u64, to_ns: u64) -> Option<f64> {
    let inside: Vec<f64> = samples
        .iter()
        .filter(|(t, _)| *t >= from_ns && *t <= to_ns)
        .map(|s| s.1)
        .collect();
    let busy = inside.iter().filter(|&&p| p > HOST_BUSY_CPU_PCT).count();
    (!inside.is_empty()).then(|| busy as f64 / inside.len() as f64)
}

/// The reason a busy host invalidates a run, if it does.
pub fn host_reason(busy_fraction: Option<f64>) -> Option<String> {
    let f = busy_fraction?;
    (f > MAX_HOST_BUSY_FRACTION).then(|| {
        format!(
            "host CPU was above {HOST_BUSY_CPU_PCT}% for {:.0}% of the run (more than {:.0}%)",
            f * 100.0,
            MAX_HOST_BUSY_FRACTION * 100.0
        )
    })
}
