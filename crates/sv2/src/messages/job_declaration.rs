//! Job Declaration Protocol messages (spec section 6): a JDC obtains tokens from the pool's JDS,
//! declares the jobs it built (Full-Template mode), supplies the transactions the JDS lacks,
//! and pushes the blocks it finds so that the JDS propagates them too.
//!
//! The wire layouts are job_declaration_sv2's, which follow the spec except in one name:
//! `AllocateMiningJobToken.Success.coinbase_outputs` is the spec's `coinbase_tx_outputs`.

use job_declaration_sv2 as wire_msgs;

use super::wire::{
    array, b016m_seq, b0255, b032, b064k, hash_seq064k, read, str0255, string, u16_seq, u256, write,
};
use super::{protocol_messages, DecodeError, EncodeError, Sv2Message};

/// `DeclareMiningJob.Error` codes: the reference crate's (which the reference JDS sends).
pub mod error_code {
    pub const INVALID_MINING_JOB_TOKEN: &str = "invalid-mining-job-token";
    pub const MISSING_TXS: &str = "missing-txs";
    pub const INVALID_COINBASE_TX: &str = "invalid-coinbase-tx";
    pub const INVALID_COINBASE_TX_INPUT: &str = "invalid-coinbase-tx-input";
    pub const INTERNAL_ERROR: &str = "internal-error";
    pub const STALE_CHAIN_TIP: &str = "stale-chain-tip";
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

/// JDC -> JDS: a token for a job to be declared (rate limited by the JDS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocateMiningJobToken {
    pub user_identifier: String,
    pub request_id: u32,
}

impl Sv2Message for AllocateMiningJobToken {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_ALLOCATE_MINING_JOB_TOKEN;
    const CHANNEL_BIT: bool = wire_msgs::CHANNEL_BIT_ALLOCATE_MINING_JOB_TOKEN;
    const NAME: &'static str = "AllocateMiningJobToken";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::AllocateMiningJobToken {
                user_identifier: str0255(n, "user_identifier", &self.user_identifier)?,
                request_id: self.request_id,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let m: wire_msgs::AllocateMiningJobToken = read(t, n, payload)?;
        Ok(AllocateMiningJobToken {
            user_identifier: string(t, n, "user_identifier", m.user_identifier)?,
            request_id: m.request_id,
        })
    }
}

/// JDS -> JDC: the token, and the outputs the pool adds to the coinbase: a CompactSize count
/// then consensus-serialized outputs, the first being the pool payout output (value 0 here;
/// the JDC puts the template's revenue in it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocateMiningJobTokenSuccess {
    pub request_id: u32,
    pub mining_job_token: Vec<u8>,
    pub coinbase_outputs: Vec<u8>,
}

impl Sv2Message for AllocateMiningJobTokenSuccess {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_ALLOCATE_MINING_JOB_TOKEN_SUCCESS;
    const CHANNEL_BIT: bool = wire_msgs::CHANNEL_BIT_ALLOCATE_MINING_JOB_TOKEN_SUCCESS;
    const NAME: &'static str = "AllocateMiningJobToken.Success";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::AllocateMiningJobTokenSuccess {
                request_id: self.request_id,
                mining_job_token: b0255(n, "mining_job_token", &self.mining_job_token)?,
                coinbase_outputs: b064k(n, "coinbase_outputs", &self.coinbase_outputs)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::AllocateMiningJobTokenSuccess =
            read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(AllocateMiningJobTokenSuccess {
            request_id: m.request_id,
            mining_job_token: m.mining_job_token.to_owned_bytes(),
            coinbase_outputs: m.coinbase_outputs.to_owned_bytes(),
        })
    }
}

/// JDC -> JDS (Full-Template mode): a job on an allocated token. The coinbase is split around
/// the extranonce and keeps its BIP141 fields (marker, flag, witness), unlike a mining job's;
/// `wtxid_list` is the template's transactions in block order, coinbase excluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclareMiningJob {
    pub request_id: u32,
    pub mining_job_token: Vec<u8>,
    pub version: u32,
    pub coinbase_tx_prefix: Vec<u8>,
    pub coinbase_tx_suffix: Vec<u8>,
    pub wtxid_list: Vec<[u8; 32]>,
    pub excess_data: Vec<u8>,
}

impl Sv2Message for DeclareMiningJob {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_DECLARE_MINING_JOB;
    const CHANNEL_BIT: bool = wire_msgs::CHANNEL_BIT_DECLARE_MINING_JOB;
    const NAME: &'static str = "DeclareMiningJob";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::DeclareMiningJob {
                request_id: self.request_id,
                mining_job_token: b0255(n, "mining_job_token", &self.mining_job_token)?,
                version: self.version,
                coinbase_tx_prefix: b064k(n, "coinbase_tx_prefix", &self.coinbase_tx_prefix)?,
                coinbase_tx_suffix: b064k(n, "coinbase_tx_suffix", &self.coinbase_tx_suffix)?,
                wtxid_list: hash_seq064k(n, "wtxid_list", &self.wtxid_list)?,
                excess_data: b064k(n, "excess_data", &self.excess_data)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::DeclareMiningJob = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(DeclareMiningJob {
            request_id: m.request_id,
            mining_job_token: m.mining_job_token.to_owned_bytes(),
            version: m.version,
            coinbase_tx_prefix: m.coinbase_tx_prefix.to_owned_bytes(),
            coinbase_tx_suffix: m.coinbase_tx_suffix.to_owned_bytes(),
            wtxid_list: m.wtxid_list.iter().map(|h| *h.as_array()).collect(),
            excess_data: m.excess_data.to_owned_bytes(),
        })
    }
}

/// JDS -> JDC: the job is accepted; `new_mining_job_token` goes into `SetCustomMiningJob`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclareMiningJobSuccess {
    pub request_id: u32,
    pub new_mining_job_token: Vec<u8>,
}

impl Sv2Message for DeclareMiningJobSuccess {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_DECLARE_MINING_JOB_SUCCESS;
    const CHANNEL_BIT: bool = wire_msgs::CHANNEL_BIT_DECLARE_MINING_JOB_SUCCESS;
    const NAME: &'static str = "DeclareMiningJob.Success";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::DeclareMiningJobSuccess {
                request_id: self.request_id,
                new_mining_job_token: b0255(n, "new_mining_job_token", &self.new_mining_job_token)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::DeclareMiningJobSuccess = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(DeclareMiningJobSuccess {
            request_id: m.request_id,
            new_mining_job_token: m.new_mining_job_token.to_owned_bytes(),
        })
    }
}

/// JDS -> JDC: the job is refused ([`error_code`]); `error_details` is free-form bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclareMiningJobError {
    pub request_id: u32,
    pub error_code: String,
    pub error_details: Vec<u8>,
}

impl Sv2Message for DeclareMiningJobError {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_DECLARE_MINING_JOB_ERROR;
    const CHANNEL_BIT: bool = wire_msgs::CHANNEL_BIT_DECLARE_MINING_JOB_ERROR;
    const NAME: &'static str = "DeclareMiningJob.Error";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::DeclareMiningJobError {
                request_id: self.request_id,
                error_code: str0255(n, "error_code", &self.error_code)?,
                error_details: b064k(n, "error_details", &self.error_details)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let m: wire_msgs::DeclareMiningJobError = read(t, n, payload)?;
        Ok(DeclareMiningJobError {
            request_id: m.request_id,
            error_code: string(t, n, "error_code", m.error_code)?,
            error_details: m.error_details.to_owned_bytes(),
        })
    }
}

/// JDS -> JDC: the declared transactions the JDS's mempool lacks, by position in
/// `DeclareMiningJob.wtxid_list` (0-based, coinbase excluded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvideMissingTransactions {
    pub request_id: u32,
    pub unknown_tx_position_list: Vec<u16>,
}

impl Sv2Message for ProvideMissingTransactions {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_PROVIDE_MISSING_TRANSACTIONS;
    const CHANNEL_BIT: bool = wire_msgs::CHANNEL_BIT_PROVIDE_MISSING_TRANSACTIONS;
    const NAME: &'static str = "ProvideMissingTransactions";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::ProvideMissingTransactions {
                request_id: self.request_id,
                unknown_tx_position_list: u16_seq(
                    n,
                    "unknown_tx_position_list",
                    &self.unknown_tx_position_list,
                )?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::ProvideMissingTransactions = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(ProvideMissingTransactions {
            request_id: m.request_id,
            unknown_tx_position_list: m.unknown_tx_position_list.into_inner(),
        })
    }
}

/// JDC -> JDS: the requested transactions (serialized with witness), in the order requested.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvideMissingTransactionsSuccess {
    pub request_id: u32,
    pub transaction_list: Vec<Vec<u8>>,
}

impl Sv2Message for ProvideMissingTransactionsSuccess {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_PROVIDE_MISSING_TRANSACTIONS_SUCCESS;
    const CHANNEL_BIT: bool = wire_msgs::CHANNEL_BIT_PROVIDE_MISSING_TRANSACTIONS_SUCCESS;
    const NAME: &'static str = "ProvideMissingTransactions.Success";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::ProvideMissingTransactionsSuccess {
                request_id: self.request_id,
                transaction_list: b016m_seq(n, "transaction_list", &self.transaction_list)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::ProvideMissingTransactionsSuccess =
            read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(ProvideMissingTransactionsSuccess {
            request_id: m.request_id,
            transaction_list: m
                .transaction_list
                .iter()
                .map(|t| t.as_bytes().to_vec())
                .collect(),
        })
    }
}

/// JDC -> JDS: a block found on the connection's most recently declared job; the JDS
/// rebuilds it (coinbase prefix, `extranonce`, suffix; the declared transactions) and
/// propagates it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushSolution {
    /// The full extranonce, as it sits between the coinbase prefix and suffix.
    pub extranonce: Vec<u8>,
    pub prev_hash: [u8; 32],
    pub nonce: u32,
    pub ntime: u32,
    pub nbits: u32,
    pub version: u32,
}

impl Sv2Message for PushSolution {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_PUSH_SOLUTION;
    const CHANNEL_BIT: bool = wire_msgs::CHANNEL_BIT_PUSH_SOLUTION;
    const NAME: &'static str = "PushSolution";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::PushSolution {
                extranonce: b032(n, "extranonce", &self.extranonce)?,
                prev_hash: u256(&self.prev_hash),
                nonce: self.nonce,
                ntime: self.ntime,
                nbits: self.nbits,
                version: self.version,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::PushSolution = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(PushSolution {
            extranonce: m.extranonce.to_owned_bytes(),
            prev_hash: array(m.prev_hash),
            nonce: m.nonce,
            ntime: m.ntime,
            nbits: m.nbits,
            version: m.version,
        })
    }
}
