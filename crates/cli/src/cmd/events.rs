//! `stratumlab events`: look inside event logs written with `--events`.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};

use crate::config;

#[derive(Subcommand)]
pub enum EventsCommand {
    /// Print events as JSON lines, several files merged into one time line.
    Dump(DumpArgs),
    /// Summarize event files: writer, time span, events per kind, truncation.
    Summary(FilesArgs),
    /// Count the devices' shares and verdicts in a set of event files as `stratumlab run`
    /// does (every event counts: no warm-up, no drain), and print them as JSON.
    ///
    /// Give the fleets' files and, for the lab's stale classification of rejections whose job
    /// a new tip superseded, simnet's; other roles' files are read by the role their header
    /// names. Prints `{"shares": ..., "unmatched_events": N}` with the keys of results.json's
    /// `shares` (`rejected_by_reason` the lab's reasons, `pool_reason` the pool's).
    Shares(FilesArgs),
}

#[derive(Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DumpArgs {
    /// Event files written by stratumlab roles.
    #[arg(required = true)]
    #[serde(skip)]
    files: Vec<PathBuf>,
    /// Only these kinds (snake_case, e.g. share_result); repeat for several.
    #[arg(long = "kind")]
    #[serde(default)]
    kinds: Vec<String>,
    /// TOML file with settings (keys: kinds).
    #[arg(long)]
    #[serde(skip)]
    config: Option<PathBuf>,
}

/// Event files and nothing else to set: `summary` and `shares`.
#[derive(Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesArgs {
    #[arg(required = true)]
    #[serde(skip)]
    files: Vec<PathBuf>,
    /// TOML file with settings (none are needed; accepted for uniformity).
    #[arg(long)]
    #[serde(skip)]
    config: Option<PathBuf>,
}

/// The event files are arguments, not settings.
macro_rules! files_settings {
    ($t:ty) => {
        impl config::RoleSettings for $t {
            fn config_mut(&mut self) -> &mut Option<PathBuf> {
                &mut self.config
            }

            fn keep_arguments(&mut self, flags: &mut Self) {
                self.files = std::mem::take(&mut flags.files);
            }
        }
    };
}
files_settings!(DumpArgs);
files_settings!(FilesArgs);

/// Runs `cmd`, its settings read from the flags in `matches` (the `events` subcommand's) and
/// the file they name.
pub fn run(cmd: EventsCommand, matches: &clap::ArgMatches) -> Result<()> {
    let (_, flags) = matches.subcommand().expect("clap requires a subcommand");
    let cmd = match cmd {
        EventsCommand::Dump(_) => EventsCommand::Dump(config::resolve(flags)?),
        EventsCommand::Summary(_) => EventsCommand::Summary(config::resolve(flags)?),
        EventsCommand::Shares(_) => EventsCommand::Shares(config::resolve(flags)?),
    };
    match write_out(cmd) {
        // `stratumlab events dump F | head`: the reader having seen enough is not an error.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                    || c.downcast_ref::<serde_json::Error>()
                        .and_then(|j| j.io_error_kind())
                        .is_some_and(|k| k == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            Ok(())
        }
        r => r,
    }
}

fn write_out(cmd: EventsCommand) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match cmd {
        EventsCommand::Dump(args) => dump(&args.files, &args.kinds, &mut out)?,
        EventsCommand::Summary(args) => {
            for f in &args.files {
                summary(f, &mut out)?;
            }
        }
        EventsCommand::Shares(args) => shares(&args.files, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

fn open_all(files: &[PathBuf]) -> Result<Vec<events::EventReader>> {
    files
        .iter()
        .map(|f| events::EventReader::open(f).with_context(|| format!("opening {}", f.display())))
        .collect()
}

fn dump(files: &[PathBuf], kinds: &[String], out: &mut impl Write) -> Result<()> {
    let readers = open_all(files)?;
    let headers: Vec<events::Header> = readers.iter().map(|r| *r.header()).collect();
    let mut merged = events::merge(readers);
    for item in &mut merged {
        let (source, event) = item.with_context(|| "reading events")?;
        if !kinds.is_empty() && !kinds.iter().any(|k| k == event.kind.name()) {
            continue;
        }
        let mut v = serde_json::to_value(event)?;
        let h = &headers[source];
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("role".into(), h.role.as_str().into());
            m.insert("config".into(), h.config.as_str().into());
        }
        serde_json::to_writer(&mut *out, &v)?;
        out.write_all(b"\n")?;
    }
    for (r, f) in merged.readers().iter().zip(files) {
        if r.truncated() {
            tracing::warn!(file = %f.display(), "file ends inside a record (its writer stopped mid-write)");
        }
    }
    Ok(())
}

fn summary(file: &Path, out: &mut impl Write) -> Result<()> {
    let log = events::read_file(file).with_context(|| format!("reading {}", file.display()))?;
    let mut per_kind: BTreeMap<&str, u64> = BTreeMap::new();
    for e in &log.events {
        *per_kind.entry(e.kind.name()).or_default() += 1;
    }
    let span_s = match (log.events.first(), log.events.last()) {
        (Some(a), Some(b)) => (b.ts_ns.saturating_sub(a.ts_ns)) as f64 / 1e9,
        _ => 0.0,
    };
    let h = &log.header;
    writeln!(
        out,
        "{}: role {:?}, config {:?}, pid {}, schema {}.{}",
        file.display(),
        h.role.as_str(),
        h.config.as_str(),
        h.pid,
        h.schema_major,
        h.schema_minor
    )?;
    writeln!(out, "  {} events over {span_s:.3} s", log.events.len())?;
    for (k, n) in per_kind {
        writeln!(out, "  {k:<20} {n}")?;
    }
    if log.truncated {
        writeln!(out, "  truncated: the file ends inside a record")?;
    }
    if log.skipped > 0 {
        writeln!(
            out,
            "  skipped {} records of kinds this build does not know",
            log.skipped
        )?;
    }
    Ok(())
}

/// The lab's metric engine over whole files: one configuration whose measured window spans
/// every event read.
fn shares(files: &[PathBuf], out: &mut impl Write) -> Result<()> {
    use lab::metrics::{ConfigRun, LinkSetup, LogSource, PoolShares, RoleKind, RoleLog, Site};
    let mut logs = Vec::new();
    let mut simnet = None;
    let mut header = None;
    let (mut first, mut last) = (u64::MAX, 0u64);
    for f in files {
        let log = events::read_file(f).with_context(|| format!("reading {}", f.display()))?;
        header.get_or_insert(log.header);
        if let (Some(a), Some(b)) = (log.events.first(), log.events.last()) {
            first = first.min(a.ts_ns);
            last = last.max(b.ts_ns);
        }
        let role = log.header.role.as_str().to_owned();
        let kind = match role.as_str() {
            "simnet" => {
                if simnet.replace(log).is_some() {
                    anyhow::bail!("more than one simnet events file");
                }
                continue;
            }
            "fleet" => RoleKind::Fleet,
            "pool" | "jds" => RoleKind::Pool,
            "tap" => RoleKind::Tap,
            "translator" | "proxy" | "jdc" => RoleKind::Proxy,
            _ => RoleKind::Other,
        };
        logs.push(RoleLog {
            name: format!("{role}{}", logs.len()),
            kind,
            site: if kind == RoleKind::Pool {
                Site::Pool
            } else {
                Site::Farm
            },
            source: LogSource::from(log),
        });
    }
    if !logs.iter().any(|l| l.kind == RoleKind::Fleet) {
        anyhow::bail!(
            "no fleet events file among {} files: shares are counted at the devices",
            files.len()
        );
    }
    // Without simnet's file no tip is known: rejections keep the pool's reasons, but for those
    // whose device had already been sent work on another prev hash.
    let empty = || events::EventLog {
        header: header.expect("a file was read"),
        events: Vec::new(),
        truncated: false,
        skipped: 0,
    };
    let (first, last) = if first > last { (0, 0) } else { (first, last) };
    let run = ConfigRun {
        name: String::new(),
        logs,
        simnet: LogSource::from(simnet.unwrap_or_else(empty)),
        // A single-node simnet names its node "node".
        job_source_node: "node".into(),
        // Event files do not hold the pool's worker list.
        pool_workers: None,
        pool_accepted: Vec::new(),
        window: lab::metrics::Window {
            start_ns: first,
            warmup_end_ns: first,
            drain_start_ns: last + 1,
            end_ns: last + 1,
        },
        links: LinkSetup {
            wan: String::new(),
            rtt: std::time::Duration::ZERO,
            lan_rtt: std::time::Duration::ZERO,
            farm_node_peer_link: None,
            node_endpoints: Vec::new(),
        },
        pool_shares: PoolShares::None,
        block_interval: std::time::Duration::ZERO,
        template_interval: std::time::Duration::ZERO,
        hash_budget_hps: 0.0,
        usage: BTreeMap::new(),
        unlogged: BTreeMap::new(),
        estimation: Default::default(),
    };
    let results = lab::metrics::measure(&run)
        .with_context(|| "counting shares")?
        .results();
    let v = serde_json::json!({
        "shares": results.shares,
        "unmatched_events": results.unmatched_events,
    });
    serde_json::to_writer(&mut *out, &v)?;
    out.write_all(b"\n")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use events::{EventSink, Mark};

    #[test]
    fn dump_merges_files_by_time_and_filters_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.ev");
        let b = dir.path().join("b.ev");
        let sa = EventSink::create(&a, "pool", "sv1").unwrap();
        let sb = EventSink::create(&b, "fleet", "sv1").unwrap();
        sa.emit_at(
            10,
            Mark {
                name: events::ShortStr::new("a1"),
            },
        );
        sb.emit_at(
            5,
            Mark {
                name: events::ShortStr::new("b1"),
            },
        );
        sa.emit_at(
            20,
            Mark {
                name: events::ShortStr::new("a2"),
            },
        );
        sa.finish().unwrap();
        sb.finish().unwrap();

        let mut out = Vec::new();
        dump(&[a.clone(), b.clone()], &[], &mut out).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ts: Vec<u64> = lines.iter().map(|v| v["ts_ns"].as_u64().unwrap()).collect();
        assert_eq!(ts, [5, 10, 20]);
        assert_eq!(lines[0]["role"], "fleet");
        assert_eq!(lines[1]["role"], "pool");
        assert_eq!(lines[0]["kind"], "mark");

        let mut out = Vec::new();
        dump(&[a.clone(), b], &["share_result".into()], &mut out).unwrap();
        assert!(out.is_empty(), "no share results were written");

        let mut out = Vec::new();
        summary(&a, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("role \"pool\""), "{text}");
        assert!(text.contains("2 events"), "{text}");
        assert!(text.contains("mark"), "{text}");
    }

    /// The lab's classification from files: an "invalid job" answer to a share whose job simnet's
    /// next tip superseded before the verdict came is stale, the pool's reason kept beside;
    /// without simnet's file nothing tells, and the pool's reason stands.
    #[test]
    fn shares_are_counted_with_the_labs_reasons() {
        use events::{
            Fingerprint, JobId, JobReceived, Perspective, Reason, ShareResult, ShareSent, ShortStr,
            TipChanged, TipSource, Verdict,
        };
        let dir = tempfile::tempdir().unwrap();
        let (fleet, simnet) = (dir.path().join("fleet.ev"), dir.path().join("simnet.ev"));
        let (p0, p1) = (events::Hash256([1; 32]), events::Hash256([2; 32]));
        let f = EventSink::create(&fleet, "fleet", "").unwrap();
        let job = JobId::text("a");
        f.emit_at(
            100,
            JobReceived {
                device: 1,
                channel: None,
                job_id: job,
                fingerprint: Some(Fingerprint(7)),
                prev_hash: Some(p0),
                target: primitives::Target::DIFFICULTY_1,
                clean: true,
                future: false,
            },
        );
        for (seq, sent, answered, verdict) in [
            (1, 200, 300, Verdict::Accepted),
            (2, 400, 600, Verdict::Rejected(Reason::InvalidJob)),
        ] {
            f.emit_at(
                sent,
                ShareSent {
                    device: 1,
                    channel: None,
                    seq,
                    job_id: job,
                    nonce: 0,
                    ntime: 0,
                    version: 0,
                    difficulty: 1.0,
                    hash: None,
                },
            );
            f.emit_at(
                answered,
                ShareResult {
                    conn: 1,
                    channel: None,
                    seq,
                    job_id: job,
                    nonce: 0,
                    difficulty: 1.0,
                    verdict,
                    perspective: Perspective::Received,
                },
            );
        }
        f.finish().unwrap();
        let s = EventSink::create(&simnet, "simnet", "").unwrap();
        s.emit_at(
            500,
            TipChanged {
                node: ShortStr::new("network"),
                hash: p1,
                height: 2,
                prev_hash: p0,
                source: TipSource::Network,
            },
        );
        s.finish().unwrap();

        let counted = |files: &[PathBuf]| {
            let mut out = Vec::new();
            shares(files, &mut out).unwrap();
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()["shares"].clone()
        };
        let with_tips = counted(&[fleet.clone(), simnet]);
        assert_eq!(with_tips["submitted"], 2, "{with_tips}");
        assert_eq!(with_tips["accepted"], 1, "{with_tips}");
        assert_eq!(with_tips["stale"], 1, "{with_tips}");
        assert_eq!(with_tips["rejected_by_reason"]["stale"], 1, "{with_tips}");
        assert_eq!(with_tips["pool_reason"]["invalid_job"], 1, "{with_tips}");
        let alone = counted(std::slice::from_ref(&fleet));
        assert_eq!(alone["rejected"], 1, "{alone}");
        assert_eq!(alone["rejected_by_reason"]["invalid_job"], 1, "{alone}");

        let e = shares(&[dir.path().join("none.ev")], &mut Vec::new()).unwrap_err();
        assert!(format!("{e:#}").contains("none.ev"), "{e:#}");
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let e = dump(&[PathBuf::from("/nonexistent/x.ev")], &[], &mut Vec::new()).unwrap_err();
        assert!(
            format!("{e:#}").contains("opening /nonexistent/x.ev"),
            "{e:#}"
        );
    }
}
