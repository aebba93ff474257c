//! Real-time scheduling for the tap's threads, when the system allows it.
//!
//! A kernel link emulator (netem) releases packets from softirq context, ahead of every user
//! process. A tap in user space shares the CPU with the roles it sits between, and on a busy
//! two-core machine a thread woken for a release may wait milliseconds for a core: that wait
//! is added to the delay. Under SCHED_FIFO the tap's threads run as soon as they wake, so the
//! releases stay punctual however busy the other processes keep the CPU. The timer thread gets
//! a higher priority than the workers it wakes, so that a busy worker never holds it back.
//!
//! The tap's work is bounded by its traffic (tens of microseconds per message), and Linux caps
//! real-time threads at 95% of the CPU (`sched_rt_runtime_us`), so others are never locked out.
//! Setting the policy needs CAP_SYS_NICE or an RLIMIT_RTPRIO; without it the tap runs as a
//! normal process and says so.

use std::io;

/// Priority of the threads that read and write (tokio workers, the accept loop). One above
/// the lowest, so that a test harness can run its load real-time and still below the tap.
pub const WORKER_PRIORITY: i32 = 2;
/// Priority of the release timer: above the workers it wakes.
pub const TIMER_PRIORITY: i32 = 3;

/// Puts the calling thread under SCHED_FIFO at `priority` (1 to 99). Threads it creates
/// afterwards inherit the policy.
pub fn realtime_current_thread(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the calling thread runs under a real-time policy.
pub fn is_realtime_current_thread() -> bool {
    // SAFETY: pid 0 is the calling thread.
    let policy = unsafe { libc::sched_getscheduler(0) };
    policy == libc::SCHED_FIFO || policy == libc::SCHED_RR
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_becomes_realtime_when_permitted() {
        // On its own thread, so the test harness's threads keep their policy.
        let (result, realtime) = std::thread::spawn(|| {
            let r = realtime_current_thread(WORKER_PRIORITY);
            (r, is_realtime_current_thread())
        })
        .join()
        .unwrap();
        match result {
            Ok(()) => assert!(realtime),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
                assert!(!realtime);
            }
        }
        assert!(!is_realtime_current_thread());
    }
}
