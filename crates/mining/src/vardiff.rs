//! Variable difficulty: steer each miner toward a target share rate.
//!
//! The estimate is the miner's hash rate, from the work its accepted shares represent over time,
//! smoothed with an exponential moving average whose weight grows with the time covered (so a
//! burst of lucky shares moves it less than a long steady run). A retarget happens only when the
//! difficulty that rate calls for is outside a hysteresis band around the current one, and no
//! sooner than a minimum interval after the last change, so difficulty does not flap; a miner
//! that goes quiet is stepped down even without shares. The new difficulty is clamped to the
//! pool's bounds, which may be far below 1 for scaled-down lab targets.

use primitives::Difficulty;

use primitives::Timestamp;

/// What vardiff aims for and the bounds it keeps to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VardiffConfig {
    /// Shares per minute to aim for.
    pub shares_per_minute: f64,
    /// The lowest difficulty it sets, whatever the measured rate.
    pub min: Difficulty,
    /// The highest difficulty it sets.
    pub max: Difficulty,
    /// Least time between two retargets.
    pub retarget_interval_ms: u64,
    /// Change only if the ideal difficulty differs from the current by more than this factor
    /// (e.g. 1.5: stay while ideal is within [current / 1.5, current * 1.5]).
    pub hysteresis: f64,
    /// Time constant of the rate average: older evidence weighs e^-1 after this long.
    pub smoothing_ms: u64,
}

impl Default for VardiffConfig {
    fn default() -> Self {
        VardiffConfig {
            shares_per_minute: 15.0,
            min: Difficulty::MIN,
            max: Difficulty::new(1e15).expect("valid"),
            retarget_interval_ms: 30_000,
            hysteresis: 1.5,
            smoothing_ms: 120_000,
        }
    }
}

/// One miner's (or channel's) vardiff state.
#[derive(Clone, Debug)]
pub struct Vardiff {
    config: VardiffConfig,
    current: Difficulty,
    last_change: Timestamp,
    /// Smoothed share-difficulty per millisecond (difficulty-1 units per ms ~ hash rate).
    rate: Option<f64>,
    /// Work and shares accumulated since `window_start`, folded into `rate` when the window
    /// closes.
    window_work: f64,
    window_shares: u32,
    window_start: Timestamp,
}

/// A window closes early once it holds this many times the shares expected in a full window:
/// a miner far below its right difficulty is corrected within a few shares, not a full interval
/// of flooding.
const FLOOD_FACTOR: f64 = 4.0;

impl Vardiff {
    /// Starts at `start` (clamped to the bounds), its first window opening at `now`.
    pub fn new(config: VardiffConfig, start: Difficulty, now: Timestamp) -> Self {
        let current = clamp(start, &config);
        Vardiff {
            config,
            current,
            last_change: now,
            rate: None,
            window_work: 0.0,
            window_shares: 0,
            window_start: now,
        }
    }

    /// The difficulty the miner is on now.
    pub fn difficulty(&self) -> Difficulty {
        self.current
    }

    /// The estimated rate in difficulty-1 shares per second (times 2^32 ~ hashes per second).
    pub fn rate_per_second(&self) -> Option<f64> {
        self.rate.map(|r| r * 1000.0)
    }

    /// Records an accepted share of difficulty `d` (the difficulty it was judged at).
    pub fn handle_share(&mut self, d: Difficulty, now: Timestamp) -> Option<Difficulty> {
        self.window_work += d.as_f64();
        self.window_shares += 1;
        self.evaluate(now)
    }

    /// Called periodically without shares, so that a miner too slow for its difficulty (no
    /// shares at all) is stepped down.
    pub fn handle_tick(&mut self, now: Timestamp) -> Option<Difficulty> {
        self.evaluate(now)
    }

    /// Raises the lower bound (never above the upper one).
    pub fn set_minimum(&mut self, d: Difficulty) {
        if d > self.config.min {
            self.config.min = if d < self.config.max {
                d
            } else {
                self.config.max
            };
        }
        self.current = clamp(self.current, &self.config);
    }

    /// Aims at another share rate from now on (an aggregated channel that carries several
    /// workers' shares aims at each worker's rate times their number). The current window's
    /// evidence stands: the rate estimate does not depend on the aim.
    pub fn set_shares_per_minute(&mut self, shares_per_minute: f64) {
        if shares_per_minute.is_finite() && shares_per_minute > 0.0 {
            self.config.shares_per_minute = shares_per_minute;
        }
    }

    /// The share rate it aims at, per minute.
    pub fn shares_per_minute(&self) -> f64 {
        self.config.shares_per_minute
    }

    /// Sets the difficulty from outside (a miner's suggestion accepted within bounds).
    pub fn set(&mut self, d: Difficulty, now: Timestamp) -> Difficulty {
        self.current = clamp(d, &self.config);
        self.last_change = now;
        self.current
    }

    fn evaluate(&mut self, now: Timestamp) -> Option<Difficulty> {
        let span = now.millis_since(self.window_start);
        let expected =
            self.config.shares_per_minute * self.config.retarget_interval_ms as f64 / 60_000.0;
        let flooded = self.window_shares as f64 >= FLOOD_FACTOR * expected.max(1.0);
        // Estimates come from whole windows: a window of one share would make the rate
        // 1 / (an exponential gap), whose mean does not even exist.
        if span == 0 || (span < self.config.retarget_interval_ms && !flooded) {
            return None;
        }
        let observed = self.window_work / span as f64;
        let rate = match self.rate {
            // The new window's weight grows with the time it covers.
            Some(old) if !flooded => {
                let w = 1.0 - (-(span as f64) / self.config.smoothing_ms as f64).exp();
                old + w * (observed - old)
            }
            _ => observed,
        };
        self.rate = Some(rate);
        self.window_work = 0.0;
        self.window_shares = 0;
        self.window_start = now;
        if now.millis_since(self.last_change) < self.config.retarget_interval_ms && !flooded {
            return None;
        }

        let per_share_ms = 60_000.0 / self.config.shares_per_minute;
        let ideal = if rate > 0.0 {
            rate * per_share_ms
        } else {
            // Not one share yet: the miner cannot reach this difficulty. Quarter it per
            // window; a rate of zero gives no better estimate.
            self.current.as_f64() / 4.0
        };
        let cur = self.current.as_f64();
        if ideal < cur * self.config.hysteresis && ideal > cur / self.config.hysteresis {
            return None;
        }
        let next = clamp(Difficulty::saturating(ideal), &self.config);
        if next == self.current {
            return None;
        }
        self.current = next;
        self.last_change = now;
        Some(next)
    }
}

fn clamp(d: Difficulty, c: &VardiffConfig) -> Difficulty {
    if d < c.min {
        c.min
    } else if d > c.max {
        c.max
    } else {
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A miner finding shares of its current difficulty as a Poisson process, with the pool
    /// ticking every 5 s. Deterministic pseudo-random gaps, so the test is exact; the next share
    /// is redrawn whenever the difficulty changes (the process is memoryless).
    fn simulate(
        v: &mut Vardiff,
        diff1_per_sec: f64,
        from: Timestamp,
        for_ms: u64,
        seed: u64,
    ) -> Timestamp {
        // splitmix64 of the seed: xorshift started from a small seed gives small first outputs.
        let mut x = {
            let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) | 1
        };
        let mut draw = |v: &Vardiff, now: f64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            now - u.ln() * v.difficulty().as_f64() / diff1_per_sec * 1000.0
        };
        let end = (from.as_millis() + for_ms) as f64;
        let mut next_share = draw(v, from.as_millis() as f64);
        let mut next_tick = from.as_millis() as f64 + 5_000.0;
        loop {
            let before = v.difficulty();
            let now = next_share.min(next_tick);
            if now > end {
                return Timestamp::from_millis(end as u64);
            }
            if next_share <= next_tick {
                v.handle_share(before, Timestamp::from_millis(now as u64));
                next_share = draw(v, now);
            } else {
                v.handle_tick(Timestamp::from_millis(now as u64));
                next_tick += 5_000.0;
            }
            if v.difficulty() != before {
                next_share = draw(v, now);
            }
        }
    }

    #[test]
    fn converges_to_the_target_share_rate_from_far_below_and_above() {
        // 1 diff-1 share per second: at 15 shares/min the right difficulty is 4.
        for start in [1e-3, 1e6] {
            let mut v = Vardiff::new(
                VardiffConfig::default(),
                Difficulty::new(start).unwrap(),
                Timestamp::from_millis(0),
            );
            simulate(&mut v, 1.0, Timestamp::from_millis(0), 3_600_000, 42);
            let d = v.difficulty().as_f64();
            assert!((2.0..8.0).contains(&d), "from {start}: {d}");
        }
    }

    #[test]
    fn a_channel_aiming_at_ten_workers_rates_settles_ten_times_easier() {
        // 1 diff-1 share per second at 150 shares/min: difficulty 0.4 rather than 4.
        let mut v = Vardiff::new(
            VardiffConfig::default(),
            Difficulty::new(4.0).unwrap(),
            Timestamp::from_millis(0),
        );
        v.set_shares_per_minute(150.0);
        v.set_shares_per_minute(f64::NAN);
        v.set_shares_per_minute(0.0);
        assert_eq!(v.shares_per_minute(), 150.0, "nonsense aims are ignored");
        simulate(&mut v, 1.0, Timestamp::from_millis(0), 1_800_000, 9);
        let d = v.difficulty().as_f64();
        assert!((0.2..0.8).contains(&d), "{d}");
    }

    #[test]
    fn steady_miner_is_left_alone() {
        let mut v = Vardiff::new(
            VardiffConfig::default(),
            Difficulty::new(4.0).unwrap(),
            Timestamp::from_millis(0),
        );
        let mut changes = 0;
        let mut t = Timestamp::from_millis(0);
        for _ in 0..60 {
            let before = v.difficulty();
            t = simulate(&mut v, 1.0, t, 60_000, t.as_millis() + 7);
            changes += (v.difficulty() != before) as u32;
        }
        assert!(
            changes <= 2,
            "{changes} changes in an hour of steady hashing"
        );
    }

    #[test]
    fn respects_bounds_and_the_retarget_interval() {
        let cfg = VardiffConfig {
            min: Difficulty::new(0.5).unwrap(),
            max: Difficulty::new(8.0).unwrap(),
            ..VardiffConfig::default()
        };
        let mut v = Vardiff::new(
            cfg,
            Difficulty::new(1000.0).unwrap(),
            Timestamp::from_millis(0),
        );
        assert_eq!(v.difficulty().as_f64(), 8.0, "start clamped");
        // A flood of shares inside the interval changes nothing.
        for ms in 0..29_000 {
            assert_eq!(
                v.handle_share(Difficulty::new(8.0).unwrap(), Timestamp::from_millis(ms)),
                None
            );
        }
        // A silent miner steps down, but not below the minimum.
        let mut v = Vardiff::new(
            cfg,
            Difficulty::new(8.0).unwrap(),
            Timestamp::from_millis(0),
        );
        let mut t = 0;
        for _ in 0..20 {
            t += 30_000;
            v.handle_tick(Timestamp::from_millis(t));
        }
        assert_eq!(v.difficulty().as_f64(), 0.5);
        assert_eq!(
            v.set(Difficulty::new(100.0).unwrap(), Timestamp::from_millis(t))
                .as_f64(),
            8.0
        );
    }

    #[test]
    fn fractional_difficulties_for_tiny_miners() {
        // A 10 kH/s device: 10e3 / 2^32 diff-1 shares per second.
        let rate = 10e3 / 4_294_967_296.0;
        let mut v = Vardiff::new(
            VardiffConfig::default(),
            Difficulty::ONE,
            Timestamp::from_millis(0),
        );
        simulate(&mut v, rate, Timestamp::from_millis(0), 6 * 3_600_000, 9);
        let d = v.difficulty().as_f64();
        let ideal = rate * 4.0;
        assert!(d > ideal / 2.0 && d < ideal * 2.0, "{d} vs {ideal}");
    }
}
