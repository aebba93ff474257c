//! One template, three views of its coinbase: the downstream jobs' (built by the pool engine
//! the JDC embeds, [`TdpTemplate::coinbase`]), the JDS's (`DeclareMiningJob`, with the BIP141
//! fields kept, spec 6.4.4) and the pool's (`SetCustomMiningJob`: scriptSig start, outputs,
//! and the fields around them). All three must describe the same transaction, or shares the
//! devices find would not be the pool's shares: this module builds the last two from the same
//! pieces the first uses, and [`DeclaredCoinbase::legacy`] lets tests check they agree.

use pool::template::TdpTemplate;
use primitives::bitcoin::consensus::{Decodable, Encodable};
use primitives::bitcoin::{Amount, ScriptBuf, TxOut};
use primitives::compact_size;

/// The witness the coinbase of a segwit block carries: one item, the 32-byte reserved value.
const WITNESS: [u8; 34] = {
    let mut w = [0u8; 34];
    w[0] = 1;
    w[1] = 32;
    w
};

/// Why a template's coinbase could not be built in the JDS's or the pool's shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CoinbaseError {
    /// The template's `coinbase_tx_outputs` are not consensus-serialized outputs.
    #[error("the provider's coinbase outputs do not decode: {0}")]
    ProviderOutputs(String),
    /// The extranonce (bytes given) is longer than one direct push (75 bytes) can carry.
    #[error("extranonce of {0} bytes does not fit a direct push")]
    ExtranonceTooLong(usize),
    /// The scriptSig (bytes given) is outside what consensus allows a coinbase.
    #[error("scriptSig of {0} bytes is outside 2..=100")]
    ScriptSigSize(usize),
}

/// The coinbase as `SetCustomMiningJob` carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomCoinbase {
    /// `coinbase_tx_version`: the transaction's version.
    pub tx_version: u32,
    /// The scriptSig up to the extranonce (the pool appends its channel's full extranonce).
    pub script_prefix: Vec<u8>,
    /// `coinbase_tx_input_nSequence`: the coinbase input's sequence.
    pub sequence: u32,
    /// CompactSize-prefixed, consensus-serialized outputs (what the reference pool decodes).
    pub outputs: Vec<u8>,
    /// `coinbase_tx_locktime`.
    pub locktime: u32,
    /// The decoded outputs, for the token's digest.
    pub outputs_list: Vec<TxOut>,
}

/// The coinbase as `DeclareMiningJob` carries it: split around the extranonce, BIP141 fields
/// (marker, flag, witness) in place when the block commits to witnesses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredCoinbase {
    /// `coinbase_tx_prefix`: the serialized transaction up to the extranonce.
    pub prefix: Vec<u8>,
    /// `coinbase_tx_suffix`: the serialized transaction after the extranonce.
    pub suffix: Vec<u8>,
    /// Marker, flag and witness are in `prefix` and `suffix` (the block commits to witnesses).
    pub segwit: bool,
}

impl DeclaredCoinbase {
    /// The legacy (txid) serialization with `extranonce` in place: marker, flag and witness
    /// taken out again.
    pub fn legacy(&self, extranonce: &[u8]) -> Vec<u8> {
        if !self.segwit {
            return [&self.prefix[..], extranonce, &self.suffix[..]].concat();
        }
        let mut out = Vec::with_capacity(self.prefix.len() + extranonce.len() + self.suffix.len());
        out.extend_from_slice(&self.prefix[..4]);
        out.extend_from_slice(&self.prefix[6..]);
        out.extend_from_slice(extranonce);
        let witness_at = self.suffix.len() - 4 - WITNESS.len();
        out.extend_from_slice(&self.suffix[..witness_at]);
        out.extend_from_slice(&self.suffix[self.suffix.len() - 4..]);
        out
    }
}

/// Both views of the coinbase paying `payout` the template's whole remaining value.
///
/// `tag` and `extranonce_len` must be the embedded engine's (`JobConfig::coinbase_tag`, its
/// `extranonce_len`): the scriptSig is the provider's prefix, the tag push, then the
/// extranonce as a push of its own, exactly as [`TdpTemplate::coinbase`] lays it out.
pub fn build(
    tdp: &TdpTemplate,
    tag: &[u8],
    extranonce_len: usize,
    payout: &ScriptBuf,
) -> Result<(CustomCoinbase, DeclaredCoinbase), CoinbaseError> {
    if extranonce_len > 75 {
        return Err(CoinbaseError::ExtranonceTooLong(extranonce_len));
    }
    let mut script_prefix = tdp.coinbase_prefix.clone();
    if !tag.is_empty() {
        let tag = &tag[..tag.len().min(75)];
        script_prefix.push(tag.len() as u8);
        script_prefix.extend_from_slice(tag);
    }
    script_prefix.push(extranonce_len as u8);
    let script_len = script_prefix.len() + extranonce_len;
    if !(2..=100).contains(&script_len) {
        return Err(CoinbaseError::ScriptSigSize(script_len));
    }

    let mut outputs_list = vec![TxOut {
        value: Amount::from_sat(tdp.coinbase_tx_value_remaining),
        script_pubkey: payout.clone(),
    }];
    let mut rest = tdp.coinbase_tx_outputs.as_slice();
    for _ in 0..tdp.coinbase_tx_outputs_count {
        outputs_list.push(
            TxOut::consensus_decode(&mut rest)
                .map_err(|e| CoinbaseError::ProviderOutputs(e.to_string()))?,
        );
    }
    let mut outputs = Vec::new();
    outputs_list
        .consensus_encode(&mut outputs)
        .expect("vectors do not fail");

    let segwit = tdp.commits_to_witnesses();
    let mut prefix = Vec::with_capacity(48 + script_prefix.len());
    prefix.extend_from_slice(&tdp.coinbase_tx_version.to_le_bytes());
    if segwit {
        prefix.extend_from_slice(&[0x00, 0x01]);
    }
    prefix.push(1); // one input
    prefix.extend_from_slice(&[0u8; 32]);
    prefix.extend_from_slice(&u32::MAX.to_le_bytes());
    compact_size::write(&mut prefix, script_len as u64);
    prefix.extend_from_slice(&script_prefix);

    let mut suffix = Vec::with_capacity(outputs.len() + 48);
    suffix.extend_from_slice(&tdp.coinbase_tx_input_sequence.to_le_bytes());
    suffix.extend_from_slice(&outputs);
    if segwit {
        suffix.extend_from_slice(&WITNESS);
    }
    suffix.extend_from_slice(&tdp.coinbase_tx_locktime.to_le_bytes());

    Ok((
        CustomCoinbase {
            tx_version: tdp.coinbase_tx_version,
            script_prefix,
            sequence: tdp.coinbase_tx_input_sequence,
            outputs,
            locktime: tdp.coinbase_tx_locktime,
            outputs_list,
        },
        DeclaredCoinbase {
            prefix,
            suffix,
            segwit,
        },
    ))
}
