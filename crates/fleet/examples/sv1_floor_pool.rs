//! The latency floor for anything that answers SV1 shares on this machine: the fleet's minimal
//! test pool (handshake, one job at a time, every share checked by its SHA-256d and answered at
//! once) as a process of its own, so that `stratumlab bench translator` can pin it where a
//! translator would run and measure it the same way. What a translator adds above this is its
//! own doing; this much is the kernel's and the machine's (waking an idle core, loopback).
//!
//! usage: sv1_floor_pool DIFFICULTY [JOB_INTERVAL_SECS]
//! Prints `sv1 listening on ADDR` (127.0.0.1, any port); serves until SIGTERM or SIGINT.

use std::time::Duration;

use fleet::testpool::{TestPool, TestPoolConfig};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let difficulty: f64 = args.next().and_then(|d| d.parse().ok()).ok_or_else(|| {
        std::io::Error::other("usage: sv1_floor_pool DIFFICULTY [JOB_INTERVAL_SECS]")
    })?;
    let every = args
        .next()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    // As the translator builds its runtime: the worker count follows the CPUs it is pinned to.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let pool = TestPool::start(TestPoolConfig {
            difficulty,
            ..TestPoolConfig::default()
        })
        .await?;
        println!("sv1 listening on {}", pool.addr());
        fleet::testpool::until_signalled(every, || pool.new_job(false)).await
    })
}
