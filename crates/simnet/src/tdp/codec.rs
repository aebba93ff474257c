//! The messages a Template Provider reads and writes, between sv2's typed messages and what the
//! session works on.
//!
//! Reading: a frame's payload is decoded with `sv2::messages` (the reference crates' wire
//! format), and the fields the session needs are kept ([`ClientMessage`]). Writing: the session
//! produces [`ServerMessage`]s, sv2's plain messages, which the shell encodes and sends.

use sv2::messages::common::{self, SetupConnection, SetupConnectionError, SetupConnectionSuccess};
use sv2::messages::template_distribution::{
    CoinbaseOutputConstraints, NewTemplate, RequestTransactionData, RequestTransactionDataError,
    RequestTransactionDataSuccess, SetNewPrevHash, SubmitSolution,
};
use sv2::messages::{Message, Sv2Message};
use sv2::{NoiseConn, TransportError};

/// What a client sent, in the fields the session uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMessage {
    /// `SetupConnection`.
    SetupConnection(Setup),
    /// `CoinbaseOutputConstraints`, or its predecessor `CoinbaseOutputDataSize` (same message
    /// type, only the size: `max_additional_sigops` is then `None`).
    CoinbaseOutputConstraints {
        /// Bytes the client will add to the coinbase outputs, which the template must leave room for.
        max_additional_size: u32,
        /// Sigops those outputs add; `None` from `CoinbaseOutputDataSize`.
        max_additional_sigops: Option<u16>,
    },
    /// `RequestTransactionData`: the transactions of a template.
    RequestTransactionData {
        /// The template asked about.
        template_id: u64,
    },
    /// `SubmitSolution`: a block found on a template.
    SubmitSolution(Solution),
}

#[derive(Clone, Debug, PartialEq, Eq)]
/// The `SetupConnection` fields the session checks.
pub struct Setup {
    /// The protocol discriminant as sent (2 is Template Distribution), kept raw so that values
    /// the reference enum does not know still get `unsupported-protocol` rather than a close.
    pub protocol: u8,
    /// Lowest protocol version the client speaks.
    pub min_version: u16,
    /// Highest protocol version the client speaks.
    pub max_version: u16,
    /// The client's feature flags.
    pub flags: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
/// A `SubmitSolution`: the header fields and coinbase that, with a template, make a block.
pub struct Solution {
    /// The template it solves.
    pub template_id: u64,
    /// Header `nVersion`, version-rolling bits included.
    pub version: u32,
    /// Header `nTime`.
    pub header_timestamp: u32,
    /// Header `nNonce`.
    pub header_nonce: u32,
    /// The full serialized coinbase, witness included when it has one.
    pub coinbase_tx: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
/// Why a client frame was refused.
pub enum DecodeError {
    #[error("message type {msg_type:#04x} does not decode: {reason}")]
    /// The payload does not decode as its message type.
    Malformed {
        /// The frame's message type.
        msg_type: u8,
        /// What the decoder said.
        reason: String,
    },
    #[error("message type {0:#04x} is sent by servers, not clients")]
    /// A message type only servers send.
    WrongDirection(u8),
    #[error("message type {0:#04x} is not a Template Distribution or common message")]
    /// A message type outside Template Distribution and the common messages.
    Unknown(u8),
}

/// Decodes a client's frame. `Ok(None)`: a message of an extension we do not know, which the
/// spec says to discard and ignore (section 3.4); anything else that is not a client message of
/// this protocol is an error, on which the server closes.
pub fn decode_client(
    extension: u16,
    msg_type: u8,
    payload: &mut [u8],
) -> Result<Option<ClientMessage>, DecodeError> {
    if extension != 0 {
        return Ok(None);
    }
    let malformed = |e: sv2::DecodeError| DecodeError::Malformed {
        msg_type,
        reason: e.to_string(),
    };
    let msg = match msg_type {
        SetupConnection::MSG_TYPE => {
            let m = SetupConnection::decode(payload).map_err(malformed)?;
            ClientMessage::SetupConnection(Setup {
                protocol: m.protocol,
                min_version: m.min_version,
                max_version: m.max_version,
                flags: m.flags,
            })
        }
        CoinbaseOutputConstraints::MSG_TYPE if payload.len() == 4 => {
            // CoinbaseOutputDataSize (spec versions before the sigops field): one U32.
            ClientMessage::CoinbaseOutputConstraints {
                max_additional_size: u32::from_le_bytes(
                    payload[..4].try_into().expect("length checked"),
                ),
                max_additional_sigops: None,
            }
        }
        CoinbaseOutputConstraints::MSG_TYPE => {
            let m = CoinbaseOutputConstraints::decode(payload).map_err(malformed)?;
            ClientMessage::CoinbaseOutputConstraints {
                max_additional_size: m.coinbase_output_max_additional_size,
                max_additional_sigops: Some(m.coinbase_output_max_additional_sigops),
            }
        }
        RequestTransactionData::MSG_TYPE => {
            let m = RequestTransactionData::decode(payload).map_err(malformed)?;
            ClientMessage::RequestTransactionData {
                template_id: m.template_id,
            }
        }
        SubmitSolution::MSG_TYPE => {
            let m = SubmitSolution::decode(payload).map_err(malformed)?;
            ClientMessage::SubmitSolution(Solution {
                template_id: m.template_id,
                version: m.version,
                header_timestamp: m.header_timestamp,
                header_nonce: m.header_nonce,
                coinbase_tx: m.coinbase_tx,
            })
        }
        SetupConnectionSuccess::MSG_TYPE
        | SetupConnectionError::MSG_TYPE
        | common::ChannelEndpointChanged::MSG_TYPE
        | common::Reconnect::MSG_TYPE
        | NewTemplate::MSG_TYPE
        | SetNewPrevHash::MSG_TYPE
        | RequestTransactionDataSuccess::MSG_TYPE
        | RequestTransactionDataError::MSG_TYPE => {
            return Err(DecodeError::WrongDirection(msg_type))
        }
        other => return Err(DecodeError::Unknown(other)),
    };
    Ok(Some(msg))
}

/// Largest encoding buffer a connection keeps between messages.
const RETAINED_PAYLOAD: usize = 64 * 1024;

/// What the server sends.
#[derive(Clone, Debug)]
pub enum ServerMessage {
    /// Accepts the connection.
    SetupConnectionSuccess(SetupConnectionSuccess),
    /// Refuses the connection, with a reason code.
    SetupConnectionError(SetupConnectionError),
    /// A template to mine on (future, or for the current tip).
    NewTemplate(NewTemplate),
    /// The new tip, activating a future template.
    SetNewPrevHash(SetNewPrevHash),
    /// A template's transactions and coinbase witness reserved value.
    RequestTransactionDataSuccess(RequestTransactionDataSuccess),
    /// No data for that template (unknown or stale).
    RequestTransactionDataError(RequestTransactionDataError),
}

impl ServerMessage {
    /// The message's name as the SV2 spec spells it, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ServerMessage::SetupConnectionSuccess(_) => SetupConnectionSuccess::NAME,
            ServerMessage::SetupConnectionError(_) => SetupConnectionError::NAME,
            ServerMessage::NewTemplate(_) => NewTemplate::NAME,
            ServerMessage::SetNewPrevHash(_) => SetNewPrevHash::NAME,
            ServerMessage::RequestTransactionDataSuccess(_) => RequestTransactionDataSuccess::NAME,
            ServerMessage::RequestTransactionDataError(_) => RequestTransactionDataError::NAME,
        }
    }

    /// The message as the SV2 crate frames it.
    pub fn into_message(self) -> Message {
        match self {
            ServerMessage::SetupConnectionSuccess(m) => m.into(),
            ServerMessage::SetupConnectionError(m) => m.into(),
            ServerMessage::NewTemplate(m) => m.into(),
            ServerMessage::SetNewPrevHash(m) => m.into(),
            ServerMessage::RequestTransactionDataSuccess(m) => m.into(),
            ServerMessage::RequestTransactionDataError(m) => m.into(),
        }
    }

    /// Encodes (into `payload`, reused from message to message), frames, encrypts and writes
    /// the message.
    pub async fn send(
        self,
        conn: &mut NoiseConn,
        payload: &mut Vec<u8>,
    ) -> Result<(), TransportError> {
        let m = self.into_message();
        payload.clear();
        let msg_type = m.encode(payload)?;
        let sent = conn
            .send_payload(msg_type, m.extension_type(), payload)
            .await;
        // Transaction data runs to megabytes; a connection does not keep that much around.
        if payload.capacity() > RETAINED_PAYLOAD {
            *payload = Vec::new();
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sv2::messages::common::protocol;

    fn setup_bytes(protocol: u8) -> Vec<u8> {
        let m = SetupConnection {
            endpoint_host: "127.0.0.1".into(),
            endpoint_port: 1,
            ..SetupConnection::new(protocol)
        };
        let mut out = Vec::new();
        m.encode(&mut out).unwrap();
        out
    }

    #[test]
    fn setup_connection_keeps_the_protocol_number_sent() {
        let mut b = setup_bytes(protocol::TEMPLATE_DISTRIBUTION);
        let m = decode_client(0, SetupConnection::MSG_TYPE, &mut b)
            .unwrap()
            .unwrap();
        assert!(matches!(
            m,
            ClientMessage::SetupConnection(Setup { protocol: 2, .. })
        ));
        // A protocol number the reference enum does not know (3, Job Distribution).
        let mut b = setup_bytes(3);
        let m = decode_client(0, SetupConnection::MSG_TYPE, &mut b)
            .unwrap()
            .unwrap();
        assert!(matches!(
            m,
            ClientMessage::SetupConnection(Setup { protocol: 3, .. })
        ));
    }

    #[test]
    fn both_generations_of_the_coinbase_message_decode() {
        let mut old = 100u32.to_le_bytes().to_vec();
        assert_eq!(
            decode_client(0, CoinbaseOutputConstraints::MSG_TYPE, &mut old).unwrap(),
            Some(ClientMessage::CoinbaseOutputConstraints {
                max_additional_size: 100,
                max_additional_sigops: None
            })
        );
        let mut new = Vec::new();
        CoinbaseOutputConstraints {
            coinbase_output_max_additional_size: 77,
            coinbase_output_max_additional_sigops: 4,
        }
        .encode(&mut new)
        .unwrap();
        assert_eq!(
            decode_client(0, CoinbaseOutputConstraints::MSG_TYPE, &mut new).unwrap(),
            Some(ClientMessage::CoinbaseOutputConstraints {
                max_additional_size: 77,
                max_additional_sigops: Some(4)
            })
        );
    }

    #[test]
    fn bad_input_is_an_error_or_ignored_never_a_panic() {
        assert!(matches!(
            decode_client(0, SetupConnection::MSG_TYPE, &mut []),
            Err(DecodeError::Malformed { .. })
        ));
        assert!(matches!(
            decode_client(0, SubmitSolution::MSG_TYPE, &mut [1, 2, 3]),
            Err(DecodeError::Malformed { .. })
        ));
        assert!(matches!(
            decode_client(0, NewTemplate::MSG_TYPE, &mut []),
            Err(DecodeError::WrongDirection(_))
        ));
        assert!(matches!(
            decode_client(0, 0x55, &mut []),
            Err(DecodeError::Unknown(0x55))
        ));
        assert_eq!(decode_client(0x4001, 0x00, &mut [0xff; 3]), Ok(None));
        // Every message type with short garbage payloads.
        for t in 0..=255u8 {
            for len in 0..8 {
                let mut p = vec![0xa5; len];
                let _ = decode_client(0, t, &mut p);
            }
        }
        // The client messages with random payloads of every length up to 400 bytes: length
        // prefixes that overrun, strings that are not UTF-8, and so on.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        };
        for t in [0x00, 0x70, 0x73, 0x76] {
            for len in 0..400 {
                for _ in 0..4 {
                    let mut p: Vec<u8> = (0..len).map(|_| next()).collect();
                    let _ = decode_client(0, t, &mut p);
                }
            }
        }
    }
}
