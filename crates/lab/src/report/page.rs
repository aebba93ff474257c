//! report.html as one self-contained document: inline CSS, inline SVG charts, one small inline
//! script, and a content security policy that forbids loading anything from anywhere.

use super::context;
use super::explain;
use super::figures::{self, Section};
use super::findings;
use super::html::{escape, push};
use super::inputs::Inputs;
use super::palette::Palette;
use super::results_json::at;
use super::summary::{self, Summary};
use super::sweep_page;

const CSS: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");
/// Only inline styles and scripts and `data:` images: the page works offline and cannot call out.
const CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";

pub(crate) fn render(inputs: &Inputs) -> String {
    let results = inputs.results.as_ref();
    // A sweep's results.json holds its points, not configurations of its own.
    let sweep = results.filter(|r| r.root.get("sweep").is_some());
    let palette = match sweep {
        Some(r) => Palette::new(&crate::sweep::configs(&r.root)),
        None => Palette::new(&inputs.configs),
    };
    let scenario = results
        .and_then(|r| r.get("context"))
        .and_then(|c| at(c, &["scenario"]))
        .map(|s| s.as_str().map_or_else(|| s.to_string(), str::to_owned));
    let sections = figures::sections(inputs, &palette);

    let mut out = String::with_capacity(256 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    push(
        &mut out,
        format_args!("<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"),
    );
    push(
        &mut out,
        format_args!(
            "<title>stratumlab report{}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n",
            scenario
                .as_deref()
                .map(|s| format!(": {}", escape(s)))
                .unwrap_or_default()
        ),
    );
    if let Some(r) = sweep {
        sweep_page::render(r, &palette, &mut out);
        footer(&mut out);
        return out;
    }
    header(&mut out, scenario.as_deref(), inputs, &palette, &sections);
    // What the run found first; then where the time goes, the charts, the full table; the
    // run's context and host last.
    findings::render(results, &palette, &mut out);
    if let Some(r) = results {
        explain::render(r, &mut out);
    }
    figures::render(&sections, &mut out);

    out.push_str("<section id=\"summary\"><h2>Every figure</h2>\n");
    match results {
        Some(r) => summary::render(&Summary::from_results(r), &palette, &mut out),
        None => out.push_str("<p class=\"note\">No results.json: no figures to tabulate.</p>\n"),
    }
    out.push_str("</section>\n");
    if !inputs.notes.is_empty() {
        out.push_str("<section id=\"inputs\"><h2>Inputs left out</h2><ul>\n");
        for n in &inputs.notes {
            push(&mut out, format_args!("<li>{}</li>\n", escape(n)));
        }
        out.push_str("</ul></section>\n");
    }
    context::render(results, &mut out);
    footer(&mut out);
    out
}

fn footer(out: &mut String) {
    push(
        out,
        format_args!(
            "<footer>Written by stratumlab {} from the results directory's results.json and CSV \
             files; figures are defined in docs/metrics.md.</footer>\n",
            env!("CARGO_PKG_VERSION")
        ),
    );
    push(
        out,
        format_args!("<script>\n{SCRIPT}</script>\n</body>\n</html>\n"),
    );
}

fn header(
    out: &mut String,
    scenario: Option<&str>,
    inputs: &Inputs,
    palette: &Palette,
    sections: &[Section],
) {
    out.push_str("<header><h1>stratumlab report</h1><p class=\"sub\">");
    if let Some(s) = scenario {
        push(out, format_args!("Scenario <b>{}</b> · ", escape(s)));
    }
    push(
        out,
        format_args!("{} configurations: ", inputs.configs.len()),
    );
    swatches(out, &inputs.configs, palette);
    out.push_str("</p>\n<nav><a href=\"#findings\">findings</a><a href=\"#explanations\">where time goes</a>");
    for s in sections {
        push(
            out,
            format_args!("<a href=\"#{}\">{}</a>", s.id, s.title.to_lowercase()),
        );
    }
    out.push_str(
        "<a href=\"#summary\">every figure</a><a href=\"#context\">context</a></nav></header>\n",
    );
}

/// The configurations, comma-separated, each after its colour's swatch.
pub(super) fn swatches(out: &mut String, configs: &[String], palette: &Palette) {
    for (i, c) in configs.iter().enumerate() {
        push(
            out,
            format_args!(
                "{}<span class=\"swatch\" style=\"background:{}\"></span>{}",
                if i > 0 { ", " } else { "" },
                palette.colour(c),
                escape(c)
            ),
        );
    }
}
