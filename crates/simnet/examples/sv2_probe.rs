//! Checks that an SV2 server answers: Noise handshake against an authority key, then
//! `SetupConnection` for the Mining Protocol, and reports the answer. Used by the interop script
//! to see that a pool started serving miners (a TCP connect alone proves little: the kernel
//! accepts into the backlog before the pool's accept loop runs).
//!
//! ```text
//! cargo run --example sv2_probe -- ADDR [AUTHORITY_PUBLIC_KEY]
//! ```
//!
//! Exits 0 when the server answered `SetupConnection.Success` or `.Error`, 1 otherwise.

use std::time::Duration;

use common_messages_sv2::{
    Protocol, SetupConnectionError, SetupConnectionOwned, SetupConnectionSuccess,
    MESSAGE_TYPE_SETUP_CONNECTION, MESSAGE_TYPE_SETUP_CONNECTION_ERROR,
    MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS,
};
use noise_sv2::Initiator;
use simnet::tdp::{parse_public_key, Limits, NoiseConn, REFERENCE_AUTHORITY_PUBLIC_KEY};
use tokio::net::TcpStream;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let Some(addr) = args.next() else {
        eprintln!("usage: sv2_probe ADDR [AUTHORITY_PUBLIC_KEY]");
        std::process::exit(2);
    };
    let key = args
        .next()
        .unwrap_or_else(|| REFERENCE_AUTHORITY_PUBLIC_KEY.to_owned());
    match tokio::time::timeout(Duration::from_secs(15), probe(&addr, &key)).await {
        Ok(Ok(answer)) => println!("sv2 probe {addr}: {answer}"),
        Ok(Err(e)) => {
            println!("sv2 probe {addr}: failed: {e}");
            std::process::exit(1);
        }
        Err(_) => {
            println!("sv2 probe {addr}: no answer within 15s");
            std::process::exit(1);
        }
    }
}

async fn probe(addr: &str, key: &str) -> Result<String, Box<dyn std::error::Error>> {
    let authority = parse_public_key(key)?;
    let stream = TcpStream::connect(addr).await?;
    let initiator = Initiator::from_raw_k(authority).map_err(|e| format!("{e:?}"))?;
    let mut conn = NoiseConn::connect(stream, initiator, Limits::default()).await?;
    let peer = conn_peer(addr);
    conn.send(
        MESSAGE_TYPE_SETUP_CONNECTION,
        SetupConnectionOwned {
            protocol: Protocol::MiningProtocol,
            min_version: 2,
            max_version: 2,
            flags: 0,
            endpoint_host: peer.0.as_str().try_into().map_err(|e| format!("{e:?}"))?,
            endpoint_port: peer.1,
            vendor: "stratumlab-probe"
                .try_into()
                .map_err(|e| format!("{e:?}"))?,
            hardware_version: "".try_into().map_err(|e| format!("{e:?}"))?,
            firmware: "".try_into().map_err(|e| format!("{e:?}"))?,
            device_id: "".try_into().map_err(|e| format!("{e:?}"))?,
        },
    )
    .await?;
    let mut frame = conn.read_frame().await?;
    Ok(match frame.msg_type() {
        MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS => {
            let m: SetupConnectionSuccess =
                binary_sv2::from_bytes(&mut frame.payload).map_err(|e| format!("{e:?}"))?;
            format!(
                "SetupConnection.Success used_version={} flags={:#x}",
                m.used_version, m.flags
            )
        }
        MESSAGE_TYPE_SETUP_CONNECTION_ERROR => {
            let m: SetupConnectionError =
                binary_sv2::from_bytes(&mut frame.payload).map_err(|e| format!("{e:?}"))?;
            format!(
                "SetupConnection.Error {}",
                String::from_utf8_lossy(m.error_code.as_bytes())
            )
        }
        other => return Err(format!("unexpected message type {other:#04x}").into()),
    })
}

fn conn_peer(addr: &str) -> (String, u16) {
    match addr.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), port.parse().unwrap_or(0)),
        None => (addr.to_owned(), 0),
    }
}
