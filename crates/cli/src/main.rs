//! `stratumlab`: every role of the lab is a subcommand of this one binary.

mod cmd;
mod config;

use anyhow::Result;
use clap::{Parser, Subcommand};

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
}

fn main() -> Result<()> {
    let cli = Cli::parse();
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
        Command::Simnet(args) => cmd::simnet::run(*args),
        Command::Pool(args) => cmd::pool::run(*args),
        Command::Fleet(args) => cmd::fleet::run(*args),
        Command::Tap(args) => cmd::tap::run(*args),
        Command::Translator(args) => cmd::translator::run(*args),
        Command::Proxy(args) => cmd::translator::run_proxy(*args),
        Command::Jdc(args) => cmd::jdc::run(*args),
        Command::Jds(args) => cmd::jds::run(*args),
        Command::Run(args) => cmd::run::run(*args),
        Command::Report(args) => cmd::report::run(args),
        Command::Events(c) => cmd::events::run(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
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
