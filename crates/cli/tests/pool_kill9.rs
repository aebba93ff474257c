//! No acknowledged share is lost when the pool is killed with SIGKILL: for `--durability
//! strict` and `batched`, on the SV1 and the SV2 front end, 100 devices of `stratumlab fleet`
//! mine while the pool is killed at random moments and restarted on the same store and
//! address. Every share a device saw acknowledged (its `share_result` events) must be in the
//! store afterwards, and the restarted pool must serve.
//!
//! CI kills each pool 5 times; `STRATUMLAB_KILLS=50` runs the longer, documented trial (see
//! docs/operations.md). Each run prints its figures and the seed of its kill moments
//! (`STRATUMLAB_KILL_SEED` replays one).

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{dump_events, free_port, status_within, stored_share_hashes, Role, PAYOUT};

/// A small deterministic generator for the kill moments (xorshift64*).
struct Moments(u64);

impl Moments {
    /// A delay between `lo` and `hi` milliseconds.
    fn next_ms(&mut self, lo: u64, hi: u64) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        lo + x.wrapping_mul(0x2545_f491_4f6c_dd1d) % (hi - lo)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Front {
    Sv1,
    Sv2,
}

/// The pool (its authority key pair in a file beside its store, the same across restarts), its
/// HTTP address, and (SV2) its authority public key.
fn start_pool(
    front: Front,
    rpc: &str,
    store: &Path,
    durability: &str,
    port: u16,
) -> (Role, String, Option<String>) {
    let key_file = store.with_extension("key");
    let listen = format!("127.0.0.1:{port}");
    let (flag, line) = match front {
        Front::Sv1 => ("--sv1-listen", "sv1 listening on"),
        Front::Sv2 => ("--sv2-listen", "sv2 listening on"),
    };
    let p = Role::start_on_node(
        "pool",
        rpc,
        &[
            flag,
            &listen,
            "--http-listen",
            "127.0.0.1:0",
            "--payout-address",
            PAYOUT,
            "--start-difficulty",
            "0.00002",
            "--min-difficulty",
            "0.00002",
            "--shares-per-minute",
            "600",
            "--store",
            store.to_str().unwrap(),
            "--durability",
            durability,
            "--authority-key-file",
            key_file.to_str().unwrap(),
        ],
    );
    let key = (front == Front::Sv2).then(|| p.line("sv2 authority public key"));
    p.line(line);
    let http = p.line("http listening on");
    (p, http, key)
}

/// The fleet: 100 devices that reconnect quickly, for as long as the trial lasts.
fn start_fleet(
    front: Front,
    port: u16,
    key: Option<&str>,
    events: &Path,
    duration_s: u64,
) -> Child {
    let protocol = match front {
        Front::Sv1 => "sv1",
        Front::Sv2 => "sv2",
    };
    Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .arg("fleet")
        .args(key.map(|k| ["--authority-key", k]).iter().flatten())
        .args([
            "--pool",
            &format!("127.0.0.1:{port}"),
            "--protocol",
            protocol,
            "--devices",
            "100",
            "--hash-budget",
            "3MH/s",
            "--nominal-hash-rate",
            "30kH/s",
            "--reconnect-base",
            "100ms",
            "--reconnect-max",
            "500ms",
            "--connect-rate",
            "0",
            "--duration",
            &format!("{duration_s}s"),
            "--drain",
            "1s",
            "--events",
            events.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The share hashes (internal byte order) the devices saw acknowledged, and how many shares
/// they sent: each `share_result` the fleet received as accepted, matched to the latest
/// `share_sent` of the same device, sequence number and nonce.
fn acknowledged(events: &Path) -> (Vec<[u8; 32]>, u64) {
    let mut sent: HashMap<(u64, u64, u64), [u8; 32]> = HashMap::new();
    let mut acked = Vec::new();
    let mut count = 0;
    for e in dump_events(events) {
        let key = |device: &str| {
            (
                e[device].as_u64().unwrap(),
                e["seq"].as_u64().unwrap(),
                e["nonce"].as_u64().unwrap(),
            )
        };
        match e["kind"].as_str() {
            Some("share_sent") => {
                let hex = e["hash"].as_str().expect("the fleet computes its hashes");
                let mut h: [u8; 32] = primitives::hex::decode(hex).unwrap().try_into().unwrap();
                h.reverse();
                sent.insert(key("device"), h);
                count += 1;
            }
            Some("share_result")
                if e["perspective"] == "received" && e["verdict"] == "accepted" =>
            {
                let h = sent
                    .get(&key("conn"))
                    .unwrap_or_else(|| panic!("a verdict for no share sent: {e}"));
                acked.push(*h);
            }
            _ => {}
        }
    }
    (acked, count)
}

fn kill_trial(front: Front, durability: &str) {
    let kills: u32 = std::env::var("STRATUMLAB_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(5);
    let seed = std::env::var("STRATUMLAB_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    let mut moments = Moments(seed);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pool.sqlite");
    let events = dir.path().join("fleet.events");
    let (simnet, at) = support::simnet().rpc().start();
    let rpc = at.rpc().to_owned();
    let port = free_port();
    let (mut pool, _, key) = start_pool(front, &rpc, &store, durability, port);
    // Long enough for every kill (at most 3 s each, plus a restart) and the last stretch.
    let fleet_s = u64::from(kills) * 4 + 8;
    let mut fleet = start_fleet(front, port, key.as_deref(), &events, fleet_s);
    let started = Instant::now();
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(moments.next_ms(800, 2500)));
        pool.kill9();
        (pool, _, _) = start_pool(front, &rpc, &store, durability, port);
    }
    // The restarted pool serves: devices come back and their shares are accepted.
    let (last, http, last_key) = {
        pool.kill9();
        start_pool(front, &rpc, &store, durability, port)
    };
    assert_eq!(last_key, key, "the restarted pool's authority key");
    status_within(
        &http,
        "the pool restarted on its store serves no shares",
        Duration::from_secs(20),
        || last.log_tail(),
        |s| s["shares"]["accepted"].as_u64().unwrap_or(0) >= 20,
    );
    // The fleet ends by itself (its duration), writing its events out.
    let limit = started + Duration::from_secs(fleet_s + 30);
    let status = loop {
        if let Some(status) = fleet.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > limit {
            let _ = fleet.kill();
            panic!("the fleet did not end");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "fleet exit {status:?}");
    last.stop();

    let stored = stored_share_hashes(&store);
    let (acked, sent) = acknowledged(&events);
    let missing = acked.iter().filter(|h| !stored.contains(*h)).count();
    eprintln!(
        "{front:?} {durability}: {} kills (seed {seed}), {sent} shares sent, {} acknowledged, \
         {} in the store, {missing} acknowledged and missing",
        kills + 1,
        acked.len(),
        stored.len()
    );
    assert!(
        acked.len() as u32 >= 20 * kills,
        "too few acknowledged shares to judge: {}",
        acked.len()
    );
    assert_eq!(
        missing,
        0,
        "{front:?} {durability}: {missing} of {} acknowledged shares are not in the store \
         (seed {seed})",
        acked.len()
    );
    simnet.stop();
}

#[test]
fn sv1_strict_kill_9() {
    kill_trial(Front::Sv1, "strict");
}

#[test]
fn sv1_batched_kill_9() {
    kill_trial(Front::Sv1, "batched");
}

#[test]
fn sv2_strict_kill_9() {
    kill_trial(Front::Sv2, "strict");
}

#[test]
fn sv2_batched_kill_9() {
    kill_trial(Front::Sv2, "batched");
}
