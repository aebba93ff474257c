//! One Stratum V2 miner connection past its Noise handshake, sans-IO: messages in, messages
//! out.
//!
//! The shell feeds decoded messages ([`Session::handle_message`]), new work
//! ([`Session::handle_generation`]) and clock ticks ([`Session::handle_tick`]), calls
//! [`Session::flush`] after each read (which sends the batched `SubmitSharesSuccess`es), and
//! writes what [`Session::poll_transmit`] gives once the store ticket of [`Session::take_pending_ticket`] is
//! durable, so that no share is acknowledged before it is safe.
//!
//! Each SV2 channel is one engine [`Channel`]: its jobs, difficulty, duplicate table and
//! vardiff. A standard channel gets the whole coinbase extranonce as its prefix, so its
//! merkle root is fixed per job: computed here once per job and remembered with it, so that a
//! standard share costs one header hash. An extended channel gets a 4-byte prefix and rolls the
//! rest. Every prefix is unique in the pool: it is built from the engine's connection counter,
//! which SV1 connections draw from too.
//!
//! Standard channels paying the same script are one group channel (spec 5.2.3; in pool mode,
//! every standard channel of the connection). A connection that did not set
//! `REQUIRES_STANDARD_JOBS` (a proxy) gets each job once per group, as `NewExtendedMiningJob`
//! and `SetNewPrevHash` on the group's id, and computes every member's merkle root itself; an
//! end device that set it gets a `NewMiningJob` per channel. A channel's first job is its own
//! `NewMiningJob` either way (spec 5.3.15). Shares always come per standard channel.
//!
//! With a job token key ([`Sv2Config::jd_token_key`]), a connection that sets
//! `REQUIRES_WORK_SELECTION` (a farm's Job Declarator Client) may put its own declared jobs on
//! its extended channels with `SetCustomMiningJob` ([`super::custom_job`]); the pool keeps
//! sending its own jobs there too.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ::sv2::messages::common::{
    error_code as setup_error, mining_flags, protocol, SetupConnection, SetupConnectionError,
    SetupConnectionSuccess, PROTOCOL_VERSION,
};
use ::sv2::messages::extensions::{extension, RequestExtensions};
use ::sv2::messages::mining::{
    error_code, CloseChannel, NewExtendedMiningJob, NewMiningJob, OpenExtendedMiningChannel,
    OpenExtendedMiningChannelSuccess, OpenMiningChannelError, OpenStandardMiningChannel,
    OpenStandardMiningChannelSuccess, SetCustomMiningJob, SetCustomMiningJobError,
    SetCustomMiningJobSuccess, SetExtranoncePrefix, SetNewPrevHash, SetTarget, SubmitSharesError,
    SubmitSharesExtended, SubmitSharesStandard, SubmitSharesSuccess, UpdateChannel,
    UpdateChannelError,
};
use ::sv2::messages::{Common, Extensions, Mining};
use ::sv2::negotiation;
use ::sv2::Message;
use events::{JobActivated, JobId, JobSent, Reason, TargetChanged, Verdict};
use primitives::bitcoin::ScriptBuf;
use primitives::{merkle_root_from_branch, Difficulty, Hash256, Target};

use crate::channel::{Channel, HeaderSubmission, Submission};
use crate::engine::{unix_ms as wall_clock_ms, Engine, NotStored, ShareJob, Worker};
use crate::jd_token::TokenKey;
use crate::job::Job;
use crate::job::Solution;
use crate::jobs::Generation;
use crate::store::{ShareBatch, Ticket};
use crate::sv2::custom_job::{self, Context, Refusal};
use crate::sv2::tracking::{TakenOn, Tracked, MAX_TRACKED_WORKERS};
use crate::Timestamp;
use ::sv1::VERSION_ROLLING_MASK;
use mining::Reject;

/// Settings of the SV2 front end.
#[derive(Clone, Debug)]
pub struct Sv2Config {
    /// Channels one connection may open.
    pub max_channels: usize,
    /// Bytes of the coinbase extranonce an extended channel's miner rolls; the rest is the
    /// channel's prefix.
    pub extended_extranonce_size: usize,
    /// Accepted shares acknowledged in one `SubmitSharesSuccess` at most (the shell also
    /// flushes after every read).
    pub success_batch: u32,
    /// Version bits miners may roll (BIP320).
    pub version_mask: u32,
    /// The key the pool shares with its Job Declarator Server: with it, connections may declare
    /// their own jobs (`REQUIRES_WORK_SELECTION`, `SetCustomMiningJob`); without it they may not.
    pub jd_token_key: Option<Arc<TokenKey>>,
    /// Every channel's extranonce prefix starts with these bytes: a proxy serving its own
    /// jobs (a JDC) gives out parts of the extranonce range its pool gave it.
    pub extranonce_base: Vec<u8>,
    /// Extensions a connection must negotiate before it opens a channel (of
    /// [`SUPPORTED_EXTENSIONS`]); a connection that opens one without them is closed.
    pub required_extensions: Vec<u16>,
}

/// The extensions the pool negotiates: 0x0002, worker-specific hashrate tracking (a
/// `user_identity` on each extended share, accounted to that worker: [`super::tracking`]).
pub const SUPPORTED_EXTENSIONS: &[u16] = &[extension::WORKER_HASHRATE_TRACKING];

impl Default for Sv2Config {
    fn default() -> Self {
        Sv2Config {
            max_channels: 64,
            extended_extranonce_size: 4,
            success_batch: 32,
            version_mask: VERSION_ROLLING_MASK,
            jd_token_key: None,
            extranonce_base: Vec::new(),
            required_extensions: Vec::new(),
        }
    }
}

/// Why the session wants its connection closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Close {
    /// `SetupConnection` refused (the error was sent).
    Setup(&'static str),
    /// A message out of place.
    Protocol(String),
}

impl Close {
    /// The reason's name in logs and metrics: `setup` or `protocol`.
    pub fn reason(&self) -> &'static str {
        match self {
            Close::Setup(_) => "setup",
            Close::Protocol(_) => "protocol",
        }
    }
}

/// An SV2 channel's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Header-only: the pool fixes the merkle root (`OpenStandardMiningChannel`).
    Standard,
    /// The miner rolls part of the extranonce (`OpenExtendedMiningChannel`).
    Extended,
}

/// Accepted shares not yet acknowledged.
#[derive(Clone, Copy, Debug, Default)]
struct Pending {
    last_seq: u32,
    count: u32,
    sum: f64,
}

impl Pending {
    /// The acknowledgement of the shares pending, which are then no longer.
    fn success(&mut self, channel_id: u32) -> Option<SubmitSharesSuccess> {
        let p = std::mem::take(self);
        (p.count > 0).then(|| SubmitSharesSuccess {
            channel_id,
            last_sequence_number: p.last_seq,
            new_submits_accepted_count: p.count,
            // Difficulty below 1 rounds up: an accepted share never counts as nothing.
            new_shares_sum: p.sum.ceil() as u64,
        })
    }
}

/// Standard channels of one connection that share a payout, addressed together.
struct Group {
    id: u32,
    payout: ScriptBuf,
}

struct Sv2Channel {
    kind: Kind,
    /// The group channel a standard channel is in; 0 for an extended channel.
    group: u32,
    channel: Channel,
    worker: Worker,
    /// Extension 0x0002: the workers named by this channel's shares.
    tracked: Tracked,
    payout: ScriptBuf,
    /// The target last sent (in the open reply or `SetTarget`).
    sent_target: Target,
    pending: Pending,
}

/// One SV2 Mining Protocol connection, sans IO: messages in, messages out.
pub struct Session {
    engine: Arc<Engine>,
    config: Arc<Sv2Config>,
    conn: u64,
    setup: Option<u32>,
    channels: HashMap<u32, Sv2Channel>,
    /// The connection's group channels, one per payout script (a group's members must work
    /// on the same coinbase).
    groups: Vec<Group>,
    next_job: u32,
    sent_generation: Option<u64>,
    out: VecDeque<Message>,
    records: Option<ShareBatch>,
    close: Option<Close>,
    /// Rejected shares since the last accepted one, stale ones excepted (for admission bans).
    rejected_in_a_row: u32,
    /// The miner's address, for its allowance of new workers (`None`: not limited).
    origin: Option<std::net::IpAddr>,
    /// The engine's extranonce base moves this session's channels follow.
    base_moves: u64,
    /// The extensions negotiated on the connection (extension 0x0001).
    extensions: Vec<u16>,
}

impl Session {
    /// A session for a new connection, awaiting its `SetupConnection`.
    pub fn new(engine: Arc<Engine>, config: Arc<Sv2Config>) -> Session {
        let conn = engine.next_conn();
        engine.stats.connection_opened();
        Session {
            config,
            conn,
            setup: None,
            channels: HashMap::new(),
            groups: Vec::new(),
            next_job: 1,
            sent_generation: None,
            out: VecDeque::new(),
            records: None,
            close: None,
            rejected_in_a_row: 0,
            origin: None,
            base_moves: engine.extranonce_base_moves(),
            extensions: Vec::new(),
            engine,
        }
    }

    /// The connection id (unique for the pool's lifetime).
    pub fn conn(&self) -> u64 {
        self.conn
    }

    /// Why the connection should be closed; `None` while it should not.
    pub fn wants_close(&self) -> Option<&Close> {
        self.close.as_ref()
    }

    /// The miner's address: new users count against its allowance of new workers.
    pub fn set_origin(&mut self, ip: std::net::IpAddr) {
        self.origin = Some(ip);
    }

    /// Rejected shares since the last accepted one, stale ones excepted (for admission bans).
    pub fn rejected_in_a_row(&self) -> u32 {
        self.rejected_in_a_row
    }

    /// Open channels on the connection.
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// The engine channel behind an SV2 channel id (tests, status).
    pub fn channel(&self, id: u32) -> Option<&Channel> {
        self.channels.get(&id).map(|c| &c.channel)
    }

    /// The next message to write, in order; `None` when there is none (docs/architecture.md,
    /// "One sans-IO contract"). Acknowledgements are in it only once [`Session::flush`] has run
    /// and, with a store, after the shell has waited for [`Session::take_pending_ticket`].
    pub fn poll_transmit(&mut self) -> Option<Message> {
        self.out.pop_front()
    }

    /// The store could not confirm the shares of [`Session::take_pending_ticket`] in time: each
    /// `SubmitShares.Success` waiting in the output becomes a `SubmitShares.Error`
    /// (`store-unavailable`) per share it covered, and the connection goes on (the store still
    /// holds the records and writes them when it can, so a share refused here may yet be
    /// credited; none is acknowledged unstored). A batch covers consecutive sequence numbers
    /// ending at its last: a rejection ends the batch before it (see `Pending`), and a client
    /// numbers its submissions one after another.
    pub fn refuse_unconfirmed(&mut self) {
        if !self
            .out
            .iter()
            .any(|m| matches!(m, Message::Mining(Mining::SubmitSharesSuccess(_))))
        {
            return;
        }
        let out = std::mem::take(&mut self.out);
        for m in out {
            match m {
                Message::Mining(Mining::SubmitSharesSuccess(ok)) => {
                    let count = ok.new_submits_accepted_count.max(1);
                    let first = ok.last_sequence_number.wrapping_sub(count - 1);
                    for i in 0..count {
                        self.out.push_back(
                            SubmitSharesError {
                                channel_id: ok.channel_id,
                                sequence_number: first.wrapping_add(i),
                                error_code: error_code::STORE_UNAVAILABLE.into(),
                            }
                            .into(),
                        );
                    }
                }
                other => self.out.push_back(other),
            }
        }
    }

    /// The group channel ids of this connection.
    pub fn group_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.groups.iter().map(|g| g.id)
    }

    /// The connection gets a `NewMiningJob` per standard channel (`REQUIRES_STANDARD_JOBS`)
    /// rather than one `NewExtendedMiningJob` per group.
    /// The most extranonce bytes an extended channel may roll: what the coinbase's extranonce
    /// leaves after the prefix that keeps channels apart (the base, and four bytes of id).
    fn max_rolled(&self) -> usize {
        let total = self.engine.config.jobs.extranonce_len;
        let kept = (self.config.extranonce_base.len() + 4).min(total);
        (total - kept).max(self.config.extended_extranonce_size.min(total))
    }

    fn requires_standard_jobs(&self) -> bool {
        self.setup
            .is_some_and(|f| f & mining_flags::REQUIRES_STANDARD_JOBS != 0)
    }

    /// The store ticket the output's acknowledgements wait for (see
    /// [`ShareBatch::take_ticket`]).
    pub fn take_pending_ticket(&mut self) -> Option<Ticket> {
        self.records.as_mut()?.take_ticket()
    }

    /// A message, at `now` on the caller's clock. The wall clock is read only to check the
    /// expiry of a declared job's token ([`Session::handle_message_at`] passes it in).
    pub fn handle_message(&mut self, m: Message, now: Timestamp) {
        self.dispatch(m, now, None)
    }

    /// [`Session::handle_message`] with the wall clock's Unix milliseconds given.
    pub fn handle_message_at(&mut self, m: Message, now: Timestamp, unix_ms: u64) {
        self.dispatch(m, now, Some(unix_ms))
    }

    fn dispatch(&mut self, m: Message, now: Timestamp, unix_ms: Option<u64>) {
        if self.close.is_some() {
            return;
        }
        match (self.setup, m) {
            (None, Message::Common(Common::SetupConnection(s))) => self.on_setup(s),
            (Some(_), Message::Common(Common::SetupConnection(_))) => {
                self.close = Some(Close::Protocol("SetupConnection repeated".into()))
            }
            (None, other) => {
                self.close = Some(Close::Protocol(format!(
                    "{} before SetupConnection",
                    other.name()
                )))
            }
            (Some(_), Message::Extensions(Extensions::RequestExtensions(r))) => {
                self.on_request_extensions(r)
            }
            (Some(_), Message::Mining(m)) if !self.has_required_extensions() => {
                self.close = Some(Close::Protocol(format!(
                    "{} before negotiating the required extensions {:#06x?}",
                    m.name(),
                    self.config.required_extensions
                )))
            }
            (Some(_), Message::Mining(Mining::SetCustomMiningJob(m))) => {
                self.set_custom_job(m, now, unix_ms.unwrap_or_else(wall_clock_ms))
            }
            (Some(_), Message::Mining(m)) => self.on_mining(m, now),
            (Some(_), other) => {
                self.close = Some(Close::Protocol(format!("unexpected {}", other.name())))
            }
        }
    }

    fn on_setup(&mut self, s: SetupConnection) {
        let refuse = |this: &mut Session, code: &'static str, flags: u32| {
            this.out.push_back(
                SetupConnectionError {
                    flags,
                    error_code: code.into(),
                }
                .into(),
            );
            this.close = Some(Close::Setup(code));
        };
        if s.protocol != protocol::MINING {
            return refuse(self, setup_error::UNSUPPORTED_PROTOCOL, 0);
        }
        if !(s.min_version..=s.max_version).contains(&PROTOCOL_VERSION) {
            return refuse(self, setup_error::PROTOCOL_VERSION_MISMATCH, 0);
        }
        let mut supported =
            mining_flags::REQUIRES_STANDARD_JOBS | mining_flags::REQUIRES_VERSION_ROLLING;
        // Declared jobs need the key to check their Job Declarator's tokens.
        if self.config.jd_token_key.is_some() {
            supported |= mining_flags::REQUIRES_WORK_SELECTION;
        }
        let unsupported = s.flags & !supported;
        if unsupported != 0 {
            // The spec asks for the flags that made it fail.
            return refuse(self, setup_error::UNSUPPORTED_FEATURE_FLAGS, unsupported);
        }
        self.setup = Some(s.flags);
        self.out.push_back(
            SetupConnectionSuccess {
                used_version: PROTOCOL_VERSION,
                // Neither fixed versions nor extended-only: standard channels roll versions.
                flags: 0,
            }
            .into(),
        );
    }

    /// Extension 0x0001: answers with what the pool supports of the request; the connection
    /// uses that from now on (nothing after an error).
    fn on_request_extensions(&mut self, r: RequestExtensions) {
        let (reply, using) =
            negotiation::answer(&r, SUPPORTED_EXTENSIONS, &self.config.required_extensions);
        tracing::debug!(conn = self.conn, requested = ?r.requested_extensions, using = ?using, "sv2: extensions negotiated");
        self.extensions = using;
        self.out.push_back(reply);
    }

    /// The extensions the connection negotiated.
    pub fn extensions(&self) -> &[u16] {
        &self.extensions
    }

    /// Workers named by the shares of the connection's channels (extension 0x0002), besides
    /// the channels' own.
    pub fn tracked_workers(&self) -> usize {
        self.channels.values().map(|c| c.tracked.workers()).sum()
    }

    fn has_required_extensions(&self) -> bool {
        self.config
            .required_extensions
            .iter()
            .all(|e| self.extensions.contains(e))
    }

    fn tracks_workers(&self) -> bool {
        self.extensions
            .contains(&extension::WORKER_HASHRATE_TRACKING)
    }

    fn on_mining(&mut self, m: Mining, now: Timestamp) {
        match m {
            Mining::OpenStandardMiningChannel(o) => self.open_standard(o, now),
            Mining::OpenExtendedMiningChannel(o) => self.open_extended(o, now),
            Mining::SubmitSharesStandard(s) => self.submit_standard(s, now),
            Mining::SubmitSharesExtended(s) => self.submit_extended(s, now),
            Mining::UpdateChannel(u) => self.update_channel(u, now),
            Mining::CloseChannel(c) => self.close_channel(c, now),
            other => {
                tracing::debug!(conn = self.conn, message = other.name(), "sv2: ignored")
            }
        }
    }

    // ---- Channels ---------------------------------------------------------------------------

    /// What opening a channel for `user` needs, checked in this order: room for a channel, a
    /// payout for the user, no more extranonce than the pool rolls (`min_extranonce`: none on
    /// a standard channel), a valid hash rate and target for the starting difficulty; the
    /// payout and that difficulty, or the error code the opening is refused with.
    ///
    /// Last, a user this address may not add now is refused as a user the pool does not take:
    /// asked after every other check, so that an opening refused anyway spends none of the
    /// address's allowance of new names.
    fn admit(
        &self,
        user: &str,
        hash_rate: f32,
        max_target: Target,
        min_extranonce: usize,
        now: Timestamp,
    ) -> Result<(ScriptBuf, Difficulty), &'static str> {
        if self.channels.len() >= self.config.max_channels {
            return Err(error_code::CHANNEL_CAPACITY_EXHAUSTED);
        }
        // Solo mode: the identity is the payout address, optionally followed by ".worker".
        let account = user.split('.').next().unwrap_or(user);
        let payout = self
            .engine
            .payout_for(account)
            .ok_or(error_code::UNKNOWN_USER)?;
        if min_extranonce > self.max_rolled() {
            return Err(error_code::UNSUPPORTED_MIN_EXTRANONCE_SIZE);
        }
        let spm = self.engine.channel_config.vardiff.shares_per_minute;
        let d = self.start_difficulty(hash_rate, max_target, spm)?;
        if !self.engine.may_add_worker(user, self.origin, now) {
            return Err(error_code::UNKNOWN_USER);
        }
        Ok((payout, d))
    }

    /// The starting difficulty: what makes the nominal hash rate send the vardiff's share rate,
    /// never easier than the miner's maximum target.
    fn start_difficulty(
        &self,
        hash_rate: f32,
        max_target: Target,
        spm: f64,
    ) -> Result<Difficulty, &'static str> {
        if !hash_rate.is_finite() || hash_rate < 0.0 {
            return Err(error_code::INVALID_NOMINAL_HASHRATE);
        }
        let d = if hash_rate > 0.0 && spm > 0.0 {
            Difficulty::saturating(f64::from(hash_rate) * 60.0 / spm / 4_294_967_296.0)
        } else {
            self.engine.config.start_difficulty
        };
        if max_target.is_zero() {
            return Err(error_code::MAX_TARGET_OUT_OF_RANGE);
        }
        let floor = Difficulty::from_target(max_target);
        Ok(if d < floor { floor } else { d })
    }

    #[allow(clippy::too_many_arguments)]
    fn new_channel(
        &mut self,
        kind: Kind,
        // Extranonce bytes the miner rolls (none on a standard channel).
        rolled: usize,
        group: u32,
        user: &str,
        payout: ScriptBuf,
        max_target: Target,
        start: Difficulty,
        now: Timestamp,
    ) -> (u32, Vec<u8>) {
        let total = self.engine.config.jobs.extranonce_len;
        let rolled = rolled.min(total);
        let id = self.engine.next_conn();
        // Standard: zeros then the id (no SV1 or extended prefix starts with zeros: their
        // first bytes are a non-zero id). Extended: the id's low bytes.
        let prefix_len = total - rolled;
        let mut prefix = vec![0u8; prefix_len];
        let moved = self.engine.moved_extranonce_base();
        let base = moved.as_deref().unwrap_or(&self.config.extranonce_base);
        let base = &base[..base.len().min(prefix_len)];
        prefix[..base.len()].copy_from_slice(base);
        let id_bytes = id.to_be_bytes();
        let n = (prefix_len - base.len()).min(4);
        match kind {
            Kind::Standard => prefix[prefix_len - n..].copy_from_slice(&id_bytes[8 - n..]),
            Kind::Extended => {
                prefix[base.len()..base.len() + n].copy_from_slice(&id_bytes[8 - n..])
            }
        }
        let mut channel = Channel::new(
            self.engine.channel_config.clone(),
            prefix.clone(),
            rolled,
            start,
            now,
        );
        channel.set_version_mask(self.config.version_mask);
        channel.accept_current_target_on_sent_jobs();
        // Vardiff never goes easier than the miner's maximum target.
        channel.set_minimum(Difficulty::from_target(max_target), now);
        let worker = self.engine.attach_worker(user, now);
        let channel_id = self.engine.next_channel_id();
        let target = channel.target();
        self.channels.insert(
            channel_id,
            Sv2Channel {
                kind,
                group,
                channel,
                worker,
                tracked: Tracked::default(),
                payout,
                sent_target: target,
                pending: Pending::default(),
            },
        );
        self.target_event(channel_id, target);
        (channel_id, prefix)
    }

    fn open_standard(&mut self, o: OpenStandardMiningChannel, now: Timestamp) {
        let opened = self.admit(&o.user_identity, o.nominal_hash_rate, o.max_target, 0, now);
        let (payout, d) = match opened {
            Ok(x) => x,
            Err(code) => return self.open_error(o.request_id, code),
        };
        let group = self.group_for(&payout);
        let (channel_id, prefix) = self.new_channel(
            Kind::Standard,
            0,
            group,
            &o.user_identity,
            payout,
            o.max_target,
            d,
            now,
        );
        let target = self.channels[&channel_id].channel.target();
        self.out.push_back(
            OpenStandardMiningChannelSuccess {
                request_id: o.request_id,
                channel_id,
                target,
                extranonce_prefix: prefix,
                group_channel_id: group,
            }
            .into(),
        );
        self.first_job(channel_id, now);
    }

    fn open_extended(&mut self, o: OpenExtendedMiningChannel, now: Timestamp) {
        let opened = self.admit(
            &o.user_identity,
            o.nominal_hash_rate,
            o.max_target,
            usize::from(o.min_extranonce_size),
            now,
        );
        let (payout, d) = match opened {
            Ok(x) => x,
            Err(code) => return self.open_error(o.request_id, code),
        };
        let rolled = self
            .config
            .extended_extranonce_size
            .max(usize::from(o.min_extranonce_size));
        let (channel_id, prefix) = self.new_channel(
            Kind::Extended,
            rolled,
            0,
            &o.user_identity,
            payout,
            o.max_target,
            d,
            now,
        );
        let c = &self.channels[&channel_id].channel;
        // Extended channels come from proxies and farms, a few per pool: worth a line each.
        tracing::info!(
            conn = self.conn,
            channel = channel_id,
            user = %o.user_identity,
            extranonce_size = c.extranonce_len(),
            hash_rate = o.nominal_hash_rate,
            "sv2: extended channel opened"
        );
        self.out.push_back(
            OpenExtendedMiningChannelSuccess {
                request_id: o.request_id,
                channel_id,
                target: c.target(),
                extranonce_size: c.extranonce_len() as u16,
                extranonce_prefix: prefix,
                // Extended channels are not grouped: each gets its own jobs.
                group_channel_id: 0,
            }
            .into(),
        );
        self.first_job(channel_id, now);
    }

    /// The group of the standard channels paying `payout`, opened on first use.
    fn group_for(&mut self, payout: &ScriptBuf) -> u32 {
        if let Some(g) = self.groups.iter().find(|g| &g.payout == payout) {
            return g.id;
        }
        let id = self.engine.next_channel_id();
        self.groups.push(Group {
            id,
            payout: payout.clone(),
        });
        id
    }

    fn open_error(&mut self, request_id: u32, code: &str) {
        self.out.push_back(
            OpenMiningChannelError {
                request_id,
                error_code: code.into(),
            }
            .into(),
        );
    }

    fn update_channel(&mut self, u: UpdateChannel, now: Timestamp) {
        if !self.channels.contains_key(&u.channel_id) {
            return self.out.push_back(
                UpdateChannelError {
                    channel_id: u.channel_id,
                    error_code: error_code::INVALID_CHANNEL_ID.into(),
                }
                .into(),
            );
        }
        // A channel whose shares name several workers aims at their rates together.
        let spm = self.channels[&u.channel_id].channel.shares_per_minute();
        let d = match self.start_difficulty(u.nominal_hash_rate, u.maximum_target, spm) {
            Ok(d) => d,
            Err(code) => {
                return self.out.push_back(
                    UpdateChannelError {
                        channel_id: u.channel_id,
                        error_code: code.into(),
                    }
                    .into(),
                )
            }
        };
        // On a connection whose shares name their workers, a rate stated for the channel does
        // not say how many workers share it, and the aim counts only those seen so far (a
        // translator updates its channel seconds after opening, before most of its devices
        // have sent a share): such a rate may lower the difficulty, never raise it. Raising it
        // waits for vardiff, which sees the shares.
        let may_raise = !self.tracks_workers();
        let c = self.channels.get_mut(&u.channel_id).expect("checked");
        c.channel
            .set_minimum(Difficulty::from_target(u.maximum_target), now);
        if may_raise || d.as_f64() < c.channel.difficulty().as_f64() {
            c.channel.set_difficulty(d, now);
        }
        self.send_target_if_changed(u.channel_id);
    }

    fn close_channel(&mut self, c: CloseChannel, now: Timestamp) {
        self.flush();
        // Closing a group closes every channel in it (spec 5.3.9).
        let closing: Vec<u32> = if self.groups.iter().any(|g| g.id == c.channel_id) {
            self.groups.retain(|g| g.id != c.channel_id);
            self.channels
                .iter()
                .filter(|(_, ch)| ch.group == c.channel_id)
                .map(|(id, _)| *id)
                .collect()
        } else {
            vec![c.channel_id]
        };
        for id in closing {
            if let Some(ch) = self.channels.remove(&id) {
                tracing::debug!(conn = self.conn, channel = id, reason = %c.reason_code, "sv2: channel closed");
                self.engine.detach_worker(&ch.worker, now);
                ch.tracked.detach_all(&self.engine, now);
            }
        }
    }

    // ---- Declared jobs ----------------------------------------------------------------------

    /// The key to check declared jobs with, if the pool has one and the connection declares
    /// its own work (`REQUIRES_WORK_SELECTION`).
    fn work_selection(&self) -> Option<Arc<TokenKey>> {
        let declares = self
            .setup
            .is_some_and(|f| f & mining_flags::REQUIRES_WORK_SELECTION != 0);
        self.config.jd_token_key.clone().filter(|_| declares)
    }

    /// `SetCustomMiningJob`: checked, then issued on the channel under a fresh job id, or
    /// refused with the spec's code.
    fn set_custom_job(&mut self, m: SetCustomMiningJob, now: Timestamp, unix_ms: u64) {
        let (channel_id, request_id) = (m.channel_id, m.request_id);
        match self.declared_job(&m, now, unix_ms) {
            Ok((job, job_id)) => {
                tracing::debug!(
                    conn = self.conn,
                    channel = channel_id,
                    job_id,
                    prev_hash = %job.prev_hash,
                    height = job.template.height,
                    "sv2: declared job accepted"
                );
                self.out.push_back(
                    SetCustomMiningJobSuccess {
                        channel_id,
                        request_id,
                        job_id,
                    }
                    .into(),
                );
            }
            Err(r) => {
                tracing::info!(
                    conn = self.conn,
                    channel = channel_id,
                    code = %r.code,
                    why = %r.why,
                    "sv2: declared job refused"
                );
                self.out.push_back(
                    SetCustomMiningJobError {
                        channel_id,
                        request_id,
                        error_code: r.code,
                    }
                    .into(),
                );
            }
        }
    }

    fn declared_job(
        &mut self,
        m: &SetCustomMiningJob,
        now: Timestamp,
        unix_ms: u64,
    ) -> Result<(Arc<Job>, u32), Refusal> {
        let Some(key) = self.work_selection() else {
            return Err(Refusal {
                code: custom_job::JD_NOT_SUPPORTED.into(),
                why: "the connection did not set REQUIRES_WORK_SELECTION, or the pool has no \
                      job token key"
                    .into(),
            });
        };
        // Only extended channels take declared jobs (spec 5.3.18; groups here hold standard
        // channels only, which the spec says to ignore).
        let extranonce_len = match self.channels.get(&m.channel_id) {
            Some(c) if c.kind == Kind::Extended => {
                c.channel.extranonce_prefix().len() + c.channel.extranonce_len()
            }
            _ => {
                return Err(Refusal {
                    code: error_code::INVALID_CHANNEL_ID.into(),
                    why: format!("no extended channel {}", m.channel_id),
                })
            }
        };
        let latest = self.engine.latest();
        let cx = Context {
            key: &key,
            unix_ms,
            latest: latest.as_deref(),
            tips: self.engine.tips(),
            extranonce_len,
        };
        let (job, claims) = custom_job::declared_job(m, &cx, self.engine.declared_job_id(), now)?;
        let job = Arc::new(job);
        // One job per declared token (checked last, so a job refused for its fields does not
        // use the token up).
        if !self.engine.used_tokens.claim(&claims, unix_ms) {
            return Err(Refusal {
                code: error_code::INVALID_MINING_JOB_TOKEN.into(),
                why: format!("token {} already set a job", claims.id),
            });
        }
        // Kept in the store before the job's success goes out, so that a restarted pool
        // refuses the token too.
        if let (Some(store), Some(records)) =
            (&self.engine.store, records(&mut self.records, &self.engine))
        {
            let used = crate::store::UsedToken {
                id: claims.id,
                expires_ms: claims.expires_ms,
                time_ms: unix_ms,
            };
            match store.record_token(used) {
                Ok(t) => records.wait_also(t),
                Err(e) => {
                    tracing::warn!(conn = self.conn, token = claims.id, error = %e, "store: used token not recorded")
                }
            }
        }
        let job_id = self.next_job_id();
        let c = self.channels.get_mut(&m.channel_id).expect("checked");
        c.channel.issue(job.clone(), u64::from(job_id), now);
        Ok((job, job_id))
    }

    // ---- Jobs -------------------------------------------------------------------------------

    /// New work for every channel, or none (`None`: the pool stopped serving).
    pub fn handle_generation(&mut self, g: Option<&Arc<Generation>>, now: Timestamp) {
        if let Some(r) = &mut self.records {
            r.flush();
        }
        let Some(g) = g else { return };
        if self.follow_base(g, now) {
            return;
        }
        if self.sent_generation == Some(g.id) {
            return;
        }
        self.sent_generation = Some(g.id);
        let grouped = !self.requires_standard_jobs();
        if grouped {
            for k in 0..self.groups.len() {
                self.send_group_job(self.groups[k].id, g, g.clean, now);
            }
        }
        let mut ids: Vec<u32> = self
            .channels
            .iter()
            .filter(|(_, c)| !(grouped && c.kind == Kind::Standard))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            self.send_job(id, g, g.clean, now);
        }
    }

    /// Moves every channel onto the engine's new extranonce base, if it moved since this
    /// session last looked: each channel is told its new prefix (if it changed) and gets a
    /// clean job of `g` (work sent before is stale). Returns whether it did.
    fn follow_base(&mut self, g: &Arc<Generation>, now: Timestamp) -> bool {
        let moves = self.engine.extranonce_base_moves();
        if moves == self.base_moves {
            return false;
        }
        self.base_moves = moves;
        let Some(base) = self.engine.moved_extranonce_base() else {
            return false;
        };
        let mut ids: Vec<u32> = self.channels.keys().copied().collect();
        ids.sort_unstable();
        for &id in &ids {
            let c = self.channels.get_mut(&id).expect("listed");
            let old = c.channel.extranonce_prefix();
            let n = base.len().min(old.len());
            let mut prefix = old.to_vec();
            prefix[..n].copy_from_slice(&base[..n]);
            let changed = prefix != old;
            // Work sent before is stale either way (a move to the same base reissues work).
            c.channel.set_extranonce_prefix(prefix.clone());
            if changed {
                self.out.push_back(
                    SetExtranoncePrefix {
                        channel_id: id,
                        extranonce_prefix: prefix,
                    }
                    .into(),
                );
            }
        }
        tracing::info!(
            conn = self.conn,
            channels = ids.len(),
            "sv2: channels moved to a new extranonce base"
        );
        self.sent_generation = Some(g.id);
        let grouped = !self.requires_standard_jobs();
        if grouped {
            for k in 0..self.groups.len() {
                self.send_group_job(self.groups[k].id, g, true, now);
            }
        }
        for id in ids {
            if !(grouped && self.channels[&id].kind == Kind::Standard) {
                self.send_job(id, g, true, now);
            }
        }
        true
    }

    fn next_job_id(&mut self) -> u32 {
        let job_id = self.next_job;
        self.next_job = self.next_job.wrapping_add(1).max(1);
        job_id
    }

    /// A job of `g` for every standard channel of a group, sent once on the group channel: the
    /// client derives each member's merkle root from its prefix (spec 5.3.16); the pool
    /// computes the same roots to judge the members' shares.
    fn send_group_job(&mut self, group_id: u32, g: &Arc<Generation>, clean: bool, now: Timestamp) {
        let Some(group) = self.groups.iter().find(|x| x.id == group_id) else {
            return;
        };
        let mut members: Vec<u32> = self
            .channels
            .iter()
            .filter(|(_, c)| c.group == group_id)
            .map(|(id, _)| *id)
            .collect();
        if members.is_empty() {
            return;
        }
        members.sort_unstable();
        let job = match g.job(&self.engine.job_payout(&group.payout)) {
            Ok(j) => j,
            Err(e) => {
                tracing::error!(conn = self.conn, error = %e, "cannot build job");
                return;
            }
        };
        let job_id = self.next_job_id();
        for id in members {
            let c = self.channels.get_mut(&id).expect("listed");
            let Some(root) = standard_merkle_root(&job, c.channel.extranonce_prefix()) else {
                tracing::error!(
                    conn = self.conn,
                    "standard channel prefix does not fill the extranonce"
                );
                continue;
            };
            c.channel
                .issue_standard(job.clone(), u64::from(job_id), root, now);
            let target = c.channel.target();
            self.job_sent_event(id, job_id, &job, target, clean);
            if clean {
                self.job_activated_event(id, job_id, &job);
            }
        }
        let min_ntime = (!clean).then_some(job.ntime);
        let rolling = self.config.version_mask != 0;
        let m = extended_job(&job, group_id, job_id, min_ntime, rolling);
        self.out.push_back(m.into());
        if clean {
            self.out.push_back(
                SetNewPrevHash {
                    channel_id: group_id,
                    job_id,
                    prev_hash: job.prev_hash.0,
                    min_ntime: job.ntime,
                    nbits: job.bits.to_consensus(),
                }
                .into(),
            );
        }
    }

    fn job_sent_event(&self, channel_id: u32, job_id: u32, job: &Job, target: Target, clean: bool) {
        if self.engine.events.is_enabled() {
            self.engine.events.emit(JobSent {
                conn: self.conn,
                channel: Some(channel_id),
                job_id: JobId::Num(u64::from(job_id)),
                template_id: Some(job.generation),
                fingerprint: (!clean).then_some(job.fingerprint),
                prev_hash: (!clean).then_some(job.prev_hash),
                target,
                clean,
                future: clean,
            });
        }
    }

    fn job_activated_event(&self, channel_id: u32, job_id: u32, job: &Job) {
        if self.engine.events.is_enabled() {
            self.engine.events.emit(JobActivated {
                conn: self.conn,
                channel: Some(channel_id),
                job_id: JobId::Num(u64::from(job_id)),
                prev_hash: job.prev_hash,
                fingerprint: Some(job.fingerprint),
            });
        }
    }

    fn first_job(&mut self, channel_id: u32, now: Timestamp) {
        if let Some(g) = self.engine.current() {
            // Only this channel gets `g` here. The connection's other channels may still be on
            // older work (the pool adopted `g` while this one opened, before the connection was
            // told): unless there are none, `handle_generation(g)` must not skip them.
            if self.channels.len() == 1 {
                self.sent_generation = Some(g.id);
            }
            // A channel's first job always comes as future job + SetNewPrevHash.
            self.send_job(channel_id, &g, true, now);
        }
    }

    /// A job of `g` for one channel: future plus `SetNewPrevHash` on a new tip (`clean`),
    /// otherwise active at once.
    fn send_job(&mut self, channel_id: u32, g: &Arc<Generation>, clean: bool, now: Timestamp) {
        let Some(c) = self.channels.get_mut(&channel_id) else {
            return;
        };
        let job = match g.job(&self.engine.job_payout(&c.payout)) {
            Ok(j) => j,
            Err(e) => {
                tracing::error!(conn = self.conn, error = %e, "cannot build job");
                return;
            }
        };
        let job_id = self.next_job;
        self.next_job = self.next_job.wrapping_add(1).max(1);
        let min_ntime = (!clean).then_some(job.ntime);
        let mut root = None;
        let msg: Message = match c.kind {
            Kind::Standard => {
                let Some(r) = standard_merkle_root(&job, c.channel.extranonce_prefix()) else {
                    tracing::error!(
                        conn = self.conn,
                        "standard channel prefix does not fill the extranonce"
                    );
                    return;
                };
                root = Some(r);
                NewMiningJob {
                    channel_id,
                    job_id,
                    min_ntime,
                    version: job.version,
                    merkle_root: r.0,
                }
                .into()
            }
            Kind::Extended => {
                let rolling = self.config.version_mask != 0;
                extended_job(&job, channel_id, job_id, min_ntime, rolling).into()
            }
        };
        self.out.push_back(msg);
        match root {
            Some(r) => c
                .channel
                .issue_standard(job.clone(), u64::from(job_id), r, now),
            None => c.channel.issue(job.clone(), u64::from(job_id), now),
        };
        let target = c.channel.target();
        self.job_sent_event(channel_id, job_id, &job, target, clean);
        if clean {
            self.out.push_back(
                SetNewPrevHash {
                    channel_id,
                    job_id,
                    prev_hash: job.prev_hash.0,
                    min_ntime: job.ntime,
                    nbits: job.bits.to_consensus(),
                }
                .into(),
            );
            self.job_activated_event(channel_id, job_id, &job);
        }
    }

    /// Vardiff for quiet miners, and a moved extranonce base (see
    /// [`Engine::move_extranonce_base`]) followed even between templates.
    pub fn handle_tick(&mut self, now: Timestamp) {
        if let Some(r) = &mut self.records {
            r.flush();
        }
        if self.base_moves != self.engine.extranonce_base_moves() {
            if let Some(g) = self.engine.current() {
                self.follow_base(&g, now);
            }
        }
        let ids: Vec<u32> = self.channels.keys().copied().collect();
        for id in ids {
            let c = self.channels.get_mut(&id).expect("listed");
            if c.tracked.expire(&self.engine, now) {
                c.channel.scale_share_rate(aim(&c.tracked));
            }
            if c.channel.handle_tick(now).is_some() {
                self.engine.stats.vardiff_changed();
                self.send_target_if_changed(id);
            }
        }
    }

    fn send_target_if_changed(&mut self, channel_id: u32) {
        let Some(c) = self.channels.get_mut(&channel_id) else {
            return;
        };
        let target = c.channel.target();
        if target == c.sent_target {
            return;
        }
        c.sent_target = target;
        self.out.push_back(
            SetTarget {
                channel_id,
                maximum_target: target,
            }
            .into(),
        );
        self.target_event(channel_id, target);
    }

    fn target_event(&self, channel_id: u32, target: Target) {
        if self.engine.events.is_enabled() {
            self.engine.events.emit(TargetChanged {
                conn: self.conn,
                channel: Some(channel_id),
                target,
            });
        }
    }

    // ---- Shares -----------------------------------------------------------------------------

    fn submit_standard(&mut self, s: SubmitSharesStandard, now: Timestamp) {
        self.submit(
            s.channel_id,
            s.sequence_number,
            s.job_id,
            &[],
            s.ntime,
            s.nonce,
            s.version,
            Kind::Standard,
            None,
            now,
        );
    }

    fn submit_extended(&mut self, s: SubmitSharesExtended, now: Timestamp) {
        // The worker's name counts only on a connection that negotiated extension 0x0002.
        let identity = s.user_identity.as_deref().filter(|_| self.tracks_workers());
        self.submit(
            s.channel_id,
            s.sequence_number,
            s.job_id,
            &s.extranonce,
            s.ntime,
            s.nonce,
            s.version,
            Kind::Extended,
            identity,
            now,
        );
    }

    /// Judges one share; accepted ones are acknowledged in batches, rejected ones at once
    /// (after the batch before them, so sequence numbers stay in order). Nothing is allocated
    /// or reference-counted per accepted share.
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        channel_id: u32,
        seq: u32,
        job_id: u32,
        extranonce: &[u8],
        ntime: u32,
        nonce: u32,
        version: u32,
        kind: Kind,
        // Extension 0x0002's `user_identity`, when the connection negotiated it.
        identity: Option<&str>,
        now: Timestamp,
    ) -> Verdict {
        // Whether the connection may track one more worker, asked only of shares naming one.
        let room = identity.is_some()
            && self
                .channels
                .values()
                .map(|c| c.tracked.entries())
                .sum::<usize>()
                < MAX_TRACKED_WORKERS;
        let Some(c) = self
            .channels
            .get_mut(&channel_id)
            .filter(|c| c.kind == kind)
        else {
            self.engine.rejected(
                self.conn,
                u64::from(seq),
                ShareJob::Sv2 {
                    channel: channel_id,
                    job_id,
                },
                None,
                Reason::Other,
                nonce,
                0.0,
                now,
            );
            self.rejected_in_a_row = self.rejected_in_a_row.saturating_add(1);
            self.share_error(channel_id, seq, error_code::INVALID_CHANNEL_ID);
            return Verdict::Rejected(Reason::Other);
        };
        let engine = &self.engine;
        let conn = self.conn;
        let origin = self.origin;
        // The version must keep the job's bits outside the rolling mask.
        let mask = c.channel.version_mask();
        let rolled_outside = c
            .channel
            .latest_job()
            .filter(|j| j.wire_id == u64::from(job_id))
            .or_else(|| {
                c.channel
                    .jobs()
                    .filter(|j| j.wire_id == u64::from(job_id))
                    .last()
            })
            .is_some_and(|j| (version ^ j.job.version) & !mask != 0);
        let sub = Submission {
            wire_id: u64::from(job_id),
            extranonce,
            ntime,
            nonce,
            version_bits: Some(version & mask),
        };
        let verdict = if rolled_outside {
            Err(Reject::VersionBits)
        } else {
            let judged = match kind {
                // The merkle root is the one sent with the job: one header hash.
                Kind::Standard => c.channel.submit_header(
                    &HeaderSubmission {
                        wire_id: sub.wire_id,
                        ntime,
                        nonce,
                        version_bits: sub.version_bits,
                    },
                    engine.epoch(),
                    now,
                ),
                Kind::Extended => c.channel.submit(&sub, engine.epoch(), now),
            };
            match judged {
                Err(r) => Err(r),
                Ok(a) => {
                    // The worker the share names is taken on once a share of it is good.
                    let user: &str = &c.worker.name;
                    let taken = match identity {
                        Some(id) => {
                            let spm = engine.channel_config.vardiff.shares_per_minute;
                            let interval_ms = if spm > 0.0 {
                                (60_000.0 / spm) as u64
                            } else {
                                0
                            };
                            c.tracked
                                .take_on(engine, origin, user, id, room, interval_ms, now)
                        }
                        None => TakenOn::Unchanged,
                    };
                    let worker = match identity.and_then(|id| c.tracked.get_mut(user, id)) {
                        Some(w) => w,
                        None => &mut c.worker,
                    };
                    if worker.key.is_none() {
                        engine.retry_worker_key(worker);
                    }
                    let worker: &Worker = worker;
                    if a.block {
                        let solution = Solution {
                            extranonce_prefix: a.extranonce_prefix,
                            extranonce,
                            version: u32::from_le_bytes([
                                a.header[0],
                                a.header[1],
                                a.header[2],
                                a.header[3],
                            ]),
                            ntime,
                            nonce,
                        };
                        engine.found_block(
                            a.job,
                            &solution,
                            &a.header,
                            a.hash,
                            conn,
                            Some(worker),
                            now,
                        );
                    }
                    let records = records(&mut self.records, engine);
                    let stored = engine.accepted(
                        conn,
                        u64::from(seq),
                        ShareJob::Sv2 {
                            channel: channel_id,
                            job_id,
                        },
                        worker,
                        &a,
                        nonce,
                        now,
                        records,
                    );
                    let credited = a.credited.as_f64();
                    let retarget = a.retarget.is_some();
                    match stored {
                        Ok(()) => {
                            engine.tap_share(&a, worker, extranonce, ntime, nonce);
                            Ok((credited, retarget, taken))
                        }
                        Err(why) => {
                            // Never acknowledge a share the store did not take.
                            let code = match why {
                                NotStored::Overloaded => error_code::INVALID_SHARE,
                                NotStored::StoreFailing => error_code::STORE_UNAVAILABLE,
                            };
                            self.share_error(channel_id, seq, code);
                            return Verdict::Rejected(Reason::Other);
                        }
                    }
                }
            }
        };
        match verdict {
            Ok((credited, retarget, taken)) => {
                self.rejected_in_a_row = 0;
                let batch = self.config.success_batch.max(1);
                let c = self.channels.get_mut(&channel_id).expect("judged");
                if taken == TakenOn::Added {
                    c.channel.scale_share_rate(aim(&c.tracked));
                }
                c.pending.last_seq = seq;
                c.pending.count += 1;
                c.pending.sum += credited;
                if c.pending.count >= batch {
                    self.flush_channel(channel_id);
                }
                if retarget {
                    self.engine.stats.vardiff_changed();
                    self.flush_channel(channel_id);
                    self.send_target_if_changed(channel_id);
                }
                Verdict::Accepted
            }
            Err(r) => {
                let c = &self.channels[&channel_id];
                let worker = identity
                    .and_then(|id| c.tracked.get(&c.worker.name, id))
                    .unwrap_or(&c.worker);
                self.engine.rejected(
                    self.conn,
                    u64::from(seq),
                    ShareJob::Sv2 {
                        channel: channel_id,
                        job_id,
                    },
                    Some(worker),
                    r.reason(),
                    nonce,
                    c.channel.difficulty().as_f64(),
                    now,
                );
                if r != Reject::Stale {
                    self.rejected_in_a_row = self.rejected_in_a_row.saturating_add(1);
                }
                self.share_error(channel_id, seq, reject_code(r));
                Verdict::Rejected(r.reason())
            }
        }
    }

    fn share_error(&mut self, channel_id: u32, seq: u32, code: &str) {
        self.flush_channel(channel_id);
        self.out.push_back(
            SubmitSharesError {
                channel_id,
                sequence_number: seq,
                error_code: code.into(),
            }
            .into(),
        );
    }

    fn flush_channel(&mut self, channel_id: u32) {
        let Some(c) = self.channels.get_mut(&channel_id) else {
            return;
        };
        if let Some(m) = c.pending.success(channel_id) {
            self.out.push_back(m.into());
        }
    }

    /// Acknowledges every accepted share not yet acknowledged (the shell calls it after each
    /// read).
    pub fn flush(&mut self) {
        // Called after every read: no list of ids is collected (that would allocate per read).
        for (&channel_id, c) in self.channels.iter_mut() {
            if let Some(m) = c.pending.success(channel_id) {
                self.out.push_back(m.into());
            }
        }
    }

    /// The connection ended: the workers leave the list.
    pub fn closed(&mut self, now: Timestamp) {
        if let Some(r) = &mut self.records {
            r.flush();
        }
        for (_, c) in self.channels.drain() {
            self.engine.detach_worker(&c.worker, now);
            c.tracked.detach_all(&self.engine, now);
        }
        self.engine.stats.connection_closed();
    }
}

/// What a channel's vardiff aims at, in multiples of the configured share rate: one per worker
/// its shares name (extension 0x0002), so that each is estimated from as many shares as on a
/// channel of its own; one without.
fn aim(tracked: &Tracked) -> u32 {
    u32::try_from(tracked.workers().max(1)).unwrap_or(u32::MAX)
}

/// `job` as `NewExtendedMiningJob` `job_id` on `channel_id` (a group's or an extended
/// channel's), a future job when `min_ntime` is `None`.
fn extended_job(
    job: &Job,
    channel_id: u32,
    job_id: u32,
    min_ntime: Option<u32>,
    version_rolling_allowed: bool,
) -> NewExtendedMiningJob {
    NewExtendedMiningJob {
        channel_id,
        job_id,
        min_ntime,
        version: job.version,
        version_rolling_allowed,
        merkle_path: job.merkle_branch.iter().map(|h| h.0).collect(),
        coinbase_tx_prefix: job.coinbase.prefix.clone(),
        coinbase_tx_suffix: job.coinbase.suffix.clone(),
    }
}

/// The merkle root of `job` for a standard channel whose prefix is the whole extranonce;
/// `None` if it is not.
fn standard_merkle_root(job: &Job, prefix: &[u8]) -> Option<Hash256> {
    let txid = job.coinbase.txid(prefix).ok()?;
    Some(merkle_root_from_branch(txid, &job.merkle_branch))
}

/// The spec's `SubmitShares.Error` code for an engine verdict.
/// The connection's share batch, made on first use (a connection that never has a share
/// accepted or a token used never takes one); `None` without a store.
fn records<'a>(records: &'a mut Option<ShareBatch>, engine: &Engine) -> Option<&'a mut ShareBatch> {
    if records.is_none() {
        *records = engine.share_batch();
    }
    records.as_mut()
}

/// The `SubmitShares.Error` code for a rejected share.
pub fn reject_code(r: Reject) -> &'static str {
    match r {
        Reject::UnknownJob => error_code::INVALID_JOB_ID,
        Reject::Stale => error_code::STALE_SHARE,
        Reject::Duplicate => error_code::DUPLICATE_SHARE,
        Reject::LowDifficulty => error_code::DIFFICULTY_TOO_LOW,
        Reject::ExtranonceSize => error_code::BAD_EXTRANONCE_SIZE,
        Reject::VersionBits => error_code::VERSION_ROLLING_NOT_ALLOWED,
        Reject::NtimeOutOfRange => error_code::INVALID_SHARE,
    }
}
