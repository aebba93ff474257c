//! The previous-block hashes the pool has worked on, newest last: what tells a declared job's
//! shares stale. A farm's node may hear of a block before the pool's node does, so a job on a
//! hash the pool has never seen is not stale; one on a hash the pool has seen and since moved
//! on from is.

use std::collections::VecDeque;
use std::sync::RwLock;

use primitives::Hash256;

/// Tips remembered: far more than a declared job outlives (a farm moves to the next block
/// within seconds of the pool), few enough to scan on every share of a declared job.
pub const RECENT_TIPS: usize = 16;

/// The recent previous-block hashes, newest last (at most [`RECENT_TIPS`]).
#[derive(Debug, Default)]
pub struct Tips {
    recent: RwLock<VecDeque<Hash256>>,
}

impl Tips {
    /// The pool works on `prev` now. A hash already current changes nothing; one seen before
    /// (a reorg back to it) becomes current again.
    pub fn handle_tip(&self, prev: Hash256) {
        let mut recent = self.recent.write().unwrap_or_else(|e| e.into_inner());
        if recent.back() == Some(&prev) {
            return;
        }
        recent.retain(|h| *h != prev);
        if recent.len() >= RECENT_TIPS {
            recent.pop_front();
        }
        recent.push_back(prev);
    }

    /// The tip the pool works on, if it has had one.
    pub fn current(&self) -> Option<Hash256> {
        self.recent
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .back()
            .copied()
    }

    /// The pool worked on `prev` and has moved on from it.
    pub fn superseded(&self, prev: &Hash256) -> bool {
        let recent = self.recent.read().unwrap_or_else(|e| e.into_inner());
        recent.back().is_some_and(|current| current != prev) && recent.contains(prev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u8) -> Hash256 {
        Hash256([n; 32])
    }

    #[test]
    fn only_a_known_tip_the_pool_left_is_superseded() {
        let tips = Tips::default();
        assert!(!tips.superseded(&h(1)));
        tips.handle_tip(h(1));
        tips.handle_tip(h(1));
        assert!(!tips.superseded(&h(1)), "current");
        tips.handle_tip(h(2));
        assert!(tips.superseded(&h(1)));
        assert!(!tips.superseded(&h(3)), "never seen");
        // A reorg back to an earlier tip makes it current again.
        tips.handle_tip(h(1));
        assert!(!tips.superseded(&h(1)));
        assert!(tips.superseded(&h(2)));
        assert_eq!(tips.current(), Some(h(1)));
    }

    #[test]
    fn the_oldest_tips_are_forgotten() {
        let tips = Tips::default();
        for n in 0..=RECENT_TIPS as u8 {
            tips.handle_tip(h(n));
        }
        assert!(!tips.superseded(&h(0)), "forgotten: unknown again");
        assert!(tips.superseded(&h(1)));
    }
}
