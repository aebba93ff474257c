//! What the fuzz targets of `crates/pool/fuzz` run, here so that `tests/fuzz_corpus.rs` replays
//! the committed corpus on stable. Each function reads its input as a script of steps against
//! one sans-IO session over an engine with no store and no event log, on a virtual clock, and
//! panics only when an invariant breaks.
//!
//! - [`sv1_session`]: an SV1 [`crate::sv1::Session`] fed raw lines, well-formed requests built
//!   from the session's own state (so that shares name its jobs, and many are valid), clock
//!   steps, new work and partial or whole writes of its output.
//! - [`sv2_session`]: an SV2 [`crate::sv2::Session`] fed raw message payloads through
//!   `Message::decode`, well-formed messages built from its state (channels, jobs, declared jobs
//!   under real tokens), clock steps and new work.
//!
//! A script starts with two configuration bytes (the engine's, then the front end's; see
//! `Pool::new`, [`sv1_config`] and [`sv2_config`]); then each step is an operation byte and
//! its arguments. [`script`] writes scripts, so that seeds need not know the byte layout.
//!
//! Invariants checked after every step (see the `check*` methods): no panic; statistics never
//! decrease, and every share gets exactly one verdict, counted once; a connection that asked
//! to be closed stays so; what the session writes is well-formed and means what the session
//! judges by (SV1: whole JSON-RPC lines, one reply per request under its id, each job announced
//! as issued and at the difficulty the miner was last told, a subscribe reply's extranonce the
//! channel's; SV2: messages that encode and decode back, only those a pool sends, the replies
//! each request calls for, a new channel's own first job, `SetNewPrevHash` right after its job,
//! jobs whose merkle roots are the ones shares are judged by, group jobs only to connections
//! that take them, every accepted share acknowledged once with its channel's count and last
//! sequence number, every refused one refused); after new work, every channel is on it; a
//! step's output is bounded; channels stay within the configured number, their job lists and
//! duplicate tables within their bounds, their extranonce prefixes disjoint; every block found
//! is a valid block of its header's target; and once the connection ends, it and its workers
//! are gone from the statistics.

use primitives::fuzz_input::FuzzInput as Input;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use primitives::bitcoin::absolute::LockTime;
use primitives::bitcoin::hashes::Hash as _;
use primitives::bitcoin::transaction::Version;
use primitives::bitcoin::{
    consensus, Address, Amount, Block, KnownHrp, Network, OutPoint, ScriptBuf, Sequence,
    Transaction, TxIn, TxOut, Txid, Witness, WitnessProgram, WitnessVersion,
};
use primitives::{sha256d, CompactTarget, Difficulty, Hash256, Target};
use sv2::messages::common::{
    mining_flags, ChannelEndpointChanged, SetupConnection, SetupConnectionSuccess,
};
use sv2::messages::extensions::RequestExtensions;
use sv2::messages::mining::{
    CloseChannel, NewMiningJob, OpenExtendedMiningChannel, OpenStandardMiningChannel,
    SetCustomMiningJob, SetGroupChannel, SetTarget, SubmitSharesExtended, SubmitSharesStandard,
    SubmitSharesSuccess, UpdateChannel,
};
use sv2::messages::{Common, Extensions, Mining};
use sv2::Message;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::channel::{Channel, ChannelConfig, Issued};
use crate::engine::{Engine, EngineConfig, FoundBlock, PayoutMode};
use crate::jd_token::{OutputsDigest, TokenClaims, TokenKey, TokenKind};
use crate::jobs::{JobBook, JobConfig};
use crate::stats::{PoolStats, WorkerRegistry};
use crate::sv1::{LineKind, Sv1Config};
use crate::sv2::{Kind, Sv2Config};
use crate::template::{Template, TemplateTx};
use crate::Timestamp;
use ::sv1::VERSION_ROLLING_MASK;
use mining::vardiff::VardiffConfig;

/// The virtual clock's start, and the wall clock (Unix milliseconds) the SV2 session is told
/// at that instant: the session never reads a clock of its own here.
const T0: Timestamp = Timestamp::from_millis(1_000_000);
const WALL0_MS: u64 = 1_750_000_000_000;
/// The node's clock in the first template, and the height of the first block.
const CURTIME: u32 = 1_700_000_000;
const HEIGHT: u32 = 300;
/// Regtest's limit: about every second share is a block. And a target no share meets.
const EASY_BITS: CompactTarget = CompactTarget::from_consensus(0x207f_ffff);
const HARD_BITS: CompactTarget = CompactTarget::from_consensus(0x1d00_ffff);
/// Steps per run, whatever the input's length: a run's time stays bounded.
const MAX_STEPS: usize = 400;
/// The longest SV1 line the harness hands the session; a longer one is refused as the shell
/// refuses one over its limit (`line_too_long`).
const LINE_CAP: usize = 4096;
/// What one SV1 step may add to the output besides what a line echoes: a reply, a
/// `set_difficulty` and a `mining.notify` (under 1 KiB for the templates here: a coinbase of
/// about 170 bytes written as hex, at most two merkle branch hashes) with room to spare. A line
/// may add at most eight bytes per byte it read (its id and configure's extension names come
/// back escaped, six bytes at most for one), so output grows linearly with input: no step
/// amplifies, and a script that never writes holds at most this much per step.
const SV1_STEP_OUTPUT: usize = 4096;
const SV1_ECHO_FACTOR: usize = 8;
/// The pool's payout script in pool mode: a P2WPKH of twenty 0x22 bytes.
const POOL_PROGRAM: [u8; 20] = [0x22; 20];
/// The job token key of configurations that take declared jobs.
const TOKEN_KEY: [u8; 32] = [0x4a; 32];

/// Operation bytes (the low four bits; see the targets' step loops).
mod op {
    pub(crate) const SV1_LINE: u8 = 0;
    pub(crate) const SV1_REQUEST: u8 = 4;
    pub(crate) const SV1_TICK: u8 = 9;
    pub(crate) const SV1_WORK: u8 = 11;
    pub(crate) const SV1_WRITE: u8 = 13;
    pub(crate) const SV2_RAW: u8 = 0;
    pub(crate) const SV2_MESSAGE: u8 = 4;
    pub(crate) const SV2_MESSAGE_UNFLUSHED: u8 = 10;
    pub(crate) const SV2_TICK: u8 = 11;
    pub(crate) const SV2_WORK: u8 = 13;
    pub(crate) const CLOSE: u8 = 15;
}

// ---- The pool around the session ------------------------------------------------------------

/// A distinct previous-block hash per `n` (the integration tests' templates use it too).
pub fn tip(n: u8) -> Hash256 {
    let mut h = [0u8; 32];
    h[0] = n;
    h[17] = n.wrapping_mul(7);
    h[31] = 0x5a;
    Hash256(h)
}

fn pool_script() -> ScriptBuf {
    let mut s = vec![0x00, 0x14];
    s.extend_from_slice(&POOL_PROGRAM);
    ScriptBuf::from_bytes(s)
}

/// A regtest address: the only kind of user that gets work in solo mode.
fn regtest_address() -> &'static str {
    static ADDRESS: OnceLock<String> = OnceLock::new();
    ADDRESS.get_or_init(|| {
        let wp = WitnessProgram::new(WitnessVersion::V0, &[0x11; 20]).expect("20-byte program");
        Address::from_witness_program(wp, KnownHrp::Regtest).to_string()
    })
}

/// A small valid non-coinbase transaction, different for every `n` (found blocks are
/// deserialized whole, so the template's transactions must be real ones).
pub fn fake_tx(n: u8) -> Transaction {
    Transaction {
        version: Version::TWO,
        lock_time: LockTime::ZERO,
        input: vec![TxIn {
            previous_output: OutPoint {
                txid: Txid::from_byte_array([n; 32]),
                vout: u32::from(n),
            },
            script_sig: ScriptBuf::from_bytes(vec![0x51]),
            sequence: Sequence::MAX,
            witness: Witness::new(),
        }],
        output: vec![TxOut {
            value: Amount::from_sat(10_000 * u64::from(n) + 1),
            script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
        }],
    }
}

/// A template on tip `n` with `txs` transactions, committing to witnesses or not.
fn template(n: u8, bits: CompactTarget, txs: u8, witness: bool, curtime: u32) -> Template {
    let txs: Vec<Transaction> = (0..txs)
        .map(|i| fake_tx(n.wrapping_mul(4).wrapping_add(i).wrapping_add(1)))
        .collect();
    let transactions: Vec<TemplateTx> = txs
        .iter()
        .enumerate()
        .map(|(i, tx)| TemplateTx {
            data: consensus::serialize(tx),
            txid: Hash256(tx.compute_txid().to_byte_array()),
            fee: Amount::from_sat(100 * (i as u64 + 1)),
            weight: tx.weight().to_wu() as u32,
        })
        .collect();
    let wtxids: Vec<Hash256> = txs
        .iter()
        .map(|tx| Hash256(tx.compute_wtxid().to_byte_array()))
        .collect();
    let fees: u64 = transactions.iter().map(|t| t.fee.to_sat()).sum();
    Template {
        height: HEIGHT + u32::from(n),
        prev_hash: tip(n),
        version: 0x2000_0000,
        bits,
        curtime,
        mintime: curtime - 600,
        median_time_past: None,
        coinbase_value: Amount::from_sat(5_000_000_000 + fees),
        witness_commitment: witness
            .then(|| primitives::coinbase::witness_commitment(&wtxids, &[0; 32])),
        transactions: transactions.into(),
        longpoll_id: None,
    }
}

/// The statistics that only ever grow.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Counters {
    accepted: u64,
    work: f64,
    rejected: [u64; 7],
    vardiff: u64,
    jobs: u64,
    clean: u64,
    blocks: u64,
    opened: u64,
}

impl Counters {
    fn rejected(&self) -> u64 {
        self.rejected.iter().sum()
    }
}

/// The engine a session runs on, its job book, the virtual clock and what the checks remember.
struct Pool {
    engine: Arc<Engine>,
    found: UnboundedReceiver<FoundBlock>,
    book: JobBook,
    now: Timestamp,
    /// The tip the latest template builds on (`tip(n)`).
    tip: u8,
    counters: Counters,
    blocks: u64,
    max_jobs: usize,
    dedup_capacity: usize,
}

impl Pool {
    /// The engine of configuration byte `c`: bit 0 solo (else pool mode); bits 1-2 the start
    /// difficulty (every share valid, one in 4, one in 16, none); bits 3-4 the vardiff's
    /// retarget interval; bit 5 two jobs per channel (else 8); bit 6 a duplicate table of 4
    /// shares (else the default); bit 7 no grace after a difficulty change. The extranonce is
    /// `extranonce_len` bytes. With `work`, a first template is served at once.
    fn new(c: u8, extranonce_len: usize, work: bool) -> Pool {
        let start = [
            Difficulty::MIN,
            Difficulty::saturating(2f64.powi(-30)),
            Difficulty::saturating(2f64.powi(-28)),
            Difficulty::ONE,
        ][usize::from(c >> 1 & 3)];
        let retarget_interval_ms = [1_000, 10_000, 30_000, 3_600_000][usize::from(c >> 3 & 3)];
        let max_jobs = if c & 0x20 != 0 { 2 } else { 8 };
        let dedup_capacity = if c & 0x40 != 0 {
            4
        } else {
            ChannelConfig::default().dedup_capacity
        };
        let config = EngineConfig {
            jobs: JobConfig {
                extranonce_len,
                ..JobConfig::default()
            },
            channel: ChannelConfig {
                max_jobs,
                dedup_capacity,
                grace_ms: if c & 0x80 != 0 { 0 } else { 5_000 },
                vardiff: VardiffConfig {
                    min: Difficulty::MIN,
                    max: Difficulty::saturating(1024.0),
                    retarget_interval_ms,
                    ..VardiffConfig::default()
                },
                ..ChannelConfig::default()
            },
            payout: if c & 1 != 0 {
                PayoutMode::Solo
            } else {
                PayoutMode::Pool(pool_script())
            },
            network: Network::Regtest,
            start_difficulty: start,
        };
        let stats = PoolStats::new(Timestamp::from_millis(0));
        let workers = WorkerRegistry::new(&stats);
        let (engine, found) =
            Engine::new(config, stats, workers, None, events::EventSink::disabled());
        let mut pool = Pool {
            engine,
            found,
            book: JobBook::new(JobConfig {
                extranonce_len,
                ..JobConfig::default()
            }),
            now: T0,
            tip: 0,
            counters: Counters::default(),
            blocks: 0,
            max_jobs,
            dedup_capacity,
        };
        if work {
            pool.work(1, 3);
        }
        pool.counters = pool.counters();
        pool
    }

    /// The wall clock the virtual clock stands for.
    fn wall_ms(&self) -> u64 {
        WALL0_MS + self.now.millis_since(T0)
    }

    /// A clock step: the low 15 bits of `v`, in seconds when its top bit is set, else in
    /// milliseconds (up to about nine hours at once).
    fn advance(&mut self, v: u16) {
        let n = u64::from(v & 0x7fff);
        self.now = self
            .now
            .plus_millis(if v & 0x8000 != 0 { n * 1000 } else { n });
    }

    /// New work. `k & 7 == 0`: the pool stops handing out work; 7: nothing new (the session
    /// hears late of work it was not told of). Otherwise a template: bits 3-4 pick its tip (the
    /// same twice, the next one, or back to the one before: a reorg), bit 5 unreachable bits
    /// (else regtest's); `e & 3` transactions, `e & 4` a witness commitment, `e >> 3 & 15`
    /// seconds more on the node's clock. Whether the session hears of it (`e`'s top bit clear)
    /// is the caller's business.
    fn work(&mut self, k: u8, e: u8) {
        match k & 7 {
            0 => return self.engine.stop_work(),
            7 => return,
            _ => {}
        }
        match k >> 3 & 3 {
            2 => self.tip = self.tip.wrapping_add(1),
            3 => self.tip = self.tip.saturating_sub(1),
            _ => {}
        }
        let bits = if k & 0x20 != 0 { HARD_BITS } else { EASY_BITS };
        let curtime = CURTIME + (self.now.millis_since(T0) / 1000) as u32 + u32::from(e >> 3 & 15);
        let t = template(self.tip, bits, e & 3, e & 4 != 0, curtime);
        let g = self.book.handle_template(Arc::new(t), self.now);
        self.engine.publish(g);
    }

    fn counters(&self) -> Counters {
        let s = self.engine.stats.snapshot(self.now);
        let mut rejected = [0; 7];
        for (slot, (_, n)) in rejected.iter_mut().zip(s.rejected.iter()) {
            *slot = n;
        }
        Counters {
            accepted: s.accepted,
            work: s.accepted_work,
            rejected,
            vardiff: s.vardiff_changes,
            jobs: s.jobs.created,
            clean: s.jobs.clean,
            blocks: s.blocks.submitted,
            opened: s.connections_opened,
        }
    }

    /// Statistics never decrease; every block found reached the block queue and is valid.
    /// Returns the counters before and after the step.
    fn check(&mut self) -> (Counters, Counters) {
        let before = self.counters;
        let now = self.counters();
        let grew = now.accepted >= before.accepted
            && now.work >= before.work
            && now
                .rejected
                .iter()
                .zip(&before.rejected)
                .all(|(a, b)| a >= b)
            && now.vardiff >= before.vardiff
            && now.jobs >= before.jobs
            && now.clean >= before.clean
            && now.blocks >= before.blocks
            && now.opened >= before.opened;
        assert!(grew, "statistics went back: {before:?} then {now:?}");
        self.counters = now;
        while let Ok(b) = self.found.try_recv() {
            self.blocks += 1;
            check_block(&b);
        }
        // Every block a share found is assembled and queued (a block the pool cannot build
        // would be lost).
        assert_eq!(self.blocks, now.blocks, "found blocks not queued");
        (before, now)
    }

    /// A channel's own bounds: jobs remembered (the pool's and declared ones apart), shares
    /// remembered for duplicates, its target that of its difficulty.
    fn check_channel(&self, c: &Channel) {
        let declared = c.jobs().filter(|j| j.job.is_declared()).count();
        let ours = c.jobs().count() - declared;
        assert!(
            ours <= self.max_jobs && declared <= self.max_jobs,
            "{ours} jobs and {declared} declared ones remembered, at most {} each",
            self.max_jobs
        );
        let (shares, _) = c.dedup_memory();
        assert!(
            shares <= self.dedup_capacity,
            "{shares} shares remembered, capacity {}",
            self.dedup_capacity
        );
        assert_eq!(c.target(), c.difficulty().to_target());
    }

    /// The connection ends (`close` tells the session, at the pool's time); after it, it is no
    /// longer counted, nor are its workers online.
    fn close(&mut self, close: impl FnOnce(Timestamp)) {
        close(self.now);
        self.check();
        let s = self.engine.stats.snapshot(self.now);
        assert_eq!(s.connections, 0, "a closed connection still counted");
        assert_eq!(s.workers, 0, "workers of a closed connection still online");
    }
}

/// A block found on a template is a whole valid block: its header hashes to the share's hash
/// and meets its own bits, its merkle root and witness commitment match its transactions. One
/// found on a declared job is the header and coinbase the pool keeps of it.
fn check_block(b: &FoundBlock) {
    assert!(b.block.len() > 80, "block of {} bytes", b.block.len());
    let header: [u8; 80] = b.block[..80].try_into().expect("80 bytes");
    assert_eq!(
        sha256d(&header),
        b.hash,
        "the block's header is not the share's"
    );
    if b.declared {
        let h: primitives::bitcoin::block::Header =
            consensus::deserialize(&header).expect("a header");
        h.validate_pow(h.target())
            .expect("a block meets its target");
        let coinbase: Transaction =
            consensus::deserialize(&b.block[80..]).expect("the coinbase follows the header");
        assert!(coinbase.is_coinbase());
        return;
    }
    let block: Block = consensus::deserialize(&b.block).expect("a found block deserializes");
    assert_eq!(block.block_hash().to_byte_array(), b.hash.0);
    assert!(block.check_merkle_root(), "merkle root of a found block");
    assert!(
        block.check_witness_commitment(),
        "witness commitment of a found block"
    );
    block
        .header
        .validate_pow(block.header.target())
        .expect("a found block meets its target");
    assert!(block.txdata[0].is_coinbase());
}

// ---- SV1 -------------------------------------------------------------------------------------

/// The SV1 front end of configuration byte `c`: bits 0-1 the workers one connection may
/// authorize (16, 1, 2, 4), bits 2-3 the malformed lines tolerated (16, 0, 3, 1), bit 4 no
/// version rolling. (Bit 5, no work at the start, is read by [`sv1_session`].)
pub fn sv1_config(c: u8) -> Sv1Config {
    Sv1Config {
        extranonce2_size: 4,
        version_mask: if c & 0x10 != 0 {
            0
        } else {
            VERSION_ROLLING_MASK
        },
        max_workers: [16, 1, 2, 4][usize::from(c & 3)],
        max_bad_lines: [16, 0, 3, 1][usize::from(c >> 2 & 3)],
        version: "stratumlab-fuzz/1",
    }
}

/// Users, as JSON string contents: names a pool takes, an address (solo mode), and names it
/// refuses.
fn sv1_user(i: u8) -> String {
    match i % 10 {
        0 => "alice".into(),
        1 => "alice.rig1".into(),
        2 => "bob.rig2".into(),
        3 => regtest_address().into(),
        4 => format!("{}.rig1", regtest_address()),
        5 => String::new(),
        6 => " ".into(),
        7 => "a\\u0001b".into(),
        8 => "x".repeat(129),
        _ => "bcrt1qnotanaddress".into(),
    }
}

/// Difficulties as JSON values: valid, out of range, and not numbers at all.
fn sv1_difficulty(i: u8) -> &'static str {
    const D: [&str; 16] = [
        "0.001",
        "1",
        "0",
        "-1",
        "1e-12",
        "0.0000000002",
        "0.000001",
        "1024",
        "1e15",
        "1e300",
        "1e999",
        "\"8\"",
        "null",
        "[]",
        "2.5e-10",
        "65536",
    ];
    D[usize::from(i % 16)]
}

/// A request id as JSON (`None`: no id at all).
fn sv1_id(b: u8) -> Option<String> {
    match b % 4 {
        0 => Some((u32::from(b) * 7919).to_string()),
        1 => Some(format!("\"r{b}\"")),
        2 => Some("null".into()),
        _ => None,
    }
}

fn sv1_line(id: Option<&str>, method: &str, params: &str) -> String {
    match id {
        Some(id) => format!(r#"{{"id":{id},"method":"{method}","params":{params}}}"#),
        None => format!(r#"{{"method":"{method}","params":{params}}}"#),
    }
}

/// What a request line should bring back.
enum Expect {
    /// Exactly one reply, with this raw id.
    Reply(String),
    /// Nothing at all (a response to the pool).
    Nothing,
    /// Replies are not pinned down (a notification).
    Any,
}

struct Sv1Run {
    pool: Pool,
    s: crate::sv1::Session,
    /// The session's pending output as the miner will read it, kept alongside to check that
    /// steps only append and writes only take from the front.
    pending: Vec<u8>,
    close_seen: bool,
    /// The difficulty the miner was last told, in the order it reads.
    difficulty: Option<f64>,
}

/// Fuzz entry for the SV1 session.
///
/// Steps (operation byte, low four bits): 0-3 a raw line (bytes up to the next newline; over
/// `LINE_CAP` bytes it is refused as too long); 4-8 a request built from the session's state
/// (method byte, id byte, arguments: see `request`); 9-10 a clock step (two bytes) and a tick;
/// 11-12 new work (two bytes, see `Pool::work`), delivered to the session unless the second
/// byte's top bit is set; 13-14 a write of the output (a mode byte and a two-byte count: all
/// of it in chunks, part of it, all at once through `output()`, or none: a stuck socket); 15
/// the connection closes.
pub fn sv1_session(data: &[u8]) {
    let mut input = Input::new(data);
    let (engine_config, config) = (input.u8(), input.u8());
    let pool = Pool::new(engine_config, 8, config & 0x20 == 0);
    let s = crate::sv1::Session::new(pool.engine.clone(), Arc::new(sv1_config(config)), pool.now);
    let mut run = Sv1Run {
        pool,
        s,
        pending: Vec::new(),
        close_seen: false,
        difficulty: None,
    };
    run.pool.check();
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        let op = input.u8() & 15;
        match op {
            0..=3 => {
                let line = input.line();
                run.line(line);
            }
            4..=8 => {
                let line = run.request(&mut input);
                run.line(line.as_bytes());
            }
            9 | 10 => {
                run.pool.advance(input.u16());
                let now = run.pool.now;
                run.s.handle_tick(now);
                run.appended(None);
            }
            11 | 12 => {
                let (k, e) = (input.u8(), input.u8());
                run.pool.work(k, e);
                if e & 0x80 == 0 {
                    let now = run.pool.now;
                    let current = run.pool.engine.current();
                    run.s.handle_generation(current.as_ref(), now);
                    // A working miner is on the work it was just given.
                    if let (Some(g), true) = (current, run.s.is_working()) {
                        let latest = run.s.channel().latest_job().map(|j| j.job.generation);
                        assert_eq!(latest, Some(g.id), "the miner is not on the current work");
                    }
                }
                run.appended(None);
            }
            13 | 14 => run.write(input.u8(), input.u16()),
            _ => break,
        }
        run.check();
    }
    run.pool.close(|now| run.s.closed(now));
}

impl Sv1Run {
    /// The session's pending output, whole.
    fn output(&self) -> Vec<u8> {
        self.s.poll_transmit().concat()
    }

    /// Checks the output a step added (`line`: the line it read, if any) and returns the raw
    /// ids of the replies in it.
    fn appended(&mut self, line: Option<&[u8]>) -> Vec<String> {
        let out = self.output();
        assert!(
            out.starts_with(&self.pending),
            "a step changed output already queued"
        );
        let new = out[self.pending.len()..].to_vec();
        let budget = SV1_STEP_OUTPUT + SV1_ECHO_FACTOR * line.map_or(0, <[u8]>::len);
        assert!(
            new.len() <= budget,
            "one step wrote {} bytes (budget {budget})",
            new.len()
        );
        self.pending = out;
        self.read(&new)
    }

    /// What the miner reads: whole lines of JSON-RPC, replies with an id, a result and an
    /// error; difficulties that are positive numbers; jobs the channel issued, each at the
    /// difficulty the miner was last told.
    fn read(&mut self, new: &[u8]) -> Vec<String> {
        let mut replies = Vec::new();
        if new.is_empty() {
            return replies;
        }
        assert_eq!(new.last(), Some(&b'\n'), "a partial line written");
        for line in new[..new.len() - 1].split(|&b| b == b'\n') {
            let text = String::from_utf8_lossy(line);
            let (env, method) = sv1::parse_line(line)
                .unwrap_or_else(|e| panic!("the session wrote {text:?}, not JSON-RPC: {e}"));
            match method {
                None => {
                    let id = env
                        .id
                        .unwrap_or_else(|| panic!("reply without an id: {text}"));
                    assert!(
                        env.result.is_some() && env.error.is_some(),
                        "reply without a result or an error: {text}"
                    );
                    replies.push(id.to_owned());
                    self.check_subscribe_reply(line);
                }
                Some(sv1::Method::SetDifficulty) => {
                    let d = match env.params.get(0) {
                        Some(sv1::Value::Num(n)) => n.parse::<f64>().ok(),
                        _ => None,
                    };
                    let d = d.unwrap_or_else(|| panic!("set_difficulty without a number: {text}"));
                    assert!(d.is_finite() && d > 0.0, "difficulty {d}: {text}");
                    self.difficulty = Some(d);
                }
                Some(sv1::Method::Notify) => {
                    let n = sv1::Notify::parse(&env)
                        .unwrap_or_else(|e| panic!("a notify miners cannot read: {e}: {text}"));
                    let id = u64::from_str_radix(n.job_id, 16)
                        .unwrap_or_else(|_| panic!("job id not hex: {text}"));
                    let issued = self
                        .s
                        .channel()
                        .jobs()
                        .find(|j| j.wire_id == id)
                        .unwrap_or_else(|| panic!("job {id:x} sent but not issued: {text}"));
                    let told = self
                        .difficulty
                        .unwrap_or_else(|| panic!("a job before any difficulty: {text}"));
                    assert_eq!(
                        told,
                        issued.difficulty.as_f64(),
                        "job {id:x} issued at another difficulty than the miner was told"
                    );
                    // The job as the miner reads it is the job its shares are judged on; only a
                    // job under its own first id can be clean (a re-sent one never is).
                    let j = &issued.job;
                    assert!(
                        n.prev_hash == j.prev_hash
                            && n.coinb1 == j.coinbase.prefix
                            && n.coinb2 == j.coinbase.suffix
                            && n.merkle_branch[..] == j.merkle_branch[..]
                            && (n.version, n.nbits, n.ntime)
                                == (j.version, j.bits.to_consensus(), j.ntime),
                        "a notify that is not its job: {text}"
                    );
                    assert!(
                        !n.clean_jobs || (j.clean && issued.wire_id == j.id),
                        "{text}"
                    );
                }
                Some(other) => panic!("the pool sent {other:?}: {text}"),
            }
        }
        replies
    }

    /// A subscribe reply's extranonce1 and extranonce2 size are the channel's, and fill the
    /// coinbase's extranonce.
    fn check_subscribe_reply(&self, line: &[u8]) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            return;
        };
        let Some([_, en1, size]) = v["result"].as_array().map(Vec::as_slice) else {
            return;
        };
        let (Some(en1), Some(size)) = (en1.as_str(), size.as_u64()) else {
            return;
        };
        let c = self.s.channel();
        let en1 = primitives::hex::decode(en1).expect("extranonce1 is hex");
        assert_eq!(en1, c.extranonce_prefix());
        assert_eq!(size as usize, c.extranonce_len());
        assert_eq!(
            en1.len() + c.extranonce_len(),
            self.pool.engine.config.jobs.extranonce_len
        );
    }

    /// One line, as the shell hands it over: `\r` stripped, blank lines skipped, one too long
    /// refused.
    fn line(&mut self, raw: &[u8]) {
        let now = self.pool.now;
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if line.len() > LINE_CAP {
            self.s.line_too_long();
            let replies = self.appended(None);
            assert_eq!(replies, ["null"], "line too long");
            assert!(self.s.wants_close().is_some());
            return;
        }
        let expect = match sv1::parse_line(line) {
            Err(_) if sv1::parse_submit(line).is_none() => Expect::Reply("null".into()),
            Err(_) => Expect::Any,
            Ok((_, None)) => Expect::Nothing,
            Ok((env, Some(_))) => match env.id() {
                Some(id) => Expect::Reply(id.to_owned()),
                None => Expect::Any,
            },
        };
        let before = self.pool.counters;
        let kind = self.s.handle_line(line, now);
        let pending_before = self.pending.len();
        let replies = self.appended(Some(line));
        match expect {
            Expect::Reply(id) => assert_eq!(replies, [id], "one reply per request"),
            Expect::Nothing => assert_eq!(
                self.pending.len(),
                pending_before,
                "a response to the pool was answered"
            ),
            Expect::Any => {}
        }
        // Each share gets one verdict, counted once; nothing else counts as a share.
        let (_, after) = self.pool.check();
        let accepted = after.accepted - before.accepted;
        let rejected = after.rejected() - before.rejected();
        match kind {
            LineKind::Share(events::Verdict::Accepted) => assert_eq!((accepted, rejected), (1, 0)),
            LineKind::Share(events::Verdict::Rejected(r)) => {
                assert_eq!((accepted, rejected), (0, 1));
                let i = events::Reason::ALL
                    .iter()
                    .position(|x| *x == r)
                    .expect("a reason");
                assert_eq!(
                    after.rejected[i],
                    before.rejected[i] + 1,
                    "counted as {r:?}"
                );
            }
            LineKind::Other => assert_eq!((accepted, rejected), (0, 0)),
        }
    }

    /// A request line built from the session's state: method byte, id byte, arguments.
    fn request(&mut self, input: &mut Input<'_>) -> String {
        let (m, id) = (input.u8(), input.u8());
        let id = sv1_id(id);
        let id = id.as_deref();
        match m % 12 {
            0 => {
                let params = match input.u8() % 4 {
                    0 => "[]",
                    1 => r#"["fuzz/1.0"]"#,
                    2 => r#"["fuzz/1.0","00000000deadbeef"]"#,
                    _ => "[1]",
                };
                sv1_line(id, "mining.subscribe", params)
            }
            1 => {
                let user = sv1_user(input.u8());
                let p = input.u8();
                let password = match p % 4 {
                    0 => "\"x\"".to_owned(),
                    1 => format!("\"d={}\"", sv1_difficulty(p >> 2)),
                    2 => format!("\"x,d={}\"", sv1_difficulty(p >> 2)),
                    _ => "null".to_owned(),
                };
                sv1_line(id, "mining.authorize", &format!("[\"{user}\",{password}]"))
            }
            2 => {
                let e = input.u8();
                let mask = input.u32();
                let d = sv1_difficulty(input.u8());
                let mut exts = Vec::new();
                for (bit, name) in [
                    (1, "version-rolling"),
                    (2, "minimum-difficulty"),
                    (4, "subscribe-extranonce"),
                    (8, "x-unknown"),
                    (16, "version-rolling"),
                ] {
                    if e & bit != 0 {
                        exts.push(format!("\"{name}\""));
                    }
                }
                let exts = if e & 0x80 != 0 {
                    "\"version-rolling\"".to_owned()
                } else {
                    format!("[{}]", exts.join(","))
                };
                let mask = if e & 0x40 != 0 {
                    mask.to_string()
                } else {
                    format!("\"{mask:08x}\"")
                };
                let params = if e & 0x20 != 0 {
                    format!("[{exts},null]")
                } else {
                    format!(
                        r#"[{exts},{{"version-rolling.mask":{mask},"version-rolling.min-bit-count":2,"minimum-difficulty.value":{d}}}]"#
                    )
                };
                sv1_line(id, "mining.configure", &params)
            }
            3 => {
                let d = sv1_difficulty(input.u8());
                sv1_line(id, "mining.suggest_difficulty", &format!("[{d}]"))
            }
            4 => {
                let target = match input.u8() % 5 {
                    0 => "00".repeat(32),
                    1 => "ff".repeat(32),
                    2 => format!("00000000ffff{}", "00".repeat(26)),
                    3 => format!("{}{}", "00".repeat(5), "1".repeat(54)),
                    _ => "12".into(),
                };
                sv1_line(id, "mining.suggest_target", &format!("[\"{target}\"]"))
            }
            5 => sv1_line(id, "mining.extranonce.subscribe", "[]"),
            6 => sv1_line(id, "mining.ping", "[]"),
            7 => sv1_line(id, "client.get_version", "[]"),
            8..=10 => self.submit(id, input),
            _ => {
                let id = id.unwrap_or("null");
                match input.u8() % 6 {
                    0 => sv1_line(Some(id), "mining.foo", "[]"),
                    1 => sv1_line(Some(id), "mining.submit", r#"["alice","1"]"#),
                    2 => sv1_line(Some(id), "mining.authorize", "[7]"),
                    3 => sv1_line(
                        Some(id),
                        "mining.submit",
                        r#"["alice","1","00000000",5,"0"]"#,
                    ),
                    4 => format!(r#"{{"id":{id},"result":true,"error":null}}"#),
                    _ => sv1_line(Some(id), "mining.notify", "[]"),
                }
            }
        }
    }

    /// `mining.submit` on one of the channel's jobs (or none): worker, job, extranonce2, ntime
    /// and version bytes, then the nonce.
    fn submit(&self, id: Option<&str>, input: &mut Input<'_>) -> String {
        let worker = sv1_user(input.u8());
        let (j, e, t) = (input.u8(), input.u8(), input.u8());
        let nonce = input.u32();
        let v = input.u8();
        let c = self.s.channel();
        let jobs: Vec<&Issued> = c.jobs().collect();
        let issued = pick_job(&jobs, j);
        let job_id = match (j % 8, issued) {
            (3, _) => "deadbeef".to_owned(),
            (4, _) => "xyz".to_owned(),
            (5, _) => String::new(),
            (_, Some(i)) => format!("{:x}", i.wire_id),
            (_, None) => "1".to_owned(),
        };
        let size = c.extranonce_len();
        let en2 = match e % 8 {
            5 => primitives::hex::encode(&vec![e; size.saturating_sub(1)]),
            6 => primitives::hex::encode(&vec![e; size + 1]),
            7 => "abc".to_owned(),
            _ => primitives::hex::encode(
                &(0..size)
                    .map(|i| e.wrapping_add(i as u8))
                    .collect::<Vec<_>>(),
            ),
        };
        let job_ntime = issued.map_or(CURTIME, |i| i.job.ntime);
        let ntime = job_ntime.wrapping_add_signed(i32::from(t as i8) * 64);
        let bits = match v % 8 {
            0..=3 => None,
            4 | 5 => Some(nonce.rotate_left(13) & c.version_mask()),
            6 => Some(0xffff_ffff),
            _ => Some(0),
        };
        let tail = bits.map_or(String::new(), |b| format!(",\"{b:08x}\""));
        sv1_line(
            id,
            "mining.submit",
            &format!("[\"{worker}\",\"{job_id}\",\"{en2}\",\"{ntime:08x}\",\"{nonce:08x}\"{tail}]"),
        )
    }

    /// Writes output as a socket would take it: `m % 4` = 0 all of it in chunks of a size from
    /// `m`, 1 the first `n` bytes, 2 all at once through `output()`, 3 nothing.
    fn write(&mut self, m: u8, n: u16) {
        assert!(
            self.s.take_pending_ticket().is_none(),
            "a store ticket without a store"
        );
        match m % 4 {
            0 => {
                let chunk = 1 + usize::from(m >> 2) * 37;
                loop {
                    let len: usize = self.s.poll_transmit().iter().map(|p| p.len()).sum();
                    if len == 0 {
                        break;
                    }
                    let k = chunk.min(len);
                    self.s.transmitted(k);
                    self.pending.drain(..k);
                    assert_eq!(self.output(), self.pending, "a write of {k} bytes");
                }
                self.s.output_written();
            }
            1 => {
                let k = usize::from(n).min(self.pending.len());
                self.s.transmitted(k);
                self.pending.drain(..k);
                if self.pending.is_empty() {
                    self.s.output_written();
                }
            }
            2 => {
                let out = self.s.take_output();
                assert_eq!(out, self.pending, "output() differs from poll_transmit()");
                self.pending.clear();
                self.s.output_written();
            }
            _ => {}
        }
        assert_eq!(self.output(), self.pending, "output after a write");
    }

    fn check(&mut self) {
        self.pool.check();
        if self.close_seen {
            assert!(
                self.s.wants_close().is_some(),
                "a closing connection reopened"
            );
        }
        self.close_seen = self.s.wants_close().is_some();
        self.pool.check_channel(self.s.channel());
        let s = self.pool.engine.stats.snapshot(self.pool.now);
        assert_eq!(s.connections, 1);
        assert!(s.workers <= 16, "{} workers online", s.workers);
    }
}

/// A job of `jobs` by selector `j`: the latest, the one before, the oldest, or (for
/// selectors 3 to 5, which name none) the latest for its fields.
fn pick_job<'a>(jobs: &[&'a Issued], j: u8) -> Option<&'a Issued> {
    match j % 8 {
        1 => jobs.len().checked_sub(2).map(|i| jobs[i]),
        2 => jobs.first().copied(),
        7 => jobs
            .iter()
            .rev()
            .find(|i| i.job.is_declared())
            .or(jobs.last())
            .copied(),
        _ => jobs.last().copied(),
    }
    .or(jobs.last().copied())
}

// ---- SV2 -------------------------------------------------------------------------------------

/// The engine's extranonce length and base prefix of SV2 mode `m`: a pool serving SV1 too
/// (8 bytes, 4 rolled), an SV2-only pool (16 bytes, 8 rolled), and a JDC's embedded pool
/// (16 bytes under an 8-byte prefix its pool gave it, 4 rolled).
fn sv2_mode(m: u8) -> (usize, usize, Vec<u8>) {
    match m % 4 {
        1 => (16, 8, Vec::new()),
        2 => (16, 4, vec![0xb1, 0xb2, 0xb3, 0xb4, 0, 0, 0, 9]),
        _ => (8, 4, Vec::new()),
    }
}

/// Everything `s` has to write, in order.
fn sv2_transmits(s: &mut crate::sv2::Session) -> Vec<Message> {
    std::iter::from_fn(|| s.poll_transmit()).collect()
}

/// The SV2 front end of configuration byte `c`: bits 0-1 the mode (see `sv2_mode`; 3 is mode
/// 0 without work at the start), bits 2-3 the channels one connection may open (64, 1, 3, 8),
/// bits 4-5 the success batch (32, 1, 4, 2), bit 6 no version rolling, bit 7 a job token key
/// (declared jobs allowed).
pub fn sv2_config(c: u8) -> Sv2Config {
    let (_, rolled, base) = sv2_mode(c);
    Sv2Config {
        max_channels: [64, 1, 3, 8][usize::from(c >> 2 & 3)],
        extended_extranonce_size: rolled,
        success_batch: [32, 1, 4, 2][usize::from(c >> 4 & 3)],
        version_mask: if c & 0x40 != 0 {
            0
        } else {
            VERSION_ROLLING_MASK
        },
        jd_token_key: (c & 0x80 != 0).then(|| Arc::new(TokenKey::from_bytes(TOKEN_KEY))),
        extranonce_base: base,
        required_extensions: Vec::new(),
    }
}

fn sv2_user(i: u8) -> String {
    match i % 8 {
        0 => "alice".into(),
        1 => "alice.rig1".into(),
        2 => regtest_address().into(),
        3 => format!("{}.rig1", regtest_address()),
        4 => String::new(),
        5 => "a\u{1}b".into(),
        6 => "x".repeat(255),
        _ => "bcrt1qnotanaddress".into(),
    }
}

fn sv2_hash_rate(i: u8) -> f32 {
    const R: [f32; 12] = [
        0.0,
        1e12,
        1e6,
        1e9,
        1e15,
        1e18,
        -1.0,
        f32::NAN,
        f32::INFINITY,
        f32::MAX,
        1e-30,
        1.0,
    ];
    R[usize::from(i) % R.len()]
}

fn sv2_target(i: u8) -> Target {
    match i % 6 {
        0 => Target::MAX,
        1 => Target::DIFFICULTY_1,
        2 => Target::from_le_bytes(&[0; 32]),
        3 => {
            let mut b = [0xff; 32];
            b[31] = 0;
            b[30] = 0x0f;
            Target::from_le_bytes(&b)
        }
        4 => Difficulty::saturating(2f64.powi(-20)).to_target(),
        _ => Difficulty::saturating(1e6).to_target(),
    }
}

fn bip34_height(height: u32) -> Vec<u8> {
    let mut n: Vec<u8> = height.to_le_bytes().to_vec();
    while n.len() > 1 && n[n.len() - 1] == 0 {
        n.pop();
    }
    if n[n.len() - 1] & 0x80 != 0 {
        n.push(0);
    }
    let mut v = vec![n.len() as u8];
    v.extend_from_slice(&n);
    v
}

/// A message the session sent, if a pool may send it.
fn from_pool(m: &Message) -> bool {
    matches!(
        m,
        Message::Common(Common::SetupConnectionSuccess(_) | Common::SetupConnectionError(_))
            | Message::Extensions(
                Extensions::RequestExtensionsSuccess(_) | Extensions::RequestExtensionsError(_)
            )
            | Message::Mining(
                Mining::OpenStandardMiningChannelSuccess(_)
                    | Mining::OpenExtendedMiningChannelSuccess(_)
                    | Mining::OpenMiningChannelError(_)
                    | Mining::NewMiningJob(_)
                    | Mining::NewExtendedMiningJob(_)
                    | Mining::SetNewPrevHash(_)
                    | Mining::SetTarget(_)
                    | Mining::SubmitSharesSuccess(_)
                    | Mining::SubmitSharesError(_)
                    | Mining::UpdateChannelError(_)
                    | Mining::SetCustomMiningJobSuccess(_)
                    | Mining::SetCustomMiningJobError(_)
            )
    )
}

fn is_ack(m: &Message) -> bool {
    matches!(m, Message::Mining(Mining::SubmitSharesSuccess(_)))
}

/// What follows a channel's opening success in `out`: nothing while the pool has no work
/// (`serving` false), else the channel's first job (`first`: a job of the channel's kind for
/// it, not a future one) and then its `SetNewPrevHash`.
fn check_first_job(
    out: &[Message],
    rest: &[Message],
    serving: bool,
    first: impl Fn(&Mining) -> bool,
) {
    let ok = matches!(
        rest,
        [Message::Mining(j), Message::Mining(Mining::SetNewPrevHash(_))] if first(j)
    );
    assert!(ok || (!serving && rest.is_empty()), "{out:?}");
}

/// A share submission's channel and sequence number.
fn share_of(m: &Message) -> Option<(u32, u32)> {
    match m {
        Message::Mining(
            Mining::SubmitSharesStandard(SubmitSharesStandard {
                channel_id,
                sequence_number,
                ..
            })
            | Mining::SubmitSharesExtended(SubmitSharesExtended {
                channel_id,
                sequence_number,
                ..
            }),
        ) => Some((*channel_id, *sequence_number)),
        _ => None,
    }
}

fn is_job(m: &Message) -> bool {
    matches!(
        m,
        Message::Mining(
            Mining::NewMiningJob(_) | Mining::NewExtendedMiningJob(_) | Mining::SetNewPrevHash(_)
        )
    )
}

struct Sv2Run {
    pool: Pool,
    s: crate::sv2::Session,
    config: Arc<Sv2Config>,
    extranonce_len: usize,
    setup: bool,
    /// The connection set `REQUIRES_STANDARD_JOBS`.
    standard_jobs: bool,
    close_seen: bool,
    /// Every channel the session announced, open or since closed: its kind, prefix and group.
    channels: BTreeMap<u32, Announced>,
    next_seq: u32,
    /// Shares acknowledged and refused, over every `SubmitShares.Success` and `.Error` sent.
    acked: u64,
    refused: u64,
    /// Accepted shares not acknowledged yet, per channel: how many, and the last one's
    /// sequence number.
    unacked: BTreeMap<u32, (u32, u32)>,
}

struct Announced {
    kind: Kind,
    prefix: Vec<u8>,
    group: u32,
}

/// Fuzz entry for the SV2 session.
///
/// Steps (operation byte, low four bits): 0-3 a raw message (type byte, length byte, that many
/// payload bytes; 255: the rest of the input) through `Message::decode`, skipped if it does not
/// decode; 4-10 a message built from the session's state (kind byte, then its arguments: see
/// `message`); 11-12 a clock step (two bytes) and a tick; 13-14 new work (two bytes, see
/// `Pool::work`), delivered unless the second byte's top bit is set; 15 the connection closes.
/// Each message is followed by `flush` as the shell does (but for operation 10, so that
/// acknowledgements batch across messages), and each step by taking the output.
pub fn sv2_session(data: &[u8]) {
    let mut input = Input::new(data);
    let (engine_config, config) = (input.u8(), input.u8());
    let (extranonce_len, _, _) = sv2_mode(config);
    let pool = Pool::new(engine_config, extranonce_len, config & 3 != 3);
    let sv2 = Arc::new(sv2_config(config));
    let s = crate::sv2::Session::new(pool.engine.clone(), sv2.clone());
    let mut run = Sv2Run {
        pool,
        s,
        config: sv2,
        extranonce_len,
        setup: false,
        standard_jobs: false,
        close_seen: false,
        channels: BTreeMap::new(),
        next_seq: 0,
        acked: 0,
        refused: 0,
        unacked: BTreeMap::new(),
    };
    run.pool.check();
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        match input.u8() & 15 {
            0..=3 => {
                let msg_type = input.u8();
                let len = input.u8();
                let payload = if len == 255 {
                    input.take(usize::MAX)
                } else {
                    input.take(usize::from(len))
                };
                if let Ok(m) = Message::decode(msg_type, &mut payload.to_vec()) {
                    run.deliver(m, true);
                }
            }
            op @ 4..=10 => {
                let m = run.message(&mut input);
                run.deliver(m, op != 10);
            }
            11 | 12 => {
                run.pool.advance(input.u16());
                let now = run.pool.now;
                run.s.handle_tick(now);
                let out = sv2_transmits(&mut run.s);
                run.check_output(&out);
                let mut seen = Vec::new();
                for m in &out {
                    let Message::Mining(Mining::SetTarget(t)) = m else {
                        panic!("a tick sent {m:?}");
                    };
                    assert!(!seen.contains(&t.channel_id), "two targets at once");
                    seen.push(t.channel_id);
                }
            }
            13 | 14 => {
                let (k, e) = (input.u8(), input.u8());
                run.pool.work(k, e);
                let delivered = (e & 0x80 == 0).then(|| run.pool.engine.current());
                if let Some(current) = &delivered {
                    let now = run.pool.now;
                    run.s.handle_generation(current.as_ref(), now);
                }
                let out = sv2_transmits(&mut run.s);
                run.check_output(&out);
                assert!(out.iter().all(is_job), "new work sent {out:?}");
                // New work goes to a connection's standard channels as one job per group,
                // unless it wants a job per channel.
                assert!(
                    run.standard_jobs
                        || !out
                            .iter()
                            .any(|m| matches!(m, Message::Mining(Mining::NewMiningJob(_)))),
                    "a standard job to a grouped channel: {out:?}"
                );
                if let Some(Some(g)) = delivered {
                    run.check_on_work(g.id);
                }
            }
            _ => break,
        }
        run.check();
    }
    run.pool.close(|now| run.s.closed(now));
}

impl Sv2Run {
    /// Open channels the session announced, of `kind` (any with `None`), by id.
    fn open(&self, kind: Option<Kind>) -> Vec<u32> {
        self.channels
            .iter()
            .filter(|(id, a)| {
                self.s.channel(**id).is_some() && kind.is_none_or(|want| a.kind == want)
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// A channel id by selector `c`: an open one of `kind` (selector 5: of any kind), a group
    /// (6), or one that does not exist (7, or when none is open).
    fn pick(&self, c: u8, kind: Kind) -> u32 {
        let open = self.open(if c % 8 == 5 { None } else { Some(kind) });
        match c % 8 {
            6 => self.s.group_ids().next().unwrap_or(0xdead),
            7 if c & 0x80 != 0 => 0,
            7 => 0xdead_beef,
            _ if open.is_empty() => 0xdead_beef,
            i => open[(usize::from(i) + usize::from(c >> 3)) % open.len()],
        }
    }

    /// A job of channel `id` by selector `j` (see [`pick_job`]; 4 names a job it never had):
    /// its id, version and time.
    fn job(&self, id: u32, j: u8) -> (u32, u32, u32) {
        let Some(c) = self.s.channel(id) else {
            return (u32::from(j), 0x2000_0000, CURTIME);
        };
        let jobs: Vec<&Issued> = c.jobs().collect();
        match pick_job(&jobs, j) {
            Some(i) if j % 8 != 4 => (i.wire_id as u32, i.job.version, i.job.ntime),
            Some(i) => (0x7fff_fff0, i.job.version, i.job.ntime),
            None => (u32::from(j), 0x2000_0000, CURTIME),
        }
    }

    /// A share's version: the job's, rolled within the channel's mask, or outside it.
    fn version(&self, id: u32, job_version: u32, v: u8, nonce: u32) -> u32 {
        let mask = self.s.channel(id).map_or(0, Channel::version_mask);
        match v % 8 {
            0..=3 => job_version,
            4 | 5 => job_version ^ (nonce.rotate_left(13) & mask),
            6 => job_version ^ 1,
            _ => 0,
        }
    }

    /// A message built from the session's state: kind byte, then its arguments.
    fn message(&mut self, input: &mut Input<'_>) -> Message {
        match input.u8() % 12 {
            0 => {
                let (p, f) = (input.u8(), input.u8());
                // The high bit: extensions negotiation instead (bits 5-6 pick the request).
                if p & 0x80 != 0 {
                    return RequestExtensions {
                        request_id: u16::from(f),
                        requested_extensions: [&[2][..], &[], &[0x4001], &[0x4001, 2, 2]]
                            [usize::from(p >> 5 & 3)]
                        .to_vec(),
                    }
                    .into();
                }
                let mut flags = 0;
                for (bit, flag) in [
                    (1, mining_flags::REQUIRES_STANDARD_JOBS),
                    (2, mining_flags::REQUIRES_VERSION_ROLLING),
                    (4, mining_flags::REQUIRES_WORK_SELECTION),
                    (8, 0x8000_0000),
                ] {
                    if f & bit != 0 {
                        flags |= flag;
                    }
                }
                let (min_version, max_version) =
                    [(2, 2), (1, 1), (3, 3), (1, 3)][usize::from(p >> 3 & 3)];
                SetupConnection {
                    min_version,
                    max_version,
                    flags,
                    endpoint_host: "127.0.0.1".into(),
                    endpoint_port: 3336,
                    vendor: "fuzz".into(),
                    ..SetupConnection::new([0, 0, 0, 0, 1, 2, 3, 0][usize::from(p & 7)])
                }
                .into()
            }
            1 => OpenStandardMiningChannel {
                request_id: u32::from(input.u8()),
                user_identity: sv2_user(input.u8()),
                nominal_hash_rate: sv2_hash_rate(input.u8()),
                max_target: sv2_target(input.u8()),
            }
            .into(),
            2 => OpenExtendedMiningChannel {
                request_id: u32::from(input.u8()),
                user_identity: sv2_user(input.u8()),
                nominal_hash_rate: sv2_hash_rate(input.u8()),
                max_target: sv2_target(input.u8()),
                min_extranonce_size: [0, 2, 4, 5, 8, 9, 12, 16, 32, 65535]
                    [usize::from(input.u8() % 10)],
            }
            .into(),
            k @ 3..=7 => {
                let extended = k >= 6;
                let channel_id = self.pick(
                    input.u8(),
                    if extended {
                        Kind::Extended
                    } else {
                        Kind::Standard
                    },
                );
                let (j, t) = (input.u8(), input.u8());
                let nonce = input.u32();
                let v = input.u8();
                let (job_id, job_version, job_ntime) = self.job(channel_id, j);
                let version = self.version(channel_id, job_version, v, nonce);
                let ntime = job_ntime.wrapping_add_signed(i32::from(t as i8) * 64);
                self.next_seq = self.next_seq.wrapping_add(1);
                let sequence_number = self.next_seq;
                if !extended {
                    return SubmitSharesStandard {
                        channel_id,
                        sequence_number,
                        job_id,
                        nonce,
                        ntime,
                        version,
                    }
                    .into();
                }
                let e = input.u8();
                let size = self
                    .s
                    .channel(channel_id)
                    .map_or(4, Channel::extranonce_len);
                let extranonce = match e % 8 {
                    5 => vec![e; size.saturating_sub(1)],
                    6 => vec![e; size + 1],
                    7 => Vec::new(),
                    _ => (0..size).map(|i| e.wrapping_add(i as u8)).collect(),
                };
                SubmitSharesExtended {
                    channel_id,
                    sequence_number,
                    job_id,
                    nonce,
                    ntime,
                    version,
                    extranonce,
                    // Bits 3-4: extension 0x0002's worker, under the channel's account or not.
                    user_identity: match e >> 3 & 3 {
                        2 => Some(format!("rig{}", e >> 5)),
                        3 => Some(format!("acct.rig{}", e >> 5)),
                        _ => None,
                    },
                }
                .into()
            }
            8 => UpdateChannel {
                channel_id: self.pick(input.u8(), Kind::Standard),
                nominal_hash_rate: sv2_hash_rate(input.u8()),
                maximum_target: sv2_target(input.u8()),
            }
            .into(),
            9 => CloseChannel {
                channel_id: self.pick(input.u8(), Kind::Standard),
                reason_code: "fuzz".into(),
            }
            .into(),
            10 => self.custom_job(input),
            _ => match input.u8() % 5 {
                0 => SetupConnectionSuccess {
                    used_version: 2,
                    flags: 0,
                }
                .into(),
                1 => SubmitSharesSuccess {
                    channel_id: 1,
                    last_sequence_number: 1,
                    new_submits_accepted_count: 1,
                    new_shares_sum: 1,
                }
                .into(),
                2 => SetTarget {
                    channel_id: 1,
                    maximum_target: Target::MAX,
                }
                .into(),
                3 => SetGroupChannel {
                    group_channel_id: 1,
                    channel_ids: vec![1, 2],
                }
                .into(),
                _ => ChannelEndpointChanged { channel_id: 1 }.into(),
            },
        }
    }

    /// `SetCustomMiningJob` under a token the pool's key issued: channel, request id, a flags
    /// byte (bit 0 an Allocated token, 1 expired, 2 for other outputs, 3 forged, 4 another
    /// tip, 5 not a BIP9 version, 6 other bits, 7 a long merkle path), the token id (a token
    /// used twice is refused), and a byte for the time (high bits) and merkle path length.
    fn custom_job(&mut self, input: &mut Input<'_>) -> Message {
        let channel_id = self.pick(input.u8(), Kind::Extended);
        let request_id = u32::from(input.u8());
        let f = input.u8();
        let token_id = input.u8();
        let t = input.u8();
        let (prev, bits, height, curtime, value) = match self.pool.engine.latest() {
            Some(g) => {
                let t = &g.template;
                (t.prev_hash, t.bits, t.height, t.curtime, t.coinbase_value)
            }
            None => (tip(0), EASY_BITS, HEIGHT, CURTIME, Amount::from_sat(50_000)),
        };
        let mut commitment = vec![0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed];
        commitment.extend_from_slice(&[0x5c; 32]);
        let outputs = vec![
            TxOut {
                value,
                script_pubkey: pool_script(),
            },
            TxOut {
                value: Amount::ZERO,
                script_pubkey: ScriptBuf::from_bytes(commitment),
            },
        ];
        let declared = if f & 4 != 0 {
            &outputs[..1]
        } else {
            &outputs[..]
        };
        let wall = self.pool.wall_ms();
        let claims = TokenClaims {
            kind: if f & 1 != 0 {
                TokenKind::Allocated
            } else {
                TokenKind::Declared
            },
            id: u64::from(token_id),
            expires_ms: if f & 2 != 0 { wall - 1 } else { wall + 600_000 },
            outputs: OutputsDigest::of(declared),
        };
        let mut token = TokenKey::from_bytes(TOKEN_KEY).issue(&claims);
        if f & 8 != 0 {
            token[0] ^= 1;
        }
        let mut coinbase_prefix = bip34_height(height);
        coinbase_prefix.extend_from_slice(b"farm");
        let path = usize::from(t & 7) + if f & 0x80 != 0 { 12 } else { 0 };
        SetCustomMiningJob {
            channel_id,
            request_id,
            token,
            version: if f & 0x20 != 0 {
                0x4000_0000
            } else {
                0x2000_0000
            },
            prev_hash: if f & 0x10 != 0 {
                tip(token_id ^ 0x80).0
            } else {
                prev.0
            },
            min_ntime: curtime.wrapping_add_signed(i32::from(t as i8 >> 3) * 600),
            nbits: if f & 0x40 != 0 {
                HARD_BITS.to_consensus()
            } else {
                bits.to_consensus()
            },
            coinbase_tx_version: 2,
            coinbase_prefix,
            coinbase_tx_input_n_sequence: u32::MAX,
            coinbase_tx_outputs: consensus::serialize(&outputs),
            coinbase_tx_locktime: 0,
            merkle_path: (0..path).map(|i| [i as u8 + 1; 32]).collect(),
        }
        .into()
    }

    /// One message as the shell delivers it (then `flush`, unless not `flush`), and the
    /// replies it calls for.
    fn deliver(&mut self, m: Message, flush: bool) {
        let now = self.pool.now;
        let wall = self.pool.wall_ms();
        let before = self.pool.counters;
        let channels_before = self.s.channel_count();
        let closed_before = self.s.wants_close().is_some();
        let setup_before = self.setup;
        self.s.handle_message_at(m.clone(), now, wall);
        if flush {
            self.s.flush();
        }
        let out = sv2_transmits(&mut self.s);
        let (_, after) = self.pool.check();
        // The share's verdict, before its acknowledgement is looked for in the output.
        if let Some((channel_id, sequence_number)) = share_of(&m) {
            if after.accepted > before.accepted {
                let u = self.unacked.entry(channel_id).or_default();
                *u = (u.0 + 1, sequence_number);
            }
        }
        self.check_output(&out);
        if flush {
            assert!(
                self.unacked.values().all(|u| u.0 == 0),
                "accepted shares left unacknowledged after flush: {:?}",
                self.unacked
            );
        }
        // Acknowledgements of earlier shares may follow any message (the flush after it; they
        // were checked with the output). The replies proper:
        let out: Vec<Message> = out.into_iter().filter(|m| !is_ack(m)).collect();
        let channels_after = self.s.channel_count();
        let closed = self.s.wants_close().is_some();
        let shares = (
            after.accepted - before.accepted,
            after.rejected() - before.rejected(),
        );
        let name = m.name();
        if closed_before {
            // A connection on its way out ignores what else arrives.
            assert!(out.is_empty(), "{name} answered after close: {out:?}");
            assert_eq!(channels_after, channels_before);
            assert_eq!(shares, (0, 0));
            return;
        }
        match (&m, setup_before) {
            (Message::Common(Common::SetupConnection(setup)), false) => match &out[..] {
                [Message::Common(Common::SetupConnectionSuccess(_))] => {
                    assert!(!closed);
                    self.setup = true;
                    self.standard_jobs = setup.flags & mining_flags::REQUIRES_STANDARD_JOBS != 0;
                }
                [Message::Common(Common::SetupConnectionError(_))] => assert!(closed),
                other => panic!("SetupConnection answered with {other:?}"),
            },
            (_, false) | (Message::Common(Common::SetupConnection(_)), true) => {
                assert!(out.is_empty() && closed, "{name} out of place: {out:?}");
            }
            (
                Message::Mining(
                    Mining::OpenStandardMiningChannel(OpenStandardMiningChannel {
                        request_id, ..
                    })
                    | Mining::OpenExtendedMiningChannel(OpenExtendedMiningChannel {
                        request_id, ..
                    }),
                ),
                true,
            ) => {
                let serving = self.pool.engine.current().is_some();
                // The reply, then (if the pool has work) the channel's own first job: a future
                // job and its SetNewPrevHash.
                let opened = match &out[..] {
                    [Message::Mining(Mining::OpenMiningChannelError(e))]
                        if e.request_id == *request_id =>
                    {
                        false
                    }
                    [Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)), rest @ ..]
                        if ok.request_id == *request_id =>
                    {
                        check_first_job(&out, rest, serving, |m| {
                            matches!(m, Mining::NewMiningJob(j)
                                if j.channel_id == ok.channel_id && j.min_ntime.is_none())
                        });
                        true
                    }
                    [Message::Mining(Mining::OpenExtendedMiningChannelSuccess(ok)), rest @ ..]
                        if ok.request_id == *request_id =>
                    {
                        check_first_job(&out, rest, serving, |m| {
                            matches!(m, Mining::NewExtendedMiningJob(j)
                                if j.channel_id == ok.channel_id && j.min_ntime.is_none())
                        });
                        true
                    }
                    _ => panic!("{name} answered with {out:?}"),
                };
                assert_eq!(channels_after, channels_before + usize::from(opened));
                assert!(!closed);
            }
            (Message::Extensions(Extensions::RequestExtensions(r)), true) => {
                // One answer: the pool supports 0x0002 and nothing else; none required.
                let wanted = r.requested_extensions.contains(&2);
                let ok = match &out[..] {
                    [Message::Extensions(Extensions::RequestExtensionsSuccess(a))] => {
                        wanted && a.request_id == r.request_id && a.supported_extensions == [2]
                    }
                    [Message::Extensions(Extensions::RequestExtensionsError(a))] => {
                        !wanted && a.request_id == r.request_id && a.required_extensions.is_empty()
                    }
                    _ => false,
                };
                assert!(ok && !closed, "{r:?} answered with {out:?}");
            }
            (Message::Mining(Mining::SetCustomMiningJob(c)), true) => {
                let ok = match &out[..] {
                    [Message::Mining(Mining::SetCustomMiningJobSuccess(r))] => {
                        (r.channel_id, r.request_id) == (c.channel_id, c.request_id)
                    }
                    [Message::Mining(Mining::SetCustomMiningJobError(r))] => {
                        (r.channel_id, r.request_id) == (c.channel_id, c.request_id)
                    }
                    _ => false,
                };
                assert!(ok, "SetCustomMiningJob answered with {out:?}");
            }
            (
                Message::Mining(Mining::SubmitSharesStandard(_) | Mining::SubmitSharesExtended(_)),
                true,
            ) => {
                let (channel_id, sequence_number) = share_of(&m).expect("a share");
                // One verdict; a refusal says so at once, with the share's sequence number.
                match shares {
                    (1, 0) => assert!(
                        !out.iter()
                            .any(|m| matches!(m, Message::Mining(Mining::SubmitSharesError(_)))),
                        "an accepted share refused: {out:?}"
                    ),
                    (0, 1) => assert!(
                        matches!(
                            out.last(),
                            Some(Message::Mining(Mining::SubmitSharesError(e)))
                                if e.channel_id == channel_id && e.sequence_number == sequence_number
                        ),
                        "a refused share without its error: {out:?}"
                    ),
                    other => panic!("a share counted as {other:?}"),
                }
            }
            (Message::Mining(Mining::UpdateChannel(u)), true) => {
                assert!(out.len() <= 1, "UpdateChannel answered with {out:?}");
                match out.first() {
                    None => {}
                    Some(Message::Mining(Mining::SetTarget(t))) => {
                        assert_eq!(t.channel_id, u.channel_id)
                    }
                    Some(Message::Mining(Mining::UpdateChannelError(e))) => {
                        assert_eq!(e.channel_id, u.channel_id)
                    }
                    Some(other) => panic!("UpdateChannel answered with {other:?}"),
                }
                if self.s.channel(u.channel_id).is_none() {
                    assert!(matches!(
                        out.first(),
                        Some(Message::Mining(Mining::UpdateChannelError(_)))
                    ));
                }
            }
            (Message::Mining(Mining::CloseChannel(_)), true) => {
                assert!(channels_after <= channels_before);
                assert!(out.is_empty(), "CloseChannel answered with {out:?}");
                // What the channels had accepted is acknowledged before they go.
                assert!(self.unacked.values().all(|u| u.0 == 0));
            }
            (Message::Mining(_), true) => {
                assert!(out.is_empty() && !closed, "{name} not ignored: {out:?}");
            }
            (_, true) => assert!(out.is_empty() && closed, "{name} accepted: {out:?}"),
        }
        if share_of(&m).is_none() {
            assert_eq!(shares, (0, 0), "{name} counted a share");
        }
    }

    /// What any step sent: messages a pool sends, that encode and decode back the same; a
    /// bounded number of them; `SetNewPrevHash` right after its job; jobs and targets for the
    /// connection's channels; every channel announced once, with a prefix that fits the
    /// extranonce and is no other's prefix.
    fn check_output(&mut self, out: &[Message]) {
        let channels = self.s.channel_count().max(self.open(None).len());
        assert!(
            out.len() <= 4 + 4 * channels.max(1),
            "{} messages at once over {channels} channels",
            out.len()
        );
        for (i, m) in out.iter().enumerate() {
            assert!(from_pool(m), "the pool sent {m:?}");
            let mut payload = Vec::new();
            let msg_type = m
                .encode(&mut payload)
                .unwrap_or_else(|e| panic!("{m:?} does not encode: {e:?}"));
            let again = Message::decode_frame(
                m.extension_type() & !sv2::noise::CHANNEL_MSG_BIT,
                msg_type,
                &mut payload,
            )
            .unwrap_or_else(|e| panic!("{m:?} does not decode: {e:?}"))
            .unwrap_or_else(|| panic!("{m:?} is of an unknown extension"));
            assert_eq!(&again, m, "a message changed on the wire");
            match m {
                Message::Mining(Mining::SetNewPrevHash(p)) => {
                    let ok = match i.checked_sub(1).map(|j| &out[j]) {
                        Some(Message::Mining(Mining::NewMiningJob(NewMiningJob {
                            channel_id,
                            job_id,
                            ..
                        }))) => (*channel_id, *job_id) == (p.channel_id, p.job_id),
                        Some(Message::Mining(Mining::NewExtendedMiningJob(j))) => {
                            (j.channel_id, j.job_id) == (p.channel_id, p.job_id)
                        }
                        _ => false,
                    };
                    assert!(ok, "SetNewPrevHash without its job: {out:?}");
                }
                Message::Mining(Mining::NewMiningJob(j)) => self.check_standard_job(j),
                Message::Mining(Mining::NewExtendedMiningJob(j)) => self.check_extended_job(j),
                Message::Mining(Mining::SetTarget(t)) => {
                    assert!(self.s.channel(t.channel_id).is_some());
                }
                Message::Mining(Mining::SubmitSharesSuccess(a)) => {
                    // Exactly the shares accepted on the channel since its last one, up to the
                    // last of them.
                    let u = self.unacked.remove(&a.channel_id).unwrap_or_default();
                    assert_eq!(
                        (a.new_submits_accepted_count, a.last_sequence_number),
                        u,
                        "acknowledgement {a:?}"
                    );
                    assert!(a.new_submits_accepted_count > 0);
                    self.acked += u64::from(a.new_submits_accepted_count);
                }
                Message::Mining(Mining::SubmitSharesError(e)) => {
                    // Sent after the acknowledgement of what the channel accepted before it.
                    let before = self.unacked.get(&e.channel_id).map_or(0, |u| u.0);
                    assert_eq!(before, 0, "{e:?} before earlier shares' acknowledgement");
                    self.refused += 1;
                }
                Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)) => {
                    assert_eq!(ok.extranonce_prefix.len(), self.extranonce_len);
                    assert_ne!(
                        ok.group_channel_id, 0,
                        "a standard channel outside any group"
                    );
                    self.announce(
                        ok.channel_id,
                        Kind::Standard,
                        &ok.extranonce_prefix,
                        ok.group_channel_id,
                    );
                }
                Message::Mining(Mining::OpenExtendedMiningChannelSuccess(ok)) => {
                    assert_eq!(
                        ok.extranonce_prefix.len() + usize::from(ok.extranonce_size),
                        self.extranonce_len
                    );
                    self.announce(ok.channel_id, Kind::Extended, &ok.extranonce_prefix, 0);
                }
                _ => {}
            }
        }
    }

    /// After the session was given generation `g`: every channel's latest job of the pool's
    /// own (declared ones aside) is one of `g`.
    fn check_on_work(&self, g: u64) {
        for id in self.open(None) {
            let c = self.s.channel(id).expect("open");
            let latest = c
                .jobs()
                .filter(|j| !j.job.is_declared())
                .last()
                .map(|j| j.job.generation);
            assert_eq!(
                latest,
                Some(g),
                "channel {id} is not on the current work (generation {g})"
            );
        }
    }

    /// The job a channel was sent under `job_id`, as the channel judges its shares.
    fn issued(&self, channel_id: u32, job_id: u32) -> &Issued {
        let c = self
            .s
            .channel(channel_id)
            .unwrap_or_else(|| panic!("a job for channel {channel_id}, which is not open"));
        c.jobs()
            .find(|i| i.wire_id == u64::from(job_id))
            .unwrap_or_else(|| panic!("job {job_id} sent to channel {channel_id}, not issued"))
    }

    /// A standard channel's job: its merkle root is the one its shares are judged by, and the
    /// one the job's coinbase with the channel's prefix makes.
    fn check_standard_job(&self, j: &NewMiningJob) {
        let a = &self.channels[&j.channel_id];
        assert_eq!(
            a.kind,
            Kind::Standard,
            "a standard job for an extended channel"
        );
        let i = self.issued(j.channel_id, j.job_id);
        let c = &i.job.coinbase;
        let txid = primitives::hash::sha256d_parts(&[&c.prefix, &a.prefix, &c.suffix]);
        let root = primitives::merkle_root_from_branch(txid, &i.job.merkle_branch);
        assert_eq!(root.0, j.merkle_root, "a standard job's merkle root");
        assert_eq!(i.merkle_root, Some(root), "judged on another merkle root");
        assert_eq!(i.job.version, j.version);
    }

    /// An extended job: for an extended channel, the job it judges shares on; for a group, the
    /// job each member judges on, with the merkle root its prefix makes from the message.
    fn check_extended_job(&self, j: &sv2::messages::mining::NewExtendedMiningJob) {
        let path: Vec<Hash256> = j.merkle_path.iter().map(|h| Hash256(*h)).collect();
        if self.s.channel(j.channel_id).is_some() {
            assert_eq!(self.channels[&j.channel_id].kind, Kind::Extended);
            let job = &self.issued(j.channel_id, j.job_id).job;
            assert!(
                job.coinbase.prefix == j.coinbase_tx_prefix
                    && job.coinbase.suffix == j.coinbase_tx_suffix
                    && job.merkle_branch[..] == path[..]
                    && job.version == j.version,
                "an extended job that is not the one issued"
            );
            return;
        }
        assert!(
            self.s.group_ids().any(|g| g == j.channel_id),
            "a job for channel {}, which is neither open nor a group",
            j.channel_id
        );
        assert!(
            !self.standard_jobs,
            "a group job for a connection that wants standard jobs"
        );
        let mut members = 0;
        for id in self.open(Some(Kind::Standard)) {
            let a = &self.channels[&id];
            if a.group != j.channel_id {
                continue;
            }
            members += 1;
            let txid = primitives::hash::sha256d_parts(&[
                &j.coinbase_tx_prefix,
                &a.prefix,
                &j.coinbase_tx_suffix,
            ]);
            let root = primitives::merkle_root_from_branch(txid, &path);
            let i = self.issued(id, j.job_id);
            assert_eq!(
                i.merkle_root,
                Some(root),
                "member {id} judged on another root"
            );
        }
        assert!(
            members > 0,
            "a job for group {} without members",
            j.channel_id
        );
    }

    fn announce(&mut self, id: u32, kind: Kind, prefix: &[u8], group: u32) {
        assert_ne!(id, 0, "channel id 0");
        assert!(
            !self.channels.contains_key(&id),
            "channel {id} announced twice"
        );
        let c = self.s.channel(id).expect("an announced channel is open");
        assert_eq!(c.extranonce_prefix(), prefix);
        assert!(prefix.starts_with(&self.config.extranonce_base));
        for (other, a) in &self.channels {
            let p = &a.prefix;
            assert!(
                !p.starts_with(prefix) && !prefix.starts_with(p),
                "channels {other} and {id} share extranonce space: {p:02x?} and {prefix:02x?}"
            );
        }
        self.channels.insert(
            id,
            Announced {
                kind,
                prefix: prefix.to_vec(),
                group,
            },
        );
    }

    fn check(&mut self) {
        let (_, now) = self.pool.check();
        if self.close_seen {
            assert!(
                self.s.wants_close().is_some(),
                "a closing connection reopened"
            );
        }
        self.close_seen = self.s.wants_close().is_some();
        let open = self.open(None);
        assert_eq!(
            open.len(),
            self.s.channel_count(),
            "open channels that were never announced"
        );
        assert!(self.s.channel_count() <= self.config.max_channels);
        for id in open {
            self.pool.check_channel(self.s.channel(id).expect("open"));
        }
        // Every share was answered: accepted ones acknowledged or waiting for the next flush,
        // refused ones refused.
        let unacked: u64 = self.unacked.values().map(|u| u64::from(u.0)).sum();
        assert_eq!(
            self.acked + unacked,
            now.accepted,
            "accepted shares not acknowledged"
        );
        assert_eq!(self.refused, now.rejected(), "refused shares not answered");
        assert!(
            self.s.take_pending_ticket().is_none(),
            "a store ticket without a store"
        );
        let s = self.pool.engine.stats.snapshot(self.pool.now);
        assert_eq!(s.connections, 1);
        // A channel's worker, and those its shares named (extension 0x0002).
        assert!(s.workers as usize <= self.s.channel_count() + self.s.tracked_workers());
    }
}

/// Writers of scripts for [`sv1_session`] and [`sv2_session`], so that seeds and regression
/// inputs spell out steps rather than bytes.
pub mod script {
    use super::op;

    /// The steps both scripts spell the same way, each on its front end's op codes (`tick`,
    /// `work`).
    macro_rules! steps {
        ($tick:expr, $work:expr) => {
            /// The input bytes.
            pub fn build(self) -> Vec<u8> {
                self.0
            }

            /// A clock step: `ms` milliseconds (at most 32767), then a tick.
            pub fn tick_ms(self, ms: u16) -> Self {
                self.clock(ms & 0x7fff)
            }

            /// A clock step of `s` seconds (at most 32767), then a tick.
            pub fn tick_s(self, s: u16) -> Self {
                self.clock(s & 0x7fff | 0x8000)
            }

            fn clock(mut self, step: u16) -> Self {
                self.0.push($tick);
                self.0.extend_from_slice(&step.to_le_bytes());
                self
            }

            /// New work (see `Pool::work`): e.g. `work(0x11, 3)` a new tip with three
            /// transactions, `work(1, 3)` a refresh on the same tip, `work(0, 0)` work stopped.
            pub fn work(mut self, k: u8, e: u8) -> Self {
                self.0.extend_from_slice(&[$work, k, e]);
                self
            }

            /// The connection closes.
            pub fn close(mut self) -> Self {
                self.0.push(op::CLOSE);
                self
            }
        };
    }

    /// An [`super::sv1_session`] script.
    #[derive(Clone, Debug)]
    pub struct Sv1Script(Vec<u8>);

    impl Sv1Script {
        /// Configuration bytes: the engine's (see `Pool::new`) and the front end's
        /// ([`super::sv1_config`]).
        pub fn new(engine: u8, sv1: u8) -> Self {
            Sv1Script(vec![engine, sv1])
        }

        /// A raw line (without its newline).
        pub fn line(mut self, line: &[u8]) -> Self {
            assert!(!line.contains(&b'\n'));
            self.0.push(op::SV1_LINE);
            self.0.extend_from_slice(line);
            self.0.push(b'\n');
            self
        }

        /// A built request: method selector, id selector, the method's argument bytes.
        pub fn request(mut self, method: u8, id: u8, args: &[u8]) -> Self {
            self.0.extend_from_slice(&[op::SV1_REQUEST, method, id]);
            self.0.extend_from_slice(args);
            self
        }

        /// `mining.subscribe` with id selector `id`.
        pub fn subscribe(self, id: u8) -> Self {
            self.request(0, id, &[1])
        }

        /// `mining.authorize` as user `user` (0: "alice", 1: "alice.rig1", 3: a regtest
        /// address) with password selector `password` (0: "x", 1 + 4 d: "d=" difficulty `d`).
        pub fn authorize(self, id: u8, user: u8, password: u8) -> Self {
            self.request(1, id, &[user, password])
        }

        /// `mining.configure` of the extensions in bit set `exts` (1 version rolling, 2 minimum
        /// difficulty, 4 subscribe-extranonce), with `mask` and difficulty selector `d`.
        pub fn configure(self, id: u8, exts: u8, mask: u32, d: u8) -> Self {
            let mut args = vec![exts];
            args.extend_from_slice(&mask.to_le_bytes());
            args.push(d);
            self.request(2, id, &args)
        }

        /// `mining.suggest_difficulty` with difficulty selector `d`.
        pub fn suggest_difficulty(self, id: u8, d: u8) -> Self {
            self.request(3, id, &[d])
        }

        /// `mining.submit` as `worker` (a user selector) on job selector `job` (0 the latest, 1
        /// the one before, 2 the oldest, 3-5 none), extranonce2 selector `en2` (0-4 the right
        /// size), ntime offset `ntime` (times 64 s), `nonce`, version selector `version` (0-3
        /// none, 4-5 rolled in the mask, 6-7 outside it).
        #[allow(clippy::too_many_arguments)]
        pub fn submit(
            self,
            id: u8,
            worker: u8,
            job: u8,
            en2: u8,
            ntime: i8,
            nonce: u32,
            version: u8,
        ) -> Self {
            let mut args = vec![worker, job, en2, ntime as u8];
            args.extend_from_slice(&nonce.to_le_bytes());
            args.push(version);
            self.request(8, id, &args)
        }

        /// A write: mode 0 everything, 1 the first `n` bytes, 2 everything through `output()`,
        /// 3 nothing.
        pub fn write(mut self, mode: u8, n: u16) -> Self {
            self.0.extend_from_slice(&[op::SV1_WRITE, mode]);
            self.0.extend_from_slice(&n.to_le_bytes());
            self
        }

        steps!(op::SV1_TICK, op::SV1_WORK);
    }

    /// An [`super::sv2_session`] script.
    #[derive(Clone, Debug)]
    pub struct Sv2Script(Vec<u8>, usize);

    impl Sv2Script {
        /// Configuration bytes: the engine's (see `Pool::new`) and the front end's
        /// ([`super::sv2_config`]).
        pub fn new(engine: u8, sv2: u8) -> Self {
            Sv2Script(vec![engine, sv2], 0)
        }

        /// The last built message is not followed by `flush`: acknowledgements batch.
        pub fn unflushed(mut self) -> Self {
            assert_eq!(self.0[self.1], op::SV2_MESSAGE, "a built message first");
            self.0[self.1] = op::SV2_MESSAGE_UNFLUSHED;
            self
        }

        /// A message's payload as the wire carries it (at most 254 bytes).
        pub fn raw(mut self, msg_type: u8, payload: &[u8]) -> Self {
            assert!(payload.len() < 255);
            self.0
                .extend_from_slice(&[op::SV2_RAW, msg_type, payload.len() as u8]);
            self.0.extend_from_slice(payload);
            self
        }

        /// `m` encoded, as [`Sv2Script::raw`].
        pub fn raw_message(self, m: &sv2::Message) -> Self {
            let mut payload = Vec::new();
            let msg_type = m.encode(&mut payload).expect("encodes");
            self.raw(msg_type, &payload)
        }

        /// A built message: kind selector, then its argument bytes.
        pub fn message(mut self, kind: u8, args: &[u8]) -> Self {
            self.1 = self.0.len();
            self.0.extend_from_slice(&[op::SV2_MESSAGE, kind]);
            self.0.extend_from_slice(args);
            self
        }

        /// `SetupConnection`: protocol and version selector `p` (0: mining, version 2), flags
        /// bit set `flags` (1 standard jobs, 2 version rolling, 4 work selection, 8 unknown).
        pub fn setup(self, p: u8, flags: u8) -> Self {
            self.message(0, &[p, flags])
        }

        /// `OpenStandardMiningChannel` with request id `req`, user, hash rate and maximum
        /// target selectors (user 0 "alice", hash rate 0 none, target 0 the easiest).
        pub fn open_standard(self, req: u8, user: u8, rate: u8, target: u8) -> Self {
            self.message(1, &[req, user, rate, target])
        }

        /// `OpenExtendedMiningChannel`, with a minimum extranonce size selector too (2: 4).
        pub fn open_extended(self, req: u8, user: u8, rate: u8, target: u8, min: u8) -> Self {
            self.message(2, &[req, user, rate, target, min])
        }

        /// `SubmitSharesStandard` on channel selector `chan` (0 the first open standard
        /// channel), job selector `job`, ntime offset, nonce, version selector.
        pub fn submit_standard(self, chan: u8, job: u8, ntime: i8, nonce: u32, v: u8) -> Self {
            let mut args = vec![chan, job, ntime as u8];
            args.extend_from_slice(&nonce.to_le_bytes());
            args.push(v);
            self.message(3, &args)
        }

        /// `SubmitSharesExtended`, with extranonce selector `en` (0-4 the right size).
        #[allow(clippy::too_many_arguments)]
        pub fn submit_extended(
            self,
            chan: u8,
            job: u8,
            ntime: i8,
            nonce: u32,
            v: u8,
            en: u8,
        ) -> Self {
            let mut args = vec![chan, job, ntime as u8];
            args.extend_from_slice(&nonce.to_le_bytes());
            args.extend_from_slice(&[v, en]);
            self.message(6, &args)
        }

        /// `UpdateChannel` on channel selector `chan`, with hash rate and maximum target selectors.
        pub fn update(self, chan: u8, rate: u8, target: u8) -> Self {
            self.message(8, &[chan, rate, target])
        }

        /// `CloseChannel` on channel selector `chan`.
        pub fn close_channel(self, chan: u8) -> Self {
            self.message(9, &[chan])
        }

        /// `SetCustomMiningJob` on channel selector `chan` (see `Sv2Run::custom_job` for
        /// `flags`; 0 a job the pool takes).
        pub fn custom_job(self, chan: u8, req: u8, flags: u8, token_id: u8, t: u8) -> Self {
            self.message(10, &[chan, req, flags, token_id, t])
        }

        /// A message a pool never receives (`which` 0-4).
        pub fn unexpected(self, which: u8) -> Self {
            self.message(11, &[which])
        }

        steps!(op::SV2_TICK, op::SV2_WORK);
    }
}
