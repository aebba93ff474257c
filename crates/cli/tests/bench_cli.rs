//! `stratumlab bench sv2-pool` and `bench translator` end to end at a small load: real simnet,
//! pools, translators and fleets pinned to two cores of 127.0.0.1, rows.jsonl read back, the
//! tables printed.
//!
//! The cases against third-party software are ignored by default: they need pool_sv2 or
//! translator_sv2 ($STRATUMLAB_POOL_SV2, $STRATUMLAB_TRANSLATOR_SV2, the CI tools cache, or PATH;
//! `bash scripts/install-tools.sh NAME` installs them) and the fleet's floor pools (built by
//! `cargo test --workspace`). CI runs them by name.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// One bench at a time: each pins its roles to the same two cores and measures them there.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The first two cores this process may run on (`0,1` on most machines; a container's cpuset
/// may leave those out), as `--cpus` takes them.
fn two_cores() -> String {
    // SAFETY: an all-zero cpu_set_t is the empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is valid and writable for `size` bytes; pid 0 is this thread.
    assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut set) }, 0);
    // SAFETY: every index tested is below the set's capacity.
    let cores: Vec<String> = (0..8 * size)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .take(2)
        .map(|c| c.to_string())
        .collect();
    assert_eq!(
        cores.len(),
        2,
        "the bench pins a role and its load to two cores"
    );
    cores.join(",")
}

/// Runs `bench WHICH` with `rows` at 20 shares/s over 20 devices and returns (rows.jsonl,
/// stdout).
fn bench(which: &str, dir: &Path, rows: &str) -> (Vec<Value>, String) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args([
            "bench",
            which,
            "--cpus",
            &two_cores(),
            "--quick",
            "--devices",
            "20",
            "--shares-per-s",
            "20",
            "--warmup",
            "3s",
            "--window",
            "5s",
            "--rows",
            rows,
            "--out",
        ])
        .arg(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jsonl = std::fs::read_to_string(dir.join("rows.jsonl")).unwrap();
    let rows = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (rows, stdout)
}

/// A row measured what it must: every device ready, shares accepted in the window at about the
/// offered rate, the pool's CPU per share and latency from the window.
fn check_row(r: &Value, label: &str) {
    assert_eq!(r["label"], label, "{r}");
    assert_eq!(r["ready"], 20, "{r}");
    assert_eq!(r["protocol_errors"], 0, "{r}");
    let accepted = r["accepted"].as_u64().unwrap();
    // 20/s offered over a 5 s window; the debug fleet may fall short, never to nothing.
    assert!((20..=150).contains(&accepted), "{r}");
    let cpu = r["pool_cpu_us_per_share"].as_f64().unwrap();
    assert!(cpu > 0.0 && cpu.is_finite(), "{r}");
    let (p50, p99) = (r["p50_ms"].as_f64().unwrap(), r["p99_ms"].as_f64().unwrap());
    assert!(0.0 < p50 && p50 <= p99, "{r}");
    assert!(r["latency_n"].as_u64().unwrap() > 0, "{r}");
    assert!(
        !r["pool_cpu_s_by_thread"].as_object().unwrap().is_empty(),
        "{r}"
    );
}

#[test]
fn ours_with_and_without_durability_are_measured_and_tabled() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, table) = bench("sv2-pool", dir.path(), "ours,ours-dur-off");
    assert_eq!(rows.len(), 2, "{rows:?}");
    check_row(&rows[0], "ours");
    check_row(&rows[1], "ours-dur-off");
    // Each row leaves its roles' files; the store holds the accepted shares.
    for f in [
        "fleet.ev",
        "pool.ev",
        "simnet.ev",
        "pool.sqlite",
        "fleet.json",
    ] {
        assert!(dir.path().join("ours-20").join(f).is_file(), "{f}");
    }
    assert!(table.contains("CPU-us/share"), "{table}");
    assert!(
        table.lines().any(|l| l.starts_with("ours-dur-off ")),
        "{table}"
    );
    assert!(
        table.contains("pool CPU in the window by thread"),
        "{table}"
    );
    // An unknown row is refused before anything starts.
    let out = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args(["bench", "sv2-pool", "--rows", "ours,pool", "--out"])
        .arg(dir.path().join("refused"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown row `pool`"), "{err}");
    assert!(!dir.path().join("refused").exists());
}

#[test]
#[ignore = "needs pool_sv2 (scripts/install-tools.sh installs it) and the floor pools; CI runs it by name"]
fn ours_against_pool_sv2_and_the_floor() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, table) = bench("sv2-pool", dir.path(), "ours,pool_sv2,floor");
    assert_eq!(rows.len(), 3, "{rows:?}");
    check_row(&rows[0], "ours");
    check_row(&rows[1], "pool_sv2");
    check_row(&rows[2], "floor");
    assert!(
        table.contains("20 shares/s offered: pool_sv2 / ours: CPU per share"),
        "{table}"
    );
    assert!(table.contains("floor costs"), "{table}");
    assert!(table.contains("pool_sv2 / floor:"), "{table}");
}

/// A translator row measured what it must: every device ready and answered, shares forwarded
/// and accepted upstream (but through the floor), latency on the devices' side and, where this
/// process may capture packets, on the wire.
fn check_translator_row(r: &Value, label: &str, wire: bool) {
    assert_eq!(r["label"], label, "{r}");
    assert_eq!(r["ready"], 20, "{r}");
    assert_eq!(r["protocol_errors"], 0, "{r}");
    assert!((20..=150).contains(&r["accepted"].as_u64().unwrap()), "{r}");
    if label != "floor" {
        assert!(r["upstream_accepted"].as_u64().unwrap() > 0, "{r}");
        assert!(r["fwd"]["n"].as_u64().unwrap() > 0, "{r}");
    }
    let all = &r["all"];
    assert!(all["n"].as_u64().unwrap() > 0, "{r}");
    assert!(
        all["p50_ms"].as_f64().unwrap() <= all["p99_ms"].as_f64().unwrap(),
        "{r}"
    );
    assert!(r["cpu_us_per_share"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["rss0_kib"].as_f64().unwrap() > 0.0, "{r}");
    if wire {
        let w = &r["wire"][0];
        // The capture sees most of the window's answers, each no slower than the device saw it.
        assert!(
            w["n"].as_u64().unwrap() * 2 >= r["answered"].as_u64().unwrap(),
            "{r}"
        );
        assert!(
            w["p50_ms"].as_f64().unwrap() <= all["p50_ms"].as_f64().unwrap() + 1.0,
            "{r}"
        );
    }
}

/// Whether this process may open a packet socket (root, or CAP_NET_RAW): the wire figures.
fn can_capture() -> bool {
    // SAFETY: plain socket(2), closed at once.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    if fd >= 0 {
        // SAFETY: `fd` was just opened here.
        unsafe { libc::close(fd) };
    }
    fd >= 0
}

#[test]
fn our_translator_is_measured_on_the_devices_side_and_on_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, table) = bench("translator", dir.path(), "ours");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let wire = can_capture();
    check_translator_row(&rows[0], "ours", wire);
    assert_eq!(rows[0]["wire"].is_null(), !wire, "{}", rows[0]);
    for f in ["fleet.ev", "pool.ev", "fleet.json", "translator.log"] {
        assert!(dir.path().join("ours").join(f).is_file(), "{f}");
    }
    assert!(table.lines().any(|l| l.starts_with("ours ")), "{table}");
    assert!(table.contains("KiB/device"), "{table}");
}

#[test]
#[ignore = "needs translator_sv2 (scripts/install-tools.sh installs it), the floor pool and CAP_NET_RAW; CI runs it by name"]
fn our_translator_against_translator_sv2_above_the_floor() {
    assert!(
        can_capture(),
        "the floor row is measured on the wire: run as root"
    );
    let dir = tempfile::tempdir().unwrap();
    let (rows, table) = bench("translator", dir.path(), "floor,ours,translator_sv2");
    assert_eq!(rows.len(), 3, "{rows:?}");
    check_translator_row(&rows[0], "floor", true);
    check_translator_row(&rows[1], "ours", true);
    check_translator_row(&rows[2], "translator_sv2", true);
    assert!(
        table.contains("repetition 1, ours / translator_sv2: p50 "),
        "{table}"
    );
    assert!(table.contains("above the floor on the wire"), "{table}");
    assert!(table.contains("median over 1 repetition(s)"), "{table}");
}
