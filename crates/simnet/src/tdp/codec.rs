//! The messages a Template Provider reads and writes, between the reference crates' wire types
//! and the plain values the session works on.
//!
//! Reading: a frame's payload is decoded with binary_sv2 into the reference message type, and
//! the fields the session needs are copied out ([`ClientMessage`]), so that the session holds no
//! borrowed wire buffers. Writing: the session produces [`ServerMessage`]s, which hold the
//! reference crates' owned message types ready for framing.

use binary_sv2::{B016MOwned, B0255Owned, B064KOwned, Seq0255Owned, Seq064KOwned, Str0255Owned};
use common_messages_sv2::{
    SetupConnection, SetupConnectionErrorOwned, SetupConnectionSuccess,
    MESSAGE_TYPE_CHANNEL_ENDPOINT_CHANGED, MESSAGE_TYPE_RECONNECT, MESSAGE_TYPE_SETUP_CONNECTION,
    MESSAGE_TYPE_SETUP_CONNECTION_ERROR, MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS,
    SV2_TEMPLATE_DISTRIBUTION_PROTOCOL_DISCRIMINANT,
};
use template_distribution_sv2::{
    CoinbaseOutputConstraints, NewTemplateOwned, RequestTransactionData,
    RequestTransactionDataErrorOwned, RequestTransactionDataSuccessOwned, SetNewPrevHashOwned,
    SubmitSolution, MESSAGE_TYPE_COINBASE_OUTPUT_CONSTRAINTS, MESSAGE_TYPE_NEW_TEMPLATE,
    MESSAGE_TYPE_REQUEST_TRANSACTION_DATA, MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_ERROR,
    MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_SUCCESS, MESSAGE_TYPE_SET_NEW_PREV_HASH,
    MESSAGE_TYPE_SUBMIT_SOLUTION,
};

use super::transport::{NoiseConn, TransportError};

/// What a client sent, in the fields the session uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMessage {
    SetupConnection(Setup),
    /// `CoinbaseOutputConstraints`, or its predecessor `CoinbaseOutputDataSize` (same message
    /// type, only the size: `max_additional_sigops` is then `None`).
    CoinbaseOutputConstraints {
        max_additional_size: u32,
        max_additional_sigops: Option<u16>,
    },
    RequestTransactionData {
        template_id: u64,
    },
    SubmitSolution(Solution),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    /// The protocol discriminant as sent (2 is Template Distribution), kept raw so that values
    /// the reference enum does not know still get `unsupported-protocol` rather than a close.
    pub protocol: u8,
    pub min_version: u16,
    pub max_version: u16,
    pub flags: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Solution {
    pub template_id: u64,
    pub version: u32,
    pub header_timestamp: u32,
    pub header_nonce: u32,
    /// The full serialized coinbase, witness included when it has one.
    pub coinbase_tx: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("message type {msg_type:#04x} does not decode: {reason}")]
    Malformed { msg_type: u8, reason: String },
    #[error("message type {0:#04x} is sent by servers, not clients")]
    WrongDirection(u8),
    #[error("message type {0:#04x} is not a Template Distribution or common message")]
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
    let malformed = |e: binary_sv2::Error| DecodeError::Malformed {
        msg_type,
        reason: format!("{e:?}"),
    };
    let msg = match msg_type {
        MESSAGE_TYPE_SETUP_CONNECTION => {
            let Some(&protocol) = payload.first() else {
                return Err(DecodeError::Malformed {
                    msg_type,
                    reason: "empty payload".into(),
                });
            };
            // The reference decoder rejects protocol numbers it has no variant for; decode the
            // rest of the message as if it said Template Distribution, and answer the number
            // actually sent.
            payload[0] = SV2_TEMPLATE_DISTRIBUTION_PROTOCOL_DISCRIMINANT;
            let m: SetupConnection = binary_sv2::from_bytes(payload).map_err(malformed)?;
            ClientMessage::SetupConnection(Setup {
                protocol,
                min_version: m.min_version,
                max_version: m.max_version,
                flags: m.flags,
            })
        }
        MESSAGE_TYPE_COINBASE_OUTPUT_CONSTRAINTS if payload.len() == 4 => {
            // CoinbaseOutputDataSize (spec versions before the sigops field): one U32.
            ClientMessage::CoinbaseOutputConstraints {
                max_additional_size: u32::from_le_bytes(
                    payload[..4].try_into().expect("length checked"),
                ),
                max_additional_sigops: None,
            }
        }
        MESSAGE_TYPE_COINBASE_OUTPUT_CONSTRAINTS => {
            let m: CoinbaseOutputConstraints =
                binary_sv2::from_bytes(payload).map_err(malformed)?;
            ClientMessage::CoinbaseOutputConstraints {
                max_additional_size: m.coinbase_output_max_additional_size,
                max_additional_sigops: Some(m.coinbase_output_max_additional_sigops),
            }
        }
        MESSAGE_TYPE_REQUEST_TRANSACTION_DATA => {
            let m: RequestTransactionData = binary_sv2::from_bytes(payload).map_err(malformed)?;
            ClientMessage::RequestTransactionData {
                template_id: m.template_id,
            }
        }
        MESSAGE_TYPE_SUBMIT_SOLUTION => {
            let m: SubmitSolution = binary_sv2::from_bytes(payload).map_err(malformed)?;
            ClientMessage::SubmitSolution(Solution {
                template_id: m.template_id,
                version: m.version,
                header_timestamp: m.header_timestamp,
                header_nonce: m.header_nonce,
                coinbase_tx: m.coinbase_tx.as_bytes().to_vec(),
            })
        }
        MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS
        | MESSAGE_TYPE_SETUP_CONNECTION_ERROR
        | MESSAGE_TYPE_CHANNEL_ENDPOINT_CHANGED
        | MESSAGE_TYPE_RECONNECT
        | MESSAGE_TYPE_NEW_TEMPLATE
        | MESSAGE_TYPE_SET_NEW_PREV_HASH
        | MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_SUCCESS
        | MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_ERROR => {
            return Err(DecodeError::WrongDirection(msg_type))
        }
        other => return Err(DecodeError::Unknown(other)),
    };
    Ok(Some(msg))
}

/// What the server sends, as the reference crates' owned messages.
#[derive(Clone, Debug)]
pub enum ServerMessage {
    SetupConnectionSuccess(SetupConnectionSuccess),
    SetupConnectionError(SetupConnectionErrorOwned),
    NewTemplate(NewTemplateOwned),
    SetNewPrevHash(SetNewPrevHashOwned),
    RequestTransactionDataSuccess(RequestTransactionDataSuccessOwned),
    RequestTransactionDataError(RequestTransactionDataErrorOwned),
}

impl ServerMessage {
    pub fn msg_type(&self) -> u8 {
        match self {
            ServerMessage::SetupConnectionSuccess(_) => MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS,
            ServerMessage::SetupConnectionError(_) => MESSAGE_TYPE_SETUP_CONNECTION_ERROR,
            ServerMessage::NewTemplate(_) => MESSAGE_TYPE_NEW_TEMPLATE,
            ServerMessage::SetNewPrevHash(_) => MESSAGE_TYPE_SET_NEW_PREV_HASH,
            ServerMessage::RequestTransactionDataSuccess(_) => {
                MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_SUCCESS
            }
            ServerMessage::RequestTransactionDataError(_) => {
                MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_ERROR
            }
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            ServerMessage::SetupConnectionSuccess(_) => "SetupConnection.Success",
            ServerMessage::SetupConnectionError(_) => "SetupConnection.Error",
            ServerMessage::NewTemplate(_) => "NewTemplate",
            ServerMessage::SetNewPrevHash(_) => "SetNewPrevHash",
            ServerMessage::RequestTransactionDataSuccess(_) => "RequestTransactionData.Success",
            ServerMessage::RequestTransactionDataError(_) => "RequestTransactionData.Error",
        }
    }

    /// Frames, encrypts and writes the message.
    pub async fn send(self, conn: &mut NoiseConn) -> Result<(), TransportError> {
        let t = self.msg_type();
        match self {
            ServerMessage::SetupConnectionSuccess(m) => conn.send(t, m).await,
            ServerMessage::SetupConnectionError(m) => conn.send(t, m).await,
            ServerMessage::NewTemplate(m) => conn.send(t, m).await,
            ServerMessage::SetNewPrevHash(m) => conn.send(t, m).await,
            ServerMessage::RequestTransactionDataSuccess(m) => conn.send(t, m).await,
            ServerMessage::RequestTransactionDataError(m) => conn.send(t, m).await,
        }
    }
}

/// Field conversions that can only fail on lengths the callers have already bounded; the
/// error names the field so a bug shows which.
#[derive(Debug, thiserror::Error)]
#[error("{field} does not fit its SV2 type: {reason}")]
pub struct FieldError {
    pub field: &'static str,
    pub reason: String,
}

fn field<T, E: std::fmt::Debug>(name: &'static str, r: Result<T, E>) -> Result<T, FieldError> {
    r.map_err(|e| FieldError {
        field: name,
        reason: format!("{e:?}"),
    })
}

pub(crate) fn b0255(name: &'static str, bytes: Vec<u8>) -> Result<B0255Owned, FieldError> {
    field(name, B0255Owned::new(bytes))
}

pub(crate) fn b064k(name: &'static str, bytes: Vec<u8>) -> Result<B064KOwned, FieldError> {
    field(name, B064KOwned::new(bytes))
}

pub(crate) fn str0255(name: &'static str, s: &str) -> Result<Str0255Owned, FieldError> {
    field(name, Str0255Owned::try_from(s))
}

pub(crate) fn seq0255<T>(name: &'static str, items: Vec<T>) -> Result<Seq0255Owned<T>, FieldError> {
    field(name, Seq0255Owned::new(items))
}

pub(crate) fn seq064k_b016m(
    name: &'static str,
    items: impl Iterator<Item = Vec<u8>>,
) -> Result<Seq064KOwned<B016MOwned>, FieldError> {
    let items = items
        .map(|b| field(name, B016MOwned::new(b)))
        .collect::<Result<Vec<_>, _>>()?;
    field(name, Seq064KOwned::new(items))
}

#[cfg(test)]
mod tests {
    use super::*;
    use common_messages_sv2::{Protocol, SetupConnectionOwned};

    fn setup_bytes(protocol: Protocol) -> Vec<u8> {
        let m = SetupConnectionOwned {
            protocol,
            min_version: 2,
            max_version: 2,
            flags: 0,
            endpoint_host: "127.0.0.1".try_into().unwrap(),
            endpoint_port: 1,
            vendor: "".try_into().unwrap(),
            hardware_version: "".try_into().unwrap(),
            firmware: "".try_into().unwrap(),
            device_id: "".try_into().unwrap(),
        };
        binary_sv2::to_bytes(m).unwrap()
    }

    #[test]
    fn setup_connection_keeps_the_protocol_number_sent() {
        let mut b = setup_bytes(Protocol::TemplateDistributionProtocol);
        let m = decode_client(0, MESSAGE_TYPE_SETUP_CONNECTION, &mut b)
            .unwrap()
            .unwrap();
        assert!(matches!(
            m,
            ClientMessage::SetupConnection(Setup { protocol: 2, .. })
        ));
        // A protocol number the reference enum does not know (3, Job Distribution).
        let mut b = setup_bytes(Protocol::MiningProtocol);
        b[0] = 3;
        let m = decode_client(0, MESSAGE_TYPE_SETUP_CONNECTION, &mut b)
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
            decode_client(0, MESSAGE_TYPE_COINBASE_OUTPUT_CONSTRAINTS, &mut old).unwrap(),
            Some(ClientMessage::CoinbaseOutputConstraints {
                max_additional_size: 100,
                max_additional_sigops: None
            })
        );
        let mut new = binary_sv2::to_bytes(CoinbaseOutputConstraints {
            coinbase_output_max_additional_size: 77,
            coinbase_output_max_additional_sigops: 4,
        })
        .unwrap();
        assert_eq!(
            decode_client(0, MESSAGE_TYPE_COINBASE_OUTPUT_CONSTRAINTS, &mut new).unwrap(),
            Some(ClientMessage::CoinbaseOutputConstraints {
                max_additional_size: 77,
                max_additional_sigops: Some(4)
            })
        );
    }

    #[test]
    fn bad_input_is_an_error_or_ignored_never_a_panic() {
        assert!(matches!(
            decode_client(0, MESSAGE_TYPE_SETUP_CONNECTION, &mut []),
            Err(DecodeError::Malformed { .. })
        ));
        assert!(matches!(
            decode_client(0, MESSAGE_TYPE_SUBMIT_SOLUTION, &mut [1, 2, 3]),
            Err(DecodeError::Malformed { .. })
        ));
        assert!(matches!(
            decode_client(0, MESSAGE_TYPE_NEW_TEMPLATE, &mut []),
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
