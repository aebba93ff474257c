//! The customary Stratum V1 error codes (ckpool, cgminer-era pools), sent as
//! `"error": [code, "message", null]`.

/// A Stratum V1 error code, with the customary message sent alongside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 20: anything else, including malformed parameters.
    Other,
    /// 21: job not found: unknown, or superseded (stale).
    JobNotFound,
    /// 22: duplicate share.
    Duplicate,
    /// 23: share above the target (low difficulty).
    LowDifficulty,
    /// 24: worker not authorized.
    Unauthorized,
    /// 25: not subscribed.
    NotSubscribed,
}

impl ErrorCode {
    /// The number sent first in the `error` array.
    pub const fn code(self) -> i32 {
        match self {
            ErrorCode::Other => 20,
            ErrorCode::JobNotFound => 21,
            ErrorCode::Duplicate => 22,
            ErrorCode::LowDifficulty => 23,
            ErrorCode::Unauthorized => 24,
            ErrorCode::NotSubscribed => 25,
        }
    }

    /// The customary text sent after the code.
    pub const fn message(self) -> &'static str {
        match self {
            ErrorCode::Other => "Other/Unknown",
            ErrorCode::JobNotFound => "Job not found",
            ErrorCode::Duplicate => "Duplicate share",
            ErrorCode::LowDifficulty => "Low difficulty share",
            ErrorCode::Unauthorized => "Unauthorized worker",
            ErrorCode::NotSubscribed => "Not subscribed",
        }
    }

    /// The code for a number a pool sent; `None` outside 20 to 25.
    pub fn from_code(code: i64) -> Option<ErrorCode> {
        Some(match code {
            20 => ErrorCode::Other,
            21 => ErrorCode::JobNotFound,
            22 => ErrorCode::Duplicate,
            23 => ErrorCode::LowDifficulty,
            24 => ErrorCode::Unauthorized,
            25 => ErrorCode::NotSubscribed,
            _ => return None,
        })
    }
}
