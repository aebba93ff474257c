//! Shares both ways: a device's `mining.submit` judged locally against the jobs it was sent and
//! its own difficulty, and the shares that also meet the upstream target followed upstream by
//! sequence number until the pool's verdict.
//!
//! The device gets its answer here and now; the upstream verdict, which comes a round trip
//! later, is for accounting only. Only shares meeting the upstream channel's target (or the
//! network's) go upstream: the rest cost the WAN nothing.

use std::collections::VecDeque;
use std::sync::Arc;

use mining::Reject;
use primitives::share::rolled_version;
use primitives::Timestamp;
use primitives::{Difficulty, Hash256, JobHeader, MinerChoice, Sv1Share, Target};

use crate::extranonce::DeviceExtranonce;
use crate::jobs::{parse_id, Sv1Job};
use crate::upstream::MAX_EXTRANONCE;
use crate::DeviceId;

/// What a device submitted, its hex fields decoded.
#[derive(Clone, Copy, Debug)]
pub struct Submitted<'a> {
    /// The SV1 job id, as the device sent it.
    pub job_id: &'a str,
    /// The device's extranonce2.
    pub extranonce2: &'a [u8],
    /// The header's `ntime`, in seconds since the epoch.
    pub ntime: u32,
    /// The header nonce.
    pub nonce: u32,
    /// The version bits the device rolled, if it rolls any.
    pub version_bits: Option<u32>,
}

/// The device's side of the checks: its extranonce bytes, what it rolls, and the clock.
#[derive(Clone, Copy, Debug)]
pub struct ShareContext {
    /// The device's value of the channel's extranonce.
    pub extranonce: DeviceExtranonce,
    /// The extranonce2 length the device was given, in bytes.
    pub extranonce2_size: usize,
    /// The version bits the device may roll.
    pub version_mask: u32,
    /// The current prev hash's epoch.
    pub epoch: u64,
    /// How far past the job's time (plus the job's age) a share's ntime may be, in seconds.
    pub max_ntime_ahead: u32,
    /// The time the share arrived.
    pub now: Timestamp,
}

/// A share the device had accepted.
#[derive(Clone, Debug)]
pub struct LocalShare {
    /// The job the share was found on.
    pub job: Arc<Sv1Job>,
    /// The SV1 job id the device submitted on.
    pub wire_id: u64,
    /// The header's hash.
    pub hash: Hash256,
    /// The full header version the device hashed.
    pub version: u32,
    /// The header's `ntime`, in seconds since the epoch.
    pub ntime: u32,
    /// The header nonce.
    pub nonce: u32,
    /// The difficulty credited to the device.
    pub difficulty: Difficulty,
    /// It meets the network target.
    pub block: bool,
    /// The SV2 extranonce: the device's bytes, then its extranonce2.
    extranonce: [u8; MAX_EXTRANONCE],
    extranonce_len: u8,
}

impl LocalShare {
    /// The SV2 extranonce: the device's bytes, then its extranonce2.
    pub fn extranonce(&self) -> &[u8] {
        &self.extranonce[..self.extranonce_len as usize]
    }

    /// Whether the upstream channel wants it: it meets the channel's current target, or it is
    /// a block. The spec keeps an active job's target as it was sent (5.3.21), but the
    /// reference pool judges every share by the current one, and ours takes either. Requiring
    /// both was tried: a pool that opens the channel hard and eases it at once (after
    /// `UpdateChannel`) then got no share at all until its next job.
    pub fn meets_upstream(&self, current: Target) -> bool {
        self.block || current.is_met_by(&self.hash.0)
    }
}

/// A job as one device got it.
#[derive(Debug)]
struct Issued {
    wire_id: u64,
    job: Arc<Sv1Job>,
    target: Target,
    difficulty: Difficulty,
    issued_at: Timestamp,
    /// Fingerprints of the shares accepted on it.
    seen: Vec<u64>,
}

/// The jobs one device was sent, at the difficulty each was sent at, and the shares it had
/// accepted on them.
#[derive(Debug)]
pub struct DeviceJobs {
    issued: VecDeque<Issued>,
    max_jobs: usize,
    /// The highest id issued: an id at or below it that is no longer held expired (stale).
    highest: u64,
    /// The difficulty before the last change, its target and when its grace ends.
    previous: Option<(Difficulty, Target, Timestamp)>,
}

impl DeviceJobs {
    /// No job issued yet; at most `max_jobs` (at least 1) remembered.
    pub fn new(max_jobs: usize) -> Self {
        DeviceJobs {
            issued: VecDeque::new(),
            max_jobs: max_jobs.max(1),
            highest: 0,
            previous: None,
        }
    }

    /// Remembers job `job`, sent to the device as `wire_id` at `difficulty`, forgetting the oldest
    /// past `max_jobs`.
    pub fn issue(
        &mut self,
        wire_id: u64,
        job: Arc<Sv1Job>,
        difficulty: Difficulty,
        now: Timestamp,
    ) {
        if self.issued.len() == self.max_jobs {
            self.issued.pop_front();
        }
        self.highest = self.highest.max(wire_id);
        // Most jobs go out at the difficulty of the one before: its target is reused rather
        // than recomputed (a 256-bit division, most of a job's fan-out cost per device).
        let target = match self.issued.back() {
            Some(last) if last.difficulty == difficulty => last.target,
            _ => difficulty.to_target(),
        };
        self.issued.push_back(Issued {
            wire_id,
            job,
            target,
            difficulty,
            issued_at: now,
            seen: Vec::new(),
        });
    }

    /// The latest job sent, by its SV1 id.
    pub fn latest(&self) -> Option<(u64, &Arc<Sv1Job>)> {
        self.issued.back().map(|i| (i.wire_id, &i.job))
    }

    /// Jobs remembered.
    pub fn len(&self) -> usize {
        self.issued.len()
    }

    /// Whether no job is remembered.
    pub fn is_empty(&self) -> bool {
        self.issued.is_empty()
    }

    /// The device's difficulty changed from `old`: shares meeting it are still taken until
    /// `grace_until`, on any job (miners switch at different points of their queue).
    pub fn difficulty_changed(&mut self, old: Difficulty, grace_until: Timestamp) {
        self.previous = Some((old, old.to_target(), grace_until));
    }

    /// Whether `job_id` names a job the device may still submit to under the prev hash of
    /// `epoch`: unknown (never sent) or stale (superseded, or forgotten as the device's window
    /// moved on) otherwise.
    pub fn check_job(&self, job_id: &str, epoch: u64) -> Result<(), Reject> {
        self.find(job_id, epoch).map(|_| ())
    }

    /// Where the job `job_id` is among those issued, if it may still be submitted to.
    fn find(&self, job_id: &str, epoch: u64) -> Result<usize, Reject> {
        let wire_id = parse_id(job_id).ok_or(Reject::UnknownJob)?;
        let Some(at) = self.issued.iter().rposition(|i| i.wire_id == wire_id) else {
            return Err(if wire_id <= self.highest {
                Reject::Stale
            } else {
                Reject::UnknownJob
            });
        };
        if self.issued[at].job.epoch != epoch {
            return Err(Reject::Stale);
        }
        Ok(at)
    }

    /// Judges a share in the customary order: job, extranonce2 size, ntime, version bits, then
    /// the hash (low difficulty), then duplicates.
    pub fn judge(&mut self, s: &Submitted<'_>, cx: &ShareContext) -> Result<LocalShare, Reject> {
        let at = self.find(s.job_id, cx.epoch)?;
        let issued = &self.issued[at];
        let job = &issued.job;
        if s.extranonce2.len() != cx.extranonce2_size {
            return Err(Reject::ExtranonceSize);
        }
        let age_secs = (cx.now.millis_since(issued.issued_at) / 1000) as u32;
        let latest_ntime = job
            .ntime
            .saturating_add(cx.max_ntime_ahead)
            .saturating_add(age_secs);
        if s.ntime < job.ntime || s.ntime > latest_ntime {
            return Err(Reject::NtimeOutOfRange);
        }
        let up = &job.upstream;
        let version = match s.version_bits {
            Some(bits) => rolled_version(up.version, bits, cx.version_mask)
                .map_err(|_| Reject::VersionBits)?,
            None => up.version,
        };
        if !up.version_rolling_allowed && version != up.version {
            return Err(Reject::VersionBits);
        }

        // extranonce1 = channel prefix || device bytes.
        let prefix = job.extranonce_prefix();
        let (dev, dev_len) = cx.extranonce.bytes();
        let dev = &dev[4 - dev_len..];
        let mut en1 = [0u8; MAX_EXTRANONCE];
        let en1_len = prefix.len() + dev.len();
        if en1_len + s.extranonce2.len() > MAX_EXTRANONCE {
            return Err(Reject::ExtranonceSize);
        }
        en1[..prefix.len()].copy_from_slice(prefix);
        en1[prefix.len()..en1_len].copy_from_slice(dev);
        let check = Sv1Share {
            job: JobHeader {
                version: up.version,
                prev_hash: job.prev_hash,
                bits: job.nbits,
            },
            coinb1: &up.coinbase_prefix,
            extranonce1: &en1[..en1_len],
            extranonce2: s.extranonce2,
            coinb2: &up.coinbase_suffix,
            merkle_branch: &up.merkle_path,
            miner: MinerChoice {
                ntime: s.ntime,
                nonce: s.nonce,
                version: s.version_bits,
                version_mask: cx.version_mask,
            },
        }
        .check(&issued.target)
        .map_err(|_| Reject::VersionBits)?;

        let difficulty = if check.meets_share_target {
            issued.difficulty
        } else {
            match self.previous {
                Some((d, t, until)) if cx.now < until && t.is_met_by(&check.hash.0) => d,
                _ => return Err(Reject::LowDifficulty),
            }
        };
        let fp = fingerprint(&check.hash);
        if self.issued.iter().any(|i| i.seen.contains(&fp)) {
            return Err(Reject::Duplicate);
        }
        let issued = &mut self.issued[at];
        issued.seen.push(fp);

        let mut extranonce = [0u8; MAX_EXTRANONCE];
        extranonce[..dev.len()].copy_from_slice(dev);
        extranonce[dev.len()..dev.len() + s.extranonce2.len()].copy_from_slice(s.extranonce2);
        Ok(LocalShare {
            job: issued.job.clone(),
            wire_id: issued.wire_id,
            hash: check.hash,
            version,
            ntime: s.ntime,
            nonce: s.nonce,
            difficulty,
            block: check.meets_network_target,
            extranonce,
            extranonce_len: (dev.len() + s.extranonce2.len()) as u8,
        })
    }
}

/// The first 8 bytes of a header hash (uniform whatever the target: targets constrain the
/// other end).
fn fingerprint(hash: &Hash256) -> u64 {
    u64::from_le_bytes(hash.0[..8].try_into().expect("8 bytes"))
}

/// What the upstream said about a forwarded share, or that it never said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamVerdict {
    /// The upstream accepted it (`SubmitSharesSuccess`).
    Accepted,
    /// The upstream rejected it (`SubmitSharesError`), with its error code.
    Rejected(String),
    /// Pushed out of the in-flight window, or the channel closed, before any verdict.
    Unanswered,
}

/// A forwarded share's outcome, for the device it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareResult {
    /// The device that found the share.
    pub device: DeviceId,
    /// The share's sequence number on the channel.
    pub sequence_number: u32,
    /// The SV1 job id the device submitted on.
    pub wire_id: u64,
    /// The upstream job the share was sent on.
    pub upstream_job_id: u32,
    /// The header nonce.
    pub nonce: u32,
    /// What the upstream said.
    pub verdict: UpstreamVerdict,
    /// Milliseconds from forwarding to the verdict (or to giving up on one).
    pub latency_ms: u64,
}

#[derive(Clone, Copy, Debug)]
struct Forwarded {
    seq: u32,
    device: DeviceId,
    wire_id: u64,
    upstream_job_id: u32,
    nonce: u32,
    sent_at: Timestamp,
}

/// `a` comes at or before `b` in sequence-number order (which wraps).
fn seq_le(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) < 1 << 31
}

/// Shares sent upstream and waiting for a verdict, in sequence order.
#[derive(Debug)]
pub struct InFlight {
    next_seq: u32,
    queue: VecDeque<Forwarded>,
    max: usize,
}

impl InFlight {
    /// Nothing in flight; at most `max` (at least 1) shares awaited.
    pub fn new(max: usize) -> Self {
        InFlight {
            next_seq: 0,
            queue: VecDeque::new(),
            max: max.max(1),
        }
    }

    /// Shares awaiting a verdict.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no share awaits a verdict.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// When the longest-waiting share went upstream.
    pub fn oldest_sent_at(&self) -> Option<Timestamp> {
        self.queue.front().map(|f| f.sent_at)
    }

    /// Remembers `share` under the next sequence number, which it returns (the uplink writes
    /// the submission). A share pushed out of the window is reported in `results` as
    /// unanswered.
    pub fn forward(
        &mut self,
        device: DeviceId,
        share: &LocalShare,
        now: Timestamp,
        results: &mut Vec<ShareResult>,
    ) -> u32 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        if self.queue.len() == self.max {
            let f = self.queue.pop_front().expect("full");
            results.push(f.result(UpstreamVerdict::Unanswered, now));
        }
        self.queue.push_back(Forwarded {
            seq,
            device,
            wire_id: share.wire_id,
            upstream_job_id: share.job.upstream.job_id,
            nonce: share.nonce,
            sent_at: now,
        });
        seq
    }

    /// `SubmitShares.Success`: the shares in flight up to `last` that got no error are
    /// accepted, `count` of them; should the count be smaller, the newest are taken as the
    /// accepted ones and the older stay for an error that may still come.
    pub fn accepted(
        &mut self,
        last: u32,
        count: u32,
        now: Timestamp,
        results: &mut Vec<ShareResult>,
    ) {
        let covered = self
            .queue
            .iter()
            .take_while(|f| seq_le(f.seq, last))
            .count();
        let n = covered.min(count as usize);
        for f in self.queue.drain(covered - n..covered) {
            results.push(f.result(UpstreamVerdict::Accepted, now));
        }
    }

    /// `SubmitShares.Error` for one share; `None` if it is not in flight (already settled).
    pub fn rejected(&mut self, seq: u32, code: &str, now: Timestamp) -> Option<ShareResult> {
        let i = self.queue.iter().position(|f| f.seq == seq)?;
        let f = self.queue.remove(i).expect("found");
        Some(f.result(UpstreamVerdict::Rejected(code.to_owned()), now))
    }

    /// The channel is gone: nothing in flight will be answered.
    pub fn abandon(&mut self, now: Timestamp, results: &mut Vec<ShareResult>) {
        for f in self.queue.drain(..) {
            results.push(f.result(UpstreamVerdict::Unanswered, now));
        }
    }
}

impl Forwarded {
    fn result(&self, verdict: UpstreamVerdict, now: Timestamp) -> ShareResult {
        ShareResult {
            device: self.device,
            sequence_number: self.seq,
            wire_id: self.wire_id,
            upstream_job_id: self.upstream_job_id,
            nonce: self.nonce,
            verdict,
            latency_ms: now.millis_since(self.sent_at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_order_wraps() {
        assert!(seq_le(1, 2));
        assert!(seq_le(2, 2));
        assert!(!seq_le(3, 2));
        assert!(seq_le(u32::MAX, 0));
        assert!(!seq_le(0, u32::MAX));
    }
}
