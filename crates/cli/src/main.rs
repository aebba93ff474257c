//! `stratumlab`: every role of the lab is a subcommand of this one binary.

mod cmd;
mod config;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Runs Bitcoin mining protocols (Stratum V1 and V2) for real, on one machine, and measures them.
#[derive(Parser)]
#[command(name = "stratumlab", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Simnet(Box<cmd::simnet::SimnetArgs>),
    Pool(Box<cmd::pool::PoolArgs>),
    Fleet(Box<cmd::fleet::FleetArgs>),
    Tap(Box<cmd::tap::TapArgs>),
    Translator(Box<cmd::translator::TranslatorArgs>),
    /// Aggregate Stratum V1 devices onto one Stratum V1 connection to an SV1 pool (the lab's
    /// sv1-proxied farm proxy): the translator's device side, shares judged locally and
    /// forwarded when they meet the pool's difficulty. `--upstream-authority-key` does not
    /// apply.
    Proxy(Box<cmd::translator::TranslatorArgs>),
    /// The Job Declarator Client: serves the farm's devices from the farm's node and declares
    /// those templates to the pool's JDS, mining them as custom jobs on the pool.
    Jdc(Box<cmd::jdc::JdcArgs>),
    Jds(Box<cmd::jds::JdsArgs>),
    Run(Box<cmd::run::RunArgs>),
    Report(cmd::report::ReportArgs),
    #[command(subcommand)]
    Events(cmd::events::EventsCommand),
    /// Measure one role at a fixed offered load against other software on the same load.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
}

/// Every role runs on jemalloc: under connection churn glibc's allocator left the holes between
/// live blocks resident, and a pool's RSS crept up for as long as it ran (docs/operations.md,
/// "Memory").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> Result<()> {
    // The matches as well as the parsed flags: a role's settings tell a flag that was given
    // from one left at its default, so that a config file can set what no flag did.
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let (_, flags) = matches.subcommand().expect("clap requires a subcommand");
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A log that cannot be written (its disk full) must not take the role down: by
        // default the subscriber reports a failed write with eprintln!, which panics then.
        .log_internal_errors(false)
        .init();
    match cli.command {
        Command::Simnet(_) => cmd::simnet::run(config::resolve(flags)?),
        Command::Pool(_) => cmd::pool::run(config::resolve(flags)?),
        Command::Fleet(_) => cmd::fleet::run(config::resolve(flags)?),
        Command::Tap(_) => cmd::tap::run(config::resolve(flags)?),
        Command::Translator(_) => cmd::translator::run(config::resolve(flags)?),
        Command::Proxy(_) => cmd::translator::run_proxy(config::resolve(flags)?),
        Command::Jdc(mut args) => {
            args.pool = config::resolve(flags)?;
            cmd::jdc::run(*args)
        }
        Command::Jds(_) => cmd::jds::run(config::resolve(flags)?),
        Command::Run(_) => cmd::run::run(flags),
        Command::Report(_) => cmd::report::run(config::resolve(flags)?),
        Command::Events(c) => cmd::events::run(c, flags),
        Command::Bench(c) => cmd::bench::run(c, flags),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_role_reads_its_defaults_from_an_empty_command_line() {
        // Each default is written as a flag's text and read back as the flag is: one that does
        // not read back (a unit without a parser) would make every start fail.
        let _ = cmd::simnet::SimnetArgs::default();
        let _ = cmd::pool::PoolArgs::default();
        let _ = cmd::fleet::FleetArgs::default();
        let _ = cmd::tap::TapArgs::default();
        let _ = cmd::translator::TranslatorArgs::default();
        let _ = cmd::jds::JdsArgs::default();
    }

    #[test]
    fn every_subcommand_has_help_and_config() {
        let root = Cli::command();
        let mut names = Vec::new();
        for sub in root.get_subcommands() {
            // Leaf commands take --config; groups (like `events`) pass it to their leaves.
            let leaves: Vec<_> = if sub.has_subcommands() {
                sub.get_subcommands().collect()
            } else {
                vec![sub]
            };
            for leaf in leaves {
                assert!(
                    leaf.get_about().is_some(),
                    "{} has no help text",
                    leaf.get_name()
                );
                assert!(
                    leaf.get_arguments().any(|a| a.get_long() == Some("config")
                        || a.get_all_aliases().is_some_and(|v| v.contains(&"config"))),
                    "{} has no --config",
                    leaf.get_name()
                );
            }
            names.push(sub.get_name().to_owned());
        }
        assert!(names.contains(&"simnet".to_owned()));
    }
}
