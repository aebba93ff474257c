//! A compact filter over every share a channel remembers, so that a new share (nearly every
//! share) is told apart from a possible duplicate by reading two cache lines of a table of
//! about 4 bytes a share, instead of probing the remembered jobs' own tables (16 bytes a share
//! each, and cold but for the current job's).
//!
//! A cuckoo filter (Fan et al., 2014): each fingerprint leaves a 16-bit tag in one of two
//! buckets of four, the second bucket derived from the first and the tag alone, so that tags can
//! be moved between their two buckets to make room, and deleted when their job expires. A tag
//! found says "maybe seen": the jobs' exact tables decide ([`super::seen`]). A new share finds a
//! tag of another share in its two buckets with probability at most 8 / 65,535 (about 1 in
//! 8,000), which only costs those exact look-ups.

/// Tags per bucket; a bucket is one `u64`, four 16-bit lanes, 0 marking an empty lane.
const LANES: usize = 4;
const LANE_ONES: u64 = 0x0001_0001_0001_0001;
const LANE_HIGHS: u64 = 0x8000_8000_8000_8000;
/// The table is rebuilt larger past this load (cuckoo filters with four-tag buckets fill to
/// about 95% before insertions start to fail).
const MAX_LOAD_PERCENT: usize = 90;
/// Moves tried before an insertion gives up and the table is rebuilt larger.
const MAX_KICKS: usize = 500;

#[derive(Clone, Debug, Default)]
pub(super) struct TagFilter {
    buckets: Box<[u64]>,
    len: usize,
}

/// The tag and first bucket of a fingerprint: its top 16 bits (never 0) and its low bits,
/// independent of each other.
#[inline]
fn tag_and_home(f: u64, mask: usize) -> (u16, usize) {
    let t = (f >> 48) as u16;
    (t | u16::from(t == 0), f as usize & mask)
}

/// The other bucket of a tag in bucket `i` (and back: `alt(alt(i)) == i`).
#[inline]
fn alt(i: usize, tag: u16, mask: usize) -> usize {
    (i ^ (u64::from(tag).wrapping_mul(0x5bd1_e995_9e37_79b9) >> 32) as usize) & mask
}

/// Whether some lane of `bucket` holds `tag` (0: an empty lane).
#[inline]
fn has(bucket: u64, tag: u16) -> bool {
    let x = bucket ^ (u64::from(tag) * LANE_ONES);
    x.wrapping_sub(LANE_ONES) & !x & LANE_HIGHS != 0
}

impl TagFilter {
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Buckets allocated (8 bytes each).
    pub(crate) fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// False: `f` was never inserted (or was removed). True: it may have been.
    #[inline]
    pub(crate) fn may_contain(&self, f: u64) -> bool {
        if self.buckets.is_empty() {
            return false;
        }
        let mask = self.buckets.len() - 1;
        let (tag, i) = tag_and_home(f, mask);
        has(self.buckets[i], tag) || has(self.buckets[alt(i, tag, mask)], tag)
    }

    /// Whether one more tag keeps the table within its load limit.
    #[inline]
    pub(crate) fn has_room(&self) -> bool {
        (self.len + 1) * 100 <= self.buckets.len() * LANES * MAX_LOAD_PERCENT
    }

    /// Adds `f`'s tag. False if no room was found: then the filter is missing some tag and must
    /// be rebuilt ([`TagFilter::rebuild`]) before it is used again.
    #[inline]
    pub(crate) fn insert(&mut self, f: u64) -> bool {
        if self.buckets.is_empty() {
            return false;
        }
        let mask = self.buckets.len() - 1;
        let (mut tag, i) = tag_and_home(f, mask);
        let j = alt(i, tag, mask);
        if self.put(i, tag) || self.put(j, tag) {
            self.len += 1;
            return true;
        }
        // Both full: move tags to their other buckets until one lands in an empty lane.
        let mut at = if f & (1 << 47) == 0 { i } else { j };
        for kick in 0..MAX_KICKS {
            let lane = (kick + usize::from(tag)) % LANES;
            let shift = 16 * lane;
            let bucket = &mut self.buckets[at];
            let out = (*bucket >> shift) as u16;
            *bucket = *bucket & !(0xffff << shift) | u64::from(tag) << shift;
            tag = out;
            at = alt(at, tag, mask);
            if self.put(at, tag) {
                self.len += 1;
                return true;
            }
        }
        false
    }

    /// Puts `tag` in an empty lane of bucket `i`, if there is one.
    #[inline]
    fn put(&mut self, i: usize, tag: u16) -> bool {
        let bucket = &mut self.buckets[i];
        for lane in 0..LANES {
            let shift = 16 * lane;
            if (*bucket >> shift) as u16 == 0 {
                *bucket |= u64::from(tag) << shift;
                return true;
            }
        }
        false
    }

    /// Takes out one tag of `f`, which was inserted.
    pub(crate) fn remove(&mut self, f: u64) {
        if self.buckets.is_empty() {
            return;
        }
        let mask = self.buckets.len() - 1;
        let (tag, i) = tag_and_home(f, mask);
        for b in [i, alt(i, tag, mask)] {
            let bucket = &mut self.buckets[b];
            for lane in 0..LANES {
                let shift = 16 * lane;
                if (*bucket >> shift) as u16 == tag {
                    *bucket &= !(0xffff << shift);
                    self.len -= 1;
                    return;
                }
            }
        }
        debug_assert!(false, "removing a fingerprint that was not inserted");
    }

    /// Empties the table and fills it with `all` (`n` fingerprints), in the smallest table of
    /// at least `min_buckets` with room for one more within the load limit (doubled until every
    /// one fits).
    pub(crate) fn rebuild(
        &mut self,
        n: usize,
        min_buckets: usize,
        all: impl Iterator<Item = u64> + Clone,
    ) {
        let fit = ((n + 1) * 100).div_ceil(LANES * MAX_LOAD_PERCENT);
        let mut buckets = fit.max(min_buckets).next_power_of_two().max(4);
        loop {
            self.buckets = vec![0; buckets].into_boxed_slice();
            self.len = 0;
            if all.clone().all(|f| self.insert(f)) {
                debug_assert_eq!(self.len, n);
                return;
            }
            buckets *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(i: u64) -> u64 {
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i.rotate_left(29)
    }

    fn filled(n: u64) -> TagFilter {
        let mut t = TagFilter::default();
        t.rebuild(0, n as usize / 3, std::iter::empty());
        for i in 0..n {
            assert!(t.has_room());
            assert!(t.insert(spread(i)), "insert {i} of {n}");
        }
        t
    }

    #[test]
    fn every_inserted_fingerprint_is_found() {
        let t = filled(10_000);
        assert_eq!(t.len(), 10_000);
        assert!((0..10_000).all(|i| t.may_contain(spread(i))));
    }

    #[test]
    fn others_are_rarely_mistaken_for_them() {
        let t = filled(10_000);
        let mistaken = (10_000..1_010_000)
            .filter(|&i| t.may_contain(spread(i)))
            .count();
        // At most 8 / 65535 per look-up; well under that at this load.
        assert!(mistaken < 1_000_000 * 8 / 65_535, "{mistaken} in a million");
    }

    #[test]
    fn removal_takes_out_exactly_one_tag() {
        let mut t = filled(5_000);
        for i in (0..5_000).step_by(2) {
            t.remove(spread(i));
        }
        assert_eq!(t.len(), 2_500);
        assert!((1..5_000).step_by(2).all(|i| t.may_contain(spread(i))));
        // The same fingerprint twice (two jobs may both hold it): one removal leaves one.
        let f = spread(77_777);
        assert!(t.insert(f) && t.insert(f));
        t.remove(f);
        assert!(t.may_contain(f));
        t.remove(f);
        assert_eq!(t.len(), 2_500);
    }

    #[test]
    fn filling_to_the_load_limit_then_rebuilding_larger() {
        let mut t = TagFilter::default();
        t.rebuild(0, 100, std::iter::empty());
        let buckets = t.buckets();
        assert_eq!(buckets, 128);
        let mut i = 0;
        while t.has_room() {
            assert!(t.insert(spread(i)), "failed below the load limit at {i}");
            i += 1;
        }
        assert_eq!(t.buckets(), buckets);
        t.rebuild(i as usize, 0, (0..i).map(spread));
        assert!(t.has_room());
        assert_eq!(t.buckets(), 2 * buckets);
        assert!((0..i).all(|k| t.may_contain(spread(k))));
    }

    #[test]
    fn the_lane_test_is_exact() {
        let bucket = 0x0003_0000_8001_7fffu64;
        for (tag, want) in [
            (3, true),
            (0x8001, true),
            (0x7fff, true),
            (0, true),
            (1, false),
        ] {
            assert_eq!(has(bucket, tag), want, "{tag:x}");
        }
        assert!(!has(0x0001_0001_0001_0001, 0));
    }
}
