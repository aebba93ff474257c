//! A role's own socket bytes on one link, reported as `LinkBytes` deltas (docs/metrics.md
//! `roles.<name>.net_*_bytes`: /proc cannot give per-process network bytes). Servers count what
//! they read as `Up` and what they write as `Down`; `conn` 0 stands for the whole endpoint.
//!
//! The role that frames the messages also counts them by type ([`LinkCounter::add_message`]),
//! reported as `LinkMessages` deltas: on a Noise-encrypted link nobody else can tell a share
//! from a job (docs/metrics.md, "Protocol cost").

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;

use crate::{Direction, EventSink, LinkBytes, LinkHandshake, LinkMessages, ShortStr};

/// The name a Noise handshake is counted under among a link's messages.
pub const HANDSHAKE: &str = "noise_handshake";

/// How often a client link's counts are reported while it is up ([`LinkCounter::report`]):
/// the lab's measured window is cut to the second, and a link gone quiet reports nothing.
pub const REPORT_EVERY: Duration = Duration::from_millis(500);

/// Distinct message names one counter keeps apart; any beyond share the last slot.
const MESSAGE_SLOTS: usize = 48;

/// The name a message past the table's capacity is counted under.
const OTHER: &str = "other";

/// Shards the counts are spread over: each thread adds to one of its own, so that the worker
/// threads of a busy role do not pass one cache line to and fro on every message (the
/// `sv1_share` bench measures counting with every thread at it).
const SHARDS: usize = 16;

/// One thread's share of a counter's counts.
#[derive(Debug)]
#[repr(align(128))]
struct Shard {
    rx: AtomicU64,
    tx: AtomicU64,
    /// Per message slot: up then down, each [count, wire bytes, payload bytes].
    messages: [[AtomicU64; 6]; MESSAGE_SLOTS],
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            rx: AtomicU64::new(0),
            tx: AtomicU64::new(0),
            messages: std::array::from_fn(|_| Default::default()),
        }
    }
}

/// The shard the calling thread adds to: threads take shards in turn as they first count.
fn my_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    MINE.with(|m| *m)
}

/// Per message name and direction: counts, kept lock-free (the pool counts every share).
#[derive(Debug)]
struct MessageCounts {
    /// Each slot's name: its `&'static str`, boxed once so that it fits an atomic pointer;
    /// null: free.
    names: Box<[AtomicPtr<&'static str>]>,
    /// What was reported so far, per slot: up then down, each [count, wire, payload].
    reported: Mutex<Vec<[u64; 6]>>,
}

impl MessageCounts {
    fn new() -> Self {
        MessageCounts {
            names: (0..MESSAGE_SLOTS).map(|_| AtomicPtr::default()).collect(),
            reported: Mutex::new(vec![[0; 6]; MESSAGE_SLOTS]),
        }
    }

    /// The slot of `name`, claimed on first use. Names are `&'static str`s from a few fixed
    /// tables, so equal names compare fast by address, and by text when two tables share one.
    fn slot(&self, name: &'static str) -> usize {
        for (i, slot) in self.names.iter().enumerate() {
            let mut p = slot.load(Ordering::Acquire);
            if p.is_null() {
                let mine = Box::into_raw(Box::new(name));
                match slot.compare_exchange(
                    std::ptr::null_mut(),
                    mine,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return i,
                    Err(theirs) => {
                        // SAFETY: `mine` came from Box::into_raw above and was never shared.
                        drop(unsafe { Box::from_raw(mine) });
                        p = theirs;
                    }
                }
            }
            // SAFETY: a non-null pointer was stored from Box::into_raw and is only freed in
            // Drop, which needs `&mut self`.
            let held: &'static str = unsafe { *p };
            if held.as_ptr() == name.as_ptr() && held.len() == name.len() || held == name {
                return i;
            }
            if i == self.names.len() - 2 && name != OTHER {
                return self.slot(OTHER);
            }
        }
        self.names.len() - 1
    }

    /// The name in slot `i`, if claimed.
    fn name(&self, i: usize) -> Option<&'static str> {
        let p = self.names[i].load(Ordering::Acquire);
        // SAFETY: see MessageCounts::slot.
        (!p.is_null()).then(|| unsafe { *p })
    }
}

impl Drop for MessageCounts {
    fn drop(&mut self) {
        for slot in self.names.iter() {
            let p = slot.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: stored from Box::into_raw; no other reference survives `&mut self`.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

/// Which end of a link a role's socket is: decides which way its reads and writes go (up is
/// toward the pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The end nearer the pool: what it reads goes up and what it writes goes down. Usually
    /// the end that accepted the connection (it serves the side further from the pool); also a
    /// pool or JDC reading its Template Provider, whose templates come toward the pool.
    Server,
    /// The end further from the pool, which opened the connection toward it: what it writes
    /// goes up.
    Client,
}

/// Bytes read and written on one endpoint's sockets, and how much of them has been reported.
#[derive(Debug)]
pub struct LinkCounter {
    link: ShortStr,
    shards: Box<[Shard]>,
    reported: Mutex<(u64, u64)>,
    messages: MessageCounts,
    /// Handshakes not reported yet: (duration ns, up bytes, down bytes).
    handshakes: Mutex<Vec<(u64, u64, u64)>>,
}

impl LinkCounter {
    /// A counter for the link named `link` (as in [`LinkBytes::link`]), shared by the endpoint's
    /// connections.
    pub fn new(link: &str) -> Arc<LinkCounter> {
        Arc::new(LinkCounter {
            link: ShortStr::new(link),
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            reported: Mutex::new((0, 0)),
            messages: MessageCounts::new(),
            handshakes: Mutex::new(Vec::new()),
        })
    }

    /// A Noise handshake `side` completed in `duration`, having read `read` and written
    /// `written` bytes: reported as a `LinkHandshake`, and counted among the messages as
    /// [`HANDSHAKE`] (the bytes themselves go through [`LinkCounter::add_read`] and
    /// [`LinkCounter::add_written`] as any others).
    pub fn add_handshake(&self, side: Side, duration: Duration, read: usize, written: usize) {
        self.add_message(side, true, HANDSHAKE, read, 0);
        self.add_message(side, false, HANDSHAKE, written, 0);
        let (up, down) = match side {
            Side::Server => (read, written),
            Side::Client => (written, read),
        };
        self.handshakes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((duration.as_nanos() as u64, up as u64, down as u64));
    }

    /// One message `side` read (`read`) or wrote, named `name`: `wire` bytes on the socket, of
    /// which `payload` are the message's own. Counts what [`LinkCounter::add_read`] and
    /// [`LinkCounter::add_written`] do not: the caller counts the bytes there too.
    pub fn add_message(
        &self,
        side: Side,
        read: bool,
        name: &'static str,
        wire: usize,
        payload: usize,
    ) {
        let up = matches!((side, read), (Side::Server, true) | (Side::Client, false));
        let slot = &self.shards[my_shard()].messages[self.messages.slot(name)];
        let c = if up { &slot[..3] } else { &slot[3..] };
        c[0].fetch_add(1, Ordering::Relaxed);
        c[1].fetch_add(wire as u64, Ordering::Relaxed);
        c[2].fetch_add(payload as u64, Ordering::Relaxed);
    }

    /// The link's name.
    pub fn link(&self) -> &str {
        self.link.as_str()
    }

    /// Bytes read from clients.
    pub fn add_rx(&self, n: usize) {
        self.shards[my_shard()]
            .rx
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Bytes written to clients.
    pub fn add_tx(&self, n: usize) {
        self.shards[my_shard()]
            .tx
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Bytes `side` read from its socket, in the link's direction.
    pub fn add_read(&self, side: Side, n: usize) {
        match side {
            Side::Server => self.add_rx(n),
            Side::Client => self.add_tx(n),
        }
    }

    /// Bytes `side` wrote to its socket, in the link's direction.
    pub fn add_written(&self, side: Side, n: usize) {
        match side {
            Side::Server => self.add_tx(n),
            Side::Client => self.add_rx(n),
        }
    }

    /// One line a line framer handed over (its end already cut off), named by `kind`: its
    /// wire bytes are the text and one byte for its end (a framer drops a `\r` unseen).
    pub fn add_line(&self, side: Side, read: bool, line: &[u8], kind: fn(&[u8]) -> &'static str) {
        self.add_message(side, read, kind(line), line.len() + 1, line.len());
    }

    /// Every whole line in `bytes` as one message each, named by `kind` (the line without its
    /// end): for line-framed protocols (SV1), whose wire bytes are the line and its `\n`, and
    /// whose payload is the line's text (without a `\r` before the `\n`).
    pub fn add_lines(
        &self,
        side: Side,
        read: bool,
        bytes: &[u8],
        kind: impl Fn(&[u8]) -> &'static str,
    ) {
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            let Some(text) = line.strip_suffix(b"\n") else {
                continue;
            };
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if !text.is_empty() {
                self.add_message(side, read, kind(text), line.len(), text.len());
            }
        }
    }

    /// (read, written) so far.
    pub fn totals(&self) -> (u64, u64) {
        self.shards.iter().fold((0, 0), |(rx, tx), s| {
            (
                rx + s.rx.load(Ordering::Relaxed),
                tx + s.tx.load(Ordering::Relaxed),
            )
        })
    }

    /// Slot `i`'s counts summed over the shards: up then down, each [count, wire, payload].
    fn message_counts(&self, i: usize) -> [u64; 6] {
        let mut sum = [0; 6];
        for shard in self.shards.iter() {
            for (total, c) in sum.iter_mut().zip(&shard.messages[i]) {
                *total += c.load(Ordering::Relaxed);
            }
        }
        sum
    }

    /// Emits what was counted since the last report, one `LinkBytes` per direction that moved.
    pub fn report(&self, sink: &EventSink) {
        if !sink.is_enabled() {
            return;
        }
        let mut last = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        let (rx, tx) = self.totals();
        for (now, before, direction) in [(rx, last.0, Direction::Up), (tx, last.1, Direction::Down)]
        {
            if now > before {
                sink.emit(LinkBytes {
                    link: self.link,
                    conn: 0,
                    direction,
                    bytes: now - before,
                });
            }
        }
        *last = (rx, tx);
        drop(last);
        let done = std::mem::take(&mut *self.handshakes.lock().unwrap_or_else(|p| p.into_inner()));
        for (duration_ns, up_bytes, down_bytes) in done {
            sink.emit(LinkHandshake {
                link: self.link,
                duration_ns,
                up_bytes,
                down_bytes,
            });
        }
        let mut last = self
            .messages
            .reported
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (i, before) in last.iter_mut().enumerate() {
            let Some(name) = self.messages.name(i) else {
                break;
            };
            let counts = self.message_counts(i);
            for (dir, at) in [(Direction::Up, 0usize), (Direction::Down, 3usize)] {
                let now = &counts[at..at + 3];
                // Loaded one by one: a report may see a message's count before its bytes, which
                // the next report then carries.
                if now[..] != before[at..at + 3] {
                    sink.emit(LinkMessages {
                        link: self.link,
                        direction: dir,
                        message: ShortStr::new(name),
                        count: now[0] - before[at],
                        bytes: now[1] - before[at + 1],
                        payload_bytes: now[2] - before[at + 2],
                    });
                    before[at..at + 3].copy_from_slice(now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_writes_and_a_servers_reads_go_up() {
        let c = LinkCounter::new("l");
        c.add_written(Side::Client, 10);
        c.add_read(Side::Server, 10);
        c.add_read(Side::Client, 3);
        c.add_written(Side::Server, 3);
        // (up, down): what travels toward the pool, counted at both ends.
        assert_eq!(c.totals(), (20, 6));
    }

    #[test]
    fn messages_are_counted_by_name_and_direction_and_reported_as_deltas() {
        let c = LinkCounter::new("wan");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.ev");
        let sink = EventSink::create(&path, "t", "c").unwrap();
        // A pool (server) reads two shares and writes one job.
        c.add_message(Side::Server, true, "SubmitSharesStandard", 54, 32);
        c.add_message(Side::Server, true, "SubmitSharesStandard", 54, 32);
        c.add_message(Side::Server, false, "NewMiningJob", 72, 50);
        // A client writing a share sends it up too, under an equal name from another table.
        let other: &'static str = Box::leak(String::from("SubmitSharesStandard").into_boxed_str());
        c.add_message(Side::Client, false, other, 54, 32);
        c.report(&sink);
        c.report(&sink);
        c.add_message(Side::Server, false, "NewMiningJob", 72, 50);
        c.report(&sink);
        drop(sink);
        let log = crate::read_file(&path).unwrap();
        let got: Vec<_> = log
            .events
            .iter()
            .filter_map(|e| match e.kind {
                crate::EventKind::LinkMessages(m) => Some((
                    m.direction,
                    m.message.as_str().to_owned(),
                    m.count,
                    m.bytes,
                    m.payload_bytes,
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            got,
            [
                (Direction::Up, "SubmitSharesStandard".into(), 3, 162, 96),
                (Direction::Down, "NewMiningJob".into(), 1, 72, 50),
                (Direction::Down, "NewMiningJob".into(), 1, 72, 50),
            ]
        );
    }

    #[test]
    fn lines_are_messages_and_a_line_cut_short_is_not() {
        let c = LinkCounter::new("sv1");
        let kind = |l: &[u8]| {
            if l.starts_with(b"{\"id\":null") {
                "notify"
            } else {
                "response"
            }
        };
        c.add_lines(
            Side::Server,
            false,
            b"{\"id\":null}\n{\"id\":1}\r\n\n{\"id\":2",
            kind,
        );
        let down = |name| c.message_counts(c.messages.slot(name))[3..].to_vec();
        assert_eq!(down("notify"), [1, 12, 11]);
        assert_eq!(down("response"), [1, 10, 8]);
    }

    #[test]
    fn counts_from_many_threads_add_up_exactly() {
        let c = LinkCounter::new("l");
        let threads = SHARDS + 3;
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..1000 {
                        c.add_read(Side::Server, 7);
                        c.add_written(Side::Server, 2);
                        c.add_message(Side::Server, true, "SubmitSharesStandard", 7, 5);
                    }
                });
            }
        });
        let n = threads as u64 * 1000;
        assert_eq!(c.totals(), (7 * n, 2 * n));
        let slot = c.messages.slot("SubmitSharesStandard");
        assert_eq!(c.message_counts(slot), [n, 7 * n, 5 * n, 0, 0, 0]);
    }

    #[test]
    fn names_past_the_table_share_one_slot() {
        let c = LinkCounter::new("l");
        let names: Vec<&'static str> = (0..MESSAGE_SLOTS + 5)
            .map(|i| &*Box::leak(format!("m{i}").into_boxed_str()))
            .collect();
        for n in &names {
            c.add_message(Side::Server, true, n, 1, 1);
        }
        let up_count = |name| c.message_counts(c.messages.slot(name))[0];
        // One slot is kept for them: the rest hold a name each.
        let past = (names.len() - (MESSAGE_SLOTS - 1)) as u64;
        assert_eq!(up_count(OTHER), past);
        assert_eq!(up_count(names[0]), 1);
    }
}
