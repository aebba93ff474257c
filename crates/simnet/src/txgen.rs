//! The transaction model: what a mempool arrival looks like.
//!
//! Each arrival draws a virtual size and a fee rate from the configured distributions, then a
//! structurally valid segwit transaction is built to exactly that virtual size: P2WPKH-style
//! inputs (empty scriptSig, a signature-sized and a pubkey-sized witness item) spending random
//! outpoints, P2WPKH outputs, and one last output whose script length, together with the first
//! signature's length, lands the weight on the drawn size. Scripts do not verify and inputs have
//! no real value; the fee is a recorded number kept beside the transaction.

use primitives::bitcoin::absolute::LockTime;
use primitives::bitcoin::hashes::Hash as _;
use primitives::bitcoin::transaction::Version;
use primitives::bitcoin::{
    Amount, OutPoint, ScriptBuf, Sequence, Transaction, TxIn, TxOut, Txid, Witness,
};
use rand_chacha::rand_core::RngCore;

use crate::dist;

/// The smallest virtual size a model may ask for. Our smallest shape (one input, one output) is
/// 88 vB, and Core refuses transactions whose non-witness part is under 65 bytes.
pub const MIN_VSIZE: u32 = 100;
/// Core's standardness limit: 400,000 weight units.
pub const MAX_VSIZE: u32 = 100_000;

/// Virtual sizes: `min + round(X)` with `X` log-normal, capped at `max`.
///
/// The shift puts the floor at the smallest common real transaction (a one-input, one-output
/// taproot spend is 111 vB; one-input two-output P2WPKH is 141 vB) while the log-normal body
/// gives the long right tail of batched payouts and consolidations.
#[derive(Clone, Debug, PartialEq)]
pub struct VsizeModel {
    /// Smallest size drawn, vB.
    pub min: u32,
    /// Median of the whole distribution, vB (must exceed `min`).
    pub median: f64,
    /// Log-normal shape of the part above `min`.
    pub sigma: f64,
    /// Largest size drawn, vB.
    pub max: u32,
}

impl Default for VsizeModel {
    fn default() -> Self {
        VsizeModel {
            min: 110,
            median: 200.0,
            sigma: 1.0,
            max: MAX_VSIZE,
        }
    }
}

impl VsizeModel {
    fn excess_median(&self) -> f64 {
        self.median - self.min as f64
    }

    /// Draws a virtual size in vbytes.
    pub fn sample(&self, rng: &mut impl RngCore) -> u32 {
        let x = dist::log_normal(rng, self.excess_median(), self.sigma);
        let v = self.min as f64 + x.round();
        v.min(self.max as f64) as u32
    }

    /// `P(vsize <= k)` for a whole number of vbytes `k`.
    pub fn cdf(&self, k: u32) -> f64 {
        if k < self.min {
            0.0
        } else if k >= self.max {
            1.0
        } else {
            // round(X) <= k - min  <=>  X < k - min + 0.5
            dist::log_normal_cdf(
                (k - self.min) as f64 + 0.5,
                self.excess_median(),
                self.sigma,
            )
        }
    }
}

/// Fee rates in sat/vB: log-normal, clamped into `[floor, max]`.
///
/// The floor is the minimum relay fee most of the network enforced (1 sat/vB); the mass the
/// log-normal puts below it lands on it, as the many transactions paying exactly the minimum do.
#[derive(Clone, Debug, PartialEq)]
pub struct FeeRateModel {
    /// Lowest rate drawn (sat/vB): the relay floor the mass below it lands on.
    pub floor: f64,
    /// Median of the log-normal (and of the clamped distribution, when above the floor).
    pub median: f64,
    /// Shape of the log-normal: the standard deviation of the rate's natural log.
    pub sigma: f64,
    /// Cap against absurd draws far in the tail.
    pub max: f64,
}

impl Default for FeeRateModel {
    fn default() -> Self {
        FeeRateModel {
            floor: 1.0,
            median: 3.0,
            sigma: 1.4,
            max: 5000.0,
        }
    }
}

impl FeeRateModel {
    /// Draws a fee rate in sat/vB.
    pub fn sample(&self, rng: &mut impl RngCore) -> f64 {
        dist::log_normal(rng, self.median, self.sigma).clamp(self.floor, self.max)
    }

    /// `P(rate <= x)`.
    pub fn cdf(&self, x: f64) -> f64 {
        if x < self.floor {
            0.0
        } else if x >= self.max {
            1.0
        } else {
            dist::log_normal_cdf(x, self.median, self.sigma)
        }
    }
}

/// One arrival: the transaction and what was drawn for it.
#[derive(Clone, Debug)]
pub struct GeneratedTx {
    /// The transaction.
    pub tx: Transaction,
    /// The virtual size drawn; the transaction's vsize is exactly this.
    pub drawn_vsize: u32,
    /// sat/vB as drawn; the recorded fee rate `fee / vsize` is this rounded up to a whole sat.
    pub drawn_fee_rate: f64,
    /// Fee in sats.
    pub fee: u64,
}

/// Draws one transaction.
pub fn generate(
    rng: &mut impl RngCore,
    vsize: &VsizeModel,
    fee_rate: &FeeRateModel,
) -> GeneratedTx {
    let drawn_vsize = vsize.sample(rng);
    let drawn_fee_rate = fee_rate.sample(rng);
    let tx = build_tx(rng, drawn_vsize);
    let actual = tx.vsize() as u64;
    // Rounding up keeps the recorded rate at or above the floor.
    let fee = (drawn_fee_rate * actual as f64).ceil() as u64;
    GeneratedTx {
        tx,
        drawn_vsize,
        drawn_fee_rate,
        fee,
    }
}

// Sizes of the parts, in bytes, for choosing the shape before measuring it.
const P2WPKH_OUTPUT: u64 = 8 + 1 + 22;
const SIG_LEN: usize = 71;
const PUBKEY_LEN: usize = 33;

/// A segwit transaction of exactly `vsize` virtual bytes (or the smallest shape, 88 vB, if less
/// is asked for).
pub fn build_tx(rng: &mut impl RngCore, vsize: u32) -> Transaction {
    let target_weight = 4 * vsize.max(1) as u64;
    // One input per 250 vB or so: large transactions are part consolidation, part batch payout.
    let n_in = 1 + (vsize.saturating_sub(110) / 250).min(2000) as usize;
    let input = (0..n_in).map(|_| random_input(rng)).collect();
    let mut tx = Transaction {
        version: Version::TWO,
        lock_time: LockTime::ZERO,
        input,
        output: vec![TxOut {
            value: Amount::ZERO,
            script_pubkey: ScriptBuf::new(),
        }],
    };
    // Fill most of the remaining non-witness room with payment outputs, leaving 34 to 64 bytes
    // for the last output's script; the exact fit is made by measuring, below.
    let room = target_weight.saturating_sub(tx.weight().to_wu()) / 4;
    let payments = room.saturating_sub(34) / P2WPKH_OUTPUT;
    let mut payment_outputs: Vec<TxOut> = (0..payments).map(|_| random_p2wpkh(rng)).collect();
    payment_outputs.push(tx.output.pop().expect("one output"));
    tx.output = payment_outputs;

    let need = target_weight.saturating_sub(tx.weight().to_wu());
    let script_len = (need / 4) as usize;
    let extra_sig = (need % 4) as usize;
    let last = tx.output.last_mut().expect("one output");
    last.script_pubkey = filler_script(rng, script_len);
    if extra_sig > 0 {
        tx.input[0].witness = p2wpkh_witness(rng, SIG_LEN + extra_sig);
    }
    debug_assert!(
        tx.weight().to_wu() == target_weight || target_weight < 4 * MIN_VSIZE as u64,
        "built {} WU for {} WU",
        tx.weight().to_wu(),
        target_weight
    );
    tx
}

fn random_input(rng: &mut impl RngCore) -> TxIn {
    let mut txid = [0u8; 32];
    rng.fill_bytes(&mut txid);
    TxIn {
        previous_output: OutPoint {
            txid: Txid::from_byte_array(txid),
            vout: rng.next_u32() % 4,
        },
        script_sig: ScriptBuf::new(),
        // Opt-in RBF, as most wallets now signal.
        sequence: Sequence::ENABLE_RBF_NO_LOCKTIME,
        witness: p2wpkh_witness(rng, SIG_LEN),
    }
}

/// A DER-signature-shaped item and a compressed-pubkey-shaped item.
fn p2wpkh_witness(rng: &mut impl RngCore, sig_len: usize) -> Witness {
    let mut sig = vec![0u8; sig_len];
    rng.fill_bytes(&mut sig);
    sig[0] = 0x30;
    sig[sig_len - 1] = 0x01; // SIGHASH_ALL
    let mut pubkey = [0u8; PUBKEY_LEN];
    rng.fill_bytes(&mut pubkey);
    pubkey[0] = 0x02;
    Witness::from_slice(&[&sig[..], &pubkey[..]])
}

fn random_p2wpkh(rng: &mut impl RngCore) -> TxOut {
    let mut script = vec![0u8; 22];
    rng.fill_bytes(&mut script[2..]);
    script[0] = 0x00; // OP_0
    script[1] = 0x14; // push 20
    TxOut {
        value: Amount::from_sat(1_000 + rng.next_u64() % 10_000_000),
        script_pubkey: ScriptBuf::from_bytes(script),
    }
}

/// An output script of exactly `len` bytes: P2WPKH or P2TR when the length is theirs, otherwise
/// an OP_RETURN followed by filler bytes (structurally fine; nothing runs it).
fn filler_script(rng: &mut impl RngCore, len: usize) -> ScriptBuf {
    let mut s = vec![0u8; len];
    rng.fill_bytes(&mut s);
    match len {
        0 => {}
        22 => {
            s[0] = 0x00;
            s[1] = 0x14;
        }
        34 => {
            s[0] = 0x51; // OP_1
            s[1] = 0x20; // push 32
        }
        _ => s[0] = 0x6a, // OP_RETURN
    }
    ScriptBuf::from_bytes(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use primitives::bitcoin::consensus::{deserialize, serialize};

    #[test]
    fn built_transactions_hit_the_requested_vsize_exactly() {
        let mut rng = dist::stream(3, "txgen-test");
        let sizes = (100..1200)
            .chain([2_000, 4_321, 10_000, 33_333, 65_535, 99_999, MAX_VSIZE])
            .chain((0..300).map(|i| 100 + i * 331));
        for v in sizes {
            let tx = build_tx(&mut rng, v);
            assert_eq!(tx.vsize(), v as usize, "vsize {v}");
            assert_eq!(tx.weight().to_wu(), 4 * v as u64, "weight for {v}");
            // Structurally valid and segwit: it round-trips through the consensus encoding.
            let raw = serialize(&tx);
            let back: Transaction = deserialize(&raw).unwrap();
            assert_eq!(back, tx);
            assert!(tx.input.iter().all(|i| i.witness.len() == 2));
            assert!(tx.base_size() >= 65, "non-witness size of {v}");
        }
    }

    #[test]
    fn documented_quantiles_match_the_default_models() {
        // The crate documentation quotes these; keep them true.
        let v = VsizeModel::default();
        for (k, p) in [
            (135, 0.1),
            (156, 0.25),
            (200, 0.5),
            (287, 0.75),
            (434, 0.9),
            (1032, 0.99),
        ] {
            assert!((v.cdf(k) - p).abs() < 0.008, "vsize {k}: {}", v.cdf(k));
        }
        let f = FeeRateModel::default();
        for (x, p) in [
            (1.17, 0.25),
            (3.0, 0.5),
            (7.71, 0.75),
            (18.04, 0.9),
            (77.91, 0.99),
            (227.0, 0.999),
        ] {
            assert!((f.cdf(x) - p).abs() < 0.001, "fee rate {x}: {}", f.cdf(x));
        }
        assert!((f.cdf(1.0) - 0.2163).abs() < 1e-3, "mass at the floor");
        assert_eq!(f.cdf(0.99), 0.0);
    }

    #[test]
    fn too_small_requests_give_the_smallest_shape() {
        let mut rng = dist::stream(3, "small");
        assert_eq!(build_tx(&mut rng, 10).vsize(), 88);
    }

    #[test]
    fn fee_rounds_up_from_the_drawn_rate() {
        let mut rng = dist::stream(4, "fees");
        let (v, f) = (VsizeModel::default(), FeeRateModel::default());
        for _ in 0..2_000 {
            let g = generate(&mut rng, &v, &f);
            let vs = g.tx.vsize() as f64;
            assert_eq!(g.tx.vsize(), g.drawn_vsize as usize);
            let rate = g.fee as f64 / vs;
            assert!(rate >= g.drawn_fee_rate && rate < g.drawn_fee_rate + 1.0 / vs + 1e-9);
            assert!(rate >= 1.0);
        }
    }
}
