//! What the CLI tests share: `stratumlab` roles run as child processes by the lab's process
//! harness, and the requests tests make of them.

#![allow(dead_code)]

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lab::process::{Launch, RoleProcess, THIRD_PARTY};

/// A `stratumlab` role run by the lab's process harness ([`RoleProcess`]), its stdout read
/// in order, its log in a file removed with it.
pub struct Role {
    process: RoleProcess,
    log: tempfile::TempPath,
}

impl Role {
    pub fn start(subcommand: &str, args: &[&str]) -> Role {
        Role::start_with_env(subcommand, args, &[])
    }

    /// As [`Role::start`], for a role on simnet's RPC at `rpc`: [`node_args`], then `args`.
    pub fn start_on_node(subcommand: &str, rpc: &str, args: &[&str]) -> Role {
        let node = node_args(rpc);
        let all: Vec<&str> = node
            .iter()
            .map(String::as_str)
            .chain(args.iter().copied())
            .collect();
        Role::start(subcommand, &all)
    }

    /// As [`Role::start`], with these environment variables set.
    pub fn start_with_env(subcommand: &str, args: &[&str], env: &[(&str, &str)]) -> Role {
        let log = tempfile::NamedTempFile::new().unwrap().into_temp_path();
        let args: Vec<OsString> = std::iter::once(subcommand)
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let process = RoleProcess::spawn_as(
            subcommand,
            Path::new(env!("CARGO_BIN_EXE_stratumlab")),
            &args,
            &log,
            Launch {
                env: &env,
                ..Launch::default()
            },
        )
        .unwrap();
        Role { process, log }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Everything the role logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines the role logged.
    pub fn log_tail(&self) -> String {
        // The last 30 lines, or as many as STRATUMLAB_TEST_LOG_LINES says when a failure needs
        // the whole story.
        let keep = std::env::var("STRATUMLAB_TEST_LOG_LINES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(30);
        self.process.log_tail(keep)
    }

    /// Waits for a stdout line starting with `prefix` and returns the rest.
    pub fn line(&self, prefix: &str) -> String {
        loop {
            let l = self
                .next_line(Duration::from_secs(20))
                .expect("the role printed nothing more");
            if let Some(rest) = l.strip_prefix(prefix) {
                return rest.trim().to_owned();
            }
        }
    }

    /// Waits until a stdout line has started with each of `prefixes` (in any order) and
    /// returns the rest of each line by its prefix.
    pub fn lines_starting(&self, prefixes: &[&str]) -> std::collections::HashMap<String, String> {
        let mut got = std::collections::HashMap::new();
        while got.len() < prefixes.len() {
            let l = self
                .next_line(Duration::from_secs(20))
                .expect("the role printed nothing more");
            if let Some(p) = prefixes.iter().find(|p| l.starts_with(**p)) {
                got.insert((*p).to_owned(), l[p.len()..].trim().to_owned());
            }
        }
        got
    }

    fn next_line(&self, limit: Duration) -> Option<String> {
        self.process.next_line(limit)
    }

    /// Sends `signal`; the role stays.
    pub fn signal(&mut self, signal: i32) {
        self.process.signal(signal);
    }

    /// SIGTERM, then waits: the role must exit successfully.
    fn stop_cleanly(&mut self) {
        let status = self.process.stop(Duration::from_secs(120));
        assert!(status.success(), "exit {status:?}\n{}", self.log_tail());
    }

    /// SIGTERM, then waits: the role must exit successfully. Returns what it printed since.
    pub fn stop(mut self) -> Vec<String> {
        self.stop_cleanly();
        // The last lines may still be on their way from the pipe (bounded, should a child of
        // the role hold it open).
        let mut out = Vec::new();
        while let Some(l) = self.next_line(Duration::from_secs(10)) {
            out.push(l);
        }
        out
    }

    /// As [`Role::stop`], then everything it logged (a summary it prints as it stops).
    pub fn stop_for_log(mut self) -> String {
        self.stop_cleanly();
        self.log()
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill9(mut self) {
        self.process.signal(libc::SIGKILL);
        let _ = self.process.wait_done(Duration::from_secs(10));
    }

    /// Waits for the role to end by itself, up to `limit`.
    pub fn wait_done(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        self.process.wait_done(limit)
    }
}

/// A free port on loopback, for a role that must come back on the same address.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One GET: the status code and the body.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text}"));
    let body = text.split_once("\r\n\r\n").expect("an HTTP response").1;
    (code, body.to_owned())
}

/// One GET whose body is JSON.
pub fn http_get_json(addr: &str, path: &str) -> serde_json::Value {
    let (_, body) = http_get(addr, path);
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Our pool's workers (at its HTTP address) credited with an accepted share: name, shares.
pub fn credited_workers(addr: &str) -> std::collections::BTreeMap<String, u64> {
    lab::orchestrate::credited_workers(addr.parse().unwrap())
        .unwrap_or_else(|| panic!("no worker list from {addr}"))
}

/// Runs the fleet to its end (bounded by `limit`) and returns its JSON report.
pub fn run_fleet(args: &[&str], limit: Duration) -> serde_json::Value {
    let mut fleet = Role::start("fleet", args);
    let Some(status) = fleet.wait_done(limit) else {
        let log = fleet.log_tail();
        fleet.kill9();
        panic!("the fleet did not finish within {limit:?}\n{log}");
    };
    assert!(
        status.success(),
        "fleet exit {status:?}\n{}",
        fleet.log_tail()
    );
    let mut text = String::new();
    while let Some(l) = fleet.next_line(Duration::from_secs(10)) {
        text.push_str(&l);
        text.push('\n');
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Runs the fleet in a thread (to its end, bounded by `limit`): `devices` devices on `pool`
/// hashing `hash_budget` in all for `duration`, with `extra` flags; its JSON report.
pub fn fleet_thread(
    pool: &str,
    devices: &str,
    hash_budget: &str,
    duration: &str,
    extra: &[&str],
    limit: Duration,
) -> std::thread::JoinHandle<serde_json::Value> {
    let args: Vec<String> = [
        "--pool",
        pool,
        "--devices",
        devices,
        "--hash-budget",
        hash_budget,
        "--duration",
        duration,
        "--json",
    ]
    .iter()
    .chain(extra)
    .map(|a| a.to_string())
    .collect();
    std::thread::spawn(move || run_fleet(&strs(&args), limit))
}

/// A farm proxy (`stratumlab proxy` or `translator`) for [`FLEET_DEVICES`] on the upstreams
/// `args` name, failing over from one silent for `keepalive`, its events in `events`, stopping
/// by itself after 120 s.
pub fn failover_proxy(subcommand: &str, args: &[&str], keepalive: &str, events: &Path) -> Role {
    let own = [
        "--upstream-keepalive",
        keepalive,
        "--duration",
        "120s",
        "--events",
    ];
    let all: Vec<&str> = [args, &own, &[events.to_str().unwrap()], &FLEET_DEVICES].concat();
    Role::start(subcommand, &all)
}

/// [`fleet_thread`] of five devices (200 kH/s in all) on a farm proxy at `pool` that may fail
/// over, following the new upstream's extranonce (`--extranonce-subscribe`), with `extra`.
pub fn failover_fleet(
    pool: &str,
    duration: &str,
    extra: &[&str],
) -> std::thread::JoinHandle<serde_json::Value> {
    let extra = [&["--extranonce-subscribe"], extra].concat();
    fleet_thread(
        pool,
        "5",
        "200kH/s",
        duration,
        &extra,
        Duration::from_secs(60),
    )
}

/// The events of `path` as JSON values.
pub fn dump_events(path: &std::path::Path) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args(["events", "dump", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "events dump {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Roles still running, by name; whatever a failing assertion leaves behind is killed (and its
/// log shown).
#[derive(Default)]
pub struct Roles(pub Vec<(&'static str, Role)>);

impl Roles {
    pub fn add(&mut self, name: &'static str, role: Role) -> &Role {
        self.0.push((name, role));
        &self.0.last().unwrap().1
    }

    fn take(&mut self, name: &str) -> Role {
        let i = self.0.iter().position(|(n, _)| *n == name).unwrap();
        self.0.remove(i).1
    }

    /// Stops one role with SIGTERM; it must exit successfully. Returns what it printed since.
    pub fn stop(&mut self, name: &str) -> Vec<String> {
        self.take(name).stop()
    }

    /// As [`Roles::stop`], returning everything it logged.
    pub fn stop_for_log(&mut self, name: &str) -> String {
        self.take(name).stop_for_log()
    }

    /// Sends a signal to one role, which stays listed.
    pub fn signal(&mut self, name: &str, sig: i32) {
        let (_, role) = self.0.iter_mut().find(|(n, _)| *n == name).unwrap();
        role.signal(sig);
    }

    /// Kills one role with SIGKILL, as a crash would.
    pub fn kill(&mut self, name: &str) {
        self.take(name).kill9();
    }

    pub fn logs(&self) -> String {
        self.0
            .iter()
            .map(|(n, r)| format!("--- {n}\n{}", r.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        for (_, r) in self.0.drain(..) {
            r.kill9();
        }
    }
}

/// Polls `/api/status` at `http` until `done` holds (bounded by 15 s).
pub fn status_when(
    http: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    status_within(http, what, Duration::from_secs(15), String::new, done)
}

/// [`status_when`] within `limit`; `context()` (the roles' logs, say) is shown on failure.
pub fn status_within(
    http: &str,
    what: &str,
    limit: Duration,
    context: impl Fn() -> String,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    within(what, limit, context, || {
        let status = http_get_json(http, "/api/status");
        if done(&status) {
            Ok(status)
        } else {
            Err(status.to_string())
        }
    })
}

/// Calls `probe` every 100 ms until it returns `Ok`, for `limit` at most; past that, panics
/// with `what`, the last `Err` (what was seen instead) and `context()` (the roles' logs, say).
pub fn within<T>(
    what: &str,
    limit: Duration,
    context: impl Fn() -> String,
    mut probe: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match probe() {
            Ok(done) => return done,
            Err(seen) => assert!(Instant::now() < deadline, "{what}: {seen}\n{}", context()),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (within `limit`) for `/healthz` at `http` to answer 200.
pub fn healthy_within(http: &str, limit: Duration, context: impl Fn() -> String) {
    within("/healthz is not 200", limit, context, || {
        let (code, body) = http_get(http, "/healthz");
        if code == 200 {
            Ok(())
        } else {
            Err(format!("{code} {body}"))
        }
    });
}

/// A `stratumlab tap` relaying bytes as they are from `listen` to `upstream` (for 10 minutes at
/// most), added to `roles` as "tap" once it listens; returns the address it listens on. Killing
/// it cuts the link; starting it again on the same address restores it.
pub fn start_tap(roles: &mut Roles, listen: &str, upstream: &str) -> String {
    let tap = roles.add(
        "tap",
        Role::start(
            "tap",
            &[
                "--listen",
                listen,
                "--upstream",
                upstream,
                "--handshake",
                "false",
                "--duration",
                "600s",
            ],
        ),
    );
    tap.line("tap listening on")
}

/// The bytes a role's events file counts on `link` in `direction` ("up" or "down").
pub fn link_bytes(events: &std::path::Path, link: &str, direction: &str) -> u64 {
    dump_events(events)
        .iter()
        .filter(|e| e["kind"] == "link_bytes" && e["link"] == link)
        .filter(|e| e["direction"] == direction)
        .map(|e| e["bytes"].as_u64().unwrap())
        .sum()
}

/// The payout address of the pools tests start.
/// The RPC credentials every test's simnet takes and its clients send.
pub const RPC_USER: &str = "u";
pub const RPC_PASSWORD: &str = "p";

/// simnet as a test asks for it ([`simnet`]).
pub struct SimnetStart {
    rpc: bool,
    tdp: bool,
    zmq: bool,
    block_interval: String,
    args: Vec<String>,
}

/// simnet with the endpoints a test asks for, on 127.0.0.1 at port 0, finding no blocks of its
/// own unless [`SimnetStart::block_interval`] says otherwise.
pub fn simnet() -> SimnetStart {
    SimnetStart {
        rpc: false,
        tdp: false,
        zmq: false,
        block_interval: "0".into(),
        args: Vec::new(),
    }
}

impl SimnetStart {
    /// JSON-RPC, with [`RPC_USER`] and [`RPC_PASSWORD`].
    pub fn rpc(mut self) -> Self {
        self.rpc = true;
        self
    }

    /// The Template Provider.
    pub fn tdp(mut self) -> Self {
        self.tdp = true;
        self
    }

    /// ZMQ block notifications.
    pub fn zmq(mut self) -> Self {
        self.zmq = true;
        self
    }

    pub fn block_interval(mut self, every: &str) -> Self {
        self.block_interval = every.into();
        self
    }

    /// Any other flag and its value (`--network-difficulty`, `--tx-rate`, ...).
    pub fn arg(mut self, flag: &str, value: &str) -> Self {
        self.args.extend([flag.to_owned(), value.to_owned()]);
        self
    }

    /// Starts it and waits until every endpoint asked for listens.
    pub fn start(self) -> (Role, SimnetAddrs) {
        let mut args: Vec<String> = Vec::new();
        let mut wanted = Vec::new();
        if self.rpc {
            args.extend(
                ["--rpc-listen", "127.0.0.1:0", "--rpc-user", RPC_USER]
                    .into_iter()
                    .chain(["--rpc-password", RPC_PASSWORD])
                    .map(String::from),
            );
            wanted.push("rpc listening on");
        }
        if self.tdp {
            args.extend(["--tdp-listen", "127.0.0.1:0"].map(String::from));
            wanted.extend(["tdp listening on", "tdp authority public key"]);
        }
        if self.zmq {
            args.extend(["--zmq-listen", "127.0.0.1:0"].map(String::from));
            wanted.push("zmq listening on");
        }
        args.extend(["--block-interval".to_owned(), self.block_interval]);
        args.extend(self.args);
        let role = Role::start(
            "simnet",
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let mut got = role.lines_starting(&wanted);
        let mut take = |prefix: &str| got.remove(prefix);
        let addrs = SimnetAddrs {
            rpc: take("rpc listening on"),
            tdp: take("tdp listening on"),
            tdp_key: take("tdp authority public key"),
            zmq: take("zmq listening on"),
        };
        (role, addrs)
    }
}

/// Where a started simnet listens; asking for an endpoint it was not started with panics.
pub struct SimnetAddrs {
    rpc: Option<String>,
    tdp: Option<String>,
    tdp_key: Option<String>,
    zmq: Option<String>,
}

impl SimnetAddrs {
    pub fn rpc(&self) -> &str {
        self.rpc.as_deref().expect("simnet started without .rpc()")
    }

    /// The RPC endpoint as a URL (`--node-rpc`).
    pub fn url(&self) -> String {
        format!("http://{}", self.rpc())
    }

    pub fn tdp(&self) -> &str {
        self.tdp.as_deref().expect("simnet started without .tdp()")
    }

    /// The provider's authority public key (`--tp-authority-key`).
    pub fn tdp_key(&self) -> &str {
        self.tdp_key
            .as_deref()
            .expect("simnet started without .tdp()")
    }

    pub fn zmq(&self) -> &str {
        self.zmq.as_deref().expect("simnet started without .zmq()")
    }
}

/// One JSON-RPC call to simnet at `addr` (with [`RPC_USER`] and [`RPC_PASSWORD`]); its
/// whole answer (`result`, `error`).
pub fn rpc_call(addr: &str, method: &str, params: serde_json::Value) -> serde_json::Value {
    // Basic authorization: base64 of "u:p".
    const CREDENTIALS: &str = "dTpw";
    let body = serde_json::json!({"jsonrpc": "1.0", "id": 1, "method": method, "params": params})
        .to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic {CREDENTIALS}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let json = text.split_once("\r\n\r\n").expect("an HTTP response").1;
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `--node-rpc http://RPC --rpc-user u --rpc-password p`: what a role needs to use simnet's
/// RPC.
pub fn node_args(rpc: &str) -> Vec<String> {
    vec![
        "--node-rpc".into(),
        format!("http://{rpc}"),
        "--rpc-user".into(),
        RPC_USER.into(),
        "--rpc-password".into(),
        RPC_PASSWORD.into(),
    ]
}

pub const PAYOUT: &str = "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080";

/// What every pool in these tests is started with after its listener: status on any port, the
/// payout address, and its store at `store`.
fn pool_basics(store: &std::path::Path) -> [String; 6] {
    [
        "--http-listen".into(),
        "127.0.0.1:0".into(),
        "--payout-address".into(),
        PAYOUT.into(),
        "--store".into(),
        store.to_str().expect("a UTF-8 path").into(),
    ]
}

/// Our SV1 pool's first flags: miners on any port, then [`pool_basics`].
pub fn sv1_pool_args(store: &std::path::Path) -> Vec<String> {
    let mut a = vec!["--sv1-listen".to_owned(), "127.0.0.1:0".to_owned()];
    a.extend(pool_basics(store));
    a
}

/// Our SV2 pool's first flags: miners on `listen`, templates from simnet's Template Provider at
/// `tdp` (its certificate checked against `tdp_key`), then [`pool_basics`].
pub fn sv2_pool_args(
    listen: &str,
    tdp: &str,
    tdp_key: &str,
    store: &std::path::Path,
) -> Vec<String> {
    let mut a: Vec<String> = [
        "--sv2-listen",
        listen,
        "--tp",
        tdp,
        "--tp-authority-key",
        tdp_key,
    ]
    .map(String::from)
    .into();
    a.extend(pool_basics(store));
    a
}

/// A JDS's first flags: simnet's RPC at `rpc` ([`node_args`]), clients on `listen`, their
/// tokens signed with the key in `token_key`, and coinbases paying [`PAYOUT`].
pub fn jds_args(rpc: &str, listen: &str, token_key: &str) -> Vec<String> {
    let mut a = node_args(rpc);
    a.extend(
        [
            "--listen",
            listen,
            "--jd-token-key",
            token_key,
            "--payout-address",
            PAYOUT,
        ]
        .map(String::from),
    );
    a
}

/// A JDC's first flags: devices on any port, templates from the Template Provider at `tp`,
/// the pool at `upstream` and the JDS at `jds`, each checked against its authority key.
pub fn jdc_args(
    tp: &str,
    tp_key: &str,
    upstream: &str,
    upstream_key: &str,
    jds: &str,
    jds_key: &str,
) -> Vec<String> {
    [
        "--sv2-listen",
        "127.0.0.1:0",
        "--tp",
        tp,
        "--tp-authority-key",
        tp_key,
        "--upstream",
        upstream,
        "--upstream-authority-key",
        upstream_key,
        "--jds",
        jds,
        "--jds-authority-key",
        jds_key,
    ]
    .map(String::from)
    .into()
}

/// Owned arguments borrowed, as [`Role::start`] takes them.
pub fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Our SV2 pool on simnet's Template Provider, started as roles "simnet" and "pool".
pub struct Sv2Pool {
    /// Its authority public key.
    pub key: String,
    /// Where SV2 clients connect.
    pub sv2: String,
    pub http: String,
}

impl Sv2Pool {
    /// Starts `stratumlab translator` on this pool: SV1 and HTTP on ephemeral loopback ports,
    /// stopping by itself after 120 s should the test never get to it, with `extra` after.
    pub fn translator(&self, extra: &[&str]) -> Role {
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &self.sv2,
            "--upstream-authority-key",
            &self.key,
            "--http-listen",
            "127.0.0.1:0",
            "--duration",
            "120s",
        ];
        args.extend_from_slice(extra);
        Role::start("translator", &args)
    }

    /// [`Sv2Pool::translator`] for [`FLEET_DEVICES`], with `extra` before them, added to
    /// `roles` as "translator": the role, and where it listens for SV1 and for HTTP.
    pub fn fleet_translator<'r>(
        &self,
        roles: &'r mut Roles,
        extra: &[&str],
    ) -> (&'r Role, String, String) {
        let args: Vec<&str> = extra.iter().chain(&FLEET_DEVICES).copied().collect();
        let translator = roles.add("translator", self.translator(&args));
        let sv1 = translator.line("sv1 listening on");
        let http = translator.line("http listening on");
        (translator, sv1, http)
    }
}

/// Our translator's flags in the interop checks: devices of 50 kH/s, at this start difficulty
/// a share every ~2 s each (50e3 * 2 / 2^32), and 30 shares a minute asked of the pool.
pub const INTEROP_TRANSLATOR: [&str; 8] = [
    "--user-identity",
    "stratumlab-interop",
    "--device-hash-rate",
    "50kH/s",
    "--start-difficulty",
    "0.000023",
    "--shares-per-minute",
    "30",
];

/// A farm proxy's flags for the fleet's devices, which hash 40 kH/s each: at this start
/// difficulty, a share every second or so.
pub const FLEET_DEVICES: [&str; 4] = [
    "--start-difficulty",
    "0.00001",
    "--device-hash-rate",
    "40kH/s",
];

/// Starts simnet (a Template Provider, network difficulty 0.0005, no blocks of its own) and our
/// SV2 pool on it, storing in `dir`; the pool's events go to `pool_events` if given.
pub fn sv2_pool_on_simnet(
    roles: &mut Roles,
    dir: &std::path::Path,
    pool_events: Option<&std::path::Path>,
) -> Sv2Pool {
    let simnet = simnet().tdp().arg("--network-difficulty", "0.0005");
    let mut pool_args = Vec::new();
    if let Some(p) = pool_events {
        pool_args.extend(["--events", p.to_str().unwrap()]);
    }
    sv2_pool_on(roles, dir, simnet, &pool_args, &[]).0
}

/// Starts `simnet` (which must serve `.tdp()`) and our SV2 pool on its Template Provider,
/// storing in `dir`, with `pool_args` after the usual ones and `pool_env` in its environment;
/// the pool and simnet's addresses.
pub fn sv2_pool_on(
    roles: &mut Roles,
    dir: &std::path::Path,
    simnet: SimnetStart,
    pool_args: &[&str],
    pool_env: &[(&str, &str)],
) -> (Sv2Pool, SimnetAddrs) {
    let (simnet, at) = simnet.start();
    roles.add("simnet", simnet);
    let (tdp, tdp_key) = (at.tdp(), at.tdp_key());
    let store = dir.join("pool.sqlite");
    let owned = sv2_pool_args("127.0.0.1:0", tdp, tdp_key, &store);
    let mut args = strs(&owned);
    args.extend_from_slice(pool_args);
    let pool = roles.add("pool", Role::start_with_env("pool", &args, pool_env));
    let pool = Sv2Pool {
        key: pool.line("sv2 authority public key"),
        sv2: pool.line("sv2 listening on"),
        http: pool.line("http listening on"),
    };
    (pool, at)
}

/// Shares rejected for any reason but stale, from a `shares` object's `rejected_by_reason` (a
/// fleet's report, or the lab's count).
pub fn rejected_but_stale(shares: &serde_json::Value) -> u64 {
    shares["rejected_by_reason"]
        .as_object()
        .expect("rejected_by_reason")
        .iter()
        .filter(|(reason, _)| *reason != "stale")
        .map(|(_, n)| n.as_u64().unwrap())
        .sum()
}

/// A pinned third-party program run by a test through the lab's harness: its output in
/// `NAME.log` in the test's directory, killed when dropped (its log's end shown if the test
/// failed).
pub struct ThirdParty {
    process: RoleProcess,
}

impl ThirdParty {
    /// Starts the pinned `pin` with `args` in `dir`, logging (at info: a reference role's
    /// verdicts, each of para's submits) into `dir/LOG.log`.
    pub fn start(
        pin: &lab::third_party::Pinned,
        dir: &Path,
        log: &str,
        args: &[OsString],
    ) -> ThirdParty {
        let bin = lab::third_party::find(pin, "interop")
            .unwrap_or_else(|e| panic!("{e}"))
            .path;
        let env = [("NO_COLOR", "1"), ("RUST_LOG", "info")].map(|(k, v)| (k.into(), v.into()));
        let log = dir.join(format!("{log}.log"));
        let process = RoleProcess::spawn_as(
            pin.name,
            &bin,
            args,
            &log,
            Launch {
                dir: Some(dir),
                env: &env,
                ..THIRD_PARTY
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        ThirdParty { process }
    }

    /// Starts `pin` with the config `toml`, written to `dir/NAME.toml` (`-c FILE`).
    pub fn with_config(pin: &lab::third_party::Pinned, dir: &Path, toml: &str) -> ThirdParty {
        let path = dir.join(format!("{}.toml", pin.name));
        std::fs::write(&path, toml).unwrap();
        ThirdParty::start(pin, dir, pin.name, &["-c".into(), path.into()])
    }

    /// Everything it logged so far, colour codes removed.
    pub fn log(&self) -> String {
        strip_ansi(&std::fs::read_to_string(self.process.log_path()).unwrap_or_default())
    }

    /// How many times `what` appears in its log.
    pub fn count(&self, what: &str) -> usize {
        self.log().matches(what).count()
    }

    /// Waits up to `limit` for `what` in its log; panics with the log's end if it exits first
    /// or the time runs out.
    pub fn wait_for(&mut self, what: &str, limit: Duration) {
        self.process
            .wait_log(what, limit)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Waits up to `limit` until `addr` accepts connections.
    pub fn wait_port(&mut self, addr: std::net::SocketAddr, limit: Duration) {
        self.process
            .wait_port(addr, limit)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Interrupts it as its operator would (SIGINT) and waits up to `grace`; whether it stopped
    /// by itself (it is killed if not).
    pub fn stop(&mut self, grace: Duration) -> bool {
        self.process.signal(libc::SIGINT);
        let stopped = self.process.wait_done(grace).is_some();
        if !stopped {
            self.process.signal(libc::SIGKILL);
            let _ = self.process.wait_done(Duration::from_secs(5));
        }
        stopped
    }
}

impl Drop for ThirdParty {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
            eprintln!(
                "---- last lines of {}'s log ({} lines)\n{}",
                self.process.name,
                lines.len(),
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
}

/// `text` without ANSI colour sequences (ESC [ ... letter).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The fresh authority pair in a key file a stratumlab server wrote (`--authority-key-file`):
/// (public, secret).
pub fn authority_pair(key_file: &Path) -> (String, String) {
    let text = std::fs::read_to_string(key_file).expect("an authority key file");
    let value = |key: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(key)?
                    .trim()
                    .strip_prefix("= ")?
                    .strip_prefix('"')
            })
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_else(|| panic!("no {key} in {}", key_file.display()))
            .to_owned()
    };
    (value("authority_public_key"), value("authority_secret_key"))
}

/// The SV2 reference pool (`pool_sv2`, pinned) on simnet's Template Provider, with the lab's
/// minimal loopback config; stopped when dropped. simnet must have been started with `.tdp()`
/// and `--authority-key-file key_file`: the pool signs its certificates with simnet's fresh
/// pair and checks simnet's with it, so that nothing runs on a published key.
pub struct RefPool {
    process: ThirdParty,
    /// Where miners connect.
    pub listen: std::net::SocketAddr,
    /// The authority public key miners check the pool's certificate with.
    pub key: String,
}

impl RefPool {
    /// simnet (a Template Provider at `network_difficulty`, no blocks of its own, templates
    /// every 2 s, its events in `dir/simnet.ev`) and pool_sv2 on it: simnet's role, the pool,
    /// and the path of simnet's events.
    pub fn on_simnet(dir: &Path, network_difficulty: &str) -> (Role, RefPool, std::path::PathBuf) {
        let key_file = dir.join("authority.key");
        let events = dir.join("simnet.ev");
        let (simnet, node) = simnet()
            .tdp()
            .arg("--network-difficulty", network_difficulty)
            .arg("--template-interval", "2s")
            .arg("--authority-key-file", key_file.to_str().unwrap())
            .arg("--events", events.to_str().unwrap())
            .start();
        let pool = RefPool::start(dir, &node, &key_file);
        (simnet, pool, events)
    }

    /// Starts pool_sv2 (found as the lab finds it) writing its log into `dir`, and waits until
    /// it is ready for miners.
    pub fn start(dir: &Path, node: &SimnetAddrs, key_file: &Path) -> RefPool {
        let (key, secret) = authority_pair(key_file);
        let listen = lab::third_party::free_loopback_port().unwrap();
        let config = lab::third_party::PoolSv2Config {
            listen,
            authority_public_key: &key,
            authority_secret_key: &secret,
            template_provider: node.tdp().parse().unwrap(),
            payout_address: PAYOUT,
            shares_per_minute: 30.0,
            // Extension 0x0002, for a translator that asks (ours with --worker-tracking).
            extensions: &[2],
            monitoring: None,
        };
        let mut process = ThirdParty::with_config(&lab::third_party::POOL_SV2, dir, &config.toml());
        process.wait_for(lab::third_party::POOL_SV2_READY, Duration::from_secs(90));
        RefPool {
            process,
            listen,
            key,
        }
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// How many times `what` appears in its log.
    pub fn count(&self, what: &str) -> usize {
        self.process.count(what)
    }
}

/// Checks a fleet's report as every interop check does: `devices` ready, no protocol error,
/// shares accepted, none rejected for a reason but stale. `context` names the run.
pub fn assert_fleet_mined(report: &serde_json::Value, devices: u64, context: &str) {
    let n = |k: &str| {
        report[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{context}: no {k}: {report}"))
    };
    assert_eq!(
        n("ready"),
        devices,
        "{context}: not every device was ready: {report}"
    );
    assert_eq!(
        n("protocol_errors"),
        0,
        "{context}: protocol errors: {report}"
    );
    let shares = &report["shares"];
    assert!(
        shares["accepted"].as_u64().unwrap() > 0,
        "{context}: no share accepted: {report}"
    );
    assert_eq!(
        rejected_but_stale(shares),
        0,
        "{context}: rejected for reasons other than stale: {shares}"
    );
    eprintln!(
        "fleet ({context}): {shares} blocks {}",
        report["blocks_found"]
    );
}

/// What our pool's events say of the shares it judged on SV2 channels, and the blocks it
/// submitted.
#[derive(Debug, Default)]
pub struct PoolVerdicts {
    /// Shares accepted on a channel.
    pub accepted: u64,
    /// Their nonces.
    pub accepted_nonces: std::collections::HashSet<u64>,
    /// Shares rejected on a channel, by reason.
    pub rejected: std::collections::BTreeMap<String, u64>,
    /// The channels shares were judged on.
    pub channels: std::collections::HashSet<u64>,
    /// Jobs sent on a channel.
    pub jobs: u64,
    /// The hashes of blocks it submitted.
    pub submitted: std::collections::HashSet<String>,
}

impl PoolVerdicts {
    pub fn of(events: &[serde_json::Value]) -> PoolVerdicts {
        let mut v = PoolVerdicts::default();
        for e in events {
            match e["kind"].as_str() {
                Some("job_sent") if !e["channel"].is_null() => v.jobs += 1,
                Some("share_result") if !e["channel"].is_null() => {
                    v.channels.insert(e["channel"].as_u64().unwrap());
                    match &e["verdict"] {
                        x if x == "accepted" => {
                            v.accepted += 1;
                            v.accepted_nonces.insert(e["nonce"].as_u64().unwrap_or(0));
                        }
                        serde_json::Value::Object(o) => {
                            let why = o["rejected"].as_str().unwrap_or("?").to_owned();
                            *v.rejected.entry(why).or_default() += 1;
                        }
                        x => *v.rejected.entry(x.to_string()).or_default() += 1,
                    }
                }
                Some("block_submitted") => {
                    v.submitted.insert(e["hash"].as_str().unwrap().to_owned());
                }
                _ => {}
            }
        }
        v
    }

    /// Shares rejected for a reason but stale (a share on a job a new tip superseded is a
    /// genuine race).
    pub fn rejected_but_stale(&self) -> u64 {
        self.rejected
            .iter()
            .filter(|(r, _)| *r != "stale")
            .map(|(_, n)| n)
            .sum()
    }

    /// Shares rejected, whatever the reason.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
}

/// The pool's acknowledgements (the sum of their `new_submits_accepted_count`) and share
/// errors, as a reference role logged receiving them: `{marker}: Received: SubmitShares...`
/// (or without the marker when it is empty).
pub fn verdicts_received(log: &str, marker: &str) -> (u64, u64) {
    const ACKED: &str = "new_submits_accepted_count=";
    let prefix = if marker.is_empty() {
        String::new()
    } else {
        format!("{marker}: ")
    };
    let (success, error) = (
        format!("{prefix}Received: SubmitSharesSuccess"),
        format!("{prefix}Received: SubmitSharesError"),
    );
    let acked = log
        .lines()
        .filter(|l| l.contains(&success))
        .filter_map(|l| {
            let at = l.rfind(ACKED)? + ACKED.len();
            let digits: String = l[at..].chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u64>().ok()
        })
        .sum();
    let errors = log.matches(&error).count() as u64;
    (acked, errors)
}

/// The hashes of the shares the pool's store at `store` holds (the store closed, or read as it
/// stands).
pub fn stored_share_hashes(store: &Path) -> std::collections::HashSet<[u8; 32]> {
    pool::store::StoreReader::open(store)
        .unwrap()
        .shares()
        .unwrap()
        .into_iter()
        .map(|s| s.hash)
        .collect()
}

/// The hashes of the blocks that became simnet's tip by a submission, from its events.
pub fn submitted_tips(simnet_events: &Path) -> std::collections::HashSet<String> {
    dump_events(simnet_events)
        .iter()
        .filter(|e| e["kind"] == "tip_changed" && e["source"] == "submitted")
        .filter_map(|e| e["hash"].as_str().map(str::to_owned))
        .collect()
}

/// The hashes of the blocks a fleet (or proxy) found: its `share_sent` events that carry one.
pub fn found_blocks(events: &Path) -> std::collections::HashSet<String> {
    dump_events(events)
        .iter()
        .filter(|e| e["kind"] == "share_sent")
        .filter_map(|e| e["hash"].as_str().map(str::to_owned))
        .collect()
}

/// Submits whose version bits are not all zero, as para logs them (`"version_bits": "hex"`).
pub fn rolled_submits(log: &str) -> usize {
    const KEY: &str = "\"version_bits\": \"";
    log.match_indices(KEY)
        .filter_map(|(at, _)| {
            let rest = &log[at + KEY.len()..];
            rest.split('"').next()
        })
        .filter(|bits| bits.chars().any(|c| c != '0'))
        .count()
}

/// Runs `para miner` against `pool` as worker `name` (with `extra` arguments) for `mining`,
/// then interrupts it as a user would (SIGINT); returns what it printed. Its log is
/// `dir/para-NAME.log`.
pub fn run_para(dir: &Path, pool: &str, name: &str, extra: &[&str], mining: Duration) -> String {
    let user = format!("{PAYOUT}.{name}");
    let args: Vec<OsString> = ["miner", pool, "--username", &user, "--cpu-cores", "1"]
        .iter()
        .chain(extra)
        .map(OsString::from)
        .collect();
    let mut para = ThirdParty::start(&lab::third_party::PARA, dir, &format!("para-{name}"), &args);
    std::thread::sleep(mining);
    // It prints the shares it found as it stops.
    assert!(
        para.stop(Duration::from_secs(30)),
        "para did not stop on SIGINT"
    );
    para.log()
}

/// A small file system for a store, which a test fills and frees for real: a tmpfs mounted on
/// a temporary directory when the test may mount (root), or else the directory as it is, with
/// the writing process's file size limit (`prlimit --fsize`) standing in for the full disk. In
/// both cases SQLite's next write that needs room fails (ENOSPC, or EFBIG: the pool ignores
/// SIGXFSZ). `STRATUMLAB_TEST_NO_MOUNT=1` takes the second way even as root.
pub struct SmallFs {
    dir: tempfile::TempDir,
    mounted: bool,
}

impl SmallFs {
    pub fn new(size: &str) -> SmallFs {
        let dir = tempfile::tempdir().unwrap();
        let try_mount = std::env::var_os("STRATUMLAB_TEST_NO_MOUNT").is_none();
        let mounted = try_mount
            && Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(dir.path())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        SmallFs { dir, mounted }
    }

    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// How it is filled: `tmpfs` or `file size limit`.
    pub fn kind(&self) -> &'static str {
        if self.mounted {
            "tmpfs"
        } else {
            "file size limit"
        }
    }

    fn filler(&self) -> std::path::PathBuf {
        self.dir.path().join("filler")
    }

    /// Leaves no room: files in it cannot grow (`pid` writes them).
    pub fn fill(&self, pid: u32) {
        if self.mounted {
            let mut f = std::fs::File::create(self.filler()).unwrap();
            let chunk = vec![0xa5u8; 16 * 1024];
            loop {
                match f.write_all(&chunk) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                    Err(e) => panic!("filling the tmpfs: {e}"),
                }
            }
            // What a partly written chunk left, byte by byte.
            while f.write_all(&[0]).is_ok() {}
        } else {
            prlimit(pid, "1");
        }
    }

    /// Makes room again.
    pub fn free(&self, pid: u32) {
        if self.mounted {
            std::fs::remove_file(self.filler()).unwrap();
        } else {
            prlimit(pid, "unlimited");
        }
    }
}

fn prlimit(pid: u32, limit: &str) {
    let ok = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        // The soft limit only: raising it again needs no privilege.
        .arg(format!("--fsize={limit}:"))
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "prlimit --pid={pid} --fsize={limit}");
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}
