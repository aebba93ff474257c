//! The SV2 Template Provider endpoint: simnet's templates over the Template Distribution
//! Protocol, as Bitcoin Core's provider serves them to a pool or a Job Declarator Client.
//!
//! Everything on the wire comes from the SV2 reference crates: Noise NX with the authority
//! certificate (noise_sv2 via codec_sv2's typestate handshake), frames (framing_sv2), messages
//! (common_messages_sv2, template_distribution_sv2, binary_sv2), keys in their base58check form
//! (key-utils). What is simnet's own is the glue:
//!
//! - [`session`]: one connection's protocol as a sans-IO state machine (setup, coinbase
//!   constraints, future template + `SetNewPrevHash` sequencing, transaction data, solutions);
//! - [`block`]: rebuilding the block a `SubmitSolution` describes;
//! - [`codec`]: wire messages to and from plain values;
//! - [`transport`]: Noise over TCP with bounded handshake time, frame size and write time;
//! - [`serve`]: the accept loop and one task per connection.
//!
//! `scripts/interop-pool-sv2.sh` runs the reference pool (pool_sv2) against
//! `stratumlab simnet --tdp-listen`, with the examples `sv2_probe` and `sv2_mine_block` (an SV2
//! miner's first steps, and one block found through the pool) on the pool's miner side.
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
pub mod keys;
mod server;
pub mod session;
pub mod transport;

pub use keys::{
    parse_public_key, KeyError, TdpKeys, REFERENCE_AUTHORITY_PUBLIC_KEY,
    REFERENCE_AUTHORITY_SECRET_KEY,
};
pub use server::{serve, TdpConfig};
pub use transport::{Frame, Limits, NoiseConn, TransportError};
