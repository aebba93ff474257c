//! The roles' hash-rate estimates, read over their HTTP status while a trial runs: what an
//! operator's dashboard would show, scored afterwards against the fleet's truth
//! ([`crate::metrics::estimation`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::{EstimateSample, Estimator};
use crate::orchestrate::{http_get, workers_list, StatusEndpoint};

/// Reads the estimates on a thread of its own, so that a role slow to answer never holds up
/// the trial's loop (its crash checks, its progress, Ctrl-C).
pub struct EstimateSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<BTreeMap<String, Vec<EstimateSample>>>,
}

impl EstimateSampler {
    /// Starts reading `endpoints` every [`SAMPLE_EVERY`] until `until_ns` (the drain's start,
    /// on the events' clock) or [`EstimateSampler::finish`].
    pub fn start(endpoints: Vec<StatusEndpoint>, until_ns: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut out: BTreeMap<String, Vec<EstimateSample>> = BTreeMap::new();
            let mut next = Instant::now() + SAMPLE_EVERY;
            loop {
                while Instant::now() < next {
                    if stopped.load(Ordering::Relaxed) {
                        return out;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                next += SAMPLE_EVERY;
                if events::now_ns() >= until_ns {
                    return out;
                }
                for (config, samples) in sample_pass(&endpoints) {
                    out.entry(config).or_default().extend(samples);
                }
            }
        });
        EstimateSampler { stop, thread }
    }

    /// Stops and returns what was read, per configuration.
    pub fn finish(self) -> BTreeMap<String, Vec<EstimateSample>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// One reading of every endpoint, per configuration. A configuration's translators (one per
/// device chunk) each estimate their own devices: their figures are summed into one for all of
/// the configuration's devices.
fn sample_pass(endpoints: &[StatusEndpoint]) -> BTreeMap<String, Vec<EstimateSample>> {
    let mut out: BTreeMap<String, Vec<EstimateSample>> = BTreeMap::new();
    for e in endpoints {
        out.entry(e.config.clone()).or_default().extend(sample(e));
    }
    for samples in out.values_mut() {
        let translators: Vec<EstimateSample> = samples
            .iter()
            .filter(|s| s.estimator == Estimator::Translator)
            .cloned()
            .collect();
        if let Some(last) = translators.iter().map(|s| s.at_ns).max() {
            samples.retain(|s| s.estimator != Estimator::Translator);
            samples.push(EstimateSample {
                at_ns: last,
                estimator: Estimator::Translator,
                window: "current",
                hashes_per_s: translators.iter().map(|s| s.hashes_per_s).sum(),
            });
        }
    }
    out
}

/// How often the estimates are read: often enough for a few dozen samples per worker in a
/// two-minute run, seldom enough that a pool with 10,000 workers serves its pages at ease.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// What `endpoint` reports now: per worker and in total for our pools, the devices' rate for
/// our translators; nothing for other roles or when the role does not answer.
fn sample(endpoint: &StatusEndpoint) -> Vec<EstimateSample> {
    let mut out = Vec::new();
    let mut push = |estimator, window, v: Option<f64>| {
        if let Some(hashes_per_s) = v.filter(|v| v.is_finite()) {
            out.push(EstimateSample {
                at_ns: events::now_ns(),
                estimator,
                window,
                hashes_per_s,
            });
        }
    };
    match endpoint.role {
        "pool" => {
            for w in workers_list(endpoint.addr).unwrap_or_default() {
                // A worker listed without a share yet (a channel whose shares its tracked
                // workers take) is no one's estimate.
                if w["accepted"].as_u64().unwrap_or(0) == 0 {
                    continue;
                }
                push(Estimator::PoolWorker, "1m", w["hashrate_1m"].as_f64());
                push(Estimator::PoolWorker, "10m", w["hashrate_10m"].as_f64());
            }
            if let Some(v) = status(endpoint) {
                push(Estimator::PoolTotal, "1m", v["hashrate_1m"].as_f64());
                push(Estimator::PoolTotal, "10m", v["hashrate_10m"].as_f64());
            }
        }
        "translator" => {
            if let Some(v) = status(endpoint) {
                push(Estimator::Translator, "current", v["hashrate"].as_f64());
            }
        }
        _ => {}
    }
    out
}

fn status(endpoint: &StatusEndpoint) -> Option<serde_json::Value> {
    match http_get(endpoint.addr, "/api/status").ok()? {
        (200, body) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}
