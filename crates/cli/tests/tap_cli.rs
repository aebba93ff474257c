//! `stratumlab tap` as a process, relaying to a small echo server: it prints where it listens,
//! delays each way, relays bytes unchanged, writes its events and a summary at the end.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use support::Role;

/// An echo server on its own thread, for as many connections as come, each until it closes.
fn echo_server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in l.incoming().take(16) {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut r = s.try_clone().unwrap();
                let _ = std::io::copy(&mut r, &mut s);
            });
        }
    });
    addr
}

#[test]
fn relays_with_the_configured_delay_and_reports() {
    let upstream = echo_server();
    let dir = tempfile::tempdir().unwrap();
    let events_path = dir.path().join("tap.ev");
    let tap = Role::start(
        "tap",
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--delay-up",
            "15ms",
            "--delay-down",
            "5ms",
            "--handshake",
            "false",
            "--link",
            "wan",
            "--report-interval",
            "100ms",
            "--events",
            events_path.to_str().unwrap(),
            "--duration",
            "60s",
        ],
    );
    let addr = tap.line("tap listening on");

    let c = TcpStream::connect(&addr).unwrap();
    c.set_nodelay(true).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = c.try_clone().unwrap();
    let mut r = BufReader::new(c);
    let mut rtts = Vec::new();
    let mut sent = 0usize;
    for i in 0..10 {
        let msg = format!("{{\"id\":{i},\"method\":\"mining.ping\",\"params\":[]}}\n");
        let start = Instant::now();
        w.write_all(msg.as_bytes()).unwrap();
        let mut back = String::new();
        r.read_line(&mut back).unwrap();
        rtts.push(start.elapsed());
        assert_eq!(back, msg, "relayed unchanged");
        sent += msg.len();
    }
    for rtt in &rtts {
        assert!(*rtt >= Duration::from_millis(20), "{rtt:?}");
    }
    rtts.sort();
    assert!(
        rtts[5] < Duration::from_millis(40),
        "median round trip {:?} through a tap of 15 ms up and 5 ms down; the bound is 40 ms",
        rtts[5]
    );
    w.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = String::new();
    assert_eq!(
        r.read_line(&mut rest).unwrap(),
        0,
        "the half-close came back"
    );
    drop(r);

    let out = tap.stop();
    let text = out.join("\n");
    assert!(text.contains("tap summary"), "{text}");
    assert!(text.contains("1 accepted"), "{text}");
    assert!(text.contains(&format!("bytes up      {sent} ")), "{text}");

    let log = events::read_file(&events_path).unwrap();
    assert_eq!(log.header.role.as_str(), "tap");
    let mut bytes = [0u64; 2];
    let mut rtt_events = 0;
    for e in &log.events {
        match e.kind {
            events::EventKind::LinkBytes(b) => {
                bytes[matches!(b.direction, events::Direction::Down) as usize] += b.bytes;
            }
            events::EventKind::LinkRtt(r) => {
                rtt_events += 1;
                assert!(r.rtt_ns >= 20_000_000, "{}", r.rtt_ns);
            }
            _ => {}
        }
    }
    assert_eq!(bytes, [sent as u64, sent as u64]);
    assert!(rtt_events >= 1);
}
