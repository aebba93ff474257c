//! A minimal Stratum V2 pool for the fleet's own tests and benches.
//!
//! It is not the lab's SV2 pool: it exists so that SV2 devices can be checked over real sockets
//! against a peer whose every decision is visible. It answers the Noise handshake with a
//! certificate from its authority keys, `SetupConnection` (optionally fixing the version), and
//! `OpenStandardMiningChannel` with a fixed target; it then sends each channel a future job and
//! the `SetNewPrevHash` activating it, and on request jobs on the current tip, new tips,
//! `SetTarget`, `Reconnect` or a hang-up. It validates every share by recomputing its SHA-256d
//! from its own record of the job (`stale-share` for a job of an earlier tip, `invalid-job-id`,
//! `duplicate-share`, `difficulty-too-low`, `invalid-share` for version bits outside BIP320 or a
//! time before the job's), acknowledges accepted shares in batches of a configured size (a block
//! at once), and can hold its share replies back by a fixed time. Each channel's merkle roots are
//! its own, so no two devices hash the same headers.
//!
//! The protocol side has no I/O of its own: [`Sv2TestPool`] drives it from tokio, and
//! [`Sv2TestPoolCore`] hands it to callers that do their own (the SV2 pool bench's epoll floor).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use primitives::share::{JobHeader, MinerChoice, StandardShare};
use primitives::{CompactTarget, Difficulty, Hash256, Target};
use sv2::messages::common::{mining_flags, protocol, Reconnect, SetupConnectionError};
use sv2::messages::common::{SetupConnectionSuccess, PROTOCOL_VERSION};
use sv2::messages::mining::{
    error_code, NewMiningJob, OpenStandardMiningChannelSuccess, SetNewPrevHash, SetTarget,
    SubmitSharesError, SubmitSharesStandard, SubmitSharesSuccess,
};
use sv2::messages::{Common, Message, Mining};
use sv2::{AuthorityKeys, NoiseError, NoiseResponder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc};

use crate::profile::BIP320_MASK;

#[derive(Clone, Debug)]
/// How the SV2 test pool behaves.
pub struct Sv2TestPoolConfig {
    /// The authority keys its Noise certificates are signed with.
    pub keys: AuthorityKeys,
    /// Every channel's target (or the device's maximum target, when that is lower).
    pub target: Target,
    /// Network target of the jobs, compact form.
    pub nbits: u32,
    /// Accepted shares acknowledged per `SubmitShares.Success` (1: each one).
    pub batch_size: u32,
    /// Every reply to a share is written this long after the share was read.
    pub reply_delay: Duration,
    /// Answer `SetupConnection` with `REQUIRES_FIXED_VERSION`.
    pub fixed_version: bool,
}

impl Default for Sv2TestPoolConfig {
    fn default() -> Self {
        Sv2TestPoolConfig {
            keys: AuthorityKeys::reference(),
            target: Difficulty::saturating(1.0 / 65536.0).to_target(),
            nbits: 0x1d00_ffff,
            batch_size: 1,
            reply_delay: Duration::ZERO,
            fixed_version: false,
        }
    }
}

/// What the pool saw.
#[derive(Default, Debug)]
pub struct Sv2TestPoolStats {
    /// TCP connections accepted.
    pub connections: AtomicU64,
    /// Standard channels opened.
    pub channels: AtomicU64,
    /// Shares accepted.
    pub valid: AtomicU64,
    /// Of the accepted, blocks (they met `nbits`).
    pub blocks: AtomicU64,
    /// Rejected `stale-share`: on a job of an earlier tip.
    pub stale: AtomicU64,
    /// Rejected `duplicate-share`.
    pub duplicate: AtomicU64,
    /// Rejected `difficulty-too-low`.
    pub low_difficulty: AtomicU64,
    /// Rejected `invalid-job-id`.
    pub invalid_job: AtomicU64,
    /// Version bits outside what the pool allowed, or a time before the job's.
    pub invalid: AtomicU64,
    /// Frames or messages that did not decode.
    pub malformed: AtomicU64,
    /// Valid shares whose version differs from their job's.
    pub rolled: AtomicU64,
    /// `SubmitShares.Success` messages sent.
    pub acks: AtomicU64,
    /// Connections per source address.
    pub peers: Mutex<BTreeMap<IpAddr, u64>>,
    /// User identities that opened channels.
    pub users: Mutex<BTreeSet<String>>,
    /// `SetupConnection.flags`, per connection in order.
    pub setup_flags: Mutex<Vec<u32>>,
    /// `OpenStandardMiningChannel.nominal_hash_rate`, per channel in order.
    pub nominal_hash_rates: Mutex<Vec<f32>>,
}

/// What every connection is told.
#[derive(Clone, Copy, Debug)]
enum Broadcast {
    /// A job on the current tip, from this template.
    Job {
        template: u32,
    },
    /// A future job from this template, and the new tip activating it.
    Tip {
        template: u32,
        tip: u32,
    },
    Target(Target),
    Reconnect,
    Kick,
}

/// The work every connection builds its jobs from: the latest template and tip.
#[derive(Clone, Copy, Debug)]
struct Work {
    template: u32,
    tip: u32,
}

struct Shared {
    config: Sv2TestPoolConfig,
    stats: Arc<Sv2TestPoolStats>,
    work: Mutex<Work>,
    next_conn: AtomicU32,
    tx: broadcast::Sender<Broadcast>,
}

/// A running SV2 test pool; it stops when dropped.
pub struct Sv2TestPool {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sv2TestPool {
    fn drop(&mut self) {
        self.task.abort();
        let _ = self.shared.tx.send(Broadcast::Kick);
    }
}

/// The time a tip allows from.
fn tip_ntime(tip: u32) -> u32 {
    1_700_000_000 + 600 * tip
}

fn tip_hash(tip: u32) -> Hash256 {
    primitives::sha256d(&[b"sv2 test pool tip".as_slice(), &tip.to_le_bytes()].concat())
}

impl Shared {
    fn new(config: Sv2TestPoolConfig) -> Arc<Shared> {
        let (tx, _) = broadcast::channel(64);
        Arc::new(Shared {
            config,
            stats: Arc::new(Sv2TestPoolStats::default()),
            work: Mutex::new(Work {
                template: 1,
                tip: 1,
            }),
            next_conn: AtomicU32::new(1),
            tx,
        })
    }

    /// The next template, on a new tip if `tip`.
    fn advance(&self, tip: bool) -> Work {
        let mut w = self.work.lock().expect("work lock");
        w.template += 1;
        if tip {
            w.tip += 1;
        }
        *w
    }

    fn connect(&self, peer: SocketAddr) -> Result<Conn, NoiseError> {
        crate::testpool::count_connection(&self.stats.connections, &self.stats.peers, peer);
        let noise = NoiseResponder::new(&self.config.keys, Duration::from_secs(3600), 1 << 20)?;
        Ok(Conn {
            id: self.next_conn.fetch_add(1, Relaxed),
            noise,
            payload: Vec::new(),
            nbits: self.config.nbits,
            open: false,
            target: self.config.target,
            template: 0,
            tip: 0,
            tip_hash: tip_hash(0),
            jobs: BTreeMap::new(),
            seen: HashSet::new(),
            batch: 0,
            last_seq: 0,
        })
    }

    /// Bytes from a device: replies to shares are appended to `held` (a shell writes them
    /// [`Sv2TestPoolConfig::reply_delay`] later), everything else to `now`. An error means the
    /// connection must close.
    fn handle_bytes(
        &self,
        conn: &mut Conn,
        bytes: &[u8],
        now: &mut Vec<u8>,
        held: &mut Vec<u8>,
    ) -> Result<(), NoiseError> {
        conn.noise.feed(bytes)?;
        conn.noise.take_handshake_bytes(now);
        while let Some(frame) = conn.noise.next_frame() {
            let mut frame = frame?;
            match Message::decode(frame.msg_type(), &mut frame.payload) {
                Ok(m) => handle(conn, m, self, now, held),
                Err(_) => {
                    self.stats.malformed.fetch_add(1, Relaxed);
                }
            }
        }
        Ok(())
    }
}

/// The test pool's protocol without sockets, for a caller that does its own I/O (the SV2
/// pool bench's hand-driven epoll floor, `examples/sv2_floor_epoll.rs`): the same handshake,
/// jobs and share checks as [`Sv2TestPool`], which drives the same code from tokio.
pub struct Sv2TestPoolCore {
    shared: Arc<Shared>,
}

/// One connection of a [`Sv2TestPoolCore`].
pub struct Sv2TestConn(Conn);

impl Sv2TestPoolCore {
    /// A pool with no connections; the caller feeds it their bytes.
    pub fn new(config: Sv2TestPoolConfig) -> Sv2TestPoolCore {
        Sv2TestPoolCore {
            shared: Shared::new(config),
        }
    }

    /// What it saw so far.
    pub fn stats(&self) -> &Sv2TestPoolStats {
        &self.shared.stats
    }

    /// A device connected from `peer`.
    pub fn connect(&self, peer: SocketAddr) -> Result<Sv2TestConn, NoiseError> {
        self.shared.connect(peer).map(Sv2TestConn)
    }

    /// Bytes from the device: replies to shares go to `held`, to be written
    /// [`Sv2TestPoolConfig::reply_delay`] later, everything else to `now`. An error means the
    /// connection must close.
    pub fn handle_bytes(
        &self,
        conn: &mut Sv2TestConn,
        bytes: &[u8],
        now: &mut Vec<u8>,
        held: &mut Vec<u8>,
    ) -> Result<(), NoiseError> {
        self.shared.handle_bytes(&mut conn.0, bytes, now, held)
    }

    /// A new template on the current tip; [`Sv2TestPoolCore::catch_up`] sends it.
    pub fn new_job(&self) {
        self.shared.advance(false);
    }

    /// Appends to `out` the job of the latest template, if the connection's channel is open
    /// and has not had it.
    pub fn catch_up(&self, conn: &mut Sv2TestConn, out: &mut Vec<u8>) {
        let template = self.shared.work.lock().expect("work lock").template;
        if conn.0.open {
            on_broadcast(&mut conn.0, Broadcast::Job { template }, out);
        }
    }
}

impl Sv2TestPool {
    /// Listens on 127.0.0.1 (any port) and serves until dropped.
    pub async fn start(config: Sv2TestPoolConfig) -> io::Result<Sv2TestPool> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Shared::new(config);
        let task = crate::testpool::serve_each(listener, Arc::clone(&shared), serve);
        Ok(Sv2TestPool { addr, shared, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it saw so far.
    pub fn stats(&self) -> &Sv2TestPoolStats {
        &self.shared.stats
    }

    /// The authority public key devices must trust (base58check).
    pub fn authority_public_key(&self) -> String {
        self.shared.config.keys.public_key()
    }

    /// Sends every open channel a job on the current tip.
    pub fn new_job(&self) {
        let work = self.shared.advance(false);
        let _ = self.shared.tx.send(Broadcast::Job {
            template: work.template,
        });
    }

    /// A new tip: every open channel gets a future job and the prev hash activating it; shares
    /// on earlier jobs are stale from then on.
    pub fn new_tip(&self) {
        let work = self.shared.advance(true);
        let _ = self.shared.tx.send(Broadcast::Tip {
            template: work.template,
            tip: work.tip,
        });
    }

    /// Sets every open channel's target.
    pub fn set_target(&self, t: Target) {
        let _ = self.shared.tx.send(Broadcast::Target(t));
    }

    /// Sends every connection `Reconnect` (to the same pool).
    pub fn reconnect_all(&self) {
        let _ = self.shared.tx.send(Broadcast::Reconnect);
    }

    /// Closes every connection (as a pool restart would).
    pub fn kick_all(&self) {
        let _ = self.shared.tx.send(Broadcast::Kick);
    }
}

/// A job as this connection sent it.
#[derive(Clone, Copy)]
struct ConnJob {
    version: u32,
    merkle_root: Hash256,
    tip: u32,
    min_ntime: u32,
    target: Target,
}

/// Jobs a connection remembers (older ones are unknown: `invalid-job-id`).
const MAX_JOBS: usize = 32;
const CHANNEL: u32 = 1;

/// One connection's state.
struct Conn {
    id: u32,
    noise: NoiseResponder,
    /// A message's payload before it is encrypted.
    payload: Vec<u8>,
    nbits: u32,
    open: bool,
    target: Target,
    /// The latest template and tip this connection sent.
    template: u32,
    tip: u32,
    /// `tip_hash(tip)`, worked out once per tip rather than once per share.
    tip_hash: Hash256,
    jobs: BTreeMap<u32, ConnJob>,
    /// Hashes accepted since the tip changed.
    seen: HashSet<Hash256>,
    batch: u32,
    last_seq: u32,
}

impl Conn {
    fn send(&mut self, m: Message, out: &mut Vec<u8>) {
        self.payload.clear();
        if let Ok(t) = m.encode(&mut self.payload) {
            let _ = self
                .noise
                .encrypt(t, m.extension_type(), &self.payload, out);
        }
    }

    fn merkle_root(&self, template: u32) -> Hash256 {
        primitives::sha256d(&[template.to_le_bytes(), self.id.to_le_bytes()].concat())
    }

    /// Sends a job from `template`: a future one with the prev hash of `tip`, or one on the
    /// current tip.
    fn job(&mut self, template: u32, tip: Option<u32>, out: &mut Vec<u8>) {
        self.template = self.template.max(template);
        let merkle_root = self.merkle_root(template);
        let version = 0x2000_0000;
        let job_tip = tip.unwrap_or(self.tip);
        let min_ntime = tip_ntime(job_tip) + (template % 60);
        self.send(
            NewMiningJob {
                channel_id: CHANNEL,
                job_id: template,
                min_ntime: if tip.is_some() { None } else { Some(min_ntime) },
                version,
                merkle_root: merkle_root.0,
            }
            .into(),
            out,
        );
        if let Some(tip) = tip {
            self.tip = tip;
            self.tip_hash = tip_hash(tip);
            self.seen.clear();
            self.send(
                SetNewPrevHash {
                    channel_id: CHANNEL,
                    job_id: template,
                    prev_hash: tip_hash(tip).0,
                    min_ntime,
                    nbits: self.nbits,
                }
                .into(),
                out,
            );
        }
        self.jobs.insert(
            template,
            ConnJob {
                version,
                merkle_root,
                tip: job_tip,
                min_ntime,
                target: self.target,
            },
        );
        while self.jobs.len() > MAX_JOBS {
            self.jobs.pop_first();
        }
    }
}

async fn serve(stream: TcpStream, peer: SocketAddr, s: Arc<Shared>) {
    let Ok(mut conn) = s.connect(peer) else {
        return;
    };
    let (mut rd, wr) = stream.into_split();
    let mut out = Out::new(wr, s.config.reply_delay);
    let mut events = s.tx.subscribe();
    let mut buf = vec![0u8; 16 * 1024];
    let mut now_out = Vec::new();
    let mut held_out = Vec::new();
    loop {
        tokio::select! {
            r = rd.read(&mut buf) => {
                let n = match r {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if s.handle_bytes(&mut conn, &buf[..n], &mut now_out, &mut held_out).is_err() {
                    break;
                }
            }
            e = events.recv() => match e {
                Ok(Broadcast::Kick) | Err(broadcast::error::RecvError::Closed) => break,
                Ok(e) if conn.open => on_broadcast(&mut conn, e, &mut now_out),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            },
        }
        if out.write(&mut now_out, &mut held_out).await.is_err() {
            break;
        }
    }
}

/// Where a connection's replies go. Replies held back by a delay go through a task of their
/// own, which writes each at its due time; without a delay they are written at once from the
/// connection's task, so that a share costs no hand-off between tasks (the fleet's SV2 floor
/// pool measures exactly that cost: see `examples/sv2_floor_pool.rs`).
enum Out {
    Direct(OwnedWriteHalf),
    Queued {
        delay: Duration,
        tx: mpsc::UnboundedSender<(tokio::time::Instant, Vec<u8>)>,
        _writer: AbortOnDrop,
    },
}

/// Stops the delayed writer with its connection.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Out {
    fn new(wr: OwnedWriteHalf, delay: Duration) -> Out {
        if delay.is_zero() {
            return Out::Direct(wr);
        }
        let (tx, writer) = crate::timed_writer::spawn(wr);
        Out::Queued {
            delay,
            tx,
            _writer: AbortOnDrop(writer),
        }
    }

    /// Sends `now` at once and `held` after the delay; both are left empty.
    async fn write(&mut self, now: &mut Vec<u8>, held: &mut Vec<u8>) -> io::Result<()> {
        match self {
            Out::Direct(wr) => {
                // No delay: held replies are due now too, after what was already due.
                now.append(held);
                if !now.is_empty() {
                    wr.write_all(now).await?;
                    now.clear();
                }
            }
            Out::Queued { delay, tx, .. } => {
                let at = tokio::time::Instant::now();
                if !now.is_empty() {
                    let _ = tx.send((at, std::mem::take(now)));
                }
                if !held.is_empty() {
                    let _ = tx.send((at + *delay, std::mem::take(held)));
                }
            }
        }
        Ok(())
    }
}

fn on_broadcast(conn: &mut Conn, e: Broadcast, out: &mut Vec<u8>) {
    match e {
        // Already sent when the channel opened on this work.
        Broadcast::Job { template } if template > conn.template => {
            conn.job(template, None, out);
        }
        Broadcast::Tip { template, tip } if tip > conn.tip => {
            conn.job(template, Some(tip), out);
        }
        Broadcast::Target(t) => {
            conn.target = t;
            conn.send(
                SetTarget {
                    channel_id: CHANNEL,
                    maximum_target: t,
                }
                .into(),
                out,
            );
        }
        Broadcast::Reconnect => conn.send(
            Reconnect {
                new_host: String::new(),
                new_port: 0,
            }
            .into(),
            out,
        ),
        _ => {}
    }
}

fn handle(conn: &mut Conn, m: Message, s: &Shared, out: &mut Vec<u8>, held: &mut Vec<u8>) {
    match m {
        Message::Common(Common::SetupConnection(m)) => {
            s.stats.setup_flags.lock().expect("lock").push(m.flags);
            if m.protocol != protocol::MINING {
                conn.send(
                    SetupConnectionError {
                        flags: 0,
                        error_code: "unsupported-protocol".into(),
                    }
                    .into(),
                    out,
                );
                return;
            }
            let flags = if s.config.fixed_version {
                mining_flags::REQUIRES_FIXED_VERSION
            } else {
                0
            };
            conn.send(
                SetupConnectionSuccess {
                    used_version: PROTOCOL_VERSION,
                    flags,
                }
                .into(),
                out,
            );
        }
        Message::Mining(Mining::OpenStandardMiningChannel(m)) => {
            s.stats.channels.fetch_add(1, Relaxed);
            s.stats
                .users
                .lock()
                .expect("lock")
                .insert(m.user_identity.clone());
            s.stats
                .nominal_hash_rates
                .lock()
                .expect("lock")
                .push(m.nominal_hash_rate);
            conn.target = s.config.target.min(m.max_target);
            conn.open = true;
            conn.send(
                OpenStandardMiningChannelSuccess {
                    request_id: m.request_id,
                    channel_id: CHANNEL,
                    target: conn.target,
                    extranonce_prefix: conn.id.to_be_bytes().to_vec(),
                    group_channel_id: 0,
                }
                .into(),
                out,
            );
            let work = *s.work.lock().expect("work lock");
            conn.job(work.template, Some(work.tip), out);
        }
        Message::Mining(Mining::SubmitSharesStandard(m)) => check_share(conn, &m, s, held),
        _ => {}
    }
}

fn check_share(conn: &mut Conn, m: &SubmitSharesStandard, s: &Shared, out: &mut Vec<u8>) {
    let st = &s.stats;
    let verdict = judge(conn, m, s);
    let code = match verdict {
        Ok(block) => {
            st.valid.fetch_add(1, Relaxed);
            conn.batch += 1;
            conn.last_seq = m.sequence_number;
            if block {
                st.blocks.fetch_add(1, Relaxed);
            }
            // A block is acknowledged at once, as the reference pool does.
            if block || conn.batch >= s.config.batch_size.max(1) {
                st.acks.fetch_add(1, Relaxed);
                let n = std::mem::take(&mut conn.batch);
                conn.send(
                    SubmitSharesSuccess {
                        channel_id: CHANNEL,
                        last_sequence_number: conn.last_seq,
                        new_submits_accepted_count: n,
                        new_shares_sum: n.into(),
                    }
                    .into(),
                    out,
                );
            }
            return;
        }
        Err(code) => code,
    };
    let counter = match code {
        error_code::STALE_SHARE => &st.stale,
        error_code::DUPLICATE_SHARE => &st.duplicate,
        error_code::DIFFICULTY_TOO_LOW => &st.low_difficulty,
        error_code::INVALID_JOB_ID | error_code::INVALID_CHANNEL_ID => &st.invalid_job,
        _ => &st.invalid,
    };
    counter.fetch_add(1, Relaxed);
    conn.send(
        SubmitSharesError {
            channel_id: m.channel_id,
            sequence_number: m.sequence_number,
            error_code: code.into(),
        }
        .into(),
        out,
    );
}

/// Whether a share is valid, and a block; or the error code it earns.
fn judge(conn: &mut Conn, m: &SubmitSharesStandard, s: &Shared) -> Result<bool, &'static str> {
    if !conn.open || m.channel_id != CHANNEL {
        return Err(error_code::INVALID_CHANNEL_ID);
    }
    let job = *conn.jobs.get(&m.job_id).ok_or(error_code::INVALID_JOB_ID)?;
    if job.tip != conn.tip {
        return Err(error_code::STALE_SHARE);
    }
    if m.ntime < job.min_ntime {
        return Err(error_code::INVALID_SHARE);
    }
    let mask = if s.config.fixed_version {
        0
    } else {
        BIP320_MASK
    };
    let share = StandardShare {
        job: JobHeader {
            version: job.version,
            prev_hash: conn.tip_hash,
            bits: CompactTarget::from_consensus(conn.nbits),
        },
        merkle_root: job.merkle_root,
        miner: MinerChoice {
            ntime: m.ntime,
            nonce: m.nonce,
            version: Some(m.version),
            version_mask: mask,
        },
    };
    let check = share
        .check(&job.target)
        .map_err(|_| error_code::INVALID_SHARE)?;
    if !check.meets_share_target {
        return Err(error_code::DIFFICULTY_TOO_LOW);
    }
    if !conn.seen.insert(check.hash) {
        return Err(error_code::DUPLICATE_SHARE);
    }
    if m.version != job.version {
        s.stats.rolled.fetch_add(1, Relaxed);
    }
    Ok(check.meets_network_target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sv2::messages::common::SetupConnection;
    use sv2::messages::mining::OpenStandardMiningChannel;
    use sv2::NoiseInitiator;

    /// A device talking to the sans-IO core, bytes in and out, no socket.
    struct Device {
        noise: NoiseInitiator,
        conn: Sv2TestConn,
    }

    impl Device {
        fn connect(core: &Sv2TestPoolCore) -> Device {
            let keys = AuthorityKeys::reference();
            let mut noise = NoiseInitiator::new(keys.public_bytes(), 1 << 20).unwrap();
            let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
            let mut conn = core.connect(peer).unwrap();
            let mut hello = Vec::new();
            noise.take_handshake_bytes(&mut hello);
            let mut reply = Vec::new();
            core.handle_bytes(&mut conn, &hello, &mut reply, &mut Vec::new())
                .unwrap();
            noise.feed(&reply).unwrap();
            assert!(noise.handshake_done());
            Device { noise, conn }
        }

        /// Sends `m`; returns what the pool answered at once.
        fn send(&mut self, core: &Sv2TestPoolCore, m: Message) -> Vec<Message> {
            let mut payload = Vec::new();
            let t = m.encode(&mut payload).unwrap();
            let mut wire = Vec::new();
            self.noise
                .encrypt(t, m.extension_type(), &payload, &mut wire)
                .unwrap();
            let (mut now, mut held) = (Vec::new(), Vec::new());
            core.handle_bytes(&mut self.conn, &wire, &mut now, &mut held)
                .unwrap();
            now.append(&mut held);
            self.read(&now)
        }

        fn read(&mut self, bytes: &[u8]) -> Vec<Message> {
            self.noise.feed(bytes).unwrap();
            let mut got = Vec::new();
            while let Some(frame) = self.noise.next_frame() {
                let mut frame = frame.unwrap();
                got.push(Message::decode(frame.msg_type(), &mut frame.payload).unwrap());
            }
            got
        }
    }

    #[test]
    fn the_core_serves_a_channel_shares_and_new_work_without_a_socket() {
        // Every hash meets the target: a share's fate is decided by the pool's rules alone.
        let core = Sv2TestPoolCore::new(Sv2TestPoolConfig {
            target: Target::MAX,
            ..Sv2TestPoolConfig::default()
        });
        let mut d = Device::connect(&core);
        let setup = SetupConnection::new(protocol::MINING);
        let got = d.send(&core, setup.into());
        assert!(matches!(
            got[..],
            [Message::Common(Common::SetupConnectionSuccess(_))]
        ));
        let open = OpenStandardMiningChannel {
            request_id: 7,
            user_identity: "u".into(),
            nominal_hash_rate: 1e6,
            max_target: Target::MAX,
        };
        let got = d.send(&core, open.into());
        let [Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)), Message::Mining(Mining::NewMiningJob(job)), Message::Mining(Mining::SetNewPrevHash(tip))] =
            &got[..]
        else {
            panic!("{got:?}");
        };
        assert_eq!(ok.request_id, 7);
        assert_eq!(tip.job_id, job.job_id);

        let share = |seq, nonce| SubmitSharesStandard {
            channel_id: ok.channel_id,
            sequence_number: seq,
            job_id: job.job_id,
            nonce,
            ntime: tip.min_ntime,
            version: job.version,
        };
        let got = d.send(&core, share(1, 42).into());
        assert!(
            matches!(&got[..], [Message::Mining(Mining::SubmitSharesSuccess(s))] if s.last_sequence_number == 1),
            "{got:?}"
        );
        let got = d.send(&core, share(2, 42).into());
        assert!(
            matches!(&got[..], [Message::Mining(Mining::SubmitSharesError(e))] if e.error_code == error_code::DUPLICATE_SHARE),
            "{got:?}"
        );
        assert_eq!(core.stats().valid.load(Relaxed), 1);
        assert_eq!(core.stats().duplicate.load(Relaxed), 1);

        // New work reaches the channel once, and only when asked.
        let mut out = Vec::new();
        core.catch_up(&mut d.conn, &mut out);
        assert!(out.is_empty(), "nothing new yet");
        core.new_job();
        core.catch_up(&mut d.conn, &mut out);
        let got = d.read(&out);
        let [Message::Mining(Mining::NewMiningJob(next))] = &got[..] else {
            panic!("{got:?}");
        };
        assert!(next.job_id > job.job_id && next.min_ntime.is_some());
        out.clear();
        core.catch_up(&mut d.conn, &mut out);
        assert!(out.is_empty(), "the same job twice");
    }
}
