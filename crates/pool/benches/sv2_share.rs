//! `sv2_share/standard`: one accepted share through the SV2 session on a standard channel
//! (`SubmitSharesStandard` in, batched `SubmitSharesSuccess` out, one header hash), stated
//! against `sv1_share/empty_branch` (the SV1 share path, rebuilt here exactly as
//! `benches/sv1_share.rs` sets it up and measured as `sv2_share/sv1_empty_branch`) and
//! `floor/compress256` (one SHA-256 compression), all three in the same run.
//!
//! Setup, shared by both paths: an [`Engine`] with statistics on, events off and a share store
//! in a temporary directory with `Durability::Off`; pool mode, an empty template (the coinbase
//! is the merkle root: `empty_branch`), 8 bytes of extranonce, a mainnet-like network target
//! (no blocks), share difficulty `Difficulty::MIN` with vardiff pinned there, BIP320 version
//! bits rolled from a counter. The SV1 session negotiated version rolling, subscribed and
//! authorized; the SV2 session is an end device (`REQUIRES_STANDARD_JOBS`) with one standard
//! channel. Every `CHUNK` shares, untimed, a new generation goes to both sessions, which keeps
//! their duplicate tables in steady state; the shares of a chunk are written beforehand.
//!
//! After criterion's figures (with `--bench`), a summary measured in the same process: the
//! floor and both paths interleaved in samples of `SAMPLE` shares, fastest and median, each
//! path in ns/share, as a multiple of the floor and of the other path, and allocations per
//! share on the share thread (a counting global allocator). Then what the sv2 crate's Noise
//! layer costs per share frame on the pool's side (decrypt and decode a `SubmitSharesStandard`;
//! encode and encrypt one `SubmitSharesSuccess` per 32 shares), in ns and allocations, which
//! the session figures do not include, and what counting each frame by type on the link's
//! counter adds to that (docs/metrics.md, "Protocol cost"). With `--test`: every share accepted and no allocation
//! per share on either path once warm.
//!
//! ```sh
//! cargo bench -p pool --bench sv2_share
//! ```

mod support;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use events::{LinkCounter, Side, Verdict};
use pool::sv1::session::{LineKind, Session as Sv1Session};
use pool::sv2::{Session as Sv2Session, Sv2Config};
use pool::template::Template;
use pool::Timestamp;
use primitives::bitcoin::Amount;
use primitives::{sha256d, CompactTarget, Difficulty, Hash256, Target};
use sv2::keys::AuthorityKeys;
use sv2::messages::common::{mining_flags, SetupConnection};
use sv2::messages::mining::{OpenStandardMiningChannel, SubmitSharesStandard, SubmitSharesSuccess};
use sv2::messages::Mining;
use sv2::transport::count_frame;
use sv2::{Message, NoiseInitiator, NoiseResponder};

use support::{
    discard_output, drain_store, fastest_and_median, sv1_session, thread_allocs, Floor, Pool,
    Sv1Lines, WORKER,
};

// ---------------------------------------------------------------------------------------------
// The rig: one engine, an SV1 and an SV2 session, the next chunk of shares for each.

/// Shares per job (as in `sv1_share`: 8 jobs of 2000 never fill the duplicate tables).
const CHUNK: usize = 2000;
/// Shares per timed sample in the summary.
const SAMPLE: usize = 250;
/// Shares per read: the shell flushes acknowledgements after each.
const READ: usize = 32;
const MASK: u32 = 0x1fff_e000;

struct Rig {
    pool: Pool,
    sv1: Sv1Session,
    sv1_lines: Sv1Lines,
    sv2: Sv2Session,
    sv2_channel: u32,
    /// The chunk's shares, latest first (`run_sv2` pops).
    sv2_shares: Vec<Message>,
    counter: u64,
    seq: u32,
    t0: u64,
}

fn empty_template() -> Arc<Template> {
    Arc::new(Template {
        height: 903_217,
        prev_hash: Hash256([0x42; 32]),
        version: 0x2000_0000,
        // Mainnet-like: no share is a block.
        bits: CompactTarget::from_consensus(0x1702_3a04),
        curtime: 1_750_000_000,
        mintime: 1_749_998_000,
        median_time_past: None,
        coinbase_value: Amount::from_sat(312_500_000),
        witness_commitment: Some(Hash256([0x5c; 32])),
        transactions: Vec::new().into(),
        longpoll_id: None,
    })
}

impl Rig {
    fn new() -> Rig {
        let template = empty_template();
        let t0 = 1_000;
        let pool = Pool::new(template, t0);
        let sv1 = sv1_session(&pool.engine, t0);
        let mut sv2 = Sv2Session::new(pool.engine.clone(), Arc::new(Sv2Config::default()));
        sv2.handle_message(
            SetupConnection {
                flags: mining_flags::REQUIRES_STANDARD_JOBS
                    | mining_flags::REQUIRES_VERSION_ROLLING,
                ..SetupConnection::new(0)
            }
            .into(),
            Timestamp::from_millis(t0),
        );
        sv2.handle_message(
            OpenStandardMiningChannel {
                request_id: 1,
                user_identity: WORKER.into(),
                nominal_hash_rate: 0.0,
                max_target: Target::from_le_bytes(&[0xff; 32]),
            }
            .into(),
            Timestamp::from_millis(t0),
        );
        let sv2_channel = std::iter::from_fn(|| sv2.poll_transmit())
            .find_map(|m| match m {
                Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)) => {
                    Some(ok.channel_id)
                }
                _ => None,
            })
            .expect("channel opened");
        Rig {
            pool,
            sv1,
            sv1_lines: Sv1Lines {
                request_id: 100,
                ..Sv1Lines::default()
            },
            sv2,
            sv2_channel,
            sv2_shares: Vec::new(),
            counter: 0,
            seq: 0,
            t0,
        }
    }

    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.t0 + self.counter / 8)
    }

    /// Untimed: a new generation to both sessions and `n` valid shares for each; lets the
    /// store's writer take the last chunk off its queue.
    fn prepare(&mut self, n: usize) {
        let now = self.now();
        let g = self.pool.next_generation(now);
        self.sv1.handle_generation(Some(&g), now);
        discard_output(&mut self.sv1);
        self.sv2.handle_generation(Some(&g), now);
        // Polled, as the shell does: the session keeps its output buffer.
        let (job_id, merkle_root) = std::iter::from_fn(|| self.sv2.poll_transmit())
            .find_map(|m| match m {
                Message::Mining(Mining::NewMiningJob(j)) => Some((j.job_id, j.merkle_root)),
                _ => None,
            })
            .expect("a standard job");
        let job = g.job(&self.pool.payout).expect("job");
        // SV1, as sv1_share writes them.
        let en1 = self.sv1.channel().extranonce_prefix().to_vec();
        let wire = self.sv1.channel().latest_job().expect("job").wire_id;
        self.sv1_lines
            .write(&mut self.counter, &job, &en1, wire, MASK, n);
        let min = Difficulty::MIN.to_target();
        // SV2: the header the device hashes, on the root it was sent.
        let mut header = [0u8; 80];
        header[4..36].copy_from_slice(&job.prev_hash.0);
        header[36..68].copy_from_slice(&merkle_root);
        header[68..72].copy_from_slice(&job.ntime.to_le_bytes());
        header[72..76].copy_from_slice(&job.bits.to_consensus().to_le_bytes());
        self.sv2_shares.clear();
        while self.sv2_shares.len() < n {
            let c = self.counter;
            self.counter += 1;
            let nonce = (c.wrapping_mul(0x9e37_79b9) >> 3) as u32;
            let version = (job.version & !MASK) | (((c as u32) << 13) & MASK);
            header[0..4].copy_from_slice(&version.to_le_bytes());
            header[76..80].copy_from_slice(&nonce.to_le_bytes());
            if !min.is_met_by(&sha256d(&header).0) {
                continue;
            }
            self.seq += 1;
            self.sv2_shares.push(
                SubmitSharesStandard {
                    channel_id: self.sv2_channel,
                    sequence_number: self.seq,
                    job_id,
                    nonce,
                    ntime: job.ntime,
                    version,
                }
                .into(),
            );
        }
        self.sv2_shares.reverse();
        drain_store(&self.pool.store);
    }

    /// Timed: the next `n` prepared SV1 lines; how many were accepted.
    #[inline(never)]
    fn run_sv1(&mut self, from: usize, n: usize) -> usize {
        let mut accepted = 0;
        let mut start = if from == 0 {
            0
        } else {
            self.sv1_lines.ends[from - 1]
        };
        let now = self.now();
        for k in from..from + n {
            let end = self.sv1_lines.ends[k];
            let kind = self
                .sv1
                .handle_line(black_box(&self.sv1_lines.bytes[start..end]), now);
            start = end;
            accepted += (kind == LineKind::Share(Verdict::Accepted)) as usize;
            let _ = black_box(self.sv1.take_pending_ticket());
            let written = black_box(self.sv1.poll_transmit())
                .iter()
                .map(|p| p.len())
                .sum();
            self.sv1.transmitted(written);
        }
        accepted
    }

    /// Timed: the next `n` prepared SV2 shares, flushed every [`READ`] as the shell does; how
    /// many were acknowledged.
    #[inline(never)]
    fn run_sv2(&mut self, n: usize) -> usize {
        let now = self.now();
        let mut acked = 0;
        for k in 1..=n {
            let m = self.sv2_shares.pop().expect("prepared");
            self.sv2.handle_message(black_box(m), now);
            if k % READ == 0 || k == n {
                self.sv2.flush();
                let _ = black_box(self.sv2.take_pending_ticket());
                acked += std::iter::from_fn(|| self.sv2.poll_transmit())
                    .map(|m| acked_by(&m))
                    .sum::<usize>();
            }
        }
        acked
    }

    /// Runs `shares` shares of one path in samples of [`SAMPLE`]; each sample's ns/share into
    /// `samples`, and the share thread's allocations.
    fn measure(&mut self, sv2: bool, shares: usize, samples: Option<&mut Vec<f64>>) -> u64 {
        self.measure_timed(sv2, shares, samples).1
    }

    fn measure_timed(
        &mut self,
        sv2: bool,
        shares: usize,
        mut samples: Option<&mut Vec<f64>>,
    ) -> (Duration, u64) {
        let mut left = shares;
        let mut total = Duration::ZERO;
        let mut allocs = 0;
        while left > 0 {
            let n = left.min(CHUNK);
            self.prepare(n);
            let a0 = thread_allocs();
            let mut from = 0;
            while from < n {
                let k = SAMPLE.min(n - from);
                let t = Instant::now();
                let ok = if sv2 {
                    self.run_sv2(k)
                } else {
                    self.run_sv1(from, k)
                };
                let d = t.elapsed();
                assert_eq!(ok, k, "every share accepted (sv2: {sv2})");
                total += d;
                if let Some(v) = samples.as_deref_mut() {
                    v.push(d.as_nanos() as f64 / k as f64);
                }
                from += k;
            }
            allocs += thread_allocs() - a0;
            left -= n;
        }
        (total, allocs)
    }
}

fn acked_by(m: &Message) -> usize {
    match m {
        Message::Mining(Mining::SubmitSharesSuccess(s)) => s.new_submits_accepted_count as usize,
        _ => 0,
    }
}

// The Noise layer per share frame, pool side (crates/sv2).

struct Wire {
    pool: NoiseResponder,
    /// Encrypted `SubmitSharesStandard` frames, one per share, and where each ends.
    frames: Vec<u8>,
    ends: Vec<usize>,
    payload: Vec<u8>,
    out: Vec<u8>,
    /// The link counter each frame is counted into by type, as `NoiseConn` does, if counted.
    net: Option<Arc<LinkCounter>>,
}

impl Wire {
    fn new(shares: usize) -> Wire {
        let keys = AuthorityKeys::reference();
        let mut device = NoiseInitiator::new(keys.public_bytes(), 1 << 16).expect("initiator");
        let mut pool =
            NoiseResponder::new(&keys, Duration::from_secs(3600), 1 << 16).expect("responder");
        let mut bytes = Vec::new();
        device.take_handshake_bytes(&mut bytes);
        pool.feed(&bytes).expect("key");
        bytes.clear();
        pool.take_handshake_bytes(&mut bytes);
        device.feed(&bytes).expect("reply");
        assert!(device.handshake_done() && pool.handshake_done());
        let (mut frames, mut ends, mut payload) = (Vec::new(), Vec::new(), Vec::new());
        for seq in 0..shares as u32 {
            let m: Message = SubmitSharesStandard {
                channel_id: 2,
                sequence_number: seq,
                job_id: 7,
                nonce: seq.wrapping_mul(0x9e37_79b9),
                ntime: 1_750_000_000,
                version: 0x2000_0000,
            }
            .into();
            payload.clear();
            let t = m.encode(&mut payload).expect("encode");
            device
                .encrypt(t, m.extension_type(), &payload, &mut frames)
                .expect("encrypt");
            ends.push(frames.len());
        }
        Wire {
            pool,
            frames,
            ends,
            payload,
            out: Vec::with_capacity(256),
            net: None,
        }
    }

    /// Every frame decrypted and decoded by the pool, one success encoded and encrypted per
    /// [`READ`]: ns per share frame, and allocations per share frame in each of the three.
    fn run(&mut self) -> (f64, [f64; 3]) {
        let (frames, ends) = (
            std::mem::take(&mut self.frames),
            std::mem::take(&mut self.ends),
        );
        let mut allocs = [0u64; 3];
        let t = Instant::now();
        let mut start = 0;
        for (k, &end) in ends.iter().enumerate() {
            let a0 = thread_allocs();
            self.pool.feed(&frames[start..end]).expect("feed");
            let start_of_frame = start;
            start = end;
            let mut frame = self.pool.next_frame().expect("whole").expect("valid");
            if let Some(net) = &self.net {
                net.add_read(Side::Server, end - start_of_frame);
                count_frame(
                    net,
                    Side::Server,
                    true,
                    frame.extension(),
                    frame.msg_type(),
                    frame.payload.len(),
                );
            }
            let a1 = thread_allocs();
            let m = Message::decode(frame.msg_type(), &mut frame.payload).expect("decode");
            black_box(m);
            let a2 = thread_allocs();
            if k % READ == READ - 1 {
                let ok: Message = SubmitSharesSuccess {
                    channel_id: 2,
                    last_sequence_number: k as u32,
                    new_submits_accepted_count: READ as u32,
                    new_shares_sum: READ as u64,
                }
                .into();
                self.payload.clear();
                let t = ok.encode(&mut self.payload).expect("encode");
                self.out.clear();
                self.pool
                    .encrypt(t, ok.extension_type(), &self.payload, &mut self.out)
                    .expect("encrypt");
                if let Some(net) = &self.net {
                    net.add_written(Side::Server, self.out.len());
                    count_frame(
                        net,
                        Side::Server,
                        false,
                        ok.extension_type(),
                        t,
                        self.payload.len(),
                    );
                }
                black_box(&self.out);
            }
            let a3 = thread_allocs();
            allocs[0] += a1 - a0;
            allocs[1] += a2 - a1;
            allocs[2] += a3 - a2;
        }
        let n = ends.len() as f64;
        let ns = t.elapsed().as_nanos() as f64 / n;
        (ns, allocs.map(|a| a as f64 / n))
    }
}

// ---------------------------------------------------------------------------------------------

fn criterion_benches(c: &mut Criterion, rig: &mut Rig) {
    let mut g = c.benchmark_group("floor");
    let mut floor = Floor::new();
    g.bench_function("compress256", |b| b.iter(|| floor.once()));
    g.finish();

    let mut g = c.benchmark_group("sv2_share");
    g.bench_function("sv1_empty_branch", |b| {
        b.iter_custom(|iters| rig.measure_timed(false, iters as usize, None).0)
    });
    g.bench_function("standard", |b| {
        b.iter_custom(|iters| rig.measure_timed(true, iters as usize, None).0)
    });
    g.finish();
}

/// The floor and both paths interleaved, sample by sample.
fn summary(rig: &mut Rig) {
    const CHUNKS: usize = 60;
    const FLOOR_N: u64 = 5_000;
    let mut floor = Floor::new();
    let samples = CHUNKS * CHUNK / SAMPLE;
    let mut floor_ns = Vec::with_capacity(2 * samples);
    let mut ns = [Vec::with_capacity(samples), Vec::with_capacity(samples)];
    let mut allocs = [0u64; 2];
    for _ in 0..CHUNKS {
        for (i, sv2) in [false, true].into_iter().enumerate() {
            for _ in 0..CHUNK / SAMPLE {
                floor_ns.push(floor.measure(FLOOR_N).as_nanos() as f64 / FLOOR_N as f64);
            }
            allocs[i] += rig.measure(sv2, CHUNK, Some(&mut ns[i]));
        }
    }
    let total = (CHUNKS * CHUNK) as f64;
    let (f_min, f_med) = fastest_and_median(&mut floor_ns);
    let (s1_min, s1_med) = fastest_and_median(&mut ns[0]);
    let (s2_min, s2_med) = fastest_and_median(&mut ns[1]);
    println!();
    println!(
        "sv2_share summary: {samples} samples of {SAMPLE} shares per path (a new job every \
         {CHUNK}), interleaved with {} samples of {FLOOR_N} compressions",
        floor_ns.len()
    );
    println!("  floor/compress256: {f_min:.2} ns fastest, {f_med:.2} ns median");
    for (name, min, med, a) in [
        ("sv1_empty_branch", s1_min, s1_med, allocs[0]),
        ("standard", s2_min, s2_med, allocs[1]),
    ] {
        println!(
            "  sv2_share/{name}: {min:.1} ns/share fastest = {:.1}x floor; {med:.1} ns median = \
             {:.1}x floor; {:.3} allocations/share ({a} in {total})",
            min / f_min,
            med / f_med,
            a as f64 / total
        );
    }
    println!(
        "  sv2_share/standard / sv1_share/empty_branch = {:.2} fastest, {:.2} median \
         (the naive work of a standard share is 3 compressions: {:.2}x of it fastest)",
        s2_min / s1_min,
        s2_med / s1_med,
        s2_min / (3.0 * f_min)
    );
    let mut wire = Wire::new(20_000);
    let (wire_ns, [decrypt, decode, reply]) = wire.run();
    let wire_allocs = decrypt + decode + reply;
    // The same frames again, counted by type as the pool's connections count them; the
    // median of interleaved runs of both, so that a noisy stretch does not fall on one.
    let (mut plain, mut counted) = (Vec::new(), Vec::new());
    for _ in 0..15 {
        plain.push(Wire::new(20_000).run().0);
        let mut w = Wire::new(20_000);
        w.net = Some(LinkCounter::new("sv2"));
        counted.push(w.run().0);
    }
    let (_, plain) = fastest_and_median(&mut plain);
    let (_, counted) = fastest_and_median(&mut counted);
    println!(
        "  message counting per share frame (its type, bytes and the batched success's share): \
         {:.1} ns median ({plain:.0} ns uncounted, {counted:.0} ns counted)",
        counted - plain
    );
    println!(
        "  sv2 crate, pool side, per share frame: {wire_ns:.0} ns ({:.1}x floor, {:.2}x the \
         session's standard share); allocations: {decrypt:.2} to decrypt it, {decode:.2} to \
         decode it, {reply:.2} for its share of a SubmitSharesSuccess (one per {READ})",
        wire_ns / f_min,
        wire_ns / s2_min
    );
    println!(
        "sv2_share: floor {f_min:.2} ns; standard {s2_min:.0} ns/share ({:.1}x floor, {:.2}x \
         sv1 empty_branch {s1_min:.0} ns); median {s2_med:.0} ns ({:.1}x, {:.2}x); noise layer \
         {wire_ns:.0} ns and {wire_allocs:.1} allocs per frame",
        s2_min / f_min,
        s2_min / s1_min,
        s2_med / f_med,
        s2_med / s1_med
    );
}

/// `--test`: every share accepted, and no allocation per share on either path once warm.
fn check(rig: &mut Rig) {
    for (name, sv2) in [("sv1_empty_branch", false), ("standard", true)] {
        let allocs = rig.measure(sv2, 6 * CHUNK, None);
        assert_eq!(
            allocs,
            0,
            "sv2_share/{name}: {allocs} allocations in {} shares",
            6 * CHUNK
        );
        println!(
            "sv2_share/{name}: {} shares accepted, 0 allocations",
            6 * CHUNK
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |a: &str| args.iter().any(|x| x == a);
    let mut rig = Rig::new();
    // Warm-up: the duplicate tables at their working size (see sv1_share).
    rig.measure(false, 120 * CHUNK, None);
    rig.measure(true, 120 * CHUNK, None);

    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c, &mut rig);
    c.final_summary();

    if has("--test") {
        check(&mut rig);
    } else if has("--bench") && !has("--profile-time") && !has("--list") {
        summary(&mut rig);
    }
}
