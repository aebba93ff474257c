//! Shares at one edge: each share sent is matched with the verdict the sender received, by
//! (sender, sequence number). A share counts in the totals when it was *sent* in the measured
//! window; its verdict may come later, up to the end of the drain. No verdict by then: unanswered.

use std::collections::HashMap;

use events::{Reason, Verdict};

use super::input::Window;
use super::series::Series;
use crate::results::{Shares, Work};
use crate::stats::Samples;

/// Share counts and work, mergeable across fleets and trials.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShareTally {
    pub submitted: u64,
    pub accepted: u64,
    pub stale: u64,
    pub rejected: u64,
    pub unanswered: u64,
    /// Indexed like [`Reason::ALL`], stale included.
    pub by_reason: [u64; 7],
    pub work_submitted: f64,
    pub work_accepted: f64,
    pub work_stale: f64,
}

impl ShareTally {
    pub fn merge(&mut self, o: &ShareTally) {
        self.submitted += o.submitted;
        self.accepted += o.accepted;
        self.stale += o.stale;
        self.rejected += o.rejected;
        self.unanswered += o.unanswered;
        for (a, b) in self.by_reason.iter_mut().zip(o.by_reason) {
            *a += b;
        }
        self.work_submitted += o.work_submitted;
        self.work_accepted += o.work_accepted;
        self.work_stale += o.work_stale;
    }

    pub fn shares(&self) -> Shares {
        Shares {
            submitted: self.submitted,
            accepted: self.accepted,
            stale: self.stale,
            rejected: self.rejected,
            unanswered: self.unanswered,
            acceptance_pct: pct(self.accepted as f64, self.submitted as f64),
            stale_pct: pct(self.stale as f64, self.submitted as f64),
            rejected_by_reason: Reason::ALL
                .iter()
                .zip(self.by_reason)
                .filter(|(_, n)| *n > 0)
                .map(|(r, n)| (r.as_str().to_owned(), n))
                .collect(),
        }
    }

    pub fn work(&self) -> Work {
        Work {
            submitted: self.work_submitted,
            accepted: self.work_accepted,
            stale: self.work_stale,
            stale_pct: self.work_stale_pct(),
        }
    }

    pub fn work_stale_pct(&self) -> Option<f64> {
        pct(self.work_stale, self.work_submitted)
    }
}

/// `part / whole x 100`, or `None` of nothing.
pub(crate) fn pct(part: f64, whole: f64) -> Option<f64> {
    (whole > 0.0).then(|| part / whole * 100.0)
}

#[derive(Clone, Copy)]
struct Sent {
    ts: u64,
    difficulty: f64,
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
    pub fn new(window: Window) -> Self {
        ShareBook {
            window,
            pending: HashMap::new(),
            tally: ShareTally::default(),
            latency: Samples::new(),
            next_cluster: 0,
        }
    }

    /// A share sent by `sender` (a dense index the caller assigns) with sequence `seq`.
    pub fn sent(
        &mut self,
        sender: u32,
        seq: u64,
        ts: u64,
        difficulty: f64,
        series: Option<&mut Series>,
    ) {
        let previous = self.pending.insert((sender, seq), Sent { ts, difficulty });
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

    pub fn verdict(
        &mut self,
        sender: u32,
        seq: u64,
        ts: u64,
        verdict: Verdict,
        series: Option<&mut Series>,
    ) -> Matched {
        if ts > self.window.end_ns {
            return Matched::TooLate;
        }
        let Some(sent) = self.pending.remove(&(sender, seq)) else {
            return Matched::Unmatched;
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
                let slot = Reason::ALL.iter().position(|&x| x == r).unwrap_or(6);
                t.by_reason[slot] += 1;
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
    pub fn finish(&mut self) {
        let pending: Vec<Sent> = self.pending.drain().map(|(_, s)| s).collect();
        for s in pending {
            self.settle_unanswered(s);
        }
    }
}
