//! The writer thread: the one owner of the SQLite connection. It takes records off the queue in
//! ticket order, inserts them, commits, and publishes the highest committed ticket.
//!
//! How records are grouped into transactions:
//! - Strict: every record is its own transaction, synced (`synchronous=FULL`) before its ticket
//!   is published.
//! - Batched: the first record taken opens a batch; the writer keeps inserting what arrives
//!   until `batch_window` has passed since then (it sleeps in slices of a quarter window while
//!   the queue is empty), takes what is queued at that moment, and commits it all in one synced
//!   transaction. A record therefore waits about one window plus one commit. A batch also closes
//!   at [`MAX_BATCH`] records, and at once when a block or block result arrives.
//! - Off: batched like Batched, but commits are not synced (`synchronous=OFF`), except the ones
//!   holding a block or block result, which switch to FULL for that commit.
//!
//! Any SQLite error stops the writer: the open transaction is rolled back, nothing after the
//! last published ticket is reported durable, and the store refuses records from then on.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rusqlite::{params, Connection};

use super::batch::BATCH;
use super::error::{WriteContext, WriteError};
use super::progress::Progress;
use super::schema::{self, Synchronous};
use super::{BlockRecord, Durability, ShareRecord};

/// The most records one transaction holds; a burst larger than this is committed in pieces.
pub(super) const MAX_BATCH: u64 = 8192;

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
            | Command::BlockResult { ticket, .. } => *ticket = t,
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
    pub fn new(queue_capacity: usize) -> PackPool {
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
    pub fn take(&self) -> Option<Box<SharePack>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    pub fn give_back(&self, pack: Box<SharePack>) {
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum After {
    /// Keep gathering.
    Continue,
    /// Commit now (a block or block result is waiting on it).
    CommitNow,
    /// Commit and exit.
    Stop,
}

/// The open transaction.
#[derive(Default)]
struct Batch {
    open: bool,
    records: u64,
    shares: u64,
    blocks: u64,
    block_results: u64,
    last_ticket: Option<u64>,
}

pub(super) struct Writer {
    conn: Connection,
    rx: Receiver<Command>,
    progress: Arc<Progress>,
    packs: Arc<PackPool>,
    path: PathBuf,
    batch: Batch,
}

impl Writer {
    pub(super) fn new(
        conn: Connection,
        rx: Receiver<Command>,
        progress: Arc<Progress>,
        packs: Arc<PackPool>,
        path: PathBuf,
    ) -> Writer {
        Writer {
            conn,
            rx,
            progress,
            packs,
            path,
            batch: Batch::default(),
        }
    }

    /// The thread's body.
    pub(super) fn run(mut self) {
        let path = self.path.display().to_string();
        tracing::debug!(path, durability = %self.progress.durability, "share store writer started");
        match self.serve() {
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
                if self.batch.open {
                    let _ = self.conn.execute_batch("ROLLBACK");
                }
                let committed = self.progress.committed();
                tracing::error!(
                    path,
                    error = %e,
                    committed_ticket = committed,
                    "share store writer stopped: records after the committed ticket are not stored"
                );
                let reason: Arc<str> = format!("{}: {e}", self.path.display()).into();
                self.progress.fail(reason);
            }
        }
        self.progress.finish();
    }

    fn serve(&mut self) -> Result<(), WriteError> {
        let strict = self.progress.durability == Durability::Strict;
        let window = self.progress.batch_window;
        let slice = (window / 4).max(Duration::from_micros(200));
        loop {
            // Idle: sleep until a record arrives (or every handle is gone).
            let Ok(first) = self.rx.recv() else {
                return self.commit();
            };
            self.took(&first);
            let deadline = Instant::now() + window;
            let mut after = self.apply(first)?;
            while after == After::Continue && !strict && self.batch.records < MAX_BATCH {
                let now = Instant::now();
                if now >= deadline {
                    after = self.take_queued()?;
                    break;
                }
                match self.rx.try_recv() {
                    Ok(cmd) => {
                        self.took(&cmd);
                        after = self.apply(cmd)?;
                    }
                    Err(TryRecvError::Empty) => thread::park_timeout((deadline - now).min(slice)),
                    Err(TryRecvError::Disconnected) => after = After::Stop,
                }
            }
            self.commit()?;
            if after == After::Stop {
                return Ok(());
            }
        }
    }

    /// At the window's end: takes what is on the queue now (what arrived within the window),
    /// up to the batch limit.
    fn take_queued(&mut self) -> Result<After, WriteError> {
        let waiting = self.progress.queued.load(Ordering::Acquire) as u64;
        let room = MAX_BATCH.saturating_sub(self.batch.records);
        for _ in 0..waiting.min(room) {
            let Ok(cmd) = self.rx.try_recv() else {
                break;
            };
            self.took(&cmd);
            let after = self.apply(cmd)?;
            if after != After::Continue {
                return Ok(after);
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
            Command::Share { ticket, rec } => {
                self.insert_share(ticket, &rec)?;
                Ok(After::Continue)
            }
            Command::Shares { first, pack } => {
                let written = (first..)
                    .zip(&pack.recs[..pack.len])
                    .try_for_each(|(ticket, rec)| self.insert_share(ticket, rec));
                self.packs.give_back(pack);
                written.map(|()| After::Continue)
            }
            Command::Worker { key, name } => {
                self.begin()?;
                self.conn
                    .prepare_cached(INSERT_WORKER)
                    .and_then(|mut st| st.execute(params![key, &*name]))
                    .during("inserting a worker")?;
                Ok(After::Continue)
            }
            Command::Block { ticket, rec } => self.forced(|conn| {
                conn.prepare_cached(INSERT_BLOCK)
                    .and_then(|mut st| {
                        st.execute(params![
                            ticket as i64,
                            &rec.hash[..],
                            rec.height,
                            rec.worker.0,
                            rec.job_id as i64,
                            rec.time_ms as i64,
                            &rec.block[..],
                        ])
                    })
                    .during("inserting a block")?;
                Ok((ticket, true))
            }),
            Command::BlockResult {
                ticket,
                hash,
                result,
                time_ms,
            } => self.forced(|conn| {
                conn.prepare_cached(INSERT_BLOCK_RESULT)
                    .and_then(|mut st| {
                        st.execute(params![ticket as i64, &hash[..], &*result, time_ms as i64])
                    })
                    .during("inserting a block result")?;
                Ok((ticket, false))
            }),
            Command::Shutdown => Ok(After::Stop),
        }
    }

    /// A block or block result: committed and synced now, whatever the durability. `insert`
    /// returns its ticket and whether it is a block.
    fn forced(
        &mut self,
        insert: impl FnOnce(&Connection) -> Result<(u64, bool), WriteError>,
    ) -> Result<After, WriteError> {
        let off = self.progress.durability.synchronous() == Synchronous::Off;
        if off {
            // The level cannot change inside a transaction: commit the shares gathered so far
            // unsynced, then sync the block's own transaction (which syncs the log before it).
            self.commit()?;
            schema::set_synchronous(&self.conn, Synchronous::Full)
                .during("syncing a block's commit")?;
        }
        self.begin()?;
        let (ticket, is_block) = insert(&self.conn)?;
        self.batch.note(ticket);
        if is_block {
            self.batch.blocks += 1;
        } else {
            self.batch.block_results += 1;
        }
        self.commit()?;
        if off {
            schema::set_synchronous(&self.conn, Synchronous::Off)
                .during("returning to unsynced commits")?;
        }
        Ok(After::CommitNow)
    }

    fn insert_share(&mut self, ticket: u64, rec: &ShareRecord) -> Result<(), WriteError> {
        self.begin()?;
        self.conn
            .prepare_cached(INSERT_SHARE)
            .and_then(|mut st| {
                st.execute(params![
                    ticket as i64,
                    rec.worker.0,
                    rec.difficulty,
                    rec.job_id as i64,
                    rec.time_ms as i64,
                    &rec.hash[..],
                ])
            })
            .during("inserting a share")?;
        self.batch.note(ticket);
        self.batch.shares += 1;
        Ok(())
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
        self.conn
            .prepare_cached("COMMIT")
            .and_then(|mut st| st.execute([]))
            .during("committing")?;
        let took = started.elapsed();
        let batch = std::mem::take(&mut self.batch);
        self.progress
            .note_commit(took, batch.shares, batch.blocks, batch.block_results);
        if let Some(ticket) = batch.last_ticket {
            self.progress.publish(ticket);
        }
        tracing::trace!(
            records = batch.records,
            took_us = took.as_micros() as u64,
            last_ticket = batch.last_ticket,
            "share store commit"
        );
        Ok(())
    }
}

impl Batch {
    fn note(&mut self, ticket: u64) {
        self.records += 1;
        self.last_ticket = Some(ticket);
    }
}
