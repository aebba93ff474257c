//! Hex without allocating on hot paths: decoding into a caller's buffer, encoding onto one.

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
/// Why a string does not decode as hex of the expected length.
pub enum HexError {
    /// A character other than 0-9, a-f, A-F.
    #[error("not hex")]
    NotHex,
    /// The wrong number of digits: not twice the output length, or odd.
    #[error("expected {want} hex digits, got {got}")]
    Length {
        /// Hex digits expected: twice the output length (for [`decode`], the next even count).
        want: usize,
        /// Hex digits the string has.
        got: usize,
    },
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

/// Decodes hex of any even length (either case) into a new vector.
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

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends the lowercase hex of `bytes` to `out`.
#[inline]
pub fn encode_into(bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize]);
        out.push(DIGITS[(b & 15) as usize]);
    }
}

/// Lowercase hex of `bytes`, in the order given.
pub fn encode(bytes: &[u8]) -> String {
    let mut v = Vec::with_capacity(bytes.len() * 2);
    encode_into(bytes, &mut v);
    String::from_utf8(v).expect("hex digits are ASCII")
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
        assert!(decode("abc").is_err());
        assert_eq!(decode("").unwrap(), Vec::<u8>::new());
    }
}
