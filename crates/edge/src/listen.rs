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

#[cfg(test)]
mod tests {
    use super::*;
    use testkit::net::{accept_queue, fill_accept_queue};

    #[tokio::test]
    async fn a_burst_of_connects_waits_in_the_queue_rather_than_being_dropped() {
        let cap = kernel_cap().expect("/proc/sys/net/core/somaxconn");
        let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        // Nothing accepts while 600 clients connect (or as many as the kernel's cap allows):
        // every one of them must be waiting in the queue, where tokio's own bind keeps 129.
        let burst = 600.min(cap);
        let _clients = fill_accept_queue(addr, burst);
        for _ in 0..burst {
            listener.accept().await.unwrap();
        }
        assert_eq!(accept_queue(addr.port()), Some(0));
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
