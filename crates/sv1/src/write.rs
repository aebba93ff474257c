//! Writers for every line either side sends, appending to a caller's buffer.
//!
//! Replies echo the request's raw id. Nothing here allocates beyond growing the caller's buffer,
//! which in steady state already has the capacity, so answering a share costs no allocation.
//! Lines sent to many miners (a job, a difficulty) are written once and shared by the caller.

use std::io::Write as _;

use primitives::Hash256;

use crate::error::ErrorCode;
use crate::hex;

fn head(out: &mut Vec<u8>, id: &str) {
    out.extend_from_slice(b"{\"id\":");
    out.extend_from_slice(id.as_bytes());
}

/// `{"id":ID,"result":true|false,"error":null}`
pub fn reply_bool(out: &mut Vec<u8>, id: &str, v: bool) {
    head(out, id);
    out.extend_from_slice(if v {
        b",\"result\":true,\"error\":null}\n"
    } else {
        b",\"result\":false,\"error\":null}\n"
    });
}

/// `{"id":ID,"result":null,"error":[CODE,"MESSAGE",null]}`
pub fn reply_error(out: &mut Vec<u8>, id: &str, code: ErrorCode) {
    reply_error_message(out, id, code.code(), code.message());
}

/// An error with its own message (which must need no JSON escaping beyond quotes).
pub fn reply_error_message(out: &mut Vec<u8>, id: &str, code: i32, message: &str) {
    head(out, id);
    let _ = write!(out, ",\"result\":null,\"error\":[{code},");
    json_string(out, message);
    out.extend_from_slice(b",null]}\n");
}

/// `{"id":ID,"result":"pong","error":null}`
pub fn reply_pong(out: &mut Vec<u8>, id: &str) {
    head(out, id);
    out.extend_from_slice(b",\"result\":\"pong\",\"error\":null}\n");
}

/// A result given as raw JSON text.
pub fn reply_raw(out: &mut Vec<u8>, id: &str, result: &str) {
    head(out, id);
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result.as_bytes());
    out.extend_from_slice(b",\"error\":null}\n");
}

/// The `mining.subscribe` result: subscriptions, extranonce1, extranonce2 size.
pub fn reply_subscribe(
    out: &mut Vec<u8>,
    id: &str,
    subscription: &str,
    extranonce1: &[u8],
    extranonce2_size: usize,
) {
    head(out, id);
    out.extend_from_slice(b",\"result\":[[[\"mining.set_difficulty\",");
    json_string(out, subscription);
    out.extend_from_slice(b"],[\"mining.notify\",");
    json_string(out, subscription);
    out.extend_from_slice(b"]],\"");
    hex::encode_into(extranonce1, out);
    let _ = writeln!(out, "\",{extranonce2_size}],\"error\":null}}");
}

/// What a pool grants in answer to `mining.configure`: every requested extension is answered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigureReply<'a> {
    /// `Some(mask)` grants version rolling with that mask; `None` refuses it (if requested).
    pub version_rolling: Option<u32>,
    /// Whether `minimum-difficulty` is granted.
    pub minimum_difficulty: bool,
    /// Whether `subscribe-extranonce` is granted.
    pub subscribe_extranonce: bool,
    /// The extensions the miner asked for, in its order.
    pub requested: &'a [String],
}

/// The `mining.configure` result: each requested extension true or false, and the mask when
/// version rolling is granted.
pub fn reply_configure(out: &mut Vec<u8>, id: &str, r: &ConfigureReply<'_>) {
    head(out, id);
    out.extend_from_slice(b",\"result\":{");
    let mut first = true;
    for ext in r.requested {
        if !first {
            out.push(b',');
        }
        first = false;
        json_string(out, ext);
        match ext.as_str() {
            "version-rolling" => match r.version_rolling {
                Some(mask) => {
                    out.extend_from_slice(b":true,\"version-rolling.mask\":\"");
                    hex::encode_u32_into(mask, out);
                    out.push(b'"');
                }
                None => out.extend_from_slice(b":false"),
            },
            "minimum-difficulty" => out.extend_from_slice(if r.minimum_difficulty {
                b":true"
            } else {
                b":false"
            }),
            "subscribe-extranonce" => out.extend_from_slice(if r.subscribe_extranonce {
                b":true"
            } else {
                b":false"
            }),
            // Extensions we do not know are answered false, never omitted.
            _ => out.extend_from_slice(b":false"),
        }
    }
    out.extend_from_slice(b"},\"error\":null}\n");
}

/// `mining.set_difficulty [D]` (fractional difficulties written as plain decimals).
pub fn set_difficulty(out: &mut Vec<u8>, difficulty: f64) {
    let _ = writeln!(
        out,
        "{{\"id\":null,\"method\":\"mining.set_difficulty\",\"params\":[{difficulty}]}}"
    );
}

/// The fields of a `mining.notify`.
#[derive(Clone, Copy, Debug)]
pub struct NotifyFields<'a> {
    /// `params[0]`: the id submits will name.
    pub job_id: &'a str,
    /// The previous block hash in internal byte order; written word-swapped, as miners expect.
    pub prev_hash: &'a Hash256,
    /// The coinbase before the extranonces (written as hex).
    pub coinb1: &'a [u8],
    /// The coinbase after the extranonces (written as hex).
    pub coinb2: &'a [u8],
    /// The coinbase's merkle siblings, bottom up; written in internal byte order.
    pub merkle_branch: &'a [Hash256],
    /// The block version, written as 8 hex digits (big-endian).
    pub version: u32,
    /// The network target's compact `nBits`.
    pub nbits: u32,
    /// The job's header time in Unix seconds.
    pub ntime: u32,
    /// Whether earlier jobs are void, so the miner switches to this one at once.
    pub clean_jobs: bool,
}

/// `mining.notify [job_id, prevhash, coinb1, coinb2, merkle_branch, version, nbits, ntime,
/// clean_jobs]` as a notification (`id` null).
pub fn notify(out: &mut Vec<u8>, n: &NotifyFields<'_>) {
    out.extend_from_slice(b"{\"id\":null,\"method\":\"mining.notify\",\"params\":[");
    json_string(out, n.job_id);
    out.extend_from_slice(b",\"");
    hex::encode_into(&hex::prevhash_to_stratum(n.prev_hash), out);
    out.extend_from_slice(b"\",\"");
    hex::encode_into(n.coinb1, out);
    out.extend_from_slice(b"\",\"");
    hex::encode_into(n.coinb2, out);
    out.extend_from_slice(b"\",[");
    for (i, h) in n.merkle_branch.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        hex::encode_into(&h.0, out);
        out.push(b'"');
    }
    out.extend_from_slice(b"],\"");
    hex::encode_u32_into(n.version, out);
    out.extend_from_slice(b"\",\"");
    hex::encode_u32_into(n.nbits, out);
    out.extend_from_slice(b"\",\"");
    hex::encode_u32_into(n.ntime, out);
    out.extend_from_slice(if n.clean_jobs {
        b"\",true]}\n"
    } else {
        b"\",false]}\n"
    });
}

/// `mining.set_extranonce [extranonce1, extranonce2_size]`.
pub fn set_extranonce(out: &mut Vec<u8>, extranonce1: &[u8], extranonce2_size: usize) {
    out.extend_from_slice(b"{\"id\":null,\"method\":\"mining.set_extranonce\",\"params\":[\"");
    hex::encode_into(extranonce1, out);
    let _ = writeln!(out, "\",{extranonce2_size}]}}");
}

/// `client.reconnect [host, port, wait_seconds]`.
pub fn reconnect(out: &mut Vec<u8>, host: &str, port: u16, wait_secs: u32) {
    out.extend_from_slice(b"{\"id\":null,\"method\":\"client.reconnect\",\"params\":[");
    json_string(out, host);
    let _ = writeln!(out, ",{port},{wait_secs}]}}");
}

/// `mining.set_version_mask [mask]`.
pub fn set_version_mask(out: &mut Vec<u8>, mask: u32) {
    out.extend_from_slice(b"{\"id\":null,\"method\":\"mining.set_version_mask\",\"params\":[\"");
    hex::encode_u32_into(mask, out);
    out.extend_from_slice(b"\"]}\n");
}

/// A request from the miner side: `{"id":ID,"method":M,"params":[P...]}` with string params.
pub fn request(out: &mut Vec<u8>, id: u64, method: &str, params: &[&str]) {
    let _ = write!(out, "{{\"id\":{id},\"method\":");
    json_string(out, method);
    out.extend_from_slice(b",\"params\":[");
    for (i, p) in params.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json_string(out, p);
    }
    out.extend_from_slice(b"]}\n");
}

/// `mining.submit` as a miner sends it, hex fields encoded from values.
#[allow(clippy::too_many_arguments)]
pub fn submit(
    out: &mut Vec<u8>,
    id: u64,
    worker: &str,
    job_id: &str,
    extranonce2: &[u8],
    ntime: u32,
    nonce: u32,
    version_bits: Option<u32>,
) {
    let _ = write!(
        out,
        "{{\"id\":{id},\"method\":\"mining.submit\",\"params\":["
    );
    json_string(out, worker);
    out.push(b',');
    json_string(out, job_id);
    out.extend_from_slice(b",\"");
    hex::encode_into(extranonce2, out);
    out.extend_from_slice(b"\",\"");
    hex::encode_u32_into(ntime, out);
    out.extend_from_slice(b"\",\"");
    hex::encode_u32_into(nonce, out);
    if let Some(v) = version_bits {
        out.extend_from_slice(b"\",\"");
        hex::encode_u32_into(v, out);
    }
    out.extend_from_slice(b"\"]}\n");
}

/// Writes `s` as a JSON string, escaping what JSON requires.
pub fn json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f => {
                let _ = write!(out, "\\u{b:04x}");
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}
