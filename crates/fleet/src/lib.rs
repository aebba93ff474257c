//! The fleet: simulated mining devices that hash for real at scaled-down targets.
//!
//! - [`sv1_device`]: a Stratum V1 device as a sans-IO state machine ([`Sv1Device`]): the
//!   handshake as firmware does it, jobs, real SHA-256d in bounded slices, shares with their
//!   submit-to-reply latency, reconnect backoff.
//! - [`device`]: what devices of any protocol share: the [`Observer`] their outcomes go to,
//!   close reasons, hash outcomes.
//! - [`runner`]: the tokio shell that runs N devices against a pool over TCP, shares a hash
//!   budget among them, and produces a [`FleetReport`].
//! - [`stats`]: the live counters and the observer that turns device outcomes into events
//!   (`JobReceived`, `TargetChanged`, `ShareSent`, `ShareResult`; an unanswered share is a
//!   `ShareSent` without its `ShareResult`).
//! - [`testpool`]: a minimal SV1 pool that validates every share, for tests and benches.

pub mod backoff;
pub mod device;
pub mod net;
pub mod proc_stat;
pub mod report;
pub mod runner;
pub mod stats;
pub mod sv1_device;
pub mod testpool;

pub use backoff::Backoff;
pub use device::{CloseReason, HashOutcome, Nanos, Observer};
pub use report::FleetReport;
pub use runner::{Fleet, FleetConfig};
pub use sv1_device::{Profile, Sv1Config, Sv1Device, Sv1Shared};
