//! What a stale-model run simulates: the network, the links, the devices and how they hash.

use std::time::Duration;

use fleet::Profile;
use primitives::{Difficulty, HashRate};

/// How devices turn time into shares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Hashing {
    /// Shares come at the times of a Poisson process of `shares_per_second` per device; at
    /// each, the device hashes its current job until it finds one (real SHA-256d, checked by
    /// the pool). Hashing at a constant rate with a tiny success chance per hash is such a
    /// process; drawing its times directly costs a few hashes per share instead of the hash
    /// rate that would resolve the stale window, so thousands of tips run in seconds.
    Poisson {
        /// Shares per second per device.
        shares_per_second: f64,
    },
    /// Each device hashes at `hash_rate` in slices of `slice` of virtual time, as the fleet's
    /// runner does: at each slice's end it hashes the slice's allowance on the job it holds
    /// then, and sends what it found. The slices' phase is random per device. A job reaches
    /// the hashing only at the first slice after its notify, but so does the stale window's
    /// start, so on average slices neither widen nor narrow the window (see [`super`]).
    Sliced {
        /// Each device's hash rate.
        hash_rate: HashRate,
        /// The virtual time between hashing rounds.
        slice: Duration,
    },
}

impl Hashing {
    /// Shares per second one device finds at `difficulty`.
    pub fn shares_per_second(&self, difficulty: Difficulty) -> f64 {
        match *self {
            Hashing::Poisson { shares_per_second } => shares_per_second,
            Hashing::Sliced { hash_rate, .. } => {
                hash_rate.hashes_per_sec() / (difficulty.as_f64() * pool::stats::HASHES_PER_SHARE)
            }
        }
    }

    /// The hash slice (none for Poisson shares).
    pub fn slice(&self) -> Option<Duration> {
        match *self {
            Hashing::Poisson { .. } => None,
            Hashing::Sliced { slice, .. } => Some(slice),
        }
    }
}

/// What a stale-model run simulates.
#[derive(Clone, Debug, PartialEq)]
pub struct StaleModelParams {
    /// Network block interval `B`: new tips arrive as a Poisson process with this mean gap.
    pub block_interval: Duration,
    /// WAN round trip `r` between the devices and the pool: `r/2` each way.
    pub rtt: Duration,
    /// From the pool's switch to a new tip (the moment its old jobs turn stale) until the
    /// notify leaves for the devices: building and fanning out the job. It widens the stale
    /// window as the round trip does.
    pub processing: Duration,
    /// Tips measured. Two more are simulated: the one the devices start on, and the one that
    /// ends the last measured tip's job.
    pub tips: u32,
    /// Devices, each on its own connection.
    pub devices: u32,
    /// The share difficulty the pool sets (pinned: vardiff never moves it).
    pub share_difficulty: Difficulty,
    /// How the devices find shares.
    pub hashing: Hashing,
    /// The firmware the devices imitate (handshake, version rolling).
    pub profile: Profile,
    /// Tip times, share times, slice phases and nonce starts all follow from it.
    pub seed: u64,
}

impl Default for StaleModelParams {
    /// The lab's WAN default (145 ms), a 10 s network, 2000 tips, four devices with two
    /// shares a second each (about 80 shares per tip).
    fn default() -> Self {
        StaleModelParams {
            block_interval: Duration::from_secs(10),
            rtt: Duration::from_millis(145),
            processing: Duration::ZERO,
            tips: 2000,
            devices: 4,
            share_difficulty: Difficulty::saturating(2f64.powi(-28)),
            hashing: Hashing::Poisson {
                shares_per_second: 2.0,
            },
            profile: Profile::Asic,
            seed: 1,
        }
    }
}

/// Why stale-model parameters cannot run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParamsError {
    /// The block interval is zero.
    #[error("block interval must be positive")]
    BlockInterval,
    /// Fewer than 2 tips (the number given).
    #[error("at least 2 tips are needed for an interval, got {0}")]
    Tips(u32),
    /// No device.
    #[error("at least one device is needed")]
    Devices,
    /// The share rate (given) is not a positive number.
    #[error("share rate must be a positive number, got {0}")]
    ShareRate(f64),
    /// A zero slice or a zero hash rate.
    #[error("slice must be positive and hash rate above zero")]
    Slice,
    /// Shares expected in one job's stint on one device, more than the pool's duplicate table
    /// holds (its capacity is the second number).
    #[error("{0} shares expected in one job's stint on one device; the pool's duplicate table holds {1}")]
    TooManySharesPerJob(f64, usize),
}

impl StaleModelParams {
    /// Checks the parameters before a run.
    pub fn validate(&self) -> Result<(), ParamsError> {
        if self.block_interval.is_zero() {
            return Err(ParamsError::BlockInterval);
        }
        if self.tips < 2 {
            return Err(ParamsError::Tips(self.tips));
        }
        if self.devices == 0 {
            return Err(ParamsError::Devices);
        }
        match self.hashing {
            Hashing::Poisson { shares_per_second } => {
                if !(shares_per_second.is_finite() && shares_per_second > 0.0) {
                    return Err(ParamsError::ShareRate(shares_per_second));
                }
            }
            Hashing::Sliced { hash_rate, slice } => {
                if slice.is_zero() || hash_rate.hashes_per_sec() <= 0.0 {
                    return Err(ParamsError::Slice);
                }
            }
        }
        // A job's shares must all fit the pool's duplicate table with room to spare: when it
        // is full the pool refuses shares as stale, which would count as latency here. Ten
        // mean block intervals of shares still fit (a longer gap has odds e^-10 per tip).
        let per_job = self.hashing.shares_per_second(self.share_difficulty)
            * self.block_interval.as_secs_f64()
            * 10.0;
        if per_job > super::sim::DEDUP_CAPACITY as f64 {
            return Err(ParamsError::TooManySharesPerJob(
                per_job,
                super::sim::DEDUP_CAPACITY,
            ));
        }
        Ok(())
    }

    /// The stale window `W = r + processing`.
    pub fn stale_window(&self) -> Duration {
        self.rtt + self.processing
    }

    /// From a tip to its job reaching the devices: the pool's processing and one way.
    pub fn job_delay(&self) -> Duration {
        self.processing + self.rtt / 2
    }
}
