//! A minimal Stratum V1 pool for the fleet's own tests and benches.
//!
//! It is not the lab's pool (`stratumlab pool`): it exists so that the fleet can be checked
//! against a peer whose every decision is visible. It answers the handshake, hands out one job
//! at a time built around a realistic coinbase, validates every share by recomputing its
//! SHA-256d (unknown job 21, duplicate 22, low difficulty 23), can delay its replies by a fixed
//! time (to check latency accounting against a known delay), and records who connected from
//! where.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use primitives::share::{JobHeader, MinerChoice, Sv1Share};
use primitives::{CoinbaseParts, CoinbaseSpec, CompactTarget, Difficulty, Hash256, Target};
use sv1::{Method, Submit};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

#[derive(Clone, Debug)]
/// How the SV1 test pool behaves.
pub struct TestPoolConfig {
    /// Share difficulty sent after authorize.
    pub difficulty: f64,
    /// Extranonce2 bytes each device rolls.
    pub extranonce2_size: usize,
    /// The pool's version-rolling mask (granted: miner's mask AND this).
    pub version_mask: u32,
    /// Every reply to a submit is written this long after the submit was read.
    pub reply_delay: Duration,
    /// Levels of the (made-up) merkle branch.
    pub branch_len: usize,
    /// Network target of the jobs.
    pub nbits: u32,
}

impl Default for TestPoolConfig {
    fn default() -> Self {
        TestPoolConfig {
            difficulty: 1.0 / 65536.0,
            extranonce2_size: 4,
            version_mask: 0x1fff_e000,
            reply_delay: Duration::ZERO,
            branch_len: 3,
            nbits: 0x1d00_ffff,
        }
    }
}

/// The halves of a realistic coinbase around an extranonce of `en_len` bytes, as a pool builds
/// it: BIP34 `height`, `tag`, a 3.125 BTC P2WPKH payout and `commitment` as the witness
/// commitment (the test pool's jobs, and those tests and benches write by hand).
pub fn coinbase_parts(
    height: u32,
    en_len: usize,
    tag: &[u8],
    commitment: Hash256,
) -> CoinbaseParts {
    let mut spec = CoinbaseSpec::new(height, en_len);
    spec.tag = tag.to_vec();
    spec.payouts.push(primitives::Payout {
        script_pubkey: primitives::bitcoin::ScriptBuf::from_bytes(
            [&[0x00, 0x14][..], &[0x42; 20]].concat(),
        ),
        value: primitives::bitcoin::Amount::from_sat(312_500_000),
    });
    spec.witness_commitment = Some(commitment);
    spec.build().expect("a valid coinbase")
}

/// What the pool saw.
#[derive(Default, Debug)]
pub struct TestPoolStats {
    /// TCP connections accepted.
    pub connections: AtomicU64,
    /// Shares accepted.
    pub valid: AtomicU64,
    /// Rejected low difficulty (23).
    pub low_difficulty: AtomicU64,
    /// Rejected for an unknown job (21).
    pub stale: AtomicU64,
    /// Rejected as duplicates (22).
    pub duplicate: AtomicU64,
    /// Lines or submits that did not parse.
    pub malformed: AtomicU64,
    /// Valid shares whose version bits were non-zero.
    pub rolled: AtomicU64,
    /// Connections per source address.
    pub peers: Mutex<BTreeMap<IpAddr, u64>>,
    /// Users that authorized.
    pub users: Mutex<BTreeSet<String>>,
    /// The first method each connection sent, in order of connections.
    pub first_methods: Mutex<Vec<String>>,
    /// Masks requested in `mining.configure`.
    pub requested_masks: Mutex<Vec<u32>>,
    /// Difficulties suggested.
    pub suggested: Mutex<Vec<f64>>,
}

/// A job as `mining.notify` carries it: what the test pool hands out and checks shares against,
/// and what the device's tests and benches write by hand.
#[derive(Clone, Debug)]
pub struct Job {
    /// The job id.
    pub id: String,
    /// The previous block's hash, internal byte order.
    pub prev_hash: Hash256,
    /// The coinbase before the extranonces.
    pub coinb1: Vec<u8>,
    /// The coinbase after the extranonces.
    pub coinb2: Vec<u8>,
    /// The coinbase's merkle siblings, bottom up.
    pub branch: Vec<Hash256>,
    /// The header version.
    pub version: u32,
    /// The network target, compact form.
    pub nbits: u32,
    /// The header time, Unix seconds.
    pub ntime: u32,
}

impl Job {
    /// The `mining.notify` line, its newline included.
    pub fn notify(&self, clean: bool) -> Vec<u8> {
        let mut line = Vec::new();
        sv1::write::notify(
            &mut line,
            &sv1::write::NotifyFields {
                job_id: &self.id,
                prev_hash: &self.prev_hash,
                coinb1: &self.coinb1,
                coinb2: &self.coinb2,
                merkle_branch: &self.branch,
                version: self.version,
                nbits: self.nbits,
                ntime: self.ntime,
                clean_jobs: clean,
            },
        );
        line
    }

    /// The share `sub` stands for on this job, from a connection given extranonce1 `en1` and
    /// the version-rolling mask `mask`.
    pub fn share<'a>(&'a self, sub: &'a Submit<'_>, en1: &'a [u8], mask: u32) -> Sv1Share<'a> {
        Sv1Share {
            job: JobHeader {
                version: self.version,
                prev_hash: self.prev_hash,
                bits: CompactTarget::from_consensus(self.nbits),
            },
            coinb1: &self.coinb1,
            extranonce1: en1,
            extranonce2: sub.extranonce2(),
            coinb2: &self.coinb2,
            merkle_branch: &self.branch,
            miner: MinerChoice {
                ntime: sub.ntime,
                nonce: sub.nonce,
                version: sub.version_bits,
                version_mask: mask,
            },
        }
    }
}

/// A job handed out, and its notify line as every connection gets it.
struct Handed {
    job: Job,
    notify_line: Arc<Vec<u8>>,
}

struct Shared {
    config: TestPoolConfig,
    stats: Arc<TestPoolStats>,
    jobs: Mutex<Vec<Arc<Handed>>>,
    next_job: AtomicU64,
    next_en1: AtomicU64,
    jobs_tx: broadcast::Sender<Arc<Vec<u8>>>,
    kick_tx: broadcast::Sender<()>,
}

/// A running test pool; it stops when dropped.
pub struct TestPool {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestPool {
    fn drop(&mut self) {
        self.task.abort();
        let _ = self.shared.kick_tx.send(());
    }
}

impl TestPool {
    /// Listens on 127.0.0.1 (any port) and serves until dropped.
    pub async fn start(config: TestPoolConfig) -> std::io::Result<TestPool> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (jobs_tx, _) = broadcast::channel(64);
        let (kick_tx, _) = broadcast::channel(4);
        let shared = Arc::new(Shared {
            config,
            stats: Arc::new(TestPoolStats::default()),
            jobs: Mutex::new(Vec::new()),
            next_job: AtomicU64::new(1),
            next_en1: AtomicU64::new(1),
            jobs_tx,
            kick_tx,
        });
        shared.new_job(true);
        let task = serve_each(listener, Arc::clone(&shared), serve);
        Ok(TestPool { addr, shared, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it saw so far.
    pub fn stats(&self) -> &TestPoolStats {
        &self.shared.stats
    }

    /// Sends a new job to every authorized connection.
    pub fn new_job(&self, clean: bool) {
        self.shared.new_job(clean);
    }

    /// Closes every connection (as a pool restart would).
    pub fn kick_all(&self) {
        let _ = self.shared.kick_tx.send(());
    }

    /// The target shares are checked against.
    pub fn target(&self) -> Target {
        Difficulty::saturating(self.shared.config.difficulty).to_target()
    }
}

impl Shared {
    fn new_job(&self, clean: bool) {
        let n = self.next_job.fetch_add(1, Relaxed);
        let en_len = 4 + self.config.extranonce2_size;
        let parts = coinbase_parts(
            900_000 + n as u32,
            en_len,
            b"/stratumlab fleet test pool/",
            primitives::sha256d(&n.to_le_bytes()),
        );
        let branch = (0..self.config.branch_len)
            .map(|i| primitives::sha256d(&[n.to_le_bytes(), (i as u64).to_le_bytes()].concat()))
            .collect::<Vec<_>>();
        let prev_hash = primitives::sha256d(&(n / 4).to_le_bytes());
        let job = Job {
            id: format!("{n:x}"),
            prev_hash,
            coinb1: parts.prefix,
            coinb2: parts.suffix,
            branch,
            version: 0x2000_0000,
            nbits: self.config.nbits,
            ntime: 1_700_000_000 + n as u32,
        };
        let notify_line = Arc::new(job.notify(clean));
        let job = Arc::new(Handed { job, notify_line });
        {
            let mut jobs = self.jobs.lock().expect("jobs lock");
            if clean {
                jobs.clear();
            }
            jobs.push(Arc::clone(&job));
            let excess = jobs.len().saturating_sub(8);
            jobs.drain(..excess);
        }
        let _ = self.jobs_tx.send(Arc::clone(&job.notify_line));
    }

    fn current_notify(&self) -> Arc<Vec<u8>> {
        let jobs = self.jobs.lock().expect("jobs lock");
        Arc::clone(&jobs.last().expect("a job").notify_line)
    }

    fn job(&self, id: &str) -> Option<Arc<Handed>> {
        let jobs = self.jobs.lock().expect("jobs lock");
        jobs.iter().find(|j| j.job.id == id).cloned()
    }
}

/// Runs until SIGTERM or SIGINT, calling `new_job` every `every` when given (new work now and
/// then, as a pool or a translator fans its jobs out): the floor pools' main loop
/// (`examples/sv1_floor_pool.rs`, `examples/sv2_floor_pool.rs`).
pub async fn until_signalled(
    every: Option<Duration>,
    mut new_job: impl FnMut(),
) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut jobs = tokio::time::interval(every.unwrap_or(Duration::MAX / 4));
    jobs.tick().await;
    loop {
        tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = jobs.tick(), if every.is_some() => new_job(),
        }
    }
}

/// Accepts connections until the task is aborted, each served by `serve` on a task of its own
/// with Nagle off (both test pools).
pub(crate) fn serve_each<S, F, Fut>(
    listener: tokio::net::TcpListener,
    shared: Arc<S>,
    serve: F,
) -> tokio::task::JoinHandle<()>
where
    S: Send + Sync + 'static,
    F: Fn(TcpStream, SocketAddr, Arc<S>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve(stream, peer, Arc::clone(&shared)));
        }
    })
}

/// Counts a connection from `peer` in `connections`, and in `peers` by its source address
/// (both test pools).
pub(crate) fn count_connection(
    connections: &AtomicU64,
    peers: &Mutex<BTreeMap<IpAddr, u64>>,
    peer: SocketAddr,
) {
    connections.fetch_add(1, Relaxed);
    *peers
        .lock()
        .expect("peers lock")
        .entry(peer.ip())
        .or_default() += 1;
}

async fn serve(stream: TcpStream, peer: SocketAddr, s: Arc<Shared>) {
    count_connection(&s.stats.connections, &s.stats.peers, peer);
    let (mut rd, wr) = stream.into_split();
    let (tx, writer) = crate::timed_writer::spawn::<Arc<Vec<u8>>>(wr);
    let mut jobs_rx = s.jobs_tx.subscribe();
    let mut kick_rx = s.kick_tx.subscribe();
    let mut lines = sv1::LineBuffer::new(16 * 1024);
    let mut buf = vec![0u8; 16 * 1024];
    let en1 = (s.next_en1.fetch_add(1, Relaxed) as u32).to_be_bytes();
    let mut conn = Conn {
        en1,
        mask: 0,
        subscribed: false,
        authorized: false,
        first: true,
        seen: HashSet::new(),
    };
    let target = Difficulty::saturating(s.config.difficulty).to_target();
    loop {
        tokio::select! {
            r = rd.read(&mut buf) => {
                let n = match r {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let now = tokio::time::Instant::now();
                let framed = lines.split(&buf[..n], |line| {
                    let mut out = Vec::new();
                    let delay = conn.handle(line, &s, &target, &mut out);
                    if !out.is_empty() {
                        let _ = tx.send((now + delay, Arc::new(out)));
                    }
                    ControlFlow::<()>::Continue(())
                });
                if framed.is_err() {
                    writer.abort();
                    return;
                }
            }
            job = jobs_rx.recv() => match job {
                Ok(line) if conn.authorized => {
                    let _ = tx.send((tokio::time::Instant::now(), line));
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => break,
            },
            _ = kick_rx.recv() => break,
        }
    }
    drop(tx);
    writer.abort();
}

/// What makes a share a duplicate: job, extranonce2, nonce, ntime, version bits.
type ShareKey = (String, Vec<u8>, u32, u32, Option<u32>);

struct Conn {
    en1: [u8; 4],
    mask: u32,
    subscribed: bool,
    authorized: bool,
    first: bool,
    seen: HashSet<ShareKey>,
}

impl Conn {
    /// Answers one line into `out`; returns how long to hold the answer back.
    fn handle(&mut self, line: &[u8], s: &Shared, target: &Target, out: &mut Vec<u8>) -> Duration {
        let Ok((env, method)) = sv1::parse_line(line) else {
            s.stats.malformed.fetch_add(1, Relaxed);
            return Duration::ZERO;
        };
        if self.first {
            self.first = false;
            let name = env.method_str().unwrap_or("?").to_owned();
            s.stats.first_methods.lock().expect("lock").push(name);
        }
        let id = env.id.unwrap_or("null");
        match method {
            Some(Method::Configure) => {
                let c = sv1::Configure::parse(&env).unwrap_or_default();
                let asked = c.version_rolling_mask.unwrap_or(0);
                s.stats.requested_masks.lock().expect("lock").push(asked);
                self.mask = asked & s.config.version_mask;
                sv1::write::reply_configure(
                    out,
                    id,
                    &sv1::write::ConfigureReply {
                        version_rolling: Some(self.mask),
                        requested: &c.extensions,
                        ..Default::default()
                    },
                );
            }
            Some(Method::Subscribe) => {
                self.subscribed = true;
                sv1::write::reply_subscribe(out, id, "1", &self.en1, s.config.extranonce2_size);
            }
            Some(Method::Authorize) => {
                if let Ok(a) = sv1::Authorize::parse(&env) {
                    s.stats
                        .users
                        .lock()
                        .expect("lock")
                        .insert(a.user.into_owned());
                }
                self.authorized = true;
                sv1::write::reply_bool(out, id, true);
                sv1::write::set_difficulty(out, s.config.difficulty);
                out.extend_from_slice(&s.current_notify());
            }
            Some(Method::SuggestDifficulty) => {
                if let Ok(d) = sv1::message::suggested_difficulty(&env) {
                    s.stats.suggested.lock().expect("lock").push(d);
                }
                if env.id().is_some() {
                    sv1::write::reply_bool(out, id, true);
                }
            }
            Some(Method::Submit) => {
                let code = self.check_submit(&env, s, target);
                match code {
                    None => sv1::write::reply_bool(out, id, true),
                    Some(code) => sv1::write::reply_error(out, id, code),
                }
                return s.config.reply_delay;
            }
            _ => {}
        }
        Duration::ZERO
    }

    fn check_submit(
        &mut self,
        env: &sv1::Envelope<'_>,
        s: &Shared,
        target: &Target,
    ) -> Option<sv1::ErrorCode> {
        use sv1::ErrorCode;
        let Ok(sub) = Submit::parse(env) else {
            s.stats.malformed.fetch_add(1, Relaxed);
            return Some(ErrorCode::Other);
        };
        let Some(handed) = s.job(sub.job_id) else {
            s.stats.stale.fetch_add(1, Relaxed);
            return Some(ErrorCode::JobNotFound);
        };
        let job = &handed.job;
        let key = (
            job.id.clone(),
            sub.extranonce2().to_vec(),
            sub.nonce,
            sub.ntime,
            sub.version_bits,
        );
        if !self.seen.insert(key) {
            s.stats.duplicate.fetch_add(1, Relaxed);
            return Some(ErrorCode::Duplicate);
        }
        match job.share(&sub, &self.en1, self.mask).check(target) {
            Ok(c) if c.meets_share_target => {
                s.stats.valid.fetch_add(1, Relaxed);
                if sub.version_bits.is_some_and(|v| v != 0) {
                    s.stats.rolled.fetch_add(1, Relaxed);
                }
                None
            }
            Ok(_) => {
                s.stats.low_difficulty.fetch_add(1, Relaxed);
                Some(ErrorCode::LowDifficulty)
            }
            Err(_) => {
                s.stats.malformed.fetch_add(1, Relaxed);
                Some(ErrorCode::Other)
            }
        }
    }
}
