//! One event of every kind, with fields chosen to exercise every encoding branch.

#![allow(dead_code)] // each test binary uses a different part

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use events::*;
use primitives::Difficulty;

pub fn h(b: u8) -> Hash256 {
    let mut x = [b; 32];
    x[0] = 0x01; // not a palindrome, so byte-order mistakes show
    Hash256(x)
}

/// Every kind at least once; several kinds twice to cover both arms of options and enums.
pub fn samples() -> Vec<EventKind> {
    let v4: SocketAddr = (Ipv4Addr::new(127, 0, 0, 3), 3333).into();
    let v6: SocketAddr = SocketAddrV6::new(Ipv6Addr::LOCALHOST, 34255, 0, 7).into();
    let target = Difficulty::new(1024.0).expect("difficulty").to_target();
    let mut out: Vec<EventKind> = vec![
        TemplateCreated {
            node: "pool".into(),
            template_id: 42,
            height: 840_000,
            prev_hash: h(0xaa),
            value_sats: 312_500_000 + 12_345,
            fees_sats: 12_345,
            tx_count: 1999,
            fingerprint: fingerprint(&h(0xaa), &[h(1), h(2)]),
            future: true,
        }
        .into(),
        TipChanged {
            node: "network".into(),
            hash: h(0xbb),
            height: 840_001,
            prev_hash: h(0xaa),
            source: TipSource::Network,
        }
        .into(),
        TipChanged {
            node: "farm".into(),
            hash: h(0xbc),
            height: 840_002,
            prev_hash: h(0xbb),
            source: TipSource::Submitted,
        }
        .into(),
        JobSent {
            conn: 7,
            channel: Some(3),
            job_id: JobId::Num(u32::MAX as u64),
            template_id: Some(42),
            fingerprint: Some(Fingerprint(0xdead_beef)),
            prev_hash: Some(h(0xaa)),
            target,
            clean: true,
            future: false,
        }
        .into(),
        JobSent {
            conn: 8,
            channel: None,
            job_id: JobId::text("5f2a01"),
            template_id: None,
            fingerprint: None,
            prev_hash: None,
            target: Target::DIFFICULTY_1,
            clean: false,
            future: true,
        }
        .into(),
        JobReceived {
            device: 1,
            channel: None,
            job_id: JobId::text("5f2a01"),
            fingerprint: Some(Fingerprint(u64::MAX)),
            prev_hash: Some(h(0xaa)),
            target,
            clean: true,
            future: false,
        }
        .into(),
        JobReceived {
            device: 2,
            channel: Some(0),
            job_id: JobId::Num(9),
            fingerprint: None,
            prev_hash: None,
            target: Target::MAX,
            clean: false,
            future: true,
        }
        .into(),
        JobActivated {
            conn: 2,
            channel: Some(0),
            job_id: JobId::Num(9),
            prev_hash: h(0xbb),
            fingerprint: None,
        }
        .into(),
        JobActivated {
            conn: 3,
            channel: None,
            job_id: JobId::text("a"),
            prev_hash: h(0xbb),
            fingerprint: Some(Fingerprint(1)),
        }
        .into(),
        TargetChanged {
            conn: 7,
            channel: Some(3),
            target: Target::REGTEST_LIMIT,
        }
        .into(),
        ShareSent {
            device: 1,
            channel: None,
            seq: 17,
            job_id: JobId::text("5f2a01"),
            nonce: 0x1234_5678,
            ntime: 1_700_000_000,
            version: 0x2000_0000,
            difficulty: 1024.0,
            hash: Some(h(0x00)),
        }
        .into(),
        ShareSent {
            device: 2,
            channel: Some(0),
            seq: u32::MAX as u64,
            job_id: JobId::Num(9),
            nonce: 0,
            ntime: 0,
            version: 0,
            difficulty: 0.000_123,
            hash: None,
        }
        .into(),
        BlockFound {
            node: "pool".into(),
            hash: h(0xbc),
            height: 840_002,
            template_id: Some(42),
            job_id: Some(9),
            conn: Some(7),
            stored: true,
        }
        .into(),
        BlockFound {
            node: "jds".into(),
            hash: h(0xbd),
            height: 840_003,
            template_id: None,
            job_id: None,
            conn: None,
            stored: false,
        }
        .into(),
        BlockSubmitted {
            hash: h(0xbc),
            height: 840_002,
            template_id: Some(42),
            conn: Some(7),
        }
        .into(),
        BlockSubmitted {
            hash: h(0xbd),
            height: 840_003,
            template_id: None,
            conn: None,
        }
        .into(),
        BlockResult {
            node: "pool".into(),
            hash: h(0xbc),
            height: 840_002,
            accepted: true,
            reason: ShortStr::EMPTY,
        }
        .into(),
        BlockResult {
            node: "pool".into(),
            hash: h(0xbd),
            height: 840_003,
            accepted: false,
            reason: "high-hash".into(),
        }
        .into(),
        LinkBytes {
            link: "wan".into(),
            conn: 5,
            direction: Direction::Up,
            bytes: 1500,
        }
        .into(),
        LinkBytes {
            link: "wan".into(),
            conn: 5,
            direction: Direction::Down,
            bytes: u64::MAX,
        }
        .into(),
        LinkRtt {
            link: "wan".into(),
            conn: 5,
            rtt_ns: 145_000_000,
        }
        .into(),
        ConnectionOpened {
            conn: 7,
            peer: v4,
            local: v6,
            label: "bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq.rig-01".into(),
        }
        .into(),
        ConnectionClosed {
            conn: 7,
            reason: "eof".into(),
        }
        .into(),
        HashesDone {
            device: Some(1),
            hashes: 1 << 40,
        }
        .into(),
        HashesDone {
            device: None,
            hashes: 0,
        }
        .into(),
        Mark {
            name: "warmup_end".into(),
        }
        .into(),
        Mark {
            name: "ünïcödé".into(),
        }
        .into(),
    ];
    // ShareResult with every verdict, both perspectives.
    let verdicts = std::iter::once(Verdict::Accepted).chain(Reason::ALL.map(Verdict::Rejected));
    for (i, verdict) in verdicts.enumerate() {
        out.push(
            ShareResult {
                conn: i as u64,
                channel: if i % 2 == 0 { None } else { Some(i as u32) },
                seq: 100 + i as u64,
                job_id: if i % 2 == 0 {
                    JobId::text("5f2a01")
                } else {
                    JobId::Num(i as u64)
                },
                nonce: i as u32,
                difficulty: 2f64.powi(i as i32),
                verdict,
                perspective: if i % 2 == 0 {
                    Perspective::Given
                } else {
                    Perspective::Received
                },
            }
            .into(),
        );
    }
    // Kinds of schema minor 2, after the older ones so that their bytes stay where they were.
    out.push(
        LinkMessages {
            link: "sv2".into(),
            direction: Direction::Up,
            message: "SubmitSharesExtended".into(),
            count: 3,
            bytes: 213,
            payload_bytes: 99,
        }
        .into(),
    );
    out.push(
        LinkMessages {
            link: "sv1".into(),
            direction: Direction::Down,
            message: "mining.notify".into(),
            count: 0,
            bytes: u64::MAX,
            payload_bytes: 0,
        }
        .into(),
    );
    out.push(
        LinkHandshake {
            link: "sv2".into(),
            duration_ns: 218_000_000,
            up_bytes: 64,
            down_bytes: 234,
        }
        .into(),
    );
    out
}

/// Decodes a whole byte buffer the way the lab reads a file.
pub fn read_bytes(bytes: &[u8]) -> (Header, Vec<Event>, bool) {
    let mut r = EventReader::new(bytes).expect("header");
    let events: Vec<Event> = (&mut r).map(|e| e.expect("event")).collect();
    (*r.header(), events, r.truncated())
}
