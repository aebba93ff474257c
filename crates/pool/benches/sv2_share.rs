//! `sv2_share/standard` against `sv2_share/sv1`: one accepted share through the SV2 session on a
//! standard channel (`SubmitSharesStandard` in, batched `SubmitSharesSuccess` out) and through
//! the SV1 session (`mining.submit` line in, reply out), on the same engine and template
//! (2,000 transactions: an 11-level merkle branch), statistics on, events and store off. After
//! criterion's figures, both paths interleaved in samples of `SAMPLE` shares in one process,
//! with the fastest samples' ratio.
//!
//! ```sh
//! cargo bench -p pool --bench sv2_share
//! ```

use std::hint::black_box;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use events::{EventSink, Verdict};
use pool::channel::ChannelConfig;
use pool::engine::{Engine, EngineConfig, PayoutMode};
use pool::job::Solution;
use pool::jobs::{Generation, JobBook, JobConfig};
use pool::stats::{PoolStats, WorkerRegistry};
use pool::sv1::session::{LineKind, Session as Sv1Session, Sv1Config};
use pool::sv2::{Session as Sv2Session, Sv2Config};
use pool::template::{Template, TemplateTx};
use pool::vardiff::VardiffConfig;
use pool::Millis;
use primitives::bitcoin::{Amount, Network, ScriptBuf};
use primitives::{sha256d, CompactTarget, Difficulty, Hash256, Target};
use sv2::messages::common::SetupConnection;
use sv2::messages::mining::{OpenStandardMiningChannel, SubmitSharesStandard};
use sv2::messages::Mining;
use sv2::Message;

/// Shares per generation: a new job every chunk keeps the duplicate tables in steady state.
const CHUNK: usize = 2048;
const SAMPLE: usize = 2048;
const SAMPLES: usize = 30;

fn template() -> Arc<Template> {
    let txs: Vec<TemplateTx> = (0..2000u64)
        .map(|i| TemplateTx {
            data: vec![i as u8],
            txid: sha256d(&i.to_le_bytes()),
            fee: Amount::from_sat(1_000),
            weight: 400,
        })
        .collect();
    Arc::new(Template {
        height: 903_217,
        prev_hash: Hash256([0x42; 32]),
        version: 0x2000_0000,
        // Mainnet-like: no share is a block.
        bits: CompactTarget(0x1702_8c61),
        curtime: 1_750_000_000,
        mintime: 1_749_998_000,
        coinbase_value: Amount::from_sat(312_500_000),
        witness_commitment: Some(Hash256([0x5c; 32])),
        transactions: txs.into(),
        longpoll_id: None,
    })
}

struct Rig {
    engine: Arc<Engine>,
    book: JobBook,
    template: Arc<Template>,
    payout: ScriptBuf,
    sv1: Sv1Session,
    sv1_lines: Vec<u8>,
    sv1_ends: Vec<usize>,
    sv2: Sv2Session,
    sv2_channel: u32,
    sv2_shares: Vec<Message>,
    counter: u64,
    seq: u32,
    request_id: u64,
}

impl Rig {
    fn new() -> Rig {
        let mut script = vec![0x00, 0x14];
        script.extend_from_slice(&[0x37; 20]);
        let payout = ScriptBuf::from_bytes(script);
        let config = EngineConfig {
            jobs: JobConfig::default(),
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
        let (engine, _found) = Engine::new(config, stats, workers, None, EventSink::disabled());
        let template = template();
        let mut book = JobBook::new(JobConfig::default());
        engine.publish(book.on_template(template.clone(), Millis(1)));
        let mut sv1 = Sv1Session::new(engine.clone(), Arc::new(Sv1Config::default()), Millis(1));
        for line in [
            r#"{"id":2,"method":"mining.subscribe","params":["bench"]}"#,
            r#"{"id":3,"method":"mining.authorize","params":["w","x"]}"#,
        ] {
            sv1.handle_line(line.as_bytes(), Millis(1));
        }
        sv1.output().clear();
        let mut sv2 = Sv2Session::new(engine.clone(), Arc::new(Sv2Config::default()));
        sv2.on_message(
            SetupConnection {
                protocol: 0,
                min_version: 2,
                max_version: 2,
                flags: 0,
                endpoint_host: String::new(),
                endpoint_port: 0,
                vendor: String::new(),
                hardware_version: String::new(),
                firmware: String::new(),
                device_id: String::new(),
            }
            .into(),
            Millis(1),
        );
        sv2.on_message(
            OpenStandardMiningChannel {
                request_id: 1,
                user_identity: "w".into(),
                nominal_hash_rate: 0.0,
                max_target: Target::from_le_bytes(&[0xff; 32]),
            }
            .into(),
            Millis(1),
        );
        let sv2_channel = sv2
            .take_output()
            .iter()
            .find_map(|m| match m {
                Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)) => {
                    Some(ok.channel_id)
                }
                _ => None,
            })
            .expect("channel opened");
        Rig {
            engine,
            book,
            template,
            payout,
            sv1,
            sv1_lines: Vec::new(),
            sv1_ends: Vec::new(),
            sv2,
            sv2_channel,
            sv2_shares: Vec::new(),
            counter: 0,
            seq: 0,
            request_id: 10,
        }
    }

    /// Untimed: a new generation, and `n` valid shares for each session.
    fn prepare(&mut self, n: usize) {
        let g: Arc<Generation> = self.book.on_template(self.template.clone(), Millis(1));
        self.engine.publish(g.clone());
        self.sv1.on_generation(Some(&g), Millis(1));
        self.sv1.output().clear();
        self.sv2.on_generation(Some(&g), Millis(1));
        let (job_id, merkle_root) = self
            .sv2
            .take_output()
            .iter()
            .find_map(|m| match m {
                Message::Mining(Mining::NewMiningJob(j)) => Some((j.job_id, j.merkle_root)),
                _ => None,
            })
            .expect("a job");
        let job = g.job(&self.payout).expect("job");
        let min = Difficulty::MIN.to_target();
        // SV1.
        let en1 = self.sv1.channel().extranonce_prefix().to_vec();
        let wire = self.sv1.channel().latest_job().expect("job").wire_id;
        self.sv1_lines.clear();
        self.sv1_ends.clear();
        while self.sv1_ends.len() < n {
            let c = self.counter;
            self.counter += 1;
            let en2 = (c as u32).to_be_bytes();
            let nonce = (c.wrapping_mul(0x9e37_79b9) >> 7) as u32;
            let (_, hash) = job.share_hash(&Solution {
                extranonce_prefix: &en1,
                extranonce: &en2,
                version: job.version,
                ntime: job.ntime,
                nonce,
            });
            if !min.is_met_by(&hash.0) {
                continue;
            }
            self.request_id += 1;
            write!(
                self.sv1_lines,
                r#"{{"params": ["w", "{wire:x}", "{:08x}", "{:08x}", "{nonce:08x}"], "id": {}, "method": "mining.submit"}}"#,
                u32::from_be_bytes(en2),
                job.ntime,
                self.request_id
            )
            .expect("write");
            self.sv1_ends.push(self.sv1_lines.len());
        }
        // SV2: the header the miner hashes.
        let mut header = [0u8; 80];
        header[0..4].copy_from_slice(&job.version.to_le_bytes());
        header[4..36].copy_from_slice(&job.prev_hash.0);
        header[36..68].copy_from_slice(&merkle_root);
        header[68..72].copy_from_slice(&job.ntime.to_le_bytes());
        header[72..76].copy_from_slice(&job.bits.0.to_le_bytes());
        self.sv2_shares.clear();
        while self.sv2_shares.len() < n {
            let c = self.counter;
            self.counter += 1;
            let nonce = (c.wrapping_mul(0x9e37_79b9) >> 3) as u32;
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
                    version: job.version,
                }
                .into(),
            );
        }
        // Latest first: `run_sv2` pops.
        self.sv2_shares.reverse();
    }

    #[inline(never)]
    fn run_sv1(&mut self) -> usize {
        let mut accepted = 0;
        let mut start = 0;
        for &end in &self.sv1_ends {
            let kind = self
                .sv1
                .handle_line(black_box(&self.sv1_lines[start..end]), Millis(2));
            start = end;
            accepted += (kind == LineKind::Share(Verdict::Accepted)) as usize;
            black_box(self.sv1.output().as_slice());
            self.sv1.output().clear();
        }
        accepted
    }

    #[inline(never)]
    fn run_sv2(&mut self) -> usize {
        let mut acked = 0;
        let mut k = 0;
        while let Some(m) = self.sv2_shares.pop() {
            self.sv2.on_message(black_box(m), Millis(2));
            k += 1;
            // One read's worth of shares per flush, as the shell does.
            if k % 32 == 0 {
                self.sv2.flush();
                acked += count_acked(self.sv2.take_output());
            }
        }
        self.sv2.flush();
        acked + count_acked(self.sv2.take_output())
    }
}

fn count_acked(out: Vec<Message>) -> usize {
    out.iter()
        .map(|m| match m {
            Message::Mining(Mining::SubmitSharesSuccess(s)) => {
                s.new_submits_accepted_count as usize
            }
            _ => 0,
        })
        .sum()
}

fn main() {
    let mut rig = Rig::new();
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("sv2_share");
    group.throughput(criterion::Throughput::Elements(CHUNK as u64));
    group.bench_function("sv1", |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                rig.prepare(CHUNK);
                let s = Instant::now();
                assert_eq!(rig.run_sv1(), CHUNK);
                t += s.elapsed();
            }
            t
        })
    });
    group.bench_function("standard", |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                rig.prepare(CHUNK);
                let s = Instant::now();
                assert_eq!(rig.run_sv2(), CHUNK);
                t += s.elapsed();
            }
            t
        })
    });
    group.finish();

    // Interleaved in one process: the same conditions for both paths.
    let (mut sv1, mut sv2) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        rig.prepare(SAMPLE);
        let s = Instant::now();
        assert_eq!(rig.run_sv1(), SAMPLE);
        sv1.push(s.elapsed().as_nanos() as f64 / SAMPLE as f64);
        let s = Instant::now();
        assert_eq!(rig.run_sv2(), SAMPLE);
        sv2.push(s.elapsed().as_nanos() as f64 / SAMPLE as f64);
    }
    let fastest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (f1, f2) = (fastest(&sv1), fastest(&sv2));
    let (m1, m2) = (median(&mut sv1), median(&mut sv2));
    println!(
        "sv2_share summary: sv1 share {f1:.0} ns (median {m1:.0}), sv2 standard share {f2:.0} ns \
         (median {m2:.0}); standard/sv1 = {:.2} fastest, {:.2} median",
        f2 / f1,
        m2 / m1
    );
}
