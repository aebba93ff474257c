//! `stratumlab jdc`: the Job Declarator Client. The farm's devices connect to it as to a pool
//! (its flags are the pool's: `--sv2-listen`, `--tp` for the farm's node, difficulty and
//! vardiff, `--events`, `--http-listen`); it declares the farm's templates to the pool's JDS
//! (`--jds`) and mines them as custom jobs on the pool (`--upstream`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use jdc::declarer::DeclarerConfig;
use jdc::fallback::FallbackConfig;
use jdc::pool_channel::PoolChannelConfig;
use jdc::shell::{JdcSettings, Upstream};

use crate::cmd::pool::PoolArgs;

#[derive(Args)]
pub struct JdcArgs {
    #[command(flatten)]
    pub pool: PoolArgs,
    /// The pool's Stratum V2 mining endpoint, where declared jobs are set and shares go.
    #[arg(long, value_name = "ADDR")]
    pub upstream: SocketAddr,
    /// The pool's authority public key (it prints it at start). Required unless
    /// --insecure-skip-verify.
    #[arg(long, value_name = "BASE58")]
    pub upstream_authority_key: Option<String>,
    /// The pool's Job Declarator Server.
    #[arg(long, value_name = "ADDR")]
    pub jds: SocketAddr,
    /// The JDS's authority public key (it prints it at start). Required unless
    /// --insecure-skip-verify.
    #[arg(long, value_name = "BASE58")]
    pub jds_authority_key: Option<String>,
    /// The account the pool credits (channel user identity and JDS user identifier).
    #[arg(long, default_value = "stratumlab-jdc")]
    pub user_identity: String,
    /// What the farm hashes, in hashes per second (the pool's first target follows from it).
    #[arg(long, default_value_t = 0.0)]
    pub nominal_hash_rate: f64,
    /// Ask the pool for extension 0x0002 (worker-specific hashrate tracking) and, where it
    /// agrees, name each device on its shares by the user identity its channel was opened with
    /// (cut to 32 bytes), so that the pool accounts each device.
    #[arg(long)]
    pub worker_tracking: bool,
    /// Where the coinbase pays once the JDC leaves a pool that misbehaves (solo mining on the
    /// farm's templates, spec 6.2). Without it the devices keep mining jobs that pay the pool.
    #[arg(long, value_name = "ADDR")]
    pub fallback_payout_address: Option<String>,
}

fn upstream(
    addr: SocketAddr,
    key: &Option<String>,
    insecure: bool,
    flag: &str,
) -> Result<Upstream> {
    Ok(Upstream {
        addr,
        authority: crate::cmd::keys::server_key(key.as_deref(), insecure, flag)?,
    })
}

pub fn run(mut args: JdcArgs) -> Result<()> {
    if args.pool.tp.is_none() {
        bail!("--tp ADDR (the farm's node's Template Provider) is required");
    }
    if args.pool.sv2_listen.is_none() {
        bail!("--sv2-listen ADDR (where the devices connect) is required");
    }
    if args.pool.payout_address.is_some() || args.pool.solo {
        bail!(
            "the coinbase pays the pool's payout output from the JDS: drop --payout-address/--solo"
        );
    }
    // The payout is replaced by the JDS's; the embedded pool only needs a valid one to start.
    args.pool.solo = true;
    let keep_store = args.pool.store.is_some();
    let settings = &args.pool;
    let mut pool = settings.pool_settings()?;
    if !keep_store {
        // A JDC accounts nothing the pool does not; a store is for those who ask.
        pool.store = None;
    }
    let host = args.upstream.ip().to_string();
    let fallback_payout = match &args.fallback_payout_address {
        Some(a) => {
            let network: primitives::bitcoin::Network = settings
                .network
                .parse()
                .with_context(|| format!("--network {}", settings.network))?;
            Some(
                primitives::coinbase::payout_script(a, network)
                    .with_context(|| format!("--fallback-payout-address {a}"))?,
            )
        }
        None => None,
    };
    let jdc = JdcSettings {
        pool,
        jds: upstream(
            args.jds,
            &args.jds_authority_key,
            args.pool.insecure_skip_verify,
            "--jds-authority-key",
        )?,
        upstream: upstream(
            args.upstream,
            &args.upstream_authority_key,
            args.pool.insecure_skip_verify,
            "--upstream-authority-key",
        )?,
        declarer: DeclarerConfig {
            user_identifier: args.user_identity.clone(),
            endpoint_host: args.jds.ip().to_string(),
            endpoint_port: args.jds.port(),
            ..DeclarerConfig::default()
        },
        channel: PoolChannelConfig {
            user_identity: args.user_identity.clone(),
            nominal_hash_rate: args.nominal_hash_rate as f32,
            endpoint_host: host,
            endpoint_port: args.upstream.port(),
            worker_tracking: args.worker_tracking,
            ..PoolChannelConfig::default()
        },
        connect_timeout: Duration::from_secs(5),
        fallback: FallbackConfig::default(),
        fallback_payout,
    };
    let rt = super::runtime(None)?;
    rt.block_on(async move {
        println!(
            "sv2 authority public key {}",
            jdc.pool.sv2.keys.public_key()
        );
        let running = jdc::shell::start(jdc).await.context("jdc")?;
        if let Some(a) = running.pool.sv2_addr {
            println!("sv2 listening on {a}");
        }
        if let Some(a) = running.pool.http_addr {
            println!("http listening on {a}");
        }
        println!("jdc pool payout {}", running.payout);
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        crate::cmd::shutdown_signal(settings.duration.0).await;
        let s = running.stats();
        let snap = running.pool.engine.stats.snapshot(pool::Timestamp::from_millis(0));
        running.shutdown().await?;
        // One line for scripts and tests; the sentence below is for people.
        let mut summary = s.to_json();
        summary["device_shares_accepted"] = snap.accepted.into();
        println!("jdc summary {summary}");
        eprintln!(
            "jdc stopped: {} shares from devices, {} declared jobs ({} refused), {} shares submitted to the pool ({} accepted, {} rejected, {} below its target, {} dropped), {} blocks pushed{}",
            snap.accepted,
            s.declared,
            s.declarations_refused + s.channel.jobs_refused,
            s.channel.shares_submitted,
            s.channel.shares_accepted,
            s.channel.shares_rejected,
            s.channel.below_target,
            s.channel.dropped,
            s.solutions_pushed,
            s.upstream_lost.map(|l| format!("; lost {l}")).unwrap_or_default(),
        );
        Ok(())
    })
}
