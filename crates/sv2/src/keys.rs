//! Authority key pairs: what SV2 servers sign their Noise certificates with.
//!
//! SV2 authenticates a server by a certificate over its per-connection static key, signed with a
//! long-lived authority key whose public half the client is configured with (Noise NX plus the
//! signature message of the spec's section on protocol security). Keys are written in the
//! reference implementation's base58check forms, so the same strings go into a pool_sv2 or
//! translator config.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use key_utils::{Secp256k1PublicKey, Secp256k1SecretKey};
use noise_sv2::Responder;

/// Public half of the SV2 reference implementation's example authority key pair (test use only:
/// the secret is published). Roles default to it so that reference roles configured from their
/// examples connect without changes.
pub const REFERENCE_AUTHORITY_PUBLIC_KEY: &str =
    "9auqWEzQDVyd2oe1JVGFLMLHZtCo2FFqZwtKA5gd9xbuEu7PH72";
/// Secret half of the reference example pair (published; never protects anything real).
pub const REFERENCE_AUTHORITY_SECRET_KEY: &str =
    "mkDLTBBRxdBv998612qipDYoTK3YUrqLe8uWw7gu3iXbSrn2n";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("authority public key {key:?} does not parse: {reason}")]
    Public { key: String, reason: String },
    #[error("authority secret key does not parse: {0}")]
    Secret(String),
    #[error("authority public key {public} is not the public half of the secret key (that is {derived})")]
    Mismatch { public: String, derived: String },
    #[error("noise responder could not be built from the authority keys: {0}")]
    Responder(String),
}

/// A checked authority key pair: the public key is the secret key's.
#[derive(Clone, Copy)]
pub struct AuthorityKeys {
    public: Secp256k1PublicKey,
    secret: Secp256k1SecretKey,
}

impl AuthorityKeys {
    /// The reference example pair ([`REFERENCE_AUTHORITY_PUBLIC_KEY`]).
    pub fn reference() -> AuthorityKeys {
        AuthorityKeys::from_strings(
            REFERENCE_AUTHORITY_PUBLIC_KEY,
            REFERENCE_AUTHORITY_SECRET_KEY,
        )
        .expect("the reference key pair is a valid pair")
    }

    /// Parses both halves and checks that they belong together, so that a typo shows up at
    /// start rather than as every client's handshake failing.
    pub fn from_strings(public: &str, secret: &str) -> Result<AuthorityKeys, KeyError> {
        let public_key =
            Secp256k1PublicKey::from_str(public.trim()).map_err(|e| KeyError::Public {
                key: public.to_owned(),
                reason: e.to_string(),
            })?;
        let secret_key = Secp256k1SecretKey::from_str(secret.trim())
            .map_err(|e| KeyError::Secret(e.to_string()))?;
        let derived = Secp256k1PublicKey::from(secret_key);
        if derived.into_bytes() != public_key.into_bytes() {
            return Err(KeyError::Mismatch {
                public: public.to_owned(),
                derived: derived.to_string(),
            });
        }
        Ok(AuthorityKeys {
            public: public_key,
            secret: secret_key,
        })
    }

    /// A pair whose public half is derived from `secret`.
    pub fn from_secret(secret: &str) -> Result<AuthorityKeys, KeyError> {
        let secret = Secp256k1SecretKey::from_str(secret.trim())
            .map_err(|e| KeyError::Secret(e.to_string()))?;
        Ok(AuthorityKeys {
            public: Secp256k1PublicKey::from(secret),
            secret,
        })
    }

    /// The public key in the base58check form clients are configured with.
    pub fn public_key(&self) -> String {
        self.public.to_string()
    }

    /// The x-only public key bytes (what a Noise initiator checks the certificate against).
    pub fn public_bytes(&self) -> [u8; 32] {
        self.public.into_bytes()
    }

    /// A Noise responder for one connection: fresh static and ephemeral keys, and a certificate
    /// over the static key signed with this pair, valid for `cert_validity` from the handshake.
    pub fn responder(&self, cert_validity: Duration) -> Result<Box<Responder>, KeyError> {
        Responder::from_authority_kp(
            &self.public.into_bytes(),
            &self.secret.into_bytes(),
            cert_validity,
        )
        .map_err(|e| KeyError::Responder(format!("{e:?}")))
    }
}

impl Default for AuthorityKeys {
    fn default() -> Self {
        AuthorityKeys::reference()
    }
}

/// Shows only the public key: the secret stays out of logs.
impl fmt::Debug for AuthorityKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorityKeys")
            .field("public", &self.public_key())
            .finish_non_exhaustive()
    }
}

/// Parses a base58check authority public key into the bytes a Noise initiator checks against.
pub fn parse_public_key(key: &str) -> Result<[u8; 32], KeyError> {
    Secp256k1PublicKey::from_str(key.trim())
        .map(|k| k.into_bytes())
        .map_err(|e| KeyError::Public {
            key: key.to_owned(),
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_pair_is_a_pair_and_round_trips() {
        let k = AuthorityKeys::reference();
        assert_eq!(k.public_key(), REFERENCE_AUTHORITY_PUBLIC_KEY);
        assert_eq!(
            AuthorityKeys::from_secret(REFERENCE_AUTHORITY_SECRET_KEY)
                .unwrap()
                .public_key(),
            REFERENCE_AUTHORITY_PUBLIC_KEY
        );
        assert_eq!(
            parse_public_key(REFERENCE_AUTHORITY_PUBLIC_KEY).unwrap(),
            k.public_bytes()
        );
        assert!(!format!("{k:?}").contains(REFERENCE_AUTHORITY_SECRET_KEY));
        assert!(k.responder(Duration::from_secs(60)).is_ok());
    }

    #[test]
    fn bad_and_mismatched_keys_are_errors() {
        assert!(matches!(
            AuthorityKeys::from_strings("nonsense", REFERENCE_AUTHORITY_SECRET_KEY),
            Err(KeyError::Public { .. })
        ));
        assert!(matches!(
            AuthorityKeys::from_strings(REFERENCE_AUTHORITY_PUBLIC_KEY, "nonsense"),
            Err(KeyError::Secret(_))
        ));
        // Another valid secret key (32 bytes of 0x01 in base58check): not the reference pair's.
        let other = "SeLqn3UAUoRymWmwW7axrzJK7JfNaBR2cHCryA6cFsgFkHEF";
        assert!(AuthorityKeys::from_secret(other).is_ok());
        assert!(matches!(
            AuthorityKeys::from_strings(REFERENCE_AUTHORITY_PUBLIC_KEY, other),
            Err(KeyError::Mismatch { .. })
        ));
    }
}
