//! Percentiles over the last minute of samples (sans-IO: times are passed in).

use std::collections::VecDeque;

/// How far back the live percentiles look.
pub const WINDOW_NS: u64 = 60_000_000_000;
/// Samples kept at most: beyond, the oldest go first (a minute of a large fleet's shares).
const MAX_SAMPLES: usize = 200_000;

/// Samples of the last [`WINDOW_NS`], oldest first.
#[derive(Debug, Default, Clone)]
pub struct Rolling {
    samples: VecDeque<(u64, f64)>,
}

/// Percentiles of a window, `None` when it is empty.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Percentiles {
    /// Samples in the window.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl Rolling {
    /// Adds a sample taken at `at_ns` (the oldest is dropped when full).
    pub fn push(&mut self, at_ns: u64, value: f64) {
        if self.samples.len() == MAX_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((at_ns, value));
    }

    /// Forgets samples older than the window before `now_ns`.
    pub fn expire(&mut self, now_ns: u64) {
        let oldest = now_ns.saturating_sub(WINDOW_NS);
        while self.samples.front().is_some_and(|(t, _)| *t < oldest) {
            self.samples.pop_front();
        }
    }

    /// Nearest-rank percentiles of the samples in the window before `now_ns`.
    pub fn percentiles(&mut self, now_ns: u64) -> Option<Percentiles> {
        self.expire(now_ns);
        if self.samples.is_empty() {
            return None;
        }
        let mut v: Vec<f64> = self.samples.iter().map(|(_, x)| *x).collect();
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Percentiles {
            n: v.len(),
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
        })
    }

    /// The mean of the samples kept (call [`Rolling::expire`] first).
    pub fn mean(&self) -> Option<f64> {
        if self.samples.is_empty() {
            return None;
        }
        Some(self.samples.iter().map(|(_, x)| x).sum::<f64>() / self.samples.len() as f64)
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no sample is held.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_cover_the_last_minute_only() {
        let mut r = Rolling::default();
        let s = 1_000_000_000u64;
        // An old slow sample, then a hundred at 1..=100 ms a minute later.
        r.push(0, 5000.0);
        for i in 1..=100u64 {
            r.push(61 * s + i, i as f64);
        }
        let p = r.percentiles(61 * s + 100).unwrap();
        assert_eq!((p.n, p.p50, p.p90, p.p99), (100, 50.0, 90.0, 99.0));
        // Another minute on, nothing is left.
        assert_eq!(r.percentiles(122 * s + 101), None);
        assert!(r.is_empty());
    }
}
