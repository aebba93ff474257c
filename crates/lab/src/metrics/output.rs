//! From measurements to the output directory: results.json (trials aggregated exactly), the
//! per-second series `<series>.csv` and the raw distributions `dist_<metric>.csv`.

use std::path::Path;

use super::measured::Measured;
use super::series::{self, push_field, round6, SERIES};
use super::validity::host_reason;
use super::MetricsError;
use crate::results::{Context, Host, OrderedMap, Results, Trial, SCHEMA};

/// At most this many samples per (metric, configuration) in a `dist_` file: beyond it, evenly
/// spaced order statistics, which draw the same CDF.
pub const MAX_DIST_ROWS: usize = 100_000;

/// One trial: every configuration's measurements and the host's busy fraction over it.
#[derive(Clone, Debug)]
pub struct TrialMeasurement {
    /// Each configuration's measurements, in the run's order.
    pub configs: Vec<Measured>,
    /// [`super::host_busy_fraction`] over the trial.
    pub host_busy_fraction: Option<f64>,
}

/// results.json and the merged measurements the CSV files are written from.
#[derive(Clone, Debug)]
pub struct Assembled {
    /// results.json.
    pub results: Results,
    /// One per configuration, every trial merged, in the first trial's order.
    pub merged: Vec<Measured>,
}

/// Builds results.json. With one trial there is no `trials` key; with several, each trial's
/// figures are listed and the top level aggregates them.
pub fn assemble(context: Context, mut host: Host, trials: Vec<TrialMeasurement>) -> Assembled {
    let repeat = trials.len() > 1;
    let mut merged: Vec<Measured> = Vec::new();
    let mut reasons = Vec::new();
    let mut listed = Vec::new();
    for (k, t) in trials.iter().enumerate() {
        let mut configs = OrderedMap::default();
        let mut trial_reasons = Vec::new();
        for m in &t.configs {
            let r = m.results();
            trial_reasons.extend(r.invalid_reasons.iter().map(|x| format!("{}: {x}", m.name)));
            configs.insert(m.name.clone(), r);
            match merged.iter_mut().find(|x| x.name == m.name) {
                Some(x) => x.merge(m),
                None => merged.push(m.clone()),
            }
        }
        trial_reasons.extend(host_reason(t.host_busy_fraction));
        if repeat {
            reasons.extend(
                trial_reasons
                    .iter()
                    .map(|x| format!("trial {}: {x}", k + 1)),
            );
        } else {
            reasons.extend(trial_reasons.iter().cloned());
        }
        listed.push(Trial {
            trial: k as u32 + 1,
            valid: trial_reasons.is_empty(),
            invalid_reasons: trial_reasons,
            configs,
        });
    }
    if host.cpu_busy_fraction.is_none() {
        host.cpu_busy_fraction = trials
            .iter()
            .filter_map(|t| t.host_busy_fraction)
            .reduce(f64::max);
    }
    let mut configs = OrderedMap::default();
    for m in &merged {
        configs.insert(m.name.clone(), m.results());
    }
    let results = Results {
        schema: SCHEMA,
        valid: reasons.is_empty(),
        invalid_reasons: reasons,
        context,
        configs,
        host,
        trials: repeat.then_some(listed),
    };
    Assembled { results, merged }
}

/// `(file name, contents)` of each per-second series.
pub fn series_files(merged: &[Measured]) -> Vec<(String, String)> {
    let configs: Vec<(&str, &series::Series)> = merged
        .iter()
        .map(|m| (m.name.as_str(), &m.series))
        .collect();
    SERIES
        .iter()
        .map(|name| (format!("{name}.csv"), series::csv(name, &configs)))
        .collect()
}

/// `(file name, contents)` of each `dist_<metric>.csv`: `config,value_ms`, ascending per
/// configuration.
pub fn dist_files(merged: &[Measured]) -> Vec<(String, String)> {
    let Some(first) = merged.first() else {
        return Vec::new();
    };
    first
        .delays
        .named()
        .iter()
        .enumerate()
        .map(|(k, (metric, _))| {
            let mut out = String::from("config,value_ms\n");
            for m in merged {
                let samples = m.delays.named()[k].1;
                for v in samples.sorted_ms(MAX_DIST_ROWS) {
                    push_field(&mut out, &m.name);
                    out.push(',');
                    out.push_str(&round6(v).to_string());
                    out.push('\n');
                }
            }
            (format!("dist_{metric}.csv"), out)
        })
        .collect()
}

/// Writes results.json and every CSV file into `dir` (created if missing).
pub fn write_outputs(dir: &Path, a: &Assembled) -> Result<(), MetricsError> {
    let write = |name: &str, text: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|source| MetricsError::Write { path, source })
    };
    std::fs::create_dir_all(dir).map_err(|source| MetricsError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let json = serde_json::to_vec_pretty(&a.results).expect("results serialize");
    write("results.json", &json)?;
    for (name, text) in series_files(&a.merged)
        .into_iter()
        .chain(dist_files(&a.merged))
    {
        write(&name, text.as_bytes())?;
    }
    Ok(())
}
