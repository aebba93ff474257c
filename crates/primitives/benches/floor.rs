//! The floor: what SHA-256 itself costs on this machine. Later benches state their cost as a
//! multiple of `floor/compress256` measured in the same run.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use primitives::hash::sha256d_header;
use primitives::{merkle_step, Hash256};
use sha2::digest::generic_array::GenericArray;

fn floor(c: &mut Criterion) {
    let mut g = c.benchmark_group("floor");
    let block = GenericArray::clone_from_slice(&[0x5au8; 64]);
    let mut state = [
        0x6a09e667u32,
        0xbb67ae85,
        0x3c6ef372,
        0xa54ff53a,
        0x510e527f,
        0x9b05688c,
        0x1f83d9ab,
        0x5be0cd19,
    ];
    g.bench_function("compress256", |b| {
        b.iter(|| {
            sha2::compress256(
                black_box(&mut state),
                std::slice::from_ref(black_box(&block)),
            );
        })
    });
    let mut header = [0x11u8; 80];
    g.bench_function("sha256d_header", |b| {
        b.iter(|| {
            // Vary the nonce so nothing can be hoisted out of the loop.
            header[76] = header[76].wrapping_add(1);
            sha256d_header(black_box(&header))
        })
    });
    let left = Hash256([0x22; 32]);
    let right = Hash256([0x33; 32]);
    g.bench_function("merkle_step", |b| {
        b.iter(|| merkle_step(black_box(&left), black_box(&right)))
    });
    g.finish();
}

criterion_group!(benches, floor);
criterion_main!(benches);
