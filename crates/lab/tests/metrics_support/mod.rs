//! Synthetic event logs whose truth the tests control.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use events::{
    ConnectionOpened, Direction, Event, EventKind, EventLog, Fingerprint, HashesDone, Header,
    JobId, JobReceived, LinkBytes, Perspective, ShareResult, ShareSent, ShortStr, TemplateCreated,
    TipChanged, TipSource, Verdict,
};
use lab::metrics::{
    measure, ConfigRun, LinkSetup, LogSource, Measured, PoolShares, ProcessUsage, RoleKind,
    RoleLog, Site, Window,
};
use lab::results::{ConfigResults, Shares};
use primitives::{Hash256, Target};

/// The run starts at 1000 s on the monotonic clock.
pub const START: u64 = 1_000_000_000_000;
pub const MS: u64 = 1_000_000;
pub const S: u64 = 1_000_000_000;

/// `s` seconds after the start.
pub fn at(s: f64) -> u64 {
    START + (s * 1e9).round() as u64
}

/// 100 s run, warm-up 10 s, drain 5 s: measured window [10 s, 100 s).
pub fn window() -> Window {
    Window::new(START, Duration::from_secs(100), 0.1, Duration::from_secs(5))
}

pub fn h(n: u64) -> Hash256 {
    let mut b = [0u8; 32];
    b[..8].copy_from_slice(&n.to_le_bytes());
    b[31] = 0x5a;
    Hash256(b)
}

pub fn ev(ts: u64, kind: impl Into<EventKind>) -> Event {
    Event {
        ts_ns: ts,
        kind: kind.into(),
    }
}

pub fn template(node: &str, id: u64, prev: Hash256, value: u64, fp: u64) -> TemplateCreated {
    TemplateCreated {
        node: ShortStr::new(node),
        template_id: id,
        height: 900_001,
        prev_hash: prev,
        value_sats: value,
        fees_sats: value.saturating_sub(312_500_000),
        tx_count: 10,
        fingerprint: Fingerprint(fp),
        future: false,
    }
}

pub fn tip(node: &str, hash: Hash256, height: u32, prev: Hash256) -> TipChanged {
    TipChanged {
        node: ShortStr::new(node),
        hash,
        height,
        prev_hash: prev,
        source: TipSource::Network,
    }
}

/// An SV1 job as a device receives it.
pub fn job(device: u64, fp: u64, prev: Hash256) -> JobReceived {
    JobReceived {
        device,
        channel: None,
        job_id: JobId::text(&format!("{fp:x}")),
        fingerprint: Some(Fingerprint(fp)),
        prev_hash: Some(prev),
        target: Target::DIFFICULTY_1,
        clean: true,
        future: false,
    }
}

pub fn sent(device: u64, seq: u64, difficulty: f64, hash: Option<Hash256>) -> ShareSent {
    ShareSent {
        device,
        channel: None,
        seq,
        job_id: JobId::text("1"),
        nonce: seq as u32,
        ntime: 0,
        version: 0x2000_0000,
        difficulty,
        hash,
    }
}

pub fn verdict(device: u64, seq: u64, verdict: Verdict, perspective: Perspective) -> ShareResult {
    ShareResult {
        conn: device,
        channel: None,
        seq,
        job_id: JobId::text("1"),
        nonce: seq as u32,
        difficulty: 1.0,
        verdict,
        perspective,
    }
}

pub fn received(device: u64, seq: u64, v: Verdict) -> ShareResult {
    verdict(device, seq, v, Perspective::Received)
}

pub fn bytes(link: &str, direction: Direction, n: u64) -> LinkBytes {
    LinkBytes {
        link: ShortStr::new(link),
        conn: 1,
        direction,
        bytes: n,
    }
}

/// `up` bytes sent and `down` bytes received on `link` at `s` seconds.
pub fn both_ways(s: f64, link: &str, up: u64, down: u64) -> [Event; 2] {
    [
        ev(at(s), bytes(link, Direction::Up, up)),
        ev(at(s), bytes(link, Direction::Down, down)),
    ]
}

pub fn opened(device: u64) -> ConnectionOpened {
    ConnectionOpened {
        conn: device,
        peer: "127.0.0.1:3333".parse().unwrap(),
        local: "127.0.0.2:40000".parse().unwrap(),
        label: ShortStr::new("dev"),
    }
}

pub fn hashes(n: u64) -> HashesDone {
    HashesDone {
        device: None,
        hashes: n,
    }
}

pub fn log(role: &str, mut events: Vec<Event>) -> EventLog {
    events.sort_by_key(|e| e.ts_ns);
    EventLog {
        header: Header::new(role, "sv1"),
        events,
        truncated: false,
        skipped: 0,
    }
}

/// A configuration's logs under construction: push events, then measure.
pub struct Lab {
    pub name: String,
    pub window: Window,
    pub simnet: Vec<Event>,
    pub pool: Vec<Event>,
    /// Whether the pool writes events (a third-party pool does not).
    pub pool_logged: bool,
    pub fleets: Vec<Vec<Event>>,
    pub tap: Vec<Event>,
    pub proxy: Option<Vec<Event>>,
    /// A JDC at the farm site (A, B): the devices' job source; `pool_shares` then come from
    /// the pool's verdicts.
    pub jdc: Option<Vec<Event>>,
    /// The farm-side node's peer link in simnet's `LinkBytes`, if any.
    pub farm_peer: Option<String>,
    pub node: String,
    pub hash_budget_hps: f64,
    pub block_interval: Duration,
    pub usage: BTreeMap<String, ProcessUsage>,
}

impl Default for Lab {
    fn default() -> Self {
        Lab::new()
    }
}

impl Lab {
    pub fn new() -> Self {
        Lab {
            name: "sv1".into(),
            window: window(),
            simnet: Vec::new(),
            pool: Vec::new(),
            pool_logged: true,
            fleets: vec![Vec::new()],
            tap: Vec::new(),
            proxy: None,
            jdc: None,
            farm_peer: None,
            node: "pool".into(),
            hash_budget_hps: 0.0,
            block_interval: Duration::from_secs(10),
            usage: BTreeMap::new(),
        }
    }

    pub fn fleet(&mut self) -> &mut Vec<Event> {
        &mut self.fleets[0]
    }

    pub fn run(&self) -> ConfigRun {
        let mut logs = vec![
            RoleLog {
                name: "sv1.pool".into(),
                kind: RoleKind::Pool,
                site: Site::Pool,
                source: log("pool", self.pool.clone()).into(),
            },
            RoleLog {
                name: "sv1.tap".into(),
                kind: RoleKind::Tap,
                site: Site::Farm,
                source: log("tap", self.tap.clone()).into(),
            },
        ];
        if !self.pool_logged {
            logs.remove(0);
        }
        for (i, f) in self.fleets.iter().enumerate() {
            logs.push(RoleLog {
                name: format!("sv1.fleet{i}"),
                kind: RoleKind::Fleet,
                site: Site::Farm,
                source: log("fleet", f.clone()).into(),
            });
        }
        for (role, events) in [("proxy", &self.proxy), ("jdc", &self.jdc)] {
            if let Some(events) = events {
                logs.push(RoleLog {
                    name: format!("sv1.{role}"),
                    kind: RoleKind::Proxy,
                    site: Site::Farm,
                    source: log(role, events.clone()).into(),
                });
            }
        }
        ConfigRun {
            name: self.name.clone(),
            logs,
            simnet: LogSource::from(log("simnet", self.simnet.clone())),
            job_source_node: self.node.clone(),
            pool_workers: None,
            pool_accepted: Vec::new(),
            window: self.window,
            links: LinkSetup {
                wan: "wan".into(),
                rtt: Duration::from_millis(145),
                lan_rtt: Duration::from_micros(500),
                farm_node_peer_link: self.farm_peer.clone(),
                node_endpoints: vec!["rpc".into(), "zmq".into()],
            },
            pool_shares: self.pool_shares(),
            block_interval: self.block_interval,
            template_interval: Duration::from_secs(2),
            hash_budget_hps: self.hash_budget_hps,
            usage: self.usage.clone(),
            unlogged: Default::default(),
            estimation: Default::default(),
        }
    }

    /// Where `pool_shares` come from, as the lab decides it for these roles.
    pub fn pool_shares(&self) -> PoolShares {
        if self.jdc.is_some() {
            PoolShares::PoolVerdicts
        } else if self.proxy.is_some() {
            PoolShares::ProxyUpstream
        } else {
            PoolShares::None
        }
    }

    pub fn measure(&self) -> Measured {
        measure(&self.run()).expect("measures")
    }

    pub fn results(&self) -> ConfigResults {
        self.measure().results()
    }
}

/// Submitted, accepted, stale and unanswered.
pub fn verdict_counts(s: &Shares) -> (u64, u64, u64, u64) {
    (s.submitted, s.accepted, s.stale, s.unanswered)
}

/// `a` within `tol` (relative) of `b`.
pub fn near(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= b.abs() * tol + 1e-9
}
