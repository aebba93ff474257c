//! The worker list, kept incrementally: a worker joins at its first authorize, counts its
//! connections, and leaves a retention period after its last one closes.
//!
//! The list is a `BTreeMap` by name behind a `RwLock` that only `attach`, `detach` and paging
//! take, never the share path: a connection records its shares on its own `Arc<WorkerStats>`
//! (atomics). Nothing ever scans the connections, and a page costs O(log n + limit) from a
//! name cursor (`PageStart::After`) or O(offset + limit) from an offset (an in-order walk of
//! the tree, a few nanoseconds per worker skipped).
//!
//! # Retention
//!
//! A worker whose last connection closed stays listed, with its counts and its decaying hash
//! rate, for the registry's retention period ([`DEFAULT_WORKER_RETENTION_MS`], ten minutes,
//! the longer average's time constant), so a miner that reconnects keeps its history and a
//! dashboard sees it drop rather than vanish. Retention 0 drops it at once. Departures are
//! queued in order of their due time and applied by the next `attach`, `detach` or
//! [`WorkerRegistry::expire`] (the HTTP layer calls it before each page): O(1) each, amortized.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, PoisonError, RwLock};

use super::decay::{rate_per_second, AtomicF64, Decay, DecayedRates};
use super::{PoolStats, HASHES_PER_SHARE, TAU_10M_MS, TAU_1M_MS};
use crate::Timestamp;

/// How long a worker with no connections stays listed, by default.
pub const DEFAULT_WORKER_RETENTION_MS: u64 = 600_000;

/// One worker's figures. Shared as `Arc` between the registry and the worker's connections.
pub struct WorkerStats {
    name: Arc<str>,
    /// The pool's start: the decayed sums' tick base.
    base: Timestamp,
    first_seen: Timestamp,
    connections: AtomicU32,
    accepted: AtomicU64,
    rejected: AtomicU64,
    accepted_work: AtomicF64,
    /// Milliseconds + 1 of the last share (any verdict); 0 = none yet.
    last_share: AtomicU64,
    /// Accepted work, decayed over one and ten minutes.
    work_rates: DecayedRates<2>,
    /// When the last connection closed (meaningful while `connections` is 0).
    detached_at: AtomicU64,
}

impl std::fmt::Debug for WorkerStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerStats")
            .field("name", &self.name)
            .field("connections", &self.connections())
            .field("accepted", &self.accepted())
            .field("rejected", &self.rejected())
            .finish_non_exhaustive()
    }
}

/// A worker's figures at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerView {
    /// The worker name (`account.worker`).
    pub name: Arc<str>,
    /// Open connections authorized as it.
    pub connections: u32,
    /// Accepted shares.
    pub accepted: u64,
    /// Sum of accepted shares' difficulties (difficulty-1 units).
    pub accepted_work: f64,
    /// Rejected shares.
    pub rejected: u64,
    /// The last share, of any verdict.
    pub last_share: Option<Timestamp>,
    /// When the worker joined the list.
    pub first_seen: Timestamp,
    /// Hashes per second, one-minute average.
    pub hashrate_1m: f64,
    /// Hashes per second, ten-minute average.
    pub hashrate_10m: f64,
}

impl WorkerStats {
    fn new(name: Arc<str>, base: Timestamp, now: Timestamp) -> WorkerStats {
        WorkerStats {
            name,
            base,
            first_seen: now,
            connections: AtomicU32::new(0),
            accepted: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            accepted_work: AtomicF64::zero(),
            last_share: AtomicU64::new(0),
            work_rates: DecayedRates::new(),
            detached_at: AtomicU64::new(0),
        }
    }

    /// The worker name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Open connections authorized as it.
    pub fn connections(&self) -> u32 {
        self.connections.load(Relaxed)
    }

    /// Accepted shares.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Relaxed)
    }

    /// Rejected shares.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Relaxed)
    }

    /// Sum of accepted shares' difficulties (difficulty-1 units).
    pub fn accepted_work(&self) -> f64 {
        self.accepted_work.load()
    }

    /// When its last share (any verdict) arrived; `None` before the first.
    pub fn last_share(&self) -> Option<Timestamp> {
        match self.last_share.load(Relaxed) {
            0 => None,
            n => Some(Timestamp::from_millis(n - 1)),
        }
    }

    /// When the worker joined the list.
    pub fn first_seen(&self) -> Timestamp {
        self.first_seen
    }

    /// Hashes per second, one-minute average.
    pub fn hashrate_1m(&self, now: Timestamp) -> f64 {
        self.hashrates(now)[0]
    }

    /// Hashes per second, ten-minute average.
    pub fn hashrate_10m(&self, now: Timestamp) -> f64 {
        self.hashrates(now)[1]
    }

    /// Hashes per second, one- and ten-minute averages.
    pub fn hashrates(&self, now: Timestamp) -> [f64; 2] {
        let taus = [TAU_1M_MS as f64, TAU_10M_MS as f64];
        let sums =
            self.work_rates
                .sums_at(now.millis_since(self.base), || self.accepted_work(), taus);
        let age = now.millis_since(self.first_seen);
        std::array::from_fn(|i| rate_per_second(sums[i], taus[i], age) * HASHES_PER_SHARE)
    }

    /// Its figures at `now`.
    pub fn view(&self, now: Timestamp) -> WorkerView {
        let [hashrate_1m, hashrate_10m] = self.hashrates(now);
        WorkerView {
            name: self.name.clone(),
            connections: self.connections(),
            accepted: self.accepted(),
            accepted_work: self.accepted_work(),
            rejected: self.rejected(),
            last_share: self.last_share(),
            first_seen: self.first_seen,
            hashrate_1m,
            hashrate_10m,
        }
    }

    #[inline]
    pub(super) fn record_accepted(
        &self,
        difficulty: f64,
        tick: u64,
        now: Timestamp,
        decays: [&Decay; 2],
    ) {
        self.accepted.fetch_add(1, Relaxed);
        self.accepted_work.add(difficulty);
        self.last_share
            .store(now.as_millis().saturating_add(1), Relaxed);
        if self.work_rates.due(tick) {
            self.work_rates.fold(tick, || self.accepted_work(), decays);
        }
    }

    #[inline]
    pub(super) fn record_rejected(&self, now: Timestamp) {
        self.rejected.fetch_add(1, Relaxed);
        self.last_share
            .store(now.as_millis().saturating_add(1), Relaxed);
    }
}

/// Where a page of the worker list starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageStart<'a> {
    /// At this position in name order.
    Offset(usize),
    /// At the first worker whose name sorts after this one (a cursor: stable while workers
    /// come and go, and O(log n) to find).
    After(&'a str),
}

/// A page of the worker list, in name order.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkersPage {
    /// Workers listed in all.
    pub total: usize,
    /// The first worker's position, when the page was asked for by offset.
    pub offset: Option<usize>,
    /// The workers on this page, in name order.
    pub workers: Vec<WorkerView>,
    /// Whether more workers follow this page.
    pub more: bool,
}

impl WorkersPage {
    /// The cursor for the next page, if there is one.
    pub fn next_after(&self) -> Option<&str> {
        if self.more {
            self.workers.last().map(|w| &*w.name)
        } else {
            None
        }
    }

    /// The offset of the next page, if there is one and this page was asked for by offset.
    pub fn next_offset(&self) -> Option<usize> {
        match (self.more, self.offset) {
            (true, Some(o)) => Some(o + self.workers.len()),
            _ => None,
        }
    }
}

/// A worker's totals from earlier runs (the store's shares): where its counts go on from when
/// it connects again.
#[derive(Clone, Debug, PartialEq)]
pub struct CarriedOver {
    /// The worker name.
    pub name: Box<str>,
    /// Accepted shares.
    pub accepted: u64,
    /// Their difficulties' sum.
    pub accepted_work: f64,
}

struct Inner {
    by_name: BTreeMap<Arc<str>, Arc<WorkerStats>>,
    /// Earlier runs' totals of workers not listed since this run began; taken at first attach.
    carried: std::collections::HashMap<Box<str>, (u64, f64)>,
    /// Workers whose last connection closed, with the time each may leave, earliest first.
    leaving: VecDeque<(Timestamp, Arc<WorkerStats>)>,
}

/// The worker list (see the module's documentation).
pub struct WorkerRegistry {
    stats: Arc<PoolStats>,
    retention_ms: u64,
    inner: RwLock<Inner>,
    len: AtomicUsize,
    /// The earliest departure due, so that `expire` skips the lock when none is.
    next_departure: AtomicU64,
}

impl std::fmt::Debug for WorkerRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerRegistry")
            .field("len", &self.len())
            .field("retention_ms", &self.retention_ms)
            .finish_non_exhaustive()
    }
}

impl WorkerRegistry {
    /// A registry that keeps the worker gauges of `stats`, with the default retention.
    pub fn new(stats: &Arc<PoolStats>) -> Arc<WorkerRegistry> {
        Self::with_retention(stats, DEFAULT_WORKER_RETENTION_MS)
    }

    /// A worker with no connections leaves the list `retention_ms` after its last one closed
    /// (0: at once).
    pub fn with_retention(stats: &Arc<PoolStats>, retention_ms: u64) -> Arc<WorkerRegistry> {
        Arc::new(WorkerRegistry {
            stats: stats.clone(),
            retention_ms,
            inner: RwLock::new(Inner {
                by_name: BTreeMap::new(),
                carried: Default::default(),
                leaving: VecDeque::new(),
            }),
            len: AtomicUsize::new(0),
            next_departure: AtomicU64::new(u64::MAX),
        })
    }

    /// A connection authorized as `name`: the worker's figures, shared with every other
    /// connection of the same name. Pair with one [`detach`](Self::detach) at disconnect.
    pub fn attach(&self, name: &str, now: Timestamp) -> Arc<WorkerStats> {
        self.attach_since(name, now, now)
    }

    /// [`attach`](Self::attach) for a worker first seen through a share already in hand: its
    /// hash-rate clock starts at `since`, before now. A clock started at the share itself
    /// would count that share over no time, and overestimate a new worker by one share's
    /// work over its first minutes.
    pub fn attach_since(&self, name: &str, now: Timestamp, since: Timestamp) -> Arc<WorkerStats> {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        self.expire_locked(&mut inner, now);
        let worker = match inner.by_name.get(name) {
            Some(w) => w.clone(),
            None => {
                let carried = inner.carried.remove(name);
                let name: Arc<str> = Arc::from(name);
                let w = Arc::new(WorkerStats::new(
                    name.clone(),
                    self.stats.start(),
                    since.min(now),
                ));
                if let Some((accepted, work)) = carried {
                    w.accepted.store(accepted, Relaxed);
                    w.accepted_work.add(work);
                }
                inner.by_name.insert(name, w.clone());
                self.listed_changed(&inner);
                w
            }
        };
        if worker.connections.fetch_add(1, Relaxed) == 0 {
            self.stats.worker_online();
        }
        worker
    }

    /// Totals from earlier runs: a worker that connects again goes on from them (accepted
    /// shares and work; its hash rates start afresh).
    pub fn carry_over(&self, totals: impl IntoIterator<Item = CarriedOver>) {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        inner.carried.extend(
            totals
                .into_iter()
                .map(|t| (t.name, (t.accepted, t.accepted_work))),
        );
    }

    /// A connection of `worker` closed. With no connections left the worker leaves the list
    /// after the retention period. A detach without a matching attach is ignored.
    pub fn detach(&self, worker: &Arc<WorkerStats>, now: Timestamp) {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let Ok(before) = worker
            .connections
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
        else {
            return;
        };
        if before == 1 {
            self.stats.worker_offline();
            worker.detached_at.store(now.as_millis(), Relaxed);
            if self.retention_ms == 0 {
                remove_if_same(&mut inner, worker);
                self.listed_changed(&inner);
            } else {
                inner
                    .leaving
                    .push_back((now.plus_millis(self.retention_ms), worker.clone()));
            }
        }
        self.expire_locked(&mut inner, now);
    }

    /// Applies the departures due by `now`.
    pub fn expire(&self, now: Timestamp) {
        if now.as_millis() < self.next_departure.load(Relaxed) {
            return;
        }
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        self.expire_locked(&mut inner, now);
    }

    fn expire_locked(&self, inner: &mut Inner, now: Timestamp) {
        let mut removed = false;
        while let Some(&(due, _)) = inner.leaving.front() {
            if due > now {
                break;
            }
            let (_, worker) = inner.leaving.pop_front().expect("front exists");
            // Reattached since, or detached again later (a later entry is queued): stays.
            let gone_since = Timestamp::from_millis(worker.detached_at.load(Relaxed));
            if worker.connections() == 0 && gone_since.plus_millis(self.retention_ms) <= now {
                removed |= remove_if_same(inner, &worker);
            }
        }
        if removed {
            self.listed_changed(inner);
        }
        let next = inner
            .leaving
            .front()
            .map_or(u64::MAX, |(due, _)| due.as_millis());
        self.next_departure.store(next, Relaxed);
    }

    fn listed_changed(&self, inner: &Inner) {
        let n = inner.by_name.len();
        self.len.store(n, Relaxed);
        self.stats.set_workers_listed(n);
    }

    /// Up to `limit` workers in name order from `start`, with the list's size. The lock is
    /// held only to copy out `limit` pointers; the figures are read after.
    pub fn page(&self, start: PageStart<'_>, limit: usize, now: Timestamp) -> WorkersPage {
        let (total, mut picked) = {
            let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
            let take = limit.saturating_add(1);
            let picked: Vec<Arc<WorkerStats>> = match start {
                PageStart::Offset(o) => {
                    inner.by_name.values().skip(o).take(take).cloned().collect()
                }
                PageStart::After(name) => inner
                    .by_name
                    .range::<str, _>((Bound::Excluded(name), Bound::Unbounded))
                    .map(|(_, w)| w)
                    .take(take)
                    .cloned()
                    .collect(),
            };
            (inner.by_name.len(), picked)
        };
        let more = picked.len() > limit;
        picked.truncate(limit);
        WorkersPage {
            total,
            offset: match start {
                PageStart::Offset(o) => Some(o),
                PageStart::After(_) => None,
            },
            workers: picked.iter().map(|w| w.view(now)).collect(),
            more,
        }
    }

    /// The listed worker of that name.
    pub fn get(&self, name: &str) -> Option<Arc<WorkerStats>> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.by_name.get(name).cloned()
    }

    /// Workers listed (connected, or disconnected within the retention period).
    pub fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    /// Whether no worker is listed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Removes `worker` from the list if the list's entry of its name is this very worker (a
/// worker of the same name may have joined since this one left).
fn remove_if_same(inner: &mut Inner, worker: &Arc<WorkerStats>) -> bool {
    let same = inner
        .by_name
        .get(&*worker.name)
        .is_some_and(|w| Arc::ptr_eq(w, worker));
    if same {
        inner.by_name.remove(&*worker.name);
    }
    same
}
