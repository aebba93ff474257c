//! Targets: the 256-bit threshold a header hash must not exceed, and its compact `nBits` form.

use std::fmt;
use std::ops::{Shl, Shr};

use super::u256::U256;

/// The compact `nBits` encoding of a target, as it appears in block headers and `mining.notify`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct CompactTarget(u32);

impl CompactTarget {
    /// The bits as a header or `getblocktemplate` carries them.
    pub const fn from_consensus(bits: u32) -> Self {
        CompactTarget(bits)
    }

    /// The bits as a header carries them.
    pub const fn to_consensus(self) -> u32 {
        self.0
    }
}

impl fmt::Display for CompactTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

/// Why a compact encoding does not name a usable target (Bitcoin Core's `SetCompact` flags).
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum CompactError {
    /// The sign bit (0x00800000) is set with a non-zero mantissa.
    #[error("compact target {0} has the sign bit set (negative)")]
    Negative(CompactTarget),
    /// The exponent shifts the mantissa past 256 bits.
    #[error("compact target {0} overflows 256 bits")]
    Overflow(CompactTarget),
}

/// A 256-bit target. A hash meets it when the hash, read as a little-endian number, is `<=` it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Target(pub(super) U256);

impl Target {
    /// Met by no hash but zero.
    pub const ZERO: Target = Target(U256::ZERO);
    /// Met by every hash.
    pub const MAX: Target = Target(U256::MAX);
    /// The difficulty-1 target, `0x00000000FFFF0000...`: pool difficulty is measured against it.
    pub const DIFFICULTY_1: Target = Target(U256([0, 0, 0, 0x0000_0000_ffff_0000]));
    /// Regtest's proof-of-work limit (`nBits` 0x207fffff).
    pub const REGTEST_LIMIT: Target = Target(U256([0, 0, 0, 0x7fff_ff00_0000_0000]));

    /// The target with this numeric value.
    pub const fn from_u256(v: U256) -> Self {
        Target(v)
    }

    /// The target's numeric value.
    pub const fn as_u256(&self) -> U256 {
        self.0
    }

    /// From bytes in hash order (little-endian), the form SV2 messages carry targets in.
    pub fn from_le_bytes(b: &[u8; 32]) -> Self {
        Target(U256::from_le_bytes(b))
    }

    /// To bytes in hash order (little-endian), the form SV2 messages carry targets in.
    pub fn to_le_bytes(self) -> [u8; 32] {
        self.0.to_le_bytes()
    }

    /// From bytes in display order (big-endian), the form RPC `target` fields use.
    pub fn from_be_bytes(b: &[u8; 32]) -> Self {
        Target(U256::from_be_bytes(b))
    }

    /// To bytes in display order (big-endian), the form RPC `target` fields use.
    pub fn to_be_bytes(self) -> [u8; 32] {
        self.0.to_be_bytes()
    }

    /// Whether this is [`Target::ZERO`].
    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }

    /// Decodes `nBits` exactly as Bitcoin Core's `arith_uint256::SetCompact` does, refusing the
    /// encodings Core flags as negative or overflowing. A zero mantissa decodes to zero (never
    /// negative), whatever its sign bit.
    pub fn from_compact(c: CompactTarget) -> Result<Self, CompactError> {
        let bits = c.0;
        let size = bits >> 24;
        let mut word = bits & 0x007f_ffff;
        let value = if size <= 3 {
            word >>= 8 * (3 - size);
            U256::from_u64(word as u64)
        } else {
            U256::from_u64(word as u64).shl(8 * (size - 3))
        };
        if word != 0 && bits & 0x0080_0000 != 0 {
            return Err(CompactError::Negative(c));
        }
        let overflow =
            word != 0 && (size > 34 || (word > 0xff && size > 33) || (word > 0xffff && size > 32));
        if overflow {
            return Err(CompactError::Overflow(c));
        }
        Ok(Target(value))
    }

    /// Encodes as `nBits` the way Core's `GetCompact` does: the mantissa keeps the top three
    /// significant bytes and the rest is truncated, so the result never exceeds `self`.
    pub fn to_compact_lossy(self) -> CompactTarget {
        let mut size = self.0.bits().div_ceil(8);
        let mut compact = if size <= 3 {
            (self.0.low_u64() << (8 * (3 - size))) as u32
        } else {
            self.0.shr(8 * (size - 3)).low_u64() as u32
        };
        // The mantissa's top bit is the sign: move it into the exponent instead.
        if compact & 0x0080_0000 != 0 {
            compact >>= 8;
            size += 1;
        }
        CompactTarget::from_consensus(compact | size << 24)
    }

    /// Whether a hash in internal byte order (as SHA-256d returns it) meets this target.
    #[inline]
    pub fn is_met_by(&self, hash: &[u8; 32]) -> bool {
        U256::from_le_bytes(hash) <= self.0
    }

    /// The larger (easier) of two targets.
    pub fn max(self, o: Target) -> Target {
        std::cmp::max(self, o)
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Target({self})")
    }
}

/// Big-endian hex, as RPC and explorers print targets.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.to_be_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl From<Target> for bitcoin::Target {
    fn from(t: Target) -> Self {
        bitcoin::Target::from_le_bytes(t.to_le_bytes())
    }
}

impl From<bitcoin::Target> for Target {
    fn from(t: bitcoin::Target) -> Self {
        Target::from_le_bytes(&t.to_le_bytes())
    }
}

impl From<CompactTarget> for bitcoin::CompactTarget {
    fn from(c: CompactTarget) -> Self {
        bitcoin::CompactTarget::from_consensus(c.0)
    }
}

impl From<bitcoin::CompactTarget> for CompactTarget {
    fn from(c: bitcoin::CompactTarget) -> Self {
        CompactTarget::from_consensus(c.to_consensus())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex_be(t: Target) -> String {
        t.to_string()
    }

    #[test]
    fn difficulty_one_from_compact() {
        let t = Target::from_compact(CompactTarget::from_consensus(0x1d00ffff)).unwrap();
        assert_eq!(t, Target::DIFFICULTY_1);
        assert_eq!(
            hex_be(t),
            "00000000ffff0000000000000000000000000000000000000000000000000000"
        );
        assert_eq!(
            t.to_compact_lossy(),
            CompactTarget::from_consensus(0x1d00ffff)
        );
    }

    #[test]
    fn regtest_limit_round_trips() {
        let t = Target::from_compact(CompactTarget::from_consensus(0x207fffff)).unwrap();
        assert_eq!(t, Target::REGTEST_LIMIT);
        assert_eq!(
            t.to_compact_lossy(),
            CompactTarget::from_consensus(0x207fffff)
        );
    }

    // Cases from Bitcoin Core's arith_uint256 tests (SetCompact / GetCompact).
    #[test]
    fn core_compact_cases() {
        let ok = |bits: u32, value: u128, back: u32| {
            let t = Target::from_compact(CompactTarget::from_consensus(bits)).unwrap();
            assert_eq!(t.as_u256(), U256::from_u128(value), "{bits:08x}");
            assert_eq!(
                t.to_compact_lossy(),
                CompactTarget::from_consensus(back),
                "{bits:08x}"
            );
        };
        ok(0, 0, 0);
        ok(0x00123456, 0, 0);
        ok(0x01003456, 0, 0);
        ok(0x02000056, 0, 0);
        ok(0x03000000, 0, 0);
        ok(0x04000000, 0, 0);
        ok(0x00923456, 0, 0);
        ok(0x01803456, 0, 0);
        ok(0x02800056, 0, 0);
        ok(0x03800000, 0, 0);
        ok(0x04800000, 0, 0);
        ok(0x01123456, 0x12, 0x01120000);
        ok(0x02123456, 0x1234, 0x02123400);
        ok(0x03123456, 0x123456, 0x03123456);
        ok(0x04123456, 0x12345600, 0x04123456);
        ok(0x05009234, 0x92340000, 0x05009234);
        // 0x80 in the mantissa's top byte moves into the exponent on encoding.
        ok(0x01800000 | 0x80, 0, 0);
        let t = Target::from_compact(CompactTarget::from_consensus(0x20123456)).unwrap();
        assert_eq!(
            hex_be(t),
            "1234560000000000000000000000000000000000000000000000000000000000"
        );
        assert_eq!(
            t.to_compact_lossy(),
            CompactTarget::from_consensus(0x20123456)
        );
    }

    #[test]
    fn negative_encodings_are_refused() {
        for bits in [0x01fedcba, 0x04923456, 0x01803456 | 0x010000] {
            assert_eq!(
                Target::from_compact(CompactTarget::from_consensus(bits)),
                Err(CompactError::Negative(CompactTarget::from_consensus(bits))),
                "{bits:08x}"
            );
        }
    }

    #[test]
    fn overflowing_encodings_are_refused() {
        for bits in [0xff123456u32, 0x23000001, 0x22000100, 0x21010000] {
            assert_eq!(
                Target::from_compact(CompactTarget::from_consensus(bits)),
                Err(CompactError::Overflow(CompactTarget::from_consensus(bits))),
                "{bits:08x}"
            );
        }
        // The largest encodings that still fit.
        assert!(Target::from_compact(CompactTarget::from_consensus(0x220000ff)).is_ok());
        assert!(Target::from_compact(CompactTarget::from_consensus(0x2100ffff)).is_ok());
        assert!(Target::from_compact(CompactTarget::from_consensus(0x207fffff)).is_ok());
    }

    #[test]
    fn encoding_rounds_down() {
        // A target whose low bytes cannot be kept: the encoding must not describe a larger one.
        let t = Target::from_u256(U256::from_u128(0x1234_5678_9abc));
        let c = t.to_compact_lossy();
        assert_eq!(c, CompactTarget::from_consensus(0x06123456));
        assert!(Target::from_compact(c).unwrap() <= t);
        // Maximum target encodes with the exponent past 32 bytes.
        assert_eq!(
            Target::MAX.to_compact_lossy(),
            CompactTarget::from_consensus(0x2100ffff)
        );
    }

    #[test]
    fn hash_comparison_is_little_endian_and_inclusive() {
        let t = Target::DIFFICULTY_1;
        let mut hash = t.to_le_bytes();
        assert!(t.is_met_by(&hash), "equal meets");
        hash[0] = 1; // one more than the target's least significant byte (which is zero)
        assert!(!t.is_met_by(&hash));
        let zero = [0u8; 32];
        assert!(Target::ZERO.is_met_by(&zero));
    }

    #[test]
    fn bitcoin_crate_interop() {
        let c = CompactTarget::from_consensus(0x1b0404cb);
        let ours = Target::from_compact(c).unwrap();
        let theirs = bitcoin::Target::from_compact(c.into());
        assert_eq!(Target::from(theirs), ours);
        assert_eq!(
            CompactTarget::from(bitcoin::Target::from(ours).to_compact_lossy()),
            c
        );
    }
}
