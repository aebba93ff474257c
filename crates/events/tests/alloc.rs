//! Steady-state emission allocates nothing: a counting global allocator sees every allocation in
//! the process (the writer thread's included) while 10k events are emitted after a warm-up.
//!
//! Runs without the test harness (`harness = false`) so that no other test thread allocates
//! while it counts.

use events::*;

#[global_allocator]
static GLOBAL: testkit::alloc::Counting = testkit::alloc::Counting;

fn share(i: u64) -> ShareResult {
    ShareResult {
        conn: i % 100,
        channel: None,
        seq: i,
        job_id: JobId::text("5f2a01"),
        nonce: i as u32,
        difficulty: 1024.0,
        verdict: if i % 50 == 0 {
            Verdict::Rejected(Reason::Stale)
        } else {
            Verdict::Accepted
        },
        perspective: Perspective::Given,
    }
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("alloc.events");
    // Small buffers so that the measured events cycle through every buffer many times.
    let options = SinkOptions {
        buffer_bytes: 4096,
        buffers: 3,
        ..SinkOptions::default()
    };
    let sink = EventSink::create_with(&path, "pool", "alloc", options).expect("create sink");

    // Warm-up: every buffer handed to the writer and back, the writer's first waits done.
    for i in 0..10_000 {
        sink.emit(share(i));
    }
    sink.flush().expect("flush");
    // One idle flush interval too.
    std::thread::sleep(options.flush_interval + std::time::Duration::from_millis(70));

    let before = testkit::alloc::process_allocs();
    for i in 0..10_000 {
        sink.emit(share(i));
        if i % 1000 == 0 {
            sink.emit(TemplateCreated {
                node: ShortStr::new("pool"),
                template_id: i,
                height: 800_000,
                prev_hash: Hash256([7; 32]),
                value_sats: 312_500_000,
                fees_sats: 0,
                tx_count: 0,
                fingerprint: fingerprint(&Hash256([7; 32]), &[]),
                future: false,
            });
        }
    }
    sink.flush().expect("flush");
    let allocations = testkit::alloc::process_allocs() - before;

    let stats = sink.finish().expect("finish");
    assert_eq!(stats.events_written, 20_010);
    assert!(
        allocations == 0,
        "emitting 10k events after warm-up allocated {allocations} times"
    );
    println!("alloc: 10k emits after warm-up, 0 allocations");
}
