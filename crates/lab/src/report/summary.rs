//! The summary table: every figure of results.json, configurations side by side, and each
//! configuration after the first compared with the first (the baseline, normally sv1).

use std::collections::HashSet;

use serde_json::Value;

use super::html::{escape, push};
use super::palette::Palette;
use super::results_json::{at, number_at, Results};
use super::units::{exact, format_pct, Unit, MISSING};

/// Which direction of change is an improvement, for colouring deltas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    Higher,
    Lower,
    Neither,
}

impl Better {
    /// Whether a change of `diff` is an improvement (`Some(true)`), a worsening
    /// (`Some(false)`), or neither (no change, or a figure with no better direction).
    pub(crate) fn judge(self, diff: f64) -> Option<bool> {
        match self {
            Better::Higher if diff > 0.0 => Some(true),
            Better::Higher if diff < 0.0 => Some(false),
            Better::Lower if diff < 0.0 => Some(true),
            Better::Lower if diff > 0.0 => Some(false),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Number(f64),
    Text(String),
    /// Not in the results; a distribution without samples says why.
    Absent {
        reason: Option<String>,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// The figure's path in a configuration's object, dotted (`shares.accepted`).
    pub key: String,
    pub label: String,
    pub unit: Unit,
    pub better: Better,
    /// One per configuration, in the summary's order.
    pub cells: Vec<Cell>,
}

#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub title: String,
    pub rows: Vec<Row>,
}

#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub configs: Vec<String>,
    pub groups: Vec<Group>,
}

/// A configuration's figure minus the baseline's, and that difference relative to the baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Delta {
    pub abs: f64,
    /// `None` when the baseline is zero and the figures differ.
    pub pct: Option<f64>,
}

pub(crate) fn delta(base: &Cell, other: &Cell) -> Option<Delta> {
    let (Cell::Number(b), Cell::Number(o)) = (base, other) else {
        return None;
    };
    let abs = o - b;
    let pct = if abs == 0.0 {
        Some(0.0)
    } else if *b == 0.0 {
        None
    } else {
        Some(abs / b.abs() * 100.0)
    };
    Some(Delta { abs, pct })
}

/// Distributions in the order the report discusses them (docs/metrics.md).
pub(crate) const DISTRIBUTIONS: [(&str, &str); 8] = [
    ("time_to_job_ms", "Time to job: per template and device"),
    (
        "time_to_job_first_ms",
        "Time to job: first device per template",
    ),
    (
        "time_to_job_at_source_ms",
        "Time to job: template to the job source's first job",
    ),
    (
        "time_to_job_prevhash_ms",
        "Time to job on a new tip: per device",
    ),
    (
        "time_to_job_prevhash_first_ms",
        "Time to job on a new tip: first device",
    ),
    ("time_to_first_job_ms", "Time to first job after connect"),
    ("share_latency_ms", "Share latency (sent to verdict)"),
    (
        "block_propagation_ms",
        "Block propagation (share to node acceptance)",
    ),
];

const SHARE_ROWS: [(&str, &str, Unit, Better); 6] = [
    ("submitted", "submitted", Unit::Count, Better::Neither),
    ("accepted", "accepted", Unit::Count, Better::Higher),
    ("stale", "stale", Unit::Count, Better::Lower),
    ("rejected", "rejected", Unit::Count, Better::Lower),
    ("unanswered", "unanswered", Unit::Count, Better::Lower),
    (
        "acceptance_pct",
        "acceptance",
        Unit::Percent,
        Better::Higher,
    ),
];

const ROLE_ROWS: [(&str, &str, Unit); 5] = [
    ("cpu_pct_mean", "CPU mean", Unit::CpuPct),
    ("cpu_pct_max", "CPU max", Unit::CpuPct),
    ("rss_bytes_max", "memory (RSS) max", Unit::Bytes),
    ("net_tx_bytes", "sent", Unit::Bytes),
    ("net_rx_bytes", "received", Unit::Bytes),
];

impl Summary {
    pub(crate) fn from_results(results: &Results) -> Summary {
        let mut b = Builder {
            configs: &results.configs,
            used: HashSet::new(),
            used_prefixes: Vec::new(),
            groups: Vec::new(),
        };
        b.shares("shares", "Shares at the farm edge");
        if results
            .configs
            .iter()
            .any(|(_, c)| at(c, &["pool_shares"]).is_some_and(Value::is_object))
        {
            b.shares(
                "pool_shares",
                "Shares the pool judged (upstream of the farm proxy or JDC)",
            );
        }
        b.used_prefixes.push("pool_shares".to_owned());

        b.group("Work (difficulty-1 units)");
        b.row(
            &["work", "submitted"],
            "submitted",
            Unit::Work,
            Better::Neither,
        );
        b.row(
            &["work", "accepted"],
            "accepted",
            Unit::Work,
            Better::Higher,
        );
        b.row(
            &["work", "stale_pct"],
            "stale",
            Unit::Percent,
            Better::Lower,
        );
        b.row(
            &["stale_pct_mainnet_equiv"],
            "stale at mainnet's 600 s blocks",
            Unit::Percent,
            Better::Lower,
        );

        b.group("Blocks");
        b.row(&["blocks", "found"], "found", Unit::Count, Better::Higher);
        b.row(
            &["blocks", "submitted"],
            "submitted",
            Unit::Count,
            Better::Neither,
        );
        b.row(
            &["blocks", "orphaned"],
            "orphaned",
            Unit::Count,
            Better::Lower,
        );

        b.group("Template value");
        b.row(
            &["template_value_sats"],
            "worked on (time-weighted)",
            Unit::Sats,
            Better::Higher,
        );
        b.row(
            &["network_template_value_sats"],
            "best the node offered",
            Unit::Sats,
            Better::Neither,
        );
        b.row(
            &["template_value_delta_sats"],
            "worked on − best offered",
            Unit::Sats,
            Better::Higher,
        );

        for (metric, title) in DISTRIBUTIONS {
            b.distribution(metric, title);
        }
        for metric in discovered_distributions(&results.configs) {
            b.distribution(&metric, &metric);
        }

        b.group("Bandwidth");
        for site in ["farm", "pool"] {
            for (key, what, unit) in [
                ("tx_Bps", "sent", Unit::BytesPerSec),
                ("rx_Bps", "received", Unit::BytesPerSec),
                ("tx_bytes", "sent, total", Unit::Bytes),
                ("rx_bytes", "received, total", Unit::Bytes),
            ] {
                b.row(
                    &["bandwidth", site, key],
                    &format!("{site} site {what}"),
                    unit,
                    Better::Lower,
                );
            }
        }

        b.group("Round-trip time");
        b.row(
            &["rtt_ms", "configured"],
            "configured",
            Unit::Millis,
            Better::Neither,
        );
        b.row(
            &["rtt_ms", "measured"],
            "measured",
            Unit::Millis,
            Better::Neither,
        );

        b.roles();

        b.group("Correlation");
        b.row(
            &["unmatched_events"],
            "unmatched events",
            Unit::Count,
            Better::Lower,
        );

        b.rest();
        b.groups.retain(|g| !g.rows.is_empty());
        Summary {
            configs: results.config_names(),
            groups: b.groups,
        }
    }

    #[cfg(test)]
    pub(crate) fn row(&self, key: &str) -> Option<&Row> {
        self.groups
            .iter()
            .flat_map(|g| &g.rows)
            .find(|r| r.key == key)
    }
}

struct Builder<'a> {
    configs: &'a [(String, Value)],
    /// Dotted paths shown so far; everything else numeric goes to "Other figures".
    used: HashSet<String>,
    used_prefixes: Vec<String>,
    groups: Vec<Group>,
}

impl Builder<'_> {
    fn group(&mut self, title: &str) {
        self.groups.push(Group {
            title: title.to_owned(),
            rows: Vec::new(),
        });
    }

    fn push(&mut self, row: Row) {
        self.used.insert(row.key.clone());
        if let Some(g) = self.groups.last_mut() {
            g.rows.push(row);
        }
    }

    fn row(&mut self, path: &[&str], label: &str, unit: Unit, better: Better) {
        let cells = self
            .configs
            .iter()
            .map(|(_, c)| match number_at(c, path) {
                Some(v) => Cell::Number(v),
                None => Cell::Absent { reason: None },
            })
            .collect();
        self.push(Row {
            key: path.join("."),
            label: label.to_owned(),
            unit,
            better,
            cells,
        });
    }

    fn shares(&mut self, key: &str, title: &str) {
        self.group(title);
        for (field, label, unit, better) in SHARE_ROWS {
            self.row(&[key, field], label, unit, better);
        }
        let reasons = union_of_keys(self.configs, &[key, "rejected_by_reason"]);
        for reason in reasons {
            self.row(
                &[key, "rejected_by_reason", &reason],
                &format!("rejected: {reason}"),
                Unit::Count,
                Better::Lower,
            );
        }
        // The pools' own reasons, shown where the lab counted some rejection differently (a
        // superseded job the pool called unknown is stale here).
        let reclassified = self.configs.iter().any(|(_, c)| {
            let pool = at(c, &[key, "pool_reason"]);
            pool.is_some() && pool != at(c, &[key, "rejected_by_reason"])
        });
        if reclassified {
            for reason in union_of_keys(self.configs, &[key, "pool_reason"]) {
                self.row(
                    &[key, "pool_reason", &reason],
                    &format!("rejected, the pool's own reason: {reason}"),
                    Unit::Count,
                    Better::Lower,
                );
            }
        }
    }

    fn distribution(&mut self, metric: &str, title: &str) {
        self.group(&format!("{title} (ms)"));
        self.used_prefixes.push(metric.to_owned());
        let dists: Vec<Option<&Value>> =
            self.configs.iter().map(|(_, c)| at(c, &[metric])).collect();
        let reason = |d: &Value| {
            at(d, &["absent_reason"]).map(|r| match r {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        };
        // A figure of each distribution, or why the distribution is absent.
        let cells_of = |field: &str| -> Vec<Cell> {
            dists
                .iter()
                .map(|d| match d.and_then(|d| number_at(d, &[field])) {
                    Some(v) => Cell::Number(v),
                    None => Cell::Absent {
                        reason: d.and_then(reason),
                    },
                })
                .collect()
        };
        self.push(Row {
            key: format!("{metric}.n"),
            label: "samples".to_owned(),
            unit: Unit::Count,
            better: Better::Neither,
            cells: cells_of("n"),
        });
        for field in ["mean", "p50", "p95", "p99", "max"] {
            self.push(Row {
                key: format!("{metric}.{field}"),
                label: field.to_owned(),
                unit: Unit::Millis,
                better: Better::Lower,
                cells: cells_of(field),
            });
        }
        let ci_cells = dists
            .iter()
            .map(|d| {
                let ci = d.and_then(|d| at(d, &["ci95"])).and_then(Value::as_array);
                match ci
                    .map(|a| a.iter().map(Value::as_f64).collect::<Vec<_>>())
                    .as_deref()
                {
                    Some([Some(lo), Some(hi)]) => Cell::Text(format!(
                        "{} – {}",
                        Unit::Millis.format(*lo),
                        Unit::Millis.format(*hi)
                    )),
                    _ => Cell::Absent {
                        reason: d.and_then(reason),
                    },
                }
            })
            .collect();
        self.push(Row {
            key: format!("{metric}.ci95"),
            label: "95% confidence interval of the mean".to_owned(),
            unit: Unit::Millis,
            better: Better::Neither,
            cells: ci_cells,
        });
    }

    fn roles(&mut self) {
        self.group("Roles (processes)");
        for role in union_of_keys(self.configs, &["roles"]) {
            for (field, what, unit) in ROLE_ROWS {
                self.row(
                    &["roles", &role, field],
                    &format!("{role}: {what}"),
                    unit,
                    Better::Lower,
                );
            }
        }
    }

    /// Every numeric figure not shown yet (`links`, and keys added to docs/metrics.md after this
    /// report was written), by its path.
    fn rest(&mut self) {
        let mut paths: Vec<Vec<String>> = Vec::new();
        for (_, config) in self.configs {
            let mut prefix = Vec::new();
            numeric_paths(config, &mut prefix, &mut paths, 0);
        }
        self.group("Other figures");
        for path in paths {
            let key = path.join(".");
            if self.used.contains(&key)
                || self
                    .used_prefixes
                    .iter()
                    .any(|p| key == *p || key.starts_with(&format!("{p}.")))
            {
                continue;
            }
            let refs: Vec<&str> = path.iter().map(String::as_str).collect();
            self.row(&refs, &key, unit_by_name(&key), Better::Neither);
        }
    }
}

/// Keys of the objects at `path` across configurations, in order of first appearance.
fn union_of_keys(configs: &[(String, Value)], path: &[&str]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for (_, c) in configs {
        if let Some(Value::Object(m)) = at(c, path) {
            for k in m.keys() {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
        }
    }
    keys
}

/// Top-level objects shaped like a distribution (`n` and `p50` or `absent_reason`) that
/// [`DISTRIBUTIONS`] does not name.
fn discovered_distributions(configs: &[(String, Value)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, c) in configs {
        let Some(m) = c.as_object() else { continue };
        for (k, v) in m {
            let shaped = v.get("n").is_some()
                && (v.get("p50").is_some() || v.get("absent_reason").is_some());
            if shaped && !DISTRIBUTIONS.iter().any(|(d, _)| d == k) && !out.contains(k) {
                out.push(k.clone());
            }
        }
    }
    out
}

fn numeric_paths(v: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>, depth: usize) {
    match v {
        Value::Number(_) if !prefix.is_empty() && !out.contains(prefix) => {
            out.push(prefix.clone());
        }
        Value::Object(m) if depth < 6 => {
            for (k, child) in m {
                prefix.push(k.clone());
                numeric_paths(child, prefix, out, depth + 1);
                prefix.pop();
            }
        }
        _ => {}
    }
}

/// The unit of a figure the report does not know, from docs/metrics.md's naming habits.
fn unit_by_name(key: &str) -> Unit {
    let last = key.rsplit('.').next().unwrap_or(key);
    if last.ends_with("_ms") || key.contains("_ms.") {
        Unit::Millis
    } else if last.ends_with("_Bps") {
        Unit::BytesPerSec
    } else if last.ends_with("_bytes") || last.ends_with("bytes_max") {
        Unit::Bytes
    } else if last.ends_with("_pct") {
        Unit::Percent
    } else if last.ends_with("_sats") {
        Unit::Sats
    } else {
        Unit::Plain
    }
}

/// Writes the summary as an HTML table.
pub(crate) fn render(summary: &Summary, palette: &Palette, out: &mut String) {
    let configs = &summary.configs;
    let Some(base) = configs.first() else {
        out.push_str("<p class=\"note\">results.json names no configurations.</p>\n");
        return;
    };
    let columns = 2 + configs.len();
    out.push_str("<div class=\"table-wrap\"><table class=\"summary\">\n<caption>");
    if configs.len() > 1 {
        push(
            out,
            format_args!(
                "Baseline: <b>{}</b>. Under each other configuration's figure, its difference \
                 from the baseline, absolute and relative; green where the change is an \
                 improvement, red where it is not.",
                escape(base)
            ),
        );
    } else {
        out.push_str("One configuration: nothing to compare it with.");
    }
    out.push_str("</caption>\n<thead><tr><th scope=\"col\">figure</th><th scope=\"col\">unit</th>");
    for (i, c) in configs.iter().enumerate() {
        push(
            out,
            format_args!(
                "<th scope=\"col\" class=\"config\" data-config=\"{0}\"><span class=\"swatch\" \
                 style=\"background:{1}\"></span>{0}",
                escape(c),
                palette.colour(c)
            ),
        );
        if i > 0 {
            push(
                out,
                format_args!("<small class=\"delta-head\">vs {}</small>", escape(base)),
            );
        }
        out.push_str("</th>");
    }
    out.push_str("</tr></thead>\n");
    for group in &summary.groups {
        push(
            out,
            format_args!(
                "<tbody><tr class=\"group\"><th colspan=\"{columns}\" scope=\"colgroup\">{}</th></tr>\n",
                escape(&group.title)
            ),
        );
        for row in &group.rows {
            render_row(row, configs, out);
        }
        out.push_str("</tbody>\n");
    }
    out.push_str("</table></div>\n");
}

/// A row: each configuration's cell holds its figure and, after the baseline's, the
/// difference from the baseline beneath it (one column per configuration keeps the table
/// within a page's width however many there are).
fn render_row(row: &Row, configs: &[String], out: &mut String) {
    push(
        out,
        format_args!(
            "<tr data-metric=\"{}\"><th scope=\"row\">{}</th><td class=\"unit\">{}</td>",
            escape(&row.key),
            escape(&row.label),
            row.unit.label()
        ),
    );
    let base = &row.cells[0];
    for (i, (config, cell)) in configs.iter().zip(&row.cells).enumerate() {
        match cell {
            Cell::Number(v) => push(
                out,
                format_args!(
                    "<td class=\"num\" data-config=\"{}\" data-value=\"{}\">{}",
                    escape(config),
                    exact(*v),
                    row.unit.format(*v)
                ),
            ),
            Cell::Text(t) => push(
                out,
                format_args!(
                    "<td class=\"num\" data-config=\"{}\">{}",
                    escape(config),
                    escape(t)
                ),
            ),
            Cell::Absent { reason } => absent(config, reason.as_deref(), out),
        }
        if i > 0 {
            out.push_str("<div class=\"deltas\">");
            deltas(row, config, base, cell, out);
            out.push_str("</div>");
        }
        out.push_str("</td>");
    }
    out.push_str("</tr>\n");
}

/// `cell`'s difference from the baseline's, absolute and relative, as two spans.
fn deltas(row: &Row, config: &str, base: &Cell, cell: &Cell, out: &mut String) {
    let Some(d) = delta(base, cell) else {
        push(
            out,
            format_args!(
                "<span class=\"delta\" data-config=\"{0}\" data-delta=\"abs\">{MISSING}</span> \
                 <span class=\"delta\" data-config=\"{0}\" data-delta=\"pct\"></span>",
                escape(config)
            ),
        );
        return;
    };
    let verdict = match row.better.judge(d.abs) {
        Some(true) => " better",
        Some(false) => " worse",
        None => "",
    };
    push(
        out,
        format_args!(
            "<span class=\"delta{verdict}\" data-config=\"{}\" data-delta=\"abs\" \
             data-value=\"{}\">{}</span>",
            escape(config),
            exact(d.abs),
            row.unit.format_delta(d.abs)
        ),
    );
    out.push(' ');
    match d.pct {
        Some(p) => push(
            out,
            format_args!(
                "<span class=\"delta{verdict}\" data-config=\"{}\" data-delta=\"pct\" \
                 data-value=\"{}\">{}</span>",
                escape(config),
                exact(p),
                format_pct(p)
            ),
        ),
        None => push(
            out,
            format_args!(
                "<span class=\"delta\" data-config=\"{}\" data-delta=\"pct\" \
                 title=\"the baseline is zero\"></span>",
                escape(config)
            ),
        ),
    }
}

fn absent(config: &str, reason: Option<&str>, out: &mut String) {
    match reason {
        Some(r) => push(
            out,
            format_args!(
                "<td class=\"absent\" data-config=\"{}\" title=\"{1}\">{MISSING}<small>{1}</small>",
                escape(config),
                escape(r)
            ),
        ),
        None => push(
            out,
            format_args!(
                "<td class=\"absent\" data-config=\"{}\">{MISSING}",
                escape(config)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(json: &str) -> Results {
        Results::parse(json).unwrap()
    }

    #[test]
    fn deltas_absolute_and_relative() {
        let d = delta(&Cell::Number(200.0), &Cell::Number(150.0)).unwrap();
        assert_eq!(
            d,
            Delta {
                abs: -50.0,
                pct: Some(-25.0)
            }
        );
        let d = delta(&Cell::Number(-4.0), &Cell::Number(-2.0)).unwrap();
        assert_eq!(d.pct, Some(50.0));
        assert_eq!(
            delta(&Cell::Number(0.0), &Cell::Number(3.0)).unwrap().pct,
            None
        );
        assert_eq!(
            delta(&Cell::Number(0.0), &Cell::Number(0.0)).unwrap().pct,
            Some(0.0)
        );
        assert_eq!(
            delta(&Cell::Absent { reason: None }, &Cell::Number(1.0)),
            None
        );
    }

    #[test]
    fn the_pools_own_reasons_are_shown_beside_where_the_lab_reclassified() {
        let r = results(
            r#"{"configs": {"D": {"shares": {"accepted": 10, "rejected_by_reason": {"stale": 2},
                     "pool_reason": {"stale": 2}}},
               "D-ref": {"shares": {"accepted": 12, "rejected_by_reason": {"stale": 3},
                     "pool_reason": {"stale": 2, "invalid_job": 1}}}}}"#,
        );
        let s = Summary::from_results(&r);
        let row = s.row("shares.pool_reason.invalid_job").unwrap();
        assert_eq!(row.cells[1], Cell::Number(1.0));
        assert!(row.label.contains("pool's own reason"), "{}", row.label);
        assert_eq!(
            s.row("shares.pool_reason.stale").unwrap().cells,
            [Cell::Number(2.0), Cell::Number(2.0)]
        );
        assert_eq!(
            s.row("shares.rejected_by_reason.stale").unwrap().cells,
            [Cell::Number(2.0), Cell::Number(3.0)]
        );
    }

    #[test]
    fn known_rows_always_shown_unknown_numbers_collected() {
        let r = results(
            r#"{"configs": {"sv1": {"shares": {"accepted": 10, "rejected_by_reason": {"stale": 2}},
                "links": {"wan": {"tx_bytes": 100}}, "novel_ms": 3.5},
               "A": {"shares": {"accepted": 12, "rejected_by_reason": {"duplicate": 1}}}}}"#,
        );
        let s = Summary::from_results(&r);
        assert_eq!(s.configs, ["sv1", "A"]);
        let acc = s.row("shares.accepted").unwrap();
        assert_eq!(acc.cells, [Cell::Number(10.0), Cell::Number(12.0)]);
        assert_eq!(
            s.row("shares.stale").unwrap().cells,
            [Cell::Absent { reason: None }, Cell::Absent { reason: None }]
        );
        assert!(s.row("shares.rejected_by_reason.stale").is_some());
        assert!(s.row("shares.rejected_by_reason.duplicate").is_some());
        // No pool reason differs from the lab's: not repeated.
        assert!(s.row("shares.pool_reason.stale").is_none());
        let wan = s.row("links.wan.tx_bytes").unwrap();
        assert_eq!(wan.unit, Unit::Bytes);
        assert_eq!(s.row("novel_ms").unwrap().unit, Unit::Millis);
        assert!(
            s.row("pool_shares.accepted").is_none(),
            "no config has pool_shares"
        );
    }

    #[test]
    fn absent_distributions_carry_their_reason() {
        let r = results(
            r#"{"configs": {"sv1": {"block_propagation_ms": {"n": 0, "mean": null,
                "absent_reason": "no block found"}}}}"#,
        );
        let s = Summary::from_results(&r);
        assert_eq!(
            s.row("block_propagation_ms.n").unwrap().cells,
            [Cell::Number(0.0)]
        );
        assert_eq!(
            s.row("block_propagation_ms.p95").unwrap().cells,
            [Cell::Absent {
                reason: Some("no block found".into())
            }]
        );
        assert!(s.row("block_propagation_ms.absent_reason").is_none());
    }
}
