//! What one simulated device costs: `fleet_device/notify_branch12` (handling one
//! `mining.notify` with a realistic coinbase and a 12-level branch), `fleet_device/hash_slice_1000`
//! (a slice of 1000 nonces, two compressions each), and `floor/compress256` measured in the
//! same binary as the yardstick.
//!
//! After criterion's figures, a summary measured in this process: ns per notify and
//! allocations per notify in steady state (a counting allocator), ns per hash and its ratio to
//! the floor, the device's own bytes (inline and buffers), and the resident memory per idle
//! device of a whole fleet (tasks, sockets, devices) holding connections to a test pool that
//! runs in a child process (10,000 devices; 200 with `--test`).
//!
//! ```sh
//! cargo bench -p fleet --bench device
//! ```

use std::hint::black_box;
use std::io::{BufRead, Write as _};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use fleet::testpool::{TestPool, TestPoolConfig};
use fleet::{Fleet, FleetConfig, Profile, Sv1Config, Sv1Device, Sv1Shared};
use primitives::{sha256d, Hash256};
use testkit::floor::Floor;

#[global_allocator]
static GLOBAL: testkit::alloc::Counting = testkit::alloc::Counting;

const EN1: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];

/// The instant `ns` nanoseconds after the devices' clock starts.
fn at(ns: u64) -> fleet::Timestamp {
    fleet::Timestamp::from_nanos(ns)
}

/// Two notify lines (distinct job ids) as a pool sends them: BIP34 height, a tag, an 8-byte
/// extranonce, a P2WPKH payout and the witness commitment; a 12-level branch.
fn notify_lines() -> [Vec<u8>; 2] {
    let parts = fleet::testpool::coinbase_parts(
        900_000,
        8,
        b"/stratumlab fleet bench pool tag/",
        sha256d(b"commitment"),
    );
    let branch: Vec<Hash256> = (0..12u64).map(|i| sha256d(&i.to_le_bytes())).collect();
    let prev = sha256d(b"prev");
    ["6512ab3400000001", "6512ab3400000002"].map(|id| {
        let mut out = fleet::testpool::Job {
            id: id.into(),
            prev_hash: prev,
            coinb1: parts.prefix.clone(),
            coinb2: parts.suffix.clone(),
            branch: branch.clone(),
            version: 0x2000_0000,
            nbits: 0x1703_6e3a,
            ntime: 1_700_000_000,
        }
        .notify(false);
        out.pop();
        out
    })
}

/// A device after the handshake (version rolling 1fffe000, extranonce 4 + 4) at `difficulty`.
fn ready_device(shared: &Arc<Sv1Shared>, index: u32, difficulty: f64) -> Sv1Device {
    let mut dev = Sv1Device::new(Arc::clone(shared), index as u64, index, 1, at(0));
    dev.handle_connected(at(0));
    let o = &mut ();
    let mut out = Vec::new();
    dev.poll_transmit(&mut out, at(0), o);
    dev.handle_line(
        br#"{"id":1,"result":{"version-rolling":true,"version-rolling.mask":"1fffe000"},"error":null}"#,
        at(0),
        o,
    );
    out.clear();
    dev.poll_transmit(&mut out, at(0), o);
    let mut reply = Vec::new();
    sv1::write::reply_subscribe(&mut reply, "2", "1", &EN1, 4);
    dev.handle_line(reply.trim_ascii_end(), at(0), o);
    out.clear();
    dev.poll_transmit(&mut out, at(0), o);
    dev.handle_line(br#"{"id":3,"result":true,"error":null}"#, at(0), o);
    let mut set = Vec::new();
    sv1::write::set_difficulty(&mut set, difficulty);
    dev.handle_line(set.trim_ascii_end(), at(0), o);
    assert!(dev.is_ready());
    dev
}

fn device_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("floor");
    let mut floor = Floor::new();
    g.bench_function("compress256", |b| b.iter(|| floor.once()));
    g.finish();

    let shared = Sv1Shared::new(Sv1Config::default()).unwrap();
    let lines = notify_lines();
    let mut g = c.benchmark_group("fleet_device");
    let mut dev = ready_device(&shared, 0, 1.0);
    let mut i = 0usize;
    g.bench_function("notify_branch12", |b| {
        b.iter(|| {
            i += 1;
            dev.handle_line(black_box(&lines[i & 1]), at(1), &mut ());
        })
    });
    // The hash bench needs a job whether or not the notify bench ran (a filter may skip it).
    i += 1;
    dev.handle_line(&lines[i & 1], at(1), &mut ());
    assert!(dev.can_hash());
    g.throughput(Throughput::Elements(1000));
    g.bench_function("hash_slice_1000", |b| {
        b.iter(|| dev.hash(at(1), 1000, &mut ()).hashes)
    });
    g.finish();
}

criterion_group!(benches, device_benches);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `f` over `n` runs, `rounds` times; the median ns per run.
fn time_per(rounds: usize, n: u64, mut f: impl FnMut()) -> f64 {
    median(
        (0..rounds)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..n {
                    f();
                }
                t.elapsed().as_nanos() as f64 / n as f64
            })
            .collect(),
    )
}

fn summary(test_mode: bool) {
    let rounds = if test_mode { 1 } else { 7 };
    let scale = if test_mode { 1 } else { 20 };
    let mut f = Floor::new();
    let floor = time_per(rounds, 50_000 * scale, || f.once());

    let shared = Sv1Shared::new(Sv1Config::default()).unwrap();
    let lines = notify_lines();
    let mut dev = ready_device(&shared, 0, 1.0);
    let mut i = 0usize;
    // Warm up the job buffers, then count allocations in steady state.
    for _ in 0..4 {
        i += 1;
        dev.handle_line(&lines[i & 1], at(1), &mut ());
    }
    let notify_n = 2_000 * scale;
    let before = testkit::alloc::process_allocs();
    for _ in 0..notify_n {
        i += 1;
        dev.handle_line(black_box(&lines[i & 1]), at(1), &mut ());
    }
    let allocs = (testkit::alloc::process_allocs() - before) as f64 / notify_n as f64;
    let notify_ns = time_per(rounds, notify_n, || {
        i += 1;
        dev.handle_line(black_box(&lines[i & 1]), at(1), &mut ());
    });
    let hash_ns = time_per(rounds, 50 * scale, || {
        black_box(dev.hash(at(1), 1000, &mut ()));
    }) / 1000.0;
    let inline = std::mem::size_of::<Sv1Device>();
    let heap = dev.heap_bytes();

    let devices = if test_mode { 200 } else { 10_000 };
    let rss = idle_fleet_rss_per_device(devices);

    println!();
    println!("fleet_device summary (medians of {rounds} rounds in this process)");
    println!("  floor/compress256        {floor:8.1} ns");
    println!(
        "  notify_branch12          {notify_ns:8.0} ns  ({:.1}x floor), {allocs:.2} allocations per notify",
        notify_ns / floor
    );
    println!(
        "  hash                     {hash_ns:8.1} ns per nonce ({:.2}x floor; 2 compressions is the minimum), {:.1} MH/s per core",
        hash_ns / floor,
        1e3 / hash_ns
    );
    println!("  device                   {inline} bytes inline + {heap} bytes of buffers (coinbase, branch) after a notify");
    match rss {
        Ok((per_device, ready)) => println!(
            "  idle fleet               {per_device:.0} bytes of RSS per device ({ready} devices connected and idle, pool in another process)"
        ),
        Err(e) => println!("  idle fleet               not measured: {e}"),
    }
    if test_mode {
        assert_eq!(allocs, 0.0, "a notify allocates in steady state");
        assert!(inline + heap < 2048);
    }
}

/// Runs the test pool in a child process (this binary again) and `devices` idle devices
/// against it here; the fleet's RSS growth per device once all are ready.
fn idle_fleet_rss_per_device(devices: u32) -> Result<(f64, u64), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(exe)
        .env("FLEET_BENCH_POOL", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut addr = String::new();
    std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?)
        .read_line(&mut addr)
        .map_err(|e| e.to_string())?;
    let addr: std::net::SocketAddr = addr.trim().parse().map_err(|e| format!("{e}: {addr:?}"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut c = FleetConfig::new(addr);
    c.devices = devices;
    c.connect_rate = 4000.0;
    c.source_addrs = 2;
    c.device.profile = Profile::Asic;
    let fleet = Fleet::new(c).map_err(|e| e.to_string())?;
    let stats = fleet.stats();
    let report = rt.block_on(fleet.run(async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        while stats.ready.load(Relaxed) < devices as i64 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Idle a moment with every device holding its job.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }));
    drop(child.stdin.take());
    let _ = child.wait();
    if report.ready < devices as u64 {
        return Err(format!(
            "only {} of {devices} devices got ready",
            report.ready
        ));
    }
    Ok((report.rss_per_device_bytes, report.ready))
}

/// The child: a test pool serving until its stdin closes.
fn serve_pool() {
    let _ = fleet::net::raise_nofile_limit();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let pool = TestPool::start(TestPoolConfig {
            branch_len: 12,
            ..TestPoolConfig::default()
        })
        .await
        .unwrap();
        println!("{}", pool.addr());
        std::io::stdout().flush().unwrap();
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        })
        .await;
        drop(pool);
    });
}

fn main() {
    if std::env::var_os("FLEET_BENCH_POOL").is_some() {
        serve_pool();
        return;
    }
    let test_mode = std::env::args().any(|a| a == "--test");
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary(test_mode);
}
