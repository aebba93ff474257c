//! Hex in the forms Stratum V1 uses, without allocating on the hot path.

use primitives::Hash256;

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    #[error("not hex")]
    NotHex,
    #[error("expected {want} hex digits, got {got}")]
    Length { want: usize, got: usize },
}

#[inline]
fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decodes `s` into `out`, which must be exactly half its length.
#[inline]
pub fn decode_into(s: &str, out: &mut [u8]) -> Result<(), HexError> {
    let b = s.as_bytes();
    if b.len() != out.len() * 2 {
        return Err(HexError::Length {
            want: out.len() * 2,
            got: b.len(),
        });
    }
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        *o = (nibble(pair[0]).ok_or(HexError::NotHex)? << 4)
            | nibble(pair[1]).ok_or(HexError::NotHex)?;
    }
    Ok(())
}

pub fn decode(s: &str) -> Result<Vec<u8>, HexError> {
    if !s.len().is_multiple_of(2) {
        return Err(HexError::Length {
            want: s.len() + 1,
            got: s.len(),
        });
    }
    let mut v = vec![0; s.len() / 2];
    decode_into(s, &mut v)?;
    Ok(v)
}

/// A 32-bit field sent as 8 hex digits of its big-endian value (version, nbits, ntime, nonce,
/// version bits).
#[inline]
pub fn decode_u32(s: &str) -> Result<u32, HexError> {
    let mut b = [0u8; 4];
    decode_into(s, &mut b)?;
    Ok(u32::from_be_bytes(b))
}

const DIGITS: &[u8; 16] = b"0123456789abcdef";

#[inline]
pub fn encode_into(bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize]);
        out.push(DIGITS[(b & 15) as usize]);
    }
}

pub fn encode(bytes: &[u8]) -> String {
    let mut v = Vec::with_capacity(bytes.len() * 2);
    encode_into(bytes, &mut v);
    String::from_utf8(v).expect("hex digits are ASCII")
}

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
    fn round_trips_and_errors() {
        let mut out = [0u8; 3];
        decode_into("0aFf10", &mut out).unwrap();
        assert_eq!(out, [0x0a, 0xff, 0x10]);
        assert_eq!(encode(&out), "0aff10");
        assert_eq!(
            decode_into("0aff1", &mut out),
            Err(HexError::Length { want: 6, got: 5 })
        );
        assert_eq!(decode_into("0aff1g", &mut out), Err(HexError::NotHex));
        assert_eq!(decode_u32("1d00ffff"), Ok(0x1d00ffff));
        assert!(decode_u32("1d00fff").is_err());
        assert!(decode("abc").is_err());
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
