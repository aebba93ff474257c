//! What happened to every share, by the tip whose job it was found on: the pool's verdicts
//! (the ground truth of the model), and what the devices heard back (a cross-check that the
//! verdicts crossed the link intact).

use std::collections::HashMap;
use std::time::Duration;

use events::{Reason, Verdict};
use fleet::device::{JobView, SentShare, ShareReply, ShareVerdict};
use fleet::Observer;
use serde::Serialize;

use primitives::Timestamp;

/// Shares of one tip's job, by the pool's verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TipShares {
    /// Shares accepted.
    pub accepted: u64,
    /// Shares rejected as stale.
    pub stale: u64,
    /// Any other rejection (none is expected: it would be a bug in a core, not latency).
    pub other: u64,
}

impl TipShares {
    /// Shares with a verdict.
    pub fn judged(&self) -> u64 {
        self.accepted + self.stale + self.other
    }
}

/// Share counts as the devices saw them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceShares {
    /// Shares the devices sent.
    pub sent: u64,
    /// Accepted.
    pub accepted: u64,
    /// Rejected with code 21 (job not found: superseded).
    pub stale: u64,
    /// Rejected for any other reason.
    pub other: u64,
    /// Sent but never answered.
    pub unanswered: u64,
    /// Found but never sent (too many pending).
    pub dropped: u64,
}

/// Where a device's outcomes go, and where the pool's verdicts are booked.
pub struct Ledger {
    tip_times: Vec<Timestamp>,
    /// Pool job id -> tip.
    job_tip: HashMap<u64, u32>,
    /// (device, request id) -> tip, for shares awaiting their verdict at the device.
    in_flight: HashMap<(u64, u64), u32>,
    /// Tips whose jobs are counted: `measured.0 ..= measured.1`.
    measured: (u32, u32),
    /// Pool verdicts per tip, indexed by tip.
    pub by_tip: Vec<TipShares>,
    /// Pool verdicts on shares of jobs outside the measured tips (warm-up).
    pub unmeasured: TipShares,
    /// Over measured tips only.
    pub devices: DeviceShares,
    /// From a tip to its job reaching a device, over measured tips and all devices.
    pub job_delay: Option<(Duration, Duration)>,
    /// Protocol errors the devices hit, as messages.
    pub protocol_errors: Vec<String>,
}

impl Ledger {
    /// A ledger for tips created at `tip_times`, counting tips `measured.0 ..= measured.1`.
    pub fn new(tip_times: Vec<Timestamp>, measured: (u32, u32)) -> Self {
        let tips = tip_times.len();
        Ledger {
            tip_times,
            job_tip: HashMap::new(),
            in_flight: HashMap::new(),
            measured,
            by_tip: vec![TipShares::default(); tips],
            unmeasured: TipShares::default(),
            devices: DeviceShares::default(),
            job_delay: None,
            protocol_errors: Vec::new(),
        }
    }

    /// When tip `k` was created.
    pub fn tip_time(&self, k: u32) -> Timestamp {
        self.tip_times[k as usize]
    }

    /// The pool built job `job_id` for tip `k`.
    pub fn job(&mut self, job_id: u64, k: u32) {
        self.job_tip.insert(job_id, k);
    }

    /// The tip of a job as it was sent on the wire (SV1: lowercase hex).
    pub fn tip_of(&self, wire_job_id: &str) -> Option<u32> {
        let id = u64::from_str_radix(wire_job_id, 16).ok()?;
        self.job_tip.get(&id).copied()
    }

    fn is_measured(&self, k: u32) -> bool {
        (self.measured.0..=self.measured.1).contains(&k)
    }

    /// The pool judged a share on `wire_job_id`.
    pub fn pool_verdict(&mut self, wire_job_id: &str, verdict: Verdict) {
        let tip = self.tip_of(wire_job_id);
        let slot = match tip {
            Some(k) if self.is_measured(k) => &mut self.by_tip[k as usize],
            _ => &mut self.unmeasured,
        };
        match verdict {
            Verdict::Accepted => slot.accepted += 1,
            Verdict::Rejected(Reason::Stale) => slot.stale += 1,
            Verdict::Rejected(_) => slot.other += 1,
        }
    }

    /// The measured tips' counts, in tip order.
    pub fn measured(&self) -> &[TipShares] {
        &self.by_tip[self.measured.0 as usize..=self.measured.1 as usize]
    }

    /// Shares awaiting their verdict at the device.
    pub fn shares_in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

impl Observer for Ledger {
    fn job_received(&mut self, _device: u64, now: Timestamp, job: &JobView<'_>) {
        let Some(k) = self.tip_of(job.job_id) else {
            self.protocol_errors
                .push(format!("a job the pool never built: {}", job.job_id));
            return;
        };
        if self.is_measured(k) {
            let d = now.since(self.tip_time(k));
            self.job_delay = Some(match self.job_delay {
                None => (d, d),
                Some((lo, hi)) => (lo.min(d), hi.max(d)),
            });
        }
    }

    fn share_sent(&mut self, device: u64, _now: Timestamp, share: &SentShare<'_>) {
        match self.tip_of(share.job_id) {
            Some(k) if self.is_measured(k) => {
                self.devices.sent += 1;
                self.in_flight.insert((device, share.seq), k);
            }
            Some(_) => {}
            None => self
                .protocol_errors
                .push(format!("a share on an unknown job: {}", share.job_id)),
        }
    }

    fn share_result(&mut self, device: u64, _now: Timestamp, reply: &ShareReply<'_>) {
        if self.in_flight.remove(&(device, reply.seq)).is_none() {
            return;
        }
        match reply.verdict {
            ShareVerdict::Accepted => self.devices.accepted += 1,
            ShareVerdict::Rejected(Some(21)) => self.devices.stale += 1,
            ShareVerdict::Rejected(_) => self.devices.other += 1,
        }
    }

    fn share_unanswered(&mut self, device: u64, _now: Timestamp, seq: u64) {
        if self.in_flight.remove(&(device, seq)).is_some() {
            self.devices.unanswered += 1;
        }
    }

    fn share_dropped(&mut self, _device: u64, _now: Timestamp) {
        self.devices.dropped += 1;
    }

    fn protocol_error(&mut self, device: u64, _now: Timestamp, what: &str) {
        self.protocol_errors
            .push(format!("device {device}: {what}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_booked_to_the_tip_of_their_job() {
        let mut l = Ledger::new(
            vec![
                Timestamp::from_nanos(0),
                Timestamp::from_nanos(10),
                Timestamp::from_nanos(20),
            ],
            (1, 1),
        );
        l.job(0x1a, 0);
        l.job(0x1b, 1);
        l.pool_verdict("1b", Verdict::Accepted);
        l.pool_verdict("1b", Verdict::Rejected(Reason::Stale));
        l.pool_verdict("1b", Verdict::Rejected(Reason::Duplicate));
        l.pool_verdict("1a", Verdict::Accepted);
        l.pool_verdict("ff", Verdict::Accepted);
        assert_eq!(
            l.measured(),
            &[TipShares {
                accepted: 1,
                stale: 1,
                other: 1
            }]
        );
        assert_eq!(l.unmeasured.accepted, 2);
        assert_eq!(l.measured()[0].judged(), 3);
    }
}
