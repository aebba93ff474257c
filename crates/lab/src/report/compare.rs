//! Two runs compared (`stratumlab report --compare DIR_A DIR_B`): for every configuration both
//! ran, every key figure of A and of B, the difference B − A with its 95% interval, and whether
//! it is significant (docs/metrics.md, "Comparing runs"). Written into B as comparison.html and
//! comparison.json.
//!
//! Two runs measured under different conditions (round trip, loss, block interval, devices,
//! ...) are refused: their difference would be the conditions', not the change's. Anything else
//! that differs (the seed, the duration, the commit) is listed, since it may explain a
//! difference.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::html::{escape, push};
use super::key_figures::{compare, read, show, show_delta, Key, Value95, KEYS};
use super::results_json::Results;

/// The comparison page's file name, written into run B's directory.
pub const COMPARISON_HTML: &str = "comparison.html";
/// The comparison's figures' file name, written into run B's directory.
pub const COMPARISON_JSON: &str = "comparison.json";

/// The context keys that set the conditions a run measures under: runs that differ in one of
/// these are not compared.
const CONDITIONS: [&str; 13] = [
    "rtt_ms",
    "jitter_ms",
    "loss_pct",
    "bandwidth_cap_Bps",
    "lan_rtt_ms",
    "block_interval_s",
    "template_interval_s",
    "devices",
    "profiles",
    "hash_budget_hps",
    "farm_relay_delay_ms",
    "blocks_per_config",
    "time_compression",
];

/// Why two runs could not be compared.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A file could not be read or written.
    #[error("reading {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A results.json did not parse.
    #[error("{}: not a results directory's results.json: {source}", path.display())]
    NotResults {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
    /// The runs' conditions differ (which, and how).
    #[error(
        "the runs were measured under different conditions, so their figures cannot be compared: \
         {0}"
    )]
    Conditions(String),
    /// The runs share no configuration.
    #[error("the runs have no configuration in common (A: {a}; B: {b})")]
    NothingInCommon {
        /// Run A's configurations.
        a: String,
        /// Run B's configurations.
        b: String,
    },
}

/// The files written into B.
#[derive(Debug)]
pub struct ComparisonFiles {
    /// comparison.html.
    pub html: PathBuf,
    /// comparison.json.
    pub json: PathBuf,
}

/// One key figure of one configuration in both runs.
#[derive(Debug, Clone)]
struct Row {
    key: Key,
    a: Option<Value95>,
    b: Option<Value95>,
    /// B − A and its interval.
    diff: Option<(f64, Option<(f64, f64)>)>,
    /// The interval excludes zero; `None` without an interval.
    significant: Option<bool>,
    /// `better`, `worse`, `no difference`, or `unknown`.
    verdict: &'static str,
}

#[derive(Debug)]
struct Comparison {
    a: PathBuf,
    b: PathBuf,
    /// Context keys that differ, with A's and B's values.
    differs: Vec<(String, Value, Value)>,
    only_a: Vec<String>,
    only_b: Vec<String>,
    configs: Vec<(String, Vec<Row>)>,
}

fn load(dir: &Path) -> Result<Results, CompareError> {
    let path = dir.join("results.json");
    let text = fs::read_to_string(&path).map_err(|source| CompareError::Io {
        path: path.clone(),
        source,
    })?;
    Results::parse(&text).map_err(|source| CompareError::NotResults { path, source })
}

fn comparison(a_dir: &Path, b_dir: &Path) -> Result<Comparison, CompareError> {
    let (a, b) = (load(a_dir)?, load(b_dir)?);
    let empty = Map::new();
    let context = |r: &Results| r.get("context").and_then(Value::as_object).cloned();
    let (ca, cb) = (
        context(&a).unwrap_or_else(|| empty.clone()),
        context(&b).unwrap_or_else(|| empty.clone()),
    );
    let names = |r: &Results| r.config_names();
    let (na, nb) = (names(&a), names(&b));
    let common: Vec<&String> = na.iter().filter(|n| nb.contains(n)).collect();
    if common.is_empty() {
        return Err(CompareError::NothingInCommon {
            a: na.join(", "),
            b: nb.join(", "),
        });
    }
    let mut keys: Vec<&String> = ca.keys().chain(cb.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut differs = Vec::new();
    let mut conditions = Vec::new();
    for k in keys {
        let (va, vb) = (
            ca.get(k).cloned().unwrap_or(Value::Null),
            cb.get(k).cloned().unwrap_or(Value::Null),
        );
        if va == vb {
            continue;
        }
        if CONDITIONS.contains(&k.as_str()) {
            match (va.as_object(), vb.as_object()) {
                // Per configuration (devices, profiles, hash budgets): only the configurations
                // both runs have are compared; one only a run has is listed, not a condition.
                (Some(ma), Some(mb)) => {
                    for n in &common {
                        let (x, y) = (ma.get(*n), mb.get(*n));
                        if x != y {
                            conditions.push(format!(
                                "{k} of {n} is {} in A and {} in B",
                                x.map_or_else(|| "absent".to_owned(), Value::to_string),
                                y.map_or_else(|| "absent".to_owned(), Value::to_string)
                            ));
                        }
                    }
                }
                _ => conditions.push(format!("{k} is {va} in A and {vb} in B")),
            }
        }
        differs.push((k.clone(), va, vb));
    }
    if !conditions.is_empty() {
        return Err(CompareError::Conditions(conditions.join("; ")));
    }
    let config = |r: &Results, name: &str| {
        r.configs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let configs = common
        .iter()
        .map(|name| {
            let (va, vb) = (config(&a, name), config(&b, name));
            let rows = KEYS
                .iter()
                .map(|k| {
                    let fa = va.as_ref().and_then(|v| read(k, v));
                    let fb = vb.as_ref().and_then(|v| read(k, v));
                    let c = fa.zip(fb).map(|(x, y)| compare(x, y));
                    let significant = c.and_then(|c| c.ci.map(|_| !c.inconclusive()));
                    let verdict = match (c, significant) {
                        (None, _) => "unknown",
                        (Some(_), Some(false)) => "no difference",
                        (Some(c), _) => match k.better.judge(c.diff) {
                            Some(true) => "better",
                            Some(false) => "worse",
                            None => "no difference",
                        },
                    };
                    Row {
                        key: *k,
                        a: fa,
                        b: fb,
                        diff: c.map(|c| (c.diff, c.ci)),
                        significant,
                        verdict,
                    }
                })
                .filter(|r| r.a.is_some() || r.b.is_some())
                .collect();
            ((*name).clone(), rows)
        })
        .collect();
    Ok(Comparison {
        a: a_dir.to_owned(),
        b: b_dir.to_owned(),
        differs,
        only_a: na.iter().filter(|n| !nb.contains(n)).cloned().collect(),
        only_b: nb.iter().filter(|n| !na.contains(n)).cloned().collect(),
        configs,
    })
}

/// Compares run B (`b`) against run A (`a`) and writes comparison.html and comparison.json
/// into `b`.
pub fn write_comparison(a: &Path, b: &Path) -> Result<ComparisonFiles, CompareError> {
    let c = comparison(a, b)?;
    let html_path = b.join(COMPARISON_HTML);
    let json_path = b.join(COMPARISON_JSON);
    let write = |path: &Path, text: String| {
        fs::write(path, text).map_err(|source| CompareError::Io {
            path: path.to_owned(),
            source,
        })
    };
    let json = serde_json::to_string_pretty(&to_json(&c)).unwrap_or_default();
    write(&json_path, json + "\n")?;
    write(&html_path, to_html(&c))?;
    tracing::info!(path = %html_path.display(), "comparison written");
    Ok(ComparisonFiles {
        html: html_path,
        json: json_path,
    })
}

fn to_json(c: &Comparison) -> Value {
    let value = |v: &Option<Value95>| {
        v.map_or(
            Value::Null,
            |v| json!({ "value": v.value, "ci95": v.ci.map(|(l, h)| [l, h]) }),
        )
    };
    let configs: Map<String, Value> = c
        .configs
        .iter()
        .map(|(name, rows)| {
            let figures: Map<String, Value> = rows
                .iter()
                .map(|r| {
                    (
                        r.key.id.to_owned(),
                        json!({
                            "a": value(&r.a),
                            "b": value(&r.b),
                            "diff": r.diff.map(|d| d.0),
                            "diff_ci95": r.diff.and_then(|d| d.1).map(|(l, h)| [l, h]),
                            "significant": r.significant,
                            "verdict": r.verdict,
                        }),
                    )
                })
                .collect();
            (name.clone(), Value::Object(figures))
        })
        .collect();
    let differs: Map<String, Value> = c
        .differs
        .iter()
        .map(|(k, a, b)| (k.clone(), json!({ "a": a, "b": b })))
        .collect();
    json!({
        "a": c.a.display().to_string(),
        "b": c.b.display().to_string(),
        "differs": differs,
        "only_in_a": c.only_a,
        "only_in_b": c.only_b,
        "configs": configs,
    })
}

const CSS: &str = "body{margin:0 auto;max-width:1200px;padding:1.5rem 2rem;color:#1b1b1b;\
font:14px/1.45 system-ui,sans-serif}h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:1.6rem;\
border-bottom:1px solid #ddd}table{border-collapse:collapse;font-variant-numeric:tabular-nums}\
th,td{padding:.2rem .6rem;border-bottom:1px solid #eee;text-align:right}th:first-child{text-align:left}\
.better{color:#0a7a3e}.worse{color:#b3261e}.no-difference,.unknown{color:#666}.note{color:#666}\
code{font-size:.95em}@page{size:A4 landscape;margin:10mm}";

fn to_html(c: &Comparison) -> String {
    let mut out = String::with_capacity(16 * 1024);
    push(
        &mut out,
        format_args!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
             style-src 'unsafe-inline'\">\n<title>stratumlab comparison</title>\n\
             <style>{CSS}</style>\n</head>\n<body>\n<h1>B against A</h1>\n\
             <p>A: <code>{}</code><br>B: <code>{}</code></p>\n",
            escape(&c.a.display().to_string()),
            escape(&c.b.display().to_string())
        ),
    );
    out.push_str(
        "<p class=\"note\">Each key figure of every configuration both runs measured: A's, B's, \
         the difference B − A and its 95% interval (docs/metrics.md, \"Comparing runs\"). \
         \"No difference\" where that interval includes zero.</p>\n",
    );
    out.push_str("<section id=\"differs\"><h2>What else differs</h2>\n");
    if c.differs.is_empty() {
        out.push_str("<p>Nothing in the runs' context.</p>\n");
    } else {
        out.push_str(
            "<table><thead><tr><th>setting</th><th>A</th><th>B</th></tr></thead><tbody>\n",
        );
        for (k, a, b) in &c.differs {
            push(
                &mut out,
                format_args!(
                    "<tr><th>{}</th><td>{}</td><td>{}</td></tr>\n",
                    escape(k),
                    escape(&plain(a)),
                    escape(&plain(b))
                ),
            );
        }
        out.push_str("</tbody></table>\n");
    }
    for (label, names) in [("Only in A", &c.only_a), ("Only in B", &c.only_b)] {
        if !names.is_empty() {
            push(
                &mut out,
                format_args!("<p>{label}: {}.</p>\n", escape(&names.join(", "))),
            );
        }
    }
    out.push_str("</section>\n");
    for (name, rows) in &c.configs {
        push(
            &mut out,
            format_args!(
                "<section data-config=\"{0}\"><h2>{0}</h2>\n<table><thead><tr><th>figure</th>\
                 <th>A</th><th>B</th><th>B − A</th><th>95% CI of B − A</th><th></th></tr></thead>\
                 <tbody>\n",
                escape(name)
            ),
        );
        for r in rows {
            let unit = r.key.unit;
            let cell =
                |v: &Option<Value95>| v.map_or_else(|| "—".to_owned(), |v| show(unit, v.value));
            let (diff, ci) = match r.diff {
                Some((d, ci)) => (
                    show_delta(unit, d),
                    ci.map_or_else(
                        || "—".to_owned(),
                        |(l, h)| format!("{} to {}", show_delta(unit, l), show_delta(unit, h)),
                    ),
                ),
                None => ("—".to_owned(), "—".to_owned()),
            };
            push(
                &mut out,
                format_args!(
                    "<tr data-figure=\"{}\"><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                     <td class=\"{}\">{}</td></tr>\n",
                    r.key.id,
                    r.key.title,
                    escape(&cell(&r.a)),
                    escape(&cell(&r.b)),
                    escape(&diff),
                    escape(&ci),
                    r.verdict.replace(' ', "-"),
                    r.verdict
                ),
            );
        }
        out.push_str("</tbody></table></section>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// A context value as text: strings bare, the rest as JSON.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "—".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path, context: Value, ttj: (f64, [f64; 2]), cpu: f64) {
        let results = json!({
            "schema": 1,
            "context": context,
            "configs": {
                "sv1": {"time_to_job_ms": {"mean": 300.0, "ci95": [280.0, 320.0]},
                        "roles": {"sv1.pool": {"kind": "pool", "site": "pool", "cpu_pct_mean": 1.0}}},
                "D": {"time_to_job_ms": {"mean": ttj.0, "ci95": ttj.1},
                      "roles": {"D.pool": {"kind": "pool", "site": "pool", "cpu_pct_mean": cpu}}}
            }
        });
        fs::write(dir.join("results.json"), results.to_string()).unwrap();
    }

    #[test]
    fn differences_are_judged_by_their_interval_and_other_settings_are_listed() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        run(
            a.path(),
            json!({"rtt_ms": 145.0, "seed": 1, "commit": "aaa"}),
            (80.0, [78.0, 82.0]),
            2.0,
        );
        run(
            b.path(),
            json!({"rtt_ms": 145.0, "seed": 2, "commit": "bbb"}),
            (60.0, [58.0, 62.0]),
            1.0,
        );
        let files = write_comparison(a.path(), b.path()).unwrap();
        let j: Value = serde_json::from_str(&fs::read_to_string(&files.json).unwrap()).unwrap();
        let d = &j["configs"]["D"]["time_to_job_ms"];
        assert_eq!(d["diff"], -20.0);
        assert_eq!(d["significant"], true);
        assert_eq!(d["verdict"], "better");
        // sv1 is the same in both: its interval holds zero.
        let s = &j["configs"]["sv1"]["time_to_job_ms"];
        assert_eq!(
            (s["significant"].clone(), s["verdict"].clone()),
            (json!(false), json!("no difference"))
        );
        // Pool CPU has no interval: compared as measured.
        let cpu = &j["configs"]["D"]["pool_cpu"];
        assert_eq!(cpu["significant"], Value::Null);
        assert_eq!(cpu["verdict"], "better");
        assert_eq!(j["differs"]["seed"], json!({"a": 1, "b": 2}));
        assert!(j["differs"].get("rtt_ms").is_none());
        let html = fs::read_to_string(&files.html).unwrap();
        assert!(html.contains("<section data-config=\"D\">"), "{html}");
        assert!(html.contains("−20 ms"), "{html}");
    }

    #[test]
    fn configurations_only_one_run_has_are_listed_not_refused() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        run(
            a.path(),
            json!({"rtt_ms": 145.0, "devices": {"sv1": 100, "D": 100}}),
            (80.0, [78.0, 82.0]),
            1.0,
        );
        let with_ref = json!({"context": {"rtt_ms": 145.0,
                "devices": {"sv1": 100, "D": 100, "D-ref": 100}},
            "configs": {"sv1": {}, "D": {}, "D-ref": {}}});
        fs::write(b.path().join("results.json"), with_ref.to_string()).unwrap();
        let files = write_comparison(a.path(), b.path()).unwrap();
        let j: Value = serde_json::from_str(&fs::read_to_string(&files.json).unwrap()).unwrap();
        assert_eq!(j["only_in_b"], json!(["D-ref"]));
        assert!(j["differs"].get("devices").is_some());
        // A common configuration with other devices is a condition that differs.
        let fewer = json!({"context": {"rtt_ms": 145.0, "devices": {"sv1": 100, "D": 10}},
            "configs": {"sv1": {}, "D": {}}});
        fs::write(b.path().join("results.json"), fewer.to_string()).unwrap();
        let e = write_comparison(a.path(), b.path()).unwrap_err();
        assert!(
            e.to_string()
                .contains("devices of D is 100 in A and 10 in B"),
            "{e}"
        );
    }

    #[test]
    fn runs_under_different_conditions_or_without_a_common_configuration_are_refused() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        run(
            a.path(),
            json!({"rtt_ms": 145.0, "loss_pct": 0}),
            (80.0, [78.0, 82.0]),
            1.0,
        );
        run(
            b.path(),
            json!({"rtt_ms": 20.0, "loss_pct": 0}),
            (80.0, [78.0, 82.0]),
            1.0,
        );
        let e = write_comparison(a.path(), b.path()).unwrap_err();
        assert!(
            e.to_string().contains("rtt_ms is 145.0 in A and 20.0 in B"),
            "{e}"
        );
        assert!(!b.path().join(COMPARISON_HTML).exists());

        fs::write(
            b.path().join("results.json"),
            json!({"context": {"rtt_ms": 145.0, "loss_pct": 0}, "configs": {"A": {}}}).to_string(),
        )
        .unwrap();
        let e = write_comparison(a.path(), b.path()).unwrap_err();
        assert!(matches!(e, CompareError::NothingInCommon { .. }), "{e}");
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            write_comparison(a.path(), empty.path()),
            Err(CompareError::Io { .. })
        ));
    }
}
