//! `stratumlab run`: the main job. Starts a simulated network, the configurations' pools, WAN
//! taps and fleets as processes, measures what docs/metrics.md defines and writes results.json, the
//! CSV series and report.html.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, FromArgMatches};
use serde::{Deserialize, Serialize};

use lab::orchestrate::{Progress, ShareCounts};
use lab::scenario::{Profile, Scenario};
use primitives::HashRate;

use super::fleet::Budget;
use crate::config::{self, Dur};

/// Scenarios that ship with stratumlab, by name (also found as `scenarios/NAME.toml`).
const BUILT_IN: &[(&str, &str)] = &[
    (
        "default",
        include_str!("../../../../scenarios/default.toml"),
    ),
    ("sv1", include_str!("../../../../scenarios/sv1.toml")),
    (
        "sv2-ref",
        include_str!("../../../../scenarios/sv2-ref.toml"),
    ),
];

/// Compare Stratum V1 and V2 configurations on one simulated network, over an emulated WAN,
/// with real proof of work; write results.json, CSV series and report.html.
//
// The settings of a run, declared once: each flag is the scenario file's key of the same name
// in snake_case, and a few keys only a scenario file sets (`name`, `description`, `warmup`,
// `drain`, `shares_per_minute`, `[external.NAME]`). Defaults are the lab's
// (`Scenario::default`); the scenario file is laid over them, the flags given over it.
#[derive(Args, Serialize, Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// A scenario: a name (`sv1`, `default`; looked up in ./scenarios, then built in) or the
    /// path of a TOML file whose keys are these flags' names in snake_case.
    #[arg(
        long,
        value_name = "NAME|PATH",
        alias = "config",
        default_value = "default"
    )]
    #[serde(skip)]
    pub scenario: String,
    /// The scenario's name, as the report shows it.
    #[arg(skip = Scenario::default().name)]
    pub name: String,
    /// One line the report shows under the title.
    #[arg(skip)]
    #[serde(default)]
    pub description: String,
    /// Configurations to compare, comma-separated; the first is the baseline.
    #[arg(long, value_delimiter = ',', default_values_t = Scenario::default().configs)]
    pub configs: Vec<String>,
    /// Measured duration of each trial.
    #[arg(long, default_value_t = Dur(Scenario::default().duration))]
    pub duration: Dur,
    /// Devices per configuration.
    #[arg(long, default_value_t = Scenario::default().devices)]
    pub devices: u32,
    /// Device firmware profile: asic, bitaxe or cpu.
    #[arg(long, default_value_t = Scenario::default().profile.as_str().to_owned())]
    pub profile: String,
    /// WAN round trip, applied as half in each direction.
    #[arg(long, default_value_t = Dur(Scenario::default().rtt))]
    pub rtt: Dur,
    /// Round trip of links inside a site.
    #[arg(long, default_value_t = Dur(Scenario::default().lan_rtt))]
    pub lan_rtt: Dur,
    /// WAN delay jitter (never reorders bytes).
    #[arg(long, default_value_t = Dur(Scenario::default().jitter))]
    pub jitter: Dur,
    /// WAN loss in percent, paid as TCP's retransmission delay.
    #[arg(long, default_value_t = Scenario::default().loss_pct)]
    pub loss: f64,
    /// WAN bandwidth cap (`10Mbit`, `1Gbit`, or bits per second); 0: none.
    #[arg(long, default_value_t = Bandwidth(Scenario::default().bandwidth_bps))]
    pub bandwidth: Bandwidth,
    /// Mean interval of the rest of the network's blocks.
    #[arg(long, default_value_t = Dur(Scenario::default().block_interval))]
    pub block_interval: Dur,
    /// Template refresh of the SV1 pool and of the Template Provider alike.
    #[arg(long, default_value_t = Dur(Scenario::default().template_interval))]
    pub template_interval: Dur,
    /// The first trial's seed: devices, network and links draw from it.
    #[arg(long, default_value_t = Scenario::default().seed)]
    pub seed: u64,
    /// Trials, each with its own seed (seed, seed+1, ...); figures aggregate across them.
    #[arg(long, default_value_t = Scenario::default().repeat)]
    pub repeat: u32,
    /// Real hashes per second each configuration's fleet spends (`1MH/s`).
    #[arg(long, default_value_t = Budget(Scenario::default().hash_budget))]
    pub hash_budget: Budget,
    /// Blocks each configuration should find per trial on average; sets the network
    /// difficulty.
    #[arg(long, default_value_t = Scenario::default().blocks_per_config)]
    pub blocks_per_config: f64,
    /// Fraction of the duration not counted (devices connect, vardiff settles).
    #[arg(skip = Scenario::default().warmup_fraction)]
    pub warmup: f64,
    /// How long roles run on after the measured window, for answers in flight.
    #[arg(skip = Dur(Scenario::default().drain))]
    pub drain: Dur,
    /// The share rate pools and proxies aim each device at.
    #[arg(skip = Scenario::default().shares_per_minute)]
    pub shares_per_minute: f64,
    /// From AT after a trial's start, every device hashes at FACTOR times its share of the
    /// budget (`60s=2`); repeatable. The vardiff and hash-rate estimation figures show how
    /// each configuration follows it.
    #[arg(long, value_name = "AT=FACTOR")]
    #[serde(default)]
    pub hash_rate_step: Vec<fleet::HashRateStep>,
    /// How much later than the pool's node the farm's own node (A, B) hears of the network's
    /// blocks and transactions: one relay hop further from the network.
    #[arg(long, default_value_t = Dur(Scenario::default().farm_relay_delay))]
    pub farm_relay_delay: Dur,
    /// External configurations by name (docs/operations.md, "Measuring other pools").
    #[arg(skip)]
    #[serde(default)]
    pub external: BTreeMap<String, lab::external::External>,
    /// Where results go; files are written directly into it [default: results/<timestamp>].
    #[arg(long, value_name = "DIR")]
    #[serde(skip)]
    pub out: Option<PathBuf>,
    /// Serve live Prometheus metrics of the run on this address.
    #[arg(long, value_name = "ADDR")]
    #[serde(skip)]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Run every configuration at each value of one parameter, on the same seed
    /// (`rtt=20ms,145ms,300ms`; also loss, jitter, bandwidth, devices, block-interval,
    /// template-interval): one directory per point and one results.json and report over them.
    #[arg(long, value_name = "PARAMETER=VALUES")]
    #[serde(skip)]
    pub sweep: Option<String>,
    /// A TOML file of `[external.NAME]` tables: pools or farm proxies of other software run as
    /// configurations NAME (docs/operations.md, "Measuring other pools"), added to the
    /// scenario's own.
    #[arg(long = "external", id = "external_file", value_name = "FILE")]
    #[serde(skip)]
    pub external_file: Option<PathBuf>,
}

impl RunArgs {
    /// The flags in `matches` over the scenario file at `file` over the lab's defaults.
    fn resolve(matches: &clap::ArgMatches, file: &Path) -> Result<RunArgs> {
        let flags = RunArgs::from_arg_matches(matches).context("reading the flags")?;
        config::with_file(matches, flags, file, |settings, flags| {
            settings.scenario = std::mem::take(&mut flags.scenario);
            settings.out = flags.out.take();
            settings.metrics_listen = flags.metrics_listen.take();
            settings.sweep = flags.sweep.take();
            settings.external_file = flags.external_file.take();
        })
    }
}

impl RunArgs {
    /// Sets the sweep's `parameter` (as its flag is spelled) to `value`, as the flag would.
    fn set(&mut self, parameter: &str, value: &str) -> Result<()> {
        let bad = |e: String| anyhow::anyhow!("--sweep {parameter}={value}: {e}");
        match parameter {
            "rtt" => self.rtt = value.parse().map_err(bad)?,
            "jitter" => self.jitter = value.parse().map_err(bad)?,
            "block-interval" => self.block_interval = value.parse().map_err(bad)?,
            "template-interval" => self.template_interval = value.parse().map_err(bad)?,
            "bandwidth" => self.bandwidth = value.parse().map_err(bad)?,
            "loss" => {
                self.loss = value
                    .trim_end_matches('%')
                    .trim()
                    .parse()
                    .map_err(|e: std::num::ParseFloatError| bad(e.to_string()))?
            }
            "devices" => {
                self.devices = value
                    .parse()
                    .map_err(|e: std::num::ParseIntError| bad(e.to_string()))?
            }
            other => bail!("--sweep: {other} is not a parameter a sweep can vary"),
        }
        Ok(())
    }
}

/// A bandwidth written `10Mbit`, `512kbit`, `1Gbit` or as bits per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Bandwidth(pub u64);

impl std::str::FromStr for Bandwidth {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
        let (num, unit) = (t[..split].trim(), t[split..].trim());
        let v: f64 = num
            .parse()
            .map_err(|_| format!("bandwidth {s:?}: bad number"))?;
        let scale = match unit.to_ascii_lowercase().as_str() {
            "" | "bit" | "bps" => 1.0,
            "kbit" | "kbps" => 1e3,
            "mbit" | "mbps" => 1e6,
            "gbit" | "gbps" => 1e9,
            _ => {
                return Err(format!(
                    "bandwidth {s:?}: unknown unit {unit:?} (kbit, Mbit, Gbit)"
                ))
            }
        };
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("bandwidth {s:?}: must be a non-negative number"));
        }
        Ok(Bandwidth((v * scale).round() as u64))
    }
}

impl std::fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for Bandwidth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Bandwidth {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum NumOrText {
            Num(u64),
            Text(String),
        }
        match NumOrText::deserialize(d)? {
            NumOrText::Num(v) => Ok(Bandwidth(v)),
            NumOrText::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl RunArgs {
    /// The lab's scenario these settings describe.
    pub fn to_scenario(&self) -> Result<Scenario> {
        let s = Scenario {
            name: self.name.clone(),
            configs: self.configs.clone(),
            duration: self.duration.0,
            devices: self.devices,
            profile: self
                .profile
                .parse::<Profile>()
                .map_err(anyhow::Error::msg)?,
            rtt: self.rtt.0,
            lan_rtt: self.lan_rtt.0,
            jitter: self.jitter.0,
            loss_pct: self.loss,
            bandwidth_bps: self.bandwidth.0,
            block_interval: self.block_interval.0,
            template_interval: self.template_interval.0,
            seed: self.seed,
            repeat: self.repeat,
            hash_budget: HashRate::from_hashes_per_sec(self.hash_budget.0.hashes_per_sec()),
            blocks_per_config: self.blocks_per_config,
            warmup_fraction: self.warmup,
            drain: self.drain.0,
            shares_per_minute: self.shares_per_minute,
            hash_rate_steps: self.hash_rate_step.clone(),
            farm_relay_delay: self.farm_relay_delay.0,
            external: self.external.clone(),
        };
        s.validate()?;
        Ok(s)
    }
}

/// The scenario file with the flags in `matches` laid over it, and `--external`'s tables
/// added.
fn load_settings(matches: &clap::ArgMatches, file: &Path) -> Result<RunArgs> {
    let mut settings = RunArgs::resolve(matches, file)?;
    if let Some(path) = settings.external_file.clone() {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct ExternalFile {
            external: BTreeMap<String, lab::external::External>,
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading --external {}", path.display()))?;
        let f: ExternalFile = toml::from_str(&text)
            .with_context(|| format!("parsing --external {}", path.display()))?;
        for (name, e) in f.external {
            if settings.external.contains_key(&name) {
                bail!(
                    "--external {}: {name} is defined in the scenario too",
                    path.display()
                );
            }
            settings.external.insert(name, e);
        }
    }
    Ok(settings)
}

/// Finds a scenario by name or path: an existing path, then `scenarios/NAME.toml` here, then
/// the built-in copy. Returns the file to load (built-ins are written to `scratch`).
fn resolve_scenario(arg: &str, scratch: &Path) -> Result<PathBuf> {
    let p = Path::new(arg);
    if p.is_file() {
        return Ok(p.to_owned());
    }
    let local = Path::new("scenarios").join(format!("{arg}.toml"));
    if local.is_file() {
        return Ok(local);
    }
    match BUILT_IN.iter().find(|(n, _)| *n == arg) {
        Some((name, text)) => {
            let f = scratch.join(format!("scenario-{name}.toml"));
            std::fs::write(&f, text).with_context(|| format!("writing {}", f.display()))?;
            Ok(f)
        }
        None => {
            let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
            bail!("no scenario {arg:?}: not a file, not in ./scenarios, not one of {names:?}")
        }
    }
}

/// `stratumlab run` with the flags in `matches` (the subcommand's).
pub fn run(matches: &clap::ArgMatches) -> Result<()> {
    let args = RunArgs::from_arg_matches(matches).context("reading the flags")?;
    let out = match &args.out {
        Some(d) => d.clone(),
        None => PathBuf::from("results").join(timestamp()),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let file = resolve_scenario(&args.scenario, &out)?;
    let settings = load_settings(matches, &file)?;
    let sweep = match &args.sweep {
        Some(text) => Some(text.parse::<lab::sweep::Sweep>()?),
        None => None,
    };
    // Every point's scenario first: a value that does not parse fails before anything runs.
    let mut scenarios = Vec::new();
    match &sweep {
        Some(sw) => {
            for value in &sw.values {
                let mut point = settings.clone();
                point.set(&sw.parameter, value)?;
                scenarios.push((Some(value.clone()), point.to_scenario()?));
            }
        }
        None => scenarios.push((None, settings.to_scenario()?)),
    }
    let scenario = scenarios[0].1.clone();
    lab::stop::install().context("installing signal handlers")?;
    let exe = std::env::current_exe().context("finding the stratumlab binary")?;
    eprintln!(
        "run: scenario {} ({}), {} x {} devices, {} per trial, rtt {}, network difficulty {:.3e}, into {}",
        scenario.name,
        scenario.configs.join(", "),
        scenario.configs.len(),
        scenario.devices,
        humantime::format_duration(scenario.duration),
        humantime::format_duration(scenario.rtt),
        scenario.network_difficulty().as_f64(),
        out.display()
    );
    let bar = Bar::new();
    let live = std::sync::Arc::new(lab::live::LiveMetrics::new());
    if let Some(addr) = args.metrics_listen {
        let bound = live
            .serve(addr)
            .with_context(|| format!("serving live metrics on {addr}"))?;
        println!("metrics listening on {bound} (the live page: http://{bound}/)");
    }
    let progress = Tee(&bar, &*live);
    let build = lab::run::Build {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        commit: env!("STRATUMLAB_COMMIT").to_owned(),
    };
    if let Some(sw) = &sweep {
        let mut points = Vec::new();
        for (i, (value, scenario)) in scenarios.iter().enumerate() {
            let value = value.clone().unwrap_or_default();
            let dir = sw.point_dir(&out, &value);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            eprintln!(
                "sweep: point {} of {}: {}={value}, into {}",
                i + 1,
                scenarios.len(),
                sw.parameter,
                dir.display()
            );
            if let Err(e) = run_or_exit(scenario, &exe, &dir, &build, &progress, &bar) {
                return Err(
                    anyhow::Error::new(e).context(format!("sweep point {}={value}", sw.parameter))
                );
            }
            points.push((value, dir));
        }
        bar.clear();
        let results = lab::sweep::write(&out, sw, &points)?;
        let report = lab::report::write_report(&out)?;
        println!("{}", sweep_summary(&results));
        println!("results  {}", out.join("results.json").display());
        println!("report   {}", report.html.display());
        return Ok(());
    }
    let output = run_or_exit(&scenario, &exe, &out, &build, &progress, &bar)?;
    bar.clear();
    println!("{}", lab::run::summary(&output.results));
    println!("results  {}", out.join("results.json").display());
    println!("report   {}", output.report.html.display());
    match &output.report.pdf {
        lab::report::PdfOutcome::Written(pdf) => println!("pdf      {}", pdf.display()),
        lab::report::PdfOutcome::Failed(e) => eprintln!("run: report.pdf failed: {e}"),
        _ => {}
    }
    Ok(())
}

/// One run of `scenario` into `out`. An interrupted run exits the process with the signal's
/// status (every role was stopped); on any error the progress bar is cleared first.
fn run_or_exit(
    scenario: &Scenario,
    exe: &Path,
    out: &Path,
    build: &lab::run::Build,
    progress: &dyn Progress,
    bar: &Bar,
) -> Result<lab::run::RunOutput, lab::run::LabError> {
    let result = lab::run::run(scenario, exe, out, build, progress);
    if result.is_err() {
        bar.clear();
    }
    if let Err(lab::run::LabError::Trial {
        source: lab::orchestrate::RunError::Interrupted(sig),
        ..
    }) = result
    {
        eprintln!("run: interrupted (signal {sig}); every role was stopped");
        std::process::exit(128 + sig);
    }
    result
}

/// A sweep's summary for the terminal: mean time to new job per configuration at each value.
fn sweep_summary(results: &serde_json::Value) -> String {
    let configs = lab::sweep::configs(results);
    let points: Vec<&serde_json::Value> = lab::sweep::points(results).collect();
    let parameter = results["sweep"]["parameter"].as_str().unwrap_or("?");
    let mut out = format!(
        "mean time to new job (ms) against {parameter}\n{:>16}",
        parameter
    );
    for c in &configs {
        out.push_str(&format!(" {c:>12}"));
    }
    for p in &points {
        out.push_str(&format!("\n{:>16}", p["value"].as_str().unwrap_or("")));
        for c in &configs {
            match p["configs"][c]["time_to_job_ms"]["mean"].as_f64() {
                Some(v) => out.push_str(&format!(" {v:>12.1}")),
                None => out.push_str(&format!(" {:>12}", "—")),
            }
        }
    }
    out
}

/// Progress to two places: the terminal and the live metrics.
struct Tee<'a>(&'a dyn Progress, &'a dyn Progress);

impl Progress for Tee<'_> {
    fn stage(&self, what: &str) {
        self.0.stage(what);
        self.1.stage(what);
    }
    fn tick(&self, elapsed: Duration, total: Duration, shares: &BTreeMap<String, ShareCounts>) {
        self.0.tick(elapsed, total, shares);
        self.1.tick(elapsed, total, shares);
    }
    fn roles(&self, latest: &BTreeMap<String, (f64, u64)>) {
        self.0.roles(latest);
        self.1.roles(latest);
    }
    fn started(
        &self,
        roles: &[lab::orchestrate::RoleFile],
        endpoints: &[lab::orchestrate::StatusEndpoint],
    ) {
        self.0.started(roles, endpoints);
        self.1.started(roles, endpoints);
    }
}

fn timestamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // UTC, YYYYmmdd-HHMMSS, computed without a date crate (civil-from-days).
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Progress on stderr: a bar when stderr is a terminal, a line every 10 s otherwise.
struct Bar {
    bar: Option<indicatif::ProgressBar>,
    last_line: std::cell::Cell<Duration>,
}

impl Bar {
    fn new() -> Bar {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let bar = tty.then(|| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len}s {msg}",
                )
                .expect("valid template"),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Bar {
            bar,
            last_line: std::cell::Cell::new(Duration::ZERO),
        }
    }

    fn clear(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

fn shares_text(shares: &BTreeMap<String, ShareCounts>) -> String {
    shares
        .iter()
        .map(|(c, s)| {
            format!(
                "{c}: {} accepted, {} rejected, {} blocks",
                s.accepted, s.rejected, s.blocks
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl Progress for Bar {
    fn stage(&self, what: &str) {
        match &self.bar {
            Some(b) => b.set_message(what.to_owned()),
            None => eprintln!("run: {what}"),
        }
    }

    fn tick(&self, elapsed: Duration, total: Duration, shares: &BTreeMap<String, ShareCounts>) {
        let text = shares_text(shares);
        match &self.bar {
            Some(b) => {
                b.set_length(total.as_secs());
                b.set_position(elapsed.as_secs().min(total.as_secs()));
                b.set_message(text);
            }
            None => {
                if elapsed >= self.last_line.get() + Duration::from_secs(10) {
                    self.last_line.set(elapsed);
                    eprintln!(
                        "run: {}s of {}s, {text}",
                        elapsed.as_secs(),
                        total.as_secs()
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidths_parse_with_units() {
        assert_eq!(
            "10Mbit".parse::<Bandwidth>().unwrap(),
            Bandwidth(10_000_000)
        );
        assert_eq!("512 kbit".parse::<Bandwidth>().unwrap(), Bandwidth(512_000));
        assert_eq!("2500".parse::<Bandwidth>().unwrap(), Bandwidth(2500));
        assert!("10MB".parse::<Bandwidth>().is_err());
        assert!("-1Mbit".parse::<Bandwidth>().is_err());
    }

    /// The settings a `stratumlab run` command line gives, its scenario looked up as `run` does.
    fn settings(args: &[&str]) -> Result<RunArgs> {
        let matches = RunArgs::augment_args(clap::Command::new("run").no_binary_name(true))
            .try_get_matches_from(args)?;
        let flags = RunArgs::from_arg_matches(&matches)?;
        let dir = tempfile::tempdir().unwrap();
        let file = resolve_scenario(&flags.scenario, dir.path())?;
        load_settings(&matches, &file)
    }

    #[test]
    fn built_in_scenarios_load_and_validate() {
        for (name, _) in BUILT_IN {
            settings(&["--scenario", name])
                .unwrap()
                .to_scenario()
                .unwrap_or_else(|e| panic!("scenario {name}: {e:#}"));
        }
    }

    #[test]
    fn flags_override_the_scenario() {
        let s = settings(&[
            "--scenario=sv1",
            "--duration=60s",
            "--devices=7",
            "--rtt=80ms",
            "--configs=sv1,A",
            "--farm-relay-delay=5ms",
        ])
        .unwrap()
        .to_scenario()
        .unwrap();
        assert_eq!(s.duration, Duration::from_secs(60));
        assert_eq!(s.devices, 7);
        assert_eq!(s.rtt, Duration::from_millis(80));
        assert_eq!(s.farm_relay_delay, Duration::from_millis(5));
        assert_eq!(s.configs, ["sv1", "A"]);
        // What the flags left alone is the scenario's.
        assert_eq!(s.name, "sv1");
    }

    #[test]
    fn the_default_scenario_compares_all_six_configurations() {
        let s = settings(&[]).unwrap().to_scenario().unwrap();
        assert_eq!(s.configs, ["sv1", "sv1-proxied", "A", "B", "C", "D"]);
        assert!(s.two_nodes());
        assert_eq!(s.farm_relay_delay, Duration::from_millis(20));
    }

    #[test]
    fn a_scenario_file_sets_keys_no_flag_has_and_refuses_unknown_ones() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("mine.toml");
        std::fs::write(
            &f,
            "name = \"mine\"\ndescription = \"two pools\"\nwarmup = 0.25\ndrain = \"7s\"\n\
             shares_per_minute = 12.0\ndevices = 9\nconfigs = [\"sv1\"]\n",
        )
        .unwrap();
        let path = f.to_str().unwrap();
        let s = settings(&["--scenario", path, "--devices", "3"]).unwrap();
        assert_eq!(s.description, "two pools");
        let s = s.to_scenario().unwrap();
        assert_eq!(s.name, "mine");
        assert_eq!(s.warmup_fraction, 0.25);
        assert_eq!(s.drain, Duration::from_secs(7));
        assert_eq!(s.shares_per_minute, 12.0);
        assert_eq!(s.devices, 3, "a flag over the file");
        std::fs::write(&f, "devcies = 9\n").unwrap();
        let e = settings(&["--scenario", path]).unwrap_err();
        assert!(
            format!("{e:#}").contains("unknown field `devcies`"),
            "{e:#}"
        );
    }

    #[test]
    fn unknown_scenarios_and_configs_are_refused() {
        assert!(settings(&["--scenario", "no-such-scenario"]).is_err());
        let e = settings(&["--scenario=sv1", "--configs=sv1,Q"])
            .unwrap()
            .to_scenario()
            .unwrap_err();
        assert!(format!("{e}").contains("\"Q\""), "{e}");
    }

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        let t = timestamp();
        assert_eq!(t.len(), 15, "{t}");
        assert!(t.starts_with("20"), "{t}");
    }
}
