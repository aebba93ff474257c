//! Which charts the report shows, built from the inputs: shares and acceptance over time,
//! distributions (CDFs from raw samples, else percentile bars from results.json), bandwidth over
//! time, role CPU and memory over time, and any other series the directory holds.

use super::chart::{self, Axes, Line, Ticks};
use super::html::{escape, id, push};
use super::inputs::Inputs;
use super::palette::{Palette, Rgb, SHARED};
use super::results_json::number_at;
use super::samples::{cdf, quantile};
use super::series::{split_role, TimeSeries, MAX_POINTS};
use super::summary::DISTRIBUTIONS;
use super::units::Unit;

/// A chart, or why there is none.
#[derive(Debug, Clone)]
pub enum Body {
    Svg(String),
    Missing(String),
}

#[derive(Debug, Clone)]
pub struct Figure {
    pub key: String,
    pub title: String,
    pub caption: Option<String>,
    pub legend: Vec<(String, Rgb)>,
    pub body: Body,
}

#[derive(Debug, Clone)]
pub struct Section {
    pub id: &'static str,
    pub title: &'static str,
    pub figures: Vec<Figure>,
}

const SHARE_SERIES: [(&str, &str, &str); 4] = [
    ("shares_accepted_per_s", "Accepted shares", "shares/s"),
    ("shares_stale_per_s", "Stale shares", "shares/s"),
    ("shares_rejected_per_s", "Rejected shares", "shares/s"),
    ("hashrate_hps", "Hash rate", "H/s"),
];

const BANDWIDTH_SERIES: [(&str, &str); 4] = [
    ("bandwidth_farm_tx_Bps", "Farm site, sent"),
    ("bandwidth_farm_rx_Bps", "Farm site, received"),
    ("bandwidth_pool_tx_Bps", "Pool site, sent"),
    ("bandwidth_pool_rx_Bps", "Pool site, received"),
];

const ACCEPTANCE_SERIES: &str = "acceptance_pct";
const ROLE_CPU_SERIES: &str = "role_cpu_pct";
const ROLE_RSS_SERIES: &str = "role_rss_bytes";
const PERCENTILES: [&str; 4] = ["p50", "p95", "p99", "max"];
/// CDFs end at the largest of the configurations' 99.5th percentiles: a single slow outlier
/// would otherwise squeeze every curve against the left edge (the table keeps the maximum).
const CDF_CLIP_QUANTILE: f64 = 0.995;

pub fn sections(inputs: &Inputs, palette: &Palette) -> Vec<Section> {
    let time = "time (s)";
    let mut shares = Vec::new();
    for (name, title, unit) in SHARE_SERIES {
        // The hash rate is extra: shown when recorded, not missed when not.
        if name == "hashrate_hps" && inputs.series(name).is_none() {
            continue;
        }
        shares.push(series_figure(
            inputs,
            palette,
            name,
            title,
            Axes {
                x_desc: time,
                y_desc: unit,
                y_ticks: Ticks::Plain,
                y_from_zero: true,
            },
        ));
    }
    let acceptance = vec![series_figure(
        inputs,
        palette,
        ACCEPTANCE_SERIES,
        "Share acceptance",
        Axes {
            x_desc: time,
            y_desc: "accepted / submitted (%)",
            y_ticks: Ticks::Plain,
            y_from_zero: false,
        },
    )];

    let mut distributions = Vec::new();
    // A distribution no file mentions is one the run predates: no empty chart for it.
    let mentioned = |m: &str| {
        inputs.samples.iter().any(|(k, _)| k == m)
            || inputs
                .results
                .as_ref()
                .is_some_and(|r| r.configs.iter().any(|(_, c)| c.get(m).is_some()))
    };
    let mut metrics: Vec<(String, String)> = DISTRIBUTIONS
        .iter()
        .filter(|(m, _)| mentioned(m))
        .map(|(m, t)| ((*m).to_owned(), (*t).to_owned()))
        .collect();
    for (m, _) in &inputs.samples {
        if !metrics.iter().any(|(k, _)| k == m) {
            metrics.push((m.clone(), m.clone()));
        }
    }
    for (metric, title) in &metrics {
        distributions.push(distribution_figure(inputs, palette, metric, title));
    }

    let bandwidth = BANDWIDTH_SERIES
        .iter()
        .map(|(name, title)| {
            series_figure(
                inputs,
                palette,
                name,
                title,
                Axes {
                    x_desc: time,
                    y_desc: "application bytes",
                    y_ticks: Ticks::BytesPerSec,
                    y_from_zero: true,
                },
            )
        })
        .collect();

    let mut roles = role_figures(
        inputs,
        palette,
        ROLE_CPU_SERIES,
        "CPU",
        "CPU (100 = one core)",
        Ticks::Plain,
    );
    roles.extend(role_figures(
        inputs,
        palette,
        ROLE_RSS_SERIES,
        "Memory (RSS)",
        "resident memory",
        Ticks::Bytes,
    ));

    let known = |n: &str| {
        SHARE_SERIES.iter().any(|(s, _, _)| *s == n)
            || BANDWIDTH_SERIES.iter().any(|(s, _)| *s == n)
            || n == ACCEPTANCE_SERIES
            || n == ROLE_CPU_SERIES
            || n == ROLE_RSS_SERIES
    };
    let mut other = Vec::new();
    for (name, _) in &inputs.series {
        if known(name) {
            continue;
        }
        if Inputs::is_role_series(name) {
            other.extend(role_figures(
                inputs,
                palette,
                name,
                name,
                name,
                Ticks::Plain,
            ));
        } else {
            other.push(series_figure(
                inputs,
                palette,
                name,
                name,
                Axes {
                    x_desc: time,
                    y_desc: name,
                    y_ticks: Ticks::Plain,
                    y_from_zero: true,
                },
            ));
        }
    }

    let mut out = vec![
        Section {
            id: "shares",
            title: "Shares over time",
            figures: shares,
        },
        Section {
            id: "acceptance",
            title: "Acceptance over time",
            figures: acceptance,
        },
        Section {
            id: "distributions",
            title: "Time to job and other latencies",
            figures: distributions,
        },
        Section {
            id: "bandwidth",
            title: "Bandwidth over time",
            figures: bandwidth,
        },
        Section {
            id: "roles",
            title: "Role CPU and memory over time",
            figures: roles,
        },
        Section {
            id: "other-series",
            title: "Other series",
            figures: other,
        },
    ];
    out.retain(|s| !s.figures.is_empty());
    out
}

fn missing(key: &str, title: &str, why: String) -> Figure {
    Figure {
        key: key.to_owned(),
        title: title.to_owned(),
        caption: None,
        legend: Vec::new(),
        body: Body::Missing(why),
    }
}

fn drawn(
    key: &str,
    title: &str,
    caption: Option<String>,
    legend: Vec<(String, Rgb)>,
    svg: Result<String, chart::ChartError>,
) -> Figure {
    let body = match svg {
        Ok(svg) => Body::Svg(svg),
        Err(e) => {
            tracing::warn!(chart = key, error = %e, "chart left out");
            Body::Missing(e.to_string())
        }
    };
    Figure {
        key: key.to_owned(),
        title: title.to_owned(),
        caption,
        legend,
        body,
    }
}

fn series_figure(
    inputs: &Inputs,
    palette: &Palette,
    name: &str,
    title: &str,
    axes: Axes<'_>,
) -> Figure {
    let Some(series) = inputs.series(name) else {
        return missing(
            name,
            title,
            format!("no {name}.csv in this results directory"),
        );
    };
    let mut legend = Vec::new();
    let mut lines = Vec::new();
    for column in ordered(&series.columns, &inputs.configs, |c| &c.name) {
        let colour = palette.colour(&column.name);
        legend.push((column.name.clone(), colour));
        lines.push(Line {
            colour,
            segments: series.segments(column),
        });
    }
    let caption = thinned(series);
    drawn(
        name,
        title,
        caption,
        legend,
        chart::lines(&axes, &lines, None),
    )
}

/// One figure per role (columns `<config>.<role>`), a line per configuration.
fn role_figures(
    inputs: &Inputs,
    palette: &Palette,
    name: &str,
    what: &str,
    y_desc: &str,
    y_ticks: Ticks,
) -> Vec<Figure> {
    let Some(series) = inputs.series(name) else {
        return vec![missing(
            name,
            what,
            format!("no {name}.csv in this results directory"),
        )];
    };
    let mut roles: Vec<&str> = Vec::new();
    for c in &series.columns {
        let (_, role) = split_role(&c.name, &inputs.configs);
        if !roles.contains(&role) {
            roles.push(role);
        }
    }
    roles
        .into_iter()
        .map(|role| {
            let mut legend = Vec::new();
            let mut lines = Vec::new();
            let columns = series
                .columns
                .iter()
                .filter(|c| split_role(&c.name, &inputs.configs).1 == role);
            for column in columns {
                let (config, _) = split_role(&column.name, &inputs.configs);
                let (label, colour) = match config {
                    Some(c) => (c.to_owned(), palette.colour(c)),
                    None => ("shared by all".to_owned(), SHARED),
                };
                legend.push((label, colour));
                lines.push(Line {
                    colour,
                    segments: series.segments(column),
                });
            }
            let axes = Axes {
                x_desc: "time (s)",
                y_desc,
                y_ticks,
                y_from_zero: true,
            };
            drawn(
                &format!("{name}-{role}"),
                &format!("{what}: {role}"),
                thinned(series),
                legend,
                chart::lines(&axes, &lines, None),
            )
        })
        .collect()
}

fn distribution_figure(inputs: &Inputs, palette: &Palette, metric: &str, title: &str) -> Figure {
    let key = format!("dist-{metric}");
    if let Some(samples) = inputs.samples(metric).filter(|s| !s.is_empty()) {
        let mut legend = Vec::new();
        let mut lines = Vec::new();
        let mut clip = 0.0f64;
        let mut largest = 0.0f64;
        for (config, values) in ordered(&samples.per_config, &inputs.configs, |(c, _)| c) {
            if values.is_empty() {
                continue;
            }
            let colour = palette.colour(config);
            legend.push((format!("{config} ({} samples)", values.len()), colour));
            clip = clip.max(quantile(values, CDF_CLIP_QUANTILE).unwrap_or(0.0));
            largest = largest.max(*values.last().unwrap_or(&0.0));
            lines.push(Line {
                colour,
                segments: vec![cdf(values)],
            });
        }
        let clipped = largest > clip && clip > 0.0;
        let caption = Some(if clipped {
            format!(
                "Share of samples at or below each time. The axis ends at {} ms, the largest \
                 99.5th percentile; the maximum ({} ms) is in the table.",
                Unit::Millis.format(clip),
                Unit::Millis.format(largest)
            )
        } else {
            "Share of samples at or below each time.".to_owned()
        });
        let axes = Axes {
            x_desc: "ms",
            y_desc: "samples at or below",
            y_ticks: Ticks::Fraction,
            y_from_zero: true,
        };
        let svg = chart::lines(&axes, &lines, clipped.then_some(clip));
        return drawn(&key, title, caption, legend, svg);
    }
    // No raw samples: the percentiles results.json recorded.
    let mut legend = Vec::new();
    let mut bars = Vec::new();
    if let Some(results) = &inputs.results {
        for (config, figures) in &results.configs {
            let values: Vec<Option<f64>> = PERCENTILES
                .iter()
                .map(|p| number_at(figures, &[metric, p]))
                .collect();
            if values.iter().any(Option::is_some) {
                let colour = palette.colour(config);
                legend.push((config.clone(), colour));
                bars.push((colour, values));
            }
        }
    }
    if bars.is_empty() {
        return missing(
            &key,
            title,
            format!("no dist_{metric}.csv and no percentiles in results.json"),
        );
    }
    let axes = Axes {
        x_desc: "percentile",
        y_desc: "ms",
        y_ticks: Ticks::Plain,
        y_from_zero: true,
    };
    drawn(
        &key,
        title,
        Some(format!(
            "Percentiles from results.json (no dist_{metric}.csv with raw samples)."
        )),
        legend,
        chart::bars(&axes, &PERCENTILES, &bars),
    )
}

/// Items in configuration order, then any the order does not name.
fn ordered<'a, T>(items: &'a [T], configs: &[String], name: impl Fn(&T) -> &String) -> Vec<&'a T> {
    let mut out: Vec<&T> = Vec::with_capacity(items.len());
    for c in configs {
        out.extend(items.iter().filter(|i| name(i) == c));
    }
    out.extend(items.iter().filter(|i| !configs.contains(name(i))));
    out
}

fn thinned(series: &TimeSeries) -> Option<String> {
    let rows = series.t_s.len();
    (rows > MAX_POINTS).then(|| {
        format!(
            "{rows} rows, drawn as means over {} s buckets.",
            rows.div_ceil(MAX_POINTS)
        )
    })
}

pub fn render(sections: &[Section], out: &mut String) {
    let mut n = 0;
    for section in sections {
        push(
            out,
            format_args!(
                "<section id=\"{}\" class=\"charts\"><h2>{}</h2>\n<div class=\"figures\">\n",
                section.id, section.title
            ),
        );
        for f in &section.figures {
            n += 1;
            let fig_id = format!("{}-{n}", id("fig", &f.key));
            push(
                out,
                format_args!(
                    "<figure id=\"{fig_id}\" data-figure=\"{}\"><figcaption><span class=\"title\">{}</span>",
                    escape(&f.key),
                    escape(&f.title)
                ),
            );
            if !f.legend.is_empty() {
                out.push_str("<span class=\"legend\">");
                for (label, colour) in &f.legend {
                    push(
                        out,
                        format_args!(
                            "<span class=\"key\"><span class=\"swatch\" style=\"background:{colour}\"></span>{}</span>",
                            escape(label)
                        ),
                    );
                }
                out.push_str("</span>");
            }
            out.push_str("</figcaption>\n");
            match &f.body {
                Body::Svg(svg) => {
                    let attrs = format!(
                        "<svg class=\"chart\" data-chart=\"{}\" role=\"img\" aria-label=\"{}\" ",
                        escape(&f.key),
                        escape(&f.title)
                    );
                    out.push_str(&svg.replacen("<svg ", &attrs, 1));
                }
                Body::Missing(why) => push(
                    out,
                    format_args!("<p class=\"no-chart\">No chart: {}.</p>\n", escape(why)),
                ),
            }
            if let Some(c) = &f.caption {
                push(
                    out,
                    format_args!("<p class=\"caption\">{}</p>\n", escape(c)),
                );
            }
            out.push_str("</figure>\n");
        }
        out.push_str("</div></section>\n");
    }
}
