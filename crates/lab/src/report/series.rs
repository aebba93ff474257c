//! Time series CSVs (`t_s,<col>,<col>,...`, one row per second) as numbers, reduced to what a
//! chart can show.

use super::csv::{number, Table};

/// At most this many points per line: a chart is about 600 pixels wide, and an hour-long run at
/// one row per second would otherwise put 3,600 points per line into the page.
pub(crate) const MAX_POINTS: usize = 600;

/// One CSV time series: the time column and every other column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TimeSeries {
    pub t_s: Vec<f64>,
    pub columns: Vec<Column>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Column {
    pub name: String,
    /// One value per time; `None` where the cell is empty or not a number.
    pub values: Vec<Option<f64>>,
}

impl TimeSeries {
    /// The first column is time in seconds; rows without a numeric time are left out.
    pub(crate) fn from_table(table: &Table) -> Result<TimeSeries, &'static str> {
        if table.header.len() < 2 {
            return Err("no column besides the time");
        }
        let mut t_s = Vec::with_capacity(table.records.len());
        let mut columns: Vec<Column> = table.header[1..]
            .iter()
            .map(|name| Column {
                name: name.clone(),
                values: Vec::with_capacity(table.records.len()),
            })
            .collect();
        for record in &table.records {
            let Some(t) = number(&record[0]) else {
                continue;
            };
            t_s.push(t);
            for (c, field) in columns.iter_mut().zip(&record[1..]) {
                c.values.push(number(field));
            }
        }
        Ok(TimeSeries { t_s, columns })
    }

    #[cfg(test)]
    pub(crate) fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The column's points as (t, value) segments, split where values are missing, averaged over
    /// equal buckets of rows when there are more than [`MAX_POINTS`] rows (a bucket's mean of a
    /// per-second rate is still a rate).
    pub(crate) fn segments(&self, column: &Column) -> Vec<Vec<(f64, f64)>> {
        let rows = self.t_s.len().min(column.values.len());
        let bucket = rows.div_ceil(MAX_POINTS).max(1);
        let mut segments = Vec::new();
        let mut current: Vec<(f64, f64)> = Vec::new();
        let mut start = 0;
        while start < rows {
            let end = (start + bucket).min(rows);
            let (mut t_sum, mut v_sum, mut n) = (0.0, 0.0, 0u32);
            for i in start..end {
                if let Some(v) = column.values[i] {
                    t_sum += self.t_s[i];
                    v_sum += v;
                    n += 1;
                }
            }
            if n > 0 {
                current.push((t_sum / f64::from(n), v_sum / f64::from(n)));
            } else if !current.is_empty() {
                segments.push(std::mem::take(&mut current));
            }
            start = end;
        }
        if !current.is_empty() {
            segments.push(current);
        }
        segments
    }
}

/// Splits a role-usage column name (`<config>.<role>`) into its config and role; names without a
/// known config prefix are shared roles (`simnet`).
pub(crate) fn split_role<'a>(name: &'a str, configs: &[String]) -> (Option<&'a str>, &'a str) {
    // The longest matching config wins, so that `sv1-proxied.pool` is not read as config `sv1`.
    let mut best: Option<(&str, &str)> = None;
    for c in configs {
        if let Some(role) = name
            .strip_prefix(c.as_str())
            .and_then(|r| r.strip_prefix('.'))
        {
            if best.is_none_or(|(b, _)| c.len() > b.len()) && !role.is_empty() {
                best = Some((&name[..c.len()], role));
            }
        }
    }
    match best {
        Some((config, role)) => (Some(config), role),
        None => (None, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(text: &str) -> TimeSeries {
        TimeSeries::from_table(&Table::parse(text).unwrap()).unwrap()
    }

    #[test]
    fn gaps_split_lines() {
        let s = series("t_s,a,b\n0,1,\n1,2,5\n2,,6\n3,4,7\nx,9,9\n");
        assert_eq!(s.t_s, [0.0, 1.0, 2.0, 3.0]);
        let a = s.column("a").unwrap();
        assert_eq!(
            s.segments(a),
            [vec![(0.0, 1.0), (1.0, 2.0)], vec![(3.0, 4.0)]]
        );
        let b = s.column("b").unwrap();
        assert_eq!(s.segments(b), [vec![(1.0, 5.0), (2.0, 6.0), (3.0, 7.0)]]);
    }

    #[test]
    fn long_series_are_averaged_into_buckets() {
        let rows = MAX_POINTS * 2 + 1;
        let mut text = String::from("t_s,a\n");
        for i in 0..rows {
            text.push_str(&format!("{i},{}\n", i % 2));
        }
        let s = series(&text);
        let seg = s.segments(s.column("a").unwrap());
        assert_eq!(seg.len(), 1);
        assert!(seg[0].len() <= MAX_POINTS, "{}", seg[0].len());
        // Buckets of three rows: values 0,1,0 then 1,0,1 ...
        assert_eq!(seg[0][0], (1.0, 1.0 / 3.0));
        assert_eq!(seg[0][1], (4.0, 2.0 / 3.0));
    }

    #[test]
    fn role_columns_split_on_the_longest_config() {
        let configs = vec!["sv1".to_owned(), "sv1-proxied".to_owned(), "A".to_owned()];
        assert_eq!(split_role("sv1.pool", &configs), (Some("sv1"), "pool"));
        assert_eq!(
            split_role("sv1-proxied.proxy", &configs),
            (Some("sv1-proxied"), "proxy")
        );
        assert_eq!(split_role("simnet", &configs), (None, "simnet"));
        assert_eq!(split_role("B.pool", &configs), (None, "B.pool"));
    }

    #[test]
    fn a_time_column_alone_is_refused() {
        assert!(TimeSeries::from_table(&Table::parse("t_s\n0\n").unwrap()).is_err());
    }
}
