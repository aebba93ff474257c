//! The pool's durable store of accepted shares and found blocks: one SQLite file in WAL mode,
//! written by one thread, fed by a bounded queue that the share hot path fills without
//! allocating or touching the disk.
//!
//! Every record put on the queue gets a [`Ticket`], a sequence number. The writer commits
//! records in ticket order and publishes the highest committed ticket, so "is this share
//! durable?" is one atomic load ([`Store::is_durable`]), and a connection handler that must not
//! acknowledge a share before it is stored awaits [`Store::wait_durable`].
//!
//! [`Durability`] chooses what "durable" means:
//! - `strict`: each share is its own transaction, synced to disk before its ticket completes;
//! - `batched` (the default): shares are grouped for up to [`StoreConfig::batch_window`] and
//!   committed in one synced transaction (group commit); a ticket completes with its group;
//! - `off`: tickets complete at once and the writer commits in the background without syncing,
//!   at most every `batch_window` or 100 ms, whichever is longer (lab runs): a crash of the
//!   machine, or of the process before a commit, loses shares.
//!
//! Whatever the mode, a block ([`Store::record_block`]) and the node's answer to it
//! ([`Store::record_block_result`]) are committed and synced before their tickets complete, and
//! immediately rather than at the end of a window: a block is persisted before it is submitted.
//! In `off` mode, tickets handed out after a block wait for that block's commit too, so a
//! completed ticket always means every earlier ticket is complete.
//!
//! Front ends record a connection's shares through a [`ShareBatch`], which puts them on the
//! queue a batch at a time with the same guarantees (see [`batch`]).
//!
//! A file is written by one store at a time; any number of [`StoreReader`]s may read it
//! meanwhile.

pub mod batch;
mod bell;
mod error;
mod progress;
mod reader;
mod schema;
mod workers;
mod writer;

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

pub use batch::ShareBatch;
pub use error::StoreError;
pub use reader::{StoreReader, StoredBlock, StoredShare};

use bell::Bell;
use progress::Progress;
use workers::WorkerNames;
use writer::{Command, PackPool, Writer};

/// The version of the file's schema this build writes (SQLite's `user_version`).
pub const SCHEMA_VERSION: i64 = schema::VERSION;

/// Queue slots kept for blocks, block results and worker names beyond the shares' capacity, so
/// that a queue full of shares never refuses a block.
const CONTROL_RESERVE: usize = 1024;

/// How long a connection's acknowledgements wait for a store that cannot write before they are
/// answered as unconfirmed errors (see [`Store::wait_durable_within`]): long enough for a brief
/// fault (a database locked for a moment) to pass within the writer's retries, short enough
/// that the connection's new work, which waits behind them, is not held up for long.
pub const ACK_WAIT_LIMIT: Duration = Duration::from_secs(5);

/// Worker names kept in memory unless configured otherwise: a few megabytes.
pub const DEFAULT_WORKER_CACHE: usize = 100_000;

/// The longest batch window accepted.
const MAX_BATCH_WINDOW: Duration = Duration::from_secs(10);

/// When a share counts as stored: see the module's documentation.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Each share its own synced transaction; its ticket completes when it is on disk.
    Strict,
    /// Shares grouped for up to the batch window and committed in one synced transaction.
    #[default]
    Batched,
    /// Tickets complete at once; commits are unsynced (a crash loses shares).
    Off,
}

impl Durability {
    /// The mode's name in configuration and metrics: `strict`, `batched` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Strict => "strict",
            Durability::Batched => "batched",
            Durability::Off => "off",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A durability name that is not `strict`, `batched` or `off` (the string given).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown durability {0:?}: expected strict, batched or off")]
pub struct ParseDurabilityError(pub String);

impl FromStr for Durability {
    type Err = ParseDurabilityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "strict" => Ok(Durability::Strict),
            "batched" => Ok(Durability::Batched),
            "off" => Ok(Durability::Off),
            other => Err(ParseDurabilityError(other.to_owned())),
        }
    }
}

/// How the share store is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// The SQLite file, created if missing (its directory must exist).
    pub path: PathBuf,
    /// When a share counts as stored.
    pub durability: Durability,
    /// Batched and off modes: how long the writer gathers records after the first one of a
    /// batch before committing them together, and while records keep coming, the time between
    /// its commits (in off mode at least 100 ms: nothing waits for those commits). Default
    /// 10 ms; 0 commits whatever is queued as soon as the writer gets to it.
    pub batch_window: Duration,
    /// Shares the queue holds before [`Store::record_share`] answers
    /// [`StoreError::QueueFull`]. Default 65536.
    pub queue_capacity: usize,
    /// Worker names kept in memory (at least 2; default [`DEFAULT_WORKER_CACHE`]). Past it,
    /// the names least recently used leave memory, never the file, and are read back from the
    /// file when they come again (see `store/workers.rs`).
    pub worker_cache: usize,
}

impl StoreConfig {
    /// The defaults (batched, 10 ms, 65536) for the file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            path: path.into(),
            durability: Durability::default(),
            batch_window: Duration::from_millis(10),
            queue_capacity: 65536,
            worker_cache: DEFAULT_WORKER_CACHE,
        }
    }
}

/// A worker's key in the store, from [`Store::worker`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkerKey(pub i64);

/// A record's place in the store's sequence. A ticket completes (becomes durable) after every
/// smaller one; tickets go on increasing across runs on the same file (in off mode, tickets of
/// records a crash lost may be handed out again).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub u64);

impl Ticket {
    /// A ticket that never completes: for records accepted but refused by the store after that
    /// (it closed, or its writer failed), whose acknowledgements must never be sent.
    /// [`Store::wait_durable`] answers it with the store's failure once the store has stopped.
    pub const NEVER: Ticket = Ticket(u64::MAX);
}

/// An accepted share: fixed size, copied onto the queue as it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShareRecord {
    /// The worker that submitted it.
    pub worker: WorkerKey,
    /// The difficulty credited.
    pub difficulty: f64,
    /// The engine's job id.
    pub job_id: u64,
    /// Unix milliseconds.
    pub time_ms: u64,
    /// The share's block-header hash, internal byte order.
    pub hash: [u8; 32],
}

impl ShareRecord {
    /// Fills the unused places of a pack of records on the queue.
    const EMPTY: ShareRecord = ShareRecord {
        worker: WorkerKey(0),
        difficulty: 0.0,
        job_id: 0,
        time_ms: 0,
        hash: [0; 32],
    };
}

/// A share that met the network target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRecord {
    /// The block hash, internal byte order.
    pub hash: [u8; 32],
    /// The block height.
    pub height: u32,
    /// The worker that found it.
    pub worker: WorkerKey,
    /// The engine's job id.
    pub job_id: u64,
    /// Unix milliseconds.
    pub time_ms: u64,
    /// The serialized block, as submitted.
    pub block: Vec<u8>,
}

/// A job declaration token that set a job: its id and expiry (together they name it; ids alone
/// restart with their JDS), and when it was used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsedToken {
    /// The token's id, as its JDS issued it.
    pub id: u64,
    /// Unix milliseconds.
    pub expires_ms: u64,
    /// Unix milliseconds.
    pub time_ms: u64,
}

/// The store's figures, read in O(1) for metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreStats {
    /// The durability mode.
    pub durability: Durability,
    /// The configured batch window.
    pub batch_window: Duration,
    /// Shares, blocks and block results committed by this store (since it opened).
    pub records_written: u64,
    /// Shares committed.
    pub shares_written: u64,
    /// Blocks committed.
    pub blocks_written: u64,
    /// Node answers to block submissions committed.
    pub block_results_written: u64,
    /// Transactions committed.
    pub commits: u64,
    /// How long the last, the average and the longest COMMIT took (the sync, in synced modes).
    pub last_commit: Duration,
    /// Average COMMIT time.
    pub avg_commit: Duration,
    /// Longest COMMIT time.
    pub max_commit: Duration,
    /// Records waiting on the queue (and places on it that connections' batches reserved for
    /// their next records), and how many shares it holds at most.
    pub queue_len: usize,
    /// Shares the queue holds at most.
    pub queue_capacity: usize,
    /// Shares refused with [`StoreError::QueueFull`].
    pub queue_full: u64,
    /// Times the writer went from writing to failing (see [`StoreError::Failing`]).
    pub failures: u64,
    /// While the writer is failing: its last error, and when the spell began.
    pub failing: Option<(Arc<str>, std::time::SystemTime)>,
    /// Every ticket up to this one is committed.
    pub committed_ticket: u64,
    /// The last ticket handed out: everything queued so far is committed once
    /// `committed_ticket` reaches it.
    pub issued_ticket: u64,
}

/// A handle on the store; clones share the writer. The writer stops when [`Store::close`] is
/// called or the last handle is dropped, after committing everything queued.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    progress: Arc<Progress>,
    tx: SyncSender<Command>,
    packs: Arc<PackPool>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Wakes the writer for a block, a block result or the shutdown.
    bell: Arc<Bell>,
    workers: Mutex<WorkerNames>,
    /// Keys below this one were handed out by [`Store::worker`] (checked on the hot path).
    next_worker: AtomicI64,
    path: PathBuf,
    awaiting_answer: Vec<BlockRecord>,
    answered: Vec<String>,
    used_tokens: Vec<UsedToken>,
    worker_totals: Mutex<Vec<(Box<str>, u64, f64)>>,
}

impl Store {
    /// Opens or creates the file, brings its schema up to date, and starts the writer thread.
    pub fn open(config: StoreConfig) -> Result<Store, StoreError> {
        if config.queue_capacity == 0 {
            return Err(StoreError::Config("queue_capacity must be at least 1"));
        }
        if config.worker_cache < 2 {
            return Err(StoreError::Config("worker_cache must be at least 2"));
        }
        if config.batch_window > MAX_BATCH_WINDOW {
            return Err(StoreError::Config("batch_window must be at most 10s"));
        }
        let path = config.path;
        let conn = schema::open_for_writing(&path, config.durability)?;
        // Tokens that expired before now can never be accepted again anyway.
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let resume = reader::resume(&conn, &path, now_ms, config.worker_cache)?;
        let progress = Arc::new(Progress::new(
            config.durability,
            config.batch_window,
            config.queue_capacity,
            resume.last_ticket,
        ));
        let (tx, rx) = sync_channel(config.queue_capacity + CONTROL_RESERVE);
        let packs = Arc::new(PackPool::new(config.queue_capacity));
        let bell = Arc::new(Bell::default());
        let writer = Writer::new(
            conn,
            rx,
            progress.clone(),
            packs.clone(),
            bell.clone(),
            path.clone(),
        );
        let handle = thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer.run())
            .map_err(StoreError::Spawn)?;
        let next_worker = resume.last_worker + 1;
        progress.set_workers_committed(resume.last_worker);
        let partial = resume.worker_count > resume.workers.len() as u64;
        let names_reader = schema::open_for_reading(&path)?;
        tracing::info!(
            path = %path.display(),
            durability = %config.durability,
            batch_window_ms = config.batch_window.as_secs_f64() * 1e3,
            queue_capacity = config.queue_capacity,
            last_ticket = resume.last_ticket,
            workers = resume.worker_count,
            workers_in_memory = resume.workers.len(),
            blocks_awaiting_answer = resume.awaiting_answer.len(),
            used_tokens = resume.used_tokens.len(),
            "share store open"
        );
        Ok(Store {
            inner: Arc::new(Inner {
                progress,
                tx,
                packs,
                bell,
                writer: Mutex::new(Some(handle)),
                workers: Mutex::new(WorkerNames::new(
                    resume.workers,
                    partial,
                    config.worker_cache,
                    next_worker,
                    names_reader,
                    &path,
                )),
                next_worker: AtomicI64::new(next_worker),
                path,
                awaiting_answer: resume.awaiting_answer,
                answered: resume.answered,
                used_tokens: resume.used_tokens,
                worker_totals: Mutex::new(resume.worker_totals),
            }),
        })
    }

    /// The key of worker `name`, interning it on first sight (also across runs: the same name
    /// always gets the same key in one file). Called at authorization; waits only if the queue
    /// is full, and reads the file only for a name not in memory when memory does not hold
    /// them all (see [`StoreConfig::worker_cache`]).
    pub fn worker(&self, name: &str) -> Result<WorkerKey, StoreError> {
        let mut workers = lock(&self.inner.workers);
        let committed = self.inner.progress.workers_committed();
        if let Some(key) = workers.find(name, committed)? {
            return Ok(WorkerKey(key));
        }
        let key = workers.next_key();
        // Queued before the key is returned, so it precedes every share that names the key.
        self.inner.enqueue_waiting(
            Command::Worker {
                key,
                name: name.into(),
            },
            false,
        )?;
        workers.insert(name, key, committed);
        self.inner.next_worker.store(key + 1, Ordering::Release);
        Ok(WorkerKey(key))
    }

    /// Queues an accepted share. The hot path: no allocation, no disk, no waiting beyond a
    /// short lock shared with other senders. A full queue answers [`StoreError::QueueFull`]
    /// and records nothing.
    #[inline]
    pub fn record_share(&self, rec: ShareRecord) -> Result<Ticket, StoreError> {
        let inner = &*self.inner;
        let key = rec.worker.0;
        if key <= 0 || key >= inner.next_worker.load(Ordering::Acquire) {
            return Err(StoreError::UnknownWorker(key));
        }
        if inner.progress.is_failing() {
            return Err(inner.progress.failing_refusal());
        }
        let share = Command::Share { ticket: 0, rec };
        match inner.try_enqueue(share, inner.progress.queue_capacity, false) {
            Ok(ticket) => Ok(Ticket(ticket)),
            Err((Refused::Full, _)) => Err(inner.queue_full()),
            Err((Refused::Closed, _)) => Err(inner.progress.refusal()),
        }
    }

    /// Whether the record of `ticket` is durable (see [`Durability`]): an atomic load. In off
    /// mode, true at once unless a block queued before it is not yet committed.
    #[inline]
    pub fn is_durable(&self, ticket: Ticket) -> bool {
        self.inner.progress.is_durable(ticket.0)
    }

    /// Waits until `ticket` is durable; returns at once if it is. While the writer is failing
    /// it goes on waiting (the record is written when a retry succeeds). Fails if the writer
    /// gave up (the store was closed while it could not write) or the store was closed before
    /// storing it: then it never will be.
    pub fn wait_durable(
        &self,
        ticket: Ticket,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + '_ {
        self.wait(ticket, u64::MAX)
    }

    /// As [`Store::wait_durable`], but gives up (answering [`StoreError::Failing`]) once the
    /// writer has been failing for longer than `limit`: a connection whose acknowledgements
    /// wait on a store that cannot write answers them as errors rather than hang for as long
    /// as the fault lasts. No timer: the writer wakes waiters at each of its retries.
    pub fn wait_durable_within(
        &self,
        ticket: Ticket,
        limit: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + '_ {
        // A plain function returning the inner future: no wrapper state in the caller's task.
        self.wait(
            ticket,
            limit.as_millis().min(u128::from(u64::MAX - 1)) as u64,
        )
    }

    /// As [`Store::wait_durable`], but answers [`StoreError::Failing`] as soon as the writer is
    /// failing: for a found block, which is submitted without waiting for the store (the
    /// writer keeps its record and writes it when it can).
    pub fn wait_durable_unless_failing(
        &self,
        ticket: Ticket,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + '_ {
        self.wait(ticket, 0)
    }

    /// `failing_limit_ms`: give up once the writer has been failing this long (`u64::MAX`:
    /// never); in milliseconds, which keeps a connection task's state small.
    async fn wait(&self, ticket: Ticket, failing_limit_ms: u64) -> Result<(), StoreError> {
        let progress = &self.inner.progress;
        if progress.is_durable(ticket.0) {
            return Ok(());
        }
        let mut wake = progress.subscribe();
        loop {
            if progress.is_durable(ticket.0) {
                return Ok(());
            }
            if failing_limit_ms != u64::MAX
                && progress
                    .failing_for()
                    .is_some_and(|d| d.as_millis() >= u128::from(failing_limit_ms))
            {
                return Err(progress.failing_refusal());
            }
            if let Some(reason) = progress.failure() {
                return Err(StoreError::WriterFailed(reason.clone()));
            }
            if progress.is_done() {
                return Err(StoreError::Closed);
            }
            if wake.changed().await.is_err() {
                return Err(progress.refusal());
            }
        }
    }

    /// Queues a found block. Whatever the durability, its ticket completes only once the block
    /// is committed and synced, which the writer does at once: await it before submitting.
    /// Waits (briefly) only if the queue is full even of its reserve.
    pub fn record_block(&self, rec: BlockRecord) -> Result<Ticket, StoreError> {
        let key = rec.worker.0;
        if key <= 0 || key >= self.inner.next_worker.load(Ordering::Acquire) {
            return Err(StoreError::UnknownWorker(key));
        }
        let block = Command::Block {
            ticket: 0,
            rec: Box::new(rec),
        };
        self.inner.enqueue_waiting(block, true).map(Ticket)
    }

    /// Queues the node's answer to a submission of block `hash`: `"accepted"` or its reject
    /// reason. Durable before its ticket completes, like the block. Every answer is kept; the
    /// last one is the block's result.
    pub fn record_block_result(
        &self,
        hash: [u8; 32],
        result: &str,
        time_ms: u64,
    ) -> Result<Ticket, StoreError> {
        let answer = Command::BlockResult {
            ticket: 0,
            hash,
            result: result.into(),
            time_ms,
        };
        self.inner.enqueue_waiting(answer, true).map(Ticket)
    }

    /// Blocks that an earlier run persisted but never recorded the node's answer for, as found
    /// when the file was opened: submit them again.
    pub fn blocks_awaiting_answer(&self) -> &[BlockRecord] {
        &self.inner.awaiting_answer
    }

    /// Records a token's use. Committed and synced at once, whatever the durability, like a
    /// block: the job it set is acknowledged once its ticket completes, so that no restart
    /// accepts the token again.
    pub fn record_token(&self, token: UsedToken) -> Result<Ticket, StoreError> {
        self.inner
            .enqueue_waiting(Command::Token { ticket: 0, token }, true)
            .map(Ticket)
    }

    /// Each worker's accepted shares and their difficulties' sum as the file held them at open
    /// (name, shares, work); handed out once (later calls get nothing), since they are only
    /// needed to start a run's statistics from.
    pub fn take_worker_totals(&self) -> Vec<(Box<str>, u64, f64)> {
        std::mem::take(&mut *lock(&self.inner.worker_totals))
    }

    /// The tokens earlier runs recorded that had not expired when the file was opened.
    pub fn used_tokens(&self) -> &[UsedToken] {
        &self.inner.used_tokens
    }

    /// The recorded result of every block an earlier run found and had answered for (its
    /// latest, when it has several), as the file held them at open.
    pub fn blocks_answered(&self) -> &[String] {
        &self.inner.answered
    }

    /// The store's figures, for metrics.
    pub fn stats(&self) -> StoreStats {
        self.inner.progress.stats()
    }

    /// Worker names held in memory (at most about [`StoreConfig::worker_cache`]; names whose
    /// keys are not committed yet may add to it).
    pub fn worker_names_in_memory(&self) -> usize {
        lock(&self.inner.workers).len()
    }

    /// Whether the writer is failing (retrying a write that failed): new shares are refused.
    #[inline]
    pub fn is_failing(&self) -> bool {
        self.inner.progress.is_failing()
    }

    /// The durability mode it was opened with.
    pub fn durability(&self) -> Durability {
        self.inner.progress.durability
    }

    /// The SQLite file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Stops taking records, commits everything queued, and joins the writer thread (for every
    /// handle: the others get [`StoreError::Closed`] from then on). Fails if the writer had
    /// stopped on an error.
    pub fn close(self) -> Result<StoreStats, StoreError> {
        self.inner.shutdown()?;
        Ok(self.inner.progress.stats())
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .field("durability", &self.inner.progress.durability)
            .field("committed_ticket", &self.inner.progress.committed())
            .finish()
    }
}

/// Why a message was not queued.
enum Refused {
    Full,
    /// Closed, or the writer stopped: [`Progress::refusal`] says which.
    Closed,
}

impl Inner {
    /// Counts a share refused because the queue is full: the refusal.
    #[cold]
    fn queue_full(&self) -> StoreError {
        self.progress
            .counters()
            .queue_full
            .fetch_add(1, Ordering::Relaxed);
        StoreError::QueueFull
    }

    /// Reserves `n` places for shares: refused if the queue would then hold more than its
    /// capacity of shares.
    #[inline]
    fn reserve(&self, n: usize) -> bool {
        let queued = &self.progress.queued;
        if queued.fetch_add(n, Ordering::AcqRel) + n <= self.progress.queue_capacity {
            return true;
        }
        queued.fetch_sub(n, Ordering::AcqRel);
        false
    }

    /// Gives back places reserved and not used.
    #[inline]
    fn release(&self, n: usize) {
        self.progress.queued.fetch_sub(n, Ordering::AcqRel);
    }

    /// Puts shares whose places are reserved on the queue, with consecutive tickets: in one
    /// message, or one by one while every pack is on the queue already. Returns how many went
    /// on (all, unless the queue has fewer places than were reserved, which the reservations
    /// rule out: then the rest keep their places for the next try) and the last one's ticket.
    /// If the store stopped, the places of those that did not go on are given back.
    fn enqueue_shares(&self, records: &[ShareRecord]) -> Result<(usize, u64), StoreError> {
        let n = records.len();
        debug_assert!((1..=batch::BATCH).contains(&n));
        let mut pack = self.packs.take();
        if let Some(p) = &mut pack {
            p.len = n;
            p.recs[..n].copy_from_slice(records);
        }
        let progress = &*self.progress;
        let mut issue = progress.issue();
        let first = issue.next;
        let mut sent = 0;
        let mut pack_back = None;
        let mut gone = progress.is_closed();
        if !gone {
            match pack.take() {
                Some(pack) => match self.tx.try_send(Command::Shares { first, pack }) {
                    Ok(()) => sent = n,
                    Err(e) => {
                        gone = matches!(e, TrySendError::Disconnected(_));
                        let (TrySendError::Full(cmd) | TrySendError::Disconnected(cmd)) = e;
                        if let Command::Shares { pack, .. } = cmd {
                            pack_back = Some(pack);
                        }
                    }
                },
                None => {
                    for rec in records {
                        let ticket = first + sent as u64;
                        match self.tx.try_send(Command::Share { ticket, rec: *rec }) {
                            Ok(()) => sent += 1,
                            Err(e) => {
                                gone = matches!(e, TrySendError::Disconnected(_));
                                break;
                            }
                        }
                    }
                }
            }
        }
        issue.next += sent as u64;
        drop(issue);
        if let Some(p) = pack.or(pack_back) {
            self.packs.give_back(p);
        }
        if gone {
            // Whatever went on before the writer was found gone is lost with it.
            self.release(n - sent);
            return Err(progress.refusal());
        }
        match sent {
            0 => Err(StoreError::QueueFull),
            _ => Ok((sent, first + sent as u64 - 1)),
        }
    }

    /// Puts `cmd` on the queue, giving it the next ticket if it is a record; refuses it if the
    /// queue already holds `limit` messages. `forced`: a block or block result.
    fn try_enqueue(
        &self,
        mut cmd: Command,
        limit: usize,
        forced: bool,
    ) -> Result<u64, (Refused, Command)> {
        let progress = &*self.progress;
        let mut issue = progress.issue();
        if progress.is_closed() {
            return Err((Refused::Closed, cmd));
        }
        if progress.queued.fetch_add(1, Ordering::AcqRel) >= limit {
            progress.queued.fetch_sub(1, Ordering::AcqRel);
            return Err((Refused::Full, cmd));
        }
        let ticket = issue.next;
        let ticketed = cmd.has_ticket();
        cmd.set_ticket(ticket);
        if forced {
            progress.note_forced(&mut issue, ticket);
        }
        match self.tx.try_send(cmd) {
            Ok(()) => {
                if ticketed {
                    issue.next += 1;
                }
                Ok(ticket)
            }
            Err(e) => {
                progress.queued.fetch_sub(1, Ordering::AcqRel);
                if forced {
                    progress.unnote_forced(&mut issue, ticket);
                }
                Err(match e {
                    TrySendError::Full(cmd) => (Refused::Full, cmd),
                    TrySendError::Disconnected(cmd) => (Refused::Closed, cmd),
                })
            }
        }
    }

    /// For the rare messages: uses the queue's reserve, and waits for room if even that is
    /// full. Wakes the writer for a block, which it commits at once.
    fn enqueue_waiting(&self, mut cmd: Command, forced: bool) -> Result<u64, StoreError> {
        let limit = self.progress.queue_capacity + CONTROL_RESERVE;
        loop {
            match self.try_enqueue(cmd, limit, forced) {
                Ok(ticket) => {
                    if forced {
                        self.bell.ring();
                    }
                    return Ok(ticket);
                }
                Err((Refused::Full, back)) => {
                    cmd = back;
                    thread::sleep(Duration::from_millis(1));
                }
                Err((Refused::Closed, _)) => return Err(self.progress.refusal()),
            }
        }
    }

    /// Closes the queue after what is on it, lets the writer commit it all, and joins it.
    fn shutdown(&self) -> Result<(), StoreError> {
        let Some(handle) = lock(&self.writer).take() else {
            // Already shut down by another handle.
            return match self.progress.failure() {
                Some(reason) => Err(StoreError::WriterFailed(reason.clone())),
                None => Ok(()),
            };
        };
        {
            let mut issue = self.progress.issue();
            self.progress.close(&mut issue);
            // Counted like any message: the writer counts every one it takes.
            self.progress.queued.fetch_add(1, Ordering::AcqRel);
        }
        // Nothing is queued after this (records are refused once closed). If the writer already
        // stopped on an error, the send fails and there is nothing to wait for.
        if self.tx.send(Command::Shutdown).is_err() {
            self.progress.queued.fetch_sub(1, Ordering::AcqRel);
        }
        self.bell.ring();
        if handle.join().is_err() {
            self.progress.fail("the writer thread panicked".into());
            self.progress.finish();
        }
        match self.progress.failure() {
            Some(reason) => Err(StoreError::WriterFailed(reason.clone())),
            None => Ok(()),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let running = lock(&self.writer).is_some();
        if !running {
            return; // closed already, which reported its outcome
        }
        if let Err(e) = self.shutdown() {
            tracing::error!(path = %self.path.display(), error = %e, "share store closed with an error");
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A distinct share record for the store's tests: `i` is in the first bytes of its hash.
#[cfg(test)]
pub(crate) fn test_share(worker: WorkerKey, i: u64) -> ShareRecord {
    let mut hash = [0u8; 32];
    hash[..8].copy_from_slice(&i.to_le_bytes());
    ShareRecord {
        worker,
        difficulty: 1.0,
        job_id: 7,
        time_ms: 1_760_000_000_000 + i,
        hash,
    }
}
