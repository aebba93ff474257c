//! Reading an events file: the header, then events one at a time.
//!
//! A file whose writer crashed ends in part of a record; that is how such a file looks, not an
//! error: iteration ends after the last complete record and [`EventReader::truncated`] says so.
//! Iteration is not fused: on a file still being written, calling `next` again after `None`
//! picks up whatever has been appended since, so the same reader can tail a live file.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::decode::{decode_header, decode_record, DecodeError, Record};
use crate::format::{MAX_HEADER_BODY_LEN, MAX_RECORD_LEN, PREAMBLE_LEN, RECORD_PREFIX_LEN};
use crate::schema::{Event, Header};
use crate::short_str::ShortStr;

/// Why a file cannot be read. Offsets are bytes from the start of the file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file cannot be opened.
    #[error("cannot open events file {path}: {source}")]
    Open {
        /// The path given.
        path: PathBuf,
        /// Why opening failed.
        source: io::Error,
    },
    /// Reading failed at this file offset.
    #[error("reading events at byte {offset}: {source}")]
    Io {
        /// Bytes from the start of the file where the failed read began.
        offset: u64,
        /// The I/O error.
        source: io::Error,
    },
    /// The file ends before its preamble and header do.
    #[error("events file ends inside its header, after {len} bytes")]
    TruncatedHeader {
        /// The file's length, in bytes.
        len: u64,
    },
    /// The bytes at this file offset do not decode.
    #[error("corrupt events data at byte {offset}: {source}")]
    Corrupt {
        /// Bytes from the start of the file to the bad preamble, header or record.
        offset: u64,
        /// What is wrong with it.
        source: DecodeError,
    },
}

/// Reads one events file. Iterates `Result<Event, ReadError>`; after an error it yields nothing
/// more (the rest of a corrupt file cannot be framed).
pub struct EventReader<R = File> {
    src: R,
    header: Header,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`; `offset` is the file offset of `buf[start]`.
    start: usize,
    end: usize,
    offset: u64,
    truncated: bool,
    failed: bool,
    skipped: u64,
}

/// Big enough for the largest header and several records, so a refill never has to grow it.
const BUF_LEN: usize = 64 * 1024;
const _: () = assert!(BUF_LEN >= PREAMBLE_LEN + MAX_HEADER_BODY_LEN);
const _: () = assert!(BUF_LEN >= 2 * (RECORD_PREFIX_LEN + MAX_RECORD_LEN));

impl EventReader<File> {
    /// Opens `path` and reads its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ReadError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|source| ReadError::Open {
            path: path.to_owned(),
            source,
        })?;
        EventReader::new(file)
    }
}

impl<R: Read> EventReader<R> {
    /// Reads the header from `src` (any byte stream positioned at the start of a file).
    pub fn new(src: R) -> Result<Self, ReadError> {
        let mut r = EventReader {
            src,
            // Replaced by the decoded header before `new` returns.
            header: Header {
                schema_major: 0,
                schema_minor: 0,
                role: ShortStr::EMPTY,
                config: ShortStr::EMPTY,
                pid: 0,
                realtime_ns: 0,
                monotonic_ns: 0,
            },
            buf: vec![0; BUF_LEN],
            start: 0,
            end: 0,
            offset: 0,
            truncated: false,
            failed: false,
            skipped: 0,
        };
        loop {
            match decode_header(&r.buf[r.start..r.end]) {
                Ok(Some((header, len))) => {
                    r.header = header;
                    r.start += len;
                    r.offset = len as u64;
                    return Ok(r);
                }
                Ok(None) => {
                    if r.fill()? == 0 {
                        return Err(ReadError::TruncatedHeader { len: r.end as u64 });
                    }
                }
                Err(source) => return Err(ReadError::Corrupt { offset: 0, source }),
            }
        }
    }

    /// The file's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Whether the data read so far ends in part of a record (a writer that crashed or is still
    /// writing). Cleared if a later `next` completes the record.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Bytes after the last complete record, when [`truncated`](Self::truncated).
    pub fn trailing_bytes(&self) -> usize {
        self.end - self.start
    }

    /// The file offset of the next record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Records of kinds this build does not know (from a newer minor version), skipped.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Reads every remaining event.
    pub fn read_all(mut self) -> Result<EventLog, ReadError> {
        let mut events = Vec::new();
        for e in &mut self {
            events.push(e?);
        }
        Ok(EventLog {
            header: self.header,
            events,
            truncated: self.truncated,
            skipped: self.skipped,
        })
    }

    /// Appends to `buf` what the source has; returns the number of bytes read (0 at its end).
    fn fill(&mut self) -> Result<usize, ReadError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            // A record is at most a small fraction of the buffer, so after moving the unconsumed
            // tail to the front there is always room.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        loop {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(ReadError::Io {
                        offset: self.offset + (self.end - self.start) as u64,
                        source,
                    })
                }
            }
        }
    }
}

impl<R: Read> Iterator for EventReader<R> {
    type Item = Result<Event, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            match decode_record(&self.buf[self.start..self.end], self.header.schema_minor) {
                Ok(Some((record, len))) => {
                    self.start += len;
                    self.offset += len as u64;
                    self.truncated = false;
                    match record {
                        Record::Event(e) => return Some(Ok(e)),
                        Record::Unknown { .. } => self.skipped += 1,
                    }
                }
                Ok(None) => match self.fill() {
                    Ok(0) => {
                        self.truncated = self.start < self.end;
                        return None;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.failed = true;
                        return Some(Err(e));
                    }
                },
                Err(source) => {
                    self.failed = true;
                    return Some(Err(ReadError::Corrupt {
                        offset: self.offset,
                        source,
                    }));
                }
            }
        }
    }
}

/// A whole file in memory.
#[derive(Clone, Debug)]
pub struct EventLog {
    /// What the file says about its writer.
    pub header: Header,
    /// The file's events, in file order.
    pub events: Vec<Event>,
    /// The file ended in part of a record (its writer crashed).
    pub truncated: bool,
    /// Records of unknown kinds skipped.
    pub skipped: u64,
}

/// Reads a whole file.
pub fn read_file(path: impl AsRef<Path>) -> Result<EventLog, ReadError> {
    EventReader::open(path)?.read_all()
}
