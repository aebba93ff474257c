//! The template fingerprint: one 64-bit name for "this set of transactions on this tip".
//!
//! The lab has to tie a job a device worked on to the template it came from, across protocols
//! and through third-party pools whose template ids it never sees. What every job format does
//! carry is the coinbase's merkle path (SV1 `mining.notify` `merkle_branch`, SV2 `merkle_path` in
//! extended jobs and in the Template Distribution `NewTemplate`) and the previous block hash. The
//! path is fixed by the template's non-coinbase transactions and does not depend on the coinbase,
//! so the pool, a translator and a device all compute the same value for the same template,
//! whatever extranonce or payout each put in its coinbase.
//!
//! The prev hash is part of the input because the path alone does not name a template: an empty
//! template has an empty path on every tip, and a template rebuilt on a new tip can keep the same
//! transactions. The path length is part of the input so that a path can never be confused with
//! a longer one that starts with it.
//!
//! All hashes are in internal byte order: the raw bytes as they appear in a serialization. That is
//! how SV2 carries them and how SV1's `merkle_branch` hex decodes; SV1's `prevhash` field uses its
//! own word-swapped order and must be converted to internal order before it is passed here.

use std::fmt;

use primitives::Hash256;
use sha2::{Digest, Sha256};

/// A template fingerprint (see [`fingerprint`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Fingerprint(pub u64);

/// The first 8 bytes, read as a little-endian `u64`, of
/// `SHA-256(prev_hash || u32_le(merkle_path.len()) || merkle_path[0] || merkle_path[1] || ...)`.
pub fn fingerprint(prev_hash: &Hash256, merkle_path: &[Hash256]) -> Fingerprint {
    let mut h = Sha256::new();
    h.update(prev_hash.0);
    // A path longer than u32::MAX hashes could not come from a block; saturating keeps this total.
    let count = u32::try_from(merkle_path.len()).unwrap_or(u32::MAX);
    h.update(count.to_le_bytes());
    for node in merkle_path {
        h.update(node.0);
    }
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Fingerprint(u64::from_le_bytes(first))
}

/// Sixteen hex digits, zero-padded (JSON consumers cannot hold every u64 as a number).
impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

impl serde::Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(b: u8) -> Hash256 {
        Hash256([b; 32])
    }

    #[test]
    fn deterministic() {
        let path = [h(1), h(2), h(3)];
        assert_eq!(fingerprint(&h(9), &path), fingerprint(&h(9), &path));
    }

    #[test]
    fn every_input_matters() {
        let base = fingerprint(&h(9), &[h(1), h(2)]);
        assert_ne!(base, fingerprint(&h(8), &[h(1), h(2)]), "prev hash");
        assert_ne!(base, fingerprint(&h(9), &[h(2), h(1)]), "path order");
        assert_ne!(base, fingerprint(&h(9), &[h(1)]), "path length");
        assert_ne!(base, fingerprint(&h(9), &[h(1), h(2), h(3)]), "path length");
        let mut flipped = h(2);
        flipped.0[31] ^= 1;
        assert_ne!(
            base,
            fingerprint(&h(9), &[h(1), flipped]),
            "one bit of the path"
        );
    }

    #[test]
    fn empty_templates_on_different_tips_differ() {
        assert_ne!(fingerprint(&h(1), &[]), fingerprint(&h(2), &[]));
    }

    #[test]
    fn known_answer_from_a_plain_sha256() {
        let prev = h(0xab);
        let path = [h(0x01), h(0x02)];
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&prev.0);
        bytes.extend_from_slice(&2u32.to_le_bytes());
        bytes.extend_from_slice(&path[0].0);
        bytes.extend_from_slice(&path[1].0);
        let digest = Sha256::digest(&bytes);
        let expected = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
        assert_eq!(fingerprint(&prev, &path), Fingerprint(expected));
    }

    /// Values computed outside Rust: the bytes written by a Python one-liner, piped into `sha256sum`;
    /// the first 8 bytes of the digest read little-endian.
    #[test]
    fn known_answer_fixed() {
        assert_eq!(
            fingerprint(&h(0xab), &[h(0x01), h(0x02)]),
            Fingerprint(KAT_TWO)
        );
        assert_eq!(fingerprint(&Hash256::ZERO, &[]), Fingerprint(KAT_EMPTY));
    }

    const KAT_TWO: u64 = 0x140b_3a19_3904_a23e;
    const KAT_EMPTY: u64 = 0xf656_d39f_d55f_b66d;

    #[test]
    fn display_is_sixteen_hex_digits() {
        assert_eq!(Fingerprint(0xab).to_string(), "00000000000000ab");
    }
}
