//! The mempool: waiting transactions kept in fee-rate order, so that choosing a block's
//! transactions is a walk from the top rather than a sort.
//!
//! Simulated transactions spend outpoints nobody has, so none has an ancestor in the mempool:
//! each one is its own package and its own fee rate is its ancestor fee rate, which makes the
//! walk the same greedy choice Bitcoin Core's block assembler makes.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use primitives::bitcoin::consensus::serialize;
use primitives::bitcoin::Transaction;
use primitives::Hash256;

use primitives::Timestamp;

/// A transaction with what every reader of it needs, computed once: ids, raw bytes, weight.
#[derive(Clone, Debug)]
pub struct TxEntry {
    /// The transaction.
    pub tx: Transaction,
    /// Consensus serialization with witness (what `getrawtransaction` and templates hand out).
    pub raw: Box<[u8]>,
    /// Transaction id (no witness).
    pub txid: Hash256,
    /// Witness transaction id.
    pub wtxid: Hash256,
    /// The fee it pays, in sats. Simulated inputs have no real value, so this is a record.
    pub fee: u64,
    /// Weight in weight units (BIP141).
    pub weight: u64,
    /// Virtual size: weight / 4, rounded up.
    pub vsize: u64,
    /// When it entered the mempool.
    pub time: Timestamp,
}

impl TxEntry {
    /// Computes ids, serialization, weight and virtual size for `tx`, which pays `fee` sats and
    /// entered the mempool at `time`.
    pub fn new(tx: Transaction, fee: u64, time: Timestamp) -> Self {
        let weight = tx.weight().to_wu();
        TxEntry {
            raw: serialize(&tx).into_boxed_slice(),
            txid: tx.compute_txid().into(),
            wtxid: tx.compute_wtxid().into(),
            fee,
            weight,
            vsize: weight.div_ceil(4),
            time,
            tx,
        }
    }

    /// Its fee over its virtual size.
    pub fn fee_rate(&self) -> FeeRate {
        FeeRate {
            fee: self.fee,
            vsize: self.vsize,
        }
    }
}

/// A fee per virtual byte kept as the exact fraction, compared by cross-multiplication as Core
/// compares fee rates, so equal rates are equal whatever their sizes.
#[derive(Clone, Copy, Debug)]
pub struct FeeRate {
    /// Fee in sats.
    pub fee: u64,
    /// Virtual size in vbytes.
    pub vsize: u64,
}

impl FeeRate {
    /// The rate in sat/vB as a float, for display (a zero size counts as one).
    pub fn sat_per_vb(&self) -> f64 {
        self.fee as f64 / self.vsize.max(1) as f64
    }
}

impl Ord for FeeRate {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.fee as u128 * o.vsize as u128).cmp(&(o.fee as u128 * self.vsize as u128))
    }
}

impl PartialOrd for FeeRate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl PartialEq for FeeRate {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl Eq for FeeRate {}

/// Ascending order puts the lowest rate, and among equal rates the newest, first: iterating in
/// reverse gives the best rate first and, among equals, the earliest arrival.
type RateKey = (FeeRate, Reverse<u64>);

/// What a walk chose.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Chosen transactions, in the order chosen (best fee rate first).
    pub txs: Vec<Arc<TxEntry>>,
    /// Their fees in sats.
    pub fees: u64,
    /// Their weight in WU.
    pub weight: u64,
}

/// A change to the mempool that bitcoind reports on its ZMQ `sequence` topic, with the
/// mempool sequence number it took. Recorded only while asked for
/// ([`Mempool::record_events`]).
#[derive(Clone, Debug)]
pub enum MempoolEvent {
    /// Entered the mempool (`A`).
    Added {
        /// The transaction.
        entry: Arc<TxEntry>,
        /// The mempool sequence number it took.
        sequence: u64,
    },
    /// Left it for a reason other than a block: evicted when the mempool was full (`R`).
    Removed {
        /// The transaction.
        entry: Arc<TxEntry>,
        /// The mempool sequence number it took.
        sequence: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
/// Why a transaction was not accepted into the mempool.
pub enum MempoolError {
    #[error("txn-already-in-mempool")]
    /// A transaction with that txid is already waiting.
    AlreadyHave,
}

// Bitcoin Core's assembler gives up after this many transactions in a row that do not fit once
// the block is within `FULL_ENOUGH_WEIGHT_DELTA` of full: it bounds the walk on huge mempools.
const MAX_CONSECUTIVE_FAILURES: u32 = 1000;
const FULL_ENOUGH_WEIGHT_DELTA: u64 = 4000;

#[derive(Clone, Debug)]
/// Waiting transactions kept in fee-rate order, so that choosing a block's transactions is a
/// walk; the lowest rates are evicted past `max_vsize`.
pub struct Mempool {
    by_txid: HashMap<Hash256, (Arc<TxEntry>, u64)>,
    by_rate: BTreeMap<RateKey, Arc<TxEntry>>,
    total_vsize: u64,
    total_fees: u64,
    next_seq: u64,
    max_vsize: u64,
    /// Core's mempool sequence: starts at 1, and every entry and every removal (a block's
    /// included) takes the current value and moves it on (`GetAndIncrementSequence`).
    sequence: u64,
    /// What `sequence` reports, while recorded.
    events: Option<Vec<MempoolEvent>>,
}

impl Mempool {
    /// An empty mempool holding at most `max_vsize` vbytes.
    pub fn new(max_vsize: u64) -> Self {
        Mempool {
            by_txid: HashMap::new(),
            by_rate: BTreeMap::new(),
            total_vsize: 0,
            total_fees: 0,
            next_seq: 0,
            max_vsize,
            sequence: 1,
            events: None,
        }
    }

    /// Adds a transaction, then evicts the lowest fee rates while over the size limit (which
    /// may evict the newcomer itself); returns what was evicted.
    pub fn insert(&mut self, entry: Arc<TxEntry>) -> Result<Vec<Arc<TxEntry>>, MempoolError> {
        if self.by_txid.contains_key(&entry.txid) {
            return Err(MempoolError::AlreadyHave);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.total_vsize += entry.vsize;
        self.total_fees += entry.fee;
        self.by_rate
            .insert((entry.fee_rate(), Reverse(seq)), entry.clone());
        self.by_txid.insert(entry.txid, (entry.clone(), seq));
        let sequence = self.next_sequence();
        if let Some(events) = &mut self.events {
            events.push(MempoolEvent::Added { entry, sequence });
        }
        let mut evicted = Vec::new();
        while self.total_vsize > self.max_vsize {
            let Some((_, lowest)) = self.by_rate.first_key_value() else {
                break;
            };
            let txid = lowest.txid;
            if let Some(entry) = self.take(&txid) {
                let sequence = self.next_sequence();
                if let Some(events) = &mut self.events {
                    events.push(MempoolEvent::Removed {
                        entry: entry.clone(),
                        sequence,
                    });
                }
                evicted.push(entry);
            }
        }
        Ok(evicted)
    }

    /// Removes a transaction a block confirmed (no event: bitcoind reports the block instead).
    pub fn remove(&mut self, txid: &Hash256) -> Option<Arc<TxEntry>> {
        let entry = self.take(txid)?;
        self.next_sequence();
        Some(entry)
    }

    fn take(&mut self, txid: &Hash256) -> Option<Arc<TxEntry>> {
        let (entry, seq) = self.by_txid.remove(txid)?;
        self.by_rate.remove(&(entry.fee_rate(), Reverse(seq)));
        self.total_vsize -= entry.vsize;
        self.total_fees -= entry.fee;
        Some(entry)
    }

    fn next_sequence(&mut self) -> u64 {
        let s = self.sequence;
        self.sequence += 1;
        s
    }

    /// The mempool sequence the next change will take (`getrawmempool`'s `mempool_sequence`).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Starts (or stops) recording [`MempoolEvent`]s for [`Mempool::take_events`].
    pub fn record_events(&mut self, on: bool) {
        self.events = on.then(Vec::new);
    }

    /// The events recorded since the last call.
    pub fn take_events(&mut self) -> Vec<MempoolEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Whether events are being recorded and some are waiting.
    pub fn has_events(&self) -> bool {
        self.events.as_ref().is_some_and(|e| !e.is_empty())
    }

    /// The waiting transaction with this txid.
    pub fn get(&self, txid: &Hash256) -> Option<&Arc<TxEntry>> {
        self.by_txid.get(txid).map(|(e, _)| e)
    }

    /// Whether a transaction with this txid is waiting.
    pub fn contains(&self, txid: &Hash256) -> bool {
        self.by_txid.contains_key(txid)
    }

    /// Waiting transactions.
    pub fn len(&self) -> usize {
        self.by_txid.len()
    }

    /// Whether no transaction is waiting.
    pub fn is_empty(&self) -> bool {
        self.by_txid.is_empty()
    }

    /// Sum of the virtual sizes of all waiting transactions.
    pub fn total_vsize(&self) -> u64 {
        self.total_vsize
    }

    /// Sum of the fees of all waiting transactions, in sats.
    pub fn total_fees(&self) -> u64 {
        self.total_fees
    }

    /// Best fee rate first; among equal rates, earliest arrival first.
    pub fn iter_by_fee_rate(&self) -> impl Iterator<Item = &Arc<TxEntry>> + '_ {
        self.by_rate.values().rev()
    }

    /// All txids, in [`Mempool::iter_by_fee_rate`] order (deterministic, unlike a hash map's).
    pub fn txids(&self) -> Vec<Hash256> {
        self.iter_by_fee_rate().map(|e| e.txid).collect()
    }

    /// Greedy choice by fee rate of transactions weighing at most `max_weight` in total.
    pub fn select(&self, max_weight: u64) -> Selection {
        let mut txs = Vec::new();
        let (fees, weight) = self.walk(max_weight, |e| txs.push(e.clone()));
        Selection { txs, fees, weight }
    }

    /// The fees and weight [`Mempool::select`] would choose, without collecting the choice.
    pub fn selection_fees(&self, max_weight: u64) -> (u64, u64) {
        self.walk(max_weight, |_| {})
    }

    fn walk(&self, max_weight: u64, mut take: impl FnMut(&Arc<TxEntry>)) -> (u64, u64) {
        let (mut fees, mut weight) = (0u64, 0u64);
        let mut failures = 0u32;
        for e in self.iter_by_fee_rate() {
            if weight + e.weight <= max_weight {
                take(e);
                weight += e.weight;
                fees += e.fee;
                failures = 0;
            } else {
                failures += 1;
                if failures > MAX_CONSECUTIVE_FAILURES
                    && weight + FULL_ENOUGH_WEIGHT_DELTA > max_weight
                {
                    break;
                }
            }
        }
        (fees, weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist;
    use crate::txgen::build_tx;

    fn entry(rng: &mut dist::Rng, vsize: u32, fee: u64) -> Arc<TxEntry> {
        Arc::new(TxEntry::new(build_tx(rng, vsize), fee, Timestamp::ZERO))
    }

    #[test]
    fn fee_rates_compare_as_fractions() {
        let a = FeeRate {
            fee: 300,
            vsize: 150,
        };
        let b = FeeRate {
            fee: 400,
            vsize: 200,
        };
        assert_eq!(a, b);
        assert!(
            FeeRate {
                fee: 301,
                vsize: 150
            } > b
        );
        assert!(FeeRate { fee: 1, vsize: 3 } < FeeRate { fee: 1, vsize: 2 });
    }

    #[test]
    fn walk_is_best_rate_first_then_earliest() {
        let mut rng = dist::stream(1, "mempool");
        let mut m = Mempool::new(u64::MAX);
        let low = entry(&mut rng, 200, 200); // 1 sat/vB
        let high = entry(&mut rng, 200, 2000); // 10
        let mid_early = entry(&mut rng, 100, 500); // 5
        let mid_late = entry(&mut rng, 200, 1000); // 5
        for e in [&low, &mid_early, &high, &mid_late] {
            m.insert(e.clone()).unwrap();
        }
        let order: Vec<_> = m.iter_by_fee_rate().map(|e| e.txid).collect();
        assert_eq!(order, [high.txid, mid_early.txid, mid_late.txid, low.txid]);
        assert_eq!(
            m.insert(low.clone()).unwrap_err(),
            MempoolError::AlreadyHave
        );
        assert_eq!(m.total_fees(), 3700);
        assert_eq!(m.total_vsize(), 700);
        assert!(m.remove(&mid_early.txid).is_some());
        assert!(m.remove(&mid_early.txid).is_none());
        assert_eq!(m.txids(), [high.txid, mid_late.txid, low.txid]);
        assert_eq!(m.total_vsize(), 600);
    }

    #[test]
    fn selection_skips_what_does_not_fit_and_keeps_going() {
        let mut rng = dist::stream(2, "mempool");
        let mut m = Mempool::new(u64::MAX);
        let big = entry(&mut rng, 1000, 100_000); // 100 sat/vB, 4000 WU
        let small_a = entry(&mut rng, 200, 10_000); // 50
        let small_b = entry(&mut rng, 300, 3_000); // 10
        for e in [&big, &small_a, &small_b] {
            m.insert(e.clone()).unwrap();
        }
        // Room for 2000 WU: the big one is skipped, both small ones fit.
        let s = m.select(2_000);
        let ids: Vec<_> = s.txs.iter().map(|e| e.txid).collect();
        assert_eq!(ids, [small_a.txid, small_b.txid]);
        assert_eq!((s.fees, s.weight), (13_000, 2_000));
        assert_eq!(m.selection_fees(2_000), (13_000, 2_000));
        assert_eq!(m.select(6_000).fees, 113_000);
    }

    #[test]
    fn over_the_limit_the_lowest_rate_goes() {
        let mut rng = dist::stream(3, "mempool");
        let mut m = Mempool::new(500);
        let a = entry(&mut rng, 200, 400);
        let b = entry(&mut rng, 200, 1000);
        let c = entry(&mut rng, 200, 600);
        assert!(m.insert(a.clone()).unwrap().is_empty());
        assert!(m.insert(b.clone()).unwrap().is_empty());
        let evicted = m.insert(c.clone()).unwrap();
        assert_eq!(evicted.len(), 1);
        assert_eq!(evicted[0].txid, a.txid);
        assert_eq!(m.len(), 2);
        assert!(!m.contains(&a.txid));
    }
}
