//! Mining job tokens: how a Job Declarator Server vouches for work the pool did not build.
//!
//! The JDS hands out a token with `AllocateMiningJobToken.Success` and, once a declared job
//! checks out, a second one with `DeclareMiningJob.Success`. The pool accepts a
//! `SetCustomMiningJob` only under a declared token. The JDS may run in another process (the
//! spec allows a third party), so the pool cannot look tokens up: they carry their own claims
//! and an HMAC-SHA256 under a key the pool and the JDS share. A declared token also commits to
//! the coinbase outputs the JDS checked, so the pool can tell that the job it is asked to
//! account for pays what was declared.
//!
//! Layout (49 bytes, well inside the spec's B0_255):
//! `kind (1) || id (8, LE) || expires_ms (8, LE, Unix time) || outputs digest (16) || mac (16)`.

use std::fmt;
use std::path::Path;

use primitives::bitcoin::consensus::Encodable;
use primitives::bitcoin::hashes::{hmac, sha256, Hash, HashEngine};
use primitives::bitcoin::TxOut;

const MAC_LEN: usize = 16;
const DIGEST_LEN: usize = 16;
const CLAIMS_LEN: usize = 1 + 8 + 8 + DIGEST_LEN;
/// The length of every token this module issues.
pub const TOKEN_LEN: usize = CLAIMS_LEN + MAC_LEN;

/// Which step of job declaration a token comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// From `AllocateMiningJobToken.Success`: lets the client declare one job.
    Allocated,
    /// From `DeclareMiningJob.Success`: the JDS checked the job; the pool may account for it.
    Declared,
}

impl TokenKind {
    fn byte(self) -> u8 {
        match self {
            TokenKind::Allocated => 1,
            TokenKind::Declared => 2,
        }
    }

    fn from_byte(b: u8) -> Option<TokenKind> {
        match b {
            1 => Some(TokenKind::Allocated),
            2 => Some(TokenKind::Declared),
            _ => None,
        }
    }
}

/// A SHA-256 digest of coinbase outputs, cut to 16 bytes (a commitment, not a name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct OutputsDigest(pub [u8; DIGEST_LEN]);

impl OutputsDigest {
    /// Over the outputs in order, each consensus-serialized, without a count: the same bytes
    /// whether they arrived count-prefixed or not.
    pub fn of(outputs: &[TxOut]) -> OutputsDigest {
        let mut engine = sha256::Hash::engine();
        for o in outputs {
            o.consensus_encode(&mut engine)
                .expect("hash engines do not fail");
        }
        let h = sha256::Hash::from_engine(engine);
        let mut d = [0u8; DIGEST_LEN];
        d.copy_from_slice(&h.as_byte_array()[..DIGEST_LEN]);
        OutputsDigest(d)
    }
}

/// What a token says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenClaims {
    /// Allocated (from `AllocateMiningJobToken`) or declared (vouching for a job).
    pub kind: TokenKind,
    /// Unique per issuing JDS run (with the key, unique per deployment).
    pub id: u64,
    /// Unix time in milliseconds after which the token is refused.
    pub expires_ms: u64,
    /// For [`TokenKind::Declared`]: the coinbase outputs the JDS checked. Zero otherwise.
    pub outputs: OutputsDigest,
}

/// Why a token is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not [`TOKEN_LEN`] bytes long (the length given).
    #[error("token is {0} bytes, expected {TOKEN_LEN}")]
    Length(usize),
    /// Its kind byte names no kind.
    #[error("token kind {0} is unknown")]
    Kind(u8),
    /// Its MAC does not verify: forged, altered, or issued under another key.
    #[error("token was not issued under this key")]
    Mac,
    /// Past its expiry, by this many milliseconds.
    #[error("token expired {0} ms ago")]
    Expired(u64),
    /// The wrong kind for the message (an allocated token where a declared one is needed, say).
    #[error("token is an {got:?} one where a {want:?} one is needed")]
    WrongKind {
        /// The token's kind.
        got: TokenKind,
        /// The kind the message needs.
        want: TokenKind,
    },
}

/// Why the token key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file could not be read.
    #[error("reading the job token key {path}: {source}")]
    Read {
        /// The key file.
        path: String,
        /// The OS's error.
        source: std::io::Error,
    },
    /// Not 64 hex digits (how many characters there were).
    #[error("the job token key must be 64 hex digits (32 bytes), got {0} characters")]
    Format(usize),
}

/// The secret the pool and its JDS share.
#[derive(Clone)]
pub struct TokenKey([u8; 32]);

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

impl TokenKey {
    /// The key with these 32 bytes.
    pub fn from_bytes(b: [u8; 32]) -> TokenKey {
        TokenKey(b)
    }

    /// 64 hex digits, surrounding whitespace ignored.
    pub fn from_hex(s: &str) -> Result<TokenKey, KeyError> {
        let s = s.trim();
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(KeyError::Format(s.len()));
        }
        let mut k = [0u8; 32];
        for (i, byte) in k.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
                .map_err(|_| KeyError::Format(s.len()))?;
        }
        Ok(TokenKey(k))
    }

    /// A file holding the key as hex (what `--jd-token-key` names).
    pub fn read(path: &Path) -> Result<TokenKey, KeyError> {
        let s = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        TokenKey::from_hex(&s)
    }

    /// The key as 64 lowercase hex digits (the key file's format).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn mac(&self, claims: &[u8]) -> [u8; MAC_LEN] {
        let mut engine = hmac::HmacEngine::<sha256::Hash>::new(&self.0);
        engine.input(claims);
        let h = hmac::Hmac::<sha256::Hash>::from_engine(engine);
        let mut m = [0u8; MAC_LEN];
        m.copy_from_slice(&h.as_byte_array()[..MAC_LEN]);
        m
    }

    /// A token carrying `c`, MACed under this key ([`TOKEN_LEN`] bytes).
    pub fn issue(&self, c: &TokenClaims) -> Vec<u8> {
        let mut t = Vec::with_capacity(TOKEN_LEN);
        t.push(c.kind.byte());
        t.extend_from_slice(&c.id.to_le_bytes());
        t.extend_from_slice(&c.expires_ms.to_le_bytes());
        t.extend_from_slice(&c.outputs.0);
        let mac = self.mac(&t);
        t.extend_from_slice(&mac);
        t
    }

    /// The claims of a token this key issued that has not expired at `now_ms` (Unix ms).
    pub fn verify(&self, token: &[u8], now_ms: u64) -> Result<TokenClaims, TokenError> {
        if token.len() != TOKEN_LEN {
            return Err(TokenError::Length(token.len()));
        }
        let (claims, mac) = token.split_at(CLAIMS_LEN);
        // Not constant-time: a forger learns nothing useful from timing a 16-byte compare
        // against a MAC recomputed for each attempt's own claims.
        if self.mac(claims) != mac {
            return Err(TokenError::Mac);
        }
        let kind = TokenKind::from_byte(claims[0]).ok_or(TokenError::Kind(claims[0]))?;
        let id = u64::from_le_bytes(claims[1..9].try_into().expect("8 bytes"));
        let expires_ms = u64::from_le_bytes(claims[9..17].try_into().expect("8 bytes"));
        let mut outputs = [0u8; DIGEST_LEN];
        outputs.copy_from_slice(&claims[17..CLAIMS_LEN]);
        if now_ms > expires_ms {
            return Err(TokenError::Expired(now_ms - expires_ms));
        }
        Ok(TokenClaims {
            kind,
            id,
            expires_ms,
            outputs: OutputsDigest(outputs),
        })
    }

    /// [`TokenKey::verify`], and the token must be of `want` kind.
    pub fn verify_kind(
        &self,
        token: &[u8],
        want: TokenKind,
        now_ms: u64,
    ) -> Result<TokenClaims, TokenError> {
        let c = self.verify(token, now_ms)?;
        if c.kind != want {
            return Err(TokenError::WrongKind { got: c.kind, want });
        }
        Ok(c)
    }
}

/// Declared tokens the pool has accepted a job under, so that each buys one job: a token
/// commits to the outputs the JDS checked, not to the header or transactions, and a client
/// reusing it could set jobs the JDS never saw. Shared by every connection; a token is
/// forgotten once it has expired (it would be refused anyway).
#[derive(Debug, Default)]
pub struct UsedTokens {
    /// (id, expiry) of each token: ids alone restart with their JDS.
    seen: std::sync::Mutex<std::collections::HashMap<(u64, u64), ()>>,
}

impl UsedTokens {
    /// Records `c` as used at `now_ms`: `false` if it was used before.
    pub fn claim(&self, c: &TokenClaims, now_ms: u64) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= 1024 {
            seen.retain(|&(_, expires), _| expires >= now_ms);
        }
        seen.insert((c.id, c.expires_ms), ()).is_none()
    }

    /// Marks tokens used by an earlier run (id, expiry) as used.
    pub fn restore(&self, tokens: impl IntoIterator<Item = (u64, u64)>) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.extend(tokens.into_iter().map(|t| (t, ())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use primitives::bitcoin::{Amount, ScriptBuf};

    fn key(b: u8) -> TokenKey {
        TokenKey::from_bytes([b; 32])
    }

    fn claims(kind: TokenKind) -> TokenClaims {
        TokenClaims {
            kind,
            id: 42,
            expires_ms: 1_000_000,
            outputs: OutputsDigest([7; 16]),
        }
    }

    #[test]
    fn a_token_verifies_under_its_key_until_it_expires() {
        let t = key(1).issue(&claims(TokenKind::Declared));
        assert_eq!(t.len(), TOKEN_LEN);
        assert_eq!(key(1).verify(&t, 999_999), Ok(claims(TokenKind::Declared)));
        assert_eq!(
            key(1).verify(&t, 1_000_000),
            Ok(claims(TokenKind::Declared))
        );
        assert_eq!(key(1).verify(&t, 1_000_250), Err(TokenError::Expired(250)));
    }

    #[test]
    fn another_key_a_flipped_bit_or_a_cut_token_is_refused() {
        let t = key(1).issue(&claims(TokenKind::Allocated));
        assert_eq!(key(2).verify(&t, 0), Err(TokenError::Mac));
        for i in 0..t.len() {
            let mut bad = t.clone();
            bad[i] ^= 0x10;
            assert_eq!(key(1).verify(&bad, 0), Err(TokenError::Mac), "byte {i}");
        }
        assert_eq!(key(1).verify(&t[..48], 0), Err(TokenError::Length(48)));
        assert_eq!(key(1).verify(&[], 0), Err(TokenError::Length(0)));
    }

    #[test]
    fn an_allocated_token_is_not_a_declared_one() {
        let t = key(1).issue(&claims(TokenKind::Allocated));
        assert_eq!(
            key(1).verify_kind(&t, TokenKind::Declared, 0),
            Err(TokenError::WrongKind {
                got: TokenKind::Allocated,
                want: TokenKind::Declared
            })
        );
        assert!(key(1).verify_kind(&t, TokenKind::Allocated, 0).is_ok());
    }

    #[test]
    fn the_outputs_digest_sees_values_scripts_and_order() {
        let a = TxOut {
            value: Amount::from_sat(5),
            script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
        };
        let b = TxOut {
            value: Amount::ZERO,
            script_pubkey: ScriptBuf::from_bytes(vec![0x6a, 0x01, 0x02]),
        };
        let base = OutputsDigest::of(&[a.clone(), b.clone()]);
        assert_eq!(base, OutputsDigest::of(&[a.clone(), b.clone()]));
        assert_ne!(base, OutputsDigest::of(&[b.clone(), a.clone()]));
        let mut richer = a.clone();
        richer.value = Amount::from_sat(6);
        assert_ne!(base, OutputsDigest::of(&[richer, b.clone()]));
        assert_ne!(base, OutputsDigest::of(&[a]));
    }

    #[test]
    fn a_declared_token_buys_one_job_and_expired_ones_are_forgotten() {
        let used = UsedTokens::default();
        let c = claims(TokenKind::Declared);
        assert!(used.claim(&c, 0));
        assert!(!used.claim(&c, 10));
        // Same id from a restarted JDS: another expiry, another token.
        assert!(used.claim(
            &TokenClaims {
                expires_ms: 2_000_000,
                ..c
            },
            10
        ));
        for id in 100..1200 {
            used.claim(
                &TokenClaims {
                    id,
                    expires_ms: 5,
                    ..c
                },
                0,
            );
        }
        // Pruning drops only expired tokens.
        used.claim(&TokenClaims { id: 7, ..c }, 6);
        assert!(!used.claim(&c, 6));
        assert!(used.seen.lock().unwrap().len() < 1024);
    }

    #[test]
    fn keys_read_from_hex() {
        let k = key(0xab);
        assert_eq!(
            TokenKey::from_hex(&format!(" {}\n", k.to_hex())).unwrap().0,
            k.0
        );
        assert!(matches!(
            TokenKey::from_hex("abcd"),
            Err(KeyError::Format(4))
        ));
        assert!(TokenKey::from_hex(&"zz".repeat(32)).is_err());
    }
}
