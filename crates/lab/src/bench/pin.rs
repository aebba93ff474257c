//! Starting a process on one core: the calling thread's CPU set is what a child inherits, so the
//! bench narrows it for the spawn and restores it after. Every thread the child ever starts stays
//! on that core, which `sched_setaffinity` on the child after the spawn could not promise (its
//! runtime may start threads first). What the spawn itself starts in this process is on that
//! core too: the lab's reader of the child's stdout, a thread that sleeps until the child prints
//! (a line when it is ready, nothing while measured).

use std::io;

/// Runs `spawn` with this thread's CPU set narrowed to `core`, then restores it.
pub(super) fn on_core<T>(core: usize, spawn: impl FnOnce() -> T) -> io::Result<T> {
    // SAFETY: an all-zero cpu_set_t is the empty set, a valid value.
    let mut saved: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `saved` is valid and writable for `size` bytes; pid 0 is this thread.
    if unsafe { libc::sched_getaffinity(0, size, &mut saved) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; CPU_SET writes inside the set for any core below its capacity.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if core >= 8 * size {
        return Err(io::Error::other(format!(
            "core {core} is beyond the CPU set"
        )));
    }
    // SAFETY: `core` is within the set (checked above).
    unsafe { libc::CPU_SET(core, &mut one) };
    // SAFETY: `one` is a valid set of `size` bytes.
    if unsafe { libc::sched_setaffinity(0, size, &one) } != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cannot run on core {core}: {}", io::Error::last_os_error()),
        ));
    }
    let out = spawn();
    // SAFETY: `saved` is the set read above.
    if unsafe { libc::sched_setaffinity(0, size, &saved) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_runs_on_the_core_given_and_the_caller_gets_its_cores_back() {
        let before = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let allowed = |s: &str| {
            s.lines()
                .find(|l| l.starts_with("Cpus_allowed_list"))
                .unwrap()
                .to_owned()
        };
        let out = on_core(0, || {
            std::process::Command::new("grep")
                .args(["Cpus_allowed_list", "/proc/self/status"])
                .output()
                .unwrap()
        })
        .unwrap();
        let child = String::from_utf8(out.stdout).unwrap();
        assert_eq!(child.split_whitespace().last(), Some("0"), "{child}");
        let after = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        assert_eq!(allowed(&after), allowed(&before));
        assert!(on_core(100_000, || ()).is_err());
    }
}
