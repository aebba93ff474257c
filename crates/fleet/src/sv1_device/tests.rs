//! The device driven by a scripted pool: no sockets, no clock but the numbers we pass.

use super::*;
use crate::backoff::Backoff;
use crate::grind::deposit_bits;
use primitives::coinbase_merkle_branch;
use sv1::Submit;

#[path = "../../tests/common/records.rs"]
#[macro_use]
mod records;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

/// The instant `ns` nanoseconds after the devices' clock starts.
fn at(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

/// Everything the device told its observer.
#[derive(Default)]
struct Recorder {
    jobs: Vec<(String, Hash256, Vec<Hash256>, bool, f64)>,
    targets: Vec<f64>,
    sent: Vec<(u64, String, u32, u32, f64, Hash256)>,
    results: Vec<(u64, u64, ShareVerdict)>,
    unanswered: Vec<u64>,
    dropped: u32,
    ready: u32,
    errors: Vec<String>,
}

impl Observer for Recorder {
    fn job_received(&mut self, _d: u64, _now: Timestamp, j: &JobView<'_>) {
        self.jobs.push((
            j.job_id.to_owned(),
            *j.prev_hash,
            j.merkle_branch.to_vec(),
            j.clean,
            j.difficulty,
        ));
    }
    fn target_changed(&mut self, _d: u64, _now: Timestamp, difficulty: f64, _t: &Target) {
        self.targets.push(difficulty);
    }
    fn share_sent(&mut self, _d: u64, _now: Timestamp, s: &SentShare<'_>) {
        self.sent.push((
            s.seq,
            s.job_id.to_owned(),
            s.nonce,
            s.version,
            s.difficulty,
            *s.hash,
        ));
    }
    fn share_result(&mut self, _d: u64, _now: Timestamp, r: &ShareReply<'_>) {
        self.results.push((r.seq, r.latency_ns, r.verdict));
    }
    record_session!();
}

fn config(profile: Profile) -> Sv1Config {
    Sv1Config {
        profile,
        worker_prefix: "bc1qlab.rig".into(),
        connection: ConnectionPolicy {
            backoff: Backoff {
                base: Duration::from_millis(500),
                max: Duration::from_secs(30),
            },
            ..ConnectionPolicy::default()
        },
        ..Sv1Config::default()
    }
}

fn device(config: Sv1Config, index: u32) -> Sv1Device {
    Sv1Device::new(
        Sv1Shared::new(config).unwrap(),
        100 + index as u64,
        index,
        42,
        at(0),
    )
}

/// Takes what the device wants sent, as lines.
fn sent_lines(dev: &mut Sv1Device, now: Timestamp, rec: &mut Recorder) -> Vec<String> {
    let mut out = Vec::new();
    dev.poll_transmit(&mut out, now, rec);
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn method_of(line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["method"].as_str().unwrap_or("").to_owned()
}

/// A pool's side of the handshake: answers whatever the device sends until it goes quiet.
/// Returns the requests in the order they were sent, each batch (one `poll_transmit`) apart.
fn handshake(
    dev: &mut Sv1Device,
    rec: &mut Recorder,
    pool_mask: u32,
    en1: &[u8],
    en2_size: usize,
    now: Timestamp,
) -> Vec<Vec<String>> {
    let mut batches = Vec::new();
    loop {
        let lines = sent_lines(dev, now, rec);
        if lines.is_empty() {
            break;
        }
        let mut replies = Vec::new();
        for line in &lines {
            let (env, m) = sv1::parse_line(line.as_bytes()).unwrap();
            let id = env.id.unwrap();
            match m {
                Some(Method::Configure) => {
                    let c = sv1::Configure::parse(&env).unwrap();
                    sv1::write::reply_configure(
                        &mut replies,
                        id,
                        &sv1::write::ConfigureReply {
                            version_rolling: Some(c.version_rolling_mask.unwrap() & pool_mask),
                            requested: &c.extensions,
                            ..Default::default()
                        },
                    );
                }
                Some(Method::Subscribe) => {
                    sv1::write::reply_subscribe(&mut replies, id, "s1", en1, en2_size)
                }
                Some(Method::Authorize)
                | Some(Method::SuggestDifficulty)
                | Some(Method::ExtranonceSubscribe) => {
                    sv1::write::reply_bool(&mut replies, id, true)
                }
                other => panic!("unexpected {other:?} in the handshake"),
            }
        }
        batches.push(lines.iter().map(|l| method_of(l)).collect());
        for reply in replies.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            dev.handle_line(reply, now, rec);
        }
    }
    batches
}

/// A job as a pool would build it: realistic coinbase (BIP34 height, tag, P2WPKH payout,
/// witness commitment), made-up branch.
struct TestJob(crate::testpool::Job);

impl TestJob {
    fn new(n: u64, en_len: usize, branch_len: usize) -> Self {
        let parts = crate::testpool::coinbase_parts(
            900_000 + n as u32,
            en_len,
            b"/stratumlab test/",
            sha256d(b"commitment"),
        );
        TestJob(crate::testpool::Job {
            id: format!("job{n}"),
            prev_hash: sha256d(&n.to_le_bytes()),
            coinb1: parts.prefix,
            coinb2: parts.suffix,
            branch: (0..branch_len as u64)
                .map(|i| sha256d(&(i + 1000 * n).to_le_bytes()))
                .collect(),
            version: 0x2000_0000,
            nbits: 0x1d00_ffff,
            ntime: 1_700_000_000,
        })
    }

    fn notify(&self, clean: bool) -> Vec<u8> {
        let mut out = self.0.notify(clean);
        out.pop(); // the newline
        out
    }

    /// The pool's check of a submit line: recomputes SHA-256d from the submitted fields.
    fn check(&self, line: &str, en1: &[u8], mask: u32, target: &Target) -> (bool, Option<u32>) {
        let (env, m) = sv1::parse_line(line.as_bytes()).unwrap();
        assert_eq!(m, Some(Method::Submit), "{line}");
        let sub = Submit::parse(&env).unwrap();
        assert_eq!(sub.job_id, self.0.id);
        let check = self
            .0
            .share(&sub, en1, mask)
            .check(target)
            .expect("version bits inside the mask");
        (check.meets_share_target, sub.version_bits)
    }
}

fn set_difficulty_line(d: &str) -> Vec<u8> {
    format!(r#"{{"id":null,"method":"mining.set_difficulty","params":[{d}]}}"#).into_bytes()
}

const EN1: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];

/// A device that finished the handshake (ASIC profile unless given) and holds `job`.
fn ready_with_job(
    cfg: Sv1Config,
    job: &TestJob,
    difficulty: &str,
    rec: &mut Recorder,
) -> Sv1Device {
    let mut dev = device(cfg, 7);
    assert!(dev.wants_connect(at(0)));
    dev.handle_connected(at(0));
    handshake(&mut dev, rec, 0x1fff_e000, &EN1, 4, at(0));
    assert!(dev.is_ready());
    dev.handle_line(&set_difficulty_line(difficulty), at(MS), rec);
    dev.handle_line(&job.notify(true), at(MS), rec);
    assert!(dev.can_hash(), "{:?}", rec.errors);
    dev
}

#[test]
fn asic_handshake_waits_for_each_reply() {
    let mut cfg = config(Profile::Asic);
    cfg.suggest_difficulty = Some(0.001);
    let mut dev = device(cfg, 7);
    let mut rec = Recorder::default();
    assert_eq!(
        dev.poll_transmit(&mut Vec::new(), at(0), &mut rec),
        0,
        "nothing before connecting"
    );
    dev.handle_connected(at(0));
    let first = sent_lines(&mut dev, at(0), &mut rec);
    assert_eq!(first.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&first[0]).unwrap();
    assert_eq!(v["method"], "mining.configure");
    assert_eq!(v["params"][0][0], "version-rolling");
    assert_eq!(v["params"][1]["version-rolling.mask"], "1fffe000");
    // Answer it and go on: each request follows the previous reply.
    let mut replies = Vec::new();
    sv1::write::reply_configure(
        &mut replies,
        "1",
        &sv1::write::ConfigureReply {
            version_rolling: Some(0x1fff_e000),
            requested: &["version-rolling".to_owned()],
            ..Default::default()
        },
    );
    dev.handle_line(replies.trim_ascii_end(), at(0), &mut rec);
    assert_eq!(dev.version_mask(), 0x1fff_e000);
    let second = sent_lines(&mut dev, at(0), &mut rec);
    assert_eq!(second.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&second[0]).unwrap();
    assert_eq!(v["method"], "mining.subscribe");
    assert!(v["params"][0]
        .as_str()
        .unwrap()
        .starts_with("stratumlab-fleet/"));
    let mut reply = Vec::new();
    sv1::write::reply_subscribe(&mut reply, "2", "s1", &EN1, 4);
    dev.handle_line(reply.trim_ascii_end(), at(0), &mut rec);
    let rest = handshake(&mut dev, &mut rec, 0x1fff_e000, &EN1, 4, at(0));
    assert_eq!(
        rest,
        [vec!["mining.authorize"], vec!["mining.suggest_difficulty"]]
    );
    assert!(dev.is_ready());
    assert_eq!(rec.ready, 1);
    assert_eq!(dev.extranonce1(), EN1);
    assert_eq!(dev.extranonce2_size(), 4);
}

#[test]
fn authorize_carries_the_worker_name_and_password() {
    let mut cfg = config(Profile::Cpu);
    cfg.worker_prefix = "bc1q\"odd\",\u{1}.w".into();
    cfg.password = "d=0.5".into();
    let mut dev = device(cfg, 12345);
    let mut rec = Recorder::default();
    dev.handle_connected(at(0));
    assert_eq!(
        sent_lines(&mut dev, at(0), &mut rec),
        [r#"{"id":2,"method":"mining.subscribe","params":["stratumlab-fleet/0.1.0"]}"#]
    );
    let mut reply = Vec::new();
    sv1::write::reply_subscribe(&mut reply, "2", "s", &EN1, 8);
    dev.handle_line(reply.trim_ascii_end(), at(0), &mut rec);
    let auth = sent_lines(&mut dev, at(0), &mut rec);
    let v: serde_json::Value = serde_json::from_str(&auth[0]).unwrap();
    assert_eq!(v["method"], "mining.authorize");
    assert_eq!(v["params"][0], "bc1q\"odd\",\u{1}.w12345");
    assert_eq!(v["params"][1], "d=0.5");
    assert_eq!(v["id"], 3);
}

#[test]
fn bitaxe_sends_configure_first_with_the_full_mask_and_pipelines() {
    let mut cfg = config(Profile::Bitaxe);
    cfg.suggest_difficulty = Some(1000.0);
    let mut dev = device(cfg, 3);
    let mut rec = Recorder::default();
    dev.handle_connected(at(0));
    let batches = handshake(&mut dev, &mut rec, 0x1fff_e000, &EN1, 4, at(0));
    assert_eq!(
        batches,
        [
            vec!["mining.configure", "mining.subscribe", "mining.authorize"],
            vec!["mining.suggest_difficulty"],
        ]
    );
    // Asked for ffffffff, granted the pool's mask.
    assert_eq!(dev.version_mask(), 0x1fff_e000);
    assert!(dev.is_ready());
}

#[test]
fn cpu_miner_subscribes_first_and_rolls_no_version() {
    let job = TestJob::new(1, 8, 2);
    let mut rec = Recorder::default();
    let mut dev = device(config(Profile::Cpu), 1);
    dev.handle_connected(at(0));
    let batches = handshake(&mut dev, &mut rec, 0x1fff_e000, &EN1, 4, at(0));
    assert_eq!(
        batches,
        [vec!["mining.subscribe"], vec!["mining.authorize"]]
    );
    assert_eq!(dev.version_mask(), 0);
    dev.handle_line(&set_difficulty_line("0.00000006"), at(0), &mut rec);
    dev.handle_line(&job.notify(true), at(0), &mut rec);
    let mut found = 0;
    while found < 5 {
        found += dev.hash(at(0), 10_000, &mut rec).shares;
    }
    for line in sent_lines(&mut dev, at(0), &mut rec) {
        let (ok, bits) = job.check(&line, &EN1, 0, &dev.target());
        assert!(ok);
        assert_eq!(bits, None, "no version_bits without version rolling");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["params"].as_array().unwrap().len(), 5);
    }
}

#[test]
fn extranonce_subscribe_goes_with_the_subscribe_when_asked_for() {
    let mut rec = Recorder::default();
    let mut dev = device(
        Sv1Config {
            extranonce_subscribe: true,
            ..config(Profile::Cpu)
        },
        1,
    );
    dev.handle_connected(at(0));
    let batches = handshake(&mut dev, &mut rec, 0x1fff_e000, &EN1, 4, at(0));
    assert_eq!(
        batches,
        [
            vec!["mining.subscribe", "mining.extranonce.subscribe"],
            vec!["mining.authorize"]
        ]
    );
    // Its answer (given in the handshake) was not mistaken for anything else.
    assert!(rec.errors.is_empty(), "{:?}", rec.errors);
    assert!(dev.is_connected() && dev.close_requested().is_none());
}

/// Block 100000 from mainnet: a notify carrying its coinbase (split around an extranonce)
/// and branch makes the device build exactly that header, whose hash is the block's.
#[test]
fn notify_rebuilds_mainnet_block_100000() {
    use primitives::bitcoin::consensus::{deserialize, serialize};
    let raw = hex::decode(include_str!("../../../primitives/tests/data/block_100000.hex").trim())
        .unwrap();
    let block: primitives::bitcoin::Block = deserialize(&raw).unwrap();
    let coinbase = serialize(&block.txdata[0]);
    let script = block.txdata[0].input[0].script_sig.as_bytes().to_vec();
    // version (4) + input count (1) + outpoint (36) + script length (1).
    let script_at = 42;
    assert_eq!(&coinbase[script_at..script_at + script.len()], &script[..]);
    // Extranonce1: 4 bytes of the scriptSig after its first byte; extranonce2: the rest.
    let (coinb1, en1) = (
        &coinbase[..script_at + 1],
        &coinbase[script_at + 1..script_at + 5],
    );
    let (en2, coinb2) = (
        &coinbase[script_at + 5..script_at + script.len()],
        &coinbase[script_at + script.len()..],
    );
    assert!(!en2.is_empty());
    let txids: Vec<Hash256> = block
        .txdata
        .iter()
        .map(|tx| Hash256::from(tx.compute_txid()))
        .collect();
    let branch = coinbase_merkle_branch(&txids[1..]);
    let h = block.header;
    assert_eq!(
        h.prev_blockhash.to_string(),
        "000000000002d01c1fccc21636b607dfd930d31d01c3a62104612a1719011250"
    );
    // Stratum's prevhash: the display hex's eight 8-digit groups in reverse order (each 4-byte
    // word of the internal order byte-swapped), written out by hand.
    let stratum_prev = "1901125004612a1701c3a621d930d31d36b607df1fccc2160002d01c00000000";
    let notify = format!(
        r#"{{"id":null,"method":"mining.notify","params":["b100000","{stratum_prev}","{}","{}",[{}],"{:08x}","{:08x}","{:08x}",true]}}"#,
        hex::encode(coinb1),
        hex::encode(coinb2),
        branch
            .iter()
            .map(|b| format!("\"{}\"", b.to_internal_hex()))
            .collect::<Vec<_>>()
            .join(","),
        h.version.to_consensus() as u32,
        h.bits.to_consensus(),
        h.time,
    );
    let mut rec = Recorder::default();
    let mut dev = device(config(Profile::Cpu), 0);
    dev.handle_connected(at(0));
    handshake(&mut dev, &mut rec, 0, en1, en2.len(), at(0));
    dev.handle_line(notify.as_bytes(), at(0), &mut rec);
    assert!(rec.errors.is_empty(), "{:?}", rec.errors);
    let (id, prev, got_branch, clean, _) = &rec.jobs[0];
    assert_eq!((id.as_str(), *clean), ("b100000", true));
    assert_eq!(prev.to_string(), h.prev_blockhash.to_string());
    assert_eq!(got_branch, &branch);
    let header = dev.header_for(en2, None, h.nonce).unwrap();
    assert_eq!(
        header.block_hash().to_string(),
        "000000000003ba27aa200b1cecaad478d2b00432346c3f1f3986da1afd33e506"
    );
    assert_eq!(header.to_bytes().to_vec(), serialize(&h));
    // The device's own parse agrees with the sv1 crate's typed one.
    let (env, _) = sv1::parse_line(notify.as_bytes()).unwrap();
    let typed = sv1::Notify::parse(&env).unwrap();
    assert_eq!(typed.prev_hash, *prev);
    assert_eq!(typed.merkle_branch, branch);
}

#[test]
fn every_share_meets_the_target_it_was_given_and_rolls_within_the_mask() {
    let job = TestJob::new(1, 8, 12);
    let mut cfg = config(Profile::Asic);
    // Roll the version often, so that the test sees many version-bit values.
    cfg.nonces_per_midstate = 64;
    let mut rec = Recorder::default();
    // 2^-24: about one share per 256 hashes.
    let mut dev = ready_with_job(cfg, &job, "0.000000059604644775390625", &mut rec);
    let target = dev.target();
    assert_eq!(target, Difficulty::new(2f64.powi(-24)).unwrap().to_target());
    let mut hashes = 0;
    let mut lines = Vec::new();
    while hashes < 60_000 {
        let out = dev.hash(at(2 * MS), 1000, &mut rec);
        assert_eq!(out.hashes, 1000);
        hashes += out.hashes;
        lines.extend(sent_lines(&mut dev, at(3 * MS), &mut rec));
    }
    assert_eq!(rec.dropped, 0);
    let expected = hashes as f64 / 256.0;
    assert!(
        (lines.len() as f64 - expected).abs() < 5.0 * expected.sqrt(),
        "{} shares for {expected:.0} expected",
        lines.len()
    );
    let mut versions = std::collections::BTreeSet::new();
    for line in &lines {
        let (meets, bits) = job.check(line, &EN1, 0x1fff_e000, &target);
        assert!(meets, "a share that misses its target: {line}");
        let bits = bits.expect("version bits with version rolling");
        assert_eq!(bits & !0x1fff_e000, 0, "{bits:08x} outside the mask");
        versions.insert(bits);
    }
    assert!(
        versions.len() > 20,
        "{} distinct version values",
        versions.len()
    );
    // The observer saw the same shares, with the header hash the device computed.
    assert_eq!(rec.sent.len(), lines.len());
    for (seq, job_id, _, version, difficulty, hash) in &rec.sent {
        assert!(*seq >= FIRST_SUBMIT_ID);
        assert_eq!(job_id, "job1");
        assert_eq!(version & !0x1fff_e000, 0x2000_0000);
        assert_eq!(*difficulty, 2f64.powi(-24));
        assert!(target.is_met_by(&hash.0));
    }
    assert_eq!(dev.in_flight(), lines.len());
}

#[test]
fn a_new_difficulty_applies_at_once_and_fractions_are_read() {
    let job = TestJob::new(2, 8, 3);
    let mut rec = Recorder::default();
    let mut dev = ready_with_job(config(Profile::Asic), &job, "0.0000001", &mut rec);
    assert_eq!(rec.targets, [0.0000001]);
    assert_eq!(
        rec.jobs[0].4, 0.0000001,
        "the job carries the difficulty in force"
    );
    dev.handle_line(&set_difficulty_line("\"0.000001\""), at(MS), &mut rec);
    assert_eq!(
        dev.difficulty(),
        0.000001,
        "quoted difficulties are read too"
    );
    let target = dev.target();
    let mut found = 0;
    while found < 10 {
        found += dev.hash(at(2 * MS), 5000, &mut rec).shares;
    }
    for line in sent_lines(&mut dev, at(2 * MS), &mut rec) {
        assert!(job.check(&line, &EN1, 0x1fff_e000, &target).0);
    }
    // Zero, negative and non-numbers are refused and change nothing.
    for bad in ["0", "-1", "\"x\"", "null"] {
        dev.handle_line(&set_difficulty_line(bad), at(MS), &mut rec);
    }
    assert_eq!(dev.difficulty(), 0.000001);
    assert_eq!(rec.errors.len(), 4);
}

#[test]
fn verdicts_are_matched_to_their_shares_with_latency_and_code() {
    let job = TestJob::new(3, 8, 1);
    let mut rec = Recorder::default();
    let mut dev = ready_with_job(config(Profile::Asic), &job, "0.0000001", &mut rec);
    while dev.pending_shares() < 3 {
        dev.hash(at(10 * MS), 1000, &mut rec);
    }
    let lines = sent_lines(&mut dev, at(10 * MS), &mut rec);
    assert!(lines.len() >= 3);
    let ids: Vec<u64> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    let reply = |id: u64, body: &str| format!(r#"{{"id":{id},{body}}}"#).into_bytes();
    dev.handle_line(
        &reply(
            ids[1],
            r#""result":null,"error":[23,"Low difficulty share",null]"#,
        ),
        at(25 * MS),
        &mut rec,
    );
    dev.handle_line(
        &reply(ids[0], r#""result":true,"error":null"#),
        at(13 * MS),
        &mut rec,
    );
    dev.handle_line(
        &reply(ids[2], r#""result":false,"error":null"#),
        at(14 * MS),
        &mut rec,
    );
    // A reply to nothing in flight is ignored.
    dev.handle_line(
        &reply(9999, r#""result":true,"error":null"#),
        at(14 * MS),
        &mut rec,
    );
    assert_eq!(
        rec.results,
        [
            (ids[1], 15 * MS, ShareVerdict::Rejected(Some(23))),
            (ids[0], 3 * MS, ShareVerdict::Accepted),
            (ids[2], 4 * MS, ShareVerdict::Rejected(None)),
        ]
    );
    assert_eq!(dev.in_flight(), lines.len() - 3);
    assert_eq!(
        ShareVerdict::Rejected(Some(21)).to_event_verdict(),
        events::Verdict::Rejected(events::Reason::Stale)
    );
}

#[test]
fn unanswered_shares_time_out_and_a_silent_handshake_closes() {
    let job = TestJob::new(4, 8, 1);
    let mut cfg = config(Profile::Asic);
    cfg.connection.reply_timeout = Duration::from_secs(5);
    let mut rec = Recorder::default();
    let mut dev = ready_with_job(cfg.clone(), &job, "0.0000001", &mut rec);
    while dev.pending_shares() == 0 {
        dev.hash(at(SEC), 1000, &mut rec);
    }
    let n = sent_lines(&mut dev, at(SEC), &mut rec).len();
    assert_eq!(dev.poll_timeout(), Some(at(6 * SEC)));
    dev.handle_timeout(at(6 * SEC - 1), &mut rec);
    assert!(rec.unanswered.is_empty());
    dev.handle_timeout(at(6 * SEC), &mut rec);
    assert_eq!(rec.unanswered.len(), n);
    assert_eq!(dev.in_flight(), 0);
    assert_eq!(
        dev.close_requested(),
        None,
        "a late verdict is no reason to close"
    );

    // A pool that never answers the handshake.
    let mut dev = device(cfg, 1);
    dev.handle_connected(at(100 * SEC));
    assert!(!sent_lines(&mut dev, at(100 * SEC), &mut rec).is_empty());
    assert_eq!(dev.poll_timeout(), Some(at(130 * SEC)));
    dev.handle_timeout(at(130 * SEC), &mut rec);
    assert_eq!(dev.close_requested(), Some(CloseReason::Timeout));
}

#[test]
fn reconnect_backoff_grows_within_bounds_and_resets_after_a_good_session() {
    let cfg = config(Profile::Asic);
    let b = cfg.connection.backoff;
    let mut rec = Recorder::default();
    let mut dev = device(cfg, 9);
    let mut now = 0;
    assert!(dev.wants_connect(at(now)), "the first attempt is at once");
    // Failures in a row: the delay after the n-th lies in [cap_n / 2, cap_n].
    for n in 0..10 {
        dev.handle_connect_failed(at(now));
        let due = dev.poll_timeout().unwrap().as_nanos();
        let delay = due - now;
        let cap = b.ceiling(n).as_nanos() as u64;
        assert!(
            delay >= cap / 2 && delay <= cap,
            "failure {n}: {delay} vs {cap}"
        );
        assert!(!dev.wants_connect(at(due - 1)));
        assert!(dev.wants_connect(at(due)));
        now = due;
    }
    assert_eq!(b.ceiling(9), Duration::from_secs(30), "capped");
    // A session that got ready starts the backoff over.
    dev.handle_connected(at(now));
    handshake(&mut dev, &mut rec, 0x1fff_e000, &EN1, 4, at(now));
    dev.handle_closed(at(now), CloseReason::Eof, &mut rec);
    let delay = dev.poll_timeout().unwrap().as_nanos() - now;
    assert!(delay <= b.base.as_nanos() as u64 && delay >= b.base.as_nanos() as u64 / 2);
    // client.reconnect: the pool's wait, then at most one base step.
    now = dev.poll_timeout().unwrap().as_nanos();
    dev.handle_connected(at(now));
    handshake(&mut dev, &mut rec, 0x1fff_e000, &EN1, 4, at(now));
    dev.handle_line(
        br#"{"id":null,"method":"client.reconnect","params":["pool.example",3333,10]}"#,
        at(now),
        &mut rec,
    );
    assert_eq!(dev.close_requested(), Some(CloseReason::Reconnect));
    dev.handle_closed(at(now), CloseReason::Reconnect, &mut rec);
    let delay = dev.poll_timeout().unwrap().as_nanos() - now;
    assert!(delay >= 10 * SEC + b.base.as_nanos() as u64 / 2);
    assert!(delay <= 10 * SEC + b.base.as_nanos() as u64);
    // Stopped: no more attempts.
    dev.stop();
    assert_eq!(dev.poll_timeout(), None);
    assert!(!dev.wants_connect(at(u64::MAX)));
}

#[test]
fn a_crowd_that_lost_its_pool_comes_back_spread_out() {
    let cfg = config(Profile::Asic);
    let shared = Sv1Shared::new(cfg).unwrap();
    let mut rec = Recorder::default();
    let mut times: Vec<u64> = (0..1000u32)
        .map(|i| {
            let mut d = Sv1Device::new(Arc::clone(&shared), i as u64, i, 7, at(0));
            d.handle_connected(at(0));
            handshake(&mut d, &mut rec, 0x1fff_e000, &EN1, 4, at(0));
            d.handle_closed(at(SEC), CloseReason::Eof, &mut rec);
            d.poll_timeout().unwrap().as_nanos() - SEC
        })
        .collect();
    times.sort_unstable();
    // Over [250 ms, 500 ms]: no 10 ms window holds more than a few percent of them.
    assert!(times[0] >= 250 * MS && times[999] <= 500 * MS);
    let worst = times.windows(100).map(|w| w[99] - w[0]).min().unwrap();
    assert!(worst > 10 * MS, "100 devices within {worst} ns");
}

#[test]
fn set_extranonce_applies_from_the_next_job() {
    let job = TestJob::new(5, 8, 2);
    let mut rec = Recorder::default();
    let mut dev = ready_with_job(config(Profile::Asic), &job, "0.0000001", &mut rec);
    dev.handle_line(
        br#"{"id":null,"method":"mining.set_extranonce","params":["0102030405",3]}"#,
        at(MS),
        &mut rec,
    );
    assert_eq!(dev.extranonce1(), [1, 2, 3, 4, 5]);
    // Shares on the current job still use the extranonce it came with.
    while dev.pending_shares() == 0 {
        dev.hash(at(MS), 1000, &mut rec);
    }
    let target = dev.target();
    for line in sent_lines(&mut dev, at(MS), &mut rec) {
        assert!(job.check(&line, &EN1, 0x1fff_e000, &target).0);
    }
    let job2 = TestJob::new(6, 8, 2);
    dev.handle_line(&job2.notify(true), at(MS), &mut rec);
    while dev.pending_shares() == 0 {
        dev.hash(at(MS), 1000, &mut rec);
    }
    for line in sent_lines(&mut dev, at(MS), &mut rec) {
        let sub: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            sub["params"][2].as_str().unwrap().len(),
            6,
            "3-byte extranonce2"
        );
        assert!(job2.check(&line, &[1, 2, 3, 4, 5], 0x1fff_e000, &target).0);
    }
}

#[test]
fn bad_lines_are_counted_and_the_device_carries_on() {
    let job = TestJob::new(7, 8, 2);
    let mut rec = Recorder::default();
    let mut dev = ready_with_job(config(Profile::Asic), &job, "0.0000001", &mut rec);
    for bad in [
        &b"not json"[..],
        br#"{"id":null,"method":"mining.notify","params":["j"]}"#,
        br#"{"id":null,"method":"mining.notify","params":["j","zz","00","00",[],"20000000","1d00ffff","65000000",true]}"#,
        br#"{"id":null,"method":"mining.set_extranonce","params":["0g",4]}"#,
    ] {
        dev.handle_line(bad, at(MS), &mut rec);
    }
    assert_eq!(rec.errors.len(), 4, "{:?}", rec.errors);
    assert!(dev.is_connected() && dev.close_requested().is_none());
    // A malformed notify leaves no job to hash; the next good one restores it.
    assert!(!dev.can_hash());
    dev.handle_line(&job.notify(false), at(MS), &mut rec);
    assert!(dev.can_hash());
    // Pings are answered; unknown methods and operator messages are ignored.
    dev.handle_line(
        br#"{"id":77,"method":"mining.ping","params":[]}"#,
        at(MS),
        &mut rec,
    );
    dev.handle_line(
        br#"{"id":null,"method":"client.show_message","params":["hi"]}"#,
        at(MS),
        &mut rec,
    );
    dev.handle_line(
        br#"{"id":78,"method":"mining.frobnicate","params":[]}"#,
        at(MS),
        &mut rec,
    );
    assert_eq!(
        sent_lines(&mut dev, at(MS), &mut rec),
        [r#"{"id":77,"result":"pong","error":null}"#]
    );
    // A subscribe result without an extranonce is fatal to the session.
    let mut dev = device(config(Profile::Cpu), 1);
    dev.handle_connected(at(0));
    sent_lines(&mut dev, at(0), &mut rec);
    dev.handle_line(
        br#"{"id":2,"result":[[],"zz",4],"error":null}"#,
        at(0),
        &mut rec,
    );
    assert_eq!(dev.close_requested(), Some(CloseReason::Protocol));
}

#[test]
fn a_refused_worker_closes_and_backs_off() {
    let mut rec = Recorder::default();
    let mut dev = device(config(Profile::Cpu), 1);
    dev.handle_connected(at(0));
    sent_lines(&mut dev, at(0), &mut rec);
    let mut reply = Vec::new();
    sv1::write::reply_subscribe(&mut reply, "2", "s", &EN1, 4);
    dev.handle_line(reply.trim_ascii_end(), at(0), &mut rec);
    sent_lines(&mut dev, at(0), &mut rec);
    dev.handle_line(
        br#"{"id":3,"result":null,"error":[24,"Unauthorized worker",null]}"#,
        at(0),
        &mut rec,
    );
    assert_eq!(dev.close_requested(), Some(CloseReason::Unauthorized));
    dev.handle_closed(at(0), CloseReason::Unauthorized, &mut rec);
    assert!(dev.poll_timeout().unwrap() >= at(250 * MS));
}

#[test]
fn closing_accounts_for_shares_in_flight_and_found() {
    let job = TestJob::new(8, 8, 2);
    let mut rec = Recorder::default();
    let mut dev = ready_with_job(config(Profile::Asic), &job, "0.0000001", &mut rec);
    while dev.pending_shares() < 2 {
        dev.hash(at(MS), 1000, &mut rec);
    }
    let sent = sent_lines(&mut dev, at(MS), &mut rec).len();
    while dev.pending_shares() == 0 {
        dev.hash(at(MS), 1000, &mut rec);
    }
    let pending = dev.pending_shares();
    dev.handle_closed(at(2 * MS), CloseReason::Eof, &mut rec);
    assert_eq!(rec.unanswered.len(), sent);
    assert_eq!(rec.dropped as usize, pending);
    assert!(!dev.can_hash());
    assert_eq!(dev.hash(at(3 * MS), 1000, &mut rec).hashes, 0);
}

#[test]
fn an_idle_device_is_small() {
    // A device after its handshake and a realistic job (12-level branch), as it idles.
    let job = TestJob::new(9, 8, 12);
    let mut rec = Recorder::default();
    let dev = ready_with_job(config(Profile::Asic), &job, "0.001", &mut rec);
    let size = std::mem::size_of::<Sv1Device>();
    let heap = dev.heap_bytes();
    println!("Sv1Device: {size} bytes inline + {heap} bytes of buffers after one notify");
    assert!(size + heap < 2048, "{size} + {heap}");
}

#[test]
fn version_bits_fill_the_mask_from_its_lowest_bit() {
    assert_eq!(deposit_bits(0, 0x1fff_e000), 0);
    assert_eq!(deposit_bits(1, 0x1fff_e000), 0x2000);
    assert_eq!(deposit_bits(2, 0x1fff_e000), 0x4000);
    assert_eq!(deposit_bits(0xffff, 0x1fff_e000), 0x1fff_e000);
    assert_eq!(
        deposit_bits(0x1_0000, 0x1fff_e000),
        0,
        "beyond the mask wraps to none"
    );
    assert_eq!(deposit_bits(5, 0b1010_0001), 0b1000_0001);
    assert_eq!(extranonce2_bytes(0x0102, 4)[..4], [0, 0, 1, 2]);
    assert_eq!(extranonce2_bytes(0x0102, 1)[..1], [2]);
    assert_eq!(
        extranonce2_bytes(u64::MAX, 10)[..10],
        [0, 0, 255, 255, 255, 255, 255, 255, 255, 255]
    );
    assert_eq!(error_code(Value::Array("[ 21 ,\"x\",null]")), Some(21));
    assert_eq!(
        error_code(Value::Object(r#"{"code":-3,"message":"x"}"#)),
        Some(-3)
    );
    assert_eq!(error_code(Value::Null), None);
    let mut v = Vec::new();
    parse_branch("[]", &mut v).unwrap();
    assert!(v.is_empty());
    assert!(parse_branch("[\"00\"]", &mut v).is_err());
}
