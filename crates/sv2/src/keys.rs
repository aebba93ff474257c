//! Authority key pairs: what SV2 servers sign their Noise certificates with.
//!
//! SV2 authenticates a server by a certificate over its per-connection static key, signed with a
//! long-lived authority key whose public half the client is configured with (Noise NX plus the
//! signature message of the spec's section on protocol security). Keys are written in the
//! reference implementation's base58check forms, so the same strings go into a pool_sv2 or
//! translator config.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use key_utils::{Secp256k1PublicKey, Secp256k1SecretKey};
use noise_sv2::Responder;

/// Public half of the SV2 reference implementation's example authority key pair (test use only:
/// the secret is published). No role uses it unless told to: servers generate their own pair
/// ([`load_or_create`]).
pub const REFERENCE_AUTHORITY_PUBLIC_KEY: &str =
    "9auqWEzQDVyd2oe1JVGFLMLHZtCo2FFqZwtKA5gd9xbuEu7PH72";
/// Secret half of the reference example pair (published; never protects anything real).
pub const REFERENCE_AUTHORITY_SECRET_KEY: &str =
    "mkDLTBBRxdBv998612qipDYoTK3YUrqLe8uWw7gu3iXbSrn2n";

/// Why an authority key or key pair is refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("authority public key {key:?} does not parse: {reason}")]
    /// The public key is not a base58check x-only key.
    Public {
        /// The key as given.
        key: String,
        /// The parser's message.
        reason: String,
    },
    /// The secret key does not parse; holds the parser's message (never the key).
    #[error("authority secret key does not parse: {0}")]
    Secret(String),
    #[error("authority public key {public} is not the public half of the secret key (that is {derived})")]
    /// The public key is not the secret key's.
    Mismatch {
        /// The public key as given.
        public: String,
        /// The public key the secret key has, base58check.
        derived: String,
    },
    /// The Noise responder refused the keys; holds its message.
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

    /// A fresh pair from the operating system's randomness.
    pub fn generate() -> Result<AuthorityKeys, KeyError> {
        loop {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|e| KeyError::Secret(e.to_string()))?;
            // Out of range for secp256k1 (zero, or past the group order) about once in 2^128
            // draws: draw again.
            let encoded = primitives::bitcoin::base58::encode_check(&bytes);
            if let Ok(keys) = AuthorityKeys::from_secret(&encoded) {
                return Ok(keys);
            }
        }
    }

    /// Whether this is the reference example pair, whose secret is published.
    pub fn is_reference(&self) -> bool {
        self.public_key() == REFERENCE_AUTHORITY_PUBLIC_KEY
    }

    /// The secret key in base58check, for the key file (never logged: see the `Debug` impl).
    pub fn secret_key(&self) -> String {
        self.secret.to_string()
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

/// Shows only the public key: the secret stays out of logs.
impl fmt::Debug for AuthorityKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorityKeys")
            .field("public", &self.public_key())
            .finish_non_exhaustive()
    }
}

/// The authority key file a server creates when it is given no key pair: in the working
/// directory.
pub const DEFAULT_KEY_FILE: &str = "stratumlab-authority.key";

/// Why an authority key file cannot be read or created.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("authority key file {path}: {source}")]
    /// Reading or writing the file failed.
    Io {
        /// The key file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    #[error("authority key file {path}: no `authority_secret_key = \"...\"` line")]
    /// The file has no `authority_secret_key` line.
    NoSecret {
        /// The key file.
        path: PathBuf,
    },
    #[error("authority key file {path}: {source}")]
    /// The file's keys are refused.
    Key {
        /// The key file.
        path: PathBuf,
        /// Why.
        source: KeyError,
    },
}

/// The server's authority key pair from `path`, created there (mode 0600, the secret and the
/// public key as `key = "value"` lines, which a TOML reader also takes) when the file does not
/// exist. Returns whether it was created. Two servers starting at once on the same path get
/// the same pair: the file appears whole or not at all, and the second reads the first's.
pub fn load_or_create(path: &Path) -> Result<(AuthorityKeys, bool), KeyFileError> {
    let io = |source| KeyFileError::Io {
        path: path.to_owned(),
        source,
    };
    match read_key_file(path) {
        Ok(keys) => return Ok((keys, false)),
        Err(KeyFileError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let keys = AuthorityKeys::generate().map_err(|source| KeyFileError::Key {
        path: path.to_owned(),
        source,
    })?;
    // Written whole to a private temporary file beside it, then linked into place: a server
    // starting at the same moment sees either no file or the complete one, and the first link
    // wins.
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|e| io(std::io::Error::other(e.to_string())))?;
    let tmp = path.with_extension(format!("tmp-{}", u64::from_le_bytes(nonce)));
    let mut options = std::fs::OpenOptions::new();
    // A fresh name, never an existing file (nor one a symbolic link points at).
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(&tmp).and_then(|mut file| {
        write!(
            file,
            "# The SV2 authority key pair of a stratumlab server: the secret signs its Noise\n\
             # certificates. Keep this file private; give clients the public key.\n\
             authority_secret_key = \"{}\"\nauthority_public_key = \"{}\"\n",
            keys.secret_key(),
            keys.public_key()
        )?;
        file.sync_all()
    });
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return read_key_file(path).map(|k| (k, false));
        }
        Err(e) => return Err(io(e)),
    }
    Ok((keys, true))
}

fn read_key_file(path: &Path) -> Result<AuthorityKeys, KeyFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| KeyFileError::Io {
        path: path.to_owned(),
        source,
    })?;
    let value = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == name).then(|| v.trim().trim_matches('"').to_owned())
        })
    };
    let secret = value("authority_secret_key").ok_or_else(|| KeyFileError::NoSecret {
        path: path.to_owned(),
    })?;
    let key = |source| KeyFileError::Key {
        path: path.to_owned(),
        source,
    };
    match value("authority_public_key") {
        Some(public) => AuthorityKeys::from_strings(&public, &secret),
        None => AuthorityKeys::from_secret(&secret),
    }
    .map_err(key)
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
    fn a_key_file_is_created_private_once_and_read_back() {
        let dir = std::env::temp_dir().join(format!("sv2-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("authority.key");
        let _ = std::fs::remove_file(&path);
        let (created, fresh) = load_or_create(&path).unwrap();
        assert!(fresh);
        assert!(!created.is_reference());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        let (again, fresh) = load_or_create(&path).unwrap();
        assert!(!fresh);
        assert_eq!(again.public_key(), created.public_key());
        assert_eq!(again.secret_key(), created.secret_key());
        assert!(!format!("{again:?}").contains(&again.secret_key()));
        // Two generated pairs differ.
        assert_ne!(
            AuthorityKeys::generate().unwrap().public_key(),
            AuthorityKeys::generate().unwrap().public_key()
        );
        // A file whose public key is not the secret's is refused.
        std::fs::write(
            &path,
            format!(
                "authority_secret_key = \"{}\"\nauthority_public_key = \"{REFERENCE_AUTHORITY_PUBLIC_KEY}\"\n",
                created.secret_key()
            ),
        )
        .unwrap();
        assert!(matches!(
            load_or_create(&path),
            Err(KeyFileError::Key {
                source: KeyError::Mismatch { .. },
                ..
            })
        ));
        std::fs::write(&path, "nothing here\n").unwrap();
        assert!(matches!(
            load_or_create(&path),
            Err(KeyFileError::NoSecret { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
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
