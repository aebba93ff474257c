//! The writer thread: the one owner of the SQLite connection. It takes records off the queue in
//! ticket order, inserts them, commits, and publishes the highest committed ticket.
//!
//! How records are grouped into transactions:
//! - Strict: every record is its own transaction, synced (`synchronous=FULL`) before its ticket
//!   is published.
//! - Batched: the first record taken after an idle spell opens a batch; the writer sleeps until
//!   `batch_window` has passed since then, takes what is queued at that moment, and commits it
//!   all in one synced transaction. While records keep coming it stays on that beat: after each
//!   commit it sleeps one more window and takes what arrived meanwhile, and only a window that
//!   brought nothing sends it back to waiting on the queue. So a record waits at most about one
//!   window plus one commit, as with a window opened per batch, and the writer is woken by its
//!   own timer once per window rather than by senders: queuing a record costs a connection no
//!   wake-up system call, and the writer no wake-up per record. A batch also closes at
//!   [`MAX_BATCH`] records (the next one is then taken without sleeping), and a block or block
//!   result wakes the writer ([`super::Store::record_block`] rings its [`Bell`]), which commits it
//!   at once.
//! - Off: batched like Batched, but commits are not synced (`synchronous=OFF`), except the ones
//!   holding a block or block result, which switch to FULL for that commit; and the beat is at
//!   least [`OFF_BEAT`], whatever the window: nothing waits for these commits (blocks and block
//!   results are committed at once), they only bound what a crash of the process loses, and a
//!   connection's [`super::ShareBatch`] holds its records back longer than that anyway (until
//!   its next share a window later, or its next tick). So a slow trickle of shares costs one
//!   commit per beat, not one per window.
//!
//! A SQLite error (a full disk, an I/O error, a database locked by another process) does not
//! stop the writer. It rolls the open transaction back, keeps every record that transaction
//! held (they are kept as they are taken, until their commit), and retries with backoff (from
//! [`RETRY_FIRST`] doubling to [`RETRY_MAX`]), taking what arrives on the queue meanwhile into
//! the same retry. While it fails the store refuses new shares ([`super::StoreError::Failing`]),
//! so the records it holds are only those taken before and the blocks, block results and
//! worker names that keep coming; nothing after the last published ticket is reported
//! durable until a retry commits it. Only at shutdown does it give up, after a few quick tries.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection};

use super::batch::BATCH;
use super::bell::Bell;
use super::error::{WriteContext, WriteError};
use super::progress::Progress;
use super::schema::{self, Synchronous};
use super::{BlockRecord, Durability, ShareRecord, UsedToken};

/// The most records one transaction holds; a burst larger than this is committed in pieces.
pub(super) const MAX_BATCH: u64 = 8192;

/// Durability off: the shortest time between the writer's commits (see the module's
/// documentation).
pub(super) const OFF_BEAT: Duration = Duration::from_millis(100);

/// The first wait before a failed write is retried; it doubles up to [`RETRY_MAX`].
pub(super) const RETRY_FIRST: Duration = Duration::from_millis(100);
pub(super) const RETRY_MAX: Duration = Duration::from_secs(2);

/// Tries to write what is held once the store is closing and the writer is failing.
const TRIES_AT_SHUTDOWN: u32 = 3;

/// What travels on the queue. A share is stored inline (no allocation per share), a batch of
/// them in a [`SharePack`] that goes back to the [`PackPool`] once written; the rare messages
/// carry their variable-sized parts boxed, which keeps every slot small.
pub(super) enum Command {
    Share {
        ticket: u64,
        rec: ShareRecord,
    },
    /// Consecutive tickets from `first`.
    Shares {
        first: u64,
        pack: Box<SharePack>,
    },
    Worker {
        key: i64,
        name: Box<str>,
    },
    Block {
        ticket: u64,
        rec: Box<BlockRecord>,
    },
    BlockResult {
        ticket: u64,
        hash: [u8; 32],
        result: Box<str>,
        time_ms: u64,
    },
    /// A job declaration token that set a job: never to be accepted again.
    Token {
        ticket: u64,
        token: UsedToken,
    },
    /// Commit what is open and exit. Nothing is queued after it.
    Shutdown,
}

impl Command {
    /// Sets the ticket of a record about to be queued (under the issuing lock).
    pub(super) fn set_ticket(&mut self, t: u64) {
        match self {
            Command::Share { ticket, .. }
            | Command::Shares { first: ticket, .. }
            | Command::Block { ticket, .. }
            | Command::BlockResult { ticket, .. }
            | Command::Token { ticket, .. } => *ticket = t,
            Command::Worker { .. } | Command::Shutdown => {}
        }
    }

    pub(super) fn has_ticket(&self) -> bool {
        matches!(
            self,
            Command::Share { .. }
                | Command::Shares { .. }
                | Command::Block { .. }
                | Command::BlockResult { .. }
                | Command::Token { .. }
        )
    }

    /// Records this message counts for on the queue.
    pub(super) fn records(&self) -> usize {
        match self {
            Command::Shares { pack, .. } => pack.len,
            _ => 1,
        }
    }
}

/// Up to [`BATCH`] share records going to the writer in one message (see [`super::batch`]).
pub(super) struct SharePack {
    pub len: usize,
    pub recs: [ShareRecord; BATCH],
}

/// The packs of a store, allocated when it opens (so the share path never allocates one):
/// batches take one to fill, the writer gives it back once written. While all are on the
/// queue (a backlog of thousands of shares), batches send their records one by one.
pub(super) struct PackPool {
    /// Boxed: a pack moves between the pool and the queue as a pointer, not 1 KiB of records.
    #[allow(clippy::vec_box)]
    free: Mutex<Vec<Box<SharePack>>>,
}

/// Packs per store: up to 256 KiB of them, or what the queue holds.
const MAX_PACKS: usize = 256;

impl PackPool {
    pub(crate) fn new(queue_capacity: usize) -> PackPool {
        let n = (queue_capacity / BATCH).clamp(1, MAX_PACKS);
        let packs = (0..n)
            .map(|_| {
                Box::new(SharePack {
                    len: 0,
                    recs: [ShareRecord::EMPTY; BATCH],
                })
            })
            .collect();
        PackPool {
            free: Mutex::new(packs),
        }
    }

    /// A pack to fill, unless all are on the queue.
    pub(crate) fn take(&self) -> Option<Box<SharePack>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    pub(crate) fn give_back(&self, pack: Box<SharePack>) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(pack);
    }
}

const INSERT_SHARE: &str =
    "INSERT INTO share (seq, worker, difficulty, job_id, time_ms, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const INSERT_WORKER: &str = "INSERT OR IGNORE INTO worker (id, name) VALUES (?1, ?2)";
// A block recorded twice (the same hash) keeps its first row.
const INSERT_BLOCK: &str =
    "INSERT OR IGNORE INTO block (seq, hash, height, worker, job_id, time_ms, block) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
const INSERT_BLOCK_RESULT: &str =
    "INSERT INTO block_result (seq, hash, result, time_ms) VALUES (?1, ?2, ?3, ?4)";
// A token recorded twice (two connections racing with one token) is one use already kept.
const INSERT_TOKEN: &str = "INSERT OR IGNORE INTO used_token (seq, id, expires_ms, time_ms) \
     VALUES (?1, ?2, ?3, ?4)";

#[derive(Clone, Copy, PartialEq, Eq)]
enum After {
    /// Keep gathering.
    Continue,
    /// Commit now (a block or block result is waiting on it).
    CommitNow,
    /// Commit and exit.
    Stop,
}

/// A record in the open transaction, kept until it commits so that a transaction that failed
/// can be written again.
enum Taken {
    Share(u64, ShareRecord),
    Worker(i64, Box<str>),
    Block(u64, Box<BlockRecord>),
    BlockResult {
        ticket: u64,
        hash: [u8; 32],
        result: Box<str>,
        time_ms: u64,
    },
    Token(u64, UsedToken),
}

impl Taken {
    fn ticket(&self) -> Option<u64> {
        match self {
            Taken::Share(t, _)
            | Taken::Block(t, _)
            | Taken::BlockResult { ticket: t, .. }
            | Taken::Token(t, _) => Some(*t),
            Taken::Worker(..) => None,
        }
    }

    /// Writes the record in the open transaction.
    fn insert(&self, conn: &Connection) -> Result<(), WriteError> {
        match self {
            Taken::Share(ticket, rec) => {
                let (worker, hash) = (rec.worker.0, &rec.hash[..]);
                let (job, time) = (rec.job_id as i64, rec.time_ms as i64);
                let row = params![*ticket as i64, worker, rec.difficulty, job, time, hash];
                execute(conn, INSERT_SHARE, row, "inserting a share")
            }
            Taken::Worker(key, name) => execute(
                conn,
                INSERT_WORKER,
                params![key, &**name],
                "inserting a worker",
            ),
            Taken::Block(ticket, rec) => {
                let (hash, worker, block) = (&rec.hash[..], rec.worker.0, &rec.block[..]);
                let (job, time) = (rec.job_id as i64, rec.time_ms as i64);
                let row = params![*ticket as i64, hash, rec.height, worker, job, time, block];
                execute(conn, INSERT_BLOCK, row, "inserting a block")
            }
            Taken::Token(ticket, token) => {
                let (id, expires) = (token.id as i64, token.expires_ms as i64);
                let row = params![*ticket as i64, id, expires, token.time_ms as i64];
                execute(conn, INSERT_TOKEN, row, "inserting a used token")
            }
            Taken::BlockResult {
                ticket,
                hash,
                result,
                time_ms,
            } => {
                let row = params![*ticket as i64, &hash[..], &**result, *time_ms as i64];
                execute(conn, INSERT_BLOCK_RESULT, row, "inserting a block result")
            }
        }
    }
}

/// Runs the cached statement `sql` on `row`; `what` names it in the error.
fn execute(
    conn: &Connection,
    sql: &str,
    row: impl rusqlite::Params,
    what: &'static str,
) -> Result<(), WriteError> {
    conn.prepare_cached(sql)
        .and_then(|mut st| st.execute(row))
        .map(drop)
        .during(what)
}

/// The open transaction.
#[derive(Default)]
struct Batch {
    open: bool,
    /// Its records, in ticket order (workers among them).
    taken: Vec<Taken>,
}

pub(super) struct Writer {
    conn: Connection,
    rx: Receiver<Command>,
    progress: Arc<Progress>,
    packs: Arc<PackPool>,
    bell: Arc<Bell>,
    path: PathBuf,
    batch: Batch,
    /// A block or block result was committed on its own since the writer's last commit of a
    /// window: the window was not empty, so the writer stays on its beat.
    took_since_commit: bool,
    /// A shutdown was taken off the queue.
    stopping: bool,
    /// The file's device and inode at open: a commit checks the path still leads to it.
    identity: Option<(u64, u64)>,
}

/// The device and inode at `path`, `None` if nothing is there.
fn file_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// How a spell of failed writes ended.
enum Recovery {
    /// Written again: go on serving.
    Resumed,
    /// Written again, and the store is closing.
    Stopped,
}

impl Writer {
    pub(super) fn new(
        conn: Connection,
        rx: Receiver<Command>,
        progress: Arc<Progress>,
        packs: Arc<PackPool>,
        bell: Arc<Bell>,
        path: PathBuf,
    ) -> Writer {
        let identity = file_identity(&path);
        Writer {
            conn,
            rx,
            progress,
            packs,
            bell,
            path,
            batch: Batch::default(),
            took_since_commit: false,
            stopping: false,
            identity,
        }
    }

    /// The thread's body.
    pub(super) fn run(mut self) {
        let path = self.path.display().to_string();
        tracing::debug!(path, durability = %self.progress.durability, "share store writer started");
        let outcome = loop {
            let error = match self.serve() {
                Ok(()) => break Ok(()),
                Err(e) => e,
            };
            match self.recover(error) {
                Ok(Recovery::Resumed) => continue,
                Ok(Recovery::Stopped) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        match outcome {
            Ok(()) => {
                let stats = self.progress.stats();
                tracing::info!(
                    path,
                    shares = stats.shares_written,
                    blocks = stats.blocks_written,
                    commits = stats.commits,
                    "share store closed"
                );
            }
            Err(e) => {
                self.rollback();
                let committed = self.progress.committed();
                tracing::error!(
                    path,
                    error = %e,
                    committed_ticket = committed,
                    records_lost = self.batch.taken.len(),
                    "share store writer gave up at shutdown: records after the committed ticket are not stored"
                );
                let reason: Arc<str> = format!("{}: {e}", self.path.display()).into();
                self.progress.fail(reason);
            }
        }
        self.progress.finish();
    }

    /// A write failed: rolls back, says so, and retries with backoff (taking what arrives on
    /// the queue into the retry) until a retry commits everything held. Gives up only when
    /// the store is closing and [`TRIES_AT_SHUTDOWN`] tries failed.
    fn recover(&mut self, first: WriteError) -> Result<Recovery, WriteError> {
        let path = self.path.display().to_string();
        let mut error = first;
        let mut delay = RETRY_FIRST;
        let mut tries_at_shutdown = 0;
        let mut attempts = 0u64;
        loop {
            self.rollback();
            let reason: Arc<str> = format!("{path}: {error}").into();
            if attempts == 0 {
                tracing::error!(
                    path,
                    error = %error,
                    held = self.batch.taken.len(),
                    "share store cannot write: refusing new shares, retrying"
                );
            } else {
                tracing::warn!(path, error = %error, attempts, held = self.batch.taken.len(), "share store still cannot write");
            }
            self.progress.degrade(reason);
            if !self.stopping {
                let deadline = Instant::now() + delay;
                // A block or the shutdown rings the bell: retry for it at once.
                while Instant::now() < deadline && !self.bell.wait_until(deadline) {}
            }
            self.hold_queued();
            attempts += 1;
            match self.rewrite() {
                Ok(()) => {
                    tracing::info!(path, attempts, "share store writes again");
                    return Ok(if self.stopping {
                        Recovery::Stopped
                    } else {
                        Recovery::Resumed
                    });
                }
                Err(e) => {
                    error = e;
                    if self.stopping {
                        tries_at_shutdown += 1;
                        if tries_at_shutdown >= TRIES_AT_SHUTDOWN {
                            return Err(error);
                        }
                        std::thread::sleep(RETRY_FIRST);
                    }
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Rolls the open transaction back (its records stay held). A rollback that fails leaves
    /// the transaction open as far as SQLite says, so the next try rolls back again rather
    /// than fail at its `BEGIN` for good.
    fn rollback(&mut self) {
        if self.batch.open || !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
            self.batch.open = !self.conn.is_autocommit();
        }
    }

    /// While failing: takes everything on the queue into the records held, without writing.
    fn hold_queued(&mut self) {
        loop {
            let cmd = match self.rx.try_recv() {
                Ok(cmd) => cmd,
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.stopping = true;
                    return;
                }
            };
            self.took(&cmd);
            match cmd {
                Command::Shutdown => self.stopping = true,
                cmd => self.hold(cmd),
            }
        }
    }

    /// Keeps a record in the open transaction's list without writing it.
    fn hold(&mut self, cmd: Command) {
        let taken = &mut self.batch.taken;
        match cmd {
            Command::Share { ticket, rec } => taken.push(Taken::Share(ticket, rec)),
            Command::Shares { first, pack } => {
                taken.extend(
                    (first..)
                        .zip(&pack.recs[..pack.len])
                        .map(|(t, rec)| Taken::Share(t, *rec)),
                );
                self.packs.give_back(pack);
            }
            Command::Worker { key, name } => taken.push(Taken::Worker(key, name)),
            Command::Block { ticket, rec } => taken.push(Taken::Block(ticket, rec)),
            Command::BlockResult {
                ticket,
                hash,
                result,
                time_ms,
            } => taken.push(Taken::BlockResult {
                ticket,
                hash,
                result,
                time_ms,
            }),
            Command::Token { ticket, token } => taken.push(Taken::Token(ticket, token)),
            Command::Shutdown => self.stopping = true,
        }
    }

    /// Writes every record held in one synced transaction.
    fn rewrite(&mut self) -> Result<(), WriteError> {
        let off = self.progress.durability.synchronous() == Synchronous::Off;
        if off {
            schema::set_synchronous(&self.conn, Synchronous::Full)
                .during("syncing a retried commit")?;
        }
        self.begin()?;
        for t in &self.batch.taken {
            t.insert(&self.conn)?;
        }
        self.commit()?;
        if off {
            schema::set_synchronous(&self.conn, Synchronous::Off)
                .during("returning to unsynced commits")?;
        }
        Ok(())
    }

    fn serve(&mut self) -> Result<(), WriteError> {
        let strict = self.progress.durability == Durability::Strict;
        let window = match self.progress.durability {
            Durability::Off => self.progress.batch_window.max(OFF_BEAT),
            Durability::Strict | Durability::Batched => self.progress.batch_window,
        };
        loop {
            // Idle: sleep until a record arrives (or every handle is gone).
            let Ok(first) = self.rx.recv() else {
                return self.commit();
            };
            self.took(&first);
            let mut after = self.apply(first)?;
            if strict {
                self.commit()?;
                if after == After::Stop {
                    return Ok(());
                }
                continue;
            }
            // Busy: one commit per window for as long as windows bring records.
            let mut deadline = Instant::now() + window;
            loop {
                if after != After::Stop {
                    after = self.gather_until(deadline)?;
                }
                let full = self.batch.records() >= MAX_BATCH;
                let took_any = self.batch.open || self.took_since_commit;
                self.commit()?;
                if after == After::Stop {
                    return Ok(());
                }
                if !took_any {
                    break;
                }
                self.took_since_commit = false;
                // A full batch leaves records queued: take them at once.
                deadline = if full {
                    Instant::now()
                } else {
                    Instant::now() + window
                };
            }
        }
    }

    /// Sleeps until `deadline`, then takes what is queued (see [`Writer::take_queued`]). A
    /// wake-up before it (a block or block result, or shutdown, rings the bell) takes what is
    /// queued at once, so that a block is committed without waiting for the window; shares
    /// taken with it are committed with it, the rest of the window's with the window. Returns
    /// [`After::Stop`] if a shutdown was taken, [`After::Continue`] otherwise.
    fn gather_until(&mut self, deadline: Instant) -> Result<After, WriteError> {
        loop {
            let now = Instant::now();
            if now >= deadline || self.batch.records() >= MAX_BATCH {
                return match self.take_queued()? {
                    After::Stop => Ok(After::Stop),
                    _ => Ok(After::Continue),
                };
            }
            if !self.bell.wait_until(deadline) {
                continue;
            }
            // Rung before the deadline: a block, a block result or the shutdown is queued.
            while self.batch.records() < MAX_BATCH {
                match self.rx.try_recv() {
                    Ok(cmd) => {
                        self.took(&cmd);
                        match self.apply(cmd)? {
                            After::Stop => return Ok(After::Stop),
                            // Committed already; the window goes on for what follows.
                            After::CommitNow => self.took_since_commit = true,
                            After::Continue => {}
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Ok(After::Stop),
                }
            }
        }
    }

    /// At the window's end: takes what is on the queue now (what arrived within the window),
    /// up to the batch limit.
    fn take_queued(&mut self) -> Result<After, WriteError> {
        let waiting = self.progress.queued.load(Ordering::Acquire) as u64;
        let room = MAX_BATCH.saturating_sub(self.batch.records());
        for _ in 0..waiting.min(room) {
            let cmd = match self.rx.try_recv() {
                Ok(cmd) => cmd,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Ok(After::Stop),
            };
            self.took(&cmd);
            match self.apply(cmd)? {
                After::Stop => return Ok(After::Stop),
                After::CommitNow => self.took_since_commit = true,
                After::Continue => {}
            }
        }
        Ok(After::Continue)
    }

    fn took(&self, cmd: &Command) {
        self.progress
            .queued
            .fetch_sub(cmd.records(), Ordering::AcqRel);
    }

    fn apply(&mut self, cmd: Command) -> Result<After, WriteError> {
        match cmd {
            Command::Block { .. } | Command::BlockResult { .. } | Command::Token { .. } => {
                self.forced(cmd)
            }
            Command::Shutdown => {
                self.stopping = true;
                Ok(After::Stop)
            }
            cmd => {
                let from = self.batch.taken.len();
                self.hold(cmd);
                self.write_from(from)?;
                Ok(After::Continue)
            }
        }
    }

    /// Writes the records held from index `from` on in the open transaction (opening it).
    fn write_from(&mut self, from: usize) -> Result<(), WriteError> {
        self.begin()?;
        for t in &self.batch.taken[from..] {
            t.insert(&self.conn)?;
        }
        Ok(())
    }

    /// A block or block result: committed and synced now, whatever the durability.
    fn forced(&mut self, cmd: Command) -> Result<After, WriteError> {
        let off = self.progress.durability.synchronous() == Synchronous::Off;
        if off {
            // The level cannot change inside a transaction: commit the shares gathered so far
            // unsynced, then sync the block's own transaction (which syncs the log before it).
            // Held first, so that a failure of that commit keeps the block for the retry.
            self.hold(cmd);
            let block = self.batch.taken.pop().expect("just held");
            let committed = self.commit();
            let from = self.batch.taken.len();
            self.batch.taken.push(block);
            committed?;
            schema::set_synchronous(&self.conn, Synchronous::Full)
                .during("syncing a block's commit")?;
            self.write_from(from)?;
        } else {
            let from = self.batch.taken.len();
            self.hold(cmd);
            self.write_from(from)?;
        }
        self.commit()?;
        if off {
            schema::set_synchronous(&self.conn, Synchronous::Off)
                .during("returning to unsynced commits")?;
        }
        Ok(After::CommitNow)
    }

    fn begin(&mut self) -> Result<(), WriteError> {
        if !self.batch.open {
            self.conn
                .prepare_cached("BEGIN")
                .and_then(|mut st| st.execute([]))
                .during("beginning a transaction")?;
            self.batch.open = true;
        }
        Ok(())
    }

    /// Commits the open transaction (if any) and publishes its last ticket.
    fn commit(&mut self) -> Result<(), WriteError> {
        if !self.batch.open {
            return Ok(());
        }
        let started = Instant::now();
        // One stat per commit: a file removed under the pool fails the commit (the records
        // stay held, the store says why) instead of vanishing with the unlinked inode.
        if self.identity.is_some() && file_identity(&self.path) != self.identity {
            return Err(WriteError::FileGone);
        }
        self.conn
            .prepare_cached("COMMIT")
            .and_then(|mut st| st.execute([]))
            .during("committing")?;
        let took = started.elapsed();
        self.batch.open = false;
        let (mut shares, mut blocks, mut block_results) = (0, 0, 0);
        let mut last_ticket = None;
        let mut last_worker = None;
        for t in &self.batch.taken {
            match t {
                Taken::Share(..) => shares += 1,
                Taken::Block(..) => blocks += 1,
                Taken::BlockResult { .. } => block_results += 1,
                Taken::Token(..) => {}
                Taken::Worker(key, _) => last_worker = Some(*key),
            }
            last_ticket = t.ticket().or(last_ticket);
        }
        let records = self.batch.taken.len();
        // The list keeps its capacity for the next transaction.
        self.batch.taken.clear();
        self.progress
            .note_commit(took, shares, blocks, block_results);
        if self.progress.is_failing() {
            // Before the tickets complete: whoever sees them durable sees the store writing.
            self.progress.recovered();
        }
        if let Some(key) = last_worker {
            // Keys are taken in order: the last is the highest.
            self.progress.set_workers_committed(key);
        }
        if let Some(ticket) = last_ticket {
            self.progress.publish(ticket);
        }
        tracing::trace!(
            records,
            took_us = took.as_micros() as u64,
            last_ticket,
            "share store commit"
        );
        Ok(())
    }
}

impl Batch {
    fn records(&self) -> u64 {
        self.taken.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::store::{Durability, ShareBatch, Store, StoreConfig, StoreReader, Ticket};
    use crate::Timestamp;

    fn open(dir: &tempfile::TempDir, durability: Durability, window: Duration) -> Store {
        Store::open(StoreConfig {
            durability,
            batch_window: window,
            ..StoreConfig::new(dir.path().join("pool.db"))
        })
        .expect("store")
    }

    use crate::store::test_share as share;

    fn wait(store: &Store, t: Ticket, within: Duration) {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(async { tokio::time::timeout(within, store.wait_durable(t)).await })
            .expect("durable in time")
            .expect("durable");
    }

    /// Records that trickle in (a few per window, as from many slow miners) are committed a
    /// window's worth at a time: the writer keeps its own beat instead of opening a window per
    /// wake-up, and no record waits much beyond one window.
    #[test]
    fn a_trickle_is_committed_once_per_window() {
        let dir = tempfile::tempdir().unwrap();
        let window = Duration::from_millis(40);
        let store = open(&dir, Durability::Batched, window);
        let w = store.worker("w").unwrap();
        let warm = store.record_share(share(w, 0)).unwrap();
        wait(&store, warm, Duration::from_secs(10));
        let commits_before = store.stats().commits;
        let started = std::time::Instant::now();
        let mut tickets = Vec::new();
        for i in 1..=200 {
            tickets.push(store.record_share(share(w, i)).unwrap());
            std::thread::sleep(Duration::from_millis(2));
        }
        let last = *tickets.last().unwrap();
        wait(&store, last, window + Duration::from_secs(5));
        let elapsed = started.elapsed();
        let commits = store.stats().commits - commits_before;
        let windows = (elapsed.as_millis() / window.as_millis()) as u64 + 2;
        assert!(
            commits <= windows,
            "{commits} commits in {elapsed:?}: more than one per {window:?} window"
        );
        assert!(
            commits >= 2,
            "{commits} commit(s): the trickle was not committed as it came"
        );
        assert!(tickets.iter().all(|&t| store.is_durable(t)));
        let stats = store.close().unwrap();
        assert_eq!(stats.shares_written, 201);
    }

    /// With durability off nothing waits for the writer, which sleeps out its windows; records
    /// a connection took still reach the file when the connection ends and the store closes,
    /// without waiting for the window.
    #[test]
    fn with_durability_off_records_reach_the_file_by_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let window = Duration::from_secs(10);
        let store = open(&dir, Durability::Off, window);
        let w = store.worker("w").unwrap();
        let mut batch = ShareBatch::new(store.clone());
        // The first flush wakes the idle writer, which then sleeps a whole window.
        batch.push(share(w, 0), Timestamp::from_millis(0)).unwrap();
        batch.flush();
        for i in 1..40 {
            batch.push(share(w, i), Timestamp::from_millis(i)).unwrap();
            assert_eq!(batch.take_ticket(), None, "off mode: nothing waits");
        }
        let started = std::time::Instant::now();
        drop(batch);
        let stats = store.close().unwrap();
        assert!(
            started.elapsed() < window / 2,
            "closing waited out the window"
        );
        assert_eq!(stats.shares_written, 40);
        let reader = StoreReader::open(dir.path().join("pool.db")).unwrap();
        assert_eq!(reader.share_count().unwrap(), 40);
    }

    /// Strict durability is not on the beat: every record is its own synced commit, and its
    /// ticket completes only once that commit is in the file.
    #[test]
    fn strict_tickets_complete_only_with_their_commit() {
        let dir = tempfile::tempdir().unwrap();
        // A long window, which strict mode must ignore.
        let store = open(&dir, Durability::Strict, Duration::from_secs(10));
        let w = store.worker("w").unwrap();
        let commits_before = store.stats().commits;
        for i in 0..20 {
            let t = store.record_share(share(w, i)).unwrap();
            wait(&store, t, Duration::from_secs(5));
            let reader = StoreReader::open(dir.path().join("pool.db")).unwrap();
            assert_eq!(
                reader.share_count().unwrap(),
                i + 1,
                "durable but not in the file"
            );
        }
        assert!(store.stats().commits - commits_before >= 20);
        store.close().unwrap();
    }
}
