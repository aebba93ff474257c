//! Raw distribution samples (`dist_<metric>.csv`: `config,value_ms`) and their empirical CDF, or
//! a CDF from the percentiles results.json stores where the samples are not there.

use super::csv::{number, Table};

/// At most this many points per CDF line; the quantiles in between are not visible anyway.
pub(crate) const MAX_CDF_POINTS: usize = 400;

/// Samples per configuration, sorted ascending, configurations in order of first appearance.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Samples {
    pub per_config: Vec<(String, Vec<f64>)>,
}

impl Samples {
    pub(crate) fn from_table(table: &Table) -> Result<Samples, &'static str> {
        let config = table.column("config").ok_or("no `config` column")?;
        let value = table
            .column("value_ms")
            .or_else(|| (0..table.header.len()).find(|&i| i != config))
            .ok_or("no value column")?;
        let mut out = Samples::default();
        for record in &table.records {
            let Some(v) = number(&record[value]) else {
                continue;
            };
            let name = record[config].trim();
            match out.per_config.iter_mut().find(|(c, _)| c == name) {
                Some((_, values)) => values.push(v),
                None => out.per_config.push((name.to_owned(), vec![v])),
            }
        }
        for (_, values) in &mut out.per_config {
            values.sort_by(f64::total_cmp);
        }
        Ok(out)
    }

    pub(crate) fn get(&self, config: &str) -> Option<&[f64]> {
        self.per_config
            .iter()
            .find(|(c, _)| c == config)
            .map(|(_, v)| v.as_slice())
    }
}

/// The value below which a fraction `q` of the sorted samples lie (nearest rank).
pub(crate) fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[nearest_rank(sorted.len(), q) - 1])
}

/// Fractions whose points a thinned CDF always keeps, the percentiles results.json stores below
/// the maximum: read off the curve, the median or the 99th percentile is the sample itself, not
/// a neighbour a few hundred ranks away.
pub(crate) const KEPT_QUANTILES: [f64; 3] = [0.5, 0.95, 0.99];

/// The empirical CDF of `sorted` as (value, fraction of samples at or below it) points, starting
/// at fraction 0 at the smallest sample and ending at 1 at the largest, thinned to at most
/// [`MAX_CDF_POINTS`]: evenly spaced ranks, plus the ranks of [`KEPT_QUANTILES`] and the last.
pub(crate) fn cdf(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    // Room for the first point, the kept quantiles and the last besides the evenly spaced ranks.
    let spaced = MAX_CDF_POINTS - KEPT_QUANTILES.len() - 2;
    let step = n.div_ceil(spaced).max(1);
    let mut ranks: Vec<usize> = (step - 1..n).step_by(step).collect();
    ranks.extend(KEPT_QUANTILES.iter().map(|&q| nearest_rank(n, q) - 1));
    ranks.push(n - 1);
    ranks.sort_unstable();
    ranks.dedup();
    let mut points = Vec::with_capacity(ranks.len() + 1);
    points.push((sorted[0], 0.0));
    points.extend(
        ranks
            .iter()
            .map(|&i| (sorted[i], (i + 1) as f64 / n as f64)),
    );
    points
}

/// A CDF from stored percentiles (`(fraction, value)`, e.g. `(0.5, p50)`, `(1.0, max)`) as
/// (value, fraction) points in order of fraction. A value below an earlier one (percentiles
/// rounded differently) is raised to it, so the curve never runs backwards.
pub(crate) fn cdf_from_percentiles(percentiles: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut sorted: Vec<(f64, f64)> = percentiles
        .iter()
        .copied()
        .filter(|(q, v)| q.is_finite() && v.is_finite() && (0.0..=1.0).contains(q))
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut highest = f64::NEG_INFINITY;
    sorted
        .into_iter()
        .map(|(q, v)| {
            highest = highest.max(v);
            (highest, q)
        })
        .collect()
}

/// The 1-based rank of the `q` quantile of `n` samples by nearest rank.
fn nearest_rank(n: usize, q: f64) -> usize {
    ((q * n as f64).ceil() as usize).clamp(1, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_config_in_order_and_sorts() {
        let t = Table::parse("config,value_ms\nsv1,5\nA,2\nsv1,1\nA,\nsv1,3\n").unwrap();
        let s = Samples::from_table(&t).unwrap();
        assert_eq!(
            s.per_config,
            [
                ("sv1".to_owned(), vec![1.0, 3.0, 5.0]),
                ("A".to_owned(), vec![2.0])
            ]
        );
        assert_eq!(s.get("A"), Some(&[2.0][..]));
        assert!(Samples::from_table(&Table::parse("x,y\n").unwrap()).is_err());
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(50.0));
        assert_eq!(quantile(&v, 0.95), Some(95.0));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 1.0), Some(100.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn cdf_runs_from_zero_to_one_and_is_thinned() {
        assert_eq!(cdf(&[1.0, 2.0]), [(1.0, 0.0), (1.0, 0.5), (2.0, 1.0)]);
        assert_eq!(cdf(&[7.0]), [(7.0, 0.0), (7.0, 1.0)]);
        assert!(cdf(&[]).is_empty());
        // Short runs are drawn whole: every sample is a point.
        let v: Vec<f64> = (1..=50).map(f64::from).collect();
        assert_eq!(cdf(&v).len(), 51);

        // A skewed distribution with ties, large enough to be thinned.
        let n = 100_003;
        let v: Vec<f64> = (0..n).map(|i| ((i / 7) as f64).powf(1.5)).collect();
        let c = cdf(&v);
        assert!(c.len() <= MAX_CDF_POINTS, "{} points", c.len());
        assert!(c.len() >= MAX_CDF_POINTS - 10, "{} points", c.len());
        assert!(
            c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1),
            "monotone in both value and fraction"
        );
        assert_eq!(c[0], (v[0], 0.0), "starts at the smallest sample");
        assert_eq!(
            *c.last().unwrap(),
            (v[n - 1], 1.0),
            "ends at 1 at the largest"
        );
        assert!(c.iter().all(|&(_, f)| (0.0..=1.0).contains(&f)));
        // Each kept percentile is on the curve: the nearest-rank sample at exactly its rank's
        // fraction, the first point reaching the percentile.
        for q in KEPT_QUANTILES {
            let value = quantile(&v, q).unwrap();
            let rank = (q * n as f64).ceil();
            let at = c
                .iter()
                .find(|&&(_, f)| f >= q)
                .unwrap_or_else(|| panic!("nothing reaches {q}"));
            assert_eq!(*at, (value, rank / n as f64), "the {q} quantile");
        }
    }

    #[test]
    fn percentiles_make_a_monotone_cdf_ending_at_the_maximum() {
        let c = cdf_from_percentiles(&[(1.0, 30.0), (0.5, 10.0), (0.99, 25.0), (0.95, 20.0)]);
        assert_eq!(c, [(10.0, 0.5), (20.0, 0.95), (25.0, 0.99), (30.0, 1.0)]);
        // Rounded percentiles that dip below an earlier one are held level; junk is dropped.
        let c = cdf_from_percentiles(&[(0.5, 10.0), (0.95, 9.5), (1.0, f64::NAN), (2.0, 1.0)]);
        assert_eq!(c, [(10.0, 0.5), (10.0, 0.95)]);
        assert!(cdf_from_percentiles(&[]).is_empty());
    }
}
