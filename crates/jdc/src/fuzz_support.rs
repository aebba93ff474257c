//! What the fuzz target of `crates/jdc/fuzz` runs, here so that `tests/fuzz_corpus.rs` replays
//! the committed corpus on stable. [`jdc_core`] reads its input on a virtual clock (no clock is
//! read) and panics only when an invariant breaks.
//!
//! [`jdc_core`] drives one [`JdcCore`] as its shell does, with a JDS and a pool whose every
//! message the input chooses: the embedded pool's templates (a new tip or the same one), the
//! farm provider's answers for their transactions (none, one valid, one that does not decode,
//! an error), the JDS's tokens, declarations accepted or refused (any code) or answered with the
//! positions it lacks, under request ids the core used or made up; the pool's verdicts on custom jobs and shares,
//! targets, extranonce prefixes (same length or another), channel closes; raw payloads
//! through `Message::decode` for either link (one that does not decode ends that link, as the
//! shell does); the devices' shares and blocks, on remembered, forgotten or unknown templates,
//! in or out of the channel's range; links lost; sends that fail (given back before anything
//! else, as the contract says); clock steps with the deadline handled when it is due; rejoins
//! answered with the same layout, another payout, another extranonce layout, or a failure.
//! Messages reach the core only on a link it has up: the shell closes a link when told.
//!
//! Checked after every step, from what the core sent and said:
//!
//! - no panic; every transmit goes to a link up when it is polled, and encodes and decodes
//!   back to itself;
//! - `PushSolution`s: the core's count of pushes is exactly those the harness saw go out (polled
//!   and not failed), and its count of late pushes is at most that; each one pushed is a block the devices found (same
//!   extranonce, nonce, time and version) on a template the core was given, with that
//!   template's prev hash and nBits, and no block goes out more times than it was found;
//! - declarations: the JDS's answers the core counts (declared, refused) are at most the
//!   `DeclareMiningJob`s that went out, and every `SetCustomMiningJob` carries a token the JDS
//!   gave in a `DeclareMiningJob.Success` (built or raw) on the current connection;
//! - events: a `Rejoin` only while both links are down and no other attempt is in flight; a
//!   `FetchTxData` only for a template the core was given, and only while no other is in
//!   flight;
//! - time: after [`JdcCore::handle_timeout`] at a due deadline, the next deadline is later (a
//!   shell driving the core never spins).
//!
//! [`setup`], [`declarer`], [`farm_template`] and [`pool_script`] build what the core starts
//! from, for the harness and the core's tests.
//!
//! A script starts with one configuration byte (fallback payout or none; rejections in a row
//! before the pool is left), then each step is an operation byte and its arguments: the low
//! nibble is the operation ([`op`]), a high nibble of 0xf fails the first send that follows the
//! step and 0xe the second.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use pool::engine::TappedShare;
use pool::jobs::{Generation, JobBook, JobConfig};
use pool::template::{TdpTemplate, Template};
use primitives::bitcoin::absolute::LockTime;
use primitives::bitcoin::consensus::serialize;
use primitives::bitcoin::transaction::Version;
use primitives::bitcoin::{
    Amount, OutPoint, ScriptBuf, Sequence, Transaction, TxIn, TxOut, Witness,
};
use primitives::fuzz_input::FuzzInput as Input;
use primitives::{CompactTarget, Hash256, Target, Timestamp};
use sv2::messages::common::SetupConnectionSuccess;
use sv2::messages::job_declaration::{
    error_code as jd_code, AllocateMiningJobTokenSuccess, DeclareMiningJobError,
    DeclareMiningJobSuccess, ProvideMissingTransactions,
};
use sv2::messages::mining::{
    error_code as mining_code, CloseChannel, OpenExtendedMiningChannelSuccess,
    SetCustomMiningJobError, SetCustomMiningJobSuccess, SetExtranoncePrefix, SetTarget,
    SubmitSharesError, SubmitSharesSuccess,
};
use sv2::messages::template_distribution::RequestTransactionDataSuccess;
use sv2::messages::{JobDeclaration, Mining};
use sv2::Message;

use crate::core::{CoreConfig, CoreEvent, JdcCore, JdcStats, Link, Setup, Transmit};
use crate::declarer::{Declarer, DeclarerConfig, DeclarerEvent};
use crate::fallback::FallbackConfig;
use crate::pool_channel::{PoolChannel, PoolChannelConfig, PoolEvent};

/// The operations of a script: the low nibble of a step's first byte.
pub mod op {
    /// A new template from the farm's node (argument: a byte, odd for a new tip).
    pub const TEMPLATE: u8 = 0;
    /// The provider answers the transaction fetch in flight (argument: which answer).
    pub const TX_DATA: u8 = 1;
    /// The JDS sends `AllocateMiningJobToken.Success` (argument: which request).
    pub const TOKEN: u8 = 2;
    /// The JDS accepts a declaration (argument: which request).
    pub const DECLARED: u8 = 3;
    /// The JDS refuses a declaration (arguments: which request, which code).
    pub const REFUSED: u8 = 4;
    /// The JDS asks for transactions (arguments: which request, positions).
    pub const MISSING: u8 = 5;
    /// A raw payload from the JDS (arguments: message type, length, bytes).
    pub const JDS_RAW: u8 = 6;
    /// The pool sets or refuses a custom job (arguments: which request, verdict).
    pub const JOB_VERDICT: u8 = 7;
    /// The pool accepts shares (arguments: how many back, how many).
    pub const SHARES_OK: u8 = 8;
    /// The pool rejects a share (arguments: which, which code).
    pub const SHARE_ERROR: u8 = 9;
    /// The pool changes the target, the prefix, or closes the channel (argument: which).
    pub const POOL_OTHER: u8 = 10;
    /// A raw payload from the pool (arguments: message type, length, bytes).
    pub const POOL_RAW: u8 = 11;
    /// A device's share (arguments: template, kind).
    pub const SHARE: u8 = 12;
    /// A link is lost (argument: which).
    pub const LOST: u8 = 13;
    /// The clock moves on (argument: how far); a due deadline is handled.
    pub const TICK: u8 = 14;
    /// A rejoin in flight ends (argument: how).
    pub const JOIN: u8 = 15;
}

/// The pool channel's id in every setup the harness makes.
const CHANNEL: u32 = 6;
/// The extranonce bytes after the pool's prefix that are the JDC's, in every [`setup`].
pub const EXTRANONCE_SIZE: usize = 8;
/// The first setup's prefix length.
const PREFIX_LEN: usize = 4;
/// Steps at most: enough for every path, bounded so a run stays short.
const MAX_STEPS: usize = 400;
/// Templates remembered by the harness (the core remembers fewer).
const MAX_TEMPLATES: usize = 64;

/// The harness's channel target: every other share meets it, so shares go up and are held
/// back alike.
fn channel_target() -> Target {
    let mut target = [0xff; 32];
    target[31] = 0x7f;
    Target::from_le_bytes(&target)
}

/// The pool's payout, as the JDS's first token names it (for the harness and the core's tests).
pub fn pool_script() -> ScriptBuf {
    ScriptBuf::from_bytes([&[0x00, 0x14][..], &[0x22; 20]].concat())
}

/// Another payout a JDS may name after a rejoin.
fn other_script() -> ScriptBuf {
    ScriptBuf::from_bytes([&[0x00, 0x14][..], &[0x44; 20]].concat())
}

/// The farm's own payout, for a fallback to solo mining.
fn farm_script() -> ScriptBuf {
    ScriptBuf::from_bytes([&[0x00, 0x14][..], &[0x66; 20]].concat())
}

fn outputs_paying(script: ScriptBuf) -> Vec<u8> {
    serialize(&vec![TxOut {
        value: Amount::ZERO,
        script_pubkey: script,
    }])
}

/// An upstream's answer to the JDC's `SetupConnection`, for the JDS and the pool alike.
fn setup_success() -> Message {
    SetupConnectionSuccess {
        used_version: 2,
        flags: 0,
    }
    .into()
}

/// A declarer past its setup, holding its first token, which names `payout`, and asking for
/// `spare_tokens` more (for the harness and the core's tests).
pub fn declarer(spare_tokens: usize, payout: ScriptBuf) -> Declarer {
    let mut d = Declarer::new(DeclarerConfig {
        spare_tokens,
        ..DeclarerConfig::default()
    });
    let _ = d.setup_connection();
    let out = d.handle_message(setup_success()).expect("setup");
    for e in out {
        if let DeclarerEvent::Send(Message::JobDeclaration(
            JobDeclaration::AllocateMiningJobToken(a),
        )) = e
        {
            d.handle_message(
                AllocateMiningJobTokenSuccess {
                    request_id: a.request_id,
                    mining_job_token: vec![0x70; 4],
                    coinbase_outputs: outputs_paying(payout.clone()),
                }
                .into(),
            )
            .expect("first token");
        }
    }
    assert!(d.is_ready());
    d
}

/// A JDS and a pool set up (for the harness and the core's tests): the pool's channel open
/// with `prefix` (and [`EXTRANONCE_SIZE`] bytes after it) at `target`, the JDS's first token
/// naming `payout`, `spare_tokens` more asked for.
pub fn setup(prefix: Vec<u8>, target: Target, payout: ScriptBuf, spare_tokens: usize) -> Setup {
    let mut c = PoolChannel::new(PoolChannelConfig::default());
    let _ = c.setup_connection();
    let out = c.handle_message(setup_success()).expect("pool setup");
    let Some(PoolEvent::Send(Message::Mining(Mining::OpenExtendedMiningChannel(o)))) = out.first()
    else {
        panic!("no channel request after the pool's setup");
    };
    let out = c
        .handle_message(
            OpenExtendedMiningChannelSuccess {
                request_id: o.request_id,
                channel_id: CHANNEL,
                target,
                extranonce_size: EXTRANONCE_SIZE as u16,
                extranonce_prefix: prefix,
                group_channel_id: 0,
            }
            .into(),
        )
        .expect("channel opened");
    let opened = out
        .into_iter()
        .find_map(|e| match e {
            PoolEvent::Opened(o) => Some(o),
            _ => None,
        })
        .expect("an Opened event");
    Setup {
        declarer: declarer(spare_tokens, payout.clone()),
        early: Vec::new(),
        payout,
        channel: c,
        opened,
    }
}

/// A template of the farm's node at height 900,001 on `prev_hash` with `bits`, no
/// transactions, as the Template Provider gives it (for the harness and the core's tests).
pub fn farm_template(
    template_id: u64,
    prev_hash: Hash256,
    bits: u32,
) -> (Arc<Template>, Arc<TdpTemplate>) {
    let template = Template {
        height: 900_001,
        prev_hash,
        version: 0x2000_0000,
        bits: CompactTarget::from_consensus(bits),
        curtime: 1_750_000_000,
        mintime: 1_749_999_000,
        median_time_past: None,
        coinbase_value: Amount::from_sat(312_500_000),
        witness_commitment: None,
        transactions: Arc::from(Vec::new()),
        longpoll_id: None,
    };
    let tdp = TdpTemplate {
        template_id,
        coinbase_tx_version: 2,
        // BIP34 push of height 900001.
        coinbase_prefix: vec![0x03, 0xa1, 0xbb, 0x0d],
        coinbase_tx_input_sequence: 0xffff_fffe,
        coinbase_tx_value_remaining: 312_500_000,
        coinbase_tx_outputs_count: 0,
        coinbase_tx_outputs: Vec::new(),
        coinbase_tx_locktime: 900_000,
        merkle_path: Arc::from(Vec::new()),
    };
    (Arc::new(template), Arc::new(tdp))
}

/// A template the harness gave the core: the block fields a push must carry.
struct Given {
    g: Arc<Generation>,
}

/// A block as a `PushSolution` names it: the miner's fields, and the prev hash and nBits of
/// its template. Two blocks the devices found alike on two templates of one tip are the same
/// push.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct BlockKey {
    extranonce: Vec<u8>,
    nonce: u32,
    ntime: u32,
    version: u32,
    prev_hash: [u8; 32],
    nbits: u32,
}

/// The core, the world it talks to, and what the harness saw of both.
struct World {
    core: JdcCore,
    now: Timestamp,
    book: JobBook,
    templates: Vec<Given>,
    next_template_id: u64,
    prev_hash: Hash256,
    /// The extranonce prefix the devices' work lies under (the core says when it moves).
    base: Vec<u8>,
    /// The fetch the core asked for and the provider has not answered: generation, template.
    fetching: Option<(u64, u64)>,
    /// A rejoin the core asked for and the harness has not ended.
    rejoining: bool,
    /// Request ids of messages sent on the current connections.
    token_requests: Vec<u32>,
    declare_requests: Vec<u32>,
    set_job_requests: Vec<u32>,
    share_seqs: Vec<u32>,
    /// Tokens the JDS gave in `DeclareMiningJob.Success` on the current connection.
    declared_tokens: HashSet<Vec<u8>>,
    next_token: u32,
    /// `DeclareMiningJob`s that went out, over every connection.
    declarations_sent: u64,
    /// Blocks the devices found on templates the core was given, by what a push names, and
    /// how many times each was found.
    blocks: HashMap<BlockKey, u32>,
    /// Of those, how many times each went out as a `PushSolution`.
    pushed: HashMap<BlockKey, u32>,
    pushes_sent: u64,
}

impl World {
    fn new(input: &mut Input<'_>) -> World {
        let c = input.u8();
        let config = CoreConfig {
            tag: b"/farm/".to_vec(),
            extranonce_len: PREFIX_LEN + EXTRANONCE_SIZE,
            fallback: FallbackConfig {
                max_rejections_in_a_row: u32::from(c >> 1 & 3) + 1,
                token_timeout: Duration::from_secs(10),
            },
            fallback_payout: (c & 1 == 1).then(farm_script),
        };
        let base = vec![0xfa, 0xce, 0x00, 0x01];
        let core = JdcCore::new(
            config,
            setup(base.clone(), channel_target(), pool_script(), 1),
            Timestamp::ZERO,
        );
        let mut w = World {
            core,
            now: Timestamp::ZERO,
            book: JobBook::new(JobConfig {
                coinbase_tag: b"/farm/".to_vec(),
                extranonce_len: PREFIX_LEN + EXTRANONCE_SIZE,
            }),
            templates: Vec::new(),
            next_template_id: 1,
            prev_hash: Hash256([0x33; 32]),
            base,
            fetching: None,
            rejoining: false,
            token_requests: Vec::new(),
            declare_requests: Vec::new(),
            set_job_requests: Vec::new(),
            share_seqs: Vec::new(),
            declared_tokens: HashSet::new(),
            next_token: 1,
            declarations_sent: 0,
            blocks: HashMap::new(),
            pushed: HashMap::new(),
            pushes_sent: 0,
        };
        w.settle(None);
        w
    }

    /// A new template of the farm's node, on the same tip or a new one.
    fn template(&mut self, b: u8) {
        if self.templates.len() >= MAX_TEMPLATES {
            return;
        }
        if b & 1 == 1 {
            self.prev_hash.0[0] = self.prev_hash.0[0].wrapping_add(1);
        }
        let template_id = self.next_template_id;
        self.next_template_id += 1;
        let bits = if b & 2 == 0 { 0x207f_ffff } else { 0x1d00_ffff };
        let (template, tdp) = farm_template(template_id, self.prev_hash, bits);
        let g = self.book.handle_tdp_template(template, tdp, self.now);
        self.templates.push(Given { g: g.clone() });
        self.core.handle_generation(g, self.now);
    }

    /// The provider answers the fetch in flight.
    fn tx_data(&mut self, b: u8) {
        let Some((generation, template_id)) = self.fetching.take() else {
            return;
        };
        let one = |data: Vec<u8>| {
            Ok(RequestTransactionDataSuccess {
                template_id,
                excess_data: Vec::new(),
                transaction_list: vec![data],
            })
        };
        let reply = match b % 4 {
            0 => Ok(RequestTransactionDataSuccess {
                template_id,
                excess_data: Vec::new(),
                transaction_list: Vec::new(),
            }),
            1 => one(serialize(&Transaction {
                version: Version::TWO,
                lock_time: LockTime::ZERO,
                input: vec![TxIn {
                    previous_output: OutPoint::default(),
                    script_sig: ScriptBuf::new(),
                    sequence: Sequence::MAX,
                    witness: Witness::new(),
                }],
                output: vec![TxOut {
                    value: Amount::from_sat(u64::from(b)),
                    script_pubkey: other_script(),
                }],
            })),
            2 => one(vec![b; usize::from(b % 7)]),
            _ => Err("template-id-not-found".to_owned()),
        };
        self.core.handle_tx_data(generation, reply, self.now);
    }

    /// One of `ids` (or, for a high `b`, one made up).
    fn pick(ids: &[u32], b: u8) -> u32 {
        if ids.is_empty() || b >= 0xf0 {
            return u32::from(b) << 8 | 0x55;
        }
        ids[ids.len() - 1 - usize::from(b) % ids.len()]
    }

    fn jds(&mut self, m: Message) {
        if self.core.is_up(Link::Jds) {
            if let Message::JobDeclaration(JobDeclaration::DeclareMiningJobSuccess(d)) = &m {
                self.declared_tokens.insert(d.new_mining_job_token.clone());
            }
            self.core.handle_jds_message(m, self.now);
        }
    }

    fn pool(&mut self, m: Message) {
        if self.core.is_up(Link::Pool) {
            self.core.handle_pool_message(m, self.now);
        }
    }

    /// A token for an allocation request. Its outputs are the pool's payout: the declarer reads
    /// outputs from a connection's first token only, which every setup gives.
    fn token(&mut self, b: u8) {
        let request_id = Self::pick(&self.token_requests, b);
        let token = self.next_token.to_le_bytes().to_vec();
        self.next_token += 1;
        self.jds(
            AllocateMiningJobTokenSuccess {
                request_id,
                mining_job_token: token,
                coinbase_outputs: outputs_paying(pool_script()),
            }
            .into(),
        );
    }

    fn declared(&mut self, b: u8) {
        let request_id = Self::pick(&self.declare_requests, b);
        let token = [b"declared".as_slice(), &self.next_token.to_le_bytes()].concat();
        self.next_token += 1;
        self.jds(
            DeclareMiningJobSuccess {
                request_id,
                new_mining_job_token: token,
            }
            .into(),
        );
    }

    fn refused(&mut self, input: &mut Input<'_>) {
        let request_id = Self::pick(&self.declare_requests, input.u8());
        let code = [
            jd_code::INVALID_MINING_JOB_TOKEN,
            jd_code::MISSING_TXS,
            jd_code::INVALID_COINBASE_TX,
            jd_code::STALE_CHAIN_TIP,
            jd_code::INVALID_JOB,
            "made-up",
        ][usize::from(input.u8()) % 6];
        self.jds(
            DeclareMiningJobError {
                request_id,
                error_code: code.into(),
                error_details: b"fuzz".to_vec(),
            }
            .into(),
        );
    }

    fn missing(&mut self, input: &mut Input<'_>) {
        let request_id = Self::pick(&self.declare_requests, input.u8());
        let n = usize::from(input.u8() % 4);
        let positions = (0..n).map(|_| u16::from(input.u8() % 3)).collect();
        self.jds(
            ProvideMissingTransactions {
                request_id,
                unknown_tx_position_list: positions,
            }
            .into(),
        );
    }

    /// A raw payload from `link`: decoded as the shell decodes frames, the link lost if it does
    /// not decode.
    fn raw(&mut self, link: Link, input: &mut Input<'_>) {
        let msg_type = input.u8();
        let len = usize::from(input.u8() % 64);
        let mut payload = input.take(len).to_vec();
        if !self.core.is_up(link) {
            return;
        }
        match Message::decode(msg_type, &mut payload) {
            Ok(m) => match link {
                Link::Jds => self.jds(m),
                Link::Pool => self.pool(m),
            },
            Err(e) => self
                .core
                .handle_link_lost(link, format!("decode: {e}"), self.now),
        }
    }

    fn job_verdict(&mut self, input: &mut Input<'_>) {
        let request_id = Self::pick(&self.set_job_requests, input.u8());
        let b = input.u8();
        let m: Message = if b % 3 != 0 {
            SetCustomMiningJobSuccess {
                channel_id: CHANNEL,
                request_id,
                job_id: u32::from(b),
            }
            .into()
        } else {
            SetCustomMiningJobError {
                channel_id: CHANNEL,
                request_id,
                error_code: ["invalid-mining-job-token", "invalid-job-param-value", "x"]
                    [usize::from(b >> 2) % 3]
                    .into(),
            }
            .into()
        };
        self.pool(m);
    }

    fn shares_ok(&mut self, input: &mut Input<'_>) {
        let last = Self::pick(&self.share_seqs, input.u8());
        let count = u32::from(input.u8() % 4);
        self.pool(
            SubmitSharesSuccess {
                channel_id: CHANNEL,
                last_sequence_number: last,
                new_submits_accepted_count: count,
                new_shares_sum: u64::from(count),
            }
            .into(),
        );
    }

    fn share_error(&mut self, input: &mut Input<'_>) {
        let sequence_number = Self::pick(&self.share_seqs, input.u8());
        let code = [
            mining_code::STALE_SHARE,
            mining_code::INVALID_SHARE,
            mining_code::DIFFICULTY_TOO_LOW,
            mining_code::INVALID_JOB_ID,
        ][usize::from(input.u8()) % 4];
        self.pool(
            SubmitSharesError {
                channel_id: CHANNEL,
                sequence_number,
                error_code: code.into(),
            }
            .into(),
        );
    }

    fn pool_other(&mut self, input: &mut Input<'_>) {
        let b = input.u8();
        let channel_id = if b & 0x80 == 0 { CHANNEL } else { CHANNEL + 1 };
        let m: Message = match b % 4 {
            0 => SetTarget {
                channel_id,
                maximum_target: Target::from_le_bytes(&[input.u8(); 32]),
            }
            .into(),
            1 => SetExtranoncePrefix {
                channel_id,
                extranonce_prefix: vec![input.u8(); PREFIX_LEN],
            }
            .into(),
            2 => SetExtranoncePrefix {
                channel_id,
                extranonce_prefix: vec![input.u8(); PREFIX_LEN + 1],
            }
            .into(),
            _ => CloseChannel {
                channel_id,
                reason_code: "fuzz".into(),
            }
            .into(),
        };
        self.pool(m);
    }

    /// A device's share: on a template given (or one never given), a block or not, meeting
    /// the channel's target or not, in the devices' range or not.
    fn share(&mut self, input: &mut Input<'_>) {
        let t = input.u8();
        let kind = input.u8();
        let nonce = input.u32();
        let generation = if self.templates.is_empty() || t == 0xff {
            u64::from(t) + 1_000_000
        } else {
            self.templates[self.templates.len() - 1 - usize::from(t) % self.templates.len()]
                .g
                .id
        };
        let mut extranonce = self.base.clone();
        if kind & 4 != 0 {
            extranonce[0] ^= 0xff;
        }
        extranonce.extend([kind; EXTRANONCE_SIZE]);
        let share = TappedShare {
            generation,
            job_id: 1,
            extranonce,
            version: 0x2000_0000 | u32::from(kind & 0x18) << 10,
            ntime: 1_750_000_001,
            nonce,
            hash: Hash256(if kind & 2 == 0 { [0; 32] } else { [0xff; 32] }),
            block: kind & 1 == 1,
            worker: "lab.rig".into(),
        };
        let given = self.templates.iter().find(|t| t.g.id == generation);
        if let Some(t) = given.filter(|_| share.block) {
            let key = BlockKey {
                extranonce: share.extranonce.clone(),
                nonce: share.nonce,
                ntime: share.ntime,
                version: share.version,
                prev_hash: t.g.template.prev_hash.0,
                nbits: t.g.template.bits.to_consensus(),
            };
            *self.blocks.entry(key).or_default() += 1;
        }
        self.core.handle_share(share, self.now);
    }

    fn lost(&mut self, b: u8) {
        let link = if b & 1 == 0 { Link::Jds } else { Link::Pool };
        // A link the core closed has no reader to lose it.
        if self.core.is_up(link) {
            self.core
                .handle_link_lost(link, "connection reset".into(), self.now);
        }
    }

    fn tick(&mut self, b: u8) {
        let step = match b >> 6 {
            0 => u64::from(b & 0x3f),
            1 => u64::from(b & 0x3f) * 100,
            2 => u64::from(b & 0x3f) * 1_000,
            _ => 60_000,
        };
        self.now = self.now.plus_millis(step);
        if let Some(due) = self.core.poll_timeout() {
            if due <= self.now {
                self.core.handle_timeout(self.now);
                if let Some(next) = self.core.poll_timeout() {
                    assert!(
                        next > self.now,
                        "deadline {next:?} not after {:?}, just handled: a shell would spin",
                        self.now
                    );
                }
            }
        }
    }

    fn join(&mut self, b: u8) {
        if !self.rejoining {
            return;
        }
        self.rejoining = false;
        match b % 5 {
            0 => self
                .core
                .handle_join_failed("connection refused".into(), self.now),
            kind => {
                let len = if kind == 4 {
                    PREFIX_LEN + 1
                } else {
                    PREFIX_LEN
                };
                let prefix: Vec<u8> = (0..len as u8).map(|i| i ^ b).collect();
                let payout = if kind == 3 {
                    other_script()
                } else {
                    pool_script()
                };
                let taken = self
                    .core
                    .handle_joined(setup(prefix, channel_target(), payout, 1), self.now);
                assert_eq!(
                    taken,
                    len == PREFIX_LEN,
                    "a channel's layout decides a rejoin"
                );
                if taken {
                    // New connections: nothing asked on the old ones is answered on them.
                    self.token_requests.clear();
                    self.declare_requests.clear();
                    self.set_job_requests.clear();
                    self.share_seqs.clear();
                    self.declared_tokens.clear();
                }
            }
        }
    }

    /// What the core wants sent and done after a step, taken as its shell takes it, and
    /// checked. The `fail`th transmit polled (from 1), if any, fails to send: given back at once.
    fn settle(&mut self, fail: Option<usize>) {
        let mut polled = 0;
        loop {
            let mut any = false;
            while let Some(t) = self.core.poll_transmit() {
                any = true;
                polled += 1;
                self.transmitted(t, fail == Some(polled));
            }
            while let Some(e) = self.core.poll_event() {
                any = true;
                self.event(e);
            }
            if !any {
                break;
            }
        }
        let stats = self.core.stats();
        assert_eq!(
            stats.solutions_pushed, self.pushes_sent,
            "pushes counted and pushes that went out"
        );
        assert!(stats.solutions_pushed_late <= stats.solutions_pushed);
        assert!(
            stats.declared + stats.declarations_refused <= self.declarations_sent,
            "{} declared and {} refused of {} declarations sent",
            stats.declared,
            stats.declarations_refused,
            self.declarations_sent
        );
    }

    fn transmitted(&mut self, t: Transmit, fails: bool) {
        assert!(
            self.core.is_up(t.to),
            "{:?} sent on the {:?} link, which the core closed",
            t.message,
            t.to
        );
        let mut bytes = Vec::new();
        let msg_type = t.message.encode(&mut bytes).expect("a transmit encodes");
        let back = Message::decode(msg_type, &mut bytes).expect("and decodes");
        assert_eq!(back, t.message, "a transmit decodes back to itself");
        if fails {
            let to = t.to;
            self.core
                .handle_send_failed(t, "broken pipe".into(), self.now);
            assert!(!self.core.is_up(to), "a failed send takes its link down");
            return;
        }
        match (&t.message, t.to) {
            (Message::JobDeclaration(JobDeclaration::AllocateMiningJobToken(a)), Link::Jds) => {
                self.token_requests.push(a.request_id)
            }
            (Message::JobDeclaration(JobDeclaration::DeclareMiningJob(d)), Link::Jds) => {
                self.declare_requests.push(d.request_id);
                self.declarations_sent += 1;
            }
            (
                Message::JobDeclaration(JobDeclaration::ProvideMissingTransactionsSuccess(_)),
                Link::Jds,
            ) => {}
            (Message::JobDeclaration(JobDeclaration::PushSolution(p)), Link::Jds) => {
                let key = BlockKey {
                    extranonce: p.extranonce.clone(),
                    nonce: p.nonce,
                    ntime: p.ntime,
                    version: p.version,
                    prev_hash: p.prev_hash,
                    nbits: p.nbits,
                };
                let Some(&found) = self.blocks.get(&key) else {
                    panic!("pushed a block the devices never found on a template with that prev hash and nBits: {p:?}");
                };
                let pushed = self.pushed.entry(key).or_default();
                *pushed += 1;
                assert!(
                    *pushed <= found,
                    "block pushed {pushed} times, found {found}: {p:?}"
                );
                self.pushes_sent += 1;
            }
            (Message::Mining(Mining::SetCustomMiningJob(s)), Link::Pool) => {
                assert!(
                    self.declared_tokens.contains(&s.token),
                    "a custom job under a token the JDS never declared on this connection"
                );
                self.set_job_requests.push(s.request_id);
            }
            (Message::Mining(Mining::SubmitSharesExtended(s)), Link::Pool) => {
                self.share_seqs.push(s.sequence_number)
            }
            (m, to) => panic!("{m:?} sent to the {to:?}, which never takes it"),
        }
        if self.share_seqs.len() > 64 {
            self.share_seqs.remove(0);
        }
    }

    fn event(&mut self, e: CoreEvent) {
        match e {
            CoreEvent::FetchTxData {
                generation,
                template_id,
            } => {
                let given = self.templates.iter().find(|t| t.g.id == generation);
                assert_eq!(
                    given.and_then(|t| t.g.tdp.as_ref()).map(|t| t.template_id),
                    Some(template_id),
                    "a fetch for a template the core was given"
                );
                assert_eq!(self.fetching, None, "a second fetch while one is in flight");
                self.fetching = Some((generation, template_id));
            }
            CoreEvent::Rejoin => {
                assert!(!self.rejoining, "a second rejoin while one is in flight");
                assert!(
                    !self.core.is_up(Link::Jds) && !self.core.is_up(Link::Pool),
                    "a rejoin while a link is up"
                );
                self.rejoining = true;
            }
            CoreEvent::ExtranonceBase(p) => self.base = p,
            CoreEvent::Close(_) | CoreEvent::PayoutOverride(_) | CoreEvent::Dependency { .. } => {}
        }
    }

    fn step(&mut self, input: &mut Input<'_>) {
        let b = input.u8();
        match b & 0x0f {
            op::TEMPLATE => self.template(input.u8()),
            op::TX_DATA => self.tx_data(input.u8()),
            op::TOKEN => self.token(input.u8()),
            op::DECLARED => self.declared(input.u8()),
            op::REFUSED => self.refused(input),
            op::MISSING => self.missing(input),
            op::JDS_RAW => self.raw(Link::Jds, input),
            op::JOB_VERDICT => self.job_verdict(input),
            op::SHARES_OK => self.shares_ok(input),
            op::SHARE_ERROR => self.share_error(input),
            op::POOL_OTHER => self.pool_other(input),
            op::POOL_RAW => self.raw(Link::Pool, input),
            op::SHARE => self.share(input),
            op::LOST => self.lost(input.u8()),
            op::TICK => self.tick(input.u8()),
            _ => self.join(input.u8()),
        }
        // The high nibble 0xf fails the first send after the step, 0xe the second.
        let fail = match b >> 4 {
            0xf => Some(1),
            0xe => Some(2),
            _ => None,
        };
        self.settle(fail);
    }
}

/// Runs a script (see the module documentation) against a JDC core; panics when an invariant
/// breaks.
pub fn jdc_core(data: &[u8]) {
    jdc_core_stats(data);
}

/// [`jdc_core`], returning what the core counted at the end, for tests that show a script
/// takes the path it was written for.
pub fn jdc_core_stats(data: &[u8]) -> JdcStats {
    let mut input = Input::new(data);
    let mut w = World::new(&mut input);
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        w.step(&mut input);
    }
    w.core.stats().clone()
}
