//! Stratum V1 as miners and pools speak it: line framing ([`line`]), a zero-allocation reader
//! for its JSON-RPC envelopes ([`json`]), typed messages ([`message`]), writers for every line
//! either side sends ([`write`]), the hex forms it uses ([`hex`]) and its customary error codes
//! ([`error`]), the [`outbox`] a server's replies and shared job lines wait in, and the
//! [`server`] side's reading of requests and the [`session`] of one connection, which every role that serves miners shares. No I/O: pools, proxies, the fleet's devices and the tap build on this.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod error;
pub mod fast;
/// The read path under arbitrary bytes, for the fuzz target `line` and its corpus replay test.
#[doc(hidden)]
pub mod fuzz_support;
pub mod hex;
pub mod json;
pub mod kind;
pub mod line;
pub mod message;
pub mod outbox;
pub mod server;
pub mod session;
pub mod write;

/// The version-rolling mask servers offer (BIP320's general-purpose bits 13 to 28): a miner
/// that asks for version rolling gets its requested mask AND this.
pub const VERSION_ROLLING_MASK: u32 = 0x1fff_e000;

pub use error::ErrorCode;
pub use fast::{parse_submit, FastSubmit};
pub use json::{error_code, Envelope, JsonError, Value};
pub use kind::line_kind;
pub use line::{LineBuffer, LineTooLong};
pub use message::{
    parse_line, Authorize, Configure, Method, Notify, ParamError, Submit, Subscribe,
};
