//! Cost of one emit on a hot path: a ShareResult into an enabled sink writing a temp file.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use events::*;

/// An accepted share of difficulty 1024 on `conn`, its sequence number and nonce from `i`.
fn share(conn: u64, i: u64, job_id: JobId) -> ShareResult {
    ShareResult {
        conn,
        channel: None,
        seq: i,
        job_id,
        nonce: i as u32,
        difficulty: 1024.0,
        verdict: Verdict::Accepted,
        perspective: Perspective::Given,
    }
}

fn emit(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut file_no = 0u64;
    let mut stalls = 0u64;
    c.bench_function("events/emit", |b| {
        // A fresh file per batch keeps the temp directory small however many iterations
        // criterion picks; creating and finishing it is outside the timed loop.
        b.iter_custom(|iters| {
            file_no += 1;
            let path = dir.path().join(format!("{file_no}.events"));
            let sink = EventSink::create(&path, "pool", "bench").expect("create sink");
            let job_id = JobId::text("5f2a01");
            let start = Instant::now();
            for i in 0..iters {
                sink.emit(share(i & 1023, i, job_id));
            }
            let elapsed = start.elapsed();
            let stats = sink.finish().expect("finish");
            stalls += stats.stalls;
            let _ = std::fs::remove_file(&path);
            elapsed.max(Duration::from_nanos(1))
        })
    });
    eprintln!("events/emit: {stalls} stalls in all batches");

    // The same without the file: the CPU cost of an emit, apart from the disk's bandwidth (a
    // tight loop of emits outruns a slow disk and then measures the disk).
    let sink = EventSink::from_writer(
        std::io::sink(),
        &Header::new("pool", "bench"),
        SinkOptions::default(),
    )
    .expect("sink");
    c.bench_function("events/emit_no_io", |b| {
        let job_id = JobId::text("5f2a01");
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            sink.emit(share(i & 1023, i, job_id))
        });
    });
    let stats = sink.finish().expect("finish");
    eprintln!("events/emit_no_io: {} stalls", stats.stalls);

    c.bench_function("events/emit_disabled", |b| {
        let sink = EventSink::disabled();
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            sink.emit(std::hint::black_box(share(i, i, JobId::Num(i))))
        })
    });
}

criterion_group!(benches, emit);
criterion_main!(benches);
