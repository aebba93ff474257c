//! The farm edge: SV1 device connections. One task per device reads lines and writes what the
//! core hands it; the core never waits on a device socket.
//!
//! Shared by every SV1-facing farm role (the translator and the SV1 proxy): nothing here knows
//! what sits upstream. Admission is the `edge` crate's [`Gate`], as on the pool: caps in total
//! and per address, connect rate, bans, and a slot each device task holds until it ends
//! (released even if the task panics). Each device has a message rate, an idle timeout, a
//! handshake timeout (its `mining.authorize` must come within it) and a write timeout.

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use edge::{Admission, Gate, MessageBudget, Slot, Timestamp};
use events::{LinkCounter, Side};
use sv1::LineBuffer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// Bounds on the device side.
#[derive(Clone)]
pub struct EdgeLimits {
    /// Admission: connection limits, rates and bans.
    pub gate: Arc<Gate>,
    /// The role's clock: bans and the status figures share it.
    pub start: Instant,
    /// Writes waiting for one device; a device this far behind is dropped by the core.
    pub device_queue: usize,
}

impl EdgeLimits {
    fn admission(&self) -> &Admission {
        self.gate.admission()
    }
}

/// What the core tells a device's task besides its bytes.
#[derive(Default)]
pub struct DeviceShared {
    /// Set by the core, before it drops the task's queue, to say why it closed the device.
    pub why: OnceLock<&'static str>,
    /// Set by the core once the device has authorized a worker (an authorize it refused does
    /// not count): the handshake timeout no longer applies.
    pub authorized: AtomicBool,
}

/// What device tasks tell the core.
pub enum DeviceIn {
    /// A device connected; the core may write to it through `out`.
    Connected {
        /// The connection's number, from 1.
        conn: u64,
        /// The device's address.
        peer: SocketAddr,
        /// The local address it connected to.
        local: SocketAddr,
        /// Bytes for the device's socket.
        out: mpsc::Sender<Vec<u8>>,
        /// What the core tells the task besides bytes.
        shared: Arc<DeviceShared>,
    },
    /// A line from the device, without its newline.
    Line {
        /// The connection's number.
        conn: u64,
        /// The line.
        line: Vec<u8>,
    },
    /// The device sent a line longer than the limit.
    LineTooLong {
        /// The connection's number.
        conn: u64,
    },
    /// The connection ended.
    Closed {
        /// The connection's number.
        conn: u64,
        /// Why (`eof`, `reset`, `idle timeout`, `write timeout`, `shutdown`, ...).
        reason: &'static str,
    },
}

/// Accepts devices until shutdown; each gets its own task.
pub async fn accept(
    listener: TcpListener,
    inbox: mpsc::Sender<DeviceIn>,
    mut shutdown: watch::Receiver<bool>,
    limits: EdgeLimits,
    net: Arc<LinkCounter>,
) {
    let start = limits.start;
    let listener = limits.gate.listeners().watch("sv1", listener);
    let mut tasks = JoinSet::new();
    let mut next_conn = 1u64;
    loop {
        tokio::select! {
            _ = stopped(&mut shutdown) => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let slot = match limits.gate.admit(peer.ip(), millis(start)) {
                    Ok(slot) => slot,
                    Err(why) => {
                        tracing::debug!(%peer, why = why.as_str(), "device refused");
                        continue;
                    }
                };
                let conn = next_conn;
                next_conn += 1;
                let task = device(
                    stream,
                    peer,
                    conn,
                    inbox.clone(),
                    shutdown.clone(),
                    Device { limits: limits.clone(), slot, start },
                    net.clone(),
                );
                tasks.spawn(task);
            }
        }
    }
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(5), drain)
        .await
        .is_err()
    {
        tasks.abort_all();
    }
}

fn millis(start: Instant) -> Timestamp {
    Timestamp::from_millis(start.elapsed().as_millis() as u64)
}

/// What a device task holds of the edge.
struct Device {
    limits: EdgeLimits,
    slot: Slot,
    start: Instant,
}

/// One device connection: lines to the core, the core's bytes to the socket.
async fn device(
    stream: TcpStream,
    peer: SocketAddr,
    conn: u64,
    inbox: mpsc::Sender<DeviceIn>,
    mut shutdown: watch::Receiver<bool>,
    d: Device,
    net: Arc<LinkCounter>,
) {
    let a = d.limits.admission().clone();
    let (max_line, queue) = (a.max_line, d.limits.device_queue.max(1));
    let opened = millis(d.start);
    let mut budget = MessageBudget::new(a.message_rate, opened);
    let mut last_read = opened;
    let (handshake_ms, idle_ms) = (
        a.handshake_timeout.as_millis() as u64,
        a.idle_timeout.as_millis() as u64,
    );
    // One timer for both timeouts, set to the earlier one still ahead, so that a device costs a
    // wake-up per timeout period rather than one a second, and each fires on time.
    let check = tokio::time::sleep(a.handshake_timeout.min(a.idle_timeout));
    tokio::pin!(check);
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(peer);
    let (mut reader, mut writer) = stream.into_split();
    let (tx, mut out) = mpsc::channel::<Vec<u8>>(queue);
    let shared = Arc::new(DeviceShared::default());
    let authorized = || shared.authorized.load(Ordering::Relaxed);
    if inbox
        .send(DeviceIn::Connected {
            conn,
            peer,
            local,
            out: tx,
            shared: shared.clone(),
        })
        .await
        .is_err()
    {
        d.slot.close("shutdown");
        return;
    }
    // Holds a line a read cut in half, and nothing (no allocation) otherwise.
    let mut lines = LineBuffer::new(max_line);
    let mut chunk = [0u8; 4096];
    let mut reading = true;
    let reason = loop {
        tokio::select! {
            _ = stopped(&mut shutdown) => break "shutdown",
            bytes = out.recv() => match bytes {
                Some(b) => {
                    match tokio::time::timeout(a.write_timeout, writer.write_all(&b)).await {
                        Ok(Ok(())) => {
                            net.add_written(Side::Server, b.len());
                            net.add_lines(Side::Server, false, &b, sv1::line_kind);
                        }
                        Ok(Err(_)) => break "write error",
                        Err(_) => break "write timeout",
                    }
                }
                // The core closed us, after what it queued.
                None => break shared.why.get().copied().unwrap_or("closed by the core"),
            },
            _ = &mut check => {
                let now = millis(d.start);
                // Closed, not struck: per-device firmware authorizes only once its subscribe
                // is answered, which waits for the upstream channel, so an upstream outage
                // times out honest devices too.
                if !authorized() && now.millis_since(opened) >= handshake_ms {
                    break "handshake timeout";
                }
                if now.millis_since(last_read) >= idle_ms {
                    break "idle timeout";
                }
                let mut due = last_read.plus_millis(idle_ms);
                if !authorized() {
                    due = due.min(opened.plus_millis(handshake_ms));
                }
                let wait = Duration::from_millis(due.millis_since(now).max(1));
                check.as_mut().reset(tokio::time::Instant::now() + wait);
            }
            n = reader.read(&mut chunk), if reading => {
                let n = match n {
                    Ok(0) => break "eof",
                    Ok(n) => n,
                    Err(_) => break "reset",
                };
                net.add_read(Side::Server, n);
                let now = millis(d.start);
                last_read = now;
                // Framed first, then handed to the core (which the framing cannot wait on).
                let mut got: Vec<Vec<u8>> = Vec::new();
                let framed = lines.split(&chunk[..n], |line| {
                    net.add_line(Side::Server, true, line, sv1::line_kind);
                    if !budget.take(a.message_rate, now) {
                        return ControlFlow::Break(());
                    }
                    got.push(line.to_vec());
                    ControlFlow::Continue(())
                });
                for line in got {
                    if inbox.send(DeviceIn::Line { conn, line }).await.is_err() {
                        d.slot.close("shutdown");
                        return;
                    }
                }
                match framed {
                    Ok(None) => {}
                    Ok(Some(())) => break "message rate",
                    Err(_) => {
                        // Answered and closed by the core; nothing more is read.
                        reading = false;
                        lines = LineBuffer::new(max_line);
                        // The core strikes the address when it closes the device for it.
                        if inbox.send(DeviceIn::LineTooLong { conn }).await.is_err() {
                            d.slot.close("shutdown");
                            return;
                        }
                    }
                }
            }
        }
    };
    let _ = writer.shutdown().await;
    d.slot.close(reason);
    let _ = inbox.send(DeviceIn::Closed { conn, reason }).await;
}

/// Resolves once `shutdown` turns true (or its sender is gone).
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}
