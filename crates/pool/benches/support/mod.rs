//! What the share benches (`sv1_share`, `sv2_share`) share: the counting allocator, the floor
//! they state their cost against, and the pool they run their sessions on.

// Each bench uses its own part of this.
#![allow(dead_code)]

use std::hint::black_box;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use events::EventSink;
use mining::vardiff::VardiffConfig;
use pool::channel::ChannelConfig;
use pool::engine::{Engine, EngineConfig, FoundBlock, PayoutMode};
use pool::job::{Job, Solution};
use pool::jobs::{Generation, JobBook, JobConfig};
use pool::stats::{PoolStats, WorkerRegistry};
use pool::store::{Durability, Store, StoreConfig};
use pool::sv1::session::{Session, Sv1Config};
use pool::template::Template;
use pool::Timestamp;
use primitives::bitcoin::{Network, ScriptBuf};
use primitives::Difficulty;

// ---------------------------------------------------------------------------------------------
// Counting allocator: allocations of the current thread, and of the whole process.

#[global_allocator]
static GLOBAL: testkit::alloc::Counting = testkit::alloc::Counting;

#[allow(unused_imports)] // each bench uses its own part
pub use testkit::alloc::{process_allocs, thread_allocs};

// ---------------------------------------------------------------------------------------------
// The floor, as `primitives/benches/floor.rs` measures it.

pub use testkit::floor::Floor;

/// Marks everything the session has to send as written, as the pool's shell does after a
/// write (no copy, and the buffer keeps its memory for the next reply).
pub fn discard_output(session: &mut Session) {
    let pending = session.poll_transmit().iter().map(|part| part.len()).sum();
    session.transmitted(pending);
}

/// A yardstick of general-purpose code: SipHash (the standard library's hasher) over 256 bytes
/// at a time, loads and integer arithmetic, no SHA extensions. On a shared host the floor (a
/// chain of SHA-NI instructions, bound by their latency) hardly slows down when another tenant
/// busies the physical core, while code like this, and like the share path's parsing and
/// accounting, does: interleaved with the samples, it tells the quiet stretches from the busy
/// ones.
pub struct Probe {
    block: [u8; 256],
}

impl Probe {
    /// Blocks hashed per sample.
    const N: u32 = 1_000;

    pub fn new() -> Probe {
        Probe {
            block: std::array::from_fn(|i| i as u8),
        }
    }

    /// One sample: ns per 256-byte block.
    pub fn measure(&self) -> f64 {
        use std::hash::Hasher as _;
        let t = Instant::now();
        let mut h = std::hash::DefaultHasher::new();
        for _ in 0..Self::N {
            h.write(black_box(&self.block));
        }
        black_box(h.finish());
        t.elapsed().as_nanos() as f64 / f64::from(Self::N)
    }
}

/// Sorts `v`: its fastest and median sample.
pub fn fastest_and_median(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2])
}

// ---------------------------------------------------------------------------------------------
// The pool.

pub const WORKER: &str = "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4.rig1";

/// An engine with statistics on, events off and a share store in a temporary directory with
/// `Durability::Off`; pool mode to a P2WPKH payout, 8 bytes of extranonce, the share
/// difficulty `Difficulty::MIN` with vardiff pinned there.
pub struct Pool {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub engine: Arc<Engine>,
    pub found: tokio::sync::mpsc::UnboundedReceiver<FoundBlock>,
    pub book: JobBook,
    pub payout: ScriptBuf,
    pub template: Arc<Template>,
}

impl Pool {
    /// The pool, with `template` published at `t0`.
    pub fn new(template: Arc<Template>, t0: u64) -> Pool {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(StoreConfig {
            durability: Durability::Off,
            ..StoreConfig::new(dir.path().join("pool.db"))
        })
        .expect("store");
        // P2WPKH: OP_0 PUSH20 <20-byte key hash>.
        let mut p2wpkh = vec![0x00, 0x14];
        p2wpkh.extend((0..20u8).map(|i| i.wrapping_mul(37).wrapping_add(11)));
        let payout = ScriptBuf::from_bytes(p2wpkh);
        let jobs = JobConfig {
            coinbase_tag: b"/stratumlab pool (solo+pps lab)/".to_vec(),
            extranonce_len: 8,
        };
        let config = EngineConfig {
            jobs: jobs.clone(),
            channel: ChannelConfig {
                vardiff: VardiffConfig {
                    min: Difficulty::MIN,
                    max: Difficulty::MIN,
                    ..VardiffConfig::default()
                },
                ..ChannelConfig::default()
            },
            payout: PayoutMode::Pool(payout.clone()),
            network: Network::Bitcoin,
            start_difficulty: Difficulty::MIN,
        };
        let stats = PoolStats::new(Timestamp::from_millis(0));
        let workers = WorkerRegistry::new(&stats);
        let (engine, found) = Engine::new(
            config,
            stats,
            workers,
            Some(store.clone()),
            EventSink::disabled(),
        );
        let mut book = JobBook::new(jobs);
        engine.publish(book.handle_template(template.clone(), Timestamp::from_millis(t0)));
        Pool {
            dir,
            store,
            engine,
            found,
            book,
            payout,
            template,
        }
    }

    /// Untimed: a new generation of the template, published at `now`.
    pub fn next_generation(&mut self, now: Timestamp) -> Arc<Generation> {
        let g = self.book.handle_template(self.template.clone(), now);
        self.engine.publish(g.clone());
        g
    }
}

/// A chunk of `mining.submit` lines, concatenated, and where each ends.
#[derive(Default)]
pub struct Sv1Lines {
    pub bytes: Vec<u8>,
    pub ends: Vec<usize>,
    /// The last request id written.
    pub request_id: u64,
}

impl Sv1Lines {
    /// Replaces the chunk with `n` distinct shares of [`WORKER`] on `job` (issued as `wire_id`
    /// on a channel with extranonce1 `en1` and version mask `mask`), each meeting
    /// `Difficulty::MIN` and not the network target. Extranonce2, nonce and version bits come
    /// from `counter`, one more per hash tried; the 1 in 65536 hashes that miss even the
    /// minimum difficulty are left out.
    pub fn write(
        &mut self,
        counter: &mut u64,
        job: &Job,
        en1: &[u8],
        wire_id: u64,
        mask: u32,
        n: usize,
    ) {
        let min = Difficulty::MIN.to_target();
        self.bytes.clear();
        self.ends.clear();
        while self.ends.len() < n {
            let c = *counter;
            *counter += 1;
            let en2 = (c as u32).to_be_bytes();
            let nonce = (c.wrapping_mul(0x9e37_79b9) >> 7) as u32;
            let bits = ((c as u32) << 13) & mask;
            let (_, hash) = job.share_hash(&Solution {
                extranonce_prefix: en1,
                extranonce: &en2,
                version: (job.version & !mask) | bits,
                ntime: job.ntime,
                nonce,
            });
            if !min.is_met_by(&hash.0) {
                continue;
            }
            assert!(!job.network_target.is_met_by(&hash.0));
            self.request_id += 1;
            write!(
                self.bytes,
                r#"{{"params": ["{WORKER}", "{wire_id:x}", "{:08x}", "{:08x}", "{nonce:08x}", "{bits:08x}"], "id": {}, "method": "mining.submit"}}"#,
                u32::from_be_bytes(en2),
                job.ntime,
                self.request_id,
            )
            .expect("write");
            self.ends.push(self.bytes.len());
        }
    }
}

/// An SV1 session on `engine` that negotiated version rolling, subscribed and authorized at
/// `t0`, its job sent and its output cleared.
pub fn sv1_session(engine: &Arc<Engine>, t0: u64) -> Session {
    let mut session = Session::new(
        engine.clone(),
        Arc::new(Sv1Config::default()),
        Timestamp::from_millis(t0),
    );
    for line in [
        r#"{"id":1,"method":"mining.configure","params":[["version-rolling"],{"version-rolling.mask":"1fffe000","version-rolling.min-bit-count":16}]}"#,
        r#"{"id":2,"method":"mining.subscribe","params":["cgminer/4.11.1"]}"#,
        &format!(r#"{{"id":3,"method":"mining.authorize","params":["{WORKER}","x"]}}"#),
    ] {
        session.handle_line(line.as_bytes(), Timestamp::from_millis(t0));
    }
    let out = String::from_utf8_lossy(&session.take_output()).into_owned();
    assert!(out.contains("mining.notify"), "no job sent: {out}");
    assert!(session.is_working());
    session
}

/// Waits until the store's writer, which commits in the background on another core, has
/// committed everything queued so far (the last chunk's shares), so that neither a backlog nor
/// the writer's SQLite work on those shares overlaps the next timed region. With durability
/// off the writer takes its queue every 100 ms or so: this waits up to that, untimed.
pub fn drain_store(store: &Store) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let last = store.stats().issued_ticket;
    while store.stats().committed_ticket < last && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
}
