//! Replays the committed corpus of `crates/pool/fuzz` through the same functions the fuzz
//! targets run (`pool::fuzz_support`), on stable: every input that once added coverage, and
//! every regression, must still hold the invariants. `write_seeds` (ignored) writes the seed
//! scripts into the corpus.

use testkit::{corpus, replay_corpora};

use pool::fuzz_support::script::{Sv1Script, Sv2Script};
use pool::fuzz_support::{sv1_session, sv2_session};
use primitives::Target;
use sv2::messages::common::SetupConnection;
use sv2::messages::mining::{OpenStandardMiningChannel, SubmitSharesStandard};
use sv2::Message;

replay_corpora! {
    every_sv1_session_corpus_input_holds_the_invariants: "sv1_session", 10, sv1_session;
    every_sv2_session_corpus_input_holds_the_invariants: "sv2_session", 10, sv2_session;
}

const SUBSCRIBE: &[u8] = br#"{"id":1,"method":"mining.subscribe","params":["cgminer/4.10.0"]}"#;
const AUTHORIZE: &[u8] = br#"{"id":2,"method":"mining.authorize","params":["alice.rig1","x"]}"#;

/// A miner through subscribe and authorize (user selector 1, "alice.rig1"), its first job
/// written out.
fn sv1_miner(engine: u8, sv1: u8) -> Sv1Script {
    Sv1Script::new(engine, sv1)
        .line(SUBSCRIBE)
        .line(AUTHORIZE)
        .write(0, 0)
}

/// `n` shares on the latest job by "alice.rig1", nonces from `first`.
fn shares(mut s: Sv1Script, n: u32, first: u32) -> Sv1Script {
    for i in 0..n {
        s = s.submit((i % 60) as u8 * 4, 1, 0, (i % 5) as u8, 0, first + i, 0);
    }
    s
}

fn sv1_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let long_line = vec![b'x'; 5000];
    vec![
        (
            "conversation",
            shares(sv1_miner(0, 0), 6, 1)
                .write(0, 0)
                .tick_s(20)
                .work(0x11, 3)
                .write(0, 0)
                // The job before the new tip: stale. Then the new one.
                .submit(40, 1, 1, 0, 0, 77, 0)
                .submit(44, 1, 0, 0, 0, 78, 0)
                .submit(48, 1, 0, 0, 0, 78, 0)
                .write(0, 0)
                .close()
                .build(),
        ),
        (
            "version-rolling",
            Sv1Script::new(0, 0)
                .configure(8, 0x07, 0x1fff_e000, 0)
                .line(SUBSCRIBE)
                .line(AUTHORIZE)
                .submit(12, 1, 0, 0, 0, 5, 4)
                .submit(16, 1, 0, 1, 0, 6, 5)
                .submit(20, 1, 0, 2, 0, 7, 6)
                .write(0, 0)
                .build(),
        ),
        (
            "solo-address",
            Sv1Script::new(1, 0)
                .line(SUBSCRIBE)
                .authorize(4, 0, 0)
                .authorize(8, 3, 0)
                .submit(12, 3, 0, 0, 0, 1, 0)
                .submit(16, 3, 0, 1, 0, 2, 0)
                .write(2, 0)
                .build(),
        ),
        (
            "hard-difficulty",
            shares(sv1_miner(0x06, 0), 4, 100).write(0, 0).build(),
        ),
        (
            "small-dedup-two-jobs",
            shares(sv1_miner(0x60, 0), 6, 1)
                .submit(4, 1, 0, 0, 0, 1, 0)
                .work(0x01, 2)
                .work(0x01, 1)
                .submit(8, 1, 2, 0, 0, 9, 0)
                .write(0, 0)
                .build(),
        ),
        (
            "vardiff-flood-then-quiet",
            shares(sv1_miner(0x00, 0), 40, 1000)
                .write(0, 0)
                .tick_s(5)
                .tick_s(600)
                .tick_s(3600)
                .write(0, 0)
                .build(),
        ),
        (
            "bad-lines-close",
            Sv1Script::new(0, 0x0c)
                .line(b"GET / HTTP/1.1")
                .line(b"{\"id\":1,")
                .line(b"\xff\xfe")
                .line(b"[]")
                .write(0, 0)
                .build(),
        ),
        (
            "line-too-long",
            Sv1Script::new(0, 0)
                .line(SUBSCRIBE)
                .line(&long_line)
                .line(AUTHORIZE)
                .write(0, 0)
                .build(),
        ),
        (
            "partial-writes",
            sv1_miner(0, 0)
                .submit(4, 1, 0, 0, 0, 1, 0)
                .work(0x11, 3)
                .write(1, 10)
                .write(1, 300)
                .submit(8, 1, 0, 0, 0, 2, 0)
                .write(3, 0)
                .write(1, 1)
                .write(0, 0x21)
                .build(),
        ),
        (
            "no-work-yet",
            Sv1Script::new(0, 0x20)
                .line(SUBSCRIBE)
                .line(AUTHORIZE)
                .submit(4, 1, 0, 0, 0, 1, 0)
                .work(0x01, 3)
                .submit(8, 1, 0, 0, 0, 1, 0)
                .write(0, 0)
                .build(),
        ),
        (
            "work-stopped",
            sv1_miner(0, 0)
                .work(0, 0)
                .submit(4, 1, 0, 0, 0, 1, 0)
                .work(0x11, 0)
                .submit(8, 1, 0, 0, 0, 2, 0)
                .write(0, 0)
                .build(),
        ),
        (
            "reorg",
            sv1_miner(0, 0)
                .work(0x11, 1)
                .submit(4, 1, 0, 0, 0, 1, 0)
                .work(0x19, 5)
                .submit(8, 1, 0, 0, 0, 2, 0)
                .submit(12, 1, 1, 0, 0, 3, 0)
                .write(0, 0)
                .build(),
        ),
        (
            "workers-limit",
            Sv1Script::new(0, 0x01)
                .line(SUBSCRIBE)
                .authorize(4, 0, 0)
                .authorize(8, 1, 0)
                .authorize(12, 2, 0)
                .authorize(16, 5, 0)
                .authorize(20, 8, 0)
                .submit(24, 2, 0, 0, 0, 1, 0)
                .write(0, 0)
                .build(),
        ),
        (
            "suggest-and-hints",
            Sv1Script::new(0, 0)
                .line(br#"{"id":null,"method":"mining.suggest_difficulty","params":[0.5]}"#)
                .line(SUBSCRIBE)
                .authorize(4, 1, 1 + 4 * 5)
                .suggest_difficulty(8, 1)
                .suggest_difficulty(12, 9)
                .request(4, 16, &[2])
                .configure(20, 0x02, 0, 6)
                .line(br#"{"id":5,"result":true,"error":null}"#)
                .request(6, 24, &[])
                .request(7, 28, &[])
                .request(5, 32, &[])
                .write(0, 0)
                .build(),
        ),
        (
            "malformed-submits",
            sv1_miner(0, 0)
                .submit(4, 1, 3, 0, 0, 1, 0)
                .submit(8, 1, 4, 0, 0, 1, 0)
                .submit(12, 1, 0, 5, 0, 1, 0)
                .submit(16, 1, 0, 7, 0, 1, 0)
                .submit(20, 1, 0, 0, 127, 1, 0)
                .submit(24, 0, 0, 0, 0, 1, 0)
                .request(11, 28, &[1])
                .request(11, 32, &[3])
                .write(0, 0)
                .build(),
        ),
    ]
}

/// An end device's connection (standard jobs, version rolling) with one standard channel.
fn sv2_device(engine: u8, sv2: u8) -> Sv2Script {
    Sv2Script::new(engine, sv2)
        .setup(0, 3)
        .open_standard(1, 1, 0, 0)
}

fn sv2_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut standard = sv2_device(0, 0);
    for i in 0..6 {
        standard = standard.submit_standard(0, 0, 0, i, (i % 6) as u8);
    }
    let mut extended = Sv2Script::new(0, 0x01)
        .setup(0, 2)
        .open_extended(2, 0, 1, 0, 2);
    for i in 0..6 {
        extended = extended.submit_extended(0, 0, 0, i, 0, (i % 5) as u8);
    }
    let setup = SetupConnection {
        flags: 1,
        endpoint_host: "127.0.0.1".into(),
        endpoint_port: 3336,
        vendor: "seed".into(),
        ..SetupConnection::new(0)
    };
    let open = OpenStandardMiningChannel {
        request_id: 9,
        user_identity: "alice.rig9".into(),
        nominal_hash_rate: 1e12,
        max_target: Target::MAX,
    };
    let share = SubmitSharesStandard {
        channel_id: 1,
        sequence_number: 1,
        job_id: 1,
        nonce: 1,
        ntime: 1_700_000_000,
        version: 0x2000_0000,
    };
    vec![
        (
            "standard-conversation",
            standard
                .tick_s(30)
                .work(0x11, 3)
                .submit_standard(0, 1, 0, 100, 0)
                .submit_standard(0, 0, 0, 101, 0)
                .submit_standard(0, 0, 0, 101, 0)
                .update(0, 4, 0)
                .close_channel(0)
                .submit_standard(0, 0, 0, 102, 0)
                .close()
                .build(),
        ),
        (
            "extended-conversation",
            extended
                .work(0x11, 7)
                .submit_extended(0, 1, 0, 50, 0, 0)
                .submit_extended(0, 0, 0, 51, 0, 5)
                .submit_extended(0, 0, 0, 52, 6, 0)
                .submit_standard(0, 0, 0, 53, 0)
                .tick_s(600)
                .build(),
        ),
        (
            "group-channels",
            Sv2Script::new(0, 0)
                .setup(0, 2)
                .open_standard(1, 0, 0, 0)
                .open_standard(2, 1, 3, 0)
                .open_extended(3, 0, 0, 0, 0)
                .work(0x11, 2)
                .submit_standard(0, 0, 0, 1, 0)
                .submit_standard(8, 0, 0, 2, 0)
                .work(0x01, 3)
                .close_channel(6)
                .work(0x11, 1)
                .build(),
        ),
        (
            "declared-job",
            Sv2Script::new(0, 0x81)
                .setup(0, 4)
                .open_extended(1, 0, 0, 0, 0)
                .custom_job(0, 7, 0, 1, 0)
                .submit_extended(0, 7, 0, 1, 0, 0)
                .submit_extended(0, 7, 0, 2, 0, 0)
                .custom_job(0, 8, 0, 1, 0)
                .custom_job(0, 9, 0x02, 2, 0)
                .custom_job(0, 10, 0x04, 3, 0)
                .custom_job(0, 11, 0x10, 4, 0)
                .work(0x11, 3)
                .submit_extended(0, 7, 0, 3, 0, 0)
                .build(),
        ),
        (
            "declared-job-refused",
            Sv2Script::new(0, 0x01).setup(0, 4).setup(0, 0).build(),
        ),
        (
            "channel-capacity",
            Sv2Script::new(0, 0x04)
                .setup(0, 0)
                .open_standard(1, 0, 0, 0)
                .open_standard(2, 0, 0, 0)
                .open_extended(3, 0, 0, 0, 0)
                .close_channel(0)
                .open_extended(4, 0, 0, 0, 0)
                .build(),
        ),
        (
            "raw-messages",
            Sv2Script::new(0, 0)
                .raw_message(&Message::from(setup))
                .raw_message(&Message::from(open))
                .raw_message(&Message::from(share))
                .raw(0x1a, &[1, 2, 3])
                .raw(0x45, &[])
                .build(),
        ),
        (
            "before-setup",
            Sv2Script::new(0, 0)
                .open_standard(1, 0, 0, 0)
                .setup(0, 0)
                .build(),
        ),
        (
            "setup-refused",
            Sv2Script::new(0, 0).setup(4, 0).setup(0, 8).build(),
        ),
        (
            "jdc-mode",
            Sv2Script::new(0, 0x02)
                .setup(0, 0)
                .open_extended(1, 0, 0, 0, 2)
                .open_standard(2, 0, 0, 0)
                .submit_extended(0, 0, 0, 1, 0, 0)
                .submit_standard(0, 0, 0, 1, 0)
                .build(),
        ),
        (
            "solo",
            Sv2Script::new(1, 0)
                .setup(0, 3)
                .open_standard(1, 0, 0, 0)
                .open_standard(2, 2, 0, 0)
                .submit_standard(0, 0, 0, 1, 0)
                .build(),
        ),
        (
            "unexpected",
            sv2_device(0, 0)
                .unexpected(1)
                .unexpected(2)
                .unexpected(0)
                .submit_standard(0, 0, 0, 1, 0)
                .build(),
        ),
        ("vardiff-batch-one", {
            let mut s = sv2_device(0, 0x10);
            for i in 0..30 {
                s = s.submit_standard(0, 0, 0, 1000 + i, 0);
            }
            s.tick_s(2).tick_s(300).build()
        }),
        (
            "no-work-yet",
            sv2_device(0, 0x03)
                .submit_standard(0, 0, 0, 1, 0)
                .work(0x01, 0)
                .submit_standard(0, 0, 0, 1, 0)
                .build(),
        ),
        (
            "work-changes-as-a-channel-opens",
            sv2_device(0, 0)
                .work(0x11, 0x80)
                .open_standard(2, 0, 0, 0)
                .work(0x07, 0)
                .submit_standard(0, 0, 0, 1, 0)
                .submit_standard(8, 0, 0, 2, 0)
                .build(),
        ),
        (
            "batched-acknowledgements",
            Sv2Script::new(0, 0x20)
                .setup(0, 0)
                .open_standard(1, 0, 0, 0)
                .open_extended(2, 0, 0, 0, 0)
                .submit_standard(0, 0, 0, 1, 0)
                .unflushed()
                .submit_standard(0, 0, 0, 2, 0)
                .unflushed()
                .submit_extended(0, 0, 0, 3, 0, 0)
                .unflushed()
                .submit_standard(0, 0, 0, 4, 0)
                .unflushed()
                .submit_standard(0, 3, 0, 5, 0)
                .unflushed()
                .submit_standard(0, 0, 0, 6, 0)
                .unflushed()
                .close_channel(0)
                .submit_extended(0, 0, 0, 7, 0, 0)
                .unflushed()
                .update(5, 1, 0)
                .build(),
        ),
        (
            "hard-bits-stopped-work",
            sv2_device(0x60, 0)
                .work(0x21, 0)
                .submit_standard(0, 0, 0, 1, 0)
                .work(0, 0)
                .submit_standard(0, 0, 0, 2, 0)
                .build(),
        ),
    ]
}

#[test]
fn the_seeds_hold_the_invariants() {
    for (name, data) in sv1_seeds() {
        eprintln!("sv1_session: {name}");
        sv1_session(&data);
    }
    for (name, data) in sv2_seeds() {
        eprintln!("sv2_session: {name}");
        sv2_session(&data);
    }
}

#[test]
#[ignore = "writes the seed inputs into the corpus; run by hand before fuzzing afresh"]
fn write_seeds() {
    for (target, seeds) in [("sv1_session", sv1_seeds()), ("sv2_session", sv2_seeds())] {
        corpus!(target).write_seeds(seeds.into_iter().map(|(n, d)| (format!("seed-{n}"), d)));
    }
}
