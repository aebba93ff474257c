//! `stratumlab run` as a user runs it: a short trial of the default comparison (sv1 and D) end
//! to end (results.json against METRICS.md's shape and sanity, and each configuration's
//! figures against ground truth in its roles' events), and the lab's promises about its processes: a role killed
//! mid-run ends the run naming it, SIGINT or SIGTERM to the lab stops every role, and killing
//! the lab leaves no role behind.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One lab at a time: each starts a dozen processes, and the timing checks need the CPU.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn lab(out: &Path, extra: &[&str]) -> Child {
    lab_of(out, &["sv1"], extra)
}

fn lab_of(out: &Path, configs: &[&str], extra: &[&str]) -> Child {
    // One share per second per device: enough shares in a short run that the acceptance check
    // is not at the mercy of one stale share. One found block per configuration on average
    // (every configuration's found blocks are tips for all of them): a short run's stale
    // fraction is a few tips' luck.
    let scenario = out.with_extension("toml");
    let configs: Vec<String> = configs.iter().map(|c| format!("{c:?}")).collect();
    std::fs::write(
        &scenario,
        format!(
            "name = \"test\"\nconfigs = [{}]\nshares_per_minute = 60\n",
            configs.join(", ")
        ),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .arg("run")
        .arg("--scenario")
        .arg(&scenario)
        .args(["--devices", "8"])
        .args(if extra.contains(&"--block-interval") {
            &[][..]
        } else {
            &["--block-interval", "10s"][..]
        })
        .args(["--hash-budget", "200kH/s", "--blocks-per-config", "1"])
        .arg("--out")
        .arg(out)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting stratumlab run")
}

/// Processes whose command line mentions `marker` (every role's does: its event file is in the
/// run's directory).
fn roles_of(marker: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
        // Zombies have an empty command line; they are not running.
        if cmd.contains(marker) && !cmd.contains(" run ") {
            found.push((pid, cmd));
        }
    }
    found
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn output(child: Child) -> (std::process::ExitStatus, String) {
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (out.status, text)
}

fn no_role_left(marker: &str) {
    wait_for("every role to exit", Duration::from_secs(10), || {
        roles_of(marker).is_empty()
    });
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: signalling a process of this test's own making.
    unsafe { libc::kill(pid as i32, sig) };
}

#[test]
fn a_short_run_of_sv1_and_d_writes_sane_results() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let child = lab_of(&out, &["sv1", "D"], &["--duration", "16s"]);
    let (status, text) = output(child);
    assert!(status.success(), "{text}");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["schema"], 1);
    let names: Vec<&str> = results["configs"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    for config in ["sv1", "D"] {
        config_is_sane(&out, config, &results["configs"][config]);
    }
    // The report puts both side by side, with D's difference from the baseline.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("data-config=\"D\""),
        "no D column in the report"
    );
    assert!(
        html.contains("data-delta=\"pct\""),
        "no deltas in the report"
    );
    assert!(out.join("shares_accepted_per_s.csv").is_file());
    assert!(out.join("role_cpu_pct.csv").is_file());
    no_role_left(out.to_str().unwrap());
}

/// One configuration's figures: METRICS.md's shape, sane values, and ground truth from the
/// roles' own events (injected delay, block propagation, bytes).
fn config_is_sane(out: &Path, config: &str, c: &serde_json::Value) {
    let shares = &c["shares"];
    let submitted = shares["submitted"].as_u64().unwrap();
    assert!(submitted > 0, "{c}");
    let sum: u64 = ["accepted", "stale", "rejected", "unanswered"]
        .iter()
        .map(|k| shares[k].as_u64().unwrap())
        .sum();
    assert_eq!(sum, submitted, "{shares}");
    let acceptance = shares["acceptance_pct"].as_f64().unwrap();
    eprintln!("{config}: {shares}");
    assert!((90.0..=100.0).contains(&acceptance), "{config}: {shares}");
    // Time to job is above the injected one-way delay (72.5 ms of the default 145 ms RTT).
    let ttj = &c["time_to_job_ms"];
    if ttj["n"].as_u64().unwrap() > 0 {
        assert!(ttj["p50"].as_f64().unwrap() > 72.5, "{ttj}");
    }
    for key in [
        "time_to_job_ms",
        "time_to_job_first_ms",
        "time_to_job_prevhash_ms",
        "time_to_first_job_ms",
        "share_latency_ms",
        "block_propagation_ms",
    ] {
        let d = &c[key];
        assert!(d["n"].is_u64(), "{key}: {d}");
        for f in ["mean", "p50", "p95", "p99", "max"] {
            assert!(d.get(f).is_some(), "{key} lacks {f}: {d}");
        }
    }
    let lat = &c["share_latency_ms"];
    assert!(lat["p50"].as_f64().unwrap() > 145.0, "{lat}");
    assert!(
        c["bandwidth"]["farm"]["tx_bytes"].as_u64().unwrap() > 0,
        "{c}"
    );
    assert_eq!(c["rtt_ms"]["configured"], 145.0);
    assert!(
        c["roles"][format!("{config}.pool")]["rss_bytes_max"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(c["unmatched_events"], 0, "{config}: {c}");
    // simnet counts its own sockets too: the endpoints this configuration's pool used.
    let simnet = &c["roles"]["simnet"];
    assert!(
        simnet["net_tx_bytes"].as_u64().unwrap() > 0,
        "{config}: {simnet}"
    );
    assert!(
        simnet["net_rx_bytes"].as_u64().unwrap() > 0,
        "{config}: {simnet}"
    );
    let events = out.join("events");
    injected_delay_is_what_time_to_job_adds(&events, config, 72.5);
    block_propagation_is_the_link_delay_plus_the_pool(&events, config, 72.5, c);
    every_role_counts_the_same_bytes(&events, config);
}

#[test]
fn a_role_killed_mid_run_ends_the_run_naming_it() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let marker = out.to_str().unwrap().to_owned();
    let child = lab(&out, &["--duration", "60s"]);
    let mut pool = None;
    wait_for(
        "the pool and a fleet to run",
        Duration::from_secs(60),
        || {
            let roles = roles_of(&marker);
            pool = roles
                .iter()
                .find(|(_, c)| c.contains(" pool "))
                .map(|r| r.0);
            pool.is_some() && roles.iter().any(|(_, c)| c.contains(" fleet "))
        },
    );
    kill(pool.unwrap(), libc::SIGKILL);
    let (status, text) = output(child);
    assert!(!status.success(), "{text}");
    assert!(text.contains("sv1.pool"), "{text}");
    assert!(text.contains("signal 9"), "{text}");
    no_role_left(&marker);
}

#[test]
fn sigint_or_sigterm_to_the_lab_stops_every_role() {
    let _serial = serial();
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("results");
        let marker = out.to_str().unwrap().to_owned();
        let child = lab(&out, &["--duration", "60s"]);
        wait_for("a fleet to run", Duration::from_secs(60), || {
            roles_of(&marker).iter().any(|(_, c)| c.contains(" fleet "))
        });
        kill(child.id(), sig);
        let (status, text) = output(child);
        assert_eq!(status.code(), Some(128 + sig), "{text}");
        assert!(text.contains("interrupted"), "{text}");
        no_role_left(&marker);
    }
}

#[test]
fn killing_the_lab_leaves_no_role_behind() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let marker = out.to_str().unwrap().to_owned();
    let mut child = lab(&out, &["--duration", "60s"]);
    wait_for("a fleet to run", Duration::from_secs(60), || {
        roles_of(&marker).iter().any(|(_, c)| c.contains(" fleet "))
    });
    child.kill().unwrap();
    child.wait().unwrap();
    no_role_left(&marker);
}

/// Ground truth for time to job: from the pool writing a job a device can hash on (SV1: its
/// notify; SV2: a job sent active, or a future job's SetNewPrevHash) to the device having it
/// is the WAN tap's one-way delay plus loopback and the device's read; the pool's own
/// processing (node template to job sent) is measured separately. The median of the first leg
/// must be the injected delay within 1 ms.
fn injected_delay_is_what_time_to_job_adds(events_dir: &Path, config: &str, delay_ms: f64) {
    use events::EventKind;
    use std::collections::HashMap;
    let read = |name: &str| events::read_file(events_dir.join(name)).unwrap().events;
    let mut created = HashMap::new();
    for e in read("simnet.events") {
        if let EventKind::TemplateCreated(t) = e.kind {
            created.entry(t.fingerprint).or_insert(e.ts_ns);
        }
    }
    // SV1 jobs are known by fingerprint (one notify for every device); SV2 jobs by (channel,
    // job id), unique in the pool.
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
    enum Key {
        Fingerprint(events::Fingerprint),
        Channel(u32, events::JobId),
    }
    let mut sent: HashMap<Key, (u64, Option<events::Fingerprint>)> = HashMap::new();
    for e in read(&format!("{config}.pool.events")) {
        let (key, fp) = match e.kind {
            EventKind::JobSent(j) if !j.future => match (j.channel, j.fingerprint) {
                (Some(c), fp) => (Key::Channel(c, j.job_id), fp),
                (None, Some(f)) => (Key::Fingerprint(f), Some(f)),
                (None, None) => continue,
            },
            EventKind::JobActivated(a) => match a.channel {
                Some(c) => (Key::Channel(c, a.job_id), a.fingerprint),
                None => continue,
            },
            _ => continue,
        };
        sent.entry(key).or_insert((e.ts_ns, fp));
    }
    let mut wan = Vec::new();
    let mut processing = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for e in read(&format!("{config}.fleet0.events")) {
        let (key, device) = match e.kind {
            EventKind::JobReceived(j) if !j.future => match (j.channel, j.fingerprint) {
                (Some(c), _) => (Key::Channel(c, j.job_id), j.device),
                (None, Some(f)) => (Key::Fingerprint(f), j.device),
                (None, None) => continue,
            },
            EventKind::JobActivated(a) => match a.channel {
                Some(c) => (Key::Channel(c, a.job_id), a.conn),
                None => continue,
            },
            _ => continue,
        };
        if !seen.insert((key, device)) {
            continue;
        }
        if let Some(&(s, fp)) = sent.get(&key) {
            wan.push((e.ts_ns - s) as f64 / 1e6);
            if let Some(&c) = fp.and_then(|f| created.get(&f)) {
                processing.push(s.saturating_sub(c) as f64 / 1e6);
            }
        }
    }
    assert!(wan.len() >= 8, "too few jobs to judge: {}", wan.len());
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let wan_p50 = median(&mut wan);
    assert!(
        (wan_p50 - delay_ms).abs() <= 1.0,
        "pool-to-device p50 {wan_p50:.3} ms, injected {delay_ms} ms"
    );
    assert!(!processing.is_empty());
    let proc_p50 = median(&mut processing);
    eprintln!(
        "{config}: time to job = pool processing p50 {proc_p50:.3} ms + WAN p50 {wan_p50:.3} ms (injected {delay_ms} ms)"
    );
}

/// Ground truth for block propagation: from the device sending the block-solving share to the
/// tap releasing it toward the pool is the injected one-way delay (within 5 ms; SV1, whose
/// lines the tap reads); for SV2, whose frames are encrypted, the pool's own `BlockSubmitted`
/// comes no sooner than the delay. The rest is the pool's check, store and submission, and
/// results.json's figure is their sum.
fn block_propagation_is_the_link_delay_plus_the_pool(
    events_dir: &Path,
    config: &str,
    delay_ms: f64,
    results: &serde_json::Value,
) {
    use events::EventKind;
    use std::collections::HashMap;
    let read = |name: &str| events::read_file(events_dir.join(name)).unwrap().events;
    let mut accepted = HashMap::new();
    for e in read("simnet.events") {
        if let EventKind::BlockResult(b) = e.kind {
            if b.accepted {
                accepted.insert(b.hash, e.ts_ns);
            }
        }
    }
    // results.json counts blocks whose solving share was sent in the measured window (the
    // lab's marks); a block found in the warm-up or the drain is not counted.
    let mut marks = HashMap::new();
    for e in read("lab.events") {
        if let EventKind::Mark(m) = e.kind {
            marks.insert(m.name.as_str().to_owned(), e.ts_ns);
        }
    }
    let measured = marks["warmup_end"]..marks["drain_start"];
    let mut solving = Vec::new();
    for e in read(&format!("{config}.fleet0.events")) {
        if let EventKind::ShareSent(s) = e.kind {
            if let Some(h) = s.hash.filter(|h| accepted.contains_key(h)) {
                if measured.contains(&e.ts_ns) {
                    solving.push((s.job_id, s.nonce, h, e.ts_ns, accepted[&h]));
                }
            }
        }
    }
    let found = results["blocks"]["found"].as_u64().unwrap();
    assert_eq!(solving.len() as u64, found, "{}", results["blocks"]);
    if solving.is_empty() {
        eprintln!("no block found in this run: propagation not checked");
        return;
    }
    let mut relayed = HashMap::new();
    for e in read(&format!("{config}.tap0.events")) {
        if let EventKind::ShareSent(s) = e.kind {
            relayed.entry((s.job_id, s.nonce)).or_insert(e.ts_ns);
        }
    }
    let mut submitted = HashMap::new();
    for e in read(&format!("{config}.pool.events")) {
        if let EventKind::BlockSubmitted(b) = e.kind {
            submitted.entry(b.hash).or_insert(e.ts_ns);
        }
    }
    let mut total = Vec::new();
    for (job, nonce, hash, sent, accepted_at) in solving {
        let at_pool = match relayed.get(&(job, nonce)) {
            Some(&at_tap) => {
                // One sample, not a median: the device's send and the tap's release are each
                // a wake-up on a loaded machine, so the bound is looser than time to job's.
                let link = (at_tap - sent) as f64 / 1e6;
                assert!(
                    link >= delay_ms && link - delay_ms <= 5.0,
                    "{config}: device to tap release {link:.3} ms, injected {delay_ms} ms"
                );
                at_tap
            }
            None => {
                let at = submitted[&hash];
                let link = (at - sent) as f64 / 1e6;
                assert!(
                    link >= delay_ms,
                    "{config}: the pool submitted {link:.3} ms after the device sent, under the {delay_ms} ms link"
                );
                at
            }
        };
        let pool = (accepted_at - at_pool) as f64 / 1e6;
        assert!(
            (0.0..100.0).contains(&pool),
            "{config}: pool and node took {pool:.3} ms"
        );
        total.push((accepted_at - sent) as f64 / 1e6);
    }
    total.sort_by(f64::total_cmp);
    let reported = results["block_propagation_ms"]["max"].as_f64().unwrap();
    assert!(
        (reported - total[total.len() - 1]).abs() < 0.01,
        "results.json says {reported} ms, the events {total:?}"
    );
}

/// Ground truth for traffic: what the devices wrote is what the tap carried up and the pool
/// read, and what the pool wrote is what the tap carried down and the devices read, byte for
/// byte, each role counting its own sockets.
fn every_role_counts_the_same_bytes(events_dir: &Path, config: &str) {
    use events::{Direction, EventKind};
    let sum = |name: &str, d: Direction| -> u64 {
        events::read_file(events_dir.join(name))
            .unwrap()
            .events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::LinkBytes(b) if b.direction == d => Some(b.bytes),
                _ => None,
            })
            .sum()
    };
    for d in [Direction::Up, Direction::Down] {
        let (fleet, tap, pool) = (
            sum(&format!("{config}.fleet0.events"), d),
            sum(&format!("{config}.tap0.events"), d),
            sum(&format!("{config}.pool.events"), d),
        );
        assert!(fleet > 0, "{config} {d:?}: the fleet counted nothing");
        match d {
            // Devices stop sending before anything stops: every byte arrives.
            Direction::Up => assert_eq!(
                (fleet, pool),
                (tap, tap),
                "{config} up: fleet, pool and tap disagree"
            ),
            // Jobs still in flight when the fleets exit, and the pool's goodbyes, are counted
            // by the senders only: never more downstream than upstream, and little less.
            Direction::Down => {
                assert!(
                    fleet <= tap && tap <= pool,
                    "{config} down: {fleet} {tap} {pool}"
                );
                assert!(
                    pool - fleet <= pool / 10,
                    "{config} down: {fleet} {tap} {pool}"
                );
            }
        }
    }
}

/// D-ref: the same SV2 devices on the reference pool_sv2, which the lab starts from its own
/// minimal config. Needs pool_sv2 0.7.0 installed (CI's interop step installs it first), so it
/// is ignored by default and run by CI on its own.
#[test]
#[ignore = "needs the reference pool_sv2 installed; CI runs it after the interop step"]
fn d_ref_runs_the_reference_pool_beside_ours() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    // Blocks every 3 s: new tips in a short run, for time to job after a tip.
    let child = lab_of(
        &out,
        &["D", "D-ref"],
        &["--duration", "20s", "--block-interval", "3s"],
    );
    let (status, text) = output(child);
    assert!(status.success(), "{text}");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let version = results["context"]["third_party"]["pool_sv2"]
        .as_str()
        .unwrap_or_default();
    assert!(version.contains("0.7.0"), "{}", results["context"]);
    let c = &results["configs"]["D-ref"];
    let shares = &c["shares"];
    assert!(shares["accepted"].as_u64().unwrap() > 0, "{shares}");
    let other: u64 = shares["rejected_by_reason"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.as_str() != "stale")
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    assert_eq!(other, 0, "{shares}");
    // Standard jobs of a pool without events cannot be tied to templates: said, not guessed.
    assert_eq!(c["unmatched_events"], 0, "{c}");
    let ttj = &c["time_to_job_ms"];
    assert_eq!(ttj["n"], 0, "{ttj}");
    assert!(
        ttj["absent_reason"]
            .as_str()
            .unwrap()
            .contains("third-party"),
        "{ttj}"
    );
    let tip = &c["time_to_job_prevhash_ms"];
    assert!(tip["n"].as_u64().unwrap() > 0, "{tip}");
    assert!(tip["p50"].as_f64().unwrap() > 72.5, "{tip}");
    let lat = &c["share_latency_ms"];
    assert!(lat["p50"].as_f64().unwrap() > 145.0, "{lat}");
    assert!(c["roles"]["D-ref.pool"]["cpu_pct_mean"].is_number(), "{c}");
    assert!(out.join("D-ref.pool_sv2.toml").is_file());
    no_role_left(out.to_str().unwrap());
}
