//! A `stratumlab` subcommand run as a child process, its stdout read line by line.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Role {
    pub child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Where the role's stderr (its log) goes, to show when a test fails.
    log: tempfile::NamedTempFile,
}

impl Role {
    pub fn start(subcommand: &str, args: &[&str]) -> Role {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
            .arg(subcommand)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Role { child, lines, log }
    }

    /// The last lines the role logged.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Waits for a stdout line starting with `prefix` and returns the rest.
    pub fn line(&self, prefix: &str) -> String {
        loop {
            let l = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .expect("the role printed nothing more");
            if let Some(rest) = l.strip_prefix(prefix) {
                return rest.trim().to_owned();
            }
        }
    }

    /// SIGTERM, then waits: the role must exit successfully. Returns what it printed since.
    pub fn stop(mut self) -> Vec<String> {
        // SAFETY: signalling our own child, which has not been waited for yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "exit {status:?}");
        self.lines.try_iter().collect()
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill9(mut self) {
        // SAFETY: as in `stop`.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}
