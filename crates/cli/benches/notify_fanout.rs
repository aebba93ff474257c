//! `notify_fanout`: how long the SV1 pool takes to put a new job on every connected miner's
//! socket, and how much memory an idle miner connection costs it.
//!
//! Every role is its own process on 127.0.0.1, started from the `stratumlab` binary of this
//! build: `simnet` (the node: RPC only, no blocks of its own, no fee-driven template updates),
//! `pool` (`--events`, `--durability off`, no periodic template refresh: it follows the node by
//! long poll) and `fleet` (`--hash-budget 0`: devices that only hold their connection and read
//! jobs, spread over 8 source addresses). Vardiff is pinned (minimum = start difficulty) so that
//! idle miners are never re-sent work.
//!
//! 1. Memory: the pool's VmRSS, its live heap (`/api/status` `memory`) and the kernel's TCP
//!    memory (`/proc/net/sockstat`, pages) once the pool has served work for `--idle` (10 s),
//!    and again after every miner connected, got its first job and sat idle for `--idle`. The
//!    growth divided by the connections is the cost of one.
//! 2. Fan-out: the bench asks simnet to mine a block (`generatetoaddress`) every `--gap`; each
//!    new tip reaches the pool by long poll and becomes a clean job for everyone. Per template:
//!    from the pool's `TemplateCreated` (emitted just before `Engine::publish`) to the last
//!    connection's `JobSent` (emitted once the notify is written to the socket), and to the
//!    last device's `JobReceived` in the fleet's events. All stamps are CLOCK_MONOTONIC on one
//!    host, so the two processes' events share a time line.
//!
//! ```sh
//! cargo bench -p cli --bench notify_fanout                        # 1k and 10k connections
//! cargo bench -p cli --bench notify_fanout -- --connections 10000 --templates 100
//! cargo bench -p cli --bench notify_fanout -- --test              # 200 connections, 3 templates
//! ```
//!
//! It fails (exit 1) when a role does not start, a miner does not connect, or a template is not
//! measured on every connection.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use events::{EventKind, EventReader, JobId};
use lab::process::{Launch, RoleProcess};

/// A regtest P2WPKH address: the pool's payout and the mined blocks' coinbase.
const PAYOUT: &str = "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080";
const RPC_USER: &str = "lab";
const RPC_PASSWORD: &str = "lab";

/// One measured configuration.
#[derive(Clone, Debug)]
struct Plan {
    connections: u32,
    templates: u32,
    idle: Duration,
    /// Between two mined blocks: long enough for one fan-out to finish before the next starts.
    gap: Duration,
    /// Profile the pool with `perf record` while the templates go out, into this file.
    perf_record: Option<PathBuf>,
}

impl Plan {
    fn new(connections: u32, templates: u32, idle: Duration) -> Plan {
        Plan {
            connections,
            templates,
            idle,
            gap: Duration::from_millis(150) + Duration::from_micros(60) * connections,
            perf_record: None,
        }
    }

    /// How long the miners take to connect at most (the fleet paces them at 5,000/s).
    fn connect_deadline(&self) -> Duration {
        Duration::from_secs(20) + Duration::from_millis(2) * self.connections
    }

    /// The longest any role may run: each stops by itself even if the bench dies.
    fn bound(&self) -> Duration {
        self.connect_deadline()
            + 2 * self.idle
            + self.gap * (self.templates + 2)
            + Duration::from_secs(60)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let plans = match plans(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("notify_fanout: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The fleet and the pool each hold one descriptor per connection: use the whole hard limit.
    let _ = fleet::net::raise_nofile_limit();
    let mut failed = false;
    let mut results = Vec::new();
    for plan in plans {
        eprintln!(
            "notify_fanout: {} connections, {} templates, idle {}, gap {}",
            plan.connections,
            plan.templates,
            humantime::format_duration(plan.idle),
            humantime::format_duration(plan.gap)
        );
        match run(plan.clone()) {
            Ok(r) => {
                r.print();
                if let Err(e) = r.check() {
                    eprintln!(
                        "notify_fanout: FAILED at {} connections: {e}",
                        plan.connections
                    );
                    failed = true;
                }
                results.push(r);
            }
            Err(e) => {
                eprintln!(
                    "notify_fanout: FAILED at {} connections: {e}",
                    plan.connections
                );
                failed = true;
            }
        }
    }
    if results.len() > 1 {
        summary(&results);
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `--test`, `--connections N[,N...]`, `--templates K`, `--idle DURATION`, `--perf-record PATH`
/// (`PATH.N` per connection count); `--bench` (passed by cargo) and anything else are ignored.
fn plans(args: &[String]) -> Result<Vec<Plan>, String> {
    let test = args.iter().any(|a| a == "--test");
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .map(|i| {
                args.get(i + 1)
                    .cloned()
                    .ok_or(format!("{name} needs a value"))
            })
            .transpose()
    };
    let connections: Vec<u32> = match value("--connections")? {
        Some(v) => v
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .map_err(|e| format!("--connections {v}: {e}"))
            })
            .collect::<Result<_, _>>()?,
        None if test => vec![200],
        None => vec![1_000, 10_000],
    };
    let templates = match value("--templates")? {
        Some(v) => v.parse().map_err(|e| format!("--templates {v}: {e}"))?,
        None if test => 3,
        None => 25,
    };
    let idle = match value("--idle")? {
        Some(v) => humantime::parse_duration(&v).map_err(|e| format!("--idle {v}: {e}"))?,
        None if test => Duration::from_secs(1),
        None => Duration::from_secs(10),
    };
    if connections.contains(&0) || templates == 0 {
        return Err("connections and templates must be at least 1".into());
    }
    let perf = value("--perf-record")?;
    Ok(connections
        .into_iter()
        .map(|n| Plan {
            perf_record: perf.as_ref().map(|p| PathBuf::from(format!("{p}.{n}"))),
            ..Plan::new(n, templates, idle)
        })
        .collect())
}

// ---------------------------------------------------------------------------------------------
// One run: start the roles, measure memory, mine blocks, read the events.

fn run(plan: Plan) -> Result<Outcome, String> {
    let floor = write_floor(plan.connections.min(FLOOR_MAX_SOCKETS))?;
    let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let bound = format!("{}s", plan.bound().as_secs());

    let simnet = Role::start(
        "simnet",
        dir.path(),
        &[
            "--rpc-listen",
            "127.0.0.1:0",
            "--rpc-user",
            RPC_USER,
            "--rpc-password",
            RPC_PASSWORD,
            "--block-interval",
            "0",
            // New templates only on new tips: each one the bench asks for.
            "--template-interval",
            "1h",
            "--duration",
            &bound,
        ],
    )?;
    let rpc: SocketAddr = parse_addr(&simnet.line("rpc listening on", Duration::from_secs(30))?)?;

    let pool_events = dir.path().join("pool.ev");
    let store = dir.path().join("pool.sqlite");
    let max_connections = (plan.connections + 100).to_string();
    let pool = Role::start(
        "pool",
        dir.path(),
        &[
            "--sv1-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--node-rpc",
            &format!("http://{rpc}"),
            "--rpc-user",
            RPC_USER,
            "--rpc-password",
            RPC_PASSWORD,
            "--payout-address",
            PAYOUT,
            "--start-difficulty",
            "1",
            "--min-difficulty",
            "1",
            "--template-interval",
            "0",
            "--store",
            path_str(&store)?,
            "--durability",
            "off",
            "--events",
            path_str(&pool_events)?,
            "--max-connections",
            &max_connections,
            // The fleet's devices share 8 loopback addresses.
            "--max-connections-per-ip",
            &max_connections,
            "--duration",
            &format!("{}s", plan.bound().as_secs() + 10),
        ],
    )?;
    let sv1 = parse_addr(&pool.line("sv1 listening on", Duration::from_secs(30))?)?;
    let http = parse_addr(&pool.line("http listening on", Duration::from_secs(30))?)?;
    wait_until(Duration::from_secs(30), "the pool to serve work", || {
        Ok(status(http)?["serving"].as_bool() == Some(true))
    })
    .map_err(|e| format!("{e}\npool log:\n{}", pool.log_tail()))?;
    // Let start-up settle before the baseline, as long as the miners sit idle before the second
    // reading (a precaution: jemalloc returns freed pages as they age, over about ten seconds;
    // its RSS growth per connection stayed within noise either way, which is why the live heap's
    // growth is read too).
    std::thread::sleep(plan.idle);
    let before = Memory::read(pool.pid())?;
    let heap_before = live_heap(http)?;

    let fleet_events = dir.path().join("fleet.ev");
    let fleet = Role::start(
        "fleet",
        dir.path(),
        &[
            "--pool",
            &sv1.to_string(),
            "--devices",
            &plan.connections.to_string(),
            "--hash-budget",
            "0",
            "--source-addrs",
            "8",
            "--connect-rate",
            "5000/s",
            "--drain",
            "0",
            "--events",
            path_str(&fleet_events)?,
            "--duration",
            &bound,
        ],
    )?;
    let connect_started = Instant::now();
    wait_until(plan.connect_deadline(), "every miner to connect", || {
        Ok(status(http)?["connections"].as_u64() == Some(plan.connections.into()))
    })
    .map_err(|e| {
        format!(
            "{e}\npool log:\n{}\nfleet log:\n{}",
            pool.log_tail(),
            fleet.log_tail()
        )
    })?;
    let connect_time = connect_started.elapsed();
    std::thread::sleep(plan.idle);
    let idle = Memory::read(pool.pid())?;
    let heap_idle = live_heap(http)?;
    // The pool reuses its heap figures for a while: a shorter wait (`--test`) could read the
    // baseline's figures twice.
    let heap = heap_before
        .zip(heap_idle)
        .filter(|_| plan.idle >= pool::memory::HEAP_FIGURES_KEPT);
    let fds = std::fs::read_dir(format!("/proc/{}/fd", pool.pid()))
        .map(|d| d.count())
        .unwrap_or(0);

    let profiler = match &plan.perf_record {
        Some(out) => Some(Profiler::start(pool.pid(), out)?),
        None => None,
    };
    let measure_from = events::now_ns();
    for _ in 0..plan.templates {
        rpc_call(rpc, "generatetoaddress", &format!("[1, \"{PAYOUT}\"]"))?;
        std::thread::sleep(plan.gap);
    }
    if let Some(p) = profiler {
        p.stop()?;
    }
    let connections_at_end = status(http)?["connections"].as_u64().unwrap_or(0);

    fleet.stop(Duration::from_secs(30))?;
    pool.stop(Duration::from_secs(30))?;
    simnet.stop(Duration::from_secs(10))?;

    let templates = analyse(&pool_events, &fleet_events, measure_from)?;
    Ok(Outcome {
        plan,
        floor,
        connect_time,
        before,
        idle,
        heap,
        fds,
        connections_at_end,
        templates,
    })
}

// ---------------------------------------------------------------------------------------------
// The events: per template, when the pool made it, when the last notify was written, when the
// last device read it.

#[derive(Clone, Debug, Default)]
struct TemplateTiming {
    template_id: u64,
    tx_count: u32,
    created_ns: u64,
    /// `JobSent` events of this template: one per connection it was written to.
    sent: u64,
    first_sent_ns: u64,
    last_sent_ns: u64,
    received: u64,
    last_received_ns: u64,
}

impl TemplateTiming {
    fn written_ms(&self) -> f64 {
        ms(self.last_sent_ns.saturating_sub(self.created_ns))
    }

    fn first_written_ms(&self) -> f64 {
        ms(self.first_sent_ns.saturating_sub(self.created_ns))
    }

    fn received_ms(&self) -> f64 {
        ms(self.last_received_ns.saturating_sub(self.created_ns))
    }
}

fn analyse(pool: &Path, fleet: &Path, from_ns: u64) -> Result<Vec<TemplateTiming>, String> {
    let mut templates: Vec<TemplateTiming> = Vec::new();
    let mut index: HashMap<u64, usize> = HashMap::new();
    // The pool names each job; the devices report the name they read.
    let mut job_template: HashMap<JobId, usize> = HashMap::new();
    let mut reader =
        EventReader::open(pool).map_err(|e| format!("pool events {}: {e}", pool.display()))?;
    for ev in &mut reader {
        let ev = ev.map_err(|e| format!("pool events: {e}"))?;
        match ev.kind {
            EventKind::TemplateCreated(t) if ev.ts_ns >= from_ns => {
                index.insert(t.template_id, templates.len());
                templates.push(TemplateTiming {
                    template_id: t.template_id,
                    tx_count: t.tx_count,
                    created_ns: ev.ts_ns,
                    first_sent_ns: u64::MAX,
                    ..TemplateTiming::default()
                });
            }
            EventKind::JobSent(j) => {
                let Some(&i) = j.template_id.and_then(|t| index.get(&t)) else {
                    continue;
                };
                let t = &mut templates[i];
                t.sent += 1;
                t.first_sent_ns = t.first_sent_ns.min(ev.ts_ns);
                t.last_sent_ns = t.last_sent_ns.max(ev.ts_ns);
                job_template.insert(j.job_id, i);
            }
            _ => {}
        }
    }
    let mut reader =
        EventReader::open(fleet).map_err(|e| format!("fleet events {}: {e}", fleet.display()))?;
    for ev in &mut reader {
        let ev = ev.map_err(|e| format!("fleet events: {e}"))?;
        if let EventKind::JobReceived(j) = ev.kind {
            if let Some(&i) = job_template.get(&j.job_id) {
                let t = &mut templates[i];
                t.received += 1;
                t.last_received_ns = t.last_received_ns.max(ev.ts_ns);
            }
        }
    }
    Ok(templates)
}

// ---------------------------------------------------------------------------------------------
// Results.

struct Outcome {
    plan: Plan,
    floor: Floor,
    connect_time: Duration,
    before: Memory,
    idle: Memory,
    /// The pool's live heap (`/api/status` `memory.heap_in_use_bytes`) at the two readings:
    /// what the connections hold, whenever the allocator returns freed pages.
    heap: Option<(u64, u64)>,
    fds: usize,
    connections_at_end: u64,
    templates: Vec<TemplateTiming>,
}

impl Outcome {
    /// Templates the pool wrote to every connection.
    fn complete(&self) -> Vec<&TemplateTiming> {
        let n = u64::from(self.plan.connections);
        self.templates.iter().filter(|t| t.sent == n).collect()
    }

    fn check(&self) -> Result<(), String> {
        let n = u64::from(self.plan.connections);
        if self.connections_at_end != n {
            return Err(format!(
                "{} connections at the end, {n} expected",
                self.connections_at_end
            ));
        }
        if self.templates.len() < self.plan.templates as usize {
            return Err(format!(
                "{} templates reached the pool, {} blocks were mined",
                self.templates.len(),
                self.plan.templates
            ));
        }
        for t in &self.templates {
            if t.received != t.sent || t.sent > n {
                return Err(format!(
                    "template {}: written to {} connections, received by {} devices ({n} connected)",
                    t.template_id, t.sent, t.received
                ));
            }
        }
        // A template the next one superseded before it reached everyone was rightly not sent
        // to the rest; the last one has no successor and must reach all.
        let last = self.templates.last().expect("at least one template");
        if last.sent != n {
            return Err(format!(
                "the last template reached {} of {n} connections",
                last.sent
            ));
        }
        let complete = self.complete().len();
        if complete * 2 < self.templates.len() {
            return Err(format!(
                "only {complete} of {} templates reached every connection before the next one: \
                 the fan-out takes longer than the gap on this host",
                self.templates.len()
            ));
        }
        Ok(())
    }

    fn rss_per_connection(&self) -> f64 {
        (self.idle.rss_bytes as f64 - self.before.rss_bytes as f64)
            / f64::from(self.plan.connections)
    }

    fn socket_mem_per_connection(&self) -> f64 {
        (self.idle.tcp_mem_bytes as f64 - self.before.tcp_mem_bytes as f64)
            / f64::from(self.plan.connections)
    }

    fn print(&self) {
        let n = self.plan.connections;
        let done = self.complete();
        let written: Vec<f64> = done.iter().map(|t| t.written_ms()).collect();
        let first: Vec<f64> = done.iter().map(|t| t.first_written_ms()).collect();
        let received: Vec<f64> = done.iter().map(|t| t.received_ms()).collect();
        let mut txs: Vec<f64> = done.iter().map(|t| f64::from(t.tx_count)).collect();
        println!();
        println!(
            "notify_fanout/{n}: {} of {} templates written to all {n} connections, the others superseded on the way (connected in {:.1} s)",
            done.len(),
            self.templates.len(),
            self.connect_time.as_secs_f64()
        );
        println!(
            "  template transactions (median)      {:.0}",
            pct(&mut txs, 50.0)
        );
        println!(
            "  floor: one {FLOOR_LINE} B loopback write per socket, one thread, {} sockets: {:.0} ns each = {:.2} ms for {n} ({:.2} ms on two cores)",
            self.floor.sockets,
            self.floor.ns_per_write,
            self.floor.ms_for(n),
            self.floor.ms_for(n) / 2.0
        );
        print_distribution("publish -> first notify written", first);
        print_distribution("publish -> last notify written", written);
        print_distribution("publish -> last notify received", received);
        println!(
            "  pool RSS              {:>9} KiB -> {:>9} KiB after {} idle: {:.0} B per connection",
            self.before.rss_bytes / 1024,
            self.idle.rss_bytes / 1024,
            humantime::format_duration(self.plan.idle),
            self.rss_per_connection()
        );
        println!(
            "  pool RssAnon          {:>9} KiB -> {:>9} KiB: {:.0} B per connection",
            self.before.rss_anon_bytes / 1024,
            self.idle.rss_anon_bytes / 1024,
            (self.idle.rss_anon_bytes as f64 - self.before.rss_anon_bytes as f64) / f64::from(n)
        );
        if let Some((before, idle)) = self.heap {
            println!(
                "  pool live heap        {:>9} KiB -> {:>9} KiB: {:.0} B per connection",
                before / 1024,
                idle / 1024,
                (idle as f64 - before as f64) / f64::from(n)
            );
        }
        println!(
            "  kernel TCP memory     {:>9} KiB -> {:>9} KiB (host-wide, both ends): {:.0} B per connection",
            self.before.tcp_mem_bytes / 1024,
            self.idle.tcp_mem_bytes / 1024,
            self.socket_mem_per_connection()
        );
        println!(
            "  TCP sockets in use    {:>9}     -> {:>9} (host-wide); pool fds {}",
            self.before.tcp_inuse, self.idle.tcp_inuse, self.fds
        );
    }
}

fn print_distribution(what: &str, mut v: Vec<f64>) {
    if v.is_empty() {
        println!("  {what:<36} no samples");
        return;
    }
    println!(
        "  {what:<36} p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  (n {})",
        pct(&mut v, 50.0),
        pct(&mut v, 99.0),
        pct(&mut v, 100.0),
        v.len()
    );
}

/// The scale ratio between the runs: fan-out time and memory per connection as the count grows.
fn summary(results: &[Outcome]) {
    println!();
    println!("notify_fanout summary (goals: last notify written < 4 ms at 10k; < 2 KiB per idle connection)");
    for r in results {
        let mut w: Vec<f64> = r.complete().iter().map(|t| t.written_ms()).collect();
        let p50 = if w.is_empty() {
            f64::NAN
        } else {
            pct(&mut w, 50.0)
        };
        println!(
            "  {:>6} connections: written p50 {:>7.2} ms = {:>6.0} ns per connection = {:.2}x the one-thread write floor; RSS {:>6.0} B per connection",
            r.plan.connections,
            p50,
            p50 * 1e6 / f64::from(r.plan.connections),
            p50 / r.floor.ms_for(r.plan.connections),
            r.rss_per_connection()
        );
    }
}

/// Nearest-rank percentile.
fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

// ---------------------------------------------------------------------------------------------
// The floor: what the kernel alone charges for one small write per connection on this host.

/// Bytes per write of the floor (the cost of a loopback write barely depends on its size below
/// a few kilobytes).
const FLOOR_LINE: usize = 512;
/// The floor holds both ends of each connection: at most this many, within 20,000 descriptors.
const FLOOR_MAX_SOCKETS: u32 = 9_000;
const FLOOR_PASSES: usize = 7;

#[derive(Clone, Copy, Debug)]
struct Floor {
    sockets: u32,
    /// Median over the passes.
    ns_per_write: f64,
}

impl Floor {
    fn ms_for(&self, connections: u32) -> f64 {
        self.ns_per_write * f64::from(connections) / 1e6
    }
}

/// `sockets` loopback connections; each pass writes `FLOOR_LINE` bytes to every one from this
/// thread (TCP_NODELAY, as the pool's), with nobody reading until the pass is over.
fn write_floor(sockets: u32) -> Result<Floor, String> {
    let err = |e: std::io::Error| format!("floor: {e}");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?;
    let addr = listener.local_addr().map_err(err)?;
    let mut pairs = Vec::with_capacity(sockets as usize);
    for _ in 0..sockets {
        let reader = TcpStream::connect(addr).map_err(err)?;
        let (writer, _) = listener.accept().map_err(err)?;
        writer.set_nodelay(true).map_err(err)?;
        reader.set_nonblocking(true).map_err(err)?;
        pairs.push((writer, reader));
    }
    let line = [b'x'; FLOOR_LINE];
    let mut sink = [0u8; 4 * FLOOR_LINE];
    let mut passes = Vec::with_capacity(FLOOR_PASSES);
    for _ in 0..FLOOR_PASSES {
        let t = Instant::now();
        for (w, _) in pairs.iter_mut() {
            w.write_all(&line).map_err(err)?;
        }
        passes.push(t.elapsed().as_nanos() as f64 / f64::from(sockets));
        for (_, r) in pairs.iter_mut() {
            while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
        }
    }
    Ok(Floor {
        sockets,
        ns_per_write: pct(&mut passes, 50.0),
    })
}

// ---------------------------------------------------------------------------------------------
// Memory, from /proc.

#[derive(Clone, Copy, Debug)]
struct Memory {
    rss_bytes: u64,
    rss_anon_bytes: u64,
    /// `/proc/net/sockstat` TCP `mem`: pages charged to TCP buffers, host-wide.
    tcp_mem_bytes: u64,
    tcp_inuse: u64,
}

impl Memory {
    fn read(pid: u32) -> Result<Memory, String> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map(|k| k * 1024)
                .ok_or(format!("/proc/{pid}/status has no {key}"))
        };
        let sockstat = std::fs::read_to_string("/proc/net/sockstat")
            .map_err(|e| format!("/proc/net/sockstat: {e}"))?;
        let tcp = sockstat
            .lines()
            .find_map(|l| l.strip_prefix("TCP:"))
            .ok_or("/proc/net/sockstat has no TCP line")?;
        let field = |name: &str| {
            let mut it = tcp.split_whitespace();
            while let Some(k) = it.next() {
                if k == name {
                    return it.next().and_then(|v| v.parse::<u64>().ok());
                }
            }
            None
        };
        // SAFETY: sysconf only reads a system constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
        Ok(Memory {
            rss_bytes: kib("VmRSS:")?,
            rss_anon_bytes: kib("RssAnon:")?,
            tcp_mem_bytes: field("mem").ok_or("sockstat: no TCP mem")? * page,
            tcp_inuse: field("inuse").ok_or("sockstat: no TCP inuse")?,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The pool's status and simnet's RPC, over plain HTTP/1.1 on loopback.

fn status(http: SocketAddr) -> Result<serde_json::Value, String> {
    let body = http_request(http, "GET", "/api/status", None, None)?;
    serde_json::from_slice(&body).map_err(|e| format!("/api/status: {e}"))
}

/// The pool's live heap; `None` from a build whose status has no `memory` figures.
fn live_heap(http: SocketAddr) -> Result<Option<u64>, String> {
    Ok(status(http)?["memory"]["heap_in_use_bytes"].as_u64())
}

fn rpc_call(rpc: SocketAddr, method: &str, params: &str) -> Result<serde_json::Value, String> {
    let body = format!(r#"{{"jsonrpc":"1.0","id":1,"method":"{method}","params":{params}}}"#);
    let auth =
        base64::engine::general_purpose::STANDARD.encode(format!("{RPC_USER}:{RPC_PASSWORD}"));
    let reply = http_request(rpc, "POST", "/", Some(&auth), Some(&body))?;
    let v: serde_json::Value =
        serde_json::from_slice(&reply).map_err(|e| format!("{method}: {e}"))?;
    if !v["error"].is_null() {
        return Err(format!("{method}: {}", v["error"]));
    }
    Ok(v["result"].clone())
}

fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    basic_auth: Option<&str>,
    body: Option<&str>,
) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(a) = basic_auth {
        req.push_str(&format!("Authorization: Basic {a}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body.unwrap_or(""));
    s.write_all(req.as_bytes())
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("{addr}: {e}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or(format!("{addr} {path}: no HTTP header"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let body = &raw[split + 4..];
    if !head.starts_with("http/1.1 200") {
        return Err(format!(
            "{addr} {path}: {}",
            head.lines().next().unwrap_or("")
        ));
    }
    if head.contains("transfer-encoding: chunked") {
        return dechunk(body).ok_or(format!("{addr} {path}: bad chunked body"));
    }
    Ok(body.to_vec())
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

fn wait_until(
    limit: Duration,
    what: &str,
    mut done: impl FnMut() -> Result<bool, String>,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let mut last_err = String::new();
    while Instant::now() < deadline {
        match done() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = e,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "gave up waiting {} for {what} {last_err}",
        humantime::format_duration(limit)
    ))
}

fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    let first = text.split_whitespace().next().unwrap_or("");
    first.parse().map_err(|e| format!("address {text:?}: {e}"))
}

fn path_str(p: &Path) -> Result<&str, String> {
    p.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", p.display()))
}

// ---------------------------------------------------------------------------------------------
// Roles as child processes.

/// `perf record` attached to the pool (call graphs from DWARF: release builds keep no frame
/// pointers).
struct Profiler(Child);

impl Profiler {
    fn start(pid: u32, out: &Path) -> Result<Profiler, String> {
        let child = Command::new("perf")
            .args(["record", "-F", "1999", "--call-graph", "dwarf,16384", "-o"])
            .arg(out)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("perf record: {e}"))?;
        // perf needs a moment to attach.
        std::thread::sleep(Duration::from_millis(500));
        Ok(Profiler(child))
    }

    fn stop(mut self) -> Result<(), String> {
        // SAFETY: signalling our own child; SIGINT makes perf write its file and exit.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        self.0.wait().map_err(|e| format!("perf record: {e}"))?;
        Ok(())
    }
}

/// A `stratumlab` subcommand run by the lab's process harness: stdout read line by line,
/// stderr kept in a file, killed if the bench ends before stopping it.
struct Role {
    name: &'static str,
    process: RoleProcess,
}

impl Role {
    fn start(name: &'static str, dir: &Path, args: &[&str]) -> Result<Role, String> {
        let log = dir.join(format!("{name}.log"));
        let args: Vec<OsString> = std::iter::once(name)
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let env = [("RUST_LOG".to_owned(), "warn".to_owned())];
        let program = Path::new(env!("CARGO_BIN_EXE_stratumlab"));
        let process = RoleProcess::spawn_as(
            name,
            program,
            &args,
            &log,
            Launch {
                env: &env,
                ..Launch::default()
            },
        )
        .map_err(|e| e.to_string())?;
        Ok(Role { name, process })
    }

    fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Waits for a stdout line starting with `prefix`; returns the rest.
    fn line(&self, prefix: &str, limit: Duration) -> Result<String, String> {
        self.process.line(prefix, limit).map_err(|e| e.to_string())
    }

    fn log_tail(&self) -> String {
        self.process.log_tail(20)
    }

    /// SIGTERM, then waits up to `limit` for a successful exit (SIGKILL after it).
    fn stop(mut self, limit: Duration) -> Result<(), String> {
        let status = self.process.stop(limit);
        if status.success() {
            return Ok(());
        }
        Err(format!(
            "{} exited with {status} (or did not stop within {limit:?})\n{}",
            self.name,
            self.log_tail()
        ))
    }
}
