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
    /// Its txid.
    pub txid: Hash256,
    /// The fee it pays.
    pub fee: Amount,
    /// Its weight (weight units).
    pub weight: u32,
}

/// A block template from the node (`getblocktemplate`) or a Template Provider, without the
/// coinbase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// Height of the block this template builds.
    pub height: u32,
    /// The previous block's hash.
    pub prev_hash: Hash256,
    /// The header version.
    pub version: u32,
    /// The network target, compact (`nBits`).
    pub bits: CompactTarget,
    /// The node's clock when it made the template (`curtime`), and the earliest header time
    /// the pool's jobs on it allow (`mintime`: a node's median time past + 1, or a provider's
    /// `header_timestamp`).
    pub curtime: u32,
    /// See `curtime`.
    pub mintime: u32,
    /// The median time past of the chain the template builds on, when its source says it (a
    /// node's `getblocktemplate`, as `mintime - 1`): a block's header time must be later. A
    /// Template Provider does not say it; its `header_timestamp` is where mining starts, not
    /// the earliest valid time (the spec says so), so a job declared with an earlier time is
    /// not refused for it.
    pub median_time_past: Option<u32>,
    /// Subsidy plus fees: what the coinbase outputs may add up to.
    pub coinbase_value: Amount,
    /// The commitment hash of `default_witness_commitment` (the 32 bytes after the
    /// `6a24aa21a9ed` header); `None` when no transaction has witness data.
    pub witness_commitment: Option<Hash256>,
    /// Its transactions, in block order; empty for a provider's (it holds them).
    pub transactions: Arc<[TemplateTx]>,
    /// Opaque id to long-poll on for the next template (`longpollid`), where the source has one.
    pub longpoll_id: Option<String>,
}

impl Template {
    /// The transactions' txids, in block order.
    pub fn txids(&self) -> impl Iterator<Item = Hash256> + '_ {
        self.transactions.iter().map(|t| t.txid)
    }

    /// The transactions' fees, summed.
    pub fn fees(&self) -> Amount {
        self.transactions.iter().map(|t| t.fee).sum()
    }
}

/// What a Template Provider gives instead of transactions (Template Distribution
/// `NewTemplate`): the coinbase's fixed parts and the merkle path its txid climbs. Jobs built
/// from it use the path directly, and a block found on it goes back as `SubmitSolution` under
/// `template_id`, the provider's id (the provider holds the transactions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdpTemplate {
    /// The provider's template id.
    pub template_id: u64,
    /// The coinbase transaction's version.
    pub coinbase_tx_version: u32,
    /// The start of the coinbase scriptSig (the BIP34 height push).
    pub coinbase_prefix: Vec<u8>,
    /// The coinbase input's `nSequence`.
    pub coinbase_tx_input_sequence: u32,
    /// What the pool's outputs may add up to.
    pub coinbase_tx_value_remaining: u64,
    /// How many outputs `coinbase_tx_outputs` holds.
    pub coinbase_tx_outputs_count: u32,
    /// The outputs the provider requires (the witness commitment), serialized back to back.
    pub coinbase_tx_outputs: Vec<u8>,
    /// The coinbase's `nLockTime`.
    pub coinbase_tx_locktime: u32,
    /// The merkle path the coinbase txid climbs to the root.
    pub merkle_path: Arc<[Hash256]>,
}

/// The witness commitment output's script starts with these bytes (BIP141).
const WITNESS_COMMITMENT_HEADER: [u8; 6] = [0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed];

impl TdpTemplate {
    /// The coinbase paying `payout` the whole remaining value, split around an extranonce of
    /// `extranonce_len` bytes: scriptSig = provider prefix, pool tag push, extranonce push.
    pub fn coinbase(
        &self,
        tag: &[u8],
        extranonce_len: usize,
        payout: &primitives::bitcoin::ScriptBuf,
    ) -> Result<primitives::CoinbaseParts, primitives::coinbase::CoinbaseError> {
        use primitives::coinbase::CoinbaseError;
        use primitives::compact_size;
        if extranonce_len > 75 {
            return Err(CoinbaseError::ExtranonceTooLong(extranonce_len));
        }
        let mut script = self.coinbase_prefix.clone();
        if !tag.is_empty() {
            // A direct push (at most 75 bytes) keeps the scriptSig a parseable script.
            let tag = &tag[..tag.len().min(75)];
            script.push(tag.len() as u8);
            script.extend_from_slice(tag);
        }
        script.push(extranonce_len as u8);
        let script_len = script.len() + extranonce_len;
        if !(2..=100).contains(&script_len) {
            return Err(CoinbaseError::ScriptSigSize(script_len));
        }
        let mut prefix = Vec::with_capacity(48 + script.len());
        prefix.extend_from_slice(&self.coinbase_tx_version.to_le_bytes());
        prefix.push(1); // one input
        prefix.extend_from_slice(&[0u8; 32]);
        prefix.extend_from_slice(&u32::MAX.to_le_bytes());
        compact_size::write(&mut prefix, script_len as u64);
        prefix.extend_from_slice(&script);

        let mut suffix = Vec::with_capacity(64 + self.coinbase_tx_outputs.len());
        suffix.extend_from_slice(&self.coinbase_tx_input_sequence.to_le_bytes());
        compact_size::write(&mut suffix, 1 + u64::from(self.coinbase_tx_outputs_count));
        suffix.extend_from_slice(&self.coinbase_tx_value_remaining.to_le_bytes());
        compact_size::write(&mut suffix, payout.len() as u64);
        suffix.extend_from_slice(payout.as_bytes());
        suffix.extend_from_slice(&self.coinbase_tx_outputs);
        suffix.extend_from_slice(&self.coinbase_tx_locktime.to_le_bytes());
        Ok(primitives::CoinbaseParts {
            prefix,
            suffix,
            extranonce_len,
            segwit: self.commits_to_witnesses(),
        })
    }

    /// Whether one of the required outputs is a witness commitment, so that the coinbase
    /// carries the witness reserved value. Outputs that do not decode count as none.
    pub fn commits_to_witnesses(&self) -> bool {
        use primitives::bitcoin::consensus::Decodable;
        use primitives::bitcoin::TxOut;
        let mut rest = self.coinbase_tx_outputs.as_slice();
        for _ in 0..self.coinbase_tx_outputs_count {
            let Ok(out) = TxOut::consensus_decode(&mut rest) else {
                return false;
            };
            if out
                .script_pubkey
                .as_bytes()
                .starts_with(&WITNESS_COMMITMENT_HEADER)
            {
                return true;
            }
        }
        false
    }
}
