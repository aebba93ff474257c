//! The floor every bench states its cost against: one SHA-256 compression of a 64-byte block,
//! the least work a share costs any pool. A bench measures it in the same run as what it
//! judges, and reports that as a multiple of it, so the ratio holds across machines.

use std::hint::black_box;
use std::time::{Duration, Instant};

use sha2::digest::consts::U64;
use sha2::digest::generic_array::GenericArray;

/// One SHA-256 compression, repeated on the same state.
#[derive(Clone, Debug)]
pub struct Floor {
    state: [u32; 8],
    block: GenericArray<u8, U64>,
}

impl Default for Floor {
    fn default() -> Self {
        Floor::new()
    }
}

impl Floor {
    /// SHA-256's initial state and a fixed block.
    pub fn new() -> Floor {
        Floor {
            state: [
                0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
                0x5be0cd19,
            ],
            block: GenericArray::clone_from_slice(&[0x5au8; 64]),
        }
    }

    /// One compression (the optimizer sees neither its input nor its output).
    #[inline(always)]
    pub fn once(&mut self) {
        sha2::compress256(
            black_box(&mut self.state),
            std::slice::from_ref(black_box(&self.block)),
        );
    }

    /// The time `n` compressions take.
    pub fn measure(&mut self, n: u64) -> Duration {
        let t = Instant::now();
        for _ in 0..n {
            self.once();
        }
        t.elapsed()
    }

    /// Nanoseconds per compression over `n` of them.
    pub fn ns_per(&mut self, n: u64) -> f64 {
        self.measure(n).as_nanos() as f64 / n.max(1) as f64
    }
}
