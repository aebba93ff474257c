//! What the ZMQ tests read from bitcoind-format messages.

use std::time::Duration;

use primitives::Hash256;
use zeromq::{SocketRecv, SubSocket};

/// How long a test waits for what should come at once.
pub const WAIT: Duration = Duration::from_secs(10);

/// The frames of the next message.
pub async fn recv(s: &mut SubSocket) -> Vec<Vec<u8>> {
    let m = tokio::time::timeout(WAIT, s.recv())
        .await
        .expect("a message in time")
        .unwrap();
    m.into_vec().into_iter().map(|b| b.to_vec()).collect()
}

/// A hash as ZMQ's `hash*` topics carry it: in display order, reversed from the wire.
pub fn display(hash: Hash256) -> Vec<u8> {
    let mut b = hash.to_byte_array();
    b.reverse();
    b.to_vec()
}

/// A message's last frame: its topic's 4-byte little-endian sequence number.
pub fn seq(frame: &[u8]) -> u32 {
    u32::from_le_bytes(frame.try_into().expect("a 4-byte sequence number"))
}
