//! The block tree and its best chain: blocks by hash, the main chain by height, the tip.
//!
//! History starts at a base block at the configured height. Below it sits a [`History`] of
//! synthetic coinbase-only blocks that the base builds on, for readers (RPC) that look back a
//! little: consensus never looks below the base, so those blocks are not in the block tree and
//! nothing can build on them. Every block has the same `nBits`, so the chain with the most work
//! is the longest one, and between two of the same length the first seen stays (as in Core).

use std::collections::HashMap;
use std::sync::Arc;

use primitives::bitcoin::consensus::serialize;
use primitives::bitcoin::{Block, Transaction};
use primitives::{Hash256, Header};

use crate::mempool::TxEntry;
use primitives::Timestamp;

/// New coins in a block at `height`, in sats: 50 BTC halving every 210,000 blocks.
pub fn block_subsidy(height: u32) -> u64 {
    let halvings = height / 210_000;
    if halvings >= 64 {
        0
    } else {
        5_000_000_000 >> halvings
    }
}

/// Where a block came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockSource {
    /// The base block the network starts from.
    Start,
    /// Found by the simulated rest of the network.
    Network,
    /// Submitted through `submit_block` (found by the pool under test, or relayed to us).
    Submitted,
}

/// A block as the network keeps it: the coinbase apart, the other transactions shared with
/// the mempool entries they came from.
#[derive(Clone, Debug)]
pub struct StoredBlock {
    /// Block hash (the header's double SHA-256).
    pub hash: Hash256,
    /// Height in the chain.
    pub height: u32,
    /// The 80-byte header.
    pub header: Header,
    /// The coinbase transaction, kept apart from `txs`.
    pub coinbase: Transaction,
    /// The other transactions in block order, shared with the mempool entries they came from.
    pub txs: Vec<Arc<TxEntry>>,
    /// Fees of `txs` as recorded in the mempool (zero for a side-chain block whose
    /// transactions were never checked against it).
    pub fees: u64,
    /// Serialized size with witnesses, and weight.
    pub size: usize,
    /// Weight in weight units (BIP141).
    pub weight: u64,
    /// Where it came from: the start, the rest of the network, or a submission.
    pub source: BlockSource,
    /// When the network got it.
    pub received: Timestamp,
}

impl StoredBlock {
    /// Builds the record, computing size and weight from the parts.
    pub(crate) fn new(
        header: Header,
        height: u32,
        coinbase: Transaction,
        txs: Vec<Arc<TxEntry>>,
        fees: u64,
        source: BlockSource,
        received: Timestamp,
    ) -> Self {
        let n = 1 + txs.len() as u64;
        let tx_count_len = primitives::compact_size::len(n);
        let cb_size = coinbase.total_size();
        let size =
            Header::SIZE + tx_count_len + cb_size + txs.iter().map(|t| t.raw.len()).sum::<usize>();
        let weight = 4 * (Header::SIZE + tx_count_len) as u64
            + coinbase.weight().to_wu()
            + txs.iter().map(|t| t.weight).sum::<u64>();
        StoredBlock {
            hash: header.block_hash(),
            height,
            header,
            coinbase,
            txs,
            fees,
            size,
            weight,
            source,
            received,
        }
    }

    /// The header's timestamp (Unix seconds).
    pub fn time(&self) -> u32 {
        self.header.time
    }

    /// Transactions in the block, coinbase included.
    pub fn tx_count(&self) -> usize {
        1 + self.txs.len()
    }

    /// Txids in block order, the coinbase first.
    pub fn txids(&self) -> Vec<Hash256> {
        std::iter::once(self.coinbase.compute_txid().into())
            .chain(self.txs.iter().map(|t| t.txid))
            .collect()
    }

    /// The block as the `bitcoin` crate models it (a copy: for RPC answers, not hot paths).
    pub fn to_block(&self) -> Block {
        Block {
            header: self.header.into(),
            txdata: std::iter::once(self.coinbase.clone())
                .chain(self.txs.iter().map(|t| t.tx.clone()))
                .collect(),
        }
    }

    /// Consensus serialization with witnesses.
    pub fn serialize(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size);
        out.extend_from_slice(&self.header.to_bytes());
        primitives::compact_size::write(&mut out, self.tx_count() as u64);
        out.extend_from_slice(&serialize(&self.coinbase));
        for t in &self.txs {
            out.extend_from_slice(&t.raw);
        }
        out
    }
}

/// How many blocks the median time past looks back over.
const MEDIAN_TIME_SPAN: usize = 11;

/// The blocks below the base, oldest first, each building on the one before: the last one is
/// the base's parent. Made once per network and shared by every participant's chain.
#[derive(Debug, Default)]
pub struct History {
    blocks: Vec<Arc<StoredBlock>>,
    by_hash: HashMap<Hash256, usize>,
}

impl History {
    /// `blocks` oldest first, at consecutive heights, each one's `prev_hash` the hash of the
    /// one before.
    pub(crate) fn new(blocks: Vec<Arc<StoredBlock>>) -> History {
        debug_assert!(blocks
            .windows(2)
            .all(|w| w[1].header.prev_hash == w[0].hash && w[1].height == w[0].height + 1));
        let by_hash = blocks
            .iter()
            .enumerate()
            .map(|(i, b)| (b.hash, i))
            .collect();
        History { blocks, by_hash }
    }

    /// Height of the oldest block, if there is any.
    pub fn first_height(&self) -> Option<u32> {
        self.blocks.first().map(|b| b.height)
    }

    /// Blocks held in the history.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The block with this hash, if held.
    pub fn block(&self, hash: &Hash256) -> Option<&Arc<StoredBlock>> {
        self.by_hash.get(hash).map(|&i| &self.blocks[i])
    }

    /// The block at `height`, if held.
    pub fn at(&self, height: u32) -> Option<&Arc<StoredBlock>> {
        let first = self.first_height()?;
        self.blocks.get(height.checked_sub(first)? as usize)
    }

    /// The newest block: the base's parent.
    pub fn last(&self) -> Option<&Arc<StoredBlock>> {
        self.blocks.last()
    }
}

#[derive(Clone, Debug)]
/// The block tree from the base block: the main chain and any side branches, indexed by hash
/// and main-chain height, with the history before the base.
pub struct Chain {
    blocks: HashMap<Hash256, Arc<StoredBlock>>,
    /// `main[i]` is the main-chain block at height `base_height + i`.
    main: Vec<Hash256>,
    base_height: u32,
    history: Arc<History>,
}

impl Chain {
    #[cfg(test)]
    pub(crate) fn new(base: StoredBlock) -> Self {
        Chain::with_history(base, Arc::default())
    }

    /// A chain from `base`, whose parent is `history`'s last block.
    pub(crate) fn with_history(base: StoredBlock, history: Arc<History>) -> Self {
        debug_assert!(history
            .last()
            .is_none_or(|p| p.hash == base.header.prev_hash && p.height + 1 == base.height));
        let base = Arc::new(base);
        Chain {
            base_height: base.height,
            main: vec![base.hash],
            blocks: HashMap::from([(base.hash, base)]),
            history,
        }
    }

    /// The synthetic blocks below the base.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Height of the oldest block readers can look up: the oldest synthetic one, else the base.
    pub fn first_height(&self) -> u32 {
        self.history.first_height().unwrap_or(self.base_height)
    }

    /// [`Chain::block`], or a synthetic block below the base.
    pub fn any_block(&self, hash: &Hash256) -> Option<&Arc<StoredBlock>> {
        self.blocks.get(hash).or_else(|| self.history.block(hash))
    }

    /// [`Chain::hash_at`], or the synthetic block's below the base.
    pub fn any_hash_at(&self, height: u32) -> Option<Hash256> {
        match height.checked_sub(self.base_height) {
            Some(_) => self.hash_at(height),
            None => self.history.at(height).map(|b| b.hash),
        }
    }

    /// Whether `hash` is on the best chain, synthetic history included.
    pub fn any_is_main(&self, hash: &Hash256) -> bool {
        self.is_main(hash) || self.history.block(hash).is_some()
    }

    /// [`Chain::median_time_past`] looking through the synthetic history too, as a reader of
    /// headers expects near the base.
    pub fn any_median_time_past(&self, hash: &Hash256) -> Option<u32> {
        let mut times = Vec::with_capacity(MEDIAN_TIME_SPAN);
        let mut cur = self.any_block(hash);
        while let Some(b) = cur {
            times.push(b.time());
            if times.len() == MEDIAN_TIME_SPAN {
                break;
            }
            cur = self.any_block(&b.header.prev_hash);
        }
        if times.is_empty() {
            return None;
        }
        times.sort_unstable();
        Some(times[times.len() / 2])
    }

    /// The main-chain tip.
    pub fn tip(&self) -> &Arc<StoredBlock> {
        &self.blocks[self.main.last().expect("the base block is never removed")]
    }

    /// Hash of the main-chain tip (`getbestblockhash`).
    pub fn tip_hash(&self) -> Hash256 {
        self.tip().hash
    }

    /// Height of the tip (`getblockcount`).
    pub fn tip_height(&self) -> u32 {
        self.base_height + (self.main.len() - 1) as u32
    }

    /// Height of the first block the network has.
    pub fn base_height(&self) -> u32 {
        self.base_height
    }

    /// Main-chain blocks held, base included.
    pub fn len(&self) -> usize {
        self.main.len()
    }

    /// Whether no main-chain block is held (never, once built from a base block).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Blocks known, side branches included.
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// The block with this hash, main chain or side branch.
    pub fn block(&self, hash: &Hash256) -> Option<&Arc<StoredBlock>> {
        self.blocks.get(hash)
    }

    /// Whether a block with this hash is known, on any branch.
    pub fn contains(&self, hash: &Hash256) -> bool {
        self.blocks.contains_key(hash)
    }

    /// The main-chain block hash at `height` (`getblockhash`).
    pub fn hash_at(&self, height: u32) -> Option<Hash256> {
        let i = height.checked_sub(self.base_height)? as usize;
        self.main.get(i).copied()
    }

    /// Whether the block with this hash is on the main chain.
    pub fn is_main(&self, hash: &Hash256) -> bool {
        self.blocks
            .get(hash)
            .is_some_and(|b| self.hash_at(b.height) == Some(*hash))
    }

    /// Median of the times of the block and its up to ten ancestors (BIP113), as Core's
    /// `GetMedianTimePast`; fewer blocks are used near the base.
    pub fn median_time_past(&self, hash: &Hash256) -> Option<u32> {
        let mut times = Vec::with_capacity(MEDIAN_TIME_SPAN);
        let mut cur = self.blocks.get(hash);
        while let Some(b) = cur {
            times.push(b.time());
            if times.len() == MEDIAN_TIME_SPAN {
                break;
            }
            cur = self.blocks.get(&b.header.prev_hash);
        }
        if times.is_empty() {
            return None;
        }
        times.sort_unstable();
        Some(times[times.len() / 2])
    }

    /// Records a block without changing the best chain (its parent must be known).
    pub(crate) fn insert(&mut self, block: Arc<StoredBlock>) {
        debug_assert!(self.blocks.contains_key(&block.header.prev_hash));
        self.blocks.insert(block.hash, block);
    }

    /// The blocks from the fork point with the main chain (exclusive) up to `hash` (inclusive),
    /// oldest first: what connecting `hash` as the tip would connect.
    pub(crate) fn branch_to(&self, hash: &Hash256) -> Vec<Arc<StoredBlock>> {
        let mut branch = Vec::new();
        let mut cur = self.blocks.get(hash);
        while let Some(b) = cur {
            if self.is_main(&b.hash) {
                break;
            }
            branch.push(b.clone());
            cur = self.blocks.get(&b.header.prev_hash);
        }
        branch.reverse();
        branch
    }

    /// Makes `hash` (already inserted) the tip: main-chain blocks above its fork point are
    /// disconnected and returned, tip first.
    pub(crate) fn set_tip(&mut self, hash: &Hash256) -> Vec<Arc<StoredBlock>> {
        let branch = self.branch_to(hash);
        let Some(first) = branch.first() else {
            return Vec::new(); // already on the main chain
        };
        let keep = (first.height - self.base_height) as usize;
        let disconnected = self
            .main
            .drain(keep..)
            .rev()
            .map(|h| self.blocks[&h].clone())
            .collect();
        self.main.extend(branch.iter().map(|b| b.hash));
        disconnected
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use primitives::bitcoin::consensus::deserialize;
    use primitives::coinbase::CoinbaseSpec;
    use primitives::CompactTarget;

    fn block(prev: Hash256, height: u32, time: u32) -> StoredBlock {
        let cb = CoinbaseSpec::new(height, 4)
            .build()
            .unwrap()
            .transaction(&[0; 4])
            .unwrap();
        let header = Header {
            version: 0x2000_0000,
            prev_hash: prev,
            merkle_root: cb.compute_txid().into(),
            time,
            bits: CompactTarget::from_consensus(0x207f_ffff),
            nonce: 0,
        };
        StoredBlock::new(
            header,
            height,
            cb,
            Vec::new(),
            0,
            BlockSource::Network,
            Timestamp::ZERO,
        )
    }

    #[test]
    fn subsidy_halves() {
        assert_eq!(block_subsidy(0), 5_000_000_000);
        assert_eq!(block_subsidy(839_999), 625_000_000);
        assert_eq!(block_subsidy(900_000), 312_500_000);
        assert_eq!(block_subsidy(1_050_000), 156_250_000);
        assert_eq!(block_subsidy(64 * 210_000), 0);
    }

    #[test]
    fn stored_block_serializes_as_consensus() {
        let b = block(Hash256::ZERO, 10, 1000);
        let raw = b.serialize();
        assert_eq!(raw.len(), b.size);
        let decoded: Block = deserialize(&raw).unwrap();
        assert_eq!(decoded, b.to_block());
        assert_eq!(decoded.weight().to_wu(), b.weight);
        assert_eq!(Hash256::from(decoded.block_hash()), b.hash);
    }

    #[test]
    fn heights_tip_mtp_and_reorg() {
        let base = block(Hash256::ZERO, 100, 1000);
        let mut c = Chain::new(base.clone());
        let mut prev = base.hash;
        let mut main = vec![base.hash];
        // Times out of order, as real headers may be.
        for (i, t) in [1010, 1005, 1020, 1030, 1001].iter().enumerate() {
            let b = Arc::new(block(prev, 101 + i as u32, *t));
            c.insert(b.clone());
            assert!(c.set_tip(&b.hash).is_empty());
            prev = b.hash;
            main.push(b.hash);
        }
        assert_eq!(c.tip_height(), 105);
        assert_eq!(c.hash_at(100), Some(base.hash));
        assert_eq!(c.hash_at(99), None);
        assert_eq!(c.hash_at(106), None);
        // Times 1000, 1010, 1005, 1020, 1030, 1001: sorted middle (index 3 of 6) is 1010.
        assert_eq!(c.median_time_past(&prev), Some(1010));

        // A side branch from height 103 that grows longer takes over.
        let s1 = Arc::new(block(main[3], 104, 2000));
        let s2 = Arc::new(block(s1.hash, 105, 2001));
        let s3 = Arc::new(block(s2.hash, 106, 2002));
        for s in [&s1, &s2, &s3] {
            c.insert(s.clone());
        }
        assert!(!c.is_main(&s1.hash));
        assert_eq!(c.branch_to(&s3.hash).len(), 3);
        let gone = c.set_tip(&s3.hash);
        let gone: Vec<_> = gone.iter().map(|b| b.hash).collect();
        assert_eq!(gone, [main[5], main[4]]);
        assert_eq!(c.tip_hash(), s3.hash);
        assert_eq!(c.hash_at(104), Some(s1.hash));
        assert!(c.is_main(&main[3]) && !c.is_main(&main[4]));
        assert_eq!(c.block_count(), 9);
    }
}
