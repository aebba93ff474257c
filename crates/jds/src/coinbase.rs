//! A declared coinbase: `DeclareMiningJob.coinbase_tx_prefix` and `coinbase_tx_suffix`, which
//! keep the BIP141 fields (spec 6.4.4), around an extranonce the JDC does not send.
//!
//! The extranonce's length is implied: it ends the scriptSig (as a JDC builds it, the suffix
//! starts with the input's sequence), so it is the scriptSig length the prefix declares minus
//! the scriptSig bytes the prefix already holds. The reference JDS reads it the same way.

use primitives::bitcoin::consensus::{self, Decodable};
use primitives::bitcoin::{ScriptBuf, Transaction, TxOut, VarInt};
use primitives::coinbase::{witness_commitment, CoinbaseInfo};
use primitives::Hash256;

/// The longest extranonce `PushSolution` can carry (B0_32).
pub const MAX_EXTRANONCE: usize = 32;

/// Why a declared coinbase is refused; [`CoinbaseError::code`] is the `DeclareMiningJob.Error`
/// code, the `Display` text its details.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CoinbaseError {
    /// The prefix ends before the named field.
    #[error("coinbase prefix is cut short before {0}")]
    PrefixTooShort(&'static str),
    /// More or fewer than one input.
    #[error("coinbase has {0} inputs, a coinbase has one")]
    InputCount(u64),
    /// The prefix holds more scriptSig bytes than the scriptSig's declared length.
    #[error("coinbase prefix holds {in_prefix} scriptSig bytes of the {declared} it declares")]
    ScriptSigOverrun {
        /// The scriptSig length the prefix declares.
        declared: u64,
        /// The scriptSig bytes the prefix holds.
        in_prefix: usize,
    },
    /// The implied extranonce is longer than [`MAX_EXTRANONCE`].
    #[error(
        "implied extranonce is {0} bytes, more than the {MAX_EXTRANONCE} PushSolution carries"
    )]
    ExtranonceTooLong(usize),
    /// The bytes around the extranonce are not one transaction.
    #[error("coinbase does not parse: {0}")]
    Parse(String),
    /// The input does not spend the null outpoint.
    #[error("the input does not spend the null outpoint: not a coinbase")]
    NotCoinbase,
    /// The outputs' values overflow a u64 of satoshis.
    #[error("coinbase outputs add up to more than 2^64 - 1 sats")]
    ValueOverflow,
    /// The scriptSig is outside consensus's 2 to 100 bytes.
    #[error("coinbase scriptSig is {0} bytes; consensus allows 2 to 100")]
    ScriptSigLength(usize),
    /// A witness commitment without the witness reserved value (BIP141).
    #[error("coinbase commits to witnesses but its input has no 32-byte witness reserved value")]
    NoReservedValue,
    /// Witness data on the input without a witness commitment (BIP141).
    #[error("coinbase input has witness data but the coinbase commits to no witnesses")]
    UnexpectedWitness,
    /// The witness commitment is not the one the declared wtxids give.
    #[error("witness commitment {declared} does not match the declared wtxids ({expected})")]
    CommitmentMismatch {
        /// The commitment the coinbase carries.
        declared: Hash256,
        /// The commitment computed from `DeclareMiningJob.wtxid_list`.
        expected: Hash256,
    },
    /// No output pays the pool's payout script more than zero.
    #[error("no output pays the pool payout script with a value above zero")]
    NoPoolPayout,
}

impl CoinbaseError {
    /// The `DeclareMiningJob.Error` code this refusal is sent with.
    pub fn code(&self) -> &'static str {
        use crate::session::error_code;
        match self {
            CoinbaseError::InputCount(_) | CoinbaseError::NotCoinbase => {
                error_code::INVALID_COINBASE_TX_INPUT
            }
            CoinbaseError::CommitmentMismatch { .. } => error_code::INVALID_JOB,
            CoinbaseError::NoPoolPayout => error_code::INVALID_COINBASE_OUTPUTS,
            _ => error_code::INVALID_COINBASE_TX,
        }
    }
}

/// A declared coinbase that parsed and is a coinbase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredCoinbase {
    /// `coinbase_tx_prefix` as declared.
    pub prefix: Vec<u8>,
    /// `coinbase_tx_suffix` as declared.
    pub suffix: Vec<u8>,
    /// The implied extranonce's length in bytes (at most [`MAX_EXTRANONCE`]).
    pub extranonce_len: usize,
    /// The transaction with an all-zero extranonce (its outputs are what the job pays).
    pub tx: Transaction,
    /// What the coinbase says: height, outputs' value, witness commitment.
    pub info: CoinbaseInfo,
}

impl DeclaredCoinbase {
    /// Parses `prefix || zeros(implied extranonce) || suffix`; every byte must be used.
    pub fn parse(prefix: &[u8], suffix: &[u8]) -> Result<DeclaredCoinbase, CoinbaseError> {
        let extranonce_len = implied_extranonce_len(prefix)?;
        let mut bytes = Vec::with_capacity(prefix.len() + extranonce_len + suffix.len());
        bytes.extend_from_slice(prefix);
        bytes.resize(prefix.len() + extranonce_len, 0);
        bytes.extend_from_slice(suffix);
        let tx: Transaction =
            consensus::deserialize(&bytes).map_err(|e| CoinbaseError::Parse(e.to_string()))?;
        if tx.input.len() != 1 {
            return Err(CoinbaseError::InputCount(tx.input.len() as u64));
        }
        let info = CoinbaseInfo::parse(&tx).map_err(|e| match e {
            primitives::coinbase::CoinbaseError::ValueOverflow => CoinbaseError::ValueOverflow,
            _ => CoinbaseError::NotCoinbase,
        })?;
        let script_len = tx.input[0].script_sig.len();
        if !(2..=100).contains(&script_len) {
            return Err(CoinbaseError::ScriptSigLength(script_len));
        }
        if info.witness_commitment.is_some() && info.witness_reserved_value.is_none() {
            return Err(CoinbaseError::NoReservedValue);
        }
        // BIP141: without a commitment no transaction of the block may carry witness data,
        // the coinbase included (Core refuses the block: `unexpected-witness`).
        if info.witness_commitment.is_none() && !tx.input[0].witness.is_empty() {
            return Err(CoinbaseError::UnexpectedWitness);
        }
        Ok(DeclaredCoinbase {
            prefix: prefix.to_vec(),
            suffix: suffix.to_vec(),
            extranonce_len,
            tx,
            info,
        })
    }

    /// The coinbase's outputs.
    pub fn outputs(&self) -> &[TxOut] {
        &self.tx.output
    }

    /// Some output pays `script` more than zero.
    pub fn pays(&self, script: &ScriptBuf) -> bool {
        self.tx
            .output
            .iter()
            .any(|o| &o.script_pubkey == script && o.value.to_sat() > 0)
    }

    /// Whether the coinbase commits to witnesses (BIP141).
    pub fn has_commitment(&self) -> bool {
        self.info.witness_commitment.is_some()
    }

    /// If the coinbase carries a witness commitment, it must be the one for `wtxids` (the
    /// block's transactions after the coinbase, in order).
    pub fn check_commitment(&self, wtxids: &[Hash256]) -> Result<(), CoinbaseError> {
        let (Some(declared), Some(reserved)) = (
            self.info.witness_commitment,
            self.info.witness_reserved_value,
        ) else {
            return Ok(());
        };
        let expected = witness_commitment(wtxids, &reserved);
        if declared != expected {
            return Err(CoinbaseError::CommitmentMismatch { declared, expected });
        }
        Ok(())
    }

    /// The coinbase with `extranonce` in its place.
    pub fn with_extranonce(&self, extranonce: &[u8]) -> Result<Transaction, CoinbaseError> {
        if extranonce.len() != self.extranonce_len {
            return Err(CoinbaseError::Parse(format!(
                "extranonce is {} bytes, the declared coinbase has room for {}",
                extranonce.len(),
                self.extranonce_len
            )));
        }
        let mut bytes =
            Vec::with_capacity(self.prefix.len() + extranonce.len() + self.suffix.len());
        bytes.extend_from_slice(&self.prefix);
        bytes.extend_from_slice(extranonce);
        bytes.extend_from_slice(&self.suffix);
        consensus::deserialize(&bytes).map_err(|e| CoinbaseError::Parse(e.to_string()))
    }
}

/// The scriptSig length the prefix declares minus the scriptSig bytes it holds.
fn implied_extranonce_len(prefix: &[u8]) -> Result<usize, CoinbaseError> {
    fn skip(n: usize, what: &'static str, r: &mut &[u8]) -> Result<(), CoinbaseError> {
        if r.len() < n {
            return Err(CoinbaseError::PrefixTooShort(what));
        }
        *r = &r[n..];
        Ok(())
    }
    let mut r = prefix;
    skip(4, "the version", &mut r)?;
    // BIP144 marker and flag: a transaction with inputs never starts them with a zero count.
    if r.first() == Some(&0) {
        skip(2, "the segwit marker and flag", &mut r)?;
    }
    let inputs = VarInt::consensus_decode(&mut r)
        .map_err(|_| CoinbaseError::PrefixTooShort("the input count"))?
        .0;
    if inputs != 1 {
        return Err(CoinbaseError::InputCount(inputs));
    }
    skip(36, "the previous outpoint", &mut r)?;
    let declared = VarInt::consensus_decode(&mut r)
        .map_err(|_| CoinbaseError::PrefixTooShort("the scriptSig length"))?
        .0;
    let in_prefix = r.len();
    let extranonce =
        declared
            .checked_sub(in_prefix as u64)
            .ok_or(CoinbaseError::ScriptSigOverrun {
                declared,
                in_prefix,
            })?;
    if extranonce > MAX_EXTRANONCE as u64 {
        return Err(CoinbaseError::ExtranonceTooLong(extranonce as usize));
    }
    Ok(extranonce as usize)
}

#[cfg(test)]
mod tests {
    use primitives::bitcoin::{Amount, Witness};
    use primitives::coinbase::bip34_height_push;

    use super::*;
    use crate::fuzz_support::{coinbase_tx, split_coinbase};
    use crate::session::error_code;

    /// A coinbase with a BIP34 height and an 8-byte extranonce ending its scriptSig, split
    /// around the extranonce.
    fn split(witness: Witness, output: Vec<TxOut>) -> (Vec<u8>, Vec<u8>) {
        let mut script = bip34_height_push(812_345);
        script.extend_from_slice(&[0; 8]);
        split_coinbase(&coinbase_tx(script, witness, output), 8)
    }

    fn pay(value: u64) -> TxOut {
        TxOut {
            value: Amount::from_sat(value),
            script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
        }
    }

    /// Found by `jds_coinbase` (corpus/jds_coinbase/regression-witness-without-commitment): a
    /// coinbase whose input carries a witness but whose outputs commit to none was declared,
    /// and every block on it is invalid (`unexpected-witness`).
    #[test]
    fn a_coinbase_with_witness_data_and_no_commitment_is_refused() {
        let (prefix, suffix) = split(Witness::from_slice(&[[0u8; 32]]), vec![pay(1)]);
        let e = DeclaredCoinbase::parse(&prefix, &suffix).unwrap_err();
        assert_eq!(e, CoinbaseError::UnexpectedWitness);
        assert_eq!(e.code(), error_code::INVALID_COINBASE_TX);
        // Without the witness it is a coinbase like any other.
        let (prefix, suffix) = split(Witness::new(), vec![pay(1)]);
        assert_eq!(
            DeclaredCoinbase::parse(&prefix, &suffix)
                .unwrap()
                .extranonce_len,
            8
        );
    }

    /// Found by `jds_coinbase`
    /// (corpus/jds_coinbase/regression-outputs-overflow-refused-as-not-a-coinbase): outputs
    /// adding up to more than 2^64 - 1 sats were refused as "not a coinbase"
    /// (`invalid-coinbase-tx-input`).
    #[test]
    fn outputs_that_overflow_are_refused_as_such() {
        let (prefix, suffix) = split(Witness::new(), vec![pay(u64::MAX / 2 + 1); 2]);
        let e = DeclaredCoinbase::parse(&prefix, &suffix).unwrap_err();
        assert_eq!(e, CoinbaseError::ValueOverflow);
        assert_eq!(e.code(), error_code::INVALID_COINBASE_TX);
    }
}
