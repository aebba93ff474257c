//! Merging trials: counts and integrals add, samples pool, maps merge key by key.
//!
//! A tally declared with [`tally!`] gets its `merge` from its fields, one call each, so a field
//! added to a tally cannot be left out of what several trials add up to.

use std::collections::BTreeMap;

use crate::stats::Samples;

/// A figure two trials' tallies combine into one.
pub(crate) trait Merge {
    /// Adds `o`'s figure into this one.
    fn merge_from(&mut self, o: &Self);
}

macro_rules! adds {
    ($($t:ty),*) => {
        $(impl Merge for $t {
            fn merge_from(&mut self, o: &Self) {
                *self += *o;
            }
        })*
    };
}
adds!(u64, u128, f64);

impl<T: Merge, const N: usize> Merge for [T; N] {
    fn merge_from(&mut self, o: &Self) {
        for (a, b) in self.iter_mut().zip(o) {
            a.merge_from(b);
        }
    }
}

impl Merge for Samples {
    fn merge_from(&mut self, o: &Self) {
        self.merge(o);
    }
}

impl<K: Ord + Clone, V: Merge + Default> Merge for BTreeMap<K, V> {
    fn merge_from(&mut self, o: &Self) {
        for (k, v) in o {
            self.entry(k.clone()).or_default().merge_from(v);
        }
    }
}

/// Declares a tally struct and its `merge`, which merges every field ([`Merge`]).
macro_rules! tally {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field_vis:vis $field:ident: $ty:ty),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$field_meta])* $field_vis $field: $ty),*
        }

        impl $name {
            /// Adds another trial's figures: counts and integrals add, samples pool, maps
            /// merge key by key.
            $vis fn merge(&mut self, o: &Self) {
                $($crate::metrics::merge::Merge::merge_from(&mut self.$field, &o.$field);)*
            }
        }
    };
}
pub(crate) use tally;

#[cfg(test)]
mod tests {
    use super::*;

    tally! {
        #[derive(Debug, Default, PartialEq)]
        struct Example {
            count: u64,
            by_kind: BTreeMap<&'static str, [u64; 2]>,
            work: f64,
        }
    }

    #[test]
    fn every_field_merges() {
        let mut a = Example {
            count: 2,
            by_kind: BTreeMap::from([("x", [1, 2])]),
            work: 1.5,
        };
        let b = Example {
            count: 3,
            by_kind: BTreeMap::from([("x", [10, 20]), ("y", [5, 0])]),
            work: 2.0,
        };
        a.merge(&b);
        let merged = Example {
            count: 5,
            by_kind: BTreeMap::from([("x", [11, 22]), ("y", [5, 0])]),
            work: 3.5,
        };
        assert_eq!(a, merged);
    }
}
