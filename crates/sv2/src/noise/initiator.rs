//! The client's side of the handshake: it speaks first, then checks the server's certificate.

use std::time::{SystemTime, UNIX_EPOCH};

use codec_sv2::{Handshake, InitiatorSent};
use noise_sv2::{Initiator, INITIATOR_EXPECTED_HANDSHAKE_MESSAGE_SIZE};

use super::{CertificateProblem, Codec, Frame, NoiseError};

/// The spec's tolerance for clock drift between the certificate's issuer and its checker
/// (noise_sv2 applies the same when it verifies).
const CLOCK_LEEWAY_SECS: u32 = 10;

/// A client connection: sends its ephemeral key at once, and accepts the server only if the
/// server's certificate is signed by the authority key it was given and valid now.
pub struct NoiseInitiator {
    codec: Codec,
    phase: Phase,
    /// Unix time to check the certificate at; the system clock when `None`.
    now: Option<u32>,
}

enum Phase {
    AwaitingReply(Handshake<InitiatorSent>),
    Done,
    Failed,
}

impl NoiseInitiator {
    /// A client that accepts only servers certified by `authority_public_key` (x-only bytes,
    /// see [`crate::keys::parse_public_key`]), refusing frames over `max_frame_bytes`.
    pub fn new(
        authority_public_key: [u8; 32],
        max_frame_bytes: usize,
    ) -> Result<NoiseInitiator, NoiseError> {
        let role = Initiator::from_raw_k(authority_public_key)
            .map_err(|_| NoiseError::InvalidAuthorityKey)?;
        NoiseInitiator::from_role(role, max_frame_bytes)
    }

    /// From a reference initiator built by the caller (`Initiator::without_pk` skips the
    /// certificate check, for talking to servers whose authority is not known).
    pub fn from_role(
        role: Box<Initiator>,
        max_frame_bytes: usize,
    ) -> Result<NoiseInitiator, NoiseError> {
        let mut codec = Codec::new(max_frame_bytes);
        let (first, sent) = Handshake::initiator(role)
            .step_0()
            .map_err(|e| NoiseError::Handshake(e.to_string()))?;
        codec.queue_handshake(first);
        Ok(NoiseInitiator {
            codec,
            phase: Phase::AwaitingReply(sent),
            now: None,
        })
    }

    /// Checks the certificate as of `unix_secs` instead of the system clock (simulated time,
    /// tests).
    pub fn with_now(mut self, unix_secs: u32) -> NoiseInitiator {
        self.now = Some(unix_secs);
        self
    }

    /// Bytes from the server. Completes the handshake once the server's reply is all here;
    /// bytes past it are kept for [`NoiseInitiator::next_frame`].
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), NoiseError> {
        if let Some(decided) = self.feed_codec(bytes) {
            return decided;
        }
        let reply = match self.codec.read_handshake::<InitiatorSent>() {
            Ok(Some(reply)) => reply,
            Ok(None) => return Ok(()),
            Err(e) => return Err(self.failed(e)),
        };
        let Phase::AwaitingReply(sent) = std::mem::replace(&mut self.phase, Phase::Failed) else {
            unreachable!("checked above");
        };
        let reply: [u8; INITIATOR_EXPECTED_HANDSHAKE_MESSAGE_SIZE] = match reply
            .payload()
            .try_into()
        {
            Ok(r) => r,
            Err(_) => {
                return Err(self.failed(NoiseError::Handshake("reply has the wrong size".into())))
            }
        };
        let now = self.now.unwrap_or_else(unix_now);
        match sent.step_2_with_now(reply, now) {
            Ok(transport) => {
                self.codec.establish(transport);
                self.phase = Phase::Done;
                Ok(())
            }
            Err(e) => Err(self.failed(handshake_error(e, now))),
        }
    }

    connection_methods!("NoiseInitiator");
}

fn unix_now() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs().min(u32::MAX as u64) as u32)
        .unwrap_or(0)
}

/// Names the certificate problem when it is one: the validity window is checked here only to
/// say which (noise_sv2 has already refused the certificate).
fn handshake_error(e: codec_sv2::Error, now: u32) -> NoiseError {
    match e {
        codec_sv2::Error::NoiseSv2Error(noise_sv2::Error::InvalidCertificate(cert)) => {
            let problem = if cert.not_valid_after.saturating_add(CLOCK_LEEWAY_SECS) < now {
                CertificateProblem::Expired {
                    not_valid_after: cert.not_valid_after,
                    now,
                }
            } else if cert.valid_from.saturating_sub(CLOCK_LEEWAY_SECS) > now {
                CertificateProblem::NotYetValid {
                    valid_from: cert.valid_from,
                    now,
                }
            } else {
                CertificateProblem::Signature
            };
            NoiseError::Certificate(problem)
        }
        other => NoiseError::Handshake(other.to_string()),
    }
}
