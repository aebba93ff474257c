//! `stratumlab report DIR`: report.html (and report.pdf) again from a results directory, after
//! a change to the report or to copy a run's results elsewhere; `stratumlab report --compare
//! DIR_A DIR_B`: run B against run A, as comparison.html and comparison.json in B.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use lab::report::{Chromium, PdfOutcome, ReportOptions};

use crate::config::{self, Dur};

/// Write report.html (and report.pdf, where Chromium is installed) from a results directory
/// (results.json and the CSV series that `stratumlab run` writes).
#[derive(Args, Serialize)]
pub struct ReportArgs {
    /// The results directory.
    #[arg(required_unless_present = "compare")]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    /// Compare run B with run A (their key figures, differences and intervals) and write
    /// comparison.html and comparison.json into B; runs measured under different conditions
    /// are refused.
    #[arg(long, num_args = 2, value_names = ["DIR_A", "DIR_B"], conflicts_with = "dir")]
    #[serde(skip)]
    pub compare: Option<Vec<PathBuf>>,
    /// TOML file with settings; its keys are the flags' names in snake_case.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Write report.html only.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_pdf: bool,
    /// The Chromium that prints report.pdf [default: /usr/bin/chromium, else chromium on PATH].
    #[arg(long, value_name = "PATH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chromium: Option<PathBuf>,
    /// Stop the browser if it has not printed the PDF after this long [default: 60s].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub browser_timeout: Option<Dur>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ReportConfig {
    no_pdf: bool,
    chromium: Option<PathBuf>,
    browser_timeout: Dur,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            no_pdf: false,
            chromium: None,
            browser_timeout: Dur(ReportOptions::default().browser_timeout),
        }
    }
}

pub fn run(args: ReportArgs) -> Result<()> {
    if let Some([a, b]) = args.compare.as_deref() {
        let files = lab::report::write_comparison(a, b)?;
        println!("{}", files.html.display());
        println!("{}", files.json.display());
        return Ok(());
    }
    let Some(dir) = args.dir.clone() else {
        bail!("a results directory, or --compare DIR_A DIR_B");
    };
    let conf: ReportConfig = config::load(args.config.as_deref(), &args)?;
    if conf.browser_timeout.is_zero() {
        bail!("--browser-timeout must be more than 0");
    }
    let options = ReportOptions {
        pdf: !conf.no_pdf,
        browser: conf.chromium.map(Chromium::at),
        browser_timeout: conf.browser_timeout.0,
    };
    let files = lab::report::write_report_with(&dir, &options)?;
    println!("{}", files.html.display());
    match files.pdf {
        PdfOutcome::Written(pdf) => println!("{}", pdf.display()),
        PdfOutcome::Disabled => {}
        PdfOutcome::NoBrowser => eprintln!(
            "report.pdf not written: no Chromium ({} or chromium on PATH)",
            lab::report::chromium::DEBIAN_CHROMIUM
        ),
        // report.html is written; the failure is still this command's to report.
        PdfOutcome::Failed(e) => bail!("report.pdf not written: {e}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(dir: PathBuf) -> ReportArgs {
        ReportArgs {
            dir: Some(dir),
            compare: None,
            config: None,
            no_pdf: true,
            chromium: None,
            browser_timeout: None,
        }
    }

    #[test]
    fn writes_the_html_and_refuses_a_non_results_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("results.json"),
            r#"{"schema": 1, "valid": true, "configs": {"sv1": {"shares": {"accepted": 3}}}}"#,
        )
        .unwrap();
        run(args(dir.path().to_owned())).unwrap();
        let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
        assert!(html.contains("data-metric=\"shares.accepted\""));
        assert!(!dir.path().join("report.pdf").exists(), "--no-pdf");

        let empty = tempfile::tempdir().unwrap();
        let e = run(args(empty.path().to_owned())).unwrap_err();
        assert!(
            format!("{e:#}").contains("not a results directory"),
            "{e:#}"
        );
    }

    #[test]
    fn a_failing_browser_fails_the_command_after_writing_the_html() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("results.json"), r#"{"configs": {}}"#).unwrap();
        let mut a = args(dir.path().to_owned());
        a.no_pdf = false;
        // Not a browser: exits non-zero at once.
        a.chromium = Some(PathBuf::from("/bin/false"));
        let e = run(a).unwrap_err();
        assert!(format!("{e:#}").contains("report.pdf not written"), "{e:#}");
        assert!(dir.path().join("report.html").exists());
    }
}
