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
    Summary(SummaryArgs),
}

#[derive(Args, Serialize)]
pub struct DumpArgs {
    /// Event files written by stratumlab roles.
    #[arg(required = true)]
    #[serde(skip)]
    files: Vec<PathBuf>,
    /// Only these kinds (snake_case, e.g. share_result); repeat for several.
    #[arg(long = "kind")]
    #[serde(skip_serializing_if = "Option::is_none")]
    kinds: Option<Vec<String>>,
    /// TOML file with settings (keys: kinds).
    #[arg(long)]
    #[serde(skip)]
    config: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct DumpConfig {
    kinds: Vec<String>,
}

#[derive(Args, Serialize)]
pub struct SummaryArgs {
    #[arg(required = true)]
    #[serde(skip)]
    files: Vec<PathBuf>,
    /// TOML file with settings (none are needed; accepted for uniformity).
    #[arg(long)]
    #[serde(skip)]
    config: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SummaryConfig {}

pub fn run(cmd: EventsCommand) -> Result<()> {
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
        EventsCommand::Dump(args) => {
            let conf: DumpConfig = config::load(args.config.as_deref(), &args)?;
            dump(&args.files, &conf.kinds, &mut out)?;
        }
        EventsCommand::Summary(args) => {
            let _: SummaryConfig = config::load(args.config.as_deref(), &args)?;
            for f in &args.files {
                summary(f, &mut out)?;
            }
        }
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

    #[test]
    fn missing_file_is_a_clear_error() {
        let e = dump(&[PathBuf::from("/nonexistent/x.ev")], &[], &mut Vec::new()).unwrap_err();
        assert!(
            format!("{e:#}").contains("opening /nonexistent/x.ev"),
            "{e:#}"
        );
    }
}
