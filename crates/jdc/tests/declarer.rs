//! The Job Declaration client's rules, message by message.

use std::sync::Arc;

use jdc::declarer::{Declaration, Declarer, DeclarerConfig, DeclarerError, DeclarerEvent, TxData};
use primitives::bitcoin::consensus::serialize;
use primitives::bitcoin::{Amount, ScriptBuf, TxOut};
use sv2::messages::common::{job_declaration_flags, protocol, Common, SetupConnectionSuccess};
use sv2::messages::job_declaration::{
    AllocateMiningJobTokenSuccess, DeclareMiningJobError, DeclareMiningJobSuccess,
    ProvideMissingTransactions,
};
use sv2::messages::{JobDeclaration, Message};

fn pool_outputs() -> Vec<TxOut> {
    vec![TxOut {
        value: Amount::ZERO,
        script_pubkey: ScriptBuf::from_bytes([&[0x00, 0x14][..], &[0x22; 20]].concat()),
    }]
}

fn sent(events: &[DeclarerEvent]) -> Vec<JobDeclaration> {
    events
        .iter()
        .filter_map(|e| match e {
            DeclarerEvent::Send(Message::JobDeclaration(m)) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

fn allocations(events: &[DeclarerEvent]) -> Vec<u32> {
    sent(events)
        .into_iter()
        .filter_map(|m| match m {
            JobDeclaration::AllocateMiningJobToken(a) => Some(a.request_id),
            _ => None,
        })
        .collect()
}

fn token_for(request_id: u32, token: u8) -> Message {
    AllocateMiningJobTokenSuccess {
        request_id,
        mining_job_token: vec![token; 4],
        coinbase_outputs: serialize(&pool_outputs()),
    }
    .into()
}

fn declaration(generation: u64) -> Declaration {
    Declaration {
        generation,
        version: 0x2000_0000,
        coinbase_prefix: vec![1, 2, 3],
        coinbase_suffix: vec![4, 5],
        txs: Arc::from(vec![
            TxData {
                wtxid: [0xa1; 32],
                data: vec![0xa1; 60],
            },
            TxData {
                wtxid: [0xb2; 32],
                data: vec![0xb2; 80],
            },
        ]),
    }
}

/// A declarer past SetupConnection, with the allocation request ids it sent.
fn ready(spare: usize) -> (Declarer, Vec<u32>) {
    let mut d = Declarer::new(DeclarerConfig {
        spare_tokens: spare,
        ..DeclarerConfig::default()
    });
    let Message::Common(Common::SetupConnection(s)) = d.setup_connection() else {
        panic!("not a SetupConnection");
    };
    assert_eq!(s.protocol, protocol::JOB_DECLARATION);
    assert_eq!(s.flags, job_declaration_flags::DECLARE_TX_DATA);
    let out = d
        .handle_message(
            SetupConnectionSuccess {
                used_version: 2,
                flags: 0,
            }
            .into(),
        )
        .unwrap();
    let ids = allocations(&out);
    (d, ids)
}

#[test]
fn tokens_are_asked_for_ahead_and_the_first_brings_the_pool_outputs() {
    let (mut d, ids) = ready(2);
    assert_eq!(
        ids.len(),
        3,
        "one token for the next template and two spare"
    );
    assert!(!d.is_ready());
    let out = d.handle_message(token_for(ids[0], 1)).unwrap();
    assert!(out.contains(&DeclarerEvent::PoolOutputs(pool_outputs())));
    assert!(d.is_ready());
    assert_eq!(d.pool_payout(), Some(&pool_outputs()[0].script_pubkey));
    // Still two in flight and one in hand: nothing more to ask for.
    assert!(allocations(&out).is_empty());
}

#[test]
fn a_declaration_uses_a_token_sends_the_wtxids_and_supplies_missing_transactions() {
    let (mut d, ids) = ready(0);
    d.handle_message(token_for(ids[0], 9)).unwrap();
    let out = d.declare(declaration(5));
    let msgs = sent(&out);
    let JobDeclaration::DeclareMiningJob(m) = &msgs[0] else {
        panic!("expected DeclareMiningJob, got {msgs:?}");
    };
    assert_eq!(m.mining_job_token, vec![9; 4]);
    assert_eq!(m.wtxid_list, vec![[0xa1; 32], [0xb2; 32]]);
    assert_eq!(m.coinbase_tx_prefix, vec![1, 2, 3]);
    assert_eq!(m.coinbase_tx_suffix, vec![4, 5]);
    // The token was used: another is asked for.
    assert_eq!(allocations(&out).len(), 1);

    let out = d
        .handle_message(
            ProvideMissingTransactions {
                request_id: m.request_id,
                unknown_tx_position_list: vec![1, 7],
            }
            .into(),
        )
        .unwrap();
    let msgs = sent(&out);
    let JobDeclaration::ProvideMissingTransactionsSuccess(p) = &msgs[0] else {
        panic!("expected ProvideMissingTransactions.Success, got {msgs:?}");
    };
    assert_eq!(p.request_id, m.request_id);
    assert_eq!(
        p.transaction_list,
        vec![vec![0xb2; 80]],
        "position 7 does not exist"
    );

    let out = d
        .handle_message(
            DeclareMiningJobSuccess {
                request_id: m.request_id,
                new_mining_job_token: vec![0xdd; 8],
            }
            .into(),
        )
        .unwrap();
    assert_eq!(
        out,
        vec![DeclarerEvent::Declared {
            generation: 5,
            token: vec![0xdd; 8]
        }]
    );
    assert_eq!(d.in_flight(), 0);
}

#[test]
fn without_a_token_only_the_newest_template_waits() {
    let (mut d, ids) = ready(0);
    assert!(sent(&d.declare(declaration(1))).is_empty());
    assert!(sent(&d.declare(declaration(2))).is_empty());
    let out = d.handle_message(token_for(ids[0], 3)).unwrap();
    let declared: Vec<_> = sent(&out)
        .into_iter()
        .filter_map(|m| match m {
            JobDeclaration::DeclareMiningJob(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(declared.len(), 1);
    let ok = d
        .handle_message(
            DeclareMiningJobSuccess {
                request_id: declared[0].request_id,
                new_mining_job_token: vec![1],
            }
            .into(),
        )
        .unwrap();
    assert!(matches!(
        ok[0],
        DeclarerEvent::Declared { generation: 2, .. }
    ));
}

#[test]
fn a_refusal_names_the_generation_and_late_answers_are_counted_not_fatal() {
    let (mut d, ids) = ready(0);
    d.handle_message(token_for(ids[0], 3)).unwrap();
    let out = d.declare(declaration(8));
    let JobDeclaration::DeclareMiningJob(m) = &sent(&out)[0] else {
        panic!("no declaration");
    };
    let out = d
        .handle_message(
            DeclareMiningJobError {
                request_id: m.request_id,
                error_code: "invalid-job".into(),
                error_details: b"no payout".to_vec(),
            }
            .into(),
        )
        .unwrap();
    assert_eq!(
        out,
        vec![DeclarerEvent::Refused {
            generation: 8,
            code: "invalid-job".into(),
            details: "no payout".into()
        }]
    );
    d.handle_message(
        DeclareMiningJobSuccess {
            request_id: m.request_id,
            new_mining_job_token: vec![1],
        }
        .into(),
    )
    .unwrap();
    assert_eq!(d.late_answers, 1);
}

#[test]
fn outputs_that_do_not_decode_or_jd_messages_before_setup_are_errors() {
    let (mut d, ids) = ready(0);
    let bad = AllocateMiningJobTokenSuccess {
        request_id: ids[0],
        mining_job_token: vec![1],
        coinbase_outputs: vec![0x05, 0x01],
    };
    assert!(matches!(
        d.handle_message(bad.into()),
        Err(DeclarerError::Outputs(_))
    ));
    let mut fresh = Declarer::new(DeclarerConfig::default());
    assert!(matches!(
        fresh.handle_message(token_for(1, 1)),
        Err(DeclarerError::BeforeSetup(_))
    ));
}
