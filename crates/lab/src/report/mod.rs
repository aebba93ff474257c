//! report.html (and report.pdf) from a results directory (docs/metrics.md, "results.json").
//!
//! The report reads the directory's files, not the metric engine's types: results.json as
//! plain JSON and the CSV series, so that it renders whatever a run wrote, old or new, and
//! shows a missing figure as "—" instead of failing. The page is one self-contained file
//! (inline CSS, SVG charts drawn with plotters, a small inline script); where a Chromium is
//! installed it is also printed to PDF.
//!
//! - [`inputs`]: what the directory holds; [`csv`], [`series`], [`samples`], [`results_json`]
//!   read it.
//! - [`page`]: the document, in this order: [`findings`] (the key figures against the
//!   baseline, with [`validity`] inside), [`explain`] (a sentence per configuration on where its
//!   time to new job goes), [`figures`] (drawn by [`chart`] in the colours of [`palette`], the
//!   distributions' curves fitted to their axes by [`cdf`]), [`summary`] (every figure) and
//!   [`context`] last.
//! - [`chromium`]: the headless browser that prints the PDF (and checks the page in tests).
//! - [`compare`]: two runs' key figures side by side (comparison.html and comparison.json).

mod cdf;
mod chart;
pub mod chromium;
mod compare;
mod context;
mod csv;
mod explain;
mod figures;
mod findings;
mod html;
mod inputs;
pub(crate) mod key_figures;
mod page;
pub(crate) mod palette;
mod results_json;
mod samples;
mod series;
mod summary;
mod sweep_page;
mod units;
mod validity;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

pub use chromium::{BrowserError, BrowserOutput, Chromium};
pub use compare::{
    write_comparison, CompareError, ComparisonFiles, COMPARISON_HTML, COMPARISON_JSON,
};

/// The report's file name in a results directory.
pub const REPORT_HTML: &str = "report.html";
/// The printed report's file name in a results directory.
pub const REPORT_PDF: &str = "report.pdf";

/// Why the report could not be written.
#[derive(Debug, Error)]
pub enum ReportError {
    /// A file could not be read or written.
    #[error("reading {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The directory holds no results.
    #[error("{}: no results.json and no CSV series: not a results directory", .0.display())]
    NoResults(PathBuf),
}

/// How the report is written.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Print report.pdf when a browser is found.
    pub pdf: bool,
    /// The browser to print with; `None`: [`Chromium::find`].
    pub browser: Option<Chromium>,
    /// The browser is stopped after this long.
    pub browser_timeout: Duration,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            pdf: true,
            browser: None,
            browser_timeout: Duration::from_secs(60),
        }
    }
}

/// What became of report.pdf.
#[derive(Debug)]
pub enum PdfOutcome {
    /// Printed to this path.
    Written(PathBuf),
    /// Not asked for.
    Disabled,
    /// No Chromium on this machine: not an error.
    NoBrowser,
    /// The browser failed; report.html is written all the same.
    Failed(BrowserError),
}

/// The files written.
#[derive(Debug)]
pub struct ReportFiles {
    /// report.html.
    pub html: PathBuf,
    /// What became of report.pdf.
    pub pdf: PdfOutcome,
}

/// Writes `dir/report.html` from the results in `dir`, and `dir/report.pdf` where a Chromium is
/// installed.
pub fn write_report(dir: &Path) -> Result<ReportFiles, ReportError> {
    write_report_with(dir, &ReportOptions::default())
}

/// [`write_report`] with `options`.
pub fn write_report_with(dir: &Path, options: &ReportOptions) -> Result<ReportFiles, ReportError> {
    let html = render_html(dir)?;
    let html_path = dir.join(REPORT_HTML);
    // Written aside and renamed, so that a browser or reader never sees half a report.
    let partial = dir.join(format!(".{REPORT_HTML}.partial"));
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ReportError::Io { path, source }
    };
    fs::write(&partial, html).map_err(io(&partial))?;
    fs::rename(&partial, &html_path).map_err(io(&html_path))?;
    tracing::info!(path = %html_path.display(), "report written");

    let pdf = if !options.pdf {
        PdfOutcome::Disabled
    } else {
        match options.browser.clone().or_else(Chromium::find) {
            None => {
                tracing::info!(
                    "no Chromium ({} or chromium on PATH): {REPORT_PDF} not written",
                    chromium::DEBIAN_CHROMIUM
                );
                PdfOutcome::NoBrowser
            }
            Some(browser) => {
                let pdf_path = dir.join(REPORT_PDF);
                match browser.print_to_pdf(&html_path, &pdf_path, options.browser_timeout) {
                    Ok(_) => {
                        tracing::info!(path = %pdf_path.display(), "report printed");
                        PdfOutcome::Written(pdf_path)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "{REPORT_PDF} not written");
                        PdfOutcome::Failed(e)
                    }
                }
            }
        }
    };
    Ok(ReportFiles {
        html: html_path,
        pdf,
    })
}

/// report.html's text for the results in `dir`, without writing anything.
pub fn render_html(dir: &Path) -> Result<String, ReportError> {
    let inputs = inputs::Inputs::load(dir)?;
    Ok(page::render(&inputs))
}
