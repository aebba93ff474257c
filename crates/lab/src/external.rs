//! External configurations: someone else's pool (or farm proxy) measured as a configuration of
//! a run (docs/architecture.md, "External configurations"). A scenario gives the command and
//! config files; the lab fills their placeholders (simnet's endpoints, a port to listen on, a
//! directory of its own, ...), starts the process, waits until it is ready, and puts it behind
//! the same WAN tap as its own roles. Everything measured about it comes from what crosses the
//! taps, what simnet sees, and /proc: it writes no events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::scenario::DeviceProtocol;

/// One external role, as a scenario's `[external.NAME]` table gives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct External {
    /// What it speaks to the devices: "sv1" or "sv2".
    pub protocol: Protocol,
    /// "pool" (the default) or "proxy" (a farm proxy in front of `upstream`).
    #[serde(default)]
    pub role: Role,
    /// Program and arguments, placeholders filled. A program without a `/` is looked up on
    /// PATH.
    pub command: Vec<String>,
    /// Files written into `{dir}` before the start: relative path (`data/config/config.toml`)
    /// to text, placeholders filled.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Where its devices' side listens (the WAN tap's upstream for a pool, the devices' address
    /// for a proxy), HOST:PORT after the placeholders are filled.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// "port" (ready when `listen` accepts a connection) or a line its output prints when it is.
    #[serde(default = "default_ready")]
    pub ready: String,
    /// The name each device authorizes with; `{device}` (the device's number) must end it.
    /// Solo pools want an address [default: `{payout_address}.{device}`].
    #[serde(default = "default_worker")]
    pub worker: String,
    /// An SV2 pool's authority public key, which devices (or a proxy) check its certificate
    /// against [default: `{authority_public_key}`, the trial's pair, which the lab offers it].
    #[serde(default = "default_authority")]
    pub authority_public_key: String,
    /// A proxy's upstream: "sv1" (our SV1 pool), "sv2" (our SV2 pool), or the name of an
    /// external pool definition, which the configuration then runs behind the proxy.
    #[serde(default)]
    pub upstream: Option<String>,
    /// Environment variables set for it, placeholders filled.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// The protocol the external role speaks to devices (or, for a proxy, downstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Stratum V1.
    Sv1,
    /// Stratum V2.
    Sv2,
}

impl Protocol {
    /// The device protocol the fleet uses against it.
    pub fn devices(self) -> DeviceProtocol {
        match self {
            Protocol::Sv1 => DeviceProtocol::Sv1,
            Protocol::Sv2 => DeviceProtocol::Sv2,
        }
    }
}

/// Whether the external program is the pool or a proxy in front of one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A pool: devices (or a proxy) connect to it.
    #[default]
    Pool,
    /// A proxy between devices and a pool.
    Proxy,
}

fn default_listen() -> String {
    "{listen}".into()
}
fn default_ready() -> String {
    "port".into()
}
fn default_worker() -> String {
    "{payout_address}.{device}".into()
}
fn default_authority() -> String {
    "{authority_public_key}".into()
}

/// What the lab fills in. Each endpoint is HOST:PORT without a scheme.
pub const PLACEHOLDERS: &[(&str, &str)] = &[
    ("rpc", "simnet's bitcoind-compatible JSON-RPC"),
    ("rpc_host", "its host"),
    ("rpc_port", "its port"),
    ("rpc_user", "the RPC user"),
    ("rpc_password", "the RPC password"),
    ("zmq", "simnet's ZMQ publisher (hashblock, rawblock, ...)"),
    ("zmq_host", "its host"),
    ("zmq_port", "its port"),
    ("tdp", "simnet's SV2 Template Provider (SV2 pools)"),
    ("tdp_host", "its host"),
    ("tdp_port", "its port"),
    ("listen", "where it listens for the devices' side (a free loopback port)"),
    ("listen_host", "its host"),
    ("listen_port", "its port"),
    ("upstream", "a proxy's upstream, through the WAN tap"),
    ("upstream_host", "its host"),
    ("upstream_port", "its port"),
    (
        "authority_public_key",
        "the trial's SV2 authority public key (base58): the Template Provider's, and our SV2 pool's",
    ),
    ("authority_secret_key", "its secret key"),
    ("payout_address", "the address blocks pay to (regtest)"),
    ("chain", "the chain simnet claims (regtest)"),
    ("dir", "a directory of its own, its working directory"),
    ("start_difficulty", "the share difficulty devices start at"),
    ("shares_per_minute", "the share rate per device vardiff aims at"),
    ("share_interval_s", "60 / shares_per_minute: seconds between a device's shares"),
    ("template_interval_s", "the template refresh, in seconds"),
    (
        "template_interval_whole_s",
        "the template refresh in whole seconds, rounded up, at least 1 (for programs that take an integer)",
    ),
    (
        "upstream_authority_public_key",
        "a proxy's pool's authority public key: the external pool's own, else the trial's",
    ),
    ("device_hash_rate", "what one device hashes, in hashes per second"),
    ("devices", "devices per configuration"),
];

/// The placeholders that are per role, filled only where the role starts: not in `worker` or
/// `authority_public_key`, which the lab fills for the devices.
const PER_ROLE: &[&str] = &[
    "dir",
    "listen",
    "listen_host",
    "listen_port",
    "upstream",
    "upstream_host",
    "upstream_port",
    "upstream_authority_public_key",
];

/// The placeholders only a proxy has values for.
const PROXY_ONLY: &[&str] = &[
    "upstream",
    "upstream_host",
    "upstream_port",
    "upstream_authority_public_key",
];

/// Placeholders whose values are secrets: masked where a command line is shown. (simnet's RPC
/// password is the lab's own, fixed and short: masking it would mangle every path holding it.)
pub const SECRETS: &[&str] = &["authority_secret_key"];

/// Why an external configuration cannot run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ExternalError {
    /// The command line is empty.
    #[error("external {config}: `command` is empty")]
    NoCommand {
        /// The configuration's name.
        config: String,
    },
    /// A placeholder the lab does not fill.
    #[error(
        "external {config}: unknown placeholder {{{name}}} in {field} (the lab fills {known})"
    )]
    UnknownPlaceholder {
        /// The configuration's name.
        config: String,
        /// The setting it is in.
        field: String,
        /// The placeholder.
        name: String,
        /// The placeholders the lab fills.
        known: String,
    },
    /// A placeholder with no value for this configuration.
    #[error("external {config}: {{{name}}} has no value in {field}: {why}")]
    Unavailable {
        /// The configuration's name.
        config: String,
        /// The setting it is in.
        field: String,
        /// The placeholder.
        name: String,
        /// Why it has no value.
        why: &'static str,
    },
    /// `ready` is empty.
    #[error("external {config}: `ready` must be \"port\" or a line its output prints, not empty")]
    Ready {
        /// The configuration's name.
        config: String,
    },
    /// `listen` is not a loopback IP:PORT.
    #[error(
        "external {config}: `listen` = {listen:?} must be a loopback IP:PORT (127.0.0.0/8 or \
         [::1]), as the lab's own roles listen"
    )]
    Listen {
        /// The configuration's name.
        config: String,
        /// The `listen` given.
        listen: String,
    },
    /// The name has characters other than letters, digits, '.', '_' and '-'.
    #[error(
        "external {config:?}: a name is letters, digits, '.', '_' and '-' (it names the role's \
         directory and log)"
    )]
    Name {
        /// The configuration's name.
        config: String,
    },
    /// `worker` does not end with `{device}`.
    #[error("external {config}: `worker` = {worker:?} must end with {{device}}")]
    Worker {
        /// The configuration's name.
        config: String,
        /// The `worker` given.
        worker: String,
    },
    /// A proxy's `upstream` is missing or names no pool.
    #[error(
        "external {config}: a proxy needs `upstream` = \"sv1\" or \"sv2\" (our pool behind it) \
         or the name of an external pool table, {got}"
    )]
    Upstream {
        /// The configuration's name.
        config: String,
        /// What was given, as the message shows it.
        got: String,
    },
    /// `upstream` given for a pool.
    #[error("external {config}: `upstream` is for a proxy (role = \"proxy\")")]
    UpstreamOfPool {
        /// The configuration's name.
        config: String,
    },
    /// A file name that is not a relative path inside `{dir}`.
    #[error("external {config}: file name {name:?} must be a relative path inside {{dir}}")]
    FileName {
        /// The configuration's name.
        config: String,
        /// The file name given.
        name: String,
    },
    /// The name is a built-in configuration's.
    #[error("external {config}: {config} is the name of a built-in configuration")]
    Shadows {
        /// The configuration's name.
        config: String,
    },
}

impl External {
    /// Checks what can be checked before anything starts: a command, known placeholders, a
    /// worker name the fleet can number, a proxy's upstream.
    pub fn validate(&self, config: &str) -> Result<(), ExternalError> {
        let named_well = config
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !named_well || config.is_empty() || config == "." || config == ".." {
            return Err(ExternalError::Name {
                config: config.into(),
            });
        }
        if self.ready.trim().is_empty() {
            return Err(ExternalError::Ready {
                config: config.into(),
            });
        }
        if self.command.is_empty() || self.command[0].trim().is_empty() {
            return Err(ExternalError::NoCommand {
                config: config.into(),
            });
        }
        let mut fields: Vec<(String, &str)> = Vec::new();
        for (i, a) in self.command.iter().enumerate() {
            fields.push((format!("command[{i}]"), a));
        }
        for (name, text) in &self.files {
            let path = std::path::Path::new(name);
            let inside = path
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            if name.is_empty() || !inside {
                return Err(ExternalError::FileName {
                    config: config.into(),
                    name: name.clone(),
                });
            }
            fields.push((format!("files.{name:?}"), text));
        }
        for (name, text) in &self.env {
            fields.push((format!("env.{name}"), text));
        }
        fields.push(("listen".into(), &self.listen));
        fields.push(("ready".into(), &self.ready));
        let known = |field: &str, name: &str| -> Result<(), ExternalError> {
            if !PLACEHOLDERS.iter().any(|(p, _)| *p == name) {
                return Err(unknown(config, field, name));
            }
            let unavailable = |why| ExternalError::Unavailable {
                config: config.into(),
                field: field.into(),
                name: name.into(),
                why,
            };
            if self.role == Role::Pool && PROXY_ONLY.contains(&name) {
                return Err(unavailable("only a proxy has an upstream"));
            }
            Ok(())
        };
        for (field, text) in fields {
            for name in placeholders(text) {
                known(&field, name)?;
            }
        }
        let Some(prefix) = self.worker.strip_suffix("{device}") else {
            return Err(ExternalError::Worker {
                config: config.into(),
                worker: self.worker.clone(),
            });
        };
        // What the devices are given is filled before any role's own values exist.
        for (field, text) in [
            ("worker", prefix),
            ("authority_public_key", self.authority_public_key.as_str()),
        ] {
            for name in placeholders(text) {
                known(field, name)?;
                if PER_ROLE.contains(&name) {
                    return Err(ExternalError::Unavailable {
                        config: config.into(),
                        field: field.into(),
                        name: name.into(),
                        why: "the devices' settings take only the trial's values",
                    });
                }
            }
        }
        if !self.listen.contains('{') {
            check_listen(config, &self.listen)?;
        }
        match (self.role, self.upstream.as_deref()) {
            // Another definition's name is checked by the scenario, which knows them all.
            (Role::Proxy, Some(up)) if !up.is_empty() => Ok(()),
            (Role::Pool, None) => Ok(()),
            (Role::Proxy, got) => Err(ExternalError::Upstream {
                config: config.into(),
                got: match got {
                    Some(g) => format!("not {g:?}"),
                    None => "and has none".into(),
                },
            }),
            (Role::Pool, Some(_)) => Err(ExternalError::UpstreamOfPool {
                config: config.into(),
            }),
        }
    }

    /// Whether it is ready once `listen` accepts a connection (else: once its output prints
    /// `ready`).
    pub fn ready_on_port(&self) -> bool {
        self.ready == "port"
    }
}

/// `listen` once filled: a loopback IP:PORT, as every role the lab starts listens.
pub fn check_listen(config: &str, listen: &str) -> Result<std::net::SocketAddr, ExternalError> {
    match listen.parse::<std::net::SocketAddr>() {
        Ok(a) if a.ip().is_loopback() => Ok(a),
        _ => Err(ExternalError::Listen {
            config: config.into(),
            listen: listen.into(),
        }),
    }
}

fn unknown(config: &str, field: &str, name: &str) -> ExternalError {
    ExternalError::UnknownPlaceholder {
        config: config.into(),
        field: field.into(),
        name: name.into(),
        known: PLACEHOLDERS
            .iter()
            .map(|(p, _)| format!("{{{p}}}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The placeholders in `text`: each `{name}` whose name is lower-case letters, digits and
/// underscores. Other braces (a JSON or TOML config's own) are text.
fn placeholders(text: &str) -> impl Iterator<Item = &str> {
    spans(text).map(move |(start, end)| &text[start + 1..end - 1])
}

/// Byte ranges of the placeholders in `text`, braces included.
fn spans(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let bytes = text.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            if bytes[i] == b'{' {
                let start = i;
                let mut j = i + 1;
                while j < bytes.len()
                    && (bytes[j].is_ascii_lowercase()
                        || bytes[j].is_ascii_digit()
                        || bytes[j] == b'_')
                {
                    j += 1;
                }
                if j > start + 1 && j < bytes.len() && bytes[j] == b'}' {
                    i = j + 1;
                    return Some((start, j + 1));
                }
            }
            i += 1;
        }
        None
    })
}

/// The values the lab fills in, by placeholder name.
#[derive(Clone, Debug, Default)]
pub struct Values(BTreeMap<&'static str, String>);

impl Values {
    /// Sets placeholder `name` to `value`.
    pub fn set(&mut self, name: &'static str, value: impl Into<String>) {
        debug_assert!(
            PLACEHOLDERS.iter().any(|(p, _)| *p == name),
            "{name} is not a documented placeholder"
        );
        self.0.insert(name, value.into());
    }

    /// Sets `name` to HOST:PORT and `name_host`, `name_port` to its parts.
    pub fn set_addr(
        &mut self,
        name: &'static str,
        host: &'static str,
        port: &'static str,
        addr: std::net::SocketAddr,
    ) {
        self.set(name, addr.to_string());
        self.set(host, addr.ip().to_string());
        self.set(port, addr.port().to_string());
    }

    /// `text` with every placeholder replaced. A placeholder this run has no value for (`{tdp}`
    /// where no configuration runs an SV2 pool, so simnet serves no Template Provider) is an
    /// error naming it.
    pub fn fill(&self, text: &str) -> Result<String, String> {
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for (start, end) in spans(text) {
            let name = &text[start + 1..end - 1];
            let value = self.0.get(name).ok_or_else(|| match name {
                "tdp" | "tdp_host" | "tdp_port" => format!(
                    "{{{name}}} has no value: simnet serves a Template Provider only when a \
                     configuration runs an SV2 pool (protocol = \"sv2\")"
                ),
                _ => format!("{{{name}}} has no value here"),
            })?;
            out.push_str(&text[last..start]);
            out.push_str(value);
            last = end;
        }
        out.push_str(&text[last..]);
        Ok(out)
    }
}

impl Values {
    /// The values of [`SECRETS`] this run has.
    pub fn secrets(&self) -> Vec<&str> {
        SECRETS
            .iter()
            .filter_map(|s| self.0.get(s).map(String::as_str))
            .filter(|v| !v.is_empty())
            .collect()
    }
}

/// A command line as a person would type it (arguments with spaces quoted, `secrets` masked),
/// for the run's progress.
pub fn describe(
    program: &std::path::Path,
    args: &[std::ffi::OsString],
    secrets: &[&str],
) -> String {
    std::iter::once(program.as_os_str())
        .chain(args.iter().map(|a| a.as_os_str()))
        .map(|a| {
            let mut a = a.to_string_lossy().into_owned();
            for s in secrets {
                a = a.replace(s, "***");
            }
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("'{a}'")
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The external configurations this build defines itself, through the same mechanism.
pub fn built_in(name: &str) -> Option<External> {
    match name {
        "sv1-para" => Some(para_pool()),
        _ => None,
    }
}

/// Names of the built-in external configurations.
pub const BUILT_IN: &[&str] = &["sv1-para"];

/// `para pool` (crates.io `para`, pinned in scripts/tools.sh), a small solo SV1 pool: usernames
/// are payout addresses; templates by getblocktemplate every `--update-interval` seconds and
/// on ZMQ `hashblock`; its vardiff aims at one share per `--vardiff-period`.
fn para_pool() -> External {
    let command = [
        "para",
        "pool",
        "--address",
        "{listen_host}",
        "--port",
        "{listen_port}",
        "--chain",
        "{chain}",
        "--bitcoin-rpc-port",
        "{rpc_port}",
        "--bitcoin-rpc-username",
        "{rpc_user}",
        "--bitcoin-rpc-password",
        "{rpc_password}",
        "--zmq-block-notifications",
        "tcp://{zmq}",
        "--start-diff",
        "{start_difficulty}",
        "--vardiff-period",
        "{share_interval_s}",
        // Whole seconds: para reads an integer.
        "--update-interval",
        "{template_interval_whole_s}",
        "--data-dir",
        "{dir}",
    ];
    External {
        protocol: Protocol::Sv1,
        role: Role::Pool,
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        files: BTreeMap::new(),
        listen: default_listen(),
        ready: default_ready(),
        worker: default_worker(),
        authority_public_key: default_authority(),
        upstream: None,
        env: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ckpool() -> External {
        // The shape docs/architecture.md shows for ckpool.
        let text = r#"
            protocol = "sv1"
            command = ["ckpool", "-B", "-c", "{dir}/ckpool.conf"]
            files = { "ckpool.conf" = '''{ "btcd": [{"url": "{rpc}", "auth": "{rpc_user}", "pass": "{rpc_password}", "notify": true}], "serverurl": ["{listen}"], "btcaddress": "{payout_address}", "zmqblock": "tcp://{zmq}" }''' }
        "#;
        toml::from_str(text).unwrap()
    }

    fn values() -> Values {
        let mut v = Values::default();
        v.set_addr(
            "rpc",
            "rpc_host",
            "rpc_port",
            "127.0.0.1:18443".parse().unwrap(),
        );
        v.set_addr(
            "zmq",
            "zmq_host",
            "zmq_port",
            "127.0.0.1:28332".parse().unwrap(),
        );
        v.set_addr(
            "listen",
            "listen_host",
            "listen_port",
            "127.0.0.1:3333".parse().unwrap(),
        );
        v.set("rpc_user", "lab");
        v.set("rpc_password", "pw");
        v.set("payout_address", "bcrt1qexample");
        v.set("dir", "run/ckpool.pool");
        v
    }

    #[test]
    fn placeholders_are_filled_and_a_configs_own_braces_kept() {
        let e = ckpool();
        e.validate("ckpool").unwrap();
        assert_eq!(e.role, Role::Pool);
        assert!(e.ready_on_port());
        let v = values();
        let conf = v.fill(&e.files["ckpool.conf"]).unwrap();
        assert_eq!(
            conf,
            r#"{ "btcd": [{"url": "127.0.0.1:18443", "auth": "lab", "pass": "pw", "notify": true}], "serverurl": ["127.0.0.1:3333"], "btcaddress": "bcrt1qexample", "zmqblock": "tcp://127.0.0.1:28332" }"#
        );
        let json: serde_json::Value = serde_json::from_str(&conf).unwrap();
        assert_eq!(json["btcd"][0]["url"], "127.0.0.1:18443");
        assert_eq!(
            v.fill("{dir}/ckpool.conf").unwrap(),
            "run/ckpool.pool/ckpool.conf"
        );
        assert_eq!(v.fill("{}{ x}{A}").unwrap(), "{}{ x}{A}");
    }

    #[test]
    fn a_placeholder_without_a_value_is_named() {
        let err = values().fill("--tp {tdp}").unwrap_err();
        assert!(err.contains("{tdp}") && err.contains("SV2 pool"), "{err}");
    }

    #[test]
    fn secrets_are_masked_where_a_command_is_shown() {
        let mut v = values();
        v.set("authority_secret_key", "SeCrEt123");
        let args: Vec<std::ffi::OsString> = ["--key", "SeCrEt123", "--k2=SeCrEt123", "a b"]
            .iter()
            .map(|a| (*a).into())
            .collect();
        let shown = describe(std::path::Path::new("/bin/pool"), &args, &v.secrets());
        assert_eq!(shown, "/bin/pool --key *** --k2=*** 'a b'");
    }

    #[test]
    fn mistakes_are_refused_before_anything_starts() {
        let mut e = ckpool();
        e.command.push("{rpc_url}".into());
        match e.validate("ckpool").unwrap_err() {
            ExternalError::UnknownPlaceholder { field, name, .. } => {
                assert_eq!((field.as_str(), name.as_str()), ("command[4]", "rpc_url"));
            }
            other => panic!("{other}"),
        }
        let mut e = ckpool();
        e.worker = "{device}.{payout_address}".into();
        assert!(matches!(
            e.validate("ckpool"),
            Err(ExternalError::Worker { .. })
        ));
        let mut e = ckpool();
        e.files
            .insert("data/config/config.toml".into(), String::new());
        e.validate("ckpool").unwrap();
        for escape in ["../escape", "/etc/passwd", "a/../../b", ""] {
            let mut e = ckpool();
            e.files.insert(escape.into(), String::new());
            assert!(
                matches!(e.validate("ckpool"), Err(ExternalError::FileName { .. })),
                "{escape}"
            );
        }
        let mut e = ckpool();
        e.role = Role::Proxy;
        assert!(matches!(
            e.validate("p"),
            Err(ExternalError::Upstream { .. })
        ));
        e.upstream = Some("sv2".into());
        e.validate("p").unwrap();
        let mut e = ckpool();
        e.command.clear();
        assert!(matches!(
            e.validate("ckpool"),
            Err(ExternalError::NoCommand { .. })
        ));
        let mut e = ckpool();
        e.ready = " ".into();
        assert!(matches!(
            e.validate("ckpool"),
            Err(ExternalError::Ready { .. })
        ));
        e.ready = "listening on {listen_prot}".into();
        assert!(matches!(
            e.validate("ckpool"),
            Err(ExternalError::UnknownPlaceholder { .. })
        ));
        // A pool has no upstream; the devices' worker name has no role directory yet.
        let mut e = ckpool();
        e.command.push("{upstream}".into());
        assert!(matches!(
            e.validate("ckpool"),
            Err(ExternalError::Unavailable { .. })
        ));
        let mut e = ckpool();
        e.worker = "{dir}.{device}".into();
        let err = e.validate("ckpool").unwrap_err().to_string();
        assert!(err.contains("{dir}") && err.contains("worker"), "{err}");
        // Beyond loopback, or a name that would leave the run's directory.
        for listen in ["0.0.0.0:3333", "192.168.1.2:3333", "localhost:3333"] {
            let mut e = ckpool();
            e.listen = listen.into();
            assert!(
                matches!(e.validate("ckpool"), Err(ExternalError::Listen { .. })),
                "{listen}"
            );
        }
        let mut e = ckpool();
        e.listen = "127.0.0.2:3333".into();
        e.validate("ckpool").unwrap();
        for name in ["../../x", "a/b", "..", ""] {
            assert!(
                matches!(ckpool().validate(name), Err(ExternalError::Name { .. })),
                "{name}"
            );
        }
        let unknown_key = toml::from_str::<External>(
            "protocol = \"sv1\"\ncommand = [\"x\"]\nlisten_adress = \"{listen}\"",
        );
        assert!(unknown_key.is_err(), "a misspelt key is an error");
    }

    /// docs/operations.md's "Measuring other pools": every placeholder is in its table, and
    /// every example table parses and validates as a scenario would read it.
    #[test]
    fn the_documented_examples_are_valid_definitions() {
        let doc = include_str!("../../../docs/operations.md");
        let section = doc
            .split("## Measuring other pools")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("docs/operations.md has the section");
        for (name, _) in PLACEHOLDERS {
            assert!(
                section.contains(&format!("`{{{name}}}`")),
                "{{{name}}} is not in the placeholder table"
            );
        }
        #[derive(serde::Deserialize)]
        struct Tables {
            external: BTreeMap<String, External>,
        }
        let mut names = Vec::new();
        for block in section.split("```toml\n").skip(1) {
            let text = block.split("```").next().unwrap();
            let tables: Tables =
                toml::from_str(text).unwrap_or_else(|e| panic!("{e}\nin:\n{text}"));
            for (name, e) in tables.external {
                e.validate(&name).unwrap();
                names.push(name);
            }
        }
        assert_eq!(names, ["sv1-ext", "ckpool", "gopool", "public-pool"]);
    }

    #[test]
    fn the_built_in_para_pool_uses_only_documented_placeholders() {
        for name in BUILT_IN {
            built_in(name).unwrap().validate(name).unwrap();
        }
        assert_eq!(built_in("sv1-para").unwrap().protocol, Protocol::Sv1);
        assert!(built_in("sv1").is_none());
    }
}
