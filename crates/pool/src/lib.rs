//! The pool's share-accounting engine, shared by its Stratum V1 and Stratum V2 front ends.
//!
//! Difficulty retargeting (the `mining` crate's vardiff) and the engine are sans-IO: callers pass the time in as
//! [`Timestamp`]. Admission control (rates, bans, connection caps) is the `edge` crate's.
//!
//! Statistics ([`stats`]: lock-free counters, decayed hash rates, the worker list) are served
//! over HTTP by [`http`] (`/metrics`, `/api/status`, `/api/workers`, `/healthz`).
//!
//! [`fuzz_support`]: what the fuzz targets in `crates/pool/fuzz` run, so that the committed
//! corpus replays on stable.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod channel;
pub mod engine;
mod front;
pub mod fuzz_support;
pub mod http;
pub mod jd_token;
pub mod job;
pub mod jobs;
pub mod memory;
pub mod node;
pub mod service;
pub mod stats;
pub mod store;
pub mod sv1;
pub mod sv2;
mod task;
pub mod template;
pub mod tips;
pub mod tp;

/// Milliseconds on the caller's monotonic clock (one type for every core: see `primitives::time`).
pub use primitives::Timestamp;

// The unit tests run on the stratumlab binary's allocator, so that `memory`'s figures are
// those of the heap they allocate from.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
