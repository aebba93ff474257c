//! The JDC's channel to the pool, without I/O: an extended channel on a connection that does
//! work selection, the declared jobs set on it (`SetCustomMiningJob`), and the devices' shares
//! that meet its target, submitted under those jobs.
//!
//! Devices mine a template the moment it arrives (optimistic mining, spec 6.3): their shares
//! may come before the pool has said which job id the template is. Those are held (bounded)
//! and submitted when `SetCustomMiningJob.Success` names the job, or dropped if the pool or
//! the JDS refuses it. The pool's own jobs on the channel are not mined: with job declaration
//! the farm chooses the work.

use std::collections::{HashMap, VecDeque};

use pool::engine::TappedShare;
use primitives::{Hash256, Target};
use sv2::messages::common::{mining_flags, protocol, Common, SetupConnection};
use sv2::messages::extensions::{extension, RequestExtensions};
use sv2::messages::mining::{OpenExtendedMiningChannel, SetCustomMiningJob, SubmitSharesExtended};
use sv2::messages::{Message, Mining};
use sv2::negotiation::{self, Outcome};

use crate::coinbase::CustomCoinbase;

/// How the [`PoolChannel`] sets up its connection and channel, and how much it holds.
#[derive(Clone, Debug)]
pub struct PoolChannelConfig {
    /// `OpenExtendedMiningChannel.user_identity`: the account the pool credits.
    pub user_identity: String,
    /// What the devices behind the JDC hash, per second.
    pub nominal_hash_rate: f32,
    /// Extranonce bytes the JDC needs to give every downstream channel its own range.
    pub min_extranonce_size: u16,
    /// `SetupConnection.endpoint_host`: the pool's address as the JDC dialled it.
    pub endpoint_host: String,
    /// `SetupConnection.endpoint_port`.
    pub endpoint_port: u16,
    /// Shares held for jobs the pool has not confirmed yet, at most.
    pub max_held_shares: usize,
    /// Custom jobs remembered (their generation and job id), at most.
    pub max_jobs: usize,
    /// Ask the pool for extension 0x0002 (worker-specific hashrate tracking) and, where it
    /// agrees, name each device on its shares by the worker its channel was opened for.
    pub worker_tracking: bool,
}

impl Default for PoolChannelConfig {
    fn default() -> Self {
        PoolChannelConfig {
            user_identity: "stratumlab-jdc".into(),
            nominal_hash_rate: 0.0,
            min_extranonce_size: 8,
            endpoint_host: String::new(),
            endpoint_port: 0,
            max_held_shares: 4096,
            max_jobs: 16,
            worker_tracking: false,
        }
    }
}

/// A declared job, ready for `SetCustomMiningJob`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomJob {
    /// The embedded engine's generation the template opened.
    pub generation: u64,
    /// From `DeclareMiningJob.Success`.
    pub token: Vec<u8>,
    /// The block header version.
    pub version: u32,
    /// The previous block's hash (internal byte order).
    pub prev_hash: Hash256,
    /// `SetCustomMiningJob.min_ntime`: the earliest header time, Unix seconds.
    pub min_ntime: u32,
    /// The header's compact target.
    pub nbits: u32,
    /// The coinbase's fields as `SetCustomMiningJob` carries them.
    pub coinbase: CustomCoinbase,
    /// The merkle branch from the coinbase to the root (internal byte order).
    pub merkle_path: Vec<[u8; 32]>,
}

/// The pool's answer to the channel request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenedChannel {
    /// The channel's id, in every message on it.
    pub channel_id: u32,
    /// The pool's part of the extranonce; every share's extranonce starts with it.
    pub extranonce_prefix: Vec<u8>,
    /// Bytes after the prefix that are the JDC's to fill.
    pub extranonce_size: usize,
    /// The share target the pool set for the channel.
    pub target: Target,
}

/// What the [`PoolChannel`] asks of its shell, or tells it.
#[derive(Clone, Debug, PartialEq)]
pub enum PoolEvent {
    /// A message for the pool.
    Send(Message),
    /// The pool opened the channel.
    Opened(OpenedChannel),
    /// The pool accepted a declared job (`SetCustomMiningJob.Success`).
    JobSet {
        /// The template's generation.
        generation: u64,
        /// The pool's job id for it, which shares are submitted under.
        job_id: u32,
    },
    /// The pool refused a declared job (a reason to fall back, spec 6.2).
    JobRefused {
        /// The template's generation.
        generation: u64,
        /// `SetCustomMiningJob.Error.error_code`.
        code: String,
    },
    /// The pool rejected a share the devices found on a job it had accepted.
    ShareRejected {
        /// The generation the share was mined on.
        generation: u64,
        /// `SubmitShares.Error.error_code`.
        code: String,
    },
    /// The pool set a new share target for the channel (`SetTarget`).
    TargetChanged(Target),
    /// Jobs set from now on get this prefix; downstream extranonce ranges move with it.
    PrefixChanged(Vec<u8>),
}

/// Why the pool connection cannot go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PoolChannelError {
    /// `SetupConnection.Error`, with its error code.
    #[error("pool refused SetupConnection: {0}")]
    SetupRefused(String),
    /// `OpenMiningChannel.Error`, with its error code.
    #[error("pool refused the channel: {0}")]
    OpenRefused(String),
    /// A channel message (named) came before the channel was open.
    #[error("{0} before the channel is open")]
    NotOpen(&'static str),
    /// `CloseChannel`, with its reason code.
    #[error("pool closed the channel: {0}")]
    Closed(String),
    /// A message (named) only a pool receives, or of another protocol.
    #[error("pool sent {0}, which a client never receives")]
    Unexpected(&'static str),
    /// The pool requires extensions the JDC does not use (`RequestExtensions.Error`).
    #[error("pool requires extensions {0:#06x?}, which the JDC does not use")]
    ExtensionsRequired(Vec<u16>),
}

/// Counters for the status page and the summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolChannelStats {
    /// Declared jobs the pool accepted.
    pub jobs_set: u64,
    /// Declared jobs the pool refused.
    pub jobs_refused: u64,
    /// Shares submitted to the pool.
    pub shares_submitted: u64,
    /// Of those, accepted.
    pub shares_accepted: u64,
    /// Of those, rejected (stale ones included).
    pub shares_rejected: u64,
    /// Of the rejected: on a job the pool no longer took (a block moved the tip in between).
    pub shares_stale: u64,
    /// Accepted downstream but easier than the pool's target: not the pool's shares.
    pub below_target: u64,
    /// Held for a job that was refused, or pushed out of a full hold.
    pub dropped: u64,
    /// Their extranonce does not start with the channel's prefix (mined before it changed).
    pub foreign: u64,
    /// Pool jobs on the channel, not mined.
    pub pool_jobs_ignored: u64,
    /// Of the shares submitted, those naming their worker (extension 0x0002).
    pub worker_shares: u64,
}

impl std::ops::Add for PoolChannelStats {
    type Output = PoolChannelStats;

    /// The counts of two channels in turn (a JDC that rejoined its pool): summed.
    fn add(self, o: PoolChannelStats) -> PoolChannelStats {
        PoolChannelStats {
            jobs_set: self.jobs_set + o.jobs_set,
            jobs_refused: self.jobs_refused + o.jobs_refused,
            shares_submitted: self.shares_submitted + o.shares_submitted,
            shares_accepted: self.shares_accepted + o.shares_accepted,
            shares_rejected: self.shares_rejected + o.shares_rejected,
            shares_stale: self.shares_stale + o.shares_stale,
            below_target: self.below_target + o.below_target,
            dropped: self.dropped + o.dropped,
            foreign: self.foreign + o.foreign,
            pool_jobs_ignored: self.pool_jobs_ignored + o.pool_jobs_ignored,
            worker_shares: self.worker_shares + o.worker_shares,
        }
    }
}

#[derive(Clone, Debug)]
enum Phase {
    AwaitSetup,
    /// `RequestExtensions` sent: waiting for the answer (or for the shell to give up on it).
    AwaitExtensions,
    AwaitOpen,
    Open(OpenedChannel),
}

const OPEN_REQUEST: u32 = 1;
const EXTENSIONS_REQUEST: u16 = 1;
/// The extension 0x0002 asks for.
const WORKER_TRACKING: u16 = extension::WORKER_HASHRATE_TRACKING;

/// The JDC's extended channel to the pool: setup, the declared jobs set on it, the devices'
/// shares held and submitted. Feed it the pool's messages, jobs and shares; send what its
/// events say.
pub struct PoolChannel {
    cfg: PoolChannelConfig,
    phase: Phase,
    next_request: u32,
    /// `SetCustomMiningJob` requests in flight: request id to generation.
    requested: HashMap<u32, u64>,
    /// Generations the pool accepted, newest last.
    jobs: VecDeque<(u64, u32)>,
    held: VecDeque<TappedShare>,
    /// The pool agreed to extension 0x0002: shares name their worker.
    tracking: bool,
    next_seq: u32,
    /// Submitted shares awaiting a verdict, oldest first: sequence number, generation.
    in_flight: VecDeque<(u32, u64)>,
    /// What the channel did so far.
    pub stats: PoolChannelStats,
}

impl PoolChannel {
    /// A channel not set up yet; send [`PoolChannel::setup_connection`] first.
    pub fn new(cfg: PoolChannelConfig) -> PoolChannel {
        PoolChannel {
            cfg,
            phase: Phase::AwaitSetup,
            next_request: OPEN_REQUEST + 1,
            requested: HashMap::new(),
            jobs: VecDeque::new(),
            held: VecDeque::new(),
            tracking: false,
            next_seq: 0,
            in_flight: VecDeque::new(),
            stats: PoolChannelStats::default(),
        }
    }

    /// The first message: the Mining Protocol with work selection.
    pub fn setup_connection(&self) -> Message {
        setup_connection(
            protocol::MINING,
            mining_flags::REQUIRES_WORK_SELECTION,
            &self.cfg.endpoint_host,
            self.cfg.endpoint_port,
        )
    }

    /// Whether the channel waits for the pool's answer to `RequestExtensions`: a pool that does
    /// not know the extension ignores the request, so the shell waits a bounded time
    /// (`sv2::negotiation::ANSWER_TIMEOUT_MS`) and then calls
    /// [`PoolChannel::extensions_unanswered`].
    pub fn awaiting_extensions(&self) -> bool {
        matches!(self.phase, Phase::AwaitExtensions)
    }

    /// The pool did not answer `RequestExtensions` in time: the channel opens without them.
    pub fn extensions_unanswered(&mut self) -> Vec<PoolEvent> {
        if !self.awaiting_extensions() {
            return Vec::new();
        }
        self.open()
    }

    /// Whether the pool agreed to extension 0x0002 (shares name their worker).
    pub fn worker_tracking(&self) -> bool {
        self.tracking
    }

    fn open(&mut self) -> Vec<PoolEvent> {
        self.phase = Phase::AwaitOpen;
        vec![PoolEvent::Send(
            OpenExtendedMiningChannel {
                request_id: OPEN_REQUEST,
                user_identity: self.cfg.user_identity.clone(),
                nominal_hash_rate: self.cfg.nominal_hash_rate,
                max_target: Target::MAX,
                min_extranonce_size: self.cfg.min_extranonce_size,
            }
            .into(),
        )]
    }

    /// The channel as the pool opened it; `None` until then.
    pub fn opened(&self) -> Option<&OpenedChannel> {
        match &self.phase {
            Phase::Open(o) => Some(o),
            _ => None,
        }
    }

    /// Shares held for jobs the pool has not confirmed yet.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The pool's job id for a generation, if it accepted the generation's custom job.
    pub fn job_for(&self, generation: u64) -> Option<u32> {
        self.jobs
            .iter()
            .rev()
            .find(|(g, _)| *g == generation)
            .map(|(_, j)| *j)
    }

    /// One message from the pool; an error means the connection cannot go on.
    pub fn handle_message(&mut self, m: Message) -> Result<Vec<PoolEvent>, PoolChannelError> {
        let mut out = Vec::new();
        match (&self.phase, m) {
            (Phase::AwaitSetup, Message::Common(Common::SetupConnectionSuccess(_))) => {
                if self.cfg.worker_tracking {
                    self.phase = Phase::AwaitExtensions;
                    out.push(PoolEvent::Send(
                        RequestExtensions {
                            request_id: EXTENSIONS_REQUEST,
                            requested_extensions: vec![WORKER_TRACKING],
                        }
                        .into(),
                    ));
                } else {
                    out = self.open();
                }
            }
            (Phase::AwaitExtensions, Message::Extensions(reply)) => {
                match negotiation::outcome(&reply, EXTENSIONS_REQUEST, &[WORKER_TRACKING]) {
                    Some(Outcome::Using(using)) => {
                        self.tracking = using.contains(&WORKER_TRACKING);
                        out = self.open();
                    }
                    Some(Outcome::Required(required)) => {
                        return Err(PoolChannelError::ExtensionsRequired(required));
                    }
                    // An answer to another request: not ours to act on.
                    None => {}
                }
            }
            // An answer that came after the shell stopped waiting for it: the channel went on
            // without extensions, as the pool will have seen from its open request.
            (Phase::AwaitOpen | Phase::Open(_), Message::Extensions(reply)) => {
                tracing::info!(
                    message = reply.name(),
                    "jdc: late extensions answer ignored"
                );
            }
            (Phase::AwaitSetup, Message::Common(Common::SetupConnectionError(e))) => {
                return Err(PoolChannelError::SetupRefused(e.error_code));
            }
            (Phase::AwaitOpen, Message::Mining(Mining::OpenExtendedMiningChannelSuccess(s))) => {
                let opened = OpenedChannel {
                    channel_id: s.channel_id,
                    extranonce_prefix: s.extranonce_prefix,
                    extranonce_size: usize::from(s.extranonce_size),
                    target: s.target,
                };
                self.phase = Phase::Open(opened.clone());
                out.push(PoolEvent::Opened(opened));
            }
            (Phase::AwaitOpen, Message::Mining(Mining::OpenMiningChannelError(e))) => {
                return Err(PoolChannelError::OpenRefused(e.error_code));
            }
            (Phase::Open(_), Message::Mining(m)) => self.on_mining(m, &mut out)?,
            (_, Message::Mining(m)) => return Err(PoolChannelError::NotOpen(m.name())),
            (_, other) => return Err(PoolChannelError::Unexpected(other.name())),
        }
        Ok(out)
    }

    fn open_mut(&mut self) -> &mut OpenedChannel {
        match &mut self.phase {
            Phase::Open(o) => o,
            _ => unreachable!("called on an open channel only"),
        }
    }

    fn on_mining(&mut self, m: Mining, out: &mut Vec<PoolEvent>) -> Result<(), PoolChannelError> {
        let channel_id = self.open_mut().channel_id;
        match m {
            Mining::SetTarget(t) if t.channel_id == channel_id => {
                self.open_mut().target = t.maximum_target;
                out.push(PoolEvent::TargetChanged(t.maximum_target));
            }
            Mining::SetExtranoncePrefix(p) if p.channel_id == channel_id => {
                self.open_mut().extranonce_prefix = p.extranonce_prefix.clone();
                out.push(PoolEvent::PrefixChanged(p.extranonce_prefix));
            }
            Mining::SetCustomMiningJobSuccess(s) => {
                let Some(generation) = self.requested.remove(&s.request_id) else {
                    return Ok(());
                };
                self.stats.jobs_set += 1;
                if self.jobs.len() >= self.cfg.max_jobs.max(1) {
                    self.jobs.pop_front();
                }
                self.jobs.push_back((generation, s.job_id));
                out.push(PoolEvent::JobSet {
                    generation,
                    job_id: s.job_id,
                });
                let (ready, still): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.held)
                    .into_iter()
                    .partition(|h| h.generation == generation);
                self.held = still;
                for h in ready {
                    self.submit(&h, s.job_id, out);
                }
            }
            Mining::SetCustomMiningJobError(e) => {
                let Some(generation) = self.requested.remove(&e.request_id) else {
                    return Ok(());
                };
                self.stats.jobs_refused += 1;
                let before = self.held.len();
                self.held.retain(|h| h.generation != generation);
                self.stats.dropped += (before - self.held.len()) as u64;
                out.push(PoolEvent::JobRefused {
                    generation,
                    code: e.error_code,
                });
            }
            Mining::SubmitSharesSuccess(s) if s.channel_id == channel_id => {
                self.stats.shares_accepted += u64::from(s.new_submits_accepted_count);
                let last = s.last_sequence_number;
                while let Some(&(seq, _)) = self.in_flight.front() {
                    if seq.wrapping_sub(last) as i32 > 0 {
                        break;
                    }
                    self.in_flight.pop_front();
                }
            }
            Mining::SubmitSharesError(e) if e.channel_id == channel_id => {
                self.stats.shares_rejected += 1;
                if e.error_code == sv2::messages::mining::error_code::STALE_SHARE {
                    self.stats.shares_stale += 1;
                }
                let generation = self
                    .in_flight
                    .iter()
                    .position(|&(seq, _)| seq == e.sequence_number)
                    .and_then(|i| self.in_flight.remove(i))
                    .map(|(_, g)| g)
                    .unwrap_or(0);
                out.push(PoolEvent::ShareRejected {
                    generation,
                    code: e.error_code,
                });
            }
            Mining::NewExtendedMiningJob(_) | Mining::SetNewPrevHash(_) => {
                self.stats.pool_jobs_ignored += 1;
            }
            Mining::CloseChannel(c) if c.channel_id == channel_id => {
                return Err(PoolChannelError::Closed(c.reason_code));
            }
            // Messages for another channel id: the pool only gave us one.
            Mining::SetTarget(_)
            | Mining::SetExtranoncePrefix(_)
            | Mining::SubmitSharesSuccess(_)
            | Mining::SubmitSharesError(_)
            | Mining::CloseChannel(_)
            | Mining::SetGroupChannel(_) => {}
            other => return Err(PoolChannelError::Unexpected(other.name())),
        }
        Ok(())
    }

    /// Sets a declared job on the channel.
    pub fn set_custom_job(&mut self, job: &CustomJob) -> Vec<PoolEvent> {
        let Some(channel_id) = self.opened().map(|o| o.channel_id) else {
            return Vec::new();
        };
        let request_id = self.next_request;
        self.next_request = self.next_request.wrapping_add(1).max(OPEN_REQUEST + 1);
        self.requested.insert(request_id, job.generation);
        vec![PoolEvent::Send(
            SetCustomMiningJob {
                channel_id,
                request_id,
                token: job.token.clone(),
                version: job.version,
                prev_hash: job.prev_hash.0,
                min_ntime: job.min_ntime,
                nbits: job.nbits,
                coinbase_tx_version: job.coinbase.tx_version,
                coinbase_prefix: job.coinbase.script_prefix.clone(),
                coinbase_tx_input_n_sequence: job.coinbase.sequence,
                coinbase_tx_outputs: job.coinbase.outputs.clone(),
                coinbase_tx_locktime: job.coinbase.locktime,
                merkle_path: job.merkle_path.clone(),
            }
            .into(),
        )]
    }

    /// A generation will not be set (its declaration failed): its held shares go.
    pub fn forget_generation(&mut self, generation: u64) {
        let before = self.held.len();
        self.held.retain(|h| h.generation != generation);
        self.stats.dropped += (before - self.held.len()) as u64;
    }

    /// A share the devices found: submitted if it meets the pool's target, held if its job is
    /// not set yet.
    pub fn share(&mut self, s: &TappedShare) -> Vec<PoolEvent> {
        let mut out = Vec::new();
        let Some(o) = self.opened() else {
            return out;
        };
        if !o.target.is_met_by(&s.hash.0) {
            self.stats.below_target += 1;
            return out;
        }
        if s.extranonce.len() != o.extranonce_prefix.len() + o.extranonce_size
            || !s.extranonce.starts_with(&o.extranonce_prefix)
        {
            self.stats.foreign += 1;
            return out;
        }
        match self.job_for(s.generation) {
            Some(job_id) => self.submit(s, job_id, &mut out),
            None => {
                if self.held.len() >= self.cfg.max_held_shares.max(1) {
                    self.held.pop_front();
                    self.stats.dropped += 1;
                }
                self.held.push_back(s.clone());
            }
        }
        out
    }

    fn submit(&mut self, s: &TappedShare, job_id: u32, out: &mut Vec<PoolEvent>) {
        let Some(o) = self.opened() else {
            return;
        };
        let channel_id = o.channel_id;
        let extranonce = s.extranonce[o.extranonce_prefix.len()..].to_vec();
        let sequence_number = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.in_flight.push_back((sequence_number, s.generation));
        if self.in_flight.len() > 4 * self.cfg.max_held_shares.max(1) {
            self.in_flight.pop_front();
        }
        self.stats.shares_submitted += 1;
        let user_identity = self
            .tracking
            .then(|| sv2::tlv::user_identity_of(&s.worker).to_owned());
        self.stats.worker_shares += u64::from(user_identity.is_some());
        out.push(PoolEvent::Send(
            SubmitSharesExtended {
                channel_id,
                sequence_number,
                job_id,
                nonce: s.nonce,
                ntime: s.ntime,
                version: s.version,
                extranonce,
                user_identity,
            }
            .into(),
        ));
    }
}

/// The JDC's `SetupConnection` for `protocol` with `flags`, naming the upstream as it was
/// dialled (`endpoint_host`, `endpoint_port`): to the pool, or to the JDS.
pub(crate) fn setup_connection(
    protocol: u8,
    flags: u32,
    endpoint_host: &str,
    endpoint_port: u16,
) -> Message {
    SetupConnection {
        flags,
        endpoint_host: endpoint_host.to_owned(),
        endpoint_port,
        vendor: "stratumlab".into(),
        firmware: concat!("stratumlab-jdc/", env!("CARGO_PKG_VERSION")).into(),
        ..SetupConnection::new(protocol)
    }
    .into()
}
