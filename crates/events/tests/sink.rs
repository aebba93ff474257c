//! The writer: concurrency, backpressure, flushing, shutdown and failure.

mod common;

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::read_bytes;
use events::*;

fn share_sent(device: u64, seq: u64) -> ShareSent {
    ShareSent {
        device,
        channel: None,
        seq,
        job_id: JobId::text("1f"),
        nonce: seq as u32,
        ntime: 0,
        version: 0x2000_0000,
        difficulty: 1.0,
        hash: None,
    }
}

/// A writer into shared memory, optionally slow, optionally failing after some writes.
#[derive(Clone, Default)]
struct MemWriter {
    bytes: Arc<Mutex<Vec<u8>>>,
    delay: Duration,
    fail_after_writes: Option<usize>,
    writes: Arc<Mutex<usize>>,
}

impl MemWriter {
    /// A sink for `role` writing here through two buffers of `buffer_bytes`.
    fn sink(&self, role: &str, buffer_bytes: usize) -> EventSink {
        let options = SinkOptions {
            buffer_bytes,
            buffers: 2,
            ..SinkOptions::default()
        };
        EventSink::from_writer(self.clone(), &Header::new(role, ""), options).expect("sink")
    }
}

impl Write for MemWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut writes = self.writes.lock().expect("lock");
        *writes += 1;
        if self.fail_after_writes.is_some_and(|n| *writes > n) {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "disk full (test)",
            ));
        }
        std::thread::sleep(self.delay);
        self.bytes.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn sinks_and_events_are_shareable_and_copy() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    fn copy<T: Copy + Send + Sync>() {}
    shareable::<EventSink>();
    copy::<Event>();
    copy::<Header>();
}

#[test]
fn many_threads_lose_nothing_and_keep_their_order() {
    const THREADS: u64 = 8;
    const EACH: u64 = 20_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("threads.events");
    // Small buffers: many hand-offs, and some contention for free buffers.
    let options = SinkOptions {
        buffer_bytes: 2048,
        buffers: 3,
        ..SinkOptions::default()
    };
    let sink = EventSink::create_with(&path, "fleet", "sv1", options).expect("create");
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let sink = sink.clone();
            s.spawn(move || {
                for i in 0..EACH {
                    sink.emit(share_sent(t, i));
                }
            });
        }
    });
    let stats = sink.finish().expect("finish");
    assert_eq!(stats.events_emitted, THREADS * EACH);
    assert_eq!(stats.events_written, THREADS * EACH);
    assert_eq!(stats.events_lost, 0);

    let log = read_file(&path).expect("read");
    assert!(!log.truncated);
    assert_eq!(log.events.len() as u64, THREADS * EACH);
    let mut next: HashMap<u64, (u64, u64)> = HashMap::new(); // device -> (next seq, last ts)
    for e in &log.events {
        let EventKind::ShareSent(s) = e.kind else {
            panic!("unexpected {e:?}")
        };
        let (seq, ts) = next.entry(s.device).or_insert((0, 0));
        assert_eq!(s.seq, *seq, "thread {} out of order", s.device);
        assert!(e.ts_ns >= *ts, "thread {} went back in time", s.device);
        *seq += 1;
        *ts = e.ts_ns;
    }
    assert!(next.values().all(|&(seq, _)| seq == EACH));
    // Stamped under the sink's lock: the whole file is in time order.
    assert!(log.events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
}

#[test]
fn a_slow_writer_stalls_emitters_but_loses_nothing() {
    let out = MemWriter {
        delay: Duration::from_millis(2),
        ..MemWriter::default()
    };
    let sink = out.sink("fleet", 64); // about one record per buffer
    for i in 0..300 {
        sink.emit(share_sent(1, i));
    }
    let stats = sink.finish().expect("finish");
    assert!(stats.stalls > 0, "{stats:?}");
    assert!(stats.stall_ns > 0, "{stats:?}");
    assert_eq!(stats.events_written, 300);

    let bytes = out.bytes.lock().expect("lock").clone();
    assert_eq!(stats.bytes_written, bytes.len() as u64);
    let (_, events, truncated) = read_bytes(&bytes);
    assert!(!truncated);
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| match e.kind {
            EventKind::ShareSent(s) => s.seq,
            _ => u64::MAX,
        })
        .collect();
    assert_eq!(seqs, (0..300).collect::<Vec<_>>());
}

#[test]
fn the_disabled_sink_records_nothing() {
    let sink = EventSink::disabled();
    assert!(!sink.is_enabled());
    let dir = tempfile::tempdir().expect("tempdir");
    for i in 0..1000 {
        sink.clone().emit(share_sent(1, i));
        sink.emit_at(i, Mark { name: "x".into() });
    }
    sink.flush().expect("flush");
    assert_eq!(sink.stats(), SinkStats::default());
    assert_eq!(sink.finish().expect("finish"), SinkStats::default());
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    assert!(!EventSink::default().is_enabled());
}

#[test]
fn a_live_file_shows_events_without_an_explicit_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("live.events");
    let sink = EventSink::create(&path, "pool", "").expect("create");
    let mut reader = EventReader::open(&path).expect("header is on disk at once");
    assert!(reader.next().is_none());

    for round in 0..3u64 {
        sink.emit(Mark {
            name: "tick".into(),
        });
        let start = Instant::now();
        let event = loop {
            if let Some(e) = reader.next() {
                break e.expect("event");
            }
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "round {round}: not visible"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(matches!(event.kind, EventKind::Mark(_)));
        // Within the default flush interval, with room for a loaded machine.
        assert!(
            start.elapsed() < SinkOptions::default().flush_interval * 4,
            "{:?}",
            start.elapsed()
        );
    }
    drop(sink);
}

#[test]
fn flush_makes_events_readable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("flush.events");
    let sink = EventSink::create_with(
        &path,
        "pool",
        "",
        SinkOptions {
            flush_interval: Duration::from_secs(3600),
            ..SinkOptions::default()
        },
    )
    .expect("create");
    for i in 0..10 {
        sink.emit(share_sent(1, i));
    }
    sink.flush().expect("flush");
    assert_eq!(read_file(&path).expect("read").events.len(), 10);
    assert_eq!(sink.stats().events_written, 10);
}

#[test]
fn dropping_the_last_clone_flushes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("drop.events");
    let sink = EventSink::create(&path, "tap", "").expect("create");
    let other = sink.clone();
    sink.emit(Mark { name: "a".into() });
    drop(sink);
    other.emit(Mark { name: "b".into() });
    drop(other);
    let log = read_file(&path).expect("read");
    assert_eq!(log.events.len(), 2);
    assert!(!log.truncated);
}

#[test]
fn finish_on_one_clone_leaves_the_others_working() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("clones.events");
    let sink = EventSink::create(&path, "tap", "").expect("create");
    let other = sink.clone();
    sink.emit(Mark { name: "a".into() });
    let first = sink.finish().expect("finish");
    assert_eq!(first.events_written, 1);
    other.emit(Mark { name: "b".into() });
    let last = other.finish().expect("finish");
    assert_eq!(last.events_written, 2);
    assert_eq!(read_file(&path).expect("read").events.len(), 2);
}

#[test]
fn a_failing_file_is_reported_and_never_blocks() {
    let out = MemWriter {
        fail_after_writes: Some(3), // the header, then two buffers
        ..MemWriter::default()
    };
    let sink = out.sink("pool", 256);
    for i in 0..1000 {
        sink.emit(share_sent(1, i));
    }
    let err = sink.flush().expect_err("flush reports the failure");
    assert_eq!(err.kind(), io::ErrorKind::StorageFull);
    assert!(err.to_string().contains("disk full (test)"), "{err}");
    let stats = sink.stats();
    assert_eq!(stats.events_emitted, 1000);
    assert_eq!(stats.events_written + stats.events_lost, 1000);
    assert!(stats.events_lost > 0);
    assert!(sink.finish().is_err());

    // What did reach the file is readable up to the failure.
    let bytes = out.bytes.lock().expect("lock").clone();
    let (_, events, _) = read_bytes(&bytes);
    assert_eq!(events.len() as u64, stats.events_written);
}

#[test]
fn create_names_the_path_in_its_error() {
    let err = EventSink::create("/nonexistent/dir/x.events", "pool", "").expect_err("fails");
    assert!(
        err.to_string().contains("/nonexistent/dir/x.events"),
        "{err}"
    );
}

#[test]
fn emits_from_async_style_tasks_and_threads_mix() {
    // No runtime here: the point is that emit needs none. Threads that park and wake at random
    // mimic executor workers moving between tasks.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mix.events");
    let sink = EventSink::create(&path, "pool", "").expect("create");
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let sink = sink.clone();
            std::thread::spawn(move || {
                for i in 0..500 {
                    sink.emit(share_sent(t, i));
                    if i % 100 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("join");
    }
    assert_eq!(sink.finish().expect("finish").events_written, 2000);
}
