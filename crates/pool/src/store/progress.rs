//! How far the store has got, shared by the handles and the writer thread: the tickets handed
//! out, the tickets committed, the queue's length, the writer's counters, and its fate.
//!
//! Tickets are handed out under one mutex, in the order the records enter the queue, so the
//! writer commits them in ticket order and "every ticket up to `committed` is stored" is one
//! number: asking whether a ticket is durable is an atomic load.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use super::{Durability, StoreError, StoreStats};

pub(super) struct Progress {
    pub durability: Durability,
    pub batch_window: Duration,
    pub queue_capacity: usize,
    /// The next ticket, and the blocks not yet committed (Off mode only); taken for every
    /// record put on the queue.
    issue: Mutex<Issue>,
    /// Every ticket up to this one is committed: synced to disk in Strict and Batched modes
    /// (and for blocks and block results in every mode), handed to the OS in Off mode.
    committed: AtomicU64,
    /// Every worker key up to this one is committed (worker names have keys, not tickets).
    workers_committed: AtomicI64,
    /// Off mode: the oldest block or block-result ticket not yet committed (`u64::MAX`: none).
    /// Tickets below it count as durable at once; tickets from it on wait for its commit, so
    /// "t is durable" still implies "every ticket before t is durable".
    fence: AtomicU64,
    /// Records on the queue, and places reserved on it by batches (incremented before a send
    /// or by a reservation, decremented when the writer takes a record or a batch gives a
    /// place back).
    pub queued: AtomicUsize,
    /// Set when the store stops taking records: closing, or the writer failed.
    closed: AtomicBool,
    /// Set by the writer thread as it exits.
    done: AtomicBool,
    /// Set while the writer's last attempt to write failed and it is retrying: new shares are
    /// refused meanwhile, records already taken wait for the retry (see [`Progress::degrade`]).
    failing: AtomicBool,
    /// Why, and since when (the wall clock for reports, the monotonic one for waits), while
    /// `failing` is set.
    trouble: Mutex<Option<(Arc<str>, SystemTime, Instant)>>,
    /// The writer gave up (it could not write what it held when the store was closed).
    failure: OnceLock<Arc<str>>,
    /// Wakes `wait_durable` callers after each commit, and when the writer exits.
    wake: tokio::sync::watch::Sender<u64>,
    counters: Counters,
}

pub(super) struct Issue {
    pub next: u64,
    /// Block and block-result tickets not yet committed, oldest first (Off mode only).
    pending_forced: VecDeque<u64>,
}

#[derive(Default)]
pub(super) struct Counters {
    pub shares_written: AtomicU64,
    pub blocks_written: AtomicU64,
    pub block_results_written: AtomicU64,
    pub commits: AtomicU64,
    pub commit_ns_total: AtomicU64,
    pub commit_ns_last: AtomicU64,
    pub commit_ns_max: AtomicU64,
    pub queue_full: AtomicU64,
    /// Times the writer went from writing to failing.
    pub failures: AtomicU64,
}

impl Progress {
    /// `last_ticket`: the highest ticket already in the file (0 for a new file).
    pub(crate) fn new(
        durability: Durability,
        batch_window: Duration,
        queue_capacity: usize,
        last_ticket: u64,
    ) -> Progress {
        Progress {
            durability,
            batch_window,
            queue_capacity,
            issue: Mutex::new(Issue {
                next: last_ticket + 1,
                pending_forced: VecDeque::new(),
            }),
            committed: AtomicU64::new(last_ticket),
            workers_committed: AtomicI64::new(0),
            fence: AtomicU64::new(u64::MAX),
            queued: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            done: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            trouble: Mutex::new(None),
            failure: OnceLock::new(),
            wake: tokio::sync::watch::Sender::new(last_ticket),
            counters: Counters::default(),
        }
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The issuing lock. Poisoning cannot leave it inconsistent (it guards plain numbers).
    pub(crate) fn issue(&self) -> MutexGuard<'_, Issue> {
        self.issue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records that `ticket`, a block or block result, has just been queued. Called with the
    /// issuing lock held, so no share ticket is handed out between the two.
    pub(crate) fn note_forced(&self, issue: &mut Issue, ticket: u64) {
        if self.durability != Durability::Off {
            return; // there, every ticket waits for its commit anyway
        }
        if issue.pending_forced.is_empty() {
            self.fence.store(ticket, Ordering::Release);
        }
        issue.pending_forced.push_back(ticket);
    }

    /// Undoes [`Progress::note_forced`] for a ticket that could not be queued after all.
    pub(crate) fn unnote_forced(&self, issue: &mut Issue, ticket: u64) {
        if self.durability != Durability::Off {
            return;
        }
        if issue.pending_forced.back() == Some(&ticket) {
            issue.pending_forced.pop_back();
        }
        let oldest = issue.pending_forced.front().copied().unwrap_or(u64::MAX);
        self.fence.store(oldest, Ordering::Release);
    }

    /// Off mode: a block or block result is queued and not yet committed, so tickets handed out
    /// now wait for it.
    #[inline]
    pub(crate) fn block_pending(&self) -> bool {
        self.fence.load(Ordering::Acquire) != u64::MAX
    }

    #[inline]
    pub(crate) fn is_durable(&self, ticket: u64) -> bool {
        ticket <= self.committed.load(Ordering::Acquire)
            || (self.durability == Durability::Off && ticket < self.fence.load(Ordering::Acquire))
    }

    /// The writer has committed every ticket up to `ticket`.
    pub(crate) fn publish(&self, ticket: u64) {
        self.committed.store(ticket, Ordering::Release);
        if self.fence.load(Ordering::Acquire) <= ticket {
            let mut issue = self.issue();
            while issue.pending_forced.front().is_some_and(|&t| t <= ticket) {
                issue.pending_forced.pop_front();
            }
            let next = issue.pending_forced.front().copied().unwrap_or(u64::MAX);
            self.fence.store(next, Ordering::Release);
        }
        self.wake.send_replace(ticket);
    }

    /// The writer has committed every worker key up to `key` (at open: the file's last).
    pub(crate) fn set_workers_committed(&self, key: i64) {
        self.workers_committed.fetch_max(key, Ordering::Release);
    }

    pub(crate) fn workers_committed(&self) -> i64 {
        self.workers_committed.load(Ordering::Acquire)
    }

    pub(crate) fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.wake.subscribe()
    }

    /// Stops taking records. Call with the issuing lock held, so that no record is queued after
    /// the writer's last one.
    pub(crate) fn close(&self, _issue: &mut Issue) {
        self.closed.store(true, Ordering::Release);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The writer could not write (`reason`) and retries: new shares are refused until it
    /// writes again. The first call of a spell counts a failure and sets its start; later ones
    /// only update the reason. Wakes waiters, who may be watching for it.
    pub(crate) fn degrade(&self, reason: Arc<str>) {
        let mut trouble = self.trouble.lock().unwrap_or_else(|e| e.into_inner());
        let (since, began) = match trouble.take() {
            Some((_, since, began)) => (since, began),
            None => {
                self.counters.failures.fetch_add(1, Ordering::Relaxed);
                (SystemTime::now(), Instant::now())
            }
        };
        *trouble = Some((reason, since, began));
        self.failing.store(true, Ordering::Release);
        drop(trouble);
        self.wake.send_replace(self.committed());
    }

    /// The writer wrote again after [`Progress::degrade`].
    pub(crate) fn recovered(&self) {
        let mut trouble = self.trouble.lock().unwrap_or_else(|e| e.into_inner());
        *trouble = None;
        self.failing.store(false, Ordering::Release);
    }

    #[inline]
    pub(crate) fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    /// While failing: for how long.
    pub(crate) fn failing_for(&self) -> Option<Duration> {
        if !self.is_failing() {
            return None;
        }
        let trouble = self.trouble.lock().unwrap_or_else(|e| e.into_inner());
        trouble.as_ref().map(|(_, _, began)| began.elapsed())
    }

    /// While failing: why, and since when.
    pub(crate) fn trouble(&self) -> Option<(Arc<str>, SystemTime)> {
        self.trouble
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(reason, since, _)| (reason.clone(), *since))
    }

    /// The writer met `reason` and stops: records are refused from now on.
    pub(crate) fn fail(&self, reason: Arc<str>) {
        let _ = self.failure.set(reason);
        self.closed.store(true, Ordering::Release);
        // No longer retrying: refusals say the writer stopped.
        self.failing.store(false, Ordering::Release);
    }

    pub(crate) fn failure(&self) -> Option<&Arc<str>> {
        self.failure.get()
    }

    /// The writer thread has exited (after its last commit, or its failure).
    pub(crate) fn finish(&self) {
        self.done.store(true, Ordering::Release);
        let committed = self.committed();
        self.wake.send_replace(committed);
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Why a record is refused once the store is closed.
    pub(crate) fn refusal(&self) -> StoreError {
        match self.failure() {
            Some(reason) => StoreError::WriterFailed(reason.clone()),
            None => StoreError::Closed,
        }
    }

    /// Why a new share is refused while the writer is failing.
    #[cold]
    pub(crate) fn failing_refusal(&self) -> StoreError {
        let reason = self
            .trouble()
            .map(|(r, _)| r)
            .unwrap_or_else(|| "the writer is retrying".into());
        StoreError::Failing(reason)
    }

    pub(crate) fn note_commit(&self, took: Duration, shares: u64, blocks: u64, block_results: u64) {
        let c = &self.counters;
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        c.shares_written.fetch_add(shares, Ordering::Relaxed);
        c.blocks_written.fetch_add(blocks, Ordering::Relaxed);
        c.block_results_written
            .fetch_add(block_results, Ordering::Relaxed);
        c.commit_ns_total.fetch_add(ns, Ordering::Relaxed);
        c.commit_ns_last.store(ns, Ordering::Relaxed);
        c.commit_ns_max.fetch_max(ns, Ordering::Relaxed);
        c.commits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> StoreStats {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let commits = load(&c.commits);
        let shares = load(&c.shares_written);
        let blocks = load(&c.blocks_written);
        let block_results = load(&c.block_results_written);
        StoreStats {
            durability: self.durability,
            batch_window: self.batch_window,
            records_written: shares + blocks + block_results,
            shares_written: shares,
            blocks_written: blocks,
            block_results_written: block_results,
            commits,
            last_commit: Duration::from_nanos(load(&c.commit_ns_last)),
            avg_commit: Duration::from_nanos(load(&c.commit_ns_total) / commits.max(1)),
            max_commit: Duration::from_nanos(load(&c.commit_ns_max)),
            queue_len: self.queued.load(Ordering::Relaxed),
            queue_capacity: self.queue_capacity,
            queue_full: load(&c.queue_full),
            failures: load(&c.failures),
            failing: self.trouble(),
            committed_ticket: self.committed(),
            issued_ticket: self.issue().next - 1,
        }
    }
}
