//! What every connection of every front end shares: the current jobs, the tip epoch, pool-wide
//! statistics and the worker list, the store, the event log, and the queue of found blocks.
//! Front ends hold an `Arc<Engine>`; nothing here blocks or allocates per share.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use events::{EventSink, JobId, Perspective, Reason, ShareResult, Verdict};
use primitives::bitcoin::{Network, ScriptBuf};
use primitives::{Difficulty, Hash256};
use tokio::sync::{mpsc, watch};

use crate::channel::{Accepted, ChannelConfig};
use crate::job::{Job, Origin, Solution};
use crate::jobs::{Generation, JobConfig};
use crate::stats::{PoolStats, WorkerRegistry, WorkerStats};
use crate::store::{ShareBatch, ShareRecord, Store, StoreError, WorkerKey};
use crate::tips::Tips;
use crate::Timestamp;

/// Who the coinbase pays.
#[derive(Clone, Debug)]
pub enum PayoutMode {
    /// Everything to the pool's script; miners authorize with account names.
    Pool(ScriptBuf),
    /// Each miner's coinbase pays the address it authorized with.
    Solo,
}

/// What the engine is started with (from the pool's configuration).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// How jobs are built from templates (coinbase tag, extranonce size).
    pub jobs: JobConfig,
    /// Per-channel settings: vardiff and share checks.
    pub channel: ChannelConfig,
    /// Who the coinbase pays.
    pub payout: PayoutMode,
    /// The network payout addresses must belong to.
    pub network: Network,
    /// The share difficulty a new channel starts at, before vardiff moves it.
    pub start_difficulty: Difficulty,
}

/// A block a share found, persisted and submitted by the block task.
#[derive(Clone, Debug)]
pub struct FoundBlock {
    /// The block hash.
    pub hash: Hash256,
    /// The block height.
    pub height: u32,
    /// The engine's id of the job the share was on.
    pub job_id: u64,
    /// The id of the template the job was built from.
    pub template_id: u64,
    /// The connection that found it.
    pub conn: u64,
    /// The worker's store key; `None` without a store, or when the store gave none.
    pub worker: Option<WorkerKey>,
    /// The serialized block; for a declared job, header and coinbase only (see `declared`).
    pub block: Vec<u8>,
    /// When the share arrived.
    pub found_at: Timestamp,
    /// Found on a farm's declared job: the pool lacks its transactions and does not submit it;
    /// the farm's Job Declarator Client and the Job Declarator Server propagate it.
    pub declared: bool,
}

/// The store could not take a share: the share must not be acknowledged, and the miner is told
/// why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotStored {
    /// The store's queue is full (its writer is behind), or the worker has no key.
    Overloaded,
    /// The store cannot write and is retrying (a full disk, an I/O error): see the operations
    /// page, docs/operations.md.
    StoreFailing,
}

/// The job a share names, as the front end received it: SV1's text job id, or an SV2
/// channel and its numeric job id. Events carry it as the miner sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareJob<'a> {
    /// SV1 `mining.submit`'s job id string.
    Sv1(&'a str),
    /// SV2 `SubmitShares*`: the channel id and the job id on it.
    Sv2 {
        /// The SV2 channel id.
        channel: u32,
        /// The job id, as sent in `NewMiningJob` / `NewExtendedMiningJob`.
        job_id: u32,
    },
}

impl ShareJob<'_> {
    /// The SV2 channel id; `None` for SV1.
    pub fn channel(self) -> Option<u32> {
        match self {
            ShareJob::Sv1(_) => None,
            ShareJob::Sv2 { channel, .. } => Some(channel),
        }
    }

    fn event_id(self) -> JobId {
        match self {
            ShareJob::Sv1(id) => JobId::text(id),
            ShareJob::Sv2 { job_id, .. } => JobId::Num(u64::from(job_id)),
        }
    }
}

impl<'a> From<&'a str> for ShareJob<'a> {
    fn from(id: &'a str) -> Self {
        ShareJob::Sv1(id)
    }
}

/// A miner name accepted by `authorize`, with its statistics and store key.
#[derive(Clone, Debug)]
pub struct Worker {
    /// The name as the miner sent it (`account.worker`).
    pub name: Box<str>,
    /// Its counters in the worker list.
    pub stats: Arc<WorkerStats>,
    /// Its store key; `None` without a store, or while the store could not give one (see
    /// [`Engine::retry_worker_key`]).
    pub key: Option<WorkerKey>,
}

/// The share-accounting engine shared by the SV1 and SV2 front ends: current jobs, share checks,
/// statistics, the store and the blocks found.
pub struct Engine {
    /// What it was started with.
    pub config: EngineConfig,
    /// `config.channel`, shared with every channel.
    pub channel_config: Arc<ChannelConfig>,
    /// Pool-wide counters, served over HTTP.
    pub stats: Arc<PoolStats>,
    /// The worker list.
    pub workers: Arc<WorkerRegistry>,
    /// The share store; `None` when the pool keeps none.
    pub store: Option<Store>,
    /// Where share, block and connection events go.
    pub events: EventSink,
    generation: RwLock<Option<Arc<Generation>>>,
    generations: watch::Sender<Option<Arc<Generation>>>,
    epoch: AtomicU64,
    tips: Arc<Tips>,
    /// Ids for declared jobs while no generation exists to draw them from.
    next_declared_id: AtomicU64,
    serving: AtomicBool,
    next_conn: AtomicU64,
    next_channel: AtomicU32,
    blocks: mpsc::UnboundedSender<FoundBlock>,
    /// Where accepted shares are also sent, when something upstream of this engine wants them
    /// (a Job Declarator Client forwards those that meet its pool's target).
    share_tap: std::sync::OnceLock<mpsc::UnboundedSender<TappedShare>>,
    /// Pays every job from now on, whatever the connection authorized for (a JDC that left its
    /// pool mines solo for the farm). Checked per job through a flag so that the usual case
    /// costs one atomic load.
    payout_override: RwLock<Option<ScriptBuf>>,
    overridden: AtomicBool,
    /// Where every SV2 channel's extranonce prefix starts, once moved from the configured
    /// base (a JDC whose pool gave it a new range on a new channel), and how many moves there
    /// were: sessions compare the count with the one they last followed (one atomic load).
    extranonce_base: RwLock<Option<Arc<[u8]>>>,
    extranonce_base_moves: AtomicU64,
    /// Declared tokens jobs were set under, on any connection (one job each).
    pub used_tokens: crate::jd_token::UsedTokens,
}

/// An accepted share as a role above the engine sees it: enough to submit it again under
/// another channel's job (the full extranonce), or to push it as a block.
#[derive(Clone, Debug)]
pub struct TappedShare {
    /// The generation (template) the job belongs to.
    pub generation: u64,
    /// The engine's job id within that generation.
    pub job_id: u64,
    /// The whole coinbase extranonce: the channel's prefix and the miner's part.
    pub extranonce: Vec<u8>,
    /// The block header's version, rolled bits included.
    pub version: u32,
    /// The header's time (Unix seconds).
    pub ntime: u32,
    /// The header's nonce.
    pub nonce: u32,
    /// The header's hash.
    pub hash: Hash256,
    /// It meets the network target.
    pub block: bool,
    /// The worker it was accounted to (`account.worker`), as the miner named it.
    pub worker: Box<str>,
}

impl Engine {
    /// An engine with no work yet, and the receiver of the blocks its shares find.
    pub fn new(
        config: EngineConfig,
        stats: Arc<PoolStats>,
        workers: Arc<WorkerRegistry>,
        store: Option<Store>,
        events: EventSink,
    ) -> (Arc<Engine>, mpsc::UnboundedReceiver<FoundBlock>) {
        let (blocks, found) = mpsc::unbounded_channel();
        // Tokens that set a job in an earlier run stay used.
        let used_tokens = crate::jd_token::UsedTokens::default();
        if let Some(s) = &store {
            used_tokens.restore(s.used_tokens().iter().map(|t| (t.id, t.expires_ms)));
        }
        let engine = Arc::new(Engine {
            channel_config: Arc::new(config.channel.clone()),
            config,
            stats,
            workers,
            store,
            events,
            generation: RwLock::new(None),
            generations: watch::channel(None).0,
            epoch: AtomicU64::new(0),
            tips: Arc::new(Tips::default()),
            next_declared_id: AtomicU64::new(DECLARED_IDS_WITHOUT_WORK),
            serving: AtomicBool::new(false),
            next_conn: AtomicU64::new(1),
            next_channel: AtomicU32::new(1),
            blocks,
            share_tap: std::sync::OnceLock::new(),
            payout_override: RwLock::new(None),
            overridden: AtomicBool::new(false),
            extranonce_base: RwLock::new(None),
            extranonce_base_moves: AtomicU64::new(0),
            used_tokens,
        });
        (engine, found)
    }

    /// Makes every job sent from now on pay `script` (or, with `None`, what each connection
    /// authorized for again). Connections get new work with the next template.
    pub fn set_payout_override(&self, script: Option<ScriptBuf>) {
        let mut o = self
            .payout_override
            .write()
            .unwrap_or_else(|e| e.into_inner());
        self.overridden.store(script.is_some(), Ordering::Release);
        *o = script;
    }

    /// Moves every SV2 channel's extranonce prefix onto `base`, which must be as long as the
    /// base it replaces (the coinbase's layout stays): channels opened from now on start with
    /// it, and open ones are told (`SetExtranoncePrefix` where their prefix changes) and get a
    /// clean job at their connection's next job or tick, work sent before it being stale from
    /// then on, even where the prefix stays. A Job Declarator Client calls it when a new
    /// channel with its pool comes with another prefix (its devices' shares must lie in the new
    /// range), and when it rejoins its pool (work paying the farm must end).
    pub fn move_extranonce_base(&self, base: Vec<u8>) {
        *self
            .extranonce_base
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(Arc::from(base));
        self.extranonce_base_moves.fetch_add(1, Ordering::AcqRel);
    }

    /// How many times [`Engine::move_extranonce_base`] was called.
    #[inline]
    pub fn extranonce_base_moves(&self) -> u64 {
        self.extranonce_base_moves.load(Ordering::Acquire)
    }

    /// The base set by [`Engine::move_extranonce_base`], if it was ever called.
    pub fn moved_extranonce_base(&self) -> Option<Arc<[u8]>> {
        self.extranonce_base
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What a job for a connection that authorized for `authorized` pays.
    #[inline]
    pub fn job_payout<'a>(&self, authorized: &'a ScriptBuf) -> std::borrow::Cow<'a, ScriptBuf> {
        if !self.overridden.load(Ordering::Acquire) {
            return std::borrow::Cow::Borrowed(authorized);
        }
        match &*self
            .payout_override
            .read()
            .unwrap_or_else(|e| e.into_inner())
        {
            Some(s) => std::borrow::Cow::Owned(s.clone()),
            None => std::borrow::Cow::Borrowed(authorized),
        }
    }

    /// Sends every accepted share to `tap` from now on. Once per engine: `false` if a tap was
    /// set already.
    pub fn set_share_tap(&self, tap: mpsc::UnboundedSender<TappedShare>) -> bool {
        self.share_tap.set(tap).is_ok()
    }

    /// Hands an accepted share to the tap, if there is one. The front ends call it with what
    /// [`Engine::accepted`] does not see: the miner's part of the extranonce.
    #[inline]
    pub fn tap_share(
        &self,
        a: &Accepted,
        worker: &Worker,
        miner_extranonce: &[u8],
        ntime: u32,
        nonce: u32,
    ) {
        let Some(tap) = self.share_tap.get() else {
            return;
        };
        let mut extranonce = Vec::with_capacity(a.extranonce_prefix.len() + miner_extranonce.len());
        extranonce.extend_from_slice(a.extranonce_prefix);
        extranonce.extend_from_slice(miner_extranonce);
        let _ = tap.send(TappedShare {
            generation: a.job.generation,
            job_id: a.job.id,
            extranonce,
            version: u32::from_le_bytes([a.header[0], a.header[1], a.header[2], a.header[3]]),
            ntime,
            nonce,
            hash: a.hash,
            block: a.block,
            worker: worker.name.clone(),
        });
    }

    /// A fresh connection id (also the seed of its extranonce prefix).
    pub fn next_conn(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh SV2 channel id. The spec asks only for ids unique on their connection; unique in
    /// the whole pool, an id names one channel in logs and events (the lab ties a device's
    /// standard job to its template by (channel, job id)). Wraps after 2^32 channels, long after
    /// the first ones closed.
    pub fn next_channel_id(&self) -> u32 {
        loop {
            let id = self.next_channel.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                return id;
            }
        }
    }

    /// The tip epoch: jobs of an older one are stale.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The generation miners should work on now, if the pool is serving work.
    pub fn current(&self) -> Option<Arc<Generation>> {
        if !self.serving.load(Ordering::Acquire) {
            return None;
        }
        self.generation
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The latest generation, served or not (a declared job's checks compare against it).
    pub fn latest(&self) -> Option<Arc<Generation>> {
        self.generation
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The previous-block hashes the pool has worked on (declared jobs' staleness).
    pub fn tips(&self) -> &Arc<Tips> {
        &self.tips
    }

    /// A job id for a declared job, unique among the pool's jobs.
    pub fn declared_job_id(&self) -> u64 {
        match self.latest() {
            Some(g) => g.fresh_id(),
            None => self.next_declared_id.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Subscribes to new generations (and to the pool stopping work: `None`).
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<Generation>>> {
        self.generations.subscribe()
    }

    /// Makes `g` the work of every connection.
    pub fn publish(&self, g: Arc<Generation>) {
        self.epoch.fetch_max(g.epoch, Ordering::AcqRel);
        self.tips.handle_tip(g.template.prev_hash);
        *self.generation.write().unwrap_or_else(|e| e.into_inner()) = Some(g.clone());
        self.serving.store(true, Ordering::Release);
        self.stats.job_created(g.clean);
        self.generations.send_replace(Some(g));
    }

    /// Stops handing out work (the node is unreachable or its templates are stale).
    pub fn stop_work(&self) {
        if self.serving.swap(false, Ordering::AcqRel) {
            self.generations.send_replace(None);
        }
    }

    /// Whether work is being handed out (see [`Engine::stop_work`]).
    pub fn is_serving(&self) -> bool {
        self.serving.load(Ordering::Acquire)
    }

    /// The payout script for a miner that authorized as `account`: the pool's own in pool mode,
    /// the address's in solo mode (`None` if it is not an address of the pool's network).
    pub fn payout_for(&self, account: &str) -> Option<ScriptBuf> {
        match &self.config.payout {
            PayoutMode::Pool(script) => Some(script.clone()),
            PayoutMode::Solo => {
                primitives::coinbase::payout_script(account, self.config.network).ok()
            }
        }
    }

    /// May a connection from `origin` name worker `name`? A name the worker list holds is
    /// always fine; a new one counts against its address's allowance of new workers (the
    /// miners' edge: `edge::Gate::new_worker`), so that one address cannot make the pool keep
    /// thousands of workers it invents. `origin` is `None` for a session with no socket
    /// (tests, fuzzing), which is not limited.
    pub fn may_add_worker(
        &self,
        name: &str,
        origin: Option<std::net::IpAddr>,
        now: Timestamp,
    ) -> bool {
        let (Some(ip), Some(gate)) = (origin, self.stats.gate()) else {
            return true;
        };
        self.workers.get(name).is_some() || gate.new_worker(ip, now)
    }

    /// Attaches a worker name (at authorize): its statistics, and its store key when the store can
    /// give one.
    pub fn attach_worker(&self, name: &str, now: Timestamp) -> Worker {
        self.attach_worker_since(name, now, now)
    }

    /// [`Engine::attach_worker`] for a worker first seen through a share: its hash-rate clock
    /// starts at `since` ([`crate::stats::WorkerRegistry::attach_since`]).
    pub fn attach_worker_since(&self, name: &str, now: Timestamp, since: Timestamp) -> Worker {
        let stats = self.workers.attach_since(name, now, since);
        let key = self.store.as_ref().and_then(|s| match s.worker(name) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::warn!(worker = name, error = %e, "store: cannot record worker");
                None
            }
        });
        Worker {
            name: name.into(),
            stats,
            key,
        }
    }

    /// Asks the store again for the key of a worker that authorized without one (the store's
    /// queue was full, or it was failing): at its next share, so that a moment's trouble does
    /// not refuse its shares for as long as it stays connected.
    #[cold]
    pub fn retry_worker_key(&self, w: &mut Worker) {
        // Not while the store is failing: its share is refused anyway, and the lookup could
        // read the file or wait on a full queue on every share.
        if let (None, Some(s)) = (w.key, &self.store) {
            if !s.is_failing() {
                w.key = s.worker(&w.name).ok();
            }
        }
    }

    /// Detaches a worker whose connection or SV2 channel closed.
    pub fn detach_worker(&self, w: &Worker, now: Timestamp) {
        self.workers.detach(&w.stats, now);
    }

    /// The batch a connection records its accepted shares through (see [`Engine::accepted`]);
    /// `None` when the pool keeps no store. Takes no memory until the first share.
    pub fn share_batch(&self) -> Option<ShareBatch> {
        self.store.clone().map(ShareBatch::new)
    }

    /// Accounts an accepted share: statistics, store, event. With a store, the share's record
    /// goes into the connection's `batch` (from [`Engine::share_batch`]), whose
    /// [`ShareBatch::take_ticket`] then says what the acknowledgement must wait for. `job` is
    /// SV1's job id (a `&str`) or an SV2 channel's [`ShareJob::Sv2`].
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn accepted<'j>(
        &self,
        conn: u64,
        seq: u64,
        job: impl Into<ShareJob<'j>>,
        worker: &Worker,
        a: &Accepted,
        nonce: u32,
        now: Timestamp,
        batch: Option<&mut ShareBatch>,
    ) -> Result<(), NotStored> {
        let job = job.into();
        if self.store.is_some() {
            let (Some(batch), Some(key)) = (batch, worker.key) else {
                return Err(NotStored::Overloaded);
            };
            let rec = ShareRecord {
                worker: key,
                difficulty: a.credited.as_f64(),
                job_id: a.job.id,
                time_ms: batch.stamp(),
                hash: a.hash.0,
            };
            if let Err(e) = batch.push(rec, now) {
                // Never acknowledge a share the store did not take. A failing store refuses
                // every share and says so itself (its writer logs the fault): one line per
                // refused share would flood the log.
                if matches!(e, StoreError::Failing(_)) {
                    tracing::debug!(conn, channel = ?job.channel(), error = %e, "store: share not recorded");
                } else {
                    tracing::warn!(conn, channel = ?job.channel(), error = %e, "store: share not recorded");
                }
                self.stats
                    .share_rejected(Some(&worker.stats), Reason::Other, now);
                return Err(match e {
                    StoreError::Failing(_) => NotStored::StoreFailing,
                    _ => NotStored::Overloaded,
                });
            }
        }
        self.stats
            .share_accepted(&worker.stats, a.credited.as_f64(), now);
        self.share_event(
            conn,
            seq,
            job,
            nonce,
            a.credited.as_f64(),
            Verdict::Accepted,
        );
        Ok(())
    }

    /// Accounts a rejected share (`job` as in [`Engine::accepted`]).
    #[allow(clippy::too_many_arguments)]
    pub fn rejected<'j>(
        &self,
        conn: u64,
        seq: u64,
        job: impl Into<ShareJob<'j>>,
        worker: Option<&Worker>,
        reason: Reason,
        nonce: u32,
        difficulty: f64,
        now: Timestamp,
    ) {
        self.stats
            .share_rejected(worker.map(|w| &*w.stats), reason, now);
        self.share_event(
            conn,
            seq,
            job.into(),
            nonce,
            difficulty,
            Verdict::Rejected(reason),
        );
    }

    #[inline]
    fn share_event(
        &self,
        conn: u64,
        seq: u64,
        job: ShareJob<'_>,
        nonce: u32,
        difficulty: f64,
        verdict: Verdict,
    ) {
        if self.events.is_enabled() {
            self.events.emit(ShareResult {
                conn,
                channel: job.channel(),
                seq,
                job_id: job.event_id(),
                nonce,
                difficulty,
                verdict,
                perspective: Perspective::Given,
            });
        }
    }

    /// Hands a block-solving share to the block task (persist, then submit until answered).
    #[allow(clippy::too_many_arguments)]
    pub fn found_block(
        &self,
        job: &Job,
        solution: &Solution<'_>,
        header: &[u8; 80],
        hash: Hash256,
        conn: u64,
        worker: Option<&Worker>,
        now: Timestamp,
    ) {
        self.stats.block_found();
        match job.block(solution, header) {
            Ok(block) => {
                match &job.origin {
                    Origin::Template => {
                        tracing::info!(%hash, height = job.template.height, conn, "block found")
                    }
                    Origin::Declared { token_id, .. } => tracing::info!(
                        %hash,
                        height = job.template.height,
                        conn,
                        token_id,
                        "block found on a declared job: recorded, not submitted by the pool \
                         (it lacks the transactions); the JDC and JDS propagate it"
                    ),
                }
                let _ = self.blocks.send(FoundBlock {
                    hash,
                    height: job.template.height,
                    job_id: job.id,
                    template_id: job.generation,
                    conn,
                    worker: worker.and_then(|w| w.key),
                    block,
                    found_at: now,
                    declared: job.is_declared(),
                });
            }
            Err(e) => tracing::error!(%hash, error = %e, "cannot assemble found block"),
        }
    }
}

/// Where declared job ids start while the pool has no generation to draw ids from: far above
/// the template job ids a run reaches, within SQLite's signed integers.
const DECLARED_IDS_WITHOUT_WORK: u64 = 1 << 48;

/// Wall-clock Unix milliseconds, as the store records them.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
