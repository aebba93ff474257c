//! A fraction estimated over clusters, with its confidence interval.
//!
//! The stale fraction is a ratio of sums over tips: `f = Σ s_k / Σ n_k`, with `s_k` the stale
//! shares on tip `k`'s job and `n_k` all its shares. Tips are the independent units: the
//! shares of one tip share its interval length (a short interval makes most of them stale), so
//! they are not independent of each other. The interval is the cluster-robust one the lab uses
//! for delays (`crate::stats`): by the delta method the ratio's variance is that of the mean
//! of `z_k = s_k - f n_k` scaled by the mean `n`, so
//!
//! `SE² = m/(m−1) · Σ_k (s_k − f n_k)² / (Σ_k n_k)²` over the `m` tips (CR1),
//!
//! and the 95% interval is `f ± t(0.975, m−1) · SE`.

use serde::Serialize;

/// A fraction and its 95% confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimate {
    /// The fraction.
    pub value: f64,
    /// Its 95% confidence interval, `[low, high]`.
    pub ci95: [f64; 2],
    /// Independent units (tips) behind it.
    pub clusters: u32,
}

impl Estimate {
    /// `Σ parts / Σ wholes` over clusters given as `(part, whole)`; `None` with fewer than two
    /// clusters or no wholes at all.
    pub fn ratio(clusters: impl IntoIterator<Item = (u64, u64)> + Clone) -> Option<Estimate> {
        let (mut m, mut parts, mut wholes) = (0u64, 0u64, 0u64);
        for (s, n) in clusters.clone() {
            m += 1;
            parts += s;
            wholes += n;
        }
        if m < 2 || wholes == 0 {
            return None;
        }
        let f = parts as f64 / wholes as f64;
        let ss: f64 = clusters
            .into_iter()
            .map(|(s, n)| (s as f64 - f * n as f64).powi(2))
            .sum();
        let mf = m as f64;
        let se = (mf / (mf - 1.0) * ss).sqrt() / wholes as f64;
        let half = crate::stats::t_975((m - 1) as usize) * se;
        Some(Estimate {
            value: f,
            ci95: [f - half, f + half],
            clusters: u32::try_from(m).unwrap_or(u32::MAX),
        })
    }

    /// Whether `x` lies within the 95% interval.
    pub fn contains(&self, x: f64) -> bool {
        self.ci95[0] <= x && x <= self.ci95[1]
    }

    /// The two intervals share a point: the estimates do not contradict each other.
    pub fn overlaps(&self, other: &Estimate) -> bool {
        self.ci95[0] <= other.ci95[1] && other.ci95[0] <= self.ci95[1]
    }

    /// Half the 95% interval's width.
    pub fn half_width(&self) -> f64 {
        (self.ci95[1] - self.ci95[0]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_clusters_give_the_t_interval_of_their_fractions() {
        // Four tips of 10 shares with 1, 2, 3, 2 stale: fractions .1 .2 .3 .2, mean .2,
        // sample sd .08165, se .04082, t(3) 3.182.
        let e = Estimate::ratio([(1, 10), (2, 10), (3, 10), (2, 10)]).unwrap();
        assert!((e.value - 0.2).abs() < 1e-12);
        let half = 3.182 * (0.02f64 / 3.0).sqrt() / 2.0;
        assert!((e.half_width() - half).abs() < 1e-9, "{e:?} vs {half}");
        assert_eq!(e.clusters, 4);
        assert!(e.contains(0.2) && !e.contains(0.4));
    }

    #[test]
    fn big_tips_weigh_more_and_identical_tips_have_no_spread() {
        let e = Estimate::ratio([(0, 1), (50, 100)]).unwrap();
        assert!((e.value - 50.0 / 101.0).abs() < 1e-12);
        let same = Estimate::ratio([(5, 50), (5, 50), (5, 50)]).unwrap();
        assert_eq!(same.ci95, [0.1, 0.1]);
    }

    #[test]
    fn a_tip_is_one_sample_however_many_shares_it_has() {
        let few = Estimate::ratio([(1, 10), (3, 10), (2, 10)]).unwrap();
        let many = Estimate::ratio([(100, 1000), (300, 1000), (200, 1000)]).unwrap();
        assert!((few.half_width() - many.half_width()).abs() < 1e-12);
    }

    #[test]
    fn no_interval_without_two_tips_or_any_share() {
        assert_eq!(Estimate::ratio([(1, 2)]), None);
        assert_eq!(Estimate::ratio([(0, 0), (0, 0)]), None);
        let a = Estimate::ratio([(1, 10), (2, 10), (1, 10), (2, 10), (1, 10), (2, 10)]).unwrap();
        let b = Estimate {
            value: 0.5,
            ci95: [0.4, 0.6],
            clusters: 2,
        };
        assert!(!a.overlaps(&b) && !b.overlaps(&a));
        assert!(a.overlaps(&a));
    }
}
