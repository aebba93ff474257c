//! Events to bytes (sans-IO): appends to a caller's buffer so that the writer can reuse one.

use crate::codec::Field;
use crate::format::{MAGIC, MAX_RECORD_LEN, PREAMBLE_LEN, RECORD_PREFIX_LEN};
use crate::schema::{EventKind, Header};

/// Appends the file preamble and header.
pub fn encode_header(out: &mut Vec<u8>, h: &Header) {
    out.extend_from_slice(&MAGIC);
    h.schema_major.put(out);
    h.schema_minor.put(out);
    let len_at = out.len();
    0u32.put(out);
    let body_start = out.len();
    h.pid.put(out);
    h.realtime_ns.put(out);
    h.monotonic_ns.put(out);
    h.role.put(out);
    h.config.put(out);
    let body_len = (out.len() - body_start) as u32;
    out[len_at..len_at + 4].copy_from_slice(&body_len.to_le_bytes());
    debug_assert_eq!(body_start, len_at + 4);
    debug_assert!(body_start >= PREAMBLE_LEN);
}

/// Appends one length-prefixed record. Allocates only if `out` lacks
/// [`MAX_ENCODED_RECORD`] bytes of spare capacity.
pub fn encode_record(out: &mut Vec<u8>, ts_ns: u64, kind: &EventKind) {
    let start = out.len();
    0u16.put(out);
    kind.tag().put(out);
    ts_ns.put(out);
    kind.put_fields(out);
    let body_len = out.len() - start - RECORD_PREFIX_LEN;
    debug_assert!(body_len <= MAX_RECORD_LEN);
    out[start..start + RECORD_PREFIX_LEN].copy_from_slice(&(body_len as u16).to_le_bytes());
}

/// Room to reserve for one encoded record, prefix included.
pub const MAX_ENCODED_RECORD: usize = RECORD_PREFIX_LEN + MAX_RECORD_LEN;
