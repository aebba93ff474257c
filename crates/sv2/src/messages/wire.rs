//! Between plain values and the reference crates' wire types.
//!
//! Encoding borrows: the reference message struct is built over slices of the plain value
//! (binary_sv2's borrowed types hold `&[u8]`), serialized by binary_sv2 into the caller's
//! buffer, and dropped. Decoding reads the reference struct from the payload and copies its
//! fields out, so that a decoded message holds no borrowed wire buffer.

use binary_sv2::{
    Decodable, Encodable, GetSize, Seq0255, Seq064K, Str0255, B016M, B0255, B032, B064K, U256,
};

use super::{DecodeError, EncodeError};

/// Serializes `wire` onto the end of `out`.
pub(crate) fn write<T: Encodable + GetSize>(
    name: &'static str,
    wire: T,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let start = out.len();
    out.resize(start + wire.get_size(), 0);
    match binary_sv2::to_writer(wire, &mut out[start..]) {
        Ok(n) => {
            out.truncate(start + n);
            Ok(())
        }
        Err(e) => {
            out.truncate(start);
            Err(EncodeError::Serialize {
                name,
                reason: format!("{e:?}"),
            })
        }
    }
}

/// Reads the reference struct `T` from the front of `payload`. Bytes after it are ignored, as
/// the reference decoder does: later spec versions append fields.
pub(crate) fn read<'a, T: Decodable<'a>>(
    msg_type: u8,
    name: &'static str,
    payload: &'a mut [u8],
) -> Result<T, DecodeError> {
    binary_sv2::from_bytes(payload).map_err(|e| DecodeError::Malformed {
        msg_type,
        name,
        reason: format!("{e:?}"),
    })
}

fn too_long(name: &'static str, field: &'static str, len: usize, max: usize) -> EncodeError {
    EncodeError::FieldTooLong {
        name,
        field,
        len,
        max,
    }
}

pub(crate) fn str0255<'a>(
    name: &'static str,
    field: &'static str,
    s: &'a str,
) -> Result<Str0255<'a>, EncodeError> {
    Str0255::new(s.as_bytes()).map_err(|_| too_long(name, field, s.len(), 255))
}

pub(crate) fn b032<'a>(
    name: &'static str,
    field: &'static str,
    b: &'a [u8],
) -> Result<B032<'a>, EncodeError> {
    B032::new(b).map_err(|_| too_long(name, field, b.len(), 32))
}

pub(crate) fn b0255<'a>(
    name: &'static str,
    field: &'static str,
    b: &'a [u8],
) -> Result<B0255<'a>, EncodeError> {
    B0255::new(b).map_err(|_| too_long(name, field, b.len(), 255))
}

pub(crate) fn b064k<'a>(
    name: &'static str,
    field: &'static str,
    b: &'a [u8],
) -> Result<B064K<'a>, EncodeError> {
    B064K::new(b).map_err(|_| too_long(name, field, b.len(), u16::MAX as usize))
}

pub(crate) fn u256(b: &[u8; 32]) -> U256<'_> {
    U256::from(b)
}

/// A merkle path, deepest first.
pub(crate) fn path<'a>(
    name: &'static str,
    field: &'static str,
    hashes: &'a [[u8; 32]],
) -> Result<Seq0255<'a, U256<'a>>, EncodeError> {
    Seq0255::new(hashes.iter().map(U256::from).collect())
        .map_err(|_| too_long(name, field, hashes.len(), 255))
}

/// A list of hashes (wtxids) of up to 65535 elements.
pub(crate) fn hash_seq064k<'a>(
    name: &'static str,
    field: &'static str,
    hashes: &'a [[u8; 32]],
) -> Result<Seq064K<'a, U256<'a>>, EncodeError> {
    Seq064K::new(hashes.iter().map(U256::from).collect())
        .map_err(|_| too_long(name, field, hashes.len(), 65535))
}

pub(crate) fn u16_seq<'a>(
    name: &'static str,
    field: &'static str,
    items: &[u16],
) -> Result<Seq064K<'a, u16>, EncodeError> {
    Seq064K::new(items.to_vec()).map_err(|_| too_long(name, field, items.len(), 65535))
}

pub(crate) fn u32_seq<'a>(
    name: &'static str,
    field: &'static str,
    items: &[u32],
) -> Result<Seq064K<'a, u32>, EncodeError> {
    Seq064K::new(items.to_vec()).map_err(|_| too_long(name, field, items.len(), 65535))
}

pub(crate) fn b016m_seq<'a>(
    name: &'static str,
    field: &'static str,
    items: &'a [Vec<u8>],
) -> Result<Seq064K<'a, B016M<'a>>, EncodeError> {
    let items = items
        .iter()
        .map(|b| B016M::new(b).map_err(|_| too_long(name, field, b.len(), (1 << 24) - 1)))
        .collect::<Result<Vec<_>, _>>()?;
    let len = items.len();
    Seq064K::new(items).map_err(|_| too_long(name, field, len, 65535))
}

/// A string field, which must be UTF-8 to become a `String`.
pub(crate) fn string(
    msg_type: u8,
    name: &'static str,
    field: &'static str,
    s: Str0255<'_>,
) -> Result<String, DecodeError> {
    String::from_utf8(s.as_bytes().to_vec()).map_err(|_| DecodeError::NotUtf8 {
        msg_type,
        name,
        field,
    })
}

pub(crate) fn array(h: U256<'_>) -> [u8; 32] {
    h.to_array()
}

pub(crate) fn hashes(p: Seq0255<'_, U256<'_>>) -> Vec<[u8; 32]> {
    p.iter().map(|h| *h.as_array()).collect()
}
