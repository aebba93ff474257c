//! `sv1_share/empty_branch`, `sv1_share/branch12`: the whole path of one accepted share on one
//! core, from the raw `mining.submit` line to the serialized reply bytes, accounting included.
//! `sv1_share/empty_branch_counted`: the same with the server's link counting (bytes, and the
//! messages by type: docs/metrics.md, "Protocol cost"), whose cost per share the summary
//! states apart, also with every thread of the host counting on one shared counter.
//! `floor/compress256` is measured in the same binary, so the cost is stated as a multiple of
//! the naive SHA-256 work of the share.
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
//! capacity inside the timed region; the store's writer thread (another core) also finishes
//! committing the last chunk then, so that it does not contend with the timed one. The session
//! puts its records on the store's queue 16 at a time (durability off: nothing waits on them),
//! so the queue operations are in the timed region, one per 16 shares, and the new job flushes
//! the rest.
//!
//! After criterion's figures (with `--bench`), a summary measured in the same process: the floor
//! and both share paths interleaved in samples of `SAMPLE` shares, the fastest sample (the cost
//! without interference from other processes) and the median, each as ns/share and as a ratio
//! to the floor's fastest or median sample; and the median of the quiet samples. On a shared
//! host the share path (parsing, accounting: general-purpose code) runs about a third slower
//! whenever another tenant busies the physical core, in stretches of milliseconds to seconds,
//! while the floor (a latency-bound chain of SHA-NI instructions) slows by 2-3%: the floor
//! cannot see that noise. So each share sample follows a sample of a general-purpose probe
//! ([`Probe`]), and a share sample is quiet when its probe ran within [`QUIET`] of the probe's
//! fastest; allocations per share on the share thread (a
//! counting global allocator; the store's writer thread is counted apart); and the naive work
//! the ratio is taken against, computed from the actual coinbase and branch. With `--test` it
//! asserts acceptance and zero allocations instead.
//!
//! ```sh
//! cargo bench -p pool --bench sv1_share
//! ```

mod support;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use events::{LinkCounter, Side, Verdict};
use pool::sv1::session::{LineKind, Session};
use pool::template::{Template, TemplateTx};
use pool::Timestamp;
use primitives::bitcoin::Amount;
use primitives::{sha256d, CompactTarget, Hash256};

use support::{
    discard_output, drain_store, fastest_and_median, process_allocs, sv1_session, thread_allocs,
    Floor, Pool, Probe, Sv1Lines,
};

// ---------------------------------------------------------------------------------------------
// The rig: engine, store, session, and the lines of the next chunk of shares.

/// Shares per job. The channel remembers 8 jobs and 16384 shares (the defaults): 8 jobs of at
/// most 2000 shares never fill it, so only job rotation (untimed) expires shares.
const CHUNK: usize = 2000;
/// Shares per timed sample in the summary.
const SAMPLE: usize = 250;

/// Mainnet-like nBits: no share is a block.
const NETWORK_BITS: u32 = 0x1702_3a04;

struct Rig {
    pool: Pool,
    session: Session,
    extranonce1: Vec<u8>,
    /// Shares generated so far (extranonce2 and nonce derive from it).
    counter: u64,
    /// The session's clock: milliseconds at `t0`, one more every 8 shares.
    t0: u64,
    /// The chunk's lines.
    lines: Sv1Lines,
    /// Naive SHA-256 compressions of one share of this rig (see [`naive_compressions`]).
    naive: u32,
    coinbase_len: usize,
    /// The reply to the first share refused, if one was (then the run fails).
    first_rejected: Option<String>,
    /// Where the server counts the link's bytes and messages by type, if this rig counts as
    /// the server does (`empty_branch_counted`).
    net: Option<Arc<LinkCounter>>,
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
        bits: CompactTarget::from_consensus(NETWORK_BITS),
        curtime: 1_750_000_000,
        mintime: 1_749_998_000,
        median_time_past: None,
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
        let template = realistic_template(transactions);
        let t0 = 1_000;
        let pool = Pool::new(template, t0);
        let session = sv1_session(&pool.engine, t0);
        let extranonce1 = session.channel().extranonce_prefix().to_vec();
        assert_eq!(extranonce1.len(), 4);
        assert_eq!(session.channel().extranonce_len(), 4);
        let job = session.channel().latest_job().expect("job").job.clone();
        let coinbase_len = job.coinbase.prefix.len() + 8 + job.coinbase.suffix.len();
        assert!(coinbase_len >= 150, "coinbase of {coinbase_len} bytes");
        let naive = naive_compressions(coinbase_len, job.merkle_branch.len());
        Rig {
            pool,
            session,
            extranonce1,
            counter: 0,
            t0,
            lines: Sv1Lines {
                request_id: 100,
                ..Sv1Lines::default()
            },
            naive,
            coinbase_len,
            first_rejected: None,
            net: None,
        }
    }

    /// This rig, counting each share's bytes and messages as the server does.
    fn counted(mut self) -> Rig {
        self.net = Some(LinkCounter::new("sv1"));
        self
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
        let now = Timestamp::from_millis(self.now());
        let g = self.pool.next_generation(now);
        self.session.handle_generation(Some(&g), now);
        discard_output(&mut self.session);
        let issued = self.session.channel().latest_job().expect("job");
        let job = g.job(&self.pool.payout).expect("job");
        assert!(Arc::ptr_eq(&job, &issued.job));
        let wire_id = issued.wire_id;
        let mask = self.session.channel().version_mask();
        assert_eq!(mask, 0x1fff_e000);
        let (counter, en1) = (&mut self.counter, &self.extranonce1);
        self.lines.write(counter, &job, en1, wire_id, mask, n);
        drain_store(&self.pool.store);
    }
    /// Timed: prepared lines `from..to` through the session, the reply taken. Returns how many
    /// were accepted.
    #[inline(never)]
    fn run(&mut self, from: usize, to: usize) -> usize {
        let mut accepted = 0;
        let mut start = if from == 0 {
            0
        } else {
            self.lines.ends[from - 1]
        };
        let base = self.now() - (self.lines.ends.len() as u64) / 8;
        for k in from..to {
            let end = self.lines.ends[k];
            let line = &self.lines.bytes[start..end];
            start = end;
            let now = Timestamp::from_millis(base + (k as u64 >> 3));
            if let Some(net) = &self.net {
                count_read(net, line);
            }
            let kind = self.session.handle_line(black_box(line), now);
            let ok = kind == LineKind::Share(Verdict::Accepted);
            accepted += ok as usize;
            let _ = black_box(self.session.take_pending_ticket());
            // Written as the shell writes it: the pending parts, then how much went out.
            let out = self.session.poll_transmit();
            if let Some(net) = &self.net {
                count_written(net, &out);
            }
            if !ok && self.first_rejected.is_none() {
                self.first_rejected = Some(String::from_utf8_lossy(&out.concat()).into_owned());
            }
            let written = black_box(out).iter().map(|part| part.len()).sum();
            self.session.transmitted(written);
        }
        accepted
    }

    /// Runs `shares` shares; the time of the timed parts, and the share thread's allocations
    /// in them.
    fn measure(&mut self, shares: u64) -> (Duration, u64) {
        self.measure_samples(shares, None)
    }

    /// [`Rig::measure`], also timing every [`SAMPLE`] shares apart into `samples` (ns/share),
    /// each right after a sample of the probe (untimed as far as the shares go).
    fn measure_samples(
        &mut self,
        shares: u64,
        mut samples: Option<&mut Samples>,
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
                let probe = samples.as_deref().map(|s| s.probe.measure());
                let t = Instant::now();
                accepted += self.run(from, to);
                let d = t.elapsed();
                total += d;
                if let (Some(s), Some(p)) = (samples.as_deref_mut(), probe) {
                    s.shares.push(d.as_nanos() as f64 / (to - from) as f64);
                    s.probe_ns.push(p);
                }
                from = to;
            }
            allocs += thread_allocs() - a0;
            assert_eq!(
                accepted,
                n,
                "every share must be accepted; the first refused was answered {:?}; store: {:?}",
                self.first_rejected,
                self.pool.store.stats()
            );
            left -= n as u64;
        }
        (total, allocs)
    }
}

/// One path's samples in the summary, and the probe sample taken just before each.
struct Samples {
    probe: Probe,
    shares: Vec<f64>,
    probe_ns: Vec<f64>,
}

fn criterion_benches(c: &mut Criterion, empty: &mut Rig, branch12: &mut Rig, counted: &mut Rig) {
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
    g.bench_function("empty_branch_counted", |b| {
        b.iter_custom(|iters| counted.measure(iters).0)
    });
    g.finish();
}

/// A share sample counts as taken while the host was quiet when the probe sample just before
/// it is within this factor of the probe's fastest.
const QUIET: f64 = 1.02;

/// The floor and both paths interleaved, sample by sample (see the module's documentation).
fn summary(rigs: [&mut Rig; 3]) {
    const CHUNKS: usize = 100;
    const FLOOR_N: u64 = 5_000;
    let mut floor = Floor::new();
    // Room for every sample up front: the share thread allocates nothing while it counts.
    let samples = CHUNKS * CHUNK / SAMPLE;
    let mut floor_ns = Vec::with_capacity(2 * samples);
    let mut paths = [(); 3].map(|_| Samples {
        probe: Probe::new(),
        shares: Vec::with_capacity(samples),
        probe_ns: Vec::with_capacity(samples),
    });
    let mut allocs = [0u64; 3];
    let mut writer_allocs = [0u64; 3];
    let [empty, branch12, counted] = rigs;
    for _ in 0..CHUNKS {
        for (i, rig) in [&mut *empty, &mut *branch12, &mut *counted]
            .into_iter()
            .enumerate()
        {
            for _ in 0..CHUNK / SAMPLE {
                floor_ns.push(floor.measure(FLOOR_N).as_nanos() as f64 / FLOOR_N as f64);
            }
            let p0 = process_allocs();
            let t0 = thread_allocs();
            let (_, a) = rig.measure_samples(CHUNK as u64, Some(&mut paths[i]));
            // Everything the other threads (the store's writer) allocated meanwhile.
            writer_allocs[i] += (process_allocs() - p0) - (thread_allocs() - t0);
            allocs[i] += a;
        }
    }
    let total = (CHUNKS * CHUNK) as f64;
    let mut all_probes: Vec<f64> = paths.iter().flat_map(|p| p.probe_ns.clone()).collect();
    let (p_min, p_med) = fastest_and_median(&mut all_probes);
    let (f_min, f_med) = fastest_and_median(&mut floor_ns);
    println!();
    println!(
        "sv1_share summary: {samples} samples of {SAMPLE} shares per path (a new job every \
         {CHUNK}), each after a sample of the probe, interleaved with {} samples of {FLOOR_N} \
         compressions",
        floor_ns.len()
    );
    println!(
        "  floor/compress256: {f_min:.2} ns fastest, {f_med:.2} ns median ({:.3}x its fastest)",
        f_med / f_min
    );
    println!(
        "  probe (SipHash, 256 bytes; general-purpose code): {p_min:.2} ns fastest, {p_med:.2} ns \
         median ({:.3}x its fastest)",
        p_med / p_min
    );
    let mut line = format!("sv1_share: floor {f_min:.2} ns");
    let mut medians = [0.0; 3];
    for (i, rig) in [&*empty, &*branch12, &*counted].into_iter().enumerate() {
        let name = PATHS[i];
        let goal = [1.5, 1.15, 1.5][i];
        let mut quiet: Vec<f64> = paths[i]
            .shares
            .iter()
            .zip(&paths[i].probe_ns)
            .filter(|&(_, &p)| p <= QUIET * p_min)
            .map(|(&s, _)| s)
            .collect();
        let ns = &mut paths[i].shares;
        let (min, med) = fastest_and_median(ns);
        medians[i] = med;
        let naive = rig.naive as f64;
        let (r_min, r_med) = (min / (naive * f_min), med / (naive * f_med));
        let per_share = allocs[i] as f64 / total;
        let verdict = |r: f64| if r <= goal { "met" } else { "NOT met" };
        println!(
            "  sv1_share/{name}: naive work {} compressions (coinbase {} bytes, branch {}), \
             {:.1} ns at the floor",
            rig.naive,
            rig.coinbase_len,
            rig.branch_len(),
            naive * f_min
        );
        println!(
            "    {min:.1} ns/share fastest = {r_min:.3}x floor; {med:.1} ns/share median = \
             {r_med:.3}x; goal {goal}x {} (fastest), {} (median)",
            verdict(r_min),
            verdict(r_med),
        );
        if quiet.is_empty() {
            println!("    quiet samples: none in this run");
        } else {
            let n = quiet.len();
            let (_, q_med) = fastest_and_median(&mut quiet);
            // The floor hardly moves with the host's load (see `Probe`): its median stands.
            let r = q_med / (naive * f_med);
            println!(
                "    quiet samples (the probe just before within {QUIET}x of its fastest): {n} \
                 of {}; their median {q_med:.1} ns/share = {r:.3}x the floor's median; goal {}",
                ns.len(),
                verdict(r)
            );
            line += &format!("; {name} quiet median {q_med:.0} ns ({r:.2}x)");
        }
        let pct = |q: f64| ns[((ns.len() - 1) as f64 * q) as usize];
        println!(
            "    samples (ns/share): p10 {:.0}, p25 {:.0}, p75 {:.0}, p90 {:.0}",
            pct(0.1),
            pct(0.25),
            pct(0.75),
            pct(0.9)
        );
        println!(
            "    {per_share:.3} allocations/share on the share thread ({} in {total}); the \
             store's writer thread: {:.2}/share",
            allocs[i],
            writer_allocs[i] as f64 / total
        );
        line += &format!(
            "; {name} {min:.0} ns/share ({r_min:.2}x), median {med:.0} ns ({r_med:.2}x), \
             {per_share:.0} allocs/share"
        );
    }
    let counting = medians[2] - medians[0];
    println!(
        "  message counting (the server's per-share calls on its link counter): {counting:.1} \
         ns/share median, {:.1}% of the uncounted empty_branch path",
        100.0 * counting / medians[0]
    );
    contended_counting(medians[0]);
    line += &format!("; counting {counting:.0} ns/share");
    let stats = empty.pool.store.stats();
    println!(
        "  store (empty_branch rig): {} shares written, {} refused (queue full)",
        stats.shares_written, stats.queue_full
    );
    println!("{line}");
}

/// What the SV1 server counts of a line it read (`src/sv1/server.rs`): its bytes with the
/// line's end, and the line by kind.
fn count_read(net: &LinkCounter, line: &[u8]) {
    net.add_rx(line.len() + 1);
    net.add_line(Side::Server, true, line, sv1::line_kind);
}

/// What the SV1 server counts of the output it writes: its lines by kind, then its bytes.
fn count_written(net: &LinkCounter, parts: &[&[u8]]) {
    for part in parts {
        net.add_lines(Side::Server, false, part, sv1::line_kind);
    }
    net.add_tx(parts.iter().map(|p| p.len()).sum());
}

/// The summary's paths, in the order of its arrays.
const PATHS: [&str; 3] = ["empty_branch", "branch12", "empty_branch_counted"];

/// Every thread of the host counting shares on one link counter at once, as a pool's worker
/// threads do on their shared listener's counter: the counting alone, its cost per share on
/// each thread when every core contends for the same atomics, against one thread alone and
/// against the uncounted share path's median (`path_ns`).
fn contended_counting(path_ns: f64) {
    const SHARES: usize = 200_000;
    let submit = br#"{"params": ["lab.w", "1f", "0000002a", "6553f100", "1234abcd", "00002000"], "id": 101, "method": "mining.submit"}"#;
    let reply = b"{\"id\":101,\"result\":true,\"error\":null}\n";
    let per_share = |threads: usize| {
        let net = LinkCounter::new("sv1");
        let start = std::sync::Barrier::new(threads);
        let ns: Vec<f64> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        let t = Instant::now();
                        for _ in 0..SHARES {
                            count_read(&net, black_box(submit));
                            count_written(&net, &[black_box(reply)]);
                        }
                        t.elapsed().as_nanos() as f64 / SHARES as f64
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("thread"))
                .collect()
        });
        let (up, _) = net.totals();
        assert_eq!(up, (threads * SHARES * (submit.len() + 1)) as u64);
        ns.iter().sum::<f64>() / ns.len() as f64
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let alone = per_share(1);
    let all = per_share(threads);
    println!(
        "  counting alone: {alone:.1} ns/share on one thread; {all:.1} ns/share on each of \
         {threads} threads sharing one counter ({:.2}x; {:.1}% of the uncounted path's median)",
        all / alone,
        100.0 * all / path_ns
    );
}

/// `--test`: every share accepted, and no allocation on the share thread once warm.
fn check(rigs: [&mut Rig; 3]) {
    for (name, rig) in PATHS.into_iter().zip(rigs) {
        // Three rotations fill the channel's tables to their working size; then count.
        rig.measure(3 * CHUNK as u64);
        let (_, allocs) = rig.measure(6 * CHUNK as u64);
        assert_eq!(
            allocs,
            0,
            "sv1_share/{name}: {allocs} allocations in {} shares",
            6 * CHUNK
        );
        assert_eq!(rig.pool.store.stats().queue_full, 0);
        println!(
            "sv1_share/{name}: {} shares accepted, 0 allocations",
            6 * CHUNK
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |a: &str| args.iter().any(|x| x == a);
    let mut empty = Rig::new(0);
    let mut branch12 = Rig::new(4095);
    let mut counted = Rig::new(0).counted();
    assert_eq!(empty.branch_len(), 0);
    assert_eq!(branch12.branch_len(), 12);
    // Warm-up: every share accepted (asserted by `measure`), and the channel's duplicate table
    // at its working size. Expiring a job's shares leaves tombstones, and the first time they
    // fill the table (after some 200,000 shares, 100 rotations) it grows once, to twice the
    // buckets; from then on it rehashes in place, without allocating.
    for rig in [&mut empty, &mut branch12, &mut counted] {
        rig.measure(120 * CHUNK as u64);
    }

    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c, &mut empty, &mut branch12, &mut counted);
    c.final_summary();

    let rigs = [&mut empty, &mut branch12, &mut counted];
    if has("--test") {
        check(rigs);
    } else if has("--bench") && !has("--profile-time") && !has("--list") {
        summary(rigs);
    }
}
