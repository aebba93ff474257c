//! Replays the committed corpus of `crates/jds/fuzz` through the same functions the fuzz
//! targets run (`jds::fuzz_support`), on stable: every input that once added coverage, and
//! every regression, must still hold the invariants. `write_seeds` (ignored) writes the seed
//! inputs into the corpus.

use testkit::{corpus, replay_corpora};

use jds::fuzz_support::script::{coinbase_input, JdsScript};
use jds::fuzz_support::{declared_coinbase, jds_coinbase, jds_session};
use primitives::Hash256;
use sv2::messages::common::{job_declaration_flags, protocol, SetupConnection};
use sv2::messages::job_declaration::{AllocateMiningJobToken, DeclareMiningJob};
use sv2::Message;

replay_corpora! {
    every_jds_session_corpus_input_holds_the_invariants: "jds_session", 10, jds_session;
    every_jds_coinbase_corpus_input_holds_the_invariants: "jds_coinbase", 10, jds_coinbase;
}

/// A segwit coinbase committing to the wtxids, paying the pool, extranonce of 8 bytes.
const SEGWIT: (u8, u8, u8) = (5, 0, 0);
/// The same without witness data (for transactions without any).
const LEGACY: (u8, u8, u8) = (0, 0, 0);

/// Set up, one token allocated (request id 1).
fn ready(config: u8, mempool: u8) -> JdsScript {
    JdsScript::new(config, mempool).setup(0).allocate(1)
}

fn session_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let setup = SetupConnection {
        flags: job_declaration_flags::DECLARE_TX_DATA,
        endpoint_host: "127.0.0.1".into(),
        endpoint_port: 34264,
        vendor: "seed".into(),
        ..SetupConnection::new(protocol::JOB_DECLARATION)
    };
    let allocate = AllocateMiningJobToken {
        user_identifier: "farm".into(),
        request_id: 7,
    };
    let (prefix, suffix) = declared_coinbase(0, 0, 0, &[]);
    let declare = DeclareMiningJob {
        request_id: 8,
        mining_job_token: vec![1; 49],
        version: 0x2000_0000,
        coinbase_tx_prefix: prefix,
        coinbase_tx_suffix: suffix,
        wtxid_list: Vec::new(),
        excess_data: Vec::new(),
    };
    vec![
        (
            "declare-known-then-push",
            ready(0, 0xff)
                .declare(1, 0, SEGWIT, &[0, 1, 2, 3])
                .push(0, 0, 1)
                .push(0, 0, 2)
                .push(0, 0, 3)
                .push(0, 0, 4)
                .push(0, 1, 5)
                .push(1, 0, 6)
                .push(2, 0, 7)
                .build(),
        ),
        (
            "missing-then-provided",
            ready(0, 0x03)
                .declare(2, 0, SEGWIT, &[0, 1, 8, 9, 12])
                .tick_ms(300)
                .provide(0, 0)
                .push(0, 0, 11)
                .push(0, 2, 12)
                .push(0, 3, 13)
                .build(),
        ),
        (
            "missing-timeout",
            ready(0x08, 0x01)
                .declare(3, 0, SEGWIT, &[0, 10])
                .tick_ms(500)
                .tick_ms(501)
                .provide(0, 0)
                .provide(1, 0)
                .build(),
        ),
        ("provided-wrong", {
            let mut s = JdsScript::new(0, 0);
            s = s.setup(0);
            for mode in 1..=6u8 {
                s = s
                    .allocate(mode)
                    .declare(10 + mode, 0, SEGWIT, &[8, 9, 10])
                    .provide(0, mode | 0x18);
            }
            s.provide(5, 0).build()
        }),
        (
            "tokens",
            ready(0, 0xff)
                .declare(1, 0, SEGWIT, &[0])
                .declare(2, 1, SEGWIT, &[0])
                .allocate(2)
                .declare(3, 0x12, SEGWIT, &[0])
                .declare(4, 3, SEGWIT, &[0])
                .declare(5, 4, SEGWIT, &[0])
                .declare(6, 5, SEGWIT, &[0])
                .declare(7, 0x56, SEGWIT, &[0])
                .declare(8, 0, SEGWIT, &[0])
                .build(),
        ),
        (
            "token-expired",
            ready(0x40, 0xff)
                .tick_ms(1000)
                .tick_ms(1)
                .declare(1, 0, SEGWIT, &[0])
                .allocate(2)
                .back_s(5)
                .declare(2, 0, SEGWIT, &[0])
                .build(),
        ),
        (
            "two-connections",
            ready(0, 0x0f)
                .on(1)
                .setup(0)
                .declare(1, 0, SEGWIT, &[0, 1])
                .on(0)
                .declare(2, 1, SEGWIT, &[0, 1])
                .allocate(3)
                .declare(3, 0, SEGWIT, &[2, 3, 9])
                .on(1)
                .push(0, 0, 1)
                .tick_s(20)
                .build(),
        ),
        ("bad-coinbases", {
            let mut s = JdsScript::new(0, 0xff).setup(0);
            let variants: [(u8, u8, u8); 22] = [
                (0x08, 0, 0),
                (0x10, 0, 0),
                (0x18, 0, 0),
                (0x06, 0, 0),
                (0x01, 0, 0),
                (0x07, 0, 0),
                (0x85, 0, 0),
                (0x65, 0, 0),
                (0x45, 0, 0),
                (0x05, 0xc1, 0),
                (0x05, 0x40, 0),
                (0x05, 0x3f, 0),
                (0x05, 0, 1),
                (0x05, 0, 2),
                (0x05, 0, 0x0b),
                (0x05, 0, 0x13),
                (0x05, 0, 0x04),
                (0x05, 0, 0x05),
                (0x05, 0, 0x06),
                (0x05, 0, 0x1f),
                (0x00, 0, 0x0b),
                (0x00, 0x80, 0),
            ];
            for (i, cb) in variants.into_iter().enumerate() {
                s = s.allocate(i as u8).declare(i as u8, 0, cb, &[0, 2]);
            }
            s.build()
        }),
        (
            "legacy-coinbase",
            ready(0, 0xff)
                .declare(1, 0, LEGACY, &[1, 3, 5])
                .push(0, 0, 1)
                .push(0, 0, 2)
                .allocate(2)
                .declare(2, 0, LEGACY, &[0, 1])
                .build(),
        ),
        (
            "rate-limit",
            JdsScript::new(0x01, 0)
                .setup(0)
                .allocate(1)
                .allocate(2)
                .allocate(3)
                .tick_s(1)
                .allocate(4)
                .allocate(5)
                .allocate(6)
                .build(),
        ),
        (
            "setup-refusals",
            JdsScript::new(0, 0)
                .setup(1)
                .setup(0x10)
                .setup(0x20)
                .setup(0x08)
                .setup(0x04)
                .setup(0x02)
                .setup(0)
                .setup(0)
                .allocate(1)
                .build(),
        ),
        (
            "before-setup-and-unexpected",
            JdsScript::new(0, 0)
                .allocate(1)
                .push(0, 0, 1)
                .setup(0)
                .unexpected(0)
                .setup(0)
                .unexpected(1)
                .setup(0)
                .unexpected(2)
                .setup(0)
                .unexpected(3)
                .setup(0)
                .unexpected(4)
                .setup(0)
                .unexpected(5)
                .setup(0)
                .unexpected(6)
                .setup(0)
                .unexpected(0x86)
                .build(),
        ),
        (
            "raw-messages",
            JdsScript::new(0, 0xff)
                .raw_message(&Message::from(setup))
                .raw_message(&Message::from(allocate))
                .raw_message(&Message::from(declare))
                .declare(9, 0, LEGACY, &[])
                .raw(0x58, &[1, 2, 3])
                .allocate(3)
                .raw(0x99, &[])
                .allocate(4)
                .build(),
        ),
        (
            "pending-limit",
            JdsScript::new(0x10, 0)
                .setup(0)
                .allocate(1)
                .declare(1, 0, SEGWIT, &[8])
                .allocate(2)
                .declare(2, 0, SEGWIT, &[9])
                .provide(0, 0)
                .declare(3, 0, SEGWIT, &[9])
                .build(),
        ),
        (
            "same-request-id-pending",
            JdsScript::new(0, 0)
                .setup(0)
                .allocate(1)
                .declare(1, 0, SEGWIT, &[8])
                .allocate(2)
                .declare(1, 0, SEGWIT, &[9])
                .provide(0, 0)
                .build(),
        ),
        (
            "mempool-changes",
            JdsScript::new(0, 0)
                .mempool(8, false)
                .mempool(9, false)
                .setup(0)
                .allocate(1)
                .declare(1, 0, SEGWIT, &[8, 9, 10])
                .mempool(8, true)
                .mempool(10, false)
                .provide(0, 0)
                .allocate(2)
                .declare(2, 0, SEGWIT, &[8, 9, 10])
                .build(),
        ),
        (
            "duplicate-and-made-up-wtxids",
            ready(0, 0xff)
                .declare(1, 0, SEGWIT, &[0, 0xfe])
                .allocate(2)
                .declare(2, 0, SEGWIT, &[0, 0xf3])
                .provide(0, 0)
                .build(),
        ),
        (
            "hang-up-with-pending",
            ready(0, 0)
                .declare(1, 0, SEGWIT, &[8])
                .hang_up()
                .setup(0)
                .provide(0, 0)
                .allocate(2)
                .declare(1, 0, SEGWIT, &[8])
                .tick_s(11)
                .build(),
        ),
        (
            // The scriptSig is the extranonce alone: the BIP34 height is the miner's.
            "height-in-the-extranonce",
            ready(0, 0xff)
                .declare(1, 0, (5, 0xc0, 0), &[0])
                .push(12, 0, 1)
                .push(12, 0, 2)
                .push(12, 0, 3)
                .push(12, 0, 4)
                .push(8, 0, 5)
                .push(8, 0, 6)
                .build(),
        ),
        (
            "clock-back",
            ready(0x01, 0xff)
                .allocate(2)
                .allocate(3)
                .back_s(60)
                .allocate(4)
                .tick_s(61)
                .allocate(5)
                .declare(1, 0, SEGWIT, &[1])
                .build(),
        ),
    ]
}

fn coinbase_seeds() -> Vec<(String, Vec<u8>)> {
    let wtxids = [[1u8; 32], [2u8; 32], [3u8; 32]];
    let hashes: Vec<Hash256> = wtxids.iter().map(|w| Hash256(*w)).collect();
    let mut seeds = Vec::new();
    for (cb, shape, mutate) in [
        (0u8, 0u8, 0u8),
        (5, 0, 0),
        (4, 0, 0),
        (1, 0, 0),
        (6, 0, 0),
        (7, 0, 0),
        (0x08, 0, 0),
        (0x10, 0, 0),
        (0x18, 0, 0),
        (0x45, 0, 0),
        (0x65, 0, 0),
        (0x85, 0, 0),
        (0xa5, 0, 0),
        (0x05, 0x40, 0),
        (0x05, 0x80, 0),
        (0x05, 0xc0, 0),
        (0x45, 0xc0, 0),
        (0x05, 0x3f, 0),
        (0x05, 0x7f, 0),
        (0x05, 0, 1),
        (0x05, 0, 2),
        (0x05, 0, 0x0b),
        (0x00, 0, 0x0b),
        (0x05, 0, 0x04),
        (0x05, 0, 0x05),
        (0x05, 0, 0x06),
        (0x05, 0, 0x1f),
    ] {
        let (prefix, suffix) = declared_coinbase(cb, shape, mutate, &hashes);
        seeds.push((
            format!("cb{cb:02x}-shape{shape:02x}-mutate{mutate:02x}"),
            coinbase_input(&prefix, &suffix, &wtxids, cb ^ shape),
        ));
    }
    // Checked against other wtxids: the commitment does not match.
    let (prefix, suffix) = declared_coinbase(5, 0, 0, &hashes);
    seeds.push((
        "other-wtxids".into(),
        coinbase_input(&prefix, &suffix, &wtxids[..1], 9),
    ));
    seeds.push(("empty".into(), coinbase_input(&[], &[], &[], 0)));
    seeds
}

#[test]
fn the_seeds_hold_the_invariants() {
    for (name, data) in session_seeds() {
        eprintln!("jds_session: {name}");
        jds_session(&data);
    }
    for (name, data) in coinbase_seeds() {
        eprintln!("jds_coinbase: {name}");
        jds_coinbase(&data);
    }
}

#[test]
#[ignore = "writes the seed inputs into the corpus; run by hand before fuzzing afresh"]
fn write_seeds() {
    let session: Vec<(String, Vec<u8>)> = session_seeds()
        .into_iter()
        .map(|(n, d)| (n.to_owned(), d))
        .collect();
    for (target, seeds) in [("jds_session", session), ("jds_coinbase", coinbase_seeds())] {
        corpus!(target).write_seeds(seeds.into_iter().map(|(n, d)| (format!("seed-{n}"), d)));
    }
}
