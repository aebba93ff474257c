//! The 80-byte block header.

use crate::hash::{sha256d_header, Hash256};
use crate::pow::CompactTarget;

/// A block header in its consensus fields. `version` is the raw 32-bit field (BIP9/BIP320 bits
/// included), so it is unsigned here.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Header {
    /// nVersion, including the BIP9 signalling and BIP320 rolled bits.
    pub version: u32,
    /// The previous block's hash, in internal byte order.
    pub prev_hash: Hash256,
    /// The merkle root of the block's txids, in internal byte order.
    pub merkle_root: Hash256,
    /// nTime: Unix time in seconds as the miner set it (SV1 `ntime`).
    pub time: u32,
    /// nBits: the network target in compact form.
    pub bits: CompactTarget,
    /// The nonce the miner found.
    pub nonce: u32,
}

impl Header {
    /// Serialized length in bytes.
    pub const SIZE: usize = 80;

    /// The consensus serialization: integers little-endian, hashes in internal order.
    pub fn to_bytes(&self) -> [u8; 80] {
        let mut b = [0u8; 80];
        b[0..4].copy_from_slice(&self.version.to_le_bytes());
        b[4..36].copy_from_slice(&self.prev_hash.0);
        b[36..68].copy_from_slice(&self.merkle_root.0);
        b[68..72].copy_from_slice(&self.time.to_le_bytes());
        b[72..76].copy_from_slice(&self.bits.to_consensus().to_le_bytes());
        b[76..80].copy_from_slice(&self.nonce.to_le_bytes());
        b
    }

    /// Reads the consensus serialization back ([`Header::to_bytes`]'s inverse).
    pub fn from_bytes(b: &[u8; 80]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Header {
            version: u32_at(0),
            prev_hash: Hash256(b[4..36].try_into().expect("32 bytes")),
            merkle_root: Hash256(b[36..68].try_into().expect("32 bytes")),
            time: u32_at(68),
            bits: CompactTarget::from_consensus(u32_at(72)),
            nonce: u32_at(76),
        }
    }

    /// The block hash (SHA-256d of the serialized header).
    #[inline]
    pub fn block_hash(&self) -> Hash256 {
        sha256d_header(&self.to_bytes())
    }
}

impl From<Header> for bitcoin::block::Header {
    fn from(h: Header) -> Self {
        bitcoin::block::Header {
            version: bitcoin::block::Version::from_consensus(h.version as i32),
            prev_blockhash: h.prev_hash.into(),
            merkle_root: h.merkle_root.into(),
            time: h.time,
            bits: h.bits.into(),
            nonce: h.nonce,
        }
    }
}

impl From<bitcoin::block::Header> for Header {
    fn from(h: bitcoin::block::Header) -> Self {
        Header {
            version: h.version.to_consensus() as u32,
            prev_hash: h.prev_blockhash.into(),
            merkle_root: h.merkle_root.into(),
            time: h.time,
            bits: h.bits.into(),
            nonce: h.nonce,
        }
    }
}
