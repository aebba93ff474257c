//! Tokens the JDS issues, in the pool's scheme (`pool::jd_token`): an allocated token lets a
//! client declare one job; a declared token vouches for that job's coinbase outputs.
//!
//! Tokens carry their own claims under an HMAC, so checking one needs no table. Only "used
//! once" needs memory: the ids of allocated tokens already redeemed, kept until they expire
//! (after that the expiry check refuses them anyway), so the table is bounded by the
//! allocation rate times the token lifetime.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use pool::jd_token::{OutputsDigest, TokenClaims, TokenError, TokenKey, TokenKind};

use crate::UnixMillis;

/// Why an allocated token cannot be redeemed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RedeemError {
    /// The token itself does not check out (see [`TokenError`]).
    #[error("{0}")]
    Invalid(#[from] TokenError),
    /// The token was already redeemed by a declaration.
    #[error("token was already used for a declaration")]
    Reused,
}

/// Issues tokens under the key the pool shares, and remembers which were redeemed.
pub struct TokenIssuer {
    key: TokenKey,
    lifetime: Duration,
    next_id: AtomicU64,
    /// Redeemed allocated tokens: id -> expiry (Unix ms).
    redeemed: Mutex<HashMap<u64, u64>>,
}

impl std::fmt::Debug for TokenIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIssuer")
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl TokenIssuer {
    /// `start` seeds the ids: ids must not repeat across runs under one key while older tokens
    /// are still valid, so the shell seeds with the start time (ms << 20 leaves room for a
    /// million tokens per millisecond of uptime before two runs could meet).
    pub fn new(key: TokenKey, lifetime: Duration, start: UnixMillis) -> TokenIssuer {
        TokenIssuer {
            key,
            lifetime,
            next_id: AtomicU64::new(start.0 << 20),
            redeemed: Mutex::new(HashMap::new()),
        }
    }

    /// How long issued tokens stay valid.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    fn issue(&self, kind: TokenKind, outputs: OutputsDigest, now: UnixMillis) -> Vec<u8> {
        self.key.issue(&TokenClaims {
            kind,
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            expires_ms: now.plus(self.lifetime).0,
            outputs,
        })
    }

    /// A token for `AllocateMiningJobToken.Success`.
    pub fn allocate(&self, now: UnixMillis) -> Vec<u8> {
        self.issue(TokenKind::Allocated, OutputsDigest::default(), now)
    }

    /// A token for `DeclareMiningJob.Success`, committing to the job's coinbase outputs.
    pub fn declare(&self, outputs: OutputsDigest, now: UnixMillis) -> Vec<u8> {
        self.issue(TokenKind::Declared, outputs, now)
    }

    /// Checks an allocated token and marks it used: a second redemption is refused.
    pub fn redeem(&self, token: &[u8], now: UnixMillis) -> Result<TokenClaims, RedeemError> {
        let claims = self.key.verify_kind(token, TokenKind::Allocated, now.0)?;
        let mut redeemed = self.redeemed.lock().unwrap_or_else(|p| p.into_inner());
        // Expired entries go once the table has grown; their tokens fail the expiry check.
        if redeemed.len() >= 1024 && redeemed.len().is_power_of_two() {
            redeemed.retain(|_, expires| *expires >= now.0);
        }
        if redeemed.insert(claims.id, claims.expires_ms).is_some() {
            return Err(RedeemError::Reused);
        }
        Ok(claims)
    }

    /// Redeemed tokens still remembered.
    pub fn redeemed_count(&self) -> usize {
        self.redeemed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}
