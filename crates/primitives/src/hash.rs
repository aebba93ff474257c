//! SHA-256d and the 32-byte hashes it produces.
//!
//! Hashing goes through the `sha2` crate, which uses the CPU's SHA extensions where present.
//! Header hashing calls its block compression function directly so that the constant padding
//! blocks are laid out once and the first header block can be cached as a midstate.

use std::fmt;
use std::str::FromStr;

use sha2::digest::generic_array::GenericArray;
use sha2::{Digest, Sha256};

use crate::hex::{self, HexError};

/// SHA-256's initial state.
pub(crate) const IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// A double-SHA-256 result (block hash, txid, merkle node) in internal byte order: the order the
/// hash function outputs and headers contain. Explorers and RPC display it reversed.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Hash256(pub [u8; 32]);

impl Hash256 {
    pub const ZERO: Hash256 = Hash256([0; 32]);

    pub const fn to_byte_array(self) -> [u8; 32] {
        self.0
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Parses the reversed hex that RPC and explorers show.
    pub fn from_display_hex(s: &str) -> Result<Self, HexError> {
        let mut h = Self::from_internal_hex(s)?;
        h.0.reverse();
        Ok(h)
    }

    /// Parses hex in internal byte order (as raw bytes appear in a serialization).
    pub fn from_internal_hex(s: &str) -> Result<Self, HexError> {
        let mut b = [0u8; 32];
        hex::decode_into(s, &mut b)?;
        Ok(Hash256(b))
    }

    pub fn to_internal_hex(&self) -> String {
        hex::encode(&self.0)
    }
}

/// Display order (reversed), as RPC prints block hashes and txids.
impl fmt::Display for Hash256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0.iter().rev() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Hash256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash256({self})")
    }
}

impl FromStr for Hash256 {
    type Err = HexError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_display_hex(s)
    }
}

macro_rules! bitcoin_hash_conversions {
    ($($t:ty),*) => {$(
        impl From<Hash256> for $t {
            fn from(h: Hash256) -> Self {
                use bitcoin::hashes::Hash as _;
                <$t>::from_byte_array(h.0)
            }
        }
        impl From<$t> for Hash256 {
            fn from(h: $t) -> Self {
                use bitcoin::hashes::Hash as _;
                Hash256(h.to_byte_array())
            }
        }
    )*};
}
bitcoin_hash_conversions!(
    bitcoin::BlockHash,
    bitcoin::Txid,
    bitcoin::Wtxid,
    bitcoin::TxMerkleNode,
    bitcoin::WitnessMerkleNode
);

/// SHA-256d of a byte string.
pub fn sha256d(data: &[u8]) -> Hash256 {
    let first = Sha256::digest(data);
    Hash256(Sha256::digest(first).into())
}

/// SHA-256d of the concatenation of several byte strings, without concatenating them.
pub fn sha256d_parts(parts: &[&[u8]]) -> Hash256 {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    Hash256(Sha256::digest(h.finalize()).into())
}

#[inline]
pub(crate) fn compress(state: &mut [u32; 8], block: &[u8; 64]) {
    sha2::compress256(state, std::slice::from_ref(GenericArray::from_slice(block)));
}

#[inline]
fn state_to_bytes(state: &[u32; 8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, w) in state.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
    }
    out
}

/// The second SHA-256 of SHA-256d: one compression of a 32-byte digest plus constant padding.
#[inline]
pub(crate) fn second_hash(first: &[u32; 8]) -> Hash256 {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(&state_to_bytes(first));
    block[32] = 0x80;
    block[62] = 0x01; // bit length 256 = 0x0100, big-endian in the last 8 bytes
    let mut st = IV;
    compress(&mut st, &block);
    Hash256(state_to_bytes(&st))
}

/// SHA-256d of a 64-byte message (a merkle step): 3 compressions.
#[inline]
pub(crate) fn sha256d_64(msg: &[u8; 64]) -> Hash256 {
    const PAD: [u8; 64] = {
        let mut p = [0u8; 64];
        p[0] = 0x80;
        p[62] = 0x02; // 512 bits
        p
    };
    let mut st = IV;
    compress(&mut st, msg);
    compress(&mut st, &PAD);
    second_hash(&st)
}

/// SHA-256d of an 80-byte header: 3 compressions.
#[inline]
pub fn sha256d_header(header: &[u8; 80]) -> Hash256 {
    HeaderMidstate::new(header[..64].try_into().expect("64 bytes"))
        .finish(header[64..].try_into().expect("16 bytes"))
}

/// SHA-256 state after a header's first 64 bytes (version, previous hash and 28 bytes of merkle
/// root): a header that varies only in its last 16 bytes (merkle tail, time, bits, nonce) then
/// costs 2 compressions.
#[derive(Clone, Copy, Debug)]
pub struct HeaderMidstate([u32; 8]);

impl HeaderMidstate {
    pub fn new(first64: &[u8; 64]) -> Self {
        let mut st = IV;
        compress(&mut st, first64);
        HeaderMidstate(st)
    }

    /// Finishes SHA-256d given the header's last 16 bytes.
    #[inline]
    pub fn finish(&self, tail: &[u8; 16]) -> Hash256 {
        let mut block = [0u8; 64];
        block[..16].copy_from_slice(tail);
        block[16] = 0x80;
        block[62] = 0x02;
        block[63] = 0x80; // 640 bits = 0x0280
        let mut st = self.0;
        compress(&mut st, &block);
        second_hash(&st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256d_known_answer() {
        // SHA-256d("hello") as used in many Bitcoin test suites.
        assert_eq!(
            sha256d(b"hello").to_internal_hex(),
            "9595c9df90075148eb06860365df33584b75bff782a510c6cd4883a419833d50"
        );
        assert_eq!(sha256d_parts(&[b"he", b"", b"llo"]), sha256d(b"hello"));
    }

    #[test]
    fn compression_paths_agree_with_the_streaming_hash() {
        let msg: [u8; 64] = std::array::from_fn(|i| (i as u8).wrapping_mul(7));
        assert_eq!(sha256d_64(&msg), sha256d(&msg));
        let header: [u8; 80] = std::array::from_fn(|i| (i as u8).wrapping_mul(13));
        assert_eq!(sha256d_header(&header), sha256d(&header));
    }

    #[test]
    fn display_is_reversed_internal_order() {
        let h = Hash256::from_display_hex(
            "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f",
        )
        .unwrap();
        assert_eq!(h.0[31], 0x00);
        assert_eq!(h.0[0], 0x6f);
        assert_eq!(
            h.to_string(),
            "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f"
        );
        assert_eq!(Hash256::from_internal_hex(&h.to_internal_hex()).unwrap(), h);
        assert!(Hash256::from_display_hex("00").is_err());
        assert!(Hash256::from_display_hex(&"g".repeat(64)).is_err());
        let b: bitcoin::BlockHash = h.into();
        assert_eq!(b.to_string(), h.to_string());
    }
}
