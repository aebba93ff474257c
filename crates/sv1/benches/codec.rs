//! The Stratum V1 codec on the share path: reading a `mining.submit` line and writing its reply.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use sv1::message::{parse_line, Submit};
use sv1::write;

fn codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("sv1_codec");
    let line = br#"{"params": ["bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4.rig1", "6512ab3400000001", "0000000100000002", "5f5e1000", "1a2b3c4d", "00002000"], "id": 4123, "method": "mining.submit"}"#;
    g.bench_function("parse_submit", |b| {
        b.iter(|| {
            let (e, _) = parse_line(black_box(line)).unwrap();
            Submit::parse(&e).unwrap().nonce
        })
    });
    let mut out = Vec::with_capacity(256);
    g.bench_function("reply_true", |b| {
        b.iter(|| {
            out.clear();
            write::reply_bool(&mut out, black_box("4123"), true);
            out.len()
        })
    });
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
