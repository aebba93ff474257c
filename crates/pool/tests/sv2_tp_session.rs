//! The Template Distribution client's sans-IO session: setup, and which templates become
//! minable work when.

use pool::tp::{TpEvent, TpSession, TpSessionConfig, TpSessionError, TpWork};
use primitives::coinbase::bip34_height_push;
use std::time::Duration;

use primitives::{CompactTarget, Target, Timestamp};
use sv2::messages::common::{SetupConnectionError, SetupConnectionSuccess};
use sv2::messages::template_distribution::{
    NewTemplate, RequestTransactionDataError, RequestTransactionDataSuccess, SetNewPrevHash,
};
use sv2::messages::{Common, TemplateDistribution};
use sv2::Message;

/// What the session produced for one input, as one list: its messages, then its events (the
/// order its shell takes them in).
#[derive(Debug)]
enum Output {
    Send(Message),
    Work(TpWork),
    TxData(Result<RequestTransactionDataSuccess, RequestTransactionDataError>),
}

/// `n` milliseconds on the session's clock.
fn ms(n: u64) -> Timestamp {
    Timestamp::from_millis(n)
}

fn drain(s: &mut TpSession) -> Vec<Output> {
    let mut out: Vec<Output> = std::iter::from_fn(|| s.poll_transmit())
        .map(Output::Send)
        .collect();
    out.extend(std::iter::from_fn(|| s.poll_event()).map(|e| match e {
        TpEvent::Work(w) => Output::Work(w),
        TpEvent::TxData(d) => Output::TxData(d),
    }));
    out
}

fn feed(s: &mut TpSession, m: Message, now: Timestamp) -> Result<Vec<Output>, TpSessionError> {
    s.handle_message(m, now)?;
    Ok(drain(s))
}

fn timeout(s: &mut TpSession, now: Timestamp) -> Vec<Output> {
    s.handle_timeout(now);
    drain(s)
}

fn ready() -> TpSession {
    ready_with(TpSessionConfig::default())
}

fn ready_with(cfg: TpSessionConfig) -> TpSession {
    let mut s = TpSession::new(cfg);
    let out = feed(
        &mut s,
        SetupConnectionSuccess {
            used_version: 2,
            flags: 0,
        }
        .into(),
        ms(0),
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
    let out = feed(&mut s, ok.clone().into(), ms(0)).unwrap();
    assert!(matches!(&out[..], [Output::TxData(Ok(d))] if *d == ok));
    let err = RequestTransactionDataError {
        template_id: 6,
        error_code: "stale-template-id".into(),
    };
    let out = feed(&mut s, err.clone().into(), ms(0)).unwrap();
    assert!(matches!(&out[..], [Output::TxData(Err(e))] if *e == err));
}

#[test]
fn setup_refused_is_an_error_and_templates_before_setup_are_a_protocol_error() {
    let mut s = TpSession::new(TpSessionConfig::default());
    assert!(matches!(
        s.setup_connection(),
        Message::Common(Common::SetupConnection(ref c)) if c.protocol == 2 && c.flags == 0
    ));
    let e = feed(
        &mut s,
        SetupConnectionError {
            flags: 0,
            error_code: "unsupported-protocol".into(),
        }
        .into(),
        ms(0),
    )
    .unwrap_err();
    assert_eq!(
        e,
        TpSessionError::SetupRefused("unsupported-protocol".into())
    );
    let mut s = TpSession::new(TpSessionConfig::default());
    assert!(matches!(
        feed(&mut s, template(1, true, 10), ms(0)),
        Err(TpSessionError::Protocol(_))
    ));
}

#[test]
fn future_templates_wait_for_their_prev_hash_and_others_follow_the_tip() {
    let mut s = ready();
    // No tip yet: a non-future template cannot be mined.
    assert!(works(feed(&mut s, template(1, false, 10), ms(0)).unwrap()).is_empty());
    // Future templates wait.
    assert!(works(feed(&mut s, template(2, true, 11), ms(0)).unwrap()).is_empty());
    assert!(works(feed(&mut s, template(3, true, 11), ms(0)).unwrap()).is_empty());
    // The prev hash names template 3: that one becomes work, on the new tip.
    let w = works(feed(&mut s, prev_hash(3, 0xaa, 1_700_000_000), ms(0)).unwrap());
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
    assert!(works(feed(&mut s, prev_hash(2, 0xbb, 1_700_000_100), ms(0)).unwrap()).is_empty());
    // A non-future template is work at once, on the latest tip.
    let w = works(feed(&mut s, template(4, false, 12), ms(0)).unwrap());
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].template.prev_hash.0, [0xbb; 32]);
    assert_eq!(w[0].tdp.template_id, 4);
}

/// A session that fetches every template's transactions, as a pool with a node beside its
/// provider runs it.
fn fetching() -> TpSession {
    ready_with(TpSessionConfig {
        fetch_transactions: true,
        hold_limit: Duration::from_secs(5),
        ..TpSessionConfig::default()
    })
}

fn data(id: u64) -> Message {
    RequestTransactionDataSuccess {
        template_id: id,
        excess_data: Vec::new(),
        transaction_list: vec![vec![id as u8]],
    }
    .into()
}

/// The template ids of the `RequestTransactionData` sent, and the works handed out, in order.
fn split(out: Vec<Output>) -> (Vec<u64>, Vec<u64>) {
    let (mut asked, mut works) = (Vec::new(), Vec::new());
    for o in out {
        match o {
            Output::Send(Message::TemplateDistribution(
                TemplateDistribution::RequestTransactionData(r),
            )) => asked.push(r.template_id),
            Output::Send(m) => panic!("unexpected send {}", m.name()),
            Output::Work(w) => works.push(w.tdp.template_id),
            Output::TxData(_) => {}
        }
    }
    (asked, works)
}

#[test]
fn a_fetching_session_asks_for_every_template_and_hands_out_a_new_tip_at_once() {
    let mut s = fetching();
    // The future template's transactions are asked for before its prev hash arrives.
    assert_eq!(
        split(feed(&mut s, template(1, true, 10), ms(0)).unwrap()),
        (vec![1], vec![])
    );
    // A new tip is work at once: mining the old tip would be wasted.
    assert_eq!(
        split(feed(&mut s, prev_hash(1, 0xaa, 1_700_000_000), ms(1)).unwrap()),
        (vec![], vec![1])
    );
    assert_eq!(s.poll_timeout(), None);
    // Its answer comes later and is handed on; nothing else waits on it.
    let out = feed(&mut s, data(1), ms(30)).unwrap();
    assert!(matches!(&out[..], [Output::TxData(Ok(d))] if d.template_id == 1));
}

#[test]
fn a_same_tip_template_waits_for_its_transactions() {
    let mut s = fetching();
    feed(&mut s, template(1, true, 10), ms(0)).unwrap();
    feed(&mut s, prev_hash(1, 0xaa, 1_700_000_000), ms(0)).unwrap();
    // A refresh of the tip is asked for and held: miners keep template 1 meanwhile.
    assert_eq!(
        split(feed(&mut s, template(2, false, 10), ms(100)).unwrap()),
        (vec![2], vec![])
    );
    assert_eq!(s.poll_timeout(), Some(ms(5_100)));
    // Another template's answer releases nothing.
    assert_eq!(
        split(feed(&mut s, data(1), ms(150)).unwrap()).1,
        Vec::<u64>::new()
    );
    // Its own answer hands it out, after the answer (which the shell keeps first).
    let out = feed(&mut s, data(2), ms(200)).unwrap();
    assert!(matches!(
        &out[..],
        [Output::TxData(Ok(d)), Output::Work(w)] if d.template_id == 2 && w.tdp.template_id == 2
    ));
    assert_eq!(s.poll_timeout(), None);
    // A provider that has no transactions for it answers with an error: handed out all the
    // same, since waiting longer brings nothing.
    feed(&mut s, template(3, false, 10), ms(300)).unwrap();
    let out = feed(
        &mut s,
        RequestTransactionDataError {
            template_id: 3,
            error_code: "template-id-not-found".into(),
        }
        .into(),
        ms(310),
    )
    .unwrap();
    assert!(
        matches!(&out[..], [Output::TxData(Err(_)), Output::Work(w)] if w.tdp.template_id == 3)
    );
}

#[test]
fn held_templates_go_out_as_answered_or_the_newest_at_the_limit_and_a_new_tip_drops_them() {
    let mut s = fetching();
    feed(&mut s, template(1, true, 10), ms(0)).unwrap();
    feed(&mut s, prev_hash(1, 0xaa, 1_700_000_000), ms(0)).unwrap();
    // Refreshes faster than the provider answers queue up behind each other.
    feed(&mut s, template(2, false, 10), ms(1_000)).unwrap();
    feed(&mut s, template(3, false, 10), ms(2_000)).unwrap();
    feed(&mut s, template(4, false, 10), ms(3_000)).unwrap();
    assert_eq!(s.poll_timeout(), Some(ms(6_000)));
    // Template 3's answer hands it out and drops template 2, older; 4 still waits.
    assert_eq!(split(feed(&mut s, data(3), ms(3_100)).unwrap()).1, vec![3]);
    assert_eq!(
        split(feed(&mut s, data(2), ms(3_200)).unwrap()).1,
        Vec::<u64>::new()
    );
    assert_eq!(s.poll_timeout(), Some(ms(8_000)));
    feed(&mut s, template(5, false, 10), ms(4_000)).unwrap();
    // Not before the oldest's limit; at it, the newest goes out without its transactions.
    assert!(timeout(&mut s, ms(7_999)).is_empty());
    assert_eq!(split(timeout(&mut s, ms(8_000))).1, vec![5]);
    assert_eq!(s.poll_timeout(), None);
    assert_eq!(
        split(feed(&mut s, data(4), ms(8_050)).unwrap()).1,
        Vec::<u64>::new()
    );
    // A new tip drops a held refresh of the old one.
    feed(&mut s, template(6, false, 10), ms(9_000)).unwrap();
    feed(&mut s, template(7, true, 11), ms(9_001)).unwrap();
    assert_eq!(
        split(feed(&mut s, prev_hash(7, 0xbb, 1_700_000_600), ms(9_002)).unwrap()).1,
        vec![7]
    );
    assert_eq!(s.poll_timeout(), None);
    assert_eq!(
        split(feed(&mut s, data(6), ms(9_050)).unwrap()).1,
        Vec::<u64>::new()
    );
}

#[test]
fn a_template_asked_for_twice_is_requested_once() {
    let mut s = fetching();
    feed(&mut s, template(1, true, 10), ms(0)).unwrap();
    // Asked for at its arrival: a second asker (a found block) sends nothing more.
    assert!(!s.request_transaction_data(1));
    feed(&mut s, data(1), ms(5)).unwrap();
    // Answered: a new request goes out.
    assert!(s.request_transaction_data(1));
    // A session that does not fetch asks for nothing by itself and holds nothing.
    let mut s = ready();
    feed(&mut s, template(1, true, 10), ms(0)).unwrap();
    feed(&mut s, prev_hash(1, 0xaa, 1_700_000_000), ms(0)).unwrap();
    assert_eq!(
        split(feed(&mut s, template(2, false, 10), ms(0)).unwrap()),
        (vec![], vec![2])
    );
}

#[test]
fn refreshes_faster_than_any_answer_still_go_out_at_the_first_ones_limit() {
    let mut s = fetching();
    feed(&mut s, template(1, true, 10), ms(0)).unwrap();
    feed(&mut s, prev_hash(1, 0xaa, 1_700_000_000), ms(0)).unwrap();
    // Twenty refreshes 400 ms apart, none answered: more than the session holds at once.
    for i in 0..20u64 {
        feed(&mut s, template(2 + i, false, 10), ms(100 + 400 * i)).unwrap();
        let now = ms(100 + 400 * i);
        if now >= ms(5_100) {
            break;
        }
    }
    // The first was held at 100 ms: by 5.1 s the newest goes out, however many were dropped.
    assert_eq!(s.poll_timeout(), Some(ms(5_100)));
    let out = split(timeout(&mut s, ms(5_100))).1;
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(s.poll_timeout(), None);
}
