//! The rest of the Bitcoin network, as the pool sees it: new tips as a Poisson process, and
//! the template the pool's node offers on each.

use std::sync::Arc;
use std::time::Duration;

use pool::template::{Template, TemplateTx};
use primitives::bitcoin::absolute::LockTime;
use primitives::bitcoin::hashes::Hash as _;
use primitives::bitcoin::transaction::Version;
use primitives::bitcoin::{
    consensus, Amount, OutPoint, ScriptBuf, Sequence, Transaction, TxIn, TxOut, Txid, Witness,
};
use primitives::{sha256d, CompactTarget, Hash256};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha12Rng;

use super::clock::nanos;
use primitives::Timestamp;

/// The height of tip 0's template.
const FIRST_HEIGHT: u32 = 900_000;
/// The node's clock (`curtime`) at virtual time zero.
const EPOCH_UNIX: u32 = 1_750_000_000;
/// Mainnet-like difficulty: no scaled-down share will ever be a block.
const BITS: CompactTarget = CompactTarget::from_consensus(0x1702_8c61);
const SUBSIDY_SAT: u64 = 312_500_000;
/// Transactions per template besides the coinbase (so jobs carry a real merkle branch), picked
/// in turn from a small mempool built once.
const TXS: usize = 3;
const MEMPOOL: usize = 8;

/// A random stream for one purpose, derived from the run's seed: the draws of one purpose
/// never shift another's (tips stay the same whatever the devices do).
pub fn stream(seed: u64, purpose: &str, index: u64) -> ChaCha12Rng {
    let mut material = Vec::with_capacity(16 + purpose.len());
    material.extend_from_slice(&seed.to_le_bytes());
    material.extend_from_slice(&index.to_le_bytes());
    material.extend_from_slice(purpose.as_bytes());
    ChaCha12Rng::from_seed(sha256d(&material).0)
}

/// Uniform on (0, 1]: never zero, so its logarithm is finite.
pub fn uniform(rng: &mut impl RngCore) -> f64 {
    ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
}

/// An exponential gap of mean `mean`: the time to the next event of a Poisson process.
pub fn exponential(rng: &mut impl RngCore, mean: Duration) -> Duration {
    Duration::from_secs_f64(-uniform(rng).ln() * mean.as_secs_f64())
}

/// The times of tips 0, 1, ..., `count - 1`: tip 0 at time zero, then exponential gaps of
/// mean `block_interval`.
pub fn tip_times(seed: u64, block_interval: Duration, count: u32) -> Vec<Timestamp> {
    let mut rng = stream(seed, "tips", 0);
    let mut at = Timestamp::ZERO;
    let mut times = Vec::with_capacity(count as usize);
    for _ in 0..count {
        times.push(at);
        // At least a nanosecond apart, so tips keep their order on the clock.
        let gap = nanos(exponential(&mut rng, block_interval)).max(1);
        at = Timestamp::from_nanos(at.as_nanos().saturating_add(gap));
    }
    times
}

/// The pool's node: a template on every tip.
pub struct Node {
    seed: u64,
    mempool: Vec<TemplateTx>,
}

impl Node {
    /// A node whose mempool follows from `seed`.
    pub fn new(seed: u64) -> Self {
        let tag = sha256d(&[&seed.to_le_bytes()[..], b"mempool"].concat());
        Node {
            seed,
            mempool: (0..MEMPOOL as u8).map(|i| transaction(tag, i)).collect(),
        }
    }

    /// The template offered once tip `k` (found at `at`) is known: a new previous block hash,
    /// height and time, and transactions that change from tip to tip.
    pub fn template(&self, k: u32, at: Timestamp) -> Template {
        let prev_hash = sha256d(&[&self.seed.to_le_bytes()[..], &k.to_le_bytes(), b"tip"].concat());
        let transactions: Vec<TemplateTx> = (0..TXS)
            .map(|i| self.mempool[(k as usize + i) % MEMPOOL].clone())
            .collect();
        let fees: u64 = transactions.iter().map(|t| t.fee.to_sat()).sum();
        let curtime = EPOCH_UNIX.saturating_add(at.since(Timestamp::ZERO).as_secs() as u32);
        Template {
            height: FIRST_HEIGHT + k,
            prev_hash,
            version: 0x2000_0000,
            bits: BITS,
            curtime,
            mintime: curtime - 600,
            median_time_past: None,
            coinbase_value: Amount::from_sat(SUBSIDY_SAT + fees),
            witness_commitment: None,
            transactions: Arc::from(transactions),
            longpoll_id: None,
        }
    }
}

/// A small valid transaction, distinct per `tag` and index.
fn transaction(tag: Hash256, i: u8) -> TemplateTx {
    let tx = Transaction {
        version: Version::TWO,
        lock_time: LockTime::ZERO,
        input: vec![TxIn {
            previous_output: OutPoint {
                txid: Txid::from_byte_array(tag.0),
                vout: u32::from(i),
            },
            script_sig: ScriptBuf::from_bytes(vec![0x51]),
            sequence: Sequence::MAX,
            witness: Witness::new(),
        }],
        output: vec![TxOut {
            value: Amount::from_sat(50_000),
            script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
        }],
    };
    TemplateTx {
        data: consensus::serialize(&tx),
        txid: Hash256::from(tx.compute_txid()),
        fee: Amount::from_sat(1_000 * (u64::from(i) + 1)),
        weight: tx.weight().to_wu() as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tips_are_a_poisson_process_of_the_given_mean() {
        let b = Duration::from_secs(10);
        let times = tip_times(7, b, 20_001);
        assert_eq!(times[0], Timestamp::ZERO);
        let gaps: Vec<f64> = times
            .windows(2)
            .map(|w| w[1].since(w[0]).as_secs_f64())
            .collect();
        assert!(gaps.iter().all(|&g| g > 0.0));
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        // Exponential: sd = mean, so the mean of 20000 gaps is within 4 standard errors of B.
        assert!((mean - 10.0).abs() < 4.0 * 10.0 / n.sqrt(), "{mean}");
        // Memoryless: P(gap > B) = e^-1.
        let over = gaps.iter().filter(|&&g| g > 10.0).count() as f64 / n;
        assert!((over - (-1f64).exp()).abs() < 0.015, "{over}");
        assert_eq!(tip_times(7, b, 50), times[..50], "same seed, same tips");
        assert_ne!(tip_times(8, b, 50), times[..50]);
    }

    #[test]
    fn every_tip_has_its_own_template() {
        let node = Node::new(1);
        let a = node.template(5, Timestamp::from_nanos(12_500_000_000));
        let b = node.template(6, Timestamp::from_nanos(13_000_000_000));
        assert_ne!(a.prev_hash, b.prev_hash);
        assert_eq!(b.height, a.height + 1);
        assert_eq!(a.curtime, EPOCH_UNIX + 12);
        assert_eq!(a.transactions.len(), TXS);
        assert_ne!(a.transactions[0].txid, b.transactions[0].txid);
        let fees = a.fees().to_sat();
        assert!(fees > 0);
        assert_eq!(a.coinbase_value, Amount::from_sat(SUBSIDY_SAT + fees));
        assert_eq!(
            Node::new(1).template(5, Timestamp::from_nanos(0)).prev_hash,
            a.prev_hash
        );
        assert_ne!(
            Node::new(2).template(5, Timestamp::from_nanos(0)).prev_hash,
            a.prev_hash
        );
    }
}
