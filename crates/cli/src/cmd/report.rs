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
#[derive(Args, Serialize, Deserialize, Debug)]
#[serde(deny_unknown_fields)]
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
    pub no_pdf: bool,
    /// The Chromium that prints report.pdf [default: /usr/bin/chromium, else chromium on PATH].
    #[arg(long, value_name = "PATH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chromium: Option<PathBuf>,
    /// Stop the browser if it has not printed the PDF after this long.
    #[arg(long, default_value_t = Dur(ReportOptions::default().browser_timeout))]
    pub browser_timeout: Dur,
}

impl config::RoleSettings for ReportArgs {
    fn config_mut(&mut self) -> &mut Option<PathBuf> {
        &mut self.config
    }

    fn keep_arguments(&mut self, flags: &mut Self) {
        self.dir = flags.dir.take();
        self.compare = flags.compare.take();
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
    if args.browser_timeout.is_zero() {
        bail!("--browser-timeout must be more than 0");
    }
    let options = ReportOptions {
        pdf: !args.no_pdf,
        browser: args.chromium.map(Chromium::at),
        browser_timeout: args.browser_timeout.0,
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
        config::parse(&[dir.to_str().unwrap(), "--no-pdf"]).unwrap()
    }

    #[test]
    fn a_config_file_sets_what_no_flag_did_and_knows_no_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("report.toml");
        std::fs::write(&file, "no_pdf = true\nbrowser_timeout = \"5s\"\n").unwrap();
        let f = file.to_str().unwrap();
        let a: ReportArgs = config::parse(&["results", "--config", f]).unwrap();
        assert!(a.no_pdf);
        assert_eq!(a.dir, Some(PathBuf::from("results")));
        assert_eq!(a.browser_timeout.0, std::time::Duration::from_secs(5));
        let a: ReportArgs =
            config::parse(&["results", "--config", f, "--browser-timeout", "9s"]).unwrap();
        assert_eq!(a.browser_timeout.0, std::time::Duration::from_secs(9));
        // The directory and --compare are arguments, not settings.
        for key in ["dir = \"x\"", "compare = [\"a\", \"b\"]"] {
            std::fs::write(&file, key).unwrap();
            let e = config::parse::<ReportArgs>(&["results", "--config", f]).unwrap_err();
            assert!(format!("{e:#}").contains("unknown field"), "{key}: {e:#}");
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
