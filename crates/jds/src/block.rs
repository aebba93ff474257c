//! A block rebuilt from the connection's most recent declared job and a `PushSolution`.

use std::sync::Arc;

use primitives::bitcoin::block::{Header, Version};
use primitives::bitcoin::consensus;
use primitives::bitcoin::hashes::Hash;
use primitives::bitcoin::{Block, BlockHash, CompactTarget, Transaction, TxMerkleNode};
use primitives::coinbase::parse_bip34_height;
use primitives::{merkle_root, Hash256};
use sv2::messages::job_declaration::PushSolution;

use crate::coinbase::{CoinbaseError, DeclaredCoinbase};
use crate::mempool::txid;

/// A job the JDS vouched for: what a solution needs to become a block.
#[derive(Clone, Debug)]
pub struct DeclaredJob {
    /// `DeclareMiningJob.request_id` of the declaration.
    pub request_id: u32,
    /// The declared coinbase, parsed.
    pub coinbase: DeclaredCoinbase,
    /// The block's transactions after the coinbase, in order.
    pub txs: Vec<Arc<Transaction>>,
    /// Their txids (internal byte order), for the merkle root.
    pub txids: Vec<Hash256>,
}

/// A block ready for `submitblock`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundBlock {
    /// The block hash, internal byte order.
    pub hash: Hash256,
    /// The BIP34 height read from the coinbase's scriptSig; `None` when it holds none.
    pub height: Option<u32>,
    /// The header's hash meets the header's own nBits.
    pub meets_target: bool,
    /// The block consensus-serialized (`submitblock` sends it hex-encoded).
    pub bytes: Vec<u8>,
}

impl DeclaredJob {
    /// The job declared by `request_id`, its txids computed from `txs`.
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
        // The block's own BIP34 height, read with the extranonce in place (the declared
        // coinbase's is read over zeros, and a scriptSig may start in the extranonce).
        let height = parse_bip34_height(coinbase.input[0].script_sig.as_bytes());
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
            height,
            meets_target,
            bytes: consensus::serialize(&block),
        })
    }
}

#[cfg(test)]
mod tests {
    use primitives::bitcoin::{Amount, ScriptBuf, TxOut, Witness};

    use super::*;
    use crate::fuzz_support::{coinbase_tx, split_coinbase};

    /// Found by a `jds_session` seed (corpus/jds_session/seed-height-in-the-extranonce): a
    /// coinbase whose scriptSig is all extranonce was reported at the height read over zeros
    /// (0, from OP_0), not at its block's.
    #[test]
    fn a_block_is_reported_at_its_own_coinbase_height() {
        let tx = coinbase_tx(
            vec![0; 8],
            Witness::new(),
            vec![TxOut {
                value: Amount::from_sat(1),
                script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
            }],
        );
        let (prefix, suffix) = split_coinbase(&tx, 8);
        let coinbase = DeclaredCoinbase::parse(&prefix, &suffix).unwrap();
        assert_eq!(coinbase.info.height, Some(0), "read over zeros");
        let job = DeclaredJob::new(1, coinbase, Vec::new());
        // The extranonce pushes 812345 (0x0c6539) as its first item.
        let solution = PushSolution {
            extranonce: vec![0x03, 0x39, 0x65, 0x0c, 0, 0, 0, 0],
            prev_hash: [0x11; 32],
            nonce: 0,
            ntime: 1_750_000_000,
            nbits: 0x207f_ffff,
            version: 0x2000_0000,
        };
        assert_eq!(job.rebuild(&solution).unwrap().height, Some(812_345));
    }
}
