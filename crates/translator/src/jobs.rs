//! Upstream work as SV1 jobs: one `mining.notify` line per job, serialized once and shared by
//! every device.
//!
//! In aggregated mode every device's `extranonce1` is the channel prefix followed by its own
//! bytes ([`crate::extranonce`]), so `coinb1` is the job's `coinbase_tx_prefix` and `coinb2` its
//! `coinbase_tx_suffix` for all of them: the line is the same for each device. SV1 job ids are
//! the translator's own, a counter in hex, never reused (Bitaxe drops a notify whose id it has
//! seen); each names one upstream job. `clean_jobs` is set when the job came with a new prev
//! hash.

use std::sync::Arc;

use primitives::{CompactTarget, Hash256};
use sv1::write::{notify, NotifyFields};

use crate::upstream::{ExtendedJob, Work};

/// An SV1 job: the upstream job it stands for and its notify line.
#[derive(Debug)]
pub struct Sv1Job {
    /// The SV1 job id as a number; on the wire in lowercase hex.
    pub id: u64,
    /// The upstream job this SV1 job stands for.
    pub upstream: Arc<ExtendedJob>,
    /// The previous block hash the job builds on.
    pub prev_hash: Hash256,
    /// The job's `nbits` (the network target).
    pub nbits: CompactTarget,
    /// The job's `ntime`, in seconds since the epoch.
    pub ntime: u32,
    /// Counts prev hashes (the book's count, across upstreams): a job of an earlier epoch is
    /// stale.
    pub epoch: u64,
    /// Whether devices drop earlier jobs for this one (`clean_jobs` of `mining.notify`).
    pub clean: bool,
    /// The `mining.notify` line under `id`, newline included.
    pub notify: Arc<[u8]>,
}

impl Sv1Job {
    /// The upstream's extranonce prefix the job came with; the device's value and its extranonce2
    /// follow it.
    pub fn extranonce_prefix(&self) -> &[u8] {
        &self.upstream.extranonce_prefix
    }

    /// Writes the job's notify line under another id (a job re-sent after a difficulty change
    /// must look new to the miner), never clean.
    pub fn write_notify(&self, out: &mut Vec<u8>, wire_id: u64) {
        write_line(out, self, wire_id, false);
    }
}

/// A job id as it goes on the wire.
pub fn hex_id(id: u64, buf: &mut [u8; 16]) -> &str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut i = buf.len();
    let mut v = id;
    loop {
        i -= 1;
        buf[i] = DIGITS[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[i..]).expect("hex digits are ASCII")
}

/// The id a miner submits, read back (`None` if it is not one of ours in form).
pub fn parse_id(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

fn write_line(out: &mut Vec<u8>, job: &Sv1Job, wire_id: u64, clean: bool) {
    let mut buf = [0u8; 16];
    let up = &job.upstream;
    notify(
        out,
        &NotifyFields {
            job_id: hex_id(wire_id, &mut buf),
            prev_hash: &job.prev_hash,
            coinb1: &up.coinbase_prefix,
            coinb2: &up.coinbase_suffix,
            merkle_branch: &up.merkle_path,
            version: up.version,
            nbits: job.nbits.to_consensus(),
            ntime: job.ntime,
            clean_jobs: clean,
        },
    );
}

/// The SV1 jobs made from upstream work, and the ids handed out.
#[derive(Debug)]
pub struct JobBook {
    next_id: u64,
    /// Counted here rather than taken from the upstream: a new upstream counts its prev hashes
    /// from the start again, and its first must not look like the old one's.
    epoch: u64,
    latest: Option<Arc<Sv1Job>>,
}

impl Default for JobBook {
    fn default() -> Self {
        Self::new()
    }
}

impl JobBook {
    /// An empty book.
    pub fn new() -> Self {
        JobBook {
            next_id: 1,
            epoch: 0,
            latest: None,
        }
    }

    /// A fresh SV1 job id.
    pub fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The SV1 job for `work`, its notify line written once.
    pub fn translate(&mut self, work: &Work) -> Arc<Sv1Job> {
        let id = self.fresh_id();
        if work.clean || self.latest.is_none() {
            self.epoch += 1;
        }
        let mut job = Sv1Job {
            id,
            upstream: work.job.clone(),
            prev_hash: work.prev.prev_hash,
            nbits: work.prev.nbits,
            ntime: work.ntime,
            epoch: self.epoch,
            clean: work.clean,
            notify: Arc::from(&[][..]),
        };
        let mut line = Vec::with_capacity(
            200 + 2 * (job.upstream.coinbase_prefix.len() + job.upstream.coinbase_suffix.len())
                + 67 * job.upstream.merkle_path.len(),
        );
        write_line(&mut line, &job, id, work.clean);
        job.notify = line.into();
        let job = Arc::new(job);
        self.latest = Some(job.clone());
        job
    }

    /// The job devices should be mining now.
    pub fn latest(&self) -> Option<&Arc<Sv1Job>> {
        self.latest.as_ref()
    }

    /// The current prev hash's epoch (0 before any work).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The upstream is gone: every job so far is stale, and there is nothing to hand a device
    /// until the next upstream sends work.
    pub fn invalidate(&mut self) {
        self.epoch += 1;
        self.latest = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::PrevHash;
    use primitives::Target;

    #[test]
    fn ids_are_hex_and_read_back() {
        let mut buf = [0u8; 16];
        assert_eq!(hex_id(0, &mut buf), "0");
        assert_eq!(hex_id(0x1a2b, &mut buf), "1a2b");
        assert_eq!(hex_id(u64::MAX, &mut buf), "ffffffffffffffff");
        assert_eq!(parse_id("1a2b"), Some(0x1a2b));
        assert_eq!(parse_id("1A2B"), Some(0x1a2b));
        assert_eq!(parse_id(""), None);
        assert_eq!(parse_id("x"), None);
        assert_eq!(parse_id("10000000000000000"), None);
    }

    #[test]
    fn notify_line_reads_back_as_the_upstream_job() {
        let up = ExtendedJob {
            job_id: 42,
            version: 0x2000_0000,
            version_rolling_allowed: true,
            merkle_path: vec![Hash256([3; 32]), Hash256([4; 32])],
            coinbase_prefix: vec![1, 2, 3],
            coinbase_suffix: vec![4, 5],
            extranonce_prefix: Arc::from(&[9u8, 9][..]),
        };
        let prev_hash = Hash256::from_display_hex(
            "00000000440b921e1b77c6c0487ae5616de67f788f44ae2a5af6e2194d16b6f8",
        )
        .unwrap();
        let work = Work {
            job: Arc::new(up),
            prev: PrevHash {
                prev_hash,
                min_ntime: 1_700_000_000,
                nbits: CompactTarget::from_consensus(0x1d00_ffff),
                epoch: 3,
            },
            ntime: 1_700_000_001,
            target: Target::DIFFICULTY_1,
            clean: true,
        };
        let mut book = JobBook::new();
        let a = book.translate(&work);
        let b = book.translate(&Work {
            clean: false,
            ..work.clone()
        });
        assert_ne!(a.id, b.id);
        assert_eq!(book.latest().unwrap().id, b.id);
        assert_eq!(book.epoch(), 1, "the book counts its own prev hashes");
        assert_eq!((a.epoch, b.epoch), (1, 1));
        let line = &a.notify[..a.notify.len() - 1];
        let (env, _) = sv1::parse_line(line).unwrap();
        let n = sv1::Notify::parse(&env).unwrap();
        assert_eq!(parse_id(n.job_id), Some(a.id));
        assert_eq!(n.prev_hash, prev_hash);
        assert_eq!(n.coinb1, [1, 2, 3]);
        assert_eq!(n.coinb2, [4, 5]);
        assert_eq!(n.merkle_branch, [Hash256([3; 32]), Hash256([4; 32])]);
        assert_eq!(n.version, 0x2000_0000);
        assert_eq!(n.nbits, 0x1d00_ffff);
        assert_eq!(n.ntime, 1_700_000_001);
        assert!(n.clean_jobs);
        let mut again = Vec::new();
        a.write_notify(&mut again, 77);
        let (env, _) = sv1::parse_line(&again[..again.len() - 1]).unwrap();
        let n = sv1::Notify::parse(&env).unwrap();
        assert_eq!(n.job_id, "4d");
        assert!(!n.clean_jobs, "a re-sent job is never clean");
    }
}
