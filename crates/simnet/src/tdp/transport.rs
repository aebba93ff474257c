//! SV2 frames over Noise NX on a TCP stream, either side of the handshake.
//!
//! The handshake, the AEAD and the framing are the reference crates' (noise_sv2 through
//! codec_sv2's typestate `Handshake` / `Transport`, framing_sv2's frames); this file only moves
//! their bytes and bounds what a peer can make it do:
//!
//! - each handshake read is bounded in time (a silent peer is dropped, not waited for);
//! - a frame may take at most `max_frame_bytes` on the wire: the decoder reads a declared payload
//!   one chunk at a time, and the bytes fed to it since the last whole frame are counted, so a
//!   peer declaring 16 MB gets cut off after the limit, not buffered;
//! - a write may take at most `write_timeout`, so a peer that stops reading cannot stall its task
//!   forever.
//!
//! [`NoiseConn::read_frame`] keeps its partial reads in the connection, so it is cancellation
//! safe: a `select!` may drop it between reads without losing bytes.

use std::io;
use std::time::Duration;

use binary_sv2::{GetSize, Serialize};
use codec_sv2::{
    Decoded, Decrypted, Handshake, NoiseDecoder, NoiseEncoder, TransportDecryptState,
    TransportEncryptState,
};
use framing_sv2::framing::MessageFrame;
use framing_sv2::header::Header;
use noise_sv2::{
    Initiator, Responder, ELLSWIFT_ENCODING_SIZE, INITIATOR_EXPECTED_HANDSHAKE_MESSAGE_SIZE,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Why a connection ended; `reason()` is the short word events carry.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("peer closed the connection")]
    Closed,
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
    #[error("noise handshake timed out")]
    HandshakeTimeout,
    #[error("noise handshake failed: {0}")]
    Handshake(String),
    #[error("frame does not decrypt or decode: {0}")]
    Codec(String),
    #[error("frame exceeds {limit} bytes")]
    FrameTooLarge { limit: usize },
    #[error("frame could not be encoded: {0}")]
    Encode(String),
    #[error("peer did not take our bytes within {0:?}")]
    WriteTimeout(Duration),
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

/// One frame as it arrived: its header and its payload bytes (decrypted).
#[derive(Debug)]
pub struct Frame {
    pub header: Header,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn msg_type(&self) -> u8 {
        self.header.msg_type()
    }

    /// The extension type without the `channel_msg` bit.
    pub fn extension(&self) -> u16 {
        self.header.ext_type_without_channel_msg()
    }
}

/// Limits a connection applies to its peer.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Each handshake read must complete within this.
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
    decoder: NoiseDecoder,
    encoder: NoiseEncoder,
    /// `None` only after a decryption failure, which ends the connection.
    decrypt: Option<TransportDecryptState>,
    encrypt: TransportEncryptState,
    /// The decoder's current read window and how much of it has arrived.
    window: Vec<u8>,
    filled: usize,
    /// Wire bytes handed to the decoder since the last whole frame.
    frame_bytes: usize,
    limits: Limits,
}

impl NoiseConn {
    /// The responder's side: waits for the initiator's ephemeral key, answers with ours and the
    /// certificate `responder` signs.
    pub async fn accept(
        stream: TcpStream,
        responder: Box<Responder>,
        limits: Limits,
    ) -> Result<NoiseConn, TransportError> {
        let _ = stream.set_nodelay(true);
        let (mut reader, mut writer) = stream.into_split();
        let mut decoder = NoiseDecoder::new();
        let mut encoder = NoiseEncoder::new();
        let handshake = Handshake::responder(responder);

        let first = read_handshake_message::<Responder>(&mut decoder, &mut reader, &limits).await?;
        let theirs: [u8; ELLSWIFT_ENCODING_SIZE] = first
            .payload()
            .try_into()
            .map_err(|_| TransportError::Handshake("first message has the wrong size".into()))?;
        let (reply, transport) = handshake
            .step_1(theirs)
            .map_err(|e| TransportError::Handshake(e.to_string()))?;
        let bytes = encoder.encode_handshake(reply);
        write_within(&mut writer, bytes.as_ref(), limits.write_timeout).await?;
        let (encrypt, decrypt) = transport.split();
        Ok(NoiseConn::new(
            reader, writer, decoder, encoder, encrypt, decrypt, limits,
        ))
    }

    /// The initiator's side: `initiator` carries the authority key the server's certificate must
    /// be signed with (`Initiator::from_raw_k`) or none (`Initiator::without_pk`).
    pub async fn connect(
        stream: TcpStream,
        initiator: Box<Initiator>,
        limits: Limits,
    ) -> Result<NoiseConn, TransportError> {
        let _ = stream.set_nodelay(true);
        let (mut reader, mut writer) = stream.into_split();
        let mut decoder = NoiseDecoder::new();
        let mut encoder = NoiseEncoder::new();
        let (first, sent) = Handshake::initiator(initiator)
            .step_0()
            .map_err(|e| TransportError::Handshake(e.to_string()))?;
        let bytes = encoder.encode_handshake(first);
        write_within(&mut writer, bytes.as_ref(), limits.write_timeout).await?;
        let reply =
            read_handshake_message::<codec_sv2::InitiatorSent>(&mut decoder, &mut reader, &limits)
                .await?;
        let reply: [u8; INITIATOR_EXPECTED_HANDSHAKE_MESSAGE_SIZE] = reply
            .payload()
            .try_into()
            .map_err(|_| TransportError::Handshake("reply has the wrong size".into()))?;
        // Fails when the certificate is not signed by the expected authority or is out of date.
        let transport = sent
            .step_2(reply)
            .map_err(|e| TransportError::Handshake(e.to_string()))?;
        let (encrypt, decrypt) = transport.split();
        Ok(NoiseConn::new(
            reader, writer, decoder, encoder, encrypt, decrypt, limits,
        ))
    }

    fn new(
        reader: OwnedReadHalf,
        writer: OwnedWriteHalf,
        decoder: NoiseDecoder,
        encoder: NoiseEncoder,
        encrypt: TransportEncryptState,
        decrypt: TransportDecryptState,
        limits: Limits,
    ) -> NoiseConn {
        NoiseConn {
            reader,
            writer,
            decoder,
            encoder,
            decrypt: Some(decrypt),
            encrypt,
            window: Vec::new(),
            filled: 0,
            frame_bytes: 0,
            limits,
        }
    }

    /// The next whole frame. Cancellation safe (see the module documentation).
    pub async fn read_frame(&mut self) -> Result<Frame, TransportError> {
        loop {
            let want = self.decoder.writable_len();
            if want > 0 {
                if self.window.len() != want || self.filled == self.window.len() {
                    // A new window: the previous one (if any) went into the decoder.
                    self.window.clear();
                    self.window.resize(want, 0);
                    self.filled = 0;
                }
                while self.filled < self.window.len() {
                    let n = self.reader.read(&mut self.window[self.filled..]).await?;
                    if n == 0 {
                        return Err(TransportError::Closed);
                    }
                    self.filled += n;
                }
                self.frame_bytes += want;
                if self.frame_bytes > self.limits.max_frame_bytes {
                    return Err(TransportError::FrameTooLarge {
                        limit: self.limits.max_frame_bytes,
                    });
                }
                self.decoder.writable().copy_from_slice(&self.window);
            }
            let state = self
                .decrypt
                .take()
                .ok_or_else(|| TransportError::Codec("connection already failed".into()))?;
            match self
                .decoder
                .next_transport_frame(state)
                .map_err(|e| TransportError::Codec(e.to_string()))?
            {
                Decrypted::Frame(mut frame, state) => {
                    self.decrypt = Some(state);
                    self.frame_bytes = 0;
                    // Copied out so that the buffer type (system memory or a pool, as features
                    // across the build choose) stays the codec's business.
                    return Ok(Frame {
                        header: frame.header(),
                        payload: frame.payload().to_vec(),
                    });
                }
                Decrypted::Incomplete(_, state) => self.decrypt = Some(state),
            }
        }
    }

    /// Frames, encrypts and sends one message (extension 0, no channel bit: what the Template
    /// Distribution and common messages use).
    pub async fn send<T: Serialize + GetSize>(
        &mut self,
        msg_type: u8,
        message: T,
    ) -> Result<(), TransportError> {
        self.send_extension(0, msg_type, message).await
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

    /// Frames, encrypts and sends one message with any header: the Mining Protocol's channel
    /// messages set `channel_msg`.
    pub async fn send_frame<T: Serialize + GetSize>(
        &mut self,
        extension: u16,
        channel_msg: bool,
        msg_type: u8,
        message: T,
    ) -> Result<(), TransportError> {
        let frame = MessageFrame::from_message(message, msg_type, extension, channel_msg)
            .map_err(|e| TransportError::Encode(e.to_string()))?;
        let bytes = self
            .encoder
            .encode_transport(frame, &mut self.encrypt)
            .map_err(|e| TransportError::Encode(e.to_string()))?;
        write_within(&mut self.writer, bytes.as_ref(), self.limits.write_timeout).await
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
        let mut sink = [0u8; 4096];
        let drain = async {
            while let Ok(n) = self.reader.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(linger, drain).await;
    }
}

/// Reads until the decoder holds the next handshake message of role `R`'s step.
async fn read_handshake_message<R: codec_sv2::ExpectsHandshakeMessage>(
    decoder: &mut NoiseDecoder,
    reader: &mut OwnedReadHalf,
    limits: &Limits,
) -> Result<codec_sv2::HandshakeMessage, TransportError> {
    loop {
        match decoder
            .next_handshake_frame::<R>()
            .map_err(|e| TransportError::Handshake(e.to_string()))?
        {
            Decoded::Frame(f) => return Ok(f),
            Decoded::Incomplete(_) => {
                read_exact_within(reader, decoder.writable(), limits.handshake_timeout).await?
            }
        }
    }
}

async fn read_exact_within(
    reader: &mut OwnedReadHalf,
    buf: &mut [u8],
    limit: Duration,
) -> Result<(), TransportError> {
    match tokio::time::timeout(limit, reader.read_exact(buf)).await {
        Err(_) => Err(TransportError::HandshakeTimeout),
        Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Err(TransportError::Closed),
        Ok(Err(e)) => Err(e.into()),
        Ok(Ok(_)) => Ok(()),
    }
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
