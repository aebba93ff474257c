//! Each endpoint counts the application bytes it reads from and writes to its clients' sockets
//! and reports them in the node's event log as `LinkBytes`, as every role counts its own
//! traffic (docs/metrics.md `roles.<name>.net_*_bytes`: /proc cannot give per-process network bytes).
//!
//! Reports are deltas since the previous report (the readers sum them), one link per endpoint
//! ("rpc", "zmq", "tdp"), `conn` 0 for the whole endpoint. Directions follow the way work
//! travels: a request or subscription coming in to the node is `Up` (toward the network, as
//! shares go), what the node writes (templates, blocks, answers) is `Down`. So simnet, on the
//! pool's side of these links, sends down and receives up, like a pool's front end.
//!
//! Counting happens where the bytes are: [`Counted`] wraps a socket (or one half of it) for the
//! endpoints that own their socket I/O; the Template Provider, whose socket is inside the SV2
//! transport, adds frame sizes itself.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Interval, MissedTickBehavior};

/// How often the endpoints report what crossed their sockets: the lab's time series are per
/// second.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

pub use events::LinkCounter;

/// The reporting tick of an endpoint's serve loop; the first tick comes one period in.
pub fn report_interval() -> Interval {
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + REPORT_EVERY, REPORT_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick
}

/// A socket (or half of one) whose reads and writes add to a [`LinkCounter`].
pub struct Counted<S> {
    inner: S,
    counter: Arc<LinkCounter>,
}

impl<S> Counted<S> {
    /// Wraps `inner`, adding the bytes it reads and writes to `counter`.
    pub fn new(inner: S, counter: Arc<LinkCounter>) -> Counted<S> {
        Counted { inner, counter }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            self.counter.add_rx(buf.filled().len() - before);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.counter.add_tx(n);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            self.counter.add_tx(n);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use events::{Direction, EventKind, EventSink};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn counted_stream_counts_both_ways_and_reports_deltas() {
        let counter = LinkCounter::new("rpc");
        let (a, mut b) = tokio::io::duplex(64);
        let mut a = Counted::new(a, counter.clone());
        a.write_all(b"hello").await.unwrap();
        let mut got = [0u8; 5];
        b.read_exact(&mut got).await.unwrap();
        b.write_all(b"abc").await.unwrap();
        let mut back = [0u8; 3];
        a.read_exact(&mut back).await.unwrap();
        assert_eq!(counter.totals(), (3, 5));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.ev");
        let sink = EventSink::create(&path, "simnet", "").unwrap();
        counter.report(&sink);
        counter.report(&sink); // nothing new: nothing emitted
        a.write_all(b"xy").await.unwrap();
        counter.report(&sink);
        sink.finish().unwrap();
        let log = events::read_file(&path).unwrap();
        let reports: Vec<(Direction, u64)> = log
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::LinkBytes(b) if b.link.as_str() == "rpc" && b.conn == 0 => {
                    Some((b.direction, b.bytes))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            reports,
            [
                (Direction::Up, 3),
                (Direction::Down, 5),
                (Direction::Down, 2)
            ]
        );
    }
}
