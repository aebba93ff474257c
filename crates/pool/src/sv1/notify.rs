//! `mining.notify` for a job: written once per job and shared by every connection that gets it
//! (the `sv1` crate's `Outbox` carries it to a miner without copying it).

use std::sync::Arc;

use sv1::write::{notify, NotifyFields};

use crate::job::Job;

/// The job's notify line under its own id, serialized on first use.
pub fn notify_bytes(job: &Job) -> Arc<[u8]> {
    job.sv1_notify
        .get_or_init(|| {
            let mut out = Vec::with_capacity(256 + 66 * job.merkle_branch.len());
            write_notify(&mut out, job, job.id, job.clean);
            out.into()
        })
        .clone()
}

/// Writes the job's notify line under `wire_id`.
pub fn write_notify(out: &mut Vec<u8>, job: &Job, wire_id: u64, clean: bool) {
    let mut buf = [0u8; 16];
    notify(
        out,
        &NotifyFields {
            job_id: hex_id(wire_id, &mut buf),
            prev_hash: &job.prev_hash,
            coinb1: &job.coinbase.prefix,
            coinb2: &job.coinbase.suffix,
            merkle_branch: &job.merkle_branch,
            version: job.version,
            nbits: job.bits.to_consensus(),
            ntime: job.ntime,
            clean_jobs: clean,
        },
    );
}

/// A job id as SV1 sends it: lowercase hex without leading zeros.
pub fn hex_id(id: u64, buf: &mut [u8; 16]) -> &str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digits = (16 - id.leading_zeros() as usize / 4).max(1);
    for i in 0..digits {
        buf[digits - 1 - i] = DIGITS[((id >> (4 * i)) & 0xf) as usize];
    }
    std::str::from_utf8(&buf[..digits]).expect("ascii")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_ids_match_the_parser() {
        for id in [0u64, 1, 15, 16, 255, 0xdead_beef, u64::MAX] {
            let mut b = [0u8; 16];
            let s = hex_id(id, &mut b);
            assert_eq!(s, format!("{id:x}"));
            assert_eq!(u64::from_str_radix(s, 16).unwrap(), id);
        }
    }
}
