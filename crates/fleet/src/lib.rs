//! The fleet: simulated mining devices that hash for real at scaled-down targets.
//!
//! - [`sv1_device`]: a Stratum V1 device as a sans-IO state machine ([`Sv1Device`]): the
//!   handshake as firmware does it, jobs, real SHA-256d in bounded slices, shares with their
//!   submit-to-reply latency, reconnect backoff.
//! - [`sv2_device`]: a Stratum V2 device on a standard channel ([`Sv2Device`]): Noise with the
//!   pool's authority key, SetupConnection, header-only mining on standard and future jobs,
//!   version rolling where allowed, batched share acknowledgements, the same backoff.
//! - [`device`]: what devices of any protocol share: the [`Observer`] their outcomes go to,
//!   the [`Device`] trait the shell drives them through, close reasons, hash outcomes.
//! - [`profile`]: the firmware a device behaves like (asic, bitaxe, cpu), in either protocol.
//! - [`runner`]: the tokio shell that runs N devices of one protocol against a pool over TCP,
//!   shares a hash budget among them, and produces a [`FleetReport`].
//! - [`hash_rate`]: each device's rate over a run, its budget share changed by steps.
//! - [`stats`]: the live counters and the observer that turns device outcomes into events
//!   (`JobReceived`, `JobActivated`, `TargetChanged`, `ShareSent`, `ShareResult`; an unanswered
//!   share is a `ShareSent` without its `ShareResult`).
//! - [`testpool`], [`sv2_testpool`]: minimal SV1 and SV2 pools that validate every share, for
//!   tests and benches.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod backoff;
pub mod device;
mod grind;
pub mod hash_rate;
mod lifecycle;
pub mod net;
pub mod proc_stat;
pub mod profile;
pub mod report;
pub mod runner;
pub mod stats;
pub mod sv1_device;
pub mod sv2_device;
pub mod sv2_testpool;
pub mod testpool;
mod timed_writer;

pub use backoff::Backoff;
pub use device::{CloseReason, ConnectionPolicy, Device, HashOutcome, Observer, Timestamp};
pub use hash_rate::HashRateStep;
pub use profile::Profile;
pub use report::FleetReport;
pub use runner::{Fleet, FleetConfig, Protocol, SetupError};
pub use sv1_device::{Sv1Config, Sv1Device, Sv1Shared};
pub use sv2_device::{Sv2Config, Sv2Device, Sv2Shared};
