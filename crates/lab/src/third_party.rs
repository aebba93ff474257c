//! Third-party roles a configuration or an interop check may run (the SV2 reference pool for
//! D-ref and C-ref, the SV2 reference translator for C-ref, the reference JDC and para for the
//! interop checks): where their binaries are, that they are the pinned versions, and the minimal
//! loopback configs written for them (never their shipped examples, which bind 0.0.0.0 and scan
//! a LAN range).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A pinned third-party tool: a crates.io package whose binary has the same name, at the version
/// the lab is written against (docs/architecture.md, "Third-party roles";
/// scripts/install-tools.sh installs the same versions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pinned {
    /// The package and its binary.
    pub name: &'static str,
    /// The version, exactly.
    pub version: &'static str,
    /// What it is, for a message.
    pub what: &'static str,
    /// The variable that names its binary, looked at first.
    pub env: &'static str,
}

/// The SV2 reference pool (D-ref, C-ref, the interop checks).
pub const POOL_SV2: Pinned = Pinned {
    name: "pool_sv2",
    version: "0.7.0",
    what: "the SV2 reference pool",
    env: "STRATUMLAB_POOL_SV2",
};

/// The SV2 reference translator (C-ref, the interop checks).
pub const TRANSLATOR_SV2: Pinned = Pinned {
    name: "translator_sv2",
    version: "0.6.0",
    what: "the SV2 reference translator",
    env: "STRATUMLAB_TRANSLATOR_SV2",
};

/// The SV2 reference Job Declarator Client (the interop checks).
pub const JD_CLIENT_SV2: Pinned = Pinned {
    name: "jd_client_sv2",
    version: "0.6.0",
    what: "the SV2 reference Job Declarator Client",
    env: "STRATUMLAB_JD_CLIENT_SV2",
};

/// para: an SV1 miner and solo pool (`sv1-para`, the interop checks).
pub const PARA: Pinned = Pinned {
    name: "para",
    version: "0.6.0",
    what: "the SV1 miner and pool",
    env: "STRATUMLAB_PARA",
};

/// The line pool_sv2 logs once it serves miners (it listens only after its first template and
/// prev hash).
pub const POOL_SV2_READY: &str = "ready to accept connections";

/// What translator_sv2 logs, followed by its SV1 address, once it accepts devices (after its
/// upstream channel is open).
pub const TRANSLATOR_SV2_READY: &str = "Translator Proxy: listening on ";

/// A third-party program a configuration needs is missing or unusable.
#[derive(Debug, thiserror::Error)]
pub enum ThirdPartyError {
    /// A pinned tool was not found.
    #[error(
        "configuration {config} needs {} `{}` {}, which was not found (looked at ${}, {}, and \
         PATH). Install it with `cargo install --locked {} --version ={} --root {}` (the SV2 \
         reference roles need Debian's capnproto and libcapnp-dev), or run `bash \
         scripts/install-tools.sh {}`, which installs it there",
        pin.what, pin.name, pin.version, pin.env, pin.cached().display(), pin.name, pin.version,
        pin.root().display(), pin.name
    )]
    Missing {
        /// The configuration (or check) that needs it.
        config: String,
        /// The tool.
        pin: Pinned,
    },
    /// An external configuration's program was not found.
    #[error(
        "external configuration {config}: its program {program:?} was not found ({looked}); \
         install it, or give its full path as the first item of `command`"
    )]
    ExternalMissing {
        /// The configuration's name.
        config: String,
        /// The program, as `command` names it.
        program: String,
        /// Where it was looked for.
        looked: String,
    },
    /// The binary was found but cannot be used.
    #[error("{path}: {why}")]
    Unusable {
        /// The binary's path.
        path: String,
        /// Why it cannot be used.
        why: String,
    },
}

/// A third-party binary the run will start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tool {
    /// The binary.
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

/// Finds a pinned tool: the binary its variable names, then the CI scripts' cache, then PATH;
/// it must say the pinned version. `config` names what needs it, for the error.
pub fn find(pin: &Pinned, config: &str) -> Result<Tool, ThirdPartyError> {
    let Some(path) = pin.locate() else {
        return Err(pin.missing(config));
    };
    pin.check(Tool::at(path)?)
}

impl Pinned {
    /// `tool` if it says it is this version: another behaves otherwise (config keys,
    /// messages), and the run would not be the one the lab is written against.
    fn check(&self, tool: Tool) -> Result<Tool, ThirdPartyError> {
        if !tool.version.split_whitespace().any(|w| w == self.version) {
            return Err(ThirdPartyError::Unusable {
                path: tool.path.display().to_string(),
                why: format!(
                    "`--version` says {:?}; {} {} is pinned (`bash scripts/install-tools.sh {}` \
                     installs it)",
                    tool.version, self.name, self.version, self.name
                ),
            });
        }
        Ok(tool)
    }
}

/// Locates an external configuration's program, `command[0]`, before anything starts: `para`
/// as the pinned tool; any other name on PATH; a path as given. `None`: its path holds
/// placeholders, known only when the role starts. Only para is asked its version: another
/// program may not know `--version` and start serving instead; its version is its path.
pub fn locate_external(config: &str, program: &str) -> Result<Option<Tool>, ThirdPartyError> {
    if program.contains('{') {
        return Ok(None);
    }
    if program == "para" {
        return find(&PARA, config).map(Some);
    }
    let missing = |looked: String| ThirdPartyError::ExternalMissing {
        config: config.to_owned(),
        program: program.to_owned(),
        looked,
    };
    let path = if program.contains('/') {
        let p = PathBuf::from(program);
        if !p.is_file() {
            return Err(missing("no such file".into()));
        }
        // The role runs in its own directory: a relative path must not be read from there.
        std::path::absolute(&p).map_err(|e| missing(e.to_string()))?
    } else {
        search_path(program).ok_or_else(|| missing("not on PATH".into()))?
    };
    Ok(Some(Tool {
        version: path.display().to_string(),
        path,
    }))
}

impl Tool {
    fn at(path: PathBuf) -> Result<Tool, ThirdPartyError> {
        let version = version_of(&path)?;
        Ok(Tool { path, version })
    }
}

impl Pinned {
    fn missing(&self, config: &str) -> ThirdPartyError {
        ThirdPartyError::Missing {
            config: config.to_owned(),
            pin: *self,
        }
    }

    /// Where the CI scripts install it (`cargo install --root`).
    fn root(&self) -> PathBuf {
        tools_dir().join(format!("{}-{}", self.name, self.version))
    }

    fn cached(&self) -> PathBuf {
        self.root().join("bin").join(self.name)
    }

    /// The binary named by the variable, else the cached one, else the first on PATH.
    fn locate(&self) -> Option<PathBuf> {
        std::env::var_os(self.env)
            .map(PathBuf::from)
            .into_iter()
            .chain([self.cached()])
            .chain(search_path(self.name))
            .find(|p| p.is_file())
    }
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
    /// Where miners connect.
    pub listen: std::net::SocketAddr,
    /// The pair it signs its certificates with (the trial's); the Template Provider's
    /// certificate is checked against the same public key.
    pub authority_public_key: &'a str,
    /// The secret half of `authority_public_key`.
    pub authority_secret_key: &'a str,
    /// The Template Provider (the node) it gets templates from.
    pub template_provider: std::net::SocketAddr,
    /// The address block rewards are paid to.
    pub payout_address: &'a str,
    /// The share rate per channel it sets difficulty for.
    pub shares_per_minute: f64,
    /// Extensions it negotiates with clients that ask (`supported_extensions`), such as 0x0002.
    pub extensions: &'a [u16],
    /// Where its monitoring server answers (its channels' hash-rate estimates, read by the
    /// lab), refreshed every second; `None`: no monitoring server.
    pub monitoring: Option<std::net::SocketAddr>,
}

/// The config lines that start a reference role's monitoring server at `addr`, its figures
/// refreshed every second (the role's default, 15 s, would score a stale estimate).
fn monitoring_toml(addr: Option<std::net::SocketAddr>) -> String {
    addr.map_or_else(String::new, |a| {
        format!("monitoring_address = \"{a}\"\nmonitoring_cache_refresh_secs = 1\n")
    })
}

impl PoolSv2Config<'_> {
    /// A minimal config: miners on loopback only, no job declaration, monitoring where asked.
    /// Successes are acknowledged one share at a time: a device sends one share per read, and
    /// our pool acknowledges at the end of each read, so share latency compares like for like
    /// (a larger batch would hold a device's verdict until later shares arrive).
    pub fn toml(&self) -> String {
        format!(
            "authority_public_key = \"{}\"\n\
             authority_secret_key = \"{}\"\n\
             cert_validity_sec = 3600\n\
             listen_address = \"{}\"\n\
             coinbase_reward_script = \"addr({})\"\n\
             server_id = 1\n\
             pool_signature = \"stratumlab lab\"\n\
             shares_per_minute = {:?}\n\
             share_batch_size = 1\n\
             supported_extensions = {:?}\n\
             {}\
             \n\
             [template_provider_type.Sv2Tp]\n\
             address = \"{}\"\n\
             public_key = \"{}\"\n",
            self.authority_public_key,
            self.authority_secret_key,
            self.listen,
            self.payout_address,
            self.shares_per_minute as f32,
            self.extensions,
            monitoring_toml(self.monitoring),
            self.template_provider,
            self.authority_public_key,
        )
    }
}

/// What the lab sets in translator_sv2's config.
pub struct TranslatorSv2Config<'a> {
    /// Where devices connect (the farm edge).
    pub listen: std::net::SocketAddr,
    /// The pool, as the translator reaches it (in the lab, the WAN tap in front of pool_sv2).
    pub upstream: std::net::SocketAddr,
    /// The pool's authority public key.
    pub authority_public_key: &'a str,
    /// The user identity it opens its upstream channel with.
    pub user_identity: &'a str,
    /// Hash rate of one device: with `shares_per_minute`, what sets a new device's difficulty.
    pub device_hash_rate: f64,
    /// The share rate it sets device difficulty for.
    pub shares_per_minute: f64,
    /// Every device on one extended channel (as our translator runs), or a channel per device.
    pub aggregate_channels: bool,
    /// The extranonce2 bytes a device rolls. Aggregating, the translator asks its pool for 2
    /// more (its per-device index): pool_sv2 grants 4 + 2, our pool lets a channel roll at most
    /// 4 and refuses 6 (unsupported-min-extranonce-size).
    pub extranonce2_size: u8,
    /// Extensions it asks its pool for, and requires (translator_sv2 asks only for required
    /// ones); with 0x0002 each device's shares name its SV1 worker.
    pub extensions: &'a [u16],
    /// Where its monitoring server answers (its devices' hash-rate estimates), as for
    /// [`PoolSv2Config::monitoring`].
    pub monitoring: Option<std::net::SocketAddr>,
}

impl TranslatorSv2Config<'_> {
    /// A minimal config: devices on loopback only, monitoring where asked, no miner telemetry
    /// (its LAN scan: no `miner_telemetry` ranges), the extensions of
    /// [`TranslatorSv2Config::extensions`]. A new device starts at the difficulty at which its
    /// hash rate gives `shares_per_minute`, as the SV1 pool and our translator start it.
    pub fn toml(&self) -> String {
        format!(
            "downstream_address = \"{}\"\n\
             downstream_port = {}\n\
             max_supported_version = 2\n\
             min_supported_version = 2\n\
             downstream_extranonce2_size = {}\n\
             verify_payout = false\n\
             aggregate_channels = {}\n\
             supported_extensions = {:?}\n\
             required_extensions = {:?}\n\
             {}\
             \n\
             [downstream_difficulty_config]\n\
             min_individual_miner_hashrate = {:?}\n\
             shares_per_minute = {:?}\n\
             enable_vardiff = true\n\
             job_keepalive_interval_secs = 60\n\
             \n\
             [[upstreams]]\n\
             address = \"{}\"\n\
             port = {}\n\
             authority_pubkey = \"{}\"\n\
             user_identity = \"{}\"\n",
            self.listen.ip(),
            self.listen.port(),
            self.extranonce2_size,
            self.aggregate_channels,
            self.extensions,
            self.extensions,
            monitoring_toml(self.monitoring),
            self.device_hash_rate as f32,
            self.shares_per_minute as f32,
            self.upstream.ip(),
            self.upstream.port(),
            self.authority_public_key,
            self.user_identity,
        )
    }
}

/// What a check sets in jd_client_sv2's config.
pub struct JdClientSv2Config<'a> {
    /// Where its SV2 devices connect.
    pub listen: std::net::SocketAddr,
    /// The pair it signs its certificates for devices with.
    pub authority_public_key: &'a str,
    /// The secret half of that pair.
    pub authority_secret_key: &'a str,
    /// The pool it mines declared jobs on.
    pub pool: std::net::SocketAddr,
    /// The Job Declarator Server it declares them to.
    pub jds: std::net::SocketAddr,
    /// The one authority key it checks both the pool and the JDS with.
    pub upstream_key: &'a str,
    /// The user identity of its channel on the pool.
    pub user_identity: &'a str,
    /// The Template Provider it builds jobs from.
    pub template_provider: std::net::SocketAddr,
    /// The Template Provider's authority key.
    pub template_provider_key: &'a str,
    /// What its solo fallback pays (an address).
    pub payout_address: &'a str,
    /// The share rate it sets device difficulty for.
    pub shares_per_minute: f64,
}

impl JdClientSv2Config<'_> {
    /// A minimal config: full-template mode, devices on loopback only, no monitoring server, no
    /// miner telemetry (its LAN scan), no extensions. The downstream rollable extranonce stays at
    /// its default (8): the JDC then asks its pool for 10 bytes (its 2-byte channel index and 8),
    /// which an SV2-only pool grants.
    pub fn toml(&self) -> String {
        format!(
            "listening_address = \"{}\"\n\
             max_supported_version = 2\n\
             min_supported_version = 2\n\
             authority_public_key = \"{}\"\n\
             authority_secret_key = \"{}\"\n\
             cert_validity_sec = 3600\n\
             shares_per_minute = {:?}\n\
             share_batch_size = 3\n\
             mode = \"FULLTEMPLATE\"\n\
             jdc_signature = \"stratumlab\"\n\
             coinbase_reward_script = \"addr({})\"\n\
             supported_extensions = []\n\
             required_extensions = []\n\
             \n\
             [[upstreams]]\n\
             authority_pubkey = \"{}\"\n\
             pool_address = \"{}\"\n\
             pool_port = {}\n\
             jds_address = \"{}\"\n\
             jds_port = {}\n\
             user_identity = \"{}\"\n\
             \n\
             [template_provider_type.Sv2Tp]\n\
             address = \"{}\"\n\
             public_key = \"{}\"\n",
            self.listen,
            self.authority_public_key,
            self.authority_secret_key,
            self.shares_per_minute as f32,
            self.payout_address,
            self.upstream_key,
            self.pool.ip(),
            self.pool.port(),
            self.jds.ip(),
            self.jds.port(),
            self.user_identity,
            self.template_provider,
            self.template_provider_key,
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
        let keys = sv2::keys::AuthorityKeys::generate().unwrap();
        let (public, secret) = (keys.public_key(), keys.secret_key());
        let c = PoolSv2Config {
            listen: "127.0.0.1:34255".parse().unwrap(),
            authority_public_key: &public,
            authority_secret_key: &secret,
            template_provider: "127.0.0.1:8442".parse().unwrap(),
            payout_address: "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080",
            shares_per_minute: 15.0,
            extensions: &[],
            monitoring: Some("127.0.0.1:34256".parse().unwrap()),
        };
        let text = c.toml();
        let v: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(v["listen_address"].as_str(), Some("127.0.0.1:34255"));
        assert_eq!(v["monitoring_address"].as_str(), Some("127.0.0.1:34256"));
        assert_eq!(v["monitoring_cache_refresh_secs"].as_integer(), Some(1));
        assert_eq!(v["shares_per_minute"].as_float(), Some(15.0));
        assert_eq!(v["share_batch_size"].as_integer(), Some(1));
        assert_eq!(
            v["template_provider_type"]["Sv2Tp"]["address"].as_str(),
            Some("127.0.0.1:8442")
        );
        assert_eq!(v["authority_public_key"].as_str(), Some(public.as_str()));
        assert_eq!(v["authority_secret_key"].as_str(), Some(secret.as_str()));
        assert_eq!(
            v["template_provider_type"]["Sv2Tp"]["public_key"].as_str(),
            Some(public.as_str())
        );
        assert!(
            !text.contains("0.0.0.0") && !text.contains("192.168"),
            "{text}"
        );
    }

    #[test]
    fn translator_sv2_config_aggregates_on_loopback_behind_the_tap() {
        let public = sv2::keys::AuthorityKeys::generate().unwrap().public_key();
        let c = TranslatorSv2Config {
            listen: "127.0.0.1:34300".parse().unwrap(),
            upstream: "127.0.0.1:34301".parse().unwrap(),
            authority_public_key: &public,
            user_identity: "lab.C-ref.translator0",
            device_hash_rate: 25_000.0,
            shares_per_minute: 15.0,
            aggregate_channels: true,
            extranonce2_size: 4,
            extensions: &[],
            monitoring: None,
        };
        let text = c.toml();
        let v: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(v["downstream_address"].as_str(), Some("127.0.0.1"));
        assert_eq!(v["downstream_port"].as_integer(), Some(34300));
        assert_eq!(v["aggregate_channels"].as_bool(), Some(true));
        let d = &v["downstream_difficulty_config"];
        assert_eq!(
            d["min_individual_miner_hashrate"].as_float(),
            Some(25_000.0)
        );
        assert_eq!(d["shares_per_minute"].as_float(), Some(15.0));
        let up = &v["upstreams"][0];
        assert_eq!(up["address"].as_str(), Some("127.0.0.1"));
        assert_eq!(up["port"].as_integer(), Some(34301));
        assert_eq!(up["authority_pubkey"].as_str(), Some(public.as_str()));
        assert_eq!(up["user_identity"].as_str(), Some("lab.C-ref.translator0"));
        // Nothing that would listen beyond loopback or scan a network.
        assert!(v.get("monitoring_address").is_none(), "{text}");
        assert!(v.get("miner_telemetry").is_none(), "{text}");
        assert!(
            !text.contains("0.0.0.0") && !text.contains("192.168"),
            "{text}"
        );
    }

    #[test]
    fn an_external_program_is_located_before_anything_starts() {
        let sh = locate_external("x", "/bin/sh").unwrap().unwrap();
        assert_eq!(sh.path, PathBuf::from("/bin/sh"));
        assert_eq!(
            sh.version, "/bin/sh",
            "no --version asked of an unknown program"
        );
        assert!(locate_external("x", "{dir}/run.sh").unwrap().is_none());
        for (program, looked) in [
            ("/no/such/pool-4a1f", "no such file"),
            ("no-such-pool-4a1f", "not on PATH"),
        ] {
            let e = locate_external("ckpool", program).unwrap_err().to_string();
            assert!(
                e.contains(program) && e.contains(looked) && e.contains("ckpool"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_pinned_tool_of_another_version_is_refused() {
        let tool = |version: &str| Tool {
            path: PathBuf::from("/c/bin/pool_sv2"),
            version: version.into(),
        };
        assert!(POOL_SV2.check(tool("pool_sv2 0.7.0")).is_ok());
        for other in ["pool_sv2 0.6.9", "pool_sv2 0.7.01", "pool_sv2", ""] {
            let e = POOL_SV2.check(tool(other)).unwrap_err().to_string();
            assert!(
                e.contains("pool_sv2 0.7.0 is pinned") && e.contains("/c/bin/pool_sv2"),
                "{other}: {e}"
            );
        }
    }

    #[test]
    fn a_missing_pinned_tool_says_how_to_install_it() {
        for (pin, config) in [
            (PARA, "sv1-para"),
            (TRANSLATOR_SV2, "C-ref"),
            (POOL_SV2, "D-ref"),
            (JD_CLIENT_SV2, "interop"),
        ] {
            let e = pin.missing(config).to_string();
            let install = format!(
                "cargo install --locked {} --version ={}",
                pin.name, pin.version
            );
            assert!(
                e.contains(config)
                    && e.contains(&install)
                    && e.contains(&format!("install-tools.sh {}", pin.name))
                    && e.contains(pin.env),
                "{e}"
            );
        }
    }
}
