//! A role's own socket bytes on one link, reported as `LinkBytes` deltas (docs/metrics.md
//! `roles.<name>.net_*_bytes`: /proc cannot give per-process network bytes). Servers count what
//! they read as `Up` and what they write as `Down`; `conn` 0 stands for the whole endpoint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{Direction, EventSink, LinkBytes, ShortStr};

/// Which end of a link a role's socket is: decides which way its reads and writes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Accepted the connection: it serves the side further from the pool, so what it reads
    /// goes up and what it writes goes down.
    Server,
    /// Opened it toward the pool's side: what it writes goes up.
    Client,
}

/// Bytes read and written on one endpoint's sockets, and how much of them has been reported.
#[derive(Debug)]
pub struct LinkCounter {
    link: ShortStr,
    rx: AtomicU64,
    tx: AtomicU64,
    reported: Mutex<(u64, u64)>,
}

impl LinkCounter {
    /// A counter for the link named `link` (as in [`LinkBytes::link`]), shared by the endpoint's
    /// connections.
    pub fn new(link: &str) -> Arc<LinkCounter> {
        Arc::new(LinkCounter {
            link: ShortStr::new(link),
            rx: AtomicU64::new(0),
            tx: AtomicU64::new(0),
            reported: Mutex::new((0, 0)),
        })
    }

    /// The link's name.
    pub fn link(&self) -> &str {
        self.link.as_str()
    }

    /// Bytes read from clients.
    pub fn add_rx(&self, n: usize) {
        self.rx.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Bytes written to clients.
    pub fn add_tx(&self, n: usize) {
        self.tx.fetch_add(n as u64, Ordering::Relaxed);
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

    /// (read, written) so far.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.rx.load(Ordering::Relaxed),
            self.tx.load(Ordering::Relaxed),
        )
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
}
