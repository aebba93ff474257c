//! One connection's accepted shares on their way to the store, so that the queue (its lock, its
//! channel and the counters the writer thread also touches) is dealt with once per batch
//! instead of once per share.
//!
//! A share takes its place on the queue when it is accepted ([`ShareBatch::push`]): places are
//! reserved a batch at a time, so a full queue still refuses the share then, before any reply.
//! The records themselves go on the queue in one message (a pack from a pool the store
//! allocates when it opens, which the writer gives back), in order and with consecutive
//! tickets, when the batch is flushed:
//! - when it holds [`BATCH`] records;
//! - when its oldest record is a batch window old as another arrives;
//! - at the connection's flush points: [`ShareBatch::take_ticket`], which the front end calls
//!   before it writes acknowledgements, new work, ticks, and the end of the connection.
//!
//! Tickets keep their meaning. With durability on (strict, batched), `take_ticket` flushes
//! everything and hands out the ticket of the last record, so an acknowledgement waits for the
//! commit that includes its record, as before. With durability off nothing waits, so records
//! wait for one of the other flush points (while a block's commit is pending, `take_ticket`
//! flushes and hands out a ticket, as tickets after a block wait for its commit in that mode).

use std::sync::atomic::Ordering;

use super::{Durability, ShareRecord, Store, StoreError, Ticket};
use crate::Timestamp;

/// Records a batch gathers before it goes on the queue: 1 KiB of records.
pub const BATCH: usize = 16;

/// A connection's share records not yet on the store's queue (see the module's documentation).
pub struct ShareBatch {
    store: Store,
    /// Allocated at the first share (a connection that never sends one keeps nothing).
    records: Vec<ShareRecord>,
    /// Places on the queue this batch reserved and has not filled yet.
    credit: usize,
    /// Records the last flush carried: how many places to reserve next (one at a time for a
    /// miner that sends one share per read and waits for its acknowledgement).
    last_flush: usize,
    /// When the oldest record arrived, on the caller's clock, and how old it may get.
    oldest: Timestamp,
    window_ms: u64,
    /// Durability off: acknowledgements wait for nothing.
    off: bool,
    /// The last record flushed whose ticket nobody took yet.
    ticket: Option<Ticket>,
    clock: StampClock,
}

impl ShareBatch {
    /// An empty batch recording into `store`.
    pub fn new(store: Store) -> ShareBatch {
        let window_ms = store.inner.progress.batch_window.as_millis() as u64;
        ShareBatch {
            window_ms,
            off: store.durability() == Durability::Off,
            store,
            records: Vec::new(),
            credit: 0,
            last_flush: 1,
            oldest: Timestamp::from_millis(0),
            ticket: None,
            clock: StampClock::default(),
        }
    }

    /// Records waiting to go on the queue.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record is waiting.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Wall-clock Unix milliseconds for a record taken now (see [`StampClock`]).
    #[inline]
    pub fn stamp(&mut self) -> u64 {
        self.clock.unix_ms()
    }

    /// Takes an accepted share's record; `now` is the caller's clock. Fails as
    /// [`Store::record_share`] does, and then takes nothing: the share must not be acknowledged.
    #[inline]
    pub fn push(&mut self, rec: ShareRecord, now: Timestamp) -> Result<(), StoreError> {
        let inner = &*self.store.inner;
        let key = rec.worker.0;
        if key <= 0 || key >= inner.next_worker.load(Ordering::Acquire) {
            return Err(StoreError::UnknownWorker(key));
        }
        if inner.progress.is_closed() {
            return Err(inner.progress.refusal());
        }
        if inner.progress.is_failing() {
            return Err(inner.progress.failing_refusal());
        }
        if self.credit == 0 {
            self.reserve()?;
        }
        if self.records.is_empty() {
            if self.records.capacity() == 0 {
                self.records.reserve_exact(BATCH);
            }
            self.oldest = now;
        }
        self.records.push(rec);
        self.credit -= 1;
        if self.records.len() >= BATCH || now.millis_since(self.oldest) >= self.window_ms {
            self.flush();
        }
        Ok(())
    }

    /// Reserves places on the queue: as many as the last flush carried (at least what this
    /// batch holds already, at most what it has room for), or one if the queue is nearly full.
    #[cold]
    fn reserve(&mut self) -> Result<(), StoreError> {
        let inner = &*self.store.inner;
        let want = self
            .last_flush
            .max(self.records.len())
            .clamp(1, BATCH - self.records.len().min(BATCH - 1));
        for n in [want, 1] {
            if inner.reserve(n) {
                self.credit = n;
                return Ok(());
            }
        }
        Err(inner.queue_full())
    }

    /// The flush point before acknowledgements are written: the ticket they must wait for, if
    /// any (see the module's documentation). `None`: acknowledge at once.
    pub fn take_ticket(&mut self) -> Option<Ticket> {
        if !self.off || self.store.inner.progress.block_pending() {
            self.flush();
        }
        let t = self.ticket.take()?;
        (!self.store.is_durable(t)).then_some(t)
    }

    /// Makes the next acknowledgements wait for `t` too (a record queued outside the batch, such
    /// as a used token, whose answer must not go out before it is stored). Tickets complete in
    /// order, so waiting for the later of the two covers both.
    pub fn wait_also(&mut self, t: Ticket) {
        self.ticket = Some(self.ticket.map_or(t, |mine| mine.max(t)));
    }

    /// Puts every record on the queue now, and gives back the places reserved for more.
    pub fn flush(&mut self) {
        let inner = &*self.store.inner;
        if !self.records.is_empty() {
            let n = self.records.len();
            match inner.enqueue_shares(&self.records) {
                Ok((sent, last)) => {
                    // All of them, unless the queue had fewer places than reserved, which the
                    // reservations rule out; the rest would go with the next flush.
                    self.records.drain(..sent);
                    self.ticket = Some(Ticket(last));
                    self.last_flush = sent;
                }
                Err(StoreError::QueueFull) => {}
                Err(e) => {
                    // The store stopped (closed, or its writer failed) after these shares were
                    // accepted: they will never be stored. With durability on their
                    // acknowledgements wait for a ticket that never completes, so they are
                    // never sent; with it off they may have been sent already, as for shares
                    // on the queue when a writer fails.
                    tracing::warn!(shares = n, error = %e, "store: accepted shares not recorded");
                    self.records.clear();
                    self.ticket = Some(Ticket::NEVER);
                }
            }
        }
        if self.credit > 0 && self.records.is_empty() {
            inner.release(self.credit);
            self.credit = 0;
        }
    }
}

impl Drop for ShareBatch {
    fn drop(&mut self) {
        self.flush();
    }
}

impl std::fmt::Debug for ShareBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareBatch")
            .field("records", &self.records.len())
            .field("credit", &self.credit)
            .field("ticket", &self.ticket)
            .finish()
    }
}

/// Time stamps for share records without a clock read per share: the clock is read again once
/// the CPU's time stamp counter has advanced 2^16 ticks since the last read (16 to 66 µs at 1 to
/// 4 GHz) or after 1024 stamps, and the records in between get that read. So a record's time is
/// the clock's to within a few hundredths of a millisecond: the same at the store's millisecond
/// resolution but for the odd millisecond boundary in between. (Kept per batch rather than per
/// thread: no thread-local look-up on the share path.)
#[derive(Clone, Copy, Debug)]
struct StampClock {
    /// The counter at the last clock read, the read, and the stamps given from it.
    at: u64,
    ms: u64,
    uses: u32,
}

const REUSE_TICKS: u64 = 1 << 16;
const MAX_USES: u32 = 1024;

impl Default for StampClock {
    fn default() -> Self {
        StampClock {
            at: 0,
            ms: 0,
            uses: MAX_USES,
        }
    }
}

impl StampClock {
    #[inline]
    fn unix_ms(&mut self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            // Unordered, unlike the clock's own read: it need not wait for the share's hashing.
            #[allow(unused_unsafe)]
            // SAFETY: RDTSC exists on every x86-64 CPU and only reads the counter.
            let tsc = unsafe { std::arch::x86_64::_rdtsc() };
            if tsc.wrapping_sub(self.at) < REUSE_TICKS && self.uses < MAX_USES {
                self.uses += 1;
            } else {
                *self = StampClock {
                    at: tsc,
                    ms: crate::engine::unix_ms(),
                    uses: 1,
                };
            }
            self.ms
        }
        #[cfg(not(target_arch = "x86_64"))]
        crate::engine::unix_ms()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::{StoreConfig, StoreReader, WorkerKey};

    fn open(dir: &tempfile::TempDir, durability: Durability, capacity: usize) -> Store {
        Store::open(StoreConfig {
            durability,
            batch_window: Duration::from_millis(10),
            queue_capacity: capacity,
            ..StoreConfig::new(dir.path().join("pool.db"))
        })
        .expect("store")
    }

    use crate::store::test_share as share;

    fn stored(dir: &tempfile::TempDir) -> Vec<u64> {
        let reader = StoreReader::open(dir.path().join("pool.db")).expect("reader");
        let mut got: Vec<u64> = reader
            .shares()
            .expect("shares")
            .iter()
            .map(|s| u64::from_le_bytes(s.hash[..8].try_into().unwrap()))
            .collect();
        got.sort_unstable();
        got
    }

    #[tokio::test]
    async fn with_durability_on_the_ticket_covers_every_record_taken() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, Durability::Batched, 1000);
        let w = store.worker("alice").unwrap();
        let mut batch = ShareBatch::new(store.clone());
        for i in 0..5 {
            batch.push(share(w, i), Timestamp::from_millis(0)).unwrap();
        }
        assert_eq!(
            store.stats().committed_ticket,
            0,
            "nothing on the queue yet"
        );
        let t = batch.take_ticket().expect("acknowledgements wait");
        assert!(batch.is_empty());
        store.wait_durable(t).await.unwrap();
        assert_eq!(store.stats().shares_written, 5, "its commit holds all five");
        assert_eq!(batch.take_ticket(), None, "nothing new to wait for");
        // Across a size flush: the last ticket, which completes after every earlier one.
        for i in 5..(5 + BATCH as u64 + 3) {
            batch.push(share(w, i), Timestamp::from_millis(1)).unwrap();
        }
        assert_eq!(batch.len(), 3, "a full batch went on the queue by itself");
        let t2 = batch.take_ticket().unwrap();
        assert!(t2 > t);
        store.wait_durable(t2).await.unwrap();
        drop(batch);
        store.close().unwrap();
        assert_eq!(stored(&dir), (0..5 + BATCH as u64 + 3).collect::<Vec<_>>());
    }

    #[test]
    fn with_durability_off_nothing_waits_and_records_go_at_the_flush_points() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, Durability::Off, 1000);
        let w = store.worker("bob").unwrap();
        let mut batch = ShareBatch::new(store.clone());
        batch
            .push(share(w, 0), Timestamp::from_millis(100))
            .unwrap();
        batch
            .push(share(w, 1), Timestamp::from_millis(105))
            .unwrap();
        assert_eq!(batch.take_ticket(), None);
        assert_eq!(batch.len(), 2, "kept for the next flush point");
        // A record a batch window younger than the oldest sends both.
        batch
            .push(share(w, 2), Timestamp::from_millis(110))
            .unwrap();
        assert!(batch.is_empty());
        // Fewer than a batch, then the connection's end.
        batch
            .push(share(w, 3), Timestamp::from_millis(111))
            .unwrap();
        drop(batch);
        store.close().unwrap();
        assert_eq!(stored(&dir), vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_full_queue_refuses_at_the_push_and_reservations_are_given_back() {
        let dir = tempfile::tempdir().unwrap();
        // The writer takes records off the queue at the end of each window (or at once when
        // idle): a short one, so that `drained` sees them go.
        let store = Store::open(StoreConfig {
            durability: Durability::Off,
            batch_window: Duration::from_millis(100),
            queue_capacity: 6,
            ..StoreConfig::new(dir.path().join("pool.db"))
        })
        .unwrap();
        let w = store.worker("carol").unwrap();
        let mut a = ShareBatch::new(store.clone());
        let mut b = ShareBatch::new(store.clone());
        // Waits for the writer to take records off the queue, down to `held` places.
        let drained = |store: &Store, held: usize| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while store.stats().queue_len > held && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            store.stats().queue_len
        };
        for i in 0..4 {
            a.push(share(w, i), Timestamp::from_millis(0)).unwrap();
        }
        a.flush();
        assert_eq!(drained(&store, 0), 0, "the writer took the records");
        // Its last flush carried 4: `a` now reserves four places at once.
        a.push(share(w, 4), Timestamp::from_millis(0)).unwrap();
        assert_eq!((a.len(), a.credit), (1, 3));
        // Six places: four held by `a`, and `b` gets the last two.
        b.push(share(w, 10), Timestamp::from_millis(0)).unwrap();
        b.push(share(w, 11), Timestamp::from_millis(0)).unwrap();
        assert!(matches!(
            b.push(share(w, 12), Timestamp::from_millis(0)),
            Err(StoreError::QueueFull)
        ));
        assert_eq!(store.stats().queue_full, 1);
        assert_eq!(b.len(), 2, "the refused record was not taken");
        // Flushing gives back what `a` reserved beyond its record.
        a.flush();
        assert_eq!(drained(&store, 2), 2, "only `b`'s places are held");
        b.push(share(w, 12), Timestamp::from_millis(0)).unwrap();
        drop((a, b));
        store.close().unwrap();
        assert_eq!(stored(&dir), vec![0, 1, 2, 3, 4, 10, 11, 12]);
    }

    #[tokio::test]
    async fn records_the_store_refuses_after_acceptance_are_never_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, Durability::Batched, 100);
        let w = store.worker("dave").unwrap();
        let mut batch = ShareBatch::new(store.clone());
        batch.push(share(w, 0), Timestamp::from_millis(0)).unwrap();
        store.clone().close().unwrap();
        // The store closed between the share's acceptance and the flush.
        let t = batch.take_ticket().expect("a ticket to wait for");
        assert_eq!(t, Ticket::NEVER);
        assert!(store.wait_durable(t).await.is_err());
        assert!(matches!(
            batch.push(share(w, 1), Timestamp::from_millis(0)),
            Err(StoreError::Closed)
        ));
    }

    #[test]
    fn with_every_pack_on_the_queue_records_go_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, Durability::Off, 1000);
        let w = store.worker("erin").unwrap();
        let held: Vec<_> = std::iter::from_fn(|| store.inner.packs.take()).collect();
        assert!(!held.is_empty());
        let mut batch = ShareBatch::new(store.clone());
        for i in 0..BATCH as u64 + 2 {
            batch.push(share(w, i), Timestamp::from_millis(0)).unwrap();
        }
        batch.flush();
        for p in held {
            store.inner.packs.give_back(p);
        }
        batch
            .push(share(w, 100), Timestamp::from_millis(0))
            .unwrap();
        drop(batch);
        store.close().unwrap();
        let mut want: Vec<u64> = (0..BATCH as u64 + 2).collect();
        want.push(100);
        assert_eq!(stored(&dir), want);
    }

    #[test]
    fn unknown_workers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir, Durability::Off, 100);
        let mut batch = ShareBatch::new(store.clone());
        assert!(matches!(
            batch.push(share(WorkerKey(42), 0), Timestamp::from_millis(0)),
            Err(StoreError::UnknownWorker(42))
        ));
        assert!(batch.is_empty());
    }

    #[test]
    fn stamps_follow_the_clock() {
        let mut clock = StampClock::default();
        let before = crate::engine::unix_ms();
        let stamps: Vec<u64> = (0..5000).map(|_| clock.unix_ms()).collect();
        let after = crate::engine::unix_ms();
        assert!(stamps.iter().all(|&t| before <= t && t <= after));
        assert!(stamps.windows(2).all(|w| w[0] <= w[1]));
    }
}
