//! Every share a device sends is real proof of work, for every profile.
//!
//! A scripted pool drives one device of each profile, without sockets, through what changes the
//! header a share stands for: jobs with and without a merkle branch, clean or not; a new
//! difficulty, also one arriving between a share being found and being sent; a narrower version
//! mask; a new extranonce (which applies from the next job); a reconnect with another
//! extranonce1 and extranonce2 size; a network target easy enough that shares are blocks. For
//! every submit line the pool rebuilds the header from its own copy of the job, the extranonce1
//! it gave the device, and the submitted extranonce2, ntime, nonce and version bits, hashes it
//! with `primitives`, and compares it with the target the device was given when it found the
//! share. The count of shares is checked against what the hashes should have found, so a device
//! that skipped shares would fail too.

mod common;

use std::collections::{HashMap, HashSet, VecDeque};

use common::{at, Proof};
use common::{handshake, parse_submit, set_difficulty, take_lines, PoolJob, Recorder};
use fleet::{CloseReason, Profile, Sv1Config, Sv1Device, Sv1Shared, Timestamp};
use primitives::{CompactTarget, Difficulty, Target};

const MS: u64 = 1_000_000;
/// The version-rolling mask the pool grants at most (BIP320's bits).
const POOL_MASK: u32 = 0x1fff_e000;
/// Mainnet-like: no share is a block.
const MAINNET_BITS: u32 = 0x1703_6e3a;
/// Regtest's: about half of all hashes meet it.
const REGTEST_BITS: u32 = 0x207f_ffff;

/// One device against the scripted pool.
struct Run {
    dev: Sv1Device,
    rec: Recorder,
    now: Timestamp,
    worker: String,
    /// Jobs sent, with the extranonce1 and extranonce2 size they were sent under.
    jobs: HashMap<String, (PoolJob, Vec<u8>, usize)>,
    next_job: u64,
    en1: Vec<u8>,
    en2_size: usize,
    difficulty: f64,
    /// For each share found and not yet checked, oldest first: the difficulty and the version
    /// mask the device held when it found it.
    found_under: VecDeque<(f64, u32)>,
    p: Proof,
    seen: HashSet<(String, Vec<u8>, u32, u32)>,
}

impl Run {
    fn new(profile: Profile) -> Run {
        let config = Sv1Config {
            profile,
            worker_prefix: "bc1qproof.rig".into(),
            // Roll the version bits (or the extranonce2) often: many distinct headers.
            nonces_per_midstate: 64,
            ..Sv1Config::default()
        };
        let shared = Sv1Shared::new(config).unwrap();
        Run {
            dev: Sv1Device::new(shared, 3, 3, 11, at(0)),
            rec: Recorder::default(),
            now: at(0),
            worker: "bc1qproof.rig3".into(),
            jobs: HashMap::new(),
            next_job: 1,
            en1: Vec::new(),
            en2_size: 0,
            difficulty: 1.0,
            found_under: VecDeque::new(),
            p: Proof::default(),
            seen: HashSet::new(),
        }
    }

    fn line(&mut self, line: &[u8]) {
        self.dev.handle_line(line, self.now, &mut self.rec);
        assert!(self.rec.errors.is_empty(), "{:?}", self.rec.errors);
    }

    /// Connects (when the backoff allows), does the handshake, and sends the difficulty.
    fn connect(&mut self, en1: &[u8], en2_size: usize) {
        self.now = self.now.max(self.dev.poll_timeout().unwrap());
        assert!(self.dev.wants_connect(self.now));
        self.dev.handle_connected(self.now);
        handshake(
            &mut self.dev,
            &mut self.rec,
            POOL_MASK,
            en1,
            en2_size,
            self.now,
        );
        assert!(self.dev.is_ready());
        self.en1 = en1.to_vec();
        self.en2_size = en2_size;
        self.set_difficulty(self.difficulty);
    }

    fn close(&mut self) {
        self.dev
            .handle_closed(self.now, CloseReason::Eof, &mut self.rec);
        assert!(self.rec.unanswered.is_empty(), "every share was answered");
    }

    fn notify(&mut self, branch_len: usize, nbits: u32, clean: bool) {
        let job = PoolJob::new(
            self.next_job,
            self.en1.len() + self.en2_size,
            branch_len,
            nbits,
        );
        self.next_job += 1;
        self.line(&job.notify(clean));
        assert_eq!(self.dev.job_id(), Some(job.id.as_str()));
        self.jobs
            .insert(job.id.clone(), (job, self.en1.clone(), self.en2_size));
    }

    fn set_difficulty(&mut self, d: f64) {
        self.line(&set_difficulty(d));
        assert_eq!(self.dev.difficulty(), d);
        self.difficulty = d;
    }

    fn set_version_mask(&mut self, mask: u32) {
        self.line(
            format!(r#"{{"id":null,"method":"mining.set_version_mask","params":["{mask:08x}"]}}"#)
                .as_bytes(),
        );
    }

    /// Takes effect with the next job, for the device as for the pool.
    fn set_extranonce(&mut self, en1: &[u8], en2_size: usize) {
        self.line(
            format!(
                r#"{{"id":null,"method":"mining.set_extranonce","params":["{}",{en2_size}]}}"#,
                hex::encode(en1)
            )
            .as_bytes(),
        );
        self.en1 = en1.to_vec();
        self.en2_size = en2_size;
    }

    /// Hashes `total` nonces in slices of `slice`, sending what was found after each slice when
    /// `send`.
    fn hash(&mut self, total: u64, slice: u64, send: bool) {
        // P(hash <= target) for the target in force.
        let target = Difficulty::new(self.difficulty).unwrap().to_target();
        let p = (top_f64(&target) + 1.0) / 2f64.powi(64);
        common::in_slices(total, slice, |n| {
            let out = self.dev.hash(self.now, n, &mut self.rec);
            self.p.add(out, p);
            let mask = self.dev.version_mask();
            self.found_under.extend(std::iter::repeat_n(
                (self.difficulty, mask),
                out.shares as usize,
            ));
            self.now += std::time::Duration::from_nanos(MS);
            if send {
                self.transmit();
            }
            out.hashes
        });
    }

    /// Takes the device's submits, checks each, and accepts it.
    fn transmit(&mut self) {
        for line in take_lines(&mut self.dev, self.now, &mut self.rec) {
            let id = self.check(&line);
            self.line(format!(r#"{{"id":{id},"result":true,"error":null}}"#).as_bytes());
        }
    }

    /// The pool's check of one submit line; returns its id.
    fn check(&mut self, line: &str) -> u64 {
        let sub = parse_submit(line);
        let rec = self.rec.sent[self.p.checked].clone();
        self.p.checked += 1;
        let (difficulty, mask) = self.found_under.pop_front().expect("a share found");
        assert_eq!(rec.seq, sub.id, "the observer saw the request id");
        assert_eq!(sub.worker, self.worker);
        let (job, en1, en2_size) = &self.jobs[&sub.job_id];
        assert_eq!(rec.job_id, sub.job_id);
        assert_eq!(sub.extranonce2.len(), *en2_size, "{line}");
        assert_eq!(rec.extranonce2, sub.extranonce2);
        assert_eq!(sub.ntime, job.ntime);
        assert_eq!((rec.ntime, rec.nonce), (sub.ntime, sub.nonce));
        // BIP310: the bits stay inside the mask; the header carries the job's other bits.
        let version = match (mask, sub.version_bits) {
            (0, None) => job.version,
            (m, Some(bits)) if m != 0 => {
                assert_eq!(bits & !m, 0, "{bits:08x} outside the mask {m:08x}");
                (job.version & !m) | bits
            }
            (m, bits) => panic!("mask {m:08x} with version bits {bits:?}: {line}"),
        };
        assert_eq!(rec.version, version);
        assert_eq!(rec.version_bits, sub.version_bits);
        let hash = job
            .header(en1, &sub.extranonce2, sub.ntime, sub.nonce, version)
            .block_hash();
        assert_eq!(
            rec.hash, hash,
            "the hash the device reported is the header's"
        );
        let target = Difficulty::new(difficulty).unwrap().to_target();
        assert!(
            target.is_met_by(&hash.0),
            "share misses the target of difficulty {difficulty}: {line}"
        );
        assert_eq!(rec.difficulty, difficulty);
        let network = Target::from_compact(CompactTarget::from_consensus(job.nbits)).unwrap();
        assert_eq!(rec.block, network.is_met_by(&hash.0));
        self.p.blocks_checked += rec.block as u64;
        assert!(
            self.seen.insert((
                sub.job_id.clone(),
                sub.extranonce2.clone(),
                sub.nonce,
                version
            )),
            "duplicate share: {line}"
        );
        self.p.versions.insert(version);
        sub.id
    }

    /// Every share found was sent and checked, and as many were found as the hashes should give.
    fn finish(&self) {
        assert_eq!(self.rec.dropped, 0);
        assert!(self.found_under.is_empty(), "shares found but not sent");
        self.p.finish(self.rec.sent.len());
    }
}

/// A target's top 64 bits as a number (hashes compare as 256-bit little-endian integers).
fn top_f64(t: &Target) -> f64 {
    let le = t.to_le_bytes();
    u64::from_le_bytes(le[24..].try_into().unwrap()) as f64
}

fn every_share_meets_its_target(profile: Profile) -> Run {
    let mut r = Run::new(profile);
    let d = |log2: i32| 2f64.powi(log2);
    r.difficulty = d(-22); // one share per 1024 hashes
    r.connect(&[0xde, 0xad, 0xbe, 0xef], 4);
    r.notify(12, MAINNET_BITS, true);
    r.hash(30_000, 700, true);

    // Found at one difficulty, sent after the next arrived: each keeps the target it was
    // found at. Then shares at the new one.
    r.hash(8_000, 8_000, false);
    r.set_difficulty(d(-20));
    r.transmit();
    r.hash(40_000, 1_000, true);

    // A job that does not clean, with an empty branch and an easy network target.
    r.set_difficulty(d(-23));
    r.notify(0, REGTEST_BITS, false);
    r.hash(20_000, 700, true);

    // A narrower mask: bits found under the old one are sent as they were found.
    r.hash(4_000, 4_000, false);
    r.set_version_mask(0x00ff_e000);
    r.transmit();
    r.hash(20_000, 700, true);

    // A new extranonce: the current job keeps the one it came with; the next job takes it.
    r.set_extranonce(&[1, 2, 3, 4, 5], 3);
    r.hash(10_000, 700, true);
    r.notify(1, MAINNET_BITS, true);
    r.hash(20_000, 700, true);

    // Reconnected, with another extranonce1 and an 8-byte extranonce2.
    r.close();
    r.connect(&[0x70, 0x71, 0x72], 8);
    r.notify(5, MAINNET_BITS, true);
    r.hash(20_000, 700, true);

    // The lowest difficulty: nearly every hash is a share, and every one is sent.
    let (hashes, found) = (r.p.hashes, r.p.found);
    r.set_difficulty(Difficulty::MIN.as_f64());
    r.hash(3_000, 40, true);
    let (h, f) = (r.p.hashes - hashes, r.p.found - found);
    assert!(
        f + h / 1000 >= h,
        "{f} shares from {h} hashes at the lowest difficulty"
    );

    r.finish();
    r
}

/// A profile's shares are real proof of work, and show its versions: an ASIC's and a Bitaxe's
/// rolled, a CPU miner's its jobs' own.
fn shares_meet_their_targets(profile: Profile) {
    let r = every_share_meets_its_target(profile);
    r.p.assert_versions(
        profile,
        r.jobs.values().map(|(j, _, _)| j.version).collect(),
    );
}

#[test]
fn asic_shares_roll_versions_and_meet_their_targets() {
    shares_meet_their_targets(Profile::Asic);
}

#[test]
fn bitaxe_shares_roll_versions_and_meet_their_targets() {
    shares_meet_their_targets(Profile::Bitaxe);
}

#[test]
fn cpu_miner_shares_keep_the_job_version_and_meet_their_targets() {
    shares_meet_their_targets(Profile::Cpu);
}
