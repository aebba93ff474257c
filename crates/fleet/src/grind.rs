//! What both protocols' nonce loops share: the share target in the form a hash is compared
//! against quickly, the header midstate and the nonces tried on it, and version-bit rolling
//! under a mask.

use primitives::{Hash256, HeaderMidstate, Target};

use crate::device::HashOutcome;

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

/// Where the nonce search on one header midstate is.
#[derive(Clone, Copy)]
pub(crate) struct Nonces {
    midstate: HeaderMidstate,
    /// The header's last 16 bytes: merkle root tail, time, bits, nonce.
    tail: [u8; 16],
    nonce: u32,
    /// Nonces left for this midstate.
    pub(crate) left: u64,
}

impl Nonces {
    /// Nothing to hash yet.
    pub(crate) fn none() -> Self {
        Nonces {
            midstate: HeaderMidstate::new(&[0; 64]),
            tail: [0; 16],
            nonce: 0,
            left: 0,
        }
    }

    /// `left` nonces from `nonce` on, for the header `version || prev_hash || root || ntime ||
    /// nbits`: its first 64 bytes are hashed here once, so each nonce costs two compressions.
    pub(crate) fn new(
        version: u32,
        prev_hash: &Hash256,
        root: &Hash256,
        ntime: u32,
        nbits: u32,
        nonce: u32,
        left: u64,
    ) -> Self {
        let mut first = [0u8; 64];
        first[..4].copy_from_slice(&version.to_le_bytes());
        first[4..36].copy_from_slice(&prev_hash.0);
        first[36..].copy_from_slice(&root.0[..28]);
        let mut tail = [0u8; 16];
        tail[..4].copy_from_slice(&root.0[28..]);
        tail[4..8].copy_from_slice(&ntime.to_le_bytes());
        tail[8..12].copy_from_slice(&nbits.to_le_bytes());
        Nonces {
            midstate: HeaderMidstate::new(&first),
            tail,
            nonce,
            left,
        }
    }

    /// Hashes at most `budget` of the nonces left, counting them in `out`. A hash that meets
    /// `target` counts as a share (and a block when it meets `network` too) and goes to
    /// `found` with its nonce.
    #[inline]
    pub(crate) fn scan(
        &mut self,
        budget: u64,
        target: &ShareTarget,
        network: &Target,
        out: &mut HashOutcome,
        mut found: impl FnMut(u32, Hash256, bool),
    ) {
        let n = budget.min(self.left);
        let mut tail = self.tail;
        let mut nonce = self.nonce;
        for _ in 0..n {
            tail[12..].copy_from_slice(&nonce.to_le_bytes());
            let h = self.midstate.finish(&tail);
            if target.is_met_by(&h) {
                let block = network.is_met_by(&h.0);
                out.shares += 1;
                out.blocks += block as u32;
                found(nonce, h, block);
            }
            nonce = nonce.wrapping_add(1);
        }
        self.nonce = nonce;
        self.left -= n;
        out.hashes += n;
    }
}

/// The top 8 bytes of a target as hashes are compared (little-endian, most significant last).
fn top_u64(t: &Target) -> u64 {
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
