//! Lock-free, allocation-free accumulators: an `f64` that many threads add to, and
//! exponentially decayed rates of a growing total, updated and read in O(1).
//!
//! # Decayed rates
//!
//! For a total that grows by `wᵢ` at times `tᵢ` (accepted work, shares), the decayed sum
//! `W(t) = Σ wᵢ · e^(−(t − tᵢ)/τ)` settles at `r·τ` for a steady rate of `r` per second, so
//! `W/τ` estimates the rate (and one share of difficulty `d` is `d · 2³²` hashes expected,
//! which makes a hash rate of it).
//!
//! The share path does not touch `W` on every share. It adds to the cumulative total (an
//! [`AtomicF64`] or counter the statistics keep anyway), and once per tick of [`TICK_MS`]
//! (64 ms) the first share of a new tick *folds* the total's growth since the last fold into
//! each `W`: `W ← W · e^(−Δ/τ) + growth`. Every other share only loads one word to see that
//! no fold is due. Folding is guarded by a busy bit taken with one compare-and-swap; a share
//! that finds it taken does not wait, it leaves its work to the next fold. So the share path
//! never blocks, and the work of a whole tick costs one fold however many shares it held.
//!
//! A reader takes the folded sums under a sequence check (the fold state word changes with
//! every fold, and is odd while one is under way; a reader that overlaps one reads again) and
//! adds what the total gained since: nothing is lost between folds. Between folds the newest
//! work is timed to the tick of the last fold, and a fold credits the growth at its own tick:
//! an error of at most one tick (64 ms), 0.1% of a one-minute time constant, and none at all
//! for a source whose shares are more than a tick apart (each of its shares folds at once).
//!
//! The decay over a whole number of ticks comes from two 64-entry tables (up to 4,096 ticks,
//! 262 s; `exp` beyond), so a fold needs no transcendental call. The sums are `f64`: each
//! addition is `1/(λτ)` of a sum (λ shares per second), 2.4 million for a pool taking 4,000
//! shares/s over ten minutes, and an `f64` still resolves it to 2⁻³¹ of a share where an `f32`
//! would round every addition the same way and drift by a percent or more.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::Timestamp;

use Ordering::{Acquire, Relaxed, Release};

/// One tick of the decayed rates' clock.
pub const TICK_MS: u64 = 64;
const TABLE_BITS: u32 = 6;
const TABLE: usize = 1 << TABLE_BITS;

/// The tick of `now` counted from `base` (0 before it).
#[inline]
pub(crate) fn tick(base: Timestamp, now: Timestamp) -> u64 {
    // One division: whole ticks of nanoseconds are whole ticks of whole milliseconds.
    now.nanos_since(base) / (TICK_MS * 1_000_000)
}

/// Decay factors `e^(−n·TICK_MS/τ)` for one time constant `τ`.
pub(crate) struct Decay {
    tau_ms: f64,
    /// `lo[i]`: `i` ticks; `hi[i]`: `i · 64` ticks.
    lo: [f64; TABLE],
    hi: [f64; TABLE],
}

impl Decay {
    pub(crate) fn new(tau_ms: u64) -> Decay {
        let tau_ms = tau_ms.max(1) as f64;
        let factor = |ticks: usize| (-(ticks as f64) * TICK_MS as f64 / tau_ms).exp();
        Decay {
            tau_ms,
            lo: std::array::from_fn(factor),
            hi: std::array::from_fn(|i| factor(i << TABLE_BITS)),
        }
    }

    pub(crate) fn tau_ms(&self) -> f64 {
        self.tau_ms
    }

    /// `e^(−ticks·TICK_MS/τ)`.
    #[inline]
    fn factor(&self, ticks: u64) -> f64 {
        if ticks < (TABLE * TABLE) as u64 {
            let t = ticks as usize;
            self.lo[t & (TABLE - 1)] * self.hi[t >> TABLE_BITS]
        } else {
            (-(ticks as f64) * TICK_MS as f64 / self.tau_ms).exp()
        }
    }
}

const BUSY: u64 = 1;

/// `N` decayed sums (one per time constant) of one cumulative total (see the module's
/// documentation).
pub(crate) struct DecayedRates<const N: usize> {
    /// The tick of the last fold, shifted left by one; the low bit is set while a fold is
    /// under way.
    state: AtomicU64,
    /// The total as of the last fold (`f64` bits).
    folded: AtomicU64,
    /// The decayed sums as of the last fold (`f64` bits).
    sums: [AtomicU64; N],
}

impl<const N: usize> DecayedRates<N> {
    pub(crate) fn new() -> Self {
        DecayedRates {
            state: AtomicU64::new(0),
            folded: AtomicU64::new(0),
            sums: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Whether a share at `tick` should fold: one relaxed load.
    #[inline]
    pub(crate) fn due(&self, tick: u64) -> bool {
        tick > self.state.load(Relaxed) >> 1
    }

    /// Folds the total's growth since the last fold in at `tick`, unless another thread is
    /// folding (then that fold, or the next, takes this work).
    #[inline(never)]
    pub(crate) fn fold(&self, tick: u64, total: impl Fn() -> f64, decays: [&Decay; N]) {
        let state = self.state.load(Relaxed);
        let last = state >> 1;
        if state & BUSY != 0 || tick <= last {
            return;
        }
        if self
            .state
            .compare_exchange(state, state | BUSY, Acquire, Relaxed)
            .is_err()
        {
            return;
        }
        // Readers that see any of the stores below will also see the busy bit (the sequence
        // check): the release fence orders them after it.
        fence(Release);
        let now_total = total();
        let growth = (now_total - f64::from_bits(self.folded.load(Relaxed))).max(0.0);
        for (sum, decay) in self.sums.iter().zip(decays) {
            let w = f64::from_bits(sum.load(Relaxed));
            sum.store((w * decay.factor(tick - last) + growth).to_bits(), Relaxed);
        }
        self.folded.store(now_total.to_bits(), Relaxed);
        self.state.store(tick << 1, Release);
    }

    /// The sums at `since_base_ms` (milliseconds since the ticks' base), given the total now
    /// (read after this call's consistent read of the folded state, hence a closure).
    pub(crate) fn sums_at(
        &self,
        since_base_ms: u64,
        total: impl Fn() -> f64,
        taus_ms: [f64; N],
    ) -> [f64; N] {
        let mut spins = 0u32;
        let (state, folded, sums) = loop {
            let before = self.state.load(Acquire);
            if before & BUSY == 0 {
                let folded = f64::from_bits(self.folded.load(Relaxed));
                let sums: [f64; N] =
                    std::array::from_fn(|i| f64::from_bits(self.sums[i].load(Relaxed)));
                fence(Acquire);
                if self.state.load(Relaxed) == before {
                    break (before, folded, sums);
                }
            }
            // A fold is a few dozen instructions; a folder preempted halfway is waited out
            // politely.
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        };
        let pending = (total() - folded).max(0.0);
        let elapsed = since_base_ms.saturating_sub((state >> 1).saturating_mul(TICK_MS));
        std::array::from_fn(|i| (sums[i] + pending) * (-(elapsed as f64) / taus_ms[i]).exp())
    }
}

/// Turns a decayed sum into a rate per second.
///
/// A sum that started from zero `age_ms` ago has only reached `1 − e^(−age/τ)` of its steady
/// level, so it is divided by that too: the estimate is unbiased from the start instead of
/// creeping up over several time constants (for a young estimator it is simply work / age).
/// The age counts as at least τ/10, so the first few shares after a start do not read as a
/// burst of enormous rate; for that first tenth of τ the figure reads low instead.
pub(crate) fn rate_per_second(sum: f64, tau_ms: f64, age_ms: u64) -> f64 {
    let age = (age_ms as f64).max(tau_ms / 10.0);
    let filled = -(-age / tau_ms).exp_m1(); // 1 − e^(−age/τ), exact for small ages too
    sum * 1000.0 / (tau_ms * filled)
}

/// An `f64` that threads add to without a lock (a compare-and-swap loop).
pub(crate) struct AtomicF64(AtomicU64);

impl AtomicF64 {
    pub(crate) const fn zero() -> AtomicF64 {
        AtomicF64(AtomicU64::new(0)) // the bits of +0.0
    }

    #[inline]
    pub(crate) fn add(&self, v: f64) {
        let mut current = self.0.load(Relaxed);
        loop {
            let next = (f64::from_bits(current) + v).to_bits();
            match self
                .0
                .compare_exchange_weak(current, next, Relaxed, Relaxed)
            {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    pub(crate) fn load(&self) -> f64 {
        f64::from_bits(self.0.load(Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_match_exp() {
        let d = Decay::new(60_000);
        for ticks in [0u64, 1, 2, 63, 64, 65, 100, 1000, 4095, 4096, 5000, 100_000] {
            let exact = (-(ticks as f64) * TICK_MS as f64 / 60_000.0).exp();
            let got = d.factor(ticks);
            assert!(
                (got - exact).abs() <= exact * 1e-14 + 1e-300,
                "{ticks}: {got} vs {exact}"
            );
        }
    }

    #[test]
    fn folds_decay_by_the_time_constant() {
        let d = Decay::new(10_000);
        let r = DecayedRates::<1>::new();
        let total = AtomicF64::zero();
        let tau = [10_000.0];
        // 100 at tick 1: folded at once.
        total.add(100.0);
        assert!(r.due(1));
        r.fold(1, || total.load(), [&d]);
        assert!(!r.due(1));
        assert_eq!(r.sums_at(TICK_MS, || total.load(), tau), [100.0]);
        // One time constant later: e^-1 of it, read at ms resolution.
        let v = r.sums_at(TICK_MS + 10_000, || total.load(), tau)[0];
        assert!((v - 100.0 * (-1f64).exp()).abs() < 1e-9, "{v}");
        // 1 more at tick 300, not folded yet: the reader counts it (timed to the last fold).
        total.add(1.0);
        let v = r.sums_at(TICK_MS, || total.load(), tau)[0];
        assert!((v - 101.0).abs() < 1e-9, "{v}");
        // Folded at tick 300: the old sum decays through the tables, the new work does not.
        r.fold(300, || total.load(), [&d]);
        let expect = 100.0 * (-(299.0 * TICK_MS as f64) / 10_000.0).exp() + 1.0;
        let v = r.sums_at(300 * TICK_MS, || total.load(), tau)[0];
        assert!((v - expect).abs() < 1e-9, "{v} vs {expect}");
    }

    #[test]
    fn a_fold_never_runs_back_or_overlaps() {
        let d = Decay::new(10_000);
        let r = DecayedRates::<1>::new();
        r.fold(10, || 5.0, [&d]);
        r.fold(9, || 7.0, [&d]); // an older tick: nothing
        r.fold(10, || 7.0, [&d]); // the same tick: nothing
        assert_eq!(r.state.load(Relaxed), 10 << 1);
        assert_eq!(f64::from_bits(r.folded.load(Relaxed)), 5.0);
        // While busy, others skip.
        r.state.fetch_or(BUSY, Relaxed);
        assert!(r.due(11));
        r.fold(11, || 9.0, [&d]);
        assert_eq!(f64::from_bits(r.folded.load(Relaxed)), 5.0);
    }

    #[test]
    fn concurrent_folds_lose_no_work() {
        // A time constant so long that nothing decays: the sums must hold every unit added.
        let forever = Decay::new(u64::MAX / 2);
        let r = DecayedRates::<1>::new();
        let total = AtomicF64::zero();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (r, total, forever) = (&r, &total, &forever);
                s.spawn(move || {
                    for i in 0..20_000u64 {
                        total.add(1.0);
                        let tick = i / 100 + t; // every thread sees time move
                        if r.due(tick) {
                            r.fold(tick, || total.load(), [forever]);
                        }
                    }
                });
            }
        });
        assert!(f64::from_bits(r.folded.load(Relaxed)) > 0.0);
        let last = r.state.load(Relaxed) >> 1;
        let [w] = r.sums_at(last * TICK_MS, || total.load(), [u64::MAX as f64 / 2.0]);
        assert!((w - 80_000.0).abs() < 1e-6, "{w}");
    }

    #[test]
    fn young_estimators_read_work_over_age() {
        // 30 s after a start at a steady 2 per second: W = 2·τ·(1 − e^(−30/60)).
        let tau = 60_000.0;
        let w = 2.0 * 60.0 * (1.0 - (-0.5f64).exp());
        assert!((rate_per_second(w, tau, 30_000) - 2.0).abs() < 1e-9);
        // Steady state: W = r·τ.
        assert!((rate_per_second(120.0, tau, 10 * 3_600_000) - 2.0).abs() < 1e-9);
        // A share at age 0 counts as over τ/10, not as an infinite rate.
        assert!(rate_per_second(1.0, tau, 0).is_finite());
    }

    #[test]
    fn atomic_f64_adds_from_many_threads() {
        let a = AtomicF64::zero();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        a.add(0.5);
                    }
                });
            }
        });
        assert_eq!(a.load(), 20_000.0);
    }
}
