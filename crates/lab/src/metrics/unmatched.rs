//! Events that could not be tied to their counterpart, counted by what was missing, never
//! guessed at.

use super::merge::tally;
use std::collections::BTreeMap;

tally! {
    /// Unmatched events by what was missing, and the events that could have been.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct Unmatched {
        /// Unmatched events per kind of missing counterpart.
        pub by_kind: BTreeMap<&'static str, u64>,
        /// Events that needed a counterpart (workable jobs, activations, received verdicts).
        pub matchable: u64,
    }
}

impl Unmatched {
    /// Counts one unmatched event of `kind`.
    pub fn add(&mut self, kind: &'static str) {
        *self.by_kind.entry(kind).or_insert(0) += 1;
    }

    /// Unmatched events of every kind.
    pub fn total(&self) -> u64 {
        self.by_kind.values().sum()
    }

    /// Unmatched events as a fraction of those that needed matching.
    pub fn fraction(&self) -> Option<f64> {
        (self.matchable > 0).then(|| self.total() as f64 / self.matchable as f64)
    }
}
