//! The pool's share-accounting engine, shared by its Stratum V1 and Stratum V2 front ends.
//!
//! So far: admission control ([`admission`]) and difficulty retargeting ([`vardiff`]), both
//! sans-IO: callers pass the time in as [`Millis`].
//!
//! Statistics ([`stats`]: lock-free counters, decayed hash rates, the worker list) are served
//! over HTTP by [`http`] (`/metrics`, `/api/status`, `/api/workers`, `/healthz`).
//!
//! [`fuzz_support`]: what the fuzz targets in `crates/pool/fuzz` run, so that the committed
//! corpus replays on stable.

pub mod admission;
pub mod channel;
pub mod engine;
pub mod fuzz_support;
pub mod http;
pub mod jd_token;
pub mod job;
pub mod jobs;
pub mod node;
pub mod service;
pub mod stats;
pub mod store;
pub mod sv1;
pub mod sv2;
pub mod template;
pub mod tips;
pub mod tp;
pub mod vardiff;

/// Milliseconds on the caller's monotonic clock. The engine never reads a clock itself, so
/// tests run hours of traffic in microseconds and every decision is reproducible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Millis(pub u64);

impl Millis {
    pub fn since(self, earlier: Millis) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    pub fn plus(self, ms: u64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }
}
