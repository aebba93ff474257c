//! The limits one listener applies to its peers, with the same names, defaults and meanings on
//! every role (docs/operations.md "The connection edge").

use std::time::Duration;

use crate::limit::Rate;

/// Limits that protect a listening role from peers that are not well-behaved clients.
#[derive(Clone, Debug, PartialEq)]
pub struct Admission {
    /// Open connections at once (`--max-connections`; the farm proxies' `--max-devices`).
    pub max_connections: usize,
    /// Open connections from one source address at once (`--max-connections-per-ip`): one
    /// address can take no more than this share of the role, however fast it connects.
    pub max_connections_per_ip: usize,
    /// New connections per source address (`--connect-rate`, `--connect-burst`).
    pub connect_rate: Rate,
    /// Messages per connection (`--message-rate`, `--message-burst`).
    pub message_rate: Rate,
    /// Longest line (SV1) accepted, in bytes; a longer one is answered with an error and closed.
    pub max_line: usize,
    /// A connection must finish its handshake (SV1: subscribe and authorize; SV2: Noise and
    /// SetupConnection) within this long.
    pub handshake_timeout: Duration,
    /// A connection that sends nothing for this long is closed.
    pub idle_timeout: Duration,
    /// A connection whose output does not drain for this long is closed
    /// (`--write-timeout`): a peer that stops reading frees its slot and its buffers.
    pub write_timeout: Duration,
    /// This many rejected shares in a row (stale ones excepted) bans the source address.
    pub invalid_share_ban_after: u32,
    /// How long a ban lasts (`--ban-duration`).
    pub ban_duration: Duration,
}

impl Admission {
    /// The default cap per source address: an operator's miners come from many addresses; a
    /// farm behind one NAT raises it (docs/operations.md).
    pub const DEFAULT_PER_IP: usize = 1_000;
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            max_connections: 15_000,
            max_connections_per_ip: Admission::DEFAULT_PER_IP,
            // A farm behind one address reconnects all at once after a restart: the burst lets
            // all of it back in at once, and no more than the per-address cap can hold.
            connect_rate: Rate {
                per_second: 500.0,
                burst: Admission::DEFAULT_PER_IP as f64,
            },
            // An aggregating proxy speaks for many devices on one connection.
            message_rate: Rate {
                per_second: 1_000.0,
                burst: 5_000.0,
            },
            max_line: 8 * 1024,
            handshake_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
            write_timeout: Duration::from_secs(10),
            invalid_share_ban_after: 200,
            ban_duration: Duration::from_secs(600),
        }
    }
}
