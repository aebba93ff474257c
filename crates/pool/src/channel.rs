//! One miner connection's (SV1) or channel's (SV2) share accounting: the jobs it was given and
//! at which difficulty, the difficulty it is at now, the shares it already sent, and its vardiff.
//! Protocol-neutral and sans-IO: front ends translate their messages into [`Channel::submit`]
//! calls and the verdicts into their own replies.

use std::collections::VecDeque;
use std::sync::Arc;

use events::Reason;
use hashbrown::HashTable;
use primitives::{Difficulty, Hash256, Target};

use crate::job::{Job, Solution};
use crate::vardiff::{Vardiff, VardiffConfig};
use crate::Millis;

#[derive(Clone, Debug)]
pub struct ChannelConfig {
    /// Jobs a channel remembers; a share on an older one is stale (expired).
    pub max_jobs: usize,
    /// Shares remembered for duplicate detection, over all remembered jobs. When full, the
    /// oldest job is expired with its shares, so memory stays bounded and no duplicate of a
    /// remembered job is ever accepted.
    pub dedup_capacity: usize,
    /// After a difficulty change, shares meeting the lower of the old and new difficulty are
    /// accepted for this long, whatever job they are on (miners apply a change at different
    /// points of their work queue).
    pub grace_ms: u64,
    /// How far past the job's time (plus the job's age) a share's ntime may be, in seconds.
    pub max_ntime_ahead: u32,
    pub vardiff: VardiffConfig,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            max_jobs: 8,
            dedup_capacity: 1 << 14,
            grace_ms: 5_000,
            max_ntime_ahead: 7_000,
            vardiff: VardiffConfig::default(),
        }
    }
}

/// A job as this channel received it.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The id the miner knows the job by (a re-sent job gets a new one).
    pub wire_id: u64,
    pub job: Arc<Job>,
    pub difficulty: Difficulty,
    pub target: Target,
    pub issued_at: Millis,
}

/// Why a share was rejected: each maps onto one METRICS.md reason and one protocol error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Never issued to this channel.
    UnknownJob,
    /// Superseded by a new previous-block hash, or expired.
    Stale,
    ExtranonceSize,
    NtimeOutOfRange,
    /// Version bits outside the negotiated mask.
    VersionBits,
    Duplicate,
    LowDifficulty,
}

impl Reject {
    pub fn reason(self) -> Reason {
        match self {
            Reject::UnknownJob => Reason::InvalidJob,
            Reject::Stale => Reason::Stale,
            Reject::ExtranonceSize | Reject::NtimeOutOfRange | Reject::VersionBits => Reason::Other,
            Reject::Duplicate => Reason::Duplicate,
            Reject::LowDifficulty => Reason::LowDifficulty,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Reject::UnknownJob => "Job not found",
            Reject::Stale => "Stale share: job superseded",
            Reject::ExtranonceSize => "Incorrect extranonce2 size",
            Reject::NtimeOutOfRange => "Ntime out of range",
            Reject::VersionBits => "Version bits outside the negotiated mask",
            Reject::Duplicate => "Duplicate share",
            Reject::LowDifficulty => "Share above target (low difficulty)",
        }
    }
}

/// What the miner sent, with the extranonce part decoded.
#[derive(Clone, Copy, Debug)]
pub struct Submission<'a> {
    pub wire_id: u64,
    pub extranonce: &'a [u8],
    pub ntime: u32,
    pub nonce: u32,
    /// SV1 `version_bits` (BIP310); `None` without version rolling.
    pub version_bits: Option<u32>,
}

/// An accepted share.
#[derive(Clone, Debug)]
pub struct Accepted {
    pub job: Arc<Job>,
    pub hash: Hash256,
    pub header: [u8; 80],
    /// The difficulty credited: the job's, or during a grace period the lower one it met.
    pub credited: Difficulty,
    /// It meets the network target: a block.
    pub block: bool,
    /// Vardiff wants a new difficulty.
    pub retarget: Option<Difficulty>,
}

pub struct Channel {
    config: Arc<ChannelConfig>,
    extranonce_prefix: Vec<u8>,
    extranonce_len: usize,
    version_mask: u32,
    jobs: VecDeque<Issued>,
    /// The highest wire id this channel dropped: ids at or below it that are not remembered
    /// were ours once, so a share on them is stale rather than unknown.
    expired_up_to: u64,
    difficulty: Difficulty,
    target: Target,
    /// The difficulty before the last change, its target and when its grace ends.
    previous: Option<(Difficulty, Target, Millis)>,
    vardiff: Vardiff,
    /// Shares seen: (first 8 bytes of the header hash, wire id of the job). Matched on the hash
    /// alone, so a share sent again under another id of the same job (a job re-sent after a
    /// difficulty change, an identical refresh) is still a duplicate.
    seen: HashTable<(u64, u64)>,
}

impl Channel {
    pub fn new(
        config: Arc<ChannelConfig>,
        extranonce_prefix: Vec<u8>,
        extranonce_len: usize,
        start: Difficulty,
        now: Millis,
    ) -> Self {
        let vardiff = Vardiff::new(config.vardiff, start, now);
        let difficulty = vardiff.difficulty();
        Channel {
            config,
            extranonce_prefix,
            extranonce_len,
            version_mask: 0,
            jobs: VecDeque::new(),
            expired_up_to: 0,
            difficulty,
            target: difficulty.to_target(),
            previous: None,
            vardiff,
            seen: HashTable::new(),
        }
    }

    pub fn extranonce_prefix(&self) -> &[u8] {
        &self.extranonce_prefix
    }

    /// Bytes of extranonce the miner fills in.
    pub fn extranonce_len(&self) -> usize {
        self.extranonce_len
    }

    pub fn set_version_mask(&mut self, mask: u32) {
        self.version_mask = mask;
    }

    pub fn version_mask(&self) -> u32 {
        self.version_mask
    }

    pub fn difficulty(&self) -> Difficulty {
        self.difficulty
    }

    pub fn target(&self) -> Target {
        self.target
    }

    pub fn jobs(&self) -> impl Iterator<Item = &Issued> {
        self.jobs.iter()
    }

    pub fn latest_job(&self) -> Option<&Issued> {
        self.jobs.back()
    }

    /// Changes the difficulty for jobs issued from now on; the old one keeps a grace period.
    /// Returns the difficulty now in force (clamped to the vardiff bounds).
    pub fn set_difficulty(&mut self, d: Difficulty, now: Millis) -> Difficulty {
        let d = self.vardiff.set(d, now);
        self.change_to(d, now);
        d
    }

    fn change_to(&mut self, d: Difficulty, now: Millis) {
        if d == self.difficulty {
            return;
        }
        self.previous = Some((self.difficulty, self.target, now.plus(self.config.grace_ms)));
        self.difficulty = d;
        self.target = d.to_target();
    }

    /// Lets vardiff step a quiet miner down. Returns the new difficulty if it changed.
    pub fn on_tick(&mut self, now: Millis) -> Option<Difficulty> {
        let d = self.vardiff.on_tick(now)?;
        self.change_to(d, now);
        Some(d)
    }

    /// Records that `job` went out under `wire_id` at the current difficulty. A clean job drops
    /// the jobs of earlier tips (their shares are stale from now on anyway).
    pub fn issue(&mut self, job: Arc<Job>, wire_id: u64, now: Millis) -> &Issued {
        if job.clean {
            while self.jobs.front().is_some_and(|j| j.job.epoch < job.epoch) {
                self.evict_oldest();
            }
        }
        while self.jobs.len() >= self.config.max_jobs.max(1) {
            self.evict_oldest();
        }
        self.jobs.push_back(Issued {
            wire_id,
            job,
            difficulty: self.difficulty,
            target: self.target,
            issued_at: now,
        });
        self.jobs.back().expect("just pushed")
    }

    fn evict_oldest(&mut self) {
        if let Some(old) = self.jobs.pop_front() {
            self.expired_up_to = self.expired_up_to.max(old.wire_id);
            self.seen.retain(|(_, id)| *id != old.wire_id);
        }
    }

    /// Raises the floor vardiff may not go below (BIP310 `minimum-difficulty`).
    pub fn set_minimum(&mut self, d: Difficulty, now: Millis) {
        self.vardiff.set_minimum(d);
        if self.difficulty < d {
            self.set_difficulty(d, now);
        }
    }

    /// The job checks alone, for a share whose other parameters are unreadable.
    pub fn check_job(&self, wire_id: u64, epoch: u64) -> Result<(), Reject> {
        match self.jobs.iter().rfind(|j| j.wire_id == wire_id) {
            None if wire_id != 0 && wire_id <= self.expired_up_to => Err(Reject::Stale),
            None => Err(Reject::UnknownJob),
            Some(j) if j.job.epoch < epoch => Err(Reject::Stale),
            Some(_) => Ok(()),
        }
    }

    /// Judges a share. `epoch` is the pool's current tip epoch: jobs of earlier epochs are stale.
    /// Checks run in the customary order: job, parameters, duplicate, difficulty.
    #[inline]
    pub fn submit(
        &mut self,
        s: &Submission<'_>,
        epoch: u64,
        now: Millis,
    ) -> Result<Accepted, Reject> {
        let Some(pos) = self.jobs.iter().rposition(|j| j.wire_id == s.wire_id) else {
            return Err(if s.wire_id != 0 && s.wire_id <= self.expired_up_to {
                Reject::Stale
            } else {
                Reject::UnknownJob
            });
        };
        let issued = &self.jobs[pos];
        let job = &issued.job;
        if job.epoch < epoch {
            return Err(Reject::Stale);
        }
        if s.extranonce.len() != self.extranonce_len {
            return Err(Reject::ExtranonceSize);
        }
        let age_s = (now.since(issued.issued_at) / 1000) as u32;
        let latest = job
            .ntime
            .saturating_add(age_s)
            .saturating_add(self.config.max_ntime_ahead);
        if s.ntime < job.min_ntime || s.ntime > latest {
            return Err(Reject::NtimeOutOfRange);
        }
        let version = match s.version_bits {
            None => job.version,
            Some(bits) if bits & !self.version_mask != 0 => return Err(Reject::VersionBits),
            Some(bits) => (job.version & !self.version_mask) | (bits & self.version_mask),
        };
        let (header, hash) = job.share_hash(&Solution {
            extranonce_prefix: &self.extranonce_prefix,
            extranonce: s.extranonce,
            version,
            ntime: s.ntime,
            nonce: s.nonce,
        });
        let key = u64::from_le_bytes(hash.0[..8].try_into().expect("8 bytes"));
        let wire_id = issued.wire_id;
        if self.seen.find(key, |&(k, _)| k == key).is_some() {
            return Err(Reject::Duplicate);
        }
        let block = job.network_target.is_met_by(&hash.0);
        let credited = if issued.target.is_met_by(&hash.0) {
            issued.difficulty
        } else {
            match self.previous {
                Some((pd, pt, until)) if now < until => {
                    // Grace: the lower of the previous and current difficulty.
                    let (d, t) = if pd < self.difficulty {
                        (pd, pt)
                    } else {
                        (self.difficulty, self.target)
                    };
                    if t.is_met_by(&hash.0) {
                        d
                    } else if block {
                        issued.difficulty
                    } else {
                        return Err(Reject::LowDifficulty);
                    }
                }
                // A block is never turned away, even below a share target set above it.
                _ if block => issued.difficulty,
                _ => return Err(Reject::LowDifficulty),
            }
        };
        let job = job.clone();
        while self.seen.len() >= self.config.dedup_capacity {
            if self.jobs.len() <= 1 || self.jobs.front().is_some_and(|j| j.wire_id == wire_id) {
                // Only the job this share is on is left to forget: refuse the share instead of
                // forgetting shares that could then be sent again. The message rate limit keeps
                // miners far from this; a new job frees the table.
                return Err(Reject::Stale);
            }
            self.evict_oldest();
        }
        self.seen.insert_unique(key, (key, wire_id), |&(k, _)| k);
        let retarget = self.vardiff.on_share(credited, now);
        if let Some(d) = retarget {
            self.change_to(d, now);
        }
        Ok(Accepted {
            job,
            hash,
            header,
            credited,
            block,
            retarget,
        })
    }
}
