//! The SV1 proxy's upstream ([`Sv1Upstream`]) against our own SV1 pool's session, in memory:
//! every line the proxy writes goes into `pool::sv1::Session::handle_line`, every line the pool
//! writes comes back through the uplink. Nothing here knows the pool's job ids, extranonce or
//! difficulty except from the lines themselves; shares are real SHA-256d at easy targets, and
//! the pool hashes them again itself.

use std::sync::Arc;

use events::{EventSink, Reason, Verdict};
use mining::vardiff::VardiffConfig;
use pool::channel::ChannelConfig;
use pool::engine::{Engine, EngineConfig, PayoutMode};
use pool::jobs::{JobBook as PoolBook, JobConfig};
use pool::stats::{PoolStats, WorkerRegistry};
use pool::sv1::{LineKind, Session, Sv1Config};
use pool::template::{Template, TemplateTx};
use primitives::bitcoin::{consensus, Amount, Network, ScriptBuf, Transaction};
use primitives::{merkle_root_from_branch, sha256d, CompactTarget, Difficulty, Hash256, Target};
use sv1::VERSION_ROLLING_MASK;
use translator::extranonce::{ExtranonceAllocator, Layout};
use translator::jobs::{hex_id, JobBook};
use translator::shares::{DeviceJobs, LocalShare, ShareContext, Submitted, UpstreamVerdict};
use translator::sv1_upstream::Sv1Upstream;
use translator::upstream::{ChannelRequest, UpstreamEvent, Work};
use translator::{Event, LineOutcome, Timestamp, Translator, TranslatorConfig, Uplink};

mod support;

use support::grind;

const T0: Timestamp = Timestamp::from_millis(1_000_000);
const CURTIME: u32 = 1_700_000_000;
/// Difficulty 1: no share of these tests is a block.
const HARD_BITS: CompactTarget = CompactTarget::from_consensus(0x1d00_ffff);
const FARM: &str = "farm.proxy1";

fn diff(log2: i32) -> Difficulty {
    Difficulty::new(2f64.powi(log2)).unwrap()
}

/// The pool's share difficulty: one hash in 256 meets it.
fn pool_difficulty() -> Difficulty {
    diff(-24)
}

/// The devices' difficulty behind the proxy: one hash in 16.
fn device_difficulty() -> Difficulty {
    diff(-28)
}

fn tip(n: u8) -> Hash256 {
    let mut h = sha256d(&[n]).0;
    // Leading zeros as a real block hash has, so that the word swap is not a no-op on them.
    h[28..].fill(0);
    Hash256(h)
}

/// Our SV1 pool without sockets: one engine, one session (the proxy's connection).
struct Pool {
    engine: Arc<Engine>,
    book: PoolBook,
    session: Session,
    /// The last `mining.notify` the pool wrote.
    notify: Option<Vec<u8>>,
}

impl Pool {
    fn new() -> Pool {
        let stats = PoolStats::new(Timestamp::from_millis(0));
        let workers = WorkerRegistry::new(&stats);
        let config = EngineConfig {
            jobs: JobConfig::default(),
            channel: ChannelConfig {
                // Vardiff never retargets within a test: these are about the protocol.
                vardiff: VardiffConfig {
                    min: diff(-30),
                    retarget_interval_ms: 3_600_000,
                    ..VardiffConfig::default()
                },
                ..ChannelConfig::default()
            },
            payout: PayoutMode::Pool(ScriptBuf::from_bytes(
                [&[0x00, 0x14][..], &[0x22; 20]].concat(),
            )),
            network: Network::Regtest,
            start_difficulty: pool_difficulty(),
        };
        let (engine, _found) = Engine::new(config, stats, workers, None, EventSink::disabled());
        let session = Session::new(engine.clone(), Arc::new(Sv1Config::default()), T0);
        let mut pool = Pool {
            engine,
            book: PoolBook::new(JobConfig::default()),
            session,
            notify: None,
        };
        pool.publish(tip(1), T0);
        pool
    }

    /// A template on `prev` with three transactions, handed to the connection.
    fn publish(&mut self, prev: Hash256, now: Timestamp) {
        let transactions: Vec<TemplateTx> = (1..=3u8)
            .map(|i| {
                let data = vec![i; 60];
                TemplateTx {
                    txid: sha256d(&data),
                    data,
                    fee: Amount::from_sat(100 * u64::from(i)),
                    weight: 240,
                }
            })
            .collect();
        let template = Template {
            height: 300,
            prev_hash: prev,
            version: 0x2000_0000,
            bits: HARD_BITS,
            curtime: CURTIME,
            mintime: CURTIME - 600,
            median_time_past: None,
            coinbase_value: Amount::from_sat(5_000_000_600),
            witness_commitment: None,
            transactions: transactions.into(),
            longpoll_id: None,
        };
        let g = self.book.handle_template(Arc::new(template), now);
        self.engine.publish(g.clone());
        self.session.handle_generation(Some(&g), now);
    }

    /// Feeds what the proxy wrote (whole lines); returns the verdicts of the shares in it.
    fn feed(&mut self, bytes: &[u8]) -> Vec<LineKind> {
        assert!(bytes.ends_with(b"\n"), "unterminated: {bytes:?}");
        bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| self.session.handle_line(l, T0))
            .filter(|k| matches!(k, LineKind::Share(_)))
            .collect()
    }

    /// What the pool wrote since last asked, line by line.
    fn lines(&mut self) -> Vec<Vec<u8>> {
        let out = self.session.take_output();
        let lines: Vec<Vec<u8>> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        for l in &lines {
            if let Ok((_, Some(sv1::Method::Notify))) = sv1::parse_line(l) {
                self.notify = Some(l.clone());
            }
        }
        lines
    }

    fn last_notify(&self) -> sv1::Notify<'_> {
        let (env, _) = sv1::parse_line(self.notify.as_ref().expect("a job")).unwrap();
        sv1::Notify::parse(&env).unwrap()
    }
}

fn json(line: &[u8]) -> serde_json::Value {
    serde_json::from_slice(line)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(line)))
}

fn meets(d: Difficulty) -> impl Fn(&Hash256) -> bool {
    let t = d.to_target();
    move |h| t.is_met_by(&h.0)
}

// ---------------------------------------------------------------------------------------------
// The whole proxy core (devices, jobs, local checks, forwarding) over the SV1 uplink.
// ---------------------------------------------------------------------------------------------

fn proxy_config() -> TranslatorConfig {
    TranslatorConfig {
        user_identity: FARM.into(),
        ..support::pinned(device_difficulty())
    }
}

/// Carries lines both ways until neither side has anything to say.
fn pump(t: &mut Translator<Sv1Upstream>, pool: &mut Pool) -> Vec<LineKind> {
    let mut verdicts = Vec::new();
    loop {
        let mut quiet = true;
        while let Some(out) = t.poll_transmit() {
            verdicts.extend(pool.feed(&out));
            quiet = false;
        }
        for line in pool.lines() {
            t.upstream_message(line, T0);
            quiet = false;
        }
        if quiet {
            return verdicts;
        }
    }
}

fn drain_events(t: &mut Translator<Sv1Upstream>) -> Vec<Event> {
    std::iter::from_fn(|| t.poll_event()).collect()
}

#[test]
fn a_device_mines_through_the_proxy_onto_our_pool() {
    let mut pool = Pool::new();
    let mut t = Translator::with_uplink(proxy_config(), Sv1Upstream::new(), T0);
    t.open_channel(T0);
    assert!(pump(&mut t, &mut pool).is_empty());

    // The opening negotiated: subscribed, authorized, version rolling at the pool's mask.
    let pool_en1 = pool.session.channel().extranonce_prefix().to_vec();
    let ev = drain_events(&mut t);
    let Some(Event::ChannelOpened {
        extranonce_prefix,
        layout,
        target,
        ..
    }) = ev.first()
    else {
        panic!("the channel did not open: {ev:?}")
    };
    assert_eq!(extranonce_prefix, &pool_en1);
    assert_eq!(
        layout,
        &Layout {
            device_bytes: 2,
            extranonce2_size: 2
        },
        "the pool's 4 bytes of extranonce2, split"
    );
    // SV1's difficulty before any `mining.set_difficulty` is 1; the pool's comes right after.
    assert_eq!(*target, Difficulty::ONE.to_target());
    assert!(
        ev.contains(&Event::TargetChanged(pool_difficulty().to_target())),
        "{ev:?}"
    );
    assert_eq!(t.upstream().target(), pool_difficulty().to_target());
    assert_eq!(t.upstream().version_mask(), VERSION_ROLLING_MASK);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::JobSent { clean: true, .. })),
        "the pool's first job became work: {ev:?}"
    );

    // A device behind the proxy: configure (version rolling), subscribe, authorize.
    let dev = t.device_connected(T0);
    let mut out = Vec::new();
    for line in [
        r#"{"id":1,"method":"mining.configure","params":[["version-rolling"],{"version-rolling.mask":"ffffffff","version-rolling.min-bit-count":2}]}"#,
        r#"{"id":2,"method":"mining.subscribe","params":["rig/1.0"]}"#,
        r#"{"id":3,"method":"mining.authorize","params":["rig1","x"]}"#,
    ] {
        t.device_line(dev, line.as_bytes(), T0).unwrap();
        out.extend(t.device_mut(dev).unwrap().take_output());
    }
    let mut dev_en1 = Vec::new();
    let mut dev_notify = None;
    let mut dev_mask = 0;
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v = json(line);
        if v["id"] == 1 {
            dev_mask =
                u32::from_str_radix(v["result"]["version-rolling.mask"].as_str().unwrap(), 16)
                    .unwrap();
        }
        if v["id"] == 2 {
            dev_en1 = primitives::hex::decode(v["result"][1].as_str().unwrap()).unwrap();
            assert_eq!(v["result"][2], 2, "extranonce2_size");
        }
        if v["method"] == "mining.notify" {
            dev_notify = Some(line.to_vec());
        }
    }
    assert_eq!(dev_mask, VERSION_ROLLING_MASK);
    assert_eq!(
        &dev_en1[..4],
        &pool_en1[..],
        "the pool's extranonce1, then the device's bytes"
    );
    let (env, _) = sv1::parse_line(dev_notify.as_ref().expect("the device got a job")).unwrap();
    let dn = sv1::Notify::parse(&env).unwrap();

    // The device's coinbase is the pool's, byte for byte, with the device's extranonce where the
    // pool's extranonce2 goes; so it hashes into the merkle root the pool will rebuild.
    let en2 = [0x5a, 0xa5];
    let pn = pool.last_notify();
    let device_cb = [&dn.coinb1[..], &dev_en1, &en2, &dn.coinb2].concat();
    let pool_cb = [&pn.coinb1[..], &pool_en1, &dev_en1[4..], &en2, &pn.coinb2].concat();
    assert_eq!(device_cb, pool_cb);
    let tx: Transaction = consensus::deserialize(&device_cb).expect("a whole coinbase");
    assert!(tx.is_coinbase());
    assert_eq!(
        merkle_root_from_branch(sha256d(&device_cb), &dn.merkle_branch),
        merkle_root_from_branch(sha256d(&pool_cb), &pn.merkle_branch)
    );
    assert_eq!(
        (dn.prev_hash, dn.nbits, dn.ntime, dn.version),
        (pn.prev_hash, pn.nbits, pn.ntime, pn.version),
        "the prev hash un-swapped and re-swapped, the header fields carried"
    );

    // A share meeting the pool's difficulty, with rolled version bits, goes upstream and the
    // pool accepts it.
    let bits = 0x0000_6000;
    let (nonce, hash) = grind(
        &dn,
        &dev_en1,
        &en2,
        Some((bits, dev_mask)),
        0,
        meets(pool_difficulty()),
    );
    let mut submit = Vec::new();
    sv1::write::submit(
        &mut submit,
        9,
        "rig1",
        dn.job_id,
        &en2,
        dn.ntime,
        nonce,
        Some(bits),
    );
    let Some(LineOutcome::Accepted(share)) = t.device_line(dev, &submit, T0) else {
        panic!("the proxy refused a good share")
    };
    assert_eq!(share.hash, hash);
    let up = t.poll_transmit().expect("forwarded");
    let v = json(&up);
    assert_eq!(v["method"], "mining.submit");
    assert_eq!(v["params"][0], FARM, "the proxy's worker name at the pool");
    assert_eq!(v["params"][1], pn.job_id, "the pool's own job id");
    assert_eq!(
        v["params"][2],
        primitives::hex::encode(&[&dev_en1[4..], &en2[..]].concat()),
        "the device's bytes and its extranonce2 are the pool's extranonce2"
    );
    assert_eq!(v["params"][5], format!("{bits:08x}"));
    assert_eq!(pool.feed(&up), [LineKind::Share(Verdict::Accepted)]);
    assert!(pump(&mut t, &mut pool).is_empty());
    let ev = drain_events(&mut t);
    let results: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            Event::UpstreamResult(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "{ev:?}");
    assert_eq!(results[0].verdict, UpstreamVerdict::Accepted);
    assert_eq!(results[0].nonce, nonce);

    // A share meeting only the device's difficulty stays at the proxy.
    let (nonce, _) = grind(&dn, &dev_en1, &en2, None, nonce + 1, |h| {
        meets(device_difficulty())(h) && !meets(pool_difficulty())(h)
    });
    let mut submit = Vec::new();
    sv1::write::submit(
        &mut submit,
        10,
        "rig1",
        dn.job_id,
        &en2,
        dn.ntime,
        nonce,
        None,
    );
    assert!(matches!(
        t.device_line(dev, &submit, T0),
        Some(LineOutcome::Accepted(_))
    ));
    assert!(
        t.poll_transmit().is_none(),
        "below the pool's difficulty: not forwarded"
    );
}

// ---------------------------------------------------------------------------------------------
// The uplink alone, its shares made with the proxy's pieces, so that the pool's rejections can
// be provoked on purpose.
// ---------------------------------------------------------------------------------------------

/// The uplink and the pool after the opening, and the work the pool's first job became.
fn opened() -> (Sv1Upstream, Pool, Work) {
    let mut pool = Pool::new();
    let mut up = Sv1Upstream::new();
    let mut out = Vec::new();
    up.open(
        &ChannelRequest {
            user_identity: FARM.into(),
            nominal_hash_rate: 0.0,
            max_target: Target::MAX,
            min_extranonce_size: 4,
        },
        &mut out,
    );
    for o in out {
        pool.feed(&o);
    }
    let mut work = None;
    let mut opened = false;
    for line in pool.lines() {
        match up.handle_message(line).unwrap() {
            UpstreamEvent::Opened => opened = true,
            UpstreamEvent::Work(w) => work = Some(w),
            _ => {}
        }
    }
    assert!(opened && up.is_open());
    assert_eq!(up.target(), pool_difficulty().to_target());
    (up, pool, work.expect("the pool's first job"))
}

/// One device's side of the proxy: its jobs and its extranonce bytes.
struct Device {
    book: JobBook,
    jobs: DeviceJobs,
    cx: ShareContext,
    extranonce1: Vec<u8>,
}

impl Device {
    fn new(up: &Sv1Upstream) -> Device {
        let layout = Layout::new(up.extranonce_size(), 2, 2).unwrap();
        let extranonce = ExtranonceAllocator::new(layout).allocate().unwrap();
        let mut extranonce1 = up.extranonce_prefix().to_vec();
        extranonce.write(&mut extranonce1);
        Device {
            book: JobBook::new(),
            jobs: DeviceJobs::new(8),
            cx: ShareContext {
                extranonce,
                extranonce2_size: layout.extranonce2_size,
                version_mask: 0,
                epoch: 0,
                max_ntime_ahead: 7_000,
                now: T0,
            },
            extranonce1,
        }
    }

    /// The job `work` becomes for devices; returns its SV1 id.
    fn job(&mut self, work: &Work) -> String {
        let job = self.book.translate(work);
        self.cx.epoch = self.book.epoch();
        let id = job.id;
        self.jobs.issue(id, job, device_difficulty(), T0);
        hex_id(id, &mut [0; 16]).to_owned()
    }

    /// A share the device found on its latest job, judged by the proxy.
    fn share(&mut self, want: impl Fn(&Hash256) -> bool) -> LocalShare {
        let (wire_id, job) = self.jobs.latest().expect("a job");
        let mut buf = [0; 16];
        let id = hex_id(wire_id, &mut buf).to_owned();
        let (env, _) = sv1::parse_line(&job.notify).unwrap();
        let n = sv1::Notify::parse(&env).unwrap();
        let en2 = [7, 7];
        let (nonce, _) = grind(&n, &self.extranonce1, &en2, None, 0, want);
        let s = Submitted {
            job_id: &id,
            extranonce2: &en2,
            ntime: n.ntime,
            nonce,
            version_bits: None,
        };
        let ntime = n.ntime;
        self.jobs
            .judge(&s, &self.cx)
            .unwrap_or_else(|r| panic!("the proxy refused its own share ({r:?}) at ntime {ntime}"))
    }
}

/// Submits `share` under `seq`; returns the pool's verdict and what the uplink made of the
/// reply.
fn submit(
    up: &mut Sv1Upstream,
    pool: &mut Pool,
    seq: u32,
    share: &LocalShare,
) -> (Verdict, UpstreamEvent) {
    let line = up.submit(seq, share, None);
    let [LineKind::Share(verdict)] = pool.feed(&line)[..] else {
        panic!("not a share: {}", String::from_utf8_lossy(&line))
    };
    let replies = pool.lines();
    assert_eq!(replies.len(), 1);
    let ev = up
        .handle_message(replies.into_iter().next().unwrap())
        .unwrap();
    (verdict, ev)
}

fn rejected(seq: u32, code: &str) -> UpstreamEvent {
    UpstreamEvent::ShareRejected {
        sequence_number: seq,
        error_code: code.into(),
    }
}

#[test]
fn the_pools_verdicts_come_back_under_their_sequence_numbers() {
    let (mut up, mut pool, work) = opened();
    let mut dev = Device::new(&up);
    dev.job(&work);

    let good = dev.share(meets(pool_difficulty()));
    assert_eq!(
        submit(&mut up, &mut pool, 41, &good),
        (
            Verdict::Accepted,
            UpstreamEvent::SharesAccepted {
                last_sequence_number: 41,
                count: 1,
                shares_sum: 0
            }
        )
    );
    // The same share again (as after a proxy restart replaying its window): 22.
    assert_eq!(
        submit(&mut up, &mut pool, 42, &good),
        (
            Verdict::Rejected(Reason::Duplicate),
            rejected(42, "duplicate-share")
        )
    );
    // Meeting the device's difficulty but not the pool's: 23.
    let weak = dev.share(|h| meets(device_difficulty())(h) && !meets(pool_difficulty())(h));
    assert_eq!(
        submit(&mut up, &mut pool, 43, &weak),
        (
            Verdict::Rejected(Reason::LowDifficulty),
            rejected(43, "difficulty-too-low")
        )
    );

    // A new block: the pool's clean job is a new epoch, and the old job's shares are stale (21).
    let late = dev.share(|h| meets(pool_difficulty())(h) && *h != good.hash);
    pool.publish(tip(2), T0);
    let lines = pool.lines();
    let mut works = lines
        .into_iter()
        .filter_map(|l| match up.handle_message(l).unwrap() {
            UpstreamEvent::Work(w) => Some(w),
            _ => None,
        });
    let next = works.next().expect("the new block's job");
    assert!(next.clean);
    assert!(next.prev.epoch > work.prev.epoch);
    assert_eq!(
        next.prev.prev_hash,
        tip(2),
        "the prev hash in internal byte order"
    );
    let (verdict, ev) = submit(&mut up, &mut pool, 44, &late);
    assert_eq!(verdict, Verdict::Rejected(Reason::Stale));
    assert_eq!(ev, rejected(44, "stale-share"));

    // And mining goes on on the new job.
    dev.job(&next);
    let fresh = dev.share(meets(pool_difficulty()));
    assert_eq!(submit(&mut up, &mut pool, 45, &fresh).0, Verdict::Accepted);
}
