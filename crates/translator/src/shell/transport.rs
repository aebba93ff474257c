//! How the shell talks to an upstream: connecting (with whatever handshake precedes opening the
//! channel), reading and writing the uplink's messages. The core task is written once over
//! this; the translator uses [`Sv2Transport`] (Noise, SetupConnection, SV2 frames), the SV1
//! proxy [`super::sv1_conn::Sv1Transport`] (newline-delimited JSON).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use events::LinkCounter;

use sv2::messages::common::{mining_flags, protocol, Common, SetupConnection};
use sv2::messages::extensions::RequestExtensions;
use sv2::messages::Mining;
use sv2::negotiation::{self, Outcome};
use sv2::{Limits, Message, NoiseConn, Side};
use tokio::net::TcpStream;

use super::connect::UpstreamSpec;
use super::ShellError;
use crate::upstream::UpstreamChannel;
use crate::Uplink;

/// An upstream connection of one protocol.
pub trait Transport: Sized + Send + 'static {
    /// The uplink that speaks this protocol to the core.
    type Uplink: Uplink<In = Self::In, Out = Self::Out> + Send + 'static;
    /// A message from the upstream.
    type In: Send + 'static;
    /// A message to the upstream.
    type Out: Send + 'static;

    /// A fresh uplink, for a new connection.
    fn uplink() -> Self::Uplink;

    /// Connects to `spec` and does what the protocol does before a channel can be asked for;
    /// the connection's wire bytes count into `net`.
    fn connect(
        spec: &UpstreamSpec,
        hello: Hello<'_>,
        net: &Arc<LinkCounter>,
    ) -> impl Future<Output = Result<Link<Self>, ShellError>> + Send;

    /// The next message; cancellation safe (a `select!` may drop it between messages).
    fn read(&mut self) -> impl Future<Output = Result<Self::In, ShellError>> + Send;

    /// Sends one message.
    fn send(&mut self, m: Self::Out) -> impl Future<Output = Result<(), ShellError>> + Send;

    /// Ends the connection politely, waiting at most `linger`.
    fn close(self, linger: Duration) -> impl Future<Output = ()> + Send;

    /// Whether `m` may bring devices something (work, a target, an extranonce): the core then
    /// hands every device its bytes. Share verdicts do not.
    fn fans_out(m: &Self::In) -> bool;
}

/// What the translator says of itself when it connects.
#[derive(Clone, Copy, Debug)]
pub struct Hello<'a> {
    /// `SetupConnection.firmware`: the translator's version.
    pub firmware: &'a str,
    /// Extensions to ask the upstream for (SV2 only; none: no request is sent).
    pub extensions: &'a [u16],
    /// How long to wait for their answer before going on without them.
    pub answer_wait: Duration,
}

/// A connection ready for the channel to be asked for.
pub struct Link<T> {
    /// The connection.
    pub conn: T,
    /// The local address of the connection.
    pub local: SocketAddr,
    /// The pool checks the version as sent: devices must not roll it.
    pub fixed_version: bool,
    /// The extensions the upstream agreed to (of [`Hello::extensions`]).
    pub extensions: Vec<u16>,
}

/// A TCP connection to the upstream, Nagle off, and its local address (for the link's events).
pub(super) async fn dial(spec: &UpstreamSpec) -> Result<(TcpStream, SocketAddr), ShellError> {
    let stream = TcpStream::connect(spec.addr)
        .await
        .map_err(|source| ShellError::Connect {
            addr: spec.addr,
            source,
        })?;
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(spec.addr);
    Ok((stream, local))
}

/// SV2 over Noise: the translator's upstream.
pub struct Sv2Transport(NoiseConn);

/// Extension 0x0001 from the client's side: asks for `hello.extensions` right after
/// `SetupConnection.Success` and returns what the upstream agreed to. An upstream that does not
/// answer within `hello.answer_wait` does not know the extension (the spec has it ignore the
/// request): the connection goes on without extensions. One that requires
/// extensions the translator did not ask for would close the connection: that is an error, and
/// the next upstream is tried.
async fn negotiate(
    conn: &mut NoiseConn,
    hello: &Hello<'_>,
    spec: &UpstreamSpec,
) -> Result<Vec<u16>, ShellError> {
    let wanted = hello.extensions;
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    const REQUEST_ID: u16 = 1;
    let request = RequestExtensions {
        request_id: REQUEST_ID,
        requested_extensions: wanted.to_vec(),
    };
    conn.send_message(&request.into()).await?;
    let wait = hello.answer_wait;
    let answered = tokio::time::timeout(wait, async {
        loop {
            match conn.read_message().await? {
                Some(Message::Extensions(reply)) => {
                    if let Some(o) = negotiation::outcome(&reply, REQUEST_ID, wanted) {
                        return Ok::<_, ShellError>(o);
                    }
                }
                Some(other) => {
                    tracing::debug!(?other, "translator: ignored while negotiating extensions")
                }
                None => {}
            }
        }
    })
    .await;
    match answered {
        Ok(Ok(Outcome::Using(using))) => {
            tracing::info!(upstream = %spec.addr, requested = ?wanted, using = ?using, "upstream extensions negotiated");
            Ok(using)
        }
        Ok(Ok(Outcome::Required(required))) => Err(ShellError::Setup(format!(
            "the upstream requires extensions {required:#06x?}, which the translator does not use"
        ))),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            tracing::info!(upstream = %spec.addr, ?wait, "upstream did not answer RequestExtensions: going on without extensions");
            Ok(Vec::new())
        }
    }
}

impl Transport for Sv2Transport {
    type Uplink = UpstreamChannel;
    type In = Mining;
    type Out = Mining;

    fn uplink() -> UpstreamChannel {
        UpstreamChannel::new()
    }

    async fn connect(
        spec: &UpstreamSpec,
        hello: Hello<'_>,
        net: &Arc<LinkCounter>,
    ) -> Result<Link<Self>, ShellError> {
        let (stream, local) = dial(spec).await?;
        let key = spec
            .authority_key
            .ok_or(ShellError::NoAuthorityKey(spec.addr))?;
        let mut conn = NoiseConn::connect_to_authority(stream, key, Limits::default()).await?;
        conn.count_into(net.clone(), Side::Client);
        // No flags: extended channels, and devices that may roll version bits if the pool lets
        // them.
        let setup = SetupConnection {
            endpoint_host: spec.addr.ip().to_string(),
            endpoint_port: spec.addr.port(),
            vendor: "stratumlab".into(),
            firmware: hello.firmware.into(),
            ..SetupConnection::new(protocol::MINING)
        };
        conn.send_message(&setup.into()).await?;
        let fixed_version = loop {
            match conn.read_message().await? {
                Some(Message::Common(Common::SetupConnectionSuccess(s))) => {
                    break s.flags & mining_flags::REQUIRES_FIXED_VERSION != 0;
                }
                Some(Message::Common(Common::SetupConnectionError(e))) => {
                    return Err(ShellError::Setup(e.error_code));
                }
                Some(other) => tracing::debug!(?other, "translator: ignored before setup"),
                None => {}
            }
        };
        let extensions = negotiate(&mut conn, &hello, spec).await?;
        Ok(Link {
            conn: Sv2Transport(conn),
            local,
            fixed_version,
            extensions,
        })
    }

    async fn read(&mut self) -> Result<Mining, ShellError> {
        loop {
            match self.0.read_message().await? {
                Some(Message::Mining(m)) => return Ok(m),
                Some(other) => tracing::debug!(?other, "translator: upstream message ignored"),
                // An extension frame or a message type this side does not know.
                None => {}
            }
        }
    }

    async fn send(&mut self, m: Mining) -> Result<(), ShellError> {
        Ok(self.0.send_message(&Message::Mining(m)).await?)
    }

    async fn close(self, linger: Duration) {
        self.0.close(linger).await;
    }

    fn fans_out(m: &Mining) -> bool {
        !matches!(
            m,
            Mining::SubmitSharesSuccess(_) | Mining::SubmitSharesError(_)
        )
    }
}
