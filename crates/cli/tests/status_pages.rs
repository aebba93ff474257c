//! The page each role serves at `/`, opened in a real headless browser (Debian's chromium) while
//! real devices mine: the pool's and the translator's pages draw their `/api/status` figures,
//! refresh them (the shares chart has rates), list the pool's workers, and show a failed
//! dependency as soon as `/healthz` does. Skipped, saying so, where no Chromium is installed; CI
//! installs it, so there it runs.

mod support;

use std::time::Duration;

use lab::report::Chromium;
use support::{fleet_thread, http_get, http_get_json, status_within, sv2_pool_on_simnet, Roles};

const BROWSER_TIMEOUT: Duration = Duration::from_secs(60);
/// Two refreshes of the page (every 2 s) and then some.
const VIRTUAL_TIME: Duration = Duration::from_millis(5000);

fn browser() -> Option<Chromium> {
    Chromium::find_or_skip()
}

/// The page at `http://ADDR/` after its scripts ran, and the browser's log.
fn open(chromium: &Chromium, addr: &str) -> (String, String) {
    let out = chromium
        .dump_dom_url(
            &format!("http://{addr}/"),
            (1280, 900),
            VIRTUAL_TIME,
            BROWSER_TIMEOUT,
        )
        .unwrap();
    (out.stdout, out.stderr)
}

/// The text of the element whose opening tag contains `id="ID"` (up to its first closing
/// `</TAG>`), tags removed.
fn section<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the page:\n{dom}"));
    let end = dom[start..]
        .find("</section>")
        .map_or(dom.len(), |e| start + e);
    &dom[start..end]
}

fn no_script_errors(log: &str, page: &str) {
    for line in log.lines() {
        assert!(
            !(line.contains("Uncaught") || line.contains("Content Security Policy")),
            "{page}: {line}"
        );
    }
}

#[test]
fn every_role_page_draws_its_figures_and_shows_a_failing_dependency() {
    let Some(chromium) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut roles = Roles::default();
    let pool = sv2_pool_on_simnet(&mut roles, dir.path(), None);
    let (_, sv1, t_http) = pool.fleet_translator(&mut roles, &["--channels", "per-device"]);

    // Devices mine while the pages are read.
    let fleet = fleet_thread(&sv1, "3", "120kH/s", "20s", &[], Duration::from_secs(60));
    status_within(
        &pool.http,
        "no shares accepted in 30 s",
        Duration::from_secs(30),
        String::new,
        |s| s["shares"]["accepted"].as_u64().unwrap_or(0) >= 2,
    );

    // The pool's page: healthy, its node up, the workers it accounts, shares refreshed into rates.
    let (code, body) = http_get(&pool.http, "/");
    assert_eq!(code, 200);
    assert!(body.starts_with("<!doctype html>"), "{body}");
    let (dom, log) = open(&chromium, &pool.http);
    no_script_errors(&log, "pool");
    assert!(dom.contains("<title>stratumlab pool: ok</title>"), "{dom}");
    assert!(section(&dom, "health").contains("ok"), "{dom}");
    let deps = section(&dom, "dependencies");
    assert!(
        deps.contains("template_provider") || deps.contains("<td>tp"),
        "{deps}"
    );
    assert!(deps.contains("class=\"up\""), "{deps}");
    assert!(!deps.contains("class=\"down\""), "{deps}");
    let workers = http_get_json(&pool.http, "/api/workers");
    let listed = workers["workers"].as_array().unwrap();
    assert!(!listed.is_empty(), "{workers}");
    let page_workers = section(&dom, "workers");
    for w in listed {
        let name = w["name"].as_str().unwrap();
        assert!(
            page_workers.contains(name),
            "{name} not on the page: {page_workers}"
        );
    }
    let shares = section(&dom, "shares");
    assert!(
        shares.contains("data-series=\"accepted\""),
        "the refreshes drew a rate line: {shares}"
    );
    assert!(!shares.contains("Collecting"), "{shares}");
    assert!(section(&dom, "blocks").contains("orphaned"), "{dom}");
    // Every figure of /api/status is on the page.
    let all = section(&dom, "all");
    for key in http_get_json(&pool.http, "/api/status")
        .as_object()
        .unwrap()
        .keys()
    {
        assert!(all.contains(&format!("<th>{key}</th>")), "{key}: {all}");
    }

    // The translator's page: its upstream pool is a dependency, its shares from devices are
    // drawn, and it keeps no worker list.
    let (dom, log) = open(&chromium, &t_http);
    no_script_errors(&log, "translator");
    assert!(
        dom.contains("<title>stratumlab translator: ok</title>"),
        "{dom}"
    );
    assert!(
        section(&dom, "dependencies").contains("<td>pool</td>"),
        "{dom}"
    );
    assert!(
        section(&dom, "shares").contains("data-series=\"accepted\""),
        "{dom}"
    );
    assert!(section(&dom, "shares").contains("upstream"), "{dom}");
    assert!(!dom.contains("id=\"workers\""), "{dom}");

    let report = fleet.join().unwrap();
    assert!(
        report["shares"]["accepted"].as_u64().unwrap() > 0,
        "{report}"
    );

    // The template provider goes away: the pool stops serving, and its page says so and why.
    roles.kill("simnet");
    status_within(
        &pool.http,
        "the pool stops serving without its provider",
        Duration::from_secs(15),
        String::new,
        |s| s["serving"] == false,
    );
    let (dom, log) = open(&chromium, &pool.http);
    no_script_errors(&log, "pool without its provider");
    assert!(
        dom.contains("<title>stratumlab pool: not serving</title>"),
        "{dom}"
    );
    let health = section(&dom, "health");
    assert!(health.contains("class=\"health bad\""), "{health}");
    assert!(health.contains("not serving"), "{health}");
    assert!(
        section(&dom, "dependencies").contains("class=\"down\""),
        "{dom}"
    );
}
