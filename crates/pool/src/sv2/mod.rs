//! The Stratum V2 front end: Noise NX with the pool's authority certificate, the Mining
//! Protocol's standard and extended channels over the shared engine.
//!
//! - [`session`]: one connection's protocol past the handshake, sans-IO;
//! - [`custom_job`]: a farm's declared job (`SetCustomMiningJob`) checked and made a job;
//! - [`server`]: the tokio shell (accept, admission, Noise, events, one task per connection).

pub mod custom_job;
pub mod server;
pub mod session;

pub use server::Sv2Server;
pub use session::{
    tracked_name, Close, Kind, Session, Sv2Config, MAX_TRACKED_WORKERS, SUPPORTED_EXTENSIONS,
};
