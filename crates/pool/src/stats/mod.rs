//! Pool statistics: what the pool has done and how it is doing, recorded on the share path
//! without locks or allocation, and read in O(1) by the status endpoints ([`crate::http`]).
//!
//! - [`PoolStats`]: pool-wide counters and gauges (shares by verdict and reason, accepted work,
//!   hash rate, connections, vardiff changes, jobs, blocks, node health, whether the pool is
//!   handing out work, the store's figures) and the per-share processing time histogram. Every
//!   method takes `&self`: one `Arc<PoolStats>` is shared by every connection task.
//! - [`WorkerRegistry`] and [`WorkerStats`]: the worker list, kept up to date at authorize and
//!   disconnect, never rebuilt by scanning connections; each connection holds its worker's
//!   `Arc<WorkerStats>` and records shares on it directly.
//!
//! Time comes from the caller as [`Timestamp`]; nothing here reads a clock.
//!
//! # Hash rate
//!
//! A share of difficulty `d` stands for `d · 2³²` hashes expected. The hash rate is the accepted
//! work per second, exponentially decayed with time constants of one minute and ten minutes
//! (`hashrate_1m`, `hashrate_10m`), for the pool and for each worker; `shares_per_second` is the
//! same one-minute average over every share submitted, whatever its verdict. The share path
//! adds to cumulative totals; the decayed sums take in the totals' growth once per 64 ms tick
//! (see `decay.rs` for the estimator and its error bounds).

mod decay;
mod histogram;
mod workers;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

use events::Reason;

use crate::Timestamp;
use decay::{rate_per_second, tick, AtomicF64, Decay, DecayedRates};

pub use decay::TICK_MS;
pub use histogram::{HistogramSnapshot, PROCESSING_BOUNDS_NS};
pub use workers::{
    CarriedOver, PageStart, WorkerRegistry, WorkerStats, WorkerView, WorkersPage,
    DEFAULT_WORKER_RETENTION_MS,
};

/// Expected hashes per difficulty-1 share.
pub const HASHES_PER_SHARE: f64 = 4_294_967_296.0;
/// Time constant of the one-minute averages.
pub const TAU_1M_MS: u64 = 60_000;
/// Time constant of the ten-minute averages.
pub const TAU_10M_MS: u64 = 600_000;

/// Whether the pool is handing out work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Serving {
    /// Handing out work.
    Yes,
    /// Not handing out work, and why.
    No(NotServing),
}

/// Why the pool is not handing out work: it stops rather than serve dead jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotServing {
    /// Starting up: no template has arrived yet.
    NoTemplateYet,
    /// The node does not answer.
    NodeUnreachable,
    /// The node answers, but its templates are too old to mine on.
    TemplatesStale,
    /// The pool is shutting down.
    ShuttingDown,
    /// The share store cannot write: shares are refused (with a reason) until it can again.
    /// Work goes on, and so does a found block's submission.
    Store,
}

impl NotServing {
    /// Every reason, in the order `/metrics` lists them.
    pub const ALL: [NotServing; 5] = [
        NotServing::NoTemplateYet,
        NotServing::NodeUnreachable,
        NotServing::TemplatesStale,
        NotServing::ShuttingDown,
        NotServing::Store,
    ];

    /// The reason's name in `/metrics` and `/api/status` (`no_template_yet`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            NotServing::NoTemplateYet => "no_template_yet",
            NotServing::NodeUnreachable => "node_unreachable",
            NotServing::TemplatesStale => "templates_stale",
            NotServing::ShuttingDown => "shutting_down",
            NotServing::Store => "store",
        }
    }
}

impl Serving {
    const fn code(self) -> u8 {
        match self {
            Serving::Yes => 0,
            Serving::No(NotServing::NoTemplateYet) => 1,
            Serving::No(NotServing::NodeUnreachable) => 2,
            Serving::No(NotServing::TemplatesStale) => 3,
            Serving::No(NotServing::ShuttingDown) => 4,
            Serving::No(NotServing::Store) => 5,
        }
    }

    const fn from_code(code: u8) -> Serving {
        match code {
            0 => Serving::Yes,
            1 => Serving::No(NotServing::NoTemplateYet),
            2 => Serving::No(NotServing::NodeUnreachable),
            3 => Serving::No(NotServing::TemplatesStale),
            5 => Serving::No(NotServing::Store),
            _ => Serving::No(NotServing::ShuttingDown),
        }
    }

    /// Whether this is [`Serving::Yes`].
    pub fn is_serving(self) -> bool {
        self == Serving::Yes
    }
}

/// What the pool knows of its node, and since when (the caller's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeStatus {
    /// Not heard from yet.
    Unknown,
    /// Answering, with fresh templates.
    Ok {
        /// When it entered this state.
        since: Timestamp,
    },
    /// Not answering since `since`.
    Unreachable {
        /// When it entered this state.
        since: Timestamp,
    },
    /// Answering, but the templates have been too old since `since`.
    Stale {
        /// When it entered this state.
        since: Timestamp,
    },
}

const NODE_SINCE_MASK: u64 = (1 << 56) - 1;

impl NodeStatus {
    /// The state's name: `unknown`, `ok`, `unreachable`, `stale`.
    pub const fn state(self) -> &'static str {
        match self {
            NodeStatus::Unknown => "unknown",
            NodeStatus::Ok { .. } => "ok",
            NodeStatus::Unreachable { .. } => "unreachable",
            NodeStatus::Stale { .. } => "stale",
        }
    }

    /// Every name [`NodeStatus::state`] returns.
    pub const STATES: [&'static str; 4] = ["unknown", "ok", "unreachable", "stale"];

    /// Unreachable or stale.
    pub const fn is_failed(self) -> bool {
        matches!(
            self,
            NodeStatus::Unreachable { .. } | NodeStatus::Stale { .. }
        )
    }

    /// When the current state began; `None` while unknown.
    pub const fn since(self) -> Option<Timestamp> {
        match self {
            NodeStatus::Unknown => None,
            NodeStatus::Ok { since }
            | NodeStatus::Unreachable { since }
            | NodeStatus::Stale { since } => Some(since),
        }
    }

    /// State in the top 8 bits, `since` in the low 56 (2.2 million years of milliseconds), so
    /// that one atomic word holds both and a reader never sees one without the other.
    fn pack(self) -> u64 {
        let (code, since) = match self {
            NodeStatus::Unknown => (0, 0),
            NodeStatus::Ok { since } => (1, since.as_millis()),
            NodeStatus::Unreachable { since } => (2, since.as_millis()),
            NodeStatus::Stale { since } => (3, since.as_millis()),
        };
        code << 56 | since.min(NODE_SINCE_MASK)
    }

    fn unpack(word: u64) -> NodeStatus {
        let since = Timestamp::from_millis(word & NODE_SINCE_MASK);
        match word >> 56 {
            1 => NodeStatus::Ok { since },
            2 => NodeStatus::Unreachable { since },
            3 => NodeStatus::Stale { since },
            _ => NodeStatus::Unknown,
        }
    }
}

/// The share store's figures, as its writer reports them (a plain struct of numbers so that
/// the statistics do not depend on the store).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreReport {
    /// Transactions committed since start.
    pub commits: u64,
    /// Records (shares, blocks) written since start.
    pub records: u64,
    /// Records waiting to be written.
    pub queue_len: u64,
    /// How long the writer gathers records into one commit, in milliseconds.
    pub batch_window_ms: u64,
    /// How long the last commit took, in microseconds.
    pub last_commit_us: u64,
    /// Times the store went from writing to failing.
    pub failures: u64,
    /// While the store cannot write: since when (the caller's clock).
    pub failing_since: Option<Timestamp>,
}

/// What the pool depends on, as `/metrics` and `/api/status` name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dependency {
    /// The node's RPC, where templates come from `getblocktemplate`.
    Node,
    /// The SV2 Template Provider, where templates come from one.
    Tp,
    /// The share store.
    Store,
    /// An upstream pool (the JDC's).
    Pool,
    /// A Job Declarator Server (the JDC's).
    Jds,
}

impl Dependency {
    /// The dependency's name in `/metrics` and `/api/status` (`node`, `tp`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Dependency::Node => "node",
            Dependency::Tp => "tp",
            Dependency::Store => "store",
            Dependency::Pool => "pool",
            Dependency::Jds => "jds",
        }
    }
}

/// A dependency of a role built around the pool (the JDC's upstream pool and JDS), as the role
/// reports it: shown beside the pool's own in `/api/status`, `/metrics` and `/healthz`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attached {
    /// Which dependency.
    pub dependency: Dependency,
    /// Whether it is working.
    pub up: bool,
    /// When it entered its current state.
    pub since: Timestamp,
    /// Changes from working to failing.
    pub failures: u64,
    /// Why it failed, while it does.
    pub error: Option<String>,
}

/// Jobs made since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobCounts {
    /// Jobs created.
    pub created: u64,
    /// Of those, jobs that told miners to drop their current work (clean jobs / new prevhash).
    pub clean: u64,
}

/// Blocks found since start, and what became of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockCounts {
    /// Shares that met the network target: blocks sent to the node.
    pub submitted: u64,
    /// The node's verdicts on them.
    pub accepted: u64,
    /// Blocks the node refused.
    pub rejected: u64,
    /// Valid, but the network moved past their height with another block first.
    pub orphaned: u64,
    /// Found on farms' declared jobs: their JDC and the JDS submit them.
    pub declared: u64,
}

impl BlockCounts {
    /// Found and not yet answered for.
    pub fn pending(&self) -> u64 {
        self.submitted
            .saturating_sub(self.accepted + self.rejected + self.orphaned + self.declared)
    }
}

/// What became of a found block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockFate {
    /// The node took it (it extends the chain).
    Accepted,
    /// Valid, but another block at its height won: submitted too late, or lost a race.
    Orphaned,
    /// The node refused it, with a reason.
    Rejected,
}

impl BlockFate {
    /// The fate a block's refusal reason means: Core's `inconclusive` (valid, beside the best
    /// chain), `duplicate` recorded as a refusal (held, but not on the best chain) and a
    /// provider's `not-adopted` (it moved its tip to another block) are orphans; every other
    /// reason is a rejection.
    pub fn of_refusal(reason: &str) -> BlockFate {
        if reason.contains("inconclusive") || reason == "duplicate" || reason == NOT_ADOPTED {
            BlockFate::Orphaned
        } else {
            BlockFate::Rejected
        }
    }
}

/// The result recorded for a block the node took.
pub const ACCEPTED: &str = "accepted";
/// The result recorded for a provider block whose `SubmitSolution` was followed by another tip.
pub const NOT_ADOPTED: &str = "not-adopted";
/// The store's answer for a block found on a declared job, which the pool does not submit.
pub const DECLARED_NOT_SUBMITTED: &str = "declared-job-not-submitted";

/// The pool at one moment. Every figure is one atomic load (or a few, for the counts per
/// reason), so taking a snapshot costs the same with ten workers or a hundred thousand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StatusSnapshot {
    /// When the snapshot was taken.
    pub now: Timestamp,
    /// Milliseconds since the pool started.
    pub uptime_ms: u64,
    /// Hashes per second, one-minute average.
    pub hashrate_1m: f64,
    /// Hashes per second, ten-minute average.
    pub hashrate_10m: f64,
    /// Shares submitted per second (any verdict), one-minute average.
    pub shares_per_second: f64,
    /// Accepted shares since start.
    pub accepted: u64,
    /// Sum of accepted shares' difficulties (difficulty-1 units).
    pub accepted_work: f64,
    /// Rejected shares since start, per reason.
    pub rejected: events::ReasonCounts,
    /// Workers with at least one connection.
    pub workers: u64,
    /// Workers in the list: connected ones plus disconnected ones still retained.
    pub workers_listed: u64,
    /// Open miner connections.
    pub connections: u64,
    /// Miner connections opened since start.
    pub connections_opened: u64,
    /// Difficulty changes sent to miners since start.
    pub vardiff_changes: u64,
    /// Jobs made.
    pub jobs: JobCounts,
    /// Blocks found.
    pub blocks: BlockCounts,
    /// The template source's state.
    pub node: NodeStatus,
    /// Where templates come from: [`Dependency::Node`] or [`Dependency::Tp`].
    pub template_source: Dependency,
    /// Times the template source went from working to unreachable or stale.
    pub node_failures: u64,
    /// The node beside a provider, and its failures: `None` without one.
    pub backup_node: Option<(NodeStatus, u64)>,
    /// With the node beside a provider: the provider templates whose transactions the pool
    /// holds, so that a block found on one can be built whole and sent through the node.
    pub templates_with_transactions: u64,
    /// Where the jobs come from now: [`Dependency::Node`] or [`Dependency::Tp`].
    pub work_source: Dependency,
    /// Handing out work and acknowledging shares; otherwise why not (a failing store comes
    /// before the node's state, shutting down before both).
    pub serving: Serving,
    /// `None` until the store reports.
    pub store: Option<StoreReport>,
    /// With `--zmq`: whether the ZMQ subscription to the node is connected (while it is not,
    /// the pool follows the node by long polling). `None` without ZMQ.
    pub zmq: Option<bool>,
}

/// Difficulties that are not positive finite numbers count as nothing: one NaN would otherwise
/// poison every sum it touched for good.
#[inline]
fn sane(difficulty: f64) -> f64 {
    if difficulty.is_finite() && difficulty > 0.0 {
        difficulty
    } else {
        0.0
    }
}

/// Pool-wide statistics (see the module's documentation).
pub struct PoolStats {
    start: Timestamp,
    decay_1m: Decay,
    decay_10m: Decay,

    // Written by every share.
    accepted: AtomicU64,
    accepted_work: AtomicF64,
    rejected: [AtomicU64; 7],
    /// Accepted work, decayed over one and ten minutes.
    work_rates: DecayedRates<2>,
    /// Shares of any verdict, decayed over one minute.
    share_rates: DecayedRates<1>,
    processing: histogram::ProcessingHistogram,

    // Written now and then.
    connections: AtomicU64,
    connections_opened: AtomicU64,
    workers_online: AtomicU64,
    workers_listed: AtomicU64,
    vardiff_changes: AtomicU64,
    jobs_created: AtomicU64,
    jobs_clean: AtomicU64,
    blocks_submitted: AtomicU64,
    blocks_accepted: AtomicU64,
    blocks_rejected: AtomicU64,
    blocks_orphaned: AtomicU64,
    blocks_handed_off: AtomicU64,
    node: AtomicU64,
    node_failures: AtomicU64,
    /// The node beside a provider (`Unknown` and never set without one).
    backup_node: AtomicU64,
    has_backup: AtomicBool,
    backup_failures: AtomicU64,
    /// Provider templates whose transactions the pool holds (it can build a whole block): the
    /// provider feed's own list, read when a snapshot is taken.
    kept_transactions: std::sync::OnceLock<Arc<crate::tp::KeptTransactions>>,
    /// Where the jobs come from now: the node beside the provider (true) or the primary source.
    working_from_backup: AtomicBool,
    /// 0: no ZMQ; 1: connected; 2: down.
    zmq: std::sync::atomic::AtomicU8,
    uses_tp: AtomicBool,
    serving: AtomicU8,
    store_reported: AtomicBool,
    store_failures: AtomicU64,
    /// The caller's milliseconds plus one while the store fails; 0 while it writes.
    store_failing_since: AtomicU64,
    store_error: std::sync::Mutex<Option<Arc<str>>>,
    attached: std::sync::Mutex<Vec<Attached>>,
    /// The front ends' admission gate, once they listen.
    gate: std::sync::OnceLock<Arc<edge::Gate>>,
    store_commits: AtomicU64,
    store_records: AtomicU64,
    store_queue_len: AtomicU64,
    store_batch_window_ms: AtomicU64,
    store_last_commit_us: AtomicU64,
}

impl std::fmt::Debug for PoolStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolStats")
            .field("start", &self.start)
            .field("accepted", &self.accepted.load(Relaxed))
            .field("connections", &self.connections.load(Relaxed))
            .finish_non_exhaustive()
    }
}

impl PoolStats {
    /// Statistics of a pool started at `start`: uptime and the averages' ages count from it.
    /// The pool does not serve until told to (`No(NoTemplateYet)`), and its node is `Unknown`.
    pub fn new(start: Timestamp) -> Arc<PoolStats> {
        Arc::new(PoolStats {
            start,
            decay_1m: Decay::new(TAU_1M_MS),
            decay_10m: Decay::new(TAU_10M_MS),
            accepted: AtomicU64::new(0),
            accepted_work: AtomicF64::zero(),
            rejected: std::array::from_fn(|_| AtomicU64::new(0)),
            work_rates: DecayedRates::new(),
            share_rates: DecayedRates::new(),
            processing: histogram::ProcessingHistogram::new(),
            connections: AtomicU64::new(0),
            connections_opened: AtomicU64::new(0),
            workers_online: AtomicU64::new(0),
            workers_listed: AtomicU64::new(0),
            vardiff_changes: AtomicU64::new(0),
            jobs_created: AtomicU64::new(0),
            jobs_clean: AtomicU64::new(0),
            blocks_submitted: AtomicU64::new(0),
            blocks_accepted: AtomicU64::new(0),
            blocks_rejected: AtomicU64::new(0),
            blocks_orphaned: AtomicU64::new(0),
            blocks_handed_off: AtomicU64::new(0),
            node: AtomicU64::new(NodeStatus::Unknown.pack()),
            node_failures: AtomicU64::new(0),
            backup_node: AtomicU64::new(NodeStatus::Unknown.pack()),
            has_backup: AtomicBool::new(false),
            backup_failures: AtomicU64::new(0),
            kept_transactions: std::sync::OnceLock::new(),
            working_from_backup: AtomicBool::new(false),
            zmq: std::sync::atomic::AtomicU8::new(0),
            uses_tp: AtomicBool::new(false),
            serving: AtomicU8::new(Serving::No(NotServing::NoTemplateYet).code()),
            store_reported: AtomicBool::new(false),
            store_failures: AtomicU64::new(0),
            store_failing_since: AtomicU64::new(0),
            store_error: std::sync::Mutex::new(None),
            attached: std::sync::Mutex::new(Vec::new()),
            gate: std::sync::OnceLock::new(),
            store_commits: AtomicU64::new(0),
            store_records: AtomicU64::new(0),
            store_queue_len: AtomicU64::new(0),
            store_batch_window_ms: AtomicU64::new(0),
            store_last_commit_us: AtomicU64::new(0),
        })
    }

    /// When the pool started (the caller's clock).
    pub fn start(&self) -> Timestamp {
        self.start
    }

    /// Counts a new miner connection.
    pub fn connection_opened(&self) {
        self.connections.fetch_add(1, Relaxed);
        self.connections_opened.fetch_add(1, Relaxed);
    }

    /// One `connection_closed` per `connection_opened`; a stray extra one leaves the gauge at 0.
    pub fn connection_closed(&self) {
        let _ = self
            .connections
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
    }

    /// An accepted share of `difficulty` (difficulty-1 units) from `worker`, which must come
    /// from a [`WorkerRegistry`] over these statistics.
    #[inline]
    pub fn share_accepted(&self, worker: &WorkerStats, difficulty: f64, now: Timestamp) {
        let difficulty = sane(difficulty);
        let t = tick(self.start, now);
        self.accepted.fetch_add(1, Relaxed);
        self.accepted_work.add(difficulty);
        if self.work_rates.due(t) {
            self.work_rates.fold(
                t,
                || self.accepted_work.load(),
                [&self.decay_1m, &self.decay_10m],
            );
        }
        self.shares_counted(t);
        worker.record_accepted(difficulty, t, now, [&self.decay_1m, &self.decay_10m]);
    }

    /// A rejected share; `worker` is `None` when the share came before any authorized worker.
    #[inline]
    pub fn share_rejected(&self, worker: Option<&WorkerStats>, reason: Reason, now: Timestamp) {
        self.rejected[reason.index()].fetch_add(1, Relaxed);
        self.shares_counted(tick(self.start, now));
        if let Some(w) = worker {
            w.record_rejected(now);
        }
    }

    #[inline]
    fn shares_counted(&self, t: u64) {
        if self.share_rates.due(t) {
            self.share_rates
                .fold(t, || self.shares_total(), [&self.decay_1m]);
        }
    }

    /// Shares answered, any verdict.
    fn shares_total(&self) -> f64 {
        let rejected: u64 = self.rejected.iter().map(|r| r.load(Relaxed)).sum();
        (self.accepted.load(Relaxed) + rejected) as f64
    }

    /// How long the pool took over one share, from reading it to the verdict, in nanoseconds.
    #[inline]
    pub fn share_processing(&self, ns: u64) {
        self.processing.record(ns);
    }

    /// Counts a difficulty change sent to a miner.
    pub fn vardiff_changed(&self) {
        self.vardiff_changes.fetch_add(1, Relaxed);
    }

    /// A job was made; `clean`: miners must drop their current work for it.
    pub fn job_created(&self, clean: bool) {
        self.jobs_created.fetch_add(1, Relaxed);
        if clean {
            self.jobs_clean.fetch_add(1, Relaxed);
        }
    }

    /// A share met the network target and its block goes to the node.
    pub fn block_found(&self) {
        self.blocks_submitted.fetch_add(1, Relaxed);
    }

    /// Counts what a store holds from earlier runs: `awaiting` blocks found and never answered
    /// for (pending until this run's answer), and the recorded `answered` results, so that the
    /// block counts run from the store's beginning rather than this process's.
    pub fn restore_blocks(&self, awaiting: usize, answered: &[String]) {
        self.blocks_submitted
            .fetch_add((awaiting + answered.len()) as u64, Relaxed);
        for result in answered {
            match result.as_str() {
                ACCEPTED => self.block_fate(BlockFate::Accepted),
                DECLARED_NOT_SUBMITTED => self.block_handed_off(),
                refused => self.block_fate(BlockFate::of_refusal(refused)),
            }
        }
    }

    /// A block found on a farm's declared job: the farm's JDC and the JDS submit it, not the
    /// pool, which hears no answer for it.
    pub fn block_handed_off(&self) {
        self.blocks_handed_off.fetch_add(1, Relaxed);
    }

    /// A submitted block's fate.
    pub fn block_fate(&self, fate: BlockFate) {
        match fate {
            BlockFate::Accepted => self.blocks_accepted.fetch_add(1, Relaxed),
            BlockFate::Orphaned => self.blocks_orphaned.fetch_add(1, Relaxed),
            BlockFate::Rejected => self.blocks_rejected.fetch_add(1, Relaxed),
        };
    }

    /// The node's verdict on a submitted block.
    pub fn block_result(&self, accepted: bool) {
        if accepted {
            self.blocks_accepted.fetch_add(1, Relaxed);
        } else {
            self.blocks_rejected.fetch_add(1, Relaxed);
        }
    }

    /// Records whether the pool hands out work, and why not.
    pub fn set_serving(&self, serving: Serving) {
        self.serving.store(serving.code(), Relaxed);
    }

    /// Whether the pool serves, and if not why: what [`PoolStats::set_serving`] said, unless
    /// the store is failing (and the pool is not shutting down).
    pub fn serving(&self) -> Serving {
        let said = Serving::from_code(self.serving.load(Relaxed));
        if said != Serving::No(NotServing::ShuttingDown)
            && self.store_failing_since.load(Relaxed) != 0
        {
            return Serving::No(NotServing::Store);
        }
        said
    }

    /// The template source's state; a change from working (or unknown) to unreachable or stale
    /// counts a failure.
    pub fn set_node(&self, node: NodeStatus) {
        let was = NodeStatus::unpack(self.node.swap(node.pack(), Relaxed));
        if node.is_failed() && !was.is_failed() {
            self.node_failures.fetch_add(1, Relaxed);
        }
    }

    /// The template source's state.
    pub fn node(&self) -> NodeStatus {
        NodeStatus::unpack(self.node.load(Relaxed))
    }

    /// The state of the node beside a provider (its RPC is a second way out for blocks and a
    /// second source of work); a change to unreachable or stale counts a failure.
    pub fn set_backup_node(&self, node: NodeStatus) {
        self.has_backup.store(true, Relaxed);
        let was = NodeStatus::unpack(self.backup_node.swap(node.pack(), Relaxed));
        if node.is_failed() && !was.is_failed() {
            self.backup_failures.fetch_add(1, Relaxed);
        }
    }

    /// The ZMQ subscription's state: `Some(connected)` with `--zmq`, `None` without.
    pub fn set_zmq(&self, connected: Option<bool>) {
        let code = match connected {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
        self.zmq.store(code, Relaxed);
    }

    /// Jobs come from the node beside the provider (`true`) or from the primary source.
    pub fn set_working_from_backup(&self, backup: bool) {
        self.working_from_backup.store(backup, Relaxed);
    }

    /// Where the provider's templates whose transactions the pool holds are counted from.
    pub fn show_kept_transactions(&self, kept: Arc<crate::tp::KeptTransactions>) {
        let _ = self.kept_transactions.set(kept);
    }

    /// Templates come from a Template Provider (named `tp` among the dependencies) rather
    /// than the node's RPC (`node`).
    pub fn set_uses_tp(&self, tp: bool) {
        self.uses_tp.store(tp, Relaxed);
    }

    /// Reports an attached dependency's state at `now` (`error`: why it fails). A change from
    /// working to failing counts a failure; the first report adds it to the list.
    pub fn set_attached(
        &self,
        dependency: Dependency,
        up: bool,
        now: Timestamp,
        error: Option<String>,
    ) {
        let mut list = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        match list.iter_mut().find(|a| a.dependency == dependency) {
            Some(a) => {
                if a.up != up {
                    a.since = now;
                    if !up {
                        a.failures += 1;
                    }
                }
                a.up = up;
                a.error = error;
            }
            None => list.push(Attached {
                dependency,
                up,
                since: now,
                failures: u64::from(!up),
                error,
            }),
        }
    }

    /// The gate that admits miners (shared by the SV1 and SV2 front ends), for `/api/status`'s
    /// `admission` and the `admission_*` metrics.
    pub fn set_gate(&self, gate: Arc<edge::Gate>) {
        let _ = self.gate.set(gate);
    }

    /// The miners' edge, once a front end listens.
    pub fn gate(&self) -> Option<&Arc<edge::Gate>> {
        self.gate.get()
    }

    /// Refusals, closes and bans at the miners' edge at `now` (`None` without a front end).
    pub fn admission(&self, now: Timestamp) -> Option<edge::AdmissionSnapshot> {
        self.gate.get().map(|g| g.snapshot(now))
    }

    /// The attached dependencies, in the order first reported.
    pub fn attached(&self) -> Vec<Attached> {
        self.attached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The store's error while it is failing.
    pub fn store_error(&self) -> Option<Arc<str>> {
        self.store_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The store's error while it cannot write (`None` once it can); whether it fails, and
    /// since when, comes with its figures ([`PoolStats::store`]).
    pub fn set_store_error(&self, error: Option<Arc<str>>) {
        *self.store_error.lock().unwrap_or_else(|e| e.into_inner()) = error;
    }

    /// The store's latest figures.
    pub fn store(&self, report: StoreReport) {
        self.store_commits.store(report.commits, Relaxed);
        self.store_records.store(report.records, Relaxed);
        self.store_queue_len.store(report.queue_len, Relaxed);
        self.store_batch_window_ms
            .store(report.batch_window_ms, Relaxed);
        self.store_last_commit_us
            .store(report.last_commit_us, Relaxed);
        self.store_failures.store(report.failures, Relaxed);
        self.store_failing_since.store(
            report.failing_since.map_or(0, |t| t.as_millis() + 1),
            Relaxed,
        );
        self.store_reported.store(true, Relaxed);
    }

    /// The processing time histogram's counts.
    pub fn processing(&self) -> HistogramSnapshot {
        self.processing.snapshot()
    }

    /// Every figure at `now`.
    pub fn snapshot(&self, now: Timestamp) -> StatusSnapshot {
        let age = now.millis_since(self.start);
        let tau_1m = self.decay_1m.tau_ms();
        let tau_10m = self.decay_10m.tau_ms();
        let [work_1m, work_10m] =
            self.work_rates
                .sums_at(age, || self.accepted_work.load(), [tau_1m, tau_10m]);
        let [shares_1m] = self
            .share_rates
            .sums_at(age, || self.shares_total(), [tau_1m]);
        StatusSnapshot {
            now,
            uptime_ms: age,
            hashrate_1m: rate_per_second(work_1m, tau_1m, age) * HASHES_PER_SHARE,
            hashrate_10m: rate_per_second(work_10m, tau_10m, age) * HASHES_PER_SHARE,
            shares_per_second: rate_per_second(shares_1m, tau_1m, age),
            accepted: self.accepted.load(Relaxed),
            accepted_work: self.accepted_work.load(),
            rejected: events::ReasonCounts(std::array::from_fn(|i| self.rejected[i].load(Relaxed))),
            workers: self.workers_online.load(Relaxed),
            workers_listed: self.workers_listed.load(Relaxed),
            connections: self.connections.load(Relaxed),
            connections_opened: self.connections_opened.load(Relaxed),
            vardiff_changes: self.vardiff_changes.load(Relaxed),
            jobs: JobCounts {
                created: self.jobs_created.load(Relaxed),
                clean: self.jobs_clean.load(Relaxed),
            },
            blocks: BlockCounts {
                submitted: self.blocks_submitted.load(Relaxed),
                accepted: self.blocks_accepted.load(Relaxed),
                rejected: self.blocks_rejected.load(Relaxed),
                orphaned: self.blocks_orphaned.load(Relaxed),
                declared: self.blocks_handed_off.load(Relaxed),
            },
            node: self.node(),
            template_source: if self.uses_tp.load(Relaxed) {
                Dependency::Tp
            } else {
                Dependency::Node
            },
            node_failures: self.node_failures.load(Relaxed),
            templates_with_transactions: self.kept_transactions.get().map_or(0, |k| k.len() as u64),
            zmq: match self.zmq.load(Relaxed) {
                0 => None,
                code => Some(code == 1),
            },
            work_source: if self.working_from_backup.load(Relaxed) || !self.uses_tp.load(Relaxed) {
                Dependency::Node
            } else {
                Dependency::Tp
            },
            backup_node: self.has_backup.load(Relaxed).then(|| {
                (
                    NodeStatus::unpack(self.backup_node.load(Relaxed)),
                    self.backup_failures.load(Relaxed),
                )
            }),
            serving: self.serving(),
            store: self.store_reported.load(Relaxed).then(|| StoreReport {
                commits: self.store_commits.load(Relaxed),
                records: self.store_records.load(Relaxed),
                queue_len: self.store_queue_len.load(Relaxed),
                batch_window_ms: self.store_batch_window_ms.load(Relaxed),
                last_commit_us: self.store_last_commit_us.load(Relaxed),
                failures: self.store_failures.load(Relaxed),
                failing_since: match self.store_failing_since.load(Relaxed) {
                    0 => None,
                    t => Some(Timestamp::from_millis(t - 1)),
                },
            }),
        }
    }

    // The worker registry keeps these two gauges.
    fn worker_online(&self) {
        self.workers_online.fetch_add(1, Relaxed);
    }

    fn worker_offline(&self) {
        let _ = self
            .workers_online
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
    }

    fn set_workers_listed(&self, n: usize) {
        self.workers_listed.store(n as u64, Relaxed);
    }
}

#[cfg(test)]
mod tests;
