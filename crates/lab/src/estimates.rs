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
    thread: std::thread::JoinHandle<Sampled>,
}

/// What an [`EstimateSampler`] read, per configuration.
#[derive(Clone, Debug, Default)]
pub struct Sampled {
    /// The roles' hash-rate estimates.
    pub estimates: BTreeMap<String, Vec<EstimateSample>>,
    /// A third-party pool's count of the shares it accepted, read off its monitoring server:
    /// (the events' clock, ns; shares accepted since the first reading, over every channel,
    /// see [`AcceptedSum`]). The lab sees no share verdict of such a pool otherwise;
    /// `wan_bytes_per_accepted_share` divides by it.
    pub pool_accepted: BTreeMap<String, Vec<(u64, f64)>>,
}

/// A sum of per-channel counters that only rises: a pool's channels come and go (a proxy
/// reconnects, a channel closes, the pool restarts), so the sum of what it lists now can fall.
/// Each channel adds what it rose by since the last reading; a channel first seen after the
/// first reading adds its whole count, and one whose count fell was reset and adds its new
/// count.
#[derive(Clone, Debug, Default)]
pub struct AcceptedSum {
    last: Option<BTreeMap<String, f64>>,
    total: f64,
}

impl AcceptedSum {
    /// Takes a reading (per channel: its count now) and returns the rise since the first one.
    pub fn add(&mut self, reading: BTreeMap<String, f64>) -> f64 {
        if let Some(last) = &self.last {
            for (channel, &now) in &reading {
                self.total += match last.get(channel) {
                    Some(&before) if now >= before => now - before,
                    _ => now,
                };
            }
        }
        self.last = Some(reading);
        self.total
    }
}

impl EstimateSampler {
    /// Starts reading `endpoints` every [`SAMPLE_EVERY`] until `until_ns` (the drain's start,
    /// on the events' clock) or [`EstimateSampler::finish`].
    pub fn start(endpoints: Vec<StatusEndpoint>, until_ns: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut out = Sampled::default();
            let mut sums: BTreeMap<String, AcceptedSum> = BTreeMap::new();
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
                let (estimates, accepted) = sample_pass(&endpoints);
                for (config, samples) in estimates {
                    out.estimates.entry(config).or_default().extend(samples);
                }
                for (config, reading) in accepted {
                    let total = sums.entry(config.clone()).or_default().add(reading);
                    let at = (events::now_ns(), total);
                    out.pool_accepted.entry(config).or_default().push(at);
                }
            }
        });
        EstimateSampler { stop, thread }
    }

    /// Stops and returns what was read, per configuration.
    pub fn finish(self) -> Sampled {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// One reading of every endpoint, per configuration. A configuration's translators (one per
/// device chunk) each estimate their own devices: their figures are summed into one for all of
/// the configuration's devices.
/// Also each third-party pool's accepted shares per channel (keyed by the pool's address and
/// the channel), per configuration.
#[allow(clippy::type_complexity)]
fn sample_pass(
    endpoints: &[StatusEndpoint],
) -> (
    BTreeMap<String, Vec<EstimateSample>>,
    BTreeMap<String, BTreeMap<String, f64>>,
) {
    let mut estimates: BTreeMap<String, Vec<EstimateSample>> = BTreeMap::new();
    let mut accepted: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for e in endpoints {
        let (samples, channels) = sample(e);
        estimates
            .entry(e.config.clone())
            .or_default()
            .extend(samples);
        if let Some(channels) = channels {
            let config = accepted.entry(e.config.clone()).or_default();
            for (channel, n) in channels {
                config.insert(format!("{}/{channel}", e.addr), n);
            }
        }
    }
    for samples in estimates.values_mut() {
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
    (estimates, accepted)
}

/// How often the estimates are read: often enough for a few dozen samples per worker in a
/// two-minute run, seldom enough that a pool with 10,000 workers serves its pages at ease.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// What `endpoint` reports now: per worker and in total for our pools, the devices' rate for
/// our translators; nothing for other roles or when the role does not answer. Also a
/// third-party pool's count of accepted shares, per channel.
fn sample(endpoint: &StatusEndpoint) -> (Vec<EstimateSample>, Option<BTreeMap<String, f64>>) {
    let mut out = Vec::new();
    let mut accepted = None;
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
        // The reference roles' monitoring servers: what their vardiff holds as each channel's
        // (or each device's) hash rate now; they keep no averaging windows.
        "pool_sv2" => {
            let text = metrics_text(endpoint.addr);
            if let Some(channels) = text.as_deref().and_then(parse_reference_channels) {
                let mut total = 0.0;
                for c in channels.iter().filter(|c| c.accepted > 0.0) {
                    push(Estimator::PoolWorker, "current", Some(c.hashrate));
                    total += c.hashrate;
                }
                if !channels.is_empty() {
                    push(Estimator::PoolTotal, "current", Some(total));
                }
            }
            accepted = text.as_deref().map(accepted_per_channel);
        }
        "translator_sv2" => {
            let text = metrics_text(endpoint.addr);
            let total = text.as_deref().and_then(|t| {
                prometheus_samples(t, "sv1_hashrate_total")
                    .next()
                    .map(|s| s.1)
            });
            push(Estimator::Translator, "current", total);
        }
        _ => {}
    }
    (out, accepted)
}

/// One channel a reference pool serves, as its monitoring server's `/metrics` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceChannel {
    /// The user identity the channel was opened with.
    pub user_identity: String,
    /// The pool's estimate of the channel's hash rate (H/s).
    pub hashrate: f64,
    /// Shares it accepted on the channel.
    pub accepted: f64,
}

/// The channels a reference pool (pool_sv2's monitoring server at `addr`) serves; `None` when
/// it does not answer.
pub fn reference_channels(addr: std::net::SocketAddr) -> Option<Vec<ReferenceChannel>> {
    parse_reference_channels(&metrics_text(addr)?)
}

/// A reference pool's channel, as its metrics label it: `client/channel`.
fn channel_key(labels: &str) -> String {
    let id = |key| label(labels, key).unwrap_or("?");
    format!("{}/{}", id("client_id"), id("channel_id"))
}

/// Every channel's `sv2_client_shares_accepted_total` in a reference pool's `/metrics`, keyed
/// by `client/channel`: all of them, also a channel whose hash rate is not listed.
fn accepted_per_channel(text: &str) -> BTreeMap<String, f64> {
    prometheus_samples(text, "sv2_client_shares_accepted_total")
        .map(|(labels, n)| (channel_key(labels), n))
        .collect()
}

fn parse_reference_channels(text: &str) -> Option<Vec<ReferenceChannel>> {
    let accepted = accepted_per_channel(text);
    Some(
        prometheus_samples(text, "sv2_client_channel_hashrate")
            .map(|(labels, hashrate)| ReferenceChannel {
                user_identity: label(labels, "user_identity")
                    .unwrap_or_default()
                    .to_owned(),
                hashrate,
                accepted: accepted.get(&channel_key(labels)).copied().unwrap_or(0.0),
            })
            .collect(),
    )
}

fn metrics_text(addr: std::net::SocketAddr) -> Option<String> {
    match http_get(addr, "/metrics").ok()? {
        (200, body) => Some(body),
        _ => None,
    }
}

/// The samples of metric `name` in a Prometheus text exposition: (the text between the
/// braces, value). Comments and other metrics are skipped.
fn prometheus_samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => r.rsplit_once('}')?,
            None if rest.starts_with(' ') => ("", rest),
            None => return None,
        };
        let value = value.split_whitespace().next()?.parse().ok()?;
        Some((labels, value))
    })
}

/// The value of `key="..."` among a sample's labels (values the lab sets hold no quotes).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

fn status(endpoint: &StatusEndpoint) -> Option<serde_json::Value> {
    match http_get(endpoint.addr, "/api/status").ok()? {
        (200, body) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_shares_add_up_across_channels_that_come_go_and_reset() {
        let reading = |r: &[(&str, f64)]| -> BTreeMap<String, f64> {
            r.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
        };
        let mut sum = AcceptedSum::default();
        // The first reading is the baseline.
        assert_eq!(sum.add(reading(&[("1/1", 40.0)])), 0.0);
        assert_eq!(sum.add(reading(&[("1/1", 55.0)])), 15.0);
        // The proxy reconnects: its old channel is gone, the new one counts from 0.
        assert_eq!(sum.add(reading(&[("2/1", 7.0)])), 22.0);
        // The pool restarts: the same channel's count falls; its new count is all new.
        assert_eq!(sum.add(reading(&[("2/1", 3.0)])), 25.0);
        assert_eq!(sum.add(reading(&[("2/1", 10.0), ("2/2", 1.0)])), 33.0);
    }

    /// A reference pool's `/metrics`, as its monitoring server writes it.
    const POOL_SV2_METRICS: &str = "\
# HELP sv2_client_channel_hashrate Hashrate for individual client channels
# TYPE sv2_client_channel_hashrate gauge
sv2_client_channel_hashrate{channel_id=\"1\",client_id=\"1\",user_identity=\"lab.d0\"} 6000.5
sv2_client_channel_hashrate{channel_id=\"2\",client_id=\"2\",user_identity=\"lab.d1\"} 0
# TYPE sv2_client_hashrate_total gauge
sv2_client_hashrate_total 6000.5
# TYPE sv2_client_shares_accepted_total gauge
sv2_client_shares_accepted_total{channel_id=\"1\",client_id=\"1\",user_identity=\"lab.d0\"} 17
";

    #[test]
    fn a_reference_pools_channels_are_read_from_its_metrics() {
        let channels = parse_reference_channels(POOL_SV2_METRICS).unwrap();
        assert_eq!(
            channels,
            vec![
                ReferenceChannel {
                    user_identity: "lab.d0".into(),
                    hashrate: 6000.5,
                    accepted: 17.0,
                },
                ReferenceChannel {
                    user_identity: "lab.d1".into(),
                    hashrate: 0.0,
                    accepted: 0.0,
                },
            ]
        );
        let total: Vec<_> =
            prometheus_samples(POOL_SV2_METRICS, "sv2_client_hashrate_total").collect();
        assert_eq!(total, vec![("", 6000.5)]);
        // A name that is a prefix of another is not confused with it.
        assert_eq!(
            prometheus_samples(POOL_SV2_METRICS, "sv2_client").count(),
            0
        );
    }
}
