//! The bandwidth cap: one pipe per direction, shared by every connection of the link.
//!
//! A farm's uplink is one pipe that all its devices' connections share, so the cap is modelled
//! as a single first-come, first-served queue per direction (not as a per-connection rate): a
//! chunk starts transmitting when it arrives or when the pipe has finished the chunk ahead of
//! it, whichever is later, and occupies the pipe for its size over the rate. Its propagation
//! delay starts when its last bit is out. The size on the wire includes the headers of every
//! TCP segment the chunk needs ([`WIRE_OVERHEAD`] per [`crate::loss::MSS`] bytes), because a
//! link carries those too and Stratum's messages are small enough for them to matter (about a
//! third of a share's bytes). Acknowledgements travelling the other way and retransmitted
//! segments are not charged.
//!
//! The queue grows while the offered load exceeds the rate; what bounds it is the tap's
//! per-connection buffer, which stops reading from a sender that is too far ahead, as a TCP
//! receive window would.

use crate::loss::MSS;
use crate::units::Bandwidth;

/// Bytes of headers per TCP segment on the wire: Ethernet 14, IPv4 20, TCP 20 plus 12 of
/// timestamp option (Linux's default).
pub const WIRE_OVERHEAD: u64 = 14 + 20 + 20 + 12;

/// One direction of a link's capacity.
#[derive(Clone, Debug)]
pub struct Pipe {
    bandwidth: Bandwidth,
    /// When the pipe finishes what it has been given so far.
    free_at_ns: u64,
    wire_bytes: u64,
}

impl Pipe {
    /// An idle pipe of capacity `bandwidth`.
    pub fn new(bandwidth: Bandwidth) -> Self {
        Pipe {
            bandwidth,
            free_at_ns: 0,
            wire_bytes: 0,
        }
    }

    /// The pipe's capacity.
    pub fn bandwidth(&self) -> Bandwidth {
        self.bandwidth
    }

    /// Bytes a chunk of `app_bytes` application bytes occupies on the wire.
    pub fn wire_size(app_bytes: usize) -> u64 {
        let segments = app_bytes.div_ceil(MSS).max(1) as u64;
        app_bytes as u64 + segments * WIRE_OVERHEAD
    }

    /// Queues a chunk ready to go at `ready_ns`; returns when its last bit is out. An unlimited
    /// pipe returns `ready_ns`.
    pub fn transmit(&mut self, ready_ns: u64, app_bytes: usize) -> u64 {
        if self.bandwidth.is_unlimited() {
            return ready_ns;
        }
        let wire = Self::wire_size(app_bytes);
        self.wire_bytes += wire;
        let start = ready_ns.max(self.free_at_ns);
        self.free_at_ns = start.saturating_add(self.bandwidth.transmit_ns(wire));
        self.free_at_ns
    }

    /// Bytes given to the pipe so far, headers included.
    pub fn wire_bytes(&self) -> u64 {
        self.wire_bytes
    }

    /// How long a chunk ready at `now_ns` would wait for the chunks ahead of it.
    pub fn backlog_ns(&self, now_ns: u64) -> u64 {
        self.free_at_ns.saturating_sub(now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn unlimited_costs_nothing() {
        let mut p = Pipe::new(Bandwidth::UNLIMITED);
        assert_eq!(p.transmit(5, 1 << 20), 5);
        assert_eq!(p.transmit(5, 1 << 20), 5);
        assert_eq!(p.backlog_ns(0), 0);
    }

    #[test]
    fn wire_size_counts_segment_headers() {
        assert_eq!(Pipe::wire_size(0), WIRE_OVERHEAD);
        assert_eq!(Pipe::wire_size(150), 150 + WIRE_OVERHEAD);
        assert_eq!(Pipe::wire_size(MSS), MSS as u64 + WIRE_OVERHEAD);
        assert_eq!(Pipe::wire_size(MSS + 1), MSS as u64 + 1 + 2 * WIRE_OVERHEAD);
    }

    #[test]
    fn back_to_back_chunks_queue_behind_each_other() {
        // 1514 wire bytes per full segment at 10 Mbit/s: 1.2112 ms each.
        let mut p = Pipe::new("10Mbit".parse().unwrap());
        let per = 1_211_200;
        for k in 1..=10 {
            assert_eq!(p.transmit(0, MSS), k * per);
        }
        assert_eq!(p.backlog_ns(0), 10 * per);
        // A chunk arriving after the pipe drained starts at once.
        assert_eq!(p.transmit(100 * MS, MSS), 100 * MS + per);
    }

    #[test]
    fn long_run_throughput_is_the_rate() {
        // Connections share the pipe: whatever the mix of sizes, N bytes take N*8/rate.
        let bw: Bandwidth = "2Mbit".parse().unwrap();
        let mut p = Pipe::new(bw);
        let mut end = 0;
        let mut app = 0u64;
        for i in 0..5000usize {
            let size = 1 + (i * 7919) % 4000;
            app += size as u64;
            end = p.transmit(0, size);
        }
        let expected = bw.transmit_ns(p.wire_bytes());
        // Rounding up per chunk adds at most a nanosecond each.
        assert!(
            end >= expected && end <= expected + 5000,
            "{end} vs {expected}"
        );
        assert!(p.wire_bytes() > app);
    }
}
