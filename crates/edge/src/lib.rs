//! The connection edge: what happens between `accept` and a protocol core, written once for
//! every listening role (the pool's SV1 and SV2 front ends, the farm proxies' device side, the
//! JDC's embedded pool, the JDS).
//!
//! - [`Admission`]: the limits, with one set of flag names and defaults on every role.
//! - [`Gate`]: admission of new connections (total and per-address caps, connect rate, bans)
//!   and the [`Slot`] each connection holds, released by its `Drop` so that a panicking task
//!   cannot leak it; counts of refusals, closes and bans for `/api/status` and `/metrics`.
//! - [`MessageBudget`]: a connection's message rate.
//! - [`limit`]: the sharded token buckets and ban lists underneath.
//! - [`listen`]: the listening socket itself, with an accept queue sized for a reconnect storm.
//!
//! Sans-IO but for [`listen`] (the socket, and the reading of its queue for the snapshot):
//! every decision takes the time as [`Timestamp`]; the shells own
//! the connections and timers.
//! docs/operations.md "The connection edge" describes the flags and what an operator sees.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod admission;
pub mod budget;
pub mod gate;
pub mod limit;
pub mod listen;

pub use admission::Admission;
pub use budget::MessageBudget;
pub use gate::{AdmissionSnapshot, BanReason, Gate, Refusal, Slot};
pub use limit::{BanList, Decision, Rate, RateLimiter};
pub use listen::{accept_queue, listen, AcceptQueue, ListenerQueue, Listeners};
pub use primitives::Timestamp;
