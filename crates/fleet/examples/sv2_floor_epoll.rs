//! `sv2_floor_pool` without tokio: the fleet's minimal SV2 pool (its sans-IO core,
//! [`Sv2TestPoolCore`]) on one thread that drives epoll (through mio) by hand, for
//! `stratumlab bench sv2-pool`'s `floor-epoll` row. Per share the same work as `floor`
//! (Noise, decoding, one header hash, a duplicate check, one encrypted `SubmitShares.Success`
//! written at once) on one `epoll_wait` wake-up shared by whatever is ready, with no task,
//! waker, timer wheel or scheduler queue. Its CPU per share against `floor` is what tokio's
//! machinery costs a share on this machine; against pool_sv2 it is how far any pool could get
//! ahead without leaving the kernel's socket calls.
//!
//! usage: sv2_floor_epoll DIFFICULTY [JOB_INTERVAL_SECS]
//! Signs its certificate with the reference authority pair (`AuthorityKeys::reference`).
//! Prints `sv2 listening on ADDR` (127.0.0.1, any port); serves until killed.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use fleet::sv2_testpool::{Sv2TestConn, Sv2TestPoolConfig, Sv2TestPoolCore};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use primitives::Difficulty;

const LISTENER: Token = Token(0);

struct Conn {
    sock: TcpStream,
    proto: Sv2TestConn,
    /// Encrypted bytes the socket did not take yet.
    pending: Vec<u8>,
}

impl Conn {
    /// Writes `out` (and empties it); what the socket does not take waits for it to be
    /// writable. Err: the connection is done.
    fn write(&mut self, out: &mut Vec<u8>, poll: &Poll, token: Token) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.pending.append(out);
            return Ok(());
        }
        let mut at = 0;
        while at < out.len() {
            match self.sock.write(&out[at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.pending.extend_from_slice(&out[at..]);
                    poll.registry().reregister(
                        &mut self.sock,
                        token,
                        Interest::READABLE | Interest::WRITABLE,
                    )?;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        out.clear();
        Ok(())
    }

    /// Writes what waited for the socket to be writable.
    fn write_pending(&mut self, poll: &Poll, token: Token) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        match self.sock.write(&self.pending) {
            Ok(n) => {
                self.pending.drain(..n);
                if self.pending.is_empty() {
                    poll.registry()
                        .reregister(&mut self.sock, token, Interest::READABLE)?;
                }
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Reads all the socket has and answers it. Err: the connection is done.
fn serve(
    core: &Sv2TestPoolCore,
    c: &mut Conn,
    buf: &mut [u8],
    out: &mut Vec<u8>,
    poll: &Poll,
    token: Token,
) -> io::Result<()> {
    loop {
        match c.sock.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                // No reply delay: held replies are due now too.
                let mut held = Vec::new();
                core.handle_bytes(&mut c.proto, &buf[..n], out, &mut held)
                    .map_err(io::Error::other)?;
                out.append(&mut held);
                // A short read emptied the socket: epoll (edge-triggered) reports the next
                // bytes, so no read just to hear "would block".
                if n < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    c.write(out, poll, token)
}

fn main() -> io::Result<()> {
    let usage = || io::Error::other("usage: sv2_floor_epoll DIFFICULTY [JOB_INTERVAL_SECS]");
    let mut args = std::env::args().skip(1);
    let difficulty: f64 = args.next().and_then(|d| d.parse().ok()).ok_or_else(usage)?;
    let every = match args.next() {
        Some(s) => Duration::from_secs(s.parse().map_err(|_| usage())?),
        None => Duration::from_secs(100 * 365 * 86_400),
    };
    let core = Sv2TestPoolCore::new(Sv2TestPoolConfig {
        target: Difficulty::saturating(difficulty).to_target(),
        ..Sv2TestPoolConfig::default()
    });
    let mut poll = Poll::new()?;
    let mut listener = TcpListener::bind("127.0.0.1:0".parse().expect("address"))?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    println!("sv2 listening on {}", listener.local_addr()?);
    io::stdout().flush()?;

    let mut conns: HashMap<Token, Conn> = HashMap::new();
    let mut next = 1usize;
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 16 * 1024];
    let mut out = Vec::new();
    let mut next_job = Instant::now() + every;
    loop {
        let timeout = next_job.saturating_duration_since(Instant::now());
        match poll.poll(&mut events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if Instant::now() >= next_job {
            // New work for every open channel, as a pool fans out a template's jobs.
            next_job += every;
            core.new_job();
            conns.retain(|&token, c| {
                core.catch_up(&mut c.proto, &mut out);
                c.write(&mut out, &poll, token).is_ok()
            });
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                while let Ok((mut sock, peer)) = listener.accept() {
                    let _ = sock.set_nodelay(true);
                    let token = Token(next);
                    next += 1;
                    poll.registry()
                        .register(&mut sock, token, Interest::READABLE)?;
                    let proto = core.connect(peer).map_err(io::Error::other)?;
                    let pending = Vec::new();
                    conns.insert(
                        token,
                        Conn {
                            sock,
                            proto,
                            pending,
                        },
                    );
                }
                continue;
            }
            let token = ev.token();
            let Some(c) = conns.get_mut(&token) else {
                continue;
            };
            let mut done = ev.is_writable() && c.write_pending(&poll, token).is_err();
            if !done && (ev.is_readable() || ev.is_read_closed()) {
                out.clear();
                done = serve(&core, c, &mut buf, &mut out, &poll, token).is_err();
            }
            if done {
                if let Some(mut c) = conns.remove(&token) {
                    let _ = poll.registry().deregister(&mut c.sock);
                }
            }
        }
    }
}
