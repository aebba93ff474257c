//! A farm's declared job (`SetCustomMiningJob`, spec 5.3.18) checked and turned into a pool
//! [`Job`], sans-IO.
//!
//! The pool cannot check the job's transactions (it never sees them): its Job Declarator Server
//! did, and vouches for the job with a Declared token (see [`crate::jd_token`]) that commits to
//! the coinbase outputs it checked. The pool checks the token, that the outputs are those, and
//! that the header fields are plausible; then it accounts shares on the job like any other.
//!
//! The coinbase is built as the reference pool builds it from the same message, so that the
//! farm's miners and the pool hash the same transaction: scriptSig = `coinbase_prefix` followed
//! by the channel's whole extranonce (prefix and the miner's part, no push opcode), outputs
//! from `coinbase_tx_outputs`, which mining_sv2 12 and the spec send as a CompactSize-prefixed
//! array of consensus-serialized outputs (channels_sv2 8 writes and reads a `Vec<TxOut>`).

use std::sync::Arc;

use ::sv2::messages::mining::{error_code, SetCustomMiningJob};
use events::fingerprint;
use primitives::bitcoin::consensus::{Decodable, Encodable};
use primitives::bitcoin::{Amount, TxOut};
use primitives::coinbase::parse_bip34_height;
use primitives::{compact_size, CoinbaseParts, CompactTarget, Hash256, Target};

use crate::jd_token::{OutputsDigest, TokenClaims, TokenKey, TokenKind};
use crate::job::Job;
use crate::jobs::Generation;
use crate::template::Template;
use crate::tips::Tips;
use crate::Timestamp;

/// `SetCustomMiningJob.Error` when the pool does not take declared jobs on this connection
/// (no token key, or the connection did not set `REQUIRES_WORK_SELECTION`): the reference
/// pool's code, which its Job Declarator Client knows.
pub const JD_NOT_SUPPORTED: &str = "jd-not-supported";

/// The spec's `invalid-job-param-value-{}`, `{}` a field name of `SetCustomMiningJob`.
pub fn invalid_param(field: &str) -> String {
    format!("invalid-job-param-value-{field}")
}

/// The longest merkle path a block can need: 4,000,000 weight units hold at most 16,666
/// transactions of the smallest kind (60 bytes, 240 units), and 2^15 leaves cover that.
pub const MAX_MERKLE_PATH: usize = 15;

/// Bitcoin's `MAX_FUTURE_BLOCK_TIME`: how far past the node's clock a header's time may be.
const MAX_FUTURE_BLOCK_TIME: u32 = 2 * 60 * 60;

/// The witness commitment output's script starts with these bytes (BIP141).
const WITNESS_COMMITMENT_HEADER: [u8; 6] = [0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed];

/// Why a declared job was refused: the code for `SetCustomMiningJob.Error`, and words for the
/// log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The `SetCustomMiningJob.Error` error code.
    pub code: String,
    /// What was wrong, for the log.
    pub why: String,
}

impl Refusal {
    fn new(code: impl Into<String>, why: impl Into<String>) -> Refusal {
        Refusal {
            code: code.into(),
            why: why.into(),
        }
    }

    fn param(field: &str, why: impl Into<String>) -> Refusal {
        Refusal::new(invalid_param(field), why)
    }
}

/// What the checks compare a declared job against.
pub struct Context<'a> {
    /// The key the JDS's declared tokens are checked under.
    pub key: &'a TokenKey,
    /// Wall-clock Unix milliseconds (token expiry).
    pub unix_ms: u64,
    /// The pool's latest generation: its tip, height, nBits and node clock.
    pub latest: Option<&'a Generation>,
    /// The previous-block hashes the pool has worked on (to refuse a job on a stale one).
    pub tips: &'a Arc<Tips>,
    /// Bytes of the channel's whole extranonce (its prefix and the miner's part).
    pub extranonce_len: usize,
}

/// The coinbase outputs as `coinbase_tx_outputs` carries them: a CompactSize count, then each
/// output; nothing may follow.
pub fn decode_outputs(bytes: &[u8]) -> Option<Vec<TxOut>> {
    let mut rest = bytes;
    let outputs = Vec::<TxOut>::consensus_decode(&mut rest).ok()?;
    rest.is_empty().then_some(outputs)
}

/// Checks `m` and builds its job under `id`, with the claims of the token it came under. The checks run from who may declare to what:
/// token, outputs, header fields, coinbase, merkle path.
pub fn declared_job(
    m: &SetCustomMiningJob,
    cx: &Context<'_>,
    id: u64,
    now: Timestamp,
) -> Result<(Job, TokenClaims), Refusal> {
    let claims = cx
        .key
        .verify_kind(&m.token, TokenKind::Declared, cx.unix_ms)
        .map_err(|e| Refusal::new(error_code::INVALID_MINING_JOB_TOKEN, e.to_string()))?;

    let outputs = decode_outputs(&m.coinbase_tx_outputs).ok_or_else(|| {
        Refusal::param(
            "coinbase_tx_outputs",
            "not a CompactSize-prefixed array of outputs",
        )
    })?;
    if outputs.is_empty() {
        return Err(Refusal::param("coinbase_tx_outputs", "no outputs"));
    }
    if OutputsDigest::of(&outputs) != claims.outputs {
        return Err(Refusal::param(
            "coinbase_tx_outputs",
            "outputs differ from those the token was declared with",
        ));
    }
    let value = outputs
        .iter()
        .try_fold(Amount::ZERO, |sum, o| sum.checked_add(o.value))
        .filter(|v| *v <= Amount::MAX_MONEY)
        .ok_or_else(|| Refusal::param("coinbase_tx_outputs", "outputs pay more than exists"))?;

    let prev_hash = Hash256(m.prev_hash);
    // The pool's own template on the same block, when it has one: the job must agree with it.
    let same_tip = cx
        .latest
        .filter(|g| g.template.prev_hash == prev_hash)
        .map(|g| &g.template);

    // BIP9 (and BIP320's rolling) keep the top three bits at 001.
    if m.version >> 29 != 0b001 {
        return Err(Refusal::param(
            "version",
            format!("{:#010x} is not a BIP9 version", m.version),
        ));
    }

    let bits = CompactTarget::from_consensus(m.nbits);
    match Target::from_compact(bits) {
        Ok(t) if !t.is_zero() => {}
        _ => {
            return Err(Refusal::param(
                "nbits",
                format!("{:#010x} is no target", m.nbits),
            ))
        }
    }
    if let Some(t) = same_tip.filter(|t| t.bits != bits) {
        return Err(Refusal::param(
            "nbits",
            format!(
                "{:#010x} where the block after {prev_hash} needs {:#010x}",
                m.nbits,
                t.bits.to_consensus()
            ),
        ));
    }

    if let Some(mtp) = same_tip
        .and_then(|t| t.median_time_past)
        .filter(|mtp| m.min_ntime <= *mtp)
    {
        return Err(Refusal::param(
            "min_ntime",
            format!("{} not after the median time past ({mtp})", m.min_ntime),
        ));
    }
    if let Some(g) = cx.latest {
        let latest = g.template.curtime.saturating_add(MAX_FUTURE_BLOCK_TIME);
        if m.min_ntime > latest {
            return Err(Refusal::param(
                "min_ntime",
                format!("{} is over two hours past the node's clock", m.min_ntime),
            ));
        }
    }

    let script_len = m.coinbase_prefix.len() + cx.extranonce_len;
    if !(2..=100).contains(&script_len) {
        return Err(Refusal::param(
            "coinbase_prefix",
            format!("a scriptSig of {script_len} bytes with the extranonce (2 to 100)"),
        ));
    }
    let height = parse_bip34_height(&m.coinbase_prefix)
        .ok_or_else(|| Refusal::param("coinbase_prefix", "no BIP34 height"))?;
    if let Some(t) = same_tip.filter(|t| t.height != height) {
        return Err(Refusal::param(
            "coinbase_prefix",
            format!(
                "height {height} where the block after {prev_hash} is {}",
                t.height
            ),
        ));
    }

    if m.merkle_path.len() > MAX_MERKLE_PATH {
        return Err(Refusal::param(
            "merkle_path",
            format!(
                "{} hashes, a block needs at most {MAX_MERKLE_PATH}",
                m.merkle_path.len()
            ),
        ));
    }
    let branch: Arc<[Hash256]> = m.merkle_path.iter().map(|h| Hash256(*h)).collect();

    let coinbase = coinbase_parts(m, &outputs, cx.extranonce_len);
    let template = Arc::new(Template {
        height,
        prev_hash,
        version: m.version,
        bits,
        curtime: m.min_ntime,
        mintime: m.min_ntime,
        median_time_past: None,
        coinbase_value: value,
        witness_commitment: None,
        transactions: Vec::new().into(),
        longpoll_id: None,
    });
    Job::declared(
        id,
        template,
        coinbase,
        branch.clone(),
        fingerprint(&prev_hash, &branch),
        now,
        claims.id,
        cx.tips.clone(),
    )
    .map(|job| (job, claims))
    .map_err(|e| Refusal::param("nbits", e.to_string()))
}

/// The coinbase of `m` split around an extranonce of `extranonce_len` bytes, in the legacy
/// serialization its txid is taken over.
fn coinbase_parts(
    m: &SetCustomMiningJob,
    outputs: &[TxOut],
    extranonce_len: usize,
) -> CoinbaseParts {
    let script_len = m.coinbase_prefix.len() + extranonce_len;
    let mut prefix = Vec::with_capacity(42 + m.coinbase_prefix.len());
    prefix.extend_from_slice(&m.coinbase_tx_version.to_le_bytes());
    prefix.push(1); // one input
    prefix.extend_from_slice(&[0u8; 32]);
    prefix.extend_from_slice(&u32::MAX.to_le_bytes());
    compact_size::write(&mut prefix, script_len as u64);
    prefix.extend_from_slice(&m.coinbase_prefix);

    let mut suffix = Vec::with_capacity(m.coinbase_tx_outputs.len() + 8);
    suffix.extend_from_slice(&m.coinbase_tx_input_n_sequence.to_le_bytes());
    compact_size::write(&mut suffix, outputs.len() as u64);
    for o in outputs {
        o.consensus_encode(&mut suffix)
            .expect("writing to a Vec does not fail");
    }
    suffix.extend_from_slice(&m.coinbase_tx_locktime.to_le_bytes());
    CoinbaseParts {
        prefix,
        suffix,
        extranonce_len,
        segwit: outputs.iter().any(|o| {
            o.script_pubkey
                .as_bytes()
                .starts_with(&WITNESS_COMMITMENT_HEADER)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use primitives::bitcoin::ScriptBuf;

    #[test]
    fn outputs_come_count_prefixed_and_nothing_may_follow() {
        let outs = vec![
            TxOut {
                value: Amount::from_sat(7),
                script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
            },
            TxOut {
                value: Amount::ZERO,
                script_pubkey: ScriptBuf::from_bytes(vec![0x6a]),
            },
        ];
        let bytes = primitives::bitcoin::consensus::serialize(&outs);
        assert_eq!(bytes[0], 2);
        assert_eq!(decode_outputs(&bytes), Some(outs));
        assert_eq!(decode_outputs(&bytes[1..]), None, "without the count");
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(decode_outputs(&trailing), None);
    }
}
