//! What every role that serves miners shares apart from the protocol: why a share is refused
//! ([`Reject`]) and the difficulty a miner is asked for ([`vardiff`]).
//!
//! Sans-IO and free of I/O dependencies, so that the farm proxies use these without linking
//! the pool's store, node client or servers. Time comes in as [`primitives::Timestamp`].

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod reject;
pub mod vardiff;

pub use reject::Reject;
