//! What the ZMQ tests read from bitcoind-format messages.

use primitives::Hash256;

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
