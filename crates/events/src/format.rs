//! Constants of the file format, shared by the encoder and the decoder (see the crate docs).

/// The first bytes of every events file.
pub const MAGIC: [u8; 8] = *b"STRLABEV";

/// Magic, schema major (u16), schema minor (u16), header body length (u32).
pub const PREAMBLE_LEN: usize = 16;

/// Longest header body a reader accepts; anything longer is corruption, not a newer minor.
pub const MAX_HEADER_BODY_LEN: usize = 4096;

/// Every record starts with its length as a little-endian u16.
pub const RECORD_PREFIX_LEN: usize = 2;

/// A record body holds at least its kind tag (u8) and timestamp (u64).
pub const MIN_RECORD_LEN: usize = 9;

/// Longest record body a reader accepts. Today's largest is well under 200 bytes; the margin is
/// room for fields later minors append.
pub const MAX_RECORD_LEN: usize = 1024;

/// Wire codes of `Verdict`: 0 is accepted, the reasons follow in `Reason::ALL` order from 1.
pub const VERDICT_ACCEPTED: u8 = 0;

/// Wire codes of socket addresses.
pub const ADDR_V4: u8 = 4;
/// Wire code of an IPv6 socket address (IPv4 is [`ADDR_V4`]).
pub const ADDR_V6: u8 = 6;
