//! What both protocols' nonce loops share: the share target in the form a hash is compared
//! against quickly, and version-bit rolling under a mask.

use primitives::{Hash256, Target};

/// A share target with its top 64 bits as a number: almost every hash is rejected on those
/// alone, without the 256-bit comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShareTarget {
    pub target: Target,
    top: u64,
}

impl ShareTarget {
    pub(crate) fn new(target: Target) -> Self {
        ShareTarget {
            target,
            top: top_u64(&target),
        }
    }

    #[inline]
    pub(crate) fn is_met_by(&self, h: &Hash256) -> bool {
        let top = u64::from_le_bytes(h.0[24..].try_into().expect("8 bytes"));
        match top.cmp(&self.top) {
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Equal => self.target.is_met_by(&h.0),
        }
    }
}

/// The top 8 bytes of a target as hashes are compared (little-endian, most significant last).
pub(crate) fn top_u64(t: &Target) -> u64 {
    let le = t.to_le_bytes();
    u64::from_le_bytes(le[24..].try_into().expect("8 bytes"))
}

/// Spreads the low bits of `k` over the set bits of `mask`, lowest first (a software PDEP):
/// roll index `k` becomes version bits inside the mask.
pub(crate) fn deposit_bits(mut k: u64, mask: u32) -> u32 {
    let mut out = 0u32;
    let mut m = mask;
    while m != 0 && k != 0 {
        let low = m & m.wrapping_neg();
        if k & 1 != 0 {
            out |= low;
        }
        k >>= 1;
        m &= m - 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use primitives::Difficulty;

    #[test]
    fn the_quick_comparison_agrees_with_the_full_one() {
        let t = ShareTarget::new(Difficulty::new(2f64.powi(-20)).unwrap().to_target());
        for i in 0..20_000u32 {
            let h = primitives::sha256d(&i.to_le_bytes());
            assert_eq!(t.is_met_by(&h), t.target.is_met_by(&h.0), "{i}");
        }
        // Equal top bits: the rest decides.
        let mut at = t.target.to_le_bytes();
        assert!(t.is_met_by(&Hash256(at)));
        at[0] = at[0].wrapping_add(1);
        assert_eq!(t.is_met_by(&Hash256(at)), t.target.is_met_by(&at));
    }
}
