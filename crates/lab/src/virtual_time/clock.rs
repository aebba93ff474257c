//! Virtual time and the queue of timed events that advances it.
//!
//! Nothing here reads a real clock: the simulator jumps from one event to the next, so hours
//! of network time pass in the milliseconds it takes to process their events.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

use primitives::Timestamp;

/// A duration in whole nanoseconds (saturating: the simulator never runs for 584 years).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Events ordered by time; events at the same instant in the order they were scheduled, so a
/// run is a pure function of its inputs.
pub struct EventQueue<E> {
    heap: BinaryHeap<Scheduled<E>>,
    next_seq: u64,
    now: Timestamp,
    popped: u64,
}

struct Scheduled<E> {
    at: Timestamp,
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
            now: Timestamp::ZERO,
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
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Events taken out so far.
    pub fn processed(&self) -> u64 {
        self.popped
    }

    /// Schedules `event` at `at`; an instant already past means "now" (time never runs back).
    pub fn at(&mut self, at: Timestamp, event: E) {
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
        self.at(self.now + after, event);
    }

    /// The next event, advancing the clock to its time.
    pub fn pop(&mut self) -> Option<(Timestamp, E)> {
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
        q.at(Timestamp::from_nanos(30), "c");
        q.at(Timestamp::from_nanos(10), "a1");
        q.at(Timestamp::from_nanos(20), "b");
        q.at(Timestamp::from_nanos(10), "a2");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![
                (Timestamp::from_nanos(10), "a1"),
                (Timestamp::from_nanos(10), "a2"),
                (Timestamp::from_nanos(20), "b"),
                (Timestamp::from_nanos(30), "c")
            ]
        );
        assert_eq!(q.now(), Timestamp::from_nanos(30));
        assert_eq!(q.processed(), 4);
    }

    #[test]
    fn the_past_is_now() {
        let mut q = EventQueue::new();
        q.at(Timestamp::from_nanos(100), 1);
        assert_eq!(q.pop(), Some((Timestamp::from_nanos(100), 1)));
        q.at(Timestamp::from_nanos(5), 2);
        q.after(Duration::from_nanos(7), 3);
        assert_eq!(q.pop(), Some((Timestamp::from_nanos(100), 2)));
        assert_eq!(q.pop(), Some((Timestamp::from_nanos(107), 3)));
        assert!(q.is_empty());
    }
}
