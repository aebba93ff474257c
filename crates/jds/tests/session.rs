//! The JDS session without IO: every rule of job declaration, with coinbases, transactions and
//! blocks built independently with rust-bitcoin.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jds::fuzz_support::{declare_mining_job, drain, jdc_coinbase, split_coinbase, Output};
use jds::session::{error_code, Close};
use jds::{JdsConfig, Session, TokenIssuer, UnixMillis};
use pool::jd_token::{OutputsDigest, TokenKey, TokenKind};
use primitives::bitcoin::absolute::LockTime;
use primitives::bitcoin::block::{Header, Version as BlockVersion};
use primitives::bitcoin::consensus;
use primitives::bitcoin::hashes::Hash;
use primitives::bitcoin::transaction::Version;
use primitives::bitcoin::{
    Amount, Block, BlockHash, CompactTarget, OutPoint, ScriptBuf, Sequence, Transaction, TxIn,
    TxMerkleNode, TxOut, Txid, Witness,
};
use primitives::Hash256;
use sv2::messages::common::{self, job_declaration_flags, SetupConnection};
use sv2::messages::job_declaration::*;
use sv2::messages::{Common, JobDeclaration};
use sv2::Message;

const T0: UnixMillis = UnixMillis(1_700_000_000_000);
const HEIGHT: u32 = 812_345;
const EXTRANONCE: usize = 8;

fn payout() -> ScriptBuf {
    let mut s = vec![0x00, 0x14];
    s.extend_from_slice(&[0xab; 20]);
    ScriptBuf::from_bytes(s)
}

fn key() -> TokenKey {
    TokenKey::from_bytes([7; 32])
}

type Pool = HashMap<Hash256, Arc<Transaction>>;

struct Jds {
    session: Session,
    tokens: Arc<TokenIssuer>,
    cfg: Arc<JdsConfig>,
}

fn jds_with(cfg: JdsConfig) -> Jds {
    let cfg = Arc::new(cfg);
    let tokens = Arc::new(TokenIssuer::new(key(), cfg.token_lifetime, T0));
    Jds {
        session: Session::new(1, cfg.clone(), tokens.clone()),
        tokens,
        cfg,
    }
}

fn setup_msg(protocol: u8, flags: u32) -> Message {
    SetupConnection {
        flags,
        endpoint_host: "127.0.0.1".into(),
        endpoint_port: 34264,
        vendor: "test-jdc".into(),
        ..SetupConnection::new(protocol)
    }
    .into()
}

impl Jds {
    fn feed(&mut self, m: impl Into<Message>, now: UnixMillis, pool: &Pool) -> Vec<Output> {
        self.session.handle_message(m.into(), now, pool);
        drain(&mut self.session)
    }

    fn sent(&mut self, m: impl Into<Message>, now: UnixMillis, pool: &Pool) -> Vec<Message> {
        self.feed(m, now, pool)
            .into_iter()
            .map(|o| match o {
                Output::Send(m) => m,
                other => panic!("expected a message, got {other:?}"),
            })
            .collect()
    }

    fn set_up(&mut self) {
        let out = self.sent(
            setup_msg(
                common::protocol::JOB_DECLARATION,
                job_declaration_flags::DECLARE_TX_DATA,
            ),
            T0,
            &Pool::new(),
        );
        assert!(matches!(
            &out[..],
            [Message::Common(Common::SetupConnectionSuccess(s))] if s.used_version == 2 && s.flags == 0
        ));
    }

    fn allocate(&mut self, now: UnixMillis) -> Vec<u8> {
        self.allocation("farm", 1, now).mining_job_token
    }

    /// Asks for a token for `user` and expects the one answer, a success.
    fn allocation(
        &mut self,
        user: &str,
        request_id: u32,
        now: UnixMillis,
    ) -> AllocateMiningJobTokenSuccess {
        let out = self.sent(
            AllocateMiningJobToken {
                user_identifier: user.into(),
                request_id,
            },
            now,
            &Pool::new(),
        );
        let [Message::JobDeclaration(JobDeclaration::AllocateMiningJobTokenSuccess(s))] = &out[..]
        else {
            panic!("{out:?}")
        };
        s.clone()
    }
}

fn jds() -> Jds {
    let mut j = jds_with(JdsConfig::new(payout()));
    j.set_up();
    j
}

/// A segwit transaction spending a made-up outpoint (the JDS does not check inputs).
fn tx(seed: u8) -> Transaction {
    Transaction {
        version: Version::TWO,
        lock_time: LockTime::ZERO,
        input: vec![TxIn {
            previous_output: OutPoint {
                txid: Txid::from_byte_array([seed; 32]),
                vout: seed as u32,
            },
            script_sig: ScriptBuf::new(),
            sequence: Sequence::MAX,
            witness: Witness::from_slice(&[vec![seed; 72], vec![2; 33]]),
        }],
        output: vec![TxOut {
            value: Amount::from_sat(10_000 + seed as u64),
            script_pubkey: ScriptBuf::from_bytes(vec![0x51]),
        }],
    }
}

fn wtxid(t: &Transaction) -> Hash256 {
    Hash256(t.compute_wtxid().to_byte_array())
}

fn pool_of(txs: &[&Transaction]) -> Pool {
    txs.iter()
        .map(|t| (wtxid(t), Arc::new((*t).clone())))
        .collect()
}

/// The coinbase a JDC would build: BIP34 height, extranonce at the end of the scriptSig, the
/// pool payout and the witness commitment for `txs`.
fn coinbase(txs: &[Transaction], payout_value: u64, extranonce: &[u8]) -> Transaction {
    let wtxids: Vec<Hash256> = txs.iter().map(wtxid).collect();
    jdc_coinbase(HEIGHT, extranonce, payout(), payout_value, &wtxids)
}

fn declare_msg(
    request_id: u32,
    token: Vec<u8>,
    cb: &Transaction,
    txs: &[Transaction],
) -> DeclareMiningJob {
    let wtxids: Vec<Hash256> = txs.iter().map(wtxid).collect();
    declare_mining_job(request_id, token, split_coinbase(cb, EXTRANONCE), &wtxids)
}

fn refusal(out: &[Message]) -> (u32, String, String) {
    match out {
        [Message::JobDeclaration(JobDeclaration::DeclareMiningJobError(e))] => (
            e.request_id,
            e.error_code.clone(),
            String::from_utf8(e.error_details.clone()).unwrap(),
        ),
        other => panic!("expected DeclareMiningJob.Error, got {other:?}"),
    }
}

fn success(out: &[Message]) -> (u32, Vec<u8>) {
    match out {
        [Message::JobDeclaration(JobDeclaration::DeclareMiningJobSuccess(s))] => {
            (s.request_id, s.new_mining_job_token.clone())
        }
        other => panic!("expected DeclareMiningJob.Success, got {other:?}"),
    }
}

/// The refusal a fresh JDS gives the declaration of `cb` and `txs` (request 1, a fresh token),
/// changed by `tamper` before it is sent.
fn refused_fresh(
    cb: &Transaction,
    txs: &[Transaction],
    pool: &Pool,
    tamper: impl FnOnce(&mut DeclareMiningJob),
) -> (u32, String, String) {
    let mut j = jds();
    let token = j.allocate(T0);
    let mut m = declare_msg(1, token, cb, txs);
    tamper(&mut m);
    refusal(&j.sent(m, T0, pool))
}

#[test]
fn setup_is_refused_with_the_specs_codes() {
    let dtd = job_declaration_flags::DECLARE_TX_DATA;
    for (m, code, flags) in [
        (
            setup_msg(common::protocol::MINING, dtd),
            "unsupported-protocol",
            0,
        ),
        (
            setup_msg(common::protocol::JOB_DECLARATION, 0),
            "missing-declare-tx-data-flag",
            0,
        ),
        (
            setup_msg(common::protocol::JOB_DECLARATION, dtd | 0b100),
            "unsupported-feature-flags",
            0b100,
        ),
        (
            {
                let Message::Common(Common::SetupConnection(mut s)) =
                    setup_msg(common::protocol::JOB_DECLARATION, dtd)
                else {
                    unreachable!()
                };
                s.min_version = 3;
                s.max_version = 4;
                s.into()
            },
            "protocol-version-mismatch",
            0,
        ),
    ] {
        let mut j = jds_with(JdsConfig::new(payout()));
        let out = j.sent(m, T0, &Pool::new());
        assert!(
            matches!(&out[..], [Message::Common(Common::SetupConnectionError(e))] if e.error_code == code && e.flags == flags),
            "{code}: {out:?}"
        );
        assert_eq!(j.session.wants_close(), Some(&Close::Setup(code)));
    }
    // Anything before SetupConnection ends the connection.
    let mut j = jds_with(JdsConfig::new(payout()));
    let out = j.sent(
        AllocateMiningJobToken {
            user_identifier: "x".into(),
            request_id: 1,
        },
        T0,
        &Pool::new(),
    );
    assert!(out.is_empty());
    assert!(matches!(j.session.wants_close(), Some(Close::Protocol(_))));
}

#[test]
fn allocation_gives_an_allocated_token_and_the_pool_payout_output() {
    let mut j = jds();
    let s = j.allocation("farm-1", 42, T0);
    assert_eq!(s.request_id, 42);
    let claims = key()
        .verify_kind(&s.mining_job_token, TokenKind::Allocated, T0.0)
        .unwrap();
    assert_eq!(claims.expires_ms, T0.0 + 600_000, "default lifetime 10 min");
    // A CompactSize-prefixed array of consensus-serialized outputs: the payout, value 0.
    let outputs: Vec<TxOut> = consensus::deserialize(&s.coinbase_outputs).unwrap();
    assert_eq!(
        outputs,
        vec![TxOut {
            value: Amount::ZERO,
            script_pubkey: payout()
        }]
    );
    assert_eq!(s.coinbase_outputs[0], 1);
    // Two allocations are two different tokens.
    assert_ne!(j.allocate(T0), s.mining_job_token);
}

#[test]
fn allocations_faster_than_the_rate_close_the_connection() {
    let mut cfg = JdsConfig::new(payout());
    cfg.allocation_burst = 3.0;
    cfg.allocations_per_second = 1.0;
    let mut j = jds_with(cfg);
    j.set_up();
    for _ in 0..3 {
        j.allocate(T0);
    }
    // A second later one more is allowed.
    j.allocate(UnixMillis(T0.0 + 1000));
    let out = j.sent(
        AllocateMiningJobToken {
            user_identifier: "farm".into(),
            request_id: 9,
        },
        UnixMillis(T0.0 + 1000),
        &Pool::new(),
    );
    assert!(out.is_empty());
    assert_eq!(j.session.wants_close(), Some(&Close::Rate));
}

#[test]
fn a_job_whose_transactions_are_all_known_is_declared() {
    let mut j = jds();
    let txs = vec![tx(1), tx(2), tx(3)];
    let pool = pool_of(&[&txs[0], &txs[1], &txs[2]]);
    let token = j.allocate(T0);
    let cb = coinbase(&txs, 625_000_000, &[0; EXTRANONCE]);
    let out = j.sent(declare_msg(5, token, &cb, &txs), T0, &pool);
    let (request_id, declared) = success(&out);
    assert_eq!(request_id, 5);
    let claims = key()
        .verify_kind(&declared, TokenKind::Declared, T0.0)
        .unwrap();
    // The pool checks SetCustomMiningJob's outputs against this digest.
    assert_eq!(claims.outputs, OutputsDigest::of(&cb.output));
    let job = j.session.last_declared().unwrap();
    assert_eq!(job.coinbase.extranonce_len, EXTRANONCE);
    assert_eq!(job.txs.len(), 3);
}

#[test]
fn missing_transactions_are_requested_then_the_job_is_declared() {
    let mut j = jds();
    let txs = vec![tx(1), tx(2), tx(3), tx(4)];
    // The node knows the first and third only.
    let pool = pool_of(&[&txs[0], &txs[2]]);
    let token = j.allocate(T0);
    let cb = coinbase(&txs, 625_000_000, &[0; EXTRANONCE]);
    let out = j.sent(declare_msg(6, token, &cb, &txs), T0, &pool);
    assert_eq!(
        out,
        vec![Message::from(ProvideMissingTransactions {
            request_id: 6,
            unknown_tx_position_list: vec![1, 3],
        })]
    );
    assert_eq!(j.session.pending_count(), 1);
    let out = j.sent(
        ProvideMissingTransactionsSuccess {
            request_id: 6,
            transaction_list: vec![consensus::serialize(&txs[1]), consensus::serialize(&txs[3])],
        },
        UnixMillis(T0.0 + 100),
        &pool,
    );
    assert_eq!(success(&out).0, 6);
    assert_eq!(j.session.pending_count(), 0);
    let job = j.session.last_declared().unwrap();
    let got: Vec<Transaction> = job.txs.iter().map(|t| (**t).clone()).collect();
    assert_eq!(got, txs, "the block's transactions in declared order");
}

#[test]
fn wrong_or_too_few_provided_transactions_are_refused() {
    let txs = vec![tx(1), tx(2)];
    let pool = pool_of(&[&txs[0]]);
    let cb = coinbase(&txs, 625_000_000, &[0; EXTRANONCE]);

    // A transaction that does not hash to the requested wtxid.
    let mut j = jds();
    let token = j.allocate(T0);
    j.sent(declare_msg(7, token, &cb, &txs), T0, &pool);
    let out = j.sent(
        ProvideMissingTransactionsSuccess {
            request_id: 7,
            transaction_list: vec![consensus::serialize(&tx(9))],
        },
        T0,
        &pool,
    );
    let (id, code, details) = refusal(&out);
    assert_eq!((id, code.as_str()), (7, error_code::INVALID_JOB));
    assert!(details.contains("position 1"), "{details}");
    assert!(j.session.last_declared().is_none());

    // None provided: the transaction the node lacks stays unknown.
    let mut j = jds();
    let token = j.allocate(T0);
    j.sent(declare_msg(8, token, &cb, &txs), T0, &pool);
    let out = j.sent(
        ProvideMissingTransactionsSuccess {
            request_id: 8,
            transaction_list: vec![],
        },
        T0,
        &pool,
    );
    assert_eq!(refusal(&out).1, error_code::MISSING_TXS);

    // Bytes that are not a transaction.
    let mut j = jds();
    let token = j.allocate(T0);
    j.sent(declare_msg(9, token, &cb, &txs), T0, &pool);
    let out = j.sent(
        ProvideMissingTransactionsSuccess {
            request_id: 9,
            transaction_list: vec![vec![1, 2, 3]],
        },
        T0,
        &pool,
    );
    assert_eq!(refusal(&out).1, error_code::INVALID_JOB);
}

#[test]
fn an_unknown_transaction_never_provided_is_refused_after_the_timeout() {
    let mut j = jds();
    let txs = vec![tx(1)];
    let token = j.allocate(T0);
    let cb = coinbase(&txs, 625_000_000, &[0; EXTRANONCE]);
    let out = j.sent(declare_msg(10, token, &cb, &txs), T0, &Pool::new());
    assert!(matches!(
        &out[..],
        [Message::JobDeclaration(
            JobDeclaration::ProvideMissingTransactions(_)
        )]
    ));
    let timeout = j.cfg.missing_txs_timeout;
    j.session.handle_tick(T0.plus(timeout));
    assert!(drain(&mut j.session).is_empty(), "not before the deadline");
    j.session
        .handle_tick(T0.plus(timeout + Duration::from_millis(1)));
    let out: Vec<Message> = drain(&mut j.session)
        .into_iter()
        .map(|o| match o {
            Output::Send(m) => m,
            o => panic!("{o:?}"),
        })
        .collect();
    assert_eq!(refusal(&out).0, 10);
    assert_eq!(refusal(&out).1, error_code::MISSING_TXS);
    assert_eq!(j.session.pending_count(), 0);
    // A late answer is ignored.
    let late = j.sent(
        ProvideMissingTransactionsSuccess {
            request_id: 10,
            transaction_list: vec![consensus::serialize(&txs[0])],
        },
        T0.plus(timeout * 2),
        &Pool::new(),
    );
    assert!(late.is_empty());
    assert!(j.session.last_declared().is_none());
}

#[test]
fn bad_coinbases_are_refused() {
    let txs = vec![tx(1)];
    let pool = pool_of(&[&txs[0]]);
    let good = coinbase(&txs, 625_000_000, &[0; EXTRANONCE]);

    // A suffix cut short: the transaction does not parse.
    let (_, code, _) = refused_fresh(&good, &txs, &pool, |m| m.coinbase_tx_suffix.truncate(10));
    assert_eq!(code, error_code::INVALID_COINBASE_TX);

    // Bytes after the transaction.
    let (_, code, _) = refused_fresh(&good, &txs, &pool, |m| m.coinbase_tx_suffix.push(0));
    assert_eq!(code, error_code::INVALID_COINBASE_TX);

    // A prefix that claims fewer scriptSig bytes than it holds.
    let (_, code, _) = refused_fresh(&good, &txs, &pool, |m| {
        m.coinbase_tx_prefix[4 + 2 + 1 + 36] = 1
    });
    assert_eq!(code, error_code::INVALID_COINBASE_TX);

    // An input that spends a real outpoint: not a coinbase.
    let mut not_cb = good.clone();
    not_cb.input[0].previous_output = OutPoint {
        txid: Txid::from_byte_array([3; 32]),
        vout: 0,
    };
    let (_, code, _) = refused_fresh(&not_cb, &txs, &pool, |_| {});
    assert_eq!(code, error_code::INVALID_COINBASE_TX_INPUT);

    // A witness commitment that is not the declared transactions'.
    let other = coinbase(&[tx(2)], 625_000_000, &[0; EXTRANONCE]);
    let (_, code, details) = refused_fresh(&other, &txs, &pool, |_| {});
    assert_eq!(code, error_code::INVALID_JOB);
    assert!(details.contains("commitment"), "{details}");
}

#[test]
fn a_coinbase_that_does_not_pay_the_pool_is_refused() {
    let txs = vec![tx(1)];
    let pool = pool_of(&[&txs[0]]);
    // The payout output with nothing in it.
    let zero = coinbase(&txs, 0, &[0; EXTRANONCE]);
    let (_, code, _) = refused_fresh(&zero, &txs, &pool, |_| {});
    assert_eq!(code, error_code::INVALID_COINBASE_OUTPUTS);
    assert_eq!(code, "invalid-job-param-value-coinbase-tx-suffix");
    // Everything paid to another script.
    let mut elsewhere = coinbase(&txs, 625_000_000, &[0; EXTRANONCE]);
    elsewhere.output[0].script_pubkey = ScriptBuf::from_bytes(vec![0x51]);
    let (_, code, _) = refused_fresh(&elsewhere, &txs, &pool, |_| {});
    assert_eq!(code, error_code::INVALID_COINBASE_OUTPUTS);
}

#[test]
fn expired_forged_reused_and_declared_tokens_cannot_declare() {
    let txs = vec![tx(1)];
    let pool = pool_of(&[&txs[0]]);
    let cb = coinbase(&txs, 625_000_000, &[0; EXTRANONCE]);
    let mut j = jds();

    // Expired: allocated at T0, declared just after its lifetime.
    let token = j.allocate(T0);
    let late = T0.plus(j.tokens.lifetime() + Duration::from_millis(1));
    let (_, code, details) = refusal(&j.sent(declare_msg(1, token, &cb, &txs), late, &pool));
    assert_eq!(code, error_code::INVALID_MINING_JOB_TOKEN);
    assert!(details.contains("expired"), "{details}");

    // Forged: under another key, or altered.
    let other = TokenIssuer::new(TokenKey::from_bytes([8; 32]), Duration::from_secs(600), T0);
    let (_, code, _) = refusal(&j.sent(declare_msg(2, other.allocate(T0), &cb, &txs), T0, &pool));
    assert_eq!(code, error_code::INVALID_MINING_JOB_TOKEN);
    let mut altered = j.allocate(T0);
    altered[3] ^= 1;
    let (_, code, _) = refusal(&j.sent(declare_msg(3, altered, &cb, &txs), T0, &pool));
    assert_eq!(code, error_code::INVALID_MINING_JOB_TOKEN);
    let (_, code, _) = refusal(&j.sent(declare_msg(4, vec![1, 2, 3], &cb, &txs), T0, &pool));
    assert_eq!(code, error_code::INVALID_MINING_JOB_TOKEN);

    // Reused: the second declaration with one token is refused, on any connection.
    let token = j.allocate(T0);
    let (_, declared) = success(&j.sent(declare_msg(5, token.clone(), &cb, &txs), T0, &pool));
    let (_, code, details) = refusal(&j.sent(declare_msg(6, token.clone(), &cb, &txs), T0, &pool));
    assert_eq!(code, error_code::INVALID_MINING_JOB_TOKEN);
    assert!(details.contains("already used"), "{details}");
    let mut second = Session::new(2, j.cfg.clone(), j.tokens.clone());
    second.handle_message(
        setup_msg(
            common::protocol::JOB_DECLARATION,
            job_declaration_flags::DECLARE_TX_DATA,
        ),
        T0,
        &pool,
    );
    drain(&mut second);
    second.handle_message(declare_msg(7, token, &cb, &txs).into(), T0, &pool);
    let out: Vec<Message> = drain(&mut second)
        .into_iter()
        .map(|o| match o {
            Output::Send(m) => m,
            o => panic!("{o:?}"),
        })
        .collect();
    assert_eq!(refusal(&out).1, error_code::INVALID_MINING_JOB_TOKEN);

    // A declared token is not an allocated one.
    let (_, code, _) = refusal(&j.sent(declare_msg(8, declared, &cb, &txs), T0, &pool));
    assert_eq!(code, error_code::INVALID_MINING_JOB_TOKEN);
}

/// The block a JDC would submit, built without the JDS's code: the coinbase with the
/// extranonce in place, the transactions, rust-bitcoin's merkle root, a nonce ground until the
/// header meets `bits`.
fn expected_block(txs: &[Transaction], extranonce: &[u8], bits: u32, want_valid: bool) -> Block {
    let mut txdata = vec![coinbase(txs, 625_000_000, extranonce)];
    txdata.extend(txs.iter().cloned());
    let mut block = Block {
        header: Header {
            version: BlockVersion::from_consensus(0x2000_0000),
            prev_blockhash: BlockHash::from_byte_array([0x11; 32]),
            merkle_root: TxMerkleNode::all_zeros(),
            time: 1_700_000_123,
            bits: CompactTarget::from_consensus(bits),
            nonce: 0,
        },
        txdata,
    };
    block.header.merkle_root = block.compute_merkle_root().unwrap();
    while block.header.validate_pow(block.header.target()).is_ok() != want_valid {
        block.header.nonce += 1;
    }
    block
}

fn push(block: &Block, extranonce: &[u8]) -> PushSolution {
    PushSolution {
        extranonce: extranonce.to_vec(),
        prev_hash: block.header.prev_blockhash.to_byte_array(),
        nonce: block.header.nonce,
        ntime: block.header.time,
        nbits: block.header.bits.to_consensus(),
        version: block.header.version.to_consensus() as u32,
    }
}

#[test]
fn push_solution_rebuilds_the_block_of_the_last_declared_job() {
    let mut j = jds();
    let txs = vec![tx(1), tx(2), tx(3), tx(4), tx(5)];
    let pool = pool_of(&txs.iter().collect::<Vec<_>>());
    // An older job with other transactions, then the one the solution is for.
    let older = vec![tx(6)];
    let token = j.allocate(T0);
    let cb = coinbase(&older, 625_000_000, &[0; EXTRANONCE]);
    success(&j.sent(
        declare_msg(1, token, &cb, &older),
        T0,
        &pool_of(&[&older[0]]),
    ));
    let token = j.allocate(T0);
    let cb = coinbase(&txs, 625_000_000, &[0; EXTRANONCE]);
    success(&j.sent(declare_msg(2, token, &cb, &txs), T0, &pool));

    let extranonce = [0xa1, 0xa2, 0xa3, 0xa4, 0xb1, 0xb2, 0xb3, 0xb4];
    let block = expected_block(&txs, &extranonce, 0x207f_ffff, true);
    assert!(block.check_merkle_root() && block.check_witness_commitment());
    let out = j.feed(push(&block, &extranonce), T0, &pool);
    let [Output::SubmitBlock(found)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(found.hash, Hash256(block.block_hash().to_byte_array()));
    assert_eq!(found.height, Some(HEIGHT));
    assert_eq!(found.bytes, consensus::serialize(&block));
    let back: Block = consensus::deserialize(&found.bytes).unwrap();
    assert_eq!(
        back.header.merkle_root,
        block.compute_merkle_root().unwrap()
    );
}

#[test]
fn solutions_that_cannot_be_a_block_are_not_submitted() {
    let txs = vec![tx(1)];
    let pool = pool_of(&[&txs[0]]);
    let extranonce = [7u8; EXTRANONCE];
    // No declared job yet.
    let mut j = jds();
    let block = expected_block(&txs, &extranonce, 0x207f_ffff, true);
    assert!(j.feed(push(&block, &extranonce), T0, &pool).is_empty());

    let token = j.allocate(T0);
    let cb = coinbase(&txs, 625_000_000, &[0; EXTRANONCE]);
    success(&j.sent(declare_msg(1, token, &cb, &txs), T0, &pool));
    // A hash above the target.
    let high = expected_block(&txs, &extranonce, 0x207f_ffff, false);
    assert!(j.feed(push(&high, &extranonce), T0, &pool).is_empty());
    // An extranonce of another length than the coinbase has room for.
    assert!(j.feed(push(&block, &extranonce[..4]), T0, &pool).is_empty());
    assert_eq!(j.session.stats().solutions_dropped, 3);
    // The right one is.
    assert_eq!(j.feed(push(&block, &extranonce), T0, &pool).len(), 1);
}

#[test]
fn witness_transactions_need_a_coinbase_that_commits_to_them() {
    let mut j = jds();
    let txs = vec![tx(1)];
    let pool = pool_of(&[&txs[0]]);
    let mut cb = coinbase(&txs, 625_000_000, &[0; EXTRANONCE]);
    // No commitment output and no witness: a legacy coinbase over a segwit transaction.
    cb.output.pop();
    cb.input[0].witness = Witness::new();
    let m = declare_msg(3, j.allocate(T0), &cb, &txs);
    let (_, code, details) = refusal(&j.sent(m, T0, &pool));
    assert_eq!(code, error_code::INVALID_COINBASE_TX);
    assert!(details.contains("witness"), "{details}");
}
