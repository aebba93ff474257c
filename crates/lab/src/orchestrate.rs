//! One trial of a run, as processes: simnet (shared by every configuration; two nodes, "pool"
//! and "farm", when a configuration declares jobs), then per configuration its pool (and JDS),
//! the WAN taps, the farm roles (C: one translator behind each tap; A and B: a JDC behind a
//! WAN tap to the pool and one to the JDS, reached over an intra-farm tap, A's translator in
//! front of it) and the fleets; the trial's clock; stopping everything in order; and, whatever
//! happens, no role left behind.
//!
//! Roles are spawned from the calling thread only: PR_SET_PDEATHSIG fires when the thread that
//! forked a child exits, so a role started from a short-lived thread would die with it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use events::EventSink;
use serde::Serialize;

use crate::estimates::EstimateSampler;
use crate::external::{self, External, Values};
use crate::metrics::EstimateSample;
use crate::metrics::{RoleKind, Site, Window};
use crate::process::{describe, Launch, ProcessError, RoleProcess, THIRD_PARTY};
use crate::scenario::{
    ConfigSpec, DeviceProtocol, PoolImpl, ProxyImpl, Scenario, FARM_NODE, POOL_NODE,
};
use crate::stop;
use crate::third_party::{
    free_loopback_port, PoolSv2Config, Tool, TranslatorSv2Config, POOL_SV2_READY,
    TRANSLATOR_SV2_READY,
};
use crate::usage::{RoleUsage, Sampler};

/// The channels our SV2 pool lets one connection open unless told otherwise: a per-device
/// translator's pool is told at least its devices, never less than this.
const SV2_DEFAULT_MAX_CHANNELS: usize = 64;

/// How long any role of a trial may take to listen, report healthy or print that it is ready.
const READY: Duration = Duration::from_secs(60);

/// A regtest address the pools pay in pool mode (BIP173's test vector).
pub const PAYOUT_ADDRESS: &str = "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080";

/// What went wrong in a trial, naming the role to blame.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A role could not be started or did not become ready.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// A role exited while the trial was running.
    #[error(
        "{role} exited unexpectedly ({status}) during the run; the end of its log ({log}):\n{tail}"
    )]
    RoleDied {
        /// The role's name.
        role: String,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: String,
        /// The end of its log.
        tail: String,
    },
    /// A role exited with a failure when it was stopped.
    #[error("{role} did not exit cleanly ({status}); the end of its log ({log}):\n{tail}")]
    RoleFailed {
        /// The role's name.
        role: String,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: String,
        /// The end of its log.
        tail: String,
    },
    /// A role's health check never passed.
    #[error("{role} never became healthy: {why}")]
    Unhealthy {
        /// The role's name.
        role: String,
        /// The last check's failure.
        why: String,
    },
    /// A signal (its number) stopped the trial.
    #[error("interrupted by signal {0}: every role was stopped")]
    Interrupted(i32),
    /// A file or directory operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
    let what = what.into();
    move |source| RunError::Io { what, source }
}

/// A trial's SV2 authority key pair, in a file in the trial's directory: every SV2 server the
/// lab starts (simnet's Template Provider, the pool, the JDS, the JDC, the reference pool)
/// signs with it, and every client checks certificates against its public key. Fresh for each
/// run: no role runs on the published reference pair.
pub struct AuthorityFile {
    /// The key pair's file.
    pub path: PathBuf,
    /// The public key, as roles are given it.
    pub public: String,
    secret: String,
}

impl AuthorityFile {
    /// Creates the pair in `dir` (created too), or reads the one already there.
    pub fn create(dir: &Path) -> Result<AuthorityFile, RunError> {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        let path = dir.join("authority.key");
        let (keys, _) = sv2::keys::load_or_create(&path).map_err(|e| RunError::Io {
            what: format!("the trial's authority key pair ({})", path.display()),
            source: std::io::Error::other(e.to_string()),
        })?;
        Ok(AuthorityFile {
            path,
            public: keys.public_key(),
            secret: keys.secret_key(),
        })
    }

    /// The secret half, for a third-party role that takes it in its config file.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// `--authority-key-file PATH`, for a server.
    fn server_args(&self) -> [OsString; 2] {
        ["--authority-key-file".into(), self.path.clone().into()]
    }
}

/// One role's files in a trial.
#[derive(Clone, Debug)]
pub struct RoleFile {
    /// The role's name in the run: "simnet", "sv1.pool", "sv1.tap0", "C.translator0",
    /// "sv1.fleet0".
    pub name: String,
    /// `None` for simnet, which serves every configuration.
    pub kind: Option<RoleKind>,
    /// The configuration it serves (`None` for simnet).
    pub config: Option<String>,
    /// The site it runs at.
    pub site: Site,
    /// `None` for a third-party role, which writes no events (its peers' events and the taps
    /// around it tell its story).
    pub events: Option<PathBuf>,
    /// Its log file.
    pub log: PathBuf,
}

/// What a finished trial leaves for the metric engine.
#[derive(Debug)]
pub struct TrialRecord {
    /// The trial's index.
    pub index: u32,
    /// The trial's seed.
    pub seed: u64,
    /// The trial's warm-up, measured window and drain.
    pub window: Window,
    /// Every role the trial started.
    pub roles: Vec<RoleFile>,
    /// Per role name, over the measured window.
    pub usage: BTreeMap<String, RoleUsage>,
    /// Host CPU samples: (ns, percent of all cores).
    pub host_cpu: Vec<(u64, f64)>,
    /// Per-role CPU and RSS series as CSV text.
    pub usage_csv: (String, String),
    /// The job-source node name per configuration ("node" on a single-node simnet).
    pub job_source_node: BTreeMap<String, String>,
    /// The WAN link's name in tap events.
    pub wan_link: String,
    /// Per configuration with a pool of ours: the workers it credited with an accepted share
    /// (its `/api/workers` at the end of the run, before the roles stop).
    pub pool_workers: BTreeMap<String, u64>,
    /// Per configuration: our roles' hash-rate estimates, read while the trial ran.
    pub estimates: BTreeMap<String, Vec<EstimateSample>>,
    /// Per configuration with a third-party pool: its count of accepted shares, read while the
    /// trial ran (see [`crate::estimates::Sampled::pool_accepted`]).
    pub pool_accepted: BTreeMap<String, Vec<(u64, f64)>>,
}

/// What a running trial reports to whoever shows progress.
pub trait Progress {
    /// A stage began ("starting simnet", ...).
    fn stage(&self, what: &str);
    /// The measured run is under way.
    fn tick(&self, elapsed: Duration, total: Duration, shares: &BTreeMap<String, ShareCounts>);
    /// The roles' latest CPU (percent of a core) and RSS (bytes).
    fn roles(&self, _latest: &BTreeMap<String, (f64, u64)>) {}
    /// Every role of the trial is up: their files (whose events can be followed as they are
    /// written) and the status endpoints of those that serve one.
    fn started(&self, _roles: &[RoleFile], _endpoints: &[StatusEndpoint]) {}
    /// The trial is over.
    fn done(&self) {}
}

/// A role's HTTP status endpoints (`/metrics`, `/api/status`, `/healthz`, `/`) in a trial.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StatusEndpoint {
    /// The configuration it serves.
    pub config: String,
    /// `pool`, `jds`, `jdc`, `translator` or `proxy`; `pool_sv2` or `translator_sv2` for a
    /// reference role's monitoring server.
    pub role: &'static str,
    /// The role's name in the run ("C.translator0").
    pub name: String,
    /// Where it serves HTTP.
    pub addr: SocketAddr,
}

/// Shares so far per configuration, as its pool reports them.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ShareCounts {
    /// Shares the pool accepted.
    pub accepted: u64,
    /// Shares the pool rejected.
    pub rejected: u64,
    /// Blocks the pool found.
    pub blocks: u64,
}

/// Runs one trial.
pub struct Trial<'a> {
    /// What the run was told.
    pub scenario: &'a Scenario,
    /// The trial's authority key pair, which every SV2 server of the trial signs with.
    pub authority: &'a AuthorityFile,
    /// The trial's index.
    pub index: u32,
    /// The trial's seed.
    pub seed: u64,
    /// The stratumlab binary to start roles from.
    pub exe: &'a Path,
    /// Directory for this trial's events, logs and stores.
    pub dir: &'a Path,
    /// Where the trial reports its stages.
    pub progress: &'a dyn Progress,
    /// The SV2 reference pool, for configurations that run it.
    pub pool_sv2: Option<&'a Tool>,
    /// The SV2 reference translator, for configurations that run it.
    pub translator_sv2: Option<&'a Tool>,
    /// Each external definition's program by the definition's name, located before the run
    /// ([`crate::third_party::locate_external`]).
    pub externals: &'a BTreeMap<String, Tool>,
}

/// A trial's roles while it runs, each one's CPU sampled from the moment it is added.
struct Running {
    sampler: Sampler,
    /// Where each role's event file goes.
    events_dir: PathBuf,
    /// Where each role's log goes.
    logs_dir: PathBuf,
    roles: Vec<RoleProcess>,
    logs: Vec<RoleFile>,
    /// Every status endpoint of the trial's own roles (each of our pools' among them).
    endpoints: Vec<StatusEndpoint>,
    /// See [`TrialRecord::pool_workers`].
    pool_workers: BTreeMap<String, u64>,
    /// See [`TrialRecord::estimates`] and [`TrialRecord::pool_accepted`].
    sampled: crate::estimates::Sampled,
}

impl Running {
    fn endpoint(&mut self, config: &str, role: &'static str, name: &str, addr: SocketAddr) {
        self.endpoints.push(StatusEndpoint {
            config: config.to_owned(),
            role,
            name: name.to_owned(),
            addr,
        });
    }

    /// The files of role `name` (of `kind` in `config`, at `site`): its events and its log.
    fn file(
        &self,
        name: &str,
        kind: Option<RoleKind>,
        config: Option<&str>,
        site: Site,
    ) -> RoleFile {
        RoleFile {
            name: name.to_owned(),
            kind,
            config: config.map(str::to_owned),
            site,
            events: Some(self.events_dir.join(format!("{name}.events"))),
            log: self.logs_dir.join(format!("{name}.log")),
        }
    }

    fn add(&mut self, p: RoleProcess, log: RoleFile) -> &mut RoleProcess {
        self.sampler.watch(&log.name, p.pid());
        self.logs.push(log);
        self.roles.push(p);
        self.roles.last_mut().expect("just pushed")
    }

    /// Stops every role still running, newest first (fleets before taps before pools before
    /// simnet), so nothing upstream disappears under a role that is still talking.
    fn stop_all(&mut self, grace: Duration) -> Vec<Stopped> {
        let mut out = Vec::new();
        while let Some(mut p) = self.roles.pop() {
            let already = p.exited();
            let status = match already {
                Some(s) => s,
                None => p.stop(grace),
            };
            out.push(Stopped {
                role: p.name.clone(),
                clean: p.ended_well(status),
                status,
                log: p.log_path().display().to_string(),
            });
        }
        out
    }
}

/// How a role ended.
struct Stopped {
    role: String,
    status: std::process::ExitStatus,
    /// Exit 0, or the signal a third-party role was stopped with.
    clean: bool,
    log: String,
}

impl Trial<'_> {
    /// Starts every role, runs the trial to the end of its drain and stops them.
    pub fn run(&self) -> Result<TrialRecord, RunError> {
        let s = self.scenario;
        let events_dir = self.dir.join("events");
        let logs_dir = self.dir.join("logs");
        for d in [&events_dir, &logs_dir] {
            std::fs::create_dir_all(d).map_err(io(format!("creating {}", d.display())))?;
        }
        let lab_events = EventSink::create(events_dir.join("lab.events"), "lab", "")
            .map_err(io("creating the lab's event file"))?;
        let mut running = Running {
            sampler: Sampler::start(Duration::from_secs(1)),
            events_dir,
            logs_dir,
            roles: Vec::new(),
            logs: Vec::new(),
            endpoints: Vec::new(),
            pool_workers: BTreeMap::new(),
            sampled: Default::default(),
        };
        let result = self.drive(&mut running, &lab_events);
        // Whatever happened, every role stops; on success they are already stopping in order.
        let stopped = running.stop_all(Duration::from_secs(10));
        let _ = lab_events.finish();
        let window = result?;
        // A role that exited badly at the end is as much a failure as one that died early.
        for s in stopped {
            if !s.clean && s.status.code() != Some(130) {
                return Err(s.failure());
            }
        }
        let usage = running.sampler.usage(window.start_ns, window.end_ns);
        let job_source_node = s
            .specs()
            .map(|c| (c.name.to_owned(), s.job_source_node(c).to_owned()))
            .collect();
        Ok(TrialRecord {
            index: self.index,
            seed: self.seed,
            window,
            roles: running.logs,
            usage,
            host_cpu: running.sampler.host_cpu(),
            usage_csv: running.sampler.csvs(window.start_ns),
            job_source_node,
            wan_link: WAN_LINK.to_owned(),
            pool_workers: running.pool_workers,
            estimates: running.sampled.estimates,
            pool_accepted: running.sampled.pool_accepted,
        })
    }

    fn drive(&self, running: &mut Running, lab_events: &EventSink) -> Result<Window, RunError> {
        let s = self.scenario;

        self.progress.stage("starting simnet");
        let log = running.file("simnet", None, None, Site::Pool);
        let with_tdp = s.specs().any(ConfigSpec::needs_template_provider);
        let two_nodes = s.two_nodes();
        let args = self.simnet_args(events_of(&log), with_tdp, two_nodes);
        let p = RoleProcess::spawn("simnet", self.exe, &args, &log.log)?;
        let simnet = running.add(p, log);
        // Among several nodes simnet prefixes each endpoint's line with its node.
        let pool_node = if two_nodes {
            format!("node {POOL_NODE}: ")
        } else {
            String::new()
        };
        let node = NodeEndpoints {
            rpc: simnet.wait_listening(&format!("{pool_node}rpc"), READY)?,
            zmq: simnet.wait_listening(&format!("{pool_node}zmq"), READY)?,
            tdp: if with_tdp {
                Some(simnet.wait_listening(&format!("{pool_node}tdp"), READY)?)
            } else {
                None
            },
            farm_tdp: if two_nodes {
                Some(simnet.wait_listening(&format!("node {FARM_NODE}: tdp"), READY)?)
            } else {
                None
            },
        };
        let token_key = if two_nodes {
            Some(self.write_token_key()?)
        } else {
            None
        };
        let values = self.external_values(&node);
        check_interrupt()?;

        // Pools first, then taps, then every fleet back to back: the fleets count their duration
        // from their own start, so they must start together (a pool waiting for its first
        // template would otherwise put seconds between the configurations' runs).
        let mut pools = Vec::new();
        for spec in s.specs() {
            let config = spec.name;
            self.progress.stage(&format!("starting {config}: pool"));
            let name = format!("{config}.pool");
            let mut log = running.file(&name, Some(RoleKind::Pool), Some(config), Site::Pool);
            let miners = match spec.pool {
                PoolImpl::OursSv1 | PoolImpl::OursSv2 => {
                    let mut args = self.pool_args(spec, &node, events_of(&log));
                    if let (true, Some(key)) = (spec.job_declaration, &token_key) {
                        args.extend(self::args(["--jd-token-key", &key.display().to_string()]));
                    }
                    let p = RoleProcess::spawn(&name, self.exe, &args, &log.log)?;
                    let pool = running.add(p, log);
                    let front = if spec.pool == PoolImpl::OursSv1 {
                        "sv1"
                    } else {
                        "sv2"
                    };
                    let miners = pool.wait_listening(front, READY)?;
                    let http = pool.wait_listening("http", READY)?;
                    wait_healthy(&name, http, READY)?;
                    running.endpoint(config, "pool", &name, http);
                    miners
                }
                PoolImpl::ReferenceSv2 => {
                    log.events = None;
                    let (program, args, miners, monitoring) = self.pool_sv2_args(config, &node)?;
                    let p = RoleProcess::spawn_as(&name, program, &args, &log.log, THIRD_PARTY)?;
                    running.add(p, log).wait_log(POOL_SV2_READY, READY)?;
                    running.endpoint(config, "pool_sv2", &name, monitoring);
                    miners
                }
                PoolImpl::External(_) => {
                    log.events = None;
                    let (def, e) = s
                        .external_pool_of(config)
                        .expect("an external pool configuration has its pool's definition");
                    self.start_external(running, log, &def, &e, values.clone())?
                }
            };
            // Job declaration: the JDS beside the pool, on the pool-side node's RPC.
            let jds = match (spec.job_declaration, &token_key) {
                (true, Some(key)) => {
                    self.progress.stage(&format!("starting {config}: JDS"));
                    let name = format!("{config}.jds");
                    let log = running.file(&name, Some(RoleKind::Pool), Some(config), Site::Pool);
                    let args = self.jds_args(&node, key, events_of(&log));
                    let p = RoleProcess::spawn(&name, self.exe, &args, &log.log)?;
                    let jds = running.add(p, log);
                    let listening = jds.wait_listening("jds", READY)?;
                    let http = jds.wait_listening("http", READY)?;
                    running.endpoint(config, "jds", &name, http);
                    Some(listening)
                }
                _ => None,
            };
            pools.push((spec, miners, jds));
            check_interrupt()?;
        }

        // Per device chunk, the WAN tap, then the farm proxy behind it if the configuration
        // has one: the address the chunk's devices connect to (their farm edge). With job
        // declaration, the JDC (and its own WAN tap to the JDS) and the intra-farm tap come
        // between the WAN tap and the proxy or devices.
        let mut edges = Vec::new();
        for &(spec, miners, jds) in &pools {
            let config = spec.name;
            for (i, devices) in s.device_chunks().into_iter().enumerate() {
                let mut tap = self.start_tap(running, config, Tap::ToPool(i), miners)?;
                if let Some(jds) = jds {
                    let farm = FarmNode {
                        tdp: node
                            .farm_tdp
                            .expect("simnet presents the farm node for job declaration"),
                    };
                    let chunk = Chunk { index: i, devices };
                    tap = self.start_jdc(running, spec, chunk, tap, jds, farm)?;
                }
                let Some(proxy) = spec.proxy else {
                    edges.push((spec, i, devices, tap));
                    continue;
                };
                let kind = match proxy {
                    ProxyImpl::OursSv1Proxy | ProxyImpl::External => "proxy",
                    ProxyImpl::OursTranslator
                    | ProxyImpl::OursTranslatorPerDevice
                    | ProxyImpl::OursTranslatorWorkers
                    | ProxyImpl::ReferenceTranslator => "translator",
                };
                self.progress
                    .stage(&format!("starting {config}: {kind} {i}"));
                let name = format!("{config}.{kind}{i}");
                let mut log = running.file(&name, Some(RoleKind::Proxy), Some(config), Site::Farm);
                let edge = match proxy {
                    ProxyImpl::OursTranslator
                    | ProxyImpl::OursTranslatorPerDevice
                    | ProxyImpl::OursTranslatorWorkers
                    | ProxyImpl::OursSv1Proxy => {
                        let args = self.proxy_args(proxy, tap, &name, events_of(&log));
                        let p = RoleProcess::spawn(&name, self.exe, &args, &log.log)?;
                        let role = running.add(p, log);
                        let listening = role.wait_listening("sv1", READY)?;
                        let http = role.wait_listening("http", READY)?;
                        running.endpoint(config, kind, &name, http);
                        listening
                    }
                    ProxyImpl::ReferenceTranslator => {
                        log.events = None;
                        let (program, args, listen, monitoring) =
                            self.translator_sv2_args(&name, tap)?;
                        let p =
                            RoleProcess::spawn_as(&name, program, &args, &log.log, THIRD_PARTY)?;
                        running
                            .add(p, log)
                            .wait_log(&format!("{TRANSLATOR_SV2_READY}{listen}"), READY)?;
                        running.endpoint(config, "translator_sv2", &name, monitoring);
                        listen
                    }
                    ProxyImpl::External => {
                        log.events = None;
                        let mut values = values.clone();
                        values.set_addr("upstream", "upstream_host", "upstream_port", tap);
                        // The key the pool behind it signs with: an external pool's own, else
                        // the trial's (our pools sign with it).
                        let upstream_key =
                            match s.external_pool_of(config) {
                                Some((_, pool)) => values
                                    .fill(&pool.authority_public_key)
                                    .map_err(|why| RunError::Unhealthy {
                                        role: name.clone(),
                                        why,
                                    })?,
                                None => self.authority.public.clone(),
                            };
                        values.set("upstream_authority_public_key", upstream_key);
                        let e = s
                            .external_of(config)
                            .expect("an external proxy configuration has its definition");
                        self.start_external(running, log, config, &e, values)?
                    }
                };
                edges.push((spec, i, devices, edge));
                check_interrupt()?;
            }
        }

        self.progress.stage("starting the fleets");
        let start_ns = events::now_ns();
        let mut fleets = Vec::new();
        let mut first_device = 0u64;
        for (spec, i, devices, edge) in edges {
            let name = format!("{}.fleet{i}", spec.name);
            let log = running.file(&name, Some(RoleKind::Fleet), Some(spec.name), Site::Farm);
            let args =
                self.fleet_args(spec, edge, devices, first_device, events_of(&log), &values)?;
            first_device += u64::from(devices);
            let p = RoleProcess::spawn(&name, self.exe, &args, &log.log)?;
            running.add(p, log);
            fleets.push(running.roles.len() - 1);
        }
        self.progress.started(&running.logs, &running.endpoints);
        check_interrupt()?;

        mark(lab_events, start_ns, "run_start");
        let started = Instant::now();
        let warmup_end_ns = start_ns + s.warmup().as_nanos() as u64;
        let drain_start_ns = start_ns + s.duration.as_nanos() as u64;
        let mut pending_marks = vec![
            (warmup_end_ns, "warmup_end"),
            (drain_start_ns, "drain_start"),
        ];
        let mut last_tick = Instant::now() - Duration::from_secs(1);
        let estimates = EstimateSampler::start(running.endpoints.clone(), drain_start_ns);
        // The fleets stop themselves after the duration and the drain; allow them a margin.
        let deadline = started + s.duration + s.drain + Duration::from_secs(30);
        loop {
            check_interrupt()?;
            let now_ns = events::now_ns();
            pending_marks.retain(|&(at_ns, name)| {
                let due = now_ns >= at_ns;
                if due {
                    mark(lab_events, at_ns, name);
                }
                !due
            });
            // Any role but a finished fleet exiting is a crash.
            let mut fleets_done = 0;
            for (i, p) in running.roles.iter_mut().enumerate() {
                let Some(status) = p.exited() else { continue };
                let is_fleet = fleets.contains(&i);
                if is_fleet && status.success() && now_ns >= drain_start_ns {
                    fleets_done += 1;
                    continue;
                }
                return Err(RunError::RoleDied {
                    role: p.name.clone(),
                    status: describe(status),
                    log: p.log_path().display().to_string(),
                    tail: p.log_tail(15),
                });
            }
            if fleets_done == fleets.len() {
                break;
            }
            if Instant::now() > deadline {
                let late: Vec<String> = fleets
                    .iter()
                    .filter_map(|&i| {
                        let p = &mut running.roles[i];
                        p.exited().is_none().then(|| p.name.clone())
                    })
                    .collect();
                return Err(RunError::RoleFailed {
                    role: late.join(", "),
                    status: "still running after the duration and drain".into(),
                    log: String::new(),
                    tail: String::new(),
                });
            }
            if last_tick.elapsed() >= Duration::from_millis(500) {
                last_tick = Instant::now();
                let shares = running
                    .endpoints
                    .iter()
                    .filter(|e| e.role == "pool")
                    .map(|e| (e.config.clone(), pool_counts(e.addr).unwrap_or_default()))
                    .collect();
                self.progress.tick(started.elapsed(), s.duration, &shares);
                self.progress.roles(&running.sampler.latest());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        running.sampled = estimates.finish();
        let end_ns = events::now_ns();
        mark(lab_events, end_ns, "run_end");
        // A reference pool accounts shares per channel: its channels with a share accepted.
        running.pool_workers = running
            .endpoints
            .iter()
            .filter_map(|e| match e.role {
                "pool" => Some((e.config.clone(), credited_workers(e.addr)?.len() as u64)),
                "pool_sv2" => {
                    let channels = crate::estimates::reference_channels(e.addr)?;
                    let credited = channels.iter().filter(|c| c.accepted > 0.0).count();
                    Some((e.config.clone(), credited as u64))
                }
                _ => None,
            })
            .collect();
        self.progress.stage("stopping roles");
        // Stop in order while they are healthy: taps and pools flush their events on SIGTERM.
        let stopped = running.stop_all(Duration::from_secs(15));
        for s in stopped {
            if !s.clean {
                return Err(s.failure());
            }
        }
        Ok(Window {
            start_ns,
            warmup_end_ns,
            drain_start_ns,
            end_ns,
        })
    }

    /// For one device chunk of a job-declaring configuration: a WAN tap to the JDS, the JDC
    /// (upstream through `pool_tap` and that tap, templates from the farm node), and the
    /// intra-farm tap in front of it, whose address is returned (where the proxy or the devices
    /// connect).
    fn start_jdc(
        &self,
        running: &mut Running,
        spec: ConfigSpec,
        chunk: Chunk,
        pool_tap: SocketAddr,
        jds: SocketAddr,
        farm: FarmNode,
    ) -> Result<SocketAddr, RunError> {
        let config = spec.name;
        let i = chunk.index;
        let jds_tap = self.start_tap(running, config, Tap::ToJds(i), jds)?;

        self.progress.stage(&format!("starting {config}: JDC {i}"));
        let name = format!("{config}.jdc{i}");
        let log = running.file(&name, Some(RoleKind::Proxy), Some(config), Site::Farm);
        let args = self.jdc_args(&name, chunk, pool_tap, jds_tap, farm, events_of(&log));
        let p = RoleProcess::spawn(&name, self.exe, &args, &log.log)?;
        let jdc = running.add(p, log);
        let downstream = jdc.wait_listening("sv2", READY)?;
        let http = jdc.wait_listening("http", READY)?;
        wait_healthy(&name, http, READY)?;
        running.endpoint(config, "jdc", &name, http);
        check_interrupt()?;

        self.start_tap(running, config, Tap::InFarm(i), downstream)
    }

    /// Starts `tap` of `config` in front of `upstream` and returns where it listens, once it
    /// does.
    fn start_tap(
        &self,
        running: &mut Running,
        config: &str,
        tap: Tap,
        upstream: SocketAddr,
    ) -> Result<SocketAddr, RunError> {
        let (what, name) = match tap {
            Tap::ToPool(i) => (format!("WAN tap {i}"), format!("{config}.tap{i}")),
            Tap::ToJds(i) => (format!("JDS WAN tap {i}"), format!("{config}.jds-tap{i}")),
            Tap::InFarm(i) => (format!("intra-farm tap {i}"), format!("{config}.lan{i}")),
        };
        self.progress.stage(&format!("starting {config}: {what}"));
        // A WAN tap stands at the pool's end of the link, an intra-farm tap in the farm.
        let site = match tap.link() {
            Link::Wan => Site::Pool,
            Link::Lan => Site::Farm,
        };
        let log = running.file(&name, Some(RoleKind::Tap), Some(config), site);
        let args = self.tap_args(upstream, events_of(&log), tap.seed(), tap.link());
        let p = RoleProcess::spawn(&name, self.exe, &args, &log.log)?;
        let listening = running.add(p, log).wait_listening("tap", READY)?;
        check_interrupt()?;
        Ok(listening)
    }

    /// The job token key the pool and the JDS share, one per trial: 64 hex digits.
    fn write_token_key(&self) -> Result<PathBuf, RunError> {
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut key))
            .map_err(io("reading /dev/urandom for the job token key"))?;
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let path = self.dir.join("jd-token.key");
        std::fs::write(&path, hex + "\n").map_err(io(format!("writing {}", path.display())))?;
        Ok(path)
    }

    fn jds_args(&self, node: &NodeEndpoints, token_key: &Path, events: &Path) -> Vec<OsString> {
        args(["jds", "--listen", "127.0.0.1:0"])
            .into_iter()
            .chain(node.rpc_args())
            .chain(args([
                "--jd-token-key",
                &token_key.display().to_string(),
                "--payout-address",
                PAYOUT_ADDRESS,
                "--http-listen",
                "127.0.0.1:0",
                "--events",
                &events.display().to_string(),
            ]))
            .chain(self.authority.server_args())
            .collect()
    }

    /// `stratumlab jdc` for one device chunk: the farm's templates, the pool and the JDS
    /// across the WAN taps, and the pool's difficulty settings toward its downstream, so that
    /// the farm edge compares with the other configurations. Its upstream channel claims the
    /// chunk's real hash rate.
    fn jdc_args(
        &self,
        name: &str,
        chunk: Chunk,
        pool: SocketAddr,
        jds: SocketAddr,
        farm: FarmNode,
        events: &Path,
    ) -> Vec<OsString> {
        let s = self.scenario;
        let chunk_hps = self.device_hash_rate() * f64::from(chunk.devices);
        args([
            "jdc",
            "--sv2-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--tp",
            &farm.tdp.to_string(),
            "--tp-authority-key",
            &self.authority.public,
            "--upstream",
            &pool.to_string(),
            "--upstream-authority-key",
            &self.authority.public,
            "--jds",
            &jds.to_string(),
            "--jds-authority-key",
            &self.authority.public,
            "--user-identity",
            &format!("lab.{name}"),
            "--nominal-hash-rate",
            &format!("{chunk_hps}"),
            "--start-difficulty",
            &format!("{}", s.start_difficulty().as_f64()),
            "--shares-per-minute",
            &s.shares_per_minute.to_string(),
            "--events",
            &events.display().to_string(),
        ])
        .into_iter()
        .chain(self.authority.server_args())
        .chain(self.edge_args())
        .collect()
    }

    fn simnet_args(&self, events: &Path, with_tdp: bool, two_nodes: bool) -> Vec<OsString> {
        let s = self.scenario;
        // Two nodes: the pool-side one serves the pools (and the JDS) as the single node
        // does; the farm-side one, a relay delay further from the network, serves the JDCs.
        let at = |node: &str| {
            if two_nodes {
                format!("{node}=127.0.0.1:0")
            } else {
                "127.0.0.1:0".to_owned()
            }
        };
        let mut a = args([
            "simnet",
            "--seed",
            &self.seed.to_string(),
            "--network-difficulty",
            &format!("{}", s.network_difficulty().as_f64()),
            "--block-interval",
            &dur(s.block_interval),
            "--template-interval",
            &dur(s.template_interval),
            "--rpc-user",
            "lab",
            "--rpc-password",
            "lab",
            "--events",
            &events.display().to_string(),
        ]);
        if two_nodes {
            a.extend(args([
                "--node",
                POOL_NODE,
                "--node",
                FARM_NODE,
                "--relay-delay",
                &format!("{FARM_NODE}={}", dur(s.farm_relay_delay)),
                "--tdp-listen",
                &at(FARM_NODE),
            ]));
        }
        a.extend(args([
            "--rpc-listen",
            &at(POOL_NODE),
            "--zmq-listen",
            &at(POOL_NODE),
        ]));
        if with_tdp {
            // The Template Provider signs with the trial's authority key, and refreshes
            // templates at the same --template-interval as the SV1 pool.
            a.extend(args(["--tdp-listen", &at(POOL_NODE)]));
            a.extend(self.authority.server_args());
        }
        a
    }

    fn pool_args(&self, spec: ConfigSpec, node: &NodeEndpoints, events: &Path) -> Vec<OsString> {
        let s = self.scenario;
        let config = spec.name;
        let mut a = match (spec.pool, node.tdp) {
            (PoolImpl::OursSv2, Some(tdp)) => args([
                "pool",
                "--sv2-listen",
                "127.0.0.1:0",
                "--tp",
                &tdp.to_string(),
                "--tp-authority-key",
                &self.authority.public,
                "--authority-key-file",
                &self.authority.path.display().to_string(),
            ]),
            _ => args(["pool", "--sv1-listen", "127.0.0.1:0"])
                .into_iter()
                .chain(node.rpc_args())
                .chain(args([
                    "--zmq",
                    &node.zmq.to_string(),
                    "--template-interval",
                    &dur(s.template_interval),
                ]))
                .collect(),
        };
        a.extend(args([
            "--http-listen",
            "127.0.0.1:0",
            "--payout-address",
            PAYOUT_ADDRESS,
            "--start-difficulty",
            &format!("{}", s.start_difficulty().as_f64()),
            "--shares-per-minute",
            &s.shares_per_minute.to_string(),
            "--store",
            &self
                .dir
                .join(format!("{config}.pool.sqlite"))
                .display()
                .to_string(),
            "--durability",
            POOL_DURABILITY,
            "--events",
            &events.display().to_string(),
        ]));
        if spec.channel_per_device() {
            // Each device chunk's translator opens a channel per device on its one connection.
            let chunk = s.device_chunks().into_iter().max().unwrap_or(0) as usize;
            a.extend(args([
                "--sv2-max-channels",
                &chunk.max(SV2_DEFAULT_MAX_CHANNELS).to_string(),
            ]));
        }
        a.extend(self.edge_args());
        a
    }

    /// pool_sv2 with a config the lab writes: its program, arguments, miner address, and
    /// monitoring address (where the lab reads its estimates).
    fn pool_sv2_args(
        &self,
        config: &str,
        node: &NodeEndpoints,
    ) -> Result<(&Path, Vec<OsString>, SocketAddr, SocketAddr), RunError> {
        let tool = located(
            self.pool_sv2,
            &format!("{config}.pool"),
            "the SV2 reference pool (pool_sv2)",
        )?;
        let tdp = node
            .tdp
            .expect("simnet serves TDP when a configuration needs it");
        let listen = free_loopback_port().map_err(io("finding a port for pool_sv2"))?;
        let monitoring = free_loopback_port().map_err(io("finding a port for pool_sv2"))?;
        let text = PoolSv2Config {
            listen,
            authority_public_key: &self.authority.public,
            authority_secret_key: &self.authority.secret,
            template_provider: tdp,
            payout_address: PAYOUT_ADDRESS,
            shares_per_minute: self.scenario.shares_per_minute,
            extensions: &[],
            monitoring: Some(monitoring),
        }
        .toml();
        let (program, args) = self.with_config(tool, &format!("{config}.pool_sv2.toml"), text)?;
        Ok((program, args, listen, monitoring))
    }

    /// `stratumlab translator` (or `proxy`) for one device chunk, upstream through its WAN
    /// tap. Devices start at the SV1 pool's difficulty and vardiff aims at the same share
    /// rate, so that the farm edge compares with sv1; each device counts as the hash rate the
    /// fleet gives it, so the channel's nominal hash rate (their sum) sets the pool's target
    /// for the channel (SV2; an SV1 pool finds it by vardiff).
    fn proxy_args(
        &self,
        proxy: ProxyImpl,
        upstream: SocketAddr,
        name: &str,
        events: &Path,
    ) -> Vec<OsString> {
        let s = self.scenario;
        let mut a = match proxy {
            ProxyImpl::OursSv1Proxy => args(["proxy"]),
            _ => args([
                "translator",
                "--upstream-authority-key",
                &self.authority.public,
            ]),
        };
        a.extend(args([
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream.to_string(),
            "--user-identity",
            &format!("lab.{name}"),
            "--start-difficulty",
            &format!("{}", s.start_difficulty().as_f64()),
            "--shares-per-minute",
            &s.shares_per_minute.to_string(),
            "--device-hash-rate",
            &format!("{}", self.device_hash_rate()),
            "--http-listen",
            "127.0.0.1:0",
            "--events",
            &events.display().to_string(),
        ]));
        match proxy {
            ProxyImpl::OursTranslatorPerDevice => a.extend(args(["--channels", "per-device"])),
            ProxyImpl::OursTranslatorWorkers => a.extend(args(["--worker-tracking"])),
            _ => {}
        }
        a.extend(self.edge_args());
        a
    }

    /// translator_sv2 for one device chunk with a config the lab writes: its program,
    /// arguments, the address devices connect to, and its monitoring address.
    fn translator_sv2_args(
        &self,
        role: &str,
        upstream: SocketAddr,
    ) -> Result<(&Path, Vec<OsString>, SocketAddr, SocketAddr), RunError> {
        let tool = located(
            self.translator_sv2,
            role,
            "the SV2 reference translator (translator_sv2)",
        )?;
        let listen = free_loopback_port().map_err(io("finding a port for translator_sv2"))?;
        let monitoring = free_loopback_port().map_err(io("finding a port for translator_sv2"))?;
        let text = TranslatorSv2Config {
            listen,
            upstream,
            authority_public_key: &self.authority.public,
            user_identity: &format!("lab.{role}"),
            device_hash_rate: self.device_hash_rate(),
            shares_per_minute: self.scenario.shares_per_minute,
            aggregate_channels: true,
            extranonce2_size: 4,
            extensions: &[],
            monitoring: Some(monitoring),
        }
        .toml();
        let (program, args) =
            self.with_config(tool, &format!("{role}.translator_sv2.toml"), text)?;
        Ok((program, args, listen, monitoring))
    }

    /// A reference role's program and its command line: `-c` and the config `text`, written as
    /// `file` in the run's directory.
    fn with_config<'t>(
        &self,
        tool: &'t Tool,
        file: &str,
        text: String,
    ) -> Result<(&'t Path, Vec<OsString>), RunError> {
        let path = self.dir.join(file);
        std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
        Ok((&tool.path, vec!["-c".into(), path.into()]))
    }

    /// The connection edge's limits for a role the lab's devices reach: every device of the
    /// run comes from one loopback address (or a few), so the per-address cap and the connect
    /// burst must hold all of them twice over (a reconnect wave overlaps the connections it
    /// replaces), and the connect rate must not be what paces a ramp. The edge's defaults suit
    /// an operator's pool, not a lab run of any size (docs/operations.md).
    fn edge_args(&self) -> Vec<OsString> {
        let n = (2 * u64::from(self.scenario.devices) + 100)
            .max(15_000)
            .to_string();
        args([
            "--max-connections",
            &n,
            "--max-connections-per-ip",
            &n,
            "--connect-burst",
            &n,
            "--connect-rate",
            "100000",
        ])
    }

    /// The real hashes per second one device spends (the fleet splits its budget evenly).
    fn device_hash_rate(&self) -> f64 {
        let s = self.scenario;
        s.hash_budget.hashes_per_sec() / f64::from(s.devices)
    }

    fn tap_args(
        &self,
        upstream: SocketAddr,
        events: &Path,
        index: u64,
        link: Link,
    ) -> Vec<OsString> {
        let s = self.scenario;
        let half = match link {
            Link::Wan => s.rtt / 2,
            Link::Lan => s.lan_rtt / 2,
        };
        let mut a = args([
            "tap",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream.to_string(),
            "--delay-up",
            &dur(half),
            "--delay-down",
            &dur(half),
            "--link",
            link.name(),
            "--seed",
            // Below 2^63: a TOML integer, as the roles' flags are serialized.
            &((self.seed ^ (index << 32)) & (u64::MAX >> 1)).to_string(),
            "--events",
            &events.display().to_string(),
        ]);
        if link == Link::Lan {
            // Jitter, loss and the cap are the WAN's.
            return a;
        }
        if !s.jitter.is_zero() {
            a.extend(args(["--jitter", &dur(s.jitter)]));
        }
        if s.loss_pct > 0.0 {
            a.extend(args(["--loss", &s.loss_pct.to_string()]));
        }
        if s.bandwidth_bps > 0 {
            // Each tap carries its share of the devices: the cap is split alike.
            let share = s.bandwidth_bps / s.device_chunks().len() as u64;
            a.extend(args(["--bandwidth", &share.max(1).to_string()]));
        }
        a
    }

    fn fleet_args(
        &self,
        spec: ConfigSpec,
        pool: SocketAddr,
        devices: u32,
        first_device: u64,
        events: &Path,
        values: &Values,
    ) -> Result<Vec<OsString>, RunError> {
        let s = self.scenario;
        let config = spec.name;
        let budget = s.hash_budget.hashes_per_sec() * f64::from(devices) / f64::from(s.devices);
        let external = s.external_of(config);
        let bad = |why: String| RunError::Unhealthy {
            role: format!("{config}.fleet"),
            why,
        };
        // An external role's own worker names (solo pools want an address).
        let worker = match &external {
            Some(e) => {
                let prefix = e.worker.strip_suffix("{device}").unwrap_or(&e.worker);
                values.fill(prefix).map_err(bad)?
            }
            None => format!("lab.{config}."),
        };
        let mut a = args([
            "fleet",
            "--pool",
            &pool.to_string(),
            "--devices",
            &devices.to_string(),
            "--hash-budget",
            &format!("{budget}"),
            "--profile",
            s.profile.as_str(),
            "--worker",
            &worker,
            "--duration",
            &dur(s.duration),
            "--drain",
            &dur(s.drain),
            "--seed",
            &(self.seed.wrapping_add(first_device)).to_string(),
            "--first-device-id",
            &first_device.to_string(),
            "--events",
            &events.display().to_string(),
        ]);
        for step in &s.hash_rate_steps {
            a.extend(args(["--hash-rate-step", &step.to_string()]));
        }
        let mut authority = self.authority.public.clone();
        if let Some(e) = external {
            // An outside SV1 role cannot be told the devices' hash rate: they suggest the
            // difficulty the scenario's share rate needs, as firmware that knows its hash rate
            // does.
            authority = values.fill(&e.authority_public_key).map_err(bad)?;
            if spec.devices == DeviceProtocol::Sv1 {
                a.extend(args([
                    "--suggest-difficulty",
                    &format!("{}", s.start_difficulty().as_f64()),
                ]));
            }
        }
        if spec.devices == DeviceProtocol::Sv2 {
            // Each device claims what it really hashes as its nominal hash rate (the fleet's
            // default), so the pool's first target gives the scenario's share rate.
            a.extend(args(["--protocol", "sv2", "--authority-key", &authority]));
        }
        Ok(a)
    }

    /// What an external configuration's placeholders take in this trial (all but `{dir}`,
    /// `{listen}` and `{upstream}`, which are per role).
    fn external_values(&self, node: &NodeEndpoints) -> Values {
        let s = self.scenario;
        let mut v = Values::default();
        v.set_addr("rpc", "rpc_host", "rpc_port", node.rpc);
        v.set_addr("zmq", "zmq_host", "zmq_port", node.zmq);
        if let Some(tdp) = node.tdp {
            v.set_addr("tdp", "tdp_host", "tdp_port", tdp);
        }
        v.set("rpc_user", "lab");
        v.set("rpc_password", "lab");
        v.set("authority_public_key", self.authority.public.clone());
        v.set("authority_secret_key", self.authority.secret.clone());
        v.set("payout_address", PAYOUT_ADDRESS);
        v.set("chain", "regtest");
        v.set(
            "start_difficulty",
            format!("{}", s.start_difficulty().as_f64()),
        );
        v.set("shares_per_minute", format!("{}", s.shares_per_minute));
        v.set(
            "share_interval_s",
            format!("{}", 60.0 / s.shares_per_minute),
        );
        v.set(
            "template_interval_s",
            format!("{}", s.template_interval.as_secs_f64()),
        );
        v.set(
            "template_interval_whole_s",
            s.template_interval
                .as_secs_f64()
                .ceil()
                .max(1.0)
                .to_string(),
        );
        v.set("device_hash_rate", format!("{}", self.device_hash_rate()));
        v.set("devices", s.devices.to_string());
        v
    }

    /// Starts an external role, `e` as definition `def` gives it (a configuration's pool, or
    /// one chunk's proxy), in a directory of its own with its files written and placeholders
    /// filled, and waits until it is ready. Returns where it listens for the devices' side.
    fn start_external(
        &self,
        running: &mut Running,
        log: RoleFile,
        def: &str,
        e: &External,
        mut values: Values,
    ) -> Result<SocketAddr, RunError> {
        let name = log.name.clone();
        let bad = |why: String| RunError::Unhealthy {
            role: name.clone(),
            why,
        };
        // Afresh: a reused --out must not hand it the last run's store, sockets or logs.
        let dir = self.dir.join("external").join(&name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io(format!("clearing {}", dir.display())))?;
        }
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let dir = std::path::absolute(&dir).map_err(io(format!("resolving {}", dir.display())))?;
        values.set("dir", dir.display().to_string());
        let port = crate::third_party::free_loopback_port()
            .map_err(io(format!("finding a port for {name}")))?;
        values.set_addr("listen", "listen_host", "listen_port", port);
        let listen_text = values.fill(&e.listen).map_err(bad)?;
        let listen = external::check_listen(def, &listen_text).map_err(|e| bad(e.to_string()))?;
        for (file, text) in &e.files {
            let path = dir.join(file);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(io(format!("creating {}", parent.display())))?;
            }
            let text = values.fill(text).map_err(bad)?;
            std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
        }
        let filled = e
            .command
            .iter()
            .map(|a| values.fill(a))
            .collect::<Result<Vec<String>, String>>()
            .map_err(bad)?;
        // A program located before the run (by name, or a pinned tool) is started by its path;
        // one whose path holds placeholders is known only now. Absolute either way: the role
        // runs in its own directory.
        let program = match self.externals.get(def) {
            Some(tool) => tool.path.clone(),
            None => {
                std::path::absolute(&filled[0]).map_err(io(format!("resolving {}", filled[0])))?
            }
        };
        let args: Vec<OsString> = filled[1..].iter().map(OsString::from).collect();
        let env = e
            .env
            .iter()
            .map(|(k, v)| Ok((k.clone(), values.fill(v)?)))
            .collect::<Result<Vec<_>, String>>()
            .map_err(bad)?;
        self.progress.stage(&format!(
            "starting {name}: {} (external)",
            external::describe(&program, &args, &values.secrets())
        ));
        let p = RoleProcess::spawn_as(
            &name,
            &program,
            &args,
            &log.log,
            Launch {
                dir: Some(&dir),
                env: &env,
                ..THIRD_PARTY
            },
        )?;
        let role = running.add(p, log);
        if e.ready_on_port() {
            role.wait_port(listen, READY)?;
        } else {
            role.wait_log(&values.fill(&e.ready).map_err(bad)?, READY)?;
        }
        Ok(listen)
    }
}

impl Stopped {
    fn failure(self) -> RunError {
        let tail = tail_of(Path::new(&self.log), 15);
        RunError::RoleFailed {
            role: self.role,
            status: describe(self.status),
            log: self.log,
            tail,
        }
    }
}

/// Where simnet serves the job sources: the pool-side node's endpoints (the single node's when
/// simnet presents one), and the farm-side node's Template Provider when it presents two.
struct NodeEndpoints {
    rpc: SocketAddr,
    zmq: SocketAddr,
    /// The SV2 Template Provider, when a configuration needs one.
    tdp: Option<SocketAddr>,
    farm_tdp: Option<SocketAddr>,
}

impl NodeEndpoints {
    /// How a role reaches the node's RPC: its address and the credentials simnet is started
    /// with.
    fn rpc_args(&self) -> Vec<OsString> {
        args([
            "--node-rpc",
            &format!("http://{}", self.rpc),
            "--rpc-user",
            "lab",
            "--rpc-password",
            "lab",
        ])
    }
}

/// A tap of one device chunk (its index), by where it stands.
#[derive(Clone, Copy)]
enum Tap {
    /// On the WAN link to the pool.
    ToPool(usize),
    /// On the WAN link from the chunk's JDC to the JDS.
    ToJds(usize),
    /// On the farm's LAN, in front of the chunk's JDC.
    InFarm(usize),
}

impl Tap {
    fn link(self) -> Link {
        match self {
            Tap::ToPool(_) | Tap::ToJds(_) => Link::Wan,
            Tap::InFarm(_) => Link::Lan,
        }
    }

    /// Apart from every other tap's of the trial, so that no two links drop or delay alike;
    /// small, as flags are.
    fn seed(self) -> u64 {
        match self {
            Tap::ToPool(i) => i as u64,
            Tap::ToJds(i) => 1_000 + i as u64,
            Tap::InFarm(i) => 2_000 + i as u64,
        }
    }
}

/// One device chunk: its index and device count.
#[derive(Clone, Copy)]
struct Chunk {
    index: usize,
    devices: u32,
}

/// The farm-side node, as a JDC uses it.
#[derive(Clone, Copy)]
struct FarmNode {
    tdp: SocketAddr,
}

/// The links a tap emulates.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Link {
    /// Farm site to pool site: `--rtt`, jitter, loss, bandwidth cap.
    Wan,
    /// Inside the farm site (a JDC to its proxy or devices): `--lan-rtt`.
    Lan,
}

impl Link {
    fn name(self) -> &'static str {
        match self {
            Link::Wan => WAN_LINK,
            Link::Lan => LAN_LINK,
        }
    }
}

/// Marks a moment of the run in the lab's own event file.
fn mark(lab_events: &EventSink, at_ns: u64, name: &str) {
    lab_events.emit_at(
        at_ns,
        events::Mark {
            name: events::ShortStr::new(name),
        },
    );
}

/// A reference role the lab located before the run, or an error for `role` naming `what`.
fn located<'t>(tool: Option<&'t Tool>, role: &str, what: &str) -> Result<&'t Tool, RunError> {
    tool.ok_or_else(|| RunError::Unhealthy {
        role: role.to_owned(),
        why: format!("{what} was not located before the run"),
    })
}

/// The events file of one of our own roles (third-party roles have none and get no flag).
fn events_of(log: &RoleFile) -> &Path {
    log.events.as_deref().expect("our own roles write events")
}

/// Our pools' `--durability` in the lab: shares are still stored, but acknowledged without
/// waiting for a group commit, because the lab measures the protocols, not this machine's fsync
/// (the reference pool stores nothing); an operator's choice of durability is theirs.
pub const POOL_DURABILITY: &str = "off";

/// The WAN link's name in tap events.
pub const WAN_LINK: &str = "wan";
/// The intra-farm link's name in tap events.
pub const LAN_LINK: &str = "lan";

/// What simnet calls a node's link (`rpc`, `zmq`, `tdp`, `peer`) in `LinkBytes`: the bare name
/// when it presents one node, "NODE/link" among several.
pub fn simnet_link(two_nodes: bool, node: &str, link: &str) -> String {
    if two_nodes {
        format!("{node}/{link}")
    } else {
        link.to_owned()
    }
}

fn args<const N: usize>(a: [&str; N]) -> Vec<OsString> {
    a.iter().map(OsString::from).collect()
}

/// A duration as the roles' flags take it (`72.5ms`, `10s`).
fn dur(d: Duration) -> String {
    if d.is_zero() {
        return "0".into();
    }
    if Duration::from_millis(d.as_millis() as u64) == d {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

fn check_interrupt() -> Result<(), RunError> {
    match stop::requested() {
        Some(sig) => Err(RunError::Interrupted(sig)),
        None => Ok(()),
    }
}

fn tail_of(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A minimal HTTP/1.0 GET on loopback, for the roles' status endpoints.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_owned()))
}

fn wait_healthy(role: &str, http: SocketAddr, timeout: Duration) -> Result<(), RunError> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        check_interrupt()?;
        match http_get(http, "/healthz") {
            Ok((200, _)) => return Ok(()),
            Ok((code, body)) => last = format!("/healthz {code}: {}", body.trim()),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(RunError::Unhealthy {
        role: role.to_owned(),
        why: last,
    })
}

/// The workers our pool at `http` has credited with at least one accepted share, with their
/// accepted counts; `None` if it does not answer.
pub fn credited_workers(http: SocketAddr) -> Option<BTreeMap<String, u64>> {
    Some(
        workers_list(http)?
            .iter()
            .filter_map(|w| match (w["name"].as_str(), w["accepted"].as_u64()) {
                (Some(name), Some(n @ 1..)) => Some((name.to_owned(), n)),
                _ => None,
            })
            .collect(),
    )
}

/// Every entry of our pool's `/api/workers`, over its pages; `None` if it does not answer.
pub fn workers_list(http: SocketAddr) -> Option<Vec<serde_json::Value>> {
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let (200, body) =
            http_get(http, &format!("/api/workers?offset={offset}&limit=1000")).ok()?
        else {
            return None;
        };
        let mut v: serde_json::Value = serde_json::from_str(&body).ok()?;
        all.extend(v["workers"].as_array_mut().map(std::mem::take)?);
        match v["next_offset"].as_u64() {
            Some(next) if next > offset => offset = next,
            _ => return Some(all),
        }
    }
}

fn pool_counts(http: SocketAddr) -> Option<ShareCounts> {
    let (200, body) = http_get(http, "/api/status").ok()? else {
        return None;
    };
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(ShareCounts {
        accepted: v["shares"]["accepted"].as_u64()?,
        rejected: v["shares"]["rejected"].as_u64()?,
        blocks: v["blocks"]["accepted"].as_u64().unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_as_the_roles_parse_them() {
        assert_eq!(dur(Duration::from_micros(72_500)), "72500us");
        assert_eq!(dur(Duration::from_millis(145)), "145ms");
        assert_eq!(dur(Duration::from_secs(10)), "10000ms");
        assert_eq!(dur(Duration::ZERO), "0");
    }
}
