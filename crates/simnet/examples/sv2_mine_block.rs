//! A one-shot SV2 mining device: opens a standard channel on a pool, grinds the first job until
//! its header meets the network target, submits it as a share and reports the pool's answer.
//! At a network difficulty of 2^-20 that is about 4,096 hashes.
//!
//! The interop script uses it to close the loop through a reference pool: the pool sees a
//! block-finding share and sends `SubmitSolution` to its Template Provider (simnet), which
//! rebuilds the block and hands it to the node.
//!
//! ```text
//! cargo run --example sv2_mine_block -- ADDR [AUTHORITY_PUBLIC_KEY]
//! ```
//!
//! Exits 0 after `SubmitShares.Success` for the block, 1 on anything else.

use std::collections::HashMap;
use std::time::Duration;

use binary_sv2::{Str0255Owned, U256Owned};
use common_messages_sv2::{
    Protocol, SetupConnectionOwned, MESSAGE_TYPE_SETUP_CONNECTION,
    MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS,
};
use mining_sv2::{
    NewMiningJob, OpenStandardMiningChannelOwned, OpenStandardMiningChannelSuccess, SetNewPrevHash,
    SubmitSharesError, SubmitSharesStandard, MESSAGE_TYPE_MINING_SET_NEW_PREV_HASH,
    MESSAGE_TYPE_NEW_MINING_JOB, MESSAGE_TYPE_OPEN_MINING_CHANNEL_ERROR,
    MESSAGE_TYPE_OPEN_STANDARD_MINING_CHANNEL, MESSAGE_TYPE_OPEN_STANDARD_MINING_CHANNEL_SUCCESS,
    MESSAGE_TYPE_SUBMIT_SHARES_ERROR, MESSAGE_TYPE_SUBMIT_SHARES_STANDARD,
    MESSAGE_TYPE_SUBMIT_SHARES_SUCCESS,
};
use noise_sv2::Initiator;
use primitives::{CompactTarget, Hash256, Header, Target};
use simnet::tdp::{parse_public_key, Limits, NoiseConn, REFERENCE_AUTHORITY_PUBLIC_KEY};
use tokio::net::TcpStream;

/// SetupConnection flag for the Mining Protocol: standard jobs per standard channel.
const REQUIRES_STANDARD_JOBS: u32 = 1;
/// Hashes tried before giving up (the network target is too hard for a one-shot miner).
const MAX_HASHES: u32 = 1 << 26;

type Error = Box<dyn std::error::Error>;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let Some(addr) = args.next() else {
        eprintln!("usage: sv2_mine_block ADDR [AUTHORITY_PUBLIC_KEY]");
        std::process::exit(2);
    };
    let key = args
        .next()
        .unwrap_or_else(|| REFERENCE_AUTHORITY_PUBLIC_KEY.to_owned());
    match tokio::time::timeout(Duration::from_secs(60), mine(&addr, &key)).await {
        Ok(Ok(report)) => println!("sv2 miner {addr}: {report}"),
        Ok(Err(e)) => {
            println!("sv2 miner {addr}: failed: {e}");
            std::process::exit(1);
        }
        Err(_) => {
            println!("sv2 miner {addr}: no block within 60s");
            std::process::exit(1);
        }
    }
}

fn err(e: impl std::fmt::Debug) -> Error {
    format!("{e:?}").into()
}

struct Job {
    version: u32,
    merkle_root: [u8; 32],
}

async fn mine(addr: &str, key: &str) -> Result<String, Error> {
    let authority = parse_public_key(key)?;
    let stream = TcpStream::connect(addr).await?;
    let mut conn = NoiseConn::connect(
        stream,
        Initiator::from_raw_k(authority).map_err(err)?,
        Limits::default(),
    )
    .await?;
    let s = |v: &str| Str0255Owned::try_from(v).map_err(err);
    conn.send(
        MESSAGE_TYPE_SETUP_CONNECTION,
        SetupConnectionOwned {
            protocol: Protocol::MiningProtocol,
            min_version: 2,
            max_version: 2,
            flags: REQUIRES_STANDARD_JOBS,
            endpoint_host: s("127.0.0.1")?,
            endpoint_port: 0,
            vendor: s("stratumlab-miner")?,
            hardware_version: s("")?,
            firmware: s("")?,
            device_id: s("")?,
        },
    )
    .await?;
    let f = conn.read_frame().await?;
    if f.msg_type() != MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS {
        return Err(format!("SetupConnection answered with type {:#04x}", f.msg_type()).into());
    }
    conn.send(
        MESSAGE_TYPE_OPEN_STANDARD_MINING_CHANNEL,
        OpenStandardMiningChannelOwned {
            request_id: 1,
            user_identity: s("stratumlab-miner")?,
            nominal_hash_rate: 1000.0,
            max_target: U256Owned::from([0xff; 32]),
        },
    )
    .await?;

    let mut channel = None;
    let mut jobs: HashMap<u32, Job> = HashMap::new();
    loop {
        let mut f = conn.read_frame().await?;
        match f.msg_type() {
            MESSAGE_TYPE_OPEN_STANDARD_MINING_CHANNEL_SUCCESS => {
                let m: OpenStandardMiningChannelSuccess =
                    binary_sv2::from_bytes(&mut f.payload).map_err(err)?;
                channel = Some(m.channel_id);
            }
            MESSAGE_TYPE_OPEN_MINING_CHANNEL_ERROR => return Err("OpenMiningChannel.Error".into()),
            MESSAGE_TYPE_NEW_MINING_JOB => {
                let m: NewMiningJob = binary_sv2::from_bytes(&mut f.payload).map_err(err)?;
                jobs.insert(
                    m.job_id,
                    Job {
                        version: m.version,
                        merkle_root: m.merkle_root.to_array(),
                    },
                );
            }
            MESSAGE_TYPE_MINING_SET_NEW_PREV_HASH => {
                let m: SetNewPrevHash = binary_sv2::from_bytes(&mut f.payload).map_err(err)?;
                let channel = channel.ok_or("SetNewPrevHash before the channel opened")?;
                let job = jobs
                    .get(&m.job_id)
                    .ok_or("SetNewPrevHash for a job never sent")?;
                let mut header = Header {
                    version: job.version,
                    prev_hash: Hash256(m.prev_hash.to_array()),
                    merkle_root: Hash256(job.merkle_root),
                    time: m.min_ntime,
                    bits: CompactTarget(m.nbits),
                    nonce: 0,
                };
                let target = Target::from_compact(header.bits).map_err(err)?;
                while !target.is_met_by(&header.block_hash().0) {
                    header.nonce += 1;
                    if header.nonce >= MAX_HASHES {
                        return Err("network target too hard for a one-shot miner".into());
                    }
                }
                conn.send_frame(
                    0,
                    true,
                    MESSAGE_TYPE_SUBMIT_SHARES_STANDARD,
                    SubmitSharesStandard {
                        channel_id: channel,
                        sequence_number: 0,
                        job_id: m.job_id,
                        nonce: header.nonce,
                        ntime: header.time,
                        version: header.version,
                    },
                )
                .await?;
                println!(
                    "sv2 miner: submitted block {} after {} hashes",
                    header.block_hash(),
                    header.nonce as u64 + 1
                );
                return await_verdict(&mut conn, header.block_hash()).await;
            }
            // SetTarget, SetGroupChannel and the like: nothing to do for one share.
            _ => {}
        }
    }
}

async fn await_verdict(conn: &mut NoiseConn, hash: Hash256) -> Result<String, Error> {
    loop {
        let mut f = conn.read_frame().await?;
        match f.msg_type() {
            MESSAGE_TYPE_SUBMIT_SHARES_SUCCESS => {
                return Ok(format!("SubmitShares.Success for block {hash}"))
            }
            MESSAGE_TYPE_SUBMIT_SHARES_ERROR => {
                let m: SubmitSharesError = binary_sv2::from_bytes(&mut f.payload).map_err(err)?;
                return Err(format!(
                    "SubmitShares.Error {}",
                    String::from_utf8_lossy(m.error_code.as_bytes())
                )
                .into());
            }
            _ => {}
        }
    }
}
