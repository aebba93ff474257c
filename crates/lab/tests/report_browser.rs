//! report.html in a real headless browser (Debian's chromium): it loads without errors, every
//! chart is laid out and drawn (the distributions' CDFs by name), a screenshot is a real picture
//! of it, and it prints to PDF, A4 landscape with no column cut off (read back with poppler's
//! pdfinfo and pdftotext). Skipped, saying so, where no Chromium (or no poppler) is installed;
//! CI installs both, so there it runs.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lab::report::{write_report, write_report_with, Chromium, PdfOutcome, ReportOptions};

/// Bounds every browser run: a first start on a cold machine takes a few seconds.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(60);
/// Tall enough to reach past the summary table into the charts.
const WINDOW: (u32, u32) = (1280, 6000);
/// The first two configurations' colours (see the palette).
const SV1_BLUE: [u8; 3] = [0x00, 0x72, 0xb2];
const A_VERMILLION: [u8; 3] = [0xd5, 0x5e, 0x00];
/// The six-configuration fixture's configurations, in its order.
const SIX_CONFIGS: [&str; 6] = ["sv1", "sv1-proxied", "A", "B", "C", "D"];
/// The palette's first six colours, as plotters writes them into the charts.
const SIX_COLOURS: [&str; 6] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
];
/// A4 landscape in PDF points, and the page margin the print styles ask for (10 mm).
const A4_LANDSCAPE_PT: (f64, f64) = (841.89, 595.28);
const MARGIN_PT: f64 = 10.0 / 25.4 * 72.0;

fn browser() -> Option<Chromium> {
    Chromium::find_or_skip()
}

/// poppler's `pdfinfo` and `pdftotext`, which read the printed report back.
fn poppler() -> bool {
    let found = ["pdfinfo", "pdftotext"]
        .iter()
        .all(|tool| Command::new(tool).arg("-v").output().is_ok());
    if !found {
        eprintln!(
            "SKIPPED: no pdfinfo or pdftotext on PATH; `apt-get install poppler-utils` to run this test"
        );
    }
    found
}

/// A tool's standard output; it must succeed.
fn output(program: &str, args: &[&OsStr]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The fixture's results with report.html written next to them (no PDF).
fn report() -> (tempfile::TempDir, PathBuf) {
    report_of("two_configs")
}

/// `tests/data/NAME`'s results with report.html written next to them (no PDF).
fn report_of(name: &str) -> (tempfile::TempDir, PathBuf) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    let dir = tempfile::tempdir().unwrap();
    for entry in fs::read_dir(fixture).unwrap() {
        let p = entry.unwrap().path();
        fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    let options = ReportOptions {
        pdf: false,
        ..ReportOptions::default()
    };
    let html = write_report_with(dir.path(), &options).unwrap().html;
    (dir, html)
}

#[test]
fn the_report_loads_without_errors_and_every_chart_renders() {
    let Some(chromium) = browser() else { return };
    let (_dir, html) = report();
    let charts = fs::read_to_string(&html)
        .unwrap()
        .matches("<svg class=\"chart")
        .count();
    assert!(charts >= 20, "{charts} charts");

    let out = chromium.dump_dom(&html, BROWSER_TIMEOUT).unwrap();
    // The page's console: a script error, a policy violation or the chart check's complaint.
    let console: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .collect();
    assert!(
        console.is_empty(),
        "console messages:\n{}",
        console.join("\n")
    );

    let root = &out.stdout[out.stdout.find("<html").expect("a DOM on stdout")..];
    let root = &root[..root.find('>').unwrap()];
    assert!(
        root.contains(&format!("data-charts=\"{charts}\"")),
        "{root}"
    );
    assert!(
        root.contains(&format!("data-charts-drawn=\"{charts}\"")),
        "{root}"
    );
    assert!(root.contains("data-charts-check=\"ok\""), "{root}");
}

/// At 1280 px nothing is wider than the window, for runs and a sweep (no table that needs its own scroll bar, whose
/// columns a printout would cut), and what the run found comes first, the run's context last.
#[test]
fn the_report_fits_1280_px_and_leads_with_the_findings() {
    let Some(chromium) = browser() else { return };
    for fixture in ["two_configs", "six_configs", "sweep_rtt"] {
        let (_dir, html) = report_of(fixture);
        let out = chromium
            .dump_dom_at(&html, (1280, 900), BROWSER_TIMEOUT)
            .unwrap();
        let root = &out.stdout[out.stdout.find("<html").expect("a DOM on stdout")..];
        let root = &root[..root.find('>').unwrap()];
        assert!(root.contains("data-overflow=\"none\""), "{fixture}: {root}");
        assert!(
            root.contains("data-first-section=\"findings\""),
            "{fixture}: {root}"
        );
        let page = fs::read_to_string(&html).unwrap();
        // Every chart drawn, the sweep's curves included.
        assert!(
            root.contains("data-charts-check=\"ok\""),
            "{fixture}: {root}"
        );
        let (findings, context) = (
            page.find("<section id=\"findings\"").unwrap(),
            page.find("<section id=\"context\"").unwrap(),
        );
        let last = page.rfind("<section id=").unwrap();
        assert!(
            findings < context && last == context,
            "{fixture}: findings first, context last"
        );
        // The validity verdict is inside the findings.
        let validity = page.find("id=\"validity\"").unwrap();
        assert!(
            findings < validity
                && validity < page[findings..].find("</section>").unwrap() + findings
        );
    }
}

#[test]
fn a_screenshot_is_a_real_picture_of_the_report() {
    let Some(chromium) = browser() else { return };
    let (dir, html) = report();
    let png_path = dir.path().join("screenshot.png");
    chromium
        .screenshot(&html, &png_path, WINDOW, BROWSER_TIMEOUT)
        .unwrap();

    let decoder = png::Decoder::new(std::io::BufReader::new(fs::File::open(&png_path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), WINDOW, "the window's size");
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected colour type {other:?}"),
    };
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks_exact(channels).collect();
    let near = |p: &[u8], c: [u8; 3]| (0..3).all(|i| p[i].abs_diff(c[i]) <= 12);

    // Not blank: text, tables and charts cover a fair part of the page.
    let inked = pixels
        .iter()
        .filter(|p| !near(p, [0xff, 0xff, 0xff]))
        .count();
    let share = inked as f64 / pixels.len() as f64;
    assert!(
        share > 0.02,
        "only {:.2}% of the page is not white",
        share * 100.0
    );
    // The configurations' colours are drawn in quantity: lines and bars, not only swatches.
    for (name, colour) in [("sv1", SV1_BLUE), ("A", A_VERMILLION)] {
        let n = pixels.iter().filter(|p| near(p, colour)).count();
        assert!(n > 2_000, "{name}'s colour covers only {n} pixels");
    }
}

#[test]
fn write_report_prints_a_pdf_when_a_browser_is_installed() {
    if browser().is_none() {
        return;
    }
    let (dir, _) = report();
    let files = write_report(dir.path()).unwrap();
    let PdfOutcome::Written(pdf) = files.pdf else {
        panic!("no PDF: {:?}", files.pdf);
    };
    assert_eq!(pdf, dir.path().join("report.pdf"));
    let bytes = fs::read(&pdf).unwrap();
    assert!(bytes.starts_with(b"%PDF-"), "not a PDF");
    assert!(bytes.len() > 20_000, "{} bytes", bytes.len());
}

/// The opening tag of the element whose `attr` is `value` in `dom`, and the text from there to
/// the `end` that closes it (a chart's `</svg>`, a section's `</section>`).
fn element<'a>(dom: &'a str, attr: &str, value: &str, end: &str) -> (&'a str, &'a str) {
    let at = dom
        .find(&format!("{attr}=\"{value}\""))
        .unwrap_or_else(|| panic!("no element with {attr}={value:?}"));
    let start = dom[..at].rfind('<').unwrap();
    let tag = &dom[start..start + dom[start..].find('>').unwrap()];
    let body = &dom[start..at + dom[at..].find(end).unwrap()];
    (tag, body)
}

/// After the charts over time come the distributions: a CDF of time to job and one of share
/// latency, a line per configuration in its colour, laid out and drawn in the browser. The
/// two-configuration run wrote its raw time-to-job samples; the six-configuration one did
/// not, so its time-to-job curves come from the stored percentiles, and the caption says so.
#[test]
fn the_distributions_are_drawn_as_cdfs_after_the_charts_over_time() {
    let Some(chromium) = browser() else { return };
    for (fixture, configs) in [("two_configs", 2), ("six_configs", 6)] {
        let (_dir, html) = report_of(fixture);
        let out = chromium
            .dump_dom_at(&html, (1280, 900), BROWSER_TIMEOUT)
            .unwrap();
        let dom = &out.stdout[out.stdout.find("<html").expect("a DOM on stdout")..];

        let at = |id: &str| {
            dom.find(&format!("<section id=\"{id}\""))
                .unwrap_or_else(|| panic!("{fixture}: no section {id}"))
        };
        let distributions = at("distributions");
        for before in ["explanations", "shares", "acceptance", "bandwidth", "roles"] {
            assert!(
                at(before) < distributions,
                "{fixture}: #{before} comes before the distributions"
            );
        }
        assert!(
            distributions < at("summary"),
            "{fixture}: then every figure"
        );

        let (_, section) = element(dom, "id", "distributions", "</section>");
        for metric in ["time_to_job_ms", "share_latency_ms"] {
            let key = format!("dist-{metric}");
            let (tag, svg) = element(section, "data-chart", &key, "</svg>");
            assert!(
                tag.contains("data-drawn=\"true\""),
                "{fixture}: {key} not laid out or empty: {tag}"
            );
            // A line per configuration, in the palette's colours, and the legend to match.
            for colour in &SIX_COLOURS[..configs] {
                assert!(
                    svg.contains(&format!("stroke=\"{colour}\"")),
                    "{fixture}: {key} has no line in {colour}"
                );
                assert!(
                    section.contains(&format!("background:{}", colour.to_lowercase())),
                    "{fixture}: {key}'s legend lacks {colour}"
                );
            }
            // Fractions up the side, 0 to 100% (plotters puts a label's text on a line of its own).
            for label in ["0%", "50%", "100%"] {
                assert!(
                    svg.contains(&format!("\n{label}\n")),
                    "{fixture}: {key} lacks the label {label}"
                );
            }
        }
        let (_, figure) = element(section, "data-figure", "dist-time_to_job_ms", "</figure>");
        assert_eq!(
            figure.contains("drawn from the percentiles results.json stores"),
            fixture == "six_configs",
            "{fixture}: the caption says where the curves come from"
        );
    }
}

/// The widest report (six configurations) printed to PDF by Chromium, as `stratumlab report`
/// prints it, loses nothing at the right edge: every page is A4 landscape, no word lies outside
/// the printable width (a column pushed past it is cut at the paper's edge), and the full
/// table's header names every configuration, each with its difference heading, with the first
/// row's values beneath, the last column's included.
#[test]
fn the_widest_report_prints_to_a4_landscape_without_cut_columns() {
    let Some(chromium) = browser() else { return };
    if !poppler() {
        return;
    }
    let (dir, html) = report_of("six_configs");
    let pdf = dir.path().join("report.pdf");
    chromium.print_to_pdf(&html, &pdf, BROWSER_TIMEOUT).unwrap();

    let info = output(
        "pdfinfo",
        &[
            "-f".as_ref(),
            "1".as_ref(),
            "-l".as_ref(),
            "100000".as_ref(),
            pdf.as_os_str(),
        ],
    );
    let pages: usize = info
        .lines()
        .find_map(|l| l.strip_prefix("Pages:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no page count: {info}"));
    let sizes: Vec<&str> = info
        .lines()
        .filter(|l| l.starts_with("Page ") && l.contains(" size:"))
        .collect();
    assert!(pages > 1 && sizes.len() == pages, "{info}");
    for line in &sizes {
        let size = line.split("size:").nth(1).unwrap();
        let numbers: Vec<f64> = size
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let (w, h) = (numbers[0], numbers[1]);
        assert!(
            (w - A4_LANDSCAPE_PT.0).abs() < 1.0 && (h - A4_LANDSCAPE_PT.1).abs() < 1.0,
            "not A4 landscape: {line}"
        );
    }

    // Every word inside the printable width (left and right margins), on every page.
    let bbox = output(
        "pdftotext",
        &["-bbox".as_ref(), pdf.as_os_str(), "-".as_ref()],
    );
    let attr = |tag: &str, name: &str| -> f64 {
        let at = tag.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
        tag[at..at + tag[at..].find('"').unwrap()].parse().unwrap()
    };
    let mut words = 0;
    for (page, text) in bbox.split("<page ").skip(1).enumerate() {
        let width = attr(text, "width");
        let (left, right) = (MARGIN_PT - 1.0, width - MARGIN_PT + 1.0);
        for word in text.split("<word ").skip(1) {
            let (tag, rest) = word.split_once('>').unwrap();
            let word_text = &rest[..rest.find("</word>").unwrap()];
            let (x_min, x_max) = (attr(tag, "xMin"), attr(tag, "xMax"));
            assert!(
                x_min >= left && x_max <= right,
                "page {}: {word_text:?} at x {x_min:.1}..{x_max:.1} pt, outside the printable \
                 {left:.1}..{right:.1} pt",
                page + 1
            );
            words += 1;
        }
    }
    assert!(words > 1000, "only {words} words in the PDF");

    // The full table, as laid out on paper: its header, and the first row's values.
    let text = output(
        "pdftotext",
        &["-layout".as_ref(), pdf.as_os_str(), "-".as_ref()],
    );
    let table = &text[text
        .find("Every figure")
        .expect("the full table is printed")..];
    let configs = SIX_CONFIGS;
    let versus = format!("vs {}", configs[0]);
    // The header's lines: the configurations' names, then their difference headings (a page
    // break before the first row may repeat the header; the first is read).
    let header_end = table.find(&versus).expect("a difference heading");
    let header_end = header_end + table[header_end..].find('\n').unwrap();
    let header: Vec<&str> = table[..header_end].split_whitespace().collect();
    for c in &configs {
        assert!(
            header.contains(c),
            "column {c} is not in the header: {header:?}"
        );
    }
    let heading_line = &table[table[..header_end].rfind('\n').unwrap()..header_end];
    assert_eq!(
        heading_line.matches(&versus).count(),
        configs.len() - 1,
        "a difference heading for each configuration after the baseline: {heading_line:?}"
    );
    let results: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    assert_eq!(results["configs"].as_object().unwrap().len(), configs.len());
    let first_group = table.find("Shares at the farm edge").unwrap();
    // Each configuration's shares submitted, in column order, the last column's last.
    let row = &table[first_group..];
    let row = &row[..row.find("accepted").unwrap()];
    let values: Vec<String> = configs
        .iter()
        .map(|c| results["configs"][c]["shares"]["submitted"].to_string())
        .collect();
    let tokens: Vec<&str> = row.split_whitespace().collect();
    let mut rest = tokens.iter();
    for (c, v) in configs.iter().zip(&values).skip(1) {
        assert!(
            rest.any(|t| t == v),
            "{c}'s value {v} is missing or out of order in the first row: {tokens:?}"
        );
    }
    assert!(tokens.contains(&values[0].as_str()), "{tokens:?}");
}
