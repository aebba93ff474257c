//! A timer finer than tokio's, for releasing delayed bytes on time.
//!
//! tokio's timer wheel has a resolution of one millisecond and rounds sleeps up, so a 72.5 ms
//! delay would come out as 73 to 74 ms. Here one dedicated thread keeps a heap of deadlines and
//! waits for the earliest on a condition variable, whose timed wait is a futex on
//! CLOCK_MONOTONIC backed by a high-resolution kernel timer; the thread's timer slack is set to
//! 1 ns (the default 50 µs would be added to every wait), so it wakes within microseconds of
//! the deadline and wakes the task that waits for it. It does not spin: at ten thousand
//! deadlines a second, spinning through the last stretch of each would cost a core.
//!
//! A [`Sleep`] is a reusable future: a connection keeps one per direction and moves its deadline
//! with [`Sleep::reset`]. Deadlines are CLOCK_MONOTONIC nanoseconds ([`events::now_ns`]). A
//! deadline that moves registers a new heap entry; the stale one wakes its task once for nothing
//! and is discarded, and entries of dropped sleeps are skipped.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use events::now_ns;

/// The timer thread; stopped and joined on drop.
pub struct PreciseTimer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// A cheap handle for making sleeps.
#[derive(Clone)]
pub struct TimerHandle {
    shared: Arc<Shared>,
}

/// How punctual the timer thread has been.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerStats {
    /// Deadlines the thread reached (stale ones included).
    pub fired: u64,
    /// Sum and maximum of how late the thread noticed them.
    pub late_sum_ns: u64,
    /// The latest the thread noticed one, in nanoseconds.
    pub late_max_ns: u64,
}

impl TimerStats {
    /// Mean lateness in nanoseconds; zero before any deadline fired.
    pub fn late_mean_ns(&self) -> u64 {
        self.late_sum_ns.checked_div(self.fired).unwrap_or(0)
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

struct State {
    heap: BinaryHeap<Entry>,
    next_seq: u64,
    shutdown: bool,
    stats: TimerStats,
}

struct Entry {
    deadline_ns: u64,
    seq: u64,
    slot: Weak<Slot>,
}

// A min-heap on (deadline, seq): BinaryHeap is a max-heap, so the order is reversed.
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.deadline_ns, o.seq).cmp(&(self.deadline_ns, self.seq))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.deadline_ns, self.seq) == (o.deadline_ns, o.seq)
    }
}

impl Eq for Entry {}

/// Where the thread finds the waker of a sleep.
#[derive(Default)]
struct Slot {
    waker: Mutex<Option<Waker>>,
}

impl PreciseTimer {
    /// Starts the timer thread, under SCHED_FIFO if `realtime` and permitted ([`crate::sched`]).
    pub fn start(realtime: bool) -> io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                heap: BinaryHeap::new(),
                next_seq: 0,
                shutdown: false,
                stats: TimerStats::default(),
            }),
            wake: Condvar::new(),
        });
        let thread = std::thread::Builder::new()
            .name("tap-timer".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || {
                    if realtime {
                        if let Err(e) =
                            crate::sched::realtime_current_thread(crate::sched::TIMER_PRIORITY)
                        {
                            tracing::debug!(error = %e, "release timer without real-time priority");
                        }
                    }
                    shared.run()
                }
            })?;
        Ok(PreciseTimer {
            shared,
            thread: Some(thread),
        })
    }

    /// A handle for making sleeps on this timer's thread.
    pub fn handle(&self) -> TimerHandle {
        TimerHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// How punctual the thread has been so far.
    pub fn stats(&self) -> TimerStats {
        self.shared.lock().stats
    }
}

impl Drop for PreciseTimer {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl TimerHandle {
    /// A sleep with no deadline yet (it never completes until [`Sleep::reset`]).
    pub fn sleep(&self) -> Sleep {
        Sleep {
            shared: Arc::clone(&self.shared),
            slot: Arc::new(Slot::default()),
            deadline_ns: None,
            registered_ns: None,
        }
    }

    /// A sleep until `deadline_ns`.
    pub fn sleep_until(&self, deadline_ns: u64) -> Sleep {
        let mut s = self.sleep();
        s.reset(deadline_ns);
        s
    }

    /// How punctual the thread has been so far.
    pub fn stats(&self) -> TimerStats {
        self.shared.lock().stats
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under this lock can be left half-updated by a panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn register(&self, deadline_ns: u64, slot: &Arc<Slot>) {
        let mut st = self.lock();
        let earliest = st.heap.peek().map(|e| e.deadline_ns);
        let seq = st.next_seq;
        st.next_seq += 1;
        st.heap.push(Entry {
            deadline_ns,
            seq,
            slot: Arc::downgrade(slot),
        });
        drop(st);
        // The thread only needs a nudge when it sleeps toward a later deadline.
        if earliest.is_none_or(|e| deadline_ns < e) {
            self.wake.notify_one();
        }
    }

    fn run(&self) {
        set_timer_slack_ns(1);
        let mut due: Vec<Weak<Slot>> = Vec::new();
        let mut st = self.lock();
        loop {
            if st.shutdown {
                return;
            }
            let now = now_ns();
            while let Some(top) = st.heap.peek() {
                if top.deadline_ns > now {
                    break;
                }
                let late = now - top.deadline_ns;
                st.stats.fired += 1;
                st.stats.late_sum_ns += late;
                st.stats.late_max_ns = st.stats.late_max_ns.max(late);
                if let Some(e) = st.heap.pop() {
                    due.push(e.slot);
                }
            }
            if !due.is_empty() {
                drop(st);
                for slot in due.drain(..) {
                    let Some(slot) = slot.upgrade() else {
                        continue;
                    };
                    let waker = slot.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
                    if let Some(w) = waker {
                        w.wake();
                    }
                }
                st = self.lock();
                continue;
            }
            st = match st.heap.peek().map(|e| e.deadline_ns - now) {
                None => self.wake.wait(st).unwrap_or_else(|e| e.into_inner()),
                Some(wait) => {
                    self.wake
                        .wait_timeout(st, Duration::from_nanos(wait))
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

/// Timed waits of this thread get no slack added (Linux adds 50 µs by default, to batch
/// wake-ups). Best effort: without it the timer is 50 µs coarser.
fn set_timer_slack_ns(ns: libc::c_ulong) {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and affects only this thread.
    unsafe {
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            ns,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
    }
}

/// A future that completes once CLOCK_MONOTONIC reaches its deadline. Reusable: move the
/// deadline with [`Sleep::reset`] and poll it again.
pub struct Sleep {
    shared: Arc<Shared>,
    slot: Arc<Slot>,
    deadline_ns: Option<u64>,
    /// The deadline of this sleep's latest heap entry.
    registered_ns: Option<u64>,
}

impl Sleep {
    /// Sets the deadline to `deadline_ns` (CLOCK_MONOTONIC nanoseconds); poll again afterwards.
    pub fn reset(&mut self, deadline_ns: u64) {
        self.deadline_ns = Some(deadline_ns);
    }

    /// No deadline: the sleep stays pending.
    pub fn clear(&mut self) {
        self.deadline_ns = None;
    }

    /// The deadline, CLOCK_MONOTONIC nanoseconds; `None` when there is none.
    pub fn deadline_ns(&self) -> Option<u64> {
        self.deadline_ns
    }

    /// Whether the deadline has passed.
    pub fn is_elapsed(&self) -> bool {
        self.deadline_ns.is_some_and(|d| now_ns() >= d)
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let Some(deadline) = this.deadline_ns else {
            return Poll::Pending;
        };
        if now_ns() >= deadline {
            this.registered_ns = None;
            return Poll::Ready(());
        }
        {
            let mut w = this.slot.waker.lock().unwrap_or_else(|e| e.into_inner());
            match w.as_ref() {
                Some(old) if old.will_wake(cx.waker()) => {}
                _ => *w = Some(cx.waker().clone()),
            }
        }
        if this.registered_ns != Some(deadline) {
            this.shared.register(deadline, &this.slot);
            this.registered_ns = Some(deadline);
        }
        // The thread may have reached the deadline before the waker was in place; it found
        // none to wake, but then the deadline has passed by now.
        if now_ns() >= deadline {
            this.registered_ns = None;
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn sleeps_end_at_their_deadline_not_before() {
        let timer = PreciseTimer::start(false).unwrap();
        let rt = runtime();
        rt.block_on(async {
            for micros in [0u64, 50, 700, 1500, 2500] {
                let start = now_ns();
                let deadline = start + micros * 1000;
                timer.handle().sleep_until(deadline).await;
                assert!(now_ns() >= deadline);
            }
        });
        assert!(timer.stats().fired >= 3);
    }

    #[test]
    fn a_moved_deadline_is_honoured_both_ways() {
        let timer = PreciseTimer::start(false).unwrap();
        let rt = runtime();
        rt.block_on(async {
            let h = timer.handle();
            let mut s = h.sleep();
            // Never completes without a deadline.
            let idle = tokio::time::timeout(Duration::from_millis(5), &mut s).await;
            assert!(idle.is_err());
            // Registered for 200 ms, then moved to 2 ms: completes early.
            let start = now_ns();
            s.reset(start + 200_000_000);
            let first = tokio::time::timeout(Duration::from_millis(1), &mut s).await;
            assert!(first.is_err());
            s.reset(start + 2_000_000);
            (&mut s).await;
            let took = now_ns() - start;
            assert!((2_000_000..150_000_000).contains(&took), "{took}");
            // Moved later again: the stale 200 ms entry is harmless.
            let start = now_ns();
            s.reset(start + 3_000_000);
            (&mut s).await;
            assert!(now_ns() - start >= 3_000_000);
        });
    }

    /// Wakes are recorded in the order the timer thread makes them.
    struct Recorder {
        index: usize,
        order: Arc<Mutex<Vec<usize>>>,
    }

    impl std::task::Wake for Recorder {
        fn wake(self: Arc<Self>) {
            self.order.lock().unwrap().push(self.index);
        }
    }

    #[test]
    fn many_sleeps_are_woken_in_order_of_deadline() {
        let timer = PreciseTimer::start(false).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let start = now_ns();
        let n = 200;
        // Registered latest first, 50 µs apart: the heap must sort them.
        let mut sleeps: Vec<(usize, Sleep)> = (0..n)
            .rev()
            .map(|i| {
                (
                    i,
                    timer
                        .handle()
                        .sleep_until(start + 5_000_000 + i as u64 * 50_000),
                )
            })
            .collect();
        for (i, s) in &mut sleeps {
            let waker = Waker::from(Arc::new(Recorder {
                index: *i,
                order: Arc::clone(&order),
            }));
            let mut cx = Context::from_waker(&waker);
            assert!(Pin::new(s).poll(&mut cx).is_pending());
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while order.lock().unwrap().len() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "not every sleep was woken"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let got = order.lock().unwrap().clone();
        assert_eq!(got, (0..n).collect::<Vec<_>>());
        for (_, s) in &sleeps {
            assert!(s.is_elapsed());
        }
    }
}
