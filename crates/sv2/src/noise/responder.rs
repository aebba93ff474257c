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
        if let Some(decided) = self.feed_codec(bytes) {
            return decided;
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

    connection_methods!("NoiseResponder");
}
