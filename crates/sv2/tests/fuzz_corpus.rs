//! The fuzz targets `frames` and `messages` (crates/sv2/fuzz) on stable: every committed corpus
//! input goes through the same function the fuzzer calls (`sv2::fuzz_support`), so a fixed
//! crash stays fixed and CI needs no nightly. Also writes the seed inputs the corpus started
//! from (`--ignored write_seeds`).

use testkit::{corpus, replay_corpora};

use primitives::Target;
use sv2::fuzz_support;
use sv2::messages::common::{self, job_declaration_flags, SetupConnection};
use sv2::messages::job_declaration::{
    AllocateMiningJobTokenSuccess, DeclareMiningJob, DeclareMiningJobError,
    ProvideMissingTransactions, ProvideMissingTransactionsSuccess, PushSolution,
};
use sv2::messages::mining::{
    NewExtendedMiningJob, NewMiningJob, OpenStandardMiningChannel,
    OpenStandardMiningChannelSuccess, SetGroupChannel, SubmitSharesError, SubmitSharesExtended,
    SubmitSharesStandard,
};
use sv2::messages::template_distribution::{NewTemplate, RequestTransactionDataSuccess};
use sv2::messages::Message;

replay_corpora! {
    every_frames_corpus_input_holds_the_invariants: "frames", 20, fuzz_support::frames;
    every_messages_corpus_input_holds_the_invariants: "messages", 20, fuzz_support::messages;
}

/// A `frames` input: mode, two read-size seed bytes, the rest.
fn frames_input(mode: u8, seed: u16, rest: &[u8]) -> Vec<u8> {
    let mut v = vec![mode, (seed >> 8) as u8, seed as u8];
    v.extend_from_slice(rest);
    v
}

/// The scripted mode's first byte: limit index (`fuzz_support::LIMITS`) and corruption.
fn scripted(limit: u8, corrupt: bool) -> u8 {
    3 | (limit << 2) | if corrupt { 0x80 } else { 0 }
}

/// One scripted frame: type, extension type, length byte, payload.
fn frame(msg_type: u8, ext: u16, len: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![msg_type];
    v.extend_from_slice(&ext.to_le_bytes());
    v.push(len);
    v.extend_from_slice(payload);
    v
}

fn message_bytes(m: &Message) -> Vec<u8> {
    let mut v = vec![m.msg_type()];
    m.encode(&mut v).unwrap();
    v
}

fn frames_seeds() -> Vec<(String, Vec<u8>)> {
    let mut s: Vec<(String, Vec<u8>)> = vec![
        (
            "raw-http".into(),
            frames_input(
                0,
                0x0101,
                &b"GET / HTTP/1.1\r\nHost: pool\r\n\r\n".repeat(6),
            ),
        ),
        (
            "raw-jsonrpc".into(),
            frames_input(
                0,
                0x0203,
                b"{\"id\":1,\"method\":\"mining.subscribe\",\"params\":[]}\n",
            ),
        ),
        (
            "raw-key-then-header".into(),
            frames_input(0, 0x0304, &[0x11; 64 + 22]),
        ),
        ("raw-zeros".into(), frames_input(0, 0x0405, &[0; 400])),
        ("raw-short".into(), frames_input(0, 0x0506, &[1, 2, 3])),
        ("reply-zeros".into(), frames_input(1, 0x0607, &[0; 234])),
        ("reply-short".into(), frames_input(1, 0x0708, &[0x42; 233])),
        ("reply-long".into(), frames_input(1, 0x0809, &[0x99; 600])),
    ];
    for (name, at) in [
        ("key-first", 0u16),
        ("key-last", 63),
        ("reply-key", 64),
        ("reply-static", 150),
        ("reply-cert", 250),
        ("reply-last", 297),
    ] {
        let at = at.to_le_bytes();
        s.push((
            format!("handshake-flip-{name}"),
            frames_input(2, 0, &[at[0], at[1], 0x01]),
        ));
    }
    let setup = message_bytes(
        &SetupConnection {
            flags: 1,
            endpoint_host: "127.0.0.1".into(),
            endpoint_port: 3333,
            vendor: "seed".into(),
            ..SetupConnection::new(common::protocol::MINING)
        }
        .into(),
    );
    let share = message_bytes(
        &SubmitSharesStandard {
            channel_id: 1,
            sequence_number: 2,
            job_id: 3,
            nonce: 4,
            ntime: 5,
            version: 6,
        }
        .into(),
    );
    let mut script = frame(setup[0], 0, (setup.len() - 1) as u8, &setup[1..]);
    script.extend(frame(
        share[0],
        0x8000,
        (share.len() - 1) as u8,
        &share[1..],
    ));
    script.extend(frame(0x01, 0, 0, &[]));
    script.extend(frame(0x00, 0x4001, 3, b"ext"));
    let mut many = Vec::new();
    for i in 0..40u8 {
        many.extend(frame(0x1a, 0x8000, 24, &[i; 24]));
    }
    let chunky = frame(0x74, 0, 253, b"transactions");
    let two_chunks = [
        frame(0x71, 0, 252, b"templ"),
        frame(0x1c, 0x8000, 4, &[1, 0, 0, 0]),
    ]
    .concat();
    for (limit, corrupt, name, body) in [
        (0u8, false, "script-setup-share", script.clone()),
        (2, false, "script-setup-share-limit-200", script.clone()),
        (1, false, "script-limit-below-header", script.clone()),
        (0, false, "script-many-small", many.clone()),
        (0, false, "script-three-chunks", chunky.clone()),
        (
            3,
            false,
            "script-chunks-over-one-chunk-limit",
            chunky.clone(),
        ),
        (
            4,
            false,
            "script-two-chunks-limit-65600",
            two_chunks.clone(),
        ),
        (5, false, "script-three-chunks-limit-140000", chunky.clone()),
    ] {
        s.push((
            name.into(),
            frames_input(scripted(limit, corrupt), 0x1234, &body),
        ));
    }
    for (at, name) in [
        (0u16, "header"),
        (10, "header-mac"),
        (30, "payload"),
        (300, "later-frame"),
    ] {
        let mut body = at.to_le_bytes().to_vec();
        body.extend_from_slice(&script);
        s.push((
            format!("script-corrupt-{name}"),
            frames_input(scripted(0, true), 0x4321, &body),
        ));
    }
    let mut body = 5000u16.to_le_bytes().to_vec();
    body.extend_from_slice(&many);
    s.push((
        "script-corrupt-many".into(),
        frames_input(scripted(0, true), 0x0f0f, &body),
    ));
    s
}

fn messages_seeds() -> Vec<(String, Vec<u8>)> {
    let samples: Vec<Message> = vec![
        SetupConnection {
            endpoint_host: "10.0.0.1".into(),
            endpoint_port: 8442,
            vendor: "seed".into(),
            hardware_version: "hw".into(),
            firmware: "fw".into(),
            device_id: "id".into(),
            ..SetupConnection::new(common::protocol::TEMPLATE_DISTRIBUTION)
        }
        .into(),
        OpenStandardMiningChannel {
            request_id: 1,
            user_identity: "worker.1".into(),
            nominal_hash_rate: 1e12,
            max_target: Target::MAX,
        }
        .into(),
        OpenStandardMiningChannelSuccess {
            request_id: 1,
            channel_id: 2,
            target: Target::DIFFICULTY_1,
            extranonce_prefix: vec![1; 8],
            group_channel_id: 3,
        }
        .into(),
        NewMiningJob {
            channel_id: 2,
            job_id: 9,
            min_ntime: Some(1_700_000_000),
            version: 0x2000_0000,
            merkle_root: [7; 32],
        }
        .into(),
        NewExtendedMiningJob {
            channel_id: 2,
            job_id: 10,
            min_ntime: None,
            version: 0x2000_0000,
            version_rolling_allowed: true,
            merkle_path: vec![[1; 32], [2; 32]],
            coinbase_tx_prefix: vec![3; 40],
            coinbase_tx_suffix: vec![4; 60],
        }
        .into(),
        SubmitSharesStandard {
            channel_id: 2,
            sequence_number: 1,
            job_id: 9,
            nonce: 5,
            ntime: 1_700_000_000,
            version: 0x2000_0000,
        }
        .into(),
        SubmitSharesExtended {
            channel_id: 2,
            sequence_number: 2,
            job_id: 10,
            nonce: 6,
            ntime: 1_700_000_001,
            version: 0x2000_0000,
            extranonce: vec![9; 4],
            user_identity: None,
        }
        .into(),
        SubmitSharesError {
            channel_id: 2,
            sequence_number: 3,
            error_code: "stale-share".into(),
        }
        .into(),
        SetGroupChannel {
            group_channel_id: 5,
            channel_ids: vec![1, 2, 3],
        }
        .into(),
        NewTemplate {
            template_id: 77,
            future_template: true,
            version: 0x2000_0000,
            coinbase_tx_version: 2,
            coinbase_prefix: vec![3, 1, 2, 3],
            coinbase_tx_input_sequence: u32::MAX,
            coinbase_tx_value_remaining: 312_500_000,
            coinbase_tx_outputs_count: 1,
            coinbase_tx_outputs: vec![0; 47],
            coinbase_tx_locktime: 0,
            merkle_path: vec![[8; 32]],
        }
        .into(),
        RequestTransactionDataSuccess {
            template_id: 77,
            excess_data: vec![0; 32],
            transaction_list: vec![vec![1; 100], vec![2; 10]],
        }
        .into(),
        SetupConnection {
            flags: job_declaration_flags::DECLARE_TX_DATA,
            endpoint_host: "127.0.0.1".into(),
            endpoint_port: 34264,
            vendor: "seed".into(),
            ..SetupConnection::new(common::protocol::JOB_DECLARATION)
        }
        .into(),
        AllocateMiningJobTokenSuccess {
            request_id: 1,
            mining_job_token: vec![5; 40],
            coinbase_outputs: vec![1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0x51, 0x00],
        }
        .into(),
        DeclareMiningJob {
            request_id: 2,
            mining_job_token: vec![5; 40],
            version: 0x2000_0000,
            coinbase_tx_prefix: vec![2, 0, 0, 0, 0, 1, 1],
            coinbase_tx_suffix: vec![6; 80],
            wtxid_list: vec![[1; 32], [2; 32], [3; 32]],
            excess_data: vec![],
        }
        .into(),
        DeclareMiningJobError {
            request_id: 2,
            error_code: "invalid-mining-job-token".into(),
            error_details: b"expired".to_vec(),
        }
        .into(),
        ProvideMissingTransactions {
            request_id: 2,
            unknown_tx_position_list: vec![0, 2],
        }
        .into(),
        ProvideMissingTransactionsSuccess {
            request_id: 2,
            transaction_list: vec![vec![7; 150], vec![8; 60]],
        }
        .into(),
        PushSolution {
            extranonce: vec![9; 16],
            prev_hash: [4; 32],
            nonce: 1,
            ntime: 1_700_000_000,
            nbits: 0x207f_ffff,
            version: 0x2000_0000,
        }
        .into(),
    ];
    let mut s = Vec::new();
    for (i, m) in samples.iter().enumerate() {
        let bytes = message_bytes(m);
        let mut name = m.name().to_lowercase().replace('.', "-");
        // A second sample of the same message (SetupConnection for another protocol).
        if s.iter().any(|(n, _)| *n == name) {
            name = format!("{name}-{i}");
        }
        s.push((name.clone(), bytes.clone()));
        s.push((
            format!("{name}-truncated"),
            bytes[..bytes.len() / 2].to_vec(),
        ));
        let mut trailing = bytes.clone();
        trailing.extend_from_slice(&[0xde, 0xad]);
        s.push((format!("{name}-trailing"), trailing));
    }
    let setup = message_bytes(&samples[0]);
    let mut unknown_protocol = setup.clone();
    unknown_protocol[1] = 7;
    s.push(("setupconnection-protocol-7".into(), unknown_protocol));
    let mut not_utf8 = setup.clone();
    let last = not_utf8.len() - 1;
    not_utf8[last] = 0xff;
    s.push(("setupconnection-not-utf8".into(), not_utf8));
    // NewTemplate with future_template = 2 (bits outside the lowest).
    let mut odd_bool = message_bytes(&samples[9]);
    odd_bool[9] = 2;
    s.push(("newtemplate-bool-2".into(), odd_bool));
    // NewMiningJob with an option of two elements.
    let mut option = message_bytes(&samples[3]);
    option[9] = 2;
    s.push(("newminingjob-option-2".into(), option));
    s.push(("unknown-type".into(), vec![0x45, 1, 2, 3]));
    // DeclareMiningJob whose wtxid count overruns the payload.
    let mut wtxids_overrun = message_bytes(&samples[13]);
    let count_at = 1 + 4 + 1 + 40 + 4 + 2 + 7 + 2 + 80;
    wtxids_overrun[count_at] = 0xff;
    s.push(("declareminingjob-wtxids-overrun".into(), wtxids_overrun));
    s.push(("empty-setup".into(), vec![0x00]));
    s.push((
        "seq-overrun".into(),
        vec![0x25, 1, 0, 0, 0, 0xff, 0xff, 1, 0, 0, 0],
    ));
    s
}

#[test]
fn the_seeds_hold_the_invariants() {
    let frames = frames_seeds();
    assert!(frames.len() >= 20);
    for (name, data) in &frames {
        eprintln!("frames: {name}");
        fuzz_support::frames(data);
    }
    let messages = messages_seeds();
    assert!(messages.len() >= 20);
    for (name, data) in &messages {
        eprintln!("messages: {name}");
        fuzz_support::messages(data);
    }
}

#[test]
#[ignore = "writes the seed inputs into the corpus; run by hand before fuzzing afresh"]
fn write_seeds() {
    for (target, seeds) in [("frames", frames_seeds()), ("messages", messages_seeds())] {
        corpus!(target).write_seeds(seeds.into_iter().map(|(n, d)| (format!("seed-{n}"), d)));
    }
}
