//! Reading the Stratum V2 messages of a connection whose Noise the tap terminates.
//!
//! The SV2 relay ([`crate::sv2_relay`]) decrypts every frame, re-encrypts it unchanged for the
//! other leg and, when the re-encrypted bytes leave the tap, hands the frame here. This decodes
//! it and keeps what the lab needs of the session per channel (its target, its group, its prev
//! hash, its recent jobs and the shares awaiting a verdict), and produces the events of what
//! crossed the link as it left the tap, as [`crate::sv1_watch`] does for SV1:
//!
//! - `NewMiningJob` / `NewExtendedMiningJob` leaving downstream: [`JobSent`];
//! - `SetNewPrevHash` leaving downstream: [`JobActivated`];
//! - `SetTarget` leaving downstream: [`TargetChanged`];
//! - `SubmitShares.Standard` / `.Extended` leaving upstream: [`ShareSent`];
//! - `SubmitShares.Success` / `.Error` leaving downstream: one [`ShareResult`] per share.
//!
//! The relay never depends on what happens here: frames of other extensions, messages that do
//! not decode and messages for channels the tap did not see open are counted and skipped.

use std::collections::{BTreeMap, HashMap, VecDeque};

use events::{
    Direction, EventKind, Fingerprint, JobActivated, JobId, JobSent, Perspective, Reason,
    ShareResult, ShareSent, TargetChanged, Verdict,
};
use primitives::{Difficulty, Hash256, Target};
use sv2::messages::mining::{
    SetNewPrevHash, SubmitSharesError, SubmitSharesExtended, SubmitSharesStandard,
    SubmitSharesSuccess,
};
use sv2::messages::Mining;
use sv2::{Frame, Message};

/// Channels tracked per connection; a connection opening more is not followed past this.
const MAX_CHANNELS: usize = 4096;
/// Jobs remembered per channel, for the fingerprint once their prev hash comes.
const RECENT_JOBS: usize = 8;
/// Shares awaiting a verdict per channel; beyond this the oldest is forgotten (a pool that
/// never answers must not grow the tap).
const PENDING_SHARES: usize = 1024;
/// Distinct worker names (extension 0x0002) kept, per connection and in all; shares naming
/// others are counted in `worker_submits` only.
pub const MAX_WORKERS: usize = 1024;

/// Shares per worker named (extension 0x0002's `user_identity`), for at most [`MAX_WORKERS`]
/// names: a peer inventing names must not grow the tap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerShares(BTreeMap<String, u64>);

impl WorkerShares {
    /// Counts `n` shares of `name`; a new name past the bound is left out.
    pub fn add(&mut self, name: &str, n: u64) {
        if let Some(m) = self.0.get_mut(name) {
            *m += n;
        } else if self.0.len() < MAX_WORKERS {
            self.0.insert(name.to_owned(), n);
        }
    }

    /// Adds another tally's counts.
    pub fn merge(&mut self, o: &WorkerShares) {
        for (name, n) in &o.0 {
            self.add(name, *n);
        }
    }

    /// Workers named.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no share named a worker.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The workers and their shares, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }
}

/// What one direction of a connection carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sv2Counts {
    /// Frames read.
    pub frames: u64,
    /// Jobs: `NewMiningJob` and `NewExtendedMiningJob`.
    pub jobs: u64,
    /// `SetNewPrevHash` messages.
    pub prev_hashes: u64,
    /// `SetTarget` messages.
    pub targets: u64,
    /// Shares: `SubmitSharesStandard` and `SubmitSharesExtended`.
    pub submits: u64,
    /// Of the shares, those naming their worker (extension 0x0002's `user_identity`).
    pub worker_submits: u64,
    /// Extensions negotiation messages (extension 0x0001).
    pub negotiation: u64,
    /// Shares acknowledged by `SubmitShares.Success`.
    pub accepted: u64,
    /// `SubmitShares.Error`s.
    pub rejected: u64,
    /// Frames of an extension other than 0 (relayed, not read).
    pub other_extension: u64,
    /// Frames whose message did not decode (relayed, not read).
    pub unparsed: u64,
}

impl Sv2Counts {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &Sv2Counts) {
        self.frames += o.frames;
        self.jobs += o.jobs;
        self.prev_hashes += o.prev_hashes;
        self.targets += o.targets;
        self.submits += o.submits;
        self.worker_submits += o.worker_submits;
        self.negotiation += o.negotiation;
        self.accepted += o.accepted;
        self.rejected += o.rejected;
        self.other_extension += o.other_extension;
        self.unparsed += o.unparsed;
    }
}

#[derive(Clone, Debug)]
struct RecentJob {
    job_id: u32,
    /// An extended job's merkle path (what the fingerprint is made of); `None` for standard
    /// jobs, which carry only a merkle root.
    merkle_path: Option<Vec<Hash256>>,
}

#[derive(Clone, Copy, Debug)]
struct PendingShare {
    seq: u32,
    job_id: u32,
    nonce: u32,
    difficulty: f64,
}

#[derive(Debug)]
struct Channel {
    target: Target,
    /// The group channel it belongs to (0: none).
    group: u32,
    prev_hash: Option<Hash256>,
    jobs: VecDeque<RecentJob>,
    pending: VecDeque<PendingShare>,
}

impl Channel {
    fn new(target: Target, group: u32) -> Self {
        Channel {
            target,
            group,
            prev_hash: None,
            jobs: VecDeque::new(),
            pending: VecDeque::new(),
        }
    }

    fn remember(&mut self, job: RecentJob) {
        if self.jobs.len() == RECENT_JOBS {
            self.jobs.pop_front();
        }
        self.jobs.push_back(job);
    }
}

/// The reader of one SV2 connection.
#[derive(Debug, Default)]
pub struct Sv2Watch {
    counts: [Sv2Counts; 2],
    /// Shares per worker named (extension 0x0002's `user_identity`).
    workers: WorkerShares,
    /// Standard and extended channels by id, and group channels (whose target is their
    /// members').
    channels: HashMap<u32, Channel>,
}

fn index(dir: Direction) -> usize {
    match dir {
        Direction::Up => 0,
        Direction::Down => 1,
    }
}

/// `a` is at or before `b` in sequence-number order (they wrap).
fn seq_le(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) < 1 << 31
}

impl Sv2Watch {
    /// A watch with no channels yet.
    pub fn new() -> Self {
        Sv2Watch::default()
    }

    /// The SV2 frames and messages seen in direction `dir`.
    pub fn counts(&self, dir: Direction) -> &Sv2Counts {
        &self.counts[index(dir)]
    }

    /// The shares each named worker sent up (extension 0x0002).
    pub fn workers(&self) -> &WorkerShares {
        &self.workers
    }

    /// Reads `frame` leaving the tap in direction `dir` on connection `conn`, appending the
    /// events it makes to `out`. The payload may be changed (messages decode in place): pass a
    /// frame that has already been re-encrypted.
    pub fn observe(
        &mut self,
        conn: u64,
        dir: Direction,
        frame: &mut Frame,
        out: &mut Vec<EventKind>,
    ) {
        let counts = &mut self.counts[index(dir)];
        counts.frames += 1;
        let msg_type = frame.msg_type();
        let message = match Message::decode_frame(frame.extension(), msg_type, &mut frame.payload) {
            Ok(Some(Message::Extensions(m))) => {
                counts.negotiation += 1;
                tracing::debug!(conn, ?dir, message = ?m, "sv2: extensions negotiation");
                return;
            }
            Ok(Some(m)) => m,
            Ok(None) => {
                counts.other_extension += 1;
                return;
            }
            Err(e) => {
                counts.unparsed += 1;
                tracing::debug!(conn, ?dir, error = %e, "sv2 frame does not decode");
                return;
            }
        };
        let Message::Mining(m) = message else {
            return;
        };
        if let (
            Direction::Up,
            Mining::SubmitSharesExtended(SubmitSharesExtended {
                user_identity: Some(worker),
                ..
            }),
        ) = (dir, &m)
        {
            self.counts[0].worker_submits += 1;
            tracing::trace!(conn, worker, "sv2: share names its worker");
            self.workers.add(worker, 1);
        }
        match (dir, m) {
            (Direction::Down, Mining::OpenStandardMiningChannelSuccess(s)) => {
                self.open(s.channel_id, s.target, s.group_channel_id)
            }
            (Direction::Down, Mining::OpenExtendedMiningChannelSuccess(s)) => {
                self.open(s.channel_id, s.target, s.group_channel_id)
            }
            (Direction::Down, Mining::SetGroupChannel(g)) => {
                for id in g.channel_ids {
                    if let Some(c) = self.channels.get_mut(&id) {
                        c.group = g.group_channel_id;
                    }
                }
            }
            (_, Mining::CloseChannel(c)) => {
                self.channels.remove(&c.channel_id);
            }
            (Direction::Down, Mining::NewMiningJob(j)) => {
                self.on_job(conn, j.channel_id, j.job_id, j.min_ntime, None, out)
            }
            (Direction::Down, Mining::NewExtendedMiningJob(j)) => {
                let path = j.merkle_path.iter().map(|h| Hash256(*h)).collect();
                self.on_job(conn, j.channel_id, j.job_id, j.min_ntime, Some(path), out)
            }
            (Direction::Down, Mining::SetNewPrevHash(p)) => self.on_prev_hash(conn, p, out),
            (Direction::Down, Mining::SetTarget(t)) => {
                self.counts[1].targets += 1;
                if let Some(c) = self.channels.get_mut(&t.channel_id) {
                    c.target = t.maximum_target;
                }
                out.push(
                    TargetChanged {
                        conn,
                        channel: Some(t.channel_id),
                        target: t.maximum_target,
                    }
                    .into(),
                );
            }
            (
                Direction::Up,
                Mining::SubmitSharesStandard(SubmitSharesStandard {
                    channel_id,
                    sequence_number,
                    job_id,
                    nonce,
                    ntime,
                    version,
                })
                | Mining::SubmitSharesExtended(SubmitSharesExtended {
                    channel_id,
                    sequence_number,
                    job_id,
                    nonce,
                    ntime,
                    version,
                    ..
                }),
            ) => self.on_submit(
                conn,
                channel_id,
                sequence_number,
                job_id,
                nonce,
                ntime,
                version,
                out,
            ),
            (Direction::Down, Mining::SubmitSharesSuccess(s)) => self.on_success(conn, s, out),
            (Direction::Down, Mining::SubmitSharesError(e)) => self.on_error(conn, e, out),
            _ => {}
        }
    }

    fn open(&mut self, channel_id: u32, target: Target, group: u32) {
        if self.channels.len() >= MAX_CHANNELS && !self.channels.contains_key(&channel_id) {
            return;
        }
        self.channels
            .insert(channel_id, Channel::new(target, group));
        // A group channel is known by its members: jobs sent to it carry their target.
        if group != 0 && self.channels.len() < MAX_CHANNELS {
            self.channels
                .entry(group)
                .or_insert_with(|| Channel::new(target, 0));
        }
    }

    /// The target jobs and shares on `channel_id` are held to (the loosest possible when the
    /// channel was not seen opening).
    fn target(&self, channel_id: u32) -> Target {
        self.channels
            .get(&channel_id)
            .map_or(Target::MAX, |c| c.target)
    }

    fn prev_hash(&self, channel_id: u32) -> Option<Hash256> {
        self.channels.get(&channel_id).and_then(|c| c.prev_hash)
    }

    /// A job leaving downstream on `channel_id`; `merkle_path` is an extended job's (a
    /// standard job carries only its merkle root: the template is not visible).
    fn on_job(
        &mut self,
        conn: u64,
        channel_id: u32,
        job_id: u32,
        min_ntime: Option<u32>,
        merkle_path: Option<Vec<Hash256>>,
        out: &mut Vec<EventKind>,
    ) {
        self.counts[1].jobs += 1;
        let future = min_ntime.is_none();
        let prev_hash = if future {
            None
        } else {
            self.prev_hash(channel_id)
        };
        let fingerprint: Option<Fingerprint> = prev_hash
            .zip(merkle_path.as_deref())
            .map(|(prev, path)| events::fingerprint(&prev, path));
        out.push(
            JobSent {
                conn,
                channel: Some(channel_id),
                job_id: JobId::from(job_id),
                template_id: None,
                fingerprint,
                prev_hash,
                target: self.target(channel_id),
                clean: future,
                future,
            }
            .into(),
        );
        if let Some(c) = self.channels.get_mut(&channel_id) {
            c.remember(RecentJob {
                job_id,
                merkle_path,
            });
        }
    }

    fn on_prev_hash(&mut self, conn: u64, p: SetNewPrevHash, out: &mut Vec<EventKind>) {
        self.counts[1].prev_hashes += 1;
        let prev = Hash256(p.prev_hash);
        let mut fingerprint = None;
        if let Some(c) = self.channels.get_mut(&p.channel_id) {
            c.prev_hash = Some(prev);
            fingerprint = c
                .jobs
                .iter()
                .rev()
                .find(|j| j.job_id == p.job_id)
                .and_then(|j| j.merkle_path.as_deref())
                .map(|path| events::fingerprint(&prev, path));
        }
        // A group's prev hash is its members' too.
        for c in self
            .channels
            .values_mut()
            .filter(|c| c.group == p.channel_id)
        {
            c.prev_hash = Some(prev);
        }
        out.push(
            JobActivated {
                conn,
                channel: Some(p.channel_id),
                job_id: JobId::from(p.job_id),
                prev_hash: prev,
                fingerprint,
            }
            .into(),
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn on_submit(
        &mut self,
        conn: u64,
        channel_id: u32,
        seq: u32,
        job_id: u32,
        nonce: u32,
        ntime: u32,
        version: u32,
        out: &mut Vec<EventKind>,
    ) {
        self.counts[0].submits += 1;
        let difficulty = Difficulty::from_target(self.target(channel_id)).as_f64();
        if let Some(c) = self.channels.get_mut(&channel_id) {
            if c.pending.len() == PENDING_SHARES {
                c.pending.pop_front();
            }
            c.pending.push_back(PendingShare {
                seq,
                job_id,
                nonce,
                difficulty,
            });
        }
        out.push(
            ShareSent {
                device: conn,
                channel: Some(channel_id),
                seq: u64::from(seq),
                job_id: JobId::from(job_id),
                nonce,
                ntime,
                version,
                difficulty,
                hash: None,
            }
            .into(),
        );
    }

    /// `SubmitShares.Success` acknowledges `new_submits_accepted_count` shares up to
    /// `last_sequence_number`: the latest that many of those awaiting at or before it (any
    /// earlier ones may still get an error of their own).
    fn on_success(&mut self, conn: u64, s: SubmitSharesSuccess, out: &mut Vec<EventKind>) {
        let Some(c) = self.channels.get_mut(&s.channel_id) else {
            return;
        };
        let covered = c
            .pending
            .iter()
            .take_while(|p| seq_le(p.seq, s.last_sequence_number))
            .count();
        let accepted = covered.min(s.new_submits_accepted_count as usize);
        self.counts[1].accepted += accepted as u64;
        for p in c.pending.drain(covered - accepted..covered) {
            out.push(result(conn, s.channel_id, &p, Verdict::Accepted));
        }
    }

    fn on_error(&mut self, conn: u64, e: SubmitSharesError, out: &mut Vec<EventKind>) {
        self.counts[1].rejected += 1;
        let Some(c) = self.channels.get_mut(&e.channel_id) else {
            return;
        };
        let Some(at) = c.pending.iter().position(|p| p.seq == e.sequence_number) else {
            return;
        };
        let Some(p) = c.pending.remove(at) else {
            return;
        };
        let verdict = Verdict::Rejected(Reason::from_sv2_code(&e.error_code));
        out.push(result(conn, e.channel_id, &p, verdict));
    }
}

fn result(conn: u64, channel_id: u32, p: &PendingShare, verdict: Verdict) -> EventKind {
    ShareResult {
        conn,
        channel: Some(channel_id),
        seq: u64::from(p.seq),
        job_id: JobId::from(p.job_id),
        nonce: p.nonce,
        difficulty: p.difficulty,
        verdict,
        // As the SV1 watch does: the verdict as it travels toward the device.
        perspective: Perspective::Received,
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sv2::messages::common::SetupConnectionSuccess;
    use sv2::messages::mining::{
        CloseChannel, NewExtendedMiningJob, NewMiningJob, OpenExtendedMiningChannelSuccess,
        OpenStandardMiningChannelSuccess, SetTarget, SubmitSharesExtended, SubmitSharesStandard,
    };
    use sv2::noise::Header;

    const CONN: u64 = 4;

    /// A frame as the relay hands it over: the message encoded under its own header.
    fn frame(m: impl Into<Message>) -> Frame {
        let m: Message = m.into();
        let mut payload = Vec::new();
        let msg_type = m.encode(&mut payload).unwrap();
        let ext = m.extension_type().to_le_bytes();
        let len = (payload.len() as u32).to_le_bytes();
        let header =
            Header::from_bytes(&[ext[0], ext[1], msg_type, len[0], len[1], len[2]]).unwrap();
        Frame { header, payload }
    }

    fn difficulty(d: f64) -> Target {
        Difficulty::new(d).unwrap().to_target()
    }

    fn observe(w: &mut Sv2Watch, dir: Direction, m: impl Into<Message>) -> Vec<EventKind> {
        let mut out = Vec::new();
        w.observe(CONN, dir, &mut frame(m), &mut out);
        out
    }

    fn standard_open(w: &mut Sv2Watch, channel_id: u32, d: f64) {
        let ev = observe(
            w,
            Direction::Down,
            OpenStandardMiningChannelSuccess {
                request_id: 1,
                channel_id,
                target: difficulty(d),
                extranonce_prefix: vec![0; 4],
                group_channel_id: 0,
            },
        );
        assert!(ev.is_empty());
    }

    fn submit(channel_id: u32, seq: u32, job_id: u32, nonce: u32) -> SubmitSharesStandard {
        SubmitSharesStandard {
            channel_id,
            sequence_number: seq,
            job_id,
            nonce,
            ntime: 0x6600_0000,
            version: 0x2000_0000,
        }
    }

    #[test]
    fn extensions_negotiation_and_shares_naming_their_worker_are_counted() {
        use sv2::messages::extensions::{RequestExtensions, RequestExtensionsSuccess};
        use sv2::messages::mining::{OpenExtendedMiningChannelSuccess, SubmitSharesExtended};
        let mut w = Sv2Watch::new();
        let request = RequestExtensions {
            request_id: 1,
            requested_extensions: vec![2],
        };
        assert!(observe(&mut w, Direction::Up, request).is_empty());
        let answer = RequestExtensionsSuccess {
            request_id: 1,
            supported_extensions: vec![2],
        };
        assert!(observe(&mut w, Direction::Down, answer).is_empty());
        let opened = OpenExtendedMiningChannelSuccess {
            request_id: 2,
            channel_id: 7,
            target: difficulty(1.0),
            extranonce_size: 4,
            extranonce_prefix: vec![0; 4],
            group_channel_id: 0,
        };
        observe(&mut w, Direction::Down, opened);
        for (seq, worker) in [(1, Some("farm.rig1")), (2, None), (3, Some("farm.rig1"))] {
            let share = SubmitSharesExtended {
                channel_id: 7,
                sequence_number: seq,
                job_id: 1,
                nonce: seq,
                ntime: 0x6600_0000,
                version: 0x2000_0000,
                extranonce: vec![0; 4],
                user_identity: worker.map(str::to_owned),
            };
            observe(&mut w, Direction::Up, share);
        }
        let up = w.counts(Direction::Up);
        assert_eq!(
            (
                up.submits,
                up.worker_submits,
                up.negotiation,
                up.other_extension,
                up.unparsed
            ),
            (3, 2, 1, 0, 0)
        );
        assert_eq!(w.counts(Direction::Down).negotiation, 1);
        // The reader shows whose shares they were.
        let workers: Vec<(&str, u64)> = w.workers().iter().collect();
        assert_eq!(workers, vec![("farm.rig1", 2)]);
    }

    #[test]
    fn a_standard_channel_session_is_reported() {
        let mut w = Sv2Watch::new();
        standard_open(&mut w, 7, 4.0);
        // A future job, then its prev hash.
        let ev = observe(
            &mut w,
            Direction::Down,
            NewMiningJob {
                channel_id: 7,
                job_id: 1,
                min_ntime: None,
                version: 0x2000_0000,
                merkle_root: [3; 32],
            },
        );
        let [EventKind::JobSent(job)] = ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (job.conn, job.channel, job.job_id),
            (CONN, Some(7), JobId::Num(1))
        );
        assert!(job.future && job.clean);
        assert_eq!((job.fingerprint, job.prev_hash), (None, None));
        assert!(
            (job.difficulty() - 4.0).abs() < 1e-6,
            "{}",
            job.difficulty()
        );
        let ev = observe(
            &mut w,
            Direction::Down,
            SetNewPrevHash {
                channel_id: 7,
                job_id: 1,
                prev_hash: [9; 32],
                min_ntime: 0x6600_0000,
                nbits: 0x207f_ffff,
            },
        );
        let [EventKind::JobActivated(a)] = ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!((a.channel, a.job_id), (Some(7), JobId::Num(1)));
        assert_eq!(a.prev_hash, Hash256([9; 32]));
        assert_eq!(a.fingerprint, None, "a standard job shows no template");
        // A job on the same tip is workable at once and knows its prev hash.
        let ev = observe(
            &mut w,
            Direction::Down,
            NewMiningJob {
                channel_id: 7,
                job_id: 2,
                min_ntime: Some(0x6600_0001),
                version: 0x2000_0000,
                merkle_root: [4; 32],
            },
        );
        let [EventKind::JobSent(job)] = ev[..] else {
            panic!("{ev:?}")
        };
        assert!(!job.future && !job.clean);
        assert_eq!(job.prev_hash, Some(Hash256([9; 32])));

        // The target changes, then three shares go up.
        let ev = observe(
            &mut w,
            Direction::Down,
            SetTarget {
                channel_id: 7,
                maximum_target: difficulty(8.0),
            },
        );
        let [EventKind::TargetChanged(t)] = ev[..] else {
            panic!("{ev:?}")
        };
        assert!((t.difficulty() - 8.0).abs() < 1e-6);
        for seq in 10..13 {
            let ev = observe(&mut w, Direction::Up, submit(7, seq, 2, 100 + seq));
            let [EventKind::ShareSent(s)] = ev[..] else {
                panic!("{ev:?}")
            };
            assert_eq!(
                (s.device, s.channel, s.seq),
                (CONN, Some(7), u64::from(seq))
            );
            assert_eq!(
                (s.job_id, s.nonce, s.version),
                (JobId::Num(2), 100 + seq, 0x2000_0000)
            );
            assert!((s.difficulty - 8.0).abs() < 1e-6);
        }
        // 11 is refused, then one success covers the other two.
        let ev = observe(
            &mut w,
            Direction::Down,
            SubmitSharesError {
                channel_id: 7,
                sequence_number: 11,
                error_code: "stale-share".into(),
            },
        );
        let [EventKind::ShareResult(r)] = ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!((r.seq, r.nonce), (11, 111));
        assert_eq!(r.verdict, Verdict::Rejected(Reason::Stale));
        assert_eq!(r.perspective, Perspective::Received);
        let ev = observe(
            &mut w,
            Direction::Down,
            SubmitSharesSuccess {
                channel_id: 7,
                last_sequence_number: 12,
                new_submits_accepted_count: 2,
                new_shares_sum: 16,
            },
        );
        let got: Vec<(u64, Verdict)> = ev
            .iter()
            .map(|e| match e {
                EventKind::ShareResult(r) => (r.seq, r.verdict),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(got, [(10, Verdict::Accepted), (12, Verdict::Accepted)]);
        let down = w.counts(Direction::Down);
        assert_eq!(
            (
                down.jobs,
                down.prev_hashes,
                down.targets,
                down.accepted,
                down.rejected
            ),
            (2, 1, 1, 2, 1)
        );
        assert_eq!(w.counts(Direction::Up).submits, 3);
        assert_eq!(w.counts(Direction::Down).frames, 7);
    }

    #[test]
    fn extended_jobs_carry_the_fingerprint_the_pool_computes() {
        let mut w = Sv2Watch::new();
        observe(
            &mut w,
            Direction::Down,
            OpenExtendedMiningChannelSuccess {
                request_id: 1,
                channel_id: 3,
                target: difficulty(2.0),
                extranonce_size: 8,
                extranonce_prefix: vec![1; 4],
                group_channel_id: 0,
            },
        );
        let path = vec![[5; 32], [6; 32]];
        let job = |job_id, min_ntime| NewExtendedMiningJob {
            channel_id: 3,
            job_id,
            min_ntime,
            version: 0x2000_0000,
            version_rolling_allowed: true,
            merkle_path: path.clone(),
            coinbase_tx_prefix: vec![1, 2],
            coinbase_tx_suffix: vec![3, 4],
        };
        let ev = observe(&mut w, Direction::Down, job(1, None));
        let [EventKind::JobSent(j)] = ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!(
            j.fingerprint, None,
            "future: the prev hash is not known yet"
        );
        let prev = Hash256([8; 32]);
        let hashes: Vec<Hash256> = path.iter().map(|h| Hash256(*h)).collect();
        let expected = events::fingerprint(&prev, &hashes);
        let ev = observe(
            &mut w,
            Direction::Down,
            SetNewPrevHash {
                channel_id: 3,
                job_id: 1,
                prev_hash: prev.0,
                min_ntime: 1,
                nbits: 0x207f_ffff,
            },
        );
        let [EventKind::JobActivated(a)] = ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!(a.fingerprint, Some(expected));
        let ev = observe(&mut w, Direction::Down, job(2, Some(5)));
        let [EventKind::JobSent(j)] = ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!((j.fingerprint, j.prev_hash), (Some(expected), Some(prev)));
        let ev = observe(
            &mut w,
            Direction::Up,
            SubmitSharesExtended {
                channel_id: 3,
                sequence_number: 1,
                job_id: 2,
                nonce: 9,
                ntime: 1,
                version: 0x2000_4000,
                extranonce: vec![0; 8],
                user_identity: None,
            },
        );
        let [EventKind::ShareSent(s)] = ev[..] else {
            panic!("{ev:?}")
        };
        assert!((s.difficulty - 2.0).abs() < 1e-6);
        assert_eq!(s.version, 0x2000_4000);
    }

    #[test]
    fn what_is_not_a_mining_event_is_skipped_and_counted() {
        let mut w = Sv2Watch::new();
        // A common message: no event.
        let ev = observe(
            &mut w,
            Direction::Down,
            SetupConnectionSuccess {
                used_version: 2,
                flags: 0,
            },
        );
        assert!(ev.is_empty());
        // A submit going the wrong way is not a share sent.
        assert!(observe(&mut w, Direction::Down, submit(1, 1, 1, 1)).is_empty());
        // Another extension's frame (0x4001, an experimental one), and a payload that does not
        // decode.
        let mut f = frame(submit(1, 1, 1, 1));
        f.header = Header::from_bytes(&[0x01, 0xc0, f.msg_type(), 1, 0, 0]).unwrap();
        let mut out = Vec::new();
        w.observe(CONN, Direction::Up, &mut f, &mut out);
        let mut f = frame(submit(1, 1, 1, 1));
        f.payload.truncate(5);
        w.observe(CONN, Direction::Up, &mut f, &mut out);
        let mut f = frame(submit(1, 1, 1, 1));
        f.header = Header::from_bytes(&[0, 0, 0xee, 0, 0, 0]).unwrap();
        w.observe(CONN, Direction::Up, &mut f, &mut out);
        assert!(out.is_empty(), "{out:?}");
        let up = w.counts(Direction::Up);
        assert_eq!((up.frames, up.other_extension, up.unparsed), (3, 1, 2));
        // A verdict for a channel never seen open, or for a share never seen, reports nothing.
        let success = SubmitSharesSuccess {
            channel_id: 1,
            last_sequence_number: 1,
            new_submits_accepted_count: 1,
            new_shares_sum: 1,
        };
        assert!(observe(&mut w, Direction::Down, success).is_empty());
        standard_open(&mut w, 1, 1.0);
        assert!(observe(&mut w, Direction::Down, success).is_empty());
        observe(&mut w, Direction::Up, submit(1, 2, 1, 1));
        observe(
            &mut w,
            Direction::Down,
            CloseChannel {
                channel_id: 1,
                reason_code: String::new(),
            },
        );
        let late = SubmitSharesSuccess {
            last_sequence_number: 2,
            ..success
        };
        assert!(observe(&mut w, Direction::Down, late).is_empty());
    }

    #[test]
    fn pending_shares_are_bounded_and_sequence_numbers_wrap() {
        let mut w = Sv2Watch::new();
        standard_open(&mut w, 1, 1.0);
        let first = u32::MAX - 5;
        for i in 0..(PENDING_SHARES as u32 + 10) {
            observe(
                &mut w,
                Direction::Up,
                submit(1, first.wrapping_add(i), 1, i),
            );
        }
        assert_eq!(w.channels[&1].pending.len(), PENDING_SHARES);
        // Everything up to a sequence number past the wrap: the forgotten ten are not reported.
        let ev = observe(
            &mut w,
            Direction::Down,
            SubmitSharesSuccess {
                channel_id: 1,
                last_sequence_number: first.wrapping_add(PENDING_SHARES as u32 + 9),
                new_submits_accepted_count: PENDING_SHARES as u32 + 10,
                new_shares_sum: 0,
            },
        );
        assert_eq!(ev.len(), PENDING_SHARES);
        assert!(seq_le(u32::MAX, 0) && !seq_le(0, u32::MAX));
    }
}
