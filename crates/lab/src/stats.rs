//! Distributions of delays and their confidence intervals (docs/metrics.md, "Statistics").
//!
//! [`Samples`] keeps every raw sample (nanoseconds) with the cluster it belongs to, so that
//! trials merge exactly ([`Samples::merge`]) and the CDF files can list them. [`summarize`]
//! turns them into a [`Distribution`] in milliseconds:
//!
//! - `p50`, `p95`, `p99` from an HDR histogram recorded in microseconds (1 µs unit, three
//!   significant digits: every figure within 0.1% of the exact order statistic, exact below
//!   2.048 ms), capped at `max`;
//! - `mean` and `max` exact, from the raw samples;
//! - `ci95`, the 95% confidence interval of the mean, with clusters as the independent units.
//!   Many devices on one template (or one tip) saw the same event, so their delays are not
//!   independent: the interval uses the cluster-robust ("sandwich", CR1) standard error of the
//!   mean, `SE² = k/(k−1) · Σ_c (S_c − ȳ·n_c)² / N²` over the `k` clusters with sums `S_c` and
//!   sizes `n_c`, and Student's t with `k − 1` degrees of freedom. With equal cluster sizes it
//!   is the t-interval over cluster means, so a thousand devices on one template count as one
//!   sample, not a thousand. With fewer than two clusters `ci95` is `null`. Delays are never
//!   negative, so a lower bound below 0 (few clusters, wide spread) is reported as 0.
//!
//! The clusters each metric uses are listed in [`crate::metrics`].

use hdrhistogram::Histogram;

use crate::results::Distribution;

/// Raw samples in nanoseconds, each with a cluster number.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Samples {
    values_ns: Vec<u64>,
    clusters: Vec<u32>,
    /// One past the largest cluster number in use: where a merged sample set's numbers start.
    span: u32,
}

impl Samples {
    /// No samples.
    pub fn new() -> Self {
        Samples::default()
    }

    /// Adds a sample of `cluster` (a small dense number the caller assigns: a template's or
    /// tip's index, a share's counter).
    pub fn push(&mut self, cluster: u32, value_ns: u64) {
        self.values_ns.push(value_ns);
        self.clusters.push(cluster);
        self.span = self.span.max(cluster.saturating_add(1));
    }

    /// Appends `other`'s samples, its clusters renumbered after ours so that none merge.
    pub fn merge(&mut self, other: &Samples) {
        let offset = self.span;
        self.values_ns.extend_from_slice(&other.values_ns);
        self.clusters
            .extend(other.clusters.iter().map(|c| c.saturating_add(offset)));
        self.span = offset.saturating_add(other.span);
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.values_ns.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.values_ns.is_empty()
    }

    /// The samples, in ns, in the order they were added.
    pub fn values_ns(&self) -> &[u64] {
        &self.values_ns
    }

    /// Distinct clusters with at least one sample.
    pub fn cluster_count(&self) -> usize {
        let mut seen = vec![false; self.span as usize];
        self.clusters.iter().for_each(|&c| seen[c as usize] = true);
        seen.into_iter().filter(|&s| s).count()
    }

    /// The samples in milliseconds, ascending, thinned to at most `cap` evenly spaced order
    /// statistics (the first and last always kept), for CDF files.
    pub fn sorted_ms(&self, cap: usize) -> Vec<f64> {
        let mut v = self.values_ns.clone();
        v.sort_unstable();
        let n = v.len();
        let pick: Vec<u64> = if n <= cap || cap < 2 {
            v
        } else {
            (0..cap).map(|i| v[i * (n - 1) / (cap - 1)]).collect()
        };
        pick.into_iter().map(ns_to_ms).collect()
    }
}

fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The microsecond histogram's range: 1 µs to one hour (longer delays saturate).
const HIST_MAX_US: u64 = 3_600_000_000;
const HIST_SIGFIG: u8 = 3;

/// The distribution of `samples`; `absent_reason` explains an empty one.
pub fn summarize(samples: &Samples, absent_reason: &str) -> Distribution {
    let n = samples.len();
    if n == 0 {
        return Distribution {
            absent_reason: Some(absent_reason.to_owned()),
            ..Distribution::default()
        };
    }
    let mut h = Histogram::<u64>::new_with_bounds(1, HIST_MAX_US, HIST_SIGFIG)
        .expect("valid histogram bounds");
    let mut sum = 0u128;
    let mut max = 0u64;
    for &v in &samples.values_ns {
        h.saturating_record((v + 500) / 1000);
        sum += u128::from(v);
        max = max.max(v);
    }
    let max_ms = ns_to_ms(max);
    let pct = |q: f64| (h.value_at_quantile(q) as f64 / 1e3).min(max_ms);
    let mean_ns = sum as f64 / n as f64;
    Distribution {
        n: n as u64,
        mean: Some(mean_ns / 1e6),
        p50: Some(pct(0.50)),
        p95: Some(pct(0.95)),
        p99: Some(pct(0.99)),
        max: Some(max_ms),
        ci95: cluster_ci95(samples, mean_ns).map(|[lo, hi]| [lo / 1e6, hi / 1e6]),
        clusters: samples.cluster_count() as u64,
        absent_reason: None,
    }
}

/// The cluster-robust 95% interval around `mean` (same unit as the samples).
fn cluster_ci95(samples: &Samples, mean: f64) -> Option<[f64; 2]> {
    let span = samples.span as usize;
    let mut sums = vec![0f64; span];
    let mut sizes = vec![0u64; span];
    for (&v, &c) in samples.values_ns.iter().zip(&samples.clusters) {
        sums[c as usize] += v as f64;
        sizes[c as usize] += 1;
    }
    let k = sizes.iter().filter(|&&s| s > 0).count();
    if k < 2 {
        return None;
    }
    let total = samples.len() as f64;
    let ss: f64 = sums
        .iter()
        .zip(&sizes)
        .filter(|(_, &s)| s > 0)
        .map(|(&sum, &size)| (sum - mean * size as f64).powi(2))
        .sum();
    let kf = k as f64;
    let se = (kf / (kf - 1.0) * ss).sqrt() / total;
    let half = t_975(k - 1) * se;
    Some([(mean - half).max(0.0), mean + half])
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom (two-sided 95%).
pub fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    // Beyond the table the quantile is close to linear in 1/df.
    const TAIL: [(f64, f64); 4] = [(30.0, 2.042), (40.0, 2.021), (60.0, 2.000), (120.0, 1.980)];
    const NORMAL: f64 = 1.959_964;
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        _ => {
            let x = 1.0 / df as f64;
            let mut pts = TAIL.iter().map(|&(d, t)| (1.0 / d, t)).collect::<Vec<_>>();
            pts.push((0.0, NORMAL));
            let seg = pts
                .windows(2)
                .find(|w| x <= w[0].0 && x >= w[1].0)
                .expect("1/df lies within (0, 1/30]");
            let ((x0, t0), (x1, t1)) = (seg[0], seg[1]);
            t1 + (t0 - t1) * (x - x1) / (x0 - x1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn empty_samples_give_nulls_and_a_reason() {
        let d = summarize(&Samples::new(), "no templates in the window");
        assert_eq!(d.n, 0);
        assert_eq!(d.mean, None);
        assert_eq!(d.p99, None);
        assert_eq!(d.ci95, None);
        assert_eq!(
            d.absent_reason.as_deref(),
            Some("no templates in the window")
        );
    }

    #[test]
    fn percentiles_follow_the_samples() {
        let mut s = Samples::new();
        for i in 1..=1000u64 {
            s.push(i as u32, i * MS / 10); // 0.1 ms .. 100 ms
        }
        let d = summarize(&s, "");
        let near = |got: Option<f64>, want: f64| {
            let got = got.unwrap();
            assert!(
                (got - want).abs() <= want * 0.001 + 0.001,
                "{got} vs {want}"
            );
        };
        near(d.p50, 50.0);
        near(d.p95, 95.0);
        near(d.p99, 99.0);
        assert_eq!(d.max, Some(100.0));
        near(d.mean, 50.05);
        assert_eq!(d.clusters, 1000);
    }

    #[test]
    fn microsecond_resolution_for_short_delays() {
        let mut s = Samples::new();
        s.push(0, 1_234_000);
        s.push(1, 1_234_000);
        let d = summarize(&s, "");
        assert_eq!(d.p50, Some(1.234));
    }

    #[test]
    fn t_quantiles_match_tables() {
        assert_eq!(t_975(1), 12.706);
        assert_eq!(t_975(10), 2.228);
        assert!((t_975(50) - 2.009).abs() < 0.002, "{}", t_975(50));
        assert!((t_975(100) - 1.984).abs() < 0.002, "{}", t_975(100));
        assert!((t_975(1_000_000) - 1.96).abs() < 0.001);
    }

    #[test]
    fn ci_of_independent_samples_is_the_t_interval() {
        // Five clusters of one: 10, 20, 30, 40, 50 ms. Mean 30, sd 15.81, se 7.07, t4 2.776.
        let mut s = Samples::new();
        for i in 1..=5u64 {
            s.push(i as u32, i * 10 * MS);
        }
        let [lo, hi] = summarize(&s, "").ci95.unwrap();
        let half = 2.776 * (250.0f64 / 5.0).sqrt();
        assert!((lo - (30.0 - half)).abs() < 1e-9, "{lo}");
        assert!((hi - (30.0 + half)).abs() < 1e-9, "{hi}");
    }

    #[test]
    fn many_samples_per_cluster_do_not_narrow_the_interval() {
        let build = |per_cluster: u32| {
            let mut s = Samples::new();
            for c in 0..8u32 {
                for _ in 0..per_cluster {
                    s.push(c, u64::from(c * 7 % 5 + 1) * MS);
                }
            }
            summarize(&s, "").ci95.unwrap()
        };
        let one = build(1);
        let many = build(500);
        assert!((one[0] - many[0]).abs() < 1e-9 && (one[1] - many[1]).abs() < 1e-9);
        assert!(one[1] - one[0] > 0.5, "{one:?}");
    }

    #[test]
    fn the_interval_stays_above_zero() {
        let mut s = Samples::new();
        s.push(0, MS);
        s.push(1, 100 * MS);
        let [lo, hi] = summarize(&s, "").ci95.unwrap();
        assert_eq!(lo, 0.0);
        // 50.5 + 12.706 x 49.5
        assert!((hi - (50.5 + 12.706 * 49.5)).abs() < 1e-9, "{hi}");
    }

    #[test]
    fn a_single_cluster_has_no_interval() {
        let mut s = Samples::new();
        for v in [1, 2, 3] {
            s.push(4, v * MS);
        }
        let d = summarize(&s, "");
        assert_eq!(d.n, 3);
        assert_eq!(d.ci95, None);
    }

    #[test]
    fn merging_keeps_clusters_apart_and_equals_recording_once() {
        let mut a = Samples::new();
        a.push(0, MS);
        a.push(0, 3 * MS);
        let mut b = Samples::new();
        b.push(0, 10 * MS);
        b.push(1, 20 * MS);
        let mut merged = a.clone();
        merged.merge(&b);
        assert_eq!(merged.cluster_count(), 3);
        let mut direct = Samples::new();
        direct.push(0, MS);
        direct.push(0, 3 * MS);
        direct.push(1, 10 * MS);
        direct.push(2, 20 * MS);
        assert_eq!(summarize(&merged, ""), summarize(&direct, ""));
    }

    #[test]
    fn thinning_keeps_the_ends_and_the_shape() {
        let mut s = Samples::new();
        for i in (0..10_000u64).rev() {
            s.push(0, i * MS);
        }
        let v = s.sorted_ms(101);
        assert_eq!(v.len(), 101);
        assert_eq!(v[0], 0.0);
        assert_eq!(v[100], 9999.0);
        assert!((v[50] - 4999.5).abs() <= 1.0, "{}", v[50]);
        assert_eq!(s.sorted_ms(usize::MAX).len(), 10_000);
    }
}
