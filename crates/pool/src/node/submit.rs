//! Handing a found block to the node, and asking again until it answers.
//!
//! A block is worth a block reward: the caller persists it first, then submits it here. Every
//! failure that is not the node's verdict (no connection, a timeout, a dropped connection, a
//! proxy's error page, credentials refused while the node restarts with a new cookie, Core's
//! warm-up) is retried with capped backoff, for as long as it takes. Only an answer ends it.

use std::time::{Duration, Instant};

use primitives::sha256d;

use super::backoff::Backoff;
use super::rpc::NodeClient;

/// The node's verdict on a submitted block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitAnswer {
    /// `null`: the block is valid and was new to the node.
    Accepted,
    /// Core's reason: `duplicate` (the node already has it), `inconclusive` (valid, stored, not
    /// on the best chain), `high-hash`, `bad-txnmrklroot`, `bad-cb-amount`, ...; or the message
    /// of an RPC error that is a verdict (`Block decode failed`).
    Rejected(String),
}

impl SubmitAnswer {
    pub fn is_accepted(&self) -> bool {
        matches!(self, SubmitAnswer::Accepted)
    }

    /// Core's reason, if rejected.
    pub fn reason(&self) -> Option<&str> {
        match self {
            SubmitAnswer::Accepted => None,
            SubmitAnswer::Rejected(r) => Some(r),
        }
    }
}

/// How a submission ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitOutcome {
    pub answer: SubmitAnswer,
    /// Requests sent, the answered one included.
    pub attempts: u32,
    /// From the first request to the answer.
    pub elapsed: Duration,
}

impl SubmitOutcome {
    /// The block's fate by this answer. `duplicate_means_held`: the block may have reached the
    /// node another way first (a provider, the farm's node, a submission whose answer was lost),
    /// so `duplicate` on the first attempt means the node has it too.
    pub fn fate(&self, duplicate_means_held: bool) -> crate::stats::BlockFate {
        use crate::stats::BlockFate;
        let reason = self.answer.reason().unwrap_or("");
        if self.node_has_block() || (duplicate_means_held && reason == "duplicate") {
            BlockFate::Accepted
        } else if reason.contains("inconclusive") {
            // Valid, stored, not on the best chain: the network moved on first.
            BlockFate::Orphaned
        } else {
            BlockFate::Rejected
        }
    }

    /// Whether the node holds the block: accepted, or `duplicate` after an earlier attempt
    /// whose answer was lost (the node took the block then).
    pub fn node_has_block(&self) -> bool {
        match &self.answer {
            SubmitAnswer::Accepted => true,
            SubmitAnswer::Rejected(r) => r == "duplicate" && self.attempts > 1,
        }
    }
}

/// Submits `block` until the node gives an answer, waiting `retry`'s capped backoff between
/// attempts. Each attempt is bounded by the client's timeout. Never gives up by itself: drop
/// the future (or abort its task) to stop asking, at shutdown for instance.
pub async fn submit_until_answered(
    client: &NodeClient,
    block: &[u8],
    retry: Backoff,
) -> SubmitOutcome {
    let hash = block
        .get(..80)
        .map(|header| sha256d(header).to_string())
        .unwrap_or_default();
    let started = Instant::now();
    let mut delays = retry.start();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        match client.submit_block(block).await {
            Ok(answer) => {
                let elapsed = started.elapsed();
                match &answer {
                    SubmitAnswer::Accepted => {
                        tracing::info!(block = %hash, attempts, elapsed_ms = elapsed.as_millis() as u64,
                            "submitblock: accepted")
                    }
                    SubmitAnswer::Rejected(reason) => {
                        tracing::warn!(block = %hash, attempts, %reason, elapsed_ms = elapsed.as_millis() as u64,
                            "submitblock: rejected")
                    }
                }
                return SubmitOutcome {
                    answer,
                    attempts,
                    elapsed,
                };
            }
            Err(e) => {
                let wait = delays.next_delay();
                tracing::warn!(block = %hash, attempts, error = %e, retry_in_ms = wait.as_millis() as u64,
                    "submitblock: no answer from the node; submitting again");
                tokio::time::sleep(wait).await;
            }
        }
    }
}
