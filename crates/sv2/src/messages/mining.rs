//! Mining Protocol messages (spec section 5): channels, jobs, prev hashes, targets, shares.

use binary_sv2::Sv2Option;
use mining_sv2 as wire_msgs;
use primitives::Target;

use super::wire::{
    array, b0255, b032, b064k, hashes, path, read, str0255, string, u256, u32_seq, write,
};
use super::{protocol_messages, DecodeError, EncodeError, Sv2Message};

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

fn target(t: &Target) -> [u8; 32] {
    t.to_le_bytes()
}

fn option(v: Option<u32>) -> Sv2Option<'static, u32> {
    Sv2Option::new(v)
}

/// Client -> server: open a standard channel (header-only mining).
#[derive(Clone, Debug, PartialEq)]
pub struct OpenStandardMiningChannel {
    pub request_id: u32,
    pub user_identity: String,
    /// Hashes per second.
    pub nominal_hash_rate: f32,
    pub max_target: Target,
}

impl Sv2Message for OpenStandardMiningChannel {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_OPEN_STANDARD_MINING_CHANNEL;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "OpenStandardMiningChannel";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        let max_target = target(&self.max_target);
        write(
            n,
            wire_msgs::OpenStandardMiningChannel {
                request_id: self.request_id,
                user_identity: str0255(n, "user_identity", &self.user_identity)?,
                nominal_hash_rate: self.nominal_hash_rate,
                max_target: u256(&max_target),
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let m: wire_msgs::OpenStandardMiningChannel = read(t, n, payload)?;
        Ok(OpenStandardMiningChannel {
            request_id: m.request_id,
            user_identity: string(t, n, "user_identity", m.user_identity)?,
            nominal_hash_rate: m.nominal_hash_rate,
            max_target: Target::from_le_bytes(m.max_target.as_array()),
        })
    }
}

/// Server -> client: the standard channel is open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenStandardMiningChannelSuccess {
    pub request_id: u32,
    pub channel_id: u32,
    pub target: Target,
    /// At most 32 bytes.
    pub extranonce_prefix: Vec<u8>,
    pub group_channel_id: u32,
}

impl Sv2Message for OpenStandardMiningChannelSuccess {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_OPEN_STANDARD_MINING_CHANNEL_SUCCESS;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "OpenStandardMiningChannel.Success";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        let t = target(&self.target);
        write(
            n,
            wire_msgs::OpenStandardMiningChannelSuccess {
                request_id: self.request_id,
                channel_id: self.channel_id,
                target: u256(&t),
                extranonce_prefix: b032(n, "extranonce_prefix", &self.extranonce_prefix)?,
                group_channel_id: self.group_channel_id,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::OpenStandardMiningChannelSuccess =
            read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(OpenStandardMiningChannelSuccess {
            request_id: m.request_id,
            channel_id: m.channel_id,
            target: Target::from_le_bytes(m.target.as_array()),
            extranonce_prefix: m.extranonce_prefix.to_owned_bytes(),
            group_channel_id: m.group_channel_id,
        })
    }
}

/// Server -> client: a standard or extended channel was not opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenMiningChannelError {
    pub request_id: u32,
    pub error_code: String,
}

impl Sv2Message for OpenMiningChannelError {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_OPEN_MINING_CHANNEL_ERROR;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "OpenMiningChannel.Error";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::OpenMiningChannelError {
                request_id: self.request_id,
                error_code: str0255(n, "error_code", &self.error_code)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let m: wire_msgs::OpenMiningChannelError = read(t, n, payload)?;
        Ok(OpenMiningChannelError {
            request_id: m.request_id,
            error_code: string(t, n, "error_code", m.error_code)?,
        })
    }
}

/// Client -> server: open an extended channel (the client rolls part of the extranonce).
#[derive(Clone, Debug, PartialEq)]
pub struct OpenExtendedMiningChannel {
    pub request_id: u32,
    pub user_identity: String,
    pub nominal_hash_rate: f32,
    pub max_target: Target,
    pub min_extranonce_size: u16,
}

impl Sv2Message for OpenExtendedMiningChannel {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_OPEN_EXTENDED_MINING_CHANNEL;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "OpenExtendedMiningChannel";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        let max_target = target(&self.max_target);
        write(
            n,
            wire_msgs::OpenExtendedMiningChannel {
                request_id: self.request_id,
                user_identity: str0255(n, "user_identity", &self.user_identity)?,
                nominal_hash_rate: self.nominal_hash_rate,
                max_target: u256(&max_target),
                min_extranonce_size: self.min_extranonce_size,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let m: wire_msgs::OpenExtendedMiningChannel = read(t, n, payload)?;
        Ok(OpenExtendedMiningChannel {
            request_id: m.request_id,
            user_identity: string(t, n, "user_identity", m.user_identity)?,
            nominal_hash_rate: m.nominal_hash_rate,
            max_target: Target::from_le_bytes(m.max_target.as_array()),
            min_extranonce_size: m.min_extranonce_size,
        })
    }
}

/// Server -> client: the extended channel is open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenExtendedMiningChannelSuccess {
    pub request_id: u32,
    pub channel_id: u32,
    pub target: Target,
    /// Bytes of extranonce the client rolls, after the prefix.
    pub extranonce_size: u16,
    /// At most 32 bytes.
    pub extranonce_prefix: Vec<u8>,
    pub group_channel_id: u32,
}

impl Sv2Message for OpenExtendedMiningChannelSuccess {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_OPEN_EXTENDED_MINING_CHANNEL_SUCCESS;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "OpenExtendedMiningChannel.Success";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        let t = target(&self.target);
        write(
            n,
            wire_msgs::OpenExtendedMiningChannelSuccess {
                request_id: self.request_id,
                channel_id: self.channel_id,
                target: u256(&t),
                extranonce_size: self.extranonce_size,
                extranonce_prefix: b032(n, "extranonce_prefix", &self.extranonce_prefix)?,
                group_channel_id: self.group_channel_id,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::OpenExtendedMiningChannelSuccess =
            read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(OpenExtendedMiningChannelSuccess {
            request_id: m.request_id,
            channel_id: m.channel_id,
            target: Target::from_le_bytes(m.target.as_array()),
            extranonce_size: m.extranonce_size,
            extranonce_prefix: m.extranonce_prefix.to_owned_bytes(),
            group_channel_id: m.group_channel_id,
        })
    }
}

/// Server -> client: a job for a standard channel. `min_ntime` unset: a future job, activated
/// by a `SetNewPrevHash` naming it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewMiningJob {
    pub channel_id: u32,
    pub job_id: u32,
    pub min_ntime: Option<u32>,
    pub version: u32,
    pub merkle_root: [u8; 32],
}

impl Sv2Message for NewMiningJob {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_NEW_MINING_JOB;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "NewMiningJob";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        write(
            Self::NAME,
            wire_msgs::NewMiningJob {
                channel_id: self.channel_id,
                job_id: self.job_id,
                min_ntime: option(self.min_ntime),
                version: self.version,
                merkle_root: u256(&self.merkle_root),
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::NewMiningJob = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(NewMiningJob {
            channel_id: m.channel_id,
            job_id: m.job_id,
            min_ntime: m.min_ntime.into_inner(),
            version: m.version,
            merkle_root: array(m.merkle_root),
        })
    }
}

/// Client -> server: the channel's hash rate or maximum target changed.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateChannel {
    pub channel_id: u32,
    pub nominal_hash_rate: f32,
    pub maximum_target: Target,
}

impl Sv2Message for UpdateChannel {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_UPDATE_CHANNEL;
    const CHANNEL_BIT: bool = true;
    const NAME: &'static str = "UpdateChannel";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let t = target(&self.maximum_target);
        write(
            Self::NAME,
            wire_msgs::UpdateChannel {
                channel_id: self.channel_id,
                nominal_hash_rate: self.nominal_hash_rate,
                maximum_target: u256(&t),
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::UpdateChannel = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(UpdateChannel {
            channel_id: m.channel_id,
            nominal_hash_rate: m.nominal_hash_rate,
            maximum_target: Target::from_le_bytes(m.maximum_target.as_array()),
        })
    }
}

/// Server -> client: an `UpdateChannel` was invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateChannelError {
    pub channel_id: u32,
    pub error_code: String,
}

impl Sv2Message for UpdateChannelError {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_UPDATE_CHANNEL_ERROR;
    const CHANNEL_BIT: bool = true;
    const NAME: &'static str = "UpdateChannel.Error";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::UpdateChannelError {
                channel_id: self.channel_id,
                error_code: str0255(n, "error_code", &self.error_code)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let m: wire_msgs::UpdateChannelError = read(t, n, payload)?;
        Ok(UpdateChannelError {
            channel_id: m.channel_id,
            error_code: string(t, n, "error_code", m.error_code)?,
        })
    }
}

/// Either way: the channel ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloseChannel {
    pub channel_id: u32,
    pub reason_code: String,
}

impl Sv2Message for CloseChannel {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_CLOSE_CHANNEL;
    const CHANNEL_BIT: bool = true;
    const NAME: &'static str = "CloseChannel";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::CloseChannel {
                channel_id: self.channel_id,
                reason_code: str0255(n, "reason_code", &self.reason_code)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let m: wire_msgs::CloseChannel = read(t, n, payload)?;
        Ok(CloseChannel {
            channel_id: m.channel_id,
            reason_code: string(t, n, "reason_code", m.reason_code)?,
        })
    }
}

/// Server -> client: the channel's extranonce prefix changes for the jobs that follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetExtranoncePrefix {
    pub channel_id: u32,
    /// At most 32 bytes.
    pub extranonce_prefix: Vec<u8>,
}

impl Sv2Message for SetExtranoncePrefix {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SET_EXTRANONCE_PREFIX;
    const CHANNEL_BIT: bool = true;
    const NAME: &'static str = "SetExtranoncePrefix";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::SetExtranoncePrefix {
                channel_id: self.channel_id,
                extranonce_prefix: b032(n, "extranonce_prefix", &self.extranonce_prefix)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::SetExtranoncePrefix = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(SetExtranoncePrefix {
            channel_id: m.channel_id,
            extranonce_prefix: m.extranonce_prefix.to_owned_bytes(),
        })
    }
}

/// Client -> server: a share on a standard channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubmitSharesStandard {
    pub channel_id: u32,
    pub sequence_number: u32,
    pub job_id: u32,
    pub nonce: u32,
    pub ntime: u32,
    pub version: u32,
}

impl Sv2Message for SubmitSharesStandard {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SUBMIT_SHARES_STANDARD;
    const CHANNEL_BIT: bool = true;
    const NAME: &'static str = "SubmitSharesStandard";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        write(
            Self::NAME,
            wire_msgs::SubmitSharesStandard {
                channel_id: self.channel_id,
                sequence_number: self.sequence_number,
                job_id: self.job_id,
                nonce: self.nonce,
                ntime: self.ntime,
                version: self.version,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::SubmitSharesStandard = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(SubmitSharesStandard {
            channel_id: m.channel_id,
            sequence_number: m.sequence_number,
            job_id: m.job_id,
            nonce: m.nonce,
            ntime: m.ntime,
            version: m.version,
        })
    }
}

/// Client -> server: a share on an extended channel, with the extranonce it rolled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitSharesExtended {
    pub channel_id: u32,
    pub sequence_number: u32,
    pub job_id: u32,
    pub nonce: u32,
    pub ntime: u32,
    pub version: u32,
    /// At most 32 bytes; the channel's negotiated extranonce size.
    pub extranonce: Vec<u8>,
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
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::SubmitSharesExtended = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(SubmitSharesExtended {
            channel_id: m.channel_id,
            sequence_number: m.sequence_number,
            job_id: m.job_id,
            nonce: m.nonce,
            ntime: m.ntime,
            version: m.version,
            extranonce: m.extranonce.to_owned_bytes(),
        })
    }
}

/// Server -> client: shares accepted, possibly several at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubmitSharesSuccess {
    pub channel_id: u32,
    pub last_sequence_number: u32,
    pub new_submits_accepted_count: u32,
    /// Sum of the difficulty of the shares acknowledged in this batch.
    pub new_shares_sum: u64,
}

impl Sv2Message for SubmitSharesSuccess {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SUBMIT_SHARES_SUCCESS;
    const CHANNEL_BIT: bool = true;
    const NAME: &'static str = "SubmitShares.Success";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        write(
            Self::NAME,
            wire_msgs::SubmitSharesSuccess {
                channel_id: self.channel_id,
                last_sequence_number: self.last_sequence_number,
                new_submits_accepted_count: self.new_submits_accepted_count,
                new_shares_sum: self.new_shares_sum,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::SubmitSharesSuccess = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(SubmitSharesSuccess {
            channel_id: m.channel_id,
            last_sequence_number: m.last_sequence_number,
            new_submits_accepted_count: m.new_submits_accepted_count,
            new_shares_sum: m.new_shares_sum,
        })
    }
}

/// Server -> client: one share refused ([`error_code`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitSharesError {
    pub channel_id: u32,
    pub sequence_number: u32,
    pub error_code: String,
}

impl Sv2Message for SubmitSharesError {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SUBMIT_SHARES_ERROR;
    const CHANNEL_BIT: bool = true;
    const NAME: &'static str = "SubmitShares.Error";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::SubmitSharesError {
                channel_id: self.channel_id,
                sequence_number: self.sequence_number,
                error_code: str0255(n, "error_code", &self.error_code)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let m: wire_msgs::SubmitSharesError = read(t, n, payload)?;
        Ok(SubmitSharesError {
            channel_id: m.channel_id,
            sequence_number: m.sequence_number,
            error_code: string(t, n, "error_code", m.error_code)?,
        })
    }
}

/// Server -> client: a job for an extended or group channel; the coinbase is
/// `coinbase_tx_prefix + extranonce_prefix + extranonce + coinbase_tx_suffix`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewExtendedMiningJob {
    pub channel_id: u32,
    pub job_id: u32,
    pub min_ntime: Option<u32>,
    pub version: u32,
    pub version_rolling_allowed: bool,
    pub merkle_path: Vec<[u8; 32]>,
    pub coinbase_tx_prefix: Vec<u8>,
    pub coinbase_tx_suffix: Vec<u8>,
}

impl Sv2Message for NewExtendedMiningJob {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_NEW_EXTENDED_MINING_JOB;
    const CHANNEL_BIT: bool = true;
    const NAME: &'static str = "NewExtendedMiningJob";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::NewExtendedMiningJob {
                channel_id: self.channel_id,
                job_id: self.job_id,
                min_ntime: option(self.min_ntime),
                version: self.version,
                version_rolling_allowed: self.version_rolling_allowed,
                merkle_path: path(n, "merkle_path", &self.merkle_path)?,
                coinbase_tx_prefix: b064k(n, "coinbase_tx_prefix", &self.coinbase_tx_prefix)?,
                coinbase_tx_suffix: b064k(n, "coinbase_tx_suffix", &self.coinbase_tx_suffix)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::NewExtendedMiningJob = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(NewExtendedMiningJob {
            channel_id: m.channel_id,
            job_id: m.job_id,
            min_ntime: m.min_ntime.into_inner(),
            version: m.version,
            version_rolling_allowed: m.version_rolling_allowed,
            merkle_path: hashes(m.merkle_path),
            coinbase_tx_prefix: m.coinbase_tx_prefix.to_owned_bytes(),
            coinbase_tx_suffix: m.coinbase_tx_suffix.to_owned_bytes(),
        })
    }
}

/// Server -> client: a new previous block; only the job it names is valid from now on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetNewPrevHash {
    pub channel_id: u32,
    pub job_id: u32,
    pub prev_hash: [u8; 32],
    pub min_ntime: u32,
    pub nbits: u32,
}

impl Sv2Message for SetNewPrevHash {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_MINING_SET_NEW_PREV_HASH;
    const CHANNEL_BIT: bool = true;
    const NAME: &'static str = "SetNewPrevHash";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        write(
            Self::NAME,
            wire_msgs::SetNewPrevHash {
                channel_id: self.channel_id,
                job_id: self.job_id,
                prev_hash: u256(&self.prev_hash),
                min_ntime: self.min_ntime,
                nbits: self.nbits,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::SetNewPrevHash = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(SetNewPrevHash {
            channel_id: m.channel_id,
            job_id: m.job_id,
            prev_hash: array(m.prev_hash),
            min_ntime: m.min_ntime,
            nbits: m.nbits,
        })
    }
}

/// Server -> client: the channel's share target from now on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetTarget {
    pub channel_id: u32,
    pub maximum_target: Target,
}

impl Sv2Message for SetTarget {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SET_TARGET;
    const CHANNEL_BIT: bool = true;
    const NAME: &'static str = "SetTarget";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let t = target(&self.maximum_target);
        write(
            Self::NAME,
            wire_msgs::SetTarget {
                channel_id: self.channel_id,
                maximum_target: u256(&t),
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::SetTarget = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(SetTarget {
            channel_id: m.channel_id,
            maximum_target: Target::from_le_bytes(m.maximum_target.as_array()),
        })
    }
}

/// Client -> server: a job the client declared (Job Declaration), to be paid for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetCustomMiningJob {
    pub channel_id: u32,
    pub request_id: u32,
    /// The spec's `mining_job_token`, from the Job Declarator Server; at most 255 bytes.
    pub token: Vec<u8>,
    pub version: u32,
    pub prev_hash: [u8; 32],
    pub min_ntime: u32,
    pub nbits: u32,
    pub coinbase_tx_version: u32,
    /// At most 255 bytes.
    pub coinbase_prefix: Vec<u8>,
    pub coinbase_tx_input_n_sequence: u32,
    pub coinbase_tx_outputs: Vec<u8>,
    pub coinbase_tx_locktime: u32,
    pub merkle_path: Vec<[u8; 32]>,
}

impl Sv2Message for SetCustomMiningJob {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SET_CUSTOM_MINING_JOB;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "SetCustomMiningJob";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::SetCustomMiningJob {
                channel_id: self.channel_id,
                request_id: self.request_id,
                token: b0255(n, "token", &self.token)?,
                version: self.version,
                prev_hash: u256(&self.prev_hash),
                min_ntime: self.min_ntime,
                nbits: self.nbits,
                coinbase_tx_version: self.coinbase_tx_version,
                coinbase_prefix: b0255(n, "coinbase_prefix", &self.coinbase_prefix)?,
                coinbase_tx_input_n_sequence: self.coinbase_tx_input_n_sequence,
                coinbase_tx_outputs: b064k(n, "coinbase_tx_outputs", &self.coinbase_tx_outputs)?,
                coinbase_tx_locktime: self.coinbase_tx_locktime,
                merkle_path: path(n, "merkle_path", &self.merkle_path)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::SetCustomMiningJob = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(SetCustomMiningJob {
            channel_id: m.channel_id,
            request_id: m.request_id,
            token: m.token.to_owned_bytes(),
            version: m.version,
            prev_hash: array(m.prev_hash),
            min_ntime: m.min_ntime,
            nbits: m.nbits,
            coinbase_tx_version: m.coinbase_tx_version,
            coinbase_prefix: m.coinbase_prefix.to_owned_bytes(),
            coinbase_tx_input_n_sequence: m.coinbase_tx_input_n_sequence,
            coinbase_tx_outputs: m.coinbase_tx_outputs.to_owned_bytes(),
            coinbase_tx_locktime: m.coinbase_tx_locktime,
            merkle_path: hashes(m.merkle_path),
        })
    }
}

/// Server -> client: the custom job is accepted under `job_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetCustomMiningJobSuccess {
    pub channel_id: u32,
    pub request_id: u32,
    pub job_id: u32,
}

impl Sv2Message for SetCustomMiningJobSuccess {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SET_CUSTOM_MINING_JOB_SUCCESS;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "SetCustomMiningJob.Success";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        write(
            Self::NAME,
            wire_msgs::SetCustomMiningJobSuccess {
                channel_id: self.channel_id,
                request_id: self.request_id,
                job_id: self.job_id,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::SetCustomMiningJobSuccess = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(SetCustomMiningJobSuccess {
            channel_id: m.channel_id,
            request_id: m.request_id,
            job_id: m.job_id,
        })
    }
}

/// Server -> client: the custom job is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetCustomMiningJobError {
    pub channel_id: u32,
    pub request_id: u32,
    pub error_code: String,
}

impl Sv2Message for SetCustomMiningJobError {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SET_CUSTOM_MINING_JOB_ERROR;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "SetCustomMiningJob.Error";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::SetCustomMiningJobError {
                channel_id: self.channel_id,
                request_id: self.request_id,
                error_code: str0255(n, "error_code", &self.error_code)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let m: wire_msgs::SetCustomMiningJobError = read(t, n, payload)?;
        Ok(SetCustomMiningJobError {
            channel_id: m.channel_id,
            request_id: m.request_id,
            error_code: string(t, n, "error_code", m.error_code)?,
        })
    }
}

/// Server -> client: these channels now belong to the group `group_channel_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetGroupChannel {
    pub group_channel_id: u32,
    pub channel_ids: Vec<u32>,
}

impl Sv2Message for SetGroupChannel {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SET_GROUP_CHANNEL;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "SetGroupChannel";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::SetGroupChannel {
                group_channel_id: self.group_channel_id,
                channel_ids: u32_seq(n, "channel_ids", &self.channel_ids)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::SetGroupChannel = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(SetGroupChannel {
            group_channel_id: m.group_channel_id,
            channel_ids: m.channel_ids.into_inner(),
        })
    }
}
