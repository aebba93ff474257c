//! The JDC's core without sockets, on a virtual clock: templates declared and set on the pool,
//! an upstream lost, rejoins with growing waits, and blocks found meanwhile pushed late.

use std::sync::Arc;

use jdc::core::{CoreConfig, CoreEvent, JdcCore, Link, Setup, Transmit};
use jdc::fallback::FallbackConfig;
use jdc::fuzz_support::{self, pool_script};
use pool::engine::TappedShare;
use pool::jobs::{Generation, JobBook, JobConfig};
use pool::stats::Dependency;
use pool::Timestamp;
use primitives::bitcoin::consensus::serialize;
use primitives::bitcoin::{Amount, ScriptBuf, TxOut};
use primitives::{Hash256, Target};
use sv2::messages::job_declaration::{
    AllocateMiningJobTokenSuccess, DeclareMiningJobSuccess, PushSolution,
};
use sv2::messages::template_distribution::RequestTransactionDataSuccess;
use sv2::messages::{JobDeclaration, Message, Mining};

const PREFIX: [u8; 4] = [0xfa, 0xce, 0x00, 0x01];
const SIZE: usize = fuzz_support::EXTRANONCE_SIZE;

/// A JDS and a pool channel set up, the channel open with `prefix`.
fn setup(prefix: &[u8]) -> Setup {
    let mut target = [0xff; 32];
    target[31] = 0;
    fuzz_support::setup(
        prefix.to_vec(),
        Target::from_le_bytes(&target),
        pool_script(),
        0,
    )
}

fn config() -> CoreConfig {
    CoreConfig {
        tag: b"/farm/".to_vec(),
        extranonce_len: PREFIX.len() + SIZE,
        fallback: FallbackConfig::default(),
        fallback_payout: None,
    }
}

/// The farm's node's templates, as the embedded pool adopts them.
struct Node {
    book: JobBook,
}

impl Node {
    fn new() -> Node {
        Node {
            book: JobBook::new(JobConfig {
                coinbase_tag: b"/farm/".to_vec(),
                extranonce_len: PREFIX.len() + SIZE,
            }),
        }
    }

    fn template(&mut self, template_id: u64) -> Arc<Generation> {
        let (template, tdp) =
            fuzz_support::farm_template(template_id, Hash256([0x33; 32]), 0x207f_ffff);
        self.book
            .handle_tdp_template(template, tdp, Timestamp::from_millis(0))
    }
}

fn no_txs(template_id: u64) -> pool::tp::TxDataReply {
    Ok(RequestTransactionDataSuccess {
        template_id,
        excess_data: Vec::new(),
        transaction_list: Vec::new(),
    })
}

fn block(g: &Generation, nonce: u32) -> TappedShare {
    TappedShare {
        generation: g.id,
        job_id: 1,
        extranonce: [&PREFIX[..], &[7; SIZE]].concat(),
        version: 0x2000_0000,
        ntime: 1_750_000_001,
        nonce,
        hash: Hash256([0; 32]),
        block: true,
        worker: "lab.rig".into(),
    }
}

/// `n` milliseconds on the core's clock.
fn ms(n: u64) -> Timestamp {
    Timestamp::from_millis(n)
}

fn transmits(core: &mut JdcCore) -> Vec<Transmit> {
    std::iter::from_fn(|| core.poll_transmit()).collect()
}

fn events(core: &mut JdcCore) -> Vec<CoreEvent> {
    std::iter::from_fn(|| core.poll_event()).collect()
}

/// The template's transactions fetched, and what the core sent the JDS for it.
fn declare(core: &mut JdcCore, g: &Arc<Generation>, now: Timestamp) -> Vec<Transmit> {
    let fetch = events(core);
    assert!(
        fetch.contains(&CoreEvent::FetchTxData {
            generation: g.id,
            template_id: g.tdp.as_ref().unwrap().template_id,
        }),
        "{fetch:?}"
    );
    core.handle_tx_data(g.id, no_txs(g.tdp.as_ref().unwrap().template_id), now);
    transmits(core)
}

fn declared_request(ts: &[Transmit]) -> u32 {
    ts.iter()
        .find_map(|t| match &t.message {
            Message::JobDeclaration(JobDeclaration::DeclareMiningJob(m)) => {
                assert_eq!(t.to, Link::Jds);
                Some(m.request_id)
            }
            _ => None,
        })
        .expect("a DeclareMiningJob")
}

/// What the core sends, a JDS answering its token requests on the way.
fn with_tokens(core: &mut JdcCore, now: Timestamp) -> Vec<Transmit> {
    let mut all = Vec::new();
    loop {
        let sent = transmits(core);
        if sent.is_empty() {
            return all;
        }
        for t in &sent {
            if let Message::JobDeclaration(JobDeclaration::AllocateMiningJobToken(a)) = &t.message {
                let outputs = vec![TxOut {
                    value: Amount::ZERO,
                    script_pubkey: pool_script(),
                }];
                let token = AllocateMiningJobTokenSuccess {
                    request_id: a.request_id,
                    mining_job_token: vec![0x71; 4],
                    coinbase_outputs: serialize(&outputs),
                };
                core.handle_jds_message(token.into(), now);
            }
        }
        all.extend(sent);
    }
}

fn accepted(request_id: u32) -> Message {
    DeclareMiningJobSuccess {
        request_id,
        new_mining_job_token: vec![0x55; 8],
    }
    .into()
}

fn pushes(ts: &[Transmit]) -> Vec<PushSolution> {
    ts.iter()
        .filter_map(|t| match &t.message {
            Message::JobDeclaration(JobDeclaration::PushSolution(p)) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

/// A core whose first template the JDS accepted, and that template.
fn declared_once(template_id: u64) -> (JdcCore, Arc<Generation>) {
    let mut core = JdcCore::new(config(), setup(&PREFIX), Timestamp::ZERO);
    let g = Node::new().template(template_id);
    core.handle_generation(g.clone(), ms(0));
    let request = declared_request(&declare(&mut core, &g, ms(0)));
    core.handle_jds_message(accepted(request), ms(0));
    transmits(&mut core);
    (core, g)
}

#[test]
fn a_template_is_fetched_declared_and_set_on_the_pool_under_the_jds_token() {
    let mut node = Node::new();
    let mut core = JdcCore::new(config(), setup(&PREFIX), Timestamp::ZERO);
    assert!(transmits(&mut core).is_empty());
    let g = node.template(11);
    core.handle_generation(g.clone(), ms(5));
    let sent = declare(&mut core, &g, ms(10));
    let request = declared_request(&sent);
    core.handle_jds_message(accepted(request), ms(20));
    let sent = transmits(&mut core);
    let set = sent
        .iter()
        .find_map(|t| match &t.message {
            Message::Mining(Mining::SetCustomMiningJob(m)) => Some((t.to, m.clone())),
            _ => None,
        })
        .expect("SetCustomMiningJob");
    assert_eq!(set.0, Link::Pool);
    assert_eq!(set.1.token, vec![0x55; 8], "the token the JDS gave");
    assert_eq!(set.1.prev_hash, [0x33; 32]);
    assert_eq!(core.stats().declared, 1);
    // A block on the declared template goes to the JDS at once.
    core.handle_share(block(&g, 9), ms(30));
    let sent = transmits(&mut core);
    let p = pushes(&sent);
    assert_eq!(p.len(), 1);
    assert_eq!((p[0].nonce, p[0].nbits), (9, 0x207f_ffff));
    assert_eq!(core.stats().solutions_pushed, 1);
    // The declaration spent the token; the one asked for in its place is awaited (the
    // fallback's token timeout), and its answer ends the wait.
    assert_eq!(core.poll_timeout(), Some(ms(10 + 10_000)));
    core.handle_timeout(ms(10_009));
    assert!(core.is_up(Link::Jds), "not yet");
    core.handle_timeout(ms(10_010));
    assert!(
        !core.is_up(Link::Jds) && !core.is_up(Link::Pool),
        "no token in time: left"
    );
    assert_eq!(
        core.stats().fallback.as_deref(),
        Some("the JDS did not answer a token request")
    );
}

#[test]
fn rejoins_wait_a_second_then_twice_as_long_after_each_failure_up_to_a_minute() {
    let mut core = JdcCore::new(config(), setup(&PREFIX), Timestamp::ZERO);
    core.handle_link_lost(Link::Pool, "reset by peer".into(), ms(1_000));
    let ev = events(&mut core);
    assert!(ev.contains(&CoreEvent::Close(Link::Pool)));
    assert!(
        ev.contains(&CoreEvent::Close(Link::Jds)),
        "leaving closes both"
    );
    assert!(ev.contains(&CoreEvent::Dependency {
        which: Dependency::Pool,
        attached: false,
        why: Some("reset by peer".into()),
    }));
    assert!(!core.is_up(Link::Jds) && !core.is_up(Link::Pool));
    assert!(core
        .stats()
        .upstream_lost
        .as_deref()
        .unwrap()
        .contains("reset by peer"));
    let mut now = ms(1_000);
    let mut waits = Vec::new();
    for _ in 0..8 {
        let at = core.poll_timeout().expect("a rejoin is scheduled");
        waits.push(at.millis_since(now));
        core.handle_timeout(Timestamp::from_nanos(at.as_nanos() - 1));
        assert!(events(&mut core).is_empty(), "not before its time");
        core.handle_timeout(at);
        assert_eq!(events(&mut core), [CoreEvent::Rejoin]);
        assert_eq!(core.poll_timeout(), None, "one attempt at a time");
        now = at.plus_millis(300);
        core.handle_join_failed("connection refused".into(), now);
    }
    assert_eq!(
        waits,
        [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
    );
    assert_eq!(core.stats().rejoin_failures, 8);
    // A channel whose extranonce layout differs from the devices' ranges is refused.
    let at = core.poll_timeout().unwrap();
    core.handle_timeout(at);
    events(&mut core);
    assert!(!core.handle_joined(setup(&[1, 2, 3, 4, 5]), at.plus_millis(10)));
    assert!(!core.is_up(Link::Pool));
    assert!(core
        .stats()
        .rejoin_error
        .as_deref()
        .unwrap()
        .contains("extranonce layout"));
    // One that fits is taken: both links up, the devices moved under its prefix.
    let at = core.poll_timeout().unwrap();
    core.handle_timeout(at);
    events(&mut core);
    let moved = [0xfa, 0xce, 0x00, 0x02];
    assert!(core.handle_joined(setup(&moved), at.plus_millis(10)));
    assert!(core.is_up(Link::Jds) && core.is_up(Link::Pool));
    let ev = events(&mut core);
    assert!(
        ev.contains(&CoreEvent::ExtranonceBase(moved.to_vec())),
        "{ev:?}"
    );
    assert!(
        ev.contains(&CoreEvent::PayoutOverride(None)),
        "the same payout"
    );
    assert_eq!(core.stats().rejoined, 1);
}

#[test]
fn a_block_found_while_the_jds_is_away_is_declared_again_and_pushed_when_it_returns() {
    let (mut core, g) = declared_once(21);

    core.handle_link_lost(Link::Jds, "eof".into(), ms(100));
    // Leaving, the core fetches the newest template again to keep its declaration.
    let kept = declare(&mut core, &g, ms(110));
    assert!(kept.is_empty(), "nothing goes to a JDS that is gone");
    core.handle_share(block(&g, 77), ms(200));
    assert!(pushes(&transmits(&mut core)).is_empty());
    assert_eq!(core.stats().solutions_pushed, 0);

    let at = core.poll_timeout().unwrap();
    core.handle_timeout(at);
    assert_eq!(events(&mut core), [CoreEvent::Rejoin]);
    assert!(core.handle_joined(setup(&PREFIX), at.plus_millis(50)));
    events(&mut core);
    // The block's template first, declared again on the new connection...
    let sent = transmits(&mut core);
    let request = declared_request(&sent);
    assert!(
        pushes(&sent).is_empty(),
        "not before the JDS takes the template"
    );
    assert_eq!(
        core.poll_timeout(),
        Some(at.plus_millis(50 + 10_000)),
        "its answer is awaited"
    );
    core.handle_jds_message(accepted(request), at.plus_millis(60));
    // ...then the block, pushed late.
    let sent = transmits(&mut core);
    let p = pushes(&sent);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].nonce, 77);
    assert_eq!(core.stats().solutions_pushed_late, 1);
    assert_eq!(core.stats().solutions_pushed, 1);
}

#[test]
fn a_push_whose_send_fails_is_kept_for_the_jds_return() {
    let (mut core, g) = declared_once(31);

    core.handle_share(block(&g, 5), ms(10));
    let t = core.poll_transmit().expect("the push");
    assert!(matches!(
        t.message,
        Message::JobDeclaration(JobDeclaration::PushSolution(_))
    ));
    assert_eq!(core.stats().solutions_pushed, 1);
    core.handle_send_failed(t, "broken pipe".into(), ms(11));
    assert_eq!(core.stats().solutions_pushed, 0, "it did not go");
    assert!(!core.is_up(Link::Jds));
    assert!(core
        .stats()
        .upstream_lost
        .as_deref()
        .unwrap()
        .contains("broken pipe"));
    // Back: declared again, then pushed.
    let fetch: Vec<_> = events(&mut core)
        .into_iter()
        .filter(|e| matches!(e, CoreEvent::FetchTxData { .. }))
        .collect();
    assert_eq!(fetch.len(), 1, "the template's declaration fetched again");
    core.handle_tx_data(g.id, no_txs(31), ms(20));
    let at = core.poll_timeout().unwrap();
    core.handle_timeout(at);
    events(&mut core);
    assert!(core.handle_joined(setup(&PREFIX), at));
    let request = declared_request(&transmits(&mut core));
    core.handle_jds_message(accepted(request), at.plus_millis(1));
    let p = pushes(&transmits(&mut core));
    assert_eq!(p.iter().map(|p| p.nonce).collect::<Vec<_>>(), [5]);
    assert_eq!(core.stats().solutions_pushed_late, 1);
}

#[test]
fn with_a_fallback_address_the_devices_mine_for_the_farm_and_its_blocks_are_not_pushed() {
    let mut node = Node::new();
    let farm = ScriptBuf::from_bytes([&[0x00, 0x14][..], &[0x99; 20]].concat());
    let mut core = JdcCore::new(
        CoreConfig {
            fallback_payout: Some(farm.clone()),
            ..config()
        },
        setup(&PREFIX),
        Timestamp::ZERO,
    );
    let g = node.template(41);
    core.handle_generation(g.clone(), ms(0));
    declare(&mut core, &g, ms(0));
    core.handle_link_lost(Link::Jds, "eof".into(), ms(5));
    let ev = events(&mut core);
    assert!(
        ev.contains(&CoreEvent::PayoutOverride(Some(farm))),
        "{ev:?}"
    );
    assert!(core.stats().solo);
    core.handle_share(block(&g, 3), ms(6));
    let at = core.poll_timeout().unwrap();
    core.handle_timeout(at);
    events(&mut core);
    assert!(core.handle_joined(setup(&PREFIX), at));
    let ev = events(&mut core);
    assert!(
        ev.contains(&CoreEvent::PayoutOverride(None)),
        "the pool's again"
    );
    assert!(!core.stats().solo);
    // The newest template is declared for the pool; the farm's block is not the pool's.
    let sent = transmits(&mut core);
    assert!(pushes(&sent).is_empty());
}

#[test]
fn a_late_push_whose_send_fails_keeps_every_waiting_block_past_the_answer_timeout() {
    let (mut core, g) = declared_once(51);
    core.handle_link_lost(Link::Jds, "eof".into(), ms(100));
    declare(&mut core, &g, ms(110));
    // Two blocks on the template while the JDS is away.
    core.handle_share(block(&g, 1), ms(200));
    core.handle_share(block(&g, 2), ms(201));
    let at = core.poll_timeout().unwrap();
    core.handle_timeout(at);
    events(&mut core);
    assert!(core.handle_joined(setup(&PREFIX), at));
    events(&mut core);
    let request = declared_request(&transmits(&mut core));
    core.handle_jds_message(accepted(request), at.plus_millis(10));
    // The first block's push goes out, and its send fails: the JDS is gone again.
    let t = loop {
        let t = core.poll_transmit().expect("the push");
        if matches!(
            t.message,
            Message::JobDeclaration(JobDeclaration::PushSolution(_))
        ) {
            break t;
        }
    };
    core.handle_send_failed(t, "broken pipe".into(), at.plus_millis(11));
    assert_eq!(core.stats().solutions_pushed_late, 0);
    events(&mut core);
    // Well past the JDS's answer timeout (the rejoin attempt due meanwhile starts now):
    // neither block is given up on.
    let back = at.plus_millis(11 + 15_000);
    core.handle_timeout(back);
    assert!(events(&mut core).contains(&CoreEvent::Rejoin));
    assert!(transmits(&mut core).is_empty());
    // Back: both blocks, each declared again and pushed, in the order found.
    assert!(core.handle_joined(setup(&PREFIX), back));
    events(&mut core);
    let mut nonces = Vec::new();
    let mut sent = with_tokens(&mut core, back);
    for step in 0..2 {
        let request = declared_request(&sent);
        core.handle_jds_message(accepted(request), back.plus_millis(1 + step));
        sent = with_tokens(&mut core, back.plus_millis(1 + step));
        nonces.extend(pushes(&sent).iter().map(|p| p.nonce));
        events(&mut core);
    }
    assert_eq!(nonces, [1, 2]);
    assert_eq!(core.stats().solutions_pushed_late, 2);
}
