//! The Stratum V2 front end: Noise NX with the pool's authority certificate, the Mining
//! Protocol's standard and extended channels over the shared engine.
//!
//! - [`session`]: one connection's protocol past the handshake, sans-IO;
//! - [`custom_job`]: a farm's declared job (`SetCustomMiningJob`) checked and made a job;
//! - [`server`]: the tokio shell (accept, admission, Noise, events, one task per connection).

pub mod custom_job;
pub mod server;
pub mod session;
pub mod tracking;

pub use server::Sv2Server;
pub use session::{Close, Kind, Session, Sv2Config, SUPPORTED_EXTENSIONS};
pub use tracking::{tracked_name, MAX_TRACKED_WORKERS, TRACKED_IDLE_MS};
