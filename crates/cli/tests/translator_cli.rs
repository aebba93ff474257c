//! `stratumlab translator` end to end: simnet's Template Provider, our SV2 pool, the translator
//! in front of it, and SV1 devices from `stratumlab fleet` mining through it.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::Role;

const PAYOUT: &str = "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080";

/// Roles still running; whatever a failing assertion leaves behind is killed.
#[derive(Default)]
struct Roles(Vec<(&'static str, Role)>);

impl Roles {
    fn add(&mut self, name: &'static str, role: Role) -> &Role {
        self.0.push((name, role));
        &self.0.last().unwrap().1
    }

    /// Stops one role with SIGTERM; it must exit successfully.
    fn stop(&mut self, name: &str) -> Vec<String> {
        let i = self.0.iter().position(|(n, _)| *n == name).unwrap();
        let (_, role) = self.0.remove(i);
        role.stop()
    }

    fn logs(&self) -> String {
        self.0
            .iter()
            .map(|(n, r)| format!("--- {n}\n{}", r.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        for (_, r) in self.0.drain(..) {
            r.kill9();
        }
    }
}

fn http_get_json(addr: &str, path: &str) -> serde_json::Value {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let body = text.split_once("\r\n\r\n").expect("an HTTP response").1;
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Runs the fleet to its end (bounded by `limit`) and returns its JSON report.
fn run_fleet(args: &[&str], limit: Duration) -> serde_json::Value {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .arg("fleet")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            text.push_str(&l);
            text.push('\n');
        }
        text
    });
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "fleet exit {status:?}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the fleet did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = reader.join().unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn sv1_devices_mine_through_the_translator_into_the_sv2_pool() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pool.sqlite");
    let events = dir.path().join("translator.ev");
    let mut roles = Roles::default();

    let simnet = roles.add(
        "simnet",
        Role::start(
            "simnet",
            &[
                "--tdp-listen",
                "127.0.0.1:0",
                "--network-difficulty",
                "0.0005",
                "--block-interval",
                "0",
            ],
        ),
    );
    let tdp = simnet.line("tdp listening on");

    let pool = roles.add(
        "pool",
        Role::start(
            "pool",
            &[
                "--sv2-listen",
                "127.0.0.1:0",
                "--tp",
                &tdp,
                "--http-listen",
                "127.0.0.1:0",
                "--payout-address",
                PAYOUT,
                "--store",
                store.to_str().unwrap(),
            ],
        ),
    );
    let key = pool.line("sv2 authority public key");
    let sv2 = pool.line("sv2 listening on");
    let http = pool.line("http listening on");

    let translator = roles.add(
        "translator",
        Role::start(
            "translator",
            &[
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                &sv2,
                "--upstream-authority-key",
                &key,
                // The fleet's devices hash 40 kH/s each: a share every second or so.
                "--start-difficulty",
                "0.00001",
                "--device-hash-rate",
                "40kH/s",
                "--events",
                events.to_str().unwrap(),
                // Bounded even if the test never gets to stop it.
                "--duration",
                "120s",
            ],
        ),
    );
    let sv1 = translator.line("sv1 listening on");

    let report = run_fleet(
        &[
            "--pool",
            &sv1,
            "--devices",
            "5",
            "--hash-budget",
            "200kH/s",
            "--duration",
            "15s",
            "--json",
        ],
        Duration::from_secs(60),
    );
    let shares = &report["shares"];
    let sent = shares["sent"].as_u64().unwrap();
    let accepted = shares["accepted"].as_u64().unwrap();
    assert_eq!(report["connected"].as_u64(), Some(5), "{report}");
    assert_eq!(report["disconnects"].as_u64(), Some(0), "{report}");
    assert!(report["jobs_received"].as_u64().unwrap() >= 5, "{report}");
    assert!(accepted >= 5, "the devices' shares are accepted: {report}");
    // A block found through the pool makes a few shares in flight stale; nothing else may fail.
    assert!(
        accepted * 10 >= sent * 9,
        "{accepted} of {sent} accepted: {report}"
    );
    for (code, n) in shares["rejected_by_code"].as_object().unwrap() {
        assert!(code == "21" || *n == 0, "rejected as {code}: {report}");
    }

    // The pool saw only the translator's one connection, and took some forwarded shares.
    let status = http_get_json(&http, "/api/status");
    let pool_accepted = status["shares"]["accepted"].as_u64().unwrap();
    assert!(pool_accepted > 0, "no forwarded share accepted: {status}");
    assert!(
        pool_accepted < accepted,
        "only shares meeting the pool's target go upstream: {pool_accepted} of {accepted}"
    );
    assert_eq!(status["connections"].as_u64(), Some(1), "{status}");

    roles.stop("translator");
    let dump = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args(["events", "dump", events.to_str().unwrap()])
        .output()
        .unwrap();
    let dump = String::from_utf8_lossy(&dump.stdout);
    let count = |kind: &str| {
        dump.lines()
            .filter(|l| l.contains(&format!("\"kind\":\"{kind}\"")))
            .count() as u64
    };
    assert_eq!(count("connection_opened"), 6, "upstream and 5 devices");
    assert!(count("share_sent") >= pool_accepted);
    assert!(count("share_result") >= pool_accepted);

    roles.stop("pool");
    roles.stop("simnet");
}
