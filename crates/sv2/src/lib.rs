//! Stratum V2 glue shared by simnet's Template Provider, the SV2 pool front end and the fleet's
//! SV2 devices.
//!
//! Everything on the wire comes from the SV2 reference crates (docs/architecture.md, principle 4):
//! the Noise NX handshake with the authority certificate (noise_sv2 through codec_sv2's
//! typestate `Handshake`), frames and their encryption (framing_sv2, codec_sv2's
//! `NoiseEncoder` / `NoiseDecoder`), and the message layouts (binary_sv2 with the reference
//! message structs). What is ours is the shape the rest of the workspace uses them in:
//!
//! - [`noise`]: one connection's Noise state as a sans-IO machine per side
//!   ([`NoiseInitiator`], [`NoiseResponder`]): bytes in, handshake bytes and decrypted
//!   [`Frame`]s out, a bound on frame size. Thousands of them live in one fleet process.
//! - [`messages`]: every Common, Mining, Job Declaration and Template Distribution message as a
//!   plain owned value, with `encode` / `decode` through the reference structs, the spec's
//!   message types, channel bits, flags and error codes.
//! - [`transport`]: a tokio shell over [`noise`] for roles that run one task per connection,
//!   with bounded handshake time, frame size and write time.
//! - [`keys`]: authority key pairs in the reference implementation's base58check forms.
//! - [`fuzz_support`]: what the fuzz targets in `crates/sv2/fuzz` run, so that the committed
//!   corpus replays on stable.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod fuzz_support;
pub mod keys;
pub mod messages;
pub mod negotiation;
pub mod noise;
pub mod tlv;
pub mod transport;

pub use keys::{
    parse_public_key, AuthorityKeys, KeyError, REFERENCE_AUTHORITY_PUBLIC_KEY,
    REFERENCE_AUTHORITY_SECRET_KEY,
};
pub use messages::{DecodeError, EncodeError, Message, Sv2Message};
pub use noise::{Frame, NoiseError, NoiseInitiator, NoiseResponder};
pub use transport::{Limits, NoiseConn, Side, TransportError};
