//! The hostile-client suite: each listening role as a real process on loopback, honest devices
//! (a `stratumlab fleet` from 127.0.0.1) mining through it while attackers from other 127.x
//! addresses try to starve them. For every case:
//!
//! (a) the honest devices keep getting work and verdicts: none of their shares goes
//!     unanswered, some are accepted, and their submit-to-verdict p99 stays within 2x of the
//!     same role's run without attackers, or within 50 ms of it, whichever is larger;
//! (b) the attacker is limited as configured (refused, closed or banned, read from the role's
//!     `/api/status` `admission` counts and from the attacker's own sockets);
//! (c) the role's resident memory stays under [`RSS_BOUND`];
//! (d) nothing honest is lost (the fleet's unanswered and dropped counts are zero).
//!
//! The roles run with small limits ([`edge_flags`]) so that every limit is reached within
//! seconds. Each attacker case uses source addresses of its own, so that one case's bans do not
//! decide the next. Every role, socket and case is bounded in time. The table printed at the
//! end (run with `--nocapture`) lists each case with the figures it met.

mod support;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{http_get_json, run_fleet, Role, Roles, PAYOUT};
use sv2::messages::common::{mining_flags, SetupConnection};
use sv2::messages::job_declaration::{AllocateMiningJobToken, ProvideMissingTransactionsSuccess};
use sv2::messages::mining::{OpenStandardMiningChannel, SubmitSharesStandard, UpdateChannel};
use sv2::messages::{Common, JobDeclaration, Mining};
use sv2::{Limits, Message, NoiseConn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The roles' edge limits in this suite.
const MAX_CONNECTIONS: usize = 300;
const PER_IP: usize = 40;
const CONNECT_RATE: f64 = 20.0;
const MESSAGE_RATE: f64 = 200.0;
const MESSAGE_BURST: f64 = 100.0;
const HANDSHAKE: Duration = Duration::from_secs(2);
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
const BAN_AFTER: u32 = 20;
const MAX_LINE: usize = 1024;
/// How long a role may take beyond a timeout to act on it: every handshake timeout has a timer
/// of its own, so this is only the loaded machine's scheduling.
const SLACK: Duration = Duration::from_millis(2500);
/// The most resident memory any role may reach under attack.
const RSS_BOUND: u64 = 192 << 20;
/// How long the honest fleet mines in each case (the attack runs within it).
const HONEST_RUN: &str = "4s";

/// One case at a time across the whole binary: the p99 comparison needs the machine's cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn edge_flags() -> Vec<String> {
    [
        ("--max-connections", MAX_CONNECTIONS.to_string()),
        ("--max-connections-per-ip", PER_IP.to_string()),
        ("--connect-rate", CONNECT_RATE.to_string()),
        ("--connect-burst", PER_IP.to_string()),
        ("--message-rate", MESSAGE_RATE.to_string()),
        ("--message-burst", MESSAGE_BURST.to_string()),
        ("--handshake-timeout", format!("{}s", HANDSHAKE.as_secs())),
        ("--write-timeout", format!("{}s", WRITE_TIMEOUT.as_secs())),
        ("--invalid-share-ban-after", BAN_AFTER.to_string()),
        ("--ban-duration", "10m".to_owned()),
        ("--max-line", MAX_LINE.to_string()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_owned(), v])
    .collect()
}

/// A role under attack.
struct Target {
    name: &'static str,
    /// Where devices (and attackers) connect.
    addr: SocketAddr,
    /// Its `/api/status`.
    http: String,
    pid: u32,
    /// Who keeps working through the attack.
    honest: Honest,
    /// The baseline p99 (ms) without attackers.
    base_p99: f64,
    /// The third octet of this role's attacker addresses (127.<role>.<case>.<n>).
    octet: u8,
    /// An SV2 listener's authority public key.
    authority: Option<[u8; 32]>,
}

/// The honest side of a case.
enum Honest {
    /// A `stratumlab fleet` with these arguments (the role's address among them).
    Fleet(Vec<String>),
    /// A Job Declaration client asking the JDS for a token every 50 ms: its "shares" are
    /// token requests, its verdicts the tokens.
    JdClient { key: [u8; 32] },
}

/// What one case met, for the table.
struct Row {
    role: &'static str,
    case: &'static str,
    limited: String,
    p99: f64,
    base: f64,
    rss_mb: f64,
}

static ROWS: Mutex<Vec<Row>> = Mutex::new(Vec::new());

fn rss(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn admission(t: &Target) -> Value {
    http_get_json(&t.http, "/api/status")["admission"].clone()
}

/// Asserts that the role counted at least `n` more connections closed for `reason` than in
/// `before` (`what` says what failed), and returns its admission counts. A role may count a
/// close a moment after the peer saw its socket close: the counts are read again for up to 2 s.
fn assert_closed_for(t: &Target, before: &Value, reason: &str, n: u64, what: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(2);
    let after = loop {
        let a = admission(t);
        if count(&a, "closed", reason) >= count(before, "closed", reason) + n
            || Instant::now() > deadline
        {
            break a;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let closed = count(&after, "closed", reason) - count(before, "closed", reason);
    assert!(closed >= n, "{}: {what}: {after}", t.name);
    after
}

fn count(a: &Value, group: &str, reason: &str) -> u64 {
    a[group][reason].as_u64().unwrap_or(0)
}

/// The honest side's run: (p99 ms, the report).
fn honest_run(t: &Target) -> (f64, Value) {
    let fleet = match &t.honest {
        Honest::Fleet(args) => args,
        Honest::JdClient { key } => return rt().block_on(jd_client(t.addr, *key)),
    };
    let mut args = vec![
        "--devices",
        "4",
        "--hash-budget",
        "400kH/s",
        "--duration",
        HONEST_RUN,
        "--drain",
        "3s",
        "--reply-timeout",
        "20s",
        "--json",
    ];
    args.extend(fleet.iter().map(String::as_str));
    let report = run_fleet(&args, Duration::from_secs(60));
    let p99 = report["share_latency_ms"]["p99"]
        .as_f64()
        .unwrap_or(f64::INFINITY);
    (p99, report)
}

fn check_honest(t: &Target, case: &str, report: &Value) {
    let shares = &report["shares"];
    assert_eq!(
        shares["unanswered"].as_u64(),
        Some(0),
        "{}/{case}: honest shares unanswered: {report}",
        t.name
    );
    assert_eq!(
        shares["dropped"].as_u64(),
        Some(0),
        "{}/{case}: honest shares dropped: {report}",
        t.name
    );
    assert!(
        shares["accepted"].as_u64().unwrap_or(0) > 0,
        "{}/{case}: no honest share accepted: {report}",
        t.name
    );
    assert!(
        report["jobs_received"].as_u64().unwrap_or(0) >= 4,
        "{}/{case}: honest devices got no work: {report}",
        t.name
    );
}

/// Runs `attack` while the honest fleet mines, then checks (a), (c) and (d); `attack` checks
/// (b) and returns what limited the attacker.
///
/// The p99 comparison is against the role's baseline, measured when the role started. Two
/// shared cores are noisy (a compiler or another process beside the test): when the case's
/// p99 is over the bound, the baseline is measured again right then and the case run once more
/// (from fresh addresses), and that second run must meet the bound from the fresh baseline.
/// The row says so. A machine that stops everything for a while (a virtual machine's host
/// taking its cores) delays the honest devices' verdicts whatever the role does; a thread of
/// this test that only sleeps 2 ms at a time ([`stalls`]) sees such a stop as its own late
/// wake-up. Only when the second run missed too and that thread was late by at least the p99's
/// excess over the baseline (the machine alone could explain the miss) is the case run a
/// third time, again from a fresh baseline; otherwise the miss is the role's.
fn case<F>(t: &Target, n: u8, name: &'static str, attack: F)
where
    F: Fn(&Target, Box<dyn Fn(u8) -> Ipv4Addr>) -> String,
{
    // Returns the honest run, what limited the attacker, and the machine's longest stall (ms).
    let run = |n: u8| {
        let octet = t.octet;
        let ip = move |i: u8| Ipv4Addr::new(127, octet, n, 1 + i);
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let canary = s.spawn(|| stalls(&done));
            // Set however this closure ends: an attack's failed assertion unwinds through the
            // scope, which waits for the canary before the test can fail.
            let stop = SetOnDrop(&done);
            let fleet = s.spawn(|| honest_run(t));
            // The honest devices connect first, as they would be on a pool being attacked.
            std::thread::sleep(Duration::from_millis(800));
            let limited = attack(t, Box::new(ip));
            let honest = fleet.join().unwrap();
            drop(stop);
            (honest, limited, canary.join().unwrap())
        })
    };
    let bound_of = |base: f64| (2.0 * base).max(base + 50.0);
    let ((mut p99, mut report), mut limited, mut stall) = run(n);
    let mut base = t.base_p99;
    check_honest(t, name, &report);
    let mut missed: Vec<String> = Vec::new();
    // The second run always; the third only after a stall of the machine as long as the miss.
    while p99 > bound_of(base) && (missed.is_empty() || (missed.len() == 1 && stall >= p99 - base))
    {
        missed.push(format!(
            "p99 {p99:.1} ms over baseline {base:.1} ms, the machine stalled {stall:.0} ms"
        ));
        let (fresh, base_report) = honest_run(t);
        check_honest(t, "baseline again", &base_report);
        base = fresh;
        let again = n + 100 * missed.len() as u8;
        ((p99, report), limited, stall) = run(again);
        check_honest(t, name, &report);
    }
    if !missed.is_empty() {
        limited = format!(
            "{limited} (run {} times: {})",
            missed.len() + 1,
            missed.join("; ")
        );
    }
    let bound = bound_of(base);
    assert!(
        p99 <= bound,
        "{}/{name}: honest p99 {p99:.1} ms over {bound:.1} ms (baseline {base:.1} ms; the \
         machine stalled {stall:.0} ms at most; the attack: {limited}): {report}",
        t.name,
    );
    let rss = rss(t.pid);
    assert!(
        rss <= RSS_BOUND,
        "{}/{name}: RSS {} MiB over the bound",
        t.name,
        rss >> 20
    );
    ROWS.lock().unwrap_or_else(|e| e.into_inner()).push(Row {
        role: t.name,
        case: name,
        limited,
        p99,
        base,
        rss_mb: rss as f64 / (1 << 20) as f64,
    });
}

/// Sets its flag when dropped, unwinding included.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The longest time (ms) a thread that sleeps 2 ms at a time woke up late, until `done`: how
/// long the machine stopped running this process's threads at once.
fn stalls(done: &AtomicBool) -> f64 {
    const NAP: Duration = Duration::from_millis(2);
    let mut longest = Duration::ZERO;
    while !done.load(Ordering::Relaxed) {
        let at = Instant::now();
        std::thread::sleep(NAP);
        longest = longest.max(at.elapsed().saturating_sub(NAP));
    }
    longest.as_secs_f64() * 1e3
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn connect_from(ip: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind(SocketAddr::from((ip, 0)))?;
    s.connect(to).await
}

/// Reads until the role closes (end of stream or reset); `false` if it is still open after
/// `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

/// Subscribes and authorizes as `worker`; returns the first job's id and the lines read.
async fn sv1_handshake(s: &mut TcpStream, worker: &str) -> Option<String> {
    let hello = format!(
        "{{\"id\":1,\"method\":\"mining.subscribe\",\"params\":[\"hostile/1\"]}}\n{{\"id\":2,\"method\":\"mining.authorize\",\"params\":[\"{worker}\",\"x\"]}}\n"
    );
    s.write_all(hello.as_bytes()).await.ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n = match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return None,
        };
        got.extend_from_slice(&buf[..n]);
        for line in got.split(|&b| b == b'\n') {
            let Ok(v) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            if v["method"] == "mining.notify" {
                return v["params"][0].as_str().map(str::to_owned);
            }
        }
    }
}

fn worker() -> String {
    format!("{PAYOUT}.attacker")
}

// ---- Cases: SV1 and transport-level attacks ----------------------------------------------

/// Connections from one address as fast as it can: at most the per-address cap stays open.
fn flood_one_address(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    let open = rt().block_on(async {
        let mut socks = Vec::new();
        for _ in 0..(3 * PER_IP) {
            if let Ok(s) = connect_from(ip(0), t.addr).await {
                socks.push(s);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut open = 0;
        for s in &mut socks {
            if !closed_within(s, Duration::from_millis(20)).await {
                open += 1;
            }
        }
        open
    });
    let after = admission(t);
    let refused = ["max_connections_per_ip", "connect_rate", "banned"]
        .iter()
        .map(|r| count(&after, "refused", r) - count(&before, "refused", r))
        .sum::<u64>();
    assert!(open <= PER_IP, "{}: {open} open from one address", t.name);
    assert!(
        refused >= (2 * PER_IP) as u64,
        "{}: refused {refused}",
        t.name
    );
    // The cap, not only the rate: it is checked first, so connections past it while the
    // address still had connect burst left are refused for it.
    let capped = count(&after, "refused", "max_connections_per_ip")
        - count(&before, "refused", "max_connections_per_ip");
    assert!(
        capped > 0,
        "{}: nothing refused at the per-address cap: {after}",
        t.name
    );
    format!(
        "{open} of {} open (cap {PER_IP}), {refused} refused ({capped} at the cap)",
        3 * PER_IP
    )
}

/// Many addresses each under the per-address cap, together over `--max-connections`, all at
/// once. The listener's accept queue (`edge::listen`) holds the whole burst, so the connects
/// complete together; they must, within `HANDSHAKE` (an SV2 listener closes an unfinished
/// handshake after that, and connections that expire before the last arrive never reach the
/// cap), and the connections past the cap are refused.
fn many_addresses(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    let per = PER_IP - 5;
    let addrs = (MAX_CONNECTIONS / per + 2) as u8;
    let tried = usize::from(addrs) * per;
    let cap = edge::listen::kernel_cap().unwrap_or(u32::MAX) as usize;
    if cap < tried {
        return format!("skipped: net.core.somaxconn is {cap}, below the {tried} connects");
    }
    let (peak, took) = rt().block_on(async {
        let started = std::time::Instant::now();
        let mut connecting = tokio::task::JoinSet::new();
        for a in 0..addrs {
            for _ in 0..per {
                connecting.spawn(connect_from(ip(a), t.addr));
            }
        }
        let mut socks = Vec::new();
        while let Some(done) = connecting.join_next().await {
            if let Ok(Ok(s)) = done {
                socks.push(s);
            }
        }
        let took = started.elapsed();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let peak = http_get_json(&t.http, "/api/status")["admission"]["connections"]
            .as_u64()
            .unwrap_or(0);
        drop(socks);
        (peak, took)
    });
    let after = admission(t);
    let refused =
        count(&after, "refused", "max_connections") - count(&before, "refused", "max_connections");
    assert!(
        took < HANDSHAKE,
        "{}: {tried} connects took {took:?}, not all open at once (dropped handshakes wait a \
         second or more for their resend)",
        t.name
    );
    assert!(peak <= MAX_CONNECTIONS as u64, "{}: {peak} open", t.name);
    assert!(
        refused > 0,
        "{}: nothing refused at the cap: {after}",
        t.name
    );
    format!(
        "{tried} tried from {addrs} addresses in {} ms: peak {peak} open (cap {MAX_CONNECTIONS}), {refused} refused",
        took.as_millis()
    )
}

/// Bytes of a handshake one at a time, never finishing: closed by the handshake timeout.
fn slowloris(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>, hello: &'static [u8]) -> String {
    let limit = HANDSHAKE + SLACK;
    let (closed, took) = rt().block_on(async {
        let mut socks = Vec::new();
        for _ in 0..20 {
            if let Ok(s) = connect_from(ip(0), t.addr).await {
                socks.push(s);
            }
        }
        writes_until_closed(&mut socks, limit, Duration::from_millis(200), |i| {
            vec![hello[i % hello.len()]]
        })
        .await
    });
    assert_eq!(
        closed, 20,
        "{}: {closed} of 20 closed within {limit:?}",
        t.name
    );
    format!(
        "20 of 20 closed after {:.1} s (handshake timeout {HANDSHAKE:?})",
        took.as_secs_f64()
    )
}

/// Writes `bytes(i)` to every socket in round `i`, a round every `every`, until all are closed
/// or `limit` has passed; returns how many were closed and when it stopped.
async fn writes_until_closed(
    socks: &mut [TcpStream],
    limit: Duration,
    every: Duration,
    bytes: impl Fn(usize) -> Vec<u8>,
) -> (usize, Duration) {
    let start = Instant::now();
    let mut closed = 0;
    let mut i = 0;
    while start.elapsed() < limit && closed < socks.len() {
        closed = 0;
        let b = bytes(i);
        for s in socks.iter_mut() {
            if s.write_all(&b).await.is_err() || closed_within(s, Duration::from_millis(1)).await {
                closed += 1;
            }
        }
        i += 1;
        tokio::time::sleep(every).await;
    }
    (closed, start.elapsed())
}

/// Connections that subscribe and then keep asking to authorize with a name the role refuses
/// (an empty one): a refused authorize is no handshake, so they are closed at the handshake
/// timeout all the same.
fn refused_authorizes(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    let limit = HANDSHAKE + SLACK;
    let (closed, took) = rt().block_on(async {
        let mut socks = Vec::new();
        for _ in 0..20 {
            if let Ok(mut s) = connect_from(ip(0), t.addr).await {
                if s.write_all(SV1_HELLO).await.is_ok() {
                    socks.push(s);
                }
            }
        }
        // `closed_within` reads and drops what the role answered.
        writes_until_closed(&mut socks, limit, Duration::from_millis(300), |i| {
            format!(
                "{{\"id\":{},\"method\":\"mining.authorize\",\"params\":[\"\",\"x\"]}}\n",
                i + 2
            )
            .into_bytes()
        })
        .await
    });
    assert_eq!(
        closed, 20,
        "{}: {closed} of 20 closed within {limit:?}",
        t.name
    );
    // For the handshake timeout, not anything else (a role counts its close a moment after
    // the peer sees it).
    assert_closed_for(
        t,
        &before,
        "handshake timeout",
        20,
        "not closed for the timeout",
    );
    format!(
        "20 of 20 closed after {:.1} s of refused authorizes (handshake timeout {HANDSHAKE:?})",
        took.as_secs_f64()
    )
}

/// Connections that say nothing at all.
fn silent(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let limit = HANDSHAKE + SLACK;
    let closed = rt().block_on(async {
        let mut socks = Vec::new();
        for _ in 0..20 {
            if let Ok(s) = connect_from(ip(0), t.addr).await {
                socks.push(s);
            }
        }
        let mut closed = 0;
        let deadline = Instant::now() + limit;
        for s in &mut socks {
            let left = deadline.saturating_duration_since(Instant::now());
            closed += usize::from(closed_within(s, left).await);
        }
        closed
    });
    assert_eq!(
        closed, 20,
        "{}: {closed} of 20 silent connections closed",
        t.name
    );
    format!("20 of 20 closed within {limit:?}")
}

/// Half a handshake, then the write side shut (FIN): the role lets go at once.
fn half_open(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>, hello: &'static [u8]) -> String {
    let closed = rt().block_on(async {
        let mut closed = 0;
        for _ in 0..20 {
            let Ok(mut s) = connect_from(ip(0), t.addr).await else {
                continue;
            };
            let _ = s.write_all(&hello[..hello.len() / 2]).await;
            let _ = s.shutdown().await;
            closed += usize::from(closed_within(&mut s, Duration::from_secs(3)).await);
        }
        closed
    });
    assert_eq!(
        closed, 20,
        "{}: {closed} of 20 half-closed connections released",
        t.name
    );
    "20 of 20 released within 3 s of the FIN".to_owned()
}

/// Deterministic bytes that look random, newlines included.
fn junk(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Garbage instead of a handshake, over and over from one address: each is closed, and the
/// address is banned.
fn garbage_before(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    let closed = rt().block_on(async {
        let mut closed = 0;
        for i in 0..30u64 {
            let Ok(mut s) = connect_from(ip(0), t.addr).await else {
                continue;
            };
            // Lines of noise (an SV2 listener reads them as a broken Noise handshake).
            let mut g = Vec::new();
            for l in 0..100 {
                let mut line = junk(i * 1000 + l, 40);
                line.retain(|&b| b != b'\n');
                g.extend_from_slice(&line);
                g.push(b'\n');
            }
            let _ = s.write_all(&g).await;
            closed += usize::from(closed_within(&mut s, HANDSHAKE + SLACK).await);
        }
        closed
    });
    let after = admission(t);
    let banned = count(&after, "bans", "malformed_messages")
        + count(&after, "bans", "handshake_failures")
        - count(&before, "bans", "malformed_messages")
        - count(&before, "bans", "handshake_failures");
    let refused = count(&after, "refused", "banned") - count(&before, "refused", "banned");
    assert!(closed >= 20, "{}: {closed} of 30 closed", t.name);
    assert!(
        banned >= 1 && refused >= 1,
        "{}: not banned: {after}",
        t.name
    );
    format!("{closed} of 30 closed, banned after them ({refused} refused while banned)")
}

/// A handshake, then garbage lines: closed for malformed messages.
fn garbage_after_sv1(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    let took = rt().block_on(async {
        let Sv1Attacker { mut s, .. } = Sv1Attacker::connect(t, ip(0)).await;
        let start = Instant::now();
        // More than the 16 malformed lines a session takes, fewer than the message burst:
        // closed for what the lines are, not for how many.
        for i in 0..40u64 {
            let mut g = junk(i, 300);
            g.retain(|&b| b != b'\n');
            g.push(b'\n');
            if s.write_all(&g).await.is_err() {
                break;
            }
        }
        assert!(
            closed_within(&mut s, Duration::from_secs(5)).await,
            "{}: still open",
            t.name
        );
        start.elapsed()
    });
    let reason = "too many malformed messages";
    assert_closed_for(t, &before, reason, 1, "not closed for malformed messages");
    format!(
        "closed ({reason}) {:.2} s after the first garbage line",
        took.as_secs_f64()
    )
}

/// A line far over `--max-line`: closed long before it ends.
fn oversized(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>, after_handshake: bool) -> String {
    let sent = rt().block_on(async {
        let mut s = connect_from(ip(0), t.addr).await.unwrap();
        if after_handshake {
            sv1_handshake(&mut s, &worker()).await.expect("a job");
        }
        let chunk = vec![b'x'; 4096];
        let mut sent = 0usize;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && sent < 64 << 20 {
            match tokio::time::timeout(Duration::from_millis(500), s.write_all(&chunk)).await {
                Ok(Ok(())) => sent += chunk.len(),
                _ => break,
            }
        }
        assert!(
            closed_within(&mut s, Duration::from_secs(5)).await,
            "{}: still open",
            t.name
        );
        sent
    });
    // The kernel's buffers take some after the role stopped reading; the role kept none.
    assert!(sent < 32 << 20, "{}: took {sent} bytes of one line", t.name);
    format!(
        "closed; {} KiB written before it, the kernel's buffers included (max line {MAX_LINE} B)",
        sent >> 10
    )
}

/// Banned: the next connection from the address is refused.
async fn refused_again(t: &Target, from: Ipv4Addr) {
    let mut again = connect_from(from, t.addr).await.unwrap();
    assert!(
        closed_within(&mut again, Duration::from_secs(2)).await,
        "{}: a banned address got in",
        t.name
    );
}

/// The role counted a ban for invalid shares since `before`.
fn banned_for_invalid_shares(t: &Target, before: &Value) -> String {
    let after = admission(t);
    let bans = count(&after, "bans", "invalid_shares") - count(before, "bans", "invalid_shares");
    assert!(bans >= 1, "{}: not banned: {after}", t.name);
    format!("banned after {BAN_AFTER} invalid shares; reconnect refused")
}

/// What tells one run of a case from its re-run (the case's third octet): names a case makes
/// up must be new to the role in each run, since the role remembers the first run's.
fn run_tag(ip: &dyn Fn(u8) -> Ipv4Addr) -> u8 {
    ip(0).octets()[2]
}

/// Thousands of worker names on one connection: only a few are taken.
fn worker_names(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let run = run_tag(&ip);
    let accepted = rt().block_on(async {
        let Sv1Attacker { mut s, .. } = Sv1Attacker::connect(t, ip(0)).await;
        let mut accepted = 0u32;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        for batch in 0..20u32 {
            let mut lines = String::new();
            for i in 0..80u32 {
                let id = 1000 + batch * 100 + i;
                lines.push_str(&format!(
                    "{{\"id\":{id},\"method\":\"mining.authorize\",\"params\":[\"{PAYOUT}.r{run}w{id}\",\"x\"]}}\n"
                ));
            }
            if s.write_all(lines.as_bytes()).await.is_err() {
                break;
            }
            // Keep within the message rate: 80 lines, then a pause for the bucket.
            tokio::time::sleep(Duration::from_millis(600)).await;
            while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(50), s.read(&mut chunk)).await {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
        for line in buf.split(|&b| b == b'\n') {
            if let Ok(v) = serde_json::from_slice::<Value>(line) {
                if v["id"].as_u64().is_some_and(|id| id >= 1000) && v["result"] == true {
                    accepted += 1;
                }
            }
        }
        accepted
    });
    // 16 names a connection (`max_workers`), the handshake's among them.
    assert!(
        (1..=15).contains(&accepted),
        "{}: {accepted} more worker names taken on one connection",
        t.name
    );
    format!("{accepted} of 1600 names taken on one connection")
}

/// New worker names from one address over many connections: taken up to the address's
/// allowance (the per-address connection cap at once, then one a second).
fn worker_names_across_connections(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let run = run_tag(&ip);
    let before = admission(t);
    let accepted = rt().block_on(async {
        let mut accepted = 0u32;
        for c in 0..6u32 {
            let Sv1Attacker { mut s, .. } = Sv1Attacker::connect(t, ip(0)).await;
            let mut lines = String::new();
            for i in 0..15u32 {
                let id = 1000 + i;
                lines.push_str(&format!(
                    "{{\"id\":{id},\"method\":\"mining.authorize\",\"params\":[\"{PAYOUT}.r{run}c{c}w{i}\",\"x\"]}}\n"
                ));
            }
            s.write_all(lines.as_bytes()).await.unwrap();
            let replies = |buf: &[u8]| -> Vec<Value> {
                buf.split(|&b| b == b'\n')
                    .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
                    .filter(|v| v["id"].as_u64().is_some_and(|id| id >= 1000))
                    .collect()
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            while replies(&buf).len() < 15 {
                match tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await {
                    Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                    _ => break,
                }
            }
            accepted += replies(&buf).iter().filter(|v| v["result"] == true).count() as u32;
        }
        accepted
    });
    new_names_bounded(t, &before, accepted, 90, "names")
}

/// The end of a new-worker case: `taken` of `tried` new names from one address, at most the
/// allowance (`PER_IP` at once, a few more as seconds pass), and some refused as such.
fn new_names_bounded(t: &Target, before: &Value, taken: u32, tried: u32, what: &str) -> String {
    let after = admission(t);
    let refused = after["workers_refused"].as_u64().unwrap_or(0)
        - before["workers_refused"].as_u64().unwrap_or(0);
    assert!(
        taken as usize <= PER_IP + 10,
        "{}: {taken} new {what} taken from one address",
        t.name
    );
    assert!(refused > 0, "{}: no new {what} refused: {after}", t.name);
    format!("{taken} of {tried} new {what} taken from one address (allowance {PER_IP} at once, then 1/s)")
}

/// A peer that stops reading while the role has replies for it: closed by the write timeout.
fn never_reads(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    let started = Instant::now();
    rt().block_on(async {
        let s = TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::from((ip(0), 0))).unwrap();
        s.set_recv_buffer_size(4096).unwrap();
        let mut s = s.connect(t.addr).await.unwrap();
        sv1_handshake(&mut s, &worker()).await.expect("a job");
        // Requests whose replies carry a long id back, within the message rate: the role's
        // replies pile up in a socket nobody reads.
        let id = "i".repeat(MAX_LINE - 200);
        let line = format!(
            "{{\"id\":\"{id}\",\"method\":\"mining.extranonce.subscribe\",\"params\":[]}}\n"
        );
        let deadline = Instant::now() + WRITE_TIMEOUT + Duration::from_secs(20);
        let mut closed = false;
        while Instant::now() < deadline {
            let batch = line.repeat(50);
            match tokio::time::timeout(Duration::from_millis(300), s.write_all(batch.as_bytes()))
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    closed = true;
                    break;
                }
                Err(_) => {}
            }
            let a = admission(t);
            // The pool's own write timeout, or a farm proxy's core giving up on a device whose
            // queue of output is full.
            if count(&a, "closed", "write timeout") + count(&a, "closed", "device too slow")
                > count(&before, "closed", "write timeout")
                    + count(&before, "closed", "device too slow")
            {
                closed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(
            closed,
            "{}: a peer that does not read is still held: {}",
            t.name,
            admission(t)
        );
    });
    format!(
        "closed {:.1} s after it stopped reading: the kernel's buffers took MiBs, then the write timeout ({WRITE_TIMEOUT:?})",
        started.elapsed().as_secs_f64()
    )
}

/// Connect and close a thousand times a second: refused, then banned. The ban comes after a
/// thousand refusals in a burst, however long a loaded machine takes to send them: the flood
/// goes on until the address is refused as banned (at most 10 s).
fn reconnect_flood(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    let (tries, took) = rt().block_on(async {
        let start = Instant::now();
        let mut tries = 0u32;
        while start.elapsed() < Duration::from_secs(10) {
            for _ in 0..10 {
                if let Ok(s) = connect_from(ip(0), t.addr).await {
                    drop(s);
                }
                tries += 1;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            if tries.is_multiple_of(500) && tries >= 1500 {
                let a = admission(t);
                if count(&a, "refused", "banned") > count(&before, "refused", "banned") {
                    break;
                }
            }
        }
        (tries, start.elapsed())
    });
    let after = admission(t);
    let refused: u64 = ["connect_rate", "banned"]
        .iter()
        .map(|r| count(&after, "refused", r) - count(&before, "refused", r))
        .sum();
    // Banned for the flood, or (SV2) for the handshakes it kept breaking off.
    let banned = ["connect_flood", "handshake_failures"]
        .iter()
        .map(|r| count(&after, "bans", r) - count(&before, "bans", r))
        .sum::<u64>();
    assert!(
        refused > u64::from(tries) / 2,
        "{}: {refused} of {tries} refused",
        t.name
    );
    assert!(banned >= 1, "{}: the flood was not banned: {after}", t.name);
    format!(
        "{tries} connects in {:.1} s: {refused} refused, address banned",
        took.as_secs_f64()
    )
}

// ---- Cases: SV2 after the Noise handshake ------------------------------------------------

/// `SetupConnection` for `protocol` (mining, or job declaration) with `flags`.
fn setup(protocol: u8, flags: u32) -> Message {
    SetupConnection {
        flags,
        endpoint_host: "127.0.0.1".into(),
        vendor: "hostile".into(),
        ..SetupConnection::new(protocol)
    }
    .into()
}

fn setup_jd() -> Message {
    setup(
        sv2::messages::common::protocol::JOB_DECLARATION,
        sv2::messages::common::job_declaration_flags::DECLARE_TX_DATA,
    )
}

/// The SetupConnection an SV2 listener under test takes: mining for a pool, job declaration
/// for the JDS.
fn setup_for(t: &Target) -> Message {
    match t.honest {
        Honest::JdClient { .. } => setup_jd(),
        Honest::Fleet(_) => setup(
            sv2::messages::common::protocol::MINING,
            mining_flags::REQUIRES_STANDARD_JOBS,
        ),
    }
}

/// A Noise handshake with `to` (signed by `key`) from `from`, then `setup` accepted.
async fn sv2_connect(to: SocketAddr, from: Ipv4Addr, key: [u8; 32], setup: Message) -> NoiseConn {
    let stream = connect_from(from, to).await.unwrap();
    let mut conn = tokio::time::timeout(
        Duration::from_secs(10),
        NoiseConn::connect_to_authority(stream, key, Limits::default()),
    )
    .await
    .expect("handshake in time")
    .expect("handshake");
    conn.send_message(&setup).await.unwrap();
    let reply = sv2_recv(&mut conn).await;
    assert!(
        matches!(
            reply,
            Some(Message::Common(Common::SetupConnectionSuccess(_)))
        ),
        "{to}: {reply:?}"
    );
    conn
}

/// [`sv2_connect`] to the listener under test.
async fn sv2_attacker(t: &Target, from: Ipv4Addr) -> NoiseConn {
    let key = t.authority.expect("an SV2 listener's key");
    sv2_connect(t.addr, from, key, setup_for(t)).await
}

async fn sv2_recv(conn: &mut NoiseConn) -> Option<Message> {
    match tokio::time::timeout(Duration::from_secs(10), conn.read_message()).await {
        Ok(Ok(Some(m))) => Some(m),
        _ => None,
    }
}

/// Reads until the role ends the connection; `false` if it is still open after `within`.
async fn sv2_closed_within(conn: &mut NoiseConn, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, conn.read_frame()).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return true,
            Err(_) => return false,
        }
    }
}

/// A handshake and SetupConnection, then no channel: closed when the handshake timeout ends
/// (not at some later tick), and the address struck for it.
fn no_channel_sv2(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    // Each from its own setup: the timer fires at the timeout, not at a 5 s tick after it.
    let limit = HANDSHAKE + Duration::from_millis(1500);
    let slowest = rt().block_on(async {
        let mut conns = Vec::new();
        for _ in 0..20 {
            let c = sv2_attacker(t, ip(0)).await;
            conns.push((Instant::now(), c));
        }
        let mut slowest = Duration::ZERO;
        for (set_up, c) in &mut conns {
            let left = (*set_up + limit).saturating_duration_since(Instant::now());
            assert!(
                sv2_closed_within(c, left).await,
                "{}: open {limit:?} after its setup",
                t.name
            );
            slowest = slowest.max(set_up.elapsed());
        }
        slowest
    });
    assert_closed_for(t, &before, "timeout", 20, "not closed for the timeout");
    format!(
        "20 of 20 closed within {:.1} s of their setup (handshake timeout {HANDSHAKE:?})",
        slowest.as_secs_f64()
    )
}

/// A handshake and SetupConnection, then frames whose payloads are noise.
fn garbage_after_sv2(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    rt().block_on(async {
        let mut conn = sv2_attacker(t, ip(0)).await;
        for i in 0..20u64 {
            // OpenStandardMiningChannel's type with a payload it cannot be.
            if conn.send_payload(0x10, 0, &junk(i, 3)).await.is_err() {
                break;
            }
        }
        assert!(
            sv2_closed_within(&mut conn, Duration::from_secs(5)).await,
            "{}: still open",
            t.name
        );
    });
    assert_closed_for(t, &before, "protocol", 1, "not closed as a protocol error");
    "closed as a protocol error at the first undecodable frame".to_owned()
}

/// After the handshake, one frame of 64 KiB, eight times the pool's largest (an SV2 pool has no
/// message near that size): closed when its header arrives, before the payload is read.
fn oversized_frame_sv2(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    let closed = rt().block_on(async {
        let mut conn = sv2_attacker(t, ip(0)).await;
        // SubmitSharesStandard's type, channel bit set, with a payload no share has.
        let _ = conn.send_payload(0x1a, 0x8000, &vec![0u8; 64 << 10]).await;
        sv2_closed_within(&mut conn, Duration::from_secs(5)).await
    });
    assert!(closed, "{}: still open after a 64 KiB frame", t.name);
    assert_closed_for(t, &before, "oversize", 1, "not closed as oversize");
    "closed (oversize) at the header of a 64 KiB frame".to_owned()
}

/// Messages the role takes and answers or ignores: `UpdateChannel` for channels never opened
/// (a pool answers each with an error), transactions nobody asked for (the JDS ignores them).
fn flood_message(t: &Target, i: u32) -> Message {
    match t.honest {
        Honest::JdClient { .. } => ProvideMissingTransactionsSuccess {
            request_id: 77_000 + i,
            transaction_list: Vec::new(),
        }
        .into(),
        Honest::Fleet(_) => UpdateChannel {
            channel_id: 9_000 + i,
            nominal_hash_rate: 1e9,
            maximum_target: primitives::Target::from_le_bytes(&[0xff; 32]),
        }
        .into(),
    }
}

// ---- Cases alike in SV1 and SV2 ----------------------------------------------------------

/// An attacker's connection past its protocol's handshake, for the attacks that are the same
/// in either protocol: JSON lines on TCP ([`Sv1Attacker`]) or frames over Noise
/// ([`Sv2Attacker`]).
trait Attacker: Sized {
    /// The reason the role counts a close for the message rate under.
    const RATE: &'static str;
    /// Connects from `from` and completes the handshake.
    async fn connect(t: &Target, from: Ipv4Addr) -> Self;
    /// Writes `n` valid messages the role answers or ignores; returns how many were written,
    /// and `false` when a write failed.
    async fn flood(&mut self, t: &Target, n: usize) -> (usize, bool);
    /// Gets a job that shares can be submitted to.
    async fn open_for_shares(&mut self, t: &Target);
    /// Submits the `n`th share, one the role rejects; `false` when the write failed.
    async fn submit_invalid(&mut self, n: u32) -> bool;
    /// Reads until the role ends the connection; `false` if it is still open after `within`.
    async fn closed_within(&mut self, within: Duration) -> bool;
}

/// Subscribed and authorized as [`worker`], with the first job's id.
struct Sv1Attacker {
    s: TcpStream,
    job: String,
}

impl Attacker for Sv1Attacker {
    const RATE: &'static str = "message rate";

    async fn connect(t: &Target, from: Ipv4Addr) -> Self {
        let mut s = connect_from(from, t.addr).await.unwrap();
        let job = sv1_handshake(&mut s, &worker()).await.expect("a job");
        Sv1Attacker { s, job }
    }

    async fn flood(&mut self, _: &Target, n: usize) -> (usize, bool) {
        let line = b"{\"id\":7,\"method\":\"mining.extranonce.subscribe\",\"params\":[]}\n";
        match self.s.write_all(&line.repeat(n)).await {
            Ok(()) => (n, true),
            Err(_) => (0, false),
        }
    }

    /// The handshake brought the job.
    async fn open_for_shares(&mut self, _: &Target) {}

    async fn submit_invalid(&mut self, n: u32) -> bool {
        let (w, job) = (worker(), &self.job);
        let line = format!(
            "{{\"id\":{},\"method\":\"mining.submit\",\"params\":[\"{w}\",\"{job}\",\"00000000\",\"00000000\",\"{n:08x}\"]}}\n",
            n + 10
        );
        self.s.write_all(line.as_bytes()).await.is_ok()
    }

    async fn closed_within(&mut self, within: Duration) -> bool {
        closed_within(&mut self.s, within).await
    }
}

/// Set up ([`sv2_attacker`]); once [`Attacker::open_for_shares`], a standard channel and its
/// job.
struct Sv2Attacker {
    conn: NoiseConn,
    channel_and_job: Option<(u32, u32)>,
}

impl Attacker for Sv2Attacker {
    const RATE: &'static str = "rate";

    async fn connect(t: &Target, from: Ipv4Addr) -> Self {
        Sv2Attacker {
            conn: sv2_attacker(t, from).await,
            channel_and_job: None,
        }
    }

    async fn flood(&mut self, t: &Target, n: usize) -> (usize, bool) {
        for i in 0..n {
            if self
                .conn
                .send_message(&flood_message(t, i as u32))
                .await
                .is_err()
            {
                return (i, false);
            }
        }
        (n, true)
    }

    async fn open_for_shares(&mut self, t: &Target) {
        let open: Message = OpenStandardMiningChannel {
            request_id: 1,
            user_identity: format!("{PAYOUT}.attacker"),
            nominal_hash_rate: 1e5,
            max_target: primitives::Target::from_le_bytes(&[0xff; 32]),
        }
        .into();
        self.conn.send_message(&open).await.unwrap();
        let (mut channel, mut job) = (None, None);
        while channel.is_none() || job.is_none() {
            match sv2_recv(&mut self.conn).await {
                Some(Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok))) => {
                    channel = Some(ok.channel_id)
                }
                Some(Message::Mining(Mining::NewMiningJob(j))) => job = Some(j.job_id),
                Some(_) => {}
                None => panic!("{}: no channel or job", t.name),
            }
        }
        self.channel_and_job = channel.zip(job);
    }

    async fn submit_invalid(&mut self, n: u32) -> bool {
        let (channel, job) = self.channel_and_job.expect("a channel open");
        let share: Message = SubmitSharesStandard {
            channel_id: channel,
            sequence_number: n,
            job_id: job,
            nonce: n.wrapping_mul(0x9e37_79b9),
            ntime: 0,
            version: 0x2000_0000,
        }
        .into();
        self.conn.send_message(&share).await.is_ok()
    }

    async fn closed_within(&mut self, within: Duration) -> bool {
        sv2_closed_within(&mut self.conn, within).await
    }
}

/// Valid messages at 100 times the message rate: closed for the rate.
fn message_rate<A: Attacker>(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    let sent = rt().block_on(async {
        let mut a = A::connect(t, ip(0)).await;
        let per_tick = (MESSAGE_RATE * 100.0 / 100.0) as usize; // 100x the rate, in 10 ms steps
        let mut sent = 0;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(3) {
            let (n, open) = a.flood(t, per_tick).await;
            sent += n;
            if !open {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            a.closed_within(Duration::from_secs(5)).await,
            "{}: still open",
            t.name
        );
        sent
    });
    let what = format!("not closed for the {}", A::RATE);
    assert_closed_for(t, &before, A::RATE, 1, &what);
    format!(
        "closed for the rate after sending {sent} at {}/s",
        MESSAGE_RATE * 100.0
    )
}

/// Shares that are all wrong: closed and banned after `--invalid-share-ban-after`.
fn invalid_shares<A: Attacker>(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let before = admission(t);
    rt().block_on(async {
        let mut a = A::connect(t, ip(0)).await;
        a.open_for_shares(t).await;
        for n in 0..(BAN_AFTER * 3) {
            if !a.submit_invalid(n).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert!(
            a.closed_within(Duration::from_secs(10)).await,
            "{}: still open",
            t.name
        );
        refused_again(t, ip(0)).await;
    });
    banned_for_invalid_shares(t, &before)
}

// ---- The Job Declaration Server --------------------------------------------------------

/// The honest JD client: a token every 50 ms for the run; the same report shape as a fleet's.
async fn jd_client(addr: SocketAddr, key: [u8; 32]) -> (f64, Value) {
    let mut conn = sv2_connect(addr, Ipv4Addr::LOCALHOST, key, setup_jd()).await;
    let run = Duration::from_secs(4);
    let start = Instant::now();
    let (mut latencies, mut unanswered) = (Vec::new(), 0u64);
    let mut id = 0u32;
    while start.elapsed() < run {
        id += 1;
        let asked = Instant::now();
        let m: Message = AllocateMiningJobToken {
            user_identifier: "honest".into(),
            request_id: id,
        }
        .into();
        if conn.send_message(&m).await.is_err() {
            unanswered += 1;
            break;
        }
        loop {
            match sv2_recv(&mut conn).await {
                Some(Message::JobDeclaration(JobDeclaration::AllocateMiningJobTokenSuccess(
                    ok,
                ))) if ok.request_id == id => {
                    latencies.push(asked.elapsed().as_secs_f64() * 1e3);
                    break;
                }
                Some(_) => {}
                None => {
                    unanswered += 1;
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    latencies.sort_by(f64::total_cmp);
    let p99 = latencies
        .get(((latencies.len() as f64 * 0.99).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or(f64::INFINITY);
    let n = latencies.len() as u64;
    let report = serde_json::json!({
        "shares": { "sent": n + unanswered, "accepted": n, "unanswered": unanswered, "dropped": 0 },
        "jobs_received": n,
        "share_latency_ms": { "p99": p99, "n": n },
    });
    (p99, report)
}

/// New users from one address over several SV2 connections, a channel each: opened up to the
/// address's allowance of new workers.
fn users_across_connections_sv2(t: &Target, ip: Box<dyn Fn(u8) -> Ipv4Addr>) -> String {
    let run = run_tag(&ip);
    let before = admission(t);
    let opened = rt().block_on(async {
        let mut opened = 0u32;
        for c in 0..4u32 {
            let mut conn = sv2_attacker(t, ip(0)).await;
            for i in 0..30u32 {
                let open: Message = OpenStandardMiningChannel {
                    request_id: i,
                    user_identity: format!("{PAYOUT}.r{run}c{c}u{i}"),
                    nominal_hash_rate: 1e5,
                    max_target: primitives::Target::from_le_bytes(&[0xff; 32]),
                }
                .into();
                conn.send_message(&open).await.unwrap();
                // Within the message rate: the next request after the answer.
                loop {
                    match sv2_recv(&mut conn).await {
                        Some(Message::Mining(Mining::OpenStandardMiningChannelSuccess(_))) => {
                            opened += 1;
                            break;
                        }
                        Some(Message::Mining(Mining::OpenMiningChannelError(_))) | None => break,
                        Some(_) => {}
                    }
                }
            }
        }
        opened
    });
    new_names_bounded(t, &before, opened, 120, "users")
}

const SV1_HELLO: &[u8] = b"{\"id\":1,\"method\":\"mining.subscribe\",\"params\":[\"slow/1\"]}\n";
/// The first bytes of a Noise NX handshake: an ephemeral key (64 bytes for ElligatorSwift).
const SV2_HELLO: &[u8] = &[0x5a; 64];

/// The cases before the protocol's first message, alike for every listener: `hello` is how
/// its handshake starts.
fn connection_cases(t: &Target, hello: &'static [u8]) {
    case(t, 1, "connection flood from one address", flood_one_address);
    case(t, 2, "many addresses under the cap", many_addresses);
    case(t, 3, "byte-at-a-time handshakes", |t, ip| {
        slowloris(t, ip, hello)
    });
    case(t, 4, "silent connections", silent);
    case(t, 5, "half-open (FIN mid-handshake)", |t, ip| {
        half_open(t, ip, hello)
    });
    case(t, 6, "garbage before the handshake", garbage_before);
}

/// Every SV1 case against an SV1 listener.
fn sv1_cases(t: &Target) {
    connection_cases(t, SV1_HELLO);
    case(t, 7, "garbage after the handshake", garbage_after_sv1);
    case(t, 8, "oversized line", |t, ip| oversized(t, ip, true));
    case(
        t,
        9,
        "valid messages at 100x the rate",
        message_rate::<Sv1Attacker>,
    );
    case(
        t,
        10,
        "invalid shares until banned",
        invalid_shares::<Sv1Attacker>,
    );
    case(t, 11, "thousands of worker names", worker_names);
    case(t, 12, "never reads", never_reads);
    case(t, 13, "reconnect 1000/s", reconnect_flood);
    case(t, 17, "refused authorizes", refused_authorizes);
}

/// The transport-level cases against an SV2 listener (before the Noise handshake completes).
fn sv2_cases(t: &Target) {
    connection_cases(t, SV2_HELLO);
    case(t, 8, "oversized frame before the handshake", |t, ip| {
        oversized(t, ip, false)
    });
    case(t, 13, "reconnect 1000/s", reconnect_flood);
}

/// The SV2 cases after the handshake, on a mining listener.
fn sv2_mining_cases(t: &Target) {
    case(t, 7, "garbage after the handshake", garbage_after_sv2);
    case(
        t,
        9,
        "valid messages at 100x the rate",
        message_rate::<Sv2Attacker>,
    );
    case(
        t,
        10,
        "invalid shares until banned",
        invalid_shares::<Sv2Attacker>,
    );
    case(
        t,
        15,
        "oversized frame after the handshake",
        oversized_frame_sv2,
    );
    case(
        t,
        14,
        "new users across connections",
        users_across_connections_sv2,
    );
    case(t, 16, "set up, no channel opened", no_channel_sv2);
}

fn print_rows(role: &str) {
    let rows = ROWS.lock().unwrap_or_else(|e| e.into_inner());
    println!(
        "| role | case | attacker limited | honest p99 (ms) | baseline p99 (ms) | role RSS (MiB) |"
    );
    println!("|---|---|---|---|---|---|");
    for r in rows.iter().filter(|r| r.role == role) {
        println!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.0} |",
            r.role, r.case, r.limited, r.p99, r.base, r.rss_mb
        );
    }
}

/// What every role's test starts from: the suite's turn (one role under attack at a time), a
/// directory, and simnet (RPC and Template Provider, with `extra` flags) among the roles.
fn on_simnet(
    extra: &[(&str, &str)],
) -> (
    MutexGuard<'static, ()>,
    tempfile::TempDir,
    Roles,
    support::SimnetAddrs,
) {
    let turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut roles = Roles(Vec::new());
    let mut s = support::simnet()
        .rpc()
        .tdp()
        .arg("--network-difficulty", "100000");
    for (flag, value) in extra {
        s = s.arg(flag, value);
    }
    let (sim, at) = s.start();
    roles.add("simnet", sim);
    (turn, dir, roles, at)
}

/// What every role that takes shares runs with here: honest devices find a share every few
/// milliseconds at a floor difficulty vardiff cannot leave, for longer than any test.
const SHARE_LOAD: [&str; 8] = [
    "--start-difficulty",
    "0.000003",
    "--min-difficulty",
    "0.000003",
    "--shares-per-minute",
    "1000000",
    "--duration",
    "600s",
];

fn pool_args(rpc: &str, store: &str) -> Vec<String> {
    let mut a = support::node_args(rpc);
    a.extend(support::sv1_pool_args(std::path::Path::new(store)));
    a.extend(SHARE_LOAD.map(String::from));
    a.extend(edge_flags());
    a
}

fn target(name: &'static str, octet: u8, role: &Role, addr: &str, http: String) -> Target {
    let addr: SocketAddr = addr.parse().unwrap();
    let mut t = Target {
        name,
        addr,
        http,
        pid: role.pid(),
        honest: Honest::Fleet(vec!["--pool".into(), addr.to_string()]),
        base_p99: 0.0,
        octet,
        authority: None,
    };
    measure_baseline(&mut t);
    t
}

/// An SV2 mining listener under test (a pool, or a JDC's device side), honest SV2 devices on it.
fn sv2_target(
    name: &'static str,
    octet: u8,
    pid: u32,
    sv2: &str,
    key: &str,
    http: String,
) -> Target {
    Target {
        name,
        addr: sv2.parse().unwrap(),
        http,
        pid,
        honest: Honest::Fleet(
            ["--pool", sv2, "--protocol", "sv2", "--authority-key", key]
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        ),
        base_p99: 0.0,
        octet,
        authority: Some(sv2::keys::parse_public_key(key).unwrap()),
    }
}

/// The honest side's p99 without attackers: the bound every case is held to.
fn measure_baseline(t: &mut Target) {
    let (p99, report) = honest_run(t);
    check_honest(t, "baseline", &report);
    t.base_p99 = p99;
}

#[test]
fn the_sv1_pool_keeps_serving_honest_miners_under_attack() {
    let (_one, dir, mut roles, at) = on_simnet(&[]);
    let rpc = at.rpc().to_owned();
    let store = dir.path().join("pool.sqlite");
    let args = pool_args(&rpc, store.to_str().unwrap());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let pool = roles.add("pool", Role::start("pool", &args));
    let sv1 = pool.line("sv1 listening on");
    let http = pool.line("http listening on");
    let t = target("pool (SV1)", 11, pool, &sv1, http);
    sv1_cases(&t);
    case(
        &t,
        14,
        "new worker names across connections",
        worker_names_across_connections,
    );
    print_rows(t.name);
}

/// An SV2 pool on simnet's Template Provider, with the suite's edge limits (or the defaults,
/// as the upstream of a farm proxy under test): (SV2 address, authority key, http).
fn sv2_pool(
    roles: &mut Roles,
    dir: &std::path::Path,
    tdp: &str,
    tdp_key: &str,
    tight: bool,
) -> (String, String, String) {
    let store = dir.join("sv2pool.sqlite");
    let mut args = support::sv2_pool_args("127.0.0.1:0", tdp, tdp_key, &store);
    args.extend(SHARE_LOAD.map(String::from));
    args.extend([
        "--authority-key-file".into(),
        dir.join("authority.key").display().to_string(),
    ]);
    if tight {
        args.extend(edge_flags());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let pool = roles.add("sv2 pool", Role::start("pool", &args));
    let key = pool.line("sv2 authority public key");
    let sv2 = pool.line("sv2 listening on");
    let http = pool.line("http listening on");
    (sv2, key, http)
}

#[test]
fn the_sv2_pool_keeps_serving_honest_miners_under_attack() {
    let (_one, dir, mut roles, at) = on_simnet(&[]);
    let (tdp, tdp_key) = (at.tdp().to_owned(), at.tdp_key().to_owned());
    let (sv2, key, http) = sv2_pool(&mut roles, dir.path(), &tdp, &tdp_key, true);
    let pid = roles
        .0
        .iter()
        .find(|(n, _)| *n == "sv2 pool")
        .unwrap()
        .1
        .pid();
    let mut t = sv2_target("pool (SV2)", 12, pid, &sv2, &key, http);
    measure_baseline(&mut t);
    sv2_cases(&t);
    sv2_mining_cases(&t);
    print_rows(t.name);
}

/// A farm proxy (`translator` or `proxy`) in front of `upstream` with the suite's edge
/// limits, under attack from its devices' side.
fn farm_proxy_under_attack(
    roles: &mut Roles,
    subcommand: &str,
    upstream: &[&str],
    name: &'static str,
    octet: u8,
) {
    let mut args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--device-hash-rate",
        "100kH/s",
        "--http-listen",
        "127.0.0.1:0",
    ]
    .iter()
    .chain(&SHARE_LOAD)
    .chain(upstream)
    .map(|s| (*s).to_owned())
    .collect();
    args.extend(edge_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let role = roles.add(name, Role::start(subcommand, &args));
    let sv1 = role.line("sv1 listening on");
    let http = role.line("http listening on");
    let t = target(name, octet, role, &sv1, http);
    sv1_cases(&t);
    print_rows(t.name);
}

#[test]
fn the_translator_keeps_serving_honest_devices_under_attack() {
    let (_one, dir, mut roles, at) = on_simnet(&[]);
    let (tdp, tdp_key) = (at.tdp().to_owned(), at.tdp_key().to_owned());
    let (sv2, key, _) = sv2_pool(&mut roles, dir.path(), &tdp, &tdp_key, false);
    let upstream = ["--upstream", &sv2, "--upstream-authority-key", &key];
    farm_proxy_under_attack(&mut roles, "translator", &upstream, "translator", 13);
}

#[test]
fn the_sv1_proxy_keeps_serving_honest_devices_under_attack() {
    let (_one, dir, mut roles, at) = on_simnet(&[]);
    let rpc = at.rpc().to_owned();
    let store = dir.path().join("pool.sqlite");
    let mut pool_args = pool_args(&rpc, store.to_str().unwrap());
    // The upstream pool keeps the default edge: only the proxy is under attack.
    pool_args.truncate(pool_args.len() - edge_flags().len());
    let pool_args: Vec<&str> = pool_args.iter().map(String::as_str).collect();
    let pool = roles.add("pool", Role::start("pool", &pool_args));
    let upstream = pool.line("sv1 listening on");
    farm_proxy_under_attack(
        &mut roles,
        "proxy",
        &["--upstream", &upstream],
        "proxy (SV1)",
        14,
    );
}

#[test]
fn the_jds_keeps_serving_honest_clients_under_attack() {
    let (_one, dir, mut roles, at) = on_simnet(&[]);
    let rpc = at.rpc().to_owned();
    let key_file = dir.path().join("jd.key");
    std::fs::write(&key_file, format!("{}\n", "5a".repeat(32))).unwrap();
    let mut args = support::jds_args(&rpc, "127.0.0.1:0", key_file.to_str().unwrap());
    args.extend(
        [
            "--authority-key-file",
            dir.path().join("authority.key").to_str().unwrap(),
            "--http-listen",
            "127.0.0.1:0",
            // The honest client asks 20 times a second.
            "--allocation-rate",
            "100",
            "--duration",
            "600s",
        ]
        .map(String::from),
    );
    args.extend(edge_flags());
    // The JDS takes no lines and no shares: its edge flags are the rest.
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let jds = roles.add("jds", Role::start("jds", &args));
    let key = jds.line("jds authority public key");
    let addr = jds.line("jds listening on");
    let http = jds.line("http listening on");
    let authority = sv2::keys::parse_public_key(&key).unwrap();
    let mut t = Target {
        name: "jds",
        addr: addr.parse().unwrap(),
        http,
        pid: jds.pid(),
        honest: Honest::JdClient { key: authority },
        base_p99: 0.0,
        octet: 15,
        authority: Some(authority),
    };
    measure_baseline(&mut t);
    sv2_cases(&t);
    case(&t, 7, "garbage after the handshake", garbage_after_sv2);
    case(
        &t,
        9,
        "valid messages at 100x the rate",
        message_rate::<Sv2Attacker>,
    );
    print_rows(t.name);
}

/// The JDC's device side (its embedded pool's SV2 port) under attack, with a pool, a JDS and
/// simnet's Template Provider behind it at their default edges.
#[test]
fn the_jdc_keeps_serving_honest_devices_under_attack() {
    // A tenth of the mainnet-like backlog and no fee-driven template during the cases: a debug
    // build's JDC takes a second or more to fetch and declare a full template's transactions,
    // which would stall its devices' verdicts whenever one came.
    let (_one, dir, mut roles, at) = on_simnet(&[
        ("--initial-txs", "300"),
        ("--tx-rate", "20"),
        ("--template-interval", "10m"),
    ]);
    let (rpc, tdp, tdp_key) = (at.rpc(), at.tdp(), at.tdp_key());
    let token_key = dir.path().join("jd.key");
    std::fs::write(&token_key, format!("{}\n", "5a".repeat(32))).unwrap();
    let token_key = token_key.to_str().unwrap();
    let store = dir.path().join("pool.sqlite");
    let pool = roles.add(
        "pool",
        Role::start(
            "pool",
            &[
                "--sv2-listen",
                "127.0.0.1:0",
                "--tp",
                tdp,
                "--tp-authority-key",
                tdp_key,
                "--payout-address",
                PAYOUT,
                "--store",
                store.to_str().unwrap(),
                "--jd-token-key",
                token_key,
                "--authority-key-file",
                dir.path().join("pool-authority.key").to_str().unwrap(),
                "--duration",
                "600s",
            ],
        ),
    );
    let pool_key = pool.line("sv2 authority public key");
    let upstream = pool.line("sv2 listening on");
    let jds_key_file = dir.path().join("jds-authority.key");
    let mut jds_args = support::jds_args(rpc, "127.0.0.1:0", token_key);
    jds_args.extend(
        [
            "--authority-key-file",
            jds_key_file.to_str().unwrap(),
            "--duration",
            "600s",
        ]
        .map(String::from),
    );
    let jds = roles.add("jds", Role::start("jds", &support::strs(&jds_args)));
    let jds_key = jds.line("jds authority public key");
    let jds_addr = jds.line("jds listening on");
    let jdc_store = dir.path().join("jdc.sqlite");
    let jdc_key_file = dir.path().join("jdc-authority.key");
    let mut args = support::jdc_args(tdp, tdp_key, &upstream, &pool_key, &jds_addr, &jds_key);
    args.extend(
        [
            "--store",
            jdc_store.to_str().unwrap(),
            "--authority-key-file",
            jdc_key_file.to_str().unwrap(),
            "--http-listen",
            "127.0.0.1:0",
        ]
        .iter()
        .chain(&SHARE_LOAD)
        .map(|s| (*s).to_owned()),
    );
    args.extend(edge_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let jdc = roles.add("jdc", Role::start("jdc", &args));
    let key = jdc.line("sv2 authority public key");
    let sv2 = jdc.line("sv2 listening on");
    let http = jdc.line("http listening on");
    let mut t = sv2_target("jdc", 16, jdc.pid(), &sv2, &key, http);
    // The first seconds of a JDC's shares wait for its first declared job (a debug build
    // fetches and declares a template's transactions slowly): a warm-up, not the baseline.
    let (warm_up, _) = honest_run(&t);
    eprintln!("jdc: warm-up p99 {warm_up:.1} ms");
    measure_baseline(&mut t);
    sv2_cases(&t);
    sv2_mining_cases(&t);
    print_rows(t.name);
}

/// The soak: one pool (SV1 and SV2 ports, templates from simnet's RPC) serving honest SV1 and
/// SV2 fleets while this suite's attacks run against both ports in a loop. Every minute it
/// records the pool's resident memory, open file descriptors, connections and the
/// submit-to-verdict p99 of a small probe fleet (4 SV1 devices for 20 s), then prints the table
/// and fails unless RSS and fds stayed within 5% of their value at the end of the warm-up (the
/// first 5 minutes, or a sixth of a shorter run), the probe's shares were all answered, and
/// every attack met its bound.
///
/// `SOAK_DEVICES` honest devices, half SV1 and half SV2 [default: 10000]; `SOAK_MINUTES`
/// [default: 30]. The pool runs with this suite's limits (40 connections per address, so the
/// honest devices spread over enough 127.0.x.y addresses to stay under it; the attackers come
/// from 127.20.0.0 and up) and `--max-connections` raised for the fleets. Its figures go into
/// docs/performance.md; CI does not run it (half an hour):
///
/// `cargo test --release -p cli --test hostile -- --ignored --exact soak --nocapture`
#[test]
#[ignore = "the soak: 30 minutes by default (SOAK_MINUTES); run by hand"]
fn soak() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let var = |k: &str, d: u64| std::env::var(k).map_or(d, |v| v.parse().expect(k));
    let (devices, minutes) = (var("SOAK_DEVICES", 10_000), var("SOAK_MINUTES", 30));
    // What the attacks leave (bans, departed workers' statistics) is kept ten minutes: the
    // state reaches its steady size then, and the memory with it (docs/operations.md,
    // "Memory").
    let warmup = if minutes >= 30 {
        10
    } else {
        minutes.div_ceil(6)
    };
    let half = devices / 2;
    // 40 per address at most: both fleets share the addresses (17 each), the probe adds 4 on
    // 127.0.0.1.
    let addrs = half.div_ceil(17);
    // As many open files as the hard limit allows, for this process and what it starts.
    let _ = tap::net::raise_nofile_limit();
    let dir = tempfile::tempdir().unwrap();
    let mut roles = Roles::default();
    let (simnet, at) = support::simnet()
        .rpc()
        .block_interval("10m")
        .arg("--network-difficulty", "100000")
        .start();
    roles.add("simnet", simnet);
    let store = dir.path().join("pool.sqlite");
    let key_file = dir.path().join("authority.key");
    let mut args = pool_args(at.rpc(), store.to_str().unwrap());
    // This suite's limits, but room for the fleets, a coarser share rate, and the soak's length.
    for (flag, value) in [
        ("--max-connections", (devices + 2000).to_string()),
        ("--start-difficulty", "0.0001".into()),
        ("--min-difficulty", "0.00001".into()),
        ("--shares-per-minute", "6".into()),
        ("--duration", format!("{}m", minutes + 5)),
    ] {
        let at = args.iter().position(|a| a == flag).unwrap();
        args[at + 1] = value;
    }
    args.extend(
        [
            "--sv2-listen",
            "127.0.0.1:0",
            "--authority-key-file",
            key_file.to_str().unwrap(),
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let pool = roles.add("pool", Role::start("pool", &args));
    let mut at = pool.lines_starting(&[
        "sv1 listening on",
        "sv2 listening on",
        "http listening on",
        "sv2 authority public key",
    ]);
    let mut take = |k: &str| at.remove(k).unwrap();
    let (sv1, sv2) = (take("sv1 listening on"), take("sv2 listening on"));
    let (http, key, pid) = (
        take("http listening on"),
        take("sv2 authority public key"),
        pool.pid(),
    );
    // The pid, for a profiler to attach to (`perf record -p PID`; heaptrack, which hooks
    // `malloc`, sees only SQLite's allocations since Rust's go to jemalloc).
    eprintln!(
        "soak: pool pid {pid}, {half} SV1 and {half} SV2 devices over {addrs} addresses each, {minutes} minutes"
    );
    let fleet_minutes = format!("{}m", minutes + 1);
    let (half, addrs) = (half.to_string(), addrs.to_string());
    let honest = |pool: &str, sv2: &[&str]| {
        let mut a = vec![
            "--pool",
            pool,
            "--devices",
            &half,
            "--source-addrs",
            &addrs,
            "--hash-budget",
            "2MH/s",
            "--connect-rate",
            "500/s",
            "--duration",
            &fleet_minutes,
        ];
        a.extend_from_slice(sv2);
        Role::start("fleet", &a)
    };
    roles.add("fleet-sv1", honest(&sv1, &[]));
    roles.add(
        "fleet-sv2",
        honest(&sv2, &["--protocol", "sv2", "--authority-key", &key]),
    );
    let mix = {
        let (sv1, sv2, http, key) = (sv1.clone(), sv2.clone(), http.clone(), key.clone());
        let deadline = Instant::now() + Duration::from_secs(minutes * 60);
        std::thread::spawn(move || hostile_mix(&sv1, &sv2, &http, &key, pid, deadline))
    };
    let mut samples = Vec::new();
    for minute in 1..=minutes {
        let start = Instant::now();
        let probe = probe(&sv1);
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
        let status = http_get_json(&http, "/api/status");
        let mib = |key: &str| status["memory"][key].as_f64().map(|b| b / (1 << 20) as f64);
        let sample = Sample {
            minute,
            rss_mib: rss(pid) as f64 / (1 << 20) as f64,
            heap_in_use_mib: mib("heap_in_use_bytes"),
            heap_free_mib: mib("heap_free_bytes"),
            fds,
            connections: status["connections"].as_u64().unwrap_or(0),
            probe_p99_ms: probe
                .as_ref()
                .and_then(|p| p["share_latency_ms"]["p99"].as_f64()),
            probe_unanswered: probe
                .as_ref()
                .and_then(|p| p["shares"]["unanswered"].as_u64()),
        };
        eprintln!(
            "minute {minute}: RSS {:.1} MiB (heap: {:.1?} MiB live, {:.1?} MiB free and kept), {} fds, {} connections, probe p99 {:?} ms, {:?} unanswered",
            sample.rss_mib, sample.heap_in_use_mib, sample.heap_free_mib, sample.fds,
            sample.connections, sample.probe_p99_ms, sample.probe_unanswered
        );
        samples.push(sample);
        std::thread::sleep(Duration::from_secs(60).saturating_sub(start.elapsed()));
    }
    let rounds = mix.join().expect("every attack of the mix met its bound");
    eprintln!("hostile mix: {rounds} rounds of every attack, each within its bound");
    let csv: String =
        std::iter::once(
            "minute,rss_mib,fds,connections,probe_p99_ms,probe_unanswered,heap_in_use_mib,heap_free_mib"
                .to_owned(),
        )
        .chain(samples.iter().map(|s| {
            format!(
                "{},{:.1},{},{},{:?},{:?},{:.1?},{:.1?}",
                s.minute,
                s.rss_mib,
                s.fds,
                s.connections,
                s.probe_p99_ms,
                s.probe_unanswered,
                s.heap_in_use_mib,
                s.heap_free_mib
            )
        }))
            .collect::<Vec<_>>()
            .join("\n");
    println!("{csv}");
    let after: Vec<&Sample> = samples.iter().filter(|s| s.minute >= warmup).collect();
    assert!(!after.is_empty(), "too short for a verdict");
    let spread = |f: &dyn Fn(&Sample) -> f64| {
        let first = f(after[0]);
        let max = after.iter().map(|s| f(s)).fold(first, f64::max);
        if first > 0.0 {
            (max - first) / first * 100.0
        } else {
            0.0
        }
    };
    let (rss_growth, fd_growth) = (spread(&|s| s.rss_mib), spread(&|s| s.fds as f64));
    let p99: Vec<f64> = after.iter().filter_map(|s| s.probe_p99_ms).collect();
    println!(
        "after the {warmup}-minute warm-up: RSS {rss_growth:+.1}%, fds {fd_growth:+.1}% (bound: 5%); probe p99 {:.1}..{:.1} ms",
        p99.iter().copied().fold(f64::INFINITY, f64::min),
        p99.iter().copied().fold(0.0, f64::max)
    );
    // A second reading, less moved by any one sample (the live heap rises and falls with the
    // templates' size between blocks): the median of the first five minutes after the warm-up
    // against that of the last five. Printed beside the verdict, which stays the strict one
    // (the largest sample against the first).
    let median = |v: &[&Sample]| {
        let mut r: Vec<f64> = v.iter().map(|s| s.rss_mib).collect();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    };
    let k = after.len().min(5);
    let (early, late) = (median(&after[..k]), median(&after[after.len() - k..]));
    println!(
        "RSS median, the first {k} minutes from the warm-up's end against the last {k}: {early:.1} then {late:.1} MiB ({:+.1}%)",
        (late - early) / early * 100.0
    );
    // Where the memory settles: the first minute from which RSS stays within 5% of its value
    // then (what the attacks leave, bans and departed workers, lasts ten minutes).
    if let Some((i, s)) = samples
        .iter()
        .enumerate()
        .find(|(i, s)| samples[*i..].iter().all(|l| l.rss_mib <= s.rss_mib * 1.05))
    {
        println!(
            "RSS within 5% from minute {} on: {:.1} MiB at the time",
            s.minute, samples[i].rss_mib
        );
    }
    assert!(
        after.iter().all(|s| s.probe_unanswered == Some(0)),
        "after the warm-up a probe failed or had shares unanswered"
    );
    assert!(
        rss_growth <= 5.0 && fd_growth <= 5.0,
        "NOT flat: RSS {rss_growth:+.1}%, fds {fd_growth:+.1}%"
    );
}

/// One minute of the soak.
struct Sample {
    minute: u64,
    rss_mib: f64,
    /// The pool's allocator: live bytes, and free bytes it kept (`/api/status` `memory`).
    heap_in_use_mib: Option<f64>,
    heap_free_mib: Option<f64>,
    fds: usize,
    connections: u64,
    probe_p99_ms: Option<f64>,
    /// `None` when the probe fleet failed (the soak goes on and the row says so).
    probe_unanswered: Option<u64>,
}

/// The minute's probe: 4 SV1 devices for 20 s, their report; `None` when the fleet failed or
/// printed no report (a pool too busy to serve it, say), which the table shows rather than
/// ending the soak.
fn probe(sv1: &str) -> Option<Value> {
    let mut fleet = Role::start(
        "fleet",
        &[
            "--pool",
            sv1,
            "--devices",
            "4",
            "--hash-budget",
            "100kH/s",
            "--suggest-difficulty",
            "0.00001",
            "--duration",
            "20s",
            "--json",
        ],
    );
    let status = fleet.wait_done(Duration::from_secs(60));
    if !status.is_some_and(|s| s.success()) {
        eprintln!("probe failed ({status:?}): {}", fleet.log_tail());
        fleet.kill9();
        return None;
    }
    serde_json::from_str(&fleet.stop().join("\n")).ok()
}

/// The soak's hostile mix: every attack whose bound does not depend on how many honest devices
/// there are, one after another from fresh addresses, against the pool at `sv1` and `sv2`,
/// until `deadline`. Each attack checks its own bound as in the suite (a panic fails the soak).
/// Returns the rounds run.
fn hostile_mix(sv1: &str, sv2: &str, http: &str, key: &str, pid: u32, deadline: Instant) -> u32 {
    let authority = sv2::keys::parse_public_key(key).unwrap();
    type Attack = fn(&Target, Box<dyn Fn(u8) -> Ipv4Addr>) -> String;
    let sv1_attacks: [(&str, Attack); 10] = [
        ("connection flood from one address", flood_one_address),
        ("silent connections", silent),
        ("garbage before the handshake", garbage_before),
        ("garbage after the handshake", garbage_after_sv1),
        (
            "valid messages at 100x the rate",
            message_rate::<Sv1Attacker>,
        ),
        ("invalid shares until banned", invalid_shares::<Sv1Attacker>),
        ("thousands of worker names", worker_names),
        ("never reads", never_reads),
        ("reconnect 1000/s", reconnect_flood),
        ("byte-at-a-time handshakes", |t, ip| {
            slowloris(t, ip, SV1_HELLO)
        }),
    ];
    let sv2_attacks: [(&str, Attack); 4] = [
        ("garbage after the handshake", garbage_after_sv2),
        (
            "valid messages at 100x the rate",
            message_rate::<Sv2Attacker>,
        ),
        ("invalid shares until banned", invalid_shares::<Sv2Attacker>),
        ("half-open (FIN mid-handshake)", |t, ip| {
            half_open(t, ip, SV2_HELLO)
        }),
    ];
    let target = |addr: &str, octet: u8, sv2: bool| Target {
        name: if sv2 { "pool (SV2)" } else { "pool (SV1)" },
        addr: addr.parse().unwrap(),
        http: http.to_owned(),
        pid,
        honest: Honest::Fleet(Vec::new()),
        base_p99: 0.0,
        octet,
        authority: Some(authority),
    };
    let mut round = 0u32;
    while Instant::now() < deadline {
        // Fresh addresses each round (127.20-219.x.y): earlier rounds' bans stay where they are.
        let octet = 20 + (round % 200) as u8;
        let (t1, t2) = (target(sv1, octet, false), target(sv2, octet, true));
        for (n, (name, attack)) in sv1_attacks.iter().enumerate() {
            let n = n as u8;
            let limited = attack(&t1, Box::new(move |i| Ipv4Addr::new(127, octet, n, 1 + i)));
            println!("round {round} sv1 {name}: {limited}");
        }
        for (n, (name, attack)) in sv2_attacks.iter().enumerate() {
            let n = 100 + n as u8;
            let limited = attack(&t2, Box::new(move |i| Ipv4Addr::new(127, octet, n, 1 + i)));
            println!("round {round} sv2 {name}: {limited}");
        }
        round += 1;
    }
    round
}
