//! One Stratum V1 miner connection as every role that serves miners runs it (the pool's front
//! end, the translator's and the SV1 farm proxy's device side), sans-IO: lines in, bytes out.
//!
//! The session holds what SV1 itself defines for a connection (subscription, authorized
//! workers, the `mining.configure` extensions, the difficulty the miner was told, malformed
//! lines, the bytes waiting to be written) and runs the protocol's flows the same way for every
//! role: subscribe and authorize in either order, work from the moment both are done, hints and
//! vardiff with the latest job re-sent under a fresh id after a change (firmware ignores a
//! notify whose id it has seen), the customary order of a share's checks and its error codes.
//!
//! What differs between roles is a [`Judge`]'s: which extranonce a miner gets, which workers it
//! takes, what work looks like, and what a share is worth (the pool's channel, or a proxy's
//! local check before it forwards). Time comes in with every call; nothing here reads a clock.

use std::sync::Arc;

use mining::Reject;
use primitives::{Difficulty, Timestamp};

use crate::outbox::Outbox;
use crate::server::{self, Handler, Share};
use crate::{write, Authorize, Configure, Envelope, ErrorCode, ParamError, Subscribe};

/// Why the session wants its connection closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// More malformed lines than the role tolerates.
    TooManyBadLines,
    /// A line longer than the limit.
    LineTooLong,
    /// The role has no extranonce left to give.
    Full,
    /// The extranonce the miner holds changed and the miner cannot be told.
    ExtranonceChanged,
    /// The role lost what it served the miner from (a proxy's own upstream channel).
    ChannelLost,
}

/// What a line was.
#[derive(Debug)]
pub enum Outcome<A> {
    /// A share the judge accepted, with what it gives the role.
    Accepted(A),
    /// A share the judge refused (stale, duplicate, low difficulty, ...), answered as such.
    Rejected(Reject),
    /// A share refused before its job was weighed (not subscribed, unknown worker, a
    /// malformed parameter, not stored), answered with this code.
    Refused(ErrorCode),
    /// Anything but a share.
    Other,
}

/// Why a share was refused, as the session answers it.
#[derive(Debug)]
pub enum Refusal {
    /// The judge's verdict.
    Reject(Reject),
    /// Before the share was weighed: the customary code and text.
    Code(ErrorCode),
    /// A parameter that did not parse (error 20 with what was wrong).
    Malformed(ParamError),
    /// Judged good but not kept (the role's store or queue could not take it): error 20 with
    /// this text, so that no share is acknowledged that was not kept.
    NotKept(&'static str),
}

/// What a `mining.subscribe` gets.
#[derive(Debug)]
pub enum Subscription {
    /// Its answer: the subscription id, the `extranonce1` and the extranonce2 size.
    Granted {
        /// Written as 16 hex digits.
        id: u64,
        /// The miner's extranonce1.
        extranonce1: Vec<u8>,
        /// Bytes of extranonce the miner rolls.
        extranonce2_size: usize,
    },
    /// Not yet: answered by [`Session::subscription_ready`].
    Wait,
    /// Never: the role has no extranonce left; answered with this text, and the connection
    /// closed.
    Full(&'static str),
}

/// A worker an authorize admitted.
#[derive(Debug)]
pub enum Admitted<W> {
    /// A name the connection already had.
    Known,
    /// A new one.
    New(W),
}

/// An accepted share as the judge returns it.
#[derive(Debug)]
pub struct Judged<A> {
    /// What the share gives the role.
    pub accepted: A,
    /// The difficulty before the share, when vardiff changed it: the session then tells the
    /// miner and re-sends the latest job.
    pub retarget_from: Option<Difficulty>,
}

/// What a share refused before it was weighed is known by, for the role's records.
#[derive(Clone, Copy, Debug)]
pub struct ShareRef<'a> {
    /// The request id's raw text.
    pub id: &'a str,
    /// The job id as sent.
    pub job_id: &'a str,
    /// The header nonce (0 when it did not parse).
    pub nonce: u32,
}

/// What a role decides for its SV1 connections. Every method gets the role's context
/// (`Cx`, what the role lends its connections while one of them handles something) and the
/// connection's common state where it writes to the miner.
pub trait Judge {
    /// A worker the connection authorized.
    type Worker;
    /// Work as the role hands it to every connection.
    type Work: Clone;
    /// What an accepted share gives the role.
    type Accepted;
    /// The role's context for one call.
    type Cx<'a>;

    /// The worker's name, as submits name it.
    fn worker_name(w: &Self::Worker) -> &str;
    /// Returned by `client.get_version`.
    fn version(&self, cx: &Self::Cx<'_>) -> &'static str;
    /// Names a connection may authorize.
    fn max_workers(&self, cx: &Self::Cx<'_>) -> usize;
    /// Malformed lines tolerated before the connection is closed.
    fn max_bad_lines(&self, cx: &Self::Cx<'_>) -> u32;

    /// A `mining.subscribe` (`again`: the connection had subscribed before).
    fn subscribe(&mut self, cx: &mut Self::Cx<'_>, again: bool) -> Subscription;
    /// A worker whose name has the right form and fits the connection's allowance; `None`
    /// refuses it (error 24).
    fn admit(
        &mut self,
        cx: &mut Self::Cx<'_>,
        a: &Authorize<'_>,
        known: bool,
        now: Timestamp,
    ) -> Option<Admitted<Self::Worker>>;

    /// The version bits the role lets miners roll.
    fn offered_version_mask(&self, cx: &Self::Cx<'_>) -> u32;
    /// The version bits this miner was granted.
    fn set_version_mask(&mut self, mask: u32);
    /// The share difficulty now.
    fn difficulty(&self) -> Difficulty;
    /// Sets the difficulty (a hint); returns the one in force (vardiff's bounds apply).
    fn set_difficulty(&mut self, d: Difficulty, now: Timestamp) -> Difficulty;
    /// The floor the miner asked for (`minimum-difficulty`).
    fn set_minimum(&mut self, d: Difficulty, now: Timestamp);
    /// Vardiff for a quiet miner: whether the difficulty changed.
    fn vardiff_tick(&mut self, now: Timestamp) -> bool;
    /// The difficulty the miner was just told (for the role's events).
    fn difficulty_sent(&mut self, _d: Difficulty) {}

    /// Whether the miner has been sent a job.
    fn is_working(&self) -> bool;
    /// The work a miner that just became ready starts on.
    fn current_work(&self, cx: &Self::Cx<'_>) -> Option<Self::Work>;
    /// Makes `work` this connection's job, returning its notify line (shared by every
    /// connection); `None` when it is not sent (already sent, or it cannot be: the judge may
    /// have written to the miner or asked to close).
    fn issue(
        &mut self,
        cx: &mut Self::Cx<'_>,
        conn: &mut Conn<Self::Worker>,
        work: &Self::Work,
        now: Timestamp,
    ) -> Option<Arc<[u8]>>;
    /// After a difficulty change from `old` (already told): the latest job again under a fresh
    /// id, written by the judge, so that the miner applies the difficulty at once.
    fn reissue(
        &mut self,
        cx: &mut Self::Cx<'_>,
        conn: &mut Conn<Self::Worker>,
        old: Difficulty,
        now: Timestamp,
    );

    /// Judges a share from `conn.workers()[worker]`. On acceptance the session writes the
    /// acknowledgement next, at the end of `conn`'s own bytes.
    fn judge(
        &mut self,
        cx: &mut Self::Cx<'_>,
        conn: &mut Conn<Self::Worker>,
        worker: usize,
        share: &Share<'_>,
        now: Timestamp,
    ) -> Result<Judged<Self::Accepted>, Refusal>;
    /// Whether `job_id` names a job this miner may still submit to (asked of a share whose
    /// parameters did not parse, which is answered in the customary order).
    fn check_job(&self, _cx: &Self::Cx<'_>, _job_id: &str) -> Result<(), Reject> {
        Ok(())
    }
    /// A share was refused (by the session or the judge), for the role's records.
    fn refused(
        &mut self,
        _cx: &mut Self::Cx<'_>,
        _worker: Option<&Self::Worker>,
        _share: ShareRef<'_>,
        _why: &Refusal,
        _now: Timestamp,
    ) {
    }
}

/// What SV1 defines for one connection, whichever role serves it.
#[derive(Debug)]
pub struct Conn<W> {
    out: Outbox,
    workers: Vec<W>,
    /// The id of a subscribe waiting for the role (see [`Subscription::Wait`]). Boxed twice
    /// for a thin pointer: every connection pays for this field, only a proxy's early
    /// subscribes use it.
    #[allow(clippy::box_collection)]
    pending_subscribe: Option<Box<String>>,
    /// The difficulty the miner was last told; 0 before the first (a difficulty is never 0),
    /// which keeps the field at 8 bytes.
    sent_difficulty: f64,
    /// Malformed lines so far (saturating; small, as every connection pays for it).
    bad_lines: u16,
    subscribed: bool,
    /// The miner opted in to `mining.set_extranonce`.
    extranonce_subscribed: bool,
    close: Option<Close>,
}

impl<W> Conn<W> {
    /// Where replies and other lines to the miner are appended.
    pub fn out(&mut self) -> &mut Vec<u8> {
        self.out.own()
    }

    /// The bytes waiting to be written, the shared job line among them.
    pub fn outbox(&mut self) -> &mut Outbox {
        &mut self.out
    }

    /// The workers authorized, in order.
    pub fn workers(&self) -> &[W] {
        &self.workers
    }

    /// The workers authorized, to update.
    pub fn workers_mut(&mut self) -> &mut [W] {
        &mut self.workers
    }

    /// Whether the miner subscribed.
    pub fn is_subscribed(&self) -> bool {
        self.subscribed
    }

    /// Whether the miner accepts `mining.set_extranonce`.
    pub fn extranonce_subscribed(&self) -> bool {
        self.extranonce_subscribed
    }

    /// Asks for the connection to be closed.
    pub fn close(&mut self, why: Close) {
        self.close = Some(why);
    }
}

/// One SV1 connection: the protocol's state and flows, and the role's [`Judge`].
#[derive(Debug)]
pub struct Session<J: Judge> {
    judge: J,
    conn: Conn<J::Worker>,
}

impl<J: Judge> Session<J> {
    /// A connection just opened, not yet subscribed.
    pub fn new(judge: J) -> Self {
        Session {
            judge,
            conn: Conn {
                out: Outbox::default(),
                workers: Vec::new(),
                pending_subscribe: None,
                sent_difficulty: 0.0,
                bad_lines: 0,
                subscribed: false,
                extranonce_subscribed: false,
                close: None,
            },
        }
    }

    /// The role's side of the connection.
    pub fn judge(&self) -> &J {
        &self.judge
    }

    /// The role's side of the connection, to update.
    pub fn judge_mut(&mut self) -> &mut J {
        &mut self.judge
    }

    /// Both sides at once.
    pub fn parts_mut(&mut self) -> (&mut J, &mut Conn<J::Worker>) {
        (&mut self.judge, &mut self.conn)
    }

    /// The workers authorized, in order.
    pub fn workers(&self) -> &[J::Worker] {
        &self.conn.workers
    }

    /// Takes the workers out (the connection ended: each leaves once).
    pub fn take_workers(&mut self) -> Vec<J::Worker> {
        std::mem::take(&mut self.conn.workers)
    }

    /// What to write next, in order: own bytes, the shared job line, own bytes.
    pub fn poll_transmit(&self) -> [&[u8]; 3] {
        self.conn.out.pending()
    }

    /// The first `n` bytes of [`Session::poll_transmit`] were written.
    pub fn transmitted(&mut self, n: usize) {
        self.conn.out.consume(n);
    }

    /// Everything pending as one buffer (the shared line copied in), marked transmitted: for a
    /// shell that hands the bytes to another task instead of writing them itself.
    pub fn take_output(&mut self) -> Vec<u8> {
        let bytes = self.poll_transmit().concat();
        self.transmitted(bytes.len());
        // What was handed over is the other task's now: an idle connection keeps no buffer.
        self.conn.out.release();
        bytes
    }

    /// Why the connection should be closed; `None` while it should not.
    pub fn wants_close(&self) -> Option<Close> {
        self.conn.close
    }

    /// Asks for the connection to be closed.
    pub fn close(&mut self, why: Close) {
        self.conn.close = Some(why);
    }

    /// Whether the miner has been sent a job.
    pub fn is_working(&self) -> bool {
        self.judge.is_working()
    }

    /// The miner subscribed and authorized at least one worker (whether or not it has work).
    pub fn is_authorized(&self) -> bool {
        self.conn.subscribed && !self.conn.workers.is_empty()
    }

    /// Whether the miner subscribed.
    pub fn is_subscribed(&self) -> bool {
        self.conn.subscribed
    }

    /// It asked for an extranonce (subscribed, or a subscribe waits for the role).
    pub fn wants_subscription(&self) -> bool {
        self.conn.subscribed || self.conn.pending_subscribe.is_some()
    }

    /// Whether the miner accepts `mining.set_extranonce`.
    pub fn extranonce_subscribed(&self) -> bool {
        self.conn.extranonce_subscribed
    }

    /// A line longer than the limit arrived: answer and close.
    pub fn line_too_long(&mut self) {
        write::reply_error_message(self.conn.out(), "null", 20, "Line too long");
        self.conn.close = Some(Close::LineTooLong);
    }

    /// Tells the miner to reconnect (graceful shutdown).
    pub fn reconnect(&mut self, host: &str, port: u16, wait_secs: u32) {
        write::reconnect(self.conn.out(), host, port, wait_secs);
    }

    /// Handles one line from the miner (without its newline); replies go to the output.
    pub fn handle_line(
        &mut self,
        line: &[u8],
        now: Timestamp,
        cx: &mut J::Cx<'_>,
    ) -> Outcome<J::Accepted> {
        server::handle_line(
            &mut Request {
                session: self,
                cx,
                now,
            },
            line,
        )
    }

    /// New work from the role, for a miner that is ready for it.
    pub fn handle_work(&mut self, work: &J::Work, now: Timestamp, cx: &mut J::Cx<'_>) {
        if self.is_authorized() {
            self.send_job(work, now, cx);
        }
    }

    /// Vardiff for a quiet miner.
    pub fn handle_tick(&mut self, now: Timestamp, cx: &mut J::Cx<'_>) {
        if !self.judge.is_working() {
            return;
        }
        let old = self.judge.difficulty();
        if self.judge.vardiff_tick(now) {
            self.retarget(old, now, cx);
        }
    }

    /// The role can now answer a subscribe that waited ([`Subscription::Wait`]).
    pub fn subscription_ready(&mut self, now: Timestamp, cx: &mut J::Cx<'_>) {
        if let Some(id) = self.conn.pending_subscribe.take() {
            self.subscribe(&id, now, cx);
        }
    }

    /// The role will never answer a subscribe that waits: it is refused with `why`, and the
    /// connection closed as `close`.
    pub fn refuse_subscription(&mut self, why: &str, close: Close) {
        if let Some(id) = self.conn.pending_subscribe.take() {
            write::reply_error_message(self.conn.out(), &id, 20, why);
        }
        self.conn.close = Some(close);
    }

    fn bad_line(&mut self, cx: &J::Cx<'_>) {
        let c = &mut self.conn;
        c.bad_lines = c.bad_lines.saturating_add(1);
        if u32::from(c.bad_lines) > self.judge.max_bad_lines(cx) {
            c.close = Some(Close::TooManyBadLines);
        }
    }

    fn subscribe(&mut self, id: &str, now: Timestamp, cx: &mut J::Cx<'_>) {
        match self.judge.subscribe(cx, self.conn.subscribed) {
            Subscription::Granted {
                id: sub,
                extranonce1,
                extranonce2_size,
            } => {
                self.conn.subscribed = true;
                let sub = format!("{sub:016x}");
                let out = self.conn.out();
                write::reply_subscribe(out, id, &sub, &extranonce1, extranonce2_size);
                self.start_work(now, cx);
            }
            Subscription::Wait => self.conn.pending_subscribe = Some(Box::new(id.to_owned())),
            Subscription::Full(why) => {
                write::reply_error_message(self.conn.out(), id, 20, why);
                self.conn.close = Some(Close::Full);
            }
        }
    }

    fn authorize(&mut self, id: &str, a: &Authorize<'_>, now: Timestamp, cx: &mut J::Cx<'_>) {
        // The name stays exactly as sent: submits name the worker the same way.
        let name: &str = &a.user;
        let known = self.conn.workers.iter().any(|w| J::worker_name(w) == name);
        let ok = server::worker_name_ok(name)
            && (known || self.conn.workers.len() < self.judge.max_workers(cx));
        let admitted = if ok {
            self.judge.admit(cx, a, known, now)
        } else {
            None
        };
        let Some(admitted) = admitted else {
            write::reply_error(self.conn.out(), id, ErrorCode::Unauthorized);
            return;
        };
        if let Admitted::New(w) = admitted {
            // Most connections authorize one name: room for exactly that.
            self.conn.workers.reserve_exact(1);
            self.conn.workers.push(w);
        }
        if let Some(d) = a.difficulty_hint() {
            if !self.judge.is_working() {
                self.judge.set_difficulty(Difficulty::saturating(d), now);
            }
        }
        write::reply_bool(self.conn.out(), id, true);
        self.start_work(now, cx);
    }

    fn configure(&mut self, id: &str, c: &Configure, now: Timestamp, cx: &J::Cx<'_>) {
        let offered = self.judge.offered_version_mask(cx);
        let agreed = server::configure(self.conn.out(), id, c, offered);
        if let Some(mask) = agreed.version_mask {
            self.judge.set_version_mask(mask);
        }
        if let Some(d) = agreed.minimum_difficulty {
            self.judge.set_minimum(d, now);
        }
        self.conn.extranonce_subscribed |= agreed.subscribe_extranonce;
    }

    fn suggest(
        &mut self,
        id: &str,
        notification: bool,
        d: Difficulty,
        now: Timestamp,
        cx: &mut J::Cx<'_>,
    ) {
        if !notification {
            write::reply_bool(self.conn.out(), id, true);
        }
        let old = self.judge.difficulty();
        let new = self.judge.set_difficulty(d, now);
        if new != old && self.judge.is_working() {
            self.retarget(old, now, cx);
        }
    }

    /// Sends the first job once the miner is subscribed and authorized.
    fn start_work(&mut self, now: Timestamp, cx: &mut J::Cx<'_>) {
        if self.judge.is_working() || !self.is_authorized() {
            return;
        }
        if let Some(work) = self.judge.current_work(cx) {
            self.send_job(&work, now, cx);
        }
    }

    fn send_job(&mut self, work: &J::Work, now: Timestamp, cx: &mut J::Cx<'_>) {
        let Some(notify) = self.judge.issue(cx, &mut self.conn, work, now) else {
            return;
        };
        self.send_difficulty_if_changed();
        self.conn.out.push_shared(notify);
    }

    fn send_difficulty_if_changed(&mut self) {
        let d = self.judge.difficulty();
        if self.conn.sent_difficulty != d.as_f64() {
            write::set_difficulty(self.conn.out(), d.as_f64());
            self.conn.sent_difficulty = d.as_f64();
            self.judge.difficulty_sent(d);
        }
    }

    /// The difficulty changed from `old`: tell the miner, with the latest job again.
    fn retarget(&mut self, old: Difficulty, now: Timestamp, cx: &mut J::Cx<'_>) {
        self.send_difficulty_if_changed();
        self.judge.reissue(cx, &mut self.conn, old, now);
    }

    // Every share: inlined into the reader's fast path.
    #[inline]
    fn submit(
        &mut self,
        s: &Share<'_>,
        now: Timestamp,
        cx: &mut J::Cx<'_>,
    ) -> Outcome<J::Accepted> {
        let share = ShareRef {
            id: s.id,
            job_id: s.job_id,
            nonce: s.nonce,
        };
        let w = match self.sender(Some(s.worker)) {
            Ok(w) => w,
            Err(why) => return self.refuse(None, share, why, now, cx),
        };
        match self.judge.judge(cx, &mut self.conn, w, s, now) {
            Ok(j) => {
                write::reply_bool(self.conn.out(), s.id, true);
                if let Some(old) = j.retarget_from {
                    self.retarget(old, now, cx);
                }
                Outcome::Accepted(j.accepted)
            }
            Err(why) => self.refuse(Some(w), share, why, now, cx),
        }
    }

    /// A submit whose parameters did not parse: still answered in the customary order (not
    /// subscribed, unknown worker, unknown or stale job, then the parameter).
    fn malformed_submit(
        &mut self,
        env: &Envelope<'_>,
        e: ParamError,
        now: Timestamp,
        cx: &mut J::Cx<'_>,
    ) -> Outcome<J::Accepted> {
        let share = ShareRef {
            id: env.id.unwrap_or("null"),
            job_id: env.params.get(1).and_then(|v| v.as_str()).unwrap_or(""),
            nonce: 0,
        };
        let w = match self.sender(env.params.get(0).and_then(|v| v.as_str())) {
            Ok(w) => w,
            Err(why) => return self.refuse(None, share, why, now, cx),
        };
        if let Err(r) = self.judge.check_job(cx, share.job_id) {
            return self.refuse(Some(w), share, Refusal::Reject(r), now, cx);
        }
        self.bad_line(cx);
        self.refuse(Some(w), share, Refusal::Malformed(e), now, cx)
    }

    /// The checks before any share is weighed: the connection subscribed (25), and `worker`
    /// is one it authorized (24); the worker's index.
    #[inline]
    fn sender(&self, worker: Option<&str>) -> Result<usize, Refusal> {
        if !self.conn.subscribed {
            return Err(Refusal::Code(ErrorCode::NotSubscribed));
        }
        worker
            .and_then(|n| {
                self.conn
                    .workers
                    .iter()
                    .position(|w| J::worker_name(w) == n)
            })
            .ok_or(Refusal::Code(ErrorCode::Unauthorized))
    }

    /// Answers a refused share and tells the judge.
    fn refuse(
        &mut self,
        worker: Option<usize>,
        share: ShareRef<'_>,
        why: Refusal,
        now: Timestamp,
        cx: &mut J::Cx<'_>,
    ) -> Outcome<J::Accepted> {
        let worker_ref = worker.map(|w| &self.conn.workers[w]);
        self.judge.refused(cx, worker_ref, share, &why, now);
        let out = self.conn.out.own();
        match why {
            Refusal::Reject(r) => {
                write::reply_error_message(out, share.id, r.sv1_code(), r.message());
                Outcome::Rejected(r)
            }
            Refusal::Code(c) => {
                write::reply_error(out, share.id, c);
                Outcome::Refused(c)
            }
            Refusal::Malformed(e) => {
                write::reply_error_message(out, share.id, 20, &e.to_string());
                Outcome::Refused(ErrorCode::Other)
            }
            Refusal::NotKept(message) => {
                write::reply_error_message(out, share.id, 20, message);
                Outcome::Refused(ErrorCode::Other)
            }
        }
    }
}

/// One line's request, read by [`server::handle_line`] and answered by the session at `now`.
struct Request<'s, 'c, 'x, J: Judge> {
    session: &'s mut Session<J>,
    cx: &'c mut J::Cx<'x>,
    now: Timestamp,
}

impl<J: Judge> Handler for Request<'_, '_, '_, J> {
    type Outcome = Outcome<J::Accepted>;

    fn out(&mut self) -> &mut Vec<u8> {
        self.session.conn.out()
    }

    fn bad_line(&mut self) {
        self.session.bad_line(self.cx);
    }

    fn version(&self) -> &str {
        self.session.judge.version(self.cx)
    }

    fn not_a_share(&self) -> Self::Outcome {
        Outcome::Other
    }

    #[inline]
    fn submit(&mut self, s: &Share<'_>) -> Self::Outcome {
        self.session.submit(s, self.now, self.cx)
    }

    fn malformed_submit(&mut self, _id: &str, env: &Envelope<'_>, e: ParamError) -> Self::Outcome {
        self.session.malformed_submit(env, e, self.now, self.cx)
    }

    fn subscribe(&mut self, id: &str, _: &Subscribe<'_>) {
        self.session.subscribe(id, self.now, self.cx);
    }

    fn authorize(&mut self, id: &str, a: &Authorize<'_>) {
        self.session.authorize(id, a, self.now, self.cx);
    }

    fn configure(&mut self, id: &str, c: &Configure) {
        self.session.configure(id, c, self.now, self.cx);
    }

    fn suggest(&mut self, id: &str, notification: bool, d: Difficulty) {
        self.session.suggest(id, notification, d, self.now, self.cx);
    }

    fn extranonce_subscribe(&mut self) {
        self.session.conn.extranonce_subscribed = true;
    }
}
