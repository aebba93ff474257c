//! The share path of the codec (read a submit line, write its reply) allocates nothing.

// Counted on the test's own thread: the harness allocates on its threads (output capture,
// timing) while the test runs, and those allocations are not the share path's.
#[global_allocator]
static GLOBAL: testkit::alloc::Counting = testkit::alloc::Counting;

#[test]
fn submit_read_and_reply_allocate_nothing() {
    let mut lines = sv1::LineBuffer::new(4096);
    let mut out = Vec::with_capacity(4096);
    let input = br#"{"params": ["acct.rig1", "6512ab3400000001", "0000000100000002", "5f5e1000", "1a2b3c4d", "00002000"], "id": 4123, "method": "mining.submit"}
"#;
    // Warm up: buffers reach their steady-state capacity.
    lines.feed(input);
    while lines.next_line().is_some() {}
    let before = testkit::alloc::thread_allocs();
    let mut nonces = 0u64;
    for _ in 0..10_000 {
        lines.feed(input);
        while let Some(line) = lines.next_line() {
            let (e, _) = sv1::parse_line(line.unwrap()).unwrap();
            let s = sv1::Submit::parse(&e).unwrap();
            nonces += s.nonce as u64;
            out.clear();
            sv1::write::reply_bool(&mut out, e.id().unwrap(), true);
        }
    }
    let allocs = testkit::alloc::thread_allocs() - before;
    assert_eq!(nonces, 10_000 * 0x1a2b3c4d);
    assert_eq!(allocs, 0);
}
