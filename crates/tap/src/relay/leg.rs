//! One direction of a relayed connection under link emulation, shared by the plain relay and
//! the SV2 terminating relay: bytes queued as chunks with their arrival times, held by the
//! direction's [`Stream`] (and the bandwidth cap's [`crate::pipe::Pipe`]) until their release,
//! then written to the destination socket.
//!
//! What the bytes are is the relay's business: the plain relay queues what it read, the SV2
//! relay what it re-encrypted; each reads a chunk as it leaves through [`Leg::release`].

use std::io;

use events::{now_ns, Direction};
use tokio::net::TcpStream;

use super::Shared;
use crate::counter::ByteCounter;
use crate::link::ns;
use crate::net;
use crate::stats::TapStats;
use crate::stream::{stream_seed, Stream};
use crate::timer::Sleep;

/// Bytes asked for per read: a Stratum message is far smaller, a bulk transfer reads again.
pub(crate) const READ_SIZE: usize = 4096;
/// An emptied buffer larger than this is given back, so that a burst does not pin memory on
/// an idle connection.
pub(crate) const KEEP_CAPACITY: usize = 64 * 1024;

/// One read appended to `buf`: `None` when nothing is waiting, a length of zero at the end of
/// the stream, with the arrival time of the bytes (the kernel's receive stamp when the socket
/// stamps them: a tap that gets to a read late does not add its lateness to the delay).
pub(crate) fn recv(src: &TcpStream, buf: &mut Vec<u8>) -> io::Result<Option<(usize, u64)>> {
    buf.reserve(READ_SIZE);
    loop {
        match net::recv_stamped(src, buf) {
            Ok((0, _)) => return Ok(Some((0, now_ns()))),
            Ok((n, stamp)) => return Ok(Some((n, net::rx_monotonic_ns(stamp)))),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

pub(crate) struct Leg {
    dir: Direction,
    /// Index of this direction's pipe (up, down).
    lane: usize,
    stream: Stream,
    /// Bytes waiting here beyond which the source is not read (`buffer_bytes`, at least 1).
    cap: usize,
    /// `buf[start..]` is what has been queued and not yet written; of it, the first `due`
    /// bytes are released (ready to write).
    buf: Vec<u8>,
    start: usize,
    due: usize,
    eof_read: bool,
    fin_due: bool,
    pub(crate) fin_sent: bool,
    /// Bytes written to the destination.
    pub(crate) written: ByteCounter,
    pub(crate) sleep: Sleep,
    pub(crate) last_applied_ns: u64,
    /// A chunk was released since the last `LinkRtt`.
    pub(crate) fresh: bool,
    lost_reported: u64,
}

impl Leg {
    pub(crate) fn new(shared: &Shared, conn: u64, dir: Direction, accepted_ns: u64) -> Self {
        let link = &shared.config.link;
        let mut stream = Stream::new(link, dir, stream_seed(shared.config.seed, conn, dir));
        stream.hold_until(accepted_ns.saturating_add(ns(link.handshake_hold(dir))));
        Leg {
            dir,
            lane: matches!(dir, Direction::Down) as usize,
            stream,
            cap: shared.config.buffer_bytes.max(1),
            buf: Vec::new(),
            start: 0,
            due: 0,
            eof_read: false,
            fin_due: false,
            fin_sent: false,
            written: ByteCounter::default(),
            sleep: shared.timer.sleep(),
            last_applied_ns: 0,
            fresh: false,
            lost_reported: 0,
        }
    }

    pub(crate) fn dir(&self) -> Direction {
        self.dir
    }

    /// Whether its source is read: not after its end, nor while `cap` bytes wait here.
    pub(crate) fn wants_read(&self) -> bool {
        !self.eof_read && self.buf.len() - self.start < self.cap
    }

    /// Reads everything available from `src` (up to the buffer cap), each read a chunk of its
    /// own.
    pub(crate) fn read(&mut self, src: &TcpStream, shared: &Shared) -> io::Result<()> {
        while self.wants_read() {
            match recv(src, &mut self.buf)? {
                None => break,
                Some((0, arrival)) => self.push_fin(arrival),
                Some((n, arrival)) => self.queue(arrival, n, shared),
            }
        }
        Ok(())
    }

    /// Queues a copy of `bytes` as one chunk that arrived at `arrival_ns`.
    pub(crate) fn push(&mut self, arrival_ns: u64, bytes: &[u8], shared: &Shared) {
        self.buf.extend_from_slice(bytes);
        self.queue(arrival_ns, bytes.len(), shared);
    }

    /// The source ended at `arrival_ns`: the FIN follows what is queued.
    pub(crate) fn push_fin(&mut self, arrival_ns: u64) {
        self.eof_read = true;
        self.stream.push_fin(arrival_ns);
    }

    /// The last `len` bytes of the buffer are one chunk that arrived at `arrival_ns`.
    fn queue(&mut self, arrival_ns: u64, len: usize, shared: &Shared) {
        match &shared.pipes {
            Some(pipes) => {
                let mut pipe = pipes[self.lane].lock().unwrap_or_else(|e| e.into_inner());
                self.stream.push(arrival_ns, len, Some(&mut pipe));
            }
            None => {
                self.stream.push(arrival_ns, len, None);
            }
        }
    }

    /// Marks the chunks due by `now` as ready to write, handing each to `observe` first.
    pub(crate) fn release(&mut self, now: u64, stats: &TapStats, mut observe: impl FnMut(&[u8])) {
        while let Some(r) = self.stream.pop_due(now) {
            if r.fin {
                self.fin_due = true;
                continue;
            }
            let from = self.start + self.due;
            observe(&self.buf[from..from + r.len]);
            self.due += r.len;
            // From when the link could carry it: the handshake's hold is not link delay.
            let applied = now.saturating_sub(r.ready_ns);
            stats.record_release(self.dir, applied, now.saturating_sub(r.release_ns));
            self.last_applied_ns = applied;
            self.fresh = true;
        }
    }

    /// Writes what is released; forwards the FIN once everything ahead of it is written.
    /// Returns whether the destination is full.
    pub(crate) fn write(&mut self, dst: &TcpStream) -> io::Result<bool> {
        while self.due > 0 {
            match dst.try_write(&self.buf[self.start..self.start + self.due]) {
                Ok(n) => {
                    self.start += n;
                    self.due -= n;
                    self.written.add(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.compact();
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.fin_due && !self.fin_sent {
            net::shutdown_write(dst)?;
            self.fin_sent = true;
        }
        self.compact();
        Ok(false)
    }

    fn compact(&mut self) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            if self.buf.capacity() > KEEP_CAPACITY {
                self.buf.shrink_to(READ_SIZE);
            }
        } else if self.start >= self.buf.len() / 2 {
            // Copies at most as many bytes as were consumed: amortized constant per byte.
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }

    /// Points the sleep at the next release; `false` when nothing waits for one.
    pub(crate) fn arm(&mut self) -> bool {
        match self.stream.next_release_ns() {
            Some(t) => {
                self.sleep.reset(t);
                true
            }
            None => {
                self.sleep.clear();
                false
            }
        }
    }

    /// Adds the chunks the loss model lost since the last call to the tap's totals.
    pub(crate) fn report_lost(&mut self, stats: &TapStats) {
        let lost = self.stream.stats().lost;
        if lost > self.lost_reported {
            stats.add_lost(self.dir, lost - self.lost_reported);
            self.lost_reported = lost;
        }
    }
}
