//! The listening socket every role accepts on, opened one way everywhere: its accept queue is
//! the one part of the edge the kernel runs before the role sees a connection.
//!
//! A pool restart, or a farm's switch back from a backup pool, brings every miner back within
//! a second. Connections the kernel has completed but the role has not yet accepted wait in
//! the listening socket's accept queue; once it is full, the kernel drops the client's last
//! handshake packet and the client waits for a SYN-ACK resent after 1, 3, 7... seconds.
//! tokio's `TcpListener::bind` asks for a queue of 128 (std's figure), which 350 connects at
//! once overflow on loopback. [`listen`] asks for [`ACCEPT_BACKLOG`] instead; the kernel grants
//! the smaller of that and `net.core.somaxconn`. docs/operations.md "The connection edge".

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, Weak};

use serde::Serialize;
use tokio::net::{TcpListener, TcpSocket};

/// The accept queue each listening socket asks for. Linux takes the smaller of this and
/// `net.core.somaxconn` (4096 by default since Linux 5.4), so raising the sysctl is all an
/// operator needs to do for a larger one.
pub const ACCEPT_BACKLOG: u32 = 65_535;

/// An accept queue smaller than this is logged as a warning when a role starts listening: a
/// reconnect storm of more miners than that waits on resent handshakes.
pub const SMALL_ACCEPT_QUEUE: u32 = 1024;

/// Binds `addr` (with `SO_REUSEADDR`, as tokio's `bind` does, so a role restarted at once binds
/// its address again) and listens with an accept queue of [`ACCEPT_BACKLOG`], or as many as
/// the kernel allows. Must be called within a tokio runtime.
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    let listener = socket.listen(ACCEPT_BACKLOG)?;
    if let Some(cap) = kernel_cap().filter(|c| *c < SMALL_ACCEPT_QUEUE) {
        tracing::warn!(
            %addr,
            accept_queue = cap,
            "net.core.somaxconn caps this listener's accept queue; a reconnect storm of more \
             miners than that waits on resent handshakes (raise the sysctl)"
        );
    }
    Ok(listener)
}

/// The kernel's cap on an accept queue (`net.core.somaxconn`), where it can be read.
pub fn kernel_cap() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A listening socket's accept queue as the kernel counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AcceptQueue {
    /// Connections whose handshake the kernel has completed and the role has not accepted yet.
    pub waiting: u32,
    /// What [`listen`] asked for, capped by `net.core.somaxconn`. Linux drops a handshake
    /// only once `waiting` is past the limit, so the queue holds one more than this.
    pub limit: u32,
}

impl AcceptQueue {
    /// Past half its limit: connections arrive faster than the role accepts them, as in a
    /// reconnect storm or while the accept loop is stalled.
    pub fn filling(&self) -> bool {
        u64::from(self.waiting) * 2 > u64::from(self.limit)
    }
}

/// `listener`'s accept queue, read from the kernel (`TCP_INFO`) at the call. Linux only: other
/// systems answer [`io::ErrorKind::Unsupported`].
#[cfg(not(target_os = "linux"))]
pub fn accept_queue(_listener: &TcpListener) -> io::Result<AcceptQueue> {
    Err(io::ErrorKind::Unsupported.into())
}

/// `listener`'s accept queue, read from the kernel (`TCP_INFO`) at the call. Linux only: other
/// systems answer [`io::ErrorKind::Unsupported`].
#[cfg(target_os = "linux")]
pub fn accept_queue(listener: &TcpListener) -> io::Result<AcceptQueue> {
    // SAFETY: `tcp_info` is plain integers, for which all zeroes is a value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the descriptor is the listener's, open while it is borrowed; the kernel writes
    // at most `len` bytes into `info` and says how many in `len`.
    let rc = unsafe {
        libc::getsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // On a listening socket Linux reuses two fields: `tcpi_unacked` is the number of
    // connections ready for accept() and `tcpi_sacked` the queue's limit.
    Ok(AcceptQueue {
        waiting: info.tcpi_unacked,
        limit: info.tcpi_sacked,
    })
}

/// One watched listener's queue, as `/api/status` (`admission.accept_queues`) lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ListenerQueue {
    /// The role's name for the listener (`sv1`, `sv2`, `jd`).
    pub listener: &'static str,
    /// Its queue when read.
    #[serde(flatten)]
    pub queue: AcceptQueue,
}

/// The listeners a role accepts connections on, for the status pages. Held weakly: a listener
/// its accept loop has dropped (the role stopping) is closed, not kept open here, and drops
/// out of the list.
#[derive(Debug, Default)]
pub struct Listeners(Mutex<Vec<(&'static str, Weak<TcpListener>)>>);

impl Listeners {
    /// Watches `listener` under `name` and hands it back shared, for the accept loop to own.
    pub fn watch(&self, name: &'static str, listener: TcpListener) -> Arc<TcpListener> {
        let listener = Arc::new(listener);
        let mut list = self.0.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|(_, l)| l.strong_count() > 0);
        // One series per name on /metrics: Prometheus refuses a scrape that repeats one.
        debug_assert!(
            list.iter().all(|(n, _)| *n != name),
            "listener {name} watched twice"
        );
        list.push((name, Arc::downgrade(&listener)));
        listener
    }

    /// The queue of every watched listener still open, by name (the accept loops that watch
    /// them start in no fixed order).
    pub fn queues(&self) -> Vec<ListenerQueue> {
        let list = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut queues: Vec<ListenerQueue> = list
            .iter()
            .filter_map(|(name, l)| {
                let queue = accept_queue(&*l.upgrade()?).ok()?;
                Some(ListenerQueue {
                    listener: name,
                    queue,
                })
            })
            .collect();
        queues.sort_by_key(|q| q.listener);
        queues
    }
}

/// The network namespace's count of handshake packets (a client's SYN, or its final ACK)
/// dropped because a listener's accept queue was full (`ListenOverflows` in /proc/net/netstat),
/// where it can be read; a client whose packet is dropped waits for its resend, a second or
/// more. Linux keeps no such count per socket; a role in its own namespace (a container) reads
/// its own.
pub fn listen_overflows() -> Option<u64> {
    netstat_field(
        &std::fs::read_to_string("/proc/net/netstat").ok()?,
        "TcpExt",
        "ListenOverflows",
    )
}

/// One counter of a /proc/net/netstat text: a line of names under `group:`, then a line of the
/// values in the same order.
fn netstat_field(text: &str, group: &str, name: &str) -> Option<u64> {
    let prefix = format!("{group}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let at = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(at)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use testkit::net::{accept_queue as queue_of_port, fill_accept_queue};

    #[tokio::test]
    async fn a_burst_of_connects_waits_in_the_queue_rather_than_being_dropped() {
        let cap = kernel_cap().expect("/proc/sys/net/core/somaxconn");
        let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        // Nothing accepts while 600 clients connect (or as many as the kernel's cap allows):
        // every one of them must be waiting in the queue, where tokio's own bind keeps 129.
        let burst = 600.min(cap);
        let _clients = fill_accept_queue(addr, burst);
        // The kernel's own count, read on the socket, agrees with /proc/net/tcp's.
        let q = accept_queue(&listener).unwrap();
        assert_eq!(
            q,
            AcceptQueue {
                waiting: burst,
                limit: cap.min(ACCEPT_BACKLOG)
            }
        );
        assert_eq!(queue_of_port(addr.port()), Some(burst));
        for _ in 0..burst {
            listener.accept().await.unwrap();
        }
        assert_eq!(queue_of_port(addr.port()), Some(0));
        assert_eq!(accept_queue(&listener).unwrap().waiting, 0);
    }

    #[tokio::test]
    async fn watched_listeners_report_their_queues_until_their_owner_drops_them() {
        let listeners = Listeners::default();
        // Watched in the other order than they are listed: by name.
        let sv2 = listeners.watch("sv2", listen("127.0.0.1:0".parse().unwrap()).unwrap());
        let sv1 = listeners.watch("sv1", listen("127.0.0.1:0".parse().unwrap()).unwrap());
        let _clients = fill_accept_queue(sv2.local_addr().unwrap(), 3);
        let names = |l: &Listeners| -> Vec<(&str, u32)> {
            l.queues()
                .iter()
                .map(|q| (q.listener, q.queue.waiting))
                .collect()
        };
        assert_eq!(names(&listeners), [("sv1", 0), ("sv2", 3)]);
        let addr = sv1.local_addr().unwrap();
        drop(sv1);
        assert_eq!(names(&listeners), [("sv2", 3)]);
        // Dropped means closed: the registry holds no listener open.
        std::net::TcpStream::connect(addr).unwrap_err();
        let json = serde_json::to_value(listeners.queues()).unwrap();
        assert_eq!(json[0]["listener"], "sv2");
        assert_eq!(json[0]["waiting"], 3);
        assert!(json[0]["limit"].as_u64().unwrap() >= 128, "{json}");
    }

    #[test]
    fn overflows_are_read_from_the_tcp_ext_lines() {
        let text = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\n\
                    TcpExt: 5 17 19\n\
                    IpExt: InNoRoutes ListenOverflows\n\
                    IpExt: 0 99\n";
        assert_eq!(netstat_field(text, "TcpExt", "ListenOverflows"), Some(17));
        assert_eq!(netstat_field(text, "IpExt", "ListenOverflows"), Some(99));
        assert_eq!(netstat_field(text, "TcpExt", "Nothing"), None);
        assert_eq!(netstat_field("", "TcpExt", "ListenOverflows"), None);
        // This machine's own file has the counter.
        assert!(listen_overflows().is_some());
    }

    #[tokio::test]
    async fn an_address_is_bound_again_at_once_and_a_taken_one_is_an_error() {
        let first = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = first.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (served, _) = first.accept().await.unwrap();
        let taken = listen(addr).unwrap_err();
        assert_eq!(taken.kind(), io::ErrorKind::AddrInUse, "{taken}");
        // The closed connection lingers in TIME_WAIT on the server's side; SO_REUSEADDR lets a
        // restarted role listen there again.
        drop((first, served, client));
        listen(addr).unwrap();
    }
}
