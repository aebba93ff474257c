//! Events to bytes (sans-IO): appends to a caller's buffer so that the writer can reuse one.

use std::net::SocketAddr;

use primitives::{Hash256, Target};

use crate::fingerprint::Fingerprint;
use crate::format::{
    ADDR_V4, ADDR_V6, MAGIC, MAX_RECORD_LEN, PREAMBLE_LEN, RECORD_PREFIX_LEN, VERDICT_ACCEPTED,
};
use crate::job_id::JobId;
use crate::schema::{Direction, EventKind, Header, Perspective, TipSource};
use crate::short_str::ShortStr;
use crate::verdict::{Reason, Verdict};

/// Appends the file preamble and header.
pub fn encode_header(out: &mut Vec<u8>, h: &Header) {
    out.extend_from_slice(&MAGIC);
    out.put_u16(h.schema_major);
    out.put_u16(h.schema_minor);
    let len_at = out.len();
    out.put_u32(0);
    let body_start = out.len();
    out.put_u32(h.pid);
    out.put_u64(h.realtime_ns);
    out.put_u64(h.monotonic_ns);
    out.put_str(&h.role);
    out.put_str(&h.config);
    let body_len = (out.len() - body_start) as u32;
    out[len_at..len_at + 4].copy_from_slice(&body_len.to_le_bytes());
    debug_assert_eq!(body_start, len_at + 4);
    debug_assert!(body_start >= PREAMBLE_LEN);
}

/// Appends one length-prefixed record. Allocates only if `out` lacks
/// [`MAX_ENCODED_RECORD`] bytes of spare capacity.
pub fn encode_record(out: &mut Vec<u8>, ts_ns: u64, kind: &EventKind) {
    let start = out.len();
    out.put_u16(0);
    out.put_u8(kind.tag());
    out.put_u64(ts_ns);
    match kind {
        EventKind::TemplateCreated(e) => {
            out.put_str(&e.node);
            out.put_u64(e.template_id);
            out.put_u32(e.height);
            out.put_hash(&e.prev_hash);
            out.put_u64(e.value_sats);
            out.put_u64(e.fees_sats);
            out.put_u32(e.tx_count);
            out.put_u64(e.fingerprint.0);
            out.put_bool(e.future);
        }
        EventKind::TipChanged(e) => {
            out.put_str(&e.node);
            out.put_hash(&e.hash);
            out.put_u32(e.height);
            out.put_hash(&e.prev_hash);
            out.put_u8(match e.source {
                TipSource::Network => 0,
                TipSource::Submitted => 1,
            });
        }
        EventKind::JobSent(e) => {
            out.put_u64(e.conn);
            out.put_opt_u32(e.channel);
            out.put_job_id(&e.job_id);
            out.put_opt_u64(e.template_id);
            out.put_opt_fingerprint(e.fingerprint);
            out.put_opt_hash(e.prev_hash.as_ref());
            out.put_target(e.target);
            out.put_bool(e.clean);
            out.put_bool(e.future);
        }
        EventKind::JobReceived(e) => {
            out.put_u64(e.device);
            out.put_opt_u32(e.channel);
            out.put_job_id(&e.job_id);
            out.put_opt_fingerprint(e.fingerprint);
            out.put_opt_hash(e.prev_hash.as_ref());
            out.put_target(e.target);
            out.put_bool(e.clean);
            out.put_bool(e.future);
        }
        EventKind::JobActivated(e) => {
            out.put_u64(e.conn);
            out.put_opt_u32(e.channel);
            out.put_job_id(&e.job_id);
            out.put_hash(&e.prev_hash);
            out.put_opt_fingerprint(e.fingerprint);
        }
        EventKind::TargetChanged(e) => {
            out.put_u64(e.conn);
            out.put_opt_u32(e.channel);
            out.put_target(e.target);
        }
        EventKind::ShareSent(e) => {
            out.put_u64(e.device);
            out.put_opt_u32(e.channel);
            out.put_u64(e.seq);
            out.put_job_id(&e.job_id);
            out.put_u32(e.nonce);
            out.put_u32(e.ntime);
            out.put_u32(e.version);
            out.put_f64(e.difficulty);
            out.put_opt_hash(e.hash.as_ref());
        }
        EventKind::ShareResult(e) => {
            out.put_u64(e.conn);
            out.put_opt_u32(e.channel);
            out.put_u64(e.seq);
            out.put_job_id(&e.job_id);
            out.put_u32(e.nonce);
            out.put_f64(e.difficulty);
            out.put_u8(verdict_code(e.verdict));
            out.put_u8(match e.perspective {
                Perspective::Given => 0,
                Perspective::Received => 1,
            });
        }
        EventKind::BlockSubmitted(e) => {
            out.put_hash(&e.hash);
            out.put_u32(e.height);
            out.put_opt_u64(e.template_id);
            out.put_opt_u64(e.conn);
        }
        EventKind::BlockFound(e) => {
            out.put_str(&e.node);
            out.put_hash(&e.hash);
            out.put_u32(e.height);
            out.put_opt_u64(e.template_id);
            out.put_opt_u64(e.job_id);
            out.put_opt_u64(e.conn);
            out.put_bool(e.stored);
        }
        EventKind::BlockResult(e) => {
            out.put_str(&e.node);
            out.put_hash(&e.hash);
            out.put_u32(e.height);
            out.put_bool(e.accepted);
            out.put_str(&e.reason);
        }
        EventKind::LinkBytes(e) => {
            out.put_str(&e.link);
            out.put_u64(e.conn);
            out.put_u8(match e.direction {
                Direction::Up => 0,
                Direction::Down => 1,
            });
            out.put_u64(e.bytes);
        }
        EventKind::LinkRtt(e) => {
            out.put_str(&e.link);
            out.put_u64(e.conn);
            out.put_u64(e.rtt_ns);
        }
        EventKind::ConnectionOpened(e) => {
            out.put_u64(e.conn);
            out.put_addr(&e.peer);
            out.put_addr(&e.local);
            out.put_str(&e.label);
        }
        EventKind::ConnectionClosed(e) => {
            out.put_u64(e.conn);
            out.put_str(&e.reason);
        }
        EventKind::HashesDone(e) => {
            out.put_opt_u64(e.device);
            out.put_u64(e.hashes);
        }
        EventKind::Mark(e) => {
            out.put_str(&e.name);
        }
    }
    let body_len = out.len() - start - RECORD_PREFIX_LEN;
    debug_assert!(body_len <= MAX_RECORD_LEN);
    out[start..start + RECORD_PREFIX_LEN].copy_from_slice(&(body_len as u16).to_le_bytes());
}

/// Room to reserve for one encoded record, prefix included.
pub const MAX_ENCODED_RECORD: usize = RECORD_PREFIX_LEN + MAX_RECORD_LEN;

pub(crate) fn verdict_code(v: Verdict) -> u8 {
    match v {
        Verdict::Accepted => VERDICT_ACCEPTED,
        Verdict::Rejected(r) => reason_code(r),
    }
}

fn reason_code(r: Reason) -> u8 {
    match r {
        Reason::Stale => 1,
        Reason::Duplicate => 2,
        Reason::LowDifficulty => 3,
        Reason::InvalidJob => 4,
        Reason::InvalidChannel => 5,
        Reason::Unauthorized => 6,
        Reason::Other => 7,
    }
}

trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_f64(&mut self, v: f64);
    fn put_bool(&mut self, v: bool);
    fn put_hash(&mut self, h: &Hash256);
    fn put_target(&mut self, t: Target);
    fn put_str(&mut self, s: &ShortStr);
    fn put_job_id(&mut self, j: &JobId);
    fn put_addr(&mut self, a: &SocketAddr);
    fn put_opt_u32(&mut self, v: Option<u32>);
    fn put_opt_u64(&mut self, v: Option<u64>);
    fn put_opt_fingerprint(&mut self, v: Option<Fingerprint>);
    fn put_opt_hash(&mut self, v: Option<&Hash256>);
}

impl Put for Vec<u8> {
    #[inline]
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    #[inline]
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    fn put_f64(&mut self, v: f64) {
        self.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    #[inline]
    fn put_bool(&mut self, v: bool) {
        self.push(v as u8);
    }
    #[inline]
    fn put_hash(&mut self, h: &Hash256) {
        self.extend_from_slice(&h.0);
    }
    #[inline]
    fn put_target(&mut self, t: Target) {
        self.extend_from_slice(&t.to_le_bytes());
    }
    #[inline]
    fn put_str(&mut self, s: &ShortStr) {
        // ShortStr's capacity is below 256, so its length always fits the u8 prefix.
        self.push(s.len() as u8);
        self.extend_from_slice(s.as_bytes());
    }
    #[inline]
    fn put_job_id(&mut self, j: &JobId) {
        match j {
            JobId::Num(n) => {
                self.push(0);
                self.put_u64(*n);
            }
            JobId::Text(t) => {
                self.push(1);
                self.put_str(t);
            }
        }
    }
    fn put_addr(&mut self, a: &SocketAddr) {
        match a {
            SocketAddr::V4(a) => {
                self.push(ADDR_V4);
                self.extend_from_slice(&a.ip().octets());
                self.put_u16(a.port());
            }
            SocketAddr::V6(a) => {
                self.push(ADDR_V6);
                self.extend_from_slice(&a.ip().octets());
                self.put_u16(a.port());
                self.put_u32(a.scope_id());
            }
        }
    }
    #[inline]
    fn put_opt_u32(&mut self, v: Option<u32>) {
        match v {
            Some(v) => {
                self.push(1);
                self.put_u32(v);
            }
            None => self.push(0),
        }
    }
    #[inline]
    fn put_opt_u64(&mut self, v: Option<u64>) {
        match v {
            Some(v) => {
                self.push(1);
                self.put_u64(v);
            }
            None => self.push(0),
        }
    }
    #[inline]
    fn put_opt_fingerprint(&mut self, v: Option<Fingerprint>) {
        self.put_opt_u64(v.map(|f| f.0));
    }
    #[inline]
    fn put_opt_hash(&mut self, v: Option<&Hash256>) {
        match v {
            Some(h) => {
                self.push(1);
                self.put_hash(h);
            }
            None => self.push(0),
        }
    }
}
