//! The pool's share-accounting engine, shared by its Stratum V1 and Stratum V2 front ends.
//!
//! So far: admission control ([`admission`]) and difficulty retargeting ([`vardiff`]), both
//! sans-IO: callers pass the time in as [`Millis`].

pub mod admission;
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
