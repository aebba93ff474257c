//! Events that could not be tied to their counterpart, counted by what was missing, never
//! guessed at.

use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Unmatched {
    pub by_kind: BTreeMap<&'static str, u64>,
    /// Events that needed a counterpart (workable jobs, activations, received verdicts).
    pub matchable: u64,
}

impl Unmatched {
    pub fn add(&mut self, kind: &'static str) {
        *self.by_kind.entry(kind).or_insert(0) += 1;
    }

    pub fn total(&self) -> u64 {
        self.by_kind.values().sum()
    }

    pub fn merge(&mut self, o: &Unmatched) {
        for (k, n) in &o.by_kind {
            *self.by_kind.entry(k).or_insert(0) += n;
        }
        self.matchable += o.matchable;
    }

    /// Unmatched events as a fraction of those that needed matching.
    pub fn fraction(&self) -> Option<f64> {
        (self.matchable > 0).then(|| self.total() as f64 / self.matchable as f64)
    }
}
