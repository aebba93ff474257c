//! `stratumlab pool` as a process, against `stratumlab simnet`: it serves SV1 miners, stores
//! what it acknowledges, and an acknowledged share survives `kill -9`.

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use primitives::{merkle_root_from_branch, sha256d, Difficulty, Hash256};
use support::{
    healthy_within, http_get, http_get_json, stored_share_hashes, within, Role, SmallFs, PAYOUT,
};

fn simnet() -> (Role, String) {
    let (s, at) = support::simnet().rpc().start();
    (s, at.rpc().to_owned())
}

fn pool(rpc: &str, store: &str, durability: &str) -> (Role, String) {
    pool_with(rpc, store, durability, &[])
}

fn pool_with(rpc: &str, store: &str, durability: &str, extra: &[&str]) -> (Role, String) {
    let mut args = vec![
        "--sv1-listen",
        "127.0.0.1:0",
        "--payout-address",
        PAYOUT,
        "--start-difficulty",
        "0.0000001",
        "--min-difficulty",
        "0.0000001",
        "--shares-per-minute",
        "1000000",
        "--store",
        store,
        "--durability",
        durability,
    ];
    args.extend(extra);
    let p = Role::start_on_node("pool", rpc, &args);
    let sv1 = p.line("sv1 listening on");
    (p, sv1)
}

/// A miner that grinds real shares as fast as it can and remembers which ones the pool
/// acknowledged (by header hash).
struct Miner {
    stream: TcpStream,
    lines: mpsc::Receiver<String>,
    en1: Vec<u8>,
    en2_size: usize,
    difficulty: f64,
    job: Option<Job>,
}

/// A notify's fields: id, coinb1, coinb2, branch, version, nbits, prev hash, ntime.
type Job = (
    String,
    Vec<u8>,
    Vec<u8>,
    Vec<Hash256>,
    u32,
    u32,
    Hash256,
    u32,
);

impl Miner {
    fn connect(addr: &str) -> Miner {
        let stream = TcpStream::connect(addr).unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in reader.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut m = Miner {
            stream,
            lines,
            en1: Vec::new(),
            en2_size: 0,
            difficulty: 1.0,
            job: None,
        };
        m.send(r#"{"id":1,"method":"mining.subscribe","params":["test/1"]}"#);
        m.send(&format!(
            r#"{{"id":2,"method":"mining.authorize","params":["{PAYOUT}.w","x"]}}"#
        ));
        let deadline = Instant::now() + Duration::from_secs(20);
        while m.job.is_none() {
            assert!(Instant::now() < deadline, "no job from the pool");
            let l = m.lines.recv_timeout(Duration::from_secs(20)).unwrap();
            m.absorb(&l);
        }
        m
    }

    fn send(&mut self, line: &str) {
        self.try_send(line).unwrap();
    }

    fn try_send(&mut self, line: &str) -> std::io::Result<()> {
        self.stream.write_all(format!("{line}\n").as_bytes())
    }

    /// Learns from a pool line; returns `(id, accepted)` for replies.
    fn absorb(&mut self, line: &str) -> Option<(u64, bool)> {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        match v["method"].as_str() {
            Some("mining.set_difficulty") => self.difficulty = v["params"][0].as_f64().unwrap(),
            Some("mining.notify") => {
                let (env, _) = sv1::parse_line(line.as_bytes()).unwrap();
                let n = sv1::Notify::parse(&env).unwrap();
                self.job = Some((
                    n.job_id.to_owned(),
                    n.coinb1,
                    n.coinb2,
                    n.merkle_branch,
                    n.version,
                    n.nbits,
                    n.prev_hash,
                    n.ntime,
                ));
            }
            Some(_) => {}
            None => {
                let id = v["id"].as_u64()?;
                if id == 1 {
                    let r = &v["result"];
                    self.en1 = primitives::hex::decode(r[1].as_str().unwrap()).unwrap();
                    self.en2_size = r[2].as_u64().unwrap() as usize;
                }
                return Some((id, v["result"] == serde_json::Value::Bool(true)));
            }
        }
        None
    }

    /// Grinds one share on the current job; returns its submit line and header hash.
    fn share(&self, n: u64) -> (String, Hash256) {
        let (job_id, c1, c2, branch, version, bits, prev, ntime) = self.job.clone().unwrap();
        let target = Difficulty::saturating(self.difficulty).to_target();
        let en2 = &n.to_be_bytes()[8 - self.en2_size..];
        let coinbase = [&c1[..], &self.en1, en2, &c2].concat();
        let root = merkle_root_from_branch(sha256d(&coinbase), &branch);
        let mut header = [0u8; 80];
        header[0..4].copy_from_slice(&version.to_le_bytes());
        header[4..36].copy_from_slice(&prev.0);
        header[36..68].copy_from_slice(&root.0);
        header[68..72].copy_from_slice(&ntime.to_le_bytes());
        header[72..76].copy_from_slice(&bits.to_le_bytes());
        for nonce in 0u32.. {
            header[76..80].copy_from_slice(&nonce.to_le_bytes());
            let h = sha256d(&header);
            if target.is_met_by(&h.0) {
                let line = format!(
                    r#"{{"id":{},"method":"mining.submit","params":["{PAYOUT}.w","{job_id}","{}","{ntime:08x}","{nonce:08x}"]}}"#,
                    n + 100,
                    primitives::hex::encode(en2),
                );
                return (line, h);
            }
        }
        unreachable!()
    }
}

#[test]
fn acknowledged_shares_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pool.sqlite");
    let (simnet, rpc) = simnet();
    let (pool, sv1) = pool(&rpc, store.to_str().unwrap(), "batched");
    let mut m = Miner::connect(&sv1);
    let mut sent: HashMap<u64, Hash256> = HashMap::new();
    let mut acked: Vec<Hash256> = Vec::new();
    let started = Instant::now();
    let mut n = 0u64;
    // Mine under load for a while, then kill the pool with replies in flight.
    while started.elapsed() < Duration::from_millis(1500) {
        // Under the pool's per-connection message rate (1000/s): 10 shares per 20 ms.
        for _ in 0..10 {
            let (line, hash) = m.share(n);
            sent.insert(n + 100, hash);
            if m.try_send(&line).is_err() {
                panic!(
                    "the pool closed the connection; its log:\n{}",
                    pool.log_tail()
                );
            }
            n += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
        while let Ok(l) = m.lines.try_recv() {
            if let Some((id, true)) = m.absorb(&l) {
                if let Some(h) = sent.get(&id) {
                    acked.push(*h);
                }
            }
        }
    }
    pool.kill9();
    // Every reply the miner got before the kill counts.
    while let Ok(l) = m.lines.recv_timeout(Duration::from_millis(200)) {
        if let Some((id, true)) = m.absorb(&l) {
            if let Some(h) = sent.get(&id) {
                acked.push(*h);
            }
        }
    }
    assert!(
        acked.len() > 50,
        "too few acknowledged shares to test: {}",
        acked.len()
    );
    let stored = stored_share_hashes(&store);
    let missing = acked.iter().filter(|h| !stored.contains(&h.0)).count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} acknowledged shares are not in the store ({} sent)",
        acked.len(),
        n
    );

    // Restarted on the same store, the pool carries on: the worker that connects again goes
    // on from the shares the store holds for it.
    let (pool, sv1) = pool_with(
        &rpc,
        store.to_str().unwrap(),
        "batched",
        &["--http-listen", "127.0.0.1:0"],
    );
    let http = pool.line("http listening on");
    let mut m = Miner::connect(&sv1);
    let (line, _) = m.share(1_000_000);
    m.try_send(&line).unwrap();
    let worker = within(
        "the connected worker's accepted share",
        Duration::from_secs(15),
        || pool.log_tail(),
        || {
            let page = http_get_json(&http, "/api/workers");
            page["workers"]
                .as_array()
                .and_then(|l| l.iter().find(|w| w["connections"] == 1))
                .filter(|w| w["accepted"].as_u64() > Some(stored.len() as u64))
                .cloned()
                .ok_or_else(|| page.to_string())
        },
    );
    assert_eq!(
        worker["accepted"].as_u64(),
        Some(stored.len() as u64 + 1),
        "{worker}"
    );
    pool.stop();
    simnet.stop();
}

#[test]
fn bad_input_gets_errors_and_the_pool_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pool.sqlite");
    let (simnet, rpc) = simnet();
    let (pool, sv1) = pool(&rpc, store.to_str().unwrap(), "off");
    // A peer that sends garbage, wrong parameters, unknown methods and a huge line.
    let mut bad = TcpStream::connect(&sv1).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reader = BufReader::new(bad.try_clone().unwrap());
    let mut ask = |line: &str| -> String {
        bad.write_all(line.as_bytes()).unwrap();
        bad.write_all(b"\n").unwrap();
        let mut l = String::new();
        reader.read_line(&mut l).unwrap();
        l
    };
    assert!(ask("{not json").contains("\"error\":[20,"));
    assert!(ask(r#"{"id":5,"method":"mining.subscribe","params":7}"#).contains("\"error\":[20,"));
    assert!(ask(r#"{"id":6,"method":"no.such","params":[]}"#).contains("\"error\":[20,"));
    assert!(
        ask(r#"{"id":7,"method":"mining.submit","params":["a","b","c","d","e"]}"#)
            .contains("\"error\":[25,")
    );
    // A well-behaved miner still mines meanwhile.
    let mut m = Miner::connect(&sv1);
    let (line, _) = m.share(1);
    m.send(&line);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let l = m.lines.recv_timeout(Duration::from_secs(10)).unwrap();
        if let Some((101, ok)) = m.absorb(&l) {
            assert!(ok, "share refused: {l}");
            break;
        }
        assert!(Instant::now() < deadline);
    }
    // A line over the limit: an error, then the pool closes that connection only.
    let huge = "x".repeat(64 * 1024);
    bad.write_all(huge.as_bytes()).unwrap();
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut bad, &mut rest);
    assert!(rest.contains("Line too long"), "{rest}");
    let (line, _) = m.share(2);
    m.send(&line);
    loop {
        let l = m.lines.recv_timeout(Duration::from_secs(10)).unwrap();
        if let Some((102, ok)) = m.absorb(&l) {
            assert!(ok);
            break;
        }
    }
    pool.stop();
    simnet.stop();
}

/// What came back for one share: acknowledged, or an error with its message.
#[derive(Debug)]
enum Reply {
    Ack,
    Error(String),
}

/// Reads what the pool sent until `deadline`: replies to shares (ids from 100) by id.
fn replies(m: &mut Miner, until: Instant, got: &mut HashMap<u64, Reply>) {
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        let Ok(l) = m.lines.recv_timeout(left) else {
            return;
        };
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        m.absorb(&l);
        let Some(id) = v["id"].as_u64().filter(|&id| id >= 100) else {
            continue;
        };
        let reply = if v["result"] == serde_json::Value::Bool(true) {
            Reply::Ack
        } else {
            Reply::Error(v["error"].to_string())
        };
        got.insert(id, reply);
    }
}

/// The store's file system fills up under a mining pool. The share in flight when a write
/// fails waits for the store's retry, and is answered "not confirmed" once that has failed for
/// the pool's wait limit (5 s), its miner staying connected; every share after it is refused
/// with a reason while the miners stay connected; every endpoint says so within seconds; and
/// once there is room again the pool acknowledges shares by itself, without a restart. Every
/// share it acknowledged, before, during and after, is in the store; none it refused is; and
/// the unconfirmed one is, written when the store recovered.
#[test]
fn a_full_disk_refuses_shares_with_a_reason_is_seen_and_heals_by_itself() {
    let fs = SmallFs::new("2m");
    let store = fs.path().join("pool.sqlite");
    let (simnet, rpc) = simnet();
    let (pool, sv1) = pool_with(
        &rpc,
        store.to_str().unwrap(),
        "batched",
        &["--http-listen", "127.0.0.1:0"],
    );
    let http = pool.line("http listening on");
    let pid = pool.pid();
    // Two miners, each with its own share numbers (and so its own ids and hashes).
    let mut a = Miner::connect(&sv1);
    let mut b = Miner::connect(&sv1);
    let mut sent: HashMap<u64, Hash256> = HashMap::new();
    let mut got: HashMap<u64, Reply> = HashMap::new();
    let mut next = [0u64, 1_000_000];
    // Sends `count` shares from miner `who` and reads its replies for a while; returns the ids.
    let mut mine =
        |m: &mut Miner, who: usize, count: u64, wait_ms: u64, got: &mut HashMap<u64, Reply>| {
            let from = next[who] + 100;
            for _ in 0..count {
                let (line, hash) = m.share(next[who]);
                sent.insert(next[who] + 100, hash);
                m.send(&line);
                next[who] += 1;
            }
            replies(m, Instant::now() + Duration::from_millis(wait_ms), got);
            from..next[who] + 100
        };
    mine(&mut a, 0, 20, 300, &mut got);
    mine(&mut b, 1, 20, 300, &mut got);
    assert_eq!(http_get(&http, "/healthz").0, 200, "{}", pool.log_tail());

    fs.fill(pid);
    // Miner a mines until a write fails: its share then waits for the store.
    let deadline = Instant::now() + Duration::from_secs(30);
    let held = loop {
        let ids = mine(&mut a, 0, 1, 500, &mut got);
        if !got.contains_key(&ids.start) && http_get(&http, "/healthz").0 == 503 {
            break ids.start;
        }
        assert!(
            Instant::now() < deadline,
            "no failed write within 30 s of filling the disk ({}); the pool's log:\n{}",
            fs.kind(),
            pool.log_tail()
        );
    };
    let failed_at = Instant::now();
    // Miner b's shares are refused with the reason, and b stays connected.
    let refused = mine(&mut b, 1, 10, 1000, &mut got);
    for id in refused.clone() {
        match got.get(&id) {
            Some(Reply::Error(e)) => assert!(e.contains("share store cannot write"), "{e}"),
            other => panic!("share {id} while the disk is full: {other:?}"),
        }
    }
    // The endpoints say so.
    let (code, body) = http_get(&http, "/healthz");
    assert_eq!(code, 503, "{body}");
    assert!(body.starts_with("not serving: store ("), "{body}");
    let status = http_get_json(&http, "/api/status");
    assert_eq!(status["serving"], false);
    assert_eq!(status["not_serving_reason"], "store");
    let error = status["store"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        error.contains("full") || error.contains("large") || error.contains("I/O"),
        "store.error: {status}"
    );
    assert_eq!(status["dependencies"]["store"]["up"], false, "{status}");
    assert_eq!(status["dependencies"]["node"]["up"], true, "{status}");
    let metrics = http_get(&http, "/metrics").1;
    assert!(
        metrics.contains("stratumlab_pool_dependency_up{dependency=\"store\"} 0"),
        "{metrics}"
    );
    assert!(metrics.contains("stratumlab_pool_not_serving{reason=\"store\"} 1"));
    // The held share is answered once the store has failed for the wait limit: an error that
    // says it is not confirmed, not an acknowledgement and not a closed connection.
    while !got.contains_key(&held) && failed_at.elapsed() < Duration::from_secs(15) {
        replies(
            &mut a,
            Instant::now() + Duration::from_millis(200),
            &mut got,
        );
    }
    match got.get(&held) {
        Some(Reply::Error(e)) => assert!(e.contains("not confirmed"), "{e}"),
        other => panic!(
            "the share in flight when the disk filled, {:?} after: {other:?}; the pool's log:\n{}",
            failed_at.elapsed(),
            pool.log_tail()
        ),
    }
    // Its miner is still connected: its next share is refused with the reason.
    let next = mine(&mut a, 0, 1, 1000, &mut got);
    assert!(
        matches!(got.get(&next.start), Some(Reply::Error(e)) if e.contains("cannot write")),
        "miner a after its share went unconfirmed: {:?}",
        got.get(&next.start)
    );

    fs.free(pid);
    // The writer's next retry succeeds: new shares are acknowledged again.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ids = mine(&mut b, 1, 5, 300, &mut got);
        if ids
            .into_iter()
            .all(|id| matches!(got.get(&id), Some(Reply::Ack)))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "shares still refused 20 s after the disk has room; the pool's log:\n{}",
            pool.log_tail()
        );
    }
    assert_eq!(http_get(&http, "/healthz").0, 200);
    let status = http_get_json(&http, "/api/status");
    assert_eq!(status["dependencies"]["store"]["up"], true, "{status}");
    assert_eq!(status["dependencies"]["store"]["failures"], 1, "{status}");
    assert!(status["store"]["error"].is_null());
    let metrics = http_get(&http, "/metrics").1;
    assert!(metrics.contains("stratumlab_pool_dependency_failures_total{dependency=\"store\"} 1"));
    mine(&mut a, 0, 20, 1000, &mut got);
    pool.stop();

    let stored = stored_share_hashes(&store);
    let (mut acked, mut refused) = (0, 0);
    for (id, reply) in &got {
        let hash = sent[id].0;
        match reply {
            Reply::Ack => {
                acked += 1;
                assert!(
                    stored.contains(&hash),
                    "share {id} acknowledged, not stored"
                );
            }
            // Taken before the failure, held by the store's writer, written on recovery.
            Reply::Error(e) if e.contains("not confirmed") => {
                assert!(
                    stored.contains(&hash),
                    "share {id} unconfirmed, never stored"
                )
            }
            Reply::Error(_) => {
                refused += 1;
                assert!(!stored.contains(&hash), "share {id} refused, yet stored");
            }
        }
    }
    assert!(
        acked >= 60 && refused >= 10,
        "{acked} acknowledged, {refused} refused"
    );
    eprintln!(
        "{}: {acked} shares acknowledged and stored, {refused} refused while full",
        fs.kind()
    );
    simnet.stop();
}

/// The node's RPC password can stay off the command line: from the environment, the pool
/// still authenticates to the node and serves.
#[test]
fn the_rpc_password_can_come_from_the_environment() {
    let (simnet, rpc) = simnet();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pool.sqlite");
    let url = format!("http://{rpc}");
    // The pool with the password from the environment only; its HTTP address.
    let start = |password: &str| {
        let pool = Role::start_with_env(
            "pool",
            &[
                "--sv1-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--node-rpc",
                &url,
                "--rpc-user",
                "u",
                "--payout-address",
                PAYOUT,
                "--store",
                store.to_str().unwrap(),
            ],
            &[("STRATUMLAB_RPC_PASSWORD", password)],
        );
        pool.line("sv1 listening on");
        let http = pool.line("http listening on");
        (pool, http)
    };
    let (pool, http) = start("p");
    healthy_within(&http, Duration::from_secs(20), || pool.log_tail());
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pool.pid())).unwrap();
    assert!(
        !cmdline.split(|&b| b == 0).any(|a| a == b"p"),
        "the password is on the command line"
    );
    pool.stop();
    // A wrong one from the environment is refused by the node: the pool does not serve.
    let (pool, http) = start("wrong");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(http_get(&http, "/healthz").0, 503);
    pool.stop();
    simnet.stop();
}
