//! Mining Protocol messages (spec section 5): channels, jobs, prev hashes, targets, shares.

use mining_sv2 as wire_msgs;
use primitives::Target;

use binary_sv2::GetSize;

use super::wire::{b032, message, read, write};
use super::{protocol_messages, DecodeError, EncodeError, Sv2Message};
use crate::tlv;

/// Error codes, in the spec's and the reference implementation's words (the spec lists the
/// first four of `SubmitShares.Error` and of `OpenMiningChannel.Error`; the others are the
/// reference pool's, which its clients know).
pub mod error_code {
    // SubmitShares.Error
    /// The share's channel is not open on this connection.
    pub const INVALID_CHANNEL_ID: &str = "invalid-channel-id";
    /// The share's job was superseded (a new prev hash) or has expired.
    pub const STALE_SHARE: &str = "stale-share";
    /// The share's hash does not meet the channel's target.
    pub const DIFFICULTY_TOO_LOW: &str = "difficulty-too-low";
    /// The share's job is unknown on its channel.
    pub const INVALID_JOB_ID: &str = "invalid-job-id";
    /// The same share (job, nonce, ntime, version, extranonce) was already submitted.
    pub const DUPLICATE_SHARE: &str = "duplicate-share";
    /// The share is not taken for another reason: its ntime is out of range, or the pool is
    /// overloaded.
    pub const INVALID_SHARE: &str = "invalid-share";
    /// stratumlab's: the pool could not record the share (its store cannot write) and does
    /// not acknowledge it; the channel stays open.
    pub const STORE_UNAVAILABLE: &str = "store-unavailable";
    /// An extended share's extranonce is not the channel's `extranonce_size`.
    pub const BAD_EXTRANONCE_SIZE: &str = "bad-extranonce-size";
    /// The share rolls version bits the job does not allow.
    pub const VERSION_ROLLING_NOT_ALLOWED: &str = "version-rolling-not-allowed";
    // OpenMiningChannel.Error and UpdateChannel.Error
    /// The pool does not take this `user_identity` (unknown, or not allowed now).
    pub const UNKNOWN_USER: &str = "unknown-user";
    /// The client's maximum target is one the pool cannot serve (a zero target).
    pub const MAX_TARGET_OUT_OF_RANGE: &str = "max-target-out-of-range";
    /// The nominal hash rate is negative or not finite.
    pub const INVALID_NOMINAL_HASHRATE: &str = "invalid-nominal-hashrate";
    /// The pool cannot give the channel that many extranonce bytes.
    pub const UNSUPPORTED_MIN_EXTRANONCE_SIZE: &str = "unsupported-min-extranonce-size";
    /// The connection has as many channels as the pool allows.
    pub const CHANNEL_CAPACITY_EXHAUSTED: &str = "channel-capacity-exhausted";
    /// `SetCustomMiningJob` on a standard channel: custom jobs need an extended one.
    pub const STANDARD_CHANNELS_NOT_SUPPORTED_FOR_CUSTOM_WORK: &str =
        "standard-channels-not-supported-for-custom-work";
    // SetCustomMiningJob.Error
    /// The `SetCustomMiningJob` token is not one the pool accepts for this job.
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
        /// Chosen by the client; echoed in the answer to match it to this request.
        pub request_id: u32 => copy,
        /// The user (and worker) the channel mines for, as the pool authorizes it.
        pub user_identity: String => str,
        /// Hashes per second.
        pub nominal_hash_rate: f32 => copy,
        /// The easiest share target the client accepts (little-endian on the wire).
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
        /// The `request_id` of the `OpenStandardMiningChannel` answered.
        pub request_id: u32 => copy,
        /// The new channel's id.
        pub channel_id: u32 => copy,
        /// The channel's initial share target.
        pub target: Target => target,
        /// At most 32 bytes.
        pub extranonce_prefix: Vec<u8> => b032,
        /// The group channel this channel belongs to.
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
        /// The `request_id` of the channel opening refused.
        pub request_id: u32 => copy,
        /// Why, as one of [`error_code`].
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
        /// Chosen by the client; echoed in the answer to match it to this request.
        pub request_id: u32 => copy,
        /// The user (and worker) the channel mines for, as the pool authorizes it.
        pub user_identity: String => str,
        /// Hashes per second.
        pub nominal_hash_rate: f32 => copy,
        /// The easiest share target the client accepts (little-endian on the wire).
        pub max_target: Target => target,
        /// The fewest extranonce bytes the client needs to roll.
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
        /// The `request_id` of the `OpenExtendedMiningChannel` answered.
        pub request_id: u32 => copy,
        /// The new channel's id.
        pub channel_id: u32 => copy,
        /// The channel's initial share target.
        pub target: Target => target,
        /// Bytes of extranonce the client rolls, after the prefix.
        pub extranonce_size: u16 => copy,
        /// At most 32 bytes.
        pub extranonce_prefix: Vec<u8> => b032,
        /// The group channel this channel belongs to.
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// The job's id, unique within the channel.
        pub job_id: u32 => copy,
        /// The smallest nTime (Unix seconds) shares may use; `None` for a future job.
        pub min_ntime: Option<u32> => option,
        /// The block header version (nVersion).
        pub version: u32 => copy,
        /// The header's merkle root, coinbase included, in header byte order.
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// Hashes per second.
        pub nominal_hash_rate: f32 => copy,
        /// The easiest share target the client now accepts (little-endian on the wire).
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// Why, as one of [`error_code`] (the `OpenMiningChannel.Error` codes).
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// Why the channel is closed (free text from the closing side).
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
        /// The channel this message is about.
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// The client's running share counter, echoed by `SubmitShares.Success` / `.Error`.
        pub sequence_number: u32 => copy,
        /// The job the share was found on.
        pub job_id: u32 => copy,
        /// The header nonce.
        pub nonce: u32 => copy,
        /// The header nTime, Unix seconds.
        pub ntime: u32 => copy,
        /// The block header version (nVersion).
        pub version: u32 => copy,
    }
}

/// Client -> server: a share on an extended channel, with the extranonce it rolled.
///
/// Written by hand rather than by `message!`: extension 0x0002 appends a `user_identity` TLV
/// (see [`crate::tlv`]), which the reference struct does not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitSharesExtended {
    /// The channel this message is about.
    pub channel_id: u32,
    /// The client's running share counter, echoed by `SubmitShares.Success` / `.Error`.
    pub sequence_number: u32,
    /// The job the share was found on.
    pub job_id: u32,
    /// The header nonce.
    pub nonce: u32,
    /// The header nTime, Unix seconds.
    pub ntime: u32,
    /// The block header version (nVersion).
    pub version: u32,
    /// At most 32 bytes; the channel's negotiated extranonce size.
    pub extranonce: Vec<u8>,
    /// Extension 0x0002's TLV: the worker the share is from, at most 32 bytes. Sent only on
    /// a connection that negotiated the extension; a receiver that did not ignores it.
    pub user_identity: Option<String>,
}

impl Sv2Message for SubmitSharesExtended {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SUBMIT_SHARES_EXTENDED;
    const CHANNEL_BIT: bool = true;
    const NAME: &'static str = "SubmitSharesExtended";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::SubmitSharesExtended {
                channel_id: self.channel_id,
                sequence_number: self.sequence_number,
                job_id: self.job_id,
                nonce: self.nonce,
                ntime: self.ntime,
                version: self.version,
                extranonce: b032(n, "extranonce", &self.extranonce)?,
            },
            out,
        )?;
        if let Some(id) = &self.user_identity {
            if id.len() > tlv::MAX_USER_IDENTITY_LEN {
                return Err(EncodeError::FieldTooLong {
                    name: n,
                    field: "user_identity",
                    len: id.len(),
                    max: tlv::MAX_USER_IDENTITY_LEN,
                });
            }
            let (extension, field) = tlv::USER_IDENTITY;
            tlv::write(extension, field, id.as_bytes(), out).expect("at most 32 bytes");
        }
        Ok(())
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let (mut m, used) = {
            let w: wire_msgs::SubmitSharesExtended = read(t, n, payload)?;
            let used = w.get_size();
            let m = SubmitSharesExtended {
                channel_id: w.channel_id,
                sequence_number: w.sequence_number,
                job_id: w.job_id,
                nonce: w.nonce,
                ntime: w.ntime,
                version: w.version,
                extranonce: w.extranonce.to_owned_bytes(),
                user_identity: None,
            };
            (m, used)
        };
        // Bytes that are not TLVs are ignored, as bytes after a message always were (a later
        // spec version may append fields). So is a user_identity the extension does not allow
        // (over 32 bytes, or not UTF-8): a receiver that did not negotiate 0x0002 must ignore
        // the TLV whatever it holds, and one that did credits the share to the channel's own
        // worker rather than refuse it. The encoder refuses such a name with a clear error.
        for f in tlv::read(&payload[used.min(payload.len())..]) {
            let Ok(f) = f else { break };
            if (f.extension, f.field) != tlv::USER_IDENTITY
                || f.value.len() > tlv::MAX_USER_IDENTITY_LEN
            {
                continue;
            }
            if let Ok(id) = std::str::from_utf8(f.value) {
                m.user_identity = Some(id.to_owned());
            }
        }
        Ok(m)
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// The most recent `sequence_number` this acknowledges.
        pub last_sequence_number: u32 => copy,
        /// Shares accepted since the previous `SubmitShares.Success`.
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// The rejected share's `sequence_number`.
        pub sequence_number: u32 => copy,
        /// Why, as one of [`error_code`].
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// The job's id, unique within the channel.
        pub job_id: u32 => copy,
        /// The smallest nTime (Unix seconds) shares may use; `None` for a future job.
        pub min_ntime: Option<u32> => option,
        /// The block header version (nVersion).
        pub version: u32 => copy,
        /// Whether the client may roll the header version bits (BIP320).
        pub version_rolling_allowed: bool => copy,
        /// The coinbase's merkle path, deepest first, hashes in wire byte order.
        pub merkle_path: Vec<[u8; 32]> => path,
        /// The coinbase serialization before the extranonce (as for SV1 `coinb1`).
        pub coinbase_tx_prefix: Vec<u8> => b064k,
        /// The coinbase serialization after the extranonce (as for SV1 `coinb2`).
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// The future job this prev hash activates.
        pub job_id: u32 => copy,
        /// The previous block's hash, in header byte order.
        pub prev_hash: [u8; 32] => hash,
        /// The smallest nTime (Unix seconds) shares may use from now on.
        pub min_ntime: u32 => copy,
        /// The network target in compact form (nBits).
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// The new share target (little-endian on the wire).
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// Chosen by the client; echoed in the answer to match it to this request.
        pub request_id: u32 => copy,
        /// The spec's `mining_job_token`, from the Job Declarator Server; at most 255 bytes.
        pub token: Vec<u8> => b0255,
        /// The block header version (nVersion).
        pub version: u32 => copy,
        /// The previous block's hash, in header byte order.
        pub prev_hash: [u8; 32] => hash,
        /// The smallest nTime (Unix seconds) shares may use.
        pub min_ntime: u32 => copy,
        /// The network target in compact form (nBits).
        pub nbits: u32 => copy,
        /// The coinbase transaction's version.
        pub coinbase_tx_version: u32 => copy,
        /// At most 255 bytes.
        pub coinbase_prefix: Vec<u8> => b0255,
        /// The coinbase input's nSequence.
        pub coinbase_tx_input_n_sequence: u32 => copy,
        /// The coinbase's outputs, serialized back to back without a count.
        pub coinbase_tx_outputs: Vec<u8> => b064k,
        /// The coinbase transaction's nLockTime.
        pub coinbase_tx_locktime: u32 => copy,
        /// The coinbase's merkle path, deepest first, hashes in wire byte order.
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// The `request_id` of the `SetCustomMiningJob` answered.
        pub request_id: u32 => copy,
        /// The job id the custom job has on the channel.
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
        /// The channel this message is about.
        pub channel_id: u32 => copy,
        /// The `request_id` of the `SetCustomMiningJob` refused.
        pub request_id: u32 => copy,
        /// Why, as one of [`error_code`].
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
        /// The group channel the listed channels now belong to.
        pub group_channel_id: u32 => copy,
        /// The channels now in the group.
        pub channel_ids: Vec<u32> => u32s,
    }
}
