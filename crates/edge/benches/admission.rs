//! `admission/decision`: one rate-limit decision (hash, shard lock, bucket update).

use std::net::{IpAddr, Ipv4Addr};

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use edge::{Rate, RateLimiter, Timestamp};

fn admission(c: &mut Criterion) {
    let l = RateLimiter::new(
        Rate {
            per_second: 1e9,
            burst: 1e9,
        },
        100_000,
    );
    let ips: Vec<IpAddr> = (0..10_000u32)
        .map(|n| IpAddr::V4(Ipv4Addr::from(0x7f00_0000 | n)))
        .collect();
    let mut i = 0usize;
    let mut now = 0u64;
    c.bench_function("admission/decision", |b| {
        b.iter(|| {
            i = (i + 1) % ips.len();
            now += 1;
            l.check(black_box(ips[i]), Timestamp::from_millis(now))
        })
    });
}

criterion_group!(benches, admission);
criterion_main!(benches);
