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

use sv2::messages::common::{protocol, SetupConnection, PROTOCOL_VERSION};
use sv2::messages::{Common, Message};
use sv2::{parse_public_key, Limits, NoiseConn, REFERENCE_AUTHORITY_PUBLIC_KEY};
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
    let mut conn = NoiseConn::connect_to_authority(stream, authority, Limits::default()).await?;
    let (host, port) = match addr.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), port.parse().unwrap_or(0)),
        None => (addr.to_owned(), 0),
    };
    conn.send_message(
        &SetupConnection {
            protocol: protocol::MINING,
            min_version: PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            flags: 0,
            endpoint_host: host,
            endpoint_port: port,
            vendor: "stratumlab-probe".into(),
            hardware_version: String::new(),
            firmware: String::new(),
            device_id: String::new(),
        }
        .into(),
    )
    .await?;
    Ok(match conn.read_message().await? {
        Some(Message::Common(Common::SetupConnectionSuccess(m))) => format!(
            "SetupConnection.Success used_version={} flags={:#x}",
            m.used_version, m.flags
        ),
        Some(Message::Common(Common::SetupConnectionError(m))) => {
            format!("SetupConnection.Error {}", m.error_code)
        }
        Some(other) => return Err(format!("unexpected {}", other.name()).into()),
        None => return Err("a message of an unknown extension".into()),
    })
}
