//! The settings of one tap process.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use events::EventSink;

use crate::link::LinkConfig;
use crate::sv1_watch::{Protocol, DEFAULT_MAX_LINE};
use crate::sv2_relay::Sv2Terminate;

/// The settings of one tap: addresses, the emulated link, what is read of the traffic, and limits.
#[derive(Clone, Debug)]
pub struct TapConfig {
    /// Where clients connect (port 0: any free port; [`crate::Tap::local_addr`] tells which).
    pub listen: SocketAddr,
    /// Where each client's connection is relayed to.
    pub upstream: SocketAddr,
    /// Source address of the upstream connections (several taps on 127.x addresses share the
    /// upstream's port space that way).
    pub source_addr: Option<IpAddr>,
    /// Delay, jitter, loss and bandwidth applied to every connection.
    pub link: LinkConfig,
    /// The `link` of this tap's events ("wan", "lan", ...).
    pub link_name: String,
    /// Seed of jitter and loss.
    pub seed: u64,
    /// What is read of the relayed bytes (default `auto`: SV1 when the first bytes look like it).
    pub protocol: Protocol,
    /// Longest SV1 line read; longer stops the reading of that connection, not its relaying.
    pub max_line: usize,
    /// Bytes held per connection and direction before the tap stops reading from the sender.
    pub buffer_bytes: usize,
    /// How often each connection reports its byte counts (and measured round trip).
    pub report_interval: Duration,
    /// Connections held at once; `None`: as many as the descriptor limit allows.
    pub max_connections: Option<usize>,
    /// How long an upstream connection may take to establish before the client's is closed.
    pub connect_timeout: Duration,
    /// Run the release timer under SCHED_FIFO when permitted ([`crate::sched`]); the caller
    /// does the same for the runtime's threads.
    pub realtime: bool,
    /// Where `LinkBytes`, `LinkRtt` and the SV1/SV2 events go; disabled by default.
    pub events: EventSink,
    /// Terminate SV2's Noise on both legs and read the messages ([`crate::sv2_relay`]);
    /// `None` relays the bytes as they are.
    pub sv2: Option<Sv2Terminate>,
}

impl TapConfig {
    /// A perfect link from `listen` to `upstream`, reading SV1 when it sees it.
    pub fn new(listen: SocketAddr, upstream: SocketAddr) -> Self {
        TapConfig {
            listen,
            upstream,
            source_addr: None,
            link: LinkConfig::default(),
            link_name: "wan".into(),
            seed: 1,
            protocol: Protocol::Auto,
            max_line: DEFAULT_MAX_LINE,
            buffer_bytes: 256 * 1024,
            report_interval: Duration::from_secs(1),
            max_connections: None,
            connect_timeout: Duration::from_secs(10),
            realtime: false,
            events: EventSink::disabled(),
            sv2: None,
        }
    }
}
