//! What a device's outcomes become in the fleet's event file (`--events`), field by field against
//! what the scripted pool sent and what the device computed, stamped with the times the shell
//! passed in (when it read the bytes, when it wrote the share).

mod common;

use std::time::Duration;

use common::at;
use common::{handshake, parse_submit, set_difficulty, take_lines, PoolJob};
use events::{EventKind, EventSink, JobId, Perspective, Reason, Verdict};
use fleet::stats::{LiveStats, Tally};
use fleet::{ConnectionPolicy, Profile, Sv1Config, Sv1Device, Sv1Shared};
use primitives::Difficulty;

const EN1: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];
const MASK: u32 = 0x1fff_e000;

#[test]
fn jobs_targets_shares_and_verdicts_become_events() {
    let (_dir, path, sink, stats) = common::event_file();
    let mut tally = Tally {
        stats: &stats,
        events: &sink,
    };
    let shared = Sv1Shared::new(Sv1Config {
        profile: Profile::Asic,
        connection: ConnectionPolicy {
            reply_timeout: Duration::from_secs(5),
            ..ConnectionPolicy::default()
        },
        ..Sv1Config::default()
    })
    .unwrap();
    let mut dev = Sv1Device::new(shared, 42, 0, 1, at(0));
    let (t_connect, t_diff, t_job, t_hash, t_send) = (1_000, 2_000, 3_000, 4_000, 5_000);
    let (t_accept, t_reject) = (6_000, 7_000);
    dev.handle_connected(at(t_connect));
    handshake(&mut dev, &mut tally, MASK, &EN1, 4, at(t_connect));
    let d = 2f64.powi(-20);
    dev.handle_line(&set_difficulty(d), at(t_diff), &mut tally);
    let job = PoolJob::new(7, 8, 3, 0x1703_6e3a);
    dev.handle_line(&job.notify(true), at(t_job), &mut tally);
    while dev.pending_shares() < 3 {
        dev.hash(at(t_hash), 1000, &mut tally);
    }
    let subs: Vec<_> = take_lines(&mut dev, at(t_send), &mut tally)
        .iter()
        .map(|l| parse_submit(l))
        .collect();
    let n = subs.len();
    dev.handle_line(
        format!(r#"{{"id":{},"result":true,"error":null}}"#, subs[0].id).as_bytes(),
        at(t_accept),
        &mut tally,
    );
    dev.handle_line(
        format!(
            r#"{{"id":{},"result":null,"error":[21,"Job not found",null]}}"#,
            subs[1].id
        )
        .as_bytes(),
        at(t_reject),
        &mut tally,
    );
    // The rest get no verdict before the reply timeout.
    dev.handle_timeout(at(t_send + 5_000_000_000), &mut tally);
    sink.finish().unwrap();
    assert_eq!(
        stats.unanswered.load(std::sync::atomic::Ordering::Relaxed),
        n as u64 - 2
    );

    let log = events::read_file(&path).unwrap();
    assert_eq!(log.header.role.as_str(), "fleet");
    let target = Difficulty::new(d).unwrap().to_target();
    let mut events = log.events.iter();
    let e = events.next().expect("TargetChanged");
    assert_eq!(e.ts_ns, t_diff);
    let EventKind::TargetChanged(t) = e.kind else {
        panic!("{e:?}");
    };
    assert_eq!((t.conn, t.channel, t.target), (42, None, target));

    let e = events.next().expect("JobReceived");
    assert_eq!(e.ts_ns, t_job);
    let EventKind::JobReceived(j) = e.kind else {
        panic!("{e:?}");
    };
    assert_eq!(j.device, 42);
    assert_eq!(j.channel, None);
    assert_eq!(j.job_id.as_text(), Some(job.id.as_str()));
    assert_eq!(j.prev_hash, Some(job.prev_hash), "internal byte order");
    assert_eq!(
        j.fingerprint,
        Some(events::fingerprint(&job.prev_hash, &job.branch))
    );
    assert_eq!(j.target, target);
    assert!(j.clean && !j.future);

    for sub in &subs {
        let e = events.next().expect("ShareSent");
        assert_eq!(e.ts_ns, t_send, "stamped when written");
        let EventKind::ShareSent(s) = e.kind else {
            panic!("{e:?}");
        };
        let bits = sub.version_bits.expect("version rolling");
        let version = (job.version & !MASK) | bits;
        let header = job.header(&EN1, &sub.extranonce2, sub.ntime, sub.nonce, version);
        assert_eq!(s.device, 42);
        assert_eq!(s.seq, sub.id, "seq is the JSON-RPC id");
        assert_eq!(s.job_id, JobId::text(&job.id));
        assert_eq!(
            (s.nonce, s.ntime, s.version),
            (sub.nonce, sub.ntime, version)
        );
        assert_eq!(s.difficulty, d);
        assert_eq!(s.hash, Some(header.block_hash()));
        assert!(target.is_met_by(&header.block_hash().0));
    }

    for (sub, ts, verdict) in [
        (&subs[0], t_accept, Verdict::Accepted),
        (&subs[1], t_reject, Verdict::Rejected(Reason::Stale)),
    ] {
        let e = events.next().expect("ShareResult");
        assert_eq!(e.ts_ns, ts, "stamped when read");
        let EventKind::ShareResult(r) = e.kind else {
            panic!("{e:?}");
        };
        assert_eq!((r.conn, r.channel, r.seq), (42, None, sub.id));
        assert_eq!(r.job_id, JobId::text(&job.id));
        assert_eq!((r.nonce, r.difficulty), (sub.nonce, d));
        assert_eq!(r.verdict, verdict);
        assert_eq!(r.perspective, Perspective::Received);
    }
    // An unanswered share writes nothing: a ShareSent without its ShareResult is unanswered.
    assert_eq!(events.next(), None);
}

/// A default device past the handshake, at difficulty 2^-20 on a job, hashed until `shares`
/// are waiting; with the `mining.set_difficulty` and `mining.notify` lines it was sent.
fn finding(tally: &mut Tally<'_>, shares: usize) -> (Sv1Device, Vec<u8>, Vec<u8>) {
    let shared = Sv1Shared::new(Sv1Config::default()).unwrap();
    let mut dev = Sv1Device::new(shared, 1, 1, 1, at(0));
    dev.handle_connected(at(0));
    handshake(&mut dev, tally, MASK, &EN1, 4, at(0));
    let difficulty = set_difficulty(2f64.powi(-20));
    dev.handle_line(&difficulty, at(0), tally);
    let notify = PoolJob::new(1, 8, 2, 0x1703_6e3a).notify(true);
    dev.handle_line(&notify, at(0), tally);
    while dev.pending_shares() < shares {
        dev.hash(at(0), 1000, tally);
    }
    (dev, difficulty, notify)
}

#[test]
fn a_disabled_sink_counts_without_writing() {
    let sink = EventSink::disabled();
    let stats = LiveStats::default();
    let mut tally = Tally {
        stats: &stats,
        events: &sink,
    };
    let (mut dev, _, _) = finding(&mut tally, 1);
    let sent = take_lines(&mut dev, at(0), &mut tally).len() as u64;
    let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(get(&stats.jobs), 1);
    assert_eq!(get(&stats.shares_sent), sent);
    assert_eq!(sink.stats().events_emitted, 0);
}

/// The devices count their link's messages by type as they frame them (the lines they wrote
/// and read, their sizes with the line end), reported as `LinkMessages` on link `devices`.
#[test]
fn the_devices_count_their_messages_by_type() {
    let (_dir, path, sink, stats) = common::event_file();
    let mut tally = Tally {
        stats: &stats,
        events: &sink,
    };
    let (mut dev, difficulty, notify) = finding(&mut tally, 2);
    let submits = take_lines(&mut dev, at(0), &mut tally);
    stats.net.report(&sink);
    sink.finish().unwrap();

    let counted: std::collections::BTreeMap<(String, bool), (u64, u64, u64)> =
        events::read_file(&path)
            .unwrap()
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::LinkMessages(m) => {
                    assert_eq!(m.link.as_str(), "devices");
                    let up = m.direction == events::Direction::Up;
                    Some((
                        (m.message.as_str().to_owned(), up),
                        (m.count, m.bytes, m.payload_bytes),
                    ))
                }
                _ => None,
            })
            .collect();
    let line = |l: &[u8]| (1, l.len() as u64 + 1, l.len() as u64);
    assert_eq!(counted[&("mining.notify".into(), false)], line(&notify));
    assert_eq!(
        counted[&("mining.set_difficulty".into(), false)],
        line(&difficulty)
    );
    let n = submits.len() as u64;
    let text: u64 = submits.iter().map(|s| s.len() as u64).sum();
    assert_eq!(
        counted[&("mining.submit".into(), true)],
        (n, text + n, text)
    );
    // The handshake's requests went up, and their answers came down as responses.
    assert_eq!(counted[&("mining.subscribe".into(), true)].0, 1);
    assert_eq!(counted[&("mining.authorize".into(), true)].0, 1);
    assert!(counted[&("response".into(), false)].0 >= 2, "{counted:?}");
}
