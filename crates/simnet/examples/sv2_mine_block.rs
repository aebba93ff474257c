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

use primitives::{CompactTarget, Hash256, Header, Target};
use sv2::messages::common::{mining_flags, protocol, SetupConnection, PROTOCOL_VERSION};
use sv2::messages::mining::{OpenStandardMiningChannel, SubmitSharesStandard};
use sv2::messages::{Common, DecodeError, Message, Mining};
use sv2::{parse_public_key, Limits, NoiseConn, REFERENCE_AUTHORITY_PUBLIC_KEY};
use tokio::net::TcpStream;

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

struct Job {
    version: u32,
    merkle_root: [u8; 32],
}

async fn mine(addr: &str, key: &str) -> Result<String, Error> {
    let authority = parse_public_key(key)?;
    let stream = TcpStream::connect(addr).await?;
    let mut conn = NoiseConn::connect_to_authority(stream, authority, Limits::default()).await?;
    conn.send_message(
        &SetupConnection {
            protocol: protocol::MINING,
            min_version: PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            flags: mining_flags::REQUIRES_STANDARD_JOBS,
            endpoint_host: "127.0.0.1".into(),
            endpoint_port: 0,
            vendor: "stratumlab-miner".into(),
            hardware_version: String::new(),
            firmware: String::new(),
            device_id: String::new(),
        }
        .into(),
    )
    .await?;
    match next_message(&mut conn).await? {
        Message::Common(Common::SetupConnectionSuccess(_)) => {}
        other => return Err(format!("SetupConnection answered with {other:?}").into()),
    }
    conn.send_message(
        &OpenStandardMiningChannel {
            request_id: 1,
            user_identity: "stratumlab-miner".into(),
            nominal_hash_rate: 1000.0,
            max_target: Target::MAX,
        }
        .into(),
    )
    .await?;

    let mut channel = None;
    let mut jobs: HashMap<u32, Job> = HashMap::new();
    loop {
        let Message::Mining(m) = next_message(&mut conn).await? else {
            continue;
        };
        match m {
            Mining::OpenStandardMiningChannelSuccess(m) => channel = Some(m.channel_id),
            Mining::OpenMiningChannelError(m) => {
                return Err(format!("OpenMiningChannel.Error {}", m.error_code).into())
            }
            Mining::NewMiningJob(m) => {
                jobs.insert(
                    m.job_id,
                    Job {
                        version: m.version,
                        merkle_root: m.merkle_root,
                    },
                );
            }
            Mining::SetNewPrevHash(m) => {
                let channel = channel.ok_or("SetNewPrevHash before the channel opened")?;
                let job = jobs
                    .get(&m.job_id)
                    .ok_or("SetNewPrevHash for a job never sent")?;
                let mut header = Header {
                    version: job.version,
                    prev_hash: Hash256(m.prev_hash),
                    merkle_root: Hash256(job.merkle_root),
                    time: m.min_ntime,
                    bits: CompactTarget::from_consensus(m.nbits),
                    nonce: 0,
                };
                let target = Target::from_compact(header.bits).map_err(|e| format!("{e}"))?;
                while !target.is_met_by(&header.block_hash().0) {
                    header.nonce += 1;
                    if header.nonce >= MAX_HASHES {
                        return Err("network target too hard for a one-shot miner".into());
                    }
                }
                conn.send_message(
                    &SubmitSharesStandard {
                        channel_id: channel,
                        sequence_number: 0,
                        job_id: m.job_id,
                        nonce: header.nonce,
                        ntime: header.time,
                        version: header.version,
                    }
                    .into(),
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

/// The next message this miner can read; frames of other extensions and message types it does
/// not know are skipped, as a device would.
async fn next_message(conn: &mut NoiseConn) -> Result<Message, Error> {
    loop {
        let mut frame = conn.read_frame().await?;
        if frame.extension() != 0 {
            continue;
        }
        match Message::decode(frame.msg_type(), &mut frame.payload) {
            Ok(m) => return Ok(m),
            Err(DecodeError::UnknownType(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

async fn await_verdict(conn: &mut NoiseConn, hash: Hash256) -> Result<String, Error> {
    loop {
        match next_message(conn).await? {
            Message::Mining(Mining::SubmitSharesSuccess(_)) => {
                return Ok(format!("SubmitShares.Success for block {hash}"))
            }
            Message::Mining(Mining::SubmitSharesError(m)) => {
                return Err(format!("SubmitShares.Error {}", m.error_code).into())
            }
            _ => {}
        }
    }
}
