//! Template Distribution Protocol messages (spec section 7): a Template Provider's templates
//! and prev hashes, their transactions, and the solutions sent back.

use primitives::Target;
use template_distribution_sv2 as wire_msgs;

use super::wire::{
    array, b016m_seq, b0255, b064k, hashes, path, read, str0255, string, u256, write,
};
use super::{protocol_messages, DecodeError, EncodeError, Sv2Message};

/// `RequestTransactionData.Error` codes of the spec.
pub mod error_code {
    pub const TEMPLATE_ID_NOT_FOUND: &str = "template-id-not-found";
    pub const STALE_TEMPLATE_ID: &str = "stale-template-id";
}

protocol_messages! {
    TemplateDistribution:
    CoinbaseOutputConstraints(CoinbaseOutputConstraints),
    NewTemplate(NewTemplate),
    SetNewPrevHash(SetNewPrevHash),
    RequestTransactionData(RequestTransactionData),
    RequestTransactionDataSuccess(RequestTransactionDataSuccess),
    RequestTransactionDataError(RequestTransactionDataError),
    SubmitSolution(SubmitSolution),
}

/// Client -> provider: room the client needs in the coinbase for its own outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoinbaseOutputConstraints {
    pub coinbase_output_max_additional_size: u32,
    pub coinbase_output_max_additional_sigops: u16,
}

impl Sv2Message for CoinbaseOutputConstraints {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_COINBASE_OUTPUT_CONSTRAINTS;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "CoinbaseOutputConstraints";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        write(
            Self::NAME,
            wire_msgs::CoinbaseOutputConstraints {
                coinbase_output_max_additional_size: self.coinbase_output_max_additional_size,
                coinbase_output_max_additional_sigops: self.coinbase_output_max_additional_sigops,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::CoinbaseOutputConstraints = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(CoinbaseOutputConstraints {
            coinbase_output_max_additional_size: m.coinbase_output_max_additional_size,
            coinbase_output_max_additional_sigops: m.coinbase_output_max_additional_sigops,
        })
    }
}

/// Provider -> client: a block template; `future_template` ones wait for the `SetNewPrevHash`
/// naming them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTemplate {
    pub template_id: u64,
    pub future_template: bool,
    pub version: u32,
    pub coinbase_tx_version: u32,
    /// The start of the coinbase scriptSig (the BIP34 height); at most 255 bytes.
    pub coinbase_prefix: Vec<u8>,
    pub coinbase_tx_input_sequence: u32,
    pub coinbase_tx_value_remaining: u64,
    pub coinbase_tx_outputs_count: u32,
    /// The outputs the coinbase must carry, serialized back to back without a count.
    pub coinbase_tx_outputs: Vec<u8>,
    pub coinbase_tx_locktime: u32,
    pub merkle_path: Vec<[u8; 32]>,
}

impl Sv2Message for NewTemplate {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_NEW_TEMPLATE;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "NewTemplate";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::NewTemplate {
                template_id: self.template_id,
                future_template: self.future_template,
                version: self.version,
                coinbase_tx_version: self.coinbase_tx_version,
                coinbase_prefix: b0255(n, "coinbase_prefix", &self.coinbase_prefix)?,
                coinbase_tx_input_sequence: self.coinbase_tx_input_sequence,
                coinbase_tx_value_remaining: self.coinbase_tx_value_remaining,
                coinbase_tx_outputs_count: self.coinbase_tx_outputs_count,
                coinbase_tx_outputs: b064k(n, "coinbase_tx_outputs", &self.coinbase_tx_outputs)?,
                coinbase_tx_locktime: self.coinbase_tx_locktime,
                merkle_path: path(n, "merkle_path", &self.merkle_path)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::NewTemplate = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(NewTemplate {
            template_id: m.template_id,
            future_template: m.future_template,
            version: m.version,
            coinbase_tx_version: m.coinbase_tx_version,
            coinbase_prefix: m.coinbase_prefix.to_owned_bytes(),
            coinbase_tx_input_sequence: m.coinbase_tx_input_sequence,
            coinbase_tx_value_remaining: m.coinbase_tx_value_remaining,
            coinbase_tx_outputs_count: m.coinbase_tx_outputs_count,
            coinbase_tx_outputs: m.coinbase_tx_outputs.to_owned_bytes(),
            coinbase_tx_locktime: m.coinbase_tx_locktime,
            merkle_path: hashes(m.merkle_path),
        })
    }
}

/// Provider -> client: a new chain tip, activating the future template it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetNewPrevHash {
    pub template_id: u64,
    pub prev_hash: [u8; 32],
    pub header_timestamp: u32,
    pub n_bits: u32,
    /// The network target.
    pub target: Target,
}

impl Sv2Message for SetNewPrevHash {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SET_NEW_PREV_HASH;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "SetNewPrevHash";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let target = self.target.to_le_bytes();
        write(
            Self::NAME,
            wire_msgs::SetNewPrevHash {
                template_id: self.template_id,
                prev_hash: u256(&self.prev_hash),
                header_timestamp: self.header_timestamp,
                n_bits: self.n_bits,
                target: u256(&target),
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::SetNewPrevHash = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(SetNewPrevHash {
            template_id: m.template_id,
            prev_hash: array(m.prev_hash),
            header_timestamp: m.header_timestamp,
            n_bits: m.n_bits,
            target: Target::from_le_bytes(m.target.as_array()),
        })
    }
}

/// Client -> provider: the transactions of a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestTransactionData {
    pub template_id: u64,
}

impl Sv2Message for RequestTransactionData {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_REQUEST_TRANSACTION_DATA;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "RequestTransactionData";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        write(
            Self::NAME,
            wire_msgs::RequestTransactionData {
                template_id: self.template_id,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::RequestTransactionData = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(RequestTransactionData {
            template_id: m.template_id,
        })
    }
}

/// Provider -> client: a template's transactions (serialized, witness included) and the data
/// the coinbase needs besides (the witness reserved value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestTransactionDataSuccess {
    pub template_id: u64,
    pub excess_data: Vec<u8>,
    pub transaction_list: Vec<Vec<u8>>,
}

impl Sv2Message for RequestTransactionDataSuccess {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_SUCCESS;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "RequestTransactionData.Success";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::RequestTransactionDataSuccess {
                template_id: self.template_id,
                excess_data: b064k(n, "excess_data", &self.excess_data)?,
                transaction_list: b016m_seq(n, "transaction_list", &self.transaction_list)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::RequestTransactionDataSuccess =
            read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(RequestTransactionDataSuccess {
            template_id: m.template_id,
            excess_data: m.excess_data.to_owned_bytes(),
            transaction_list: m
                .transaction_list
                .iter()
                .map(|t| t.as_bytes().to_vec())
                .collect(),
        })
    }
}

/// Provider -> client: no transaction data for that template ([`error_code`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestTransactionDataError {
    pub template_id: u64,
    pub error_code: String,
}

impl Sv2Message for RequestTransactionDataError {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_ERROR;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "RequestTransactionData.Error";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::RequestTransactionDataError {
                template_id: self.template_id,
                error_code: str0255(n, "error_code", &self.error_code)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let m: wire_msgs::RequestTransactionDataError = read(t, n, payload)?;
        Ok(RequestTransactionDataError {
            template_id: m.template_id,
            error_code: string(t, n, "error_code", m.error_code)?,
        })
    }
}

/// Client -> provider: a block found on a template: the header fields the client chose and
/// its full coinbase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitSolution {
    pub template_id: u64,
    pub version: u32,
    pub header_timestamp: u32,
    pub header_nonce: u32,
    /// The serialized coinbase, witness included when it has one; at most 64 KiB.
    pub coinbase_tx: Vec<u8>,
}

impl Sv2Message for SubmitSolution {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SUBMIT_SOLUTION;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "SubmitSolution";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        write(
            n,
            wire_msgs::SubmitSolution {
                template_id: self.template_id,
                version: self.version,
                header_timestamp: self.header_timestamp,
                header_nonce: self.header_nonce,
                coinbase_tx: b064k(n, "coinbase_tx", &self.coinbase_tx)?,
            },
            out,
        )
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let m: wire_msgs::SubmitSolution = read(Self::MSG_TYPE, Self::NAME, payload)?;
        Ok(SubmitSolution {
            template_id: m.template_id,
            version: m.version,
            header_timestamp: m.header_timestamp,
            header_nonce: m.header_nonce,
            coinbase_tx: m.coinbase_tx.to_owned_bytes(),
        })
    }
}
