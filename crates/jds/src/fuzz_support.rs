//! What the fuzz targets of `crates/jds/fuzz` run, here so that `tests/fuzz_corpus.rs` replays
//! the committed corpus on stable. Each function reads its input, on a virtual clock (no clock
//! is read), and panics only when an invariant breaks.
//!
//! - [`jds_coinbase`]: a declared coinbase (`coinbase_tx_prefix`, `coinbase_tx_suffix`) through
//!   [`DeclaredCoinbase::parse`], then what the parsed coinbase feeds: the extranonce put in
//!   its place ([`DeclaredCoinbase::with_extranonce`]), the witness commitment check, and the
//!   pool's `SetCustomMiningJob` checks under the declared token the JDS would issue for it
//!   (`pool::sv2::custom_job::declared_job`).
//! - [`jds_session`]: a script of steps against up to two [`Session`]s (two connections of
//!   one JDS: one token issuer, one mempool): raw message payloads through `Message::decode`,
//!   messages built from the sessions' state (`SetupConnection`, `AllocateMiningJobToken`,
//!   `DeclareMiningJob` with real, reused, declared, forged or altered tokens, coinbases
//!   valid or broken in one way, wtxids known, unknown, made up or repeated;
//!   `ProvideMissingTransactionsSuccess` right or wrong; `PushSolution` on the last declared
//!   job; messages a JDS never receives), clock steps (forward, and back as a wall clock may
//!   go) with a tick, mempool changes, and connections that hang up.
//!
//! A [`jds_session`] script starts with two configuration bytes (see `World::new`); then each
//! step is an operation byte and its arguments. [`script`] writes scripts, so that seeds need
//! not know the byte layout.
//!
//! [`coinbase_tx`], [`jdc_coinbase`], [`split_coinbase`] and [`declare_mining_job`] build
//! declarations as a JDC does, for the harness and the tests (`jdc_coinbase` for the tests
//! only).
//!
//! [`jds_coinbase`] checks, against an independent reading of the same bytes (the coinbase
//! deserialized with every extranonce length until the scriptSig ends where the prefix says
//! it does):
//!
//! - the parser never panics, and accepts exactly the coinbases that reading accepts (one
//!   input spending the null outpoint, a scriptSig of 2 to 100 bytes whose length the prefix
//!   declares and that ends with the extranonce, an extranonce of at most 32 bytes, a witness
//!   reserved value if it commits to witnesses and no witness data if it does not, outputs
//!   that add up), with the same extranonce length and transaction;
//! - what it accepts round-trips: the transaction serializes back to
//!   `prefix || zeros || suffix`, and with any extranonce of that length to
//!   `prefix || extranonce || suffix`, the extranonce ending the scriptSig and nothing else
//!   changed; an extranonce of another length is refused;
//! - an accepted coinbase that carries witness data commits to it (else no block with it is
//!   valid: `unexpected-witness`); the commitment check agrees with BIP141's formula;
//! - each refusal has its `DeclareMiningJob.Error` code, means what it says (not a coinbase,
//!   a scriptSig length, an extranonce length) and fits the message;
//! - the pool takes a job with those outputs under the declared token the JDS would issue,
//!   and hashes the same coinbase for every extranonce; it may refuse only for what the JDS
//!   does not check (no BIP34 height, outputs over 21 million bitcoin, no outputs).
//!
//! [`jds_session`] checks after every step, against a model of the rules `session.rs`
//! documents:
//!
//! - no panic; every message a session sends encodes and decodes back;
//! - every request is answered exactly once, under its request id, with the answer the rules
//!   call for: `SetupConnection` with `.Success` or `.Error` (the spec's code; the connection
//!   then ends); `AllocateMiningJobToken` with `.Success` (a fresh allocated token of this
//!   JDS, the pool's outputs) unless allocations come faster than the configured rate (then
//!   nothing, and the connection ends); `DeclareMiningJob` with `.Error` (the code of the
//!   first rule it breaks; one of the two coinbase codes for a coinbase that is not one a JDS
//!   takes), `.Success` or `ProvideMissingTransactions` (exactly the positions the mempool
//!   lacks), and in the last case, once, later: `.Success` or `.Error` when the transactions
//!   come, or `.Error` (`missing-txs`) from the first tick past the deadline; transactions
//!   for no pending declaration, and `PushSolution`, get no answer;
//! - tokens are never accepted twice: a declaration gets past the token check only with an
//!   allocated token of this JDS, unexpired, that no declaration on any connection redeemed
//!   before, and the issuer's table of redeemed tokens holds exactly those redeemed;
//! - a declared token is a fresh declared token committing to the declared coinbase's
//!   outputs; the declared job (the session's most recent) holds the declared transactions in
//!   order; it can be a valid block as far as witness data goes (BIP141);
//! - a `PushSolution` becomes a block to submit exactly when it fits the most recent declared
//!   job and its hash meets its nBits; that block is the header with the merkle root over the
//!   coinbase (extranonce in place) and the declared transactions, and the height it is
//!   reported at is its coinbase's BIP34 height;
//! - output is bounded: at most one message or block per message step, at most one refusal
//!   per pending declaration per tick;
//! - state is bounded: declarations pending within `max_pending_declarations`, each
//!   connection's statistics exactly what its answers add up to;
//! - anything before `SetupConnection`, a second one, and messages a JDS never receives end
//!   the connection without an answer; a connection that ends stays ended and answers nothing
//!   more.

use primitives::fuzz_input::FuzzInput as Input;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use pool::jd_token::{OutputsDigest, TokenClaims, TokenKey, TokenKind};
use primitives::bitcoin::absolute::LockTime;
use primitives::bitcoin::block::{Header, Version as BlockVersion};
use primitives::bitcoin::consensus;
use primitives::bitcoin::hashes::Hash as _;
use primitives::bitcoin::transaction::Version;
use primitives::bitcoin::{
    Amount, Block, BlockHash, CompactTarget, OutPoint, ScriptBuf, Sequence, Transaction, TxIn,
    TxMerkleNode, TxOut, Txid, Witness,
};
use primitives::coinbase::{
    bip34_height_push, parse_bip34_height, witness_commitment, witness_commitment_script,
    WITNESS_COMMITMENT_HEADER,
};
use primitives::{compact_size, Hash256};
use sv2::messages::common::{
    self, job_declaration_flags, ChannelEndpointChanged, SetupConnection, SetupConnectionError,
    SetupConnectionSuccess, PROTOCOL_VERSION,
};
use sv2::messages::job_declaration::{
    AllocateMiningJobToken, AllocateMiningJobTokenSuccess, DeclareMiningJob, DeclareMiningJobError,
    DeclareMiningJobSuccess, ProvideMissingTransactions, ProvideMissingTransactionsSuccess,
    PushSolution,
};
use sv2::messages::mining::{CloseChannel, SetCustomMiningJob};
use sv2::messages::template_distribution::RequestTransactionData;
use sv2::messages::{Common, JobDeclaration};
use sv2::Message;

use crate::block::FoundBlock;
use crate::coinbase::{CoinbaseError, DeclaredCoinbase, MAX_EXTRANONCE};
use crate::session::{error_code, Close, Event, SessionStats};
use crate::{JdsConfig, Session, TokenIssuer, UnixMillis};

/// Everything a session produced since it was last asked, as one list: its events (blocks to
/// submit), then its messages, the order its shell takes them in.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A message for the JDC.
    Send(Message),
    /// A block to store and submit.
    SubmitBlock(FoundBlock),
}

/// Takes everything `s` produced: [`Session::poll_event`] until `None`, then
/// [`Session::poll_transmit`] until `None`.
pub fn drain(s: &mut Session) -> Vec<Output> {
    let events =
        std::iter::from_fn(|| s.poll_event()).map(|Event::SubmitBlock(b)| Output::SubmitBlock(b));
    let mut out: Vec<Output> = events.collect();
    out.extend(std::iter::from_fn(|| s.poll_transmit()).map(Output::Send));
    out
}

/// The virtual clock's start (Unix milliseconds).
const T0: u64 = 1_750_000_000_000;
/// The height the built coinbases commit to (BIP34), by default.
const HEIGHT: u32 = 812_345;
/// Steps per run, whatever the input's length: a run's time stays bounded.
const MAX_STEPS: usize = 400;
/// The key the JDS issues tokens under, and another one (forged tokens).
const KEY: [u8; 32] = [0x4a; 32];
const FOREIGN_KEY: [u8; 32] = [0x4b; 32];
/// Transactions the harness knows (the mempool's, and those a client can provide).
const FAMILY: usize = 16;
/// The longest a message a session sends may encode to, but for `ProvideMissingTransactions`
/// (two bytes per position asked for): a reply, a token, an error with its details.
const MESSAGE_BOUND: usize = 1024;
/// The most scriptSig bytes the independent reading tries as an extranonce (consensus allows
/// 100 in all).
const SCRIPT_SIG_MAX: usize = 100;

/// Operation bytes of [`jds_session`] (the low four bits; bit 7 picks the connection).
mod op {
    pub(crate) const RAW: u8 = 0;
    pub(crate) const SETUP: u8 = 1;
    pub(crate) const ALLOCATE: u8 = 2;
    pub(crate) const DECLARE: u8 = 3;
    pub(crate) const PROVIDE: u8 = 6;
    pub(crate) const PUSH: u8 = 8;
    pub(crate) const UNEXPECTED: u8 = 9;
    pub(crate) const CLOCK: u8 = 10;
    pub(crate) const MEMPOOL: u8 = 12;
    pub(crate) const HANG_UP: u8 = 14;
    pub(crate) const END: u8 = 15;
    /// With [`CLOCK`]: the clock steps back.
    pub(crate) const BACK: u8 = 0x10;
    /// The second connection.
    pub(crate) const CONN1: u8 = 0x80;
}

fn wtxid(tx: &Transaction) -> Hash256 {
    Hash256(tx.compute_wtxid().to_byte_array())
}

/// The pool payout script: a P2WPKH of twenty 0xab bytes.
fn payout_script() -> ScriptBuf {
    let mut s = vec![0x00, 0x14];
    s.extend_from_slice(&[0xab; 20]);
    ScriptBuf::from_bytes(s)
}

// ---- An independent reading of a declared coinbase -------------------------------------------

/// What a declared coinbase is, read without the JDS's parser: `prefix || zeros(n) || suffix`
/// deserialized for each `n` until one is a transaction with one input whose scriptSig length
/// lies in the prefix and whose scriptSig ends where the prefix ends plus `n`.
struct Reading {
    /// That `n` and transaction, if any.
    candidate: Option<(usize, Transaction)>,
}

impl Reading {
    fn of(prefix: &[u8], suffix: &[u8]) -> Reading {
        let mut bytes = Vec::with_capacity(prefix.len() + SCRIPT_SIG_MAX + suffix.len());
        // The BIP144 marker, as the bytes carry it (a transaction deserialized with it
        // serializes with it: rust-bitcoin refuses the marker without witnesses).
        let segwit = prefix.get(4) == Some(&0);
        for n in 0..=SCRIPT_SIG_MAX {
            bytes.clear();
            bytes.extend_from_slice(prefix);
            bytes.resize(prefix.len() + n, 0);
            bytes.extend_from_slice(suffix);
            let Ok(tx) = consensus::deserialize::<Transaction>(&bytes) else {
                continue;
            };
            if tx.input.len() != 1 {
                continue;
            }
            let len = tx.input[0].script_sig.len();
            let start = 4 + if segwit { 2 } else { 0 } + 1 + 36;
            let script_start = start + compact_size::len(len as u64);
            if script_start > prefix.len() || script_start + len != prefix.len() + n {
                continue;
            }
            return Reading {
                candidate: Some((n, tx)),
            };
        }
        Reading { candidate: None }
    }

    /// The extranonce length and transaction of a coinbase a JDS takes: the rules of
    /// `coinbase.rs`, checked with rust-bitcoin and BIP141's definitions.
    fn accepted(&self) -> Option<(usize, &Transaction)> {
        let (n, tx) = self.candidate.as_ref()?;
        let ok = *n <= MAX_EXTRANONCE
            && tx.is_coinbase()
            && (2..=100).contains(&tx.input[0].script_sig.len())
            && (commitment(tx).is_none() || reserved_value(tx).is_some())
            && (commitment(tx).is_some() || tx.input[0].witness.is_empty())
            && tx
                .output
                .iter()
                .try_fold(Amount::ZERO, |a, o| a.checked_add(o.value))
                .is_some();
        ok.then_some((*n, tx))
    }
}

/// BIP141: the commitment is in the last output whose script is at least 38 bytes and starts
/// with the header.
fn commitment(tx: &Transaction) -> Option<Hash256> {
    tx.output.iter().rev().find_map(|o| {
        let s = o.script_pubkey.as_bytes();
        (s.len() >= 38 && s[..6] == WITNESS_COMMITMENT_HEADER)
            .then(|| Hash256(s[6..38].try_into().expect("32 bytes")))
    })
}

/// The coinbase input's witness reserved value: a witness of one 32-byte item.
fn reserved_value(tx: &Transaction) -> Option<[u8; 32]> {
    let w = &tx.input.first()?.witness;
    (w.len() == 1)
        .then(|| w.nth(0).and_then(|i| <[u8; 32]>::try_from(i).ok()))
        .flatten()
}

/// The codes a refused declared coinbase may carry.
const COINBASE_CODES: &[&str] = &[
    error_code::INVALID_COINBASE_TX,
    error_code::INVALID_COINBASE_TX_INPUT,
];

// ---- jds_coinbase ------------------------------------------------------------------------------

/// Fuzz entry for the declared-coinbase parser.
///
/// Input: the split (two bytes: where the prefix ends in the coinbase bytes), a count of
/// wtxids (`& 7`), an extranonce seed byte, the wtxids (32 bytes each), then the coinbase bytes:
/// `prefix || suffix`.
pub fn jds_coinbase(data: &[u8]) {
    let mut input = Input::new(data);
    let split = usize::from(input.u16());
    let count = usize::from(input.u8() & 7);
    let seed = input.u8();
    let wtxids: Vec<Hash256> = (0..count)
        .map(|_| {
            let mut w = [0u8; 32];
            let b = input.take(32);
            w[..b.len()].copy_from_slice(b);
            Hash256(w)
        })
        .collect();
    let rest = input.take(usize::MAX);
    let (prefix, suffix) = rest.split_at(split.min(rest.len()));
    let reading = Reading::of(prefix, suffix);
    match DeclaredCoinbase::parse(prefix, suffix) {
        Ok(cb) => check_accepted(&cb, &reading, &wtxids, seed),
        Err(e) => check_refused(&e, &reading),
    }
}

fn check_refused(e: &CoinbaseError, reading: &Reading) {
    assert!(
        reading.accepted().is_none(),
        "a coinbase refused ({e}) that reads as a good one: {:?}",
        reading.candidate
    );
    let code = e.code();
    let details = e.to_string();
    assert!(
        COINBASE_CODES.contains(&code)
            || code == error_code::INVALID_JOB
            || code == error_code::INVALID_COINBASE_OUTPUTS,
        "{code}"
    );
    assert!(!details.is_empty() && details.len() < MESSAGE_BOUND);
    match e {
        CoinbaseError::NotCoinbase => {
            let (_, tx) = reading
                .candidate
                .as_ref()
                .expect("refused as no coinbase: it is a transaction");
            assert!(!tx.is_coinbase(), "a coinbase refused as not one: {tx:?}");
        }
        CoinbaseError::ExtranonceTooLong(n) => assert!(*n > MAX_EXTRANONCE),
        CoinbaseError::ScriptSigLength(n) => assert!(!(2..=100).contains(n)),
        CoinbaseError::InputCount(n) => assert_ne!(*n, 1),
        _ => {}
    }
}

fn check_accepted(cb: &DeclaredCoinbase, reading: &Reading, wtxids: &[Hash256], seed: u8) {
    let (n, tx) = reading
        .accepted()
        .unwrap_or_else(|| panic!("a coinbase accepted that does not read as one: {cb:?}"));
    assert_eq!(cb.extranonce_len, n, "extranonce length");
    assert_eq!(&cb.tx, tx, "the transaction");
    assert!(cb.extranonce_len <= MAX_EXTRANONCE);
    // Round trip: with zeros, then with any extranonce of that length.
    let mut zeros = cb.prefix.clone();
    zeros.resize(cb.prefix.len() + n, 0);
    zeros.extend_from_slice(&cb.suffix);
    assert_eq!(consensus::serialize(&cb.tx), zeros, "no round trip");
    let extranonce: Vec<u8> = (0..n)
        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(37)) | 1)
        .collect();
    let with = cb
        .with_extranonce(&extranonce)
        .expect("any extranonce of the declared length fits");
    let mut bytes = cb.prefix.clone();
    bytes.extend_from_slice(&extranonce);
    bytes.extend_from_slice(&cb.suffix);
    assert_eq!(consensus::serialize(&with), bytes);
    assert!(with.input[0].script_sig.as_bytes().ends_with(&extranonce));
    assert_eq!(with.output, cb.tx.output);
    assert_eq!(with.input[0].witness, cb.tx.input[0].witness);
    assert_eq!(with.input[0].sequence, cb.tx.input[0].sequence);
    assert_eq!(
        with.input[0].script_sig.len(),
        cb.tx.input[0].script_sig.len()
    );
    for wrong in [n + 1, n.wrapping_sub(1)] {
        if wrong <= 64 {
            assert!(cb.with_extranonce(&vec![7; wrong]).is_err());
        }
    }
    // What the parse says about the coinbase is BIP141's and BIP34's.
    assert_eq!(cb.info.witness_commitment, commitment(tx));
    assert_eq!(cb.info.witness_reserved_value, reserved_value(tx));
    assert_eq!(cb.has_commitment(), commitment(tx).is_some());
    assert_eq!(
        cb.info.height,
        parse_bip34_height(tx.input[0].script_sig.as_bytes())
    );
    // Witness data in a coinbase that commits to none makes every block with it invalid.
    if !cb.has_commitment() {
        assert!(
            cb.tx.input[0].witness.is_empty(),
            "a coinbase with witness data and no commitment accepted"
        );
    }
    let check = cb.check_commitment(wtxids);
    match (commitment(tx), reserved_value(tx)) {
        (Some(c), Some(r)) => {
            assert_eq!(check.is_ok(), witness_commitment(wtxids, &r) == c);
            assert!(cb.check_commitment(&[]).is_ok() == (witness_commitment(&[], &r) == c));
        }
        _ => assert!(check.is_ok()),
    }
    if let Err(e) = check {
        assert_eq!(e.code(), error_code::INVALID_JOB);
    }
    let payout = payout_script();
    assert_eq!(
        cb.pays(&payout),
        tx.output
            .iter()
            .any(|o| o.script_pubkey == payout && o.value > Amount::ZERO)
    );
    check_custom_job(cb, &extranonce);
}

/// The job a JDC sets on the pool for this coinbase, under the declared token the JDS would
/// issue for it: the pool takes those outputs and hashes the same coinbase.
fn check_custom_job(cb: &DeclaredCoinbase, extranonce: &[u8]) {
    static KEY_AND_ISSUER: OnceLock<(TokenKey, TokenIssuer)> = OnceLock::new();
    let (key, issuer) = KEY_AND_ISSUER.get_or_init(|| {
        (
            TokenKey::from_bytes(KEY),
            TokenIssuer::new(
                TokenKey::from_bytes(KEY),
                Duration::from_secs(600),
                UnixMillis(T0),
            ),
        )
    });
    let now = UnixMillis(T0);
    let token = issuer.declare(OutputsDigest::of(cb.outputs()), now);
    let script = cb.tx.input[0].script_sig.as_bytes();
    let m = SetCustomMiningJob {
        channel_id: 1,
        request_id: 1,
        token,
        version: 0x2000_0000,
        prev_hash: [0x11; 32],
        min_ntime: 1_700_000_000,
        nbits: 0x207f_ffff,
        coinbase_tx_version: cb.tx.version.0 as u32,
        coinbase_prefix: script[..script.len() - cb.extranonce_len].to_vec(),
        coinbase_tx_input_n_sequence: cb.tx.input[0].sequence.0,
        coinbase_tx_outputs: consensus::serialize(&cb.tx.output),
        coinbase_tx_locktime: cb.tx.lock_time.to_consensus_u32(),
        merkle_path: Vec::new(),
    };
    let tips = Arc::new(pool::tips::Tips::default());
    let cx = pool::sv2::custom_job::Context {
        key,
        unix_ms: now.0,
        latest: None,
        tips: &tips,
        extranonce_len: cb.extranonce_len,
    };
    match pool::sv2::custom_job::declared_job(&m, &cx, 1, pool::Timestamp::from_millis(0)) {
        Ok((job, claims)) => {
            assert_eq!(claims.outputs, OutputsDigest::of(cb.outputs()));
            let ours = cb.with_extranonce(extranonce).expect("fits");
            let theirs = job
                .coinbase
                .txid(extranonce)
                .expect("the channel's extranonce fits");
            assert_eq!(
                theirs,
                Hash256(ours.compute_txid().to_byte_array()),
                "the pool hashes another coinbase than the JDS declared"
            );
        }
        Err(r) => {
            // What the JDS does not check: the pool's own rules.
            let total = cb
                .outputs()
                .iter()
                .try_fold(Amount::ZERO, |a, o| a.checked_add(o.value));
            let allowed = (r.code == "invalid-job-param-value-coinbase_prefix"
                && parse_bip34_height(&m.coinbase_prefix).is_none())
                || (r.code == "invalid-job-param-value-coinbase_tx_outputs"
                    && (cb.outputs().is_empty() || total.is_none_or(|v| v > Amount::MAX_MONEY)));
            assert!(
                allowed,
                "the pool refuses a job the JDS would declare: {} ({})",
                r.code, r.why
            );
        }
    }
}

// ---- Coinbases and transactions the session harness declares ------------------------------

/// A small transaction, different for every `i`: even ones spend with witness data, odd ones
/// without.
fn family_tx(i: u8) -> Transaction {
    let segwit = i % 2 == 0;
    Transaction {
        version: Version::TWO,
        lock_time: LockTime::ZERO,
        input: vec![TxIn {
            previous_output: OutPoint {
                txid: Txid::from_byte_array([i.wrapping_add(1); 32]),
                vout: u32::from(i),
            },
            script_sig: if segwit {
                ScriptBuf::new()
            } else {
                ScriptBuf::from_bytes(vec![0x51])
            },
            sequence: Sequence::MAX,
            witness: if segwit {
                Witness::from_slice(&[vec![i; 72], vec![2; 33]])
            } else {
                Witness::new()
            },
        }],
        output: vec![TxOut {
            value: Amount::from_sat(10_000 + u64::from(i)),
            script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
        }],
    }
}

struct FamilyTx {
    tx: Arc<Transaction>,
    wtxid: Hash256,
    /// Serialized, and without its witness (another wtxid when it has one).
    bytes: Vec<u8>,
    stripped: Vec<u8>,
}

fn family() -> &'static [FamilyTx] {
    static FAMILY_TXS: OnceLock<Vec<FamilyTx>> = OnceLock::new();
    FAMILY_TXS.get_or_init(|| {
        (0..FAMILY as u8)
            .map(|i| {
                let tx = family_tx(i);
                let mut stripped = tx.clone();
                stripped.input[0].witness = Witness::new();
                FamilyTx {
                    wtxid: wtxid(&tx),
                    bytes: consensus::serialize(&tx),
                    stripped: consensus::serialize(&stripped),
                    tx: Arc::new(tx),
                }
            })
            .collect()
    })
}

// ---- Coinbases as a JDC declares them ------------------------------------------------------

/// A coinbase transaction: version 2, no lock time, one final input spending the null outpoint
/// with `script_sig` (the extranonce at its end) and `witness`, then `output`.
pub fn coinbase_tx(script_sig: Vec<u8>, witness: Witness, output: Vec<TxOut>) -> Transaction {
    Transaction {
        version: Version::TWO,
        lock_time: LockTime::ZERO,
        input: vec![TxIn {
            previous_output: OutPoint::null(),
            script_sig: ScriptBuf::from_bytes(script_sig),
            sequence: Sequence::MAX,
            witness,
        }],
        output,
    }
}

/// The coinbase a JDC builds on a template: the BIP34 `height` then `extranonce` in the
/// scriptSig, `value` to `payout`, and the witness commitment to `wtxids` under a zero reserved
/// value, which the input carries as its witness.
pub fn jdc_coinbase(
    height: u32,
    extranonce: &[u8],
    payout: ScriptBuf,
    value: u64,
    wtxids: &[Hash256],
) -> Transaction {
    let mut script = bip34_height_push(height);
    script.extend_from_slice(extranonce);
    let commitment = witness_commitment(wtxids, &[0; 32]);
    coinbase_tx(
        script,
        Witness::from_slice(&[[0u8; 32]]),
        vec![
            TxOut {
                value: Amount::from_sat(value),
                script_pubkey: payout,
            },
            TxOut {
                value: Amount::ZERO,
                script_pubkey: ScriptBuf::from_bytes(witness_commitment_script(commitment)),
            },
        ],
    )
}

/// `tx`, a coinbase whose scriptSig ends with an extranonce of `extranonce_len` bytes,
/// serialized (BIP141 fields kept when its input carries a witness) and split around that
/// extranonce, which neither part holds: `coinbase_tx_prefix` and `coinbase_tx_suffix`.
pub fn split_coinbase(tx: &Transaction, extranonce_len: usize) -> (Vec<u8>, Vec<u8>) {
    let segwit = tx.input.iter().any(|i| !i.witness.is_empty());
    let script = tx.input[0].script_sig.len();
    let bytes = consensus::serialize(tx);
    // Version, marker and flag, input count, outpoint, scriptSig length, the script up to
    // the extranonce.
    let at = 4 + if segwit { 2 } else { 0 } + 1 + 36 + compact_size::len(script as u64) + script
        - extranonce_len;
    (bytes[..at].to_vec(), bytes[at + extranonce_len..].to_vec())
}

/// `DeclareMiningJob` for a coinbase split around its extranonce ([`split_coinbase`]) and the
/// block's `wtxids`, at version 0x2000_0000 with no excess data.
pub fn declare_mining_job(
    request_id: u32,
    token: Vec<u8>,
    (prefix, suffix): (Vec<u8>, Vec<u8>),
    wtxids: &[Hash256],
) -> DeclareMiningJob {
    DeclareMiningJob {
        request_id,
        mining_job_token: token,
        version: 0x2000_0000,
        coinbase_tx_prefix: prefix,
        coinbase_tx_suffix: suffix,
        wtxid_list: wtxids.iter().map(|w| w.0).collect(),
        excess_data: Vec::new(),
    }
}

/// A declared coinbase as a JDC builds one, split around its extranonce, or broken in one way.
///
/// `cb`: bits 0-1 the witness commitment (none, the one for `wtxids`, one for other
/// transactions, the right one in a script one byte longer); bit 2 a witness reserved value
/// in the input; bits 3-4 the outputs (625 million sats to the pool, nothing to the pool,
/// everything elsewhere, two outputs to the pool adding up to over 2^64); bits 5-7 the
/// extranonce length (8, 4, 0, 32, 33, 1, 16, 12). `shape`: bits 0-5 the length of a tag
/// after the BIP34 height, bits 6-7 the height (812345, 0, 16, none: the scriptSig is the tag
/// and the extranonce). `mutate`: bits 0-2 none, the split one byte early or late, a flipped
/// byte, the suffix cut short, a byte appended, the whole coinbase in the suffix, the split
/// further late; bits 3-7 where or how much.
pub fn declared_coinbase(cb: u8, shape: u8, mutate: u8, wtxids: &[Hash256]) -> (Vec<u8>, Vec<u8>) {
    let extranonce = [8, 4, 0, 32, 33, 1, 16, 12][usize::from(cb >> 5)];
    let mut script = match shape >> 6 {
        0 => bip34_height_push(HEIGHT),
        1 => bip34_height_push(0),
        2 => bip34_height_push(16),
        _ => Vec::new(),
    };
    script.extend((0..shape & 63).map(|i| 0x2f ^ i));
    script.resize(script.len() + extranonce, 0);
    let mut outputs = match cb >> 3 & 3 {
        0 => vec![TxOut {
            value: Amount::from_sat(625_000_000),
            script_pubkey: payout_script(),
        }],
        1 => vec![TxOut {
            value: Amount::ZERO,
            script_pubkey: payout_script(),
        }],
        2 => vec![TxOut {
            value: Amount::from_sat(625_000_000),
            script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
        }],
        _ => vec![
            TxOut {
                value: Amount::from_sat(u64::MAX / 2 + 1),
                script_pubkey: payout_script(),
            };
            2
        ],
    };
    let commitment = match cb & 3 {
        0 => None,
        1 | 3 => Some(witness_commitment(wtxids, &[0; 32])),
        _ => Some(witness_commitment(&[Hash256([0xee; 32])], &[0; 32])),
    };
    if let Some(c) = commitment {
        let mut s = witness_commitment_script(c);
        if cb & 3 == 3 {
            s.push(0x51);
        }
        outputs.push(TxOut {
            value: Amount::ZERO,
            script_pubkey: ScriptBuf::from_bytes(s),
        });
    }
    let witness = if cb & 4 != 0 {
        Witness::from_slice(&[[0u8; 32]])
    } else {
        Witness::new()
    };
    // The extranonce ends the scriptSig; it is not sent.
    let (prefix, suffix) = split_coinbase(&coinbase_tx(script, witness, outputs), extranonce);
    let mut at = prefix.len();
    let mut bytes = [prefix, suffix].concat();
    let arg = usize::from(mutate >> 3);
    match mutate & 7 {
        1 => at = at.saturating_sub(1),
        2 => at += 1,
        3 => {
            let i = arg * 7 % bytes.len();
            bytes[i] ^= 1 << (mutate % 8);
        }
        4 => bytes.truncate(bytes.len().saturating_sub(arg + 1).max(at)),
        5 => bytes.push(mutate),
        6 => at = 0,
        7 => at += arg + 2,
        _ => {}
    }
    let at = at.min(bytes.len());
    let suffix = bytes.split_off(at);
    (bytes, suffix)
}

// ---- jds_session: the model -------------------------------------------------------------------

/// A declaration waiting for transactions, as the harness expects it.
#[derive(Clone, Debug)]
struct PendingModel {
    job: JobModel,
    wtxids: Vec<Hash256>,
    txs: Vec<Option<Arc<Transaction>>>,
    missing: Vec<u16>,
    deadline: u64,
    commits: bool,
    digest: OutputsDigest,
}

/// A declared job, as the harness expects the session to hold it.
#[derive(Clone, Debug)]
struct JobModel {
    request_id: u32,
    prefix: Vec<u8>,
    suffix: Vec<u8>,
    extranonce_len: usize,
    txs: Vec<Arc<Transaction>>,
}

/// How the connection ended, as far as the harness can tell.
#[derive(Clone, Debug, PartialEq)]
enum Ended {
    Setup(&'static str),
    Rate,
    Protocol,
}

impl Ended {
    fn matches(&self, c: &Close) -> bool {
        match (self, c) {
            (Ended::Setup(a), Close::Setup(b)) => a == b,
            (Ended::Rate, Close::Rate) => true,
            (Ended::Protocol, Close::Protocol(_)) => true,
            _ => false,
        }
    }
}

/// One connection: its session and what the harness expects of it.
struct Conn {
    s: Session,
    set_up: bool,
    ended: Option<Ended>,
    /// The allocation bucket: its level and when it was last taken from.
    level: f64,
    last: u64,
    pending: BTreeMap<u32, PendingModel>,
    declared: Option<JobModel>,
    stats: SessionStats,
}

/// What a message should bring.
enum Expect {
    /// Nothing; the connection ends for this reason (`None`: it stays).
    Silent(Option<Ended>),
    SetupOk,
    SetupRefused(&'static str, u32),
    /// `None`: the bucket is too close to one token to say whether it is allowed.
    Allocate(u32, Option<bool>),
    Refuse {
        request_id: u32,
        codes: &'static [&'static str],
        redeemed: Option<u64>,
    },
    Missing {
        request_id: u32,
        pending: PendingModel,
        redeemed: Option<u64>,
    },
    Declared {
        job: JobModel,
        digest: OutputsDigest,
        redeemed: Option<u64>,
    },
    /// The block to submit, or none (the solution dropped).
    Solution(Option<Block>),
}

/// Everything but the sessions: one JDS's configuration, token issuer and mempool, the
/// virtual clock, and what the harness knows of tokens.
struct World {
    cfg: Arc<JdsConfig>,
    key: TokenKey,
    tokens: Arc<TokenIssuer>,
    foreign: TokenIssuer,
    mempool: HashMap<Hash256, Arc<Transaction>>,
    now: u64,
    next_conn: u64,
    /// Every allocated and declared token handed out, oldest first.
    allocated: Vec<Vec<u8>>,
    declared: Vec<Vec<u8>>,
    /// The ids of every token handed out, and of the allocated ones redeemed.
    ids: HashSet<u64>,
    redeemed: HashSet<u64>,
}

impl World {
    /// Configuration byte `c`: bits 0-1 the allocation rate (10/s after 50, 1/s after 3, 0.5/s
    /// after 1, 1000/s after 8); bits 2-3 the missing-transactions timeout (10 s, 0, 1 s, 60
    /// s); bits 4-5 the declarations that may wait at once (16, 1, 2, 4); bits 6-7 the token
    /// lifetime (10 min, 1 s, 10 s, 0). Bits of `m` put the first eight transactions of the
    /// family in the mempool.
    fn new(c: u8, m: u8) -> World {
        let mut cfg = JdsConfig::new(payout_script());
        (cfg.allocations_per_second, cfg.allocation_burst) =
            [(10.0, 50.0), (1.0, 3.0), (0.5, 1.0), (1000.0, 8.0)][usize::from(c & 3)];
        cfg.missing_txs_timeout =
            [10_000, 0, 1_000, 60_000].map(Duration::from_millis)[usize::from(c >> 2 & 3)];
        cfg.max_pending_declarations = [16, 1, 2, 4][usize::from(c >> 4 & 3)];
        cfg.token_lifetime =
            [600_000, 1_000, 10_000, 0].map(Duration::from_millis)[usize::from(c >> 6)];
        let key = TokenKey::from_bytes(KEY);
        let tokens = Arc::new(TokenIssuer::new(
            key.clone(),
            cfg.token_lifetime,
            UnixMillis(T0),
        ));
        let foreign = TokenIssuer::new(
            TokenKey::from_bytes(FOREIGN_KEY),
            cfg.token_lifetime,
            UnixMillis(T0),
        );
        let mempool = family()[..8]
            .iter()
            .enumerate()
            .filter(|(i, _)| m >> i & 1 != 0)
            .map(|(_, f)| (f.wtxid, f.tx.clone()))
            .collect();
        World {
            cfg: Arc::new(cfg),
            key,
            tokens,
            foreign,
            mempool,
            now: T0,
            next_conn: 1,
            allocated: Vec::new(),
            declared: Vec::new(),
            ids: HashSet::new(),
            redeemed: HashSet::new(),
        }
    }

    fn connect(&mut self) -> Conn {
        let id = self.next_conn;
        self.next_conn += 1;
        Conn {
            s: Session::new(id, self.cfg.clone(), self.tokens.clone()),
            set_up: false,
            ended: None,
            level: self.cfg.allocation_burst,
            last: 0,
            pending: BTreeMap::new(),
            declared: None,
            stats: SessionStats::default(),
        }
    }

    /// What `m` should bring on `c`; the model of `c` moves on as far as the answer does not
    /// tell (the rest is `answered`'s).
    fn expect(&self, c: &mut Conn, m: &Message) -> Expect {
        use JobDeclaration as Jd;
        match (c.set_up, m) {
            (false, Message::Common(Common::SetupConnection(s))) => self.expect_setup(s),
            (true, Message::Common(Common::SetupConnection(_))) | (false, _) => {
                Expect::Silent(Some(Ended::Protocol))
            }
            (true, Message::JobDeclaration(Jd::AllocateMiningJobToken(a))) => {
                let elapsed = self.now.saturating_sub(c.last) as f64 / 1000.0;
                c.last = self.now;
                c.level = (c.level + elapsed * self.cfg.allocations_per_second)
                    .min(self.cfg.allocation_burst);
                let allow = if (c.level - 1.0).abs() < 1e-9 {
                    None
                } else {
                    Some(c.level >= 1.0)
                };
                Expect::Allocate(a.request_id, allow)
            }
            (true, Message::JobDeclaration(Jd::DeclareMiningJob(d))) => self.expect_declare(c, d),
            (true, Message::JobDeclaration(Jd::ProvideMissingTransactionsSuccess(p))) => {
                match c.pending.remove(&p.request_id) {
                    Some(pending) => self.expect_provided(p, pending),
                    None => Expect::Silent(None),
                }
            }
            (true, Message::JobDeclaration(Jd::PushSolution(s))) => {
                c.stats.solutions += 1;
                let block = c.declared.as_ref().and_then(|j| expected_block(j, s));
                if block.is_none() {
                    c.stats.solutions_dropped += 1;
                }
                Expect::Solution(block)
            }
            (true, _) => Expect::Silent(Some(Ended::Protocol)),
        }
    }

    fn expect_setup(&self, s: &SetupConnection) -> Expect {
        use common::error_code as e;
        let dtd = job_declaration_flags::DECLARE_TX_DATA;
        if s.protocol != common::protocol::JOB_DECLARATION {
            Expect::SetupRefused(e::UNSUPPORTED_PROTOCOL, 0)
        } else if s.min_version > PROTOCOL_VERSION || s.max_version < PROTOCOL_VERSION {
            Expect::SetupRefused(e::PROTOCOL_VERSION_MISMATCH, 0)
        } else if s.flags & !dtd != 0 {
            Expect::SetupRefused(e::UNSUPPORTED_FEATURE_FLAGS, s.flags & !dtd)
        } else if s.flags & dtd == 0 {
            Expect::SetupRefused(e::MISSING_DECLARE_TX_DATA_FLAG, 0)
        } else {
            Expect::SetupOk
        }
    }

    fn expect_declare(&self, c: &Conn, d: &DeclareMiningJob) -> Expect {
        let request_id = d.request_id;
        let refuse = |codes: &'static [&'static str], redeemed: Option<u64>| Expect::Refuse {
            request_id,
            codes,
            redeemed,
        };
        if c.pending.contains_key(&request_id)
            || c.pending.len() >= self.cfg.max_pending_declarations
        {
            return refuse(&[error_code::INVALID_JOB], None);
        }
        // The token: allocated by this JDS, unexpired, never redeemed.
        let claims = self
            .key
            .verify_kind(&d.mining_job_token, TokenKind::Allocated, self.now)
            .ok()
            .filter(|c| !self.redeemed.contains(&c.id));
        let Some(claims) = claims else {
            return refuse(&[error_code::INVALID_MINING_JOB_TOKEN], None);
        };
        let redeemed = Some(claims.id);
        let reading = Reading::of(&d.coinbase_tx_prefix, &d.coinbase_tx_suffix);
        let Some((n, tx)) = reading.accepted() else {
            return refuse(COINBASE_CODES, redeemed);
        };
        let payout = self.cfg.payout_script.clone();
        if !tx
            .output
            .iter()
            .any(|o| o.script_pubkey == payout && o.value > Amount::ZERO)
        {
            return refuse(&[error_code::INVALID_COINBASE_OUTPUTS], redeemed);
        }
        let wtxids: Vec<Hash256> = d.wtxid_list.iter().map(|w| Hash256(*w)).collect();
        if wtxids.iter().collect::<HashSet<_>>().len() != wtxids.len() {
            return refuse(&[error_code::INVALID_JOB], redeemed);
        }
        if let (Some(c), Some(r)) = (commitment(tx), reserved_value(tx)) {
            if witness_commitment(&wtxids, &r) != c {
                return refuse(&[error_code::INVALID_JOB], redeemed);
            }
        }
        let txs: Vec<Option<Arc<Transaction>>> = wtxids
            .iter()
            .map(|w| self.mempool.get(w).cloned())
            .collect();
        let missing: Vec<u16> = (0..txs.len())
            .filter(|&i| txs[i].is_none())
            .map(|i| i as u16)
            .collect();
        let pending = PendingModel {
            job: JobModel {
                request_id,
                prefix: d.coinbase_tx_prefix.clone(),
                suffix: d.coinbase_tx_suffix.clone(),
                extranonce_len: n,
                txs: Vec::new(),
            },
            wtxids,
            txs,
            missing,
            deadline: self
                .now
                .saturating_add(self.cfg.missing_txs_timeout.as_millis() as u64),
            commits: commitment(tx).is_some(),
            digest: OutputsDigest::of(&tx.output),
        };
        if pending.missing.is_empty() {
            finish(pending, redeemed)
        } else {
            Expect::Missing {
                request_id,
                pending,
                redeemed,
            }
        }
    }

    fn expect_provided(
        &self,
        p: &ProvideMissingTransactionsSuccess,
        mut pending: PendingModel,
    ) -> Expect {
        let refuse = |codes: &'static [&'static str]| Expect::Refuse {
            request_id: p.request_id,
            codes,
            redeemed: None,
        };
        if p.transaction_list.len() != pending.missing.len() {
            return refuse(&[error_code::MISSING_TXS]);
        }
        for (raw, &pos) in p.transaction_list.iter().zip(&pending.missing) {
            let Ok(tx) = consensus::deserialize::<Transaction>(raw) else {
                return refuse(&[error_code::INVALID_JOB]);
            };
            if wtxid(&tx) != pending.wtxids[usize::from(pos)] {
                return refuse(&[error_code::INVALID_JOB]);
            }
            pending.txs[usize::from(pos)] = Some(Arc::new(tx));
        }
        finish(pending, None)
    }

    /// Checks what a session sent for `m` against `expect`, and moves the model on.
    fn answered(&mut self, c: &mut Conn, expect: Expect, out: Vec<Output>) {
        assert!(out.len() <= 1, "{} outputs for one message", out.len());
        let sent: Vec<&Message> = out
            .iter()
            .filter_map(|o| match o {
                Output::Send(m) => Some(m),
                Output::SubmitBlock(_) => None,
            })
            .collect();
        for m in &sent {
            check_encodes(m);
        }
        use JobDeclaration as Jd;
        match expect {
            Expect::Silent(ended) => {
                assert!(out.is_empty(), "an answer where none is due: {out:?}");
                if ended.is_some() {
                    c.ended = ended;
                }
            }
            Expect::SetupOk => {
                assert_eq!(
                    sent,
                    [&Message::from(SetupConnectionSuccess {
                        used_version: PROTOCOL_VERSION,
                        flags: 0,
                    })]
                );
                c.set_up = true;
            }
            Expect::SetupRefused(code, flags) => {
                assert_eq!(
                    sent,
                    [&Message::from(SetupConnectionError {
                        flags,
                        error_code: code.into(),
                    })]
                );
                c.ended = Some(Ended::Setup(code));
            }
            Expect::Allocate(request_id, allow) => match &sent[..] {
                [Message::JobDeclaration(Jd::AllocateMiningJobTokenSuccess(s))] => {
                    assert_ne!(allow, Some(false), "an allocation over the rate");
                    assert_eq!(s.request_id, request_id);
                    let outputs: Vec<TxOut> = consensus::deserialize(&s.coinbase_outputs)
                        .expect("the pool's outputs, count-prefixed");
                    assert_eq!(
                        outputs,
                        [TxOut {
                            value: Amount::ZERO,
                            script_pubkey: self.cfg.payout_script.clone(),
                        }]
                    );
                    let claims = self.fresh_token(&s.mining_job_token, TokenKind::Allocated);
                    assert_eq!(claims.outputs, OutputsDigest::default());
                    self.allocated.push(s.mining_job_token.clone());
                    c.level -= 1.0;
                    c.stats.tokens_allocated += 1;
                }
                [] => {
                    assert!(out.is_empty(), "{out:?}");
                    assert_ne!(allow, Some(true), "an allocation within the rate refused");
                    c.ended = Some(Ended::Rate);
                }
                other => panic!("AllocateMiningJobToken answered with {other:?}"),
            },
            Expect::Refuse {
                request_id,
                codes,
                redeemed,
            } => {
                let [Message::JobDeclaration(Jd::DeclareMiningJobError(e))] = &sent[..] else {
                    panic!("expected DeclareMiningJob.Error ({codes:?}), got {out:?}")
                };
                assert_eq!(e.request_id, request_id);
                assert!(
                    codes.contains(&e.error_code.as_str()),
                    "{} where {codes:?} is due ({})",
                    e.error_code,
                    String::from_utf8_lossy(&e.error_details)
                );
                assert!(!e.error_details.is_empty());
                assert!(std::str::from_utf8(&e.error_details).is_ok());
                c.stats.jobs_refused += 1;
                self.redeem(redeemed);
            }
            Expect::Missing {
                request_id,
                pending,
                redeemed,
            } => {
                assert_eq!(
                    sent,
                    [&Message::from(ProvideMissingTransactions {
                        request_id,
                        unknown_tx_position_list: pending.missing.clone(),
                    })],
                    "ProvideMissingTransactions for the positions the mempool lacks"
                );
                c.stats.txs_requested += pending.missing.len() as u64;
                c.pending.insert(request_id, pending);
                self.redeem(redeemed);
            }
            Expect::Declared {
                job,
                digest,
                redeemed,
            } => {
                let [Message::JobDeclaration(Jd::DeclareMiningJobSuccess(s))] = &sent[..] else {
                    panic!("expected DeclareMiningJob.Success, got {out:?}")
                };
                assert_eq!(s.request_id, job.request_id);
                let claims = self.fresh_token(&s.new_mining_job_token, TokenKind::Declared);
                assert_eq!(claims.outputs, digest, "the declared token's outputs");
                self.declared.push(s.new_mining_job_token.clone());
                check_declared(&c.s, &job);
                c.declared = Some(job);
                c.stats.jobs_declared += 1;
                self.redeem(redeemed);
            }
            Expect::Solution(block) => match (&out[..], block) {
                ([], None) => {}
                ([Output::SubmitBlock(b)], Some(block)) => {
                    assert_eq!(b.hash.0, block.block_hash().to_byte_array());
                    assert!(b.meets_target);
                    assert_eq!(b.bytes, consensus::serialize(&block), "the block");
                    let coinbase = &block.txdata[0];
                    assert_eq!(
                        b.height,
                        parse_bip34_height(coinbase.input[0].script_sig.as_bytes()),
                        "the height a block is reported at is not its coinbase's"
                    );
                    assert!(block.check_merkle_root());
                    assert!(
                        block.check_witness_commitment(),
                        "a block whose witness commitment is wrong"
                    );
                }
                (out, block) => panic!(
                    "PushSolution: {out:?} where {} is due",
                    if block.is_some() {
                        "a block"
                    } else {
                        "nothing"
                    }
                ),
            },
        }
    }

    /// A token just handed out: this JDS's, of `kind`, unexpired, valid for the lifetime,
    /// never seen before.
    fn fresh_token(&mut self, token: &[u8], kind: TokenKind) -> TokenClaims {
        let claims = self
            .key
            .verify_kind(token, kind, self.now)
            .expect("a token just issued verifies");
        assert_eq!(
            claims.expires_ms,
            self.now + self.cfg.token_lifetime.as_millis() as u64
        );
        assert!(self.ids.insert(claims.id), "token id {} twice", claims.id);
        claims
    }

    fn redeem(&mut self, id: Option<u64>) {
        if let Some(id) = id {
            assert!(self.redeemed.insert(id), "token {id} accepted twice");
        }
    }

    /// A tick on `c`: declarations past their deadline refused, lowest request id first.
    fn tick(&mut self, c: &mut Conn) {
        let before = c.pending.len();
        let late: Vec<u32> = c
            .pending
            .iter()
            .filter(|(_, p)| self.now > p.deadline)
            .map(|(id, _)| *id)
            .collect();
        c.s.handle_tick(UnixMillis(self.now));
        let out = drain(&mut c.s);
        assert!(out.len() <= before, "a tick wrote {} outputs", out.len());
        assert_eq!(out.len(), late.len(), "refusals on a tick: {out:?}");
        for (o, id) in out.iter().zip(late) {
            let Output::Send(m) = o else {
                panic!("a tick submitted a block")
            };
            check_encodes(m);
            let Message::JobDeclaration(JobDeclaration::DeclareMiningJobError(e)) = m else {
                panic!("a tick sent {m:?}")
            };
            assert_eq!(
                (e.request_id, e.error_code.as_str()),
                (id, error_code::MISSING_TXS)
            );
            c.pending.remove(&id);
            c.stats.jobs_refused += 1;
        }
    }

    /// A connection's state as the model has it.
    fn check(&self, c: &mut Conn) {
        assert!(drain(&mut c.s).is_empty(), "output left behind");
        assert_eq!(c.s.stats(), c.stats, "statistics");
        assert_eq!(c.s.pending_count(), c.pending.len(), "pending declarations");
        assert!(c.pending.len() <= self.cfg.max_pending_declarations);
        assert_eq!(
            c.s.last_declared().map(|j| j.request_id),
            c.declared.as_ref().map(|j| j.request_id)
        );
        match (&c.ended, c.s.wants_close()) {
            (None, None) => {}
            (Some(e), Some(close)) if e.matches(close) => {}
            (e, close) => panic!("the connection should have ended {e:?}, wants {close:?}"),
        }
    }
}

/// Every transaction is known: the declared job, or a refusal when witness data comes without
/// a commitment.
fn finish(p: PendingModel, redeemed: Option<u64>) -> Expect {
    let txs: Vec<Arc<Transaction>> = p.txs.into_iter().map(|t| t.expect("all known")).collect();
    if !p.commits
        && txs
            .iter()
            .any(|t| t.input.iter().any(|i| !i.witness.is_empty()))
    {
        return Expect::Refuse {
            request_id: p.job.request_id,
            codes: &[error_code::INVALID_COINBASE_TX],
            redeemed,
        };
    }
    Expect::Declared {
        job: JobModel { txs, ..p.job },
        digest: p.digest,
        redeemed,
    }
}

/// The session's most recent declared job is `job`, and it can be a valid block as far as
/// witness data goes.
fn check_declared(s: &Session, job: &JobModel) {
    let d = s.last_declared().expect("a declared job");
    assert_eq!(d.request_id, job.request_id);
    assert_eq!(d.coinbase.prefix, job.prefix);
    assert_eq!(d.coinbase.suffix, job.suffix);
    assert_eq!(d.coinbase.extranonce_len, job.extranonce_len);
    assert_eq!(d.txs, job.txs, "the declared transactions, in order");
    let txids: Vec<Hash256> = job
        .txs
        .iter()
        .map(|t| Hash256(t.compute_txid().to_byte_array()))
        .collect();
    assert_eq!(d.txids, txids);
    let mut txdata = vec![d.coinbase.tx.clone()];
    txdata.extend(job.txs.iter().map(|t| Transaction::clone(t)));
    let block = Block {
        header: Header {
            version: BlockVersion::from_consensus(0x2000_0000),
            prev_blockhash: BlockHash::all_zeros(),
            merkle_root: TxMerkleNode::all_zeros(),
            time: 0,
            bits: CompactTarget::from_consensus(0x207f_ffff),
            nonce: 0,
        },
        txdata,
    };
    assert!(
        block.check_witness_commitment(),
        "a declared job that no block can carry (witness data without its commitment)"
    );
}

/// The block a solution on `job` makes, if it fits the job and meets its nBits.
fn expected_block(job: &JobModel, s: &PushSolution) -> Option<Block> {
    if s.extranonce.len() != job.extranonce_len {
        return None;
    }
    let mut bytes = job.prefix.clone();
    bytes.extend_from_slice(&s.extranonce);
    bytes.extend_from_slice(&job.suffix);
    let coinbase: Transaction =
        consensus::deserialize(&bytes).expect("a declared coinbase parses with any extranonce");
    let mut txdata = vec![coinbase];
    txdata.extend(job.txs.iter().map(|t| Transaction::clone(t)));
    let mut block = Block {
        header: Header {
            version: BlockVersion::from_consensus(s.version as i32),
            prev_blockhash: BlockHash::from_byte_array(s.prev_hash),
            merkle_root: TxMerkleNode::all_zeros(),
            time: s.ntime,
            bits: CompactTarget::from_consensus(s.nbits),
            nonce: s.nonce,
        },
        txdata,
    };
    block.header.merkle_root = block.compute_merkle_root().expect("transactions");
    block
        .header
        .validate_pow(block.header.target())
        .is_ok()
        .then_some(block)
}

/// A message a session sends encodes within its bound and decodes back.
fn check_encodes(m: &Message) {
    let mut payload = Vec::new();
    let t = m
        .encode(&mut payload)
        .unwrap_or_else(|e| panic!("{} does not encode: {e}", m.name()));
    let bound = match m {
        Message::JobDeclaration(JobDeclaration::ProvideMissingTransactions(p)) => {
            16 + 2 * p.unknown_tx_position_list.len()
        }
        _ => MESSAGE_BOUND,
    };
    assert!(
        payload.len() <= bound,
        "{} of {} bytes",
        m.name(),
        payload.len()
    );
    let back = Message::decode(t, &mut payload).expect("decodes");
    assert_eq!(&back, m);
}

// ---- jds_session: the steps -------------------------------------------------------------------

struct Run {
    world: World,
    conns: [Option<Conn>; 2],
}

/// Fuzz entry for the JDS session.
///
/// Two configuration bytes (see `World::new`), then steps. Operation byte: bit 7 the
/// connection (two share one JDS); low four bits: 0 a raw message (type, length byte,
/// payload; one that does not decode ends the connection, as the shell does); 1
/// `SetupConnection` (a selector byte, see `setup`); 2 `AllocateMiningJobToken` (request id,
/// user); 3-5 `DeclareMiningJob` (see `declare`); 6-7 `ProvideMissingTransactionsSuccess` (see
/// `provide`); 8 `PushSolution` (see `push`); 9 a message a JDS never receives (a selector
/// byte); 10-11 a clock step (two bytes: the low 15 bits, in seconds when the top one is set,
/// else in milliseconds; back in time when the operation's bit 4 is set) and a tick on every
/// connection; 12-13 a mempool change (a byte: the top bit removes, else adds, transaction
/// `& 15`; 0xff empties it); 14 the connection hangs up; 15 the end. A message to a
/// connection that ended (or never was) opens a new one (after checking that the ended
/// session ignores it).
pub fn jds_session(data: &[u8]) {
    let mut input = Input::new(data);
    let (c, m) = (input.u8(), input.u8());
    let mut run = Run {
        world: World::new(c, m),
        conns: [None, None],
    };
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        let op = input.u8();
        let slot = usize::from(op >> 7);
        match op & 15 {
            op::RAW => {
                let t = input.u8();
                let len = usize::from(input.u8());
                let mut payload = input.take(len).to_vec();
                match Message::decode(t, &mut payload) {
                    Ok(m) => run.deliver(slot, m),
                    // The shell ends the connection.
                    Err(_) => run.conns[slot] = None,
                }
            }
            op::SETUP => {
                let m = setup(input.u8());
                run.send(slot, m);
            }
            op::ALLOCATE => {
                let (request_id, user) = (input.u8(), input.u8());
                let m = AllocateMiningJobToken {
                    user_identifier: ["farm", "", "é", "x"][usize::from(user & 3)]
                        .repeat(1 + usize::from(user >> 2)),
                    request_id: u32::from(request_id),
                };
                run.send(slot, m.into());
            }
            3..=5 => {
                let m = run.declare(&mut input);
                run.send(slot, m.into());
            }
            6 | 7 => {
                let (sel, mode) = (input.u8(), input.u8());
                let m = run.provide(slot, sel, mode);
                run.send(slot, m.into());
            }
            op::PUSH => {
                let m = run.push(slot, &mut input);
                run.send(slot, m.into());
            }
            op::UNEXPECTED => {
                let m = unexpected(input.u8());
                run.send(slot, m);
            }
            10 | 11 => {
                let v = input.u16();
                let n = u64::from(v & 0x7fff) * if v & 0x8000 != 0 { 1000 } else { 1 };
                let w = &mut run.world;
                w.now = if op & op::BACK != 0 {
                    w.now.saturating_sub(n)
                } else {
                    w.now.saturating_add(n)
                };
                for c in run.conns.iter_mut().flatten() {
                    if c.ended.is_none() {
                        w.tick(c);
                    }
                }
            }
            12 | 13 => {
                let b = input.u8();
                let mempool = &mut run.world.mempool;
                if b == 0xff {
                    mempool.clear();
                } else {
                    let f = &family()[usize::from(b & 15)];
                    if b & 0x80 != 0 {
                        mempool.remove(&f.wtxid);
                    } else {
                        mempool.insert(f.wtxid, f.tx.clone());
                    }
                }
            }
            op::HANG_UP => run.conns[slot] = None,
            _ => break,
        }
        for c in run.conns.iter_mut().flatten() {
            run.world.check(c);
        }
        assert_eq!(
            run.world.tokens.redeemed_count(),
            run.world.redeemed.len(),
            "redeemed tokens remembered"
        );
    }
}

/// `SetupConnection` of selector `b`: bits 0-1 the protocol (job declaration, mining, template
/// distribution, 7), bits 2-3 the versions (2, 1 to 3, 3 to 4, 0 to 1), bit 4 no
/// `DECLARE_TX_DATA`, bits 5-7 unknown flags.
fn setup(b: u8) -> Message {
    let (min_version, max_version) = [(2, 2), (1, 3), (3, 4), (0, 1)][usize::from(b >> 2 & 3)];
    let mut flags = if b & 0x10 != 0 {
        0
    } else {
        job_declaration_flags::DECLARE_TX_DATA
    };
    for (bit, flag) in [(0x20, 1 << 1), (0x40, 1 << 2), (0x80, 1 << 31)] {
        if b & bit != 0 {
            flags |= flag;
        }
    }
    SetupConnection {
        min_version,
        max_version,
        flags,
        endpoint_host: "127.0.0.1".into(),
        endpoint_port: 34264,
        vendor: "fuzz-jdc".into(),
        ..SetupConnection::new(
            [
                common::protocol::JOB_DECLARATION,
                common::protocol::MINING,
                2,
                7,
            ][usize::from(b & 3)],
        )
    }
    .into()
}

/// A message a JDS never receives: what it sends, other protocols' messages.
fn unexpected(b: u8) -> Message {
    match b % 7 {
        0 => AllocateMiningJobTokenSuccess {
            request_id: 1,
            mining_job_token: vec![1; 49],
            coinbase_outputs: vec![0],
        }
        .into(),
        1 => DeclareMiningJobSuccess {
            request_id: 1,
            new_mining_job_token: vec![2; 49],
        }
        .into(),
        2 => DeclareMiningJobError {
            request_id: 1,
            error_code: "invalid-job".into(),
            error_details: Vec::new(),
        }
        .into(),
        3 => ProvideMissingTransactions {
            request_id: 1,
            unknown_tx_position_list: vec![0],
        }
        .into(),
        4 => SetupConnectionSuccess {
            used_version: 2,
            flags: 0,
        }
        .into(),
        5 => CloseChannel {
            channel_id: 1,
            reason_code: "bye".into(),
        }
        .into(),
        _ => {
            if b & 0x80 != 0 {
                ChannelEndpointChanged { channel_id: 1 }.into()
            } else {
                RequestTransactionData { template_id: 1 }.into()
            }
        }
    }
}

impl Run {
    /// `m` as a client sends it: encoded and decoded on the way (one too long for the wire
    /// cannot be sent).
    fn send(&mut self, slot: usize, m: Message) {
        let mut payload = Vec::new();
        let Ok(t) = m.encode(&mut payload) else {
            return;
        };
        let back = Message::decode(t, &mut payload).expect("what encodes decodes");
        assert_eq!(back, m, "a message changed on the wire");
        self.deliver(slot, back);
    }

    fn deliver(&mut self, slot: usize, m: Message) {
        let w = &mut self.world;
        let now = UnixMillis(w.now);
        // An ended connection reads nothing more: a frame already read changes nothing.
        if let Some(c) = &mut self.conns[slot] {
            if c.ended.is_some() {
                c.s.handle_message(m.clone(), now, &w.mempool);
                assert!(drain(&mut c.s).is_empty(), "an ended connection answered");
                w.check(c);
                self.conns[slot] = None;
            }
        }
        if self.conns[slot].is_none() {
            self.conns[slot] = Some(w.connect());
        }
        let c = self.conns[slot].as_mut().expect("connected");
        let expect = w.expect(c, &m);
        c.s.handle_message(m, now, &w.mempool);
        let out = drain(&mut c.s);
        w.answered(c, expect, out);
    }

    /// A token for a declaration, selector `t`: bits 0-2 the newest allocated one (0, 7), an
    /// older one (perhaps used: `t >> 3` back), the newest altered in one bit, a declared one,
    /// one under another key, none, bytes of length `t >> 3`.
    fn token(&self, t: u8) -> Vec<u8> {
        let w = &self.world;
        let newest = || w.allocated.last().cloned().unwrap_or_default();
        let arg = usize::from(t >> 3);
        match t & 7 {
            1 => {
                let n = w.allocated.len();
                if n == 0 {
                    Vec::new()
                } else {
                    w.allocated[n - 1 - arg % n].clone()
                }
            }
            2 => {
                let mut tok = newest();
                if !tok.is_empty() {
                    let i = arg % tok.len();
                    tok[i] ^= 1 << (t % 8);
                }
                tok
            }
            3 => w.declared.last().cloned().unwrap_or_default(),
            4 => w.foreign.allocate(UnixMillis(w.now)),
            5 => Vec::new(),
            6 => vec![t; arg],
            _ => newest(),
        }
    }

    /// `DeclareMiningJob`: request id, token selector (see `token`), coinbase bytes `cb`,
    /// `shape` and `mutate` (see [`declared_coinbase`]), a count of wtxids (`& 7`) and a
    /// selector byte for each: below 0xf0 the family's transaction `& 15` (in the mempool or
    /// not), 0xfe the one before again, else a made-up wtxid.
    fn declare(&mut self, input: &mut Input<'_>) -> DeclareMiningJob {
        let request_id = u32::from(input.u8());
        let token = self.token(input.u8());
        let (cb, shape, mutate) = (input.u8(), input.u8(), input.u8());
        let n = input.u8() & 7;
        let mut wtxids: Vec<Hash256> = Vec::new();
        for _ in 0..n {
            let s = input.u8();
            let w = match s {
                0..=0xef => family()[usize::from(s & 15)].wtxid,
                0xfe => wtxids.last().copied().unwrap_or(Hash256([0xfe; 32])),
                _ => Hash256([s; 32]),
            };
            wtxids.push(w);
        }
        let coinbase = declared_coinbase(cb, shape, mutate, &wtxids);
        declare_mining_job(request_id, token, coinbase, &wtxids)
    }

    /// `ProvideMissingTransactionsSuccess` for the pending declaration `sel` (modulo one more
    /// than there are: the last is a request id with none pending), `mode`: 0 and 7 the
    /// transactions asked for, 1 one fewer, 2 one more, 3 another transaction first, 4 bytes
    /// that are no transaction first, 5 in reverse order, 6 without their witnesses.
    fn provide(&self, slot: usize, sel: u8, mode: u8) -> ProvideMissingTransactionsSuccess {
        let pending: Vec<(u32, &PendingModel)> = self.conns[slot]
            .as_ref()
            .map(|c| c.pending.iter().map(|(id, p)| (*id, p)).collect())
            .unwrap_or_default();
        let k = usize::from(sel) % (pending.len() + 1);
        let Some(&(request_id, p)) = pending.get(k) else {
            return ProvideMissingTransactionsSuccess {
                request_id: 1000 + u32::from(sel),
                transaction_list: vec![family()[0].bytes.clone()],
            };
        };
        let by_wtxid = |w: &Hash256| family().iter().find(|f| f.wtxid == *w);
        let mut list: Vec<Vec<u8>> = p
            .missing
            .iter()
            .map(|&pos| {
                let w = &p.wtxids[usize::from(pos)];
                match by_wtxid(w) {
                    Some(f) if mode & 7 == 6 => f.stripped.clone(),
                    Some(f) => f.bytes.clone(),
                    None => w.0.to_vec(),
                }
            })
            .collect();
        match mode & 7 {
            1 => {
                list.pop();
            }
            2 => list.push(family()[usize::from(mode >> 3 & 15)].bytes.clone()),
            3 => {
                if let Some(first) = list.first_mut() {
                    *first = family()[usize::from(mode >> 3 & 15)].bytes.clone();
                }
            }
            4 => {
                if let Some(first) = list.first_mut() {
                    *first = vec![mode; usize::from(mode >> 3)];
                }
            }
            5 => list.reverse(),
            _ => {}
        }
        ProvideMissingTransactionsSuccess {
            request_id,
            transaction_list: list,
        }
    }

    /// `PushSolution` on the connection's last declared job: an extranonce selector (`& 3`: 0
    /// and 3 the job's length, 1 a byte more, 2 a byte fewer; the other bits seed its bytes),
    /// an nBits selector (0 regtest's: about every second hash meets it; 1 mainnet's
    /// difficulty 1: none does; 2 four more bytes, as they come; 3 a huge exponent), a
    /// previous block byte, the nonce (four bytes).
    fn push(&self, slot: usize, input: &mut Input<'_>) -> PushSolution {
        let (e, bits, prev) = (input.u8(), input.u8(), input.u8());
        let nbits = match bits & 3 {
            0 => 0x207f_ffff,
            1 => 0x1d00_ffff,
            2 => input.u32(),
            _ => 0xff7f_ffff,
        };
        let nonce = input.u32();
        let len = self.conns[slot]
            .as_ref()
            .and_then(|c| c.declared.as_ref())
            .map_or(8, |j| j.extranonce_len);
        let len = match e & 3 {
            1 => len + 1,
            2 => len.saturating_sub(1),
            _ => len,
        };
        PushSolution {
            extranonce: (0..len)
                .map(|i| (e >> 2).wrapping_mul(i as u8 + 1))
                .collect(),
            prev_hash: [prev; 32],
            nonce,
            ntime: 1_750_000_000,
            nbits,
            version: 0x2000_0000,
        }
    }
}

/// Writers of scripts for [`jds_session`] and inputs for [`jds_coinbase`], so that seeds and
/// regression inputs spell out steps rather than bytes.
pub mod script {
    use super::op;

    /// A [`super::jds_session`] script.
    #[derive(Clone, Debug)]
    pub struct JdsScript {
        bytes: Vec<u8>,
        conn: u8,
    }

    impl JdsScript {
        /// Configuration bytes: the JDS's and the mempool's (see `World::new`).
        pub fn new(config: u8, mempool: u8) -> Self {
            JdsScript {
                bytes: vec![config, mempool],
                conn: 0,
            }
        }

        /// The script's bytes, the input [`super::jds_session`] takes.
        pub fn build(self) -> Vec<u8> {
            self.bytes
        }

        /// The steps after this go to connection `conn` (0 or 1).
        pub fn on(mut self, conn: u8) -> Self {
            self.conn = if conn != 0 { op::CONN1 } else { 0 };
            self
        }

        fn op(mut self, op: u8, args: &[u8]) -> Self {
            self.bytes.push(op | self.conn);
            self.bytes.extend_from_slice(args);
            self
        }

        /// A message's payload as the wire carries it (at most 255 bytes).
        pub fn raw(self, msg_type: u8, payload: &[u8]) -> Self {
            assert!(payload.len() < 256);
            let mut args = vec![msg_type, payload.len() as u8];
            args.extend_from_slice(payload);
            self.op(op::RAW, &args)
        }

        /// `m` encoded, as [`JdsScript::raw`].
        pub fn raw_message(self, m: &sv2::Message) -> Self {
            let mut payload = Vec::new();
            let t = m.encode(&mut payload).expect("encodes");
            self.raw(t, &payload)
        }

        /// `SetupConnection` of selector `sel` (0: job declaration, version 2,
        /// `DECLARE_TX_DATA`).
        pub fn setup(self, sel: u8) -> Self {
            self.op(op::SETUP, &[sel])
        }

        /// `AllocateMiningJobToken` with request id `request_id`.
        pub fn allocate(self, request_id: u8) -> Self {
            self.op(op::ALLOCATE, &[request_id, 0])
        }

        /// `DeclareMiningJob` with request id `req`, token selector `token` (0 the newest
        /// allocated), coinbase selectors (see [`super::declared_coinbase`]; `(5, 0, 0)`: a
        /// segwit coinbase committing to the wtxids) and wtxid selectors (0-15 the family's
        /// transactions).
        pub fn declare(self, req: u8, token: u8, coinbase: (u8, u8, u8), wtxids: &[u8]) -> Self {
            assert!(wtxids.len() < 8);
            let mut args = vec![req, token, coinbase.0, coinbase.1, coinbase.2];
            args.push(wtxids.len() as u8);
            args.extend_from_slice(wtxids);
            self.op(op::DECLARE, &args)
        }

        /// `ProvideMissingTransactionsSuccess` for pending declaration `sel` in `mode` (0: the
        /// transactions asked for).
        pub fn provide(self, sel: u8, mode: u8) -> Self {
            self.op(op::PROVIDE, &[sel, mode])
        }

        /// `PushSolution` with extranonce selector `e`, nBits selector `bits` and `nonce`.
        pub fn push(self, e: u8, bits: u8, nonce: u32) -> Self {
            let mut args = vec![e, bits, 0x11];
            if bits & 3 == 2 {
                args.extend_from_slice(&0x207f_ffffu32.to_le_bytes());
            }
            args.extend_from_slice(&nonce.to_le_bytes());
            self.op(op::PUSH, &args)
        }

        /// A message a JDS never receives, picked by `which`.
        pub fn unexpected(self, which: u8) -> Self {
            self.op(op::UNEXPECTED, &[which])
        }

        /// A clock step of `ms` milliseconds (at most 32767), then a tick.
        pub fn tick_ms(self, ms: u16) -> Self {
            self.op(op::CLOCK, &(ms & 0x7fff).to_le_bytes())
        }

        /// A clock step of `s` seconds (at most 32767), then a tick.
        pub fn tick_s(self, s: u16) -> Self {
            self.op(op::CLOCK, &(s & 0x7fff | 0x8000).to_le_bytes())
        }

        /// The clock goes back `s` seconds, then a tick.
        pub fn back_s(self, s: u16) -> Self {
            self.op(op::CLOCK | op::BACK, &(s & 0x7fff | 0x8000).to_le_bytes())
        }

        /// Transaction `tx` of the family enters the mempool (`remove`: leaves it).
        pub fn mempool(self, tx: u8, remove: bool) -> Self {
            self.op(op::MEMPOOL, &[tx & 15 | if remove { 0x80 } else { 0 }])
        }

        /// The connection closes.
        pub fn hang_up(self) -> Self {
            self.op(op::HANG_UP, &[])
        }

        /// The script ends here; the bytes after are not read.
        pub fn end(self) -> Self {
            self.op(op::END, &[])
        }
    }

    /// A [`super::jds_coinbase`] input: the coinbase `prefix || suffix`, the wtxids to check
    /// its commitment against, an extranonce seed.
    pub fn coinbase_input(prefix: &[u8], suffix: &[u8], wtxids: &[[u8; 32]], seed: u8) -> Vec<u8> {
        assert!(wtxids.len() < 8);
        let mut v = (prefix.len() as u16).to_le_bytes().to_vec();
        v.push(wtxids.len() as u8);
        v.push(seed);
        for w in wtxids {
            v.extend_from_slice(w);
        }
        v.extend_from_slice(prefix);
        v.extend_from_slice(suffix);
        v
    }
}
