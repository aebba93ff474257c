//! `sv1_share/empty_branch`, `sv1_share/branch12`: the whole path of one accepted share on one
//! core, from the raw `mining.submit` line to the serialized reply bytes, accounting included
//! (issue 4). `floor/compress256` is measured in the same binary, so the cost is stated as a
//! multiple of the naive SHA-256 work of the share.
//!
//! Setup: an [`Engine`] with statistics on, events off and a share store in a temporary
//! directory with `Durability::Off`; one SV1 [`Session`] that negotiated version rolling,
//! subscribed (extranonce1 4 bytes, extranonce2 4 bytes) and authorized. Pool mode: the coinbase
//! has a BIP34 height, a 32-byte tag, the 8-byte extranonce, a P2WPKH payout and the witness
//! commitment (175 bytes). The share difficulty is `Difficulty::MIN` with vardiff pinned there
//! (so nearly every hash is a share), the network target is mainnet-like (no blocks).
//!
//! Every timed iteration submits a distinct share (extranonce2 and nonce from a counter, over the
//! whole run) that is accepted, with duplicate detection on: the lines are written beforehand,
//! and the few hashes that miss even the minimum difficulty (1 in 65536) are left out then. Every
//! `CHUNK` shares, outside the timed region, a new template generation is published and sent to
//! the session, so the channel's duplicate table stays in its steady state (eight jobs of
//! remembered shares, the oldest expired with its job at each rotation) and never hits its
//! capacity inside the timed region.
//!
//! After criterion's figures, a summary measured in the same process (the floor and both share
//! paths interleaved over several rounds, median ratio) gives ns/share, allocations per share on
//! the share thread (a counting global allocator; the store's writer thread is counted apart) and
//! the ratio to the floor. Run with `--test` it checks acceptance and zero allocations instead.
//!
//! ```sh
//! cargo bench -p pool --bench sv1_share
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use events::{EventSink, Verdict};
use pool::channel::ChannelConfig;
use pool::engine::{Engine, EngineConfig, PayoutMode};
use pool::job::{Job, Solution};
use pool::jobs::{JobBook, JobConfig};
use pool::stats::{PoolStats, WorkerRegistry};
use pool::store::{Durability, Store, StoreConfig};
use pool::sv1::session::{LineKind, Session, Sv1Config};
use pool::template::{Template, TemplateTx};
use pool::vardiff::VardiffConfig;
use pool::Millis;
use primitives::bitcoin::{Amount, Network, ScriptBuf};
use primitives::{sha256d, CompactTarget, Difficulty, Hash256, Target};
use sha2::digest::generic_array::GenericArray;

// ---------------------------------------------------------------------------------------------
// Counting allocator: allocations of the current thread, and of the whole process.

struct Counting;

thread_local! {
    static THREAD_ALLOCS: Cell<u64> = const { Cell::new(0) };
}
static PROCESS_ALLOCS: AtomicU64 = AtomicU64::new(0);

#[inline]
fn count() {
    PROCESS_ALLOCS.fetch_add(1, Ordering::Relaxed);
    let _ = THREAD_ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `alloc`'s contract, which we pass through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn thread_allocs() -> u64 {
    THREAD_ALLOCS.with(Cell::get)
}

fn process_allocs() -> u64 {
    PROCESS_ALLOCS.load(Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------------------
// The rig: engine, store, session, and the lines of the next chunk of shares.

/// Shares per job. The channel remembers 8 jobs and 16384 shares (the defaults): 8 jobs of at
/// most 2000 shares never fill it, so only job rotation (untimed) expires shares.
const CHUNK: usize = 2000;
/// Shares per timed sample in the summary.
const SAMPLE: usize = 250;

const WORKER: &str = "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4.rig1";
/// Mainnet-like nBits: no share is a block.
const NETWORK_BITS: u32 = 0x1702_3a04;

struct Rig {
    _dir: tempfile::TempDir,
    store: Store,
    engine: Arc<Engine>,
    _found: tokio::sync::mpsc::UnboundedReceiver<pool::engine::FoundBlock>,
    book: JobBook,
    template: Arc<Template>,
    payout: ScriptBuf,
    session: Session,
    extranonce1: Vec<u8>,
    share_target: Target,
    /// Shares generated so far (extranonce2 and nonce derive from it), and the request id.
    counter: u64,
    request_id: u64,
    /// The session's clock: milliseconds at `t0`, one more every 8 shares.
    t0: u64,
    /// The chunk's lines, concatenated, and where each ends.
    lines: Vec<u8>,
    ends: Vec<usize>,
    job: Option<Arc<Job>>,
    /// Naive SHA-256 compressions of one share of this rig (see [`naive_compressions`]).
    naive: u32,
    coinbase_len: usize,
}

fn realistic_template(transactions: usize) -> Arc<Template> {
    let txs: Vec<TemplateTx> = (0..transactions)
        .map(|i| TemplateTx {
            data: vec![i as u8],
            txid: sha256d(&(i as u64).to_le_bytes()),
            fee: Amount::from_sat(1_000),
            weight: 400,
        })
        .collect();
    Arc::new(Template {
        height: 903_217,
        prev_hash: Hash256::from_display_hex(
            "00000000000000000001b3a1d4d5e2c4a1b5f1d0c2e3a4b5c6d7e8f9a0b1c2d3",
        )
        .expect("hex"),
        version: 0x2000_0000,
        bits: CompactTarget(NETWORK_BITS),
        curtime: 1_750_000_000,
        mintime: 1_749_998_000,
        coinbase_value: Amount::from_sat(312_500_000 + 1_000 * transactions as u64),
        witness_commitment: Some(Hash256([0x5c; 32])),
        transactions: txs.into(),
        longpoll_id: None,
    })
}

/// The naive SHA-256 work of one share, in compressions: the coinbase's first hash (64-byte
/// blocks of its length plus 9 bytes of padding), its second hash (1), three per branch level
/// (a 64-byte message: 2, plus the second hash), and the header (2 + 1).
fn naive_compressions(coinbase_len: usize, branch_len: usize) -> u32 {
    let first = (coinbase_len + 9).div_ceil(64) as u32;
    first + 1 + 3 * branch_len as u32 + 3
}

impl Rig {
    fn new(transactions: usize) -> Rig {
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
        let stats = PoolStats::new(Millis(0));
        let workers = WorkerRegistry::new(&stats);
        let (engine, found) = Engine::new(
            config,
            stats,
            workers,
            if std::env::var_os("SV1_NO_STORE").is_some() {
                None
            } else {
                Some(store.clone())
            },
            EventSink::disabled(),
        );
        let template = realistic_template(transactions);
        let mut book = JobBook::new(jobs);
        let t0 = 1_000;
        engine.publish(book.on_template(template.clone(), Millis(t0)));
        let mut session = Session::new(engine.clone(), Arc::new(Sv1Config::default()), Millis(t0));
        for line in [
            r#"{"id":1,"method":"mining.configure","params":[["version-rolling"],{"version-rolling.mask":"1fffe000","version-rolling.min-bit-count":16}]}"#,
            r#"{"id":2,"method":"mining.subscribe","params":["cgminer/4.11.1"]}"#,
            &format!(r#"{{"id":3,"method":"mining.authorize","params":["{WORKER}","x"]}}"#),
        ] {
            session.handle_line(line.as_bytes(), Millis(t0));
        }
        let out = String::from_utf8_lossy(session.output()).into_owned();
        assert!(out.contains("mining.notify"), "no job sent: {out}");
        assert!(session.is_working());
        session.output().clear();
        let extranonce1 = session.channel().extranonce_prefix().to_vec();
        assert_eq!(extranonce1.len(), 4);
        assert_eq!(session.channel().extranonce_len(), 4);
        let job = session.channel().latest_job().expect("job").job.clone();
        let coinbase_len = job.coinbase.prefix.len() + 8 + job.coinbase.suffix.len();
        assert!(coinbase_len >= 150, "coinbase of {coinbase_len} bytes");
        let naive = naive_compressions(coinbase_len, job.merkle_branch.len());
        Rig {
            _dir: dir,
            store,
            engine,
            _found: found,
            book,
            template,
            payout,
            session,
            extranonce1,
            share_target: Difficulty::MIN.to_target(),
            counter: 0,
            request_id: 100,
            t0,
            lines: Vec::new(),
            ends: Vec::new(),
            job: None,
            naive,
            coinbase_len,
        }
    }

    fn branch_len(&self) -> usize {
        self.session
            .channel()
            .latest_job()
            .map_or(0, |i| i.job.merkle_branch.len())
    }

    fn now(&self) -> u64 {
        self.t0 + self.counter / 8
    }

    /// Untimed: a new generation of the template goes to the session (the oldest of its 8 jobs
    /// expires with its remembered shares), and `n` distinct valid share lines are written for
    /// it. Also lets the store's writer catch up, so that the queue never fills.
    fn prepare(&mut self, n: usize) {
        let now = Millis(self.now());
        let g = self.book.on_template(self.template.clone(), now);
        self.engine.publish(g.clone());
        self.session.on_generation(Some(&g), now);
        self.session.output().clear();
        let issued = self.session.channel().latest_job().expect("job");
        let job = g.job(&self.payout).expect("job");
        assert!(Arc::ptr_eq(&job, &issued.job));
        let wire_id = issued.wire_id;
        let mask = self.session.channel().version_mask();
        assert_eq!(mask, 0x1fff_e000);
        self.lines.clear();
        self.ends.clear();
        while self.ends.len() < n {
            let c = self.counter;
            self.counter += 1;
            let extranonce2 = (c as u32).to_be_bytes();
            let nonce = (c.wrapping_mul(0x9e37_79b9) >> 7) as u32;
            let version_bits = ((c as u32) << 13) & mask;
            let version = (job.version & !mask) | version_bits;
            let (_, hash) = job.share_hash(&Solution {
                extranonce_prefix: &self.extranonce1,
                extranonce: &extranonce2,
                version,
                ntime: job.ntime,
                nonce,
            });
            if !self.share_target.is_met_by(&hash.0) {
                continue; // 1 in 65536 hashes misses even the minimum difficulty
            }
            assert!(!job.network_target.is_met_by(&hash.0));
            self.request_id += 1;
            write!(
                self.lines,
                r#"{{"params": ["{WORKER}", "{wire_id:x}", "{:08x}", "{:08x}", "{nonce:08x}", "{version_bits:08x}"], "id": {}, "method": "mining.submit"}}"#,
                u32::from_be_bytes(extranonce2),
                job.ntime,
                self.request_id,
            )
            .expect("write");
            self.ends.push(self.lines.len());
        }
        self.job = Some(job);
        // The store's writer commits in the background, on another core; let it finish the
        // last chunk first, so that it does not contend with this one for the queue's cache
        // lines (the cost measured is one share's on one core).
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.store.stats().queue_len > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Timed: prepared lines `from..to` through the session, the reply taken. Returns how many
    /// were accepted.
    #[inline(never)]
    fn run(&mut self, from: usize, to: usize) -> usize {
        let mut accepted = 0;
        let mut start = if from == 0 { 0 } else { self.ends[from - 1] };
        let base = self.now() - (self.ends.len() as u64) / 8;
        for k in from..to {
            let end = self.ends[k];
            let line = &self.lines[start..end];
            start = end;
            let now = Millis(base + (k as u64 >> 3));
            let kind = self.session.handle_line(black_box(line), now);
            accepted += (kind == LineKind::Share(Verdict::Accepted)) as usize;
            let _ = black_box(self.session.take_pending_ticket());
            let out = self.session.output();
            black_box(out.as_slice());
            out.clear();
        }
        accepted
    }

    /// Runs `shares` shares; the time of the timed parts, and the share thread's allocations
    /// in them.
    fn measure(&mut self, shares: u64) -> (Duration, u64) {
        self.measure_samples(shares, None)
    }

    /// [`Rig::measure`], also timing every [`SAMPLE`] shares apart into `samples` (ns/share).
    fn measure_samples(
        &mut self,
        shares: u64,
        mut samples: Option<&mut Vec<f64>>,
    ) -> (Duration, u64) {
        let mut left = shares;
        let mut total = Duration::ZERO;
        let mut allocs = 0;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            self.prepare(n);
            let a0 = thread_allocs();
            let mut accepted = 0;
            let mut from = 0;
            while from < n {
                let to = (from + SAMPLE).min(n);
                let t = Instant::now();
                accepted += self.run(from, to);
                let d = t.elapsed();
                total += d;
                if let Some(v) = samples.as_deref_mut() {
                    v.push(d.as_nanos() as f64 / (to - from) as f64);
                }
                from = to;
            }
            allocs += thread_allocs() - a0;
            assert_eq!(accepted, n, "every share must be accepted");
            left -= n as u64;
        }
        (total, allocs)
    }
}

// ---------------------------------------------------------------------------------------------
// The floor, as `primitives/benches/floor.rs` measures it.

struct Floor {
    state: [u32; 8],
    block: GenericArray<u8, sha2::digest::consts::U64>,
}

impl Floor {
    fn new() -> Floor {
        Floor {
            state: [
                0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
                0x5be0cd19,
            ],
            block: GenericArray::clone_from_slice(&[0x5au8; 64]),
        }
    }

    #[inline(always)]
    fn once(&mut self) {
        sha2::compress256(
            black_box(&mut self.state),
            std::slice::from_ref(black_box(&self.block)),
        );
    }

    fn measure(&mut self, n: u64) -> Duration {
        let t = Instant::now();
        for _ in 0..n {
            self.once();
        }
        t.elapsed()
    }
}

// ---------------------------------------------------------------------------------------------

fn criterion_benches(c: &mut Criterion, empty: &mut Rig, branch12: &mut Rig) {
    let mut g = c.benchmark_group("floor");
    let mut floor = Floor::new();
    g.bench_function("compress256", |b| b.iter(|| floor.once()));
    g.finish();

    let mut g = c.benchmark_group("sv1_share");
    g.bench_function("empty_branch", |b| {
        b.iter_custom(|iters| empty.measure(iters).0)
    });
    g.bench_function("branch12", |b| {
        b.iter_custom(|iters| branch12.measure(iters).0)
    });
    g.finish();
}

/// The floor and both paths interleaved, sample by sample: one sample is one chunk of shares
/// (2000, a fresh job each) or 20,000 compressions. On a shared machine other processes take
/// the core now and then, so both the fastest sample (the cost without interference) and the
/// median are given; ratios are to the floor's sample of the same statistic.
fn summary(empty: &mut Rig, branch12: &mut Rig) {
    const CHUNKS: usize = 40;
    const FLOOR_N: u64 = 5_000;
    let mut floor = Floor::new();
    let mut floor_ns = Vec::new();
    // Room for every sample up front: the share thread allocates nothing while it counts.
    let samples = CHUNKS * CHUNK / SAMPLE;
    let mut ns = [Vec::with_capacity(samples), Vec::with_capacity(samples)];
    let mut allocs = [0u64; 2];
    let mut writer_allocs = [0u64; 2];
    let mut total = [0u64; 2];
    for _ in 0..CHUNKS {
        for (i, rig) in [&mut *empty, &mut *branch12].into_iter().enumerate() {
            for _ in 0..CHUNK / SAMPLE {
                floor_ns.push(floor.measure(FLOOR_N).as_nanos() as f64 / FLOOR_N as f64);
            }
            let p0 = process_allocs();
            let t0 = thread_allocs();
            let (_, a) = rig.measure_samples(CHUNK as u64, Some(&mut ns[i]));
            // Everything the other threads (the store's writer) allocated meanwhile.
            writer_allocs[i] += (process_allocs() - p0) - (thread_allocs() - t0);
            allocs[i] += a;
            total[i] += CHUNK as u64;
        }
    }
    let sorted = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[0], v[v.len() / 2])
    };
    let (f_min, f_med) = sorted(&mut floor_ns);
    println!();
    println!(
        "sv1_share summary: {} samples per path of {SAMPLE} shares (a fresh job every {CHUNK}), \
         interleaved with samples of {FLOOR_N} compressions",
        CHUNKS * CHUNK / SAMPLE
    );
    println!("  floor/compress256: {f_min:.2} ns fastest, {f_med:.2} ns median");
    for (i, rig) in [&*empty, &*branch12].into_iter().enumerate() {
        let name = ["empty_branch", "branch12"][i];
        let goal = [1.5, 1.15][i];
        let (min, med) = sorted(&mut ns[i]);
        let naive = rig.naive as f64;
        let (r_min, r_med) = (min / (naive * f_min), med / (naive * f_med));
        println!(
            "  sv1_share/{name}: {min:.1} ns/share fastest ({r_min:.3}x floor), {med:.1} median \
             ({r_med:.3}x); {:.3} allocs/share ({} in all; store writer thread: {:.2}/share); naive work {} \
             compressions (coinbase {} bytes, branch {}); goal {goal}x: {}",
            allocs[i] as f64 / total[i] as f64,
            allocs[i],
            writer_allocs[i] as f64 / total[i] as f64,
            rig.naive,
            rig.coinbase_len,
            rig.branch_len(),
            if r_med <= goal && allocs[i] == 0 {
                "met"
            } else if r_min <= goal && allocs[i] == 0 {
                "met by the fastest samples"
            } else {
                "NOT met"
            },
        );
    }
    let stats = empty.store.stats();
    println!(
        "  store (empty_branch rig): {} shares written, {} refused (queue full)",
        stats.shares_written, stats.queue_full
    );
}

/// `--test`: every share accepted, and no allocation on the share thread once warm.
fn check(empty: &mut Rig, branch12: &mut Rig) {
    for (name, rig) in [("empty_branch", empty), ("branch12", branch12)] {
        // Three rotations fill the channel's tables to their working size; then count.
        rig.measure(3 * CHUNK as u64);
        let (_, allocs) = rig.measure(6 * CHUNK as u64);
        assert_eq!(
            allocs,
            0,
            "sv1_share/{name}: {allocs} allocations in {} shares",
            6 * CHUNK
        );
        assert_eq!(rig.store.stats().queue_full, 0);
        println!(
            "sv1_share/{name}: {} shares accepted, 0 allocations",
            6 * CHUNK
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |a: &str| args.iter().any(|x| x == a);
    if has("--share-count") {
        let mut rig = Rig::new(0);
        rig.measure(4 * CHUNK as u64);
        rig.measure(10 * CHUNK as u64);
        return;
    }
    if has("--parse-count") {
        let line = format!(
            r#"{{"params": ["{WORKER}", "1a2b", "0000ab12", "684f1a3c", "1a2b3c4d", "00002000"], "id": 4123, "method": "mining.submit"}}"#
        );
        for _ in 0..100_000 {
            black_box(parse_only(black_box(line.as_bytes())));
        }
        return;
    }
    if has("--parse") {
        let line = format!(
            r#"{{"params": ["{WORKER}", "1a2b", "0000ab12", "684f1a3c", "1a2b3c4d", "00002000"], "id": 4123, "method": "mining.submit"}}"#
        );
        let t = min_ns(3000, 5000, |n| {
            for _ in 0..n {
                black_box(parse_only(black_box(line.as_bytes())));
            }
        });
        println!("parse {t:.1} ns");
        let t = min_ns(3000, 5000, |n| {
            for _ in 0..n {
                let mut b = [0u8; 32];
                black_box(primitives::hex::decode_into(black_box("0000ab12"), &mut b[..4]).ok());
                black_box(b);
            }
        });
        println!("decode en2 {t:.1} ns");
        let t = min_ns(3000, 5000, |n| {
            for _ in 0..n {
                black_box(black_box("4123").parse::<u64>().unwrap_or(0));
            }
        });
        println!("id parse {t:.1} ns");
        let t = min_ns(3000, 5000, |n| {
            for _ in 0..n {
                black_box(u64::from_str_radix(black_box("1a2b"), 16).unwrap_or(u64::MAX));
            }
        });
        println!("job id parse {t:.1} ns");
        let mut out = Vec::with_capacity(256);
        let t = min_ns(3000, 5000, |n| {
            for _ in 0..n {
                out.clear();
                sv1::write::reply_bool(&mut out, black_box("4123"), true);
                black_box(&out);
            }
        });
        println!("reply {t:.1} ns");
        return;
    }
    if has("--layers") {
        layers();
        return;
    }
    if has("--chain") {
        experiment();
        return;
    }
    let mut empty = Rig::new(0);
    let mut branch12 = Rig::new(4095);
    assert_eq!(empty.branch_len(), 0);
    assert_eq!(branch12.branch_len(), 12);
    // Warm-up: every share accepted (asserted by `measure`), tables at their working size.
    empty.measure(10 * CHUNK as u64);
    branch12.measure(10 * CHUNK as u64);

    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c, &mut empty, &mut branch12);
    c.final_summary();

    if has("--test") {
        check(&mut empty, &mut branch12);
    } else if has("--bench") && !has("--profile-time") && !has("--list") {
        summary(&mut empty, &mut branch12);
    }
}

#[inline(never)]
fn parse_only(line: &[u8]) -> Option<sv1::FastSubmit<'_>> {
    sv1::parse_submit(line)
}

#[allow(dead_code)]
fn min_ns(reps: usize, n: u64, mut f: impl FnMut(u64)) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        f(n);
        best = best.min(t.elapsed().as_nanos() as f64 / n as f64);
    }
    best
}

#[allow(dead_code)]
fn experiment() {
    use primitives::{merkle_root_from_branch, merkle_step};
    let branch: Vec<Hash256> = (0..12u64).map(|i| sha256d(&i.to_le_bytes())).collect();
    let mut floor = Floor::new();
    for _ in 0..5 {
        let f = min_ns(200, 20_000, |n| {
            for _ in 0..n {
                floor.once()
            }
        });
        let mut acc = Hash256([1; 32]);
        let chain = min_ns(200, 500, |n| {
            for _ in 0..n {
                acc = merkle_root_from_branch(black_box(acc), &branch);
            }
        }) / 12.0;
        let indep = min_ns(200, 6000, |n| {
            for _ in 0..n {
                black_box(merkle_step(black_box(&branch[0]), black_box(&branch[1])));
            }
        });
        let mut h = [7u8; 80];
        let hdr = min_ns(200, 6000, |n| {
            for _ in 0..n {
                let x = primitives::hash::sha256d_header(&h);
                h[..32].copy_from_slice(&x.0);
            }
        });
        let line = format!(
            r#"{{"params": ["{WORKER}", "1a2b", "0000ab12", "684f1a3c", "1a2b3c4d", "00002000"], "id": 4123, "method": "mining.submit"}}"#
        );
        let parse = min_ns(200, 5000, |n| {
            for _ in 0..n {
                black_box(sv1::parse_submit(black_box(line.as_bytes())));
            }
        });
        println!("parse_submit {parse:.1} ns = {:.2} floor", parse / f);
        for bl in [0usize, 12] {
            let prefix = [0x11u8; 80];
            let suffix = [0x22u8; 87];
            let mid = primitives::PrefixMidstate::new(&prefix);
            let mut en2 = [0u8; 4];
            let mut header = [0x33u8; 80];
            let t = min_ns(200, 2000, |n| {
                for _ in 0..n {
                    let h = mid.share_header_hash(
                        &[&[1, 2, 3, 4], &en2, &suffix],
                        &branch[..bl],
                        &mut header,
                    );
                    en2.copy_from_slice(&h.0[..4]);
                }
            });
            let naive = 7.0 + 3.0 * bl as f64;
            println!("share_header_hash branch {bl}: {t:.1} ns = {:.3} x naive floor ({} real compressions)", t / (f * naive), 6 + 3 * bl);
        }
        {
            let rig = Rig::new(0);
            let w = rig.engine.attach_worker("exp.worker", Millis(1000));
            let job = rig.session.channel().latest_job().unwrap().job.clone();
            let a = pool::channel::Accepted {
                job,
                hash: Hash256([3; 32]),
                header: [0; 80],
                credited: Difficulty::MIN,
                block: false,
                retarget: None,
            };
            let mut k = 0u64;
            let mut acc = f64::MAX;
            for _ in 0..100 {
                while rig.store.stats().queue_len > 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let t = Instant::now();
                for _ in 0..2000 {
                    k += 1;
                    let _ = black_box(rig.engine.accepted(
                        1,
                        k,
                        "1a2b",
                        &w,
                        &a,
                        7,
                        Millis(1000 + k / 8),
                    ));
                }
                acc = acc.min(t.elapsed().as_nanos() as f64 / 2000.0);
            }
            let st = min_ns(100, 2000, |n| {
                for _ in 0..n {
                    k += 1;
                    rig.engine.stats.share_accepted(
                        &w.stats,
                        black_box(Difficulty::MIN.as_f64()),
                        Millis(1000 + k / 8),
                    );
                }
            });
            let clock = min_ns(100, 2000, |n| {
                for _ in 0..n {
                    black_box(std::time::SystemTime::now());
                }
            });
            println!("engine.accepted {acc:.1} ns; stats.share_accepted {st:.1} ns; SystemTime::now {clock:.1} ns");
        }
        println!(
            "floor {f:.1} ns; dependent merkle step {chain:.1} ns = {:.3}x3 floor; independent {indep:.1} = {:.3}x3; dependent header {hdr:.1} = {:.3}x3",
            chain / (3.0 * f),
            indep / (3.0 * f),
            hdr / (3.0 * f)
        );
    }
}

#[allow(dead_code)]
fn layers() {
    use pool::channel::{Channel, Submission};
    for txs in [0usize, 4095] {
        let mut rig = Rig::new(txs);
        rig.measure(3 * CHUNK as u64);
        let job = rig.session.channel().latest_job().unwrap().job.clone();
        let en1 = rig.extranonce1.clone();
        let mut c = 0u32;
        let hash = min_ns(300, 2000, |n| {
            for _ in 0..n {
                c = c.wrapping_add(1);
                black_box(job.share_hash(&Solution {
                    extranonce_prefix: &en1,
                    extranonce: &c.to_be_bytes(),
                    version: 0x2000_0000,
                    ntime: job.ntime,
                    nonce: c,
                }));
            }
        });
        let cfg = Arc::new(ChannelConfig {
            vardiff: VardiffConfig {
                min: Difficulty::MIN,
                max: Difficulty::MIN,
                ..VardiffConfig::default()
            },
            ..ChannelConfig::default()
        });
        let mut ch = Channel::new(cfg, en1.clone(), 4, Difficulty::MIN, Millis(1000));
        ch.set_version_mask(0x1fff_e000);
        let mut best = f64::MAX;
        let mut wire = 1000u64;
        let mut c = 0u32;
        for _ in 0..200 {
            wire += 1;
            ch.issue(job.clone(), wire, Millis(1000));
            let t = Instant::now();
            for _ in 0..2000 {
                c = c.wrapping_add(1);
                let en2 = c.to_be_bytes();
                let r = ch.submit(
                    &Submission {
                        wire_id: wire,
                        extranonce: &en2,
                        ntime: job.ntime,
                        nonce: c,
                        version_bits: Some((c << 13) & 0x1fff_e000),
                    },
                    0,
                    Millis(1000),
                );
                black_box(&r);
            }
            best = best.min(t.elapsed().as_nanos() as f64 / 2000.0);
        }
        println!(
            "branch {}: job.share_hash {hash:.1} ns; channel.submit {best:.1} ns",
            job.merkle_branch.len()
        );
    }
}
