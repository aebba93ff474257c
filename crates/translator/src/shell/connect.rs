//! Which upstreams there are, and looking for one that answers: each in order, then all again
//! after a backoff. What connecting means is the transport's ([`super::transport`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use events::LinkCounter;

use super::backoff::Backoff;
use super::transport::{Hello, Link, Transport};

/// One pool the farm proxy may work for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamSpec {
    /// The pool's address.
    pub addr: SocketAddr,
    /// The authority key the pool's Noise certificate must be signed with (SV2 only).
    pub authority_key: Option<[u8; 32]>,
}

/// Tries every upstream once, in order from `first`, each within `timeout`; after a round
/// that reached none, waits as `backoff` says and goes round again. Ends only with a
/// connection and the index of its upstream (the caller drops the task to stop it).
pub(crate) async fn connect_any<T: Transport>(
    upstreams: &[UpstreamSpec],
    first: usize,
    timeout: Duration,
    mut backoff: Backoff,
    hello: Hello<'_>,
    net: &Arc<LinkCounter>,
) -> (usize, Link<T>) {
    loop {
        for k in 0..upstreams.len() {
            let index = (first + k) % upstreams.len();
            let spec = &upstreams[index];
            match tokio::time::timeout(timeout, T::connect(spec, hello, net)).await {
                Ok(Ok(link)) => return (index, link),
                Ok(Err(e)) => {
                    tracing::warn!(upstream = %spec.addr, index, error = %e, "upstream attempt failed");
                }
                Err(_) => {
                    tracing::warn!(upstream = %spec.addr, index, ?timeout, "upstream attempt timed out");
                }
            }
        }
        let wait = backoff.next_delay();
        tracing::info!(?wait, "no upstream reachable; retrying");
        tokio::time::sleep(wait).await;
    }
}
