//! A block template as the engine receives it from its job source (bitcoind's
//! `getblocktemplate`, or an SV2 Template Provider), reduced to what jobs and blocks need.

use std::sync::Arc;

use primitives::bitcoin::Amount;
use primitives::{CompactTarget, Hash256};

/// One non-coinbase transaction of a template, in block order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateTx {
    /// Serialized as it goes into the block (with witness data, if any).
    pub data: Vec<u8>,
    pub txid: Hash256,
    pub fee: Amount,
    pub weight: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// Height of the block this template builds.
    pub height: u32,
    pub prev_hash: Hash256,
    pub version: u32,
    pub bits: CompactTarget,
    /// The node's clock when it made the template (`curtime`), and the earliest valid
    /// header time (`mintime`, median time past + 1).
    pub curtime: u32,
    pub mintime: u32,
    /// Subsidy plus fees: what the coinbase outputs may add up to.
    pub coinbase_value: Amount,
    /// The commitment hash of `default_witness_commitment` (the 32 bytes after the
    /// `6a24aa21a9ed` header); `None` when no transaction has witness data.
    pub witness_commitment: Option<Hash256>,
    pub transactions: Arc<[TemplateTx]>,
    /// Opaque id to long-poll on for the next template (`longpollid`), where the source has one.
    pub longpoll_id: Option<String>,
}

impl Template {
    pub fn txids(&self) -> impl Iterator<Item = Hash256> + '_ {
        self.transactions.iter().map(|t| t.txid)
    }

    pub fn fees(&self) -> Amount {
        self.transactions.iter().map(|t| t.fee).sum()
    }
}
