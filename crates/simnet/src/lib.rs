//! A deterministic simulated Bitcoin network, the core that simnet's node endpoints
//! (bitcoind-compatible JSON-RPC, ZMQ, SV2 Template Provider) serve real pool software from.
//!
//! # Shape
//!
//! [`Network`] is a sans-IO state machine, in the manner of quinn-proto: no sockets, no tasks, no
//! clock. The shell maps its monotonic clock onto [`Timestamp`] (nanoseconds since the network
//! started) and calls [`Network::handle_timeout`] whenever [`Network::poll_timeout`] comes due
//! or a block is submitted; tests step virtual time instead, running hours of network in
//! milliseconds. What happened comes out of [`Network::poll_event`] as [`Output`]s: a template
//! created, the tip changed (found by the network or submitted), the verdict on a submitted
//! block.
//!
//! - A **chain** ([`Chain`]) starting from a base block at the configured height, so that
//!   heights, subsidy and BIP34 coinbases look like mainnet's while the chain reports itself as
//!   `regtest` and the difficulty is whatever the lab needs.
//! - A **mempool** ([`Mempool`]) fed by seeded transaction arrivals shaped like mainnet's, kept
//!   in fee-rate order so that choosing a block's transactions is a walk, not a sort.
//! - **Templates** ([`Template`]) chosen greedily by fee rate up to the weight limit; value =
//!   subsidy + fees; a new one on every tip change, or when fees would grow by more than
//!   `fee_delta`, at most every `template_interval`.
//! - The **rest of the network** finds blocks as a Poisson process with mean `block_interval`,
//!   each taking the best transactions from the mempool.
//! - **Nodes** ([`NodeSpec`], [`NodeView`]): the network presents one or more named nodes, each
//!   at a relay delay from the rest of the network, with its own chain view, mempool and
//!   templates; each node's peer traffic is modelled in [`relay`].
//! - **Block checks** on every submission, in Bitcoin Core's order and words
//!   ([`SubmitError`]): `high-hash`, `bad-txnmrklroot`, `duplicate`, `prev-blk-not-found`,
//!   `bad-diffbits`, `bad-cb-height`, `bad-witness-merkle-match`,
//!   `bad-txns-inputs-missingorspent`, `bad-cb-amount`, `inconclusive`, ...
//!
//! # Determinism
//!
//! Every random draw comes from ChaCha12 streams derived from the seed, one per purpose (the
//! initial mempool, transaction arrivals, network block arrivals), and events run at their
//! exact simulated instants whatever the granularity of `handle_timeout` calls. So the same seed and
//! the same submissions at the same times give the same mempool, templates and block arrival
//! sequence; submitting a block shifts no random stream (the Poisson block process is
//! memoryless, so the network's next block keeps its time). The draws are computed here from
//! uniform words rather than by a distributions crate, so they stay put across upgrades.
//!
//! # Defaults and where they come from
//!
//! All are fields of [`SimnetConfig`]; the numbers describe mainnet in 2024-2025.
//!
//! | knob | default | why |
//! |---|---|---|
//! | `start_height` | 900,000 | a recent mainnet height: subsidy 3.125 BTC (fourth halving at 840,000 until 1,050,000), BIP34 pushes 3 bytes |
//! | `start_unix_time` | 1,750,000,000 (2025-06-15) | near when mainnet passed 900,000; the shell may pass the real time |
//! | `network_difficulty` | 1 (`nBits` 0x1d00ffff) | the classic minimum; the lab sets it to suit its fleet's hash rate (down to 2^-32) |
//! | `block_interval` | 600 s | Bitcoin's target spacing; blocks are found as a Poisson process with this mean |
//! | `template_interval` | 30 s | Bitcoin Core's SV2 Template Provider default (`-sv2interval=30`): fee-driven updates are rate-limited, a new tip is always sent at once |
//! | `fee_delta` | 1,000 sat | the same Template Provider's default (`-sv2feedelta=1000`): below that a pool would spend more on new jobs than it gains |
//! | `block_max_weight`, `coinbase_reserved_weight` | 4,000,000 WU, 4,000 WU | BIP141's limit, less what Core's block assembler keeps for the coinbase: transactions fill at most 3,996,000 WU |
//! | `mempool.arrival_rate` | 5 tx/s | mainnet confirmed roughly 300k-700k transactions a day in 2024-2025 (public explorers' daily counts): 3.5-8 tx/s; 5 tx/s = 432k a day |
//! | `mempool.vsize` | 110 + log-normal(median 90, sigma 1.0), cap 100,000 vB | median 200 vB, mean about 258 vB; quantiles p10 135, p25 156, p75 287, p90 434, p99 1,032 vB. 110 vB is about the smallest common transaction (1-in-1-out taproot: 111 vB), 141 vB the common 1-in-2-out P2WPKH payment, 2-in-2-out 208.5 vB; blocks of about 1 MvB carrying 3,000-4,000 transactions put the mainnet mean near 250-330 vB; the tail is consolidations and batch payouts, capped at Core's standardness limit of 400,000 WU |
//! | `mempool.fee_rate` | log-normal(median 3, sigma 1.4) clamped to [1, 5,000] sat/vB | a few sat/vB in the middle, as mempool explorers showed through the low-fee periods of 2024-2025; about 22% pay exactly the 1 sat/vB relay floor most nodes enforced; p75 7.7, p90 18, p99 78, p99.9 227 sat/vB: a heavy tail into the hundreds, as during inscription waves and fee spikes |
//! | `mempool.initial_txs` | 3,000 | ten minutes of arrivals, so the first template is a realistic block rather than an empty one |
//! | `mempool.max_vsize` | 100,000,000 vB | the order of Core's 300 MB `-maxmempool` (memory use runs at about three bytes per vbyte); past it the lowest fee rates are evicted |
//! | `network_pow_budget` | 65,536 hashes | network blocks carry real proof of work when the target is that easy (difficulty 2^-16 or less), cheap enough to grind inline |
//!
//! With these defaults arrivals bring about 0.77 MvB per ten minutes against 1 MvB of block
//! space: the mempool usually clears, and a long gap between blocks builds a backlog in which
//! fee rates decide.
//!
//! # Transactions
//!
//! Each arrival is a structurally valid segwit transaction built to exactly its drawn virtual
//! size: P2WPKH-style inputs spending random outpoints with a two-item witness, P2WPKH
//! outputs, and a last output whose length, with the first signature's, lands the weight on
//! the drawn size. Scripts do not verify; the fee is a recorded number kept in the mempool
//! entry. None has an ancestor in the mempool, so fee rate and ancestor fee rate coincide.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod chain;
pub mod checks;
pub mod config;
pub mod dist;
mod ledger;
pub mod link_bytes;
pub mod mempool;
pub mod network;
pub mod node;
pub mod relay;
pub mod rpc;
pub mod tdp;
pub mod template;

pub mod txgen;
pub mod view;
pub mod zmq;

pub use chain::{block_subsidy, BlockSource, Chain, StoredBlock};
pub use checks::SubmitError;
pub use config::{
    ConfigError, MempoolConfig, NodeSpec, SimnetConfig, CHAIN_NAME, DEFAULT_NODE, NETWORK_NAME,
};
pub use mempool::{FeeRate, Mempool, MempoolEvent, TxEntry};
pub use network::{Accepted, Network, NodeId, NodeOutput, Output, SubmitResult};
pub use node::{Node, NodeStats, TxUpdate, Update, ZmqNotification, ZmqRegistration};
pub use primitives::Timestamp;
pub use relay::PeerBytes;
pub use template::Template;
pub use txgen::{FeeRateModel, VsizeModel};
pub use view::NodeView;
