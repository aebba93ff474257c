//! One miner connection's (SV1) or channel's (SV2) share accounting: the jobs it was given and
//! at which difficulty, the difficulty it is at now, the shares it already sent, and its vardiff.
//! Protocol-neutral and sans-IO: front ends translate their messages into [`Channel::submit`]
//! calls and the verdicts into their own replies.
//!
//! Duplicate detection keeps an exact table of fingerprints per job ([`seen`]), which expires
//! with its job, and one compact filter over the older jobs' ([`filter`]). A share on the
//! latest job (nearly every share) is checked against that job's table, small and recently
//! used, and the filter, which a new share passes by reading two cache lines; only a match
//! there (a duplicate, or about 1 share in 8,000) reads the older jobs' tables. Together they
//! take about 20 bytes per remembered share, where one table of 16-byte entries for all jobs
//! took up to 64 and missed the cache on every share.

mod filter;
mod seen;

use std::collections::VecDeque;
use std::sync::Arc;

use primitives::hash::sha256d_header;
use primitives::{Difficulty, Hash256, Target};

use filter::TagFilter;
use seen::Fingerprints;

use crate::job::{Job, Solution};
use crate::Timestamp;
use mining::vardiff::{Vardiff, VardiffConfig};
use mining::Reject;

/// Settings every channel shares: job memory, duplicate detection, vardiff.
#[derive(Clone, Debug)]
pub struct ChannelConfig {
    /// Jobs a channel remembers; a share on an older one is stale (expired).
    pub max_jobs: usize,
    /// Shares remembered for duplicate detection, over all remembered jobs. When full, the
    /// oldest job is expired with its shares, so memory stays bounded (see
    /// [`Channel::dedup_memory`]) and no duplicate of a remembered job is ever accepted.
    pub dedup_capacity: usize,
    /// After a difficulty change, shares meeting the lower of the old and new difficulty are
    /// accepted for this long, whatever job they are on (miners apply a change at different
    /// points of their work queue).
    pub grace_ms: u64,
    /// How far past the job's time (plus the job's age) a share's ntime may be, in seconds.
    pub max_ntime_ahead: u32,
    /// How the share difficulty is retargeted.
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
    /// The job.
    pub job: Arc<Job>,
    /// The share difficulty in force when it was sent.
    pub difficulty: Difficulty,
    /// The share target matching `difficulty`.
    pub target: Target,
    /// When it was sent.
    pub issued_at: Timestamp,
    /// The merkle root a standard (header-only) channel was sent for this job: its shares are
    /// checked by hashing the header alone.
    pub merkle_root: Option<Hash256>,
    /// The shares accepted on it, which expire with it.
    seen: Fingerprints,
}

/// What the miner sent, with the extranonce part decoded.
#[derive(Clone, Copy, Debug)]
pub struct Submission<'a> {
    /// The job id the miner sent.
    pub wire_id: u64,
    /// The miner's part of the extranonce (extranonce2 in SV1).
    pub extranonce: &'a [u8],
    /// The header's time (Unix seconds).
    pub ntime: u32,
    /// The header's nonce.
    pub nonce: u32,
    /// SV1 `version_bits` (BIP310); `None` without version rolling.
    pub version_bits: Option<u32>,
}

/// What a header-only miner (SV2 standard channel) sent: everything but the merkle root, which
/// the job fixed.
#[derive(Clone, Copy, Debug)]
pub struct HeaderSubmission {
    /// The job id the miner sent.
    pub wire_id: u64,
    /// The header's time (Unix seconds).
    pub ntime: u32,
    /// The header's nonce.
    pub nonce: u32,
    /// The rolled version bits; `None` without version rolling.
    pub version_bits: Option<u32>,
}

/// An accepted share, borrowing from its channel (no reference count is touched per share).
#[derive(Clone, Debug)]
pub struct Accepted<'a> {
    /// The job the share was on.
    pub job: &'a Arc<Job>,
    /// The channel's part of the extranonce, for assembling a block.
    pub extranonce_prefix: &'a [u8],
    /// The header's hash.
    pub hash: Hash256,
    /// The serialized 80-byte header.
    pub header: [u8; 80],
    /// The difficulty credited: the job's, or during a grace period the lower one it met.
    pub credited: Difficulty,
    /// It meets the network target: a block.
    pub block: bool,
    /// Vardiff wants a new difficulty.
    pub retarget: Option<Difficulty>,
}

/// One mining channel (an SV1 connection, or an SV2 channel): its jobs, difficulty, vardiff
/// and the shares it accepted, checked for duplicates.
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
    previous: Option<(Difficulty, Target, Timestamp)>,
    /// A share on a job sent before a change may also meet the channel's current target. SV2's
    /// `SetTarget` leaves an active job's target as it was sent (spec 5.3.21), yet many
    /// clients apply it at once; either reading is honoured, so no share is lost to it.
    current_target_on_sent_jobs: bool,
    vardiff: Vardiff,
    /// The shares of every remembered job but the latest, in brief. A share is a duplicate if
    /// a remembered job's table holds its fingerprint, whichever job: matched on the hash
    /// alone, so a share sent again under another id of the same work (a job re-sent after a
    /// difficulty change, an identical refresh) is still a duplicate.
    filter: TagFilter,
    /// Fingerprints in the jobs' tables, and the slots of those tables and of `spare`.
    seen_len: usize,
    seen_slots: usize,
    /// The table of an expired job, cleared, for the next job to fill.
    spare: Fingerprints,
    /// How large the last expired job's table had grown: a new job's table starts there (a
    /// miner's share rate changes slowly), so that it is allocated once rather than grown.
    typical_slots: u32,
}

impl Channel {
    /// A channel with no jobs yet, starting at difficulty `start`.
    pub fn new(
        config: Arc<ChannelConfig>,
        extranonce_prefix: Vec<u8>,
        extranonce_len: usize,
        start: Difficulty,
        now: Timestamp,
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
            current_target_on_sent_jobs: false,
            vardiff,
            filter: TagFilter::default(),
            seen_len: 0,
            seen_slots: 0,
            spare: Fingerprints::default(),
            typical_slots: 0,
        }
    }

    /// The channel's part of the extranonce, before the miner's.
    pub fn extranonce_prefix(&self) -> &[u8] {
        &self.extranonce_prefix
    }

    /// Gives the channel another extranonce prefix (as long as the old one) and forgets every
    /// job issued under the old one: their shares could only hash to what the miner did not
    /// mine, so they are stale from now on (SV2 `SetExtranoncePrefix` applies to later jobs).
    pub fn set_extranonce_prefix(&mut self, prefix: Vec<u8>) {
        debug_assert_eq!(prefix.len(), self.extranonce_prefix.len());
        self.evict_where(|_| true);
        self.extranonce_prefix = prefix;
    }

    /// Bytes of extranonce the miner fills in.
    pub fn extranonce_len(&self) -> usize {
        self.extranonce_len
    }

    /// Sets the header version bits the miner may roll (BIP310).
    pub fn set_version_mask(&mut self, mask: u32) {
        self.version_mask = mask;
    }

    /// The header version bits the miner may roll; 0 without version rolling.
    pub fn version_mask(&self) -> u32 {
        self.version_mask
    }

    /// The current share difficulty.
    pub fn difficulty(&self) -> Difficulty {
        self.difficulty
    }

    /// The current share target.
    pub fn target(&self) -> Target {
        self.target
    }

    /// The remembered jobs, oldest first.
    pub fn jobs(&self) -> impl Iterator<Item = &Issued> {
        self.jobs.iter()
    }

    /// The newest job; `None` before the first.
    pub fn latest_job(&self) -> Option<&Issued> {
        self.jobs.back()
    }

    /// Shares remembered for duplicate detection, and the bytes their tables and filter take.
    pub fn dedup_memory(&self) -> (usize, usize) {
        let bytes = 8 * (self.seen_slots + self.filter.buckets());
        (self.seen_len, bytes)
    }

    /// Changes the difficulty for jobs issued from now on; the old one keeps a grace period.
    /// Returns the difficulty now in force (clamped to the vardiff bounds).
    pub fn set_difficulty(&mut self, d: Difficulty, now: Timestamp) -> Difficulty {
        let d = self.vardiff.set(d, now);
        self.change_to(d, now);
        d
    }

    fn change_to(&mut self, d: Difficulty, now: Timestamp) {
        if d == self.difficulty {
            return;
        }
        self.previous = Some((
            self.difficulty,
            self.target,
            now.plus_millis(self.config.grace_ms),
        ));
        self.difficulty = d;
        self.target = d.to_target();
    }

    /// Lets a share on a job sent before a difficulty change meet the current target instead
    /// of the job's, for as long as the job lives (SV2 `SetTarget`; the previous difficulty
    /// still keeps its grace period).
    pub fn accept_current_target_on_sent_jobs(&mut self) {
        self.current_target_on_sent_jobs = true;
    }

    /// Lets vardiff step a quiet miner down. Returns the new difficulty if it changed.
    pub fn handle_tick(&mut self, now: Timestamp) -> Option<Difficulty> {
        let d = self.vardiff.handle_tick(now)?;
        self.change_to(d, now);
        Some(d)
    }

    /// Records that `job` went out under `wire_id` at the current difficulty. A clean job drops
    /// the jobs of earlier tips (their shares are stale from now on anyway).
    pub fn issue(&mut self, job: Arc<Job>, wire_id: u64, now: Timestamp) -> &Issued {
        self.issue_with_root(job, wire_id, None, now)
    }

    /// [`Channel::issue`] for a header-only miner that was sent `merkle_root` (computed from
    /// this channel's extranonce prefix): its shares go to [`Channel::submit_header`].
    pub fn issue_standard(
        &mut self,
        job: Arc<Job>,
        wire_id: u64,
        merkle_root: Hash256,
        now: Timestamp,
    ) -> &Issued {
        self.issue_with_root(job, wire_id, Some(merkle_root), now)
    }

    fn issue_with_root(
        &mut self,
        job: Arc<Job>,
        wire_id: u64,
        merkle_root: Option<Hash256>,
        now: Timestamp,
    ) -> &Issued {
        // The pool's jobs and a farm's declared jobs expire apart: the pool keeps sending its
        // own jobs to a channel that declares its own (its client may ignore them), and they
        // must not push out the declared job the farm is mining on.
        let declared = job.is_declared();
        if declared {
            // A declared job on another previous block: the farm moved to another tip, and its
            // earlier declared jobs are stale.
            self.evict_where(|j| j.job.is_declared() && j.job.prev_hash != job.prev_hash);
        } else if job.clean {
            self.evict_where(|j| !j.job.is_declared() && j.job.epoch < job.epoch);
        }
        let max = self.config.max_jobs.max(1);
        while self
            .jobs
            .iter()
            .filter(|j| j.job.is_declared() == declared)
            .count()
            >= max
        {
            let oldest = self
                .jobs
                .iter()
                .position(|j| j.job.is_declared() == declared)
                .expect("counted");
            self.evict(oldest);
        }
        // An idle miner holds one job: room for one at first (not the four a first push would
        // reserve), doubling from there.
        if self.jobs.len() == self.jobs.capacity() {
            self.jobs.reserve_exact(self.jobs.len().max(1));
        }
        // The latest job becomes an older one: its shares join the filter.
        if let Some(latest) = self.jobs.back() {
            let mut complete = true;
            for f in latest.seen.iter() {
                complete = complete && self.filter.has_room() && self.filter.insert(f);
            }
            if !complete {
                self.rebuild_filter(self.jobs.len());
            }
        }
        self.jobs.push_back(Issued {
            wire_id,
            job,
            difficulty: self.difficulty,
            target: self.target,
            issued_at: now,
            merkle_root,
            seen: std::mem::take(&mut self.spare),
        });
        self.jobs.back().expect("just pushed")
    }

    /// Forgets the oldest job and its shares. Its table is kept, cleared, for the next job if it
    /// is larger than the one already spare, which is freed: at most one table is idle, and
    /// none while the tables take more than 4 slots per share the channel may remember.
    fn evict_oldest(&mut self) {
        self.evict(0);
    }

    /// Forgets every job `expired` says, oldest first.
    fn evict_where(&mut self, expired: impl Fn(&Issued) -> bool) {
        while let Some(pos) = self.jobs.iter().position(&expired) {
            self.evict(pos);
        }
    }

    /// Forgets the job at `pos` and its shares, as [`Channel::evict_oldest`] does.
    fn evict(&mut self, pos: usize) {
        let latest = pos + 1 == self.jobs.len();
        let Some(mut old) = self.jobs.remove(pos) else {
            return;
        };
        self.expired_up_to = self.expired_up_to.max(old.wire_id);
        self.seen_len -= old.seen.len();
        if !latest {
            for f in old.seen.iter() {
                self.filter.remove(f);
            }
        } else if let Some(now_latest) = self.jobs.back() {
            // The filter holds the shares of every job but the latest: the job that becomes
            // the latest leaves it.
            for f in now_latest.seen.iter() {
                self.filter.remove(f);
            }
        }
        if old.seen.len() > 0 {
            self.typical_slots = old.seen.slots() as u32;
        }
        let freed = if old.seen.slots() > self.spare.slots() {
            old.seen.clear();
            std::mem::replace(&mut self.spare, old.seen)
        } else {
            old.seen
        };
        self.seen_slots -= freed.slots();
        if self.seen_slots > 4 * self.config.dedup_capacity {
            self.seen_slots -= std::mem::take(&mut self.spare).slots();
        }
    }

    /// Whether a remembered job accepted a share with fingerprint `f`.
    #[inline]
    fn seen(&self, f: u64) -> bool {
        let Some(latest) = self.jobs.back() else {
            return false;
        };
        latest.seen.contains(f)
            || (self.filter.may_contain(f) && self.jobs.iter().any(|j| j.seen.contains(f)))
    }

    /// Records `f` on the job at `pos`. A job's first share sizes its table like the last
    /// expired job's while the tables stay within 4 slots per share the channel may remember
    /// (what tables that double at half full take at most); past that they only grow as they
    /// fill. So the tables take at most twice that bound, 64 bytes per share the channel may
    /// remember (1 MiB for the default 16,384, like the single table before), and the filter
    /// about 4 more.
    #[inline]
    fn remember(&mut self, pos: usize, f: u64) {
        let issued = &mut self.jobs[pos];
        let mut at_least = 0;
        if issued.seen.slots() == 0 {
            let typical = self.typical_slots as usize;
            if self.seen_slots + typical <= 4 * self.config.dedup_capacity {
                at_least = typical;
            }
        }
        self.seen_slots += issued.seen.insert(f, at_least);
        self.seen_len += 1;
        let older = self.jobs.len() - 1;
        if pos < older && !(self.filter.has_room() && self.filter.insert(f)) {
            self.rebuild_filter(older);
        }
    }

    /// A filter large enough for the shares of the first `older` jobs, filled from their
    /// tables.
    #[cold]
    fn rebuild_filter(&mut self, older: usize) {
        let jobs = || self.jobs.iter().take(older);
        let n: usize = jobs().map(|j| j.seen.len()).sum();
        // Full: the next size up. Out of moves below its load limit (rare): twice the size.
        let min_buckets = if self.filter.has_room() {
            2 * self.filter.buckets()
        } else {
            0
        };
        self.filter
            .rebuild(n, min_buckets, jobs().flat_map(|j| j.seen.iter()));
    }

    /// The share rate vardiff aims at now, per minute.
    pub fn shares_per_minute(&self) -> f64 {
        self.vardiff.shares_per_minute()
    }

    /// Makes vardiff aim at `times` the configured share rate (a channel carrying that many
    /// workers' shares); 1 restores it.
    pub fn scale_share_rate(&mut self, times: u32) {
        let base = self.config.vardiff.shares_per_minute;
        self.vardiff
            .set_shares_per_minute(base * f64::from(times.max(1)));
    }

    /// Raises the floor vardiff may not go below (BIP310 `minimum-difficulty`).
    pub fn set_minimum(&mut self, d: Difficulty, now: Timestamp) {
        self.vardiff.set_minimum(d);
        if self.difficulty < d {
            self.set_difficulty(d, now);
        }
    }

    /// The job checks alone, for a share whose other parameters are unreadable.
    pub fn check_job(&self, wire_id: u64, epoch: u64) -> Result<(), Reject> {
        self.find(wire_id, epoch).map(|_| ())
    }

    /// Judges a share. `epoch` is the pool's current tip epoch: jobs of earlier epochs are stale
    /// (declared jobs: see [`Job::is_stale`]).
    /// Checks run in the customary order: job, parameters, duplicate, difficulty.
    #[inline]
    pub fn submit(
        &mut self,
        s: &Submission<'_>,
        epoch: u64,
        now: Timestamp,
    ) -> Result<Accepted<'_>, Reject> {
        // A declared job's block reaches the pool's node from the farm's side, often before
        // the share that found it reaches the pool: the tip it moved must not make that very
        // share stale. Such a job's staleness is judged after hashing, then.
        let pos = self.locate(s.wire_id)?;
        let superseded = self.jobs[pos].job.is_stale(epoch);
        if superseded && !self.jobs[pos].job.is_declared() {
            return Err(Reject::Stale);
        }
        if s.extranonce.len() != self.extranonce_len {
            return Err(Reject::ExtranonceSize);
        }
        let version = self.check_time_and_version(pos, s.ntime, s.version_bits, now)?;
        let (header, hash) = self.jobs[pos].job.share_hash(&Solution {
            extranonce_prefix: &self.extranonce_prefix,
            extranonce: s.extranonce,
            version,
            ntime: s.ntime,
            nonce: s.nonce,
        });
        if superseded && !self.jobs[pos].job.made_the_tip(&hash) {
            return Err(Reject::Stale);
        }
        self.credit(pos, header, hash, now)
    }

    /// Judges a header-only share on a job issued with [`Channel::issue_standard`]: one header
    /// hash, the coinbase untouched (a block rebuilds it from the job and this channel's
    /// prefix). Same checks and order as [`Channel::submit`].
    #[inline]
    pub fn submit_header(
        &mut self,
        s: &HeaderSubmission,
        epoch: u64,
        now: Timestamp,
    ) -> Result<Accepted<'_>, Reject> {
        let pos = self.find(s.wire_id, epoch)?;
        // Issued without a root: the job was not sent to a header-only miner as such.
        let Some(root) = self.jobs[pos].merkle_root else {
            return Err(Reject::UnknownJob);
        };
        let version = self.check_time_and_version(pos, s.ntime, s.version_bits, now)?;
        let job = &self.jobs[pos].job;
        let mut header = [0u8; 80];
        header[0..4].copy_from_slice(&version.to_le_bytes());
        header[4..36].copy_from_slice(&job.prev_hash.0);
        header[36..68].copy_from_slice(&root.0);
        header[68..72].copy_from_slice(&s.ntime.to_le_bytes());
        header[72..76].copy_from_slice(&job.bits.to_consensus().to_le_bytes());
        header[76..80].copy_from_slice(&s.nonce.to_le_bytes());
        let hash = sha256d_header(&header);
        self.credit(pos, header, hash, now)
    }

    /// Where the job a share names is, if it is still current.
    #[inline]
    fn find(&self, wire_id: u64, epoch: u64) -> Result<usize, Reject> {
        let pos = self.locate(wire_id)?;
        if self.jobs[pos].job.is_stale(epoch) {
            return Err(Reject::Stale);
        }
        Ok(pos)
    }

    /// Where the job a share names is, current or not; a job this channel dropped is stale.
    #[inline]
    fn locate(&self, wire_id: u64) -> Result<usize, Reject> {
        self.jobs.iter().rposition(|j| j.wire_id == wire_id).ok_or(
            if wire_id != 0 && wire_id <= self.expired_up_to {
                Reject::Stale
            } else {
                Reject::UnknownJob
            },
        )
    }

    /// The share's ntime within the job's window, and its full header version.
    #[inline]
    fn check_time_and_version(
        &self,
        pos: usize,
        ntime: u32,
        version_bits: Option<u32>,
        now: Timestamp,
    ) -> Result<u32, Reject> {
        let issued = &self.jobs[pos];
        let job = &issued.job;
        let age_s = (now.millis_since(issued.issued_at) / 1000) as u32;
        let latest = job
            .ntime
            .saturating_add(age_s)
            .saturating_add(self.config.max_ntime_ahead);
        if ntime < job.min_ntime || ntime > latest {
            return Err(Reject::NtimeOutOfRange);
        }
        match version_bits {
            None => Ok(job.version),
            Some(bits) if bits & !self.version_mask != 0 => Err(Reject::VersionBits),
            Some(bits) => Ok((job.version & !self.version_mask) | (bits & self.version_mask)),
        }
    }

    /// The difficulty a share is credited at. A share meeting its job's target gets the job's
    /// difficulty. One that does not may still meet an easier target it can be judged by: the
    /// channel's current one where the protocol allows (or in a change's grace period), the
    /// previous one in its grace period. It gets the easiest such, which is as far as the pool
    /// can tell what the miner was working to; a luckier hash earns no more.
    fn credit_for(&self, issued: &Issued, hash: &Hash256, now: Timestamp) -> Option<Difficulty> {
        if issued.target.is_met_by(&hash.0) {
            return Some(issued.difficulty);
        }
        let previous = self
            .previous
            .filter(|&(_, _, until)| now < until)
            .map(|(d, t, _)| (d, t));
        let current = (self.current_target_on_sent_jobs || previous.is_some())
            .then_some((self.difficulty, self.target));
        let easiest = match (current, previous) {
            (Some(c), Some(p)) => Some(if p.0 < c.0 { p } else { c }),
            (c, p) => c.or(p),
        };
        easiest
            .filter(|(_, t)| t.is_met_by(&hash.0))
            .map(|(d, _)| d)
    }

    /// The duplicate and difficulty checks of a hashed share, then its accounting.
    #[inline]
    fn credit(
        &mut self,
        pos: usize,
        header: [u8; 80],
        hash: Hash256,
        now: Timestamp,
    ) -> Result<Accepted<'_>, Reject> {
        let issued = &self.jobs[pos];
        let job = &issued.job;
        let fingerprint = seen::fingerprint(&hash.0);
        if self.seen(fingerprint) {
            return Err(Reject::Duplicate);
        }
        let block = job.network_target.is_met_by(&hash.0);
        let credited = match self.credit_for(issued, &hash, now) {
            Some(d) => d,
            // A block is never turned away, even below a share target set above it.
            None if block => issued.difficulty,
            None => return Err(Reject::LowDifficulty),
        };
        let mut pos = pos;
        while self.seen_len >= self.config.dedup_capacity {
            if pos == 0 {
                // Only the job this share is on is left to forget: refuse the share instead of
                // forgetting shares that could then be sent again. The message rate limit keeps
                // miners far from this; a new job frees the table.
                return Err(Reject::Stale);
            }
            self.evict_oldest();
            pos -= 1;
        }
        self.remember(pos, fingerprint);
        let retarget = self.vardiff.handle_share(credited, now);
        if let Some(d) = retarget {
            self.change_to(d, now);
        }
        Ok(Accepted {
            job: &self.jobs[pos].job,
            extranonce_prefix: &self.extranonce_prefix,
            hash,
            header,
            credited,
            block,
            retarget,
        })
    }
}

#[cfg(test)]
mod tests {
    use primitives::bitcoin::{Amount, ScriptBuf};
    use primitives::{merkle_root_from_branch, CompactTarget};

    use super::*;
    use crate::jobs::{JobBook, JobConfig};
    use crate::template::Template;

    fn template(coinbase_sat: u64) -> Arc<Template> {
        Arc::new(Template {
            height: 903_217,
            prev_hash: Hash256([0x11; 32]),
            version: 0x2000_0000,
            // Mainnet-like: no share is a block.
            bits: CompactTarget::from_consensus(0x1702_3a04),
            curtime: 1_750_000_000,
            mintime: 1_749_998_000,
            median_time_past: None,
            coinbase_value: Amount::from_sat(coinbase_sat),
            witness_commitment: None,
            transactions: Vec::new().into(),
            longpoll_id: None,
        })
    }

    /// A channel where (nearly) every hash is a share, remembering `capacity` shares.
    fn channel(capacity: usize) -> Channel {
        let vardiff = VardiffConfig {
            min: Difficulty::MIN,
            max: Difficulty::MIN,
            ..VardiffConfig::default()
        };
        let config = ChannelConfig {
            dedup_capacity: capacity,
            vardiff,
            ..ChannelConfig::default()
        };
        Channel::new(
            Arc::new(config),
            vec![0, 0, 0, 1],
            4,
            Difficulty::MIN,
            Timestamp::from_millis(0),
        )
    }

    struct Rig {
        book: JobBook,
        payout: ScriptBuf,
        ch: Channel,
        next_wire: u64,
    }

    impl Rig {
        fn new(capacity: usize) -> Rig {
            Rig {
                book: JobBook::new(JobConfig::default()),
                payout: ScriptBuf::from_bytes(vec![0x51]),
                ch: channel(capacity),
                next_wire: 1,
            }
        }

        /// Issues a job for a template under a fresh wire id; returns the wire id.
        fn issue(&mut self, t: &Arc<Template>) -> u64 {
            let g = self
                .book
                .handle_template(t.clone(), Timestamp::from_millis(0));
            let job = g.job(&self.payout).unwrap();
            self.reissue(job)
        }

        /// Issues `job` (again) under a fresh wire id.
        fn reissue(&mut self, job: Arc<Job>) -> u64 {
            let wire = self.next_wire;
            self.next_wire += 1;
            self.ch.issue(job, wire, Timestamp::from_millis(0));
            wire
        }

        fn submit(&mut self, wire: u64, n: u32) -> Result<(), Reject> {
            let en = n.to_be_bytes();
            let ntime = self
                .ch
                .jobs()
                .find(|j| j.wire_id == wire)
                .map_or(0, |j| j.job.ntime);
            let s = Submission {
                wire_id: wire,
                extranonce: &en,
                ntime,
                nonce: n.wrapping_mul(0x9e37_79b9),
                version_bits: None,
            };
            self.ch.submit(&s, 0, Timestamp::from_millis(0)).map(|_| ())
        }

        /// Shares `from..` accepted on `wire`, `count` of them (skipping the rare hash that
        /// misses even the minimum difficulty); returns their numbers.
        fn accept(&mut self, wire: u64, from: u32, count: usize) -> Vec<u32> {
            let mut got = Vec::new();
            let mut n = from;
            while got.len() < count {
                match self.submit(wire, n) {
                    Ok(()) => got.push(n),
                    Err(Reject::LowDifficulty) => {}
                    Err(r) => panic!("share {n} on {wire}: {r:?}"),
                }
                n += 1;
            }
            got
        }
    }

    /// A channel with difficulties from 2^-32 to 2^-28, starting at `start`, with SV2's
    /// reading of a change if `sv2`, and one job sent.
    fn two_difficulty_rig(start: Difficulty, sv2: bool) -> (Rig, u64) {
        let config = ChannelConfig {
            vardiff: VardiffConfig {
                min: Difficulty::new(2f64.powi(-32)).unwrap(),
                max: Difficulty::new(2f64.powi(-28)).unwrap(),
                // Only the test changes the difficulty.
                retarget_interval_ms: u64::MAX / 2,
                ..VardiffConfig::default()
            },
            ..ChannelConfig::default()
        };
        let mut r = Rig::new(1 << 10);
        r.ch = Channel::new(
            Arc::new(config),
            vec![0, 0, 0, 1],
            4,
            start,
            Timestamp::from_millis(0),
        );
        if sv2 {
            r.ch.accept_current_target_on_sent_jobs();
        }
        let wire = r.issue(&template(312_500_000));
        (r, wire)
    }

    /// Submits on `wire` the first share whose hash meets `easy` but not `hard`, at `now`;
    /// returns the difficulty it was credited at.
    fn submit_between(
        r: &mut Rig,
        wire: u64,
        easy: Difficulty,
        hard: Difficulty,
        now: Timestamp,
    ) -> Result<Difficulty, Reject> {
        let job = r.ch.jobs().find(|j| j.wire_id == wire).unwrap().job.clone();
        let (easy, hard) = (easy.to_target(), hard.to_target());
        (0u32..)
            .find_map(|n| {
                let en = n.to_be_bytes();
                let nonce = n.wrapping_mul(0x9e37_79b9);
                let s = Submission {
                    wire_id: wire,
                    extranonce: &en,
                    ntime: job.ntime,
                    nonce,
                    version_bits: None,
                };
                let (_, hash) = job.share_hash(&Solution {
                    extranonce_prefix: r.ch.extranonce_prefix(),
                    extranonce: &en,
                    version: job.version,
                    ntime: job.ntime,
                    nonce,
                });
                (easy.is_met_by(&hash.0) && !hard.is_met_by(&hash.0))
                    .then(|| r.ch.submit(&s, 0, now).map(|a| a.credited))
            })
            .unwrap()
    }

    /// After an easier difficulty and its grace period, a share meeting only the new one on a
    /// job sent before the change: SV1 credits a job at the difficulty it went out with; SV2
    /// also takes the channel's current target, as many clients apply `SetTarget` at once.
    #[test]
    fn an_easier_change_reaches_jobs_already_sent_only_where_the_protocol_says_so() {
        let hard = Difficulty::new(2f64.powi(-28)).unwrap();
        let easy = Difficulty::new(2f64.powi(-32)).unwrap();
        let after_grace = Timestamp::from_millis(ChannelConfig::default().grace_ms + 1);
        for sv2 in [false, true] {
            let (mut r, wire) = two_difficulty_rig(hard, sv2);
            r.ch.set_difficulty(easy, Timestamp::from_millis(0));
            let want = if sv2 {
                Ok(easy)
            } else {
                Err(Reject::LowDifficulty)
            };
            assert_eq!(
                submit_between(&mut r, wire, easy, hard, after_grace),
                want,
                "sv2: {sv2}"
            );
        }
    }

    /// After a harder difficulty, a job sent before it keeps its target for good, in both
    /// protocols (SV2 spec 5.3.21: an active job's maximum target "remains stable"), and its
    /// shares are credited at the job's difficulty.
    #[test]
    fn a_harder_change_leaves_jobs_already_sent_at_their_own_target() {
        let hard = Difficulty::new(2f64.powi(-28)).unwrap();
        let easy = Difficulty::new(2f64.powi(-32)).unwrap();
        let long_after = Timestamp::from_millis(3_600_000);
        for sv2 in [false, true] {
            let (mut r, wire) = two_difficulty_rig(easy, sv2);
            r.ch.set_difficulty(hard, Timestamp::from_millis(0));
            assert_eq!(
                submit_between(&mut r, wire, easy, hard, long_after),
                Ok(easy),
                "sv2: {sv2}"
            );
            // A job sent after the change is held to the new target.
            let later = r.issue(&template(312_500_001));
            assert_eq!(
                submit_between(&mut r, later, easy, hard, long_after),
                Err(Reject::LowDifficulty),
                "sv2: {sv2}"
            );
        }
    }

    #[test]
    fn a_share_is_a_duplicate_on_every_remembered_job_with_the_same_work() {
        let mut r = Rig::new(1 << 14);
        let t = template(312_500_000);
        let a = r.issue(&t);
        let on_a = r.accept(a, 0, 50);
        // An identical refresh (another job, the same work), a re-send of it under another id,
        // and other work.
        let b = r.issue(&t);
        let job_b = r.ch.latest_job().unwrap().job.clone();
        let b2 = r.reissue(job_b);
        let c = r.issue(&template(312_500_001));
        // Shares accepted on the older jobs after that, and on the latest.
        let on_b = r.accept(b, 1000, 50);
        let on_c = r.accept(c, 2000, 50);
        for &n in &on_a {
            for wire in [a, b, b2] {
                assert_eq!(r.submit(wire, n), Err(Reject::Duplicate), "{n} on {wire}");
            }
        }
        for &n in &on_b {
            for wire in [a, b, b2] {
                assert_eq!(r.submit(wire, n), Err(Reject::Duplicate), "{n} on {wire}");
            }
        }
        for &n in &on_c {
            assert_eq!(r.submit(c, n), Err(Reject::Duplicate));
        }
        // The same solution on other work is another header: a share in its own right.
        assert_eq!(r.submit(c, on_a[0]), Ok(()));
        assert_eq!(r.ch.dedup_memory().0, 151);
    }

    #[test]
    fn a_header_share_hashes_the_header_on_the_root_the_job_was_issued_with() {
        let mut book = JobBook::new(JobConfig::default());
        let g = book.handle_template(template(312_500_000), Timestamp::from_millis(0));
        let job = g.job(&ScriptBuf::from_bytes(vec![0x51])).unwrap();
        // A header-only channel: the whole extranonce is its prefix.
        let prefix = vec![0, 0, 0, 0, 0, 0, 0, 9];
        let mut ch = Channel::new(
            channel(1 << 14).config.clone(),
            prefix.clone(),
            0,
            Difficulty::MIN,
            Timestamp::from_millis(0),
        );
        let root = merkle_root_from_branch(job.coinbase.txid(&prefix).unwrap(), &job.merkle_branch);
        ch.issue(job.clone(), 1, Timestamp::from_millis(0));
        ch.issue_standard(job.clone(), 2, root, Timestamp::from_millis(0));
        let share = |wire_id, nonce| HeaderSubmission {
            wire_id,
            ntime: job.ntime,
            nonce,
            version_bits: None,
        };
        // Sent without a root: not a job this miner can submit header-only shares on.
        assert_eq!(
            ch.submit_header(&share(1, 7), 0, Timestamp::from_millis(0))
                .err(),
            Some(Reject::UnknownJob)
        );
        // The same header and hash as the full coinbase path computes, found with one hash.
        let full = |nonce| {
            job.share_hash(&Solution {
                extranonce_prefix: &prefix,
                extranonce: &[],
                version: job.version,
                ntime: job.ntime,
                nonce,
            })
        };
        let min = Difficulty::MIN.to_target();
        let nonce = (7..).find(|&n| min.is_met_by(&full(n).1 .0)).unwrap();
        let a = ch
            .submit_header(&share(2, nonce), 0, Timestamp::from_millis(0))
            .unwrap();
        assert_eq!((a.header, a.hash), full(nonce));
        assert_eq!(
            ch.submit_header(&share(2, nonce), 0, Timestamp::from_millis(0))
                .err(),
            Some(Reject::Duplicate)
        );
    }

    #[test]
    fn an_expired_job_takes_its_shares_along() {
        let mut r = Rig::new(1 << 14);
        let t = template(312_500_000);
        let first = r.issue(&t);
        let on_first = r.accept(first, 0, 100);
        let mut latest = first;
        for k in 0..ChannelConfig::default().max_jobs {
            latest = r.issue(&t);
            r.accept(latest, 10_000 * (k as u32 + 1), 10);
        }
        assert_eq!(r.submit(first, on_first[0]), Err(Reject::Stale));
        assert_eq!(r.ch.dedup_memory().0, 80, "8 jobs of 10 shares");
        // Only the job they were accepted on remembered them (as before these tables).
        assert_eq!(r.submit(latest, on_first[0]), Ok(()));
    }

    /// A declared job like the pool's job `like`, on `prev`.
    fn declared(like: &Job, prev: Hash256, tips: &Arc<crate::tips::Tips>) -> Arc<Job> {
        let mut t = (*like.template).clone();
        t.prev_hash = prev;
        Arc::new(
            Job::declared(
                like.id + 1_000,
                Arc::new(t),
                like.coinbase.clone(),
                like.merkle_branch.clone(),
                like.fingerprint,
                Timestamp::from_millis(0),
                7,
                tips.clone(),
            )
            .unwrap(),
        )
    }

    #[test]
    fn declared_jobs_and_the_pools_jobs_expire_apart_and_keep_their_duplicates() {
        let mut r = Rig::new(1 << 14);
        let tips = Arc::new(crate::tips::Tips::default());
        let t = template(312_500_000);
        let first = r.issue(&t);
        let pool_job = r.ch.latest_job().unwrap().job.clone();
        let d = r.reissue(declared(&pool_job, Hash256([0x11; 32]), &tips));
        let on_d = r.accept(d, 0, 40);
        // Three times as many pool jobs as a channel remembers, each with shares: the oldest
        // pool jobs go, the declared job stays with its shares.
        let mut latest = first;
        for k in 0..3 * ChannelConfig::default().max_jobs as u32 {
            latest = r.issue(&t);
            r.accept(latest, 10_000 * (k + 1), 5);
        }
        assert_eq!(r.submit(first, 500_000), Err(Reject::Stale));
        for &n in &on_d {
            assert_eq!(r.submit(d, n), Err(Reject::Duplicate));
        }
        assert_eq!(r.accept(d, 1_000_000, 1).len(), 1);
        // The farm moves to another block: its earlier declared job is stale, the pool's jobs
        // keep their shares.
        let on_latest = r.accept(latest, 2_000_000, 20);
        let d2 = r.reissue(declared(&pool_job, Hash256([0x12; 32]), &tips));
        assert_eq!(r.submit(d, 3_000_000), Err(Reject::Stale));
        for &n in &on_latest {
            assert_eq!(r.submit(latest, n), Err(Reject::Duplicate));
        }
        // The declared job is the latest now; the next one on another block evicts it, and the
        // pool's job before it becomes the latest again (its shares leave the filter).
        let on_d2 = r.accept(d2, 4_000_000, 20);
        for &n in &on_d2 {
            assert_eq!(r.submit(d2, n), Err(Reject::Duplicate));
        }
        let d3 = r.reissue(declared(&pool_job, Hash256([0x13; 32]), &tips));
        assert_eq!(r.submit(d2, 5_000_000), Err(Reject::Stale));
        for &n in &on_latest {
            assert_eq!(r.submit(latest, n), Err(Reject::Duplicate));
        }
        assert_eq!(r.accept(d3, 6_000_000, 1).len(), 1);
        let remembered: usize = r.ch.jobs().map(|j| j.seen.len()).sum();
        assert_eq!(r.ch.dedup_memory().0, remembered);
        let older: usize = remembered - r.ch.latest_job().unwrap().seen.len();
        assert_eq!(
            r.ch.filter.len(),
            older,
            "the filter holds the older jobs' shares"
        );
        assert_eq!(
            r.ch.jobs().filter(|j| j.job.is_declared()).count(),
            1,
            "one declared job"
        );
    }

    #[test]
    fn memory_stays_bounded_and_duplicates_found_under_churn() {
        let capacity = 4096;
        let mut r = Rig::new(capacity);
        let t = template(312_500_000);
        let mut wires = VecDeque::new();
        let mut largest = 0;
        for round in 0..40u32 {
            // Alternately the same work and new work; bursts of every size, some on older jobs
            // (the filter grows and is rebuilt from the jobs' tables).
            let t = if round % 3 == 0 {
                template(round as u64)
            } else {
                t.clone()
            };
            wires.push_back(r.issue(&t));
            if wires.len() > 8 {
                wires.pop_front();
            }
            let on = wires[round as usize * 7 % wires.len()];
            let burst = [5usize, 700, 1500, 40][round as usize % 4];
            let mut got = Vec::new();
            for n in round * 100_000..round * 100_000 + burst as u32 {
                match r.submit(on, n) {
                    Ok(()) => got.push(n),
                    Err(Reject::LowDifficulty) => {}
                    // Expired, or the table is full and only this job is left to forget.
                    Err(Reject::Stale) => break,
                    Err(e) => panic!("round {round}: {e:?}"),
                }
            }
            assert!(r.ch.dedup_memory().0 <= capacity);
            for &n in got.iter().step_by(37) {
                assert_eq!(r.submit(on, n), Err(Reject::Duplicate), "round {round}");
            }
            largest = largest.max(r.ch.dedup_memory().1);
        }
        // Job tables within 4 slots of 8 bytes per share, twice that while they are sized
        // ahead, and the filter at about 4 bytes per share.
        assert!(
            largest <= 2 * 4 * 8 * capacity + 8 * capacity,
            "{largest} bytes"
        );
    }
}
