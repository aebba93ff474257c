//! One role running as its own OS process: started so that it dies with the lab, its stdout
//! read for the addresses it prints, its stderr kept as its log, stopped politely then firmly.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Why a role could not be started or did not become ready.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program could not be started.
    #[error("starting {role}: {source}")]
    Spawn {
        /// The role's name.
        role: String,
        /// The error.
        source: std::io::Error,
    },
    /// The role did not print its ready line in time.
    #[error("{role} did not print `{what}` within {waited:?}{log}")]
    NotReady {
        /// The role's name.
        role: String,
        /// The line awaited.
        what: String,
        /// How long it was awaited.
        waited: Duration,
        /// The end of its log, as the message shows it.
        log: String,
    },
    /// The role exited before it was ready.
    #[error("{role} exited ({status}) before it was ready{log}")]
    DiedEarly {
        /// The role's name.
        role: String,
        /// Its exit status.
        status: String,
        /// The end of its log, as the message shows it.
        log: String,
    },
}

/// Prefixes of the variables by which the SV2 reference roles (pool_sv2, translator_sv2,
/// jd_client_sv2) override their config files.
const THIRD_PARTY_OVERRIDES: [&str; 3] = ["POOL__", "TPROXY__", "JDC__"];

/// What a role printed on stdout, shared with the thread that reads it.
#[derive(Default)]
struct Printed {
    lines: Vec<String>,
    closed: bool,
}

/// A running role.
pub struct RoleProcess {
    /// The role's name in the run ("simnet", "sv1.pool", "sv1.tap0", ...).
    pub name: String,
    child: Child,
    printed: Arc<(Mutex<Printed>, Condvar)>,
    log: PathBuf,
    status: Option<ExitStatus>,
    /// Not ours: stopped with SIGINT (what its operators press), and its exit by that signal
    /// counts as clean.
    third_party: bool,
    /// The next stdout line [`RoleProcess::next_line`] takes.
    next: AtomicUsize,
}

/// How a role starts beyond its command line ([`RoleProcess::spawn_as`]); the default is one
/// of ours, in the lab's directory and environment.
#[derive(Debug, Default, Clone, Copy)]
pub struct Launch<'a> {
    /// A third-party role, which prints its log on stdout (and no `listening on` lines): both
    /// streams go to the log, and readiness is a line in it ([`RoleProcess::wait_log`]) or an
    /// open port ([`RoleProcess::wait_port`]).
    pub third_party: bool,
    /// Where it runs (programs such as ckpool write their own logs and sockets there).
    pub dir: Option<&'a Path>,
    /// Added to the lab's environment: a secret a role reads from its environment rather than
    /// from a command line `ps` lists, or a third party's own settings.
    pub env: &'a [(String, String)],
}

/// A third-party role in the lab's directory and environment.
pub const THIRD_PARTY: Launch<'static> = Launch {
    third_party: true,
    dir: None,
    env: &[],
};

impl RoleProcess {
    /// Starts `program args`, its stderr appended to `log`. The child gets its own process group
    /// (so a terminal's Ctrl-C reaches only the lab, which stops roles in order) and is killed
    /// by the kernel if the lab dies (PR_SET_PDEATHSIG), so that no role outlives the lab.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[OsString],
        log: &Path,
    ) -> Result<RoleProcess, ProcessError> {
        Self::spawn_as(name, program, args, log, Launch::default())
    }

    /// As [`Self::spawn`], started as `launch` says: a third-party role, another directory,
    /// more environment.
    pub fn spawn_as(
        name: &str,
        program: &Path,
        args: &[OsString],
        log: &Path,
        launch: Launch<'_>,
    ) -> Result<RoleProcess, ProcessError> {
        let Launch {
            third_party,
            dir,
            env,
        } = launch;
        let spawn_err = |source| ProcessError::Spawn {
            role: name.to_owned(),
            source,
        };
        let stderr = std::fs::File::create(log).map_err(spawn_err)?;
        let stdout = if third_party {
            Stdio::from(stderr.try_clone().map_err(spawn_err)?)
        } else {
            Stdio::piped()
        };
        let lab_pid = std::process::id() as i32;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        if let Some(dir) = dir {
            cmd.current_dir(dir);
        }
        if third_party {
            // The SV2 reference roles let variables override their config file
            // (`POOL__PORT`, `TPROXY__AGGREGATE_CHANNELS`, `JDC__MODE`, ...): one left in the
            // lab's environment would run another setup than the config it was written.
            for (k, _) in std::env::vars_os() {
                if k.to_str()
                    .is_some_and(|k| THIRD_PARTY_OVERRIDES.iter().any(|p| k.starts_with(p)))
                {
                    cmd.env_remove(k);
                }
            }
        }
        cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The lab may have died between fork and prctl: then nobody would kill us.
                if libc::getppid() != lab_pid {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let printed = Arc::new((Mutex::new(Printed::default()), Condvar::new()));
        match child.stdout.take() {
            // A third-party role's stdout goes to its log: it prints nothing for us.
            None => printed.0.lock().expect("not poisoned").closed = true,
            Some(out) => {
                let shared = printed.clone();
                std::thread::Builder::new()
                    .name(format!("{name}-stdout"))
                    .spawn(move || {
                        for line in BufReader::new(out).lines().map_while(Result::ok) {
                            let (m, cv) = &*shared;
                            m.lock().expect("not poisoned").lines.push(line);
                            cv.notify_all();
                        }
                        let (m, cv) = &*shared;
                        m.lock().expect("not poisoned").closed = true;
                        cv.notify_all();
                    })
                    .map_err(spawn_err)?;
            }
        }
        Ok(RoleProcess {
            name: name.to_owned(),
            child,
            printed,
            log: log.to_owned(),
            status: None,
            third_party,
            next: AtomicUsize::new(0),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The role's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Waits for a stdout line `<what> listening on ADDR` and returns ADDR.
    pub fn wait_listening(
        &mut self,
        what: &str,
        timeout: Duration,
    ) -> Result<SocketAddr, ProcessError> {
        let prefix = format!("{what} listening on ");
        let found = self.wait_line(timeout, |l| {
            l.strip_prefix(&prefix)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|a| a.parse().ok())
        })?;
        found.ok_or_else(|| ProcessError::NotReady {
            role: self.name.clone(),
            what: format!("{what} listening on ADDR"),
            waited: timeout,
            log: self.log_tail_suffix(),
        })
    }

    /// Waits until the role's log holds `needle` (a third-party role's "ready" line).
    pub fn wait_log(&mut self, needle: &str, timeout: Duration) -> Result<(), ProcessError> {
        let log = self.log.clone();
        self.wait_until(needle, timeout, || {
            let text = std::fs::read(&log).unwrap_or_default();
            needle.is_empty() || text.windows(needle.len()).any(|w| w == needle.as_bytes())
        })
    }

    /// Waits until `addr` accepts a TCP connection (a third-party role that prints no address
    /// and no ready line), the role exits, or `timeout`.
    pub fn wait_port(&mut self, addr: SocketAddr, timeout: Duration) -> Result<(), ProcessError> {
        self.wait_until(&format!("a listener on {addr}"), timeout, || {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        })
    }

    /// Polls `ready` until it holds, the role exits (an error with its log's end), or `timeout`
    /// (an error naming `what` it waited for).
    fn wait_until(
        &mut self,
        what: &str,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), ProcessError> {
        let deadline = Instant::now() + timeout;
        loop {
            if ready() {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                return Err(ProcessError::DiedEarly {
                    role: self.name.clone(),
                    status: describe(status),
                    log: self.log_tail_suffix(),
                });
            }
            if Instant::now() >= deadline {
                return Err(ProcessError::NotReady {
                    role: self.name.clone(),
                    what: what.to_owned(),
                    waited: timeout,
                    log: self.log_tail_suffix(),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until a stdout line gives `Some` through `pick`, the role exits, or `timeout`.
    fn wait_line<T>(
        &mut self,
        timeout: Duration,
        mut pick: impl FnMut(&str) -> Option<T>,
    ) -> Result<Option<T>, ProcessError> {
        let deadline = Instant::now() + timeout;
        let mut seen = 0;
        loop {
            let closed = {
                let (m, cv) = &*self.printed;
                let mut p = m.lock().expect("not poisoned");
                while p.lines.len() == seen && !p.closed {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    // Wake now and then to notice a child that died without closing stdout
                    // (a grandchild may hold it).
                    let wait = left.min(Duration::from_millis(200));
                    p = cv.wait_timeout(p, wait).expect("not poisoned").0;
                    if p.lines.len() == seen && self.child.try_wait().ok().flatten().is_some() {
                        break;
                    }
                }
                for line in &p.lines[seen..] {
                    if let Some(t) = pick(line) {
                        return Ok(Some(t));
                    }
                }
                seen = p.lines.len();
                p.closed
            };
            if closed || self.exited().is_some() {
                let status = self.wait_exit(Duration::from_secs(2));
                return Err(ProcessError::DiedEarly {
                    role: self.name.clone(),
                    status: status.map_or("still running, stdout closed".into(), describe),
                    log: self.log_tail_suffix(),
                });
            }
        }
    }

    /// The next stdout line not yet taken by this or [`Self::line`], waiting up to `timeout`
    /// for it. `None` when the role printed nothing more in time, or its stdout closed.
    pub fn next_line(&self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let next = self.next.load(Ordering::Relaxed);
        let (m, cv) = &*self.printed;
        let mut p = m.lock().expect("not poisoned");
        while p.lines.len() <= next && !p.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            p = cv.wait_timeout(p, left).expect("not poisoned").0;
        }
        let line = p.lines.get(next).cloned()?;
        self.next.store(next + 1, Ordering::Relaxed);
        Some(line)
    }

    /// Takes stdout lines until one starts with `prefix` and returns the rest of it, trimmed;
    /// an error with the log's end when none comes within `timeout`.
    pub fn line(&self, prefix: &str, timeout: Duration) -> Result<String, ProcessError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_line(left) {
                Some(l) => {
                    if let Some(rest) = l.strip_prefix(prefix) {
                        return Ok(rest.trim().to_owned());
                    }
                }
                None => {
                    return Err(ProcessError::NotReady {
                        role: self.name.clone(),
                        what: format!("a line {prefix:?}"),
                        waited: timeout,
                        log: self.log_tail_suffix(),
                    })
                }
            }
        }
    }

    /// Everything the role printed on stdout so far.
    pub fn printed(&self) -> Vec<String> {
        self.printed.0.lock().expect("not poisoned").lines.clone()
    }

    /// The exit status, if the role has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `signal` (SIGINT asks a role to finish cleanly).
    pub fn signal(&mut self, signal: i32) {
        if self.exited().is_none() {
            // SAFETY: our own child, not yet reaped (exited() would have reaped it).
            unsafe { libc::kill(self.child.id() as i32, signal) };
        }
    }

    /// Whether `status` is a clean end: exit 0 (ours stop on SIGTERM with it), or for a
    /// third-party role, also the death by the SIGINT it was stopped with.
    pub fn ended_well(&self, status: ExitStatus) -> bool {
        status.success()
            || (self.third_party
                && (status.signal() == Some(libc::SIGINT) || status.code() == Some(130)))
    }

    /// Asks the role to stop (SIGTERM; SIGINT for a third-party role), waits up to `grace`, then
    /// kills it. Returns its status.
    pub fn stop(&mut self, grace: Duration) -> ExitStatus {
        self.signal(if self.third_party {
            libc::SIGINT
        } else {
            libc::SIGTERM
        });
        if let Some(s) = self.wait_exit(grace) {
            return s;
        }
        tracing::warn!(role = %self.name, ?grace, "role did not stop in time: killing it");
        let _ = self.child.kill();
        let s = self
            .child
            .wait()
            .unwrap_or_else(|_| ExitStatus::from_raw(9));
        self.status = Some(s);
        s
    }

    /// Waits for the role to exit on its own (a fleet with a duration), up to `timeout`.
    pub fn wait_done(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.wait_exit(timeout)
    }

    /// The last lines of the role's log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn log_tail_suffix(&self) -> String {
        let tail = self.log_tail(15);
        if tail.is_empty() {
            format!(" (its log {} is empty)", self.log.display())
        } else {
            format!("; the end of its log ({}):\n{tail}", self.log.display())
        }
    }
}

impl Drop for RoleProcess {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// "exit 0", "exit 3", "killed by signal 9".
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => format!("{status}"),
    }
}

/// Addresses the role printed, by what (`rpc`, `zmq`, `sv1`, ...).
pub fn listening(lines: &[String]) -> HashMap<String, SocketAddr> {
    lines
        .iter()
        .filter_map(|l| {
            let (what, rest) = l.split_once(" listening on ")?;
            let addr = rest.split_whitespace().next()?.parse().ok()?;
            Some((what.to_owned(), addr))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, dir: &Path) -> RoleProcess {
        RoleProcess::spawn(
            "test-role",
            Path::new("/bin/sh"),
            &["-c".into(), script.into()],
            &dir.join("role.log"),
        )
        .unwrap()
    }

    #[test]
    fn reads_the_printed_address() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = sh(
            "echo starting; echo 'rpc listening on 127.0.0.1:4242'; sleep 30",
            dir.path(),
        );
        let a = p.wait_listening("rpc", Duration::from_secs(10)).unwrap();
        assert_eq!(a, "127.0.0.1:4242".parse().unwrap());
        let s = p.stop(Duration::from_secs(5));
        assert_eq!(s.signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn a_role_that_dies_is_reported_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = sh("echo 'bad flag --x' >&2; exit 3", dir.path());
        let e = p
            .wait_listening("rpc", Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("test-role exited (exit 3)"), "{e}");
        assert!(e.contains("bad flag --x"), "{e}");
    }

    #[test]
    fn a_third_party_role_is_ready_when_its_log_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ref.log");
        let mut p = RoleProcess::spawn_as(
            "ref",
            Path::new("/bin/sh"),
            &[
                "-c".into(),
                "echo starting; sleep 0.2; echo 'ready to serve' >&2; sleep 30".into(),
            ],
            &log,
            THIRD_PARTY,
        )
        .unwrap();
        p.wait_log("ready to serve", Duration::from_secs(10))
            .unwrap();
        assert!(
            p.printed().is_empty(),
            "stdout goes to the log, not the lab"
        );
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("starting") && text.contains("ready"),
            "{text}"
        );
        let e = p
            .wait_log("never printed", Duration::from_millis(300))
            .unwrap_err();
        assert!(e.to_string().contains("never printed"), "{e}");
        p.stop(Duration::from_secs(5));
        let e = p
            .wait_log("never printed", Duration::from_secs(5))
            .unwrap_err();
        assert!(matches!(e, ProcessError::DiedEarly { .. }), "{e}");
    }

    #[test]
    fn an_external_role_runs_in_its_directory_and_is_ready_when_its_port_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let addr = crate::third_party::free_loopback_port().unwrap();
        // python3 is on every machine CI runs on; it listens a moment after it starts.
        let script = format!(
            "import os, socket, time\n\
             open('cwd.txt', 'w').write(os.getcwd() + ' ' + os.environ['LAB_VALUE'])\n\
             time.sleep(0.3)\n\
             s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('127.0.0.1', {})); s.listen(4); time.sleep(30)\n",
            addr.port()
        );
        let env = [("LAB_VALUE".into(), "42".into())];
        let launch = Launch {
            dir: Some(&work),
            env: &env,
            ..THIRD_PARTY
        };
        let mut p = RoleProcess::spawn_as(
            "ext",
            Path::new("python3"),
            &["-c".into(), script.into()],
            &dir.path().join("ext.log"),
            launch,
        )
        .unwrap();
        p.wait_port(addr, Duration::from_secs(20)).unwrap();
        let seen = std::fs::read_to_string(work.join("cwd.txt")).unwrap();
        assert_eq!(
            seen,
            format!("{} 42", work.canonicalize().unwrap().display())
        );
        p.stop(Duration::from_secs(5));
        let e = p.wait_port(addr, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, ProcessError::DiedEarly { .. }), "{e}");
        // One that exits without listening is reported with its log.
        let mut q = RoleProcess::spawn_as(
            "ext2",
            Path::new("/bin/sh"),
            &["-c".into(), "echo 'no config' >&2; exit 2".into()],
            &dir.path().join("ext2.log"),
            Launch {
                dir: Some(&work),
                ..THIRD_PARTY
            },
        )
        .unwrap();
        let e = q
            .wait_port(addr, Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no config"), "{e}");
    }

    #[test]
    fn a_silent_role_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = sh("sleep 30", dir.path());
        let e = p
            .wait_listening("sv1", Duration::from_millis(300))
            .unwrap_err();
        assert!(matches!(e, ProcessError::NotReady { .. }), "{e}");
    }

    #[test]
    fn a_role_ignoring_sigterm_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = sh(
            "trap '' TERM; echo 'x listening on 127.0.0.1:1'; sleep 30",
            dir.path(),
        );
        p.wait_listening("x", Duration::from_secs(10)).unwrap();
        let s = p.stop(Duration::from_millis(300));
        assert_eq!(s.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn printed_addresses_are_collected() {
        let lines = vec![
            "simnet: chain regtest".to_owned(),
            "rpc listening on 127.0.0.1:18443".to_owned(),
            "zmq listening on 127.0.0.1:28332".to_owned(),
        ];
        let m = listening(&lines);
        assert_eq!(m.len(), 2);
        assert_eq!(m["zmq"].port(), 28332);
    }
}
