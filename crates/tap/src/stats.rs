//! What a tap has carried, for its summary: connections, bytes, SV1 messages, and the delay it
//! actually applied (the time a chunk left minus the time it arrived, or the end of its
//! connection's emulated handshake if that was later, as the tap measured them).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use events::Direction;
use hdrhistogram::Histogram;

use crate::link::LinkConfig;
use crate::sv1_watch::Sv1Counts;
use crate::sv2_watch::{Sv2Counts, WorkerShares};
use crate::timer::TimerStats;

/// Live counters of one tap, shared by its connections.
pub struct TapStats {
    /// Client connections accepted, those then refused over the connection limit included.
    pub accepted: AtomicU64,
    /// Closed at once: over the connection limit or out of descriptors.
    pub refused: AtomicU64,
    /// The upstream could not be reached.
    pub upstream_failed: AtomicU64,
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections read as Stratum V1, and of those, how many stopped on an overlong line.
    pub sv1_connections: AtomicU64,
    /// Of `sv1_connections`, those whose reading stopped on a line over `max_line`.
    pub sv1_overflows: AtomicU64,
    /// Connections whose SV2 Noise the tap terminated (`--sv2-terminate`), and of those, how
    /// many failed a handshake or a frame.
    pub sv2_connections: AtomicU64,
    /// Of `sv2_connections`, those that failed a handshake or a frame.
    pub sv2_failures: AtomicU64,
    bytes: [AtomicU64; 2],
    /// With SV2 terminated, the upstream leg's wire bytes (`bytes` are the client leg's).
    upstream_bytes: [AtomicU64; 2],
    lost_chunks: [AtomicU64; 2],
    sv1: Mutex<[Sv1Counts; 2]>,
    sv2: Mutex<[Sv2Counts; 2]>,
    /// Shares per worker named on SV2 connections (extension 0x0002).
    sv2_workers: Mutex<WorkerShares>,
    delays: Mutex<Delays>,
}

struct Delays {
    applied: [Histogram<u64>; 2],
    late: [Histogram<u64>; 2],
    rtt: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    // 1 ns to an hour at 3 significant digits: 72.5 ms is resolved to about 30 µs.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

fn lane(dir: Direction) -> usize {
    match dir {
        Direction::Up => 0,
        Direction::Down => 1,
    }
}

impl Default for TapStats {
    fn default() -> Self {
        TapStats {
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            upstream_failed: AtomicU64::new(0),
            open: AtomicU64::new(0),
            sv1_connections: AtomicU64::new(0),
            sv1_overflows: AtomicU64::new(0),
            sv2_connections: AtomicU64::new(0),
            sv2_failures: AtomicU64::new(0),
            bytes: Default::default(),
            upstream_bytes: Default::default(),
            lost_chunks: Default::default(),
            sv1: Mutex::new(Default::default()),
            sv2: Mutex::new(Default::default()),
            sv2_workers: Mutex::default(),
            delays: Mutex::new(Delays {
                applied: [histogram(), histogram()],
                late: [histogram(), histogram()],
                rtt: histogram(),
            }),
        }
    }
}

impl TapStats {
    fn delays(&self) -> MutexGuard<'_, Delays> {
        self.delays.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `n` bytes relayed in direction `dir` (under SV2, the client leg's).
    pub fn add_bytes(&self, dir: Direction, n: u64) {
        self.bytes[lane(dir)].fetch_add(n, Relaxed);
    }

    /// Bytes counted by [`TapStats::add_bytes`] in direction `dir`.
    pub fn bytes(&self, dir: Direction) -> u64 {
        self.bytes[lane(dir)].load(Relaxed)
    }

    /// Counts `n` wire bytes of the upstream leg in direction `dir` (SV2 terminated only).
    pub fn add_upstream_bytes(&self, dir: Direction, n: u64) {
        self.upstream_bytes[lane(dir)].fetch_add(n, Relaxed);
    }

    /// Counts `n` more chunks that paid a loss penalty in direction `dir`.
    pub fn add_lost(&self, dir: Direction, n: u64) {
        self.lost_chunks[lane(dir)].fetch_add(n, Relaxed);
    }

    /// The delay applied to one chunk, and how late after its scheduled release it left.
    pub fn record_release(&self, dir: Direction, applied_ns: u64, late_ns: u64) {
        let mut d = self.delays();
        let _ = d.applied[lane(dir)].record(applied_ns.max(1));
        let _ = d.late[lane(dir)].record(late_ns.max(1));
    }

    /// A round trip measured through the tap (up plus down applied delay).
    pub fn record_rtt(&self, ns: u64) {
        let _ = self.delays().rtt.record(ns.max(1));
    }

    /// Adds one connection's SV1 message counts in direction `dir`.
    pub fn add_sv1(&self, dir: Direction, c: &Sv1Counts) {
        self.sv1.lock().unwrap_or_else(|e| e.into_inner())[lane(dir)].add(c);
    }

    /// Adds one connection's SV2 frame and message counts in direction `dir`.
    pub fn add_sv2(&self, dir: Direction, c: &Sv2Counts) {
        self.sv2.lock().unwrap_or_else(|e| e.into_inner())[lane(dir)].add(c);
    }

    /// Adds one connection's shares per named worker (extension 0x0002).
    pub fn add_sv2_workers(&self, workers: &WorkerShares) {
        self.sv2_workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .merge(workers);
    }

    /// The report so far, for a run of `elapsed` on `link`, with the release timer's `timer` stats.
    pub fn summary(&self, link: &LinkConfig, elapsed: Duration, timer: TimerStats) -> Summary {
        let sv1 = *self.sv1.lock().unwrap_or_else(|e| e.into_inner());
        let sv2 = *self.sv2.lock().unwrap_or_else(|e| e.into_inner());
        let d = self.delays();
        Summary {
            link: *link,
            elapsed,
            accepted: self.accepted.load(Relaxed),
            refused: self.refused.load(Relaxed),
            upstream_failed: self.upstream_failed.load(Relaxed),
            open: self.open.load(Relaxed),
            bytes: [self.bytes[0].load(Relaxed), self.bytes[1].load(Relaxed)],
            lost_chunks: [
                self.lost_chunks[0].load(Relaxed),
                self.lost_chunks[1].load(Relaxed),
            ],
            sv1_connections: self.sv1_connections.load(Relaxed),
            sv1_overflows: self.sv1_overflows.load(Relaxed),
            sv1,
            sv2_connections: self.sv2_connections.load(Relaxed),
            sv2_failures: self.sv2_failures.load(Relaxed),
            upstream_bytes: [
                self.upstream_bytes[0].load(Relaxed),
                self.upstream_bytes[1].load(Relaxed),
            ],
            sv2,
            sv2_workers: self
                .sv2_workers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            applied: [
                Distribution::of(&d.applied[0]),
                Distribution::of(&d.applied[1]),
            ],
            late: [Distribution::of(&d.late[0]), Distribution::of(&d.late[1])],
            rtt: Distribution::of(&d.rtt),
            timer,
        }
    }
}

/// Percentiles of a histogram of nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Distribution {
    /// Samples recorded.
    pub n: u64,
    /// Smallest sample, in nanoseconds.
    pub min_ns: u64,
    /// Median, in nanoseconds.
    pub p50_ns: u64,
    /// 99th percentile, in nanoseconds.
    pub p99_ns: u64,
    /// Largest sample, in nanoseconds.
    pub max_ns: u64,
}

impl Distribution {
    /// The percentiles of `h`; all zero when it is empty.
    pub fn of(h: &Histogram<u64>) -> Distribution {
        if h.is_empty() {
            return Distribution::default();
        }
        Distribution {
            n: h.len(),
            min_ns: h.min(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.n == 0 {
            return f.write_str("no samples");
        }
        let ms = |ns: u64| ns as f64 / 1e6;
        write!(
            f,
            "p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} samples)",
            ms(self.p50_ns),
            ms(self.p99_ns),
            ms(self.max_ns),
            self.n
        )
    }
}

/// The end-of-run report of a tap.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The link the tap emulated.
    pub link: LinkConfig,
    /// How long the tap ran.
    pub elapsed: Duration,
    /// Client connections accepted, those then refused over the connection limit included.
    pub accepted: u64,
    /// Connections closed at once: over the connection limit or out of descriptors.
    pub refused: u64,
    /// Connections whose upstream could not be reached.
    pub upstream_failed: u64,
    /// Still open when the summary was taken.
    pub open: u64,
    /// Application bytes relayed up and down.
    pub bytes: [u64; 2],
    /// Chunks that paid a loss penalty, up and down.
    pub lost_chunks: [u64; 2],
    /// Connections read as Stratum V1.
    pub sv1_connections: u64,
    /// Of those, how many stopped reading on an overlong line.
    pub sv1_overflows: u64,
    /// SV1 messages seen going up and down.
    pub sv1: [Sv1Counts; 2],
    /// Connections whose SV2 Noise the tap terminated.
    pub sv2_connections: u64,
    /// Of those, how many failed a handshake or a frame.
    pub sv2_failures: u64,
    /// With SV2 terminated: the upstream leg's wire bytes up and down (`bytes` are the
    /// client leg's).
    pub upstream_bytes: [u64; 2],
    /// SV2 frames and messages seen going up and down.
    pub sv2: [Sv2Counts; 2],
    /// Shares per worker named on SV2 connections (extension 0x0002).
    pub sv2_workers: WorkerShares,
    /// Delay applied up and down, as measured by the tap.
    pub applied: [Distribution; 2],
    /// How late after their scheduled release chunks left, up and down: the tap's own error.
    pub late: [Distribution; 2],
    /// Round trips measured through the tap (`LinkRtt`).
    pub rtt: Distribution,
    /// How punctually the release timer woke up.
    pub timer: TimerStats,
}

impl Summary {
    /// Application bytes relayed in direction `dir`.
    pub fn bytes(&self, dir: Direction) -> u64 {
        self.bytes[lane(dir)]
    }

    /// SV1 messages seen in direction `dir`.
    pub fn sv1(&self, dir: Direction) -> &Sv1Counts {
        &self.sv1[lane(dir)]
    }

    /// SV2 frames and messages seen in direction `dir`.
    pub fn sv2(&self, dir: Direction) -> &Sv2Counts {
        &self.sv2[lane(dir)]
    }

    /// The upstream leg's wire bytes in direction `dir` (SV2 terminated only; zero otherwise).
    pub fn upstream_bytes(&self, dir: Direction) -> u64 {
        self.upstream_bytes[lane(dir)]
    }

    /// Delay applied in direction `dir`.
    pub fn applied(&self, dir: Direction) -> &Distribution {
        &self.applied[lane(dir)]
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = &self.link;
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        writeln!(f, "tap summary after {:.1} s", self.elapsed.as_secs_f64())?;
        writeln!(
            f,
            "  link          delay up {:?} down {:?}, jitter {:?}, loss {}, bandwidth {}",
            l.delay_up, l.delay_down, l.jitter, l.loss, l.bandwidth
        )?;
        writeln!(
            f,
            "  connections   {} accepted, {} refused, {} upstream failures, {} open",
            self.accepted, self.refused, self.upstream_failed, self.open
        )?;
        for (i, name) in ["up", "down"].iter().enumerate() {
            writeln!(
                f,
                "  bytes {name:<6}  {} ({:.0} B/s), {} chunks paid a loss",
                self.bytes[i],
                self.bytes[i] as f64 / secs,
                self.lost_chunks[i]
            )?;
        }
        for (i, name) in ["up", "down"].iter().enumerate() {
            writeln!(f, "  delay {name:<6}  {}", self.applied[i])?;
            let late = &self.late[i];
            if late.n > 0 {
                writeln!(
                    f,
                    "    late by     p50 {:.1} us, p99 {:.1} us, max {:.1} us after the scheduled release",
                    late.p50_ns as f64 / 1e3,
                    late.p99_ns as f64 / 1e3,
                    late.max_ns as f64 / 1e3
                )?;
            }
        }
        writeln!(f, "  rtt measured  {}", self.rtt)?;
        writeln!(
            f,
            "  timer         {} wake-ups, late by {:.1} us on average, {:.1} us at most",
            self.timer.fired,
            self.timer.late_mean_ns() as f64 / 1e3,
            self.timer.late_max_ns as f64 / 1e3
        )?;
        if self.sv1_connections > 0 {
            let mut all = Sv1Counts::default();
            all.add(&self.sv1[0]);
            all.add(&self.sv1[1]);
            let mut errors = String::new();
            for (i, n) in all.errors.iter().enumerate().filter(|(_, n)| **n > 0) {
                let code = Sv1Counts::error_code(i).map_or("other".to_owned(), |c| c.to_string());
                errors.push_str(&format!(" {code}:{n}"));
            }
            writeln!(
                f,
                "  sv1           {} connections ({} stopped on long lines): {} jobs, {} submits, results {} true / {} false / {} errors{}{}, {} unreadable lines",
                self.sv1_connections,
                self.sv1_overflows,
                all.jobs,
                all.submits,
                all.accepted,
                all.rejected,
                all.errors_total(),
                if errors.is_empty() { "" } else { " by code" },
                errors,
                all.unparsed
            )?;
        }
        if self.sv2_connections > 0 {
            let (up, down) = (&self.sv2[0], &self.sv2[1]);
            writeln!(
                f,
                "  sv2           {} connections terminated ({} failed): {} jobs, {} prev hashes, {} targets, {} submits ({} naming their worker), {} accepted / {} rejected, {} extensions negotiation messages, {} frames unread; upstream leg {} B up, {} B down",
                self.sv2_connections,
                self.sv2_failures,
                down.jobs,
                down.prev_hashes,
                down.targets,
                up.submits,
                up.worker_submits,
                down.accepted,
                down.rejected,
                up.negotiation + down.negotiation,
                up.unparsed + down.unparsed + up.other_extension + down.other_extension,
                self.upstream_bytes[0],
                self.upstream_bytes[1]
            )?;
            if !self.sv2_workers.is_empty() {
                let mut busiest: Vec<(&str, u64)> = self.sv2_workers.iter().collect();
                busiest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
                let shown: Vec<String> = busiest
                    .iter()
                    .take(8)
                    .map(|(name, n)| format!("{name} {n}"))
                    .collect();
                writeln!(
                    f,
                    "  sv2 workers   {} named (0x0002), by shares: {}{}",
                    self.sv2_workers.len(),
                    shown.join(", "),
                    if busiest.len() > shown.len() {
                        ", ..."
                    } else {
                        ""
                    }
                )?;
            }
        }
        Ok(())
    }
}
