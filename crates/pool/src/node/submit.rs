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
use super::NodeError;

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
    /// Whether the node took the block.
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
    /// The node's answer.
    pub answer: SubmitAnswer,
    /// Requests sent, the answered one included.
    pub attempts: u32,
    /// From the first request to the answer.
    pub elapsed: Duration,
    /// After `duplicate` only: whether the block is on the node's best chain (`getblockheader`'s
    /// confirmations), `None` if the node could not say. Core answers `duplicate` for any valid
    /// block it holds, a stale one included, so the answer alone does not say the block counts.
    pub on_best_chain: Option<bool>,
}

impl SubmitOutcome {
    /// The block's fate by the node's answer. `duplicate` (the block reached the node another way
    /// first: a provider, the farm's node, a submission whose answer was lost) is settled by
    /// the chain: on the best chain it is accepted, beside it orphaned.
    pub fn fate(&self) -> crate::stats::BlockFate {
        use crate::stats::BlockFate;
        match &self.answer {
            SubmitAnswer::Accepted => BlockFate::Accepted,
            SubmitAnswer::Rejected(r) if r == "duplicate" => match self.on_best_chain {
                Some(false) => BlockFate::Orphaned,
                // Held by the node; a node without `getblockheader` cannot say more.
                Some(true) | None => BlockFate::Accepted,
            },
            SubmitAnswer::Rejected(r) => BlockFate::of_refusal(r),
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
                let on_best_chain = match &answer {
                    SubmitAnswer::Rejected(r) if r == "duplicate" => {
                        on_best_chain(client, block, &mut delays).await
                    }
                    _ => None,
                };
                return SubmitOutcome {
                    answer,
                    attempts,
                    elapsed,
                    on_best_chain,
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

/// Whether the block whose serialization is `block` is on the node's best chain, asking until
/// the node answers; `None` if it answers with an error (a node without `getblockheader`).
async fn on_best_chain(
    client: &NodeClient,
    block: &[u8],
    delays: &mut super::backoff::Delays,
) -> Option<bool> {
    let header = block.get(..80)?;
    let hash = sha256d(header);
    loop {
        match client.block_on_best_chain(hash).await {
            Ok(on) => return Some(on),
            // The node's refusal, or an answer without confirmations: asking again would get
            // the same.
            Err(e) if e.is_node_verdict() || matches!(e, NodeError::BadReply { .. }) => {
                tracing::warn!(block = %hash, error = %e, "getblockheader: the node cannot say whether it holds the block on its best chain");
                return None;
            }
            Err(e) => {
                let wait = delays.next_delay();
                tracing::warn!(block = %hash, error = %e, retry_in_ms = wait.as_millis() as u64,
                    "getblockheader: no answer from the node; asking again");
                tokio::time::sleep(wait).await;
            }
        }
    }
}
