//! What one Noise connection costs once established, and what the steady-state path allocates:
//! the figures behind "thousands of these live in one fleet process".
//!
//! ```text
//! cargo run --release -p sv2 --example footprint -- [CONNECTIONS]
//! ```
//!
//! Establishes CONNECTIONS (default 2000) initiator/responder pairs in memory, exchanges a
//! share and its acknowledgement on each, and reports: the inline size of each side, the heap
//! still held per connection, allocations per frame sent and received (codec_sv2's), and the
//! time to encrypt and decrypt one share frame as a multiple of hashing one block header,
//! measured in the same run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::time::Instant;

use primitives::{CompactTarget, Hash256, Header};
use sv2::fuzz_support::handshake_pair;
use sv2::messages::mining::{SubmitSharesStandard, SubmitSharesSuccess};
use sv2::messages::{Message, Sv2Message};
use sv2::noise::{NoiseInitiator, NoiseResponder, MAX_FRAME_BYTES};

/// Counts live heap bytes and allocation calls.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn share(seq: u32) -> SubmitSharesStandard {
    SubmitSharesStandard {
        channel_id: 1,
        sequence_number: seq,
        job_id: 7,
        nonce: seq.wrapping_mul(2654435761),
        ntime: 1_700_000_000,
        version: 0x2000_0000,
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("CONNECTIONS is a number"))
        .unwrap_or(2000);

    // One-time allocations (the RNG, secp256k1 contexts) are made before counting.
    drop(handshake_pair(MAX_FRAME_BYTES));

    // Established pairs, one share each way, then idle.
    let before = LIVE.load(Ordering::Relaxed);
    let mut pairs: Vec<(NoiseInitiator, NoiseResponder)> = Vec::with_capacity(n);
    let mut payload = Vec::new();
    let mut wire = Vec::new();
    for i in 0..n {
        let (mut c, mut s) = handshake_pair(MAX_FRAME_BYTES);
        payload.clear();
        wire.clear();
        share(i as u32).encode(&mut payload).unwrap();
        c.encrypt(SubmitSharesStandard::MSG_TYPE, 0x8000, &payload, &mut wire)
            .unwrap();
        s.feed(&wire).unwrap();
        s.next_frame().unwrap().unwrap();
        payload.clear();
        wire.clear();
        SubmitSharesSuccess {
            channel_id: 1,
            last_sequence_number: i as u32,
            new_submits_accepted_count: 1,
            new_shares_sum: 1,
        }
        .encode(&mut payload)
        .unwrap();
        s.encrypt(SubmitSharesSuccess::MSG_TYPE, 0x8000, &payload, &mut wire)
            .unwrap();
        c.feed(&wire).unwrap();
        c.next_frame().unwrap().unwrap();
        pairs.push((c, s));
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    let vec_bytes =
        (pairs.capacity() * std::mem::size_of::<(NoiseInitiator, NoiseResponder)>()) as isize;
    let heap_per_pair = (held - vec_bytes) as f64 / n as f64;
    println!("connections:                 {n} pairs established, one share and one ack each");
    println!(
        "inline size:                 NoiseInitiator {} B, NoiseResponder {} B",
        std::mem::size_of::<NoiseInitiator>(),
        std::mem::size_of::<NoiseResponder>()
    );
    println!(
        "heap held per side, idle:    {:.1} B (measured by the allocator, both sides of {n} pairs)",
        heap_per_pair / 2.0
    );

    // Steady state on one pair: allocations and time per share frame.
    let (c, s) = &mut pairs[0];
    let rounds = 20_000u32;
    let mut out = Vec::with_capacity(256);
    payload.clear();
    let allocs = ALLOCS.load(Ordering::Relaxed);
    for i in 0..rounds {
        payload.clear();
        share(i).encode(&mut payload).unwrap();
    }
    let encode_allocs = (ALLOCS.load(Ordering::Relaxed) - allocs) as f64 / rounds as f64;
    let allocs = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..rounds {
        out.clear();
        c.encrypt(SubmitSharesStandard::MSG_TYPE, 0x8000, &payload, &mut out)
            .unwrap();
    }
    let encrypt_allocs = (ALLOCS.load(Ordering::Relaxed) - allocs) as f64 / rounds as f64;
    // Decrypt what a fresh sender encrypts (the pair's counters must stay in step).
    let (mut c2, mut s2) = handshake_pair(MAX_FRAME_BYTES);
    let mut stream = Vec::new();
    for _ in 0..rounds {
        c2.encrypt(
            SubmitSharesStandard::MSG_TYPE,
            0x8000,
            &payload,
            &mut stream,
        )
        .unwrap();
    }
    let frame_len = stream.len() / rounds as usize;
    let mut frames = Vec::with_capacity(rounds as usize);
    let allocs = ALLOCS.load(Ordering::Relaxed);
    for chunk in stream.chunks(frame_len) {
        s2.feed(chunk).unwrap();
        frames.push(s2.next_frame().unwrap().unwrap());
    }
    let decrypt_allocs = (ALLOCS.load(Ordering::Relaxed) - allocs) as f64 / rounds as f64;
    let allocs = ALLOCS.load(Ordering::Relaxed);
    for f in &mut frames {
        black_box(Message::decode(f.msg_type(), &mut f.payload).unwrap());
    }
    let decode_allocs = (ALLOCS.load(Ordering::Relaxed) - allocs) as f64 / rounds as f64;
    let _ = s;

    // Time per share, step by step, against hashing a header.
    let (mut c3, mut s3) = handshake_pair(MAX_FRAME_BYTES);
    let (mut t_encode, mut t_encrypt, mut t_decrypt, mut t_decode) = (0u128, 0u128, 0u128, 0u128);
    for i in 0..rounds {
        let t = Instant::now();
        payload.clear();
        share(i).encode(&mut payload).unwrap();
        let t1 = Instant::now();
        out.clear();
        c3.encrypt(SubmitSharesStandard::MSG_TYPE, 0x8000, &payload, &mut out)
            .unwrap();
        let t2 = Instant::now();
        s3.feed(&out).unwrap();
        let mut f = s3.next_frame().unwrap().unwrap();
        let t3 = Instant::now();
        black_box(SubmitSharesStandard::decode(&mut f.payload).unwrap());
        let t4 = Instant::now();
        t_encode += (t1 - t).as_nanos();
        t_encrypt += (t2 - t1).as_nanos();
        t_decrypt += (t3 - t2).as_nanos();
        t_decode += (t4 - t3).as_nanos();
    }
    let per = |t: u128| t as f64 / rounds as f64;
    let frame_ns = per(t_encode + t_encrypt + t_decrypt + t_decode);
    let mut header = Header {
        version: 0x2000_0000,
        prev_hash: Hash256([1; 32]),
        merkle_root: Hash256([2; 32]),
        time: 1_700_000_000,
        bits: CompactTarget::from_consensus(0x207f_ffff),
        nonce: 0,
    };
    let hashes = 200_000u32;
    let t = Instant::now();
    for i in 0..hashes {
        header.nonce = i;
        black_box(header.block_hash());
    }
    let hash_ns = t.elapsed().as_nanos() as f64 / hashes as f64;

    println!("share frame on the wire:     {frame_len} B");
    println!(
        "allocations per share:       encode {encode_allocs:.1}, encrypt {encrypt_allocs:.1}, \
         feed+decrypt {decrypt_allocs:.1}, decode {decode_allocs:.1}"
    );
    println!(
        "one share end to end:        {frame_ns:.0} ns = {:.1} header hashes ({hash_ns:.0} ns each)",
        frame_ns / hash_ns
    );
    println!(
        "  of which (header hashes):  encode {:.1}, encrypt {:.1}, feed+decrypt {:.1}, decode {:.1}",
        per(t_encode) / hash_ns,
        per(t_encrypt) / hash_ns,
        per(t_decrypt) / hash_ns,
        per(t_decode) / hash_ns
    );
}
