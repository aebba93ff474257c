//! Share latency at a server's SV1 port, on the wire: for each `mining.submit` a client sends to
//! 127.0.0.1:PORT, the time from the request's packet to the packet carrying its answer, both
//! timestamped by the kernel as they cross the loopback device. That is what the server adds
//! and nothing else: the clients' scheduling and the capture's own are outside both timestamps.
//!
//! A packet socket on `lo` (AF_PACKET, needs CAP_NET_RAW). Loopback shows each packet twice,
//! outgoing and incoming; only the incoming copy is read.

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

/// What one capture saw.
#[derive(Clone, Debug, Default)]
pub(crate) struct Capture {
    /// One per answered submit: (latency ms, the share's nonce, accepted).
    pub(crate) samples: Vec<(f64, Option<u32>, bool)>,
    /// TCP segments with payload to or from the port.
    pub(crate) packets: u64,
    /// Packets the kernel dropped because the capture fell behind.
    pub(crate) drops: u32,
    /// Answers whose request the capture did not see.
    pub(crate) unmatched: u64,
    /// Lines that were not JSON.
    pub(crate) bad_lines: u64,
}

const ETH_P_ALL: u16 = 0x0003;
const PACKET_HOST: u8 = 0;
/// Ethernet header on `lo`, then IPv4.
const ETH_LEN: usize = 14;

/// A packet socket bound to `lo`, kernel timestamps on.
pub(crate) struct Tap {
    fd: std::os::fd::OwnedFd,
}

impl Tap {
    /// Opens the socket; fails without CAP_NET_RAW.
    pub(crate) fn open() -> io::Result<Tap> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW,
                i32::from(ETH_P_ALL.to_be()),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor nothing else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        let tap = Tap { fd };
        // SAFETY: the name is a NUL-terminated string.
        let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        if lo == 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter are set below.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = ETH_P_ALL.to_be();
        addr.sll_ifindex = lo as i32;
        // SAFETY: `addr` is a valid sockaddr_ll of the length given.
        let bound = unsafe {
            libc::bind(
                tap.raw(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if bound != 0 {
            return Err(io::Error::last_os_error());
        }
        tap.set(libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        // A large buffer, so that a burst of job fan-out does not drop submits; without
        // CAP_NET_ADMIN the capped one.
        if tap
            .set(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 64 << 20)
            .is_err()
        {
            tap.set(libc::SOL_SOCKET, libc::SO_RCVBUF, 64 << 20)?;
        }
        Ok(tap)
    }

    fn raw(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }

    fn set(&self, level: i32, name: i32, value: i32) -> io::Result<()> {
        // SAFETY: `value` is a valid int of the length given.
        let r = unsafe {
            libc::setsockopt(
                self.raw(),
                level,
                name,
                (&value as *const i32).cast(),
                std::mem::size_of::<i32>() as u32,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Packets dropped since the last call (reading the statistics resets them).
    fn drops(&self) -> u32 {
        let mut stats = [0u32; 2];
        let mut len = std::mem::size_of_val(&stats) as u32;
        // SAFETY: `stats` is a tpacket_stats (two u32) of the length given.
        unsafe {
            libc::getsockopt(
                self.raw(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                stats.as_mut_ptr().cast(),
                &mut len,
            )
        };
        stats[1]
    }

    /// Whether a packet is waiting, within `wait`.
    fn readable(&self, wait: Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.raw(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as i32) > 0 }
    }

    /// The next queued packet without waiting: its length, its kernel timestamp
    /// (CLOCK_REALTIME ns) and whether it is the incoming copy; `None` when none is queued.
    fn next(&self, buf: &mut [u8]) -> Option<(usize, u64, bool)> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // Room for one SCM_TIMESTAMPNS (a timespec) with its header.
        let mut control = [0u64; 8];
        // SAFETY: an all-zero sockaddr_ll and msghdr are valid; pointers are set below.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: every buffer `msg` points to lives until the call returns.
        let n = unsafe { libc::recvmsg(self.raw(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            return None;
        }
        let mut ts = None;
        // SAFETY: walking the control messages the kernel wrote into `control`.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let t: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    ts = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Some((n as usize, ts?, from.sll_pkttype == PACKET_HOST))
    }

    /// Discards what queued so far and resets the drop counter: the window starts now.
    fn restart(&self) {
        let mut buf = vec![0u8; 65536];
        while self.next(&mut buf).is_some() {}
        self.drops();
    }

    /// Captures the SV1 exchange on `port` for `window`.
    pub(crate) fn capture(&self, port: u16, window: Duration) -> Capture {
        self.restart();
        let mut lines = Lines::new(port);
        let mut buf = vec![0u8; 65536];
        let end = Instant::now() + window;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            if !self.readable(left.min(Duration::from_millis(200))) {
                continue;
            }
            // Everything queued, one call a packet, before waiting again.
            while let Some((n, ts, incoming)) = self.next(&mut buf) {
                if incoming {
                    lines.packet(&buf[..n], ts);
                }
            }
        }
        let mut c = lines.done;
        c.drops = self.drops();
        c
    }
}

/// Reassembles the lines of each connection to the port and pairs submits with answers.
struct Lines {
    port: u16,
    /// (client port, request id as JSON text) -> (ts ns, nonce).
    pending: HashMap<(u16, String), (u64, Option<u32>)>,
    /// (client port, to the server) -> an unfinished line.
    partial: HashMap<(u16, bool), Vec<u8>>,
    done: Capture,
}

impl Lines {
    fn new(port: u16) -> Lines {
        Lines {
            port,
            pending: HashMap::new(),
            partial: HashMap::new(),
            done: Capture::default(),
        }
    }

    /// One Ethernet frame seen at `ts`.
    fn packet(&mut self, frame: &[u8], ts: u64) {
        // IPv4 carrying TCP only.
        if frame.len() < ETH_LEN + 20 || frame[12..14] != [0x08, 0x00] || frame[ETH_LEN + 9] != 6 {
            return;
        }
        let ihl = usize::from(frame[ETH_LEN] & 0x0f) * 4;
        let ip_len = usize::from(u16::from_be_bytes([frame[ETH_LEN + 2], frame[ETH_LEN + 3]]));
        let tcp = ETH_LEN + ihl;
        if frame.len() < tcp + 20 {
            return;
        }
        let sport = u16::from_be_bytes([frame[tcp], frame[tcp + 1]]);
        let dport = u16::from_be_bytes([frame[tcp + 2], frame[tcp + 3]]);
        if sport != self.port && dport != self.port {
            return;
        }
        let start = tcp + usize::from(frame[tcp + 12] >> 4) * 4;
        let end = (ETH_LEN + ip_len).min(frame.len());
        if start >= end {
            return;
        }
        self.done.packets += 1;
        let request = dport == self.port;
        let key = (if request { sport } else { dport }, request);
        let mut buf = self.partial.remove(&key).unwrap_or_default();
        buf.extend_from_slice(&frame[start..end]);
        let mut lines: Vec<&[u8]> = buf.split(|&b| b == b'\n').collect();
        let rest = lines.pop().unwrap_or_default().to_vec();
        for line in lines {
            self.line(line, key.0, request, ts);
        }
        if !rest.is_empty() {
            self.partial.insert(key, rest);
        }
    }

    fn line(&mut self, line: &[u8], client: u16, request: bool, ts: u64) {
        let has = |needle: &[u8]| line.windows(needle.len()).any(|w| w == needle);
        // Requests other than submits, and the server's notifications, pair with nothing.
        if request != has(b"mining.submit") || (!request && has(b"mining.")) {
            return;
        }
        let Ok(m) = serde_json::from_slice::<serde_json::Value>(line) else {
            self.done.bad_lines += 1;
            return;
        };
        let id = (client, m["id"].to_string());
        if request {
            // As the events carry it: the header nonce as a u32.
            let nonce = m["params"][4]
                .as_str()
                .and_then(|h| u32::from_str_radix(h, 16).ok());
            self.pending.insert(id, (ts, nonce));
        } else if let Some((sent, nonce)) = self.pending.remove(&id) {
            let ms = ts.saturating_sub(sent) as f64 / 1e6;
            self.done
                .samples
                .push((ms, nonce, m["result"] == serde_json::Value::Bool(true)));
        } else {
            self.done.unmatched += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4/TCP frame on `lo` from `sport` to `dport` carrying `payload`.
    fn frame(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + 20 + payload.len()) as u16;
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
        ];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&ip);
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[12] = 5 << 4;
        f.extend_from_slice(&tcp);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_submit_split_over_two_packets_pairs_with_its_answer() {
        let mut l = Lines::new(3333);
        let submit =
            br#"{"id":7,"method":"mining.submit","params":["w","1","00","5f5e1000","0000002a"]}"#;
        l.packet(&frame(50000, 3333, &submit[..20]), 1_000_000);
        l.packet(
            &frame(50000, 3333, &[&submit[20..], b"\n"].concat()),
            1_100_000,
        );
        // A notification and another client's answer in between pair with nothing.
        l.packet(
            &frame(
                3333,
                50000,
                b"{\"id\":null,\"method\":\"mining.notify\",\"params\":[]}\n",
            ),
            1_200_000,
        );
        l.packet(
            &frame(3333, 50001, b"{\"id\":7,\"result\":true}\n"),
            1_300_000,
        );
        l.packet(
            &frame(3333, 50000, b"{\"id\":7,\"result\":true,\"error\":null}\n"),
            1_600_000,
        );
        // Another port's traffic is not looked at.
        l.packet(&frame(50000, 4444, b"garbage\n"), 1_700_000);
        let c = l.done;
        assert_eq!(c.samples, [(0.5, Some(42), true)]);
        assert_eq!((c.unmatched, c.bad_lines, c.packets), (1, 0, 5));
    }

    #[test]
    fn a_rejection_and_a_line_that_is_not_json_are_told_apart() {
        let mut l = Lines::new(3333);
        l.packet(
            &frame(
                50000,
                3333,
                b"{\"id\":1,\"method\":\"mining.submit\",\"params\":[]}\n",
            ),
            0,
        );
        l.packet(&frame(50000, 3333, b"mining.submit {oops\n"), 1);
        l.packet(
            &frame(
                3333,
                50000,
                b"{\"id\":1,\"result\":null,\"error\":[23,\"low\",null]}\n",
            ),
            2_000_000,
        );
        assert_eq!(l.done.samples, [(2.0, None, false)]);
        assert_eq!(l.done.bad_lines, 1);
    }

    #[test]
    fn the_capture_times_a_real_exchange_on_loopback() {
        use std::io::{BufRead, BufReader, Write};
        let tap = match Tap::open() {
            Ok(t) => t,
            Err(e) => {
                // Only CAP_NET_RAW may open a packet socket: where the tests run without it
                // there is nothing to capture with, and the bench says so in its rows.
                eprintln!("skipped: no packet capture here ({e})");
                return;
            }
        };
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        let answer = std::thread::spawn(move || {
            let (s, _) = server.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            for _ in 0..3 {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                let id: serde_json::Value = serde_json::from_str(&line).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                writeln!(w, "{{\"id\":{},\"result\":true,\"error\":null}}", id["id"]).unwrap();
            }
        });
        let client = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            for id in 0..3 {
                writeln!(
                    w,
                    "{{\"id\":{id},\"method\":\"mining.submit\",\"params\":[\"w\",\"1\",\"00\",\"5f5e1000\",\"0000000{id}\"]}}"
                )
                .unwrap();
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
            }
        });
        let c = tap.capture(port, Duration::from_millis(1500));
        client.join().unwrap();
        answer.join().unwrap();
        assert_eq!(c.samples.len(), 3, "{c:?}");
        for (i, (ms, nonce, ok)) in c.samples.iter().enumerate() {
            assert!((19.0..500.0).contains(ms), "{c:?}");
            assert_eq!((*nonce, *ok), (Some(i as u32), true));
        }
        assert_eq!((c.unmatched, c.bad_lines), (0, 0));
    }
}
