//! TLV fields: how an extension adds fields to a core message without changing its type.
//!
//! An extension that modifies a message appends type-length-value fields after the message's
//! own fields; the frame keeps the message's extension type (0 for a core message) and its
//! `msg_length` covers the TLVs. Each TLV is the extension id (U16), a field type (U8), the
//! value's length (U16, all little-endian) and the value. A receiver reads only the TLVs of
//! extensions negotiated on the connection and skips the others. See docs/architecture.md,
//! "Stratum V2 extensions".

use crate::messages::extensions::extension;

/// Bytes before a TLV's value: extension id, field type, length.
pub const HEADER_LEN: usize = 5;

/// Extension 0x0002's one field: the worker a `SubmitSharesExtended` share is from.
pub const USER_IDENTITY: (u16, u8) = (extension::WORKER_HASHRATE_TRACKING, 0x01);

/// The longest `user_identity` the extension allows, in bytes.
pub const MAX_USER_IDENTITY_LEN: usize = 32;

/// One TLV field, borrowed from the message it was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tlv<'a> {
    /// The extension that defines the field.
    pub extension: u16,
    /// The field, within its extension.
    pub field: u8,
    /// The value, as many bytes as the TLV's length says.
    pub value: &'a [u8],
}

/// Why TLV bytes cannot be read or written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TlvError {
    /// The bytes end inside a TLV.
    #[error("a TLV at byte {at} needs {need} bytes, {have} remain")]
    Truncated {
        /// Where the TLV starts, from the first TLV.
        at: usize,
        /// The bytes its header (or header and value) takes.
        need: usize,
        /// The bytes left from `at`.
        have: usize,
    },
    /// A value longer than a TLV's U16 length can say.
    #[error("a TLV value of {0} bytes exceeds 65535")]
    ValueTooLong(usize),
}

/// Appends one TLV to `out`.
pub fn write(extension: u16, field: u8, value: &[u8], out: &mut Vec<u8>) -> Result<(), TlvError> {
    let len = u16::try_from(value.len()).map_err(|_| TlvError::ValueTooLong(value.len()))?;
    out.extend_from_slice(&extension.to_le_bytes());
    out.push(field);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(value);
    Ok(())
}

/// The TLVs in `bytes` (what follows a message's own fields), in order; an error ends them.
pub fn read(bytes: &[u8]) -> Tlvs<'_> {
    Tlvs { bytes, at: 0 }
}

/// Iterator over TLVs (see [`read`]).
#[derive(Clone, Debug)]
pub struct Tlvs<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Tlvs<'a> {
    type Item = Result<Tlv<'a>, TlvError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = &self.bytes[self.at..];
        if rest.is_empty() {
            return None;
        }
        let truncated = |need| TlvError::Truncated {
            at: self.at,
            need,
            have: rest.len(),
        };
        if rest.len() < HEADER_LEN {
            let e = truncated(HEADER_LEN);
            self.at = self.bytes.len();
            return Some(Err(e));
        }
        let len = usize::from(u16::from_le_bytes([rest[3], rest[4]]));
        if rest.len() < HEADER_LEN + len {
            let e = truncated(HEADER_LEN + len);
            self.at = self.bytes.len();
            return Some(Err(e));
        }
        self.at += HEADER_LEN + len;
        Some(Ok(Tlv {
            extension: u16::from_le_bytes([rest[0], rest[1]]),
            field: rest[2],
            value: &rest[HEADER_LEN..HEADER_LEN + len],
        }))
    }
}

/// The `user_identity` a proxy names a device by: the worker part of its SV1 user (what follows
/// the account and its dot; the whole user if it has none), cut to the bytes the extension
/// allows at a character boundary. The account is the channel's already, and a long one (a
/// payout address) would leave every device the same 32 bytes.
pub fn user_identity_of(sv1_user: &str) -> &str {
    let name = sv1_user
        .split_once('.')
        .map_or(sv1_user, |(_, worker)| worker);
    if name.len() <= MAX_USER_IDENTITY_LEN {
        return name;
    }
    let mut end = MAX_USER_IDENTITY_LEN;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reads_back_in_order() {
        let mut b = Vec::new();
        write(2, 1, b"rig-7", &mut b).unwrap();
        write(0x4001, 9, &[], &mut b).unwrap();
        assert_eq!(&b[..HEADER_LEN], &[2, 0, 1, 5, 0]);
        let got: Vec<_> = read(&b).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            vec![
                Tlv {
                    extension: 2,
                    field: 1,
                    value: b"rig-7"
                },
                Tlv {
                    extension: 0x4001,
                    field: 9,
                    value: b""
                },
            ]
        );
    }

    #[test]
    fn a_cut_tlv_is_an_error_that_ends_the_list() {
        let mut b = Vec::new();
        write(2, 1, b"abcdef", &mut b).unwrap();
        b.truncate(8);
        let mut it = read(&b);
        assert_eq!(
            it.next(),
            Some(Err(TlvError::Truncated {
                at: 0,
                need: 11,
                have: 8
            }))
        );
        assert_eq!(it.next(), None);
        assert_eq!(
            read(&[2, 0]).next(),
            Some(Err(TlvError::Truncated {
                at: 0,
                need: 5,
                have: 2
            }))
        );
    }

    #[test]
    fn long_values_are_refused_and_long_names_cut_on_a_character() {
        assert_eq!(
            write(2, 1, &vec![0; 70_000], &mut Vec::new()),
            Err(TlvError::ValueTooLong(70_000))
        );
        assert_eq!(user_identity_of("short.rig"), "rig");
        assert_eq!(user_identity_of("rig"), "rig");
        assert_eq!(user_identity_of("acct.rig.7"), "rig.7");
        let address = "bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq";
        assert_eq!(user_identity_of(&format!("{address}.rig12")), "rig12");
        let long = format!("{}é", "a".repeat(31));
        assert_eq!(user_identity_of(&long), "a".repeat(31));
        assert_eq!(user_identity_of(&"b".repeat(40)).len(), 32);
    }
}
