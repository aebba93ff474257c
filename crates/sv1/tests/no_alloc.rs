//! The share path of the codec (read a submit line, write its reply) allocates nothing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// Armed per thread: the test harness allocates on its own threads (output capture, timing)
// while the test runs, and those allocations are not the share path's.
thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

fn armed() -> bool {
    ARMED.try_with(Cell::get).unwrap_or(false)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if armed() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if armed() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn submit_read_and_reply_allocate_nothing() {
    let mut lines = sv1::LineBuffer::new(4096);
    let mut out = Vec::with_capacity(4096);
    let input = br#"{"params": ["acct.rig1", "6512ab3400000001", "0000000100000002", "5f5e1000", "1a2b3c4d", "00002000"], "id": 4123, "method": "mining.submit"}
"#;
    // Warm up: buffers reach their steady-state capacity.
    lines.feed(input);
    while lines.next_line().is_some() {}
    ARMED.with(|a| a.set(true));
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
    ARMED.with(|a| a.set(false));
    assert_eq!(nonces, 10_000 * 0x1a2b3c4d);
    assert_eq!(ALLOCS.load(Ordering::SeqCst), 0);
}
