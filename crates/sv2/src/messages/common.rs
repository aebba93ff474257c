//! Common messages: connection setup and the server's requests to move (spec 3.3 and the
//! message types table).

use common_messages_sv2 as wire_msgs;

use super::wire::message;
use super::wire::{read, str0255, string, write};
use super::{protocol_messages, DecodeError, EncodeError, Sv2Message};

/// `SetupConnection.protocol` values.
pub mod protocol {
    /// The Mining Protocol.
    pub const MINING: u8 = 0;
    /// The Job Declaration Protocol.
    pub const JOB_DECLARATION: u8 = 1;
    /// The Template Distribution Protocol.
    pub const TEMPLATE_DISTRIBUTION: u8 = 2;
}

/// The only protocol version SV2 defines.
pub const PROTOCOL_VERSION: u16 = 2;

/// `SetupConnection.Error` codes of the spec.
pub mod error_code {
    /// The server requires features the client's flags lack (`flags` lists them).
    pub const UNSUPPORTED_FEATURE_FLAGS: &str = "unsupported-feature-flags";
    /// The server does not serve the `protocol` asked for.
    pub const UNSUPPORTED_PROTOCOL: &str = "unsupported-protocol";
    /// No version in `min_version..=max_version` is one the server speaks.
    pub const PROTOCOL_VERSION_MISMATCH: &str = "protocol-version-mismatch";
    /// A Job Declaration connection without [`super::job_declaration_flags::DECLARE_TX_DATA`]
    /// (the reference JDS's code: it only runs Full-Template mode).
    pub const MISSING_DECLARE_TX_DATA_FLAG: &str = "missing-declare-tx-data-flag";
}

protocol_messages! {
    Common:
    SetupConnection(SetupConnection),
    SetupConnectionSuccess(SetupConnectionSuccess),
    SetupConnectionError(SetupConnectionError),
    ChannelEndpointChanged(ChannelEndpointChanged),
    Reconnect(Reconnect),
}

/// Client -> server, first on every connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetupConnection {
    /// The protocol discriminant as sent ([`protocol`]); values the reference enum does not
    /// know pass through both ways, so that a server can answer `unsupported-protocol`.
    pub protocol: u8,
    /// The lowest protocol version the client supports ([`PROTOCOL_VERSION`]).
    pub min_version: u16,
    /// The highest protocol version the client supports ([`PROTOCOL_VERSION`]).
    pub max_version: u16,
    /// Optional features the client supports (flag meanings are per protocol).
    pub flags: u32,
    /// The host name or IP address the client connected to, as it knows it (for proxies' routing).
    pub endpoint_host: String,
    /// The port the client connected to.
    pub endpoint_port: u16,
    /// The device's vendor; at most 255 bytes, as are the other device strings.
    pub vendor: String,
    /// The device's hardware version.
    pub hardware_version: String,
    /// The device's firmware.
    pub firmware: String,
    /// The device's id, unique to the user's devices.
    pub device_id: String,
}

impl SetupConnection {
    /// A setup for `protocol` ([`protocol`]) at [`PROTOCOL_VERSION`] only, with no flags and
    /// no endpoint or device described; set what a client says beyond that with
    /// `SetupConnection { flags, ..SetupConnection::new(p) }`.
    pub fn new(protocol: u8) -> SetupConnection {
        SetupConnection {
            protocol,
            min_version: PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            flags: 0,
            endpoint_host: String::new(),
            endpoint_port: 0,
            vendor: String::new(),
            hardware_version: String::new(),
            firmware: String::new(),
            device_id: String::new(),
        }
    }
}

impl Sv2Message for SetupConnection {
    const MSG_TYPE: u8 = wire_msgs::MESSAGE_TYPE_SETUP_CONNECTION;
    const CHANNEL_BIT: bool = false;
    const NAME: &'static str = "SetupConnection";

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let n = Self::NAME;
        let start = out.len();
        write(
            n,
            wire_msgs::SetupConnection {
                // The reference enum only has the three defined protocols: encode one and put
                // the number asked for in its place (the protocol is the first byte).
                protocol: wire_msgs::Protocol::MiningProtocol,
                min_version: self.min_version,
                max_version: self.max_version,
                flags: self.flags,
                endpoint_host: str0255(n, "endpoint_host", &self.endpoint_host)?,
                endpoint_port: self.endpoint_port,
                vendor: str0255(n, "vendor", &self.vendor)?,
                hardware_version: str0255(n, "hardware_version", &self.hardware_version)?,
                firmware: str0255(n, "firmware", &self.firmware)?,
                device_id: str0255(n, "device_id", &self.device_id)?,
            },
            out,
        )?;
        out[start] = self.protocol;
        Ok(())
    }

    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError> {
        let (t, n) = (Self::MSG_TYPE, Self::NAME);
        let Some(&protocol) = payload.first() else {
            return Err(DecodeError::Malformed {
                msg_type: t,
                name: n,
                reason: "empty payload".into(),
            });
        };
        // The reference decoder refuses protocol numbers it has no variant for: decode the rest
        // as if it said Mining, and keep the number sent.
        payload[0] = protocol::MINING;
        let decoded = read::<wire_msgs::SetupConnection>(t, n, payload).and_then(|m| {
            Ok(SetupConnection {
                protocol,
                min_version: m.min_version,
                max_version: m.max_version,
                flags: m.flags,
                endpoint_host: string(t, n, "endpoint_host", m.endpoint_host)?,
                endpoint_port: m.endpoint_port,
                vendor: string(t, n, "vendor", m.vendor)?,
                hardware_version: string(t, n, "hardware_version", m.hardware_version)?,
                firmware: string(t, n, "firmware", m.firmware)?,
                device_id: string(t, n, "device_id", m.device_id)?,
            })
        });
        payload[0] = protocol;
        decoded
    }
}

/// `SetupConnection` flags of the Mining Protocol (spec 5.3.1): the client's in
/// `SetupConnection.flags`, the server's in `SetupConnection.Success.flags`.
pub mod mining_flags {
    /// Client: the device needs standard jobs (it cannot use extended ones).
    pub const REQUIRES_STANDARD_JOBS: u32 = 1 << 0;
    /// Client: it will send `SetCustomMiningJob` on this connection.
    pub const REQUIRES_WORK_SELECTION: u32 = 1 << 1;
    /// Client: jobs must allow version rolling.
    pub const REQUIRES_VERSION_ROLLING: u32 = 1 << 2;
    /// Server (in `.Success`): the version field must not be changed.
    pub const REQUIRES_FIXED_VERSION: u32 = 1 << 0;
    /// Server (in `.Success`): standard channels are not accepted.
    pub const REQUIRES_EXTENDED_CHANNELS: u32 = 1 << 1;
}

/// `SetupConnection` flags of the Job Declaration Protocol (spec 6.4.1); none are defined for
/// `SetupConnection.Success`.
pub mod job_declaration_flags {
    /// Client: the JDC reveals the template's transactions (`DeclareMiningJob`,
    /// `ProvideMissingTransactions`), that is Full-Template mode.
    pub const DECLARE_TX_DATA: u32 = 1 << 0;
}

message! {
    wire_msgs;
    /// Server -> client: the connection is set up.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SetupConnectionSuccess(
        MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS,
        channel_bit: false,
        "SetupConnection.Success",
    ) {
        /// The protocol version the server chose.
        pub used_version: u16 => copy,
        /// Optional features the server supports (flag meanings are per protocol).
        pub flags: u32 => copy,
    }
}

message! {
    wire_msgs;
    /// Server -> client: the connection is refused ([`error_code`]); `flags` lists the flags the
    /// server does not support when that is why.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SetupConnectionError(
        MESSAGE_TYPE_SETUP_CONNECTION_ERROR,
        channel_bit: false,
        "SetupConnection.Error",
    ) {
        /// With `unsupported-feature-flags`: the flags the server does not support.
        pub flags: u32 => copy,
        /// Why, as one of [`error_code`].
        pub error_code: String => str,
    }
}

message! {
    wire_msgs;
    /// Server -> client: the channel's endpoint changed; the client should reset what it keeps
    /// about the channel.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ChannelEndpointChanged(
        MESSAGE_TYPE_CHANNEL_ENDPOINT_CHANGED,
        channel_bit: true,
        "ChannelEndpointChanged",
    ) {
        /// The channel whose endpoint changed.
        pub channel_id: u32 => copy,
    }
}

message! {
    wire_msgs;
    /// Server -> client: reconnect to another host and port (an empty host means the same host).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Reconnect(
        MESSAGE_TYPE_RECONNECT,
        channel_bit: false,
        "Reconnect",
    ) {
        /// The host to reconnect to; empty: the same host.
        pub new_host: String => str,
        /// The port to reconnect to; 0: the same port.
        pub new_port: u16 => copy,
    }
}
