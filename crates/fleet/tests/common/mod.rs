//! A scripted pool for driving devices without sockets: jobs as a pool builds them (written
//! here by hand, not with the `sv1` writers the device's reader pairs with), the pool's side of
//! the handshake, the header a submitted share stands for, and an observer that keeps everything
//! a device reported. The SV2 counterpart is [`sv2`].

#![allow(dead_code)] // each test binary uses its own part

#[macro_use]
mod records;
pub mod sv2;

use std::collections::HashSet;

use fleet::device::{JobView, SentShare, ShareReply, ShareVerdict};
use fleet::{Observer, Profile, Sv1Device, Timestamp};
use primitives::{merkle_root_from_branch, sha256d, CompactTarget, Hash256, Header, Target};

/// A job: a realistic coinbase (BIP34 height, a tag, a P2WPKH payout, the witness commitment)
/// split around an extranonce of `en_len` bytes, and a made-up branch. Its fields are the test
/// pool's [`fleet::testpool::Job`]; its notify line is its own.
#[derive(Clone, Debug)]
pub struct PoolJob(fleet::testpool::Job);

impl std::ops::Deref for PoolJob {
    type Target = fleet::testpool::Job;
    fn deref(&self) -> &fleet::testpool::Job {
        &self.0
    }
}

impl PoolJob {
    pub fn new(n: u64, en_len: usize, branch_len: usize, nbits: u32) -> Self {
        let parts = fleet::testpool::coinbase_parts(
            900_000 + n as u32,
            en_len,
            b"/scripted pool/",
            sha256d(&n.to_be_bytes()),
        );
        PoolJob(fleet::testpool::Job {
            id: format!("{:x}", 0x6512_0000 + n),
            prev_hash: sha256d(&(n / 3).to_le_bytes()),
            coinb1: parts.prefix,
            coinb2: parts.suffix,
            branch: (0..branch_len as u64)
                .map(|i| sha256d(&(i + 1000 * n).to_le_bytes()))
                .collect(),
            version: 0x2000_0000 | (n as u32 & 0xff) << 3,
            nbits,
            ntime: 1_700_000_000 + n as u32,
        })
    }

    /// The `mining.notify` line (without its newline). Stratum's prevhash is the internal order
    /// with each 4-byte word byte-swapped; version, nbits and ntime are big-endian hex.
    pub fn notify(&self, clean: bool) -> Vec<u8> {
        let prev: String = self
            .prev_hash
            .0
            .chunks(4)
            .map(|w| format!("{:02x}{:02x}{:02x}{:02x}", w[3], w[2], w[1], w[0]))
            .collect();
        let branch: Vec<String> = self
            .branch
            .iter()
            .map(|h| format!("\"{}\"", hex::encode(h.0)))
            .collect();
        format!(
            r#"{{"id":null,"method":"mining.notify","params":["{}","{prev}","{}","{}",[{}],"{:08x}","{:08x}","{:08x}",{clean}]}}"#,
            self.id,
            hex::encode(&self.coinb1),
            hex::encode(&self.coinb2),
            branch.join(","),
            self.version,
            self.nbits,
            self.ntime,
        )
        .into_bytes()
    }

    /// The header a share on this job stands for.
    pub fn header(&self, en1: &[u8], en2: &[u8], ntime: u32, nonce: u32, version: u32) -> Header {
        let coinbase = [&self.coinb1[..], en1, en2, &self.coinb2[..]].concat();
        Header {
            version,
            prev_hash: self.prev_hash,
            merkle_root: merkle_root_from_branch(sha256d(&coinbase), &self.branch),
            time: ntime,
            bits: CompactTarget::from_consensus(self.nbits),
            nonce,
        }
    }
}

pub fn set_difficulty(d: f64) -> Vec<u8> {
    format!(r#"{{"id":null,"method":"mining.set_difficulty","params":[{d:e}]}}"#).into_bytes()
}

/// What the device wants sent, as lines.
pub fn take_lines<O: Observer>(dev: &mut Sv1Device, now: Timestamp, obs: &mut O) -> Vec<String> {
    let mut out = Vec::new();
    dev.poll_transmit(&mut out, now, obs);
    String::from_utf8(out)
        .expect("UTF-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The pool's side of the handshake: answers whatever the device sends until it goes quiet,
/// granting `requested mask & pool_mask`. Returns the methods sent, one batch per write.
pub fn handshake<O: Observer>(
    dev: &mut Sv1Device,
    obs: &mut O,
    pool_mask: u32,
    en1: &[u8],
    en2_size: usize,
    now: Timestamp,
) -> Vec<Vec<String>> {
    let mut batches = Vec::new();
    loop {
        let lines = take_lines(dev, now, obs);
        if lines.is_empty() {
            return batches;
        }
        let mut methods = Vec::new();
        for line in &lines {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
            let id = &v["id"];
            let method = v["method"].as_str().unwrap_or_default().to_owned();
            let reply = match method.as_str() {
                "mining.configure" => {
                    let asked = v["params"][1]["version-rolling.mask"]
                        .as_str()
                        .map_or(0, |m| u32::from_str_radix(m, 16).expect("hex mask"));
                    format!(
                        r#"{{"id":{id},"result":{{"version-rolling":true,"version-rolling.mask":"{:08x}"}},"error":null}}"#,
                        asked & pool_mask
                    )
                }
                "mining.subscribe" => format!(
                    r#"{{"id":{id},"result":[[["mining.notify","s1"]],"{}",{en2_size}],"error":null}}"#,
                    hex::encode(en1)
                ),
                "mining.authorize" | "mining.suggest_difficulty" => {
                    format!(r#"{{"id":{id},"result":true,"error":null}}"#)
                }
                other => panic!("unexpected {other:?} in the handshake"),
            };
            methods.push(method);
            dev.handle_line(reply.as_bytes(), now, obs);
        }
        batches.push(methods);
    }
}

/// A share as the device reported it, owned.
#[derive(Clone, Debug, PartialEq)]
pub struct SentRec {
    pub at: u64,
    pub seq: u64,
    pub job_id: String,
    pub extranonce2: Vec<u8>,
    pub ntime: u32,
    pub nonce: u32,
    pub version: u32,
    pub version_bits: Option<u32>,
    pub difficulty: f64,
    pub hash: Hash256,
    pub block: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct JobRec {
    pub at: u64,
    pub job_id: String,
    pub prev_hash: Hash256,
    pub branch: Vec<Hash256>,
    pub clean: bool,
    pub target: Target,
    pub difficulty: f64,
}

/// Everything a device told its observer.
#[derive(Default, Debug)]
pub struct Recorder {
    pub jobs: Vec<JobRec>,
    pub targets: Vec<(u64, f64, Target)>,
    pub sent: Vec<SentRec>,
    pub results: Vec<(u64, u64, ShareVerdict)>,
    pub unanswered: Vec<u64>,
    pub dropped: u64,
    pub ready: u64,
    pub errors: Vec<String>,
}

impl Observer for Recorder {
    fn job_received(&mut self, _d: u64, now: Timestamp, j: &JobView<'_>) {
        self.jobs.push(JobRec {
            at: now.as_nanos(),
            job_id: j.job_id.to_owned(),
            prev_hash: *j.prev_hash,
            branch: j.merkle_branch.to_vec(),
            clean: j.clean,
            target: *j.target,
            difficulty: j.difficulty,
        });
    }
    fn target_changed(&mut self, _d: u64, now: Timestamp, difficulty: f64, target: &Target) {
        self.targets.push((now.as_nanos(), difficulty, *target));
    }
    fn share_sent(&mut self, _d: u64, now: Timestamp, s: &SentShare<'_>) {
        self.sent.push(SentRec {
            at: now.as_nanos(),
            seq: s.seq,
            job_id: s.job_id.to_owned(),
            extranonce2: s.extranonce2.to_vec(),
            ntime: s.ntime,
            nonce: s.nonce,
            version: s.version,
            version_bits: s.version_bits,
            difficulty: s.difficulty,
            hash: *s.hash,
            block: s.block,
        });
    }
    fn share_result(&mut self, _d: u64, now: Timestamp, r: &ShareReply<'_>) {
        self.results.push((now.as_nanos(), r.seq, r.verdict));
    }
    record_session!();
}

/// The fields of a `mining.submit` line, read with serde_json (not the `sv1` reader).
#[derive(Debug)]
pub struct Submitted {
    pub id: u64,
    pub worker: String,
    pub job_id: String,
    pub extranonce2: Vec<u8>,
    pub ntime: u32,
    pub nonce: u32,
    pub version_bits: Option<u32>,
}

pub fn parse_submit(line: &str) -> Submitted {
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
    assert_eq!(v["method"], "mining.submit", "{line}");
    let p = v["params"].as_array().expect("params");
    let s = |i: usize| p[i].as_str().unwrap_or_else(|| panic!("param {i}: {line}"));
    let u = |i: usize| u32::from_str_radix(s(i), 16).expect("8 hex digits");
    assert!(p.len() == 5 || p.len() == 6, "{line}");
    Submitted {
        id: v["id"].as_u64().expect("a numeric id"),
        worker: s(0).to_owned(),
        job_id: s(1).to_owned(),
        extranonce2: hex::decode(s(2)).expect("hex extranonce2"),
        ntime: u(3),
        nonce: u(4),
        version_bits: (p.len() == 6).then(|| u(5)),
    }
}

/// The instant `ns` nanoseconds after the devices' clock starts.
pub fn at(ns: u64) -> fleet::Timestamp {
    fleet::Timestamp::from_nanos(ns)
}

/// What a proof run counts, whichever protocol: the hashes done and the shares they should give,
/// the shares found, and those the pool checked.
#[derive(Default)]
pub struct Proof {
    pub hashes: u64,
    pub found: u64,
    pub blocks_found: u64,
    /// Shares expected from the hashes done, and the variance of that count.
    pub expected: f64,
    pub variance: f64,
    pub checked: usize,
    pub blocks_checked: u64,
    pub versions: HashSet<u32>,
}

impl Proof {
    /// Counts a hash slice in which each hash was a share with probability `p`.
    pub fn add(&mut self, out: fleet::HashOutcome, p: f64) {
        self.hashes += out.hashes;
        self.found += out.shares as u64;
        self.blocks_found += out.blocks as u64;
        self.expected += p * out.hashes as f64;
        self.variance += p * (1.0 - p) * out.hashes as f64;
    }

    /// Every share found was checked (and `sent` were reported sent), and as many were found as
    /// the hashes should give.
    pub fn finish(&self, sent: usize) {
        assert_eq!(self.checked as u64, self.found);
        assert_eq!(sent, self.checked);
        assert_eq!(self.blocks_checked, self.blocks_found);
        let sd = self.variance.sqrt();
        assert!(
            (self.found as f64 - self.expected).abs() < 5.0 * sd + 5.0,
            "{} shares from {} hashes, {:.0} expected",
            self.found,
            self.hashes,
            self.expected
        );
    }

    /// What a profile's shares show of their versions: an ASIC's and a Bitaxe's rolled (and the
    /// ASIC's run found blocks), a CPU miner's are its jobs' own (`job_versions`).
    pub fn assert_versions(&self, profile: Profile, job_versions: HashSet<u32>) {
        println!(
            "{profile:?}: {} shares checked from {} hashes, {} blocks, {} versions",
            self.checked,
            self.hashes,
            self.blocks_checked,
            self.versions.len()
        );
        match profile {
            Profile::Asic | Profile::Bitaxe => {
                let n = self.versions.len();
                assert!(n > 50, "{profile:?}: {n} versions");
                if profile == Profile::Asic {
                    assert!(self.blocks_checked > 0);
                }
            }
            // One version per job, never rolled.
            Profile::Cpu => assert!(self.versions.is_subset(&job_versions)),
        }
    }
}

/// Hashes `total` nonces in slices of at most `slice`: `step` hashes one slice of the size it is
/// given (and does what follows it) and returns the hashes it did, at least one.
pub fn in_slices(total: u64, slice: u64, mut step: impl FnMut(u64) -> u64) {
    let mut done = 0;
    while done < total {
        let n = step(slice.min(total - done));
        assert!(n > 0);
        done += n;
    }
}

/// An event file in a fresh temporary folder (removed when the folder is dropped), its sink, and
/// the counters a `fleet::stats::Tally` updates next to it.
pub fn event_file() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    events::EventSink,
    fleet::stats::LiveStats,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.ev");
    let sink = events::EventSink::create(&path, "fleet", "").unwrap();
    (dir, path, sink, fleet::stats::LiveStats::default())
}

/// How many events of `log` are of the kind `f` picks.
pub fn count_events(log: &events::EventLog, f: impl Fn(&events::EventKind) -> bool) -> usize {
    log.events.iter().filter(|e| f(&e.kind)).count()
}

/// The log holds a `ShareResult`, accepted as the device received it, for each share the run
/// counted as accepted.
pub fn assert_accepted_as_received(log: &events::EventLog, accepted: u64) {
    use events::{EventKind, Perspective, Verdict};
    assert_eq!(
        count_events(log, |k| matches!(k, EventKind::ShareResult(r)
            if r.verdict == Verdict::Accepted && r.perspective == Perspective::Received))
            as u64,
        accepted
    );
}

/// The most of `times` (sorted here) that any `window`-long interval holds.
pub fn busiest_window(times: &mut [u64], window: u64) -> usize {
    times.sort_unstable();
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= window {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

/// Waits until `done` holds, looking every 10 ms.
pub async fn until(done: impl Fn() -> bool) {
    while !done() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// As many shares were sent as the run's hashes should give, one per `hashes_per_share`.
pub fn assert_sent_as_expected(report: &fleet::FleetReport, hashes_per_share: f64) {
    let s = &report.shares;
    let expected = report.hashes as f64 / hashes_per_share;
    assert!(
        (s.sent as f64 - expected).abs() < 5.0 * expected.sqrt() + 5.0,
        "{} sent for {expected:.0} expected",
        s.sent
    );
}
