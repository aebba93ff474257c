//! `translator_fanout`: how long the translator's core takes to turn one upstream job into a
//! `mining.notify` ready on every one of 10,000 SV1 devices (the time to fan a new job out to
//! 10k devices).
//!
//! Setup: a sans-IO [`Translator`] in aggregated mode with 10,000 devices that subscribed and
//! authorized, on an extended channel of 8 extranonce bytes (4 of prefix, 2 per device, 2 of
//! extranonce2), with a mainnet-shaped job (a coinbase with a tag and a P2WPKH payout around the
//! extranonce, a 12-hash merkle path: a block of a few thousand transactions). Vardiff is pinned,
//! so no device is re-sent work for a difficulty change.
//!
//! Timed, per iteration, from the upstream message to every device's bytes:
//! - `fanout/job/10k`: a `NewExtendedMiningJob` for the current prev hash (`min_ntime` set: work
//!   at once, `clean_jobs` false);
//! - `fanout/block/10k`: a future job and the `SetNewPrevHash` that activates it (a new block:
//!   `clean_jobs` true);
//!
//! then, for each device, its pending output is taken as written ([`Device::poll_transmit`] and
//! [`Device::transmitted`], what the shell's write does with it). The socket writes
//! themselves (one `write` per device, in the shell's tasks) are not included: this is the
//! core's share of the fan-out. `floor/compress256` (one SHA-256 compression) is measured in the
//! same binary; with `--bench` a summary follows: ns per device and that as a multiple of the
//! floor, fastest and median of interleaved samples.
//!
//! With `--test` (CI) it checks instead that one job reaches every device exactly once, as one
//! `mining.notify` line with the new job id, the same bytes for all, and that a block's job is
//! clean.
//!
//! ```sh
//! cargo bench -p translator --bench fanout
//! cargo bench -p translator --bench fanout -- --test
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use primitives::{sha256d, Difficulty, Hash256};
use sv2::messages::mining::{
    NewExtendedMiningJob, OpenExtendedMiningChannelSuccess, SetNewPrevHash,
};
use sv2::messages::Mining;
use testkit::floor::Floor;
use translator::{Device, DeviceId, Event, Mode, Timestamp, Translator, TranslatorConfig};

#[path = "../tests/support/mod.rs"]
mod support;

const DEVICES: usize = 10_000;
const CHANNEL: u32 = 1;
const PREFIX: [u8; 4] = [0x00, 0x00, 0x00, 0x2a];
/// Mainnet-like nBits: no share here could be a block.
const NBITS: u32 = 0x1702_3a04;
/// Fan-outs per timed sample in the summary, and samples.
const SAMPLE: usize = 5;
const SAMPLES: usize = 15;

/// The translator with every device working, and the next upstream job id.
struct Rig {
    translator: Translator,
    devices: Vec<DeviceId>,
    next_job: u32,
    now: u64,
}

fn config() -> TranslatorConfig {
    TranslatorConfig {
        device_hash_rate: 100e12,
        max_jobs: 8,
        ..support::pinned(Difficulty::new(0.001).expect("a valid difficulty"))
    }
}

/// A job as a pool builds it for the channel: the coinbase split around the channel's 8 bytes
/// of extranonce, a 12-level merkle path. `tag` varies the coinbase, so every job is new work.
fn job(job_id: u32, future: bool, tag: u32) -> NewExtendedMiningJob {
    let mut spec = support::coinbase(
        PREFIX.len() + 4,
        format!("/stratumlab bench {tag}/").into_bytes(),
    );
    spec.witness_commitment = Some(sha256d(&tag.to_le_bytes()));
    let txids: Vec<Hash256> = (0..3_000u32)
        .map(|i| sha256d(&[i.to_le_bytes(), tag.to_le_bytes()].concat()))
        .collect();
    let min_ntime = if future { None } else { Some(1_700_000_000) };
    support::extended_job(CHANNEL, job_id, min_ntime, &spec, &txids)
}

fn prev_hash(job_id: u32, seed: u32) -> SetNewPrevHash {
    SetNewPrevHash {
        channel_id: CHANNEL,
        job_id,
        prev_hash: sha256d(&seed.to_le_bytes()).0,
        min_ntime: 1_700_000_000,
        nbits: NBITS,
    }
}

/// Every byte a device has pending, taken as a socket write would take it.
fn drain(device: &mut Device) -> usize {
    let n: usize = device.poll_transmit().iter().map(|s| s.len()).sum();
    device.transmitted(n);
    n
}

impl Rig {
    fn new(devices: usize) -> Rig {
        let mut t = Translator::new(config(), Timestamp::from_millis(0));
        let ids: Vec<DeviceId> = (0..devices)
            .map(|_| t.device_connected(Timestamp::from_millis(0)))
            .collect();
        t.open_channel(Timestamp::from_millis(0));
        let Some(Mining::OpenExtendedMiningChannel(open)) = t.poll_transmit() else {
            panic!("the translator did not ask for a channel");
        };
        t.upstream_message(
            Mining::OpenExtendedMiningChannelSuccess(OpenExtendedMiningChannelSuccess {
                request_id: open.request_id,
                channel_id: CHANNEL,
                target: Difficulty::new(1.0).expect("valid").to_target(),
                extranonce_size: 4,
                extranonce_prefix: PREFIX.to_vec(),
                group_channel_id: 0,
            }),
            Timestamp::from_millis(0),
        );
        for (i, &id) in ids.iter().enumerate() {
            let subscribe = r#"{"id":1,"method":"mining.subscribe","params":["bench/1.0"]}"#;
            let authorize =
                format!(r#"{{"id":2,"method":"mining.authorize","params":["farm.d{i}","x"]}}"#);
            t.device_line(id, subscribe.as_bytes(), Timestamp::from_millis(0));
            t.device_line(id, authorize.as_bytes(), Timestamp::from_millis(0));
        }
        let mut rig = Rig {
            translator: t,
            devices: ids,
            next_job: 1,
            now: 0,
        };
        rig.new_block();
        rig.drain_all();
        while rig.translator.poll_event().is_some() {}
        rig
    }

    fn next_id(&mut self) -> u32 {
        let id = self.next_job;
        self.next_job += 1;
        self.now += 1;
        id
    }

    /// New work on the current prev hash: no device's earlier job is made stale.
    fn new_job(&mut self) {
        let id = self.next_id();
        self.translator.upstream_message(
            Mining::NewExtendedMiningJob(job(id, false, id)),
            Timestamp::from_millis(self.now),
        );
    }

    /// A new block: a future job, then its prev hash.
    fn new_block(&mut self) {
        let id = self.next_id();
        let now = Timestamp::from_millis(self.now);
        self.translator
            .upstream_message(Mining::NewExtendedMiningJob(job(id, true, id)), now);
        self.translator
            .upstream_message(Mining::SetNewPrevHash(prev_hash(id, id)), now);
    }

    /// Every device's pending bytes, written; the total.
    fn drain_all(&mut self) -> usize {
        let mut total = 0;
        for id in &self.devices {
            let d = self.translator.device_mut(*id).expect("connected");
            total += drain(d);
        }
        total
    }

    /// One fan-out, timed from the upstream message to the last device's bytes. The job is
    /// built outside the timed region (a real pool's message arrives already built).
    fn timed(&mut self, block: bool) -> Duration {
        let id = self.next_id();
        let now = Timestamp::from_millis(self.now);
        let messages: Vec<Mining> = if block {
            vec![
                Mining::NewExtendedMiningJob(job(id, true, id)),
                Mining::SetNewPrevHash(prev_hash(id, id)),
            ]
        } else {
            vec![Mining::NewExtendedMiningJob(job(id, false, id))]
        };
        let t0 = Instant::now();
        for m in messages {
            self.translator.upstream_message(m, now);
        }
        black_box(self.drain_all());
        let elapsed = t0.elapsed();
        while self.translator.poll_event().is_some() {}
        elapsed
    }

    /// One clock tick as the shell takes it: the translator's tick, then every device it names
    /// checked for bytes and drained.
    fn tick(&mut self) -> Duration {
        self.now += 1_000;
        let now = Timestamp::from_millis(self.now);
        let t0 = Instant::now();
        let written: usize = Mode::handle_tick(&mut self.translator, now)
            .iter()
            .map(|id| drain(self.translator.device_mut(*id).expect("connected")))
            .sum();
        black_box(written);
        let elapsed = t0.elapsed();
        while self.translator.poll_event().is_some() {}
        elapsed
    }
}

fn floor_ns() -> f64 {
    Floor::new().ns_per(200_000)
}

fn benches(c: &mut Criterion, rig: &mut Rig) {
    let mut g = c.benchmark_group("floor");
    let mut floor = Floor::new();
    g.bench_function("compress256", |b| b.iter(|| floor.once()));
    g.finish();

    let mut g = c.benchmark_group("fanout");
    g.sample_size(20);
    g.bench_function("job/10k", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| rig.timed(false)).sum())
    });
    g.bench_function("block/10k", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| rig.timed(true)).sum())
    });
    // Not a fan-out, but what holds every device's shares once a second at this size.
    g.bench_function("tick/10k", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| rig.tick()).sum())
    });
    g.finish();
}

/// `--test`: one upstream job reaches every device once, the same line for all.
fn check(rig: &mut Rig) {
    for block in [false, true] {
        let id = rig.next_id();
        let now = Timestamp::from_millis(rig.now);
        if block {
            rig.translator
                .upstream_message(Mining::NewExtendedMiningJob(job(id, true, id)), now);
            rig.translator
                .upstream_message(Mining::SetNewPrevHash(prev_hash(id, id)), now);
        } else {
            rig.translator
                .upstream_message(Mining::NewExtendedMiningJob(job(id, false, id)), now);
        }
        let sent: Vec<Event> = std::iter::from_fn(|| rig.translator.poll_event()).collect();
        let reached = sent.iter().find_map(|e| match e {
            Event::JobSent {
                wire_id,
                upstream_job_id,
                devices,
                clean,
            } if *upstream_job_id == id => Some((*wire_id, *devices, *clean)),
            _ => None,
        });
        let Some((wire_id, devices, clean)) = reached else {
            panic!("job {id} was not sent: {sent:?}");
        };
        assert_eq!((devices, clean), (rig.devices.len(), block), "job {id}");
        let mut first: Option<Vec<u8>> = None;
        for d in &rig.devices {
            let out = rig
                .translator
                .device_mut(*d)
                .expect("connected")
                .take_output();
            assert_eq!(
                out.iter().filter(|&&b| b == b'\n').count(),
                1,
                "device {d:?}: one line, {}",
                String::from_utf8_lossy(&out)
            );
            let (env, method) = sv1::parse_line(&out[..out.len() - 1]).expect("a valid line");
            assert!(matches!(method, Some(sv1::Method::Notify)), "not a notify");
            let notify = sv1::Notify::parse(&env).expect("a notify");
            assert_eq!(notify.clean_jobs, block);
            assert_eq!(notify.job_id, format!("{wire_id:x}"), "the new job's id");
            match &first {
                None => first = Some(out),
                Some(f) => assert_eq!(f, &out, "every device gets the same line"),
            }
        }
    }
    println!(
        "fanout: checked, one upstream job and one block reach all {} devices once",
        rig.devices.len()
    );
}

/// Fastest and median fan-out per device, interleaved with the floor.
fn summary(rig: &mut Rig) {
    let mut job_ns = Vec::new();
    let mut block_ns = Vec::new();
    let mut floor = Vec::new();
    let per_device = |d: Duration| d.as_nanos() as f64 / (SAMPLE * DEVICES) as f64;
    for _ in 0..SAMPLES {
        floor.push(floor_ns());
        job_ns.push(per_device((0..SAMPLE).map(|_| rig.timed(false)).sum()));
        block_ns.push(per_device((0..SAMPLE).map(|_| rig.timed(true)).sum()));
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[0], v[v.len() / 2])
    };
    let (floor_min, floor_med) = stats(&mut floor);
    let bytes = {
        rig.new_job();
        rig.drain_all() / DEVICES
    };
    println!();
    println!(
        "fan-out to {DEVICES} devices ({bytes} bytes of notify each), per device; x = multiple of floor/compress256 ({floor_min:.1} ns fastest, {floor_med:.1} ns median)"
    );
    for (name, v) in [("job", &mut job_ns), ("block", &mut block_ns)] {
        let (min, med) = stats(v);
        println!(
            "  {name:<6} fastest {min:>7.1} ns ({:>5.2}x)  median {med:>7.1} ns ({:>5.2}x)  = {:.2} ms / {:.2} ms for all {DEVICES}",
            min / floor_min,
            med / floor_med,
            min * DEVICES as f64 / 1e6,
            med * DEVICES as f64 / 1e6,
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |a: &str| args.iter().any(|x| x == a);
    let mut rig = Rig::new(DEVICES);
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c, &mut rig);
    c.final_summary();
    if has("--test") {
        check(&mut rig);
    } else if has("--bench") && !has("--profile-time") && !has("--list") {
        summary(&mut rig);
    }
}
