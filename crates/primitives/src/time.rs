//! Time as the sans-IO cores see it: passed in by their shells, never read from a clock.

/// Milliseconds on the caller's monotonic clock. A core never reads a clock itself, so tests
/// run hours of traffic in microseconds and every decision is reproducible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Millis(pub u64);

impl Millis {
    /// Milliseconds from `earlier` to `self`; 0 if `earlier` is later.
    pub fn since(self, earlier: Millis) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// `ms` milliseconds later, saturating at `u64::MAX`.
    pub fn plus(self, ms: u64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }
}
