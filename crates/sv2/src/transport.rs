//! SV2 frames over Noise on a tokio TCP stream, either side of the handshake: the thin async
//! shell over [`crate::noise`] for roles that run one task per connection.
//!
//! It only moves bytes and bounds what a peer can make it do:
//!
//! - the handshake must complete within `handshake_timeout` (a silent peer is dropped, not
//!   waited for);
//! - a frame may take at most `max_frame_bytes` on the wire, refused as soon as its header
//!   declares more (see [`crate::noise`]);
//! - a write may take at most `write_timeout`, so a peer that stops reading cannot stall its
//!   task forever.
//!
//! [`NoiseConn::read_frame`] keeps what it read in the connection, so it is cancellation safe:
//! a `select!` may drop it between reads without losing bytes.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use binary_sv2::{GetSize, Serialize};
use events::LinkCounter;
pub use events::Side;
use noise_sv2::{Initiator, Responder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::keys::AuthorityKeys;
use crate::messages::{frame_name, EncodeError, Message};
use crate::noise::{
    extension_type, wire_len, Codec, Frame, NoiseError, NoiseInitiator, NoiseResponder,
    CHANNEL_MSG_BIT,
};

/// The name the Noise handshake's bytes are counted under among a link's messages.
pub use events::HANDSHAKE;

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 8192;
/// Outgoing buffers larger than this are released after use rather than kept.
const RETAINED_OUT: usize = 64 * 1024;

/// Why a connection ended; `reason()` is the short word events carry.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The peer closed the connection.
    #[error("peer closed the connection")]
    Closed,
    /// Reading or writing the socket failed.
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
    /// The handshake did not finish within [`Limits::handshake_timeout`].
    #[error("noise handshake timed out")]
    HandshakeTimeout,
    /// The handshake failed; holds the [`NoiseError`]'s text.
    #[error("noise handshake failed: {0}")]
    Handshake(String),
    /// A frame does not decrypt, or its message does not decode; holds the error's text.
    #[error("frame does not decrypt or decode: {0}")]
    Codec(String),
    #[error("frame exceeds {limit} bytes")]
    /// An incoming frame exceeds [`Limits::max_frame_bytes`].
    FrameTooLarge {
        /// The limit, in bytes on the wire.
        limit: usize,
    },
    /// An outgoing message or frame could not be encoded; holds the error's text.
    #[error("frame could not be encoded: {0}")]
    Encode(String),
    /// A write did not complete within [`Limits::write_timeout`] (held here): the peer stopped
    /// reading.
    #[error("peer did not take our bytes within {0:?}")]
    WriteTimeout(Duration),
    /// The role is shutting down.
    #[error("the server is shutting down")]
    Shutdown,
}

impl TransportError {
    /// A short reason for `ConnectionClosed` events.
    pub fn reason(&self) -> &'static str {
        match self {
            TransportError::Closed => "eof",
            TransportError::Io(_) => "reset",
            TransportError::HandshakeTimeout => "timeout",
            TransportError::Handshake(_) => "handshake",
            TransportError::Codec(_) => "protocol",
            TransportError::FrameTooLarge { .. } => "oversize",
            TransportError::Encode(_) => "encode",
            TransportError::WriteTimeout(_) => "timeout",
            TransportError::Shutdown => "shutdown",
        }
    }
}

impl From<NoiseError> for TransportError {
    fn from(e: NoiseError) -> Self {
        match e {
            NoiseError::Certificate(_)
            | NoiseError::Handshake(_)
            | NoiseError::InvalidAuthorityKey
            | NoiseError::HandshakeIncomplete => TransportError::Handshake(e.to_string()),
            NoiseError::FrameTooLarge { limit } => TransportError::FrameTooLarge { limit },
            NoiseError::Decrypt(_) | NoiseError::Failed => TransportError::Codec(e.to_string()),
            NoiseError::PayloadTooLarge { .. } | NoiseError::Encrypt(_) => {
                TransportError::Encode(e.to_string())
            }
        }
    }
}

impl From<EncodeError> for TransportError {
    fn from(e: EncodeError) -> Self {
        TransportError::Encode(e.to_string())
    }
}

/// Limits a connection applies to its peer.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The whole handshake must complete within this.
    pub handshake_timeout: Duration,
    /// Largest frame accepted, counted as encrypted bytes on the wire.
    pub max_frame_bytes: usize,
    /// Each write must complete within this.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // The reference roles' default handshake timeout.
            handshake_timeout: Duration::from_secs(10),
            max_frame_bytes: 1 << 24,
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// A connection past its Noise handshake.
pub struct NoiseConn {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    codec: Codec,
    read_buf: Box<[u8]>,
    /// Wire bytes being written.
    out: Vec<u8>,
    /// A message's payload before it is framed.
    scratch: Vec<u8>,
    limits: Limits,
    /// Wire bytes of the handshake: (read, written).
    handshake: (u64, u64),
    /// How long the handshake took: from accepting the connection (server) or connecting
    /// (client) until it was done.
    handshake_time: Duration,
    /// Where the connection's wire bytes are counted, once someone asked
    /// ([`NoiseConn::count_into`]).
    counter: Option<(Arc<LinkCounter>, Side)>,
}

impl NoiseConn {
    /// The handshake's wire bytes, (read, written): the Noise overhead a byte count of the
    /// connection must include (the frames after it are counted by whoever reads and writes).
    pub fn handshake_bytes(&self) -> (u64, u64) {
        self.handshake
    }

    /// Counts the connection's wire bytes (handshake, frames, Noise overhead) into `counter`
    /// from now on, the handshake's included: for roles that report their own socket bytes
    /// (docs/metrics.md `roles.<name>.net_*_bytes`) over connections they only read and write
    /// through here. `LinkBytes` directions are the link's (up: toward the pool), so what a
    /// client writes goes up and what a server writes goes down.
    pub fn count_into(&mut self, counter: Arc<LinkCounter>, side: Side) {
        // The handshake is the Noise cost of the connection: timed, and counted as a message
        // with no payload.
        let (read, written) = (self.handshake.0 as usize, self.handshake.1 as usize);
        counter.add_handshake(side, self.handshake_time, read, written);
        self.counter = Some((counter, side));
        self.count_read(read);
        self.count_written(written);
    }

    /// A whole frame read or written: its message by type (wire and payload bytes).
    fn count_frame(&self, read: bool, extension_type: u16, msg_type: u8, payload: usize) {
        if let Some((c, side)) = &self.counter {
            count_frame(c, *side, read, extension_type, msg_type, payload);
        }
    }

    fn count_read(&self, n: usize) {
        if let Some((c, side)) = &self.counter {
            c.add_read(*side, n);
        }
    }

    fn count_written(&self, n: usize) {
        if let Some((c, side)) = &self.counter {
            c.add_written(*side, n);
        }
    }

    /// The responder's side: waits for the initiator's ephemeral key, answers with ours and the
    /// certificate `responder` signs.
    pub async fn accept(
        stream: TcpStream,
        responder: Box<Responder>,
        limits: Limits,
    ) -> Result<NoiseConn, TransportError> {
        let started = tokio::time::Instant::now();
        let deadline = started + limits.handshake_timeout;
        let noise = NoiseResponder::from_role(responder, limits.max_frame_bytes);
        NoiseConn::accept_from(stream, noise, limits, 0, (started, deadline)).await
    }

    /// The rest of [`NoiseConn::accept`] for a responder that has been fed the first `read`
    /// bytes of the handshake already, started at `started`, within the handshake's deadline.
    async fn accept_from(
        stream: TcpStream,
        mut noise: NoiseResponder,
        limits: Limits,
        mut read: u64,
        (started, deadline): (tokio::time::Instant, tokio::time::Instant),
    ) -> Result<NoiseConn, TransportError> {
        let _ = stream.set_nodelay(true);
        let (mut reader, mut writer) = stream.into_split();
        let mut read_buf = vec![0u8; READ_CHUNK].into_boxed_slice();
        read += read_handshake(
            &mut noise,
            NoiseResponder::handshake_done,
            NoiseResponder::feed,
            &mut reader,
            &mut read_buf,
            deadline,
        )
        .await?;
        let mut out = Vec::new();
        noise.take_handshake_bytes(&mut out);
        let written = send_handshake(&mut writer, &mut out, limits.write_timeout).await?;
        Ok(NoiseConn::established(
            (reader, writer),
            noise.into_codec(),
            read_buf,
            out,
            limits,
            (read, written, started.elapsed()),
        ))
    }

    /// [`NoiseConn::accept`] with a certificate signed by `keys`, valid for `cert_validity`.
    pub async fn accept_with_keys(
        stream: TcpStream,
        keys: &AuthorityKeys,
        cert_validity: Duration,
        limits: Limits,
    ) -> Result<NoiseConn, TransportError> {
        // A responder costs fresh keys and a signed certificate: made only once the initiator
        // has sent its whole first message (its ephemeral key), so that a peer that connects
        // and says nothing, or trickles bytes, costs the server no cryptography.
        let started = tokio::time::Instant::now();
        let deadline = started + limits.handshake_timeout;
        let mut hello = [0u8; noise_sv2::ELLSWIFT_ENCODING_SIZE];
        let mut stream = stream;
        match tokio::time::timeout_at(deadline, stream.read_exact(&mut hello)).await {
            Err(_) => return Err(TransportError::HandshakeTimeout),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(TransportError::Closed)
            }
            Ok(Err(e)) => return Err(e.into()),
            Ok(Ok(_)) => {}
        }
        // The keys, the certificate's signature and the handshake's Diffie-Hellmans take
        // milliseconds: on a blocking thread, so that a wave of handshakes never holds up the
        // runtime's workers and the established connections they serve. Within the handshake's
        // deadline all the same: a wave larger than the blocking pool queues there, and a
        // connection whose turn comes too late is refused as timed out rather than held.
        let keys = *keys;
        let max_frame = limits.max_frame_bytes;
        let mut work = tokio::task::spawn_blocking(move || {
            let responder = keys
                .responder(cert_validity)
                .map_err(|e| TransportError::Handshake(e.to_string()))?;
            let mut noise = NoiseResponder::from_role(responder, max_frame);
            noise.feed(&hello)?;
            Ok::<_, TransportError>(noise)
        });
        let noise = match tokio::time::timeout_at(deadline, &mut work).await {
            Ok(done) => {
                done.map_err(|e| TransportError::Handshake(format!("handshake task: {e}")))??
            }
            Err(_) => {
                // Not started yet: it never will be, so that the queue it waited in shrinks.
                work.abort();
                return Err(TransportError::HandshakeTimeout);
            }
        };
        NoiseConn::accept_from(
            stream,
            noise,
            limits,
            hello.len() as u64,
            (started, deadline),
        )
        .await
    }

    /// The initiator's side: `initiator` carries the authority key the server's certificate must
    /// be signed with (`Initiator::from_raw_k`) or none (`Initiator::without_pk`).
    pub async fn connect(
        stream: TcpStream,
        initiator: Box<Initiator>,
        limits: Limits,
    ) -> Result<NoiseConn, TransportError> {
        let started = tokio::time::Instant::now();
        let _ = stream.set_nodelay(true);
        let (mut reader, mut writer) = stream.into_split();
        let mut noise = NoiseInitiator::from_role(initiator, limits.max_frame_bytes)?;
        let mut out = Vec::new();
        noise.take_handshake_bytes(&mut out);
        let written = send_handshake(&mut writer, &mut out, limits.write_timeout).await?;
        let mut read_buf = vec![0u8; READ_CHUNK].into_boxed_slice();
        let deadline = tokio::time::Instant::now() + limits.handshake_timeout;
        // Fails when the certificate is not signed by the expected authority or is out of date.
        let read = read_handshake(
            &mut noise,
            NoiseInitiator::handshake_done,
            NoiseInitiator::feed,
            &mut reader,
            &mut read_buf,
            deadline,
        )
        .await?;
        Ok(NoiseConn::established(
            (reader, writer),
            noise.into_codec(),
            read_buf,
            out,
            limits,
            (read, written, started.elapsed()),
        ))
    }

    /// The connection once its handshake is over, with the buffers it used and what the
    /// handshake read and wrote.
    fn established(
        (reader, writer): (OwnedReadHalf, OwnedWriteHalf),
        codec: Codec,
        read_buf: Box<[u8]>,
        out: Vec<u8>,
        limits: Limits,
        (read, written, took): (u64, u64, Duration),
    ) -> NoiseConn {
        NoiseConn {
            reader,
            writer,
            codec,
            read_buf,
            out,
            scratch: Vec::new(),
            limits,
            handshake: (read, written),
            handshake_time: took,
            counter: None,
        }
    }

    /// [`NoiseConn::connect`] checking the certificate against `authority_public_key`.
    pub async fn connect_to_authority(
        stream: TcpStream,
        authority_public_key: [u8; 32],
        limits: Limits,
    ) -> Result<NoiseConn, TransportError> {
        let initiator = Initiator::from_raw_k(authority_public_key)
            .map_err(|_| TransportError::from(NoiseError::InvalidAuthorityKey))?;
        NoiseConn::connect(stream, initiator, limits).await
    }

    /// The next whole frame. Cancellation safe (see the module documentation).
    pub async fn read_frame(&mut self) -> Result<Frame, TransportError> {
        loop {
            if let Some(frame) = self.codec.next_frame() {
                let frame = frame?;
                self.count_frame(
                    true,
                    frame.extension(),
                    frame.msg_type(),
                    frame.payload.len(),
                );
                return Ok(frame);
            }
            if self.codec.read_failed() {
                return Err(NoiseError::Failed.into());
            }
            let n = self.reader.read(&mut self.read_buf).await?;
            if n == 0 {
                return Err(TransportError::Closed);
            }
            self.count_read(n);
            self.codec.feed(&self.read_buf[..n]);
        }
    }

    /// The next frame decoded as a message: `Ok(None)` for a frame of an extension this crate
    /// has no messages of, which the spec says to ignore. A message that does not decode is an
    /// error.
    pub async fn read_message(&mut self) -> Result<Option<Message>, TransportError> {
        let mut frame = self.read_frame().await?;
        Message::decode_frame(frame.extension(), frame.msg_type(), &mut frame.payload)
            .map_err(|e| TransportError::Codec(e.to_string()))
    }

    /// Encodes, frames, encrypts and sends one message (its extension and `channel_msg` bit).
    pub async fn send_message(&mut self, message: &Message) -> Result<(), TransportError> {
        self.scratch.clear();
        let msg_type = message.encode(&mut self.scratch)?;
        let scratch = std::mem::take(&mut self.scratch);
        let sent = self
            .send_payload(msg_type, message.extension_type(), &scratch)
            .await;
        self.scratch = scratch;
        sent
    }

    /// Frames, encrypts and sends an encoded payload under `extension_type` (the field as sent,
    /// `channel_msg` bit included).
    pub async fn send_payload(
        &mut self,
        msg_type: u8,
        extension_type: u16,
        payload: &[u8],
    ) -> Result<(), TransportError> {
        self.out.clear();
        self.codec
            .encrypt(msg_type, extension_type, payload, &mut self.out)?;
        let written = write_within(&mut self.writer, &self.out, self.limits.write_timeout).await;
        if written.is_ok() {
            self.count_written(self.out.len());
            self.count_frame(false, extension_type, msg_type, payload.len());
        }
        if self.out.capacity() > RETAINED_OUT {
            self.out = Vec::new();
        }
        written
    }

    /// Frames, encrypts and sends one reference-crate message (extension 0, no channel bit:
    /// what the Template Distribution and most common messages use).
    pub async fn send<T: Serialize + GetSize>(
        &mut self,
        msg_type: u8,
        message: T,
    ) -> Result<(), TransportError> {
        self.send_frame(0, false, msg_type, message).await
    }

    /// [`NoiseConn::send`] under another extension type (channel bit unset).
    pub async fn send_extension<T: Serialize + GetSize>(
        &mut self,
        extension: u16,
        msg_type: u8,
        message: T,
    ) -> Result<(), TransportError> {
        self.send_frame(extension, false, msg_type, message).await
    }

    /// Sends one reference-crate message with any header: the Mining Protocol's channel
    /// messages set `channel_msg`.
    pub async fn send_frame<T: Serialize + GetSize>(
        &mut self,
        extension: u16,
        channel_msg: bool,
        msg_type: u8,
        message: T,
    ) -> Result<(), TransportError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(message.get_size(), 0);
        let sent = match binary_sv2::to_writer(message, &mut scratch) {
            Ok(n) => {
                scratch.truncate(n);
                self.send_payload(msg_type, extension_type(extension, channel_msg), &scratch)
                    .await
            }
            Err(e) => Err(TransportError::Encode(format!("{e:?}"))),
        };
        self.scratch = scratch;
        if self.scratch.capacity() > RETAINED_OUT {
            self.scratch = Vec::new();
        }
        sent
    }

    /// Sends raw bytes outside the encryption (for tests of what a server does with garbage).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), TransportError> {
        write_within(&mut self.writer, bytes, self.limits.write_timeout).await
    }

    /// Closes our sending side; the peer reads end of stream.
    pub async fn shutdown(&mut self) {
        let _ = self.writer.shutdown().await;
    }

    /// Closes so that what we sent last (a `SetupConnection.Error`, say) reaches the peer:
    /// closing a socket with unread input makes the kernel send a reset, which can destroy
    /// data still in flight to the peer. So: end our side, then drain theirs until they close
    /// or `linger` passes.
    pub async fn close(mut self, linger: Duration) {
        self.shutdown().await;
        drain(&mut self.reader, linger).await;
    }
}

/// Counts one SV2 frame `side` read (`read`) or wrote into `counter`, by its message's spec
/// name: its wire bytes (header, payload, MACs) and its payload bytes. For whoever frames SV2
/// itself: [`NoiseConn`] does, and so do the fleet's devices.
pub fn count_frame(
    counter: &LinkCounter,
    side: Side,
    read: bool,
    extension_type: u16,
    msg_type: u8,
    payload: usize,
) {
    let name = frame_name(extension_type & !CHANNEL_MSG_BIT, msg_type);
    counter.add_message(side, read, name, wire_len(payload), payload);
}

/// Reads and drops what the peer still sends until it closes or `linger` passes: after ending
/// our side, so that what we sent last is not destroyed by the reset the kernel sends when a
/// socket closes with unread input.
pub async fn drain(reader: &mut OwnedReadHalf, linger: Duration) {
    let mut sink = [0u8; 4096];
    let until_closed = async {
        while let Ok(n) = reader.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(linger, until_closed).await;
}

/// Feeds `noise` (either end, through its `feed`) what the peer sends until `done` says its
/// handshake is over, which must be by `deadline`; returns the bytes read.
async fn read_handshake<N>(
    noise: &mut N,
    done: fn(&N) -> bool,
    feed: fn(&mut N, &[u8]) -> Result<(), NoiseError>,
    reader: &mut OwnedReadHalf,
    buf: &mut [u8],
    deadline: tokio::time::Instant,
) -> Result<u64, TransportError> {
    let mut read = 0;
    while !done(noise) {
        let n = match tokio::time::timeout_at(deadline, reader.read(buf)).await {
            Err(_) => return Err(TransportError::HandshakeTimeout),
            Ok(Ok(0)) => return Err(TransportError::Closed),
            Ok(Ok(n)) => n,
            Ok(Err(e)) => return Err(e.into()),
        };
        read += n as u64;
        feed(noise, &buf[..n])?;
    }
    Ok(read)
}

/// Sends the handshake bytes in `out` and empties it for the connection's frames; returns the
/// bytes written.
async fn send_handshake(
    writer: &mut OwnedWriteHalf,
    out: &mut Vec<u8>,
    limit: Duration,
) -> Result<u64, TransportError> {
    write_within(writer, out, limit).await?;
    let written = out.len() as u64;
    out.clear();
    Ok(written)
}

async fn write_within(
    writer: &mut OwnedWriteHalf,
    bytes: &[u8],
    limit: Duration,
) -> Result<(), TransportError> {
    match tokio::time::timeout(limit, writer.write_all(bytes)).await {
        Err(_) => Err(TransportError::WriteTimeout(limit)),
        Ok(r) => Ok(r?),
    }
}
