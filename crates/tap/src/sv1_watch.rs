//! Reading the Stratum V1 lines a connection carries, without changing them.
//!
//! The relay hands over a copy of each run of bytes as it leaves the tap; this splits them into
//! lines, reads the ones that matter to the lab and counts them per direction: jobs
//! (`mining.notify`), submits (`mining.submit`) and the replies matched to those submits by
//! id (true, false, or an error by code). It produces the events of what crossed the link as
//! it left the tap: [`JobSent`] for a job leaving downstream, [`ShareSent`] for a submit leaving
//! upstream, [`ShareResult`] (received) for a verdict leaving downstream.
//!
//! The relay never depends on what happens here: a line longer than the limit stops the
//! reading of that connection for good (its bytes are still relayed), and lines that are not
//! JSON-RPC are counted and skipped.

use std::collections::VecDeque;
use std::fmt;
use std::ops::ControlFlow;
use std::str::FromStr;

use events::{
    Direction, EventKind, JobId, JobSent, Perspective, Reason, ShareResult, ShareSent, Verdict,
};
use primitives::Difficulty;
use sv1::json::{error_code, Value};
use sv1::{LineBuffer, Method, Notify, Submit};

/// What the tap reads of the bytes it relays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Stratum V1 when the first bytes look like a JSON object, nothing otherwise (SV2 is
    /// binary and encrypted).
    #[default]
    Auto,
    /// Read as Stratum V1 from the first byte.
    Sv1,
    /// Relay and count bytes only.
    Raw,
}

impl FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Protocol::Auto),
            "sv1" => Ok(Protocol::Sv1),
            "raw" => Ok(Protocol::Raw),
            _ => Err(format!("protocol {s:?}: expected auto, sv1 or raw")),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Auto => "auto",
            Protocol::Sv1 => "sv1",
            Protocol::Raw => "raw",
        })
    }
}

/// Longest line read by default: a notify with a large coinbase and a full merkle branch is a
/// few kilobytes.
pub const DEFAULT_MAX_LINE: usize = 64 * 1024;
/// Submits awaiting their reply, per connection; beyond this the oldest is forgotten (a pool
/// that never answers must not grow the tap).
const PENDING_SUBMITS: usize = 1024;
/// Jobs remembered per connection, for the difficulty and version of the shares on them.
const RECENT_JOBS: usize = 16;
/// The version-rolling mask miners and pools use when none was negotiated (BIP320).
const BIP320_MASK: u32 = 0x1fff_e000;

/// What one direction of a connection carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sv1Counts {
    /// Lines read.
    pub lines: u64,
    /// `mining.notify` lines.
    pub jobs: u64,
    /// `mining.submit` requests.
    pub submits: u64,
    /// Replies to submits: `"result": true`.
    pub accepted: u64,
    /// Replies to submits: `"result": false` (or null) without an error.
    pub rejected: u64,
    /// Replies to submits with an error, by code: 20 to 25 at indices 0 to 5, others at 6.
    pub errors: [u64; 7],
    /// Lines that were not JSON-RPC, or a known method with malformed parameters.
    pub unparsed: u64,
}

impl Sv1Counts {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &Sv1Counts) {
        self.lines += o.lines;
        self.jobs += o.jobs;
        self.submits += o.submits;
        self.accepted += o.accepted;
        self.rejected += o.rejected;
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
        self.unparsed += o.unparsed;
    }

    /// Replies to submits with an error, whatever the code.
    pub fn errors_total(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// Replies matched to submits.
    pub fn results(&self) -> u64 {
        self.accepted + self.rejected + self.errors_total()
    }

    /// The error code counted at `index` of [`Sv1Counts::errors`] (`None`: any other code).
    pub fn error_code(index: usize) -> Option<i64> {
        (index < 6).then_some(20 + index as i64)
    }

    fn count_error(&mut self, code: Option<i64>) {
        let i = match code {
            Some(c @ 20..=25) => (c - 20) as usize,
            _ => 6,
        };
        self.errors[i] += 1;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Waiting for the first bytes to decide (`--protocol auto`).
    Sniffing,
    Reading,
    Off,
}

#[derive(Clone, Copy, Debug)]
struct PendingShare {
    seq: u64,
    job_id: JobId,
    nonce: u32,
    difficulty: f64,
}

#[derive(Clone, Copy, Debug)]
struct Job {
    job_id: JobId,
    difficulty: f64,
    version: u32,
}

/// The reader of one connection.
pub struct Sv1Watch {
    state: State,
    max_line: usize,
    overflowed: bool,
    /// Per direction (up, down); made once the connection is known to speak SV1, holding a
    /// buffer only while a line spans reads.
    framing: [Option<LineBuffer>; 2],
    session: Session,
}

/// What is known about the connection's SV1 session, apart from the line framing.
struct Session {
    counts: [Sv1Counts; 2],
    /// Submits sent each way, awaiting a reply the other way.
    pending: [VecDeque<PendingShare>; 2],
    jobs: VecDeque<Job>,
    /// SV1 starts at difficulty 1 until the pool says otherwise.
    difficulty: f64,
    version_mask: Option<u32>,
}

fn index(dir: Direction) -> usize {
    match dir {
        Direction::Up => 0,
        Direction::Down => 1,
    }
}

fn opposite(dir: Direction) -> Direction {
    match dir {
        Direction::Up => Direction::Down,
        Direction::Down => Direction::Up,
    }
}

impl Sv1Watch {
    /// A watch that reads per `protocol`, stopping on a line longer than `max_line` bytes.
    pub fn new(protocol: Protocol, max_line: usize) -> Self {
        let mut w = Sv1Watch {
            state: State::Sniffing,
            max_line,
            overflowed: false,
            framing: [None, None],
            session: Session {
                counts: Default::default(),
                pending: Default::default(),
                jobs: VecDeque::new(),
                difficulty: 1.0,
                version_mask: None,
            },
        };
        match protocol {
            Protocol::Auto => {}
            Protocol::Sv1 => w.start_reading(),
            Protocol::Raw => w.state = State::Off,
        }
        w
    }

    /// Whether lines are being read (decided after the first bytes under `auto`).
    pub fn is_reading(&self) -> bool {
        self.state == State::Reading
    }

    /// A line exceeded the limit, so reading stopped.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The SV1 messages seen in direction `dir`.
    pub fn counts(&self, dir: Direction) -> &Sv1Counts {
        &self.session.counts[index(dir)]
    }

    /// Reads `bytes` leaving the tap in direction `dir` on connection `conn`, appending the
    /// events they make to `out`.
    pub fn observe(&mut self, conn: u64, dir: Direction, bytes: &[u8], out: &mut Vec<EventKind>) {
        if self.state == State::Sniffing {
            match sniff(bytes) {
                Some(true) => self.start_reading(),
                Some(false) => self.state = State::Off,
                None => return,
            }
        }
        if self.state != State::Reading {
            return;
        }
        let Sv1Watch {
            framing, session, ..
        } = &mut *self;
        let Some(lines) = framing[index(dir)].as_mut() else {
            return;
        };
        let framed = lines.split(bytes, |line| {
            session.on_line(conn, dir, line, out);
            ControlFlow::<()>::Continue(())
        });
        if framed.is_err() {
            tracing::debug!(
                conn,
                ?dir,
                max_line = self.max_line,
                "line too long: no longer reading this connection"
            );
            self.overflowed = true;
            self.state = State::Off;
            self.framing = [None, None];
        }
    }

    fn start_reading(&mut self) {
        self.state = State::Reading;
        self.framing = [
            Some(LineBuffer::new(self.max_line)),
            Some(LineBuffer::new(self.max_line)),
        ];
    }
}

/// `Some(true)` if the first bytes look like a JSON object, `Some(false)` if not, `None` if
/// there is nothing but whitespace yet.
fn sniff(bytes: &[u8]) -> Option<bool> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    let head = &bytes[start..bytes.len().min(start + 32)];
    // SV2's first bytes are random (a Noise key): a `{` alone would mislead one time in 256.
    Some(
        head[0] == b'{'
            && head
                .iter()
                .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace()),
    )
}

impl Session {
    fn on_line(&mut self, conn: u64, dir: Direction, line: &[u8], out: &mut Vec<EventKind>) {
        self.counts[index(dir)].lines += 1;
        // Submits flow up thousands of times a second: the fast reader first.
        if dir == Direction::Up {
            if let Some(s) = sv1::parse_submit(line) {
                self.on_submit(
                    conn,
                    dir,
                    s.id,
                    s.job_id,
                    s.nonce,
                    s.ntime,
                    s.version_bits,
                    out,
                );
                return;
            }
        }
        let Ok((env, method)) = sv1::parse_line(line) else {
            self.counts[index(dir)].unparsed += 1;
            return;
        };
        match method {
            Some(Method::Notify) => match Notify::parse(&env) {
                Ok(n) => self.on_notify(conn, dir, &n, out),
                Err(_) => self.counts[index(dir)].unparsed += 1,
            },
            Some(Method::Submit) => match Submit::parse(&env) {
                Ok(s) => self.on_submit(
                    conn,
                    dir,
                    env.id().unwrap_or("null"),
                    s.job_id,
                    s.nonce,
                    s.ntime,
                    s.version_bits,
                    out,
                ),
                Err(_) => self.counts[index(dir)].unparsed += 1,
            },
            Some(Method::SetDifficulty) => {
                if let Ok(d) = sv1::message::suggested_difficulty(&env) {
                    self.difficulty = d;
                }
            }
            Some(Method::SetVersionMask) => {
                if let Some(mask) = env.params.get(0).and_then(|v| v.as_str()) {
                    if let Ok(m) = u32::from_str_radix(mask, 16) {
                        self.version_mask = Some(m);
                    }
                }
            }
            Some(_) => {}
            None => self.on_reply(conn, dir, &env, out),
        }
    }

    fn on_notify(&mut self, conn: u64, dir: Direction, n: &Notify<'_>, out: &mut Vec<EventKind>) {
        self.counts[index(dir)].jobs += 1;
        let job_id = JobId::text(n.job_id);
        if self.jobs.len() == RECENT_JOBS {
            self.jobs.pop_front();
        }
        self.jobs.push_back(Job {
            job_id,
            difficulty: self.difficulty,
            version: n.version,
        });
        if dir == Direction::Down {
            out.push(
                JobSent {
                    conn,
                    channel: None,
                    job_id,
                    template_id: None,
                    fingerprint: Some(events::fingerprint(&n.prev_hash, &n.merkle_branch)),
                    prev_hash: Some(n.prev_hash),
                    target: Difficulty::saturating(self.difficulty).to_target(),
                    clean: n.clean_jobs,
                    future: false,
                }
                .into(),
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_submit(
        &mut self,
        conn: u64,
        dir: Direction,
        id: &str,
        job_id: &str,
        nonce: u32,
        ntime: u32,
        version_bits: Option<u32>,
        out: &mut Vec<EventKind>,
    ) {
        self.counts[index(dir)].submits += 1;
        let seq = seq_of(id);
        let job_id = JobId::text(job_id);
        let job = self.jobs.iter().rev().find(|j| j.job_id == job_id).copied();
        let difficulty = job.map_or(self.difficulty, |j| j.difficulty);
        let job_version = job.map_or(0, |j| j.version);
        let version = match version_bits {
            Some(bits) => {
                let mask = self.version_mask.unwrap_or(BIP320_MASK);
                (job_version & !mask) | (bits & mask)
            }
            None => job_version,
        };
        let pending = &mut self.pending[index(dir)];
        if pending.len() == PENDING_SUBMITS {
            pending.pop_front();
        }
        pending.push_back(PendingShare {
            seq,
            job_id,
            nonce,
            difficulty,
        });
        if dir == Direction::Up {
            out.push(
                ShareSent {
                    device: conn,
                    channel: None,
                    seq,
                    job_id,
                    nonce,
                    ntime,
                    version,
                    difficulty,
                    hash: None,
                }
                .into(),
            );
        }
    }

    fn on_reply(
        &mut self,
        conn: u64,
        dir: Direction,
        env: &sv1::Envelope<'_>,
        out: &mut Vec<EventKind>,
    ) {
        if let Some(Value::Object(raw)) = env.result {
            // The mining.configure reply carries the negotiated version-rolling mask.
            if let Some(mask) = configured_mask(raw) {
                self.version_mask = Some(mask);
            }
        }
        let Some(id) = env.id() else {
            return;
        };
        let seq = seq_of(id);
        let pending = &mut self.pending[index(opposite(dir))];
        // Replies come mostly in order: search from the oldest.
        let Some(at) = pending.iter().position(|p| p.seq == seq) else {
            return;
        };
        let Some(share) = pending.remove(at) else {
            return;
        };
        let counts = &mut self.counts[index(dir)];
        let verdict = match env.error.filter(|e| !e.is_null()) {
            Some(err) => {
                let code = error_code(err);
                counts.count_error(code);
                Verdict::Rejected(Reason::from_sv1_code(code))
            }
            None if env.result == Some(Value::Bool(true)) => {
                counts.accepted += 1;
                Verdict::Accepted
            }
            None => {
                counts.rejected += 1;
                Verdict::Rejected(Reason::Other)
            }
        };
        if dir == Direction::Down {
            out.push(
                ShareResult {
                    conn,
                    channel: None,
                    seq: share.seq,
                    job_id: share.job_id,
                    nonce: share.nonce,
                    difficulty: share.difficulty,
                    verdict,
                    perspective: Perspective::Received,
                }
                .into(),
            );
        }
    }
}

/// A JSON-RPC id as a sequence number: its value when it is a non-negative integer (bare or
/// quoted, as miners send them), otherwise a hash of its text, so that a reply echoing the id
/// still matches.
pub fn seq_of(raw_id: &str) -> u64 {
    let unquoted = raw_id
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(raw_id);
    if let Ok(n) = unquoted.parse::<u64>() {
        return n;
    }
    // FNV-1a.
    raw_id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `"version-rolling.mask"` in a mining.configure result, when granted.
fn configured_mask(raw: &str) -> Option<u32> {
    let v: serde_json::Value = serde_json::from_str(raw).ok()?;
    if v.get("version-rolling") == Some(&serde_json::Value::Bool(false)) {
        return None;
    }
    u32::from_str_radix(v.get("version-rolling.mask")?.as_str()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use primitives::Hash256;

    const CONN: u64 = 9;

    fn notify_line(job: &str, clean: bool) -> Vec<u8> {
        let prev = Hash256::from_display_hex(
            "00000000440b921e1b77c6c0487ae5616de67f788f44ae2a5af6e2194d16b6f8",
        )
        .unwrap();
        let branch = [Hash256([1; 32]), Hash256([2; 32])];
        let mut out = Vec::new();
        sv1::write::notify(
            &mut out,
            &sv1::write::NotifyFields {
                job_id: job,
                prev_hash: &prev,
                coinb1: &[1, 2, 3],
                coinb2: &[4, 5],
                merkle_branch: &branch,
                version: 0x2000_0000,
                nbits: 0x1d00_ffff,
                ntime: 0x6500_0000,
                clean_jobs: clean,
            },
        );
        out
    }

    fn submit_line(id: u64, job: &str, nonce: u32, version_bits: Option<u32>) -> Vec<u8> {
        let mut out = Vec::new();
        sv1::write::submit(
            &mut out,
            id,
            "w.1",
            job,
            &[0, 0, 0, 1],
            0x6500_0001,
            nonce,
            version_bits,
        );
        out
    }

    fn reply(id: u64, ok: bool) -> Vec<u8> {
        let mut out = Vec::new();
        sv1::write::reply_bool(&mut out, &id.to_string(), ok);
        out
    }

    fn error_reply(id: u64, code: sv1::ErrorCode) -> Vec<u8> {
        let mut out = Vec::new();
        sv1::write::reply_error(&mut out, &id.to_string(), code);
        out
    }

    #[test]
    fn a_session_is_counted_and_reported() {
        let mut w = Sv1Watch::new(Protocol::Auto, DEFAULT_MAX_LINE);
        let mut ev = Vec::new();
        w.observe(
            CONN,
            Direction::Up,
            b"{\"id\":1,\"method\":\"mining.subscribe\",\"params\":[]}\n",
            &mut ev,
        );
        assert!(w.is_reading());
        let mut down = Vec::new();
        sv1::write::set_difficulty(&mut down, 0.5);
        down.extend(notify_line("j1", true));
        w.observe(CONN, Direction::Down, &down, &mut ev);
        assert_eq!(ev.len(), 1);
        let EventKind::JobSent(job) = ev[0] else {
            panic!("{:?}", ev[0])
        };
        assert_eq!(job.conn, CONN);
        assert_eq!(job.job_id, JobId::text("j1"));
        assert!(job.clean);
        assert!((job.difficulty() - 0.5).abs() < 1e-9);
        // The fingerprint of the prev hash in internal order (the word swap undone).
        let prev = Hash256::from_display_hex(
            "00000000440b921e1b77c6c0487ae5616de67f788f44ae2a5af6e2194d16b6f8",
        )
        .unwrap();
        assert_eq!(job.prev_hash, Some(prev));
        assert_eq!(
            job.fingerprint,
            Some(events::fingerprint(
                &prev,
                &[Hash256([1; 32]), Hash256([2; 32])]
            ))
        );

        // Three submits, split across reads at awkward places.
        let mut up = submit_line(10, "j1", 0xdead_beef, None);
        up.extend(submit_line(11, "j1", 2, Some(0x0000_2000)));
        up.extend(submit_line(12, "gone", 3, None));
        let (a, b) = up.split_at(37);
        w.observe(CONN, Direction::Up, a, &mut ev);
        w.observe(CONN, Direction::Up, b, &mut ev);
        let shares: Vec<ShareSent> = ev
            .iter()
            .filter_map(|e| match e {
                EventKind::ShareSent(s) => Some(*s),
                _ => None,
            })
            .collect();
        assert_eq!(shares.len(), 3);
        assert_eq!((shares[0].seq, shares[0].nonce), (10, 0xdead_beef));
        assert_eq!(shares[0].device, CONN);
        assert_eq!(shares[0].version, 0x2000_0000);
        assert_eq!(
            shares[1].version, 0x2000_2000,
            "rolled within the BIP320 mask"
        );
        assert!((shares[0].difficulty - 0.5).abs() < 1e-9);

        // Replies out of order, one of them to something that is not a submit.
        let mut down = error_reply(12, sv1::ErrorCode::JobNotFound);
        down.extend(reply(1, true));
        down.extend(reply(10, true));
        down.extend(reply(11, false));
        ev.clear();
        w.observe(CONN, Direction::Down, &down, &mut ev);
        let verdicts: Vec<(u64, Verdict)> = ev
            .iter()
            .map(|e| match e {
                EventKind::ShareResult(r) => {
                    assert_eq!(r.perspective, Perspective::Received);
                    (r.seq, r.verdict)
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            verdicts,
            [
                (12, Verdict::Rejected(Reason::Stale)),
                (10, Verdict::Accepted),
                (11, Verdict::Rejected(Reason::Other)),
            ]
        );
        let up = w.counts(Direction::Up);
        assert_eq!((up.lines, up.submits, up.jobs), (4, 3, 0));
        let down = w.counts(Direction::Down);
        assert_eq!((down.jobs, down.accepted, down.rejected), (1, 1, 1));
        assert_eq!(down.errors, [0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(down.results(), 3);
        assert_eq!(down.unparsed, 0);
    }

    #[test]
    fn the_negotiated_mask_applies_to_version_bits() {
        let mut w = Sv1Watch::new(Protocol::Sv1, DEFAULT_MAX_LINE);
        let mut ev = Vec::new();
        w.observe(
            CONN,
            Direction::Down,
            b"{\"id\":1,\"result\":{\"version-rolling\":true,\"version-rolling.mask\":\"00ff0000\"},\"error\":null}\n",
            &mut ev,
        );
        w.observe(CONN, Direction::Down, &notify_line("a", false), &mut ev);
        w.observe(
            CONN,
            Direction::Up,
            &submit_line(2, "a", 1, Some(0xffff_ffff)),
            &mut ev,
        );
        let EventKind::ShareSent(s) = ev[1] else {
            panic!("{ev:?}")
        };
        assert_eq!(s.version, 0x20ff_0000);
    }

    #[test]
    fn errors_are_counted_by_code_in_both_shapes() {
        let mut w = Sv1Watch::new(Protocol::Sv1, DEFAULT_MAX_LINE);
        let mut ev = Vec::new();
        for id in 1..=4 {
            w.observe(CONN, Direction::Up, &submit_line(id, "x", 1, None), &mut ev);
        }
        let mut down = error_reply(1, sv1::ErrorCode::Duplicate);
        down.extend(error_reply(2, sv1::ErrorCode::LowDifficulty));
        down.extend_from_slice(
            b"{\"id\":3,\"result\":null,\"error\":{\"code\":-7,\"message\":\"x\"}}\n",
        );
        down.extend_from_slice(b"{\"id\":4,\"result\":null,\"error\":[24,\"no\",null]}\n");
        w.observe(CONN, Direction::Down, &down, &mut ev);
        assert_eq!(w.counts(Direction::Down).errors, [0, 0, 1, 1, 1, 0, 1]);
        assert_eq!(error_code(Value::Array("[ 25 , \"x\"]")), Some(25));
        assert_eq!(error_code(Value::Object("{\"code\": 21}")), Some(21));
        assert_eq!(error_code(Value::Null), None);
    }

    #[test]
    fn auto_leaves_binary_alone_and_raw_reads_nothing() {
        let mut ev = Vec::new();
        let mut w = Sv1Watch::new(Protocol::Auto, DEFAULT_MAX_LINE);
        w.observe(CONN, Direction::Up, &[0x7b, 0x00, 0x91, 0xff], &mut ev);
        assert!(!w.is_reading(), "a brace followed by binary is not JSON");
        w.observe(CONN, Direction::Up, &submit_line(1, "x", 1, None), &mut ev);
        assert_eq!(w.counts(Direction::Up).submits, 0);
        let mut w = Sv1Watch::new(Protocol::Auto, DEFAULT_MAX_LINE);
        w.observe(CONN, Direction::Up, b"\r\n", &mut ev);
        assert!(
            !w.is_reading() && w.state == State::Sniffing,
            "whitespace decides nothing"
        );
        w.observe(CONN, Direction::Up, &submit_line(1, "x", 1, None), &mut ev);
        assert_eq!(w.counts(Direction::Up).submits, 1);
        let mut w = Sv1Watch::new(Protocol::Raw, DEFAULT_MAX_LINE);
        w.observe(CONN, Direction::Up, &submit_line(1, "x", 1, None), &mut ev);
        assert_eq!(w.counts(Direction::Up).submits, 0);
    }

    #[test]
    fn an_overlong_line_stops_reading_but_not_counting_what_came_before() {
        let mut w = Sv1Watch::new(Protocol::Sv1, 100);
        let mut ev = Vec::new();
        w.observe(CONN, Direction::Up, &submit_line(1, "x", 1, None), &mut ev);
        w.observe(CONN, Direction::Up, &[b'a'; 300], &mut ev);
        assert!(w.overflowed() && !w.is_reading());
        w.observe(CONN, Direction::Up, b"\n", &mut ev);
        w.observe(CONN, Direction::Up, &submit_line(2, "x", 1, None), &mut ev);
        assert_eq!(w.counts(Direction::Up).submits, 1);
    }

    #[test]
    fn garbage_lines_are_counted_and_skipped() {
        let mut w = Sv1Watch::new(Protocol::Sv1, DEFAULT_MAX_LINE);
        let mut ev = Vec::new();
        w.observe(
            CONN,
            Direction::Up,
            b"not json\n{\"id\":1,\"method\":\"mining.submit\",\"params\":[1]}\n",
            &mut ev,
        );
        w.observe(CONN, Direction::Up, &submit_line(2, "x", 1, None), &mut ev);
        let c = w.counts(Direction::Up);
        assert_eq!((c.lines, c.unparsed, c.submits), (3, 2, 1));
    }

    #[test]
    fn pending_submits_are_bounded() {
        let mut w = Sv1Watch::new(Protocol::Sv1, DEFAULT_MAX_LINE);
        let mut ev = Vec::new();
        for id in 0..(PENDING_SUBMITS as u64 + 10) {
            w.observe(CONN, Direction::Up, &submit_line(id, "x", 1, None), &mut ev);
        }
        assert_eq!(w.session.pending[0].len(), PENDING_SUBMITS);
        // The oldest were forgotten: their replies match nothing.
        w.observe(CONN, Direction::Down, &reply(0, true), &mut ev);
        w.observe(
            CONN,
            Direction::Down,
            &reply(PENDING_SUBMITS as u64 + 9, true),
            &mut ev,
        );
        assert_eq!(w.counts(Direction::Down).accepted, 1);
    }

    #[test]
    fn ids_become_sequence_numbers() {
        assert_eq!(seq_of("42"), 42);
        assert_eq!(seq_of("\"42\""), 42);
        assert_eq!(seq_of("\"abc\""), seq_of("\"abc\""));
        assert_ne!(seq_of("\"abc\""), seq_of("\"abd\""));
        assert_eq!(Sv1Counts::error_code(1), Some(21));
        assert_eq!(Sv1Counts::error_code(6), None);
    }
}
