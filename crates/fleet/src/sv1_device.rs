//! A Stratum V1 mining device without I/O.
//!
//! [`Sv1Device`] speaks SV1 as mining firmware does and hashes for real. The shell drives it:
//!
//! - [`Sv1Device::wants_connect`] / [`Sv1Device::handle_connected`] /
//!   [`Sv1Device::handle_connect_failed`] / [`Sv1Device::handle_closed`]: the connection's life;
//! - [`Sv1Device::handle_line`]: one line received from the pool;
//! - [`Sv1Device::poll_transmit`]: appends what the device wants sent;
//! - [`Sv1Device::hash`]: grinds at most `max_hashes` nonces, so a scheduler can share a CPU
//!   budget among thousands of devices;
//! - [`Sv1Device::poll_timeout`] / [`Sv1Device::handle_timeout`]: handshake and reply timeouts,
//!   reconnect backoff;
//! - [`Sv1Device::close_requested`]: the device wants its connection closed.
//!
//! The handshake follows the device's [`Profile`]: an S19-class ASIC (cgminer/bmminer) sends
//! `mining.configure` with mask `1fffe000` and waits for each reply before the next request; a
//! Bitaxe (ESP-Miner) sends `mining.configure` with mask `ffffffff`, `mining.subscribe` and
//! `mining.authorize` back to back, then `mining.suggest_difficulty` after the authorize
//! result; a CPU miner (cpuminer) subscribes, then authorizes, without version rolling.
//!
//! Hashing is real SHA-256d over genuine headers: the coinbase is `coinb1 || extranonce1 ||
//! extranonce2 || coinb2`, the merkle root comes through the job's branch, and the first 64
//! header bytes are hashed once per (extranonce2, version bits) into a midstate, so each nonce
//! costs two compressions. The rolled version bits stay inside the negotiated mask. A new
//! difficulty applies at once, also to the job being hashed, as cgminer and ESP-Miner apply it.
//! One job is kept: a new notify replaces the current one whether or not it is clean.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use primitives::{
    merkle_root_from_branch, sha256d, CompactTarget, Difficulty, Hash256, Header, Target,
};
use sv1::{error_code, Envelope, Method, Value};

use crate::device::{
    decimal, CloseReason, ConnectionPolicy, HashOutcome, JobIdBuf, JobView, Observer, Rng,
    SentShare, ShareReply, ShareVerdict, Timestamp,
};
use crate::grind::{deposit_bits, Nonces, ShareTarget};
use crate::lifecycle::{common_methods, track, InFlight, Lifecycle};
pub use crate::profile::Profile;

/// Settings every device of one kind shares.
#[derive(Clone, Debug)]
pub struct Sv1Config {
    /// The firmware the devices behave like.
    pub profile: Profile,
    /// The authorize user is this prefix followed by the device's index (`addr.rig` gives
    /// `addr.rig0`, `addr.rig1`, ...).
    pub worker_prefix: String,
    /// The `mining.authorize` password.
    pub password: String,
    /// Sent as `mining.suggest_difficulty` after the authorize result.
    pub suggest_difficulty: Option<f64>,
    /// Sends `mining.extranonce.subscribe` with the subscribe, opting into
    /// `mining.set_extranonce`.
    pub extranonce_subscribe: bool,
    /// The version-rolling mask asked for; `None`: the profile's.
    pub version_mask: Option<u32>,
    /// Nonces hashed per midstate before the version bits roll (with a mask) or extranonce2
    /// advances (without). At most 2^32.
    pub nonces_per_midstate: u64,
    /// Timeouts, backoff and shares in flight, as every device has them.
    pub connection: ConnectionPolicy,
    /// The `mining.subscribe` user agent.
    pub user_agent: String,
}

impl Default for Sv1Config {
    fn default() -> Self {
        Sv1Config {
            profile: Profile::Asic,
            worker_prefix: "stratumlab.worker".into(),
            password: "x".into(),
            suggest_difficulty: None,
            extranonce_subscribe: false,
            version_mask: None,
            nonces_per_midstate: 1 << 12,
            connection: ConnectionPolicy::default(),
            user_agent: concat!("stratumlab-fleet/", env!("CARGO_PKG_VERSION")).into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
/// SV1 device settings [`Sv1Shared::new`] refuses.
pub enum ConfigError {
    #[error("worker prefix is {0} bytes; at most {MAX_WORKER_PREFIX}")]
    /// The worker prefix (bytes given) is longer than [`MAX_WORKER_PREFIX`].
    WorkerPrefixTooLong(usize),
    #[error("suggested difficulty {0} is not a positive number")]
    /// The suggested difficulty is zero, negative or not a number.
    SuggestDifficulty(f64),
    #[error("nonces per midstate must be 1 to 2^32, not {0}")]
    /// The nonces per midstate are outside 1 to 2^32.
    NoncesPerMidstate(u64),
}

/// Longest worker prefix accepted, in bytes.
pub const MAX_WORKER_PREFIX: usize = 128;

/// The shared part of every device of one kind: settings plus the handshake lines.
///
/// `mining.configure`, `mining.subscribe`, `mining.suggest_difficulty` and `mining.authorize`
/// (in two halves around the worker's index) are serialized here once per fleet, and
/// [`Sv1Device::poll_transmit`] copies them into each connection's writes: a device that
/// reconnects writes its handshake without building or allocating anything
/// (`tests/alloc.rs` checks it).
#[derive(Debug)]
pub struct Sv1Shared {
    /// The settings the lines were built from.
    pub config: Sv1Config,
    mask: u32,
    configure_line: Vec<u8>,
    subscribe_line: Vec<u8>,
    /// The authorize line up to the worker index, and from after it.
    authorize_head: Vec<u8>,
    authorize_tail: Vec<u8>,
    suggest_line: Vec<u8>,
}

const ID_CONFIGURE: u64 = 1;
const ID_SUBSCRIBE: u64 = 2;
const ID_AUTHORIZE: u64 = 3;
const ID_SUGGEST: u64 = 4;
const ID_EXTRANONCE_SUBSCRIBE: u64 = 5;
const FIRST_SUBMIT_ID: u64 = 10;

const TX_CONFIGURE: u8 = 1;
const TX_SUBSCRIBE: u8 = 2;
const TX_AUTHORIZE: u8 = 4;
const TX_SUGGEST: u8 = 8;

/// Longest coinb1 + coinb2 accepted (bytes); a coinbase is at most a few hundred in practice.
pub const MAX_COINBASE: usize = 16 * 1024;
/// Longest merkle branch accepted (a 2^32-transaction block has 32 levels).
pub const MAX_BRANCH: usize = 32;
/// Longest extranonce1 / extranonce2 accepted, in bytes.
pub const MAX_EXTRANONCE: usize = 32;

impl Sv1Shared {
    /// Checks `config` and serializes the handshake lines once.
    pub fn new(config: Sv1Config) -> Result<Arc<Self>, ConfigError> {
        if config.worker_prefix.len() > MAX_WORKER_PREFIX {
            return Err(ConfigError::WorkerPrefixTooLong(config.worker_prefix.len()));
        }
        if let Some(d) = config.suggest_difficulty {
            if !(d.is_finite() && d > 0.0) {
                return Err(ConfigError::SuggestDifficulty(d));
            }
        }
        if !(1..=1u64 << 32).contains(&config.nonces_per_midstate) {
            return Err(ConfigError::NoncesPerMidstate(config.nonces_per_midstate));
        }
        let mask = config
            .version_mask
            .unwrap_or(config.profile.requested_mask());
        let mut configure_line = Vec::new();
        if mask != 0 {
            configure_line.extend_from_slice(
                b"{\"id\":1,\"method\":\"mining.configure\",\"params\":[[\"version-rolling\"],{\"version-rolling.mask\":\"",
            );
            sv1::hex::encode_u32_into(mask, &mut configure_line);
            match config.profile {
                // ESP-Miner sends the mask alone; cgminer-class firmware a minimum bit count.
                Profile::Bitaxe => configure_line.extend_from_slice(b"\"}]}\n"),
                _ => {
                    configure_line.extend_from_slice(b"\",\"version-rolling.min-bit-count\":2}]}\n")
                }
            }
        }
        let mut subscribe_line = Vec::new();
        sv1::write::request(
            &mut subscribe_line,
            ID_SUBSCRIBE,
            "mining.subscribe",
            &[&config.user_agent],
        );
        if config.extranonce_subscribe {
            // Right behind the subscribe, before its answer: the opt-in holds from the start.
            sv1::write::request(
                &mut subscribe_line,
                ID_EXTRANONCE_SUBSCRIBE,
                "mining.extranonce.subscribe",
                &[],
            );
        }
        // The authorize line in two halves: the device's index goes between them, after the
        // escaped prefix and before the user string's closing quote (digits need no escaping).
        let mut authorize = Vec::new();
        let _ = write!(
            authorize,
            "{{\"id\":{ID_AUTHORIZE},\"method\":\"mining.authorize\",\"params\":["
        );
        sv1::write::json_string(&mut authorize, &config.worker_prefix);
        authorize.pop(); // the closing quote, written with the tail
        let mut authorize_tail = b"\",".to_vec();
        sv1::write::json_string(&mut authorize_tail, &config.password);
        authorize_tail.extend_from_slice(b"]}\n");
        let suggest_line = config
            .suggest_difficulty
            .map(|d| {
                format!(
                    "{{\"id\":{ID_SUGGEST},\"method\":\"mining.suggest_difficulty\",\"params\":[{d}]}}\n"
                )
                .into_bytes()
            })
            .unwrap_or_default();
        Ok(Arc::new(Sv1Shared {
            config,
            mask,
            configure_line,
            subscribe_line,
            authorize_head: authorize,
            authorize_tail,
            suggest_line,
        }))
    }

    /// The worker name of the device with this index.
    pub fn worker_name(&self, index: u32) -> String {
        format!("{}{index}", self.config.worker_prefix)
    }
}

/// The job being hashed.
#[derive(Default)]
struct Job {
    id: JobIdBuf,
    prev_hash: Hash256,
    version: u32,
    nbits: u32,
    ntime: u32,
    network_target: Target,
    clean: bool,
    /// `coinb1 || extranonce1 || extranonce2 || coinb2`, extranonce2 rewritten in place.
    coinbase: Vec<u8>,
    en2_at: u16,
    en2_len: u8,
    branch: Vec<Hash256>,
}

/// Where the nonce search is.
#[derive(Clone, Copy)]
struct Grind {
    /// Extranonce2 counter (written big-endian into the coinbase's extranonce2 bytes).
    en2: u64,
    /// The merkle root for `en2` is computed.
    have_root: bool,
    root: Hash256,
    /// Next version-roll index under the mask.
    roll: u64,
    version: u32,
    version_bits: Option<u32>,
    nonces: Nonces,
}

impl Grind {
    fn new() -> Self {
        Grind {
            en2: 0,
            have_root: false,
            root: Hash256::ZERO,
            roll: 0,
            version: 0,
            version_bits: None,
            nonces: Nonces::none(),
        }
    }
}

/// A share found and not yet sent.
struct Found {
    job_id: JobIdBuf,
    en2: u64,
    en2_len: u8,
    ntime: u32,
    nonce: u32,
    version: u32,
    version_bits: Option<u32>,
    difficulty: f64,
    hash: Hash256,
    block: bool,
}

/// One simulated SV1 mining device (see the module docs).
pub struct Sv1Device {
    shared: Arc<Sv1Shared>,
    id: u64,
    index: u32,
    life: Lifecycle,
    rng: Rng,
    reconnect_wait: Option<Duration>,
    last_rx: Timestamp,
    /// Handshake lines still to write (TX_*).
    pending_tx: u8,
    subscribed: bool,
    authorized: bool,
    ready: bool,
    /// The negotiated version-rolling mask (0: none).
    mask: u32,
    extranonce1: [u8; MAX_EXTRANONCE],
    extranonce1_len: u8,
    extranonce2_size: u8,
    difficulty: f64,
    target: ShareTarget,
    has_job: bool,
    job: Job,
    grind: Grind,
    next_id: u64,
    pending: Vec<Found>,
    in_flight: Vec<InFlight<u64, JobIdBuf>>,
    /// Replies to the pool's requests (`mining.ping`, `client.get_version`).
    outbox: Vec<u8>,
}

impl Sv1Device {
    /// A device that connects first at `first_connect_at`. `id` names it in events; `index`
    /// makes its worker name; `seed` its jitter and nonce starts.
    pub fn new(
        shared: Arc<Sv1Shared>,
        id: u64,
        index: u32,
        seed: u64,
        first_connect_at: Timestamp,
    ) -> Self {
        Sv1Device {
            shared,
            id,
            index,
            life: Lifecycle::new(first_connect_at),
            rng: Rng::new(seed ^ id.wrapping_mul(0x2545_f491_4f6c_dd1d)),
            reconnect_wait: None,
            last_rx: Timestamp::ZERO,
            pending_tx: 0,
            subscribed: false,
            authorized: false,
            ready: false,
            mask: 0,
            extranonce1: [0; MAX_EXTRANONCE],
            extranonce1_len: 0,
            extranonce2_size: 0,
            difficulty: 1.0,
            target: ShareTarget::new(Difficulty::ONE.to_target()),
            has_job: false,
            job: Job::default(),
            grind: Grind::new(),
            next_id: FIRST_SUBMIT_ID,
            pending: Vec::new(),
            in_flight: Vec::new(),
            outbox: Vec::new(),
        }
    }

    common_methods!();

    /// Subscribed and authorized on the current connection.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Has a job it could hash (ready, with a job).
    pub fn can_hash(&self) -> bool {
        self.is_connected() && self.ready && self.has_job && self.life.close_requested().is_none()
    }

    /// The share difficulty in force (`mining.set_difficulty`).
    pub fn difficulty(&self) -> f64 {
        self.difficulty
    }

    /// The share target in force.
    pub fn target(&self) -> Target {
        self.target.target
    }

    /// The negotiated version-rolling mask (0: none).
    pub fn version_mask(&self) -> u32 {
        self.mask
    }

    /// The pool's extranonce1 from the subscribe reply (empty before).
    pub fn extranonce1(&self) -> &[u8] {
        &self.extranonce1[..self.extranonce1_len as usize]
    }

    /// The extranonce2 length the pool set, bytes.
    pub fn extranonce2_size(&self) -> usize {
        self.extranonce2_size as usize
    }

    /// The current job's id; `None` before the first job.
    pub fn job_id(&self) -> Option<&str> {
        self.has_job.then(|| self.job.id.as_str())
    }

    /// The TCP connection is up: start the handshake.
    pub fn handle_connected(&mut self, now: Timestamp) {
        self.life.connected(now);
        self.last_rx = now;
        self.subscribed = false;
        self.authorized = false;
        self.ready = false;
        self.mask = 0;
        self.extranonce1_len = 0;
        self.extranonce2_size = 0;
        self.set_difficulty(1.0);
        self.has_job = false;
        self.reconnect_wait = None;
        let configure = if self.shared.mask != 0 {
            TX_CONFIGURE
        } else {
            0
        };
        self.pending_tx = match self.shared.config.profile {
            Profile::Bitaxe => configure | TX_SUBSCRIBE | TX_AUTHORIZE,
            _ if configure != 0 => configure,
            _ => TX_SUBSCRIBE,
        };
    }

    /// The connection closed (at the device's request or not): forget the session and back
    /// off. After a session that got ready, the backoff starts over.
    pub fn handle_closed<O: Observer>(&mut self, now: Timestamp, reason: CloseReason, obs: &mut O) {
        self.abandon_shares(now, obs);
        // Asked to come back: after the pool's wait.
        let wait = self.reconnect_wait.take().unwrap_or_default();
        let backoff = self.shared.config.connection.backoff;
        self.life
            .closed(now, reason, self.ready, wait, &backoff, &mut self.rng);
        self.pending_tx = 0;
        self.subscribed = false;
        self.authorized = false;
        self.ready = false;
        self.has_job = false;
        self.outbox = Vec::new();
    }

    /// Appends what the device wants sent: handshake lines, replies, and the shares found
    /// since the last call (each recorded as in flight from `now`). Returns the bytes added.
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
        if self.pending_tx != 0 {
            let s = &*self.shared;
            if self.pending_tx & TX_CONFIGURE != 0 {
                out.extend_from_slice(&s.configure_line);
            }
            if self.pending_tx & TX_SUBSCRIBE != 0 {
                out.extend_from_slice(&s.subscribe_line);
            }
            if self.pending_tx & TX_AUTHORIZE != 0 {
                out.extend_from_slice(&s.authorize_head);
                push_decimal(out, self.index as u64);
                out.extend_from_slice(&s.authorize_tail);
            }
            if self.pending_tx & TX_SUGGEST != 0 {
                out.extend_from_slice(&s.suggest_line);
            }
            self.pending_tx = 0;
        }
        if !self.outbox.is_empty() {
            out.extend_from_slice(&self.outbox);
            self.outbox = Vec::new();
        }
        if !self.pending.is_empty() {
            let mut worker = [0u8; MAX_WORKER_PREFIX + 10];
            let worker = worker_name(&self.shared.config.worker_prefix, self.index, &mut worker);
            let mut pending = std::mem::take(&mut self.pending);
            for f in pending.drain(..) {
                let id = self.next_id;
                self.next_id += 1;
                let en2 = extranonce2_bytes(f.en2, f.en2_len);
                let en2 = &en2[..f.en2_len as usize];
                sv1::write::submit(
                    out,
                    id,
                    worker,
                    f.job_id.as_str(),
                    en2,
                    f.ntime,
                    f.nonce,
                    f.version_bits,
                );
                obs.share_sent(
                    self.id,
                    now,
                    &SentShare {
                        seq: id,
                        job_id: f.job_id.as_str(),
                        extranonce2: en2,
                        ntime: f.ntime,
                        nonce: f.nonce,
                        version: f.version,
                        version_bits: f.version_bits,
                        difficulty: f.difficulty,
                        hash: &f.hash,
                        block: f.block,
                    },
                );
                let share = InFlight {
                    seq: id,
                    sent_at: now,
                    job_id: f.job_id,
                    nonce: f.nonce,
                    difficulty: f.difficulty,
                };
                let max = self.shared.config.connection.max_in_flight;
                track(&mut self.in_flight, max, self.id, share, obs);
            }
            self.pending = pending;
        }
        obs.lines(true, &out[start..]);
        out.len() - start
    }

    /// Handles one line from the pool (without its newline).
    pub fn handle_line<O: Observer>(&mut self, line: &[u8], now: Timestamp, obs: &mut O) {
        if !self.is_connected() || self.life.close_requested().is_some() {
            return;
        }
        self.last_rx = now;
        obs.lines(false, line);
        let (env, method) = match sv1::parse_line(line) {
            Ok(m) => m,
            Err(_) => {
                obs.protocol_error(self.id, now, "malformed JSON");
                return;
            }
        };
        match method {
            None => self.on_response(&env, now, obs),
            Some(Method::Notify) => self.on_notify(&env, now, obs),
            Some(Method::SetDifficulty) => match env.params.get(0).and_then(|v| v.as_f64()) {
                Some(d) if d.is_finite() && d > 0.0 => {
                    self.set_difficulty(d);
                    obs.target_changed(self.id, now, self.difficulty, &self.target.target);
                }
                _ => obs.protocol_error(self.id, now, "mining.set_difficulty"),
            },
            Some(Method::SetExtranonce) => {
                let en1 = env.params.get(0).and_then(|v| v.as_str());
                let size = env.params.get(1).and_then(|v| v.as_u64());
                match (en1, size) {
                    (Some(en1), Some(size)) if self.set_extranonce(en1, size) => {}
                    _ => obs.protocol_error(self.id, now, "mining.set_extranonce"),
                }
            }
            Some(Method::SetVersionMask) => {
                match env
                    .params
                    .get(0)
                    .and_then(|v| v.as_str())
                    .and_then(|s| u32::from_str_radix(s, 16).ok())
                {
                    Some(mask) => {
                        self.mask = mask & self.shared.mask;
                        self.reset_grind();
                    }
                    None => obs.protocol_error(self.id, now, "mining.set_version_mask"),
                }
            }
            Some(Method::Reconnect) => {
                // [host, port, wait_seconds]: we only ever come back to the same pool.
                let wait = env
                    .params
                    .get(2)
                    .and_then(|v| v.as_f64())
                    .filter(|w| w.is_finite() && *w >= 0.0)
                    .map_or(0.0, |w| w.min(3600.0));
                self.reconnect_wait = Some(Duration::from_secs_f64(wait));
                self.request_close(CloseReason::Reconnect);
            }
            Some(Method::Ping) => {
                if let Some(id) = env.id() {
                    sv1::write::reply_pong(&mut self.outbox, id);
                }
            }
            Some(Method::GetVersion) => {
                if let Some(id) = env.id() {
                    let mut v = Vec::with_capacity(40);
                    sv1::write::json_string(&mut v, &self.shared.config.user_agent);
                    sv1::write::reply_raw(
                        &mut self.outbox,
                        id,
                        std::str::from_utf8(&v).unwrap_or("\"\""),
                    );
                }
            }
            // Messages for the operator, miner-to-pool methods echoed back, unknown methods:
            // firmware ignores them.
            Some(_) => {}
        }
    }

    fn set_difficulty(&mut self, d: f64) {
        self.difficulty = d;
        self.target = ShareTarget::new(Difficulty::saturating(d).to_target());
    }

    fn set_extranonce(&mut self, en1_hex: &str, size: u64) -> bool {
        let n = en1_hex.len() / 2;
        if !en1_hex.len().is_multiple_of(2) || n > MAX_EXTRANONCE || size > MAX_EXTRANONCE as u64 {
            return false;
        }
        let mut buf = [0u8; MAX_EXTRANONCE];
        if sv1::hex::decode_into(en1_hex, &mut buf[..n]).is_err() {
            return false;
        }
        // Takes effect with the next job (the current one keeps its coinbase).
        self.extranonce1 = buf;
        self.extranonce1_len = n as u8;
        self.extranonce2_size = size as u8;
        true
    }

    fn on_response<O: Observer>(&mut self, env: &Envelope<'_>, now: Timestamp, obs: &mut O) {
        let Some(id) = env.id().and_then(|s| s.parse::<u64>().ok()) else {
            return;
        };
        let error_free = env.error.is_none_or(|e| e.is_null());
        match id {
            ID_CONFIGURE => {
                self.mask = match env.result {
                    Some(Value::Object(raw)) if error_free => granted_mask(raw) & self.shared.mask,
                    _ => 0,
                };
                if self.shared.config.profile.sequential() {
                    self.pending_tx |= TX_SUBSCRIBE;
                }
            }
            ID_SUBSCRIBE => {
                let parsed = match env.result {
                    Some(Value::Array(raw)) if error_free => subscribe_result(raw),
                    _ => None,
                };
                let accepted = parsed.is_some_and(|(en1, size)| self.set_extranonce(&en1, size));
                if !accepted {
                    obs.protocol_error(self.id, now, "mining.subscribe result");
                    self.request_close(CloseReason::Protocol);
                    return;
                }
                self.subscribed = true;
                if self.shared.config.profile.sequential() {
                    self.pending_tx |= TX_AUTHORIZE;
                }
                self.check_ready(now, obs);
            }
            ID_AUTHORIZE => {
                if error_free && env.result.and_then(|r| r.as_bool()) == Some(true) {
                    self.authorized = true;
                    if self.shared.config.suggest_difficulty.is_some() {
                        self.pending_tx |= TX_SUGGEST;
                    }
                    self.check_ready(now, obs);
                } else {
                    self.request_close(CloseReason::Unauthorized);
                }
            }
            ID_SUGGEST | ID_EXTRANONCE_SUBSCRIBE => {}
            _ => self.on_submit_reply(id, env, error_free, now, obs),
        }
    }

    fn check_ready<O: Observer>(&mut self, now: Timestamp, obs: &mut O) {
        if self.subscribed && self.authorized && !self.ready {
            self.ready = true;
            obs.ready(self.id, now);
        }
    }

    fn on_submit_reply<O: Observer>(
        &mut self,
        id: u64,
        env: &Envelope<'_>,
        error_free: bool,
        now: Timestamp,
        obs: &mut O,
    ) {
        let Some(i) = self.in_flight.iter().position(|f| f.seq == id) else {
            return;
        };
        let f = self.in_flight.remove(i);
        let verdict = if error_free && env.result.and_then(|r| r.as_bool()) == Some(true) {
            ShareVerdict::Accepted
        } else {
            ShareVerdict::Rejected(env.error.and_then(error_code))
        };
        obs.share_result(
            self.id,
            now,
            &ShareReply {
                seq: id,
                job_id: f.job_id.as_str(),
                nonce: f.nonce,
                difficulty: f.difficulty,
                latency_ns: now.nanos_since(f.sent_at),
                verdict,
            },
        );
    }

    fn on_notify<O: Observer>(&mut self, env: &Envelope<'_>, now: Timestamp, obs: &mut O) {
        if !self.subscribed {
            obs.protocol_error(self.id, now, "mining.notify before the subscribe result");
            return;
        }
        match self.decode_notify(env) {
            Ok(()) => {
                self.has_job = true;
                self.reset_grind();
                let j = &self.job;
                obs.job_received(
                    self.id,
                    now,
                    &JobView {
                        job_id: j.id.as_str(),
                        prev_hash: &j.prev_hash,
                        merkle_branch: &j.branch,
                        version: j.version,
                        nbits: j.nbits,
                        ntime: j.ntime,
                        clean: j.clean,
                        target: &self.target.target,
                        difficulty: self.difficulty,
                    },
                );
            }
            Err(what) => {
                self.has_job = false;
                obs.protocol_error(self.id, now, what);
            }
        }
    }

    /// Reads a notify into the job's buffers (reused from job to job: no allocation once they
    /// have grown to the pool's coinbase and branch sizes).
    fn decode_notify(&mut self, env: &Envelope<'_>) -> Result<(), &'static str> {
        let s = |i: usize, what: &'static str| -> Result<&str, &'static str> {
            env.params.get(i).and_then(|v| v.as_str()).ok_or(what)
        };
        let job_id = s(0, "mining.notify job_id")?;
        let mut prev = [0u8; 32];
        sv1::hex::decode_into(s(1, "mining.notify prevhash")?, &mut prev)
            .map_err(|_| "mining.notify prevhash")?;
        let coinb1 = s(2, "mining.notify coinb1")?;
        let coinb2 = s(3, "mining.notify coinb2")?;
        let branch = match env.params.get(4) {
            Some(Value::Array(raw)) => raw,
            _ => return Err("mining.notify merkle_branch"),
        };
        let u32_at =
            |i: usize, what| s(i, what).and_then(|h| sv1::hex::decode_u32(h).map_err(|_| what));
        let version = u32_at(5, "mining.notify version")?;
        let nbits = u32_at(6, "mining.notify nbits")?;
        let ntime = u32_at(7, "mining.notify ntime")?;
        let clean = env
            .params
            .get(8)
            .and_then(|v| v.as_bool())
            .ok_or("mining.notify clean_jobs")?;
        if !coinb1.len().is_multiple_of(2) || !coinb2.len().is_multiple_of(2) {
            return Err("mining.notify coinbase: odd hex length");
        }
        if (coinb1.len() + coinb2.len()) / 2 > MAX_COINBASE {
            return Err("mining.notify coinbase too long");
        }
        parse_branch(branch, &mut self.job.branch)?;
        let j = &mut self.job;
        let en1 = &self.extranonce1[..self.extranonce1_len as usize];
        let en2_len = self.extranonce2_size as usize;
        let c = &mut j.coinbase;
        c.clear();
        let b1 = coinb1.len() / 2;
        let b2 = coinb2.len() / 2;
        c.resize(b1 + en1.len() + en2_len + b2, 0);
        sv1::hex::decode_into(coinb1, &mut c[..b1]).map_err(|_| "mining.notify coinb1")?;
        c[b1..b1 + en1.len()].copy_from_slice(en1);
        let tail = b1 + en1.len() + en2_len;
        sv1::hex::decode_into(coinb2, &mut c[tail..]).map_err(|_| "mining.notify coinb2")?;
        j.en2_at = (b1 + en1.len()) as u16;
        j.en2_len = en2_len as u8;
        j.id = JobIdBuf::new(job_id);
        j.prev_hash = sv1::hex::prevhash_from_stratum(prev);
        j.version = version;
        j.nbits = nbits;
        j.ntime = ntime;
        j.clean = clean;
        // An nBits that names no target: no hash is a block.
        j.network_target =
            Target::from_compact(CompactTarget::from_consensus(nbits)).unwrap_or(Target::ZERO);
        Ok(())
    }

    fn reset_grind(&mut self) {
        self.grind.have_root = false;
        self.grind.nonces.left = 0;
    }

    /// Grinds at most `max_hashes` nonces on the current job. Shares found wait for
    /// [`Sv1Device::poll_transmit`]. Does nothing unless [`Sv1Device::can_hash`].
    pub fn hash<O: Observer>(
        &mut self,
        now: Timestamp,
        max_hashes: u64,
        obs: &mut O,
    ) -> HashOutcome {
        let mut out = HashOutcome::default();
        if !self.can_hash() {
            return out;
        }
        while out.hashes < max_hashes {
            if self.grind.nonces.left == 0 {
                self.next_midstate();
            }
            // A copy, so that the shares found can go to `self`.
            let mut nonces = self.grind.nonces;
            let (target, network) = (self.target, self.job.network_target);
            nonces.scan(
                max_hashes - out.hashes,
                &target,
                &network,
                &mut out,
                |nonce, hash, block| {
                    let share = Found {
                        job_id: self.job.id.clone(),
                        en2: self.grind.en2,
                        en2_len: self.job.en2_len,
                        ntime: self.job.ntime,
                        nonce,
                        version: self.grind.version,
                        version_bits: self.grind.version_bits,
                        difficulty: self.difficulty,
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

    /// Moves to the next (extranonce2, version bits) pair and hashes the header's first block.
    fn next_midstate(&mut self) {
        let mask = self.mask;
        let rolls = 1u64 << mask.count_ones();
        let g = &mut self.grind;
        if !g.have_root || g.roll >= rolls {
            g.en2 = g.en2.wrapping_add(1);
            let j = &mut self.job;
            let at = j.en2_at as usize;
            let len = j.en2_len as usize;
            j.coinbase[at..at + len].copy_from_slice(&extranonce2_bytes(g.en2, j.en2_len)[..len]);
            g.root = merkle_root_from_branch(sha256d(&j.coinbase), &j.branch);
            g.have_root = true;
            g.roll = 0;
        }
        let bits = deposit_bits(g.roll, mask);
        g.roll += 1;
        g.version = (self.job.version & !mask) | bits;
        g.version_bits = (mask != 0).then_some(bits);
        let j = &self.job;
        g.nonces = Nonces::new(
            g.version,
            &j.prev_hash,
            &g.root,
            j.ntime,
            j.nbits,
            self.rng.next_u64() as u32,
            self.shared.config.nonces_per_midstate,
        );
    }

    /// The header this device would hash on its current job for these choices (for checks
    /// and tests; allocates).
    pub fn header_for(
        &self,
        extranonce2: &[u8],
        version_bits: Option<u32>,
        nonce: u32,
    ) -> Option<Header> {
        if !self.has_job || extranonce2.len() != self.job.en2_len as usize {
            return None;
        }
        let mut coinbase = self.job.coinbase.clone();
        let at = self.job.en2_at as usize;
        coinbase[at..at + extranonce2.len()].copy_from_slice(extranonce2);
        let version = match version_bits {
            Some(bits) => (self.job.version & !self.mask) | (bits & self.mask),
            None => self.job.version,
        };
        Some(Header {
            version,
            prev_hash: self.job.prev_hash,
            merkle_root: merkle_root_from_branch(sha256d(&coinbase), &self.job.branch),
            time: self.job.ntime,
            bits: CompactTarget::from_consensus(self.job.nbits),
            nonce,
        })
    }

    /// Heap bytes this device holds beyond its own size (buffers' capacities).
    pub fn heap_bytes(&self) -> usize {
        self.job.coinbase.capacity()
            + self.job.branch.capacity() * std::mem::size_of::<Hash256>()
            + self.pending.capacity() * std::mem::size_of::<Found>()
            + self.in_flight.capacity() * std::mem::size_of::<InFlight<u64, JobIdBuf>>()
            + self.outbox.capacity()
            + match &self.job.id {
                JobIdBuf::Heap(s) => s.len(),
                JobIdBuf::Inline { .. } => 0,
            }
    }
}

/// Extranonce2 of `len` bytes: the counter big-endian in the last (up to) 8 bytes.
fn extranonce2_bytes(counter: u64, len: u8) -> [u8; MAX_EXTRANONCE] {
    let mut out = [0u8; MAX_EXTRANONCE];
    let len = (len as usize).min(MAX_EXTRANONCE);
    let be = counter.to_be_bytes();
    let n = len.min(8);
    out[len - n..len].copy_from_slice(&be[8 - n..]);
    out
}

fn push_decimal(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(decimal(v, &mut [0; 20]));
}

/// `prefix` followed by `index`, written into `buf` (the prefix's length is bounded by
/// [`Sv1Shared::new`]).
fn worker_name<'a>(
    prefix: &'a str,
    index: u32,
    buf: &'a mut [u8; MAX_WORKER_PREFIX + 10],
) -> &'a str {
    let mut digits = [0u8; 20];
    let digits = decimal(index as u64, &mut digits);
    let n = prefix.len().min(MAX_WORKER_PREFIX);
    buf[..n].copy_from_slice(&prefix.as_bytes()[..n]);
    buf[n..n + digits.len()].copy_from_slice(digits);
    std::str::from_utf8(&buf[..n + digits.len()]).unwrap_or(prefix)
}

/// The mask granted by a `mining.configure` result, 0 when version rolling was refused.
fn granted_mask(raw: &str) -> u32 {
    let Ok(map) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(raw) else {
        return 0;
    };
    if map.get("version-rolling").and_then(|v| v.as_bool()) != Some(true) {
        return 0;
    }
    map.get("version-rolling.mask")
        .and_then(|v| v.as_str())
        .and_then(|s| u32::from_str_radix(s, 16).ok())
        .unwrap_or(0)
}

/// `[subscriptions, extranonce1, extranonce2_size]` from a `mining.subscribe` result.
fn subscribe_result(raw: &str) -> Option<(String, u64)> {
    let v: serde_json::Value = serde_json::from_str(raw).ok()?;
    let en1 = v.get(1)?.as_str()?.to_owned();
    let size = v.get(2)?.as_u64()?;
    Some((en1, size))
}

/// A merkle branch from its raw JSON array of 64-digit hex strings, into a reused vector.
fn parse_branch(raw: &str, out: &mut Vec<Hash256>) -> Result<(), &'static str> {
    const WHAT: &str = "mining.notify merkle_branch";
    out.clear();
    let inner = raw
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or(WHAT)?;
    if inner.trim().is_empty() {
        return Ok(());
    }
    for item in inner.split(',') {
        let hex = item
            .trim()
            .strip_prefix('"')
            .and_then(|r| r.strip_suffix('"'))
            .ok_or(WHAT)?;
        if out.len() == MAX_BRANCH {
            return Err("mining.notify merkle_branch longer than 32");
        }
        out.push(Hash256::from_internal_hex(hex).map_err(|_| WHAT)?);
    }
    Ok(())
}

mod lines;

#[cfg(test)]
mod tests;
