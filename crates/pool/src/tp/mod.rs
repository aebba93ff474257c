//! Templates from an SV2 Template Provider (Template Distribution Protocol): the pool's other
//! job source besides bitcoind's `getblocktemplate`.
//!
//! - [`session`]: one connection's client side as a sans-IO machine (setup, coinbase
//!   constraints, pairing `NewTemplate` with `SetNewPrevHash` into [`TpWork`]);
//! - [`feed`]: the tokio shell (connect, Noise initiator, reconnect with capped backoff,
//!   health as the node feed keeps it, `SubmitSolution` for found blocks);
//! - [`transactions`]: the transactions of the latest templates, kept as they arrive.

pub mod feed;
pub mod session;
pub mod transactions;

pub use feed::{TpConfig, TpFeed, TxDataReply, TxDataRequest};
pub use session::{
    solution_from_block, TpEvent, TpSession, TpSessionConfig, TpSessionError, TpWork,
};
pub use transactions::KeptTransactions;
