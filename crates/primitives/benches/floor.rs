//! The floor: what SHA-256 itself costs on this machine. Later benches state their cost as a
//! multiple of `floor/compress256` measured in the same run.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use primitives::hash::sha256d_header;
use primitives::{merkle_step, Hash256};
use testkit::floor::Floor;

fn floor(c: &mut Criterion) {
    let mut g = c.benchmark_group("floor");
    let mut floor = Floor::new();
    g.bench_function("compress256", |b| b.iter(|| floor.once()));
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
