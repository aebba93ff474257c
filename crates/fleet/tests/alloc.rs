//! What a device costs the allocator once its buffers have grown: nothing per share (found,
//! written, answered), with events off or on, and nothing for the handshake lines a reconnect
//! writes, which [`Sv1Shared`] serialized once for every device (only the worker's index is
//! written per device, as digits).
//!
//! Allocations are counted per thread, so the test harness's and the event writer's threads do
//! not count.

mod common;

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use common::at;
use common::{handshake, set_difficulty, PoolJob};
use events::{EventSink, Header, SinkOptions};
use fleet::stats::{LiveStats, Tally};
use fleet::{CloseReason, Observer, Profile, Sv1Config, Sv1Device, Sv1Shared, Timestamp};

#[global_allocator]
static GLOBAL: testkit::alloc::Counting = testkit::alloc::Counting;

use testkit::alloc::thread_allocs as allocs;

const EN1: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];
const MS: u64 = 1_000_000;

/// One round of the share path: hash a slice, write what was found, accept every share.
/// Returns the shares sent. `out` and `reply` are reused, as the shell's buffers are.
fn share_round<O: Observer>(
    dev: &mut Sv1Device,
    now: Timestamp,
    out: &mut Vec<u8>,
    reply: &mut Vec<u8>,
    obs: &mut O,
) -> usize {
    dev.hash(now, 2_000, obs);
    out.clear();
    dev.poll_transmit(out, now, obs);
    let mut sent = 0;
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        // `{"id":N,...`: the id's digits.
        let digits = line[6..].split(|&b| b == b',').next().unwrap();
        reply.clear();
        reply.extend_from_slice(b"{\"id\":");
        reply.extend_from_slice(digits);
        reply.extend_from_slice(b",\"result\":true,\"error\":null}");
        dev.handle_line(reply, now + Duration::from_nanos(MS), obs);
        sent += 1;
    }
    sent
}

fn ready_device(shared: &Arc<Sv1Shared>, index: u32, obs: &mut impl Observer) -> Sv1Device {
    let mut dev = Sv1Device::new(Arc::clone(shared), index as u64, index, 5, at(0));
    dev.handle_connected(at(0));
    handshake(&mut dev, obs, 0x1fff_e000, &EN1, 4, at(0));
    // One share per 256 hashes.
    dev.handle_line(&set_difficulty(2f64.powi(-24)), at(0), obs);
    dev.handle_line(
        &PoolJob::new(1, 8, 12, 0x1703_6e3a).notify(true),
        at(0),
        obs,
    );
    assert!(dev.can_hash());
    dev
}

#[test]
fn a_share_costs_no_allocation_with_events_off_or_on() {
    let shared = Sv1Shared::new(Sv1Config::default()).unwrap();
    let stats = LiveStats::default();
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::create(dir.path().join("fleet.ev")).unwrap();
    let enabled =
        EventSink::from_writer(file, &Header::new("fleet", ""), SinkOptions::default()).unwrap();
    for sink in [EventSink::disabled(), enabled] {
        let mut tally = Tally {
            stats: &stats,
            events: &sink,
        };
        let mut dev = ready_device(&shared, 1, &mut tally);
        let (mut out, mut reply) = (Vec::with_capacity(64 * 1024), Vec::with_capacity(256));
        // Buffers grow to their working size first.
        let mut now = MS;
        for _ in 0..50 {
            share_round(&mut dev, at(now), &mut out, &mut reply, &mut tally);
            now += 2 * MS;
        }
        let before = allocs();
        let mut shares = 0;
        for _ in 0..200 {
            shares += share_round(&mut dev, at(now), &mut out, &mut reply, &mut tally);
            now += 2 * MS;
        }
        let n = allocs() - before;
        assert!(shares > 1000, "{shares} shares");
        assert_eq!(
            n,
            0,
            "{n} allocations for {shares} shares (events {})",
            sink.is_enabled()
        );
        let enabled = sink.is_enabled();
        let written = sink.finish().unwrap();
        // Events were written when on: a ShareSent and a ShareResult per share.
        assert_eq!(enabled, written.events_emitted > 2 * shares as u64);
    }
}

#[test]
fn reconnect_handshake_lines_are_serialized_once_and_reused() {
    for profile in [Profile::Asic, Profile::Bitaxe, Profile::Cpu] {
        let shared = Sv1Shared::new(Sv1Config {
            profile,
            suggest_difficulty: Some(0.5),
            ..Sv1Config::default()
        })
        .unwrap();
        let obs = &mut ();
        let mut devs: Vec<Sv1Device> = (0..2).map(|i| ready_device(&shared, 7 + i, obs)).collect();
        let mut written: Vec<Vec<u8>> = Vec::new();
        for dev in &mut devs {
            // The pool goes away; the device comes back.
            dev.handle_closed(at(10 * MS), CloseReason::Eof, obs);
            let due = dev.poll_timeout().unwrap();
            let mut out = Vec::with_capacity(4096);
            let before = allocs();
            dev.handle_connected(due);
            dev.poll_transmit(&mut out, due, obs);
            let n = allocs() - before;
            assert_eq!(
                n, 0,
                "{profile}: {n} allocations for the first handshake write"
            );
            written.push(out);
        }
        // The same bytes for every device, but for the worker's index in mining.authorize.
        let text: Vec<String> = written
            .iter()
            .map(|w| String::from_utf8(w.clone()).unwrap())
            .collect();
        assert!(!text[0].is_empty());
        assert_eq!(text[0].replace("worker7", "worker8"), text[1], "{profile}");
        assert_eq!(text[0].contains("worker7"), profile == Profile::Bitaxe);
    }
}

#[test]
fn sharing_the_serialized_lines_writes_exactly_the_requests() {
    // What the shared lines say, read back as JSON (the write path itself is checked above).
    let shared = Sv1Shared::new(Sv1Config {
        profile: Profile::Bitaxe,
        worker_prefix: "bc1q\"x\".w".into(),
        ..Sv1Config::default()
    })
    .unwrap();
    let mut dev = Sv1Device::new(Arc::clone(&shared), 3, 12, 1, at(0));
    dev.handle_connected(at(0));
    let mut out = Vec::new();
    dev.poll_transmit(&mut out, at(0), &mut ());
    let mut lines = out.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    let mut next = || serde_json::from_slice::<serde_json::Value>(lines.next().unwrap()).unwrap();
    let configure = next();
    assert_eq!(configure["method"], "mining.configure");
    assert_eq!(configure["params"][1]["version-rolling.mask"], "ffffffff");
    let subscribe = next();
    assert_eq!(subscribe["method"], "mining.subscribe");
    let authorize = next();
    assert_eq!(authorize["method"], "mining.authorize");
    assert_eq!(authorize["params"][0], "bc1q\"x\".w12");
    let mut w = Vec::new();
    write!(w, "{}", authorize["params"][1]).unwrap();
    assert_eq!(w, b"\"x\"");
}
