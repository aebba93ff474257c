//! Extension 0x0001, extensions negotiation: which extensions a connection uses, asked by the
//! client right after `SetupConnection.Success` and answered once by the server.
//!
//! These messages travel with `extension_type` 0x0001 in their frame header (the extension
//! that defines them), so their message types (0x00..0x02) do not clash with the core ones.
//! A server that does not know the extension ignores the request; a client then goes on
//! without extensions. See docs/architecture.md, "Stratum V2 extensions".

use extensions_sv2 as wire_msgs;

use super::protocol_messages;
use super::wire::message;

/// The registry's extension ids (the spec's extensions table).
pub mod extension {
    /// 0x0001: extensions negotiation (this module's messages).
    pub const EXTENSIONS_NEGOTIATION: u16 = 0x0001;
    /// 0x0002: worker-specific hashrate tracking (a `user_identity` TLV on
    /// `SubmitSharesExtended`, see [`crate::tlv`]).
    pub const WORKER_HASHRATE_TRACKING: u16 = 0x0002;
}

protocol_messages! {
    Extensions:
    RequestExtensions(RequestExtensions),
    RequestExtensionsSuccess(RequestExtensionsSuccess),
    RequestExtensionsError(RequestExtensionsError),
}

message! {
    wire_msgs;
    /// Client -> server, right after `SetupConnection.Success`: the extensions the client
    /// wants to use on this connection.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct RequestExtensions(
        MESSAGE_TYPE_REQUEST_EXTENSIONS,
        channel_bit: false,
        "RequestExtensions",
    ) {
        /// Chosen by the client; echoed in the answer.
        pub request_id: u16 => copy,
        /// Extension ids ([`extension`]).
        pub requested_extensions: Vec<u16> => u16s,
    }
}

message! {
    wire_msgs;
    /// Server -> client: the requested extensions it supports; the connection uses these.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct RequestExtensionsSuccess(
        MESSAGE_TYPE_REQUEST_EXTENSIONS_SUCCESS,
        channel_bit: false,
        "RequestExtensions.Success",
    ) {
        /// The request's id.
        pub request_id: u16 => copy,
        /// The requested extensions the server supports.
        pub supported_extensions: Vec<u16> => u16s,
    }
}

message! {
    wire_msgs;
    /// Server -> client: none of the requested extensions is supported, or the server requires
    /// extensions that were not requested (a client that does not ask again for those is
    /// disconnected).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct RequestExtensionsError(
        MESSAGE_TYPE_REQUEST_EXTENSIONS_ERROR,
        channel_bit: false,
        "RequestExtensions.Error",
    ) {
        /// The request's id.
        pub request_id: u16 => copy,
        /// The requested extensions the server does not support.
        pub unsupported_extensions: Vec<u16> => u16s,
        /// Extensions the server requires that the request lacked.
        pub required_extensions: Vec<u16> => u16s,
    }
}
