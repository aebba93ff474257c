//! Hex in the forms Stratum V1 uses (big-endian 32-bit fields, the word-swapped prevhash); the
//! byte-level codec is `primitives::hex`.

use primitives::Hash256;

pub use primitives::hex::{decode, decode_into, encode, encode_into, HexError};

/// A 32-bit field sent as 8 hex digits of its big-endian value (version, nbits, ntime, nonce,
/// version bits).
#[inline]
pub fn decode_u32(s: &str) -> Result<u32, HexError> {
    let mut b = [0u8; 4];
    decode_into(s, &mut b)?;
    Ok(u32::from_be_bytes(b))
}

/// Appends `v` as 8 hex digits of its big-endian value ([`decode_u32`]'s inverse).
#[inline]
pub fn encode_u32_into(v: u32, out: &mut Vec<u8>) {
    encode_into(&v.to_be_bytes(), out);
}

/// `mining.notify`'s `prevhash`: the hash in internal byte order with every 4-byte word
/// byte-reversed (what miners load into the header after swapping each word back).
pub fn prevhash_to_stratum(h: &Hash256) -> [u8; 32] {
    let mut out = h.0;
    for w in out.chunks_exact_mut(4) {
        w.reverse();
    }
    out
}

/// Inverse of [`prevhash_to_stratum`] (the swap is its own inverse).
pub fn prevhash_from_stratum(words: [u8; 32]) -> Hash256 {
    Hash256(prevhash_to_stratum(&Hash256(words)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u32_fields_are_big_endian_hex() {
        assert_eq!(decode_u32("1d00ffff"), Ok(0x1d00ffff));
        assert!(decode_u32("1d00fff").is_err());
        let mut out = Vec::new();
        encode_u32_into(0x2000_0000, &mut out);
        assert_eq!(out, b"20000000");
    }

    #[test]
    fn prevhash_word_swap_matches_the_published_example() {
        // The example notify in the public Stratum V1 documentation: block
        // 00000000440b921e1b77c6c0487ae5616de67f788f44ae2a5af6e2194d16b6f8 is sent as below.
        let h = Hash256::from_display_hex(
            "00000000440b921e1b77c6c0487ae5616de67f788f44ae2a5af6e2194d16b6f8",
        )
        .unwrap();
        assert_eq!(
            encode(&prevhash_to_stratum(&h)),
            "4d16b6f85af6e2198f44ae2a6de67f78487ae5611b77c6c0440b921e00000000"
        );
        assert_eq!(prevhash_from_stratum(prevhash_to_stratum(&h)), h);
    }
}
