//! When the JDC stops trusting its pool (spec 6.2), without I/O.
//!
//! Job declaration only works if the pool keeps its word: a JDS that refuses declarations or
//! stops handing out tokens, or a pool that refuses declared jobs or rejects shares it had
//! agreed to account for, is a pool the farm should leave ("this fallback strategy incentivizes
//! honesty on Pool side"). The policy says when; the shell decides where to (the next pool, or
//! solo mining on the farm's own templates, paying the farm's own address).
//!
//! A stale rejection is not misbehaviour: a block moves the tip under shares in flight. Other
//! rejections must come several in a row before they count, so one share racing a target
//! change does not cost the pool the farm.

use primitives::Timestamp;
use std::time::Duration;

/// When the [`Fallback`] policy gives up on the pool.
#[derive(Clone, Debug)]
pub struct FallbackConfig {
    /// Non-stale rejections of shares on accepted jobs, in a row, that make the pool dishonest.
    pub max_rejections_in_a_row: u32,
    /// How long the JDS may take to answer a token request.
    pub token_timeout: Duration,
}

impl Default for FallbackConfig {
    fn default() -> Self {
        FallbackConfig {
            max_rejections_in_a_row: 3,
            token_timeout: Duration::from_secs(10),
        }
    }
}

/// Why the JDC left its pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FallbackReason {
    /// The JDS refused a `DeclareMiningJob` (its error code).
    DeclarationRefused(String),
    /// The pool refused a `SetCustomMiningJob` (its error code).
    JobRefused(String),
    /// The pool rejected non-stale shares on accepted jobs, too many in a row.
    SharesRejected {
        /// The last rejection's error code.
        code: String,
        /// How many in a row.
        in_a_row: u32,
    },
    /// The JDS did not answer a token request within [`FallbackConfig::token_timeout`].
    TokenTimeout,
    /// The JDS connection failed (why).
    JdsLost(String),
    /// The pool connection failed (why).
    PoolLost(String),
}

impl std::fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FallbackReason::DeclarationRefused(c) => {
                write!(f, "the JDS refused a declaration ({c})")
            }
            FallbackReason::JobRefused(c) => write!(f, "the pool refused a declared job ({c})"),
            FallbackReason::SharesRejected { code, in_a_row } => {
                write!(
                    f,
                    "the pool rejected {in_a_row} valid shares in a row ({code})"
                )
            }
            FallbackReason::TokenTimeout => f.write_str("the JDS did not answer a token request"),
            FallbackReason::JdsLost(e) => write!(f, "the JDS connection was lost ({e})"),
            FallbackReason::PoolLost(e) => write!(f, "the pool connection was lost ({e})"),
        }
    }
}

/// Watches what the JDS and the pool do; says once when to fall back.
#[derive(Debug)]
pub struct Fallback {
    cfg: FallbackConfig,
    rejected_in_a_row: u32,
    /// When the oldest unanswered token request went out.
    token_asked_at: Option<Timestamp>,
    decided: Option<FallbackReason>,
}

impl Fallback {
    /// A policy that has not decided.
    pub fn new(cfg: FallbackConfig) -> Fallback {
        Fallback {
            cfg,
            rejected_in_a_row: 0,
            token_asked_at: None,
            decided: None,
        }
    }

    /// The reason, once the policy decided.
    pub fn decided(&self) -> Option<&FallbackReason> {
        self.decided.as_ref()
    }

    fn decide(&mut self, r: FallbackReason) -> Option<FallbackReason> {
        if self.decided.is_some() {
            return None;
        }
        self.decided = Some(r.clone());
        Some(r)
    }

    /// The JDS refused a declaration: always a reason to leave.
    pub fn declaration_refused(&mut self, code: &str) -> Option<FallbackReason> {
        self.decide(FallbackReason::DeclarationRefused(code.to_owned()))
    }

    /// The pool refused a declared job: always a reason to leave.
    pub fn job_refused(&mut self, code: &str) -> Option<FallbackReason> {
        self.decide(FallbackReason::JobRefused(code.to_owned()))
    }

    /// The pool accepted a share: the run of rejections starts over.
    pub fn share_accepted(&mut self) {
        self.rejected_in_a_row = 0;
    }

    /// The pool rejected a share; `stale` ones (the tip moved) never count.
    pub fn share_rejected(&mut self, code: &str, stale: bool) -> Option<FallbackReason> {
        if stale {
            return None;
        }
        self.rejected_in_a_row += 1;
        if self.rejected_in_a_row < self.cfg.max_rejections_in_a_row.max(1) {
            return None;
        }
        self.decide(FallbackReason::SharesRejected {
            code: code.to_owned(),
            in_a_row: self.rejected_in_a_row,
        })
    }

    /// A token request went out at `now` (only the oldest unanswered one is timed).
    pub fn token_asked(&mut self, now: Timestamp) {
        self.token_asked_at.get_or_insert(now);
    }

    /// Every token request so far was answered.
    pub fn tokens_answered(&mut self) {
        self.token_asked_at = None;
    }

    /// When [`Fallback::handle_timeout`] next has something to check, if ever.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.token_asked_at
            .map(|t| t + self.cfg.token_timeout)
            .filter(|_| self.decided.is_none())
    }

    /// Checks the token deadline at `now` (the same clock as [`Fallback::token_asked`]).
    pub fn handle_timeout(&mut self, now: Timestamp) -> Option<FallbackReason> {
        match self.poll_timeout() {
            Some(d) if now >= d => self.decide(FallbackReason::TokenTimeout),
            _ => None,
        }
    }

    /// The JDS connection failed.
    pub fn jds_lost(&mut self, why: &str) -> Option<FallbackReason> {
        self.decide(FallbackReason::JdsLost(why.to_owned()))
    }

    /// The pool connection failed.
    pub fn pool_lost(&mut self, why: &str) -> Option<FallbackReason> {
        self.decide(FallbackReason::PoolLost(why.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_rejections_never_count_and_an_acceptance_resets_the_run() {
        let mut f = Fallback::new(FallbackConfig::default());
        for _ in 0..10 {
            assert_eq!(f.share_rejected("stale-share", true), None);
        }
        assert_eq!(f.share_rejected("invalid-share", false), None);
        assert_eq!(f.share_rejected("invalid-share", false), None);
        f.share_accepted();
        assert_eq!(f.share_rejected("invalid-share", false), None);
        assert_eq!(f.share_rejected("invalid-share", false), None);
        assert_eq!(
            f.share_rejected("difficulty-too-low", false),
            Some(FallbackReason::SharesRejected {
                code: "difficulty-too-low".into(),
                in_a_row: 3
            })
        );
    }

    #[test]
    fn a_refusal_decides_at_once_and_only_once() {
        let mut f = Fallback::new(FallbackConfig::default());
        assert_eq!(
            f.declaration_refused("invalid-job"),
            Some(FallbackReason::DeclarationRefused("invalid-job".into()))
        );
        assert_eq!(f.job_refused("invalid-mining-job-token"), None);
        assert_eq!(f.pool_lost("eof"), None);
        assert_eq!(
            f.decided(),
            Some(&FallbackReason::DeclarationRefused("invalid-job".into()))
        );
        let mut g = Fallback::new(FallbackConfig::default());
        assert!(matches!(
            g.job_refused("x"),
            Some(FallbackReason::JobRefused(_))
        ));
        let mut h = Fallback::new(FallbackConfig::default());
        assert!(matches!(
            h.jds_lost("reset"),
            Some(FallbackReason::JdsLost(_))
        ));
    }

    #[test]
    fn an_unanswered_token_request_times_out_from_the_oldest_ask() {
        let mut f = Fallback::new(FallbackConfig {
            token_timeout: Duration::from_secs(10),
            ..FallbackConfig::default()
        });
        assert_eq!(f.poll_timeout(), None);
        f.token_asked(Timestamp::from_millis(1_000));
        f.token_asked(Timestamp::from_millis(5_000));
        assert_eq!(f.poll_timeout(), Some(Timestamp::from_millis(11_000)));
        assert_eq!(f.handle_timeout(Timestamp::from_millis(10_999)), None);
        f.tokens_answered();
        assert_eq!(f.handle_timeout(Timestamp::from_millis(20_000)), None);
        f.token_asked(Timestamp::from_millis(30_000));
        assert_eq!(
            f.handle_timeout(Timestamp::from_millis(40_000)),
            Some(FallbackReason::TokenTimeout)
        );
        assert_eq!(f.poll_timeout(), None);
    }
}
