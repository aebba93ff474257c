//! The Template Distribution client's sans-IO session: setup, and which templates become
//! minable work when.

use pool::tp::{Output, TpSession, TpSessionConfig, TpSessionError, TpWork};
use primitives::coinbase::bip34_height_push;
use primitives::{CompactTarget, Target};
use sv2::messages::common::{SetupConnectionError, SetupConnectionSuccess};
use sv2::messages::template_distribution::{
    NewTemplate, RequestTransactionDataError, RequestTransactionDataSuccess, SetNewPrevHash,
};
use sv2::messages::{Common, TemplateDistribution};
use sv2::Message;

fn ready() -> TpSession {
    let mut s = TpSession::new(TpSessionConfig::default());
    let out = s
        .on_message(
            SetupConnectionSuccess {
                used_version: 2,
                flags: 0,
            }
            .into(),
        )
        .unwrap();
    assert!(matches!(
        &out[..],
        [Output::Send(Message::TemplateDistribution(
            TemplateDistribution::CoinbaseOutputConstraints(c)
        ))] if c.coinbase_output_max_additional_size == 43
    ));
    assert!(s.is_ready());
    s
}

fn template(id: u64, future: bool, height: u32) -> Message {
    NewTemplate {
        template_id: id,
        future_template: future,
        version: 0x2000_0000,
        coinbase_tx_version: 2,
        coinbase_prefix: bip34_height_push(height),
        coinbase_tx_input_sequence: u32::MAX,
        coinbase_tx_value_remaining: 312_500_000 + id,
        coinbase_tx_outputs_count: 0,
        coinbase_tx_outputs: Vec::new(),
        coinbase_tx_locktime: 0,
        merkle_path: vec![[id as u8; 32]],
    }
    .into()
}

fn prev_hash(id: u64, tip: u8, time: u32) -> Message {
    SetNewPrevHash {
        template_id: id,
        prev_hash: [tip; 32],
        header_timestamp: time,
        n_bits: 0x207f_ffff,
        target: Target::from_compact(CompactTarget::from_consensus(0x207f_ffff)).unwrap(),
    }
    .into()
}

fn works(out: Vec<Output>) -> Vec<TpWork> {
    out.into_iter()
        .map(|o| match o {
            Output::Work(w) => w,
            Output::Send(m) => panic!("unexpected send {}", m.name()),
            Output::TxData(d) => panic!("unexpected transaction data {d:?}"),
        })
        .collect()
}

#[test]
fn transaction_data_answers_are_handed_to_whoever_asked() {
    let mut s = ready();
    let ok = RequestTransactionDataSuccess {
        template_id: 5,
        excess_data: Vec::new(),
        transaction_list: vec![vec![1, 2, 3]],
    };
    let out = s.on_message(ok.clone().into()).unwrap();
    assert!(matches!(&out[..], [Output::TxData(Ok(d))] if *d == ok));
    let err = RequestTransactionDataError {
        template_id: 6,
        error_code: "stale-template-id".into(),
    };
    let out = s.on_message(err.clone().into()).unwrap();
    assert!(matches!(&out[..], [Output::TxData(Err(e))] if *e == err));
}

#[test]
fn setup_refused_is_an_error_and_templates_before_setup_are_a_protocol_error() {
    let mut s = TpSession::new(TpSessionConfig::default());
    assert!(matches!(
        s.setup_connection(),
        Message::Common(Common::SetupConnection(ref c)) if c.protocol == 2 && c.flags == 0
    ));
    let e = s
        .on_message(
            SetupConnectionError {
                flags: 0,
                error_code: "unsupported-protocol".into(),
            }
            .into(),
        )
        .unwrap_err();
    assert_eq!(
        e,
        TpSessionError::SetupRefused("unsupported-protocol".into())
    );
    let mut s = TpSession::new(TpSessionConfig::default());
    assert!(matches!(
        s.on_message(template(1, true, 10)),
        Err(TpSessionError::Protocol(_))
    ));
}

#[test]
fn future_templates_wait_for_their_prev_hash_and_others_follow_the_tip() {
    let mut s = ready();
    // No tip yet: a non-future template cannot be mined.
    assert!(works(s.on_message(template(1, false, 10)).unwrap()).is_empty());
    // Future templates wait.
    assert!(works(s.on_message(template(2, true, 11)).unwrap()).is_empty());
    assert!(works(s.on_message(template(3, true, 11)).unwrap()).is_empty());
    // The prev hash names template 3: that one becomes work, on the new tip.
    let w = works(s.on_message(prev_hash(3, 0xaa, 1_700_000_000)).unwrap());
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].tdp.template_id, 3);
    assert_eq!(w[0].template.height, 11);
    assert_eq!(w[0].template.prev_hash.0, [0xaa; 32]);
    assert_eq!(
        w[0].template.bits,
        CompactTarget::from_consensus(0x207f_ffff)
    );
    assert_eq!(w[0].template.curtime, 1_700_000_000);
    assert_eq!(w[0].template.coinbase_value.to_sat(), 312_500_003);
    assert_eq!(w[0].tdp.merkle_path[0].0, [3; 32]);
    // Template 2 was for the same tip and is gone: a later prev hash naming it activates
    // nothing.
    assert!(works(s.on_message(prev_hash(2, 0xbb, 1_700_000_100)).unwrap()).is_empty());
    // A non-future template is work at once, on the latest tip.
    let w = works(s.on_message(template(4, false, 12)).unwrap());
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].template.prev_hash.0, [0xbb; 32]);
    assert_eq!(w[0].tdp.template_id, 4);
}
