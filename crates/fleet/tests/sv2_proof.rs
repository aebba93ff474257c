//! Every share an SV2 device sends is real proof of work, for every profile.
//!
//! A scripted pool drives one device of each profile over an in-memory Noise connection through
//! what changes the header a share stands for or the target it must meet: a future job and its
//! prev hash, a job on the current prev hash with a later min_ntime, a `SetTarget` arriving
//! between a share being found and being sent (the job keeps its target) and then a job held to
//! the new one, an easier `SetTarget` the job being hashed ignores, a new tip whose network target is easy enough that shares are blocks, a reconnect
//! to a pool that fixes the version, and the lowest target. For every `SubmitSharesStandard` the
//! pool rebuilds the header from its own record of the job (merkle root, version, the prev hash
//! and nbits it activated on), checks it with `primitives`' standard-channel share check under
//! the version bits it allowed, and compares the hash with the target the job was given when it
//! became workable. Every share is acknowledged in a batch and must come back accepted. The count
//! of shares is checked against what the hashes should have found, so a device that skipped
//! shares would fail too.

mod common;

use std::collections::{HashMap, HashSet};

use common::sv2::{ack, prev_hash, prev_hash_message, PoolJob, Recorder, ScriptedPool, CHANNEL};
use common::{at, Proof};
use events::Verdict;
use fleet::{CloseReason, Profile, Sv2Config, Sv2Device, Sv2Shared, Timestamp};
use primitives::share::{JobHeader, MinerChoice, StandardShare};
use primitives::{CompactTarget, Difficulty, Hash256, Target};
use sv2::messages::common::mining_flags;
use sv2::messages::mining::SetTarget;

const MS: u64 = 1_000_000;
const BIP320: u32 = 0x1fff_e000;
/// Mainnet-like: no share is a block.
const MAINNET_BITS: u32 = 0x1703_6e3a;
/// Regtest's: about half of all hashes meet it.
const REGTEST_BITS: u32 = 0x207f_ffff;
const NTIME: u32 = 1_700_000_000;

/// A job as the pool knows it once workable.
#[derive(Clone, Copy)]
struct Workable {
    job: PoolJob,
    prev_hash: Hash256,
    nbits: u32,
    min_ntime: u32,
    target: Target,
}

struct Run {
    dev: Sv2Device,
    pool: ScriptedPool,
    rec: Recorder,
    now: Timestamp,
    /// The channel's target, as the pool last set it.
    target: Target,
    /// Version bits the pool allows on this connection.
    mask: u32,
    tip: (u32, u32, u32),
    next_tip: u32,
    next_job: u32,
    jobs: HashMap<u32, Workable>,
    p: Proof,
    seen: HashSet<(u32, u32, u32, u32)>,
    ntimes: HashSet<u32>,
}

fn target(log2_difficulty: i32) -> Target {
    Difficulty::new(2f64.powi(log2_difficulty))
        .unwrap()
        .to_target()
}

/// A target's top 64 bits as a number (hashes compare as 256-bit little-endian integers).
fn top_f64(t: &Target) -> f64 {
    let le = t.to_le_bytes();
    u64::from_le_bytes(le[24..].try_into().unwrap()) as f64
}

impl Run {
    fn new(profile: Profile, nonces_per_midstate: u64) -> Run {
        let shared = Sv2Shared::new(Sv2Config {
            profile,
            // Roll the version bits often: many distinct headers.
            nonces_per_midstate,
            ..Sv2Config::default()
        })
        .unwrap();
        Run {
            dev: Sv2Device::new(shared, 3, 3, 11, at(0)),
            pool: ScriptedPool::new(),
            rec: Recorder::default(),
            now: at(0),
            target: Target::MAX,
            mask: 0,
            tip: (0, 0, 0),
            next_tip: 1,
            next_job: 1,
            jobs: HashMap::new(),
            p: Proof::default(),
            seen: HashSet::new(),
            ntimes: HashSet::new(),
        }
    }

    fn no_errors(&self) {
        assert!(self.rec.errors.is_empty(), "{:?}", self.rec.errors);
    }

    /// Connects (when the backoff allows), opens the channel at `t` with the pool's setup
    /// `flags`, and sends a future job with a new tip.
    fn connect(&mut self, flags: u32, t: Target, nbits: u32) {
        self.now = self.now.max(self.dev.poll_timeout().unwrap());
        assert!(self.dev.wants_connect(self.now));
        self.dev.handle_connected(self.now);
        self.pool = ScriptedPool::new();
        self.pool
            .open(&mut self.dev, self.now, &mut self.rec, flags, t);
        self.target = t;
        let rolls = self.dev.version_mask() != 0;
        self.mask = if flags & mining_flags::REQUIRES_FIXED_VERSION == 0 {
            BIP320
        } else {
            0
        };
        assert!(!rolls || self.mask != 0, "rolls only what the pool allows");
        self.new_tip(nbits);
        self.no_errors();
    }

    /// A future job and the SetNewPrevHash that activates it.
    fn new_tip(&mut self, nbits: u32) {
        let job = PoolJob::new(self.next_job);
        self.next_job += 1;
        let n = self.next_tip;
        self.next_tip += 1;
        let min_ntime = NTIME + 600 * n;
        self.tip = (n, nbits, min_ntime);
        let msgs = [
            job.message(None),
            prev_hash_message(job.id, n, min_ntime, nbits),
        ];
        self.pool
            .send(&mut self.dev, self.now, &mut self.rec, &msgs);
        self.workable(job, min_ntime);
        self.no_errors();
    }

    /// A job on the current tip, workable at once.
    fn new_job(&mut self, ntime_ahead: u32) {
        let job = PoolJob::new(self.next_job);
        self.next_job += 1;
        let min_ntime = self.tip.2 + ntime_ahead;
        self.pool.send(
            &mut self.dev,
            self.now,
            &mut self.rec,
            &[job.message(Some(min_ntime))],
        );
        self.workable(job, min_ntime);
        self.no_errors();
    }

    fn workable(&mut self, job: PoolJob, min_ntime: u32) {
        let (n, nbits, _) = self.tip;
        assert_eq!(self.dev.job(), Some((job.id, self.target)));
        self.jobs.insert(
            job.id,
            Workable {
                job,
                prev_hash: prev_hash(n),
                nbits,
                min_ntime,
                target: self.target,
            },
        );
    }

    fn set_target(&mut self, t: Target) {
        let m = SetTarget {
            channel_id: CHANNEL,
            maximum_target: t,
        };
        self.pool
            .send(&mut self.dev, self.now, &mut self.rec, &[m.into()]);
        self.target = t;
    }

    /// Hashes `total` nonces in slices of `slice`, sending what was found after each slice when
    /// `send`.
    fn hash(&mut self, total: u64, slice: u64, send: bool) {
        let (_, job_target) = self.dev.job().expect("a job");
        // P(hash <= target) for the job's target.
        let p = (top_f64(&job_target) + 1.0) / 2f64.powi(64);
        common::in_slices(total, slice, |n| {
            let out = self.dev.hash(self.now, n, &mut self.rec);
            self.p.add(out, p);
            self.now += std::time::Duration::from_nanos(MS);
            if send {
                self.transmit();
            }
            out.hashes
        });
    }

    /// Takes the device's shares, checks each, and acknowledges them in one batch.
    fn transmit(&mut self) {
        let shares = self
            .pool
            .take_shares(&mut self.dev, self.now, &mut self.rec);
        let Some(last) = shares.last() else {
            return;
        };
        let last = last.sequence_number;
        for s in &shares {
            self.check(s);
        }
        let before = self.rec.results.len();
        let ack = ack(last, shares.len() as u32, shares.len() as u64);
        self.now += std::time::Duration::from_nanos(MS);
        self.pool
            .send(&mut self.dev, self.now, &mut self.rec, &[ack]);
        let results = &self.rec.results[before..];
        assert_eq!(results.len(), shares.len(), "one verdict per share");
        assert!(results.iter().all(|r| r.verdict == Verdict::Accepted));
        assert_eq!(self.dev.in_flight(), 0);
    }

    /// The pool's check of one share.
    fn check(&mut self, s: &sv2::messages::mining::SubmitSharesStandard) {
        let rec = self.rec.sent[self.p.checked].clone();
        self.p.checked += 1;
        assert_eq!(s.channel_id, CHANNEL);
        assert_eq!(
            (rec.seq, rec.job_id, rec.ntime, rec.nonce, rec.version),
            (s.sequence_number, s.job_id, s.ntime, s.nonce, s.version),
            "the observer saw the share sent"
        );
        let w = self.jobs[&s.job_id];
        assert!(
            s.ntime >= w.min_ntime,
            "ntime {} before {}",
            s.ntime,
            w.min_ntime
        );
        let share = StandardShare {
            job: JobHeader {
                version: w.job.version,
                prev_hash: w.prev_hash,
                bits: CompactTarget::from_consensus(w.nbits),
            },
            merkle_root: Hash256(w.job.merkle_root),
            miner: MinerChoice {
                ntime: s.ntime,
                nonce: s.nonce,
                version: Some(s.version),
                version_mask: self.mask,
            },
        };
        let c = share.check(&w.target).unwrap_or_else(|e| {
            panic!(
                "version {:08x} of job {:08x}: {e}",
                s.version, w.job.version
            )
        });
        assert_eq!(
            rec.hash, c.hash,
            "the hash the device reported is the header's"
        );
        assert!(
            c.meets_share_target,
            "share misses its job's target (difficulty {}): {s:?}",
            Difficulty::from_target(w.target)
        );
        assert_eq!(rec.difficulty, Difficulty::from_target(w.target).as_f64());
        assert_eq!(rec.block, c.meets_network_target);
        self.p.blocks_checked += rec.block as u64;
        assert!(
            self.seen.insert((s.job_id, s.ntime, s.nonce, s.version)),
            "duplicate share: {s:?}"
        );
        self.p.versions.insert(s.version);
        self.ntimes.insert(s.ntime);
    }

    fn close(&mut self) {
        self.dev
            .handle_closed(self.now, CloseReason::Eof, &mut self.rec);
        assert!(self.rec.unanswered.is_empty(), "every share was answered");
    }

    /// Every share found was sent and checked, and as many were found as the hashes should give.
    fn finish(&self) {
        assert_eq!(self.rec.dropped, 0);
        assert_eq!(self.rec.found, self.p.found);
        self.p.finish(self.rec.sent.len());
        self.no_errors();
    }
}

fn every_share_meets_its_target(profile: Profile) -> Run {
    let mut r = Run::new(profile, 64);
    r.connect(0, target(-22), MAINNET_BITS); // one share per 1024 hashes
    r.hash(30_000, 700, true);

    // Found under the channel's target, sent after a harder one arrived: the job keeps its
    // target, before and after the SetTarget.
    r.hash(8_000, 8_000, false);
    r.set_target(target(-20));
    r.transmit();
    r.hash(10_000, 700, true);
    // The next job is held to the new target, and starts from a later time.
    r.new_job(30);
    r.hash(40_000, 1_000, true);
    // An easier target does not loosen the job being hashed either.
    r.set_target(target(-24));
    r.hash(20_000, 700, true);

    // A new tip with an easy network target: shares are blocks.
    r.set_target(target(-23));
    r.new_tip(REGTEST_BITS);
    r.hash(20_000, 700, true);

    // A new connection; a pool that fixes the version gets the job's version, except from an
    // ASIC, which requires rolling and is tested for leaving instead (tests/sv2_device.rs).
    r.close();
    let flags = if profile == Profile::Asic {
        0
    } else {
        mining_flags::REQUIRES_FIXED_VERSION
    };
    r.connect(flags, target(-21), MAINNET_BITS);
    let fixed_from = r.p.checked;
    r.hash(20_000, 700, true);
    if flags != 0 {
        let version = r.jobs[&r.dev.job().unwrap().0].job.version;
        assert!(r.rec.sent[fixed_from..]
            .iter()
            .all(|s| s.version == version));
    }

    // The lowest target: every hash is a share, and every one is sent.
    let (hashes, found) = (r.p.hashes, r.p.found);
    r.set_target(Target::MAX);
    r.new_job(0);
    r.hash(3_000, 40, true);
    assert_eq!(r.p.found - found, r.p.hashes - hashes);

    r.finish();
    r
}

/// A profile's shares are real proof of work, and show its versions: an ASIC's and a Bitaxe's
/// rolled, a CPU miner's its jobs' own.
fn shares_meet_their_targets(profile: Profile) {
    let r = every_share_meets_its_target(profile);
    r.p.assert_versions(profile, r.jobs.values().map(|w| w.job.version).collect());
}

#[test]
fn asic_shares_roll_versions_and_meet_their_targets() {
    shares_meet_their_targets(Profile::Asic);
}

#[test]
fn bitaxe_shares_roll_versions_where_allowed_and_meet_their_targets() {
    shares_meet_their_targets(Profile::Bitaxe);
}

#[test]
fn cpu_miner_shares_keep_the_job_version_and_meet_their_targets() {
    shares_meet_their_targets(Profile::Cpu);
}

#[test]
fn with_every_version_tried_the_time_moves_on() {
    // One nonce per version: BIP320's 2^16 versions are used up every 65,536 hashes.
    let mut r = Run::new(Profile::Asic, 1);
    r.connect(0, target(-21), MAINNET_BITS);
    r.hash(200_000, 5_000, true);
    r.finish();
    let min = r.tip.2;
    let want: HashSet<u32> = (min..min + 4).collect();
    assert_eq!(
        r.ntimes, want,
        "three whole rounds of versions, then a fourth begun"
    );
    assert!(r.p.versions.len() > 80, "{}", r.p.versions.len());
}
