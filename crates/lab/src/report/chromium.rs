//! A headless Chromium, run once per task (print to PDF, screenshot, DOM dump) with a fresh
//! profile, no network chatter, and a deadline after which its whole process group is killed.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use thiserror::Error;

/// Where Debian's `chromium` package puts the browser.
pub const DEBIAN_CHROMIUM: &str = "/usr/bin/chromium";

/// Headless, no sandbox (CI runs as root), nothing the browser would fetch or sync on its own.
pub const FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// A Chromium (or Chrome) binary that prints HTML to PDF headless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chromium {
    program: PathBuf,
}

/// What the browser printed.
#[derive(Debug, Clone, Default)]
pub struct BrowserOutput {
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// Why the browser did not print the report.
#[derive(Debug, Error)]
pub enum BrowserError {
    /// The browser could not be started.
    #[error("starting {program}: {source}")]
    Spawn {
        /// The browser binary.
        program: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The browser ran past its time and was stopped.
    #[error("{program} did not finish within {timeout:?} and was stopped")]
    TimedOut {
        /// The browser binary.
        program: PathBuf,
        /// The time it was given.
        timeout: Duration,
    },
    /// The browser exited with a failure.
    #[error("{program} failed ({status}): {stderr_tail}")]
    Failed {
        /// The browser binary.
        program: PathBuf,
        /// Its exit status.
        status: ExitStatus,
        /// The end of its standard error.
        stderr_tail: String,
    },
    /// The browser exited without writing the PDF.
    #[error("{program} finished without writing {path}: {stderr_tail}")]
    NoOutput {
        /// The browser binary.
        program: PathBuf,
        /// The PDF it should have written.
        path: PathBuf,
        /// The end of its standard error.
        stderr_tail: String,
    },
    /// Its scratch directory could not be made.
    #[error("the browser's scratch directory: {0}")]
    Scratch(#[source] io::Error),
}

impl Chromium {
    /// Debian's Chromium, else a `chromium` on PATH.
    pub fn find() -> Option<Chromium> {
        let debian = Path::new(DEBIAN_CHROMIUM);
        if is_executable(debian) {
            return Some(Chromium::at(debian));
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join("chromium"))
            .find(|p| is_executable(p))
            .map(Chromium::at)
    }

    /// [`Chromium::find`] for a test that needs a browser: where there is none, it says
    /// `SKIPPED` and why, and the test returns (CI installs one, so there it runs).
    pub fn find_or_skip() -> Option<Chromium> {
        let found = Chromium::find();
        if found.is_none() {
            eprintln!(
                "SKIPPED: no Chromium ({DEBIAN_CHROMIUM} or chromium on PATH); `apt-get install chromium` to run this test"
            );
        }
        found
    }

    /// The browser at `program`, unchecked.
    pub fn at(program: impl Into<PathBuf>) -> Chromium {
        Chromium {
            program: program.into(),
        }
    }

    /// The browser binary.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Prints `html` to `pdf` (A4 landscape, as the page's print styles ask; no header or footer
    /// lines).
    pub fn print_to_pdf(
        &self,
        html: &Path,
        pdf: &Path,
        timeout: Duration,
    ) -> Result<BrowserOutput, BrowserError> {
        let flags = vec!["--no-pdf-header-footer".into()];
        self.write_file("--print-to-pdf=", pdf, flags, html, timeout)
    }

    /// A PNG of the page's first `window` pixels (width, height).
    pub fn screenshot(
        &self,
        html: &Path,
        png: &Path,
        window: (u32, u32),
        timeout: Duration,
    ) -> Result<BrowserOutput, BrowserError> {
        let flags = vec![
            format!("--window-size={},{}", window.0, window.1).into(),
            "--hide-scrollbars".into(),
        ];
        self.write_file("--screenshot=", png, flags, html, timeout)
    }

    /// Renders `html` into `path` through `flag` (`--screenshot=`, ...) and `flags`; an error
    /// when the browser left no file there.
    fn write_file(
        &self,
        flag: &str,
        path: &Path,
        flags: Vec<OsString>,
        html: &Path,
        timeout: Duration,
    ) -> Result<BrowserOutput, BrowserError> {
        let path = absolute(path);
        // A stale file from an earlier run must not pass for this run's.
        let _ = fs::remove_file(&path);
        let mut arg = OsString::from(flag);
        arg.push(&path);
        let out = self.run(std::iter::once(arg).chain(flags).collect(), html, timeout)?;
        self.expect_file(&path, &out)?;
        Ok(out)
    }

    /// The page's DOM after its scripts ran (on stdout), with the page's console messages and
    /// the browser's log on stderr.
    pub fn dump_dom(&self, html: &Path, timeout: Duration) -> Result<BrowserOutput, BrowserError> {
        self.dump_dom_at(html, (1280, 900), timeout)
    }

    /// [`Chromium::dump_dom`] in a window of `window` CSS pixels (the page's scripts see that
    /// width).
    pub fn dump_dom_at(
        &self,
        html: &Path,
        window: (u32, u32),
        timeout: Duration,
    ) -> Result<BrowserOutput, BrowserError> {
        self.run(
            vec![
                "--dump-dom".into(),
                format!("--window-size={},{}", window.0, window.1).into(),
                "--enable-logging=stderr".into(),
                "--v=0".into(),
            ],
            html,
            timeout,
        )
    }

    /// The DOM of the page at `url` (a live page served over HTTP) once its scripts have run
    /// for `virtual_time` of the browser's virtual clock: a page that refreshes itself every
    /// two seconds has refreshed twice within five, and the browser waits for each refresh's
    /// requests before its clock moves on.
    pub fn dump_dom_url(
        &self,
        url: &str,
        window: (u32, u32),
        virtual_time: Duration,
        timeout: Duration,
    ) -> Result<BrowserOutput, BrowserError> {
        self.run_on(
            vec![
                "--dump-dom".into(),
                format!("--window-size={},{}", window.0, window.1).into(),
                format!("--virtual-time-budget={}", virtual_time.as_millis()).into(),
                "--enable-logging=stderr".into(),
                "--v=0".into(),
            ],
            url.into(),
            timeout,
        )
    }

    fn run(
        &self,
        task: Vec<OsString>,
        html: &Path,
        timeout: Duration,
    ) -> Result<BrowserOutput, BrowserError> {
        self.run_on(task, file_url(&absolute(html)).into(), timeout)
    }

    fn run_on(
        &self,
        task: Vec<OsString>,
        url: OsString,
        timeout: Duration,
    ) -> Result<BrowserOutput, BrowserError> {
        let scratch = tempfile::Builder::new()
            .prefix("stratumlab-chromium-")
            .tempdir()
            .map_err(BrowserError::Scratch)?;
        let stdout_path = scratch.path().join("stdout");
        let stderr_path = scratch.path().join("stderr");
        let stdout = File::create(&stdout_path).map_err(BrowserError::Scratch)?;
        let stderr = File::create(&stderr_path).map_err(BrowserError::Scratch)?;
        let mut profile = OsString::from("--user-data-dir=");
        profile.push(scratch.path().join("profile"));

        let mut cmd = Command::new(&self.program);
        cmd.args(FLAGS)
            .arg(profile)
            .args(task)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // Its own process group: the browser's helpers (zygote, renderer, GPU process) go
            // down with it on a time-out.
            .process_group(0);
        let started = Instant::now();
        let mut child = cmd.spawn().map_err(|source| BrowserError::Spawn {
            program: self.program.clone(),
            source,
        })?;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() >= timeout => {
                    // The group leader is not reaped yet, so its id still names this group.
                    kill_group(child.id());
                    let _ = child.wait();
                    return Err(BrowserError::TimedOut {
                        program: self.program.clone(),
                        timeout,
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(25)),
                Err(source) => {
                    kill_group(child.id());
                    let _ = child.wait();
                    return Err(BrowserError::Spawn {
                        program: self.program.clone(),
                        source,
                    });
                }
            }
        };
        let out = BrowserOutput {
            stdout: read_lossy(&stdout_path),
            stderr: read_lossy(&stderr_path),
        };
        tracing::debug!(program = %self.program.display(), ?status, elapsed = ?started.elapsed(), "browser finished");
        if !status.success() {
            return Err(BrowserError::Failed {
                program: self.program.clone(),
                status,
                stderr_tail: tail(&out.stderr),
            });
        }
        Ok(out)
    }

    fn expect_file(&self, path: &Path, out: &BrowserOutput) -> Result<(), BrowserError> {
        match fs::metadata(path) {
            Ok(m) if m.len() > 0 => Ok(()),
            _ => Err(BrowserError::NoOutput {
                program: self.program.clone(),
                path: path.to_owned(),
                stderr_tail: tail(&out.stderr),
            }),
        }
    }
}

fn kill_group(pid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: killpg only sends a signal; the group is the one this process created for its
    // unreaped child, so no unrelated process can carry its id.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// A `file://` URL for an absolute path, bytes outside the unreserved set percent-encoded.
fn file_url(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut url = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

fn read_lossy(path: &Path) -> String {
    fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The end of the browser's log, where its reason for failing usually is.
fn tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(5);
    let text = lines[start..].join("\n");
    if text.is_empty() {
        "(nothing on stderr)".to_owned()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_are_encoded() {
        // A path made here (nothing is read): only its encoding is checked.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a b").join("report#1.html");
        let base = dir.path().display().to_string();
        assert_eq!(
            file_url(&path),
            format!("file://{base}/a%20b/report%231.html")
        );
    }

    /// Stand-ins for a browser: one that hangs (with a helper process, as Chromium has), one
    /// that fails, one that writes nothing. All are written before any is started: a script
    /// still open for writing in one thread while another forks cannot be executed (ETXTBSY).
    #[test]
    fn hanging_failing_and_silent_browsers_are_reported() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = |name: &str, body: &str| {
            let p = dir.path().join(name);
            fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
            Chromium::at(p)
        };
        let hangs = script("hangs", "sleep 30 &\nsleep 30");
        let fails = script("fails", "echo 'no display' >&2\nexit 3");
        let silent = script("silent", "exit 0");
        let html = dir.path().join("r.html");
        let pdf = dir.path().join("r.pdf");

        let started = Instant::now();
        let e = hangs
            .dump_dom(&html, Duration::from_millis(300))
            .unwrap_err();
        assert!(matches!(e, BrowserError::TimedOut { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));

        let e = fails
            .print_to_pdf(&html, &pdf, Duration::from_secs(10))
            .unwrap_err();
        assert!(
            matches!(&e, BrowserError::Failed { stderr_tail, .. } if stderr_tail == "no display"),
            "{e}"
        );

        fs::write(&pdf, b"old").unwrap();
        let e = silent
            .print_to_pdf(&html, &pdf, Duration::from_secs(10))
            .unwrap_err();
        assert!(matches!(e, BrowserError::NoOutput { .. }), "{e}");
        assert!(!pdf.exists(), "an old PDF must not pass for a new one");

        let e = Chromium::at(dir.path().join("absent"))
            .dump_dom(&html, Duration::from_secs(1))
            .unwrap_err();
        assert!(matches!(e, BrowserError::Spawn { .. }), "{e}");
    }
}
