//! A Stratum V2 mining device on a standard channel, without I/O.
//!
//! [`Sv2Device`] speaks SV2 as end-device firmware does: the Noise NX handshake as initiator,
//! accepting the pool only if its certificate is signed by the authority key the device was
//! given; `SetupConnection` for the Mining Protocol with `REQUIRES_STANDARD_JOBS` (and
//! `REQUIRES_VERSION_ROLLING` for an ASIC); one `OpenStandardMiningChannel` with the device's
//! user identity, nominal hash rate and maximum target; then header-only mining. The shell drives
//! it like an [`Sv1Device`](crate::Sv1Device):
//!
//! - [`Sv2Device::wants_connect`] / [`Sv2Device::handle_connected`] /
//!   [`Sv2Device::handle_connect_failed`] / [`Sv2Device::handle_closed`]: the connection's life;
//! - [`Sv2Device::handle_bytes`]: bytes received from the pool, in any pieces;
//! - [`Sv2Device::poll_transmit`]: appends what the device wants sent (handshake bytes, then
//!   encrypted frames);
//! - [`Sv2Device::hash`]: grinds at most `max_hashes` nonces;
//! - [`Sv2Device::poll_timeout`] / [`Sv2Device::handle_timeout`]: handshake and reply timeouts,
//!   reconnect backoff;
//! - [`Sv2Device::close_requested`]: the device wants its connection closed.
//!
//! Jobs: a `NewMiningJob` without `min_ntime` is a future job, kept (a few at most) until a
//! `SetNewPrevHash` names it; that message makes it the job hashed on and drops every other
//! queued job, as the spec says. A `NewMiningJob` with `min_ntime` is hashed on at once, on the
//! last prev hash. The share target of a job is the channel's target when the job became
//! workable: `SetTarget` changes the channel's target for jobs to come, not the job being hashed
//! ("the message is not applicable for already received jobs with min_ntime=nTime"), which is
//! also how the reference pool judges shares.
//!
//! Hashing is real SHA-256d over the header `version || prev_hash || merkle_root || ntime ||
//! nbits || nonce`: the first 64 bytes are hashed once per (version bits, ntime) into a
//! midstate, so each nonce costs two compressions, as for SV1. Version bits roll inside BIP320's
//! `1fffe000` only when the pool's `SetupConnection.Success` did not set
//! `REQUIRES_FIXED_VERSION` and the profile rolls; once the version bits (or, without them, the
//! whole nonce range) are exhausted, ntime moves on by a second.
//!
//! Shares go out as `SubmitSharesStandard` with a sequence number that keeps counting across
//! reconnects (so that a device's events never repeat one). `SubmitShares.Success` acknowledges a
//! batch: every share in flight up to `last_sequence_number` that got no error is accepted, up to
//! `new_submits_accepted_count` of them; should the count be smaller, the newest are taken as
//! the accepted ones and the older stay in flight for an error that may still come (or time out
//! as unanswered). `SubmitShares.Error` settles the one share it names.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use primitives::{CompactTarget, Difficulty, Hash256, Header, Target};
use sv2::messages::common::{mining_flags, protocol, SetupConnection};
use sv2::messages::mining::{OpenStandardMiningChannel, SubmitSharesStandard};
use sv2::messages::{Common, DecodeError, EncodeError, Message, Mining, Sv2Message};
use sv2::noise::{extension_type, Frame, NoiseError, NoiseInitiator};

use crate::device::{
    decimal, CloseReason, ConnectionPolicy, Device, HashOutcome, Observer, Rng, StandardJobView,
    StandardShareReply, StandardShareView, Timestamp,
};
use crate::grind::{deposit_bits, Nonces, ShareTarget};
use crate::lifecycle::{common_methods, track, InFlight, Lifecycle};
use crate::profile::{Profile, BIP320_MASK};

/// Settings every SV2 device of one kind shares.
#[derive(Clone, Debug)]
pub struct Sv2Config {
    /// The firmware the devices behave like.
    pub profile: Profile,
    /// The user identity is this prefix followed by the device's index; `None`: the profile's
    /// ([`Profile::sv2_user_prefix`]).
    pub worker_prefix: Option<String>,
    /// The pool's authority public key (x-only bytes, see `sv2::parse_public_key`): the pool's
    /// Noise certificate must be signed with it.
    pub authority_key: [u8; 32],
    /// Hashes per second claimed in `OpenStandardMiningChannel`; `None`: the profile's
    /// ([`Profile::nominal_hash_rate`]). The fleet sets it to what each device really hashes,
    /// so that a pool deriving the channel's target from it asks for the share rate it means to.
    pub nominal_hash_rate: Option<f64>,
    /// The largest target the device accepts (`OpenStandardMiningChannel.max_target`).
    pub max_target: Target,
    /// The pool's address, sent as `SetupConnection.endpoint_host` / `endpoint_port`.
    pub endpoint: Option<SocketAddr>,
    /// Nonces hashed per midstate before the version bits roll (when they may). At most 2^32.
    pub nonces_per_midstate: u64,
    /// Timeouts, backoff and shares in flight, as every device has them.
    pub connection: ConnectionPolicy,
    /// Largest frame accepted from the pool, on the wire.
    pub max_frame_bytes: usize,
    /// `SetupConnection.firmware`.
    pub firmware: String,
}

impl Default for Sv2Config {
    fn default() -> Self {
        Sv2Config {
            profile: Profile::Asic,
            worker_prefix: None,
            authority_key: sv2::parse_public_key(sv2::REFERENCE_AUTHORITY_PUBLIC_KEY)
                .expect("the reference authority key parses"),
            nominal_hash_rate: None,
            max_target: Target::MAX,
            endpoint: None,
            nonces_per_midstate: 1 << 12,
            connection: ConnectionPolicy::default(),
            max_frame_bytes: 64 * 1024,
            firmware: concat!("stratumlab-fleet/", env!("CARGO_PKG_VERSION")).into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
/// SV2 device settings [`Sv2Shared::new`] refuses.
pub enum ConfigError {
    #[error("worker prefix is {0} bytes; at most {MAX_WORKER_PREFIX} (the user identity is at most 255 with the index)")]
    /// The worker prefix (bytes given) is longer than [`MAX_WORKER_PREFIX`].
    WorkerPrefixTooLong(usize),
    #[error("nonces per midstate must be 1 to 2^32, not {0}")]
    /// The nonces per midstate are outside 1 to 2^32.
    NoncesPerMidstate(u64),
    #[error("nominal hash rate {0} is not a non-negative number")]
    /// The nominal hash rate is negative or not a number.
    NominalHashRate(f64),
    #[error("the maximum target is zero: no hash could meet it")]
    /// The maximum target is zero.
    MaxTarget,
    #[error("authority public key: {0}")]
    /// The authority public key is not a valid key.
    AuthorityKey(NoiseError),
    #[error(transparent)]
    /// The authority public key's text does not decode.
    AuthorityKeyText(#[from] sv2::KeyError),
    #[error("setup message: {0}")]
    /// A setup message does not encode (a field too long).
    Encode(#[from] EncodeError),
}

pub use sv2::REFERENCE_AUTHORITY_PUBLIC_KEY;

/// The x-only bytes of an authority public key written in the reference implementation's
/// base58check form (what pool operators publish and `pool_sv2` configs hold).
pub fn parse_authority_key(base58: &str) -> Result<[u8; 32], ConfigError> {
    Ok(sv2::parse_public_key(base58)?)
}

/// Longest user-identity prefix: `STR0_255` less the ten digits of the largest index.
pub const MAX_WORKER_PREFIX: usize = 255 - 10;
/// Future jobs kept until one is activated (the reference pool keeps as many per channel).
pub const MAX_FUTURE_JOBS: usize = 8;
/// The one `OpenStandardMiningChannel.request_id` a device uses.
const REQUEST_ID: u32 = 1;

const TX_SETUP: u8 = 1;
const TX_OPEN: u8 = 2;

/// The shared part of every device of one kind: settings, and the setup messages serialized
/// once for all of them. `SetupConnection` is the same for every device; the
/// `OpenStandardMiningChannel` payload is kept in two halves around the device's index (its
/// user identity's length byte is written per device), so a reconnecting device builds no
/// message; only Noise encrypts per connection.
#[derive(Debug)]
pub struct Sv2Shared {
    /// The settings the messages were built from.
    pub config: Sv2Config,
    prefix: String,
    flags: u32,
    setup: Vec<u8>,
    /// `request_id`, the identity's length byte (rewritten per device), the prefix.
    open_head: Vec<u8>,
    /// `nominal_hash_rate`, `max_target`.
    open_tail: Vec<u8>,
}

impl Sv2Shared {
    /// Checks `config` and encodes the setup messages once.
    pub fn new(config: Sv2Config) -> Result<Arc<Self>, ConfigError> {
        let prefix = config
            .worker_prefix
            .clone()
            .unwrap_or_else(|| config.profile.sv2_user_prefix().to_owned());
        if prefix.len() > MAX_WORKER_PREFIX {
            return Err(ConfigError::WorkerPrefixTooLong(prefix.len()));
        }
        if !(1..=1u64 << 32).contains(&config.nonces_per_midstate) {
            return Err(ConfigError::NoncesPerMidstate(config.nonces_per_midstate));
        }
        let rate = config
            .nominal_hash_rate
            .unwrap_or(config.profile.nominal_hash_rate());
        if !(rate.is_finite() && rate >= 0.0) {
            return Err(ConfigError::NominalHashRate(rate));
        }
        if config.max_target.is_zero() {
            return Err(ConfigError::MaxTarget);
        }
        // The key is checked once here, so that a connection never fails on it.
        NoiseInitiator::new(config.authority_key, config.max_frame_bytes)
            .map_err(ConfigError::AuthorityKey)?;
        let profile = config.profile;
        let mut flags = mining_flags::REQUIRES_STANDARD_JOBS;
        if profile.sv2_requires_version_rolling() {
            flags |= mining_flags::REQUIRES_VERSION_ROLLING;
        }
        let mut setup = Vec::new();
        SetupConnection {
            flags,
            endpoint_host: config
                .endpoint
                .map(|a| a.ip().to_string())
                .unwrap_or_default(),
            endpoint_port: config.endpoint.map_or(0, |a| a.port()),
            vendor: "stratumlab".into(),
            hardware_version: profile.sv2_hardware().into(),
            firmware: config.firmware.clone(),
            ..SetupConnection::new(protocol::MINING)
        }
        .encode(&mut setup)?;
        let mut open = Vec::new();
        OpenStandardMiningChannel {
            request_id: REQUEST_ID,
            user_identity: prefix.clone(),
            nominal_hash_rate: rate as f32,
            max_target: config.max_target,
        }
        .encode(&mut open)?;
        // `request_id` (4 bytes), then STR0_255: one length byte and the bytes.
        let split = 5 + prefix.len();
        debug_assert_eq!(open[4] as usize, prefix.len());
        let open_tail = open.split_off(split);
        Ok(Arc::new(Sv2Shared {
            config,
            prefix,
            flags,
            setup,
            open_head: open,
            open_tail,
        }))
    }

    /// The user identity of the device with this index.
    pub fn user_identity(&self, index: u32) -> String {
        format!("{}{index}", self.prefix)
    }

    /// `SetupConnection.flags` as sent.
    pub fn setup_flags(&self) -> u32 {
        self.flags
    }

    /// The `OpenStandardMiningChannel` payload of device `index`, appended to `out`.
    pub fn write_open(&self, index: u32, out: &mut Vec<u8>) {
        let mut digits = [0u8; 20];
        let digits = decimal(index.into(), &mut digits);
        let at = out.len();
        out.extend_from_slice(&self.open_head);
        out[at + 4] = (self.prefix.len() + digits.len()) as u8;
        out.extend_from_slice(digits);
        out.extend_from_slice(&self.open_tail);
    }
}

/// The latest `SetNewPrevHash`.
#[derive(Clone, Copy, Debug)]
struct PrevHash {
    prev_hash: Hash256,
    nbits: u32,
    min_ntime: u32,
    network: Target,
}

/// The job being hashed.
#[derive(Clone, Copy, Debug)]
struct Job {
    id: u32,
    version: u32,
    merkle_root: Hash256,
    ntime: u32,
    target: ShareTarget,
    difficulty: f64,
}

/// A job announced ahead of its prev hash.
#[derive(Clone, Copy, Debug)]
struct FutureJob {
    id: u32,
    version: u32,
    merkle_root: Hash256,
}

/// Where the nonce search is.
#[derive(Clone, Copy)]
struct Grind {
    /// A new job: start over from its time and the first version bits.
    fresh: bool,
    /// Next version-roll index under the mask.
    roll: u64,
    version: u32,
    ntime: u32,
    /// The nonces left for this midstate and time.
    nonces: Nonces,
}

/// A share found and not yet sent.
#[derive(Clone, Copy)]
struct Found {
    job_id: u32,
    ntime: u32,
    nonce: u32,
    version: u32,
    difficulty: f64,
    hash: Hash256,
    block: bool,
}

/// How far the connection's setup has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Handshake,
    /// `SetupConnection` sent (or about to be).
    Setup,
    /// `OpenStandardMiningChannel` sent (or about to be).
    Opening,
    Open,
}

/// One simulated SV2 mining device (see the module docs).
pub struct Sv2Device {
    shared: Arc<Sv2Shared>,
    id: u64,
    index: u32,
    life: Lifecycle,
    step: Step,
    rng: Rng,
    last_rx: Timestamp,
    noise: Option<NoiseInitiator>,
    /// Setup messages still to write (TX_*).
    pending_tx: u8,
    channel: Option<u32>,
    group: Option<u32>,
    /// The version bits the device may roll (0: none).
    mask: u32,
    /// The channel's target, for jobs that become workable from now on.
    target: ShareTarget,
    difficulty: f64,
    prev: Option<PrevHash>,
    job: Option<Job>,
    future: Vec<FutureJob>,
    grind: Grind,
    next_seq: u32,
    pending: Vec<Found>,
    in_flight: Vec<InFlight<u32, u32>>,
}

/// `a` comes no later than `b` in sequence-number order (which wraps).
fn seq_le(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) < 1 << 31
}

fn difficulty_of(t: Target) -> f64 {
    Difficulty::from_target(t).as_f64()
}

impl Sv2Device {
    /// A device that connects first at `first_connect_at`. `id` names it in events; `index`
    /// makes its user identity; `seed` its jitter and nonce starts.
    pub fn new(
        shared: Arc<Sv2Shared>,
        id: u64,
        index: u32,
        seed: u64,
        first_connect_at: Timestamp,
    ) -> Self {
        let target = shared.config.max_target;
        Sv2Device {
            shared,
            id,
            index,
            life: Lifecycle::new(first_connect_at),
            step: Step::Handshake,
            rng: Rng::new(seed ^ id.wrapping_mul(0x2545_f491_4f6c_dd1d)),
            last_rx: Timestamp::ZERO,
            noise: None,
            pending_tx: 0,
            channel: None,
            group: None,
            mask: 0,
            target: ShareTarget::new(target),
            difficulty: difficulty_of(target),
            prev: None,
            job: None,
            future: Vec::new(),
            grind: Grind {
                fresh: true,
                roll: 0,
                version: 0,
                ntime: 0,
                nonces: Nonces::none(),
            },
            next_seq: 0,
            pending: Vec::new(),
            in_flight: Vec::new(),
        }
    }

    common_methods!();

    /// The channel is open on the current connection.
    pub fn is_ready(&self) -> bool {
        self.is_connected() && self.step == Step::Open
    }

    /// Has a job it could hash (channel open, a workable job on a known prev hash).
    pub fn can_hash(&self) -> bool {
        self.is_ready()
            && self.job.is_some()
            && self.prev.is_some()
            && self.life.close_requested().is_none()
    }

    /// The Noise handshake finished on the current connection.
    pub fn handshake_done(&self) -> bool {
        self.noise
            .as_ref()
            .is_some_and(NoiseInitiator::handshake_done)
    }

    /// The open channel's id; `None` until `OpenStandardMiningChannel.Success`.
    pub fn channel_id(&self) -> Option<u32> {
        self.channel
    }

    /// The channel's current target (for jobs that become workable from now on).
    pub fn target(&self) -> Target {
        self.target.target
    }

    /// The difficulty of the channel's current target.
    pub fn difficulty(&self) -> f64 {
        self.difficulty
    }

    /// The job being hashed and the target its shares must meet.
    pub fn job(&self) -> Option<(u32, Target)> {
        self.job.map(|j| (j.id, j.target.target))
    }

    /// Future jobs waiting for their prev hash.
    pub fn future_jobs(&self) -> usize {
        self.future.len()
    }

    /// The version bits this connection may roll (0: none).
    pub fn version_mask(&self) -> u32 {
        self.mask
    }

    /// The TCP connection is up: start the Noise handshake (its first message is ready for
    /// [`Sv2Device::poll_transmit`]).
    pub fn handle_connected(&mut self, now: Timestamp) {
        self.life.connected(now);
        self.step = Step::Handshake;
        self.last_rx = now;
        self.pending_tx = 0;
        self.channel = None;
        self.group = None;
        self.mask = 0;
        self.set_target(self.shared.config.max_target);
        self.prev = None;
        self.job = None;
        self.future.clear();
        let c = &self.shared.config;
        // The key was checked by `Sv2Shared::new`; only the ephemeral key's making can fail.
        self.noise = NoiseInitiator::new(c.authority_key, c.max_frame_bytes).ok();
        if self.noise.is_none() {
            self.request_close(CloseReason::Protocol);
        }
    }

    /// The connection closed (at the device's request or not): forget the session and back
    /// off. After a session whose channel opened, the backoff starts over.
    pub fn handle_closed<O: Observer>(&mut self, now: Timestamp, reason: CloseReason, obs: &mut O) {
        self.abandon_shares(now, obs);
        // Asked to come back: to the same pool, at once (SV2's Reconnect names no wait).
        let backoff = self.shared.config.connection.backoff;
        let was_open = self.step == Step::Open;
        self.life.closed(
            now,
            reason,
            was_open,
            Duration::ZERO,
            &backoff,
            &mut self.rng,
        );
        self.step = Step::Handshake;
        self.noise = None;
        self.pending_tx = 0;
        self.channel = None;
        self.group = None;
        self.prev = None;
        self.job = None;
        self.future = Vec::new();
    }

    /// Appends what the device wants sent: the Noise handshake's first message, then encrypted
    /// frames: the setup messages and the shares found since the last call (each recorded as
    /// in flight from `now`). Returns the bytes added.
    pub fn poll_transmit<O: Observer>(
        &mut self,
        out: &mut Vec<u8>,
        now: Timestamp,
        obs: &mut O,
    ) -> usize {
        let start = out.len();
        if !self.is_connected() || self.life.close_requested().is_some() {
            return 0;
        }
        let Some(noise) = self.noise.as_mut() else {
            return 0;
        };
        if noise.take_handshake_bytes(out) {
            obs.handshake(true, out.len() - start);
        }
        if !noise.handshake_done() {
            return out.len() - start;
        }
        let s = &*self.shared;
        let mut failed = None;
        if self.pending_tx & TX_SETUP != 0 {
            failed =
                failed.or(send(noise, SetupConnection::MSG_TYPE, false, &s.setup, out, obs).err());
        }
        if self.pending_tx & TX_OPEN != 0 {
            let mut payload = Vec::with_capacity(s.open_head.len() + 10 + s.open_tail.len());
            s.write_open(self.index, &mut payload);
            failed = failed.or(send(
                noise,
                OpenStandardMiningChannel::MSG_TYPE,
                OpenStandardMiningChannel::CHANNEL_BIT,
                &payload,
                out,
                obs,
            )
            .err());
        }
        self.pending_tx = 0;
        if let (Some(channel), false) = (self.channel, self.pending.is_empty()) {
            let mut payload = Vec::with_capacity(32);
            for f in std::mem::take(&mut self.pending) {
                let seq = self.next_seq;
                self.next_seq = seq.wrapping_add(1);
                payload.clear();
                let sent = SubmitSharesStandard {
                    channel_id: channel,
                    sequence_number: seq,
                    job_id: f.job_id,
                    nonce: f.nonce,
                    ntime: f.ntime,
                    version: f.version,
                }
                .encode(&mut payload)
                .map_err(|e| NoiseError::Encrypt(e.to_string()))
                .and_then(|()| {
                    send(
                        noise,
                        SubmitSharesStandard::MSG_TYPE,
                        SubmitSharesStandard::CHANNEL_BIT,
                        &payload,
                        out,
                        obs,
                    )
                });
                if let Err(e) = sent {
                    failed = failed.or(Some(e));
                    obs.share_dropped(self.id, now);
                    continue;
                }
                obs.standard_share_sent(
                    self.id,
                    now,
                    &StandardShareView {
                        channel,
                        sequence_number: seq,
                        job_id: f.job_id,
                        ntime: f.ntime,
                        nonce: f.nonce,
                        version: f.version,
                        difficulty: f.difficulty,
                        hash: &f.hash,
                        block: f.block,
                    },
                );
                let share = InFlight {
                    seq,
                    sent_at: now,
                    job_id: f.job_id,
                    nonce: f.nonce,
                    difficulty: f.difficulty,
                };
                track(
                    &mut self.in_flight,
                    s.config.connection.max_in_flight,
                    self.id,
                    share,
                    obs,
                );
            }
        }
        if let Some(e) = failed {
            obs.protocol_error(self.id, now, &format!("sending: {e}"));
            self.request_close(CloseReason::Protocol);
        }
        out.len() - start
    }

    /// Handles bytes from the pool: the rest of the Noise handshake, then frames, each decoded
    /// and acted on as it completes.
    pub fn handle_bytes<O: Observer>(&mut self, data: &[u8], now: Timestamp, obs: &mut O) {
        if !self.is_connected() || self.life.close_requested().is_some() {
            return;
        }
        self.last_rx = now;
        let Some(noise) = self.noise.as_mut() else {
            return;
        };
        let was_done = noise.handshake_done();
        if let Err(e) = noise.feed(data) {
            self.noise_failed(e, now, obs);
            return;
        }
        if !was_done && noise.handshake_done() {
            obs.handshake(false, sv2::noise::HANDSHAKE_REPLY_LEN);
            self.step = Step::Setup;
            self.pending_tx |= TX_SETUP;
        }
        while self.life.close_requested().is_none() {
            match self.noise.as_mut().and_then(NoiseInitiator::next_frame) {
                None => break,
                Some(Ok(frame)) => self.on_frame(frame, now, obs),
                Some(Err(e)) => self.noise_failed(e, now, obs),
            }
        }
    }

    fn noise_failed<O: Observer>(&mut self, e: NoiseError, now: Timestamp, obs: &mut O) {
        obs.protocol_error(self.id, now, &format!("noise: {e}"));
        self.request_close(match e {
            NoiseError::Certificate(_) => CloseReason::Certificate,
            _ => CloseReason::Protocol,
        });
    }

    fn on_frame<O: Observer>(&mut self, mut frame: Frame, now: Timestamp, obs: &mut O) {
        obs.frame(
            false,
            frame.extension(),
            frame.msg_type(),
            frame.payload.len(),
        );
        // Messages of extensions the device does not speak are skipped, as the spec says.
        if frame.extension() != 0 {
            return;
        }
        match Message::decode(frame.msg_type(), &mut frame.payload) {
            Ok(Message::Common(m)) => self.on_common(m, now, obs),
            Ok(Message::Mining(m)) => self.on_mining(m, now, obs),
            Ok(Message::TemplateDistribution(m)) => {
                obs.protocol_error(self.id, now, m.name());
            }
            Ok(Message::JobDeclaration(m)) => obs.protocol_error(self.id, now, m.name()),
            // Extension 0 cannot hold these (they are extension 0x0001's).
            Ok(Message::Extensions(m)) => obs.protocol_error(self.id, now, m.name()),
            // A message type of a later spec version: not for this firmware.
            Err(DecodeError::UnknownType(_)) => {}
            Err(e) => obs.protocol_error(self.id, now, &e.to_string()),
        }
    }

    fn on_common<O: Observer>(&mut self, m: Common, now: Timestamp, obs: &mut O) {
        match m {
            Common::SetupConnectionSuccess(m) if self.step == Step::Setup => {
                let fixed = m.flags & mining_flags::REQUIRES_FIXED_VERSION != 0;
                if m.flags & mining_flags::REQUIRES_EXTENDED_CHANNELS != 0 {
                    obs.protocol_error(self.id, now, "the pool takes extended channels only");
                    self.request_close(CloseReason::Protocol);
                    return;
                }
                let profile = self.shared.config.profile;
                if fixed && profile.sv2_requires_version_rolling() {
                    // The spec forbids the flag when the client requires version rolling.
                    obs.protocol_error(
                        self.id,
                        now,
                        "the pool fixes the version this device rolls",
                    );
                    self.request_close(CloseReason::Protocol);
                    return;
                }
                self.mask = if profile.sv2_rolls_version() && !fixed {
                    BIP320_MASK
                } else {
                    0
                };
                self.step = Step::Opening;
                self.pending_tx |= TX_OPEN;
            }
            Common::SetupConnectionError(m) => {
                obs.protocol_error(
                    self.id,
                    now,
                    &format!(
                        "SetupConnection.Error {} (flags {:#x})",
                        m.error_code, m.flags
                    ),
                );
                self.request_close(CloseReason::Protocol);
            }
            Common::Reconnect(_) => self.request_close(CloseReason::Reconnect),
            Common::ChannelEndpointChanged(_) => {}
            other => obs.protocol_error(self.id, now, other.name()),
        }
    }

    /// Whether a channel message is for this device's channel (or the group it is in).
    fn addressed<O: Observer>(
        &self,
        channel: u32,
        what: &str,
        now: Timestamp,
        obs: &mut O,
    ) -> bool {
        let ours = self.channel == Some(channel) || self.group == Some(channel);
        if !ours {
            obs.protocol_error(self.id, now, &format!("{what} for channel {channel}"));
        }
        ours
    }

    fn on_mining<O: Observer>(&mut self, m: Mining, now: Timestamp, obs: &mut O) {
        let name = m.name();
        match m {
            Mining::OpenStandardMiningChannelSuccess(m)
                if self.step == Step::Opening && m.request_id == REQUEST_ID =>
            {
                self.channel = Some(m.channel_id);
                self.group = Some(m.group_channel_id);
                self.step = Step::Open;
                self.set_target(m.target);
                obs.channel_target_changed(self.id, now, m.channel_id, self.difficulty, &m.target);
                obs.ready(self.id, now);
            }
            // Not the answer to this device's request, or not now.
            Mining::OpenStandardMiningChannelSuccess(_) => obs.protocol_error(self.id, now, name),
            Mining::OpenMiningChannelError(m) => {
                obs.protocol_error(
                    self.id,
                    now,
                    &format!("OpenMiningChannel.Error {}", m.error_code),
                );
                self.request_close(CloseReason::Unauthorized);
            }
            Mining::NewMiningJob(m) if self.addressed(m.channel_id, name, now, obs) => {
                self.on_new_job(m, now, obs)
            }
            Mining::SetNewPrevHash(m) if self.addressed(m.channel_id, name, now, obs) => {
                self.on_prev_hash(m, now, obs)
            }
            Mining::SetTarget(m) if self.addressed(m.channel_id, name, now, obs) => {
                self.set_target(m.maximum_target);
                let channel = self.channel.unwrap_or(m.channel_id);
                obs.channel_target_changed(
                    self.id,
                    now,
                    channel,
                    self.difficulty,
                    &m.maximum_target,
                );
            }
            Mining::SubmitSharesSuccess(m) if self.addressed(m.channel_id, name, now, obs) => self
                .on_success(
                    m.last_sequence_number,
                    m.new_submits_accepted_count,
                    now,
                    obs,
                ),
            Mining::SubmitSharesError(m) if self.addressed(m.channel_id, name, now, obs) => {
                self.on_error(m.sequence_number, &m.error_code, now, obs)
            }
            Mining::CloseChannel(m) if self.addressed(m.channel_id, name, now, obs) => {
                self.request_close(CloseReason::ChannelClosed)
            }
            Mining::SetGroupChannel(m) => {
                if let Some(c) = self.channel {
                    if m.channel_ids.contains(&c) {
                        self.group = Some(m.group_channel_id);
                    }
                }
            }
            // This device set REQUIRES_STANDARD_JOBS: an extended job is not for it.
            Mining::NewExtendedMiningJob(_) => obs.protocol_error(self.id, now, name),
            // Messages for a channel not ours were reported by `addressed`; the extranonce
            // prefix matters only to whoever computes merkle roots (the pool).
            _ => {}
        }
    }

    fn set_target(&mut self, t: Target) {
        self.target = ShareTarget::new(t);
        self.difficulty = difficulty_of(t);
    }

    fn on_new_job<O: Observer>(
        &mut self,
        m: sv2::messages::mining::NewMiningJob,
        now: Timestamp,
        obs: &mut O,
    ) {
        let channel = self.channel.unwrap_or(m.channel_id);
        let merkle_root = Hash256(m.merkle_root);
        let Some(min_ntime) = m.min_ntime else {
            if self.future.len() == MAX_FUTURE_JOBS {
                self.future.remove(0);
            }
            self.future.push(FutureJob {
                id: m.job_id,
                version: m.version,
                merkle_root,
            });
            obs.standard_job_received(
                self.id,
                now,
                &StandardJobView {
                    channel,
                    job_id: m.job_id,
                    version: m.version,
                    merkle_root: &merkle_root,
                    prev_hash: None,
                    nbits: None,
                    ntime: None,
                    future: true,
                    target: &self.target.target,
                    difficulty: self.difficulty,
                },
            );
            return;
        };
        let Some(prev) = self.prev else {
            obs.protocol_error(
                self.id,
                now,
                "NewMiningJob with min_ntime before any SetNewPrevHash",
            );
            return;
        };
        let job = Job {
            id: m.job_id,
            version: m.version,
            merkle_root,
            // A share's ntime must not precede the latest SetNewPrevHash's either.
            ntime: min_ntime.max(prev.min_ntime),
            target: self.target,
            difficulty: self.difficulty,
        };
        self.start_job(job);
        obs.standard_job_received(self.id, now, &job_view(channel, &job, &prev, false));
    }

    fn on_prev_hash<O: Observer>(
        &mut self,
        m: sv2::messages::mining::SetNewPrevHash,
        now: Timestamp,
        obs: &mut O,
    ) {
        let prev = PrevHash {
            prev_hash: Hash256(m.prev_hash),
            nbits: m.nbits,
            min_ntime: m.min_ntime,
            // An nBits that names no target: no hash is a block.
            network: Target::from_compact(CompactTarget::from_consensus(m.nbits))
                .unwrap_or(Target::ZERO),
        };
        self.prev = Some(prev);
        let named = self.future.iter().find(|f| f.id == m.job_id).copied();
        // Only the job named is valid from now on; every other queued one is dropped.
        self.future.clear();
        let Some(f) = named else {
            self.job = None;
            obs.protocol_error(self.id, now, "SetNewPrevHash names no future job");
            return;
        };
        let job = Job {
            id: f.id,
            version: f.version,
            merkle_root: f.merkle_root,
            ntime: m.min_ntime,
            target: self.target,
            difficulty: self.difficulty,
        };
        self.start_job(job);
        let channel = self.channel.unwrap_or(m.channel_id);
        obs.standard_job_activated(self.id, now, &job_view(channel, &job, &prev, true));
    }

    fn start_job(&mut self, job: Job) {
        self.job = Some(job);
        self.grind.fresh = true;
        self.grind.nonces.left = 0;
    }

    fn on_success<O: Observer>(&mut self, last: u32, count: u32, now: Timestamp, obs: &mut O) {
        let covered = self
            .in_flight
            .iter()
            .take_while(|f| seq_le(f.seq, last))
            .count();
        let accepted = covered.min(count as usize);
        let channel = self.channel.unwrap_or_default();
        for f in self.in_flight.drain(covered - accepted..covered) {
            obs.standard_share_result(
                self.id,
                now,
                &StandardShareReply {
                    channel,
                    sequence_number: f.seq,
                    job_id: f.job_id,
                    nonce: f.nonce,
                    difficulty: f.difficulty,
                    latency_ns: now.nanos_since(f.sent_at),
                    verdict: events::Verdict::Accepted,
                    error_code: None,
                },
            );
        }
    }

    fn on_error<O: Observer>(&mut self, seq: u32, code: &str, now: Timestamp, obs: &mut O) {
        // A verdict after the share timed out is ignored: it was counted as unanswered.
        let Some(i) = self.in_flight.iter().position(|f| f.seq == seq) else {
            return;
        };
        let f = self.in_flight.remove(i);
        obs.standard_share_result(
            self.id,
            now,
            &StandardShareReply {
                channel: self.channel.unwrap_or_default(),
                sequence_number: f.seq,
                job_id: f.job_id,
                nonce: f.nonce,
                difficulty: f.difficulty,
                latency_ns: now.nanos_since(f.sent_at),
                verdict: events::Verdict::Rejected(events::Reason::from_sv2_code(code)),
                error_code: Some(code),
            },
        );
    }

    /// Grinds at most `max_hashes` nonces on the current job. Shares found wait for
    /// [`Sv2Device::poll_transmit`]. Does nothing unless [`Sv2Device::can_hash`].
    pub fn hash<O: Observer>(
        &mut self,
        now: Timestamp,
        max_hashes: u64,
        obs: &mut O,
    ) -> HashOutcome {
        let mut out = HashOutcome::default();
        let (Some(job), Some(prev)) = (self.job, self.prev) else {
            return out;
        };
        if !self.can_hash() {
            return out;
        }
        while out.hashes < max_hashes {
            if self.grind.nonces.left == 0 {
                self.next_midstate(&job, &prev);
            }
            // A copy, so that the shares found can go to `self`.
            let mut nonces = self.grind.nonces;
            let g = self.grind;
            nonces.scan(
                max_hashes - out.hashes,
                &job.target,
                &prev.network,
                &mut out,
                |nonce, hash, block| {
                    let share = Found {
                        job_id: job.id,
                        ntime: g.ntime,
                        nonce,
                        version: g.version,
                        difficulty: job.difficulty,
                        hash,
                        block,
                    };
                    self.queue_share(share, now, obs);
                },
            );
            self.grind.nonces = nonces;
        }
        out
    }

    /// Moves to the next (version bits, ntime) pair and hashes the header's first block.
    fn next_midstate(&mut self, job: &Job, prev: &PrevHash) {
        let mask = self.mask;
        let rolls = 1u64 << mask.count_ones();
        let g = &mut self.grind;
        if g.fresh {
            g.fresh = false;
            g.roll = 0;
            g.ntime = job.ntime;
        } else if g.roll >= rolls {
            // Every version (or, without rolling, every nonce) tried at this time.
            g.roll = 0;
            g.ntime = g.ntime.wrapping_add(1);
        }
        let bits = deposit_bits(g.roll, mask);
        g.roll += 1;
        g.version = (job.version & !mask) | bits;
        let left = if mask != 0 {
            self.shared.config.nonces_per_midstate
        } else {
            1 << 32
        };
        g.nonces = Nonces::new(
            g.version,
            &prev.prev_hash,
            &job.merkle_root,
            g.ntime,
            prev.nbits,
            self.rng.next_u64() as u32,
            left,
        );
    }

    /// The header a share on the current job stands for (for checks and tests).
    pub fn header_for(&self, ntime: u32, nonce: u32, version: u32) -> Option<Header> {
        let (job, prev) = (self.job?, self.prev?);
        Some(Header {
            version,
            prev_hash: prev.prev_hash,
            merkle_root: job.merkle_root,
            time: ntime,
            bits: CompactTarget::from_consensus(prev.nbits),
            nonce,
        })
    }

    /// Heap bytes this device holds beyond its own size (buffers' capacities and what its Noise
    /// state holds).
    pub fn heap_bytes(&self) -> usize {
        self.future.capacity() * std::mem::size_of::<FutureJob>()
            + self.pending.capacity() * std::mem::size_of::<Found>()
            + self.in_flight.capacity() * std::mem::size_of::<InFlight<u32, u32>>()
            + self.noise.as_ref().map_or(0, NoiseInitiator::heap_bytes)
    }
}

fn job_view<'a>(
    channel: u32,
    job: &'a Job,
    prev: &'a PrevHash,
    future: bool,
) -> StandardJobView<'a> {
    StandardJobView {
        channel,
        job_id: job.id,
        version: job.version,
        merkle_root: &job.merkle_root,
        prev_hash: Some(&prev.prev_hash),
        nbits: Some(prev.nbits),
        ntime: Some(job.ntime),
        future,
        target: &job.target.target,
        difficulty: job.difficulty,
    }
}

/// Frames and encrypts one message payload onto `out`.
fn send<O: Observer>(
    noise: &mut NoiseInitiator,
    msg_type: u8,
    channel_bit: bool,
    payload: &[u8],
    out: &mut Vec<u8>,
    obs: &mut O,
) -> Result<(), NoiseError> {
    let extension = extension_type(0, channel_bit);
    noise.encrypt(msg_type, extension, payload, out)?;
    obs.frame(true, extension, msg_type, payload.len());
    Ok(())
}

impl Device for Sv2Device {
    type Receive = ();

    crate::device::delegate_to_inherent!(Sv2Device);

    fn worker_name(&self) -> String {
        self.shared.user_identity(self.index)
    }
    fn receive<O: Observer>(
        &mut self,
        _rx: &mut (),
        data: &[u8],
        _max_message: usize,
        now: Timestamp,
        obs: &mut O,
    ) -> Result<(), CloseReason> {
        self.handle_bytes(data, now, obs);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
