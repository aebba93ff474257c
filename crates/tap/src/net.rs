//! Sockets and descriptors: connecting upstream from a chosen source address, the open-file
//! limit, and refusing connections cleanly when descriptors run out.

use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Raises the soft limit on open files to the hard limit. Returns `(before, after)`.
pub fn raise_nofile_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: `lim` is a valid rlimit within the hard limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((before, lim.rlim_cur))
}

/// The error of a process (EMFILE) or system (ENFILE) out of file descriptors.
pub fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// A TCP socket for `upstream`, bound to `source` when given (its port chosen at connect time
/// with `IP_BIND_ADDRESS_NO_PORT`, so that many connections share a source address the way
/// unbound ones do), with Nagle off: shares and replies are small messages whose latency is
/// the point.
pub fn socket_from(upstream: SocketAddr, source: Option<IpAddr>) -> io::Result<TcpSocket> {
    let socket = if upstream.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(src) = source {
        if src.is_ipv4() {
            // If it fails the port is picked at bind time instead, which only uses ports up
            // sooner.
            turn_on(&socket, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT);
        }
        socket.bind(SocketAddr::new(src, 0))?;
    }
    socket.set_nodelay(true)?;
    Ok(socket)
}

/// Connects to `upstream` from `source` ([`socket_from`]) within `timeout`.
pub async fn connect(
    upstream: SocketAddr,
    source: Option<IpAddr>,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let socket = socket_from(upstream, source)?;
    match tokio::time::timeout(timeout, socket.connect(upstream)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
    }
}

/// Asks the kernel to stamp the data this socket receives (SO_TIMESTAMPNS), so that a read
/// can tell when its bytes arrived rather than when the reader got to them. Returns whether
/// the kernel agreed. Set on a listener, it is inherited by the sockets it accepts; the first
/// socket to ask turns stamping on for the host a moment later, which is why the tap asks as
/// soon as it listens.
pub fn enable_rx_timestamps(s: &impl AsRawFd) -> bool {
    turn_on(s, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS)
}

/// Sets the socket option `name` at `level` to 1 (a flag turned on); returns whether the
/// kernel agreed.
fn turn_on(s: &impl AsRawFd, level: libc::c_int, name: libc::c_int) -> bool {
    let one: libc::c_int = 1;
    // SAFETY: a valid socket and a c_int option of the right size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

/// Reads what is available into the spare capacity of `buf` (reserve first), with the
/// kernel's receive time of the last bytes read (CLOCK_REALTIME ns) when the socket stamps
/// them ([`enable_rx_timestamps`]). `Ok((0, _))` is the end of the stream; `WouldBlock` clears
/// the socket's readiness, as `try_read` does.
pub fn recv_stamped(s: &TcpStream, buf: &mut Vec<u8>) -> io::Result<(usize, Option<u64>)> {
    s.try_io(tokio::io::Interest::READABLE, || {
        let spare = buf.spare_capacity_mut();
        let mut iov = libc::iovec {
            iov_base: spare.as_mut_ptr() as *mut libc::c_void,
            iov_len: spare.len(),
        };
        // Room for one timespec control message, 8-byte aligned.
        let mut control = [0u64; 8];
        // SAFETY: an all-zero msghdr is a valid empty one; the pointers set below outlive the
        // call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` describes writable memory of the sizes given; tokio's sockets are
        // non-blocking, so this returns at once.
        let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        // SAFETY: the kernel initialized the first `n` bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n) };
        let mut stamp = None;
        // SAFETY: walking the control messages the kernel wrote into `control`, with the
        // length it reported in `msg`.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                    stamp = Some(
                        (ts.tv_sec as u64)
                            .saturating_mul(1_000_000_000)
                            .saturating_add(ts.tv_nsec as u64),
                    );
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Ok((n, stamp.filter(|&t| t > 0)))
    })
}

/// CLOCK_MONOTONIC time of a kernel receive stamp (CLOCK_REALTIME), or now without one.
pub fn rx_monotonic_ns(rx_realtime_ns: Option<u64>) -> u64 {
    let now = events::now_ns();
    let Some(rx) = rx_realtime_ns else {
        return now;
    };
    // The two clocks' offset, read now; a stamp from the future or from long ago (the wall
    // clock was stepped) is not trusted.
    let age = events::realtime_ns().saturating_sub(rx);
    if age > MAX_STAMP_AGE_NS {
        return now;
    }
    now - age.min(now)
}

/// A receive stamp older than this is taken for a clock step rather than a slow read.
const MAX_STAMP_AGE_NS: u64 = 10_000_000_000;

/// One descriptor held back for when the process runs out: accept fails then on every
/// attempt (Linux allocates the descriptor before it looks for a connection), so without a
/// spare the tap could neither serve nor close the connections waiting in its backlog.
pub struct Reserve(Option<File>);

impl Reserve {
    /// Takes the reserve descriptor (`/dev/null`); none held if it cannot be opened.
    pub fn new() -> Self {
        Reserve(File::open("/dev/null").ok())
    }

    /// Accepts one pending connection with the reserve's descriptor (waiting briefly for
    /// one), then takes a reserve again. Returns the connection and whether the reserve could
    /// be taken again: if so, descriptors are free once more and the connection may be served;
    /// if not, the caller closes it and calls [`Reserve::refill`].
    pub async fn accept(
        &mut self,
        listener: &TcpListener,
    ) -> Option<(TcpStream, SocketAddr, bool)> {
        self.0 = None;
        let accepted = tokio::time::timeout(Duration::from_millis(10), listener.accept()).await;
        self.refill();
        match accepted {
            Ok(Ok((s, peer))) => Some((s, peer, self.0.is_some())),
            _ => None,
        }
    }

    /// Takes the reserve descriptor again if it is not held.
    pub fn refill(&mut self) {
        if self.0.is_none() {
            self.0 = File::open("/dev/null").ok();
        }
    }
}

impl Default for Reserve {
    fn default() -> Self {
        Self::new()
    }
}

/// Closing with a reset rather than a FIN: what the other leg of a failed connection gets, so
/// that a peer sees the failure as one, not as a clean end of stream.
pub fn set_reset_on_close(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// Sends FIN: the other side reads end of stream, and may still send.
pub fn shutdown_write(s: &TcpStream) -> io::Result<()> {
    socket2::SockRef::from(s).shutdown(std::net::Shutdown::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_raised_to_the_hard_limit() {
        let (_, now) = raise_nofile_limit().unwrap();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        assert_eq!(now, lim.rlim_cur);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
    }

    #[test]
    fn descriptor_exhaustion_is_recognised() {
        assert!(is_out_of_descriptors(&io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(is_out_of_descriptors(&io::Error::from_raw_os_error(
            libc::ENFILE
        )));
        assert!(!is_out_of_descriptors(&io::Error::from_raw_os_error(
            libc::ECONNRESET
        )));
    }

    #[tokio::test]
    async fn received_bytes_carry_the_kernel_arrival_time() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (c, accepted) = tokio::join!(TcpStream::connect(addr), l.accept());
        let mut c = c.unwrap();
        let (s, _) = accepted.unwrap();
        assert!(enable_rx_timestamps(&s));
        // The kernel turns receive stamping on globally a moment after the first socket asks.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = events::realtime_ns();
        tokio::io::AsyncWriteExt::write_all(&mut c, b"hello")
            .await
            .unwrap();
        // Read late on purpose: the stamp is when the bytes arrived, not when they were read.
        tokio::time::sleep(Duration::from_millis(30)).await;
        s.readable().await.unwrap();
        let mut buf = Vec::with_capacity(64);
        let (n, stamp) = recv_stamped(&s, &mut buf).unwrap();
        let after = events::realtime_ns();
        assert_eq!((n, &buf[..]), (5, &b"hello"[..]));
        let stamp = stamp.expect("a receive timestamp");
        assert!(
            stamp >= before - 1_000_000 && stamp + 20_000_000 < after,
            "{before} {stamp} {after}"
        );
        // Nothing more: readiness is cleared and the read would block.
        let e = recv_stamped(&s, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(c);
        s.readable().await.unwrap();
        assert_eq!(recv_stamped(&s, &mut buf).unwrap().0, 0, "end of stream");
    }

    #[tokio::test]
    async fn connects_from_a_chosen_loopback_address() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let src: IpAddr = "127.0.0.3".parse().unwrap();
        let (c, accepted) =
            tokio::join!(connect(addr, Some(src), Duration::from_secs(5)), l.accept());
        let c = c.unwrap();
        let (_, peer) = accepted.unwrap();
        assert_eq!(peer.ip(), src);
        assert!(c.nodelay().unwrap());
    }
}
