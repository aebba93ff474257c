//! Typed messages: every one round-trips, is byte for byte what the reference struct
//! serializes, and carries the spec's message type and channel bit.

use binary_sv2::{
    B016MOwned, B0255Owned, B032Owned, B064KOwned, Seq0255Owned, Seq064KOwned, Str0255Owned,
    Sv2OptionOwned, U256Owned,
};
use primitives::Target;
use sv2::messages::common::{self, *};
use sv2::messages::job_declaration::{self as jd, *};
use sv2::messages::mining::{self, *};
use sv2::messages::template_distribution::{self as tdp, *};
use sv2::messages::{message_types, DecodeError, EncodeError, Message, Sv2Message};

fn target(byte: u8) -> Target {
    let mut t = [0u8; 32];
    t[28] = byte;
    t[3] = 0x42;
    Target::from_le_bytes(&t)
}

fn hash(seed: u8) -> [u8; 32] {
    std::array::from_fn(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
}

/// One of every message, with values that would show a swapped or truncated field.
fn samples() -> Vec<Message> {
    vec![
        common::SetupConnection {
            max_version: 3,
            flags: mining_flags::REQUIRES_STANDARD_JOBS | mining_flags::REQUIRES_VERSION_ROLLING,
            endpoint_host: "pool.example.org".into(),
            endpoint_port: 34254,
            vendor: "stratumlab".into(),
            hardware_version: "sim-asic".into(),
            firmware: "0.1.0".into(),
            device_id: "device-7".into(),
            ..common::SetupConnection::new(common::protocol::MINING)
        }
        .into(),
        SetupConnectionSuccess {
            used_version: 2,
            flags: 0b11,
        }
        .into(),
        SetupConnectionError {
            flags: 0b100,
            error_code: common::error_code::UNSUPPORTED_FEATURE_FLAGS.into(),
        }
        .into(),
        ChannelEndpointChanged { channel_id: 77 }.into(),
        Reconnect {
            new_host: "backup.example.org".into(),
            new_port: 3336,
        }
        .into(),
        OpenStandardMiningChannel {
            request_id: 1,
            user_identity: "bc1qexample.worker1".into(),
            nominal_hash_rate: 1.5e12,
            max_target: target(0xff),
        }
        .into(),
        OpenStandardMiningChannelSuccess {
            request_id: 1,
            channel_id: 9,
            target: target(0x0f),
            extranonce_prefix: vec![1, 2, 3, 4, 5, 6, 7, 8],
            group_channel_id: 100,
        }
        .into(),
        OpenMiningChannelError {
            request_id: 2,
            error_code: mining::error_code::UNKNOWN_USER.into(),
        }
        .into(),
        OpenExtendedMiningChannel {
            request_id: 3,
            user_identity: "proxy".into(),
            nominal_hash_rate: 9.0e15,
            max_target: target(0x7f),
            min_extranonce_size: 8,
        }
        .into(),
        OpenExtendedMiningChannelSuccess {
            request_id: 3,
            channel_id: 10,
            target: target(0x01),
            extranonce_size: 12,
            extranonce_prefix: vec![0xaa; 4],
            group_channel_id: 100,
        }
        .into(),
        NewMiningJob {
            channel_id: 9,
            job_id: 5,
            min_ntime: None,
            version: 0x2000_0000,
            merkle_root: hash(1),
        }
        .into(),
        UpdateChannel {
            channel_id: 9,
            nominal_hash_rate: 2.0e12,
            maximum_target: target(0x3f),
        }
        .into(),
        UpdateChannelError {
            channel_id: 9,
            error_code: mining::error_code::MAX_TARGET_OUT_OF_RANGE.into(),
        }
        .into(),
        CloseChannel {
            channel_id: 9,
            reason_code: "shutdown".into(),
        }
        .into(),
        SetExtranoncePrefix {
            channel_id: 10,
            extranonce_prefix: vec![9; 32],
        }
        .into(),
        SubmitSharesStandard {
            channel_id: 9,
            sequence_number: 41,
            job_id: 5,
            nonce: 0xdead_beef,
            ntime: 1_700_000_000,
            version: 0x2000_e000,
        }
        .into(),
        SubmitSharesExtended {
            channel_id: 10,
            sequence_number: 42,
            job_id: 6,
            nonce: 7,
            ntime: 1_700_000_001,
            version: 0x2000_0000,
            extranonce: vec![0x10, 0x20, 0x30],
            user_identity: None,
        }
        .into(),
        SubmitSharesSuccess {
            channel_id: 9,
            last_sequence_number: 41,
            new_submits_accepted_count: 10,
            new_shares_sum: 10_240,
        }
        .into(),
        SubmitSharesError {
            channel_id: 9,
            sequence_number: 40,
            error_code: mining::error_code::STALE_SHARE.into(),
        }
        .into(),
        NewExtendedMiningJob {
            channel_id: 10,
            job_id: 6,
            min_ntime: Some(1_700_000_000),
            version: 0x2000_0000,
            version_rolling_allowed: true,
            merkle_path: vec![hash(2), hash(3), hash(4)],
            coinbase_tx_prefix: vec![1; 42],
            coinbase_tx_suffix: vec![2; 70],
        }
        .into(),
        mining::SetNewPrevHash {
            channel_id: 10,
            job_id: 6,
            prev_hash: hash(5),
            min_ntime: 1_700_000_000,
            nbits: 0x1703_a30c,
        }
        .into(),
        SetTarget {
            channel_id: 9,
            maximum_target: target(0x02),
        }
        .into(),
        SetCustomMiningJob {
            channel_id: 10,
            request_id: 4,
            token: vec![0x77; 20],
            version: 0x2000_0000,
            prev_hash: hash(6),
            min_ntime: 1_700_000_002,
            nbits: 0x207f_ffff,
            coinbase_tx_version: 2,
            coinbase_prefix: vec![3, 0xa0, 0xbb, 0x0d],
            coinbase_tx_input_n_sequence: u32::MAX,
            coinbase_tx_outputs: vec![4; 43],
            coinbase_tx_locktime: 0,
            merkle_path: vec![hash(7)],
        }
        .into(),
        SetCustomMiningJobSuccess {
            channel_id: 10,
            request_id: 4,
            job_id: 11,
        }
        .into(),
        SetCustomMiningJobError {
            channel_id: 10,
            request_id: 4,
            error_code: mining::error_code::INVALID_MINING_JOB_TOKEN.into(),
        }
        .into(),
        SetGroupChannel {
            group_channel_id: 100,
            channel_ids: vec![9, 10, 11],
        }
        .into(),
        AllocateMiningJobToken {
            user_identifier: "farm-7".into(),
            request_id: 12,
        }
        .into(),
        AllocateMiningJobTokenSuccess {
            request_id: 12,
            mining_job_token: vec![0x5a; 45],
            coinbase_outputs: vec![1, 0, 0, 0, 0, 0, 0, 0, 0, 22, 0, 20, 0xab],
        }
        .into(),
        ProvideMissingTransactions {
            request_id: 13,
            unknown_tx_position_list: vec![0, 7, 513, u16::MAX],
        }
        .into(),
        ProvideMissingTransactionsSuccess {
            request_id: 13,
            transaction_list: vec![vec![2; 191], vec![], vec![3; 70_000]],
        }
        .into(),
        DeclareMiningJob {
            request_id: 13,
            mining_job_token: vec![0x5a; 45],
            version: 0x2000_0000,
            coinbase_tx_prefix: vec![2, 0, 0, 0, 0, 1, 1, 0xcc],
            coinbase_tx_suffix: vec![0xdd; 120],
            wtxid_list: vec![hash(11), hash(12), hash(13)],
            excess_data: vec![0; 32],
        }
        .into(),
        DeclareMiningJobSuccess {
            request_id: 13,
            new_mining_job_token: vec![0x6b; 77],
        }
        .into(),
        DeclareMiningJobError {
            request_id: 14,
            error_code: jd::error_code::INVALID_MINING_JOB_TOKEN.into(),
            error_details: b"token expired 12s ago".to_vec(),
        }
        .into(),
        PushSolution {
            extranonce: vec![0x11; 12],
            prev_hash: hash(14),
            nonce: 0x0102_0304,
            ntime: 1_700_000_005,
            nbits: 0x207f_ffff,
            version: 0x2000_4000,
        }
        .into(),
        CoinbaseOutputConstraints {
            coinbase_output_max_additional_size: 100,
            coinbase_output_max_additional_sigops: 4,
        }
        .into(),
        NewTemplate {
            template_id: 1 << 40,
            future_template: true,
            version: 0x2000_0000,
            coinbase_tx_version: 2,
            coinbase_prefix: vec![3, 0xa0, 0xbb, 0x0d],
            coinbase_tx_input_sequence: u32::MAX,
            coinbase_tx_value_remaining: 312_500_000,
            coinbase_tx_outputs_count: 1,
            coinbase_tx_outputs: vec![5; 47],
            coinbase_tx_locktime: 0,
            merkle_path: vec![hash(8), hash(9)],
        }
        .into(),
        tdp::SetNewPrevHash {
            template_id: 1 << 40,
            prev_hash: hash(10),
            header_timestamp: 1_700_000_003,
            n_bits: 0x1703_a30c,
            target: target(0x00),
        }
        .into(),
        RequestTransactionData {
            template_id: 1 << 40,
        }
        .into(),
        RequestTransactionDataSuccess {
            template_id: 1 << 40,
            excess_data: vec![0; 32],
            transaction_list: vec![vec![1; 250], vec![], vec![2; 70_000]],
        }
        .into(),
        RequestTransactionDataError {
            template_id: 1 << 40,
            error_code: tdp::error_code::STALE_TEMPLATE_ID.into(),
        }
        .into(),
        SubmitSolution {
            template_id: 1 << 40,
            version: 0x2000_0000,
            header_timestamp: 1_700_000_004,
            header_nonce: 99,
            coinbase_tx: vec![6; 180],
        }
        .into(),
    ]
}

fn str0255(s: &str) -> Str0255Owned {
    s.try_into().unwrap()
}

fn u256(b: &[u8; 32]) -> U256Owned {
    U256Owned::from(*b)
}

fn path(p: &[[u8; 32]]) -> Seq0255Owned<U256Owned> {
    Seq0255Owned::new(p.iter().map(u256).collect()).unwrap()
}

fn tx_list(txs: &[Vec<u8>]) -> Seq064KOwned<B016MOwned> {
    Seq064KOwned::new(
        txs.iter()
            .map(|tx| B016MOwned::new(tx.clone()).unwrap())
            .collect(),
    )
    .unwrap()
}

/// What the reference crates serialize for the same message, built field by field from their
/// owned structs (not through this crate's wire code).
fn reference_bytes(m: &Message) -> Vec<u8> {
    use binary_sv2::to_bytes;
    use common_messages_sv2 as c;
    use job_declaration_sv2 as j;
    use mining_sv2 as r;
    use sv2::messages::{Common as C, JobDeclaration as J, Mining as M, TemplateDistribution as T};
    use template_distribution_sv2 as t;
    match m {
        Message::Common(C::SetupConnection(m)) => to_bytes(c::SetupConnectionOwned {
            protocol: c::Protocol::MiningProtocol,
            min_version: m.min_version,
            max_version: m.max_version,
            flags: m.flags,
            endpoint_host: str0255(&m.endpoint_host),
            endpoint_port: m.endpoint_port,
            vendor: str0255(&m.vendor),
            hardware_version: str0255(&m.hardware_version),
            firmware: str0255(&m.firmware),
            device_id: str0255(&m.device_id),
        }),
        Message::Common(C::SetupConnectionSuccess(m)) => to_bytes(c::SetupConnectionSuccess {
            used_version: m.used_version,
            flags: m.flags,
        }),
        Message::Common(C::SetupConnectionError(m)) => to_bytes(c::SetupConnectionErrorOwned {
            flags: m.flags,
            error_code: str0255(&m.error_code),
        }),
        Message::Common(C::ChannelEndpointChanged(m)) => to_bytes(c::ChannelEndpointChanged {
            channel_id: m.channel_id,
        }),
        Message::Common(C::Reconnect(m)) => to_bytes(c::ReconnectOwned {
            new_host: str0255(&m.new_host),
            new_port: m.new_port,
        }),
        Message::Mining(M::OpenStandardMiningChannel(m)) => {
            to_bytes(r::OpenStandardMiningChannelOwned {
                request_id: m.request_id,
                user_identity: str0255(&m.user_identity),
                nominal_hash_rate: m.nominal_hash_rate,
                max_target: u256(&m.max_target.to_le_bytes()),
            })
        }
        Message::Mining(M::OpenStandardMiningChannelSuccess(m)) => {
            to_bytes(r::OpenStandardMiningChannelSuccessOwned {
                request_id: m.request_id,
                channel_id: m.channel_id,
                target: u256(&m.target.to_le_bytes()),
                extranonce_prefix: B032Owned::new(m.extranonce_prefix.clone()).unwrap(),
                group_channel_id: m.group_channel_id,
            })
        }
        Message::Mining(M::OpenMiningChannelError(m)) => to_bytes(r::OpenMiningChannelErrorOwned {
            request_id: m.request_id,
            error_code: str0255(&m.error_code),
        }),
        Message::Mining(M::OpenExtendedMiningChannel(m)) => {
            to_bytes(r::OpenExtendedMiningChannelOwned {
                request_id: m.request_id,
                user_identity: str0255(&m.user_identity),
                nominal_hash_rate: m.nominal_hash_rate,
                max_target: u256(&m.max_target.to_le_bytes()),
                min_extranonce_size: m.min_extranonce_size,
            })
        }
        Message::Mining(M::OpenExtendedMiningChannelSuccess(m)) => {
            to_bytes(r::OpenExtendedMiningChannelSuccessOwned {
                request_id: m.request_id,
                channel_id: m.channel_id,
                target: u256(&m.target.to_le_bytes()),
                extranonce_size: m.extranonce_size,
                extranonce_prefix: B032Owned::new(m.extranonce_prefix.clone()).unwrap(),
                group_channel_id: m.group_channel_id,
            })
        }
        Message::Mining(M::NewMiningJob(m)) => to_bytes(r::NewMiningJobOwned {
            channel_id: m.channel_id,
            job_id: m.job_id,
            min_ntime: Sv2OptionOwned::new(m.min_ntime),
            version: m.version,
            merkle_root: u256(&m.merkle_root),
        }),
        Message::Mining(M::UpdateChannel(m)) => to_bytes(r::UpdateChannelOwned {
            channel_id: m.channel_id,
            nominal_hash_rate: m.nominal_hash_rate,
            maximum_target: u256(&m.maximum_target.to_le_bytes()),
        }),
        Message::Mining(M::UpdateChannelError(m)) => to_bytes(r::UpdateChannelErrorOwned {
            channel_id: m.channel_id,
            error_code: str0255(&m.error_code),
        }),
        Message::Mining(M::CloseChannel(m)) => to_bytes(r::CloseChannelOwned {
            channel_id: m.channel_id,
            reason_code: str0255(&m.reason_code),
        }),
        Message::Mining(M::SetExtranoncePrefix(m)) => to_bytes(r::SetExtranoncePrefixOwned {
            channel_id: m.channel_id,
            extranonce_prefix: B032Owned::new(m.extranonce_prefix.clone()).unwrap(),
        }),
        Message::Mining(M::SubmitSharesStandard(m)) => to_bytes(r::SubmitSharesStandard {
            channel_id: m.channel_id,
            sequence_number: m.sequence_number,
            job_id: m.job_id,
            nonce: m.nonce,
            ntime: m.ntime,
            version: m.version,
        }),
        Message::Mining(M::SubmitSharesExtended(m)) => to_bytes(r::SubmitSharesExtendedOwned {
            channel_id: m.channel_id,
            sequence_number: m.sequence_number,
            job_id: m.job_id,
            nonce: m.nonce,
            ntime: m.ntime,
            version: m.version,
            extranonce: B032Owned::new(m.extranonce.clone()).unwrap(),
        }),
        Message::Mining(M::SubmitSharesSuccess(m)) => to_bytes(r::SubmitSharesSuccess {
            channel_id: m.channel_id,
            last_sequence_number: m.last_sequence_number,
            new_submits_accepted_count: m.new_submits_accepted_count,
            new_shares_sum: m.new_shares_sum,
        }),
        Message::Mining(M::SubmitSharesError(m)) => to_bytes(r::SubmitSharesErrorOwned {
            channel_id: m.channel_id,
            sequence_number: m.sequence_number,
            error_code: str0255(&m.error_code),
        }),
        Message::Mining(M::NewExtendedMiningJob(m)) => to_bytes(r::NewExtendedMiningJobOwned {
            channel_id: m.channel_id,
            job_id: m.job_id,
            min_ntime: Sv2OptionOwned::new(m.min_ntime),
            version: m.version,
            version_rolling_allowed: m.version_rolling_allowed,
            merkle_path: path(&m.merkle_path),
            coinbase_tx_prefix: B064KOwned::new(m.coinbase_tx_prefix.clone()).unwrap(),
            coinbase_tx_suffix: B064KOwned::new(m.coinbase_tx_suffix.clone()).unwrap(),
        }),
        Message::Mining(M::SetNewPrevHash(m)) => to_bytes(r::SetNewPrevHashOwned {
            channel_id: m.channel_id,
            job_id: m.job_id,
            prev_hash: u256(&m.prev_hash),
            min_ntime: m.min_ntime,
            nbits: m.nbits,
        }),
        Message::Mining(M::SetTarget(m)) => to_bytes(r::SetTargetOwned {
            channel_id: m.channel_id,
            maximum_target: u256(&m.maximum_target.to_le_bytes()),
        }),
        Message::Mining(M::SetCustomMiningJob(m)) => to_bytes(r::SetCustomMiningJobOwned {
            channel_id: m.channel_id,
            request_id: m.request_id,
            token: B0255Owned::new(m.token.clone()).unwrap(),
            version: m.version,
            prev_hash: u256(&m.prev_hash),
            min_ntime: m.min_ntime,
            nbits: m.nbits,
            coinbase_tx_version: m.coinbase_tx_version,
            coinbase_prefix: B0255Owned::new(m.coinbase_prefix.clone()).unwrap(),
            coinbase_tx_input_n_sequence: m.coinbase_tx_input_n_sequence,
            coinbase_tx_outputs: B064KOwned::new(m.coinbase_tx_outputs.clone()).unwrap(),
            coinbase_tx_locktime: m.coinbase_tx_locktime,
            merkle_path: path(&m.merkle_path),
        }),
        Message::Mining(M::SetCustomMiningJobSuccess(m)) => {
            to_bytes(r::SetCustomMiningJobSuccess {
                channel_id: m.channel_id,
                request_id: m.request_id,
                job_id: m.job_id,
            })
        }
        Message::Mining(M::SetCustomMiningJobError(m)) => {
            to_bytes(r::SetCustomMiningJobErrorOwned {
                channel_id: m.channel_id,
                request_id: m.request_id,
                error_code: str0255(&m.error_code),
            })
        }
        Message::Mining(M::SetGroupChannel(m)) => to_bytes(r::SetGroupChannelOwned {
            group_channel_id: m.group_channel_id,
            channel_ids: Seq064KOwned::new(m.channel_ids.clone()).unwrap(),
        }),
        Message::JobDeclaration(J::AllocateMiningJobToken(m)) => {
            to_bytes(j::AllocateMiningJobTokenOwned {
                user_identifier: str0255(&m.user_identifier),
                request_id: m.request_id,
            })
        }
        Message::JobDeclaration(J::AllocateMiningJobTokenSuccess(m)) => {
            to_bytes(j::AllocateMiningJobTokenSuccessOwned {
                request_id: m.request_id,
                mining_job_token: B0255Owned::new(m.mining_job_token.clone()).unwrap(),
                coinbase_outputs: B064KOwned::new(m.coinbase_outputs.clone()).unwrap(),
            })
        }
        Message::JobDeclaration(J::ProvideMissingTransactions(m)) => {
            to_bytes(j::ProvideMissingTransactionsOwned {
                request_id: m.request_id,
                unknown_tx_position_list: Seq064KOwned::new(m.unknown_tx_position_list.clone())
                    .unwrap(),
            })
        }
        Message::JobDeclaration(J::ProvideMissingTransactionsSuccess(m)) => {
            to_bytes(j::ProvideMissingTransactionsSuccessOwned {
                request_id: m.request_id,
                transaction_list: tx_list(&m.transaction_list),
            })
        }
        Message::JobDeclaration(J::DeclareMiningJob(m)) => to_bytes(j::DeclareMiningJobOwned {
            request_id: m.request_id,
            mining_job_token: B0255Owned::new(m.mining_job_token.clone()).unwrap(),
            version: m.version,
            coinbase_tx_prefix: B064KOwned::new(m.coinbase_tx_prefix.clone()).unwrap(),
            coinbase_tx_suffix: B064KOwned::new(m.coinbase_tx_suffix.clone()).unwrap(),
            wtxid_list: Seq064KOwned::new(m.wtxid_list.iter().map(u256).collect()).unwrap(),
            excess_data: B064KOwned::new(m.excess_data.clone()).unwrap(),
        }),
        Message::JobDeclaration(J::DeclareMiningJobSuccess(m)) => {
            to_bytes(j::DeclareMiningJobSuccessOwned {
                request_id: m.request_id,
                new_mining_job_token: B0255Owned::new(m.new_mining_job_token.clone()).unwrap(),
            })
        }
        Message::JobDeclaration(J::DeclareMiningJobError(m)) => {
            to_bytes(j::DeclareMiningJobErrorOwned {
                request_id: m.request_id,
                error_code: str0255(&m.error_code),
                error_details: B064KOwned::new(m.error_details.clone()).unwrap(),
            })
        }
        Message::JobDeclaration(J::PushSolution(m)) => to_bytes(j::PushSolutionOwned {
            extranonce: B032Owned::new(m.extranonce.clone()).unwrap(),
            prev_hash: u256(&m.prev_hash),
            nonce: m.nonce,
            ntime: m.ntime,
            nbits: m.nbits,
            version: m.version,
        }),
        Message::TemplateDistribution(T::CoinbaseOutputConstraints(m)) => {
            to_bytes(t::CoinbaseOutputConstraints {
                coinbase_output_max_additional_size: m.coinbase_output_max_additional_size,
                coinbase_output_max_additional_sigops: m.coinbase_output_max_additional_sigops,
            })
        }
        Message::TemplateDistribution(T::NewTemplate(m)) => to_bytes(t::NewTemplateOwned {
            template_id: m.template_id,
            future_template: m.future_template,
            version: m.version,
            coinbase_tx_version: m.coinbase_tx_version,
            coinbase_prefix: B0255Owned::new(m.coinbase_prefix.clone()).unwrap(),
            coinbase_tx_input_sequence: m.coinbase_tx_input_sequence,
            coinbase_tx_value_remaining: m.coinbase_tx_value_remaining,
            coinbase_tx_outputs_count: m.coinbase_tx_outputs_count,
            coinbase_tx_outputs: B064KOwned::new(m.coinbase_tx_outputs.clone()).unwrap(),
            coinbase_tx_locktime: m.coinbase_tx_locktime,
            merkle_path: path(&m.merkle_path),
        }),
        Message::TemplateDistribution(T::SetNewPrevHash(m)) => to_bytes(t::SetNewPrevHashOwned {
            template_id: m.template_id,
            prev_hash: u256(&m.prev_hash),
            header_timestamp: m.header_timestamp,
            n_bits: m.n_bits,
            target: u256(&m.target.to_le_bytes()),
        }),
        Message::TemplateDistribution(T::RequestTransactionData(m)) => {
            to_bytes(t::RequestTransactionData {
                template_id: m.template_id,
            })
        }
        Message::TemplateDistribution(T::RequestTransactionDataSuccess(m)) => {
            to_bytes(t::RequestTransactionDataSuccessOwned {
                template_id: m.template_id,
                excess_data: B064KOwned::new(m.excess_data.clone()).unwrap(),
                transaction_list: tx_list(&m.transaction_list),
            })
        }
        Message::TemplateDistribution(T::RequestTransactionDataError(m)) => {
            to_bytes(t::RequestTransactionDataErrorOwned {
                template_id: m.template_id,
                error_code: str0255(&m.error_code),
            })
        }
        Message::TemplateDistribution(T::SubmitSolution(m)) => to_bytes(t::SubmitSolutionOwned {
            template_id: m.template_id,
            version: m.version,
            header_timestamp: m.header_timestamp,
            header_nonce: m.header_nonce,
            coinbase_tx: B064KOwned::new(m.coinbase_tx.clone()).unwrap(),
        }),
        Message::Extensions(m) => {
            unreachable!("{} is extension 0x0001's: tests/extensions.rs", m.name())
        }
    }
    .unwrap()
}

fn encode(m: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    assert_eq!(m.encode(&mut out), Ok(m.msg_type()));
    out
}

#[test]
fn every_message_type_has_a_sample() {
    let samples = samples();
    for (t, _, name) in message_types() {
        assert!(
            samples.iter().any(|m| m.msg_type() == t),
            "no sample of {name}"
        );
    }
    assert_eq!(samples.len(), message_types().count());
}

#[test]
fn every_message_round_trips() {
    for m in samples() {
        let mut bytes = encode(&m);
        let back = Message::decode(m.msg_type(), &mut bytes).unwrap();
        assert_eq!(back, m, "{}", m.name());
        // Appending keeps what the buffer held.
        let mut out = vec![0xee; 3];
        m.encode(&mut out).unwrap();
        assert_eq!(&out[..3], &[0xee; 3]);
        assert_eq!(out[3..], encode(&m)[..]);
    }
}

#[test]
fn the_wire_format_is_the_reference_crates() {
    for m in samples() {
        let mut theirs = reference_bytes(&m);
        assert_eq!(
            encode(&m),
            theirs,
            "{} encodes as the reference does",
            m.name()
        );
        let ours = Message::decode(m.msg_type(), &mut theirs).unwrap();
        assert_eq!(ours, m, "{} decodes what the reference encodes", m.name());
    }
}

/// The spec's message types table (08-Message-Types.md): type, channel_msg bit, name.
const SPEC: &[(u8, bool, &str)] = &[
    (0x00, false, "SetupConnection"),
    (0x01, false, "SetupConnection.Success"),
    (0x02, false, "SetupConnection.Error"),
    (0x03, true, "ChannelEndpointChanged"),
    (0x04, false, "Reconnect"),
    (0x10, false, "OpenStandardMiningChannel"),
    (0x11, false, "OpenStandardMiningChannel.Success"),
    (0x12, false, "OpenMiningChannel.Error"),
    (0x13, false, "OpenExtendedMiningChannel"),
    (0x14, false, "OpenExtendedMiningChannel.Success"),
    (0x15, false, "NewMiningJob"),
    (0x16, true, "UpdateChannel"),
    (0x17, true, "UpdateChannel.Error"),
    (0x18, true, "CloseChannel"),
    (0x19, true, "SetExtranoncePrefix"),
    (0x1a, true, "SubmitSharesStandard"),
    (0x1b, true, "SubmitSharesExtended"),
    (0x1c, true, "SubmitShares.Success"),
    (0x1d, true, "SubmitShares.Error"),
    (0x1f, true, "NewExtendedMiningJob"),
    (0x20, true, "SetNewPrevHash"),
    (0x21, true, "SetTarget"),
    (0x22, false, "SetCustomMiningJob"),
    (0x23, false, "SetCustomMiningJob.Success"),
    (0x24, false, "SetCustomMiningJob.Error"),
    (0x25, false, "SetGroupChannel"),
    (0x50, false, "AllocateMiningJobToken"),
    (0x51, false, "AllocateMiningJobToken.Success"),
    (0x55, false, "ProvideMissingTransactions"),
    (0x56, false, "ProvideMissingTransactions.Success"),
    (0x57, false, "DeclareMiningJob"),
    (0x58, false, "DeclareMiningJob.Success"),
    (0x59, false, "DeclareMiningJob.Error"),
    (0x60, false, "PushSolution"),
    (0x70, false, "CoinbaseOutputConstraints"),
    (0x71, false, "NewTemplate"),
    (0x72, false, "SetNewPrevHash"),
    (0x73, false, "RequestTransactionData"),
    (0x74, false, "RequestTransactionData.Success"),
    (0x75, false, "RequestTransactionData.Error"),
    (0x76, false, "SubmitSolution"),
];

#[test]
fn types_and_channel_bits_are_the_specs() {
    let ours: Vec<_> = message_types().collect();
    assert_eq!(ours, SPEC);
    for m in samples() {
        let bit = SPEC.iter().find(|s| s.0 == m.msg_type()).unwrap().1;
        assert_eq!(m.channel_bit(), bit);
        assert_eq!(m.extension_type(), if bit { 0x8000 } else { 0 });
    }
    assert_eq!(
        (
            SubmitSharesStandard::MSG_TYPE,
            SubmitSharesStandard::CHANNEL_BIT
        ),
        (0x1a, true)
    );
    assert_eq!(mining::error_code::DIFFICULTY_TOO_LOW, "difficulty-too-low");
    assert_eq!(mining::error_code::INVALID_JOB_ID, "invalid-job-id");
    assert_eq!(mining::error_code::DUPLICATE_SHARE, "duplicate-share");
}

#[test]
fn truncated_payloads_do_not_decode() {
    for m in samples() {
        let full = encode(&m);
        for len in 0..full.len() {
            let mut p = full[..len].to_vec();
            assert!(
                matches!(
                    Message::decode(m.msg_type(), &mut p),
                    Err(DecodeError::Malformed { .. })
                ),
                "{} decoded from {len} of {} bytes",
                m.name(),
                full.len()
            );
        }
    }
}

#[test]
fn odd_input_gives_clear_errors() {
    assert_eq!(
        Message::decode(0x45, &mut [1, 2, 3]),
        Err(DecodeError::UnknownType(0x45))
    );
    // A string that is not UTF-8.
    let mut p = encode(&Message::from(SubmitSharesError {
        channel_id: 1,
        sequence_number: 2,
        error_code: "ab".into(),
    }));
    let at = p.len() - 1;
    p[at] = 0xff;
    assert_eq!(
        Message::decode(SubmitSharesError::MSG_TYPE, &mut p),
        Err(DecodeError::NotUtf8 {
            msg_type: 0x1d,
            name: "SubmitShares.Error",
            field: "error_code"
        })
    );
    // Bytes after the message are left for later spec versions' fields.
    let m = Message::from(SetTarget {
        channel_id: 3,
        maximum_target: target(9),
    });
    let mut p = encode(&m);
    p.extend_from_slice(&[1, 2, 3]);
    assert_eq!(Message::decode(m.msg_type(), &mut p), Ok(m));
}

#[test]
fn fields_too_long_for_their_type_are_encode_errors() {
    let mut out = vec![7];
    let e = SubmitSharesExtended {
        channel_id: 1,
        sequence_number: 1,
        job_id: 1,
        nonce: 1,
        ntime: 1,
        version: 1,
        extranonce: vec![0; 33],
        user_identity: None,
    }
    .encode(&mut out);
    assert_eq!(
        e,
        Err(EncodeError::FieldTooLong {
            name: "SubmitSharesExtended",
            field: "extranonce",
            len: 33,
            max: 32
        })
    );
    assert_eq!(out, [7], "nothing appended on error");
    let e = NewTemplate {
        template_id: 0,
        future_template: false,
        version: 0,
        coinbase_tx_version: 0,
        coinbase_prefix: vec![],
        coinbase_tx_input_sequence: 0,
        coinbase_tx_value_remaining: 0,
        coinbase_tx_outputs_count: 0,
        coinbase_tx_outputs: vec![],
        coinbase_tx_locktime: 0,
        merkle_path: vec![[0; 32]; 256],
    }
    .encode(&mut out);
    assert!(matches!(
        e,
        Err(EncodeError::FieldTooLong {
            field: "merkle_path",
            ..
        })
    ));
    let e = CloseChannel {
        channel_id: 1,
        reason_code: "x".repeat(256),
    }
    .encode(&mut out);
    assert!(matches!(
        e,
        Err(EncodeError::FieldTooLong {
            field: "reason_code",
            ..
        })
    ));
}

#[test]
fn protocol_numbers_the_reference_enum_lacks_pass_through() {
    let m = common::SetupConnection::new(3);
    let mut out = Vec::new();
    m.encode(&mut out).unwrap();
    assert_eq!(out[0], 3);
    assert_eq!(common::SetupConnection::decode(&mut out.clone()), Ok(m));
    // The payload is left as it was.
    let before = out.clone();
    common::SetupConnection::decode(&mut out).unwrap();
    assert_eq!(out, before);
    let tdp_setup = common::SetupConnection {
        protocol: common::protocol::TEMPLATE_DISTRIBUTION,
        ..common::SetupConnection::decode(&mut out).unwrap()
    };
    let mut bytes = Vec::new();
    tdp_setup.encode(&mut bytes).unwrap();
    assert_eq!(bytes[0], 2);
}

#[test]
fn job_declaration_constants_are_the_reference_crates() {
    use common_messages_sv2 as c;
    use job_declaration_sv2 as j;
    assert_eq!(
        common::protocol::JOB_DECLARATION,
        c::SV2_JOB_DECLARATION_PROTOCOL_DISCRIMINANT
    );
    // Bit 0, as the reference JDS tests it.
    assert_eq!(job_declaration_flags::DECLARE_TX_DATA, 1);
    assert_eq!(
        common::error_code::MISSING_DECLARE_TX_DATA_FLAG,
        c::ERROR_CODE_SETUP_CONNECTION_MISSING_DECLARE_TX_DATA_FLAG
    );
    for (ours, theirs) in [
        (
            jd::error_code::INVALID_MINING_JOB_TOKEN,
            j::ERROR_CODE_DECLARE_MINING_JOB_INVALID_MINING_JOB_TOKEN,
        ),
        (
            jd::error_code::MISSING_TXS,
            j::ERROR_CODE_DECLARE_MINING_JOB_MISSING_TXS,
        ),
        (
            jd::error_code::INVALID_COINBASE_TX,
            j::ERROR_CODE_DECLARE_MINING_JOB_INVALID_COINBASE_TX,
        ),
        (
            jd::error_code::INVALID_COINBASE_TX_INPUT,
            j::ERROR_CODE_DECLARE_MINING_JOB_INVALID_COINBASE_TX_INPUT,
        ),
        (
            jd::error_code::INTERNAL_ERROR,
            j::ERROR_CODE_DECLARE_MINING_JOB_INTERNAL_ERROR,
        ),
        (
            jd::error_code::STALE_CHAIN_TIP,
            j::ERROR_CODE_DECLARE_MINING_JOB_STALE_CHAIN_TIP,
        ),
        (
            jd::error_code::INVALID_JOB,
            j::ERROR_CODE_DECLARE_MINING_JOB_INVALID_JOB,
        ),
    ] {
        assert_eq!(ours, theirs);
    }
}

#[test]
fn malformed_job_declaration_payloads_are_errors() {
    let declare = DeclareMiningJob {
        request_id: 1,
        mining_job_token: vec![1; 8],
        version: 0x2000_0000,
        coinbase_tx_prefix: vec![2; 10],
        coinbase_tx_suffix: vec![3; 10],
        wtxid_list: vec![hash(1), hash(2)],
        excess_data: vec![],
    };
    let mut p = encode(&declare.clone().into());
    // The wtxid count (after request_id, token, version, prefix, suffix) claims a third hash
    // that is not there: the excess_data length bytes are eaten and the rest runs short.
    let count_at = 4 + 1 + 8 + 4 + 2 + 10 + 2 + 10;
    assert_eq!(&p[count_at..count_at + 2], &[2, 0]);
    p[count_at] = 3;
    assert!(matches!(
        Message::decode(DeclareMiningJob::MSG_TYPE, &mut p),
        Err(DecodeError::Malformed {
            name: "DeclareMiningJob",
            ..
        })
    ));
    // PushSolution's extranonce is at most 32 bytes, both ways.
    let push = PushSolution {
        extranonce: vec![0; 33],
        prev_hash: hash(3),
        nonce: 0,
        ntime: 0,
        nbits: 0,
        version: 0,
    };
    assert!(matches!(
        push.encode(&mut Vec::new()),
        Err(EncodeError::FieldTooLong {
            field: "extranonce",
            max: 32,
            ..
        })
    ));
    let mut p = encode(
        &PushSolution {
            extranonce: vec![0; 32],
            ..push
        }
        .into(),
    );
    p.insert(1, 0);
    p[0] = 33;
    assert!(matches!(
        PushSolution::decode(&mut p),
        Err(DecodeError::Malformed { .. })
    ));
    // A refusal whose code is not UTF-8.
    let mut p = encode(
        &DeclareMiningJobError {
            request_id: 2,
            error_code: "ab".into(),
            error_details: vec![],
        }
        .into(),
    );
    p[5] = 0xff;
    assert_eq!(
        Message::decode(DeclareMiningJobError::MSG_TYPE, &mut p),
        Err(DecodeError::NotUtf8 {
            msg_type: 0x59,
            name: "DeclareMiningJob.Error",
            field: "error_code"
        })
    );
}
