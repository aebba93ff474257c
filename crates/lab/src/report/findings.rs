//! The report's first section: what the run found, one key figure at a time, each configuration
//! against the baseline (the first configuration), in a sentence with its number and interval
//! and beside a small bar chart of every configuration (docs/metrics.md, "Findings").
//!
//! A difference whose 95% interval contains zero (see [`super::key_figures`]) is said as "no
//! difference measured". A figure the results give without an interval (a rate over the whole
//! run, a mean CPU load) is compared as measured, and the sentence says so.

use super::html::{escape, push};
use super::key_figures::{compare, read, show, show_delta, Key, Source, Value95, KEYS};
use super::palette::Palette;
use super::results_json::Results;
use super::units::{Unit, MISSING};

/// One key figure's finding.
#[derive(Debug, Clone)]
struct Finding {
    key: Key,
    /// Per configuration, in the report's order; `None` where the results lack it.
    values: Vec<(String, Option<Value95>)>,
    /// The sentences: the baseline's, then one per other configuration.
    sentences: Vec<String>,
}

fn finding(key: Key, results: &Results) -> Option<Finding> {
    let values: Vec<(String, Option<Value95>)> = results
        .configs
        .iter()
        .map(|(name, v)| (name.clone(), read(&key, v)))
        .collect();
    if values.iter().all(|(_, v)| v.is_none()) {
        return None;
    }
    let (base_name, base) = (&values[0].0, values[0].1);
    let mut sentences = Vec::new();
    sentences.push(match base {
        Some(b) => format!(
            "{}: {}{}.",
            base_name,
            show(key.unit, b.value),
            interval(key.unit, b.ci)
        ),
        None => format!("{base_name}: not measured in this run."),
    });
    for (name, v) in &values[1..] {
        sentences.push(match (base, v) {
            (_, None) => format!("{name}: not measured in this run."),
            (None, Some(v)) => format!(
                "{name}: {}{} (nothing to compare with).",
                show(key.unit, v.value),
                interval(key.unit, v.ci)
            ),
            (Some(b), Some(v)) => against(&key, base_name, b, name, *v),
        });
    }
    Some(Finding {
        key,
        values,
        sentences,
    })
}

fn interval(unit: Unit, ci: Option<(f64, f64)>) -> String {
    match ci {
        Some((lo, hi)) => format!(" (95% CI {} to {})", show(unit, lo), show(unit, hi)),
        None => String::new(),
    }
}

/// `name`'s value against the baseline's, in words.
fn against(key: &Key, base_name: &str, b: Value95, name: &str, v: Value95) -> String {
    let c = compare(b, v);
    let unit = key.unit;
    let value = show(unit, v.value);
    if c.inconclusive() {
        let (lo, hi) = c.ci.unwrap_or_default();
        return format!(
            "{name}: {value}, no difference measured from {base_name} ({}; the interval of the \
             difference, {} to {}, includes zero).",
            show_delta(unit, c.diff),
            show_delta(unit, lo),
            show_delta(unit, hi)
        );
    }
    if c.diff == 0.0 {
        return format!("{name}: {value}, the same as {base_name}.");
    }
    let verdict = if key.better.judge(c.diff) == Some(true) {
        "better"
    } else {
        "worse"
    };
    let direction = match (c.diff < 0.0, unit) {
        (true, Unit::Millis | Unit::Seconds) => "less",
        (false, Unit::Millis | Unit::Seconds) => "more",
        (true, _) => "lower",
        (false, _) => "higher",
    };
    let relative = if key.relative && b.value != 0.0 {
        format!(
            ", {}%",
            Unit::Plain.prose_delta(c.diff / b.value.abs() * 100.0)
        )
    } else {
        String::new()
    };
    let ci = match c.ci {
        Some((lo, hi)) => format!(
            "; 95% CI of the difference {} to {}",
            show_delta(unit, lo),
            show_delta(unit, hi)
        ),
        None => match key.source {
            Source::Mean(_) => "; too few samples for an interval".to_owned(),
            _ => "; a whole-run figure, no interval".to_owned(),
        },
    };
    format!(
        "{name}: {value}, {} {direction} than {base_name} ({verdict}{relative}{ci}).",
        show(unit, c.diff.abs())
    )
}

/// The findings section, with the run's validity inside it: `<section id="findings">`.
pub(crate) fn render(results: Option<&Results>, palette: &Palette, out: &mut String) {
    out.push_str("<section id=\"findings\"><h2>Findings</h2>\n");
    super::validity::render(results, out);
    let Some(results) = results else {
        out.push_str("<p class=\"note\">No results.json: no findings.</p>\n</section>\n");
        return;
    };
    let findings: Vec<Finding> = KEYS.iter().filter_map(|k| finding(*k, results)).collect();
    match results.configs.first() {
        None => out.push_str("<p class=\"note\">results.json names no configurations.</p>\n"),
        Some((base, _)) => push(
            out,
            format_args!(
                "<p class=\"lead\">Each configuration against <b>{}</b>, the baseline. Bars are \
                 the figures, whiskers their 95% intervals; \"no difference measured\" where the \
                 interval of a difference includes zero.</p>\n",
                escape(base)
            ),
        ),
    }
    out.push_str("<div class=\"findings\">\n");
    for f in &findings {
        push(
            out,
            format_args!(
                "<div class=\"finding\" data-finding=\"{}\"><div class=\"words\"><h3>{}</h3>\
                 <p class=\"what\">{}</p><ul>",
                f.key.id, f.key.title, f.key.what
            ),
        );
        for s in &f.sentences {
            push(out, format_args!("<li>{}</li>", escape(s)));
        }
        out.push_str("</ul></div>\n");
        out.push_str(&bar_chart(f, palette));
        out.push_str("</div>\n");
    }
    out.push_str("</div></section>\n");
}

/// Width, and height per bar, of a finding's chart in CSS pixels.
const CHART_W: f64 = 340.0;
const ROW_H: f64 = 20.0;
const LABEL_W: f64 = 92.0;
const VALUE_W: f64 = 84.0;

/// A horizontal bar per configuration, from zero, with its interval as a whisker; the axis
/// spans zero and every value and interval end, so negative values (a template worth less than
/// the network's) draw leftwards from a zero line.
fn bar_chart(f: &Finding, palette: &Palette) -> String {
    let ends = f
        .values
        .iter()
        .filter_map(|(_, v)| *v)
        .flat_map(|v| [Some(v.value), v.ci.map(|c| c.0), v.ci.map(|c| c.1)])
        .flatten()
        .filter(|x| x.is_finite());
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    for x in ends {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if hi - lo <= 0.0 {
        hi = 1.0;
    }
    let plot = CHART_W - LABEL_W - VALUE_W;
    let x = |v: f64| LABEL_W + (v - lo) / (hi - lo) * plot;
    let height = ROW_H * f.values.len() as f64 + 8.0;
    let mut svg = String::new();
    push(
        &mut svg,
        format_args!(
            "<svg class=\"chart minibars\" data-chart=\"finding-{}\" role=\"img\" aria-label=\"{}\" \
             xmlns=\"http://www.w3.org/2000/svg\" width=\"{CHART_W}\" height=\"{height}\" \
             viewBox=\"0 0 {CHART_W} {height}\">",
            f.key.id, f.key.title
        ),
    );
    for (i, (name, v)) in f.values.iter().enumerate() {
        let top = 4.0 + ROW_H * i as f64;
        let mid = top + ROW_H / 2.0;
        push(
            &mut svg,
            format_args!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"12\" \
                 fill=\"#555555\">{}</text>",
                LABEL_W - 6.0,
                mid + 4.0,
                escape(name)
            ),
        );
        let Some(v) = v else {
            push(
                &mut svg,
                format_args!(
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"#555555\">{MISSING}</text>",
                    x(0.0) + 4.0,
                    mid + 4.0
                ),
            );
            continue;
        };
        let (a, b) = (x(0.0_f64.min(v.value)), x(0.0_f64.max(v.value)));
        push(
            &mut svg,
            format_args!(
                "<rect x=\"{a:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
                top + 3.0,
                (b - a).max(1.0),
                ROW_H - 6.0,
                palette.colour(name)
            ),
        );
        if let Some((l, h)) = v.ci {
            push(
                &mut svg,
                format_args!(
                    "<path d=\"M{0:.1} {1:.1}V{2:.1}M{0:.1} {3:.1}H{4:.1}M{4:.1} {1:.1}V{2:.1}\" \
                     stroke=\"#1b1b1b\" stroke-width=\"1.2\" fill=\"none\"/>",
                    x(l),
                    mid - 5.0,
                    mid + 5.0,
                    mid,
                    x(h)
                ),
            );
        }
        push(
            &mut svg,
            format_args!(
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"#1b1b1b\">{}</text>",
                CHART_W - VALUE_W + 6.0,
                mid + 4.0,
                escape(&show(f.key.unit, v.value))
            ),
        );
    }
    // The zero line.
    push(
        &mut svg,
        format_args!(
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"2\" y2=\"{1:.1}\" stroke=\"#555555\"/>",
            x(0.0),
            height - 2.0
        ),
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(json: &str) -> Results {
        Results::parse(json).unwrap()
    }

    const RUN: &str = r#"{"valid": true, "invalid_reasons": [], "configs": {
        "sv1": {"time_to_job_ms": {"mean": 340.0, "ci95": [300.0, 380.0]},
                "time_to_job_prevhash_ms": {"mean": 93.0, "ci95": [84.0, 102.0]},
                "template_value_delta_sats": -3228.0,
                "bandwidth": {"farm": {"tx_Bps": 2626.0, "rx_Bps": 100299.0}},
                "roles": {"sv1.pool": {"kind": "pool", "site": "pool", "cpu_pct_mean": 0.7},
                          "sv1.fleet0": {"kind": "fleet", "site": "farm", "cpu_pct_mean": 12.0}}},
        "A":   {"time_to_job_ms": {"mean": 4.5, "ci95": [3.5, 5.5]},
                "time_to_job_prevhash_ms": {"mean": 94.0, "ci95": [85.0, 103.0]},
                "template_value_delta_sats": 25.0,
                "bandwidth": {"farm": {"tx_Bps": 1680.0, "rx_Bps": 3167.0}},
                "roles": {"A.pool": {"kind": "pool", "site": "pool", "cpu_pct_mean": 0.3},
                          "A.jds": {"kind": "pool", "site": "pool", "cpu_pct_mean": 0.2},
                          "A.jdc0": {"kind": "proxy", "site": "farm", "cpu_pct_mean": 0.1}}}}}"#;

    fn sentences(id: &str) -> Vec<String> {
        let r = results(RUN);
        let key = KEYS.iter().find(|k| k.id == id).unwrap();
        finding(*key, &r).unwrap().sentences
    }

    #[test]
    fn a_measured_difference_says_how_much_and_its_interval() {
        let s = sentences("time_to_job_ms");
        assert_eq!(s[0], "sv1: 340 ms (95% CI 300 ms to 380 ms).");
        // 4.5 - 340 = -335.5; half-widths 40 and 1 give sqrt(1601) = 40.01.
        assert!(
            s[1].starts_with("A: 4.5 ms, 336 ms less than sv1 (better, −99%"),
            "{}",
            s[1]
        );
        assert!(
            s[1].contains("95% CI of the difference −376 ms to −295 ms"),
            "{}",
            s[1]
        );
    }

    #[test]
    fn an_interval_that_holds_zero_is_no_difference_measured() {
        let s = sentences("time_to_job_prevhash_ms");
        assert!(s[1].contains("no difference measured from sv1"), "{}", s[1]);
        assert!(!s[1].contains("worse"), "{}", s[1]);
    }

    #[test]
    fn figures_without_intervals_say_so_and_signs_follow_what_is_better() {
        let s = sentences("template_value_delta_sats");
        assert!(s[1].contains("higher than sv1 (better"), "{}", s[1]);
        assert!(s[1].contains("a whole-run figure, no interval"), "{}", s[1]);
        // A figure that is itself a difference from the network's gets no relative change.
        assert!(!s[1].contains('%'), "{}", s[1]);
        let s = sentences("bandwidth_farm");
        assert!(s[1].contains("lower than sv1 (better"), "{}", s[1]);
    }

    #[test]
    fn the_error_an_operator_sees_is_each_pools_own_window() {
        let r = results(
            r#"{"valid": true, "invalid_reasons": [], "configs": {
            "D": {"estimation": {"hashrate_error_pct": {
                "1m": {"n": 90, "p50": 21.0}, "10m": {"n": 90, "p50": 12.0}}}},
            "D-ref": {"estimation": {"hashrate_error_pct": {"current": {"n": 90, "p50": 50.0}}}}}}"#,
        );
        let key = KEYS
            .iter()
            .find(|k| k.id == "hashrate_error_shown")
            .unwrap();
        let s = finding(*key, &r).unwrap().sentences;
        assert_eq!(s[0], "D: 21%.");
        assert!(
            s[1].starts_with("D-ref: 50%, 29% higher than D (worse"),
            "{}",
            s[1]
        );
        // The one-minute finding has nothing of the reference pool's.
        let key = KEYS.iter().find(|k| k.id == "hashrate_error_1m").unwrap();
        let s = finding(*key, &r).unwrap().sentences;
        assert_eq!(s[1], "D-ref: not measured in this run.");
    }

    #[test]
    fn role_sums_count_the_stack_and_not_the_lab() {
        let r = results(RUN);
        let cpu = |id: &str, config: usize| {
            let key = KEYS.iter().find(|k| k.id == id).unwrap();
            read(key, &r.configs[config].1).unwrap().value
        };
        // The fleet is the lab's, not the farm's.
        assert_eq!(cpu("farm_cpu", 0), 0.0);
        assert!((cpu("farm_cpu", 1) - 0.1).abs() < 1e-9);
        assert!((cpu("pool_cpu", 1) - 0.5).abs() < 1e-9);
        // A baseline of zero gives no relative change.
        let s = sentences("farm_cpu");
        assert_eq!(
            s[1],
            "A: 0.10 % core, 0.10 % core higher than sv1 (worse; a whole-run figure, no interval)."
        );
    }

    #[test]
    fn the_section_comes_with_validity_inside_and_a_chart_per_finding() {
        let r = results(RUN);
        let mut out = String::new();
        render(Some(&r), &Palette::new(&r.config_names()), &mut out);
        assert!(out.starts_with("<section id=\"findings\">"), "{out}");
        let validity = out.find("id=\"validity\"").unwrap();
        assert!(validity < out.find("</section>").unwrap());
        let findings = out.matches("class=\"finding\"").count();
        assert_eq!(
            findings,
            out.matches("<svg class=\"chart minibars\"").count()
        );
        // Stale work, block propagation, pool bandwidth and memory are not in these results.
        assert_eq!(findings, 6, "{out}");
        // Absent figures leave no finding, not an empty one.
        assert!(!out.contains("data-finding=\"block_propagation_ms\""));
    }
}
