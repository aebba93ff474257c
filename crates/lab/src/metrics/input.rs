//! What the lab hands the metric engine for one configuration of one trial.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use events::{Event, EventLog, EventReader, Header, ReadError};

use super::estimation::EstimationInput;

/// What a role process is, as far as the metrics care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RoleKind {
    /// Judges shares and submits blocks (the SV1 pool, the SV2 pool, a JDS beside it).
    Pool,
    /// Simulated devices: the farm edge, where shares and jobs are measured.
    Fleet,
    /// A link relay: its `LinkBytes`/`LinkRtt` are the link's; the protocol events it relays are
    /// ignored (they would count every share twice).
    Tap,
    /// A farm-side role between devices and pool (translator, JDC, aggregating proxy): its
    /// upstream side gives `pool_shares`.
    Proxy,
    /// Anything else: only its own `LinkBytes` count (for `roles`).
    Other,
}

impl RoleKind {
    /// The name results.json uses for it.
    pub fn as_str(self) -> &'static str {
        match self {
            RoleKind::Pool => "pool",
            RoleKind::Fleet => "fleet",
            RoleKind::Tap => "tap",
            RoleKind::Proxy => "proxy",
            RoleKind::Other => "other",
        }
    }
}

/// Which side of the WAN link a role runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Site {
    /// The farm side: devices and farm proxies.
    Farm,
    /// The pool side.
    Pool,
}

impl Site {
    /// The name results.json uses for it (`farm`, `pool`).
    pub fn as_str(self) -> &'static str {
        match self {
            Site::Farm => "farm",
            Site::Pool => "pool",
        }
    }
}

/// Where a log's events are: a file read (streamed, never held whole) on each pass, or events
/// already in memory (tests, or a log shared by several configurations).
#[derive(Clone, Debug)]
pub enum LogSource {
    /// A log file.
    File(PathBuf),
    /// Events already in memory.
    Memory(Arc<EventLog>),
}

impl From<EventLog> for LogSource {
    fn from(log: EventLog) -> Self {
        LogSource::Memory(Arc::new(log))
    }
}

impl From<PathBuf> for LogSource {
    fn from(path: PathBuf) -> Self {
        LogSource::File(path)
    }
}

impl LogSource {
    /// Calls `f` on every event in file order, and returns the file's header.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Event)) -> Result<Header, ReadError> {
        match self {
            LogSource::Memory(log) => {
                log.events.iter().for_each(&mut f);
                Ok(log.header)
            }
            LogSource::File(path) => {
                let mut r = EventReader::open(path)?;
                for e in &mut r {
                    f(&e?);
                }
                if r.truncated() {
                    // A role killed mid-write leaves half a record: everything before it counts.
                    tracing::warn!(path = %path.display(), "events file ends inside a record");
                }
                Ok(*r.header())
            }
        }
    }
}

/// One role's event log, as the lab started it.
#[derive(Clone, Debug)]
pub struct RoleLog {
    /// The role's name in the run ("sv1.pool", "sv1.fleet0", ...): the key in `roles`.
    pub name: String,
    /// What the role is.
    pub kind: RoleKind,
    /// The site it runs at.
    pub site: Site,
    /// Where its events are.
    pub source: LogSource,
}

/// The boundaries of a configuration's run, CLOCK_MONOTONIC ns: warm-up `[start,
/// warmup_end)`, measured window `[warmup_end, drain_start)`, drain `[drain_start, end]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// When the run started.
    pub start_ns: u64,
    /// When the warm-up ended and the measured window began.
    pub warmup_end_ns: u64,
    /// When the measured window ended and the drain began.
    pub drain_start_ns: u64,
    /// When the drain ended.
    pub end_ns: u64,
}

impl Window {
    /// A window of `duration` from `start_ns` whose first `warmup_fraction` is warm-up, then a
    /// drain of `drain`.
    pub fn new(start_ns: u64, duration: Duration, warmup_fraction: f64, drain: Duration) -> Self {
        let d = duration.as_nanos() as u64;
        let warmup = (d as f64 * warmup_fraction.clamp(0.0, 1.0)) as u64;
        Window {
            start_ns,
            warmup_end_ns: start_ns + warmup,
            drain_start_ns: start_ns + d,
            end_ns: start_ns + d + drain.as_nanos() as u64,
        }
    }

    /// Inside the measured window.
    pub fn measured(&self, ts_ns: u64) -> bool {
        ts_ns >= self.warmup_end_ns && ts_ns < self.drain_start_ns
    }

    /// The measured window's length, in ns.
    pub fn measured_ns(&self) -> u64 {
        self.drain_start_ns.saturating_sub(self.warmup_end_ns)
    }

    /// How much a rising counter read now and then (`readings`: time, total) rose over the
    /// measured window: its rise between the first and the last reading inside the window, at
    /// that pace over the whole window (the readings fall a few seconds inside its edges).
    /// `None` unless those readings span at least half the window and the counter did not
    /// fall.
    pub fn counter_rise(&self, readings: &[(u64, f64)]) -> Option<f64> {
        let inside: Vec<&(u64, f64)> = readings.iter().filter(|r| self.measured(r.0)).collect();
        let (first, last) = (inside.first()?, inside.last()?);
        let span = last.0.saturating_sub(first.0);
        if span == 0 || 2 * span < self.measured_ns() || last.1 < first.1 {
            return None;
        }
        Some((last.1 - first.1) * self.measured_ns() as f64 / span as f64)
    }

    /// Whole seconds since `start_ns`, the row of the per-second series.
    pub(crate) fn second(&self, ts_ns: u64) -> Option<usize> {
        (ts_ns >= self.start_ns && ts_ns <= self.end_ns)
            .then(|| ((ts_ns - self.start_ns) / 1_000_000_000) as usize)
    }

    /// Rows of the per-second series: the run's seconds, warm-up and drain included.
    pub(crate) fn seconds(&self) -> usize {
        (self.end_ns.saturating_sub(self.start_ns)).div_ceil(1_000_000_000) as usize
    }
}

/// CPU and memory of one role process as the lab sampled them from /proc: passed through.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessUsage {
    /// Mean CPU, in percent (100 = one core busy).
    pub cpu_pct_mean: Option<f64>,
    /// Highest CPU sample, in percent (100 = one core busy).
    pub cpu_pct_max: Option<f64>,
    /// Peak resident memory, in bytes.
    pub rss_bytes_max: Option<u64>,
}

/// The links of a configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSetup {
    /// The WAN link's name in `LinkBytes`/`LinkRtt` (its tap's `link` field).
    pub wan: String,
    /// The WAN RTT the tap was told to emulate.
    pub rtt: Duration,
    /// The round trip of the links inside a site.
    pub lan_rtt: Duration,
    /// The farm-side node's peer link in simnet's `LinkBytes`, where the configuration has one
    /// (A, B): its bytes count in the farm site's totals (sent = up = tx).
    pub farm_node_peer_link: Option<String>,
    /// simnet's endpoints this configuration's job source uses, as simnet names them in
    /// `LinkBytes` ("rpc", "zmq" for an SV1 pool; "tdp" for an SV2 pool): their bytes are in
    /// this configuration's `links` and its `roles.simnet` (simnet serves every configuration;
    /// the endpoints tell their traffic apart, not their CPU).
    pub node_endpoints: Vec<String>,
}

/// Where a configuration's `pool_shares` (the shares the pool judged, upstream of the farm's
/// roles) are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolShares {
    /// Devices meet the pool themselves: `pool_shares` is null.
    None,
    /// The farm proxy facing the pool records what it sent upstream (`ShareSent`) and the
    /// verdicts it received, matched by (connection, sequence) (sv1-proxied, C).
    ProxyUpstream,
    /// The pool site's own verdicts (`ShareResult` given by its `Pool` roles), each share
    /// counted when judged: the role facing the pool (A and B's JDC) records no upstream
    /// shares, and a proxy behind it sends its shares to the JDC, not to the pool. No share
    /// is unanswered from this side.
    PoolVerdicts,
}

/// Everything about one configuration in one trial.
#[derive(Clone, Debug)]
pub struct ConfigRun {
    /// The configuration's name.
    pub name: String,
    /// The configuration's own roles' logs.
    pub logs: Vec<RoleLog>,
    /// The shared simnet log: templates, tips and block verdicts of every node.
    pub simnet: LogSource,
    /// The simnet node that serves this configuration's job source ("pool" for sv1, C, D;
    /// "farm" for A, B), spelled as in simnet's events (a single-node `stratumlab simnet`
    /// calls its node "node"): whose templates time-to-job counts from and whose block
    /// verdicts block propagation ends at.
    pub job_source_node: String,
    /// The workers the pool credited with an accepted share (our pools' `/api/workers`);
    /// `None` where the pool has no such list.
    pub pool_workers: Option<u64>,
    /// A third-party pool's count of accepted shares, read now and then: (ns, total). Empty
    /// for our pools, whose verdicts are in their events.
    pub pool_accepted: Vec<(u64, f64)>,
    /// The run's warm-up, measured window and drain.
    pub window: Window,
    /// The configuration's links.
    pub links: LinkSetup,
    /// Where `pool_shares` are counted.
    pub pool_shares: PoolShares,
    /// The network's configured mean block interval.
    pub block_interval: Duration,
    /// The configured template refresh interval.
    pub template_interval: Duration,
    /// The fleet's total hash budget over all its processes (hashes per second).
    pub hash_budget_hps: f64,
    /// Per role name, from the lab's /proc sampling.
    pub usage: BTreeMap<String, ProcessUsage>,
    /// Roles of the configuration that write no events (third-party and external ones): their
    /// kind and site, for the roles table beside their /proc figures.
    pub unlogged: BTreeMap<String, (RoleKind, Site)>,
    /// The fleet's setup and the roles' sampled hash-rate estimates, for the estimation
    /// figures (default: not scored).
    pub estimation: EstimationInput,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_read_every_five_seconds_rises_over_the_window_at_its_pace_inside_it() {
        let s = 1_000_000_000u64;
        // Warm-up 0-20 s, measured 20-100 s.
        let w = Window::new(0, Duration::from_secs(100), 0.2, Duration::from_secs(5));
        // 3 shares a second from 0 s; read at 2, 7, 12 ... 97 s, and once in the drain.
        let readings: Vec<(u64, f64)> = (0..21)
            .map(|i| (2 * s + 5 * i * s, 3.0 * (2 + 5 * i) as f64))
            .collect();
        let rise = w.counter_rise(&readings).unwrap();
        assert!((rise - 240.0).abs() < 1e-6, "{rise}");
        // Too few readings inside, or too short a span of them: no figure, rather than a guess.
        assert_eq!(w.counter_rise(&readings[..4]), None);
        assert_eq!(w.counter_rise(&readings[3..5]), None);
        assert_eq!(w.counter_rise(&readings[3..9]), None);
        assert!(w.counter_rise(&readings[3..13]).is_some());
        // A counter that fell is no count.
        let fell = [(30 * s, 90.0), (80 * s, 10.0)];
        assert_eq!(w.counter_rise(&fell), None);
    }
}
