//! The Job Declarator Server (spec section 6): the pool-side end of the Job Declaration
//! Protocol, in Full-Template mode.
//!
//! A farm's JDC asks for a token (`AllocateMiningJobToken`), builds a job on its own template
//! and declares it (`DeclareMiningJob`: coinbase and wtxids). The JDS checks the coinbase (it
//! parses, it is a coinbase, it pays the pool's payout script), checks every wtxid against the
//! pool-side node's mempool and asks for the ones it lacks (`ProvideMissingTransactions`), then
//! vouches for the job with a declared token that commits to the coinbase outputs
//! (`pool::jd_token`); the pool accepts `SetCustomMiningJob` under that token only. When the
//! farm finds a block, `PushSolution` lets the JDS rebuild it and submit it to the pool-side
//! node, so that the block leaves from both ends.
//!
//! - [`session`]: one connection as a sans-IO machine: messages in, messages and blocks to
//!   submit out. No tokio in it.
//! - [`coinbase`]: a declared coinbase (prefix and suffix around the extranonce) parsed and
//!   checked; [`block`]: the block rebuilt from a declared job and a solution.
//! - [`tokens`]: allocated and declared tokens, each allocated one redeemable once.
//! - [`mempool`]: what the session asks about transactions ([`Mempool`]).
//! - [`fuzz_support`]: what the fuzz targets in `crates/jds/fuzz` run, so that the committed
//!   corpus replays on stable, and the builders of a JDC's coinbase and declaration that the
//!   harness and the tests (this crate's and the CLI's) share.
//! - [`shell`]: the tokio server (Noise NX responder, one task per connection) and the node
//!   side (mempool refresh over JSON-RPC, `submitblock`).

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod block;
pub mod coinbase;
pub mod config;
pub mod fuzz_support;
pub mod mempool;
pub mod session;
pub mod shell;
pub mod tokens;

pub use config::JdsConfig;
pub use mempool::Mempool;
pub use session::{Event, Session};
pub use tokens::TokenIssuer;

/// Wall-clock time in milliseconds since the Unix epoch: what tokens' expiry is written in,
/// so that the pool (another process) reads it the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixMillis(pub u64);

impl UnixMillis {
    /// The system clock now.
    pub fn now() -> UnixMillis {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        UnixMillis(d.as_millis() as u64)
    }

    /// `d` later (whole milliseconds, saturating).
    pub fn plus(self, d: std::time::Duration) -> UnixMillis {
        UnixMillis(self.0.saturating_add(d.as_millis() as u64))
    }
}
