//! The roles' hash-rate estimates, read over their HTTP status while a trial runs: what an
//! operator's dashboard would show, scored afterwards against the fleet's truth
//! ([`crate::metrics::estimation`]).

use std::time::Duration;

use crate::metrics::{EstimateSample, Estimator};
use crate::orchestrate::{http_get, workers_list, StatusEndpoint};

/// How often the estimates are read: often enough for a few dozen samples per worker in a
/// two-minute run, seldom enough that a pool with 10,000 workers serves its pages at ease.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// What `endpoint` reports now: per worker and in total for our pools, the devices' rate for
/// our translators; nothing for other roles or when the role does not answer.
pub fn sample(endpoint: &StatusEndpoint) -> Vec<EstimateSample> {
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
