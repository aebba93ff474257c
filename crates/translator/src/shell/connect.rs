//! Reaching an upstream: TCP, the Noise handshake against the pool's authority key, and
//! SetupConnection for the Mining protocol. Opening the channel is the core's business (it
//! owns the translator); this only hands it a connection that is ready for one.

use std::net::SocketAddr;
use std::time::Duration;

use sv2::messages::common::{mining_flags, protocol, Common, SetupConnection, PROTOCOL_VERSION};
use sv2::{Limits, Message, NoiseConn};
use tokio::net::TcpStream;

use super::backoff::Backoff;
use super::ShellError;

/// One pool the translator may work for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamSpec {
    pub addr: SocketAddr,
    /// The authority key the pool's Noise certificate must be signed with.
    pub authority_key: [u8; 32],
}

/// A connection past SetupConnection.
pub struct Connected {
    /// Which of the configured upstreams.
    pub index: usize,
    pub conn: NoiseConn,
    pub local: SocketAddr,
    /// The pool checks the version as sent: devices must not roll it.
    pub fixed_version: bool,
}

/// Connects to `spec` and sets up a Mining connection.
pub async fn connect(
    index: usize,
    spec: &UpstreamSpec,
    firmware: &str,
) -> Result<Connected, ShellError> {
    let stream = TcpStream::connect(spec.addr)
        .await
        .map_err(|source| ShellError::Connect {
            addr: spec.addr,
            source,
        })?;
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(spec.addr);
    let mut conn =
        NoiseConn::connect_to_authority(stream, spec.authority_key, Limits::default()).await?;
    let setup = SetupConnection {
        protocol: protocol::MINING,
        min_version: PROTOCOL_VERSION,
        max_version: PROTOCOL_VERSION,
        // Extended channels, and devices that may roll version bits if the pool lets them.
        flags: 0,
        endpoint_host: spec.addr.ip().to_string(),
        endpoint_port: spec.addr.port(),
        vendor: "stratumlab".into(),
        hardware_version: String::new(),
        firmware: firmware.into(),
        device_id: String::new(),
    };
    conn.send_message(&setup.into()).await?;
    loop {
        match conn.read_message().await? {
            Some(Message::Common(Common::SetupConnectionSuccess(s))) => {
                return Ok(Connected {
                    index,
                    conn,
                    local,
                    fixed_version: s.flags & mining_flags::REQUIRES_FIXED_VERSION != 0,
                })
            }
            Some(Message::Common(Common::SetupConnectionError(e))) => {
                return Err(ShellError::Setup(e.error_code));
            }
            Some(other) => tracing::debug!(?other, "translator: ignored before setup"),
            None => {}
        }
    }
}

/// Tries every upstream once, in order from `first`, each within `timeout`; after a round
/// that reached none, waits as `backoff` says and goes round again. Ends only with a
/// connection (the caller drops the task to stop it).
pub async fn connect_any(
    upstreams: &[UpstreamSpec],
    first: usize,
    timeout: Duration,
    mut backoff: Backoff,
    firmware: &str,
) -> Connected {
    loop {
        for k in 0..upstreams.len() {
            let index = (first + k) % upstreams.len();
            let spec = &upstreams[index];
            match tokio::time::timeout(timeout, connect(index, spec, firmware)).await {
                Ok(Ok(c)) => return c,
                Ok(Err(e)) => {
                    tracing::warn!(upstream = %spec.addr, index, error = %e, "translator: upstream attempt failed");
                }
                Err(_) => {
                    tracing::warn!(upstream = %spec.addr, index, ?timeout, "translator: upstream attempt timed out");
                }
            }
        }
        let wait = backoff.next_delay();
        tracing::info!(?wait, "translator: no upstream reachable; retrying");
        tokio::time::sleep(wait).await;
    }
}
