//! Helpers shared by the integration tests: running a network in virtual time and building
//! blocks from templates the way a pool would.
#![allow(dead_code)]

use std::time::Duration;

use primitives::bitcoin::consensus::serialize;
use primitives::bitcoin::{Block, Transaction, Witness};
use primitives::coinbase::{witness_commitment, CoinbaseSpec, WITNESS_RESERVED_VALUE};
use primitives::{merkle_root, CompactTarget, Difficulty, Hash256, Header, Target};
use simnet::{
    MempoolConfig, Network, NodeId, NodeOutput, Output, SimnetConfig, Template, Timestamp,
};

/// Runs the network through every deadline up to `until`, collecting outputs.
pub fn run(net: &mut Network, until: Timestamp) -> Vec<Output> {
    let mut out = Vec::new();
    while let Some(t) = net.poll_timeout() {
        if t > until {
            break;
        }
        out.extend(first_node(net, t));
    }
    out.extend(first_node(net, until));
    out
}

/// Runs what is due up to `now` and takes what happened at the first node.
pub fn first_node(net: &mut Network, now: Timestamp) -> Vec<Output> {
    every_node(net, now)
        .into_iter()
        .filter(|o| o.node == Some(NodeId::FIRST))
        .map(|o| o.output)
        .collect()
}

/// Runs what is due up to `now` and takes what happened, at every node and in the rest of the
/// network.
pub fn every_node(net: &mut Network, now: Timestamp) -> Vec<NodeOutput> {
    net.handle_timeout(now);
    std::iter::from_fn(|| net.poll_event()).collect()
}

/// Where a driven run goes next from `now`: a fixed `step` on, or else the network's next
/// deadline, never past `end`.
pub fn next_stop(
    net: &Network,
    now: Timestamp,
    step: Option<Duration>,
    end: Timestamp,
) -> Timestamp {
    match step {
        Some(s) => now + s,
        None => net.poll_timeout().unwrap_or(end),
    }
    .min(end)
}

pub fn secs(s: u64) -> Timestamp {
    Timestamp::from_secs(s)
}

/// Difficulty 2^-20: a block takes about 4,096 hashes to find.
pub fn easy_difficulty() -> Difficulty {
    Difficulty::new(1.0 / (1u64 << 20) as f64).unwrap()
}

/// A network for submission tests: easy target, a modest mempool, no network blocks unless
/// the test asks for them.
pub fn submit_config(seed: u64) -> SimnetConfig {
    SimnetConfig {
        seed,
        network_difficulty: easy_difficulty(),
        block_interval: Duration::ZERO,
        mempool: MempoolConfig {
            initial_txs: 300,
            ..Default::default()
        },
        ..Default::default()
    }
}

pub fn payout_script() -> Vec<u8> {
    let mut s = vec![0x00, 0x14];
    s.extend_from_slice(&[0x42; 20]);
    s
}

/// A block under construction, every field open to tampering.
#[derive(Clone)]
pub struct Draft {
    pub spec: CoinbaseSpec,
    pub extranonce: Vec<u8>,
    pub txs: Vec<Transaction>,
    pub prev_hash: Hash256,
    pub time: u32,
    pub bits: CompactTarget,
    pub version: u32,
    /// Replaces the commitment computed from `txs`.
    pub commitment_override: Option<Hash256>,
    /// Replaces the merkle root computed from the transactions.
    pub merkle_override: Option<Hash256>,
    /// Leave the coinbase without its witness reserved value (as legacy-coinbase pools do).
    pub strip_coinbase_witness: bool,
}

impl Draft {
    pub fn from_template(t: &Template) -> Draft {
        Draft {
            spec: t.coinbase_spec(8, payout_script()),
            extranonce: vec![0; 8],
            txs: t.transactions.iter().map(|e| e.tx.clone()).collect(),
            prev_hash: t.prev_hash,
            time: t.curtime,
            bits: t.bits,
            version: t.version,
            commitment_override: None,
            merkle_override: None,
            strip_coinbase_witness: false,
        }
    }

    pub fn coinbase(&self) -> Transaction {
        let wtxids: Vec<Hash256> = self.txs.iter().map(|t| t.compute_wtxid().into()).collect();
        let mut spec = self.spec.clone();
        spec.witness_commitment = Some(
            self.commitment_override
                .unwrap_or_else(|| witness_commitment(&wtxids, &WITNESS_RESERVED_VALUE)),
        );
        let mut cb = spec.build().unwrap().transaction(&self.extranonce).unwrap();
        if self.strip_coinbase_witness {
            cb.input[0].witness = Witness::new();
        }
        cb
    }

    pub fn block(&self, nonce: u32) -> Block {
        let cb = self.coinbase();
        let mut txids: Vec<Hash256> = vec![cb.compute_txid().into()];
        txids.extend(self.txs.iter().map(|t| Hash256::from(t.compute_txid())));
        let header = Header {
            version: self.version,
            prev_hash: self.prev_hash,
            merkle_root: self.merkle_override.unwrap_or_else(|| merkle_root(&txids)),
            time: self.time,
            bits: self.bits,
            nonce,
        };
        let mut txdata = vec![cb];
        txdata.extend(self.txs.iter().cloned());
        Block {
            header: header.into(),
            txdata,
        }
    }

    /// The block with a nonce whose hash meets the target its own bits decode to.
    pub fn mine(&self) -> Block {
        self.grind(true)
    }

    /// The block with a nonce whose hash does not meet its target.
    pub fn mine_failing(&self) -> Block {
        self.grind(false)
    }

    fn grind(&self, meet: bool) -> Block {
        let target = Target::from_compact(self.bits).unwrap();
        let mut block = self.block(0);
        for nonce in 0..u32::MAX {
            block.header.nonce = nonce;
            let hash: Hash256 = block.block_hash().into();
            if target.is_met_by(hash.as_bytes()) == meet {
                return block;
            }
        }
        panic!("no nonce found");
    }
}

pub fn raw(block: &Block) -> Vec<u8> {
    serialize(block)
}

pub fn templates(outputs: &[Output]) -> Vec<std::sync::Arc<Template>> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::TemplateCreated(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}
