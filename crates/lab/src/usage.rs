//! CPU and memory of each role process and of the host, sampled from /proc once a second while
//! a run goes on (docs/metrics.md, "Roles and host"). /proc cannot give per-process network bytes:
//! roles count their own.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleet::proc_stat::{process_cpu, rss_bytes};
use serde::Serialize;

use crate::results::Host;

/// One role's usage over a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RoleUsage {
    /// Mean CPU over the run, in percent (100 = one core busy).
    pub cpu_pct_mean: f64,
    /// Highest CPU sample, in percent (100 = one core busy).
    pub cpu_pct_max: f64,
    /// Peak resident memory, in bytes.
    pub rss_bytes_max: u64,
}

/// One sample of one role.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// CLOCK_MONOTONIC ns.
    at_ns: u64,
    /// 100 = one core busy, over the interval that ends at `at_ns`.
    cpu_pct: f64,
    rss_bytes: u64,
}

#[derive(Default)]
struct Series {
    roles: BTreeMap<String, Vec<Sample>>,
    /// Host CPU use in percent of all cores (100 = every core busy).
    host: Vec<(u64, f64)>,
}

/// Samples registered processes until dropped.
pub struct Sampler {
    pids: Arc<Mutex<Vec<(String, u32)>>>,
    series: Arc<Mutex<Series>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling every `interval` on a thread of its own.
    pub fn start(interval: Duration) -> Sampler {
        let pids: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
        let series: Arc<Mutex<Series>> = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (pids, series, stop) = (pids.clone(), series.clone(), stop.clone());
            std::thread::Builder::new()
                .name("lab-sampler".into())
                .spawn(move || sample_loop(interval, &pids, &series, &stop))
                .expect("spawning the sampler thread")
        };
        Sampler {
            pids,
            series,
            stop,
            thread: Some(thread),
        }
    }

    /// Samples `pid` under `role` from now on.
    pub fn watch(&self, role: &str, pid: u32) {
        self.pids
            .lock()
            .expect("not poisoned")
            .push((role.to_owned(), pid));
    }

    /// Usage per role within `[from_ns, to_ns]`.
    pub fn usage(&self, from_ns: u64, to_ns: u64) -> BTreeMap<String, RoleUsage> {
        let s = self.series.lock().expect("not poisoned");
        s.roles
            .iter()
            .map(|(role, samples)| {
                let inside: Vec<&Sample> = samples
                    .iter()
                    .filter(|x| x.at_ns >= from_ns && x.at_ns <= to_ns)
                    .collect();
                let n = inside.len().max(1) as f64;
                let u = RoleUsage {
                    cpu_pct_mean: inside.iter().map(|x| x.cpu_pct).sum::<f64>() / n,
                    cpu_pct_max: inside.iter().map(|x| x.cpu_pct).fold(0.0, f64::max),
                    rss_bytes_max: samples.iter().map(|x| x.rss_bytes).max().unwrap_or(0),
                };
                (role.clone(), u)
            })
            .collect()
    }

    /// Host CPU samples `(CLOCK_MONOTONIC ns, percent of all cores)`.
    pub fn host_cpu(&self) -> Vec<(u64, f64)> {
        self.series.lock().expect("not poisoned").host.clone()
    }

    /// Each role's latest (CPU percent of a core, RSS bytes).
    pub fn latest(&self) -> BTreeMap<String, (f64, u64)> {
        let s = self.series.lock().expect("not poisoned");
        s.roles
            .iter()
            .filter_map(|(r, v)| v.last().map(|x| (r.clone(), (x.cpu_pct, x.rss_bytes))))
            .collect()
    }

    /// `role_cpu_pct.csv` and `role_rss_bytes.csv`: one row per second since `start_ns`, one
    /// column per role.
    pub fn csvs(&self, start_ns: u64) -> (String, String) {
        let s = self.series.lock().expect("not poisoned");
        let roles: Vec<&String> = s.roles.keys().collect();
        let mut rows: BTreeMap<u64, BTreeMap<&str, Sample>> = BTreeMap::new();
        for (role, samples) in &s.roles {
            for x in samples.iter().filter(|x| x.at_ns >= start_ns) {
                let t = (x.at_ns - start_ns) / 1_000_000_000;
                rows.entry(t).or_default().insert(role, *x);
            }
        }
        let header = std::iter::once("t_s")
            .chain(roles.iter().map(|r| r.as_str()))
            .collect::<Vec<_>>()
            .join(",");
        let (mut cpu, mut rss) = (header.clone(), header);
        for (t, by_role) in rows {
            let _ = write!(cpu, "\n{t}");
            let _ = write!(rss, "\n{t}");
            for r in &roles {
                match by_role.get(r.as_str()) {
                    Some(x) => {
                        let _ = write!(cpu, ",{:.1}", x.cpu_pct);
                        let _ = write!(rss, ",{}", x.rss_bytes);
                    }
                    None => {
                        cpu.push(',');
                        rss.push(',');
                    }
                }
            }
        }
        cpu.push('\n');
        rss.push('\n');
        (cpu, rss)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn sample_loop(
    interval: Duration,
    pids: &Mutex<Vec<(String, u32)>>,
    series: &Mutex<Series>,
    stop: &std::sync::atomic::AtomicBool,
) {
    let mut last: BTreeMap<u32, (u64, Duration)> = BTreeMap::new();
    let mut last_host = host_ticks();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(interval);
        let now = events::now_ns();
        let watched = pids.lock().expect("not poisoned").clone();
        let mut s = series.lock().expect("not poisoned");
        for (role, pid) in watched {
            let (Ok(cpu), Ok(rss)) = (process_cpu(pid), rss_bytes(Some(pid))) else {
                continue; // exited
            };
            if let Some((at, before)) = last.insert(pid, (now, cpu)) {
                let wall = now.saturating_sub(at) as f64;
                if wall > 0.0 {
                    let pct = cpu.saturating_sub(before).as_nanos() as f64 / wall * 100.0;
                    s.roles.entry(role).or_default().push(Sample {
                        at_ns: now,
                        cpu_pct: pct,
                        rss_bytes: rss,
                    });
                }
            }
        }
        let host = host_ticks();
        if let (Some((busy0, total0)), Some((busy1, total1))) = (last_host, host) {
            if total1 > total0 {
                let pct = (busy1 - busy0) as f64 / (total1 - total0) as f64 * 100.0;
                s.host.push((now, pct));
            }
        }
        last_host = host;
    }
}

/// `(busy, total)` jiffies of all CPUs from the first line of /proc/stat.
fn host_ticks() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    parse_host_ticks(text.lines().next()?)
}

fn parse_host_ticks(line: &str) -> Option<(u64, u64)> {
    let mut f = line.split_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    if v.len() < 8 {
        return None;
    }
    let total: u64 = v[..8].iter().sum();
    let idle = v[3] + v[4];
    Some((total - idle, total))
}

/// What the run records of the host (docs/metrics.md "host"); CPU figures come from `cpu` samples
/// `(ns, percent of all cores)`, the filesystem is the one holding `dir`.
pub fn read_host(cpu: &[(u64, f64)], dir: &std::path::Path) -> Host {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let n = cpu.len() as f64;
    Host {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as u64,
        cpu_model: cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_owned())
            .unwrap_or_default(),
        memory_bytes: meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024),
        cpu_pct_mean: (n > 0.0).then(|| cpu.iter().map(|x| x.1).sum::<f64>() / n),
        cpu_pct_max: (n > 0.0).then(|| cpu.iter().map(|x| x.1).fold(0.0, f64::max)),
        cpu_busy_fraction: None,
        uptime_s: std::fs::read_to_string("/proc/uptime")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0),
        fs_used_pct: fs_used_pct(dir),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default(),
        extra: Default::default(),
    }
}

fn fs_used_pct(dir: &std::path::Path) -> Option<f64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value for statvfs to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `st` is writable.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 || st.f_blocks == 0 {
        return None;
    }
    Some((st.f_blocks - st.f_bfree) as f64 / st.f_blocks as f64 * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ticks_exclude_idle_and_iowait() {
        let (busy, total) = parse_host_ticks("cpu  100 5 50 800 40 3 2 0 0 0").unwrap();
        assert_eq!(total, 1000);
        assert_eq!(busy, 160);
        assert_eq!(parse_host_ticks("intr 1 2 3"), None);
    }

    #[test]
    fn a_busy_child_is_seen_busy() {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let mut idle = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let sampler = Sampler::start(Duration::from_millis(100));
        let t0 = events::now_ns();
        sampler.watch("spinner", child.id());
        sampler.watch("sleeper", idle.id());
        std::thread::sleep(Duration::from_millis(700));
        let u = sampler.usage(t0, events::now_ns());
        for c in [&mut child, &mut idle] {
            let _ = c.kill();
            let _ = c.wait();
        }
        let (s, z) = (&u["spinner"], &u["sleeper"]);
        // A spinning shell uses most of a core on a quiet machine, far less on a loaded one
        // (CI saw 29%): judged against a sleeping process watched over the same window.
        assert!(
            s.cpu_pct_mean > 5.0 && s.cpu_pct_mean > z.cpu_pct_mean + 5.0,
            "{s:?} {z:?}"
        );
        assert!(s.cpu_pct_max > z.cpu_pct_max, "{s:?} {z:?}");
        assert!(s.rss_bytes_max > 0);
        let (cpu, rss) = sampler.csvs(t0);
        assert!(cpu.starts_with("t_s,sleeper,spinner\n0,"), "{cpu}");
        assert!(rss.lines().count() >= 2);
    }
}
