//! One participant's view of the network: its block tree and best chain, its mempool, and the
//! transactions it has ever seen. The hub (the rest of the network) and every node keep one;
//! they differ while transactions and blocks are still on their way.
//!
//! Blocks relayed from a peer were fully checked where they entered the network, so connecting
//! one here only moves the tip and the mempool (as a node that trusts its peers' proof of work
//! and has validated the transactions before would); blocks submitted to a node go through the
//! full checks in `network.rs` first.

use std::collections::HashSet;
use std::sync::Arc;

use primitives::Hash256;

use crate::chain::{BlockSource, Chain, StoredBlock};
use crate::mempool::{Mempool, TxEntry};
use primitives::Timestamp;

#[derive(Debug)]
pub(crate) struct Ledger {
    pub chain: Chain,
    pub mempool: Mempool,
    /// Every txid that entered the mempool or arrived in a block: what a peer need not send
    /// again. Grows with the run (32 bytes and a little per transaction).
    pub seen: HashSet<Hash256>,
}

/// What connecting a relayed block did.
pub(crate) enum Connected {
    /// Already known: nothing changed.
    Duplicate,
    /// Its parent is unknown (a relay ordering bug): dropped.
    Orphan,
    /// Stored on a branch no longer than the best one (first seen stays).
    Side,
    /// The new tip.
    Tip(Arc<StoredBlock>),
}

impl Ledger {
    pub(crate) fn new(chain: Chain, mempool: Mempool) -> Ledger {
        let seen = mempool.iter_by_fee_rate().map(|e| e.txid).collect();
        Ledger {
            chain,
            mempool,
            seen,
        }
    }

    /// A transaction the network relayed: into the mempool unless seen before (then it is in
    /// the mempool already, or confirmed). Returns whether it was new.
    pub(crate) fn receive_tx(&mut self, entry: Arc<TxEntry>) -> bool {
        if !self.seen.insert(entry.txid) {
            return false;
        }
        // A repeated txid cannot get here (seen); eviction of the newcomer is fine.
        let _ = self.mempool.insert(entry);
        true
    }

    /// Adds a block that was checked where it entered the network. `received` and `source` are
    /// this participant's: when it got the block and where from.
    pub(crate) fn connect_relayed(
        &mut self,
        block: &StoredBlock,
        received: Timestamp,
        source: BlockSource,
    ) -> Connected {
        if self.chain.contains(&block.hash) {
            return Connected::Duplicate;
        }
        if !self.chain.contains(&block.header.prev_hash) {
            return Connected::Orphan;
        }
        let mine = Arc::new(StoredBlock {
            received,
            source,
            ..block.clone()
        });
        self.seen.extend(mine.txs.iter().map(|e| e.txid));
        self.chain.insert(mine.clone());
        if mine.height <= self.chain.tip_height() {
            return Connected::Side;
        }
        let fork_parent = self.chain.tip_hash() != mine.header.prev_hash;
        let disconnected = self.chain.set_tip(&mine.hash);
        if fork_parent {
            // A reorganisation: what the new branch confirms leaves the mempool, what only the
            // old branch confirmed comes back.
            let fork_height = disconnected.last().map_or(mine.height, |b| b.height) - 1;
            self.reorg_mempool(fork_height, &disconnected);
        } else {
            for e in &mine.txs {
                self.mempool.remove(&e.txid);
            }
        }
        Connected::Tip(mine)
    }

    /// After the tip moved to another branch forking above `fork_height`: what the new branch
    /// confirms leaves the mempool, what only the `disconnected` blocks confirmed comes back.
    pub(crate) fn reorg_mempool(&mut self, fork_height: u32, disconnected: &[Arc<StoredBlock>]) {
        let mut mined = HashSet::new();
        for h in (fork_height + 1..=self.chain.tip_height()).filter_map(|h| self.chain.hash_at(h)) {
            let b = self.chain.block(&h).expect("connected block");
            mined.extend(b.txs.iter().map(|e| e.txid));
        }
        for b in disconnected {
            for e in &b.txs {
                if !mined.contains(&e.txid) {
                    let _ = self.mempool.insert(e.clone());
                }
            }
        }
        for txid in &mined {
            self.mempool.remove(txid);
        }
    }
}
