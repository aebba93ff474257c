//! The file format end to end: writer -> file -> reader, truncation, corruption, versioning.

mod common;

use std::collections::BTreeSet;

use common::{read_bytes, samples};
use events::decode::Record;
use events::encode::{encode_header, encode_record};
use events::*;

fn write_samples(dir: &tempfile::TempDir) -> (std::path::PathBuf, Vec<Event>) {
    let path = dir.path().join("samples.events");
    let sink = EventSink::create(&path, "pool", "sv1").expect("create");
    let base = now_ns();
    let mut expected = Vec::new();
    for (i, kind) in samples().into_iter().enumerate() {
        let ts = base + i as u64 * 1000;
        sink.emit_at(ts, kind);
        expected.push(Event { ts_ns: ts, kind });
    }
    let stats = sink.finish().expect("finish");
    assert_eq!(stats.events_written, expected.len() as u64);
    assert_eq!(
        stats.bytes_written,
        std::fs::metadata(&path).expect("metadata").len()
    );
    (path, expected)
}

#[test]
fn samples_cover_every_kind() {
    let tags: BTreeSet<u8> = samples().iter().map(|k| k.tag()).collect();
    let all: BTreeSet<u8> = EventKind::ALL.iter().map(|k| k.0).collect();
    assert_eq!(tags, all);
}

#[test]
fn every_kind_round_trips_through_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = now_ns();
    let (path, expected) = write_samples(&dir);
    let mut reader = EventReader::open(&path).expect("open");
    let header = *reader.header();
    let events: Vec<Event> = (&mut reader).map(|e| e.expect("event")).collect();
    assert_eq!(events, expected);
    assert!(!reader.truncated());
    assert_eq!(reader.skipped(), 0);
    assert_eq!(
        reader.offset(),
        std::fs::metadata(&path).expect("meta").len()
    );

    assert_eq!(header.role, "pool");
    assert_eq!(header.config, "sv1");
    assert_eq!(header.pid, std::process::id());
    assert_eq!(header.schema_major, SCHEMA_MAJOR);
    assert_eq!(header.schema_minor, SCHEMA_MINOR);
    assert!(header.monotonic_ns >= before && header.monotonic_ns <= now_ns());
    let wall_now = realtime_ns();
    let shown = header.wall_ns(now_ns());
    assert!(
        shown.abs_diff(wall_now) < 1_000_000_000,
        "{shown} vs {wall_now}"
    );

    let log = read_file(&path).expect("read_file");
    assert_eq!(log.events, expected);
    assert!(!log.truncated);
}

#[test]
fn records_are_far_below_the_format_limit() {
    for kind in samples() {
        let mut buf = Vec::new();
        encode_record(&mut buf, u64::MAX, &kind);
        assert!(
            buf.len() <= 256,
            "{} encodes to {} bytes",
            kind.name(),
            buf.len()
        );
    }
}

/// Cuts a file at every offset: complete records always come back, a partial last record is
/// reported as truncation (not an error), and a partial header is an error.
#[test]
fn cut_at_every_offset() {
    let mut bytes = Vec::new();
    encode_header(&mut bytes, &Header::new("fleet", "D"));
    let header_len = bytes.len();
    let mut ends = Vec::new();
    for (i, kind) in samples().iter().enumerate() {
        encode_record(&mut bytes, i as u64, kind);
        ends.push(bytes.len());
    }
    for cut in 0..=bytes.len() {
        let part = &bytes[..cut];
        if cut < header_len {
            match EventReader::new(part) {
                Err(ReadError::TruncatedHeader { len }) => assert_eq!(len, cut as u64),
                Err(e) => panic!("cut {cut}: {e}"),
                Ok(_) => panic!("cut {cut}: a partial header was accepted"),
            }
            continue;
        }
        let (_, events, truncated) = read_bytes(part);
        let complete = ends.iter().filter(|&&end| end <= cut).count();
        assert_eq!(events.len(), complete, "cut {cut}");
        let at_boundary = cut == header_len || ends.contains(&cut);
        assert_eq!(truncated, !at_boundary, "cut {cut}");
    }
}

#[test]
fn a_live_file_is_followed_past_a_partial_record() {
    let mut bytes = Vec::new();
    encode_header(&mut bytes, &Header::new("fleet", ""));
    let kinds = samples();
    encode_record(&mut bytes, 1, &kinds[0]);
    let first_end = bytes.len();
    encode_record(&mut bytes, 2, &kinds[1]);

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("live.events");
    std::fs::write(&path, &bytes[..first_end + 3]).expect("write");
    let mut reader = EventReader::open(&path).expect("open");
    assert_eq!(reader.next().expect("first").expect("ok").ts_ns, 1);
    assert!(reader.next().is_none());
    assert!(reader.truncated());
    assert_eq!(reader.trailing_bytes(), 3);

    // The writer finishes the record: the same reader continues.
    std::fs::write(&path, &bytes).expect("write");
    assert_eq!(reader.next().expect("second").expect("ok").ts_ns, 2);
    assert!(reader.next().is_none());
    assert!(!reader.truncated());
}

fn corrupt_error(bytes: &[u8]) -> (u64, DecodeError) {
    let err = match EventReader::new(bytes) {
        Err(e) => e,
        Ok(mut r) => {
            let mut found = None;
            for item in &mut r {
                if let Err(e) = item {
                    found = Some(e);
                    break;
                }
            }
            assert!(r.next().is_none(), "iteration goes on after an error");
            found.expect("an error")
        }
    };
    match err {
        ReadError::Corrupt { offset, source } => (offset, source),
        other => panic!("expected corruption, got {other}"),
    }
}

fn file_with(kinds: &[EventKind]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = Vec::new();
    encode_header(&mut bytes, &Header::new("pool", ""));
    let mut starts = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        starts.push(bytes.len());
        encode_record(&mut bytes, i as u64, k);
    }
    (bytes, starts)
}

#[test]
fn corrupt_headers_are_errors() {
    let (good, _) = file_with(&[]);

    let mut bad_magic = good.clone();
    bad_magic[0] = b'X';
    let (offset, e) = corrupt_error(&bad_magic);
    assert_eq!(offset, 0);
    assert!(matches!(e, DecodeError::BadMagic(_)), "{e}");
    assert!(e.to_string().contains("not a stratumlab events file"));

    // Not an events file at all, even shorter than the magic.
    let (_, e) = corrupt_error(b"{\"");
    assert!(matches!(e, DecodeError::BadMagic(_)), "{e}");

    let mut newer_major = good.clone();
    newer_major[8..10].copy_from_slice(&(SCHEMA_MAJOR + 1).to_le_bytes());
    let (_, e) = corrupt_error(&newer_major);
    assert_eq!(
        e,
        DecodeError::UnsupportedSchema {
            major: SCHEMA_MAJOR + 1,
            minor: SCHEMA_MINOR
        }
    );

    let mut huge = good.clone();
    huge[12..16].copy_from_slice(&1_000_000u32.to_le_bytes());
    let (_, e) = corrupt_error(&huge);
    assert_eq!(e, DecodeError::HeaderTooLong(1_000_000));

    let mut short_body = good.clone();
    short_body[12..16].copy_from_slice(&10u32.to_le_bytes());
    let (_, e) = corrupt_error(&short_body);
    assert_eq!(e, DecodeError::ShortHeader(10));

    assert!(matches!(
        EventReader::new(&[][..]),
        Err(ReadError::TruncatedHeader { len: 0 })
    ));
    let missing = EventReader::open("/nonexistent/dir/x.events");
    assert!(matches!(missing, Err(ReadError::Open { .. })));
}

#[test]
fn corrupt_records_are_errors_with_their_offset() {
    let kinds = samples();
    let (good, starts) = file_with(&kinds[..3]);
    let at = starts[1];

    for len in [0u16, 8, 1025, u16::MAX] {
        let mut bad = good.clone();
        bad[at..at + 2].copy_from_slice(&len.to_le_bytes());
        let (offset, e) = corrupt_error(&bad);
        assert_eq!(offset, at as u64);
        assert_eq!(e, DecodeError::BadRecordLength(len as usize));
        let msg = ReadError::Corrupt { offset, source: e }.to_string();
        assert!(msg.contains(&format!("byte {at}")), "{msg}");
    }

    // A record whose length stops short of its fields.
    let mut short = good.clone();
    let len = u16::from_le_bytes([short[at], short[at + 1]]);
    short[at..at + 2].copy_from_slice(&(len - 1).to_le_bytes());
    let (offset, e) = corrupt_error(&short);
    assert_eq!(offset, at as u64);
    assert!(
        matches!(
            e,
            DecodeError::ShortRecord {
                kind: "tip_changed",
                ..
            }
        ),
        "{e}"
    );

    // TipChanged's last byte is its source: 0 or 1.
    let end = starts[2];
    let mut bad_code = good.clone();
    bad_code[end - 1] = 9;
    let (offset, e) = corrupt_error(&bad_code);
    assert_eq!(offset, at as u64);
    assert_eq!(
        e,
        DecodeError::BadCode {
            what: "tip source",
            code: 9
        }
    );

    // A string longer than any ShortStr: TipChanged's node length is right after kind and ts.
    let mut long_str = good.clone();
    long_str[at + 2 + 9] = 200;
    let (_, e) = corrupt_error(&long_str);
    assert_eq!(e, DecodeError::StringTooLong(200));

    let mut bad_utf8 = good.clone();
    bad_utf8[at + 2 + 10] = 0xff;
    let (_, e) = corrupt_error(&bad_utf8);
    assert_eq!(e, DecodeError::BadUtf8);

    // Extra bytes inside a record of this very schema version are not "a newer minor".
    let mut trailing = good[..starts[2]].to_vec();
    let mut rec = Vec::new();
    encode_record(&mut rec, 5, &kinds[0]);
    let l = u16::from_le_bytes([rec[0], rec[1]]) + 2;
    rec[0..2].copy_from_slice(&l.to_le_bytes());
    rec.extend_from_slice(&[0, 0]);
    trailing.extend_from_slice(&rec);
    let (offset, e) = corrupt_error(&trailing);
    assert_eq!(offset, starts[2] as u64);
    assert!(
        matches!(e, DecodeError::TrailingBytes { extra: 2, .. }),
        "{e}"
    );
}

#[test]
fn a_newer_minor_is_read_skipping_what_it_added() {
    let kinds = samples();
    let mut bytes = Vec::new();
    let mut header = Header::new("pool", "C");
    header.schema_minor = SCHEMA_MINOR + 1;
    encode_header(&mut bytes, &header);
    // The newer header has one more field.
    let body_len = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) + 4;
    bytes[12..16].copy_from_slice(&body_len.to_le_bytes());
    bytes.extend_from_slice(&[1, 2, 3, 4]);

    encode_record(&mut bytes, 1, &kinds[0]);
    // A kind this build does not know.
    bytes.extend_from_slice(&12u16.to_le_bytes());
    bytes.push(200);
    bytes.extend_from_slice(&2u64.to_le_bytes());
    bytes.extend_from_slice(&[9, 9, 9]);
    // A known kind with a field appended.
    let mut rec = Vec::new();
    encode_record(&mut rec, 3, &kinds[1]);
    let l = u16::from_le_bytes([rec[0], rec[1]]) + 8;
    rec[0..2].copy_from_slice(&l.to_le_bytes());
    rec.extend_from_slice(&[7; 8]);
    bytes.extend_from_slice(&rec);

    let mut r = EventReader::new(&bytes[..]).expect("header");
    assert_eq!(r.header().config, "C");
    assert_eq!(r.header().schema_minor, SCHEMA_MINOR + 1);
    let events: Vec<Event> = (&mut r).map(|e| e.expect("event")).collect();
    assert_eq!(
        events,
        vec![
            Event {
                ts_ns: 1,
                kind: kinds[0]
            },
            Event {
                ts_ns: 3,
                kind: kinds[1]
            }
        ]
    );
    assert_eq!(r.skipped(), 1);
    assert!(!r.truncated());

    // The sans-IO decoder says the same about the unknown record.
    let mut unknown = 12u16.to_le_bytes().to_vec();
    unknown.push(200);
    unknown.extend_from_slice(&2u64.to_le_bytes());
    unknown.extend_from_slice(&[9, 9, 9]);
    let decoded = events::decode::decode_record(&unknown, SCHEMA_MINOR + 1).expect("decode");
    assert_eq!(decoded, Some((Record::Unknown { tag: 200, ts_ns: 2 }, 14)));
}

#[test]
fn merge_orders_many_files_by_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths: Vec<_> = (0..3)
        .map(|i| dir.path().join(format!("{i}.events")))
        .collect();
    let sinks: Vec<EventSink> = paths
        .iter()
        .zip(["pool", "fleet", "tap"])
        .map(|(p, role)| EventSink::create(p, role, "sv1").expect("create"))
        .collect();
    std::thread::scope(|s| {
        for (i, sink) in sinks.iter().enumerate() {
            s.spawn(move || {
                for n in 0..2000u64 {
                    sink.emit(Mark {
                        name: ShortStr::new(&format!("{i}-{n}")),
                    });
                }
            });
        }
    });
    for s in sinks {
        s.finish().expect("finish");
    }
    let readers: Vec<_> = paths
        .iter()
        .map(|p| EventReader::open(p).expect("open"))
        .collect();
    let merged: Vec<(usize, Event)> = merge(readers).map(|r| r.expect("event")).collect();
    assert_eq!(merged.len(), 6000);
    assert!(merged.windows(2).all(|w| w[0].1.ts_ns <= w[1].1.ts_ns));
    for (source, e) in &merged {
        let EventKind::Mark(m) = e.kind else {
            panic!("unexpected {e:?}")
        };
        assert!(m.name.starts_with(&format!("{source}-")));
    }
}

#[test]
fn merge_reports_which_source_failed() {
    let (good, _) = file_with(&samples()[..2]);
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 1] = 0xee; // the last byte is TipChanged's source code
    let readers = vec![
        EventReader::new(&good[..]).expect("good"),
        EventReader::new(&bad[..]).expect("bad"),
    ];
    let items: Vec<_> = merge(readers).collect();
    let errors: Vec<_> = items.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].source_index, 1);
    assert_eq!(items.iter().filter(|r| r.is_ok()).count(), 3);
}

/// Damaged files of every shape end in events, truncation or a clean error: never a panic or a
/// hang. Deterministic pseudo-random mutations of a valid file.
#[test]
fn random_damage_never_panics() {
    let (good, _) = file_with(&samples());
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let mut bytes = good.clone();
        for _ in 0..1 + rand() % 4 {
            let at = (rand() % bytes.len() as u64) as usize;
            bytes[at] = rand() as u8;
        }
        let cut = (rand() % (bytes.len() as u64 + 1)) as usize;
        if let Ok(reader) = EventReader::new(&bytes[..cut]) {
            // Every item is a record of at least 11 bytes or the one error that ends iteration.
            let n = reader.take(10_000).count();
            assert!(n <= cut / 11 + 1, "{n} items from {cut} bytes");
        }
    }
}

/// A header and one record of every kind, as bytes: what a file holds.
fn pinned_bytes() -> Vec<u8> {
    let mut bytes = Vec::new();
    encode_header(
        &mut bytes,
        &Header {
            schema_major: SCHEMA_MAJOR,
            schema_minor: SCHEMA_MINOR,
            pid: 4242,
            realtime_ns: 1_790_000_000_000_000_000,
            monotonic_ns: 123_456_789,
            role: ShortStr::new("pool"),
            config: ShortStr::new("sv1"),
        },
    );
    for (i, kind) in samples().iter().enumerate() {
        encode_record(&mut bytes, 1_000 * i as u64, kind);
    }
    bytes
}

/// The format is an interface (files written by an earlier build read the same), so its bytes
/// are pinned: written by the encoder as it stood before the codec was declared once, a field
/// moved, resized or added without a new schema minor fails here.
#[test]
fn the_bytes_of_every_kind_are_pinned() {
    let hex: String = pinned_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let pinned: String = include_str!("data/every_kind.hex")
        .split_whitespace()
        .collect();
    assert_eq!(hex, pinned);
}
