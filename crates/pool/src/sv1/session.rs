//! One Stratum V1 miner connection, sans-IO: lines in, bytes out.
//!
//! The shell feeds complete lines ([`Session::handle_line`]), new work
//! ([`Session::on_generation`]) and clock ticks ([`Session::on_tick`]), and writes whatever
//! [`Session::pending_output`] holds — once the store ticket of
//! [`Session::take_pending_ticket`] is durable, so that no share is acknowledged before it is
//! safe. A job's `mining.notify` line is shared by every connection that gets it and is not
//! copied: the output is the session's own bytes with that line spliced in.

use std::sync::Arc;

use events::{JobSent, Reason, TargetChanged, Verdict};
use primitives::bitcoin::ScriptBuf;
use primitives::Difficulty;
use sv1::write;
use sv1::{Authorize, Configure, ErrorCode, Subscribe};

use crate::channel::{Channel, Submission};
use crate::engine::{Engine, NotStored, Worker};
use crate::jobs::Generation;
use crate::store::{ShareBatch, Ticket};
use crate::sv1::notify::notify_bytes;
use crate::Millis;
use ::sv1::outbox::Outbox;
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

/// Why the session wants its connection closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// More malformed lines than `max_bad_lines`.
    TooManyBadLines,
    /// A line longer than the limit.
    LineTooLong,
}

/// One SV1 connection, sans IO: lines in, bytes to write out.
pub struct Session {
    engine: Arc<Engine>,
    config: Arc<Sv1Config>,
    conn: u64,
    channel: Channel,
    subscribed: bool,
    workers: Vec<Worker>,
    payout: Option<ScriptBuf>,
    /// The miner opted in to `mining.set_extranonce`.
    extranonce_subscribed: bool,
    /// The difficulty the miner was last told.
    sent_difficulty: Option<Difficulty>,
    /// The generation the miner last got a job from.
    sent_generation: Option<u64>,
    out: Outbox,
    /// Jobs issued whose notify is not written yet: `JobSent` waits for the write.
    jobs_unwritten: u8,
    /// Accepted shares on their way to the store, from the first one on (a connection that
    /// sends none keeps nothing); never without a store.
    records: Option<Box<Recording>>,
    /// Malformed lines so far (u16, saturating: with the small fields beside it, the origin
    /// fits without growing every connection's task).
    bad_lines: u16,
    close: Option<Close>,
    /// The miner's address, for its allowance of new workers (`None`: not limited).
    origin: Option<std::net::IpAddr>,
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
    pub fn new(engine: Arc<Engine>, config: Arc<Sv1Config>, now: Millis) -> Self {
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
        Session {
            engine,
            config,
            conn,
            channel,
            subscribed: false,
            workers: Vec::new(),
            payout: None,
            extranonce_subscribed: false,
            sent_difficulty: None,
            sent_generation: None,
            out: Outbox::default(),
            jobs_unwritten: 0,
            records: None,
            bad_lines: 0,
            close: None,
            origin: None,
        }
    }

    /// The connection id (unique for the pool's lifetime).
    pub fn conn(&self) -> u64 {
        self.conn
    }

    /// The connection's channel: jobs, difficulty, accepted shares.
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Bytes to write to the miner, the shared notify line copied in; the caller drains it.
    /// (The shell writes [`Session::pending_output`] instead, which copies nothing.)
    pub fn output(&mut self) -> &mut Vec<u8> {
        // The caller takes everything: the acknowledgements in it were confirmed.
        if let Some(r) = &mut self.records {
            r.acks.clear();
        }
        self.out.flatten()
    }

    /// What to write next, in order (see [`Outbox::pending`]).
    pub fn pending_output(&self) -> [&[u8]; 3] {
        self.out.pending()
    }

    /// The first `n` bytes of [`Session::pending_output`] were written.
    pub fn consume_output(&mut self, n: usize) {
        self.out.consume(n);
        // The acknowledgements that go out were confirmed (or refused) before the write.
        if let Some(r) = &mut self.records {
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
        let Some(r) = &mut self.records else {
            return true;
        };
        let mut all = true;
        let mut line = Vec::new();
        // From the last: an earlier acknowledgement's place stays where it was.
        while let Some(at) = r.acks.pop() {
            let at = at as usize;
            let own = self.out.own();
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
            self.out.replace_own(at..at + len, &line);
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
        debug_assert!(self.out.is_empty());
        let unwritten = std::mem::take(&mut self.jobs_unwritten) as usize;
        if unwritten > 0 || self.out.capacity() > REPLY_BUFFER {
            self.out.release();
        }
        if unwritten > 0 && self.engine.events.is_enabled() {
            // Issued jobs a later clean job already evicted are not reported.
            let issued = self.channel.jobs().count();
            for i in self.channel.jobs().skip(issued.saturating_sub(unwritten)) {
                // A job re-sent under a fresh id is never clean.
                let clean = i.job.clean && i.wire_id == i.job.id;
                emit_job_sent(&self.engine, self.conn, i, clean);
            }
        }
    }

    /// The store ticket the output's acknowledgements wait for, taken by the shell before it
    /// writes them: the session's flush point for its share records (see
    /// [`ShareBatch::take_ticket`]).
    pub fn take_pending_ticket(&mut self) -> Option<Ticket> {
        self.records.as_mut()?.batch.take_ticket()
    }

    /// Puts the share records gathered so far on the store's queue (new work, ticks, the end).
    fn flush_records(&mut self) {
        if let Some(r) = &mut self.records {
            r.batch.flush();
        }
    }

    /// Why the connection should be closed; `None` while it should not.
    pub fn wants_close(&self) -> Option<Close> {
        self.close
    }

    /// Whether the miner has been sent a job.
    pub fn is_working(&self) -> bool {
        self.sent_generation.is_some()
    }

    /// The miner subscribed and authorized at least one worker (whether or not the pool has
    /// given it work yet).
    pub fn is_authorized(&self) -> bool {
        self.subscribed && !self.workers.is_empty()
    }

    /// A line longer than the limit arrived: answer and close.
    pub fn line_too_long(&mut self) {
        write::reply_error_message(self.out.own(), "null", 20, "Line too long");
        self.close = Some(Close::LineTooLong);
    }

    /// Tells the miner to reconnect (graceful shutdown).
    pub fn reconnect(&mut self, host: &str, port: u16, wait_secs: u32) {
        write::reconnect(self.out.own(), host, port, wait_secs);
    }

    /// The miner's address: new worker names count against its allowance.
    pub fn set_origin(&mut self, ip: std::net::IpAddr) {
        self.origin = Some(ip);
    }

    /// Handles one line from the miner; replies go to the output.
    pub fn handle_line(&mut self, line: &[u8], now: Millis) -> LineKind {
        sv1::server::handle_line(&mut Request { session: self, now }, line)
    }

    fn bad_line(&mut self) {
        self.bad_lines = self.bad_lines.saturating_add(1);
        if u32::from(self.bad_lines) > self.config.max_bad_lines {
            self.close = Some(Close::TooManyBadLines);
        }
    }

    fn subscribe(&mut self, id: &str, now: Millis) {
        self.subscribed = true;
        let sub = format!("{:016x}", self.conn);
        write::reply_subscribe(
            self.out.own(),
            id,
            &sub,
            self.channel.extranonce_prefix(),
            self.channel.extranonce_len(),
        );
        self.start_work(now);
    }

    fn authorize(&mut self, id: &str, a: &Authorize<'_>, now: Millis) {
        // The name stays exactly as sent: submits name the worker the same way.
        let name: &str = &a.user;
        let (account, _) = a.account_and_worker();
        let known = self.workers.iter().any(|w| &*w.name == name);
        let ok = sv1::server::worker_name_ok(name)
            && (known || self.workers.len() < self.config.max_workers);
        let payout = if ok {
            self.engine.payout_for(account.trim())
        } else {
            None
        };
        // Last: a name refused for its form or its account spends none of the address's
        // allowance of new names.
        let payout = payout.filter(|_| known || self.engine.may_add_worker(name, self.origin, now));
        let Some(payout) = payout else {
            write::reply_error(self.out.own(), id, ErrorCode::Unauthorized);
            return;
        };
        if !known {
            let w = self.engine.attach_worker(name, now);
            // Most connections authorize one name: room for exactly that.
            self.workers.reserve_exact(1);
            self.workers.push(w);
        }
        // The first authorized miner picks the coinbase payout of the connection.
        if self.payout.is_none() {
            self.payout = Some(payout);
        }
        if let Some(d) = a.difficulty_hint() {
            if self.sent_generation.is_none() {
                self.channel.set_difficulty(Difficulty::saturating(d), now);
            }
        }
        write::reply_bool(self.out.own(), id, true);
        self.start_work(now);
    }

    fn configure(&mut self, id: &str, c: &Configure, now: Millis) {
        let agreed = sv1::server::configure(self.out.own(), id, c, self.config.version_mask);
        if let Some(mask) = agreed.version_mask {
            self.channel.set_version_mask(mask);
        }
        if let Some(d) = agreed.minimum_difficulty {
            self.channel.set_minimum(d, now);
        }
        self.extranonce_subscribed |= agreed.subscribe_extranonce;
    }

    fn suggest(&mut self, id: &str, notification: bool, d: Difficulty, now: Millis) {
        let before = self.channel.difficulty();
        let d = self.channel.set_difficulty(d, now);
        if !notification {
            write::reply_bool(self.out.own(), id, true);
        }
        if d != before && self.sent_generation.is_some() {
            self.resend_work(now);
        }
    }

    /// Sends the first job once the miner is subscribed and authorized.
    fn start_work(&mut self, now: Millis) {
        if self.sent_generation.is_some() || !self.subscribed || self.payout.is_none() {
            return;
        }
        if let Some(g) = self.engine.current() {
            self.send_job(&g, now);
        }
    }

    /// New work from the engine (`None`: the pool stopped handing out work).
    pub fn on_generation(&mut self, g: Option<&Arc<Generation>>, now: Millis) {
        self.flush_records();
        let Some(g) = g else { return };
        if !self.subscribed || self.payout.is_none() || self.sent_generation == Some(g.id) {
            return;
        }
        self.send_job(g, now);
    }

    /// Vardiff for a quiet miner.
    pub fn on_tick(&mut self, now: Millis) {
        self.flush_records();
        if self.sent_generation.is_some() && self.channel.on_tick(now).is_some() {
            self.engine.stats.vardiff_changed();
            self.resend_work(now);
        }
    }

    fn send_difficulty_if_changed(&mut self) {
        let d = self.channel.difficulty();
        if self.sent_difficulty != Some(d) {
            write::set_difficulty(self.out.own(), d.as_f64());
            self.sent_difficulty = Some(d);
            if self.engine.events.is_enabled() {
                self.engine.events.emit(TargetChanged {
                    conn: self.conn,
                    channel: None,
                    target: self.channel.target(),
                });
            }
        }
    }

    fn send_job(&mut self, g: &Arc<Generation>, now: Millis) {
        let payout = self.payout.as_ref().expect("authorized");
        let job = match g.job(&self.engine.job_payout(payout)) {
            Ok(j) => j,
            Err(e) => {
                tracing::error!(conn = self.conn, error = %e, "cannot build job");
                return;
            }
        };
        self.send_difficulty_if_changed();
        self.out.push_shared(notify_bytes(&job));
        self.sent_generation = Some(g.id);
        let wire = job.id;
        self.channel.issue(job, wire, now);
        self.jobs_unwritten = self.jobs_unwritten.saturating_add(1);
    }

    /// After a difficulty change: the new difficulty, then the latest job again under a new
    /// id (firmware ignores a notify whose id it has seen), not clean.
    fn resend_work(&mut self, now: Millis) {
        let Some(latest) = self.channel.latest_job().map(|i| i.job.clone()) else {
            return;
        };
        self.send_difficulty_if_changed();
        let wire = self
            .engine
            .current()
            .map(|g| g.fresh_id())
            .unwrap_or_else(|| latest.id);
        if wire == latest.id {
            return;
        }
        crate::sv1::notify::write_notify(self.out.own(), &latest, wire, false);
        self.channel.issue(latest, wire, now);
        self.jobs_unwritten = self.jobs_unwritten.saturating_add(1);
    }

    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        id: &str,
        worker: &str,
        job_id: &str,
        extranonce: Option<&[u8]>,
        ntime: u32,
        nonce: u32,
        version_bits: Option<u32>,
        now: Millis,
    ) -> Verdict {
        let seq = request_seq(id);
        if !self.subscribed {
            return self.reject_code(id, seq, job_id, None, ErrorCode::NotSubscribed, nonce, now);
        }
        let Some(w) = self.workers.iter().position(|w| &*w.name == worker) else {
            return self.reject_code(id, seq, job_id, None, ErrorCode::Unauthorized, nonce, now);
        };
        if self.workers[w].key.is_none() {
            self.engine.retry_worker_key(&mut self.workers[w]);
        }
        let wire_id = wire_job_id(job_id);
        let Some(extranonce) = extranonce else {
            // Unreadable extranonce2: judged after the job, as a malformed parameter.
            let r = match self.channel.check_job(wire_id, self.engine.epoch()) {
                Err(r) => r,
                Ok(()) => Reject::ExtranonceSize,
            };
            return self.reject(id, seq, job_id, w, r, nonce, now);
        };
        let submission = Submission {
            wire_id,
            extranonce,
            ntime,
            nonce,
            version_bits,
        };
        match self.channel.submit(&submission, self.engine.epoch(), now) {
            Ok(a) => {
                let worker = &self.workers[w];
                if a.block {
                    let solution = crate::job::Solution {
                        extranonce_prefix: a.extranonce_prefix,
                        extranonce,
                        version: u32::from_le_bytes(a.header[0..4].try_into().expect("4")),
                        ntime,
                        nonce,
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
                match self
                    .engine
                    .accepted(self.conn, seq, job_id, worker, &a, nonce, now, records)
                {
                    Ok(()) => {}
                    Err(why) => {
                        let message = match why {
                            NotStored::Overloaded => "Share not stored: the pool is overloaded",
                            NotStored::StoreFailing => {
                                "Share not stored: the pool's share store cannot write"
                            }
                        };
                        write::reply_error_message(self.out.own(), id, 20, message);
                        return Verdict::Rejected(Reason::Other);
                    }
                }
                if let Some(r) = &mut self.records {
                    r.acks.push(self.out.own().len() as u32);
                }
                write::reply_bool(self.out.own(), id, true);
                if a.retarget.is_some() {
                    self.engine.stats.vardiff_changed();
                    self.resend_work(now);
                }
                Verdict::Accepted
            }
            Err(r) => self.reject(id, seq, job_id, w, r, nonce, now),
        }
    }

    /// A submit whose parameters did not parse: still judged in the customary order.
    fn malformed_submit(
        &mut self,
        id: &str,
        env: &sv1::Envelope<'_>,
        e: sv1::ParamError,
        now: Millis,
    ) -> Verdict {
        let seq = id.parse::<u64>().unwrap_or(0);
        let job_id = env.params.get(1).and_then(|v| v.as_str()).unwrap_or("");
        if !self.subscribed {
            return self.reject_code(id, seq, job_id, None, ErrorCode::NotSubscribed, 0, now);
        }
        let worker = env.params.get(0).and_then(|v| v.as_str());
        let Some(w) = worker.and_then(|n| self.workers.iter().position(|w| &*w.name == n)) else {
            return self.reject_code(id, seq, job_id, None, ErrorCode::Unauthorized, 0, now);
        };
        let wire_id = u64::from_str_radix(job_id, 16).unwrap_or(u64::MAX);
        if let Err(r) = self.channel.check_job(wire_id, self.engine.epoch()) {
            return self.reject(id, seq, job_id, w, r, 0, now);
        }
        self.bad_line();
        let worker = &self.workers[w];
        self.engine.rejected(
            self.conn,
            seq,
            job_id,
            Some(worker),
            Reason::Other,
            0,
            self.channel.difficulty().as_f64(),
            now,
        );
        write::reply_error_message(self.out.own(), id, 20, &e.to_string());
        Verdict::Rejected(Reason::Other)
    }

    #[allow(clippy::too_many_arguments)]
    fn reject(
        &mut self,
        id: &str,
        seq: u64,
        job_id: &str,
        w: usize,
        r: Reject,
        nonce: u32,
        now: Millis,
    ) -> Verdict {
        self.engine.rejected(
            self.conn,
            seq,
            job_id,
            Some(&self.workers[w]),
            r.reason(),
            nonce,
            self.channel.difficulty().as_f64(),
            now,
        );
        write::reply_error_message(self.out.own(), id, r.sv1_code(), r.message());
        Verdict::Rejected(r.reason())
    }

    #[allow(clippy::too_many_arguments)]
    fn reject_code(
        &mut self,
        id: &str,
        seq: u64,
        job_id: &str,
        w: Option<usize>,
        code: ErrorCode,
        nonce: u32,
        now: Millis,
    ) -> Verdict {
        let reason = match code {
            ErrorCode::Unauthorized | ErrorCode::NotSubscribed => Reason::Unauthorized,
            _ => Reason::Other,
        };
        self.engine.rejected(
            self.conn,
            seq,
            job_id,
            w.map(|w| &self.workers[w]),
            reason,
            nonce,
            self.channel.difficulty().as_f64(),
            now,
        );
        write::reply_error(self.out.own(), id, code);
        Verdict::Rejected(reason)
    }

    /// The connection ended: the workers leave the list.
    pub fn closed(&mut self, now: Millis) {
        self.flush_records();
        for w in self.workers.drain(..) {
            self.engine.detach_worker(&w, now);
        }
        self.engine.stats.connection_closed();
    }
}

/// One line's request, read by the server side every SV1 role shares
/// ([`sv1::server::handle_line`]) and answered by this session at `now`.
struct Request<'s> {
    session: &'s mut Session,
    now: Millis,
}

impl sv1::server::Handler for Request<'_> {
    type Outcome = LineKind;

    fn out(&mut self) -> &mut Vec<u8> {
        self.session.out.own()
    }

    fn bad_line(&mut self) {
        self.session.bad_line();
    }

    fn version(&self) -> &str {
        self.session.config.version
    }

    fn not_a_share(&self) -> LineKind {
        LineKind::Other
    }

    fn submit(&mut self, s: &sv1::server::Share<'_>) -> LineKind {
        LineKind::Share(self.session.submit(
            s.id,
            s.worker,
            s.job_id,
            s.extranonce2,
            s.ntime,
            s.nonce,
            s.version_bits,
            self.now,
        ))
    }

    fn malformed_submit(
        &mut self,
        id: &str,
        env: &sv1::Envelope<'_>,
        e: sv1::ParamError,
    ) -> LineKind {
        LineKind::Share(self.session.malformed_submit(id, env, e, self.now))
    }

    fn subscribe(&mut self, id: &str, _: &Subscribe<'_>) {
        self.session.subscribe(id, self.now);
    }

    fn authorize(&mut self, id: &str, a: &Authorize<'_>) {
        self.session.authorize(id, a, self.now);
    }

    fn configure(&mut self, id: &str, c: &Configure) {
        self.session.configure(id, c, self.now);
    }

    fn suggest(&mut self, id: &str, notification: bool, d: Difficulty) {
        self.session.suggest(id, notification, d, self.now);
    }

    fn extranonce_subscribe(&mut self) {
        self.session.extranonce_subscribed = true;
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
