//! Mining Protocol messages (spec section 5): channels, jobs, prev hashes, targets, shares.

use mining_sv2 as wire_msgs;
use primitives::Target;

use super::protocol_messages;
use super::wire::message;

/// Error codes, in the spec's and the reference implementation's words (the spec lists the
/// first four of `SubmitShares.Error` and of `OpenMiningChannel.Error`; the others are the
/// reference pool's, which its clients know).
pub mod error_code {
    // SubmitShares.Error
    pub const INVALID_CHANNEL_ID: &str = "invalid-channel-id";
    pub const STALE_SHARE: &str = "stale-share";
    pub const DIFFICULTY_TOO_LOW: &str = "difficulty-too-low";
    pub const INVALID_JOB_ID: &str = "invalid-job-id";
    pub const DUPLICATE_SHARE: &str = "duplicate-share";
    pub const INVALID_SHARE: &str = "invalid-share";
    /// stratumlab's: the pool could not record the share (its store cannot write) and does
    /// not acknowledge it; the channel stays open.
    pub const STORE_UNAVAILABLE: &str = "store-unavailable";
    pub const BAD_EXTRANONCE_SIZE: &str = "bad-extranonce-size";
    pub const VERSION_ROLLING_NOT_ALLOWED: &str = "version-rolling-not-allowed";
    // OpenMiningChannel.Error and UpdateChannel.Error
    pub const UNKNOWN_USER: &str = "unknown-user";
    pub const MAX_TARGET_OUT_OF_RANGE: &str = "max-target-out-of-range";
    pub const INVALID_NOMINAL_HASHRATE: &str = "invalid-nominal-hashrate";
    pub const UNSUPPORTED_MIN_EXTRANONCE_SIZE: &str = "unsupported-min-extranonce-size";
    pub const CHANNEL_CAPACITY_EXHAUSTED: &str = "channel-capacity-exhausted";
    pub const STANDARD_CHANNELS_NOT_SUPPORTED_FOR_CUSTOM_WORK: &str =
        "standard-channels-not-supported-for-custom-work";
    // SetCustomMiningJob.Error
    pub const INVALID_MINING_JOB_TOKEN: &str = "invalid-mining-job-token";
}

protocol_messages! {
    Mining:
    OpenStandardMiningChannel(OpenStandardMiningChannel),
    OpenStandardMiningChannelSuccess(OpenStandardMiningChannelSuccess),
    OpenMiningChannelError(OpenMiningChannelError),
    OpenExtendedMiningChannel(OpenExtendedMiningChannel),
    OpenExtendedMiningChannelSuccess(OpenExtendedMiningChannelSuccess),
    NewMiningJob(NewMiningJob),
    UpdateChannel(UpdateChannel),
    UpdateChannelError(UpdateChannelError),
    CloseChannel(CloseChannel),
    SetExtranoncePrefix(SetExtranoncePrefix),
    SubmitSharesStandard(SubmitSharesStandard),
    SubmitSharesExtended(SubmitSharesExtended),
    SubmitSharesSuccess(SubmitSharesSuccess),
    SubmitSharesError(SubmitSharesError),
    NewExtendedMiningJob(NewExtendedMiningJob),
    SetNewPrevHash(SetNewPrevHash),
    SetTarget(SetTarget),
    SetCustomMiningJob(SetCustomMiningJob),
    SetCustomMiningJobSuccess(SetCustomMiningJobSuccess),
    SetCustomMiningJobError(SetCustomMiningJobError),
    SetGroupChannel(SetGroupChannel),
}

message! {
    wire_msgs;
    /// Client -> server: open a standard channel (header-only mining).
    #[derive(Clone, Debug, PartialEq)]
    pub struct OpenStandardMiningChannel(
        MESSAGE_TYPE_OPEN_STANDARD_MINING_CHANNEL,
        channel_bit: false,
        "OpenStandardMiningChannel",
    ) {
        pub request_id: u32 => copy,
        pub user_identity: String => str,
        /// Hashes per second.
        pub nominal_hash_rate: f32 => copy,
        pub max_target: Target => target,
    }
}

message! {
    wire_msgs;
    /// Server -> client: the standard channel is open.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct OpenStandardMiningChannelSuccess(
        MESSAGE_TYPE_OPEN_STANDARD_MINING_CHANNEL_SUCCESS,
        channel_bit: false,
        "OpenStandardMiningChannel.Success",
    ) {
        pub request_id: u32 => copy,
        pub channel_id: u32 => copy,
        pub target: Target => target,
        /// At most 32 bytes.
        pub extranonce_prefix: Vec<u8> => b032,
        pub group_channel_id: u32 => copy,
    }
}

message! {
    wire_msgs;
    /// Server -> client: a standard or extended channel was not opened.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct OpenMiningChannelError(
        MESSAGE_TYPE_OPEN_MINING_CHANNEL_ERROR,
        channel_bit: false,
        "OpenMiningChannel.Error",
    ) {
        pub request_id: u32 => copy,
        pub error_code: String => str,
    }
}

message! {
    wire_msgs;
    /// Client -> server: open an extended channel (the client rolls part of the extranonce).
    #[derive(Clone, Debug, PartialEq)]
    pub struct OpenExtendedMiningChannel(
        MESSAGE_TYPE_OPEN_EXTENDED_MINING_CHANNEL,
        channel_bit: false,
        "OpenExtendedMiningChannel",
    ) {
        pub request_id: u32 => copy,
        pub user_identity: String => str,
        pub nominal_hash_rate: f32 => copy,
        pub max_target: Target => target,
        pub min_extranonce_size: u16 => copy,
    }
}

message! {
    wire_msgs;
    /// Server -> client: the extended channel is open.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct OpenExtendedMiningChannelSuccess(
        MESSAGE_TYPE_OPEN_EXTENDED_MINING_CHANNEL_SUCCESS,
        channel_bit: false,
        "OpenExtendedMiningChannel.Success",
    ) {
        pub request_id: u32 => copy,
        pub channel_id: u32 => copy,
        pub target: Target => target,
        /// Bytes of extranonce the client rolls, after the prefix.
        pub extranonce_size: u16 => copy,
        /// At most 32 bytes.
        pub extranonce_prefix: Vec<u8> => b032,
        pub group_channel_id: u32 => copy,
    }
}

message! {
    wire_msgs;
    /// Server -> client: a job for a standard channel. `min_ntime` unset: a future job, activated
    /// by a `SetNewPrevHash` naming it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct NewMiningJob(
        MESSAGE_TYPE_NEW_MINING_JOB,
        channel_bit: false,
        "NewMiningJob",
    ) {
        pub channel_id: u32 => copy,
        pub job_id: u32 => copy,
        pub min_ntime: Option<u32> => option,
        pub version: u32 => copy,
        pub merkle_root: [u8; 32] => hash,
    }
}

message! {
    wire_msgs;
    /// Client -> server: the channel's hash rate or maximum target changed.
    #[derive(Clone, Debug, PartialEq)]
    pub struct UpdateChannel(
        MESSAGE_TYPE_UPDATE_CHANNEL,
        channel_bit: true,
        "UpdateChannel",
    ) {
        pub channel_id: u32 => copy,
        pub nominal_hash_rate: f32 => copy,
        pub maximum_target: Target => target,
    }
}

message! {
    wire_msgs;
    /// Server -> client: an `UpdateChannel` was invalid.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct UpdateChannelError(
        MESSAGE_TYPE_UPDATE_CHANNEL_ERROR,
        channel_bit: true,
        "UpdateChannel.Error",
    ) {
        pub channel_id: u32 => copy,
        pub error_code: String => str,
    }
}

message! {
    wire_msgs;
    /// Either way: the channel ends.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct CloseChannel(
        MESSAGE_TYPE_CLOSE_CHANNEL,
        channel_bit: true,
        "CloseChannel",
    ) {
        pub channel_id: u32 => copy,
        pub reason_code: String => str,
    }
}

message! {
    wire_msgs;
    /// Server -> client: the channel's extranonce prefix changes for the jobs that follow.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SetExtranoncePrefix(
        MESSAGE_TYPE_SET_EXTRANONCE_PREFIX,
        channel_bit: true,
        "SetExtranoncePrefix",
    ) {
        pub channel_id: u32 => copy,
        /// At most 32 bytes.
        pub extranonce_prefix: Vec<u8> => b032,
    }
}

message! {
    wire_msgs;
    /// Client -> server: a share on a standard channel.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SubmitSharesStandard(
        MESSAGE_TYPE_SUBMIT_SHARES_STANDARD,
        channel_bit: true,
        "SubmitSharesStandard",
    ) {
        pub channel_id: u32 => copy,
        pub sequence_number: u32 => copy,
        pub job_id: u32 => copy,
        pub nonce: u32 => copy,
        pub ntime: u32 => copy,
        pub version: u32 => copy,
    }
}

message! {
    wire_msgs;
    /// Client -> server: a share on an extended channel, with the extranonce it rolled.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SubmitSharesExtended(
        MESSAGE_TYPE_SUBMIT_SHARES_EXTENDED,
        channel_bit: true,
        "SubmitSharesExtended",
    ) {
        pub channel_id: u32 => copy,
        pub sequence_number: u32 => copy,
        pub job_id: u32 => copy,
        pub nonce: u32 => copy,
        pub ntime: u32 => copy,
        pub version: u32 => copy,
        /// At most 32 bytes; the channel's negotiated extranonce size.
        pub extranonce: Vec<u8> => b032,
    }
}

message! {
    wire_msgs;
    /// Server -> client: shares accepted, possibly several at once.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SubmitSharesSuccess(
        MESSAGE_TYPE_SUBMIT_SHARES_SUCCESS,
        channel_bit: true,
        "SubmitShares.Success",
    ) {
        pub channel_id: u32 => copy,
        pub last_sequence_number: u32 => copy,
        pub new_submits_accepted_count: u32 => copy,
        /// Sum of the difficulty of the shares acknowledged in this batch.
        pub new_shares_sum: u64 => copy,
    }
}

message! {
    wire_msgs;
    /// Server -> client: one share refused ([`error_code`]).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SubmitSharesError(
        MESSAGE_TYPE_SUBMIT_SHARES_ERROR,
        channel_bit: true,
        "SubmitShares.Error",
    ) {
        pub channel_id: u32 => copy,
        pub sequence_number: u32 => copy,
        pub error_code: String => str,
    }
}

message! {
    wire_msgs;
    /// Server -> client: a job for an extended or group channel; the coinbase is
    /// `coinbase_tx_prefix + extranonce_prefix + extranonce + coinbase_tx_suffix`.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct NewExtendedMiningJob(
        MESSAGE_TYPE_NEW_EXTENDED_MINING_JOB,
        channel_bit: true,
        "NewExtendedMiningJob",
    ) {
        pub channel_id: u32 => copy,
        pub job_id: u32 => copy,
        pub min_ntime: Option<u32> => option,
        pub version: u32 => copy,
        pub version_rolling_allowed: bool => copy,
        pub merkle_path: Vec<[u8; 32]> => path,
        pub coinbase_tx_prefix: Vec<u8> => b064k,
        pub coinbase_tx_suffix: Vec<u8> => b064k,
    }
}

message! {
    wire_msgs;
    /// Server -> client: a new previous block; only the job it names is valid from now on.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SetNewPrevHash(
        MESSAGE_TYPE_MINING_SET_NEW_PREV_HASH,
        channel_bit: true,
        "SetNewPrevHash",
    ) {
        pub channel_id: u32 => copy,
        pub job_id: u32 => copy,
        pub prev_hash: [u8; 32] => hash,
        pub min_ntime: u32 => copy,
        pub nbits: u32 => copy,
    }
}

message! {
    wire_msgs;
    /// Server -> client: the channel's share target from now on.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SetTarget(
        MESSAGE_TYPE_SET_TARGET,
        channel_bit: true,
        "SetTarget",
    ) {
        pub channel_id: u32 => copy,
        pub maximum_target: Target => target,
    }
}

message! {
    wire_msgs;
    /// Client -> server: a job the client declared (Job Declaration), to be paid for.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SetCustomMiningJob(
        MESSAGE_TYPE_SET_CUSTOM_MINING_JOB,
        channel_bit: false,
        "SetCustomMiningJob",
    ) {
        pub channel_id: u32 => copy,
        pub request_id: u32 => copy,
        /// The spec's `mining_job_token`, from the Job Declarator Server; at most 255 bytes.
        pub token: Vec<u8> => b0255,
        pub version: u32 => copy,
        pub prev_hash: [u8; 32] => hash,
        pub min_ntime: u32 => copy,
        pub nbits: u32 => copy,
        pub coinbase_tx_version: u32 => copy,
        /// At most 255 bytes.
        pub coinbase_prefix: Vec<u8> => b0255,
        pub coinbase_tx_input_n_sequence: u32 => copy,
        pub coinbase_tx_outputs: Vec<u8> => b064k,
        pub coinbase_tx_locktime: u32 => copy,
        pub merkle_path: Vec<[u8; 32]> => path,
    }
}

message! {
    wire_msgs;
    /// Server -> client: the custom job is accepted under `job_id`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SetCustomMiningJobSuccess(
        MESSAGE_TYPE_SET_CUSTOM_MINING_JOB_SUCCESS,
        channel_bit: false,
        "SetCustomMiningJob.Success",
    ) {
        pub channel_id: u32 => copy,
        pub request_id: u32 => copy,
        pub job_id: u32 => copy,
    }
}

message! {
    wire_msgs;
    /// Server -> client: the custom job is refused.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SetCustomMiningJobError(
        MESSAGE_TYPE_SET_CUSTOM_MINING_JOB_ERROR,
        channel_bit: false,
        "SetCustomMiningJob.Error",
    ) {
        pub channel_id: u32 => copy,
        pub request_id: u32 => copy,
        pub error_code: String => str,
    }
}

message! {
    wire_msgs;
    /// Server -> client: these channels now belong to the group `group_channel_id`.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SetGroupChannel(
        MESSAGE_TYPE_SET_GROUP_CHANNEL,
        channel_bit: false,
        "SetGroupChannel",
    ) {
        pub group_channel_id: u32 => copy,
        pub channel_ids: Vec<u32> => u32s,
    }
}
