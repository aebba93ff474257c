//! Coinbase transactions: building one around an extranonce, and reading one back.
//!
//! The pool builds the coinbase without its extranonce and sends it in two halves: the part
//! before the extranonce and the part after. Stratum V1 calls them `coinb1` / `coinb2` (the
//! extranonce being `extranonce1 || extranonce2`); Stratum V2 extended jobs call them
//! `coinbase_tx_prefix` / `coinbase_tx_suffix` (the extranonce being the channel's
//! `extranonce_prefix || extranonce`). Both halves are the legacy (non-witness) serialization,
//! which is what the txid and so the merkle root commit to.

use std::str::FromStr;

use bitcoin::consensus::Decodable;
use bitcoin::{Address, Amount, Network, ScriptBuf, Transaction, Witness};

use crate::compact_size;
use crate::hash::{sha256d, sha256d_parts, Hash256};
use crate::merkle::merkle_root;

/// The witness commitment output's script starts with OP_RETURN, a 36-byte push and this header.
pub const WITNESS_COMMITMENT_HEADER: [u8; 6] = [0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed];

/// The coinbase input's witness: one 32-byte reserved value, all zeros by convention.
pub const WITNESS_RESERVED_VALUE: [u8; 32] = [0; 32];

/// Consensus bounds on the coinbase scriptSig size.
pub const SCRIPT_SIG_MIN: usize = 2;
/// The largest coinbase scriptSig consensus allows, in bytes.
pub const SCRIPT_SIG_MAX: usize = 100;

#[derive(Debug, thiserror::Error)]
/// Why a coinbase cannot be built, filled in or read.
pub enum CoinbaseError {
    /// Height, tag and extranonce make a scriptSig of this many bytes, outside
    /// [`SCRIPT_SIG_MIN`]..=[`SCRIPT_SIG_MAX`] (usually: the pool tag is too long).
    #[error("coinbase scriptSig would be {0} bytes; consensus allows {SCRIPT_SIG_MIN} to {SCRIPT_SIG_MAX}")]
    ScriptSigSize(usize),
    /// The extranonce length asked for (bytes) does not fit one direct push (at most 75), which the
    /// scriptSig gives it so that it still parses as a script.
    #[error("extranonce of {0} bytes is longer than one direct push (75 bytes)")]
    ExtranonceTooLong(usize),
    /// An extranonce put into [`CoinbaseParts`] differs in length from the space reserved for it.
    #[error("extranonce is {got} bytes but the coinbase reserves {want}")]
    ExtranonceLength {
        /// Length of the extranonce given, in bytes.
        got: usize,
        /// Length the coinbase was built to reserve ([`CoinbaseParts::extranonce_len`]).
        want: usize,
    },
    /// A payout address does not parse or belongs to another network.
    #[error("payout address {address:?}: {reason}")]
    Address {
        /// The address as configured.
        address: String,
        /// Why it was refused: the parser's or the network check's message.
        reason: String,
    },
    /// The filled-in coinbase does not decode as a transaction; holds the decoder's message.
    #[error("coinbase does not decode as a transaction: {0}")]
    Decode(String),
    /// [`CoinbaseInfo::parse`] was given a transaction that is not a coinbase.
    #[error("transaction is not a coinbase (it must have one input spending the null outpoint)")]
    NotCoinbase,
    /// The outputs' values overflow a u64 of satoshis (only an untrusted transaction can do this).
    #[error("coinbase outputs add up to more than 2^64 - 1 sats")]
    ValueOverflow,
}

/// One payout output of the coinbase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payout {
    /// The output script paid, e.g. from [`payout_script`].
    pub script_pubkey: ScriptBuf,
    /// The amount this output pays.
    pub value: Amount,
}

/// The output script that pays `address`, which must belong to `network`.
pub fn payout_script(address: &str, network: Network) -> Result<ScriptBuf, CoinbaseError> {
    let err = |reason: String| CoinbaseError::Address {
        address: address.to_owned(),
        reason,
    };
    let unchecked = Address::from_str(address).map_err(|e| err(e.to_string()))?;
    let checked = unchecked
        .require_network(network)
        .map_err(|e| err(e.to_string()))?;
    Ok(checked.script_pubkey())
}

/// What goes into a coinbase.
#[derive(Clone, Debug)]
pub struct CoinbaseSpec {
    /// Block height, committed first in the scriptSig (BIP34).
    pub height: u32,
    /// Pool tag bytes, pushed after the height.
    pub tag: Vec<u8>,
    /// Bytes reserved for the extranonce (SV1: extranonce1 + extranonce2 sizes).
    pub extranonce_len: usize,
    /// The outputs, in order; the witness commitment output (if any) comes after them.
    pub payouts: Vec<Payout>,
    /// The block's witness commitment, if it has segwit transactions (or always, as Core does).
    pub witness_commitment: Option<Hash256>,
    /// Transaction version (2 from [`CoinbaseSpec::new`]).
    pub version: i32,
    /// The coinbase input's nSequence (0xffffffff, final, from [`CoinbaseSpec::new`]).
    pub sequence: u32,
    /// Transaction nLockTime (0 from [`CoinbaseSpec::new`]).
    pub lock_time: u32,
}

impl CoinbaseSpec {
    /// A coinbase like Bitcoin Core's template asks for: version 2, final sequence, no lock time.
    pub fn new(height: u32, extranonce_len: usize) -> Self {
        CoinbaseSpec {
            height,
            tag: Vec::new(),
            extranonce_len,
            payouts: Vec::new(),
            witness_commitment: None,
            version: 2,
            sequence: 0xffff_ffff,
            lock_time: 0,
        }
    }

    /// Serializes the coinbase (legacy form) split around a blank extranonce of `extranonce_len`
    /// bytes. The scriptSig is the BIP34 height, the tag, then the extranonce as its own push.
    pub fn build(&self) -> Result<CoinbaseParts, CoinbaseError> {
        if self.extranonce_len > 75 {
            return Err(CoinbaseError::ExtranonceTooLong(self.extranonce_len));
        }
        let mut script = bip34_height_push(self.height);
        push_data(&mut script, &self.tag);
        // The extranonce is a push of its own so the scriptSig still parses as a script.
        script.push(self.extranonce_len as u8);
        let script_len = script.len() + self.extranonce_len;
        if !(SCRIPT_SIG_MIN..=SCRIPT_SIG_MAX).contains(&script_len) {
            return Err(CoinbaseError::ScriptSigSize(script_len));
        }

        let mut prefix = Vec::with_capacity(64 + script.len());
        prefix.extend_from_slice(&self.version.to_le_bytes());
        prefix.push(1); // one input
        prefix.extend_from_slice(&[0u8; 32]);
        prefix.extend_from_slice(&0xffff_ffffu32.to_le_bytes());
        compact_size::write(&mut prefix, script_len as u64);
        prefix.extend_from_slice(&script);

        let mut suffix = Vec::with_capacity(128);
        suffix.extend_from_slice(&self.sequence.to_le_bytes());
        let n_out = self.payouts.len() + self.witness_commitment.is_some() as usize;
        compact_size::write(&mut suffix, n_out as u64);
        for p in &self.payouts {
            write_output(&mut suffix, p.value.to_sat(), p.script_pubkey.as_bytes());
        }
        if let Some(c) = self.witness_commitment {
            write_output(&mut suffix, 0, &witness_commitment_script(c));
        }
        suffix.extend_from_slice(&self.lock_time.to_le_bytes());

        Ok(CoinbaseParts {
            prefix,
            suffix,
            extranonce_len: self.extranonce_len,
            segwit: self.witness_commitment.is_some(),
        })
    }
}

/// A coinbase split around its extranonce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoinbaseParts {
    /// SV1 `coinb1`, SV2 `coinbase_tx_prefix`.
    pub prefix: Vec<u8>,
    /// SV1 `coinb2`, SV2 `coinbase_tx_suffix`.
    pub suffix: Vec<u8>,
    /// Bytes that go between `prefix` and `suffix`; the other methods refuse any other length.
    pub extranonce_len: usize,
    /// Whether the block commits to witnesses, so the coinbase carries the reserved value.
    pub segwit: bool,
}

impl CoinbaseParts {
    fn check_len(&self, extranonce: &[u8]) -> Result<(), CoinbaseError> {
        if extranonce.len() != self.extranonce_len {
            return Err(CoinbaseError::ExtranonceLength {
                got: extranonce.len(),
                want: self.extranonce_len,
            });
        }
        Ok(())
    }

    /// The legacy serialization with `extranonce` in place.
    pub fn serialize(&self, extranonce: &[u8]) -> Result<Vec<u8>, CoinbaseError> {
        self.check_len(extranonce)?;
        Ok([&self.prefix[..], extranonce, &self.suffix[..]].concat())
    }

    /// The txid (internal byte order) with `extranonce` in place, hashed without building the
    /// serialization.
    pub fn txid(&self, extranonce: &[u8]) -> Result<Hash256, CoinbaseError> {
        self.check_len(extranonce)?;
        Ok(sha256d_parts(&[&self.prefix, extranonce, &self.suffix]))
    }

    /// The transaction as it goes into the block, with the witness reserved value if segwit.
    pub fn transaction(&self, extranonce: &[u8]) -> Result<Transaction, CoinbaseError> {
        let raw = self.serialize(extranonce)?;
        let mut tx = Transaction::consensus_decode(&mut raw.as_slice())
            .map_err(|e| CoinbaseError::Decode(e.to_string()))?;
        if self.segwit {
            tx.input[0].witness = Witness::from_slice(&[WITNESS_RESERVED_VALUE]);
        }
        Ok(tx)
    }
}

/// The scriptSig prefix committing to `height`, byte for byte what Core's `CScript() << height`
/// produces and what its `bad-cb-height` check compares against.
pub fn bip34_height_push(height: u32) -> Vec<u8> {
    match height {
        0 => vec![0x00],                     // OP_0
        1..=16 => vec![0x50 + height as u8], // OP_1 .. OP_16
        _ => {
            let mut num = Vec::with_capacity(5);
            let mut v = height;
            while v > 0 {
                num.push(v as u8);
                v >>= 8;
            }
            // A set top bit would read as negative: add a sign byte.
            if num.last().is_some_and(|b| b & 0x80 != 0) {
                num.push(0);
            }
            let mut out = vec![num.len() as u8];
            out.extend_from_slice(&num);
            out
        }
    }
}

/// Reads the BIP34 height at the start of a coinbase scriptSig, if it is there.
pub fn parse_bip34_height(script_sig: &[u8]) -> Option<u32> {
    let op = *script_sig.first()?;
    match op {
        0x00 => Some(0),
        0x51..=0x60 => Some((op - 0x50) as u32),
        1..=5 => {
            let n = op as usize;
            let bytes = script_sig.get(1..1 + n)?;
            if bytes[n - 1] & 0x80 != 0 {
                return None; // negative
            }
            let mut v: u64 = 0;
            for (i, b) in bytes.iter().enumerate() {
                v |= (*b as u64) << (8 * i);
            }
            u32::try_from(v).ok()
        }
        _ => None,
    }
}

fn push_data(script: &mut Vec<u8>, data: &[u8]) {
    match data.len() {
        0 => {}
        n @ 1..=75 => {
            script.push(n as u8);
            script.extend_from_slice(data);
        }
        n => {
            script.push(0x4c); // OP_PUSHDATA1; longer tags exceed the scriptSig limit anyway
            script.push(n.min(255) as u8);
            script.extend_from_slice(&data[..n.min(255)]);
        }
    }
}

fn write_output(out: &mut Vec<u8>, value: u64, script: &[u8]) {
    out.extend_from_slice(&value.to_le_bytes());
    compact_size::write(out, script.len() as u64);
    out.extend_from_slice(script);
}

/// The commitment for a block whose non-coinbase transactions have these wtxids (BIP141): the
/// witness merkle root (with the coinbase's wtxid taken as zero) hashed with the reserved value.
pub fn witness_commitment(wtxids: &[Hash256], reserved_value: &[u8; 32]) -> Hash256 {
    let mut leaves = Vec::with_capacity(wtxids.len() + 1);
    leaves.push(Hash256::ZERO);
    leaves.extend_from_slice(wtxids);
    let root = merkle_root(&leaves);
    let mut buf = [0u8; 64];
    buf[..32].copy_from_slice(&root.0);
    buf[32..].copy_from_slice(reserved_value);
    sha256d(&buf)
}

/// The commitment output's script: OP_RETURN, push of 0xaa21a9ed followed by the commitment.
pub fn witness_commitment_script(commitment: Hash256) -> Vec<u8> {
    let mut s = Vec::with_capacity(38);
    s.extend_from_slice(&WITNESS_COMMITMENT_HEADER);
    s.extend_from_slice(&commitment.0);
    s
}

/// What a coinbase says about its block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoinbaseInfo {
    /// The number the scriptSig starts with. Only blocks of version 2 and later (BIP34) promise
    /// it is the height: older coinbases often start with other pushes (genesis and block 100000
    /// push their nBits), which read as a number too.
    pub height: Option<u32>,
    /// The sum of all output values: subsidy plus fees claimed.
    pub value_out: Amount,
    /// From the last output that carries one, as BIP141 specifies.
    pub witness_commitment: Option<Hash256>,
    /// The input's witness when it is a single 32-byte item (BIP141's reserved value); `None`
    /// otherwise, e.g. for a coinbase without witness.
    pub witness_reserved_value: Option<[u8; 32]>,
    /// The coinbase input's scriptSig bytes as they are.
    pub script_sig: Vec<u8>,
}

impl CoinbaseInfo {
    /// Reads height, value, witness commitment and reserved value from a coinbase; refuses a
    /// transaction that is not one, or whose output values overflow.
    pub fn parse(tx: &Transaction) -> Result<Self, CoinbaseError> {
        if !tx.is_coinbase() {
            return Err(CoinbaseError::NotCoinbase);
        }
        let input = &tx.input[0];
        let script_sig = input.script_sig.as_bytes().to_vec();
        let witness_commitment = tx.output.iter().rev().find_map(|o| {
            let s = o.script_pubkey.as_bytes();
            (s.len() >= 38 && s[..6] == WITNESS_COMMITMENT_HEADER)
                .then(|| Hash256(s[6..38].try_into().expect("32 bytes")))
        });
        let witness_reserved_value = match input.witness.len() {
            1 => input
                .witness
                .nth(0)
                .and_then(|w| <[u8; 32]>::try_from(w).ok()),
            _ => None,
        };
        Ok(CoinbaseInfo {
            height: parse_bip34_height(&script_sig),
            // Untrusted input: add with overflow checks (Amount's Sum panics on overflow).
            value_out: tx
                .output
                .iter()
                .try_fold(Amount::ZERO, |acc, o| acc.checked_add(o.value))
                .ok_or(CoinbaseError::ValueOverflow)?,
            witness_commitment,
            witness_reserved_value,
            script_sig,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bip34_encodings_match_core_script_num() {
        assert_eq!(bip34_height_push(0), [0x00]);
        assert_eq!(bip34_height_push(1), [0x51]);
        assert_eq!(bip34_height_push(16), [0x60]);
        assert_eq!(bip34_height_push(17), [0x01, 0x11]);
        assert_eq!(bip34_height_push(127), [0x01, 0x7f]);
        assert_eq!(bip34_height_push(128), [0x02, 0x80, 0x00]); // sign byte
        assert_eq!(bip34_height_push(255), [0x02, 0xff, 0x00]);
        assert_eq!(bip34_height_push(256), [0x02, 0x00, 0x01]);
        assert_eq!(bip34_height_push(481_824), [0x03, 0x20, 0x5a, 0x07]);
        assert_eq!(bip34_height_push(900_000), [0x03, 0xa0, 0xbb, 0x0d]);
        assert_eq!(bip34_height_push(8_388_608), [0x04, 0x00, 0x00, 0x80, 0x00]);
        for h in [
            0,
            1,
            16,
            17,
            127,
            128,
            255,
            256,
            32_767,
            32_768,
            900_000,
            8_388_608,
            u32::MAX,
        ] {
            assert_eq!(parse_bip34_height(&bip34_height_push(h)), Some(h), "{h}");
        }
        assert_eq!(parse_bip34_height(&[0x01, 0x80]), None); // negative
        assert_eq!(parse_bip34_height(&[0x03, 0x01]), None); // truncated
        assert_eq!(parse_bip34_height(&[]), None);
    }

    fn spec() -> CoinbaseSpec {
        let mut s = CoinbaseSpec::new(900_000, 8);
        s.tag = b"/stratumlab test tag/".to_vec();
        s.payouts.push(Payout {
            script_pubkey: payout_script(
                "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080",
                Network::Regtest,
            )
            .unwrap(),
            value: Amount::from_sat(312_500_000),
        });
        s.witness_commitment = Some(witness_commitment(&[], &WITNESS_RESERVED_VALUE));
        s
    }

    #[test]
    fn built_coinbase_decodes_and_parses_back() {
        let parts = spec().build().unwrap();
        let en = [1, 2, 3, 4, 5, 6, 7, 8];
        let tx = parts.transaction(&en).unwrap();
        assert!(tx.is_coinbase());
        assert_eq!(tx.output.len(), 2);
        assert_eq!(Hash256::from(tx.compute_txid()), parts.txid(&en).unwrap());
        let info = CoinbaseInfo::parse(&tx).unwrap();
        assert_eq!(info.height, Some(900_000));
        assert_eq!(info.value_out, Amount::from_sat(312_500_000));
        assert_eq!(info.witness_commitment, spec().witness_commitment);
        assert_eq!(info.witness_reserved_value, Some(WITNESS_RESERVED_VALUE));
        // The extranonce sits at the very end of the scriptSig, right before coinb2.
        assert!(info.script_sig.ends_with(&en));
        assert_eq!(&parts.suffix[..4], &[0xff; 4]);
    }

    #[test]
    fn extranonce_length_and_script_size_are_enforced() {
        let parts = spec().build().unwrap();
        assert!(matches!(
            parts.txid(&[0; 7]),
            Err(CoinbaseError::ExtranonceLength { got: 7, want: 8 })
        ));
        let mut s = spec();
        s.tag = vec![b'x'; 90];
        assert!(matches!(s.build(), Err(CoinbaseError::ScriptSigSize(_))));
        let mut s = spec();
        s.extranonce_len = 76;
        assert!(matches!(
            s.build(),
            Err(CoinbaseError::ExtranonceTooLong(76))
        ));
    }

    #[test]
    fn overflowing_output_values_are_an_error_not_a_panic() {
        let mut tx = spec().build().unwrap().transaction(&[0; 8]).unwrap();
        for o in &mut tx.output {
            o.value = Amount::from_sat(u64::MAX / 2 + 1);
        }
        assert!(matches!(
            CoinbaseInfo::parse(&tx),
            Err(CoinbaseError::ValueOverflow)
        ));
    }

    #[test]
    fn payout_addresses_are_checked_against_the_network() {
        let mainnet = "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4";
        assert!(payout_script(mainnet, Network::Bitcoin).is_ok());
        assert!(payout_script(mainnet, Network::Regtest).is_err());
        assert!(payout_script("not an address", Network::Regtest).is_err());
        let spk = payout_script(mainnet, Network::Bitcoin).unwrap();
        assert!(spk.is_p2wpkh());
    }
}
