//! Bytes to events (sans-IO): decodes from a slice and says how much it consumed, or that it
//! needs more bytes, so the same code serves a file reader, a live tail and tests.

use crate::codec::{bad, Dec, FieldError};
use crate::format::{
    MAGIC, MAX_HEADER_BODY_LEN, MAX_RECORD_LEN, MIN_RECORD_LEN, PREAMBLE_LEN, RECORD_PREFIX_LEN,
};
use crate::schema::*;
use crate::short_str::ShortStr;

/// Why bytes are not a valid events file. Offsets are added by the reader.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The file does not start with the events magic; holds the bytes seen (up to 8).
    #[error("bad magic {0:02x?}: not a stratumlab events file")]
    BadMagic(Vec<u8>),
    #[error(
        "schema {major}.{minor} cannot be read by this build (schema {SCHEMA_MAJOR}.{SCHEMA_MINOR})"
    )]
    /// The file's schema version is one this build cannot read (another major, or a newer minor
    /// without the reader's skip rules).
    UnsupportedSchema {
        /// The file's schema major.
        major: u16,
        /// The file's schema minor.
        minor: u16,
    },
    /// The header body length in the preamble exceeds [`MAX_HEADER_BODY_LEN`]; holds it.
    #[error("header body of {0} bytes exceeds the format's limit of {MAX_HEADER_BODY_LEN}")]
    HeaderTooLong(u32),
    /// The header body (this many bytes) ends before its fields do.
    #[error("header body of {0} bytes ends before its fields do")]
    ShortHeader(usize),
    /// A record's length prefix is outside the format's bounds; holds it.
    #[error("record length {0} is outside {MIN_RECORD_LEN}..={MAX_RECORD_LEN}")]
    BadRecordLength(usize),
    /// A record of a known kind ends before its fields do.
    #[error("{kind} record of {len} bytes ends before its fields do")]
    ShortRecord {
        /// The kind's JSON name.
        kind: &'static str,
        /// The record body's length, in bytes.
        len: usize,
    },
    /// A record of a known kind has bytes after its fields that this schema version does not allow.
    #[error("{kind} record of {len} bytes has {extra} bytes after its fields")]
    TrailingBytes {
        /// The kind's JSON name.
        kind: &'static str,
        /// The record body's length, in bytes.
        len: usize,
        /// Bytes left over after the last field.
        extra: usize,
    },
    /// An enum field (direction, verdict, address family, ...) holds a code this build does not
    /// know.
    #[error("invalid {what} code {code}")]
    BadCode {
        /// Which field's codes ("direction", "verdict", ...).
        what: &'static str,
        /// The code found.
        code: u8,
    },
    /// A string's length byte exceeds [`ShortStr::CAPACITY`]; holds it.
    #[error("string length {0} exceeds {cap}", cap = ShortStr::CAPACITY)]
    StringTooLong(u8),
    /// A string's bytes are not UTF-8.
    #[error("string is not valid UTF-8")]
    BadUtf8,
}

/// A decoded record.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Record {
    /// A known event.
    Event(Event),
    /// A kind this build does not know (written by a newer minor version): skipped.
    Unknown {
        /// The record's kind tag.
        tag: u8,
        /// The record's timestamp, CLOCK_MONOTONIC nanoseconds.
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
    let mut d = Dec::new(body);
    let header = (|| -> Result<Header, FieldError> {
        Ok(Header {
            schema_major: major,
            schema_minor: minor,
            pid: d.get()?,
            realtime_ns: d.get()?,
            monotonic_ns: d.get()?,
            role: d.get()?,
            config: d.get()?,
        })
    })()
    .map_err(|e| match e {
        FieldError::Short => DecodeError::ShortHeader(body.len()),
        FieldError::Invalid(e) => e,
    })?;
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
    let kind = EventKind::get_fields(tag, &mut d)
        // EventKind::ALL and the codec come from one list; a tag in one is in the other.
        .unwrap_or_else(|| Err(bad("event kind", tag)))
        .map_err(|e| match e {
            FieldError::Short => DecodeError::ShortRecord { kind: name, len },
            FieldError::Invalid(e) => e,
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
