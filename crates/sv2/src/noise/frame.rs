//! SV2 frames as they come out of and go into a Noise connection.
//!
//! A frame is the spec's six-byte header (extension type with the `channel_msg` bit, message
//! type, 24-bit payload length) and the payload. framing_sv2 owns the header's layout; this
//! file adds the two shapes the connection needs: a decrypted [`Frame`] handed to the caller
//! (payload owned, so messages decode from it in place), and [`OutFrame`], a caller's payload
//! slice framed without being copied into a message type first.

use framing_sv2::framing::EncodableFrame;
use framing_sv2::header::Header;

/// The `channel_msg` bit of the extension type: the payload starts with the `channel_id` it is
/// addressed to.
pub const CHANNEL_MSG_BIT: u16 = 0x8000;

/// Largest payload the 24-bit length field can declare.
pub const MAX_PAYLOAD_LEN: usize = (1 << 24) - 1;

/// One decrypted frame: its header and its payload.
#[derive(Clone, Debug)]
pub struct Frame {
    /// The frame header: extension type, message type, payload length.
    pub header: Header,
    /// The decrypted payload (the message, `channel_id` first when the `channel_msg` bit is set).
    pub payload: Vec<u8>,
}

impl Frame {
    /// The header's message type.
    pub fn msg_type(&self) -> u8 {
        self.header.msg_type()
    }

    /// The extension type without the `channel_msg` bit.
    pub fn extension(&self) -> u16 {
        self.header.ext_type_without_channel_msg()
    }

    /// Whether the `channel_msg` bit is set.
    pub fn channel_msg(&self) -> bool {
        self.header.channel_msg()
    }

    /// The channel a channel message is addressed to (its first four payload bytes).
    pub fn channel_id(&self) -> Option<u32> {
        if !self.channel_msg() {
            return None;
        }
        let id = self.payload.get(..4)?;
        Some(u32::from_le_bytes(id.try_into().ok()?))
    }
}

/// The extension type field as sent: `extension` with the `channel_msg` bit when `channel_msg`.
pub fn extension_type(extension: u16, channel_msg: bool) -> u16 {
    if channel_msg {
        extension | CHANNEL_MSG_BIT
    } else {
        extension & !CHANNEL_MSG_BIT
    }
}

/// The wire size of an encrypted frame with a payload of `len` bytes: the encrypted header
/// (with its MAC) and a MAC per plaintext chunk of the payload.
pub fn wire_len(len: usize) -> usize {
    let chunks = len.div_ceil(codec_sv2::SV2_FRAME_PLAINTEXT_CHUNK_SIZE);
    codec_sv2::ENCRYPTED_SV2_FRAME_HEADER_SIZE + len + chunks * noise_sv2::AEAD_MAC_LEN
}

/// A payload the caller already serialized, framed on the way into the encoder.
pub(crate) struct OutFrame<'a> {
    header: [u8; Header::SIZE],
    payload: &'a [u8],
}

impl<'a> OutFrame<'a> {
    /// `None` when the payload is longer than a frame can declare.
    pub(crate) fn new(msg_type: u8, extension_type: u16, payload: &'a [u8]) -> Option<Self> {
        if payload.len() > MAX_PAYLOAD_LEN {
            return None;
        }
        let ext = extension_type.to_le_bytes();
        let len = (payload.len() as u32).to_le_bytes();
        Some(OutFrame {
            header: [ext[0], ext[1], msg_type, len[0], len[1], len[2]],
            payload,
        })
    }
}

impl EncodableFrame for OutFrame<'_> {
    fn encoded_length(&self) -> usize {
        Header::SIZE + self.payload.len()
    }

    fn encode_into(self, dst: &mut [u8]) -> Result<(), framing_sv2::Error> {
        let expected = self.encoded_length();
        if dst.len() != expected {
            return Err(framing_sv2::Error::UnexpectedDestinationLength {
                expected,
                actual: dst.len(),
            });
        }
        dst[..Header::SIZE].copy_from_slice(&self.header);
        dst[Header::SIZE..].copy_from_slice(self.payload);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_frame_header_is_the_spec_layout() {
        let f = OutFrame::new(0x1a, extension_type(0, true), &[1, 2, 3]).unwrap();
        let mut dst = vec![0; f.encoded_length()];
        f.encode_into(&mut dst).unwrap();
        assert_eq!(dst, [0x00, 0x80, 0x1a, 3, 0, 0, 1, 2, 3]);
        let header = Header::from_bytes(&dst).unwrap();
        assert!(header.channel_msg());
        assert_eq!(header.payload_length(), 3);
        assert!(OutFrame::new(0, 0, &vec![0; MAX_PAYLOAD_LEN + 1]).is_none());
        // A destination of the wrong length is refused rather than half written.
        let f = OutFrame::new(0, 0, &[1]).unwrap();
        assert!(f.encode_into(&mut [0; 9]).is_err());
    }

    #[test]
    fn channel_id_is_read_only_for_channel_messages() {
        let header = Header::from_bytes(&[0x00, 0x80, 0x1a, 4, 0, 0]).unwrap();
        let f = Frame {
            header,
            payload: 7u32.to_le_bytes().to_vec(),
        };
        assert_eq!(f.channel_id(), Some(7));
        assert_eq!(f.extension(), 0);
        let header = Header::from_bytes(&[0x00, 0x00, 0x00, 4, 0, 0]).unwrap();
        let f = Frame {
            header,
            payload: 7u32.to_le_bytes().to_vec(),
        };
        assert_eq!(f.channel_id(), None);
    }
}
