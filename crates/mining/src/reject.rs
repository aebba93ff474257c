//! Why a share is refused, in the terms of the checks every role that judges shares makes (the
//! pool's channels, the farm proxies' local checks); each front end maps it onto its protocol's
//! error.

use events::Reason;

/// Why a share was rejected: each maps onto one docs/metrics.md reason and one protocol error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Never issued to this channel.
    UnknownJob,
    /// Superseded by a new previous-block hash, or expired.
    Stale,
    /// The extranonce the miner chose is not the size its channel was given.
    ExtranonceSize,
    /// The header time is before the job's minimum or too far ahead of the pool's clock.
    NtimeOutOfRange,
    /// Version bits outside the negotiated mask.
    VersionBits,
    /// The same header was submitted before on this job.
    Duplicate,
    /// The header's hash does not meet the channel's share target.
    LowDifficulty,
}

impl Reject {
    /// The reason events and statistics count it under: the few the lab tells apart, the
    /// rest as `Other`.
    pub fn reason(self) -> Reason {
        match self {
            Reject::UnknownJob => Reason::InvalidJob,
            Reject::Stale => Reason::Stale,
            Reject::ExtranonceSize | Reject::NtimeOutOfRange | Reject::VersionBits => Reason::Other,
            Reject::Duplicate => Reason::Duplicate,
            Reject::LowDifficulty => Reason::LowDifficulty,
        }
    }

    /// The customary Stratum V1 error code: 21 job not found (stale included), 22 duplicate,
    /// 23 low difficulty, 20 anything else.
    pub fn sv1_code(self) -> i32 {
        match self {
            Reject::UnknownJob | Reject::Stale => 21,
            Reject::Duplicate => 22,
            Reject::LowDifficulty => 23,
            Reject::ExtranonceSize | Reject::NtimeOutOfRange | Reject::VersionBits => 20,
        }
    }

    /// The text sent to the miner with the rejection (SV1 error message, SV2 error code).
    pub fn message(self) -> &'static str {
        match self {
            Reject::UnknownJob => "Job not found",
            Reject::Stale => "Stale share: job superseded",
            Reject::ExtranonceSize => "Incorrect extranonce2 size",
            Reject::NtimeOutOfRange => "Ntime out of range",
            Reject::VersionBits => "Version bits outside the negotiated mask",
            Reject::Duplicate => "Duplicate share",
            Reject::LowDifficulty => "Share above target (low difficulty)",
        }
    }
}
