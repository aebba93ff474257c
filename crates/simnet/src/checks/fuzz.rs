//! The `submitblock` path under arbitrary bytes, shared by the cargo-fuzz target `submit_block`
//! (crates/simnet/fuzz) and the stable test that replays its corpus (tests/fuzz_corpus.rs).
//!
//! Random bytes rarely get past decoding, and never past the proof-of-work and merkle-root
//! checks, which take a hash preimage to pass. So each input is submitted twice: once as
//! received, and once "repaired" the way only an honest miner could: parent, `nBits`, merkle
//! root, witness commitment and nonce made right (each unless the input's nonce says to keep it
//! as is). The repaired block reaches the contextual checks (time, version, BIP34, witness,
//! weight), the connect checks against the mempool, acceptance, and stale branches; when it
//! lands on a stale branch, a child is mined on it to drive the reorganisation path, which
//! re-checks the fuzzed block against the transactions the reorg would make available.

use primitives::bitcoin::consensus::serialize;
use primitives::bitcoin::{Block, Transaction};
use primitives::coinbase::{witness_commitment, CoinbaseSpec, Payout, WITNESS_RESERVED_VALUE};
use primitives::{merkle_root, Difficulty, Hash256, Header, Target};

use crate::checks::SubmitError;
use crate::config::{MempoolConfig, SimnetConfig};
use crate::network::Network;
use primitives::Timestamp;

/// When blocks are submitted: a minute in, so header times have room on both sides.
const NOW: Timestamp = Timestamp::from_secs(60);

/// The network every input is judged against, built afresh so that inputs are independent:
/// [`fresh_network`], its clock at a minute.
pub fn network() -> Network {
    let mut net = fresh_network();
    net.handle_timeout(NOW);
    net
}

/// The network the fuzz harnesses start from (block checks and RPC alike): the easiest
/// difficulty (almost every header meets it, so repairing costs no grinding), no arrivals or
/// network blocks, two blocks mined on the base, and small blocks so that the mempool still
/// holds transactions for a block to spend.
pub fn fresh_network() -> Network {
    let config = SimnetConfig {
        seed: 7,
        network_difficulty: Difficulty::MIN,
        block_interval: std::time::Duration::ZERO,
        block_max_weight: 12_000,
        mempool: MempoolConfig {
            initial_txs: 30,
            arrival_rate: 0.0,
            ..MempoolConfig::default()
        },
        ..SimnetConfig::default()
    };
    let mut net = Network::new(config).expect("the fuzzing config is valid");
    for _ in 0..2 {
        net.mine_now(Timestamp::ZERO, vec![0x51]);
    }
    net
}

/// The submit path under `data`. Never panics (that is the property fuzzed).
pub fn submit(data: &[u8]) {
    let mut net = network();
    let _ = net.submit_block(NOW, data);
    let Ok(mut block) = crate::checks::decode(data) else {
        return;
    };
    repair(&net, &mut block);
    let repaired: Hash256 = block.block_hash().into();
    let time = block.header.time;
    if net.submit_block(NOW, &serialize(&block)) == Err(SubmitError::Inconclusive) {
        if let Some(child) = child_of(&net, repaired, time) {
            let _ = net.submit_block(NOW, &serialize(&child));
        }
    }
}

/// Makes right what random bytes cannot get right. The header's nonce picks what to keep as
/// is, so the fuzzer can still explore each check: bits 0-1 the parent (as is, the tip, its
/// parent, the base block), bit 2 `nBits`, bit 3 the witness commitment, bit 4 the merkle root.
fn repair(net: &Network, block: &mut Block) {
    let choice = block.header.nonce;
    let tip = net.tip();
    let parent = match choice & 3 {
        0 => None,
        1 => Some(tip.hash),
        2 => Some(tip.header.prev_hash),
        _ => net.block_hash(net.chain().base_height()),
    };
    if let Some(parent) = parent {
        block.header.prev_blockhash = parent.into();
    }
    if choice & 4 == 0 {
        block.header.bits = net.bits().into();
    }
    if choice & 8 == 0 {
        fix_witness_commitment(block);
    }
    if choice & 16 == 0 {
        let txids: Vec<Hash256> = block
            .txdata
            .iter()
            .map(|t| t.compute_txid().into())
            .collect();
        block.header.merkle_root = merkle_root(&txids).into();
    }
    grind(block);
}

/// Rewrites the coinbase's commitment output (the last one carrying the BIP141 header) to
/// commit to the block's transactions and the coinbase's reserved value.
fn fix_witness_commitment(block: &mut Block) {
    let wtxids: Vec<Hash256> = block
        .txdata
        .iter()
        .skip(1)
        .map(|t| t.compute_wtxid().into())
        .collect();
    let Some(coinbase) = block.txdata.first_mut() else {
        return;
    };
    let reserved = coinbase
        .input
        .first()
        .and_then(|i| i.witness.nth(0))
        .and_then(|w| <[u8; 32]>::try_from(w).ok())
        .unwrap_or(WITNESS_RESERVED_VALUE);
    let commitment = witness_commitment(&wtxids, &reserved);
    let header = primitives::coinbase::WITNESS_COMMITMENT_HEADER;
    let Some(out) = coinbase.output.iter_mut().rev().find(|o| {
        let s = o.script_pubkey.as_bytes();
        s.len() >= 38 && s[..6] == header
    }) else {
        return;
    };
    let mut script = out.script_pubkey.to_bytes();
    script[6..38].copy_from_slice(&commitment.0);
    out.script_pubkey = script.into();
}

/// A nonce that meets the header's own target, if one is found in a few tries (at the
/// network's difficulty almost any does; under a kept `nBits` maybe none).
fn grind(block: &mut Block) {
    let Ok(target) = Target::from_compact(Header::from(block.header).bits) else {
        return;
    };
    for _ in 0..64 {
        let hash: Hash256 = block.block_hash().into();
        if target.is_met_by(hash.as_bytes()) {
            return;
        }
        block.header.nonce = block.header.nonce.wrapping_add(1);
    }
}

/// An empty block on `parent` (a stale block just stored), to make its branch the longest.
fn child_of(net: &Network, parent: Hash256, parent_time: u32) -> Option<Block> {
    let height = net.block(&parent)?.height + 1;
    let mut spec = CoinbaseSpec::new(height, 4);
    spec.payouts.push(Payout {
        script_pubkey: vec![0x51].into(),
        value: primitives::bitcoin::Amount::ZERO,
    });
    let coinbase: Transaction = spec.build().ok()?.transaction(&[0; 4]).ok()?;
    let header = Header {
        version: 0x2000_0000,
        prev_hash: parent,
        merkle_root: coinbase.compute_txid().into(),
        time: parent_time.wrapping_add(1),
        bits: net.bits(),
        nonce: 0,
    };
    let mut block = Block {
        header: header.into(),
        txdata: vec![coinbase],
    };
    grind(&mut block);
    Some(block)
}
