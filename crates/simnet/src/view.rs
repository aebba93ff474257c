//! What one node sees: the read side its endpoints (RPC, ZMQ, Template Provider) serve from.
//!
//! Its chain, mempool and templates are its own; the network's rules (`nBits`, time, limits)
//! are everyone's. The method names are [`Network`]'s, whose own accessors read the first node.

use std::sync::Arc;
use std::time::Duration;

use primitives::{CompactTarget, Difficulty, Hash256, Target};

use crate::chain::{Chain, StoredBlock};
use crate::config::SimnetConfig;
use crate::mempool::{Mempool, TxEntry};
use crate::network::{Network, NodeId, NodeState};
use crate::relay::PeerBytes;
use crate::template::Template;
use primitives::Timestamp;

/// A node's view of the network, borrowed from it.
#[derive(Clone, Copy)]
pub struct NodeView<'a> {
    net: &'a Network,
    node: &'a NodeState,
    id: NodeId,
}

impl<'a> NodeView<'a> {
    pub(crate) fn new(net: &'a Network, node: &'a NodeState, id: NodeId) -> NodeView<'a> {
        NodeView { net, node, id }
    }

    /// Its place in the network's node list.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Its configured name.
    pub fn name(&self) -> &'a str {
        &self.node.spec.name
    }

    /// How far it is from the rest of the network.
    pub fn relay_delay(&self) -> Duration {
        self.node.spec.relay_delay
    }

    /// What its peer link carried so far, by the model in [`crate::relay`].
    pub fn peer_bytes(&self) -> PeerBytes {
        self.node.peer
    }

    /// The whole network, for what is not one node's.
    pub fn network(&self) -> &'a Network {
        self.net
    }

    /// The network's configuration.
    pub fn config(&self) -> &'a SimnetConfig {
        self.net.config()
    }

    /// The chain name it reports (`getblockchaininfo`'s `chain`).
    pub fn chain_name(&self) -> &'static str {
        self.net.chain_name()
    }

    /// The node's latest template.
    pub fn template(&self) -> &'a Arc<Template> {
        &self.node.template
    }

    /// A template built now from the node's mempool and tip, without publishing it.
    pub fn preview_template(&self, now: Timestamp) -> Template {
        self.net.preview_template_at(self.id, now)
    }

    /// The node's chain.
    pub fn chain(&self) -> &'a Chain {
        &self.node.ledger.chain
    }

    /// The node's mempool.
    pub fn mempool(&self) -> &'a Mempool {
        &self.node.ledger.mempool
    }

    /// The node's tip.
    pub fn tip(&self) -> &'a Arc<StoredBlock> {
        self.chain().tip()
    }

    /// Height of the node's tip (`getblockcount`).
    pub fn height(&self) -> u32 {
        self.chain().tip_height()
    }

    /// A block the node knows, main chain or side branch.
    pub fn block(&self, hash: &Hash256) -> Option<&'a Arc<StoredBlock>> {
        self.chain().block(hash)
    }

    /// The node's main-chain block hash at `height` (`getblockhash`).
    pub fn block_hash(&self, height: u32) -> Option<Hash256> {
        self.chain().hash_at(height)
    }

    /// A transaction waiting in the node's mempool.
    pub fn mempool_entry(&self, txid: &Hash256) -> Option<&'a Arc<TxEntry>> {
        self.mempool().get(txid)
    }

    /// A mempool transaction's raw bytes.
    pub fn raw_transaction(&self, txid: &Hash256) -> Option<&'a [u8]> {
        self.mempool().get(txid).map(|e| &e.raw[..])
    }

    /// Median time past of the node's tip.
    pub fn median_time_past(&self) -> u32 {
        let chain = self.chain();
        chain.median_time_past(&chain.tip_hash()).unwrap_or(0)
    }

    /// The `nBits` every block carries (the difficulty is fixed).
    pub fn bits(&self) -> CompactTarget {
        self.net.bits()
    }

    /// The target `bits` decodes to.
    pub fn target(&self) -> Target {
        self.net.target()
    }

    /// The network difficulty (`getdifficulty`).
    pub fn difficulty(&self) -> Difficulty {
        self.net.difficulty()
    }

    /// The network's current simulated time.
    pub fn now(&self) -> Timestamp {
        self.net.now()
    }

    /// Unix time (seconds) of the simulated instant `t`.
    pub fn unix_time(&self, t: Timestamp) -> u64 {
        self.net.unix_time(t)
    }
}
