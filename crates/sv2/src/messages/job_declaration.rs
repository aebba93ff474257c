//! Job Declaration Protocol messages (spec section 6): a JDC obtains tokens from the pool's JDS,
//! declares the jobs it built (Full-Template mode), supplies the transactions the JDS lacks,
//! and pushes the blocks it finds so that the JDS propagates them too.
//!
//! The wire layouts are job_declaration_sv2's, which follow the spec except in one name:
//! `AllocateMiningJobToken.Success.coinbase_outputs` is the spec's `coinbase_tx_outputs`.

use job_declaration_sv2 as wire_msgs;

use super::protocol_messages;
use super::wire::message;

/// `DeclareMiningJob.Error` codes: the reference crate's (which the reference JDS sends).
pub mod error_code {
    /// The token is not one this JDS allocated, or is no longer valid.
    pub const INVALID_MINING_JOB_TOKEN: &str = "invalid-mining-job-token";
    /// The transactions the JDS asked for did not come (in time).
    pub const MISSING_TXS: &str = "missing-txs";
    /// The declared coinbase does not parse or is otherwise unacceptable.
    pub const INVALID_COINBASE_TX: &str = "invalid-coinbase-tx";
    /// The coinbase has more than one input, or its input does not spend the null outpoint.
    pub const INVALID_COINBASE_TX_INPUT: &str = "invalid-coinbase-tx-input";
    /// The JDS failed on its side.
    pub const INTERNAL_ERROR: &str = "internal-error";
    /// The job builds on a prev hash that is no longer the tip.
    pub const STALE_CHAIN_TIP: &str = "stale-chain-tip";
    /// The job is invalid as a whole (its witness commitment does not match its transactions).
    pub const INVALID_JOB: &str = "invalid-job";
}

protocol_messages! {
    JobDeclaration:
    AllocateMiningJobToken(AllocateMiningJobToken),
    AllocateMiningJobTokenSuccess(AllocateMiningJobTokenSuccess),
    ProvideMissingTransactions(ProvideMissingTransactions),
    ProvideMissingTransactionsSuccess(ProvideMissingTransactionsSuccess),
    DeclareMiningJob(DeclareMiningJob),
    DeclareMiningJobSuccess(DeclareMiningJobSuccess),
    DeclareMiningJobError(DeclareMiningJobError),
    PushSolution(PushSolution),
}

message! {
    wire_msgs;
    /// JDC -> JDS: a token for a job to be declared (rate limited by the JDS).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct AllocateMiningJobToken(
        MESSAGE_TYPE_ALLOCATE_MINING_JOB_TOKEN,
        channel_bit: wire_msgs::CHANNEL_BIT_ALLOCATE_MINING_JOB_TOKEN,
        "AllocateMiningJobToken",
    ) {
        /// The user the token is for.
        pub user_identifier: String => str,
        /// Chosen by the client; echoed in the answer to match it to this request.
        pub request_id: u32 => copy,
    }
}

message! {
    wire_msgs;
    /// JDS -> JDC: the token, and the outputs the pool adds to the coinbase: a CompactSize count
    /// then consensus-serialized outputs, the first being the pool payout output (value 0 here;
    /// the JDC puts the template's revenue in it).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct AllocateMiningJobTokenSuccess(
        MESSAGE_TYPE_ALLOCATE_MINING_JOB_TOKEN_SUCCESS,
        channel_bit: wire_msgs::CHANNEL_BIT_ALLOCATE_MINING_JOB_TOKEN_SUCCESS,
        "AllocateMiningJobToken.Success",
    ) {
        /// The `request_id` of the `AllocateMiningJobToken` answered.
        pub request_id: u32 => copy,
        /// The token from `AllocateMiningJobToken.Success`, opaque to the client; at most 255
        /// bytes.
        pub mining_job_token: Vec<u8> => b0255,
        /// The outputs the pool requires in the coinbase, serialized back to back (the spec's
        /// `coinbase_tx_outputs`).
        pub coinbase_outputs: Vec<u8> => b064k,
    }
}

message! {
    wire_msgs;
    /// JDC -> JDS (Full-Template mode): a job on an allocated token. The coinbase is split around
    /// the extranonce and keeps its BIP141 fields (marker, flag, witness), unlike a mining job's;
    /// `wtxid_list` is the template's transactions in block order, coinbase excluded.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct DeclareMiningJob(
        MESSAGE_TYPE_DECLARE_MINING_JOB,
        channel_bit: wire_msgs::CHANNEL_BIT_DECLARE_MINING_JOB,
        "DeclareMiningJob",
    ) {
        /// Chosen by the client; echoed in the answer to match it to this request.
        pub request_id: u32 => copy,
        /// The token from `AllocateMiningJobToken.Success`, opaque to the client; at most 255
        /// bytes.
        pub mining_job_token: Vec<u8> => b0255,
        /// The block header version (nVersion).
        pub version: u32 => copy,
        /// The coinbase serialization before the extranonce (as for SV1 `coinb1`).
        pub coinbase_tx_prefix: Vec<u8> => b064k,
        /// The coinbase serialization after the extranonce (as for SV1 `coinb2`).
        pub coinbase_tx_suffix: Vec<u8> => b064k,
        /// The wtxids of the job's transactions, in block order, coinbase excluded.
        pub wtxid_list: Vec<[u8; 32]> => wtxids,
        /// Bytes reserved for future fields; empty in this version.
        pub excess_data: Vec<u8> => b064k,
    }
}

message! {
    wire_msgs;
    /// JDS -> JDC: the job is accepted; `new_mining_job_token` goes into `SetCustomMiningJob`.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct DeclareMiningJobSuccess(
        MESSAGE_TYPE_DECLARE_MINING_JOB_SUCCESS,
        channel_bit: wire_msgs::CHANNEL_BIT_DECLARE_MINING_JOB_SUCCESS,
        "DeclareMiningJob.Success",
    ) {
        /// The `request_id` of the `DeclareMiningJob` answered.
        pub request_id: u32 => copy,
        /// The token to use in `SetCustomMiningJob` for this job; at most 255 bytes.
        pub new_mining_job_token: Vec<u8> => b0255,
    }
}

message! {
    wire_msgs;
    /// JDS -> JDC: the job is refused ([`error_code`]); `error_details` is free-form bytes.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct DeclareMiningJobError(
        MESSAGE_TYPE_DECLARE_MINING_JOB_ERROR,
        channel_bit: wire_msgs::CHANNEL_BIT_DECLARE_MINING_JOB_ERROR,
        "DeclareMiningJob.Error",
    ) {
        /// The `request_id` of the `DeclareMiningJob` refused.
        pub request_id: u32 => copy,
        /// Why, as one of [`error_code`].
        pub error_code: String => str,
        /// Details of the error (for `missing-txs` and the like), in the sender's format.
        pub error_details: Vec<u8> => b064k,
    }
}

message! {
    wire_msgs;
    /// JDS -> JDC: the declared transactions the JDS's mempool lacks, by position in
    /// `DeclareMiningJob.wtxid_list` (0-based, coinbase excluded).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ProvideMissingTransactions(
        MESSAGE_TYPE_PROVIDE_MISSING_TRANSACTIONS,
        channel_bit: wire_msgs::CHANNEL_BIT_PROVIDE_MISSING_TRANSACTIONS,
        "ProvideMissingTransactions",
    ) {
        /// The `request_id` of the `DeclareMiningJob` whose transactions are missing.
        pub request_id: u32 => copy,
        /// Positions in the declared `wtxid_list` of the transactions the JDS lacks.
        pub unknown_tx_position_list: Vec<u16> => u16s,
    }
}

message! {
    wire_msgs;
    /// JDC -> JDS: the requested transactions (serialized with witness), in the order requested.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ProvideMissingTransactionsSuccess(
        MESSAGE_TYPE_PROVIDE_MISSING_TRANSACTIONS_SUCCESS,
        channel_bit: wire_msgs::CHANNEL_BIT_PROVIDE_MISSING_TRANSACTIONS_SUCCESS,
        "ProvideMissingTransactions.Success",
    ) {
        /// The `request_id` of the `ProvideMissingTransactions` answered.
        pub request_id: u32 => copy,
        /// The transactions asked for, serialized, in the order asked for.
        pub transaction_list: Vec<Vec<u8>> => txs,
    }
}

message! {
    wire_msgs;
    /// JDC -> JDS: a block found on the connection's most recently declared job; the JDS
    /// rebuilds it (coinbase prefix, `extranonce`, suffix; the declared transactions) and
    /// propagates it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct PushSolution(
        MESSAGE_TYPE_PUSH_SOLUTION,
        channel_bit: wire_msgs::CHANNEL_BIT_PUSH_SOLUTION,
        "PushSolution",
    ) {
        /// The full extranonce, as it sits between the coinbase prefix and suffix.
        pub extranonce: Vec<u8> => b032,
        /// The previous block's hash, in header byte order.
        pub prev_hash: [u8; 32] => hash,
        /// The header nonce.
        pub nonce: u32 => copy,
        /// The header nTime, Unix seconds.
        pub ntime: u32 => copy,
        /// The network target in compact form (nBits).
        pub nbits: u32 => copy,
        /// The block header version (nVersion) of the block found.
        pub version: u32 => copy,
    }
}
