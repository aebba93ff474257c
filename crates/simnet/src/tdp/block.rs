//! A whole block from a `SubmitSolution`: the client sends only the header fields it chose and
//! its coinbase; the transactions, the previous hash and `nBits` come from the template the
//! solution names, as a Template Provider keeps them.

use primitives::bitcoin::consensus::{deserialize, serialize};
use primitives::bitcoin::Transaction;
use primitives::{Hash256, Header};

use crate::template::Template;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
/// Why a `SubmitSolution` could not be turned into a block.
pub enum SolutionError {
    #[error("coinbase_tx does not decode as one transaction: {0}")]
    /// `coinbase_tx` is not one serialized transaction.
    CoinbaseDecode(String),
    #[error("coinbase_tx is not a coinbase (one input spending the null outpoint)")]
    /// `coinbase_tx` decodes but is not a coinbase.
    NotCoinbase,
}

/// A serialized block ready for the node, with what logs and events say about it.
#[derive(Clone, Debug)]
pub struct SolutionBlock {
    /// The serialized block.
    pub raw: Vec<u8>,
    /// Its header hash.
    pub hash: Hash256,
    /// Its height (the template's).
    pub height: u32,
    /// The template it was built on.
    pub template_id: u64,
}

/// Rebuilds the block `template` plus the client's header fields and coinbase describe. The
/// coinbase goes in as the client serialized it (witness included: SubmitSolution must not
/// strip it); the merkle root commits to its txid through the template's branch. Proof of work
/// and everything else are the node's to judge.
pub fn assemble(
    template: &Template,
    version: u32,
    header_timestamp: u32,
    header_nonce: u32,
    coinbase_tx: &[u8],
) -> Result<SolutionBlock, SolutionError> {
    // `deserialize` also rejects trailing bytes, so the coinbase is exactly one transaction.
    let coinbase: Transaction =
        deserialize(coinbase_tx).map_err(|e| SolutionError::CoinbaseDecode(e.to_string()))?;
    if !coinbase.is_coinbase() {
        return Err(SolutionError::NotCoinbase);
    }
    let txid = Hash256::from(coinbase.compute_txid());
    let header = Header {
        version,
        prev_hash: template.prev_hash,
        merkle_root: template.merkle_root(txid),
        time: header_timestamp,
        bits: template.bits,
        nonce: header_nonce,
    };
    // Re-serialized rather than copied: what decoded is what the block carries, byte for byte
    // the canonical encoding.
    let coinbase_raw = serialize(&coinbase);
    let body: usize = template.transactions.iter().map(|t| t.raw.len()).sum();
    let mut raw = Vec::with_capacity(Header::SIZE + 9 + coinbase_raw.len() + body);
    raw.extend_from_slice(&header.to_bytes());
    primitives::compact_size::write(&mut raw, 1 + template.transactions.len() as u64);
    raw.extend_from_slice(&coinbase_raw);
    for tx in &template.transactions {
        raw.extend_from_slice(&tx.raw);
    }
    Ok(SolutionBlock {
        raw,
        hash: header.block_hash(),
        height: template.height,
        template_id: template.id,
    })
}
