//! One SV1 device behind the translator: the SV1 session every role that serves miners runs
//! ([`sv1::session`]), judged by a local check before the translator forwards ([`LocalCheck`]).
//!
//! The device speaks SV1 as it would to a pool, with the pool front end's rules (the session is
//! the same). What is the translator's: a device's `extranonce1` starts with the upstream
//! channel's prefix, so a subscribe that arrives before the channel is open is answered once it
//! opens; vardiff per device with a grace period after a change; the version bits offered are
//! ours AND the upstream's.
//!
//! A job's notify line is the one shared by every device (see [`crate::jobs`]); it is spliced
//! into the device's output, never copied. After a difficulty change the device gets the new
//! difficulty and the latest job again under a fresh id (firmware ignores a notify whose id it
//! has seen), written for it alone.

use std::sync::Arc;

use mining::vardiff::Vardiff;
use mining::Reject;
use primitives::Timestamp;
use primitives::{Difficulty, Target};
use sv1::server::Share;
use sv1::session::{Admitted, Conn, Judge, Judged, Outcome, Refusal, Session, Subscription};
use sv1::write;
use sv1::{Authorize, ErrorCode};

use crate::config::TranslatorConfig;
use crate::extranonce::{DeviceExtranonce, ExtranonceAllocator, Layout};
use crate::jobs::{JobBook, Sv1Job};
use crate::shares::{DeviceJobs, LocalShare, ShareContext, Submitted};
use crate::DeviceId;

pub use sv1::session::Close;

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

/// What a line was: a share the device accepted (the translator decides whether it goes
/// upstream), one it rejected or refused (answered as such), or anything else.
pub type LineOutcome = Outcome<LocalShare>;

/// The translator's side of one device: its value of the channel's extranonce, the version
/// bits it was granted, vardiff, and the jobs it was sent, against which its shares are
/// checked before they are forwarded.
pub struct LocalCheck {
    id: DeviceId,
    extranonce: Option<DeviceExtranonce>,
    version_mask: u32,
    /// The extranonce prefix in the `extranonce1` the device holds (from the subscribe answer
    /// or the last `mining.set_extranonce`), and its extranonce2 size.
    told: Option<(Vec<u8>, usize)>,
    vardiff: Vardiff,
    jobs: DeviceJobs,
}

/// One SV1 device's session: the shared SV1 session with the translator's [`LocalCheck`].
/// Dereferences to the shared session for what is not the translator's own.
pub struct Device(Session<LocalCheck>);

impl std::ops::Deref for Device {
    type Target = Session<LocalCheck>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Device {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Device {
    /// A device just connected, at the starting difficulty, not yet subscribed.
    pub fn new(id: DeviceId, config: &TranslatorConfig, now: Timestamp) -> Self {
        Device(Session::new(LocalCheck {
            id,
            extranonce: None,
            version_mask: 0,
            told: None,
            vardiff: Vardiff::new(config.vardiff, config.start_difficulty, now),
            jobs: DeviceJobs::new(config.max_jobs),
        }))
    }

    /// The device's id.
    pub fn id(&self) -> DeviceId {
        self.judge().id
    }

    /// Its value of the channel's extranonce, once given one.
    pub fn extranonce(&self) -> Option<DeviceExtranonce> {
        self.judge().extranonce
    }

    /// Its current share difficulty (vardiff's).
    pub fn difficulty(&self) -> Difficulty {
        self.judge().vardiff.difficulty()
    }

    /// Its current share target.
    pub fn target(&self) -> Target {
        self.difficulty().to_target()
    }

    /// The hash rate vardiff measured, in hashes per second.
    pub fn measured_hash_rate(&self) -> Option<f64> {
        self.judge()
            .vardiff
            .rate_per_second()
            .map(|r| r * 4_294_967_296.0)
    }

    /// It asked for an extranonce (subscribed, or a subscribe waits for the channel): only an
    /// upstream channel can give one.
    pub fn wants_extranonce(&self) -> bool {
        self.wants_subscription()
    }

    /// The first name it authorized, if any.
    pub fn worker(&self) -> Option<&str> {
        self.workers().first().map(String::as_str)
    }

    /// Per-device mode: its own channel was refused or closed by the pool. A subscribe still
    /// waiting is answered with the reason; either way the connection ends (the firmware
    /// reconnects and asks again).
    pub fn channel_lost(&mut self, why: &str) {
        let msg = format!("Upstream refused the channel: {why}");
        self.refuse_subscription(&msg, Close::ChannelLost);
    }

    /// The first `n` bytes of the pending output were written.
    pub fn transmitted(&mut self, n: usize) {
        self.0.transmitted(n);
        let (_, conn) = self.0.parts_mut();
        if conn.outbox().is_empty() {
            conn.outbox().release();
        }
    }

    /// The latest job this device was sent, by SV1 id.
    pub fn latest_job(&self) -> Option<(u64, &Arc<Sv1Job>)> {
        self.judge().jobs.latest()
    }

    /// Handles one line from the device (without its newline): what it was.
    pub fn handle_line(&mut self, line: &[u8], now: Timestamp, link: &mut Link<'_>) -> LineOutcome {
        self.0.handle_line(line, now, link)
    }

    /// The upstream channel opened: a subscribe that waited for it is answered.
    pub fn handle_channel_open(&mut self, now: Timestamp, link: &mut Link<'_>) {
        self.0.subscription_ready(now, link);
    }

    /// The channel's extranonce prefix changed: the device's `extranonce1` with it. A device
    /// that opted in is told (`mining.set_extranonce`, applied from its next job); the others
    /// must reconnect.
    pub fn handle_extranonce_prefix(&mut self, prefix: &[u8], extranonce2_size: usize) {
        let subscribed = self.is_subscribed();
        let (check, conn) = self.0.parts_mut();
        let Some(e) = check.extranonce.filter(|_| subscribed) else {
            return;
        };
        check.tell_extranonce(conn, e, prefix, extranonce2_size);
    }

    /// The upstream lets devices roll fewer version bits than this device was granted (an SV1
    /// pool answered `mining.configure` with less, or sent `mining.set_version_mask`): its mask
    /// narrows to them, and it is told (`mining.set_version_mask`, BIP310), so that it rolls no
    /// bit the upstream would not take.
    pub fn narrow_version_mask(&mut self, upstream_mask: u32) {
        let (check, conn) = self.0.parts_mut();
        if check.version_mask & !upstream_mask != 0 {
            check.version_mask &= upstream_mask;
            write::set_version_mask(conn.out(), check.version_mask);
        }
    }

    /// A new upstream channel splits its extranonce differently: the device gets a value in
    /// the new split and is told as [`Device::handle_extranonce_prefix`] tells it (the old value
    /// belonged to an allocator that is gone).
    pub fn handle_new_layout(&mut self, prefix: &[u8], alloc: &mut ExtranonceAllocator) {
        if self.extranonce().is_none() || !self.is_subscribed() {
            return;
        }
        let (check, conn) = self.0.parts_mut();
        check.extranonce = alloc.allocate();
        let Some(e) = check.extranonce else {
            conn.close(Close::Full);
            return;
        };
        check.tell_extranonce(conn, e, prefix, alloc.layout().extranonce2_size);
    }

    /// New work from upstream, already translated.
    pub fn handle_job(&mut self, job: &Arc<Sv1Job>, now: Timestamp, link: &mut Link<'_>) {
        self.0.handle_work(job, now, link);
    }

    /// Vardiff for a quiet device.
    pub fn handle_tick(&mut self, now: Timestamp, link: &mut Link<'_>) {
        self.0.handle_tick(now, link);
    }

    /// The connection ended: its extranonce value goes back to the channel.
    pub fn closed(&mut self, alloc: Option<&mut ExtranonceAllocator>) {
        if let (Some(e), Some(a)) = (self.0.judge_mut().extranonce.take(), alloc) {
            a.release(e);
        }
    }
}

impl LocalCheck {
    /// Tells a device that opted in its new `extranonce1` (applied from its next job); one
    /// that did not must reconnect.
    fn tell_extranonce(
        &mut self,
        conn: &mut Conn<String>,
        e: DeviceExtranonce,
        prefix: &[u8],
        extranonce2_size: usize,
    ) {
        if !conn.extranonce_subscribed() {
            conn.close(Close::ExtranonceChanged);
            return;
        }
        let mut en1 = prefix.to_vec();
        e.write(&mut en1);
        write::set_extranonce(conn.out(), &en1, extranonce2_size);
        self.told = Some((prefix.to_vec(), extranonce2_size));
    }

    /// Whether `job` may be sent: the `extranonce1` the device holds must be the one the job is
    /// judged with, the job's own prefix (a job keeps the prefix it arrived under, so a future
    /// job activated after a `SetExtranoncePrefix` has the old one) and the device's bytes. A
    /// device that opted in is told (`mining.set_extranonce` applies from its next job); the
    /// others cannot be, and are closed.
    fn holds_prefix_of(&mut self, conn: &mut Conn<String>, job: &Sv1Job) -> bool {
        let prefix = job.extranonce_prefix();
        let (Some((told, en2)), Some(e)) = (&self.told, self.extranonce) else {
            return true;
        };
        if told[..] == *prefix {
            return true;
        }
        let en2 = *en2;
        self.tell_extranonce(conn, e, prefix, en2);
        conn.extranonce_subscribed()
    }
}

impl Judge for LocalCheck {
    type Worker = String;
    type Work = Arc<Sv1Job>;
    type Accepted = LocalShare;
    type Cx<'a> = Link<'a>;

    fn worker_name(w: &String) -> &str {
        w
    }

    fn version(&self, link: &Link<'_>) -> &'static str {
        link.config.version
    }

    fn max_workers(&self, link: &Link<'_>) -> usize {
        link.config.max_workers
    }

    fn max_bad_lines(&self, _: &Link<'_>) -> u32 {
        MAX_BAD_LINES
    }

    fn subscribe(&mut self, link: &mut Link<'_>, again: bool) -> Subscription {
        let Some((prefix, alloc)) = link.extranonce.as_mut() else {
            return Subscription::Wait;
        };
        // Subscribed before: the same answer again.
        let e = match self.extranonce {
            Some(e) => e,
            None if again => return Subscription::Wait,
            None => match alloc.allocate() {
                Some(e) => e,
                None => return Subscription::Full("Translator full"),
            },
        };
        self.extranonce = Some(e);
        let extranonce2_size = alloc.layout().extranonce2_size;
        self.told = Some((prefix.to_vec(), extranonce2_size));
        let mut extranonce1 = prefix.to_vec();
        e.write(&mut extranonce1);
        Subscription::Granted {
            id: self.id.0,
            extranonce1,
            extranonce2_size,
        }
    }

    fn admit(
        &mut self,
        _: &mut Link<'_>,
        a: &Authorize<'_>,
        known: bool,
        _: Timestamp,
    ) -> Option<Admitted<String>> {
        Some(match known {
            true => Admitted::Known,
            false => Admitted::New(a.user.to_string()),
        })
    }

    fn offered_version_mask(&self, link: &Link<'_>) -> u32 {
        link.config.version_mask & link.upstream_mask
    }

    fn set_version_mask(&mut self, mask: u32) {
        self.version_mask = mask;
    }

    fn difficulty(&self) -> Difficulty {
        self.vardiff.difficulty()
    }

    fn set_difficulty(&mut self, d: Difficulty, now: Timestamp) -> Difficulty {
        self.vardiff.set(d, now)
    }

    fn set_minimum(&mut self, d: Difficulty, _: Timestamp) {
        self.vardiff.set_minimum(d);
    }

    fn vardiff_tick(&mut self, now: Timestamp) -> bool {
        self.vardiff.handle_tick(now).is_some()
    }

    fn is_working(&self) -> bool {
        !self.jobs.is_empty()
    }

    fn current_work(&self, link: &Link<'_>) -> Option<Arc<Sv1Job>> {
        link.book.latest().cloned()
    }

    fn issue(
        &mut self,
        _: &mut Link<'_>,
        conn: &mut Conn<String>,
        job: &Arc<Sv1Job>,
        now: Timestamp,
    ) -> Option<Arc<[u8]>> {
        if !self.holds_prefix_of(conn, job) {
            return None;
        }
        self.jobs
            .issue(job.id, job.clone(), self.vardiff.difficulty(), now);
        Some(job.notify.clone())
    }

    /// Shares on the old difficulty's jobs keep their credit through the grace period; the
    /// latest job goes again under a fresh id if it is still the current prev hash's work.
    fn reissue(
        &mut self,
        link: &mut Link<'_>,
        conn: &mut Conn<String>,
        old: Difficulty,
        now: Timestamp,
    ) {
        self.jobs
            .difficulty_changed(old, now.plus_millis(link.config.grace_ms));
        let Some((_, job)) = self.jobs.latest() else {
            return;
        };
        let job = job.clone();
        if job.epoch != link.book.epoch() || !self.holds_prefix_of(conn, &job) {
            return;
        }
        let wire = link.book.fresh_id();
        job.write_notify(conn.out(), wire);
        self.jobs.issue(wire, job, self.vardiff.difficulty(), now);
    }

    fn judge(
        &mut self,
        link: &mut Link<'_>,
        _: &mut Conn<String>,
        _: usize,
        s: &Share<'_>,
        now: Timestamp,
    ) -> Result<Judged<LocalShare>, Refusal> {
        let Some(extranonce2) = s.extranonce2 else {
            // Unreadable extranonce2: judged after the job, as a malformed parameter.
            self.check_job(link, s.job_id).map_err(Refusal::Reject)?;
            return Err(Refusal::Reject(Reject::ExtranonceSize));
        };
        let (Some(e), Some(layout)) = (self.extranonce, link.layout) else {
            return Err(Refusal::Code(ErrorCode::NotSubscribed));
        };
        let cx = ShareContext {
            extranonce: e,
            extranonce2_size: layout.extranonce2_size,
            version_mask: self.version_mask,
            epoch: link.book.epoch(),
            max_ntime_ahead: link.config.max_ntime_ahead,
            now,
        };
        let sub = Submitted {
            job_id: s.job_id,
            extranonce2,
            ntime: s.ntime,
            nonce: s.nonce,
            version_bits: s.version_bits,
        };
        let share = self.jobs.judge(&sub, &cx).map_err(Refusal::Reject)?;
        let old = self.vardiff.difficulty();
        let retargeted = self.vardiff.handle_share(share.difficulty, now).is_some();
        Ok(Judged {
            accepted: share,
            retarget_from: retargeted.then_some(old),
        })
    }

    fn check_job(&self, link: &Link<'_>, job_id: &str) -> Result<(), Reject> {
        self.jobs.check_job(job_id, link.book.epoch())
    }
}
