//! The tokio shell: a listener whose connections run the Noise NX handshake under the JDS's
//! authority certificate and then drive a [`crate::Session`] each; a task that keeps the
//! pool-side node's mempool view fresh; pushed solutions stored, then submitted until the node
//! answers; the HTTP status endpoints.

mod http;
mod node_mempool;
mod server;

pub use node_mempool::{MempoolGuard, NodeMempool};
pub use server::{JdsSettings, JdsStats, RunningJds, StartError, StatsSnapshot};
