//! The SV2 Template Provider endpoint: simnet's templates over the Template Distribution
//! Protocol, as Bitcoin Core's provider serves them to a pool or a Job Declarator Client.
//!
//! Everything on the wire comes from the SV2 reference crates through the workspace's `sv2`
//! crate: Noise NX with the authority certificate and the tokio transport with its limits
//! ([`NoiseConn`]), typed messages, authority keys in their base58check form ([`TdpKeys`]).
//! What is simnet's own is the provider:
//!
//! - [`session`]: one connection's protocol as a sans-IO state machine (setup, coinbase
//!   constraints, future template + `SetNewPrevHash` sequencing, transaction data, solutions);
//! - [`block`]: rebuilding the block a `SubmitSolution` describes;
//! - [`codec`]: client messages to the values the session uses, its replies to `sv2` messages;
//! - [`serve`]: the accept loop and one task per connection.
//!
//! `crates/cli/tests/interop_fleet_sv2.rs` runs the reference pool (pool_sv2) against
//! `stratumlab simnet --tdp-listen`, with the fleet's SV2 devices on the pool's miner side.
//!
//! ```no_run
//! # async fn example(node: simnet::Node) -> std::io::Result<()> {
//! use simnet::tdp::{serve, TdpConfig, TdpKeys};
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! println!("tdp listening on {}", listener.local_addr()?);
//! serve(node, listener, TdpConfig::new(TdpKeys::reference()), std::future::pending()).await
//! # }
//! ```

pub mod block;
pub mod codec;
mod server;
pub mod session;

pub use server::{serve, TdpConfig};
/// The provider's authority key pair (sv2's, under the name simnet's callers know).
pub use sv2::keys::AuthorityKeys as TdpKeys;
pub use sv2::keys::{
    parse_public_key, KeyError, REFERENCE_AUTHORITY_PUBLIC_KEY, REFERENCE_AUTHORITY_SECRET_KEY,
};
pub use sv2::{Frame, Limits, NoiseConn, TransportError};
