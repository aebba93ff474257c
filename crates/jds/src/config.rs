//! What a JDS is configured with.

use std::time::Duration;

use primitives::bitcoin::{consensus, Amount, ScriptBuf, TxOut};

/// Settings shared by every connection.
#[derive(Clone, Debug)]
pub struct JdsConfig {
    /// The pool payout script: the first (and only) output of
    /// `AllocateMiningJobToken.Success.coinbase_outputs`, which every declared coinbase must
    /// pay more than zero into.
    pub payout_script: ScriptBuf,
    /// How long allocated and declared tokens stay valid (default 10 minutes).
    pub token_lifetime: Duration,
    /// Token allocations one connection may ask for, per second, after a burst of
    /// `allocation_burst`; a connection asking faster is closed. A JDC allocates about one token
    /// per template, so the default (10/s after 50) only stops a runaway client.
    pub allocations_per_second: f64,
    /// Token allocations a connection may make at once before the rate applies.
    pub allocation_burst: f64,
    /// How long a declaration may wait for `ProvideMissingTransactions.Success` before it is
    /// refused with `missing-txs`.
    pub missing_txs_timeout: Duration,
    /// Declarations one connection may have waiting for transactions at once.
    pub max_pending_declarations: usize,
}

impl JdsConfig {
    /// The defaults, paying into `payout_script`.
    pub fn new(payout_script: ScriptBuf) -> JdsConfig {
        JdsConfig {
            payout_script,
            token_lifetime: Duration::from_secs(600),
            allocations_per_second: 10.0,
            allocation_burst: 50.0,
            missing_txs_timeout: Duration::from_secs(10),
            max_pending_declarations: 16,
        }
    }

    /// The pool's outputs as `AllocateMiningJobToken.Success` carries them (spec 6.4.3): a
    /// CompactSize count, then each output consensus-serialized; the payout output first, with
    /// a value of 0.
    pub fn coinbase_outputs(&self) -> Vec<u8> {
        consensus::serialize(&vec![TxOut {
            value: Amount::ZERO,
            script_pubkey: self.payout_script.clone(),
        }])
    }
}
