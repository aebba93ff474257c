//! Authority keys at the command line, for every role: a server's pair (given, or its key
//! file, created on first start), and the key a client checks a server's certificate against
//! (given, or an explicit `--insecure-skip-verify`). See docs/operations.md, "Authority keys".

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use sv2::keys::{load_or_create, parse_public_key, AuthorityKeys, DEFAULT_KEY_FILE};

/// The authority key pair of a role that serves Stratum V2 (the pool, the JDS, simnet's
/// Template Provider, a terminating tap): the same flags on each, flattened into its own.
#[derive(Args, Serialize, Deserialize, Default, Clone, Debug)]
pub struct AuthorityArgs {
    /// The role's authority key pair lives in this file, created with a fresh pair on first
    /// start (mode 0600); its public key is printed at start [default:
    /// stratumlab-authority.key in the working directory].
    #[arg(long, value_name = "PATH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authority_key_file: Option<PathBuf>,
    /// The role's SV2 authority public key (base58), with --authority-secret-key, instead of
    /// the key file.
    #[arg(long, value_name = "BASE58")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authority_public_key: Option<String>,
    /// The role's SV2 authority secret key (base58), with --authority-public-key.
    #[arg(
        long,
        value_name = "BASE58",
        env = "STRATUMLAB_AUTHORITY_SECRET_KEY",
        hide_env_values = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authority_secret_key: Option<String>,
}

impl AuthorityArgs {
    /// The pair ([`server_keys`]) for `role`.
    pub fn keys(&self, role: &str) -> Result<AuthorityKeys> {
        server_keys(
            self.authority_public_key.as_deref(),
            self.authority_secret_key.as_deref(),
            self.authority_key_file.as_deref(),
            role,
        )
    }

    /// Whether any of the flags was given.
    pub fn any(&self) -> bool {
        self.authority_key_file.is_some()
            || self.authority_public_key.is_some()
            || self.authority_secret_key.is_some()
    }
}

/// A server's authority pair: both halves given (the reference pair only with a warning, its
/// secret being public), or the pair in `file` (default [`DEFAULT_KEY_FILE`] in the working
/// directory), created there when missing.
pub fn server_keys(
    public: Option<&str>,
    secret: Option<&str>,
    file: Option<&Path>,
    role: &str,
) -> Result<AuthorityKeys> {
    match (public, secret) {
        (Some(p), Some(s)) => {
            if file.is_some() {
                bail!("--authority-key-file and --authority-public-key/--authority-secret-key exclude each other");
            }
            let keys = AuthorityKeys::from_strings(p, s).context("authority key pair")?;
            if keys.is_reference() {
                tracing::warn!(
                    role,
                    "using the SV2 reference authority key pair, whose secret is public: anyone can impersonate this server"
                );
            }
            Ok(keys)
        }
        (None, None) => {
            let path: PathBuf =
                file.map_or_else(|| PathBuf::from(DEFAULT_KEY_FILE), Path::to_owned);
            let (keys, created) = load_or_create(&path)?;
            if created {
                tracing::info!(role, path = %path.display(), public_key = %keys.public_key(), "created a fresh authority key pair");
            } else {
                tracing::info!(role, path = %path.display(), public_key = %keys.public_key(), "authority key pair loaded");
            }
            Ok(keys)
        }
        _ => bail!("--authority-public-key and --authority-secret-key go together"),
    }
}

/// The key a client checks a server's certificate against: `Some` from `key` (given as
/// `flag`), `None` (accept any certificate) only with `insecure`; neither is an error that says
/// what to give.
pub fn server_key(key: Option<&str>, insecure: bool, flag: &str) -> Result<Option<[u8; 32]>> {
    match (key, insecure) {
        (Some(k), false) => Ok(Some(parse_public_key(k).with_context(|| flag.to_owned())?)),
        (Some(_), true) => bail!("{flag} and --insecure-skip-verify exclude each other"),
        (None, true) => {
            tracing::warn!(
                flag,
                "--insecure-skip-verify: accepting any server certificate"
            );
            Ok(None)
        }
        (None, false) => bail!(
            "{flag} BASE58 is required: the server's authority public key (it prints it at start, \
             and keeps it in its key file), or --insecure-skip-verify to accept any server"
        ),
    }
}
