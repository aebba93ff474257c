//! report.html in a real headless browser (Debian's chromium): it loads without errors, every
//! chart is laid out and drawn, a screenshot is a real picture of it, and it prints to PDF.
//! Skipped, saying so, where no Chromium is installed; CI installs it, so there it runs.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lab::report::{write_report, write_report_with, Chromium, PdfOutcome, ReportOptions};

/// Bounds every browser run: a first start on a cold machine takes a few seconds.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(60);
/// Tall enough to reach past the summary table into the charts.
const WINDOW: (u32, u32) = (1280, 6000);
/// The first two configurations' colours (see the palette).
const SV1_BLUE: [u8; 3] = [0x00, 0x72, 0xb2];
const A_VERMILLION: [u8; 3] = [0xd5, 0x5e, 0x00];

fn browser() -> Option<Chromium> {
    let found = Chromium::find();
    if found.is_none() {
        eprintln!(
            "SKIPPED: no Chromium ({} or chromium on PATH); `apt-get install chromium` to run this test",
            lab::report::chromium::DEBIAN_CHROMIUM
        );
    }
    found
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
