//! Virtual time and the queue of timed events that advances it.
//!
//! Nothing here reads a real clock: the simulator jumps from one event to the next, so hours
//! of network time pass in the milliseconds it takes to process their events.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

/// An instant of the simulated run: nanoseconds since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

impl SimTime {
    /// The run's start.
    pub const ZERO: SimTime = SimTime(0);

    /// This instant plus `d` (saturating).
    pub fn plus(self, d: Duration) -> SimTime {
        SimTime(self.0.saturating_add(nanos(d)))
    }

    /// Time from `earlier` to this instant; zero if `earlier` is later.
    pub fn since(self, earlier: SimTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The time as the pool's engine takes it (it decides in milliseconds).
    pub fn millis(self) -> pool::Millis {
        pool::Millis(self.0 / 1_000_000)
    }

    /// The time as the fleet's devices take it.
    pub fn device(self) -> fleet::Nanos {
        self.0
    }

    /// Seconds since the run started.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

/// A duration in whole nanoseconds (saturating: the simulator never runs for 584 years).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Events ordered by time; events at the same instant in the order they were scheduled, so a
/// run is a pure function of its inputs.
pub struct EventQueue<E> {
    heap: BinaryHeap<Scheduled<E>>,
    next_seq: u64,
    now: SimTime,
    popped: u64,
}

struct Scheduled<E> {
    at: SimTime,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<E> Eq for Scheduled<E> {}

impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Scheduled<E> {
    // Reversed: the heap is a max-heap and the earliest event must come out first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
            now: SimTime::ZERO,
            popped: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// The time of the event last taken out.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Events taken out so far.
    pub fn processed(&self) -> u64 {
        self.popped
    }

    /// Schedules `event` at `at`; an instant already past means "now" (time never runs back).
    pub fn at(&mut self, at: SimTime, event: E) {
        let at = at.max(self.now);
        self.heap.push(Scheduled {
            at,
            seq: self.next_seq,
            event,
        });
        self.next_seq += 1;
    }

    /// Schedules `event` `after` from now.
    pub fn after(&mut self, after: Duration, event: E) {
        self.at(self.now.plus(after), event);
    }

    /// The next event, advancing the clock to its time.
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        let s = self.heap.pop()?;
        self.now = s.at;
        self.popped += 1;
        Some((s.at, s.event))
    }

    /// Whether no event is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_by_time_then_by_scheduling_order() {
        let mut q = EventQueue::new();
        q.at(SimTime(30), "c");
        q.at(SimTime(10), "a1");
        q.at(SimTime(20), "b");
        q.at(SimTime(10), "a2");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![
                (SimTime(10), "a1"),
                (SimTime(10), "a2"),
                (SimTime(20), "b"),
                (SimTime(30), "c")
            ]
        );
        assert_eq!(q.now(), SimTime(30));
        assert_eq!(q.processed(), 4);
    }

    #[test]
    fn the_past_is_now() {
        let mut q = EventQueue::new();
        q.at(SimTime(100), 1);
        assert_eq!(q.pop(), Some((SimTime(100), 1)));
        q.at(SimTime(5), 2);
        q.after(Duration::from_nanos(7), 3);
        assert_eq!(q.pop(), Some((SimTime(100), 2)));
        assert_eq!(q.pop(), Some((SimTime(107), 3)));
        assert!(q.is_empty());
    }

    #[test]
    fn time_converts_to_the_cores_units() {
        let t = SimTime::ZERO.plus(Duration::from_millis(1_234) + Duration::from_nanos(999));
        assert_eq!(t.millis(), pool::Millis(1_234));
        assert_eq!(t.device(), 1_234_000_999);
        assert_eq!(
            t.since(SimTime(1_000_000_000)),
            Duration::from_nanos(234_000_999)
        );
    }
}
