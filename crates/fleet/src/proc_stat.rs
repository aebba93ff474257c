//! CPU time and resident memory of this process and of another one (the pool under load).

use std::io;
use std::time::Duration;

/// CPU time (user + system) this process has used.
pub fn self_cpu() -> io::Result<Duration> {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is valid and writable.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Ok(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// CPU time (user + system) process `pid` has used, from `/proc/PID/stat`.
pub fn process_cpu(pid: u32) -> io::Result<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_stat_cpu_ticks(&text).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc stat format")
    })?;
    Ok(Duration::from_secs_f64(
        ticks as f64 / clock_ticks_per_sec(),
    ))
}

/// `utime + stime` (fields 14 and 15) of a `/proc/PID/stat` line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted from its last `)`.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    parse_stat_user_sys(stat).map(|(u, s)| u + s)
}

/// `utime` and `stime` (fields 14 and 15) of a `/proc/PID/stat` or `/proc/PID/task/TID/stat`
/// line, apart, counted from the command name's last `)`.
pub fn parse_stat_user_sys(stat: &str) -> Option<(u64, u64)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    // After the name: state (3), ppid (4), ..., utime (14), stime (15).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime, stime))
}

/// Clock ticks per second, the unit of /proc's CPU times (100 where sysconf cannot say).
pub fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Resident set size of process `pid` (`self` for this one), from `/proc/PID/statm`.
pub fn rss_bytes(pid: Option<u32>) -> io::Result<u64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/statm"),
        None => "/proc/self/statm".to_owned(),
    };
    let text = std::fs::read_to_string(path)?;
    let pages: u64 = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected statm format"))?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    Ok(pages * page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_name() {
        let line = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0 12345 1000000 200 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(line), Some(325));
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn own_cpu_and_memory_are_readable() {
        let pid = std::process::id();
        // Burn a little CPU so both readings are non-zero.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(self_cpu().unwrap() > Duration::ZERO);
        assert!(process_cpu(pid).is_ok());
        assert!(rss_bytes(None).unwrap() > 1 << 20);
        assert!(rss_bytes(Some(pid)).unwrap() > 1 << 20);
        assert!(process_cpu(u32::MAX).is_err());
    }
}
