//! What the SV1 and SV2 servers share: the pool's admission gate, the sessions' clock and the
//! counter of the bytes crossing the front end's sockets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use events::LinkCounter;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::Timestamp;
use edge::{Admission, Gate, Slot};

/// A front end's admission, clock and link counter.
pub(crate) struct Front {
    /// Admission: caps, rates, bans and the slot each connection holds (one gate for both
    /// front ends, so the caps are the pool's).
    pub(crate) gate: Arc<Gate>,
    /// Where the sessions' clock starts (the pool sets one timeline for both front ends).
    pub(crate) start: Instant,
    /// Bytes from and to miners, and what `LinkBytes` has reported of them: the pool counts
    /// its own traffic (docs/metrics.md `roles.<name>.net_*_bytes`).
    pub(crate) net: Arc<LinkCounter>,
}

impl Front {
    /// The front end on `gate`, counting its bytes under `link`; its clock starts now.
    pub(crate) fn new(gate: Arc<Gate>, link: &'static str) -> Front {
        Front {
            gate,
            start: Instant::now(),
            net: LinkCounter::new(link),
        }
    }

    /// Milliseconds since the clock started (the sessions' clock).
    pub(crate) fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.start.elapsed().as_millis() as u64)
    }

    pub(crate) fn admission(&self) -> &Admission {
        self.gate.admission()
    }

    /// An accepted connection that the gate admits, with its slot; `None` for one it refuses
    /// (dropped here) or a failed accept, after a pause: out of descriptors and the like, the
    /// accept loop backs off instead of spinning.
    pub(crate) async fn admit(
        &self,
        accepted: std::io::Result<(TcpStream, SocketAddr)>,
    ) -> Option<(TcpStream, SocketAddr, Slot)> {
        let link = self.net.link();
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "{link} accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                return None;
            }
        };
        match self.gate.admit(peer.ip(), self.now()) {
            Ok(slot) => Some((stream, peer, slot)),
            Err(why) => {
                tracing::debug!(%peer, why = why.as_str(), "{link} connection refused");
                None
            }
        }
    }
}

/// Resolves once `shutdown` turns true (or its sender is gone).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}
