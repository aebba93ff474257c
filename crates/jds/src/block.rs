//! A block rebuilt from the connection's most recent declared job and a `PushSolution`.

use std::sync::Arc;

use primitives::bitcoin::block::{Header, Version};
use primitives::bitcoin::consensus;
use primitives::bitcoin::hashes::Hash;
use primitives::bitcoin::{Block, BlockHash, CompactTarget, Transaction, TxMerkleNode};
use primitives::{merkle_root, Hash256};
use sv2::messages::job_declaration::PushSolution;

use crate::coinbase::{CoinbaseError, DeclaredCoinbase};
use crate::mempool::txid;

/// A job the JDS vouched for: what a solution needs to become a block.
#[derive(Clone, Debug)]
pub struct DeclaredJob {
    pub request_id: u32,
    pub coinbase: DeclaredCoinbase,
    /// The block's transactions after the coinbase, in order.
    pub txs: Vec<Arc<Transaction>>,
    /// Their txids (internal byte order), for the merkle root.
    pub txids: Vec<Hash256>,
}

/// A block ready for `submitblock`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundBlock {
    pub hash: Hash256,
    pub height: Option<u32>,
    /// The header's hash meets the header's own nBits.
    pub meets_target: bool,
    pub bytes: Vec<u8>,
}

impl DeclaredJob {
    pub fn new(
        request_id: u32,
        coinbase: DeclaredCoinbase,
        txs: Vec<Arc<Transaction>>,
    ) -> DeclaredJob {
        let txids = txs.iter().map(|t| txid(t)).collect();
        DeclaredJob {
            request_id,
            coinbase,
            txs,
            txids,
        }
    }

    /// Coinbase = prefix || extranonce || suffix, then the declared transactions; the header
    /// from the solution with the merkle root over their txids.
    pub fn rebuild(&self, s: &PushSolution) -> Result<FoundBlock, CoinbaseError> {
        let coinbase = self.coinbase.with_extranonce(&s.extranonce)?;
        let mut leaves = Vec::with_capacity(self.txids.len() + 1);
        leaves.push(txid(&coinbase));
        leaves.extend_from_slice(&self.txids);
        let root = merkle_root(&leaves);
        let header = Header {
            version: Version::from_consensus(s.version as i32),
            prev_blockhash: BlockHash::from_byte_array(s.prev_hash),
            merkle_root: TxMerkleNode::from_byte_array(root.0),
            time: s.ntime,
            bits: CompactTarget::from_consensus(s.nbits),
            nonce: s.nonce,
        };
        let meets_target = header.validate_pow(header.target()).is_ok();
        let mut txdata = Vec::with_capacity(self.txs.len() + 1);
        txdata.push(coinbase);
        txdata.extend(self.txs.iter().map(|t| Transaction::clone(t)));
        let block = Block { header, txdata };
        Ok(FoundBlock {
            hash: Hash256(header.block_hash().to_byte_array()),
            height: self.coinbase.info.height,
            meets_target,
            bytes: consensus::serialize(&block),
        })
    }
}
