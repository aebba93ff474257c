//! Peer traffic: the bytes a node's peer-to-peer link would carry to relay the network's
//! transactions and blocks, so that a farm-side node's share of the farm's bandwidth can be
//! counted as a real node's would be.
//!
//! # Model
//!
//! The rest of the network is one hub; each node has one peer link to it. Sizes are P2P wire
//! sizes: every message is a 24-byte header (magic 4, command 12, length 4, checksum 4) plus its
//! payload; counts are Bitcoin's compact sizes (1 byte below 253). `Up` is what the node sends
//! toward the network, `Down` what it receives.
//!
//! | exchange | direction | bytes |
//! |---|---|---|
//! | `inv` announcing a batch of transactions | down | 24 + 1 per batch, + 36 per transaction (type 4 + hash 32) |
//! | `getdata` for the batch's new transactions | up | 24 + 1 per batch, + 36 per transaction not already seen |
//! | `tx` | down | 24 + the transaction with witness, per transaction not already seen |
//! | BIP152 `cmpctblock` (high-bandwidth mode, coinbase prefilled) | toward the receiver | 24 + 80 (header) + 8 (nonce) + cs(n-1) + 6 per short id (n-1) + cs(1) + cs(0) + the coinbase with witness |
//! | `getblocktxn` for transactions the receiver had not seen | from the receiver | 24 + 32 (block hash) + cs(k) + cs(differential index) each |
//! | `blocktxn` | toward the receiver | 24 + 32 + cs(k) + the k transactions with witness |
//!
//! `cs(x)` is the compact size of `x`; `n` counts the block's transactions, the coinbase
//! included; `k` the missing ones. A batch's count prefix is taken as 1 byte (batches stay under
//! 253 transactions unless the announce interval is minutes long at a mainnet arrival rate).
//!
//! Transactions reach the hub when the network makes them. The hub announces them to each
//! node in batches, at multiples of `tx_announce_interval` (Bitcoin Core trickles to outbound
//! peers every 2 s on average, as a Poisson timer; a fixed grid keeps the model free of
//! randomness), or one by one when the interval is zero; a node has them its relay delay later.
//! A block travels as a compact block at once. A block submitted at a node goes out the same
//! way: `cmpctblock` up, and `getblocktxn`/`blocktxn` for what the hub had not seen. A
//! transaction announced to a node that already has it (from a block) costs its `inv` entry
//! only.
//!
//! Simplifications, each erring on the small side: one peer (a real node also answers its
//! other peers' `inv`s and getdata, and announces its own transactions, which the hub already
//! has); no `ping`, `addr` or `feefilter` chatter (a few hundred bytes a minute); the
//! `getblocktxn` round trip does not delay the block (the relay delay is the whole delay); no
//! version handshake.

use std::sync::Arc;

use primitives::compact_size;

use crate::chain::StoredBlock;
use crate::mempool::TxEntry;

/// A P2P message header: magic, command, payload length, checksum.
pub const MESSAGE_HEADER: u64 = 24;
/// One `inv`/`getdata` entry: a 4-byte type and a 32-byte hash.
pub const INV_ENTRY: u64 = 36;
/// A block header on the wire.
pub const BLOCK_HEADER: u64 = 80;
/// The nonce BIP152 short ids are salted with.
pub const COMPACT_NONCE: u64 = 8;
/// A BIP152 short transaction id.
pub const SHORT_ID: u64 = 6;
/// A block hash in `getblocktxn` and `blocktxn`.
pub const BLOCK_HASH: u64 = 32;
/// The count prefix of an `inv` or `getdata` batch (see the module comment).
pub const BATCH_COUNT: u64 = 1;

/// Bytes a node's peer link carried, each way, since the network started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerBytes {
    /// Sent by the node toward the network.
    pub up: u64,
    /// Received by the node from the network.
    pub down: u64,
}

impl PeerBytes {
    /// Counts bytes going `toward_network` (up) or toward the node (down).
    pub(crate) fn add(&mut self, toward_network: bool, bytes: u64) {
        if toward_network {
            self.up += bytes;
        } else {
            self.down += bytes;
        }
    }
}

/// What opening a new announcement batch costs: the `inv` message and the `getdata` answering
/// it (down, up).
pub fn batch_overhead() -> (u64, u64) {
    (MESSAGE_HEADER + BATCH_COUNT, MESSAGE_HEADER + BATCH_COUNT)
}

/// One announced transaction (down, up): its `inv` entry, and if the node had not seen it, a
/// `getdata` entry and the `tx` message.
pub fn tx_relay(raw_len: usize, new: bool) -> (u64, u64) {
    if new {
        (INV_ENTRY + MESSAGE_HEADER + raw_len as u64, INV_ENTRY)
    } else {
        (INV_ENTRY, 0)
    }
}

/// A `cmpctblock` message for `block`, its coinbase prefilled.
pub fn compact_block(block: &StoredBlock) -> u64 {
    let short_ids = block.txs.len() as u64;
    MESSAGE_HEADER
        + BLOCK_HEADER
        + COMPACT_NONCE
        + cs(short_ids)
        + SHORT_ID * short_ids
        + cs(1)
        + cs(0)
        + block.coinbase.total_size() as u64
}

/// `getblocktxn` (from the receiver) and `blocktxn` (to it) for the block's transactions at
/// `missing` (indexes into `block.txs`, ascending): (request, answer) bytes; (0, 0) when
/// nothing is missing.
pub fn missing_txs(block: &StoredBlock, missing: &[usize]) -> (u64, u64) {
    if missing.is_empty() {
        return (0, 0);
    }
    let k = cs(missing.len() as u64);
    // BIP152 indexes count the coinbase as 0 and are sent differentially.
    let mut prev: Option<u64> = None;
    let mut indexes = 0;
    for &i in missing {
        let index = i as u64 + 1;
        let diff = prev.map_or(index, |p| index - p - 1);
        indexes += cs(diff);
        prev = Some(index);
    }
    let request = MESSAGE_HEADER + BLOCK_HASH + k + indexes;
    let answer = MESSAGE_HEADER
        + BLOCK_HASH
        + k
        + missing
            .iter()
            .map(|&i| block.txs[i].raw.len() as u64)
            .sum::<u64>();
    (request, answer)
}

/// Indexes (into `block.txs`) of the transactions `seen` says the receiver lacks.
pub(crate) fn unseen(block: &StoredBlock, seen: impl Fn(&Arc<TxEntry>) -> bool) -> Vec<usize> {
    block
        .txs
        .iter()
        .enumerate()
        .filter(|(_, e)| !seen(e))
        .map(|(i, _)| i)
        .collect()
}

fn cs(n: u64) -> u64 {
    compact_size::len(n) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_already_seen_costs_its_announcement_only() {
        assert_eq!(tx_relay(200, true), (36 + 24 + 200, 36));
        assert_eq!(tx_relay(200, false), (36, 0));
        assert_eq!(batch_overhead(), (25, 25));
    }
}
