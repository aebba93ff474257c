//! The one event vocabulary of stratumlab: the schema every role writes, the writer it writes
//! through, and the reader the lab computes metrics from (docs/metrics.md).
//!
//! - [`schema`]: [`Event`] = CLOCK_MONOTONIC timestamp + [`EventKind`]; each file has a
//!   [`Header`] naming the role, the lab configuration and the process.
//! - [`fingerprint()`]: the template fingerprint that ties jobs of any protocol to templates.
//! - [`now_ns`]: the clock every process stamps with.
//! - [`EventSink`]: a cheap, cloneable, allocation-free emitter backed by a writer thread.
//! - [`EventReader`], [`read_file`], [`merge()`]: reading one file, or many as one time line.
//! - Every event and the header implement `serde::Serialize` for JSON dumps: hashes as display
//!   (RPC) hex, targets as big-endian hex with their difficulty, fingerprints as 16 hex digits,
//!   rejection reasons in docs/metrics.md's words.
//!
//! # Use
//!
//! ```
//! use events::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("pool.events");
//! // A role given `--events PATH` creates a sink; without it, `EventSink::disabled()`.
//! let sink = EventSink::create(&path, "pool", "sv1")?;
//! sink.emit(ShareResult {
//!     conn: 7,
//!     channel: None,
//!     seq: 42,
//!     job_id: JobId::text("5f2a01"),
//!     nonce: 0x1234_5678,
//!     difficulty: 1024.0,
//!     verdict: Verdict::Rejected(Reason::Stale),
//!     perspective: Perspective::Given,
//! });
//! let stats = sink.finish()?;
//! assert_eq!(stats.events_written, 1);
//!
//! // The lab reads it back.
//! let mut reader = EventReader::open(&path)?;
//! assert_eq!(reader.header().role, "pool");
//! for event in &mut reader {
//!     let event = event?;
//!     println!("{}", serde_json::to_string(&event)?);
//! }
//! assert!(!reader.truncated());
//! # Ok(())
//! # }
//! ```
//!
//! # File format (schema 1.0)
//!
//! All integers are little-endian.
//!
//! ```text
//! preamble   magic        8 bytes  "STRLABEV"
//!            major        u16      readers refuse a major they do not know
//!            minor        u16      newer minors only add: kinds, and fields at the end of a
//!                                  record or header, which older readers skip
//!            header_len   u32      length of the header body (at most 4096)
//! header     pid          u32
//!            realtime_ns  u64      wall clock (ns since the Unix epoch) ...
//!            monotonic_ns u64      ... paired with CLOCK_MONOTONIC at the same instant
//!            role         str
//!            config       str
//! records    len          u16      bytes that follow in this record, 9..=1024
//!            kind         u8       tag of the EventKind (EventKind::ALL lists them)
//!            ts_ns        u64      CLOCK_MONOTONIC ns
//!            fields       ...      the kind's fields in declaration order
//! ```
//!
//! Field encodings: `str` is a u8 length then UTF-8 bytes (at most 64); `Option<T>` a u8 0 (none)
//! or 1 followed by `T`; `bool` a u8 0 or 1; `f64` its IEEE-754 bits as u64; a hash its 32 bytes
//! in internal order; a target its 256-bit value as 32 little-endian bytes (as SV2 carries it); a
//! job id a u8 0 then u64 (SV2) or 1 then `str` (SV1); a socket address a u8 4 then 4 address
//! bytes and a u16 port, or 6 then 16 address bytes, a u16 port and a u32 scope id; enums a u8
//! (a verdict is 0 for accepted, 1..=7 for the reasons stale, duplicate, low_difficulty,
//! invalid_job, invalid_channel, unauthorized, other).
//!
//! The length prefix frames every record, so a reader skips kinds it does not know and notices a
//! record cut short by a crash: a file ends either exactly after a record or in the middle of its
//! last one, which readers report as truncated rather than as an error. Anything else (bad magic,
//! an unknown major, a length outside the bounds, an invalid code inside a record) is corruption,
//! reported with its byte offset.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod clock;
mod codec;
pub mod decode;
pub mod encode;
pub mod fingerprint;
pub mod format;
pub mod job_id;
pub mod link_counter;
pub mod merge;
pub mod reader;
pub mod schema;
pub mod short_str;
pub mod verdict;
pub mod writer;

mod json;

pub use clock::{now_ns, realtime_ns};
pub use decode::DecodeError;
pub use fingerprint::{fingerprint, Fingerprint};
pub use job_id::JobId;
pub use link_counter::REPORT_EVERY as LINK_REPORT_EVERY;
pub use link_counter::{LinkCounter, Side, HANDSHAKE};
pub use merge::{merge, Merge, MergeError};
pub use reader::{read_file, EventLog, EventReader, ReadError};
pub use schema::*;
pub use short_str::ShortStr;
pub use verdict::{Reason, ReasonCounts, UnknownReason, Verdict};
pub use writer::{EventSink, SinkOptions, SinkStats};

/// Re-exported so that emitters name hashes and targets with the same types the schema uses.
pub use primitives::{Hash256, Target};
