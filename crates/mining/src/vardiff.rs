//! Variable difficulty: steer each miner toward a target share rate.
//!
//! The estimate is the miner's hash rate: the work its accepted shares represent over the time
//! they took, both decayed with a time constant, so that it rests on the last few minutes of
//! shares (docs/architecture.md, "Vardiff"). Two things keep it honest at the few shares a
//! minute a pool asks for:
//!
//! - **It moves only on evidence.** The difficulty changes when the one the estimate calls for
//!   lies outside a band around the current one whose width is what the estimate's shares can
//!   tell apart (`Z / sqrt(shares)` in log terms), and never narrower than the configured
//!   hysteresis. A miner started at the right difficulty is not pushed off it by a lucky first
//!   half minute, and one far off is corrected as soon as its shares show it.
//! - **It notices a change of rate.** Each window's share count is tested against what the
//!   estimate predicts, with a cumulative sum (CUSUM) of the log-likelihood that the rate
//!   doubled, and another that it halved. When one crosses its threshold, the estimate restarts
//!   from the shares since the change began, rather than averaging the old rate away over the
//!   time constant: a miner whose rate doubles is retargeted about a minute later.
//!
//! A miner that goes quiet is stepped down even without shares. The new difficulty is clamped
//! to the pool's bounds, which may be far below 1 for scaled-down lab targets.

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
    /// Least time between two retargets, and the length of the windows the shares are
    /// counted in.
    pub retarget_interval_ms: u64,
    /// The narrowest band it keeps to: it changes only if the ideal difficulty differs from the
    /// current by more than this factor (e.g. 1.15: stay while ideal is within
    /// [current / 1.15, current * 1.15]), and by more than the estimate's own uncertainty.
    pub hysteresis: f64,
    /// Time constant of the rate estimate: older evidence weighs e^-1 after this long.
    pub smoothing_ms: u64,
}

impl Default for VardiffConfig {
    fn default() -> Self {
        VardiffConfig {
            shares_per_minute: 15.0,
            min: Difficulty::MIN,
            max: Difficulty::new(1e15).expect("valid"),
            retarget_interval_ms: 30_000,
            hysteresis: 1.15,
            smoothing_ms: 300_000,
        }
    }
}

/// Work, time and shares: what a rate is estimated from. Single precision: a vardiff lives in
/// every connection, and an estimate needs no more than seven digits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Evidence {
    /// Difficulty-1 shares' worth of work.
    work: f32,
    /// Milliseconds; zero: no evidence yet.
    ms: f32,
    /// Shares.
    shares: f32,
}

impl Evidence {
    fn add(&mut self, o: &Evidence) {
        self.work += o.work;
        self.ms += o.ms;
        self.shares += o.shares;
    }

    fn scale(&mut self, f: f32) {
        self.work *= f;
        self.ms *= f;
        self.shares *= f;
    }

    /// Difficulty-1 shares per millisecond; `None` without evidence.
    fn rate(&self) -> Option<f64> {
        (self.ms > 0.0).then(|| f64::from(self.work) / f64::from(self.ms))
    }
}

/// The change detector: for each direction, the CUSUM of the log-likelihood that the rate is
/// [`RISE`] (or [`FALL`]) times the estimate rather than the estimate, and the evidence since
/// that sum last stood at zero (where a change it detects began).
#[derive(Clone, Copy, Debug, Default)]
struct Cusum {
    rise: f32,
    fall: f32,
    since_rise: Evidence,
    since_fall: Evidence,
}

/// The changes of rate the detector looks for: a doubling and a halving.
const RISE: f64 = 2.0;
const FALL: f64 = 0.5;

impl Cusum {
    /// Adds a window holding `n` shares' worth of work at the difficulty in force, where
    /// `expected` were predicted; the evidence since the change when a sum crosses
    /// [`CHANGE_THRESHOLD`].
    fn add(&mut self, w: &Evidence, n: f64, expected: f64) -> Option<Evidence> {
        let step = |sum: &mut f32, since: &mut Evidence, ratio: f64| {
            let llr = n * ratio.ln() - expected * (ratio - 1.0);
            *sum = (f64::from(*sum) + llr).max(0.0) as f32;
            if *sum == 0.0 {
                *since = Evidence::default();
            } else {
                since.add(w);
            }
            f64::from(*sum) > CHANGE_THRESHOLD
        };
        let rose = step(&mut self.rise, &mut self.since_rise, RISE);
        let fell = step(&mut self.fall, &mut self.since_fall, FALL);
        match (rose, fell) {
            (true, _) => Some(self.since_rise),
            (_, true) => Some(self.since_fall),
            _ => None,
        }
    }
}

/// One miner's (or channel's) vardiff state. It lives in every connection: the settings are
/// kept flat and narrow (a [`VardiffConfig`] nested here would pad to 48 bytes).
#[derive(Clone, Debug)]
pub struct Vardiff {
    shares_per_minute: f64,
    min: Difficulty,
    max: Difficulty,
    retarget_interval_ms: u32,
    hysteresis: f32,
    smoothing_ms: u32,
    current: Difficulty,
    /// Decayed evidence: the rate estimate is its work over its time (none until a window
    /// closed).
    evidence: Evidence,
    /// Whether the rate doubled or halved.
    change: Cusum,
    /// Work and shares accumulated since `window_start`, folded into the evidence when the
    /// window closes.
    window_work: f32,
    window_shares: u32,
    window_start: Timestamp,
}

/// A window closes early once it holds this many times the shares expected in a full window:
/// a miner far below its right difficulty is corrected within a few shares, not a full interval
/// of flooding.
const FLOOD_FACTOR: f64 = 4.0;

/// How many standard errors of the estimate the ideal difficulty must lie away from the
/// current one before it moves (the estimate from n shares is off by about 1 / sqrt(n)).
const Z: f64 = 2.5;

/// The CUSUM threshold: at 7.5 shares a window (15 a minute, 30 s windows), a steady miner
/// crosses it about once in a few thousand windows, a doubled one within one to three windows,
/// a halved one within three to six.
const CHANGE_THRESHOLD: f64 = 5.0;

impl Vardiff {
    /// Starts at `start` (clamped to the bounds), its first window opening at `now`.
    pub fn new(config: VardiffConfig, start: Difficulty, now: Timestamp) -> Self {
        let current = clamp(start, config.min, config.max);
        let narrow = |ms: u64| u32::try_from(ms).unwrap_or(u32::MAX);
        Vardiff {
            shares_per_minute: config.shares_per_minute,
            min: config.min,
            max: config.max,
            retarget_interval_ms: narrow(config.retarget_interval_ms),
            hysteresis: config.hysteresis as f32,
            smoothing_ms: narrow(config.smoothing_ms),
            current,
            evidence: Evidence::default(),
            change: Cusum::default(),
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
        self.evidence.rate().map(|r| r * 1000.0)
    }

    /// Records an accepted share of difficulty `d` (the difficulty it was judged at).
    pub fn handle_share(&mut self, d: Difficulty, now: Timestamp) -> Option<Difficulty> {
        self.window_work += d.as_f64() as f32;
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
        if d > self.min {
            self.min = if d < self.max { d } else { self.max };
        }
        self.current = clamp(self.current, self.min, self.max);
    }

    /// Aims at another share rate from now on (an aggregated channel that carries several
    /// workers' shares aims at each worker's rate times their number). The evidence stands:
    /// the rate estimate does not depend on the aim.
    pub fn set_shares_per_minute(&mut self, shares_per_minute: f64) {
        if shares_per_minute.is_finite() && shares_per_minute > 0.0 {
            self.shares_per_minute = shares_per_minute;
        }
    }

    /// The share rate it aims at, per minute.
    pub fn shares_per_minute(&self) -> f64 {
        self.shares_per_minute
    }

    /// Sets the difficulty from outside (a miner's suggestion accepted within bounds).
    pub fn set(&mut self, d: Difficulty, now: Timestamp) -> Difficulty {
        let d = clamp(d, self.min, self.max);
        if d == self.current {
            return d;
        }
        self.current = d;
        // The next window starts with the difficulty, so that no retarget follows within the
        // interval.
        self.restart_window(now);
        self.current
    }

    fn restart_window(&mut self, now: Timestamp) {
        self.window_work = 0.0;
        self.window_shares = 0;
        self.window_start = now;
    }

    /// Folds a closed window into the evidence; true when the change detector restarted the
    /// estimate from the shares since a change of rate.
    fn fold(&mut self, window: Evidence) -> bool {
        // The shares the estimate predicts for this window, at the difficulty in force, and
        // what it held in those units: counted by work, so that shares credited at another
        // difficulty (a grace period, a miner that applies a new one at its next job) do not
        // pass for a change of rate.
        let current = self.current.as_f64();
        let expected = self
            .evidence
            .rate()
            .filter(|r| *r > 0.0)
            .map(|r| r * f64::from(window.ms) / current);
        if let Some(expected) = expected {
            let n = f64::from(window.work) / current;
            if let Some(since) = self.change.add(&window, n, expected) {
                self.evidence = since;
                self.change = Cusum::default();
                return true;
            }
        }
        let age = f64::from(window.ms) / f64::from(self.smoothing_ms.max(1));
        self.evidence.scale((-age).exp() as f32);
        self.evidence.add(&window);
        false
    }

    fn evaluate(&mut self, now: Timestamp) -> Option<Difficulty> {
        let span = now.millis_since(self.window_start);
        let expected = self.shares_per_minute * f64::from(self.retarget_interval_ms) / 60_000.0;
        let flooded = self.window_shares as f64 >= FLOOD_FACTOR * expected.max(1.0);
        // Estimates come from whole windows: a window of one share would make the rate
        // 1 / (an exponential gap), whose mean does not even exist.
        if span == 0 || (span < u64::from(self.retarget_interval_ms) && !flooded) {
            return None;
        }
        let window = Evidence {
            work: self.window_work,
            ms: span as f32,
            shares: self.window_shares as f32,
        };
        // A flood is a change too: the estimate starts from it.
        let changed = if flooded {
            self.change = Cusum::default();
            self.evidence = window;
            true
        } else {
            self.fold(window)
        };
        self.restart_window(now);
        let evidence = self.evidence;
        let rate = evidence.rate().unwrap_or(0.0);
        let cur = self.current.as_f64();
        let per_share_ms = 60_000.0 / self.shares_per_minute;
        let ideal = if rate > 0.0 {
            let ideal = rate * per_share_ms;
            // A detected change is evidence enough that the current difficulty is wrong.
            let uncertainty = if changed {
                1.0
            } else {
                (Z / f64::from(evidence.shares).max(1.0).sqrt()).exp()
            };
            let band = f64::from(self.hysteresis).max(uncertainty);
            if ideal < cur * band && ideal > cur / band {
                return None;
            }
            ideal
        } else {
            // Not one share yet: the miner cannot reach this difficulty. Quarter it per
            // window; a rate of zero gives no better estimate.
            cur / 4.0
        };
        let next = clamp(Difficulty::saturating(ideal), self.min, self.max);
        if next == self.current {
            return None;
        }
        self.current = next;
        Some(next)
    }
}

fn clamp(d: Difficulty, min: Difficulty, max: Difficulty) -> Difficulty {
    if d < min {
        min
    } else if d > max {
        max
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

    /// A vardiff under `cfg` that starts at difficulty `d` at time 0.
    fn started(cfg: VardiffConfig, d: f64) -> Vardiff {
        Vardiff::new(cfg, Difficulty::new(d).unwrap(), Timestamp::from_millis(0))
    }

    #[test]
    fn converges_to_the_target_share_rate_from_far_below_and_above() {
        // 1 diff-1 share per second: at 15 shares/min the right difficulty is 4.
        for start in [1e-3, 1e6] {
            let mut v = started(VardiffConfig::default(), start);
            simulate(&mut v, 1.0, Timestamp::from_millis(0), 3_600_000, 42);
            let d = v.difficulty().as_f64();
            assert!((2.0..8.0).contains(&d), "from {start}: {d}");
        }
    }

    #[test]
    fn a_channel_aiming_at_ten_workers_rates_settles_ten_times_easier() {
        // 1 diff-1 share per second at 150 shares/min: difficulty 0.4 rather than 4.
        let mut v = started(VardiffConfig::default(), 4.0);
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
        let mut v = started(VardiffConfig::default(), 4.0);
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
        let mut v = started(cfg, 1000.0);
        assert_eq!(v.difficulty().as_f64(), 8.0, "start clamped");
        // A flood of shares inside the interval changes nothing.
        for ms in 0..29_000 {
            assert_eq!(
                v.handle_share(Difficulty::new(8.0).unwrap(), Timestamp::from_millis(ms)),
                None
            );
        }
        // A silent miner steps down, but not below the minimum.
        let mut v = started(cfg, 8.0);
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
        let mut v = started(VardiffConfig::default(), 1.0);
        simulate(&mut v, rate, Timestamp::from_millis(0), 6 * 3_600_000, 9);
        let d = v.difficulty().as_f64();
        let ideal = rate * 4.0;
        assert!(d > ideal / 2.0 && d < ideal * 2.0, "{d} vs {ideal}");
    }

    /// Of 50 miners started at the right difficulty (4 at 1 diff-1 share a second), how many
    /// sit within 20% of the difficulty `rate` calls for after `for_ms` at that rate, having
    /// hashed 10 minutes at 1 first.
    fn converged_after_step(rate: f64, for_ms: u64) -> usize {
        (0..50)
            .filter(|&seed| {
                let mut v = started(VardiffConfig::default(), 4.0);
                let t = simulate(&mut v, 1.0, Timestamp::from_millis(0), 600_000, seed);
                simulate(&mut v, rate, t, for_ms, seed + 1_000);
                let d = v.difficulty().as_f64() / (4.0 * rate);
                (1.0 / 1.2..1.2).contains(&d)
            })
            .count()
    }

    #[test]
    fn a_miner_whose_rate_doubles_is_followed_within_minutes() {
        // At 15 shares a minute the evidence is thin: a doubling shows within a minute or
        // two, a halving (fewer shares to see it by) within a few; the estimate a change
        // restarts from holds a few dozen shares, which put about two miners in three within
        // 20%. An estimate that averaged the old rate away over its time constant instead had
        // 10 of these 50 there two minutes after a doubling and 6 five minutes after a halving.
        let up = converged_after_step(2.0, 120_000);
        assert!(up >= 24, "{up} of 50 within 20% two minutes after doubling");
        let down = converged_after_step(0.5, 300_000);
        assert!(
            down >= 18,
            "{down} of 50 within 20% five minutes after halving"
        );
    }

    #[test]
    fn a_miner_started_at_its_difficulty_stays_there() {
        // The first windows hold a handful of shares each: far too few to move a miner that
        // is where it should be.
        let moved = (0..50)
            .filter(|&seed| {
                let mut v = started(VardiffConfig::default(), 4.0);
                simulate(&mut v, 1.0, Timestamp::from_millis(0), 180_000, seed);
                v.difficulty().as_f64() != 4.0
            })
            .count();
        assert!(
            moved <= 3,
            "{moved} of 50 moved in their first three minutes"
        );
    }
}
