//! Bytes and round trips.
//!
//! - Site bandwidth comes from the WAN tap's `LinkBytes` on the WAN link, in the measured
//!   window: up (the way shares travel) leaves the farm and enters the pool site, down the
//!   reverse. The farm-side node's peer traffic (simnet's `LinkBytes` on the peer link, up =
//!   sent) adds to the farm site's figures.
//! - `links`: every link name's bytes in the measured window. A link a tap reports is taken from
//!   the taps alone (a role on it may count the same bytes again from its own sockets); a link
//!   no tap reports is taken from whoever reports it.
//! - `rtt_ms.measured`: the mean of the WAN link's `LinkRtt` over the whole run.
//! - A role's `net_tx_bytes`/`net_rx_bytes`: its own `LinkBytes` over the whole run (as its CPU
//!   and memory are). A role at an end of a link sends up on the farm side and down on the pool
//!   side; a relay (tap, proxy) receives and sends each byte it carries, so both its figures are
//!   the sum of both directions.

use std::collections::BTreeMap;

use events::{Direction, EventKind};

use super::input::{LinkSetup, RoleKind, Site, Window};
use super::series::Series;
use crate::results::{LinkFigures, SiteBandwidth};

/// Mergeable traffic figures of one configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrafficTally {
    /// Bytes leaving the farm site.
    pub farm_tx: u64,
    /// Bytes entering the farm site.
    pub farm_rx: u64,
    /// Bytes leaving the pool site.
    pub pool_tx: u64,
    /// Bytes entering the pool site.
    pub pool_rx: u64,
    /// Length of the measured window(s) the bytes were counted over.
    pub measured_ns: u64,
    /// Per link: (up, down) bytes in the measured window.
    pub links: BTreeMap<String, (u64, u64)>,
    /// The WAN link's name in `links`.
    pub wan: String,
    /// Sum of the WAN link's measured round trips, in ns.
    pub rtt_sum_ns: u128,
    /// Round trips measured.
    pub rtt_n: u64,
}

impl TrafficTally {
    /// Adds `o`'s counts.
    pub fn merge(&mut self, o: &TrafficTally) {
        self.farm_tx += o.farm_tx;
        self.farm_rx += o.farm_rx;
        self.pool_tx += o.pool_tx;
        self.pool_rx += o.pool_rx;
        self.measured_ns += o.measured_ns;
        for (k, (u, d)) in &o.links {
            let e = self.links.entry(k.clone()).or_default();
            e.0 += u;
            e.1 += d;
        }
        self.rtt_sum_ns += o.rtt_sum_ns;
        self.rtt_n += o.rtt_n;
        if self.wan.is_empty() {
            self.wan = o.wan.clone();
        }
    }

    fn per_s(&self, bytes: u64) -> f64 {
        if self.measured_ns == 0 {
            0.0
        } else {
            bytes as f64 / (self.measured_ns as f64 / 1e9)
        }
    }

    /// A site's bytes and bytes per second over the measured window.
    pub fn site(&self, site: Site) -> SiteBandwidth {
        let (tx, rx) = match site {
            Site::Farm => (self.farm_tx, self.farm_rx),
            Site::Pool => (self.pool_tx, self.pool_rx),
        };
        SiteBandwidth {
            tx_bps: self.per_s(tx),
            rx_bps: self.per_s(rx),
            tx_bytes: tx,
            rx_bytes: rx,
        }
    }

    /// Per link: bytes and bytes per second over the measured window.
    pub fn links(&self) -> BTreeMap<String, LinkFigures> {
        self.links
            .iter()
            .map(|(k, &(up, down))| {
                let f = LinkFigures {
                    up_bytes: up,
                    down_bytes: down,
                    up_bps: self.per_s(up),
                    down_bps: self.per_s(down),
                };
                (k.clone(), f)
            })
            .collect()
    }

    /// The WAN link's (up, down) bytes in the measured window; `None` where no role reported
    /// it.
    pub fn wan_bytes(&self) -> Option<(u64, u64)> {
        self.links.get(&self.wan).copied()
    }

    /// Mean measured WAN round trip, in ms; `None` with none measured.
    pub fn rtt_measured_ms(&self) -> Option<f64> {
        (self.rtt_n > 0).then(|| self.rtt_sum_ns as f64 / self.rtt_n as f64 / 1e6)
    }
}

/// A role's own socket bytes over the run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RoleBytes {
    /// Bytes the role sent.
    pub up: u64,
    /// Bytes the role received.
    pub down: u64,
    /// Whether the role emitted `LinkBytes` at all (else its bytes are 0 for want of a count).
    pub reported: bool,
}

impl RoleBytes {
    /// (tx, rx) of a role of `kind` on `site`.
    pub fn tx_rx(&self, kind: RoleKind, site: Site) -> (u64, u64) {
        match (kind, site) {
            (RoleKind::Tap | RoleKind::Proxy, _) => (self.up + self.down, self.up + self.down),
            (_, Site::Farm) => (self.up, self.down),
            (_, Site::Pool) => (self.down, self.up),
        }
    }
}

/// Collects traffic while the logs are read.
pub(crate) struct Traffic {
    window: Window,
    peer: Option<String>,
    pub tally: TrafficTally,
    from_taps: BTreeMap<String, (u64, u64)>,
    from_others: BTreeMap<String, (u64, u64)>,
    pub roles: Vec<RoleBytes>,
    /// simnet's own bytes on this configuration's endpoints and peer link (up: read).
    pub simnet: RoleBytes,
    endpoints: Vec<String>,
}

impl Traffic {
    pub(crate) fn new(window: Window, links: &LinkSetup, roles: usize) -> Self {
        Traffic {
            window,
            peer: links.farm_node_peer_link.clone(),
            simnet: RoleBytes::default(),
            endpoints: links.node_endpoints.clone(),
            tally: TrafficTally {
                measured_ns: window.measured_ns(),
                wan: links.wan.clone(),
                ..TrafficTally::default()
            },
            from_taps: BTreeMap::new(),
            from_others: BTreeMap::new(),
            roles: vec![RoleBytes::default(); roles],
        }
    }

    /// An event of role log `role`.
    pub(crate) fn on_role(
        &mut self,
        role: usize,
        kind: RoleKind,
        ts: u64,
        ev: &EventKind,
        series: &mut Series,
    ) {
        match ev {
            EventKind::LinkBytes(b) => {
                let r = &mut self.roles[role];
                r.reported = true;
                match b.direction {
                    Direction::Up => r.up += b.bytes,
                    Direction::Down => r.down += b.bytes,
                }
                let links = if kind == RoleKind::Tap {
                    &mut self.from_taps
                } else {
                    &mut self.from_others
                };
                count_link(
                    &self.window,
                    links_entry(links, b.link.as_str()),
                    ts,
                    b.direction,
                    b.bytes,
                );
                if kind == RoleKind::Tap && b.link.as_str() == self.tally.wan {
                    self.count_wan(ts, b.direction, b.bytes, series);
                }
            }
            EventKind::LinkRtt(r) if r.link.as_str() == self.tally.wan => {
                self.tally.rtt_sum_ns += u128::from(r.rtt_ns);
                self.tally.rtt_n += 1;
            }
            _ => {}
        }
    }

    /// An event of the simnet log (node peer traffic).
    pub(crate) fn on_simnet(&mut self, ts: u64, ev: &EventKind, series: &mut Series) {
        let EventKind::LinkBytes(b) = ev else { return };
        let link = b.link.as_str();
        let peer = self.peer.as_deref() == Some(link);
        if !peer && !self.endpoints.iter().any(|e| e == link) {
            return; // another configuration's endpoint
        }
        // Endpoints count what simnet read as up (as every server does); a peer link counts
        // what the node sent as up. simnet's own tally is by what it read.
        let read = (b.direction == Direction::Up) != peer;
        self.simnet.reported = true;
        if read {
            self.simnet.up += b.bytes;
        } else {
            self.simnet.down += b.bytes;
        }
        count_link(
            &self.window,
            links_entry(&mut self.from_others, b.link.as_str()),
            ts,
            b.direction,
            b.bytes,
        );
        if self.peer.as_deref() == Some(b.link.as_str()) {
            let (total, column) = match b.direction {
                Direction::Up => (&mut self.tally.farm_tx, Series::FARM_TX),
                Direction::Down => (&mut self.tally.farm_rx, Series::FARM_RX),
            };
            if self.window.measured(ts) {
                *total += b.bytes;
            }
            if let Some(sec) = self.window.second(ts) {
                series.add(column, sec, b.bytes);
            }
        }
    }

    fn count_wan(&mut self, ts: u64, d: Direction, bytes: u64, series: &mut Series) {
        let t = &mut self.tally;
        let measured = self.window.measured(ts);
        let columns = match d {
            Direction::Up => {
                if measured {
                    t.farm_tx += bytes;
                    t.pool_rx += bytes;
                }
                [Series::FARM_TX, Series::POOL_RX]
            }
            Direction::Down => {
                if measured {
                    t.farm_rx += bytes;
                    t.pool_tx += bytes;
                }
                [Series::FARM_RX, Series::POOL_TX]
            }
        };
        if let Some(sec) = self.window.second(ts) {
            for c in columns {
                series.add(c, sec, bytes);
            }
        }
    }

    /// Settles `links`: taps' figures where a tap reports the link.
    pub(crate) fn finish(&mut self) {
        let mut links = std::mem::take(&mut self.from_others);
        for (k, v) in std::mem::take(&mut self.from_taps) {
            links.insert(k, v);
        }
        self.tally.links = links;
    }
}

fn links_entry<'m>(links: &'m mut BTreeMap<String, (u64, u64)>, name: &str) -> &'m mut (u64, u64) {
    if !links.contains_key(name) {
        links.insert(name.to_owned(), (0, 0));
    }
    links.get_mut(name).expect("just inserted")
}

fn count_link(w: &Window, slot: &mut (u64, u64), ts: u64, d: Direction, bytes: u64) {
    if w.measured(ts) {
        match d {
            Direction::Up => slot.0 += bytes,
            Direction::Down => slot.1 += bytes,
        }
    }
}
