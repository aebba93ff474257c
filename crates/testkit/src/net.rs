//! A listening socket's accept queue, as the kernel shows it: what a burst of connects to a
//! listener that is not accepting (a stopped process, say) leaves waiting there.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Connections the socket listening on `port` (IPv4) has completed but not accepted yet: its
/// rx_queue in /proc/net/tcp. `None` where nothing listens there.
pub fn accept_queue(port: u16) -> Option<u32> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 4 && f[1].ends_with(&local) && f[3] == "0A")
        .and_then(|f| u32::from_str_radix(f[4].split_once(':')?.1, 16).ok())
}

/// Connects `n` clients to `addr`, whose listener must not be accepting, and waits (up to 5 s)
/// until its accept queue holds every one of them; the clients, to keep them open. Each client
/// comes from its own loopback address (127.1.0.1, 127.1.0.2, ...), as a storm of miners would,
/// so that a role's per-address limits do not refuse them once it accepts. Panics if a connect
/// waits over 2 s (a full queue drops the handshake, and the client waits for it to be resent)
/// or the queue holds fewer.
pub fn fill_accept_queue(addr: SocketAddr, n: u32) -> Vec<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let before = accept_queue(addr.port()).expect("nothing listens there");
    let clients: Vec<TcpStream> = (0..n)
        .map(|i| {
            let source = Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8);
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            socket.bind(&SocketAddr::from((source, 0)).into()).unwrap();
            socket
                .connect_timeout(&addr.into(), Duration::from_secs(2))
                .unwrap_or_else(|e| {
                    panic!("connect {i} of {n} to {addr}: {e} (the accept queue is full)")
                });
            socket.into()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let held = accept_queue(addr.port()).unwrap_or(0) - before;
        if held == n {
            return clients;
        }
        assert!(
            Instant::now() < deadline,
            "{addr}: {held} of {n} connections in the accept queue"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
