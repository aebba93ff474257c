//! Raw distribution samples (`dist_<metric>.csv`: `config,value_ms`) and their empirical CDF.

use super::csv::{number, Table};

/// At most this many points per CDF line; the quantiles in between are not visible anyway.
pub const MAX_CDF_POINTS: usize = 400;

/// Samples per configuration, sorted ascending, configurations in order of first appearance.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Samples {
    pub per_config: Vec<(String, Vec<f64>)>,
}

impl Samples {
    pub fn from_table(table: &Table) -> Result<Samples, &'static str> {
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

    #[cfg(test)]
    pub fn get(&self, config: &str) -> Option<&[f64]> {
        self.per_config
            .iter()
            .find(|(c, _)| c == config)
            .map(|(_, v)| v.as_slice())
    }

    pub fn is_empty(&self) -> bool {
        self.per_config.iter().all(|(_, v)| v.is_empty())
    }
}

/// The value below which a fraction `q` of the sorted samples lie (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The empirical CDF of `sorted` as (value, fraction of samples at or below it) points, starting
/// at fraction 0 and ending at 1, thinned to [`MAX_CDF_POINTS`].
pub fn cdf(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(MAX_CDF_POINTS - 1).max(1);
    let mut points = Vec::with_capacity(n / step + 2);
    points.push((sorted[0], 0.0));
    let mut i = step - 1;
    while i < n - 1 {
        points.push((sorted[i], (i + 1) as f64 / n as f64));
        i += step;
    }
    points.push((sorted[n - 1], 1.0));
    points
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
        let v: Vec<f64> = (0..100_000).map(f64::from).collect();
        let c = cdf(&v);
        assert!(c.len() <= MAX_CDF_POINTS + 1, "{}", c.len());
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(*c.last().unwrap(), (99_999.0, 1.0));
    }
}
