//! How each field type is written and read, once for the encoder and the decoder: every event
//! kind lists its fields once (`kinds!` in [`crate::schema`]), and both directions walk that
//! list through [`Field`], so the two cannot disagree on order or shape.
//!
//! Integers are little-endian; `bool` is one byte, 0 or 1; an `Option` is a byte 0 (none) or
//! 1 followed by the value; a string is a length byte and UTF-8 ([`ShortStr`]); enums are one
//! byte each (their codes below); a job id is a byte 0 and a `u64`, or 1 and a string; an
//! address is its family byte, its IP, its port (and a V6 scope id).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use primitives::{Hash256, Target};

use crate::decode::DecodeError;
use crate::fingerprint::Fingerprint;
use crate::format::{ADDR_V4, ADDR_V6, VERDICT_ACCEPTED};
use crate::job_id::JobId;
use crate::schema::{Direction, Perspective, TipSource};
use crate::short_str::ShortStr;
use crate::verdict::{Reason, Verdict};

/// Why a field could not be read: the record ran out, or the bytes are not a valid value.
pub(crate) enum FieldError {
    Short,
    Invalid(DecodeError),
}

impl From<DecodeError> for FieldError {
    fn from(e: DecodeError) -> Self {
        FieldError::Invalid(e)
    }
}

pub(crate) fn bad(what: &'static str, code: u8) -> FieldError {
    FieldError::Invalid(DecodeError::BadCode { what, code })
}

/// A record body (or header body) being read, front to back.
pub(crate) struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], FieldError> {
        let s = self
            .buf
            .get(self.pos..self.pos + N)
            .ok_or(FieldError::Short)?;
        self.pos += N;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    /// The next field.
    #[inline]
    pub(crate) fn get<T: Field>(&mut self) -> Result<T, FieldError> {
        T::get(self)
    }
}

/// A value as it is written in a record.
pub(crate) trait Field: Sized {
    fn put(&self, out: &mut Vec<u8>);
    fn get(d: &mut Dec<'_>) -> Result<Self, FieldError>;
}

macro_rules! le_ints {
    ($($t:ty),*) => {$(
        impl Field for $t {
            #[inline]
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            #[inline]
            fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
                Ok(<$t>::from_le_bytes(d.take()?))
            }
        }
    )*};
}

le_ints!(u8, u16, u32, u64);

impl Field for f64 {
    #[inline]
    fn put(&self, out: &mut Vec<u8>) {
        self.to_bits().put(out);
    }
    #[inline]
    fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
        Ok(f64::from_bits(d.get()?))
    }
}

impl Field for bool {
    #[inline]
    fn put(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    #[inline]
    fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
        match d.get::<u8>()? {
            0 => Ok(false),
            1 => Ok(true),
            code => Err(bad("bool", code)),
        }
    }
}

impl Field for Hash256 {
    #[inline]
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }
    #[inline]
    fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
        Ok(Hash256(d.take()?))
    }
}

impl Field for Target {
    #[inline]
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    #[inline]
    fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
        Ok(Target::from_le_bytes(&d.take()?))
    }
}

impl Field for Fingerprint {
    #[inline]
    fn put(&self, out: &mut Vec<u8>) {
        self.0.put(out);
    }
    #[inline]
    fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
        Ok(Fingerprint(d.get()?))
    }
}

impl Field for ShortStr {
    #[inline]
    fn put(&self, out: &mut Vec<u8>) {
        // ShortStr's capacity is below 256, so its length always fits the u8 prefix.
        out.push(self.len() as u8);
        out.extend_from_slice(self.as_bytes());
    }
    fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
        let len = d.get::<u8>()?;
        if len as usize > ShortStr::CAPACITY {
            return Err(DecodeError::StringTooLong(len).into());
        }
        let bytes = d
            .buf
            .get(d.pos..d.pos + len as usize)
            .ok_or(FieldError::Short)?;
        d.pos += len as usize;
        let s = std::str::from_utf8(bytes).map_err(|_| DecodeError::BadUtf8)?;
        Ok(ShortStr::new(s))
    }
}

impl<T: Field> Field for Option<T> {
    #[inline]
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Some(v) => {
                out.push(1);
                v.put(out);
            }
            None => out.push(0),
        }
    }
    #[inline]
    fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
        match d.get::<u8>()? {
            0 => Ok(None),
            1 => T::get(d).map(Some),
            code => Err(bad("option", code)),
        }
    }
}

impl Field for JobId {
    #[inline]
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            JobId::Num(n) => {
                out.push(0);
                n.put(out);
            }
            JobId::Text(t) => {
                out.push(1);
                t.put(out);
            }
        }
    }
    fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
        match d.get::<u8>()? {
            0 => Ok(JobId::Num(d.get()?)),
            1 => Ok(JobId::Text(d.get()?)),
            code => Err(bad("job id", code)),
        }
    }
}

impl Field for SocketAddr {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            SocketAddr::V4(a) => {
                out.push(ADDR_V4);
                out.extend_from_slice(&a.ip().octets());
                a.port().put(out);
            }
            SocketAddr::V6(a) => {
                out.push(ADDR_V6);
                out.extend_from_slice(&a.ip().octets());
                a.port().put(out);
                a.scope_id().put(out);
            }
        }
    }
    fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
        match d.get::<u8>()? {
            ADDR_V4 => {
                let ip = Ipv4Addr::from(d.take::<4>()?);
                Ok(SocketAddrV4::new(ip, d.get()?).into())
            }
            ADDR_V6 => {
                let ip = Ipv6Addr::from(d.take::<16>()?);
                let port = d.get()?;
                Ok(SocketAddrV6::new(ip, port, 0, d.get()?).into())
            }
            code => Err(bad("address family", code)),
        }
    }
}

impl Field for Verdict {
    #[inline]
    fn put(&self, out: &mut Vec<u8>) {
        out.push(verdict_code(*self));
    }
    fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
        match d.get::<u8>()? {
            VERDICT_ACCEPTED => Ok(Verdict::Accepted),
            code => Reason::ALL
                .get(usize::from(code) - 1)
                .map(|&r| Verdict::Rejected(r))
                .ok_or(bad("verdict", code)),
        }
    }
}

/// A verdict's wire code: [`VERDICT_ACCEPTED`], or a reason's place in [`Reason::ALL`] from 1.
pub(crate) fn verdict_code(v: Verdict) -> u8 {
    match v {
        Verdict::Accepted => VERDICT_ACCEPTED,
        Verdict::Rejected(r) => match r {
            Reason::Stale => 1,
            Reason::Duplicate => 2,
            Reason::LowDifficulty => 3,
            Reason::InvalidJob => 4,
            Reason::InvalidChannel => 5,
            Reason::Unauthorized => 6,
            Reason::Other => 7,
        },
    }
}

/// One-byte enums: each variant's code, and the name a bad code is reported under.
macro_rules! byte_enums {
    ($($t:ident, $what:literal { $($variant:ident = $code:literal),* $(,)? })*) => {$(
        impl Field for $t {
            #[inline]
            fn put(&self, out: &mut Vec<u8>) {
                out.push(match self {
                    $($t::$variant => $code,)*
                });
            }
            #[inline]
            fn get(d: &mut Dec<'_>) -> Result<Self, FieldError> {
                match d.get::<u8>()? {
                    $($code => Ok($t::$variant),)*
                    code => Err(bad($what, code)),
                }
            }
        }
    )*};
}

byte_enums! {
    TipSource, "tip source" { Network = 0, Submitted = 1 }
    Perspective, "perspective" { Given = 0, Received = 1 }
    Direction, "direction" { Up = 0, Down = 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Field + PartialEq + std::fmt::Debug>(v: T) {
        let mut out = Vec::new();
        v.put(&mut out);
        let mut d = Dec::new(&out);
        let back: T = d.get().ok().expect("decodes");
        assert_eq!(back, v);
        assert_eq!(d.remaining(), 0, "{v:?} left bytes");
        // Any shorter body is short, never a wrong value.
        for cut in 0..out.len() {
            assert!(matches!(
                T::get(&mut Dec::new(&out[..cut])),
                Err(FieldError::Short)
            ));
        }
    }

    #[test]
    fn every_field_type_reads_back_what_it_wrote() {
        round_trip(0xdead_beef_u32);
        round_trip(u64::MAX);
        round_trip(1.5e-7_f64);
        round_trip(true);
        round_trip(Hash256([7; 32]));
        round_trip(Some(Fingerprint(42)));
        round_trip(None::<u32>);
        round_trip(ShortStr::new("pool"));
        round_trip(JobId::Num(9));
        round_trip(JobId::Text(ShortStr::new("a1")));
        round_trip(SocketAddr::from(([127, 0, 0, 2], 3333)));
        round_trip(
            "[::1%3]:8"
                .parse::<SocketAddrV6>()
                .map(SocketAddr::V6)
                .unwrap(),
        );
        for r in Reason::ALL {
            round_trip(Verdict::Rejected(r));
        }
        round_trip(Verdict::Accepted);
        round_trip(Direction::Down);
        round_trip(Perspective::Received);
        round_trip(TipSource::Submitted);
    }

    #[test]
    fn bad_codes_are_errors() {
        for (bytes, what) in [
            (&[2u8][..], "bool"),
            (&[9u8], "direction"),
            (&[8u8], "verdict"),
        ] {
            let mut d = Dec::new(bytes);
            let r = match what {
                "bool" => d.get::<bool>().map(|_| ()),
                "direction" => d.get::<Direction>().map(|_| ()),
                _ => d.get::<Verdict>().map(|_| ()),
            };
            match r {
                Err(FieldError::Invalid(DecodeError::BadCode { what: w, .. })) => {
                    assert_eq!(w, what)
                }
                _ => panic!("{what}: not a bad code"),
            }
        }
    }
}
