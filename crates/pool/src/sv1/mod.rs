//! The Stratum V1 front end: a sans-IO session per miner connection ([`session`]), the shared
//! `mining.notify` lines ([`notify`]), and the tokio server around them ([`server`]), which
//! wakes its connections through `wakers`.

pub mod notify;
pub mod server;
pub mod session;
mod wakers;

pub use server::Sv1Server;
pub use session::{Close, LineKind, Session, Sv1Config};
