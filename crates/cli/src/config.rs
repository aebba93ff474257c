//! Settings come from an optional TOML file (`--config`) overlaid with command-line flags.
//!
//! Each subcommand has one `Args` struct (clap: every flag optional) and one `Config` struct
//! (serde: defaults filled in). Rather than merging field by field, flags that were given are
//! serialized to a TOML table and laid over the file's table, and the result is deserialized into
//! the config. A flag therefore always wins over the file, the file's keys are the flags' names in
//! snake_case, and a misspelt key in the file is an error instead of being ignored.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::cmd::edge::EdgeArgs;

/// Reads `path` (if given) and applies `overrides` (the subcommand's flags; `None`s must be
/// skipped when serializing) on top.
pub fn load<C: DeserializeOwned>(path: Option<&Path>, overrides: &impl Serialize) -> Result<C> {
    let (table, what) = merged(path, overrides)?;
    C::deserialize(toml::Value::Table(table)).with_context(|| format!("invalid settings in {what}"))
}

/// [`load`] for a role that listens: the connection edge's keys (`crate::cmd::edge::KEYS`,
/// flattened into the role's flags) are taken out and read as [`EdgeArgs`], the rest as `C`.
pub fn load_with_edge<C: DeserializeOwned>(
    path: Option<&Path>,
    overrides: &impl Serialize,
) -> Result<(C, EdgeArgs)> {
    let (mut table, what) = merged(path, overrides)?;
    let mut edge = toml::Table::new();
    for key in crate::cmd::edge::KEYS {
        if let Some(v) = table.remove(*key) {
            edge.insert((*key).to_owned(), v);
        }
    }
    let edge = EdgeArgs::deserialize(toml::Value::Table(edge))
        .with_context(|| format!("invalid connection limits in {what}"))?;
    let c = C::deserialize(toml::Value::Table(table))
        .with_context(|| format!("invalid settings in {what}"))?;
    Ok((c, edge))
}

/// The file's table with the given flags laid over it, and what it was read from.
fn merged(path: Option<&Path>, overrides: &impl Serialize) -> Result<(toml::Table, String)> {
    let mut table = match path {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading config file {}", p.display()))?;
            toml::from_str::<toml::Table>(&text)
                .with_context(|| format!("parsing config file {}", p.display()))?
        }
        None => toml::Table::new(),
    };
    let flags = toml::Table::try_from(overrides).context("serializing command-line flags")?;
    for (k, v) in flags {
        table.insert(k, v);
    }
    let what = path.map_or_else(
        || "flags".to_owned(),
        |p| format!("{} and flags", p.display()),
    );
    Ok((table, what))
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

    #[derive(Serialize, Default)]
    struct Flags {
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        interval: Option<Dur>,
    }

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Conf {
        seed: u64,
        interval: Dur,
        name: String,
    }

    impl Default for Conf {
        fn default() -> Self {
            Conf {
                seed: 1,
                interval: Dur::from_secs(10),
                name: "x".into(),
            }
        }
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn defaults_then_file_then_flags() {
        let c: Conf = load(None, &Flags::default()).unwrap();
        assert_eq!(c, Conf::default());
        let f = file("seed = 7\ninterval = \"145ms\"\nname = \"lab\"\n");
        let c: Conf = load(Some(f.path()), &Flags::default()).unwrap();
        assert_eq!(
            c,
            Conf {
                seed: 7,
                interval: Dur::from_millis(145),
                name: "lab".into()
            }
        );
        let flags = Flags {
            seed: Some(9),
            interval: None,
        };
        let c: Conf = load(Some(f.path()), &flags).unwrap();
        assert_eq!(c.seed, 9, "flag wins");
        assert_eq!(c.interval, Dur::from_millis(145), "file kept where no flag");
        let flags = Flags {
            seed: None,
            interval: Some(Dur::ZERO),
        };
        let c: Conf = load(Some(f.path()), &flags).unwrap();
        assert_eq!(c.interval, Dur::ZERO);
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let f = file("sed = 7\n");
        let e = load::<Conf>(Some(f.path()), &Flags::default()).unwrap_err();
        assert!(format!("{e:#}").contains("unknown field `sed`"), "{e:#}");
        let f = file("interval = \"10\"\n");
        let e = load::<Conf>(Some(f.path()), &Flags::default()).unwrap_err();
        assert!(format!("{e:#}").contains("unit"), "{e:#}");
        let f = file("seed = [\n");
        assert!(load::<Conf>(Some(f.path()), &Flags::default()).is_err());
        let e =
            load::<Conf>(Some(Path::new("/nonexistent/x.toml")), &Flags::default()).unwrap_err();
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
