//! The per-share processing time histogram: fixed log-spaced buckets of atomic counters.
//!
//! Recording is a search over 16 bounds and two relaxed `fetch_add`s; no lock, no allocation.
//! Bounds follow the 1-2-5 series from 100 ns to 10 ms (a share's validation is a few
//! microseconds; anything past 10 ms is a stall and lands in the last, unbounded bucket).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Upper bounds of the buckets, in nanoseconds (inclusive: a bucket counts `ns <= bound`); one
/// more bucket counts everything above the last.
pub const PROCESSING_BOUNDS_NS: [u64; 16] = [
    100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000,
    1_000_000, 2_000_000, 5_000_000, 10_000_000,
];
const BUCKETS: usize = PROCESSING_BOUNDS_NS.len() + 1;
const MAX_SAMPLE_NS: u64 = 3_600 * 1_000_000_000;

pub(crate) struct ProcessingHistogram {
    counts: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl ProcessingHistogram {
    pub(crate) fn new() -> Self {
        ProcessingHistogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn record(&self, ns: u64) {
        let i = PROCESSING_BOUNDS_NS.partition_point(|&bound| bound < ns);
        self.counts[i].fetch_add(1, Relaxed);
        // A sample over an hour is a broken clock, not a share: capped so the sum cannot wrap.
        self.sum_ns.fetch_add(ns.min(MAX_SAMPLE_NS), Relaxed);
    }

    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: std::array::from_fn(|i| self.counts[i].load(Relaxed)),
            sum_ns: self.sum_ns.load(Relaxed),
        }
    }
}

/// The histogram's counts at one moment. Each bucket is read on its own, so under concurrent
/// recording the total and the sum may be a few samples apart; the count is the buckets' sum,
/// so it always agrees with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Per bucket (not cumulative); `counts[i]` pairs with `PROCESSING_BOUNDS_NS[i]`, and the
    /// last one counts samples above every bound.
    pub counts: [u64; BUCKETS],
    /// Sum of all samples, in nanoseconds.
    pub sum_ns: u64,
}

impl HistogramSnapshot {
    /// Samples in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// `(upper bound in ns, count)` per bucket, the last bound being `None` (+Inf).
    pub fn buckets(&self) -> impl Iterator<Item = (Option<u64>, u64)> + '_ {
        self.counts.iter().enumerate().map(|(i, &n)| {
            let bound = PROCESSING_BOUNDS_NS.get(i).copied();
            (bound, n)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_the_bucket_whose_bound_covers_them() {
        let h = ProcessingHistogram::new();
        for ns in [
            0,
            100,
            101,
            999,
            1_000,
            10_000_000,
            10_000_001,
            u64::MAX / 4,
        ] {
            h.record(ns);
        }
        let s = h.snapshot();
        assert_eq!(s.counts[0], 2, "0 and 100 are <= 100");
        assert_eq!(s.counts[1], 1, "101");
        assert_eq!(s.counts[3], 2, "999 and 1000 are <= 1000");
        assert_eq!(s.counts[15], 1, "10 ms exactly");
        assert_eq!(s.counts[16], 2, "above 10 ms");
        assert_eq!(s.count(), 8);
        let buckets: Vec<_> = s.buckets().collect();
        assert_eq!(buckets.len(), 17);
        assert_eq!(buckets[16], (None, 2));
        assert_eq!(buckets[0], (Some(100), 2));
    }
}
