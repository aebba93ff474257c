//! Benches of one role at a fixed offered load (`stratumlab bench`): the role pinned to one core,
//! its load (simnet and a fleet) on another, CPU per accepted share and share latency over a
//! window after warm-up, against other software on the same load (docs/performance.md).
//!
//! They start roles as the lab does ([`crate::process`]), read the devices' events with the
//! events crate and summarize latency with the lab's own distributions ([`crate::stats`]).

mod pin;
pub mod sv2_pool;
mod sv2_pool_table;
pub mod translator;
mod translator_table;
mod window;
mod wire;

pub use window::Window;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use events::{Event, EventReader};
use serde::Serialize;

use crate::process::{Launch, RoleProcess, THIRD_PARTY};
use crate::stats::Samples;

/// Why a bench stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A role did not start or did not become ready.
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
    /// A pinned third-party program is missing or the wrong version.
    #[error(transparent)]
    ThirdParty(#[from] crate::third_party::ThirdPartyError),
    /// A file could not be written or read.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A program the bench runs is not where it looks.
    #[error("{program} not found at {path}: {hint}")]
    Missing {
        /// What it is.
        program: &'static str,
        /// Where it looked.
        path: PathBuf,
        /// How to get it.
        hint: &'static str,
    },
    /// A row did not measure what it must (devices not ready, nothing accepted, a role failed).
    #[error("{row}: {why}")]
    Row {
        /// The row's label and offered load.
        row: String,
        /// What went wrong.
        why: String,
    },
    /// The options contradict each other.
    #[error("{0}")]
    Options(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

/// Where block rewards go: regtest, and no bench finds a block.
const PAYOUT: &str = "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080";
/// How long a role may take to become ready.
const READY: std::time::Duration = std::time::Duration::from_secs(90);

/// Whose output a started role prints where: ours print `listening on` lines on stdout and log
/// to stderr; a third-party role logs everything to stdout.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ours,
    ThirdParty,
}

/// Starts `program args` on `core` with `env` added, its log in `dir/NAME.log`.
fn spawn_on(
    dir: &Path,
    core: usize,
    kind: Kind,
    name: &str,
    program: &Path,
    args: &[String],
    env: &[(String, String)],
) -> Result<RoleProcess, BenchError> {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let log = dir.join(format!("{name}.log"));
    let started = pin::on_core(core, || match kind {
        Kind::Ours => RoleProcess::spawn_as(
            name,
            program,
            &args,
            &log,
            Launch {
                env,
                ..Launch::default()
            },
        ),
        Kind::ThirdParty => RoleProcess::spawn_as(
            name,
            program,
            &args,
            &log,
            Launch {
                dir: Some(dir),
                env,
                ..THIRD_PARTY
            },
        ),
    })
    .map_err(io(format!("pinning {name} to core {core}")))?;
    Ok(started?)
}

/// A third-party role (`program -c CONFIG`) on `core`, from the config text `toml` written to
/// `dir/NAME.toml`, at its shipped log level or with `RUST_LOG=warn`; ready when its log holds
/// `ready_line`, or, at warn (when it says nothing on becoming ready), when `listen` accepts.
#[allow(clippy::too_many_arguments)]
fn start_reference(
    dir: &Path,
    core: usize,
    name: &str,
    program: &Path,
    toml: &str,
    warn: bool,
    listen: std::net::SocketAddr,
    ready_line: &str,
) -> Result<RoleProcess, BenchError> {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, toml).map_err(io(format!("writing {}", config.display())))?;
    let mut env = vec![("NO_COLOR".to_owned(), "1".to_owned())];
    if warn {
        env.push(("RUST_LOG".into(), "warn".into()));
    }
    let args = ["-c".to_owned(), path(&config)];
    let mut p = spawn_on(dir, core, Kind::ThirdParty, name, program, &args, &env)?;
    if warn {
        p.wait_port(listen, READY)?;
    } else {
        p.wait_log(ready_line, READY)?;
    }
    Ok(p)
}

/// A bench's output folder: the key pair its roles sign with, and rows.jsonl, a row a line.
struct Output {
    authority: crate::orchestrate::AuthorityFile,
    rows: std::fs::File,
}

impl Output {
    fn create(dir: &Path) -> Result<Output, BenchError> {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        let authority =
            crate::orchestrate::AuthorityFile::create(dir).map_err(|e| BenchError::Io {
                what: "the bench's authority key pair".into(),
                source: std::io::Error::other(e.to_string()),
            })?;
        let path = dir.join("rows.jsonl");
        let rows =
            std::fs::File::create(&path).map_err(io(format!("creating {}", path.display())))?;
        Ok(Output { authority, rows })
    }

    fn write(&mut self, row: &impl Serialize) -> Result<(), BenchError> {
        use std::io::Write as _;
        let line = serde_json::to_string(row).map_err(|e| io("writing rows.jsonl")(e.into()))?;
        writeln!(self.rows, "{line}").map_err(io("writing rows.jsonl"))
    }
}

/// Waits for the fleet to end on its own within `limit`, well.
fn fleet_done(fleet: &mut RoleProcess, limit: std::time::Duration) -> Result<(), String> {
    let status = fleet.wait_done(limit).ok_or("the fleet did not end")?;
    if status.success() {
        return Ok(());
    }
    Err(format!(
        "the fleet failed ({}): {}",
        crate::process::describe(status),
        fleet.log_tail(3)
    ))
}

/// Stops `roles` in order, each once it is known to have run the whole row: one that exited
/// early fails the row.
fn stop_all(roles: &mut [&mut RoleProcess]) -> Result<(), String> {
    for p in roles.iter_mut() {
        if let Some(s) = p.exited() {
            return Err(format!(
                "{} exited during the run ({}): {}",
                p.name,
                crate::process::describe(s),
                p.log_tail(3)
            ));
        }
    }
    for p in roles {
        p.stop(std::time::Duration::from_secs(5));
    }
    Ok(())
}

/// The row of `all` whose label is `s`, or an error naming every label.
fn by_label<T: Copy>(all: &[T], label: fn(T) -> &'static str, s: &str) -> Result<T, String> {
    all.iter().copied().find(|&k| label(k) == s).ok_or_else(|| {
        let names: Vec<_> = all.iter().map(|&k| label(k)).collect();
        format!("unknown row `{s}` (rows: {})", names.join(", "))
    })
}

/// `row` when it measured what it must (`ok`), else `why` with the row's figures.
fn measured<T: Serialize>(row: T, ok: bool, why: &str) -> Result<T, String> {
    if ok {
        return Ok(row);
    }
    Err(format!(
        "{why}: {}",
        serde_json::to_string(&row).unwrap_or_default()
    ))
}

/// simnet's command line for a bench row: its Template Provider on a free port, a network
/// difficulty so high (and no blocks of the rest of the network) that no new tip disturbs the
/// window, and a template every 10 s.
fn simnet_args(authority_key_file: &str) -> Vec<String> {
    strings([
        "simnet",
        "--tdp-listen",
        "127.0.0.1:0",
        "--authority-key-file",
        authority_key_file,
        "--network-difficulty",
        "1000000",
        "--block-interval",
        "0",
        "--template-interval",
        "10s",
        "--seed",
        "7",
    ])
}

/// `args` as owned strings, for a command line built from literals and values.
fn strings<const N: usize>(args: [&str; N]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Every event of the file at `path`, in order, to `each`.
fn each_event(path: &Path, mut each: impl FnMut(Event)) -> Result<(), String> {
    let reader = EventReader::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for e in reader {
        each(e.map_err(|e| format!("{}: {e}", path.display()))?);
    }
    Ok(())
}

/// The median and 99th percentile of a set of latencies: order statistics of the exact
/// samples (`sorted[min(n - 1, floor(p * n))]`, in nanoseconds), not the lab's microsecond
/// histogram, because a bench's latencies on the wire are tens of microseconds and its ratios
/// above a floor divide differences of a few.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Quantiles {
    /// Samples.
    pub n: u64,
    /// Median, ms.
    pub p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
}

impl Quantiles {
    fn of(samples: &Samples) -> Quantiles {
        let mut v = samples.values_ns().to_vec();
        v.sort_unstable();
        let at = |p: f64| {
            let i = ((p * v.len() as f64) as usize).min(v.len().saturating_sub(1));
            v.get(i).map(|&ns| ns as f64 / 1e6)
        };
        Quantiles {
            n: v.len() as u64,
            p50_ms: at(0.50),
            p99_ms: at(0.99),
        }
    }
}

/// The last lines a role printed on stdout, parsed as one JSON document (the fleet's `--json`
/// report), and kept in `dir/NAME.json`.
fn json_report(p: &RoleProcess, dir: &Path, name: &str) -> Result<serde_json::Value, String> {
    let text = p.printed().join("\n");
    let _ = std::fs::write(dir.join(format!("{name}.json")), &text);
    serde_json::from_str(&text).map_err(|e| format!("{name}'s report does not read: {e}"))
}

/// A path as a command-line argument.
fn path(p: &Path) -> String {
    p.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_exact_order_statistics() {
        let mut s = Samples::new();
        // 1..=100 µs, in any order.
        for i in (1..=100u64).rev() {
            s.push(0, i * 1000 + 1);
        }
        let q = Quantiles::of(&s);
        assert_eq!(q.n, 100);
        // sorted[50] and sorted[99]: the nanosecond is kept.
        assert_eq!(q.p50_ms, Some(0.051001));
        assert_eq!(q.p99_ms, Some(0.100001));
        let empty = Quantiles::of(&Samples::new());
        assert_eq!((empty.n, empty.p50_ms, empty.p99_ms), (0, None, None));
    }
}
