//! How a record that must not wait out the writer's window (a block, a block result, the
//! shutdown) wakes the writer.
//!
//! A flag under a lock rather than the thread's park token: any park on the writer's thread
//! spends the token (std's channel receive parks too), so a token-based wake-up could be lost,
//! and the writer then had to park in short slices to bound the loss (50 wake-ups a second while
//! a window was open). The flag is spent only by the writer's own wait, so the writer sleeps
//! each window in one wait.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

#[derive(Default)]
pub(super) struct Bell {
    rung: Mutex<bool>,
    cv: Condvar,
}

impl Bell {
    pub(crate) fn ring(&self) {
        *self.lock() = true;
        self.cv.notify_one();
    }

    /// Waits until the bell rings or `deadline` passes; true if it rang (since the last wait
    /// that returned true).
    pub(crate) fn wait_until(&self, deadline: Instant) -> bool {
        let mut rung = self.lock();
        loop {
            if std::mem::take(&mut *rung) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            rung = match self.cv.wait_timeout(rung, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    fn lock(&self) -> MutexGuard<'_, bool> {
        self.rung.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_ring_before_the_wait_is_not_lost_and_is_spent_once() {
        let bell = Bell::default();
        bell.ring();
        // Another park on the same thread (what spent a park token) does not spend the ring.
        std::thread::park_timeout(Duration::from_millis(1));
        let far = Instant::now() + Duration::from_secs(60);
        assert!(bell.wait_until(far));
        assert!(!bell.wait_until(Instant::now() + Duration::from_millis(5)));
    }

    #[test]
    fn a_ring_during_the_wait_ends_it_long_before_the_deadline() {
        let bell = Arc::new(Bell::default());
        let b = bell.clone();
        let ringer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            b.ring();
        });
        let started = Instant::now();
        assert!(bell.wait_until(started + Duration::from_secs(60)));
        assert!(started.elapsed() < Duration::from_secs(30));
        ringer.join().unwrap();
    }

    #[test]
    fn without_a_ring_the_wait_lasts_until_the_deadline() {
        let bell = Bell::default();
        let deadline = Instant::now() + Duration::from_millis(30);
        assert!(!bell.wait_until(deadline));
        assert!(Instant::now() >= deadline);
    }
}
