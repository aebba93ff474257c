//! Timestamps: CLOCK_MONOTONIC nanoseconds, the one clock every process on a host shares.
//!
//! Every role stamps its events with this clock so that the lab can subtract a timestamp taken in
//! one process from one taken in another. `std::time::Instant` reads the same clock on Linux but
//! does not expose its value, hence the direct `clock_gettime`.

/// Nanoseconds of CLOCK_MONOTONIC: comparable across the processes of one host, not across hosts
/// or reboots.
#[inline]
pub fn now_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME): wall time, for display only.
pub fn realtime_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

/// A wall-clock reading paired with the monotonic reading taken at the same instant, so that a
/// monotonic timestamp can be shown as wall time. The realtime read is bracketed by two monotonic
/// reads and paired with their midpoint.
pub fn wall_anchor() -> (u64, u64) {
    let before = now_ns();
    let wall = realtime_ns();
    let after = now_ns();
    (wall, before + (after - before) / 2)
}

#[inline]
fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    // clock_gettime only fails for an unknown clock id or a bad pointer, neither possible here; a
    // zero reading is still better than a panic on a hot path.
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_never_goes_back() {
        let mut last = now_ns();
        for _ in 0..10_000 {
            let t = now_ns();
            assert!(t >= last);
            last = t;
        }
    }

    #[test]
    fn matches_std_sleep() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = now_ns();
        assert!(b - a >= 20_000_000, "{}", b - a);
    }

    #[test]
    fn anchor_is_plausible() {
        let (wall, mono) = wall_anchor();
        // After 2020-01-01 and close to now.
        assert!(wall > 1_577_836_800_000_000_000);
        assert!(now_ns() >= mono);
    }
}
