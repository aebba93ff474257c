//! What a bench reads from /proc at the two ends of its measured window: each process's CPU,
//! the pool's CPU and context switches by thread, every core's busy time and the load average.
//! Differences between the two readings are the window's figures (docs/performance.md).

use std::collections::BTreeMap;
use std::path::Path;

use fleet::proc_stat::{clock_ticks_per_sec, parse_stat_user_sys};
use serde::Serialize;

/// One reading of everything a window compares.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reading {
    /// CLOCK_MONOTONIC nanoseconds: the events' clock, so events can be placed in the window.
    pub(crate) at_ns: u64,
    /// CPU seconds (user + system) of each watched process, by pid.
    cpu_s: BTreeMap<u32, f64>,
    /// The measured process's threads, by name with digits dropped (a runtime's workers add
    /// up): (user, system) seconds and (voluntary, involuntary) context switches.
    threads: BTreeMap<String, ThreadUse>,
    /// Busy seconds (all but idle and iowait) of each core, by its number.
    cores: BTreeMap<String, f64>,
}

#[derive(Clone, Copy, Debug, Default)]
struct ThreadUse {
    user_s: f64,
    system_s: f64,
    voluntary: u64,
    involuntary: u64,
}

/// The window between two readings.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Window {
    /// CLOCK_MONOTONIC nanoseconds at the window's start.
    pub t0_ns: u64,
    /// CLOCK_MONOTONIC nanoseconds at its end.
    pub t1_ns: u64,
    /// CPU seconds each watched process used in the window, by pid.
    #[serde(skip)]
    pub cpu_s: BTreeMap<u32, f64>,
    /// The measured process's CPU by thread name: `[user, system]` seconds.
    pub user_sys_s_by_thread: BTreeMap<String, [f64; 2]>,
    /// Its context switches by thread name: `[voluntary, involuntary]`.
    pub ctxt_switches_by_thread: BTreeMap<String, [u64; 2]>,
    /// Busy seconds of each core in the window.
    pub core_busy_s: BTreeMap<String, f64>,
    /// The 1-minute load average at the window's end.
    pub loadavg_1m: f64,
}

impl Window {
    /// Seconds from start to end.
    pub fn secs(&self) -> f64 {
        (self.t1_ns - self.t0_ns) as f64 / 1e9
    }
}

/// Reads the CPU of `pids` and the threads of `measured` now.
pub(crate) fn read(pids: &[u32], measured: u32) -> Reading {
    let tck = clock_ticks_per_sec();
    let mut r = Reading {
        at_ns: events::now_ns(),
        ..Reading::default()
    };
    for &pid in pids {
        let ticks = || {
            let (u, s) = user_sys_ticks(&Path::new("/proc").join(pid.to_string()))?;
            Some((u + s) as f64 / tck)
        };
        if let Some(cpu) = process_cpu_s(pid).or_else(ticks) {
            r.cpu_s.insert(pid, cpu);
        }
    }
    let task = Path::new("/proc").join(measured.to_string()).join("task");
    for entry in std::fs::read_dir(task).into_iter().flatten().flatten() {
        let dir = entry.path();
        // A thread that ends between listing and reading is simply not counted.
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let Some((u, s)) = user_sys_ticks(&dir) else {
            continue;
        };
        let (v, n) = switches(&dir).unwrap_or((0, 0));
        let name = comm
            .trim()
            .trim_end_matches(|c: char| c.is_ascii_digit() || c == '-');
        let t = r.threads.entry(name.to_owned()).or_default();
        t.user_s += u as f64 / tck;
        t.system_s += s as f64 / tck;
        t.voluntary += v;
        t.involuntary += n;
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/stat") {
        r.cores = core_busy(&stat, tck);
    }
    r
}

/// The window from `a` to `b`. A thread present only at the end counts from zero (a short-lived
/// helper); threads with no CPU and no switches in the window are left out.
pub(crate) fn between(a: &Reading, b: &Reading) -> Window {
    let mut w = Window {
        t0_ns: a.at_ns,
        t1_ns: b.at_ns,
        loadavg_1m: std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0),
        ..Window::default()
    };
    for (pid, end) in &b.cpu_s {
        w.cpu_s
            .insert(*pid, end - a.cpu_s.get(pid).copied().unwrap_or(0.0));
    }
    for (name, end) in &b.threads {
        let start = a.threads.get(name).copied().unwrap_or_default();
        let cpu = [end.user_s - start.user_s, end.system_s - start.system_s];
        let cs = [
            end.voluntary.saturating_sub(start.voluntary),
            end.involuntary.saturating_sub(start.involuntary),
        ];
        if cpu[0] + cpu[1] > 0.0 {
            w.user_sys_s_by_thread.insert(name.clone(), cpu);
        }
        if cs != [0, 0] {
            w.ctxt_switches_by_thread.insert(name.clone(), cs);
        }
    }
    for (core, end) in &b.cores {
        w.core_busy_s.insert(
            core.clone(),
            end - a.cores.get(core).copied().unwrap_or(0.0),
        );
    }
    w
}

/// The CPU seconds `pid` has used, all its threads together (ended ones too), to the
/// nanosecond from its CPU-time clock. /proc's utime and stime count scheduler ticks (10 ms): a
/// role that works a few milliseconds in a window of seconds (the floor pool at a small load)
/// reads 0, 1 or 2 ticks, nothing like its cost per share. `None` where the clock cannot be
/// read (the process is gone); the caller then falls back to the ticks.
fn process_cpu_s(pid: u32) -> Option<f64> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a local the call writes; nothing else is passed by pointer.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a local the call writes.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}

/// utime and stime (fields 14 and 15) of `dir/stat`, counted after the command name's last `)`
/// since the name may hold spaces.
fn user_sys_ticks(dir: &Path) -> Option<(u64, u64)> {
    parse_stat_user_sys(&std::fs::read_to_string(dir.join("stat")).ok()?)
}

/// Voluntary and involuntary context switches from `dir/status`.
fn switches(dir: &Path) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let field = |key: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .trim_start_matches(':')
            .trim()
            .parse()
            .ok()
    };
    Some((
        field("voluntary_ctxt_switches")?,
        field("nonvoluntary_ctxt_switches")?,
    ))
}

/// Busy seconds per core from /proc/stat: user through steal, less idle and iowait.
fn core_busy(stat: &str, tck: f64) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in stat.lines() {
        let mut f = line.split_whitespace();
        let Some(core) = f.next().and_then(|c| c.strip_prefix("cpu")) else {
            continue;
        };
        if core.is_empty() {
            continue;
        }
        let v: Vec<u64> = f.take(8).filter_map(|x| x.parse().ok()).collect();
        if v.len() == 8 {
            let busy = v.iter().sum::<u64>() - v[3] - v[4];
            out.insert(core.to_owned(), busy as f64 / tck);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_count_all_but_idle_and_iowait() {
        let stat = "cpu  10 0 10 100 5 0 0 0 0 0\ncpu0 4 1 3 50 2 1 1 0 0 0\ncpu1 6 0 7 50 3 0 0 0 0 0\nintr 1\n";
        let busy = core_busy(stat, 100.0);
        assert_eq!(busy.len(), 2);
        assert!((busy["0"] - 0.10).abs() < 1e-9);
        assert!((busy["1"] - 0.13).abs() < 1e-9);
    }

    #[test]
    fn a_busy_thread_of_this_process_shows_in_the_window() {
        let me = std::process::id();
        let a = read(&[me], me);
        let spin = std::thread::Builder::new()
            .name("bench-spin7".into())
            .spawn(|| {
                let t = std::time::Instant::now();
                let mut x = 0u64;
                while t.elapsed() < std::time::Duration::from_millis(300) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            })
            .unwrap();
        // Read while the thread still lives: /proc forgets a thread once it is joined.
        std::thread::sleep(std::time::Duration::from_millis(250));
        let b = read(&[me], me);
        spin.join().unwrap();
        let w = between(&a, &b);
        assert!(w.t1_ns > w.t0_ns);
        assert!(w.cpu_s[&me] > 0.05, "{:?}", w.cpu_s);
        let [u, s] = w.user_sys_s_by_thread["bench-spin"];
        assert!(u + s > 0.05, "{:?}", w.user_sys_s_by_thread);
        assert!(!w.core_busy_s.is_empty());
    }

    #[test]
    fn a_nearly_idle_process_reads_its_cpu_below_one_tick() {
        // `sleep` costs its exec and start, well under a millisecond, then nothing: its
        // utime and stime stay at 0 ticks, its CPU-time clock does not.
        let mut child = std::process::Command::new("sleep")
            .arg("2")
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let pid = child.id();
        let cpu = read(&[pid], pid).cpu_s[&pid];
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(cpu > 0.0 && cpu < 0.01, "{cpu}");
        // Gone: no reading rather than a made-up one.
        assert!(!read(&[pid], pid).cpu_s.contains_key(&pid));
    }
}
