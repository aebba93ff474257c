//! What a results directory holds for the report: results.json, the time series CSVs and the
//! raw distribution samples. Anything may be missing; what cannot be read becomes a note shown
//! in the report rather than a failure.

use std::fs;
use std::path::{Path, PathBuf};

use super::csv::Table;
use super::results_json::Results;
use super::samples::Samples;
use super::series::TimeSeries;
use super::ReportError;

pub(crate) const RESULTS_JSON: &str = "results.json";
/// Distribution samples are `dist_<metric>.csv`.
const DIST_PREFIX: &str = "dist_";
/// Role usage series name their columns `<config>.<role>`.
const ROLE_PREFIX: &str = "role_";

#[derive(Debug, Clone, Default)]
pub(crate) struct Inputs {
    pub dir: PathBuf,
    pub results: Option<Results>,
    /// Time series by file stem (`shares_accepted_per_s`), in name order.
    pub series: Vec<(String, TimeSeries)>,
    /// Distribution samples by metric (`time_to_job_ms`), in name order.
    pub samples: Vec<(String, Samples)>,
    /// Every configuration: results.json's in its order, then any only the CSVs name.
    pub configs: Vec<String>,
    /// Inputs that were missing or unreadable, for the reader.
    pub notes: Vec<String>,
}

impl Inputs {
    pub(crate) fn load(dir: &Path) -> Result<Inputs, ReportError> {
        let io = |source| ReportError::Io {
            path: dir.to_owned(),
            source,
        };
        let mut inputs = Inputs {
            dir: dir.to_owned(),
            ..Inputs::default()
        };
        let mut csvs: Vec<(String, PathBuf)> = Vec::new();
        for entry in fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.extension().is_some_and(|e| e == "csv") && path.is_file() {
                if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                    csvs.push((stem.to_owned(), path.clone()));
                }
            }
        }
        csvs.sort();

        let results_path = dir.join(RESULTS_JSON);
        match fs::read_to_string(&results_path) {
            Ok(text) => match Results::parse(&text) {
                Ok(r) => inputs.results = Some(r),
                Err(e) => inputs.note(format!("{RESULTS_JSON} could not be read: {e}")),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if csvs.is_empty() {
                    return Err(ReportError::NoResults(dir.to_owned()));
                }
                inputs.note(format!(
                    "{RESULTS_JSON} is missing: only the CSV series are shown"
                ));
            }
            Err(source) => {
                return Err(ReportError::Io {
                    path: results_path,
                    source,
                })
            }
        }

        for (stem, path) in csvs {
            let table = match fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|t| Table::parse(&t).map_err(|e| e.to_string()))
            {
                Ok(t) => t,
                Err(e) => {
                    inputs.note(format!("{stem}.csv was left out: {e}"));
                    continue;
                }
            };
            if let Some(metric) = stem.strip_prefix(DIST_PREFIX) {
                match Samples::from_table(&table) {
                    Ok(s) => inputs.samples.push((metric.to_owned(), s)),
                    Err(e) => inputs.note(format!("{stem}.csv was left out: {e}")),
                }
            } else {
                match TimeSeries::from_table(&table) {
                    Ok(s) => inputs.series.push((stem, s)),
                    Err(e) => inputs.note(format!("{stem}.csv was left out: {e}")),
                }
            }
        }
        inputs.configs = inputs.collect_configs();
        Ok(inputs)
    }

    pub(crate) fn series(&self, name: &str) -> Option<&TimeSeries> {
        self.series.iter().find(|(n, _)| n == name).map(|(_, s)| s)
    }

    pub(crate) fn samples(&self, metric: &str) -> Option<&Samples> {
        self.samples
            .iter()
            .find(|(m, _)| m == metric)
            .map(|(_, s)| s)
    }

    /// Whether `name` is a role usage series (`role_cpu_pct`), whose columns are per role.
    pub(crate) fn is_role_series(name: &str) -> bool {
        name.starts_with(ROLE_PREFIX)
    }

    fn note(&mut self, note: String) {
        tracing::warn!(dir = %self.dir.display(), "{note}");
        self.notes.push(note);
    }

    fn collect_configs(&self) -> Vec<String> {
        let mut configs = self
            .results
            .as_ref()
            .map(Results::config_names)
            .unwrap_or_default();
        let mut add = |name: &str| {
            if !name.is_empty() && !configs.iter().any(|c| c == name) {
                configs.push(name.to_owned());
            }
        };
        for (name, s) in &self.series {
            if !Self::is_role_series(name) {
                s.columns.iter().for_each(|c| add(&c.name));
            }
        }
        for (_, s) in &self.samples {
            s.per_config.iter().for_each(|(c, _)| add(c));
        }
        configs
    }
}
