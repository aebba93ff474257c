//! Blocks of one configuration.
//!
//! - found: blocks some node accepted as a new tip (simnet's `BlockResult`, accepted) whose
//!   header hash is the hash of a share this configuration's devices sent in the measured
//!   window.
//! - submitted: distinct blocks the pool (or a proxy) recorded `BlockSubmitted` for, from the
//!   warm-up's end to the end of the run (a block found just before the drain is submitted
//!   during it). A third-party or external pool records nothing: then the blocks a node judged
//!   (simnet's `BlockResult`, accepted or rejected) whose header is a share these devices sent
//!   from the warm-up's end.
//! - orphaned: found, but not on the final best chain. The final tip is simnet's last
//!   `TipChanged` of node `network` (else of the job source node); the best chain is that tip and
//!   its ancestors through the `prev_hash` of every `TipChanged` seen. A found block at a height
//!   the walk covers and not on it lost to another branch at that height or above. A block
//!   below the covered heights cannot be judged and counts in `orphan_undetermined` (simnet
//!   records every tip it adopts, so this stays 0 unless a reorg connects blocks it never
//!   announced).
//! - `block_propagation_ms`: from the device sending the solving share to the job source node's
//!   acceptance; each block its own cluster.

use std::collections::{HashMap, HashSet};

use events::Hash256;

use super::index::Chain;
use super::input::Window;
use super::merge::tally;
use crate::stats::Samples;

tally! {
    /// Block counts, mergeable across trials (results.json's `blocks`).
    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    pub struct BlockTally {
        /// Solutions a node accepted as a new tip.
        pub found: u64,
        /// Distinct blocks the job source submitted.
        pub submitted: u64,
        /// Found, but not on the network's final best chain.
        pub orphaned: u64,
        /// Found blocks whose fate the events do not show (`orphan_undetermined`).
        pub undetermined: u64,
    }
}

/// Judges the blocks whose shares the devices sent (`hash -> sent at`).
pub(crate) fn settle(
    chain: &Chain,
    block_shares: &HashMap<Hash256, u64>,
    submitted: &HashSet<Hash256>,
    window: &Window,
) -> (BlockTally, Samples) {
    let (best, known_from) = chain.best_chain();
    let best: HashSet<Hash256> = best.into_iter().collect();
    let mut found: Vec<(u64, Hash256)> = block_shares
        .iter()
        .filter(|(_, &sent)| window.measured(sent))
        .map(|(&h, &sent)| (sent, h))
        .collect();
    found.sort();
    let mut tally = BlockTally {
        found: found.len() as u64,
        submitted: submitted.len() as u64,
        ..BlockTally::default()
    };
    let mut propagation = Samples::new();
    for (i, (sent, hash)) in found.into_iter().enumerate() {
        let Some(b) = chain.accepted.get(&hash) else {
            continue;
        };
        if let Some(at) = b.by_job_source_ns {
            propagation.push(i as u32, at.saturating_sub(sent));
        }
        if best.contains(&hash) {
            continue;
        }
        if b.height >= known_from && known_from != u32::MAX {
            tally.orphaned += 1;
        } else {
            tally.undetermined += 1;
        }
    }
    (tally, propagation)
}
