//! One direction of one connection: when each chunk of bytes may leave the tap.
//!
//! A chunk is what one read from the sender returned. It may leave at
//! `max(sent + delay + jitter + loss penalty, release of the chunk ahead of it)`, where `sent`
//! is when the link's shared pipe has carried its last bit ([`crate::pipe`]; its arrival on an
//! unlimited link), the jitter is drawn uniformly in ±`jitter`, and the loss penalty is what
//! TCP's recovery would add ([`crate::loss`]). Taking the maximum with the chunk ahead keeps the
//! byte stream in order, as TCP does: jitter never reorders, and a lost chunk holds back the
//! chunks behind it. The end of the stream (the sender's FIN) travels the same way, so a
//! half-close is forwarded only after the data ahead of it.
//!
//! Sans-IO: times are CLOCK_MONOTONIC nanoseconds passed in by the caller; the randomness
//! comes from a ChaCha generator seeded per connection and direction ([`stream_seed`]), so a
//! run repeats with the same seed.

use std::collections::VecDeque;

use events::Direction;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::link::{ns, LinkConfig};
use crate::loss::{unit, LossModel, Outcome, MSS};
use crate::pipe::Pipe;

/// The seed of one connection's stream in one direction, from the run's seed.
pub fn stream_seed(seed: u64, conn: u64, dir: Direction) -> u64 {
    let lane = conn
        .wrapping_mul(2)
        .wrapping_add(matches!(dir, Direction::Down) as u64);
    splitmix64(seed ^ splitmix64(lane))
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[derive(Clone, Copy, Debug)]
struct Chunk {
    arrival_ns: u64,
    /// When the link could start carrying it: its arrival, or the end of the handshake.
    ready_ns: u64,
    len: usize,
    fin: bool,
    /// When it would reach the far end without loss (its natural time, before ordering).
    base_ns: u64,
    /// `base_ns` plus the loss penalty.
    release_ns: u64,
    backoff_ns: u64,
    /// A tail loss that later data may still reveal.
    awaiting: bool,
    lost: bool,
}

/// A chunk whose time has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    /// When it arrived at the tap (the kernel's receive stamp), CLOCK_MONOTONIC nanoseconds.
    pub arrival_ns: u64,
    /// When the link could start carrying it: after `arrival_ns` only while the connection's
    /// emulated handshake held it. The delay the link applied is measured from here.
    pub ready_ns: u64,
    /// When it was scheduled to leave (the caller may be a little late).
    pub release_ns: u64,
    /// Bytes; zero for the end of the stream.
    pub len: usize,
    /// The end of the stream: forward the half-close.
    pub fin: bool,
    /// It paid a loss penalty.
    pub lost: bool,
}

/// Counters of one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Chunks queued, the end of the stream included.
    pub chunks: u64,
    /// Application bytes queued.
    pub bytes: u64,
    /// Chunks that paid a loss penalty.
    pub lost: u64,
    /// Of those, tail losses that later data revealed before the retransmission timer.
    pub revealed: u64,
}

/// One direction of one connection: chunks in with their arrival times, release times out
/// (see the module documentation).
pub struct Stream {
    delay_ns: u64,
    jitter_ns: u64,
    loss: LossModel,
    rng: ChaCha8Rng,
    not_before_ns: u64,
    queue: VecDeque<Chunk>,
    last_release_ns: u64,
    /// Chunks in `queue` with `awaiting` set.
    awaiting: usize,
    /// The release of the last chunk queued, ordering included.
    tail_release_ns: u64,
    stats: StreamStats,
}

impl Stream {
    /// An empty stream for direction `dir` of `link`, drawing jitter and loss from `seed`
    /// ([`stream_seed`]).
    pub fn new(link: &LinkConfig, dir: Direction, seed: u64) -> Self {
        Stream {
            delay_ns: ns(link.delay(dir)),
            jitter_ns: ns(link.jitter),
            loss: LossModel::new(link.loss.probability(), ns(link.rtt())),
            rng: ChaCha8Rng::seed_from_u64(seed),
            not_before_ns: 0,
            queue: VecDeque::new(),
            last_release_ns: 0,
            awaiting: 0,
            tail_release_ns: 0,
            stats: StreamStats::default(),
        }
    }

    /// Nothing is sent before `not_before_ns` (the connection's emulated handshake).
    pub fn hold_until(&mut self, not_before_ns: u64) {
        self.not_before_ns = not_before_ns;
    }

    /// Records `len` bytes that arrived at `arrival_ns`, carried by `pipe` when the link has a
    /// bandwidth cap. Returns when they are scheduled to leave as of now (a later chunk may
    /// move a lost chunk earlier, never later).
    pub fn push(&mut self, arrival_ns: u64, len: usize, pipe: Option<&mut Pipe>) -> u64 {
        let ready = arrival_ns.max(self.not_before_ns);
        let sent = match pipe {
            Some(p) => p.transmit(ready, len),
            None => ready,
        };
        let base = self.propagate(sent);
        let segments = len.div_ceil(MSS).max(1);
        let outcome = self.loss.draw(segments, &mut self.rng);
        // A chunk that gets any segment through makes the receiver SACK past earlier holes.
        let reveals = !matches!(outcome, Outcome::Tail { .. }) || segments > 1;
        if reveals {
            self.reveal(base);
        }
        let (release_ns, backoff_ns, awaiting) = match outcome {
            Outcome::Delivered => (base, 0, false),
            Outcome::Recovered { penalty_ns } => (base.saturating_add(penalty_ns), 0, false),
            Outcome::Tail {
                penalty_ns,
                backoff_ns,
            } => (base.saturating_add(penalty_ns), backoff_ns, true),
        };
        let lost = outcome != Outcome::Delivered;
        self.stats.chunks += 1;
        self.stats.bytes += len as u64;
        self.stats.lost += lost as u64;
        self.awaiting += awaiting as usize;
        self.queue.push_back(Chunk {
            arrival_ns,
            ready_ns: ready,
            len,
            fin: false,
            base_ns: base,
            release_ns,
            backoff_ns,
            awaiting,
            lost,
        });
        self.tail_release_ns = self.tail_release_ns.max(release_ns);
        self.tail_release_ns
    }

    /// Records the end of the stream (the sender's FIN) arriving at `arrival_ns`. It is not
    /// lost and takes no bandwidth, but it is delayed and stays behind the data.
    pub fn push_fin(&mut self, arrival_ns: u64) {
        let ready = arrival_ns.max(self.not_before_ns);
        let base = self.propagate(ready);
        self.reveal(base);
        self.queue.push_back(Chunk {
            arrival_ns,
            ready_ns: ready,
            len: 0,
            fin: true,
            base_ns: base,
            release_ns: base,
            backoff_ns: 0,
            awaiting: false,
            lost: false,
        });
        self.tail_release_ns = self.tail_release_ns.max(base);
    }

    /// When the next chunk may leave; `None` when nothing is queued.
    pub fn next_release_ns(&self) -> Option<u64> {
        self.queue
            .front()
            .map(|c| c.release_ns.max(self.last_release_ns))
    }

    /// The next chunk, if it may leave by `now_ns`.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<Released> {
        let release_ns = self.next_release_ns()?;
        if release_ns > now_ns {
            return None;
        }
        let c = self.queue.pop_front()?;
        self.last_release_ns = release_ns;
        if c.awaiting {
            self.awaiting -= 1;
        }
        Some(Released {
            arrival_ns: c.arrival_ns,
            ready_ns: c.ready_ns,
            release_ns,
            len: c.len,
            fin: c.fin,
            lost: c.lost,
        })
    }

    /// Whether no chunk is waiting.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Chunks waiting.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The stream's counters so far.
    pub fn stats(&self) -> StreamStats {
        self.stats
    }

    /// When a chunk sent (its last bit out) at `sent_ns` reaches the far end: the delay plus a
    /// jitter drawn in ±jitter, never before it was sent.
    fn propagate(&mut self, sent_ns: u64) -> u64 {
        let mut t = sent_ns.saturating_add(self.delay_ns);
        if self.jitter_ns > 0 {
            let offset = (unit(&mut self.rng) * 2.0 - 1.0) * self.jitter_ns as f64;
            t = (t as f64 + offset).round().max(sent_ns as f64) as u64;
        }
        t
    }

    /// Later data reaching the far end at `later_base_ns` reveals every tail loss still
    /// waiting for its timer.
    fn reveal(&mut self, later_base_ns: u64) {
        if self.awaiting == 0 {
            return;
        }
        for c in self.queue.iter_mut().filter(|c| c.awaiting) {
            let revealed = self.loss.resolve(c.base_ns, c.backoff_ns, later_base_ns);
            if revealed < c.release_ns {
                c.release_ns = revealed;
                self.stats.revealed += 1;
            }
            c.awaiting = false;
        }
        self.awaiting = 0;
        // Rare (a loss followed by more data): recomputing is cheaper than tracking.
        self.tail_release_ns = self
            .queue
            .iter()
            .map(|c| c.release_ns)
            .fold(self.last_release_ns, u64::max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{Bandwidth, LossRate};
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn link(delay_ms: u64) -> LinkConfig {
        LinkConfig::symmetric(Duration::from_millis(delay_ms))
    }

    /// Pops everything, advancing time to each release; returns the releases.
    fn drain(s: &mut Stream) -> Vec<Released> {
        let mut out = Vec::new();
        while let Some(t) = s.next_release_ns() {
            if t > 0 {
                assert!(s.pop_due(t - 1).is_none(), "early");
            }
            out.push(s.pop_due(t).expect("due at its release time"));
        }
        out
    }

    #[test]
    fn a_delay_is_added_exactly() {
        let mut s = Stream::new(&link(72), Direction::Up, 1);
        s.push(1_000, 100, None);
        s.push(5_000_000, 50, None);
        assert_eq!(s.next_release_ns(), Some(1_000 + 72 * MS));
        assert!(s.pop_due(1_000 + 72 * MS - 1).is_none());
        let r = drain(&mut s);
        assert_eq!(r[0].release_ns, 1_000 + 72 * MS);
        assert_eq!(r[0].len, 100);
        assert_eq!(r[1].release_ns, 5 * MS + 72 * MS);
        assert_eq!(r[1].arrival_ns, 5 * MS);
        assert!(s.is_empty());
        // A fractional millisecond is kept: 72.5 ms is 72.5 ms.
        let l = LinkConfig::symmetric(Duration::from_micros(72_500));
        let mut s = Stream::new(&l, Direction::Down, 1);
        assert_eq!(s.push(0, 10, None), 72_500_000);
    }

    #[test]
    fn each_direction_has_its_own_delay() {
        let l = LinkConfig {
            delay_up: Duration::from_millis(10),
            delay_down: Duration::from_millis(30),
            ..LinkConfig::default()
        };
        let mut up = Stream::new(&l, Direction::Up, 1);
        let mut down = Stream::new(&l, Direction::Down, 1);
        assert_eq!(up.push(0, 1, None), 10 * MS);
        assert_eq!(down.push(0, 1, None), 30 * MS);
    }

    #[test]
    fn zero_delay_releases_at_arrival() {
        let mut s = Stream::new(&LinkConfig::default(), Direction::Up, 1);
        s.push(7, 3, None);
        assert_eq!(s.pop_due(7).map(|r| r.len), Some(3));
    }

    #[test]
    fn jitter_never_reorders_and_spans_its_range() {
        let l = LinkConfig {
            jitter: Duration::from_millis(20),
            ..link(50)
        };
        let mut s = Stream::new(&l, Direction::Up, 9);
        // Chunks 1 ms apart: much closer than the jitter, so ordering must bind often.
        let n = 5000u64;
        for i in 0..n {
            s.push(i * MS, 10, None);
        }
        let r = drain(&mut s);
        assert_eq!(r.len(), n as usize);
        let mut clamped = 0;
        for w in r.windows(2) {
            assert!(w[1].release_ns >= w[0].release_ns, "reordered");
            assert!(w[1].arrival_ns > w[0].arrival_ns, "popped out of order");
            clamped += (w[1].release_ns == w[0].release_ns) as u32;
        }
        assert!(clamped > 0, "ordering never had to hold a chunk back");
        for c in &r {
            let d = c.release_ns - c.arrival_ns;
            assert!(d >= 30 * MS, "{d}");
            // Held behind a predecessor at most as far as the predecessor's own jitter.
            assert!(d <= 70 * MS, "{d}");
        }
        // Far apart, nothing binds: the delays spread over ±jitter around the delay.
        let mut s = Stream::new(&l, Direction::Up, 10);
        let mut offsets = Vec::new();
        for i in 0..4000u64 {
            let t = i * 100 * MS;
            let rel = s.push(t, 10, None);
            offsets.push(rel as i64 - (t + 50 * MS) as i64);
        }
        let min = *offsets.iter().min().unwrap();
        let max = *offsets.iter().max().unwrap();
        let mean = offsets.iter().sum::<i64>() as f64 / offsets.len() as f64;
        assert!(min >= -20 * MS as i64 && min < -19 * MS as i64, "{min}");
        assert!(max <= 20 * MS as i64 && max > 19 * MS as i64, "{max}");
        assert!(mean.abs() < 0.6 * MS as f64, "{mean}");
    }

    #[test]
    fn jitter_is_repeatable_with_a_seed() {
        let l = LinkConfig {
            jitter: Duration::from_millis(5),
            loss: LossRate::from_percent(3.0).unwrap(),
            ..link(20)
        };
        let run = |seed| {
            let mut s = Stream::new(&l, Direction::Down, seed);
            (0..500u64)
                .map(|i| s.push(i * 3 * MS, 200, None))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
        assert_ne!(
            stream_seed(1, 7, Direction::Up),
            stream_seed(1, 7, Direction::Down)
        );
        assert_ne!(
            stream_seed(1, 7, Direction::Up),
            stream_seed(1, 8, Direction::Up)
        );
        assert_ne!(
            stream_seed(1, 7, Direction::Up),
            stream_seed(2, 7, Direction::Up)
        );
    }

    #[test]
    fn the_end_of_stream_waits_behind_the_data() {
        let l = LinkConfig {
            jitter: Duration::from_millis(10),
            ..link(20)
        };
        let mut s = Stream::new(&l, Direction::Up, 3);
        s.push(0, 10, None);
        s.push(MS, 10, None);
        s.push_fin(MS + 1);
        let r = drain(&mut s);
        assert_eq!(r.len(), 3);
        assert!(r[2].fin && r[2].len == 0);
        assert!(!r[0].fin && !r[1].fin);
        assert!(r[2].release_ns >= r[1].release_ns);
        assert!(r[2].release_ns >= MS + 1 + 10 * MS);
    }

    #[test]
    fn a_shared_pipe_paces_two_connections() {
        // 8 Mbit/s: one byte per microsecond. Two streams each send 10 full segments at once.
        let l = link(10);
        let mut pipe = Pipe::new(Bandwidth::from_bits_per_sec(8_000_000));
        let mut a = Stream::new(&l, Direction::Up, 1);
        let mut b = Stream::new(&l, Direction::Up, 2);
        let seg = (MSS as u64 + crate::pipe::WIRE_OVERHEAD) * 1000; // ns per segment
        for _ in 0..10 {
            a.push(0, MSS, Some(&mut pipe));
            b.push(0, MSS, Some(&mut pipe));
        }
        let ra = drain(&mut a);
        let rb = drain(&mut b);
        // Interleaved first-come first-served: a's k-th segment is the pipe's (2k+1)-th.
        for k in 0..10u64 {
            assert_eq!(ra[k as usize].release_ns, (2 * k + 1) * seg + 10 * MS);
            assert_eq!(rb[k as usize].release_ns, (2 * k + 2) * seg + 10 * MS);
        }
    }

    #[test]
    fn a_lost_chunk_holds_back_the_ones_behind_it() {
        // Certain loss on the first chunk (every retransmission too), then none.
        let l = LinkConfig {
            loss: LossRate::from_percent(100.0).unwrap(),
            ..link(50)
        };
        let mut s = Stream::new(&l, Direction::Up, 1);
        let first = s.push(0, 100, None);
        let rto = 100 * MS + 200 * MS;
        assert!(first >= 50 * MS + rto, "{first}");
        s.loss = LossModel::new(0.0, 100 * MS);
        // Far enough behind that it reveals the hole only after the timer has fired.
        let behind = s.push(400 * MS, 10, None);
        assert_eq!(behind, first, "held behind the lost chunk");
        let r = drain(&mut s);
        assert!(r[0].lost && !r[1].lost);
        assert_eq!(r[0].release_ns, first);
        assert_eq!(r[1].release_ns, first);
        assert_eq!(s.stats().lost, 1);
        assert_eq!(s.stats().revealed, 0);
        // With the hole filled, the stream runs at its delay again.
        assert_eq!(s.push(first, 10, None), first + 50 * MS);
    }

    #[test]
    fn later_data_reveals_a_tail_loss_before_the_timer() {
        let l = LinkConfig {
            loss: LossRate::from_percent(100.0).unwrap(),
            ..link(50)
        };
        let mut s = Stream::new(&l, Direction::Up, 1);
        s.loss = LossModel::new(1.0, 100 * MS);
        let first = s.push(0, 100, None);
        assert!(first >= 350 * MS);
        // Make the retransmission certain to get through, then send more data 10 ms later.
        s.loss = LossModel::new(0.0, 100 * MS);
        let Some(Chunk { backoff_ns, .. }) = s.queue.front().copied() else {
            unreachable!()
        };
        s.push(10 * MS, 10, None);
        let r = drain(&mut s);
        // Its SACK is back one RTT after it arrived (60 ms + 100 ms), but RACK waits a quarter
        // RTT more past the lost chunk's own time (50 ms + 125 ms): the later of the two.
        assert_eq!(r[0].release_ns, 50 * MS + 125 * MS + backoff_ns);
        assert_eq!(r[1].release_ns, r[0].release_ns.max(60 * MS));
        assert_eq!(s.stats().revealed, 1);
    }

    #[test]
    fn the_handshake_holds_the_first_bytes() {
        let l = link(50);
        let mut s = Stream::new(&l, Direction::Up, 1);
        s.hold_until(100 * MS);
        assert_eq!(s.push(MS, 10, None), 150 * MS);
        assert_eq!(s.push(200 * MS, 10, None), 250 * MS);
        let r = drain(&mut s);
        // The link's delay counts from the end of the handshake, not from the arrival.
        assert_eq!((r[0].arrival_ns, r[0].ready_ns), (MS, 100 * MS));
        assert_eq!((r[1].arrival_ns, r[1].ready_ns), (200 * MS, 200 * MS));
    }

    #[test]
    fn counts_what_it_carried() {
        let mut s = Stream::new(&link(1), Direction::Down, 1);
        s.push(0, 100, None);
        s.push(0, 23, None);
        s.push_fin(0);
        assert_eq!(s.queued(), 3);
        let st = s.stats();
        assert_eq!((st.chunks, st.bytes, st.lost), (2, 123, 0));
        let r = drain(&mut s);
        assert_eq!(r.iter().map(|c| c.len).sum::<usize>(), 123);
    }
}
