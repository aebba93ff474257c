//! The connection tasks to wake when something concerns them all: new work, the periodic tick,
//! shutdown. Each connection holds a slot with its task's waker; [`Wakers::wake_all`] wakes
//! every one in a single pass.
//!
//! This replaces a future per connection waiting on a broadcast channel: publishing queues and
//! allocates nothing per connection, and an idle connection costs one slot (a waker) here
//! rather than a waiter node inside its task. What changed is read by the woken task from
//! counters it compares with the values it saw last (see the server).

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::Waker;

#[derive(Default)]
pub(crate) struct Wakers {
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    wakers: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl Wakers {
    /// A slot for one connection, empty until [`Slot::set`]; freed when dropped.
    pub(crate) fn slot(&self) -> Slot<'_> {
        let mut s = self.lock();
        let index = match s.free.pop() {
            Some(i) => i,
            None => {
                s.wakers.push(None);
                s.wakers.len() - 1
            }
        };
        Slot {
            wakers: self,
            index,
            registered: None,
        }
    }

    /// Wakes every registered task; returns how many.
    pub(crate) fn wake_all(&self) -> usize {
        let s = self.lock();
        let mut n = 0;
        for w in s.wakers.iter().flatten() {
            w.wake_by_ref();
            n += 1;
        }
        n
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A connection's place in [`Wakers`].
pub(crate) struct Slot<'a> {
    wakers: &'a Wakers,
    index: usize,
    /// The waker in the slot, kept here too so that an unchanged one costs no lock.
    registered: Option<Waker>,
}

impl Slot<'_> {
    /// Makes `waker` the one [`Wakers::wake_all`] wakes. A task's waker stays the same from
    /// poll to poll, so only the first call takes the lock.
    pub(crate) fn set(&mut self, waker: &Waker) {
        if self.registered.as_ref().is_some_and(|w| w.will_wake(waker)) {
            return;
        }
        self.registered = Some(waker.clone());
        self.wakers.lock().wakers[self.index] = Some(waker.clone());
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut s = self.wakers.lock();
        s.wakers[self.index] = None;
        s.free.push(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count::default());
        (c.clone(), Waker::from(c))
    }

    #[test]
    fn wakes_every_set_slot_once_per_call() {
        let w = Wakers::default();
        let (a, wa) = waker();
        let (b, wb) = waker();
        let mut sa = w.slot();
        let mut sb = w.slot();
        let _empty = w.slot();
        sa.set(&wa);
        sb.set(&wb);
        sb.set(&wb);
        assert_eq!(w.wake_all(), 2);
        assert_eq!(w.wake_all(), 2);
        assert_eq!(a.0.load(Ordering::Relaxed), 2);
        assert_eq!(b.0.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_dropped_slot_is_not_woken_and_is_reused() {
        let w = Wakers::default();
        let (a, wa) = waker();
        let (b, wb) = waker();
        let mut sa = w.slot();
        sa.set(&wa);
        drop(sa);
        assert_eq!(w.wake_all(), 0);
        let mut sb = w.slot();
        sb.set(&wb);
        assert_eq!(w.lock().wakers.len(), 1, "the freed slot is reused");
        assert_eq!(w.wake_all(), 1);
        assert_eq!(a.0.load(Ordering::Relaxed), 0);
        assert_eq!(b.0.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_new_waker_replaces_the_old_one() {
        let w = Wakers::default();
        let (a, wa) = waker();
        let (b, wb) = waker();
        let mut s = w.slot();
        s.set(&wa);
        s.set(&wb);
        w.wake_all();
        assert_eq!(a.0.load(Ordering::Relaxed), 0);
        assert_eq!(b.0.load(Ordering::Relaxed), 1);
    }
}
