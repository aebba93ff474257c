//! What the workspace's tests and benches share, so that each exists once: a crate's committed
//! fuzz corpus ([`corpus`](mod@corpus)), an allocator that counts allocations ([`alloc`]) and
//! the floor the benches state their costs against ([`floor`]), and a listener's accept queue
//! ([`net`]). A dev-dependency only: nothing that ships links it.
#![warn(missing_docs, unreachable_pub)]

pub mod alloc;
pub mod corpus;
pub mod floor;
pub mod net;

pub use corpus::Corpus;
