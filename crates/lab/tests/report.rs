//! report.html from a results directory: the summary table and its deltas, the charts, escaping,
//! and what happens when inputs are missing or broken.

use std::fs;
use std::path::{Path, PathBuf};

use lab::report::{render_html, write_report_with, PdfOutcome, ReportError, ReportOptions};
use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/two_configs")
}

fn fixture_json() -> Value {
    serde_json::from_str(&fs::read_to_string(fixture().join("results.json")).unwrap()).unwrap()
}

/// A copy of the fixture directory to change.
fn copy_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in fs::read_dir(fixture()).unwrap() {
        let p = entry.unwrap().path();
        fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    dir
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for k in path {
        cur = &cur[k];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number"))
}

/// The summary row's cell for `config` (`kind`: value, abs or pct), as (class, data-value).
fn cell(html: &str, metric: &str, config: &str, kind: &str) -> (String, Option<String>) {
    let start = html
        .find(&format!("<tr data-metric=\"{metric}\">"))
        .unwrap_or_else(|| panic!("no row {metric}"));
    let row = &html[start..start + html[start..].find("</tr>").unwrap()];
    let needle = match kind {
        "value" => format!("data-config=\"{config}\""),
        k => format!("data-config=\"{config}\" data-delta=\"{k}\""),
    };
    // The value is a <td>; its differences from the baseline are spans inside it.
    let tag = if kind == "value" { "<td " } else { "<span " };
    let at = row
        .match_indices(tag)
        .map(|(i, _)| &row[i..i + row[i..].find('>').unwrap()])
        .find(|td| td.contains(&needle))
        .unwrap_or_else(|| panic!("no {kind} cell for {config} in {metric}: {row}"));
    let attr = |name: &str| {
        at.find(&format!("{name}=\"")).map(|i| {
            let rest = &at[i + name.len() + 2..];
            rest[..rest.find('"').unwrap()].to_owned()
        })
    };
    (attr("class").unwrap(), attr("data-value"))
}

fn value(html: &str, metric: &str, config: &str, kind: &str) -> f64 {
    let (_, v) = cell(html, metric, config, kind);
    v.unwrap_or_else(|| panic!("{metric} {config} {kind} has no value"))
        .parse()
        .unwrap()
}

#[test]
fn the_summary_compares_every_configuration_with_the_first() {
    let html = render_html(&fixture()).unwrap();
    let json = fixture_json();
    let sv1 = &json["configs"]["sv1"];
    let a = &json["configs"]["A"];

    // Configurations side by side in the file's order (sv1 is the baseline, not `A`, which
    // sorts first).
    let head = &html[html.find("<thead>").unwrap()..html.find("</thead>").unwrap()];
    let (p_sv1, p_a) = (
        head.find("data-config=\"sv1\"").unwrap(),
        head.find("data-config=\"A\"").unwrap(),
    );
    assert!(p_sv1 < p_a, "{head}");
    assert!(head.contains("vs sv1"), "{head}");

    for (metric, path) in [
        ("shares.accepted", &["shares", "accepted"][..]),
        ("shares.stale", &["shares", "stale"]),
        ("blocks.found", &["blocks", "found"]),
        ("time_to_job_ms.p95", &["time_to_job_ms", "p95"]),
        ("bandwidth.farm.tx_Bps", &["bandwidth", "farm", "tx_Bps"]),
        (
            "roles.pool.cpu_pct_mean",
            &["roles", "pool", "cpu_pct_mean"],
        ),
        ("template_value_sats", &["template_value_sats"]),
    ] {
        let (base, other) = (num(sv1, path), num(a, path));
        assert_eq!(value(&html, metric, "sv1", "value"), base, "{metric}");
        assert_eq!(value(&html, metric, "A", "value"), other, "{metric}");
        let abs = value(&html, metric, "A", "abs");
        assert!((abs - (other - base)).abs() < 1e-9, "{metric}: {abs}");
        let pct = value(&html, metric, "A", "pct");
        assert!(
            (pct - (other - base) / base * 100.0).abs() < 1e-9,
            "{metric}: {pct}"
        );
    }
    // The figures the fixture was written with, to show the arithmetic above is not circular.
    assert_eq!(value(&html, "shares.stale", "A", "abs"), -57.0);
    assert_eq!(value(&html, "shares.stale", "A", "pct"), -60.0);
    assert_eq!(value(&html, "blocks.found", "A", "pct"), -100.0);

    // Improvements and regressions are told apart where a direction means something.
    assert_eq!(cell(&html, "shares.stale", "A", "abs").0, "delta better");
    assert_eq!(cell(&html, "shares.accepted", "A", "pct").0, "delta better");
    assert_eq!(cell(&html, "blocks.found", "A", "abs").0, "delta worse");
    assert_eq!(
        cell(&html, "time_to_first_job_ms.mean", "A", "abs").0,
        "delta worse"
    );
    assert_eq!(cell(&html, "blocks.submitted", "A", "abs").0, "delta");

    // A distribution without samples shows its reason and no delta.
    let (class, v) = cell(&html, "block_propagation_ms.p95", "A", "value");
    assert_eq!((class.as_str(), v), ("absent", None));
    assert!(html.contains("no block found in the measured window"));
    assert_eq!(cell(&html, "block_propagation_ms.p95", "A", "abs").1, None);
    // Figures docs/metrics.md does not name are still shown.
    assert_eq!(value(&html, "links.wan.tx_bytes", "sv1", "value"), 127494.0);
}

#[test]
fn the_context_states_the_time_compression_from_the_values() {
    let html = render_html(&fixture()).unwrap();
    assert!(
        html.contains("This run compresses time 60-fold against mainnet&#39;s 600 s blocks: a block every 10 s on average, templates refreshed every 2 s (120 s at mainnet scale)."),
        "compression statement missing"
    );
    assert!(html.contains("data-valid=\"true\""));
    for host_fact in [
        "Intel(R) Xeon(R) Platinum 8481C",
        "25769803776 bytes",
        "86400 s",
    ] {
        assert!(html.contains(host_fact), "{host_fact}");
    }
}

const CHARTS: [&str; 26] = [
    "shares_accepted_per_s",
    "shares_stale_per_s",
    "shares_rejected_per_s",
    "hashrate_hps",
    "acceptance_pct",
    "dist-time_to_job_ms",
    "dist-time_to_job_first_ms",
    "dist-time_to_job_prevhash_ms",
    "dist-time_to_job_prevhash_first_ms",
    "dist-time_to_first_job_ms",
    "dist-share_latency_ms",
    "dist-block_propagation_ms",
    "bandwidth_farm_tx_Bps",
    "bandwidth_farm_rx_Bps",
    "bandwidth_pool_tx_Bps",
    "bandwidth_pool_rx_Bps",
    "role_cpu_pct-pool",
    "role_cpu_pct-fleet",
    "role_cpu_pct-jds",
    "role_cpu_pct-translator",
    "role_cpu_pct-jdc",
    "role_cpu_pct-simnet",
    "role_rss_bytes-pool",
    "role_rss_bytes-fleet",
    "role_rss_bytes-translator",
    "role_rss_bytes-simnet",
];

#[test]
fn every_chart_is_an_inline_svg_and_the_page_is_self_contained() {
    let html = render_html(&fixture()).unwrap();
    for key in CHARTS {
        let tag = format!("<svg class=\"chart\" data-chart=\"{key}\"");
        assert_eq!(html.matches(&tag).count(), 1, "chart {key}");
    }
    // Both roles only A has appear too: 6 roles with CPU, 6 with memory.
    assert_eq!(html.matches("data-chart=\"role_").count(), 12);
    assert!(!html.contains("class=\"no-chart\""), "a chart is missing");
    // The time-to-job CDF comes from the samples (two curves, one per config, in their colours),
    // the first-device chart from results.json's percentiles (a dashed curve with a dot on
    // each stored percentile).
    let cdf = chart_svg(&html, "dist-time_to_job_ms");
    assert_eq!(cdf.matches("stroke=\"#0072B2\"").count(), 1, "sv1's curve");
    assert_eq!(cdf.matches("stroke=\"#D55E00\"").count(), 1, "A's curve");
    let dots = chart_svg(&html, "dist-time_to_job_first_ms");
    assert_eq!(
        dots.matches("fill=\"#0072B2\"").count(),
        4,
        "p50 p95 p99 max"
    );
    assert_eq!(dots.matches("fill=\"#D55E00\"").count(), 4);
    // The same colour for a config everywhere: legend swatches included.
    assert!(html.contains("<span class=\"swatch\" style=\"background:#0072b2\"></span>sv1"));
    assert!(html.contains("<span class=\"swatch\" style=\"background:#d55e00\"></span>A"));

    // Nothing to fetch: no external references of any kind, and a policy that forbids them.
    for external in [
        " src=",
        "<link",
        "@import",
        "url(",
        "href=\"http",
        "<iframe",
    ] {
        assert!(!html.contains(external), "{external}");
    }
    assert!(html.contains("http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';"));
    assert_eq!(html.matches("<script>").count(), 1);
}

fn chart_svg<'a>(html: &'a str, key: &str) -> &'a str {
    let start = html
        .find(&format!("data-chart=\"{key}\""))
        .unwrap_or_else(|| panic!("no chart {key}"));
    &html[start..start + html[start..].find("</svg>").unwrap()]
}

#[test]
fn strings_from_the_results_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "<img src=x onerror=alert(1)>";
    let results = serde_json::json!({
        "valid": false,
        "invalid_reasons": ["</li><script>alert(\"reason\")</script>"],
        "context": {"scenario": "<b>bold</b>", "note & more": "it's \"quoted\""},
        "configs": {
            "sv1": {"roles": {"pool<x>": {"cpu_pct_mean": 1.0}}},
            evil: {"shares": {"accepted": 1}},
        },
        "host": {"cpu_model": "<script>host()</script>"},
    });
    fs::write(dir.path().join("results.json"), results.to_string()).unwrap();
    fs::write(
        dir.path().join("shares_accepted_per_s.csv"),
        format!("t_s,sv1,\"{evil}\"\n0,1,2\n1,2,3\n"),
    )
    .unwrap();
    let html = render_html(dir.path()).unwrap();
    for raw in [
        evil,
        "<script>alert",
        "<b>bold</b>",
        "<script>host",
        "pool<x>",
        "it's",
    ] {
        assert!(!html.contains(raw), "{raw} reached the page unescaped");
    }
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(html.contains("&lt;/li&gt;&lt;script&gt;alert(&quot;reason&quot;)&lt;/script&gt;"));
    assert!(html.contains("&lt;b&gt;bold&lt;/b&gt;"));
    assert!(html.contains("pool&lt;x&gt;"));
    assert!(html.contains("note &amp; more"));
    assert!(html.contains("it&#39;s &quot;quoted&quot;"));
    assert_eq!(
        html.matches("<script>").count(),
        1,
        "only the report's own script"
    );
    // The invalid run says so, with its reason.
    assert!(html.contains("data-valid=\"false\""));
    assert!(html.contains("class=\"reasons\""));
}

#[test]
fn missing_inputs_degrade_gracefully() {
    // results.json alone, with most keys missing and odd types where numbers belong.
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("results.json"),
        r#"{"configs": {"sv1": {"shares": {"accepted": "many"}, "time_to_job_ms": null,
            "roles": [], "bandwidth": {"farm": 3}}, "A": 7, "C": {}}}"#,
    )
    .unwrap();
    let html = render_html(dir.path()).unwrap();
    assert_eq!(cell(&html, "shares.accepted", "sv1", "value").0, "absent");
    assert_eq!(cell(&html, "shares.accepted", "C", "abs").1, None);
    assert!(html.contains("No chart: no shares_accepted_per_s.csv"));
    assert!(html.contains("No chart: no dist_time_to_job_ms.csv and no percentiles"));
    assert!(html.contains("data-valid=\"unknown\""));
    assert!(html.contains("neither the time compression nor the block interval"));

    // CSVs alone: the charts, and a note that results.json is missing.
    let dir = copy_fixture();
    fs::remove_file(dir.path().join("results.json")).unwrap();
    let html = render_html(dir.path()).unwrap();
    assert!(html.contains("results.json is missing"));
    assert!(html.contains("data-chart=\"shares_accepted_per_s\""));
    assert!(html.contains("data-chart=\"dist-time_to_job_ms\""));
    // Configs come from the CSVs' columns; their colours stay the same.
    assert!(html.contains("<span class=\"swatch\" style=\"background:#0072b2\"></span>sv1"));

    // Broken files are left out with a note; the rest is shown.
    let dir = copy_fixture();
    fs::write(dir.path().join("results.json"), "{\"configs\": ").unwrap();
    fs::write(dir.path().join("acceptance_pct.csv"), "t_s,sv1\n0,1,2,3\n").unwrap();
    fs::write(dir.path().join("dist_share_latency_ms.csv"), "value\n1\n").unwrap();
    let html = render_html(dir.path()).unwrap();
    assert!(html.contains("results.json could not be read"));
    assert!(html.contains("acceptance_pct.csv was left out: line 2"));
    assert!(html.contains("dist_share_latency_ms.csv was left out: no `config` column"));
    assert!(html.contains("data-chart=\"shares_stale_per_s\""));

    // Not a results directory at all.
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        render_html(empty.path()),
        Err(ReportError::NoResults(_))
    ));
    assert!(matches!(
        render_html(&empty.path().join("absent")),
        Err(ReportError::Io { .. })
    ));
}

#[test]
fn any_number_of_configurations_get_distinct_colours_and_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..9).map(|i| format!("c{i}")).collect();
    let configs: serde_json::Map<String, Value> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                n.clone(),
                serde_json::json!({"shares": {"accepted": 100 + i}}),
            )
        })
        .collect();
    fs::write(
        dir.path().join("results.json"),
        serde_json::json!({ "configs": configs }).to_string(),
    )
    .unwrap();
    let html = render_html(dir.path()).unwrap();
    let head = &html[html.find("<thead>").unwrap()..html.find("</thead>").unwrap()];
    let mut colours: Vec<&str> = head
        .match_indices("background:")
        .map(|(i, _)| &head[i + 11..i + 18])
        .collect();
    assert_eq!(colours.len(), 9);
    colours.sort_unstable();
    colours.dedup();
    assert_eq!(colours.len(), 9, "colours repeat: {colours:?}");
    assert_eq!(head.matches("class=\"delta-head\"").count(), 8);
    assert_eq!(value(&html, "shares.accepted", "c8", "abs"), 8.0);
    assert_eq!(value(&html, "shares.accepted", "c8", "pct"), 8.0);
}

#[test]
fn write_report_writes_report_html() {
    let dir = copy_fixture();
    let options = ReportOptions {
        pdf: false,
        ..ReportOptions::default()
    };
    let files = write_report_with(dir.path(), &options).unwrap();
    assert_eq!(files.html, dir.path().join("report.html"));
    assert!(matches!(files.pdf, PdfOutcome::Disabled));
    let written = fs::read_to_string(&files.html).unwrap();
    assert_eq!(
        written,
        render_html(dir.path()).unwrap(),
        "the same page, and stable"
    );
    let leftovers: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
