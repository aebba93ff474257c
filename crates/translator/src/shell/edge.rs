//! The farm edge: SV1 device connections. One task per device reads lines and writes what the
//! core hands it; the core never waits on a device socket.
//!
//! Shared by every SV1-facing farm role (the translator and the SV1 proxy): nothing here knows
//! what sits upstream.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use events::{LinkCounter, Side};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// Bounds on the device side.
#[derive(Clone, Copy, Debug)]
pub struct EdgeLimits {
    /// Longest SV1 line read from a device.
    pub max_line: usize,
    pub max_devices: usize,
    /// Writes waiting for one device; a device this far behind is dropped by the core.
    pub device_queue: usize,
}

/// What device tasks tell the core.
pub enum DeviceIn {
    Connected {
        conn: u64,
        peer: SocketAddr,
        local: SocketAddr,
        out: mpsc::Sender<Vec<u8>>,
    },
    Line {
        conn: u64,
        line: Vec<u8>,
    },
    LineTooLong {
        conn: u64,
    },
    Closed {
        conn: u64,
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
    let live = Arc::new(AtomicUsize::new(0));
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
                if live.load(Ordering::Relaxed) >= limits.max_devices {
                    tracing::debug!(%peer, "device refused, at --max-devices");
                    continue;
                }
                live.fetch_add(1, Ordering::Relaxed);
                let conn = next_conn;
                next_conn += 1;
                let task = device(
                    stream,
                    peer,
                    conn,
                    inbox.clone(),
                    shutdown.clone(),
                    limits,
                    net.clone(),
                );
                let live = live.clone();
                tasks.spawn(async move {
                    task.await;
                    live.fetch_sub(1, Ordering::Relaxed);
                });
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

/// One device connection: lines to the core, the core's bytes to the socket.
async fn device(
    stream: TcpStream,
    peer: SocketAddr,
    conn: u64,
    inbox: mpsc::Sender<DeviceIn>,
    mut shutdown: watch::Receiver<bool>,
    limits: EdgeLimits,
    net: Arc<LinkCounter>,
) {
    let (max_line, queue) = (limits.max_line, limits.device_queue.max(1));
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(peer);
    let (mut reader, mut writer) = stream.into_split();
    let (tx, mut out) = mpsc::channel::<Vec<u8>>(queue);
    if inbox
        .send(DeviceIn::Connected {
            conn,
            peer,
            local,
            out: tx,
        })
        .await
        .is_err()
    {
        return;
    }
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut reading = true;
    let reason = loop {
        tokio::select! {
            _ = stopped(&mut shutdown) => break "shutdown",
            bytes = out.recv() => match bytes {
                Some(b) => {
                    match tokio::time::timeout(WRITE_TIMEOUT, writer.write_all(&b)).await {
                        Ok(Ok(())) => net.add_written(Side::Server, b.len()),
                        Ok(Err(_)) => break "write error",
                        Err(_) => break "write timeout",
                    }
                }
                // The core closed us, after what it queued.
                None => break "closed by the core",
            },
            n = reader.read(&mut chunk), if reading => {
                let n = match n {
                    Ok(0) => break "eof",
                    Ok(n) => n,
                    Err(_) => break "reset",
                };
                net.add_read(Side::Server, n);
                buf.extend_from_slice(&chunk[..n]);
                let mut start = 0;
                let mut too_long = false;
                while let Some(i) = buf[start..].iter().position(|&b| b == b'\n') {
                    let line = &buf[start..start + i];
                    start += i + 1;
                    if line.len() > max_line {
                        too_long = true;
                        break;
                    }
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    if inbox.send(DeviceIn::Line { conn, line: line.to_vec() }).await.is_err() {
                        return;
                    }
                }
                buf.drain(..start);
                if too_long || buf.len() > max_line {
                    // Answered and closed by the core; nothing more is read.
                    reading = false;
                    buf = Vec::new();
                    if inbox.send(DeviceIn::LineTooLong { conn }).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let _ = writer.shutdown().await;
    let _ = inbox.send(DeviceIn::Closed { conn, reason }).await;
}

/// A device that takes no bytes for this long is closed (its queue would drop it soon anyway).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Resolves once `shutdown` turns true (or its sender is gone).
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}
