//! Sockets and process limits for holding many connections.
//!
//! A loopback source address offers about 28,000 ephemeral ports, so devices are spread over
//! `127.0.0.1`, `127.0.0.2`, ... (Linux routes all of 127/8 to the loopback interface). The
//! source is bound before connecting with `IP_BIND_ADDRESS_NO_PORT`, which leaves the port to
//! `connect` so that ports are shared across destinations as they are without a bind.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use tokio::net::TcpStream;

pub use tap::net::raise_nofile_limit;

/// The source address of device `index` when spreading over `count` loopback addresses:
/// `127.0.0.(1 + index % count)`. `None` (let the kernel choose) for one address, or when the
/// pool is not on IPv4 loopback (a loopback source cannot reach another host).
pub fn source_addr(pool: SocketAddr, index: u32, count: u32) -> Option<IpAddr> {
    let loopback_v4 = matches!(pool.ip(), IpAddr::V4(ip) if ip.is_loopback());
    if count <= 1 || !loopback_v4 {
        return None;
    }
    let n = index % count.min(254 * 256);
    // 127.0.0.1 .. 127.0.0.254, then 127.0.1.1 ..: skip .0 and .255 in the last octet.
    let (hi, lo) = (n / 254, n % 254 + 1);
    Some(IpAddr::V4(Ipv4Addr::new(127, 0, hi as u8, lo as u8)))
}

/// Connects to `pool` from `source` ([`tap::net::socket_from`]), the received bytes stamped
/// with the kernel's arrival time: a job counts from when it reached the device, not from when
/// this process, busy hashing for other devices, got to reading it.
pub async fn connect(pool: SocketAddr, source: Option<IpAddr>) -> io::Result<TcpStream> {
    let socket = tap::net::socket_from(pool, source)?;
    tap::net::enable_rx_timestamps(&socket);
    socket.connect(pool).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_cycle_over_loopback_addresses() {
        let pool: SocketAddr = "127.0.0.1:3333".parse().unwrap();
        let got: Vec<_> = (0..5).map(|i| source_addr(pool, i, 3)).collect();
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(
            got,
            [
                ip("127.0.0.1"),
                ip("127.0.0.2"),
                ip("127.0.0.3"),
                ip("127.0.0.1"),
                ip("127.0.0.2")
            ]
        );
        assert_eq!(source_addr(pool, 300, 1000), ip("127.0.1.47"));
        assert_eq!(source_addr(pool, 7, 1), None);
        let remote: SocketAddr = "192.0.2.1:3333".parse().unwrap();
        assert_eq!(source_addr(remote, 7, 4), None);
        let v6: SocketAddr = "[::1]:3333".parse().unwrap();
        assert_eq!(source_addr(v6, 7, 4), None);
    }
}
