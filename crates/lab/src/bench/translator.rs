//! `stratumlab bench translator`: our translator against the SV2 reference translator
//! (translator_sv2, pinned; aggregated, or a channel per device), each with the same SV1 device
//! fleet at the same offered share load, on the same upstream: our SV2 pool on simnet's Template
//! Provider, fresh for every row (docs/performance.md, "translator").
//!
//! The translator runs alone on one core; simnet, the pool and the fleet (one runtime thread)
//! on the other. Over the window after warm-up, per row:
//! - share latency as the devices see it (share_sent to share_result), for all shares and apart
//!   for those answered locally and those the pool judged (forwarded: the pool's events hold the
//!   same nonce), so a translator that waits for the pool shows in the forwarded columns;
//! - the same latency on the wire at the translator's SV1 port ([`super::wire`], needs
//!   CAP_NET_RAW): the translator's own part, without the devices' scheduling;
//! - a floor row: the fleet's minimal SV1 pool where the translator runs, whose latency on the
//!   wire is what this machine costs anything that answers shares;
//! - job fan-out: for each template the pool made in the window, from its first job to the last
//!   device's first job of that template, when every device got it; the slowest is reported;
//! - CPU per answered share, memory per device (RSS with the devices less RSS before them), the
//!   generator's CPU and what else ran on the translator's core.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use events::{EventKind, Perspective};
use serde::Serialize;

use super::translator_table as table;
use super::wire::{Capture, Tap};
use super::{
    each_event, fleet_done, io, json_report, measured, path, pin, simnet_args, spawn_on,
    start_reference, stop_all, strings, window, BenchError, Kind, Output, Quantiles, PAYOUT, READY,
};
use crate::orchestrate::AuthorityFile;
use crate::process::RoleProcess;
use crate::stats::Samples;
use crate::third_party::{
    self, free_loopback_port, Tool, TranslatorSv2Config, TRANSLATOR_SV2_READY,
};

/// What one bench run measures.
#[derive(Clone, Debug)]
pub struct Options {
    /// SV1 devices.
    pub devices: u32,
    /// Total offered shares per second.
    pub shares_per_s: f64,
    /// The fleet's hashes per second: sets the share difficulty, not the share rate.
    pub hash_budget: f64,
    /// Shares per minute the pool asks of the translator (of its one channel, or shared among
    /// the per-device channels).
    pub upstream_spm: f64,
    /// A channel per device upstream, in both translators, instead of one for all.
    pub per_device: bool,
    /// Before the window.
    pub warmup: Duration,
    /// The measured window.
    pub window: Duration,
    /// The rows, in order, of each repetition.
    pub rows: Vec<RowKind>,
    /// Repetitions of every row, alternating which translator goes first; ratios are taken
    /// within each, then their median.
    pub repeat: u32,
    /// Capture latency on the wire (needs CAP_NET_RAW; the floor row needs it).
    pub wire: bool,
    /// The translator's core.
    pub translator_core: usize,
    /// The core of everything else.
    pub load_core: usize,
    /// This stratumlab (simnet, the pool, the fleet and our translator).
    pub stratumlab: PathBuf,
    /// Where the floor pool is (cargo's `examples` folder of the same profile).
    pub examples: PathBuf,
    /// Where every row's files and rows.jsonl go.
    pub out: PathBuf,
}

/// What a row runs where the translator would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// The fleet's minimal SV1 pool: no translator, the latency floor on the wire.
    Floor,
    /// Our translator.
    Ours,
    /// translator_sv2 at its shipped log level (info).
    TranslatorSv2,
    /// translator_sv2 with `RUST_LOG=warn`.
    TranslatorSv2Warn,
}

/// Every row, in the order `--rows` lists them in an error.
const ALL: [RowKind; 4] = [
    RowKind::Floor,
    RowKind::Ours,
    RowKind::TranslatorSv2,
    RowKind::TranslatorSv2Warn,
];

impl RowKind {
    /// The row's label, as `--rows` names it.
    pub fn label(self) -> &'static str {
        match self {
            RowKind::Floor => "floor",
            RowKind::Ours => "ours",
            RowKind::TranslatorSv2 => "translator_sv2",
            RowKind::TranslatorSv2Warn => "translator_sv2-warn",
        }
    }
}

impl std::str::FromStr for RowKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        super::by_label(&ALL, RowKind::label, s)
    }
}

impl Options {
    /// Every row in the order it runs, labelled `NAME` in the first repetition and `NAME#N`
    /// after. The floor needs the wire capture and runs first; ours and translator_sv2 swap
    /// places every other repetition, so a drifting machine favours neither.
    pub fn plan(&self) -> Vec<(RowKind, String)> {
        let mut plan = Vec::new();
        for rep in 1..=self.repeat.max(1) {
            let suffix = if rep == 1 {
                String::new()
            } else {
                format!("#{rep}")
            };
            let mut order: Vec<RowKind> = self
                .rows
                .iter()
                .copied()
                .filter(|&k| k != RowKind::Floor || self.wire)
                .collect();
            order.sort_by_key(|&k| match k {
                RowKind::Floor => 0,
                RowKind::Ours | RowKind::TranslatorSv2 => 1,
                RowKind::TranslatorSv2Warn => 2,
            });
            if rep % 2 == 0 {
                let pos = |k| order.iter().position(|&x| x == k);
                if let (Some(a), Some(b)) = (pos(RowKind::Ours), pos(RowKind::TranslatorSv2)) {
                    order.swap(a, b);
                }
            }
            plan.extend(
                order
                    .into_iter()
                    .map(|k| (k, format!("{}{suffix}", k.label()))),
            );
        }
        plan
    }

    fn per_device_rate(&self) -> f64 {
        self.hash_budget / f64::from(self.devices)
    }

    fn spm(&self) -> f64 {
        self.shares_per_s * 60.0 / f64::from(self.devices)
    }

    /// The difficulty at which a device's hash rate gives `spm` shares a minute.
    fn difficulty(&self) -> f64 {
        self.per_device_rate() * 60.0 / self.spm() / 2f64.powi(32)
    }
}

/// One row's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Row {
    /// The row's label (`ours`, `ours#2`, ...).
    pub label: String,
    /// What ran where the translator runs.
    pub kind: String,
    /// Devices in the fleet.
    pub devices: u64,
    /// Total shares per second offered.
    pub offered_per_s: f64,
    /// The window's length, seconds.
    pub window_s: f64,
    /// Verdicts the devices received in the window.
    pub answered: u64,
    /// Of which accepted.
    pub accepted: u64,
    /// Of which rejected.
    pub rejected: u64,
    /// `accepted / window_s`.
    pub accepted_per_s: f64,
    /// Shares the pool judged in the window, per second.
    pub upstream_per_s: f64,
    /// Of those, accepted.
    pub upstream_accepted: u64,
    /// Shares the pool judged in the window.
    pub upstream_judged: u64,
    /// The translator's CPU in percent of one core.
    pub translator_cpu_pct: f64,
    /// Its CPU per answered share, µs.
    pub cpu_us_per_share: Option<f64>,
    /// The generator's (fleet's) CPU in percent of one core.
    pub fleet_cpu_pct: f64,
    /// The translator's RSS with its upstream open and no device, KiB.
    pub rss0_kib: f64,
    /// Its RSS at the window's end, KiB.
    pub rss_kib: f64,
    /// `(rss_kib - rss0_kib) / devices`.
    pub rss_per_device_kib: f64,
    /// Devices ready at the end.
    pub ready: u64,
    /// Connections closed during the run.
    pub disconnects: u64,
    /// Lines the devices could not use.
    pub protocol_errors: u64,
    /// Rejections over the whole run, by reason (the fleet's report).
    pub rejected_by_reason: serde_json::Value,
    /// Other processes' CPU on the translator's core, % of the window.
    pub others_pct: f64,
    /// The 1-minute load average at the window's end.
    pub loadavg_1m: f64,
    /// Device-side latency: all accepted shares sent in the window.
    pub all: Quantiles,
    /// Those answered below the pool's target.
    pub local: Quantiles,
    /// Those the pool judged.
    pub fwd: Quantiles,
    /// On the wire at the translator's port: all, local, forwarded; `None` without a capture.
    pub wire: Option<[Quantiles; 3]>,
    /// Packets the capture lost.
    pub wire_drops: Option<u32>,
    /// Answers on the wire whose submit the capture did not see.
    pub wire_unmatched: Option<u64>,
    /// Templates whose jobs reached every device, of those the pool made in the window.
    pub fanout_n: u64,
    /// The slowest of them: the pool's first job to the last device's, ms.
    pub fanout_max_ms: Option<f64>,
}

/// Runs the plan, writing `rows.jsonl` and each row's files under `opts.out`, and prints
/// progress to stderr and the tables and ratios to `out`.
pub fn run(opts: &Options, out: &mut dyn std::io::Write) -> Result<Vec<Row>, BenchError> {
    if opts.translator_core == opts.load_core {
        return Err(BenchError::Options(
            "the translator and its load need two different cores".into(),
        ));
    }
    let plan = opts.plan();
    let reference = if plan
        .iter()
        .any(|(k, _)| matches!(k, RowKind::TranslatorSv2 | RowKind::TranslatorSv2Warn))
    {
        Some(third_party::find(
            &third_party::TRANSLATOR_SV2,
            "bench translator",
        )?)
    } else {
        None
    };
    // Without CAP_NET_RAW there is no wire figure: say so once, before anything runs.
    let wire = opts.wire
        && {
            match Tap::open() {
                Ok(_) => true,
                Err(e) => {
                    eprintln!(
                    "bench translator: no capture on the wire ({e}); device-side figures only, and no floor row"
                );
                    false
                }
            }
        };
    // The floor is measured on the wire only.
    let plan: Vec<_> = plan
        .into_iter()
        .filter(|(k, _)| *k != RowKind::Floor || wire)
        .collect();
    if plan.is_empty() {
        return Err(BenchError::Options(
            "no row to run: the floor row is measured on the wire, which needs CAP_NET_RAW".into(),
        ));
    }
    let mut output = Output::create(&opts.out)?;
    eprintln!(
        "bench translator: {} devices, {} shares/s offered, upstream {} shares/min, {} channels; warm-up {:?}, window {:?}; translator on core {}, the rest on core {}; files in {}",
        opts.devices,
        opts.shares_per_s,
        opts.upstream_spm,
        if opts.per_device { "per-device" } else { "aggregated" },
        opts.warmup,
        opts.window,
        opts.translator_core,
        opts.load_core,
        opts.out.display()
    );
    let mut rows = Vec::new();
    for (i, (kind, label)) in plan.iter().enumerate() {
        eprintln!("[{}/{}] {label}", i + 1, plan.len());
        let row = RowRun {
            opts,
            kind: *kind,
            label,
            wire,
            authority: &output.authority,
            reference: reference.as_ref(),
            dir: opts.out.join(label.replace('#', "-")),
        }
        .run()?;
        output.write(&row)?;
        eprintln!(
            "    answered {:.1}/s, p50 {} ms, wire p50 {} ms, {} CPU-us/share, {:.1} KiB/device, generator CPU {:.1}%",
            row.answered as f64 / row.window_s,
            table::opt(row.all.p50_ms, 3),
            table::opt(row.wire.and_then(|w| w[0].p50_ms), 3),
            table::opt(row.cpu_us_per_share, 1),
            row.rss_per_device_kib,
            row.fleet_cpu_pct
        );
        rows.push(row);
    }
    table::print(&rows, out).map_err(io("printing the table"))?;
    Ok(rows)
}

/// One row being measured.
struct RowRun<'a> {
    opts: &'a Options,
    kind: RowKind,
    label: &'a str,
    wire: bool,
    authority: &'a AuthorityFile,
    reference: Option<&'a Tool>,
    dir: PathBuf,
}

impl RowRun<'_> {
    fn fail(&self, why: impl Into<String>) -> BenchError {
        BenchError::Row {
            row: self.label.to_owned(),
            why: why.into(),
        }
    }

    fn ours(&self, core: usize, name: &str, args: Vec<String>) -> Result<RoleProcess, BenchError> {
        spawn_on(
            &self.dir,
            core,
            Kind::Ours,
            name,
            &self.opts.stratumlab,
            &args,
            &[],
        )
    }

    fn run(&self) -> Result<Row, BenchError> {
        let o = self.opts;
        std::fs::create_dir_all(&self.dir)
            .map_err(io(format!("creating {}", self.dir.display())))?;
        let key_file = path(&self.authority.path);
        let mut simnet = self.ours(o.load_core, "simnet", simnet_args(&key_file))?;
        let tdp = simnet.wait_listening("tdp", READY)?.to_string();
        // A channel per device shares the upstream rate among the devices' channels.
        let pool_spm = if o.per_device {
            o.upstream_spm / f64::from(o.devices)
        } else {
            o.upstream_spm
        };
        let mut pool = self.ours(
            o.load_core,
            "pool",
            strings([
                "pool",
                "--sv2-listen",
                "127.0.0.1:0",
                "--tp",
                &tdp,
                "--tp-authority-key",
                &self.authority.public,
                "--authority-key-file",
                &key_file,
                "--payout-address",
                PAYOUT,
                "--shares-per-minute",
                &pool_spm.to_string(),
                "--sv2-max-channels",
                &o.devices.to_string(),
                "--durability",
                "off",
                "--store",
                &path(&self.dir.join("pool.sqlite")),
                "--events",
                &path(&self.dir.join("pool.ev")),
            ]),
        )?;
        let upstream = pool.wait_listening("sv2", READY)?;
        let (mut translator, sv1) = self.start_translator(upstream)?;
        // Settled with its upstream and no device: the memory baseline.
        std::thread::sleep(Duration::from_secs(2));
        let rss0 = rss_kib(translator.pid());

        let total = o.warmup + o.window + Duration::from_secs(3);
        let mut fleet = self.ours(
            o.load_core,
            "fleet",
            strings([
                "fleet",
                "--pool",
                &sv1.to_string(),
                "--devices",
                &o.devices.to_string(),
                "--hash-budget",
                &o.hash_budget.to_string(),
                "--threads",
                "1",
                "--duration",
                &format!("{}ms", total.as_millis()),
                "--drain",
                "3s",
                "--json",
                "--events",
                &path(&self.dir.join("fleet.ev")),
            ]),
        )?;
        eprintln!(
            "    {} devices at {:.0} H/s, difficulty {:.3e}, through {sv1} to the pool at {upstream}",
            o.devices,
            o.per_device_rate(),
            o.difficulty()
        );
        // The same window on the wire, captured on the load's core for the whole capture: the
        // thread wakes for every loopback packet, and must not do so on the translator's core.
        let capture = self.wire.then(|| {
            let (port, warmup, window, core) = (sv1.port(), o.warmup, o.window, o.load_core);
            std::thread::spawn(move || -> Option<Capture> {
                pin::on_core(core, || {
                    let tap = Tap::open().ok()?;
                    std::thread::sleep(warmup);
                    Some(tap.capture(port, window))
                })
                .ok()
                .flatten()
            })
        });
        let pids = [translator.pid(), fleet.pid()];
        std::thread::sleep(o.warmup);
        let a = window::read(&pids, translator.pid());
        std::thread::sleep(o.window);
        let b = window::read(&pids, translator.pid());
        let rss = rss_kib(translator.pid());
        let w = window::between(&a, &b);
        fleet_done(&mut fleet, total + Duration::from_secs(60)).map_err(|e| self.fail(e))?;
        let wire = capture.and_then(|c| c.join().ok().flatten());
        if self.wire && wire.is_none() {
            eprintln!("    no capture on the wire for this row");
        }
        stop_all(&mut [&mut translator, &mut pool, &mut simnet]).map_err(|e| self.fail(e))?;
        let report = json_report(&fleet, &self.dir, "fleet").map_err(|e| self.fail(e))?;
        let row = self.row(
            &w,
            &report,
            [translator.pid(), fleet.pid()],
            rss0,
            rss,
            wire,
        )?;
        let ok = row.ready == row.devices
            && row.protocol_errors == 0
            && row.accepted > 0
            && (row.upstream_accepted > 0 || self.kind == RowKind::Floor);
        let why =
            "not every device was ready, protocol errors, or nothing accepted here or upstream";
        measured(row, ok, why).map_err(|e| self.fail(e))
    }

    /// The translator of this row (or the floor pool), listening for SV1 devices.
    fn start_translator(
        &self,
        upstream: SocketAddr,
    ) -> Result<(RoleProcess, SocketAddr), BenchError> {
        let o = self.opts;
        let core = o.translator_core;
        let difficulty = o.difficulty();
        match self.kind {
            RowKind::Floor => {
                let program = o.examples.join("sv1_floor_pool");
                if !program.is_file() {
                    return Err(BenchError::Missing {
                        program: "sv1_floor_pool",
                        path: program,
                        hint: "build it: cargo build --release -p fleet --example sv1_floor_pool",
                    });
                }
                // A new job every 10 s, as simnet's templates come; the upstream above idles.
                let args = [difficulty.to_string(), "10".into()];
                let mut p = spawn_on(
                    &self.dir,
                    core,
                    Kind::Ours,
                    "translator",
                    &program,
                    &args,
                    &[],
                )?;
                let at = p.wait_listening("sv1", READY)?;
                Ok((p, at))
            }
            RowKind::Ours => {
                let mut p = self.ours(
                    core,
                    "translator",
                    strings([
                        "translator",
                        "--listen",
                        "127.0.0.1:0",
                        "--upstream",
                        &upstream.to_string(),
                        "--upstream-authority-key",
                        &self.authority.public,
                        "--user-identity",
                        &format!("bench-{}", self.label),
                        "--device-hash-rate",
                        &o.per_device_rate().to_string(),
                        "--start-difficulty",
                        &difficulty.to_string(),
                        "--min-difficulty",
                        &(difficulty / 16.0).to_string(),
                        "--shares-per-minute",
                        &o.spm().to_string(),
                        "--channels",
                        if o.per_device {
                            "per-device"
                        } else {
                            "aggregated"
                        },
                    ]),
                )?;
                let at = p.wait_listening("sv1", READY)?;
                Ok((p, at))
            }
            RowKind::TranslatorSv2 | RowKind::TranslatorSv2Warn => {
                let tool = self.reference.expect("located before the run");
                let listen =
                    free_loopback_port().map_err(io("finding a port for translator_sv2"))?;
                let label = format!("bench-{}", self.label);
                // Aggregated: 2 bytes of per-miner index above the devices' 2 of extranonce2
                // (4 in all: what our pool lets a channel roll).
                let toml = TranslatorSv2Config {
                    listen,
                    upstream,
                    authority_public_key: &self.authority.public,
                    user_identity: &label,
                    device_hash_rate: o.per_device_rate(),
                    shares_per_minute: o.spm(),
                    aggregate_channels: !o.per_device,
                    extranonce2_size: 2,
                    extensions: &[],
                    monitoring: None,
                }
                .toml();
                let warn = self.kind == RowKind::TranslatorSv2Warn;
                let ready = format!("{TRANSLATOR_SV2_READY}{listen}");
                let p = start_reference(
                    &self.dir,
                    core,
                    "translator",
                    &tool.path,
                    &toml,
                    warn,
                    listen,
                    &ready,
                )?;
                Ok((p, listen))
            }
        }
    }

    /// The row's figures from the window, the fleet's report, both event files and the capture.
    fn row(
        &self,
        w: &super::Window,
        report: &serde_json::Value,
        [translator, fleet]: [u32; 2],
        rss0: f64,
        rss: f64,
        wire: Option<Capture>,
    ) -> Result<Row, BenchError> {
        let o = self.opts;
        let (t0, t1) = (w.t0_ns, w.t1_ns);
        let in_window = |ts: u64| (t0..t1).contains(&ts);
        // What reached the pool: its verdicts, by nonce (a forwarded share keeps its device's).
        let mut upstream = HashSet::new();
        let (mut judged, mut judged_ok) = (0, 0);
        let mut made = HashMap::new();
        let mut first_job = HashMap::new();
        each_event(&self.dir.join("pool.ev"), |e| match e.kind {
            EventKind::ShareResult(r) if r.channel.is_some() => {
                upstream.insert(r.nonce);
                if in_window(e.ts_ns) {
                    judged += 1;
                    judged_ok += u64::from(r.verdict.is_accepted());
                }
            }
            EventKind::TemplateCreated(t) => {
                made.insert(t.template_id, t.fingerprint);
            }
            EventKind::JobSent(j) => {
                if let Some(t) = j.template_id {
                    first_job.entry(t).or_insert(e.ts_ns);
                }
            }
            _ => {}
        })
        .map_err(|e| self.fail(format!("the pool's events do not read: {e}")))?;
        let mut sent = HashMap::new();
        let mut results = Vec::new();
        let mut received: HashMap<_, HashMap<u64, u64>> = HashMap::new();
        each_event(&self.dir.join("fleet.ev"), |e| match e.kind {
            EventKind::ShareSent(s) => {
                sent.insert((s.device, s.seq), (e.ts_ns, s.nonce));
            }
            EventKind::ShareResult(r) if r.perspective == Perspective::Received => {
                results.push((e.ts_ns, r));
            }
            EventKind::JobReceived(j) => {
                if let Some(f) = j.fingerprint {
                    received
                        .entry(f)
                        .or_default()
                        .entry(j.device)
                        .or_insert(e.ts_ns);
                }
            }
            _ => {}
        })
        .map_err(|e| self.fail(format!("the fleet's events do not read: {e}")))?;
        let (mut answered, mut accepted) = (0, 0);
        let mut lat = [Samples::new(), Samples::new(), Samples::new()];
        for (ts, r) in &results {
            let ok = r.verdict.is_accepted();
            if in_window(*ts) {
                answered += 1;
                accepted += u64::from(ok);
            }
            if let Some(&(s, nonce)) = sent.get(&(r.conn, r.seq)) {
                if ok && in_window(s) {
                    let ns = ts.saturating_sub(s);
                    lat[0].push(r.conn as u32, ns);
                    lat[if upstream.contains(&nonce) { 2 } else { 1 }].push(r.conn as u32, ns);
                }
            }
        }
        let wire_q = wire.as_ref().map(|c| {
            let mut q = [Samples::new(), Samples::new(), Samples::new()];
            for &(ms, nonce, ok) in &c.samples {
                if ok {
                    let ns = (ms * 1e6) as u64;
                    q[0].push(0, ns);
                    let fwd = nonce.is_some_and(|n| upstream.contains(&n));
                    q[if fwd { 2 } else { 1 }].push(0, ns);
                }
            }
            q.each_ref().map(Quantiles::of)
        });
        let devices = u64::from(o.devices);
        let fanout: Vec<f64> = first_job
            .iter()
            .filter(|(_, &ts)| in_window(ts))
            .filter_map(|(t, &ts)| {
                let got = received.get(made.get(t)?)?;
                let last = *got.values().max()?;
                (got.len() as u64 == devices).then(|| last.saturating_sub(ts) as f64 / 1e6)
            })
            .collect();
        let secs = w.secs();
        let cpu = w.cpu_s.get(&translator).copied().unwrap_or(0.0);
        let core = w
            .core_busy_s
            .get(&o.translator_core.to_string())
            .copied()
            .unwrap_or(0.0);
        let u64_of = |k: &str| report[k].as_u64().unwrap_or(0);
        Ok(Row {
            label: self.label.to_owned(),
            kind: match self.kind {
                RowKind::Floor => "floor",
                RowKind::Ours => "ours",
                _ => "translator_sv2",
            }
            .into(),
            devices,
            offered_per_s: o.shares_per_s,
            window_s: secs,
            answered,
            accepted,
            rejected: answered - accepted,
            accepted_per_s: accepted as f64 / secs,
            upstream_per_s: judged as f64 / secs,
            upstream_accepted: judged_ok,
            upstream_judged: judged,
            translator_cpu_pct: 100.0 * cpu / secs,
            cpu_us_per_share: (answered > 0).then(|| cpu * 1e6 / answered as f64),
            fleet_cpu_pct: 100.0 * w.cpu_s.get(&fleet).copied().unwrap_or(0.0) / secs,
            rss0_kib: rss0,
            rss_kib: rss,
            rss_per_device_kib: (rss - rss0) / devices as f64,
            ready: u64_of("ready"),
            disconnects: u64_of("disconnects"),
            protocol_errors: u64_of("protocol_errors"),
            rejected_by_reason: report["shares"]["rejected_by_reason"].clone(),
            others_pct: 100.0 * (core - cpu) / secs,
            loadavg_1m: w.loadavg_1m,
            all: Quantiles::of(&lat[0]),
            local: Quantiles::of(&lat[1]),
            fwd: Quantiles::of(&lat[2]),
            wire: wire_q,
            wire_drops: wire.as_ref().map(|c| c.drops),
            wire_unmatched: wire.as_ref().map(|c| c.unmatched),
            fanout_n: fanout.len() as u64,
            fanout_max_ms: fanout.into_iter().reduce(f64::max),
        })
    }
}

fn rss_kib(pid: u32) -> f64 {
    fleet::proc_stat::rss_bytes(Some(pid)).map_or(0.0, |b| b as f64 / 1024.0)
}

/// The reasons a row's figures are only comparable with care, in the table's note column.
pub(super) fn note(r: &Row) -> &'static str {
    if r.fleet_cpu_pct >= 90.0 {
        "generator-bound"
    } else if r.translator_cpu_pct >= 95.0 {
        "translator-bound"
    } else if r.others_pct >= 15.0 {
        // Latency here is mostly waking the core: anything else on it shows in the tail first.
        "core shared: latency not comparable"
    } else {
        ""
    }
}

/// Rows grouped by repetition (`#N` suffix), each by name.
pub(super) fn repetitions(rows: &[Row]) -> BTreeMap<u32, BTreeMap<&str, &Row>> {
    let mut reps: BTreeMap<u32, BTreeMap<&str, &Row>> = BTreeMap::new();
    for r in rows {
        let (name, rep) = r.label.split_once('#').unwrap_or((&r.label, "1"));
        reps.entry(rep.parse().unwrap_or(1))
            .or_default()
            .insert(name, r);
    }
    reps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(rows: &[RowKind], repeat: u32, wire: bool) -> Options {
        Options {
            devices: 100,
            shares_per_s: 100.0,
            hash_budget: 1e6,
            upstream_spm: 600.0,
            per_device: false,
            warmup: Duration::from_secs(1),
            window: Duration::from_secs(1),
            rows: rows.to_vec(),
            repeat,
            wire,
            translator_core: 1,
            load_core: 0,
            stratumlab: PathBuf::new(),
            examples: PathBuf::new(),
            out: PathBuf::new(),
        }
    }

    #[test]
    fn repetitions_alternate_which_translator_goes_first_after_the_floor() {
        use RowKind::*;
        let all = [TranslatorSv2Warn, Ours, TranslatorSv2, Floor];
        let labels: Vec<String> = opts(&all, 2, true)
            .plan()
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        assert_eq!(
            labels,
            [
                "floor",
                "ours",
                "translator_sv2",
                "translator_sv2-warn",
                "floor#2",
                "translator_sv2#2",
                "ours#2",
                "translator_sv2-warn#2"
            ]
        );
        // No capture, no floor.
        let plan = opts(&[Floor, Ours], 1, false).plan();
        assert_eq!(plan, [(Ours, "ours".to_owned())]);
    }

    #[test]
    fn the_share_difficulty_gives_each_device_its_share_rate() {
        let o = opts(&[], 1, false);
        // 10 kH/s per device, 60 shares a minute each: one share per 10^4 hashes.
        assert_eq!(o.per_device_rate(), 10_000.0);
        assert_eq!(o.spm(), 60.0);
        assert!((o.difficulty() * 2f64.powi(32) - 10_000.0).abs() < 1e-6);
    }

    #[test]
    fn rows_group_by_repetition() {
        let row = |l: &str| Row {
            label: l.into(),
            ..Row::default()
        };
        let rows = [
            row("ours"),
            row("floor"),
            row("ours#2"),
            row("translator_sv2#2"),
        ];
        let reps = repetitions(&rows);
        assert_eq!(reps.len(), 2);
        assert_eq!(
            reps[&1].keys().copied().collect::<Vec<_>>(),
            ["floor", "ours"]
        );
        assert_eq!(reps[&2]["translator_sv2"].label, "translator_sv2#2");
    }
}
