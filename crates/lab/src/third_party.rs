//! Third-party roles a configuration may run (today the SV2 reference pool for D-ref): where
//! their binaries are, which versions they are, and the minimal loopback configs the lab writes
//! for them (never their shipped examples, which bind 0.0.0.0 and scan a LAN range).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The reference pool version the lab is written against (FIELD-NOTES.md).
pub const POOL_SV2_VERSION: &str = "0.7.0";

/// The SV2 reference authority key pair (published in the reference implementation's examples;
/// test use only). simnet's Template Provider, our SV2 pool and pool_sv2 all sign with it in the
/// lab, and the devices check it.
pub const REFERENCE_AUTHORITY_PUBLIC_KEY: &str =
    "9auqWEzQDVyd2oe1JVGFLMLHZtCo2FFqZwtKA5gd9xbuEu7PH72";
pub const REFERENCE_AUTHORITY_SECRET_KEY: &str =
    "mkDLTBBRxdBv998612qipDYoTK3YUrqLe8uWw7gu3iXbSrn2n";

/// The line pool_sv2 logs once it serves miners (it listens only after its first template and
/// prev hash).
pub const POOL_SV2_READY: &str = "ready to accept connections";

#[derive(Debug, thiserror::Error)]
pub enum ThirdPartyError {
    #[error(
        "configuration {config} needs the SV2 reference pool `pool_sv2` {POOL_SV2_VERSION}, which \
         was not found (looked at $STRATUMLAB_POOL_SV2, {cache}, and PATH). Install it with \
         `cargo install --locked pool_sv2 --version ={POOL_SV2_VERSION} --root {root}` (needs \
         Debian's capnproto and libcapnp-dev), or run `bash scripts/interop-fleet-sv2.sh`, which \
         installs it there"
    )]
    PoolSv2Missing {
        config: String,
        cache: String,
        root: String,
    },
    #[error("{path}: {why}")]
    Unusable { path: String, why: String },
}

/// A third-party binary the run will start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tool {
    pub path: PathBuf,
    /// What `--version` printed (first line).
    pub version: String,
}

/// Where the CI scripts cache pinned tools.
pub fn tools_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("STRATUMLAB_TOOLS_DIR") {
        return d.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache.join("stratumlab-ci")
}

/// Finds pool_sv2: `$STRATUMLAB_POOL_SV2`, then the CI scripts' cache, then PATH.
pub fn find_pool_sv2(config: &str) -> Result<Tool, ThirdPartyError> {
    let root = tools_dir().join(format!("pool_sv2-{POOL_SV2_VERSION}"));
    let cached = root.join("bin").join("pool_sv2");
    let candidates = std::env::var_os("STRATUMLAB_POOL_SV2")
        .map(PathBuf::from)
        .into_iter()
        .chain([cached.clone()])
        .chain(search_path("pool_sv2"));
    for path in candidates {
        if path.is_file() {
            let version = version_of(&path)?;
            return Ok(Tool { path, version });
        }
    }
    Err(ThirdPartyError::PoolSv2Missing {
        config: config.to_owned(),
        cache: cached.display().to_string(),
        root: root.display().to_string(),
    })
}

fn search_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn version_of(path: &Path) -> Result<String, ThirdPartyError> {
    let unusable = |why: String| ThirdPartyError::Unusable {
        path: path.display().to_string(),
        why,
    };
    let out = Command::new(path)
        .arg("--version")
        .output()
        .map_err(|e| unusable(format!("cannot run it: {e}")))?;
    if !out.status.success() {
        return Err(unusable(format!("`--version` failed: {}", out.status)));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().next().unwrap_or("").trim().to_owned())
}

/// What the lab sets in pool_sv2's config.
pub struct PoolSv2Config<'a> {
    pub listen: std::net::SocketAddr,
    pub template_provider: std::net::SocketAddr,
    pub payout_address: &'a str,
    pub shares_per_minute: f64,
}

impl PoolSv2Config<'_> {
    /// A minimal config: miners on loopback only, no monitoring, no job declaration.
    /// Successes are acknowledged one share at a time: a device sends one share per read, and
    /// our pool acknowledges at the end of each read, so share latency compares like for like
    /// (a larger batch would hold a device's verdict until later shares arrive).
    pub fn toml(&self) -> String {
        format!(
            "authority_public_key = \"{REFERENCE_AUTHORITY_PUBLIC_KEY}\"\n\
             authority_secret_key = \"{REFERENCE_AUTHORITY_SECRET_KEY}\"\n\
             cert_validity_sec = 3600\n\
             listen_address = \"{}\"\n\
             coinbase_reward_script = \"addr({})\"\n\
             server_id = 1\n\
             pool_signature = \"stratumlab lab D-ref\"\n\
             shares_per_minute = {:?}\n\
             share_batch_size = 1\n\
             \n\
             [template_provider_type.Sv2Tp]\n\
             address = \"{}\"\n\
             public_key = \"{REFERENCE_AUTHORITY_PUBLIC_KEY}\"\n",
            self.listen, self.payout_address, self.shares_per_minute as f32, self.template_provider,
        )
    }
}

/// A free loopback port for a role that cannot report the one it bound (pool_sv2 takes a fixed
/// address). The port is released before the role binds it; on loopback, with the kernel
/// handing out ephemeral ports in sequence, a collision in that instant is unlikely, and the
/// role then fails loudly rather than silently.
pub fn free_loopback_port() -> std::io::Result<std::net::SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    l.local_addr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_sv2_config_binds_loopback_and_acknowledges_each_share() {
        let c = PoolSv2Config {
            listen: "127.0.0.1:34255".parse().unwrap(),
            template_provider: "127.0.0.1:8442".parse().unwrap(),
            payout_address: "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080",
            shares_per_minute: 15.0,
        };
        let text = c.toml();
        let v: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(v["listen_address"].as_str(), Some("127.0.0.1:34255"));
        assert_eq!(v["shares_per_minute"].as_float(), Some(15.0));
        assert_eq!(v["share_batch_size"].as_integer(), Some(1));
        assert_eq!(
            v["template_provider_type"]["Sv2Tp"]["address"].as_str(),
            Some("127.0.0.1:8442")
        );
        assert!(
            !text.contains("0.0.0.0") && !text.contains("192.168"),
            "{text}"
        );
    }

    #[test]
    fn a_missing_pool_sv2_says_how_to_install_it() {
        let e = ThirdPartyError::PoolSv2Missing {
            config: "D-ref".into(),
            cache: "/c/bin/pool_sv2".into(),
            root: "/c".into(),
        }
        .to_string();
        assert!(
            e.contains("D-ref") && e.contains("cargo install --locked pool_sv2"),
            "{e}"
        );
    }
}
