//! What both sides of a Noise connection share: the bytes not yet decoded, codec_sv2's decoder
//! and encoder, and after the handshake the two cipher states.
//!
//! The decoder pulls its input one window at a time ([`NoiseDecoder::writable_len`]: a handshake
//! message, an encrypted header, then the payload one chunk of at most 64 KiB at a time). A
//! window is handed over only once the bytes for all of it are here, and before a window of a
//! frame is handed over the bytes it would bring that frame to are checked against the limit:
//! a peer declaring a 16 MB payload is refused right after its 22-byte header, not after we
//! buffered what it sent.

use codec_sv2::{
    Decoded, Decrypted, ExpectsHandshakeMessage, HandshakeMessage, NoiseDecoder, NoiseEncoder,
    Transport, TransportDecryptState, TransportEncryptState,
};
use framing_sv2::header::Header;

use super::frame::{Frame, OutFrame, MAX_PAYLOAD_LEN};
use super::input::Input;
use super::NoiseError;

pub(crate) struct Codec {
    input: Input,
    decoder: NoiseDecoder,
    encoder: NoiseEncoder,
    /// Set by the handshake; `None` before it and after a failure in that direction.
    encrypt: Option<TransportEncryptState>,
    decrypt: Option<TransportDecryptState>,
    /// Handshake bytes for the peer that the caller has not taken yet.
    handshake_out: Vec<u8>,
    /// Wire bytes handed to the decoder for the frame in progress.
    frame_bytes: usize,
    max_frame_bytes: usize,
    read_failed: bool,
    write_failed: bool,
}

impl Codec {
    pub(crate) fn new(max_frame_bytes: usize) -> Codec {
        Codec {
            input: Input::default(),
            decoder: NoiseDecoder::new(),
            encoder: NoiseEncoder::new(),
            encrypt: None,
            decrypt: None,
            handshake_out: Vec::new(),
            frame_bytes: 0,
            max_frame_bytes,
            read_failed: false,
            write_failed: false,
        }
    }

    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        if !self.read_failed {
            self.input.push(bytes);
        }
    }

    /// The next handshake message the peer owes role `R`, once all of it is here.
    pub(crate) fn read_handshake<R: ExpectsHandshakeMessage>(
        &mut self,
    ) -> Result<Option<HandshakeMessage>, NoiseError> {
        loop {
            match self
                .decoder
                .next_handshake_frame::<R>()
                .map_err(|e| NoiseError::Handshake(e.to_string()))?
            {
                Decoded::Frame(m) => return Ok(Some(m)),
                Decoded::Incomplete(want) => {
                    if !self.fill(want) {
                        return Ok(None);
                    }
                }
            }
        }
    }

    pub(crate) fn queue_handshake(&mut self, message: HandshakeMessage) {
        let bytes = self.encoder.encode_handshake(message);
        self.handshake_out.extend_from_slice(bytes.as_ref());
    }

    pub(crate) fn take_handshake_bytes(&mut self, out: &mut Vec<u8>) -> bool {
        if self.handshake_out.is_empty() {
            return false;
        }
        out.append(&mut self.handshake_out);
        // `append` leaves the allocation behind; an established connection keeps none.
        self.handshake_out = Vec::new();
        true
    }

    pub(crate) fn establish(&mut self, transport: Transport) {
        let (encrypt, decrypt) = transport.split();
        self.encrypt = Some(encrypt);
        self.decrypt = Some(decrypt);
    }

    /// The handshake failed: nothing more is read or written on this connection.
    pub(crate) fn fail(&mut self) {
        self.read_failed = true;
        self.write_failed = true;
        self.encrypt = None;
        self.decrypt = None;
        self.input = Input::default();
    }

    pub(crate) fn read_failed(&self) -> bool {
        self.read_failed
    }

    pub(crate) fn buffered(&self) -> usize {
        self.input.len()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.input.heap_bytes() + self.handshake_out.capacity()
    }

    /// The next whole frame: `None` until its bytes are all here (or before the handshake, or
    /// after an error, which is returned once).
    pub(crate) fn next_frame(&mut self) -> Option<Result<Frame, NoiseError>> {
        let mut state = self.decrypt.take()?;
        loop {
            match self.decoder.next_transport_frame(state) {
                Err(e) => return Some(Err(self.read_error(NoiseError::from_codec(e)))),
                Ok(Decrypted::Frame(frame, next)) => {
                    self.decrypt = Some(next);
                    self.frame_bytes = 0;
                    let header = frame.header();
                    // The decoder hands out the header and payload in one allocation (the
                    // system-memory buffer codec_sv2 uses without its `with_buffer_pool`
                    // feature); dropping the header in place keeps it.
                    let mut payload = frame.into_bytes();
                    payload.drain(..Header::SIZE);
                    return Some(Ok(Frame { header, payload }));
                }
                Ok(Decrypted::Incomplete(want, next)) => {
                    state = next;
                    if self.frame_bytes + want > self.max_frame_bytes {
                        let limit = self.max_frame_bytes;
                        return Some(Err(self.read_error(NoiseError::FrameTooLarge { limit })));
                    }
                    if !self.fill(want) {
                        self.decrypt = Some(state);
                        return None;
                    }
                    self.frame_bytes += want;
                }
            }
        }
    }

    fn read_error(&mut self, e: NoiseError) -> NoiseError {
        self.read_failed = true;
        self.input = Input::default();
        e
    }

    /// Hands the decoder its next `want` bytes if they are all here.
    fn fill(&mut self, want: usize) -> bool {
        if self.input.len() < want {
            return false;
        }
        let window = self.decoder.writable();
        debug_assert_eq!(window.len(), want);
        window.copy_from_slice(&self.input.available()[..want]);
        self.input.consume(want);
        true
    }

    /// Frames and encrypts one payload, appending the wire bytes to `out` (after any handshake
    /// bytes not taken yet, so that they cannot be sent out of order).
    pub(crate) fn encrypt(
        &mut self,
        msg_type: u8,
        extension_type: u16,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), NoiseError> {
        let Some(state) = self.encrypt.as_mut() else {
            return Err(if self.write_failed {
                NoiseError::Failed
            } else {
                NoiseError::HandshakeIncomplete
            });
        };
        let frame = OutFrame::new(msg_type, extension_type, payload).ok_or(
            NoiseError::PayloadTooLarge {
                len: payload.len(),
                max: MAX_PAYLOAD_LEN,
            },
        )?;
        match self.encoder.encode_transport(frame, state) {
            Ok(bytes) => {
                self.take_handshake_bytes(out);
                out.extend_from_slice(bytes.as_ref());
                Ok(())
            }
            Err(e) => {
                // The cipher's nonce may have moved past what the peer will expect.
                self.write_failed = true;
                self.encrypt = None;
                Err(NoiseError::Encrypt(e.to_string()))
            }
        }
    }
}
