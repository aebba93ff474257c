//! The CPU floor for anything that answers SV2 shares on this machine: the fleet's minimal SV2
//! test pool as a process of its own, so that `stratumlab bench sv2-pool` can pin it where a
//! pool runs and measure it exactly as it measures ours and pool_sv2.
//!
//! Per share it does what no SV2 pool can skip: the wake-up, the read, Noise decryption, decoding,
//! one header hash against the job, a duplicate check, and one encrypted `SubmitShares.Success`
//! written at once. It keeps no accounts, no vardiff, no store, no events, no admission control
//! and no logs. New work reaches every channel every JOB_INTERVAL_SECS, as a pool fans out a
//! template's jobs. What a real pool costs above this is its own doing; this much is the
//! kernel's, the machine's and tokio's.
//!
//! usage: sv2_floor_pool DIFFICULTY [JOB_INTERVAL_SECS]
//! Signs its certificate with the reference authority pair (`AuthorityKeys::reference`).
//! Prints `sv2 listening on ADDR` (127.0.0.1, any port); serves until SIGTERM or SIGINT.

use std::time::Duration;

use fleet::sv2_testpool::{Sv2TestPool, Sv2TestPoolConfig};
use primitives::Difficulty;

fn main() -> std::io::Result<()> {
    let usage = || std::io::Error::other("usage: sv2_floor_pool DIFFICULTY [JOB_INTERVAL_SECS]");
    let mut args = std::env::args().skip(1);
    let difficulty: f64 = args.next().and_then(|d| d.parse().ok()).ok_or_else(usage)?;
    let every = match args.next() {
        Some(s) => Some(Duration::from_secs(s.parse().map_err(|_| usage())?)),
        None => None,
    };
    // As our pool and pool_sv2 build theirs: the worker count follows the CPUs it is pinned to.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let pool = Sv2TestPool::start(Sv2TestPoolConfig {
            target: Difficulty::saturating(difficulty).to_target(),
            ..Sv2TestPoolConfig::default()
        })
        .await?;
        println!("sv2 listening on {}", pool.addr());
        fleet::testpool::until_signalled(every, || pool.new_job()).await?;
        let st = pool.stats();
        eprintln!(
            "sv2 floor pool stopped: {} shares valid, {} stale, {} duplicate, {} low difficulty, {} invalid",
            st.valid.load(std::sync::atomic::Ordering::Relaxed),
            st.stale.load(std::sync::atomic::Ordering::Relaxed),
            st.duplicate.load(std::sync::atomic::Ordering::Relaxed),
            st.low_difficulty.load(std::sync::atomic::Ordering::Relaxed),
            st.invalid.load(std::sync::atomic::Ordering::Relaxed),
        );
        Ok(())
    })
}
