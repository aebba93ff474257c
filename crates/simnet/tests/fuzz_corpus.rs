//! The fuzz targets of crates/simnet/fuzz on stable (`submit_block`, `zmtp_reader`,
//! `rpc_request`): every committed corpus input goes through the same function the fuzzer
//! calls, so a fixed crash stays fixed and CI needs no nightly. Also writes the seed inputs the
//! corpora started from (`--ignored`).

mod common;

use std::path::Path;

use testkit::{corpus, replay_corpora};

use common::Draft;
use primitives::bitcoin::consensus::serialize;
use primitives::bitcoin::Amount;
use simnet::checks::fuzz;
use simnet::rpc::fuzz as rpc_fuzz;
use simnet::zmq::zmtp::fuzz as zmtp_fuzz;
use simnet::{SubmitError, Timestamp};

replay_corpora! {
    every_corpus_input_goes_through_the_submit_path_without_a_panic:
        "submit_block", 5, fuzz::submit;
    every_zmtp_reader_corpus_input_holds_the_invariants: "zmtp_reader", 5, zmtp_fuzz::reader;
    every_rpc_request_corpus_input_holds_the_invariants: "rpc_request", 5, rpc_fuzz::request;
}

/// Real blocks to start the fuzzer from: valid ones on the fuzzing network (so mutations start
/// past the checks random bytes never pass) and a few mainnet blocks.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let net = fuzz::network();
    let template = net.template().clone();
    assert!(
        template.tx_count() > 1,
        "the mempool still has transactions"
    );

    // A full block on the tip: accepted.
    let full = Draft::from_template(&template).mine();
    // An empty block on the tip's parent: stale, and its child (which the harness mines) is a
    // reorganisation.
    let mut stale = Draft::from_template(&template);
    stale.txs.clear();
    stale.prev_hash = net.tip().header.prev_hash;
    stale.spec.height = template.height - 1;
    stale.spec.payouts[0].value = Amount::from_sat(simnet::block_subsidy(template.height - 1));
    // Legacy coinbase, as some pools submit it: Core adds the reserved value.
    stale.strip_coinbase_witness = true;
    let stale = stale.mine();

    let mut seeds = vec![
        ("seed-template-block", serialize(&full)),
        ("seed-stale-empty-block", serialize(&stale)),
    ];
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../primitives/tests/data");
    for (name, file) in [
        ("seed-mainnet-genesis", "block_0_genesis.hex"),
        ("seed-mainnet-100000", "block_100000.hex"),
        ("seed-mainnet-542213", "block_542213.hex"),
    ] {
        let hex = std::fs::read_to_string(data.join(file)).unwrap();
        seeds.push((name, hex::decode(hex.trim()).unwrap()));
    }
    seeds
}

#[test]
fn the_seeds_reach_acceptance_and_a_reorg() {
    let seeds = seeds();
    let mut net = fuzz::network();
    let now = Timestamp::from_secs(60);
    let accepted = net.submit_block(now, &seeds[0].1).unwrap();
    assert_eq!(accepted.height, net.height());
    let mut net = fuzz::network();
    assert_eq!(
        net.submit_block(now, &seeds[1].1),
        Err(SubmitError::Inconclusive)
    );
    for (_, data) in &seeds {
        fuzz::submit(data);
    }
}

/// A subscriber's conversations, as `zmtp_fuzz::input`s: flag bit 0 puts a greeting first,
/// bit 1 a READY after it, bit 2 makes the handshake ZMTP 3.0, bit 3 XSUB.
fn zmtp_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use simnet::zmq::zmtp::{encode_greeting, encode_message};
    let sub = |topic: &[u8]| encode_message(&[&[&[1u8][..], topic].concat()]);
    let cancel = |topic: &[u8]| encode_message(&[&[&[0u8][..], topic].concat()]);
    let cmd = zmtp_fuzz::command_frame;
    let traffic = [
        sub(b"hashblock"),
        sub(b"rawblock"),
        cmd(b"SUBSCRIBE", b""),
        cmd(b"PING", b"\x00\x0actx"),
        cancel(b"hashblock"),
        cmd(b"CANCEL", b"raw"),
        encode_message(&[b"\x01", b"second part"]),
        cmd(b"PONG", b""),
    ]
    .concat();
    let mut long = vec![0x02];
    long.extend_from_slice(&(1u64 << 32).to_be_bytes());
    long.extend_from_slice(&[7; 64]);
    let mut ready_again = zmtp_fuzz::sub_handshake(false, true);
    ready_again.drain(..64);
    let mut error = cmd(b"ERROR", b"\x03bye");
    error.extend_from_slice(&sub(b"hashblock"));
    vec![
        ("seed-subscriber", zmtp_fuzz::input(0x03, &[], &traffic)),
        (
            "seed-subscriber-v30-cut",
            zmtp_fuzz::input(0x07, &[1, 3, 9, 64], &traffic),
        ),
        (
            "seed-xsub-byte-at-a-time",
            zmtp_fuzz::input(0x0b, &[1], &traffic),
        ),
        (
            "seed-handshake-by-hand",
            zmtp_fuzz::input(
                0x00,
                &[5, 70],
                &[&encode_greeting()[..], &ready_again, &traffic].concat(),
            ),
        ),
        (
            "seed-ready-from-the-input",
            zmtp_fuzz::input(0x01, &[2], &[&ready_again[..], &traffic].concat()),
        ),
        (
            "seed-huge-frame-skipped",
            zmtp_fuzz::input(0x03, &[4, 100], &[&long[..], &sub(b"raw")].concat()),
        ),
        ("seed-error-command", zmtp_fuzz::input(0x03, &[], &error)),
        (
            "seed-message-before-ready",
            zmtp_fuzz::input(0x01, &[], &sub(b"hashblock")),
        ),
        (
            "seed-http-garbage",
            zmtp_fuzz::input(0x00, &[3], b"GET / HTTP/1.1\r\n\r\n"),
        ),
    ]
}

/// Request bodies: raw ones (mode byte below 0x80) as pool software sends them, and built ones
/// (mode byte 0x80 and up; the rest is the builder's choices).
fn rpc_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let raw = |body: &str| [&[0u8][..], body.as_bytes()].concat();
    let mut seeds = vec![
        (
            "seed-getblocktemplate",
            raw(
                r#"{"jsonrpc":"1.0","id":"gbt","method":"getblocktemplate","params":[{"rules":["segwit"]}]}"#,
            ),
        ),
        (
            "seed-getblockcount-v2",
            raw(r#"{"jsonrpc":"2.0","id":1,"method":"getblockcount"}"#),
        ),
        (
            "seed-named-args",
            raw(r#"{"id":1,"method":"getblock","params":{"args":["00"],"verbosity":0}}"#),
        ),
        (
            "seed-batch",
            raw(
                r#"[{"jsonrpc":"2.0","id":1,"method":"getbestblockhash"},{"jsonrpc":"2.0","method":"ping"},17,{"id":3,"method":"getblockhash","params":[900001]}]"#,
            ),
        ),
        (
            "seed-submitblock-bad-hex",
            raw(r#"{"id":1,"method":"submitblock","params":["zz"]}"#),
        ),
        (
            "seed-generate",
            raw(
                r#"{"id":1,"method":"generatetoaddress","params":[1,"bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080"]}"#,
            ),
        ),
        (
            "seed-help",
            raw(r#"{"id":1,"method":"help","params":["getblockheader"]}"#),
        ),
        ("seed-not-json", raw("{\"id\":1,")),
    ];
    // Built bodies: single requests of each method (the second byte picks it), a batch.
    let names = simnet::rpc::method_names();
    for (i, name) in names.iter().enumerate() {
        if ![
            "getblock",
            "getblockheader",
            "getrawtransaction",
            "getblocktemplate",
            "sendrawtransaction",
            "getmempoolentry",
        ]
        .contains(name)
        {
            continue;
        }
        let label: &'static str = Box::leak(format!("seed-built-{name}").into_boxed_str());
        seeds.push((label, vec![0x80, 0, 0x01, i as u8, 0x05, 0, 1, 0, 2, 0, 3]));
    }
    seeds.push((
        "seed-built-batch",
        vec![0x80, 5, 4, 1, 1, 0, 0, 0, 1, 3, 5, 0, 0, 1, 9, 0, 1, 2, 3],
    ));
    seeds
}

#[test]
fn the_zmtp_and_rpc_seeds_hold_the_invariants() {
    for (_, data) in zmtp_seeds() {
        zmtp_fuzz::reader(&data);
    }
    for (_, data) in rpc_seeds() {
        rpc_fuzz::request(&data);
    }
}

#[test]
#[ignore = "writes the seed inputs into the corpus; run by hand before fuzzing afresh"]
fn write_seeds() {
    for (target, seeds) in [
        ("submit_block", seeds()),
        ("zmtp_reader", zmtp_seeds()),
        ("rpc_request", rpc_seeds()),
    ] {
        corpus!(target).write_seeds(seeds);
    }
}
