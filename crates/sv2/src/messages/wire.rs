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

/// Declares a message once: its struct, and its [`super::Sv2Message`] impl, whose encoder and
/// decoder both come from the one field list. Each field names how it crosses to its
/// reference type:
///
/// | kind | plain | reference |
/// |---|---|---|
/// | `copy` | integers, `bool`, `f32` | the same |
/// | `str` | `String` | `Str0255` (UTF-8 checked when decoding) |
/// | `b032`, `b0255`, `b064k` | `Vec<u8>` | `B032`, `B0255`, `B064K` |
/// | `hash` | `[u8; 32]` | `U256` |
/// | `target` | [`primitives::Target`] | `U256`, little-endian |
/// | `option` | `Option<u32>` | `Sv2Option<u32>` |
/// | `path` | `Vec<[u8; 32]>` | `Seq0255<U256>` |
/// | `wtxids` | `Vec<[u8; 32]>` | `Seq064K<U256>` |
/// | `u16s`, `u32s` | `Vec<u16>`, `Vec<u32>` | `Seq064K<u16>`, `Seq064K<u32>` |
/// | `txs` | `Vec<Vec<u8>>` | `Seq064K<B016M>` |
///
/// The reference struct has the message's name in `$wire` and the same field names.
macro_rules! message {
    (
        $wire:ident;
        $(#[$meta:meta])*
        pub struct $name:ident(
            $msg_type:ident,
            channel_bit: $bit:expr,
            $spec:literal $(,)?
        ) {
            $($(#[$fmeta:meta])* pub $field:ident: $ty:ty => $kind:ident,)*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $crate::messages::Sv2Message for $name {
            const MSG_TYPE: u8 = $wire::$msg_type;
            const CHANNEL_BIT: bool = $bit;
            const NAME: &'static str = $spec;

            #[allow(unused_variables)]
            fn encode(&self, out: &mut Vec<u8>) -> Result<(), $crate::messages::EncodeError> {
                let n = Self::NAME;
                // Values the reference struct borrows from (a target's bytes) live here.
                $(let $field = $crate::messages::wire::stage!($kind, self.$field);)*
                $crate::messages::wire::write(
                    n,
                    $wire::$name {
                        $($field: $crate::messages::wire::enc!($kind, $field, n, stringify!($field)),)*
                    },
                    out,
                )
            }

            #[allow(unused_variables)]
            fn decode(payload: &mut [u8]) -> Result<Self, $crate::messages::DecodeError> {
                let (t, n) = (Self::MSG_TYPE, Self::NAME);
                let m: $wire::$name = $crate::messages::wire::read(t, n, payload)?;
                Ok($name {
                    $($field: $crate::messages::wire::dec!($kind, m.$field, t, n, stringify!($field)),)*
                })
            }
        }
    };
}
pub(crate) use message;

/// What a field's reference value is built from when encoding.
macro_rules! stage {
    (copy, $v:expr) => {
        $v
    };
    (option, $v:expr) => {
        $v
    };
    (target, $v:expr) => {
        $v.to_le_bytes()
    };
    ($kind:ident, $v:expr) => {
        &$v
    };
}
pub(crate) use stage;

/// The reference value of a staged field.
macro_rules! enc {
    (copy, $v:ident, $n:ident, $f:expr) => {
        $v
    };
    (str, $v:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::str0255($n, $f, $v)?
    };
    (b032, $v:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::b032($n, $f, $v)?
    };
    (b0255, $v:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::b0255($n, $f, $v)?
    };
    (b064k, $v:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::b064k($n, $f, $v)?
    };
    (hash, $v:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::u256($v)
    };
    (target, $v:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::u256(&$v)
    };
    (option, $v:ident, $n:ident, $f:expr) => {
        binary_sv2::Sv2Option::new($v)
    };
    (path, $v:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::path($n, $f, $v)?
    };
    (wtxids, $v:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::hash_seq064k($n, $f, $v)?
    };
    (u16s, $v:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::u16_seq($n, $f, $v)?
    };
    (u32s, $v:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::u32_seq($n, $f, $v)?
    };
    (txs, $v:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::b016m_seq($n, $f, $v)?
    };
}
pub(crate) use enc;

/// The plain value of a decoded reference field.
macro_rules! dec {
    (copy, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $w
    };
    (str, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::string($t, $n, $f, $w)?
    };
    (b032, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $w.to_owned_bytes()
    };
    (b0255, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $w.to_owned_bytes()
    };
    (b064k, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $w.to_owned_bytes()
    };
    (hash, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::array($w)
    };
    (target, $w:expr, $t:ident, $n:ident, $f:expr) => {
        primitives::Target::from_le_bytes($w.as_array())
    };
    (option, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $w.into_inner()
    };
    (path, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $crate::messages::wire::hashes($w)
    };
    (wtxids, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $w.iter().map(|h| *h.as_array()).collect()
    };
    (u16s, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $w.into_inner()
    };
    (u32s, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $w.into_inner()
    };
    (txs, $w:expr, $t:ident, $n:ident, $f:expr) => {
        $w.iter().map(|t| t.as_bytes().to_vec()).collect()
    };
}
pub(crate) use dec;
