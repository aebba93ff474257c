//! Bytes to events (sans-IO): decodes from a slice and says how much it consumed, or that it
//! needs more bytes, so the same code serves a file reader, a live tail and tests.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use primitives::{Hash256, Target};

use crate::fingerprint::Fingerprint;
use crate::format::{
    ADDR_V4, ADDR_V6, MAGIC, MAX_HEADER_BODY_LEN, MAX_RECORD_LEN, MIN_RECORD_LEN, PREAMBLE_LEN,
    RECORD_PREFIX_LEN, VERDICT_ACCEPTED,
};
use crate::job_id::JobId;
use crate::schema::*;
use crate::short_str::ShortStr;
use crate::verdict::{Reason, Verdict};

/// Why bytes are not a valid events file. Offsets are added by the reader.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("bad magic {0:02x?}: not a stratumlab events file")]
    BadMagic(Vec<u8>),
    #[error(
        "schema {major}.{minor} cannot be read by this build (schema {SCHEMA_MAJOR}.{SCHEMA_MINOR})"
    )]
    UnsupportedSchema { major: u16, minor: u16 },
    #[error("header body of {0} bytes exceeds the format's limit of {MAX_HEADER_BODY_LEN}")]
    HeaderTooLong(u32),
    #[error("header body of {0} bytes ends before its fields do")]
    ShortHeader(usize),
    #[error("record length {0} is outside {MIN_RECORD_LEN}..={MAX_RECORD_LEN}")]
    BadRecordLength(usize),
    #[error("{kind} record of {len} bytes ends before its fields do")]
    ShortRecord { kind: &'static str, len: usize },
    #[error("{kind} record of {len} bytes has {extra} bytes after its fields")]
    TrailingBytes {
        kind: &'static str,
        len: usize,
        extra: usize,
    },
    #[error("invalid {what} code {code}")]
    BadCode { what: &'static str, code: u8 },
    #[error("string length {0} exceeds {cap}", cap = ShortStr::CAPACITY)]
    StringTooLong(u8),
    #[error("string is not valid UTF-8")]
    BadUtf8,
}

/// A decoded record.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Record {
    Event(Event),
    /// A kind this build does not know (written by a newer minor version): skipped.
    Unknown {
        tag: u8,
        ts_ns: u64,
    },
}

/// Decodes the preamble and header at the start of `buf`: `Ok(None)` when `buf` is too short to
/// hold them, else the header and the number of bytes it took.
pub fn decode_header(buf: &[u8]) -> Result<Option<(Header, usize)>, DecodeError> {
    let seen = buf.len().min(MAGIC.len());
    if buf[..seen] != MAGIC[..seen] {
        return Err(DecodeError::BadMagic(buf[..seen].to_vec()));
    }
    if buf.len() < PREAMBLE_LEN {
        return Ok(None);
    }
    let major = u16::from_le_bytes([buf[8], buf[9]]);
    let minor = u16::from_le_bytes([buf[10], buf[11]]);
    if major != SCHEMA_MAJOR {
        return Err(DecodeError::UnsupportedSchema { major, minor });
    }
    let body_len = u32::from_le_bytes([buf[12], buf[13], buf[14], buf[15]]);
    if body_len as usize > MAX_HEADER_BODY_LEN {
        return Err(DecodeError::HeaderTooLong(body_len));
    }
    let total = PREAMBLE_LEN + body_len as usize;
    let Some(body) = buf.get(PREAMBLE_LEN..total) else {
        return Ok(None);
    };
    let short = |_| DecodeError::ShortHeader(body.len());
    let mut d = Dec::new(body);
    let header = Header {
        schema_major: major,
        schema_minor: minor,
        pid: d.u32().map_err(short)?,
        realtime_ns: d.u64().map_err(short)?,
        monotonic_ns: d.u64().map_err(short)?,
        role: d.str()?.ok_or(DecodeError::ShortHeader(body.len()))?,
        config: d.str()?.ok_or(DecodeError::ShortHeader(body.len()))?,
    };
    // Bytes after the known fields are a newer minor's additions: ignored.
    Ok(Some((header, total)))
}

/// Decodes one record at the start of `buf`: `Ok(None)` when `buf` holds only part of it, else
/// the record and the number of bytes it took. `file_minor` is the schema minor of the file: a
/// newer minor may append fields to known kinds, which are then skipped.
pub fn decode_record(buf: &[u8], file_minor: u16) -> Result<Option<(Record, usize)>, DecodeError> {
    let Some(prefix) = buf.get(..RECORD_PREFIX_LEN) else {
        return Ok(None);
    };
    let len = u16::from_le_bytes([prefix[0], prefix[1]]) as usize;
    if !(MIN_RECORD_LEN..=MAX_RECORD_LEN).contains(&len) {
        return Err(DecodeError::BadRecordLength(len));
    }
    let total = RECORD_PREFIX_LEN + len;
    let Some(body) = buf.get(RECORD_PREFIX_LEN..total) else {
        return Ok(None);
    };
    let tag = body[0];
    let mut ts = [0u8; 8];
    ts.copy_from_slice(&body[1..9]);
    let ts_ns = u64::from_le_bytes(ts);
    let Some(&(_, name)) = EventKind::ALL.iter().find(|k| k.0 == tag) else {
        return Ok(Some((Record::Unknown { tag, ts_ns }, total)));
    };
    let mut d = Dec::new(&body[9..]);
    let kind = decode_kind(tag, &mut d).map_err(|e| match e {
        Short => DecodeError::ShortRecord { kind: name, len },
        Invalid(e) => e,
    })?;
    let from_newer_minor = file_minor > SCHEMA_MINOR;
    if d.remaining() > 0 && !from_newer_minor {
        return Err(DecodeError::TrailingBytes {
            kind: name,
            len,
            extra: d.remaining(),
        });
    }
    Ok(Some((Record::Event(Event { ts_ns, kind }), total)))
}

/// Why a field could not be read: the record ran out, or the bytes are not a valid value.
enum FieldError {
    Short,
    Invalid(DecodeError),
}
use FieldError::{Invalid, Short};

impl From<DecodeError> for FieldError {
    fn from(e: DecodeError) -> Self {
        Invalid(e)
    }
}

/// Reads fields in the order [`crate::encode::encode_record`] writes them.
fn decode_kind(tag: u8, d: &mut Dec<'_>) -> Result<EventKind, FieldError> {
    Ok(match tag {
        1 => TemplateCreated {
            node: d.short_str()?,
            template_id: d.u64()?,
            height: d.u32()?,
            prev_hash: d.hash()?,
            value_sats: d.u64()?,
            fees_sats: d.u64()?,
            tx_count: d.u32()?,
            fingerprint: Fingerprint(d.u64()?),
            future: d.bool()?,
        }
        .into(),
        2 => TipChanged {
            node: d.short_str()?,
            hash: d.hash()?,
            height: d.u32()?,
            prev_hash: d.hash()?,
            source: match d.u8()? {
                0 => TipSource::Network,
                1 => TipSource::Submitted,
                code => return Err(bad("tip source", code)),
            },
        }
        .into(),
        3 => JobSent {
            conn: d.u64()?,
            channel: d.opt_u32()?,
            job_id: d.job_id()?,
            template_id: d.opt_u64()?,
            fingerprint: d.opt_u64()?.map(Fingerprint),
            prev_hash: d.opt_hash()?,
            target: d.target()?,
            clean: d.bool()?,
            future: d.bool()?,
        }
        .into(),
        4 => JobReceived {
            device: d.u64()?,
            channel: d.opt_u32()?,
            job_id: d.job_id()?,
            fingerprint: d.opt_u64()?.map(Fingerprint),
            prev_hash: d.opt_hash()?,
            target: d.target()?,
            clean: d.bool()?,
            future: d.bool()?,
        }
        .into(),
        5 => JobActivated {
            conn: d.u64()?,
            channel: d.opt_u32()?,
            job_id: d.job_id()?,
            prev_hash: d.hash()?,
            fingerprint: d.opt_u64()?.map(Fingerprint),
        }
        .into(),
        6 => TargetChanged {
            conn: d.u64()?,
            channel: d.opt_u32()?,
            target: d.target()?,
        }
        .into(),
        7 => ShareSent {
            device: d.u64()?,
            channel: d.opt_u32()?,
            seq: d.u64()?,
            job_id: d.job_id()?,
            nonce: d.u32()?,
            ntime: d.u32()?,
            version: d.u32()?,
            difficulty: d.f64()?,
            hash: d.opt_hash()?,
        }
        .into(),
        8 => ShareResult {
            conn: d.u64()?,
            channel: d.opt_u32()?,
            seq: d.u64()?,
            job_id: d.job_id()?,
            nonce: d.u32()?,
            difficulty: d.f64()?,
            verdict: d.verdict()?,
            perspective: match d.u8()? {
                0 => Perspective::Given,
                1 => Perspective::Received,
                code => return Err(bad("perspective", code)),
            },
        }
        .into(),
        9 => BlockSubmitted {
            hash: d.hash()?,
            height: d.u32()?,
            template_id: d.opt_u64()?,
            conn: d.opt_u64()?,
        }
        .into(),
        10 => BlockResult {
            node: d.short_str()?,
            hash: d.hash()?,
            height: d.u32()?,
            accepted: d.bool()?,
            reason: d.short_str()?,
        }
        .into(),
        11 => LinkBytes {
            link: d.short_str()?,
            conn: d.u64()?,
            direction: match d.u8()? {
                0 => Direction::Up,
                1 => Direction::Down,
                code => return Err(bad("direction", code)),
            },
            bytes: d.u64()?,
        }
        .into(),
        12 => LinkRtt {
            link: d.short_str()?,
            conn: d.u64()?,
            rtt_ns: d.u64()?,
        }
        .into(),
        13 => ConnectionOpened {
            conn: d.u64()?,
            peer: d.addr()?,
            local: d.addr()?,
            label: d.short_str()?,
        }
        .into(),
        14 => ConnectionClosed {
            conn: d.u64()?,
            reason: d.short_str()?,
        }
        .into(),
        15 => HashesDone {
            device: d.opt_u64()?,
            hashes: d.u64()?,
        }
        .into(),
        16 => Mark {
            name: d.short_str()?,
        }
        .into(),
        17 => BlockFound {
            node: d.short_str()?,
            hash: d.hash()?,
            height: d.u32()?,
            template_id: d.opt_u64()?,
            job_id: d.opt_u64()?,
            conn: d.opt_u64()?,
            stored: d.bool()?,
        }
        .into(),
        // decode_record only calls this for tags in EventKind::ALL; a tag listed there but not
        // here is a bug caught by the round-trip tests, reported rather than panicking.
        code => return Err(bad("event kind", code)),
    })
}

fn bad(what: &'static str, code: u8) -> FieldError {
    Invalid(DecodeError::BadCode { what, code })
}

struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], FieldError> {
        let s = self.buf.get(self.pos..self.pos + N).ok_or(Short)?;
        self.pos += N;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, FieldError> {
        Ok(self.take::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, FieldError> {
        Ok(u16::from_le_bytes(self.take()?))
    }

    fn u32(&mut self) -> Result<u32, FieldError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64, FieldError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn f64(&mut self) -> Result<f64, FieldError> {
        Ok(f64::from_bits(self.u64()?))
    }

    fn bool(&mut self) -> Result<bool, FieldError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            code => Err(bad("bool", code)),
        }
    }

    fn hash(&mut self) -> Result<Hash256, FieldError> {
        Ok(Hash256(self.take()?))
    }

    fn target(&mut self) -> Result<Target, FieldError> {
        Ok(Target::from_le_bytes(&self.take()?))
    }

    /// A header string: `Ok(None)` when the body ends first.
    fn str(&mut self) -> Result<Option<ShortStr>, DecodeError> {
        match self.short_str() {
            Ok(s) => Ok(Some(s)),
            Err(Short) => Ok(None),
            Err(Invalid(e)) => Err(e),
        }
    }

    fn short_str(&mut self) -> Result<ShortStr, FieldError> {
        let len = self.u8()?;
        if len as usize > ShortStr::CAPACITY {
            return Err(Invalid(DecodeError::StringTooLong(len)));
        }
        let bytes = self
            .buf
            .get(self.pos..self.pos + len as usize)
            .ok_or(Short)?;
        self.pos += len as usize;
        let s = std::str::from_utf8(bytes).map_err(|_| Invalid(DecodeError::BadUtf8))?;
        Ok(ShortStr::new(s))
    }

    fn job_id(&mut self) -> Result<JobId, FieldError> {
        match self.u8()? {
            0 => Ok(JobId::Num(self.u64()?)),
            1 => Ok(JobId::Text(self.short_str()?)),
            code => Err(bad("job id", code)),
        }
    }

    fn verdict(&mut self) -> Result<Verdict, FieldError> {
        match self.u8()? {
            VERDICT_ACCEPTED => Ok(Verdict::Accepted),
            code => Reason::ALL
                .get(code as usize - 1)
                .map(|&r| Verdict::Rejected(r))
                .ok_or(bad("verdict", code)),
        }
    }

    fn addr(&mut self) -> Result<SocketAddr, FieldError> {
        match self.u8()? {
            ADDR_V4 => {
                let ip = Ipv4Addr::from(self.take::<4>()?);
                Ok(SocketAddrV4::new(ip, self.u16()?).into())
            }
            ADDR_V6 => {
                let ip = Ipv6Addr::from(self.take::<16>()?);
                let port = self.u16()?;
                Ok(SocketAddrV6::new(ip, port, 0, self.u32()?).into())
            }
            code => Err(bad("address family", code)),
        }
    }

    fn opt<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, FieldError>,
    ) -> Result<Option<T>, FieldError> {
        match self.u8()? {
            0 => Ok(None),
            1 => f(self).map(Some),
            code => Err(bad("option", code)),
        }
    }

    fn opt_u32(&mut self) -> Result<Option<u32>, FieldError> {
        self.opt(Self::u32)
    }

    fn opt_u64(&mut self) -> Result<Option<u64>, FieldError> {
        self.opt(Self::u64)
    }

    fn opt_hash(&mut self) -> Result<Option<Hash256>, FieldError> {
        self.opt(Self::hash)
    }
}
