//! SV2 messages as plain owned values.
//!
//! Every message of the Common, Mining, Job Declaration and Template Distribution protocols is
//! a struct of `u8`..`u64`, `bool`, `f32`, `String`, `Vec<u8>`, 32-byte arrays (hashes, in the
//! byte order of the wire and of block headers), `Option<u32>`, [`primitives::Target`] (the
//! wire's 32-byte little-endian targets), merkle paths as `Vec<[u8; 32]>`, deepest first, and
//! lists (wtxids, positions, transactions) as `Vec`s. The wire format
//! is the reference crates': [`Sv2Message::encode`] builds the reference struct over borrowed
//! fields and serializes it with binary_sv2; [`Sv2Message::decode`] reads the reference struct
//! and copies its fields out. Decoding ignores bytes after the message, as the reference
//! decoder does, and refuses strings that are not UTF-8.
//!
//! Each message is declared once (`message!` in `wire.rs`): its fields, each with the kind of
//! reference type it crosses to, give both the encoder and the decoder, so the two cannot
//! disagree. `SetupConnection` alone is written by hand (its protocol number passes through
//! values the reference enum lacks).
//!
//! binary_sv2 allocates while it works (its derived codecs build a field list per message):
//! encoding a `SubmitSharesStandard` into a reused buffer allocates twice and decoding one
//! sixteen times (`examples/footprint.rs`); merkle paths add one `Vec` of references per encode.
//!
//! Message types and `channel_msg` bits are the spec's (its message types table). The
//! reference crates set the bit on `NewMiningJob` and `SetCustomMiningJob` (+ `.Success`,
//! `.Error`) where the spec's table does not; receivers, the reference's included, dispatch on
//! the message type alone, so either interoperates.
//!
//! [`Message`] is any of them, by protocol; [`Message::decode`] dispatches on the message type
//! of a frame with extension type 0, and [`Message::decode_frame`] on the frame's extension and
//! message type: extension 0x0001 ([`extensions`]) is the one extension with messages of its own
//! that this crate knows; frames of other extensions are the caller's to skip, as the spec says.

pub mod common;
pub mod extensions;
pub mod job_declaration;
pub mod mining;
pub mod template_distribution;
mod wire;

pub use common::Common;
pub use extensions::Extensions;
pub use job_declaration::JobDeclaration;
pub use mining::Mining;
pub use template_distribution::TemplateDistribution;

use crate::noise::extension_type;

/// A message with its spec constants, encoded and decoded through its reference struct.
pub trait Sv2Message: Sized {
    /// The spec's message type, the frame header's `msg_type`.
    const MSG_TYPE: u8;
    /// Whether the frame's `channel_msg` bit is set: the payload starts with a `channel_id`.
    const CHANNEL_BIT: bool;
    /// The spec's name, such as `SubmitShares.Success`.
    const NAME: &'static str;

    /// Appends the serialized message to `out`.
    fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError>;

    /// Reads the message from a frame payload (binary_sv2 decodes in place, hence `&mut`).
    fn decode(payload: &mut [u8]) -> Result<Self, DecodeError>;
}

/// Why a frame payload is not a message this crate knows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error(
        "message type {0:#04x} is not a Common, Mining, Job Declaration or Template Distribution message"
    )]
    /// The message type (held) belongs to no protocol this crate knows.
    UnknownType(u8),
    #[error("{name} (type {msg_type:#04x}) does not decode: {reason}")]
    /// binary_sv2 refused the payload (too short, a length out of range, ...).
    Malformed {
        /// The frame's message type.
        msg_type: u8,
        /// The message's spec name.
        name: &'static str,
        /// binary_sv2's error, as debug text.
        reason: String,
    },
    #[error("{name} (type {msg_type:#04x}): {field} is not UTF-8")]
    /// A string field is not UTF-8.
    NotUtf8 {
        /// The frame's message type.
        msg_type: u8,
        /// The message's spec name.
        name: &'static str,
        /// The field's name.
        field: &'static str,
    },
}

impl DecodeError {
    /// The message type of the frame that failed.
    pub fn msg_type(&self) -> u8 {
        match self {
            DecodeError::UnknownType(t) => *t,
            DecodeError::Malformed { msg_type, .. } | DecodeError::NotUtf8 { msg_type, .. } => {
                *msg_type
            }
        }
    }
}

/// Why a message cannot be serialized.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{name}.{field} has {len} elements or bytes, more than its type allows ({max})")]
    /// A field is longer than its wire type can hold.
    FieldTooLong {
        /// The message's spec name.
        name: &'static str,
        /// The field's name.
        field: &'static str,
        /// The field's length: bytes, or elements for a sequence.
        len: usize,
        /// The most its wire type allows.
        max: usize,
    },
    #[error("{name} could not be serialized: {reason}")]
    /// binary_sv2 failed to serialize the message.
    Serialize {
        /// The message's spec name.
        name: &'static str,
        /// binary_sv2's error, as debug text.
        reason: String,
    },
}

/// Declares one protocol's enum over its message structs, with dispatch by message type and
/// `From` conversions into it and into [`Message`].
macro_rules! protocol_messages {
    ($protocol:ident: $($variant:ident($ty:ty)),* $(,)?) => {
        #[doc = concat!("Any message of the ", stringify!($protocol), " protocol.")]
        #[derive(Clone, Debug, PartialEq)]
        pub enum $protocol {
            $(
                #[doc = concat!("A [`", stringify!($ty), "`].")]
                $variant($ty),
            )*
        }

        impl $protocol {
            /// Every message type of this protocol: type, `channel_msg` bit, spec name.
            pub const TYPES: &'static [(u8, bool, &'static str)] = &[
                $((<$ty as $crate::messages::Sv2Message>::MSG_TYPE,
                   <$ty as $crate::messages::Sv2Message>::CHANNEL_BIT,
                   <$ty as $crate::messages::Sv2Message>::NAME),)*
            ];

            /// The message's type
            /// ([`Sv2Message::MSG_TYPE`](crate::messages::Sv2Message::MSG_TYPE)).
            pub fn msg_type(&self) -> u8 {
                match self {
                    $($protocol::$variant(_) => <$ty as $crate::messages::Sv2Message>::MSG_TYPE,)*
                }
            }

            /// Whether the message's frame has the `channel_msg` bit set.
            pub fn channel_bit(&self) -> bool {
                match self {
                    $($protocol::$variant(_) => <$ty as $crate::messages::Sv2Message>::CHANNEL_BIT,)*
                }
            }

            /// The message's spec name.
            pub fn name(&self) -> &'static str {
                match self {
                    $($protocol::$variant(_) => <$ty as $crate::messages::Sv2Message>::NAME,)*
                }
            }

            /// Appends the serialized message to `out`.
            pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), $crate::messages::EncodeError> {
                match self {
                    $($protocol::$variant(m) => $crate::messages::Sv2Message::encode(m, out),)*
                }
            }

            /// Decodes a payload of message type `msg_type`; `None` when the type is not one of
            /// this protocol's.
            pub fn decode(
                msg_type: u8,
                payload: &mut [u8],
            ) -> Option<Result<$protocol, $crate::messages::DecodeError>> {
                $(
                    if msg_type == <$ty as $crate::messages::Sv2Message>::MSG_TYPE {
                        return Some(
                            <$ty as $crate::messages::Sv2Message>::decode(payload)
                                .map($protocol::$variant),
                        );
                    }
                )*
                None
            }
        }

        $(
            impl From<$ty> for $protocol {
                fn from(m: $ty) -> $protocol {
                    $protocol::$variant(m)
                }
            }

            impl From<$ty> for $crate::messages::Message {
                fn from(m: $ty) -> $crate::messages::Message {
                    $crate::messages::Message::$protocol($protocol::$variant(m))
                }
            }
        )*
    };
}
pub(crate) use protocol_messages;

/// Any message this crate knows, by protocol.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A Common message (connection setup, reconnection).
    Common(Common),
    /// A Mining Protocol message.
    Mining(Mining),
    /// A Job Declaration Protocol message.
    JobDeclaration(JobDeclaration),
    /// A Template Distribution Protocol message.
    TemplateDistribution(TemplateDistribution),
    /// An extensions negotiation message (extension 0x0001).
    Extensions(Extensions),
}

impl Message {
    /// Decodes the payload of a frame with extension type 0 and message type `msg_type`.
    pub fn decode(msg_type: u8, payload: &mut [u8]) -> Result<Message, DecodeError> {
        if let Some(m) = Common::decode(msg_type, payload) {
            return m.map(Message::Common);
        }
        if let Some(m) = Mining::decode(msg_type, payload) {
            return m.map(Message::Mining);
        }
        if let Some(m) = JobDeclaration::decode(msg_type, payload) {
            return m.map(Message::JobDeclaration);
        }
        if let Some(m) = TemplateDistribution::decode(msg_type, payload) {
            return m.map(Message::TemplateDistribution);
        }
        Err(DecodeError::UnknownType(msg_type))
    }

    /// Decodes a frame's payload by its extension (`extension_type` without the `channel_msg`
    /// bit) and message type. `Ok(None)`: an extension this crate has no messages of, which the
    /// spec says to ignore.
    pub fn decode_frame(
        extension: u16,
        msg_type: u8,
        payload: &mut [u8],
    ) -> Result<Option<Message>, DecodeError> {
        match extension {
            0 => Message::decode(msg_type, payload).map(Some),
            extensions::extension::EXTENSIONS_NEGOTIATION => Extensions::decode(msg_type, payload)
                .ok_or(DecodeError::UnknownType(msg_type))?
                .map(|m| Some(Message::Extensions(m))),
            _ => Ok(None),
        }
    }

    /// Appends the serialized message to `out` and returns its message type.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<u8, EncodeError> {
        match self {
            Message::Common(m) => m.encode(out),
            Message::Mining(m) => m.encode(out),
            Message::JobDeclaration(m) => m.encode(out),
            Message::TemplateDistribution(m) => m.encode(out),
            Message::Extensions(m) => m.encode(out),
        }?;
        Ok(self.msg_type())
    }

    /// The message's type, for the frame header.
    pub fn msg_type(&self) -> u8 {
        match self {
            Message::Common(m) => m.msg_type(),
            Message::Mining(m) => m.msg_type(),
            Message::JobDeclaration(m) => m.msg_type(),
            Message::TemplateDistribution(m) => m.msg_type(),
            Message::Extensions(m) => m.msg_type(),
        }
    }

    /// Whether the message's frame has the `channel_msg` bit set.
    pub fn channel_bit(&self) -> bool {
        match self {
            Message::Common(m) => m.channel_bit(),
            Message::Mining(m) => m.channel_bit(),
            Message::JobDeclaration(m) => m.channel_bit(),
            Message::TemplateDistribution(m) => m.channel_bit(),
            Message::Extensions(m) => m.channel_bit(),
        }
    }

    /// The frame's extension type field: the extension that defines the message (0 for the
    /// core protocols') with the message's `channel_msg` bit.
    pub fn extension_type(&self) -> u16 {
        let extension = match self {
            Message::Extensions(_) => extensions::extension::EXTENSIONS_NEGOTIATION,
            _ => 0,
        };
        extension_type(extension, self.channel_bit())
    }

    /// The message's spec name, such as `SubmitShares.Success`.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Common(m) => m.name(),
            Message::Mining(m) => m.name(),
            Message::JobDeclaration(m) => m.name(),
            Message::TemplateDistribution(m) => m.name(),
            Message::Extensions(m) => m.name(),
        }
    }
}

/// The spec name of a frame's message, from its extension (without the `channel_msg` bit) and
/// type, for counting messages by type without decoding them: `unknown` for a type this crate
/// has no message of.
pub fn frame_name(extension: u16, msg_type: u8) -> &'static str {
    let types = match extension {
        0 => Common::TYPES
            .iter()
            .chain(Mining::TYPES)
            .chain(JobDeclaration::TYPES)
            .chain(TemplateDistribution::TYPES)
            .find(|t| t.0 == msg_type),
        extensions::extension::EXTENSIONS_NEGOTIATION => {
            Extensions::TYPES.iter().find(|t| t.0 == msg_type)
        }
        _ => None,
    };
    types.map_or("unknown", |t| t.2)
}

/// Every message type of extension 0 (the core protocols): type, `channel_msg` bit, spec name.
pub fn message_types() -> impl Iterator<Item = (u8, bool, &'static str)> {
    Common::TYPES
        .iter()
        .chain(Mining::TYPES)
        .chain(JobDeclaration::TYPES)
        .chain(TemplateDistribution::TYPES)
        .copied()
}
