//! The fleet's live counters, shared by every device task, and the observer that feeds them
//! and the event log.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use events::{EventSink, JobId, LinkCounter, Perspective, Reason, Side, Verdict};
use hdrhistogram::Histogram;
use primitives::Target;

use crate::device::{
    JobView, Observer, SentShare, ShareReply, ShareVerdict, StandardJobView, StandardShareReply,
    StandardShareView, Timestamp,
};

/// Rejections are counted per SV1 code 20..=25, then "false without an error", then any
/// other code.
pub const REJECT_SLOTS: usize = 8;

/// The label of a rejection slot (`rejected_by_code` keys).
pub fn reject_slot_name(slot: usize) -> &'static str {
    ["20", "21", "22", "23", "24", "25", "false", "other"][slot.min(REJECT_SLOTS - 1)]
}

fn reject_slot(code: Option<i64>) -> usize {
    match code {
        Some(c @ 20..=25) => (c - 20) as usize,
        None => 6,
        Some(_) => 7,
    }
}

/// Counters every device task updates (relaxed atomics: each is a sum read at the end or for
/// progress) and the latency histogram.
pub struct LiveStats {
    /// TCP connections open now.
    pub connected: AtomicI64,
    /// Devices subscribed and authorized now.
    pub ready: AtomicI64,
    /// TCP connections opened.
    pub connects: AtomicU64,
    /// Connection attempts that failed.
    pub connect_failures: AtomicU64,
    /// Connections closed.
    pub disconnects: AtomicU64,
    /// Jobs received.
    pub jobs: AtomicU64,
    /// Shares sent.
    pub shares_sent: AtomicU64,
    /// Shares accepted.
    pub accepted: AtomicU64,
    /// Shares rejected.
    pub rejected: AtomicU64,
    /// SV1 rejections by code slot ([`reject_slot_name`] names them).
    pub rejected_by_code: [AtomicU64; REJECT_SLOTS],
    /// Rejections in docs/metrics.md's vocabulary, in the order of `Reason::ALL`.
    rejected_by_reason: [AtomicU64; Reason::ALL.len()],
    /// SV2 rejections by the pool's error code (at most [`MAX_ERROR_CODES`] codes, the rest
    /// under "other").
    rejected_by_error_code: Mutex<BTreeMap<String, u64>>,
    /// Shares sent that got no verdict.
    pub unanswered: AtomicU64,
    /// Shares found and never sent.
    pub dropped: AtomicU64,
    /// Shares found and not yet settled: waiting to be written, or for their verdict. The drain
    /// at the end of a run waits for this to reach zero, so that a share found just before the
    /// run stops is sent and answered rather than counted as dropped or unanswered.
    pub in_flight: AtomicI64,
    /// Shares that also met the network target.
    pub blocks: AtomicU64,
    /// Header hashes computed.
    pub hashes: AtomicU64,
    /// The devices' own socket bytes, and their messages by type: the fleet counts its own
    /// traffic (docs/metrics.md `roles.<name>.net_*_bytes`, "Protocol cost"), reported as link
    /// `devices` (`LinkBytes`, `LinkMessages`) once a second.
    pub net: Arc<LinkCounter>,
    /// Lines or frames from the pool the devices could not use.
    pub protocol_errors: AtomicU64,
    /// Submit-to-reply latency in microseconds.
    latency_us: Mutex<Histogram<u64>>,
}

impl Default for LiveStats {
    fn default() -> Self {
        LiveStats {
            connected: AtomicI64::new(0),
            ready: AtomicI64::new(0),
            connects: AtomicU64::new(0),
            connect_failures: AtomicU64::new(0),
            disconnects: AtomicU64::new(0),
            jobs: AtomicU64::new(0),
            shares_sent: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            rejected_by_code: Default::default(),
            rejected_by_reason: Default::default(),
            rejected_by_error_code: Mutex::default(),
            unanswered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            in_flight: AtomicI64::new(0),
            blocks: AtomicU64::new(0),
            hashes: AtomicU64::new(0),
            net: LinkCounter::new("devices"),
            protocol_errors: AtomicU64::new(0),
            // 1 us to 1 h at three significant digits.
            latency_us: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"),
            ),
        }
    }
}

/// Distinct SV2 error codes counted by name; a pool inventing more lands in "other".
pub const MAX_ERROR_CODES: usize = 16;

impl LiveStats {
    fn count_verdict(&self, verdict: Verdict) {
        match verdict {
            Verdict::Accepted => {
                self.accepted.fetch_add(1, Relaxed);
            }
            Verdict::Rejected(reason) => {
                self.rejected.fetch_add(1, Relaxed);
                let i = Reason::ALL.iter().position(|r| *r == reason).unwrap_or(0);
                self.rejected_by_reason[i].fetch_add(1, Relaxed);
            }
        }
    }

    fn count_error_code(&self, code: &str) {
        let mut codes = self
            .rejected_by_error_code
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = codes.get_mut(code) {
            *n += 1;
        } else if codes.len() < MAX_ERROR_CODES {
            codes.insert(code.to_owned(), 1);
        } else {
            *codes.entry("other".to_owned()).or_insert(0) += 1;
        }
    }

    /// Rejections by reason (`stale`, `duplicate`, ...), both protocols.
    pub fn rejected_by_reason(&self) -> BTreeMap<String, u64> {
        Reason::ALL
            .iter()
            .zip(&self.rejected_by_reason)
            .map(|(r, n)| (r.as_str().to_owned(), n.load(Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// SV2 rejections by the pool's error code.
    pub fn rejected_by_error_code(&self) -> BTreeMap<String, u64> {
        self.rejected_by_error_code
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records one submit-to-reply latency, nanoseconds (kept in microseconds).
    pub fn record_latency(&self, latency_ns: u64) {
        let us = (latency_ns / 1000).max(1);
        if let Ok(mut h) = self.latency_us.lock() {
            h.saturating_record(us);
        }
    }

    /// A copy of the latency histogram (microseconds).
    pub fn latency_snapshot(&self) -> Histogram<u64> {
        self.latency_us
            .lock()
            .map(|h| h.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Reads a counter (relaxed).
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Relaxed)
    }
}

/// The observer device tasks hand their device: counts into [`LiveStats`] and writes events.
///
/// Events, each stamped with the `now` the shell passed in (the instant it read the bytes from
/// the socket, or wrote the share): `JobReceived` (job id as the pool spelled it, the prev hash
/// in internal order, the fingerprint of prev hash and merkle branch, the share target in force,
/// clean), `TargetChanged` (a `mining.set_difficulty` taking effect), `ShareSent` (seq = the
/// JSON-RPC id, nonce, ntime, the full header version, difficulty, the header hash) and
/// `ShareResult` (the verdict as received).
///
/// SV2 devices write the same kinds with the channel set and numeric job ids: `JobReceived`
/// without a fingerprint (a standard job carries only a merkle root: the lab joins it to the
/// pool's `JobSent` on channel and job id), a future job with `future` set and no prev hash,
/// then `JobActivated` when its `SetNewPrevHash` arrives (a future job counts from then);
/// `TargetChanged` for the channel's target (at open and on `SetTarget`); `ShareSent` with the
/// sequence number as seq; `ShareResult` for each share a batched `SubmitShares.Success`
/// settles, or a `SubmitShares.Error` with its code mapped onto docs/metrics.md's reasons. An unanswered share writes nothing: the lab counts a
/// `ShareSent` without its `ShareResult` as unanswered. With the sink disabled nothing is built:
/// every event sits behind [`EventSink::is_enabled`].
pub struct Tally<'a> {
    /// The counters to update.
    pub stats: &'a LiveStats,
    /// Where events go.
    pub events: &'a EventSink,
}

impl Tally<'_> {
    /// Writes the event `make` builds, stamped `now`; with the sink disabled nothing is built.
    fn emit<E: Into<events::EventKind>>(&self, now: Timestamp, make: impl FnOnce() -> E) {
        if self.events.is_enabled() {
            self.events.emit_at(now.as_nanos(), make());
        }
    }

    /// A share sent (a block too when it is one).
    fn count_sent(&self, block: bool) {
        self.stats.shares_sent.fetch_add(1, Relaxed);
        if block {
            self.stats.blocks.fetch_add(1, Relaxed);
        }
    }

    /// A verdict, `latency_ns` after its share was sent.
    fn count_result(&self, latency_ns: u64, verdict: Verdict) {
        self.stats.in_flight.fetch_sub(1, Relaxed);
        self.stats.record_latency(latency_ns);
        self.stats.count_verdict(verdict);
    }

    /// The target of the device's connection (SV1) or of its `channel` (SV2).
    fn target_changed_on(&self, device: u64, now: Timestamp, channel: Option<u32>, t: &Target) {
        self.emit(now, || events::TargetChanged {
            conn: device,
            channel,
            target: *t,
        });
    }
}

impl Observer for Tally<'_> {
    fn lines(&mut self, sent: bool, bytes: &[u8]) {
        if sent {
            self.stats
                .net
                .add_lines(Side::Client, false, bytes, sv1::line_kind);
        } else {
            self.stats
                .net
                .add_line(Side::Client, true, bytes, sv1::line_kind);
        }
    }

    fn frame(&mut self, sent: bool, extension_type: u16, msg_type: u8, payload: usize) {
        let net = &self.stats.net;
        sv2::transport::count_frame(net, Side::Client, !sent, extension_type, msg_type, payload);
    }

    fn handshake(&mut self, sent: bool, bytes: usize) {
        self.stats
            .net
            .add_message(Side::Client, !sent, events::HANDSHAKE, bytes, 0);
    }

    fn job_received(&mut self, device: u64, now: Timestamp, job: &JobView<'_>) {
        self.stats.jobs.fetch_add(1, Relaxed);
        self.emit(now, || events::JobReceived {
            device,
            channel: None,
            job_id: JobId::text(job.job_id),
            fingerprint: Some(events::fingerprint(job.prev_hash, job.merkle_branch)),
            prev_hash: Some(*job.prev_hash),
            target: *job.target,
            clean: job.clean,
            future: false,
        });
    }

    fn target_changed(&mut self, device: u64, now: Timestamp, _difficulty: f64, target: &Target) {
        self.target_changed_on(device, now, None, target);
    }

    fn share_found(&mut self, _device: u64, _now: Timestamp) {
        self.stats.in_flight.fetch_add(1, Relaxed);
    }

    fn share_sent(&mut self, device: u64, now: Timestamp, s: &SentShare<'_>) {
        self.count_sent(s.block);
        self.emit(now, || events::ShareSent {
            device,
            channel: None,
            seq: s.seq,
            job_id: JobId::text(s.job_id),
            nonce: s.nonce,
            ntime: s.ntime,
            version: s.version,
            difficulty: s.difficulty,
            hash: Some(*s.hash),
        });
    }

    fn share_result(&mut self, device: u64, now: Timestamp, r: &ShareReply<'_>) {
        self.count_result(r.latency_ns, r.verdict.to_event_verdict());
        if let ShareVerdict::Rejected(code) = r.verdict {
            self.stats.rejected_by_code[reject_slot(code)].fetch_add(1, Relaxed);
        }
        self.emit(now, || events::ShareResult {
            conn: device,
            channel: None,
            seq: r.seq,
            job_id: JobId::text(r.job_id),
            nonce: r.nonce,
            difficulty: r.difficulty,
            verdict: r.verdict.to_event_verdict(),
            // The device was told the verdict (the pool records it as Given).
            perspective: Perspective::Received,
        });
    }

    /// Writes no event: in the event file a `ShareSent` that no `ShareResult` with the same
    /// device and seq follows is the unanswered share, whether it timed out, was pushed out of
    /// the in-flight window, or lost its connection. A verdict arriving after the timeout is
    /// ignored, so the file never holds both.
    fn share_unanswered(&mut self, _device: u64, _now: Timestamp, _seq: u64) {
        self.stats.in_flight.fetch_sub(1, Relaxed);
        self.stats.unanswered.fetch_add(1, Relaxed);
    }

    fn share_dropped(&mut self, _device: u64, _now: Timestamp) {
        self.stats.in_flight.fetch_sub(1, Relaxed);
        self.stats.dropped.fetch_add(1, Relaxed);
    }

    fn ready(&mut self, _device: u64, _now: Timestamp) {
        self.stats.ready.fetch_add(1, Relaxed);
    }

    fn protocol_error(&mut self, device: u64, _now: Timestamp, what: &str) {
        self.stats.protocol_errors.fetch_add(1, Relaxed);
        tracing::debug!(device, "protocol error: {what}");
    }

    fn standard_job_received(&mut self, device: u64, now: Timestamp, job: &StandardJobView<'_>) {
        self.stats.jobs.fetch_add(1, Relaxed);
        self.emit(now, || events::JobReceived {
            device,
            channel: Some(job.channel),
            job_id: JobId::from(job.job_id),
            // A standard job carries only a merkle root: the lab ties it to its template
            // through the pool's JobSent on the same channel and job id.
            fingerprint: None,
            prev_hash: job.prev_hash.copied(),
            target: *job.target,
            // A future job replaces everything once activated; a job on the current
            // prev hash leaves the earlier ones valid at the pool.
            clean: job.future,
            future: job.future,
        });
    }

    fn standard_job_activated(&mut self, device: u64, now: Timestamp, job: &StandardJobView<'_>) {
        if let (true, Some(prev_hash)) = (self.events.is_enabled(), job.prev_hash) {
            self.events.emit_at(
                now.as_nanos(),
                events::JobActivated {
                    conn: device,
                    channel: Some(job.channel),
                    job_id: JobId::from(job.job_id),
                    prev_hash: *prev_hash,
                    fingerprint: None,
                },
            );
        }
    }

    fn channel_target_changed(
        &mut self,
        device: u64,
        now: Timestamp,
        channel: u32,
        _difficulty: f64,
        target: &Target,
    ) {
        self.target_changed_on(device, now, Some(channel), target);
    }

    fn standard_share_sent(&mut self, device: u64, now: Timestamp, s: &StandardShareView<'_>) {
        self.count_sent(s.block);
        self.emit(now, || events::ShareSent {
            device,
            channel: Some(s.channel),
            seq: s.sequence_number.into(),
            job_id: JobId::from(s.job_id),
            nonce: s.nonce,
            ntime: s.ntime,
            version: s.version,
            difficulty: s.difficulty,
            hash: Some(*s.hash),
        });
    }

    fn standard_share_result(&mut self, device: u64, now: Timestamp, r: &StandardShareReply<'_>) {
        self.count_result(r.latency_ns, r.verdict);
        if let Some(code) = r.error_code {
            self.stats.count_error_code(code);
        }
        self.emit(now, || events::ShareResult {
            conn: device,
            channel: Some(r.channel),
            seq: r.sequence_number.into(),
            job_id: JobId::from(r.job_id),
            nonce: r.nonce,
            difficulty: r.difficulty,
            verdict: r.verdict,
            perspective: Perspective::Received,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_land_in_their_code_slot() {
        assert_eq!(reject_slot_name(reject_slot(Some(21))), "21");
        assert_eq!(reject_slot_name(reject_slot(Some(25))), "25");
        assert_eq!(reject_slot_name(reject_slot(None)), "false");
        assert_eq!(reject_slot_name(reject_slot(Some(-1))), "other");
        assert_eq!(reject_slot_name(reject_slot(Some(26))), "other");
    }

    #[test]
    fn latency_is_recorded_in_microseconds() {
        let s = LiveStats::default();
        for ms in 1..=100u64 {
            s.record_latency(ms * 1_000_000);
        }
        let h = s.latency_snapshot();
        assert_eq!(h.len(), 100);
        let p50 = h.value_at_quantile(0.5) as f64 / 1000.0;
        assert!((p50 - 50.0).abs() < 0.1, "{p50}");
    }
}
