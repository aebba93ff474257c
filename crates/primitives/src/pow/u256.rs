//! A minimal unsigned 256-bit integer: just the operations target, difficulty and work math need.
//!
//! Limbs are little-endian (`0` is least significant), which matches the byte order Bitcoin uses
//! for hashes compared as numbers, so a header hash converts without shuffling words.

use std::cmp::Ordering;
use std::ops::{Shl, Shr};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
/// An unsigned 256-bit integer as four little-endian 64-bit limbs.
pub struct U256(pub(super) [u64; 4]);

impl U256 {
    /// Zero.
    pub const ZERO: U256 = U256([0; 4]);
    /// One.
    pub const ONE: U256 = U256([1, 0, 0, 0]);
    /// `2^256 - 1`.
    pub const MAX: U256 = U256([u64::MAX; 4]);

    /// From little-endian 64-bit limbs (`0` least significant).
    pub const fn from_words(words: [u64; 4]) -> Self {
        U256(words)
    }

    /// The little-endian 64-bit limbs.
    pub const fn to_words(self) -> [u64; 4] {
        self.0
    }

    /// Widens a u64.
    pub const fn from_u64(v: u64) -> Self {
        U256([v, 0, 0, 0])
    }

    /// Widens a u128.
    pub const fn from_u128(v: u128) -> Self {
        U256([v as u64, (v >> 64) as u64, 0, 0])
    }

    /// Interprets 32 bytes as a little-endian number (a hash as Bitcoin compares it).
    pub fn from_le_bytes(b: &[u8; 32]) -> Self {
        let mut l = [0u64; 4];
        for (i, limb) in l.iter_mut().enumerate() {
            *limb = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        }
        U256(l)
    }

    /// 32 bytes, least significant first (hash order).
    pub fn to_le_bytes(self) -> [u8; 32] {
        let mut b = [0u8; 32];
        for (i, limb) in self.0.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&limb.to_le_bytes());
        }
        b
    }

    /// Interprets 32 bytes as a big-endian number (display order, as RPC prints targets).
    pub fn from_be_bytes(b: &[u8; 32]) -> Self {
        let mut le = *b;
        le.reverse();
        Self::from_le_bytes(&le)
    }

    /// 32 bytes, most significant first (display order).
    pub fn to_be_bytes(self) -> [u8; 32] {
        let mut b = self.to_le_bytes();
        b.reverse();
        b
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 4]
    }

    /// Number of significant bits (0 for zero).
    pub fn bits(&self) -> u32 {
        for i in (0..4).rev() {
            if self.0[i] != 0 {
                return 64 * i as u32 + (64 - self.0[i].leading_zeros());
            }
        }
        0
    }

    /// The low 64 bits; higher bits are dropped.
    pub fn low_u64(&self) -> u64 {
        self.0[0]
    }

    /// The low 128 bits; higher bits are dropped.
    pub fn low_u128(&self) -> u128 {
        self.0[0] as u128 | (self.0[1] as u128) << 64
    }

    /// Shift left; bits shifted past 256 are lost.
    fn shift_left(self, n: u32) -> Self {
        if n >= 256 {
            return Self::ZERO;
        }
        let (words, bits) = ((n / 64) as usize, n % 64);
        let mut r = [0u64; 4];
        for i in (words..4).rev() {
            let src = i - words;
            r[i] = self.0[src] << bits;
            if bits > 0 && src > 0 {
                r[i] |= self.0[src - 1] >> (64 - bits);
            }
        }
        U256(r)
    }

    fn shift_right(self, n: u32) -> Self {
        if n >= 256 {
            return Self::ZERO;
        }
        let (words, bits) = ((n / 64) as usize, n % 64);
        let mut r = [0u64; 4];
        for (i, out) in r.iter_mut().enumerate().take(4 - words) {
            let src = i + words;
            *out = self.0[src] >> bits;
            if bits > 0 && src + 1 < 4 {
                *out |= self.0[src + 1] << (64 - bits);
            }
        }
        U256(r)
    }

    /// Addition; `None` on overflow.
    pub fn checked_add(self, o: Self) -> Option<Self> {
        let mut r = [0u64; 4];
        let mut carry = false;
        for (i, out) in r.iter_mut().enumerate() {
            let (s1, c1) = self.0[i].overflowing_add(o.0[i]);
            let (s2, c2) = s1.overflowing_add(carry as u64);
            *out = s2;
            carry = c1 || c2;
        }
        (!carry).then_some(U256(r))
    }

    /// Addition, clamped to [`U256::MAX`].
    pub fn saturating_add(self, o: Self) -> Self {
        self.checked_add(o).unwrap_or(Self::MAX)
    }

    /// Subtraction modulo 2^256.
    pub fn wrapping_sub(self, o: Self) -> Self {
        let mut r = [0u64; 4];
        let mut borrow = false;
        for (i, out) in r.iter_mut().enumerate() {
            let (d1, b1) = self.0[i].overflowing_sub(o.0[i]);
            let (d2, b2) = d1.overflowing_sub(borrow as u64);
            *out = d2;
            borrow = b1 || b2;
        }
        U256(r)
    }

    /// Multiplication by a u64; `None` on overflow.
    pub fn checked_mul_u64(self, m: u64) -> Option<Self> {
        let mut r = [0u64; 4];
        let mut carry: u128 = 0;
        for (i, out) in r.iter_mut().enumerate() {
            let p = self.0[i] as u128 * m as u128 + carry;
            *out = p as u64;
            carry = p >> 64;
        }
        (carry == 0).then_some(U256(r))
    }

    /// Division by a non-zero u64, rounding down.
    pub fn div_u64(self, d: u64) -> Self {
        assert!(d != 0, "division by zero");
        let mut r = [0u64; 4];
        let mut rem: u128 = 0;
        for i in (0..4).rev() {
            let cur = (rem << 64) | self.0[i] as u128;
            r[i] = (cur / d as u128) as u64;
            rem = cur % d as u128;
        }
        U256(r)
    }

    /// Long division rounding down. Not for hot paths (bit by bit).
    fn long_div(self, d: Self) -> Self {
        assert!(!d.is_zero(), "division by zero");
        if d.0[1..] == [0, 0, 0] {
            return self.div_u64(d.0[0]);
        }
        if self < d {
            return Self::ZERO;
        }
        let shift = self.bits() - d.bits();
        let mut den = d.shl(shift);
        let mut rem = self;
        let mut q = Self::ZERO;
        for s in (0..=shift).rev() {
            if rem >= den {
                rem = rem.wrapping_sub(den);
                q.0[(s / 64) as usize] |= 1 << (s % 64);
            }
            den = den.shr(1);
        }
        q
    }

    /// The nearest f64 (round half to even), so conversions lose at most half an ulp.
    pub fn to_f64(self) -> f64 {
        let bits = self.bits();
        if bits <= 64 {
            return self.0[0] as f64;
        }
        // Keep 64 significant bits plus a sticky bit for the ones below, then let the u64 -> f64
        // conversion do the single correct rounding.
        let shift = bits - 64;
        let top = self.shr(shift).0[0];
        let sticky = !self.shl(256 - shift).is_zero();
        // Folding the sticky bit into the lowest of the 64 kept bits is exact for rounding to 53
        // bits: that bit is far below the rounding position.
        let m = top | sticky as u64;
        m as f64 * 2f64.powi(shift as i32)
    }
}

impl std::ops::Shl<u32> for U256 {
    type Output = U256;
    fn shl(self, n: u32) -> U256 {
        self.shift_left(n)
    }
}

impl std::ops::Shr<u32> for U256 {
    type Output = U256;
    fn shr(self, n: u32) -> U256 {
        self.shift_right(n)
    }
}

impl std::ops::Div for U256 {
    type Output = U256;
    fn div(self, d: U256) -> U256 {
        self.long_div(d)
    }
}

impl std::ops::Not for U256 {
    type Output = U256;
    fn not(self) -> U256 {
        U256([!self.0[0], !self.0[1], !self.0[2], !self.0[3]])
    }
}

impl Ord for U256 {
    fn cmp(&self, o: &Self) -> Ordering {
        for i in (0..4).rev() {
            match self.0[i].cmp(&o.0[i]) {
                Ordering::Equal => continue,
                ord => return ord,
            }
        }
        Ordering::Equal
    }
}

impl PartialOrd for U256 {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::Div;

    #[test]
    fn shifts_round_trip_and_cross_limbs() {
        let one = U256::ONE;
        assert_eq!(one.shl(255).bits(), 256);
        assert_eq!(one.shl(255).shr(255), one);
        assert_eq!(one.shl(64), U256([0, 1, 0, 0]));
        assert_eq!(U256([0, 1, 0, 0]).shr(1), U256([1 << 63, 0, 0, 0]));
        assert_eq!(one.shl(256), U256::ZERO);
        assert_eq!(U256::MAX.shr(256), U256::ZERO);
    }

    #[test]
    fn division_matches_u128_where_it_fits() {
        let cases: [(u128, u128); 5] = [
            (u128::MAX, 3),
            (u128::MAX, u64::MAX as u128 + 7),
            (12345678901234567890123456789, 987654321987654321987),
            (5, 7),
            (1 << 100, 1 << 99),
        ];
        for (a, b) in cases {
            assert_eq!(
                U256::from_u128(a).div(U256::from_u128(b)).low_u128(),
                a / b,
                "{a}/{b}"
            );
        }
    }

    #[test]
    fn full_width_division() {
        // (2^256 - 1) / (2^128 + 1) = 2^128 - 1 exactly.
        let q = U256::MAX.div(U256([1, 0, 1, 0]));
        assert_eq!(q, U256([u64::MAX, u64::MAX, 0, 0]));
    }

    #[test]
    fn to_f64_rounds_correctly() {
        assert_eq!(U256::ZERO.to_f64(), 0.0);
        assert_eq!(U256::MAX.to_f64(), 2f64.powi(256));
        // 2^100 + 1 is not representable; it rounds to 2^100.
        assert_eq!(
            U256::ONE.shl(100).checked_add(U256::ONE).unwrap().to_f64(),
            2f64.powi(100)
        );
        // 2^100 + 2^47 is exactly half way between two f64s at 2^100 (ulp 2^48): ties to even.
        let half = U256::ONE.shl(100).checked_add(U256::ONE.shl(47)).unwrap();
        assert_eq!(half.to_f64(), 2f64.powi(100));
        // ...and one more unit past half way rounds up.
        let past = half.checked_add(U256::ONE).unwrap();
        assert_eq!(past.to_f64(), 2f64.powi(100) + 2f64.powi(48));
    }

    #[test]
    fn byte_orders() {
        let mut le = [0u8; 32];
        le[0] = 1;
        assert_eq!(U256::from_le_bytes(&le), U256::ONE);
        assert_eq!(U256::ONE.to_be_bytes()[31], 1);
        assert_eq!(
            U256::from_be_bytes(&U256::MAX.shr(3).to_be_bytes()),
            U256::MAX.shr(3)
        );
    }
}
