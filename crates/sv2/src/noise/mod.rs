//! One SV2 connection's Noise state, sans-IO: bytes in, handshake bytes and frames out.
//!
//! The handshake is Noise NX with the SV2 certificate (spec section 4): the initiator (a client)
//! sends an ephemeral key, the responder (a server) answers with its ephemeral key, its static
//! key and a certificate over the static key signed by its authority key; the initiator checks
//! the certificate against the authority public key it was configured with. Both then hold a
//! pair of ChaCha20-Poly1305 states and exchange encrypted frames. The cryptography, the
//! handshake steps and the frame encryption are the reference crates' (noise_sv2 through
//! codec_sv2's typestate `Handshake`, `NoiseEncoder`, `NoiseDecoder`); this module moves their
//! bytes without I/O:
//!
//! ```text
//! let mut client = NoiseInitiator::new(authority_public_key, max_frame_bytes)?;
//! let mut server = NoiseResponder::new(&keys, cert_validity, max_frame_bytes)?;
//! client.take_handshake_bytes(&mut wire);   server.feed(&wire)?;    // ephemeral key
//! server.take_handshake_bytes(&mut wire);   client.feed(&wire)?;    // key + certificate
//! client.handshake_done() && server.handshake_done();
//! client.encrypt(msg_type, extension_type, &payload, &mut wire)?;  server.feed(&wire)?;
//! while let Some(frame) = server.next_frame() { let frame = frame?; ... }
//! ```
//!
//! # Limits
//!
//! Each side refuses a frame whose wire size (encrypted header, payload and one MAC per 64 KiB
//! chunk) would exceed `max_frame_bytes`, as soon as the declared length says so: the payload is
//! not buffered. An error from [`next_frame`](NoiseResponder::next_frame) ends the reading side
//! for good (after a failed decryption the cipher no longer follows the peer's nonces).
//! `feed` buffers what it is given; callers feed one socket read at a time and drain
//! `next_frame` in between, which bounds what is held.
//!
//! # Memory and allocations
//!
//! After the handshake a connection holds the two cipher states and codec_sv2's encoder and
//! decoder: 432 bytes inline for an initiator, 424 for a responder, plus 16 bytes of heap (the
//! last MAC codec_sv2's decoder strips stays behind in its buffer); undecoded input is released
//! whenever it drains (`examples/footprint.rs` measures all of this). The steady-state path
//! allocates only inside codec_sv2: its system-memory buffers hand their `Vec` out with every
//! frame, so encrypting a share frame allocates five times and feeding and decrypting it six
//! (the input buffer, the header and payload windows, the plaintext frame, which becomes the
//! [`Frame`]'s payload without a copy). Its `with_buffer_pool` feature would avoid them at the
//! price of four 320 KiB pools per connection, which thousands of connections cannot afford.

/// What both ends of a Noise connection do the same way once it exists: the handshake's state,
/// encryption, framing and the buffers, all the codec's. Expanded inside `impl NoiseInitiator`
/// and `impl NoiseResponder`, whose `codec` and `phase` fields it reads (`Phase::Done`,
/// `Phase::Failed`).
macro_rules! connection_methods {
    ($conn:literal) => {
        /// Hands `bytes` to the codec. `Some` when the phase decides the result (failed, or the
        /// handshake done and the bytes are frames), `None` while the handshake waits for them.
        fn feed_codec(&mut self, bytes: &[u8]) -> Option<Result<(), NoiseError>> {
            if matches!(self.phase, Phase::Failed) {
                return Some(Err(NoiseError::Failed));
            }
            self.codec.feed(bytes);
            matches!(self.phase, Phase::Done).then_some(Ok(()))
        }

        fn failed(&mut self, e: NoiseError) -> NoiseError {
            self.phase = Phase::Failed;
            self.codec.fail();
            e
        }

        /// Appends the handshake bytes not yet sent to `out` (the initiator's ephemeral key,
        /// or the responder's reply, which `encrypt` also prepends so that a server answering
        /// at once cannot send it out of order).
        pub fn take_handshake_bytes(&mut self, out: &mut Vec<u8>) -> bool {
            self.codec.take_handshake_bytes(out)
        }

        /// The handshake completed (the certificate checked out, or the client's key arrived
        /// and the reply is made): frames can flow both ways.
        pub fn handshake_done(&self) -> bool {
            matches!(self.phase, Phase::Done)
        }

        /// Frames and encrypts a payload (`extension_type` with the `channel_msg` bit, see
        /// [`super::extension_type`]), appending the wire bytes to `out`.
        pub fn encrypt(
            &mut self,
            msg_type: u8,
            extension_type: u16,
            payload: &[u8],
            out: &mut Vec<u8>,
        ) -> Result<(), NoiseError> {
            self.codec.encrypt(msg_type, extension_type, payload, out)
        }

        /// The next decrypted frame, `None` until one is whole.
        pub fn next_frame(&mut self) -> Option<Result<Frame, NoiseError>> {
            self.codec.next_frame()
        }

        /// Bytes fed and not yet decoded.
        pub fn buffered(&self) -> usize {
            self.codec.buffered()
        }

        #[doc = concat!(
            "Heap bytes this connection holds itself (the input buffer and pending handshake ",
            "bytes), beyond `size_of::<", $conn, ">()`."
        )]
        pub fn heap_bytes(&self) -> usize {
            self.codec.heap_bytes()
        }

        pub(crate) fn into_codec(self) -> Codec {
            self.codec
        }
    };
}

mod codec;
mod frame;
mod initiator;
mod input;
mod responder;

pub use frame::{extension_type, wire_len, Frame, CHANNEL_MSG_BIT, MAX_PAYLOAD_LEN};

/// Bytes of the responder's handshake reply (its ephemeral key, its encrypted static key and
/// the encrypted certificate): what an initiator reads before the channel is up.
pub const HANDSHAKE_REPLY_LEN: usize = noise_sv2::INITIATOR_EXPECTED_HANDSHAKE_MESSAGE_SIZE;
pub use framing_sv2::header::Header;
pub use initiator::NoiseInitiator;
pub use responder::NoiseResponder;

pub(crate) use codec::Codec;

/// The largest frame SV2 can put on the wire: the encrypted header and a payload of
/// [`MAX_PAYLOAD_LEN`] with one MAC per chunk. As a limit it means "no limit".
pub const MAX_FRAME_BYTES: usize = codec_sv2::ENCRYPTED_SV2_FRAME_HEADER_SIZE
    + MAX_PAYLOAD_LEN
    + MAX_PAYLOAD_LEN.div_ceil(codec_sv2::SV2_FRAME_PLAINTEXT_CHUNK_SIZE) * noise_sv2::AEAD_MAC_LEN;

/// Why a connection cannot go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoiseError {
    /// The responder's certificate is not signed by the expected authority key, or the time is
    /// outside its validity (the spec allows 10 s of clock drift either way).
    #[error("server certificate refused: {0}")]
    Certificate(CertificateProblem),
    /// The handshake bytes are malformed or do not verify; holds noise_sv2's message.
    #[error("noise handshake failed: {0}")]
    Handshake(String),
    /// The authority public key given to the initiator is not a valid x-only key.
    #[error("authority public key is not a valid x-only key")]
    InvalidAuthorityKey,
    /// A frame's AEAD check failed, or its header is malformed; holds the codec's message.
    #[error("frame does not decrypt: {0}")]
    Decrypt(String),
    #[error("frame exceeds {limit} bytes on the wire")]
    /// An incoming frame declares more than the connection's limit.
    FrameTooLarge {
        /// The limit, in bytes on the wire (encrypted, MACs included).
        limit: usize,
    },
    #[error("payload of {len} bytes does not fit a frame (at most {max})")]
    /// An outgoing payload is longer than a frame can declare.
    PayloadTooLarge {
        /// The payload's length, in bytes.
        len: usize,
        /// [`MAX_PAYLOAD_LEN`].
        max: usize,
    },
    /// Encrypting an outgoing frame failed; holds the codec's message.
    #[error("frame could not be encrypted: {0}")]
    Encrypt(String),
    /// Frames were sent or read before the handshake finished.
    #[error("the noise handshake has not finished")]
    HandshakeIncomplete,
    /// An earlier error left the connection unusable; nothing more goes through it.
    #[error("the connection failed earlier")]
    Failed,
}

/// What is wrong with a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CertificateProblem {
    #[error("expired at {not_valid_after} (unix time), checked at {now}")]
    /// The certificate's validity ended.
    Expired {
        /// The certificate's `not_valid_after`, Unix seconds.
        not_valid_after: u32,
        /// The time it was checked at, Unix seconds.
        now: u32,
    },
    #[error("valid only from {valid_from} (unix time), checked at {now}")]
    /// The certificate's validity has not begun.
    NotYetValid {
        /// The certificate's `valid_from`, Unix seconds.
        valid_from: u32,
        /// The time it was checked at, Unix seconds.
        now: u32,
    },
    /// The signature does not verify against the authority key, or the version is unknown.
    #[error("not signed by the authority key (or an unsupported certificate version)")]
    Signature,
}

impl NoiseError {
    pub(crate) fn from_codec(e: codec_sv2::Error) -> NoiseError {
        match e {
            codec_sv2::Error::AeadError(_) => NoiseError::Decrypt("authentication failed".into()),
            other => NoiseError::Decrypt(other.to_string()),
        }
    }
}
