//! Per-second time series for the CSV files the report charts: one row per second of the run
//! (warm-up and drain included, `t_s` counted from the window's start), one column per
//! configuration.
//!
//! Shares are placed in the second they were sent (like the totals), hashes and bytes in the
//! second their `HashesDone`/`LinkBytes` was recorded. Rates divide by the part of the second
//! inside the run. Merged trials sum counts and row lengths, so a row is the mean rate over the
//! trials. A last second the run did not fill is not a sample and is not written: the records
//! stamped at the run's end (a device's last `HashesDone`, covering its whole last report
//! period) would make its rate several times the real one.

use std::fmt::Write as _;

use super::input::Window;

/// Counts per second of one configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// `rows[t][column]`.
    rows: Vec<[u64; Series::COLUMNS]>,
    /// Nanoseconds of each row inside the run, summed over merged trials.
    row_ns: Vec<u64>,
}

impl Series {
    /// Column: shares sent.
    pub const SHARES_SENT: usize = 0;
    /// Column: shares accepted.
    pub const SHARES_ACCEPTED: usize = 1;
    /// Column: shares rejected as stale.
    pub const SHARES_STALE: usize = 2;
    /// Column: shares rejected for another reason.
    pub const SHARES_REJECTED: usize = 3;
    /// Column: hashes done.
    pub const HASHES: usize = 4;
    /// Column: bytes leaving the farm site.
    pub const FARM_TX: usize = 5;
    /// Column: bytes entering the farm site.
    pub const FARM_RX: usize = 6;
    /// Column: bytes leaving the pool site.
    pub const POOL_TX: usize = 7;
    /// Column: bytes entering the pool site.
    pub const POOL_RX: usize = 8;
    const COLUMNS: usize = 9;

    /// Zeroed rows, one per second of `window` (warm-up to drain end).
    pub fn new(window: &Window) -> Self {
        let n = window.seconds();
        let total = window.end_ns.saturating_sub(window.start_ns);
        let row_ns = (0..n as u64)
            .map(|i| (total - i * 1_000_000_000).min(1_000_000_000))
            .collect();
        Series {
            rows: vec![[0; Series::COLUMNS]; n],
            row_ns,
        }
    }

    /// Adds `n` to `column` in row `second` (past the end: the last row).
    pub fn add(&mut self, column: usize, second: usize, n: u64) {
        // A record stamped exactly at the run's end belongs to its last second.
        let last = self.rows.len().saturating_sub(1);
        if let Some(row) = self.rows.get_mut(second.min(last)) {
            row[column] += n;
        }
    }

    /// Whether `second` lasted a whole second in every trial merged (only a trial's last may
    /// not). The first row is the longest: every trial has it, whole unless the trial was
    /// shorter than a second.
    pub fn is_full(&self, second: usize) -> bool {
        let full = self.row_ns.first().copied().unwrap_or(0);
        self.row_ns
            .get(second)
            .is_some_and(|&ns| ns > 0 && ns >= full)
    }

    /// The count in `column` at `second`; 0 past the end.
    pub fn get(&self, column: usize, second: usize) -> u64 {
        self.rows.get(second).map_or(0, |r| r[column])
    }

    /// Rows (seconds).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Adds `o`'s counts row by row (a trial merged in).
    pub fn merge(&mut self, o: &Series) {
        if o.rows.len() > self.rows.len() {
            self.rows.resize(o.rows.len(), [0; Series::COLUMNS]);
            self.row_ns.resize(o.rows.len(), 0);
        }
        for (i, r) in o.rows.iter().enumerate() {
            for (a, b) in self.rows[i].iter_mut().zip(r) {
                *a += b;
            }
            self.row_ns[i] += o.row_ns[i];
        }
    }

    /// The value of `name` (a CSV series, see [`SERIES`]) in `second`, `None` where undefined.
    pub fn value(&self, name: &str, second: usize) -> Option<f64> {
        let row = self.rows.get(second)?;
        let secs = *self.row_ns.get(second)? as f64 / 1e9;
        let rate = |c: usize| (secs > 0.0).then(|| row[c] as f64 / secs);
        match name {
            "shares_accepted_per_s" => rate(Series::SHARES_ACCEPTED),
            "shares_stale_per_s" => rate(Series::SHARES_STALE),
            "shares_rejected_per_s" => rate(Series::SHARES_REJECTED),
            "acceptance_pct" => {
                let sent = row[Series::SHARES_SENT];
                (sent > 0).then(|| row[Series::SHARES_ACCEPTED] as f64 / sent as f64 * 100.0)
            }
            "hashrate_hps" => rate(Series::HASHES),
            "bandwidth_farm_tx_Bps" => rate(Series::FARM_TX),
            "bandwidth_farm_rx_Bps" => rate(Series::FARM_RX),
            "bandwidth_pool_tx_Bps" => rate(Series::POOL_TX),
            "bandwidth_pool_rx_Bps" => rate(Series::POOL_RX),
            _ => None,
        }
    }
}

/// The series written as `<name>.csv` (the names the report reads).
pub const SERIES: [&str; 9] = [
    "shares_accepted_per_s",
    "shares_stale_per_s",
    "shares_rejected_per_s",
    "acceptance_pct",
    "hashrate_hps",
    "bandwidth_farm_tx_Bps",
    "bandwidth_farm_rx_Bps",
    "bandwidth_pool_tx_Bps",
    "bandwidth_pool_rx_Bps",
];

/// `t_s,<config1>,<config2>,...` then one row per second; empty cells where a configuration
/// has no value (no shares that second, or its run was shorter).
pub fn csv(name: &str, configs: &[(&str, &Series)]) -> String {
    let rows = configs.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
    let mut out = String::from("t_s");
    for (c, _) in configs {
        out.push(',');
        push_field(&mut out, c);
    }
    out.push('\n');
    for t in 0..rows {
        if !configs.iter().any(|(_, s)| s.is_full(t)) {
            continue;
        }
        let _ = write!(out, "{t}");
        for (_, s) in configs {
            out.push(',');
            if let Some(v) = s.value(name, t) {
                let _ = write!(out, "{}", round6(v));
            }
        }
        out.push('\n');
    }
    out
}

/// A CSV field, quoted when it holds a comma, quote or line break.
pub(crate) fn push_field(out: &mut String, field: &str) {
    if field.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&field.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(field);
    }
}

/// Six decimals are below anything measured here and keep the files short.
pub(crate) fn round6(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_last_second_the_run_did_not_fill_is_not_written() {
        // 2.25 s: two whole seconds and a quarter.
        let window = Window {
            start_ns: 0,
            warmup_end_ns: 0,
            drain_start_ns: 2_250_000_000,
            end_ns: 2_250_000_000,
        };
        let mut s = Series::new(&window);
        assert_eq!(s.len(), 3);
        s.add(Series::HASHES, 0, 1_000);
        s.add(Series::HASHES, 1, 1_000);
        // A device's last report, stamped at the end: a whole period's hashes in a quarter
        // second would read as 4x the rate.
        s.add(Series::HASHES, 2, 1_000);
        assert!(s.is_full(1) && !s.is_full(2));
        let csv = csv("hashrate_hps", &[("sv1", &s)]);
        assert_eq!(csv, "t_s,sv1\n0,1000\n1,1000\n");
        // Merged trials: a row is full only if it was in each.
        let mut merged = s.clone();
        merged.merge(&s);
        assert!(merged.is_full(1) && !merged.is_full(2));
    }
}
