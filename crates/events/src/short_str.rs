//! A short inline string for names, labels and reasons.
//!
//! Events are built on hot paths (one per share), so they must not allocate: names of nodes and
//! links, worker labels, close reasons and SV1 job ids are held inline with a fixed capacity, which
//! also makes every event `Copy`.

use std::fmt;
use std::ops::Deref;

/// A UTF-8 string of at most [`ShortStr::CAPACITY`] bytes, stored inline.
///
/// Longer input is cut at the last char boundary that fits: the schema's short strings are names
/// and labels, for which a truncated value is still useful and an allocation is not acceptable.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShortStr {
    len: u8,
    // Bytes past `len` are always zero, so the derived comparisons see only the text.
    bytes: [u8; ShortStr::CAPACITY],
}

impl ShortStr {
    /// Long enough for a bech32 payout address followed by a worker suffix, the longest label
    /// miners commonly use.
    pub const CAPACITY: usize = 64;

    /// The empty string.
    pub const EMPTY: ShortStr = ShortStr {
        len: 0,
        bytes: [0; ShortStr::CAPACITY],
    };

    /// Copies `s`, truncating it on a char boundary if it is longer than the capacity.
    pub fn new(s: &str) -> Self {
        let mut end = s.len().min(Self::CAPACITY);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0; Self::CAPACITY];
        bytes[..end].copy_from_slice(&s.as_bytes()[..end]);
        ShortStr {
            len: end as u8,
            bytes,
        }
    }

    /// Whether `s` fits without truncation.
    pub fn fits(s: &str) -> bool {
        s.len() <= Self::CAPACITY
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Construction only ever copies whole chars of a `str`, so this cannot fail; the fallback
        // keeps the type free of `unsafe` at the cost of a short validation.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    /// The UTF-8 bytes, without padding.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the string is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for ShortStr {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl Deref for ShortStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ShortStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for ShortStr {
    fn from(s: &str) -> Self {
        ShortStr::new(s)
    }
}

impl From<&String> for ShortStr {
    fn from(s: &String) -> Self {
        ShortStr::new(s)
    }
}

impl PartialEq<str> for ShortStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ShortStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl serde::Serialize for ShortStr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_short_text() {
        let s = ShortStr::new("pool");
        assert_eq!(s.as_str(), "pool");
        assert_eq!(s.len(), 4);
        assert_eq!(s, "pool");
        assert!(ShortStr::new("").is_empty());
    }

    #[test]
    fn truncates_on_a_char_boundary() {
        let long = "x".repeat(ShortStr::CAPACITY - 1) + "é"; // é is 2 bytes: 1 too many
        let s = ShortStr::new(&long);
        assert_eq!(s.len(), ShortStr::CAPACITY - 1);
        assert_eq!(s.as_str(), &long[..ShortStr::CAPACITY - 1]);
        assert!(!ShortStr::fits(&long));

        let exact = "y".repeat(ShortStr::CAPACITY);
        assert_eq!(ShortStr::new(&exact).as_str(), exact);
    }

    #[test]
    fn equality_ignores_construction_history() {
        let a = ShortStr::new(&"a".repeat(200));
        let b = ShortStr::new(&"a".repeat(ShortStr::CAPACITY));
        assert_eq!(a, b);
    }
}
