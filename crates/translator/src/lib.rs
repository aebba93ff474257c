//! The SV1-to-SV2 translator's protocol core, without I/O: SV1 devices on one side, an SV2
//! extended channel on the other.
//!
//! - [`upstream`]: the extended channel: opening, extranonce space, target, jobs (future jobs
//!   held until their prev hash).
//! - [`extranonce`]: aggregated mode's split of the channel's extranonce among devices.
//! - [`jobs`]: upstream work as SV1 jobs, each `mining.notify` serialized once for all devices.
//! - [`shares`]: a device's share judged locally; those meeting the upstream target followed
//!   upstream by sequence number.
//! - [`downstream`]: one SV1 device's session.
//! - [`translator`]: aggregated mode, tying them together, over an [`uplink::Uplink`]: the SV2
//!   extended channel ([`upstream`]) for the translator, one SV1 connection
//!   ([`sv1_upstream`]) for the aggregating SV1 proxy (`stratumlab proxy`).
//! - [`per_device`]: per-device mode, a single-device translator per device, each on an
//!   extended channel of its own on the one upstream connection.
//! - [`mode`]: what the shell drives, either mode.
//! - [`shell`]: the tokio shell that drives it (sockets, tasks, the clock, failover).
//! - [`fuzz_support`]: what the fuzz targets in `crates/translator/fuzz` run (aggregated mode;
//!   per-device mode in [`fuzz_support::per_device`]), so that the committed corpora replay on
//!   stable (`tests/fuzz_corpus.rs`).
//!
//! Time comes in as [`Timestamp`] on the caller's monotonic clock; outside [`shell`], nothing here
//! reads a clock, opens a socket or spawns a task.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod config;
pub mod downstream;
pub mod extranonce;
pub mod fuzz_support;
pub mod jobs;
pub mod mode;
pub mod per_device;
pub mod shares;
pub mod shell;
pub mod sv1_upstream;
pub mod translator;
pub mod uplink;
pub mod upstream;

pub use config::{ChannelMode, TranslatorConfig};
pub use downstream::{Close, Device, LineOutcome};
pub use mode::{Mode, Reach, Scope, Tagged, TICK_ROUNDS};
pub use per_device::PerDevice;
pub use primitives::Timestamp;
pub use translator::{Event, Translator};
pub use uplink::Uplink;

/// A device connection, numbered by the translator from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(pub u64);
