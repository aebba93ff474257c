//! `sv2_floor_pool` without tokio: the same minimal SV2 pool on one thread driving epoll
//! (through mio) by hand, for `scripts/bench-sv2-pool.sh`'s `floor-epoll` row. Per share: one
//! `epoll_wait` wake-up shared by whatever is ready, reads until the socket is empty, Noise
//! decryption, decoding, one header hash, a duplicate check, one encrypted
//! `SubmitShares.Success` written at once. No task, waker, timer wheel or work-stealing queue.
//! Its CPU per share against `floor` is what tokio's machinery costs a share on this machine;
//! against pool_sv2 it is how far any pool could get ahead without leaving the kernel's socket
//! calls.
//!
//! usage: sv2_floor_epoll DIFFICULTY [JOB_INTERVAL_SECS]
//! Signs its certificate with the reference authority pair (`AuthorityKeys::reference`).
//! Prints `sv2 listening on ADDR` (127.0.0.1, any port); serves until killed.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use primitives::share::{JobHeader, MinerChoice, StandardShare};
use primitives::{CompactTarget, Difficulty, Hash256, Target};
use sv2::messages::common::{SetupConnectionSuccess, PROTOCOL_VERSION};
use sv2::messages::mining::{
    NewMiningJob, OpenStandardMiningChannelSuccess, SetNewPrevHash, SubmitSharesError,
    SubmitSharesStandard, SubmitSharesSuccess,
};
use sv2::messages::{Common, Message, Mining};
use sv2::{AuthorityKeys, NoiseResponder};

const LISTENER: Token = Token(0);
const CHANNEL: u32 = 1;
const VERSION: u32 = 0x2000_0000;
const NBITS: u32 = 0x1d00_ffff;
const MIN_NTIME: u32 = 1_700_000_000;
/// BIP320's general-purpose version bits.
const VERSION_MASK: u32 = 0x1fff_e000;

struct Conn {
    sock: TcpStream,
    id: u32,
    noise: NoiseResponder,
    open: bool,
    target: Target,
    /// Accepted header hashes (one tip for the whole run).
    seen: HashSet<Hash256>,
    /// Encrypted bytes the socket did not take yet.
    pending: Vec<u8>,
}

struct Floor {
    keys: AuthorityKeys,
    target: Target,
    prev_hash: Hash256,
    /// The newest job; every earlier one stays valid (there is one tip).
    job: u32,
    payload: Vec<u8>,
    out: Vec<u8>,
}

impl Floor {
    /// Each connection's merkle roots are its own, as in the fleet's test pool.
    fn merkle_root(job: u32, conn: u32) -> Hash256 {
        primitives::sha256d(&[job.to_le_bytes(), conn.to_le_bytes()].concat())
    }

    fn send(&mut self, c: &mut Conn, m: Message) {
        self.payload.clear();
        if let Ok(t) = m.encode(&mut self.payload) {
            let _ = c
                .noise
                .encrypt(t, m.extension_type(), &self.payload, &mut self.out);
        }
    }

    fn job(&mut self, c: &mut Conn, future: bool) {
        let m = NewMiningJob {
            channel_id: CHANNEL,
            job_id: self.job,
            min_ntime: if future { None } else { Some(MIN_NTIME) },
            version: VERSION,
            merkle_root: Floor::merkle_root(self.job, c.id).0,
        };
        self.send(c, m.into());
    }

    fn handle(&mut self, c: &mut Conn, m: Message) {
        match m {
            Message::Common(Common::SetupConnection(_)) => self.send(
                c,
                SetupConnectionSuccess {
                    used_version: PROTOCOL_VERSION,
                    flags: 0,
                }
                .into(),
            ),
            Message::Mining(Mining::OpenStandardMiningChannel(m)) => {
                c.target = self.target.min(m.max_target);
                c.open = true;
                let ok = OpenStandardMiningChannelSuccess {
                    request_id: m.request_id,
                    channel_id: CHANNEL,
                    target: c.target,
                    extranonce_prefix: c.id.to_be_bytes().to_vec(),
                    group_channel_id: 0,
                };
                self.send(c, ok.into());
                self.job(c, true);
                let tip = SetNewPrevHash {
                    channel_id: CHANNEL,
                    job_id: self.job,
                    prev_hash: self.prev_hash.0,
                    min_ntime: MIN_NTIME,
                    nbits: NBITS,
                };
                self.send(c, tip.into());
            }
            Message::Mining(Mining::SubmitSharesStandard(m)) => {
                let reply = match self.judge(c, &m) {
                    Ok(()) => SubmitSharesSuccess {
                        channel_id: CHANNEL,
                        last_sequence_number: m.sequence_number,
                        new_submits_accepted_count: 1,
                        new_shares_sum: 1,
                    }
                    .into(),
                    Err(code) => SubmitSharesError {
                        channel_id: m.channel_id,
                        sequence_number: m.sequence_number,
                        error_code: code.into(),
                    }
                    .into(),
                };
                self.send(c, reply);
            }
            _ => {}
        }
    }

    fn judge(&self, c: &mut Conn, m: &SubmitSharesStandard) -> Result<(), &'static str> {
        if !c.open || m.channel_id != CHANNEL {
            return Err("invalid-channel-id");
        }
        if m.job_id == 0 || m.job_id > self.job {
            return Err("invalid-job-id");
        }
        let share = StandardShare {
            job: JobHeader {
                version: VERSION,
                prev_hash: self.prev_hash,
                bits: CompactTarget(NBITS),
            },
            merkle_root: Floor::merkle_root(m.job_id, c.id),
            miner: MinerChoice {
                ntime: m.ntime,
                nonce: m.nonce,
                version: Some(m.version),
                version_mask: VERSION_MASK,
            },
        };
        let check = share.check(&c.target).map_err(|_| "invalid-share")?;
        if !check.meets_share_target {
            return Err("difficulty-too-low");
        }
        if !c.seen.insert(check.hash) {
            return Err("duplicate-share");
        }
        Ok(())
    }

    /// Writes what `self.out` holds for `c`; what the socket does not take waits for it to be
    /// writable. Err: the connection is done.
    fn flush(&mut self, c: &mut Conn, poll: &Poll, token: Token) -> io::Result<()> {
        if !c.pending.is_empty() {
            c.pending.extend_from_slice(&self.out);
            self.out.clear();
            return Ok(());
        }
        let mut at = 0;
        while at < self.out.len() {
            match c.sock.write(&self.out[at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.pending.extend_from_slice(&self.out[at..]);
                    poll.registry().reregister(
                        &mut c.sock,
                        token,
                        Interest::READABLE | Interest::WRITABLE,
                    )?;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        Ok(())
    }
}

/// Reads all the socket has, answers every whole frame. Err: the connection is done.
fn serve(f: &mut Floor, c: &mut Conn, buf: &mut [u8], poll: &Poll, token: Token) -> io::Result<()> {
    loop {
        match c.sock.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                c.noise.feed(&buf[..n]).map_err(io::Error::other)?;
                c.noise.take_handshake_bytes(&mut f.out);
                while let Some(frame) = c.noise.next_frame() {
                    let mut frame = frame.map_err(io::Error::other)?;
                    if let Ok(m) = Message::decode(frame.msg_type(), &mut frame.payload) {
                        f.handle(c, m);
                    }
                }
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
    f.flush(c, poll, token)
}

fn main() -> io::Result<()> {
    let usage = || io::Error::other("usage: sv2_floor_epoll DIFFICULTY [JOB_INTERVAL_SECS]");
    let mut args = std::env::args().skip(1);
    let difficulty: f64 = args.next().and_then(|d| d.parse().ok()).ok_or_else(usage)?;
    let every = match args.next() {
        Some(s) => Duration::from_secs(s.parse().map_err(|_| usage())?),
        None => Duration::from_secs(100 * 365 * 86_400),
    };
    let mut f = Floor {
        keys: AuthorityKeys::reference(),
        target: Difficulty::saturating(difficulty).to_target(),
        prev_hash: primitives::sha256d(b"sv2 floor epoll tip"),
        job: 1,
        payload: Vec::new(),
        out: Vec::new(),
    };
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
            f.job += 1;
            next_job += every;
            let tokens: Vec<Token> = conns.keys().copied().collect();
            for t in tokens {
                let mut c = conns.remove(&t).expect("listed");
                if c.open {
                    f.job(&mut c, false);
                }
                if f.flush(&mut c, &poll, t).is_ok() {
                    conns.insert(t, c);
                }
            }
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                loop {
                    match listener.accept() {
                        Ok((mut sock, _)) => {
                            let _ = sock.set_nodelay(true);
                            let token = Token(next);
                            next += 1;
                            poll.registry()
                                .register(&mut sock, token, Interest::READABLE)?;
                            let noise =
                                NoiseResponder::new(&f.keys, Duration::from_secs(3600), 1 << 20)
                                    .map_err(io::Error::other)?;
                            let c = Conn {
                                sock,
                                id: token.0 as u32,
                                noise,
                                open: false,
                                target: f.target,
                                seen: HashSet::new(),
                                pending: Vec::new(),
                            };
                            conns.insert(token, c);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => break,
                    }
                }
                continue;
            }
            let token = ev.token();
            let Some(c) = conns.get_mut(&token) else {
                continue;
            };
            let mut done = false;
            if ev.is_writable() && !c.pending.is_empty() {
                match c.sock.write(&c.pending) {
                    Ok(n) => {
                        c.pending.drain(..n);
                        if c.pending.is_empty() {
                            poll.registry()
                                .reregister(&mut c.sock, token, Interest::READABLE)?;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => done = true,
                }
            }
            if !done && (ev.is_readable() || ev.is_read_closed()) {
                done = serve(&mut f, c, &mut buf, &poll, token).is_err();
            }
            if done {
                if let Some(mut c) = conns.remove(&token) {
                    let _ = poll.registry().deregister(&mut c.sock);
                }
            }
        }
    }
}
