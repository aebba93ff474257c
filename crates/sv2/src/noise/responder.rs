//! The server's side of the handshake: it answers the client's ephemeral key with its own keys
//! and a certificate signed by its authority key, and is done.

use std::time::Duration;

use codec_sv2::Handshake;
use noise_sv2::{Responder, ELLSWIFT_ENCODING_SIZE};

use super::{Codec, Frame, NoiseError};
use crate::keys::AuthorityKeys;

/// A server connection. Its certificate is valid for the given time from the handshake; clients
/// check it only then.
pub struct NoiseResponder {
    codec: Codec,
    phase: Phase,
}

enum Phase {
    AwaitingKey(Handshake<Responder>),
    Done,
    Failed,
}

impl NoiseResponder {
    /// A server connection certified by `keys`, refusing frames over `max_frame_bytes`.
    pub fn new(
        keys: &AuthorityKeys,
        cert_validity: Duration,
        max_frame_bytes: usize,
    ) -> Result<NoiseResponder, NoiseError> {
        let role = keys
            .responder(cert_validity)
            .map_err(|e| NoiseError::Handshake(e.to_string()))?;
        Ok(NoiseResponder::from_role(role, max_frame_bytes))
    }

    /// From a reference responder built by the caller.
    pub fn from_role(role: Box<Responder>, max_frame_bytes: usize) -> NoiseResponder {
        NoiseResponder {
            codec: Codec::new(max_frame_bytes),
            phase: Phase::AwaitingKey(Handshake::responder(role)),
        }
    }

    /// Bytes from the client. Once its ephemeral key is all here the reply is ready in
    /// [`NoiseResponder::take_handshake_bytes`] and frames can flow; bytes past the key are kept
    /// for [`NoiseResponder::next_frame`].
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), NoiseError> {
        match self.phase {
            Phase::Failed => return Err(NoiseError::Failed),
            Phase::Done => {
                self.codec.feed(bytes);
                return Ok(());
            }
            Phase::AwaitingKey(_) => self.codec.feed(bytes),
        }
        let key = match self.codec.read_handshake::<Responder>() {
            Ok(Some(key)) => key,
            Ok(None) => return Ok(()),
            Err(e) => return Err(self.failed(e)),
        };
        let Phase::AwaitingKey(handshake) = std::mem::replace(&mut self.phase, Phase::Failed)
        else {
            unreachable!("checked above");
        };
        let key: [u8; ELLSWIFT_ENCODING_SIZE] = match key.payload().try_into() {
            Ok(k) => k,
            Err(_) => {
                return Err(self.failed(NoiseError::Handshake(
                    "ephemeral key has the wrong size".into(),
                )))
            }
        };
        match handshake.step_1(key) {
            Ok((reply, transport)) => {
                self.codec.queue_handshake(reply);
                self.codec.establish(transport);
                self.phase = Phase::Done;
                Ok(())
            }
            Err(e) => Err(self.failed(NoiseError::Handshake(e.to_string()))),
        }
    }

    fn failed(&mut self, e: NoiseError) -> NoiseError {
        self.phase = Phase::Failed;
        self.codec.fail();
        e
    }

    /// Appends the handshake reply not yet sent to `out`. [`NoiseResponder::encrypt`] prepends
    /// it too, so a server that answers at once cannot send it out of order.
    pub fn take_handshake_bytes(&mut self, out: &mut Vec<u8>) -> bool {
        self.codec.take_handshake_bytes(out)
    }

    /// The client's key arrived and the reply is made: frames can flow both ways.
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

    /// Heap bytes this connection holds itself (the input buffer and pending handshake bytes),
    /// beyond `size_of::<NoiseResponder>()`.
    pub fn heap_bytes(&self) -> usize {
        self.codec.heap_bytes()
    }

    pub(crate) fn into_codec(self) -> Codec {
        self.codec
    }
}
