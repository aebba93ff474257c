//! Who may call: a user and password, and/or Core's cookie.
//!
//! Without `-rpcpassword`, Bitcoin Core writes `__cookie__:<64 hex digits>` (32 random bytes)
//! to `.cookie` in the chain's data directory (`<datadir>/regtest/.cookie` for regtest), readable
//! by the owner only, and deletes it when it stops. Pool software and RPC libraries find it
//! there; some look in `<datadir>/.cookie` (mainnet's place), so the cookie is written to both.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The user name of cookie credentials.
pub const COOKIE_USER: &str = "__cookie__";

/// Credentials the endpoint accepts. Dropping it deletes the cookie files it wrote.
#[derive(Debug)]
pub struct RpcAuth {
    credentials: Vec<(String, String)>,
    cookie_files: Vec<PathBuf>,
}

impl RpcAuth {
    /// `-rpcuser` / `-rpcpassword`.
    pub fn user_password(user: impl Into<String>, password: impl Into<String>) -> Self {
        RpcAuth {
            credentials: vec![(user.into(), password.into())],
            cookie_files: Vec::new(),
        }
    }

    /// Fresh cookie credentials written to `<datadir>/regtest/.cookie` and `<datadir>/.cookie`
    /// (directories created as needed).
    pub fn cookie(datadir: &Path) -> io::Result<Self> {
        let mut auth = RpcAuth {
            credentials: Vec::new(),
            cookie_files: Vec::new(),
        };
        auth.add_cookie(datadir)?;
        Ok(auth)
    }

    /// Also accepts a user and password (Core accepts both a cookie and `-rpcauth` users).
    pub fn and_user_password(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.credentials.push((user.into(), password.into()));
        self
    }

    fn add_cookie(&mut self, datadir: &Path) -> io::Result<()> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| io::Error::other(e.to_string()))?;
        let password = hex::encode(secret);
        let line = format!("{COOKIE_USER}:{password}");
        for path in [
            datadir.join(crate::config::CHAIN_NAME).join(".cookie"),
            datadir.join(".cookie"),
        ] {
            write_cookie(&path, &line)?;
            self.cookie_files.push(path);
        }
        self.credentials.push((COOKIE_USER.to_owned(), password));
        Ok(())
    }

    /// Where the cookie was written (empty for user/password only).
    pub fn cookie_files(&self) -> &[PathBuf] {
        &self.cookie_files
    }

    /// Deletes the cookie files now (also done on drop). The credentials stay valid for a
    /// server still running with them.
    pub fn remove_cookie(&mut self) {
        for path in self.cookie_files.drain(..) {
            if let Err(e) = fs::remove_file(&path) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(path = %path.display(), error = %e, "could not remove the RPC cookie");
                }
            }
        }
    }

    /// Whether `user:password` is one of the accepted credentials, compared in time that does
    /// not depend on where they differ (Core's `TimingResistantEqual`).
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        // Check every entry, so the time taken does not tell which user exists either.
        self.credentials.iter().fold(false, |ok, (u, p)| {
            let u_ok = timing_resistant_eq(u.as_bytes(), user);
            let p_ok = timing_resistant_eq(p.as_bytes(), password);
            ok | (u_ok & p_ok)
        })
    }

    /// A copy of the credentials without the cookie files (for the server's tasks).
    pub(crate) fn credentials_only(&self) -> RpcAuth {
        RpcAuth {
            credentials: self.credentials.clone(),
            cookie_files: Vec::new(),
        }
    }
}

impl Drop for RpcAuth {
    fn drop(&mut self) {
        self.remove_cookie();
    }
}

/// Written to a temporary file, owner-only, then renamed into place, so that a reader never
/// sees half a cookie (as Core does).
fn write_cookie(path: &Path, line: &str) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(&tmp)?;
    f.write_all(line.as_bytes())?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path)
}

fn timing_resistant_eq(a: &[u8], b: &[u8]) -> bool {
    // Like Core: every byte of the expected value `a` is compared, whatever `b` is.
    if b.is_empty() {
        return a.is_empty();
    }
    let mut acc = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        acc |= (x ^ b[i % b.len()]) as usize;
    }
    acc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_compare_exactly() {
        let auth = RpcAuth::user_password("alice", "s3cret").and_user_password("bob", "");
        assert!(auth.check(b"alice", b"s3cret"));
        assert!(auth.check(b"bob", b""));
        assert!(!auth.check(b"alice", b"s3cre"));
        assert!(!auth.check(b"alice", b"s3cret!"));
        assert!(!auth.check(b"alice", b"s3creT"));
        assert!(!auth.check(b"alic", b"s3cret"));
        assert!(!auth.check(b"", b""));
    }

    #[test]
    fn cookie_has_cores_format_and_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut auth = RpcAuth::cookie(dir.path()).unwrap();
        let files = auth.cookie_files().to_vec();
        assert_eq!(
            files,
            [
                dir.path().join("regtest/.cookie"),
                dir.path().join(".cookie")
            ]
        );
        let line = fs::read_to_string(&files[0]).unwrap();
        assert_eq!(line, fs::read_to_string(&files[1]).unwrap());
        let (user, pass) = line.split_once(':').unwrap();
        assert_eq!(user, "__cookie__");
        assert_eq!(pass.len(), 64);
        assert!(pass
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert!(auth.check(user.as_bytes(), pass.as_bytes()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        auth.remove_cookie();
        assert!(!files[0].exists() && !files[1].exists());
        assert!(
            auth.check(user.as_bytes(), pass.as_bytes()),
            "still valid for a running server"
        );
    }
}
