//! Block templates: what `getblocktemplate` and an SV2 Template Provider hand to a pool.
//!
//! A template is built once and shared (`Arc`) with every endpoint. Everything a pool needs
//! to make jobs is precomputed: txids and wtxids, the coinbase merkle branch, and the witness
//! commitment, which Core always returns as `default_witness_commitment`.

use std::sync::Arc;

use primitives::coinbase::{
    witness_commitment, witness_commitment_script, CoinbaseSpec, Payout, WITNESS_RESERVED_VALUE,
};
use primitives::{
    coinbase_merkle_branch, merkle_root_from_branch, CompactTarget, Hash256, Header, Target,
};

use crate::chain::block_subsidy;
use crate::mempool::{Selection, TxEntry};
use primitives::Timestamp;

/// Block version templates ask for: BIP9 top bits, no deployment signalled.
pub const TEMPLATE_VERSION: u32 = 0x2000_0000;

#[derive(Clone, Debug)]
/// A block template for one node: what `getblocktemplate` and the Template Provider's
/// `NewTemplate` describe.
pub struct Template {
    /// Increases by one with every template the network makes.
    pub id: u64,
    /// When the network made it.
    pub created_at: Timestamp,
    /// Hash of the tip it builds on.
    pub prev_hash: Hash256,
    /// Height of the block it makes.
    pub height: u32,
    /// Header `nVersion` to use ([`TEMPLATE_VERSION`]).
    pub version: u32,
    /// Header `nBits`.
    pub bits: CompactTarget,
    /// The target `bits` decodes to (what a block's hash must meet).
    pub target: Target,
    /// Suggested header time, Unix seconds.
    pub curtime: u32,
    /// Earliest header time the network accepts: median time past + 1.
    pub mintime: u32,
    /// The chosen transactions in block order (after the coinbase).
    pub transactions: Vec<Arc<TxEntry>>,
    /// Txids of `transactions`, in the same order.
    pub txids: Vec<Hash256>,
    /// Wtxids of `transactions`, in the same order.
    pub wtxids: Vec<Hash256>,
    /// The coinbase's merkle branch over `txids`.
    pub merkle_branch: Vec<Hash256>,
    /// Block subsidy at `height`, in sats.
    pub subsidy: u64,
    /// Fees of `transactions`, in sats.
    pub total_fees: u64,
    /// What the coinbase may pay out: subsidy + fees.
    pub coinbase_value: u64,
    /// Weight of the chosen transactions (the coinbase not included).
    pub tx_weight: u64,
    /// BIP141 commitment over `wtxids` with the all-zero reserved value.
    pub witness_commitment: Hash256,
    /// The commitment output's script (`default_witness_commitment` in Core's template).
    pub default_witness_commitment: Vec<u8>,
}

/// What a template is built from, apart from the transactions.
pub(crate) struct TemplateBase {
    pub id: u64,
    pub now: Timestamp,
    pub prev_hash: Hash256,
    pub height: u32,
    pub bits: CompactTarget,
    pub target: Target,
    pub curtime: u32,
    pub mintime: u32,
}

impl Template {
    pub(crate) fn build(base: TemplateBase, selection: Selection) -> Template {
        let Selection { txs, fees, weight } = selection;
        let txids: Vec<Hash256> = txs.iter().map(|t| t.txid).collect();
        let wtxids: Vec<Hash256> = txs.iter().map(|t| t.wtxid).collect();
        let merkle_branch = coinbase_merkle_branch(&txids);
        let commitment = witness_commitment(&wtxids, &WITNESS_RESERVED_VALUE);
        let subsidy = block_subsidy(base.height);
        Template {
            id: base.id,
            created_at: base.now,
            prev_hash: base.prev_hash,
            height: base.height,
            version: TEMPLATE_VERSION,
            bits: base.bits,
            target: base.target,
            curtime: base.curtime,
            mintime: base.mintime,
            transactions: txs,
            txids,
            wtxids,
            merkle_branch,
            subsidy,
            total_fees: fees,
            coinbase_value: subsidy + fees,
            tx_weight: weight,
            witness_commitment: commitment,
            default_witness_commitment: witness_commitment_script(commitment),
        }
    }

    /// Transactions besides the coinbase.
    pub fn tx_count(&self) -> usize {
        self.transactions.len()
    }

    /// The merkle root of the block with this coinbase.
    pub fn merkle_root(&self, coinbase_txid: Hash256) -> Hash256 {
        merkle_root_from_branch(coinbase_txid, &self.merkle_branch)
    }

    /// A coinbase for this template paying its whole value to `script_pubkey`: the BIP34
    /// height first, the witness commitment last.
    pub fn coinbase_spec(&self, extranonce_len: usize, script_pubkey: Vec<u8>) -> CoinbaseSpec {
        let mut spec = CoinbaseSpec::new(self.height, extranonce_len);
        spec.payouts.push(Payout {
            script_pubkey: script_pubkey.into(),
            value: primitives::bitcoin::Amount::from_sat(self.coinbase_value),
        });
        spec.witness_commitment = Some(self.witness_commitment);
        spec
    }

    /// The header of a block on this template, at `curtime`.
    pub fn header(&self, merkle_root: Hash256, nonce: u32) -> Header {
        Header {
            version: self.version,
            prev_hash: self.prev_hash,
            merkle_root,
            time: self.curtime,
            bits: self.bits,
            nonce,
        }
    }
}
