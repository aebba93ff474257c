//! Checks on a submitted block, in Bitcoin Core's order and with Core's reason strings.
//!
//! Core validates in stages, and which reason a bad block gets depends on the stage that trips
//! first, so the stages are kept apart here:
//!
//! 1. decoding and the coinbase-first test (`submitblock`'s own RPC errors);
//! 2. [`check_block`], context-free (`CheckBlock`): proof of work against the header's own
//!    `nBits`, merkle root, size, one coinbase, each transaction's structure;
//! 3. in the network: `duplicate`, then `prev-blk-not-found` (`AcceptBlockHeader`);
//! 4. [`check_header_in_context`] (`ContextualCheckBlockHeader`): `bad-diffbits`, times, version;
//! 5. [`check_block_in_context`] (`ContextualCheckBlock`): finality, BIP34 height, witness
//!    commitment, weight;
//! 6. [`check_connect`] (`ConnectBlock`), only for blocks that become part of the best chain:
//!    every transaction known and unspent, coinbase value at most subsidy + fees.
//!
//! Everything here takes untrusted input and returns an error instead of panicking.

use std::collections::HashSet;
use std::sync::Arc;

use primitives::bitcoin::consensus::Decodable;
use primitives::bitcoin::{Block, OutPoint, Sequence, Transaction, Witness};
use primitives::coinbase::{
    bip34_height_push, witness_commitment, SCRIPT_SIG_MAX, SCRIPT_SIG_MIN,
    WITNESS_COMMITMENT_HEADER, WITNESS_RESERVED_VALUE,
};
use primitives::{merkle_step, CompactTarget, Hash256, Header, Target};

use crate::config::MAX_BLOCK_WEIGHT;
use crate::mempool::TxEntry;

/// The submit path under arbitrary bytes, for the fuzz target and its corpus replay test.
#[doc(hidden)]
pub mod fuzz;

/// Why a submitted block was not made the tip. `Display` is bitcoind's word for it: the
/// `submitblock` result string, or for the first two the RPC error message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The bytes are not a block (RPC error -22 in Core).
    #[error("Block decode failed")]
    Decode,
    /// No transactions, or the first is not a coinbase (RPC error -22 in Core).
    #[error("Block does not start with a coinbase")]
    NoCoinbase,
    #[error("high-hash")]
    /// The header hash is above the target its `nBits` encode.
    HighHash,
    #[error("bad-txnmrklroot")]
    /// The header's merkle root is not that of the block's transactions.
    BadMerkleRoot,
    /// The merkle tree is mutated (CVE-2012-2459: a repeated pair of txids).
    #[error("bad-txns-duplicate")]
    MutatedMerkle,
    #[error("bad-blk-length")]
    /// More transactions, or a larger size stripped of witnesses, than a quarter of the block weight
    /// limit allows.
    BadLength,
    #[error("bad-cb-multiple")]
    /// A transaction after the first is a coinbase.
    MultipleCoinbase,
    #[error("bad-cb-length")]
    /// The coinbase scriptSig is not 2 to 100 bytes long.
    BadCoinbaseLength,
    #[error("bad-txns-vin-empty")]
    /// A transaction has no inputs.
    TxNoInputs,
    #[error("bad-txns-vout-empty")]
    /// A transaction has no outputs.
    TxNoOutputs,
    #[error("bad-txns-oversize")]
    /// A transaction's size stripped of witnesses, times four, is over the block weight limit.
    TxOversize,
    #[error("bad-txns-vout-negative")]
    /// An output value is negative when read as Core reads amounts (signed 64-bit).
    TxOutputNegative,
    #[error("bad-txns-vout-toolarge")]
    /// An output value is above 21 million BTC.
    TxOutputTooLarge,
    #[error("bad-txns-txouttotal-toolarge")]
    /// A transaction's outputs add up to more than 21 million BTC.
    TxOutputTotalTooLarge,
    #[error("bad-txns-inputs-duplicate")]
    /// A transaction spends the same outpoint twice.
    TxDuplicateInputs,
    #[error("bad-txns-prevout-null")]
    /// A non-coinbase transaction spends the null outpoint.
    TxNullPrevout,
    /// We have this block already.
    #[error("duplicate")]
    Duplicate,
    #[error("prev-blk-not-found")]
    /// The parent block is unknown.
    PrevNotFound,
    /// `nBits` is not the network's.
    #[error("bad-diffbits")]
    BadDiffBits,
    /// Header time not after the median time past.
    #[error("time-too-old")]
    TimeTooOld,
    /// Header time more than two hours past the network's clock.
    #[error("time-too-new")]
    TimeTooNew,
    #[error("bad-version(0x{0:08x})")]
    /// The header version is one Core rejects as outdated (below 4 since BIP65).
    BadVersion(u32),
    #[error("bad-txns-nonfinal")]
    /// A transaction is not final at the block's height and median time past.
    NonFinalTx,
    /// The coinbase scriptSig does not start with the BIP34 push of the block's height.
    #[error("bad-cb-height")]
    BadCoinbaseHeight,
    #[error("bad-witness-nonce-size")]
    /// The coinbase witness is not a single 32-byte witness reserved value.
    BadWitnessNonceSize,
    #[error("bad-witness-merkle-match")]
    /// The witness commitment in the coinbase does not match the block's wtxids.
    BadWitnessMerkle,
    #[error("unexpected-witness")]
    /// A transaction carries a witness but the coinbase has no witness commitment.
    UnexpectedWitness,
    #[error("bad-blk-weight")]
    /// The block weight is over 4,000,000 WU.
    BadWeight,
    /// A transaction we do not have (every non-coinbase transaction must come from the
    /// mempool), or one already spent (in an earlier block, or earlier in this one).
    #[error("bad-txns-inputs-missingorspent")]
    MissingInputs,
    /// The coinbase pays out more than subsidy + fees.
    #[error("bad-cb-amount")]
    BadCoinbaseAmount,
    /// Valid, but it does not become the tip (a stale block: its chain is not longer).
    #[error("inconclusive")]
    Inconclusive,
}

impl SubmitError {
    /// Whether Core answers with a JSON-RPC error (rather than a result string).
    pub fn is_rpc_error(&self) -> bool {
        matches!(self, SubmitError::Decode | SubmitError::NoCoinbase)
    }
}

/// Largest amount any output or transaction may carry: 21 million BTC.
const MAX_MONEY: u64 = 21_000_000 * 100_000_000;
const LOCKTIME_THRESHOLD: u32 = 500_000_000;
/// How far past the network's clock a header time may be (Core's `MAX_FUTURE_BLOCK_TIME`).
pub const MAX_FUTURE_BLOCK_TIME: u64 = 2 * 60 * 60;

/// Decodes a block as `submitblock` does. Trailing bytes are ignored, as Core ignores them.
pub fn decode(raw: &[u8]) -> Result<Block, SubmitError> {
    let mut reader = raw;
    Block::consensus_decode(&mut reader).map_err(|_| SubmitError::Decode)
}

/// A block that passed the context-free checks, with what they computed.
#[derive(Clone, Debug)]
pub struct CheckedBlock {
    /// The decoded block.
    pub block: Block,
    /// Its header hash.
    pub hash: Hash256,
    /// Its header.
    pub header: Header,
    /// Txids in block order, coinbase first.
    pub txids: Vec<Hash256>,
}

/// The context-free checks (`CheckBlock`), after `submitblock`'s coinbase-first test.
pub fn check_block(block: Block) -> Result<CheckedBlock, SubmitError> {
    if !block.txdata.first().is_some_and(|tx| tx.is_coinbase()) {
        return Err(SubmitError::NoCoinbase);
    }
    let header = Header::from(block.header);
    let hash = header.block_hash();
    let target = Target::from_compact(header.bits).map_err(|_| SubmitError::HighHash)?;
    if target.is_zero() || !target.is_met_by(hash.as_bytes()) {
        return Err(SubmitError::HighHash);
    }

    let txids: Vec<Hash256> = block
        .txdata
        .iter()
        .map(|t| t.compute_txid().into())
        .collect();
    let (root, mutated) = merkle_root_checked(&txids);
    if root != header.merkle_root {
        return Err(SubmitError::BadMerkleRoot);
    }
    if mutated {
        return Err(SubmitError::MutatedMerkle);
    }

    let max_count = (MAX_BLOCK_WEIGHT / 4) as usize;
    let stripped_size: usize = Header::SIZE
        + primitives::compact_size::len(block.txdata.len() as u64)
        + block.txdata.iter().map(|t| t.base_size()).sum::<usize>();
    if block.txdata.len() > max_count || stripped_size > max_count {
        return Err(SubmitError::BadLength);
    }

    if block.txdata[1..].iter().any(|t| t.is_coinbase()) {
        return Err(SubmitError::MultipleCoinbase);
    }
    for tx in &block.txdata {
        check_transaction(tx)?;
    }
    Ok(CheckedBlock {
        block,
        hash,
        header,
        txids,
    })
}

/// Core's `CheckTransaction`: structure only, nothing about what it spends.
fn check_transaction(tx: &Transaction) -> Result<(), SubmitError> {
    if tx.input.is_empty() {
        return Err(SubmitError::TxNoInputs);
    }
    if tx.output.is_empty() {
        return Err(SubmitError::TxNoOutputs);
    }
    if tx.base_size() as u64 * 4 > MAX_BLOCK_WEIGHT {
        return Err(SubmitError::TxOversize);
    }
    let mut total: u64 = 0;
    for o in &tx.output {
        let v = o.value.to_sat();
        // Core reads amounts as signed 64-bit numbers.
        if v > i64::MAX as u64 {
            return Err(SubmitError::TxOutputNegative);
        }
        if v > MAX_MONEY {
            return Err(SubmitError::TxOutputTooLarge);
        }
        total += v; // both at most MAX_MONEY: no overflow
        if total > MAX_MONEY {
            return Err(SubmitError::TxOutputTotalTooLarge);
        }
    }
    if tx.input.len() > 1 {
        let mut seen: HashSet<&OutPoint> = HashSet::with_capacity(tx.input.len());
        if !tx.input.iter().all(|i| seen.insert(&i.previous_output)) {
            return Err(SubmitError::TxDuplicateInputs);
        }
    }
    if tx.is_coinbase() {
        let len = tx.input[0].script_sig.len();
        if !(SCRIPT_SIG_MIN..=SCRIPT_SIG_MAX).contains(&len) {
            return Err(SubmitError::BadCoinbaseLength);
        }
    } else if tx.input.iter().any(|i| i.previous_output.is_null()) {
        return Err(SubmitError::TxNullPrevout);
    }
    Ok(())
}

/// The merkle root, and whether the tree is mutated the way Core's `ComputeMerkleRoot` detects:
/// two equal siblings at any level (a duplicated tail that leaves the root unchanged).
fn merkle_root_checked(leaves: &[Hash256]) -> (Hash256, bool) {
    let mut mutated = false;
    let mut level = leaves.to_vec();
    if level.is_empty() {
        return (Hash256::ZERO, false);
    }
    while level.len() > 1 {
        for pair in level.chunks_exact(2) {
            mutated |= pair[0] == pair[1];
        }
        level = level
            .chunks(2)
            .map(|c| merkle_step(&c[0], c.get(1).unwrap_or(&c[0])))
            .collect();
    }
    (level[0], mutated)
}

/// What the header is judged against: the chain at its parent and the network's clock.
pub struct HeaderContext {
    /// The `nBits` the network expects at this height.
    pub bits: CompactTarget,
    /// Median time past of the parent.
    pub prev_median_time: u32,
    /// The network's clock, Unix seconds.
    pub now_unix: u64,
}

/// `ContextualCheckBlockHeader`.
pub fn check_header_in_context(h: &Header, ctx: &HeaderContext) -> Result<(), SubmitError> {
    if h.bits != ctx.bits {
        return Err(SubmitError::BadDiffBits);
    }
    if h.time <= ctx.prev_median_time {
        return Err(SubmitError::TimeTooOld);
    }
    if h.time as u64 > ctx.now_unix + MAX_FUTURE_BLOCK_TIME {
        return Err(SubmitError::TimeTooNew);
    }
    // BIP34/66/65 made versions below 4 invalid; Core reads the field as signed.
    if (h.version as i32) < 4 {
        return Err(SubmitError::BadVersion(h.version));
    }
    Ok(())
}

/// `ContextualCheckBlock`, at `height` with the parent's median time past. Like `submitblock`
/// (`UpdateUncommittedBlockStructures`), a coinbase without a witness in a block with a
/// commitment first gets the all-zero reserved value, so pools that send the legacy coinbase
/// are accepted as by Core.
pub fn check_block_in_context(
    checked: &mut CheckedBlock,
    height: u32,
    prev_median_time: u32,
) -> Result<(), SubmitError> {
    let txs = &checked.block.txdata;
    if !txs.iter().all(|t| is_final(t, height, prev_median_time)) {
        return Err(SubmitError::NonFinalTx);
    }
    if !txs[0].input[0]
        .script_sig
        .as_bytes()
        .starts_with(&bip34_height_push(height))
    {
        return Err(SubmitError::BadCoinbaseHeight);
    }

    let commitment = witness_commitment_in(&txs[0]);
    if commitment.is_some() && txs[0].input[0].witness.is_empty() {
        checked.block.txdata[0].input[0].witness = Witness::from_slice(&[WITNESS_RESERVED_VALUE]);
    }
    let txs = &checked.block.txdata;
    match commitment {
        Some(committed) => {
            let witness = &txs[0].input[0].witness;
            let reserved: [u8; 32] = match (witness.len(), witness.nth(0)) {
                (1, Some(item)) => item
                    .try_into()
                    .map_err(|_| SubmitError::BadWitnessNonceSize)?,
                _ => return Err(SubmitError::BadWitnessNonceSize),
            };
            let wtxids: Vec<Hash256> = txs[1..].iter().map(|t| t.compute_wtxid().into()).collect();
            if witness_commitment(&wtxids, &reserved) != committed {
                return Err(SubmitError::BadWitnessMerkle);
            }
        }
        None => {
            if txs
                .iter()
                .any(|t| t.input.iter().any(|i| !i.witness.is_empty()))
            {
                return Err(SubmitError::UnexpectedWitness);
            }
        }
    }
    if checked.block.weight().to_wu() > MAX_BLOCK_WEIGHT {
        return Err(SubmitError::BadWeight);
    }
    Ok(())
}

fn is_final(tx: &Transaction, height: u32, median_time: u32) -> bool {
    let lock_time = tx.lock_time.to_consensus_u32();
    if lock_time == 0 {
        return true;
    }
    let cutoff = if lock_time < LOCKTIME_THRESHOLD {
        height
    } else {
        median_time
    };
    lock_time < cutoff || tx.input.iter().all(|i| i.sequence == Sequence::MAX)
}

/// The commitment in the coinbase's last output that carries one (BIP141).
fn witness_commitment_in(coinbase: &Transaction) -> Option<Hash256> {
    coinbase.output.iter().rev().find_map(|o| {
        let s = o.script_pubkey.as_bytes();
        if s.len() >= 38 && s[..6] == WITNESS_COMMITMENT_HEADER {
            let mut c = [0u8; 32];
            c.copy_from_slice(&s[6..38]);
            Some(Hash256(c))
        } else {
            None
        }
    })
}

/// `ConnectBlock`'s part that we model: every non-coinbase transaction must be one we have
/// (`lookup`, typically the mempool) and appear once; the coinbase may pay at most
/// `subsidy` + their fees. Returns our entries for the transactions and their total fee.
pub fn check_connect(
    checked: &CheckedBlock,
    subsidy: u64,
    lookup: impl Fn(&Hash256) -> Option<Arc<TxEntry>>,
) -> Result<(Vec<Arc<TxEntry>>, u64), SubmitError> {
    let txs = &checked.block.txdata;
    let mut seen = HashSet::with_capacity(txs.len());
    let mut entries = Vec::with_capacity(txs.len() - 1);
    let mut fees = 0u64;
    for (tx, txid) in txs[1..].iter().zip(&checked.txids[1..]) {
        let known = lookup(txid).ok_or(SubmitError::MissingInputs)?;
        if !seen.insert(*txid) {
            return Err(SubmitError::MissingInputs);
        }
        fees += known.fee;
        // Same txid, but the witness may differ: keep the block's own version.
        let wtxid: Hash256 = tx.compute_wtxid().into();
        entries.push(if wtxid == known.wtxid {
            known
        } else {
            Arc::new(TxEntry::new(tx.clone(), known.fee, known.time))
        });
    }
    // Output totals were bounded by `check_transaction`, so this cannot overflow.
    let value_out: u64 = txs[0].output.iter().map(|o| o.value.to_sat()).sum();
    if value_out > subsidy + fees {
        return Err(SubmitError::BadCoinbaseAmount);
    }
    Ok((entries, fees))
}

#[cfg(test)]
mod tests {
    use super::*;
    use primitives::merkle_root;

    #[test]
    fn merkle_mutation_is_detected_like_core() {
        let l: Vec<Hash256> = (0..3u8).map(|i| Hash256([i; 32])).collect();
        let (root, mutated) = merkle_root_checked(&l);
        assert_eq!(root, merkle_root(&l));
        assert!(!mutated);
        // [a, b, c, c] has the same root as [a, b, c] but is mutated.
        let dup = [l[0], l[1], l[2], l[2]];
        let (root2, mutated2) = merkle_root_checked(&dup);
        assert_eq!(root2, root);
        assert!(mutated2);
    }

    #[test]
    fn undecodable_bytes_are_a_decode_error_not_a_panic() {
        for raw in [&[][..], &[0u8; 79][..], &[0xff; 200][..]] {
            assert_eq!(decode(raw).unwrap_err(), SubmitError::Decode);
        }
        // A header claiming 2^32 transactions.
        let mut raw = vec![0u8; 80];
        raw.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(decode(&raw).unwrap_err(), SubmitError::Decode);
    }

    #[test]
    fn reasons_are_bitcoinds_words() {
        assert_eq!(SubmitError::HighHash.to_string(), "high-hash");
        assert_eq!(SubmitError::BadCoinbaseAmount.to_string(), "bad-cb-amount");
        assert_eq!(
            SubmitError::BadVersion(1).to_string(),
            "bad-version(0x00000001)"
        );
        assert_eq!(SubmitError::Decode.to_string(), "Block decode failed");
        assert!(SubmitError::Decode.is_rpc_error());
        assert!(!SubmitError::Inconclusive.is_rpc_error());
    }
}
