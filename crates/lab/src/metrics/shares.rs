//! Shares at one edge: each share sent is matched with the verdict the sender received, by
//! (sender, sequence number). A share counts in the totals when it was *sent* in the measured
//! window; its verdict may come later, up to the end of the drain. No verdict by then: unanswered.
//!
//! A rejection is counted under the lab's reason, which is the pool's own unless the lab knows
//! better (see [`lab_reason`]): a pool that dropped a job on a new tip may answer a share for it
//! "invalid job" rather than "stale". The pool's own reasons are kept beside (`pool_reason`),
//! so nothing is hidden.

use std::collections::HashMap;

use events::{Hash256, Reason, Verdict};

use super::input::Window;
use super::merge::tally;
use super::series::Series;
use crate::results::{Shares, Work};
use crate::stats::Samples;

tally! {
    /// Share counts and work, mergeable across fleets and trials.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ShareTally {
        /// Shares the devices sent.
        pub submitted: u64,
        /// Shares accepted.
        pub accepted: u64,
        /// Shares rejected as stale (job superseded).
        pub stale: u64,
        /// Shares rejected for another reason.
        pub rejected: u64,
        /// Shares with no verdict by the end of the run.
        pub unanswered: u64,
        /// Indexed like [`Reason::ALL`], stale included: the lab's reasons.
        pub by_reason: [u64; 7],
        /// The same rejections by the reason the pool gave.
        pub by_pool_reason: [u64; 7],
        /// Submitted work, in difficulty-1 units.
        pub work_submitted: f64,
        /// Accepted work, in difficulty-1 units.
        pub work_accepted: f64,
        /// Stale work, in difficulty-1 units.
        pub work_stale: f64,
    }
}

impl ShareTally {
    /// The counts as results.json's `shares`.
    pub fn shares(&self) -> Shares {
        Shares {
            submitted: self.submitted,
            accepted: self.accepted,
            stale: self.stale,
            rejected: self.rejected,
            unanswered: self.unanswered,
            acceptance_pct: pct(self.accepted as f64, self.submitted as f64),
            stale_pct: pct(self.stale as f64, self.submitted as f64),
            rejected_by_reason: by_reason(&self.by_reason),
            pool_reason: by_reason(&self.by_pool_reason),
        }
    }

    /// The work as results.json's `work`.
    pub fn work(&self) -> Work {
        Work {
            submitted: self.work_submitted,
            accepted: self.work_accepted,
            stale: self.work_stale,
            stale_pct: self.work_stale_pct(),
        }
    }

    /// Stale work in percent of submitted work; `None` with none submitted.
    pub fn work_stale_pct(&self) -> Option<f64> {
        pct(self.work_stale, self.work_submitted)
    }
}

/// The non-zero counts of a reason-indexed array, by reason name.
fn by_reason(counts: &[u64; 7]) -> std::collections::BTreeMap<String, u64> {
    Reason::ALL
        .iter()
        .zip(counts)
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| (r.as_str().to_owned(), *n))
        .collect()
}

/// The reason the lab counts a rejection under, from the pool's reason and whether the share's
/// job had been superseded (its prev hash replaced) by the time its verdict arrived.
///
/// A pool that drops a job on a new tip and is then sent a share for it may say the job is
/// unknown (SV2 `invalid-job-id`, or an SV1 error without the customary "job not found" code)
/// rather than stale: for the farm it is the same lost work, so the lab counts it stale. A
/// rejection about the share itself (duplicate, low difficulty, unauthorized, wrong channel)
/// keeps the pool's reason, and so does an unknown job on a prev hash still current: that is a
/// real fault.
pub fn lab_reason(pool: Reason, superseded: bool) -> Reason {
    match pool {
        Reason::InvalidJob | Reason::Other if superseded => Reason::Stale,
        r => r,
    }
}

fn slot(r: Reason) -> usize {
    Reason::ALL.iter().position(|&x| x == r).unwrap_or(6)
}

/// `part / whole x 100`, or `None` of nothing.
pub(crate) fn pct(part: f64, whole: f64) -> Option<f64> {
    (whole > 0.0).then(|| part / whole * 100.0)
}

#[derive(Clone, Copy)]
struct Sent {
    ts: u64,
    difficulty: f64,
    /// The prev hash of the share's job, when the sender's job is known.
    prev_hash: Option<Hash256>,
}

/// A verdict's share, as [`ShareBook::verdict`] found it.
pub(crate) enum Matched {
    Share,
    /// No share awaited this verdict (never sent, or already answered).
    Unmatched,
    /// After the end of the run: as if it never came.
    TooLate,
}

/// Matches shares with verdicts at one edge.
pub(crate) struct ShareBook {
    window: Window,
    pending: HashMap<(u32, u64), Sent>,
    pub tally: ShareTally,
    pub latency: Samples,
    next_cluster: u32,
}

impl ShareBook {
    pub(crate) fn new(window: Window) -> Self {
        ShareBook {
            window,
            pending: HashMap::new(),
            tally: ShareTally::default(),
            latency: Samples::new(),
            next_cluster: 0,
        }
    }

    /// A share sent by `sender` (a dense index the caller assigns) with sequence `seq`, on a job
    /// whose prev hash is `prev_hash` when the caller knows it.
    pub(crate) fn sent(
        &mut self,
        sender: u32,
        seq: u64,
        ts: u64,
        difficulty: f64,
        prev_hash: Option<Hash256>,
        series: Option<&mut Series>,
    ) {
        let sent = Sent {
            ts,
            difficulty,
            prev_hash,
        };
        let previous = self.pending.insert((sender, seq), sent);
        if let Some(p) = previous {
            // The sequence number came round again before a verdict: the old one never got one.
            self.settle_unanswered(p);
        }
        if self.window.measured(ts) {
            self.tally.submitted += 1;
            self.tally.work_submitted += difficulty;
        }
        if let (Some(s), Some(sec)) = (series, self.window.second(ts)) {
            s.add(Series::SHARES_SENT, sec, 1);
        }
    }

    /// The verdict the sender received at `ts` for its share `seq`. `superseded(prev_hash, ts)`
    /// tells whether a job on `prev_hash` had been superseded by `ts` (see [`lab_reason`]); it
    /// is asked only for a rejection whose share's prev hash is known.
    pub(crate) fn verdict(
        &mut self,
        sender: u32,
        seq: u64,
        ts: u64,
        pool_verdict: Verdict,
        superseded: impl FnOnce(Hash256, u64) -> bool,
        series: Option<&mut Series>,
    ) -> Matched {
        if ts > self.window.end_ns {
            return Matched::TooLate;
        }
        let Some(sent) = self.pending.remove(&(sender, seq)) else {
            return Matched::Unmatched;
        };
        let verdict = match (pool_verdict, sent.prev_hash) {
            (Verdict::Rejected(r), Some(p)) => Verdict::Rejected(lab_reason(r, superseded(p, ts))),
            (v, _) => v,
        };
        let column = match verdict {
            Verdict::Accepted => Series::SHARES_ACCEPTED,
            Verdict::Rejected(Reason::Stale) => Series::SHARES_STALE,
            Verdict::Rejected(_) => Series::SHARES_REJECTED,
        };
        if let (Some(s), Some(sec)) = (series, self.window.second(sent.ts)) {
            s.add(column, sec, 1);
        }
        if !self.window.measured(sent.ts) {
            return Matched::Share;
        }
        let t = &mut self.tally;
        match verdict {
            Verdict::Accepted => {
                t.accepted += 1;
                t.work_accepted += sent.difficulty;
            }
            Verdict::Rejected(r) => {
                if r == Reason::Stale {
                    t.stale += 1;
                    t.work_stale += sent.difficulty;
                } else {
                    t.rejected += 1;
                }
                t.by_reason[slot(r)] += 1;
                if let Some(p) = pool_verdict.reason() {
                    t.by_pool_reason[slot(p)] += 1;
                }
            }
        }
        self.latency
            .push(self.next_cluster, ts.saturating_sub(sent.ts));
        self.next_cluster += 1;
        Matched::Share
    }

    fn settle_unanswered(&mut self, s: Sent) {
        if self.window.measured(s.ts) {
            self.tally.unanswered += 1;
        }
    }

    /// Shares still without a verdict at the end are unanswered.
    pub(crate) fn finish(&mut self) {
        let pending: Vec<Sent> = self.pending.drain().map(|(_, s)| s).collect();
        for s in pending {
            self.settle_unanswered(s);
        }
    }
}
