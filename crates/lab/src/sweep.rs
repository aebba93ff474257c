//! A sweep (`stratumlab run --sweep rtt=20ms,145ms,300ms`): every configuration run at each value
//! of one parameter, on the same seed, each point a whole run in its own directory; then one
//! results.json over them all (docs/metrics.md, "Sweeps") and a CSV per key figure against the
//! parameter.
//!
//! The points are run by the caller (the CLI, which owns the flags); this module knows the
//! parameters a sweep may vary and assembles what the points wrote.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::report::key_figures::{self, KEYS};

/// The parameters a sweep may vary, spelled as their flags.
pub const PARAMETERS: [&str; 7] = [
    "rtt",
    "loss",
    "jitter",
    "bandwidth",
    "devices",
    "block-interval",
    "template-interval",
];

/// Why a sweep could not be set up or gathered.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// `--sweep` (as given) is not `PARAMETER=VALUE,VALUE,...`.
    #[error("--sweep {0:?}: write PARAMETER=VALUE,VALUE,... with PARAMETER one of {PARAMETERS:?}")]
    Syntax(String),
    /// The parameter is not one a sweep can vary.
    #[error("--sweep {parameter}: {parameter} is not a parameter a sweep can vary (one of {PARAMETERS:?})")]
    Parameter {
        /// The parameter given.
        parameter: String,
    },
    /// Fewer than two values for the parameter (named).
    #[error("--sweep {0}: give at least two values")]
    TooFew(String),
    /// A value is given twice for the parameter (named).
    #[error("--sweep {0}: a value is given twice")]
    Repeated(String),
    /// A file could not be read.
    #[error("reading {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A file did not parse.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
}

/// A parsed `--sweep`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    /// As its flag is spelled (`rtt`, `block-interval`).
    pub parameter: String,
    /// As given.
    pub values: Vec<String>,
}

impl std::str::FromStr for Sweep {
    type Err = SweepError;

    fn from_str(s: &str) -> Result<Sweep, SweepError> {
        let (parameter, values) = s
            .split_once('=')
            .ok_or_else(|| SweepError::Syntax(s.to_owned()))?;
        let parameter = parameter.trim().trim_start_matches("--").to_owned();
        if !PARAMETERS.contains(&parameter.as_str()) {
            return Err(SweepError::Parameter { parameter });
        }
        let values: Vec<String> = values
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect();
        if values.len() < 2 {
            return Err(SweepError::TooFew(parameter));
        }
        let mut seen = values.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != values.len() {
            return Err(SweepError::Repeated(parameter));
        }
        // The same point written two ways (`1s`, `1000ms`) is given twice too.
        let mut at: Vec<f64> = values
            .iter()
            .filter_map(|v| axis(&parameter, v).0)
            .collect();
        at.sort_by(f64::total_cmp);
        if at.windows(2).any(|w| w[0] == w[1]) {
            return Err(SweepError::Repeated(parameter));
        }
        Ok(Sweep { parameter, values })
    }
}

impl Sweep {
    /// The directory of the point at `value`, inside the sweep's.
    pub fn point_dir(&self, out: &Path, value: &str) -> PathBuf {
        let safe: String = value
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        out.join(format!("{}-{safe}", self.parameter))
    }
}

/// Where a sweep's value sits on a chart's axis, and the axis's name: durations in
/// milliseconds, bandwidth in Mbit/s, the rest as numbers. `None` when it does not parse.
pub fn axis(parameter: &str, value: &str) -> (Option<f64>, &'static str) {
    let v = value.trim();
    match parameter {
        "rtt" | "jitter" | "block-interval" | "template-interval" => (duration_ms(v), "ms"),
        "bandwidth" => (bandwidth_mbit(v), "Mbit/s"),
        "loss" => (v.trim_end_matches('%').trim().parse().ok(), "%"),
        _ => (v.parse().ok(), ""),
    }
}

/// A duration as the flags write it (`145ms`, `2s`, `1m30s`, `1h`) in milliseconds; a bare
/// number is seconds.
fn duration_ms(v: &str) -> Option<f64> {
    if let Ok(secs) = v.parse::<f64>() {
        return Some(secs * 1000.0);
    }
    let mut total = 0.0;
    let mut rest = v.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let n: f64 = rest[..digits].parse().ok()?;
        let after = &rest[digits..];
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let scale = match after[..unit_len].trim() {
            "ms" => 1.0,
            "s" | "sec" => 1000.0,
            "us" | "µs" => 0.001,
            "m" | "min" => 60_000.0,
            "h" => 3_600_000.0,
            _ => return None,
        };
        total += n * scale;
        rest = after[unit_len..].trim_start();
    }
    Some(total)
}

fn bandwidth_mbit(v: &str) -> Option<f64> {
    let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
    let n: f64 = v[..split].trim().parse().ok()?;
    let scale = match v[split..].trim().to_ascii_lowercase().as_str() {
        "" | "bit" | "bps" => 1e-6,
        "kbit" | "kbps" => 1e-3,
        "mbit" | "mbps" => 1.0,
        "gbit" | "gbps" => 1e3,
        _ => return None,
    };
    Some(n * scale)
}

fn read_json(path: &Path) -> Result<Value, SweepError> {
    let text = fs::read_to_string(path).map_err(|source| SweepError::Io {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| SweepError::Json {
        path: path.to_owned(),
        source,
    })
}

/// Writes the sweep's results.json and its CSVs into `out` from the points' own results (each
/// `(value, directory)` in the order given); returns the results.json written.
pub fn write(out: &Path, sweep: &Sweep, points: &[(String, PathBuf)]) -> Result<Value, SweepError> {
    let mut first_context = Value::Null;
    let mut host = Value::Null;
    let mut valid = true;
    let mut reasons = Vec::new();
    let mut json_points = Vec::new();
    for (value, dir) in points {
        let r = read_json(&dir.join("results.json"))?;
        if first_context.is_null() {
            first_context = r.get("context").cloned().unwrap_or(Value::Null);
            host = r.get("host").cloned().unwrap_or(Value::Null);
        }
        if r.get("valid") != Some(&Value::Bool(true)) {
            valid = false;
        }
        for reason in r
            .get("invalid_reasons")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = reason
                .as_str()
                .map_or_else(|| reason.to_string(), str::to_owned);
            reasons.push(Value::String(format!(
                "{}={value}: {text}",
                sweep.parameter
            )));
        }
        let dir_name = dir.strip_prefix(out).unwrap_or(dir).display().to_string();
        json_points.push(json!({
            "value": value,
            "dir": dir_name,
            "valid": r.get("valid").cloned().unwrap_or(Value::Null),
            "configs": r.get("configs").cloned().unwrap_or(Value::Null),
        }));
    }
    let results = json!({
        "schema": 1,
        "valid": valid,
        "invalid_reasons": reasons,
        "context": first_context,
        "sweep": {
            "parameter": sweep.parameter,
            "values": sweep.values,
            "points": json_points,
        },
        "host": host,
    });
    let path = out.join("results.json");
    let text = serde_json::to_string_pretty(&results).unwrap_or_default() + "\n";
    fs::write(&path, text).map_err(|source| SweepError::Io {
        path: path.clone(),
        source,
    })?;
    for key in &KEYS {
        let path = out.join(format!("sweep_{}.csv", key.id));
        fs::write(&path, csv(&results, key)).map_err(|source| SweepError::Io {
            path: path.clone(),
            source,
        })?;
    }
    Ok(results)
}

/// The configurations of a sweep in the run's order (its context's `configurations`, whose
/// first is the baseline), then any other a point names.
pub fn configs(results: &Value) -> Vec<String> {
    let mut names: Vec<String> = results
        .get("context")
        .and_then(|c| c.get("configurations"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    for p in points(results) {
        if let Some(m) = p.get("configs").and_then(Value::as_object) {
            for k in m.keys() {
                if !names.contains(k) {
                    names.push(k.clone());
                }
            }
        }
    }
    names
}

/// The sweep's points, in the order run.
pub fn points(results: &Value) -> impl Iterator<Item = &Value> {
    results
        .get("sweep")
        .and_then(|s| s.get("points"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// `value,<config>,<config>_lo,<config>_hi,...`: the key figure at each value, with its 95%
/// interval where the results give one (empty cells where they do not).
fn csv(results: &Value, key: &key_figures::Key) -> String {
    let names = configs(results);
    let mut out = String::from("value");
    for n in &names {
        out.push_str(&format!(",{n},{n}_lo,{n}_hi"));
    }
    out.push('\n');
    for p in points(results) {
        out.push_str(p.get("value").and_then(Value::as_str).unwrap_or(""));
        for n in &names {
            let v = p
                .get("configs")
                .and_then(|c| c.get(n))
                .and_then(|c| key_figures::read(key, c));
            match v {
                Some(v) => {
                    out.push_str(&format!(",{}", v.value));
                    match v.ci {
                        Some((lo, hi)) => out.push_str(&format!(",{lo},{hi}")),
                        None => out.push_str(",,"),
                    }
                }
                None => out.push_str(",,,"),
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_is_one_known_parameter_and_two_or_more_distinct_values() {
        let s: Sweep = "rtt=20ms, 145ms,300ms".parse().unwrap();
        assert_eq!(s.parameter, "rtt");
        assert_eq!(s.values, ["20ms", "145ms", "300ms"]);
        assert!(matches!("rtt".parse::<Sweep>(), Err(SweepError::Syntax(_))));
        assert!(matches!(
            "speed=1,2".parse::<Sweep>(),
            Err(SweepError::Parameter { .. })
        ));
        assert!(matches!(
            "loss=1".parse::<Sweep>(),
            Err(SweepError::TooFew(_))
        ));
        assert!(matches!(
            "loss=1,1".parse::<Sweep>(),
            Err(SweepError::Repeated(_))
        ));
        assert_eq!(
            s.point_dir(Path::new("out"), "20ms"),
            Path::new("out/rtt-20ms")
        );
    }

    #[test]
    fn values_sit_on_an_axis_in_the_parameters_unit() {
        assert_eq!(axis("rtt", "145ms"), (Some(145.0), "ms"));
        assert_eq!(axis("block-interval", "10s"), (Some(10_000.0), "ms"));
        assert_eq!(axis("bandwidth", "10Mbit"), (Some(10.0), "Mbit/s"));
        assert_eq!(axis("loss", "1%"), (Some(1.0), "%"));
        assert_eq!(axis("devices", "1000"), (Some(1000.0), ""));
        assert_eq!(axis("rtt", "fast").0, None);
        assert_eq!(axis("block-interval", "1m30s").0, Some(90_000.0));
        assert_eq!(axis("block-interval", "1h").0, Some(3_600_000.0));
        assert_eq!(axis("rtt", "2").0, Some(2_000.0));
    }

    #[test]
    fn the_points_make_one_results_json_and_a_csv_per_key_figure() {
        let out = tempfile::tempdir().unwrap();
        let sweep: Sweep = "rtt=20ms,300ms".parse().unwrap();
        let mut points = Vec::new();
        for (i, v) in sweep.values.iter().enumerate() {
            let dir = sweep.point_dir(out.path(), v);
            fs::create_dir_all(&dir).unwrap();
            let mean = 10.0 * (i + 1) as f64;
            let r = json!({"schema": 1, "valid": i == 0,
                "invalid_reasons": if i == 0 { json!([]) } else { json!(["host CPU"]) },
                "context": {"rtt_ms": 20.0}, "host": {"cores": 2},
                "configs": {"sv1": {"time_to_job_ms": {"mean": mean, "ci95": [mean - 1.0, mean + 1.0]}}}});
            fs::write(dir.join("results.json"), r.to_string()).unwrap();
            points.push((v.clone(), dir));
        }
        let r = write(out.path(), &sweep, &points).unwrap();
        assert!(
            r.get("configs").is_none(),
            "a sweep has no top-level configs"
        );
        assert_eq!(r["sweep"]["parameter"], "rtt");
        assert_eq!(r["sweep"]["values"], json!(["20ms", "300ms"]));
        assert_eq!(r["sweep"]["points"][1]["value"], "300ms");
        assert_eq!(r["sweep"]["points"][1]["dir"], "rtt-300ms");
        assert_eq!(
            r["sweep"]["points"][0]["configs"]["sv1"]["time_to_job_ms"]["mean"],
            10.0
        );
        assert_eq!(r["valid"], false);
        assert_eq!(r["invalid_reasons"], json!(["rtt=300ms: host CPU"]));
        let csv = fs::read_to_string(out.path().join("sweep_time_to_job_ms.csv")).unwrap();
        assert_eq!(
            csv,
            "value,sv1,sv1_lo,sv1_hi\n20ms,10,9,11\n300ms,20,19,21\n"
        );
        assert!(out.path().join("results.json").is_file());
    }
}
