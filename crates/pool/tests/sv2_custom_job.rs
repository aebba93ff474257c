//! Declared jobs on the SV2 front end, sans-IO: a farm's Job Declarator Client puts its own job
//! on its extended channel with `SetCustomMiningJob` under a token from the Job Declarator
//! Server, and mines it; the pool checks the token and the job, judges the shares and keeps the
//! blocks (which the farm propagates).
//!
//! The farm side is written with rust-bitcoin alone: it builds the coinbase transaction, its
//! txid, the merkle root and the header from the message it sent, so every accepted share also
//! checks the pool's own coinbase and hashing.

#[allow(dead_code)]
mod support;
mod sv2_support;

use std::sync::Arc;

use pool::jd_token::{OutputsDigest, TokenClaims, TokenKey, TokenKind};
use pool::sv2::{Session, Sv2Config};
use primitives::bitcoin::absolute::LockTime;
use primitives::bitcoin::block::{Header as BlockHeader, Version as BlockVersion};
use primitives::bitcoin::hashes::{sha256d, Hash as _};
use primitives::bitcoin::transaction::Version;
use primitives::bitcoin::{
    consensus, Amount, BlockHash, CompactTarget as Bits, OutPoint, ScriptBuf, Sequence,
    Transaction, TxIn, TxMerkleNode, TxOut, Witness,
};
use primitives::{CompactTarget, Hash256, Target};
use support::*;
use sv2::messages::common::mining_flags;
use sv2::messages::mining::{OpenStandardMiningChannel, SetCustomMiningJob, SubmitSharesExtended};
use sv2::messages::{Common, Mining};
use sv2::Message;

/// The wall clock of every test, in Unix milliseconds.
const NOW_MS: u64 = 1_750_000_000_000;
const KEY: [u8; 32] = [0x4a; 32];

fn key() -> TokenKey {
    TokenKey::from_bytes(KEY)
}

fn config(with_key: bool) -> Arc<Sv2Config> {
    Arc::new(Sv2Config {
        jd_token_key: with_key.then(|| Arc::new(key())),
        ..Sv2Config::default()
    })
}

/// The farm's coinbase outputs: the pool's payout and a witness commitment.
fn farm_outputs(pool_sat: u64) -> Vec<TxOut> {
    let mut commitment = vec![0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed];
    commitment.extend_from_slice(&[0x5c; 32]);
    vec![
        TxOut {
            value: Amount::from_sat(pool_sat),
            script_pubkey: pool_script(),
        },
        TxOut {
            value: Amount::ZERO,
            script_pubkey: ScriptBuf::from_bytes(commitment),
        },
    ]
}

/// A fresh token (each buys one job).
fn token(kind: TokenKind, outputs: &[TxOut], expires_ms: u64, key: &TokenKey) -> Vec<u8> {
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(77);
    key.issue(&TokenClaims {
        kind,
        id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        expires_ms,
        outputs: OutputsDigest::of(outputs),
    })
}

fn declared(outputs: &[TxOut]) -> Vec<u8> {
    token(TokenKind::Declared, outputs, NOW_MS + 60_000, &key())
}

/// A job the farm built on `prev` with its own transactions (two merkle path hashes).
fn custom_job(
    channel_id: u32,
    request_id: u32,
    token: Vec<u8>,
    prev: Hash256,
    bits: CompactTarget,
    outputs: &[TxOut],
) -> SetCustomMiningJob {
    SetCustomMiningJob {
        channel_id,
        request_id,
        token,
        version: 0x2000_0000,
        prev_hash: prev.0,
        min_ntime: CURTIME,
        nbits: bits.to_consensus(),
        coinbase_tx_version: 2,
        // BIP34: the height (300) as a two-byte push, then the farm's tag.
        coinbase_prefix: vec![0x02, 0x2c, 0x01, 0x04, b'f', b'a', b'r', b'm'],
        coinbase_tx_input_n_sequence: 0xffff_fffe,
        coinbase_tx_outputs: consensus::serialize(&outputs.to_vec()),
        coinbase_tx_locktime: 0,
        merkle_path: vec![[0x71; 32], [0x72; 32]],
    }
}

/// The farm's coinbase for `m`: scriptSig = coinbase_prefix, then the whole extranonce.
fn farm_coinbase(m: &SetCustomMiningJob, extranonce: &[u8]) -> Transaction {
    let script_sig = [&m.coinbase_prefix[..], extranonce].concat();
    let outputs: Vec<TxOut> = consensus::deserialize(&m.coinbase_tx_outputs).unwrap();
    Transaction {
        version: Version(m.coinbase_tx_version as i32),
        lock_time: LockTime::from_consensus(m.coinbase_tx_locktime),
        input: vec![TxIn {
            previous_output: OutPoint::null(),
            script_sig: ScriptBuf::from_bytes(script_sig),
            sequence: Sequence(m.coinbase_tx_input_n_sequence),
            witness: Witness::new(),
        }],
        output: outputs,
    }
}

/// The header the farm's miners hash for `m`: the coinbase's txid up the merkle path.
fn farm_header(m: &SetCustomMiningJob, extranonce: &[u8], nonce: u32) -> BlockHeader {
    let mut root = farm_coinbase(m, extranonce).compute_txid().to_byte_array();
    for step in &m.merkle_path {
        root = sha256d::Hash::hash(&[root, *step].concat()).to_byte_array();
    }
    BlockHeader {
        version: BlockVersion::from_consensus(m.version as i32),
        prev_blockhash: BlockHash::from_byte_array(m.prev_hash),
        merkle_root: TxMerkleNode::from_byte_array(root),
        time: m.min_ntime,
        bits: Bits::from_consensus(m.nbits),
        nonce,
    }
}

/// A farm's JDC connection with one extended channel, as the JDC knows it.
struct Jdc {
    s: Session,
    channel_id: u32,
    prefix: Vec<u8>,
    extranonce_size: usize,
    target: Target,
    seq: u32,
    nonce: u32,
}

impl Jdc {
    fn connect(lab: &Lab) -> Jdc {
        let mut s = Session::new(lab.engine.clone(), config(true));
        s.handle_message(
            setup_connection(0, mining_flags::REQUIRES_WORK_SELECTION),
            T0,
        );
        let out = transmits(&mut s);
        assert!(
            matches!(
                &out[..],
                [Message::Common(Common::SetupConnectionSuccess(_))]
            ),
            "{out:?}"
        );
        s.handle_message(open_extended("farm"), T0);
        let out = transmits(&mut s);
        let Some(Message::Mining(Mining::OpenExtendedMiningChannelSuccess(ok))) = out.first()
        else {
            panic!("{out:?}");
        };
        Jdc {
            channel_id: ok.channel_id,
            prefix: ok.extranonce_prefix.clone(),
            extranonce_size: usize::from(ok.extranonce_size),
            target: ok.target,
            s,
            seq: 0,
            nonce: 0,
        }
    }

    /// A job on `prev` under a fresh declared token for the farm's usual outputs.
    fn job(&self, request_id: u32, prev: Hash256, bits: CompactTarget) -> SetCustomMiningJob {
        let outputs = farm_outputs(5_000_000_000);
        custom_job(
            self.channel_id,
            request_id,
            declared(&outputs),
            prev,
            bits,
            &outputs,
        )
    }

    /// Sends `m`; the pool's answer.
    fn declare(&mut self, m: SetCustomMiningJob) -> Message {
        self.declare_at(m, NOW_MS)
    }

    fn declare_at(&mut self, m: SetCustomMiningJob, unix_ms: u64) -> Message {
        self.s.handle_message_at(m.into(), T0, unix_ms);
        let mut out = transmits(&mut self.s);
        assert_eq!(out.len(), 1, "{out:?}");
        out.pop().unwrap()
    }

    /// Declares `m` and expects it accepted: the job as the farm mines it.
    fn accepted(&mut self, m: SetCustomMiningJob) -> Mined {
        let request_id = m.request_id;
        match self.declare(m.clone()) {
            Message::Mining(Mining::SetCustomMiningJobSuccess(ok)) => {
                assert_eq!(
                    (ok.channel_id, ok.request_id),
                    (self.channel_id, request_id)
                );
                Mined {
                    job_id: ok.job_id,
                    m,
                }
            }
            other => panic!("{other:?}"),
        }
    }

    fn refused(&mut self, m: SetCustomMiningJob) -> String {
        self.refused_at(m, NOW_MS)
    }

    fn refused_at(&mut self, m: SetCustomMiningJob, unix_ms: u64) -> String {
        let (channel_id, request_id) = (m.channel_id, m.request_id);
        match self.declare_at(m, unix_ms) {
            Message::Mining(Mining::SetCustomMiningJobError(e)) => {
                assert_eq!((e.channel_id, e.request_id), (channel_id, request_id));
                e.error_code
            }
            other => panic!("{other:?}"),
        }
    }

    fn extranonce(&self) -> Vec<u8> {
        vec![0xe1; self.extranonce_size]
    }

    fn coinbase(&self, job: &Mined) -> Transaction {
        farm_coinbase(&job.m, &[&self.prefix[..], &self.extranonce()].concat())
    }

    fn header(&self, job: &Mined, nonce: u32) -> BlockHeader {
        farm_header(
            &job.m,
            &[&self.prefix[..], &self.extranonce()].concat(),
            nonce,
        )
    }

    /// The next nonce whose header hash `want`s.
    fn grind(&mut self, job: &Mined, want: impl Fn(&[u8; 32]) -> bool) -> u32 {
        loop {
            let n = self.nonce;
            self.nonce += 1;
            if want(&self.header(job, n).block_hash().to_byte_array()) {
                return n;
            }
        }
    }

    fn good(&mut self, job: &Mined) -> u32 {
        let t = self.target;
        self.grind(job, |h| t.is_met_by(h))
    }

    /// Submits a share on `job`; the pool's answer (after a flush).
    fn submit(&mut self, job: &Mined, nonce: u32) -> Message {
        self.seq += 1;
        self.s.handle_message(
            SubmitSharesExtended {
                channel_id: self.channel_id,
                sequence_number: self.seq,
                job_id: job.job_id,
                nonce,
                ntime: job.m.min_ntime,
                version: job.m.version,
                extranonce: self.extranonce(),
                user_identity: None,
            }
            .into(),
            T0,
        );
        self.s.flush();
        let mut out = transmits(&mut self.s);
        assert_eq!(out.len(), 1, "{out:?}");
        out.pop().unwrap()
    }

    fn verdict(&mut self, job: &Mined, nonce: u32) -> &'static str {
        match self.submit(job, nonce) {
            Message::Mining(Mining::SubmitSharesSuccess(_)) => "accepted",
            Message::Mining(Mining::SubmitSharesError(e)) => match e.error_code.as_str() {
                "stale-share" => "stale-share",
                "duplicate-share" => "duplicate-share",
                "difficulty-too-low" => "difficulty-too-low",
                other => panic!("{other}"),
            },
            other => panic!("{other:?}"),
        }
    }

    /// A fresh good share on `job`: its verdict.
    fn mine(&mut self, job: &Mined) -> &'static str {
        let n = self.good(job);
        self.verdict(job, n)
    }

    /// New work from the pool reaches the connection (its own jobs, which the JDC ignores).
    fn pool_work(&mut self, lab: &Lab) {
        self.s.handle_generation(lab.engine.current().as_ref(), T0);
        transmits(&mut self.s);
    }
}

/// A declared job the pool accepted.
struct Mined {
    job_id: u32,
    m: SetCustomMiningJob,
}

#[test]
fn without_a_key_the_pool_refuses_work_selection() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut s = Session::new(lab.engine.clone(), config(false));
    s.handle_message(
        setup_connection(0, mining_flags::REQUIRES_WORK_SELECTION),
        T0,
    );
    let out = transmits(&mut s);
    assert!(
        matches!(&out[..], [Message::Common(Common::SetupConnectionError(e))]
        if e.error_code == "unsupported-feature-flags" && e.flags == mining_flags::REQUIRES_WORK_SELECTION),
        "{out:?}"
    );
    assert!(s.wants_close().is_some());

    // A connection that did not ask for it may not declare jobs, key or no key.
    for with_key in [false, true] {
        let mut s = Session::new(lab.engine.clone(), config(with_key));
        s.handle_message(setup_connection(0, 0), T0);
        s.handle_message(open_extended("farm"), T0);
        let out = transmits(&mut s);
        let Some(Message::Mining(Mining::OpenExtendedMiningChannelSuccess(ok))) = out.get(1) else {
            panic!("{out:?}");
        };
        let outputs = farm_outputs(5_000_000_000);
        let m = custom_job(
            ok.channel_id,
            9,
            declared(&outputs),
            tip(1),
            HARD_BITS,
            &outputs,
        );
        s.handle_message_at(m.into(), T0, NOW_MS);
        let out = transmits(&mut s);
        assert!(
            matches!(&out[..], [Message::Mining(Mining::SetCustomMiningJobError(e))]
            if e.error_code == "jd-not-supported" && e.request_id == 9),
            "key {with_key}: {out:?}"
        );
    }
}

#[test]
fn declared_jobs_are_refused_for_bad_tokens_outputs_channels_and_fields() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut jdc = Jdc::connect(&lab);
    let ch = jdc.channel_id;
    let outputs = farm_outputs(5_000_000_000);
    let job = |token: Vec<u8>| custom_job(ch, 3, token, tip(1), HARD_BITS, &outputs);

    let allocated = token(TokenKind::Allocated, &outputs, NOW_MS + 60_000, &key());
    let forged = token(
        TokenKind::Declared,
        &outputs,
        NOW_MS + 60_000,
        &TokenKey::from_bytes([0x4b; 32]),
    );
    let expired = token(TokenKind::Declared, &outputs, NOW_MS - 1, &key());
    for bad in [allocated, forged, expired, vec![2; 12]] {
        assert_eq!(jdc.refused(job(bad)), "invalid-mining-job-token");
    }
    // Valid until its expiry, refused a moment later.
    let expiring = token(TokenKind::Declared, &outputs, NOW_MS + 10, &key());
    assert_eq!(
        jdc.refused_at(job(expiring), NOW_MS + 11),
        "invalid-mining-job-token"
    );

    // Outputs other than the declared ones: richer for the farm, or in another order.
    let mut richer = outputs.clone();
    richer[0].value = Amount::from_sat(4_000_000_000);
    let mut m = job(declared(&outputs));
    m.coinbase_tx_outputs = consensus::serialize(&richer);
    assert_eq!(
        jdc.refused(m.clone()),
        "invalid-job-param-value-coinbase_tx_outputs"
    );
    let reordered: Vec<TxOut> = outputs.iter().rev().cloned().collect();
    m.coinbase_tx_outputs = consensus::serialize(&reordered);
    assert_eq!(
        jdc.refused(m.clone()),
        "invalid-job-param-value-coinbase_tx_outputs"
    );
    // The outputs without their CompactSize count.
    let raw = consensus::serialize(&outputs);
    m.coinbase_tx_outputs = raw[1..].to_vec();
    assert_eq!(
        jdc.refused(m),
        "invalid-job-param-value-coinbase_tx_outputs"
    );

    // No such channel; a standard channel.
    let mut m = job(declared(&outputs));
    m.channel_id = 999;
    assert_eq!(jdc.refused(m), "invalid-channel-id");
    jdc.s.handle_message(
        OpenStandardMiningChannel {
            request_id: 4,
            user_identity: "farm.rig".into(),
            nominal_hash_rate: 0.0,
            max_target: Target::from_le_bytes(&[0xff; 32]),
        }
        .into(),
        T0,
    );
    let out = transmits(&mut jdc.s);
    let Some(Message::Mining(Mining::OpenStandardMiningChannelSuccess(std))) = out.first() else {
        panic!("{out:?}");
    };
    let mut m = job(declared(&outputs));
    m.channel_id = std.channel_id;
    assert_eq!(jdc.refused(m), "invalid-channel-id");

    // Header fields: not a BIP9 version, no target, another nBits than the pool's tip needs,
    // a time before the tip's median time past, a deeper merkle path than any block's.
    type Change<'a> = &'a dyn Fn(&mut SetCustomMiningJob);
    let field = |f: Change| {
        let mut m = job(declared(&outputs));
        f(&mut m);
        m
    };
    let cases: [(Change, &str); 6] = [
        (&|m| m.version = 1, "version"),
        (&|m| m.nbits = 0, "nbits"),
        (&|m| m.nbits = EASY_BITS.to_consensus(), "nbits"),
        (&|m| m.min_ntime = MINTIME - 1, "min_ntime"),
        (&|m| m.merkle_path = vec![[1; 32]; 16], "merkle_path"),
        (
            &|m| m.coinbase_prefix = vec![0x04, b'f', b'a', b'r', b'm'],
            "coinbase_prefix",
        ),
    ];
    for (f, name) in cases {
        assert_eq!(
            jdc.refused(field(f)),
            format!("invalid-job-param-value-{name}")
        );
    }
    // And the job as declared is fine.
    jdc.accepted(job(declared(&outputs)));
}

/// A provider's `header_timestamp` is where mining starts, not the earliest valid time: a pool
/// whose template came from a provider (which does not say the median time past) takes a job
/// declared with an earlier time, as a farm's JDC declares one on its own, older template of
/// the same tip (a restarted pool's provider connection sees the tip with a later timestamp).
#[test]
fn a_declared_time_before_the_providers_timestamp_is_not_refused() {
    let mut lab = Lab::new(LabConfig::pool());
    let mut from_provider = template(tip(1), HARD_BITS);
    from_provider.curtime = CURTIME + 600;
    from_provider.mintime = CURTIME + 600;
    from_provider.median_time_past = None;
    lab.publish(from_provider, T0);
    let mut jdc = Jdc::connect(&lab);
    let m = jdc.job(1, tip(1), HARD_BITS);
    assert!(m.min_ntime < CURTIME + 600);
    jdc.accepted(m);

    // From a node, which says it, a time not after the median time past is refused.
    let mut lab = Lab::new(LabConfig::pool());
    let from_node = template(tip(1), HARD_BITS);
    let mtp = from_node.median_time_past.unwrap();
    lab.publish(from_node, T0);
    let mut jdc = Jdc::connect(&lab);
    let mut m = jdc.job(1, tip(1), HARD_BITS);
    m.min_ntime = mtp;
    assert_eq!(jdc.refused(m), "invalid-job-param-value-min_ntime");
}

#[test]
fn shares_on_a_declared_job_are_judged_like_any_other() {
    let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut jdc = Jdc::connect(&lab);
    let job = jdc.accepted(jdc.job(1, tip(1), HARD_BITS));
    // The pool's coinbase is the farm's, byte for byte in the txid.
    let issued = jdc
        .s
        .channel(jdc.channel_id)
        .unwrap()
        .jobs()
        .find(|j| j.wire_id == u64::from(job.job_id))
        .unwrap()
        .job
        .clone();
    assert!(issued.is_declared());
    let full = [&jdc.prefix[..], &jdc.extranonce()].concat();
    assert_eq!(
        issued.coinbase.txid(&full).unwrap().0,
        jdc.coinbase(&job).compute_txid().to_byte_array()
    );

    let n = jdc.good(&job);
    assert_eq!(jdc.verdict(&job, n), "accepted");
    assert_eq!(jdc.verdict(&job, n), "duplicate-share");
    let t = jdc.target;
    let low = jdc.grind(&job, |h| !t.is_met_by(h));
    assert_eq!(jdc.verdict(&job, low), "difficulty-too-low");
    // A version rolled outside the mask.
    jdc.seq += 1;
    jdc.s.handle_message(
        SubmitSharesExtended {
            channel_id: jdc.channel_id,
            sequence_number: jdc.seq,
            job_id: job.job_id,
            nonce: n,
            ntime: job.m.min_ntime,
            version: job.m.version | 1,
            extranonce: jdc.extranonce(),
            user_identity: None,
        }
        .into(),
        T0,
    );
    assert!(matches!(
        &transmits(&mut jdc.s)[..],
        [Message::Mining(Mining::SubmitSharesError(e))] if e.error_code == "version-rolling-not-allowed"
    ));
    let snap = lab.engine.stats.snapshot(T0);
    assert_eq!(snap.accepted, 1);
    // Far below the network target: no block.
    assert!(lab.next_block().is_none());
    assert_eq!(snap.blocks.submitted, 0);
}

#[test]
fn a_job_on_a_block_the_pool_has_not_seen_is_not_stale_until_the_pool_moves_past_it() {
    let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut jdc = Jdc::connect(&lab);
    // The farm's node already has block 9, the pool's is still on 1.
    let job = jdc.accepted(jdc.job(1, tip(9), HARD_BITS));
    assert_eq!(jdc.mine(&job), "accepted");
    // The pool's node catches up: still the block the pool works on.
    lab.publish(template(tip(9), HARD_BITS), T0);
    jdc.pool_work(&lab);
    assert_eq!(jdc.mine(&job), "accepted");
    // And moves past it.
    lab.publish(template(tip(10), HARD_BITS), T0);
    jdc.pool_work(&lab);
    assert_eq!(jdc.mine(&job), "stale-share");
}

#[test]
fn a_declared_job_on_another_block_makes_the_earlier_ones_stale() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut jdc = Jdc::connect(&lab);
    let declare = |jdc: &mut Jdc, request_id, prev, path: Vec<[u8; 32]>| {
        let mut m = jdc.job(request_id, prev, HARD_BITS);
        m.merkle_path = path;
        jdc.accepted(m)
    };
    let a = declare(&mut jdc, 1, tip(1), vec![[0x71; 32], [0x72; 32]]);
    // Another job on the same block (other transactions) leaves the first one valid.
    let b = declare(&mut jdc, 2, tip(1), vec![[0x73; 32]]);
    assert_eq!(jdc.mine(&a), "accepted");
    assert_eq!(jdc.mine(&b), "accepted");
    // The farm's node moves to block 9: both are stale, the new job is not.
    let c = declare(&mut jdc, 3, tip(9), vec![[0x74; 32]]);
    assert_eq!(jdc.mine(&a), "stale-share");
    assert_eq!(jdc.mine(&b), "stale-share");
    assert_eq!(jdc.mine(&c), "accepted");
}

#[test]
fn a_declared_token_sets_one_job_on_any_connection() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut first = Jdc::connect(&lab);
    let mut second = Jdc::connect(&lab);
    let outputs = farm_outputs(5_000_000_000);
    let token = declared(&outputs);
    let job = |jdc: &Jdc, request_id| {
        custom_job(
            jdc.channel_id,
            request_id,
            token.clone(),
            tip(1),
            HARD_BITS,
            &outputs,
        )
    };
    // A job refused for its fields leaves the token unused.
    let mut bad = job(&first, 1);
    bad.version = 0x4000_0000;
    assert_eq!(first.refused(bad), "invalid-job-param-value-version");
    first.accepted(job(&first, 2));
    assert_eq!(first.refused(job(&first, 3)), "invalid-mining-job-token");
    assert_eq!(second.refused(job(&second, 1)), "invalid-mining-job-token");
}

/// A token that set a job is kept in the store before the job's success goes out: the pool
/// restarted on the same store refuses it, while a fresh token works. (On the wall clock: the
/// store forgets tokens that have expired by the time it opens.)
#[test]
fn a_used_token_stays_used_across_a_restart() {
    use pool::store::{Store, StoreConfig};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let outputs = farm_outputs(5_000_000_000);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let fresh = || token(TokenKind::Declared, &outputs, now + 600_000, &key());
    let used = fresh();
    let job = |channel_id: u32, request_id, token: &[u8]| {
        custom_job(
            channel_id,
            request_id,
            token.to_vec(),
            tip(1),
            HARD_BITS,
            &outputs,
        )
    };
    let answer = |jdc: &mut Jdc, m| match jdc.declare_at(m, now) {
        Message::Mining(Mining::SetCustomMiningJobSuccess(_)) => "accepted".to_owned(),
        Message::Mining(Mining::SetCustomMiningJobError(e)) => e.error_code,
        other => panic!("{other:?}"),
    };
    {
        let store = Store::open(StoreConfig::new(&path)).unwrap();
        let mut lab = Lab::with_store(LabConfig::pool(), Some(store.clone()));
        lab.publish(template(tip(1), HARD_BITS), T0);
        let mut jdc = Jdc::connect(&lab);
        jdc.s.take_pending_ticket();
        assert_eq!(
            {
                let m = job(jdc.channel_id, 1, &used);
                answer(&mut jdc, m)
            },
            "accepted"
        );
        // The success waits for the token's record (unless its commit, forced at once, won the
        // race already): once the ticket completes, the token is in the file, before any close.
        if let Some(t) = jdc.s.take_pending_ticket() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(store.wait_durable(t)).unwrap();
        }
        let in_file: i64 = rusqlite::Connection::open(&path)
            .unwrap()
            .query_row("SELECT count(*) FROM used_token", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            in_file, 1,
            "the token is synced before its job's success goes out"
        );
        drop(jdc);
        drop(lab);
        store.close().unwrap();
    }
    let store = Store::open(StoreConfig::new(&path)).unwrap();
    assert_eq!(store.used_tokens().len(), 1);
    let mut lab = Lab::with_store(LabConfig::pool(), Some(store.clone()));
    lab.publish(template(tip(1), HARD_BITS), T0);
    let mut jdc = Jdc::connect(&lab);
    assert_eq!(
        {
            let m = job(jdc.channel_id, 1, &used);
            answer(&mut jdc, m)
        },
        "invalid-mining-job-token"
    );
    assert_eq!(
        {
            let m = job(jdc.channel_id, 2, &fresh());
            answer(&mut jdc, m)
        },
        "accepted"
    );
}

#[test]
fn the_pools_tip_moving_past_the_jobs_block_makes_it_stale_its_own_jobs_do_not() {
    let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut jdc = Jdc::connect(&lab);
    let job = jdc.accepted(jdc.job(1, tip(1), HARD_BITS));
    // The pool keeps sending its own jobs on the channel, more than a channel remembers: the
    // declared job stays.
    for _ in 0..3 * pool::channel::ChannelConfig::default().max_jobs {
        lab.publish(template(tip(1), HARD_BITS), T0);
        jdc.pool_work(&lab);
    }
    assert_eq!(jdc.mine(&job), "accepted");
    // A new block for the pool: the job's block is a known older tip.
    lab.publish(template(tip(2), HARD_BITS), T0);
    jdc.pool_work(&lab);
    assert_eq!(jdc.mine(&job), "stale-share");
    // A job declared late on that older block is taken, and its shares are stale.
    let late = jdc.accepted(jdc.job(2, tip(1), HARD_BITS));
    assert_eq!(jdc.mine(&late), "stale-share");
}

/// A pool on regtest's easy target, a farm's job declared on its tip, and the first nonce whose
/// header is both a share and a block.
fn a_block_found() -> (Lab, Jdc, Mined, u32) {
    let lab = Lab::serving(LabConfig::pool(), tip(3), EASY_BITS);
    let mut jdc = Jdc::connect(&lab);
    let job = jdc.accepted(jdc.job(1, tip(3), EASY_BITS));
    let net = Target::from_compact(EASY_BITS).unwrap();
    let t = jdc.target;
    let n = jdc.grind(&job, |h| net.is_met_by(h) && t.is_met_by(h));
    (lab, jdc, job, n)
}

#[test]
fn a_block_on_a_declared_job_is_recorded_as_found_and_left_to_the_farm() {
    let (mut lab, mut jdc, job, n) = a_block_found();
    assert_eq!(jdc.verdict(&job, n), "accepted");
    let b = lab.next_block().expect("a found block");
    assert!(b.declared, "the pool does not submit it");
    let header = jdc.header(&job, n);
    assert_eq!(b.hash.0, header.block_hash().to_byte_array());
    assert_eq!(b.height, HEIGHT);
    // What the pool keeps: the header, then the coinbase with its witness reserved value (the
    // outputs commit to witnesses).
    assert_eq!(&b.block[..80], &consensus::serialize(&header)[..]);
    let coinbase: Transaction = consensus::deserialize(&b.block[80..]).unwrap();
    assert_eq!(coinbase.compute_txid(), jdc.coinbase(&job).compute_txid());
    assert_eq!(coinbase.input[0].witness.len(), 1);
    assert_eq!(lab.engine.stats.snapshot(T0).blocks.submitted, 1);
    assert!(lab.next_block().is_none(), "one share, one block");
}

#[test]
fn the_share_that_found_the_block_is_not_stale_when_its_block_reached_the_pool_first() {
    let (mut lab, mut jdc, job, n) = a_block_found();
    // The JDC gave the block to the farm's node, which relayed it to the pool's node: the pool
    // works on it before the share arrives.
    let block = Hash256(jdc.header(&job, n).block_hash().to_byte_array());
    lab.publish(template(block, EASY_BITS), T0);
    jdc.pool_work(&lab);
    assert_eq!(jdc.verdict(&job, n), "accepted");
    assert!(lab.next_block().is_some_and(|b| b.hash == block));
    // Any other share on that job is stale.
    assert_eq!(jdc.mine(&job), "stale-share");
}

/// The whole pool: a declared job over Noise, and its block kept in the store, answered as not
/// submitted, and not given to the pool's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_wire_a_declared_jobs_block_is_stored_and_not_submitted() {
    use std::time::Duration;

    use pool::service::{RunningPool, DECLARED_NOT_SUBMITTED};
    use sv2_support::{connect, recv, serving, WAIT};

    let (node, tp_addr, stop_tp) = sv2_support::template_provider(12, 20).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("pool.sqlite");
    let mut settings = sv2_support::pool_settings(tp_addr, &db, 0x22);
    settings.sv2.config.jd_token_key = Some(Arc::new(key()));
    let pool = RunningPool::start(settings).await.unwrap();
    serving(&pool).await;
    let mut conn = connect(pool.sv2_addr.unwrap()).await;
    conn.send_message(&setup_connection(0, mining_flags::REQUIRES_WORK_SELECTION))
        .await
        .unwrap();
    assert!(matches!(
        recv(&mut conn).await,
        Message::Common(Common::SetupConnectionSuccess(_))
    ));
    conn.send_message(&open_extended("farm")).await.unwrap();
    let Message::Mining(Mining::OpenExtendedMiningChannelSuccess(ok)) = recv(&mut conn).await
    else {
        panic!("channel opened");
    };
    let Message::Mining(Mining::NewExtendedMiningJob(_)) = recv(&mut conn).await else {
        panic!("the pool's job");
    };
    let Message::Mining(Mining::SetNewPrevHash(prev)) = recv(&mut conn).await else {
        panic!("its prev hash");
    };
    // The farm's node is a block ahead of the pool's: a block the pool has not seen.
    let outputs = farm_outputs(312_500_000);
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut m = custom_job(
        ok.channel_id,
        2,
        token(TokenKind::Declared, &outputs, unix_ms + 600_000, &key()),
        Hash256([0x99; 32]),
        CompactTarget::from_consensus(prev.nbits),
        &outputs,
    );
    m.min_ntime = prev.min_ntime;
    conn.send_message(&m.clone().into()).await.unwrap();
    let job_id = match recv(&mut conn).await {
        Message::Mining(Mining::SetCustomMiningJobSuccess(s)) => s.job_id,
        other => panic!("{other:?}"),
    };
    let extranonce = [
        ok.extranonce_prefix.clone(),
        vec![7; ok.extranonce_size.into()],
    ]
    .concat();
    let net = Target::from_compact(CompactTarget::from_consensus(prev.nbits)).unwrap();
    let (nonce, hash) = (0u32..)
        .find_map(|n| {
            let h = farm_header(&m, &extranonce, n).block_hash().to_byte_array();
            (net.is_met_by(&h) && ok.target.is_met_by(&h)).then_some((n, h))
        })
        .unwrap();
    conn.send_message(
        &SubmitSharesExtended {
            channel_id: ok.channel_id,
            sequence_number: 1,
            job_id,
            nonce,
            ntime: m.min_ntime,
            version: m.version,
            extranonce: extranonce[ok.extranonce_prefix.len()..].to_vec(),
            user_identity: None,
        }
        .into(),
    )
    .await
    .unwrap();
    assert!(matches!(
        recv(&mut conn).await,
        Message::Mining(Mining::SubmitSharesSuccess(_))
    ));
    // The store answers for the block at once: read it back while the pool runs.
    let result = tokio::time::timeout(WAIT, async {
        loop {
            let read = rusqlite::Connection::open(&db).ok().and_then(|c| {
                c.query_row(
                    "SELECT r.result FROM block b JOIN block_result r ON r.hash = b.hash \
                     WHERE b.hash = ?1",
                    [&hash[..]],
                    |row| row.get::<_, String>(0),
                )
                .ok()
            });
            if let Some(r) = read {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the block and its answer stored");
    assert_eq!(result, DECLARED_NOT_SUBMITTED);
    let snap = pool.engine.stats.snapshot(pool::Timestamp::from_millis(0));
    assert_eq!(snap.blocks.submitted, 1);
    assert_eq!((snap.blocks.accepted, snap.blocks.rejected), (0, 0));
    assert_ne!(node.read(|n| n.chain().tip_hash()).0, hash);
    pool.shutdown().await.unwrap();
    let _ = stop_tp.send(());
}
