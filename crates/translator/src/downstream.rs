//! One SV1 device behind the translator, sans-IO: lines in, bytes out, shares judged.
//!
//! The device speaks SV1 as it would to a pool, with the pool front end's rules: configure
//! (version rolling granted as the miner's mask AND ours, minimum difficulty, subscribe
//! extranonce), subscribe and authorize in either order, suggest_difficulty / suggest_target as
//! hints, vardiff per device with a grace period after a change, the customary error codes. A
//! subscribe that arrives before the upstream channel is open is answered once it opens: the
//! device's `extranonce1` starts with the channel's prefix.
//!
//! A job's notify line is the one shared by every device (see [`crate::jobs`]); it is spliced
//! into the device's output, never copied. After a difficulty change the device gets the new
//! difficulty and the latest job again under a fresh id (firmware ignores a notify whose id it
//! has seen), written for it alone.

use std::sync::Arc;

use mining::vardiff::Vardiff;
use mining::Reject;
use primitives::Millis;
use primitives::{Difficulty, Target};
use sv1::outbox::Outbox;
use sv1::write;
use sv1::{Authorize, Configure, ErrorCode};

use crate::config::TranslatorConfig;
use crate::extranonce::{DeviceExtranonce, ExtranonceAllocator, Layout};
use crate::jobs::{JobBook, Sv1Job};
use crate::shares::{DeviceJobs, LocalShare, ShareContext, Submitted};
use crate::DeviceId;

/// Malformed lines tolerated before the connection is closed.
pub const MAX_BAD_LINES: u32 = 16;

/// What the device needs from the translator while it handles something.
pub struct Link<'a> {
    /// The translator's settings.
    pub config: &'a TranslatorConfig,
    /// The SV1 jobs, shared by every device.
    pub book: &'a mut JobBook,
    /// The channel's prefix and the device values, once the channel is open.
    pub extranonce: Option<(&'a [u8], &'a mut ExtranonceAllocator)>,
    /// The split of the extranonce devices hold, kept while an upstream is replaced (a share
    /// on the lost upstream's work is then judged, and found stale, rather than refused).
    pub layout: Option<Layout>,
    /// The version bits the upstream lets devices roll.
    pub upstream_mask: u32,
}

/// What a line was.
#[derive(Debug)]
pub enum LineOutcome {
    /// A share the device accepted: the translator decides whether it goes upstream.
    Accepted(LocalShare),
    /// A share the device refused (stale, duplicate, low difficulty, ...), answered as such.
    Rejected(Reject),
    /// A share refused before its job was looked at (not subscribed, unknown worker,
    /// unreadable).
    Refused(ErrorCode),
    /// Anything but a share (subscribe, authorize, configure, a malformed line, ...).
    Other,
}

/// Why the device wants its connection closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// More than [`MAX_BAD_LINES`] malformed lines.
    TooManyBadLines,
    /// A line longer than the limit.
    LineTooLong,
    /// Every device value of the channel is taken.
    Full,
    /// The channel's extranonce prefix changed and the device cannot be told.
    ExtranonceChanged,
    /// Per-device mode: the pool refused or closed this device's own channel.
    ChannelLost,
}

/// One SV1 device's session: subscription, workers, vardiff, its jobs and the lines to
/// write to it.
pub struct Device {
    id: DeviceId,
    extranonce: Option<DeviceExtranonce>,
    subscribed: bool,
    /// The id of a subscribe waiting for the channel to open.
    pending_subscribe: Option<String>,
    workers: Vec<String>,
    version_mask: u32,
    extranonce_subscribed: bool,
    /// The extranonce prefix in the `extranonce1` the device holds (from the subscribe answer
    /// or the last `mining.set_extranonce`), and its extranonce2 size.
    told: Option<(Vec<u8>, usize)>,
    vardiff: Vardiff,
    sent_difficulty: Option<Difficulty>,
    jobs: DeviceJobs,
    out: Outbox,
    bad_lines: u32,
    close: Option<Close>,
}

impl Device {
    /// A device just connected, at the starting difficulty, not yet subscribed.
    pub fn new(id: DeviceId, config: &TranslatorConfig, now: Millis) -> Self {
        Device {
            id,
            extranonce: None,
            subscribed: false,
            pending_subscribe: None,
            workers: Vec::new(),
            version_mask: 0,
            extranonce_subscribed: false,
            told: None,
            vardiff: Vardiff::new(config.vardiff, config.start_difficulty, now),
            sent_difficulty: None,
            jobs: DeviceJobs::new(config.max_jobs),
            out: Outbox::default(),
            bad_lines: 0,
            close: None,
        }
    }

    /// The device's id.
    pub fn id(&self) -> DeviceId {
        self.id
    }

    /// Its value of the channel's extranonce, once given one.
    pub fn extranonce(&self) -> Option<DeviceExtranonce> {
        self.extranonce
    }

    /// Its current share difficulty (vardiff's).
    pub fn difficulty(&self) -> Difficulty {
        self.vardiff.difficulty()
    }

    /// Its current share target.
    pub fn target(&self) -> Target {
        self.vardiff.difficulty().to_target()
    }

    /// The hash rate vardiff measured, in hashes per second.
    pub fn measured_hash_rate(&self) -> Option<f64> {
        self.vardiff.rate_per_second().map(|r| r * 4_294_967_296.0)
    }

    /// Whether it has a job to work on.
    pub fn is_working(&self) -> bool {
        !self.jobs.is_empty()
    }

    /// It asked for an extranonce (subscribed, or a subscribe waits for the channel): only an
    /// upstream channel can give one.
    pub fn wants_extranonce(&self) -> bool {
        self.subscribed || self.pending_subscribe.is_some()
    }

    /// The first name it authorized, if any.
    pub fn worker(&self) -> Option<&str> {
        self.workers.first().map(String::as_str)
    }

    /// Per-device mode: its own channel was refused or closed by the pool. A subscribe still
    /// waiting is answered with the reason; either way the connection ends (the firmware
    /// reconnects and asks again).
    pub fn channel_lost(&mut self, why: &str) {
        if let Some(id) = self.pending_subscribe.take() {
            let msg = format!("Upstream refused the channel: {why}");
            write::reply_error_message(self.out.own(), &id, 20, &msg);
        }
        self.close = Some(Close::ChannelLost);
    }

    /// Why it wants its connection closed; `None` while it does not.
    pub fn wants_close(&self) -> Option<Close> {
        self.close
    }

    /// What to write next, in order: own bytes, the shared notify line, own bytes.
    pub fn pending_output(&self) -> [&[u8]; 3] {
        self.out.pending()
    }

    /// The first `n` bytes of [`Device::pending_output`] were written.
    pub fn consume_output(&mut self, n: usize) {
        self.out.consume(n);
        if self.out.is_empty() {
            self.out.release();
        }
    }

    /// Everything pending as one buffer (the shared line copied in), drained.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(self.out.flatten())
    }

    /// The latest job this device was sent, by SV1 id.
    pub fn latest_job(&self) -> Option<(u64, &Arc<Sv1Job>)> {
        self.jobs.latest()
    }

    /// A line longer than the limit arrived: answer and close.
    pub fn line_too_long(&mut self) {
        write::reply_error_message(self.out.own(), "null", 20, "Line too long");
        self.close = Some(Close::LineTooLong);
    }

    /// Handles one line from the device (without its newline): what it was.
    pub fn handle_line(&mut self, line: &[u8], now: Millis, link: &mut Link<'_>) -> LineOutcome {
        sv1::server::handle_line(
            &mut Request {
                device: self,
                link,
                now,
            },
            line,
        )
    }

    fn bad_line(&mut self) {
        self.bad_lines += 1;
        if self.bad_lines > MAX_BAD_LINES {
            self.close = Some(Close::TooManyBadLines);
        }
    }

    fn subscribe(&mut self, id: &str, now: Millis, link: &mut Link<'_>) {
        if self.subscribed {
            // Already has its extranonce: the same answer again.
            if let (Some(e), Some((prefix, alloc))) = (self.extranonce, &link.extranonce) {
                let en2 = alloc.layout().extranonce2_size;
                reply_subscribe(self.out.own(), id, self.id, prefix, e, en2);
                self.told = Some((prefix.to_vec(), en2));
            }
            return;
        }
        if link.extranonce.is_none() {
            self.pending_subscribe = Some(id.to_owned());
            return;
        }
        self.answer_subscribe(id, now, link);
    }

    fn answer_subscribe(&mut self, id: &str, now: Millis, link: &mut Link<'_>) {
        let Some((prefix, alloc)) = link.extranonce.as_mut() else {
            return;
        };
        let Some(e) = self.extranonce.or_else(|| alloc.allocate()) else {
            write::reply_error_message(self.out.own(), id, 20, "Translator full");
            self.close = Some(Close::Full);
            return;
        };
        self.extranonce = Some(e);
        self.subscribed = true;
        let en2 = alloc.layout().extranonce2_size;
        reply_subscribe(self.out.own(), id, self.id, prefix, e, en2);
        self.told = Some((prefix.to_vec(), en2));
        self.start_work(now, link);
    }

    /// The upstream channel opened: a subscribe that waited for it is answered.
    pub fn on_channel_open(&mut self, now: Millis, link: &mut Link<'_>) {
        if let Some(id) = self.pending_subscribe.take() {
            self.answer_subscribe(&id, now, link);
        }
    }

    /// The channel's extranonce prefix changed: the device's `extranonce1` with it. A device
    /// that opted in is told (`mining.set_extranonce`, applied from its next job); the others
    /// must reconnect.
    pub fn on_extranonce_prefix(&mut self, prefix: &[u8], extranonce2_size: usize) {
        let Some(e) = self.extranonce.filter(|_| self.subscribed) else {
            return;
        };
        if self.extranonce_subscribed {
            let mut en1 = prefix.to_vec();
            e.write(&mut en1);
            write::set_extranonce(self.out.own(), &en1, extranonce2_size);
            self.told = Some((prefix.to_vec(), extranonce2_size));
        } else {
            self.close = Some(Close::ExtranonceChanged);
        }
    }

    /// Whether `job` may be sent: the `extranonce1` the device holds must be the one the job is
    /// judged with, the job's own prefix (a job keeps the prefix it arrived under, so a future
    /// job activated after a `SetExtranoncePrefix` has the old one) and the device's bytes. A
    /// device that opted in is told (`mining.set_extranonce` applies from its next job); the
    /// others cannot be, and are closed.
    fn holds_prefix_of(&mut self, job: &Sv1Job) -> bool {
        let prefix = job.extranonce_prefix();
        let (Some((told, en2)), Some(e)) = (&self.told, self.extranonce) else {
            return true;
        };
        if told[..] == *prefix {
            return true;
        }
        if !self.extranonce_subscribed {
            self.close = Some(Close::ExtranonceChanged);
            return false;
        }
        let en2 = *en2;
        let mut en1 = prefix.to_vec();
        e.write(&mut en1);
        write::set_extranonce(self.out.own(), &en1, en2);
        self.told = Some((prefix.to_vec(), en2));
        true
    }

    /// The upstream lets devices roll fewer version bits than this device was granted (an SV1
    /// pool answered `mining.configure` with less, or sent `mining.set_version_mask`): its mask
    /// narrows to them, and it is told (`mining.set_version_mask`, BIP310), so that it rolls no
    /// bit the upstream would not take.
    pub fn narrow_version_mask(&mut self, upstream_mask: u32) {
        if self.version_mask & !upstream_mask != 0 {
            self.version_mask &= upstream_mask;
            write::set_version_mask(self.out.own(), self.version_mask);
        }
    }

    /// A new upstream channel splits its extranonce differently: the device gets a value in
    /// the new split and is told as [`Device::on_extranonce_prefix`] tells it (the old value
    /// belonged to an allocator that is gone).
    pub fn on_new_layout(&mut self, prefix: &[u8], alloc: &mut ExtranonceAllocator) {
        if self.extranonce.is_none() || !self.subscribed {
            return;
        }
        self.extranonce = alloc.allocate();
        if self.extranonce.is_none() {
            self.close = Some(Close::Full);
            return;
        }
        self.on_extranonce_prefix(prefix, alloc.layout().extranonce2_size);
    }

    fn authorize(&mut self, id: &str, a: &Authorize<'_>, now: Millis, link: &mut Link<'_>) {
        let name: &str = &a.user;
        let known = self.workers.iter().any(|w| w == name);
        let ok = sv1::server::worker_name_ok(name)
            && (known || self.workers.len() < link.config.max_workers);
        if !ok {
            write::reply_error(self.out.own(), id, ErrorCode::Unauthorized);
            return;
        }
        if !known {
            self.workers.push(name.to_owned());
        }
        if let Some(d) = a.difficulty_hint() {
            if !self.is_working() {
                self.vardiff.set(Difficulty::saturating(d), now);
            }
        }
        write::reply_bool(self.out.own(), id, true);
        self.start_work(now, link);
    }

    fn configure(&mut self, id: &str, c: &Configure, link: &Link<'_>) {
        let offered = link.config.version_mask & link.upstream_mask;
        let agreed = sv1::server::configure(self.out.own(), id, c, offered);
        if let Some(mask) = agreed.version_mask {
            self.version_mask = mask;
        }
        if let Some(d) = agreed.minimum_difficulty {
            self.vardiff.set_minimum(d);
        }
        self.extranonce_subscribed |= agreed.subscribe_extranonce;
    }

    fn suggest(
        &mut self,
        id: &str,
        notification: bool,
        d: Difficulty,
        now: Millis,
        link: &mut Link<'_>,
    ) {
        if !notification {
            write::reply_bool(self.out.own(), id, true);
        }
        let old = self.vardiff.difficulty();
        let new = self.vardiff.set(d, now);
        if new != old && self.is_working() {
            self.retargeted(old, now, link);
        }
    }

    fn start_work(&mut self, now: Millis, link: &mut Link<'_>) {
        if self.is_working() || !self.subscribed || self.workers.is_empty() {
            return;
        }
        if let Some(job) = link.book.latest().cloned() {
            self.send_job(&job, now);
        }
    }

    /// New work from upstream, already translated.
    pub fn on_job(&mut self, job: &Arc<Sv1Job>, now: Millis) {
        if self.subscribed && !self.workers.is_empty() {
            self.send_job(job, now);
        }
    }

    fn send_job(&mut self, job: &Arc<Sv1Job>, now: Millis) {
        if !self.holds_prefix_of(job) {
            return;
        }
        self.send_difficulty_if_changed();
        self.out.push_shared(job.notify.clone());
        self.jobs
            .issue(job.id, job.clone(), self.vardiff.difficulty(), now);
    }

    fn send_difficulty_if_changed(&mut self) {
        let d = self.vardiff.difficulty();
        if self.sent_difficulty != Some(d) {
            write::set_difficulty(self.out.own(), d.as_f64());
            self.sent_difficulty = Some(d);
        }
    }

    /// Vardiff for a quiet device.
    pub fn on_tick(&mut self, now: Millis, link: &mut Link<'_>) {
        if !self.is_working() {
            return;
        }
        let old = self.vardiff.difficulty();
        if self.vardiff.on_tick(now).is_some() {
            self.retargeted(old, now, link);
        }
    }

    /// The difficulty changed from `old`: tell the device, with the latest job again under a
    /// fresh id so that it applies at once.
    fn retargeted(&mut self, old: Difficulty, now: Millis, link: &mut Link<'_>) {
        self.jobs
            .difficulty_changed(old, now.plus(link.config.grace_ms));
        self.send_difficulty_if_changed();
        let Some((_, job)) = self.jobs.latest() else {
            return;
        };
        let job = job.clone();
        // Only the current prev hash's work is worth re-sending.
        if job.epoch != link.book.epoch() || !self.holds_prefix_of(&job) {
            return;
        }
        let wire = link.book.fresh_id();
        job.write_notify(self.out.own(), wire);
        self.jobs.issue(wire, job, self.vardiff.difficulty(), now);
    }

    fn submit(
        &mut self,
        id: &str,
        worker: &str,
        s: &Submitted<'_>,
        now: Millis,
        link: &mut Link<'_>,
    ) -> LineOutcome {
        if !self.subscribed {
            write::reply_error(self.out.own(), id, ErrorCode::NotSubscribed);
            return LineOutcome::Refused(ErrorCode::NotSubscribed);
        }
        if !self.workers.iter().any(|w| w == worker) {
            write::reply_error(self.out.own(), id, ErrorCode::Unauthorized);
            return LineOutcome::Refused(ErrorCode::Unauthorized);
        }
        let (Some(e), Some(layout)) = (self.extranonce, link.layout) else {
            write::reply_error(self.out.own(), id, ErrorCode::NotSubscribed);
            return LineOutcome::Refused(ErrorCode::NotSubscribed);
        };
        let cx = ShareContext {
            extranonce: e,
            extranonce2_size: layout.extranonce2_size,
            version_mask: self.version_mask,
            epoch: link.book.epoch(),
            max_ntime_ahead: link.config.max_ntime_ahead,
            now,
        };
        match self.jobs.judge(s, &cx) {
            Ok(share) => {
                write::reply_bool(self.out.own(), id, true);
                let old = self.vardiff.difficulty();
                if self.vardiff.on_share(share.difficulty, now).is_some() {
                    self.retargeted(old, now, link);
                }
                LineOutcome::Accepted(share)
            }
            Err(r) => {
                write::reply_error_message(self.out.own(), id, r.sv1_code(), r.message());
                LineOutcome::Rejected(r)
            }
        }
    }

    fn refuse_submit(&mut self, id: &str, worker: &str, r: Reject) -> LineOutcome {
        if !self.subscribed {
            write::reply_error(self.out.own(), id, ErrorCode::NotSubscribed);
            return LineOutcome::Refused(ErrorCode::NotSubscribed);
        }
        if !self.workers.iter().any(|w| w == worker) {
            write::reply_error(self.out.own(), id, ErrorCode::Unauthorized);
            return LineOutcome::Refused(ErrorCode::Unauthorized);
        }
        write::reply_error_message(self.out.own(), id, r.sv1_code(), r.message());
        LineOutcome::Rejected(r)
    }

    /// The connection ended: its extranonce value goes back to the channel.
    pub fn closed(&mut self, alloc: Option<&mut ExtranonceAllocator>) {
        if let (Some(e), Some(a)) = (self.extranonce.take(), alloc) {
            a.release(e);
        }
    }
}

fn reply_subscribe(
    out: &mut Vec<u8>,
    id: &str,
    device: DeviceId,
    prefix: &[u8],
    e: DeviceExtranonce,
    extranonce2_size: usize,
) {
    let mut en1 = [0u8; crate::upstream::MAX_EXTRANONCE + 4];
    en1[..prefix.len()].copy_from_slice(prefix);
    let (b, n) = e.bytes();
    en1[prefix.len()..prefix.len() + n].copy_from_slice(&b[4 - n..]);
    let sub = format!("{:016x}", device.0);
    write::reply_subscribe(out, id, &sub, &en1[..prefix.len() + n], extranonce2_size);
}

/// One line's request, read by the server side every SV1 role shares
/// ([`sv1::server::handle_line`]) and answered by this device with the translator's `link`.
struct Request<'d, 'l, 'a> {
    device: &'d mut Device,
    link: &'l mut Link<'a>,
    now: Millis,
}

impl sv1::server::Handler for Request<'_, '_, '_> {
    type Outcome = LineOutcome;

    fn out(&mut self) -> &mut Vec<u8> {
        self.device.out.own()
    }

    fn bad_line(&mut self) {
        self.device.bad_line();
    }

    fn version(&self) -> &str {
        self.link.config.version
    }

    fn not_a_share(&self) -> LineOutcome {
        LineOutcome::Other
    }

    fn submit(&mut self, s: &sv1::server::Share<'_>) -> LineOutcome {
        let Some(extranonce2) = s.extranonce2 else {
            return self
                .device
                .refuse_submit(s.id, s.worker, Reject::ExtranonceSize);
        };
        let sub = Submitted {
            job_id: s.job_id,
            extranonce2,
            ntime: s.ntime,
            nonce: s.nonce,
            version_bits: s.version_bits,
        };
        self.device
            .submit(s.id, s.worker, &sub, self.now, self.link)
    }

    fn malformed_submit(
        &mut self,
        id: &str,
        _: &sv1::Envelope<'_>,
        e: sv1::ParamError,
    ) -> LineOutcome {
        self.device.bad_line();
        write::reply_error_message(self.device.out.own(), id, 20, &e.to_string());
        LineOutcome::Refused(ErrorCode::Other)
    }

    fn subscribe(&mut self, id: &str, _: &sv1::Subscribe<'_>) {
        self.device.subscribe(id, self.now, self.link);
    }

    fn authorize(&mut self, id: &str, a: &Authorize<'_>) {
        self.device.authorize(id, a, self.now, self.link);
    }

    fn configure(&mut self, id: &str, c: &Configure) {
        self.device.configure(id, c, self.link);
    }

    fn suggest(&mut self, id: &str, notification: bool, d: Difficulty) {
        self.device
            .suggest(id, notification, d, self.now, self.link);
    }

    fn extranonce_subscribe(&mut self) {
        self.device.extranonce_subscribed = true;
    }
}
