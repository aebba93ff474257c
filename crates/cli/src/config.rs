//! Settings come from an optional TOML file (`--config`) overlaid with command-line flags.
//!
//! Each role declares its settings once, as one struct that clap reads flags into (every flag
//! with its default) and serde reads a config file into ([`RoleSettings`]). The struct as the
//! flags left it is serialized to a TOML table; the file's keys replace the values of the flags
//! that were not given (on the command line or through their environment variable), and the
//! table is read back into the struct. A flag therefore always wins over the file, the file's
//! keys are the flags' names in snake_case, and a misspelt key in the file is an error instead
//! of being ignored. The defaults are the flags' defaults, wherever the settings are read from.
//!
//! What names the work rather than a setting (a results directory, event files) is an argument,
//! not a key ([`RoleSettings::keep_arguments`]). `run` reads its scenario file the same way
//! ([`with_file`]); a scenario also has keys no flag has, fields the settings serialize.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, FromArgMatches};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A role's settings, declared once: its flags (clap) are its config file's keys (serde).
///
/// Every field is a flag of the same name (a flattened group's fields too), so that the
/// file's keys can be checked against the flags; `config` itself is `#[serde(skip)]`.
pub trait RoleSettings: Args + FromArgMatches + Serialize + DeserializeOwned {
    /// The `--config` field: the file the settings were read from, if any.
    fn config_mut(&mut self) -> &mut Option<PathBuf>;

    /// Moves what the command line gives that is not a setting (positional arguments, and
    /// options that name what to work on, all `#[serde(skip)]`) from `flags` into the
    /// settings read back from the file.
    fn keep_arguments(&mut self, _flags: &mut Self) {}
}

/// Makes a struct of flags a role's settings: [`RoleSettings`] through its `config` field, and
/// `Default` as the flags' defaults.
macro_rules! role_settings {
    ($t:ty) => {
        impl Default for $t {
            fn default() -> Self {
                $crate::config::defaults()
            }
        }

        impl $crate::config::RoleSettings for $t {
            fn config_mut(&mut self) -> &mut Option<std::path::PathBuf> {
                &mut self.config
            }
        }
    };
}
pub(crate) use role_settings;

/// The settings of a role whose flags `matches` holds: the flags over the file over the
/// defaults.
pub fn resolve<S: RoleSettings>(matches: &ArgMatches) -> Result<S> {
    let mut flags = S::from_arg_matches(matches).context("reading the flags")?;
    let Some(path) = flags.config_mut().clone() else {
        return Ok(flags);
    };
    with_file(matches, flags, &path, |settings, flags| {
        // `config` is not a key (serde skips it): put back the file it named.
        *settings.config_mut() = flags.config_mut().take();
        settings.keep_arguments(flags);
    })
}

/// The settings file at `path` laid over `flags` (parsed from `matches`) where no flag was
/// given. A key is a flag's name or a field the settings serialize (a few keys only a file
/// sets); any other is refused. `keep` moves what serde skips (arguments, the file's own
/// path) from the flags into the result.
pub fn with_file<S>(
    matches: &ArgMatches,
    mut flags: S,
    path: &Path,
    keep: impl FnOnce(&mut S, &mut S),
) -> Result<S>
where
    S: Args + Serialize + DeserializeOwned,
{
    let file = read_table(path)?;
    let flag_keys: BTreeSet<String> = S::augment_args(clap::Command::new("settings"))
        .get_arguments()
        .filter(|a| !a.is_positional())
        .map(|a| a.get_id().to_string())
        .filter(|id| id != "config")
        .collect();
    let mut table = toml::Table::try_from(&flags).context("serializing command-line flags")?;
    let what = path.display();
    for (key, value) in file {
        if !flag_keys.contains(&key) && !table.contains_key(&key) {
            bail!(
                "invalid settings in {what}: unknown field `{key}` (the keys are the flags' \
                 names in snake_case)"
            );
        }
        let given = flag_keys.contains(&key)
            && matches!(
                matches.value_source(&key),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            );
        if !given {
            table.insert(key, value);
        }
    }
    let mut settings = S::deserialize(toml::Value::Table(table))
        .with_context(|| format!("invalid settings in {what} and flags"))?;
    keep(&mut settings, &mut flags);
    Ok(settings)
}

/// The settings with every flag at its default (what a command line without flags gives).
pub fn defaults<S: RoleSettings>() -> S {
    parse::<S>(&[]).expect("the defaults are valid settings")
}

/// The settings a command line gives (`args` without the program and subcommand name), with
/// the file it names.
pub fn parse<S: RoleSettings>(args: &[&str]) -> Result<S> {
    let matches = S::augment_args(clap::Command::new("settings").no_binary_name(true))
        .try_get_matches_from(args)?;
    resolve(&matches)
}

/// `S` as a test reads it: from a config file holding `text`, then `args`.
#[cfg(test)]
pub(crate) fn parse_file<S: RoleSettings>(text: &str, args: &[&str]) -> Result<S> {
    let f = tempfile::NamedTempFile::new()?;
    std::fs::write(f.path(), text)?;
    let path = f.path().to_str().expect("a UTF-8 temporary path");
    let all: Vec<&str> = ["--config", path]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    parse(&all)
}

/// A config file's table.
fn read_table(p: &Path) -> Result<toml::Table> {
    let text = std::fs::read_to_string(p)
        .with_context(|| format!("reading config file {}", p.display()))?;
    toml::from_str::<toml::Table>(&text)
        .with_context(|| format!("parsing config file {}", p.display()))
}

/// A setting that takes one value or a list (`upstream = "a"` or `upstream = ["a", "b"]`): a
/// key that grew into a list keeps reading the files written for one value.
pub fn one_or_many<'de, D, T>(d: D) -> std::result::Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum OneOrMany<T> {
        One(T),
        Many(Vec<T>),
    }
    Ok(
        match <OneOrMany<T> as serde::Deserialize>::deserialize(d)? {
            OneOrMany::One(t) => vec![t],
            OneOrMany::Many(v) => v,
        },
    )
}

/// A duration written with units (`60s`, `145ms`, `1m30s`); `0` means zero (usually: disabled).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

impl Dur {
    pub const ZERO: Dur = Dur(Duration::ZERO);

    #[cfg(test)]
    pub const fn from_secs(s: u64) -> Self {
        Dur(Duration::from_secs(s))
    }

    #[cfg(test)]
    pub const fn from_millis(ms: u64) -> Self {
        Dur(Duration::from_millis(ms))
    }

    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }
}

impl FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s == "0" {
            return Ok(Dur::ZERO);
        }
        humantime::parse_duration(s).map(Dur).map_err(|e| {
            format!("duration {s:?}: {e} (write it with a unit, e.g. 60s, 145ms, 1m30s)")
        })
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_zero() {
            return f.write_str("0");
        }
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl fmt::Debug for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    /// A role's settings as the roles declare theirs: one struct, flags with defaults.
    #[derive(clap::Args, Serialize, Deserialize, Debug)]
    struct Role {
        #[arg(long)]
        #[serde(skip)]
        config: Option<PathBuf>,
        #[arg(long, default_value = "10s")]
        interval: Dur,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        solo: bool,
        #[arg(long, env = "STRATUMLAB_CONFIG_TEST_SECRET")]
        secret: Option<String>,
        #[arg(long)]
        #[serde(deserialize_with = "one_or_many")]
        upstream: Vec<String>,
    }

    impl RoleSettings for Role {
        fn config_mut(&mut self) -> &mut Option<PathBuf> {
            &mut self.config
        }
    }

    #[test]
    fn a_role_reads_defaults_then_its_file_then_its_flags() {
        let r: Role = defaults();
        assert_eq!((r.interval, r.seed, r.solo), (Dur::from_secs(10), 1, false));
        assert!(r.name.is_none() && r.upstream.is_empty() && r.config.is_none());
        let f =
            file("seed = 7\ninterval = \"145ms\"\nname = \"lab\"\nsolo = true\nupstream = \"a\"\n");
        let path = f.path().to_str().unwrap();
        let r: Role = parse(&["--config", path]).unwrap();
        assert_eq!(
            (r.interval, r.seed, r.solo),
            (Dur::from_millis(145), 7, true)
        );
        assert_eq!(
            (r.name.as_deref(), r.upstream.as_slice()),
            (Some("lab"), &["a".to_owned()][..])
        );
        assert_eq!(
            r.config.as_deref(),
            Some(f.path()),
            "the file it was read from"
        );
        // A flag given wins, even when it says what the default says; the rest stays the file's.
        let r: Role = parse(&[
            "--config",
            path,
            "--seed",
            "1",
            "--upstream",
            "b",
            "--upstream",
            "c",
        ])
        .unwrap();
        assert_eq!((r.seed, r.interval), (1, Dur::from_millis(145)));
        assert_eq!(r.upstream, ["b", "c"]);
        // Misspelt keys, and keys no flag has, are errors that name the key.
        let f = file("sed = 7\n");
        let e = parse::<Role>(&["--config", f.path().to_str().unwrap()]).unwrap_err();
        assert!(format!("{e:#}").contains("unknown field `sed`"), "{e:#}");
        let f = file("config = \"other.toml\"\n");
        assert!(parse::<Role>(&["--config", f.path().to_str().unwrap()]).is_err());
        let f = file("interval = \"10\"\n");
        let e = parse::<Role>(&["--config", f.path().to_str().unwrap()]).unwrap_err();
        assert!(format!("{e:#}").contains("unit"), "{e:#}");
    }

    #[test]
    fn an_environment_variable_counts_as_a_flag() {
        let f = file("secret = \"from-file\"\n");
        let path = f.path().to_str().unwrap();
        let r: Role = parse(&["--config", path]).unwrap();
        assert_eq!(r.secret.as_deref(), Some("from-file"));
        // SAFETY: this test alone reads or writes this variable.
        unsafe { std::env::set_var("STRATUMLAB_CONFIG_TEST_SECRET", "from-env") };
        let r: Role = parse(&["--config", path]).unwrap();
        unsafe { std::env::remove_var("STRATUMLAB_CONFIG_TEST_SECRET") };
        assert_eq!(r.secret.as_deref(), Some("from-env"));
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let read = |text: &str| {
            let f = file(text);
            parse::<Role>(&["--config", f.path().to_str().unwrap()]).unwrap_err()
        };
        let e = read("sed = 7\n");
        assert!(format!("{e:#}").contains("unknown field `sed`"), "{e:#}");
        let e = read("interval = \"10\"\n");
        assert!(format!("{e:#}").contains("unit"), "{e:#}");
        let e = read("seed = [\n");
        assert!(format!("{e:#}").contains("parsing config file"), "{e:#}");
        let e = parse::<Role>(&["--config", "/nonexistent/x.toml"]).unwrap_err();
        assert!(format!("{e:#}").contains("reading config file"), "{e:#}");
    }

    #[test]
    fn durations_need_units() {
        assert_eq!("60s".parse::<Dur>().unwrap(), Dur::from_secs(60));
        assert_eq!("145ms".parse::<Dur>().unwrap(), Dur::from_millis(145));
        assert_eq!("1m30s".parse::<Dur>().unwrap(), Dur::from_secs(90));
        assert_eq!("0".parse::<Dur>().unwrap(), Dur::ZERO);
        assert!("60".parse::<Dur>().is_err());
        assert!("abc".parse::<Dur>().is_err());
        assert_eq!(Dur::from_millis(1500).to_string(), "1s 500ms");
        assert_eq!(
            Dur::from_millis(1500).to_string().parse::<Dur>().unwrap(),
            Dur::from_millis(1500)
        );
    }
}
