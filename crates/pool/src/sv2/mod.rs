//! The Stratum V2 front end: Noise NX with the pool's authority certificate, the Mining
//! Protocol's standard and extended channels over the shared engine.
//!
//! - [`session`]: one connection's protocol past the handshake, sans-IO;
//! - [`server`]: the tokio shell (accept, admission, Noise, events, one task per connection).

pub mod server;
pub mod session;

pub use server::Sv2Server;
pub use session::{Close, Kind, Session, Sv2Config};
