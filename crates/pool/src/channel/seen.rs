//! The shares one job of a channel has seen: 8-byte fingerprints of their header hashes in an
//! open-addressing table of the job's own (linear probing, at most half full). The table is
//! the exact record; [`super::filter`] answers the common question ("is this share new?") for
//! all of the channel's jobs at once without touching these tables.
//!
//! False positives: a fingerprint is the first 8 bytes of the hash in internal byte order,
//! which are its least significant bytes and uniformly distributed whatever the share target
//! (a target constrains only the most significant ones). A new share therefore matches one of
//! `n` remembered fingerprints by accident with probability about `n / 2^64`: with the default
//! 16,384 remembered shares, 2^-50 per share, or one spurious "duplicate" in some 35 years for
//! a pool taking a million shares a second.

/// The smallest table allocated.
const MIN_SLOTS: usize = 16;

/// Fingerprints of the shares accepted on one job. Empty slots are 0, so a fingerprint of 0 is
/// stored as 1 (which doubles that one value's odds of a false match: still 2^-63).
#[derive(Clone, Debug, Default)]
pub(super) struct Fingerprints {
    slots: Box<[u64]>,
    len: usize,
}

/// The fingerprint of a header hash (internal byte order).
#[inline]
pub(super) fn fingerprint(hash: &[u8; 32]) -> u64 {
    let f = u64::from_le_bytes(hash[..8].try_into().expect("8 bytes"));
    f | u64::from(f == 0)
}

impl Fingerprints {
    /// Fingerprints held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Slots allocated (8 bytes each).
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + Clone + '_ {
        self.slots.iter().copied().filter(|&f| f != 0)
    }

    pub(crate) fn contains(&self, f: u64) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        let mask = self.slots.len() - 1;
        let mut i = f as usize & mask;
        loop {
            let s = self.slots[i];
            if s == f {
                return true;
            }
            if s == 0 {
                return false;
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `f`, which must not be there yet. Grows to `at_least` slots (rounded up to a power
    /// of two), or twice its size, when it would be more than half full. Returns the slots it
    /// grew by.
    #[inline]
    pub(crate) fn insert(&mut self, f: u64, at_least: usize) -> usize {
        let mut grown = 0;
        if (self.len + 1) * 2 > self.slots.len() {
            grown = self.grow(at_least);
        }
        let mask = self.slots.len() - 1;
        let mut i = f as usize & mask;
        while self.slots[i] != 0 {
            debug_assert_ne!(self.slots[i], f, "inserted twice");
            i = (i + 1) & mask;
        }
        self.slots[i] = f;
        self.len += 1;
        grown
    }

    #[cold]
    fn grow(&mut self, at_least: usize) -> usize {
        let slots = (self.slots.len() * 2)
            .max(at_least.next_power_of_two())
            .max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![0; slots].into_boxed_slice());
        let mask = slots - 1;
        for f in old.iter().copied().filter(|&f| f != 0) {
            let mut i = f as usize & mask;
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = f;
        }
        slots - old.len()
    }

    /// Forgets every fingerprint, keeping the memory for the next job.
    pub(crate) fn clear(&mut self) {
        if self.len > 0 {
            self.slots.fill(0);
            self.len = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn spread(i: u64) -> u64 {
        // Distinct, well-mixed, never 0.
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
    }

    #[test]
    fn finds_what_it_holds_and_nothing_else() {
        let mut t = Fingerprints::default();
        assert!(!t.contains(5));
        for i in 0..1000 {
            t.insert(spread(i), 0);
        }
        assert_eq!((t.len(), t.slots()), (1000, 2048));
        assert!((0..1000).all(|i| t.contains(spread(i))));
        assert!((1000..5000).all(|i| !t.contains(spread(i))));
        let mut all: Vec<u64> = t.iter().collect();
        all.sort_unstable();
        let mut want: Vec<u64> = (0..1000).map(spread).collect();
        want.sort_unstable();
        assert_eq!(all, want);
    }

    #[test]
    fn colliding_slots_probe_on_and_wrap() {
        // The same home slot, at the end of the table, for all of them.
        let mut t = Fingerprints::default();
        let same_home: Vec<u64> = (1..=7).map(|i| i << 40 | 15).collect();
        for &f in &same_home {
            t.insert(f, 0);
        }
        assert_eq!(t.slots(), 16);
        assert!(same_home.iter().all(|&f| t.contains(f)));
        assert!(!t.contains(8 << 40 | 15));
    }

    #[test]
    fn a_size_hint_allocates_once_and_clear_keeps_the_memory() {
        let mut t = Fingerprints::default();
        assert_eq!(t.insert(spread(0), 1000), 1024);
        for i in 1..512 {
            assert_eq!(t.insert(spread(i), 1000), 0, "no growth up to half full");
        }
        assert_eq!(t.insert(spread(512), 1000), 1024, "then it doubles");
        t.clear();
        assert_eq!((t.len(), t.slots()), (0, 2048));
        assert!(!t.contains(spread(3)));
        t.insert(spread(3), 0);
        assert!(t.contains(spread(3)));
    }

    #[test]
    fn zero_is_a_fingerprint_like_any_other() {
        let zero = [0u8; 32];
        let f = fingerprint(&zero);
        assert_ne!(f, 0);
        let mut t = Fingerprints::default();
        t.insert(f, 0);
        assert!(t.contains(fingerprint(&zero)));
        let mut h = [0u8; 32];
        h[0] = 7;
        assert_eq!(fingerprint(&h), 7);
    }
}
