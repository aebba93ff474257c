//! The discrete-event simulation: one pool engine with an SV1 session per connection, N SV1
//! devices, a link of one-way delay `r/2` each way between every device and its session, and
//! the network's tips. Every byte the devices and the pool exchange is produced and consumed
//! by their sans-IO cores (`fleet::Sv1Device`, `pool::sv1::Session`), exactly as in the real
//! shells; only the clock and the wires are simulated.

use std::sync::Arc;
use std::time::Duration;

use events::EventSink;
use fleet::{CloseReason, Sv1Device, Sv1Shared};
use mining::vardiff::VardiffConfig;
use pool::channel::ChannelConfig;
use pool::engine::{Engine, EngineConfig, PayoutMode};
use pool::jobs::{Generation, JobBook, JobConfig};
use pool::stats::{PoolStats, WorkerRegistry};
use pool::sv1::{Close, LineKind, Session};
use primitives::bitcoin::{Network, ScriptBuf};
use primitives::Difficulty;
use primitives::Timestamp;
use rand_chacha::ChaCha12Rng;

use super::clock::EventQueue;
use super::ledger::Ledger;
use super::network;
use super::params::{Hashing, ParamsError, StaleModelParams};

/// Shares a pool channel remembers for duplicate detection (see [`StaleModelParams::validate`]).
pub(crate) const DEDUP_CAPACITY: usize = 1 << 16;

/// Why a stale-model run stopped.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The parameters cannot run.
    #[error(transparent)]
    Params(#[from] ParamsError),
    /// The device settings are invalid.
    #[error("device settings: {0}")]
    Device(#[from] fleet::sv1_device::ConfigError),
    /// The pool could not build a job.
    #[error("the pool cannot build a job: {0}")]
    Job(String),
    /// A device closed its connection.
    #[error("device {device} closed its connection: {reason}")]
    DeviceClosed {
        /// The device's index.
        device: usize,
        /// Why it closed.
        reason: CloseReason,
    },
    /// The pool closed a device's connection.
    #[error("the pool closed device {device}'s connection: {reason:?}")]
    PoolClosed {
        /// The device's index.
        device: usize,
        /// Why it closed.
        reason: Close,
    },
    /// A device hit a protocol error.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A device found no share in its allowance of hashes.
    #[error("device {device} found no share in {hashes} hashes")]
    NoShare {
        /// The device's index.
        device: usize,
        /// Hashes it tried.
        hashes: u64,
    },
    /// Shares of measured tips (this many) never got a verdict.
    #[error("{0} shares of measured tips never got a verdict")]
    Unanswered(usize),
}

enum Event {
    /// The network finds tip `k`: the pool adopts its template (old jobs are stale from now).
    Tip(u32),
    /// The pool's processing is done: the notify goes to every connection.
    Fanout(Arc<Generation>),
    ToPool {
        device: usize,
        bytes: Vec<u8>,
    },
    ToDevice {
        device: usize,
        bytes: Vec<u8>,
    },
    /// A Poisson share time of a device.
    Share(usize),
    /// The end of a device's hash slice.
    Slice(usize),
    /// A device's timer (handshake or reply timeout).
    Deadline(usize),
}

/// One device, its connection's pool session, and its share clock.
struct Rig {
    core: Sv1Device,
    session: Session,
    rng: ChaCha12Rng,
    /// Sliced hashing: since when the device hashes without a break, and hashes done since.
    hashing_since: Timestamp,
    hashed: u64,
    /// The earliest timer event scheduled and not yet fired.
    deadline: Option<Timestamp>,
}

/// What a finished run counted (assembled into a `StaleModelResult` by the caller).
pub struct Outcome {
    /// Share verdicts, by tip and as the devices saw them.
    pub ledger: Ledger,
    /// Header hashes the devices computed.
    pub hashes: u64,
    /// Events processed.
    pub events: u64,
    /// Virtual time at the end.
    pub end: Timestamp,
}

/// The stale-model simulator: devices, pool and network in virtual time.
pub struct Sim {
    params: StaleModelParams,
    one_way: Duration,
    tip_times: Vec<Timestamp>,
    /// When the last measured job's stint ends on every device: no share is found after it.
    end: Timestamp,
    engine: Arc<Engine>,
    node: network::Node,
    book: JobBook,
    payout: ScriptBuf,
    rigs: Vec<Rig>,
    ledger: Ledger,
    queue: EventQueue<Event>,
    hashes: u64,
}

impl Sim {
    /// A simulator for `params`, its tip times drawn from the seed.
    pub fn new(params: StaleModelParams) -> Result<Sim, SimError> {
        params.validate()?;
        let p = &params;
        // Tip 0 is the devices' first work, tips 1..=n are measured, tip n+1 ends tip n's job.
        let tip_times = network::tip_times(p.seed, p.block_interval, p.tips + 2);
        let one_way = p.rtt / 2;
        let end = tip_times[p.tips as usize + 1] + p.processing + one_way;
        let ledger = Ledger::new(tip_times.clone(), (1, p.tips));

        let payout = pool_script();
        let stats = PoolStats::new(Timestamp::ZERO);
        let workers = WorkerRegistry::new(&stats);
        let config = EngineConfig {
            jobs: JobConfig::default(),
            channel: ChannelConfig {
                dedup_capacity: DEDUP_CAPACITY,
                vardiff: pinned(p.share_difficulty),
                ..ChannelConfig::default()
            },
            payout: PayoutMode::Pool(payout.clone()),
            network: Network::Regtest,
            start_difficulty: p.share_difficulty,
        };
        // Found blocks would go to the returned queue; none can be found (the network target is
        // mainnet-like), so it is dropped.
        let (engine, _) = Engine::new(config, stats, workers, None, EventSink::disabled());
        let sv1 = Arc::new(pool::sv1::Sv1Config::default());
        let shared = Sv1Shared::new(fleet::Sv1Config {
            profile: p.profile,
            worker_prefix: "lab.rig".into(),
            ..fleet::Sv1Config::default()
        })?;
        let rigs = (0..p.devices)
            .map(|i| Rig {
                core: Sv1Device::new(shared.clone(), u64::from(i), i, p.seed, Timestamp::ZERO),
                session: Session::new(engine.clone(), sv1.clone(), Timestamp::ZERO),
                rng: network::stream(p.seed, "device", u64::from(i)),
                hashing_since: Timestamp::ZERO,
                hashed: 0,
                deadline: None,
            })
            .collect();
        Ok(Sim {
            one_way,
            tip_times,
            end,
            engine,
            node: network::Node::new(p.seed),
            book: JobBook::new(JobConfig::default()),
            payout,
            rigs,
            ledger,
            queue: EventQueue::new(),
            hashes: 0,
            params,
        })
    }

    /// Runs until every share found on a measured tip's job has its verdict.
    pub fn run(mut self) -> Result<Outcome, SimError> {
        self.queue.at(Timestamp::ZERO, Event::Tip(0));
        for i in 0..self.rigs.len() {
            // Connected at once; the handshake crosses the links like any other line.
            self.rigs[i].core.handle_connected(Timestamp::ZERO);
            let (at, first) = match self.params.hashing {
                Hashing::Poisson { .. } => (self.share_gap(i), Event::Share(i)),
                Hashing::Sliced { slice, .. } => {
                    let phase = slice.mul_f64(network::uniform(&mut self.rigs[i].rng));
                    (phase, Event::Slice(i))
                }
            };
            self.queue.at(Timestamp::ZERO + at, first);
            self.device_io(i, Timestamp::ZERO)?;
        }
        while let Some((now, event)) = self.queue.pop() {
            match event {
                Event::Tip(k) => self.tip(k, now)?,
                Event::Fanout(g) => {
                    for i in 0..self.rigs.len() {
                        self.rigs[i].session.handle_generation(Some(&g), now);
                        self.pool_io(i)?;
                    }
                }
                Event::ToPool { device, bytes } => self.pool_receives(device, &bytes, now)?,
                Event::ToDevice { device, bytes } => {
                    for line in lines(&bytes) {
                        self.rigs[device]
                            .core
                            .handle_line(line, now, &mut self.ledger);
                    }
                    self.device_io(device, now)?;
                }
                Event::Share(i) => {
                    if now < self.end {
                        self.find_share(i, now)?;
                        self.device_io(i, now)?;
                        let gap = self.share_gap(i);
                        self.queue.after(gap, Event::Share(i));
                    }
                }
                Event::Slice(i) => {
                    // From the end of the last measured job on, devices hash tip n+1's job.
                    if now < self.end {
                        self.slice(i, now);
                        self.device_io(i, now)?;
                        if let Some(slice) = self.params.hashing.slice() {
                            self.queue.after(slice, Event::Slice(i));
                        }
                    }
                }
                Event::Deadline(i) => {
                    self.rigs[i].deadline = None;
                    self.rigs[i].core.handle_timeout(now, &mut self.ledger);
                    self.device_io(i, now)?;
                }
            }
        }
        let open = self.ledger.shares_in_flight();
        if open > 0 {
            return Err(SimError::Unanswered(open));
        }
        tracing::debug!(
            tips = self.params.tips,
            events = self.queue.processed(),
            hashes = self.hashes,
            virtual_s = self.end.since(Timestamp::ZERO).as_secs_f64(),
            "stale model run done"
        );
        Ok(Outcome {
            events: self.queue.processed(),
            ledger: self.ledger,
            hashes: self.hashes,
            end: self.end,
        })
    }

    fn tip(&mut self, k: u32, now: Timestamp) -> Result<(), SimError> {
        let template = self.node.template(k, now);
        let g = self.book.handle_template(Arc::new(template), now);
        let job = g
            .job(&self.payout)
            .map_err(|e| SimError::Job(e.to_string()))?;
        self.ledger.job(job.id, k);
        self.engine.publish(g.clone());
        self.queue.after(self.params.processing, Event::Fanout(g));
        if let Some(&next) = self.tip_times.get(k as usize + 1) {
            self.queue.at(next, Event::Tip(k + 1));
        }
        Ok(())
    }

    fn pool_receives(&mut self, i: usize, bytes: &[u8], now: Timestamp) -> Result<(), SimError> {
        for line in lines(bytes) {
            let kind = self.rigs[i].session.handle_line(line, now);
            if let LineKind::Share(verdict) = kind {
                let Some(submit) = sv1::parse_submit(line) else {
                    let line = String::from_utf8_lossy(line).into_owned();
                    return Err(SimError::Protocol(format!("unreadable submit: {line}")));
                };
                self.ledger.pool_verdict(submit.job_id, verdict);
            }
        }
        self.pool_io(i)
    }

    /// Sends what the pool's session wrote down the link to its device.
    fn pool_io(&mut self, i: usize) -> Result<(), SimError> {
        let session = &mut self.rigs[i].session;
        if let Some(reason) = session.wants_close() {
            return Err(SimError::PoolClosed { device: i, reason });
        }
        let bytes = session.take_output();
        if !bytes.is_empty() {
            self.queue
                .after(self.one_way, Event::ToDevice { device: i, bytes });
        }
        Ok(())
    }

    /// Sends what the device wants sent, and arms its timer.
    fn device_io(&mut self, i: usize, now: Timestamp) -> Result<(), SimError> {
        let rig = &mut self.rigs[i];
        let mut bytes = Vec::new();
        rig.core.poll_transmit(&mut bytes, now, &mut self.ledger);
        if !bytes.is_empty() {
            self.queue
                .after(self.one_way, Event::ToPool { device: i, bytes });
        }
        if let Some(reason) = rig.core.close_requested() {
            return Err(SimError::DeviceClosed { device: i, reason });
        }
        if let Some(e) = self.ledger.protocol_errors.first() {
            return Err(SimError::Protocol(e.clone()));
        }
        if let Some(at) = rig.core.poll_timeout() {
            if rig.deadline.is_none_or(|armed| at < armed) {
                rig.deadline = Some(at);
                self.queue.at(at, Event::Deadline(i));
            }
        }
        Ok(())
    }

    /// Poisson shares: the device hashes its current job until it finds one share.
    fn find_share(&mut self, i: usize, now: Timestamp) -> Result<(), SimError> {
        let core = &mut self.rigs[i].core;
        if !core.can_hash() {
            return Ok(());
        }
        // A thousand times the expected hashes: not finding one means the targets disagree.
        let expected = self.params.share_difficulty.as_f64() * pool::stats::HASHES_PER_SHARE;
        let limit = (expected * 1000.0).max(1e6) as u64;
        let mut hashes = 0u64;
        loop {
            let out = core.hash(now, 1, &mut self.ledger);
            hashes += out.hashes;
            if out.shares > 0 {
                break;
            }
            if out.hashes == 0 || hashes >= limit {
                self.hashes += hashes;
                return Err(SimError::NoShare { device: i, hashes });
            }
        }
        self.hashes += hashes;
        Ok(())
    }

    /// Sliced hashing: the device hashes the allowance of its hash rate since its last slice,
    /// on the job it holds now, as the fleet's runner does.
    fn slice(&mut self, i: usize, t: Timestamp) {
        let Hashing::Sliced { hash_rate, .. } = self.params.hashing else {
            return;
        };
        let rig = &mut self.rigs[i];
        if !rig.core.can_hash() {
            // Idle (no job yet): nothing banked.
            rig.hashing_since = t;
            rig.hashed = 0;
            return;
        }
        // Counted from the start of the stretch, not per slice, so rounding never adds up.
        let due = (hash_rate.hashes_per_sec() * t.since(rig.hashing_since).as_secs_f64()) as u64;
        if due > rig.hashed {
            let out = rig.core.hash(t, due - rig.hashed, &mut self.ledger);
            rig.hashed += out.hashes;
            self.hashes += out.hashes;
        }
    }

    fn share_gap(&mut self, i: usize) -> Duration {
        let rate = self
            .params
            .hashing
            .shares_per_second(self.params.share_difficulty);
        let mean = Duration::from_secs_f64(1.0 / rate);
        network::exponential(&mut self.rigs[i].rng, mean)
    }
}

/// A vardiff that never moves: the share difficulty is a parameter of the model.
fn pinned(d: Difficulty) -> VardiffConfig {
    VardiffConfig {
        min: d,
        max: d,
        retarget_interval_ms: u64::MAX / 2,
        ..VardiffConfig::default()
    }
}

/// The pool's own payout script (pool mode: miners authorize with any name).
fn pool_script() -> ScriptBuf {
    let mut s = vec![0x00, 0x14];
    s.extend_from_slice(&[0x5a; 20]);
    ScriptBuf::from_bytes(s)
}

/// The non-empty lines of a chunk of SV1 bytes.
fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
}
