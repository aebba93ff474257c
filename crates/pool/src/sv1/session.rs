//! One Stratum V1 miner connection, sans-IO: lines in, bytes out.
//!
//! The shell feeds complete lines ([`Session::handle_line`]), new work
//! ([`Session::handle_generation`]) and clock ticks ([`Session::handle_tick`]), and writes whatever
//! [`Session::poll_transmit`] holds — once the store ticket of
//! [`Session::take_pending_ticket`] is durable, so that no share is acknowledged before it is
//! safe. A job's `mining.notify` line is shared by every connection that gets it and is not
//! copied: the output is the session's own bytes with that line spliced in.

use std::sync::Arc;

use events::{JobSent, Reason, TargetChanged, Verdict};
use primitives::bitcoin::ScriptBuf;
use primitives::Difficulty;
use sv1::server::Share;
use sv1::session::{Admitted, Conn, Judge, Judged, Outcome, Refusal, ShareRef, Subscription};
use sv1::write;
use sv1::{Authorize, ErrorCode};

use crate::channel::{Channel, Submission};
use crate::engine::{Engine, NotStored, Worker};
use crate::jobs::Generation;
use crate::store::{ShareBatch, Ticket};
use crate::sv1::notify::notify_bytes;
use crate::Timestamp;
use ::sv1::VERSION_ROLLING_MASK;
use mining::Reject;

/// Settings of the SV1 front end.
#[derive(Clone, Debug)]
pub struct Sv1Config {
    /// Bytes of extranonce the miner rolls (the rest of the coinbase's extranonce is ours).
    pub extranonce2_size: usize,
    /// Header version bits miners may roll (BIP310), offered in `mining.configure`.
    pub version_mask: u32,
    /// Names a connection may authorize (several workers over one connection).
    pub max_workers: usize,
    /// Malformed lines tolerated before the connection is closed.
    pub max_bad_lines: u32,
    /// Returned by `client.get_version`.
    pub version: &'static str,
}

impl Default for Sv1Config {
    fn default() -> Self {
        Sv1Config {
            extranonce2_size: 4,
            version_mask: VERSION_ROLLING_MASK,
            max_workers: 16,
            max_bad_lines: 16,
            version: concat!("stratumlab/", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// Output capacity kept between writes: a few replies. A larger buffer (the handshake's, a
/// burst's, a re-sent job's) is freed once written.
const REPLY_BUFFER: usize = 256;

/// What a line was, for the shell's bookkeeping (it times shares).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineKind {
    /// A `mining.submit`, and its verdict.
    Share(Verdict),
    /// Anything else.
    Other,
}

pub use ::sv1::session::Close;

/// The pool's side of one SV1 connection, the [`Judge`] of its shares: its channel (jobs,
/// difficulty, vardiff, accepted shares), the coinbase payout its first worker picked, and
/// the share records on their way to the store.
pub struct Miner {
    engine: Arc<Engine>,
    config: Arc<Sv1Config>,
    conn: u64,
    channel: Channel,
    payout: Option<ScriptBuf>,
    /// The generation the miner last got a job from, once `working` (apart, so that the flag
    /// packs with the other small fields: every connection pays for these bytes).
    sent_generation: u64,
    working: bool,
    /// Jobs issued whose notify is not written yet: `JobSent` waits for the write.
    jobs_unwritten: u8,
    /// Accepted shares on their way to the store, from the first one on (a connection that
    /// sends none keeps nothing); never without a store.
    records: Option<Box<Recording>>,
    /// The miner's address, for its allowance of new workers (`None`: not limited).
    origin: Option<std::net::IpAddr>,
}

/// One SV1 connection to the pool: the session every SV1 role runs, judged by the pool's
/// [`Miner`]. Dereferences to the shared session for what is not the pool's own.
pub struct Session(sv1::session::Session<Miner>);

impl std::ops::Deref for Session {
    type Target = sv1::session::Session<Miner>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Session {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// A connection's accepted shares on their way to the store, and where their acknowledgements
/// sit in the output until the store has them: if it cannot write for too long, they become
/// errors ([`Session::refuse_unconfirmed`]) rather than the connection being cut.
struct Recording {
    batch: ShareBatch,
    /// Where each acknowledgement written since the output was last written starts in the
    /// session's own bytes.
    acks: Vec<u32>,
}

/// What a share whose acknowledgement the store could not confirm in time is told.
const UNCONFIRMED: &str = "Share not confirmed: the pool's share store cannot write";

impl Session {
    /// A session for a new connection, with its own connection id and extranonce1.
    pub fn new(engine: Arc<Engine>, config: Arc<Sv1Config>, now: Timestamp) -> Self {
        let conn = engine.next_conn();
        let prefix_len = engine
            .config
            .jobs
            .extranonce_len
            .saturating_sub(config.extranonce2_size);
        // Unique per connection for the pool's lifetime (up to 2^(8*len) connections).
        let prefix = conn.to_be_bytes()[8 - prefix_len.min(8)..].to_vec();
        let channel = Channel::new(
            engine.channel_config.clone(),
            prefix,
            config.extranonce2_size,
            engine.config.start_difficulty,
            now,
        );
        engine.stats.connection_opened();
        Session(sv1::session::Session::new(Miner {
            engine,
            config,
            conn,
            channel,
            payout: None,
            sent_generation: 0,
            working: false,
            jobs_unwritten: 0,
            records: None,
            origin: None,
        }))
    }

    /// The connection id (unique for the pool's lifetime).
    pub fn conn(&self) -> u64 {
        self.judge().conn
    }

    /// The connection's channel: jobs, difficulty, accepted shares.
    pub fn channel(&self) -> &Channel {
        &self.judge().channel
    }

    /// Everything pending as one buffer, marked transmitted (the shell writes
    /// [`Session::poll_transmit`](sv1::session::Session::poll_transmit) instead, which copies
    /// nothing).
    pub fn take_output(&mut self) -> Vec<u8> {
        let bytes = self.0.take_output();
        self.acks_sent();
        bytes
    }

    /// The first `n` bytes of the pending output were written.
    pub fn transmitted(&mut self, n: usize) {
        self.0.transmitted(n);
        self.acks_sent();
    }

    /// The acknowledgements in the output went out (to the socket or to the task that writes
    /// it): each was confirmed, or refused, before that.
    fn acks_sent(&mut self) {
        if let Some(r) = &mut self.0.judge_mut().records {
            r.acks.clear();
        }
    }

    /// The store could not confirm the shares of [`Session::take_pending_ticket`] in time: the
    /// acknowledgements waiting in the output become errors that say so, and the connection
    /// goes on (the store still holds the records and writes them when it can, so a share
    /// refused here may yet be credited; none is acknowledged unstored). False if an
    /// acknowledgement could not be found where it was written: the caller must then not
    /// write the output at all.
    #[must_use]
    pub fn refuse_unconfirmed(&mut self) -> bool {
        let (miner, conn) = self.0.parts_mut();
        let Some(r) = &mut miner.records else {
            return true;
        };
        let out = conn.outbox();
        let mut all = true;
        let mut line = Vec::new();
        // From the last: an earlier acknowledgement's place stays where it was.
        while let Some(at) = r.acks.pop() {
            let at = at as usize;
            let own = out.own();
            let Some(len) = own
                .get(at..)
                .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
                .map(|n| n + 1)
            else {
                all = false;
                continue;
            };
            let Some(id) = ack_id(&own[at..at + len]) else {
                all = false;
                continue;
            };
            line.clear();
            write::reply_error_message(&mut line, id, 20, UNCONFIRMED);
            out.replace_own(at..at + len, &line);
        }
        debug_assert!(all, "an acknowledgement was not where it was written");
        all
    }

    /// Everything pending was written: the jobs in it are sent (`JobSent`, stamped now), and
    /// the buffer is given back if a job was among it or it grew past what replies need.
    ///
    /// A job ends the handshake and, for most miners, starts a quiet spell: an idle connection
    /// keeps no buffer, and its memory goes back while the next connections' handshakes can
    /// reuse it. A busy miner allocates again once per job, never per share.
    pub fn output_written(&mut self) {
        let (miner, conn) = self.0.parts_mut();
        let out = conn.outbox();
        debug_assert!(out.is_empty());
        let unwritten = std::mem::take(&mut miner.jobs_unwritten) as usize;
        if unwritten > 0 || out.capacity() > REPLY_BUFFER {
            out.release();
        }
        if unwritten > 0 && miner.engine.events.is_enabled() {
            // Issued jobs a later clean job already evicted are not reported.
            let issued = miner.channel.jobs().count();
            for i in miner.channel.jobs().skip(issued.saturating_sub(unwritten)) {
                // A job re-sent under a fresh id is never clean.
                let clean = i.job.clean && i.wire_id == i.job.id;
                emit_job_sent(&miner.engine, miner.conn, i, clean);
            }
        }
    }

    /// The store ticket the output's acknowledgements wait for, taken by the shell before it
    /// writes them: the session's flush point for its share records (see
    /// [`ShareBatch::take_ticket`]).
    pub fn take_pending_ticket(&mut self) -> Option<Ticket> {
        self.0.judge_mut().records.as_mut()?.batch.take_ticket()
    }

    /// Puts the share records gathered so far on the store's queue (new work, ticks, the end).
    fn flush_records(&mut self) {
        if let Some(r) = &mut self.0.judge_mut().records {
            r.batch.flush();
        }
    }

    /// The miner's address: new worker names count against its allowance.
    pub fn set_origin(&mut self, ip: std::net::IpAddr) {
        self.0.judge_mut().origin = Some(ip);
    }

    /// Handles one line from the miner; replies go to the output.
    pub fn handle_line(&mut self, line: &[u8], now: Timestamp) -> LineKind {
        let verdict = match self.0.handle_line(line, now, &mut ()) {
            Outcome::Other => return LineKind::Other,
            Outcome::Accepted(()) => Verdict::Accepted,
            Outcome::Rejected(r) => Verdict::Rejected(r.reason()),
            Outcome::Refused(code) => Verdict::Rejected(code_reason(code)),
        };
        LineKind::Share(verdict)
    }

    /// New work from the engine (`None`: the pool stopped handing out work).
    pub fn handle_generation(&mut self, g: Option<&Arc<Generation>>, now: Timestamp) {
        self.flush_records();
        if let Some(g) = g {
            self.0.handle_work(g, now, &mut ());
        }
    }

    /// Vardiff for a quiet miner.
    pub fn handle_tick(&mut self, now: Timestamp) {
        self.flush_records();
        self.0.handle_tick(now, &mut ());
    }

    /// The connection ended: the workers leave the list.
    pub fn closed(&mut self, now: Timestamp) {
        self.flush_records();
        for w in self.0.take_workers() {
            self.judge().engine.detach_worker(&w, now);
        }
        self.judge().engine.stats.connection_closed();
    }
}

/// The reason a share refused with `code` counts under.
fn code_reason(code: ErrorCode) -> Reason {
    match code {
        ErrorCode::Unauthorized | ErrorCode::NotSubscribed => Reason::Unauthorized,
        _ => Reason::Other,
    }
}

impl Judge for Miner {
    type Worker = Worker;
    type Work = Arc<Generation>;
    type Accepted = ();
    type Cx<'a> = ();

    fn worker_name(w: &Worker) -> &str {
        &w.name
    }

    fn version(&self, _: &()) -> &'static str {
        self.config.version
    }

    fn max_workers(&self, _: &()) -> usize {
        self.config.max_workers
    }

    fn max_bad_lines(&self, _: &()) -> u32 {
        self.config.max_bad_lines
    }

    fn subscribe(&mut self, _: &mut (), _again: bool) -> Subscription {
        Subscription::Granted {
            id: self.conn,
            extranonce1: self.channel.extranonce_prefix().to_vec(),
            extranonce2_size: self.channel.extranonce_len(),
        }
    }

    fn admit(
        &mut self,
        _: &mut (),
        a: &Authorize<'_>,
        known: bool,
        now: Timestamp,
    ) -> Option<Admitted<Worker>> {
        let name: &str = &a.user;
        let (account, _) = a.account_and_worker();
        let payout = self.engine.payout_for(account.trim())?;
        // Last: a name refused for its form or its account spends none of the address's
        // allowance of new names.
        if !known && !self.engine.may_add_worker(name, self.origin, now) {
            return None;
        }
        // The first authorized miner picks the coinbase payout of the connection.
        if self.payout.is_none() {
            self.payout = Some(payout);
        }
        Some(match known {
            true => Admitted::Known,
            false => Admitted::New(self.engine.attach_worker(name, now)),
        })
    }

    fn offered_version_mask(&self, _: &()) -> u32 {
        self.config.version_mask
    }

    fn set_version_mask(&mut self, mask: u32) {
        self.channel.set_version_mask(mask);
    }

    fn difficulty(&self) -> Difficulty {
        self.channel.difficulty()
    }

    fn set_difficulty(&mut self, d: Difficulty, now: Timestamp) -> Difficulty {
        self.channel.set_difficulty(d, now)
    }

    fn set_minimum(&mut self, d: Difficulty, now: Timestamp) {
        self.channel.set_minimum(d, now);
    }

    fn vardiff_tick(&mut self, now: Timestamp) -> bool {
        let changed = self.channel.handle_tick(now).is_some();
        if changed {
            self.engine.stats.vardiff_changed();
        }
        changed
    }

    fn difficulty_sent(&mut self, _d: Difficulty) {
        if self.engine.events.is_enabled() {
            self.engine.events.emit(TargetChanged {
                conn: self.conn,
                channel: None,
                target: self.channel.target(),
            });
        }
    }

    fn is_working(&self) -> bool {
        self.working
    }

    fn current_work(&self, _: &()) -> Option<Arc<Generation>> {
        self.engine.current()
    }

    fn issue(
        &mut self,
        _: &mut (),
        _: &mut Conn<Worker>,
        g: &Arc<Generation>,
        now: Timestamp,
    ) -> Option<Arc<[u8]>> {
        if self.working && self.sent_generation == g.id {
            return None;
        }
        let payout = self.payout.as_ref()?;
        let job = match g.job(&self.engine.job_payout(payout)) {
            Ok(j) => j,
            Err(e) => {
                tracing::error!(conn = self.conn, error = %e, "cannot build job");
                return None;
            }
        };
        let notify = notify_bytes(&job);
        self.sent_generation = g.id;
        self.working = true;
        let wire = job.id;
        self.channel.issue(job, wire, now);
        self.jobs_unwritten = self.jobs_unwritten.saturating_add(1);
        Some(notify)
    }

    /// The latest job again, not clean, under a fresh id from the current generation.
    fn reissue(&mut self, _: &mut (), conn: &mut Conn<Worker>, _old: Difficulty, now: Timestamp) {
        let Some(latest) = self.channel.latest_job().map(|i| i.job.clone()) else {
            return;
        };
        let wire = self
            .engine
            .current()
            .map(|g| g.fresh_id())
            .unwrap_or_else(|| latest.id);
        if wire == latest.id {
            return;
        }
        crate::sv1::notify::write_notify(conn.out(), &latest, wire, false);
        self.channel.issue(latest, wire, now);
        self.jobs_unwritten = self.jobs_unwritten.saturating_add(1);
    }

    // Every share: inlined into the session's submit.
    #[inline]
    fn judge(
        &mut self,
        _: &mut (),
        conn: &mut Conn<Worker>,
        w: usize,
        s: &Share<'_>,
        now: Timestamp,
    ) -> Result<Judged<()>, Refusal> {
        // The acknowledgement is written next, here.
        let ack_at = conn.out().len() as u32;
        let worker = &mut conn.workers_mut()[w];
        if worker.key.is_none() {
            self.engine.retry_worker_key(worker);
        }
        let wire_id = wire_job_id(s.job_id);
        let Some(extranonce) = s.extranonce2 else {
            // Unreadable extranonce2: judged after the job, as a malformed parameter.
            let r = match self.channel.check_job(wire_id, self.engine.epoch()) {
                Err(r) => r,
                Ok(()) => Reject::ExtranonceSize,
            };
            return Err(Refusal::Reject(r));
        };
        let submission = Submission {
            wire_id,
            extranonce,
            ntime: s.ntime,
            nonce: s.nonce,
            version_bits: s.version_bits,
        };
        let before = self.channel.difficulty();
        let a = self
            .channel
            .submit(&submission, self.engine.epoch(), now)
            .map_err(Refusal::Reject)?;
        let worker = &conn.workers()[w];
        if a.block {
            let solution = crate::job::Solution {
                extranonce_prefix: a.extranonce_prefix,
                extranonce,
                version: u32::from_le_bytes(a.header[0..4].try_into().expect("4")),
                ntime: s.ntime,
                nonce: s.nonce,
            };
            self.engine.found_block(
                a.job,
                &solution,
                &a.header,
                a.hash,
                self.conn,
                Some(worker),
                now,
            );
        }
        if self.records.is_none() {
            self.records = self.engine.share_batch().map(|batch| {
                Box::new(Recording {
                    batch,
                    acks: Vec::new(),
                })
            });
        }
        let records = self.records.as_deref_mut().map(|r| &mut r.batch);
        let seq = request_seq(s.id);
        if let Err(why) = self
            .engine
            .accepted(self.conn, seq, s.job_id, worker, &a, s.nonce, now, records)
        {
            return Err(Refusal::NotKept(match why {
                NotStored::Overloaded => "Share not stored: the pool is overloaded",
                NotStored::StoreFailing => "Share not stored: the pool's share store cannot write",
            }));
        }
        if let Some(r) = &mut self.records {
            // Nothing was written since: the session writes the acknowledgement there next.
            debug_assert_eq!(conn.out().len() as u32, ack_at);
            r.acks.push(ack_at);
        }
        let retarget_from = a.retarget.map(|_| {
            self.engine.stats.vardiff_changed();
            before
        });
        Ok(Judged {
            accepted: (),
            retarget_from,
        })
    }

    fn check_job(&self, _: &(), job_id: &str) -> Result<(), Reject> {
        let wire_id = u64::from_str_radix(job_id, 16).unwrap_or(u64::MAX);
        self.channel.check_job(wire_id, self.engine.epoch())
    }

    fn refused(
        &mut self,
        _: &mut (),
        worker: Option<&Worker>,
        s: ShareRef<'_>,
        why: &Refusal,
        now: Timestamp,
    ) {
        let reason = match why {
            Refusal::Reject(r) => r.reason(),
            Refusal::Code(c) => code_reason(*c),
            Refusal::Malformed(_) => Reason::Other,
            // Counted by the engine when it could not keep it.
            Refusal::NotKept(_) => return,
        };
        self.engine.rejected(
            self.conn,
            request_seq(s.id),
            s.job_id,
            worker,
            reason,
            s.nonce,
            self.channel.difficulty().as_f64(),
            now,
        );
    }
}

/// `id.parse::<u64>().unwrap_or(0)`, the usual 1 to 19 digits read directly.
#[inline]
fn request_seq(id: &str) -> u64 {
    let b = id.as_bytes();
    if (1..=19).contains(&b.len()) && b.iter().all(u8::is_ascii_digit) {
        return b.iter().fold(0, |v, &d| v * 10 + u64::from(d - b'0'));
    }
    id.parse::<u64>().unwrap_or(0)
}

/// `u64::from_str_radix(job_id, 16).unwrap_or(u64::MAX)`, the usual 1 to 16 hex digits read
/// directly.
#[inline]
fn wire_job_id(job_id: &str) -> u64 {
    let b = job_id.as_bytes();
    if (1..=16).contains(&b.len()) {
        let mut v = 0u64;
        for &c in b {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return u64::from_str_radix(job_id, 16).unwrap_or(u64::MAX),
            };
            v = v << 4 | u64::from(d);
        }
        return v;
    }
    u64::from_str_radix(job_id, 16).unwrap_or(u64::MAX)
}

fn emit_job_sent(engine: &Engine, conn: u64, issued: &crate::channel::Issued, clean: bool) {
    if !engine.events.is_enabled() {
        return;
    }
    let mut buf = [0u8; 16];
    let id = crate::sv1::notify::hex_id(issued.wire_id, &mut buf);
    engine.events.emit(JobSent {
        conn,
        channel: None,
        job_id: events::JobId::text(id),
        template_id: Some(issued.job.generation),
        fingerprint: Some(issued.job.fingerprint),
        prev_hash: Some(issued.job.prev_hash),
        target: issued.target,
        clean,
        future: false,
    });
}

/// The id of an acknowledgement line as [`write::reply_bool`] writes it.
fn ack_id(line: &[u8]) -> Option<&str> {
    const AFTER_ID: &[u8] = b",\"result\":true,";
    let rest = line.strip_prefix(b"{\"id\":")?;
    let end = rest.windows(AFTER_ID.len()).position(|w| w == AFTER_ID)?;
    std::str::from_utf8(&rest[..end]).ok()
}

#[cfg(test)]
mod fast_number_tests {
    use super::{request_seq, wire_job_id};

    #[test]
    fn ids_read_like_the_standard_parsers() {
        for s in [
            "",
            "0",
            "7",
            "4123",
            "0042",
            "+5",
            "-1",
            "1a",
            "\"3\"",
            "null",
            "18446744073709551615",
            "18446744073709551616",
            "9999999999999999999",
            "99999999999999999999",
            "12345678901",
        ] {
            assert_eq!(request_seq(s), s.parse::<u64>().unwrap_or(0), "{s}");
        }
        for s in [
            "",
            "0",
            "1a",
            "1A2b",
            "ffffffffffffffff",
            "10000000000000000",
            "+f",
            "-1",
            "g",
            "0x1",
            "6512ab3400000001",
            "abcdefABCDEF0123",
        ] {
            assert_eq!(
                wire_job_id(s),
                u64::from_str_radix(s, 16).unwrap_or(u64::MAX),
                "{s}"
            );
        }
    }
}
