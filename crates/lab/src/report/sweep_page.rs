//! report.html of a sweep (docs/metrics.md, "Sweeps"): the findings are curves, each key
//! figure against the swept parameter with a line per configuration and its 95% intervals as
//! whiskers, and a table of the values beside; then links to every point's own report, and the
//! run's context last.

use serde_json::Value;

use super::chart::{self, Axes, Line, Ticks};
use super::context;
use super::html::{escape, push};
use super::key_figures::{read, show, Key, KEYS};
use super::palette::Palette;
use super::results_json::Results;
use super::units::Unit;
use super::validity;
use crate::sweep;

/// The sweep's page body, from its results.json.
pub(crate) fn render(results: &Results, palette: &Palette, out: &mut String) {
    let root = &results.root;
    let Some(s) = root.get("sweep") else {
        return;
    };
    let parameter = s.get("parameter").and_then(Value::as_str).unwrap_or("?");
    let configs = sweep::configs(root);
    let points: Vec<&Value> = sweep::points(root).collect();
    let values: Vec<String> = points
        .iter()
        .map(|p| {
            p.get("value")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    push(
        out,
        format_args!(
            "<header><h1>stratumlab sweep: {}</h1><p class=\"sub\">{} = {} · configurations: ",
            escape(parameter),
            escape(parameter),
            escape(&values.join(", "))
        ),
    );
    super::page::swatches(out, &configs, palette);
    out.push_str(
        "</p>\n<nav><a href=\"#findings\">findings</a><a href=\"#points\">each point</a>\
         <a href=\"#context\">context</a></nav></header>\n",
    );

    out.push_str("<section id=\"findings\"><h2>Findings</h2>\n");
    validity::render(Some(results), out);
    push(
        out,
        format_args!(
            "<p class=\"lead\">Each key figure against {}, every configuration run at each value \
             on the same seed: a line per configuration, whiskers its 95% intervals.</p>\n\
             <div class=\"figures\">\n",
            escape(parameter)
        ),
    );
    for key in &KEYS {
        curve(key, parameter, &values, &points, &configs, palette, out);
    }
    out.push_str("</div></section>\n");

    out.push_str("<section id=\"points\"><h2>Each point</h2><ul>\n");
    for p in &points {
        let value = p.get("value").and_then(Value::as_str).unwrap_or("");
        let dir = p.get("dir").and_then(Value::as_str).unwrap_or("");
        push(
            out,
            format_args!(
                "<li>{} = {}: <a href=\"{}/report.html\">its report</a>{}</li>\n",
                escape(parameter),
                escape(value),
                escape(dir),
                if p.get("valid") == Some(&Value::Bool(true)) {
                    ""
                } else {
                    " (not valid: see its report)"
                }
            ),
        );
    }
    out.push_str("</ul></section>\n");
    context::render(Some(results), out);
}

fn ticks(unit: Unit) -> Ticks {
    match unit {
        Unit::Bytes => Ticks::Bytes,
        Unit::BytesPerSec => Ticks::BytesPerSec,
        _ => Ticks::Plain,
    }
}

/// One key figure's curve and its table; nothing when no point has it.
fn curve(
    key: &Key,
    parameter: &str,
    values: &[String],
    points: &[&Value],
    configs: &[String],
    palette: &Palette,
    out: &mut String,
) {
    let at = |p: &Value, c: &str| {
        p.get("configs")
            .and_then(|cs| cs.get(c))
            .and_then(|v| read(key, v))
    };
    if !points
        .iter()
        .any(|p| configs.iter().any(|c| at(p, c).is_some()))
    {
        return;
    }
    // On the parameter's axis where every value parses; otherwise at their positions.
    let axis: Vec<Option<f64>> = values.iter().map(|v| sweep::axis(parameter, v).0).collect();
    let unit_name = values
        .first()
        .map(|v| sweep::axis(parameter, v).1)
        .unwrap_or("");
    let numeric = axis.iter().all(Option::is_some);
    let x = |i: usize| {
        if numeric {
            axis[i].unwrap_or(0.0)
        } else {
            i as f64
        }
    };
    // Joined along the axis, whatever order the values were given in.
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|&i, &j| x(i).total_cmp(&x(j)));
    let lines: Vec<Line> = configs
        .iter()
        .map(|c| {
            let mut segments = Vec::new();
            let mut run = Vec::new();
            for &i in &order {
                match at(points[i], c) {
                    Some(v) => {
                        run.push((x(i), v.value));
                        if let Some((lo, hi)) = v.ci {
                            segments.push(vec![(x(i), lo), (x(i), hi)]);
                        }
                    }
                    None if !run.is_empty() => segments.push(std::mem::take(&mut run)),
                    None => {}
                }
            }
            if !run.is_empty() {
                segments.push(run);
            }
            Line {
                colour: palette.colour(c),
                segments,
            }
        })
        .collect();
    let x_desc = if numeric && !unit_name.is_empty() {
        format!("{parameter} ({unit_name})")
    } else if numeric {
        parameter.to_owned()
    } else {
        format!("{parameter} (point)")
    };
    let y_desc = match key.unit.label() {
        "" => key.title.to_owned(),
        label => format!("{} ({label})", key.title),
    };
    let axes = Axes {
        x_desc: &x_desc,
        y_desc: &y_desc,
        y_ticks: ticks(key.unit),
        y_from_zero: true,
    };
    push(
        out,
        format_args!(
            "<figure data-figure=\"sweep-{}\"><figcaption><span class=\"title\">{}</span>\
             <span class=\"legend\">",
            key.id, key.title
        ),
    );
    for c in configs {
        push(
            out,
            format_args!(
                "<span class=\"key\"><span class=\"swatch\" style=\"background:{}\"></span>{}</span>",
                palette.colour(c),
                escape(c)
            ),
        );
    }
    out.push_str("</span></figcaption>\n");
    match chart::lines(&axes, &lines) {
        Ok(svg) => {
            let attrs = format!(
                "<svg class=\"chart\" data-chart=\"sweep-{}\" role=\"img\" aria-label=\"{} against {}\" ",
                key.id,
                key.title,
                escape(parameter)
            );
            out.push_str(&svg.replacen("<svg ", &attrs, 1));
        }
        Err(e) => push(
            out,
            format_args!(
                "<p class=\"no-chart\">No chart: {}.</p>\n",
                escape(&e.to_string())
            ),
        ),
    }
    // The values, for reading off exactly.
    out.push_str("<table class=\"sweep\"><thead><tr><th></th>");
    for v in values {
        push(out, format_args!("<th>{}</th>", escape(v)));
    }
    out.push_str("</tr></thead><tbody>\n");
    for c in configs {
        push(out, format_args!("<tr><th>{}</th>", escape(c)));
        for p in points {
            match at(p, c) {
                Some(v) => push(
                    out,
                    format_args!(
                        "<td data-config=\"{}\" data-value=\"{}\">{}</td>",
                        escape(c),
                        v.value,
                        escape(&show(key.unit, v.value))
                    ),
                ),
                None => out.push_str("<td>—</td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></figure>\n");
}
