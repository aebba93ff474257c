//! What the session asks about transactions: the pool-side node's mempool, by wtxid.
//!
//! The session only reads; keeping the view fresh is the shell's (`shell::node_mempool`), which
//! refreshes it on an interval and once more before a declaration's unknown transactions are
//! requested from the client.

use std::collections::HashMap;
use std::sync::Arc;

use primitives::bitcoin::Transaction;
use primitives::Hash256;

/// Transactions by wtxid (internal byte order, as `DeclareMiningJob.wtxid_list` carries them).
pub trait Mempool {
    /// The transaction with this wtxid; `None` when the mempool lacks it.
    fn get(&self, wtxid: &Hash256) -> Option<Arc<Transaction>>;
}

impl Mempool for HashMap<Hash256, Arc<Transaction>> {
    fn get(&self, wtxid: &Hash256) -> Option<Arc<Transaction>> {
        HashMap::get(self, wtxid).cloned()
    }
}

/// A transaction's wtxid in internal byte order.
pub fn wtxid(tx: &Transaction) -> Hash256 {
    use primitives::bitcoin::hashes::Hash;
    Hash256(tx.compute_wtxid().to_byte_array())
}

/// A transaction's txid in internal byte order.
pub fn txid(tx: &Transaction) -> Hash256 {
    use primitives::bitcoin::hashes::Hash;
    Hash256(tx.compute_txid().to_byte_array())
}
