//! `stratumlab bench sv2-pool`: our SV2 pool against the reference pool (pool_sv2, pinned) under
//! the same SV2 device fleet at the same fixed offered load (docs/performance.md, "SV2 pool").
//!
//! Each row: a fresh simnet (its Template Provider; a network difficulty so high, and no blocks
//! of the rest of the network, that no new tip disturbs the window; a fee-driven template every
//! 10 s, so job fan-outs are part of the load), the pool pinned to one core, one fleet process
//! (one runtime thread) with simnet on another. Every pool is told the same share rate per
//! channel and acknowledges each share on its own (pool_sv2 `share_batch_size = 1`; ours flushes
//! after every read, and a device has at most one share in a read). Over the window after
//! warm-up: the pool's CPU per accepted share, accepted shares, submit-to-success latency, the
//! generator's own CPU (at 90% of its core or more the row is generator-bound), the pool's CPU
//! and context switches by thread, and what else ran on its core.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use events::{EventKind, Perspective};
use serde::Serialize;

use super::sv2_pool_table as table;
use super::{
    each_event, fleet_done, io, json_report, measured, path, simnet_args, spawn_on,
    start_reference, stop_all, strings, window, BenchError, Kind, Output, Quantiles, Window,
    PAYOUT, READY,
};
use crate::orchestrate::AuthorityFile;
use crate::process::RoleProcess;
use crate::stats::Samples;
use crate::third_party::{self, free_loopback_port, PoolSv2Config, Tool, POOL_SV2_READY};

/// What one bench run measures.
#[derive(Clone, Debug)]
pub struct Options {
    /// Devices in the fleet.
    pub devices: u32,
    /// Total offered shares per second at the main load.
    pub shares_per_s: f64,
    /// The fleet's hashes per second: sets the share difficulty, not the share rate.
    pub hash_budget: f64,
    /// Before the window.
    pub warmup: Duration,
    /// The measured window.
    pub window: Duration,
    /// More offered loads (total shares per second), after the main one.
    pub sweep: Vec<f64>,
    /// The rows at each load, in order; empty: the defaults (see [`Options::plan`]).
    pub rows: Vec<RowKind>,
    /// Only ours and pool_sv2 as shipped at each load: no idle baselines and no like-for-like
    /// rows.
    pub quick: bool,
    /// The core the pool runs on.
    pub pool_core: usize,
    /// The core the fleet and simnet run on.
    pub load_core: usize,
    /// One more row of our pool with `perf record` over its window.
    pub perf: bool,
    /// `perf trace -s` on every pool over its window: system calls per share by thread.
    pub trace: bool,
    /// Another stratumlab binary whose pool the `base` rows run.
    pub baseline: Option<PathBuf>,
    /// This stratumlab (simnet, the fleet and our pool).
    pub stratumlab: PathBuf,
    /// Where the floor pools are (cargo's `examples` folder of the same profile).
    pub examples: PathBuf,
    /// Where every row's files and rows.jsonl go.
    pub out: PathBuf,
}

/// Which pool a row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// Ours as an operator runs it: SQLite store (batched), an event file.
    Ours,
    /// The reference pool as shipped (log level info: two lines per share).
    PoolSv2,
    /// Ours with `--durability off`: an acknowledgement waits for no write.
    OursDurOff,
    /// pool_sv2 with `RUST_LOG=warn`: like for like with ours on logging.
    PoolSv2Warn,
    /// The baseline binary's pool.
    Base,
    /// The baseline binary's pool with `--durability off`.
    BaseDurOff,
    /// The fleet's minimal SV2 pool: the least any pool pays per share here.
    Floor,
    /// The same floor on one thread driving epoll by hand, without tokio.
    FloorEpoll,
    /// Ours with `perf record` attached over the window.
    OursPerf,
}

/// Every row, in the order `--rows` lists them in an error.
const ALL: [RowKind; 9] = [
    RowKind::Ours,
    RowKind::PoolSv2,
    RowKind::OursDurOff,
    RowKind::PoolSv2Warn,
    RowKind::Base,
    RowKind::BaseDurOff,
    RowKind::Floor,
    RowKind::FloorEpoll,
    RowKind::OursPerf,
];

impl RowKind {
    /// The row's label, as `--rows` names it.
    pub fn label(self) -> &'static str {
        match self {
            RowKind::Ours => "ours",
            RowKind::PoolSv2 => "pool_sv2",
            RowKind::OursDurOff => "ours-dur-off",
            RowKind::PoolSv2Warn => "pool_sv2-warn",
            RowKind::Base => "base",
            RowKind::BaseDurOff => "base-dur-off",
            RowKind::Floor => "floor",
            RowKind::FloorEpoll => "floor-epoll",
            RowKind::OursPerf => "ours-perf",
        }
    }

    /// The program family, whose idle baseline nets its rows ("net" in the table).
    pub fn program(self) -> &'static str {
        match self {
            RowKind::Ours | RowKind::OursDurOff | RowKind::OursPerf => "ours",
            RowKind::PoolSv2 | RowKind::PoolSv2Warn => "pool_sv2",
            RowKind::Base | RowKind::BaseDurOff => "base",
            RowKind::Floor => "floor",
            RowKind::FloorEpoll => "floor-epoll",
        }
    }

    fn runs_pool_sv2(self) -> bool {
        self.program() == "pool_sv2"
    }
}

impl std::str::FromStr for RowKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        super::by_label(&ALL, RowKind::label, s)
    }
}

impl Options {
    /// Every (row, offered shares/s) in the order they run. Offered 0 is a program's idle
    /// baseline: the same connections, channels and targets, no hashing. Without `--rows`: the
    /// idle baselines of ours and pool_sv2 (not with `quick`), then ours and pool_sv2 at each
    /// load, and at the main load (not with `quick`) ours-dur-off, pool_sv2-warn and the floor;
    /// `perf` adds ours-perf at the main load.
    pub fn plan(&self) -> Vec<(RowKind, f64)> {
        let mut plan = Vec::new();
        if !self.quick {
            plan.push((RowKind::Ours, 0.0));
            plan.push((RowKind::PoolSv2, 0.0));
        }
        for (i, &offered) in std::iter::once(&self.shares_per_s)
            .chain(&self.sweep)
            .enumerate()
        {
            if self.rows.is_empty() {
                plan.push((RowKind::Ours, offered));
                plan.push((RowKind::PoolSv2, offered));
                if !self.quick && i == 0 {
                    plan.push((RowKind::OursDurOff, offered));
                    plan.push((RowKind::PoolSv2Warn, offered));
                    plan.push((RowKind::Floor, offered));
                }
            } else {
                plan.extend(self.rows.iter().map(|&k| (k, offered)));
            }
        }
        if self.perf {
            plan.push((RowKind::OursPerf, self.shares_per_s));
        }
        plan
    }
}

/// One row's figures (the keys of a rows.jsonl line).
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The row's label.
    pub label: String,
    /// Its program family ([`RowKind::program`]).
    pub kind: String,
    /// Total shares per second offered (0: idle baseline).
    pub offered_per_s: f64,
    /// The window's length, seconds.
    pub window_s: f64,
    /// Verdicts "accepted" the devices received inside the window.
    pub accepted: u64,
    /// Rejections the devices received inside the window.
    pub rejected: u64,
    /// `accepted / window_s`.
    pub accepted_per_s: f64,
    /// The pool's CPU seconds in the window, every thread.
    pub pool_cpu_s: f64,
    /// The pool's CPU per accepted share, µs; `null` with none accepted.
    pub pool_cpu_us_per_share: Option<f64>,
    /// The pool's CPU in percent of one core.
    pub pool_cpu_pct: f64,
    /// The generator's (fleet's) CPU in percent of one core.
    pub fleet_cpu_pct: f64,
    /// Submit-to-success latency of the shares sent in the window, median, ms.
    pub p50_ms: Option<f64>,
    /// The same, 99th percentile.
    pub p99_ms: Option<f64>,
    /// Shares behind the latency figures.
    pub latency_n: u64,
    /// Devices ready at the end (from the fleet's report).
    pub ready: u64,
    /// Devices in the fleet.
    pub devices: u64,
    /// Connections closed during the run.
    pub disconnects: u64,
    /// Frames from the pool the devices could not use.
    pub protocol_errors: u64,
    /// Rejections over the whole run, by reason (from the fleet's report).
    pub rejected_by_reason: serde_json::Value,
    /// The pool's CPU seconds in the window by thread name.
    pub pool_cpu_s_by_thread: BTreeMap<String, f64>,
    /// The same split `[user, system]`.
    pub pool_user_sys_s_by_thread: BTreeMap<String, [f64; 2]>,
    /// The pool's context switches by thread name, `[voluntary, involuntary]`.
    pub ctxt_switches_by_thread: BTreeMap<String, [u64; 2]>,
    /// With `--trace`: system calls by thread name and call.
    pub syscalls_by_thread: Option<BTreeMap<String, BTreeMap<String, u64>>>,
    /// Other processes' CPU on the pool's core, % of the window (the machine may be shared).
    pub pool_core_others_pct: f64,
    /// The 1-minute load average at the window's end.
    pub loadavg_1m: f64,
}

/// Runs every row of the plan, writing `rows.jsonl` and each row's files under `opts.out`, and
/// prints progress to stderr and the table and ratios to `out`.
pub fn run(opts: &Options, out: &mut dyn std::io::Write) -> Result<Vec<Row>, BenchError> {
    if opts.pool_core == opts.load_core {
        return Err(BenchError::Options(
            "the pool and its load need two different cores".into(),
        ));
    }
    let plan = opts.plan();
    if plan
        .iter()
        .any(|(k, _)| matches!(k, RowKind::Base | RowKind::BaseDurOff))
        && opts.baseline.is_none()
    {
        return Err(BenchError::Options(
            "the base rows run another build's pool: give --baseline".into(),
        ));
    }
    let pool_sv2 = if plan.iter().any(|(k, _)| k.runs_pool_sv2()) {
        Some(third_party::find(&third_party::POOL_SV2, "bench sv2-pool")?)
    } else {
        None
    };
    let mut output = Output::create(&opts.out)?;
    eprintln!(
        "bench sv2-pool: {} rows, warm-up {:?}, window {:?}; pool on core {}, fleet and simnet on core {}; files in {}",
        plan.len(),
        opts.warmup,
        opts.window,
        opts.pool_core,
        opts.load_core,
        opts.out.display()
    );
    let mut rows = Vec::new();
    for (i, &(kind, offered)) in plan.iter().enumerate() {
        let bench = RowRun {
            opts,
            kind,
            offered,
            authority: &output.authority,
            pool_sv2: pool_sv2.as_ref(),
            dir: opts.out.join(format!("{}-{offered}", kind.label())),
        };
        eprintln!(
            "[{}/{}] {} at {offered} shares/s",
            i + 1,
            plan.len(),
            kind.label()
        );
        let row = bench.run()?;
        output.write(&row)?;
        eprintln!(
            "    accepted {:.1}/s, {} CPU-us/share, pool CPU {:.1}%, p50 {} ms, generator CPU {:.1}%",
            row.accepted_per_s,
            table::opt(row.pool_cpu_us_per_share, 1),
            row.pool_cpu_pct,
            table::opt(row.p50_ms, 2),
            row.fleet_cpu_pct
        );
        rows.push(row);
    }
    table::print(&rows, opts.pool_core, out).map_err(io("printing the table"))?;
    Ok(rows)
}

/// One row being measured.
struct RowRun<'a> {
    opts: &'a Options,
    kind: RowKind,
    offered: f64,
    authority: &'a AuthorityFile,
    pool_sv2: Option<&'a Tool>,
    dir: PathBuf,
}

impl RowRun<'_> {
    fn name(&self) -> String {
        format!("{} at {} shares/s", self.kind.label(), self.offered)
    }

    fn fail(&self, why: impl Into<String>) -> BenchError {
        BenchError::Row {
            row: self.name(),
            why: why.into(),
        }
    }

    fn run(&self) -> Result<Row, BenchError> {
        let o = self.opts;
        std::fs::create_dir_all(&self.dir)
            .map_err(io(format!("creating {}", self.dir.display())))?;
        // The offered total spread over the devices; the difficulty from the devices' real rate.
        // The idle baseline keeps the main load's targets and only stops hashing.
        let offered = if self.offered == 0.0 {
            o.shares_per_s
        } else {
            self.offered
        };
        let spm = offered * 60.0 / f64::from(o.devices);
        let per_device = o.hash_budget / f64::from(o.devices);
        let difficulty = per_device * 60.0 / spm / 2f64.powi(32);
        let budget = if self.offered == 0.0 {
            0.0
        } else {
            o.hash_budget
        };

        let mut simnet = self.spawn_on(
            o.load_core,
            "simnet",
            &o.stratumlab,
            &[
                simnet_args(&path(&self.authority.path)),
                strings(["--events", &path(&self.dir.join("simnet.ev"))]),
            ]
            .concat(),
            &[],
        )?;
        let tdp = simnet.wait_listening("tdp", READY)?;
        let (mut pool, miners, trust) = self.start_pool(tdp, spm, difficulty)?;
        let total = o.warmup + o.window + Duration::from_secs(3);
        let fleet_args = [
            "fleet".to_owned(),
            "--protocol".into(),
            "sv2".into(),
            "--pool".into(),
            miners.to_string(),
            "--authority-key".into(),
            trust,
            "--devices".into(),
            o.devices.to_string(),
            "--hash-budget".into(),
            format!("{budget}"),
            "--nominal-hash-rate".into(),
            format!("{per_device}"),
            "--threads".into(),
            "1".into(),
            "--duration".into(),
            format!("{}ms", total.as_millis()),
            "--drain".into(),
            "3s".into(),
            "--json".into(),
            "--events".into(),
            path(&self.dir.join("fleet.ev")),
        ];
        let mut fleet = self.spawn_on(o.load_core, "fleet", &o.stratumlab, &fleet_args, &[])?;
        eprintln!(
            "    {} devices, {spm:.3} shares/min per channel, difficulty {difficulty:.3e}, against {miners}",
            o.devices
        );

        let watch = Watchers::start(self, pool.pid())?;
        std::thread::sleep(o.warmup);
        let a = window::read(&[pool.pid(), fleet.pid()], pool.pid());
        std::thread::sleep(o.window);
        let b = window::read(&[pool.pid(), fleet.pid()], pool.pid());
        let w = window::between(&a, &b);
        fleet_done(&mut fleet, total + Duration::from_secs(60)).map_err(|e| self.fail(e))?;
        let syscalls = watch.finish(self)?;
        stop_all(&mut [&mut pool, &mut simnet]).map_err(|e| self.fail(e))?;
        let report = json_report(&fleet, &self.dir, "fleet").map_err(|e| self.fail(e))?;
        let row = self.row(&w, &report, pool.pid(), fleet.pid(), syscalls)?;
        let ok = row.ready == row.devices
            && row.protocol_errors == 0
            && (row.accepted > 0 || row.offered_per_s == 0.0);
        let why = "not every device was ready, protocol errors, or nothing accepted";
        measured(row, ok, why).map_err(|e| self.fail(e))
    }

    /// The pool of this row, listening: the process, where miners connect, and the authority
    /// public key the devices must trust.
    fn start_pool(
        &self,
        tdp: SocketAddr,
        spm: f64,
        difficulty: f64,
    ) -> Result<(RoleProcess, SocketAddr, String), BenchError> {
        let o = self.opts;
        let core = o.pool_core;
        let ours = |program: &Path, extra: &[&str]| -> Result<_, BenchError> {
            let mut a = vec![
                "pool".to_owned(),
                "--sv2-listen".into(),
                "127.0.0.1:0".into(),
                "--tp".into(),
                tdp.to_string(),
                "--tp-authority-key".into(),
                self.authority.public.clone(),
                "--authority-key-file".into(),
                path(&self.authority.path),
                "--http-listen".into(),
                "127.0.0.1:0".into(),
                "--payout-address".into(),
                PAYOUT.into(),
                "--shares-per-minute".into(),
                format!("{spm}"),
                "--start-difficulty".into(),
                format!("{difficulty}"),
                "--store".into(),
                path(&self.dir.join("pool.sqlite")),
                "--events".into(),
                path(&self.dir.join("pool.ev")),
            ];
            a.extend(extra.iter().map(|s| s.to_string()));
            let mut p = self.spawn_on(core, "pool", program, &a, &[])?;
            let at = p.wait_listening("sv2", READY)?;
            Ok((p, at, self.authority.public.clone()))
        };
        let floor = |name: &'static str| -> Result<_, BenchError> {
            let program = o.examples.join(name);
            if !program.is_file() {
                return Err(BenchError::Missing {
                    program: name,
                    path: program,
                    hint: "build the floor pools: cargo build --release -p fleet --example sv2_floor_pool --example sv2_floor_epoll",
                });
            }
            let args = [format!("{difficulty}"), "10".into()];
            let mut p = self.spawn_on(core, "pool", &program, &args, &[])?;
            let at = p.wait_listening("sv2", READY)?;
            // The floor signs with the published reference pair; nothing else runs on it.
            Ok((p, at, sv2::keys::AuthorityKeys::reference().public_key()))
        };
        let baseline = || o.baseline.clone().expect("checked before the run");
        match self.kind {
            RowKind::Ours | RowKind::OursPerf => ours(&o.stratumlab, &[]),
            RowKind::OursDurOff => ours(&o.stratumlab, &["--durability", "off"]),
            RowKind::Base => ours(&baseline(), &[]),
            RowKind::BaseDurOff => ours(&baseline(), &["--durability", "off"]),
            RowKind::Floor => floor("sv2_floor_pool"),
            RowKind::FloorEpoll => floor("sv2_floor_epoll"),
            RowKind::PoolSv2 | RowKind::PoolSv2Warn => {
                let tool = self.pool_sv2.expect("located before the run");
                let listen = free_loopback_port().map_err(io("finding a port for pool_sv2"))?;
                let toml = PoolSv2Config {
                    listen,
                    authority_public_key: &self.authority.public,
                    authority_secret_key: self.authority.secret(),
                    template_provider: tdp,
                    payout_address: PAYOUT,
                    shares_per_minute: spm,
                    extensions: &[],
                    monitoring: None,
                }
                .toml();
                let warn = self.kind == RowKind::PoolSv2Warn;
                let p = start_reference(
                    &self.dir,
                    core,
                    "pool",
                    &tool.path,
                    &toml,
                    warn,
                    listen,
                    POOL_SV2_READY,
                )?;
                // Its listener may come up before its first template: give it the TP's first.
                std::thread::sleep(Duration::from_secs(2));
                Ok((p, listen, self.authority.public.clone()))
            }
        }
    }

    fn spawn_on(
        &self,
        core: usize,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<RoleProcess, BenchError> {
        spawn_on(&self.dir, core, Kind::Ours, name, program, args, env)
    }

    /// The row's figures from the window, the fleet's report and the devices' events.
    fn row(
        &self,
        w: &Window,
        report: &serde_json::Value,
        pool_pid: u32,
        fleet_pid: u32,
        syscalls: Option<BTreeMap<String, BTreeMap<String, u64>>>,
    ) -> Result<Row, BenchError> {
        let (t0, t1) = (w.t0_ns, w.t1_ns);
        let mut sent = BTreeMap::new();
        let mut results = Vec::new();
        each_event(&self.dir.join("fleet.ev"), |e| match e.kind {
            EventKind::ShareSent(s) => {
                sent.insert((s.device, s.seq), e.ts_ns);
            }
            EventKind::ShareResult(r) if r.perspective == Perspective::Received => {
                results.push((e.ts_ns, r));
            }
            _ => {}
        })
        .map_err(|e| self.fail(format!("the fleet's events do not read: {e}")))?;
        let (mut accepted, mut rejected) = (0, 0);
        let mut latency = Samples::new();
        for (ts, r) in results {
            let ok = r.verdict.is_accepted();
            if (t0..t1).contains(&ts) {
                if ok {
                    accepted += 1;
                } else {
                    rejected += 1;
                }
            }
            // Latency of the shares sent inside the window, wherever their answer falls.
            if let Some(&s) = sent.get(&(r.conn, r.seq)) {
                if ok && (t0..t1).contains(&s) {
                    latency.push(r.conn as u32, ts.saturating_sub(s));
                }
            }
        }
        let latency = Quantiles::of(&latency);
        let secs = w.secs();
        let pool_cpu_s = w.cpu_s.get(&pool_pid).copied().unwrap_or(0.0);
        let fleet_cpu_s = w.cpu_s.get(&fleet_pid).copied().unwrap_or(0.0);
        let u64_of = |k: &str| report[k].as_u64().unwrap_or(0);
        let core_busy = w
            .core_busy_s
            .get(&self.opts.pool_core.to_string())
            .copied()
            .unwrap_or(0.0);
        Ok(Row {
            label: self.kind.label().into(),
            kind: self.kind.program().into(),
            offered_per_s: self.offered,
            window_s: secs,
            accepted,
            rejected,
            accepted_per_s: accepted as f64 / secs,
            pool_cpu_s,
            pool_cpu_us_per_share: (accepted > 0).then(|| pool_cpu_s * 1e6 / accepted as f64),
            pool_cpu_pct: 100.0 * pool_cpu_s / secs,
            fleet_cpu_pct: 100.0 * fleet_cpu_s / secs,
            p50_ms: latency.p50_ms,
            p99_ms: latency.p99_ms,
            latency_n: latency.n,
            ready: u64_of("ready"),
            devices: u64_of("devices"),
            disconnects: u64_of("disconnects"),
            protocol_errors: u64_of("protocol_errors"),
            rejected_by_reason: report["shares"]["rejected_by_reason"].clone(),
            pool_cpu_s_by_thread: w
                .user_sys_s_by_thread
                .iter()
                .map(|(k, [u, s])| (k.clone(), u + s))
                .collect(),
            pool_user_sys_s_by_thread: w.user_sys_s_by_thread.clone(),
            ctxt_switches_by_thread: w.ctxt_switches_by_thread.clone(),
            syscalls_by_thread: syscalls,
            pool_core_others_pct: 100.0 * (core_busy - pool_cpu_s) / secs,
            loadavg_1m: w.loadavg_1m,
        })
    }
}

/// `perf record` and `perf trace` attached to the pool over the window, when asked for. Killed
/// (with the `sleep` they wait in) if the row ends before they do, so that none outlives it.
struct Watchers {
    perf: Option<std::process::Child>,
    trace: Option<std::process::Child>,
}

impl Watchers {
    fn start(row: &RowRun<'_>, pool: u32) -> Result<Watchers, BenchError> {
        let o = row.opts;
        // Each waits out the warm-up itself, then records for the window; its own process
        // group, so that killing the group stops both the shell and perf.
        let attach = |args: &str, out: &str| -> Result<std::process::Child, BenchError> {
            use std::os::unix::process::CommandExt;
            let script =
                format!("sleep \"$1\"; exec perf {args} -p \"$2\" -o \"$3\" -- sleep \"$4\"");
            std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .arg("sh")
                .arg(o.warmup.as_secs_f64().to_string())
                .arg(pool.to_string())
                .arg(row.dir.join(out))
                .arg(o.window.as_secs_f64().to_string())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .process_group(0)
                .spawn()
                .map_err(io("starting perf"))
        };
        Ok(Watchers {
            perf: (row.kind == RowKind::OursPerf)
                .then(|| attach("record -F 499 -g", "perf.data"))
                .transpose()?,
            trace: o
                .trace
                .then(|| attach("trace -s", "trace.txt"))
                .transpose()?,
        })
    }

    /// Waits for both; prints perf's profile (by thread and library, then by symbol, as
    /// perf.txt too); returns the system calls `perf trace` counted.
    #[allow(clippy::type_complexity)]
    fn finish(
        mut self,
        row: &RowRun<'_>,
    ) -> Result<Option<BTreeMap<String, BTreeMap<String, u64>>>, BenchError> {
        if let Some(mut p) = self.perf.take() {
            let _ = p.wait();
            let data = row.dir.join("perf.data");
            let mut text = String::new();
            for (sort, limit) in [("comm,dso", "0"), ("comm,dso,symbol", "1")] {
                let report = std::process::Command::new("perf")
                    .arg("report")
                    .arg("-i")
                    .arg(&data)
                    .args(["--no-children", "--stdio", "-g", "none"])
                    .args(["--percent-limit", limit, "--sort", sort])
                    .output()
                    .map_err(io("running perf report"))?;
                let out = String::from_utf8_lossy(&report.stdout);
                for l in out
                    .lines()
                    .filter(|l| !l.starts_with('#') && l.contains('%'))
                {
                    text.push_str(l.trim_end());
                    text.push('\n');
                }
            }
            let _ = std::fs::write(row.dir.join("perf.txt"), &text);
            eprintln!(
                "    perf, self time by thread and library, then by symbol (data in {}):",
                data.display()
            );
            for l in text.lines() {
                eprintln!("        {l}");
            }
        }
        let Some(mut t) = self.trace.take() else {
            return Ok(None);
        };
        let _ = t.wait();
        let text = std::fs::read_to_string(row.dir.join("trace.txt")).unwrap_or_default();
        Ok(Some(parse_trace_summary(&text)))
    }
}

impl Drop for Watchers {
    fn drop(&mut self) {
        for c in [self.perf.take(), self.trace.take()].into_iter().flatten() {
            let mut c = c;
            // SAFETY: kill(2) on the process group this child leads (its pid, negated).
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

/// `perf trace -s`: per thread `name (tid), N events, P%`, then rows `syscall calls errors …`.
/// Threads add up by name with digits dropped.
fn parse_trace_summary(text: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut thread: Option<String> = None;
    for line in text.lines() {
        if let Some((name, rest)) = line.strip_prefix(' ').and_then(|l| l.rsplit_once(" (")) {
            if rest.contains("events") && !name.starts_with(' ') {
                let name = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-');
                out.entry(name.to_owned()).or_default();
                thread = Some(name.to_owned());
                continue;
            }
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if let (Some(t), [call, calls, errors, _, ..]) = (&thread, f.as_slice()) {
            let named = call
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if let (true, Ok(n), Ok(_)) = (named, calls.parse::<u64>(), errors.parse::<u64>()) {
                *out.get_mut(t)
                    .expect("entered above")
                    .entry(call.to_string())
                    .or_default() += n;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            devices: 10,
            shares_per_s: 300.0,
            hash_budget: 2e6,
            warmup: Duration::from_secs(1),
            window: Duration::from_secs(1),
            sweep: vec![1500.0],
            rows: vec![],
            quick: false,
            pool_core: 0,
            load_core: 1,
            perf: true,
            trace: false,
            baseline: None,
            stratumlab: PathBuf::new(),
            examples: PathBuf::new(),
            out: PathBuf::new(),
        }
    }

    #[test]
    fn the_full_plan_has_idle_baselines_like_for_like_rows_and_the_sweep() {
        let labels: Vec<String> = opts()
            .plan()
            .iter()
            .map(|(k, o)| format!("{}@{o}", k.label()))
            .collect();
        assert_eq!(
            labels,
            [
                "ours@0",
                "pool_sv2@0",
                "ours@300",
                "pool_sv2@300",
                "ours-dur-off@300",
                "pool_sv2-warn@300",
                "floor@300",
                "ours@1500",
                "pool_sv2@1500",
                "ours-perf@300"
            ]
        );
        let quick = Options {
            quick: true,
            perf: false,
            sweep: vec![],
            ..opts()
        };
        assert_eq!(
            quick.plan(),
            [(RowKind::Ours, 300.0), (RowKind::PoolSv2, 300.0)]
        );
        let chosen = Options {
            rows: vec![RowKind::Floor, RowKind::Base],
            quick: true,
            perf: false,
            ..opts()
        };
        assert_eq!(
            chosen.plan(),
            [
                (RowKind::Floor, 300.0),
                (RowKind::Base, 300.0),
                (RowKind::Floor, 1500.0),
                (RowKind::Base, 1500.0)
            ]
        );
    }

    #[test]
    fn rows_are_named_as_the_table_prints_them() {
        for s in ["ours", "pool_sv2-warn", "floor-epoll", "base-dur-off"] {
            assert_eq!(s.parse::<RowKind>().unwrap().label(), s);
        }
        let e = "pool".parse::<RowKind>().unwrap_err();
        assert!(
            e.contains("unknown row `pool`") && e.contains("floor-epoll"),
            "{e}"
        );
    }

    #[test]
    fn the_trace_summary_adds_threads_up_by_name() {
        let text = "\n Summary of events:\n\n tokio-runtime-w (4101), 300 events, 40.0%\n\n   syscall            calls  errors  total       min       avg       max       stddev\n                                         (msec)    (msec)    (msec)    (msec)        (%)\n   --------------- --------  ------ -------- --------- --------- ---------     ------\n   epoll_wait            50      0   100.0     0.001     2.000    10.000      5.00%\n   recvfrom              40      2     0.1     0.001     0.002     0.010      1.00%\n\n tokio-runtime-w (4102), 100 events, 10.0%\n\n   syscall            calls  errors  total       min       avg       max       stddev\n   --------------- --------  ------ -------- --------- --------- ---------     ------\n   recvfrom              10      0     0.1     0.001     0.002     0.010      1.00%\n\n sqlite-writer (4200), 10 events, 1.0%\n\n   fdatasync              5      0     9.0     1.000     1.800     3.000     10.00%\n";
        let t = parse_trace_summary(text);
        assert_eq!(t.len(), 2, "{t:?}");
        assert_eq!(t["tokio-runtime-w"]["recvfrom"], 50);
        assert_eq!(t["tokio-runtime-w"]["epoll_wait"], 50);
        assert_eq!(t["sqlite-writer"]["fdatasync"], 5);
    }
}
