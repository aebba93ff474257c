//! The fleet's live counters, shared by every device task, and the observer that feeds them
//! and the event log.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use events::{EventSink, JobId, Perspective};
use hdrhistogram::Histogram;
use primitives::Target;

use crate::device::{JobView, Nanos, Observer, SentShare, ShareReply, ShareVerdict};

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
    pub connects: AtomicU64,
    pub connect_failures: AtomicU64,
    pub disconnects: AtomicU64,
    pub jobs: AtomicU64,
    pub shares_sent: AtomicU64,
    pub accepted: AtomicU64,
    pub rejected: AtomicU64,
    pub rejected_by_code: [AtomicU64; REJECT_SLOTS],
    pub unanswered: AtomicU64,
    pub dropped: AtomicU64,
    /// Shares found and not yet settled: waiting to be written, or for their verdict. The drain
    /// at the end of a run waits for this to reach zero, so that a share found just before the
    /// run stops is sent and answered rather than counted as dropped or unanswered.
    pub in_flight: AtomicI64,
    pub blocks: AtomicU64,
    pub hashes: AtomicU64,
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
            unanswered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            in_flight: AtomicI64::new(0),
            blocks: AtomicU64::new(0),
            hashes: AtomicU64::new(0),
            protocol_errors: AtomicU64::new(0),
            // 1 us to 1 h at three significant digits.
            latency_us: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"),
            ),
        }
    }
}

impl LiveStats {
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
/// `ShareResult` (the verdict as received). An unanswered share writes nothing: the lab counts a
/// `ShareSent` without its `ShareResult` as unanswered. With the sink disabled nothing is built:
/// every event sits behind [`EventSink::is_enabled`].
pub struct Tally<'a> {
    pub stats: &'a LiveStats,
    pub events: &'a EventSink,
}

impl Observer for Tally<'_> {
    fn job_received(&mut self, device: u64, now: Nanos, job: &JobView<'_>) {
        self.stats.jobs.fetch_add(1, Relaxed);
        if self.events.is_enabled() {
            self.events.emit_at(
                now,
                events::JobReceived {
                    device,
                    channel: None,
                    job_id: JobId::text(job.job_id),
                    fingerprint: Some(events::fingerprint(job.prev_hash, job.merkle_branch)),
                    prev_hash: Some(*job.prev_hash),
                    target: *job.target,
                    clean: job.clean,
                    future: false,
                },
            );
        }
    }

    fn target_changed(&mut self, device: u64, now: Nanos, _difficulty: f64, target: &Target) {
        if self.events.is_enabled() {
            self.events.emit_at(
                now,
                events::TargetChanged {
                    conn: device,
                    channel: None,
                    target: *target,
                },
            );
        }
    }

    fn share_found(&mut self, _device: u64, _now: Nanos) {
        self.stats.in_flight.fetch_add(1, Relaxed);
    }

    fn share_sent(&mut self, device: u64, now: Nanos, s: &SentShare<'_>) {
        self.stats.shares_sent.fetch_add(1, Relaxed);
        if s.block {
            self.stats.blocks.fetch_add(1, Relaxed);
        }
        if self.events.is_enabled() {
            self.events.emit_at(
                now,
                events::ShareSent {
                    device,
                    channel: None,
                    seq: s.seq,
                    job_id: JobId::text(s.job_id),
                    nonce: s.nonce,
                    ntime: s.ntime,
                    version: s.version,
                    difficulty: s.difficulty,
                    hash: Some(*s.hash),
                },
            );
        }
    }

    fn share_result(&mut self, device: u64, now: Nanos, r: &ShareReply<'_>) {
        self.stats.in_flight.fetch_sub(1, Relaxed);
        self.stats.record_latency(r.latency_ns);
        match r.verdict {
            ShareVerdict::Accepted => {
                self.stats.accepted.fetch_add(1, Relaxed);
            }
            ShareVerdict::Rejected(code) => {
                self.stats.rejected.fetch_add(1, Relaxed);
                self.stats.rejected_by_code[reject_slot(code)].fetch_add(1, Relaxed);
            }
        }
        if self.events.is_enabled() {
            self.events.emit_at(
                now,
                events::ShareResult {
                    conn: device,
                    channel: None,
                    seq: r.seq,
                    job_id: JobId::text(r.job_id),
                    nonce: r.nonce,
                    difficulty: r.difficulty,
                    verdict: r.verdict.to_event_verdict(),
                    // The device was told the verdict (the pool records it as Given).
                    perspective: Perspective::Received,
                },
            );
        }
    }

    /// Writes no event: in the event file a `ShareSent` that no `ShareResult` with the same
    /// device and seq follows is the unanswered share, whether it timed out, was pushed out of
    /// the in-flight window, or lost its connection. A verdict arriving after the timeout is
    /// ignored, so the file never holds both.
    fn share_unanswered(&mut self, _device: u64, _now: Nanos, _seq: u64) {
        self.stats.in_flight.fetch_sub(1, Relaxed);
        self.stats.unanswered.fetch_add(1, Relaxed);
    }

    fn share_dropped(&mut self, _device: u64, _now: Nanos) {
        self.stats.in_flight.fetch_sub(1, Relaxed);
        self.stats.dropped.fetch_add(1, Relaxed);
    }

    fn ready(&mut self, _device: u64, _now: Nanos) {
        self.stats.ready.fetch_add(1, Relaxed);
    }

    fn protocol_error(&mut self, device: u64, _now: Nanos, what: &str) {
        self.stats.protocol_errors.fetch_add(1, Relaxed);
        tracing::debug!(device, "protocol error: {what}");
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
