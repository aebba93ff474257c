//! Scale: 10,000 simulated SV1 devices (or SV2 devices, `--protocol sv2`) on one core, each
//! finding 15 shares a minute at the pool's target.
//!
//! Three processes, so that each one's CPU and memory are its own: this one orchestrates; a
//! child serves the in-crate test pool, SV1 or SV2 (which validates every share by recomputing
//! it; the SV2 one acknowledges each share on its own), pinned to
//! a second core when there is one; and the fleet runs in a child of its own, pinned with all its
//! threads to one core and driven by a one-worker runtime, as `stratumlab fleet --threads 1` runs.
//!
//! The fleet runs twice against the same pool: idle (hash budget 0: connections held, jobs read)
//! and hashing (`--rate` hashes per second per device; the pool's difficulty is set so that this
//! rate finds `--shares-per-min` shares a minute). Once every device is ready and a settling
//! pause has passed, each run measures over a window: CPU as a percentage of one core, resident
//! memory grown per device since before the first device existed, shares accepted per second
//! against the rate offered, and hashes against the budget. The pool sends a new job every 30 s
//! (as ckpool does), so a window holds job fan-out too. Of the hashing run's CPU, the part spent
//! hashing is the hashes times the cost of one header hash, measured in the same process on the
//! same core; the rest is what running the devices costs.
//!
//! ```sh
//! cargo bench -p fleet --bench scale
//! cargo bench -p fleet --bench scale -- --devices 10000 --rate 100 --shares-per-min 15 --window 30s
//! cargo bench -p fleet --bench scale -- --test     # 200 devices, a 2 s window
//! cargo bench -p fleet --bench scale -- --protocol sv2   # SV2 devices, standard channels
//! FLEET_SCALE_EVENTS=scale.ev cargo bench -p fleet --bench scale   # the hashing run's events
//! ```
//!
//! The machine's load average is printed with the figures: CPU time and memory are the fleet's
//! own whatever else runs, but latency tails and the shares counted within the window are not
//! when other processes share the fleet's core.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write as _};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleet::stats::LiveStats;
use fleet::sv2_testpool::{Sv2TestPool, Sv2TestPoolConfig};
use fleet::testpool::{TestPool, TestPoolConfig};
use fleet::{proc_stat, Fleet, FleetConfig, Profile, Protocol};
use primitives::{Difficulty, HeaderMidstate};
use serde::{Deserialize, Serialize};

/// The stratumlab binary's allocator: the fleet's memory per device here is what
/// `stratumlab fleet` uses.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// What the orchestrator passes to the fleet child (as JSON in an environment variable).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct FleetParams {
    pool: SocketAddr,
    protocol: Protocol,
    cpu: Option<usize>,
    devices: u32,
    /// Hashes per second for the whole fleet.
    budget: f64,
    settle: Duration,
    window: Duration,
    connect_rate: f64,
    /// The pool's process, whose CPU over the window is measured too.
    pool_pid: u32,
}

/// What the fleet child measured over its window.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Measured {
    devices: u32,
    ready: u64,
    /// From the first connection attempt until every device was ready.
    ready_after_s: f64,
    window_s: f64,
    cpu_pct: f64,
    pool_cpu_pct: f64,
    rss_bytes: u64,
    rss_per_device: f64,
    sent_per_s: f64,
    accepted_per_s: f64,
    rejected: u64,
    unanswered: u64,
    dropped: u64,
    hashes_per_s: f64,
    jobs_per_s: f64,
    ns_per_hash: f64,
    latency_p50_ms: Option<f64>,
    latency_p99_ms: Option<f64>,
    latency_max_ms: Option<f64>,
    protocol_errors: u64,
    threads: usize,
    /// Every thread of the fleet process was pinned to the one core.
    pinned: bool,
}

const ROLE: &str = "FLEET_SCALE_ROLE";
const PARAMS: &str = "FLEET_SCALE_PARAMS";
/// Where the hashing run writes its events, when set (they cost the fleet some CPU).
const EVENTS: &str = "FLEET_SCALE_EVENTS";

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("pool") => pool_child(),
        Ok("fleet") => fleet_child(),
        _ => orchestrate(),
    }
}

struct Args {
    test: bool,
    protocol: Protocol,
    devices: u32,
    rate: f64,
    shares_per_min: f64,
    window: Duration,
    settle: Duration,
}

fn args() -> Args {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let test = raw.iter().any(|a| a == "--test");
    let value = |flag: &str| {
        raw.iter()
            .position(|a| a == flag)
            .and_then(|i| raw.get(i + 1))
            .cloned()
    };
    let num = |flag: &str, default: f64| {
        value(flag).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{flag} {v:?}: expected a number"))
        })
    };
    let dur = |flag: &str, default: Duration| {
        value(flag).map_or(default, |v| {
            humantime::parse_duration(&v)
                .unwrap_or_else(|e| panic!("{flag} {v:?}: {e} (durations take units: 30s)"))
        })
    };
    let (devices, window, settle) = if test {
        (200.0, Duration::from_secs(2), Duration::from_millis(500))
    } else {
        (10_000.0, Duration::from_secs(30), Duration::from_secs(3))
    };
    Args {
        test,
        protocol: value("--protocol").map_or(Protocol::Sv1, |v| {
            v.parse()
                .unwrap_or_else(|e| panic!("--protocol {v:?}: {e}"))
        }),
        devices: num("--devices", devices) as u32,
        rate: num("--rate", 100.0),
        shares_per_min: num("--shares-per-min", 15.0),
        window: dur("--window", window),
        settle: dur("--settle", settle),
    }
}

fn orchestrate() {
    let a = args();
    let load_before = loadavg();
    let cpus = allowed_cpus();
    // The fleet gets the first core this process may use, the pool the next one.
    let fleet_cpu = cpus.first().copied();
    let pool_cpu = cpus.get(1).copied().or(fleet_cpu);
    // Shares per second per device = rate / (difficulty * 2^32).
    let difficulty = a.rate / (a.shares_per_min / 60.0 * 4_294_967_296.0);
    let offered = a.devices as f64 * a.shares_per_min / 60.0;
    let mut pool = Pool::spawn(difficulty, pool_cpu, a.protocol);

    let params = |budget: f64| FleetParams {
        pool: pool.addr,
        protocol: a.protocol,
        cpu: fleet_cpu,
        devices: a.devices,
        budget,
        settle: a.settle,
        window: a.window,
        connect_rate: 5000.0,
        pool_pid: pool.child.id(),
    };
    let idle = run_fleet(&params(0.0));
    let hashing = run_fleet(&params(a.rate * a.devices as f64));
    let pool_stats = pool.finish();
    let load_after = loadavg();

    let hash_cpu_pct = hashing.hashes_per_s * hashing.ns_per_hash / 1e7;
    let from_hashes = hashing.hashes_per_s / (difficulty * 4_294_967_296.0);
    println!();
    println!(
        "fleet_scale: {} {} devices (asic profile) on one core (cpu {}), test pool on cpu {}",
        a.devices,
        a.protocol.as_str().to_uppercase(),
        fleet_cpu.map_or("any".into(), |c| c.to_string()),
        pool_cpu.map_or("any".into(), |c| c.to_string()),
    );
    println!(
        "  target           {} shares/min per device at {} H/s per device: difficulty {difficulty:.3e}, {offered:.0} shares/s offered",
        a.shares_per_min, a.rate
    );
    for (name, m) in [("idle", &idle), ("hashing", &hashing)] {
        println!(
            "  {name:<8} {:>6} ready in {:.1}s; over {:.0}s: CPU {:.1}% of one core (pool {:.1}%), RSS {:.1} MiB, {:.0} B per device, {} threads{}",
            m.ready,
            m.ready_after_s,
            m.window_s,
            m.cpu_pct,
            m.pool_cpu_pct,
            m.rss_bytes as f64 / (1 << 20) as f64,
            m.rss_per_device,
            m.threads,
            if m.pinned { " pinned" } else { " NOT all pinned" },
        );
    }
    println!(
        "  shares           {:.0}/s sent of {offered:.0}/s offered ({:.3}; {from_hashes:.0}/s expected from the hashes done), {:.0}/s accepted ({:.3}), {} rejected, {} unanswered, {} dropped",
        hashing.sent_per_s,
        hashing.sent_per_s / offered,
        hashing.accepted_per_s,
        hashing.accepted_per_s / offered,
        hashing.rejected,
        hashing.unanswered,
        hashing.dropped,
    );
    println!(
        "  hashing          {:.0} H/s of a {:.0} H/s budget ({:.3}); {:.1} ns per header hash: {hash_cpu_pct:.1}% of the core hashes, {:.1}% runs the devices",
        hashing.hashes_per_s,
        a.rate * a.devices as f64,
        hashing.hashes_per_s / (a.rate * a.devices as f64),
        hashing.ns_per_hash,
        hashing.cpu_pct - hash_cpu_pct,
    );
    if let (Some(p50), Some(p99), Some(max)) = (
        hashing.latency_p50_ms,
        hashing.latency_p99_ms,
        hashing.latency_max_ms,
    ) {
        println!(
            "  share latency    p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.1} ms (submit to verdict, over the window)"
        );
    }
    println!(
        "  pool             {} shares validated, {} low difficulty, {} stale, {} duplicate",
        pool_stats.valid, pool_stats.low_difficulty, pool_stats.stale, pool_stats.duplicate
    );
    println!(
        "  jobs             {:.2} notifies/s per device while idle",
        idle.jobs_per_s / a.devices.max(1) as f64
    );
    println!("  host             load average {load_before} before, {load_after} after");

    for m in [&idle, &hashing] {
        assert_eq!(m.ready, a.devices as u64, "every device got ready");
        assert_eq!(m.protocol_errors, 0);
    }
    assert_eq!(idle.sent_per_s, 0.0, "an idle fleet sends no shares");
    assert!(
        hashing.accepted_per_s > 0.0,
        "the hashing fleet found shares"
    );
    assert_eq!(hashing.rejected, 0, "the pool rejected shares");
    assert_eq!(pool_stats.low_difficulty, 0);
    if !a.test && !hashing.pinned {
        eprintln!("fleet_scale: the fleet's threads were not all pinned to one core");
    }
}

fn run_fleet(p: &FleetParams) -> Measured {
    let exe = std::env::current_exe().expect("this bench's path");
    let out = Command::new(exe)
        .env(ROLE, "fleet")
        .env(PARAMS, serde_json::to_string(p).expect("params as JSON"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("the fleet child runs");
    assert!(out.status.success(), "fleet child: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("fleet child said {text:?}: {e}"))
}

/// The test pool in a child process: it serves until its stdin closes, then prints its counts.
struct Pool {
    child: Child,
    addr: SocketAddr,
    stdout: BufReader<std::process::ChildStdout>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct PoolCounts {
    valid: u64,
    low_difficulty: u64,
    stale: u64,
    duplicate: u64,
}

impl PoolCounts {
    /// Either test pool's counters, in the order of the fields.
    fn load([valid, low_difficulty, stale, duplicate]: [&std::sync::atomic::AtomicU64; 4]) -> Self {
        PoolCounts {
            valid: valid.load(Relaxed),
            low_difficulty: low_difficulty.load(Relaxed),
            stale: stale.load(Relaxed),
            duplicate: duplicate.load(Relaxed),
        }
    }
}

impl Pool {
    fn spawn(difficulty: f64, cpu: Option<usize>, protocol: Protocol) -> Pool {
        let exe = std::env::current_exe().expect("this bench's path");
        let mut child = Command::new(exe)
            .env(ROLE, "pool")
            .env(
                PARAMS,
                serde_json::json!({ "difficulty": difficulty, "cpu": cpu, "protocol": protocol })
                    .to_string(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the pool child starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the pool's address");
        let addr = line
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("pool child said {line:?}: {e}"));
        Pool {
            child,
            addr,
            stdout,
        }
    }

    fn finish(&mut self) -> PoolCounts {
        drop(self.child.stdin.take());
        let mut line = String::new();
        let _ = self.stdout.read_line(&mut line);
        let _ = self.child.wait();
        serde_json::from_str(line.trim()).unwrap_or_default()
    }
}

fn pool_child() {
    let p: serde_json::Value =
        serde_json::from_str(&std::env::var(PARAMS).unwrap_or_default()).expect("pool params");
    if let Some(cpu) = p["cpu"].as_u64() {
        pin_to(cpu as usize).expect("pin the pool");
    }
    let _ = fleet::net::raise_nofile_limit();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let difficulty = p["difficulty"].as_f64().expect("a difficulty");
    let stdin_closed = || async {
        tokio::task::spawn_blocking(|| {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        })
        .await
    };
    let counts = match serde_json::from_value(p["protocol"].clone()).unwrap_or_default() {
        Protocol::Sv1 => rt.block_on(async {
            let pool = TestPool::start(TestPoolConfig {
                difficulty,
                branch_len: 12,
                ..TestPoolConfig::default()
            })
            .await
            .expect("the pool listens");
            announce(pool.addr());
            serve_until(stdin_closed(), || pool.new_job(false)).await;
            let s = pool.stats();
            PoolCounts::load([&s.valid, &s.low_difficulty, &s.stale, &s.duplicate])
        }),
        Protocol::Sv2 => rt.block_on(async {
            let pool = Sv2TestPool::start(Sv2TestPoolConfig {
                target: Difficulty::saturating(difficulty).to_target(),
                ..Sv2TestPoolConfig::default()
            })
            .await
            .expect("the pool listens");
            announce(pool.addr());
            serve_until(stdin_closed(), || pool.new_job()).await;
            let s = pool.stats();
            PoolCounts::load([&s.valid, &s.low_difficulty, &s.stale, &s.duplicate])
        }),
    };
    println!(
        "{}",
        serde_json::to_string(&counts).expect("counts as JSON")
    );
}

fn announce(addr: SocketAddr) {
    println!("{addr}");
    std::io::stdout().flush().expect("stdout");
}

/// Serves until `done` completes, with a new job every 30 s (as ckpool sends them).
async fn serve_until(done: impl std::future::Future, mut new_job: impl FnMut()) {
    tokio::pin!(done);
    let mut jobs = tokio::time::interval(Duration::from_secs(30));
    jobs.tick().await;
    loop {
        tokio::select! {
            _ = &mut done => break,
            _ = jobs.tick() => new_job(),
        }
    }
}

/// What the window saw: when every device was ready (seconds from the start), the counters at
/// its start and its end, and the resident memory at its end.
struct Window {
    ready_after: f64,
    a: Sample,
    b: Sample,
    rss: u64,
}

/// Counters read at the start and the end of the window.
struct Sample {
    at: Instant,
    /// Submit-to-verdict latency so far, in microseconds.
    latency_us: hdrhistogram::Histogram<u64>,
    cpu: Duration,
    pool_cpu: Duration,
    sent: u64,
    accepted: u64,
    hashes: u64,
    jobs: u64,
}

impl Sample {
    fn take(s: &LiveStats, pool_pid: u32) -> Sample {
        Sample {
            at: Instant::now(),
            latency_us: s.latency_snapshot(),
            cpu: proc_stat::self_cpu().unwrap_or_default(),
            pool_cpu: proc_stat::process_cpu(pool_pid).unwrap_or_default(),
            sent: s.shares_sent.load(Relaxed),
            accepted: s.accepted.load(Relaxed),
            hashes: s.hashes.load(Relaxed),
            jobs: s.jobs.load(Relaxed),
        }
    }
}

fn fleet_child() {
    let p: FleetParams =
        serde_json::from_str(&std::env::var(PARAMS).unwrap_or_default()).expect("fleet params");
    // Before the runtime's threads exist: every thread created later inherits the affinity.
    if let Some(cpu) = p.cpu {
        pin_to(cpu).expect("pin the fleet");
    }
    let _ = fleet::net::raise_nofile_limit();
    let ns_per_hash = header_hash_ns();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let rss_before = proc_stat::rss_bytes(None).unwrap_or(0);
    let mut c = FleetConfig::new(p.pool);
    c.protocol = p.protocol;
    c.sv2.profile = Profile::Asic;
    c.devices = p.devices;
    c.hash_budget = p.budget;
    c.connect_rate = p.connect_rate;
    // Two runs of 10,000 connections leave 20,000 ports in TIME_WAIT: two source addresses
    // keep a third run clear of the ~28,000 ephemeral ports one address has.
    c.source_addrs = 2;
    c.device.profile = Profile::Asic;
    if p.budget > 0.0 {
        if let Some(path) = std::env::var_os(EVENTS) {
            c.events = events::EventSink::create(path, "fleet", "").expect("the events file");
        }
    }
    let sink = c.events.clone();
    let fleet = Fleet::new(c).expect("valid settings");
    let stats = fleet.stats();
    let window: Arc<Mutex<Option<Window>>> = Arc::default();
    let slot = Arc::clone(&window);
    let devices = p.devices as i64;
    let measure = async move {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(120);
        while stats.ready.load(Relaxed) < devices && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let ready_after = started.elapsed().as_secs_f64();
        tokio::time::sleep(p.settle).await;
        let a = Sample::take(&stats, p.pool_pid);
        tokio::time::sleep(p.window).await;
        let b = Sample::take(&stats, p.pool_pid);
        let rss = proc_stat::rss_bytes(None).unwrap_or(0);
        *slot.lock().expect("window lock") = Some(Window {
            ready_after,
            a,
            b,
            rss,
        });
    };
    let report = rt.block_on(fleet.run(measure));
    let (threads, pinned) = threads_pinned_to(p.cpu);
    sink.finish().expect("events written");
    drop(rt);
    let Window {
        ready_after: ready_after_s,
        a,
        b,
        rss,
    } = window
        .lock()
        .expect("window lock")
        .take()
        .expect("the window was measured");
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let per_s = |x: u64, y: u64| (y - x) as f64 / secs;
    let mut latency = b.latency_us.clone();
    latency
        .subtract(&a.latency_us)
        .expect("the same histogram, later");
    let ms = |q: f64| (!latency.is_empty()).then(|| latency.value_at_quantile(q) as f64 / 1e3);
    let m = Measured {
        devices: p.devices,
        ready: report.ready,
        ready_after_s,
        window_s: secs,
        cpu_pct: 100.0 * (b.cpu - a.cpu).as_secs_f64() / secs,
        pool_cpu_pct: 100.0 * b.pool_cpu.saturating_sub(a.pool_cpu).as_secs_f64() / secs,
        rss_bytes: rss,
        rss_per_device: rss.saturating_sub(rss_before) as f64 / p.devices.max(1) as f64,
        sent_per_s: per_s(a.sent, b.sent),
        accepted_per_s: per_s(a.accepted, b.accepted),
        rejected: report.shares.rejected,
        unanswered: report.shares.unanswered,
        dropped: report.shares.dropped,
        hashes_per_s: per_s(a.hashes, b.hashes),
        jobs_per_s: per_s(a.jobs, b.jobs),
        ns_per_hash,
        latency_p50_ms: ms(0.5),
        latency_p99_ms: ms(0.99),
        latency_max_ms: ms(1.0),
        protocol_errors: report.protocol_errors,
        threads,
        pinned,
    };
    println!("{}", serde_json::to_string(&m).expect("measured as JSON"));
}

/// The cost of one header hash as a device's nonce loop computes it (a midstate finished with
/// the header's last 16 bytes: two compressions), in this thread's CPU time (so that other
/// processes on the core do not count), median of five rounds.
fn header_hash_ns() -> f64 {
    let mid = HeaderMidstate::new(&[0x5a; 64]);
    let mut tail = [0u8; 16];
    let mut rounds: Vec<f64> = (0..5)
        .map(|_| {
            let n = 200_000u32;
            let t = thread_cpu_ns();
            for nonce in 0..n {
                tail[12..].copy_from_slice(&nonce.to_le_bytes());
                black_box(mid.finish(black_box(&tail)));
            }
            (thread_cpu_ns() - t) as f64 / n as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[2]
}

/// The 1-minute load average, as /proc/loadavg gives it.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: `set` is a valid cpu_set_t; CPU_SET ignores CPUs beyond its size.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    set
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    let mut set = cpu_set(&[]);
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `set` is a valid cpu_set_t and `c` is within its size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Pins every thread of this process (and every thread they create afterwards) to `cpu`: the
/// calling one, and any the allocator started before it (jemalloc's background thread).
fn pin_to(cpu: usize) -> std::io::Result<()> {
    let set = cpu_set(&[cpu]);
    let pin = |tid: i32| {
        // SAFETY: `set` is a valid cpu_set_t of the size passed.
        if unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) }
            != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // The calling thread is among them.
    for tid in std::fs::read_dir("/proc/self/task")?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        match pin(tid) {
            // It ended between the listing and now.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            r => r?,
        }
    }
    Ok(())
}

/// This process's threads, and whether each may run on `cpu` only.
fn threads_pinned_to(cpu: Option<usize>) -> (usize, bool) {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return (0, false);
    };
    let mut threads = 0;
    let mut pinned = cpu.is_some();
    for tid in dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        threads += 1;
        let mut set = cpu_set(&[]);
        // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
        let ok = unsafe {
            libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set)
        } == 0;
        let only = cpu.is_some_and(|c| {
            // SAFETY: `set` is a valid cpu_set_t.
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
                .eq(std::iter::once(c))
        });
        pinned &= ok && only;
    }
    (threads, pinned)
}
