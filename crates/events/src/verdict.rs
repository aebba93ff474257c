//! A share's verdict and the one rejection vocabulary shared by both protocols (docs/metrics.md).

use std::fmt;
use std::str::FromStr;

/// Why a share was rejected, in docs/metrics.md's vocabulary. Each protocol's own codes and messages
/// are mapped onto these by the role that sees them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The job was superseded (a new prevhash, or it expired). Nothing else is stale.
    Stale,
    /// The pool has already counted this share.
    Duplicate,
    /// The share's hash does not meet the target in force.
    LowDifficulty,
    /// The job is unknown to the pool (never sent, or forgotten), not merely superseded.
    InvalidJob,
    /// The SV2 channel is unknown or closed.
    InvalidChannel,
    /// The worker is not authorized (SV1 `mining.authorize` refused or missing).
    Unauthorized,
    /// Any other rejection, including unmapped protocol errors.
    Other,
}

impl Reason {
    /// Every reason, in wire-code order (see `format::VERDICT_ACCEPTED`).
    pub const ALL: [Reason; 7] = [
        Reason::Stale,
        Reason::Duplicate,
        Reason::LowDifficulty,
        Reason::InvalidJob,
        Reason::InvalidChannel,
        Reason::Unauthorized,
        Reason::Other,
    ];

    /// The reason's place in [`Reason::ALL`]: where counters per reason keep it.
    pub const fn index(self) -> usize {
        match self {
            Reason::Stale => 0,
            Reason::Duplicate => 1,
            Reason::LowDifficulty => 2,
            Reason::InvalidJob => 3,
            Reason::InvalidChannel => 4,
            Reason::Unauthorized => 5,
            Reason::Other => 6,
        }
    }

    /// The docs/metrics.md key (`rejected_by_reason`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Stale => "stale",
            Reason::Duplicate => "duplicate",
            Reason::LowDifficulty => "low_difficulty",
            Reason::InvalidJob => "invalid_job",
            Reason::InvalidChannel => "invalid_channel",
            Reason::Unauthorized => "unauthorized",
            Reason::Other => "other",
        }
    }

    /// Maps SV1's customary error codes (`None`: an error without one).
    pub fn from_sv1_code(code: Option<i64>) -> Reason {
        match code {
            // Job not found: unknown or superseded, which is what makes a share stale.
            Some(21) => Reason::Stale,
            Some(22) => Reason::Duplicate,
            Some(23) => Reason::LowDifficulty,
            Some(24) => Reason::Unauthorized,
            _ => Reason::Other,
        }
    }

    /// Maps an SV2 `SubmitShares.Error` error code. Codes outside the spec's list are `Other`.
    pub fn from_sv2_code(code: &str) -> Reason {
        match code {
            "stale-share" => Reason::Stale,
            "duplicate-share" => Reason::Duplicate,
            "difficulty-too-low" => Reason::LowDifficulty,
            "invalid-job-id" => Reason::InvalidJob,
            "invalid-channel-id" => Reason::InvalidChannel,
            "unauthorized" => Reason::Unauthorized,
            _ => Reason::Other,
        }
    }

    /// The SV2 `SubmitShares.Error` code a pool sends for this reason.
    pub const fn sv2_code(self) -> &'static str {
        match self {
            Reason::Stale => "stale-share",
            Reason::Duplicate => "duplicate-share",
            Reason::LowDifficulty => "difficulty-too-low",
            Reason::InvalidJob => "invalid-job-id",
            Reason::InvalidChannel => "invalid-channel-id",
            Reason::Unauthorized => "unauthorized",
            Reason::Other => "other",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no [`Reason`]; holds the string.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown rejection reason {0:?} (expected one of stale, duplicate, low_difficulty, invalid_job, invalid_channel, unauthorized, other)")]
pub struct UnknownReason(pub String);

impl FromStr for Reason {
    type Err = UnknownReason;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reason::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownReason(s.to_owned()))
    }
}

/// Shares per reject reason, in [`Reason::ALL`]'s order (a role's rejected counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReasonCounts(pub [u64; Reason::ALL.len()]);

impl ReasonCounts {
    /// The count for `reason`.
    pub fn get(&self, reason: Reason) -> u64 {
        self.0[reason.index()]
    }

    /// The count over every reason.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Every reason with its count, zeros included.
    pub fn iter(&self) -> impl Iterator<Item = (Reason, u64)> + '_ {
        Reason::ALL.into_iter().map(|r| (r, self.get(r)))
    }
}

/// A pool's answer to a share.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The share counts.
    Accepted,
    /// The share was rejected, for this reason.
    Rejected(Reason),
}

impl Verdict {
    /// Whether the share was accepted.
    pub fn is_accepted(self) -> bool {
        self == Verdict::Accepted
    }

    /// The reason, for a rejected share; `None` when accepted.
    pub fn reason(self) -> Option<Reason> {
        match self {
            Verdict::Accepted => None,
            Verdict::Rejected(r) => Some(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_counts_at_its_place_in_all() {
        for (i, r) in Reason::ALL.into_iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
        }
        let mut c = ReasonCounts::default();
        c.0[Reason::Duplicate.index()] = 2;
        c.0[Reason::Other.index()] = 1;
        assert_eq!((c.get(Reason::Duplicate), c.total()), (2, 3));
        assert_eq!(c.iter().count(), Reason::ALL.len());
    }

    #[test]
    fn vocabulary_round_trips() {
        for r in Reason::ALL {
            assert_eq!(r.as_str().parse::<Reason>(), Ok(r));
            assert_eq!(Reason::from_sv2_code(r.sv2_code()), r);
        }
        assert!("bogus".parse::<Reason>().is_err());
        assert_eq!(Reason::from_sv2_code("something-else"), Reason::Other);
    }
}
