//! Template Distribution Protocol messages (spec section 7): a Template Provider's templates
//! and prev hashes, their transactions, and the solutions sent back.

use primitives::Target;
use template_distribution_sv2 as wire_msgs;

use super::protocol_messages;
use super::wire::message;

/// `RequestTransactionData.Error` codes of the spec.
pub mod error_code {
    /// The provider never sent a template with that id.
    pub const TEMPLATE_ID_NOT_FOUND: &str = "template-id-not-found";
    /// The template is no longer current (its prev hash is not the tip), so its data is gone.
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

message! {
    wire_msgs;
    /// Client -> provider: room the client needs in the coinbase for its own outputs.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CoinbaseOutputConstraints(
        MESSAGE_TYPE_COINBASE_OUTPUT_CONSTRAINTS,
        channel_bit: false,
        "CoinbaseOutputConstraints",
    ) {
        /// Bytes the client's own coinbase outputs may add.
        pub coinbase_output_max_additional_size: u32 => copy,
        /// Signature operations the client's own coinbase outputs may add.
        pub coinbase_output_max_additional_sigops: u16 => copy,
    }
}

message! {
    wire_msgs;
    /// Provider -> client: a block template; `future_template` ones wait for the `SetNewPrevHash`
    /// naming them.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct NewTemplate(
        MESSAGE_TYPE_NEW_TEMPLATE,
        channel_bit: false,
        "NewTemplate",
    ) {
        /// The Template Provider's id for the template.
        pub template_id: u64 => copy,
        /// Whether the template waits for a `SetNewPrevHash` naming it.
        pub future_template: bool => copy,
        /// The block header version (nVersion), before any rolling.
        pub version: u32 => copy,
        /// The coinbase transaction's version.
        pub coinbase_tx_version: u32 => copy,
        /// The start of the coinbase scriptSig (the BIP34 height); at most 255 bytes.
        pub coinbase_prefix: Vec<u8> => b0255,
        /// The coinbase input's nSequence.
        pub coinbase_tx_input_sequence: u32 => copy,
        /// Satoshis the client's coinbase outputs may claim (subsidy plus fees, less the required
        /// outputs).
        pub coinbase_tx_value_remaining: u64 => copy,
        /// How many outputs `coinbase_tx_outputs` holds.
        pub coinbase_tx_outputs_count: u32 => copy,
        /// The outputs the coinbase must carry, serialized back to back without a count.
        pub coinbase_tx_outputs: Vec<u8> => b064k,
        /// The coinbase transaction's nLockTime.
        pub coinbase_tx_locktime: u32 => copy,
        /// The coinbase's merkle path, deepest first, hashes in wire byte order.
        pub merkle_path: Vec<[u8; 32]> => path,
    }
}

message! {
    wire_msgs;
    /// Provider -> client: a new chain tip, activating the future template it names.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SetNewPrevHash(
        MESSAGE_TYPE_SET_NEW_PREV_HASH,
        channel_bit: false,
        "SetNewPrevHash",
    ) {
        /// The (future) template this prev hash activates.
        pub template_id: u64 => copy,
        /// The previous block's hash, in header byte order.
        pub prev_hash: [u8; 32] => hash,
        /// The header nTime, Unix seconds.
        pub header_timestamp: u32 => copy,
        /// The network target in compact form (nBits).
        pub n_bits: u32 => copy,
        /// The network target.
        pub target: Target => target,
    }
}

message! {
    wire_msgs;
    /// Client -> provider: the transactions of a template.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct RequestTransactionData(
        MESSAGE_TYPE_REQUEST_TRANSACTION_DATA,
        channel_bit: false,
        "RequestTransactionData",
    ) {
        /// The template whose transactions are wanted.
        pub template_id: u64 => copy,
    }
}

message! {
    wire_msgs;
    /// Provider -> client: a template's transactions (serialized, witness included) and the data
    /// the coinbase needs besides (the witness reserved value).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct RequestTransactionDataSuccess(
        MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_SUCCESS,
        channel_bit: false,
        "RequestTransactionData.Success",
    ) {
        /// The Template Provider's id for the template.
        pub template_id: u64 => copy,
        /// Extra data for validating the work: the coinbase witness reserved value, as Core's
        /// provider sends it.
        pub excess_data: Vec<u8> => b064k,
        /// The template's transactions, serialized, in block order, coinbase excluded.
        pub transaction_list: Vec<Vec<u8>> => txs,
    }
}

message! {
    wire_msgs;
    /// Provider -> client: no transaction data for that template ([`error_code`]).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct RequestTransactionDataError(
        MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_ERROR,
        channel_bit: false,
        "RequestTransactionData.Error",
    ) {
        /// The Template Provider's id for the template.
        pub template_id: u64 => copy,
        /// Why, as one of [`error_code`].
        pub error_code: String => str,
    }
}

message! {
    wire_msgs;
    /// Client -> provider: a block found on a template: the header fields the client chose and
    /// its full coinbase.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SubmitSolution(
        MESSAGE_TYPE_SUBMIT_SOLUTION,
        channel_bit: false,
        "SubmitSolution",
    ) {
        /// The template the block was built on.
        pub template_id: u64 => copy,
        /// The block header version (nVersion).
        pub version: u32 => copy,
        /// The header nTime, Unix seconds.
        pub header_timestamp: u32 => copy,
        /// The header nonce.
        pub header_nonce: u32 => copy,
        /// The serialized coinbase, witness included when it has one; at most 64 KiB.
        pub coinbase_tx: Vec<u8> => b064k,
    }
}
