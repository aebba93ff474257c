//! A sans-IO harness for the SV1 front end: a pool (engine, job book) built from hand-made
//! templates, and miners that drive a `Session` line by line and read back what it wrote.
//!
//! The miner side is written independently of the pool: it rebuilds coinbases and headers from
//! the `mining.notify` lines it received and grinds nonces with `primitives`' hashing, so every
//! accepted share is also a check of the pool's own hashing.

use std::collections::VecDeque;
use std::sync::Arc;

use mining::vardiff::VardiffConfig;
use pool::channel::ChannelConfig;
use pool::engine::{Engine, EngineConfig, FoundBlock, PayoutMode};
use pool::jobs::{Generation, JobBook, JobConfig};
use pool::stats::{PoolStats, WorkerRegistry};
use pool::sv1::{LineKind, Session, Sv1Config};
use pool::template::{Template, TemplateTx};
use pool::Timestamp;
use primitives::bitcoin::{
    consensus, Address, Amount, KnownHrp, Network, ScriptBuf, Transaction, WitnessProgram,
    WitnessVersion,
};
use primitives::{merkle_root_from_branch, sha256d, CompactTarget, Difficulty, Hash256, Target};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

/// The clock at which every test starts.
pub const T0: Timestamp = Timestamp::from_millis(1_000_000);
/// The node's clock in the templates (`curtime`); `mintime` is ten minutes earlier.
pub const CURTIME: u32 = 1_700_000_000;
pub const MINTIME: u32 = CURTIME - 600;
pub const HEIGHT: u32 = 300;
pub const SUBSIDY_SAT: u64 = 5_000_000_000;
/// Regtest's limit: about every second hash is a block.
pub const EASY_BITS: CompactTarget = CompactTarget::from_consensus(0x207f_ffff);
/// Difficulty 1: no test hash will ever meet it.
pub const HARD_BITS: CompactTarget = CompactTarget::from_consensus(0x1d00_ffff);
/// The vardiff bounds of the test pools.
pub const MIN_LOG2: i32 = -30;
pub const MAX_DIFF: f64 = 1024.0;

/// `2^log2` as a difficulty: 2^-24 is met by one hash in 256 (2^-32 / d per hash).
pub fn diff(log2: i32) -> Difficulty {
    Difficulty::new(2f64.powi(log2)).expect("valid difficulty")
}

/// The pool's own payout script in pool mode (a P2WPKH of twenty 0x22 bytes).
pub fn pool_script() -> ScriptBuf {
    let mut s = vec![0x00, 0x14];
    s.extend_from_slice(&[0x22; 20]);
    ScriptBuf::from_bytes(s)
}

/// A bech32 P2WPKH address of `program` for `hrp`, and the output script that pays it, spelled
/// out byte by byte (`OP_0 <20 bytes>`).
pub fn p2wpkh_address(program: [u8; 20], hrp: KnownHrp) -> (String, ScriptBuf) {
    let wp = WitnessProgram::new(WitnessVersion::V0, &program).expect("20-byte v0 program");
    let address = Address::from_witness_program(wp, hrp).to_string();
    let mut script = vec![0x00, 0x14];
    script.extend_from_slice(&program);
    (address, ScriptBuf::from_bytes(script))
}

#[allow(unused_imports)] // not every test names a tip
pub use pool::fuzz_support::{fake_tx, tip};

/// A template on `prev` with `bits` and three fake transactions (fees 100, 200, 300 sat).
pub fn template(prev: Hash256, bits: CompactTarget) -> Template {
    template_with(prev, bits, CURTIME, &[fake_tx(1), fake_tx(2), fake_tx(3)])
}

pub fn template_with(
    prev: Hash256,
    bits: CompactTarget,
    curtime: u32,
    txs: &[Transaction],
) -> Template {
    let transactions: Vec<TemplateTx> = txs
        .iter()
        .enumerate()
        .map(|(i, tx)| TemplateTx {
            data: consensus::serialize(tx),
            txid: Hash256::from(tx.compute_txid()),
            fee: Amount::from_sat(100 * (i as u64 + 1)),
            weight: tx.weight().to_wu() as u32,
        })
        .collect();
    let fees: u64 = transactions.iter().map(|t| t.fee.to_sat()).sum();
    Template {
        height: HEIGHT,
        prev_hash: prev,
        version: 0x2000_0000,
        bits,
        curtime,
        mintime: MINTIME,
        median_time_past: Some(MINTIME - 1),
        coinbase_value: Amount::from_sat(SUBSIDY_SAT + fees),
        witness_commitment: None,
        transactions: transactions.into(),
        longpoll_id: None,
    }
}

/// How a test pool is set up.
#[derive(Clone, Debug)]
pub struct LabConfig {
    pub payout: PayoutMode,
    pub start: Difficulty,
    pub vardiff: VardiffConfig,
    pub grace_ms: u64,
    pub dedup_capacity: usize,
    pub sv1: Sv1Config,
}

impl LabConfig {
    /// Pool mode, start difficulty 2^-24, a vardiff that never retargets within a test (one
    /// hour between retargets, far more shares than any test sends before a flood counts).
    pub fn pool() -> Self {
        LabConfig {
            payout: PayoutMode::Pool(pool_script()),
            start: diff(-24),
            vardiff: VardiffConfig {
                shares_per_minute: 15.0,
                min: diff(MIN_LOG2),
                max: Difficulty::new(MAX_DIFF).expect("valid"),
                retarget_interval_ms: 3_600_000,
                hysteresis: 1.5,
                smoothing_ms: 120_000,
            },
            grace_ms: 5_000,
            dedup_capacity: ChannelConfig::default().dedup_capacity,
            sv1: Sv1Config::default(),
        }
    }

    pub fn solo() -> Self {
        LabConfig {
            payout: PayoutMode::Solo,
            ..Self::pool()
        }
    }

    /// The default vardiff's pace (15 shares a minute, 30 s between retargets), same bounds.
    pub fn with_live_vardiff(mut self) -> Self {
        self.vardiff.retarget_interval_ms = 30_000;
        self
    }
}

/// A pool without sockets: the engine, its found-block queue and a job book fed by hand.
pub struct Lab {
    pub engine: Arc<Engine>,
    pub found: UnboundedReceiver<FoundBlock>,
    pub book: JobBook,
    pub sv1: Arc<Sv1Config>,
}

impl Lab {
    pub fn new(c: LabConfig) -> Lab {
        Lab::with_store(c, None)
    }

    /// A pool in mode `c` that records into `store`.
    pub fn with_store(c: LabConfig, store: Option<pool::store::Store>) -> Lab {
        let stats = PoolStats::new(Timestamp::from_millis(0));
        let workers = WorkerRegistry::new(&stats);
        let config = EngineConfig {
            jobs: JobConfig::default(),
            channel: ChannelConfig {
                grace_ms: c.grace_ms,
                dedup_capacity: c.dedup_capacity,
                vardiff: c.vardiff,
                ..ChannelConfig::default()
            },
            payout: c.payout,
            network: Network::Regtest,
            start_difficulty: c.start,
        };
        let (engine, found) =
            Engine::new(config, stats, workers, store, events::EventSink::disabled());
        Lab {
            engine,
            found,
            book: JobBook::new(JobConfig::default()),
            sv1: Arc::new(c.sv1),
        }
    }

    /// A pool in mode `c` already serving a template on `prev` with `bits`.
    pub fn serving(c: LabConfig, prev: Hash256, bits: CompactTarget) -> Lab {
        let mut lab = Lab::new(c);
        lab.publish(template(prev, bits), T0);
        lab
    }

    /// Adopts a template and hands it to every connection (they pick it up in `deliver`).
    pub fn publish(&mut self, t: Template, now: Timestamp) -> Arc<Generation> {
        let g = self.book.handle_template(Arc::new(t), now);
        self.engine.publish(g.clone());
        g
    }

    pub fn miner(&self, now: Timestamp) -> Miner {
        Miner::new(Session::new(self.engine.clone(), self.sv1.clone(), now))
    }

    /// The next found block, if any is queued.
    pub fn next_block(&mut self) -> Option<FoundBlock> {
        self.found.try_recv().ok()
    }
}

/// A job as the miner read it from `mining.notify`.
#[derive(Clone, Debug)]
pub struct MinerJob {
    pub id: String,
    pub prev_hash: Hash256,
    /// The prevhash field exactly as sent (word-swapped hex).
    pub prev_hash_field: String,
    pub coinb1: Vec<u8>,
    pub coinb2: Vec<u8>,
    pub merkle_branch: Vec<Hash256>,
    pub version: u32,
    pub nbits: u32,
    pub ntime: u32,
    pub clean: bool,
    /// The difficulty of the last `mining.set_difficulty` before this notify.
    pub difficulty: Option<f64>,
}

/// A line the pool wrote, classified.
#[derive(Clone, Debug)]
pub enum Msg {
    Reply {
        id: Value,
        result: Value,
        error: Value,
    },
    SetDifficulty(f64),
    Notify(Box<MinerJob>),
    /// Any other pool-to-miner method.
    Other,
}

pub fn classify(line: &str) -> Msg {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
    match v.get("method").and_then(Value::as_str) {
        Some("mining.set_difficulty") => {
            // Parsed from the number's text with Rust's exact float parser (serde_json's
            // default one may be one unit in the last place off).
            let (env, _) = sv1::parse_line(line.as_bytes()).expect("parses");
            match env.params.get(0) {
                Some(sv1::Value::Num(n)) => Msg::SetDifficulty(n.parse().expect("a number")),
                _ => panic!("set_difficulty without a numeric difficulty: {line}"),
            }
        }
        Some("mining.notify") => {
            let (env, _) = sv1::parse_line(line.as_bytes()).expect("parses");
            let n = sv1::Notify::parse(&env).unwrap_or_else(|e| panic!("bad notify {line}: {e}"));
            assert_eq!(env.params.len(), 9, "notify has nine params: {line}");
            Msg::Notify(Box::new(MinerJob {
                id: n.job_id.to_owned(),
                prev_hash: n.prev_hash,
                prev_hash_field: v["params"][1].as_str().expect("string").to_owned(),
                coinb1: n.coinb1,
                coinb2: n.coinb2,
                merkle_branch: n.merkle_branch,
                version: n.version,
                nbits: n.nbits,
                ntime: n.ntime,
                clean: n.clean_jobs,
                difficulty: None,
            }))
        }
        Some(_) => Msg::Other,
        None => {
            for key in ["id", "result", "error"] {
                assert!(v.get(key).is_some(), "reply without {key:?}: {line}");
            }
            Msg::Reply {
                id: v["id"].clone(),
                result: v["result"].clone(),
                error: v["error"].clone(),
            }
        }
    }
}

/// `{"id":ID,"result":true,"error":null}` exactly as the pool writes it.
pub fn ok_line(id: impl std::fmt::Display) -> String {
    format!(r#"{{"id":{id},"result":true,"error":null}}"#)
}

/// Asserts `line` is an error reply to `id` (raw JSON text of the id) with `code`; returns the
/// message.
#[track_caller]
pub fn assert_error(line: &str, id: &str, code: i64) -> String {
    match classify(line) {
        Msg::Reply {
            id: got,
            result,
            error,
        } => {
            let want: Value = serde_json::from_str(id).expect("id is JSON");
            assert_eq!(got, want, "reply id: {line}");
            assert!(result.is_null(), "error reply with a result: {line}");
            let e = error
                .as_array()
                .unwrap_or_else(|| panic!("no error array: {line}"));
            assert_eq!(e.len(), 3, "error is [code, message, null]: {line}");
            assert_eq!(e[0].as_i64(), Some(code), "error code: {line}");
            assert!(e[2].is_null(), "{line}");
            e[1].as_str().expect("message").to_owned()
        }
        other => panic!("expected an error reply to {id}, got {other:?}"),
    }
}

#[track_caller]
pub fn assert_set_difficulty(line: &str, want: f64) {
    match classify(line) {
        Msg::SetDifficulty(d) => assert_eq!(d, want, "{line}"),
        other => panic!("expected set_difficulty {want}, got {other:?}"),
    }
}

#[track_caller]
pub fn assert_notify(line: &str) -> MinerJob {
    match classify(line) {
        Msg::Notify(j) => *j,
        other => panic!("expected mining.notify, got {other:?}"),
    }
}

/// A share the miner found.
#[derive(Clone, Debug)]
pub struct Share {
    pub job_id: String,
    pub en2: Vec<u8>,
    pub ntime: u32,
    pub nonce: u32,
    pub version_bits: Option<u32>,
    pub header: [u8; 80],
    pub hash: Hash256,
}

impl Share {
    /// The same share on another job id (or with other fields changed by the caller).
    pub fn on_job(&self, job_id: &str) -> Share {
        Share {
            job_id: job_id.to_owned(),
            ..self.clone()
        }
    }
}

/// Meets `d`'s target.
pub fn meets(d: Difficulty) -> impl Fn(&Hash256) -> bool {
    let t = d.to_target();
    move |h| t.is_met_by(&h.0)
}

/// Meets `easy` but not `hard`.
pub fn between(easy: Difficulty, hard: Difficulty) -> impl Fn(&Hash256) -> bool {
    let (e, h) = (easy.to_target(), hard.to_target());
    move |x| e.is_met_by(&x.0) && !h.is_met_by(&x.0)
}

/// Meets neither.
pub fn below(d: Difficulty) -> impl Fn(&Hash256) -> bool {
    let t = d.to_target();
    move |h| !t.is_met_by(&h.0)
}

/// Meets the network target of compact `bits`.
pub fn meets_bits(bits: CompactTarget) -> impl Fn(&Hash256) -> bool {
    let t = Target::from_compact(bits).expect("valid bits");
    move |h| t.is_met_by(&h.0)
}

/// One miner connection: the session under test and what the miner learned from it.
pub struct Miner {
    pub session: Session,
    next_id: u64,
    unread: VecDeque<String>,
    /// Every line received, in order.
    pub received: Vec<String>,
    pub extranonce1: Vec<u8>,
    pub extranonce2_size: usize,
    pub difficulty: Option<f64>,
    pub version_mask: u32,
    pub jobs: Vec<MinerJob>,
    nonce_cursor: u32,
}

impl Miner {
    pub fn new(session: Session) -> Miner {
        Miner {
            session,
            next_id: 1,
            unread: VecDeque::new(),
            received: Vec::new(),
            extranonce1: Vec::new(),
            extranonce2_size: 0,
            difficulty: None,
            version_mask: 0,
            jobs: Vec::new(),
            nonce_cursor: 0,
        }
    }

    /// Feeds one line; what the session wrote is queued for [`Miner::lines`].
    pub fn send(&mut self, line: &str, now: Timestamp) -> LineKind {
        self.send_bytes(line.as_bytes(), now)
    }

    pub fn send_bytes(&mut self, line: &[u8], now: Timestamp) -> LineKind {
        let kind = self.session.handle_line(line, now);
        self.collect();
        kind
    }

    /// Sends `{"id":N,"method":M,"params":P}` with the next id; returns the id.
    pub fn request(&mut self, method: &str, params: &str, now: Timestamp) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(
            &format!(r#"{{"id":{id},"method":"{method}","params":{params}}}"#),
            now,
        );
        id
    }

    /// Sends a notification (`"id":null`).
    pub fn notification(&mut self, method: &str, params: &str, now: Timestamp) {
        self.send(
            &format!(r#"{{"id":null,"method":"{method}","params":{params}}}"#),
            now,
        );
    }

    pub fn handle_generation(&mut self, lab: &Lab, now: Timestamp) {
        self.session
            .handle_generation(lab.engine.current().as_ref(), now);
        self.collect();
    }

    pub fn tick(&mut self, now: Timestamp) {
        self.session.handle_tick(now);
        self.collect();
    }

    /// Lines received since the last call.
    pub fn lines(&mut self) -> Vec<String> {
        self.unread.drain(..).collect()
    }

    /// Reads what the session wrote outside `send`, `handle_generation` and `tick`.
    pub fn collect(&mut self) {
        let out = self.session.take_output();
        let text = String::from_utf8(out).expect("UTF-8 output");
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "unterminated line: {text:?}"
        );
        for line in text.lines() {
            self.learn(line);
            self.received.push(line.to_owned());
            self.unread.push_back(line.to_owned());
        }
    }

    /// What a miner takes from each line: extranonce, mask, difficulty, jobs.
    fn learn(&mut self, line: &str) {
        match classify(line) {
            Msg::Reply { result, .. } => {
                if let Some(r) = result.as_array() {
                    if r.len() == 3 && r[1].is_string() {
                        self.extranonce1 =
                            primitives::hex::decode(r[1].as_str().unwrap()).expect("hex en1");
                        self.extranonce2_size = r[2].as_u64().expect("en2 size") as usize;
                    }
                }
                if let Some(mask) = result.get("version-rolling.mask").and_then(Value::as_str) {
                    self.version_mask = u32::from_str_radix(mask, 16).expect("hex mask");
                }
            }
            Msg::SetDifficulty(d) => self.difficulty = Some(d),
            Msg::Notify(mut j) => {
                j.difficulty = self.difficulty;
                self.jobs.push(*j);
            }
            Msg::Other => {}
        }
    }

    /// subscribe then authorize as `user`: asserts the replies and that work arrived.
    pub fn handshake(&mut self, user: &str, now: Timestamp) -> MinerJob {
        let id = self.request("mining.subscribe", r#"["test-miner/1.0"]"#, now);
        let lines = self.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with(&format!(r#"{{"id":{id},"result":[["#)),
            "{lines:?}"
        );
        let id = self.request("mining.authorize", &format!(r#"["{user}","x"]"#), now);
        let lines = self.lines();
        assert_eq!(lines.len(), 3, "reply, set_difficulty, notify: {lines:?}");
        assert_eq!(lines[0], ok_line(id));
        assert!(
            matches!(classify(&lines[1]), Msg::SetDifficulty(_)),
            "{lines:?}"
        );
        assert_notify(&lines[2]);
        self.latest_job().clone()
    }

    pub fn job(&self, id: &str) -> &MinerJob {
        self.jobs
            .iter()
            .rev()
            .find(|j| j.id == id)
            .unwrap_or_else(|| panic!("no job {id}"))
    }

    pub fn latest_job(&self) -> &MinerJob {
        self.jobs.last().expect("a job")
    }

    /// The coinbase transaction for `en2`, serialized: coinb1 || extranonce1 || en2 || coinb2.
    pub fn coinbase(&self, job: &MinerJob, en2: &[u8]) -> Vec<u8> {
        [&job.coinb1[..], &self.extranonce1, en2, &job.coinb2].concat()
    }

    /// The header of a solution, built as a miner builds it.
    pub fn header(
        &self,
        job: &MinerJob,
        en2: &[u8],
        version: u32,
        ntime: u32,
        nonce: u32,
    ) -> [u8; 80] {
        let root = merkle_root_from_branch(sha256d(&self.coinbase(job, en2)), &job.merkle_branch);
        let mut h = [0u8; 80];
        h[0..4].copy_from_slice(&version.to_le_bytes());
        h[4..36].copy_from_slice(&job.prev_hash.0);
        h[36..68].copy_from_slice(&root.0);
        h[68..72].copy_from_slice(&ntime.to_le_bytes());
        h[72..76].copy_from_slice(&job.nbits.to_le_bytes());
        h[76..80].copy_from_slice(&nonce.to_le_bytes());
        h
    }

    /// The default extranonce2: zeros of the size the pool asked for.
    pub fn en2(&self) -> Vec<u8> {
        vec![0; self.extranonce2_size]
    }

    /// Grinds nonces on job `job_id` (with `version_bits` rolled in under the granted mask)
    /// until the header hash satisfies `want`.
    pub fn grind(
        &mut self,
        job_id: &str,
        en2: &[u8],
        version_bits: Option<u32>,
        want: impl Fn(&Hash256) -> bool,
    ) -> Share {
        let ntime = self.job(job_id).ntime;
        self.grind_at(job_id, en2, version_bits, ntime, want)
    }

    /// [`Miner::grind`] with the header time `ntime` instead of the job's.
    pub fn grind_at(
        &mut self,
        job_id: &str,
        en2: &[u8],
        version_bits: Option<u32>,
        ntime: u32,
        want: impl Fn(&Hash256) -> bool,
    ) -> Share {
        let job = self.job(job_id).clone();
        let version = match version_bits {
            None => job.version,
            Some(b) => (job.version & !self.version_mask) | (b & self.version_mask),
        };
        let mut header = self.header(&job, en2, version, ntime, 0);
        for _ in 0..50_000_000u32 {
            let nonce = self.nonce_cursor;
            self.nonce_cursor = self.nonce_cursor.wrapping_add(1);
            header[76..80].copy_from_slice(&nonce.to_le_bytes());
            let hash = sha256d(&header);
            if want(&hash) {
                return Share {
                    job_id: job_id.to_owned(),
                    en2: en2.to_vec(),
                    ntime,
                    nonce,
                    version_bits,
                    header,
                    hash,
                };
            }
        }
        panic!("no share found on job {job_id}");
    }

    /// A share on the latest job with the default extranonce2.
    pub fn find(&mut self, want: impl Fn(&Hash256) -> bool) -> Share {
        let id = self.latest_job().id.clone();
        let en2 = self.en2();
        self.grind(&id, &en2, None, want)
    }

    /// The `mining.submit` line for `s` under request id `id`.
    pub fn submit_line(worker: &str, s: &Share, id: u64) -> String {
        let en2 = primitives::hex::encode(&s.en2);
        let tail = match s.version_bits {
            Some(v) => format!(r#","{v:08x}""#),
            None => String::new(),
        };
        format!(
            r#"{{"id":{id},"method":"mining.submit","params":["{worker}","{}","{en2}","{:08x}","{:08x}"{tail}]}}"#,
            s.job_id, s.ntime, s.nonce
        )
    }

    /// Submits `s` as `worker`; returns the request id, the verdict and the lines written.
    pub fn submit(
        &mut self,
        worker: &str,
        s: &Share,
        now: Timestamp,
    ) -> (u64, LineKind, Vec<String>) {
        let id = self.next_id;
        self.next_id += 1;
        let kind = self.send(&Self::submit_line(worker, s, id), now);
        (id, kind, self.lines())
    }

    /// Submits `s` and asserts the reply is exactly `true` with nothing else written.
    #[track_caller]
    pub fn submit_ok(&mut self, worker: &str, s: &Share, now: Timestamp) {
        let (id, kind, lines) = self.submit(worker, s, now);
        assert_eq!(lines, vec![ok_line(id)], "share {s:?}");
        assert_eq!(kind, LineKind::Share(events::Verdict::Accepted));
    }

    /// Submits `s` and asserts an error reply with `code`; returns the verdict's reason.
    #[track_caller]
    pub fn submit_err(
        &mut self,
        worker: &str,
        s: &Share,
        now: Timestamp,
        code: i64,
    ) -> events::Reason {
        let (id, kind, lines) = self.submit(worker, s, now);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_error(&lines[0], &id.to_string(), code);
        match kind {
            LineKind::Share(events::Verdict::Rejected(r)) => r,
            other => panic!("expected a rejected share, got {other:?}"),
        }
    }
}

/// Everything an SV2 session has to write, in order ([`pool::sv2::Session::poll_transmit`]
/// until `None`).
#[allow(dead_code)] // the SV1 tests include this module too
pub fn transmits(s: &mut pool::sv2::Session) -> Vec<sv2::messages::Message> {
    std::iter::from_fn(|| s.poll_transmit()).collect()
}

/// A `SetupConnection` for `protocol` (0: mining) with `flags`; the pool reads neither the
/// endpoint nor the device's names, so every SV2 test sends the same ones.
#[allow(dead_code)] // the SV1 tests include this module too
pub fn setup_connection(protocol: u8, flags: u32) -> sv2::messages::Message {
    sv2::messages::common::SetupConnection {
        flags,
        endpoint_host: "127.0.0.1".into(),
        endpoint_port: 3336,
        vendor: "test".into(),
        ..sv2::messages::common::SetupConnection::new(protocol)
    }
    .into()
}

/// `OpenExtendedMiningChannel` for `user`: request 1, no hash rate, the easiest target and at
/// least 4 bytes of extranonce.
#[allow(dead_code)]
pub fn open_extended(user: &str) -> sv2::messages::Message {
    sv2::messages::mining::OpenExtendedMiningChannel {
        request_id: 1,
        user_identity: user.into(),
        nominal_hash_rate: 0.0,
        max_target: Target::from_le_bytes(&[0xff; 32]),
        min_extranonce_size: 4,
    }
    .into()
}

/// The merkle root a miner derives from an extended job: its coinbase around `extranonce` (the
/// channel's prefix, then what the miner rolls) up the job's merkle path.
#[allow(dead_code)]
pub fn extended_root(
    job: &sv2::messages::mining::NewExtendedMiningJob,
    extranonce: &[u8],
) -> [u8; 32] {
    let coinbase = [
        &job.coinbase_tx_prefix[..],
        extranonce,
        &job.coinbase_tx_suffix,
    ]
    .concat();
    let path: Vec<Hash256> = job.merkle_path.iter().map(|h| Hash256(*h)).collect();
    merkle_root_from_branch(sha256d(&coinbase), &path).0
}

/// The header an SV2 miner hashes: `version` and `root` from its job, the previous hash, time
/// and nBits from `prev`, then `nonce`.
#[allow(dead_code)]
pub fn sv2_header(
    version: u32,
    prev: &sv2::messages::mining::SetNewPrevHash,
    root: &[u8; 32],
    nonce: u32,
) -> [u8; 80] {
    let mut h = [0u8; 80];
    h[0..4].copy_from_slice(&version.to_le_bytes());
    h[4..36].copy_from_slice(&prev.prev_hash);
    h[36..68].copy_from_slice(root);
    h[68..72].copy_from_slice(&prev.min_ntime.to_le_bytes());
    h[72..76].copy_from_slice(&prev.nbits.to_le_bytes());
    h[76..80].copy_from_slice(&nonce.to_le_bytes());
    h
}
