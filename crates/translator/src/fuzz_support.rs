//! What the fuzz target of `crates/translator/fuzz` runs, here so that `tests/fuzz_corpus.rs`
//! replays the committed corpus on stable. [`translator_session`] reads its input as a script
//! of steps against the farm proxy's sans-IO core in aggregated mode ([`Translator`], driven
//! through [`Mode`] as the shell drives it), over either uplink: the SV2 extended channel
//! ([`UpstreamChannel`], the translator) or one SV1 connection ([`Sv1Upstream`], the SV1 proxy).
//! Time is the script's own (a virtual clock from [`T0`]); nothing reads a clock. Per-device
//! mode has a target of its own, [`per_device::translator_per_device`], which shares the
//! devices' side (the line grammar and every check on what a device is told) through `View`,
//! and the steps of the devices, the clock and the connection through `Harness`.
//!
//! The script starts with two configuration bytes (see `config`): the uplink, the split of the
//! extranonce (device bytes, least extranonce2), vardiff (pinned at the easiest difficulty,
//! free, or pinned hard), the in-flight window, workers per device, the version mask, jobs a
//! device remembers, the grace period, the `UpdateChannel` interval and how far ntime may run
//! ahead. Then each step is an operation byte (its low nibble; the high nibble picks a device)
//! and its arguments:
//!
//! - a device connects (at most [`MAX_DEVICES`] at once), closes, or overflows a line;
//! - a device sends a line from a small SV1 grammar: `mining.subscribe`, `mining.authorize`
//!   (good, empty, control-character and repeated worker names, `d=` hints),
//!   `mining.configure` (version rolling with any mask, minimum difficulty, subscribe
//!   extranonce, unknown extensions), `mining.submit` built from what the device was told (its
//!   jobs, extranonce1 and extranonce2 size, difficulty, version mask) with each field right or
//!   wrong (old, unknown or malformed job ids, extranonce2 sizes, ntime, version bits, workers,
//!   repeats), `mining.suggest_difficulty` and `suggest_target`, `extranonce.subscribe`, ping,
//!   `client.get_version`, unknown methods, replies, notifications; or raw bytes;
//! - the upstream sends a message built from the pool's side of the state. SV2: the channel's
//!   opening answered (any extranonce size and prefix, target, group) or refused, future and
//!   immediate jobs (real coinbases, a few merkle branches, rolling allowed or not), prev
//!   hashes naming held, old or unknown jobs (any nBits), `SetTarget`,
//!   `SetExtranoncePrefix`, `SubmitShares.Success` over any range of the shares in flight,
//!   `SubmitShares.Error` for any of them, `CloseChannel`, messages for other channels,
//!   messages a client never receives. SV1: answers to the opening's configure, subscribe,
//!   extranonce subscribe and authorize (granted or refused), `mining.notify` (new block or
//!   not, clean or not), `set_difficulty`, `set_extranonce` (same or other size),
//!   `set_version_mask`, `client.reconnect`, the verdict on any pending submission, replies to
//!   nothing. Or raw bytes (SV2: a payload through `Mining::decode`; SV1: a line);
//! - the clock steps (milliseconds to minutes) and the core ticks;
//! - the upstream is lost (failover), and later a new one is connected.
//!
//! As the shell does, a device that wants to be closed is closed after each step, and a
//! connection-wide channel failure (refused, closed, unusable) fails the upstream over.
//!
//! Checked after every step, against the rules the core documents (`translator`,
//! `downstream`, `shares`, `upstream`, `sv1_upstream`, `extranonce`, `jobs`):
//!
//! - no panic;
//! - **device ids** are fresh: each connection gets an id never used before, counting up;
//!   the core holds exactly the devices connected and not closed;
//! - **every device share gets exactly one verdict**: each `mining.submit` is answered once, in
//!   the same step, under its id; `true` exactly when the core accepted it, else the error code
//!   of its reject; the `ShareJudged` event agrees; every reject is justified by what the
//!   device was told (an unknown job was never sent to it, a stale one was, a wrong
//!   extranonce2 size, ntime outside the job's window, version bits outside its mask, a hash
//!   above the job's target, a share already accepted on that job, a worker not authorized, no
//!   subscription); a share right in every field on the device's latest job is accepted (or
//!   stale, after new work the device did not get);
//! - **what the device hashes is what the core judges**: an accepted share's hash, recomputed
//!   from the device's own view (its job's notify, the extranonce1 it was told, its
//!   extranonce2, ntime, nonce, rolled version) is the core's, and meets the difficulty it was
//!   credited at;
//! - **forwarded shares are the devices'**: an accepted share goes upstream exactly when the
//!   channel is open and it meets the pool's target in force or the network's; as exactly one
//!   submission under the next sequence number, which recomputed from the pool's own view
//!   (SV2: its job, prev hash and extranonce prefix; SV1: its notify and extranonce1) gives the
//!   same hash, with the extranonce size the pool set and version bits the job allows;
//! - **every forwarded share gets exactly one upstream verdict**: `UpstreamResult`s come only
//!   for shares in flight, once each, and are exactly those the rules give (`Success` accepts
//!   the newest `count` of those up to its sequence number, an error rejects its one, a full
//!   window pushes the oldest out unanswered, a closed or lost channel leaves them all
//!   unanswered); after the script the upstream is lost and nothing is left in flight;
//!   `in_flight()` is the count in flight and never exceeds the window;
//! - **jobs are the pool's**: each `mining.notify` a device gets carries the coinbase, merkle
//!   branch, version, prev hash, nBits and ntime of a job the pool sent and activated; ids are
//!   fresh (strictly increasing per device); `JobSent` names as many devices as got it;
//! - **extranonce**: each subscribe answer's extranonce1 is the channel's prefix and the
//!   device's bytes, its size the channel's less the device bytes; devices connected at once
//!   hold distinct values;
//! - **requests are answered once**: every request with an id gets at most one reply, and all
//!   but `mining.subscribe` get it at once; a subscribe gets it at once when the channel is
//!   open, else when it opens;
//! - **nothing grows without bound**: each step's output to a device, messages upstream and
//!   events are bounded (a line's echo is linear in the line); the in-flight window; the
//!   nominal hash rate is finite and not negative;
//! - **what goes upstream is well-formed**: SV2 messages are ones a client sends and encode and
//!   decode back; SV1 lines are JSON requests;
//! - every line a device gets is one JSON object.

use primitives::fuzz_input::FuzzInput as Input;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;

use mining::vardiff::VardiffConfig;
use mining::Reject;
use primitives::coinbase::{CoinbaseSpec, Payout};
use primitives::Timestamp;
use primitives::{
    merkle_root_from_branch, sha256d, CompactTarget, Difficulty, Hash256, Header, Target,
};
use serde_json::Value;
use sv1::ErrorCode;
use sv2::messages::mining::{
    CloseChannel, NewExtendedMiningJob, OpenExtendedMiningChannelSuccess, OpenMiningChannelError,
    SetExtranoncePrefix, SetGroupChannel, SetNewPrevHash, SetTarget, SubmitSharesError,
    SubmitSharesExtended, SubmitSharesSuccess, UpdateChannel, UpdateChannelError,
};
use sv2::messages::Mining;

use crate::downstream::LineOutcome;
use crate::extranonce::DeviceExtranonce;
use crate::shares::{LocalShare, UpstreamVerdict};
use crate::sv1_upstream::Sv1Upstream;
use crate::uplink::Uplink;
use crate::upstream::{UpstreamChannel, MAX_FUTURE_JOBS};
use crate::{DeviceId, Event, Mode, Translator, TranslatorConfig};

pub mod per_device;

/// The virtual clock's start.
pub const T0: Timestamp = Timestamp::from_millis(1_000_000);
/// Steps per run, whatever the input's length: a run's time stays bounded.
const MAX_STEPS: usize = 300;
/// Devices connected at once, at most.
pub const MAX_DEVICES: usize = 6;
/// The longest device line the harness hands the core; a longer one overflows, as the shell's
/// line reader reports one past its limit.
const LINE_CAP: usize = 4096;
/// What one step may write to a device besides what a line echoes: a reply, a difficulty, an
/// extranonce and two notify lines (a few hundred bytes each here), with room to spare.
const STEP_OUTPUT: usize = 8192;
/// A reply may echo a line (its id, an error message quoting it), escaped: six bytes per byte.
const ECHO_FACTOR: usize = 6;
/// Messages one step may send upstream (the opening of an SV1 connection is one write).
const STEP_UPSTREAM: usize = 4;
/// The job headers' time.
const NTIME0: u32 = 1_700_000_000;
/// Regtest's limit: about every second share is a block.
const EASY_BITS: u32 = 0x207f_ffff;
/// Difficulty 1: no share is a block.
const HARD_BITS: u32 = 0x1d00_ffff;

/// Operation codes (the low nibble of an operation byte, modulo [`op::COUNT`]).
pub mod op {
    /// A device connects (up to the devices' limit).
    pub const CONNECT: u8 = 0;
    /// Device `n` (the high nibble) sends a generated line ([`super::line`]).
    pub const LINE: u8 = 1;
    /// Device `n` sends raw bytes: a length byte, then the bytes.
    pub const RAW_LINE: u8 = 2;
    /// Device `n` disconnects.
    pub const CLOSE: u8 = 3;
    /// The upstream sends a generated message ([`super::up`]), while connected.
    pub const UPSTREAM: u8 = 4;
    /// The upstream sends a message built from raw bytes, while connected.
    pub const UPSTREAM_RAW: u8 = 5;
    /// The clock steps (one byte: unit and count) and the core ticks.
    pub const TICK: u8 = 6;
    /// The upstream connection is lost.
    pub const LOST: u8 = 7;
    /// A new upstream connection is ready (after [`LOST`]).
    pub const CONNECTED: u8 = 8;
    /// Device `n` sends a line longer than the limit.
    pub const LONG_LINE: u8 = 9;
    /// The number of operation codes.
    pub const COUNT: u8 = 10;
}

/// Device line kinds (the low nibble of the first argument of [`op::LINE`], modulo
/// [`line::COUNT`]; the high nibble varies the line).
pub mod line {
    /// `mining.subscribe`, with or without a user agent and session id.
    pub const SUBSCRIBE: u8 = 0;
    /// `mining.authorize`, under various names.
    pub const AUTHORIZE: u8 = 1;
    /// `mining.configure`, with various extensions and masks.
    pub const CONFIGURE: u8 = 2;
    /// `mining.submit` (kinds not listed here are submits too).
    pub const SUBMIT: u8 = 3;
    /// `mining.suggest_difficulty`, sane or not.
    pub const SUGGEST_DIFFICULTY: u8 = 6;
    /// `mining.suggest_target`, sane or not.
    pub const SUGGEST_TARGET: u8 = 7;
    /// `mining.extranonce.subscribe`.
    pub const EXTRANONCE_SUBSCRIBE: u8 = 8;
    /// `client.get_version` or a ping.
    pub const PING: u8 = 9;
    /// Unknown methods and malformed requests.
    pub const OTHER: u8 = 10;
    /// The device's last submit again (a duplicate), once it has one.
    pub const RESUBMIT: u8 = 11;
    /// The number of line kinds.
    pub const COUNT: u8 = 12;
}

/// Upstream message kinds (the first argument of [`op::UPSTREAM`], modulo [`up::COUNT`]).
pub mod up {
    /// SV2: `OpenExtendedMiningChannel.Success`; SV1: the answer to an opening request.
    pub const OPEN: u8 = 0;
    /// SV2: a job; SV1: `mining.notify`.
    pub const JOB: u8 = 1;
    /// SV2: `SetNewPrevHash`; SV1: `mining.notify` of a new block.
    pub const PREV_HASH: u8 = 2;
    /// SV2: `SetTarget`; SV1: `mining.set_difficulty`.
    pub const TARGET: u8 = 3;
    /// SV2: `SetExtranoncePrefix`; SV1: `mining.set_extranonce`.
    pub const PREFIX: u8 = 4;
    /// A verdict on shares in flight (accepted).
    pub const ACCEPT: u8 = 5;
    /// A verdict on one share in flight (rejected).
    pub const REJECT: u8 = 6;
    /// SV2: `CloseChannel` or `OpenMiningChannel.Error`; SV1: `client.reconnect` or a refusal.
    pub const CLOSE: u8 = 7;
    /// Anything else: messages for other channels, ones a client never gets, unknown replies.
    pub const OTHER: u8 = 8;
    /// The number of upstream message kinds.
    pub const COUNT: u8 = 9;
}

// ---- Input -------------------------------------------------------------------------------

// ---- Configuration -----------------------------------------------------------------------

/// The core's settings from the two configuration bytes; bit 0 of the first picks the uplink.
fn config(c0: u8, c1: u8) -> TranslatorConfig {
    let easiest = Difficulty::MIN;
    let (start, vardiff) = match (c0 >> 3) & 3 {
        // Pinned at the easiest: every share meets it.
        0 => (
            easiest,
            VardiffConfig {
                min: easiest,
                max: easiest,
                ..VardiffConfig::default()
            },
        ),
        // Free to move, quickly.
        1 => (
            easiest,
            VardiffConfig {
                min: easiest,
                max: Difficulty::saturating(1e6),
                retarget_interval_ms: 1_000,
                smoothing_ms: 5_000,
                ..VardiffConfig::default()
            },
        ),
        // Pinned hard: shares are low difficulty, but for the lucky.
        2 => {
            let d = Difficulty::saturating(1.0 / 16.0);
            (
                d,
                VardiffConfig {
                    min: d,
                    max: d,
                    ..VardiffConfig::default()
                },
            )
        }
        // Starting easy, within a narrow range.
        _ => (
            easiest,
            VardiffConfig {
                min: easiest,
                max: Difficulty::saturating(2f64.powi(-24)),
                retarget_interval_ms: 500,
                smoothing_ms: 2_000,
                ..VardiffConfig::default()
            },
        ),
    };
    TranslatorConfig {
        user_identity: "farm".into(),
        device_hash_rate: 1e9,
        device_extranonce_bytes: [0, 1, 2, 4][usize::from((c0 >> 1) & 3)],
        min_extranonce2_size: [1, 2, 4, 0][usize::from((c1 >> 3) & 3)],
        version_mask: if c0 & 0x80 != 0 {
            0
        } else {
            sv1::VERSION_ROLLING_MASK
        },
        max_workers: if c0 & 0x40 != 0 { 1 } else { 4 },
        start_difficulty: start,
        vardiff,
        grace_ms: if c1 & 0x20 != 0 { 0 } else { 5_000 },
        max_jobs: 1 + usize::from(c1 & 7),
        max_ntime_ahead: if c1 & 0x80 != 0 { 0 } else { 7_000 },
        max_in_flight: if c0 & 0x20 != 0 { 3 } else { 64 },
        update_interval_ms: if c1 & 0x40 != 0 { 0 } else { 1_000 },
        ..TranslatorConfig::default()
    }
}

// ---- The pool's side -----------------------------------------------------------------------

/// A job as the pool made it, and the work it became.
#[derive(Clone, Debug)]
struct PoolJob {
    coinb1: Vec<u8>,
    coinb2: Vec<u8>,
    merkle: Vec<Hash256>,
    version: u32,
    rolling: bool,
    /// The extranonce prefix (SV2) or extranonce1 (SV1) in force when it was sent.
    prefix: Vec<u8>,
    /// Once work: its prev hash, nBits and start time.
    work: Option<(Hash256, u32, u32)>,
}

/// What the pool makes of a submission.
struct Submission {
    /// SV1: the JSON-RPC id to answer it under.
    rpc_id: Option<u64>,
    /// The hash the pool computes for it, where it can (SV1: not for a job that left the
    /// proxy's window).
    hash: Option<Hash256>,
}

/// The pool, as the harness plays it.
trait PoolSide: Sized {
    type U: Uplink + Default;

    fn new() -> Self;
    /// A new connection (the core was just told).
    fn connected(&mut self);
    /// The connection is gone.
    fn lost(&mut self);
    /// A message the core sent; a share submission is checked here and described.
    fn sent(&mut self, m: <Self::U as Uplink>::Out, config: &TranslatorConfig) -> Vec<Submission>;
    /// A message built from the state, `kind` one of [`up`].
    fn message(
        &mut self,
        kind: u8,
        input: &mut Input<'_>,
        in_flight: &[Flight],
    ) -> Option<<Self::U as Uplink>::In>;
    /// A raw message from the input.
    fn raw(&mut self, input: &mut Input<'_>) -> Option<<Self::U as Uplink>::In>;
    /// The pool's share target in force (what forwarded shares must meet).
    fn target(&self) -> Target;
    /// The channel is open (as far as the pool knows).
    fn is_open(&self) -> bool;
    /// The job whose coinbase starts with `coinb1`.
    fn job(&self, coinb1: &[u8]) -> Option<&PoolJob>;
    /// The channel's extranonce prefix and rolled size, once open.
    fn extranonce(&self) -> Option<(Vec<u8>, usize)>;
    /// The verdicts the pool just sent, to model.
    fn take_verdicts(&mut self) -> Vec<Verdict>;
    /// A submission's JSON-RPC id is its sequence number's (SV1).
    fn bind(&mut self, _rpc_id: u64, _seq: u32) {}
}

/// A verdict the pool sent.
#[derive(Clone, Debug)]
enum Verdict {
    /// Up to this sequence number, this many.
    Accepted {
        last: u32,
        count: u32,
    },
    Rejected {
        seq: u32,
    },
}

/// A real coinbase split around an extranonce of `en_len` bytes, tagged so that its first
/// part names its job.
fn coinbase(tag: u32, en_len: usize) -> (Vec<u8>, Vec<u8>) {
    let mut spec = CoinbaseSpec::new(900_000, en_len.clamp(1, 32));
    spec.tag = tag.to_be_bytes().to_vec();
    spec.payouts.push(Payout {
        script_pubkey: primitives::bitcoin::ScriptBuf::from_bytes(
            [&[0x00, 0x14][..], &[0xab; 20]].concat(),
        ),
        value: primitives::bitcoin::Amount::from_sat(312_500_000),
    });
    let parts = spec.build().expect("a valid coinbase");
    (parts.prefix, parts.suffix)
}

fn merkle(tag: u32, n: usize) -> Vec<Hash256> {
    (0..n)
        .map(|i| sha256d(&[&tag.to_le_bytes()[..], &[i as u8]].concat()))
        .collect()
}

/// The header hash of a share, from its parts.
#[allow(clippy::too_many_arguments)]
fn share_hash(
    job: &PoolJob,
    prev: Hash256,
    nbits: u32,
    extranonce1: &[u8],
    extranonce2: &[u8],
    version: u32,
    ntime: u32,
    nonce: u32,
) -> Hash256 {
    let txid =
        primitives::hash::sha256d_parts(&[&job.coinb1, extranonce1, extranonce2, &job.coinb2]);
    let header = Header {
        version,
        prev_hash: prev,
        merkle_root: merkle_root_from_branch(txid, &job.merkle),
        time: ntime,
        bits: CompactTarget::from_consensus(nbits),
        nonce,
    };
    primitives::hash::sha256d_header(&header.to_bytes())
}

fn prev_hash(seed: u8) -> Hash256 {
    sha256d(&[0x70, seed])
}

fn nbits(b: u8) -> u32 {
    match b % 8 {
        0..=3 => EASY_BITS,
        4..=6 => HARD_BITS,
        _ => 0x0100_0000 | u32::from(b),
    }
}

fn pick_target(b: u8) -> Target {
    match b % 6 {
        0 | 1 => Target::MAX,
        2 => Difficulty::saturating(2.0).to_target(),
        3 => Difficulty::saturating(1.0 / 2.0).to_target(),
        4 => Target::DIFFICULTY_1,
        _ => Target::ZERO,
    }
}

/// A message the core sends upstream encodes, and decodes back to itself.
fn encodes_back(m: &Mining) {
    let mut buf = Vec::new();
    m.encode(&mut buf)
        .expect("a message the core sends encodes");
    let back = Mining::decode(m.msg_type(), &mut buf)
        .expect("a Mining message")
        .expect("decodes");
    assert_eq!(&back, m, "a message the core sends decodes back");
}

/// The hash the pool computes for an extended share on a channel of `size` bytes to roll
/// holding `jobs`, once it checked the share's form: a job it sent that became work, the
/// channel's extranonce size, version bits the job and the mask allow.
fn submission_hash(
    s: &SubmitSharesExtended,
    jobs: &HashMap<u32, PoolJob>,
    size: usize,
    config: &TranslatorConfig,
) -> Hash256 {
    assert_eq!(s.extranonce.len(), size, "the extranonce size the pool set");
    let job = jobs.get(&s.job_id).expect("a share on a job the pool sent");
    let (prev, bits, _) = job.work.expect("a share on work");
    if !job.rolling {
        assert_eq!(
            s.version, job.version,
            "version rolled on a job that forbids it"
        );
    }
    let rolled = s.version ^ job.version;
    assert_eq!(
        rolled & !config.version_mask,
        0,
        "version bits outside the mask"
    );
    share_hash(
        job,
        prev,
        bits,
        &job.prefix,
        &s.extranonce,
        s.version,
        s.ntime,
        s.nonce,
    )
}

/// An extended job from the pool (`b` shapes it: merkle branch, rolling) for a channel with
/// `prefix` and `size` bytes to roll: the message, and the job as the pool keeps it (not yet
/// work).
fn extended_job(
    channel_id: u32,
    job_id: u32,
    b: u8,
    prefix: &[u8],
    size: usize,
    min_ntime: Option<u32>,
) -> (Mining, PoolJob) {
    let (coinb1, coinb2) = coinbase(job_id, prefix.len() + size);
    let merkle = merkle(job_id, usize::from(b >> 6));
    let rolling = b & 0x08 == 0;
    let m = Mining::NewExtendedMiningJob(NewExtendedMiningJob {
        channel_id,
        job_id,
        min_ntime,
        version: 0x2000_0000,
        version_rolling_allowed: rolling,
        merkle_path: merkle.iter().map(|h| h.0).collect(),
        coinbase_tx_prefix: coinb1.clone(),
        coinbase_tx_suffix: coinb2.clone(),
    });
    let job = PoolJob {
        coinb1,
        coinb2,
        merkle,
        version: 0x2000_0000,
        rolling,
        prefix: prefix.to_vec(),
        work: None,
    };
    (m, job)
}

/// A channel's jobs as the pool keeps them: future ones held until a prev hash names one, and
/// the last prev hash (hash, nBits, least ntime) that immediate jobs are work on.
#[derive(Default)]
struct Held {
    jobs: HashMap<u32, PoolJob>,
    /// Future jobs held by the core, oldest first.
    future: VecDeque<u32>,
    prev: Option<(Hash256, u32, u32)>,
}

impl Held {
    /// A new job: held if future (the oldest dropped past the core's limit), work at once on
    /// the last prev hash otherwise.
    fn add(&mut self, job_id: u32, min_ntime: Option<u32>, mut job: PoolJob) {
        match (min_ntime, self.prev) {
            (None, _) => {
                if self.future.len() == MAX_FUTURE_JOBS {
                    self.future.pop_front();
                }
                self.future.push_back(job_id);
            }
            (Some(t), Some((prev, bits, min))) => job.work = Some((prev, bits, t.max(min))),
            (Some(_), None) => {}
        }
        self.jobs.insert(job_id, job);
    }

    /// A prev hash naming `job_id`: that job, if held, becomes work on it; no job stays held.
    fn new_prev(&mut self, job_id: u32, work: (Hash256, u32, u32)) {
        self.prev = Some(work);
        if self.future.contains(&job_id) {
            if let Some(j) = self.jobs.get_mut(&job_id) {
                j.work = Some(work);
            }
        }
        self.future.clear();
    }

    fn find(&self, coinb1: &[u8]) -> Option<&PoolJob> {
        self.jobs.values().find(|j| j.coinb1 == coinb1)
    }
}

/// A `SetNewPrevHash` on `channel_id`, naming (by `b`) the newest job held mostly, the oldest,
/// or an older or made-up one: the message, the job named, and the work it starts if its nBits
/// make a target.
fn new_prev_hash(
    channel_id: u32,
    b: u8,
    (newest, oldest): (Option<u32>, Option<u32>),
    next_job: u32,
    input: &mut Input<'_>,
) -> (Mining, u32, Option<(Hash256, u32, u32)>) {
    let job_id = match (b >> 2) % 4 {
        0 | 1 => newest.unwrap_or(next_job),
        2 => oldest.unwrap_or(0),
        _ => next_job.saturating_sub(1 + u32::from(input.u8() % 4)),
    };
    let seed = input.u8();
    let bits = nbits(input.u8());
    let min_ntime = NTIME0 + u32::from(seed % 8);
    let prev = prev_hash(seed);
    let m = Mining::SetNewPrevHash(SetNewPrevHash {
        channel_id,
        job_id,
        prev_hash: prev.0,
        min_ntime,
        nbits: bits,
    });
    let valid = Target::from_compact(CompactTarget::from_consensus(bits)).is_ok();
    (m, job_id, valid.then_some((prev, bits, min_ntime)))
}

/// A `SetExtranoncePrefix` on `channel_id` of a prefix `b` makes (up to 5 bytes).
fn new_prefix(channel_id: u32, b: u8) -> (Mining, Vec<u8>) {
    let prefix: Vec<u8> = (0..b % 6).map(|i| b ^ i).collect();
    let m = Mining::SetExtranoncePrefix(SetExtranoncePrefix {
        channel_id,
        extranonce_prefix: prefix.clone(),
    });
    (m, prefix)
}

/// A `SubmitShares.Success` on `channel_id` up to one of `seqs` in flight (or a little past it,
/// by `b`; any number with none), for a count of any size: the message, and its verdict.
fn success(channel_id: u32, b: u8, seqs: &[u32], input: &mut Input<'_>) -> (Mining, Verdict) {
    let last = match seqs.len() {
        0 => u32::from(b),
        n => {
            let s = seqs[usize::from(input.u8()) % n];
            if b & 0x80 != 0 {
                s.wrapping_add(u32::from(b & 3))
            } else {
                s
            }
        }
    };
    let count = match b % 4 {
        0 => u32::MAX,
        n => u32::from(n - 1) + u32::from(input.u8() % 4),
    };
    let m = Mining::SubmitSharesSuccess(SubmitSharesSuccess {
        channel_id,
        last_sequence_number: last,
        new_submits_accepted_count: count,
        new_shares_sum: u64::from(count),
    });
    (m, Verdict::Accepted { last, count })
}

/// A `SubmitShares.Error` on `channel_id` for the one of `seqs` in flight `b` picks (any number
/// with none), under one of the codes: the message, and its verdict.
fn error(channel_id: u32, b: u8, seqs: &[u32]) -> (Mining, Verdict) {
    let seq = match seqs.len() {
        0 => u32::from(b),
        n => seqs[usize::from(b) % n],
    };
    let m = Mining::SubmitSharesError(SubmitSharesError {
        channel_id,
        sequence_number: seq,
        error_code: ["stale-share", "difficulty-too-low", "invalid-job-id"][usize::from(b % 3)]
            .into(),
    });
    (m, Verdict::Rejected { seq })
}

/// Messages a client never gets or that name no channel of its own, by `b % 5`: on
/// `channel_id`, or `group` listing `member`; `last` for the fifth.
fn stray(b: u8, channel_id: u32, (group, member): (u32, u32), last: Mining) -> Mining {
    match b % 5 {
        0 => Mining::UpdateChannelError(UpdateChannelError {
            channel_id,
            error_code: "max-target-out-of-range".into(),
        }),
        1 => Mining::SetGroupChannel(SetGroupChannel {
            group_channel_id: group,
            channel_ids: vec![member],
        }),
        2 => Mining::SubmitSharesExtended(SubmitSharesExtended {
            channel_id,
            sequence_number: 0,
            job_id: 1,
            nonce: 0,
            ntime: NTIME0,
            version: 0x2000_0000,
            extranonce: vec![0; 4],
            user_identity: None,
        }),
        3 => Mining::UpdateChannel(UpdateChannel {
            channel_id,
            nominal_hash_rate: 1.0,
            maximum_target: Target::MAX,
        }),
        _ => last,
    }
}

/// A message decoded from raw input (a type byte, a length byte, the payload), unless it
/// answers a request (`request`) or names a channel (`channel`) of the connection: those the
/// model builds itself.
fn raw_message(
    input: &mut Input<'_>,
    request: impl Fn(u32) -> bool,
    channel: impl Fn(u32) -> bool,
) -> Option<Mining> {
    let msg_type = input.u8();
    let len = usize::from(input.u8());
    let mut payload = input.take(len).to_vec();
    let m = Mining::decode(msg_type, &mut payload)?.ok()?;
    let touches = match &m {
        Mining::OpenExtendedMiningChannelSuccess(s) => request(s.request_id),
        Mining::OpenMiningChannelError(e) => request(e.request_id),
        Mining::NewExtendedMiningJob(j) => channel(j.channel_id),
        Mining::SetNewPrevHash(p) => channel(p.channel_id),
        Mining::SetTarget(t) => channel(t.channel_id),
        Mining::SetExtranoncePrefix(p) => channel(p.channel_id),
        Mining::SubmitSharesSuccess(s) => channel(s.channel_id),
        Mining::SubmitSharesError(e) => channel(e.channel_id),
        Mining::CloseChannel(c) => channel(c.channel_id),
        _ => false,
    };
    (!touches).then_some(m)
}

/// The shape of a channel the pool opens, from `b`: bytes to roll and prefix length.
fn channel_shape(b: u8) -> (usize, usize) {
    let size = match b >> 4 {
        0 => 0,
        1 => 1,
        2..=9 => 4,
        10..=13 => 8,
        14 => 16,
        _ => 30,
    };
    let prefix_len = [4usize, 0, 2, 8][usize::from((b >> 2) & 3)];
    (size, prefix_len)
}

/// A verdict applied to the shares in flight on one channel, as the rules give it
/// (`SubmitShares.Success` accepts the newest `count` of those up to its sequence number, an
/// error rejects its one): what each share settled gets, in `out`.
fn apply_verdict(
    flights: &mut VecDeque<Flight>,
    v: &Verdict,
    out: &mut Vec<(u32, DeviceId, UpstreamVerdict)>,
) {
    match *v {
        Verdict::Accepted { last, count } => {
            let covered = flights
                .iter()
                .take_while(|f| last.wrapping_sub(f.seq) < 1 << 31)
                .count();
            let n = covered.min(count as usize);
            for f in flights.drain(covered - n..covered) {
                out.push((f.seq, f.device, UpstreamVerdict::Accepted));
            }
        }
        Verdict::Rejected { seq } => {
            if let Some(i) = flights.iter().position(|f| f.seq == seq) {
                let f = flights.remove(i).expect("found");
                out.push((f.seq, f.device, UpstreamVerdict::Rejected(String::new())));
            }
        }
    }
}

/// The upstream verdicts among `events`, rejections' codes left out.
fn upstream_results<'a>(
    events: impl IntoIterator<Item = &'a Event>,
) -> Vec<(u32, DeviceId, UpstreamVerdict)> {
    events
        .into_iter()
        .filter_map(|e| match e {
            Event::UpstreamResult(r) => Some((
                r.sequence_number,
                r.device,
                match &r.verdict {
                    UpstreamVerdict::Rejected(_) => UpstreamVerdict::Rejected(String::new()),
                    v => v.clone(),
                },
            )),
            _ => None,
        })
        .collect()
}

/// The SV2 pool: one extended channel per connection.
#[derive(Default)]
struct Sv2Pool {
    /// The request id of the core's `OpenExtendedMiningChannel`, until answered.
    request: Option<u32>,
    /// The open channel: id, group, prefix, size.
    channel: Option<(u32, u32, Vec<u8>, usize)>,
    target: Target,
    next_channel: u32,
    next_job: u32,
    held: Held,
    verdicts: Vec<Verdict>,
}

impl Sv2Pool {
    fn channel_id(&self) -> u32 {
        self.channel.as_ref().map_or(1, |c| c.0)
    }

    /// The id a message is addressed with: the channel's mostly, its group, or another.
    fn address(&self, b: u8) -> (u32, bool) {
        let Some((id, group, ..)) = &self.channel else {
            return (1 + u32::from(b % 3), false);
        };
        match b % 16 {
            0 => (id.wrapping_add(1), false),
            1 if *group != 0 => (*group, true),
            _ => (*id, true),
        }
    }
}

impl PoolSide for Sv2Pool {
    type U = UpstreamChannel;

    fn new() -> Self {
        Sv2Pool {
            next_channel: 7,
            next_job: 1,
            ..Sv2Pool::default()
        }
    }

    fn connected(&mut self) {}

    fn lost(&mut self) {
        let next_channel = self.next_channel;
        let next_job = self.next_job;
        *self = Sv2Pool::new();
        self.next_channel = next_channel;
        self.next_job = next_job;
    }

    fn sent(&mut self, m: Mining, config: &TranslatorConfig) -> Vec<Submission> {
        encodes_back(&m);
        match m {
            Mining::OpenExtendedMiningChannel(o) => {
                assert!(
                    self.request.is_none() && self.channel.is_none(),
                    "a second channel asked for on one connection"
                );
                assert_eq!(o.user_identity, config.user_identity);
                assert_eq!(o.min_extranonce_size, config.min_extranonce_size());
                assert!(o.nominal_hash_rate >= 0.0 && o.nominal_hash_rate.is_finite());
                self.request = Some(o.request_id);
                Vec::new()
            }
            Mining::UpdateChannel(UpdateChannel {
                channel_id,
                nominal_hash_rate,
                ..
            }) => {
                assert_eq!(Some(channel_id), self.channel.as_ref().map(|c| c.0));
                assert!(nominal_hash_rate >= 0.0 && nominal_hash_rate.is_finite());
                Vec::new()
            }
            Mining::SubmitSharesExtended(s) => {
                let (id, _, _, size) = self.channel.as_ref().expect("a share on no channel");
                assert_eq!(s.channel_id, *id, "a share for another channel");
                let hash = submission_hash(&s, &self.held.jobs, *size, config);
                vec![Submission {
                    rpc_id: None,
                    hash: Some(hash),
                }]
            }
            other => panic!("the core sent {}, which a client never sends", other.name()),
        }
    }

    fn message(&mut self, kind: u8, input: &mut Input<'_>, in_flight: &[Flight]) -> Option<Mining> {
        let b = input.u8();
        let (channel_id, ours) = self.address(input.u8());
        match kind {
            up::OPEN => {
                let request_id = match (self.request, b % 8) {
                    (Some(r), 0..=6) => r,
                    (r, _) => r.unwrap_or(0).wrapping_add(1),
                };
                let (size, prefix_len) = channel_shape(b);
                let tag = self.next_channel;
                let prefix: Vec<u8> = (0..prefix_len).map(|i| (tag as u8) ^ (i as u8)).collect();
                let channel_id = self.next_channel;
                let group = if input.u8() % 4 == 0 { 99 } else { 0 };
                let target = pick_target(input.u8());
                if self.request == Some(request_id) && prefix.len() + size <= 32 {
                    self.request = None;
                    self.next_channel += 1;
                    self.channel = Some((channel_id, group, prefix.clone(), size));
                    self.target = target;
                    self.held.prev = None;
                    self.held.future.clear();
                }
                Some(Mining::OpenExtendedMiningChannelSuccess(
                    OpenExtendedMiningChannelSuccess {
                        request_id,
                        channel_id,
                        target,
                        extranonce_size: size as u16,
                        extranonce_prefix: prefix,
                        group_channel_id: group,
                    },
                ))
            }
            up::JOB => {
                // A job: future (held until a prev hash names it) or at once on the last one.
                let job_id = self.next_job;
                self.next_job += 1;
                let immediate = b % 3 == 0;
                let (prefix, size) = self
                    .channel
                    .as_ref()
                    .map_or((vec![0; 4], 4), |c| (c.2.clone(), c.3));
                let min_ntime = immediate.then(|| NTIME0 + u32::from(input.u8()));
                let (m, job) = extended_job(channel_id, job_id, b, &prefix, size, min_ntime);
                if ours && self.channel.is_some() {
                    self.held.add(job_id, min_ntime, job);
                }
                Some(m)
            }
            up::PREV_HASH => {
                let held = &self.held;
                let ends = (held.future.back().copied(), held.future.front().copied());
                let (m, job_id, work) = new_prev_hash(channel_id, b, ends, self.next_job, input);
                if let Some(work) = work.filter(|_| ours && self.channel.is_some()) {
                    self.held.new_prev(job_id, work);
                }
                Some(m)
            }
            up::TARGET => {
                let target = pick_target(b);
                if ours && self.channel.is_some() {
                    self.target = target;
                }
                Some(Mining::SetTarget(SetTarget {
                    channel_id,
                    maximum_target: target,
                }))
            }
            up::PREFIX => {
                let (m, prefix) = new_prefix(channel_id, b);
                if ours {
                    if let Some(c) = self.channel.as_mut() {
                        if prefix.len() + c.3 <= 32 {
                            c.2 = prefix;
                        }
                    }
                }
                Some(m)
            }
            up::ACCEPT | up::REJECT => {
                let seqs: Vec<u32> = in_flight.iter().map(|f| f.seq).collect();
                let (m, v) = if kind == up::ACCEPT {
                    success(channel_id, b, &seqs, input)
                } else {
                    error(channel_id, b, &seqs)
                };
                if ours && self.channel.is_some() {
                    self.verdicts.push(v);
                }
                Some(m)
            }
            up::CLOSE => {
                if b % 2 == 0 {
                    if ours && self.channel.is_some() {
                        self.channel = None;
                    }
                    Some(Mining::CloseChannel(CloseChannel {
                        channel_id,
                        reason_code: "pool closing".into(),
                    }))
                } else {
                    let request_id = self
                        .request
                        .unwrap_or(0)
                        .wrapping_add(u32::from(b % 4 == 1));
                    if self.request == Some(request_id) {
                        self.request = None;
                    }
                    Some(Mining::OpenMiningChannelError(OpenMiningChannelError {
                        request_id,
                        error_code: "unknown-user".into(),
                    }))
                }
            }
            _ => Some(stray(
                b,
                channel_id,
                (99, self.channel_id()),
                Mining::CloseChannel(CloseChannel {
                    channel_id: channel_id.wrapping_add(5),
                    reason_code: "not yours".into(),
                }),
            )),
        }
    }

    fn raw(&mut self, input: &mut Input<'_>) -> Option<Mining> {
        // Only what the model can follow: verdicts and targets for no channel of ours would
        // change nothing; anything touching the channel's state is built by `message`.
        let ours = |c: u32| {
            self.channel
                .as_ref()
                .is_some_and(|(id, group, ..)| c == *id || (*group != 0 && c == *group))
        };
        raw_message(input, |r| self.request == Some(r), ours)
    }

    fn target(&self) -> Target {
        self.target
    }

    fn is_open(&self) -> bool {
        self.channel.is_some()
    }

    fn job(&self, coinb1: &[u8]) -> Option<&PoolJob> {
        self.held.find(coinb1)
    }

    fn extranonce(&self) -> Option<(Vec<u8>, usize)> {
        self.channel.as_ref().map(|c| (c.2.clone(), c.3))
    }

    fn take_verdicts(&mut self) -> Vec<Verdict> {
        std::mem::take(&mut self.verdicts)
    }
}

/// What an SV1 opening request was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sv1Request {
    Configure,
    Subscribe,
    ExtranonceSubscribe,
    Authorize,
}

/// The SV1 pool: one connection from the proxy.
#[derive(Default)]
struct Sv1Pool {
    requests: Vec<(u64, Sv1Request)>,
    subscribed: bool,
    authorized: bool,
    refused: bool,
    /// The mask asked for, then granted.
    mask: u32,
    extranonce1: Vec<u8>,
    extranonce2_size: usize,
    /// The pool's job ids, newest last, with the jobs.
    jobs: Vec<(String, PoolJob)>,
    next_job: u32,
    prev: Option<Hash256>,
    /// The target of the next job (SV1 difficulty applies from the next job).
    target: Target,
    /// Submissions awaiting the pool's answer: JSON-RPC id, sequence number.
    pending: Vec<(u64, u32)>,
    verdicts: Vec<Verdict>,
    /// The proxy's worker name.
    worker: String,
}

impl Sv1Pool {
    fn reply(id: u64, result: &str, error: &str) -> Vec<u8> {
        format!("{{\"id\":{id},\"result\":{result},\"error\":{error}}}").into_bytes()
    }

    fn notify(&mut self, b: u8, input: &mut Input<'_>, new_block: bool) -> Vec<u8> {
        let tag = self.next_job;
        self.next_job += 1;
        let job_id = format!("p{tag:x}");
        let en_len = self.extranonce1.len() + self.extranonce2_size;
        let (coinb1, coinb2) = coinbase(0x8000_0000 | tag, en_len);
        let merkle = merkle(tag, usize::from(b >> 6));
        let prev = match (new_block, self.prev) {
            (false, Some(p)) => p,
            _ => prev_hash(input.u8()),
        };
        let bits = nbits(input.u8());
        let ntime = NTIME0 + u32::from(input.u8());
        let clean = b & 0x10 != 0;
        // The proxy takes work once subscribed (holding it until authorized).
        if self.subscribed && !self.refused {
            self.prev = Some(prev);
            self.jobs.push((
                job_id.clone(),
                PoolJob {
                    coinb1: coinb1.clone(),
                    coinb2: coinb2.clone(),
                    merkle: merkle.clone(),
                    version: 0x2000_0000,
                    // The proxy lets devices roll only if the pool granted bits.
                    rolling: self.mask != 0,
                    prefix: self.extranonce1.clone(),
                    work: Some((prev, bits, ntime)),
                },
            ));
        }
        let mut line = String::new();
        let branch: Vec<String> = merkle
            .iter()
            .map(|h| format!("\"{}\"", hex(&h.0)))
            .collect();
        // The prev hash as SV1 writes it: each 4-byte word of the internal order byte-swapped.
        let mut words = [0u8; 32];
        for (i, w) in prev.0.chunks(4).enumerate() {
            for (j, &x) in w.iter().enumerate() {
                words[i * 4 + 3 - j] = x;
            }
        }
        let _ = write!(
            line,
            "{{\"id\":null,\"method\":\"mining.notify\",\"params\":[\"{job_id}\",\"{}\",\"{}\",\"{}\",[{}],\"20000000\",\"{bits:08x}\",\"{ntime:08x}\",{clean}]}}",
            hex(&words),
            hex(&coinb1),
            hex(&coinb2),
            branch.join(",")
        );
        line.into_bytes()
    }
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl PoolSide for Sv1Pool {
    type U = Sv1Upstream;

    fn new() -> Self {
        Sv1Pool {
            next_job: 1,
            target: Difficulty::ONE.to_target(),
            mask: 0x1fff_e000,
            ..Sv1Pool::default()
        }
    }

    fn connected(&mut self) {}

    fn lost(&mut self) {
        let next_job = self.next_job;
        *self = Sv1Pool::new();
        self.next_job = next_job;
    }

    fn sent(&mut self, m: Vec<u8>, _config: &TranslatorConfig) -> Vec<Submission> {
        let mut out = Vec::new();
        assert!(m.ends_with(b"\n"), "an SV1 write ends its line");
        for l in m.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let v: Value = serde_json::from_slice(l).expect("the proxy writes JSON lines");
            let id = v["id"].as_u64().expect("a request with a numeric id");
            let method = v["method"].as_str().expect("a request");
            let params = v["params"].as_array().expect("params");
            let request = match method {
                "mining.configure" => Sv1Request::Configure,
                "mining.subscribe" => Sv1Request::Subscribe,
                "mining.extranonce.subscribe" => Sv1Request::ExtranonceSubscribe,
                "mining.authorize" => {
                    self.worker = params[0].as_str().expect("a worker").to_owned();
                    Sv1Request::Authorize
                }
                "mining.submit" => {
                    let p: Vec<&str> = params
                        .iter()
                        .map(|p| p.as_str().expect("string params"))
                        .collect();
                    assert!(p.len() == 5 || p.len() == 6, "submit params {p:?}");
                    assert_eq!(p[0], self.worker, "submitted as the authorized worker");
                    let en2 = unhex(p[2]).expect("hex extranonce2");
                    assert_eq!(en2.len(), self.extranonce2_size, "extranonce2 size");
                    let ntime = u32::from_str_radix(p[3], 16).expect("hex ntime");
                    let nonce = u32::from_str_radix(p[4], 16).expect("hex nonce");
                    let bits = p
                        .get(5)
                        .map(|b| u32::from_str_radix(b, 16).expect("hex bits"));
                    let hash = self
                        .jobs
                        .iter()
                        .find(|(j, _)| j == p[1])
                        .and_then(|(_, job)| {
                            let version = match bits {
                                Some(b) => {
                                    assert_eq!(b & !self.mask, 0, "bits outside the granted mask");
                                    (job.version & !self.mask) | b
                                }
                                None => job.version,
                            };
                            let (prev, nbits, _) = job.work?;
                            Some(share_hash(
                                job,
                                prev,
                                nbits,
                                &job.prefix,
                                &en2,
                                version,
                                ntime,
                                nonce,
                            ))
                        });
                    assert!(
                        hash.is_some() || p[1] == "expired",
                        "a share on job {} the pool never sent",
                        p[1]
                    );
                    out.push(Submission {
                        rpc_id: Some(id),
                        hash,
                    });
                    continue;
                }
                other => panic!("the proxy sent {other}"),
            };
            self.requests.push((id, request));
        }
        out
    }

    fn message(
        &mut self,
        kind: u8,
        input: &mut Input<'_>,
        _in_flight: &[Flight],
    ) -> Option<Vec<u8>> {
        let b = input.u8();
        match kind {
            up::OPEN => {
                let i = usize::from(input.u8());
                if self.requests.is_empty() {
                    return Some(Self::reply(u64::from(b) + 1000, "true", "null"));
                }
                let (id, what) = self.requests.remove(i % self.requests.len());
                let good = b % 8 != 0;
                Some(match what {
                    Sv1Request::Configure => {
                        let granted = match b % 4 {
                            0 => 0,
                            1 => 0x00ff_e000,
                            _ => 0x1fff_e000,
                        };
                        if good && granted != 0 {
                            self.mask &= granted;
                            Self::reply(
                                id,
                                &format!("{{\"version-rolling\":true,\"version-rolling.mask\":\"{granted:08x}\"}}"),
                                "null",
                            )
                        } else {
                            self.mask = 0;
                            Self::reply(id, "{\"version-rolling\":false}", "null")
                        }
                    }
                    Sv1Request::Subscribe => {
                        let en1: Vec<u8> = (0..usize::from(b % 9)).map(|x| x as u8 ^ b).collect();
                        let size = match (b >> 4) % 8 {
                            0 => 0,
                            1 => 2,
                            2..=5 => 4,
                            6 => 8,
                            _ => 17,
                        };
                        if good && (1..=16).contains(&size) {
                            self.subscribed = true;
                            self.extranonce1 = en1.clone();
                            self.extranonce2_size = size;
                        } else {
                            self.refused = true;
                        }
                        let result = if good {
                            format!("[[[\"mining.notify\",\"s\"]],\"{}\",{size}]", hex(&en1))
                        } else {
                            "null".into()
                        };
                        let error = if good { "null" } else { "[20,\"no\",null]" };
                        Self::reply(id, &result, error)
                    }
                    Sv1Request::ExtranonceSubscribe => Self::reply(id, "true", "null"),
                    Sv1Request::Authorize => {
                        if good {
                            self.authorized = true;
                            Self::reply(id, "true", "null")
                        } else {
                            self.refused = true;
                            Self::reply(id, "false", "[24,\"unauthorized\",null]")
                        }
                    }
                })
            }
            up::JOB => Some(self.notify(b, input, false)),
            up::PREV_HASH => Some(self.notify(b, input, true)),
            up::TARGET => {
                let d = match b % 6 {
                    0 => "0.0000000003",
                    1 => "1",
                    2 => "0.5",
                    3 => "1048576",
                    4 => "0",
                    _ => "-1",
                };
                if let Ok(d) = Difficulty::new(d.parse().expect("a number")) {
                    self.target = d.to_target();
                }
                Some(
                    format!(
                        "{{\"id\":null,\"method\":\"mining.set_difficulty\",\"params\":[{d}]}}"
                    )
                    .into_bytes(),
                )
            }
            up::PREFIX => {
                let en1: Vec<u8> = (0..usize::from(b % 6))
                    .map(|x| x as u8 ^ b ^ 0x55)
                    .collect();
                let size = if b & 0x80 != 0 {
                    self.extranonce2_size + 1
                } else {
                    self.extranonce2_size
                };
                if self.subscribed && !self.refused {
                    if size == self.extranonce2_size {
                        self.extranonce1 = en1.clone();
                    } else {
                        self.refused = true;
                    }
                }
                Some(
                    format!(
                        "{{\"id\":null,\"method\":\"mining.set_extranonce\",\"params\":[\"{}\",{size}]}}",
                        hex(&en1)
                    )
                    .into_bytes(),
                )
            }
            up::ACCEPT | up::REJECT => {
                if self.pending.is_empty() {
                    return Some(Self::reply(u64::from(b) + 5000, "true", "null"));
                }
                let (id, seq) = self.pending.remove(usize::from(b) % self.pending.len());
                if kind == up::ACCEPT {
                    self.verdicts.push(Verdict::Accepted {
                        last: seq,
                        count: 1,
                    });
                    Some(Self::reply(id, "true", "null"))
                } else {
                    self.verdicts.push(Verdict::Rejected { seq });
                    let code = 20 + u32::from(b % 5);
                    let error = if b & 0x80 != 0 {
                        "null".to_owned()
                    } else {
                        format!("[{code},\"no\",null]")
                    };
                    let result = if b & 0x80 != 0 { "false" } else { "null" };
                    Some(Self::reply(id, result, &error))
                }
            }
            up::CLOSE => {
                self.refused = true;
                Some(b"{\"id\":null,\"method\":\"client.reconnect\",\"params\":[]}".to_vec())
            }
            _ => Some(match b % 5 {
                0 => {
                    let mask = [0x00ff_e000u32, 0x1fff_e000, 0][usize::from(input.u8() % 3)];
                    self.mask &= mask;
                    format!(
                        "{{\"id\":null,\"method\":\"mining.set_version_mask\",\"params\":[\"{mask:08x}\"]}}"
                    )
                    .into_bytes()
                }
                1 => {
                    b"{\"id\":null,\"method\":\"client.show_message\",\"params\":[\"hi\"]}".to_vec()
                }
                2 => Self::reply(u64::from(input.u8()) + 100_000, "true", "null"),
                3 => b"{\"id\":\"x\",\"result\":true,\"error\":null}".to_vec(),
                _ => b"not json".to_vec(),
            }),
        }
    }

    fn raw(&mut self, input: &mut Input<'_>) -> Option<Vec<u8>> {
        let len = usize::from(input.u8());
        let line = input.take(len).to_vec();
        // Only lines the model can follow: no method the proxy acts on, no answer to a
        // request of its.
        let v: Value = serde_json::from_slice(&line).unwrap_or(Value::Null);
        let method = v.get("method").and_then(Value::as_str).unwrap_or("");
        if method.starts_with("mining.") || method == "client.reconnect" {
            return None;
        }
        if v.get("id").and_then(Value::as_u64).is_some_and(|id| {
            self.requests.iter().any(|r| r.0 == id) || self.pending.iter().any(|p| p.0 == id)
        }) {
            return None;
        }
        Some(line)
    }

    fn target(&self) -> Target {
        self.target
    }

    fn is_open(&self) -> bool {
        self.subscribed && self.authorized && !self.refused
    }

    fn job(&self, coinb1: &[u8]) -> Option<&PoolJob> {
        self.jobs
            .iter()
            .map(|(_, j)| j)
            .find(|j| j.coinb1 == coinb1)
    }

    fn extranonce(&self) -> Option<(Vec<u8>, usize)> {
        self.is_open()
            .then(|| (self.extranonce1.clone(), self.extranonce2_size))
    }

    fn take_verdicts(&mut self) -> Vec<Verdict> {
        std::mem::take(&mut self.verdicts)
    }

    fn bind(&mut self, rpc_id: u64, seq: u32) {
        self.pending.push((rpc_id, seq));
    }
}

// ---- The devices' side ---------------------------------------------------------------------

/// A job as one device got it.
#[derive(Clone, Debug)]
struct DeviceJob {
    wire: u64,
    wire_text: String,
    prev_hash: Hash256,
    coinb1: Vec<u8>,
    coinb2: Vec<u8>,
    merkle: Vec<Hash256>,
    version: u32,
    nbits: u32,
    ntime: u32,
    /// The extranonce1 in force when it came (`set_extranonce` applies from the next job).
    extranonce1: Vec<u8>,
    /// The difficulty the device was told when it came.
    difficulty: Option<f64>,
    received: Timestamp,
}

/// What a submitted share was.
#[derive(Clone, Debug)]
struct SubmitLine {
    id: String,
    worker: String,
    job: String,
    extranonce2: Vec<u8>,
    ntime: u32,
    nonce: u32,
    bits: Option<u32>,
}

/// One device as the harness plays it: what it was told.
struct Dev {
    id: DeviceId,
    extranonce1: Option<Vec<u8>>,
    extranonce2_size: usize,
    subscribed: bool,
    workers: Vec<String>,
    /// The version mask the core granted.
    mask: u32,
    jobs: VecDeque<DeviceJob>,
    /// The highest notify id it got.
    highest: u64,
    difficulty: Option<f64>,
    /// Requests (by id) not answered yet; subscribes among them.
    awaiting: HashMap<String, (&'static str, Option<String>)>,
    /// Shares accepted, by (job, hash).
    accepted: HashSet<(u64, Hash256)>,
    last_submit: Option<SubmitLine>,
}

impl Dev {
    fn new(id: DeviceId) -> Self {
        Dev {
            id,
            extranonce1: None,
            extranonce2_size: 0,
            subscribed: false,
            workers: Vec::new(),
            mask: 0,
            jobs: VecDeque::new(),
            highest: 0,
            difficulty: None,
            awaiting: HashMap::new(),
            accepted: HashSet::new(),
            last_submit: None,
        }
    }
}

/// A share in flight, as the harness follows it.
#[derive(Clone, Copy, Debug)]
struct Flight {
    seq: u32,
    device: DeviceId,
}

const WORKERS: [&str; 6] = ["farm.a", "farm.b", "", "bad\u{1}name", "farm.c", "farm.d"];

/// The line just sent, for checking its outcome.
enum Sent {
    Submit(SubmitLine),
    /// A request expecting a reply now (or, for subscribe, maybe later).
    Request(String, &'static str),
    /// `mining.authorize` of this worker.
    Authorize(String, String),
    /// A notification or raw bytes: any reply has an id we do not know.
    Other,
}

// ---- Checks on the devices' side, either mode ------------------------------------------------

/// What the checks on a device's side need of the upstream side, whichever mode: the pool's
/// jobs as the device's channel got them, and what a subscribe answer must say.
trait View {
    /// The job whose coinbase starts with `coinb1`, as the pool sent it on `device`'s channel.
    fn pool_job(&self, device: DeviceId, coinb1: &[u8]) -> Option<&PoolJob>;
    /// The extranonce1 and extranonce2 size a subscribe answer to `device` must carry, given
    /// the device's own bytes; panics if no channel could have answered it.
    fn subscribe_answer(&self, device: DeviceId, e: Option<DeviceExtranonce>) -> (Vec<u8>, usize);
    /// A subscribe from `device` may be left waiting: no channel is open for it.
    fn may_wait(&self, device: DeviceId) -> bool;
}

/// The context of the checks on a device's side.
struct Cx<'a> {
    now: Timestamp,
    config: &'a TranslatorConfig,
    view: &'a dyn View,
}

/// A clock step from `x`: `x >> 6` picks the unit (10 ms, 250 ms, 2 s, 1 min), `x & 0x3f`
/// counts them.
fn clock_step(x: u8) -> u64 {
    let n = u64::from(x & 0x3f);
    match x >> 6 {
        0 => n * 10,
        1 => n * 250,
        2 => n * 2_000,
        _ => n * 60_000,
    }
}

impl Dev {
    /// The device is sending `sent`: what it now awaits a reply to.
    fn sending(&mut self, sent: &Sent) {
        match sent {
            Sent::Request(rid, method) => {
                self.awaiting.insert(rid.clone(), (method, None));
            }
            Sent::Authorize(rid, worker) => {
                self.awaiting
                    .insert(rid.clone(), ("mining.authorize", Some(worker.clone())));
            }
            Sent::Submit(s) => {
                self.awaiting.insert(s.id.clone(), ("mining.submit", None));
                self.last_submit = Some(s.clone());
            }
            Sent::Other => {}
        }
    }

    /// The job a share names, as this device got it.
    fn job_of(&self, s: &SubmitLine) -> Option<&DeviceJob> {
        let wire = crate::jobs::parse_id(&s.job)?;
        self.jobs.iter().find(|j| j.wire == wire)
    }

    /// A share's hash as this device computes it on `job`: its extranonce1 then, its version
    /// bits within its mask (`None` if they are not).
    fn device_hash(&self, job: &DeviceJob, s: &SubmitLine) -> Option<Hash256> {
        let version = match s.bits {
            Some(b) => primitives::share::rolled_version(job.version, b, self.mask).ok()?,
            None => job.version,
        };
        let pj = PoolJob {
            coinb1: job.coinb1.clone(),
            coinb2: job.coinb2.clone(),
            merkle: job.merkle.clone(),
            version: job.version,
            rolling: true,
            prefix: Vec::new(),
            work: None,
        };
        Some(share_hash(
            &pj,
            job.prev_hash,
            job.nbits,
            &job.extranonce1,
            &s.extranonce2,
            version,
            s.ntime,
            s.nonce,
        ))
    }

    /// The line's reply and outcome (`events`: this device's this step); the hash of a share
    /// the core accepted.
    fn check_line(
        &mut self,
        cx: &Cx<'_>,
        sent: &Sent,
        outcome: &LineOutcome,
        events: &[Event],
    ) -> Option<Hash256> {
        let judged: Vec<&Event> = events
            .iter()
            .filter(|e| matches!(e, Event::ShareJudged { .. }))
            .collect();
        match outcome {
            LineOutcome::Accepted(share) => {
                assert_eq!(judged.len(), 1, "one judgement per share");
                assert!(
                    matches!(judged[0], Event::ShareJudged { device, wire_id: Some(w), result: Ok(d) }
                        if *device == self.id && *w == share.wire_id && *d == share.difficulty.as_f64()),
                    "{:?}",
                    judged[0]
                );
                let Sent::Submit(s) = sent else {
                    // A raw line that was a valid share: remembered for duplicates.
                    self.accepted.insert((share.wire_id, share.hash));
                    return Some(share.hash);
                };
                let job = self.job_of(s).expect("accepted on a job the device got");
                assert_eq!(share.wire_id, job.wire);
                let hash = self
                    .device_hash(job, s)
                    .expect("accepted with bits within the device's mask");
                assert_eq!(
                    hash, share.hash,
                    "the device's view of its share hashes otherwise than the core's"
                );
                assert!(
                    share.difficulty.to_target().is_met_by(&hash.0),
                    "credited at a difficulty it does not meet"
                );
                let wire = job.wire;
                assert!(
                    self.accepted.insert((wire, hash)),
                    "the same share accepted twice on one job"
                );
                Some(hash)
            }
            LineOutcome::Rejected(r) => {
                assert_eq!(judged.len(), 1, "one judgement per share");
                assert!(
                    matches!(judged[0], Event::ShareJudged { device, wire_id: None, result: Err(x) }
                        if *device == self.id && x == r),
                    "{:?}",
                    judged[0]
                );
                if let Sent::Submit(s) = sent {
                    self.justify(cx, s, *r);
                }
                None
            }
            LineOutcome::Refused(code) => {
                assert!(judged.is_empty(), "a refused share judged");
                if let Sent::Submit(s) = sent {
                    match code {
                        ErrorCode::NotSubscribed => {
                            assert!(!self.subscribed, "refused as not subscribed, though it was")
                        }
                        ErrorCode::Unauthorized => assert!(
                            !self.workers.contains(&s.worker),
                            "refused as unauthorized, though {} was",
                            s.worker
                        ),
                        ErrorCode::Other => {}
                        c => panic!("a share refused with {c:?}"),
                    }
                }
                None
            }
            LineOutcome::Other => {
                assert!(
                    judged.is_empty(),
                    "a line judged as a share with no outcome"
                );
                assert!(!matches!(sent, Sent::Submit(_)), "a submit with no verdict");
                None
            }
        }
    }

    /// A reject the device's own view justifies.
    fn justify(&self, cx: &Cx<'_>, s: &SubmitLine, r: Reject) {
        let dev = self;
        let parsed = crate::jobs::parse_id(&s.job);
        let job = self.job_of(s);
        match r {
            Reject::UnknownJob => assert!(
                parsed.is_none_or(|w| w > dev.highest),
                "job {} called unknown, though the device got it",
                s.job
            ),
            Reject::Stale => assert!(
                parsed.is_some_and(|w| w <= dev.highest),
                "job {} called stale, though the device never got it",
                s.job
            ),
            Reject::ExtranonceSize => assert_ne!(
                s.extranonce2.len(),
                dev.extranonce2_size,
                "extranonce2 of the size the device was told refused"
            ),
            Reject::NtimeOutOfRange => {
                if let Some(j) = job {
                    let age = (cx.now.millis_since(j.received) / 1000) as u32;
                    let latest = j
                        .ntime
                        .saturating_add(cx.config.max_ntime_ahead)
                        .saturating_add(age);
                    assert!(
                        s.ntime < j.ntime || s.ntime > latest,
                        "ntime {} within [{}, {latest}] refused",
                        s.ntime,
                        j.ntime
                    );
                }
            }
            Reject::VersionBits => {
                let outside = s.bits.is_some_and(|b| b & !dev.mask != 0);
                // A job that forbids rolling (SV2 says so per job; the device cannot know).
                let forbidden = job
                    .and_then(|j| cx.view.pool_job(self.id, &j.coinb1))
                    .is_some_and(|pj| !pj.rolling)
                    && s.bits.is_some_and(|b| b & dev.mask != 0);
                assert!(
                    outside || forbidden || job.is_none(),
                    "version bits {:?} within the mask {:08x} refused",
                    s.bits,
                    dev.mask
                );
            }
            Reject::LowDifficulty => {
                if let Some(j) = job {
                    if let (Some(d), Some(hash)) = (j.difficulty, self.device_hash(j, s)) {
                        assert!(
                            !Difficulty::saturating(d).to_target().is_met_by(&hash.0),
                            "a share meeting its job's difficulty {d} called low"
                        );
                    }
                }
            }
            Reject::Duplicate => {
                let j = job.expect("a duplicate on a job the device got");
                let hash = self.device_hash(j, s).expect("bits within the mask");
                assert!(
                    dev.accepted.iter().any(|(_, h)| h.0[..8] == hash.0[..8]),
                    "a share never accepted called a duplicate"
                );
            }
        }
    }

    /// This device's output this step (`out`; `extranonce`: its bytes, as the core holds them):
    /// every line JSON; replies to its requests (`verdict`: what a share sent this step calls
    /// for); what it was told. Notifies are counted in `got` by SV1 job id.
    #[allow(clippy::too_many_arguments)]
    fn read_output(
        &mut self,
        cx: &Cx<'_>,
        out: Vec<u8>,
        extranonce: Option<DeviceExtranonce>,
        echo: usize,
        sent: Option<&Sent>,
        verdict: Option<Result<(), i64>>,
        got: &mut HashMap<u64, usize>,
    ) {
        assert!(
            out.len() <= STEP_OUTPUT + ECHO_FACTOR * echo,
            "{} bytes to a device in one step",
            out.len()
        );
        assert!(
            out.is_empty() || out.ends_with(b"\n"),
            "output ends mid-line"
        );
        let mut replies: Vec<(String, Value)> = Vec::new();
        for l in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let v: Value = serde_json::from_slice(l).unwrap_or_else(|e| {
                panic!(
                    "a device line that is not JSON ({e}): {}",
                    String::from_utf8_lossy(l)
                )
            });
            assert!(v.is_object(), "a device line that is not an object");
            match v.get("method").and_then(Value::as_str) {
                Some("mining.notify") => self.on_notify(cx, l, got),
                Some("mining.set_difficulty") => {
                    let d = v["params"][0].as_f64().expect("a difficulty");
                    assert!(d.is_finite() && d > 0.0, "difficulty {d}");
                    self.difficulty = Some(d);
                }
                Some("mining.set_version_mask") => {
                    let m = v["params"][0].as_str().expect("a hex mask");
                    let m = u32::from_str_radix(m, 16).expect("a hex mask");
                    let dev = &mut *self;
                    assert_eq!(
                        m & !dev.mask,
                        0,
                        "a version mask widened by set_version_mask"
                    );
                    dev.mask = m;
                }
                Some("mining.set_extranonce") => {
                    let en1 = unhex(v["params"][0].as_str().expect("hex")).expect("hex");
                    let size = v["params"][1].as_u64().expect("a size") as usize;
                    let dev = &mut *self;
                    dev.extranonce1 = Some(en1);
                    dev.extranonce2_size = size;
                }
                Some(m) => panic!("a device was sent {m}"),
                None => {
                    // Acted on in order: a subscribe's answer comes before the job it starts.
                    let rid = serde_json::to_string(&v["id"]).expect("JSON");
                    self.on_reply(cx, &rid, &v, matches!(sent, Some(Sent::Other)), extranonce);
                    replies.push((rid, v));
                }
            }
        }
        // The line's own request: answered now, once; a subscribe maybe later.
        let count = |rid: &str| replies.iter().filter(|(r, _)| r == rid).count();
        match sent {
            Some(Sent::Submit(s)) => {
                let n = count(&s.id);
                assert_eq!(n, 1, "a share answered {n} times");
                let (_, v) = replies.iter().find(|(r, _)| *r == s.id).expect("one");
                match verdict.expect("a submit's outcome") {
                    Ok(()) => assert!(
                        v["result"] == Value::Bool(true) && v["error"].is_null(),
                        "an accepted share answered {v}"
                    ),
                    Err(code) => assert_eq!(
                        v["error"][0].as_i64(),
                        Some(code),
                        "a rejected share answered {v}"
                    ),
                }
            }
            Some(Sent::Authorize(rid, _)) => {
                assert_eq!(count(rid), 1, "an authorize answered {} times", count(rid));
            }
            Some(Sent::Request(rid, method)) => {
                let n = count(rid);
                if *method == "mining.subscribe" && n == 0 {
                    // Waits for a channel, subscribed before or not, and is answered
                    // when one opens.
                    let open = !cx.view.may_wait(self.id);
                    assert!(!open, "a subscribe left waiting though the channel is open");
                } else {
                    assert_eq!(n, 1, "{method} answered {n} times");
                }
            }
            _ => {}
        }
    }

    /// A reply to this device: to a request that awaits one (or to a raw line); what it tells
    /// the device (an extranonce, a version mask, a worker).
    fn on_reply(
        &mut self,
        cx: &Cx<'_>,
        rid: &str,
        v: &Value,
        from_other: bool,
        extranonce: Option<DeviceExtranonce>,
    ) {
        let awaited = self.awaiting.remove(rid);
        assert!(
            awaited.is_some() || from_other || !rid.starts_with("\"q"),
            "a reply to {rid}, which awaits none"
        );
        let ok = v["error"].is_null();
        let result = &v["result"];
        // A subscribe's answer, by its shape: [[subscriptions], extranonce1, size].
        let subscribed = result
            .as_array()
            .filter(|a| a.len() == 3 && a[0].is_array())
            .and_then(|a| Some((unhex(a[1].as_str()?)?, a[2].as_u64()? as usize)));
        if let (true, Some((en1, size))) = (ok, subscribed) {
            let (mine, mine_size) = cx.view.subscribe_answer(self.id, extranonce);
            assert_eq!(size, mine_size, "extranonce2 size");
            assert_eq!(
                en1, mine,
                "extranonce1 is the prefix and the device's bytes"
            );
            let dev = &mut *self;
            dev.subscribed = true;
            dev.extranonce1 = Some(en1);
            dev.extranonce2_size = size;
        }
        // A configure's answer.
        if let (true, Some(r)) = (ok, result.as_object()) {
            let dev = &mut *self;
            match (r.get("version-rolling"), r.get("version-rolling.mask")) {
                (Some(Value::Bool(true)), Some(Value::String(m))) => {
                    dev.mask = u32::from_str_radix(m, 16).expect("a hex mask");
                    assert_eq!(
                        dev.mask & !cx.config.version_mask,
                        0,
                        "a mask beyond the proxy's"
                    );
                }
                (Some(Value::Bool(false)), _) => dev.mask = 0,
                _ => {}
            }
        }
        if let Some(("mining.authorize", Some(worker))) = &awaited {
            if ok && *result == Value::Bool(true) {
                let dev = &mut *self;
                if !dev.workers.contains(worker) {
                    dev.workers.push(worker.clone());
                }
            }
        }
    }

    /// A `mining.notify` to this device: a job the pool sent, under a fresh id.
    fn on_notify(&mut self, cx: &Cx<'_>, line: &[u8], got: &mut HashMap<u64, usize>) {
        let (env, _) = sv1::parse_line(line).expect("a notify line");
        let n = sv1::Notify::parse(&env).expect("a notify");
        let wire = crate::jobs::parse_id(n.job_id).expect("our job ids are hex");
        let dev = &mut *self;
        assert!(
            wire > dev.highest,
            "notify id {wire} not fresh for the device"
        );
        dev.highest = wire;
        *got.entry(wire).or_default() += 1;
        let job = cx
            .view
            .pool_job(dev.id, &n.coinb1)
            .expect("a job the pool sent")
            .clone();
        let (prev, bits, ntime) = job.work.expect("a job that became work");
        assert_eq!(n.coinb2, job.coinb2);
        assert_eq!(n.merkle_branch, job.merkle);
        assert_eq!(n.version, job.version);
        assert_eq!(n.prev_hash, prev, "the job's prev hash");
        assert_eq!(n.nbits, bits, "the job's nBits");
        assert_eq!(n.ntime, ntime, "the job's time");
        let en1 = dev.extranonce1.clone().unwrap_or_default();
        dev.jobs.push_back(DeviceJob {
            wire,
            wire_text: n.job_id.to_owned(),
            prev_hash: n.prev_hash,
            coinb1: n.coinb1,
            coinb2: n.coinb2,
            merkle: n.merkle_branch,
            version: n.version,
            nbits: n.nbits,
            ntime: n.ntime,
            extranonce1: en1,
            difficulty: dev.difficulty,
            received: cx.now,
        });
        if dev.jobs.len() > 32 {
            dev.jobs.pop_front();
        }
    }
}

/// Aggregated mode's upstream side: one channel, split among the devices.
struct Aggregated<'a, P: PoolSide> {
    pool: &'a P,
    t: &'a Translator<P::U>,
}

impl<P: PoolSide> View for Aggregated<'_, P> {
    fn pool_job(&self, _device: DeviceId, coinb1: &[u8]) -> Option<&PoolJob> {
        self.pool.job(coinb1)
    }

    fn subscribe_answer(&self, _device: DeviceId, e: Option<DeviceExtranonce>) -> (Vec<u8>, usize) {
        let (prefix, channel_size) = self
            .pool
            .extranonce()
            .expect("a subscribe answered with no channel open");
        let layout = self.t.layout().expect("a layout once open");
        assert_eq!(
            layout.device_bytes + layout.extranonce2_size,
            channel_size,
            "the channel's size, split"
        );
        let e = e.expect("a subscribed device has its bytes");
        let mut mine = prefix;
        e.write(&mut mine);
        (mine, layout.extranonce2_size)
    }

    fn may_wait(&self, _device: DeviceId) -> bool {
        !(self.t.upstream().is_open() && self.t.layout().is_some())
    }
}

// ---- Either world ----------------------------------------------------------------------------

/// Which devices may have something to write after a step.
enum MayWrite {
    Anyone,
    Only(Vec<DeviceId>),
}

/// What both worlds hold alike: the state the steps both take alike touch.
struct Common<C> {
    t: C,
    config: TranslatorConfig,
    now: Timestamp,
    /// The devices connected, in the order they connected.
    devices: Vec<Dev>,
    /// The last device id handed out (0 before the first).
    last_id: u64,
    /// Numbers the devices' request ids.
    next_request: u64,
    /// Whether an upstream connection is up.
    connected: bool,
}

impl<C: Mode> Common<C> {
    /// A world's start: the core `t` just connected upstream at [`T0`], no device yet.
    fn new(t: C, config: TranslatorConfig) -> Self {
        Common {
            t,
            config,
            now: T0,
            devices: Vec::new(),
            last_id: 0,
            next_request: 1,
            connected: true,
        }
    }
}

/// A world a script drives, in either mode. The devices', the clock's and the connection's
/// steps read the same bytes and do the same in both modes, so they are written here once
/// (the committed corpora mean the same to both); a world supplies what an upstream message
/// does to its model of the pool, and what it checks after each step.
trait Harness {
    /// The core, in the world's mode.
    type Core: Mode;

    /// The state the shared steps touch.
    fn common(&self) -> &Common<Self::Core>;
    /// The same, to change.
    fn common_mut(&mut self) -> &mut Common<Self::Core>;
    /// `f` on device `i` and the context of the checks on its side.
    fn with_cx<R>(&mut self, i: usize, f: impl FnOnce(&mut Dev, &Cx<'_>) -> R) -> R;
    /// After a step: events, upstream messages and every device's output, checked; devices
    /// that want to be closed closed; a failed upstream failed over. `line`: the line the step
    /// handled (its device's index, what it was, its length) and its outcome; `may`: whom the
    /// core may have written to.
    fn settle(
        &mut self,
        line: Option<(usize, Sent, usize)>,
        outcome: Option<LineOutcome>,
        may: MayWrite,
    );
    /// Device `i` leaves, the harness's doing or the core's wish.
    fn close_device(&mut self, i: usize);
    /// The upstream sends a message of `kind` (one of [`up`]) built from the input.
    fn upstream(&mut self, kind: u8, input: &mut Input<'_>);
    /// The upstream sends a message built from raw bytes.
    fn upstream_raw(&mut self, input: &mut Input<'_>);
    /// What holds after a tick, besides what holds after any step.
    fn ticked(&mut self) {}
    /// The upstream connection is lost.
    fn lose(&mut self);
    /// A new upstream connection is ready.
    fn reconnect(&mut self);

    /// The device the high nibble of `b` picks, if any is connected.
    fn dev_index(&mut self, b: u8) -> Option<usize> {
        let n = self.common().devices.len();
        (n != 0).then(|| usize::from(b >> 4) % n)
    }

    /// One step of the script (see the module documentation).
    fn step(&mut self, input: &mut Input<'_>) {
        let b = input.u8();
        match (b & 0x0f) % op::COUNT {
            op::CONNECT => {
                let p = self.common_mut();
                if p.devices.len() < MAX_DEVICES {
                    let id = Mode::device_connected(&mut p.t, p.now);
                    assert!(id.0 > p.last_id, "device id {id:?} not fresh");
                    p.last_id = id.0;
                    p.devices.push(Dev::new(id));
                }
                self.settle(None, None, MayWrite::Only(Vec::new()));
            }
            op::LINE => {
                let Some(i) = self.dev_index(b) else { return };
                let p = self.common_mut();
                let (line, sent) = build_line(&p.devices[i], &mut p.next_request, input);
                self.send_line(i, &line, sent);
            }
            op::RAW_LINE => {
                let Some(i) = self.dev_index(b) else { return };
                let len = usize::from(input.u8());
                let line = input.take(len).to_vec();
                self.send_line(i, &line, Sent::Other);
            }
            op::CLOSE => {
                let Some(i) = self.dev_index(b) else { return };
                let id = self.common().devices[i].id;
                self.close_device(i);
                let p = self.common_mut();
                assert!(Mode::device_mut(&mut p.t, id).is_none());
                assert!(
                    Mode::device_line(&mut p.t, id, b"{}", p.now).is_none(),
                    "a closed device's line handled"
                );
                self.settle(None, None, MayWrite::Only(Vec::new()));
            }
            op::UPSTREAM => {
                if !self.common().connected {
                    return;
                }
                let kind = input.u8() % up::COUNT;
                self.upstream(kind, input);
            }
            op::UPSTREAM_RAW => {
                if self.common().connected {
                    self.upstream_raw(input);
                }
            }
            op::TICK => {
                let p = self.common_mut();
                p.now = p.now.plus_millis(clock_step(input.u8()));
                let ticked = Mode::handle_tick(&mut p.t, p.now);
                for id in &ticked {
                    assert!(
                        p.devices.iter().any(|d| d.id == *id),
                        "ticked device {id:?} not connected"
                    );
                }
                self.settle(None, None, MayWrite::Only(ticked));
                self.ticked();
            }
            op::LOST => {
                if self.common().connected {
                    self.lose();
                }
            }
            op::CONNECTED => {
                if !self.common().connected {
                    self.reconnect();
                }
            }
            _ => {
                let Some(i) = self.dev_index(b) else { return };
                let p = self.common_mut();
                let id = p.devices[i].id;
                if let Some(d) = Mode::device_mut(&mut p.t, id) {
                    d.line_too_long();
                }
                self.settle(None, None, MayWrite::Only(vec![id]));
            }
        }
    }

    /// Device `i` sends `line` (one over the limit overflows, as the shell's reader reports).
    fn send_line(&mut self, i: usize, line: &[u8], sent: Sent) {
        let p = self.common_mut();
        let id = p.devices[i].id;
        if line.len() > LINE_CAP {
            if let Some(d) = Mode::device_mut(&mut p.t, id) {
                d.line_too_long();
            }
            self.settle(None, None, MayWrite::Only(vec![id]));
            return;
        }
        p.devices[i].sending(&sent);
        let outcome = Mode::device_line(&mut p.t, id, line, p.now)
            .expect("a connected device's line is handled");
        self.settle(
            Some((i, sent, line.len())),
            Some(outcome),
            MayWrite::Only(vec![id]),
        );
    }

    /// Device `i`'s output this step, checked: written only if `may` allows, and against what
    /// the device was told, `line` being the line the step handled and `verdict` the verdict
    /// it called for. Notifies are counted in `got` by SV1 job id.
    fn read_device(
        &mut self,
        i: usize,
        line: &Option<(usize, Sent, usize)>,
        may: &MayWrite,
        verdict: Option<Result<(), i64>>,
        got: &mut HashMap<u64, usize>,
    ) {
        let p = self.common_mut();
        let id = p.devices[i].id;
        let Some(device) = Mode::device_mut(&mut p.t, id) else {
            panic!("device {id:?} connected but unknown to the core");
        };
        let extranonce = device.extranonce();
        let out = device.take_output();
        if let MayWrite::Only(ids) = may {
            assert!(
                out.is_empty() || ids.contains(&id),
                "device {id:?} written to outside the reach the core gave"
            );
        }
        let (echo, sent) = match line {
            Some((d, sent, len)) if *d == i => (*len, Some(sent)),
            _ => (0, None),
        };
        self.with_cx(i, |d, cx| {
            d.read_output(cx, out, extranonce, echo, sent, verdict, got)
        });
    }

    /// Devices that want to be closed are closed, as the shell closes them.
    fn close_wanting(&mut self) {
        let mut i = 0;
        while i < self.common().devices.len() {
            let p = self.common_mut();
            let id = p.devices[i].id;
            if Mode::device_mut(&mut p.t, id)
                .and_then(|d| d.wants_close())
                .is_some()
            {
                self.close_device(i);
            } else {
                i += 1;
            }
        }
    }

    /// The script's steps, as many as the input holds up to [`MAX_STEPS`]; then whatever is
    /// still in flight is settled as the connection goes, and every device leaves.
    fn play(&mut self, input: &mut Input<'_>) {
        for _ in 0..MAX_STEPS {
            if input.is_empty() {
                break;
            }
            self.step(input);
        }
        if self.common().connected {
            self.lose();
        }
        while !self.common().devices.is_empty() {
            self.close_device(0);
        }
    }
}

/// The verdict a line's outcome calls for: accepted (`Ok(())`) or an error code; `None` when it
/// calls for none.
fn verdict_of(outcome: &Option<LineOutcome>) -> Option<Result<(), i64>> {
    match outcome {
        Some(LineOutcome::Accepted(_)) => Some(Ok(())),
        Some(LineOutcome::Rejected(r)) => Some(Err(i64::from(r.sv1_code()))),
        Some(LineOutcome::Refused(c)) => Some(Err(i64::from(c.code()))),
        _ => None,
    }
}

/// The shares `events` say went upstream: their devices and sequence numbers.
fn forwarded<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<(DeviceId, u32)> {
    events
        .into_iter()
        .filter_map(|e| match e {
            Event::ShareForwarded {
                device,
                sequence_number,
            } => Some((*device, *sequence_number)),
            _ => None,
        })
        .collect()
}

/// The share a line's `outcome` accepted, and whether it makes a block; for any other outcome,
/// nothing was `forwarded` or `submitted`.
fn accepted_share<'a>(
    outcome: &'a Option<LineOutcome>,
    forwarded: &[(DeviceId, u32)],
    submitted: bool,
) -> Option<(&'a LocalShare, bool)> {
    let Some(LineOutcome::Accepted(share)) = outcome else {
        assert!(
            forwarded.is_empty(),
            "a share forwarded that was not accepted"
        );
        assert!(!submitted, "a submission with no accepted share");
        return None;
    };
    let block = CompactTarget::from_consensus(share.job.nbits.to_consensus());
    let is_block = Target::from_compact(block).is_ok_and(|t| t.is_met_by(&share.hash.0));
    Some((share, is_block))
}

/// Device `dev`'s accepted share went upstream exactly when it `should` (`why` says what the
/// rule was), in one submission of `subs`: its sequence number and that submission.
fn forwarded_once<S>(
    forwarded: &[(DeviceId, u32)],
    subs: Vec<S>,
    should: bool,
    dev: DeviceId,
    why: std::fmt::Arguments<'_>,
) -> Option<(u32, S)> {
    assert_eq!(!forwarded.is_empty(), should, "{why}");
    if !should {
        assert!(subs.is_empty());
        return None;
    }
    assert_eq!(forwarded.len(), 1);
    assert_eq!(subs.len(), 1, "one submission per forwarded share");
    let (device, seq) = forwarded[0];
    assert_eq!(device, dev);
    Some((seq, subs.into_iter().next().expect("one submission")))
}

// ---- The world -----------------------------------------------------------------------------

struct World<P: PoolSide> {
    c: Common<Translator<P::U>>,
    pool: P,
    /// Shares in flight, in sequence order.
    flights: VecDeque<Flight>,
    /// The upstream failed this step (the shell fails over).
    fail_over: bool,
    /// The sequence number of the last share forwarded.
    last_seq: Option<u32>,
}

impl<P: PoolSide> World<P> {
    fn new(config: TranslatorConfig) -> Self {
        let mut t = Translator::with_uplink(config.clone(), P::U::default(), T0);
        Mode::upstream_connected(&mut t, T0);
        let mut w = World {
            c: Common::new(t, config),
            pool: P::new(),
            flights: VecDeque::new(),
            fail_over: false,
            last_seq: None,
        };
        w.pool.connected();
        w.settle(None, None, MayWrite::Anyone);
        w
    }

    /// Accepted shares go upstream exactly when they should, as the device found them.
    fn check_forwarding(
        &mut self,
        line_dev: Option<usize>,
        outcome: &Option<LineOutcome>,
        accepted_hash: Option<Hash256>,
        events: &[Event],
        submissions: Vec<Submission>,
    ) {
        let forwarded = forwarded(events);
        let Some((share, is_block)) = accepted_share(outcome, &forwarded, !submissions.is_empty())
        else {
            return;
        };
        let dev = &self.c.devices[line_dev.expect("a device's line")];
        let pool_open = self.pool.is_open();
        let should = pool_open && (self.pool.target().is_met_by(&share.hash.0) || is_block);
        let Some((seq, sub)) = forwarded_once(
            &forwarded,
            submissions,
            should,
            dev.id,
            format_args!(
                "forwarding of a share (pool open {pool_open}, block {is_block}) against the pool's target"
            ),
        ) else {
            return;
        };
        let device = dev.id;
        if let Some(last) = self.last_seq {
            assert_eq!(seq, last.wrapping_add(1), "sequence numbers in order");
        }
        self.last_seq = Some(seq);
        if let Some(h) = sub.hash {
            assert_eq!(
                Some(h),
                accepted_hash,
                "the pool hashes the submission otherwise than the device"
            );
        }
        if let Some(rpc) = sub.rpc_id {
            self.pool.bind(rpc, seq);
        }
        // A full window pushes the oldest out (its verdict is checked with the others).
        self.flights.push_back(Flight { seq, device });
    }

    /// The upstream verdicts are exactly those the rules give.
    fn check_verdicts(&mut self, events: &[Event]) {
        let mut expected: Vec<(u32, DeviceId, UpstreamVerdict)> = Vec::new();
        // The window: forwarding pushed the oldest out, unanswered.
        while self.flights.len() > self.c.config.max_in_flight.max(1) {
            let f = self.flights.pop_front().expect("over full");
            expected.push((f.seq, f.device, UpstreamVerdict::Unanswered));
        }
        for v in self.pool.take_verdicts() {
            apply_verdict(&mut self.flights, &v, &mut expected);
        }
        let closed = events.iter().any(|e| matches!(e, Event::ChannelClosed(_)));
        let lost = !self.c.connected;
        if closed || lost {
            for f in self.flights.drain(..) {
                expected.push((f.seq, f.device, UpstreamVerdict::Unanswered));
            }
        }
        let mut got = upstream_results(events);
        expected.sort_by_key(|e| e.0);
        got.sort_by_key(|e| e.0);
        assert_eq!(got, expected, "the upstream verdicts");
    }

    /// What holds whatever the step.
    fn check_state(&mut self) {
        assert_eq!(
            Mode::in_flight(&self.c.t),
            self.flights.len(),
            "shares in flight"
        );
        assert!(self.flights.len() <= self.c.config.max_in_flight.max(1));
        let rate = Mode::nominal_hash_rate(&self.c.t);
        assert!(
            rate.is_finite() && rate >= 0.0 && rate.is_sign_positive(),
            "nominal hash rate {rate}"
        );
        assert_eq!(
            self.c.t.devices().count(),
            self.c.devices.len(),
            "devices held"
        );
        let mut values = HashSet::new();
        for d in self.c.t.devices() {
            assert!(self.c.devices.iter().any(|m| m.id == d.id()));
            if let Some(e) = d.extranonce() {
                assert!(
                    values.insert(e.value()),
                    "two devices hold extranonce value {}",
                    e.value()
                );
            }
        }
    }
}

impl<P: PoolSide> Harness for World<P> {
    type Core = Translator<P::U>;

    fn common(&self) -> &Common<Self::Core> {
        &self.c
    }

    fn common_mut(&mut self) -> &mut Common<Self::Core> {
        &mut self.c
    }

    fn with_cx<R>(&mut self, i: usize, f: impl FnOnce(&mut Dev, &Cx<'_>) -> R) -> R {
        let view = Aggregated {
            pool: &self.pool,
            t: &self.c.t,
        };
        let cx = Cx {
            now: self.c.now,
            config: &self.c.config,
            view: &view,
        };
        f(&mut self.c.devices[i], &cx)
    }

    /// Aggregated mode names no reach (`may`): any device may have been written to.
    fn settle(
        &mut self,
        line: Option<(usize, Sent, usize)>,
        outcome: Option<LineOutcome>,
        _may: MayWrite,
    ) {
        let mut events = Vec::new();
        while let Some(t) = Mode::poll_event(&mut self.c.t) {
            events.push(t.event);
        }
        assert!(
            events.len() <= 8 + 3 * self.c.devices.len() + self.flights.len(),
            "{} events in one step",
            events.len()
        );
        let mut submissions = Vec::new();
        let mut upstream = 0;
        while let Some(m) = Mode::poll_transmit(&mut self.c.t) {
            upstream += 1;
            submissions.extend(self.pool.sent(m, &self.c.config));
        }
        assert!(
            upstream <= STEP_UPSTREAM,
            "{upstream} messages upstream in one step"
        );

        // The line's outcome, and the share it judged.
        let mut accepted_hash = None;
        let line_dev = line.as_ref().map(|l| l.0);
        let verdict = verdict_of(&outcome);
        if let (Some((i, sent, _)), Some(outcome)) = (&line, &outcome) {
            accepted_hash = self.with_cx(*i, |d, cx| d.check_line(cx, sent, outcome, &events));
        }

        // Forwarding, and the verdicts.
        self.check_forwarding(line_dev, &outcome, accepted_hash, &events, submissions);
        self.check_verdicts(&events);

        // Every device's output.
        let job_sent: Vec<(u64, bool, usize)> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobSent {
                    wire_id,
                    clean,
                    devices,
                    ..
                } => Some((*wire_id, *clean, *devices)),
                _ => None,
            })
            .collect();
        let mut got: HashMap<u64, usize> = HashMap::new();
        for i in 0..self.c.devices.len() {
            self.read_device(i, &line, &MayWrite::Anyone, verdict, &mut got);
        }
        for (wire, _clean, devices) in &job_sent {
            assert_eq!(
                got.get(wire).copied().unwrap_or(0),
                *devices,
                "JobSent {wire} names {devices} devices"
            );
        }

        // Channel failures fail the upstream over, as the shell does.
        if events.iter().any(|e| {
            matches!(
                e,
                Event::ChannelClosed(_) | Event::ChannelOpenFailed(_) | Event::Layout(_)
            )
        }) && self.c.connected
        {
            self.fail_over = true;
        }

        // Devices that want to be closed are closed.
        self.close_wanting();
        self.check_state();
        if std::mem::take(&mut self.fail_over) {
            self.lose();
        }
    }

    fn close_device(&mut self, i: usize) {
        let d = self.c.devices.remove(i);
        Mode::device_closed(&mut self.c.t, d.id);
    }

    fn upstream(&mut self, kind: u8, input: &mut Input<'_>) {
        let flights: Vec<Flight> = self.flights.iter().copied().collect();
        if let Some(m) = self.pool.message(kind, input, &flights) {
            Mode::upstream_message(&mut self.c.t, m, self.c.now);
        }
        self.settle(None, None, MayWrite::Anyone);
    }

    fn upstream_raw(&mut self, input: &mut Input<'_>) {
        if let Some(m) = self.pool.raw(input) {
            Mode::upstream_message(&mut self.c.t, m, self.c.now);
        }
        self.settle(None, None, MayWrite::Anyone);
    }

    fn lose(&mut self) {
        self.c.connected = false;
        Mode::upstream_lost(&mut self.c.t, self.c.now);
        self.pool.lost();
        self.settle(None, None, MayWrite::Anyone);
        assert_eq!(
            Mode::in_flight(&self.c.t),
            0,
            "shares in flight after the upstream was lost"
        );
        assert!(self.flights.is_empty());
    }

    fn reconnect(&mut self) {
        self.c.connected = true;
        self.pool.connected();
        Mode::upstream_connected(&mut self.c.t, self.c.now);
        self.settle(None, None, MayWrite::Anyone);
    }
}

/// A line of the device grammar for device `d`; `next_request` numbers its request ids.
fn build_line(d: &Dev, next_request: &mut u64, input: &mut Input<'_>) -> (Vec<u8>, Sent) {
    let kind = input.u8();
    let id = format!("\"q{}\"", *next_request);
    *next_request += 1;
    let request = |method: &'static str, params: String| {
        (
            format!("{{\"id\":{id},\"method\":\"{method}\",\"params\":{params}}}").into_bytes(),
            Sent::Request(id.clone(), method),
        )
    };
    match (kind & 0x0f) % line::COUNT {
        line::SUBSCRIBE => match kind >> 4 {
            0 => request("mining.subscribe", "[]".into()),
            1 => request("mining.subscribe", "[\"fuzz/1.0\",\"00\"]".into()),
            _ => request("mining.subscribe", "[\"fuzz/1.0\"]".into()),
        },
        line::AUTHORIZE => {
            let name = match (kind >> 4) % 8 {
                6 => "w".repeat(200),
                7 => d.workers.first().cloned().unwrap_or_default(),
                n => WORKERS[usize::from(n)].to_owned(),
            };
            let password = match input.u8() % 4 {
                0 => "x",
                1 => "d=0.0001",
                2 => "x,d=1e300",
                _ => "",
            };
            let worker = serde_json::to_string(&name).expect("a string");
            let (line, _) = request("mining.authorize", format!("[{worker},\"{password}\"]"));
            (line, Sent::Authorize(id.clone(), name))
        }
        line::CONFIGURE => {
            let mut exts = Vec::new();
            let mut params = Vec::new();
            if kind & 0x10 != 0 {
                exts.push("\"version-rolling\"");
                let mask = match input.u8() % 4 {
                    0 => 0xffff_ffffu32,
                    1 => 0x1fff_e000,
                    2 => 0x0000_6000,
                    _ => input.u32(),
                };
                params.push(format!("\"version-rolling.mask\":\"{mask:08x}\""));
            }
            if kind & 0x20 != 0 {
                exts.push("\"minimum-difficulty\"");
                params.push("\"minimum-difficulty.value\":0.001".into());
            }
            if kind & 0x40 != 0 {
                exts.push("\"subscribe-extranonce\"");
            }
            if kind & 0x80 != 0 {
                exts.push("\"info\"");
            }
            request(
                "mining.configure",
                format!("[[{}],{{{}}}]", exts.join(","), params.join(",")),
            )
        }
        line::SUGGEST_DIFFICULTY => {
            let v = ["0.001", "1", "1e-9", "0", "-5", "\"x\"", "1e300"][usize::from(kind >> 4) % 7];
            if kind & 0x80 != 0 {
                (
                    format!(
                        "{{\"id\":null,\"method\":\"mining.suggest_difficulty\",\"params\":[{v}]}}"
                    )
                    .into_bytes(),
                    Sent::Other,
                )
            } else {
                request("mining.suggest_difficulty", format!("[{v}]"))
            }
        }
        line::SUGGEST_TARGET => {
            let t = match kind >> 5 {
                0 => "00000000ffff0000000000000000000000000000000000000000000000000000".into(),
                1 => "0".repeat(64),
                2 => "ff".repeat(32),
                _ => "zz".into(),
            };
            request("mining.suggest_target", format!("[\"{t}\"]"))
        }
        line::EXTRANONCE_SUBSCRIBE => request("mining.extranonce.subscribe", "[]".into()),
        line::PING => {
            if kind & 0x10 != 0 {
                request("client.get_version", "[]".into())
            } else {
                request("mining.ping", "[]".into())
            }
        }
        line::OTHER => match kind >> 4 {
            0 => request("mining.unknown", "[1]".into()),
            1 => (
                b"{\"id\":null,\"method\":\"mining.whatever\",\"params\":[]}".to_vec(),
                Sent::Other,
            ),
            2 => (
                format!("{{\"id\":{id},\"result\":true,\"error\":null}}").into_bytes(),
                Sent::Other,
            ),
            3 => request("mining.notify", "[]".into()),
            4 => request("mining.submit", "[\"farm.a\"]".into()),
            5 => request("mining.authorize", "[]".into()),
            _ => request("mining.configure", "[\"x\"]".into()),
        },
        line::RESUBMIT if d.last_submit.is_some() => {
            let mut s = d.last_submit.clone().expect("a submit");
            s.id = id;
            (submit_line(&s), Sent::Submit(s))
        }
        _ => {
            let s = build_submit(d, id, kind, input);
            (submit_line(&s), Sent::Submit(s))
        }
    }
}

/// A `mining.submit` from device `d`, each field right or wrong as the input says.
fn build_submit(d: &Dev, id: String, kind: u8, input: &mut Input<'_>) -> SubmitLine {
    let choice = input.u8();
    let job = match (choice % 8, d.jobs.len()) {
        (_, 0) => None,
        (0..=4, n) => d.jobs.get(n - 1),
        (5, n) => d.jobs.get(usize::from(input.u8()) % n),
        _ => None,
    };
    let job_text = match (job, choice % 8) {
        (Some(j), _) => j.wire_text.clone(),
        (None, 6) => format!("{:x}", d.highest + 1 + u64::from(input.u8())),
        (None, 7) => ["", "zz", "12345678901234567", "0"][usize::from(input.u8() % 4)].into(),
        (None, _) => format!("{:x}", input.u8()),
    };
    let size = match kind >> 6 {
        0 => usize::from(input.u8() % 10),
        _ => d.extranonce2_size,
    };
    let fill = input.u8();
    let extranonce2: Vec<u8> = (0..size).map(|k| fill.wrapping_add(k as u8)).collect();
    let base = job.map_or(NTIME0, |j| j.ntime);
    let ntime = match (kind >> 4) & 3 {
        0 | 1 => base + u32::from(input.u8() % 4),
        2 => base.wrapping_sub(1 + u32::from(input.u8())),
        _ => base.wrapping_add(input.u32() % 20_000),
    };
    let nonce = input.u32();
    let bits = match input.u8() % 4 {
        0 | 1 => None,
        2 => Some(input.u32() & d.mask),
        _ => Some(input.u32()),
    };
    let worker = match choice >> 6 {
        0..=2 => d
            .workers
            .first()
            .cloned()
            .unwrap_or_else(|| "farm.a".into()),
        _ => WORKERS[usize::from(input.u8()) % WORKERS.len()].to_owned(),
    };
    SubmitLine {
        id,
        worker,
        job: job_text,
        extranonce2,
        ntime,
        nonce,
        bits,
    }
}

fn submit_line(s: &SubmitLine) -> Vec<u8> {
    let mut params = vec![
        serde_json::to_string(&s.worker).expect("a string"),
        serde_json::to_string(&s.job).expect("a string"),
        format!("\"{}\"", hex(&s.extranonce2)),
        format!("\"{:08x}\"", s.ntime),
        format!("\"{:08x}\"", s.nonce),
    ];
    if let Some(b) = s.bits {
        params.push(format!("\"{b:08x}\""));
    }
    format!(
        "{{\"id\":{},\"method\":\"mining.submit\",\"params\":[{}]}}",
        s.id,
        params.join(",")
    )
    .into_bytes()
}

fn run<P: PoolSide>(config: TranslatorConfig, input: &mut Input<'_>) {
    let mut w = World::<P>::new(config);
    w.play(input);
    assert_eq!(w.c.t.devices().count(), 0);
}

/// One input: see the module documentation. Never panics unless an invariant breaks.
pub fn translator_session(data: &[u8]) {
    let mut input = Input::new(data);
    let c0 = input.u8();
    let c1 = input.u8();
    let config = config(c0, c1);
    if c0 & 1 == 0 {
        run::<Sv2Pool>(config, &mut input);
    } else {
        run::<Sv1Pool>(config, &mut input);
    }
}

/// Writes scripts, so that seeds need not know the byte layout.
pub mod script {
    use super::{line, op, up};

    /// A script under construction.
    #[derive(Clone, Debug)]
    pub struct Script {
        data: Vec<u8>,
        sv1: bool,
    }

    impl Script {
        /// `sv1`: the SV1 uplink; `c0`, `c1`: the configuration bytes (bit 0 of `c0` is
        /// replaced by `sv1`).
        pub fn new(sv1: bool, c0: u8, c1: u8) -> Self {
            Script {
                data: vec![(c0 & !1) | u8::from(sv1), c1],
                sv1,
            }
        }

        /// A script for the per-device target: configuration bytes as they are (bit 0 of
        /// `c0` is the short open timeout there).
        pub fn per_device(c0: u8, c1: u8) -> Self {
            Script {
                data: vec![c0, c1],
                sv1: false,
            }
        }

        fn push(mut self, bytes: &[u8]) -> Self {
            self.data.extend_from_slice(bytes);
            self
        }

        /// A device connects.
        pub fn connect(self) -> Self {
            self.push(&[op::CONNECT])
        }

        /// Device `device` sends a line of kind `kind` ([`line`]) with argument bytes `args`.
        pub fn line(self, device: u8, kind: u8, args: &[u8]) -> Self {
            self.push(&[(device << 4) | op::LINE, kind]).push(args)
        }

        /// Device `device` subscribes.
        pub fn subscribe(self, device: u8) -> Self {
            self.line(device, line::SUBSCRIBE | 0x20, &[])
        }

        /// Authorizes worker `worker` (an index into the harness's names; 0 and 1 are good).
        pub fn authorize(self, device: u8, worker: u8) -> Self {
            self.line(device, line::AUTHORIZE | (worker << 4), &[0])
        }

        /// Version rolling with the pool's mask, and extranonce subscription.
        pub fn configure(self, device: u8) -> Self {
            self.line(device, line::CONFIGURE | 0x50, &[1])
        }

        /// A share on the device's latest job, right in every field (extranonce2 of its size,
        /// filled from `fill`), with `nonce`, rolling no version bits.
        pub fn submit(self, device: u8, fill: u8, nonce: u32) -> Self {
            self.line(device, line::SUBMIT | 0xc0, &[0x00, fill, 0])
                .push(&nonce.to_le_bytes())
                .push(&[0])
        }

        /// The same, rolling `bits` (masked by what the device was granted).
        pub fn submit_rolled(self, device: u8, fill: u8, nonce: u32, bits: u32) -> Self {
            self.line(device, line::SUBMIT | 0xc0, &[0x00, fill, 0])
                .push(&nonce.to_le_bytes())
                .push(&[2])
                .push(&bits.to_le_bytes())
        }

        /// The device's last share again.
        pub fn resubmit(self, device: u8) -> Self {
            self.line(device, line::RESUBMIT, &[])
        }

        /// Raw bytes as a line (at most 255).
        pub fn raw_line(self, device: u8, bytes: &[u8]) -> Self {
            let bytes = &bytes[..bytes.len().min(255)];
            self.push(&[(device << 4) | op::RAW_LINE, bytes.len() as u8])
                .push(bytes)
        }

        /// Device `device` disconnects.
        pub fn close(self, device: u8) -> Self {
            self.push(&[(device << 4) | op::CLOSE])
        }

        /// Device `device` sends a line longer than the limit.
        pub fn long_line(self, device: u8) -> Self {
            self.push(&[(device << 4) | op::LONG_LINE])
        }

        /// An upstream message of kind `kind` ([`up`]) with argument bytes `args`.
        pub fn upstream(self, kind: u8, args: &[u8]) -> Self {
            self.push(&[op::UPSTREAM, kind]).push(args)
        }

        /// Raw upstream bytes: SV2, a message type and payload; SV1, a line.
        pub fn upstream_raw(self, args: &[u8]) -> Self {
            self.push(&[op::UPSTREAM_RAW]).push(args)
        }

        /// The channel opened. SV2: a 4-byte prefix and 8 bytes to roll, any share forwarded;
        /// SV1: the opening's four requests answered in order (mask granted, a 7-byte
        /// extranonce1 and 4 bytes to roll).
        pub fn open(self) -> Self {
            if self.sv1 {
                self.upstream(up::OPEN, &[0x22, 0x00])
                    .upstream(up::OPEN, &[0x2b, 0x00])
                    .upstream(up::OPEN, &[0x01, 0x00])
                    .upstream(up::OPEN, &[0x01, 0x00])
            } else {
                self.upstream(up::OPEN, &[0xa1, 0x01, 0x01, 0x00])
            }
        }

        /// Work on a new block (prev hash from `seed`, regtest nBits). SV2: a future job, then
        /// the prev hash naming it; SV1: a clean notify.
        pub fn work(self, seed: u8) -> Self {
            if self.sv1 {
                self.upstream(up::PREV_HASH, &[0x50, seed, 0x00, 0x01])
            } else {
                self.upstream(up::JOB, &[0x41, 0x01])
                    .upstream(up::PREV_HASH, &[0x01, 0x01, seed, 0x00])
            }
        }

        /// More work on the same block. SV2: a job with `min_ntime`; SV1: a notify.
        pub fn update(self) -> Self {
            if self.sv1 {
                self.upstream(up::JOB, &[0x40, 0x00, 0x02])
            } else {
                self.upstream(up::JOB, &[0x42, 0x01, 0x02])
            }
        }

        /// SV2: the pool's target (`b` picks it: 0 any share, 4 difficulty 1, 5 none); SV1:
        /// `set_difficulty` (`b` picks: 0 the easiest, 1 one, 3 2^20).
        pub fn target(self, b: u8) -> Self {
            if self.sv1 {
                self.upstream(up::TARGET, &[b])
            } else {
                self.upstream(up::TARGET, &[b, 0x01])
            }
        }

        /// SV2: `SetExtranoncePrefix` (`b % 6` bytes); SV1: `set_extranonce` of the same size.
        pub fn prefix(self, b: u8) -> Self {
            if self.sv1 {
                self.upstream(up::PREFIX, &[b & 0x7f])
            } else {
                self.upstream(up::PREFIX, &[b, 0x01])
            }
        }

        /// The pool accepts shares in flight: SV2 every one up to the `i`th (modulo those in
        /// flight); SV1 the `i`th pending.
        pub fn accept(self, i: u8) -> Self {
            if self.sv1 {
                self.upstream(up::ACCEPT, &[i])
            } else {
                self.upstream(up::ACCEPT, &[0x00, 0x01, i])
            }
        }

        /// The pool rejects the `i`th share in flight (SV1: pending).
        pub fn reject(self, i: u8) -> Self {
            if self.sv1 {
                self.upstream(up::REJECT, &[i])
            } else {
                self.upstream(up::REJECT, &[i, 0x01])
            }
        }

        /// The pool closes the channel (SV1: `client.reconnect`).
        pub fn close_channel(self) -> Self {
            if self.sv1 {
                self.upstream(up::CLOSE, &[0])
            } else {
                self.upstream(up::CLOSE, &[0, 0x01])
            }
        }

        /// Clock step: `b >> 6` picks the unit (10 ms, 250 ms, 2 s, 1 min), `b & 0x3f` counts.
        pub fn tick(self, b: u8) -> Self {
            self.push(&[op::TICK, b])
        }

        /// The upstream connection is lost.
        pub fn lost(self) -> Self {
            self.push(&[op::LOST])
        }

        /// A new upstream connection is ready.
        pub fn reconnected(self) -> Self {
            self.push(&[op::CONNECTED])
        }

        /// The script's bytes, the fuzz target's input.
        pub fn build(self) -> Vec<u8> {
            self.data
        }
    }
}

/// 300 deterministic pseudo-random inputs of 200 bytes, for the targets' unit tests: whatever
/// bytes come, the invariants hold.
#[cfg(test)]
pub(crate) fn arbitrary_inputs() -> impl Iterator<Item = Vec<u8>> {
    (0u32..300).map(|seed| {
        (0..200u32)
            .map(|i| {
                (seed
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(i.wrapping_mul(40_503))
                    >> 7) as u8
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::script::Script;
    use super::*;

    /// Two bytes of device extranonce, everything else by default.
    const C0: u8 = 0x04;

    fn farm(sv1: bool) -> Script {
        Script::new(sv1, C0, 0)
            .open()
            .connect()
            .configure(0)
            .subscribe(0)
            .authorize(0, 0)
            .work(1)
    }

    #[test]
    fn a_farm_mines_through_either_uplink() {
        for sv1 in [false, true] {
            let s = farm(sv1)
                .submit(0, 1, 1)
                .submit(0, 1, 2)
                .submit_rolled(0, 2, 3, 0x0000_2000)
                .resubmit(0)
                .accept(0)
                .reject(0)
                .tick(0x45)
                .update()
                .submit(0, 3, 4)
                .lost()
                .submit(0, 3, 5)
                .reconnected()
                .open()
                .work(2)
                .submit(0, 4, 6)
                .build();
            translator_session(&s);
        }
    }

    #[test]
    fn arbitrary_inputs_hold_the_invariants() {
        for data in arbitrary_inputs() {
            translator_session(&data);
        }
    }
}
