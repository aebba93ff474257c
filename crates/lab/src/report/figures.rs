//! Which charts the report shows, built from the inputs: shares and acceptance over time,
//! bandwidth over time, role CPU and memory over time, any other series the directory holds, and
//! then the distributions (a CDF per configuration, from the raw samples, else from the
//! percentiles results.json stores; see `cdf`).

use super::cdf::{self, Source, CLIP_QUANTILE};
use super::chart::{self, Axes, Line, Ticks, XScale};
use super::html::{escape, id, push};
use super::inputs::Inputs;
use super::palette::{Palette, Rgb, SHARED};
use super::results_json::number_at;
use super::samples::MAX_CDF_POINTS;
use super::series::{split_role, TimeSeries, MAX_POINTS};
use super::summary::DISTRIBUTIONS;
use super::units::Unit;

/// A chart, or why there is none.
#[derive(Debug, Clone)]
pub(crate) enum Body {
    Svg(String),
    Missing(String),
}

#[derive(Debug, Clone)]
pub(crate) struct Figure {
    pub key: String,
    pub title: String,
    pub caption: Option<String>,
    pub legend: Vec<(String, Rgb)>,
    pub body: Body,
}

#[derive(Debug, Clone)]
pub(crate) struct Section {
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
/// The percentiles results.json stores for a distribution, with the fraction each stands for.
const STORED_PERCENTILES: [(&str, f64); 4] =
    [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)];
/// The distributions the report is read for come first; the rest follow in the table's order.
const LEADING_DISTRIBUTIONS: [&str; 2] = ["time_to_job_ms", "share_latency_ms"];

pub(crate) fn sections(inputs: &Inputs, palette: &Palette) -> Vec<Section> {
    // Every series is drawn over the run's time.
    let over_time = |name: &str, title: &str, y_desc: &str, y_ticks: Ticks, y_from_zero: bool| {
        let axes = Axes {
            x_desc: "time (s)",
            y_desc,
            y_ticks,
            y_from_zero,
        };
        series_figure(inputs, palette, name, title, axes)
    };
    let mut shares = Vec::new();
    for (name, title, unit) in SHARE_SERIES {
        // The hash rate is extra: shown when recorded, not missed when not.
        if name == "hashrate_hps" && inputs.series(name).is_none() {
            continue;
        }
        shares.push(over_time(name, title, unit, Ticks::Plain, true));
    }
    let acceptance = vec![over_time(
        ACCEPTANCE_SERIES,
        "Share acceptance",
        "accepted / submitted (%)",
        Ticks::Plain,
        false,
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
    // A stable sort: the leading two in their order, then the rest as they were.
    metrics.sort_by_key(|(m, _)| {
        LEADING_DISTRIBUTIONS
            .iter()
            .position(|l| l == m)
            .unwrap_or(LEADING_DISTRIBUTIONS.len())
    });
    for (metric, title) in &metrics {
        distributions.push(distribution_figure(inputs, palette, metric, title));
    }

    let bandwidth = BANDWIDTH_SERIES
        .iter()
        .map(|(name, title)| over_time(name, title, "application bytes", Ticks::BytesPerSec, true))
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
            other.push(over_time(name, name, name, Ticks::Plain, true));
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
        // After everything over time: how each configuration's delays are spread over the run.
        Section {
            id: "distributions",
            title: "Distributions",
            figures: distributions,
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
    drawn(name, title, caption, legend, chart::lines(&axes, &lines))
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
                chart::lines(&axes, &lines),
            )
        })
        .collect()
}

/// One configuration's curve per line: from its raw samples in `dist_<metric>.csv`, else from
/// the percentiles results.json stores for it (drawn dashed, dots on the stored points).
fn distribution_figure(inputs: &Inputs, palette: &Palette, metric: &str, title: &str) -> Figure {
    let key = format!("dist-{metric}");
    let samples = inputs.samples(metric);
    let mut legend = Vec::new();
    let mut sources = Vec::new();
    let mut from_percentiles: Vec<&str> = Vec::new();
    let mut thinned = false;
    for config in &inputs.configs {
        let colour = palette.colour(config);
        if let Some(values) = samples
            .and_then(|s| s.get(config))
            .filter(|v| !v.is_empty())
        {
            legend.push((
                format!(
                    "{config} ({} samples)",
                    Unit::Count.format(values.len() as f64)
                ),
                colour,
            ));
            thinned |= values.len() > MAX_CDF_POINTS;
            sources.push((colour, Source::Samples(values)));
            continue;
        }
        let Some(figures) = inputs
            .results
            .as_ref()
            .and_then(|r| r.configs.iter().find(|(c, _)| c == config).map(|(_, f)| f))
        else {
            continue;
        };
        let stored: Vec<(f64, f64)> = STORED_PERCENTILES
            .iter()
            .filter_map(|(p, q)| number_at(figures, &[metric, p]).map(|v| (*q, v)))
            .collect();
        if stored.is_empty() {
            continue;
        }
        let label = match number_at(figures, &[metric, "n"]) {
            Some(n) => format!("{config} (percentiles of {})", Unit::Count.format(n)),
            None => format!("{config} (percentiles)"),
        };
        legend.push((label, colour));
        from_percentiles.push(config);
        sources.push((colour, Source::Percentiles(stored)));
    }
    if sources.is_empty() {
        return missing(
            &key,
            title,
            format!("no dist_{metric}.csv and no percentiles in results.json"),
        );
    }
    let plot = cdf::plot(&sources);

    let mut caption = String::from("Share of each configuration's values at or below each time.");
    if thinned {
        caption.push_str(&format!(
            " Curves of more than {MAX_CDF_POINTS} samples are drawn through {MAX_CDF_POINTS} of \
             them, the median, 95th and 99th percentiles among them."
        ));
    }
    if !from_percentiles.is_empty() {
        let (whose, why) = if from_percentiles.len() == sources.len() {
            (
                "Every curve is".to_owned(),
                format!("this directory has no raw samples in dist_{metric}.csv"),
            )
        } else {
            (
                format!("The dashed curves ({}) are", from_percentiles.join(", ")),
                format!("dist_{metric}.csv has no samples of theirs"),
            )
        };
        caption.push_str(&format!(
            " {whose} drawn from the percentiles results.json stores (p50, p95, p99 and the \
             maximum: the dots) joined by straight dashes: {why}. Below the median nothing is \
             recorded."
        ));
    }
    if matches!(plot.scale, XScale::Log { .. }) {
        caption.push_str(
            " The time axis is logarithmic: the configurations' times differ by orders of \
             magnitude.",
        );
    }
    if let Some(max) = plot.cut_max {
        caption.push_str(&format!(
            " The axis ends at {} ms, past every configuration's {:.1}th percentile; the largest \
             value ({} ms) is in the table.",
            Unit::Millis.format(plot.scale.end()),
            CLIP_QUANTILE * 100.0,
            Unit::Millis.format(max)
        ));
    }
    let x_desc = match plot.scale {
        XScale::Linear { .. } => "ms",
        XScale::Log { .. } => "ms (log scale)",
    };
    drawn(
        &key,
        title,
        Some(caption),
        legend,
        chart::cdf(x_desc, &plot.lines, plot.scale),
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

pub(crate) fn render(sections: &[Section], out: &mut String) {
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
